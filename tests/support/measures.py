"""What the load-sensitive tests measured, run after run, for deriving their bounds.

A bound that a test holds a host-dependent figure to (a 90th percentile of period
errors, a slowdown) must come from that figure's distribution at the load the suite
really puts on it: two CPU burners, or two pytest neighbours, load some tests less than
a three-worker suite does (test_intervals' busy clock read a 90th percentile of
4.1-5.8 % beside two neighbours and 13.1 % in a suite). So each such test notes its
figure here on every run, passed or failed: one JSON line in build/measures.jsonl
(git-ignored; a clean clone starts empty), with the suite's worker count, the
neighbours flaky.py ran it beside, and the host's load then. `flaky.py --measures`
prints each figure's distribution by worker and neighbour count, which the test's
comment then quotes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time

from support.env import BUILD

MEASURES = BUILD / "measures.jsonl"
NEIGHBOURS_ENV = "GA_TEST_NEIGHBOURS"  # set by flaky.py for the tests it runs beside neighbours


def note(**figures: float) -> None:
    """The running test's figures (PYTEST_CURRENT_TEST names it), appended whole."""
    if os.environ.get(NEIGHBOURS_ENV) == "-1":
        return  # a neighbour's run (flaky.py --neighbours): its load is not the one noted
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    row = {
        "test": test,
        "workers": int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
        "neighbours": int(os.environ.get(NEIGHBOURS_ENV, "0")),  # flaky.py --neighbours
        "load1": round(os.getloadavg()[0], 2),
        "at": round(time.time(), 1),
        **{k: round(float(v), 6) for k, v in figures.items()},
    }
    MEASURES.parent.mkdir(parents=True, exist_ok=True)
    with open(MEASURES, "a") as f:  # one short line, one write: whole under concurrent workers
        f.write(json.dumps(row) + "\n")


def summary(path=MEASURES) -> str:
    """Each test's figures: n, min, median, 90th percentile, max, by worker and neighbour count."""
    groups: dict[tuple[str, tuple[int, int], str], list[float]] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return f"no measures yet ({path})"
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        for k, v in row.items():
            if k not in ("test", "workers", "neighbours", "load1", "at") and isinstance(v, (int, float)):
                groups.setdefault((row["test"], (row["workers"], row.get("neighbours", 0)), k), []).append(v)
    out = []
    for (test, (workers, near), k), vs in sorted(groups.items()):
        vs.sort()
        n = len(vs)
        p90 = vs[max(0, math.ceil(0.9 * n) - 1)]  # nearest rank
        out.append(
            f"{test} {k} ({workers} worker(s), {near} neighbour(s)): n {n}, min {vs[0]:.4g}, "
            f"median {statistics.median(vs):.4g}, p90 {p90:.4g}, max {vs[-1]:.4g}"
        )
    return "\n".join(out)
