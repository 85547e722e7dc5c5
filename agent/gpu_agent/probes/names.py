"""Kernel names from the shim's kernel_name probes: assembled, checked, bounded.

Any local process can fire the shim's probes (they are attached by path), so every
chunk is hostile until proven otherwise:
- a chunk must sit where the shim puts one (offset a multiple of GA_NAME_CHUNK, the
  full chunk length but for the last), so a name has at most total / GA_NAME_CHUNK
  chunks and is assembled once, in linear time, when the last one arrives;
- a finished name must hash to its kernel id (FNV-1a 64 of the mangled name, cut
  at GA_MAX_NAME_LEN like the name itself: the contract's definition), so a process
  cannot rename another process's kernels; but for parcagpu's kernels, whose ids
  BPF derives from the process and the name's address (gpu_agent_parcagpu.h) and
  whose chunks only BPF flags unverified: no other process can reach those ids;
- unfinished names are bounded in bytes and in number, and finished ones in bytes:
  the least recently used go first, and every eviction is counted. A name that a
  drain or a profile used in the current or the last drain period is never pushed
  out: past the bound, the new name is refused instead (counted the same way). So
  a flood of names that no kernel record uses pushes out no name that the profiles
  use, even while the agent is too busy to drain.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterator, Mapping

from . import contract as C

MAX_PENDING_NAMES = 4096
MAX_PENDING_BYTES = 8 << 20  # unfinished names (16 names of 512 KiB worst case: 64 KiB each)
MAX_NAME_BYTES = 64 << 20  # finished names kept; about 64 k names of 1 KiB


class _Pending:
    __slots__ = ("total", "chunks", "verified")

    def __init__(self, total: int, verified: bool):
        self.total = total
        self.verified = verified
        self.chunks: dict[int, bytes] = {}

    def need(self) -> int:
        return -(-self.total // C.NAME_CHUNK)


class KernelNames(Mapping[int, bytes]):
    """kernel_id -> mangled name (bytes), fed chunk by chunk."""

    def __init__(self, counts: dict[str, int]):
        self._names: OrderedDict[int, bytes] = OrderedDict()
        self._used: dict[int, int] = {}  # kernel_id -> drain period it was last used in
        self._period = 0
        self._bytes = 0
        self._pending: OrderedDict[int, _Pending] = OrderedDict()
        self._pending_bytes = 0
        self.counts = counts  # the session's agent-side counters, updated in place
        for k in (
            "ev_corrupt",
            "drop_name_conflict",
            "names_complete",
            "drop_name_spoofed",
            "drop_names_evicted",
            "drop_pending_names_evicted",
        ):
            counts.setdefault(k, 0)

    # -- Mapping -------------------------------------------------------------
    def __getitem__(self, kernel_id: int) -> bytes:
        return self._names[kernel_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def lookup(self, kernel_id: int) -> bytes | None:
        """The name of a kernel that a profile uses: kept longest under eviction."""
        name = self._names.get(kernel_id)
        if name is not None:
            self._names.move_to_end(kernel_id)
            self._used[kernel_id] = self._period
        return name

    def drained(self, kernel_ids) -> None:
        """A drain read records of these kernels: their names are used now, and a
        drain period ends."""
        for kernel_id in kernel_ids:
            self.lookup(kernel_id)
        self._period += 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- intake --------------------------------------------------------------
    def chunk(
        self, kernel_id: int, total: int, offset: int, length: int, payload: bytes, verified: bool = True
    ) -> None:
        if kernel_id in self._names:
            return  # replay after an attach, or a second process: ids are name hashes
        if (
            kernel_id == 0
            or total == 0
            or total > C.MAX_NAME_LEN
            or length > len(payload)
            or offset % C.NAME_CHUNK
            or offset >= total
            or length != min(C.NAME_CHUNK, total - offset)
        ):
            self.counts["ev_corrupt"] += 1
            return
        p = self._pending.get(kernel_id)
        if p is not None and (p.total != total or p.verified != verified):
            self.counts["drop_name_conflict"] += 1
            self._drop_pending(kernel_id)
            p = None
        if p is None:
            p = self._pending[kernel_id] = _Pending(total, verified)
        if offset not in p.chunks:
            p.chunks[offset] = payload[:length]
            self._pending_bytes += length
        if len(p.chunks) == p.need():
            self._drop_pending(kernel_id)
            self._finish(kernel_id, b"".join(p.chunks[o] for o in range(0, total, C.NAME_CHUNK)), p.verified)
        self._bound_pending()

    def unverified(self, kernel_id: int, name: bytes) -> None:
        """A parcagpu name the agent read itself (cold_names.py): its id, like its
        chunks', is BPF's, which no other process can reach."""
        if kernel_id and kernel_id not in self._names and 0 < len(name) <= C.MAX_NAME_LEN:
            self._drop_pending(kernel_id)
            self._finish(kernel_id, name, False)

    def _finish(self, kernel_id: int, name: bytes, verified: bool) -> None:
        if verified and C.kernel_id(name) != kernel_id:
            self.counts["drop_name_spoofed"] += 1
            return
        self._names[kernel_id] = name
        self._used[kernel_id] = self._period
        self._bytes += len(name)
        self.counts["names_complete"] += 1
        while self._bytes > MAX_NAME_BYTES and self._names:
            # Oldest first: the order is by last use, so if the oldest is in use, all are.
            oldest = next(iter(self._names))
            if self._used[oldest] >= self._period - 1:
                oldest = kernel_id  # all in use: the new name goes
            self._bytes -= len(self._names.pop(oldest))
            del self._used[oldest]
            self.counts["drop_names_evicted"] += 1
            if oldest == kernel_id:
                break

    def _drop_pending(self, kernel_id: int) -> None:
        p = self._pending.pop(kernel_id, None)
        if p is not None:
            self._pending_bytes -= sum(len(c) for c in p.chunks.values())

    def _bound_pending(self) -> None:
        while self._pending and (len(self._pending) > MAX_PENDING_NAMES or self._pending_bytes > MAX_PENDING_BYTES):
            self._drop_pending(next(iter(self._pending)))
            self.counts["drop_pending_names_evicted"] += 1
