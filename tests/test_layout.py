"""The project's layout rules, read from the tree (no root, no eBPF):
- no test module imports another test module or a conftest: shared helpers live
  in tests/support/, shared fixtures in tests/conftest.py;
- no code cites a history document: docs/benchmarks-history.md is a record for
  people, and code states its reasons itself;
- the Python passes ruff (`make lint`);
- the agent is layers that import only downward (docs/architecture.md, "The layers");
- the shim's units call one another in layers too: no circle of calls among them."""

from __future__ import annotations

import ast
import re
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
        hit = {m for m in imported_modules(p) if m.split(".")[-1] in test_modules or m.split(".")[-1] == "conftest"}
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
    for check in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        p = subprocess.run(
            [sys.executable, "-m", "ruff", *check, "agent", "tests", "bench"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-1000:]


# docs/architecture.md's layers, bottom up; proto/ (generated) is usable from any layer.
LAYERS = {
    "proto": 0,
    "system": 1,
    "probes": 2,
    "symbols": 3,
    "profile": 4,
    "join": 5,
    "timeline": 6,
    "outputs": 7,
    "commands": 8,
    "cli": 8,
    "__main__": 9,
}
# The package's face re-exports probes.paths.shim_path: it sits with the probes.
FACE_LAYER = 2
PKG = REPO / "agent" / "gpu_agent"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return FACE_LAYER
    assert parts[1] in LAYERS, f"{module} is in no layer"
    return LAYERS[parts[1]]


def agent_imports(path: Path) -> set[str]:
    """The gpu_agent modules (or packages) a module imports, absolute."""
    me = module_name(path)
    pkg = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
            if base == "gpu_agent" or base.startswith("gpu_agent."):
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    is_mod = (PKG.parent / Path(*sub.split("."))).with_suffix(".py").exists() or (
                        PKG.parent / Path(*sub.split(".")) / "__init__.py"
                    ).exists()
                    out.add(sub if is_mod else base)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gpu_agent"))
    return out


def test_every_module_sits_in_a_layer_and_imports_only_downward():
    modules = [p for p in PKG.rglob("*.py") if "node_modules" not in p.parts]
    loose = [m for m in map(module_name, modules) if m.count(".") == 1 and m.split(".")[1] not in LAYERS]
    assert not loose, f"modules outside every layer: {loose}"
    upward = []
    for p in modules:
        me = module_name(p)
        for target in agent_imports(p):
            if layer(target) > layer(me):
                upward.append(f"{me} -> {target}")
    assert not upward, upward


def shim_calls() -> dict[str, set[str]]:
    """shim/src's units (bench/ too) and the units each calls: a ga_* function
    defined in one unit and called in another (comments left out)."""
    src, defined_in = {}, {}
    for f in sorted((REPO / "shim" / "src").rglob("*.cpp")):
        text = re.sub(r"/\*.*?\*/", "", f.read_text(), flags=re.S)
        text = re.sub(r"//[^\n]*", "", text)
        unit = str(f.relative_to(REPO / "shim" / "src"))
        src[unit] = text
        for m in re.finditer(r"^[A-Za-z_][\w\s*&:<>,]*?\b(ga_\w+)\s*\([^;{]*\)\s*(?:noexcept)?\s*\{", text, re.M):
            defined_in.setdefault(m.group(1), unit)
    calls = {u: set() for u in src}
    for unit, text in src.items():
        called = set(re.findall(r"\b(ga_\w+)\s*\(", text))
        calls[unit] = {defined_in[n] for n in called if n in defined_in and defined_in[n] != unit}
    return calls


def test_the_shims_units_call_in_layers_without_a_circle():
    """A unit that calls back up into one that calls it (directly or around a
    circle) ties the two into one: the layers docs/architecture.md names would not
    hold. Each unit's level is one more than the highest it calls."""
    calls = shim_calls()
    assert {"gate.cpp", "held.cpp", "window.cpp", "collection.cpp", "shim.cpp"} <= calls.keys()
    level: dict[str, int] = {}

    def walk(unit: str, path: tuple) -> int:
        if unit in path:
            circle = " -> ".join(path[path.index(unit) :] + (unit,))
            raise AssertionError(f"a circle of calls among the shim's units: {circle}")
        if unit not in level:
            level[unit] = 1 + max((walk(u, path + (unit,)) for u in calls[unit]), default=-1)
        return level[unit]

    for unit in calls:
        walk(unit, ())
    # the layers the data path names, bottom to top
    order = ["gate.cpp", "window.cpp", "activity.cpp", "callbacks.cpp", "collection.cpp", "session.cpp", "shim.cpp"]
    assert [level[u] for u in order] == sorted(level[u] for u in order), level
    assert level["held.cpp"] < level["weights.cpp"] < level["window.cpp"], level
