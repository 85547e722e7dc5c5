"""pprof profile writer (profile.proto, gzip-compressed).

One job: accumulate ``(stack, values, labels)`` samples and serialize them
as a pprof profile that Go's ``pprof`` reads as-is (no re-symbolization).

Sample types: ``gpu_time/nanoseconds`` (default) and ``kernel_launches/count``, and
``pc_samples/count`` when a sample has PC samples (opt-in PC sampling).
Stacks are given leaf first as ``FrameSpec``s; the helper constructors build
the frame kinds gpu-agent uses:

* ``FrameSpec.kernel(mangled)``: CUDA kernel leaf; function name = demangled
  kernel name, system_name = mangled name, filename ``CUDA_KERNEL``, mapping
  ``[cuda]``.
* ``FrameSpec.native(frame)``: a ``symbolize.Frame``; mapping = the library
  (with its build-id and ``has_functions`` so pprof keeps our names),
  location address = ``frame.rel_addr``.
* ``FrameSpec.marker("[unsampled]")``: a synthetic frame in the
  ``[gpu-agent]`` mapping.
* ``FrameSpec.python(function, filename, line)``: an interpreter frame in the
  ``[python]`` mapping.

Strings, functions, locations and mappings are deduplicated; ids start at 1;
``string_table[0] == ""``; identical (stack, labels) samples are merged by
summing their values. With a ``Numbering``, function and location ids are the
numbering's instead: the same frame has the same location id in every profile
written with it (the agent's windows), which the profile names in a private field
(vocabulary.NUMBERING_FIELD).
"""

from __future__ import annotations

import functools
import gzip
import os
import secrets
from dataclasses import dataclass
from typing import Dict, List, Mapping as TMapping, Optional, Sequence, Tuple, Union

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from ..proto import profile_pb2
from ..system.atomic import write_atomic
from .vocabulary import CUDA_KERNEL_FILENAME, NUMBERING_FIELD, UNSAMPLED

__all__ = [
    "MappingSpec",
    "FrameSpec",
    "ProfileBuilder",
    "Numbering",
    "CUDA_MAPPING",
    "AGENT_MAPPING",
    "PYTHON_MAPPING",
]


@dataclass(frozen=True)
class MappingSpec:
    """A pprof Mapping.  Deduplicated on all fields."""

    filename: str
    build_id: str = ""
    has_functions: bool = True
    has_filenames: bool = False
    has_line_numbers: bool = False
    memory_start: int = 0
    memory_limit: int = 0
    file_offset: int = 0


CUDA_MAPPING = MappingSpec("[cuda]", has_functions=True, has_filenames=True)
AGENT_MAPPING = MappingSpec("[gpu-agent]", has_functions=True)
PYTHON_MAPPING = MappingSpec("[python]", has_functions=True, has_filenames=True, has_line_numbers=True)


@dataclass(frozen=True)
class FrameSpec:
    """One stack frame: a pprof Location with a single Line.

    function: display name; system_name: raw (mangled) name ("" = function);
    filename: source/binary file of the function; line: source line (0 =
    unknown); address: location address (native: ELF vaddr in the mapping's
    file); mapping: None for a location without mapping.
    """

    function: str
    system_name: str = ""
    filename: str = ""
    line: int = 0
    address: int = 0
    mapping: Optional[MappingSpec] = None

    @classmethod
    def kernel(cls, mangled: Union[str, bytes], demangled: Optional[str] = None) -> "FrameSpec":
        """CUDA kernel leaf.  ``demangled`` defaults to ``demangle_kernel(mangled)``."""
        if isinstance(mangled, bytes):
            mangled = mangled.split(b"\0", 1)[0].decode("utf-8", "replace")
        if demangled is None:
            from ..symbols.demangle import demangle_kernel

            demangled = demangle_kernel(mangled)
        return cls(demangled, mangled, CUDA_KERNEL_FILENAME, 0, 0, CUDA_MAPPING)

    @classmethod
    def native(cls, frame) -> "FrameSpec":
        """From a ``symbolize.Frame`` (function, filename, rel_addr, build_id, line)."""
        m = MappingSpec(
            frame.filename,
            build_id=frame.build_id or "",
            has_functions=True,
            has_filenames=bool(frame.line),
            has_line_numbers=bool(frame.line),
        )
        # system_name = the mangled symbol: pprof then keeps our (full,
        # demangled) name instead of re-simplifying it.
        sysname = getattr(frame, "system_name", "") or ""
        return cls(frame.function, sysname, frame.filename, int(frame.line or 0), int(frame.rel_addr), m)

    @classmethod
    def marker(cls, name: str = UNSAMPLED) -> "FrameSpec":
        """Synthetic frame such as ``[unsampled]``, in the ``[gpu-agent]`` mapping."""
        return cls(name, "", "", 0, 0, AGENT_MAPPING)

    @classmethod
    def python(cls, function: str, filename: str, line: int = 0) -> "FrameSpec":
        """Interpreter frame with source file and line.

        system_name is ``python:<function>`` so that it differs from the name:
        pprof otherwise applies its C++ heuristics to names like ``<module>``
        (and strips them to nothing).
        """
        return cls(function, "python:" + function, filename, int(line), 0, PYTHON_MAPPING)


@functools.lru_cache(maxsize=1)
def _numbering_message():
    """A message of one string field, NUMBERING_FIELD: what a profile carries its
    numbering in (built from a descriptor: protobuf encodes it)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="gpu_agent/numbering.proto", package="gpu_agent.pprof")
    fdp.syntax = "proto3"
    m = fdp.message_type.add(name="Numbered")
    m.field.add(
        name="numbering",
        number=NUMBERING_FIELD,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("gpu_agent.pprof.Numbered"))


class Numbering:
    """Function and location ids shared by many profiles: in each profile written with
    it, a location id means the same frame (mapping, address, function, line), and so
    does a function id. pprof allows any nonzero ids; a reader that merges many
    windows (the UI, ui/profiles.py) then resolves each location once per numbering,
    not once per file. Its id is random, so two agents' numberings never mix.

    Bounded: full() says when the writer should start a new one (ids are never
    forgotten while in use, or an old id would name a new frame)."""

    def __init__(self, limit: int = 1_000_000):
        self.id = secrets.token_hex(8)
        self.limit = limit
        self._functions: Dict[Tuple[str, str, str], int] = {}
        self._locations: Dict[Tuple, int] = {}

    def field(self) -> bytes:
        """Its id as the profile's NUMBERING_FIELD, serialized: appended to a profile's
        bytes (a protobuf message is the concatenation of its fields)."""
        return _numbering_message()(numbering=self.id).SerializeToString()

    def full(self) -> bool:
        return len(self._functions) + len(self._locations) >= self.limit

    def function_id(self, name: str, system_name: str, filename: str) -> int:
        key = (name, system_name, filename)
        i = self._functions.get(key)
        if i is None:
            i = self._functions[key] = len(self._functions) + 1
        return i

    def location_id(self, mapping: Optional[MappingSpec], address: int, function_id: int, line: int) -> int:
        key = (mapping, address, function_id, line)
        i = self._locations.get(key)
        if i is None:
            i = self._locations[key] = len(self._locations) + 1
        return i


class ProfileBuilder:
    """Accumulates samples and writes one pprof profile.

    ``period_ns``: the sampling period expressed as GPU nanoseconds (pprof's
    ``period``; informational, values are already estimates of full time).
    ``duration_ns``: the profile's wall duration.  ``time_nanos``: its start,
    nanoseconds since the Unix epoch.
    """

    def __init__(
        self,
        period_ns: int,
        duration_ns: int,
        time_nanos: int,
        comments: Sequence[str] = (),
        numbering: Optional[Numbering] = None,
    ):
        self.numbering = numbering
        self.period_ns = int(period_ns)
        self.duration_ns = int(duration_ns)
        self.time_nanos = int(time_nanos)
        self._strings: Dict[str, int] = {"": 0}
        self._string_list: List[str] = [""]
        self._mappings: Dict[MappingSpec, int] = {}
        self._functions: Dict[Tuple[int, int, int, int], int] = {}  # name, sys, file, start_line
        self._locations: Dict[Tuple[int, int, int, int], int] = {}  # mapping, addr, func, line
        self._samples: Dict[Tuple[Tuple[int, ...], Tuple[Tuple[str, str], ...]], List[int]] = {}
        self._comments = [self._str(c) for c in comments]
        # Intern header strings first (stable, small indices).
        self._st_gpu = (self._str("gpu_time"), self._str("nanoseconds"))
        self._st_launch = (self._str("kernel_launches"), self._str("count"))
        self._st_pc: Optional[Tuple[int, int]] = None  # pc_samples/count, once one is added
        # Mapping 1 is ours: pprof shows the first mapping as "File:".
        self._mapping(AGENT_MAPPING)

    # -- interning ---------------------------------------------------------

    def _str(self, s: str) -> int:
        i = self._strings.get(s)
        if i is None:
            i = len(self._string_list)
            self._strings[s] = i
            self._string_list.append(s)
        return i

    def _mapping(self, m: Optional[MappingSpec]) -> int:
        if m is None:
            return 0
        i = self._mappings.get(m)
        if i is None:
            i = len(self._mappings) + 1
            self._mappings[m] = i
            self._str(m.filename)
            self._str(m.build_id)
        return i

    def _function(self, f: FrameSpec) -> int:
        key = (self._str(f.function), self._str(f.system_name or f.function), self._str(f.filename), 0)
        i = self._functions.get(key)
        if i is None:
            if self.numbering is None:
                i = len(self._functions) + 1
            else:
                i = self.numbering.function_id(f.function, f.system_name or f.function, f.filename)
            self._functions[key] = i
        return i

    def _location(self, f: FrameSpec) -> int:
        key = (self._mapping(f.mapping), int(f.address), self._function(f), int(f.line))
        i = self._locations.get(key)
        if i is None:
            if self.numbering is None:
                i = len(self._locations) + 1
            else:
                i = self.numbering.location_id(f.mapping, key[1], key[2], key[3])
            self._locations[key] = i
        return i

    # -- public API --------------------------------------------------------

    def add(
        self,
        frames_leaf_first: Sequence[FrameSpec],
        gpu_ns: int,
        launches: int,
        labels: Optional[TMapping[str, str]] = None,
        pc_samples: int = 0,
    ) -> None:
        """Add one sample; identical (stack, labels) samples are summed."""
        locs = tuple(self._location(f) for f in frames_leaf_first)
        lab = tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))
        for k, v in lab:
            self._str(k)
            self._str(v)
        if pc_samples and self._st_pc is None:
            self._st_pc = (self._str("pc_samples"), self._str("count"))
        acc = self._samples.get((locs, lab))
        if acc is None:
            self._samples[(locs, lab)] = [int(gpu_ns), int(launches), int(pc_samples)]
        else:
            acc[0] += int(gpu_ns)
            acc[1] += int(launches)
            acc[2] += int(pc_samples)

    def __len__(self) -> int:
        return len(self._samples)

    def to_proto(self) -> "profile_pb2.Profile":
        p = profile_pb2.Profile()
        types = [self._st_gpu, self._st_launch] + ([self._st_pc] if self._st_pc else [])
        for t, u in types:
            vt = p.sample_type.add()
            vt.type, vt.unit = t, u
        p.period_type.type, p.period_type.unit = self._st_gpu
        p.period = self.period_ns
        p.duration_nanos = self.duration_ns
        p.time_nanos = self.time_nanos
        p.default_sample_type = self._st_gpu[0]
        p.comment.extend(self._comments)
        for m, i in self._mappings.items():
            pm = p.mapping.add()
            pm.id = i
            pm.memory_start = m.memory_start
            pm.memory_limit = m.memory_limit
            pm.file_offset = m.file_offset
            pm.filename = self._strings[m.filename]
            pm.build_id = self._strings[m.build_id]
            pm.has_functions = m.has_functions
            pm.has_filenames = m.has_filenames
            pm.has_line_numbers = m.has_line_numbers
        for (name, sysname, fname, start), i in self._functions.items():
            pf = p.function.add()
            pf.id, pf.name, pf.system_name, pf.filename, pf.start_line = i, name, sysname, fname, start
        for (mid, addr, fid, line), i in self._locations.items():
            pl = p.location.add()
            pl.id = i
            pl.mapping_id = mid
            pl.address = addr
            ln = pl.line.add()
            ln.function_id = fid
            ln.line = line
        for (locs, lab), vals in self._samples.items():
            ps = p.sample.add()
            ps.location_id.extend(locs)
            ps.value.extend(vals[: len(types)])
            for k, v in lab:
                pl = ps.label.add()
                pl.key = self._strings[k]
                pl.str = self._strings[v]
        p.string_table.extend(self._string_list)
        return p

    def to_bytes(self) -> bytes:
        """gzip-compressed serialized profile (deterministic: gzip mtime 0)."""
        raw = self.to_proto().SerializeToString()
        if self.numbering is not None:
            raw += self.numbering.field()
        return gzip.compress(raw, compresslevel=6, mtime=0)

    def write(self, path: Union[str, os.PathLike]) -> None:
        """Write atomically: temp file in the same directory, fsync, rename."""
        write_atomic(path, self.to_bytes(), mode=0o600)  # other tenants' kernel and pod names
