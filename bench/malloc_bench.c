/*
 * malloc_bench — a malloc-heavy two-thread program for profiler overhead: each thread makes
 * N small allocations (16..512 bytes) from call chains 4..16 frames deep, keeping a window of
 * live blocks so frees interleave with allocations as in real programs.
 *   malloc_bench [allocations per thread (default 2000000)] [threads (default 2)]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 1024

/* A thread's state, on cache lines of its own: the loop writes rng and checksum on every
 * allocation, and two workers sharing a line would measure the line's ping-pong between cores
 * (which slowed the plain run by ~40%) instead of malloc. */
typedef struct worker {
    _Alignas(64) long n;
    uint64_t rng;
    void *window[WINDOW];
    uint64_t checksum;
} worker;

static uint64_t next_random(worker *w)
{
    w->rng ^= w->rng << 13;
    w->rng ^= w->rng >> 7;
    w->rng ^= w->rng << 17;
    return w->rng;
}

/* Recurses `depth` more frames, then allocates; noinline so each level is a real frame. */
__attribute__((noinline)) static void *alloc_at_depth(worker *w, int depth, size_t size)
{
    if (depth > 0) {
        void *p = alloc_at_depth(w, depth - 1, size);
        __asm__ volatile("" ::: "memory"); /* no tail call */
        return p;
    }
    char *p = malloc(size);
    if (p)
        p[0] = (char)size;
    return p;
}

static void *run(void *arg)
{
    worker *w = arg;
    for (long i = 0; i < w->n; i++) {
        uint64_t r = next_random(w);
        size_t size = 16 + (r & 0x1F0);
        int depth = 4 + (int)((r >> 16) % 13) - 2; /* 4..16 frames with run() and main() */
        size_t slot = (r >> 32) % WINDOW;
        free(w->window[slot]);
        w->window[slot] = alloc_at_depth(w, depth, size);
        w->checksum += (uintptr_t)w->window[slot] & 0xFF;
    }
    for (size_t i = 0; i < WINDOW; i++)
        free(w->window[i]);
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    if (n <= 0 || threads <= 0 || threads > 64) {
        fprintf(stderr, "usage: malloc_bench [allocations per thread] [threads <= 64]\n");
        return 2;
    }
    worker *w = aligned_alloc(_Alignof(worker), (size_t)threads * sizeof *w);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!w || !th)
        return 1;
    for (int t = 0; t < threads; t++) {
        w[t] = (worker){.n = n, .rng = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1)};
        pthread_create(&th[t], NULL, run, &w[t]);
    }
    uint64_t sum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        sum += w[t].checksum;
    }
    printf("malloc_bench: %d threads x %ld allocations (checksum %llu)\n", threads, n,
           (unsigned long long)(sum & 0xFFFF));
    free(w);
    free(th);
    return 0;
}
