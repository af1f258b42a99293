/*
 * What the two interposers (preload.c: LD_PRELOAD; wrap.c: ld --wrap) share: recording one raw
 * allocation or free, and starting the recorder from the environment. Not installed.
 *
 * Recording rules (as heaptrack): nothing is recorded unless the recorder is on and the calling
 * thread is not already inside it (the guard); a free is stamped *before* the real free, because
 * after it another thread may get the same address back, and an allocation after the real
 * allocation returned, so that by time the free of an address always comes first; a failed
 * allocation (out of memory) records only that it failed, as a timed note LP_NOTE_ALLOC_FAILED
 * with the bytes asked. Sizes are what the program asked for, not what the allocator
 * rounded them up to. errno is left as the real function left it (the recorder keeps it on the
 * paths where it makes system calls: per chunk, per new thread, per new module, per stack).
 */
#ifndef GRADPROF_LIBPROF_INTERPOSE_H
#define GRADPROF_LIBPROF_INTERPOSE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/auxv.h>

#include "recorder.h"

/* Inlined even at -O0, so that the hook is a single frame on the recorded stack (the recorder drops
 * its own frames by address range, or a fixed count when linked statically). */
#define LP__IP_INLINE static inline __attribute__((always_inline))

/* Records that an allocation of `size` bytes (0: nothing) just failed. errno is kept. */
LP__IP_INLINE void lp__ip_failed(size_t size)
{
    if (size == 0 || !lp__recording() || !lp__guard_enter())
        return;
    lp__record_failed(size);
    lp__guard_exit();
}

/* Records that `p` was just allocated with `size` bytes on the host (NULL: that it failed). */
LP__IP_INLINE void lp__ip_alloc(const void *p, size_t size)
{
    if (p == NULL) {
        lp__ip_failed(size);
        return;
    }
    if (!lp__recording())
        return;
    if (!lp__guard_enter())
        return;
    lp__record_alloc(p, size, LP_DEVICE_HOST);
    lp__guard_exit();
}

/* Records that `p` (NULL: nothing) is about to be freed. Call it before the real free. */
LP__IP_INLINE void lp__ip_free(const void *p)
{
    if (p == NULL || !lp__recording())
        return;
    if (!lp__guard_enter())
        return;
    lp__record_free(p, LP_DEVICE_HOST);
    lp__guard_exit();
}

/*
 * realloc through `real`, recorded as free(old) + alloc(new). realloc(NULL, n) is an allocation;
 * realloc(old, 0) frees `old` (glibc returns NULL, other allocators a minimal block), so its free
 * is recorded before the call; a failed realloc records only its failure, since `old` is still
 * the program's. Otherwise whether `old` is freed is known only after the call, but another thread
 * may get `old` back as soon as the real realloc let go of it: so the free is stamped with a time
 * taken before the call, and recorded after it when the call succeeded. By time, the free comes
 * before any allocation that reuses `old`. (Only if this very thread records something during the
 * call, from a signal handler, is the free stamped after that instead.)
 */
LP__IP_INLINE void *lp__ip_realloc(void *(*real)(void *, size_t), void *old, size_t size)
{
    if (old == NULL) {
        void *p = real(NULL, size);
        lp__ip_alloc(p, size);
        return p;
    }
    if (size == 0) {
        lp__ip_free(old);
        void *p = real(old, 0);
        lp__ip_alloc(p, 0);
        return p;
    }
    if (!lp__recording() || !lp__guard_enter())
        return real(old, size);
    uint64_t before = lp__stamp();
    lp__guard_exit();
    void *p = real(old, size);
    if (p == NULL)
        lp__ip_failed(size); /* old is still the program's */
    if (p == NULL || before == 0 || !lp__guard_enter())
        return p;
    lp__record_free_at(old, LP_DEVICE_HOST, before);
    lp__record_alloc(p, size, LP_DEVICE_HOST);
    lp__guard_exit();
    return p;
}

/* posix_memalign through `real`, recording the block when it succeeded. */
LP__IP_INLINE int lp__ip_posix_memalign(int (*real)(void **, size_t, size_t), void **out,
                                        size_t align, size_t size)
{
    int rc = real(out, align, size);
    if (rc == 0)
        lp__ip_alloc(*out, size);
    else if (rc == ENOMEM)
        lp__ip_failed(size);
    return rc;
}

/*
 * The interposer's start-up, from its constructor: marks raw allocations as the interposer's
 * (`how` is "preload" or "wrap"), then starts recording as the environment says, unless
 * GRADPROF_ENABLE=0 or the process runs with elevated privileges (setuid/setgid: AT_SECURE, where
 * the environment is not to be trusted). lp_start prints its own message if the trace cannot be
 * created; the program runs on either way.
 */
static inline void lp__ip_start(const char *how)
{
    lp__set_interposed(how);
    if (getauxval(AT_SECURE) != 0)
        return;
    static lp_options options; /* 4 KB: not on a constructor's stack */
    lp_options_default(&options);
    lp_options_from_env(&options);
    if (!options.enabled)
        return;
    lp_start(&options);
}

#endif /* GRADPROF_LIBPROF_INTERPOSE_H */
