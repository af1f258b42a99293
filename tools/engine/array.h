/* A growable array helper shared by the tools. */
#ifndef GRADPROF_TOOLS_ARRAY_H
#define GRADPROF_TOOLS_ARRAY_H

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

#endif
