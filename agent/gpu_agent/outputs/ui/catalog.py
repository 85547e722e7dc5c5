"""The ids every decoded store file is written in: frames, the names they are drawn
under, locations, stacks and label sets, each numbered once for all files (Catalog);
and one file as flat rows of those ids (DecodedProfile). A merge of many files is
then integer additions (query.py), and a merged range is written back as a pprof
with the very FrameSpec values the agent writes (pprof.py).
"""

from __future__ import annotations

import threading
from array import array
from dataclasses import dataclass, field

from ...profile.pprof import AGENT_MAPPING, CUDA_MAPPING, PYTHON_MAPPING, FrameSpec, MappingSpec
from ...profile.vocabulary import CUDA_KERNEL_FILENAME, DROPPED_PREFIX, GRAPH_BEFORE_ATTACH, GRAPH_REPLAY
from ...proto import profile_pb2

# How a frame is drawn: the CUDA kernel leaves apart from the CPU frames above them,
# and the graph-replay markers apart from both.
KERNEL, GRAPH, MARKER, PYTHON, NATIVE = "kernel", "graph", "marker", "python", "native"
GRAPH_MARKERS = (GRAPH_REPLAY, GRAPH_BEFORE_ATTACH)
# The agent's markers of lost records (vocabulary.DROPPED_PREFIX): their values are
# estimates, and a process that claims 2^31 lost launches claims hours of GPU time in
# a window. The UI keeps the samples through them apart from measured GPU time
# (query.Merged).


def frame_kind(f: FrameSpec) -> str:
    mapping = f.mapping.filename if f.mapping is not None else ""
    if mapping == CUDA_MAPPING.filename or f.filename == CUDA_KERNEL_FILENAME:
        return KERNEL
    if f.function in GRAPH_MARKERS:
        return GRAPH
    if mapping == AGENT_MAPPING.filename:
        return MARKER
    if mapping == PYTHON_MAPPING.filename:
        return PYTHON
    return NATIVE


class Catalog:
    """Frames, the names they are drawn under, locations, stacks and label sets, each
    numbered once for every file. Append-only: ids stay valid for every cached file.

    A frame is a full FrameSpec (what a merged pprof writes back); a name is what the
    flame graph and the top table group by: (function, kind), as pprof groups by
    function when it draws a flame graph. A location is a pprof location's frames
    (more than one when functions were inlined), keyed by its content, because every
    file numbers its locations, functions and strings its own way."""

    def __init__(self):
        self.lock = threading.Lock()  # held while a file is interned
        self.frames: list[FrameSpec] = []
        self.frame_name: list[int] = []
        self._frame_ids: dict[FrameSpec, int] = {}
        self.names: list[tuple[str, str]] = []
        self.dropped_stacks: set[int] = set()  # stacks through a [dropped: …] marker
        self._dropped_names: set[int] = set()
        self._name_ids: dict[tuple[str, str], int] = {}
        self.frame_line: list[int] = []
        self.line_names: list[tuple[str, str, str, int]] = []  # (function, kind, file, line)
        self.line_name_of: list[int] = []  # line name -> its name
        self._line_ids: dict[tuple[str, str, str, int], int] = {}
        self._mapping_ids: dict[MappingSpec, int] = {}
        self.mappings: list[MappingSpec] = []
        self._location_ids: dict[tuple, int] = {}
        self.locations: list[tuple[int, ...]] = []  # frame ids, innermost first
        self.stacks: list[tuple[int, ...]] = []  # frame ids, leaf first
        self._stack_ids: dict[tuple[int, ...], int] = {}  # by location ids
        self.labelsets: list[tuple[tuple[str, str], ...]] = []  # sorted (key, value)
        self._labelset_ids: dict[tuple[tuple[str, str], ...], int] = {}
        # Per pprof.Numbering id: what its location ids and location-id lists are here
        # (numbered.py).
        self.numberings: dict[str, "Numbered"] = {}

    def frame(self, f: FrameSpec) -> int:
        i = self._frame_ids.get(f)
        if i is None:
            i = self._frame_ids[f] = len(self.frames)
            self.frames.append(f)
            kind = frame_kind(f)
            name = self.name((f.function, kind))
            self.frame_name.append(name)
            source = (f.filename, f.line) if f.filename and kind in (PYTHON, NATIVE) else ("", 0)
            key = (f.function, kind) + source
            line = self._line_ids.get(key)
            if line is None:
                line = self._line_ids[key] = len(self.line_names)
                self.line_names.append(key)
                self.line_name_of.append(name)
            self.frame_line.append(line)
        return i

    def name(self, key: tuple[str, str]) -> int:
        i = self._name_ids.get(key)
        if i is None:
            i = self._name_ids[key] = len(self.names)
            self.names.append(key)
            if key[1] == MARKER and key[0].startswith(DROPPED_PREFIX):
                self._dropped_names.add(i)
        return i

    def mapping(self, m: MappingSpec) -> int:
        i = self._mapping_ids.get(m)
        if i is None:
            i = self._mapping_ids[m] = len(self.mappings)
            self.mappings.append(m)
        return i

    def location(self, mapping: int, address: int, lines: tuple[tuple[str, str, str, int], ...]) -> int:
        """lines: (function, system name, file, line), innermost first."""
        key = (mapping, address, lines)
        i = self._location_ids.get(key)
        if i is None:
            m = self.mappings[mapping] if mapping >= 0 else None
            frames = tuple(
                self.frame(FrameSpec(name, "" if system_name == name else system_name, filename, line, address, m))
                for name, system_name, filename, line in lines
            )
            if not frames:  # an unsymbolized address
                frames = (self.frame(FrameSpec(f"0x{address:x}", "", "", 0, address, m)),)
            i = self._location_ids[key] = len(self.locations)
            self.locations.append(frames)
        return i

    def stack(self, locations: tuple[int, ...]) -> int:
        i = self._stack_ids.get(locations)
        if i is None:
            i = self._stack_ids[locations] = len(self.stacks)
            self.stacks.append(tuple(f for loc in locations for f in self.locations[loc]))
            self._see_dropped(i)
        return i

    def _see_dropped(self, sid: int) -> None:
        if self._dropped_names and any(self.frame_name[f] in self._dropped_names for f in self.stacks[sid]):
            self.dropped_stacks.add(sid)

    def dropped_of(self, d: "DecodedProfile") -> tuple[int, int, int]:
        """A decoded file's (GPU ns, launches, PC samples) through [dropped: …] markers."""
        out = [0, 0, 0]
        dropped = self.dropped_stacks
        if dropped:
            for sid, g, n, p in zip(d.stacks, d.gpu_ns, d.launches, d.pc_samples):
                if sid in dropped:
                    out[0] += g
                    out[1] += n
                    out[2] += p
        return out[0], out[1], out[2]

    def stack_of_frames(self, frames: tuple[int, ...]) -> int:
        """A stack given by its frames (what a decoding worker sends, workers.py)."""
        key = ("frames",) + frames
        i = self._stack_ids.get(key)
        if i is None:
            i = self._stack_ids[key] = len(self.stacks)
            self.stacks.append(frames)
            self._see_dropped(i)
        return i

    def labelset(self, labels: tuple[tuple[str, str], ...]) -> int:
        i = self._labelset_ids.get(labels)
        if i is None:
            i = self._labelset_ids[labels] = len(self.labelsets)
            self.labelsets.append(labels)
        return i


@dataclass
class Numbered:
    """One writer's numbering, as this catalog knows it: location id -> catalog
    location, and a sample's location ids (their packed encoding) -> catalog stack."""

    locations: dict = field(default_factory=dict)
    stacks: dict = field(default_factory=dict)


@dataclass
class DecodedProfile:
    """One store file: its header, and one row per pprof sample."""

    time_nanos: int
    duration_nanos: int
    comments: tuple[str, ...]
    stacks: array = field(default_factory=lambda: array("I"))
    labelsets: array = field(default_factory=lambda: array("I"))
    gpu_ns: array = field(default_factory=lambda: array("q"))
    launches: array = field(default_factory=lambda: array("q"))
    # Unfiltered totals per label set, for the filter menus of a range.
    by_labelset: dict = field(default_factory=dict)  # id -> [gpu_ns, launches, pc_samples]
    gpu_total: int = 0
    launch_total: int = 0
    pc_samples: array = field(default_factory=lambda: array("q"))  # empty: none in the file
    pc_total: int = 0
    # Of the totals, what its samples through [dropped: …] markers claim (estimates),
    # set by the cache when it keeps the file (Catalog.dropped_of).
    dropped: tuple[int, int, int] = (0, 0, 0)

    def __len__(self) -> int:
        return len(self.stacks)

    def finish(self) -> "DecodedProfile":
        """Its totals and per-label-set sums, from its rows."""
        if len(self.pc_samples) != len(self.stacks):  # a file without PC samples: zeros
            self.pc_samples = array("q", bytes(8 * len(self.stacks)))
        by = self.by_labelset
        for lid, g, n, p in zip(self.labelsets, self.gpu_ns, self.launches, self.pc_samples):
            acc = by.get(lid)
            if acc is None:
                by[lid] = [g, n, p]
            else:
                acc[0] += g
                acc[1] += n
                acc[2] += p
        self.gpu_total, self.launch_total = sum(self.gpu_ns), sum(self.launches)
        self.pc_total = sum(self.pc_samples)
        return self


def labels_of(raw: tuple[bytes, ...], s) -> tuple[tuple[str, str], ...]:
    """One sample's encoded labels as sorted (key, value); a numeric label's value is
    its number (with its unit, if any)."""
    pairs = []
    for b in raw:
        lb = profile_pb2.Label.FromString(b)
        if lb.str or not lb.num:
            value = s(lb.str)
        else:
            value = str(lb.num) + (s(lb.num_unit) if lb.num_unit else "")
        pairs.append((s(lb.key), value))
    return tuple(sorted(pairs))


def mapping_spec(m, s) -> MappingSpec:
    """A pprof Mapping (s: its file's string table look-up) as the agent writes it."""
    return MappingSpec(
        s(m.filename),
        build_id=s(m.build_id),
        has_functions=m.has_functions,
        has_filenames=m.has_filenames,
        has_line_numbers=m.has_line_numbers,
        memory_start=m.memory_start,
        memory_limit=m.memory_limit,
        file_offset=m.file_offset,
    )
