/* Test firer: replays a binary script written by tests/test_bpf_session.py
 * through the contract's probes (in libgpu_agent_probe_firer.so).
 *
 * Script: a sequence of ops, little endian, each starting with a u64 opcode;
 * every field group is padded to 8 bytes so records stay 8-aligned:
 *   1 CORR  u32 corr, u32 cbid, u64 stack_id, u32 nframes, u32 weight, u32 alt,
 *           u32 pad, then nframes u64 frames
 *   2 BATCH u32 count, u32 record_size, u32 dropped, u32 nbytes, then nbytes
 *   3 NAME  u64 kernel_id, u32 total_len, u32 offset, u32 chunk_len, u32 pad,
 *           then chunk_len bytes
 *   4 ATTACH
 *   5 WAIT  prints "wait <semaphore>" and blocks until a line arrives on stdin
 *   6 NODE  u64 node_id, u64 stack_id, u32 nframes, u32 pad, then nframes u64 frames
 *   7 CLONE u64 original_node_id, u64 node_id
 *   8 DESTROY u64 node_id
 * Prints "pid <pid> sem <semaphore>" first and "done <semaphore>" last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "firer.h"

static unsigned char *buf;
static size_t len, pos;

static void *take(size_t n)
{
    if (pos + n > len) { fprintf(stderr, "firer: truncated script\n"); exit(2); }
    void *p = buf + pos;
    pos += (n + 7) & ~(size_t)7;
    return p;
}

static void wait_line(void)
{
    char line[64];
    if (!fgets(line, sizeof line, stdin)) exit(3);
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: %s SCRIPT\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END); len = ftell(f); fseek(f, 0, SEEK_SET);
    buf = aligned_alloc(64, len + 64);
    if (fread(buf, 1, len, f) != len) { perror("read"); return 2; }
    fclose(f);
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d sem %u\n", getpid(), firer_semaphore());
    while (pos < len) {
        ga_u64 op; memcpy(&op, take(8), 8);
        if (op == 1) {
            struct { ga_u32 corr, cbid; ga_u64 stack_id; ga_u32 nframes, weight, alt, pad;
                     ga_u64 launch_ns; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            const ga_u64 *frames = take(8ul * h.nframes);
            if (h.alt)
                firer_correlation_alt(h.corr, h.cbid, h.stack_id, frames, h.nframes, h.weight);
            else
                firer_cuda_correlation(h.corr, h.cbid, h.stack_id, frames, h.nframes, h.weight,
                                       h.launch_ns);
        } else if (op == 2) {
            struct { ga_u32 count, size, dropped, nbytes; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_kernel_batch(take(h.nbytes), h.count, h.size, h.dropped);
        } else if (op == 3) {
            struct { ga_u64 kid; ga_u32 total, off, clen, pad; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_kernel_name(h.kid, h.total, h.off, take(h.clen), h.clen);
        } else if (op == 4) {
            firer_attach();
        } else if (op == 6) {
            struct { ga_u64 node, stack_id; ga_u32 nframes, pad; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_graph_node_stack(h.node, h.stack_id, take(8ul * h.nframes), h.nframes);
        } else if (op == 7) {
            struct { ga_u64 orig, node; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_graph_node_cloned(h.orig, h.node);
        } else if (op == 8) {
            ga_u64 node;
            memcpy(&node, take(8), 8);
            firer_graph_node_destroyed(node);
        } else if (op == 9) {
            struct { ga_u32 count, dropped, nbytes, pad; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_pc_sample_batch(take(h.nbytes), h.count, h.dropped);
        } else if (op == 10) {
            struct { ga_u32 index, len; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_pc_stall_reason(h.index, take(h.len));
        } else if (op == 11) {
            struct { ga_u64 crc, size; } h;
            memcpy(&h, take(sizeof h), sizeof h);
            firer_cubin_loaded(h.crc, take(h.size), h.size);
        } else if (op == 5) {
            printf("wait %u\n", firer_semaphore());
            wait_line();
        } else {
            fprintf(stderr, "firer: bad op %llu at %zu\n", (unsigned long long)op, pos - 8);
            return 2;
        }
    }
    printf("done %u\n", firer_semaphore());
    return 0;
}
