"""`gpu-agent ui` with PC samples: a profile `record` wrote with the mock's PC
sampling (tests/test_pcsampling.py), served from a store, in Debian's headless
Chromium; every figure checked against Go's pprof."""

from __future__ import annotations

import shutil
import time

from gpu_agent.profile.store import PROFILE_SUFFIX, file_name
from support.pprof_tool import raw
from support.ui import Ui, root_total
from support.pcsampling import PERIOD, record
from support.ui import open_range, rerendered


def test_pc_samples_are_a_value_of_the_flame_graph_top_table_and_download(tmp_path, page, built):
    out, _, _ = record(tmp_path, GPU_AGENT_PC_SAMPLING="1", GPU_AGENT_PC_SAMPLING_PERIOD=str(PERIOD))
    rows = raw(out)
    pcs = sum(s.values[2] for s in rows)
    stalls, hot = {}, {}  # per stall reason: all rows; the hot_loop kernel's rows
    for s in rows:
        if s.values[2]:
            stalls[s.frames[0]] = stalls.get(s.frames[0], 0) + s.values[2]
            if "hot_loop(float*, int, int)" in s.frames:
                hot[s.frames[0]] = hot.get(s.frames[0], 0) + s.values[2]
    assert pcs > 0 and "[stall: mio_throttle]" in stalls
    store = tmp_path / "store"
    store.mkdir()
    now = time.time()
    shutil.copy(out, store / file_name(int(now) * 1_000_000_000, PROFILE_SUFFIX))
    ui = Ui(store)
    try:
        open_range(page, ui, int(now - 60) * 1000, int(now + 2) * 1000)
        rerendered(page, lambda: page.select_option("#type", "pc_samples"))
        assert root_total(page) == pcs
        # the stall reasons are the flame graph's leaves, one per instruction and stack
        title = page.text_content('#flame g[name="[stall: mio_throttle]"] title')
        assert title.startswith("[stall: mio_throttle]: ") and " samples (" in title, title
        # The kernel filter finds a PC sample's kernel under its stall and instruction frames.
        page.fill("#f-kernel", "^hot_loop")
        rerendered(page, lambda: page.press("#f-kernel", "Enter"))
        # (the warm-up kernel k_warm may have samples too: the filter leaves them out)
        assert root_total(page) == sum(hot.values())
        page.click("nav .tab[data-tab=top]")
        for stall, n in hot.items():
            row = page.locator(f'#top-table tr[data-name="{stall}"]')
            assert int(row.get_attribute("data-self")) == int(row.get_attribute("data-total")) == n
        # The range's pprof (as filtered) keeps the PC samples and their stall_reason labels.
        with page.expect_download() as d:
            page.click("#dl-pprof")
        merged = tmp_path / "range.pb.gz"
        d.value.save_as(merged)
        back = [s for s in raw(merged) if len(s.values) > 2 and s.values[2]]
        assert sum(s.values[2] for s in back) == sum(hot.values())
        assert {s.labels.get("stall_reason") for s in back} == {f[len("[stall: ") : -1] for f in hot}
    finally:
        ui.stop()
