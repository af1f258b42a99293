/* A growable array helper shared by the tools. */
#ifndef GRADPROF_TOOLS_ARRAY_H
#define GRADPROF_TOOLS_ARRAY_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Grows *items (elements of `size` bytes, *n used of *cap) to hold one more, doubling; returns
 * the new element, zeroed, or NULL when out of memory (then nothing changed). */
static inline void *gp__push(void **items, size_t *n, size_t *cap, size_t size)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        void *p = realloc(*items, c * size);
        if (!p)
            return NULL;
        *items = p;
        *cap = c;
    }
    void *e = (char *)*items + (*n)++ * size;
    memset(e, 0, size);
    return e;
}

/* Grows *items (elements of `size` bytes, *n of them) to `want` (> *n), the new ones zeroed: an
 * array indexed by an id that keeps growing. false when out of memory (then nothing changed). */
static inline bool gp__grow_zeroed(void **items, size_t *n, size_t want, size_t size)
{
    void *p = realloc(*items, want * size);
    if (!p)
        return false;
    memset((char *)p + *n * size, 0, (want - *n) * size);
    *items = p;
    *n = want;
    return true;
}

#endif
