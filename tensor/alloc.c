/*
 * The tagged allocator: every buffer the tensor library owns is made and freed here and reported to
 * libprof with its category, op, module path and grad mode.
 */
#include <stdlib.h>

#include "tensor_internal.h"

#define TN__ALIGN 64

static void *tn__default_alloc(size_t bytes, void *ctx)
{
    void *p = NULL;
    if (posix_memalign(&p, TN__ALIGN, bytes ? bytes : 1) != 0)
        return NULL;
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
