"""CUDA graphs: every replayed kernel is attributed to the code that captured it.

Mock CUDA app (shim/mock/graph_workload.c, tests/py_graph_workload.py) -> real shim
(CUPTI resource callbacks) -> real eBPF (node_stacks) -> agent -> pprof, read by Go
pprof. See docs/graphs.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from support.env import MOCK_DIR, ground_truth, mock_env, need_ebpf, private_shim
from gpu_agent.probes import contract as C
from gpu_agent.probes.bpf_session import BpfSession
from gpu_agent.probes.drain import AggKey
from gpu_agent.commands.common import status_line
from gpu_agent.join.collector import Collector
from gpu_agent.profile.vocabulary import GRAPH_BEFORE_ATTACH, GRAPH_REPLAY, GRAPH_REPLAY_LABEL
from support.pprof_tool import raw
from support.shared_agent import shared_agents

sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
import firer_script as F  # noqa: E402

GRAPH_APP = MOCK_DIR / "graph_workload"
# A replay run lasts a few ms past the shim's attach: on a loaded host (the parallel
# suite) it was gone before the agent read its maps (every frame [unknown]). Real jobs
# live longer; the agent's attach notes read a process within ms, not within 0 ms.
LINGER = ("--linger-ms", "300")
PY_GRAPH = Path(__file__).resolve().parent / "py_graph_workload.py"
CAPTURED_BY = {
    "k_attn_scores(float*, int)": "capture_attention",
    "k_attn_softmax(float*, int)": "capture_attention",
    "k_mlp_up(float*, int)": "capture_mlp",
    "k_mlp_down(float*, int)": "capture_mlp",
}


@pytest.fixture(scope="module")
def graph_app(built):
    need_ebpf()
    if not GRAPH_APP.exists():
        pytest.fail(f"{GRAPH_APP} not built: run `make`")
    return GRAPH_APP


@pytest.fixture(scope="module")
def agents(tmp_path_factory, built):
    yield from shared_agents(tmp_path_factory)


def record(agents, gt, *cmd):
    """cmd under the module's agent as `record` runs it (continuous collection): its
    samples (its pid's, every interval) and the workload."""
    agent = agents()
    w = agent.run(list(cmd), agent.env(gt), timeout=180)
    assert w.returncode == 0, w.stderr + w.stdout
    return w.samples, w


def per_kernel(samples) -> tuple[dict, dict]:
    ns, n = defaultdict(int), defaultdict(int)
    for s in samples:
        ns[s.system_names[0]] += s.values[0]
        n[s.system_names[0]] += s.values[1]
    return dict(ns), dict(n)


def assert_exact(samples, truth) -> None:
    ns, n = per_kernel(samples)
    assert ns == {k: v[1] for k, v in truth.items()}
    assert n == {k: v[0] for k, v in truth.items()}


def assert_under_capture_functions(samples) -> None:
    for kernel, fn in CAPTURED_BY.items():
        mine = [s for s in samples if s.frames[0] == kernel]
        assert mine, f"{kernel} missing"
        other = ({"capture_attention", "capture_mlp"} - {fn}).pop()
        for s in mine:
            assert s.frames[1] == GRAPH_REPLAY, s.frames[:8]
            assert fn in s.frames and "build_graph" in s.frames and other not in s.frames, s.frames[:10]
            # The replay site is a label, never in the stack.
            assert "replay_graph" not in s.frames
            assert s.labels.get(GRAPH_REPLAY_LABEL) in ("replay_graph", "[unsampled]"), s.labels
        assert any(s.labels[GRAPH_REPLAY_LABEL] == "replay_graph" for s in mine)


def test_capture_functions_exact_ns(graph_app, agents, tmp_path):
    """Capture from two named functions, instantiate, replay 100x."""
    gt = tmp_path / "truth.tsv"
    samples, _ = record(agents, gt, graph_app, "--replays", "100", *LINGER)
    truth = ground_truth(gt)
    assert {v[0] for v in truth.values()} == {100}
    assert_exact(samples, truth)
    assert_under_capture_functions(samples)
    assert not any(GRAPH_BEFORE_ATTACH in s.frames for s in samples)


def test_reinstantiated_and_several_exec_graphs(graph_app, agents, tmp_path):
    """Two exec graphs from one graph, replayed, destroyed, instantiated again:
    every exec node id maps back to its captured node."""
    gt = tmp_path / "truth.tsv"
    samples, _ = record(agents, gt, graph_app, "--replays", "50", "--execs", "2", "--reinstantiate", *LINGER)
    truth = ground_truth(gt)
    assert {v[0] for v in truth.values()} == {200}
    assert_exact(samples, truth)
    assert_under_capture_functions(samples)
    graphs = {s.labels["cuda_graph"] for s in samples}
    assert len(graphs) == 4, graphs  # 4 exec graphs, each attributed


def test_explicitly_built_graph(graph_app, agents, tmp_path):
    """cuGraphCreate + cuGraphAddKernelNode: each kernel under the function that added it."""
    gt = tmp_path / "truth.tsv"
    samples, _ = record(agents, gt, graph_app, "--add-nodes", "--replays", "100", *LINGER)
    assert_exact(samples, ground_truth(gt))
    added_by = {"capture_attention": "add_attention_nodes", "capture_mlp": "add_mlp_nodes"}
    for kernel, fn in CAPTURED_BY.items():
        mine = [s for s in samples if s.frames[0] == kernel]
        assert mine, kernel
        for s in mine:
            assert s.frames[1] == GRAPH_REPLAY and added_by[fn] in s.frames, s.frames[:8]
            assert "cuGraphAddKernelNode_v2" in s.frames and "build_graph_explicit" in s.frames


def _run_collector(proc, collector, timeout=120, drain_every=1.0):
    end = time.monotonic() + timeout
    last = time.monotonic()
    while proc.poll() is None and time.monotonic() < end:
        collector.poll(100)
        if time.monotonic() - last > drain_every:
            collector.drain()
            last = time.monotonic()
    collector.poll(50)


def test_agent_attached_after_capture(graph_app, tmp_path):
    """Captured before the agent attached: the replay stack, under a marker;
    a graph captured after the attach is attributed as usual."""
    gt = tmp_path / "truth.tsv"
    shim = private_shim(tmp_path)
    env = mock_env(gt, CUDA_INJECTION64_PATH=str(shim))
    proc = subprocess.Popen(
        [str(graph_app), "--replays", "100", "--wait-attach", "--linger-ms", "300"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "captured", proc.stderr.read()
        col = Collector(str(shim), pid_filter=lambda pid: pid == proc.pid)
        col.open()
        try:
            _run_collector(proc, col)
            assert proc.wait(10) == 0, proc.stderr.read()
            builder, stats = col.build_profile()
            counters = col.counters()
        finally:
            col.close()
    finally:
        if proc.poll() is None:
            proc.kill()
    out = tmp_path / "late.pb.gz"
    builder.write(out)
    samples = raw(out)
    truth = ground_truth(gt)
    assert_exact(samples, truth)  # never dropped
    for kernel in CAPTURED_BY:
        mine = [s for s in samples if s.frames[0] == kernel]
        assert mine, kernel
        for s in mine:
            assert s.frames[1] == GRAPH_BEFORE_ATTACH, s.frames[:6]
            assert not {"capture_attention", "capture_mlp", GRAPH_REPLAY} & set(s.frames)
            assert "replay_graph" in s.frames or s.frames[2] == "[unsampled]", s.frames[:6]
        assert any("replay_graph" in s.frames for s in mine)
    late = [s for s in samples if s.frames[0] == "k_late(float*, int)"]
    assert late and all(s.frames[1] == GRAPH_REPLAY and "capture_late" in s.frames for s in late), [
        s.frames[:6] for s in late
    ]
    assert counters["graph_node_unknown"] == 4 * 100
    assert counters["graph_attributed"] == 100
    # and the status line says so (a profile full of the marker has its reason in the log)
    line = status_line(stats, counters)
    assert f" graph_kernels_without_capture=400 graph_capture_stacks={counters['graph_nodes']}" in line, line


def test_destroyed_graphs_memory_stays_flat(graph_app, tmp_path):
    """10k capture/instantiate/replay/destroy rounds: shim and agent memory stay flat,
    BPF's node map holds only the nodes still waiting for their destroy."""
    gt = tmp_path / "truth.tsv"
    shim = private_shim(tmp_path)
    env = mock_env(gt, CUDA_INJECTION64_PATH=str(shim), GPU_AGENT_FLUSH_MS="50")
    col = Collector(str(shim))
    # Every exec graph has its own id (the cuda_graph label), hence its own
    # aggregation keys: room for all 20k, whatever the drain cadence on a busy machine.
    col.session.extra_cflags.append("-DGA_AGG_ENTRIES=65536")
    col.open()
    try:
        proc = subprocess.Popen(
            [str(graph_app), "--churn", "10000", "--sleep-us", "100", "--linger-ms", "400"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        col.pid_filter = lambda pid: pid == proc.pid
        _run_collector(proc, col, drain_every=0.2)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        nodes_left = col.session.graph_nodes(proc.pid)
        builder, _ = col.build_profile()
        frames_cached = len([k for k in col.stacks._frames if k[0] == proc.pid])
        counters = col.counters()
    finally:
        col.close()
    lines = dict((ln.split(" ", 1)[0], ln.split(" ", 1)[1]) for ln in out.splitlines() if ln.startswith("shim "))
    shim = dict(kv.split("=") for kv in lines["shim"].split())
    rss = [int(ln.split()[2]) for ln in out.splitlines() if ln.startswith("rss_kb ")]
    # Shim: nothing left per exec graph, and RSS grew only by the activity buffers
    # it allocated (a pool of at most 16 x 1088 KiB, filled as needed), not per graph.
    assert shim["execs"] == "0" and shim["exec_nodes"] == "0", shim
    assert int(shim["node_stacks"]) == 20000 and int(shim["clones"]) == 20000, shim
    assert len(rss) == 10, rss
    assert rss[-1] - rss[0] <= int(shim["activity_buffers"]) * 1088 + 1024, (rss, shim)
    # BPF: the node map holds at most the destroys still queued at exit.
    assert len(nodes_left) <= int(shim["destroy_queue"]) + 4, (len(nodes_left), shim)
    assert counters["graph_destroyed"] >= 40000 - int(shim["destroy_queue"]) - 4
    assert counters["drop_agg_full"] == 0
    # Agent: one capture stack for all 20k nodes; every kernel attributed, exactly.
    assert frames_cached <= 8, frames_cached
    out_pb = tmp_path / "churn.pb.gz"
    builder.write(out_pb)
    samples = raw(out_pb)
    assert_exact(samples, ground_truth(gt))
    for s in samples:
        assert s.frames[1] == GRAPH_REPLAY and "capture_attention" in s.frames, s.frames[:6]


def test_python_capture_stack(agents, tmp_path):
    """Capture from Python: the kernel's stack shows the Python method that captured it."""
    need_ebpf()
    if sys.version_info < (3, 10):
        pytest.fail("needs CPython >= 3.10")
    gt = tmp_path / "truth.tsv"
    samples, proc = record(agents, gt, sys.executable, PY_GRAPH, "--replays", "100")
    assert_exact(samples, ground_truth(gt))
    for kernel, method in (("k_py_attention", "Block.attention"), ("k_py_mlp", "Block.mlp")):
        mine = [s for s in samples if s.frames[0] == kernel]
        assert mine, kernel
        for s in mine:
            py = [
                (fn, os.path.basename(f))
                for fn, f, sn in zip(s.frames, s.files, s.system_names)
                if sn.startswith("python:")
            ]
            assert s.frames[1] == GRAPH_REPLAY, s.frames[:8]
            assert (method, PY_GRAPH.name) in py and ("Block.capture", PY_GRAPH.name) in py, (py, proc.stderr[-3000:])
            assert "replay_loop" not in s.frames
        assert any(s.labels.get(GRAPH_REPLAY_LABEL, "").startswith("replay_loop (") for s in mine), [
            s.labels for s in mine
        ]


def test_bpf_node_map_clone_and_destroy(tmp_path):
    """The three graph probes against BPF directly (probe firer): a kernel record of
    an exec node joins the stack of the node it was cloned from, until destroyed."""
    need_ebpf()
    lib, exe = F.build(tmp_path / "firer")
    K, S = 0x7777, 0xB1
    frames = [0x401000, 0x401100]
    exec_node, exec_node2 = (1 << 32) | 5, (1 << 32) | 6
    sc = F.Script()
    sc.node_stack(5, S, frames)
    sc.node_cloned(5, exec_node)
    sc.node_cloned(99, exec_node2)  # original never seen
    sc.batch([F.rec(K, 1, 100, graph_id=3, node=exec_node), F.rec(K, 1, 50, graph_id=3, node=exec_node2)])
    sc.node_destroyed(5)
    sc.node_destroyed(exec_node)
    sc.batch([F.rec(K, 2, 7, graph_id=3, node=exec_node)])  # destroyed: unknown now
    sc.wait()
    path = sc.write(tmp_path / "graph.bin")
    stacks = []
    s = BpfSession(str(lib), on_new_stack=lambda t, i, st: stacks.append((t, i, st)))
    s.open()
    try:
        p = subprocess.Popen([str(exe), str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline().split()[1])
        assert p.stdout.readline().startswith("wait")
        s.poll(50)
        nodes = s.graph_nodes(pid)
        p.stdin.write("go\n")
        p.stdin.close()
        p.wait(10)
        d = s.drain()
    finally:
        s.close()
    assert nodes == {}
    assert [(t, i) for t, i, _ in stacks] == [(pid, S)] and s is not None
    assert {k.start for k in d.totals if k.tgid == pid} == {stacks[0][2]}
    tot = {k._replace(start=0): v for k, v in d.totals.items() if k.tgid == pid}
    assert tot[AggKey(pid, 0, 7, 3, K, 0, S, C.AGG_CAPTURED)].gpu_ns == 100
    assert tot[AggKey(pid, 0, 7, 3, K, 0, 0, C.AGG_NODE_UNKNOWN)].gpu_ns == 57
    c = d.counters
    assert c["graph_nodes"] >= 1 and c["graph_clones"] >= 1 and c["graph_clone_unknown"] >= 1
