"""How fast `gpu-agent ui` opens a range of a large store (docs/benchmarks.md).

Synthesizes a store the size the UI must handle, 24 h of 10 s windows from 50
processes (8 640 files), with the agent's own pprof code (ProfileBuilder: the same
frames, mappings and labels a real window has), then starts the real `gpu-agent ui`
on it and times what the page asks for when it opens a 1 h range: the interval
chart of the hour, and the merged range (flame graph, top table, filter menus).

Just started: a fresh server, nothing decoded yet (every file of the hour is read
while the user waits), over the API and as the page in Chromium, until it has drawn.
Warmed: once the server's warm-up has decoded the newest windows (what the UI does
at start): the hour over the API, the hour filtered by one pid, and the page opened
on that hour in Debian's Chromium until it has drawn.

Usage: .venv/bin/python bench/ui_store.py [--store DIR] [--hours 24] [--processes 50]
       [--stacks 30] [--rounds 3] [--foreign]
The store is kept in --store (default /tmp/gpu-agent-ui-bench-store) and reused when
its parameters match.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "agent"))

from gpu_agent.profile.pprof import FrameSpec, MappingSpec, Numbering, ProfileBuilder  # noqa: E402
from gpu_agent.profile.store import PROFILE_GLOB, PROFILE_SUFFIX, file_name  # noqa: E402
from gpu_agent.proto import profile_pb2  # noqa: E402

INTERVAL_S = 10
MODELS = ("llama", "resnet", "bert", "whisper", "sdxl")
KERNELS = (
    "ampere_sgemm_128x64_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::"
    "FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)",
    "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4> >",
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
    "void at::native::reduce_kernel<512, 1>",
    "softmax_warp_forward<float, float, float, 10, false>",
    "layer_norm_kernel<float>",
)


def process_stacks(rng: random.Random, proc: int, stacks: int) -> list[list[FrameSpec]]:
    """A process's distinct stacks, leaf first: kernel, torch's native frames, Python."""
    model = MODELS[proc % len(MODELS)]
    torch = MappingSpec("/usr/lib/python3/dist-packages/torch/lib/libtorch_cuda.so", build_id="ab" * 20)
    py = MappingSpec("[python]", has_filenames=True, has_line_numbers=True)
    out = []
    for s in range(stacks):
        kernel = FrameSpec.kernel(f"_Z{s}{model}k", KERNELS[s % len(KERNELS)] + ("" if s < len(KERNELS) else f"#{s}"))
        native = [
            FrameSpec(f"at::native::op_{s % 12}_{d}", "", torch.filename, 0, 0x1000 + 64 * d + s, torch)
            for d in range(rng.randint(6, 14))
        ]
        python = [
            FrameSpec(
                f"{model}.layer{(s + d) % 24}.forward",
                f"python:{model}.layer{(s + d) % 24}.forward",
                f"/srv/{model}/model.py",
                100 + d,
                0,
                py,
            )
            for d in range(rng.randint(4, 12))
        ]
        python.append(FrameSpec("<module>", "python:<module>", f"/srv/{model}/serve.py", 12, 0, py))
        out.append([kernel] + native + python)
    return out


def template(processes: int, stacks: int, numbered: bool) -> profile_pb2.Profile:
    """One window of every process, built the way the agent builds one (its frames
    numbered as the agent numbers them in all its windows: pprof.Numbering), or as
    another writer would (numbered=False: ids 1..N of each file's own)."""
    rng = random.Random(1)
    b = ProfileBuilder(
        period_ns=1, duration_ns=INTERVAL_S * 10**9, time_nanos=0, numbering=Numbering() if numbered else None
    )
    for p in range(processes):
        pid = 10_000 + p
        labels = {
            "pid": str(pid),
            "comm": f"python{p % 7}",
            "cuda_device": str(p % 8),
            "cuda_stream": "7",
            "pod": f"{MODELS[p % len(MODELS)]}-{p // len(MODELS)}",
            "namespace": "ml",
            "container": "trainer",
        }
        for frames in process_stacks(rng, p, stacks):
            b.add(frames, rng.randint(10**5, 10**8), rng.randint(1, 5000), labels)
    return b.to_proto()


def synthesize(store: Path, hours: float, processes: int, stacks: int, numbered: bool = True) -> int:
    """Write the store (skipped when one with these parameters is there); its file count."""
    params = {"hours": hours, "processes": processes, "stacks": stacks, "interval_s": INTERVAL_S, "numbered": numbered}
    stamp = store / "bench-params.json"
    n = int(hours * 3600 / INTERVAL_S)
    if stamp.exists() and json.loads(stamp.read_text()) == params and len(list(store.glob(PROFILE_GLOB))) == n:
        return n
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    proto = template(processes, stacks, numbered)
    base = [tuple(s.value) for s in proto.sample]  # the template's values, copied
    rng = random.Random(2)
    start_s = int(time.time()) - n * INTERVAL_S
    import gzip

    for i in range(n):
        end_s = start_s + (i + 1) * INTERVAL_S
        proto.time_nanos = (end_s - INTERVAL_S) * 10**9
        for s, orig in zip(proto.sample, base):  # every window's values differ
            s.value[0] = max(1, int(orig[0] * rng.uniform(0.5, 1.5)))
            s.value[1] = max(1, int(orig[1] * rng.uniform(0.5, 1.5)))
        name = file_name(end_s * 1_000_000_000 + rng.randrange(10**9), PROFILE_SUFFIX)
        (store / name).write_bytes(gzip.compress(proto.SerializeToString(), compresslevel=6, mtime=0))
    stamp.write_text(json.dumps(params))
    return n


def get(url: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        body = json.loads(r.read())
    return time.perf_counter() - t0, body


def start_ui(store: Path) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "gpu_agent", "ui", "--profiles", str(store), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "agent")},
    )
    for line in p.stderr:
        if "http://" in line:
            return p, line[line.index("http://") :].split()[0].rstrip("/")
    sys.exit("gpu-agent ui did not start")


def open_hour(base: str, last_ns: int, pid: str = "") -> tuple[float, dict]:
    """What the page asks for when it opens the last hour: the chart, then the range."""
    to_ms = last_ns // 10**6 + 1
    frm = to_ms - 3600 * 1000
    t_chart, chart = get(f"{base}/api/intervals?from={frm}&to={to_ms}")
    t_range, merged = get(f"{base}/api/range?from={frm}&to={to_ms}" + (f"&pid={pid}" if pid else ""))
    return t_chart + t_range, {
        "files": len(chart["intervals"]),
        "total": merged["total"],
        "chart_s": t_chart,
        "range_s": t_range,
    }


@contextlib.contextmanager
def chromium():
    """Debian's Chromium through Playwright, or None without them."""
    path = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        path = None
    if path is None:
        yield None
        return
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


def browser_open(base: str, last_ns: int, rounds: int = 3) -> list[float]:
    """Seconds from navigating to the page's first render of the last hour, in Debian's
    Chromium (Playwright): requests, JSON and the flame graph drawn. [] without them."""
    to_ms = last_ns // 10**6 + 1
    out = []
    with chromium() as b:
        if b is None:
            return []
        for _ in range(rounds):
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            t0 = time.perf_counter()
            page.goto(f"{base}/#from={to_ms - 3600 * 1000}&to={to_ms}")
            page.wait_for_selector("body[data-renders]", state="attached", timeout=120_000)
            out.append(time.perf_counter() - t0)
            page.close()
    return out


def browser_fresh(store: Path, rounds: int) -> list[float]:
    """Seconds from navigating to a just-started server's page (no range in the URL:
    the page opens the store's last hour) to its first render, in Debian's Chromium.
    The browser starts first, so the server's warm-up gets no head start. [] without
    Playwright or Chromium."""
    out = []
    with chromium() as b:
        if b is None:
            return []
        for _ in range(rounds):
            page = b.new_page(viewport={"width": 1400, "height": 1000})
            proc, base = start_ui(store)
            try:
                t0 = time.perf_counter()
                page.goto(base + "/")
                page.wait_for_selector("body[data-renders]", state="attached", timeout=120_000)
                out.append(time.perf_counter() - t0)
                files = page.inner_text("#total")
            finally:
                proc.terminate()
                proc.wait()
            print(f"  just started, in Chromium, drawn: {out[-1]:.2f} s ({files})")
            page.close()
    return out


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="default /tmp/gpu-agent-ui-bench-store[-foreign]")
    ap.add_argument("--hours", type=float, default=24)
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--stacks", type=int, default=30, help="distinct stacks per process")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--foreign", action="store_true", help="files as a writer other than the agent writes them (no pprof.Numbering)"
    )
    a = ap.parse_args()
    a.store = a.store or Path("/tmp/gpu-agent-ui-bench-store" + ("-foreign" if a.foreign else ""))
    t0 = time.perf_counter()
    n = synthesize(a.store, a.hours, a.processes, a.stacks, numbered=not a.foreign)
    size = sum(f.stat().st_size for f in a.store.glob(PROFILE_GLOB))
    print(
        f"store: {n} files, {size / 2**20:.0f} MiB, {a.processes} processes x {a.stacks} stacks "
        f"= {a.processes * a.stacks} samples per file ({time.perf_counter() - t0:.0f} s to prepare)"
    )
    fresh, warm, filtered, warmups, rss, browser = [], [], [], [], [], []
    for _ in range(a.rounds):
        proc, base = start_ui(a.store)
        try:
            _, status = get(f"{base}/api/status")
            last = status["store"]["last_ns"]
            # Just started: nothing decoded yet; the warmer yields to the request.
            t, info = open_hour(base, last)
            fresh.append(t)
            print(
                f"  just started: {t:.2f} s (chart {info['chart_s']:.2f} s, range {info['range_s']:.2f} s, "
                f"{info['files']} files)"
            )
            while status["ui"]["warm_seconds"] is None:
                time.sleep(1)
                _, status = get(f"{base}/api/status")
            warmups.append((status["ui"]["warm_seconds"], status["ui"]["cached_files"]))
            rss.append(rss_mib(proc.pid))
            t, _ = open_hour(base, last)
            warm.append(t)
            t, _ = open_hour(base, last, pid="10007")
            filtered.append(t)
            shown = browser_open(base, last)
            browser.extend(shown)
            print(
                f"  warmed ({warmups[-1][1]} files in {warmups[-1][0]:.0f} s, RSS {rss[-1]:.0f} MiB): "
                f"{warm[-1]:.2f} s, one pid {filtered[-1]:.2f} s; in Chromium, drawn: "
                + (", ".join(f"{t:.2f} s" for t in shown) or "no browser")
            )
        finally:
            proc.terminate()
            proc.wait()
    fresh_browser = browser_fresh(a.store, a.rounds)
    med = statistics.median
    print(
        f"open the last hour ({n * 3600 // int(a.hours * 3600) if a.hours else 0} files): "
        f"just started {med(fresh):.2f} s (drawn in Chromium "
        f"{med(fresh_browser) if fresh_browser else float('nan'):.2f} s), warmed {med(warm):.2f} s, "
        f"one pid {med(filtered):.2f} s, "
        f"drawn in Chromium {med(browser) if browser else float('nan'):.2f} s "
        f"(medians of {a.rounds}); warm-up {med(w[0] for w in warmups):.0f} s for "
        f"{med(w[1] for w in warmups):.0f} files, RSS {med(rss):.0f} MiB; {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
