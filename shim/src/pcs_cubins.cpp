/* pcs_cubins.cpp: the loaded modules' cubins, kept for PC sampling (the agent reads
 * them from /proc/PID/mem for their line tables): each announced once by CRC
 * (cubin_loaded probe), again when an agent asks, bounded in number and in
 * GPU_AGENT_PC_CUBIN_MB; one not kept is counted (its samples lack lines). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ga_probes.h"
#include "ga_internal.h"

#define PCS_MAX_CUBINS 4096

struct cubin { uint64_t crc; void *copy; uint64_t size; };
static pthread_mutex_t cubin_mu = PTHREAD_MUTEX_INITIALIZER;
static cubin cubins[PCS_MAX_CUBINS];
static size_t n_cubins, cubin_bytes;
static std::atomic<uint64_t> st_cubins, st_cubins_dropped;

void ga_pcs_keep_cubin(uint64_t crc, const void *image, size_t size) noexcept {
    pthread_mutex_lock(&cubin_mu);
    bool known = false;
    for (size_t i = 0; i < n_cubins && !known; i++) known = cubins[i].crc == crc;
    uint64_t cap = (uint64_t)ga_cfg.pc_cubin_mb << 20;
    void *copy = nullptr;
    if (!known && n_cubins < PCS_MAX_CUBINS && cubin_bytes + size <= cap && (copy = malloc(size))) {
        memcpy(copy, image, size);
        cubins[n_cubins++] = {crc, copy, size};
        cubin_bytes += size;
        st_cubins.fetch_add(1, std::memory_order_relaxed);
        ga_fire_cubin_loaded(crc, copy, size);
    } else if (!known) {
        st_cubins_dropped.fetch_add(1, std::memory_order_relaxed); /* its samples lack lines */
    }
    pthread_mutex_unlock(&cubin_mu);
}

void ga_pcs_replay_cubins(void) noexcept {
    pthread_mutex_lock(&cubin_mu);
    for (size_t i = 0; i < n_cubins; i++) ga_fire_cubin_loaded(cubins[i].crc, cubins[i].copy, cubins[i].size);
    pthread_mutex_unlock(&cubin_mu);
}

uint64_t ga_pcs_cubin_stat(int which) noexcept {
    return which == GA_SC_CUBINS ? st_cubins.load() : st_cubins_dropped.load();
}
