"""Per-interval accuracy of `gpu-agent run` under duty-cycled collection.

A long aggregation of windowed samples is accurate (window_fidelity.py), but a
backend sees one profile per --interval, and each interval holds only the
windows that fell in it: interval / (N x W) of them, give or take one. This runs
a steady GPU-bound workload (the driver-API cuGraphLaunch replay, a constant
stream of tiny kernels) under one `gpu-agent run --interval I` for each
collection setting, and reports how much the per-interval estimates of GPU time
per second scatter around their median. The continuous setting (N = 1) is exact,
so its scatter is the workload's own; the duty-cycled settings add the sampling
error on top.

Usage (root, on the GPU node):
  python3 bench/gpu/interval_accuracy.py OUT_DIR [--interval 5] [--seconds 40]
      [--setting N:W_MS ...]   (default 1:20 10:20 10:100)  [--cmd "WORKLOAD ARGS"]
--cmd replaces the driver-graph workload (it must run about --seconds on its own;
e.g. the mock's `mock_workload --duration 20` with LD_LIBRARY_PATH=build/mock).
Prints one line per setting and a JSON summary line for each.
"""

import argparse
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "agent"))
from gpu_agent.proto import profile_pb2  # noqa: E402  (the real profile.proto)
from run_overhead import SHIM, Agent, driver_graph_binary  # noqa: E402


def interval_rate(path: Path) -> tuple[float, float]:
    """(estimated kernel GPU ns per second of the interval, interval seconds)."""
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(path.read_bytes()))
    s = p.string_table
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: loc for loc in p.location}
    ns = 0
    for smp in p.sample:
        f = funcs[locs[smp.location_id[0]].line[0].function_id]
        if s[f.filename] == "CUDA_KERNEL":
            ns += smp.value[0]
    secs = p.duration_nanos / 1e9
    return ns / secs, secs


def one_setting(out: Path, n: int, w_ms: int, interval: float, seconds: float, cmd: str) -> dict:
    d = out / f"n{n}-w{w_ms}"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.pb.gz"):
        old.unlink()
    agent = Agent(str(d), f"{interval}s")  # returns once every probe is attached
    env = dict(os.environ, CUDA_INJECTION64_PATH=str(SHIM), GPU_AGENT_DUTY_CYCLE=str(n),
               GPU_AGENT_WINDOW_MS=str(w_ms))
    # STEPS replays per block, blocks until `seconds` have passed (driver_graph.cu --bench).
    argv = shlex.split(cmd) if cmd else [driver_graph_binary(), "20000", "--bench", str(seconds)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    agent.stop()  # SIGTERM: the agent writes its last interval and exits
    files = sorted(d.glob("*.pb.gz"))
    rates = [interval_rate(f) for f in files]
    # The first and last intervals hold the workload's start and end: partial.
    full = [r for r, secs in rates[1:-1] if secs > 0.9 * interval]
    if len(full) < 3:
        raise SystemExit(f"n={n} w={w_ms}: only {len(full)} full intervals in {len(files)} profiles")
    med = statistics.median(full)
    devs = [100 * (r / med - 1) for r in full]
    res = {"duty_cycle": n, "window_ms": w_ms, "interval_s": interval, "intervals": len(full),
           "max_abs_dev_pct": round(max(abs(x) for x in devs), 2),
           "stdev_pct": round(statistics.pstdev(devs), 2),
           "devs_pct": [round(x, 1) for x in devs]}
    print(f"N={n:<3} W={w_ms:>4} ms, {interval:g} s intervals ({len(full)} full): per-interval "
          f"GPU time/s vs median: max |dev| {res['max_abs_dev_pct']:.1f} %, stdev "
          f"{res['stdev_pct']:.1f} %  {res['devs_pct']}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--setting", action="append", default=[], metavar="N:W_MS")
    ap.add_argument("--cmd", default="")
    a = ap.parse_args()
    for spec in a.setting or ["1:20", "10:20", "10:100"]:
        n, w = (int(x) for x in spec.split(":"))
        print(json.dumps(one_setting(a.out, n, w, a.interval, a.seconds, a.cmd)), flush=True)


if __name__ == "__main__":
    main()
