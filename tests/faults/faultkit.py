"""The fault suite's parts: the attacker (uid 65534, the real shim), a running
`gpu-agent run`, and an honest workload whose totals must stay exact meanwhile."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

import pytest

from support.agent import Agent
from support.env import MOCK_APP, ground_truth, mock_env, need_ebpf, private_shim
from support.env import SHIM as BUILT_SHIM

from . import attacker as A


def _faults_shim() -> Path:
    """The fault suite's own copy of the shim, one a pytest process, in a directory
    uid 65534 can read, under a name no agent's discovery looks for: its floods
    (75 MiB of names, a million `attach` fires, forged batches) reach only the agents
    of its tests, not an agent another worker's test runs on the shared shim (a
    three-worker suite read a `record` with no kernel names and a `record --trace`
    with no kernels while they ran; the uprobes are the file's)."""
    d = Path(tempfile.mkdtemp(prefix="gpu-agent-faults-shim-"))
    d.chmod(0o755)
    atexit.register(shutil.rmtree, d, True)
    return private_shim(d) if BUILT_SHIM.exists() else d / "missing.so"


SHIM = _faults_shim()

# What the agent may use while it is attacked (it idles near 100 MiB here; the
# DaemonSet's limit is 512 Mi). Stated in docs/security.md.
RSS_BOUND_MIB = 320


@pytest.fixture(scope="session")
def world_dir():
    """A directory that uid 65534 can read (pytest's tmp dirs are root-only)."""
    d = Path(tempfile.mkdtemp(prefix="gpu-agent-faults-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def attacker(world_dir, built):
    need_ebpf()
    return A.build(world_dir / "bin")


def attack(exe: Path, script: A.Script, world_dir: Path, timeout: float = 120, shim: Path = SHIM) -> int:
    """Runs the script as uid 65534 to its end (through `shim`, which world_dir's
    users can read); returns the attacker's pid."""
    path = script.write(Path(tempfile.mkstemp(dir=world_dir, suffix=".attack")[1]))
    p = A.run(exe, shim, path)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"attacker failed ({p.returncode}): {err}"
    lines = out.split()
    assert lines[-2:] == ["done", str(script.fires)], out
    return int(lines[1])


class Node:
    """`gpu-agent run` (1 s windows, /metrics on a free port) under attack."""

    def __init__(self, out_dir: Path, *extra: str):
        self.agent = Agent(out_dir, "--metrics-addr", "127.0.0.1:0", "--shim", SHIM, *extra)
        self.proc = self.agent.proc
        # The "watching" line names the metrics address.
        m = re.search(r"metrics on (http://\S+/metrics)", self.agent.watching_line)
        assert m, self.agent.watching_line
        self.metrics_url = m.group(1)

    def metrics(self) -> dict[str, float]:
        """`gpu_agent_drops` by reason and the other plain counters."""
        text = urllib.request.urlopen(self.metrics_url, timeout=10).read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            m = re.match(r'^gpu_agent_drops_total\{reason="(\w+)"\}\s+(\S+)$', line)
            if m:
                out[m.group(1)] = float(m.group(2))
        return out

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmHWM")

    def cpu_s(self) -> float:
        f = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def assert_up(self) -> None:
        if self.proc.poll() is not None:
            err = self.agent.err_so_far()
            raise AssertionError("the agent died: " + err)
        assert self.rss_mib() < RSS_BOUND_MIB, f"agent peak RSS {self.rss_mib():.0f} MiB"

    def stop(self) -> str:
        self.assert_up()
        return self.agent.stop()

    def samples(self):
        return self.agent.samples()


@pytest.fixture
def node(tmp_path, built):
    need_ebpf()
    n = Node(tmp_path / "profiles")
    yield n
    n.agent.kill()


class Honest:
    """The mock workload through the real shim, continuous collection, with the
    mock driver's exact per-kernel ground truth."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None):
        self.truth_path = Path(tempfile.mkstemp(dir=tmp, suffix=".truth.tsv")[1])
        self.proc = subprocess.Popen(
            [str(MOCK_APP), *args],
            env=mock_env(
                self.truth_path, **{"CUDA_INJECTION64_PATH": str(SHIM), "GPU_AGENT_FLUSH_MS": "100", **(env or {})}
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait(self) -> None:
        _, err = self.proc.communicate(timeout=120)
        assert self.proc.returncode == 0, err

    def truth(self) -> dict[str, tuple[int, int]]:
        return ground_truth(self.truth_path)

    def assert_exact(self, samples) -> None:
        """Every kernel of the honest pid: its name, launches and GPU ns, exactly."""
        truth = self.truth()
        ns, n = defaultdict(int), defaultdict(int)
        for s in samples:
            if s.labels.get("pid") == str(self.proc.pid):
                ns[s.system_names[0]] += s.values[0]
                n[s.system_names[0]] += s.values[1]
        assert dict(n) == {k: v[0] for k, v in truth.items()}, f"launches {dict(n)} != truth {truth}"
        assert dict(ns) == {k: v[1] for k, v in truth.items()}, f"GPU ns {dict(ns)} != truth {truth}"

    def assert_exact_once_written(self, node: Node, timeout: float = 60.0) -> None:
        """assert_exact on the running node's profiles, once they hold as many of this
        pid's launches as it made (or at the deadline): its intervals waited for, not
        slept for (a three-worker suite read none of them 4 s after the process that
        held them was gone)."""
        want, pid = sum(v[0] for v in self.truth().values()), str(self.proc.pid)
        deadline, samples = time.monotonic() + timeout, node.samples()
        while sum(s.values[1] for s in samples if s.labels.get("pid") == pid) < want and time.monotonic() < deadline:
            time.sleep(0.5)
            samples = node.samples()
        self.assert_exact(samples)


@pytest.fixture
def honest(tmp_path):
    started = []

    def start(*args: str, env: dict | None = None) -> Honest:
        h = Honest(tmp_path, *args, env=env)
        started.append(h)
        return h

    yield start
    for h in started:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()


def settle(node: Node, seconds: float = 2.5) -> None:
    """Waits for the windows that hold what happened so far to be written."""
    time.sleep(seconds)


def counted(node: Node, name: str, want: float, base: float = 0.0, timeout: float = 60.0) -> float:
    """The counter `name` less `base`, once it reached `want` (or at the deadline), then
    once more after settle(): a count waited for, not slept for (a loaded two-worker run
    read 0 of 4 after a 2.5 s sleep), and none past it."""
    deadline = time.monotonic() + timeout
    while node.metrics().get(name, 0) - base < want and time.monotonic() < deadline:
        time.sleep(0.2)
    settle(node, 1.0)
    return node.metrics().get(name, 0) - base
