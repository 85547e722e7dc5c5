"""A sampled stack's frames, named once: the native frames of the shim's stack
(symbols/native.py) with the launching thread's Python frames spliced in
(symbols/python/), as the profile's FrameSpecs, cached per (pid, stack id, process
start tag); and a graph replay's site, in one label value. The profiles and the
timelines name their stacks here."""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from typing import Optional

from ..profile.pprof import FrameSpec
from ..profile.vocabulary import UNKNOWN_STACK
from ..symbols.native import Symbolizer
from ..symbols.python import PyFrame, PythonStacks

log = logging.getLogger(__name__)

# Frames skipped when naming a replay site: CUDA's own libraries and the shim.
_CUDA_LIB = re.compile(r"^lib(cuda|cudart|cupti|gpu_agent_shim|nvrtc|cublas\w*|cudnn\w*)\b")


class StackNames:
    """New stacks (tgid, stack id, process start tag) go to a thread that names
    their native frames: that can take seconds (a libtorch_cuda symbol table), and
    meanwhile the collector's poll must go on reading each new stack's Python code
    objects while its process still exists (a job of one second lost them all)."""

    def __init__(self, session, python_stacks: bool = True):
        self.session = session
        self.symbolizer = Symbolizer()
        # Python frames of launching threads (symbols/python/: BPF walks, we name and merge).
        self.python = PythonStacks(session, enabled=python_stacks)
        self._frames: dict[tuple, object] = {}
        self._queue: "queue.SimpleQueue" = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self.lock = threading.RLock()  # _frames and whole stacks' symbolization
        # Stacks named [stack unavailable]: not in BPF's stacks map when first named
        # (evicted, or never stored: drop_stack_full, drop_stack_read), and those
        # stored with no native frame (their Python frames are still spliced in).
        self.counts = {"stacks_missing": 0, "stacks_without_native": 0}
        self._missed: set[tuple] = set()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpu-agent-symbolize", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def snapshot(self, pid: int) -> None:
        """A process's maps, read at its first sight, while it exists."""
        try:
            self.symbolizer.snapshot(pid)
        except Exception:  # process already gone: stacks fall back to raw addresses
            pass

    def new_stack(self, tgid: int, stack_id: int, start: int) -> None:
        self.python.prefetch(tgid, stack_id, start)  # cheap, and needs the process alive
        self._queue.put((tgid, stack_id, start))

    def forget(self, pids: set[int]) -> None:
        with self.lock:
            for pid in pids:
                self.symbolizer.forget(pid)
                self.python.forget(pid)  # its code objects' names: kept until now
            for key in [k for k in self._frames if k[0] in pids]:
                del self._frames[key]
            self._missed = {k for k in self._missed if k[0] not in pids}

    def _run(self) -> None:
        """The symbolizing thread: names new stacks ahead of the profiles that use them."""
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self.frames(*item)
            except Exception:  # never lose the thread: the profile names it again
                log.exception("symbolizing a stack of pid %d failed", item[0])

    def frames(self, tgid: int, stack_id: int, start: int) -> list:
        """The frames of a stack of the process (tgid, start tag): a reused pid's
        stacks are another process's (contract: ga_stack_key)."""
        key = (tgid, stack_id, start)
        with self.lock:
            frames = self._frames.get(key)
            if frames is None:
                ips = self.session.get_stack(tgid, stack_id, start)
                if ips is None:
                    if key not in self._missed:  # each stack once (profiles ask again)
                        self._missed.add(key)
                        self.counts["stacks_missing"] += 1
                    return []
                if not any(ips):
                    self.counts["stacks_without_native"] += 1
                # 0: where a frame-pointer walk (a parcagpu stack) ended
                frames = self.symbolizer.symbolize(tgid, [ip for ip in ips if ip])
                # parcagpu's own callback frames (a parcagpu stack starts inside it)
                skip = self.session.parcagpu.paths if self.session.parcagpu else ()
                frames = [f for f in frames if getattr(f, "filename", None) not in skip]
                frames = self.python.frames(tgid, stack_id, start, frames)  # Python frames spliced in
                frames = [FrameSpec.python(*f) if isinstance(f, PyFrame) else f for f in frames]
                self._frames[key] = frames
            return frames

    def specs(self, tgid: int, stack_id: int, start: int) -> list:
        frames = self.frames(tgid, stack_id, start)
        return [f if isinstance(f, FrameSpec) else FrameSpec.native(f) for f in frames] or [
            FrameSpec.marker(UNKNOWN_STACK)
        ]

    def replay_site(self, tgid: int, stack_id: int, start: int) -> str:
        """Where a graph was launched from, in one label value: the innermost
        Python frame outside torch (`fn (file:line)`), else the innermost native
        frame outside CUDA's libraries and the shim."""
        key = (tgid, stack_id, start, "site")
        with self.lock:
            site = self._frames.get(key)
        if site is not None:
            return site
        frames = self.frames(tgid, stack_id, start)
        site = UNKNOWN_STACK
        py = [
            f for f in frames if isinstance(f, FrameSpec) and f.mapping is not None and f.mapping.filename == "[python]"
        ]
        for f in py:
            if "/torch/" not in f.filename:
                site = f"{f.function} ({os.path.basename(f.filename)}:{f.line})"
                break
        else:
            for f in frames:
                if isinstance(f, FrameSpec):
                    continue
                if not _CUDA_LIB.match(os.path.basename(getattr(f, "filename", "") or "")):
                    site = f.function
                    break
        with self.lock:
            self._frames[key] = site
        return site
