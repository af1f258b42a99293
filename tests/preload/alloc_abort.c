/* Allocates (alloc_abort.h), sleeps past the flush interval, allocates more, then abort()s with
 * every block still live. Knows nothing of gradprof. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc_abort.h"

static void *alloc(size_t size)
{
    void *p = malloc(size);
    if (p != NULL)
        memset(p, 0x5A, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

int main(void)
{
    for (int i = 0; i < AB_EARLY_COUNT; i++)
        alloc(AB_EARLY);
    struct timespec ts = {AB_SLEEP_MS / 1000, (AB_SLEEP_MS % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    for (int i = 0; i < AB_LATE_COUNT; i++)
        alloc(AB_LATE);
    fputs(AB_STDOUT, stdout);
    fflush(stdout);
    abort();
}
