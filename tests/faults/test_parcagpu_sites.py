"""A hostile parcagpu-shaped library (issue 30): uid 65534 mapped one with 300
`parcagpu:error` probe sites, which filled the node's 256-entry table of argument
specs (pg_sites); every honest parcagpu workload after it was never attached, and
nothing said why. Now such a file is refused whole, in one line, and an honest
parcagpu library that comes later is attached; and a file no process maps any more
gives its sites and its owner's quota back."""

from __future__ import annotations

import os
import shutil
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
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-fPIC",
            "-shared",
            "-I",
            str(REPO / "shim" / "third_party"),
            "-I",
            cuda_include(),
            "-o",
            str(out),
            str(HERE / "parcagpu_like" / "pglike.c"),
            *map(str, extra),
            "-L",
            str(MOCK_DIR),
            "-l:libcupti.so.13",
            "-lpthread",
        ],
        check=True,
    )
    out.chmod(0o755)
    return out


def test_a_library_with_hundreds_of_sites_is_refused_and_honest_ones_still_attach(tmp_path, world_dir, built):
    need_ebpf()
    flood_c = world_dir / "flood.c"
    flood_c.write_text(
        "#include <sys/sdt.h>\n"
        + "".join(
            f"__attribute__((noinline)) void pg_flood_{i}(long c, const char *m, const char *k)"
            f" {{ STAP_PROBE3(parcagpu, error, c, m, k); }}\n"
            for i in range(SITES)
        )
    )
    hostile = build(world_dir / "libhostile_cupti_client.so", flood_c)
    os.chown(hostile, 65534, 65534)
    honest = build(tmp_path / "libcupti_client_test.so")
    agent = Agent(tmp_path / "profiles", "--shim", private_shim(tmp_path / "shim"), "--discover-interval", "0.2s")
    holder = subprocess.Popen(
        [
            "/usr/bin/python3",
            "-c",
            "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); print('up', flush=True); time.sleep(60)",
            str(hostile),
        ],
        env=mock_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_nobody,
    )
    try:
        assert holder.stdout.readline().strip() == "up", holder.stderr.read()
        refused = agent.wait_for_line(f"not watching {hostile}")
        assert f"{SITES + 1} sites" in refused and refused.count("\n") == 1, refused  # + pglike.c's own
        # An honest parcagpu-shaped workload after it is attached.
        gt = tmp_path / "truth.tsv"
        go = tmp_path / "go"
        p = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "parcagpu_like" / "pg_sites.py"),
                str(honest),
                "200",
                str(HERE),
                "0.5",
                str(go),
            ],
            env=mock_env(gt, CUDA_INJECTION64_PATH=str(honest)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        agent.wait_for_line(f"also watching parcagpu library {honest}", app=p)
        go.touch()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        time.sleep(1.5)
        agent.stop()
        launched = sum(
            s.values[1]
            for s in agent.samples()
            if s.labels.get("pid") == str(p.pid) and s.labels.get("source") == "parcagpu"
        )
        assert launched > 0, "the honest parcagpu workload was not profiled"
    finally:
        holder.kill()
        holder.wait()
        agent.kill()


def test_an_owner_s_files_are_freed_when_no_process_maps_them(tmp_path, world_dir, built):
    """Issue 30: parcagpu files are counted per library and freed when unmapped. uid
    65534 maps 8 copies (its quota) and a 9th, which is refused; once the 8 are
    unmapped the agent detaches them, frees their sites and quota, and attaches the
    9th, which is still mapped."""
    need_ebpf()
    one = build(world_dir / "libpg_quota_0.so")
    copies = [one] + [world_dir / f"libpg_quota_{i}.so" for i in range(1, 9)]
    for c in copies[1:]:
        shutil.copy(one, c)  # same build, its own inode
    for c in copies:
        os.chown(c, 65534, 65534)
        c.chmod(0o755)
    agent = Agent(tmp_path / "profiles", "--shim", private_shim(tmp_path / "shim"), "--discover-interval", "0.2s")

    def hold(lib: Path) -> subprocess.Popen:
        p = subprocess.Popen(
            [
                "/usr/bin/python3",
                "-c",
                "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); print('up', flush=True); time.sleep(60)",
                str(lib),
            ],
            env=mock_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=as_nobody,
        )
        assert p.stdout.readline().strip() == "up", p.stderr.read()
        return p

    holders, lines = [], agent.lines()
    try:
        holders = [hold(c) for c in copies[:8]]
        lines.wait_all({f"also watching parcagpu library {c}" for c in copies[:8]})
        holders.append(hold(copies[8]))
        refused = [ln for ln in lines.wait_all({f"not watching {copies[8]}"}) if str(copies[8]) in ln]
        assert "already has 8 parcagpu files" in refused[-1], refused
        for p in holders[:8]:
            p.kill()
            p.wait()
        lines.wait_all(
            {f"no process maps parcagpu library {c} any more" for c in copies[:8]}
            | {f"also watching parcagpu library {copies[8]}"},
        )
        assert agent.proc.poll() is None, "the agent died"
    finally:
        for p in holders:
            p.kill()
            p.wait()
        agent.kill()
