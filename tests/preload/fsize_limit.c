/* A program that lowers its file size limit (RLIMIT_FSIZE, fsize_limit.h) and goes on allocating
 * from two threads, with SIGXFSZ at its default action (kill): the recorder's trace must reach the
 * limit without the program being killed, and end at a whole chunk. Knows nothing of gradprof. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "fsize_limit.h"

static void *allocate(void *arg)
{
    for (int i = 0; i < FL_COUNT; i++) {
        char *p = malloc(FL_SIZE);
        if (!p)
            return NULL;
        p[i % FL_SIZE] = 1;
        free(p);
    }
    return arg;
}

int main(void)
{
    signal(SIGXFSZ, SIG_DFL);
    struct rlimit rl = {FL_LIMIT, FL_LIMIT};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
        return 2;
    pthread_t t;
    if (pthread_create(&t, NULL, allocate, &rl) != 0)
        return 3;
    void *mine = allocate(&rl), *theirs = NULL;
    pthread_join(t, &theirs);
    if (!mine || !theirs)
        return 4;
    fputs(FL_STDOUT, stdout);
    return 0;
}
