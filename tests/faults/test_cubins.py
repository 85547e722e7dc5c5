"""Hostile cubins (PC sampling's line tables), handed to a root `gpu-agent run` by
uid 65534 through the real shim's cubin_loaded probe (issue 30).

- A cubin whose compressed .debug_line inflates to 1 GiB took the agent to 4.4 GB
  when it parsed cubins itself: now a child parses it under an address-space
  limit, as nobody, and the agent stays under its RSS bound and keeps its 1 s
  windows.
- A cubin sent first under a root process's CRC named that process's PC samples'
  source lines: cubins are now their process's own."""

from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

import pytest

from gpu_agent.probes import contract as C
from gpu_agent.symbols.cubin_store import WAIT_S

from support.pprof_tool import profile_duration_s, profile_start_ns

from support.env import need_ebpf

from .faultkit import SHIM, Node

from . import attacker as A

DATA = Path(__file__).resolve().parent.parent / "data" / "pcsampling"
CUBIN = DATA / "hot_loop_sm90.cubin"
HOT = b"_Z8hot_loopPfii"
REAL_DIR = b"/work/main/bench/gpu"


def pc_script(crc: int, cubin: bytes, kernel: bytes = HOT, pc: int = 0x1D0) -> A.Script:
    """The kernel's name, its cubin under `crc`, and PC samples naming both."""
    kid = C.kernel_id(kernel)
    s = A.Script(SHIM).full_name(kid, kernel)
    s.fire("cubin_loaded", crc, s.blob(cubin), len(cubin))
    rec = C.PcRecord(cubin_crc=crc, pc_offset=pc, kernel_id=kid, stall_reason=2, samples=50)
    return s.fire("pc_sample_batch", s.blob(bytes(rec)), 1, 0)


@pytest.fixture(scope="session")
def bomb() -> bytes:
    """The H100 cubin with its .debug_line replaced by a zlib stream of 1 GiB of
    zeros (SHF_COMPRESSED, about 1 MiB on disk)."""
    from elftools.elf.elffile import ELFFile
    import io

    data = bytearray(CUBIN.read_bytes())
    elf = ELFFile(io.BytesIO(bytes(data)))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".debug_line")
    z = zlib.compressobj(9)
    chunk, body = bytes(1 << 20), []
    for _ in range(1024):
        body.append(z.compress(chunk))
    body.append(z.flush())
    payload = struct.pack("<IIQQ", 1, 0, 1 << 30, 1) + b"".join(body)  # Elf64_Chdr, ELFCOMPRESS_ZLIB
    offset = len(data)
    data += payload
    shoff, shentsize = elf["e_shoff"], elf["e_shentsize"]
    hdr = shoff + index * shentsize
    flags = struct.unpack_from("<Q", data, hdr + 8)[0] | 0x800  # SHF_COMPRESSED
    struct.pack_into("<Q", data, hdr + 8, flags)
    struct.pack_into("<QQ", data, hdr + 24, offset, len(payload))
    return bytes(data)


def sass_files(samples, pid: int) -> set[str]:
    """The source files of a pid's SASS frames (the frame under [stall: ...])."""
    return {
        s.files[1]
        for s in samples
        if s.labels.get("pid") == str(pid) and len(s.frames) > 1 and s.frames[0].startswith("[stall")
    }


@pytest.fixture
def quiet_node(tmp_path, built):
    """faultkit's node without discovery. The bomb's intervals' lengths are its test, so
    other workers' shim copies and their processes must add no work to its loop (a
    three-worker suite read one interval of 5.55 s against the 3.5 s bound, not seen
    alone beside three burners); the fault suite's shim is its own (faultkit.SHIM)."""
    need_ebpf()
    n = Node(tmp_path / "profiles", "--discover-interval", "0")
    yield n
    n.agent.kill()


def test_a_cubin_bomb_costs_a_child_not_the_agent(quiet_node, honest, attacker, world_dir, bomb):
    node = quiet_node
    h = honest("--paths", "cuLaunchKernel", "--duration", "9", "--sleep-ms", "5")  # profiles every second
    time.sleep(1.5)
    started = time.time_ns()
    p = A.run(attacker, SHIM, pc_script(0xB0B, bomb).sleep(4000).write(world_dir / "bomb.attack"))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    ended = time.time_ns()
    pid = int(out.split()[1])
    time.sleep(2.5)
    node.assert_up()  # peak RSS under the bound: the 1 GiB went to the child, which failed
    h.wait()
    samples = node.stop() and node.samples()
    # Intervals kept closing meanwhile, one after another over the whole attack, each
    # held up by the parse no longer than a profile waits for one (cubin_store's WAIT_S,
    # 2 s). Idle, the interval the parse ran in read 1.78-2.05 s in 5 runs and the rest
    # 1 s; in a loaded two-worker run the child's parse took about 3 s, so two intervals
    # in a row waited (2.04 and 2.10 s), each within WAIT_S, as cubin_store promises.
    # Read off the profiles' own spans once all are out, not off when their files were
    # written: an interval is held until its periods are published (one or two periods
    # late), and on a loaded two-worker run only 2 files had been written in the 7 s the
    # old check looked at, 2 s apart.
    spans = sorted((profile_start_ns(f), profile_duration_s(f)) for f in node.agent.out_dir.glob("*.pb.gz"))
    during = [(t, d) for t, d in spans if t < ended and t + d * 1e9 > started]
    # (pprof prints a duration to 10 ms)
    assert during and during[0][0] <= started and during[-1][0] + (during[-1][1] + 0.02) * 1e9 >= ended, during
    assert max(d for _, d in during) < 1 + WAIT_S + 0.5, during
    # One after another: no two overlap, and what lies between two is an interval that
    # held nothing, so wrote no profile. After a held-up interval the next boundary can
    # come at once: a run beside two CPU burners read one of 1.95 s and then a gap of
    # 50 ms, an interval in which no drain ran (the mock's job collects continuously,
    # and such rows go to the interval open at the drain). None of the job's launches
    # is left out: assert_exact.
    gaps = [(b[0] - a[0]) / 1e9 - a[1] for a, b in zip(during, during[1:])]
    assert all(-0.02 < g < 1.0 for g in gaps), (gaps, during)
    h.assert_exact(samples)
    # its samples are there, at pc offsets, with no source line
    assert sass_files(samples, pid) == {""}, sass_files(samples, pid)


def test_a_crc_sent_first_never_names_another_process_s_lines(node, honest, attacker, world_dir):
    h = honest("--paths", "cuLaunchKernel", "--duration", "9", "--sleep-ms", "5")  # profiles every second
    real = CUBIN.read_bytes()
    assert real.count(REAL_DIR) == 1
    evil = real.replace(REAL_DIR, b"/evil/injected/by/no")  # same length: the ELF holds
    crc = 0xC0FFEE
    attack_pid = A.run(attacker, SHIM, pc_script(crc, evil).sleep(1500).write(world_dir / "first.attack"))
    out, err = attack_pid.communicate(timeout=120)
    assert attack_pid.returncode == 0, err
    nobody = int(out.split()[1])
    time.sleep(1.5)  # the agent has the evil cubin, and parsed it for nobody's samples
    victim = A.run(attacker, SHIM, pc_script(crc, real).sleep(2000).write(world_dir / "victim.attack"), uid=0)
    out, err = victim.communicate(timeout=120)
    assert victim.returncode == 0, err
    root = int(out.split()[1])
    h.wait()
    samples = node.stop() and node.samples()
    assert sass_files(samples, nobody) == {"/evil/injected/by/no/pc_sampling.cu"}, sass_files(samples, nobody)
    assert sass_files(samples, root) == {"/work/main/bench/gpu/pc_sampling.cu"}, sass_files(samples, root)
