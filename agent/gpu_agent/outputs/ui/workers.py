"""Store files decoded in helper processes, for the range a user waits on.

Decoding a pprof is Python work (profiles.decode): one core decodes an hour of a
busy store (360 windows) in about 0.8 s (the agent's windows) to 2.4 s (another
writer's). Opening a range whose files are not decoded
yet spreads them over WORKERS processes (the multiprocessing module's spawn
context: no fork of a threaded server), each decoding with its own Catalog and
sending back the rows and only what its catalog gained since its last answer
(frames, stacks, label sets). The server's catalog interns those once and maps each
worker's ids to its own, so a decoded file costs it a few array look-ups.

Each worker reads the files itself, through profiles.read_profile (names matched, no
symlink followed, bounded): a request carries a name, never bytes. Answers arrive on one pipe per
worker, in the order it sent them, which is the order their definitions build on.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.connection
import signal
import threading
from array import array
from pathlib import Path
from typing import Optional

from .catalog import Catalog, DecodedProfile
from .profiles import decode, read_profile
from ...profile.store import Store, StoreFile

WORKERS = 2
MIN_FILES = 8  # fewer files are decoded in the server, as before
WORKER_CATALOG_LIMIT = 500_000


def _serve(conn, directory: str) -> None:
    """A worker: (reset, name) in, (name, reset, decoded or error, new definitions) out."""
    # Ctrl-C is the UI's to handle (it stops, and these end with their pipe): a worker
    # that took it too printed a KeyboardInterrupt traceback each.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.disable()  # decoding makes no cycles; the collector only walks the catalog
    store = Store(Path(directory))
    catalog = Catalog()
    sent = [0, 0, 0]  # frames, stacks, label sets already described to the server
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        reset, name = msg
        if reset or len(catalog.stacks) + len(catalog.labelsets) > WORKER_CATALOG_LIMIT:
            catalog, sent, reset = Catalog(), [0, 0, 0], True
        try:
            data = read_profile(store, name)
            if data is None:
                conn.send((name, reset, None, "unreadable", None))
                continue
            decoded = decode(data, catalog)
        except ValueError as e:
            conn.send((name, reset, None, str(e), None))
            continue
        new = (catalog.frames[sent[0] :], catalog.stacks[sent[1] :], catalog.labelsets[sent[2] :])
        sent = [len(catalog.frames), len(catalog.stacks), len(catalog.labelsets)]
        conn.send((name, reset, decoded, None, new))


class _Worker:
    def __init__(self, ctx, directory: str):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, directory), name="gpu-agent-ui-decode", daemon=True)
        self.proc.start()
        child.close()
        self.catalog: Optional[Catalog] = None  # the server catalog its maps point into
        self.frames: list[int] = []  # worker frame id -> server frame id
        self.stacks: list[int] = []
        self.labelsets: list[int] = []


class DecodePool:
    """WORKERS processes, started in the background at the server's start; decode()
    is used only once they are up (until then, and if they cannot start, the server
    decodes as before)."""

    def __init__(self, store: Store, workers: int = WORKERS):
        self.store = store
        self.n = workers
        self.min_files = MIN_FILES
        self._workers: list[_Worker] = []
        self._ready = threading.Event()
        self._starting = False
        self._lock = threading.Lock()  # one batch at a time
        self.failed: Optional[str] = None

    def start(self) -> None:
        self._starting = True
        if threading.current_thread() is not threading.main_thread():
            threading.Thread(target=self._start, name="gpu-agent-ui-pool", daemon=True).start()
            return
        # Ctrl-C is the UI's. A worker that took it while its interpreter still started
        # (before _serve ignores it) printed a "Fatal Python error: init_import_site"
        # traceback (test_readme.py, once in three runs of the suite): started with SIGINT
        # ignored, it ignores it from its first instruction (an ignored signal stays
        # ignored across exec, and CPython then installs no KeyboardInterrupt handler).
        # Spawning returns once the child is exec'd (about 6 ms for both).
        old = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self._start()
        finally:
            signal.signal(signal.SIGINT, old if old is not None else signal.SIG_DFL)

    def _start(self) -> None:
        try:
            ctx = multiprocessing.get_context("spawn")
            self._workers = [_Worker(ctx, str(self.store.dir)) for _ in range(self.n)]
            self._ready.set()
        except Exception as e:  # no processes here: decode in the server
            self.failed = str(e)
        finally:
            self._starting = False

    def ready(self, wait: float = 0.0) -> bool:
        """Up; or, while it starts (a fraction of a second, at the server's start),
        up within `wait` seconds: a range asked for at once still gets the workers."""
        if wait and self._starting and not self._ready.is_set():
            self._ready.wait(wait)
        return self._ready.is_set()

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._workers:
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.proc.terminate()

    def decode(self, files: list[StoreFile], catalog: Catalog, on_file) -> bool:
        """Decode files in the workers; on_file(f, decoded or None, error) for each, in
        the server's catalog, under its lock. False if the pool is not usable."""
        if not self._ready.is_set() or not files:
            return False
        with self._lock:
            try:
                self._batch(files, catalog, on_file)
            except (OSError, EOFError) as e:  # a worker died: the server decodes the rest
                self.failed = f"decoding worker: {e}"
                self._ready.clear()
                return False
        return True

    def _batch(self, files: list[StoreFile], catalog: Catalog, on_file) -> None:
        by_name = {f.name: f for f in files}
        pending = list(reversed(files))  # newest first, as the warmer
        busy: dict[int, int] = {}  # worker index -> requests in flight
        conns = {w.conn: i for i, w in enumerate(self._workers)}

        def send(i: int) -> None:
            w = self._workers[i]
            reset = w.catalog is not catalog
            if reset:
                w.catalog, w.frames, w.stacks, w.labelsets = catalog, [], [], []
            w.conn.send((reset, pending.pop().name))
            busy[i] = busy.get(i, 0) + 1

        # Two requests in flight per worker: it never waits for the server.
        for _ in range(2):
            for i in range(len(self._workers)):
                if pending:
                    send(i)
        while busy:
            for conn in multiprocessing.connection.wait(list(c for c, i in conns.items() if busy.get(i))):
                i = conns[conn]
                name, reset, decoded, error, new = conn.recv()
                busy[i] -= 1
                if not busy[i]:
                    del busy[i]
                if pending:
                    send(i)
                f = by_name[name]
                if decoded is None:
                    on_file(f, None, error)
                    continue
                with catalog.lock:
                    on_file(f, self._translate(self._workers[i], catalog, reset, decoded, new), None)

    @staticmethod
    def _translate(w: _Worker, catalog: Catalog, reset: bool, d: DecodedProfile, new) -> DecodedProfile:
        if reset:
            w.frames, w.stacks, w.labelsets = [], [], []
        frames, stacks, labelsets = new
        w.frames.extend(map(catalog.frame, frames))
        fr = w.frames
        w.stacks.extend(catalog.stack_of_frames(tuple(map(fr.__getitem__, s))) for s in stacks)
        w.labelsets.extend(map(catalog.labelset, labelsets))
        st, lb = w.stacks.__getitem__, w.labelsets.__getitem__
        return DecodedProfile(
            d.time_nanos,
            d.duration_nanos,
            d.comments,
            array("I", map(st, d.stacks)),
            array("I", map(lb, d.labelsets)),
            d.gpu_ns,
            d.launches,
            {lb(k): v for k, v in d.by_labelset.items()},
            d.gpu_total,
            d.launch_total,
            d.pc_samples,
            d.pc_total,
        )
