"""The UI's Timeline tab over a trace that `gpu-agent record --trace … --store DIR` put
into the store, in Debian's headless Chromium: every kernel of the trace drawn on its
(process, GPU, stream) row, and the flame graph's "On the timeline" marking every
launch of a kernel. Checked against the trace as Perfetto's protos read it."""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections import Counter

import pytest

from gpu_agent.profile.store import TRACE_GLOB
from support.env import MOCK_APP, REPO, agent_cmd, mock_env, need_ebpf
from support.nanotrace_files import v1_file
from support.perfetto_read import read_perfetto
from support.ui import Ui, counter, http_get, launch_browser, wait_counter

CU = "k_cuLaunchKernel(float*, int)"
SCREENSHOTS = REPO / "build" / "test-ui"  # docs/img/ui-timeline.png is a copy

# coloured pixels of a canvas region (not white, grey or black text)
_PIXELS = """([b64, x, y, w, h]) => new Promise((done) => {
  const img = new Image();
  img.onload = () => {
    const c = document.createElement("canvas");
    c.width = img.width; c.height = img.height;
    const g = c.getContext("2d");
    g.drawImage(img, 0, 0);
    const d = g.getImageData(x, y, w, h).data;
    let green = 0, magenta = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 1] > d[i] + 40 && d[i + 1] > d[i + 2] + 20) green++;
      if (d[i] > 200 && d[i + 2] > 200 && d[i + 1] < 60) magenta++;
    }
    done({green, magenta});
  };
  img.src = "data:image/png;base64," + b64;
})"""


@pytest.fixture(scope="module")
def store(tmp_path_factory, built):
    need_ebpf()
    tmp = tmp_path_factory.mktemp("uitl")
    out = tmp / "store"
    out.mkdir()
    (tmp / "k.nanotrace").write_bytes(v1_file(kernel="k_cuLaunchKernel", grid=(0, 0, 0)))  # any grid
    p = subprocess.run(
        agent_cmd(
            "record",
            "--trace",
            tmp / "t.perfetto-trace",
            "--store",
            out,
            "-o",
            tmp / "p.pb.gz",
            "--nanotrace",
            f"{tmp / 'k.nanotrace'}@3",
            "--",
            MOCK_APP,
            "--paths",
            "cuLaunchKernel,cudaLaunchKernel,cudaGraphLaunch",
            "--iters",
            "200",
            "--sleep-ms",
            "1",
        ),
        env=mock_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    stored = sorted(out.glob(TRACE_GLOB))
    assert len(stored) == 1 and "the store's Timeline tab" in p.stderr, p.stderr
    # the profile of the same run, under the store's name for a window ending then
    shutil.copy(tmp / "p.pb.gz", out / stored[0].name.replace(".perfetto-trace", ".pb.gz"))
    # the kernels' slices (a merged .nanotrace's are on tracks described as such)
    _, tracks, every, _, _ = read_perfetto(stored[0])
    slices = [s for s in every if not tracks[s["track"]].description.startswith("in-kernel")]
    assert len(every) - len(slices) == 8
    assert stored[0].read_bytes() == (tmp / "t.perfetto-trace").read_bytes()
    yield out, stored[0].name, slices


@pytest.fixture(scope="module")
def ui(store):
    u = Ui(store[0])
    yield u
    u.stop()


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_browser(p)
        pg = browser.new_page(viewport={"width": 1400, "height": 900}, reduced_motion="reduce")
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        yield pg
        browser.close()
        assert not errors, errors


def test_the_timeline_tab_draws_every_kernel_of_the_stored_trace(store, ui, page):
    out, name, slices = store
    page.goto(ui.url + "#tab=timeline&from=0&to=" + str(2**41))
    wait_counter(page, "timelines", 0)
    info = page.locator("#timeline-info")
    assert page.input_value("#trace-select") == name
    assert int(info.get_attribute("data-kernels")) == len(slices) > 600  # 3 paths x 200, and the graph's nodes
    assert int(info.get_attribute("data-drawn")) == len(slices)
    assert int(info.get_attribute("data-rows")) >= 1
    png = page.screenshot()
    box = page.locator("#timeline-canvas").bounding_box()
    pix = page.evaluate(
        _PIXELS,
        [
            base64.b64encode(png).decode(),
            int(box["x"]) + 370,
            int(box["y"]) + 24,
            int(box["width"]) - 380,
            int(box["height"]) - 26,
        ],
    )
    assert pix["green"] > 500 and pix["magenta"] == 0, pix
    # the wheel zooms in: fewer kernels in view
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 30)
    for _ in range(8):
        page.mouse.wheel(0, -100)
    page.wait_for_timeout(200)
    assert 0 < int(info.get_attribute("data-drawn")) < len(slices)


def test_a_merged_nanotrace_shows_its_ctas_and_warps_under_the_stream(store, ui, page):
    """The 3rd cuLaunchKernel launch's in-kernel events: 2 CTAs of 2 warps, 8 events,
    on rows under its stream, folded and unfolded by a click on the stream's name,
    each event named by the tooltip once the view is zoomed onto that kernel."""
    page.goto(ui.url + "#tab=timeline&from=0&to=" + str(2**41))
    wait_counter(page, "timelines", 0)
    info = page.locator("#timeline-info")
    assert int(info.get_attribute("data-inkernel")) == 8 and "8 in-kernel events" in info.text_content()
    d = page.evaluate("TL.data")
    deep = [i for i, depth in enumerate(d["depth"]) if depth]
    assert [d["depth"][i] for i in deep] == [1, 2, 2, 1, 2, 2], d["rows"]
    stream = d["parent"][deep[0]]
    assert deep[0] == stream + 1 and "#" in d["rows"][deep[0]] and d["rows"][deep[0]].endswith("CTA 0")
    rows = int(info.get_attribute("data-rows"))
    assert rows == len(d["rows"])
    # zoomed onto the events (the wheel would take many turns from 0.6 s down to 200 ns)
    lo = min(s for _, s, _, _ in d["inkernel"])
    hi = max(s + du for _, s, du, _ in d["inkernel"])
    page.evaluate(f"TL.x0 = {lo - 20}; TL.x1 = {hi + 20}; drawTimeline()")
    assert int(info.get_attribute("data-drawn-inkernel")) == 8
    box = page.locator("#timeline-canvas").bounding_box()
    row, start, dur, name = d["inkernel"][0]
    plot = box["width"] - 360
    px = box["x"] + 360 + (start + dur / 2 - (lo - 20)) / (hi - lo + 40) * plot
    py = box["y"] + 22 + page.evaluate(f"TL.pos[{row}]") * 18 + 9
    page.mouse.move(px, py)
    tip = page.locator("#timeline-tip").text_content()
    assert tip.startswith(d["names"][name] + ":") and tip.endswith(", in-kernel)"), tip
    # a click on the stream's name folds its in-kernel rows, a second unfolds them
    page.mouse.click(box["x"] + 20, box["y"] + 22 + page.evaluate(f"TL.pos[{stream}]") * 18 + 9)
    assert int(info.get_attribute("data-rows")) == rows - 6 and int(info.get_attribute("data-drawn-inkernel")) == 0
    page.mouse.click(box["x"] + 20, box["y"] + 22 + page.evaluate(f"TL.pos[{stream}]") * 18 + 9)
    assert int(info.get_attribute("data-rows")) == rows
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "timeline-inkernel.png"))


def test_a_kernel_of_the_flame_graph_is_marked_on_the_timeline(store, ui, page):
    out, name, slices = store
    page.goto(ui.url)  # the store is young: the page opens on all of it
    wait_counter(page, "renders", 0)
    page.click(f'#flame g[name="{CU}"]')
    page.wait_for_selector("#timeline-frame:not([hidden])")
    seen = counter(page, "timelines")
    page.click("#timeline-frame")
    wait_counter(page, "timelines", seen)
    want = Counter(s["name"] for s in slices)[CU]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    info = page.locator("#timeline-info")
    assert int(info.get_attribute("data-highlighted")) == want == 200, info.text_content()
    assert int(info.get_attribute("data-lit")) == want
    png = page.screenshot(path=str(SCREENSHOTS / "timeline.png"))
    box = page.locator("#timeline-canvas").bounding_box()
    pix = page.evaluate(
        _PIXELS,
        [
            base64.b64encode(png).decode(),
            int(box["x"]) + 370,
            int(box["y"]) + 24,
            int(box["width"]) - 380,
            int(box["height"]) - 26,
        ],
    )
    assert pix["magenta"] > 100, pix
    # a function frame offers no timeline (only kernels run on the GPU)
    page.click("nav .tab[data-tab=flame]")
    page.click('#flame g[name="launch_cuLaunchKernel"]')
    assert page.is_hidden("#timeline-frame")


def test_a_bad_trace_name_or_file_is_one_clear_error(store, ui):
    out, name, _ = store
    status, _, body = http_get(ui.port, "/api/timeline?file=../../etc/passwd")
    assert status == 404, body
    status, _, body = http_get(ui.port, "/api/timeline?file=gpu-20260101T000000-000000000.perfetto-trace")
    assert status == 404 and b"no trace" in body, body
    bad = out / "gpu-20260101T000000-000000001.perfetto-trace"
    bad.write_bytes(b"\x0a\xff\xff\xff\x7f" + b"x" * 100)  # a packet longer than the file
    try:
        import time

        time.sleep(1.1)  # the listing is reused for a second
        status, _, body = http_get(ui.port, f"/api/timeline?file={bad.name}")
        assert status == 400 and b"not a Perfetto trace" in body, body
        assert http_get(ui.port, f"/api/timeline?file={name}")[0] == 200  # still serving
    finally:
        bad.unlink()


def test_the_reader_gives_each_kernel_its_row_and_counts_what_it_cuts(tmp_path):
    """ui/timeline.py over the Perfetto writer's output: rows by (process, GPU, stream)
    in natural order, exact starts and durations, and a cut said as such."""
    from gpu_agent.timeline import write_perfetto
    from gpu_agent.probes.devices import GpuDevice
    from gpu_agent.timeline.model import KernelEvent, Timeline
    from gpu_agent.outputs.ui.timeline import read_kernels

    t0 = 1_760_000_000_000_000_000
    kernels = [
        KernelEvent(
            42, t0 + 1000 * i, t0 + 1000 * i + 500 + i, f"k{i % 3}", f"_Z2k{i % 3}v", 0, 7 if i % 2 else 13, 1, i + 1
        )
        for i in range(10)
    ]
    tl = Timeline(
        host="h",
        started_ns=t0,
        ended_ns=t0 + 10**6,
        processes={42: "python"},
        devices={(42, 0): GpuDevice(0, "GPU-x", "H100")},
        kernels=kernels,
    )
    write_perfetto(tl, tmp_path / "t.perfetto-trace")
    data = (tmp_path / "t.perfetto-trace").read_bytes()
    r = read_kernels(data)
    assert r["rows"] == ["python (42) · GPU 0 · stream 7", "python (42) · GPU 0 · stream 13"]
    assert r["total"] == 10 and not r["truncated"] and r["start_ns"] == t0
    got = sorted((r["rows"][row], start, dur, r["names"][n]) for row, start, dur, n in r["kernels"])
    want = sorted(
        (f"python (42) · GPU 0 · stream {7 if i % 2 else 13}", 1000 * i, 500 + i, f"k{i % 3}") for i in range(10)
    )
    assert got == want
    cut = read_kernels(data, max_kernels=4)
    assert cut["total"] == 10 and len(cut["kernels"]) == 4 and cut["truncated"]


def test_the_reader_puts_in_kernel_tracks_below_their_stream(tmp_path):
    """A timeline with two merged .nanotrace files: their events are not kernels, and
    their CTA and warp rows follow their stream's, one level deeper each."""
    from gpu_agent.timeline import write_perfetto
    from gpu_agent.timeline.inkernel import Spec, place_all
    from gpu_agent.probes.devices import GpuDevice
    from gpu_agent.timeline.model import KernelEvent, Timeline
    from gpu_agent.outputs.ui.timeline import read_kernels

    t0 = 1_760_000_000_000_000_000
    kernels = [
        KernelEvent(
            42, t0 + 10_000 * i, t0 + 10_000 * i + 5_000, "gemm(float*)", "_Z4gemmPf", 0, 7 if i % 2 else 13, 1, i + 1
        )
        for i in range(4)
    ]
    tl = Timeline(
        host="h",
        started_ns=t0,
        ended_ns=t0 + 10**6,
        processes={42: "python"},
        devices={(42, 0): GpuDevice(0, "GPU-x", "H100")},
        kernels=kernels,
    )
    for n in (1, 2):
        (tmp_path / f"{n}.nanotrace").write_bytes(v1_file(kernel="gemm"))
    place_all(tl, [Spec(str(tmp_path / "1.nanotrace"), 1), Spec(str(tmp_path / "2.nanotrace"), 2)])
    write_perfetto(tl, tmp_path / "t.perfetto-trace")
    r = read_kernels((tmp_path / "t.perfetto-trace").read_bytes())
    assert r["total"] == 4 and len(r["kernels"]) == 4 and len(r["inkernel"]) == r["inkernel_total"] == 16
    assert [(n.split(" · ")[-1] if not dp else n.split(": ")[-1], dp) for n, dp in zip(r["rows"], r["depth"])] == [
        ("stream 7", 0),
        ("CTA 0", 1),
        ("Warp 0", 2),
        ("Warp 32", 2),
        ("CTA 1", 1),
        ("Warp 0", 2),
        ("Warp 32", 2),
        ("stream 13", 0),
        ("CTA 0", 1),
        ("Warp 0", 2),
        ("Warp 32", 2),
        ("CTA 1", 1),
        ("Warp 0", 2),
        ("Warp 32", 2),
    ]
    assert r["parent"][:4] == [-1, 0, 1, 1]
    for row, start, dur, _ in r["inkernel"]:
        stream = row
        while r["parent"][stream] >= 0:
            stream = r["parent"][stream]
        assert any(k[0] == stream and k[1] <= start and start + dur <= k[1] + k[2] for k in r["kernels"])


def test_the_reader_counts_packets_not_their_lengths(monkeypatch):
    """MAX_PACKETS bounds the packets parsed (the count was overwritten by each
    packet's length, so only a packet over 2.5 MB ever reached the bound)."""
    from gpu_agent.outputs.ui import timeline

    monkeypatch.setattr(timeline, "MAX_PACKETS", 10)
    assert timeline.read_kernels(b"\x0a\x00" * 10)["total"] == 0
    with pytest.raises(timeline.TraceError, match="more than 10 packets"):
        timeline.read_kernels(b"\x0a\x00" * 11)
