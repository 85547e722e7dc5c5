/* busy.cpp: the busy clock, the CPU time of the threads that launch.
 *
 * Why: with CUPTI torn down between windows the launches there are extrapolated
 * from the count phase's rate (window.cpp). A job that idles for part of a period
 * (a server between requests, a process that starts or stops, a loop that waits on
 * input) launched nothing in that part, yet a rate per second of wall time counts it
 * in full: a count phase in the busy part read the idle part as busy, one in the
 * idle part read the busy part as idle. On the mock (tests/test_intervals.py) a loop
 * busy and idle 0.35 s in turn read its periods from -100 % to +237 %. A launching
 * thread that idles takes no CPU time, so the rest of a period goes at the count
 * phase's launches per CPU second of the launching threads, times their CPU time
 * there (for launch-bound threads: window.cpp keeps the wall clock for one that
 * mostly waits). For a thread that is always busy the two clocks agree. What it does not
 * follow: a CPU whose speed changes under a busy thread (the H200 VMs' rate
 * regimes, docs/benchmarks.md), and CPU work of a launching thread that launches
 * nothing (what the count phase saw of it stands, as with wall time).
 *
 * Which threads: those the launch callbacks saw launch in a window (ga_busy_note,
 * once a thread a period; a compare a windowed launch otherwise, and nothing
 * between windows: tests/test_hot_path.py), and from the attach the main thread
 * until another is seen (a job idle at the attach has shown none yet when it starts), kept until 64 periods without a launch, at most BUSY_THREADS;
 * with more, the clock is not used. The set changes only at period edges, so that
 * within a period the clock sums the same threads. Each thread's CPU time is read
 * by the poller through its CPU-time clock (the kernel refuses a thread of another
 * process, and says so for one that has exited). */
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ga_internal.h"

#define BUSY_THREADS 8
#define BUSY_STALE_PERIODS 64u

/* Noted by the launching threads this period (0: free). */
static std::atomic<pid_t> g_noted[BUSY_THREADS];
static std::atomic<int> g_noted_over;
std::atomic<uint32_t> ga_busy_gen{1}; /* each thread notes itself once a round (a period) */

/* Poller only (under g_mu): the threads summed, and the clock. */
struct member {
    pid_t tid;
    uint64_t last_ns;     /* its CPU time at the last reading */
    uint32_t seen_period; /* the last period a callback saw it launch */
    bool seeded;          /* the main thread, taken at the attach before any was seen */
};
static member g_set[BUSY_THREADS];
static unsigned g_set_n;
static uint64_t g_clock = 1; /* ns; starts at 1: ga_span takes 0 as "off" */
static uint32_t g_period;
static bool g_over;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static __thread pid_t t_tid;

void ga_busy_note(uint32_t *round) noexcept {
    *round = ga_busy_gen.load(std::memory_order_relaxed);
    if (!t_tid) t_tid = (pid_t)syscall(SYS_gettid);
    for (unsigned i = 0; i < BUSY_THREADS; i++) {
        pid_t cur = g_noted[i].load(std::memory_order_relaxed);
        if (cur == t_tid) return;
        if (!cur && g_noted[i].compare_exchange_strong(cur, t_tid, std::memory_order_relaxed)) return;
    }
    g_noted_over.store(1, std::memory_order_relaxed);
}

/* CPU ns of thread tid of this process; false once it has exited. */
static bool thread_cpu_ns(pid_t tid, uint64_t *ns) {
    /* the kernel's per-thread CPU clock id: CPUCLOCK_PERTHREAD | CPUCLOCK_SCHED */
    clockid_t id = (clockid_t)((~(unsigned)tid) << 3) | 6;
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return false;
    *ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    return true;
}

static uint64_t advance(void) {
    for (unsigned i = 0; i < g_set_n; i++) {
        uint64_t ns;
        if (!g_set[i].tid || !thread_cpu_ns(g_set[i].tid, &ns)) {
            g_set[i].tid = 0; /* gone: it adds nothing more, and leaves at the next edge */
            continue;
        }
        if (ns > g_set[i].last_ns) g_clock += ns - g_set[i].last_ns;
        g_set[i].last_ns = ns;
    }
    return g_clock;
}

uint64_t ga_busy_now(void) noexcept {
    if (pthread_mutex_trylock(&g_mu) != 0) return g_clock; /* another reader: as of now, about */
    uint64_t c = advance();
    pthread_mutex_unlock(&g_mu);
    return c;
}

bool ga_busy_usable(void) noexcept { return g_set_n > 0 && !g_over; }

void ga_busy_period_edge(void) noexcept {
    pthread_mutex_lock(&g_mu);
    advance(); /* the ended period's time, summed over its own threads */
    g_period++;
    bool seen_any = false; /* a thread other than a seeded one noted itself */
    for (unsigned i = 0; i < BUSY_THREADS; i++) {
        pid_t tid = g_noted[i].exchange(0, std::memory_order_relaxed);
        if (!tid) continue;
        unsigned j = 0;
        while (j < g_set_n && g_set[j].tid != tid) j++;
        if (j < g_set_n) {
            g_set[j].seen_period = g_period;
            g_set[j].seeded = false;
            continue;
        }
        uint64_t ns;
        if (!thread_cpu_ns(tid, &ns)) continue;
        if (g_set_n == BUSY_THREADS) { /* the stalest one leaves, if any is stale */
            unsigned k = 0;
            for (unsigned m = 1; m < g_set_n; m++)
                if (g_set[m].seen_period < g_set[k].seen_period) k = m;
            if (g_set[k].tid && g_period - g_set[k].seen_period < BUSY_STALE_PERIODS) {
                g_over = true;
                continue;
            }
            g_set[k] = g_set[--g_set_n];
        }
        g_set[g_set_n++] = {tid, ns, g_period, false}; /* counts from here */
        seen_any = true;
    }
    if (g_noted_over.exchange(0, std::memory_order_relaxed)) g_over = true;
    unsigned keep = 0;
    for (unsigned i = 0; i < g_set_n; i++) {
        if (g_set[i].seeded && seen_any) continue; /* others launch, and it has not */
        if (g_set[i].tid && g_period - g_set[i].seen_period < BUSY_STALE_PERIODS) g_set[keep++] = g_set[i];
    }
    g_set_n = keep;
    ga_busy_gen.fetch_add(1, std::memory_order_relaxed); /* each thread notes itself again */
    pthread_mutex_unlock(&g_mu);
}

void ga_busy_reset(void) noexcept {
    pthread_mutex_lock(&g_mu);
    for (unsigned i = 0; i < BUSY_THREADS; i++) g_noted[i].store(0, std::memory_order_relaxed);
    g_noted_over.store(0, std::memory_order_relaxed);
    g_set_n = 0, g_over = false, g_period = 0;
    /* Until a window sees who launches, the main thread, which most jobs launch from:
     * a job idle since before the attach (a server, a process that sleeps after
     * loading) has shown no launching thread yet when it starts to launch. */
    uint64_t ns;
    if (thread_cpu_ns(getpid(), &ns)) g_set[g_set_n++] = {getpid(), ns, 0, true};
    ga_busy_gen.fetch_add(1, std::memory_order_relaxed);
    pthread_mutex_unlock(&g_mu);
}
