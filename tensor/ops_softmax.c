/*
 * Softmax and log-softmax over one dim: x [...] -> y [...], contiguous.
 *
 * Numerically stable (the max along the dim is subtracted before exponentiating). Both save only
 * their output, as PyTorch does:
 *     softmax:     dx = y * (g - sum(g * y, dim))
 *     log_softmax: dx = g - exp(y) * sum(g, dim)
 * The tensor is viewed as [outer, n, inner] with n the size of the reduced dim; when inner > 1 the
 * reductions run over blocks of up to SM_BLOCK columns so the inner loops stay unit-stride.
 */
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

#define SM_BLOCK 256

/* Splits shape around dim d into [outer, n, inner]; a 0-d tensor is one element. */
static void sm_dims(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *n,
                    int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    *n = ndim > 0 ? shape[d] : 1;
    for (int i = 0; i < d && i < ndim; i++)
        *outer *= shape[i];
    for (int i = d + 1; i < ndim; i++)
        *inner *= shape[i];
}

/* max(x[k] * scale) over k < n, NaNs passed over (-inf if nothing else), in 8 lanes: a chain of
 * dependent maxima is 4 cycles an element, lanes vectorise; the maximum is the same either way. */
static float scaled_max(const float *x, int64_t n, float scale)
{
    float acc[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) {
            float v = x[k + j] * scale;
            acc[j] = v > acc[j] ? v : acc[j];
        }
    for (int j = 0; k < n; k++, j++) {
        float v = x[k] * scale;
        acc[j] = v > acc[j] ? v : acc[j];
    }
    float m = acc[0];
    for (int j = 1; j < 8; j++)
        m = acc[j] > m ? acc[j] : m;
    return m;
}

/* sum(e^(x[k] * scale - m)) over k < n, in 8 lanes as tn__lane_sum. */
static float exp_sum(const float *x, int64_t n, float scale, float m)
{
    float acc[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += tn__exp_lane(x[k + j] * scale - m);
    for (int j = 0; k < n; k++, j++)
        acc[j] += tn__exp_lane(x[k] * scale - m);
    return tn__lanes_total(acc);
}

/* Rows of n contiguous values: dst[o, :] = softmax (or log-softmax if `log`) of src[o, :] * scale.
 * dst may be src. With scale 1 the values are those of the softmax of src itself (x * 1 is x). */
static void sm_rows(const float *src, float *dst, int64_t outer, int64_t n, bool log, float scale)
{
    for (int64_t o = 0; o < outer; o++) {
        const float *in = src + o * n;
        float *row = dst + o * n;
        float m = scaled_max(in, n, scale);
        if (log) {
            /* (x - m) - log(sum) rather than x - (m + log(sum)): exact for large x. */
            float ls = logf(exp_sum(in, n, scale, m));
            for (int64_t k = 0; k < n; k++)
                row[k] = (in[k] * scale - m) - ls;
        } else {
            /* The exponentials into the row, then their sum in lanes: loops that vectorise. */
            for (int64_t k = 0; k < n; k++)
                row[k] = tn__exp_lane(in[k] * scale - m);
            float inv = 1.0f / tn__lane_sum(row, n, 0.0f, false);
            for (int64_t k = 0; k < n; k++)
                row[k] *= inv;
        }
    }
}

/* In place: each row p[o, :, j] (stride inner) becomes its softmax, or log-softmax if `log`. */
static void sm_forward(float *p, int64_t outer, int64_t n, int64_t inner, bool log)
{
    if (inner == 1) {
        sm_rows(p, p, outer, n, log, 1.0f);
        return;
    }
    float mx[SM_BLOCK], sm[SM_BLOCK];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j0 = 0; j0 < inner; j0 += SM_BLOCK) {
            int64_t w = inner - j0 < SM_BLOCK ? inner - j0 : SM_BLOCK;
            float *base = p + o * n * inner + j0;
            for (int64_t j = 0; j < w; j++) {
                mx[j] = -INFINITY;
                sm[j] = 0.0f;
            }
            for (int64_t k = 0; k < n; k++) {
                const float *r = base + k * inner;
                for (int64_t j = 0; j < w; j++)
                    mx[j] = r[j] > mx[j] ? r[j] : mx[j];
            }
            if (log) {
                for (int64_t k = 0; k < n; k++) {
                    const float *r = base + k * inner;
                    for (int64_t j = 0; j < w; j++)
                        sm[j] += tn__exp_lane(r[j] - mx[j]);
                }
                for (int64_t j = 0; j < w; j++)
                    sm[j] = logf(sm[j]);
                for (int64_t k = 0; k < n; k++) {
                    float *r = base + k * inner;
                    for (int64_t j = 0; j < w; j++)
                        r[j] = (r[j] - mx[j]) - sm[j];
                }
            } else {
                for (int64_t k = 0; k < n; k++) {
                    float *r = base + k * inner;
                    for (int64_t j = 0; j < w; j++) {
                        r[j] = tn__exp_lane(r[j] - mx[j]);
                        sm[j] += r[j];
                    }
                }
                for (int64_t j = 0; j < w; j++)
                    sm[j] = 1.0f / sm[j];
                for (int64_t k = 0; k < n; k++) {
                    float *r = base + k * inner;
                    for (int64_t j = 0; j < w; j++)
                        r[j] *= sm[j];
                }
            }
        }
    }
}

/* gi = y * (g - sum_k g*y) (softmax) or g - exp(y) * sum_k g (log-softmax), all [outer, n, inner]
 * contiguous. */
static void sm_backward(const float *restrict y, const float *restrict g, float *restrict gi,
                        int64_t outer, int64_t n, int64_t inner, bool log)
{
    float acc[SM_BLOCK];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j0 = 0; j0 < inner; j0 += SM_BLOCK) {
            int64_t w = inner - j0 < SM_BLOCK ? inner - j0 : SM_BLOCK;
            int64_t base = o * n * inner + j0;
            for (int64_t j = 0; j < w; j++)
                acc[j] = 0.0f;
            for (int64_t k = 0; k < n; k++) {
                const float *gr = g + base + k * inner, *yr = y + base + k * inner;
                if (log)
                    for (int64_t j = 0; j < w; j++)
                        acc[j] += gr[j];
                else
                    for (int64_t j = 0; j < w; j++)
                        acc[j] += gr[j] * yr[j];
            }
            for (int64_t k = 0; k < n; k++) {
                const float *gr = g + base + k * inner, *yr = y + base + k * inner;
                float *ir = gi + base + k * inner;
                if (log)
                    for (int64_t j = 0; j < w; j++)
                        ir[j] = gr[j] - tn__exp_lane(yr[j]) * acc[j];
                else
                    for (int64_t j = 0; j < w; j++)
                        ir[j] = yr[j] * (gr[j] - acc[j]);
            }
        }
    }
}

/* Strided copy into a contiguous buffer: operand 0 is the source, operand 1 the destination. */
typedef struct sm_copy_ctx {
    const float *src;
    float *dst;
} sm_copy_ctx;

static void sm_copy_rows(int64_t n, const int64_t *offsets, const int64_t *inner_strides, void *ctx)
{
    const sm_copy_ctx *c = ctx;
    const float *s = c->src + offsets[0];
    float *d = c->dst + offsets[1];
    int64_t st = inner_strides[0];
    for (int64_t i = 0; i < n; i++)
        d[i] = s[i * st];
}

/* Copies x's elements in row-major order into dst (numel floats). */
static void sm_gather(tn_tensor *x, float *dst)
{
    int64_t n = tn_numel(x);
    if (tn_is_contiguous(x) || n <= 1) {
        if (n > 0)
            memcpy(dst, tn_data(x), (size_t)n * sizeof(float));
        return;
    }
    tn__strided it = {.ndim = x->ndim, .shape = x->shape, .nops = 2};
    for (int d = 0; d < x->ndim; d++)
        it.strides[0][d] = x->strides[d];
    tn__contiguous_strides(x->ndim, x->shape, it.strides[1]);
    sm_copy_ctx c = {.src = tn_data(x), .dst = dst};
    tn__strided_rows(&it, sm_copy_rows, &c);
}

/* ---- backward ------------------------------------------------------------------------------- */

/* ints[0] is the normalised dim; slot 0 the output y. */
static int sm_backward_common(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs, bool log)
{
    tn_tensor *y = tn__saved(node, 0);
    if (!y)
        return tn_last_error();
    tn_tensor *yc = tn_contiguous(y), *gc = tn_contiguous(g);
    tn_release(y);
    tn_tensor *gi = (yc && gc) ? tn__new_output(g->ndim, g->shape, node->kind->name) : NULL;
    if (gi) {
        int64_t outer, n, inner;
        sm_dims(g->ndim, g->shape, (int)node->ints[0], &outer, &n, &inner);
        if (outer * n * inner > 0)
            sm_backward(tn_data(yc), tn_data(gc), tn_data(gi), outer, n, inner, log);
    }
    tn_release(yc);
    tn_release(gc);
    grad_inputs[0] = gi;
    return gi ? 0 : tn_last_error();
}

static int softmax_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    return sm_backward_common(node, g, grad_inputs, false);
}

static int log_softmax_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    return sm_backward_common(node, g, grad_inputs, true);
}

static const tn_node_kind softmax_kind = {"softmax", "softmax_backward", softmax_backward};
static const tn_node_kind log_softmax_kind = {"log_softmax", "log_softmax_backward",
                                              log_softmax_backward};

/* ---- forward -------------------------------------------------------------------------------- */

static tn_tensor *sm_forward_op(const tn_node_kind *kind, bool log, tn_tensor *x, int dim)
{
    if (tn__check_arg(kind->name, "x", x))
        return NULL;
    int nd = x->ndim > 0 ? x->ndim : 1; /* a 0-d tensor accepts dim 0 and -1, as in PyTorch */
    if (dim < -nd || dim >= nd) {
        char buf[128];
        return TN__FAIL_NULL(TN_EINVAL, "%s: dim %d out of range for x %s", kind->name, dim,
                             tn__shape_fmt(x->ndim, x->shape, buf, sizeof buf));
    }
    int d = dim < 0 ? dim + nd : dim;
    tn_tensor *out = tn__new_output(x->ndim, x->shape, kind->name);
    if (!out)
        return NULL;
    int64_t outer, n, inner;
    sm_dims(x->ndim, x->shape, d, &outer, &n, &inner);
    if (outer * n * inner > 0 && inner == 1 && tn_is_contiguous(x)) {
        sm_rows(tn_data_const(x), tn_data(out), outer, n, log, 1.0f); /* no copy of x first */
    } else if (outer * n * inner > 0) {
        sm_gather(x, tn_data(out));
        sm_forward(tn_data(out), outer, n, inner, log);
    }
    if (!tn__grad_needed(1, &x))
        return out;
    tn_node *node = tn__node_new(kind, out, 1, &x);
    if (!node || tn__save(node, out) < 0) {
        tn_release(out);
        return NULL;
    }
    node->ints[0] = d;
    return out;
}

tn_tensor *tn_softmax(tn_tensor *x, int dim)
{
    return sm_forward_op(&softmax_kind, false, x, dim);
}

tn_tensor *tn_log_softmax(tn_tensor *x, int dim)
{
    return sm_forward_op(&log_softmax_kind, true, x, dim);
}

int tn__softmax_scaled_(tn_tensor *t, float scale)
{
    int64_t n = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    int64_t numel = tn_numel(t);
    if (numel > 0)
        sm_rows(tn_data(t), tn_data(t), numel / n, n, false, scale);
    tn__bump_version(t);
    return 0;
}
