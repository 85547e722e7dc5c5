/* launch_hook.cpp: a launch counter that costs a few ns a launch, not CUPTI's.
 *
 * Why: with CUPTI torn down between windows, the launches between windows were
 * extrapolated from one count phase a period (window.cpp). A job's launch rate
 * moves in regimes of seconds (±30 % on H200 VMs with no shim loaded at all, a
 * CPU whose speed changes under the thread: docs/benchmarks.md), so one count
 * phase read its period at a median error of 4-8 % and a 90th percentile of
 * 15-32 %, and a 10 s interval carried that; CPU time does not follow such a
 * change, the VMs have no PMU, and CUPTI's launch callbacks cost a launch-bound
 * job about 4 % while on, so counting longer costs what the budget cannot pay.
 *
 * What: every loaded object's import slots (R_X86_64_JUMP_SLOT) of the CUDA launch
 * functions point, while an agent is attached, at a trampoline of ours that adds 1
 * to a counter and jumps on to the function the slot held: a locked add and an
 * indirect jump, nothing else (no register is touched, so any signature passes).
 * PyTorch's own kernels reach cudart through such slots; a launcher that takes a
 * pointer from dlsym or cuGetProcAddress does not: Triton's launchers keep it in a
 * static variable, torch.compile's static launcher calls through ATen's NVRTC table
 * (a struct of driver pointers that each take dlsym's address at first use), and
 * cuBLAS's static cudart keeps its own table. So the writable data of every object
 * (not its RELRO part) is searched too, for 8-byte words that hold the address of a
 * driver launch function (dlsym's, in libcuda.so.1): each such word is a slot like
 * an import slot. A table filled after the search (a lazy stub's first call) is
 * found by a later one (the data pass, scan_data), and the launches before that
 * went uncounted: ATen's table takes its pointer at torch.compile's first launch,
 * seconds after the attach. So the counted objects' imports of dlsym go to a stub of
 * ours while attached (ga_dlsym_stubs): asked for a driver launch function by a handle,
 * it answers with the trampoline for it, and the launches through the table are hits
 * from the first (a later search adopts the word, so that a detach puts it back).
 * The words are read with
 * process_vm_readv on ourselves, so that a page the
 * program made unreadable ends the read of its chunk, not the program (/proc/self/mem
 * where a seccomp filter refuses process_vm_readv). What the
 * counter still misses is calibrated away: window.cpp compares it with the launch
 * callbacks in each count phase and uses it only where the two agree. CUDA's own
 * libraries are left alone (cudart's calls into the driver would count a launch
 * twice), as is the shim. The slots go back at a detach.
 *
 * Safety: a slot is written only inside a loaded object's own segments, with a
 * relocation of the object naming the function, by one 8-byte atomic store; a slot
 * in the RELRO segment is made writable for the store and read-only again. Every
 * write happens inside dl_iterate_phdr, whose lock keeps the object from being
 * unloaded meanwhile, and nothing in there takes the loader's other lock (dlsym,
 * dladdr: a thread in dlopen holds that one and waits for ours): the names are
 * looked up and the shim's own base found before. A slot still unresolved (lazy
 * binding: it points into its own object) goes to the global scope's definition where
 * there is one, else is retried at the next scan. At a restore a slot is written back
 * only while it still holds our trampoline, in an object still loaded. x86-64 only:
 * elsewhere nothing is counted and window.cpp keeps its clocks. */
#include "launch_hook.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define HOOK_TRAMPS GA_HOOK_TARGETS /* distinct functions behind the slots */
#define HOOK_SLOTS 4096    /* slots counted at once */
#define HOOK_OBJECTS 2048  /* objects scanned (their load address) */
#define HOOK_PENDING 256   /* unresolved slots retried */
#define TRAMP_BYTES 32

static const char *const k_names[] = {
    /* runtime API (CUDA 13 routes `kernel<<<...>>>` through the __cuda ones) */
    "cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
    "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernel_ptsz", "__cudaLaunchKernel",
    "__cudaLaunchKernel_ptsz", "cudaGraphLaunch", "cudaGraphLaunch_ptsz",
    /* driver API */
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuLaunchCooperativeKernel",
    "cuLaunchCooperativeKernel_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuLaunch", "cuLaunchGrid",
    "cuLaunchGridAsync",
};
#define N_NAMES (sizeof(k_names) / sizeof(k_names[0]))

extern "C" {
/* Read by the trampolines (RIP-relative: hidden, so no GOT of our own between). */
GA_HIDDEN uint64_t ga_hook_hit[HOOK_TRAMPS * 8]; /* one 64-byte line per trampoline */
GA_HIDDEN void *ga_hook_real[HOOK_TRAMPS];
GA_HIDDEN extern const char ga_hook_tramps[];
}

#if defined(__x86_64__)
#define HOOK_ON 1
/* Trampoline i: hit[8 i] += 1 (locked: launching threads share it), then jump to
 * real[i] with every argument register and the stack as the caller left them. */
__asm__(".text\n"
        ".p2align 5\n"
        ".globl ga_hook_tramps\n"
        ".hidden ga_hook_tramps\n"
        ".type ga_hook_tramps, @function\n"
        "ga_hook_tramps:\n"
        ".altmacro\n"
        ".macro ga_tramp i\n"
        "  .p2align 5\n"
        "  endbr64\n"
        "  lock incq ga_hook_hit+64*\\i(%rip)\n"
        "  jmp *ga_hook_real+8*\\i(%rip)\n"
        ".endm\n"
        ".set ga_ti, 0\n"
        ".rept 64\n"
        "  ga_tramp %ga_ti\n"
        "  .set ga_ti, ga_ti+1\n"
        ".endr\n"
        ".noaltmacro\n"
        ".size ga_hook_tramps, .-ga_hook_tramps\n"
        ".p2align 5\n");
#else
#define HOOK_ON 0
const char ga_hook_tramps[1] = {0};
#endif

static_assert(HOOK_TRAMPS == 64, "the .rept above");

/* The dlsym stubs, one per distinct dlsym the imports held (glibc has two versions of
 * it): stub i asks ga_dlsym_wants(handle, name) with the caller's arguments saved; on
 * yes it jumps to ga_dlsym_answer(handle, name, i), else to the real dlsym itself, so
 * that the caller's return address is dlsym's caller still (RTLD_NEXT and
 * RTLD_DEFAULT look up from the caller's object). */
#define DLSYM_STUBS 4
#define DLSYM_BYTES 64
extern "C" {
GA_HIDDEN void *ga_dlsym_real[DLSYM_STUBS];
GA_HIDDEN extern const char ga_dlsym_stubs[];
GA_HIDDEN int ga_dlsym_wants(void *handle, const char *name) noexcept;
GA_HIDDEN void *ga_dlsym_answer(void *handle, const char *name, unsigned i) noexcept;
}
#if HOOK_ON
__asm__(".text\n"
        ".p2align 6\n"
        ".globl ga_dlsym_stubs\n"
        ".hidden ga_dlsym_stubs\n"
        ".type ga_dlsym_stubs, @function\n"
        "ga_dlsym_stubs:\n"
        ".altmacro\n"
        ".macro ga_dlsym_stub i\n"
        "  .p2align 6\n"
        "  endbr64\n"
        "  push %rdi\n"
        "  push %rsi\n"
        "  sub $8, %rsp\n" /* the call below on a 16-byte boundary */
        "  call ga_dlsym_wants\n"
        "  add $8, %rsp\n"
        "  pop %rsi\n"
        "  pop %rdi\n"
        "  test %eax, %eax\n"
        "  jz 1f\n"
        "  mov $\\i, %edx\n"
        "  jmp ga_dlsym_answer\n"
        "1:\n"
        "  jmp *ga_dlsym_real+8*\\i(%rip)\n"
        ".endm\n"
        ".set ga_di, 0\n"
        ".rept 4\n"
        "  ga_dlsym_stub %ga_di\n"
        "  .set ga_di, ga_di+1\n"
        ".endr\n"
        ".noaltmacro\n"
        ".size ga_dlsym_stubs, .-ga_dlsym_stubs\n");
#else
const char ga_dlsym_stubs[1] = {0};
#endif
static_assert(DLSYM_STUBS == 4, "the .rept above");

struct slot {
    uintptr_t addr, orig, base; /* the slot, what it held, its object's load address */
    uintptr_t val;              /* what it holds now: a trampoline, or a dlsym stub */
    uint32_t tramp;             /* the trampoline's number (HOOK_TRAMPS: a dlsym stub) */
    bool adopted;               /* a handed-out trampoline's word (counted before its search) */
};
static slot g_slots[HOOK_SLOTS];
static uint32_t g_n_slots, g_n_tramps, g_refused;
static uintptr_t g_objects[HOOK_OBJECTS];
static uint32_t g_object_scan[HOOK_OBJECTS]; /* the scan that first saw it (g_scans) */
static uint32_t g_scans; /* since the attach (the data passes start at some of them) */
static uint32_t g_n_objects;
struct pending {
    uintptr_t addr, base, lo, hi; /* the slot; its object's extent, where an unresolved slot points */
    uint32_t name;
};
static pending g_pending[HOOK_PENDING];
static uint32_t g_n_pending;
static uint32_t g_tramp_name[HOOK_TRAMPS];
/* tramp_for's: the poller's scans and the threads that ask dlsym */
static pthread_mutex_t g_tramp_mu = PTHREAD_MUTEX_INITIALIZER;
/* While attached (from the first scan to the restore): each driver launch function's
 * address in libcuda.so.1 (0: none), for the dlsym stubs' answers. */
static uintptr_t g_drv_addr[N_NAMES];
static bool g_handout_on;
static uint64_t g_handed_mask; /* the trampolines the stubs handed out */
static uint64_t g_handouts;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uintptr_t tramp_addr(uint32_t i) { return (uintptr_t)ga_hook_tramps + (uintptr_t)i * TRAMP_BYTES; }
static bool is_tramp(uintptr_t v) {
    return HOOK_ON && v >= (uintptr_t)ga_hook_tramps && v < tramp_addr(HOOK_TRAMPS);
}

static int name_index(const char *s) {
    if (!((s[0] == 'c' && s[1] == 'u') || (s[0] == '_' && s[1] == '_' && s[2] == 'c'))) return -1;
    for (unsigned i = 0; i < N_NAMES; i++)
        if (!strcmp(s, k_names[i])) return (int)i;
    return -1;
}

/* CUDA's own libraries and the shim (its load address: self_base): never counted. */
static bool skip_object(const char *path, uintptr_t base, uintptr_t self_base) {
    if (base == self_base) return true;
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    static const char *const skip[] = {"linux-vdso", "libcuda.so", "libcudart.so", "libcupti.so", "libnvidia-",
                                       "libgpu_agent_shim"};
    for (const char *p : skip)
        if (!strncmp(b, p, strlen(p))) return true;
    return false;
}

/* Write v into the slot: an atomic store, the page made writable for it if needed. */
static bool write_slot(uintptr_t addr, uintptr_t v, bool relro) {
    long pg = sysconf(_SC_PAGESIZE);
    void *page = (void *)(addr & ~(uintptr_t)(pg - 1));
    if (relro && mprotect(page, (size_t)pg, PROT_READ | PROT_WRITE) != 0) return false;
    __atomic_store_n((uintptr_t *)addr, v, __ATOMIC_RELEASE);
    if (relro) mprotect(page, (size_t)pg, PROT_READ);
    return true;
}

static int tramp_for(uintptr_t real, uint32_t name) {
    pthread_mutex_lock(&g_tramp_mu);
    int t = -1;
    uint32_t n = __atomic_load_n(&g_n_tramps, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < n && t < 0; i++)
        if ((uintptr_t)__atomic_load_n(&ga_hook_real[i], __ATOMIC_RELAXED) == real) t = (int)i;
    if (t < 0 && n < HOOK_TRAMPS) {
        __atomic_store_n(&ga_hook_real[n], (void *)real, __ATOMIC_RELEASE);
        g_tramp_name[n] = name;
        __atomic_store_n(&g_n_tramps, n + 1, __ATOMIC_RELEASE);
        t = (int)n;
    }
    pthread_mutex_unlock(&g_tramp_mu);
    return t;
}

/* ---- the dlsym stubs' side (any thread) ---- */
int ga_dlsym_wants(void *handle, const char *name) noexcept {
    /* a handle of the caller's (not RTLD_DEFAULT, RTLD_NEXT: those depend on the
     * caller), and a driver launch function's name */
    if (!__atomic_load_n(&g_handout_on, __ATOMIC_ACQUIRE) || handle == RTLD_DEFAULT || handle == RTLD_NEXT || !name)
        return 0;
    int n = name_index(name);
    return n >= 0 && name[0] == 'c' && name[1] == 'u';
}

void *ga_dlsym_answer(void *handle, const char *name, unsigned i) noexcept {
    typedef void *(*dlsym_fn)(void *, const char *);
    void *p = ((dlsym_fn)__atomic_load_n(&ga_dlsym_real[i], __ATOMIC_ACQUIRE))(handle, name);
    int n = name_index(name);
    if (!p || n < 0 || (uintptr_t)p != __atomic_load_n(&g_drv_addr[n], __ATOMIC_ACQUIRE)) return p;
    int t = tramp_for((uintptr_t)p, (uint32_t)n);
    if (t < 0) return p;
    __atomic_fetch_or(&g_handed_mask, 1ull << t, __ATOMIC_RELAXED);
    __atomic_fetch_add(&g_handouts, 1, __ATOMIC_RELAXED);
    return (void *)tramp_addr((uint32_t)t);
}

/* Extent of an object: its segments, and which of them are writable or RELRO. */
struct extent {
    const dl_phdr_info *info;
    bool contains(uintptr_t a, size_t len) const {
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) &p = info->dlpi_phdr[i];
            uintptr_t lo = info->dlpi_addr + p.p_vaddr;
            if (p.p_type == PT_LOAD && a >= lo && a + len <= lo + p.p_memsz) return true;
        }
        return false;
    }
    bool in(uintptr_t a, uint32_t type, bool writable) const {
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) &p = info->dlpi_phdr[i];
            uintptr_t lo = info->dlpi_addr + p.p_vaddr;
            if (p.p_type == type && (!writable || (p.p_flags & PF_W)) && a >= lo && a + 8 <= lo + p.p_memsz)
                return true;
        }
        return false;
    }
    void bounds(uintptr_t *lo, uintptr_t *hi) const {
        *lo = UINTPTR_MAX, *hi = 0;
        for (int i = 0; i < info->dlpi_phnum; i++) {
            const ElfW(Phdr) &p = info->dlpi_phdr[i];
            if (p.p_type != PT_LOAD) continue;
            uintptr_t a = info->dlpi_addr + p.p_vaddr;
            if (a < *lo) *lo = a;
            if (a + p.p_memsz > *hi) *hi = a + p.p_memsz;
        }
    }
};

/* Point the object's slot at `val` (trampoline `tramp`, or HOOK_TRAMPS: a dlsym stub),
 * kept to be put back to `orig` at a detach; inside the object's writable or RELRO
 * segments only. */
static bool writable(const extent &x, uintptr_t addr) {
    return x.in(addr, PT_GNU_RELRO, false) || x.in(addr, PT_LOAD, true);
}
static bool put_slot(const extent &x, uintptr_t addr, uintptr_t orig, uintptr_t val, uint32_t tramp) {
    if (!writable(x, addr) || !write_slot(addr, val, x.in(addr, PT_GNU_RELRO, false))) return g_refused++, false;
    g_slots[g_n_slots++] = {addr, orig, x.info->dlpi_addr, val, tramp, false};
    return true;
}

/* Count one slot, whose calls go to `real`. */
static bool count_slot(const extent &x, uintptr_t addr, uint32_t name, uintptr_t real) {
    uintptr_t v = __atomic_load_n((uintptr_t *)addr, __ATOMIC_ACQUIRE);
    if (is_tramp(v)) return false;
    if (!writable(x, addr)) return g_refused++, false; /* before a trampoline is taken for it */
    int t = g_n_slots < HOOK_SLOTS ? tramp_for(real, name) : -1;
    if (t < 0) return g_refused++, false;
    return put_slot(x, addr, v, tramp_addr((uint32_t)t), (uint32_t)t);
}

/* A word that holds a trampoline a dlsym stub handed out: kept as a slot (counted
 * already), so that a detach puts the driver's pointer back. */
static void adopt_slot(const extent &x, uintptr_t addr, uintptr_t v) {
    uint32_t t = (uint32_t)((v - (uintptr_t)ga_hook_tramps) / TRAMP_BYTES);
    if (v != tramp_addr(t) || !(__atomic_load_n(&g_handed_mask, __ATOMIC_RELAXED) & (1ull << t)) ||
        g_n_slots >= HOOK_SLOTS)
        return;
    for (uint32_t i = 0; i < g_n_slots; i++)
        if (g_slots[i].addr == addr) return;
    g_slots[g_n_slots++] = {addr, (uintptr_t)ga_hook_real[t], x.info->dlpi_addr, v, t, true};
}

/* An import slot of dlsym: to the stub for the dlsym it holds (a new one while there
 * is room), so that a driver launch function asked for by a handle is counted. */
static bool hook_dlsym_slot(const extent &x, uintptr_t addr, uintptr_t v) {
    uintptr_t stubs = (uintptr_t)ga_dlsym_stubs;
    if (!HOOK_ON || (v >= stubs && v < stubs + DLSYM_STUBS * DLSYM_BYTES) || g_n_slots >= HOOK_SLOTS) return false;
    unsigned i = 0;
    while (i < DLSYM_STUBS && ga_dlsym_real[i] && (uintptr_t)ga_dlsym_real[i] != v) i++;
    if (i == DLSYM_STUBS) return g_refused++, false;
    if (!ga_dlsym_real[i]) __atomic_store_n(&ga_dlsym_real[i], (void *)v, __ATOMIC_RELEASE);
    return put_slot(x, addr, v, stubs + (uintptr_t)i * DLSYM_BYTES, HOOK_TRAMPS);
}

struct scan_ctx {
    unsigned added;
    uintptr_t self_base;     /* the shim's load address */
    uintptr_t defs[N_NAMES]; /* each name's global definition (0: none) */
    uintptr_t drv[N_NAMES];  /* a driver name's address in libcuda.so.1 (0: none, or a runtime name) */
    uintptr_t drv_lo, drv_hi; /* their range */
    uint32_t idx;            /* the walk's object number */
    uint64_t budget;         /* bytes the data pass may still search in this scan */
};

/* Searched writable data: bytes, and the time the scans took (the exit line). */
static uint64_t g_data_bytes, g_data_ns;
#define DATA_CHUNK 65536
#define DATA_MAX (256ull << 20) /* a writable segment larger than this is not searched */
/* The data pass: every object's writable data, DATA_BUDGET bytes a scan (a poll) so
 * that the poller stalls a few ms at most (a PyTorch process holds 300-350 MB of it,
 * about 90 ms to search); from the walk's object g_pass_obj, at its byte g_pass_pos. A
 * pass starts at the attach and at scans 32, 128, 512 and 2048 (3 s, 13 s, 51 s and
 * 3.4 min at the default poll), for the tables filled at a first call later. An object
 * with at most SMALL_DATA bytes of it (Triton's launchers, a program's own) is searched
 * whole when first seen and again 1, 2, 4, ... 64 scans later: its pointer is set at
 * its first launch, after its load. */
#define DATA_BUDGET (16ull << 20)
#define SMALL_DATA (1ull << 20)
static bool g_pass_on;
static uint64_t g_epoch; /* scans that counted more slots (ga_hook_epoch) */
static uint32_t g_pass_obj;
static uint64_t g_pass_pos;

/* len bytes of our own memory at a into buf, never faulting: process_vm_readv, or
 * where a seccomp filter refuses it (Docker's default profile does, without
 * CAP_SYS_PTRACE) a pread of /proc/self/mem. A page the program made unreadable ends
 * the read (-1 or short), not the program. */
static int g_mem_fd = -1; /* /proc/self/mem, once process_vm_readv was refused */
static ssize_t read_own(void *buf, uintptr_t a, size_t len) {
    if (g_mem_fd < 0) {
        struct iovec local = {buf, len}, remote = {(void *)a, len};
        ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (got >= 0 || (errno != EPERM && errno != ENOSYS)) return got;
        g_mem_fd = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
        if (g_mem_fd < 0) return -1;
    }
    return pread(g_mem_fd, buf, len, (off_t)a);
}

/* The object's RELRO segment, loaded: [*lo, *hi) (0, 0: none). */
static void relro_of(const dl_phdr_info *info, uintptr_t *lo, uintptr_t *hi) {
    *lo = *hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO)
            *lo = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr, *hi = *lo + info->dlpi_phdr[i].p_memsz;
}

/* The bytes of an object's writable segments that scan_data searches (less RELRO). */
static uint64_t data_size(const extent &x) {
    const dl_phdr_info *info = x.info;
    uintptr_t rlo, rhi;
    relro_of(info, &rlo, &rhi);
    uint64_t n = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &p = info->dlpi_phdr[i];
        if (p.p_type != PT_LOAD || !(p.p_flags & PF_W) || p.p_memsz > DATA_MAX) continue;
        uint64_t lo = info->dlpi_addr + p.p_vaddr, hi = lo + p.p_memsz;
        uint64_t cut = lo < rhi && hi > rlo ? (hi < rhi ? hi : rhi) - (lo > rlo ? lo : rlo) : 0;
        n += hi - lo - cut;
    }
    return n;
}

/* The 8-byte words of the object's writable segments, less RELRO, from byte `from` of
 * them (at most *budget bytes; UINT64_MAX: no limit), that hold a driver launch
 * function's address: counted as slots. Returns where it stopped, or UINT64_MAX at
 * the end. */
static uint64_t scan_data(const extent &x, scan_ctx *c, uint64_t from, uint64_t *budget) {
    const dl_phdr_info *info = x.info;
    uintptr_t rlo, rhi;
    relro_of(info, &rlo, &rhi);
    static uintptr_t buf[DATA_CHUNK / 8];
    uint64_t pos = 0; /* bytes of the object's searchable data up to the chunk's end */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) &p = info->dlpi_phdr[i];
        if (p.p_type != PT_LOAD || !(p.p_flags & PF_W) || p.p_memsz > DATA_MAX) continue;
        uintptr_t lo = (info->dlpi_addr + p.p_vaddr + 7) & ~(uintptr_t)7, hi = info->dlpi_addr + p.p_vaddr + p.p_memsz;
        if (lo < rhi && hi > rlo) lo = lo >= rlo ? (rhi + 7) & ~(uintptr_t)7 : lo; /* RELRO leads the segment */
        for (uintptr_t a = lo; a + 8 <= hi; a += DATA_CHUNK) {
            size_t len = hi - a < DATA_CHUNK ? (hi - a) & ~(size_t)7 : DATA_CHUNK;
            if (a < rhi && a + len > rlo) len = rlo > a ? (rlo - a) & ~(size_t)7 : 0;
            pos += len;
            if (pos - len < from || !len) continue;
            if (*budget != UINT64_MAX) {
                if (*budget < len) return pos - len; /* the next scan goes on here */
                *budget -= len;
            }
            ssize_t got = read_own(buf, a, len);
            if (got <= 0) continue; /* unreadable: the program's own page protections */
            g_data_bytes += (uint64_t)got;
            for (size_t w = 0; w < (size_t)got / 8; w++) {
                uintptr_t v = buf[w];
                if (is_tramp(v)) adopt_slot(x, a + w * 8, v);
                if (v < c->drv_lo || v > c->drv_hi) continue;
                for (uint32_t n = 0; n < N_NAMES; n++)
                    if (c->drv[n] == v) {
                        c->added += count_slot(x, a + w * 8, n, v);
                        break;
                    }
            }
        }
    }
    return UINT64_MAX;
}

static int scan_object(struct dl_phdr_info *info, size_t, void *data) {
    scan_ctx *c = (scan_ctx *)data;
    uintptr_t base = info->dlpi_addr;
    const char *path = info->dlpi_name ? info->dlpi_name : "";
    extent x{info};
    /* slots left unresolved before: retried while their object is loaded */
    for (uint32_t i = 0; i < g_n_pending;) {
        pending &p = g_pending[i];
        if (p.base != base) {
            i++;
            continue;
        }
        uintptr_t v = __atomic_load_n((uintptr_t *)p.addr, __ATOMIC_ACQUIRE);
        if (v >= p.lo && v < p.hi) v = c->defs[p.name]; /* still unresolved: the global definition, if any now */
        if (!v) {
            i++;
            continue;
        }
        c->added += count_slot(x, p.addr, p.name, v);
        g_pending[i] = g_pending[--g_n_pending];
    }
    uint32_t idx = c->idx++, age = 0, first = g_scans; /* age: scans since first seen (0: new) */
    bool known = false;
    for (uint32_t i = 0; i < g_n_objects && !known; i++)
        if (g_objects[i] == base) known = true, first = g_object_scan[i], age = g_scans - first;
    if (!known && g_n_objects >= HOOK_OBJECTS) return 0;
    if (!known) g_objects[g_n_objects] = base, g_object_scan[g_n_objects++] = g_scans;
    bool skip = skip_object(path, base, c->self_base);
    /* a small object's turn: when first seen (if loaded since the attach; the pass has
     * the others), and again 1, 2, 4, ... 64 scans later */
    bool small_turn = age ? age <= 64 && !(age & (age - 1)) : first > 1;
    uint64_t all = UINT64_MAX;
    if (g_pass_on && idx == g_pass_obj) { /* the data pass's turn */
        g_pass_pos = skip || !c->drv_hi ? UINT64_MAX : scan_data(x, c, g_pass_pos, &c->budget);
        if (g_pass_pos == UINT64_MAX) g_pass_obj++, g_pass_pos = 0;
    } else if (!skip && c->drv_hi && small_turn && data_size(x) <= SMALL_DATA) {
        scan_data(x, c, 0, &all);
    }
    if (skip || known) return 0;
    const ElfW(Dyn) *dyn = nullptr;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 0;
    uintptr_t symtab = 0, strtab = 0, jmprel = 0;
    size_t strsz = 0, pltrelsz = 0;
    long pltrel = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = d->d_un.d_ptr; break;
        case DT_STRTAB: strtab = d->d_un.d_ptr; break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        case DT_JMPREL: jmprel = d->d_un.d_ptr; break;
        case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
        }
    }
    /* the loader relocated these in place, except where the section is read-only */
    if (symtab && symtab < base) symtab += base;
    if (strtab && strtab < base) strtab += base;
    if (jmprel && jmprel < base) jmprel += base;
    if (!symtab || !strtab || !jmprel || pltrel != DT_RELA || !x.contains(jmprel, pltrelsz) ||
        !x.contains(strtab, strsz))
        return 0;
    const ElfW(Rela) *r = (const ElfW(Rela) *)jmprel;
    const ElfW(Sym) *syms = (const ElfW(Sym) *)symtab;
    uintptr_t lo, hi;
    x.bounds(&lo, &hi);
    for (size_t i = 0; i < pltrelsz / sizeof(ElfW(Rela)); i++) {
        if (ELF64_R_TYPE(r[i].r_info) != R_X86_64_JUMP_SLOT) continue;
        size_t si = ELF64_R_SYM(r[i].r_info);
        if (!x.contains((uintptr_t)&syms[si], sizeof(ElfW(Sym)))) continue;
        uint32_t off = syms[si].st_name;
        if (off >= strsz) continue;
        const char *sym = (const char *)strtab + off;
        int n = name_index(sym);
        bool dlsym_slot = n < 0 && off + 6 <= strsz && !strcmp(sym, "dlsym");
        if (n < 0 && !dlsym_slot) continue;
        uintptr_t addr = base + r[i].r_offset;
        if (!x.contains(addr, 8)) continue;
        uintptr_t v = __atomic_load_n((uintptr_t *)addr, __ATOMIC_ACQUIRE);
        if (dlsym_slot) { /* lazy binding, not resolved yet: to the dlsym the shim binds (glibc has one) */
            hook_dlsym_slot(x, addr, v >= lo && v < hi ? (uintptr_t)&dlsym : v);
            continue;
        }
        if (v >= lo && v < hi) {
            /* lazy binding, not resolved yet: to what the loader would bind it, the
             * global scope's definition, where there is one; else retried */
            if (c->defs[n]) {
                c->added += count_slot(x, addr, (uint32_t)n, c->defs[n]);
                continue;
            }
            if (g_n_pending < HOOK_PENDING) g_pending[g_n_pending++] = {addr, base, lo, hi, (uint32_t)n};
            else g_refused++;
            continue;
        }
        c->added += count_slot(x, addr, (uint32_t)n, v);
    }
    return 0;
}

static unsigned long long g_adds; /* objects loaded by the last scan (dl_iterate_phdr's count) */
static int loaded_count(struct dl_phdr_info *info, size_t size, void *data) {
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        *(unsigned long long *)data = info->dlpi_adds;
    return 1;
}

unsigned ga_hook_scan(void) noexcept {
    if (!HOOK_ON) return 0;
    unsigned long long adds = 0;
    dl_iterate_phdr(loaded_count, &adds);
    g_scans++;
    if (!g_pass_on && (g_scans == 1 || g_scans == 32 || g_scans == 128 || g_scans == 512 || g_scans == 2048))
        g_pass_on = true, g_pass_obj = 0, g_pass_pos = 0;
    bool young = false; /* an object first seen 64 scans ago or less */
    for (uint32_t i = 0; i < g_n_objects && !young; i++) young = g_scans - g_object_scan[i] <= 64;
    if (adds && adds == g_adds && !g_n_pending && !g_pass_on && !young) return 0; /* nothing new */
    g_adds = adds;
    scan_ctx c{};
    c.budget = DATA_BUDGET;
    Dl_info self;
    if (dladdr((void *)&ga_hook_scan, &self)) c.self_base = (uintptr_t)self.dli_fbase;
    for (unsigned i = 0; i < N_NAMES; i++) c.defs[i] = (uintptr_t)dlsym(RTLD_DEFAULT, k_names[i]);
    /* the driver's own launch functions, for the pointers programs keep */
    void *cu = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    c.drv_lo = UINTPTR_MAX;
    for (unsigned i = 0; cu && i < N_NAMES; i++) {
        if (k_names[i][0] != 'c' || k_names[i][1] != 'u') continue;
        c.drv[i] = (uintptr_t)dlsym(cu, k_names[i]);
        if (c.drv[i] && c.drv[i] < c.drv_lo) c.drv_lo = c.drv[i];
        if (c.drv[i] > c.drv_hi) c.drv_hi = c.drv[i];
    }
    if (cu) dlclose(cu);
    for (unsigned i = 0; i < N_NAMES; i++) __atomic_store_n(&g_drv_addr[i], c.drv[i], __ATOMIC_RELEASE);
    __atomic_store_n(&g_handout_on, true, __ATOMIC_RELEASE);
    uint64_t t0 = now_ns();
    dl_iterate_phdr(scan_object, &c);
    g_data_ns += now_ns() - t0;
    if (g_pass_obj >= c.idx) g_pass_on = false; /* every object searched */
    if (c.added) g_epoch++;
    return c.added;
}

struct restore_ctx {
    uint32_t done;
};

static int restore_object(struct dl_phdr_info *info, size_t, void *data) {
    restore_ctx *c = (restore_ctx *)data;
    extent x{info};
    for (uint32_t i = 0; i < g_n_slots; i++) {
        slot &s = g_slots[i];
        if (s.base != info->dlpi_addr || !s.addr || !x.contains(s.addr, 8)) continue;
        if (__atomic_load_n((uintptr_t *)s.addr, __ATOMIC_ACQUIRE) == s.val &&
            write_slot(s.addr, s.orig, x.in(s.addr, PT_GNU_RELRO, false)))
            c->done++;
        s.addr = 0;
    }
    return 0;
}

unsigned ga_hook_restore(void) noexcept {
    restore_ctx c{0};
    __atomic_store_n(&g_handout_on, false, __ATOMIC_RELEASE);
    if (HOOK_ON && g_n_slots) dl_iterate_phdr(restore_object, &c);
    /* slots of objects unloaded since are gone with them */
    g_n_slots = 0, g_n_objects = 0, g_n_pending = 0, g_refused = 0, g_adds = 0, g_scans = 0;
    g_pass_on = false;
    return c.done;
}

uint64_t ga_hook_epoch(void) noexcept { return g_epoch; }

uint64_t ga_hook_hits(void) noexcept {
    uint64_t n = 0;
    for (uint32_t i = 0; i < HOOK_TRAMPS; i++) n += __atomic_load_n(&ga_hook_hit[i * 8], __ATOMIC_RELAXED);
    return n;
}

uint32_t ga_hook_hits_each(uint64_t *out, uint32_t max) noexcept {
    uint32_t n = g_n_tramps < max ? g_n_tramps : max;
    for (uint32_t i = 0; i < n; i++) out[i] = __atomic_load_n(&ga_hook_hit[i * 8], __ATOMIC_RELAXED);
    return n;
}

uint64_t ga_hook_targets_since(uint32_t slots0) noexcept {
    uint64_t mask = 0;
    for (uint32_t i = slots0; i < g_n_slots; i++)
        if (g_slots[i].tramp < HOOK_TRAMPS && !g_slots[i].adopted) mask |= 1ull << g_slots[i].tramp;
    return mask;
}

ga_hook_stats ga_hook_stats_now(void) noexcept {
    return {g_n_objects, g_n_slots, g_n_tramps, g_refused + g_n_pending, g_data_bytes, g_data_ns,
            __atomic_load_n(&g_handouts, __ATOMIC_RELAXED)};
}

void ga_hook_describe(char *buf, unsigned size) noexcept {
    unsigned len = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < g_n_tramps && len + 1 < size; i++) {
        unsigned long long hits = __atomic_load_n(&ga_hook_hit[i * 8], __ATOMIC_RELAXED);
        if (!hits) continue; /* the functions called: a log line holds 512 bytes */
        Dl_info d;
        const char *lib = dladdr(ga_hook_real[i], &d) && d.dli_fname ? d.dli_fname : "?";
        const char *b = strrchr(lib, '/');
        int w = snprintf(buf + len, size - len, "%s%s in %s: %llu", len ? "; " : "", k_names[g_tramp_name[i]],
                         b ? b + 1 : lib, hits);
        if (w < 0) break;
        len += (unsigned)w;
    }
}
