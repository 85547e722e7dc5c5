"""Load bpf/gpu_agent.bpf.c, attach it to the shim by library path, read it back.

Attach (open()): the shim's stapsdt notes are read and checked against the
contract (shim_attach.read_shim); bcc generates the bpf_usdt_readarg() code for
the data probes from their argument specs; the uprobes go on the shim FILE, so
every process that maps it, now or later, is covered, with `attach` (and its
semaphore) last. shim_attach.py says how: BPF links where the kernel makes
them, else perf events through libbcc's 7-argument bpf_attach_uprobe().

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
     sleepable run inside rcu_read_lock() (bpf_prog_run_array_uprobe; through
     a link, uprobe_prog_run in kernel/trace/bpf_trace.c), so
     when the update returns every batch that read the old generation has
     finished, and every later batch reads the new one. If the update fails
     (it should not), a 10 ms sleep stands in: uprobe programs never sleep and
     one batch takes microseconds, so that is a practical grace period, not a
     guarantee; agent_barrier_fallbacks counts it;
  3. reads and deletes the whole old set (BPF_MAP_LOOKUP_AND_DELETE_BATCH),
     which nobody writes any more.
A drain that fails half-way leaves keys in the old set; the next drain flips
writes back onto them and the one after drains them: nothing is lost."""

from __future__ import annotations

import ctypes as ct
import os
import threading
import time
from typing import Callable, Optional

from ..system.btf import TaskOffsets, task_offsets
from . import contract as C
from . import bpf_maps, paths, preflight
from .attach_notes import AttachNotes
from .drain import Drain, read_latency, read_totals
from .events import handle_event
from .cold_names import ColdNames
from .names import KernelNames
from .parcagpu import ParcagpuFiles
from .py_maps import PythonMaps
from .shim_attach import DATA_PROBES, BpfError, ShimAttachments, ShimFile, data_sites, read_shim

__all__ = ["BpfError", "BpfSession", "ShimFile", "compile_flags"]

FALLBACK_GRACE_S = 0.010  # grace period if the synchronize_rcu() barrier is refused

# bcc checks every call it sees of bpf_probe_read_user() or bpf_probe_read_user_str()
# against the kernel's symbols, to fall back to bpf_probe_read() on kernels before 5.5
# that lack the helper; each check scans ~120,000 symbols (libbcc's KSyms::resolve_name),
# about 50 ms, and the program has 33 such calls: 1.7 s of a 2.8 s compile
# (docs/benchmarks.md, "Agent start"). The agent needs Linux >= 5.8 (its ring buffer),
# which always has the helper, so the program calls it under a name bcc does not check:
# helpers.h's own declaration, renamed by the preprocessor, is the same helper
# (BPF_FUNC_probe_read_user), and the program compiles to the same instructions
# (tests/test_bpf_session.py compares them).
READ_USER_UNCHECKED = [
    "-Dbpf_probe_read_user=ga_probe_read_user",
    "-Dbpf_probe_read_user_str=ga_probe_read_user_str",
]


def compile_flags(bpf_dir, inc_dir) -> list[str]:
    """bcc's cflags for bpf/gpu_agent.bpf.c or one of its headers (without the tunables)."""
    return ["-DGA_BPF", f"-I{inc_dir}", f"-I{bpf_dir}", "-Wno-comment", *READ_USER_UNCHECKED]


def task_cflags(offsets: TaskOffsets) -> list[str]:
    """The running kernel's task_struct offsets the BPF program reads (procs.h: a
    process's name from its group leader); none where its BTF does not give them."""
    if offsets.group_leader is None or offsets.comm is None:
        return []
    return [f"-DGA_TASK_GROUP_LEADER_OFF={offsets.group_leader}", f"-DGA_TASK_COMM_OFF={offsets.comm}"]


class BpfSession(PythonMaps):
    """One loaded copy of the BPF program, attached to one shim file.

    Public API: open(), poll(timeout_ms) -> int, drain() -> Drain, counters() -> dict[str, int],
    get_stack(tgid, stack_id, start) -> list[int] | None, close(); names (kernel_id -> name).
    Callbacks run inside poll(): on_new_stack(tgid, stack_id, start), on_proc_exit(tgid),
    on_proc_attach(tgid, comm) (the shim in tgid attached: set up its Python stacks now;
    comm its name as BPF read it then, "" if it could not).
    Python stacks: set_py_config(tgid, C.PyConfig), del_py_config(tgid),
    get_py_stack(tgid, stack_id, start) -> C.PyStack | None."""

    def __init__(
        self,
        shim_path: str,
        *,
        on_new_stack: Optional[Callable[[int, int, int], None]] = None,
        on_proc_exit: Optional[Callable[[int], None]] = None,
        cflags: Optional[list[str]] = None,
    ):
        self.shim_path = os.path.realpath(shim_path)
        self.on_new_stack = on_new_stack
        self.on_proc_exit = on_proc_exit
        self.on_proc_attach: Optional[Callable[[int, str], None]] = None
        # on_attach_note(tgid, comm): the same attach, at once, on the notes thread
        # (attach_notes.py); set before open()
        self.on_attach_note: Optional[Callable[[int, str], None]] = None
        self.attach_notes: Optional[AttachNotes] = None
        # Fixed-size events (_FIXED_EVENTS): on_kernel(C.EvKernel) while tracing
        # (set_trace), on_device(C.EvDevice), on_published(C.EvPublished),
        # on_shape(C.EvShape); PC sampling's (pc_samples.py), parcagpu's too
        self.on_kernel = self.on_device = self.on_pc_batch = self.on_stall_reason = self.on_cubin = None
        self.on_published = self.on_shape = None
        self.on_pg_pc = self.on_pg_error = None
        self.extra_cflags = list(cflags or [])
        self._agent_counts = {"ev_corrupt": 0, "ev_unknown": 0, "callback_errors": 0, "barrier_fallbacks": 0}
        self.names = KernelNames(self._agent_counts)
        self.cold_names = ColdNames(self._agent_counts, self.proc_start, self._forget_pg_name)
        self._bpf = None
        self._cb_error: Optional[BaseException] = None
        self._events = 0
        self._ncpu = 0
        self._gen = 0  # the aggregation set BPF writes now
        self.attachments: Optional[ShimAttachments] = None  # the uprobes on shim files
        self.parcagpu: Optional[ParcagpuFiles] = None  # and on parcagpu libraries

    # -- lifecycle ---------------------------------------------------------
    def open(self) -> None:
        # The kernel's BTF (~0.3 s) is parsed beside bcc's import and the USDT set-up.
        btf = threading.Thread(target=task_offsets, name="gpu-agent-btf", daemon=True)
        btf.start()
        bcc = preflight.import_bcc()
        from bcc import BPF, USDT
        from bcc.libbcc import lib
        from bcc.utils import get_possible_cpus

        self._lib = lib
        self._ncpu = len(get_possible_cpus())
        probes, loads = read_shim(self.shim_path)

        usdt = USDT(path=self.shim_path)
        for probe, fn in DATA_PROBES.items():
            try:
                usdt.enable_probe(f"{C.PROVIDER}:{probe}", fn)
            except Exception as e:
                raise BpfError(
                    f"bcc cannot use probe {C.PROVIDER}:{probe} of {self.shim_path}: {str(e).splitlines()[0]}"
                ) from None
        usdt_text = usdt.get_text()

        bpf_dir, inc_dir = paths.bpf_dir(), paths.include_dir()
        src = paths.bpf_source(bpf_dir)
        cflags = compile_flags(bpf_dir, inc_dir)
        if preflight.tracepoint_has_field("sched", "sched_process_exit", "group_dead"):
            cflags.append("-DGA_HAVE_GROUP_DEAD")
        btf.join()
        cflags += task_cflags(task_offsets())
        cflags += self.extra_cflags
        try:
            # TRACEPOINT_PROBE (process exit) is attached by bcc itself here.
            self._bpf = BPF(text=(usdt_text + src).encode(), cflags=cflags)
        except Exception as e:
            raise BpfError(f"loading {bpf_dir / 'gpu_agent.bpf.c'} failed: {e}") from None
        _ = bcc
        self.attachments = ShimAttachments(self._bpf, lib, self.shim_path, data_sites(probes))
        self.parcagpu = ParcagpuFiles(self._bpf, self.attachments)
        self.on_pg_error = self.parcagpu.on_error
        try:
            self._fill_map_arrays()  # before any probe can run kernel_batch
            self.attachments.attach_own(usdt, probes, loads)
        except BaseException:
            self.close()
            raise
        self._bpf[b"events"].open_ring_buffer(self._on_event)
        if self.on_attach_note is not None:
            self.attach_notes = AttachNotes(self._lib, self._bpf[b"attach_notes"].map_fd, self.on_attach_note)
        self._maps = {
            n: self._bpf[n.encode()]
            for n in (
                "totals0",
                "totals1",
                "sampled0",
                "sampled1",
                "latency0",
                "latency1",
                "generation",
                "drain_barrier",
                "stacks",
                "counters",
                "py_procs",
                "py_stacks",
                "node_stacks",
                "corr_stacks",
                "trace_mode",
                "traced",
                "procs",
            )
        }
        self._gen = 0
        self._set_generation(0)

    def _fill_map_arrays(self) -> None:
        """agg_maps = [totals0, totals1, sampled0, sampled1], lat_maps = [latency0, latency1]:
        kernel_batch reaches its generation's maps by index (see the BPF source)."""
        for outer, inner in (
            ("agg_maps", ("totals0", "totals1", "sampled0", "sampled1")),
            ("lat_maps", ("latency0", "latency1")),
        ):
            ofd = self._bpf[outer.encode()].map_fd
            for i, name in enumerate(inner):
                key, val = ct.c_uint32(i), ct.c_uint32(self._bpf[name.encode()].map_fd)
                if self._lib.bpf_update_elem(ofd, ct.byref(key), ct.byref(val), 0) != 0:
                    raise BpfError(f"cannot set {outer}[{i}] = {name}: {os.strerror(ct.get_errno())}")

    def let_go(self) -> None:
        """The stop's first step: the semaphore drops (ShimAttachments.let_go), the
        data probes stay until close()."""
        if self._bpf is not None and self.attachments is not None:
            self.attachments.let_go()

    def close(self) -> None:
        """Detach `attach` first (semaphore drops, the shim stops CUPTI), then the rest."""
        if self._bpf is None:
            return
        if self.attachments is not None:
            self.attachments.close()
        if self.attach_notes is not None:
            self.attach_notes.close()
            self.attach_notes = None
        self.cold_names.close()
        try:
            self._bpf.cleanup()
        finally:
            self._bpf = None

    def __enter__(self) -> "BpfSession":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- shim files (shim_attach.py) and parcagpu libraries (parcagpu.py) --
    @property
    def discover_errors(self) -> dict[str, str]:
        """Shim copies and parcagpu files that were not attached: path -> why."""
        return {**self.attachments.discover_errors, **self.parcagpu.errors} if self.attachments else {}

    def attached_files(self) -> int:
        """How many shim files (inodes) the programs are attached to."""
        return self.attachments.attached_files() if self.attachments else 0

    def discover(self, proc: str = "/proc") -> list[ShimFile]:
        """Attach to every shim copy and parcagpu library a running process maps."""
        if self._bpf is None or self.attachments is None:
            raise BpfError("session is not open")
        return self.attachments.discover(proc) + self.parcagpu.discover(proc)

    # -- ring buffer -------------------------------------------------------
    def poll(self, timeout_ms: int) -> int:
        """Handle pending ring-buffer events (waiting up to timeout_ms for the first).
        Returns the number of events handled. An exception raised by a
        callback is re-raised here, after the poll."""
        if self._bpf is None:
            raise BpfError("session is not open")
        before = self._events
        if self.attachments is not None and self.attachments.replay_holds:
            self.attachments.release_replays(time.monotonic())
        self._bpf.ring_buffer_poll(timeout_ms)  # bcc 0.26 returns None, not a count
        self.cold_names.apply(self.names)
        err, self._cb_error = self._cb_error, None
        if err is not None:
            raise err
        return self._events - before

    def _on_event(self, _ctx, data, size) -> int:
        # Runs inside libbpf's poll through ctypes: never let anything escape.
        self._events += 1
        try:
            handle_event(self, ct.string_at(data, size), self._agent_counts)
        except Exception as e:  # a user callback failed
            self._agent_counts["callback_errors"] += 1
            if self._cb_error is None:
                self._cb_error = e
        return 0

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
        lib, maps = self._lib, self._maps
        return Drain(
            totals=read_totals(lib, maps[f"totals{old}"].map_fd),
            sampled=read_totals(lib, maps[f"sampled{old}"].map_fd),
            counters=self.counters(),
            latency=read_latency(lib, maps[f"latency{old}"].map_fd),
        )

    def _set_generation(self, gen: int) -> None:
        key, val = ct.c_uint32(0), ct.c_uint32(gen)
        if self._lib.bpf_update_elem(self._maps["generation"].map_fd, ct.byref(key), ct.byref(val), 0) != 0:
            raise BpfError(f"cannot set the aggregation generation: {os.strerror(ct.get_errno())}")

    def _wait_for_programs(self) -> None:
        """Return once no BPF program can still be running with the old generation."""
        key = ct.c_uint32(0)
        inner = ct.c_uint32(self._maps["generation"].map_fd)
        if self._lib.bpf_update_elem(self._maps["drain_barrier"].map_fd, ct.byref(key), ct.byref(inner), 0) != 0:
            self._agent_counts["barrier_fallbacks"] += 1
            time.sleep(FALLBACK_GRACE_S)

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

    def proc_start(self, tgid: int) -> Optional[int]:
        """The start tag BPF gave the live process tgid, or None (not seen, or gone)."""
        key, val = ct.c_uint32(tgid), ct.c_uint32()
        if (
            self._bpf is None
            or self._lib.bpf_lookup_elem(self._maps["procs"].map_fd, ct.byref(key), ct.byref(val)) != 0
        ):
            return None
        return val.value

    def _forget_pg_name(self, tgid: int, start: int, address: int) -> None:
        """BPF sends this parcagpu name again at its kernel's next record (cold_names.py)."""
        key = C.PgNameKey(tgid=tgid, start=start, name=address)
        self._lib.bpf_delete_elem(self._bpf[b"pg_names"].map_fd, ct.byref(key))

    def get_stack(self, tgid: int, stack_id: int, start: int) -> Optional[list[int]]:
        """Frames of a stored stack of the process (tgid, start tag), innermost
        first; None if unknown or evicted."""
        if self._bpf is None:
            raise BpfError("session is not open")
        key = C.StackKey(tgid=tgid, start=start, stack_id=stack_id)
        val = C.Stack()
        if self._lib.bpf_lookup_elem(self._maps["stacks"].map_fd, ct.byref(key), ct.byref(val)) != 0:
            return None
        n = min(val.nframes, C.MAX_FRAMES)
        return list(val.ips[:n])

    def _map_keys(self, name: str, ktype) -> list:
        return bpf_maps.keys(self._lib, self._maps[name].map_fd, ktype)

    def stack_keys(self, tgid: int) -> list[tuple[int, int]]:
        """(start tag, stack id) of every stored stack of tgid. Walks the whole map:
        for tests and diagnostics, not for a hot path."""
        if self._bpf is None:
            raise BpfError("session is not open")
        return [(k.start, k.stack_id) for k in self._map_keys("stacks", C.StackKey) if k.tgid == tgid]

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
        for name, ktype in (
            ("corr_stacks", C.CorrKey),
            ("stacks", C.StackKey),
            ("node_stacks", C.NodeKey),
            ("py_stacks", C.StackKey),
        ):
            fd = self._maps[name].map_fd
            for k in self._map_keys(name, ktype):
                if k.tgid in tgids:
                    deleted += self._lib.bpf_delete_elem(fd, ct.byref(k)) == 0
        claims = self._bpf[b"drop_implausible"]
        for t in tgids:
            deleted += claims.pop(ct.c_uint32(t), None) is not None
        return deleted

    def implausible_drops(self) -> dict[int, int]:
        """tgid -> lost records it claimed past its bounds, since it started (BPF's
        drop_implausible: refused, not in drop_cupti)."""
        return {k.value: v.value for k, v in self._bpf[b"drop_implausible"].items()}

    def trace_drops(self, pids) -> int:
        """Records CUPTI lost in these traced processes, as BPF counted them (bpf/maps.h
        trace_drops: each process's own, where drop_cupti is the node's)."""
        table = self._bpf[b"trace_drops"]
        total = 0
        for pid in pids:
            try:
                total += table[table.Key(pid)].value
            except KeyError:
                pass
        return total

    # -- Python stacks (bpf/python_stack.h) ----------------------------------
    def set_trace(self, every_process: bool = False, pids: tuple[int, ...] = ()) -> None:
        """Timelines: send every kernel record of every process, or of these pids,
        as a GA_EV_KERNEL event (bpf/gpu_agent.bpf.c, trace_mode)."""
        one = ct.c_uint32(1)
        for pid in pids:
            key = ct.c_uint32(pid)
            if self._lib.bpf_update_elem(self._maps["traced"].map_fd, ct.byref(key), ct.byref(one), 0) != 0:
                raise BpfError(f"traced update for {pid} failed: {os.strerror(ct.get_errno())}")
        key, mode = ct.c_uint32(0), ct.c_uint32(1 if every_process else 2 if pids else 0)
        if self._lib.bpf_update_elem(self._maps["trace_mode"].map_fd, ct.byref(key), ct.byref(mode), 0) != 0:
            raise BpfError(f"cannot set the trace mode: {os.strerror(ct.get_errno())}")
