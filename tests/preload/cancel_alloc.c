/*
 * Threads that allocate in a loop are cancelled (deferred cancellation, the default) at random
 * moments: CA_THREADS threads, CA_AT_ONCE at a time, each making malloc/free pairs of CA_SIZE
 * bytes and sleeping CA_NAP_US after every CA_BATCH pairs. The program's own cancellation points
 * (the sleep, pthread_testcancel) lie between whole iterations, so each thread's counts are
 * exact; the recorder's writes must not be cancellation points, or the cancel unwinds out of the
 * recorder. Prints the counts. Knows nothing of gradprof.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cancel_alloc.h"
#include "../xorshift.h"

typedef struct counts {
    volatile uint64_t allocs, frees;
} counts;

static counts per_thread[CA_THREADS];

static void *worker(void *arg)
{
    counts *c = arg;
    for (;;) {
        for (int i = 0; i < CA_BATCH; i++) {
            char *p = malloc(CA_SIZE);
            if (p == NULL)
                abort();
            c->allocs++;
            p[0] = (char)i;
            __asm__ volatile("" : : "r"(p) : "memory");
            free(p);
            c->frees++;
        }
        usleep(CA_NAP_US); /* a cancellation point */
        pthread_testcancel();
    }
    return NULL;
}

int main(void)
{
    uint64_t rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull | 1;
    pthread_t th[CA_AT_ONCE];
    int slot_of[CA_AT_ONCE];
    int started = 0, cancelled = 0;
    for (int k = 0; k < CA_AT_ONCE; k++) {
        slot_of[k] = started;
        if (pthread_create(&th[k], NULL, worker, &per_thread[started++]) != 0)
            return 1;
    }
    while (cancelled < CA_THREADS) {
        xorshift64(&rng);
        struct timespec nap = {0, (long)(rng % 2000000)}; /* 0..2 ms */
        nanosleep(&nap, NULL);
        int k = (int)(rng >> 40) % CA_AT_ONCE;
        if (slot_of[k] < 0)
            continue;
        void *rc;
        if (pthread_cancel(th[k]) != 0 || pthread_join(th[k], &rc) != 0 || rc != PTHREAD_CANCELED)
            return 1;
        cancelled++;
        slot_of[k] = -1;
        if (started < CA_THREADS) {
            slot_of[k] = started;
            if (pthread_create(&th[k], NULL, worker, &per_thread[started++]) != 0)
                return 1;
        }
    }
    uint64_t allocs = 0, frees = 0;
    for (int i = 0; i < CA_THREADS; i++) {
        allocs += per_thread[i].allocs;
        frees += per_thread[i].frees;
    }
    for (int i = 0; i < CA_MAIN; i++)
        free(malloc(CA_MAIN_SIZE));
    printf("cancel_alloc: allocs %llu frees %llu cancelled %d\n", (unsigned long long)allocs,
           (unsigned long long)frees, cancelled);
    return 0;
}
