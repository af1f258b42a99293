/*
 * Threads whose first allocation is made by glibc inside pthread_getattr_np, which allocates while
 * holding the calling thread's own lock (as ASan's thread start does): a profiler that asks for
 * the thread's stack bounds from inside that allocation waits for the lock forever. Each thread
 * then mallocs and frees one GA_SIZE block. An alarm ends a hung run with SIGALRM instead of
 * leaving it to the test's timeout.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "getattr_first.h"

static void *body(void *arg)
{
    (void)arg;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        abort();
    pthread_attr_destroy(&attr);
    void *volatile p = malloc(GA_SIZE);
    free(p);
    return NULL;
}

int main(void)
{
    alarm(60);
    pthread_t t[GA_THREADS];
    for (int i = 0; i < GA_THREADS; i++)
        if (pthread_create(&t[i], NULL, body, NULL) != 0)
            return 1;
    for (int i = 0; i < GA_THREADS; i++)
        pthread_join(t[i], NULL);
    fputs(GA_STDOUT, stdout);
    return 0;
}
