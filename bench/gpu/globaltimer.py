"""%globaltimer against CUPTI's kernel times, and in-kernel events merged into a real
capture (python -m bench.gpu globaltimer).

bench/gpu/globaltimer.cu reads %globaltimer's resolution (the smallest step one
thread sees in 2^20 reads), maps it to CLOCK_MONOTONIC_RAW with a one-thread
kernel between two host reads (the best of 50, before and after), and runs
--launches launches of a kernel whose 4 warps in 8 CTAs stamp two phases. It runs
under `gpu-agent record --events`; its stamps become a version 4 .nanotrace (our
writer), and `gpu-agent timeline merge` places each launch's events by the clock
snapshots. Reported: how far each launch's first and last %globaltimer stamp lie
from CUPTI's start and end of the same kernel, how many events landed inside
their kernel's slice, and the snapshots' uncertainty and drift."""

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


def to_nanotrace(rows: list[list[str]]) -> tuple[nt.Nanotrace, dict]:
    t = nt.Nanotrace(version=4, session="globaltimer", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 2: (3, 0, 0, 1_000_000_000)}
    info: dict = {"snapshots": []}
    launches: dict[int, list] = {}
    for r in rows:
        if r[0] == "res":
            info.update(resolution_ns=int(r[1]), changes=int(r[2]), span_ns=int(r[3]))
        elif r[0] == "snap":
            g, lo, hi = map(int, r[1:])
            t.snapshots.append((2, 1, g, (lo + hi) // 2, (hi - lo) // 2))
            info["snapshots"].append({"globaltimer": g, "raw_mid": (lo + hi) // 2, "uncertainty_ns": (hi - lo) // 2})
        elif r[0] == "ev":
            launches.setdefault(int(r[1]), []).append(tuple(map(int, r[2:])))
    for i, warps in sorted(launches.items()):
        kid = len(t.tracks) + 1
        t.tracks[kid] = nt.Track(kid, 0, 2, KERNEL_NAME, KERNEL, i)
        t.events.append(nt.Event(kid, min(w[2] for w in warps), max(w[4] for w in warps) - min(w[2] for w in warps),
                                 KERNEL_NAME))
        ctas = {}
        for cta, warp, t0, t1, t2 in warps:
            if cta not in ctas:
                ctas[cta] = len(t.tracks) + 1
                t.tracks[ctas[cta]] = nt.Track(ctas[cta], kid, 2, f"CTA {cta}", THREAD_BLOCK, cta)
            wid = len(t.tracks) + 1
            t.tracks[wid] = nt.Track(wid, ctas[cta], 2, f"warp {warp}", WARP, warp)
            t.events += [nt.Event(wid, t0, t1 - t0, "load"), nt.Event(wid, t1, t2 - t1, "mma")]
    info["launches"] = launches
    return t, info


def run(a) -> None:
    exe = cuda_binary("globaltimer")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        p = subprocess.run([sys.executable, "-m", "gpu_agent", "record", "--events", str(d / "t.ndjson"),
                            "-o", str(d / "p.pb.gz"), "--", exe, str(d / "stamps.txt"), str(a.launches)],
                           env=clean_env(), capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"record: {p.stderr[-2000:]}")
        model, info = to_nanotrace([ln.split() for ln in (d / "stamps.txt").read_text().splitlines()])
        nt.write_v4(model, d / "gt.nanotrace")
        m = subprocess.run([sys.executable, "-m", "gpu_agent", "timeline", "merge", str(d / "t.ndjson"),
                            str(d / "gt.nanotrace"), "-o", str(d / "m.json"), "--trace-format", "chrome"],
                           capture_output=True, text=True, timeout=600)
        lines = [json.loads(x) for x in (d / "t.ndjson").read_text().splitlines()]
        doc = json.loads((d / "m.json").read_text()) if m.returncode == 0 else {"traceEvents": []}
    realtime, raw = lines[0]["monotonic_raw_pair"]
    cupti = sorted((x for x in lines if x["type"] == "kernel" and x["name"].startswith(KERNEL_NAME + "(")),
                   key=lambda x: x["start_ns"])
    kernel_tracks = sorted((tr for tr in model.tracks.values() if tr.kind == KERNEL), key=lambda tr: tr.source_id)
    start_off, end_off = [], []
    for tr, k in zip(kernel_tracks, cupti):
        own = next(e for e in model.events if e.track == tr.id)
        first = nt.to_reference(model, 2, own.start) - raw + realtime
        last = nt.to_reference(model, 2, own.start + own.duration) - raw + realtime
        start_off.append(first - k["start_ns"])
        end_off.append(k["end_ns"] - last)
    placed = [ln for ln in m.stderr.splitlines() if "by its clock snapshots" in ln]
    cut = sum(int(x) for x in re.findall(r"(\d+) cut to the kernel's slice", m.stderr))
    merged = sum(1 for e in doc["traceEvents"] if e.get("cat") == "nanotrace")
    s = info["snapshots"]
    drift = ((s[1]["globaltimer"] - s[0]["globaltimer"]) / (s[1]["raw_mid"] - s[0]["raw_mid"]) - 1) * 1e6
    res = {"launches": a.launches, "cupti_kernels": len(cupti), "resolution_ns": info["resolution_ns"],
           "resolution_changes": info["changes"], "resolution_span_ns": info["span_ns"],
           "snapshot_uncertainty_ns": [x["uncertainty_ns"] for x in s], "drift_ppm": drift,
           "first_stamp_after_cupti_start_ns": _spread(start_off),
           "cupti_end_after_last_stamp_ns": _spread(end_off),
           "placed_by_clock": len(placed), "events": 2 * sum(len(w) for w in info["launches"].values()),
           "events_merged": merged, "events_cut_to_slice": cut, "merge_rc": m.returncode,
           "merge_said": m.stderr.splitlines()[-3:]}
    print(json.dumps(res, indent=1))
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            f.write(json.dumps({"bench": "globaltimer", **res}) + "\n")


def _spread(xs: list[float]) -> dict:
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=20) if len(xs) > 1 else [xs[0]] * 19
    return {"median": statistics.median(xs), "p5": q[0], "p95": q[-1], "min": min(xs), "max": max(xs)}
