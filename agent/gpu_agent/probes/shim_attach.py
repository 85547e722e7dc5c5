"""Attaching the loaded BPF programs to shim files: the agent's own shim, and
every other copy a running process maps.

The data probes are uprobes on the shim FILE (pid -1), so every process that maps
it, running now or started later, is covered. `attach` goes last, with a no-op
program and ref_ctr_offset = its semaphore's file offset: the kernel raises the
semaphore in every process mapping the file (now and at every later mmap) and
drops it when the uprobe goes away; the shim polls it to switch CUPTI on, then
replays kernel names, which the data probes (already attached) see. Each uprobe
is a BPF link of one site (bpf(BPF_LINK_CREATE), uprobe_multi: Linux >= 6.6, whose
detach is quick: _first_link says why) or, where the kernel makes none, a perf
event through our own ctypes prototype of libbcc's bpf_attach_uprobe: bcc 0.26's
Python binding declares only 6 of the C function's 7 arguments, so
ref_ctr_offset would be stack garbage.

Other copies of the shim (discover()): uprobes belong to an inode, so a
container that bakes its own copy of the shim into its image is not covered
by the attach to our file. discover() scans /proc/*/maps for mapped files named
libgpu_agent_shim.so whose inode is not attached yet, checks their USDT notes
against the contract and against the loaded program (bcc's generated argument
readers switch on the probe site's address within its page and hard-code each
site's argument locations, so a copy must have the same sites with the same
argument specs: any copy of the same build does), and attaches the same BPF
programs (one load, many uprobes) to the file through /proc/PID/root/PATH,
which reaches into the process's mount namespace, or /proc/PID/map_files/
when that path does not lead to the mapped inode. close() detaches them all.
"""

from __future__ import annotations

import ctypes as ct
import mmap
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Optional

from . import contract as C
from ..system import elf
from . import stapsdt
from .mappings import FileMapping, file_mappings, maps_containing, open_mapped_file
from .uprobe_events import sweep_uprobe_events

DATA_PROBES = {  # contract probe -> BPF function
    "cuda_correlation": "ga_cuda_correlation",
    "kernel_batch": "ga_kernel_batch",
    "kernel_name": "ga_kernel_name",
    "graph_node_stack": "ga_graph_node_stack",
    "graph_node_cloned": "ga_graph_node_cloned",
    "graph_node_destroyed": "ga_graph_node_destroyed",
    "gpu_device": "ga_gpu_device",
    "pc_sample_batch": "ga_pc_sample_batch",
    "pc_stall_reason": "ga_pc_stall_reason",
    "cubin_loaded": "ga_cubin_loaded",
    "published": "ga_published",
    "period_shape": "ga_period_shape",
}
ATTACH_FN = "ga_attach"
REPLAY_FN = "ga_replay"
KERNEL_BATCH_FN = DATA_PROBES["kernel_batch"]
# batch_prog's slots (bpf/maps.h GA_BATCH_PROG_MORE, GA_BATCH_PROG_TRACE)
BATCH_CHAIN_FNS = ("ga_kernel_batch_more", "ga_kernel_batch_trace")
# How long an agent holds the `replay` probe's semaphore up after it attaches to a
# shim file. The kernel raises it once whoever holds it, so a shim replays at its
# rise and again every 0.8 s while it stays up (shim/src/session.cpp): a hold longer
# than that and a poll (GPU_AGENT_POLL_MS, default 100 ms) gets one replay, however
# other agents' holds overlap it.
REPLAY_HOLD_S = 2.0
SHIM_BASENAME = "libgpu_agent_shim.so"  # what discover() looks for in /proc/*/maps


class BpfError(RuntimeError):
    pass


@dataclass
class ShimFile:
    """One shim file (inode) the programs are attached to."""

    path: str  # as first seen (in the owning process's mount namespace)
    attach_path: str  # what the uprobes were attached through
    pid: int  # the process it was found in (0: the agent's own shim)
    ids: set = field(default_factory=set)  # (st_dev, st_ino) pairs naming this file
    source: str = "shim"  # or "parcagpu": a parcagpu library (parcagpu.py)


def read_shim(path: str) -> tuple[dict[str, list[stapsdt.SdtProbe]], list[elf.LoadSegment]]:
    """The gpu_agent probes of the shim at path, checked against the contract, and
    its PT_LOAD segments. A shim of another contract version is refused first,
    with a line that says so, before any of its probes is misread."""
    if not os.path.isfile(path):
        raise BpfError(f"shim not found: {path}")
    try:
        from elftools.elf.elffile import ELFFile

        with open(path, "rb") as f:  # one open: notes, segments and version of one file
            ef = ELFFile(f)
            all_probes = stapsdt.probes_in(ef, path)
            loads = elf.load_segments(ef)
            version = _contract_version(ef, f, loads)
    except Exception as e:
        raise BpfError(f"cannot read USDT notes of {path}: {e}") from None
    if version is not None and version != C.CONTRACT_VERSION:
        raise BpfError(
            f"{path} speaks probe contract version {version}, this agent "
            f"version {C.CONTRACT_VERSION}: install the shim that came with this "
            "agent (gpu-agent install-shim, or gpu-agent shim-path)"
        )
    probes: dict[str, list[stapsdt.SdtProbe]] = {}
    for p in all_probes:
        if p.provider == C.PROVIDER:
            probes.setdefault(p.name, []).append(p)
    if version is None and probes:
        raise BpfError(
            f"{path} exports no probe contract version: a shim older than this "
            "agent; install the shim that came with this agent (gpu-agent "
            "install-shim, or gpu-agent shim-path)"
        )
    for name, args in C.PROBES.items():
        sites = probes.get(name)
        if not sites:
            raise BpfError(
                f"{path} has no USDT probe {C.PROVIDER}:{name}: "
                "not a gpu-agent shim, or built from another probe contract"
            )
        for s in sites:
            if len(s.args) != len(args):
                raise BpfError(f"{path}: probe {name} has {len(s.args)} arguments, the contract says {len(args)}")
            if bool(s.semaphore) != (name in C.SEMAPHORE_PROBES):
                raise BpfError(f"{path}: probe {name} {'lacks' if name in C.SEMAPHORE_PROBES else 'has'} a semaphore")
    if len({p.semaphore for p in probes["attach"]}) != 1:
        raise BpfError(f"{path}: attach probe sites disagree on the semaphore")
    return probes, loads


def _contract_version(e, f, loads) -> Optional[int]:
    """The shim's exported contract version, or None for a file without one (the
    probe check then says what is wrong with it)."""
    with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
        vaddr = elf.find_symbols(e, mm, (C.CONTRACT_VERSION_SYMBOL,), (".dynsym",)).get(C.CONTRACT_VERSION_SYMBOL)
        if vaddr is None:
            return None
        off = elf.vaddr_to_offset(loads, vaddr)
        return struct.unpack_from("<I" if e.little_endian else ">I", mm, off)[0]


class ShimAttachments:
    """The uprobes of one loaded BPF program on shim files, in attach order: the
    agent's own shim (attach_own), and copies found later (discover)."""

    def __init__(self, bpf, lib, shim_path: str, sites: frozenset):
        self.bpf, self.lib, self.shim_path = bpf, lib, shim_path
        self.sites = sites  # data-probe sites bcc generated argument readers for
        self._attach_uprobe = _attach_uprobe_fn(lib)
        # How uprobes are made: None until the first attach tries a BPF link, then
        # UPROBE_MULTI (links) or -1 (perf events, bcc's way), for every program alike
        self.attach_type: Optional[int] = None
        self.uprobes: list[tuple[bytes, int]] = []  # (ev_name, link or perf fd), attach order
        self.replay_holds: list[tuple[float, tuple[bytes, int]]] = []  # (until, uprobe)
        self.files_: list[ShimFile] = []
        self.known_ids: set[tuple[int, int]] = set()  # attached or rejected inodes
        self.discover_errors: dict[str, str] = {}  # path -> why it was not attached
        sweep_uprobe_events()  # what agents that died left behind

    def attach_own(self, usdt, probes: dict, loads: list) -> None:
        """The data probes by library path (every site bcc generated code for),
        then the semaphore last: the shim only starts CUPTI once everything listens."""
        # kernel_batch last: its chain's programs (bpf/maps.h batch_progress) are put in
        # place first, loaded for the way the probes before it were made.
        sites = sorted(usdt.enumerate_active_probes(), key=lambda p: p[1] == KERNEL_BATCH_FN.encode())
        for _binpath, fn_name, vaddr, _pid in sites:
            if fn_name == KERNEL_BATCH_FN.encode():
                self.fill_batch_chain()
            self.attach(fn_name.decode(), self.shim_path, elf.vaddr_to_offset(loads, vaddr), 0)
        att = probes["attach"][0]
        self.attach(ATTACH_FN, self.shim_path, att.pc_offset, att.semaphore_offset)
        self.ask_replay(self.shim_path, probes)
        st = os.stat(self.shim_path)
        self.files_ = [ShimFile(self.shim_path, self.shim_path, 0, {(st.st_dev, st.st_ino)})]
        self.known_ids = {(st.st_dev, st.st_ino)}

    def fill_batch_chain(self) -> None:
        """The programs a kernel_batch probe tail-calls (batch_prog): its next chunk,
        and a traced process's events. Loaded as the probes are made (load())."""
        for slot, fn in enumerate(BATCH_CHAIN_FNS):
            self.bpf[b"batch_prog"][ct.c_int(slot)] = ct.c_int(self.load(fn).fd)

    def close(self) -> None:
        """Detach `attach` (the semaphore drops, the shim stops CUPTI) before the data
        probes. Each detach waits out an RCU grace period in the kernel (about 0.1 s
        on this VM's 6.18 kernel: 13 one after another took 1.4 s of every stop), so
        the data probes go in parallel."""
        marker = f"_{ATTACH_FN}_".encode()
        handles = list(reversed(self.uprobes))
        self._detach_together([h for h in handles if marker in h[0]])
        self._detach_together([h for h in handles if marker not in h[0]])
        self.uprobes.clear()
        self.replay_holds.clear()
        self.files_ = []
        self.known_ids = set()
        sweep_uprobe_events(mine=True)

    def let_go(self) -> None:
        """Detach only `attach`: the semaphore drops, and each shim that no other agent
        holds publishes what it holds (final `published`) while the data probes
        still listen. close() detaches the rest."""
        marker = f"_{ATTACH_FN}_".encode()
        mine = [h for h in self.uprobes if marker in h[0]]
        for h in mine:
            self.uprobes.remove(h)
        self._detach_together(mine)

    def ask_replay(self, path: str, probes: dict) -> None:
        """Raise the `replay` semaphore of this shim file for REPLAY_HOLD_S: shims
        that another agent attached already announce their names again (the attach
        semaphore does not rise for a second agent). poll() lets go of it."""
        rep = probes[C.REPLAY_PROBE][0]
        self.attach(REPLAY_FN, path, rep.pc_offset, rep.semaphore_offset)
        self.replay_holds.append((time.monotonic() + REPLAY_HOLD_S, self.uprobes[-1]))

    def release_replays(self, now: float) -> None:
        while self.replay_holds and self.replay_holds[0][0] <= now:
            _, handle = self.replay_holds.pop(0)
            self.detach_handles([handle])

    def load(self, fn_name: str):
        """A program, loaded once (bcc caches it) for the way uprobes are made here:
        a program for uprobe links says so when it is loaded, and so must a program
        it tail-calls (the kernel refuses a tail call across attach types)."""
        from bcc import BPF

        kind = -1 if self.attach_type is None else self.attach_type
        return self.bpf.load_func(fn_name.encode(), BPF.KPROBE, attach_type=kind)

    def attach(self, fn_name: str, path: str, offset: int, ref_ctr_offset: int) -> None:
        ev_name = b"ga_%d_%d_%s_0x%x" % (os.getpid(), len(self.files_), fn_name.encode(), offset)
        if self.attach_type is None and self._first_link(fn_name, ev_name, path, offset, ref_ctr_offset):
            return
        fn = self.load(fn_name)
        if self.attach_type == UPROBE_MULTI:
            fd = _link_uprobe(fn.fd, path, offset, ref_ctr_offset)
        else:
            fd = self._attach_uprobe(fn.fd, 0, ev_name, path.encode(), offset, -1, ref_ctr_offset)
        if fd < 0:
            err = ct.get_errno()
            if self.attach_type != UPROBE_MULTI:  # bcc's tracefs fallback may have made the event
                self.lib.bpf_detach_uprobe(ev_name)
            why = os.strerror(err) if err else "unknown error"
            hint = ""
            if ref_ctr_offset:
                hint = (
                    " (the kernel refused the semaphore: another tracer may hold a uprobe "
                    "on this probe with a different ref_ctr_offset)"
                )
            raise BpfError(f"cannot attach uprobe {fn_name} at {path}+{offset:#x}: {why}{hint}")
        self.uprobes.append((ev_name, fd))

    def _first_link(self, fn_name: str, ev_name: bytes, path: str, offset: int, ref_ctr_offset: int) -> bool:
        """The first uprobe chooses how all are made: a BPF link (Linux >= 6.6) where
        the kernel makes one, else a perf event, as bcc makes them. A link's detach
        waits out a grace period that others' share; a perf event's waits its own
        under a global lock: 15 uprobes took 1.2-1.5 s to detach as perf events and
        0.06-0.09 s as links (this project's 6.18 VM; docs/benchmarks.md, "Agent
        start"). Whether this one was attached (as a link)."""
        self.attach_type = UPROBE_MULTI
        fn = self.load(fn_name)
        fd = _link_uprobe(fn.fd, path, offset, ref_ctr_offset)
        if fd >= 0:
            self.uprobes.append((ev_name, fd))
            return True
        self.attach_type = -1  # loaded again, for perf events
        del self.bpf.funcs[fn_name.encode()]
        os.close(fn.fd)
        return False

    def detach_from(self, first: int) -> None:
        """Detach the uprobes attached since there were `first` (a failed file's)."""
        for handle in reversed(self.uprobes[first:]):
            self._detach_one(handle)
        del self.uprobes[first:]

    def detach_handles(self, handles: list) -> None:
        """Detach these uprobes (a parcagpu file no process maps any more)."""
        mine = [h for h in handles if h in self.uprobes]
        for handle in mine:
            self.uprobes.remove(handle)
        self._detach_together(mine)

    def _detach_one(self, handle: tuple) -> None:
        if self.attach_type == UPROBE_MULTI:
            os.close(handle[1])
            return
        self.lib.bpf_close_perf_event_fd(handle[1])
        self.lib.bpf_detach_uprobe(handle[0])

    def _detach_together(self, handles: list) -> None:
        """Detach uprobes at once, their grace periods overlapping (ctypes lets go of
        the GIL in each call)."""
        if len(handles) <= 1:
            for h in handles:
                self._detach_one(h)
            return
        with ThreadPoolExecutor(max_workers=min(16, len(handles))) as pool:
            list(pool.map(self._detach_one, handles))

    def attached_files(self) -> int:
        """How many shim files (inodes) the programs are attached to."""
        return len(self.files_)

    def files(self) -> list[ShimFile]:
        return list(self.files_)

    def discover(self, proc: str = "/proc") -> list[ShimFile]:
        """Attach to every shim file mapped by a running process that is not
        attached yet (see the module doc). Returns the files newly attached.
        A file that cannot be used is remembered (discover_errors) and not
        retried; one whose process went away before the attach is retried."""
        new: list[ShimFile] = []
        for pid, data in maps_containing(proc, SHIM_BASENAME.encode()):
            for m in file_mappings(data, SHIM_BASENAME):
                if m.ident in self.known_ids:
                    continue
                sf = self._attach_copy(proc, pid, m)
                if sf is not None:
                    new.append(sf)
        return new

    def _attach_copy(self, proc: str, pid: int, m: FileMapping) -> Optional[ShimFile]:
        """Attach to the shim copy mapped at m. The file is opened once, checked (a
        regular file, the very inode mapped) and then named only through that open
        file (/proc/self/fd/N) for reading its notes and for every uprobe: the
        process that maps it can swap its path (a directory exchange, a symlink to
        a root-owned library a root process maps) after the check, and a root
        agent must never plant breakpoints in a file it did not verify."""
        got = open_mapped_file(proc, pid, m)
        if got is None:
            return None  # the process went away: try again at the next scan
        fd, target, ids, seen = got
        known = seen & self.known_ids
        if known:  # the same file, named by another device number
            os.close(fd)
            self.known_ids.add(m.ident)
            for f in self.files_:
                if known & f.ids:
                    f.ids.add(m.ident)
            return None
        via = f"/proc/self/fd/{fd}"
        first = len(self.uprobes)
        try:
            probes, _ = read_shim(via)
            if data_sites(probes) - self.sites:
                raise BpfError(
                    f"{m.path} (pid {pid}) is another build of the shim: its probe sites or "
                    f"argument locations differ from {self.shim_path}, which the loaded BPF "
                    "program reads arguments for"
                )
            for name, fn in DATA_PROBES.items():
                for site in probes[name]:
                    self.attach(fn, via, site.pc_offset, 0)
            att = probes["attach"][0]
            self.attach(ATTACH_FN, via, att.pc_offset, att.semaphore_offset)
            self.ask_replay(via, probes)
        except BpfError as e:
            self.detach_from(first)
            if os.path.exists(f"{proc}/{pid}"):  # not a vanished process: do not retry
                self.known_ids |= ids
                self.discover_errors[m.path] = str(e).replace(via, target)
            return None
        finally:
            os.close(fd)  # the uprobes hold the inode itself
        sf = ShimFile(m.path, target, pid, ids)
        self.files_.append(sf)
        self.known_ids |= ids
        return sf


def data_sites(probes: dict[str, list[stapsdt.SdtProbe]]) -> frozenset:
    """What bcc's generated argument readers depend on, per data-probe site:
    the probe, the site's address within its page, its argument specs."""
    return frozenset((name, p.pc & 0xFFF, p.args) for name in DATA_PROBES for p in probes.get(name, ()))


# BPF_TRACE_UPROBE_MULTI (linux/bpf.h, Linux 6.6): a program for uprobe links
UPROBE_MULTI = 48
_BPF_LINK_CREATE = 28
_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine, 321)
_libc = ct.CDLL(None, use_errno=True)
_libc.syscall.restype = ct.c_long


def _link_uprobe(prog_fd: int, path: str, offset: int, ref_ctr_offset: int) -> int:
    """One uprobe at path+offset (every process, pid 0) as a BPF link of one site
    (bpf(BPF_LINK_CREATE), its uprobe_multi part: path, offsets, ref_ctr_offsets,
    cookies, cnt, flags, pid); the link's fd, or -1 with errno set."""
    name = ct.create_string_buffer(path.encode())
    offsets = (ct.c_uint64 * 1)(offset)
    ref_ctrs = (ct.c_uint64 * 1)(ref_ctr_offset)
    attr = (ct.c_uint8 * 64)()
    struct.pack_into("<IIII", attr, 0, prog_fd, 0, UPROBE_MULTI, 0)
    struct.pack_into(
        "<QQQQIII",
        attr,
        16,
        ct.addressof(name),
        ct.addressof(offsets),
        ct.addressof(ref_ctrs) if ref_ctr_offset else 0,
        0,
        1,
        0,
        0,
    )
    return int(_libc.syscall(_SYS_BPF, _BPF_LINK_CREATE, ct.byref(attr), ct.sizeof(attr)))


def _attach_uprobe_fn(lib):
    """libbcc's bpf_attach_uprobe with its real 7-argument C signature.

    int bpf_attach_uprobe(int progfd, enum bpf_probe_attach_type type,
                          const char *ev_name, const char *binary_path,
                          uint64_t offset, pid_t pid, uint32_t ref_ctr_offset)
    A separate prototype, so bcc's own (6-argument) declaration is left alone.
    """
    proto = ct.CFUNCTYPE(
        ct.c_int, ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p, ct.c_uint64, ct.c_int, ct.c_uint32, use_errno=True
    )
    return proto(("bpf_attach_uprobe", lib))
