"""parcagpu's probes as a second source of kernels (shim/include/gpu_agent_parcagpu.h).

Parca users inject parcagpu's libparcagpucupti.so into their workloads. The agent
finds the processes that map a library with `parcagpu` provider probes, whatever
the file is called (its USDT notes say so, not its name), and reads
cuda_correlation (the launching thread's stack, in BPF), kernel_executed (each
kernel's exact time) and, with parcagpu's PC sampling on, pc_sample_batch,
stall_reason_map and cubin_loaded (bpf/parcagpu_pc.h; pc_samples.py). Their
argument locations are the compiler's choice in that build, so the agent parses
each site's specs ("8@%rax", "-4@-20(%rbp)") into the BPF hash pg_sites and the
programs read what they name (bpf/parcagpu.h).

A file is attached as the shim is (uprobes on the inode, through /proc/PID/root or
map_files, mappings.open_mapped_file): every process mapping it, running or
started later, is covered, and the uprobe on cuda_correlation raises its semaphore,
which turns parcagpu's callback work on. Its error probe is logged, once per kind
and process. The other probes (activity_batch, cubin_unloaded, gpu_config) are not
read.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Optional

from . import contract as C
from . import stapsdt
from .mappings import file_mappings, maps_containing, open_mapped_file
from .shim_attach import BpfError, ShimAttachments, ShimFile

log = logging.getLogger(__name__)

PROVIDER = "parcagpu"
# probe -> (its index in pg_sites keys, its argument count, the BPF program)
PROBES = {
    "pc_sample_batch": (C.PG_PROBE_PC_BATCH, 2, "ga_pg_pc_sample_batch"),
    "stall_reason_map": (C.PG_PROBE_STALL_MAP, 2, "ga_pg_stall_reason_map"),
    "cubin_loaded": (C.PG_PROBE_CUBIN, 3, "ga_pg_cubin_loaded"),
    "error": (C.PG_PROBE_ERROR, 3, "ga_pg_error"),
    "kernel_executed": (C.PG_PROBE_KERNEL, 8, "ga_pg_kernel_executed"),
    "cuda_correlation": (C.PG_PROBE_CORRELATION, 3, "ga_pg_cuda_correlation"),  # last: its semaphore
}
# Its PC sampling and error probes: read where a build has them (not every one
# does); their semaphores gate the names' and cubins' announcements, as
# cuda_correlation's does the callback work.
OPTIONAL = {"pc_sample_batch", "stall_reason_map", "cubin_loaded", "error"}
MAX_ERRORS_LOGGED = 256  # distinct (process, code, component, message) reported
# The BPF table of argument specs (pg_sites in bpf/parcagpu.h) is shared by every
# parcagpu file on the node; a file is hostile input. So a file whose probe has more
# sites than any parcagpu build (a handful, where the compiler copies a probe) is
# refused whole, and files of one non-root owner are attached MAX_FILES_PER_OWNER at
# most: one user cannot fill the table for the others. A file no process maps any
# more (at a scan) is detached and its sites freed; files refused for room are
# looked at again then.
MAX_SITES = 4096  # pg_sites' size
MAX_SITES_PER_PROBE = 8
MAX_FILES_PER_OWNER = 8
SOURCE_LABEL = "parcagpu"  # the samples' `source` label

_REG_INDEX = {name: i for i, name in enumerate(C.PG_REG_NAMES.split(","))}
_LEGACY = ("ax", "bx", "cx", "dx", "si", "di", "bp", "sp")
_ALIASES = {}
for _i, _r in enumerate(_LEGACY):
    _ALIASES.update({"r" + _r: _i, "e" + _r: _i, _r: _i})
    _ALIASES[_r[0] + "l" if _r[1] == "x" else _r + "l"] = _i  # al bl cl dl sil dil bpl spl
for _n in range(8, 16):
    for _suffix in ("", "d", "w", "b"):
        _ALIASES[f"r{_n}{_suffix}"] = _REG_INDEX[f"r{_n}"]
_ALIASES["rip"] = _REG_INDEX["rip"]
_ARG = re.compile(r"^(-?\d+)@(.+)$")
_MEM = re.compile(r"^(-?(?:0x[0-9a-fA-F]+|\d+))?\(%(\w+)\)$")


def parse_arg(spec: str) -> C.PgArg:
    """One stapsdt argument spec (x86-64 AT&T syntax) as BPF reads it. ValueError
    for a form BPF cannot read (an index register, a symbol)."""
    m = _ARG.match(spec)
    if not m:
        raise ValueError(f"argument spec {spec!r} has no size")
    size, operand = int(m.group(1)), m.group(2)
    if abs(size) not in (1, 2, 4, 8):
        raise ValueError(f"argument spec {spec!r}: size {size}")
    a = C.PgArg(size=abs(size), is_signed=int(size < 0))
    if operand.startswith("$"):
        a.kind, a.disp = C.PG_ARG_IMM, int(operand[1:], 0) & 0xFFFFFFFFFFFFFFFF
    elif operand.startswith("%"):
        reg = _ALIASES.get(operand[1:])
        if reg is None:
            raise ValueError(f"argument spec {spec!r}: unknown register")
        a.kind, a.reg = C.PG_ARG_REG, reg
    else:
        mm = _MEM.match(operand)
        reg = _ALIASES.get(mm.group(2)) if mm else None
        if reg is None:
            raise ValueError(f"argument spec {spec!r}: not a register, memory or constant operand")
        a.kind, a.reg, a.disp = C.PG_ARG_MEM, reg, int(mm.group(1) or "0", 0) & 0xFFFFFFFFFFFFFFFF
    return a


def site_of(probe: stapsdt.SdtProbe) -> C.PgSite:
    site = C.PgSite(nargs=len(probe.args))
    for i, spec in enumerate(probe.args):
        site.args[i] = parse_arg(spec)
    return site


@dataclass
class _Held:
    """What an attached parcagpu file holds: its uprobes, its site keys, its owner."""

    sf: ShimFile
    handles: list
    keys: set
    owner: int


class ParcagpuFiles:
    """The parcagpu files the BPF programs are attached to, through a ShimAttachments
    (its uprobes: close() detaches them with the shim's)."""

    def __init__(self, bpf, attachments: ShimAttachments):
        self.sites = bpf[b"pg_sites"]
        self.att = attachments
        self.files: list[ShimFile] = []
        self.checked: set[tuple[int, int]] = set()  # inodes looked at (parcagpu or not)
        self.registered: dict[tuple[int, int], bytes] = {}  # (probe, page offset) -> site
        self.errors: dict[str, str] = {}  # path -> why it was not attached
        self.paths: set[str] = set()  # the attached files, as processes map them
        self.errors_seen: set[tuple] = set()
        self.owners: dict[int, int] = {}  # non-root file owner -> files attached
        self.held: list[_Held] = []  # what each attached file holds
        self.key_users: dict[tuple[int, int], int] = {}  # site key -> attached files using it
        self.no_room: dict[tuple[int, int], str] = {}  # ident -> path, refused for room
        self.released: list[str] = []  # paths detached since the caller looked

    def on_error(self, ev: C.EvPgError) -> None:
        """A parcagpu error probe (its PC sampling refused, a bad setting): logged once
        per kind and process; BPF counts them all (pg_errors)."""
        text = lambda b: bytes(b).split(b"\0", 1)[0].decode("utf-8", "replace")  # noqa: E731
        key = (ev.hdr.tgid, ev.code, text(ev.component), text(ev.message))
        if key in self.errors_seen or len(self.errors_seen) >= MAX_ERRORS_LOGGED:
            return
        self.errors_seen.add(key)
        log.warning("parcagpu in pid %d reports error %d in %s: %s", *key)

    def discover(self, proc: str = "/proc") -> list[ShimFile]:
        """Attach to every parcagpu file mapped by a running process and not checked
        yet. parcagpu is a CUPTI client, so only processes that map libcupti are looked
        at; in those, every executable file mapping is checked once (its inode) for
        probes of provider parcagpu."""
        new, mapped = [], set()
        for pid, data in maps_containing(proc, b"libcupti"):
            for m in file_mappings(data, executable=True):
                mapped.add(m.ident)
                if m.ident in self.checked:
                    continue
                sf = self._check(proc, pid, m)
                if sf is not None:
                    new.append(sf)
        for h in [h for h in self.held if not h.sf.ids & mapped]:
            self._release(h)
        return new

    def _release(self, h: "_Held") -> None:
        """A file no process maps: its uprobes detached, its sites freed (where no
        other attached file shares them), its owner's count given back, and the files
        refused for room looked at again at the next scan."""
        self.att.detach_handles(h.handles)
        for key in h.keys:
            self.key_users[key] -= 1
            if not self.key_users[key]:
                del self.key_users[key], self.registered[key]
                del self.sites[C.PgSiteKey(*key)]
        if h.owner:
            self.owners[h.owner] -= 1
        self.held.remove(h)
        self.files.remove(h.sf)
        self.paths = {f.path for f in self.files}
        self.checked -= h.sf.ids
        for ident, path in self.no_room.items():
            self.checked.discard(ident)
            self.errors.pop(path, None)
        self.no_room.clear()
        self.released.append(h.sf.path)

    def _check(self, proc: str, pid: int, m) -> Optional[ShimFile]:
        got = open_mapped_file(proc, pid, m)
        if got is None:
            return None  # gone: the next scan looks again
        fd, target, ids, seen = got
        if seen & self.checked:
            os.close(fd)
            self.checked.add(m.ident)
            return None
        via = f"/proc/self/fd/{fd}"
        first = len(self.att.uprobes)
        try:
            try:
                probes = [p for p in stapsdt.read_probes(via) if p.provider == PROVIDER]
            except Exception:  # not an ELF file we can read: not parcagpu
                probes = []
            self.checked |= ids
            if not probes:
                return None
            owner = os.fstat(fd).st_uid
            if owner and self.owners.get(owner, 0) >= MAX_FILES_PER_OWNER:
                self.no_room[m.ident] = m.path
                raise BpfError(
                    f"{m.path}: uid {owner} already has {MAX_FILES_PER_OWNER} parcagpu files "
                    "attached, the most one non-root owner gets"
                )
            keys = self._attach(via, m.path, probes, m.ident)
            if owner:
                self.owners[owner] = self.owners.get(owner, 0) + 1
        except BpfError as e:
            self.att.detach_from(first)
            self.errors[m.path] = str(e).replace(via, target)
            return None
        finally:
            os.close(fd)
        sf = ShimFile(m.path, target, pid, ids, source=PROVIDER)
        self.files.append(sf)
        self.paths.add(m.path)
        for key in keys:
            self.key_users[key] = self.key_users.get(key, 0) + 1
        self.held.append(_Held(sf, list(self.att.uprobes[first:]), keys, owner))
        return sf

    def _attach(self, via: str, path: str, probes: list[stapsdt.SdtProbe], ident) -> set[tuple[int, int]]:
        """Its sites registered and its uprobes attached; returns its site keys."""
        sites: list[tuple[str, stapsdt.SdtProbe, C.PgSite]] = []
        for name, (index, nargs, _fn) in PROBES.items():
            found = [p for p in probes if p.name == name]
            if not found and name in OPTIONAL:
                continue
            if not found:
                raise BpfError(f"{path} has no USDT probe {PROVIDER}:{name}")
            if len(found) > MAX_SITES_PER_PROBE:
                raise BpfError(
                    f"{path}: probe {PROVIDER}:{name} has {len(found)} sites; parcagpu's "
                    f"builds have at most {MAX_SITES_PER_PROBE}: not attached"
                )
            for p in found:
                if len(p.args) != nargs:
                    raise BpfError(
                        f"{path}: probe {PROVIDER}:{name} has {len(p.args)} arguments, parcagpu's probes.d says {nargs}"
                    )
                try:
                    site = site_of(p)
                except ValueError as e:
                    raise BpfError(f"{path}: probe {PROVIDER}:{name}: {e}") from None
                key = (index, p.pc & 0xFFF)
                old = self.registered.get(key)
                if old is not None and old != bytes(site):
                    raise BpfError(
                        f"{path}: another build of parcagpu has a {name} site at the "
                        "same page offset with other argument locations (the BPF "
                        "programs tell sites apart by that offset)"
                    )
                sites.append((name, p, site))
        new = {(PROBES[name][0], p.pc & 0xFFF) for name, p, _ in sites} - set(self.registered)
        if len(self.registered) + len(new) > MAX_SITES:
            self.no_room[ident] = path
            raise BpfError(f"{path}: the parcagpu site table is full ({len(self.registered)} of {MAX_SITES} sites)")
        for name, p, site in sites:
            index = PROBES[name][0]
            self.sites[C.PgSiteKey(index, p.pc & 0xFFF)] = site
            self.registered[(index, p.pc & 0xFFF)] = bytes(site)
        try:
            for name, p, _site in sites:  # in PROBES order: cuda_correlation's semaphore last
                self.att.attach(PROBES[name][2], via, p.pc_offset, p.semaphore_offset)
        except BpfError:
            for key in new - set(self.key_users):  # registered for this file alone
                del self.registered[key], self.sites[C.PgSiteKey(*key)]
            raise
        return {(PROBES[name][0], p.pc & 0xFFF) for name, p, _ in sites}
