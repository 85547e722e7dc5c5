"""One `gpu-agent run` shared by a module's tests, and the workloads run under it.

The middle tier between a test's own `gpu-agent record` (a BPF compile, attach and
detach each: about 6 s) and test_ui's store (one agent, one fixed set of
workloads). Each workload is one process with its own shim settings, injected as
`record` injects it (CUDA_INJECTION64_PATH, GPU_AGENT_DUTY_CYCLE: see
agent/gpu_agent/commands/record.py), and read back by its pid from the interval
profiles the agent wrote (their "pid" label), summed.

When is a process's part of the profiles complete? The agent's contract
(join/placement.py, join/collector.py):
  * the shim hands every record, name and `published` mark over through uprobes,
    in its own thread, before its process is gone (its exit handler flushes the
    last activity buffer): once waitpid() returns, all of it is in BPF's maps;
  * a drain places each row in an interval its span overlaps or, if that interval
    is out already, in the oldest one still held: never in one opened after the
    drain; rows without a span (continuous collection) go to the interval open at
    the drain;
  * intervals are shipped oldest first, each once every live windowed shim has
    published past its end (an exited process holds nothing), and each shipped
    interval that holds a kernel is written and said on stdout ("-> PATH").
So after the workloads have exited, one more process (the marker: one kernel,
continuous collection) runs, and the test waits until a written profile holds the
marker's pid. The marker's rows were placed by a drain after the workloads' exits,
into the interval then open; the workloads' rows were placed by that drain or an
earlier one, into that interval or an older one; the marker's interval is out, so
every older one is. Nothing is a sleep: the wait reads the agent's stdout, line by
line, with a deadline (the agent holds an interval at most 40 s: MAX_HOLD_S).

The agent watches a private copy of the shim (env.private_shim) and discovers no
other copy, so that another agent on the host (a system agent) sees none of these
workloads and this one sees none of theirs; samples of any other pid are left out
anyway.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.agent import Agent
from support.env import MOCK_APP, SHIM, mock_env, need_ebpf, private_shim
from support.pprof_tool import Sample, raw

# The longest a workload's profiles may take once it exited: the agent holds an
# interval at most 40 s (join/placement.py's MAX_HOLD_S), plus an interval and its write.
COMPLETE_TIMEOUT_S = 60.0


@dataclass
class Workload:
    """One process run under the shared agent: its exit, its output, and (collect())
    its samples from every profile the agent wrote while and after it ran."""

    pid: int
    returncode: int
    stdout: str
    stderr: str
    since: int = 0  # the agent's profiles said before it started (SharedAgent._written)
    samples: list[Sample] = field(default_factory=list)

    def kernel_launches(self) -> int:
        """The launches its kernel samples stand for, all kernels."""
        return sum(launches for _, launches in self.kernel_totals().values())

    def kernel_totals(self) -> dict[str, list[int]]:
        """mangled kernel name -> [gpu_ns, launches] of its kernel samples (as
        support/windows.kernel_totals reads one profile)."""
        prof: dict[str, list[int]] = {}
        for s in self.samples:
            if s.files and s.files[0] == "CUDA_KERNEL":
                acc = prof.setdefault(s.system_names[0] or s.frames[0], [0, 0])
                acc[0] += s.values[0]
                acc[1] += s.values[1]
        return prof


class SharedAgent:
    """`gpu-agent run` (1 s intervals) over a private copy of one shim."""

    def __init__(self, directory: Path, shim: Path = SHIM):
        self.source = Path(shim)
        self.shim = private_shim(directory / "shim", self.source)
        self.out = directory / "profiles"
        self.agent = Agent(self.out, "--shim", self.shim, "--discover-interval", "0")
        # Its stdout and stderr are read as they come (a full pipe would stop it);
        # stdout's lines go to whoever waits for a profile.
        self.lines: queue.Queue = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = list(self.agent.start_lines)
        self._written: list[Path] = []  # every profile the agent said it wrote, in order
        self._read: dict[Path, list[Sample]] = {}
        self._since: dict[int, int] = {}
        self._readers = [
            threading.Thread(target=self._pump, args=(self.agent.proc.stdout, self.stdout, True), daemon=True),
            threading.Thread(target=self._pump, args=(self.agent.proc.stderr, self.stderr, False), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _pump(self, stream, keep: list[str], tell: bool) -> None:
        for line in stream:
            keep.append(line)
            if tell:
                self.lines.put(line)
        if tell:
            self.lines.put(None)  # the agent is gone

    # -- workloads -------------------------------------------------------------
    def env(
        self, ground_truth: Path | None = None, duty_cycle: int | None = None, budget: float | None = None, **extra: str
    ) -> dict:
        """The mock's environment with the shim injected as `record` injects it, and
        `record --duty-cycle N`'s GPU_AGENT_DUTY_CYCLE (without it: 1, as record's default)
        or `record --budget B`'s (the shim plans the windows: no fixed schedule)."""
        e = mock_env(ground_truth, **extra)
        e["CUDA_INJECTION64_PATH"] = str(self.shim)
        if duty_cycle is not None:
            e["GPU_AGENT_DUTY_CYCLE"] = str(duty_cycle)
        elif budget is not None:  # as agent/gpu_agent/commands/record.py
            e["GPU_AGENT_OVERHEAD_BUDGET"] = f"{budget:.2f}"
            e.pop("GPU_AGENT_DUTY_CYCLE", None)
            e.pop("GPU_AGENT_WINDOW_MS", None)
        return e

    def spawn(self, cmd: list, env: dict) -> subprocess.Popen:
        self._alive()
        proc = subprocess.Popen(
            [str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self._since[proc.pid] = len(self._written)  # a profile said before it started is not its
        return proc

    def wait(self, proc: subprocess.Popen, timeout: float = 120) -> Workload:
        """The process's end (its output read to the end); its samples come with collect()."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        return Workload(proc.pid, proc.returncode, out, err, self._since.pop(proc.pid, 0))

    def run(self, cmd: list, env: dict, timeout: float = 120) -> Workload:
        """One process, start to end, and its samples once they are complete."""
        w = self.wait(self.spawn(cmd, env), timeout)
        self.collect(w)
        return w

    def collect(self, *workloads: Workload, timeout: float = COMPLETE_TIMEOUT_S) -> None:
        """Each (ended) workload's samples, once every profile that can hold them is
        written (the module's docstring says why this is complete)."""
        marker_cmd = [MOCK_APP, "--paths", "cuLaunchKernel", "--iters", "1"]
        marker = self.wait(self.spawn(marker_cmd, self.env(GPU_AGENT_DEBUG="1")), timeout=60)
        assert marker.returncode == 0, marker.stderr[-2000:]
        deadline = time.monotonic() + timeout
        while not any(s.labels.get("pid") == str(marker.pid) for s in self.samples_since(marker.since)):
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(0.0, left)) if left > 0 else None
            except queue.Empty:
                line = None
            if line is None:
                self._alive()
                pytest.fail(
                    f"no profile of the shared agent holds the marker (pid {marker.pid}) {timeout:.0f} s after "
                    f"the workloads {[w.pid for w in workloads]} exited: their profiles are not known to be "
                    "complete (the agent holds an interval at most 40 s). Its last lines:\n"
                    + "".join(self.stdout[-10:] + self.stderr[-10:])
                    + "The marker's:\n"
                    + marker.stderr[-2000:]
                )
            if " -> " in line:
                self._written.append(Path(line.rsplit(" -> ", 1)[1].strip()))
        # Every profile said up to the marker's, from the first said after it started.
        for w in workloads:
            w.samples = [s for s in self.samples_since(w.since) if s.labels.get("pid") == str(w.pid)]

    def samples_since(self, n: int) -> list[Sample]:
        """Every sample of the profiles said so far, but for the first n."""
        return [s for p in self._written[n:] for s in self._samples(p)]

    def _samples(self, path: Path) -> list[Sample]:
        """A written profile as Go pprof reads it (read once: the agent writes each whole, once)."""
        if path not in self._read:
            self._read[path] = raw(path)
        return self._read[path]

    def _alive(self) -> None:
        if self.agent.proc.poll() is not None:
            for t in self._readers:
                t.join(timeout=5)
            pytest.fail(f"the shared agent exited ({self.agent.proc.returncode}):\n" + "".join(self.stderr[-20:]))

    def stop(self) -> None:
        """SIGTERM; it must exit 0 (every held interval written)."""
        if self.agent.proc.poll() is None:
            self.agent.proc.terminate()
        try:
            self.agent.proc.wait(timeout=60)
        finally:
            self.agent.kill()
            for t in self._readers:
                t.join(timeout=5)
        assert self.agent.proc.returncode == 0, "".join(self.stderr[-20:])


class SharedAgents:
    """A module's shared agents, one shim at a time: asking for another shim stops the
    agent of the last one (idle agents stay off the timing tests' CPUs), so a module
    keeps the tests of one shim together. A context manager: all stop at its end."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.current: SharedAgent | None = None
        self._n = 0

    def __call__(self, shim: Path = SHIM) -> SharedAgent:
        if self.current is not None and self.current.source == Path(shim):
            self.current._alive()
            return self.current
        self.close()
        self._n += 1
        self.current = SharedAgent(self.directory / f"agent{self._n}", shim)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            current, self.current = self.current, None
            current.stop()

    def __enter__(self) -> "SharedAgents":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def shared_agents(tmp_path_factory):
    """The body of a module's fixture, which each module that shares agents declares:

        @pytest.fixture(scope="module")
        def agents(tmp_path_factory, built):
            yield from shared_agents(tmp_path_factory)

    agents(shim) is then the module's agent of that shim (default: the built one)."""
    need_ebpf()
    with SharedAgents(tmp_path_factory.mktemp("agents")) as agents:
        yield agents
