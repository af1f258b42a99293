/* Reductions: sum and mean over dims (accumulated in double), and summing a gradient back to a
 * broadcast input's shape. */
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

/* 8 interleaved partial sums (lane j % 8) added pairwise at the end: independent adds that GCC
 * vectorises without -ffast-math, where one running sum is a chain of dependent adds. PyTorch's
 * CPU reductions also sum in vector lanes, so the rounding is no further from theirs than a serial
 * sum's. */
float tn__lane_sum(const float *x, int64_t n, float mu, bool sq)
{
    float acc[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) {
            float d = x[j + k] - mu;
            acc[k] += sq ? d * d : x[j + k];
        }
    for (int k = 0; j < n; j++, k++) {
        float d = x[j] - mu;
        acc[k] += sq ? d * d : x[j];
    }
    return tn__lanes_total(acc);
}

/* node->ints[0] = bitmask of reduced dims; floats[0] = scale applied to the gradient. */

/* out (contiguous, `shape`) = scale * g broadcast from its kept shape (reduced dims of size 1). */
static void tn__spread_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    void **p = ctx;
    float *dst = (float *)p[0] + offsets[0];
    const float *src = (const float *)p[1] + offsets[1];
    float scale = *(const float *)p[2];
    if (inner[1] == 0) {
        float v = src[0] * scale;
        for (int64_t i = 0; i < n; i++)
            dst[i] = v;
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = src[i * inner[1]] * scale;
    }
}

static int tn__reduce_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    const tn_node_input *in = &node->inputs[0];
    uint64_t mask = (uint64_t)node->ints[0];
    tn_tensor *out = tn__new_output(in->ndim, in->shape, node->kind->name);
    if (!out)
        return tn_last_error();
    if (tn_numel(out) > 0) {
        /* g is contiguous with the reduced dims dropped or kept as 1: walk it with stride 0 there. */
        tn__strided it = {.ndim = in->ndim, .shape = in->shape, .nops = 2};
        tn__contiguous_strides(in->ndim, in->shape, it.strides[0]);
        int64_t stride = 1;
        for (int d = in->ndim - 1; d >= 0; d--) {
            if (mask >> d & 1) {
                it.strides[1][d] = 0;
            } else {
                it.strides[1][d] = stride;
                stride *= in->shape[d];
            }
        }
        float scale = node->floats[0];
        void *ctx[3] = {tn_data(out), tn_data(g), &scale};
        tn__strided_rows(&it, tn__spread_row, ctx);
    }
    gin[0] = out;
    return 0;
}

static const tn_node_kind tn__sum_kind = {"sum", "sum_backward", tn__reduce_backward};
static const tn_node_kind tn__mean_kind = {"mean", "mean_backward", tn__reduce_backward};

static void tn__sum_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    void **p = ctx;
    double *acc = (double *)p[0] + offsets[0];
    const float *src = (const float *)p[1] + offsets[1];
    if (inner[0] == 0) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += src[i * inner[1]];
        acc[0] += s;
    } else {
        for (int64_t i = 0; i < n; i++)
            acc[i * inner[0]] += src[i * inner[1]];
    }
}

static tn_tensor *tn__reduce(const tn_node_kind *kind, tn_tensor *x, int ndims, const int *dims,
                             bool keepdim, bool mean)
{
    const char *op = kind->name;
    if (tn__check_arg(op, "input", x))
        return NULL;
    if (ndims < 0 || ndims > TN_MAX_DIMS || (ndims > 0 && !dims))
        return TN__FAIL_NULL(TN_EINVAL, "%s: bad dim list (%d dims)", op, ndims);
    uint64_t mask = 0;
    for (int i = 0; i < ndims; i++) {
        int d = tn__wrap_dim(dims[i], x->ndim);
        if (d < 0 || (x->ndim == 0 && dims[i] != 0 && dims[i] != -1))
            return TN__FAIL_NULL(TN_EINVAL, "%s: dim %d out of range for %d-d input", op, dims[i],
                                 x->ndim);
        if (mask >> d & 1)
            return TN__FAIL_NULL(TN_EINVAL, "%s: dim %d appears twice", op, dims[i]);
        mask |= 1ull << d;
    }
    if (ndims == 0)
        mask = x->ndim ? (1ull << x->ndim) - 1 : 0;

    int64_t kept[TN_MAX_DIMS], shape[TN_MAX_DIMS];
    int out_ndim = 0;
    int64_t count = 1;
    for (int d = 0; d < x->ndim; d++) {
        bool reduced = mask >> d & 1;
        kept[d] = reduced ? 1 : x->shape[d];
        if (reduced)
            count *= x->shape[d];
        if (!reduced || keepdim)
            shape[out_ndim++] = kept[d];
    }
    tn_tensor *out = tn__new_output(out_ndim, shape, op);
    if (!out)
        return NULL;
    int64_t n_out = tn_numel(out);
    double *acc = calloc((size_t)(n_out ? n_out : 1), sizeof *acc);
    if (!acc) {
        tn_release(out);
        return TN__FAIL_NULL(TN_ENOMEM, "%s: out of memory", op);
    }
    if (tn_numel(x) > 0) {
        tn__strided it = {.ndim = x->ndim, .shape = x->shape, .nops = 2};
        int64_t stride = 1;
        for (int d = x->ndim - 1; d >= 0; d--) {
            it.strides[0][d] = (mask >> d & 1) ? 0 : stride;
            stride *= kept[d];
        }
        memcpy(it.strides[1], x->strides, sizeof x->strides);
        it.offsets[0] = 0;
        it.offsets[1] = x->offset;
        void *ctx[2] = {acc, x->storage->data};
        tn__strided_rows(&it, tn__sum_row, ctx);
    }
    float *o = tn_data(out);
    double scale = mean ? 1.0 / (double)count : 1.0; /* mean of nothing is NaN, as in PyTorch */
    for (int64_t i = 0; i < n_out; i++)
        o[i] = (float)(acc[i] * scale);
    free(acc);

    if (tn__grad_needed(1, &x)) {
        tn_node *node = tn__node_new(kind, out, 1, &x);
        if (!node) {
            tn_release(out);
            return NULL;
        }
        node->ints[0] = (int64_t)mask;
        node->floats[0] = (float)scale;
    }
    return out;
}

tn_tensor *tn_sum(tn_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return tn__reduce(&tn__sum_kind, x, ndims, dims, keepdim, false);
}

tn_tensor *tn_mean(tn_tensor *x, int ndims, const int *dims, bool keepdim)
{
    return tn__reduce(&tn__mean_kind, x, ndims, dims, keepdim, true);
}

tn_tensor *tn__sum_to_shape(tn_tensor *grad, int ndim, const int64_t *shape)
{
    int lead = grad->ndim - ndim;
    int dims[TN_MAX_DIMS], k = 0;
    for (int d = 0; d < grad->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && grad->shape[d] != 1))
            dims[k++] = d;
    if (k == 0)
        return tn_retain(grad);
    tn_tensor *s = tn_sum(grad, k, dims, true);
    tn_tensor *out = s ? tn_reshape(s, ndim, shape) : NULL;
    tn_release(s);
    return out;
}
