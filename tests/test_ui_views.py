"""`gpu-agent ui` over stores of known profiles, written here with the agent's own
ProfileBuilder (no eBPF, no GPU), in Debian's headless Chromium: what the page says
of Python file:line, the Diff tab's defaults and ranking, `[dropped: …]` estimates
kept apart from GPU time, an empty store, and the range chart's axes (issue 45).
Every figure is known exactly from the profiles written."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from gpu_agent.profile.pprof import FrameSpec, ProfileBuilder
from gpu_agent.profile.store import PROFILE_SUFFIX, file_name
from support.env import agent_cmd
from support.ui import Ui, counter, http_get, open_range, rerendered, root_total, wait_counter

TRAIN = "/srv/job/mytrain.py"
WINDOW_S = 10


def py(fn: str, line: int) -> FrameSpec:
    return FrameSpec.python(fn, TRAIN, line)


def write_window(store: Path, end_s: int, samples: list[tuple[list[FrameSpec], int]], pid: str = "100") -> None:
    """One store file, the window (end_s - WINDOW_S, end_s]: samples of (frames leaf
    first, GPU ns), one launch each."""
    b = ProfileBuilder(period_ns=1, duration_ns=WINDOW_S * 10**9, time_nanos=(end_s - WINDOW_S) * 10**9)
    for frames, ns in samples:
        b.add(frames, ns, 1, {"pid": pid, "comm": "python3"})
    (store / file_name(end_s * 10**9, PROFILE_SUFFIX)).write_bytes(b.to_bytes())


def title(page, selector: str) -> str:
    return page.text_content(selector + " title") or ""


# -- item 3: Python file:line -----------------------------------------------------------
# backward runs from two lines of mytrain.py: line 40 launches sgemm_fwd (300 ns),
# line 57 launches relu (100 ns); both under main at line 10.
def python_samples():
    return [
        ([FrameSpec.kernel("sgemm_fwd"), py("backward", 40), py("main", 10)], 300),
        ([FrameSpec.kernel("relu"), py("backward", 57), py("main", 10)], 100),
    ]


@pytest.fixture
def python_store(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    now = int(time.time())
    write_window(store, now - 5, python_samples())
    ui = Ui(store)
    yield ui, now
    ui.stop()


def test_python_frames_say_their_file_and_line_and_split_by_line(python_store, page):
    """Merged by function (the default), backward's hover and top row say its
    heaviest line, mytrain.py:40, and that it stands for one more line; "split by
    line" draws backward mytrain.py:40 and backward mytrain.py:57 apart, each with its
    own GPU time, in the flame graph and the top table."""
    ui, now = python_store
    open_range(page, ui, (now - 60) * 1000, now * 1000)
    assert root_total(page) == 400
    hover = title(page, '#flame g[name="backward"]')
    assert hover.startswith(f"backward ({TRAIN}:40 and 1 more line): 400 ns"), hover
    assert title(page, '#flame g[name="main"]').startswith(f"main ({TRAIN}:10): 400 ns")
    assert title(page, '#flame g[name="sgemm_fwd"]').startswith("sgemm_fwd: 300 ns")  # a kernel has no source
    page.click("nav .tab[data-tab=top]")
    row = page.locator('#top-table tr[data-name="backward"]')
    assert row.locator("td.source").text_content() == f"{TRAIN}:40 and 1 more line"
    page.click("nav .tab[data-tab=flame]")
    rerendered(page, lambda: page.check("#by-line"))
    assert "lines=1" in page.evaluate("location.hash")
    assert page.locator('#flame g[name="backward"]').count() == 0
    for line, ns in ((40, 300), (57, 100)):
        hover = title(page, f'#flame g[name="backward mytrain.py:{line}"]')
        assert hover.startswith(f"backward mytrain.py:{line} ({TRAIN}:{line}): {ns} ns"), hover
    assert root_total(page) == 400
    page.click("nav .tab[data-tab=top]")
    for line, ns in ((40, 300), (57, 100)):
        row = page.locator(f'#top-table tr[data-name="backward mytrain.py:{line}"]')
        assert int(row.get_attribute("data-total")) == ns
        assert row.locator("td.source").text_content() == f"{TRAIN}:{line}"
    # A frame split by line still focuses on its function (pprof -focus takes names).
    page.click("nav .tab[data-tab=flame]")
    page.click('#flame g[name="backward mytrain.py:57"]')
    assert page.text_content("#sel-name") == "backward mytrain.py:57"
    assert f"{TRAIN}:57" in page.text_content("#sel-value")
    rerendered(page, lambda: page.click("#focus-frame"))
    assert "focus: backward" in page.text_content("#chips") and root_total(page) == 400


# -- item 4: the Diff tab ---------------------------------------------------------------
# Six windows 10 s apart. The first three: sgemm_fwd 500 ns and relu 100 ns a window,
# launched from backward under a chain of callers; the last three: sgemm_fwd 200 ns,
# relu 100 ns and a new kernel, attn_fwd, 700 ns, from the same code. Every caller's
# total grew by 400 ns a window: the same change, six times over.
CHAIN = [py("backward", 40), py("train_step", 80), py("main", 10)] + [
    FrameSpec(fn, "", "/usr/lib/libpython3.12.so", 0, 0x1000 + i) for i, fn in enumerate(("_PyEval", "Py_RunMain"))
]
CALLERS = ["backward", "train_step", "main", "_PyEval", "Py_RunMain"]


@pytest.fixture
def diff_store(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    first = int(time.time()) - 120
    ends = [first + 10 * i for i in range(6)]
    for end in ends[:3]:
        write_window(
            store, end, [([FrameSpec.kernel("sgemm_fwd")] + CHAIN, 500), ([FrameSpec.kernel("relu")] + CHAIN, 100)]
        )
    for end in ends[3:]:
        write_window(
            store,
            end,
            [
                ([FrameSpec.kernel("sgemm_fwd")] + CHAIN, 200),
                ([FrameSpec.kernel("relu")] + CHAIN, 100),
                ([FrameSpec.kernel("attn_fwd")] + CHAIN, 700),
            ],
        )
    ui = Ui(store)
    yield ui, ends
    ui.stop()


def diff_fields(page) -> list[int]:
    return [page.evaluate(f"parseTime($('{f}').value)") for f in ("a-from", "a-to", "b-from", "b-to")]


def test_diff_defaults_ranking_and_controls_that_apply_at_once(diff_store, page):
    """The Diff tab compares the chosen range (after) with the span as long just before
    it; on "all", where nothing precedes the range, its two halves (not an empty
    before that makes every frame new). Largest changes ranks by self: the new kernel,
    then the one that shrank; the five callers whose total changed exactly as
    backward's did are one row. Normalize applies when ticked, without Compare."""
    ui, ends = diff_store
    # The last three windows chosen: before is the 30 s before them, with the first three.
    open_range(page, ui, (ends[3] - 5) * 1000, (ends[5] + 1) * 1000)
    seen = counter(page, "diffs")
    page.click("nav .tab[data-tab=diff]")
    wait_counter(page, "diffs", seen)
    assert diff_fields(page) == [(ends[0] - 1) * 1000, (ends[3] - 5) * 1000, (ends[3] - 5) * 1000, (ends[5] + 1) * 1000]
    assert "before 1,500 ns, after 600 ns" in title(page, '#diff-flame g[name="sgemm_fwd"]')
    # "all": the defaults follow the chosen range, here its two halves.
    seen = counter(page, "diffs")
    page.click('#presets button[data-span="all"]')
    wait_counter(page, "diffs", seen)
    a_from, a_to, b_from, b_to = diff_fields(page)
    assert a_to == b_from and a_from < ends[0] * 1000 and ends[2] * 1000 < a_to < ends[3] * 1000 < ends[5] * 1000 < b_to
    assert "before 1,500 ns, after 600 ns" in title(page, '#diff-flame g[name="sgemm_fwd"]')
    rows = page.locator("#changes-table tbody tr")
    names = [rows.nth(i).get_attribute("data-name") for i in range(rows.count())]
    assert names == ["attn_fwd", "sgemm_fwd", "backward"], names
    assert [int(rows.nth(i).get_attribute("data-self-delta")) for i in range(3)] == [2100, -900, 0]
    folded = page.locator('#changes-table tr[data-name="backward"]')
    assert int(folded.get_attribute("data-delta")) == 1200 and int(folded.get_attribute("data-folded")) == 4
    assert "and 4 callers with the same change" in folded.text_content()
    # Normalize: the earlier range scaled to the later one's total, at once.
    seen = counter(page, "diffs")
    page.check("#normalize")
    wait_counter(page, "diffs", seen, timeout=10_000)
    assert page.text_content("#diff-info").endswith("(normalized)")
    assert "before 3,000 ns, after 3,000 ns" in title(page, '#diff-flame g[name="all"]')


# -- item 5: [dropped: …] apart ---------------------------------------------------------
CLAIM = 2_264_920_000_000  # 2264.92 s in one 10 s window: a process that claimed 2^31 drops


@pytest.fixture
def dropped_store(tmp_path):
    """Three windows of 1 s of sgemm_fwd each; the second also holds another process's
    [dropped: cupti] sample claiming 2264.92 s."""
    store = tmp_path / "store"
    store.mkdir()
    first = int(time.time()) - 60
    ends = [first + 10 * i for i in range(3)]
    for end in ends:
        write_window(store, end, [([FrameSpec.kernel("sgemm_fwd"), py("backward", 40)], 10**9)])
    # the second window again, with the claim (another pid, a marker frame as the agent writes it)
    b = ProfileBuilder(period_ns=1, duration_ns=WINDOW_S * 10**9, time_nanos=(ends[1] - WINDOW_S) * 10**9)
    b.add([FrameSpec.kernel("sgemm_fwd"), py("backward", 40)], 10**9, 1, {"pid": "100"})
    b.add([FrameSpec.marker("[dropped: cupti]")], CLAIM, 2**31, {"pid": "200"})
    (store / file_name(ends[1] * 10**9, PROFILE_SUFFIX)).write_bytes(b.to_bytes())
    ui = Ui(store)
    yield ui, ends
    ui.stop()


def test_dropped_claims_are_drawn_apart_from_gpu_time(dropped_store, page):
    """The chart's scale is the measured GPU time: the three 1 s bars are as tall as the
    chart allows, and the 2264.92 s claim is a marked series on top, off the scale.
    The flame graph's total and percentages are the measured 3 s; the claim is a
    graph of its own below it."""
    ui, ends = dropped_store
    open_range(page, ui, (ends[0] - 5) * 1000, (ends[2] + 1) * 1000)
    bars = page.locator("#chart rect.bar")
    heights = [float(bars.nth(i).get_attribute("height")) for i in range(bars.count())]
    assert len(heights) == 3 and min(heights) == max(heights) > 20, heights
    claim = page.locator("#chart rect.dropped")
    assert claim.count() == 1 and int(claim.get_attribute("data-value")) == CLAIM
    assert "off-scale" in claim.get_attribute("class")
    assert "[dropped: …] claims 2264.920 s" in claim.locator("title").text_content()
    assert root_total(page) == 3 * 10**9
    assert page.locator('#flame g[name="[dropped: cupti]"]').count() == 0
    assert title(page, '#flame g[name="sgemm_fwd"]').startswith("sgemm_fwd: 3,000,000,000 ns (100.00 %)")
    assert page.is_visible("#dropped")
    hover = title(page, '#dropped-flame g[name="[dropped: cupti]"]')
    assert hover.startswith(f"[dropped: cupti]: {CLAIM:,} ns estimated"), hover
    assert int(page.get_attribute("#total", "data-dropped")) == CLAIM
    page.click("nav .tab[data-tab=top]")
    assert page.locator('#top-table tr[data-name="[dropped: cupti]"]').count() == 0
    assert float(page.locator('#top-table tr[data-name="sgemm_fwd"] td').nth(4).text_content().split()[0]) == 100.0


def test_the_filter_menus_count_measured_values_not_dropped_claims(dropped_store):
    """Issue 45 item 7: the pid and comm menus' totals counted what [dropped: …] rows
    claim: pid 200, which made no kernel, read 2264.92 s. The menus count measured GPU
    time now: pid 100 its 3 s, pid 200 nothing."""
    import json

    ui, ends = dropped_store
    status, _, body = http_get(ui.port, f"/api/range?from={(ends[0] - 5) * 1000}&to={(ends[2] + 1) * 1000}")
    assert status == 200, body
    data = json.loads(body)
    pids = {v["value"]: v["total"] for v in data["labels"]["pid"]}
    assert pids == {"100": 3 * 10**9, "200": 0}, pids
    assert data["dropped"] == CLAIM and data["total"] == 3 * 10**9


# -- item 7: an empty store, the chart's axes --------------------------------------------
def test_an_empty_store_says_so_and_how_to_fill_it(tmp_path, page):
    store = tmp_path / "empty"
    store.mkdir()
    ui = Ui(store)
    try:
        page.goto(ui.url)
        wait_counter(page, "renders", 0)
        text = page.text_content("#flame .empty")
        assert f"The store {store} holds no profiles yet." in text, text
        assert f"`sudo gpu-agent run --output-dir {store}`" in text and f"--store {store} -- CMD`" in text
        assert page.text_content("#range-info") == "the store is empty"
        assert page.is_hidden("#error")
    finally:
        ui.stop()


def test_the_range_chart_has_a_value_axis_and_time_ticks(dropped_store, page):
    """Three bars of 1 s of GPU time each: the value axis runs to 1 s, with labelled
    ticks at 0.5 s and 1 s whose grid lines meet the bars' tops; the time axis has
    ticks at round UTC times, each where its time falls on the chart."""
    ui, ends = dropped_store
    open_range(page, ui, (ends[0] - 5) * 1000, (ends[2] + 1) * 1000)
    ticks = page.locator("#chart text.y-tick")
    labels = [ticks.nth(i).text_content() for i in range(ticks.count())]
    assert labels == ["0.5 s", "1 s"], labels
    top = float(ticks.nth(1).get_attribute("data-y"))
    bar = page.locator("#chart rect.bar").first
    assert float(bar.get_attribute("y")) == pytest.approx(top)
    times = page.locator("#chart text.x-tick")
    assert times.count() >= 3
    view_from, view_to = page.evaluate("[state.viewFrom, state.viewTo]")
    width = float(page.evaluate("$('chart').viewBox.baseVal.width"))
    for i in range(times.count()):
        tick = times.nth(i)
        ms = int(tick.get_attribute("data-ms"))
        assert view_from <= ms <= view_to and ms % 1000 == 0
        assert float(tick.get_attribute("x")) == pytest.approx((ms - view_from) / (view_to - view_from) * width)
        assert re.fullmatch(r"(:\d\d|\d\d:\d\d|\w+ \d+)", tick.text_content()), tick.text_content()


# -- Ctrl-C is the UI's: its decoding processes ignore it from their first instruction --
def _workers(pid: int) -> list[int]:
    """The UI's decoding processes (multiprocessing's spawn children) now running."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = task.read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                if b"spawn_main" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    out.append(int(kid))
            except OSError:
                pass
    return out


def _ignored(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return int(re.search(r"^SigIgn:\s*([0-9a-f]+)", status, re.M)[1], 16)


def test_the_decoding_processes_ignore_ctrl_c_from_their_start(tmp_path):
    """A Ctrl-C at the terminal reaches the UI's whole process group. Its decoding
    processes ignored SIGINT only once their own code ran, so one still starting its
    interpreter printed "Fatal Python error: init_import_site" and a traceback (the
    README's pasted block, once in this session's three suite runs). Each now ignores
    it as it is first seen, polled from the UI's start (before: none of them did)."""
    store = tmp_path / "store"
    store.mkdir()
    proc = subprocess.Popen(
        agent_cmd("ui", "--profiles", store, "--listen", "127.0.0.1:0"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        first: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while len(first) < 2 and time.monotonic() < deadline and proc.poll() is None:
            for kid in _workers(proc.pid):
                if kid not in first and (mask := _ignored(kid)) is not None:
                    first[kid] = mask
        assert len(first) == 2, first
        sigint = 1 << (signal.SIGINT - 1)
        assert all(mask & sigint for mask in first.values()), {k: hex(m) for k, m in first.items()}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
