"""The timeline writers (agent/gpu_agent/timeline/): a realistic Timeline (two
processes, two GPUs with UUIDs, several streams, a CUDA graph with capture and
replay stacks, sampled launches, Python and native frames, drops) written as a
Perfetto trace, a Chrome JSON trace and NDJSON events, and read back with real
parsers: the perfetto package's protobuf classes, json, and jsonschema against
docs/events.schema.json."""

from __future__ import annotations

import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from gpu_agent.timeline import write_chrome, write_events, write_perfetto
from support.perfetto_read import read_perfetto as _read_perfetto
from gpu_agent.probes.devices import GpuDevice
from gpu_agent.timeline.model import SCHEMA_VERSION, Drop, Frame, KernelEvent, Timeline

REPO = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((REPO / "docs/events.schema.json").read_text())

T0 = 1_760_000_000_123_456_789  # CLOCK_REALTIME, late 2025
UUID_A = "GPU-8f2c1a44-0b1e-4c55-9d7e-1f2a3b4c5d6e"
UUID_B = "GPU-13e9c7d2-77aa-4f10-8c3b-9e8d7c6b5a49"
H100 = "NVIDIA H100 80GB HBM3"

GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
GEMM_MANGLED = "_ZN7cutlass6KernelI53cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4EEvNT_6ParamsE"
ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
    "(int, at::native::AddFunctor<float>)"
)
ADD_MANGLED = "_ZN2at6native29vectorized_elementwise_kernelE"
RELU = "void at::native::relu_kernel(float*, int)"


def _timeline() -> Timeline:
    stacks = {
        # an eager GEMM launched from Python through cuBLAS
        1: [
            Frame(GEMM, "kernel"),
            Frame("cublasSgemm_v2", "native", "libcublas.so.13"),
            Frame("at::native::addmm_out_cuda", "native"),
            Frame("forward", "python", "/app/model.py", 42),
            Frame("<module>", "python", "/app/train.py", 10),
        ],
        # where the graph's nodes were captured: forward again, another line
        2: [
            Frame(ADD, "kernel"),
            Frame("at::native::add_kernel", "native"),
            Frame("forward", "python", "/app/model.py", 51),
            Frame("capture_step", "python", "/app/train.py", 77),
        ],
        # where the graph was replayed from
        3: [
            Frame("cudaGraphLaunch", "native", "libcudart.so.13"),
            Frame("replay", "python", "/app/train.py", 90),
            Frame("<module>", "python", "/app/train.py", 12),
        ],
        # a C++ program
        4: [Frame(RELU, "kernel"), Frame("Trainer::step()", "native", "trainer"), Frame("main", "native", "trainer")],
    }
    t = T0 + 1_000_000
    launch_graph = t + 40_000
    kernels = [
        # pid 4242, GPU 0, stream 7: a sampled eager launch, then an unsampled one,
        # then one that overlaps it (programmatic dependent launch), at .039 µs past a
        # microsecond (the Chrome writer must pad the fraction)
        KernelEvent(
            4242,
            t + 10_000,
            t + 25_500,
            GEMM,
            GEMM_MANGLED,
            0,
            7,
            0xA1,
            100,
            grid=(128, 1, 1),
            block=(256, 1, 1),
            stack_id=1,
            launch_tid=4242,
            launch_ns=t + 4_000,
        ),
        KernelEvent(
            4242,
            t + 26_000,
            t + 30_000,
            RELU,
            "_Z11relu_kernelPfi",
            0,
            7,
            0xA1,
            101,
            grid=(64, 1, 1),
            block=(128, 1, 1),
        ),
        KernelEvent(4242, t + 29_250, t + 33_000, RELU, "_Z11relu_kernelPfi", 0, 7, 0xA1, 102),
        # pid 4242, GPU 0, stream 13: two nodes of graph 5, one sampled cudaGraphLaunch
        # on another thread
        KernelEvent(
            4242,
            launch_graph + 6_000,
            launch_graph + 9_000,
            ADD,
            ADD_MANGLED,
            0,
            13,
            0xA1,
            200,
            graph_id=5,
            graph_node_id=1,
            stack_id=2,
            replay_stack_id=3,
            launch_tid=4250,
            launch_ns=launch_graph,
        ),
        KernelEvent(
            4242,
            launch_graph + 9_200,
            launch_graph + 12_000,
            ADD,
            ADD_MANGLED,
            0,
            13,
            0xA1,
            200,
            graph_id=5,
            graph_node_id=2,
            stack_id=2,
            replay_stack_id=3,
            launch_tid=4250,
            launch_ns=launch_graph,
        ),
        # pid 4242, GPU 1, stream 7: the same code on the second GPU
        KernelEvent(
            4242,
            t + 12_000,
            t + 27_000,
            GEMM,
            GEMM_MANGLED,
            1,
            7,
            0xB2,
            103,
            grid=(128, 1, 1),
            block=(256, 1, 1),
            stack_id=1,
            launch_tid=4242,
            launch_ns=t + 5_000,
        ),
        # pid 5151 sees GPU B as its device 0 (CUDA_VISIBLE_DEVICES=1)
        KernelEvent(
            5151,
            t + 50_000,
            t + 58_000,
            RELU,
            "_Z11relu_kernelPfi",
            0,
            0,
            0xC3,
            7,
            stack_id=4,
            launch_tid=5160,
            launch_ns=t + 48_000,
        ),
    ]
    return Timeline(
        host="node-a",
        started_ns=T0,
        ended_ns=T0 + 10_000_000,
        processes={4242: "python", 5151: "trainer"},
        threads={(4242, 4242): "python", (4242, 4250): "pt_graph", (5151, 5160): "trainer-worker"},
        devices={
            (4242, 0): GpuDevice(0, UUID_A, H100),
            (4242, 1): GpuDevice(1, UUID_B, H100),
            (5151, 0): GpuDevice(0, UUID_B, H100),
        },
        stacks=stacks,
        kernels=kernels,
        drops=[Drop("cupti", 3, 4242), Drop("ringbuf", 2)],
    )


# -- Perfetto ------------------------------------------------------------------


def test_perfetto_trace(tmp_path):
    tl = _timeline()
    path = tmp_path / "t.perfetto-trace"
    write_perfetto(tl, path)
    packets, tracks, slices, instants, counters = _read_perfetto(path)

    # The clock: REALTIME is the trace's clock, before any event.
    snap = packets[0].clock_snapshot
    assert snap.primary_trace_clock == pb.BUILTIN_CLOCK_REALTIME
    assert [(c.clock_id, c.timestamp) for c in snap.clocks] == [(pb.BUILTIN_CLOCK_REALTIME, T0)]
    assert packets[1].trace_packet_defaults.timestamp_clock_id == pb.BUILTIN_CLOCK_REALTIME

    # Tracks: process > GPU (model, UUID) > stream.
    procs = {d.process.pid: d for d in tracks.values() if d.HasField("process")}
    assert {pid: d.process.process_name for pid, d in procs.items()} == {4242: "python", 5151: "trainer"}
    gpus = {d.uuid: d for d in tracks.values() if d.name.startswith("GPU ")}
    by_name = {(d.parent_uuid, d.name): d for d in gpus.values()}
    assert set(by_name) == {
        (procs[4242].uuid, f"GPU 0: {H100} ({UUID_A})"),
        (procs[4242].uuid, f"GPU 1: {H100} ({UUID_B})"),
        (procs[5151].uuid, f"GPU 0: {H100} ({UUID_B})"),
    }
    streams = {(tracks[d.parent_uuid].name, d.name): d.uuid for d in tracks.values() if d.name.startswith("stream ")}
    gpu_a = f"GPU 0: {H100} ({UUID_A})"
    assert set(streams) == {
        (gpu_a, "stream 7"),
        (gpu_a, "stream 7 (overlap 1)"),
        (gpu_a, "stream 13"),
        (f"GPU 1: {H100} ({UUID_B})", "stream 7"),
        (f"GPU 0: {H100} ({UUID_B})", "stream 0"),
    }
    threads = {(d.thread.pid, d.thread.tid): d for d in tracks.values() if d.HasField("thread")}
    assert set(threads) == {(4242, 4242), (4242, 4250), (5151, 5160)}
    assert threads[(4242, 4250)].thread.thread_name == "pt_graph"

    # Slices: one per kernel, named, timed, on its stream's track.
    assert len(slices) == len(tl.kernels)
    track_of = {
        (pid, dev, s): uuid for (g, s), uuid in streams.items() for pid, dev, gname in ((4242, 0, gpu_a),) if g == gname
    }
    for k, s in zip(tl.kernels, slices):
        assert (s["name"], s["ts"], s["dur"]) == (k.name, k.start_ns, k.end_ns - k.start_ns)
        assert s["args"]["correlation_id"] == k.correlation_id
        assert s["args"]["mangled"] == k.mangled
    gemm, relu, relu_overlap, add1, add2, gemm_b, other = slices
    assert gemm["track"] == track_of[(4242, 0, "stream 7")] == relu["track"]
    assert relu_overlap["track"] == track_of[(4242, 0, "stream 7 (overlap 1)")]
    assert add1["track"] == add2["track"] == track_of[(4242, 0, "stream 13")]

    # Arguments.
    assert gemm["args"]["grid"] == [128, 1, 1] and gemm["args"]["block"] == [256, 1, 1]
    assert gemm["args"]["device_uuid"] == UUID_A and gemm_b["args"]["device_uuid"] == UUID_B
    assert "grid" not in relu_overlap["args"] and "graph_id" not in gemm["args"]
    assert (add1["args"]["graph_id"], add1["args"]["graph_node_id"], add2["args"]["graph_node_id"]) == (5, 1, 2)
    assert add1["cats"] == ["cuda", "cuda_graph"]
    assert add1["args"]["replay_stack"] == [
        "cudaGraphLaunch (libcudart.so.13)",
        "replay (/app/train.py:90)",
        "<module> (/app/train.py:12)",
    ]
    assert gemm["args"]["launch_stack"][3] == "forward (/app/model.py:42)"

    # Stacks: interned callstacks, outermost first, Python lines kept apart.
    py, native = pb.Frame.KIND_INTERPRETED, pb.Frame.KIND_NATIVE
    assert gemm["stack"][:3] == [
        ("<module>", "/app/train.py", 10, py),
        ("forward", "/app/model.py", 42, py),
        ("at::native::addmm_out_cuda", "", 0, native),
    ]
    assert add1["stack"][1] == ("forward", "/app/model.py", 51, py)
    assert relu["stack"] is None

    # Flows: each sampled launch is an instant on the launching thread, with an
    # arrow to every kernel it launched; the graph launch has two.
    by_thread = {(tracks[i["track"]].thread.pid, tracks[i["track"]].thread.tid, i["ts"]): i for i in instants}
    assert len(instants) == 4
    graph_launch = by_thread[(4242, 4250, tl.kernels[3].launch_ns)]
    assert graph_launch["name"] == "cudaGraphLaunch"
    assert sorted(graph_launch["flows_out"]) == sorted(add1["flows_in"] + add2["flows_in"])
    assert len(set(graph_launch["flows_out"])) == 2
    assert graph_launch["stack"][-1][0] == "cudaGraphLaunch"  # the replay site
    eager = by_thread[(4242, 4242, tl.kernels[0].launch_ns)]
    assert eager["name"] == "cudaLaunchKernel" and eager["flows_out"] == gemm["flows_in"]
    assert eager["args"]["kernel"] == GEMM
    assert by_thread[(5151, 5160, tl.kernels[6].launch_ns)]["flows_out"] == other["flows_in"]
    assert relu["flows_in"] == [] and relu_overlap["flows_in"] == []
    all_flows = [f for i in instants for f in i["flows_out"]]
    assert len(all_flows) == len(set(all_flows)) == 5

    # Drops: counters, one per process and what.
    drop_tracks = {tracks[u].name: (tracks[u].parent_uuid, v) for u, v in counters.items()}
    assert drop_tracks == {
        "dropped: cupti": (procs[4242].uuid, [(T0, 0), (tl.ended_ns, 3)]),
        "gpu-agent dropped: ringbuf": (0, [(T0, 0), (tl.ended_ns, 2)]),
    }


def test_perfetto_traces_concatenate(tmp_path):
    """`gpu-agent ui` serves a range's traces appended to one another: each
    keeps its interning, and one process's tracks are the same tracks."""
    tl = _timeline()
    a, b = tmp_path / "a", tmp_path / "b"
    write_perfetto(tl, a)
    tl2 = _timeline()
    for k in tl2.kernels:
        k.start_ns += 20_000_000
        k.end_ns += 20_000_000
    tl2.stacks = {7: tl.stacks[1]}  # other ids, fresh interning
    for k in tl2.kernels:
        k.stack_id, k.replay_stack_id = 7, None
    write_perfetto(tl2, b)
    both = tmp_path / "both"
    both.write_bytes(a.read_bytes() + b.read_bytes())
    _, tracks, slices, _, _ = _read_perfetto(both)
    assert len(slices) == 2 * len(tl.kernels)
    assert slices[len(tl.kernels)]["stack"] == slices[0]["stack"]
    assert len({s["track"] for s in slices}) == 5


def test_trace_processor_if_available(tmp_path):
    """trace_processor reads the trace. The perfetto package downloads its
    binary on first use, which needs the internet; it runs here only when a
    trace_processor_shell is given ($TRACE_PROCESSOR_SHELL or on PATH)."""
    shell = os.environ.get("TRACE_PROCESSOR_SHELL") or shutil.which("trace_processor_shell")
    if not shell:
        pytest.skip("no trace_processor_shell: set TRACE_PROCESSOR_SHELL (the perfetto package would download it)")
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    path = tmp_path / "t.perfetto-trace"
    write_perfetto(_timeline(), path)
    with TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=shell)) as tp:
        rows = list(
            tp.query(
                "select s.name, s.ts, s.dur from slice s join track t on s.track_id = t.id "
                "where t.name like 'stream %' order by s.ts"
            )
        )
        assert len(rows) == 7 and rows[0].ts == T0 + 1_010_000
        assert list(tp.query("select count(*) as n from flow"))[0].n == 5


# -- Chrome JSON ---------------------------------------------------------------


def test_chrome_trace(tmp_path):
    tl = _timeline()
    path = tmp_path / "t.json"
    write_chrome(tl, path)
    doc = json.loads(path.read_text(), parse_float=Decimal)  # Decimal: exact timestamps
    events = doc["traceEvents"]
    other = doc["otherData"]
    assert other["clock"] == "CLOCK_REALTIME" and other["host"] == "node-a" and other["ts_origin_ns"] == T0

    names = {
        (e["pid"], e.get("tid")): e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] in ("process_name", "thread_name")
    }
    assert names[(4242, None)] == "python (4242)" and names[(4242, 4250)] == "pt_graph"
    # Each GPU a process of its own (by UUID: pid 5151's device 0 is pid 4242's device 1),
    # with made-up pids below every profiled process's, one row per (process, stream).
    gpus = {v: k[0] for k, v in names.items() if k[1] is None and v.startswith("GPU")}
    assert set(gpus) == {f"GPU: {H100} ({UUID_A})", f"GPU: {H100} ({UUID_B})"}
    assert sorted(gpus.values()) == [1, 2]
    rows = {v: k for k, v in names.items() if k[0] in gpus.values() and k[1] is not None}
    gpu_a, gpu_b = gpus[f"GPU: {H100} ({UUID_A})"], gpus[f"GPU: {H100} ({UUID_B})"]
    assert {v for v, k in rows.items() if k[0] == gpu_a} == {
        "python (4242) GPU 0 stream 7",
        "python (4242) GPU 0 stream 7 (overlap 1)",
        "python (4242) GPU 0 stream 13",
    }
    assert {v for v, k in rows.items() if k[0] == gpu_b} == {
        "python (4242) GPU 1 stream 7",
        "trainer (5151) GPU 0 stream 0",
    }

    kernels = [e for e in events if e["ph"] == "X" and e["pid"] in (gpu_a, gpu_b)]
    assert len(kernels) == len(tl.kernels)
    for k, e in zip(tl.kernels, kernels):
        assert e["name"] == k.name
        # from the trace's origin, to the nanosecond
        assert e["ts"] == Decimal(k.start_ns - T0) / 1000 and e["dur"] == Decimal(k.end_ns - k.start_ns) / 1000
        # no args: speedscope names a frame by its name and args
        assert "args" not in e and other["mangled"][k.name] == k.mangled
    assert kernels[2]["ts"] == Decimal("1029.250")
    assert names[(kernels[2]["pid"], kernels[2]["tid"])].endswith("(overlap 1)")
    assert kernels[3]["cat"] == "cuda,cuda_graph" and kernels[0]["cat"] == "cuda"

    # Sampled launches: a zero-length slice on the launching thread with the launch's
    # details, and flows: "s" there, "f" on each kernel it launched.
    launches = {(e["tid"], e["ts"]): e for e in events if e["ph"] == "X" and e["pid"] in (4242, 5151)}
    gemm = launches[(4242, Decimal("1004.000"))]
    assert gemm["dur"] == 0 and gemm["name"] == "cudaLaunchKernel" and gemm["args"]["correlation_id"] == 100
    assert gemm["args"]["grid"] == [128, 1, 1] and gemm["args"]["launch_stack"][3] == "forward (/app/model.py:42)"
    graph = launches[(4250, Decimal("1040.000"))]
    assert graph["name"] == "cudaGraphLaunch" and graph["args"]["kernels"] == 2 and graph["args"]["graph_id"] == 5
    assert graph["args"]["launch_stack"][1] == "replay (/app/train.py:90)"
    assert graph["args"]["capture_stack"][2] == "forward (/app/model.py:51)"
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends) and len(starts) == 5
    for fid, f in ends.items():
        s = starts[fid]
        assert f["bp"] == "e"
        kernel = next(e for e in kernels if (e["pid"], e["tid"], e["ts"]) == (f["pid"], f["tid"], f["ts"]))
        launch = launches[(s["tid"], s["ts"])]
        assert launch["args"]["kernel"] == kernel["name"]
    assert len([s for s in starts.values() if (s["pid"], s["tid"]) == (4242, 4250)]) == 2

    counters = [e for e in events if e["ph"] == "C"]
    assert {(e["pid"], json.dumps(e["args"])) for e in counters} == {(4242, '{"cupti": 3}'), (0, '{"ringbuf": 2}')}
    assert all(e["ts"] == Decimal("10000.000") for e in counters)


def test_chrome_trace_gpu_pids_miss_every_profiled_process(tmp_path):
    """Profiled processes with pids 1 and 2 (a container's own namespace): the GPUs take
    the next free numbers, and a GPU without a UUID is its process's own."""
    tl = _timeline()
    new = {4242: 1, 5151: 3}
    for k in tl.kernels:
        k.pid = new[k.pid]
    tl.processes = {1: "python", 3: "trainer"}
    tl.threads = {(new[pid], tid): name for (pid, tid), name in tl.threads.items()}
    tl.drops = [Drop(d.what, d.count, new.get(d.pid)) for d in tl.drops]
    tl.devices = {(1, 0): GpuDevice(0, UUID_A, H100), (1, 1): GpuDevice(1, "", ""), (3, 0): GpuDevice(0, "", H100)}
    path = tmp_path / "t.json"
    write_chrome(tl, path)
    events = json.loads(path.read_text())["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {
        1: "python (1)",
        3: "trainer (3)",
        2: f"GPU: {H100} ({UUID_A})",
        4: "GPU 1 of python (1)",
        5: f"GPU 0: {H100} of trainer (3)",
        0: "gpu-agent",
    }


# -- NDJSON --------------------------------------------------------------------


def _lines(path: Path) -> list[dict]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    out = []
    for text in path.read_text().splitlines():
        line = json.loads(text)
        validator.validate(line)
        out.append(line)
    return out


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_ndjson_dedup(tmp_path):
    tl = _timeline()
    path = tmp_path / "e.ndjson"
    write_events(tl, path)
    lines = _lines(path)
    head = lines[0]
    assert head["type"] == "header" and head["schema_version"] == SCHEMA_VERSION and head["mode"] == "dedup"
    assert head["clock"] == "CLOCK_REALTIME" and (head["started_ns"], head["ended_ns"]) == (T0, T0 + 10_000_000)
    assert head["pids"] == [{"pid": 4242, "comm": "python"}, {"pid": 5151, "comm": "trainer"}]
    assert {"pid": 5151, "ordinal": 0, "uuid": UUID_B, "model": H100} in head["devices"]

    defined, kernels = {}, []
    for line in lines[1:]:
        if line["type"] == "callstack_def":
            assert line["id"] not in defined, "a stack defined twice"
            defined[line["id"]] = line["frames"]
        elif line["type"] == "kernel":
            for key in ("stack_id", "replay_stack_id"):
                if key in line:
                    assert line[key] in defined, "a stack used before its definition"
            kernels.append(line)
    assert set(defined) == {1, 2, 3, 4}
    assert defined[2][2] == {"name": "forward", "kind": "python", "file": "/app/model.py", "line": 51}
    assert defined[1][0]["kind"] == "kernel"
    assert len(kernels) == len(tl.kernels)
    gemm, relu, _, add1, *_ = kernels
    assert gemm["dur_ns"] == 15_500 and gemm["grid"] == [128, 1, 1] and gemm["stack_id"] == 1
    assert gemm["launch_tid"] == 4242 and gemm["launch_ns"] == tl.kernels[0].launch_ns
    assert "stack_id" not in relu and "grid" in relu and "launch_ns" not in relu
    assert (add1["graph_id"], add1["graph_node_id"], add1["stack_id"], add1["replay_stack_id"]) == (5, 1, 2, 3)
    drops = [line for line in lines if line["type"] == "drop"]
    assert drops == [
        {"type": "drop", "what": "cupti", "count": 3, "pid": 4242},
        {"type": "drop", "what": "ringbuf", "count": 2},
    ]
    assert lines[-2:] == drops


def test_ndjson_full_and_nostack(tmp_path):
    tl = _timeline()
    write_events(tl, tmp_path / "full", mode="full")
    write_events(tl, tmp_path / "none", mode="nostack")
    write_events(tl, tmp_path / "dedup", mode="dedup")
    full, none, dedup = (_lines(tmp_path / n) for n in ("full", "none", "dedup"))
    assert not any(line["type"] == "callstack_def" for line in full + none)
    fk = [x for x in full if x["type"] == "kernel"]
    nk = [x for x in none if x["type"] == "kernel"]
    dk = [x for x in dedup if x["type"] == "kernel"]
    assert fk[3]["stack"][2] == {"name": "forward", "kind": "python", "file": "/app/model.py", "line": 51}
    assert fk[3]["replay_stack"][1]["name"] == "replay" and "stack_id" not in fk[3]
    stack_keys = {"stack", "replay_stack", "stack_id", "replay_stack_id"}
    assert not any(stack_keys & set(x) for x in nk)
    # Without the stacks, the three modes say the same of every kernel.
    strip = [{k: v for k, v in x.items() if k not in stack_keys} for x in fk]
    assert strip == nk == [{k: v for k, v in x.items() if k not in stack_keys} for x in dk]
    assert (tmp_path / "none").stat().st_size < (tmp_path / "dedup").stat().st_size < (tmp_path / "full").stat().st_size
    with pytest.raises(ValueError):
        write_events(tl, tmp_path / "x", mode="compact")


@pytest.mark.parametrize(
    "change",
    [
        lambda k: k.update(grid=[128, 1]),  # a dim3 of two
        lambda k: k.update(start_ns="1760000000"),  # a time as a string
        lambda k: k.pop("correlation_id"),  # a required field missing
        lambda k: k.update(color="red"),  # an unknown field
        lambda k: k.update(stack=[]),  # both an id and frames
        lambda k: k.update(type="kernels"),  # no such line type
    ],
)
def test_schema_rejects_bad_lines(tmp_path, change):
    """The schema is strict enough for the validation above to mean something."""
    write_events(_timeline(), tmp_path / "e")
    good = next(x for x in _lines(tmp_path / "e") if x["type"] == "kernel" and "stack_id" in x)
    bad = dict(good)
    change(bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA, cls=jsonschema.Draft202012Validator)
