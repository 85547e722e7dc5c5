"""Events that race a window's last drain (Collector.drain), through real eBPF.

A probe sends a kernel's name before it adds the kernel's record, and a process
adds its last records before it exits. So:
- a name sent after the drain's first ring-buffer poll, with its record taken by
  the drain, is in that window's profile (it read "[unknown kernel 0x...]");
- an exit read after the drain waits until the next drain has taken the records
  the process added after this one: they keep its comm and stacks (a window later
  they read "?" and "[stack unavailable]": CI saw both).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gpu_agent.probes import contract as C
from gpu_agent.join.collector import Collector
from support.pprof_tool import raw

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

NAME = b"_Z11racy_kernelPf"
KID = C.kernel_id(NAME)
STACK = 0xB7
FRAMES = [0x401000 + 16 * i for i in range(5)]


def start(exe: Path, script: Path) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([str(exe), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return p, int(p.stdout.readline().split()[1])


def go_on(p: subprocess.Popen) -> None:
    p.stdin.write("go\n")
    p.stdin.flush()


def wait_for_kernels(col: Collector, n: int) -> None:
    """Until BPF has aggregated n records; nothing polls the ring buffer meanwhile."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and col.session.counters()["kernels"] < n:
        time.sleep(0.02)
    assert col.session.counters()["kernels"] >= n


def window(col: Collector, path: Path) -> list:
    builder, _ = col.build_profile()
    builder.write(path)
    return [s for s in raw(path) if s.frames[0] != "[unsampled]"]


def one_record_then_another_and_exit(lib: Path, exe: Path, tmp_path: Path) -> tuple[Collector, subprocess.Popen, int]:
    """A process that adds a record and waits (for go_on), then adds another and
    exits; an open Collector that has aggregated the first."""
    script = (
        F.Script()
        .attach()
        .full_name(KID, NAME)
        .corr(7, 211, STACK, FRAMES, 1)
        .batch([F.rec(KID, 7, 1000)])
        .wait()
        .corr(8, 211, STACK, FRAMES, 1)
        .batch([F.rec(KID, 8, 2000)])
        .write(tmp_path / "s.bin")
    )
    col = Collector(str(lib), python_stacks=False)
    col.open()
    p, pid = start(exe, script)
    try:
        assert p.stdout.readline().startswith("wait")
        wait_for_kernels(col, 1)
    except BaseException:
        p.kill()
        col.close()
        raise
    return col, p, pid


def test_a_name_sent_during_the_last_drain_is_in_the_profile(firer, tmp_path):
    lib, exe = firer
    script = (
        F.Script()
        .attach()
        .wait()
        .full_name(KID, NAME)
        .corr(7, 211, STACK, FRAMES, 1)
        .batch([F.rec(KID, 7, 1000)])
        .wait()
        .write(tmp_path / "s.bin")
    )
    col = Collector(str(lib), python_stacks=False)
    col.open()
    p, pid = start(exe, script)
    try:
        assert p.stdout.readline().startswith("wait")
        deadline = time.monotonic() + 10
        while pid not in col.procs and time.monotonic() < deadline:
            col.poll(50)  # its attach: the agent knows the process
        real_drain = col.session.drain

        def drain_after_the_first_poll():
            go_on(p)  # the name and the record, after drain()'s first poll
            assert p.stdout.readline().startswith("wait")
            wait_for_kernels(col, 1)
            return real_drain()

        col.session.drain = drain_after_the_first_poll
        samples = window(col, tmp_path / "w1.pb.gz")
        col.session.drain = real_drain
        assert [(s.frames[0], s.values[1]) for s in samples] == [("racy_kernel(float*)", 1)], samples
        go_on(p)
        assert p.wait(timeout=10) == 0
    finally:
        p.kill()
        col.close()


def test_records_after_the_last_drain_keep_their_process_when_it_exits(firer, tmp_path):
    lib, exe = firer
    col, p, pid = one_record_then_another_and_exit(lib, exe, tmp_path)
    try:
        real_drain = col.session.drain

        def drain_then_the_process_ends():
            d = real_drain()
            go_on(p)  # one more record, then its exit: both after this drain
            assert p.wait(timeout=10) == 0
            wait_for_kernels(col, 2)
            return d

        col.session.drain = drain_then_the_process_ends
        first = window(col, tmp_path / "w1.pb.gz")
        col.session.drain = real_drain
        second = window(col, tmp_path / "w2.pb.gz")
    finally:
        p.kill()
        col.close()
    comm = exe.name[:15]
    assert [(s.values[0], s.labels["comm"]) for s in first] == [(1000, comm)], first
    assert [(s.values[0], s.labels["comm"]) for s in second] == [(2000, comm)], second
    assert second[0].frames == first[0].frames and "[stack unavailable]" not in first[0].frames
    assert pid not in col.procs  # forgotten after the window that held its last records


def test_intervals_given_out_together_keep_a_process_that_exited_in_the_last(firer, tmp_path):
    """Intervals held for their shims are given out together (ready_profiles). The
    process forgotten after the first was built (its exit before the oldest interval
    still held) read comm "?" and [stack unavailable] in the next: the parallel
    suite's test_run and test_pid_reuse. Now forgetting waits for all of them."""
    lib, exe = firer
    col, p, pid = one_record_then_another_and_exit(lib, exe, tmp_path)
    try:
        col.close_interval()  # its first record; nothing given out yet
        go_on(p)  # its second record, then its exit
        assert p.wait(timeout=10) == 0
        wait_for_kernels(col, 2)
        deadline = time.monotonic() + 10
        while not (pid in col.procs and col.procs[pid].exited) and time.monotonic() < deadline:
            col.poll(50)
        assert col.procs[pid].exited
        col.close_interval()  # the second record, in an interval begun before the exit
        col.close_interval()  # one more: the oldest held now began after the exit
        out = col.ready_profiles(final=True)
    finally:
        p.kill()
        col.close()
    got = []
    for i, w in enumerate(out):
        w.profile.write(tmp_path / f"w{i}.pb.gz")
        got += [(s.values[0], s.labels["comm"], s.frames[1:]) for s in raw(tmp_path / f"w{i}.pb.gz")]
    comm = exe.name[:15]
    assert [(ns, c) for ns, c, _ in got] == [(1000, comm), (2000, comm)], got
    assert got[0][2] == got[1][2] and "[stack unavailable]" not in got[0][2], got
    assert pid not in col.procs  # forgotten once both were built
