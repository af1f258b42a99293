/*
 * Convolution and pooling over images x [N, C, H, W] (output size floor((H + 2p - k) / s) + 1).
 *
 * conv2d lowers each image to columns (im2col) and multiplies by the weight with one sgemm per
 * image. The column buffer is TEMPORARY scratch for one image at a time, freed before the op
 * returns; backward rebuilds the columns from the saved x rather than keeping them, so the graph
 * holds x and weight only (what PyTorch's ConvolutionBackward saves).
 *
 * max_pool2d saves x only and recomputes each window's argmax in backward. PyTorch instead saves an
 * int64 index buffer [N, C, Ho, Wo] (twice the output's bytes) next to x; recomputing costs one
 * more pass over x in backward and saves that buffer. Ties and NaN pick the same element as
 * PyTorch's CPU kernel (first maximum in row-major order; a NaN wins). avg_pool2d counts padding in
 * the divisor (count_include_pad=true, PyTorch's default) and saves nothing but shapes.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

#define SHAPE_BUF 192

/* ---- helpers -------------------------------------------------------------------------------- */

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* A zero-filled output of `op` (tagged GRADIENT when made inside a backward). */
static tn_tensor *zeros_output(int ndim, const int64_t *shape, const char *op)
{
    tn_tensor *t = tn__new_output(ndim, shape, op);
    if (t)
        memset(tn_data(t), 0, (size_t)tn_numel(t) * sizeof(float));
    return t;
}

/* Window geometry of one image: input [C, H, W] with element strides (sc, sh, sw), a kh x kw
 * kernel moved by `stride` over the input padded by `pad`, giving Ho x Wo positions. */
typedef struct geom {
    int64_t C, H, W;
    int64_t sc, sh, sw;
    int64_t kh, kw, stride, pad;
    int64_t Ho, Wo;
} geom;

static void geom_init(geom *g, const int64_t *xshape, const int64_t *xstrides, int64_t kh,
                      int64_t kw, int64_t stride, int64_t pad)
{
    g->C = xshape[1];
    g->H = xshape[2];
    g->W = xshape[3];
    if (xstrides) {
        g->sc = xstrides[1];
        g->sh = xstrides[2];
        g->sw = xstrides[3];
    } else {
        g->sc = g->H * g->W;
        g->sh = g->W;
        g->sw = 1;
    }
    g->kh = kh;
    g->kw = kw;
    g->stride = stride;
    g->pad = pad;
    g->Ho = (g->H + 2 * pad - kh) / stride + 1;
    g->Wo = (g->W + 2 * pad - kw) / stride + 1;
}

/* The output columns [lo, hi) whose input column ow * stride - pad + j lies inside [0, W). */
static void col_range(const geom *g, int64_t j, int64_t *lo, int64_t *hi)
{
    int64_t t = g->pad - j, u = g->W - 1 + g->pad - j;
    int64_t h = u < 0 ? 0 : min64(u / g->stride + 1, g->Wo);
    int64_t l = t <= 0 ? 0 : (t + g->stride - 1) / g->stride;
    *lo = min64(l, h);
    *hi = h;
}

/* cols [C*kh*kw, Ho*Wo] from one image x (strides of g); zeros where the kernel is over padding. */
static void im2col(const geom *g, const float *x, float *cols)
{
    int64_t step = g->stride * g->sw;
    for (int64_t c = 0; c < g->C; c++) {
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                float *dst = cols + ((c * g->kh + i) * g->kw + j) * g->Ho * g->Wo;
                int64_t lo, hi;
                col_range(g, j, &lo, &hi);
                for (int64_t oh = 0; oh < g->Ho; oh++, dst += g->Wo) {
                    int64_t ih = oh * g->stride - g->pad + i;
                    if (ih < 0 || ih >= g->H || lo == hi) {
                        memset(dst, 0, (size_t)g->Wo * sizeof(float));
                        continue;
                    }
                    const float *src =
                        x + c * g->sc + ih * g->sh + (lo * g->stride - g->pad + j) * g->sw;
                    for (int64_t ow = 0; ow < lo; ow++)
                        dst[ow] = 0.0f;
                    if (step == 1)
                        memcpy(dst + lo, src, (size_t)(hi - lo) * sizeof(float));
                    else
                        for (int64_t ow = lo; ow < hi; ow++, src += step)
                            dst[ow] = *src;
                    for (int64_t ow = hi; ow < g->Wo; ow++)
                        dst[ow] = 0.0f;
                }
            }
        }
    }
}

/* Adds cols [C*kh*kw, Ho*Wo] back into one contiguous image gx [C, H, W] (the adjoint of im2col).
 */
static void col2im(const geom *g, const float *cols, float *gx)
{
    for (int64_t c = 0; c < g->C; c++) {
        for (int64_t i = 0; i < g->kh; i++) {
            for (int64_t j = 0; j < g->kw; j++) {
                const float *src = cols + ((c * g->kh + i) * g->kw + j) * g->Ho * g->Wo;
                int64_t lo, hi;
                col_range(g, j, &lo, &hi);
                for (int64_t oh = 0; oh < g->Ho; oh++, src += g->Wo) {
                    int64_t ih = oh * g->stride - g->pad + i;
                    if (ih < 0 || ih >= g->H || lo == hi)
                        continue;
                    float *dst = gx + (c * g->H + ih) * g->W + (lo * g->stride - g->pad + j);
                    if (g->stride == 1) /* a unit stride vectorises */
                        for (int64_t ow = lo; ow < hi; ow++)
                            dst[ow - lo] += src[ow];
                    else
                        for (int64_t ow = lo; ow < hi; ow++, dst += g->stride)
                            *dst += src[ow];
                }
            }
        }
    }
}

/* ---- conv2d --------------------------------------------------------------------------------- */

/* Node parameters. */
enum { CONV_SLOT_X = 0, CONV_SLOT_W = 1, CONV_STRIDE = 2, CONV_PAD = 3 };

static int conv2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs);

static const tn_node_kind conv2d_kind = {"conv2d", "conv2d_backward", conv2d_backward};

/* Whether a 1x1, stride 1, unpadded conv can multiply a contiguous x directly (no im2col). */
static bool conv_is_pointwise(const geom *g, bool x_contiguous)
{
    return x_contiguous && g->kh == 1 && g->kw == 1 && g->stride == 1 && g->pad == 0;
}

static int conv2d_check(tn_tensor *x, tn_tensor *weight, tn_tensor *bias, int stride, int padding)
{
    char sx[SHAPE_BUF], sw[SHAPE_BUF], sb[SHAPE_BUF];
    if (tn__check_arg("conv2d", "x", x) || tn__check_arg("conv2d", "weight", weight))
        return -1;
    tn_shape_str(x, sx, sizeof sx);
    tn_shape_str(weight, sw, sizeof sw);
    if (x->ndim != 4)
        return tn__error(TN_ESHAPE, "conv2d: x %s must be 4-D [N, C, H, W] (weight %s)", sx, sw);
    if (weight->ndim != 4)
        return tn__error(TN_ESHAPE, "conv2d: weight %s must be 4-D [O, C, kh, kw] (x %s)", sw, sx);
    if (weight->shape[1] != x->shape[1])
        return tn__error(TN_ESHAPE, "conv2d: x %s has %lld channels but weight %s expects %lld", sx,
                         (long long)x->shape[1], sw, (long long)weight->shape[1]);
    if (tn_numel(weight) == 0)
        return tn__error(TN_ESHAPE, "conv2d: weight %s has a zero-size dim (x %s)", sw, sx);
    if (stride <= 0)
        return tn__error(TN_EINVAL, "conv2d: stride %d must be positive (x %s, weight %s)", stride,
                         sx, sw);
    if (padding < 0)
        return tn__error(TN_EINVAL, "conv2d: padding %d must not be negative (x %s, weight %s)",
                         padding, sx, sw);
    int64_t ph = x->shape[2] + 2 * (int64_t)padding, pw = x->shape[3] + 2 * (int64_t)padding;
    if (weight->shape[2] > ph || weight->shape[3] > pw)
        return tn__error(TN_ESHAPE,
                         "conv2d: kernel %lldx%lld of weight %s is larger than the padded input "
                         "%lldx%lld of x %s (padding %d)",
                         (long long)weight->shape[2], (long long)weight->shape[3], sw,
                         (long long)ph, (long long)pw, sx, padding);
    if (bias && (bias->ndim != 1 || bias->shape[0] != weight->shape[0]))
        return tn__error(TN_ESHAPE, "conv2d: bias %s does not match weight %s (want [%lld])",
                         tn_shape_str(bias, sb, sizeof sb), sw, (long long)weight->shape[0]);
    int64_t k = weight->shape[1] * weight->shape[2] * weight->shape[3];
    int64_t p = ((ph - weight->shape[2]) / stride + 1) * ((pw - weight->shape[3]) / stride + 1);
    if (k > INT_MAX || p > INT_MAX || weight->shape[0] > INT_MAX)
        return tn__error(TN_EINVAL, "conv2d: x %s and weight %s are too large for BLAS", sx, sw);
    return 0;
}

tn_tensor *tn_conv2d(tn_tensor *x, tn_tensor *weight, tn_tensor *bias, int stride, int padding)
{
    if (conv2d_check(x, weight, bias, stride, padding))
        return NULL;
    geom g;
    geom_init(&g, x->shape, x->strides, weight->shape[2], weight->shape[3], stride, padding);
    int64_t N = x->shape[0], O = weight->shape[0];
    int64_t K = g.C * g.kh * g.kw, P = g.Ho * g.Wo;
    int64_t oshape[4] = {N, O, g.Ho, g.Wo};
    tn_tensor *out = tn__new_output(4, oshape, "conv2d");
    if (!out)
        return NULL;

    tn_tensor *wc = tn__contiguous_scratch(weight, "conv2d"); /* W [O, K] */
    if (!wc)
        goto fail;
    bool pointwise = conv_is_pointwise(&g, tn_is_contiguous(x));
    size_t cols_bytes = (size_t)(K * P) * sizeof(float);
    float *cols = NULL; /* [K, P], one image at a time */
    if (!pointwise && N > 0 &&
        !(cols = tn__alloc(cols_bytes, LP_CAT_TEMPORARY, "conv2d", "im2col"))) {
        tn_release(wc);
        goto fail;
    }
    const float *xd = tn_data_const(x), *wd = tn_data_const(wc),
                *bd = bias ? tn_data_const(bias) : NULL;
    float *od = tn_data(out);
    for (int64_t n = 0; n < N; n++) {
        /* out[n] [O, P] = bias broadcast (or 0) + W [O, K] @ cols [K, P]. */
        float *on = od + n * O * P;
        if (bd)
            for (int64_t o = 0; o < O; o++) {
                float b = bd[o * bias->strides[0]];
                for (int64_t i = 0; i < P; i++)
                    on[o * P + i] = b;
            }
        const float *xn = xd + n * x->strides[0];
        if (!pointwise)
            im2col(&g, xn, cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)O, (int)P, (int)K, 1.0f, wd,
                    (int)K, pointwise ? xn : cols, (int)P, bd ? 1.0f : 0.0f, on, (int)P);
    }
    if (cols)
        tn__free(cols, cols_bytes, LP_CAT_TEMPORARY);
    tn_release(wc);

    tn_tensor *inputs[3] = {x, weight, bias};
    int ni = bias ? 3 : 2;
    if (tn__grad_needed(ni, inputs)) {
        tn_node *node = tn__node_new(&conv2d_kind, out, ni, inputs);
        if (!node)
            goto fail;
        node->ints[CONV_STRIDE] = stride;
        node->ints[CONV_PAD] = padding;
        /* x and weight, as PyTorch saves them; backward reads only the ones it needs. */
        if ((node->ints[CONV_SLOT_X] = tn__save(node, x)) < 0 ||
            (node->ints[CONV_SLOT_W] = tn__save(node, weight)) < 0)
            goto fail;
    }
    return out;
fail:
    tn_release(out);
    return NULL;
}

/* G [N, O, Ho, Wo], per image n with G_n [O, P]:
 *   grad_W [O, K] += G_n @ im2col(x_n)^T;  grad_x_n = col2im(W^T [K, O] @ G_n);  grad_b[o] += sum
 * G_n[o]. */
static int conv2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs)
{
    const tn_node_input *ix = &node->inputs[0], *iw = &node->inputs[1];
    bool need_x = tn__input_needs_grad(node, 0), need_w = tn__input_needs_grad(node, 1);
    bool need_b = node->n_inputs > 2 && tn__input_needs_grad(node, 2);
    int64_t N = ix->shape[0], O = iw->shape[0];
    int rc = 0;
    tn_tensor *x = NULL, *w = NULL, *wc = NULL, *gx = NULL, *gw = NULL, *gb = NULL;
    float *cols = NULL;
    size_t cols_bytes = 0;

    if (need_w && !(x = tn__saved(node, (int)node->ints[CONV_SLOT_X])))
        goto fail;
    if (need_x && (!(w = tn__saved(node, (int)node->ints[CONV_SLOT_W])) ||
                   !(wc = tn__contiguous_scratch(w, "conv2d"))))
        goto fail;
    geom g;
    geom_init(&g, ix->shape, x ? x->strides : NULL, iw->shape[2], iw->shape[3],
              node->ints[CONV_STRIDE], node->ints[CONV_PAD]);
    int64_t K = g.C * g.kh * g.kw, P = g.Ho * g.Wo;
    bool pointwise = conv_is_pointwise(&g, !x || tn_is_contiguous(x));

    if ((need_x && !(gx = zeros_output(ix->ndim, ix->shape, "conv2d"))) ||
        (need_w && !(gw = zeros_output(iw->ndim, iw->shape, "conv2d"))) ||
        (need_b && !(gb = zeros_output(1, &O, "conv2d"))))
        goto fail;
    if ((need_x || need_w) && !pointwise && N > 0) {
        cols_bytes = (size_t)(K * P) * sizeof(float);
        if (!(cols = tn__alloc(cols_bytes, LP_CAT_TEMPORARY, "conv2d", "im2col")))
            goto fail;
    }

    const float *gd = tn_data_const(grad_out);
    for (int64_t n = 0; n < N; n++) {
        const float *gn = gd + n * O * P; /* G_n [O, P] */
        if (need_b) {
            float *b = tn_data(gb);
            for (int64_t o = 0; o < O; o++)
                b[o] += tn__lane_sum(gn + o * P, P, 0.0f, false);
        }
        if (need_w) {
            const float *xn = tn_data_const(x) + n * x->strides[0];
            if (!pointwise)
                im2col(&g, xn, cols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)O, (int)K, (int)P, 1.0f, gn,
                        (int)P, pointwise ? xn : cols, (int)P, 1.0f, tn_data(gw), (int)K);
        }
        if (need_x) {
            /* Pointwise: the columns are the image itself, so write grad_x_n directly. */
            float *gxn = tn_data(gx) + n * g.C * g.H * g.W;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)K, (int)P, (int)O, 1.0f,
                        tn_data_const(wc), (int)K, gn, (int)P, 0.0f, pointwise ? gxn : cols,
                        (int)P);
            if (!pointwise)
                col2im(&g, cols, gxn);
        }
    }
    grad_inputs[0] = gx;
    grad_inputs[1] = gw;
    if (need_b)
        grad_inputs[2] = gb;
    gx = gw = gb = NULL;
    goto done;
fail:
    rc = tn__pending_error();
done:
    if (cols)
        tn__free(cols, cols_bytes, LP_CAT_TEMPORARY);
    tn_release(x);
    tn_release(w);
    tn_release(wc);
    tn_release(gx);
    tn_release(gw);
    tn_release(gb);
    return rc;
}

/* ---- pooling -------------------------------------------------------------------------------- */

/* Node parameters. */
enum { POOL_KERNEL = 0, POOL_STRIDE = 1, POOL_PAD = 2, POOL_SLOT_X = 3 };

static int max_pool2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs);
static int avg_pool2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs);

static const tn_node_kind max_pool2d_kind = {"max_pool2d", "max_pool2d_backward",
                                             max_pool2d_backward};
static const tn_node_kind avg_pool2d_kind = {"avg_pool2d", "avg_pool2d_backward",
                                             avg_pool2d_backward};

static int pool_check(const char *op, tn_tensor *x, int kernel, int stride, int padding)
{
    char sx[SHAPE_BUF];
    if (tn__check_arg(op, "x", x))
        return -1;
    tn_shape_str(x, sx, sizeof sx);
    if (x->ndim != 4)
        return tn__error(TN_ESHAPE, "%s: x %s must be 4-D [N, C, H, W]", op, sx);
    if (kernel <= 0)
        return tn__error(TN_EINVAL, "%s: kernel %d must be positive (x %s)", op, kernel, sx);
    if (stride <= 0)
        return tn__error(TN_EINVAL, "%s: stride %d must be positive (x %s)", op, stride, sx);
    if (padding < 0)
        return tn__error(TN_EINVAL, "%s: padding %d must not be negative (x %s)", op, padding, sx);
    if (padding > kernel / 2)
        return tn__error(TN_EINVAL, "%s: padding %d must be at most half the kernel %d (x %s)", op,
                         padding, kernel, sx);
    int64_t ph = x->shape[2] + 2 * (int64_t)padding, pw = x->shape[3] + 2 * (int64_t)padding;
    if (kernel > ph || kernel > pw)
        return tn__error(TN_ESHAPE,
                         "%s: kernel %d is larger than the padded input %lldx%lld of x %s "
                         "(padding %d)",
                         op, kernel, (long long)ph, (long long)pw, sx, padding);
    return 0;
}

/* The clipped window of output (oh, ow): rows [*h0, *h1), columns [*w0, *w1). Never empty, since
 * padding <= kernel / 2. */
static void pool_window(const geom *g, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                        int64_t *w0, int64_t *w1)
{
    int64_t hs = oh * g->stride - g->pad, ws = ow * g->stride - g->pad;
    *h0 = max64(hs, 0);
    *h1 = min64(hs + g->kh, g->H);
    *w0 = max64(ws, 0);
    *w1 = min64(ws + g->kw, g->W);
}

/* The maximum of x's window, NaN if it holds one. Branch-free (maxss plus an unordered flag), since
 * comparisons on activations are unpredictable. */
static float window_max(const geom *g, const float *xp, int64_t h0, int64_t h1, int64_t w0,
                        int64_t w1)
{
    float best = -INFINITY;
    int nan = 0;
    for (int64_t h = h0; h < h1; h++) {
        const float *row = xp + h * g->sh;
        for (int64_t w = w0; w < w1; w++) {
            float v = row[w * g->sw];
            best = v > best ? v : best;
            nan |= v != v;
        }
    }
    return nan ? NAN : best;
}

/* The max pools' rule, in every path: v replaces the best so far when greater, or NaN (so a window
 * gives its first maximum, or its last NaN). */
static inline bool pool_takes(float v, float best) { return (v > best) | (v != v); }

/* The position (h * W + w) of the window's maximum, as PyTorch's CPU kernel picks it: the first
 * maximum in row-major order, or the last NaN. One pass, without branches on the values (a later
 * element is taken when it is greater, or NaN): comparisons on activations are unpredictable. */
static int64_t window_argmax(const geom *g, const float *xp, int64_t h0, int64_t h1, int64_t w0,
                             int64_t w1)
{
    int64_t best_at = h0 * g->W + w0;
    float best = xp[h0 * g->sh + w0 * g->sw];
    for (int64_t h = h0; h < h1; h++) {
        const float *row = xp + h * g->sh;
        for (int64_t w = h == h0 ? w0 + 1 : w0; w < w1; w++) {
            float v = row[w * g->sw];
            bool take = pool_takes(v, best);
            best = take ? v : best;
            best_at = take ? h * g->W + w : best_at;
        }
    }
    return best_at;
}

/* The output columns [*lo, *hi) whose window lies wholly inside [0, W) (lo <= hi; empty when no
 * window does). */
static void pool_interior(const geom *g, int64_t *lo, int64_t *hi)
{
    int64_t l = (g->pad + g->stride - 1) / g->stride;
    int64_t h = g->W + g->pad - g->kw < 0 ? 0 : (g->W + g->pad - g->kw) / g->stride + 1;
    *hi = min64(h, g->Wo);
    *lo = min64(l, *hi);
}

/* One output of a pool over the clipped window of (oh, ow): its max (NaN if it holds one) or its
 * sum times `inv`. */
static float pool_one(const geom *g, const float *xp, int64_t oh, int64_t ow, bool is_max,
                      float inv)
{
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
    if (is_max)
        return window_max(g, xp, h0, h1, w0, w1);
    float v = 0.0f;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++)
            v += xp[h * g->sh + w * g->sw];
    return v * inv;
}

/* o[i] = max(o[i], x[i * step]) for i < n, NaN-sticky (a NaN x or o stays NaN), or o[i] += x[i *
 * step]. Inlined with a constant step, so GCC vectorises the unit and stride-2 cases. */
static inline void pool_accumulate(float *restrict o, const float *restrict x, int64_t n,
                                   int64_t step, bool is_max)
{
    if (is_max) {
        for (int64_t i = 0; i < n; i++) {
            float v = x[i * step];
            o[i] = pool_takes(v, o[i]) ? v : o[i];
        }
    } else {
        for (int64_t i = 0; i < n; i++)
            o[i] += x[i * step];
    }
}

/* Output row oh, columns [lo, hi), all windows inside [0, W) horizontally: the same values as
 * pool_one (the window visited row by row, left to right, the same ties and sum order), but
 * computed a kernel element at a time over the whole row, which vectorises. */
static void pool_row(const geom *g, const float *xp, int64_t oh, int64_t lo, int64_t hi,
                     bool is_max, float inv, float *orow)
{
    if (lo >= hi)
        return;
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, lo, &h0, &h1, &w0, &w1);
    int64_t n = hi - lo, step = g->stride * g->sw;
    float *o = orow + lo;
    for (int64_t i = 0; i < n; i++)
        o[i] = is_max ? -INFINITY : 0.0f;
    for (int64_t h = h0; h < h1; h++) {
        for (int64_t j = 0; j < g->kw; j++) {
            const float *x = xp + h * g->sh + (w0 + j) * g->sw;
            if (step == 1)
                pool_accumulate(o, x, n, 1, is_max);
            else if (step == 2)
                pool_accumulate(o, x, n, 2, is_max);
            else
                pool_accumulate(o, x, n, step, is_max);
        }
    }
    if (!is_max)
        for (int64_t i = 0; i < n; i++)
            o[i] *= inv;
}

/* Whether a max pool is 2x2 with stride 2, unpadded, over rows of unit stride: the CNNs' pool,
 * whose windows tile the input; max_pool_2x2_row and max_pool_2x2_row_backward do it without the
 * general path's per-row setup (rows are short there: 8 to 32 outputs). */
static bool max_pool_is_2x2(const geom *g)
{
    return g->kh == 2 && g->kw == 2 && g->stride == 2 && g->pad == 0 && g->sw == 1;
}

/* Output row of a 2x2 pool from input rows x0 and x1: the same values as pool_row (each window
 * visited row by row, left to right, by the same rule). */
static void max_pool_2x2_row(const float *restrict x0, const float *restrict x1, int64_t wo,
                             float *restrict o)
{
    for (int64_t i = 0; i < wo; i++) {
        float best = x0[2 * i], v = x0[2 * i + 1];
        best = pool_takes(v, best) ? v : best;
        v = x1[2 * i];
        best = pool_takes(v, best) ? v : best;
        v = x1[2 * i + 1];
        o[i] = pool_takes(v, best) ? v : best;
    }
}

static tn_tensor *pool_forward(const tn_node_kind *kind, tn_tensor *x, int kernel, int stride,
                               int padding)
{
    const char *op = kind->name;
    bool is_max = kind == &max_pool2d_kind;
    if (pool_check(op, x, kernel, stride, padding))
        return NULL;
    geom g;
    geom_init(&g, x->shape, x->strides, kernel, kernel, stride, padding);
    int64_t N = x->shape[0];
    int64_t oshape[4] = {N, g.C, g.Ho, g.Wo};
    tn_tensor *out = tn__new_output(4, oshape, op);
    if (!out)
        return NULL;
    const float *xd = tn_data_const(x);
    float *od = tn_data(out);
    /* count_include_pad: the divisor is always the full kernel. */
    float inv = 1.0f / ((float)kernel * (float)kernel);
    int64_t lo, hi;
    pool_interior(&g, &lo, &hi);
    bool max_2x2 = is_max && max_pool_is_2x2(&g);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t c = 0; c < g.C; c++) {
            const float *xp = xd + n * x->strides[0] + c * g.sc;
            float *orow = od + (n * g.C + c) * g.Ho * g.Wo;
            for (int64_t oh = 0; oh < g.Ho; oh++, orow += g.Wo) {
                if (max_2x2) {
                    const float *x0 = xp + 2 * oh * g.sh;
                    max_pool_2x2_row(x0, x0 + g.sh, g.Wo, orow);
                    continue;
                }
                for (int64_t ow = 0; ow < lo; ow++)
                    orow[ow] = pool_one(&g, xp, oh, ow, is_max, inv);
                pool_row(&g, xp, oh, lo, hi, is_max, inv, orow);
                for (int64_t ow = hi; ow < g.Wo; ow++)
                    orow[ow] = pool_one(&g, xp, oh, ow, is_max, inv);
            }
        }
    }

    tn_tensor *inputs[1] = {x};
    if (tn__grad_needed(1, inputs)) {
        tn_node *node = tn__node_new(kind, out, 1, inputs);
        if (!node)
            goto fail;
        node->ints[POOL_KERNEL] = kernel;
        node->ints[POOL_STRIDE] = stride;
        node->ints[POOL_PAD] = padding;
        node->ints[POOL_SLOT_X] = -1;
        /* max: x only, to recompute the argmax (see the top of this file); avg: nothing. */
        if (is_max && (node->ints[POOL_SLOT_X] = tn__save(node, x)) < 0)
            goto fail;
    }
    return out;
fail:
    tn_release(out);
    return NULL;
}

tn_tensor *tn_max_pool2d(tn_tensor *x, int kernel, int stride, int padding)
{
    return pool_forward(&max_pool2d_kind, x, kernel, stride, padding);
}

tn_tensor *tn_avg_pool2d(tn_tensor *x, int kernel, int stride, int padding)
{
    return pool_forward(&avg_pool2d_kind, x, kernel, stride, padding);
}

/* For i < n: take x[i * step] as window i's best if it is greater than best[i], or NaN, and then
 * its position base + i * stride as at[i] (window_argmax's rule, one element of every window at a
 * time). Inlined with a constant step, so GCC vectorises the unit and stride-2 cases. */
static inline void argmax_accumulate(float *restrict best, int32_t *restrict at,
                                     const float *restrict x, int64_t n, int64_t step, int32_t base,
                                     int32_t stride)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i * step];
        bool take = pool_takes(v, best[i]);
        best[i] = take ? v : best[i];
        at[i] = take ? base + (int32_t)i * stride : at[i];
    }
}

#define POOL_CHUNK 128 /* windows of a row done together by max_pool_row_backward */

/* Output row oh, columns [lo, hi), all windows inside [0, W) horizontally: each window's argmax as
 * window_argmax picks it (the window visited row by row, left to right), but computed a kernel
 * element at a time over a chunk of the row, which vectorises; its gradient grow[ow] goes to gxp
 * (contiguous [H, W]). Positions are int32: the caller checks that H * W fits. */
static void max_pool_row_backward(const geom *g, const float *xp, int64_t oh, int64_t lo,
                                  int64_t hi, const float *grow, float *gxp)
{
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, lo, &h0, &h1, &w0, &w1);
    int64_t step = g->stride * g->sw;
    float best[POOL_CHUNK];
    int32_t at[POOL_CHUNK];
    for (int64_t c0 = lo; c0 < hi; c0 += POOL_CHUNK) {
        int64_t n = min64(POOL_CHUNK, hi - c0), ws = w0 + (c0 - lo) * g->stride;
        for (int64_t i = 0; i < n; i++) {
            best[i] = -INFINITY; /* not taken over: the window's first element stays at[i] */
            at[i] = (int32_t)(h0 * g->W + ws + i * g->stride);
        }
        for (int64_t h = h0; h < h1; h++) {
            for (int64_t j = 0; j < g->kw; j++) {
                const float *x = xp + h * g->sh + (ws + j) * g->sw;
                int32_t base = (int32_t)(h * g->W + ws + j), st = (int32_t)g->stride;
                if (step == 1)
                    argmax_accumulate(best, at, x, n, 1, base, st);
                else if (step == 2)
                    argmax_accumulate(best, at, x, n, 2, base, st);
                else
                    argmax_accumulate(best, at, x, n, step, base, st);
            }
        }
        for (int64_t i = 0; i < n; i++)
            gxp[at[i]] += grow[c0 + i];
    }
}

/* Input rows g0 and g1 of the gradient of a 2x2 pool whose windows cover the input (H and W even):
 * each window's gradient grow[i] at its argmax as window_argmax picks it, 0 at its other three
 * elements; every element is written, so g0 and g1 need not be zeroed first. 0 + g, as the
 * general path adds g to a zeroed gradient (-0 becomes +0). */
static void max_pool_2x2_row_backward(const float *restrict x0, const float *restrict x1,
                                      int64_t wo, const float *restrict grow, float *restrict g0,
                                      float *restrict g1)
{
    for (int64_t i = 0; i < wo; i++) {
        float a = x0[2 * i], b = x0[2 * i + 1], c = x1[2 * i], g = 0.0f + grow[i];
        bool take_b = pool_takes(b, a);
        float best = take_b ? b : a;
        bool take_c = pool_takes(c, best);
        best = take_c ? c : best;
        bool take_d = pool_takes(x1[2 * i + 1], best);
        /* The last element taken gets g: from d back to a, each keeps g from the ones before. */
        g1[2 * i + 1] = take_d ? g : 0.0f;
        g = take_d ? 0.0f : g;
        g1[2 * i] = take_c ? g : 0.0f;
        g = take_c ? 0.0f : g;
        g0[2 * i + 1] = take_b ? g : 0.0f;
        g0[2 * i] = take_b ? 0.0f : g;
    }
}

/* Output (oh, ow)'s gradient `grad` added at its window's argmax in gxp (contiguous [H, W]). */
static void max_pool_one_backward(const geom *g, const float *xp, int64_t oh, int64_t ow,
                                  float grad, float *gxp)
{
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
    gxp[window_argmax(g, xp, h0, h1, w0, w1)] += grad;
}

/* grad_x [N, C, H, W]: each output's gradient goes to its window's (recomputed) argmax. */
static int max_pool2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs)
{
    const tn_node_input *ix = &node->inputs[0];
    tn_tensor *x = tn__saved(node, (int)node->ints[POOL_SLOT_X]);
    if (!x)
        return tn__pending_error();
    geom g;
    int64_t k = node->ints[POOL_KERNEL];
    geom_init(&g, x->shape, x->strides, k, k, node->ints[POOL_STRIDE], node->ints[POOL_PAD]);
    bool tiled = max_pool_is_2x2(&g) && g.H % 2 == 0 && g.W % 2 == 0; /* every element written */
    tn_tensor *gx = tiled ? tn__new_output(ix->ndim, ix->shape, "max_pool2d")
                          : zeros_output(ix->ndim, ix->shape, "max_pool2d");
    if (!gx) {
        tn_release(x);
        return tn__pending_error();
    }
    const float *xd = tn_data_const(x), *gd = tn_data_const(grad_out);
    float *gxd = tn_data(gx);
    int64_t lo, hi;
    pool_interior(&g, &lo, &hi);
    if (g.H * g.W > INT32_MAX)
        lo = hi = 0; /* positions past int32: every window by window_argmax */
    for (int64_t n = 0; n < x->shape[0]; n++) {
        for (int64_t c = 0; c < g.C; c++) {
            const float *xp = xd + n * x->strides[0] + c * g.sc;
            const float *gp = gd + (n * g.C + c) * g.Ho * g.Wo;
            float *gxp = gxd + (n * g.C + c) * g.H * g.W;
            for (int64_t oh = 0; oh < g.Ho; oh++, gp += g.Wo) {
                if (tiled) {
                    const float *x0 = xp + 2 * oh * g.sh;
                    float *g0 = gxp + 2 * oh * g.W;
                    max_pool_2x2_row_backward(x0, x0 + g.sh, g.Wo, gp, g0, g0 + g.W);
                    continue;
                }
                for (int64_t ow = 0; ow < lo; ow++)
                    max_pool_one_backward(&g, xp, oh, ow, gp[ow], gxp);
                max_pool_row_backward(&g, xp, oh, lo, hi, gp, gxp);
                for (int64_t ow = hi; ow < g.Wo; ow++)
                    max_pool_one_backward(&g, xp, oh, ow, gp[ow], gxp);
            }
        }
    }
    tn_release(x);
    grad_inputs[0] = gx;
    return 0;
}

/* grad_x [N, C, H, W]: each output's gradient / kernel^2 goes to every input of its window. */
static int avg_pool2d_backward(tn_node *node, tn_tensor *grad_out, tn_tensor **grad_inputs)
{
    const tn_node_input *ix = &node->inputs[0];
    tn_tensor *gx = zeros_output(ix->ndim, ix->shape, "avg_pool2d");
    if (!gx)
        return tn__pending_error();
    geom g;
    int64_t k = node->ints[POOL_KERNEL];
    geom_init(&g, ix->shape, NULL, k, k, node->ints[POOL_STRIDE], node->ints[POOL_PAD]);
    float inv = 1.0f / ((float)k * (float)k);
    const float *gd = tn_data_const(grad_out);
    float *gxd = tn_data(gx);
    for (int64_t p = 0; p < ix->shape[0] * g.C; p++) {
        const float *gp = gd + p * g.Ho * g.Wo;
        float *gxp = gxd + p * g.H * g.W;
        for (int64_t oh = 0; oh < g.Ho; oh++) {
            for (int64_t ow = 0; ow < g.Wo; ow++) {
                int64_t h0, h1, w0, w1;
                pool_window(&g, oh, ow, &h0, &h1, &w0, &w1);
                float v = gp[oh * g.Wo + ow] * inv;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++)
                        gxp[h * g.W + w] += v;
            }
        }
    }
    grad_inputs[0] = gx;
    return 0;
}
