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
from support.perfetto_read import read_perfetto
from support.ui import Ui, counter, http_get, launch_browser, wait_counter

CU = "k_cuLaunchKernel(float*, int)"
SCREENSHOTS = REPO / "build" / "test-ui"   # docs/img/ui-timeline.png is a copy

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
    p = subprocess.run(agent_cmd("record", "--trace", tmp / "t.perfetto-trace", "--store", out, "-o", tmp / "p.pb.gz",
                                 "--", MOCK_APP, "--paths", "cuLaunchKernel,cudaLaunchKernel,cudaGraphLaunch",
                                 "--iters", "200", "--sleep-ms", "1"),
                       env=mock_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    stored = sorted(out.glob(TRACE_GLOB))
    assert len(stored) == 1 and "the store's Timeline tab" in p.stderr, p.stderr
    # the profile of the same run, under the store's name for a window ending then
    shutil.copy(tmp / "p.pb.gz", out / stored[0].name.replace(".perfetto-trace", ".pb.gz"))
    slices = [s for s in read_perfetto(stored[0])[2]]
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
        pg = browser.new_page(viewport={"width": 1400, "height": 900})
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
    assert int(info.get_attribute("data-kernels")) == len(slices) > 600    # 3 paths x 200, and the graph's nodes
    assert int(info.get_attribute("data-drawn")) == len(slices)
    assert int(info.get_attribute("data-rows")) >= 1
    png = page.screenshot()
    box = page.locator("#timeline-canvas").bounding_box()
    pix = page.evaluate(_PIXELS, [base64.b64encode(png).decode(), int(box["x"]) + 370, int(box["y"]) + 24,
                                  int(box["width"]) - 380, int(box["height"]) - 26])
    assert pix["green"] > 500 and pix["magenta"] == 0, pix
    # the wheel zooms in: fewer kernels in view
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + 30)
    for _ in range(8):
        page.mouse.wheel(0, -100)
    page.wait_for_timeout(200)
    assert 0 < int(info.get_attribute("data-drawn")) < len(slices)


def test_a_kernel_of_the_flame_graph_is_marked_on_the_timeline(store, ui, page):
    out, name, slices = store
    page.goto(ui.url)   # the store is young: the page opens on all of it
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
    pix = page.evaluate(_PIXELS, [base64.b64encode(png).decode(), int(box["x"]) + 370, int(box["y"]) + 24,
                                  int(box["width"]) - 380, int(box["height"]) - 26])
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
    bad.write_bytes(b"\x0a\xff\xff\xff\x7f" + b"x" * 100)    # a packet longer than the file
    try:
        import time
        time.sleep(1.1)   # the listing is reused for a second
        status, _, body = http_get(ui.port, f"/api/timeline?file={bad.name}")
        assert status == 400 and b"not a Perfetto trace" in body, body
        assert http_get(ui.port, f"/api/timeline?file={name}")[0] == 200   # still serving
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
    kernels = [KernelEvent(42, t0 + 1000 * i, t0 + 1000 * i + 500 + i, f"k{i % 3}", f"_Z2k{i % 3}v", 0,
                           7 if i % 2 else 13, 1, i + 1) for i in range(10)]
    tl = Timeline(host="h", started_ns=t0, ended_ns=t0 + 10**6, processes={42: "python"},
                  devices={(42, 0): GpuDevice(0, "GPU-x", "H100")}, kernels=kernels)
    write_perfetto(tl, tmp_path / "t.perfetto-trace")
    data = (tmp_path / "t.perfetto-trace").read_bytes()
    r = read_kernels(data)
    assert r["rows"] == ["python (42) · GPU 0 · stream 7", "python (42) · GPU 0 · stream 13"]
    assert r["total"] == 10 and not r["truncated"] and r["start_ns"] == t0
    got = sorted((r["rows"][row], start, dur, r["names"][n]) for row, start, dur, n in r["kernels"])
    want = sorted((f"python (42) · GPU 0 · stream {7 if i % 2 else 13}", 1000 * i, 500 + i, f"k{i % 3}")
                  for i in range(10))
    assert got == want
    cut = read_kernels(data, max_kernels=4)
    assert cut["total"] == 10 and len(cut["kernels"]) == 4 and cut["truncated"]
