"""Hostile probe arguments, fired through the real shim's probe sites by uid 65534
while an honest workload runs (issue 16, items 1, 4, 5 and 6).

Throughout, the agent stays up under its RSS bound, every refused record is
counted, and the honest workload's names, launches and GPU ns stay exact."""

from __future__ import annotations

import re
import subprocess
import time

from gpu_agent.probes import contract as C

from support.pprof_tool import pprof

from .faultkit import MOCK_APP, SHIM, attack, ground_truth, mock_env, settle

from . import attacker as A

HONEST = ("--paths", "cuLaunchKernel,cudaLaunchKernel", "--iters", "200", "--sleep-ms", "5")


def rec(kernel_id: int, corr: int, start: int, end: int, **kw) -> C.KernelRecord:
    r = C.KernelRecord()
    r.kernel_id, r.correlation_id, r.start_ns, r.end_ns = kernel_id, corr, start, end
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def attacker_samples(samples, pid: int):
    return [s for s in samples if s.labels.get("pid") == str(pid)]


def test_impossible_durations_and_weights_are_dropped_and_counted(node, honest, attacker, world_dir):
    """Item 1: a duration >= 2^63 ns reached pprof and crashed `gpu-agent run`."""
    h = honest(*HONEST)
    kid = C.kernel_id(b"_Z4evilv")
    s = A.Script(SHIM).full_name(kid, b"_Z4evilv")
    s.batch(
        [
            rec(kid, 1, 0, (1 << 63) + 5),  # past int64
            rec(kid, 2, 10, 1),  # ends before it starts
            rec(kid, 3, 0, 1 << 50),  # 13 days: past GA_MAX_KERNEL_NS
            rec(kid, 4, 0, 1000, weight=0xFFFFFFFF),
        ],  # a weight no window gives
        repeat=50,
    )
    before = node.metrics().get("impossible", 0)
    pid = attack(attacker, s, world_dir)
    h.wait()
    settle(node)
    assert node.metrics().get("impossible", 0) - before == 4 * 50
    node.stop()
    samples = node.samples()
    assert not [x for x in attacker_samples(samples, pid) if x.frames[0] == "_Z4evilv"]
    h.assert_exact(samples)


def claims_noted(node, pid: int) -> int:
    """The lost records the profiles say pid claimed past its bounds (Go pprof -comments)."""
    said = 0
    for f in sorted(node.agent.out_dir.glob("*.pb.gz")):
        for m in re.finditer(rf"pid {pid} \(\S*\) (\d+)", pprof("-comments", str(f))):
            said += int(m.group(1))
    return said


def test_forged_drop_counts_are_refused_and_counted_as_implausible(node, honest, attacker, world_dir):
    """Item 6: a garbage `dropped` argument pushed drop_cupti to 1.0e14. Issue 30: the
    refused claims are counted once each for the node, and in full in the sender's
    profile note."""
    h = honest(*HONEST)
    s = A.Script(SHIM).batch([], dropped=0xFFFFFFFF, repeat=100)
    before = node.metrics()
    pid = attack(attacker, s, world_dir)
    h.wait()
    settle(node)
    after = node.metrics()
    assert after.get("cupti", 0) == before.get("cupti", 0)
    assert after.get("implausible", 0) - before.get("implausible", 0) == 100
    node.stop()
    assert claims_noted(node, pid) == 100 * 0xFFFFFFFF
    h.assert_exact(node.samples())


def test_drop_counts_in_a_loop_stay_within_a_process_s_budget(node, attacker, world_dir):
    """Issue 30: batches each within the per-batch bound, fired in a loop, pushed the
    node's drop_cupti to 3.4e9. A process may report 2^24 lost records a second; its
    claims past that are refused, one count each for the node, and its profile says
    how many records it claimed."""
    s = A.Script(SHIM).batch([], dropped=C.MAX_BATCH_DROPS, repeat=200)
    before = node.metrics()
    started = time.monotonic()
    pid = attack(attacker, s, world_dir)
    seconds = time.monotonic() - started
    settle(node)
    after = node.metrics()
    added = after.get("cupti", 0) - before.get("cupti", 0)
    assert 0 < added <= C.MAX_BATCH_DROPS * (int(seconds) + 2), (added, seconds)
    refused = after.get("implausible", 0) - before.get("implausible", 0)
    assert refused >= 200 - (int(seconds) + 2), after
    assert added + refused * C.MAX_BATCH_DROPS == 200 * C.MAX_BATCH_DROPS
    node.stop()
    assert claims_noted(node, pid) == refused * C.MAX_BATCH_DROPS


def honest_names(tmp_path) -> list[bytes]:
    """The mangled names of the honest workload's kernels (a run without the shim)."""
    truth = tmp_path / "names.tsv"
    subprocess.run(
        [str(MOCK_APP), *HONEST[:2], "--iters", "1"], env=mock_env(truth), check=True, capture_output=True, timeout=60
    )
    return [k.encode() for k in ground_truth(truth)]


def test_no_process_can_rename_another_process_kernels(node, honest, attacker, world_dir, tmp_path):
    """Item 5: names were global and the first writer won, forever."""
    victims = honest_names(tmp_path)
    s = A.Script(SHIM)
    for name in victims:
        kid = C.kernel_id(name)
        s.full_name(kid, b"_Z6hijackv")  # the wrong name
        s.full_name(kid, (b"_Z6hijack" + b"x" * C.MAX_NAME_LEN)[: C.MAX_NAME_LEN])  # a cut one
    attack(attacker, s, world_dir)
    h = honest(*HONEST)
    h.wait()
    settle(node)
    assert node.metrics()["agent_name_spoofed"] == 2 * len(victims)
    node.stop()
    h.assert_exact(node.samples())


def test_a_name_flood_and_names_that_never_finish_stay_bounded(node, honest, attacker, world_dir):
    """Item 4: 10 000 64 KiB names took the agent past 512 MiB, and four names that
    never finished pinned a core for 25 s (chunks were re-sorted on every arrival)."""
    h = honest(*HONEST[:2], "--duration", "14", "--sleep-ms", "5")
    settle(node, 1.5)  # its names are in, and a window has used them
    s = A.Script(SHIM)
    for i in range(1200):  # 75 MiB of names that check out, past the 64 MiB bound
        name = b"_Z5flood%05d" % i
        name += b"f" * (C.MAX_NAME_LEN - len(name))
        s.full_name(C.kernel_id(name), name).sleep(8)  # paced: past the ring, into the agent
    for i in range(4):  # every chunk but the last, again and again
        name = b"_Z7neverend%d" % i + b"n" * C.MAX_NAME_LEN
        for off in range(0, C.MAX_NAME_LEN - C.NAME_CHUNK, C.NAME_CHUNK):
            s.name_chunk(i + 7, C.MAX_NAME_LEN, off, name[off : off + C.NAME_CHUNK], repeat=200)
    cpu0 = node.cpu_s()
    attack(attacker, s, world_dir)
    h.wait()
    settle(node)
    node.assert_up()
    assert node.cpu_s() - cpu0 < 30, "name assembly is not linear"
    m = node.metrics()
    # What did not fit is counted: evicted names, or chunks the ring had no room for.
    assert m["agent_names_evicted"] + m["ringbuf_full"] > 0
    node.stop()
    h.assert_exact(node.samples())
