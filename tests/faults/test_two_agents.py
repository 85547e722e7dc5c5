"""Two agents on one host (a user's `record` beside the system agent, or a
DaemonSet's rolling update): the second one to attach gets every kernel name too.

The shim announces a kernel's name once, when it first sees it, and again when
the attach semaphore rises from 0. A second agent does not raise it: the kernel
counts a uprobe's semaphore once per probe, not once per consumer (seen here:
two agents, semaphore 1). So each agent, as it starts, holds the `replay`
probe's semaphore for REPLAY_HOLD_S, and the shim announces its names again, at
the rise and every 0.8 s while it stays up: a second agent that asks while the
first's request is up sees no rise, and gets the next of those."""

from __future__ import annotations

import subprocess
import time

import pytest

from support.env import MOCK_APP, mock_env, need_ebpf, private_shim
from support.pprof_tool import raw
from gpu_agent.probes import shim_attach
from gpu_agent.join.collector import Collector

KERNEL = "k_cuLaunchKernel(float*, int)"


def _poll_until(collectors, cond, timeout=60.0):
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        for c in collectors:
            c.poll(50)
    return cond()


def _kernel_names(col: Collector) -> set[str]:
    builder, _ = col.build_profile()
    p = builder.to_proto()
    return {p.string_table[f.name] for f in p.function if p.string_table[f.filename] == "CUDA_KERNEL"}


@pytest.mark.parametrize("when", ["after-the-first-request", "during-the-first-request"])
def test_an_agent_that_attaches_later_gets_the_names(tmp_path, built, monkeypatch, when):
    """during: the first agent's request stays up all through (a hold of 60 s), so
    the second's raises nothing; before the shim replayed while a request stayed up,
    the second got no name (an agent started within 1.5 s of another: 3 runs of 4
    had every kernel `[unknown kernel ...]`)."""
    need_ebpf()
    # Our own copy (another inode): no other agent on this host attaches to it.
    shim = private_shim(tmp_path / "shim")
    hold = shim_attach.REPLAY_HOLD_S
    if when == "during-the-first-request":
        monkeypatch.setattr(shim_attach, "REPLAY_HOLD_S", 60.0)
    first = Collector(str(shim), python_stacks=False)
    first.open()
    monkeypatch.setattr(shim_attach, "REPLAY_HOLD_S", hold)
    opened = time.monotonic()
    second = None
    app = subprocess.Popen(
        [str(MOCK_APP), "--paths", "cuLaunchKernel", "--duration", "60", "--sleep-ms", "2"],
        env=mock_env(CUDA_INJECTION64_PATH=str(shim)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _poll_until([first], lambda: first.session.names), "the first agent got no name"
        if when == "after-the-first-request":
            _poll_until([first], lambda: time.monotonic() > opened + hold + 0.3)
        second = Collector(str(shim), python_stacks=False)
        second.open()
        if when == "during-the-first-request":
            assert first.session.attachments.replay_holds, "the first agent's request ended"
        assert _poll_until([first, second], lambda: second.counters()["kernels"] > 50)
        assert _poll_until([first, second], lambda: second.session.names, timeout=10)
        names = _kernel_names(second)
        first_names = _kernel_names(first)
    finally:
        app.kill()
        app.wait()
        first.close()
        if second is not None:
            second.close()
    assert KERNEL in names and KERNEL in first_names, (names, first_names)
    assert not [n for n in names if n.startswith("[unknown kernel")], names


def _kernel_totals(builder, path) -> dict[str, list[int]]:
    """Kernel name -> [GPU ns, launches] of a profile over every stack, read by Go's pprof."""
    builder.write(path)
    out: dict[str, list[int]] = {}
    for smp in raw(path):
        acc = out.setdefault(smp.frames[0], [0, 0])
        acc[0] += smp.values[0]
        acc[1] += smp.values[1]
    return out


def test_two_agents_attached_together_give_identical_profiles(tmp_path, built):
    """Both agents' programs run on every probe hit: the same records, the same names,
    the same totals, whichever of them a user looks at."""
    need_ebpf()
    shim = private_shim(tmp_path / "shim")
    agents = [Collector(str(shim), python_stacks=False) for _ in range(2)]
    for a in agents:
        a.open()
    try:
        app = subprocess.run(
            [
                str(MOCK_APP),
                "--paths",
                "cuLaunchKernel,cudaLaunchKernel,cuGraphLaunch",
                "--iters",
                "200",
                "--sleep-ms",
                "1",
            ],
            env=mock_env(CUDA_INJECTION64_PATH=str(shim)),
            capture_output=True,
            timeout=120,
        )
        assert app.returncode == 0, app.stderr
        _poll_until(agents, lambda: False, timeout=2.0)  # the exit flush's last batches
        totals = [_kernel_totals(a.build_profile()[0], tmp_path / f"agent{i}.pb.gz") for i, a in enumerate(agents)]
    finally:
        for a in agents:
            a.close()
    assert totals[0] and not [k for k in totals[0] if k.startswith("[unknown kernel")], totals[0]
    assert totals[0] == totals[1]
