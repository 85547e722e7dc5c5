"""A process that `gpu-agent trace` writes its capture deadline into, checked.

The agent is root and writes 8 bytes into the target's memory (the shim's exported
`gpu_agent_trace_until_ns`, through /proc/PID/mem). The target's owner is not
trusted: it may exec a setuid program, or swap files, while the capture starts. So:
- /proc/PID/mem is opened first, and every write goes through that one descriptor:
  it is bound to the process image of that moment, and after an exec a write
  through it fails instead of landing in the new image;
- the shim's address comes from the file the process maps (opened without
  blocking, a regular file, its inode the mapped one), and is then checked through
  that same descriptor: the image it is bound to must hold that file's first page
  at the shim's base;
- a process running in secure mode (AT_SECURE: setuid, setgid, file capabilities)
  is refused.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import Optional, Union

from elftools.elf.elffile import ELFFile

from ..system import elf, procfs, safe_open

NO_SHIM = "it runs no gpu-agent shim that takes captures"
NOT_MAPPED = "it maps no gpu-agent shim"  # (yet: a process just started may load it soon)

TRACE_SYMBOL = "gpu_agent_trace_until_ns"
AT_SECURE = 23


def _secure(pid: int) -> Optional[bool]:
    try:
        with open(f"/proc/{pid}/auxv", "rb") as f:
            data = f.read(1 << 16)
    except OSError:
        return None
    for i in range(0, len(data) - 15, 16):
        key, value = struct.unpack_from("<QQ", data, i)
        if key == AT_SECURE:
            return bool(value)
        if key == 0:
            break
    return False


class TraceTarget:
    def __init__(self, pid: int, reach: str, addr: int, mem_fd: int):
        self.pid, self.reach, self.addr, self._fd = pid, reach, addr, mem_fd

    @classmethod
    def open(cls, pid: int) -> Union["TraceTarget", str]:
        """The checked target, or why not."""
        try:
            fd = os.open(f"/proc/{pid}/mem", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            return "gone" if e.errno == 2 else f"its memory cannot be opened: {e.strerror}"
        try:
            found = cls._find(pid, fd)
        except Exception:
            os.close(fd)
            raise
        if isinstance(found, str):
            os.close(fd)
            return found
        return cls(pid, found[0], found[1], fd)

    @staticmethod
    def _find(pid: int, mem_fd: int):
        secure = _secure(pid)
        if secure is None:
            return "gone"
        if secure:
            return "it runs in secure mode (setuid, setgid or file capabilities)"
        maps = procfs.read_maps(pid)
        if maps is None:
            return "gone"
        by_file: dict[tuple, list] = {}
        for m in maps:
            if m.file_backed and "libgpu_agent_shim" in os.path.basename(m.path):
                by_file.setdefault((m.path, m.inode), []).append(m)
        for (path, inode), ms in by_file.items():
            reach = f"/proc/{pid}/root{path}"
            # The file the process maps, and nothing else: a FIFO or device swapped in at
            # that path must not block the agent, a different file must not be read.
            opened = safe_open.open_regular(reach)
            if opened is None:
                continue
            fd, st = opened
            if st.st_ino != inode:
                os.close(fd)
                continue
            try:
                with os.fdopen(fd, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
                    e = ELFFile(f)
                    vaddr = elf.find_symbols(e, mm, (TRACE_SYMBOL,), (".dynsym",)).get(TRACE_SYMBOL)
                    bias = elf.load_bias(elf.load_segments(e), [(m.start, m.offset) for m in ms])
                    head = bytes(mm[:4096])
            except (OSError, ValueError):
                continue
            if vaddr is None or bias is None:
                continue
            base = next((m.start for m in ms if m.offset == 0), None)
            try:  # the image the descriptor is bound to maps this very file there
                seen = os.pread(mem_fd, len(head), base) if base is not None else b""
            except OSError:
                seen = b""
            if seen != head:
                return "its memory changed while it was checked (an exec?)"
            return reach, bias + vaddr
        return NO_SHIM if by_file else NOT_MAPPED

    def write(self, deadline_ns: int) -> bool:
        """The deadline into the checked image; False if that image is gone."""
        try:
            return os.pwrite(self._fd, struct.pack("<Q", deadline_ns), self.addr) == 8
        except (OSError, OverflowError):  # an address past an off_t (procmem.OFF_MAX)
            return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
