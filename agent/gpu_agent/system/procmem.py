"""Read another process's memory through /proc/PID/mem (root; no ptrace stop).

Every read may fail (the process exits, the page is unmapped): callers get
ProcMemError and must degrade, never crash.
"""

from __future__ import annotations

import os
import struct


class ProcMemError(OSError):
    def __str__(self) -> str:  # the message alone ("[Errno 0] ..." said nothing)
        return self.strerror or super().__str__()


# The highest offset pread takes (an off_t): no user address is above it, and a
# pointer read from a process may be anything (one >= 2**63 raised OverflowError,
# not OSError, and `record` died of it on an H200: tests/faults/test_python_frames.py).
OFF_MAX = (1 << 63) - 1


class ProcMem:
    def __init__(self, pid: int, proc_root: str = "/proc"):
        self.pid = pid
        try:
            self._fd = os.open(f"{proc_root}/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise ProcMemError(e.errno, f"cannot open memory of pid {pid}: {e.strerror}") from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def read(self, addr: int, n: int) -> bytes:
        if addr <= 0 or n < 0 or addr + n > OFF_MAX:
            raise ProcMemError(0, f"bad address {addr:#x}")
        try:
            data = os.pread(self._fd, n, addr)
        except OSError as e:
            raise ProcMemError(e.errno, f"pid {self.pid}: read {n} bytes at {addr:#x}: {e.strerror}") from None
        if len(data) != n:
            raise ProcMemError(0, f"pid {self.pid}: short read at {addr:#x}")
        return data

    def u64(self, addr: int) -> int:
        return struct.unpack("<Q", self.read(addr, 8))[0]

    def u32(self, addr: int) -> int:
        return struct.unpack("<I", self.read(addr, 4))[0]

    def i32(self, addr: int) -> int:
        return struct.unpack("<i", self.read(addr, 4))[0]

    def u8(self, addr: int) -> int:
        return self.read(addr, 1)[0]
