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

from .faultkit import SHIM

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


def test_a_cubin_bomb_costs_a_child_not_the_agent(node, honest, attacker, world_dir, bomb):
    h = honest("--paths", "cuLaunchKernel", "--duration", "9", "--sleep-ms", "5")  # profiles every second
    time.sleep(1.5)
    started = time.monotonic()
    p = A.run(attacker, SHIM, pc_script(0xB0B, bomb).sleep(4000).write(world_dir / "bomb.attack"))
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    pid = int(out.split()[1])
    time.sleep(2.5)
    node.assert_up()  # peak RSS under the bound: the 1 GiB went to the child, which failed
    # windows kept closing every second meanwhile (the parse never held a profile up)
    stamps = sorted(f.stat().st_mtime for f in node.agent.out_dir.glob("*.pb.gz"))
    recent = [t for t in stamps if t >= time.time() - (time.monotonic() - started)]
    assert len(recent) >= 4 and max(b - a for a, b in zip(recent, recent[1:])) < 3.5, recent
    h.wait()
    samples = node.stop() and node.samples()
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
