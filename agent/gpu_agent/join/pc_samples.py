"""PC samples with stall reasons (opt-in: the shim's GPU_AGENT_PC_SAMPLING=1).

The shim drains CUPTI's PC samples after each collection window and fires them
as pc_sample_batch probes (shim/src/pcsampling.cpp); BPF passes each batch on
(bpf/pcsampling.h), with the stall reasons' names and the modules' cubins
(address and size in the process, read here from /proc/PID/mem). This module
keeps one window's samples, the names and the line tables (cubin.py), and says
how each sample's frames read under its kernel:

    CUDA_KERNEL kernel -> SASS function+offset (file:line) -> [stall: reason]

The collector puts them under the kernel's launch stacks (collector.py).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, OrderedDict
from typing import Optional

from ..probes import contract as C
from ..symbols.cubin import LineTable
from ..symbols.cubin_store import CubinStore
from ..symbols.demangle import demangle_kernel
from ..profile.pprof import FrameSpec, MappingSpec

log = logging.getLogger(__name__)

STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
# CUPTI pairs each stall reason with "<reason>_not_issued", a subset of it (the
# H100 showed it; docs/benchmarks.md): adding both would count samples twice.
NOT_ISSUED_SUFFIX = "_not_issued"
STALL_LABEL = "stall_reason"
MAX_NAMES = 65536  # parcagpu PCs' kernel names kept
# Seconds a kernel's samples wait for its records (PcSamples.held), then go under
# [unsampled]: a CUPTI activity buffer's records come when it fills, at a flush or at
# the process's exit (which ends the wait), seconds after the PC drain of the same
# launches where launches are few. In seconds, not profiles: three profiles of 1 s
# (the bound until 2026-11-29) ended before a loaded suite's job had exited 1.5 s
# after its last launch (400 000 samples under [unsampled]); three of the default
# 10 s are this.
HOLD_S = 30.0
COMMENT = (
    "pc_samples: the GPU's program-counter samples (CUPTI PC sampling: the shim's "
    "GPU_AGENT_PC_SAMPLING=1, in its collection windows, not scaled to the whole run; "
    "or parcagpu's, as it passes them on). CUPTI's continuous mode does not say "
    "which launch a sample came from, so each kernel's samples are split over its "
    "launch stacks in proportion to their GPU time in the same profile. Stall reasons ending in "
    "_not_issued are subsets of their reason and are left out"
)

# (tgid, start tag, kernel id, cubin crc, pc offset, stall reason index)
Key = tuple[int, int, int, int, int, int]


class PcSamples:
    def __init__(self, proc_root: str = "/proc", clock=time.monotonic):
        self.proc_root = proc_root
        self.clock = clock
        self.window: "Counter[Key]" = Counter()
        self.reasons: dict[tuple[int, int], str] = {}  # (tgid, index) -> CUPTI's name
        self.cubins = CubinStore(proc_root)
        self.pg_names: "OrderedDict[int, str]" = OrderedDict()  # parcagpu PCs' kernels: id -> name
        # Samples of a kernel that had no rows in the last profile, held for the next
        # ones (HOLD_S at most): CUPTI hands PC samples and kernel records over
        # on two paths (a PC drain after some launches; an activity buffer when full,
        # flushed or at exit, later), so an interval's end can fall between a kernel's
        # samples and its records, and the samples would find no launch stacks.
        self.held: "Counter[Key]" = Counter()
        self.held_for: dict[Key, float] = {}  # when each held key was first held (clock)
        self._cut = Counter()  # reasons parcagpu cut

    # -- events (BpfSession callbacks) --------------------------------------
    def on_batch(self, ev: C.EvPcBatch) -> None:
        for i in range(min(ev.nrecords, C.PC_BATCH_MAX)):
            r = ev.records[i]
            key = (ev.hdr.tgid, ev.start, r.kernel_id, r.cubin_crc, r.pc_offset, r.stall_reason)
            if key not in self.window:
                self.cubins.want(ev.hdr.tgid, ev.start, r.cubin_crc)
            self.window[key] += r.samples

    def on_pg_pc(self, ev: C.EvPgPc) -> None:
        """One PC of a parcagpu pc_sample_batch. Its kernel is named, not numbered:
        it goes in the window under the id a shim gives that name, and
        add_to_profile finds the process's kernel of that name (parcagpu's kernel
        ids are its name strings' addresses)."""
        name = bytes(ev.name[: min(ev.name_len, C.PG_PC_NAME - 1)])
        kernel_id = C.kernel_id(name) if name else 0
        if kernel_id:
            self.pg_names[kernel_id] = name.decode("utf-8", "replace")
            self.pg_names.move_to_end(kernel_id)
            if len(self.pg_names) > MAX_NAMES:
                self.pg_names.popitem(last=False)
        self._cut["agent_pc_reasons_cut"] += ev.reasons_cut
        for i in range(min(ev.nreasons, C.PG_PC_REASONS)):
            r = ev.reasons[i]
            if r.samples:
                key = (ev.hdr.tgid, ev.start, kernel_id, ev.cubin_crc, ev.pc_offset, r.index)
                if key not in self.window:
                    self.cubins.want(ev.hdr.tgid, ev.start, ev.cubin_crc)
                self.window[key] += r.samples

    def on_stall_reason(self, ev: C.EvStallReason) -> None:
        name = ev.name.split(b"\0", 1)[0].decode("utf-8", "replace")
        self.reasons[(ev.hdr.tgid, ev.index)] = name

    def on_cubin(self, ev: C.EvCubin) -> None:
        """Read the shim's copy now (a short job may be gone by the profile's end);
        parse it only if a sample needs it (cubin_store.py)."""
        self.cubins.on_cubin(ev.hdr.tgid, ev.start, ev.cubin_crc, ev.address, ev.size)

    # -- the window ------------------------------------------------------------
    def take(self) -> Counter:
        """The window's samples (and a new, empty window)."""
        w, self.window = self.window, Counter()
        return w

    def take_held(self) -> tuple[Counter, dict]:
        """The samples the last profile held for this one, and when each was first
        held."""
        h, self.held = self.held, Counter()
        w, self.held_for = self.held_for, {}
        return h, w

    def reason(self, tgid: int, index: int) -> Optional[str]:
        """The short name of a stall reason ("long_scoreboard"); None for a
        _not_issued one (left out)."""
        name = self.reasons.get((tgid, index))
        if name is None:
            return f"reason {index}"
        if name.endswith(NOT_ISSUED_SUFFIX):
            return None
        return name[len(STALL_PREFIX) :] if name.startswith(STALL_PREFIX) else name

    @property
    def counts(self) -> Counter:
        """cubins read, unreadable, evicted unparsed, not parsed (their samples keep
        offsets only); parcagpu's cut reasons."""
        return self.cubins.counts + self._cut

    def line_table(self, tgid: int, start: int, crc: int) -> Optional[LineTable]:
        """The line table of the cubin this process named crc, once parsed."""
        return self.cubins.table(tgid, start, crc)

    def sass_frame(self, tgid: int, start: int, mangled: str, demangled: str, crc: int, pc: int) -> FrameSpec:
        """The instruction's frame: function+offset, with its source line where the
        cubin has line info; in a mapping named by the cubin's CRC."""
        table = self.line_table(tgid, start, crc) if mangled else None
        where = table.lookup(mangled, pc) if table else None
        path, line = where if where else ("", 0)
        mapping = MappingSpec(
            f"[cubin {crc:016x}]", has_functions=True, has_filenames=bool(path), has_line_numbers=bool(line)
        )
        return FrameSpec(f"{demangled}+{pc:#x}", f"{mangled}+{pc:#x}", path, line, pc, mapping)

    def forget(self, pids: set[int]) -> None:
        for key in [k for k in self.reasons if k[0] in pids]:
            del self.reasons[key]
        for key in [k for k in self.held if k[0] in pids]:
            del self.held[key]
            self.held_for.pop(key, None)
        self.cubins.forget(pids)


def stall_frame(reason: str) -> FrameSpec:
    return FrameSpec.marker(f"[stall: {reason}]")


def split(n: int, weights: list[int]) -> list[int]:
    """n as integers in proportion to weights (largest remainders first); all to the
    first when every weight is 0."""
    total = sum(weights)
    if total <= 0:
        return [n] + [0] * (len(weights) - 1)
    shares = [n * w // total for w in weights]
    rest = n - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-(n * weights[i] % total), i))
    for i in order[:rest]:
        shares[i] += 1
    return shares


def add_to_profile(
    pcs: PcSamples,
    kernel_stacks: dict,
    kernel_name,
    base_labels,
    add,
    included=lambda tgid: True,
    may_hold=lambda tgid: False,
) -> int:
    """Put the window's samples into a profile; returns how many went in.

    kernel_stacks: (tgid, start tag, kernel id) -> [(frames leaf first, from the
    kernel's leaf down; labels; GPU ns)], the kernel's rows of the same profile;
    kernel_name(kernel_id) -> (demangled, mangled); base_labels(tgid) -> the labels
    of a kernel with no rows; add(tgid, frames, labels, samples); included(tgid):
    whether the profile covers that process (`record` keeps its command's);
    may_hold(tgid): whether samples of a kernel with no rows here may wait for the
    next profiles (PcSamples.held, HOLD_S at most: not in the last profile,
    nor for a process that has exited, whose records are all in)."""
    from ..profile.vocabulary import UNSAMPLED

    added = 0
    by_name: dict = {}  # (tgid, start, mangled name) -> kernel id, built when needed
    window, (held, waited) = pcs.take(), pcs.take_held()
    if window or held:
        pcs.cubins.wait()  # the parses its samples asked for, within bounds
    now = pcs.clock()
    items = [(key, n, now) for key, n in window.items()] + [(key, n, waited.get(key, now)) for key, n in held.items()]
    for key, n, since in sorted(items):
        tgid, start, kernel_id, crc, pc, index = key
        reason = pcs.reason(tgid, index)
        if reason is None or n <= 0 or not included(tgid):
            continue
        named = pcs.pg_names.get(kernel_id)
        if named is not None and (tgid, start, kernel_id) not in kernel_stacks:
            if not by_name:
                by_name = {(t, s, kernel_name(k)[1]): k for t, s, k in kernel_stacks}
            found = by_name.get((tgid, start, named))
            if found is None and len(named) >= C.PG_PC_NAME - 1:  # cut: the name it begins
                found = next(
                    (k for (t, s, m), k in by_name.items() if (t, s) == (tgid, start) and m.startswith(named)), None
                )
            kernel_id = kernel_id if found is None else found
        stacks = kernel_stacks.get((tgid, start, kernel_id))
        if not stacks and now - since < HOLD_S and may_hold(tgid):
            pcs.held[key] += n  # its records may come in a later profile's drain
            pcs.held_for[key] = min(pcs.held_for.get(key, since), since)
            continue
        name, mangled = kernel_name(kernel_id)
        if named is not None and not mangled:  # no kernel of that name in the profile
            name, mangled = demangle_kernel(named), named
        top = [stall_frame(reason), pcs.sass_frame(tgid, start, mangled, name, crc, pc)]
        if not stacks:
            stacks = [([FrameSpec.kernel(mangled or name, name), FrameSpec.marker(UNSAMPLED)], base_labels(tgid), 1)]
        for (frames, labels, _), k in zip(stacks, split(n, [s[2] for s in stacks])):
            if k:
                add(tgid, top + frames, {**labels, STALL_LABEL: reason}, k)
                added += k
    return added
