"""`gpu-agent ui` in Debian's headless Chromium (Playwright), over a store written by
the real agent from the mock CUDA workload, checked against Go's pprof.

The store has two phases a few idle seconds apart (no window is written while
nothing runs, so each phase's files are known exactly):
  before: one process launching k_cuLaunchKernel, k_cudaLaunchKernel and a graph;
  after:  the same, plus a second process launching k_cuLaunchKernel as often, so
          that kernel doubled and the others did not.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from gpu_agent.profile.store import PROFILE_GLOB
from support.env import MOCK_APP, REPO, agent_cmd, mock_env, need_ebpf
from support.agent import Agent
from support.env import private_shim
from support.pprof_tool import pprof, raw
from support.ui import (
    Ui,
    counter,
    frame_fill,
    free_port,
    http_get,
    hue,
    open_range,
    rerendered,
    rgb,
    root_total,
    screenshot_colours,
    wait_counter,
)

CU = "k_cuLaunchKernel(float*, int)"
RT = "k_cudaLaunchKernel(float*, int)"
ITERS = "300"
SCREENSHOT = REPO / "build" / "test-ui" / "flame.png"  # kept for people to look at


def keep_view(page, name: str) -> None:
    """A screenshot of the page as a test left it, in build/test-ui/ (docs/img/ holds
    copies: docs/ui.md shows each view as the tests drew it on the mock store)."""
    page.wait_for_timeout(400)  # the flame graph library's transition
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT.parent / f"{name}.png"))


def workload(shim: Path, *paths: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(MOCK_APP), "--paths", ",".join(paths), "--iters", ITERS, "--sleep-ms", "1"],
        env=mock_env(CUDA_INJECTION64_PATH=str(shim)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*procs: subprocess.Popen) -> None:
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err


@pytest.fixture(scope="module")
def store(tmp_path_factory, built):
    """(directory, phases): phases[name] = (from_ms, to_ms, [files], {pid: role})."""
    need_ebpf()
    tmp = tmp_path_factory.mktemp("ui")
    out = tmp / "profiles"
    # A shim of its own, and no discovery: only this test's workloads are in the store,
    # whatever else runs on the host.
    shim = private_shim(tmp / "shim")
    ui_port = free_port()
    agent = Agent(out, "--shim", shim, "--discover-interval", "0", "--ui", f"127.0.0.1:{ui_port}")
    phases = {}
    try:
        t0 = int(time.time() * 1000)
        a = workload(shim, "cuLaunchKernel", "cudaLaunchKernel", "cudaGraphLaunch")
        finish(a)
        time.sleep(2.5)  # the last window with kernels closes; idle windows write nothing
        t1 = int(time.time() * 1000)
        before = sorted(out.glob(PROFILE_GLOB))
        phases["before"] = (t0, t1, before, {str(a.pid): "main"})
        b1 = workload(shim, "cuLaunchKernel", "cudaLaunchKernel", "cudaGraphLaunch")
        b2 = workload(shim, "cuLaunchKernel")
        finish(b1, b2)
        time.sleep(2.5)
        t2 = int(time.time() * 1000)
        after = sorted(set(out.glob(PROFILE_GLOB)) - set(before))
        phases["after"] = (t1, t2, after, {str(b1.pid): "main", str(b2.pid): "extra"})
        assert before and after, "the agent wrote no profile"
        # The agent's own UI (run --ui), kept for the status test.
        agent_status = http_get(ui_port, "/api/status")
    finally:
        agent.stop()
    yield out, phases, agent_status


@pytest.fixture(scope="module")
def ui(store):
    u = Ui(store[0])
    yield u
    u.stop()


def pprof_totals(files, pid: str | None = None, value: int = 0) -> dict:
    """Go pprof's reading of the files: the total of one sample value (0: GPU ns,
    1: launches), and that value per leaf (kernel)."""
    total, by_leaf = 0, defaultdict(int)
    for f in files:
        for s in raw(f):
            if pid is not None and s.labels.get("pid") != pid:
                continue
            total += s.values[value]
            by_leaf[s.frames[0]] += s.values[value]
    return {"total": total, "leaf": dict(by_leaf)}


def test_chosen_range_totals_what_go_pprof_reads(store, ui, page):
    out, phases, _ = store
    frm, to, files, _pids = phases["before"]
    open_range(page, ui, frm, to)
    assert root_total(page) == pprof_totals(files)["total"] > 0
    # The chart marks the chosen intervals: as many bars as the range has profiles.
    assert page.locator("#chart rect.bar.in").count() == len(files)
    # The kernels are the leaves, coloured apart from the CPU frames above them, and
    # the replayed graph's kernels sit under their marked frame.
    kernel = frame_fill(page, f'#flame g[name="{CU}"]')
    native = frame_fill(page, '#flame g[name="launch_cuLaunchKernel"]')
    graph = frame_fill(page, '#flame g[name="[cuda graph replay]"]')
    assert 110 <= hue(kernel) <= 145 and 20 <= hue(native) <= 40 and 260 <= hue(graph) <= 290
    assert page.locator('#flame g[name="[cuda graph replay]"]').count() >= 1
    # Icicle: the same tree upside down, the root at the top.
    page.check("input[value=icicle]")
    assert page.get_attribute('#flame g[name="all"]', "transform").replace(" ", "") == "translate(0,0)"
    assert root_total(page) == pprof_totals(files)["total"]


def drag_over_chart(page, frm: int, to: int) -> None:
    """Choose a range as a user does on the chart: press at `frm`, release at `to`."""
    box = page.locator("#chart").bounding_box()
    view_from, view_to = page.evaluate("[state.viewFrom, state.viewTo]")
    x = lambda ms: box["x"] + (ms - view_from) / (view_to - view_from) * box["width"]  # noqa: E731
    y = box["y"] + box["height"] / 2
    page.mouse.move(x(frm), y)
    page.mouse.down()
    page.mouse.move(x(to), y, steps=5)
    rerendered(page, page.mouse.up)


def test_a_click_on_a_bar_chooses_its_window(store, ui, page):
    """The page's hint: click a bar for its interval. Inside the selection too (the
    selection's rectangle let no click through), and the range it chooses holds
    the bar's profiles (its end was rounded down, out of the range)."""
    out, phases, _ = store
    page.goto(ui.url)
    wait_counter(page, "renders", 0)
    bars = page.locator("#chart rect.bar.in")  # inside the default selection
    assert bars.count() >= 2
    bar = bars.nth(bars.count() - 1)
    start, end = int(bar.get_attribute("data-start")), int(bar.get_attribute("data-end"))
    n = int(re.search(r"\((\d+) profiles?\)", bar.locator("title").text_content()).group(1))
    rerendered(page, lambda: bar.click(timeout=5000))
    assert page.evaluate("[state.from, state.to]") == [start, end]
    # the same files Go pprof reads for that range: the UI's total is theirs
    from gpu_agent.profile.store import Store

    chosen = Store(out).in_range(start * 10**6, end * 10**6)
    assert len(chosen) == n > 0
    assert root_total(page) == pprof_totals([out / f.name for f in chosen])["total"]


def test_search_highlights_matching_frames_and_sums_them(store, ui, page):
    out, phases, _ = store
    frm, to, files, _ = phases["after"]
    expected = pprof_totals(files)
    open_range(page, ui, frm, to)
    plain = frame_fill(page, f'#flame g[name="{CU}"]')
    page.fill("#search", CU[:12])  # a prefix, as a regular expression
    page.wait_for_selector("#search-info[data-value]")
    assert frame_fill(page, f'#flame g[name="{CU}"]') == "#e600e6"
    assert frame_fill(page, f'#flame g[name="{RT}"]') != "#e600e6"
    assert int(page.get_attribute("#search-info", "data-value")) == expected["leaf"][CU]
    assert page.text_content("#search-info").startswith("1 frame match")
    keep_view(page, "search")
    page.fill("#search", "")
    page.wait_for_selector("#search-info:not([data-value])", state="attached")
    assert frame_fill(page, f'#flame g[name="{CU}"]') == plain


def test_sandwich_shows_a_frames_callers_and_the_kernels_it_launches(store, ui, page):
    """Click a frame, then Sandwich: its callers above it, its callees (here the kernel
    it launched) below it, both rooted at it with the GPU time through it."""
    out, phases, _ = store
    frm, to, files, _ = phases["after"]
    expected = pprof_totals(files)
    fn = "launch_cuLaunchKernel"
    open_range(page, ui, frm, to)
    page.click(f'#flame g[name="{fn}"]')
    page.wait_for_selector("#selected:not([hidden])")
    seen = counter(page, "sandwiches")
    page.click("#sandwich-frame")
    wait_counter(page, "sandwiches", seen)
    through = expected["leaf"][CU]  # GPU time is the kernels' own, and this function launches CU
    for box in ("#callers-flame", "#callees-flame"):
        title = page.text_content(f'{box} g[name="{fn}"] title')
        assert title.startswith(f"{fn}: {through:,} "), (box, title)
    kernel = page.text_content(f'#callees-flame g[name="{CU}"] title')
    assert kernel.startswith(f"{CU}: {through:,} "), kernel
    assert page.locator(f'#callers-flame g[name="{RT}"]').count() == 0  # another path's kernel
    assert page.locator("#callers-flame g").count() > 2  # its callers, up to the thread's root
    keep_view(page, "sandwich")
    status, _, body = http_get(ui.port, "/api/sandwich?name=no_such_frame")
    assert status == 400 and b"no frame named 'no_such_frame' in this range" in body, (status, body)


def test_group_by_a_label_splits_the_graph_by_its_values(store, ui, page):
    """Group by pid: one subtree per process under the root, each with the GPU time
    Go pprof gives that pid; the choice stays in the page's address."""
    out, phases, _ = store
    frm, to, files, pids = phases["after"]
    open_range(page, ui, frm, to)
    assert set(page.eval_on_selector_all("#group option", "os => os.map(o => o.value)")) >= {"", "pid", "comm"}
    rerendered(page, lambda: page.select_option("#group", "pid"))
    for pid in pids:
        title = page.text_content(f'#flame g[name="pid={pid}"] title')
        assert title.startswith(f"pid={pid}: {pprof_totals(files, pid=pid)['total']:,} "), title
    assert root_total(page) == pprof_totals(files)["total"]
    assert "group=pid" in page.evaluate("location.hash")
    keep_view(page, "group-by")
    status, _, body = http_get(ui.port, f"/api/range?from={frm}&to={to}&group=nope")
    assert status == 400 and b"no label 'nope'" in body


def test_a_failed_filter_leaves_no_old_graph(store, ui, page):
    out, phases, _ = store
    frm, to, files, _ = phases["after"]
    open_range(page, ui, frm, to)
    assert page.locator('#flame g[name="all"]').count() == 1
    page.fill("#f-kernel", "(unclosed")
    page.press("#f-kernel", "Enter")
    page.wait_for_selector("#error:not([hidden])")
    assert "regular expression" in page.text_content("#error") or "(unclosed" in page.text_content("#error")
    assert page.locator("#flame g").count() == 0
    assert page.locator("#top-table tbody tr").count() == 0


def test_filter_by_pid(store, ui, page):
    out, phases, _ = store
    frm, to, files, pids = phases["after"]
    extra = next(p for p, role in pids.items() if role == "extra")
    page.goto(ui.url)
    wait_counter(page, "renders", 0)
    drag_over_chart(page, frm, page.evaluate("state.viewTo") - 1)  # from the idle gap to the end
    assert page.locator("#chart rect.bar.in").count() == len(files)
    everything = root_total(page)
    assert everything == pprof_totals(files)["total"]
    rerendered(page, lambda: page.select_option("#f-pid", extra))
    expected = pprof_totals(files, pid=extra)
    assert root_total(page) == expected["total"] < everything
    assert set(expected["leaf"]) == {CU}  # that process launched one kernel, and the page shows only it
    assert page.locator(f'#flame g[name="{RT}"]').count() == 0
    assert page.locator(f'#flame g[name="{CU}"]').count() == 1


def test_click_into_a_kernel_frame_then_focus_and_hide(store, ui, page):
    out, phases, _ = store
    frm, to, files, _ = phases["after"]
    expected = pprof_totals(files)
    open_range(page, ui, frm, to)
    frame = page.locator(f'#flame g[name="{CU}"]').first
    frame.click()
    assert page.text_content("#sel-name") == CU
    # Zoomed: the clicked kernel now spans the graph's whole width.
    page.wait_for_timeout(700)
    full = float(page.get_attribute('#flame g[name="all"] rect', "width") or 0)
    assert float(frame.locator("rect").get_attribute("width")) == pytest.approx(full, rel=0.01)
    rerendered(page, lambda: page.click("#focus-frame"))
    assert root_total(page) == expected["leaf"][CU]
    assert "focus: " + CU in page.text_content("#chips")
    rerendered(page, lambda: page.click("#chips .chip button"))  # focus removed
    assert root_total(page) == expected["total"]
    page.wait_for_timeout(700)  # the graph's transition back to the whole tree (a click in it can land on the root)
    page.locator(f'#flame g[name="{CU}"]').first.click()
    assert page.text_content("#sel-name") == CU
    rerendered(page, lambda: page.click("#hide-frame"))
    assert root_total(page) == expected["total"] - expected["leaf"][CU]
    assert page.locator(f'#flame g[name="{CU}"]').count() == 0


def test_kernel_regex_and_top_table(store, ui, page):
    out, phases, _ = store
    frm, to, files, _ = phases["after"]
    expected = pprof_totals(files)
    open_range(page, ui, frm, to)
    page.click("nav .tab[data-tab=top]")
    row = page.locator(f'#top-table tr[data-name="{CU}"]')
    assert int(row.get_attribute("data-self")) == int(row.get_attribute("data-total")) == expected["leaf"][CU]
    caller = page.locator('#top-table tr[data-name="launch_cuLaunchKernel"]')
    assert int(caller.get_attribute("data-self")) == 0  # GPU time is the kernels' own
    assert int(caller.get_attribute("data-total")) == expected["leaf"][CU]
    # It opens sorted by self: a kernel leads, not the threads' common root
    first = page.locator("#top-table tbody tr").first
    assert first.get_attribute("data-name") in expected["leaf"], first.get_attribute("data-name")
    page.click("nav .tab[data-tab=flame]")
    page.fill("#f-kernel", "^k_cudaLaunch")
    rerendered(page, lambda: page.press("#f-kernel", "Enter"))
    assert root_total(page) == expected["leaf"][RT]
    # The same graph in kernel launches.
    rerendered(page, lambda: page.select_option("#type", "kernel_launches"))
    assert root_total(page) == pprof_totals(files, value=1)["leaf"][RT] == int(ITERS)


def test_diff_of_two_ranges_shows_the_doubled_kernel_grown(store, ui, page):
    out, phases, _ = store
    (a_from, a_to, a_files, _), (b_from, b_to, b_files, _) = phases["before"], phases["after"]
    page.goto(ui.url)
    wait_counter(page, "renders", 0)
    page.click("nav .tab[data-tab=diff]")
    # It opens on a diff already: the chosen range against the one before it.
    wait_counter(page, "diffs", 0)
    assert page.locator('#diff-flame g[name="all"]').count() == 1
    for field, ms in (("#a-from", a_from), ("#a-to", a_to), ("#b-from", b_from), ("#b-to", b_to)):
        page.fill(field, page.evaluate(f"fmtTime({ms})"))
    page.click("#compare")
    wait_counter(page, "diffs", 1)
    before, after = pprof_totals(a_files)["leaf"], pprof_totals(b_files)["leaf"]
    assert after[CU] == 2 * before[CU] and after[RT] == before[RT]
    grown = page.locator(f'#changes-table tr[data-name="{CU}"]')
    assert int(grown.get_attribute("data-before")) == before[CU]
    assert int(grown.get_attribute("data-after")) == after[CU]
    assert "up" in grown.locator("td").nth(4).get_attribute("class")
    assert page.locator(f'#changes-table tr[data-name="{RT}"]').count() == 0  # unchanged
    # The diff's flame graph: red for the kernel that grew, neutral for the one that did not.
    r, g, b = rgb(frame_fill(page, f'#diff-flame g[name="{CU}"]'))
    assert r > 200 and b < 150 and g < 150
    assert rgb(frame_fill(page, f'#diff-flame g[name="{RT}"]')) == (220, 220, 220)
    root = page.text_content('#diff-flame g[name="all"] title')
    assert f"before {sum(before.values()):,} ns, after {sum(after.values()):,} ns" in root
    keep_view(page, "diff")
    # A frame only the earlier range has is gone, one only the later has is new
    # (the server's rows: ratio = after / before, None without a before).
    page.evaluate("""renderDiff({a: {total: 10, files: 1}, b: {total: 5, files: 1}, normalized: false,
        tree: {name: "all", value: 5, before: 10, delta: -5, children: []},
        changes: [{name: "gone_k", kind: "kernel", before: 10, after: 0, delta: -10, ratio: 0},
                  {name: "new_k", kind: "kernel", before: 0, after: 5, delta: 5, ratio: null}]})""")
    assert page.text_content('#changes-table tr[data-name="gone_k"] td:nth-child(5)').endswith("(gone)")
    assert page.text_content('#changes-table tr[data-name="new_k"] td:nth-child(5)').endswith("(new)")


def test_screenshot_shows_the_flame_graph(store, ui, page):
    out, phases, _ = store
    frm, to, _files, _ = phases["after"]
    open_range(page, ui, frm, to)
    page.wait_for_timeout(500)  # the library's entry transition
    png = page.screenshot(full_page=True)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.write_bytes(png)
    seen = screenshot_colours(page, png)
    assert seen["width"] == 1400 and seen["height"] >= 900
    # Kernel leaves, graph frames, native and Python-coloured frames are all on screen.
    assert seen["kernel"] > 2000 and seen["native"] > 5000 and seen["graph"] > 300, seen


def test_download_links(store, ui, page, tmp_path):
    out, phases, _ = store
    frm, to, files, _ = phases["before"]
    open_range(page, ui, frm, to)
    assert page.is_hidden("#dl-trace")  # no trace in this store (record/trace --store): no link
    with page.expect_download() as d:
        page.click("#dl-pprof")
    path = tmp_path / "range.pb.gz"
    d.value.save_as(path)
    merged = raw(path)  # Go's pprof reads the merged range
    assert sum(s.values[0] for s in merged) == pprof_totals(files)["total"]
    assert {s.labels["pid"] for s in merged} == {s.labels["pid"] for f in files for s in raw(f)}
    assert "k_cuLaunchKernel" in pprof("-top", "-nodecount=50", str(path))
    # A trace beside the profiles (store convention, docs/ui.md) brings the link.
    copy = tmp_path / "store"
    shutil.copytree(out, copy)
    name = files[0].name.replace(".pb.gz", ".perfetto-trace")
    (copy / name).write_bytes(b"\x0a\x02\x08\x01")  # bytes as they are: the UI never parses traces
    other = Ui(copy)
    try:
        open_range(page, other, frm, to)
        assert page.is_visible("#dl-trace")
        status, _, body = http_get(other.port, page.get_attribute("#dl-trace", "href"))
        assert status == 200 and body == b"\x0a\x02\x08\x01"
    finally:
        other.stop()


def test_status_pages(store, ui, page):
    out, phases, agent_status = store
    page.goto(ui.url + "#tab=status")
    wait_counter(page, "statuses", 0)
    assert "No agent is attached" in page.text_content("#no-agent")
    n = len(list(out.glob(PROFILE_GLOB)))
    assert page.text_content('#status tr:has(th:text-is("profiles")) td') == str(n)
    # Under `run --ui`, the same page reports the live agent.
    status, _, body = agent_status
    import json

    agent = json.loads(body)["agent"]
    assert status == 200 and agent["profiles"]["written"] == n
    assert agent["kernel_records"] > 0 and "ringbuf_full" in agent["drops"]
    assert agent["backends"][0]["name"] == "local"


def test_refused_requests(store, ui, tmp_path):
    out, _, _ = store
    secret = tmp_path / "secret.txt"
    secret.write_text("not a profile")
    for path in (
        "/files/../../../../etc/passwd",
        "/files/..%2f..%2f..%2fetc%2fpasswd",
        "/static/../../../../etc/passwd",
        "/files/" + str(secret),
        "/files/%2fetc%2fpasswd",
    ):
        status, _, body = http_get(ui.port, path)
        assert status == 404 and b"root:" not in body, path
    # A symlink planted in the store is not followed.
    copy = tmp_path / "store"
    shutil.copytree(out, copy)
    link = copy / "gpu-20990101T000000-000000000.pb.gz"
    link.symlink_to(secret)
    other = Ui(copy)
    try:
        status, _, body = http_get(other.port, "/files/" + link.name)
        assert status == 404 and b"not a profile" not in body
    finally:
        other.stop()
    assert http_get(ui.port, "/api/status", method="POST")[0] == 405  # read-only
    assert http_get(ui.port, "/api/status", {"Host": "attacker.example"})[0] == 403  # DNS rebinding


def test_token_protected_listener(store, tmp_path, page):
    out, _, _ = store
    p = subprocess.run(
        agent_cmd("ui", "--profiles", out, "--listen", "0.0.0.0:0"), capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "--ui-token-file" in p.stderr, p.stderr
    # Issue 44: the token file is root's or the UI's user's, no one else's, and a regular
    # file (a FIFO there stalled every request): otherwise one line before it serves.
    loose, fifo = tmp_path / "loose", tmp_path / "fifo"
    loose.write_text("s3cret-token\n")
    loose.chmod(0o644)
    os.mkfifo(fifo, 0o600)
    for bad, why in ((loose, "no one else's (chmod 600"), (fifo, "is not a regular file")):
        p = subprocess.run(
            agent_cmd("ui", "--profiles", out, "--listen", "0.0.0.0:0", "--ui-token-file", bad),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and why in p.stderr, p.stderr
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    guarded = Ui(out, "--ui-token-file", str(token), listen="0.0.0.0:0")
    try:
        assert not any("warning" in line for line in guarded.lines)
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            for path in ("/", "/api/status", "/api/range", "/download/profile.pb.gz"):
                status, h, _ = http_get(guarded.port, path, headers)
                assert status == 401 and h.get("WWW-Authenticate", "").startswith("Bearer"), (path, headers)
        assert http_get(guarded.port, "/api/status", {"Authorization": "Bearer s3cret-token"})[0] == 200
        # A browser opens /?token= once; the cookie it gets carries the token from then on.
        page.goto(guarded.url.replace("0.0.0.0", "127.0.0.1") + "?token=s3cret-token")
        wait_counter(page, "renders", 0)
        assert "token" not in page.url and root_total(page) > 0
    finally:
        guarded.stop()


def test_merges_stay_exact_when_the_cache_starts_over(store):
    """A UI beside an agent for months restarts its catalog of stacks and label sets
    past a bound; ranges merged before and after a restart are exact."""
    from gpu_agent.outputs.ui.api import Api
    from gpu_agent.outputs.ui.profiles import ProfileCache
    from gpu_agent.profile.store import Store

    out, phases, _ = store
    s = Store(out)
    api = Api(s, cache=ProfileCache(s))

    def check(name: str) -> None:
        frm, to, files, _ = phases[name]
        got = api.range({"from": [str(frm)], "to": [str(to)]})
        assert got["total"] == pprof_totals(files)["total"] and got["files"] == len(files)

    check("before")
    first = api.cache.catalog
    api.cache.catalog_limit = len(first.stacks) + len(first.labelsets) - 1  # past it now
    check("after")  # restarted, then decoded
    assert api.cache.catalog is not first and api.cache.size() == len(phases["after"][2])
    api.cache.catalog_limit = 10**6
    check("before")  # decoded again, in the new catalog
    (a_from, a_to, a_files, _), (b_from, b_to, b_files, _) = phases["before"], phases["after"]
    diff = api.diff({"a_from": [str(a_from)], "a_to": [str(a_to)], "b_from": [str(b_from)], "b_to": [str(b_to)]})
    assert diff["a"]["total"] == pprof_totals(a_files)["total"]
    assert diff["b"]["total"] == pprof_totals(b_files)["total"]


def test_ranges_decoded_in_worker_processes_match_the_server(store):
    """A range decoded by the pool's processes (workers.py) merges to what the server
    decodes itself: the same totals (Go pprof's), tree, top table and filter menus,
    also after the server's catalog started over."""
    from gpu_agent.outputs.ui.api import Api
    from gpu_agent.outputs.ui.profiles import ProfileCache
    from gpu_agent.profile.store import Store
    from gpu_agent.outputs.ui.workers import DecodePool

    out, phases, _ = store
    s = Store(out)
    plain = Api(s, cache=ProfileCache(s))
    pooled = Api(s, cache=ProfileCache(s))
    pool = pooled.cache.pool = DecodePool(s)
    pool.min_files = 1
    pool._start()
    try:
        assert pool.ready(), pool.failed
        for name in ("before", "after", "before"):
            frm, to, files, _ = phases[name]
            params = {"from": [str(frm)], "to": [str(to)]}
            got, want = pooled.range(params), plain.range(params)
            assert got["total"] == pprof_totals(files)["total"] and got["files"] == len(files)
            for key in ("total", "tree", "top", "labels", "comments"):
                assert got[key] == want[key], key
            assert pooled.intervals(params) == plain.intervals(params)
            pooled.cache._restart()  # the next range is sent to workers that must start over
    finally:
        pool.close()


def test_agent_windows_take_the_numbered_path(store):
    """The agent numbers frames alike in all its windows (pprof.Numbering), so the UI
    reads its files without walking them (numbered.py): every file of the store takes
    that path, and decodes to exactly the rows the general path reads from the same
    file without its numbering (frames, label sets, values, filter totals)."""
    import gzip as gz

    from gpu_agent.outputs.ui.views import RawProfile
    from gpu_agent.proto import profile_pb2
    from gpu_agent.outputs.ui.catalog import Catalog
    from gpu_agent.outputs.ui.numbered import decode_numbered
    from gpu_agent.outputs.ui.profiles import decode

    out, phases, _ = store
    files = phases["before"][2] + phases["after"][2]
    numberings = set()

    def rows(catalog, d):
        return sorted(
            (tuple(repr(catalog.frames[f]) for f in catalog.stacks[s]), catalog.labelsets[l], g, n)
            for s, l, g, n in zip(d.stacks, d.labelsets, d.gpu_ns, d.launches)
        )

    fast_catalog = Catalog()
    for f in files:
        raw = gz.decompress(f.read_bytes())
        p = profile_pb2.Profile.FromString(raw)
        numberings.add(RawProfile.FromString(raw).numbering)
        fast = decode_numbered(raw, fast_catalog)
        assert fast is not None, f"{f.name}: not read on the numbered path"
        p.DiscardUnknownFields()  # its numbering: profile.proto has no field for it
        general_catalog = Catalog()
        general = decode(p.SerializeToString(), general_catalog)
        assert not general_catalog.numberings  # the general path read it
        assert rows(fast_catalog, fast) == rows(general_catalog, general)
        assert (fast.gpu_total, fast.launch_total, fast.comments) == (
            general.gpu_total,
            general.launch_total,
            general.comments,
        )
        assert {fast_catalog.labelsets[k]: v for k, v in fast.by_labelset.items()} == {
            general_catalog.labelsets[k]: v for k, v in general.by_labelset.items()
        }
    assert len(numberings) == 1 and "" not in numberings, numberings  # one agent, one numbering
    # Its locations were decoded once for all the files, not once per file.
    known = next(iter(fast_catalog.numberings.values()))
    assert len(known.locations) == len(fast_catalog.locations)


def test_numbered_path_leaves_what_it_cannot_read_exactly_to_the_general_one():
    """A numbered file with a sample naming an undefined location, or a third value,
    is read the general way (which skips that sample), never half-read."""
    from gpu_agent.profile.pprof import FrameSpec, Numbering, ProfileBuilder
    from gpu_agent.proto import profile_pb2
    from gpu_agent.outputs.ui.catalog import Catalog
    from gpu_agent.outputs.ui.numbered import decode_numbered
    from gpu_agent.outputs.ui.profiles import decode

    b = ProfileBuilder(period_ns=1, duration_ns=10, time_nanos=1, numbering=Numbering())
    b.add([FrameSpec.kernel("k1"), FrameSpec.python("f", "/a.py", 3)], 100, 1, {"pid": "1"})
    b.add([FrameSpec.kernel("k2")], 50, 2, {"pid": "2"})
    good = gzip.decompress(b.to_bytes())  # with its numbering (a field to_proto has not)
    assert decode_numbered(good, Catalog()).gpu_total == 150
    undefined = profile_pb2.Profile.FromString(good)  # unknown fields kept
    undefined.sample[1].location_id.append(999_999)
    third = profile_pb2.Profile.FromString(good)
    third.sample_type.add(type=third.sample_type[0].type, unit=third.sample_type[0].unit)
    for s in third.sample:
        s.value.append(7)
    for p, total in ((undefined, 100), (third, 150)):
        data = p.SerializeToString()
        assert decode_numbered(data, Catalog()) is None
        assert decode(data, Catalog()).gpu_total == total
