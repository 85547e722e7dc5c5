"""Unit tests of the CUPTI shim (build/libgpu_agent_shim.so) on its own.

No CUDA and no mock stack: tests/shim_unit/harness.c plays the driver (it
calls InitializeInjection like cuInit does), tests/shim_unit/fakecupti.c plays
libcupti, and tests/shim_unit/raise_semaphore.py plays the agent (a uprobe
with ref_ctr_offset on gpu_agent:attach, run by /usr/bin/python3 with bcc).
Must run as root; nothing is skipped: a missing tool is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from support.env import BENCH_SHIM, shim_without_cbid

REPO = Path(__file__).resolve().parent.parent
SHIM = REPO / "build" / "libgpu_agent_shim.so"
CONTRACT = REPO / "shim" / "include" / "gpu_agent_probes.h"
HERE = Path(__file__).resolve().parent / "shim_unit"
CUDA_INC = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
SYS_PY = "/usr/bin/python3"  # has bcc (python3-bpfcc)

EXPORTS = {
    "InitializeInjection",
    "gpu_agent_attach_semaphore",
    "gpu_agent_replay_semaphore",
    "gpu_agent_shim_state",
    "gpu_agent_contract_version",
    "gpu_agent_shim_counter",
    "gpu_agent_shim_counter_name",
    "gpu_agent_shim_poll",
    "gpu_agent_trace_until_ns",
}
# counter names (shim/include/gpu_agent_shim.h), as the harness prints them
C_LAUNCHES, C_SAMPLES, C_FORCED, C_BATCHES, C_RECORDS = ("launches", "samples", "forced_samples", "batches", "records")
C_NAMES, C_ATTACHES, C_DETACHES, C_POLLER = "names", "attaches", "detaches", "poller_running"


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def shim(tmp_path_factory) -> Path:
    """A private copy of the built shim: uprobes and semaphores are per inode, so an agent
    that other tests (or a live `gpu-agent run`) attach to build/ cannot disturb these tests.
    Not named libgpu_agent_shim.so: `gpu-agent run` attaches to every mapped file of that
    name it finds in /proc/*/maps (copies baked into container images)."""
    subprocess.run(["make", "-s", "-C", str(REPO), "shim"], check=True, capture_output=True, timeout=300)
    assert SHIM.is_file()
    private = tmp_path_factory.mktemp("shim") / "libgpu_agent_shim-private.so"
    shutil.copy(SHIM, private)
    return private


@pytest.fixture(scope="session")
def bench_shim(tmp_path_factory) -> Path:
    """A private copy of the benchmark build (audit mode, GPU_AGENT_EXP_*)."""
    subprocess.run(["make", "-s", "-C", str(REPO), "shim-bench"], check=True, capture_output=True, timeout=300)
    private = tmp_path_factory.mktemp("shim-bench") / "libgpu_agent_shim-bench-private.so"
    shutil.copy(BENCH_SHIM, private)
    return private


@pytest.fixture(scope="session")
def tools(tmp_path_factory, shim):
    d = tmp_path_factory.mktemp("shim_unit")
    # -no-pie: frames can be checked against `nm` addresses directly.
    # -fomit-frame-pointer: stacks must come from eh_frame.
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-fomit-frame-pointer",
            "-no-pie",
            f"-I{CUDA_INC}",
            "-o",
            str(d / "harness"),
            str(HERE / "harness.c"),
            "-ldl",
        ],
        check=True,
    )
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-fPIC",
            "-shared",
            f"-I{CUDA_INC}",
            "-o",
            str(d / "libfakecupti.so"),
            str(HERE / "fakecupti.c"),
            "-lpthread",
        ],
        check=True,
    )
    return {"harness": d / "harness", "fakecupti": d / "libfakecupti.so", "dir": d}


def clean_env(**extra: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_AGENT_", "CUDA_INJECTION", "LD_PRELOAD", "FAKE_CUPTI"))
    }
    env["GPU_AGENT_DUTY_CYCLE"] = "1"  # continuous: the counts below are exact
    env.update(extra)
    return env


def run(cmd, env, timeout=30) -> tuple[dict, str, subprocess.CompletedProcess]:
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    results = [
        dict(kv.split("=", 1) for kv in line.split()[1:])
        for line in p.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    return (results[-1] if results else {}), p.stderr, p


def shim_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def c(res: dict, name: str) -> int:
    """A shim counter from a RESULT line; 0 when no shim was loaded to print it."""
    return int(res.get(name, 0))


# ---------------------------------------------------------------- ELF: probes, nops, symbols


def notes(path: Path) -> list[dict]:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, check=True).stdout
    res = []
    for m in re.finditer(
        r"Provider: (\w+)\n\s+Name: (\w+)\n\s+Location: (0x[0-9a-f]+), Base: (0x[0-9a-f]+), "
        r"Semaphore: (0x[0-9a-f]+)\n\s+Arguments:(.*)",
        out,
    ):
        res.append(
            {
                "provider": m.group(1),
                "name": m.group(2),
                "pc": int(m.group(3), 16),
                "semaphore": int(m.group(5), 16),
                "args": m.group(6).split(),
            }
        )
    return res


def contract_probes() -> dict[str, list[str]]:
    """name -> argument kinds (u32, u64, ptr): contract.PROBES, which
    tests/test_contract.py checks against the header's probe table."""
    from gpu_agent.probes import contract as C

    return {name: [kind for _, kind in args] for name, args in C.PROBES.items()}


def test_contract_lists_the_fourteen_probes():
    assert set(contract_probes()) == {
        "attach",
        "replay",
        "cuda_correlation",
        "kernel_batch",
        "kernel_name",
        "graph_node_stack",
        "graph_node_cloned",
        "graph_node_destroyed",
        "gpu_device",
        "pc_sample_batch",
        "pc_stall_reason",
        "cubin_loaded",
        "published",
        "period_shape",
    }


def test_probe_names_and_arguments_match_the_contract(shim):
    want = contract_probes()
    got = notes(shim)
    assert got, "no .note.stapsdt in the shim"
    assert {n["provider"] for n in got} == {"gpu_agent"}
    assert {n["name"] for n in got} == set(want)
    for n in got:
        decls = want[n["name"]]
        assert len(n["args"]) == len(decls), (n, decls)
        for spec, decl in zip(n["args"], decls):
            size = spec.split("@", 1)[0]
            expect = "8" if decl in ("ptr", "u64") else "4"
            assert size == expect, f"{n['name']}: {decl!r} has spec {spec!r}; want unsigned {expect} bytes"


def test_every_probe_site_is_a_5_byte_nop(shim):
    for n in notes(shim):
        out = subprocess.run(
            ["objdump", "-d", f"--start-address={n['pc']:#x}", f"--stop-address={n['pc'] + 5:#x}", str(shim)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        m = re.search(rf"^\s*{n['pc']:x}:\s+((?:[0-9a-f]{{2}} )+)", out, re.M)
        assert m, out
        assert m.group(1).split() == ["0f", "1f", "44", "00", "00"], (n["name"], out)


def symbols(shim: Path, dynamic: bool) -> dict[str, tuple[int, str, str]]:
    out = subprocess.run(
        ["readelf", "-W", "--dyn-syms" if dynamic else "--syms", str(shim)], capture_output=True, text=True, check=True
    ).stdout
    res = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8 and re.fullmatch(r"\d+:", f[0]) and f[6] != "UND":
            res[f[7].split("@")[0]] = (int(f[1], 16), f[4], f[5])
    return res


def test_only_attach_and_replay_have_semaphores_and_they_are_exported(shim):
    by_name = {n["name"]: n for n in notes(shim)}
    sem = by_name["attach"]["semaphore"]
    assert sem != 0 and by_name["replay"]["semaphore"] not in (0, sem)
    assert all(n["semaphore"] == 0 for n in notes(shim) if n["name"] not in ("attach", "replay"))
    for dynamic in (True, False):
        syms = symbols(shim, dynamic)
        assert "gpu_agent_attach_semaphore" in syms, f"missing from {'.dynsym' if dynamic else '.symtab'}"
        addr, bind, vis = syms["gpu_agent_attach_semaphore"]
        assert addr == sem and bind == "GLOBAL" and vis == "DEFAULT"
    sections = subprocess.run(["readelf", "-SW", str(shim)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\.probes\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\S+\s+(\S+)", sections)
    assert m and int(m.group(1), 16) <= sem < int(m.group(1), 16) + int(m.group(2), 16)
    assert "W" in m.group(3) and "A" in m.group(3)


def test_exports_and_no_link_to_cuda_or_cupti(shim):
    syms = symbols(shim, True)
    exported = {
        name for name, (_, bind, vis) in syms.items() if bind in ("GLOBAL", "WEAK") and vis == "DEFAULT" and name
    }
    assert exported == EXPORTS
    dyn = subprocess.run(["readelf", "-d", str(shim)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dyn)
    assert not [n for n in needed if "cupti" in n or "cuda" in n], needed


# ---------------------------------------------------------------- processes without an agent


def test_non_cuda_process_with_ld_preload_is_silent_and_inert(shim, tools):
    res, err, p = run([tools["harness"], "idle", "200"], clean_env(LD_PRELOAD=str(shim)))
    assert p.returncode == 0, err
    assert len(shim_lines(err)) <= 1 and not err.strip(), err
    assert res["pollers"] == "0", "a poller thread started in a process that never used CUDA"
    assert res["cupti_mapped"] == "0"
    assert res["injection"] == str(shim.resolve()), "LD_PRELOAD did not point CUDA_INJECTION64_PATH at the shim"
    assert c(res, C_POLLER) == 0
    # A plain program too.
    p = subprocess.run(["/bin/true"], env=clean_env(LD_PRELOAD=str(shim)), capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == ""


def test_existing_injection_path_is_left_alone(shim, tools):
    res, err, _ = run(
        [tools["harness"], "idle", "0"], clean_env(LD_PRELOAD=str(shim), CUDA_INJECTION64_PATH="/some/other/tool.so")
    )
    assert res["injection"] == "/some/other/tool.so" and err == ""


def test_cuda_process_without_agent_does_no_cupti_work(shim, tools):
    # A bogus CUPTI path proves CUPTI is not even looked for until an agent attaches.
    res, err, p = run(
        [tools["harness"], "inject", "1", "400"],
        clean_env(
            CUDA_INJECTION64_PATH=str(shim), GPU_AGENT_CUPTI_PATH="/nonexistent/libcupti.so", GPU_AGENT_POLL_MS="20"
        ),
    )
    assert p.returncode == 0, err
    assert err == ""
    assert res["state"] == "0" and res["pollers"] == "1" and res["cupti_mapped"] == "0"
    assert all(c(res, i) == 0 for i in (C_LAUNCHES, C_SAMPLES, C_BATCHES, C_ATTACHES))


def test_known_env_vars_are_not_reported(shim, tools):
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_SAMPLE_PERIOD="32",
        GPU_AGENT_GRAPH_SAMPLE_PERIOD="4",
        GPU_AGENT_POLL_MS="50",
        GPU_AGENT_FLUSH_MS="500",
        GPU_AGENT_DEBUG="0",
        GPU_AGENT_CUPTI_PATH="/nonexistent/libcupti.so",
        GPU_AGENT_SHIM=str(shim),
        GPU_AGENT_BPF_DIR="/tmp",
        GPU_AGENT_INCLUDE_DIR="/tmp",
    )
    for mode in (["inject", "1", "100"], ["idle", "0"]):
        _, err, p = run([tools["harness"], *mode], dict(env, LD_PRELOAD=str(shim)))
        assert p.returncode == 0 and err == "", err


def test_unknown_env_vars_are_reported_once_in_one_line(shim, tools):
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        LD_PRELOAD=str(shim),
        GPU_AGENT_SAMPLE_PERIOD="16",
        GPU_AGENT_SAMPEL_PERIOD="16",
        GPU_AGENT_BOGUS="1",
    )
    _, err, p = run([tools["harness"], "inject", "3", "250"], env)
    assert p.returncode == 0
    lines = shim_lines(err)
    assert len(lines) == 1, err
    assert lines[0].startswith("gpu-agent-shim:")
    assert "GPU_AGENT_SAMPEL_PERIOD" in lines[0] and "GPU_AGENT_BOGUS" in lines[0]
    assert "GPU_AGENT_SAMPLE_PERIOD" not in lines[0].replace("GPU_AGENT_SAMPEL_PERIOD", "")


def test_double_init_via_ld_preload_and_injection_initializes_once(shim, tools):
    env = clean_env(LD_PRELOAD=str(shim), CUDA_INJECTION64_PATH=str(shim), GPU_AGENT_DEBUG="1")
    res, err, p = run([tools["harness"], "inject", "3", "300"], env)
    assert p.returncode == 0, err
    assert err.count("initialized in pid") == 1, err
    assert res["pollers"] == "1"
    # Only LD_PRELOAD: the constructor points the driver at the same file.
    res, err, _ = run([tools["harness"], "inject", "2", "300"], clean_env(LD_PRELOAD=str(shim), GPU_AGENT_DEBUG="1"))
    assert err.count("initialized in pid") == 1 and res["pollers"] == "1", err


def test_two_copies_of_the_shim_initialize_once(shim, tools):
    copy = tools["dir"] / "copy" / "libgpu_agent_shim.so"
    copy.parent.mkdir(exist_ok=True)
    shutil.copy(shim, copy)
    env = clean_env(LD_PRELOAD=str(shim), CUDA_INJECTION64_PATH=str(copy), GPU_AGENT_DEBUG="1")
    res, err, p = run([tools["harness"], "inject", "2", "300"], env)
    assert p.returncode == 0, err
    assert err.count("initialized in pid") == 1, err
    assert res["pollers"] == "1"


def test_fork_child_gets_a_live_poller_and_exits_cleanly(shim, tools):
    env = clean_env(CUDA_INJECTION64_PATH=str(shim), GPU_AGENT_POLL_MS="20")
    t0 = time.monotonic()
    _, err, p = run([tools["harness"], "fork", "0", "150"], env)
    assert p.returncode == 0, err
    assert time.monotonic() - t0 < 5
    rows = [
        dict(kv.split("=", 1) for kv in line.split()[1:])
        for line in p.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    child = next(r for r in rows if r["mode"] == "child")
    parent = next(r for r in rows if r["mode"] == "fork")
    assert child["pollers"] == "1" and parent["pollers"] == "1"
    assert child["state"] == "0" and err == ""


# ---------------------------------------------------------------- with an agent (uprobe + semaphore)


class Agent:
    """raise_semaphore.py in the background: the semaphore is up until stop()."""

    def __init__(self, shim: Path, seconds: float = 0):
        if os.geteuid() != 0:
            pytest.fail("this test attaches uprobes and must run as root")
        if not Path(SYS_PY).exists():
            pytest.fail(f"{SYS_PY} (with bcc) is required")
        cmd = [SYS_PY, str(HERE / "raise_semaphore.py"), str(shim)]
        if seconds:
            cmd += ["--seconds", str(seconds)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if line.strip() != "READY":
            self.p.kill()
            pytest.fail(f"raise_semaphore.py did not start: {line}{self.p.stderr.read()}")

    def stop(self) -> dict:
        out, err = self.p.communicate(timeout=60)  # closes stdin: the agent leaves
        assert self.p.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])


def nm_symbols(binary: Path) -> list[tuple[int, str]]:
    out = subprocess.run(["nm", "-n", str(binary)], capture_output=True, text=True, check=True).stdout
    return [(int(f[0], 16), f[2]) for f in (line.split() for line in out.splitlines()) if len(f) == 3]


def symbolize(addr: int, syms: list[tuple[int, str]]) -> str | None:
    best = None
    for a, name in syms:
        if a <= addr:
            best = name
        else:
            break
    return best


def test_agent_present_at_start_sees_the_first_launch_and_every_kernel(shim, tools):
    agent = Agent(shim)
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
        FAKE_CUPTI=str(tools["fakecupti"]),
        GPU_AGENT_SAMPLE_PERIOD="16",
    )
    try:
        res, err, p = run([tools["harness"], "launch", "2000", "0"], env)
    finally:
        got = agent.stop()
    assert p.returncode == 0, err
    assert "FAKE subscribe" in err
    assert res["state"] == "1" and c(res, C_ATTACHES) == 1
    # A runtime launch counts once, at the driver launch under it.
    assert c(res, C_LAUNCHES) == 2000
    # First launch of each function forced (weight 1); the rest ~1/16.
    assert c(res, C_FORCED) == 2
    assert got["samples"] == c(res, C_SAMPLES) and 2000 / 16 * 0.6 < got["samples"] < 2000 / 16 * 1.5
    assert got["weight_sum"] == 2 + 16 * (got["samples"] - 2)
    assert got["zero_stack_id"] == 0
    # Exact totals: every kernel record arrives (the exit flush delivers the tail).
    assert got["records"] == 2000 and got["dropped"] == 0 and got["bad_record_size"] == 0
    assert got["name_chunks"] == 2 and got["name_bytes"] == len("_Z7kernelAPfi") * 2
    assert got["attach_hits"] == 1
    # The first sample's stack: eh_frame-unwound, the shim's and CUPTI's frames dropped,
    # frames[0] is the (fake) CUDA API's caller here, i.e. the launching function of the app.
    syms = nm_symbols(tools["harness"])
    frames = [f for f in got["first_frames"] if f]
    names = [symbolize(f, syms) for f in frames]
    assert names[0] == "launch_cuLaunchKernel", names
    assert "main" in names, names


def test_agent_leaving_detaches_cupti(shim, tools):
    agent = Agent(shim, seconds=1.0)
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
        FAKE_CUPTI=str(tools["fakecupti"]),
        GPU_AGENT_POLL_MS="20",
        GPU_AGENT_DEBUG="1",
    )
    res, err, p = run([tools["harness"], "launch", "300", "10"], env)
    got = agent.stop()
    assert p.returncode == 0, err
    assert res["state"] == "0" and c(res, C_ATTACHES) == 1 and c(res, C_DETACHES) == 1, err
    assert "FAKE unsubscribe" in err and "detached" in err and "error" not in err.lower()
    # ...and tears CUPTI down at the next launch's API exit (nothing lingers): after the
    # detach's unsubscribe, while the job still runs. Not after the "detached" line: the
    # launching thread may finalize between the unsubscribe and that line's print (a
    # three-worker suite saw it once, 2026-12-03)
    assert err.index("FAKE unsubscribe") < err.index("FAKE finalize") < err.index("exit (pid"), err
    assert "teardowns (pid" in err and ": 1, finalize" in err, err
    assert 0 < c(res, C_LAUNCHES) < 300  # only launches while attached are seen
    assert got["records"] > 0


def test_missing_cupti_logs_one_line_then_nothing(shim, tools):
    agent = Agent(shim)
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_CUPTI_PATH="/nonexistent/libcupti.so.13",
        FAKE_CUPTI=str(tools["fakecupti"]),
        GPU_AGENT_POLL_MS="20",
    )
    try:
        res, err, p = run([tools["harness"], "launch", "50", "5"], env)
    finally:
        agent.stop()
    assert p.returncode == 0
    lines = shim_lines(err)
    assert len(lines) == 1 and lines[0].startswith("gpu-agent-shim:") and "cupti" in lines[0].lower(), err
    assert res["state"] == "-1" and c(res, C_LAUNCHES) == 0


@pytest.mark.parametrize("code,state", [(1, "-1"), (8, "0")])  # INVALID_PARAMETER, OUT_OF_MEMORY
def test_cupti_errors_are_handled(shim, tools, code, state):
    agent = Agent(shim)
    env = clean_env(
        CUDA_INJECTION64_PATH=str(shim),
        GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
        FAKE_CUPTI=str(tools["fakecupti"]),
        FAKE_CUPTI_FAIL=str(code),
        GPU_AGENT_POLL_MS="20",
    )
    try:
        res, err, p = run([tools["harness"], "launch", "40", "5"], env)
    finally:
        agent.stop()
    assert p.returncode == 0
    lines = shim_lines(err)
    assert len(lines) == 1 and lines[0].startswith("gpu-agent-shim:"), err
    # OOM: off until the agent re-attaches (semaphore drop), not retried every poll.
    assert res["state"] == state and c(res, C_ATTACHES) == 0


def test_runtime_domain_experiment_counts_each_launch_once(bench_shim, tools):
    """GPU_AGENT_EXP_CALLBACKS=runtime (the benchmark build): both domains' callbacks
    fire for a runtime launch; the pair still counts once."""
    agent = Agent(bench_shim)
    env = clean_env(
        CUDA_INJECTION64_PATH=str(bench_shim),
        GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
        FAKE_CUPTI=str(tools["fakecupti"]),
        GPU_AGENT_EXP_CALLBACKS="runtime",
    )
    try:
        res, err, p = run([tools["harness"], "launch", "400", "0"], env)
    finally:
        got = agent.stop()
    assert p.returncode == 0, err
    assert c(res, C_LAUNCHES) == 400 and got["records"] == 400


def test_omitting_one_cbid_at_build_time_loses_that_path(shim, tools):
    (tools["dir"] / "omit").mkdir(exist_ok=True)
    variant = shim_without_cbid(tools["dir"] / "omit" / "libgpu_agent_shim.so", bench=True)
    # Launches are counted at the driver's callbacks only, so without cuLaunchKernel's
    # neither the 100 plain cuLaunchKernel launches nor the 100 cudaLaunchKernel ones
    # (a cuLaunchKernel under each) are seen; with the runtime domain's callbacks too
    # (GPU_AGENT_EXP_CALLBACKS=runtime) the cudaLaunchKernel ones are.
    for extra, seen in (({}, 0), ({"GPU_AGENT_EXP_CALLBACKS": "runtime"}, 100)):
        agent = Agent(variant)
        env = clean_env(
            CUDA_INJECTION64_PATH=str(variant),
            GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
            FAKE_CUPTI=str(tools["fakecupti"]),
            **extra,
        )
        try:
            res, err, p = run([tools["harness"], "launch", "200", "0"], env)
        finally:
            got = agent.stop()
        assert p.returncode == 0, err
        assert c(res, C_LAUNCHES) == seen, extra
        assert got["records"] == 200  # totals do not depend on callbacks


def test_the_injected_shim_has_no_benchmark_settings(tools, shim):
    """Audit mode and the GPU_AGENT_EXP_* knobs are the benchmark build's: the shim
    users inject names them in one line as ignored, writes no audit file, and does
    not switch the runtime domain's callbacks on."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ga-nobench-"))
    try:
        agent = Agent(shim)
        env = clean_env(
            CUDA_INJECTION64_PATH=str(shim),
            GPU_AGENT_CUPTI_PATH=str(tools["fakecupti"]),
            FAKE_CUPTI=str(tools["fakecupti"]),
            GPU_AGENT_AUDIT_FILE=str(d / "audit.tsv"),
            GPU_AGENT_EXP_CALLBACKS="runtime",
            GPU_AGENT_DEBUG="1",
        )
        try:
            res, err, p = run([tools["harness"], "launch", "400", "0"], env)
        finally:
            agent.stop()
        assert p.returncode == 0, err
        lines = [ln for ln in err.splitlines() if "benchmark build" in ln]
        assert len(lines) == 1 and "GPU_AGENT_AUDIT_FILE" in lines[0] and "GPU_AGENT_EXP_CALLBACKS" in lines[0], err
        assert "unknown environment variable" not in err, err
        assert not (d / "audit.tsv").exists()
        assert c(res, C_LAUNCHES) == 400  # each launch once, at the driver's callback

        # The code is absent, not just switched off (the benchmark build has it).
        def funcs(lib):
            out = subprocess.run(["nm", "-C", str(lib)], capture_output=True, text=True, check=True)
            return set(re.findall(r"^\S* *\w ([\w:]+)", out.stdout, re.M))

        bench_only = {"ga_audit_init", "ga_audit_tally", "ga_bench_read_config", "ga_exp_toggled_off"}
        assert not funcs(shim) & bench_only
        assert bench_only <= funcs(BENCH_SHIM)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_privileged_process_takes_no_file_path_from_its_environment(tools, shim, bench_shim):
    """A setuid program run by another user (AT_SECURE) ignores GPU_AGENT_AUDIT_FILE and
    GPU_AGENT_CUPTI_PATH: that user could otherwise make it write, or load, a file.
    The same program run by its owner honours them."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="ga-secure-"))
    try:
        os.chmod(d, 0o755)
        harness, lib = d / "harness", d / "libgpu_agent_shim.so"
        shutil.copy(tools["harness"], harness)
        shutil.copy(bench_shim, lib)  # the build that has audit mode
        os.chown(harness, 0, 0)
        os.chmod(harness, 0o4755)  # setuid root
        env = clean_env(CUDA_INJECTION64_PATH=str(lib), GPU_AGENT_AUDIT_FILE=str(d / "audit.tsv"))
        _, err, p = run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", harness, "inject", "1", "50"], env
        )
        assert p.returncode == 0, err
        assert "GPU_AGENT_AUDIT_FILE ignored" in err, err
        _, err, p = run([harness, "inject", "1", "50"], env)  # root runs its own program
        assert p.returncode == 0 and "ignored" not in err, err
    finally:
        shutil.rmtree(d, ignore_errors=True)
