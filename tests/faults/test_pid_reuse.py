"""A new process given a dead attacker's pid (issue 16, item 7): with a forced pid
reuse, 1 714 of a new process's 3 000 launches went under the dead process's
stack. Per-process BPF state is keyed by (pid, start time), so the new process
starts clean even inside the window in which the old one exited."""

from __future__ import annotations

from pathlib import Path

import pytest

from .faultkit import SHIM, attack, settle

from . import attacker as A

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")
FAKE = [0x7E57_0000_0000 + 16 * i for i in range(8)]  # frames no real process has


def test_a_reused_pid_never_inherits_the_dead_process_stacks(node, honest, attacker, world_dir):
    s = A.Script(SHIM)
    # Samples for the correlation ids the honest process will use, with a made-up stack.
    s.correlation(1, 211, 0xA1, FAKE, 1)
    for corr in range(2, 4000):
        s.correlation(corr, 211, 0xA1, FAKE, 1)
    dead = attack(attacker, s, world_dir)
    h = None
    for _ in range(50):  # the next fork gets dead's pid, unless another process wins it
        NS_LAST_PID.write_text(str(dead - 1))
        h = honest("--paths", "cuLaunchKernel", "--iters", "500", "--sleep-ms", "2")
        if h.proc.pid == dead:
            break
        h.wait()
    else:
        pytest.fail(f"could not get pid {dead} again")
    h.wait()
    settle(node)
    node.stop()
    samples = node.samples()
    mine = [x for x in samples if x.labels.get("pid") == str(dead)]
    assert {x.labels["comm"] for x in mine} == {"mock_workload"}
    sampled = [x for x in mine if "[unsampled]" not in x.frames]
    assert sampled, "no sampled launches"
    for x in sampled:
        assert "launch_cuLaunchKernel" in x.frames, x.frames  # never the dead one's stack
    h.assert_exact(samples)
