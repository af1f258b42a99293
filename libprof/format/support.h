/*
 * What the trace reader shares with the analysers that read through it (tools/engine): big blocks
 * on huge pages, and helper threads that take no signals. Not installed.
 */
#ifndef GRADPROF_FORMAT_SUPPORT_H
#define GRADPROF_FORMAT_SUPPORT_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
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
 * kept. Every block is freed with free().
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

/* pthread_create for a helper thread that runs with every signal blocked, so that the caller's
 * signals (SIGINT, a profiler's SIGPROF) stay the caller's; the caller's mask is left as it was.
 * Returns pthread_create's answer. */
static inline int gp__start_quiet_thread(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int r = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

#endif /* GRADPROF_FORMAT_SUPPORT_H */
