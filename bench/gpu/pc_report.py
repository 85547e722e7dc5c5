"""What a profile's PC samples say (issue 21's GPU check): one JSON object.

  python -m bench.gpu.pc_report PROFILE.pb.gz [--under FRAME ...]

Totals of pc_samples/count by kernel, by source line of the SASS frame (file:line,
or "no line info"), by stall reason; and the share of samples whose stack holds
each --under frame (a launching function: the CPU stack above the kernel). Also
each kernel's GPU ns per launch (gpu_time / kernel_launches), to compare with a run
without PC sampling.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import Counter

from gpu_agent.proto import profile_pb2


def report(path: str, under: list[str]) -> dict:
    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(open(path, "rb").read()))
    s = p.string_table
    types = [s[t.type] for t in p.sample_type]
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: loc for loc in p.location}
    gpu: dict[str, list[int]] = {}
    for smp in p.sample:
        if smp.value[1]:
            leaf = s[funcs[locs[smp.location_id[0]].line[0].function_id].name][:60]
            g = gpu.setdefault(leaf, [0, 0])
            g[0] += smp.value[0]
            g[1] += smp.value[1]
    per_launch = {k: round(v[0] / v[1]) for k, v in sorted(gpu.items(), key=lambda kv: -kv[1][0])[:4]}
    if "pc_samples" not in types:
        return {"pc_samples": 0, "sample_types": types, "gpu_ns_per_launch": per_launch}
    vi = types.index("pc_samples")
    by_kernel, by_line, by_reason, by_under = Counter(), Counter(), Counter(), Counter()
    total = 0
    for smp in p.sample:
        n = smp.value[vi]
        if not n:
            continue
        total += n
        frames = []
        for lid in smp.location_id:
            line = locs[lid].line[0]
            f = funcs[line.function_id]
            frames.append((s[f.name], s[f.filename], line.line))
        stall, sass, kernel = frames[0], frames[1], frames[2]
        by_reason[stall[0]] += n
        by_kernel[kernel[0][:80]] += n
        by_line[f"{sass[1]}:{sass[2]}" if sass[2] else "no line info"] += n
        names = {f[0] for f in frames}
        for u in under:
            by_under[u] += n if u in names else 0
    top = lambda c, k=8: {key: round(v / total, 4) for key, v in c.most_common(k)}  # noqa: E731
    return {
        "pc_samples": total,
        "by_kernel": top(by_kernel),
        "by_line": top(by_line),
        "by_reason": top(by_reason, 12),
        "under": {u: round(by_under[u] / total, 4) for u in under},
        "gpu_ns_per_launch": per_launch,
        "comments": [s[c] for c in p.comment if "pc_samples" not in s[c]],
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("profile")
    ap.add_argument("--under", nargs="*", default=[])
    a = ap.parse_args(argv)
    print(json.dumps(report(a.profile, a.under)))


if __name__ == "__main__":
    main()
