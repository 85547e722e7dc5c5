"""What CUPTI's subscription costs a job's launches between windows, in one process.

python -m bench.gpu subcost [--workload mlp] [--cycles 40] [--block-s 0.4] (issue 42 item 5):
side by side, MLP paid +4.1 % between the shim's windows with the defaults
(subscribed again right after each teardown, graph resource callbacks on) against
+1.4 % with the subscription left until the count phase (`agent-late`). Separate
processes cannot tell 3 points apart on these hosts; one process can.

One process runs the case's step (bench/gpu/cases.py) and CUPTI through ctypes (no
shim). Every cycle visits each state below in a new random order, from a finalized
CUPTI: sets it up, runs a few steps, times a block of steps (synchronized), then
tears CUPTI down at a runtime API's exit (unsubscribe, finalize: the shim's
protocol). A state's cost is its block's step time against the same cycle's `none`
block: the median of those ratios over the cycles, with a bootstrap 95 % interval.

  none    CUPTI finalized (what the job pays with no agent, or while torn down)
  reg     cuptiActivityRegisterCallbacks only
  sub     reg and cuptiSubscribe, no callback enabled
  graph   sub and the shim's six graph resource callbacks: its state between windows
  window  a window first (kernel activity on for --window-steps steps, off, flushed,
          finalized at an API exit), then graph: exactly the shim's between-window
          state after a teardown
Prints one line per state and appends one JSON line to --jsonl.
"""

from __future__ import annotations

import argparse
import ctypes as C
import glob
import json
import random
import statistics
import time

STATES = ("none", "reg", "sub", "graph", "window")
RUNTIME_DOMAIN, RESOURCE_DOMAIN = 2, 3
GRAPH_CBIDS = (13, 14, 17, 18, 19, 20)  # GRAPHNODE_CREATED .. GRAPHNODE_CLONED (cupti_callbacks.h)
CONCURRENT_KERNEL = 10
API_EXIT = 1


def load_cupti() -> C.CDLL:
    """The libcupti PyTorch's wheels bring, else the toolkit's."""
    names = ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]
    try:
        import nvidia.cuda_cupti as pkg  # the wheel torch depends on

        names = sorted(glob.glob(f"{list(pkg.__path__)[0]}/lib/libcupti.so*")) + names
    except ImportError:
        pass
    for d in ("/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64"):
        names += glob.glob(f"{d}/libcupti.so*")
    for n in names:
        try:
            return C.CDLL(n)
        except OSError:
            continue
    raise SystemExit("subcost: no libcupti found")


class Cupti:
    """CUPTI's few calls the shim makes between windows, and its teardown at an API exit."""

    REQ = C.CFUNCTYPE(None, C.POINTER(C.c_void_p), C.POINTER(C.c_size_t), C.POINTER(C.c_size_t))
    CMP = C.CFUNCTYPE(None, C.c_void_p, C.c_uint32, C.c_void_p, C.c_size_t, C.c_size_t)
    CB = C.CFUNCTYPE(None, C.c_void_p, C.c_int, C.c_uint32, C.c_void_p)

    def __init__(self, sync):
        self.lib, self.sync = load_cupti(), sync
        self.bufs: dict[int, C.Array] = {}
        self.records = 0
        self.sub = C.c_void_p()
        self.subscribed = False
        self.tear = False
        self.torn = False
        self.req_cb, self.cmp_cb, self.cb_c = self.REQ(self._req), self.CMP(self._cmp), self.CB(self._cb)

    def _req(self, buf, size, maxr):
        b = C.create_string_buffer(4 << 20)
        self.bufs[C.addressof(b)] = b
        buf[0], size[0], maxr[0] = C.addressof(b), 4 << 20, 0

    def _cmp(self, ctx, sid, buf, size, valid):
        rec = C.c_void_p()
        while self.lib.cuptiActivityGetNextRecord(C.c_void_p(buf), C.c_size_t(valid), C.byref(rec)) == 0:
            self.records += 1
        self.bufs.pop(buf, None)

    def _cb(self, ud, domain, cbid, data):
        if self.tear and domain == RUNTIME_DOMAIN and C.cast(data, C.POINTER(C.c_int))[0] == API_EXIT:
            self.tear = False
            self.lib.cuptiUnsubscribe(self.sub)
            self.lib.cuptiFinalize()
            self.subscribed, self.torn = False, True

    def check(self, r: int, what: str) -> None:
        if r != 0:
            raise SystemExit(f"subcost: {what} returned {r}")

    def register(self) -> None:
        self.check(self.lib.cuptiActivityRegisterCallbacks(self.req_cb, self.cmp_cb), "cuptiActivityRegisterCallbacks")

    def subscribe(self) -> None:
        self.check(self.lib.cuptiSubscribe(C.byref(self.sub), self.cb_c, None), "cuptiSubscribe")
        self.subscribed = True

    def graph_callbacks(self) -> None:
        for cbid in GRAPH_CBIDS:
            self.check(self.lib.cuptiEnableCallback(1, self.sub, RESOURCE_DOMAIN, cbid), f"resource callback {cbid}")

    def set_up(self, state: str) -> None:
        """A state of STATES from a finalized CUPTI (window: its state after the window)."""
        if state != "none":
            self.register()
        if state in ("sub", "graph", "window"):
            self.subscribe()
        if state in ("graph", "window"):
            self.graph_callbacks()

    def kernels(self, on: bool) -> None:
        f = self.lib.cuptiActivityEnable if on else self.lib.cuptiActivityDisable
        self.check(f(CONCURRENT_KERNEL), "cuptiActivityEnable/Disable")

    def teardown(self) -> float:
        """Unsubscribe and finalize at a runtime API's exit (a synchronize): its ms."""
        t = time.perf_counter()
        self.lib.cuptiActivityFlushAll(1)
        if not self.subscribed:
            self.subscribe()
        self.check(self.lib.cuptiEnableDomain(1, self.sub, RUNTIME_DOMAIN), "cuptiEnableDomain")
        self.tear, self.torn = True, False
        self.sync()
        if not self.torn:
            raise SystemExit("subcost: the teardown did not run at the API exit")
        return (time.perf_counter() - t) * 1e3


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="mlp", help="a case of bench/gpu/cases.py")
    ap.add_argument("--cycles", type=int, default=40)
    ap.add_argument("--block-s", type=float, default=0.4, help="each timed block's length (s)")
    ap.add_argument("--window-steps", type=int, default=50, help="the window state's steps with kernel activity")
    ap.add_argument("--jsonl", default="bench-gpu.jsonl")
    a = ap.parse_args(argv)
    import torch

    from bench.gpu.cases import make_step
    from bench.gpu.overhead import bootstrap_ci

    step = make_step(a.workload)
    sync = torch.cuda.synchronize
    cupti = Cupti(sync)

    def block(n: int) -> float:
        sync()
        t = time.perf_counter()
        for _ in range(n):
            step()
        sync()
        return (time.perf_counter() - t) / n * 1e6

    warm_until = time.perf_counter() + 3.0  # 50 steps, or 3 s of a slow step (Llama's generate: 0.3 s)
    for _ in range(50):
        step()
        if time.perf_counter() > warm_until:
            break
    probe = block(3)  # a step of 2 ms or more is timed well enough by three
    n = max(10, int(a.block_s * 1e6 / (probe if probe >= 2000 else block(200))))
    setup: dict[str, list[float]] = {s: [] for s in STATES}
    us: dict[str, list[float]] = {s: [] for s in STATES}
    teardown_ms: list[float] = []
    rng = random.Random(1)
    for _ in range(a.cycles):
        order = list(STATES)
        rng.shuffle(order)
        for s in order:
            t = time.perf_counter()
            if s == "window":
                cupti.set_up("graph")
                cupti.kernels(True)
                for _ in range(a.window_steps):
                    step()
                cupti.kernels(False)
                sync()
                teardown_ms.append(cupti.teardown())
            cupti.set_up(s)
            setup[s].append((time.perf_counter() - t) * 1e3)
            for _ in range(5):
                step()
            us[s].append(block(n))
            if s != "none":
                teardown_ms.append(cupti.teardown())
    out = {"bench": "subcost", "workload": a.workload, "cycles": a.cycles, "steps_per_block": n, "states": {}}
    none_us = statistics.median(us["none"])
    print(f"subcost {a.workload}: {a.cycles} cycles, {n} steps a block, none {none_us:.1f} us/step")
    print(f"teardown at an API exit: median {statistics.median(teardown_ms):.2f} ms; window records {cupti.records}")
    for s in STATES:
        ratios = [(x / b - 1) * 100 for x, b in zip(us[s], us["none"])]
        lo, hi = bootstrap_ci(ratios)
        med = statistics.median(ratios)
        out["states"][s] = {
            "us_median": statistics.median(us[s]),
            "vs_none_pct": med,
            "ci": [lo, hi],
            "setup_ms": statistics.median(setup[s]),
        }
        print(
            f"  {s:7s} {statistics.median(us[s]):8.2f} us/step  vs none {med:+6.2f} % [{lo:+.2f}, {hi:+.2f}]"
            f"  setup {statistics.median(setup[s]):.2f} ms"
        )
    with open(a.jsonl, "a") as f:
        f.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
