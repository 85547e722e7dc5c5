"""The mock CUDA stack (build/mock) behaves like real CUDA + CUPTI where the profiler can tell.

Small C programs are compiled against the real CUDA 13 headers: a plain
driver/runtime/CUPTI client, a runtime-only app, and a CUPTI injection library
(loaded through CUDA_INJECTION64_PATH) that subscribes to a few cbids, records
CONCURRENT_KERNEL activity and writes everything it saw to a text file.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MOCK = REPO / "build" / "mock"
APP = MOCK / "mock_workload"
CUDA_INC = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"
EXEC_NODE_BASE = 1 << 32

# cbids the injection subscribes to (driver / runtime / resource).
DRV = {
    "cuLaunchKernel": 307,
    "cuLaunchKernel_ptsz": 442,
    "cuLaunchKernelEx": 652,
    "cuGraphLaunch": 514,
    "cuGraphLaunch_ptsz": 515,
}
RT = {"cudaLaunchKernel": 211, "cudaGraphLaunch": 311, "cudaLaunchKernelExC": 430}
RES = {"GRAPH_CREATED": 9, "GRAPHNODE_CREATED": 13, "GRAPHEXEC_CREATED": 18, "GRAPHNODE_CLONED": 20}

INJECT_C = r"""
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

static FILE *out;
static CUpti_SubscriberHandle sub;
static size_t bufsize;
static pid_t main_tid;
static int at_exit;

static pid_t tid(void) { return (pid_t)syscall(SYS_gettid); }

static void CUPTIAPI on_cb(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const void *data)
{
    if (dom == CUPTI_CB_DOMAIN_RESOURCE) {
        const CUpti_ResourceData *r = data;
        const CUpti_GraphData *g = r->resourceDescriptor;
        uint64_t node = 0, orig = 0; uint32_t gid = 0, xid = 0;
        if (g->node) cuptiGetGraphNodeId(g->node, &node);
        if (g->originalNode) cuptiGetGraphNodeId(g->originalNode, &orig);
        if (g->graph) cuptiGetGraphId(g->graph, &gid);
        if (g->graphExec) cuptiGetGraphExecId(g->graphExec, &xid);
        fprintf(out, "RES %u %llu %llu %u %u\n", cbid, (unsigned long long)node, (unsigned long long)orig, gid, xid);
        return;
    }
    const CUpti_CallbackData *d = data;
    unsigned gx = 0, bx = 0;
    if (d->callbackSite == CUPTI_API_ENTER) {
        *d->correlationData = 7ull * d->correlationId;
        if (dom == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
            const cuLaunchKernel_params *p = d->functionParams;
            gx = p->gridDimX; bx = p->blockDimX;
        }
        if (dom == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) {
            const cudaLaunchKernel_v7000_params *p = d->functionParams;
            gx = p->gridDim.x; bx = p->blockDim.x;
        }
    } else if (*d->correlationData != 7ull * d->correlationId) {
        fprintf(out, "CDBAD %u\n", d->correlationId);
    }
    fprintf(out, "CB %d %u %d %u %s %s %u %d %u %u\n", (int)dom, cbid, (int)d->callbackSite, d->correlationId,
            d->functionName, d->symbolName ? d->symbolName : "-", d->contextUid,
            d->callbackSite == CUPTI_API_EXIT ? *(int *)d->functionReturnValue : -1, gx, bx);
}

static void CUPTIAPI buf_req(uint8_t **buf, size_t *size, size_t *max)
{
    if (getenv("TEST_NULL_BUFFERS")) { *buf = NULL; *size = 0; *max = 0; return; }
    *buf = aligned_alloc(8, bufsize);
    *size = bufsize;
    *max = 0;
}

static void CUPTIAPI buf_done(CUcontext ctx, uint32_t sid, uint8_t *buf, size_t size, size_t valid)
{
    CUpti_Activity *rec = NULL;
    int n = 0;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
        fprintf(out, "KR %u %s %llu %llu %u %llu %u %d %d %d\n", k->correlationId, k->name,
                (unsigned long long)k->start, (unsigned long long)k->end, k->graphId,
                (unsigned long long)k->graphNodeId, k->streamId, (int)k->kind, k->gridX, k->blockX);
        n++;
    }
    fprintf(out, "BUF %zu %d %s %d\n", valid, tid() != main_tid, __atomic_load_n(&at_exit, __ATOMIC_RELAXED) ? "exit" : "run", n);
    free(buf);
}

static void finish(void)
{
    __atomic_store_n(&at_exit, 1, __ATOMIC_RELAXED);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
    fprintf(out, "DROPPED %zu\n", dropped);
    fclose(out);
}

int InitializeInjection(void)
{
    out = fopen(getenv("TEST_CUPTI_OUT"), "w");
    setvbuf(out, NULL, _IOLBF, 0);
    main_tid = tid();
    bufsize = getenv("TEST_BUFSIZE") ? strtoul(getenv("TEST_BUFSIZE"), NULL, 10) : 4096;
    fprintf(out, "INIT\n");
    CUpti_SubscriberHandle second;
    if (cuptiSubscribe(&sub, on_cb, NULL) != CUPTI_SUCCESS) { fprintf(out, "SUBFAIL\n"); return 0; }
    fprintf(out, "SUB2 %d\n", (int)cuptiSubscribe(&second, on_cb, NULL));
    static const int drv[] = { DRV_CBIDS }, rt[] = { RT_CBIDS }, res[] = { RES_CBIDS };
    for (unsigned i = 0; i < sizeof drv / sizeof *drv; i++) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, drv[i]);
    for (unsigned i = 0; i < sizeof rt / sizeof *rt; i++) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, rt[i]);
    for (unsigned i = 0; i < sizeof res / sizeof *res; i++) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, res[i]);
    cuptiActivityRegisterCallbacks(buf_req, buf_done);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (getenv("TEST_FLUSH_MS")) cuptiActivityFlushPeriod(atoi(getenv("TEST_FLUSH_MS")));
    atexit(finish);
    return 1;
}
"""

CLIENT_C = r"""
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <stdio.h>
#include <string.h>
#define CK(x) do { int r_ = (int)(x); if (r_) { printf("FAIL %s = %d (line %d)\n", #x, r_, __LINE__); return 1; } } while (0)
static unsigned fnv(const char *s) { unsigned h = 2166136261u; for (; *s; s++) { h ^= (unsigned char)*s; h *= 16777619u; } return h; }
int main(void)
{
    int v = 0, n = 0; CUdevice dev; CUcontext ctx, cur; CUmodule mod; CUfunction f, g; CUstream s;
    char name[64]; const char *str = NULL, *kn = NULL;
    CK(cuDeviceGetCount(&n) != CUDA_ERROR_NOT_INITIALIZED);
    CK(cuInit(0)); CK(cuDriverGetVersion(&v)); CK(v != 13000);
    CK(cuDeviceGetCount(&n)); CK(n != 1); CK(cuDeviceGet(&dev, 0)); CK(cuDeviceGetName(name, sizeof name, dev));
    CK(cuCtxCreate(&ctx, NULL, 0, dev)); CK(cuCtxGetCurrent(&cur)); CK(cur != ctx);
    CK(cuModuleLoadData(&mod, "_Z3fooPfi=12345\n"));
    CK(cuModuleGetFunction(&f, mod, "_Z3fooPfi")); CK(cuModuleGetFunction(&g, mod, "bar"));
    CK(cuFuncGetName(&kn, f)); CK(strcmp(kn, "_Z3fooPfi") != 0);
    CK(cuStreamCreate(&s, 0));
    CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(g, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
    CK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) != CUDA_ERROR_INVALID_HANDLE);
    CK(cuStreamSynchronize(s)); CK(cuCtxSynchronize());
    CK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &str)); CK(strcmp(str, "invalid argument") != 0);
    CK(cudaGetDeviceCount(&n)); CK(n != 1);
    void *p = NULL; CK(cudaMalloc(&p, 100)); CK(p == NULL); CK(cudaFree(p));
    CK(strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") != 0);
    uint32_t cv = 0; CK(cuptiGetVersion(&cv)); CK(cv != CUPTI_API_VERSION);
    uint64_t t0, t1; CK(cuptiGetTimestamp(&t0)); CK(cuptiGetTimestamp(&t1)); CK(t1 < t0);
    CK(cuptiGetResultString(CUPTI_ERROR_MAX_LIMIT_REACHED, &str)); CK(strcmp(str, "CUPTI_ERROR_MAX_LIMIT_REACHED") != 0);
    uint32_t id = 0; CK(cuptiGetContextId(ctx, &id)); CK(id == 0); CK(cuptiGetStreamId(ctx, s, &id)); CK(id == 0);
    printf("OK %u\n", 1000 + fnv("bar") % 9000);
    return 0;
}
"""

RTONLY_C = r"""
#include <cuda_runtime_api.h>
#include <stdio.h>
void kern(float *p, int n) __asm__("_Z7my_kernPfi");
__attribute__((noinline)) void kern(float *p, int n) { __asm__ volatile("" :: "r"(p), "r"(n)); }
int main(void)
{
    dim3 g = {2, 1, 1}, b = {32, 1, 1};
    for (int i = 0; i < 3; i++)
        if (cudaLaunchKernel((const void *)kern, g, b, NULL, 0, 0)) { puts("launch failed"); return 1; }
    return cudaDeviceSynchronize() != cudaSuccess;
}
"""


def run(cmd, env=None, check=True, timeout=60):
    p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def env_for(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MOCK_CUDA_", "TEST_", "GPU_AGENT_")) and k != "CUDA_INJECTION64_PATH"
    }
    env["LD_LIBRARY_PATH"] = str(MOCK)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    run(["make", "-s", "-C", REPO, "mock"], timeout=300)
    d = tmp_path_factory.mktemp("mockprogs")
    (d / "inject.c").write_text(INJECT_C)
    (d / "client.c").write_text(CLIENT_C)
    (d / "rtonly.c").write_text(RTONLY_C)
    defs = [
        f"-DDRV_CBIDS={','.join(map(str, DRV.values()))}",
        f"-DRT_CBIDS={','.join(map(str, RT.values()))}",
        f"-DRES_CBIDS={','.join(map(str, RES.values()))}",
    ]
    inc = ["-I", CUDA_INC, "-Wall", "-Werror", "-Wno-deprecated-declarations"]
    run(["cc", "-shared", "-fPIC", *inc, *defs, "-o", d / "inject.so", d / "inject.c", "-L", MOCK, "-lcupti"])
    run(["cc", *inc, "-o", d / "client", d / "client.c", "-L", MOCK, "-lcupti", "-lcudart", "-lcuda"])
    run(
        ["cc", "-rdynamic", *inc, "-o", d / "rtonly", d / "rtonly.c", "-L", MOCK, f"-Wl,-rpath-link,{MOCK}", "-lcudart"]
    )
    return d


def parse(out: Path):
    ev = defaultdict(list)
    for line in out.read_text().splitlines():
        kind, *f = line.split(" ")
        ev[kind].append(f)
    return ev


def truth(path: Path) -> dict[str, tuple[int, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "kernel\tlaunches\tgpu_ns"
    return {r[0]: (int(r[1]), int(r[2])) for r in (line.split("\t") for line in lines[1:])}


def activity_totals(ev) -> dict[str, tuple[int, int]]:
    acc = defaultdict(lambda: [0, 0])
    for r in ev["KR"]:
        acc[r[1]][0] += 1
        acc[r[1]][1] += int(r[3]) - int(r[2])
    return {k: tuple(v) for k, v in acc.items()}


def test_client_program_against_real_headers(progs):
    p = run([progs / "client"], env=env_for())
    assert p.stdout.startswith("OK"), p.stdout


@pytest.fixture(scope="module")
def traced(progs, tmp_path_factory):
    """mock_workload, all paths, 2 threads, under the test injection."""
    d = tmp_path_factory.mktemp("traced")
    # The sleep between iterations gives CUPTI's worker thread time to hand back full buffers
    # while the app still runs; without it a loaded CI machine may let everything wait for exit.
    run(
        [APP, "--paths", "all", "--iters", "5", "--threads", "2", "--sleep-ms", "30"],
        env=env_for(
            CUDA_INJECTION64_PATH=progs / "inject.so",
            TEST_CUPTI_OUT=d / "cupti.txt",
            MOCK_CUDA_GROUND_TRUTH=d / "truth.tsv",
        ),
    )
    return parse(d / "cupti.txt"), truth(d / "truth.tsv")


def test_single_subscriber_and_only_enabled_callbacks(traced):
    ev, _ = traced
    assert ev["INIT"] and ev["SUB2"] == [["39"]]  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
    seen = {(int(c[0]), int(c[1])) for c in ev["CB"]}
    allowed = {(1, c) for c in DRV.values()} | {(2, c) for c in RT.values()}
    assert seen <= allowed, seen - allowed
    assert seen == allowed  # and every enabled one fired
    assert not ev["CDBAD"], "correlationData not preserved from enter to exit"
    for c in ev["CB"]:
        if c[2] == "1":
            assert c[7] == "0", c  # functionReturnValue: CUDA_SUCCESS
    names = {(int(c[0]), int(c[1])): c[4] for c in ev["CB"]}
    assert names[(1, 307)] == "cuLaunchKernel" and names[(1, 442)] == "cuLaunchKernel_ptsz"
    assert names[(2, 211)] == "cudaLaunchKernel"
    enter_params = [(c[8], c[9]) for c in ev["CB"] if c[1] in ("307", "211") and c[2] == "0"]
    assert enter_params and all(p == ("4", "128") for p in enter_params)


def test_runtime_and_driver_share_correlation_ids(traced):
    ev, _ = traced
    by_corr = defaultdict(set)
    for c in ev["CB"]:
        if c[2] == "0":
            by_corr[int(c[3])].add((int(c[0]), int(c[1])))
    # cudaLaunchKernel -> cuLaunchKernel and cudaGraphLaunch -> cuGraphLaunch under one id each.
    assert any(s == {(2, 211), (1, 307)} for s in by_corr.values())
    assert any(s == {(2, 311), (1, 514)} for s in by_corr.values())
    for corr, s in by_corr.items():
        assert len([x for x in s if x[0] == 1]) <= 1 and len([x for x in s if x[0] == 2]) <= 1, (corr, s)
    # cudaLaunchKernelExC -> cuLaunchKernelEx; cudaLaunchKernel_ptsz (not enabled) -> cuLaunchKernel_ptsz alone.
    assert any(s == {(2, 430), (1, 652)} for s in by_corr.values())
    assert any(s == {(1, 442)} for s in by_corr.values())


def test_activity_matches_ground_truth_exactly(traced):
    ev, gt = traced
    assert ev["DROPPED"] == [["0"]]
    assert activity_totals(ev) == gt
    assert gt["_Z16k_cuLaunchKernelPfi"] == (10, 10 * (2000 + 500 * 3))  # 5 iters x 2 threads
    assert max(len(k) for k in gt) > 5000
    # 4 KiB buffers: full ones are handed back on a CUPTI thread while the app runs.
    assert any(b[1] == "1" and b[2] == "run" for b in ev["BUF"])
    assert sum(int(b[3]) for b in ev["BUF"]) == len(ev["KR"])
    # Every kernel record's correlation id is one of a launch callback's.
    launch_corr = {c[3] for c in ev["CB"]}
    plain = [r for r in ev["KR"] if r[4] == "0"]
    traced_apis = [
        "cuLaunchKernel",
        "cuLaunchKernel_ptsz",
        "cuLaunchKernelEx",
        "cuGraphLaunch",
        "cuGraphLaunch_ptsz",
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaLaunchKernelExC",
        "cudaGraphLaunch",
        "cudaGraphLaunch_ptsz",
        "long_name",
    ]
    covered = [
        r
        for r in ev["KR"]
        if any(f"k_{a}Pfi" in r[1] or f"k_{a}_node" in r[1] or f"k_{a}I" in r[1] for a in traced_apis)
    ]
    assert len(covered) == 10 * (7 + 4 * 3)
    assert all(r[0] in launch_corr for r in covered)
    assert all(int(r[7]) == 10 and int(r[8]) == (1 if r[1] == "_Z10k_cuLaunchPfi" else 4) for r in ev["KR"])
    sym = {c[3]: c[5] for c in ev["CB"] if c[1] == "307" and c[2] == "0"}
    for r in plain:
        if r[0] in sym:
            assert sym[r[0]] == r[1]


def test_per_stream_clock_never_overlaps(traced):
    ev, _ = traced
    by_stream = defaultdict(list)
    for r in ev["KR"]:
        by_stream[r[6]].append((int(r[2]), int(r[3])))
    for spans in by_stream.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_graph_kernels(traced):
    ev, _ = traced
    graph_launch_corr = {c[3] for c in ev["CB"] if c[1] in ("514", "515", "311")}
    graph_kr = [r for r in ev["KR"] if "_node" in r[1]]
    assert len(graph_kr) == 4 * 3 * 10
    by_corr = defaultdict(list)
    for r in graph_kr:
        by_corr[r[0]].append(r)
        assert int(r[5]) >= EXEC_NODE_BASE and r[4] != "0"
    assert all(len(v) == 3 for v in by_corr.values())  # one graph launch = 3 kernels, one id
    assert set(by_corr) <= graph_launch_corr
    captured = {int(r[1]) for r in ev["RES"] if r[0] == "13"}  # GRAPHNODE_CREATED node ids
    cloned = {int(r[1]): int(r[2]) for r in ev["RES"] if r[0] == "20"}  # exec node -> original
    assert len(captured) == 4 * 3 * 2 and all(n < EXEC_NODE_BASE for n in captured)
    assert set(cloned.values()) == captured
    assert {int(r[5]) for r in graph_kr} == set(cloned)
    exec_ids = {r[4] for r in ev["RES"] if r[0] == "18"}
    graph_ids = {r[3] for r in ev["RES"] if r[0] == "9"}
    assert {r[4] for r in graph_kr} == exec_ids and not exec_ids & graph_ids
    # Captured launches fired callbacks but produced no activity.
    kr_corr = {r[0] for r in ev["KR"]}
    capture_cb = [c for c in ev["CB"] if c[1] in ("307", "211") and "_node" in c[5]]
    assert capture_cb and not {c[3] for c in capture_cb} & kr_corr


def test_null_buffers_are_counted_as_dropped(progs, tmp_path):
    run(
        [APP, "--paths", "cuLaunchKernel,cudaGraphLaunch", "--iters", "3"],
        env=env_for(
            CUDA_INJECTION64_PATH=progs / "inject.so",
            TEST_CUPTI_OUT=tmp_path / "c.txt",
            TEST_NULL_BUFFERS=1,
            MOCK_CUDA_GROUND_TRUTH=tmp_path / "t.tsv",
        ),
    )
    ev, gt = parse(tmp_path / "c.txt"), truth(tmp_path / "t.tsv")
    assert not ev["KR"]
    assert ev["DROPPED"] == [[str(sum(n for n, _ in gt.values()))]] == [["12"]]


def test_flush_period_delivers_partial_buffers(progs, tmp_path):
    run(
        [APP, "--paths", "cuLaunchKernel", "--iters", "6", "--sleep-ms", "40"],
        env=env_for(
            CUDA_INJECTION64_PATH=progs / "inject.so",
            TEST_CUPTI_OUT=tmp_path / "c.txt",
            TEST_BUFSIZE=1 << 20,
            TEST_FLUSH_MS=10,
        ),
    )
    ev = parse(tmp_path / "c.txt")
    assert len([b for b in ev["BUF"] if b[2] == "run" and b[1] == "1" and int(b[3]) > 0]) >= 2
    assert len(ev["KR"]) == 6


def test_runtime_only_app_loads_injection_and_names_by_dladdr(progs, tmp_path):
    run(
        [progs / "rtonly"],
        env=env_for(
            CUDA_INJECTION64_PATH=progs / "inject.so",
            TEST_CUPTI_OUT=tmp_path / "c.txt",
            MOCK_CUDA_GROUND_TRUTH=tmp_path / "t.tsv",
        ),
    )
    ev = parse(tmp_path / "c.txt")
    assert ev["INIT"]
    assert [r[1] for r in ev["KR"]] == ["_Z7my_kernPfi"] * 3
    assert truth(tmp_path / "t.tsv")["_Z7my_kernPfi"][0] == 3


def test_failed_init_skips_injection(progs, tmp_path):
    p = run(
        [APP, "--iters", "1"],
        check=False,
        env=env_for(
            MOCK_CUDA_FAIL_INIT=1, CUDA_INJECTION64_PATH=progs / "inject.so", TEST_CUPTI_OUT=tmp_path / "c.txt"
        ),
    )
    assert p.returncode == 1 and "cuInit failed" in p.stderr and len(p.stderr.splitlines()) == 1
    assert not (tmp_path / "c.txt").exists()


def test_workload_cli(progs, tmp_path):
    paths = run([APP, "--list-paths"], env=env_for()).stdout.split()
    assert len(paths) == 21 and "cudaGraphLaunch_ptsz" in paths and "long_name_kernel" not in paths
    p = run([APP, "--paths", "nope"], env=env_for(), check=False)
    assert p.returncode == 1
    for api in ("cuLaunchKernel", "cudaLaunchKernel"):
        out = run([APP, "--bench", "20000", "--api", api], env=env_for()).stdout
        assert out.startswith("ns_per_launch=") and float(out.split()[0].split("=")[1]) > 0
    # Threads x duration: ground truth stays exact under concurrency (no CUPTI here).
    run(
        [APP, "--paths", "cuLaunchKernel,cudaLaunchKernel_ptsz", "--threads", "3", "--iters", "200"],
        env=env_for(MOCK_CUDA_GROUND_TRUTH=tmp_path / "t.tsv"),
    )
    gt = truth(tmp_path / "t.tsv")
    assert gt["_Z16k_cuLaunchKernelPfi"][0] == 600 and gt["_Z23k_cudaLaunchKernel_ptszPfi"][0] == 600


QUEUE_PROBE = """
import ctypes, sys, time
sys.path.insert(0, sys.argv[1])
from py_workload import check, setup
lib = ctypes.PyDLL("libcuda.so.1")
setup(lib)
check(lib.cuInit(0), "cuInit")
dev, ctx, mod, f = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
check(lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
check(lib.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
check(lib.cuModuleLoadData(ctypes.byref(mod), b"k_slow=10000\\n\\0"), "cuModuleLoadData")
check(lib.cuModuleGetFunction(ctypes.byref(f), mod, b"k_slow"), "cuModuleGetFunction")
t0 = time.monotonic()
for _ in range(int(sys.argv[2])):
    lib.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, None, None)
print(time.monotonic() - t0)
"""


def test_a_full_launch_queue_holds_the_host_back():
    """The driver's launch queue is bounded (MOCK_QUEUE_DEPTH = 1024 kernels a
    stream): launching 20 000 kernels of 10 us takes the host at least the GPU time
    of all but the last 1 024, as on a real GPU; without the bound the mock's GPU
    fell seconds behind a fast host, and records started long after their launch."""
    n, kernel_s, depth = 20_000, 10e-6, 1024
    p = run(["python3", "-c", QUEUE_PROBE, Path(__file__).parent, n], env=env_for())
    took = float(p.stdout.split()[-1])
    assert took >= 0.97 * (n - depth) * kernel_s, took


PCS_C = r"""
#include <cuda.h>
#include <cupti.h>
#include <cupti_pcsampling.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cubin; static size_t cubin_size;
static void CUPTIAPI on_res(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    const CUpti_ModuleResourceData *m = ((const CUpti_ResourceData *)data)->resourceDescriptor;
    if (d == CUPTI_CB_DOMAIN_RESOURCE && id == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
        cubin = m->pCubin; cubin_size = m->cubinSize;
    }
}
static CUpti_PCSamplingData buffer(size_t n) {
    CUpti_PCSamplingData b = {sizeof b, n};
    b.pPcData = calloc(n, sizeof *b.pPcData);
    for (size_t i = 0; i < n; i++) b.pPcData[i].stallReason = calloc(8, sizeof(CUpti_PCSamplingStallReason));
    return b;
}
static void show(const char *what, CUpti_PCSamplingData *b) {
    printf("%s total=%llu remaining=%zu pcs=%zu\n", what, (unsigned long long)b->totalSamples,
           b->remainingNumPcs, b->totalNumPcs);
    for (size_t i = 0; i < b->totalNumPcs; i++) {
        CUpti_PCSamplingPCData *p = &b->pPcData[i];
        printf("pc %s 0x%llx crc=%llu corr=%u", p->functionName, (unsigned long long)p->pcOffset,
               (unsigned long long)p->cubinCrc, p->correlationId);
        for (size_t r = 0; r < p->stallReasonCount; r++)
            printf(" %u:%u", p->stallReason[r].pcSamplingStallReasonIndex, p->stallReason[r].samples);
        printf("\n");
    }
}
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction hot, cold;
    CUpti_SubscriberHandle sub;
    cuptiSubscribe(&sub, on_res, NULL);
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    cuInit(0); cuDeviceGet(&dev, 0); cuCtxCreate_v2(&ctx, 0, dev);
    cuModuleLoadData(&mod, "k_hot=4096@0x210:6,0x240:3,0x0:1\nk_cold=1024\n");
    cuModuleGetFunction(&hot, mod, "k_hot"); cuModuleGetFunction(&cold, mod, "k_cold");
    size_t n = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np = {CUpti_PCSamplingGetNumStallReasonsParamsSize, 0, ctx, &n};
    printf("reasons before enable: %d\n", cuptiPCSamplingGetNumStallReasons(&np));
    CUpti_PCSamplingEnableParams ep = {CUpti_PCSamplingEnableParamsSize, 0, ctx};
    cuptiPCSamplingEnable(&ep);
    printf("kernel activity after enable: %d\n", cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CUptiResult got_reasons = cuptiPCSamplingGetNumStallReasons(&np);
    printf("reasons: %d %zu\n", got_reasons, n);
    uint32_t idx[8]; char *names[8];
    for (int i = 0; i < 8; i++) names[i] = calloc(CUPTI_STALL_REASON_STRING_SIZE, 1);
    CUpti_PCSamplingGetStallReasonsParams rp = {CUpti_PCSamplingGetStallReasonsParamsSize, 0, ctx, n, idx, names};
    cuptiPCSamplingGetStallReasons(&rp);
    for (size_t i = 0; i < n; i++) printf("reason %u %s\n", idx[i], names[i]);
    CUpti_PCSamplingData configured = buffer(64), out = buffer(64);
    CUpti_PCSamplingConfigurationInfo cfg[2] = {{CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD},
                                                {CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER}};
    cfg[0].attributeData.samplingPeriodData.samplingPeriod = 4;
    cfg[1].attributeData.samplingDataBufferData.samplingDataBuffer = &configured;
    CUpti_PCSamplingConfigurationInfoParams cp = {CUpti_PCSamplingConfigurationInfoParamsSize, 0, ctx, 2, cfg};
    cuptiPCSamplingSetConfigurationAttribute(&cp);
    for (int i = 0; i < 10; i++) cuLaunchKernel(hot, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    for (int i = 0; i < 5; i++) cuLaunchKernel(cold, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    cuCtxSynchronize();
    CUpti_PCSamplingGetDataParams gp = {CUpti_PCSamplingGetDataParamsSize, 0, ctx, &out};
    printf("getdata: %d\n", cuptiPCSamplingGetData(&gp));
    show("got", &out);
    for (int i = 0; i < 2; i++) cuLaunchKernel(hot, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    CUpti_PCSamplingDisableParams dp = {CUpti_PCSamplingDisableParamsSize, 0, ctx};
    cuptiPCSamplingDisable(&dp);
    printf("getdata after disable: %d\n", cuptiPCSamplingGetData(&gp));
    show("configured", &configured);
    CUpti_GetCubinCrcParams cc = {CUpti_GetCubinCrcParamsSize, cubin_size, cubin};
    cuptiGetCubinCrc(&cc);
    printf("cubin %zu crc=%llu\n", cubin_size, (unsigned long long)cc.cubinCrc);
    return 0;
}
"""


def test_pc_sampling_api_follows_what_an_h100_showed(tmp_path):
    """The mock's PC Sampling API (shim/mock/mock_pcsampling.c) keeps the rules an
    H100 showed (bench/gpu/pc_sampling.cu): Enable before the stall-reason queries,
    GetData refused after Disable (which leaves the rest in the configured buffer),
    `_not_issued` reasons as subsets, one correlation id, kernel activity refused once
    sampling is enabled (CUPTI_ERROR_NOT_COMPATIBLE); and gives exact,
    deterministic samples: D >> period per launch over the module's pcs by weight."""
    run(["make", "-s", "-C", REPO, "mock"], timeout=300)
    (tmp_path / "pcs.c").write_text(PCS_C)
    run(
        [
            "cc",
            "-I",
            CUDA_INC,
            "-Wall",
            "-Wno-deprecated-declarations",
            "-Wno-missing-field-initializers",
            "-o",
            tmp_path / "pcs",
            tmp_path / "pcs.c",
            "-L",
            MOCK,
            "-lcupti",
            "-lcuda",
        ]
    )
    out = run([tmp_path / "pcs"], env=env_for()).stdout
    invalid = "7"  # CUPTI_ERROR_INVALID_OPERATION
    assert f"reasons before enable: {invalid}" in out
    assert "kernel activity after enable: 14" in out  # CUPTI_ERROR_NOT_COMPATIBLE
    assert "reasons: 0 5" in out
    names = dict(re.findall(r"^reason (\d+) (\S+)$", out, re.M))
    assert names["3"] == names["2"] + "_not_issued"
    got = out.split("got total=")[1].split("getdata after disable")[0]
    # k_hot: 4096 ns >> 4 = 256 samples a launch: 153 at 0x210, 76 at 0x240, 27 at 0x0;
    # each: 3/4 mio_throttle (2), half of that not issued (3), the rest selected (7).
    assert got.startswith("2880 remaining=0 pcs=4")  # 10 x 256 + 5 x 64, not-issued not counted
    assert "pc k_hot 0x210" in got and " 2:1140 3:570 7:390" in got
    assert "pc k_hot 0x240" in got and " 2:570 3:280 7:190" in got
    assert "pc k_hot 0x0" in got and " 2:200 3:100 7:70" in got
    assert "pc k_cold 0x0" in got and " 2:240 3:120 7:80" in got
    assert set(re.findall(r"corr=(\d+)", got)) == {"0"}
    assert f"getdata after disable: {invalid}" in out
    conf = out.split("configured total=")[1]
    assert conf.startswith("512 remaining=0 pcs=3")  # the 2 launches after GetData
    crc = re.search(r"cubin (\d+) crc=(\d+)", out)
    assert int(crc.group(1)) == len("k_hot=4096@0x210:6,0x240:3,0x0:1\nk_cold=1024\n")
    assert set(re.findall(r"crc=(\d+)", got)) == {crc.group(2)}


TOGGLE_C = r"""
#include <cuda.h>
#include <cupti.h>
#include <stdio.h>

static long callbacks;
static void CUPTIAPI on_cb(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    if (d == CUPTI_CB_DOMAIN_DRIVER_API && id == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel &&
        ((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_ENTER)
        callbacks++;
}
static void pieces(CUfunction f, int subscribe_each) {
    CUpti_SubscriberHandle sub;
    cuptiSubscribe(&sub, on_cb, NULL);
    for (int p = 0; p < 5; p++) {
        if (subscribe_each && p) { cuptiUnsubscribe(sub); cuptiSubscribe(&sub, on_cb, NULL); }
        callbacks = 0;
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
        for (int i = 0; i < 10; i++) cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
        cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
        printf(" %ld", callbacks);
    }
    cuptiUnsubscribe(sub);
    printf("\n");
}
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f;
    cuInit(0); cuDeviceGet(&dev, 0); cuCtxCreate_v2(&ctx, 0, dev);
    cuModuleLoadData(&mod, "k=1000\n"); cuModuleGetFunction(&f, mod, "k");
    printf("one subscription:"); pieces(f, 0);
    printf("a subscription each:"); pieces(f, 1);
    cuptiFinalize();
    printf("after a finalize:"); pieces(f, 0);
    return 0;
}
"""


def test_a_callback_turned_on_a_fourth_time_fires_no_more(tmp_path):
    """What an H100 showed (bench/gpu/callback_toggle.cu, CUDA 13, driver 580):
    the cuLaunchKernel callback fired after each of the first three enables of a
    process and never after later ones, though cuptiEnableCallback returned
    success; a new subscription did not bring it back, a cuptiFinalize does."""
    run(["make", "-s", "-C", REPO, "mock"], timeout=300)
    (tmp_path / "toggle.c").write_text(TOGGLE_C)
    run(
        [
            "cc",
            "-I",
            CUDA_INC,
            "-Wall",
            "-Wno-deprecated-declarations",
            "-Wno-unused-parameter",
            "-o",
            tmp_path / "toggle",
            tmp_path / "toggle.c",
            "-L",
            MOCK,
            "-lcupti",
            "-lcuda",
        ]
    )
    out = run([tmp_path / "toggle"], env=env_for()).stdout
    assert "one subscription: 10 10 10 0 0\n" in out, out
    assert "a subscription each: 0 0 0 0 0\n" in out, out
    assert "after a finalize: 10 10 10 0 0\n" in out, out
    lifted = run([tmp_path / "toggle"], env=env_for(MOCK_CUPTI_ENABLE_LIMIT=0)).stdout
    assert "one subscription: 10 10 10 10 10\n" in lifted, lifted


SCRAMBLE_C = r"""
#include <cuda.h>
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUfunction fa, fb;
static int cb_kernel[4096];   /* correlation id -> 1 (a) / 2 (b), from the launch callback */
static long right, wrong;
static void CUPTIAPI on_cb(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id, const void *data) {
    const CUpti_CallbackData *cb = data;
    if (d != CUPTI_CB_DOMAIN_DRIVER_API || id != CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
        cb->callbackSite != CUPTI_API_ENTER || cb->correlationId >= 4096) return;
    cb_kernel[cb->correlationId] = ((const cuLaunchKernel_params *)cb->functionParams)->f == fb ? 2 : 1;
}
static void CUPTIAPI req(uint8_t **b, size_t *n, size_t *max) { *n = 1 << 20; *b = aligned_alloc(8, *n); *max = 0; }
static void CUPTIAPI done(CUcontext c, uint32_t s, uint8_t *b, size_t n, size_t valid) {
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(b, valid, &r) == CUPTI_SUCCESS) {
        if (r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)r;
        uint32_t corr = k->correlationId;
        if (corr >= 4096 || !cb_kernel[corr]) continue;
        if (cb_kernel[corr] == (strcmp(k->name, "kb") ? 1 : 2)) right++; else wrong++;
    }
    free(b);
}
static void window(int toggle_first) {
    CUpti_SubscriberHandle sub;
    memset(cb_kernel, 0, sizeof cb_kernel);
    right = wrong = 0;
    cuptiActivityRegisterCallbacks(req, done);
    cuptiSubscribe(&sub, on_cb, NULL);
    if (toggle_first) {  /* a count piece before the window's */
        cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
        cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    }
    cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    for (int i = 0; i < 100; i++) cuLaunchKernel(i % 2 ? fb : fa, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
    cuCtxSynchronize();
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    cuptiUnsubscribe(sub);
    cuptiFinalize();
    printf("%s: right %ld wrong %ld\n", toggle_first ? "toggled first" : "once", right, wrong);
}
int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule mod;
    cuInit(0); cuDeviceGet(&dev, 0); cuCtxCreate_v2(&ctx, 0, dev);
    cuModuleLoadData(&mod, "ka=1000\nkb=1000\n");
    cuModuleGetFunction(&fa, mod, "ka"); cuModuleGetFunction(&fb, mod, "kb");
    window(0);
    window(1);
    window(0);
    return 0;
}
"""


def test_a_callback_turned_on_again_before_a_window_mismatches_its_records(tmp_path):
    """What an H100 showed (bench/gpu/corr_toggle.cu): with the cuLaunchKernel
    callback turned on, off and on again before kernel activity went on, half the
    window's records carried the correlation id of a launch of the other kernel (7
    cycles of 8; none with one enable). A cuptiFinalize ends it. The mock's records
    go one launch off."""
    run(["make", "-s", "-C", REPO, "mock"], timeout=300)
    (tmp_path / "scramble.c").write_text(SCRAMBLE_C)
    run(
        [
            "cc",
            "-I",
            CUDA_INC,
            "-Wall",
            "-Wno-deprecated-declarations",
            "-Wno-unused-parameter",
            "-o",
            tmp_path / "scramble",
            tmp_path / "scramble.c",
            "-L",
            MOCK,
            "-lcupti",
            "-lcuda",
        ]
    )
    out = run([tmp_path / "scramble"], env=env_for()).stdout
    lines = out.splitlines()
    assert lines[0] == "once: right 100 wrong 0", out
    assert lines[1].startswith("toggled first: right 0 wrong 9"), out  # all one launch off
    assert lines[2] == "once: right 100 wrong 0", out
