"""Store files decoded once, into rows that many merges can sum quickly.

A pprof is decoded with the project's protobuf code (proto/profile_pb2.py, read
through views.py). Every file's frames, stacks and label sets are interned in one
Catalog (catalog.py) shared by all files, so a file becomes four flat arrays (stack
id, label-set id, GPU ns, launches) and a merge is integer additions, without
protobuf objects. The agent's own windows take the numbered path (numbered.py);
any other pprof the general one here. The decoded files are cached (least recently
used, bounded in rows); an hour of a busy store is decoded once and then
re-filtered, re-ranged and diffed from memory.
"""

from __future__ import annotations

import os
import sys
import threading
import zlib
from collections import OrderedDict
from typing import Optional

from .catalog import Catalog, DecodedProfile, labels_of, mapping_spec
from .numbered import MAX_LABELS, MAX_STACK, decode_numbered
from ...profile.store import Store, StoreFile
from .views import ProfileView
from .wire import varint

DEFAULT_CACHE_ROWS = 4_000_000  # about 100 MiB of decoded rows
# Stacks and label sets interned before the catalog starts again: every process that
# ever ran has its own label sets, so a UI beside an agent for months would grow.
DEFAULT_CATALOG_LIMIT = 500_000
# A range asked for while the decoding processes start waits this long for them.
POOL_START_WAIT_S = 3.0

# One store file's bounds. The store may hold other users' files (a sticky directory,
# store.dir_error): a 2 MB gzip that inflated to 2 GiB took `gpu-agent ui` to 2.6 GB
# before any request (issue 44). The agent's own windows are far below them: the
# benchmark's busy window (50 processes, 1 500 samples) is 46 KiB gzipped, about
# 0.25 MiB inflated, and a window holds at most 16 384 aggregated and 32 768 sampled
# rows (bpf/maps.h), about 8 MiB inflated at that size a row.
MAX_PROFILE_BYTES = 16 << 20  # bytes read of one file, gzip or not
MAX_INFLATED = 16 << 20  # bytes it may inflate to (read a piece at a time, stopped there)
# protobuf's parse costs up to 30 bytes per byte of tiny messages (16 MiB of empty
# samples: 384 MiB), so past SCAN_FROM bytes the top-level fields are counted
# first (0.3-1.5 s for a million, in Python; files this large are rare) and a file
# of more than MAX_FIELDS samples, locations, functions, mappings and strings in all is
# refused before it is parsed. Within a field, parsing costs at most ~8 bytes a byte.
SCAN_FROM = 1 << 20
MAX_FIELDS = 1_000_000
# Unreadable files named on stderr, one line each; the rest are only counted (the
# status page lists the latest).
MAX_WARNINGS = 10
MAX_UNREADABLE_KEPT = 1_000


def inflate(data: bytes, limit: int = MAX_INFLATED) -> bytes:
    """A gzip file's contents (every member, as gzip.decompress), at most limit bytes:
    ValueError past them, having inflated no more than limit + 1."""
    out, size = [], 0
    while data[:2] == b"\x1f\x8b":
        z = zlib.decompressobj(wbits=31)
        try:
            part = z.decompress(data, limit + 1 - size)
        except zlib.error as e:
            raise ValueError(f"not a gzip file: {e}") from None
        size += len(part)
        if size > limit:
            raise ValueError(f"inflates past {limit >> 20} MiB, more than the UI reads")
        out.append(part)
        if not z.eof:
            raise ValueError("not a gzip file: cut short")
        data = z.unused_data
    return b"".join(out)


def _count_fields(data: bytes, limit: int) -> int:
    """The top-level fields of a protobuf message, counted up to limit + 1 (then it
    stops): each one a Python step, no object."""
    i, n, end = 0, 0, len(data)
    while i < end and n <= limit:
        tag, i = _varint(data, i)
        kind = tag & 7
        if kind == 2:
            length, i = _varint(data, i)
            i += length
        elif kind == 0:
            _, i = _varint(data, i)
        elif kind in (1, 5):
            i += 8 if kind == 1 else 4
        else:
            raise ValueError(f"not a pprof profile: wire type {kind} at byte {i}")
        n += 1
    if i > end:
        raise ValueError("not a pprof profile: a field runs past the end")
    return n


def _varint(data: bytes, i: int) -> tuple[int, int]:
    return varint(data, i, ValueError, "not a pprof profile: a varint runs past the end")


def read_profile(store: Store, name: str) -> Optional[bytes]:
    """One store file's bytes, at most MAX_PROFILE_BYTES (ValueError past them), or
    None if it cannot be opened (Store.open)."""
    data = store.read(name, MAX_PROFILE_BYTES)
    if data is not None and len(data) > MAX_PROFILE_BYTES:
        raise ValueError(f"more than {MAX_PROFILE_BYTES >> 20} MiB, more than the UI reads")
    return data


def decode(data: bytes, catalog: Catalog) -> DecodedProfile:
    """A pprof (gzip or not) as rows of catalog ids. Raises ValueError if it is none,
    or if it is past the bounds above (nothing is parsed then)."""
    if data[:2] == b"\x1f\x8b":
        data = inflate(data)
    elif len(data) > MAX_INFLATED:
        raise ValueError(f"more than {MAX_INFLATED >> 20} MiB, more than the UI reads")
    if len(data) > SCAN_FROM and _count_fields(data, MAX_FIELDS) > MAX_FIELDS:
        raise ValueError(f"more than {MAX_FIELDS:,} samples, locations, functions and strings, more than the UI reads")
    numbered = decode_numbered(data, catalog)
    if numbered is not None:
        return numbered
    p = ProfileView()
    try:
        p.ParseFromString(data)
    except Exception as e:  # protobuf's DecodeError and friends
        raise ValueError(f"not a pprof profile: {e}") from None
    st = list(p.string_table)

    def s(i: int) -> str:
        return st[i] if 0 <= i < len(st) else ""

    types = [s(t.type) for t in p.sample_type]
    gpu_i = types.index("gpu_time") if "gpu_time" in types else (0 if types else -1)
    launch_i = types.index("kernel_launches") if "kernel_launches" in types else -1
    pc_i = types.index("pc_samples") if "pc_samples" in types else -1
    out = DecodedProfile(p.time_nanos, p.duration_nanos, tuple(s(c) for c in p.comment))
    with catalog.lock:
        mappings = {m.id: catalog.mapping(mapping_spec(m, s)) for m in p.mapping}
        functions = {f.id: (s(f.name) or "??", s(f.system_name), s(f.filename)) for f in p.function}
        unknown = ("??", "", "")
        # This file's location ids -> the catalog's; line[0] is the innermost function
        # of an inlined chain: leaf first, as stacks are. A (function, line) pair recurs
        # in many locations of a file: each is looked up once.
        line_of: dict[tuple[int, int], tuple] = {}
        location = catalog.location
        location_of = {}
        for loc in p.location:
            lines = []
            for ln in loc.line[:]:
                key = (ln.function_id, ln.line)
                v = line_of.get(key)
                if v is None:
                    v = line_of[key] = functions.get(key[0], unknown) + (key[1],)
                lines.append(v)
            location_of[loc.id] = location(mappings.get(loc.mapping_id, -1), loc.address, tuple(lines))
        # Location ids are 1..N in every writer we know: a list then maps them faster.
        top = max(location_of, default=0)
        if 0 <= min(location_of, default=0) and top < 4 * len(location_of) + 16:
            table = [None] * (top + 1)
            for k, v in location_of.items():
                table[k] = v
            to_location = table.__getitem__
        else:
            to_location = location_of.__getitem__
        stack_ids = catalog._stack_ids
        label_ids: dict[tuple[bytes, ...], int] = {}
        stacks, labelsets, gpu, launches, pcs = out.stacks, out.labelsets, out.gpu_ns, out.launches, out.pc_samples
        two_values = gpu_i == 0 and launch_i == 1
        for sample in p.sample:
            if len(sample.location_id) > MAX_STACK or len(sample.label) > MAX_LABELS:
                raise ValueError(
                    f"a sample of more than {MAX_STACK} frames or {MAX_LABELS} labels, more than the UI reads"
                )
            try:
                locs = tuple(map(to_location, sample.location_id[:]))
            except (KeyError, IndexError, TypeError):  # an id the file does not define: skip it
                continue
            sid = stack_ids.get(locs)
            if sid is None:
                if None in locs:  # an id the file does not define
                    continue
                sid = catalog.stack(locs)
            raw = tuple(sample.label[:])
            lid = label_ids.get(raw)
            if lid is None:
                lid = label_ids[raw] = catalog.labelset(labels_of(raw, s))
            values = sample.value[:]
            if two_values and len(values) == 2:
                g, n = values
            else:
                g = values[gpu_i] if 0 <= gpu_i < len(values) else 0
                n = values[launch_i] if 0 <= launch_i < len(values) else 0
            stacks.append(sid)
            labelsets.append(lid)
            gpu.append(g)
            launches.append(n)
            pcs.append(values[pc_i] if 0 <= pc_i < len(values) else 0)
    return out.finish()


class ProfileCache:
    """Decoded store files, least recently used first out, at most max_rows rows.
    Keyed by (name, size, mtime): a file rewritten under its name is read again."""

    def __init__(
        self,
        store: Store,
        catalog: Optional[Catalog] = None,
        max_rows: int = DEFAULT_CACHE_ROWS,
        catalog_limit: int = DEFAULT_CATALOG_LIMIT,
    ):
        self.store = store
        self.catalog = catalog or Catalog()
        self.max_rows = max_rows
        self.catalog_limit = catalog_limit
        self._lock = threading.Lock()  # the entries and counts
        self._decoding = threading.Lock()  # one file decoded at a time
        self.pool = None  # a workers.DecodePool, for many()
        self._entries: OrderedDict[tuple, DecodedProfile] = OrderedDict()
        self._rows = 0
        # (GPU ns, launches) of every file decoded so far, kept after its rows are
        # evicted: the interval chart of a long range needs only these.
        self._totals: dict[tuple, tuple[int, ...]] = {}
        self.unreadable: OrderedDict[str, str] = OrderedDict()  # name -> why, the latest, for the status page
        self.unreadable_total = 0  # files refused or unreadable, each counted once
        self.warned = 0  # of them named on stderr

    def _unreadable(self, name: str, why: str, say: bool = True) -> None:
        """A file skipped: kept for the status page (the latest MAX_UNREADABLE_KEPT),
        counted, and, the first MAX_WARNINGS times, one line on stderr."""
        with self._lock:
            if name in self.unreadable:
                self.unreadable.move_to_end(name)
                self.unreadable[name] = why
                return
            self.unreadable[name] = why
            self.unreadable_total += 1
            while len(self.unreadable) > MAX_UNREADABLE_KEPT:
                self.unreadable.popitem(last=False)
            if not say or self.warned > MAX_WARNINGS:
                return
            self.warned += 1
            last = self.warned > MAX_WARNINGS
        line = (
            "gpu-agent: warning: ui: more files skipped: the status page counts them (unreadable)"
            if last
            else f"gpu-agent: warning: ui: skipped {name}: {why}"
        )
        print(line.replace("\n", " "), file=sys.stderr, flush=True)

    def get(self, f: StoreFile) -> Optional[DecodedProfile]:
        key = (f.name, f.size, f.mtime_ns)
        hit = self._hit(key)
        if hit is not None:
            return hit
        # One decode at a time (they would serialize on the catalog anyway): a request
        # and the warmer that want the same file decode it once.
        with self._decoding:
            hit = self._hit(key)
            if hit is not None:
                return hit
            if len(self.catalog.stacks) + len(self.catalog.labelsets) > self.catalog_limit:
                self._restart()
            catalog = self.catalog
            try:
                data = read_profile(self.store, f.name)
                if data is None:
                    if os.path.lexists(self.store.dir / f.name):  # not rotated away: say why it is missing
                        self._unreadable(
                            f.name,
                            "cannot open: not readable by this user (the agent writes mode 0600), "
                            "or not a regular file",
                            say=False,  # ui.start says it once for the store
                        )
                    return None
                decoded = decode(data, catalog)
            except ValueError as e:
                self._unreadable(f.name, str(e))
                return None
            self._insert(key, decoded, catalog)
        return decoded

    def _restart(self) -> None:
        """A new catalog, and no decoded file (their ids are the old catalog's). A merge
        under way keeps the catalog it started with (many() returns it)."""
        with self._lock:
            self.catalog = Catalog()
            self._entries.clear()
            self._rows = 0
            self._totals = {k: v for k, v in self._totals.items() if k[0] in {f.name for f in self.store.profiles()}}

    def _hit(self, key) -> Optional[DecodedProfile]:
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
            return hit

    def _insert(self, key, decoded: DecodedProfile, catalog: Catalog) -> None:
        """catalog: the one its ids are of."""
        decoded.dropped = catalog.dropped_of(decoded)
        with self._lock:
            self._totals[key] = (decoded.gpu_total, decoded.launch_total, decoded.pc_total) + decoded.dropped
            if key not in self._entries:
                self._entries[key] = decoded
                self._rows += len(decoded)
            while self._rows > self.max_rows and len(self._entries) > 1:
                _, old = self._entries.popitem(last=False)
                self._rows -= len(old)

    def many(self, files: list[StoreFile]) -> tuple[Catalog, list[DecodedProfile]]:
        """The files decoded, and the catalog their ids belong to (read again if the
        catalog started over meanwhile)."""
        for _attempt in range(3):
            catalog = self.catalog
            self.prefetch(files)
            out = [d for d in map(self.get, files) if d is not None]
            if self.catalog is catalog:
                return catalog, out
        return catalog, []  # the catalog keeps restarting: a store far beyond the limit

    def prefetch(self, files: list[StoreFile], totals_only: bool = False) -> None:
        """Decode the files not decoded yet (only those of unknown totals if
        totals_only), in the pool's processes when there are enough of them for it
        to pay (workers.py); get() and totals() then find them here."""
        pool = self.pool
        if pool is None or not pool.ready(wait=POOL_START_WAIT_S):
            return
        with self._lock:
            missing = [
                f for f in files if (f.name, f.size, f.mtime_ns) not in (self._totals if totals_only else self._entries)
            ]
        if len(missing) < pool.min_files:
            return
        with self._decoding:
            if len(self.catalog.stacks) + len(self.catalog.labelsets) > self.catalog_limit:
                self._restart()
            keys = {f.name: (f.name, f.size, f.mtime_ns) for f in missing}
            catalog = self.catalog

            def on_file(f: StoreFile, decoded: Optional[DecodedProfile], error: Optional[str]) -> None:
                if decoded is not None:
                    self._insert(keys[f.name], decoded, catalog)
                elif error != "unreadable":
                    self._unreadable(f.name, error)  # "unreadable": get() says why

            pool.decode(missing, catalog, on_file)

    def unreadable_latest(self, n: int) -> dict[str, str]:
        with self._lock:
            return dict(list(self.unreadable.items())[-n:])

    def forget_gone(self, present: list[StoreFile]) -> None:
        """Drop the totals of files rotated out of the store (an agent's UI runs for months)."""
        with self._lock:
            if len(self._totals) <= len(present) + 1000:
                return
            names = {f.name for f in present}
            self._totals = {k: v for k, v in self._totals.items() if k[0] in names}

    def cached(self, f: StoreFile) -> bool:
        with self._lock:
            return (f.name, f.size, f.mtime_ns) in self._entries

    def full(self) -> bool:
        """Past 90 % of max_rows: warming further would only evict what it just read."""
        with self._lock:
            return self._rows >= 0.9 * self.max_rows

    def size(self) -> int:
        with self._lock:
            return len(self._entries)

    def rows(self) -> int:
        with self._lock:
            return self._rows

    def totals(self, f: StoreFile) -> Optional[tuple[int, int, int, int, int, int]]:
        """(GPU ns, launches, PC samples) of one file, then what of them its samples
        through [dropped: …] markers claim, decoding it only the first time."""
        with self._lock:
            known = self._totals.get((f.name, f.size, f.mtime_ns))
        if known is not None:
            return known
        d = self.get(f)
        return None if d is None else (d.gpu_total, d.launch_total, d.pc_total) + d.dropped
