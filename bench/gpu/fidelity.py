"""Are the agent's estimates right? GPU time AND launches, per kernel and per stack
(python -m bench.gpu fidelity).

Why both: a bug in one estimate hid behind a perfect score in the other (issue
15: launch counts within 0.3 % while graph kernels read 30-130x their GPU time).

Three truths, three methods:
  default   runs of the same deterministic case: `gpu-agent record --duty-cycle 1`
            (continuous, exact) before and after the windowed runs. Launches: exact.
            GPU ns: each kernel's ns per launch over the two continuous runs times
            the exact launches; how far those two runs differ is the noise floor.
            --run adds the profiles of one `gpu-agent run` at its defaults.
  --audit   the full CUPTI trace of the SAME run (the shim's audit mode: activity
            stays on, only windowed launches are forwarded). The only truth for
            mlp-x4, whose kernels' speed varies from run to run. It cannot check
            the graph GPU-time fault of issue 15, which needs activity switched.
  --shares  the `sites` case: one kernel from two call sites, 75 % / 25 %.
            The per-stack share error in points.
  --intervals  per-interval spread of `gpu-agent run` at its defaults: the
            driver-graph case replays at a steady rate for --seconds, so every full
            interval's GPU time per second should read the same; each one's
            deviation from their median.
Every case prints its rows and appends one JSON line per comparison to --jsonl.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.gpu import periods as period_lines
from bench.gpu.harness import (
    BENCH_SHIM,
    Agent,
    case_command,
    clean_env,
    driver_graph_binary,
    load_profile,
    merge_kernels,
    needs_bench_shim,
    profile_kernels,
    profile_stacks,
    shim_env,
)
from gpu_agent.probes.audit import audit_rows  # after harness, which makes agent/ importable

# Steps per fidelity run: about 8 s on an H200, enough windows (one per 200 ms)
# for the sampling error to sit well under the targets.
FIDELITY_STEPS = {
    "graph": 40000,
    "driver-graph": 400000,
    "mlp": 8000,
    "eager": 8000,
    "compiled": 8000,
    "mlp-x4": 4000,
    "sites": 60000,
    "llama": 130,
}


def command(workload: str, steps: int, audit_dir: Path | None = None) -> list[str]:
    """One run of the case, no wait; mlp-x4 as four processes (each its own audit file)."""
    one = case_command("mlp" if workload == "mlp-x4" else workload, steps=steps, repeats=1, wait=0)
    if workload != "mlp-x4":
        return one
    parts = [(f"GPU_AGENT_AUDIT_FILE={audit_dir}/audit.{i} " if audit_dir else "") + shlex.join(one) for i in range(4)]
    return ["sh", "-c", " & ".join(parts) + " & wait"]


def record(
    a, workload: str, duty: int | None, out: Path, debug: dict | None = None, **env: str
) -> dict[str, list[int]]:
    """One `gpu-agent record`: at one window in `duty`, or with None at the run's
    windowing (--duty, else the cost budget --budget, as `gpu-agent run` does).
    With --debug, `debug` gets the shim's period lines and the loop's span."""
    if duty is None:
        duty = a.duty or None
    windows = ["--duty-cycle", str(duty)] if duty else ["--budget", str(a.budget)]
    if a.debug:
        env["GPU_AGENT_DEBUG"] = "2" if debug is not None else "1"
    audit_dir = Path(env["GPU_AGENT_AUDIT_FILE"]).parent if "GPU_AGENT_AUDIT_FILE" in env else None
    shim = ["--shim", str(BENCH_SHIM)] if needs_bench_shim(env) else []
    t0 = time.monotonic()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpu_agent",
            "record",
            *windows,
            *shim,
            "-o",
            str(out),
            "--",
            *command(workload, steps_of(a, workload), audit_dir),
        ],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0:
        raise SystemExit(f"{workload} {' '.join(windows)}: {p.stderr[-2000:]}")
    status = [ln for ln in p.stderr.splitlines() if ln.startswith("gpu-agent: processes")]
    print(f"    {' '.join(windows)}: {status[-1] if status else '?'} ({time.monotonic() - t0:.1f} s)", flush=True)
    if a.debug:
        for ln in p.stderr.splitlines():
            if any(f"{w} (pid" in ln for w in ("exit", "budget", "teardowns", "windows")):
                print(f"      {ln[max(0, ln.find('gpu-agent-shim')) :][:700]}", flush=True)
        if debug is not None:
            case = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
            debug.update(
                periods=period_lines.parse(p.stderr),
                joined=period_lines.joined(p.stderr),
                span=case[-1].get("monotonic_s") if case else None,
            )
    return profile_kernels(out)


def steps_of(a, workload: str) -> int:
    if a.steps:
        return a.steps
    if a.run_seconds:  # cases.STEPS is a 2.4 s block
        from bench.gpu.cases import STEPS

        return int(STEPS[workload] * a.run_seconds / 2.4)
    return FIDELITY_STEPS[workload]


def run_profiles(a, workload: str, outdir: Path, audit_dir: Path | None = None) -> list[Path]:
    """Every profile of one `gpu-agent run` (defaults, 2 s intervals) over the case."""
    outdir.mkdir(parents=True, exist_ok=True)
    env = shim_env(GPU_AGENT_AUDIT_FILE=str(audit_dir / "audit.0")) if audit_dir else shim_env()
    agent = Agent(str(outdir), "--interval", "2s", bench_shim=audit_dir is not None)
    try:
        subprocess.run(
            command(workload, steps_of(a, workload), audit_dir), env=env, check=True, capture_output=True, timeout=600
        )
        time.sleep(5)  # the last interval is written
    finally:
        log = agent.stop()
    for line in log.splitlines():
        if "processes=0 " not in line:
            print(f"    run: {line[:300]}")
    return sorted(outdir.glob("*.pb.gz"))


def run_mode(a, workload: str, outdir: Path) -> dict[str, list[int]]:
    return merge_kernels(run_profiles(a, workload, outdir))


def compare(name: str, launches: dict, true_ns: dict, est: dict, noise: float = 0.0) -> dict:
    """Estimate against truth for every kernel above 1 % of the GPU time, and the total."""
    total = sum(true_ns.values())
    rows, worst_ns, worst_n = [], 0.0, 0.0
    for k in sorted(true_ns, key=lambda k: -true_ns[k]):
        if true_ns[k] < 0.01 * total:
            continue
        e_ns, e_n = est.get(k, [0, 0])
        d_ns, d_n = 100 * (e_ns / true_ns[k] - 1), 100 * (e_n / max(1, launches[k]) - 1)
        worst_ns, worst_n = max(worst_ns, abs(d_ns)), max(worst_n, abs(d_n))
        rows.append(
            {
                "kernel": k,
                "launches": launches[k],
                "gpu_ns": true_ns[k],
                "est_launches": e_n,
                "est_gpu_ns": e_ns,
                "launch_err_pct": d_n,
                "ns_err_pct": d_ns,
            }
        )
        print(
            f"      {k[:48]:48s} launches {e_n:9d} / {launches[k]:9d} ({d_n:+6.2f} %)  "
            f"gpu ms {e_ns / 1e6:9.2f} / {true_ns[k] / 1e6:9.2f} ({d_ns:+6.2f} %)"
        )
    e_total = sum(v[0] for v in est.values())
    for k in sorted(set(est) - set(true_ns), key=lambda k: -est[k][0]):
        if est[k][0] > 0.01 * max(1, e_total):  # GPU time the truth has under no such kernel
            print(f"      not in the truth: {k[:100]} launches {est[k][1]} gpu ms {est[k][0] / 1e6:.2f}")
    d_total = 100 * (e_total / total - 1) if total else 0.0
    print(
        f"    {name}: total GPU ms {e_total / 1e6:.2f} / {total / 1e6:.2f} ({d_total:+.2f} %); worst "
        f"kernel ns {worst_ns:.2f} %, launches {worst_n:.2f} %; truth noise {100 * noise:.2f} %",
        flush=True,
    )
    return {
        "case": name,
        "total_gpu_ns_err_pct": d_total,
        "worst_kernel_ns_err_pct": worst_ns,
        "worst_kernel_launch_err_pct": worst_n,
        "truth_noise_pct": 100 * noise,
        "rows": rows,
    }


# An unsymbolized frame ("0x3aa2ff [libcuda.so.580.159.04]"): left out of a stack's key.
# On an H100 a torch graph captured while CUPTI's callbacks were on had another
# return address inside libcuda than one captured without them (the same code):
# the stacks differ in that frame only (a 73-point "gap" between otherwise equal ones).
_RAW_FRAME = re.compile(r"^0x[0-9a-f]+ \[")


def stack_shares(path: Path) -> dict[tuple, float]:
    """GPU time per whole stack (kernel and symbolized frames), as a share of the
    profile's, in points."""
    return shares_of(profile_stacks(path))


def stack_ns(samples) -> dict[tuple, float]:
    """GPU ns per whole stack (kernel and symbolized frames) of profile_stacks' pairs."""
    got: dict[tuple, float] = {}
    for frames, values in samples:
        key = tuple(f for f in frames if not _RAW_FRAME.match(f))
        got[key] = got.get(key, 0) + values[0]
    return got


def shares_of(samples=None, ns: dict | None = None) -> dict[tuple, float]:
    """stack_shares of profile_stacks' (frames, values) pairs (or of stack_ns' dict)."""
    got = stack_ns(samples) if ns is None else ns
    total = sum(got.values()) or 1
    return {k: 100 * v / total for k, v in got.items()}


def share_check(name: str, truth: Path, est: Path) -> dict:
    """Per-stack shares against the continuous run's: the largest gap in points, and the
    share of GPU time under a torch graph's capture stack (capture_graph) in each."""
    a, b = stack_shares(truth), stack_shares(est)
    worst = max((abs(a.get(k, 0) - b.get(k, 0)) for k in set(a) | set(b)), default=0.0)
    cap_a = sum(v for k, v in a.items() if "capture_graph" in k)
    cap_b = sum(v for k, v in b.items() if "capture_graph" in k)
    print(
        f"    {name}: per-stack shares, worst gap {worst:.2f} points over {len(a)} stacks; "
        f"under capture_graph {cap_b:.2f} % (continuous {cap_a:.2f} %)",
        flush=True,
    )
    for k in sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, 0) - b.get(k, 0)))[:4]:
        print(
            f"      {b.get(k, 0):6.2f} % (continuous {a.get(k, 0):6.2f} %): {' <- '.join(str(f)[:40] for f in k[:16])}",
            flush=True,
        )
    return {
        "case": f"stacks, {name}",
        "share_err_points": worst,
        "stacks": len(a),
        "capture_stack_pct": cap_b,
        "capture_stack_pct_continuous": cap_a,
    }


def against_continuous(a, w: str, t: Path) -> list[dict]:
    ca = record(a, w, 1, t / f"{w}-c1.pb.gz")
    how = f"duty {a.duty}" if a.duty else f"budget {a.budget} %"
    debug = [{} for _ in range(a.record_runs)]
    settings = dict(kv.split("=", 1) for kv in filter(None, a.shim_env.split(",")))
    if settings:
        how += f", {a.shim_env}"
    windowed = [
        (f"record {how} #{i + 1}", record(a, w, None, t / f"{w}-w{i}.pb.gz", debug[i], **settings))
        for i in range(a.record_runs)
    ]
    if a.run:
        windowed.append(("run defaults", run_mode(a, w, t / f"{w}-run")))
    cb = record(a, w, 1, t / f"{w}-c2.pb.gz") if a.continuous_runs > 1 else ca
    if {k: v[1] for k, v in ca.items()} != {k: v[1] for k, v in cb.items()}:
        print("    note: the continuous runs' launch counts differ", flush=True)
    launches = {k: ca[k][1] for k in ca}
    per_ns = {k: (ca[k][0] + cb.get(k, ca[k])[0]) / max(1, ca[k][1] + cb.get(k, ca[k])[1]) for k in ca}
    true_ns = {k: per_ns[k] * launches[k] for k in ca}
    total = sum(true_ns.values())
    noise = max(
        (
            abs(ca[k][0] / max(1, ca[k][1]) / max(1e-9, cb[k][0] / max(1, cb[k][1])) - 1)
            for k in ca
            if k in cb and true_ns[k] > 0.01 * total
        ),
        default=0,
    )
    out = [compare(name, launches, true_ns, est, noise) for name, est in windowed]
    for i, d in enumerate(debug):  # where the launch estimate's error lies (--debug)
        if d.get("span"):
            res = period_lines.against_uniform(d["periods"], d["span"], sum(launches.values()), d["joined"])
            period_lines.report(f"record {how} #{i + 1}, periods", res, sum(launches.values()))
            out.append({"case": f"periods, record {how} #{i + 1}", **res})
    out += [
        share_check(f"record {how} #{i + 1}", t / f"{w}-c1.pb.gz", t / f"{w}-w{i}.pb.gz") for i in range(a.record_runs)
    ]
    return out


def against_audit(a, w: str, t: Path) -> list[dict]:
    d = t / f"{w}-audit"
    d.mkdir()
    est = record(a, w, 10, t / f"{w}-audit.pb.gz", GPU_AGENT_AUDIT_FILE=str(d / "audit.0"))
    full = audit_rows(sorted(d.iterdir()))
    out = [
        compare("audit, record duty 10", {k: v[0] for k, v in full.items()}, {k: v[1] for k, v in full.items()}, est)
    ]
    if a.run:  # the same under `gpu-agent run` at its defaults
        d = t / f"{w}-audit-run"
        d.mkdir()
        est = merge_kernels(run_profiles(a, w, t / f"{w}-audit-run-prof", audit_dir=d))
        full = audit_rows(sorted(d.iterdir()))
        out.append(
            compare("audit, run defaults", {k: v[0] for k, v in full.items()}, {k: v[1] for k, v in full.items()}, est)
        )
    return out


def shares(a, t: Path) -> list[dict]:
    """The add kernel's GPU time under site_a and site_b: truth 75 % / 25 %."""
    out = []
    runs = [(f"record #{i + 1}", None) for i in range(a.record_runs)] + ([("run", None)] if a.run else [])
    for i, (name, _) in enumerate(runs):
        if name == "run":
            profs = run_profiles(a, "sites", t / "sites-run")
        else:
            profs = [t / f"sites-{i}.pb.gz"]
            record(a, "sites", None, profs[0])
        got = {"site_a": 0, "site_b": 0, "other": 0}
        for frames, values in (smp for prof in profs for smp in profile_stacks(prof)):
            if not any("add" in f.lower() for f in frames[:1]):
                continue
            key = next((k for k in ("site_a", "site_b") if k in frames), "other")
            got[key] += values[0]
        total = sum(got.values()) or 1
        err = max(abs(100 * got["site_a"] / total - 75), abs(100 * got["site_b"] / total - 25))
        print(
            f"    shares ({name}): site_a {100 * got['site_a'] / total:.2f} %, site_b "
            f"{100 * got['site_b'] / total:.2f} %, elsewhere {100 * got['other'] / total:.2f} %; "
            f"error {err:.2f} points",
            flush=True,
        )
        out.append(
            {
                "case": f"shares, {name}",
                "share_err_points": err,
                "shares_pct": {k: 100 * v / total for k, v in got.items()},
            }
        )
    return out


def intervals(a, t: Path, interval: float = 5.0) -> list[dict]:
    d = t / "intervals"
    d.mkdir()
    agent = Agent(str(d), "--interval", f"{interval}s")
    try:
        subprocess.run(
            [driver_graph_binary(), "20000", "--bench", str(a.seconds)],
            env=shim_env(),
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=a.seconds + 300,
        )
    finally:
        agent.stop()  # SIGTERM: the agent writes its last interval and exits
    rates = []
    for f in sorted(d.glob("*.pb.gz")):
        p = load_profile(f)
        secs = p.duration_nanos / 1e9
        rates.append((sum(v[0] for v in profile_kernels(f).values()) / secs, secs))
    # The first and last intervals hold the case's start and end: partial.
    full = [r for r, secs in rates[1:-1] if secs > 0.9 * interval]
    if len(full) < 3:
        raise SystemExit(f"only {len(full)} full intervals in {len(rates)} profiles")
    med = statistics.median(full)
    devs = [100 * (r / med - 1) for r in full]
    res = {
        "case": f"intervals of {interval:g} s",
        "intervals": len(full),
        "max_abs_dev_pct": max(abs(x) for x in devs),
        "stdev_pct": statistics.pstdev(devs),
        "devs_pct": [round(x, 2) for x in devs],
    }
    print(
        f"    {len(full)} full {interval:g} s intervals: GPU time per second against their median: "
        f"max |dev| {res['max_abs_dev_pct']:.2f} %, stdev {res['stdev_pct']:.2f} %",
        flush=True,
    )
    return [res]


def flood(a, t: Path) -> list[dict]:
    """Lost records said, not hidden: the launch loop under `record` (continuous)
    with the shim's buffer pool cut to POOL MiB, so that CUPTI runs out of buffers.
    The profile's kernel launches plus its [dropped: cupti] launches must equal the
    launches the loop made."""
    from gpu_agent.profile.vocabulary import DROPPED_CUPTI

    n, repeats = 200000, 5
    made = (n // 8 + 1) + repeats * n  # launch_loop: a warm-up block of n/8+1, then the blocks
    rows = []
    for pool in (1, 64):
        out = t / f"flood-{pool}.pb.gz"
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpu_agent",
                "record",
                "-o",
                str(out),
                "--",
                *case_command("launch", steps=n, repeats=repeats, wait=0),
            ],
            env=clean_env(GPU_AGENT_BUFFER_POOL_MB=str(pool), GPU_AGENT_DEBUG="1"),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if p.returncode != 0:
            raise SystemExit(f"flood pool {pool}: {p.stderr[-2000:]}")
        kernels = sum(v[1] for v in profile_kernels(out).values())
        dropped = sum(v[1] for frames, v in profile_stacks(out) if frames[:1] == [DROPPED_CUPTI])
        exit_line = next((ln[ln.index("exit (pid") :][:160] for ln in p.stderr.splitlines() if "exit (pid" in ln), "")
        row = {
            "check": "flood",
            "pool_mib": pool,
            "launches_made": made,
            "recorded": kernels,
            "dropped": dropped,
            "missing": made - kernels - dropped,
        }
        print(
            f"    pool {pool:2d} MiB: made {made}, recorded {kernels}, [dropped: cupti] {dropped}, "
            f"missing {made - kernels - dropped}; {exit_line}",
            flush=True,
        )
        rows.append(row)
    return rows


def run(a) -> None:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        if a.flood:
            print("== launch loop with CUPTI short of buffers (flood)", flush=True)
            results += [dict(r, workload="launch") for r in flood(a, t)]
        if a.shares:
            print("== sites (per-stack shares)", flush=True)
            results += [dict(r, workload="sites") for r in shares(a, t)]
        if a.intervals:
            print(f"== driver-graph under `gpu-agent run` for {a.seconds:g} s (intervals)", flush=True)
            results += [dict(r, workload="driver-graph") for r in intervals(a, t)]
        for w in filter(None, a.workloads.split(",")):
            print(f"== {w} ({steps_of(a, w)} steps{', audit' if a.audit else ''})", flush=True)
            rows = against_audit(a, w, t) if a.audit else against_continuous(a, w, t)
            results += [dict(r, workload=w) for r in rows]
        if a.keep:  # the profiles, for a look afterwards
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            for f in t.glob("*.pb.gz"):
                shutil.copy(f, Path(a.keep) / f.name)
    with open(a.jsonl, "a") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
