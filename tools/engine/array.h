/* Growable arrays, shared by the tools. */
#ifndef GRADPROF_TOOLS_ARRAY_H
#define GRADPROF_TOOLS_ARRAY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "support.h" /* big blocks */

/* Big blocks (gp__malloc_big, gp__calloc_big, gp__realloc_big) are support.h's, shared with the
 * trace reader. gp__push's arrays, filled an element at a time, stay on small pages: a huge page
 * would make the unfilled rest of their last 2 MiB resident (2.4 MB more at a report's peak);
 * those only the diff makes grow on huge pages (gp__push_big). */

/* gp__push and gp__push_big: `big` grows the array as a big block. */
static inline void *gp__push_as(void **items, size_t *n, size_t *cap, size_t size, bool big)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        void *p = big ? gp__realloc_big(*items, *cap * size, c * size) : realloc(*items, c * size);
        if (!p)
            return NULL;
        *items = p;
        *cap = c;
    }
    void *e = (char *)*items + (*n)++ * size;
    memset(e, 0, size);
    return e;
}

/* Grows *items (elements of `size` bytes, *n used of *cap) to hold one more, doubling; returns
 * the new element, zeroed, or NULL when out of memory (then nothing changed). */
static inline void *gp__push(void **items, size_t *n, size_t *cap, size_t size)
{
    return gp__push_as(items, n, cap, size, false);
}

/* gp__push for an array only the diff makes (the alignment's records, its gone list, the union
 * of buffers), whose faults cost more than the unfilled rest of its last huge page: it grows as a
 * big block. */
static inline void *gp__push_big(void **items, size_t *n, size_t *cap, size_t size)
{
    return gp__push_as(items, n, cap, size, true);
}

/* Grows *items (elements of `size` bytes, *n of them) to `want` (> *n), the new ones zeroed: an
 * array indexed by an id that keeps growing. false when out of memory (then nothing changed). */
static inline bool gp__grow_zeroed(void **items, size_t *n, size_t want, size_t size)
{
    void *p = gp__realloc_big(*items, *n * size, want * size);
    if (!p)
        return false;
    memset((char *)p + *n * size, 0, (want - *n) * size);
    *items = p;
    *n = want;
    return true;
}

#endif
