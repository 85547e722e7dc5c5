"""The cubins processes hand the agent (PC sampling's line tables), kept and
parsed within bounds.

A cubin's address, size and CRC come from a process's probe, and its bytes from
that process's memory: all hostile. So:
- each is keyed by the process (tgid, start tag) and the CRC it claims: one
  process's claim never names another's cubin; identical bytes (their sha256)
  share one line table;
- one cubin is read only up to MAX_CUBIN_BYTES; cubins read and not parsed yet
  hold at most PROC_PENDING_BYTES a process and PENDING_BYTES in all (the oldest
  go first, counted);
- a cubin is parsed only once a sample names it, in a child process under
  address-space, CPU-time and wall-clock limits, as nobody (cubin.py's
  parse_bounded), on a worker thread: a decompression or line-program bomb costs
  the child, never the agent, and never holds a profile up longer than WAIT_S;
  samples whose table is not ready then keep their pc offsets (counted);
- line tables are kept for MAX_TABLES distinct cubins.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from collections import Counter, OrderedDict
from typing import Optional

from .cubin import LineTable, parse_bounded
from ..system.procmem import ProcMem, ProcMemError

log = logging.getLogger(__name__)

MAX_CUBIN_BYTES = 64 << 20  # one cubin larger than this is not read
PROC_PENDING_BYTES = 64 << 20  # read, not parsed yet, per process
PENDING_BYTES = 256 << 20  # the same, for all processes
MAX_TABLES = 1024
MAX_KEYS = 65536  # (process, claimed CRC) pairs remembered
WAIT_S = 2.0  # a profile waits this long at most for parses

Key = tuple[int, int, int]  # tgid, start tag, claimed CRC


class CubinStore:
    def __init__(self, proc_root: str = "/proc", parse=parse_bounded):
        self.proc_root = proc_root
        self._parse = parse
        self.counts: Counter = Counter()
        self._lock = threading.Lock()
        self._digest: "OrderedDict[Key, bytes]" = OrderedDict()  # key -> sha256 of its bytes
        self._pending: "OrderedDict[bytes, tuple[int, bytes]]" = OrderedDict()  # digest -> (tgid, bytes)
        self._tables: "OrderedDict[bytes, LineTable]" = OrderedDict()
        self._asked: set[bytes] = set()  # queued or being parsed
        self._queue: "queue.Queue[tuple[bytes, bytes]]" = queue.Queue()
        self._idle = threading.Condition(self._lock)
        threading.Thread(target=self._work, name="cubin-parse", daemon=True).start()

    # -- the probe: read now (a short job may be gone by the profile's end) --
    def on_cubin(self, tgid: int, start: int, crc: int, address: int, size: int) -> None:
        key = (tgid, start, crc)
        with self._lock:
            if key in self._digest:
                return
        if not 0 < size <= MAX_CUBIN_BYTES:
            self.counts["agent_cubins_unreadable"] += 1
            return
        try:
            mem = ProcMem(tgid, self.proc_root)
            try:
                data = mem.read(address, size)
            finally:
                mem.close()
        except ProcMemError as e:
            log.debug("cubin %#x of pid %d: %s", crc, tgid, e)
            self.counts["agent_cubins_unreadable"] += 1
            return
        digest = hashlib.sha256(data).digest()
        with self._lock:
            self._digest[key] = digest
            while len(self._digest) > MAX_KEYS:
                self._digest.popitem(last=False)
            self.counts["agent_cubins_read"] += 1
            if digest in self._tables or digest in self._pending or digest in self._asked:
                return
            self._pending[digest] = (tgid, data)
            self._evict(tgid)

    def _evict(self, tgid: int) -> None:
        """Within the bounds: this process's oldest first, then anyone's. (lock held)"""
        mine = [d for d, (t, _) in self._pending.items() if t == tgid]
        held = sum(len(self._pending[d][1]) for d in mine)
        while held > PROC_PENDING_BYTES and len(mine) > 1:
            d = mine.pop(0)
            held -= len(self._pending.pop(d)[1])
            self.counts["agent_cubins_evicted"] += 1
        while sum(len(v[1]) for v in self._pending.values()) > PENDING_BYTES and len(self._pending) > 1:
            self._pending.popitem(last=False)
            self.counts["agent_cubins_evicted"] += 1

    # -- samples name cubins: parse those --------------------------------------
    def want(self, tgid: int, start: int, crc: int) -> None:
        """A sample names this cubin: parse it (once) on the worker."""
        with self._lock:
            digest = self._digest.get((tgid, start, crc))
            if digest is None or digest in self._tables or digest in self._asked:
                return
            item = self._pending.pop(digest, None)
            if item is None:
                return
            self._asked.add(digest)
        self._queue.put((digest, item[1]))

    def _work(self) -> None:
        while True:
            digest, data = self._queue.get()
            t0 = time.monotonic()
            table, why = self._parse(data)
            del data
            with self._lock:
                if why:
                    self.counts["agent_cubins_unparsed"] += 1
                    log.debug("cubin %s not parsed: %s", digest.hex()[:16], why)
                self._tables[digest] = table
                while len(self._tables) > MAX_TABLES:
                    self._tables.popitem(last=False)
                self._asked.discard(digest)
                self.counts["agent_cubin_parse_ms"] += int(1000 * (time.monotonic() - t0))
                self._idle.notify_all()

    def wait(self, timeout: float = WAIT_S) -> bool:
        """Until every asked parse is done, at most timeout; whether they all are."""
        end = time.monotonic() + timeout
        with self._lock:
            while self._asked:
                left = end - time.monotonic()
                if left <= 0:
                    self.counts["agent_cubin_waits_cut"] += 1
                    return False
                self._idle.wait(left)
        return True

    def table(self, tgid: int, start: int, crc: int) -> Optional[LineTable]:
        with self._lock:
            digest = self._digest.get((tgid, start, crc))
            t = self._tables.get(digest) if digest is not None else None
            if t is not None:
                self._tables.move_to_end(digest)
            return t

    def forget(self, pids: set[int]) -> None:
        with self._lock:
            for key in [k for k in self._digest if k[0] in pids]:
                del self._digest[key]
            for d in [d for d, (t, _) in self._pending.items() if t in pids]:
                heir = next((k[0] for k, v in self._digest.items() if v == d), None)
                if heir is None:  # no live process has these bytes
                    del self._pending[d]
                else:
                    self._pending[d] = (heir, self._pending[d][1])
