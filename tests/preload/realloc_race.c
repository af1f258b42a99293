/*
 * Two threads race for the block a moving realloc gives back: thread 1 grows a small block with
 * realloc (so it moves and the old block is freed inside realloc), thread 2 allocates blocks of
 * the same small size at the same time, and with one shared arena and no thread cache
 * (MALLOC_ARENA_MAX=1, GLIBC_TUNABLES=glibc.malloc.tcache_count=0, set by the test) often gets
 * the old block back. Knows nothing of gradprof.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "realloc_race.h"

static pthread_barrier_t start;

static void *grower(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < RR_ROUNDS; i++) {
        char *p = malloc(RR_SMALL);
        if (p == NULL)
            return (void *)1;
        p[0] = 1;
        char *q = realloc(p, RR_BIG);
        if (q == NULL)
            return (void *)1;
        q[RR_BIG - 1] = 2;
        free(q);
    }
    return NULL;
}

static void *taker(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start);
    for (int i = 0; i < RR_ROUNDS; i++) {
        char *p = malloc(RR_OTHER);
        if (p == NULL)
            return (void *)1;
        p[0] = 3;
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    return NULL;
}

int main(void)
{
    pthread_t a, b;
    pthread_barrier_init(&start, NULL, 2);
    if (pthread_create(&a, NULL, grower, NULL) != 0 || pthread_create(&b, NULL, taker, NULL) != 0)
        return 1;
    void *ra, *rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    if (ra != NULL || rb != NULL)
        return 1;
    fputs(RR_STDOUT, stdout);
    return 0;
}
