"""Shared fixtures: the built parts, the probe firer, one headless Chromium. Plain
helpers live in tests/support/, which every test module imports from (never from
here or from another test module)."""

from __future__ import annotations

import fcntl
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support.env import MOCK_APP, MOCK_DIR, SHIM, need_ebpf  # noqa: E402

# The modules that need neither eBPF nor a GPU (a test of theirs that needs root
# says so and skips): `make unit` runs them, marked `unit`, in about a minute.
UNIT_MODULES = {
    "test_config",
    "test_contract",
    "test_elf",
    "test_estimator",
    "test_export",
    "test_hot_path",
    "test_inkernel_place",
    "test_install_shim",
    "test_k8s",
    "test_layout",
    "test_metrics",
    "test_mock_cuda",
    "test_names",
    "test_nanotrace",
    "test_placement",
    "test_pprof",
    "test_python_layout",
    "test_selection",
    "test_shim_estimator",
    "test_shim_unit",
    "test_symbolize",
    "test_trace_writers",
}


# The modules that run `gpu-agent trace`, which holds the node's capture lock (one
# capture at a time: commands/trace.py). Under pytest-xdist (`make test`: whole modules
# on two workers) they take turns, each holding this lock while it runs.
CAPTURE_MODULES = {"test_timeline", "test_trace_flood", "test_trace_surfaces", "test_readme"}
CAPTURE_TURN = Path("/tmp/gpu-agent-tests-capture.lock")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in UNIT_MODULES:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="module", autouse=True)
def one_capture_at_a_time(request):
    """A capture module's turn (before its own module fixtures, which may capture)."""
    if request.path.stem not in CAPTURE_MODULES:
        yield
        return
    with open(CAPTURE_TURN, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def built():
    missing = [p for p in (SHIM, MOCK_APP, MOCK_DIR / "libcuda.so.1", MOCK_DIR / "libcupti.so.13") if not p.exists()]
    if missing:
        pytest.fail(f"not built: {', '.join(map(str, missing))}; run `make`")
    return True


@pytest.fixture(scope="session")
def firer(tmp_path_factory):
    """(probe library, firer executable) of tests/probe_firer, built once."""
    need_ebpf()
    sys.path.insert(0, str(Path(__file__).resolve().parent / "probe_firer"))
    import firer_script

    return firer_script.build(tmp_path_factory.mktemp("firer"))


# One headless Chromium per module (tests/support/ui.py launches Debian's).
@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        from support.ui import launch_browser

        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, reduced_motion="reduce")
    pg = ctx.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ctx.close()
    assert not errors, errors
