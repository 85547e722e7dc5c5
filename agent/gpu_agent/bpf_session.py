"""Load bpf/gpu_agent.bpf.c, attach it to the shim by library path, read it back.

Attach (open()):
  1. The shim's .note.stapsdt is read (stapsdt.py) and checked against the
     contract: every probe present, only `attach` with a semaphore.
  2. bcc's USDT(path=shim) generates the bpf_usdt_readarg() code for the
     data probes from their argument specs (one switch case per probe site).
  3. The data probes are attached as uprobes on the shim FILE (pid -1): every
     process that maps the shim, running now or started later, is covered.
  4. Last, `attach` gets a no-op program through libbcc's 7-argument
     bpf_attach_uprobe() with ref_ctr_offset = the semaphore's file offset:
     the kernel raises the semaphore in every process mapping the shim (now
     and at every later mmap) and drops it when the uprobe goes away. The shim
     polls it to switch CUPTI on; it then replays kernel names, which the data
     probes (already attached) see.
  All uprobes go through our own ctypes prototype of bpf_attach_uprobe, not
  BPF.attach_uprobe(): bcc 0.26's Python binding declares only 6 of the
  C function's 7 arguments, so ref_ctr_offset would be stack garbage.

Drain (drain()): exact across drains by a generation flip. The BPF program
has two sets of aggregation maps (totals0/sampled0, totals1/sampled1) and
kernel_batch reads the 1-entry array `generation` once per batch to pick the
set it writes. drain():
  1. writes the other generation;
  2. waits for every program that may still hold the old generation: it
     stores a map fd into the map-in-map `drain_barrier`, and the kernel
     returns from a userspace map-in-map update only after synchronize_rcu()
     (kernel/bpf/syscall.c, maybe_wait_bpf_programs(); the kernel's own
     selftests use it as "kern_sync_rcu"). Uprobe programs that are not
     sleepable run inside rcu_read_lock() (bpf_prog_run_array_uprobe), so
     when the update returns every batch that read the old generation has
     finished, and every later batch reads the new one. If the update fails
     (it should not), a 10 ms sleep stands in: uprobe programs never sleep and
     one batch takes microseconds, so that is a practical grace period, not a
     guarantee; agent_barrier_fallbacks counts it;
  3. reads and deletes the whole old set (BPF_MAP_LOOKUP_AND_DELETE_BATCH),
     which nobody writes any more.
A drain that fails half-way leaves keys in the old set; the next drain flips
writes back onto them and the one after drains them: nothing is lost.

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
import errno
import os
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

from . import contract as C
from . import elf, paths, preflight, procfs, stapsdt
from .names import KernelNames
from .safe_open import open_regular

DATA_PROBES = {  # contract probe -> BPF function
    "cuda_correlation": "ga_cuda_correlation",
    "kernel_batch": "ga_kernel_batch",
    "kernel_name": "ga_kernel_name",
    "graph_node_stack": "ga_graph_node_stack",
    "graph_node_cloned": "ga_graph_node_cloned",
    "graph_node_destroyed": "ga_graph_node_destroyed",
}
ATTACH_FN = "ga_attach"
REPLAY_FN = "ga_replay"
# How long an agent holds the `replay` probe's semaphore up after it attaches to a
# shim file: several of the shim's polls (GPU_AGENT_POLL_MS, default 100 ms).
REPLAY_HOLD_S = 1.5
BATCH_CHUNK = 1024      # keys per BPF_MAP_LOOKUP_AND_DELETE_BATCH call
FALLBACK_GRACE_S = 0.010  # grace period if the synchronize_rcu() barrier is refused
SHIM_BASENAME = "libgpu_agent_shim.so"  # what discover() looks for in /proc/*/maps


class BpfError(RuntimeError):
    pass


class AggKey(NamedTuple):
    tgid: int
    device_id: int
    stream_id: int
    graph_id: int
    kernel_id: int
    stack_id: int
    # Graph kernels (contract: ga_agg_key): the stack that created the node
    # (graph_flags & C.AGG_CAPTURED), or C.AGG_NODE_UNKNOWN when that was never seen.
    capture_stack_id: int = 0
    graph_flags: int = 0


class AggVal(NamedTuple):
    gpu_ns: int
    launches: int
    weighted_ns: int
    weighted_launches: int

    def estimated(self) -> tuple[int, int]:
        """A totals value as (GPU ns, launches) of the whole run.

        The shim collects in one time window of every N (its duty cycle) and
        weights each record by all launches / windowed launches, about N
        (shim/src/window.cpp), so the weighted sums are the estimate;
        with continuous collection they equal the exact sums. A value without
        weighted sums (hand-built in a test) is taken as exact."""
        if self.weighted_launches:
            return self.weighted_ns, self.weighted_launches
        return self.gpu_ns, self.launches


@dataclass
class Drain:
    totals: dict[AggKey, AggVal]
    sampled: dict[AggKey, AggVal]
    counters: dict[str, int]
    # Launch-to-start latency of sampled launches: (tgid, device) ->
    # (counts by floor(log2(ns)), a list of C.LAT_BUCKETS; sum of the latencies in ns).
    latency: dict = field(default_factory=dict)


@dataclass
class ShimFile:
    """One shim file (inode) the programs are attached to."""

    path: str                  # as first seen (in the owning process's mount namespace)
    attach_path: str           # what the uprobes were attached through
    pid: int                   # the process it was found in (0: the agent's own shim)
    ids: set = field(default_factory=set)  # (st_dev, st_ino) pairs naming this file


class BpfSession:
    """One loaded copy of the BPF program, attached to one shim file.

    Public API: open(), poll(timeout_ms) -> int, drain() -> Drain,
    counters() -> dict[str, int], get_stack(tgid, stack_id) -> list[int] | None,
    close(); attribute names: dict[int, bytes] (kernel_id -> mangled name).
    Callbacks run inside poll(): on_new_stack(tgid, stack_id), on_proc_exit(tgid),
    on_proc_attach(tgid) (the shim in tgid attached: set up its Python stacks now).
    Python stacks: set_py_config(tgid, C.PyConfig), del_py_config(tgid),
    get_py_stack(tgid, stack_id) -> C.PyStack | None.
    """

    def __init__(self, shim_path: str, *,
                 on_new_stack: Optional[Callable[[int, int], None]] = None,
                 on_proc_exit: Optional[Callable[[int], None]] = None,
                 cflags: Optional[list[str]] = None):
        self.shim_path = os.path.realpath(shim_path)
        self.on_new_stack = on_new_stack
        self.on_proc_exit = on_proc_exit
        self.on_proc_attach: Optional[Callable[[int], None]] = None
        self.extra_cflags = list(cflags or [])
        self._agent_counts = {"ev_corrupt": 0, "ev_unknown": 0, "callback_errors": 0,
                              "barrier_fallbacks": 0}
        self.names = KernelNames(self._agent_counts)
        self._bpf = None
        self._uprobes: list[tuple[bytes, int]] = []  # (ev_name, perf fd), attach order
        self._replay_holds: list[tuple[float, tuple[bytes, int]]] = []  # (until, uprobe)
        self._cb_error: Optional[BaseException] = None
        self._events = 0
        self._ncpu = 0
        self._gen = 0  # the aggregation set BPF writes now
        self._files: list[ShimFile] = []
        self._known_ids: set[tuple[int, int]] = set()  # attached or rejected inodes
        self._sites: frozenset = frozenset()  # data-probe sites bcc generated readers for
        self.discover_errors: dict[str, str] = {}  # path -> why it was not attached

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None:
        bcc = preflight.import_bcc()
        from bcc import BPF, USDT
        from bcc.libbcc import lib
        from bcc.utils import get_possible_cpus

        self._lib = lib
        self._ncpu = len(get_possible_cpus())
        self._attach_uprobe = _attach_uprobe_fn(lib)
        probes = self._check_shim(self.shim_path)

        usdt = USDT(path=self.shim_path)
        for probe, fn in DATA_PROBES.items():
            try:
                usdt.enable_probe(f"{C.PROVIDER}:{probe}", fn)
            except Exception as e:
                raise BpfError(f"bcc cannot use probe {C.PROVIDER}:{probe} of {self.shim_path}: "
                               f"{str(e).splitlines()[0]}") from None
        usdt_text = usdt.get_text()

        bpf_dir, inc_dir = paths.bpf_dir(), paths.include_dir()
        src = _splice_local_includes((bpf_dir / "gpu_agent.bpf.c").read_text(), bpf_dir)
        cflags = ["-DGA_BPF", f"-I{inc_dir}", f"-I{bpf_dir}", "-Wno-comment"]
        if _tracepoint_has_field("sched", "sched_process_exit", "group_dead"):
            cflags.append("-DGA_HAVE_GROUP_DEAD")
        cflags += self.extra_cflags
        try:
            # TRACEPOINT_PROBE (process exit) is attached by bcc itself here.
            self._bpf = BPF(text=(usdt_text + src).encode(), cflags=cflags)
        except Exception as e:
            raise BpfError(f"loading {bpf_dir / 'gpu_agent.bpf.c'} failed: {e}") from None
        _ = bcc
        self._sites = _data_sites(probes)
        try:
            self._fill_map_arrays()  # before any probe can run kernel_batch
            # Data probes first, by library path: every site bcc generated code for.
            for binpath, fn_name, vaddr, _pid in usdt.enumerate_active_probes():
                offset = elf.vaddr_to_offset(self._loads, vaddr)
                self._attach(fn_name.decode(), self.shim_path, offset, 0)
            # The semaphore last: the shim only starts CUPTI once everything listens.
            att = probes["attach"][0]
            self._attach(ATTACH_FN, self.shim_path, att.pc_offset, att.semaphore_offset)
            self._ask_replay(self.shim_path, probes)
        except BaseException:
            self.close()
            raise
        st = os.stat(self.shim_path)
        self._files = [ShimFile(self.shim_path, self.shim_path, 0, {(st.st_dev, st.st_ino)})]
        self._known_ids = {(st.st_dev, st.st_ino)}
        self._bpf[b"events"].open_ring_buffer(self._on_event)
        self._maps = {n: self._bpf[n.encode()] for n in (
            "totals0", "totals1", "sampled0", "sampled1", "latency0", "latency1",
            "generation", "drain_barrier",
            "stacks", "counters", "py_procs", "py_stacks", "node_stacks", "corr_stacks")}
        self._gen = 0
        self._set_generation(0)

    def _fill_map_arrays(self) -> None:
        """agg_maps = [totals0, totals1, sampled0, sampled1], lat_maps = [latency0, latency1]:
        kernel_batch reaches its generation's maps by index (see the BPF source)."""
        for outer, inner in (("agg_maps", ("totals0", "totals1", "sampled0", "sampled1")),
                             ("lat_maps", ("latency0", "latency1"))):
            ofd = self._bpf[outer.encode()].map_fd
            for i, name in enumerate(inner):
                key, val = ct.c_uint32(i), ct.c_uint32(self._bpf[name.encode()].map_fd)
                if self._lib.bpf_update_elem(ofd, ct.byref(key), ct.byref(val), 0) != 0:
                    raise BpfError(f"cannot set {outer}[{i}] = {name}: "
                                   f"{os.strerror(ct.get_errno())}")

    def close(self) -> None:
        """Detach `attach` first (semaphore drops, the shim stops CUPTI), then the rest."""
        if self._bpf is None:
            return
        for ev_name, fd in reversed(self._uprobes):
            self._lib.bpf_close_perf_event_fd(fd)
            self._lib.bpf_detach_uprobe(ev_name)
        self._uprobes.clear()
        self._replay_holds.clear()
        self._files = []
        self._known_ids = set()
        try:
            self._bpf.cleanup()
        finally:
            self._bpf = None

    def __enter__(self) -> "BpfSession":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- attach ------------------------------------------------------------
    def _check_shim(self, path: str) -> dict[str, list[stapsdt.SdtProbe]]:
        """The gpu_agent probes of the shim at path, checked against the contract."""
        if not os.path.isfile(path):
            raise BpfError(f"shim not found: {path}")
        try:
            all_probes = stapsdt.read_probes(path)
            from elftools.elf.elffile import ELFFile
            with open(path, "rb") as f:
                loads = elf.load_segments(ELFFile(f))
        except Exception as e:
            raise BpfError(f"cannot read USDT notes of {path}: {e}") from None
        if path == self.shim_path:
            self._loads = loads
        probes: dict[str, list[stapsdt.SdtProbe]] = {}
        for p in all_probes:
            if p.provider == C.PROVIDER:
                probes.setdefault(p.name, []).append(p)
        for name, args in C.PROBES.items():
            sites = probes.get(name)
            if not sites:
                raise BpfError(f"{path} has no USDT probe {C.PROVIDER}:{name}: "
                               "not a gpu-agent shim, or built from another probe contract")
            for s in sites:
                if len(s.args) != len(args):
                    raise BpfError(f"{path}: probe {name} has {len(s.args)} arguments, "
                                   f"the contract says {len(args)}")
                if bool(s.semaphore) != (name in C.SEMAPHORE_PROBES):
                    raise BpfError(f"{path}: probe {name} "
                                   f"{'lacks' if name in C.SEMAPHORE_PROBES else 'has'} a semaphore")
        if len({p.semaphore for p in probes["attach"]}) != 1:
            raise BpfError(f"{path}: attach probe sites disagree on the semaphore")
        return probes

    def _ask_replay(self, path: str, probes: dict) -> None:
        """Raise the `replay` semaphore of this shim file for REPLAY_HOLD_S: shims
        that another agent attached already announce their names again (the attach
        semaphore does not rise for a second agent). poll() lets go of it."""
        rep = probes[C.REPLAY_PROBE][0]
        self._attach(REPLAY_FN, path, rep.pc_offset, rep.semaphore_offset)
        self._replay_holds.append((time.monotonic() + REPLAY_HOLD_S, self._uprobes[-1]))

    def _release_replays(self, now: float) -> None:
        while self._replay_holds and self._replay_holds[0][0] <= now:
            _, handle = self._replay_holds.pop(0)
            if handle in self._uprobes:
                self._uprobes.remove(handle)
                self._lib.bpf_close_perf_event_fd(handle[1])
                self._lib.bpf_detach_uprobe(handle[0])

    def _attach(self, fn_name: str, path: str, offset: int, ref_ctr_offset: int) -> None:
        from bcc import BPF
        fn = self._bpf.load_func(fn_name.encode(), BPF.KPROBE)  # loaded once, cached by bcc
        ev_name = b"ga_%d_%d_%s_0x%x" % (os.getpid(), len(self._files), fn_name.encode(), offset)
        fd = self._attach_uprobe(fn.fd, 0, ev_name, path.encode(), offset, -1, ref_ctr_offset)
        if fd < 0:
            err = ct.get_errno()
            why = os.strerror(err) if err else "unknown error"
            hint = ""
            if ref_ctr_offset:
                hint = (" (the kernel refused the semaphore: another tracer may hold a uprobe "
                        "on this probe with a different ref_ctr_offset)")
            raise BpfError(f"cannot attach uprobe {fn_name} at {path}+{offset:#x}: "
                           f"{why}{hint}")
        self._uprobes.append((ev_name, fd))

    # -- other copies of the shim ----------------------------------------------
    def attached_files(self) -> int:
        """How many shim files (inodes) the programs are attached to."""
        return len(self._files)

    def files(self) -> list[ShimFile]:
        return list(self._files)

    def discover(self, proc: str = "/proc") -> list[ShimFile]:
        """Attach to every shim file mapped by a running process that is not
        attached yet (see the module doc). Returns the files newly attached.
        A file that cannot be used is remembered (discover_errors) and not
        retried; one whose process went away before the attach is retried."""
        if self._bpf is None:
            raise BpfError("session is not open")
        new: list[ShimFile] = []
        needle = SHIM_BASENAME.encode()
        try:
            pids = [int(d) for d in os.listdir(proc) if d.isdigit()]
        except OSError:
            return new
        for pid in pids:
            try:
                with open(f"{proc}/{pid}/maps", "rb") as f:
                    data = f.read()
            except OSError:
                continue  # gone, or a kernel thread
            if needle not in data:
                continue
            for m in _shim_mappings(data):
                if m.ident in self._known_ids:
                    continue
                sf = self._attach_copy(proc, pid, m)
                if sf is not None:
                    new.append(sf)
        return new

    def _attach_copy(self, proc: str, pid: int, m: "_Mapping") -> Optional[ShimFile]:
        """Attach to the shim copy mapped at m. The file is opened once, checked (a
        regular file, the very inode mapped) and then named only through that open
        file (/proc/self/fd/N) for reading its notes and for every uprobe: the
        process that maps it can swap its path (a directory exchange, a symlink to
        a root-owned library a root process maps) after the check, and a root
        agent must never plant breakpoints in a file it did not verify."""
        candidates = []
        if not m.deleted:
            candidates.append(f"{proc}/{pid}/root{m.path}")
        candidates.append(f"{proc}/{pid}/map_files/{m.range}")
        target, ids, fd = None, {m.ident}, -1
        for c in candidates:
            got = open_regular(c)
            if got is None:
                continue
            cfd, st = got
            sid = (st.st_dev, st.st_ino)
            if sid in self._known_ids:  # the same file, named by another device number
                os.close(cfd)
                if fd >= 0:
                    os.close(fd)
                self._known_ids.add(m.ident)
                for f in self._files:
                    if sid in f.ids:
                        f.ids.add(m.ident)
                return None
            # map_files/RANGE is the mapped file itself; a path must still name its inode.
            if fd < 0 and (sid == m.ident or c.endswith(m.range)):
                target, fd = c, cfd
                ids.add(sid)
            else:
                os.close(cfd)
        if fd < 0:
            return None  # the process went away: try again at the next scan
        via = f"/proc/self/fd/{fd}"
        first = len(self._uprobes)
        try:
            probes = self._check_shim(via)
            if _data_sites(probes) - self._sites:
                raise BpfError(
                    f"{m.path} (pid {pid}) is another build of the shim: its probe sites or "
                    f"argument locations differ from {self.shim_path}, which the loaded BPF "
                    "program reads arguments for")
            for name, fn in DATA_PROBES.items():
                for site in probes[name]:
                    self._attach(fn, via, site.pc_offset, 0)
            att = probes["attach"][0]
            self._attach(ATTACH_FN, via, att.pc_offset, att.semaphore_offset)
            self._ask_replay(via, probes)
        except BpfError as e:
            for ev_name, pfd in reversed(self._uprobes[first:]):
                self._lib.bpf_close_perf_event_fd(pfd)
                self._lib.bpf_detach_uprobe(ev_name)
            del self._uprobes[first:]
            if os.path.exists(f"{proc}/{pid}"):  # not a vanished process: do not retry
                self._known_ids |= ids
                self.discover_errors[m.path] = str(e).replace(via, target)
            return None
        finally:
            os.close(fd)  # the uprobes hold the inode itself
        sf = ShimFile(m.path, target, pid, ids)
        self._files.append(sf)
        self._known_ids |= ids
        return sf

    # -- ring buffer -------------------------------------------------------
    def poll(self, timeout_ms: int) -> int:
        """Handle pending ring-buffer events (waiting up to timeout_ms for the first).

        Returns the number of events handled. An exception raised by a
        callback is re-raised here, after the poll.
        """
        if self._bpf is None:
            raise BpfError("session is not open")
        before = self._events
        if self._replay_holds:
            self._release_replays(time.monotonic())
        self._bpf.ring_buffer_poll(timeout_ms)  # bcc 0.26 returns None, not a count
        err, self._cb_error = self._cb_error, None
        if err is not None:
            raise err
        return self._events - before

    def _on_event(self, _ctx, data, size) -> int:
        # Runs inside libbpf's poll through ctypes: never let anything escape.
        self._events += 1
        try:
            self._handle(ct.string_at(data, size))
        except Exception as e:  # a user callback failed
            self._agent_counts["callback_errors"] += 1
            if self._cb_error is None:
                self._cb_error = e
        return 0

    def _handle(self, buf: bytes) -> None:
        if len(buf) < ct.sizeof(C.EventHdr):
            self._agent_counts["ev_corrupt"] += 1
            return
        hdr = C.EventHdr.from_buffer_copy(buf)
        if hdr.type == C.EventType.GA_EV_NAME_CHUNK:
            if len(buf) < C.EvNameChunk.data.offset:
                self._agent_counts["ev_corrupt"] += 1
                return
            ev = C.EvNameChunk.from_buffer_copy(buf.ljust(ct.sizeof(C.EvNameChunk), b"\0"))
            self.names.chunk(ev.kernel_id, ev.total_len, ev.offset, ev.len,
                             buf[C.EvNameChunk.data.offset:])
        elif hdr.type == C.EventType.GA_EV_NEW_STACK:
            if len(buf) < ct.sizeof(C.EvNewStack):
                self._agent_counts["ev_corrupt"] += 1
                return
            ev = C.EvNewStack.from_buffer_copy(buf)
            if self.on_new_stack is not None:
                self.on_new_stack(hdr.tgid, ev.stack_id)
        elif hdr.type == C.EventType.GA_EV_PROC_EXIT:
            if self.on_proc_exit is not None:
                self.on_proc_exit(hdr.tgid)
        elif hdr.type == C.EventType.GA_EV_PROC_ATTACH:
            if self.on_proc_attach is not None:
                self.on_proc_attach(hdr.tgid)
        else:
            self._agent_counts["ev_unknown"] += 1

    # -- maps --------------------------------------------------------------
    def drain(self) -> Drain:
        """Everything aggregated since the last drain, exactly once (generation
        flip, see the module doc); counters stay cumulative."""
        if self._bpf is None:
            raise BpfError("session is not open")
        old = self._gen
        self._set_generation(1 - old)
        self._gen = 1 - old
        self._wait_for_programs()
        return Drain(totals=self._drain_map(self._maps[f"totals{old}"]),
                     sampled=self._drain_map(self._maps[f"sampled{old}"]),
                     counters=self.counters(),
                     latency=self._drain_latency(self._maps[f"latency{old}"]))

    def _set_generation(self, gen: int) -> None:
        key, val = ct.c_uint32(0), ct.c_uint32(gen)
        if self._lib.bpf_update_elem(self._maps["generation"].map_fd, ct.byref(key),
                                     ct.byref(val), 0) != 0:
            raise BpfError(f"cannot set the aggregation generation: "
                           f"{os.strerror(ct.get_errno())}")

    def _wait_for_programs(self) -> None:
        """Return once no BPF program can still be running with the old generation."""
        key = ct.c_uint32(0)
        inner = ct.c_uint32(self._maps["generation"].map_fd)
        if self._lib.bpf_update_elem(self._maps["drain_barrier"].map_fd, ct.byref(key),
                                     ct.byref(inner), 0) != 0:
            self._agent_counts["barrier_fallbacks"] += 1
            time.sleep(FALLBACK_GRACE_S)

    def _drain_map(self, table) -> dict[AggKey, AggVal]:
        out: dict[AggKey, AggVal] = {}
        nfields = len(C.AggValC._fields_)
        stride = nfields  # u64 per key

        def add(key: C.AggKeyC, vals: memoryview) -> None:
            k = AggKey(key.tgid, key.device_id, key.stream_id, key.graph_id, key.kernel_id,
                       key.stack_id, key.capture_stack_id, key.graph_flags)
            v = AggVal(*vals)
            old = out.get(k)
            out[k] = v if old is None else AggVal(*(a + b for a, b in zip(old, v)))

        try:
            self._drain_batch(table.map_fd, stride, add)
        except _BatchUnsupported:
            self._drain_per_key(table.map_fd, stride, add)
        return out

    def _drain_latency(self, table) -> dict:
        out: dict = {}
        stride = 2  # ga_lat_val {count, sum_ns}

        def add(key: C.LatKey, vals: memoryview) -> None:
            if key.bucket >= C.LAT_BUCKETS:
                return
            acc = out.get((key.tgid, key.device_id))
            if acc is None:
                acc = out[(key.tgid, key.device_id)] = [[0] * C.LAT_BUCKETS, 0]
            acc[0][key.bucket] += vals[0]
            acc[1] += vals[1]

        try:
            self._drain_batch(table.map_fd, stride, add, C.LatKey)
        except _BatchUnsupported:
            self._drain_per_key(table.map_fd, stride, add, C.LatKey)
        return {k: (v[0], v[1]) for k, v in out.items()}

    def _drain_batch(self, fd: int, stride: int, add, key_type=C.AggKeyC) -> None:
        lib = self._lib
        chunk = BATCH_CHUNK
        keys = (key_type * chunk)()
        vals = (ct.c_uint64 * (stride * chunk))()
        in_batch, out_batch = ct.c_uint32(0), ct.c_uint32(0)
        count = ct.c_uint32(0)
        first = True
        while True:
            count.value = chunk
            res = lib.bpf_lookup_and_delete_batch(
                fd, None if first else ct.byref(in_batch), ct.byref(out_batch),
                ct.byref(keys), ct.byref(vals), ct.byref(count))
            err = ct.get_errno() if res != 0 else 0
            mv = memoryview(vals).cast("B").cast("Q")
            for i in range(count.value):
                add(keys[i], mv[i * stride:(i + 1) * stride])
            if res != 0:
                if err == errno.ENOENT:
                    return  # walked every bucket
                if err == errno.ENOSPC and count.value == 0:
                    # One bucket holds more keys than the buffer: grow and retry.
                    chunk *= 2
                    keys = (key_type * chunk)()
                    vals = (ct.c_uint64 * (stride * chunk))()
                    continue
                if first and err in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise _BatchUnsupported()
                raise BpfError(f"BPF_MAP_LOOKUP_AND_DELETE_BATCH failed: {os.strerror(err)}")
            in_batch.value = out_batch.value
            first = False

    def _drain_per_key(self, fd: int, stride: int, add, key_type=C.AggKeyC) -> None:
        """Kernels without batch ops: per-key lookup-and-delete (5.14+), else lookup+delete."""
        lib = self._lib
        key, nxt = key_type(), key_type()
        vals = (ct.c_uint64 * stride)()
        keys = []
        if lib.bpf_get_first_key(fd, ct.byref(key), ct.sizeof(key)) == 0:
            keys.append(key_type.from_buffer_copy(key))
            while lib.bpf_get_next_key(fd, ct.byref(key), ct.byref(nxt)) == 0:
                keys.append(key_type.from_buffer_copy(nxt))
                ct.memmove(ct.byref(key), ct.byref(nxt), ct.sizeof(key))
        for k in keys:
            if lib.bpf_lookup_and_delete(fd, ct.byref(k), ct.byref(vals)) != 0:
                if ct.get_errno() == errno.ENOENT:
                    continue
                # Old kernel: not atomic, an increment between the two calls is lost.
                if lib.bpf_lookup_elem(fd, ct.byref(k), ct.byref(vals)) != 0:
                    continue
                lib.bpf_delete_elem(fd, ct.byref(k))
            add(k, memoryview(vals).cast("B").cast("Q"))

    def counters(self) -> dict[str, int]:
        """Cumulative BPF counters (contract names, see contract.counter_name) and
        agent-side ones (prefixed agent_)."""
        if self._bpf is None:
            raise BpfError("session is not open")
        fd = self._maps["counters"].map_fd
        vals = (ct.c_uint64 * self._ncpu)()
        out = {}
        for c in C.Counter:
            if c == C.Counter.GA_COUNTER_MAX:
                continue
            idx = ct.c_uint32(int(c))
            total = 0
            if self._lib.bpf_lookup_elem(fd, ct.byref(idx), ct.byref(vals)) == 0:
                total = sum(vals)
            out[C.counter_name(c)] = total
        for k, v in self._agent_counts.items():
            out["agent_" + k] = v
        out["agent_names_pending"] = self.names.pending
        return out

    def get_stack(self, tgid: int, stack_id: int) -> Optional[list[int]]:
        """Frames of a stored stack, innermost first; None if unknown or evicted."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = C.StackKey(tgid=tgid, pad=0, stack_id=stack_id)
        val = C.Stack()
        if self._lib.bpf_lookup_elem(self._maps["stacks"].map_fd, ct.byref(key),
                                     ct.byref(val)) != 0:
            return None
        n = min(val.nframes, C.MAX_FRAMES)
        return list(val.ips[:n])

    def _map_keys(self, name: str, ktype) -> list:
        """Every key of map `name` (ctypes type ktype): a whole walk, not for a hot path."""
        lib, fd = self._lib, self._maps[name].map_fd
        key, nxt, keys = ktype(), ktype(), []
        if lib.bpf_get_first_key(fd, ct.byref(key), ct.sizeof(key)) == 0:
            keys.append(ktype.from_buffer_copy(key))
            while lib.bpf_get_next_key(fd, ct.byref(key), ct.byref(nxt)) == 0:
                keys.append(ktype.from_buffer_copy(nxt))
                ct.memmove(ct.byref(key), ct.byref(nxt), ct.sizeof(key))
        return keys

    def graph_nodes(self, tgid: Optional[int] = None) -> dict[tuple[int, int], int]:
        """node_stacks: (tgid, graph node id) -> capture stack id (of tgid only, if given).
        Walks the whole map: for tests and diagnostics, not for a hot path."""
        if self._bpf is None:
            raise BpfError("session is not open")
        fd, val, out = self._maps["node_stacks"].map_fd, C.NodeVal(), {}
        for k in self._map_keys("node_stacks", C.NodeKey):
            if tgid is not None and k.tgid != tgid:
                continue
            if self._lib.bpf_lookup_elem(fd, ct.byref(k), ct.byref(val)) == 0:
                out[(k.tgid, k.node_id)] = val.stack_id
        return out

    def forget_pids(self, tgids: set[int]) -> int:
        """Delete every per-process map entry (sampled launches, stacks, graph node
        stacks, Python stacks) of exited processes, so that a new process that is
        given one of their pids starts clean instead of joining their stacks.
        Returns the entries deleted. One walk per map, for all of tgids at once."""
        if self._bpf is None or not tgids:
            return 0
        deleted = 0
        for name, ktype in (("corr_stacks", C.CorrKey), ("stacks", C.StackKey),
                            ("node_stacks", C.NodeKey), ("py_stacks", C.StackKey)):
            fd = self._maps[name].map_fd
            for k in self._map_keys(name, ktype):
                if k.tgid in tgids:
                    deleted += self._lib.bpf_delete_elem(fd, ct.byref(k)) == 0
        return deleted

    # -- Python stacks (bpf/python_stack.h) ----------------------------------
    def set_py_config(self, tgid: int, cfg: C.PyConfig) -> None:
        """Turn on Python stacks for tgid (its interpreter's layout, see python/layout.py)."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = ct.c_uint32(tgid)
        if self._lib.bpf_update_elem(self._maps["py_procs"].map_fd, ct.byref(key), ct.byref(cfg),
                                     0) != 0:
            raise BpfError(f"py_procs update for {tgid} failed: {os.strerror(ct.get_errno())}")

    def del_py_config(self, tgid: int) -> None:
        if self._bpf is None:
            return
        key = ct.c_uint32(tgid)
        self._lib.bpf_delete_elem(self._maps["py_procs"].map_fd, ct.byref(key))

    def get_py_stack(self, tgid: int, stack_id: int) -> Optional[C.PyStack]:
        """Python frames stored with a stack (innermost first); None if it has none."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = C.StackKey(tgid=tgid, pad=0, stack_id=stack_id)
        val = C.PyStack()
        if self._lib.bpf_lookup_elem(self._maps["py_stacks"].map_fd, ct.byref(key),
                                     ct.byref(val)) != 0:
            return None
        return val


class _BatchUnsupported(Exception):
    pass


class _Mapping(NamedTuple):
    ident: tuple[int, int]   # (st_dev, st_ino) as /proc/PID/maps shows them
    path: str                # in the process's mount namespace
    range: str               # "start-end", the name under /proc/PID/map_files
    deleted: bool


def _shim_mappings(maps: bytes) -> list[_Mapping]:
    """The mappings of files named SHIM_BASENAME in a /proc/PID/maps text, one per inode."""
    out: dict[tuple[int, int], _Mapping] = {}
    for e in procfs.parse_maps(maps):
        if os.path.basename(e.path) != SHIM_BASENAME or e.inode == 0:
            continue
        ident = (e.dev, e.inode)
        if ident not in out:
            out[ident] = _Mapping(ident, e.path, e.range, e.deleted)
    return list(out.values())


def _data_sites(probes: dict[str, list[stapsdt.SdtProbe]]) -> frozenset:
    """What bcc's generated argument readers depend on, per data-probe site:
    the probe, the site's address within its page, its argument specs."""
    return frozenset((name, p.pc & 0xFFF, p.args) for name in DATA_PROBES
                     for p in probes.get(name, ()))


def _splice_local_includes(src: str, bpf_dir) -> str:
    """Inline `#include "x.h"` of headers that live in bpf/ (python_stack.h).

    bcc rewrites map calls (`m.lookup(&k)`) only in the main source text; in an
    #included file they stay calls through a NULL function pointer, which the
    verifier refuses ("unknown opcode 8d"). So our own BPF headers are pasted in.
    """
    import re

    def paste(m):
        path = os.path.join(str(bpf_dir), m.group(1))
        if not os.path.isfile(path):
            return m.group(0)
        with open(path) as f:
            return f.read()

    return re.sub(r'^#include "([\w.]+\.h)"[^\n]*$', paste, src, flags=re.M)


def _attach_uprobe_fn(lib):
    """libbcc's bpf_attach_uprobe with its real 7-argument C signature.

    int bpf_attach_uprobe(int progfd, enum bpf_probe_attach_type type,
                          const char *ev_name, const char *binary_path,
                          uint64_t offset, pid_t pid, uint32_t ref_ctr_offset)
    A separate prototype, so bcc's own (6-argument) declaration is left alone.
    """
    proto = ct.CFUNCTYPE(ct.c_int, ct.c_int, ct.c_int, ct.c_char_p, ct.c_char_p,
                         ct.c_uint64, ct.c_int, ct.c_uint32, use_errno=True)
    return proto(("bpf_attach_uprobe", lib))


def _tracepoint_has_field(category: str, event: str, field: str) -> bool:
    for d in preflight.TRACEFS_DIRS:
        try:
            with open(os.path.join(d, "events", category, event, "format")) as f:
                return any(f" {field};" in line for line in f)
        except OSError:
            continue
    return False
