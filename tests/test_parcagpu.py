"""parcagpu's probes as a second source (agent/gpu_agent/parcagpu.py, bpf/parcagpu.h).

tests/parcagpu_like/pglike.c fires parcagpu-shaped probes (provider parcagpu, the
signatures of its src/probes.d, a semaphore on cuda_correlation), written from that
contract alone, from a CUPTI injection into the mock CUDA stack. Its file name says
nothing of parcagpu: `gpu-agent run` must find it by its probes, attach through
/proc/PID/root, and give its kernels launch stacks, exact GPU time, and the label
source=parcagpu. Everything is read back through Go's pprof.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from support.agent import Agent
from support.env import MOCK_DIR, REPO, ground_truth, mock_env, need_ebpf, private_shim

HERE = Path(__file__).resolve().parent
KERNEL = "k_pg"


def build_pglike(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lib = directory / "libcupti_client_test.so"  # nothing in the name says parcagpu
    cuda_inc = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
    if not Path(cuda_inc, "cupti.h").exists():
        cuda_inc = "/opt/gpu-agent-cuda/include"
    subprocess.run(["gcc", "-O2", "-g", "-Wall", "-fPIC", "-shared", "-I", str(REPO / "shim" / "third_party"),
                    "-I", cuda_inc, "-o", str(lib), str(HERE / "parcagpu_like" / "pglike.c"),
                    "-L", str(MOCK_DIR), "-l:libcupti.so.13", "-lpthread"], check=True)
    return lib


def run_workload(agent: Agent, lib: Path, gt: Path, iters: int, **env: str) -> dict:
    """The workload, started once this test's agent watches lib: another agent on the
    host (the suite runs beside one) may raise the semaphore first."""
    e = mock_env(gt, CUDA_INJECTION64_PATH=str(lib), **env)
    go = lib.parent / "go"
    p = subprocess.Popen([sys.executable, str(HERE / "parcagpu_like" / "pg_sites.py"), str(lib), str(iters),
                          str(HERE), "1.0", str(go)], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    wait_for_line(agent, f"also watching parcagpu library {lib}")
    go.touch()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def wait_for_line(agent: Agent, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([agent.proc.stderr], [], [], 0.2)
        if ready:
            line = agent.proc.stderr.readline()
            seen.append(line)
            if text in line:
                return
    pytest.fail(f"the agent never said {text!r}: {''.join(seen)[-2000:]}")


@pytest.fixture
def agent(tmp_path, built):
    need_ebpf()
    a = Agent(tmp_path / "profiles", "--shim", private_shim(tmp_path / "shim"), "--discover-interval", "0.2s")
    yield a
    a.kill()


def by_site(samples) -> tuple[Counter, Counter, set]:
    """(GPU ns, launches) of KERNEL per call site (site_a, site_b, or none), sources."""
    ns, n, sources = Counter(), Counter(), set()
    for s in samples:
        if s.frames[0] != KERNEL:
            continue
        site = next((f for f in s.frames if f in ("site_a", "site_b")), "[unsampled]"
                    if "[unsampled]" in s.frames else "none")
        ns[site] += s.values[0]
        n[site] += s.values[1]
        sources.add(s.labels.get("source"))
    return ns, n, sources


def test_parcagpu_process_found_by_its_probes_with_exact_kernels_and_stacks(agent, tmp_path):
    """Every launch sampled (no rate limit): each kernel's exact GPU time and count,
    each under the Python call site that launched it (3:1), labelled source=parcagpu."""
    lib = build_pglike(tmp_path / "pg")
    gt = tmp_path / "truth.tsv"
    launched = run_workload(agent, lib, gt, 3000, PGLIKE_RATE="0")
    agent.stop()
    truth = ground_truth(gt)
    (launches, gpu_ns), = truth.values()
    assert (launches, gpu_ns) == (launched["launches"], launched["gpu_ns"])
    ns, n, sources = by_site(agent.samples())
    assert sum(n.values()) == launches and sum(ns.values()) == gpu_ns, (n, ns)
    assert (n["site_a"], n["site_b"]) == (9000, 3000), n  # the 1 launch before the loop: "none"
    assert sources == {"parcagpu"}


def test_rate_limited_parcagpu_keeps_unsampled_time(agent, tmp_path):
    """parcagpu's default: 100 correlation probes a second per thread. With every
    kernel record passed on, the kernels' GPU time stays whole (the estimator splits
    it over the sampled stacks), none is dropped, and the stacks come from a few
    hundred correlation probes, not 80 000. (The split is not 3:1: a token bucket
    samples by time, so a launch that follows a longer CPU gap is likelier taken;
    site_b's launch follows site_a's loop and a call. docs/parcagpu.md.)"""
    lib = build_pglike(tmp_path / "pg")
    gt = tmp_path / "truth.tsv"
    run_workload(agent, lib, gt, 20000, PGLIKE_RATE="100", PGLIKE_ALL_RECORDS="1")
    out = agent.stop()
    (launches, gpu_ns), = ground_truth(gt).values()
    ns, n, sources = by_site(agent.samples())
    assert sum(n.values()) == launches and sum(ns.values()) == gpu_ns, (n, ns, launches)
    assert n["site_a"] > n["site_b"] > 0, n
    sampled = sum(int(m) for m in re.findall(r" samples=(\d+)", out))
    assert 0 < sampled < 0.02 * launches, (sampled, launches)
    assert sources == {"parcagpu"}


def test_impossible_parcagpu_records_are_counted_not_profiled(agent, tmp_path):
    """A record that ends before it starts, or has no name, is counted as a drop on
    the status line and kept out of the profile, and the good records stay exact."""
    lib = build_pglike(tmp_path / "pg")
    gt = tmp_path / "truth.tsv"
    run_workload(agent, lib, gt, 500, PGLIKE_RATE="0", PGLIKE_BAD="1")
    out = agent.stop()
    (launches, gpu_ns), = ground_truth(gt).values()
    ns, n, _ = by_site(agent.samples())
    assert (sum(n.values()), sum(ns.values())) == (launches, gpu_ns)
    # The status line shows the running totals: the last one is the count.
    assert re.findall(r"drop_impossible=(\d+)", out)[-1] == str(launches), out[-600:]
    assert re.findall(r"drop_bad_record=(\d+)", out)[-1] == str(launches), out[-600:]


@pytest.mark.parametrize("spec,kind,reg,disp,size,signed", [
    ("8@%rax", "reg", "rax", 0, 8, False),
    ("-4@%ebx", "reg", "rbx", 0, 4, True),
    ("4@92(%r13)", "mem", "r13", 92, 4, False),
    ("8@-24(%rbp)", "mem", "rbp", -24, 8, False),
    ("-8@(%rsp)", "mem", "rsp", 0, 8, True),
    ("4@$7", "imm", None, 7, 4, False),
    ("1@%r9b", "reg", "r9", 0, 1, False),
])
def test_argument_specs(spec, kind, reg, disp, size, signed):
    from gpu_agent import contract as C
    from gpu_agent.parcagpu import parse_arg
    a = parse_arg(spec)
    kinds = {"reg": C.PG_ARG_REG, "mem": C.PG_ARG_MEM, "imm": C.PG_ARG_IMM}
    assert a.kind == kinds[kind] and (a.size, bool(a.is_signed)) == (size, signed)
    assert a.disp == disp & 0xFFFFFFFFFFFFFFFF
    if reg is not None:
        assert a.reg == C.PG_REG_NAMES.split(",").index(reg)


@pytest.mark.parametrize("spec", ["8@foo(%rip)", "8@(%rax,%rbx,8)", "3@%rax", "%rax", "8@%xmm0"])
def test_argument_specs_it_cannot_read_are_refused(spec):
    from gpu_agent.parcagpu import parse_arg
    with pytest.raises(ValueError):
        parse_arg(spec)
