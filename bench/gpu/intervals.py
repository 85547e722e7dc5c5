"""Per-interval fidelity: every profile of `gpu-agent run` against the job's step log.

python -m bench.gpu intervals (issue 42): is each interval right, not only their sum?

Method:
  1. Exact per-step figures: one `gpu-agent record --duty-cycle 1` (continuous) of the
     case's logged loop (below) for --exact-seconds: per kernel, GPU ns and launches
     over its steps; its per-stack shares. Before the agent starts (one agent a process).
  2. One `gpu-agent run --interval 10s` at its defaults, watching ("watching" line),
     for all jobs in turn (each its own pid); the case with the shim injected for
     --seconds, appending `CLOCK_REALTIME_ns steps_done` about every 0.25 s
     (bench/gpu/cases.py --step-log). A job's profiles are read once the next job's
     processes have run, or the agent stopped: an empty interval is never written.
  3. Every profile's samples of the case's pid (label "pid") against truth: the steps
     done within [time_nanos, time_nanos + duration_nanos], linear between log lines,
     times the per-step figures. Error = profile / truth - 1. Judged: full intervals
     that start at the process's --skip'th (10th) second or later and end before its
     log does (not the last, partial one).
  4. Per job: the judged intervals' median / 90th percentile / worst |error| of
     launches and GPU ns; each top-5 kernel's median error; the top stacks' share
     error in points against the exact run's; the sum of the judged intervals.
--floor runs each job again with GPU_AGENT_DUTY_CYCLE=1 in the case's environment
(always collecting): what is left is the method's own error, reported beside.
--periods: the case runs with GPU_AGENT_DEBUG=2 and logs its steps every 0.05 s; each of
the shim's period lines is set against the steps in it, and the judged intervals are
made again from those lines with pooled rates (bench/gpu/periods.py alternatives).
--metrics: the agent also serves /metrics (it then drains every second), scraped
every 5 s (raw text kept beside --jsonl); its launch counter's increase over each
full minute against the truth in that minute.

Jobs: eager, mlp, llama, graph, compiled: the cases, steady.
  phased30, phased3: one process alternating eager and mlp every 30 s / 3 s, per kernel.
  bursty: mlp busy 20 s, idle 30 s, repeating: busy intervals' errors, and the most
          GPU time a fully idle interval shows.
  short: eight eager processes of about 8 s (3 s idle after warm-up, 3 s busy), each
         judged whole: its profiles' launches against its steps x launches per step.
  stopstart: an eager process; the agent stopped (SIGTERM) after 20 s and restarted:
         launches made while an agent watched ("watching" line to exit) against the
         profiles' sum (the gap excluded). Runs last: it stops the shared agent.
Prints each job's figures, a table at the end, and appends one JSON line per job.
"""

from __future__ import annotations

import bisect
import importlib.util
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

from bench.gpu.fidelity import shares_of, stack_ns
from bench.gpu.harness import (
    Agent,
    case_command,
    clean_env,
    load_profile,
    profile_kernels,
    profile_stacks,
    python_share,
    shim_env,
    stacks_without_python,
)
from bench.gpu import periods as period_lines
from bench.gpu.periods import overlap
from gpu_agent.profile.store import PROFILE_GLOB

S = 1_000_000_000  # ns
COLUMNS = {"phased": ("eager", "mlp")}  # a case whose log counts the steps of several
FLOOR = {"GPU_AGENT_DUTY_CYCLE": "1"}  # the shim collects all the time


class StepLog:
    """A case's --step-log: steps done (one count per column) at CLOCK_REALTIME ns,
    linear between lines; none at the process's start (and, in logs of cases.py since
    2026-11-28, none at its first line, just before the build's step: before that line
    was written, that step's launches were spread from the process's start)."""

    def __init__(self, path: Path, start_ns: int):
        rows = [list(map(int, ln.split())) for ln in path.read_text().splitlines()]
        rows = [r for r in rows if len(r) == len(rows[0])]  # not a line cut short
        self.t = [start_ns] + [r[0] for r in rows]
        self.n = [[0] * (len(rows[0]) - 1)] + [r[1:] for r in rows]
        # the loop from the line after --wait: the second of those with only the build's step
        built = [t for t, n in zip(self.t, self.n) if n and all(x == 1 for x in n)]
        self.loop, self.end = built[1] if len(built) > 1 else self.t[min(2, len(self.t) - 1)], self.t[-1]

    def at(self, t: float) -> list[float]:
        i = bisect.bisect_right(self.t, t)
        if i in (0, len(self.t)):
            return [float(x) for x in self.n[max(0, i - 1)]]
        f = (t - self.t[i - 1]) / max(1, self.t[i] - self.t[i - 1])
        return [a + f * (b - a) for a, b in zip(self.n[i - 1], self.n[i])]

    def between(self, lo: float, hi: float) -> list[float]:
        return [b - a for a, b in zip(self.at(lo), self.at(hi))]


class Interval(NamedTuple):
    t0: int
    t1: int
    kernels: dict  # name -> [gpu_ns, launches], the pid's
    stacks: list  # profile_stacks, the pid's
    python: float  # the share of the pid's GPU time under a Python frame
    path: Path


def truth(steps: list[float], per_step: list[dict]) -> dict[str, list[float]]:
    """Per kernel [gpu_ns, launches] of `steps` (one count per column) at per_step's rates."""
    out: dict[str, list[float]] = {}
    for n, rates in zip(steps, per_step):
        for k, (ns, c) in rates.items():
            acc = out.setdefault(k, [0.0, 0.0])
            acc[0] += n * ns
            acc[1] += n * c
    return out


def total(kernels: dict) -> list[float]:
    return [sum(v[0] for v in kernels.values()), sum(v[1] for v in kernels.values())]


def err(est: float, true: float) -> float:
    return 100 * (est / true - 1) if true else math.nan


def med(xs) -> float:
    """The median of those that are numbers (an error against no truth is NaN)."""
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def spread(errs: list[float]) -> dict:
    """Median, 90th percentile (nearest rank) and worst of |error| (%), and the signed median."""
    a = sorted(abs(x) for x in errs if not math.isnan(x))
    if not a:
        return {}
    return {"median": med(a), "p90": a[math.ceil(0.9 * len(a)) - 1], "worst": a[-1], "bias": med(errs)}


def logged(case: str, log: Path, seconds: float, wait: float = 0.0, opts: tuple = ()) -> list[str]:
    """The case's command with --step-log, for `seconds` after `wait`."""
    extra = ["--step-log", str(log), "--seconds", f"{seconds:g}", *opts]
    return case_command(case, steps=1, repeats=1, wait=wait) + extra


def last_json(stdout: str) -> dict:
    """A case's result: its last JSON line."""
    return json.loads([ln for ln in stdout.splitlines() if ln.startswith("{")][-1])


def fmt(s: dict | None) -> str:
    return f"{s['median']:.2f} / {s['p90']:.2f} / {s['worst']:.2f} % (bias {s['bias']:+.2f})" if s else "-"


def cols(n: int, out: dict, tail: str) -> str:
    """A row of the table: n, launches' and GPU ns' |error| median, p90, worst; tail."""
    three = [
        " ".join(f"{out[w][k]:6.2f}" for k in ("median", "p90", "worst")) if out.get(w) else f"{'-':>20s}"
        for w in ("launches", "gpu_ns")
    ]
    return f"{n:3d}  {three[0]}    {three[1]}   {tail}"


def intervals_in(d: Path, pid: int, lo: int, hi: int) -> list[Interval]:
    """d's profiles that overlap [lo, hi] (ns), with pid's samples only."""
    out = []
    for f in sorted(d.glob(PROFILE_GLOB)):
        p = load_profile(f)
        t0, t1 = p.time_nanos, p.time_nanos + p.duration_nanos
        if t1 > lo and t0 < hi:
            out.append(Interval(t0, t1, profile_kernels(f, pid), profile_stacks(f, pid), python_share(f, pid), f))
    return out


def prorated(ivs: list[Interval], lo: float, hi: float) -> list[float]:
    """[gpu_ns, launches] of the profiles within [lo, hi], edge intervals prorated."""
    est = [0.0, 0.0]
    for iv in ivs:
        f = overlap(lo, hi, iv.t0, iv.t1) / max(1, iv.t1 - iv.t0)
        est = [e + f * v for e, v in zip(est, total(iv.kernels))]
    return est


def judge(rows: list[tuple[Interval, dict]], start: int) -> dict:
    """(interval, truth) pairs: the spread of their errors, the top 5 kernels' median error."""
    out: dict = {"intervals": len(rows)}
    if not rows:
        return out
    out["launches"] = spread([err(total(iv.kernels)[1], total(tr)[1]) for iv, tr in rows])
    out["gpu_ns"] = spread([err(total(iv.kernels)[0], total(tr)[0]) for iv, tr in rows])
    ns: dict[str, float] = {}
    for _, tr in rows:
        for k, v in tr.items():
            ns[k] = ns.get(k, 0.0) + v[0]
    out["kernels"] = [
        {
            "kernel": k,
            "share_pct": 100 * ns[k] / (sum(ns.values()) or 1),
            "gpu_ns_median_err_pct": med(err(iv.kernels.get(k, [0, 0])[0], tr[k][0]) for iv, tr in rows),
            "launches_median_err_pct": med(err(iv.kernels.get(k, [0, 0])[1], tr[k][1]) for iv, tr in rows),
        }
        for k in sorted(ns, key=lambda k: -ns[k])[:5]
    ]
    # each: from (s after the process's start), s long, gpu_ns, launches, true gpu_ns, true launches
    out["rows"] = [[(iv.t0 - start) / S, (iv.t1 - iv.t0) / S, *total(iv.kernels), *total(tr)] for iv, tr in rows]
    print(f"    {len(rows)} intervals judged; |error| median / p90 / worst:")
    print(f"      launches {fmt(out['launches'])}; GPU ns {fmt(out['gpu_ns'])}")
    for r in out["kernels"]:
        print(
            f"      {r['kernel'][:64]:64s} {r['share_pct']:5.1f} % of GPU time: median error GPU ns "
            f"{r['gpu_ns_median_err_pct']:+6.2f} %, launches {r['launches_median_err_pct']:+6.2f} %"
        )
    return out


def no_python(ivs: list[Interval], pid: int) -> dict:
    """The share of the process's GPU time on stacks with no Python frame: over all its
    profiles, in its first, and over the rest (a Python job's launches all come from
    Python code, so what is here is a stack the agent could not walk)."""
    ns = [total(iv.kernels)[0] for iv in ivs]
    off = [(1 - iv.python) * n for iv, n in zip(ivs, ns)]
    out = {
        "all": 100 * sum(off) / (sum(ns) or 1),
        "first": 100 * off[0] / (ns[0] or 1) if ivs else 0.0,
        "rest": 100 * sum(off[1:]) / (sum(ns[1:]) or 1),
    }
    print(
        f"    GPU time on stacks with no Python frame: {out['all']:.3f} % of the process's;"
        f" its first profile {out['first']:.3f} %, the rest {out['rest']:.3f} %"
    )
    heavy = sorted(
        ((fs, n, i) for i, iv in enumerate(ivs) if iv.python < 1 for fs, n in stacks_without_python(iv.path, pid)),
        key=lambda x: -x[1],
    )[:3]
    for fs, n, i in heavy:
        print(f"      profile {i}, {n / 1e6:.2f} GPU ms: {' <- '.join(fs[:24])}")
    return out
    return out


def stack_errors(exact: dict, stacks: list[list]) -> dict:
    """The exact run's top 5 stacks: each one's median share over the intervals, and
    the worst gap of the intervals' summed shares over every stack, in points."""
    per = [shares_of(st) for st in stacks]
    summed = shares_of([smp for st in stacks for smp in st])
    top = [
        {
            "stack": " <- ".join(str(f)[:40] for f in k[:8]),
            "exact_pct": exact[k],
            "median_abs_err_points": med(abs(s.get(k, 0) - exact[k]) for s in per),
        }
        for k in sorted(exact, key=lambda k: -exact[k])[:5]
    ]
    worst = max((abs(summed.get(k, 0) - exact.get(k, 0)) for k in set(exact) | set(summed)), default=0.0)
    if worst > 10:  # what differs: the top stacks of each side, whole
        for side, sh in (("exact", exact), ("intervals", summed)):
            for k in sorted(sh, key=lambda k: -sh[k])[:3]:
                print(f"      {side} {sh[k]:5.1f} %: {' <- '.join(str(f)[:60] for f in k[:14])}")
    for r in top:
        print(
            f"      stack {r['exact_pct']:5.1f} %, median |error| {r['median_abs_err_points']:.2f}: {r['stack'][:80]}"
        )
    print(f"    stacks, the intervals summed: worst gap {worst:.2f} points over {len(exact)} stacks")
    return {"top": top, "summed_worst_points": worst}


METRIC = re.compile(r"^gpu_agent_kernel_launches_total\{(.*)\} (\S+)$", re.M)


class Scraper(threading.Thread):
    """GET url every 5 s: (CLOCK_REALTIME ns, text) in .got and, raw, as JSON lines in path."""

    def __init__(self, url: str, path: Path):
        super().__init__(daemon=True)
        self.url, self.path, self.got, self.done = url, path, [], threading.Event()
        self.start()

    def run(self) -> None:
        with open(self.path, "a") as f:
            while not self.done.wait(5.0):
                t = time.time_ns()
                try:
                    text = urllib.request.urlopen(self.url, timeout=3).read().decode()
                except OSError:
                    continue
                self.got.append((t, text))
                f.write(json.dumps({"t_ns": t, "url": self.url, "text": text}) + "\n")

    def minutes(self, pid: int, log: StepLog, per_step: list[dict], lo: int, start: int) -> list[dict]:
        """The launch counter's increase over each full minute from lo on, against the truth."""
        pts = [
            (t, sum(float(v) for lb, v in METRIC.findall(text) if f'pid="{pid}"' in lb))
            for t, text in self.got
            if lo <= t <= log.end
        ]
        out, i = [], 0
        while j := next((j for j in range(i + 1, len(pts)) if pts[j][0] - pts[i][0] >= 60 * S), 0):
            true = total(truth(log.between(pts[i][0], pts[j][0]), per_step))[1]
            out.append({"from_s": (pts[i][0] - start) / S, "launches": pts[j][1] - pts[i][1], "true": true})
            out[-1]["err_pct"] = err(out[-1]["launches"], true)
            print(f"    /metrics, the minute from {out[-1]['from_s']:.0f} s: launches {out[-1]['err_pct']:+.2f} %")
            i = j
        return out


class Run:
    """One case process with --step-log, the shim injected (and GPU_AGENT_DUTY_CYCLE=1 as
    the floor); finish() waits for it and reads its log."""

    def __init__(self, b: Bench, case: str, opts: tuple, seconds: float, floor: bool, wait: float = 0.0, debug=False):
        b.runs += 1
        self.case, self.log_path = case, b.t / f"{case}-{b.runs}.log"
        # --periods: one line a period; debug: the attach lines
        debug = {"GPU_AGENT_DEBUG": "2"} if b.a.periods else {"GPU_AGENT_DEBUG": "1"} if debug else {}
        every = ("--log-every", "0.05") if b.a.periods else ()
        cmd = logged(case, self.log_path, seconds, wait, (*opts, *every))
        env = shim_env(**{**shim_settings(b.a.shim_env), **(FLOOR if floor else {}), **debug})
        self.real_minus_mono = time.time_ns() - time.monotonic_ns()  # the period lines' clock to the log's
        self.start = time.time_ns()
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pid, self.timeout = self.p.pid, seconds + wait + 300
        print(f"  {' '.join([case, *opts])}{' (floor)' if floor else ''}: pid {self.pid}, {seconds:g} s", flush=True)

    def finish(self) -> Run:
        out, errs = self.p.communicate(timeout=self.timeout)
        self.end, self.stderr = time.time_ns(), errs
        self.log_path.with_suffix(".stderr").write_text(errs)  # the period lines, kept with --keep
        if self.p.returncode != 0:
            raise SystemExit(f"{self.case} (pid {self.pid}) failed: {errs[-2000:]}")
        self.steps = last_json(out)["steps"]
        self.log = StepLog(self.log_path, self.start)
        return self


class Bench:
    """One invocation: its options, working directory, the exact runs, the shared agent."""

    def __init__(self, a, t: Path):
        self.a, self.t, self.runs, self.cache = a, t, 0, {}
        self.agent, self.scraper, self.dir = None, None, t / "run"

    def record_exact(self, case: str, seconds: float) -> tuple[int, dict, dict]:
        """One continuous record of the case's logged loop: (steps, per kernel [gpu_ns,
        launches], GPU ns per stack), warm-up and all."""
        out, log = self.t / f"exact-{case}-{seconds:g}.pb.gz", self.t / f"exact-{case}-{seconds:g}.log"
        cmd = logged(case, log, seconds)
        rec = [sys.executable, "-m", "gpu_agent", "record", "--duty-cycle", "1", "-o", str(out), "--", *cmd]
        p = subprocess.run(rec, env=clean_env(), capture_output=True, text=True, timeout=900)
        if p.returncode != 0 or not out.exists():
            raise SystemExit(f"exact run of {case} failed: {p.stderr[-2000:]}")
        counts = last_json(p.stdout)["steps"]
        return sum(counts), profile_kernels(out), stack_ns(profile_stacks(out))

    def exact(self, case: str) -> tuple[dict, dict]:
        """(per kernel [gpu_ns, launches] per step, stack shares) of the case's loop,
        without its start: two continuous records, of --exact-seconds and of three
        times that, and the difference of the two (the build's and warm-up's kernels,
        torch.compile's autotuning among them, are in both; the judged intervals, from
        the 10th second, hold none of them)."""
        if case not in self.cache:
            s1, k1, st1 = self.record_exact(case, self.a.exact_seconds)
            s2, k2, st2 = self.record_exact(case, 3 * self.a.exact_seconds)
            steps = s2 - s1
            if steps <= 0:
                raise SystemExit(f"exact runs of {case}: the longer made {s2} steps, the shorter {s1}")
            per = {}
            for k in set(k1) | set(k2):
                ns = k2.get(k, [0, 0])[0] - k1.get(k, [0, 0])[0]
                n = k2.get(k, [0, 0])[1] - k1.get(k, [0, 0])[1]
                if n > 0 and ns > 0:
                    per[k] = [ns / steps, n / steps]
            ns, n = total(per)
            steady = {k: [v[0] * s1, v[1] * s1] for k, v in per.items()}
            w_ns, w_n = (a - b for a, b in zip(total(k1), total(steady)))
            print(
                f"  exact {case}: {steps} steps between the two runs; per step {n:.3f} launches, {ns / 1e3:.2f} GPU µs;"
                f" the start's, left out: {w_n:.0f} launches, {w_ns / 1e6:.2f} GPU ms",
                flush=True,
            )
            diff = {k: st2.get(k, 0) - st1.get(k, 0) for k in set(st1) | set(st2)}
            self.cache[case] = per, shares_of(ns={k: v for k, v in diff.items() if v > 0})
        return self.cache[case]

    def per_step(self, case: str) -> list[dict]:
        return [self.exact(c)[0] for c in COLUMNS.get(case, (case,))]

    def agent_args(self) -> list[str]:
        return ["--interval", f"{self.a.interval:g}s"]

    def start_agent(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        metrics = self.a.metrics and importlib.util.find_spec("prometheus_client") is not None
        if self.a.metrics and not metrics:
            print("  TODO: /metrics not checked: prometheus_client is not importable here", flush=True)
        self.agent = Agent(str(self.dir), *self.agent_args(), *(["--metrics-addr", "127.0.0.1:0"] if metrics else []))
        url = re.search(r"metrics on (http://\S+)", "".join(self.agent.log_tail))
        if url:
            self.scraper = Scraper(url.group(1), Path(self.a.jsonl).with_suffix(".metrics.ndjson"))

    def stop_agent(self) -> None:
        if self.scraper:
            self.scraper.done.set()
        if self.agent:
            tail = self.agent.stop()
            if self.a.verbose:
                print("  the agent's last lines:\n" + tail, flush=True)
        self.agent = self.scraper = None

    def window(self, run: Run) -> tuple[int, int, int]:
        """(judged from, the sum's end, the log's end) in ns."""
        return run.start + self.a.skip * S, min(run.start + int(self.a.seconds * S), run.log.end), run.log.end

    def full(self, iv: Interval, lo: int, end: int) -> bool:
        return iv.t1 - iv.t0 >= 0.9 * self.a.interval * S and iv.t0 >= lo and iv.t1 <= end


# A job: a generator that runs its processes, yields, and (resumed once the next job
# ran, or the agent stopped) returns its figures.


def shim_settings(spec: str) -> dict:
    """--shim-env K=V,K=V: the case processes' shim settings."""
    return dict(kv.split("=", 1) for kv in filter(None, spec.split(",")))


def steady(b: Bench, case: str, opts: tuple, floor: bool):
    run = Run(b, case, opts, b.a.seconds, floor).finish()
    yield
    per = b.per_step(case)
    lo, hi, end = b.window(run)
    ivs = intervals_in(b.dir, run.pid, run.start, run.end + 60 * S)
    rows = [(iv, truth(run.log.between(iv.t0, iv.t1), per)) for iv in ivs if b.full(iv, lo, end)]
    print(f"    pid {run.pid}: steps {run.steps}, {len(ivs)} profiles", flush=True)
    out = judge(rows, run.start)
    if case not in COLUMNS and rows:
        out["stacks"] = stack_errors(b.exact(case)[1], [iv.stacks for iv, _ in rows])
    out["no_python_pct"] = no_python(ivs, run.pid)
    # The sum of the whole intervals from the --skip'th second on, as a user sums a
    # range of profiles (edge intervals prorated evenly read a job whose rate ramps up
    # in its first seconds -1.4 % where every interval was within 0.7 %)
    est = [sum(total(iv.kernels)[i] for iv, _ in rows) for i in (0, 1)]
    true = [sum(total(tr)[i] for _, tr in rows) for i in (0, 1)]
    s = out["sum"] = {"to_s": (max((iv.t1 for iv, _ in rows), default=lo) - run.start) / S}
    s.update(launches_err_pct=err(est[1], true[1]), gpu_ns_err_pct=err(est[0], true[0]))
    sums = f"launches {s['launches_err_pct']:+.2f} %, GPU ns {s['gpu_ns_err_pct']:+.2f} %"
    print(f"    sum of the judged intervals, {b.a.skip:g}-{s['to_s']:.0f} s: {sums}")
    out["metrics_minutes"] = (
        b.scraper.minutes(run.pid, run.log, per, lo, run.start) if b.scraper else "TODO: not checked (--metrics)"
    )
    if b.a.periods:
        out["periods"] = period_check(run, per, lo, end, [iv for iv, _ in rows])
    out["line"] = cols(out["intervals"], out, f"{s['launches_err_pct']:+8.2f} {s['gpu_ns_err_pct']:+7.2f}")
    return out


def periods_of(run: Run, per: list[dict]) -> list[dict]:
    """The run's period lines (GPU_AGENT_DEBUG=2), each with its span on the log's clock
    (lo, hi: CLOCK_REALTIME ns) and the launches the job made in it (true)."""
    rows = period_lines.parse(run.stderr)
    for r in rows:
        r["hi"] = r["end"] * S + run.real_minus_mono
        r["lo"] = r["hi"] - r["len_ms"] * 1e6
        r["true"] = total(truth(run.log.between(r["lo"], r["hi"]), per))[1]
    return rows


def period_check(run: Run, per: list[dict], lo: int, end: int, ivs: list[Interval]) -> dict:
    """--periods: each of the shim's period lines (GPU_AGENT_DEBUG=2) against the launches
    the job made in it, and the judged intervals again as period_lines.alternatives would
    make them (each period's launches spread evenly over its span, as placement does):
    is an interval's error its periods' own, and would pooling their rates help?"""
    rows = periods_of(run, per)
    if not rows:
        print("    no period lines (GPU_AGENT_DEBUG=2)", flush=True)
        return {}
    for ln in run.stderr.splitlines():
        if "launch counter (pid" in ln:  # what the shim's launch counter covered
            print("    " + ln.split(": ", 1)[1][:600], flush=True)
        if "periods cut where" in ln:  # where the launch mix changed (shim/src/mix.cpp)
            print("    cuts: " + ln[re.search(r"\d+ periods cut where", ln).start() :], flush=True)
    alts = period_lines.alternatives(rows)
    judged = [i for i, r in enumerate(rows) if r["lo"] >= lo and r["hi"] <= end and r["true"] > 0]
    out: dict = {"n": len(judged), "per_period": {}, "per_interval": {}}
    for name, est in alts.items():
        out["per_period"][name] = spread([err(est[i], rows[i]["true"]) for i in judged])
        errs = []
        for iv in ivs:
            got = sum(
                e * overlap(iv.t0, iv.t1, r["lo"], r["hi"]) / max(1.0, r["hi"] - r["lo"]) for e, r in zip(est, rows)
            )
            errs.append(err(got, total(truth(run.log.between(iv.t0, iv.t1), per))[1]))
        out["per_interval"][name] = spread(errs)
        print(
            f"    periods, {name:8s}: {len(judged)} periods {fmt(out['per_period'][name])}; "
            f"intervals {fmt(out['per_interval'][name])}",
            flush=True,
        )
    keep = tuple("len_ms on_ms seen in win_ms td_ms tail_ms tail_rate hook_hits hook_ratio rest_ms rate more".split())
    out["rows"] = [
        [round((r["lo"] - run.start) / S, 4), *(r[k] for k in keep), r["count_rate"], r["est"], round(r["true"], 1)]
        for r in rows
    ]
    out["row_keys"] = ["from_s", *keep, "count_rate", "est", "true"]
    return out


def bursty(b: Bench, case: str, opts: tuple, floor: bool):
    busy, idle = (float(x) * S for x in opts[opts.index("--bursts") + 1].split(","))
    run = Run(b, case, opts, b.a.seconds, floor).finish()
    yield
    lo, _, end = b.window(run)
    ivs = [iv for iv in intervals_in(b.dir, run.pid, run.start, run.end + 60 * S) if b.full(iv, lo, end)]

    def phase(iv: Interval) -> str:
        k = (iv.t0 - run.log.loop) // (busy + idle)
        a, z = iv.t0 - run.log.loop - k * (busy + idle), iv.t1 - run.log.loop - k * (busy + idle)
        return "busy" if z <= busy else "idle" if a >= busy + S and z <= busy + idle else "mixed"

    per = b.per_step(case)
    print(f"    pid {run.pid}: steps {run.steps}; busy {busy / S:g} s, idle {idle / S:g} s", flush=True)
    out = judge([(iv, truth(run.log.between(iv.t0, iv.t1), per)) for iv in ivs if phase(iv) == "busy"], run.start)
    idle_ns = [total(iv.kernels)[0] for iv in ivs if phase(iv) == "idle"]
    out.update(idle_intervals=len(idle_ns), idle_max_gpu_ns=max(idle_ns, default=0))
    print(f"    {len(idle_ns)} fully idle intervals written: at most {out['idle_max_gpu_ns']} GPU ns")
    out["line"] = cols(out["intervals"], out, f"busy ones; idle: {len(idle_ns)}, at most {max(idle_ns, default=0)} ns")
    return out


def short(b: Bench, case: str, opts: tuple, floor: bool):
    runs = [Run(b, case, opts, 3.0, floor, wait=3.0).finish() for _ in range(8)]
    yield
    per, rows = b.per_step(case), []
    for r in runs:
        est = prorated(intervals_in(b.dir, r.pid, r.start, r.end + 60 * S), 0, math.inf)
        true = total(truth(r.steps, per))
        rows.append({"pid": r.pid, "steps": r.steps, "launches": est[1], "true_launches": true[1]})
        rows[-1].update(launches_err_pct=err(est[1], true[1]), gpu_ns_err_pct=err(est[0], true[0]))
        print(
            f"    pid {r.pid}: {r.steps[0]} steps x {true[1] / r.steps[0]:.3f} = {true[1]:.0f} launches made; profiles "
            f"{est[1]:.0f} ({rows[-1]['launches_err_pct']:+.2f} %), GPU ns {rows[-1]['gpu_ns_err_pct']:+.2f} %",
            flush=True,
        )
    if b.a.periods:  # where each process's launches went: its periods against its steps
        for r, row in zip(runs, rows):
            got = periods_of(r, per)
            row["periods"] = [
                [round((q["lo"] - r.start) / S, 3), q["len_ms"], q["seen"], q["est"], round(q["true"])] for q in got
            ]
            row["exit_lines"] = [
                ln for ln in r.stderr.splitlines() if "exit (pid" in ln or "joined" in ln or "launch counter" in ln
            ][-4:]
            print(f"    pid {r.pid}: periods (from s, ms, seen, estimate, true): {row['periods']}", flush=True)
            for ln in row["exit_lines"]:
                if "launch counter" in ln:
                    print("      " + ln.split(": ", 1)[1][:300], flush=True)
            print(
                f"      log from {(r.log.loop - r.start) / S:.2f} s to {(r.log.end - r.start) / S:.2f} s; "
                f"the process ended at {(r.end - r.start) / S:.2f} s",
                flush=True,
            )
    out = {"processes": rows, "launches": spread([r["launches_err_pct"] for r in rows])}
    out["gpu_ns"] = spread([r["gpu_ns_err_pct"] for r in rows])
    out["total_launches_err_pct"] = err(sum(r["launches"] for r in rows), sum(r["true_launches"] for r in rows))
    out["line"] = cols(len(rows), out, f"processes; all, launches {out['total_launches_err_pct']:+.2f}")
    print(f"    8 processes, |error|: launches {fmt(out['launches'])}; GPU ns {fmt(out['gpu_ns'])}")
    print(f"    all: launches {out['total_launches_err_pct']:+.2f} %")
    return out


ATTACHED = re.compile(r"attached \(pid \d+ at ([\d.]+) s CLOCK_MONOTONIC")


def stopstart(b: Bench, case: str, opts: tuple, floor: bool):
    b.stop_agent()
    dirs = [b.t / f"stopstart-{b.runs}-{i}" for i in (0, 1)]
    for d in dirs:
        d.mkdir(parents=True)
    agent = Agent(str(dirs[0]), *b.agent_args())
    run = Run(b, case, opts, b.a.seconds, floor, debug=True)
    time.sleep(max(0.0, 20 - (time.time_ns() - run.start) / S))
    stopped = time.time_ns()  # the stop is asked here: the profiles end at it, not at the agent's exit
    agent.stop()
    agent = Agent(str(dirs[1]), *b.agent_args())
    watching = time.time_ns()
    run.finish()
    agent.stop()
    yield
    # The second attachment from the shim's attach (its debug line's time), which may
    # come before the agent says it watches: its launches from there on are the truth.
    attaches = [float(t) * S + run.real_minus_mono for t in ATTACHED.findall(run.stderr)]
    again = min((t for t in attaches if t > stopped), default=watching)
    per, out = b.per_step(case), {"gap_s": (again - stopped) / S, "segments": []}
    print(f"    the shim attached again {(watching - again) / S:.2f} s before the agent said it watches", flush=True)
    for d, (lo, hi) in zip(dirs, [(run.start, stopped), (again, run.end)]):
        est = prorated(intervals_in(d, run.pid, run.start, run.end + 60 * S), 0, math.inf)
        true = total(truth(run.log.between(lo, hi), per))
        seg = {"from_s": (lo - run.start) / S, "to_s": (hi - run.start) / S, "launches": est[1], "true": true[1]}
        out["segments"].append(dict(seg, err_pct=err(est[1], true[1])))
        print(f"    agent from {seg['from_s']:.1f} to {seg['to_s']:.1f} s: launches {err(est[1], true[1]):+.2f} %")
    if b.a.periods:  # each period against the job's launches, around the stop and the start
        for ln in run.stderr.splitlines():
            if "attached (pid" in ln or "joined" in ln:
                print("      " + ln[:300], flush=True)
        for q in periods_of(run, per):
            print(
                f"      period from {(q['lo'] - run.start) / S:7.2f} s, {q['len_ms']:7.1f} ms: seen {q['seen']}, "
                f"counter {q['hook_hits']} hits at {q['hook_ratio']}, estimate {q['est']} (clocks {q['clocks']}), "
                f"made {q['true']:.0f}",
                flush=True,
            )
    est, true = (sum(s[k] for s in out["segments"]) for k in ("launches", "true"))
    out["launches_err_pct"] = err(est, true)
    out["line"] = cols(2, out, f"while attached: launches {out['launches_err_pct']:+.2f} (gap {out['gap_s']:.1f} s)")
    print(
        f"    while attached: launches {out['launches_err_pct']:+.2f} %; pid {run.pid}, steps {run.steps}", flush=True
    )
    return out


JOBS = {  # job: (function, case, the case's options)
    **{w: (steady, w, ()) for w in ("eager", "mlp", "llama", "graph", "compiled")},
    "phased30": (steady, "phased", ("--phase", "30")),
    "phased3": (steady, "phased", ("--phase", "3")),
    "bursty": (bursty, "mlp", ("--bursts", "20,30")),
    "short": (short, "eager", ()),
    "stopstart": (stopstart, "eager", ()),
}


def run(a) -> None:
    jobs = sorted(filter(None, a.workloads.split(",")), key=lambda j: j == "stopstart")
    t = Path(a.keep or tempfile.mkdtemp(prefix="bench-intervals-"))
    t.mkdir(parents=True, exist_ok=True)
    b, results, pending = Bench(a, t), [], []

    def report(j: str, floor: bool, job) -> None:
        print(f"== {j}{' floor' if floor else ''} ({a.seconds:g} s, intervals of {a.interval:g} s)", flush=True)
        try:
            next(job)
        except StopIteration as done:
            r = dict(done.value, bench="intervals", workload=j, floor=floor)
            results.append(dict(r, interval_s=a.interval, seconds=a.seconds, skip_s=a.skip))
            with open(a.jsonl, "a") as f:  # as each ends: a run cut short keeps what it did
                f.write(json.dumps(results[-1]) + "\n")

    try:
        for case in sorted({c for j in jobs for c in COLUMNS.get(JOBS[j][1], (JOBS[j][1],))}):
            b.exact(case)  # before any agent watches
        for j in jobs:
            fn, case, opts = JOBS[j]
            for floor in (False, True) if a.floor else (False,):
                if fn is not stopstart and b.agent is None:
                    b.start_agent()
                pending.append((j, floor, fn(b, case, opts, floor)))
                next(pending[-1][2])  # its processes
                while len(pending) > 1:
                    report(*pending.pop(0))
        b.stop_agent()  # its last interval written
        for p in pending:
            report(*p)
    finally:
        b.stop_agent()
        if not a.keep:
            shutil.rmtree(t, ignore_errors=True)
    print(f"\n{'':16s}     launches |error| %      GPU ns |error| %       sum of those, %")
    print(f"{'job':16s}   n  median    p90  worst    median    p90  worst   launches  GPU ns")
    for r in results:
        print(f"{r['workload'] + (' floor' if r['floor'] else ''):16s} {r['line']}")
