/* names.cpp: kernel name interning -> kernel_name probes.
 *
 * kernel_id = FNV-1a 64 of the mangled name, of its first GA_MAX_NAME_LEN bytes
 * if it is longer (never 0): the agent can check every name it is sent against
 * its id, cut ones too. A lock-free cache maps CUPTI's name pointer to the id;
 * on a miss the id is looked up under a mutex in the table of known names, and a
 * new name is stored (bounded, GA_NAME_ARENA_MAX bytes) and announced with
 * kernel_name probes. All known names are replayed at each attach. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ga_probes.h"
#include "ga_internal.h"

std::atomic<uint64_t> ga_stat_names;
std::atomic<uint64_t> ga_stat_name_chunks;
std::atomic<uint64_t> ga_stat_truncated_names;

#define NC_CAP (1u << 14)           /* name-pointer cache */
#define NC_PROBE 16
#define ID_CAP (1u << 18)           /* known kernel ids */
#define GA_NAME_ARENA_MAX (64u << 20)
#define ARENA_BLOCK (1u << 20)

static std::atomic<uintptr_t> nc_key[NC_CAP];
static std::atomic<uint64_t> nc_val[NC_CAP];

struct name_entry {
    uint64_t id;
    const char *str;
    uint32_t len; /* stored (possibly cut) length */
};
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static name_entry *id_tab;          /* calloc'd at first name: bounded */
static uint32_t id_count;
static char *arena_cur;
static size_t arena_left, arena_total;

static uint64_t fnv1a64(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ? h : 1;
}

/* Fires kernel_name for one name, in GA_NAME_CHUNK pieces. */
static void fire_name(uint64_t id, const char *s, uint32_t total) {
    uint32_t off = 0;
    do {
        uint32_t len = total - off;
        if (len > GA_NAME_CHUNK) len = GA_NAME_CHUNK;
        const char *chunk = s + off;
        ga_fire_kernel_name(id, total, off, chunk, len);
        ga_stat_name_chunks.fetch_add(1, std::memory_order_relaxed);
        off += len;
    } while (off < total);
}

static char *arena_copy(const char *s, uint32_t len) {
    if (len + 1 > arena_left) {
        size_t bs = len + 1 > ARENA_BLOCK ? len + 1 : ARENA_BLOCK;
        if (arena_total + bs > GA_NAME_ARENA_MAX) return nullptr;
        char *b = (char *)malloc(bs);
        if (!b) return nullptr;
        arena_total += bs;
        arena_cur = b;
        arena_left = bs;
    }
    char *d = arena_cur;
    memcpy(d, s, len);
    d[len] = 0;
    arena_cur += len + 1;
    arena_left -= len + 1;
    return d;
}

/* names_mu held. The entry of id, or NULL; then *free_slot (if asked) is where
 * it would go (NULL when the probe sequence is full or there is no table). */
static name_entry *id_tab_find(uint64_t id, name_entry **free_slot) {
    if (free_slot) *free_slot = nullptr;
    if (!id_tab) return nullptr;
    uint32_t i = (uint32_t)ga_mix64(id) & (ID_CAP - 1);
    for (unsigned p = 0; p < 256; p++, i = (i + 1) & (ID_CAP - 1)) {
        if (id_tab[i].id == id) return &id_tab[i];
        if (id_tab[i].id == 0) {
            if (free_slot) *free_slot = &id_tab[i];
            return nullptr;
        }
    }
    return nullptr;
}

static uint64_t intern_slow(const char *name) {
    size_t full = strlen(name);
    uint32_t len = full > GA_MAX_NAME_LEN ? GA_MAX_NAME_LEN : (uint32_t)full;
    /* The id of what is sent: two names that differ only past the cut are one
     * kernel (they would print the same), and no name goes unchecked. */
    uint64_t id = fnv1a64(name, len);

    pthread_mutex_lock(&names_mu);
    if (!id_tab) id_tab = (name_entry *)calloc(ID_CAP, sizeof(name_entry));
    name_entry *slot = nullptr;
    bool known = id_tab_find(id, &slot) != nullptr;
    if (!known) {
        if (full > GA_MAX_NAME_LEN) ga_stat_truncated_names.fetch_add(1, std::memory_order_relaxed);
        if (slot && id_count < ID_CAP / 4 * 3) {
            const char *copy = arena_copy(name, len);
            if (copy) {
                slot->str = copy;
                slot->len = len;
                slot->id = id;
                id_count++;
            }
        }
        ga_stat_names.fetch_add(1, std::memory_order_relaxed);
        /* Under the lock: a name is announced before any other thread can
         * skip it as known. Probes are not CUDA calls. */
        fire_name(id, name, len);
    }
    pthread_mutex_unlock(&names_mu);
    return id;
}

uint64_t ga_kernel_id_for(const char *name) noexcept {
    if (!name) name = "<unknown>";
    uintptr_t key = (uintptr_t)name;
    uint32_t h = (uint32_t)ga_mix64(key) & (NC_CAP - 1);
    uint32_t i = h;
    for (unsigned p = 0; p < NC_PROBE; p++, i = (i + 1) & (NC_CAP - 1)) {
        uintptr_t k = nc_key[i].load(std::memory_order_acquire);
        if (k == key) {
            uint64_t v = nc_val[i].load(std::memory_order_acquire);
            if (v) return v;
            break;
        }
        if (k == 0) break;
    }
    uint64_t id = intern_slow(name);
    i = h;
    for (unsigned p = 0; p < NC_PROBE; p++, i = (i + 1) & (NC_CAP - 1)) {
        uintptr_t k = nc_key[i].load(std::memory_order_acquire);
        if (k == 0 && nc_key[i].compare_exchange_strong(k, key, std::memory_order_acq_rel)) {
            nc_val[i].store(id, std::memory_order_release);
            break;
        }
        if (k == key) break;
    }
    return id;
}

const char *ga_name_of(uint64_t id) noexcept {
    pthread_mutex_lock(&names_mu);
    const name_entry *e = id_tab_find(id, nullptr);
    const char *out = e ? e->str : nullptr;
    pthread_mutex_unlock(&names_mu);
    return out;
}

void ga_replay_names(void) noexcept {
    pthread_mutex_lock(&names_mu);
    if (id_tab)
        for (uint32_t i = 0; i < ID_CAP; i++)
            if (id_tab[i].id) fire_name(id_tab[i].id, id_tab[i].str, id_tab[i].len);
    pthread_mutex_unlock(&names_mu);
}

void ga_names_atfork_child(void) noexcept { pthread_mutex_init(&names_mu, nullptr); }
