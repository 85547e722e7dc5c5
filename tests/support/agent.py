"""`gpu-agent run` as the tests start it: once, waiting until it watches."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from support.env import agent_cmd
from support.pprof_tool import raw


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

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, self.err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, self.err
        return out

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
