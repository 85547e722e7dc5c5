"""%globaltimer against CUPTI's kernel times, and in-kernel events merged into a real
capture (python -m bench.gpu globaltimer).

bench/gpu/globaltimer.cu reads %globaltimer's resolution (the smallest step one
thread sees in 2^20 reads), maps it to CLOCK_MONOTONIC_RAW by two kinds of
snapshot (a one-thread kernel between launch and sync; a resident kernel answering
the host through mapped memory), and runs
--launches launches of a kernel whose 4 warps in 8 CTAs stamp two phases. It runs
under `gpu-agent record --events`; its stamps become a version 4 .nanotrace (our
writer), and `gpu-agent timeline merge` places each launch's events by the clock
snapshots. Reported, for each kind of snapshot: how far each launch's first and last stamp lie
from CUPTI's start and end of the same kernel, how many events land inside their
kernel's slice as mapped, the snapshots' uncertainty and the drift over 2 s; and,
free of any snapshot, how much longer CUPTI's kernel is than its stamps' span, and
(--gap-seconds) how far CUPTI's clock and %globaltimer drift apart over the gap."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gpu.harness import clean_env, cuda_binary
from gpu_agent.timeline import nanotrace as nt
from gpu_agent.timeline.nanotrace.model import KERNEL, THREAD_BLOCK, WARP

KERNEL_NAME = "work"


METHOD = "pingpong"  # the snapshots the file carries; "sync" is reported beside it


def parse(rows: list[list[str]]) -> dict:
    info: dict = {"snapshots": {}, "launches": {}}
    for r in rows:
        if r[0] == "res":
            info.update(resolution_ns=int(r[1]), changes=int(r[2]), span_ns=int(r[3]))
        elif r[0] == "snap":
            g, lo, hi = map(int, r[2:])
            info["snapshots"].setdefault(r[1], []).append(
                {"globaltimer": g, "raw_mid": (lo + hi) // 2, "uncertainty_ns": (hi - lo) // 2}
            )
        elif r[0] == "clk":
            info.setdefault("clk", []).append((int(r[1]), int(r[2])))
        elif r[0] == "ev":
            info["launches"].setdefault(int(r[1]), []).append(tuple(map(int, r[2:])))
    return info


def to_nanotrace(info: dict, method: str) -> nt.Nanotrace:
    """The stamps as a version 4 file, its snapshots those of `method`."""
    t = nt.Nanotrace(version=4, session="globaltimer", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 2: (3, 0, 0, 1_000_000_000)}
    for s in info["snapshots"][method]:
        t.snapshots.append((2, 1, s["globaltimer"], s["raw_mid"], s["uncertainty_ns"]))
    for i, warps in sorted(info["launches"].items()):
        kid = len(t.tracks) + 1
        t.tracks[kid] = nt.Track(kid, 0, 2, KERNEL_NAME, KERNEL, i)
        first, last = min(w[2] for w in warps), max(w[4] for w in warps)
        t.events.append(nt.Event(kid, first, last - first, KERNEL_NAME))
        ctas = {}
        for cta, warp, t0, t1, t2 in warps:
            if cta not in ctas:
                ctas[cta] = len(t.tracks) + 1
                t.tracks[ctas[cta]] = nt.Track(ctas[cta], kid, 2, f"CTA {cta}", THREAD_BLOCK, cta)
            wid = len(t.tracks) + 1
            t.tracks[wid] = nt.Track(wid, ctas[cta], 2, f"warp {warp}", WARP, warp)
            t.events += [nt.Event(wid, t0, t1 - t0, "load"), nt.Event(wid, t1, t2 - t1, "mma")]
    return t


def agreement(info: dict, method: str, cupti: list[dict], pair: tuple[int, int]) -> dict:
    """Each launch's stamps mapped by `method`'s snapshots onto CUPTI's clock
    (integers: a float of 1.8e18 ns is 256 ns coarse), against CUPTI's record of it."""
    model = to_nanotrace(info, method)
    realtime, raw = pair
    at = lambda g: round(nt.to_reference(model, 2, g)) - raw + realtime  # noqa: E731
    start_off, end_off, inside, events = [], [], 0, 0
    for (_, warps), k in zip(sorted(info["launches"].items()), cupti):
        start_off.append(at(min(w[2] for w in warps)) - k["start_ns"])
        end_off.append(k["end_ns"] - at(max(w[4] for w in warps)))
        for _, _, t0, _, t2 in warps:
            events += 2
            inside += 2 * (k["start_ns"] <= at(t0) and at(t2) <= k["end_ns"])
    s = info["snapshots"][method]
    span = s[-1]["raw_mid"] - s[0]["raw_mid"]
    half = len(start_off) // 2
    return {
        "snapshot_uncertainty_ns": [x["uncertainty_ns"] for x in s],
        "first_stamp_after_cupti_start_ns": _spread(start_off),
        "halves_first_stamp_after_cupti_start_ns": [_spread(start_off[:half]), _spread(start_off[half:])],
        "cupti_end_after_last_stamp_ns": _spread(end_off),
        "events_inside_as_mapped": inside,
        "events": events,
        "drift_ppm": ((s[-1]["globaltimer"] - s[0]["globaltimer"]) / span - 1) * 1e6,
        "drift_bound_ppm": (s[0]["uncertainty_ns"] + s[-1]["uncertainty_ns"]) / span * 1e6,
        "drift_over_s": span / 1e9,
    }


def run(a) -> None:
    exe = cuda_binary("globaltimer")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpu_agent",
                "record",
                "--events",
                str(d / "t.ndjson"),
                "-o",
                str(d / "p.pb.gz"),
                "--",
                exe,
                str(d / "stamps.txt"),
                str(a.launches),
                str(a.gap_seconds),
            ],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if p.returncode != 0:
            raise SystemExit(f"record: {p.stderr[-2000:]}")
        info = parse([ln.split() for ln in (d / "stamps.txt").read_text().splitlines()])
        nt.write_v4(to_nanotrace(info, METHOD), d / "gt.nanotrace")
        m = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpu_agent",
                "timeline",
                "merge",
                str(d / "t.ndjson"),
                str(d / "gt.nanotrace"),
                "-o",
                str(d / "m.json"),
                "--trace-format",
                "chrome",
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        lines = [json.loads(x) for x in (d / "t.ndjson").read_text().splitlines()]
        doc = json.loads((d / "m.json").read_text()) if m.returncode == 0 else {"traceEvents": []}
    pair = tuple(lines[0]["monotonic_raw_pair"])
    cupti = sorted(
        (x for x in lines if x["type"] == "kernel" and x["name"].startswith(KERNEL_NAME + "(")),
        key=lambda x: x["start_ns"],
    )
    # method-free: how CUPTI's duration of each launch exceeds its stamps' span
    longer = [
        (k["end_ns"] - k["start_ns"]) - (max(w[4] for w in ws) - min(w[2] for w in ws))
        for (_, ws), k in zip(sorted(info["launches"].items()), cupti)
    ]
    # method-free too: CUPTI's start minus the first stamp, first half against second
    diff = [k["start_ns"] - min(w[2] for w in ws) for (_, ws), k in zip(sorted(info["launches"].items()), cupti)]
    h = len(diff) // 2
    apart = cupti[h]["start_ns"] - cupti[h - 1]["start_ns"] if h else 0
    moved = statistics.median(diff[h:]) - statistics.median(diff[:h]) if h else 0
    (rt0, raw0), (rt1, raw1) = info["clk"][0], info["clk"][-1]
    res = {
        "launches": a.launches,
        "gap_seconds": a.gap_seconds,
        "cupti_kernels": len(cupti),
        "realtime_vs_raw_ppm": ((rt1 - rt0) / (raw1 - raw0) - 1) * 1e6,
        "clk_over_s": (raw1 - raw0) / 1e9,
        "resolution_ns": info["resolution_ns"],
        "resolution_changes": info["changes"],
        "resolution_span_ns": info["span_ns"],
        "cupti_duration_over_stamp_span_ns": _spread(longer),
        "cupti_minus_globaltimer_moved_ns": moved,
        "halves_apart_s": apart / 1e9,
        "cupti_vs_globaltimer_ppm": moved / apart * 1e6 if apart else None,
        "by": {mth: agreement(info, mth, cupti, pair) for mth in info["snapshots"]},
        "merged_with": METHOD,
        "events_merged": sum(1 for e in doc["traceEvents"] if e.get("cat") == "nanotrace"),
        "events_cut_by_merge": sum(int(x) for x in re.findall(r"(\d+) cut to their kernel's slice", m.stderr)),
        "merge_rc": m.returncode,
        "merge_said": m.stderr.splitlines()[-3:],
    }
    print(json.dumps(res, indent=1))
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            f.write(json.dumps({"bench": "globaltimer", **res}) + "\n")


def _spread(xs: list[float]) -> dict:
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=20) if len(xs) > 1 else [xs[0]] * 19
    return {"median": statistics.median(xs), "p5": q[0], "p95": q[-1], "min": min(xs), "max": max(xs)}
