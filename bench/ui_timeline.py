"""How fast the UI's Timeline tab draws a large trace (docs/benchmarks.md).

A store of two traces of N kernels each (default 250 000, the largest capture the
default ring keeps: 5 s on 4 streams), written by the agent's own Perfetto writer
(tests/support/big_timeline.py), then per round a fresh `gpu-agent ui` and Debian's
Chromium (Playwright), timing, until the canvas is drawn:

- first draw, warmed: the page opened once the server's warm-up has parsed the
  newest trace (what it does at start);
- first draw, cold: the other trace chosen in the page, its parse included;
- a wheel turn: the handler's redraw of the canvas, from what the page holds;
- a finer view: four turns in, the view the page asks for, answered and drawn.

Usage: .venv/bin/python bench/ui_timeline.py [--kernels 250000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "agent"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from bench.ui_store import chromium, rss_mib, start_ui  # noqa: E402
from gpu_agent.profile.store import TRACE_SUFFIX, file_name  # noqa: E402
from gpu_agent.timeline import write_perfetto  # noqa: E402
from support.big_timeline import big_timeline  # noqa: E402

WHEEL = """() => { const c = $("timeline-canvas"), r = c.getBoundingClientRect(), t = performance.now();
  c.dispatchEvent(new WheelEvent("wheel", {deltaY: -100, clientX: r.left + r.width * 0.6, clientY: r.top + 30,
    bubbles: true, cancelable: true}));
  return performance.now() - t; }"""


def counter(page, name: str) -> str:
    return page.evaluate(f"document.body.dataset.{name} || '0'")


def wait_bump(page, name: str, seen: str) -> None:
    page.wait_for_selector(f'body[data-{name}]:not([data-{name}="{seen}"])', state="attached", timeout=120_000)


def one_round(b, store: Path, older: str) -> dict:
    proc, base = start_ui(store)
    try:
        for _ in range(600):  # the warm-up parses the newest trace
            with urllib.request.urlopen(base + "/api/status") as r:
                if json.load(r)["ui"]["parsed_traces"]:
                    break
            time.sleep(0.05)
        page = b.new_page(viewport={"width": 1400, "height": 900})
        t0 = time.perf_counter()
        page.goto(base + "/#tab=timeline&from=0&to=" + str(2**41))
        wait_bump(page, "timelines", "0")
        warm = time.perf_counter() - t0
        seen = counter(page, "timelines")
        t0 = time.perf_counter()
        page.select_option("#trace-select", older)
        wait_bump(page, "timelines", seen)
        cold = time.perf_counter() - t0
        wheel = [page.evaluate(WHEEL) for _ in range(10)]
        page.click("#timeline-reset")
        seen = counter(page, "tlviews")
        for _ in range(4):
            page.evaluate(WHEEL)
        wait_bump(page, "tlviews", seen)
        view = int(page.evaluate("document.body.dataset.timelineViewMs"))
        out = {"warm": warm, "cold": cold, "wheel": statistics.median(wheel), "view": view, "rss": rss_mib(proc.pid)}
        page.close()
        return out
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", type=int, default=250_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    store = Path(tempfile.mkdtemp(prefix="gpu-agent-ui-timeline-"))
    tl = big_timeline(n=a.kernels)
    names = []
    for shift in (0, 60 * 10**9):  # two traces a minute apart: the page opens the newer
        path = store / file_name(tl.ended_ns + shift, TRACE_SUFFIX)
        write_perfetto(tl, path)
        names.append(path.name)
    print(f"store: 2 traces of {a.kernels:,} kernels, {path.stat().st_size / 2**20:.1f} MiB each")
    rounds = []
    with chromium() as b:
        if b is None:
            sys.exit("needs Playwright and Debian's chromium")
        for _ in range(a.rounds):
            rounds.append(one_round(b, store, names[0]))
            r = rounds[-1]
            print(
                f"  first draw warmed {r['warm']:.2f} s, cold (parse included) {r['cold']:.2f} s, "
                f"wheel {r['wheel']:.1f} ms, finer view {r['view']} ms, server {r['rss']:.0f} MiB RSS"
            )
    for key, unit in (("warm", "s"), ("cold", "s"), ("wheel", "ms"), ("view", "ms"), ("rss", "MiB")):
        values = [r[key] for r in rounds]
        print(f"{key}: median {statistics.median(values):.2f} {unit} ({min(values):.2f}-{max(values):.2f})")


if __name__ == "__main__":
    main()
