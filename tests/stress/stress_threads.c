/*
 * Stress program run under the preload library: THREADS threads (default 32) each make ALLOCS
 * allocations (default 1000000; GP_STRESS_ALLOCS scales it) of random sizes 1..4096, and free half
 * of them on another thread (each thread hands blocks to the next one through a mailbox). Every
 * block is freed by a worker thread before it exits, so the trace must hold exactly THREADS*ALLOCS
 * allocations and as many frees on the worker threads. Prints the counts and a checksum that does
 * not depend on the profiler; exits 0. Each worker first pushes a region "stress worker" through
 * the preloaded libprof (looked up with dlsym, so the program runs without it too), which tells
 * stress_check which threads are workers.
 *
 *   stress_threads [THREADS] [ALLOCS_PER_THREAD]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../xorshift.h"

#define MAX_THREADS 64
#define RING 64
#define MAILBOX 4096

typedef struct mailbox {
    pthread_mutex_t lock;
    size_t n;
    void *slot[MAILBOX];
} mailbox;

static mailbox boxes[MAX_THREADS];
static int nthreads;
static uint64_t per_thread;
static pthread_barrier_t sent_all;
static uint64_t checksum[MAX_THREADS];
static uint64_t freed[MAX_THREADS];

/* Frees everything in thread i's mailbox. */
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

static void (*region_push)(const char *);

static void *worker(void *arg)
{
    int i = (int)(intptr_t)arg;
    if (region_push)
        region_push("stress worker");
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1);
    void *ring[RING] = {0};
    int next = (i + 1) % nthreads;
    uint64_t sum = 0;
    for (uint64_t k = 0; k < per_thread; k++) {
        uint64_t r = xorshift64(&seed);
        size_t size = 1 + (size_t)(r % 4096);
        unsigned char *p = malloc(size);
        if (!p)
            abort();
        p[0] = (unsigned char)r;
        sum += size;
        if ((r >> 20) & 1) { /* hand it to the next thread, or free it here if its box is full */
            int sent = 0;
            pthread_mutex_lock(&boxes[next].lock);
            if (boxes[next].n < MAILBOX) {
                boxes[next].slot[boxes[next].n++] = p;
                sent = 1;
            }
            pthread_mutex_unlock(&boxes[next].lock);
            if (!sent) {
                free(p);
                freed[i]++;
            }
        } else {
            int s = (int)((r >> 32) % RING);
            if (ring[s]) {
                free(ring[s]);
                freed[i]++;
            }
            ring[s] = p;
        }
        if ((k & 255) == 0)
            drain(i);
    }
    for (int s = 0; s < RING; s++)
        if (ring[s]) {
            free(ring[s]);
            freed[i]++;
        }
    pthread_barrier_wait(&sent_all); /* nobody sends after this */
    drain(i);
    checksum[i] = sum;
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 32;
    per_thread = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    const char *scale = getenv("GP_STRESS_ALLOCS");
    if (argc <= 2 && scale && *scale)
        per_thread = strtoull(scale, NULL, 10);
    if (nthreads < 1 || nthreads > MAX_THREADS)
        return 2;
    region_push = (void (*)(const char *))dlsym(RTLD_DEFAULT, "lp_region_push");
    pthread_barrier_init(&sent_all, NULL, (unsigned)nthreads);
    pthread_t th[MAX_THREADS];
    for (int i = 0; i < nthreads; i++) {
        pthread_mutex_init(&boxes[i].lock, NULL);
        if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i) != 0)
            return 3;
    }
    uint64_t sum = 0, frees = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        sum += checksum[i];
        frees += freed[i];
    }
    printf("threads %d allocs %llu frees %llu bytes %llu\n", nthreads,
           (unsigned long long)((uint64_t)nthreads * per_thread), (unsigned long long)frees,
           (unsigned long long)sum);
    return frees == (uint64_t)nthreads * per_thread ? 0 : 1;
}
