"""Fidelity of duty-cycled collection against the full CUPTI trace of the same run.

Runs one workload under `gpu-agent record --duty-cycle N` with the shim in audit
mode (GPU_AGENT_AUDIT_FILE): the shim keeps CUPTI on all the time, forwards only
the launches made inside collection windows (weighted as in normal operation:
all launches / windowed launches, about N) and writes, per kernel, the full
trace's launches and GPU ns at exit.
The profile's per-kernel estimate is then compared with that full trace.

Audit mode keeps CUPTI on, so this run's timing says nothing about overhead
(bench/gpu/run_overhead.py measures that); its windows, weights and estimator
are the normal ones.

Usage (root, on the GPU node):
  python3 bench/gpu/window_fidelity.py OUT_DIR WORKLOAD STEPS [--duty-cycle 10] [--window-ms 20]
WORKLOAD: eager | mlp | graph | compiled (bench/gpu/overhead.py) or driver-graph.
Prints one line per kernel (top kernels covering 99 % of GPU time, then the rest
summed) and a JSON summary line.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "agent"))
from gpu_agent.proto import profile_pb2  # noqa: E402  (the real profile.proto)


def profile_kernels(path: Path) -> dict[str, list[int]]:
    """mangled kernel name -> [gpu_ns, launches] over the profile's CUDA_KERNEL leaves."""
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(path.read_bytes()))
    s = p.string_table
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: loc for loc in p.location}
    out: dict[str, list[int]] = {}
    for smp in p.sample:
        leaf = locs[smp.location_id[0]]
        f = funcs[leaf.line[0].function_id]
        if s[f.filename] != "CUDA_KERNEL":
            continue
        acc = out.setdefault(s[f.system_name] or s[f.name], [0, 0])
        acc[0] += smp.value[0]
        acc[1] += smp.value[1]
    return out


def audit_rows(path: Path) -> dict[str, list[int]]:
    rows = {}
    for line in path.read_text().splitlines():
        if line.startswith(("#", "kernel_id")):
            continue
        _, launches, ns, wl, wns, name = line.split("\t", 5)
        acc = rows.setdefault(name, [0, 0, 0, 0])
        for i, v in enumerate((launches, ns, wl, wns)):
            acc[i] += int(v)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("workload")
    ap.add_argument("steps", type=int)
    ap.add_argument("--duty-cycle", type=int, default=10)
    ap.add_argument("--window-ms", type=int, default=20)  # the shim's default
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    prof, audit = a.out / f"{a.workload}.pb.gz", a.out / f"{a.workload}.audit.tsv"
    if a.workload == "driver-graph":
        from run_overhead import driver_graph_binary
        cmd = [driver_graph_binary(), str(a.steps), "--bench"]
    else:
        cmd = [sys.executable, str(HERE / "overhead.py"), a.workload, "--steps", str(a.steps)]
    env = dict(os.environ, GPU_AGENT_AUDIT_FILE=str(audit), GPU_AGENT_WINDOW_MS=str(a.window_ms))
    subprocess.run([sys.executable, "-m", "gpu_agent", "record", "--duty-cycle", str(a.duty_cycle),
                    "-o", str(prof), "--", *cmd], env=env, check=True)
    with open(audit) as f:
        print(f.readline().strip())  # the shim's audit header: windows, untracked ids
    est, full = profile_kernels(prof), audit_rows(audit)
    total = sum(v[1] for v in full.values())
    # Windowed records weigh all launches / windowed launches (about N, window.cpp).
    win_launches = sum(v[2] for v in full.values())
    weight = sum(v[1] for v in est.values()) / win_launches if win_launches else 0.0
    print(f"{a.workload}: {len(full)} kernels, {sum(v[0] for v in full.values())} launches, "
          f"{total / 1e6:.1f} ms GPU in the full trace; {win_launches} launches in windows; "
          f"mean record weight {weight:.3f} (N = {a.duty_cycle})")
    print(f"{'share':>7} {'full ms':>10} {'est ms':>10} {'err %':>7} {'launches':>10} {'est':>10}  kernel")
    covered, worst, rest_full, rest_est = 0, 0.0, 0, 0
    for name, (launches, ns, _, _) in sorted(full.items(), key=lambda kv: -kv[1][1]):
        e_ns, e_n = est.get(name, [0, 0])
        if covered < 0.99 * total:
            err = 100 * (e_ns / ns - 1) if ns else 0.0
            worst = max(worst, abs(err))
            print(f"{100 * ns / total:6.2f}% {ns / 1e6:10.2f} {e_ns / 1e6:10.2f} {err:+7.2f} "
                  f"{launches:10d} {e_n:10d}  {name[:90]}")
        else:
            rest_full += ns
            rest_est += e_ns
        covered += ns
    est_total = sum(v[0] for v in est.values())
    print(f"rest (<1 % of time together): full {rest_full / 1e6:.2f} ms, est {rest_est / 1e6:.2f} ms")
    summary = {"workload": a.workload, "duty_cycle": a.duty_cycle, "window_ms": a.window_ms,
               "kernels": len(full), "total_err_pct": round(100 * (est_total / total - 1), 3),
               "max_top99_kernel_err_pct": round(worst, 3), "mean_weight": round(weight, 4)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
