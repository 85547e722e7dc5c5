"""Kernel timelines through the real shim, real eBPF and the real writers:
`record --trace/--events` and the on-demand `trace --pid` beside `gpu-agent run`."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections import defaultdict

from support.env import MOCK_APP, MOCK_DIR, REPO, SHIM, agent_cmd, ground_truth, mock_env, need_ebpf
from support.agent import Agent
from support.cli import LOADING, until_line
from support.peak import peak_mib_until_exit
from support.pprof_tool import raw

MOCK_UUID = "GPU-6d6f636b-0001-0203-0405-060708090a00"  # shim/mock/mock_cuda.c, ordinal 0
MOCK_MODEL = "NVIDIA H100 80GB HBM3 (mock)"


def events(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    by = defaultdict(list)
    for line in lines:
        by[line["type"]].append(line)
    return lines, by


def frames_of(stacks: dict, sid) -> list[str]:
    return [f["name"] for f in stacks.get(sid, [])]


def test_record_timeline_has_every_kernel_with_its_stacks_on_the_wall_clock(tmp_path):
    need_ebpf()
    gt = tmp_path / "truth.tsv"
    ev, trace, prof = tmp_path / "e.ndjson", tmp_path / "t.perfetto-trace", tmp_path / "p.pb.gz"
    t0 = time.time_ns()
    p = subprocess.run(
        agent_cmd(
            "record",
            "-o",
            prof,
            "--trace",
            trace,
            "--events",
            ev,
            "--",
            MOCK_DIR / "graph_workload",
            "--replays",
            "30",
            "--linger-ms",  # gone in ms otherwise: its maps unread on a loaded host
            "300",
        ),
        env=mock_env(gt),
        capture_output=True,
        text=True,
        timeout=120,
    )
    t1 = time.time_ns()
    assert p.returncode == 0, p.stderr
    lines, by = events(ev)
    import jsonschema

    schema = json.loads((REPO / "docs" / "events.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:  # the real agent's output, every line, against the published schema
        validator.validate(line)
    head = by["header"][0]
    assert lines[0] is head and head["clock"] == "CLOCK_REALTIME"
    assert [(d["uuid"], d["model"]) for d in head["devices"]] == [(MOCK_UUID, MOCK_MODEL)]
    # Every kernel once, with its exact time: the mock driver's own totals.
    got = defaultdict(lambda: [0, 0])
    for k in by["kernel"]:
        got[k["mangled"]][0] += 1
        got[k["mangled"]][1] += k["end_ns"] - k["start_ns"]
        assert t0 <= k["start_ns"] <= k["end_ns"] <= t1  # CLOCK_REALTIME, not CUPTI's clock
    assert {m: tuple(v) for m, v in got.items()} == ground_truth(gt)
    # The launch geometry CUPTI gives (graph_workload launches <<<4, 128>>>)
    assert {(tuple(k["grid"]), tuple(k["block"])) for k in by["kernel"]} == {((4, 1, 1), (128, 1, 1))}
    # Graph kernels: the stack that captured their node, and where the graph was replayed.
    stacks = {s["id"]: s["frames"] for s in by["callstack_def"]}
    graph = [k for k in by["kernel"] if k.get("graph_id")]
    assert graph and all(k.get("stack_id") for k in graph)
    assert all(any(n.startswith("capture_") for n in frames_of(stacks, k["stack_id"])) for k in graph)
    replayed = [k for k in graph if k.get("replay_stack_id")]
    assert replayed and all("replay_graph" in frames_of(stacks, k["replay_stack_id"]) for k in replayed)
    # dedup: each stack defined once, before the first kernel that uses it
    seen = set()
    for line in lines:
        if line["type"] == "callstack_def":
            assert line["id"] not in seen
            seen.add(line["id"])
        elif line["type"] == "kernel":
            assert {line.get("stack_id"), line.get("replay_stack_id")} - {None} <= seen
    # The Perfetto trace, read back with Perfetto's own protos: every kernel exactly
    # once, with its exact duration, and graph kernels with their capture stacks.
    from support.perfetto_read import read_perfetto

    _, _, slices, _, _ = read_perfetto(trace)
    kernel_slices = [sl for sl in slices if "mangled" in sl["args"]]
    in_trace = defaultdict(lambda: [0, 0])
    for sl in kernel_slices:
        in_trace[sl["args"]["mangled"]][0] += 1
        in_trace[sl["args"]["mangled"]][1] += sl["dur"]
    assert {m: tuple(v) for m, v in in_trace.items()} == ground_truth(gt)
    assert all(
        sl["stack"] and any(f[0].startswith("capture_") for f in sl["stack"])
        for sl in kernel_slices
        if sl["args"].get("graph_id")
    )
    # The profile carries DCGM's identity of the device.
    assert {
        (s.labels.get("gpu_uuid"), s.labels.get("gpu_model"))
        for s in raw(prof)
        if s.files and s.files[0] == "CUDA_KERNEL"
    } == {(MOCK_UUID, MOCK_MODEL)}


def test_an_unwritable_trace_is_refused_before_the_command_runs(tmp_path):
    need_ebpf()
    marker = tmp_path / "ran"
    p = subprocess.run(
        agent_cmd(
            "record", "-o", tmp_path / "p.pb.gz", "--events", "/proc/no/such/dir/e.ndjson", "--", "touch", marker
        ),
        env=mock_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and not marker.exists()
    assert len(p.stderr.strip().splitlines()) == 1 and "nothing was run" in p.stderr


def test_trace_pid_beside_run_is_continuous_for_that_process_only(tmp_path):
    need_ebpf()
    rate, seconds = 2000, 2.0
    # GPU_AGENT_DEBUG: each shim says at exit what share of its attached time was in windows
    env = mock_env(
        CUDA_INJECTION64_PATH=str(SHIM), GPU_AGENT_DEBUG="1", GPU_AGENT_DUTY_CYCLE="10"
    )  # the always-on default (mock_env says 1)
    agent = Agent(tmp_path / "run")  # always-on defaults: one window in 10
    # 20 s: they outlive the capture, BPF compile included, then exit by themselves
    work = [
        subprocess.Popen(
            [MOCK_APP, "--bench", str(int(rate * 20)), "--rate", str(rate)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        early = [until_line(w.stderr, "attached (pid") for w in work]  # both attached, at the defaults
        target, other = work[0].pid, work[1].pid
        ev = tmp_path / "cap.ndjson"
        cap = subprocess.Popen(
            agent_cmd("trace", "--pid", target, "--duration", f"{seconds}s", "--events", ev),
            stderr=subprocess.PIPE,
            text=True,
        )
        # it holds the node's capture lock once it says it loads (the second trace then
        # runs while the first compiles, not inside its capture, which it would slow)
        said = until_line(cap.stderr, LOADING)
        second = subprocess.run(
            agent_cmd("trace", "--pid", other, "--duration", "1s", "--events", tmp_path / "no.ndjson"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2 and "another capture is running" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        _, err = cap.communicate(timeout=120)
        assert cap.returncode == 0, said + err
        _, by = events(ev)
        kernels = by["kernel"]
        assert {k["pid"] for k in kernels} == {target}
        # Continuous during the capture: about rate x duration launches, not one tenth.
        assert len(kernels) > 0.6 * rate * seconds, len(kernels)
        # Afterwards the shim is back at its defaults: the deadline reads 0 again.
        from gpu_agent.timeline.target import TraceTarget
        import os
        import struct

        t = TraceTarget.open(target)
        fd = os.open(f"/proc/{target}/mem", os.O_RDONLY)
        try:
            assert struct.unpack("<Q", os.pread(fd, 8, t.addr))[0] == 0
        finally:
            os.close(fd)
            t.close()
        # The uncaptured process kept its window-mode cost: windows open about one
        # tenth of its attached time; the captured one, its 2 s more (about 19 %).
        share = {}
        for w, before in zip(work, early):
            _, werr = w.communicate(timeout=60)
            werr = before + werr
            m = re.search(r"windows \(pid (\d+)\): open ([\d.]+) %", werr)
            assert m, werr[-2000:]
            share[int(m.group(1))] = float(m.group(2))
        assert share[other] < 13.0 and share[target] > share[other] + 5.0, share
    finally:
        for w in work:
            if w.poll() is None:
                w.kill()
                w.wait()
        agent.kill()


def _record_ring(tmp_path, retention: str, ring: int, launches: int):
    gt, ev = tmp_path / f"{retention}.tsv", tmp_path / f"{retention}.ndjson"
    p = subprocess.run(
        agent_cmd(
            "record",
            "-o",
            tmp_path / "p.pb.gz",
            "--events",
            ev,
            "--ring",
            ring,
            "--retention",
            retention,
            "--",
            MOCK_APP,
            "--bench",
            launches,
        ),
        env=mock_env(gt),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    total = sum(n for n, _ in ground_truth(gt).values())
    _, by = events(ev)
    return total, by, p.stderr


def test_retention_drop_oldest_keeps_the_newest_events_and_counts_the_rest(tmp_path):
    need_ebpf()
    total, by, err = _record_ring(tmp_path, "drop-oldest", 100, 1000)
    kernels = by["kernel"]
    assert total >= 1000 and len(kernels) == 100
    assert [(d["what"], d["count"]) for d in by["drop"]] == [("ring_oldest", total - 100)]
    # ...and the summary line says so, not only the file
    assert f"gpu-agent: 100 kernels ({total - 100} lost: {total - 100} ring_oldest) -> " in err, err[-1000:]
    # the newest: one launch after another on one stream, so the kept ones are the last
    corr = sorted(k["correlation_id"] for k in kernels)
    assert corr[-1] - corr[0] < 2 * 100 + 50, corr[:3]


def test_retention_backpressure_pauses_the_capture_and_says_so(tmp_path):
    need_ebpf()
    total, by, err = _record_ring(tmp_path, "backpressure", 100, 1000)
    assert len(by["kernel"]) == 100
    assert [(d["what"], d["count"]) for d in by["drop"]] == [("paused", total - 100)]
    assert err.count("capture paused") == 1, err


def test_retention_counts_only_the_recorded_commands_kernels(tmp_path):
    """`gpu-agent record` beside another process that injects the shim (a system-wide
    `run`'s workload, or the other xdist worker's): its kernels neither fill the
    command's ring nor count in its drops. (The shim's uprobes fire in every process
    that maps it; record traces every process and keeps the command's.)"""
    need_ebpf()
    other = subprocess.Popen(
        [MOCK_APP, "--bench", "1000000000", "--rate", "20000"],
        env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for retention, what in (("backpressure", "paused"), ("drop-oldest", "ring_oldest")):
            total, by, err = _record_ring(tmp_path, retention, 100, 1000)
            assert other.poll() is None  # it launched all along
            assert other.pid not in {k["pid"] for k in by["kernel"]} and len(by["kernel"]) == 100
            assert [(d["what"], d["count"]) for d in by["drop"]] == [(what, total - 100)], (retention, err[-1000:])
    finally:
        other.kill()
        other.wait()


def test_a_flood_larger_than_the_ring_keeps_the_agent_memory_flat(tmp_path):
    """300 000 kernels through a ring of 1 000: the recording agent's peak RSS is that
    of a 10 000-kernel recording, within what 300 000 kept events would add (~60 MB)."""
    need_ebpf()

    def peak_after(launches: int) -> float:
        """The recording agent's own peak RSS (VmHWM, MiB), read until it exits."""
        ev = tmp_path / f"f{launches}.ndjson"
        p = subprocess.Popen(
            agent_cmd(
                "record",
                "-o",
                tmp_path / "p.pb.gz",
                "--events",
                ev,
                "--ring",
                1000,
                "--",
                MOCK_APP,
                "--bench",
                launches,
            ),
            env=mock_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        peak = peak_mib_until_exit(p)
        err = p.stderr.read()
        assert p.returncode == 0, err
        _, by = events(ev)
        assert len(by["kernel"]) == 1000
        assert by["drop"] and by["drop"][0]["what"] == "ring_oldest"
        return peak

    small = peak_after(10_000)
    large = peak_after(300_000)
    assert large - small < 20, (small, large)


def test_trace_waits_for_a_process_just_started_to_load_the_shim(tmp_path):
    """`python serve.py & gpu-agent trace --pid $!`: the process maps no shim for its
    first seconds. trace says it waits, and traces it once it has; an old process
    that maps none is refused at once."""
    need_ebpf()
    old = subprocess.Popen(["sleep", "120"])
    old_since = time.monotonic()
    serve = tmp_path / "serve.py"
    # still importing its framework for 2 s, then launching until killed
    serve.write_text("import time; time.sleep(2)\n" + (REPO / "tests" / "readme_workload.py").read_text())
    p = subprocess.Popen(
        ["python3", serve], env=mock_env(CUDA_INJECTION64_PATH=str(SHIM)), stderr=subprocess.PIPE, text=True
    )
    try:
        q = subprocess.run(
            agent_cmd("trace", "--pid", p.pid, "--duration", "2s", "--events", tmp_path / "e.ndjson"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert q.returncode == 0, q.stderr
        assert f"waiting for pid {p.pid} to load the shim" in q.stderr, q.stderr
        kernels = [json.loads(line) for line in (tmp_path / "e.ndjson").read_text().splitlines()]
        assert any(k.get("name") == "k_serve" for k in kernels), q.stderr
    finally:
        p.kill()
        p.wait()
    try:
        time.sleep(max(0.0, old_since + 15.5 - time.monotonic()))  # past trace's YOUNG_S
        t0 = time.monotonic()
        q = subprocess.run(
            agent_cmd("trace", "--pid", old.pid, "--duration", "1s", "--events", tmp_path / "i.ndjson"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert q.returncode == 2 and f"cannot trace {old.pid} (it maps no gpu-agent shim)" in q.stderr, q.stderr
        assert "waiting" not in q.stderr and time.monotonic() - t0 < 10, q.stderr
    finally:
        old.kill()
        old.wait()


def test_a_timeline_counts_its_own_processes_lost_records_not_the_node_s(firer, tmp_path):
    """A timeline's `cupti` drop is the lost records of its own processes: another
    process's claim (2^24 records, a faults test beside this module in the parallel
    suite) was in every timeline's count, which read the node's drop_cupti."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "probe_firer"))
    import firer_script as F

    from gpu_agent.join.collector import Collector
    from gpu_agent.probes import contract as C
    from gpu_agent.timeline.collect import TimelineCollector

    lib, exe = firer
    name = b"_Z6kernelv"
    kid = C.kernel_id(name)
    col = Collector(str(lib), python_stacks=False)
    col.open()
    procs = []
    try:
        tc = TimelineCollector(col)
        for lost in (3, 4000):  # the traced process's, another's
            script = F.Script().wait().full_name(kid, name).batch([F.rec(kid, 1, 1000)], dropped=lost)
            path = script.write(tmp_path / f"lost{lost}.bin")
            procs.append(
                subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )
        pids = [int(p.stdout.readline().split()[1]) for p in procs]
        assert all(p.stdout.readline().startswith("wait") for p in procs)
        col.session.set_trace(pids=(pids[0],))
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            assert p.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while True:  # until the traced process's kernel has come (BPF counted both losses already)
            col.poll(50)
            tl = tc.build(time.time_ns() - 10**9, time.time_ns())
            if tl.processes or time.monotonic() > deadline:
                break
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        col.close()
    assert set(tl.processes) == {pids[0]}
    assert [(d.what, d.count) for d in tl.drops if d.what == "cupti"] == [("cupti", 3)]
