/* Growable arrays and big blocks, shared by the tools. */
#ifndef GRADPROF_TOOLS_ARRAY_H
#define GRADPROF_TOOLS_ARRAY_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/*
 * Big blocks: the analysers' tables and arrays of 2 MiB or more that are written whole (hash
 * tables, arrays zeroed or filled at once) are offered to the kernel as transparent huge pages
 * before they are touched, and 2 MiB-aligned so that all their pages can be huge: one page fault
 * per 2 MiB instead of 512 where THP is `always` or `madvise`. Where faults are dear, as in a
 * virtual machine, a diff's 169 k faults were 1.2 s of its 4.2 s (bench/NOTES.md). A block that
 * becomes big moves to an aligned one; a big one grows by realloc (mremap: no copy, the pages keep
 * the offer, the new block may not be aligned). A refusal (no THP) changes nothing; errno is
 * kept. gp__push's arrays, filled an element at a time, stay on small pages: a huge page would
 * make the unfilled rest of their last 2 MiB resident (2.4 MB more at a report's peak); those
 * only the diff makes grow on huge pages (gp__push_big).
 */
#define GP__BIG_BLOCK ((size_t)2 << 20)

/* Offers the pages of [p, p + bytes) to the kernel as huge pages. */
static inline void gp__offer_huge(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)p + bytes + 4095) & ~(uintptr_t)4095;
    int saved_errno = errno;
    madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    errno = saved_errno;
#else
    (void)p, (void)bytes;
#endif
}

/* malloc, for a block that may be big. */
static inline void *gp__malloc_big(size_t bytes)
{
    if (bytes < GP__BIG_BLOCK)
        return malloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, GP__BIG_BLOCK, bytes) != 0)
        return NULL;
    gp__offer_huge(p, bytes);
    return p;
}

/* calloc, for a block that may be big. */
static inline void *gp__calloc_big(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    if (n * size < GP__BIG_BLOCK)
        return calloc(n, size);
    void *p = gp__malloc_big(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

/* realloc, for a block of old_bytes that may become big (then made by gp__malloc_big). */
static inline void *gp__realloc_big(void *p, size_t old_bytes, size_t bytes)
{
    if (bytes < GP__BIG_BLOCK || old_bytes >= GP__BIG_BLOCK) {
        void *q = realloc(p, bytes);
        if (q && bytes >= GP__BIG_BLOCK)
            gp__offer_huge(q, bytes);
        return q;
    }
    void *q = gp__malloc_big(bytes);
    if (q && p) {
        memcpy(q, p, old_bytes);
        free(p);
    }
    return q;
}

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
