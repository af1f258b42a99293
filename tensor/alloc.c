/*
 * The tagged allocator: every buffer the tensor library owns is made and freed here and reported to
 * libprof with its category, op, module path and grad mode.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tensor_internal.h"

#define TN__ALIGN 64
#define TN__HUGE_PAGE ((size_t)2 << 20)

/*
 * 64-byte aligned; a buffer of 2 MiB or more is aligned to 2 MiB and its whole 2 MiB pages are
 * offered to the kernel as transparent huge pages (MADV_HUGEPAGE; a no-op where THP is off), as
 * PyTorch's CPU allocator does with THP_MEM_ALLOC_ENABLE: such a buffer faults in one page per
 * 2 MiB instead of 512. glibc gives such blocks back to the kernel when they are freed (it
 * unmaps them, or trims its heap), and each step of a loop makes them anew, so the faults are
 * paid every step (bench/tensor_bench mlp train: 9,100 faults a step -> 25; transformer grad:
 * 1,900 -> 5). Every buffer is still freed when its tensor goes: what gradprof sees is unchanged.
 */
static void *tn__default_alloc(size_t bytes, void *ctx)
{
    void *p = NULL;
    bool huge = bytes >= TN__HUGE_PAGE;
    if (posix_memalign(&p, huge ? TN__HUGE_PAGE : TN__ALIGN, bytes ? bytes : 1) != 0)
        return NULL;
    if (huge) {
        int saved_errno = errno; /* a refusal (EINVAL without THP) changes nothing */
        madvise(p, bytes & ~(TN__HUGE_PAGE - 1), MADV_HUGEPAGE);
        errno = saved_errno;
    }
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
