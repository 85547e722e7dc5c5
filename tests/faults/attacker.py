"""Build the attacker (attacker.c) and write its scripts: hostile arguments for the
real shim's probe sites, placed where each site's argument specs say."""

from __future__ import annotations

import ctypes as ct
import os
import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gpu_agent.probes import contract as C
from gpu_agent.probes.stapsdt import read_probes

HERE = Path(__file__).resolve().parent
ARENA = 0x200000000
NOBODY = 65534
REGS = {name: i for i, name in enumerate("rax rbx rcx rdx rsi rdi rbp rsp r8 r9 r10 r11 r12 r13 r14 r15".split())}
_ALIASES = {
    "eax": "rax",
    "ebx": "rbx",
    "ecx": "rcx",
    "edx": "rdx",
    "esi": "rsi",
    "edi": "rdi",
    "ebp": "rbp",
    "esp": "rsp",
    "ax": "rax",
    "bx": "rbx",
    "cx": "rcx",
    "dx": "rdx",
    "si": "rsi",
    "di": "rdi",
    "bp": "rbp",
    "al": "rax",
    "bl": "rbx",
    "cl": "rcx",
    "dl": "rdx",
    "sil": "rsi",
    "dil": "rdi",
}
_SPEC = re.compile(r"^-?\d+@(?:%(\w+)|(-?\d*)\(%(\w+)\)|\$(-?\d+))$")


def build(outdir: Path) -> Path:
    outdir.mkdir(parents=True, exist_ok=True)
    exe = outdir / "attacker"
    subprocess.run(
        [os.environ.get("CC", "gcc"), "-O2", "-Wall", "-o", str(exe), str(HERE / "attacker.c"), "-ldl"], check=True
    )
    exe.chmod(0o755)
    return exe


def _reg(name: str) -> int:
    name = _ALIASES.get(name, name)
    name = re.sub(r"^(r\d+)[dwb]$", r"\1", name)
    if name not in REGS or name == "r11":
        raise ValueError(f"argument register {name} cannot be set")
    return REGS[name]


@dataclass(frozen=True)
class Site:
    pc: int
    nop_len: int
    args: tuple[str, ...]


def sites(shim: Path) -> dict[str, Site]:
    """The first site of each gpu_agent probe of the shim file."""
    data = shim.read_bytes()
    out: dict[str, Site] = {}
    for p in read_probes(str(shim)):
        if p.provider != "gpu_agent" or p.name in out:
            continue
        nop = data[p.pc_offset : p.pc_offset + 5]
        nop_len = 5 if nop == b"\x0f\x1f\x44\x00\x00" else 1 if nop[:1] == b"\x90" else 0
        if not nop_len:
            raise ValueError(f"{p.name}: no nop at its site ({nop.hex()})")
        out[p.name] = Site(p.pc, nop_len, p.args)
    return out


class Blob:
    """Bytes placed in the attacker's arena; as an argument, their address."""

    def __init__(self, data: bytes):
        self.data = data
        self.addr = 0


class Script:
    def __init__(self, shim: Path):
        self.sites = sites(shim)
        self.arena = bytearray()
        self.ops: list[bytes] = []
        self.fires = 0

    def blob(self, data: bytes) -> int:
        addr = ARENA + len(self.arena)
        self.arena += data + b"\0" * (-len(data) % 64)
        return addr

    def fire(self, probe: str, *args: int, repeat: int = 1) -> "Script":
        site = self.sites[probe]
        if len(args) != len(site.args):
            raise ValueError(f"{probe} takes {len(site.args)} arguments")
        regs = [0] * 16
        mem: list[tuple[int, int, int]] = []
        for spec, value in zip(site.args, args):
            m = _SPEC.match(spec)
            if not m:
                raise ValueError(f"{probe}: argument spec {spec!r}")
            value &= (1 << 64) - 1
            if m.group(1):
                regs[_reg(m.group(1))] = value
            elif m.group(3):
                mem.append((_reg(m.group(3)), int(m.group(2) or 0), value))
            # "$N": a constant the attacker cannot choose
        op = struct.pack("<QQQQ", 1, site.pc, site.nop_len, repeat)
        op += struct.pack("<16Q", *regs) + struct.pack("<Q", len(mem))
        op += b"".join(struct.pack("<QqQ", r, off, v) for r, off, v in mem)
        self.ops.append(op)
        self.fires += repeat
        return self

    # The contract's probes, by name and argument order (gpu_agent_probes.h).
    def batch(
        self, recs: list[C.KernelRecord], dropped: int = 0, *, count: int | None = None, repeat: int = 1
    ) -> "Script":
        arr = (C.KernelRecord * max(len(recs), 1))(*recs)
        addr = self.blob(bytes(arr)[: ct.sizeof(C.KernelRecord) * len(recs)])
        return self.fire(
            "kernel_batch",
            addr,
            len(recs) if count is None else count,
            ct.sizeof(C.KernelRecord),
            dropped,
            repeat=repeat,
        )

    def name_chunk(self, kernel_id: int, total: int, offset: int, chunk: bytes, repeat: int = 1) -> "Script":
        return self.fire("kernel_name", kernel_id, total, offset, self.blob(chunk), len(chunk), repeat=repeat)

    def full_name(self, kernel_id: int, name: bytes) -> "Script":
        for off in range(0, len(name), C.NAME_CHUNK):
            self.name_chunk(kernel_id, len(name), off, name[off : off + C.NAME_CHUNK])
        return self

    def correlation(
        self, corr: int, cbid: int, stack_id: int, frames: list[int], weight: int, launch_ns: int = 0, repeat: int = 1
    ) -> "Script":
        addr = self.blob(struct.pack(f"<{len(frames)}Q", *frames))
        return self.fire("cuda_correlation", corr, cbid, stack_id, addr, len(frames), weight, launch_ns, repeat=repeat)

    def sleep(self, ms: int) -> "Script":
        self.ops.append(struct.pack("<QQ", 2, ms))
        return self

    def wait(self) -> "Script":
        self.ops.append(struct.pack("<Q", 3))
        return self

    def write(self, path: Path) -> Path:
        arena = bytes(self.arena)
        path.write_bytes(
            struct.pack("<QQ", 0x4B43415454414147, len(arena)) + arena + b"\0" * (-len(arena) % 8) + b"".join(self.ops)
        )
        path.chmod(0o644)
        return path


def as_nobody() -> None:
    """preexec_fn: become uid/gid 65534 with no supplementary groups."""
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


def run(
    exe: Path, shim: Path, script: Path, *, uid: int = NOBODY, timeout: float = 120, stdin=None
) -> subprocess.Popen:
    """Start the attacker as `uid` (65534: nobody, no capabilities)."""
    return subprocess.Popen(
        [str(exe), str(shim), str(script)],
        stdin=stdin or subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_nobody if uid == NOBODY else None,
    )
