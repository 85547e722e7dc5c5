"""Offsets of kernel struct members from the running kernel's BTF (/sys/kernel/btf/vmlinux).

bcc would compile `task->thread.fsbase` or `task->group_leader->comm` against the
installed kernel headers, whose layout need not be the running kernel's (a 6.1
header package on a 6.18 kernel reads the wrong word), so the offsets come from
the kernel's own BTF instead and the BPF program reads them with
bpf_probe_read_kernel(). Two readers:
- the Python walker matches thread states by pthread_self(), which on x86_64 is
  the thread's fs base: task_struct.thread.fsbase;
- a process's attach event carries its name, its group leader's comm: the shim's
  poller thread (named ga-shim-poll) may be the one that fires it.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass
from typing import Optional

VMLINUX = "/sys/kernel/btf/vmlinux"
BTF_MAGIC = 0xEB9F

# kind -> bytes of extra data after struct btf_type (per vlen item where noted)
_KIND_STRUCT, _KIND_UNION = 4, 5
_TYPEDEF_LIKE = {8, 9, 10, 11, 18}  # typedef, volatile, const, restrict, type_tag


class BtfError(Exception):
    pass


class Btf:
    def __init__(self, data: bytes):
        if len(data) < 24:
            raise BtfError("BTF too short")
        magic, _ver, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
        if magic != BTF_MAGIC:
            raise BtfError("not little-endian BTF")
        type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", data, 8)
        self._types = data[hdr_len + type_off : hdr_len + type_off + type_len]
        self._strs = data[hdr_len + str_off : hdr_len + str_off + str_len]
        self._offs = [0]  # type id -> offset in _types (id 0 = void)
        self._by_name: dict[str, list[int]] = {}
        self._index()

    def _name(self, off: int) -> str:
        end = self._strs.find(b"\0", off)
        return self._strs[off:end].decode("ascii", "replace")

    def _index(self) -> None:
        t, pos, n = self._types, 0, len(self._types)
        while pos + 12 <= n:
            name_off, info, _size = struct.unpack_from("<III", t, pos)
            kind = (info >> 24) & 0x1F
            vlen = info & 0xFFFF
            tid = len(self._offs)
            self._offs.append(pos)
            if kind in (_KIND_STRUCT, _KIND_UNION) and name_off:
                self._by_name.setdefault(self._name(name_off), []).append(tid)
            pos += 12
            if kind == 1 or kind == 14 or kind == 17:  # INT, VAR, DECL_TAG
                pos += 4
            elif kind == 3:  # ARRAY
                pos += 12
            elif kind in (4, 5):  # STRUCT, UNION
                pos += 12 * vlen
            elif kind == 6 or kind == 13:  # ENUM, FUNC_PROTO
                pos += 8 * vlen
            elif kind == 15 or kind == 19:  # DATASEC, ENUM64
                pos += 12 * vlen
            elif kind in (2, 7, 8, 9, 10, 11, 12, 16, 18):
                pass
            else:
                raise BtfError(f"unknown BTF kind {kind}")

    def _type(self, tid: int) -> tuple[int, int, int, int, int]:
        pos = self._offs[tid]
        name_off, info, size = struct.unpack_from("<III", self._types, pos)
        return (info >> 24) & 0x1F, info & 0xFFFF, info >> 31, size, pos

    def _resolve(self, tid: int) -> int:
        for _ in range(32):
            kind, _, _, ref, _ = self._type(tid)
            if kind not in _TYPEDEF_LIKE:
                return tid
            tid = ref
        return tid

    def _member(self, tid: int, name: str) -> Optional[tuple[int, int]]:
        """(byte offset, member type id) of name in struct/union tid, through anonymous members."""
        kind, vlen, kflag, _, pos = self._type(self._resolve(tid))
        if kind not in (_KIND_STRUCT, _KIND_UNION):
            return None
        for i in range(vlen):
            m_name, m_type, m_off = struct.unpack_from("<III", self._types, pos + 12 + 12 * i)
            bit = m_off & 0xFFFFFF if kflag else m_off
            if m_name and self._name(m_name) == name:
                return bit // 8, m_type
            if not m_name:
                sub = self._member(m_type, name)
                if sub is not None:
                    return bit // 8 + sub[0], sub[1]
        return None

    def offset(self, struct_name: str, path: list[str]) -> Optional[int]:
        for tid in self._by_name.get(struct_name, []):
            off, cur = 0, tid
            for name in path:
                got = self._member(cur, name)
                if got is None:
                    break
                off += got[0]
                cur = got[1]
            else:
                return off
        return None


@dataclass(frozen=True)
class TaskOffsets:
    """Byte offsets in the running kernel's struct task_struct; None: not known."""

    fsbase: Optional[int] = None  # thread.fsbase (x86_64)
    group_leader: Optional[int] = None  # the thread group's leader (a pointer)
    comm: Optional[int] = None  # char comm[16]


_lock = threading.Lock()
_parsed: dict[str, TaskOffsets] = {}


def task_offsets(path: str = VMLINUX) -> TaskOffsets:
    """TaskOffsets of the running kernel, parsed once (~0.3 s; callers in several
    threads wait for the one parse)."""
    with _lock:
        got = _parsed.get(path)
        if got is None:
            try:
                with open(path, "rb") as f:
                    btf = Btf(f.read())
                got = TaskOffsets(
                    btf.offset("task_struct", ["thread", "fsbase"]),
                    btf.offset("task_struct", ["group_leader"]),
                    btf.offset("task_struct", ["comm"]),
                )
            except (OSError, BtfError, struct.error):
                got = TaskOffsets()
            _parsed[path] = got
        return got
