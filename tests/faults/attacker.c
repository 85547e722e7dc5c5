/* attacker: fires the REAL shim's USDT probe sites with arguments of its
 * choosing, as any local user who can read the shim file can (issue 16).
 *
 * The agent attaches its uprobes to the shim file by path, so a breakpoint
 * sits on each probe's nop in every process that maps the shim, this one too.
 * The attacker dlopens the shim, loads every register (and the stack slots the
 * probe's argument specs name) with chosen values, and jumps onto the nop. The
 * agent's BPF program runs and reads those values as the probe's arguments.
 * To get control back, the 5 bytes after the nop are patched, in this
 * process's private copy of the page, with a jump to a return stub.
 *
 * Usage: attacker SHIM SCRIPT. The script (little endian, written by
 * tests/faults/attacker.py) is:
 *   u64 magic "GAATTACK", u64 arena_size, arena_size bytes (8-padded), which are
 *   copied to ARENA (a fixed address, so the script can hold pointers into it);
 *   then ops, each starting with a u64 kind:
 *     1 FIRE  u64 site (link-time vaddr of the nop), u64 nop_len, u64 repeat,
 *             u64 regs[16] (rax rbx rcx rdx rsi rdi rbp rsp r8..r15; rsp and
 *             r11 are ignored), u64 nmem, nmem x {u64 reg, i64 off, u64 value}:
 *             each memory slot is 8 bytes at off from a scratch area that the
 *             register then points at (rsp always points at its own area)
 *     2 SLEEP u64 milliseconds
 *     3 WAIT  prints "wait" and blocks until a line arrives on stdin
 * Prints "pid <pid>" first and "done <fires>" last. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define ARENA ((uint8_t *)0x200000000ull)
#define AREA 8192 /* per-register scratch; the register points at its middle */
#define MAX_SITES 64

uint64_t attacker_saved_rsp __attribute__((used));
void attacker_fire(const uint64_t *regs, uint64_t site);
void attacker_back(void);

/* Load all registers but rsp's return path and r11 (the jump target), jump to
 * the site; the patched jump after the nop lands on attacker_back. */
__asm__(
    ".text\n"
    ".globl attacker_fire\n"
    ".type attacker_fire,@function\n"
    "attacker_fire:\n"
    "  push %rbx\n  push %rbp\n  push %r12\n  push %r13\n  push %r14\n  push %r15\n"
    "  mov %rsp, attacker_saved_rsp(%rip)\n"
    "  mov %rsi, %r11\n"
    "  mov %rdi, %rax\n"
    "  mov 8(%rax), %rbx\n  mov 16(%rax), %rcx\n  mov 24(%rax), %rdx\n"
    "  mov 32(%rax), %rsi\n  mov 40(%rax), %rdi\n  mov 48(%rax), %rbp\n"
    "  mov 56(%rax), %rsp\n  mov 64(%rax), %r8\n  mov 72(%rax), %r9\n"
    "  mov 80(%rax), %r10\n  mov 96(%rax), %r12\n  mov 104(%rax), %r13\n"
    "  mov 112(%rax), %r14\n  mov 120(%rax), %r15\n  mov 0(%rax), %rax\n"
    "  jmp *%r11\n"
    ".globl attacker_back\n"
    ".type attacker_back,@function\n"
    "attacker_back:\n"
    "  mov attacker_saved_rsp(%rip), %rsp\n"
    "  pop %r15\n  pop %r14\n  pop %r13\n  pop %r12\n  pop %rbp\n  pop %rbx\n"
    "  ret\n");

static uintptr_t shim_base;
static uint8_t *stub_page; /* within +-2 GiB of the shim: a rel32 jump reaches it */
static uint64_t patched[MAX_SITES];
static unsigned npatched;
static uint8_t *areas;

static int find_base(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, (const char *)data)) {
        shim_base = info->dlpi_addr;
        return 1;
    }
    return 0;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void near_stub(void)
{
    /* movabs $attacker_back, %r11; jmp *%r11 */
    for (uintptr_t d = 16u << 20; d < (1u << 30); d += 16u << 20) {
        void *want = (void *)((shim_base & ~(uintptr_t)0xfff) - d);
        void *p = mmap(want, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            continue;
        uint8_t *s = p;
        s[0] = 0x49; s[1] = 0xbb;
        uint64_t back = (uint64_t)(uintptr_t)&attacker_back;
        memcpy(s + 2, &back, 8);
        s[10] = 0x41; s[11] = 0xff; s[12] = 0xe3;
        stub_page = s;
        return;
    }
    fprintf(stderr, "attacker: no page near the shim\n");
    exit(2);
}

/* After the nop at site, a jmp rel32 to the stub, in our private copy. */
static void patch_after(uint64_t site, uint64_t nop_len)
{
    for (unsigned i = 0; i < npatched; i++)
        if (patched[i] == site)
            return;
    if (npatched == MAX_SITES) {
        fprintf(stderr, "attacker: too many sites\n");
        exit(2);
    }
    uint8_t *at = (uint8_t *)(shim_base + site + nop_len);
    uintptr_t page = (uintptr_t)at & ~(uintptr_t)0xfff;
    size_t span = ((uintptr_t)at + 5 - page + 0xfff) & ~(size_t)0xfff;
    if (mprotect((void *)page, span, PROT_READ | PROT_WRITE | PROT_EXEC))
        die("mprotect");
    int64_t rel = (int64_t)((intptr_t)stub_page - (intptr_t)(at + 5));
    at[0] = 0xe9;
    int32_t r32 = (int32_t)rel;
    memcpy(at + 1, &r32, 4);
    if (mprotect((void *)page, span, PROT_READ | PROT_EXEC))
        die("mprotect");
    patched[npatched++] = site;
}

static uint8_t *buf;
static size_t len, pos;

static uint64_t u64(void)
{
    if (pos + 8 > len) {
        fprintf(stderr, "attacker: truncated script\n");
        exit(2);
    }
    uint64_t v;
    memcpy(&v, buf + pos, 8);
    pos += 8;
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SHIM SCRIPT\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        die(argv[2]);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(len + 8);
    if (!buf || fread(buf, 1, len, f) != len)
        die("read");
    fclose(f);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (!dlopen(argv[1], RTLD_NOW))
        fprintf(stderr, "attacker: %s\n", dlerror()), exit(2);
    const char *slash = strrchr(argv[1], '/');
    dl_iterate_phdr(find_base, (void *)(slash ? slash + 1 : argv[1]));
    if (!shim_base)
        fprintf(stderr, "attacker: shim not mapped\n"), exit(2);
    near_stub();

    if (u64() != 0x4b43415454414147ull) /* "GAATTACK" */
        fprintf(stderr, "attacker: bad script\n"), exit(2);
    uint64_t arena_size = u64();
    if (arena_size) {
        size_t m = (arena_size + 0xfff) & ~(size_t)0xfff;
        if (mmap(ARENA, m, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0) != ARENA)
            die("mmap arena");
        if (pos + arena_size > len)
            fprintf(stderr, "attacker: truncated arena\n"), exit(2);
        memcpy(ARENA, buf + pos, arena_size);
        pos += (arena_size + 7) & ~(size_t)7;
    }
    areas = mmap(NULL, 16 * AREA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (areas == MAP_FAILED)
        die("mmap areas");

    printf("pid %d\n", (int)getpid());
    uint64_t fires = 0;
    while (pos < len) {
        uint64_t kind = u64();
        if (kind == 1) {
            uint64_t site = u64(), nop_len = u64(), repeat = u64();
            uint64_t regs[16];
            for (int i = 0; i < 16; i++)
                regs[i] = u64();
            uint64_t nmem = u64();
            for (uint64_t i = 0; i < nmem; i++) {
                uint64_t reg = u64() & 15;
                int64_t off = (int64_t)u64();
                uint64_t value = u64();
                uint8_t *mid = areas + reg * AREA + AREA / 2;
                if (off < -(AREA / 2) || off > AREA / 2 - 8)
                    fprintf(stderr, "attacker: slot out of range\n"), exit(2);
                memcpy(mid + off, &value, 8);
                regs[reg] = (uint64_t)(uintptr_t)mid;
            }
            regs[7] = (uint64_t)(uintptr_t)(areas + 7 * AREA + AREA / 2);
            patch_after(site, nop_len);
            for (uint64_t r = 0; r < repeat; r++)
                attacker_fire(regs, shim_base + site);
            fires += repeat;
        } else if (kind == 2) {
            uint64_t ms = u64();
            struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        } else if (kind == 3) {
            char line[64];
            printf("wait\n");
            if (!fgets(line, sizeof line, stdin))
                return 3;
        } else {
            fprintf(stderr, "attacker: bad op %llu\n", (unsigned long long)kind);
            return 2;
        }
    }
    printf("done %llu\n", (unsigned long long)fires);
    return 0;
}
