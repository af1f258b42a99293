/*
 * lp_exclude_push/pop from a program under libprof_preload.so, found as a tagging source finds
 * them (dlsym: the program does not link libprof): what exclude_own.h lists. Exits 1 if the
 * preloaded library does not define them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exclude_own.h"

static void *touch(size_t n)
{
    void *p = malloc(n);
    if (p)
        memset(p, 1, n);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

static void *other_thread(void *arg)
{
    (void)arg;
    free(touch(EO_OTHER_SIZE));
    return NULL;
}

int main(void)
{
    void (*push)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "lp_exclude_push");
    void (*pop)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "lp_exclude_pop");
    if (!push || !pop)
        return 1;
    void *kept = touch(EO_KEPT_SIZE);
    push();
    push();
    void *own = touch(EO_OWN_SIZE);
    pthread_t t;
    if (pthread_create(&t, NULL, other_thread, NULL) != 0 || pthread_join(t, NULL) != 0)
        return 1;
    free(kept);
    pop();
    pop();
    pop(); /* one too many: ignored */
    free(own);
    free(touch(EO_AFTER_SIZE));
    fputs(EO_STDOUT, stdout);
    return 0;
}
