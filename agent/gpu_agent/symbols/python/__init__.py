"""Python frames in GPU stacks: which line of the model launched each kernel.

The pieces (the BPF half is bpf/python_stack.h):
  offsets.py    where each CPython version keeps what is read (the 3.10-3.12 table,
                how the walker links frames), no process involved
  debug_offsets.py  3.13+: _Py_DebugOffsets' layout and its bytes parsed
  layout.py     find a process's CPython and compute/check its ga_py_config
  symbolize.py  name (code object, instruction) pairs from the process's memory
  merge.py      splice the Python frames into the native stack
  PythonStacks  (here) ties them to a BpfSession: configures each process when
                its shim attaches (GA_EV_PROC_ATTACH), names and merges the
                Python frames of every new stack, stops its BPF walks at exit and
                forgets it once its last profile is built.
                Thread-safe: the collector names stacks in a thread of its own
                while its poll thread reads new stacks' code objects (prefetch).

Timing: BPF can walk a process's Python stack only once the agent has stored
its config, which it does on the attach event, i.e. at cuInit, before the
first launch in practice. A launch sampled before that (or before Python
itself was initialized, for a C++ program that embeds Python later) gets a
native-only stack; the agent then configures the process as soon as one of its
stacks shows the eval loop.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from ...probes import contract as C
from .layout import Inconsistent, Layout, NotReady, probe
from .merge import is_eval_frame, merge as merge_stacks
from .offsets import UnsupportedPython
from .symbolize import PyFrameInfo, PySymbolizer

log = logging.getLogger("gpu_agent.python")

__all__ = ["PythonStacks", "Layout", "UnsupportedPython", "probe", "merge_stacks", "PyFrameInfo"]

RETRY_S = 1.0  # a process not (yet) set up is looked at again at most this often
# ... and by the poll loop (retry_due) at most this many times: a probe can fail for a
# moment (a thread or frame gone between two reads, a map read while it changes), and a
# short job's few stacks may all be named before a new one asks for a retry
MAX_TRIES = 10


@dataclass
class _Proc:
    state: str  # "python" | "none" | "unsupported" | "pending"
    layout: Optional[Layout] = None
    sym: Optional[PySymbolizer] = None
    next_try: float = 0.0
    why: str = ""
    tries: int = 0


@dataclass
class PythonStats:
    processes: int = 0  # set up for Python stacks
    unsupported: int = 0
    stacks: int = 0  # stacks that got Python frames
    frames: int = 0
    unnamed_frames: int = 0  # code object gone before it could be named
    not_set_up: int = 0  # Python processes that exited before their stacks could be set up
    versions: dict = field(default_factory=dict)  # "3.12.1" -> processes


class PythonStacks:
    """Python stacks of every process a BpfSession sees."""

    def __init__(self, session, *, enabled: bool = True):
        self.session = session
        self.enabled = enabled
        self.procs: dict[int, _Proc] = {}
        self.stats = PythonStats()
        self._warned: set = set()
        self._lock = threading.RLock()
        # (The kernel's BTF, for thread matching, is parsed beside the BPF compile:
        # BpfSession.open.)

    # -- process lifecycle ----------------------------------------------------
    def on_attach(self, pid: int) -> None:
        """The shim in pid attached: set up its Python stacks now, before its first launch."""
        if not self.enabled:
            return
        with self._lock:
            p = self.procs.get(pid)
            if p is not None and p.state == "none":
                del self.procs[pid]  # an exited process's, or one that had no Python: tries anew
            if p is None or p.state != "python":
                self._configure(pid)

    def retry_due(self) -> None:
        """The poll loop: each process whose set-up failed for now is tried again, at
        most every RETRY_S and MAX_TRIES times in all. It never waits for the lock
        (held while the collector's thread names stacks): what is due waits a poll."""
        if not self.enabled:
            return
        now = time.monotonic()

        def due(p: _Proc) -> bool:
            return p.state == "pending" and p.tries < MAX_TRIES and now >= p.next_try

        # (list() of a dict's values is one step under the GIL: no lock needed to look)
        if not any(map(due, list(self.procs.values()))) or not self._lock.acquire(blocking=False):
            return
        try:
            for pid in [pid for pid, p in self.procs.items() if due(p)]:
                self._configure(pid)
        finally:
            self._lock.release()

    def on_exit(self, pid: int) -> None:
        """pid exited: BPF stops walking its stacks (a new process may get the pid);
        the names read from its memory stay until forget(). A process whose set-up
        never succeeded is counted and said (once per reason)."""
        with self._lock:
            p = self.procs.get(pid)
            if p is not None and p.state == "pending":
                p.state = "none"  # not tried again: the pid may be another process's soon
            if p is not None and p.state == "none" and p.why:
                self.stats.not_set_up += 1
                self._warn_once(
                    "not set up: " + p.why, f"pid {pid}: Python stacks not set up ({_tries(p.tries)}): {p.why}"
                )
            if p is not None and p.state == "python":
                try:
                    self.session.del_py_config(pid)
                except Exception:
                    pass

    def forget(self, pid: int) -> None:
        with self._lock:
            p = self.procs.pop(pid, None)
            if p is None:
                return
            if p.state == "python":
                try:
                    self.session.del_py_config(pid)
                except Exception:
                    pass
            if p.sym is not None:
                log.debug("pid %d Python symbolizer: %s", pid, p.sym.stats)
                p.sym.close()

    def _configure(self, pid: int) -> None:
        p = self.procs.get(pid) or _Proc("pending")
        self.procs[pid] = p
        p.tries += 1
        p.next_try = time.monotonic() + RETRY_S
        try:
            layout = probe(pid)
        except NotReady as e:
            p.state, p.why = "pending", str(e)
            return
        except Inconsistent as e:
            if p.tries < MAX_TRIES:
                p.state, p.why = "pending", str(e)
                return
            p.state, p.why = "unsupported", str(e)
            self.stats.unsupported += 1
            self._warn_once(str(e), f"pid {pid}: {e} ({_tries(p.tries)}); its stacks stay native-only")
            return
        except UnsupportedPython as e:
            p.state, p.why = "unsupported", str(e)
            self.stats.unsupported += 1
            self._warn_once(str(e), f"pid {pid}: {e}; its stacks stay native-only")
            return
        except (OSError, ValueError) as e:  # gone, or unreadable (maybe for a moment)
            p.state, p.why = "pending", str(e)
            return
        if layout is None:
            p.state = "none"
            return
        try:
            self.session.set_py_config(pid, layout.config)
        except Exception as e:
            p.state, p.why = "unsupported", str(e)
            self._warn_once(str(e), f"pid {pid}: cannot turn on Python stacks: {e}")
            return
        p.state, p.layout = "python", layout
        p.sym = PySymbolizer(pid, layout)
        self.stats.processes += 1
        v = layout.version_str
        self.stats.versions[v] = self.stats.versions.get(v, 0) + 1
        log.debug("pid %d: Python %s (%s), %s", pid, v, layout.interpreter.path, "; ".join(layout.notes))

    def _warn_once(self, key: str, msg: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", msg)

    # -- stacks ---------------------------------------------------------------
    def prefetch(self, pid: int, stack_id: int, start: int) -> None:
        """Read the code objects of a new stack now, while the process surely exists.

        frames() names them later from the symbolizer's cache (keyed by code address
        and stamp), after the slower native symbolization."""
        with self._lock:
            self._prefetch(pid, stack_id, start)

    def _prefetch(self, pid: int, stack_id: int, start: int) -> None:
        p = self.procs.get(pid)
        if not self.enabled or p is None or p.state != "python":
            return
        try:
            st = self.session.get_py_stack(pid, stack_id, start)
            for i in range(min(st.nframes, C.PY_MAX_FRAMES) if st is not None else 0):
                fr = st.frames[i]
                p.sym.frame(fr.code, fr.stamp, fr.instr, bool(fr.flags & C.PYF_ENTRY))
        except Exception:  # defensive: frames() degrades on its own later
            log.debug("python prefetch of pid %d failed", pid, exc_info=True)

    def frames(self, pid: int, stack_id: int, start: int, native: list) -> list:
        """native (symbolize.Frame, innermost first) with its Python frames spliced in.

        Python frames come back as PyFrame; native ones unchanged.
        Never raises: on any trouble the native stack comes back as it was.
        """
        if not self.enabled:
            return native
        try:
            with self._lock:
                return self._frames(pid, stack_id, start, native)
        except Exception:  # defensive: a Python stack must never cost the native one
            log.debug("python frames of pid %d failed", pid, exc_info=True)
            return native

    def _frames(self, pid: int, stack_id: int, start: int, native: list) -> list:
        p = self.procs.get(pid)
        if p is None or p.state in ("pending", "none"):
            # Sampled before the process was set up: if this stack runs Python,
            # set it up now for the next ones.
            if (p is None or time.monotonic() >= p.next_try) and any(
                is_eval_frame(getattr(f, "function", "")) for f in native
            ):
                self._configure(pid)
            return native
        if p.state != "python":
            return native
        st = self.session.get_py_stack(pid, stack_id, start)
        if st is None or st.nframes == 0:
            return native
        n = min(st.nframes, C.PY_MAX_FRAMES)
        infos = []
        for i in range(n):
            fr = st.frames[i]
            info = p.sym.frame(fr.code, fr.stamp, fr.instr, bool(fr.flags & C.PYF_ENTRY))
            if not info.known:
                self.stats.unnamed_frames += 1
            infos.append(info)
        self.stats.stacks += 1
        self.stats.frames += n
        specs = [_Spec(PyFrame(i.function, i.filename, i.line), i.entry) for i in infos]
        merged = merge_stacks(
            native,
            specs,
            native_truncated=len(native) >= C.MAX_FRAMES,
            name_of=lambda f: f.spec.function if isinstance(f, _Spec) else getattr(f, "function", ""),
        )
        return [f.spec if isinstance(f, _Spec) else f for f in merged]

    def counters(self) -> dict:
        s = self.stats
        return {
            "python_processes": s.processes,
            "python_unsupported": s.unsupported,
            "python_stacks": s.stacks,
            "python_frames": s.frames,
            "python_unnamed_frames": s.unnamed_frames,
            "python_not_set_up": s.not_set_up,
        }


def _tries(n: int) -> str:
    return f"{n} try" if n == 1 else f"{n} tries"


class PyFrame(NamedTuple):
    """An interpreter frame of a merged stack: qualname, file and line."""

    function: str
    filename: str
    line: int


class _Spec:
    __slots__ = ("spec", "entry")

    def __init__(self, spec, entry: bool):
        self.spec = spec
        self.entry = entry
