"""Which tests cover which files: the one table `make changed` reads.

`make changed` runs the test modules that cover the files changed since the merge
base with main (BASE=REV overrides it), uncommitted and untracked files included.
A file's tests are the union of those of every rule whose glob it matches (fnmatch,
on its path from the repository root: `*` also matches `/`). Besides a list of test
modules (or directories), a rule may say
  SELF       a test module runs itself;
  IMPORTERS  a helper runs the test modules that import it, directly or through other
             helpers or a conftest.py above them (read from their imports now);
  ALL        the whole suite.
A file that no rule matches runs the whole suite. Rules with no tests (the docs) run
nothing. The table was drawn from the tests' imports, the files they read and build,
and the CLI commands they run; tests/test_selection.py checks that each test module
is named by some rule (for the files it covers), that each test module importing
gpu_agent.X is among the tests of X's files, and that unknown files run everything.

    python tests/support/changed.py [--base REV] [--dry-run] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

ALL, SELF, IMPORTERS = "ALL", "SELF", "IMPORTERS"

E2E = ("tests/test_end_to_end.py",)  # mock app -> shim -> eBPF -> agent -> Go pprof, each launch path
LAYOUT = ("tests/test_layout.py",)  # ruff over agent/, tests/, bench/; the agent's and the shim's layers
FIRER = (  # tests/probe_firer: the contract's probes fired with crafted data
    "tests/test_bpf_session.py",
    "tests/test_contract.py",
    "tests/test_discover.py",
    "tests/test_drain_races.py",
    "tests/test_graphs.py",
    "tests/test_interval_names.py",
    "tests/test_invariants.py",
    "tests/test_pcsampling.py",
    "tests/test_pid_reuse.py",
)
# The shim on its own, its probe contract, its windows and their estimates.
SHIM = E2E + (
    "tests/test_shim_unit.py",
    "tests/test_contract.py",
    "tests/test_hot_path.py",
    "tests/test_layout.py",
    "tests/test_windows.py",
    "tests/test_periods.py",
    "tests/test_teardown.py",
    "tests/test_budget.py",
    "tests/test_intervals.py",
    "tests/test_launch_counter.py",
    "tests/test_mix_cuts.py",
    "tests/test_graphs.py",
    "tests/test_build_shim.py",
    "tests/test_run.py",
)
# The BPF program's core: every probe through real eBPF, exact drains, per-process state.
BPF = E2E + (
    "tests/test_bpf_session.py",
    "tests/test_late_events.py",
    "tests/test_contract.py",
    "tests/test_drain_races.py",
    "tests/test_interval_names.py",
    "tests/test_invariants.py",
    "tests/test_pid_reuse.py",
    "tests/faults/test_hostile_probes.py",
    "tests/faults/test_pid_reuse.py",
)
PARCAGPU = ("tests/test_parcagpu.py", "tests/faults/test_parcagpu_sites.py", "tests/faults/test_cold_names.py")
PCSAMPLING = ("tests/test_pcsampling.py", "tests/test_ui_pc_samples.py", "tests/faults/test_cubins.py")
PYTHON = ("tests/test_python_stacks.py", "tests/test_python_layout.py", "tests/faults/test_python_frames.py")
TIMELINE = (
    "tests/test_timeline.py",
    "tests/test_trace_writers.py",
    "tests/test_trace_viewers.py",
    "tests/test_inkernel.py",
    "tests/test_inkernel_place.py",
    "tests/test_nanotrace.py",
    "tests/test_ui_timeline.py",
    "tests/faults/test_trace_flood.py",
    "tests/faults/test_trace_surfaces.py",
    "tests/faults/test_nanotrace_input.py",
)
UI = (
    "tests/test_ui.py",
    "tests/test_ui_views.py",
    "tests/test_ui_pc_samples.py",
    "tests/test_ui_timeline.py",
    "tests/test_readme.py",
    "tests/faults/test_ui_traces.py",
    "tests/faults/test_ui_store.py",
    "tests/faults/test_http.py",
    "tests/faults/test_http_peers.py",
)
EXPORT = ("tests/test_export.py", "tests/test_streaming.py")
METRICS = (
    "tests/test_metrics.py",
    "tests/test_streaming.py",
    "tests/test_k8s_e2e.py",
    "tests/faults/test_http.py",
    "tests/faults/test_http_peers.py",
    "tests/faults/test_metrics_token.py",
)
K8S = ("tests/test_k8s.py", "tests/test_k8s_e2e.py")
CLI = E2E + ("tests/test_cli_errors.py", "tests/test_config.py", "tests/test_deploy.py")
WINDOWS = (
    "tests/test_windows.py",
    "tests/test_periods.py",
    "tests/test_teardown.py",
    "tests/test_budget.py",
    "tests/test_intervals.py",
    "tests/test_launch_counter.py",
    "tests/test_mix_cuts.py",
)
# Their workloads run under one `gpu-agent run` a module (support/shared_agent.py): its
# placement, its shipping and its status lines are what says their profiles are complete.
SHARED_RUN = (
    "tests/test_windows.py",
    "tests/test_launch_counter.py",
    "tests/test_teardown.py",
    "tests/test_intervals.py",
    "tests/test_budget.py",
    "tests/test_graphs.py",
)
AGENT_RUN = (
    "tests/test_run.py",
    "tests/test_discover.py",
    "tests/test_config.py",
    "tests/faults/test_environment.py",
) + SHARED_RUN

# (glob, tests, why). A path takes the union of every rule it matches.
RULES: tuple[tuple[str, tuple[str, ...] | str, str], ...] = (
    # -- the shim and the mock CUDA stack
    ("shim/src/*", SHIM, "the shim: its unit tests, contract, windows and their estimates"),
    ("shim/src/bench/*", WINDOWS + ("tests/test_shim_unit.py",), "the benchmark build's audit and experiments"),
    ("shim/src/pcs*", PCSAMPLING, "PC sampling and its cubins"),
    ("shim/src/graphs.cpp", ("tests/test_graphs.py", "tests/test_timeline.py"), "CUDA graphs"),
    ("shim/src/names.cpp", ("tests/faults/test_two_agents.py", "tests/faults/test_hostile_probes.py"), "names"),
    ("shim/src/unwind.cpp", PYTHON, "launch stacks"),
    ("shim/src/devices.cpp", ("tests/test_timeline.py", "tests/test_streaming.py"), "device identity"),
    ("shim/src/attach_probe.cpp", AGENT_RUN + ("tests/faults/test_two_agents.py",), "attach and replay"),
    ("shim/src/session.cpp", AGENT_RUN + ("tests/faults/test_two_agents.py",), "attach and detach"),
    ("shim/src/tail.cpp", WINDOWS, "the windows' tails"),
    ("shim/src/launch_hook.*", WINDOWS + ("tests/test_hot_path.py",), "the launch counter"),
    (
        "shim/src/shape.cpp",
        ("tests/test_intervals.py", "tests/test_placement.py", "tests/test_shim_estimator.py"),
        "the spans' shapes",
    ),
    (
        "shim/src/mix.cpp",
        ("tests/test_mix_cuts.py", "tests/test_shim_estimator.py"),
        "cuts where the launch mix changes",
    ),
    ("shim/src/budget.cpp", ("tests/test_shim_estimator.py",), "the windows' plan under the budget, in process"),
    ("shim/src/weights.cpp", ("tests/test_shim_estimator.py",), "the periods' weights and spans, in process"),
    ("shim/include/*", SHIM + FIRER + ("tests/test_python_layout.py",), "the probe contract's header"),
    ("shim/include/gpu_agent_parcagpu.h", PARCAGPU, "parcagpu's probes"),
    ("shim/include/gpu_agent_pcsampling.h", PCSAMPLING, "PC sampling's probes"),
    ("shim/include/gpu_agent_python.h", PYTHON, "the Python walker's contract"),
    ("shim/third_party/*", PARCAGPU + FIRER, "sys/sdt.h, which the probe firer and pglike build with"),
    ("shim/mock/*", E2E + ("tests/test_mock_cuda.py",), "the mock CUDA stack"),
    ("shim/mock/mock_cupti.c", WINDOWS, "the mock's CUPTI costs and quirks"),
    ("shim/mock/mock_pcsampling.c", PCSAMPLING + ("tests/test_parcagpu.py",), "the mock's PC sampling"),
    ("shim/mock/graph_workload.c", ("tests/test_graphs.py",), "the graph workload"),
    ("shim/mock/workload.c", WINDOWS + ("tests/test_hot_path.py",), "the mock workload's loops"),
    # -- the BPF program
    ("bpf/*", BPF, "the BPF program: every probe through real eBPF"),
    ("bpf/parcagpu*", PARCAGPU, "parcagpu's probes"),
    ("bpf/*pc*", PCSAMPLING + ("tests/test_parcagpu.py",), "PC samples"),
    ("bpf/python_stack.h", PYTHON, "the Python walker"),
    ("bpf/graph_nodes.h", ("tests/test_graphs.py",), "graph nodes"),
    ("bpf/timeline.h", TIMELINE, "timelines"),
    ("bpf/kernel_names.h", ("tests/faults/test_two_agents.py", "tests/faults/test_cold_names.py"), "names"),
    (
        "bpf/procs.h",
        ("tests/test_run.py", "tests/test_intervals.py", "tests/faults/test_published.py"),
        "processes coming and going, published, shapes",
    ),
    ("bpf/aggregate.h", ("tests/test_windows.py", "tests/faults/test_flood.py"), "weights and drops"),
    ("bpf/correlation.h", ("tests/test_windows.py", "tests/test_graphs.py"), "the launch-record join"),
    ("bpf/kernel_batch.h", ("tests/test_windows.py", "tests/faults/test_flood.py"), "records and drops"),
    # -- the agent, by layer (docs/architecture.md)
    ("agent/*.py", LAYOUT, "ruff and the layers"),
    ("agent/gpu_agent/*", E2E, "the whole pipeline"),
    ("agent/gpu_agent/__*.py", CLI, "the package and `python -m gpu_agent`"),
    ("agent/gpu_agent/cli.py", CLI, "the CLI"),
    (
        "agent/gpu_agent/system/*",
        ("tests/test_elf.py", "tests/test_symbolize.py", "tests/test_contract.py")
        + K8S
        + ("tests/faults/test_fifo_swap.py", "tests/faults/test_outputs.py", "tests/faults/test_environment.py")
        + PYTHON,
        "the host: ELF, /proc (a process's memory), k8s, safe files",
    ),
    ("agent/gpu_agent/system/btf.py", PYTHON + ("tests/test_bpf_session.py",), "task_struct offsets: threads, names"),
    (
        "agent/gpu_agent/probes/*",
        BPF
        + FIRER
        + PYTHON
        + (
            "tests/test_names.py",
            "tests/test_install_shim.py",
            "tests/test_metrics.py",
            "tests/test_trace_writers.py",
            "tests/test_trace_viewers.py",
            "tests/test_inkernel_place.py",
            "tests/test_ui_timeline.py",
            "tests/test_build_shim.py",
            "tests/test_shim_unit.py",
            "tests/test_timeline.py",
            "tests/test_windows.py",
            "tests/test_discover.py",
            "tests/test_parcagpu.py",
            "tests/test_placement.py",
            "tests/faults",  # the attacker fires the contract's probes; its conftest imports it
        ),
        "probes: the contract, uprobes, the BPF session, names",
    ),
    ("agent/gpu_agent/probes/*parcagpu*", PARCAGPU, "parcagpu as a second source"),
    ("agent/gpu_agent/probes/cold_names.py", PARCAGPU, "names the agent reads itself"),
    ("agent/gpu_agent/probes/contract/pcsampling.py", PCSAMPLING, "PC sampling's probes"),
    ("agent/gpu_agent/probes/*py_*", PYTHON, "the Python walker's maps"),
    ("agent/gpu_agent/probes/contract/python.py", PYTHON, "the Python walker's contract"),
    ("agent/gpu_agent/probes/audit.py", ("tests/test_windows.py",), "the audit file"),
    ("agent/gpu_agent/probes/uprobe_events.py", ("tests/faults/test_uprobe_events.py",), "leftover uprobe events"),
    ("agent/gpu_agent/probes/preflight.py", ("tests/test_cli_errors.py",), "the preflight's one-line errors"),
    (
        "agent/gpu_agent/symbols/*",
        PYTHON
        + ("tests/test_symbolize.py", "tests/test_pprof.py", "tests/test_streaming.py", "tests/test_pcsampling.py")
        + ("tests/faults/test_fifo_swap.py", "tests/faults/test_cubins.py"),
        "symbols: native, Python, cubins",
    ),
    (
        "agent/gpu_agent/profile/*",
        ("tests/test_pprof.py", "tests/test_export.py", "tests/test_ui.py", "tests/test_ui_pc_samples.py")
        + ("tests/test_ui_views.py", "tests/test_ui_timeline.py", "tests/test_graphs.py", "tests/test_pcsampling.py")
        + ("tests/faults/test_flood.py", "tests/faults/test_environment.py")
        + ("tests/faults/test_hostile_probes.py", "tests/faults/test_trace_flood.py")
        + K8S,
        "profiles: vocabulary, pprof, the store, a process's pod",
    ),
    (
        "agent/gpu_agent/join/*",
        (
            "tests/test_estimator.py",
            "tests/test_placement.py",
            "tests/test_drain_races.py",
            "tests/test_interval_names.py",
        )
        + ("tests/test_invariants.py", "tests/test_pid_reuse.py", "tests/test_graphs.py", "tests/test_pcsampling.py")
        + ("tests/test_late_events.py", "tests/test_timeline.py")
        + ("tests/test_python_stacks.py", "tests/test_windows.py", "tests/test_parcagpu.py", "tests/test_intervals.py")
        + ("tests/faults/test_two_agents.py", "tests/faults/test_uprobe_events.py", "tests/faults/test_flood.py")
        + ("tests/faults/test_hostile_probes.py", "tests/faults/test_trace_flood.py")  # lost records' bounds
        + ("tests/test_symbolize.py",)  # stacks named unavailable, counted
        + SHARED_RUN,
        "the join: the estimator and the Collector",
    ),
    ("agent/gpu_agent/timeline/*", TIMELINE, "timelines and their writers"),
    ("agent/gpu_agent/outputs/*", UI + EXPORT + METRICS, "outputs: export, /metrics, the UI"),
    ("agent/gpu_agent/outputs/ui/*", UI, "the web UI"),
    ("agent/gpu_agent/outputs/ui/views.py", ("tests/test_pprof.py",), "the numbering's field, as the UI reads it"),
    ("agent/gpu_agent/outputs/export/*", EXPORT, "Parca and OTLP"),
    ("agent/gpu_agent/outputs/metrics.py", METRICS, "/metrics"),
    (
        "agent/gpu_agent/proto/*",
        EXPORT
        + ("tests/test_pprof.py", "tests/test_ui.py", "tests/test_run.py", "tests/test_cli_errors.py")
        + ("tests/faults/test_ui_store.py",),
        "the protos",
    ),
    ("agent/gpu_agent/commands/*", CLI + ("tests/test_install_shim.py",), "the commands"),
    (
        "agent/gpu_agent/commands/record.py",
        ("tests/faults/test_outputs.py", "tests/faults/test_environment.py", "tests/test_windows.py"),
        "`record`",
    ),
    ("agent/gpu_agent/commands/run.py", AGENT_RUN + METRICS + ("tests/test_streaming.py",), "`run`"),
    ("agent/gpu_agent/commands/health.py", ("tests/test_run.py", "tests/faults/test_trace_flood.py"), "`health`"),
    ("agent/gpu_agent/commands/common.py", ("tests/test_invariants.py", "tests/test_graphs.py"), "the status line"),
    ("agent/gpu_agent/commands/kube.py", K8S, "pods"),
    (
        "agent/gpu_agent/commands/outputs.py",
        EXPORT + ("tests/faults/test_outputs.py",) + SHARED_RUN,
        "the outputs of a command",
    ),
    ("agent/gpu_agent/commands/t*.py", TIMELINE, "`trace` and `timeline`"),
    ("agent/gpu_agent/commands/ui.py", UI, "`ui`"),
    # -- the tests' own files
    ("tests/test_*.py", SELF, "a test module runs itself"),
    ("tests/faults/test_*.py", SELF, "a test module runs itself"),
    ("tests/*.py", LAYOUT, "ruff"),
    ("tests/conftest.py", ALL, "the suite's shared fixtures"),
    ("tests/support/*.py", IMPORTERS, "a helper: the tests that import it"),
    ("tests/support/changed.py", ("tests/test_selection.py",), "this table"),
    ("tests/support/flaky.py", ("tests/test_selection.py",), "the flaky list"),
    ("tests/faults/[!t]*", ("tests/faults",), "the fault suite's attacker, node and workloads"),
    ("tests/probe_firer/*", FIRER, "the probe firer"),
    ("tests/shim_unit/*", ("tests/test_shim_unit.py", "tests/test_shim_estimator.py"), "the shim's unit harnesses"),
    ("tests/parcagpu_like/*", PARCAGPU, "pglike, a parcagpu-shaped library"),
    ("tests/py_native/*", ("tests/test_python_stacks.py",), "a native launcher for Python stacks"),
    ("tests/data/k8s/*", K8S, "cgroup and PodList fixtures"),
    ("tests/data/pcsampling/*", PCSAMPLING + ("tests/test_parcagpu.py",), "the H100 cubin and its listing"),
    ("tests/viewers/*", ("tests/test_trace_viewers.py",), "speedscope"),
    (
        "tests/py_workload.py",
        PYTHON
        + ("tests/test_mock_cuda.py", "tests/test_readme.py", "tests/test_newcomer.py", "tests/test_windows.py")
        + PARCAGPU
        + PCSAMPLING,
        "the Python workload (and py_sites, py_pc_sampling, pg_sites on it)",
    ),
    ("tests/py_sites.py", ("tests/test_windows.py",) + PARCAGPU + PCSAMPLING, "the 3:1 call sites"),
    ("tests/py_pc_sampling.py", PCSAMPLING, "the PC sampling workload"),
    ("tests/py_graph_workload.py", ("tests/test_graphs.py",), "the Python graph workload"),
    ("tests/readme_workload.py", ("tests/test_readme.py", "tests/test_timeline.py"), "the README's workload"),
    # -- everything else
    ("README.md", ("tests/test_readme.py", "tests/test_newcomer.py"), "the README's blocks, run as printed"),
    ("docs/events.schema.json", ("tests/test_trace_writers.py", "tests/test_inkernel_place.py"), "the schema"),
    ("docs/*.md", (), "no test reads the docs"),
    ("docs/img/*", (), "no test reads the docs"),
    ("deploy/*", ("tests/test_deploy.py",) + LAYOUT, "the deployment files"),
    ("deploy/build-shim.sh", ("tests/test_build_shim.py",), "the CUDA 12 build"),
    ("Dockerfile", ("tests/test_deploy.py",), "hadolint"),
    ("bench/*", LAYOUT, "ruff; no test runs the benchmarks"),
)


def test_modules() -> list[str]:
    """Every test module, as a path from the repository root."""
    return list(_test_modules())


@cache
def _test_modules() -> tuple[str, ...]:
    return tuple(
        sorted(
            str(p.relative_to(REPO)) for p in TESTS.rglob("test_*.py") if "node_modules" not in p.parts and p.is_file()
        )
    )


def expand(tests: tuple[str, ...]) -> set[str]:
    """Test modules and directories -> the test modules."""
    out = set()
    for t in tests:
        out |= {m for m in test_modules() if m == t or m.startswith(t.rstrip("/") + "/")}
    return out


# -- imports, read from the tests' sources -------------------------------------------
def _resolve(name: str, here: Path, level: int) -> list[Path]:
    """The files under tests/ or agent/ that module `name` may be (relative when level)."""
    parts = name.split(".") if name else []
    if level:
        base = here.parent
        for _ in range(level - 1):
            base = base.parent
        roots = [base]
    elif parts and parts[0] == "gpu_agent":
        roots = [REPO / "agent"]
    else:
        roots = [TESTS, TESTS / "probe_firer"]  # conftest.py and the firer's users put these on sys.path
    out = []
    for root in roots:
        p = root.joinpath(*parts)
        for cand in (p.with_suffix(".py"), p / "__init__.py"):
            if parts and cand.is_file():
                out.append(cand)
                # a helper package's __init__.py runs first (the agent's are its layers' business)
                if root != REPO / "agent":
                    out += [d / "__init__.py" for d in cand.parents if d != root and d.is_relative_to(root)]
    return [f for f in out if f.is_file()]


@cache
def _imports(path: Path, top_level_only: bool) -> frozenset[Path]:
    """The files (under tests/ or agent/) that this file imports."""
    try:
        tree = ast.parse(path.read_text(), str(path))
    except (SyntaxError, OSError, UnicodeDecodeError):  # a file being written: what it imports is unknown yet
        return frozenset()
    nodes = tree.body if top_level_only else ast.walk(tree)
    out: set[Path] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                out.update(_resolve(a.name, path, 0))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            for a in node.names:  # `from pkg import module` imports the module
                sub = _resolve(f"{mod}.{a.name}" if mod else a.name, path, node.level)
                out.update(sub or _resolve(mod, path, node.level))
    return frozenset(out)


@cache
def dependencies(test: str) -> frozenset[Path]:
    """What a test module imports, through helpers under tests/ and the conftest.py files
    above it (their module-level imports), transitively: tests/ and agent/ files."""
    path = REPO / test
    todo = [path] + [
        d / "conftest.py" for d in path.parents if d.is_relative_to(TESTS) and (d / "conftest.py").is_file()
    ]
    seen: set[Path] = set()
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        if f.is_relative_to(TESTS):  # the agent's own imports are its layers' business
            todo.extend(_imports(f, f.name == "conftest.py"))
    seen.discard(path)
    return frozenset(seen)


def importers(helper: str) -> set[str]:
    target = REPO / helper
    return {t for t in test_modules() if target in dependencies(t)}


# -- selection -----------------------------------------------------------------------
def matches(path: str) -> list[tuple[str, tuple[str, ...] | str, str]]:
    return [r for r in RULES if fnmatch.fnmatchcase(path, r[0])]


class Selection:
    """The tests that cover a set of changed files, and why."""

    def __init__(self, paths):
        self.why: dict[str, list[str]] = {}  # changed file -> what its rules say
        self.tests: dict[str, list[str]] = {}  # test module -> the changed files that picked it
        self.whole: list[str] = []  # files that run the whole suite
        for path in sorted(set(paths)):
            rules = matches(path)
            if not rules:
                self.whole.append(path)
                self.why[path] = ["no rule: the whole suite"]
                continue
            picked: set[str] = set()
            for glob, tests, why in rules:
                if tests == ALL:
                    self.whole.append(path)
                    got: set[str] = set()
                elif tests == SELF:
                    got = {path} if (REPO / path).is_file() else set()  # a deleted test runs nothing
                elif tests == IMPORTERS:
                    got = importers(path)
                else:
                    got = expand(tests)
                picked |= got
                what = "the whole suite" if tests == ALL else f"{len(got)} test module(s)"
                self.why.setdefault(path, []).append(f"{glob}: {why} -> {what}")
            for t in picked:
                self.tests.setdefault(t, []).append(path)

    @property
    def everything(self) -> bool:
        return bool(self.whole)

    def args(self) -> list[str]:
        """pytest's positional arguments: the modules, or tests/ for the whole suite."""
        return ["tests"] if self.everything else sorted(self.tests)


# -- the command ---------------------------------------------------------------------
def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def merge_base() -> str:
    for ref in ("origin/main", "main"):
        p = subprocess.run(["git", "merge-base", "HEAD", ref], cwd=REPO, capture_output=True, text=True)
        if p.returncode == 0:
            return p.stdout.strip()
    raise SystemExit("make changed: no merge base with origin/main or main; say which with BASE=REV")


def changed_files(base: str) -> list[str]:
    """Changed since base: committed, staged, unstaged (both sides of a rename), untracked."""
    diff = git("diff", "--name-only", "--no-renames", base, "--").split("\n")
    untracked = git("ls-files", "--others", "--exclude-standard").split("\n")
    return sorted({p for p in diff + untracked if p})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="", help="the revision to compare with (default: the merge base with main)")
    ap.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    a = ap.parse_args(argv)
    base = a.base or merge_base()
    files = changed_files(base)
    short = git("rev-parse", "--short", base).strip()
    print(f"make changed: {len(files)} file(s) changed since {short} (uncommitted and untracked included)")
    sel = Selection(files)
    for f in files:
        print(f"  {f}")
        for line in sel.why[f]:
            print(f"      {line}")
    if sel.everything:
        print(f"picked the whole suite ({', '.join(sel.whole)})")
    elif sel.tests:
        print(f"picked {len(sel.tests)} test module(s):")
        for t in sorted(sel.tests):
            files_ = sel.tests[t]
            print(f"  {t}  <- {', '.join(files_[:3])}{f' and {len(files_) - 3} more' if len(files_) > 3 else ''}")
    else:
        print("picked nothing: no test covers these files")
        return 0
    if a.dry_run:
        return 0
    cmd = [sys.executable, "-m", "pytest", *a.pytest_args, *sel.args()]
    print("+", " ".join(cmd), flush=True)
    os.chdir(REPO)
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    sys.exit(main())
