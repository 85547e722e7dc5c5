"""What every GPU benchmark needs: a clean environment, the shim, the commands that
run a case, a running agent and its cost, and a profile's kernels.

Used by the runner (python -m bench.gpu) and nothing in tests/: tests have their
own helpers (tests/conftest.py), and the two never import each other. What both
need lives in the agent package (gpu_agent.probes.audit, gpu_agent.proto).
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SHIM = REPO / "build" / "libgpu_agent_shim.so"
# The benchmark build (make shim-bench): the same shim plus audit mode and the
# GPU_AGENT_EXP_* knobs. Only settings that need it select it.
BENCH_SHIM = REPO / "build" / "shim-bench" / "libgpu_agent_shim.so"
if str(REPO / "agent") not in sys.path:
    sys.path.insert(0, str(REPO / "agent"))


def clean_env(**extra: str) -> dict:
    """This environment without shim injection or GPU_AGENT_* settings, plus extra;
    PYTHONPATH gains the repository root and agent/, so that `python -m bench.gpu.cases`
    and `python -m gpu_agent` resolve."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_INJECTION64_PATH" and not k.startswith("GPU_AGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(REPO / "agent"), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def needs_bench_shim(settings) -> bool:
    return any(k.startswith("GPU_AGENT_EXP_") or k == "GPU_AGENT_AUDIT_FILE" for k in settings)


def shim_env(**extra: str) -> dict:
    """clean_env with the shim injected the way a user does it (the benchmark build
    when a setting needs it)."""
    shim = BENCH_SHIM if needs_bench_shim(extra) else SHIM
    return clean_env(CUDA_INJECTION64_PATH=str(shim), **extra)


# parcagpu's CUPTI library, built by bench/gpu/parcagpu_build.sh (docs/parcagpu.md
# names the commits); carried to a GPU node like the bcc bundle.
PARCAGPU = Path(os.environ.get("PARCAGPU_LIB", REPO / ".peers" / "lib" / "libparcagpucupti.so"))


def parcagpu_env(**extra: str) -> dict:
    """clean_env with parcagpu injected as a Parca user does it. Its proton opens
    the unversioned libcupti.so (or $TRITON_CUPTI_LIB_PATH/libcupti.so), which a
    toolkit has and a pip PyTorch does not: point it at the toolkit's, or link one."""
    if not PARCAGPU.exists():
        raise SystemExit(f"no parcagpu library at {PARCAGPU}: bench/gpu/parcagpu_build.sh builds it")
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    found = [
        d for d in (f"{cuda}/extras/CUPTI/lib64", f"{cuda}/lib64", f"{cuda}/lib") if Path(d, "libcupti.so").exists()
    ]
    if not found:
        import glob

        versioned = sorted(glob.glob(f"{cuda}/**/libcupti.so.1*", recursive=True))
        if not versioned:
            raise SystemExit(f"no libcupti under {cuda} for parcagpu")
        link = REPO / "build" / "peers" / "libcupti.so"
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(versioned[0])
        found = [str(link.parent)]
    return clean_env(CUDA_INJECTION64_PATH=str(PARCAGPU), TRITON_CUPTI_LIB_PATH=found[0], **extra)


def cuda_binary(name: str, cupti: bool = False) -> str:
    """bench/gpu/NAME.cu, built with nvcc into build/bench/ when it changed (with
    cupti, linked to the toolkit's libcupti, wherever this toolkit keeps it)."""
    out = REPO / "build" / "bench" / name
    src = REPO / "bench" / "gpu" / f"{name}.cu"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        extra = []
        if cupti:
            cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
            for d in (f"{cuda}/extras/CUPTI", cuda):
                extra += [f"-I{d}/include", f"-L{d}/lib64", f"-Xlinker=-rpath={d}/lib64"]
            extra.append("-lcupti")
        subprocess.run(["nvcc", "-O2", "-o", str(out), str(src), "-lcuda", *extra], check=True)
    return str(out)


def driver_graph_binary() -> str:
    return cuda_binary("driver_graph")


def case_command(
    workload: str, steps: int = 0, repeats: int = 5, wait: float = 3.0, torch_profiler: bool = False
) -> list[str]:
    """The command of one timed process of a case (bench/gpu/cases.py)."""
    from bench.gpu.cases import STEPS

    steps = steps or STEPS[workload]
    if workload in ("driver-graph", "launch"):
        binary = driver_graph_binary() if workload == "driver-graph" else cuda_binary("launch_loop")
        return [binary, str(steps), "--bench", "0", str(wait), str(repeats)]
    return [
        sys.executable,
        "-m",
        "bench.gpu.cases",
        workload,
        "--steps",
        str(steps),
        "--repeats",
        str(repeats),
        "--wait",
        str(wait),
    ] + (["--torch-profiler"] if torch_profiler else [])


class Agent:
    """`gpu-agent run` at its defaults (plus args), started and waited for until it
    watches; its CPU time and peak RSS read from /proc."""

    def __init__(self, output_dir: str, *args: str, cpus: str = "", env: dict | None = None, bench_shim: bool = False):
        # The agent's programs fit one build of the shim (their argument readers are
        # generated from its probe sites): the benchmark build's processes need an
        # agent of their own.
        shim = ["--shim", str(BENCH_SHIM)] if bench_shim else []
        cmd = [sys.executable, "-m", "gpu_agent", "run", "--output-dir", output_dir, *shim, *args]
        if cpus:
            cmd = ["taskset", "-c", cpus] + cmd
        self.p = subprocess.Popen(
            # its status lines (stdout) and log (stderr) in one tail
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env or clean_env(),
        )
        seen: list[str] = []
        for line in self.p.stdout:  # every probe attached once it says "watching"
            seen.append(line)
            if "watching every process" in line:  # not "also watching" a copy
                break
        else:
            raise SystemExit("agent failed to start: " + "".join(seen))
        self.log_tail = deque(seen, maxlen=50)
        # a full pipe would block the agent
        threading.Thread(target=lambda: self.log_tail.extend(self.p.stdout), daemon=True).start()

    def cpu_s(self) -> float:
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> tuple[float, float]:
        """(current, peak) resident MiB."""
        vals = {}
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    vals[line[:5]] = int(line.split()[1]) / 1024
        return vals.get("VmRSS", 0.0), vals.get("VmHWM", 0.0)

    def stop(self) -> str:
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        return "".join(self.log_tail)


def load_profile(path: Path):
    """A gzip pprof file as gpu_agent.proto's Profile (time_nanos, duration_nanos: its
    span on CLOCK_REALTIME)."""
    from gpu_agent.proto import profile_pb2  # the real profile.proto

    p = profile_pb2.Profile()
    p.ParseFromString(gzip.decompress(Path(path).read_bytes()))
    return p


def samples_of(p, pid: int | None = None) -> list:
    """A profile's samples, or with pid only those of that process (label "pid")."""
    if pid is None:
        return list(p.sample)
    s, want = p.string_table, str(pid)
    return [smp for smp in p.sample if any(s[lb.key] == "pid" and s[lb.str] == want for lb in smp.label)]


def profile_kernels(path: Path, pid: int | None = None) -> dict[str, list[int]]:
    """mangled kernel name -> [gpu_ns, launches] over a profile's CUDA_KERNEL leaves
    (with pid: that process's)."""
    p = load_profile(path)
    s = p.string_table
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: loc for loc in p.location}
    out: dict[str, list[int]] = {}
    for smp in samples_of(p, pid):
        f = funcs[locs[smp.location_id[0]].line[0].function_id]
        if s[f.filename] != "CUDA_KERNEL":
            continue
        acc = out.setdefault(s[f.system_name] or s[f.name], [0, 0])
        acc[0] += smp.value[0]
        acc[1] += smp.value[1]
    return out


def profile_stacks(path: Path, pid: int | None = None) -> list[tuple[list[str], list[int]]]:
    """Every sample of a profile (with pid: of that process): (function names from the
    leaf up, values)."""
    p = load_profile(path)
    s = p.string_table
    names = {f.id: s[f.name] for f in p.function}
    locs = {loc.id: [names[ln.function_id] for ln in loc.line] for loc in p.location}  # line[0]: innermost
    return [([fn for lid in smp.location_id for fn in locs[lid]], list(smp.value)) for smp in samples_of(p, pid)]


def python_share(path: Path, pid: int | None = None) -> float:
    """The share of a profile's GPU time (with pid: that process's) whose stack has a
    Python frame (a .py file)."""
    p = load_profile(path)
    s = p.string_table
    py_funcs = {f.id for f in p.function if s[f.filename].endswith(".py")}
    py_locs = {loc.id for loc in p.location if any(ln.function_id in py_funcs for ln in loc.line)}
    samples = samples_of(p, pid)
    total = sum(smp.value[0] for smp in samples)
    py = sum(smp.value[0] for smp in samples if py_locs.intersection(smp.location_id))
    return py / total if total else 0.0


def stacks_without_python(path: Path, pid: int | None = None) -> list[tuple[list[str], int]]:
    """A profile's stacks (with pid: that process's) with no Python frame: (function
    names from the leaf up, GPU ns), heaviest first."""
    p = load_profile(path)
    s = p.string_table
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: [funcs[ln.function_id] for ln in loc.line] for loc in p.location}
    out = []
    for smp in samples_of(p, pid):
        fs = [f for lid in smp.location_id for f in locs[lid]]
        if not any(s[f.filename].endswith(".py") for f in fs):
            out.append(([s[f.name] for f in fs], smp.value[0]))
    return sorted(out, key=lambda fv: -fv[1])


def merge_kernels(paths) -> dict[str, list[int]]:
    """profile_kernels summed over several profiles (one `gpu-agent run`'s intervals)."""
    total: dict[str, list[int]] = {}
    for f in paths:
        for k, (ns, n) in profile_kernels(f).items():
            acc = total.setdefault(k, [0, 0])
            acc[0] += ns
            acc[1] += n
    return total
