"""What `make changed` and `make flaky` pick (tests/support/changed.py, flaky.py), read
from the tree (no root, no eBPF):
- every test module is named by a rule, for the files it covers;
- every test module that imports gpu_agent.X (itself, through tests/support/ or a
  conftest.py) is among the tests of X's file;
- a file no rule knows runs the whole suite; a changed test module runs itself, a
  helper the modules that import it; the docs run nothing;
- every test the tables name exists, and so does every test on the flaky list."""

from __future__ import annotations

import ast
import subprocess

from support import changed as C
from support import flaky as F
from support.env import REPO


def committed_test_modules() -> list[str]:
    """The test modules git knows (a module still being written is placed when committed)."""
    p = subprocess.run(["git", "ls-files", "--", "tests"], cwd=REPO, capture_output=True, text=True)
    if p.returncode != 0:
        return C.test_modules()
    known = set(p.stdout.split())
    return [m for m in C.test_modules() if m in known]


def test_every_test_module_is_named_by_a_rule():
    """...a rule for the files it covers: a module that only runs itself, or through a
    helper every test imports, is run by no change to what it tests."""
    named = set()
    for _, tests, _ in C.RULES:
        if isinstance(tests, tuple):
            named |= C.expand(tests)
    missing = sorted(set(committed_test_modules()) - named)
    assert not missing, f"no rule in tests/support/changed.py names {missing}"


def test_every_module_importing_the_agent_is_among_its_files_tests():
    missed = {}
    for test in committed_test_modules():
        for f in C.dependencies(test):
            if not f.is_relative_to(REPO / "agent"):
                continue
            path = str(f.relative_to(REPO))
            sel = C.Selection([path])
            if not sel.everything and test not in sel.tests:
                missed.setdefault(path, []).append(test)
    assert not missed, f"tests/support/changed.py's rules miss these importers: {missed}"


def test_every_named_test_exists():
    for glob, tests, _ in C.RULES:
        if isinstance(tests, tuple):
            for t in tests:
                assert (REPO / t).exists(), (glob, t)
                assert C.expand((t,)), (glob, t)
        else:
            assert tests in (C.ALL, C.SELF, C.IMPORTERS), (glob, tests)


def test_unknown_files_run_the_whole_suite():
    for path in ("no/such/place.xyz", "Makefile", ".ci/run", "pyproject.toml", "tests/conftest.py"):
        sel = C.Selection([path])
        assert sel.everything and sel.args() == ["tests"], path
    # ...whatever else changed with them
    assert C.Selection(["shim/src/window.cpp", "Makefile"]).args() == ["tests"]


def test_tests_helpers_and_docs_pick_what_they_cover():
    sel = C.Selection(["tests/test_names.py"])
    assert not sel.everything and "tests/test_names.py" in sel.tests
    sel = C.Selection(["tests/faults/test_flood.py"])
    assert "tests/faults/test_flood.py" in sel.tests and "tests/faults/test_http.py" not in sel.tests
    assert C.Selection(["tests/test_deleted_long_ago.py"]).args() == ["tests/test_layout.py"]  # ruff, not itself
    sel = C.Selection(["tests/support/windows.py"])
    assert {"tests/test_windows.py", "tests/test_teardown.py"} <= set(sel.tests) and not sel.everything
    assert "tests/test_ui.py" not in sel.tests
    # a helper of the fault suite runs the whole fault suite, and only it (and ruff)
    sel = C.Selection(["tests/faults/faultkit.py"])
    assert set(sel.tests) == set(C.expand(("tests/faults",))) | {"tests/test_layout.py"}
    assert C.Selection(["docs/ui.md", "docs/img/ui-flame.png"]).args() == []
    sel = C.Selection(["shim/src/window.cpp"])
    assert {"tests/test_windows.py", "tests/test_shim_unit.py", "tests/test_end_to_end.py"} <= set(sel.tests)
    assert "tests/test_ui.py" not in sel.tests


def test_the_flaky_list_names_tests_that_exist_once_each():
    ids = [t for t, _ in F.FLAKY]
    assert len(ids) == len(set(ids)), ids
    for nodeid, why in F.FLAKY:
        assert why and "\n" not in why, nodeid
        path, _, name = nodeid.partition("::")
        name = name.split("[")[0]
        tree = ast.parse((REPO / path).read_text())
        assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, nodeid
        assert name in F.__doc__, f"{nodeid} is not in flaky.py's inventory"
