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
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gpu.harness import clean_env, cuda_binary
from gpu_agent.timeline import nanotrace as nt
from gpu_agent.timeline.nanotrace.model import KERNEL, THREAD_BLOCK, WARP

STREAM = 3  # version 4's stream track kind

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
        elif r[0] == "cts":
            info.setdefault("cts", []).append(tuple(map(int, r[1:6])))
        elif r[0] == "ev":
            info["launches"].setdefault(int(r[1]), []).append(tuple(map(int, r[2:])))
    return info


def to_nanotrace(info: dict, method: str, layout: str = "single", launch: int = 0) -> nt.Nanotrace:
    """The stamps as a version 4 file, its snapshots those of `method`, laid out as
    - "single": each launch a kernel track of its own (this bench's first layout);
    - "multi": upstream's repeated launches (GpuKernelTraceOptions): ONE kernel track
      under a stream, its CTA and warp tracks shared by the launches, each launch a
      slice on the stream (its stamps' span, put on CLOCK_MONOTONIC_RAW by the
      snapshots) that its events name as Event.parent;
    - "standalone": launch `launch` alone, as upstream's trace_writer::write leaves a
      file: one snapshot pinning its last stamp at 0 on CLOCK_MONOTONIC_RAW."""
    t = nt.Nanotrace(version=4, session="globaltimer", reference_clock=1)
    t.clocks = {1: (0, 0, 0, 1_000_000_000), 2: (3, 0, 0, 1_000_000_000)}
    launches = sorted(info["launches"].items())
    if layout == "standalone":
        launches = [launches[launch]]
        t.snapshots = [(2, 1, max(w[4] for w in launches[0][1]), 0, 0)]
    else:
        t.snapshots = [(2, 1, s["globaltimer"], s["raw_mid"], s["uncertainty_ns"]) for s in info["snapshots"][method]]
    if layout != "multi":
        for i, warps in launches:
            kid = len(t.tracks) + 1
            t.tracks[kid] = nt.Track(kid, 0, 2, KERNEL_NAME, KERNEL, i)
            first, last = min(w[2] for w in warps), max(w[4] for w in warps)
            t.events.append(nt.Event(kid, first, last - first, KERNEL_NAME))
            _blocks(t, kid, warps, {})
        return t
    t.tracks[1] = nt.Track(1, 0, 1, "Stream 7", STREAM, 7)
    t.tracks[2] = nt.Track(2, 1, 2, KERNEL_NAME, KERNEL)
    for _, warps in launches:  # events 1..L: the launches' slices
        lo = round(nt.to_reference(t, 2, min(w[2] for w in warps)))
        hi = round(nt.to_reference(t, 2, max(w[4] for w in warps)))
        t.events.append(nt.Event(1, lo, hi - lo, KERNEL_NAME))
    shared: dict = {}
    for n, (_, warps) in enumerate(launches, 1):
        _blocks(t, 2, warps, shared, parent=n)
    return t


def _blocks(t: nt.Nanotrace, kid: int, warps: list, tracks: dict, parent: int = 0) -> None:
    """A launch's CTA and warp tracks under kernel track kid (those in `tracks`
    reused), each warp's two phases on them."""
    for cta, warp, t0, t1, t2 in warps:
        if (cta, None) not in tracks:
            tracks[cta, None] = len(t.tracks) + 1
            t.tracks[tracks[cta, None]] = nt.Track(tracks[cta, None], kid, 2, f"CTA {cta}", THREAD_BLOCK, cta)
        if (cta, warp) not in tracks:
            tracks[cta, warp] = len(t.tracks) + 1
            t.tracks[tracks[cta, warp]] = nt.Track(tracks[cta, warp], tracks[cta, None], 2, f"warp {warp}", WARP, warp)
        wid = tracks[cta, warp]
        t.events += [
            nt.Event(wid, t0, t1 - t0, "load", parent=parent),
            nt.Event(wid, t1, t2 - t1, "mma", parent=parent),
        ]


def mapping(info: dict, method: str, pair: tuple[int, int]):
    """%globaltimer -> the timeline's clock by `method`'s snapshots and a (timeline
    clock, CLOCK_MONOTONIC_RAW) pair; in integers (a float of 1.8e18 ns is 256 ns coarse)."""
    model = to_nanotrace(info, method)
    clock, raw = pair
    return lambda g: round(nt.to_reference(model, 2, g)) - raw + clock


def agreement(info: dict, method: str, cupti: list[dict], pair: tuple[int, int]) -> dict:
    """Each launch's stamps mapped by `method`'s snapshots onto CUPTI's clock
    (integers: a float of 1.8e18 ns is 256 ns coarse), against CUPTI's record of it."""
    at = mapping(info, method, pair)
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


def record(a, d: Path) -> None:
    """The stamping program under `gpu-agent record --events`: d/stamps.txt, d/t.ndjson."""
    p = subprocess.run(
        [sys.executable, "-m", "gpu_agent", "record", "--events", str(d / "t.ndjson"), "-o", str(d / "p.pb.gz")]
        + ["--", cuda_binary("globaltimer"), str(d / "stamps.txt"), str(a.launches), str(a.gap_seconds), str(a.burst)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0:
        raise SystemExit(f"record: {p.stderr[-2000:]}")


def merge(d: Path, name: str, files: list[str]) -> tuple[list[dict], str, int]:
    """`gpu-agent timeline merge` of the capture with files: its NDJSON lines, what it
    said, its exit status."""
    out = d / f"m-{name}.ndjson"
    m = subprocess.run(
        [sys.executable, "-m", "gpu_agent", "timeline", "merge", str(d / "t.ndjson"), *files, "--events", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(x) for x in out.read_text().splitlines()] if m.returncode == 0 else []
    return lines, m.stderr, m.returncode


def placement(lines: list[dict], info: dict, at, half_width: float) -> dict:
    """Where the merge put each launch's first event, against where the file's own
    snapshots put it (issue 46: within their half-width, and nothing cut)."""
    kernels = [x for x in lines if x["type"] == "kernel"]
    work = sorted(k["start_ns"] for k in kernels if k["name"].startswith(KERNEL_NAME + "("))
    launches = sorted(info["launches"].items())
    err, cut, seen, events, first = [], 0, set(), 0, {}
    for x in lines:
        if x["type"] == "inkernel":
            k = kernels[x["kernel"]]
            n = work.index(k["start_ns"])
            seen.add(n)
            cut += x["clamped"]
            first[x["id"]] = (n, [])
        elif x["type"] == "inkernel_event":
            first[x["of"]][1].append(x["start_ns"])
            events += 1
    for n, starts in first.values():
        err.append(min(starts) - at(min(w[2] for w in launches[n][1])))
    return {
        "launches_placed": len(seen),
        "events": events,
        "cut": cut,
        "first_event_minus_snapshots_ns": _spread(err),
        "within_half_width": sum(abs(e) <= half_width for e in err),
        "half_width_ns": half_width,
    }


def run(a) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        if a.from_dir:
            for f in ("stamps.txt", "t.ndjson"):
                shutil.copy(Path(a.from_dir) / f, d / f)
        else:
            record(a, d)
        if a.keep:
            Path(a.keep).mkdir(parents=True, exist_ok=True)
            for f in ("stamps.txt", "t.ndjson"):
                shutil.copy(d / f, Path(a.keep) / f)
        info = parse([ln.split() for ln in (d / "stamps.txt").read_text().splitlines()])
        lines = [json.loads(x) for x in (d / "t.ndjson").read_text().splitlines()]
        pair = tuple(lines[0]["monotonic_raw_pair"])
        cupti = sorted(
            (x for x in lines if x["type"] == "kernel" and x["name"].startswith(KERNEL_NAME + "(")),
            key=lambda x: x["start_ns"],
        )
        # the truth: the snapshots through the program's own (CLOCK_REALTIME,
        # CLOCK_MONOTONIC_RAW) pair (read in C, the narrowest of 20 brackets), not
        # through the capture's, which the merge uses
        own = info["clk"][0]
        at = mapping(info, METHOD, own)
        half = statistics.median(s["uncertainty_ns"] for s in info["snapshots"][METHOD])
        merged = {}
        for layout in ("single", "multi"):
            nt.write_v4(to_nanotrace(info, METHOD, layout), d / f"{layout}.nanotrace")
            merged[layout] = merge(d, layout, [str(d / f"{layout}.nanotrace")])
        n = len(info["launches"])
        picks = sorted({round(i * (n - 1) / max(1, a.standalone - 1)) for i in range(a.standalone)}) if n else []
        for i in picks:
            nt.write_v4(to_nanotrace(info, METHOD, "standalone", i), d / f"sa{i}.nanotrace")
        merged["standalone"] = merge(d, "standalone", [f"{d / f'sa{i}.nanotrace'}@{i + 1}" for i in picks])
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
        "launches": len(info["launches"]),
        "gap_seconds": a.gap_seconds,
        "burst": a.burst,
        "cupti_kernels": len(cupti),
        "capture_pair_minus_program_pair_ns": (pair[0] - pair[1]) - (own[0] - own[1]),
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
        "placed": {
            layout: {
                **placement(ls, info, at, half),
                "merge_rc": rc,
                "merge_said": said.splitlines()[-3:],
            }
            for layout, (ls, said, rc) in merged.items()
        },
    }
    if info.get("cts"):
        # CUPTI's clock read beside the host's (cuptiGetTimestamp): against CLOCK_REALTIME,
        # and the stamps mapped through a (CUPTI, CLOCK_MONOTONIC_RAW) pair instead of the
        # capture's (CLOCK_REALTIME, CLOCK_MONOTONIC_RAW)
        c = info["cts"]
        res["cupti_minus_realtime_ns"] = _spread([x[0] - (x[1] + x[2]) // 2 for x in c])
        res["cupti_read_width_ns"] = _spread([x[4] - x[3] for x in c])
        best = min(c, key=lambda x: x[4] - x[3])
        cpair = (best[0], (best[3] + best[4]) // 2)
        res["by_cupti_pair"] = {mth: agreement(info, mth, cupti, cpair) for mth in info["snapshots"]}
    print(json.dumps(res, indent=1))
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            f.write(json.dumps({"bench": "globaltimer", **res}) + "\n")


def _spread(xs: list[float]) -> dict:
    if not xs:
        return {}
    q = statistics.quantiles(xs, n=20) if len(xs) > 1 else [xs[0]] * 19
    return {"median": statistics.median(xs), "p5": q[0], "p95": q[-1], "min": min(xs), "max": max(xs)}
