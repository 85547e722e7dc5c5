"""`gpu-agent run` as the tests start it: once, waiting until it watches."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from support.env import agent_cmd
from support.pprof_tool import raw


class StderrLines:
    """A process's stderr lines, read by a thread as they come. A select() on the pipe
    before each readline() missed lines that came together: the reader's buffer held
    the second, and the pipe said nothing more (a three-worker suite waited 30 s for an
    agent's "not watching" line printed right after an "also watching" one). The pipe is
    the thread's alone from here: proc.communicate() then reads stdout only."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: "queue.Queue[str | None]" = queue.Queue()
        self.heard: list[str] = []
        err, proc.stderr = proc.stderr, None

        def read() -> None:
            for line in err:
                self.heard.append(line)
                self.queue.put(line)
            self.queue.put(None)

        self.thread = threading.Thread(target=read, daemon=True)
        self.thread.start()

    def wait(self, text: str, timeout: float = 30.0, app: "subprocess.Popen | None" = None, where=None) -> str:
        """The next line holding text. With app, the process the line is about: its exit
        before the line fails at once, with its own stderr (a three-worker suite once
        waited out the 30 s without saying whether the workload still ran); where(): more
        for the failure's message."""
        end, seen = time.monotonic() + timeout, []
        while time.monotonic() < end:
            if app is not None and app.poll() is not None:
                said = app.stderr.read()[-2000:]
                raise AssertionError(f"the workload exited ({app.returncode}) before the agent said {text!r}: {said}")
            try:
                line = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            seen.append(line)
            if text in line:
                return line
        state = "" if app is None else f" (the workload still running: {app.poll() is None})"
        more = f"\n{where()}" if where else ""
        raise AssertionError(f"never said {text!r}{state}: {''.join(seen)[-2000:]}{more}")

    def wait_all(self, texts: set[str], timeout: float = 30.0) -> list[str]:
        """Lines read until each of texts was in one; they are returned."""
        end, left, seen = time.monotonic() + timeout, set(texts), []
        while left and time.monotonic() < end:
            try:
                line = self.queue.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if line is None:  # the process's stderr ended
                break
            seen.append(line)
            left = {t for t in left if t not in line}
        assert not left, f"never said {sorted(left)}: {''.join(seen)[-2000:]}"
        return seen

    def all(self) -> str:
        """Every line read, once the process has ended."""
        self.thread.join(timeout=10)
        return "".join(self.heard)


class Agent:
    """`gpu-agent run` with 1 s intervals into out_dir; its samples read by Go pprof."""

    def __init__(self, out_dir: Path, *extra: str):
        self.out_dir = out_dir
        self._read: dict[tuple, list] = {}  # profiles read, by (name, size, mtime)
        self.proc = subprocess.Popen(
            agent_cmd("run", "--output-dir", out_dir, "--interval", "1s", *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The agent prints "watching ..." on stderr once every probe is attached.
        seen = []
        for line in self.proc.stderr:
            seen.append(line)
            if "watching every process" in line:  # not "also watching" a copy
                self.watching_line = line
                self.start_lines = seen
                break
        else:
            pytest.fail("agent did not start: " + "".join(seen))
        self._stderr: StderrLines | None = None  # read by a thread once a test waits on it

    def lines(self) -> StderrLines:
        """The agent's stderr lines from here on, as they come."""
        if self._stderr is None:
            self._stderr = StderrLines(self.proc)
        return self._stderr

    def wait_for_line(self, text: str, timeout: float = 30.0, app: "subprocess.Popen | None" = None) -> str:
        """The next stderr line holding text (StderrLines.wait), or a failure that says
        where the agent's threads wait."""
        return self.lines().wait(text, timeout, app, self.where)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        self.err = err if self._stderr is None else self._stderr.all()
        assert self.proc.returncode == 0, self.err
        return out

    def err_so_far(self) -> str:
        """Its stderr once it has exited, however it was read."""
        return self.proc.stderr.read() if self._stderr is None else self._stderr.all()

    def kill(self) -> None:
        """At a test's end: an agent the test left running goes, whatever state it is in."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def where(self) -> str:
        """Where the agent's threads are, for a failure's message: each thread's name,
        state and kernel wait (a wait that never ends says which call it is in)."""
        if self.proc.poll() is not None:
            return f"the agent exited ({self.proc.returncode})"
        out = []
        for task in sorted(Path(f"/proc/{self.proc.pid}/task").glob("*")):
            try:
                name = (task / "comm").read_text().strip()
                state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                stack = (task / "stack").read_text().split()[1::2][:6]  # root only
            except OSError:
                continue
            out.append(f"{task.name} {name} {state} {' < '.join(stack)}")
        return "agent threads:\n" + "\n".join(out)

    def samples(self):
        """Every profile's samples. A profile is read once: the agent writes each whole,
        by a rename (a test that polls reads only the new ones)."""
        out = []
        for f in sorted(self.out_dir.glob("*.pb.gz")):
            st = f.stat()
            key = (f.name, st.st_size, st.st_mtime_ns)
            if key not in self._read:
                self._read[key] = raw(f)
            out += self._read[key]
        return out
