/*
 * The tagged allocator: every buffer the tensor library owns is made and freed here and reported to
 * libprof with its category, op, module path and grad mode.
 */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tensor_internal.h"

#define TN__ALIGN 64
#define TN__HUGE_PAGE ((size_t)2 << 20)

/* Offers the whole 2 MiB pages inside [p, p + bytes) to the kernel as transparent huge pages
 * (MADV_HUGEPAGE: one fault per 2 MiB instead of 512 where THP is `always` or `madvise`; a
 * refusal, as without THP, changes nothing and leaves errno as it was). */
static void tn__offer_huge_pages(void *p, size_t bytes)
{
    uintptr_t lo = ((uintptr_t)p + TN__HUGE_PAGE - 1) & ~(uintptr_t)(TN__HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(TN__HUGE_PAGE - 1);
    if (hi <= lo)
        return;
    int saved_errno = errno;
    madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    errno = saved_errno;
}

/* Bytes in blocks glibc has mapped on their own (mallinfo2's hblkhd); 0 where that is unknown. */
static size_t tn__mapped_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    return mallinfo2().hblkhd;
#else
    return 0;
#endif
}

/* Whether buffers of 2 MiB or more are still 2 MiB-aligned (see tn__default_alloc). */
static _Atomic bool tn__align_big = true;

/*
 * 64-byte aligned; the whole 2 MiB pages inside a buffer of 2 MiB or more are offered as huge
 * pages. Such a buffer is also aligned to 2 MiB, so that all its pages are huge, for as long as
 * glibc maps each of them on its own: a small C program's glibc unmaps them when they are freed,
 * and each step of a loop makes them anew (bench/tensor_bench mlp train: 9,100 page faults a step
 * -> 25). From the first aligned buffer glibc serves from its heap instead on (its dynamic mmap
 * threshold has risen above it, or the program set one), they are 64-byte aligned: carving
 * aligned blocks out of the heap fragments it, and the resident set grows by the gaps (cnn train
 * with every big buffer aligned: 28 -> 66 MiB peak RSS; 29 -> 140 MiB with a 32 MiB threshold).
 * The two are told apart by mallinfo2's mapped bytes around the call (a big buffer costs far more
 * than that walk of glibc's free lists; another thread's munmap in between may end the alignment
 * early, which costs speed only). Where they are unknown, as under another malloc, nothing is
 * aligned beyond 64 bytes. Every buffer is freed when its tensor goes: what gradprof records does
 * not change.
 */
static void *tn__default_alloc(size_t bytes, void *ctx)
{
    void *p = NULL;
    bool big = bytes >= TN__HUGE_PAGE;
    bool align = big && atomic_load_explicit(&tn__align_big, memory_order_relaxed);
    size_t mapped_before = align ? tn__mapped_bytes() : 0;
    if (posix_memalign(&p, align ? TN__HUGE_PAGE : TN__ALIGN, bytes ? bytes : 1) != 0)
        return NULL;
    if (align && tn__mapped_bytes() < mapped_before + bytes)
        atomic_store_explicit(&tn__align_big, false, memory_order_relaxed);
    if (big)
        tn__offer_huge_pages(p, bytes);
    return p;
}

static void tn__default_free(void *ptr, void *ctx) { free(ptr); }

static tn_allocator tn__allocator = {tn__default_alloc, tn__default_free, NULL};

void tn_set_allocator(const tn_allocator *allocator)
{
    if (allocator)
        tn__allocator = *allocator;
    else
        tn__allocator = (tn_allocator){tn__default_alloc, tn__default_free, NULL};
}

static _Thread_local tn__context tn__thread_ctx = {"", NULL};

tn__context *tn__ctx(void) { return &tn__thread_ctx; }

lp_category tn__effective_category(lp_category category)
{
    if (tn__thread_ctx.backward_op && category == LP_CAT_ACTIVATION)
        return LP_CAT_GRADIENT;
    return category;
}

void *tn__alloc(size_t bytes, lp_category category, const char *op, const char *detail)
{
    void *p = tn__allocator.alloc(bytes, tn__allocator.ctx);
    if (!p) {
        tn__error(TN_ENOMEM, "%s: out of memory allocating %zu bytes", op, bytes);
        return NULL;
    }
    const tn__context *ctx = &tn__thread_ctx;
    lp_tag tag = {
        .category = tn__effective_category(category),
        .op = ctx->backward_op ? ctx->backward_op : op,
        .module = ctx->module,
        .detail = detail,
        .grad_enabled = tn_is_grad_enabled(),
    };
    lp_alloc(p, bytes, LP_DEVICE_HOST, &tag);
    return p;
}

void tn__free(void *ptr, size_t bytes, lp_category category)
{
    if (!ptr)
        return;
    lp_free(ptr, bytes, LP_DEVICE_HOST, category);
    tn__allocator.free(ptr, tn__allocator.ctx);
}
