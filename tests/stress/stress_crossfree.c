/*
 * Stress program for the trace reader's time order (run under `gradprof run` by replay_exact.sh):
 * THREADS threads (default 64) each make ALLOCS allocations (default 20000), mostly of a few small
 * size classes so that the allocator hands the same addresses out again at once, and send most of
 * them to a random other thread, which frees them. Every block is freed before the program exits,
 * so a replay in true time order sees exactly THREADS * ALLOCS allocations by the workers and as
 * many frees, no free of an unknown address and nothing live at exit. A free is recorded before
 * the real free and an allocation after the real allocation, so any reordering of a free of a
 * block and the allocation that reuses its address shows up as an unknown free and a false leak.
 *
 * With many more threads than cores, threads and the recorder's flusher are descheduled for long
 * stretches, so their chunks reach the file late: this is what the reader must get right.
 *
 *   stress_crossfree [THREADS] [ALLOCS_PER_THREAD]
 *
 * Prints "threads T allocs A frees F" (A and F counted by the program) and exits 0 if every block
 * was freed. Uses no stdio buffer and allocates nothing outside the workers' loop itself, so the
 * allocations that are not the workers' are only what the C library makes for threads.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../xorshift.h"

#define MAX_THREADS 256
#define RING 32
#define MAILBOX 512

typedef struct mailbox {
    pthread_mutex_t lock;
    size_t n;
    void *slot[MAILBOX];
} mailbox;

static mailbox boxes[MAX_THREADS];
static int nthreads;
static uint64_t per_thread;
static pthread_barrier_t sent_all;
static uint64_t freed[MAX_THREADS];

/* Frees everything in thread i's mailbox (blocks other threads allocated). */
static void drain(int i)
{
    void *local[MAILBOX];
    pthread_mutex_lock(&boxes[i].lock);
    size_t n = boxes[i].n;
    memcpy(local, boxes[i].slot, n * sizeof *local);
    boxes[i].n = 0;
    pthread_mutex_unlock(&boxes[i].lock);
    for (size_t k = 0; k < n; k++)
        free(local[k]);
    freed[i] += n;
}

static void *worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + 1;
    void *ring[RING] = {0};
    for (uint64_t k = 0; k < per_thread; k++) {
        uint64_t r = xorshift64(&seed);
        /* Sixteen size classes of 16..256 bytes, and now and then anything up to 4096. */
        size_t size =
            (r & 15) == 0 ? 1 + (size_t)((r >> 4) % 4096) : 16 * (1 + (size_t)((r >> 4) & 15));
        unsigned char *p = malloc(size);
        if (!p)
            abort();
        p[0] = (unsigned char)r;
        int dest = (int)((r >> 16) % (uint64_t)nthreads);
        int sent = 0;
        if (dest != i && ((r >> 40) & 7) != 0) { /* 7 in 8 go to another thread */
            pthread_mutex_lock(&boxes[dest].lock);
            if (boxes[dest].n < MAILBOX) {
                boxes[dest].slot[boxes[dest].n++] = p;
                sent = 1;
            }
            pthread_mutex_unlock(&boxes[dest].lock);
        }
        if (!sent) { /* keep it a while, freeing the one it replaces */
            int s = (int)((r >> 32) % RING);
            if (ring[s]) {
                free(ring[s]);
                freed[i]++;
            }
            ring[s] = p;
        }
        if ((k & 15) == 0)
            drain(i);
    }
    for (int s = 0; s < RING; s++)
        if (ring[s]) {
            free(ring[s]);
            freed[i]++;
        }
    pthread_barrier_wait(&sent_all); /* nobody sends after this */
    drain(i);
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 64;
    per_thread = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000;
    if (nthreads < 1 || nthreads > MAX_THREADS) {
        static const char msg[] = "stress_crossfree: THREADS must be 1..256\n";
        (void)!write(2, msg, sizeof msg - 1);
        return 2;
    }
    pthread_barrier_init(&sent_all, NULL, (unsigned)nthreads);
    pthread_t th[MAX_THREADS];
    /* Every mailbox before any thread: a worker sends to any other's box from its start. */
    for (int i = 0; i < nthreads; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0)
            return 3;
    }
    uint64_t frees = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        frees += freed[i];
    }
    char line[128]; /* snprintf of integers into a stack buffer allocates nothing */
    int n =
        snprintf(line, sizeof line, "threads %d allocs %llu frees %llu\n", nthreads,
                 (unsigned long long)((uint64_t)nthreads * per_thread), (unsigned long long)frees);
    (void)!write(1, line, (size_t)n);
    return frees == (uint64_t)nthreads * per_thread ? 0 : 1;
}
