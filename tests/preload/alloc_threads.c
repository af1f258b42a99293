/* AT_THREADS threads, each making AT_PAIRS malloc/free pairs of its own size (alloc_threads.h),
 * all running at once. Knows nothing of gradprof. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "alloc_threads.h"

static pthread_barrier_t start;

static void *worker(void *arg)
{
    size_t size = AT_SIZE((int)(intptr_t)arg);
    pthread_barrier_wait(&start);
    for (int i = 0; i < AT_PAIRS; i++) {
        char *p = malloc(size);
        if (p == NULL)
            return (void *)1;
        p[0] = (char)i;
        p[size - 1] = (char)i;
        __asm__ volatile("" : : "r"(p) : "memory");
        free(p);
    }
    return NULL;
}

int main(void)
{
    pthread_t threads[AT_THREADS];
    pthread_barrier_init(&start, NULL, AT_THREADS);
    for (int t = 0; t < AT_THREADS; t++)
        if (pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t) != 0)
            return 1;
    int failures = 0;
    for (int t = 0; t < AT_THREADS; t++) {
        void *rc;
        pthread_join(threads[t], &rc);
        failures += rc != NULL;
    }
    pthread_barrier_destroy(&start);
    if (failures != 0)
        return 1;
    fputs(AT_STDOUT, stdout);
    return 0;
}
