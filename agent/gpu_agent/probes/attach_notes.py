"""The attach notes: each GA_EV_PROC_ATTACH event's copy on a ring of its own
(bpf/maps.h's attach_notes), read by a thread of its own at once.

Why: the main ring's events are handled in order by the agent's loop, which on a
busy node (two agents and their workloads on two cores; a node's every GPU job
starting at once) can be seconds behind. A process that lives less than that was
gone before its attach event was handled: its maps could no longer be read, and
every native frame of its profile read `[unknown]`. The notes thread reads them
(and sets up its Python stacks) as soon as the shim has attached.

Best effort, and never the only path: a note lost (the small ring full) or
skipped leaves the process to its attach event, as before. Each process is
noted once a while (NOTE_EVERY_S): a process that fires `attach` in a loop cannot
make this thread reread its maps in a loop.
"""

from __future__ import annotations

import ctypes as ct
import threading
import time
from collections import OrderedDict
from typing import Callable

from ..system import procfs
from . import contract as C

NOTE_EVERY_S = 10.0
REMEMBERED = 4096  # pids noted lately (the oldest forgotten first)


class AttachNotes:
    """A thread polling the attach_notes ring (map fd `fd`, through libbcc `lib`),
    calling on_note(tgid, comm) on that thread for each process noted. close()
    stops it. Counters: notes (heard), noted (passed on), errors (on_note raised)."""

    def __init__(self, lib, fd: int, on_note: Callable[[int, str], None]):
        from bcc.libbcc import _RINGBUF_CB_TYPE

        self._lib, self._on_note = lib, on_note
        self._cb = _RINGBUF_CB_TYPE(self._on_raw)  # kept: libbpf calls it
        self._rb = lib.bpf_new_ringbuf(fd, self._cb, None)
        if not self._rb:
            raise OSError("cannot open the attach_notes ring buffer")
        self._seen: OrderedDict[int, float] = OrderedDict()
        self.counts = {"notes": 0, "noted": 0, "errors": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-agent-attach-notes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._lib.bpf_poll_ringbuf(self._rb, 100)  # releases the GIL while it waits

    def _on_raw(self, _ctx, data, size) -> int:
        # Runs inside libbpf's poll through ctypes: never let anything escape.
        try:
            if size < ct.sizeof(C.EvProcAttach):
                return 0
            ev = C.EvProcAttach.from_buffer_copy(ct.string_at(data, ct.sizeof(C.EvProcAttach)))
            self.counts["notes"] += 1
            tgid, now = ev.hdr.tgid, time.monotonic()
            last = self._seen.get(tgid)
            if last is not None and now - last < NOTE_EVERY_S:
                return 0
            self._seen[tgid] = now
            self._seen.move_to_end(tgid)
            while len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)
            self.counts["noted"] += 1
            self._on_note(tgid, procfs.comm_text(ev.comm))
        except Exception:
            self.counts["errors"] += 1
        return 0

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._rb and not self._thread.is_alive():
            self._lib.bpf_free_ringbuf(self._rb)
            self._rb = None
