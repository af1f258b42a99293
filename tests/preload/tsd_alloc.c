/*
 * Thread-specific data destructors that allocate and free at thread exit (tsd_alloc.h lists the
 * allocations). The program's keys are made after gradprof started, so their destructors run
 * after the recorder's own thread-exit hook; key 2's destructor sets a new value, so glibc runs a
 * second round of destructors. Knows nothing of gradprof.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tsd_alloc.h"

static pthread_key_t key1, key2;

static void touch(void *p)
{
    memset(p, 0x5A, 16);
    __asm__ volatile("" : : "r"(p) : "memory");
}

static void dtor1(void *value)
{
    free(value);
    void *q = malloc(TD_DTOR_SIZE);
    touch(q);
    free(q);
}

static void dtor2(void *value)
{
    if (value == (void *)1) { /* first round: a value that needs a second round */
        void *p = malloc(TD_ROUND2_SIZE);
        touch(p);
        pthread_setspecific(key2, p);
    } else {
        free(value); /* second round */
    }
}

static void *worker(void *arg)
{
    (void)arg;
    void *p = malloc(TD_BODY_SIZE);
    touch(p);
    pthread_setspecific(key1, p);
    pthread_setspecific(key2, (void *)1);
    return NULL;
}

int main(void)
{
    static void *keep[TD_MAIN];
    for (int i = 0; i < TD_MAIN; i++) {
        keep[i] = malloc(TD_MAIN_SIZE);
        touch(keep[i]);
    }
    if (pthread_key_create(&key1, dtor1) != 0 || pthread_key_create(&key2, dtor2) != 0)
        return 1;
    for (int i = 0; i < TD_THREADS; i += 4) {
        pthread_t th[4];
        for (int k = 0; k < 4; k++)
            if (pthread_create(&th[k], NULL, worker, NULL) != 0)
                return 1;
        for (int k = 0; k < 4; k++)
            pthread_join(th[k], NULL);
    }
    fputs(TD_STDOUT, stdout);
    return 0;
}
