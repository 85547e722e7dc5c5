"""A hostile parcagpu-shaped library (issue 30): uid 65534 mapped one with 300
`parcagpu:error` probe sites, which filled the node's 256-entry table of argument
specs (pg_sites); every honest parcagpu workload after it was never attached, and
nothing said why. Now such a file is refused whole, in one line, and an honest
parcagpu library that comes later is attached."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from support.agent import Agent
from support.env import MOCK_DIR, REPO, mock_env, need_ebpf, private_shim

from .attacker import as_nobody

HERE = Path(__file__).resolve().parent.parent
SITES = 300


def cuda_include() -> str:
    cuda_inc = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
    return cuda_inc if Path(cuda_inc, "cupti.h").exists() else "/opt/gpu-agent-cuda/include"


def build(out: Path, *extra: Path) -> Path:
    subprocess.run(["gcc", "-O2", "-fPIC", "-shared", "-I", str(REPO / "shim" / "third_party"), "-I", cuda_include(),
                    "-o", str(out), str(HERE / "parcagpu_like" / "pglike.c"), *map(str, extra),
                    "-L", str(MOCK_DIR), "-l:libcupti.so.13", "-lpthread"], check=True)
    out.chmod(0o755)
    return out


def wait_for(agent: Agent, text: str, timeout: float = 30.0) -> str:
    import select
    end, seen = time.monotonic() + timeout, []
    while time.monotonic() < end:
        if select.select([agent.proc.stderr], [], [], 0.2)[0]:
            line = agent.proc.stderr.readline()
            seen.append(line)
            if text in line:
                return line
    raise AssertionError(f"the agent never said {text!r}: {''.join(seen)[-2000:]}")


def test_a_library_with_hundreds_of_sites_is_refused_and_honest_ones_still_attach(tmp_path, world_dir, built):
    need_ebpf()
    flood_c = world_dir / "flood.c"
    flood_c.write_text("#include <sys/sdt.h>\n" + "".join(
        f"__attribute__((noinline)) void pg_flood_{i}(long c, const char *m, const char *k)"
        f" {{ STAP_PROBE3(parcagpu, error, c, m, k); }}\n" for i in range(SITES)))
    hostile = build(world_dir / "libhostile_cupti_client.so", flood_c)
    os.chown(hostile, 65534, 65534)
    honest = build(tmp_path / "libcupti_client_test.so")
    agent = Agent(tmp_path / "profiles", "--shim", private_shim(tmp_path / "shim"), "--discover-interval", "0.2s")
    holder = subprocess.Popen(
        ["/usr/bin/python3", "-c", "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); print('up', flush=True); "
         "time.sleep(60)", str(hostile)],
        env=mock_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_nobody)
    try:
        assert holder.stdout.readline().strip() == "up", holder.stderr.read()
        refused = wait_for(agent, f"not watching {hostile}")
        assert f"{SITES + 1} sites" in refused and refused.count("\n") == 1, refused  # + pglike.c's own
        # An honest parcagpu-shaped workload after it is attached.
        gt = tmp_path / "truth.tsv"
        go = tmp_path / "go"
        p = subprocess.Popen([sys.executable, str(HERE / "parcagpu_like" / "pg_sites.py"), str(honest), "200",
                              str(HERE), "0.5", str(go)], env=mock_env(gt, CUDA_INJECTION64_PATH=str(honest)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(agent, f"also watching parcagpu library {honest}")
        go.touch()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        time.sleep(1.5)
        agent.stop()
        launched = sum(s.values[1] for s in agent.samples()
                       if s.labels.get("pid") == str(p.pid) and s.labels.get("source") == "parcagpu")
        assert launched > 0, "the honest parcagpu workload was not profiled"
    finally:
        holder.kill()
        holder.wait()
        agent.kill()
