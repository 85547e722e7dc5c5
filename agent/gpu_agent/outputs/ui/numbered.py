"""The agent's own windows, decoded without walking them in Python.

The agent numbers frames alike in all its windows (pprof.Numbering, named in a
private field, vocabulary.NUMBERING_FIELD): under one numbering a location id, and so a sample's whole list of them,
means the same in every file. Such a file is read with upb doing the walking:

- its locations, parsed as one message, give all their ids at once; only the ids
  new to the numbering are decoded, one by one;
- its samples, joined and parsed as one message, give every sample's location-id
  list as bytes (a key into the stacks the numbering has already seen), all values
  in one list and all labels in one list;
- a sample's labels are grouped by a separator label, and each distinct group is
  decoded once per file (string indices are the file's own).

A file this path cannot read exactly (other writers, other sample types, a sample
without locations or naming an undefined one) returns None, and profiles.decode
reads it the general way.
"""

from __future__ import annotations

from array import array
from typing import Optional

from ...profile.vocabulary import NUMBERING_COMMENT
from ...proto import profile_pb2
from .catalog import Catalog, DecodedProfile, Numbered, labels_of, mapping_spec
from .views import FlatLocations, FlatSamples, RawProfile

# One sample's frames and labels (the agent's: at most 127 native frames and the Python
# ones above them, about 10 labels): past either, profiles.decode refuses the file
# before its stack or label set is built and kept (16 MiB of one sample's location
# ids took 547 MiB). A chunk of location ids holds at most one id a byte: one within
# MAX_STACK bytes is within the bound; a longer one goes to the general path, which counts.
MAX_STACK = 4_096
MAX_LABELS = 256

# Joined after every sample: a label that no writer produces (0xff is no valid
# protobuf tag). The joined labels then split on it into one group per sample.
_END = b"\x1a\x01\xff"
# Between labels when grouping: a label's encoding has no 0x00 byte (proto3 writes no
# zero field, and a varint's last byte is not 0), so "\xff\x00" marks a group's end.
_GROUP_END = b"\xff\x00"


def decode_numbered(data: bytes, catalog: Catalog) -> Optional[DecodedProfile]:
    """data: an uncompressed pprof. Its rows, or None if the general path must read it."""
    try:
        p = RawProfile.FromString(data)
    except Exception:  # protobuf's DecodeError and friends: the general path says why
        return None
    st = p.string_table[:]
    n_st = len(st)

    def s(i: int) -> str:
        return st[i] if 0 <= i < n_st else ""

    comments = [s(c) for c in p.comment]
    # Its field; a comment in files written before the field
    numbering = p.numbering or next(
        (c[len(NUMBERING_COMMENT) :] for c in comments if c.startswith(NUMBERING_COMMENT)), None
    )
    if not numbering or [s(t.type) for t in p.sample_type] != ["gpu_time", "kernel_launches"]:
        return None
    raw = p.sample[:]
    n = len(raw)
    flat = FlatSamples.FromString(_END.join(raw) + _END) if n else FlatSamples()
    chunks = flat.location_id[:]
    values = flat.value[:]
    groups = (b"\x00".join(flat.label[:]) + b"\x00").split(_GROUP_END)
    if len(chunks) != n or len(values) != 2 * n or len(groups) != n + 1:
        return None
    if len(flat.label) > MAX_LABELS * n or any(len(c) > MAX_STACK for c in chunks):
        return None  # perhaps past the bounds of a sample: the general path counts exactly
    out = DecodedProfile(
        p.time_nanos, p.duration_nanos, tuple(c for c in comments if not c.startswith(NUMBERING_COMMENT))
    )
    with catalog.lock:
        known = catalog.numberings.get(numbering)
        if known is None:
            known = catalog.numberings[numbering] = Numbered()
        if not _learn_locations(p, s, catalog, known):
            return None
        stack_of = known.stacks.get
        sids = list(map(stack_of, chunks))
        if None in sids:
            for i, chunk in enumerate(chunks):
                if sids[i] is None:
                    sid = _learn_stack(chunk, catalog, known)
                    if sid is None:  # an id the file does not define
                        return None
                    sids[i] = sid
        del groups[n]
        label_ids = {g: catalog.labelset(labels_of(tuple(g.split(b"\x00")[:-1]), s)) for g in set(groups)}
        lids = list(map(label_ids.__getitem__, groups))
    out.stacks, out.labelsets = array("I", sids), array("I", lids)
    out.gpu_ns, out.launches = array("q", values[0::2]), array("q", values[1::2])
    return out.finish()


def _learn_locations(p, s, catalog: Catalog, known: Numbered) -> bool:
    """Decode the locations whose ids the numbering has not seen here yet."""
    raw = p.location[:]
    ids = FlatLocations.FromString(b"".join(raw)).id[:] if raw else []
    if len(ids) != len(raw):
        return False
    have = known.locations
    if have.keys() >= set(ids):
        return True
    mappings = {}
    for b in p.mapping:
        m = profile_pb2.Mapping.FromString(b)
        mappings[m.id] = catalog.mapping(mapping_spec(m, s))
    functions = {}
    for b in p.function:
        f = profile_pb2.Function.FromString(b)
        functions[f.id] = (s(f.name) or "??", s(f.system_name), s(f.filename))
    unknown = ("??", "", "")
    for i, b in zip(ids, raw):
        if i in have:
            continue
        loc = profile_pb2.Location.FromString(b)
        lines = tuple(functions.get(ln.function_id, unknown) + (ln.line,) for ln in loc.line)
        have[i] = catalog.location(mappings.get(loc.mapping_id, -1), loc.address, lines)
    return True


def _location_ids(chunk: bytes) -> list[int]:
    """A packed list of varints, decoded by upb (as a Location's repeated id)."""
    return FlatLocations.FromString(_as_id_fields(chunk)).id[:]


def _as_id_fields(chunk: bytes) -> bytes:
    """The packed list as one length-delimited field 1, which a repeated uint64 accepts."""
    n, head = len(chunk), bytearray(b"\x0a")
    while n >= 0x80:
        head.append(n & 0x7F | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + chunk


def _learn_stack(chunk: bytes, catalog: Catalog, known: Numbered) -> Optional[int]:
    loc = known.locations.get
    locs = tuple(map(loc, _location_ids(chunk)))
    if not locs or None in locs:
        return None
    sid = known.stacks[chunk] = catalog.stack(locs)
    return sid
