"""The project's layout rules, read from the tree (no root, no eBPF):
- no test module imports another test module or a conftest: shared helpers live
  in tests/support/, shared fixtures in tests/conftest.py;
- no code cites a history document: docs/benchmarks-history.md is a record for
  people, and code states its reasons itself;
- the Python passes ruff (`make lint`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.env import REPO

TESTS = REPO / "tests"
CODE_DIRS = ("agent", "shim", "bpf", "bench", "tests", "deploy")
CODE_SUFFIXES = {".py", ".c", ".h", ".cpp", ".cu", ".sh", ".js"}


def imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_no_test_module_imports_another_or_a_conftest():
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    bad = {}
    for p in TESTS.rglob("*.py"):
        if "node_modules" in p.parts:
            continue
        hit = {m for m in imported_modules(p)
               if m.split(".")[-1] in test_modules or m.split(".")[-1] == "conftest"}
        if hit:
            bad[str(p.relative_to(REPO))] = sorted(hit)
    assert not bad, bad


def test_no_code_cites_a_history_document():
    cites = []
    for d in CODE_DIRS:
        for p in (REPO / d).rglob("*"):
            if p.suffix in CODE_SUFFIXES and "node_modules" not in p.parts and p.is_file():
                for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                    if "benchmarks-history" in line and p.resolve() != Path(__file__).resolve():
                        cites.append(f"{p.relative_to(REPO)}:{n}")
    assert not cites, cites


def test_the_python_passes_ruff():
    """`make lint`'s Python half (pyproject.toml's [tool.ruff]), so the suite keeps it clean."""
    p = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "agent", "tests", "bench"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-1000:]
