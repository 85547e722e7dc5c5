"""`gpu-agent ui` over stores of known profiles, written here with the agent's own
ProfileBuilder (no eBPF, no GPU), in Debian's headless Chromium: what the page says
of Python file:line, the Diff tab's defaults and ranking, `[dropped: …]` estimates
kept apart from GPU time, an empty store, and the range chart's axes (issue 45).
Every figure is known exactly from the profiles written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_agent.profile.pprof import FrameSpec, ProfileBuilder
from gpu_agent.profile.store import PROFILE_SUFFIX, file_name
from support.ui import Ui, open_range, rerendered, root_total

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
