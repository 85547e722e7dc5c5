"""BpfSession against real eBPF: the probe firer (tests/probe_firer) fires the
contract's probes with crafted data and every number must come back exactly.

Needs root; builds the firer with gcc into a temp dir.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.env import need_ebpf
from gpu_agent.probes import contract as C
from gpu_agent.probes import stapsdt
from gpu_agent.probes.bpf_session import READ_USER_UNCHECKED, BpfSession, compile_flags
from gpu_agent.probes.shim_attach import DATA_PROBES
from gpu_agent.probes.drain import AggKey, AggVal

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

S1, S2, S3 = 0xA1, 0xA2, 0xA3
FRAMES1 = [0x401000 + 16 * i for i in range(10)]
FRAMES2 = [0x7F0000001000 + i for i in range(70)]  # more than GA_MAX_FRAMES: cut to 64
FRAMES3 = [0x500000, 0x500100, 0x500200]
LONG_NAME = b"_Z" + bytes(ord("a") + i % 26 for i in range(5998))  # 6000 bytes, 12 chunks
K2_NAME = b"x" * 512 + b"y" * 88
# Kernel ids are the FNV-1a 64 hash of the name (the agent checks it); K4, K5 unnamed.
K1, K2, K3 = C.kernel_id(LONG_NAME), C.kernel_id(K2_NAME), C.kernel_id(b"graph_kernel")
K4, K5 = 0x4444, 0x5555
GRAPH_NS = [10, 20, 30, 40, 50, 60]


class Events:
    def __init__(self):
        self.stacks: list[tuple[int, int, int]] = []  # (tgid, stack id, start tag)
        self.exits: list[int] = []

    def start_of(self, tgid: int) -> int:
        """The process's start tag, as its NEW_STACK events carry it."""
        tags = {st for t, _, st in self.stacks if t == tgid}
        assert len(tags) == 1, tags
        return tags.pop()


def _open(lib: Path, ev: Events) -> BpfSession:
    s = BpfSession(str(lib), on_new_stack=lambda t, i, st: ev.stacks.append((t, i, st)), on_proc_exit=ev.exits.append)
    s.open()
    return s


def _main_script() -> F.Script:
    sc = F.Script()
    sc.corr(100, 211, S1, FRAMES1, 4)
    sc.corr(101, 211, S1, FRAMES1, 4, alt=True)  # same stack, second probe site
    sc.corr(200, 13, S2, FRAMES2, 2)
    sc.corr(300, 300, S3, FRAMES3, 1, alt=True)  # graph launch, forced sample
    sc.full_name(K1, LONG_NAME)
    sc.full_name(K1, LONG_NAME)  # replay (agent attached again)
    sc.name(K2, 600, 512, b"y" * 88)  # out of order
    sc.name(K2, 600, 0, b"x" * 512)
    sc.name(K2, 600, 0, b"x" * 512)  # chunk for a complete name
    sc.full_name(K3, b"graph_kernel")
    sc.batch(
        [
            F.rec(K1, 100, 1000),
            F.rec(K2, 101, 2000, weight=10),
            F.rec(K2, 102, 500, weight=10),
            F.rec(K1, 200, 300, device=1, stream=3, weight=1),
        ]
        + [F.rec(K3, 300, ns, stream=5, graph_id=9, node=i + 1) for i, ns in enumerate(GRAPH_NS)],
        dropped=3,
    )
    sc.batch([F.rec(K4, 9999, 1, start=i) for i in range(C.BATCH_MAX)])
    bad_end = F.rec(K4, 9999, 5)
    bad_end.end_ns = bad_end.start_ns - 1
    flagged = F.rec(K4, 9999, 9)
    flagged.flags = C.REC_IMPOSSIBLE
    sc.batch(
        [
            bad_end,
            F.rec(0, 9999, 5),
            F.rec(K4, 9999, 7),
            flagged,
            F.rec(K4, 9999, C.MAX_KERNEL_NS + 1),
            F.rec(K4, 9999, 3, weight=C.MAX_RECORD_WEIGHT + 1),
        ]
    )
    sc.batch([], dropped=C.MAX_BATCH_DROPS + 1)  # a forged drop count
    sc.batch([F.rec(K4, 9999, 1000)] * 2, record_size=60)  # wrong record size
    sc.batch([F.rec(K4, 9999, 1000)] * (C.BATCH_MAX + 1), dropped=2)  # count too large
    sc.attach()
    return sc


def _poll_until(session: BpfSession, cond, timeout=5.0) -> None:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        session.poll(50)
    session.poll(0)


@pytest.fixture(scope="class")
def main_run(firer, tmp_path_factory):
    lib, exe = firer
    ev = Events()
    s = _open(lib, ev)
    try:
        before = s.counters()
        path = _main_script().write(tmp_path_factory.mktemp("script") / "main.bin")
        # Started after open(): covered because probes are attached by file, not pid.
        p = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        pid = int(p.stdout.split()[1])
        _poll_until(s, lambda: pid in ev.exits)
        drain = s.drain()
        yield dict(s=s, ev=ev, pid=pid, drain=drain, before=before, stdout=p.stdout)
    finally:
        s.close()


def _delta(run) -> dict[str, int]:
    after = run["drain"].counters
    return {k: after[k] - run["before"].get(k, 0) for k in after}


def mine(agg: dict, pid: int, ev: "Events") -> dict:
    """pid's rows, start tag checked (every row carries the process's own) and
    cleared, so that they compare with hand-written keys."""
    rows = {k: v for k, v in agg.items() if k.tgid == pid}
    tag = ev.start_of(pid) if any(t == pid for t, _, _ in ev.stacks) else None
    assert tag is None or {k.start for k in rows} <= {tag}, (tag, {k.start for k in rows})
    return {k._replace(start=0): v for k, v in rows.items()}


class TestMainScenario:
    def test_semaphore_seen_by_new_process(self, main_run):
        # "pid P sem 1" / "done 1": the kernel raised it at exec-time mmap.
        lines = main_run["stdout"].split("\n")
        assert lines[0].endswith("sem 1") and lines[-2] == "done 1", main_run["stdout"]

    def test_totals_exact(self, main_run):
        pid = main_run["pid"]
        got = mine(main_run["drain"].totals, pid, main_run["ev"])
        want = {
            # Weight 0 (an older shim) counts as 1: weighted sums equal the exact ones.
            AggKey(pid, 0, 7, 0, K1, 0): AggVal(1000, 1, 1000, 1),
            # Collected in one window of 10: each record stands for 10.
            AggKey(pid, 0, 7, 0, K2, 0): AggVal(2500, 2, 25000, 20),
            AggKey(pid, 1, 3, 0, K1, 0): AggVal(300, 1, 300, 1),
            # Graph nodes the firer never announced (graph_node_stack): marked unknown.
            AggKey(pid, 0, 5, 9, K3, 0, 0, C.AGG_NODE_UNKNOWN): AggVal(
                sum(GRAPH_NS), len(GRAPH_NS), sum(GRAPH_NS), len(GRAPH_NS)
            ),
            AggKey(pid, 0, 7, 0, K4, 0): AggVal(C.BATCH_MAX + 7, C.BATCH_MAX + 1, C.BATCH_MAX + 7, C.BATCH_MAX + 1),
            # The process's own lost records: the well-formed batch's 3 (drop_cupti also
            # counts the 2 of the batch refused for its size; the forged count is neither).
            AggKey(pid, 0, 0, 0, C.KERNEL_DROPPED, 0): AggVal(0, 3, 0, 3),
        }
        assert got == want
        assert got[AggKey(pid, 0, 7, 0, K2, 0)].estimated() == (25000, 20)
        assert got[AggKey(pid, 0, 7, 0, K1, 0)].estimated() == (1000, 1)

    def test_sampled_attribution(self, main_run):
        pid = main_run["pid"]
        got = mine(main_run["drain"].sampled, pid, main_run["ev"])
        g = sum(GRAPH_NS)
        want = {
            AggKey(pid, 0, 7, 0, K1, S1): AggVal(1000, 1, 4000, 4),
            AggKey(pid, 0, 7, 0, K2, S1): AggVal(2000, 1, 8000, 4),
            AggKey(pid, 1, 3, 0, K1, S2): AggVal(300, 1, 600, 2),
            # every kernel of the graph launch joins the one correlation's stack
            AggKey(pid, 0, 5, 9, K3, S3, 0, C.AGG_NODE_UNKNOWN): AggVal(g, len(GRAPH_NS), g, len(GRAPH_NS)),
        }
        assert got == want

    def test_counters(self, main_run):
        d = _delta(main_run)
        assert d["batches"] == 6
        assert d["kernels"] == 4 + len(GRAPH_NS) + C.BATCH_MAX + 1
        assert d["samples"] == 4
        assert d["new_stacks"] == 3
        assert d["unsampled"] == 1 + C.BATCH_MAX + 1
        assert d["drop_bad_record"] == 1 + 2  # kernel id 0, two bad batches
        # a forged drop count: refused, one claim for the node, its count for the process
        assert d["drop_implausible"] == 1
        assert main_run["s"].implausible_drops().get(main_run["pid"]) == C.MAX_BATCH_DROPS + 1
        # end before start, flagged by the shim, longer than GA_MAX_KERNEL_NS, heavier
        # than GA_MAX_RECORD_WEIGHT
        assert d["drop_impossible"] == 4
        assert d["drop_cupti"] == 5
        assert d["name_chunks"] == 12 * 2 + 3 + 1
        for k in (
            "drop_agg_full",
            "drop_stack_full",
            "drop_stack_read",
            "drop_record_read",
            "drop_ringbuf_full",
            "drop_name_read",
            "drop_batch_chain",
            "agent_ev_corrupt",
            "agent_callback_errors",
            "agent_drop_name_conflict",
        ):
            assert d[k] == 0, k

    def test_stacks(self, main_run):
        s, pid, ev = main_run["s"], main_run["pid"], main_run["ev"]
        assert sorted(i for t, i, _ in ev.stacks if t == pid) == [S1, S2, S3]
        st = ev.start_of(pid)
        assert s.get_stack(pid, S1, st) == FRAMES1
        assert s.get_stack(pid, S2, st) == FRAMES2[: C.MAX_FRAMES]
        assert s.get_stack(pid, S3, st) == FRAMES3
        assert s.get_stack(pid, 0xDEAD, st) is None
        assert s.get_stack(pid, S1, st ^ 1) is None  # another process given this pid

    def test_names(self, main_run):
        names = main_run["s"].names
        assert names[K1] == LONG_NAME
        assert names[K2] == K2_NAME
        assert names[K3] == b"graph_kernel"

    def test_proc_exit(self, main_run):
        assert main_run["ev"].exits.count(main_run["pid"]) == 1

    def test_drain_deletes(self, main_run):
        d = main_run["s"].drain()
        assert not any(k.tgid == main_run["pid"] for k in (*d.totals, *d.sampled))
        assert d.counters["kernels"] >= main_run["drain"].counters["kernels"]  # cumulative


def _semaphore(pid: int, lib: Path) -> int:
    att = next(p for p in stapsdt.read_probes(str(lib)) if p.name == "attach")
    real = os.path.realpath(lib)
    base = None
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == real and int(parts[2], 16) == 0:
                base = int(parts[0].split("-")[0], 16)
                break
    assert base is not None, f"{real} not mapped in {pid}"
    with open(f"/proc/{pid}/mem", "rb") as m:
        m.seek(base + att.semaphore)  # first PT_LOAD has p_vaddr 0 in a .so
        return int.from_bytes(m.read(2), "little")


class _Lines:
    """Line reader over a pipe fd with a timeout (select on a buffered file
    object misses lines already sitting in its buffer)."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, b""

    def __call__(self, timeout=10.0) -> str:
        end = time.monotonic() + timeout
        while b"\n" not in self.buf:
            r, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            assert r, "firer did not answer"
            chunk = os.read(self.fd, 4096)
            assert chunk, "firer exited"
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()


@pytest.mark.parametrize("uprobes", ["links", "perf events"])
def test_running_process_semaphore_and_data(firer, tmp_path, monkeypatch, uprobes):
    """A process already running when the agent attaches: its semaphore rises
    on attach and falls on close, and its probes are seen. Both ways of making
    uprobes: BPF links (Linux >= 6.6, this kernel), and perf events where the kernel
    makes no link (before 6.6: here the link is refused as such a kernel refuses it)."""
    from gpu_agent.probes import shim_attach

    if uprobes == "perf events":
        monkeypatch.setattr(shim_attach, "_link_uprobe", lambda *a: -1)
    lib, exe = firer
    sc = F.Script().wait().attach().corr(7, 1, S1, FRAMES1, 3).batch([F.rec(K5, 7, 77)]).wait()
    path = sc.write(tmp_path / "running.bin")
    p = subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _readline = _Lines(p.stdout.fileno())
    try:
        first = _readline()
        pid = int(first.split()[1])
        assert first.endswith("sem 0")
        assert _readline() == "wait 0"
        assert _semaphore(pid, lib) == 0
        ev = Events()
        s = _open(lib, ev)
        try:
            assert s.attachments.attach_type == (shim_attach.UPROBE_MULTI if uprobes == "links" else -1)
            assert _semaphore(pid, lib) == 1
            p.stdin.write("go\n")
            p.stdin.flush()
            assert _readline() == "wait 1"
            _poll_until(s, lambda: any(t == pid and i == S1 for t, i, _ in ev.stacks))
            d = s.drain()
            assert mine(d.totals, pid, ev) == {AggKey(pid, 0, 7, 0, K5, 0): AggVal(77, 1, 77, 1)}
            assert mine(d.sampled, pid, ev) == {AggKey(pid, 0, 7, 0, K5, S1): AggVal(77, 1, 231, 3)}
        finally:
            s.close()
        assert _semaphore(pid, lib) == 0
        p.stdin.write("go\n")
        p.stdin.flush()
        assert _readline() == "done 0"
    finally:
        p.kill()
        p.wait()


SHIM = Path(__file__).resolve().parent.parent / "build" / "libgpu_agent_shim.so"


def test_real_shim_attaches(tmp_path):
    """The real shim presents the contract; BpfSession attaches to it and the
    semaphore rises (and falls) in a process that has it loaded.

    Runs on a copy: uprobes belong to the inode, so an agent running elsewhere
    on this machine (attached to build/) cannot raise this copy's semaphore. The
    copy has another basename so no `gpu-agent run` discovers and attaches it."""
    if not SHIM.exists():
        pytest.fail(f"{SHIM} not built (make shim)")
    need_ebpf()
    shim = tmp_path / "libgpu_agent_shim-private.so"
    shutil.copy(SHIM, shim)
    env = dict(os.environ, LD_PRELOAD=str(shim))
    p = subprocess.Popen(["sleep", "60"], env=env)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # wait until the loader mapped the shim
            with open(f"/proc/{p.pid}/maps") as f:
                if os.path.realpath(shim) in f.read():
                    break
            time.sleep(0.02)
        assert _semaphore(p.pid, shim) == 0
        s = BpfSession(str(shim))
        s.open()
        try:
            assert _semaphore(p.pid, shim) == 1
            s.poll(0)
            s.drain()
        finally:
            s.close()
        assert _semaphore(p.pid, shim) == 0
    finally:
        p.kill()
        p.wait()


def test_windowed_records_refuse_stale_samples(firer, tmp_path):
    """Real CUPTI reuses correlation ids across collection windows (H200: 25x too
    many joins): a windowed record joins a sample only if it started within
    join_max_lag_us after the launch; otherwise it counts as unsampled."""
    lib, exe = firer
    ev = Events()
    s = _open(lib, ev)
    t0, lag = 5_000_000_000, 50_000  # launch at 5 s; half of a 100 ms window, in µs
    try:
        path = (
            F.Script()
            .corr(700, 211, S1, FRAMES1, 64, launch_ns=t0)
            .corr(701, 211, S2, FRAMES2, 64, launch_ns=t0)
            .corr(702, 211, S2, FRAMES2, 64, launch_ns=t0)
            .corr(703, 211, S2, FRAMES2, 64, launch_ns=t0)
            .batch(
                [
                    F.rec(K5, 700, 10, start=t0 + 20_000, weight=10, join_max_lag_us=lag),
                    # started 0.2 s after "its" launch: a stale sample of an earlier window
                    F.rec(K5, 701, 20, start=t0 + 200_000_000, weight=10, join_max_lag_us=lag),
                    # started before the launch: not its launch either
                    F.rec(K5, 702, 40, start=t0 - 1, weight=10, join_max_lag_us=lag),
                    # continuous collection (no limit): the join stands
                    F.rec(K4, 703, 80, start=t0 + 200_000_000, weight=1),
                ]
            )
            .write(tmp_path / "s.bin")
        )
        p = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        pid = int(p.stdout.split()[1])
        d = s.drain()
        sampled = {(k.kernel_id, k.stack_id): v for k, v in d.sampled.items() if k.tgid == pid}
        assert sampled == {(K5, S1): AggVal(10, 1, 640, 64), (K4, S2): AggVal(80, 1, 5120, 64)}
        totals = {k._replace(start=0): v for k, v in d.totals.items() if k.tgid == pid}
        assert totals[AggKey(pid, 0, 7, 0, K5, 0)] == AggVal(70, 3, 700, 30)
        assert d.counters["stale_join"] == 2
    finally:
        s.close()


def test_per_key_drain_fallback(firer, tmp_path, monkeypatch):
    """Kernels without batch map ops: the per-key lookup-and-delete path gives
    the same numbers."""
    from gpu_agent.probes import bpf_maps

    def no_batch(*_a, **_k):
        raise bpf_maps.BatchUnsupported()

    lib, exe = firer
    ev = Events()
    s = _open(lib, ev)
    try:
        monkeypatch.setattr(bpf_maps, "drain_batch", no_batch)
        path = (
            F.Script()
            .corr(5, 1, S2, FRAMES3, 5)
            .batch([F.rec(K5, 5, 11), F.rec(K5, 5, 13), F.rec(K4, 6, 17)])
            .write(tmp_path / "s.bin")
        )
        p = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, p.stderr
        pid = int(p.stdout.split()[1])
        d = s.drain()
        assert mine(d.totals, pid, ev) == {
            AggKey(pid, 0, 7, 0, K5, 0): AggVal(24, 2, 24, 2),
            AggKey(pid, 0, 7, 0, K4, 0): AggVal(17, 1, 17, 1),
        }
        assert mine(d.sampled, pid, ev) == {AggKey(pid, 0, 7, 0, K5, S2): AggVal(24, 2, 120, 10)}
        d = s.drain()
        assert not any(k.tgid == pid for k in (*d.totals, *d.sampled))
    finally:
        s.close()


def test_event_decoding_never_raises():
    """Short, corrupt and unknown ring-buffer events are counted (no BPF needed)."""
    from gpu_agent.probes.events import handle_event

    s = BpfSession("/nonexistent")

    def handle(buf: bytes) -> None:
        handle_event(s, buf, s._agent_counts)

    handle(b"\x01")  # shorter than the header
    handle(bytes(C.EventHdr(type=C.EventType.GA_EV_NAME_CHUNK, tgid=1)))  # header only
    handle(bytes(C.EventHdr(type=C.EventType.GA_EV_NEW_STACK, tgid=1)))
    handle(bytes(C.EventHdr(type=99, tgid=1)))
    abc = C.kernel_id(b"abc")
    bad = C.EvNameChunk(kernel_id=abc, total_len=10, offset=8, len=5)  # runs past total_len
    bad.hdr.type = C.EventType.GA_EV_NAME_CHUNK
    handle(bytes(bad))
    ok = C.EvNameChunk(kernel_id=abc, total_len=3, offset=0, len=3)
    ok.hdr.type = C.EventType.GA_EV_NAME_CHUNK
    ok.data = b"abc"
    handle(bytes(ok)[: C.EvNameChunk.data.offset + 3])  # truncated payload is fine
    assert dict(s.names) == {abc: b"abc"}
    assert s._agent_counts["ev_corrupt"] == 4 and s._agent_counts["ev_unknown"] == 1


def test_drains_exact_under_concurrent_batches(firer, tmp_path):
    """Totals are exact across drains: drains run back to back while firers
    (two at a time, wave after wave) send batches into the same few keys; the
    sum over all drains equals what was fired, to the nanosecond (generation
    flip: no increment lands on a key that a drain is deleting)."""
    lib, exe = firer
    nbatch, per = 400, 128
    sc = F.Script().corr(42, 1, S1, FRAMES1, 3)
    want_tot: dict[tuple, list[int]] = {}
    want_smp: dict[tuple, list[int]] = {}
    for b in range(nbatch):
        recs = []
        for i in range(per):
            # correlation 42 is sampled (weight 3), 43 is not; two kernels, two streams
            kid, ns, stream, sampled = (K1 if i % 2 else K2), 1 + (b * per + i) % 97, 7 + i % 3 // 2, i % 4 == 0
            recs.append(F.rec(kid, 42 if sampled else 43, ns, stream=stream))
            t = want_tot.setdefault((stream, kid), [0, 0])
            t[0] += ns
            t[1] += 1
            if sampled:
                w = want_smp.setdefault((stream, kid), [0, 0, 0, 0])
                for j, x in enumerate((ns, 1, 3 * ns, 3)):
                    w[j] += x
        sc.batch(recs)
    path = sc.write(tmp_path / "hammer.bin")

    tot: dict[AggKey, list[int]] = {}
    smp: dict[AggKey, list[int]] = {}

    def merge(d):
        for dst, src in ((tot, d.totals), (smp, d.sampled)):
            for k, v in src.items():
                acc = dst.setdefault(k, [0, 0, 0, 0])
                for j in range(4):
                    acc[j] += v[j]

    s = _open(lib, Events())
    procs: list[subprocess.Popen] = []
    try:
        drains, racing = 0, 0
        end = time.monotonic() + 3.0
        while time.monotonic() < end or any(p.poll() is None for p in procs):
            if time.monotonic() < end and sum(p.poll() is None for p in procs) < 2:
                procs.append(subprocess.Popen([str(exe), str(path)], stdout=subprocess.PIPE, text=True))
            d = s.drain()
            racing += bool(d.totals)
            merge(d)
            s.poll(0)
            drains += 1
        merge(s.drain())
        outs = [p.communicate()[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outs
        pids = {int(o.split()[1]) for o in outs}
        assert len(pids) == len(procs) >= 4 and racing >= 10, (len(procs), drains, racing)
        for pid in pids:
            got_t = {(k.stream_id, k.kernel_id): v[:2] for k, v in tot.items() if k.tgid == pid}
            got_s = {(k.stream_id, k.kernel_id): v for k, v in smp.items() if k.tgid == pid}
            assert got_t == want_tot, pid
            assert got_s == want_smp, pid
        c = s.counters()
        assert c["drop_agg_full"] == 0 and c["agent_barrier_fallbacks"] == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        s.close()


def test_a_batch_goes_chunk_by_chunk_once_traced_or_not(firer, tmp_path):
    """kernel_batch takes GA_BATCH_CHUNK records a program, each program tail-calling
    the next (bpf/maps.h batch_progress): the verifier walks one chunk's loop, not
    GA_BATCH_MAX iterations. Every record of batches on and around chunk edges, up to
    a full one, is added once, and once more as a timeline's event while its process
    is traced; the chain loses none (drop_batch_chain)."""
    lib, exe = firer
    chunk = 64  # bpf/maps.h GA_BATCH_CHUNK
    sizes = [1, chunk - 1, chunk, chunk + 1, 2 * chunk + 5, C.BATCH_MAX - 1, C.BATCH_MAX]
    ev = Events()
    s = _open(lib, ev)
    kernels: list = []
    s.on_kernel = lambda k: kernels.append((k.hdr.tgid, k.rec.correlation_id))
    try:
        before = s.counters()
        seen = {}
        for traced in (False, True):
            sc = F.Script().wait()
            for n in sizes:
                sc.batch([F.rec(K5, 70000 + i, 10 + i) for i in range(n)])
            path = sc.write(tmp_path / f"traced{int(traced)}.bin")
            p = subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            pid = int(p.stdout.readline().split()[1])
            assert p.stdout.readline().startswith("wait")
            if traced:
                s.set_trace(pids=(pid,))
            p.stdin.write("go\n")
            p.stdin.flush()
            assert p.wait(timeout=30) == 0
            _poll_until(s, lambda: pid in ev.exits)
            seen[traced] = pid
        drain = s.drain()
        left = list(s._bpf[b"batch_progress"].items())
    finally:
        s.close()
    after = drain.counters
    d = {k: after[k] - before.get(k, 0) for k in after}
    total = sum(sizes)
    assert d["batches"] == 2 * len(sizes)
    assert d["kernels"] == 2 * total
    assert d["drop_batch_chain"] == 0 and d["drop_trace_full"] == 0
    assert d["trace_events"] == total
    for traced, pid in seen.items():
        rows = {k: v for k, v in drain.totals.items() if k.tgid == pid}
        assert [k.kernel_id for k in rows] == [K5], rows
        v = next(iter(rows.values()))
        assert (v.launches, v.gpu_ns) == (total, sum(10 + i for n in sizes for i in range(n))), (traced, v)
    traced_ids = sorted(corr for tgid, corr in kernels if tgid == seen[True])
    assert traced_ids == sorted(70000 + i for n in sizes for i in range(n))
    assert not [k for k in kernels if k[0] == seen[False]]
    assert {k.value >> 32 for k, _ in left} <= set(seen.values())  # one entry a firing thread, kept


def test_every_bpf_header_compiles_on_its_own(built):
    """bcc compiles each bpf/*.h alone, with only the headers it includes itself (as
    libbpf-tools' headers do): none relies on what the main file pasted before it."""
    need_ebpf()
    from gpu_agent.probes import paths, preflight

    preflight.import_bcc()
    from bcc import BPF, USDT
    from support.env import SHIM

    usdt = USDT(path=str(SHIM))
    for probe, fn in DATA_PROBES.items():
        usdt.enable_probe(f"{C.PROVIDER}:{probe}", fn)
    bpf_dir, inc = paths.bpf_dir(), paths.include_dir()
    headers = sorted(p.name for p in bpf_dir.glob("*.h"))
    assert len(headers) >= 12, headers
    for h in headers:
        text = usdt.get_text() + paths.bpf_source(bpf_dir, h)
        b = BPF(text=text.encode(), cflags=compile_flags(bpf_dir, inc))
        b.cleanup()


def _program_text() -> str:
    """What BpfSession.open() compiles: bcc's USDT argument readers for the shim, then the
    pasted bpf/gpu_agent.bpf.c."""
    from gpu_agent.probes import paths
    from bcc import USDT
    from support.env import SHIM

    usdt = USDT(path=str(SHIM))
    for probe, fn in DATA_PROBES.items():
        usdt.enable_probe(f"{C.PROVIDER}:{probe}", fn)
    return usdt.get_text() + paths.bpf_source(paths.bpf_dir())


def _instructions(b) -> dict[str, list[tuple]]:
    """Every function's BPF instructions, each map's fd (ld_imm64 of a map fd or map
    value) replaced by the map's name: two loads of one program differ only in fds."""
    import ctypes as ct
    import struct

    from bcc.libbcc import lib

    lib.bpf_num_tables.restype, lib.bpf_num_tables.argtypes = ct.c_ulonglong, [ct.c_void_p]
    lib.bpf_table_name.restype, lib.bpf_table_name.argtypes = ct.c_char_p, [ct.c_void_p, ct.c_ulonglong]
    lib.bpf_table_fd_id.restype, lib.bpf_table_fd_id.argtypes = ct.c_int, [ct.c_void_p, ct.c_ulonglong]
    m = b.module
    map_of_fd = {lib.bpf_table_fd_id(m, i): lib.bpf_table_name(m, i).decode() for i in range(lib.bpf_num_tables(m))}
    out = {}
    for i in range(lib.bpf_num_functions(m)):
        name = lib.bpf_function_name(m, i)
        raw = b.dump_func(name)
        ins = []
        for off in range(0, len(raw), 8):
            op, regs, o, imm = struct.unpack_from("<BBhi", raw, off)
            if op == 0x18 and regs >> 4 in (1, 2):  # BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
                imm = map_of_fd[imm]
            ins.append((op, regs, o, imm))
        out[name.decode()] = ins
    return out


def test_unchecked_read_user_compiles_to_the_same_program(built):
    """compile_flags() renames bpf_probe_read_user(_str) so that bcc does not look the
    helper up in /proc/kallsyms at every call (READ_USER_UNCHECKED): the program it
    compiles is the one bcc's own names give, instruction for instruction."""
    need_ebpf()
    from gpu_agent.probes import paths, preflight

    preflight.import_bcc()
    from bcc import BPF

    text = _program_text().encode()
    assert text.count(b"bpf_probe_read_user") >= 20  # the rename has calls to act on
    flags = compile_flags(paths.bpf_dir(), paths.include_dir())
    if preflight.tracepoint_has_field("sched", "sched_process_exit", "group_dead"):
        flags.append("-DGA_HAVE_GROUP_DEAD")  # as BpfSession.open() compiles it here
    programs = []
    for cflags in ([f for f in flags if f not in READ_USER_UNCHECKED], flags):
        b = BPF(text=text, cflags=cflags)
        try:
            programs.append(_instructions(b))
        finally:
            b.cleanup()
    plain, renamed = programs
    assert set(DATA_PROBES.values()) <= set(plain) and sum(map(len, plain.values())) > 1000, sorted(plain)
    assert renamed == plain


def test_a_process_is_named_by_its_attach_even_once_gone(tmp_path):
    """The attach event carries the process's name, its leader's comm as BPF read it
    then. An agent that reads its events only after a short process is gone (under
    load: the README's workload was labelled `?` in CI, as /proc had nothing left)
    still names it; and a process the agent meets already running, whose shim's
    poller thread (ga-shim-poll) fires the attach, is named by its leader, not that
    thread."""
    need_ebpf()
    from support.env import MOCK_APP, mock_env, private_shim

    shim = private_shim(tmp_path / "shim")
    running, short = tmp_path / "gpu-long-job", tmp_path / "gpu-short-job"
    for app in (running, short):
        shutil.copy(MOCK_APP, app)
    env = mock_env(CUDA_INJECTION64_PATH=str(shim))
    attached: list[tuple[int, str]] = []
    long_job = subprocess.Popen([str(running), "--duration", "60", "--sleep-ms", "5"], env=env)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # its shim is loaded: CUDA has started
            with open(f"/proc/{long_job.pid}/maps") as f:
                if str(shim) in f.read():
                    break
            time.sleep(0.05)
        s = BpfSession(str(shim))
        s.on_proc_attach = lambda tgid, comm: attached.append((tgid, comm))
        s.open()
        try:
            _poll_until(s, lambda: any(t == long_job.pid for t, _ in attached), timeout=10)
            assert (long_job.pid, "gpu-long-job") in attached, attached
            threads = {
                open(f"/proc/{long_job.pid}/task/{t}/comm").read().strip()
                for t in os.listdir(f"/proc/{long_job.pid}/task")
            }
            assert "ga-shim-poll" in threads, threads  # the thread that may fire it
            p = subprocess.Popen([str(short), "--iters", "50"], env=env)
            assert p.wait(timeout=30) == 0
            assert not os.path.exists(f"/proc/{p.pid}")  # reaped: /proc says nothing now
            _poll_until(s, lambda: any(t == p.pid for t, _ in attached), timeout=10)
            assert (p.pid, "gpu-short-job") in attached, attached
        finally:
            s.close()
    finally:
        long_job.kill()
        long_job.wait()
