/*
 * Normalisation layers: layer_norm and batch_norm.
 *
 * What is saved follows PyTorch's native kernels: layer_norm keeps x, weight and the per-row mean
 * and 1/std (small tensors made here, so they are tagged SAVED through tn__save); batch_norm keeps
 * x, weight and, in training, the per-channel batch mean and 1/std, in eval the running statistics
 * themselves (a later in-place update of them makes that backward fail with TN_EVERSION, as in
 * PyTorch). Inputs may be non-contiguous: they are read through a contiguous TEMPORARY copy.
 */
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* Checks that an optional per-feature tensor (weight, bias, running stats) is 1-D of size n. */
static int norm_check_vec(const char *op, const char *what, const tn_tensor *v, int64_t n,
                          const tn_tensor *x)
{
    if (!v || (v->ndim == 1 && v->shape[0] == n))
        return 0;
    char bv[96], bx[96];
    return tn__error(TN_ESHAPE, "%s: %s %s does not match x %s (expected [%ld])", op, what,
                     tn_shape_str(v, bv, sizeof bv), tn_shape_str(x, bx, sizeof bx), (long)n);
}

/* Saves t in node and returns its slot in *slot. Returns 0 or a negative code. */
static int norm_save(tn_node *node, tn_tensor *t, int64_t *slot)
{
    int s = tn__save(node, t);
    if (s < 0)
        return s;
    *slot = s;
    return 0;
}

/* Releases a failed backward's partial results and returns rc. */
static int norm_fail(int rc, tn_tensor **grad_inputs, int n)
{
    for (int i = 0; i < n; i++) {
        tn_release(grad_inputs[i]);
        grad_inputs[i] = NULL;
    }
    return rc;
}

/* Node parameters shared by both ops. ints: [0] x slot, [1] mean slot, [2] rstd (or running_var)
 * slot, [3] weight slot (-1 if none), [4] input index of weight (-1), [5] input index of bias (-1),
 * [6] batch_norm: training. floats: [0] eps. */
enum { NI_X, NI_MEAN, NI_RSTD, NI_W, NI_WIN, NI_BIN, NI_TRAIN };

/* Compacts (x, weight, bias) into inputs[], recording the indices of weight and bias; returns n. */
static int norm_inputs(tn_tensor *x, tn_tensor *w, tn_tensor *b, tn_tensor **inputs, int *w_in,
                       int *b_in)
{
    int n = 0;
    inputs[n++] = x;
    *w_in = w ? n : -1;
    if (w)
        inputs[n++] = w;
    *b_in = b ? n : -1;
    if (b)
        inputs[n++] = b;
    return n;
}

/* Records the node of out with inputs (x, weight, bias) and saves x, mean, rstd and weight.
 * Returns 0 or a negative code (out then still owns whatever node was made). */
static int norm_record(const tn_node_kind *kind, tn_tensor *out, tn_tensor *x, tn_tensor *w,
                       tn_tensor *b, tn_tensor *mean, tn_tensor *rstd, bool training, float eps)
{
    tn_tensor *inputs[3];
    int w_in, b_in;
    int n = norm_inputs(x, w, b, inputs, &w_in, &b_in);
    tn_node *node = tn__node_new(kind, out, n, inputs);
    if (!node)
        return tn__pending_error();
    node->ints[NI_W] = -1;
    node->ints[NI_WIN] = w_in;
    node->ints[NI_BIN] = b_in;
    node->ints[NI_TRAIN] = training;
    node->floats[0] = eps;
    int rc = norm_save(node, x, &node->ints[NI_X]);
    if (!rc)
        rc = norm_save(node, mean, &node->ints[NI_MEAN]);
    if (!rc)
        rc = norm_save(node, rstd, &node->ints[NI_RSTD]);
    if (!rc && w)
        rc = norm_save(node, w, &node->ints[NI_W]);
    return rc;
}

/* ---- layer_norm ----------------------------------------------------------------------------- */

/* Backward of y = (x - mean) * rstd * w + b over rows of D, with xhat = (x - mean) * rstd:
 *   dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w * xhat)),  dw = sum_rows g*xhat,
 *   db = sum_rows g. */
static int layer_norm_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    int w_in = (int)node->ints[NI_WIN], b_in = (int)node->ints[NI_BIN];
    int n_in = node->n_inputs;
    bool need_x = tn__input_needs_grad(node, 0);
    bool need_w = w_in >= 0 && tn__input_needs_grad(node, w_in);
    bool need_b = b_in >= 0 && tn__input_needs_grad(node, b_in);
    tn_tensor *xs = NULL, *x = NULL, *mean = NULL, *rstd = NULL, *ws = NULL, *w = NULL;
    tn_tensor *dx = NULL, *dw = NULL, *db = NULL;
    int rc = 0;

    xs = tn__saved(node, (int)node->ints[NI_X]);
    mean = tn__saved(node, (int)node->ints[NI_MEAN]);
    rstd = tn__saved(node, (int)node->ints[NI_RSTD]);
    if (!xs || !mean || !rstd) {
        rc = tn_last_error();
        goto done;
    }
    if (node->ints[NI_W] >= 0 && !(ws = tn__saved(node, (int)node->ints[NI_W]))) {
        rc = tn_last_error();
        goto done;
    }
    x = tn__contiguous_scratch(xs, "layer_norm");
    w = ws ? tn__contiguous_scratch(ws, "layer_norm") : NULL;
    if (!x || (ws && !w)) {
        rc = tn__pending_error();
        goto done;
    }
    const tn_node_input *xin = &node->inputs[0];
    int64_t D = xin->shape[xin->ndim - 1];
    int64_t rows = D ? tn__shape_numel(xin->ndim, xin->shape) / D : 0;
    if (need_x && !(dx = tn__new_output(xin->ndim, xin->shape, "layer_norm"))) {
        rc = tn__pending_error();
        goto done;
    }
    if (need_w && !(dw = tn__new_output(1, &D, "layer_norm"))) {
        rc = tn__pending_error();
        goto done;
    }
    if (need_b && !(db = tn__new_output(1, &D, "layer_norm"))) {
        rc = tn__pending_error();
        goto done;
    }
    if (dw)
        memset(tn_data(dw), 0, (size_t)D * sizeof(float));
    if (db)
        memset(tn_data(db), 0, (size_t)D * sizeof(float));

    const float *xd = tn_data_const(x), *gd = tn_data_const(g);
    const float *md = tn_data_const(mean), *rd = tn_data_const(rstd);
    const float *wd = w ? tn_data_const(w) : NULL;
    float *dxd = dx ? tn_data(dx) : NULL, *dwd = dw ? tn_data(dw) : NULL;
    float *dbd = db ? tn_data(db) : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xd + r * D, *gr = gd + r * D;
        const float mu = md[r], rs = rd[r];
        if (dwd)
            for (int64_t j = 0; j < D; j++)
                dwd[j] += gr[j] * (xr[j] - mu) * rs;
        if (dbd)
            for (int64_t j = 0; j < D; j++)
                dbd[j] += gr[j];
        if (!dxd)
            continue;
        float s1 = 0, s2 = 0;
        for (int64_t j = 0; j < D; j++) {
            float gw = wd ? gr[j] * wd[j] : gr[j];
            s1 += gw;
            s2 += gw * (xr[j] - mu);
        }
        const float m1 = s1 / (float)D, m2 = s2 * rs / (float)D;
        float *dxr = dxd + r * D;
        for (int64_t j = 0; j < D; j++) {
            float gw = wd ? gr[j] * wd[j] : gr[j];
            dxr[j] = rs * (gw - m1 - (xr[j] - mu) * rs * m2);
        }
    }
    grad_inputs[0] = dx;
    if (need_w)
        grad_inputs[w_in] = dw;
    if (need_b)
        grad_inputs[b_in] = db;
    dx = dw = db = NULL;
done:
    tn_release(dx);
    tn_release(dw);
    tn_release(db);
    tn_release(x);
    tn_release(xs);
    tn_release(w);
    tn_release(ws);
    tn_release(mean);
    tn_release(rstd);
    return rc ? norm_fail(rc, grad_inputs, n_in) : 0;
}

static const tn_node_kind layer_norm_kind = {"layer_norm", "layer_norm_backward",
                                             layer_norm_backward};

/* x [..., D], weight [D] or NULL, bias [D] or NULL -> [..., D]; mean and rstd [..., 1] are made
 * only when a node is recorded. */
tn_tensor *tn_layer_norm(tn_tensor *x, tn_tensor *weight, tn_tensor *bias, float eps)
{
    const char *op = "layer_norm";
    if (tn__check_arg(op, "x", x))
        return NULL;
    char bx[96];
    if (x->ndim < 1)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: x %s must have at least one dim", op,
                             tn_shape_str(x, bx, sizeof bx));
    int64_t D = x->shape[x->ndim - 1];
    if (D == 0)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: x %s has an empty last dim", op,
                             tn_shape_str(x, bx, sizeof bx));
    if (!(eps >= 0) || isinf(eps))
        return TN__FAIL_NULL(TN_EINVAL, "%s: eps %g must be finite and >= 0", op, eps);
    if (norm_check_vec(op, "weight", weight, D, x) || norm_check_vec(op, "bias", bias, D, x))
        return NULL;

    tn_tensor *inputs[3];
    int w_in, b_in;
    int n_in = norm_inputs(x, weight, bias, inputs, &w_in, &b_in);
    bool record = tn__grad_needed(n_in, inputs);
    int64_t rows = tn_numel(x) / D;
    int64_t stat_shape[TN_MAX_DIMS];
    memcpy(stat_shape, x->shape, (size_t)x->ndim * sizeof(int64_t));
    stat_shape[x->ndim - 1] = 1;

    tn_tensor *xc = tn__contiguous_scratch(x, op), *wc = NULL, *bc = NULL, *out = NULL;
    tn_tensor *mean = NULL, *rstd = NULL;
    if (!xc || (weight && !(wc = tn__contiguous_scratch(weight, op))) || (bias && !(bc = tn__contiguous_scratch(bias, op))))
        goto fail;
    if (!(out = tn__new_output(x->ndim, x->shape, op)))
        goto fail;
    if (record && (!(mean = tn__new_output(x->ndim, stat_shape, op)) ||
                   !(rstd = tn__new_output(x->ndim, stat_shape, op))))
        goto fail;

    const float *xd = tn_data_const(xc);
    const float *wd = wc ? tn_data_const(wc) : NULL, *bd = bc ? tn_data_const(bc) : NULL;
    float *yd = tn_data(out);
    float *md = mean ? tn_data(mean) : NULL, *rd = rstd ? tn_data(rstd) : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = xd + r * D;
        float *yr = yd + r * D;
        const float mu = tn__lane_sum(xr, D, 0.0f, false) / (float)D;
        const float rs = 1.0f / sqrtf(tn__lane_sum(xr, D, mu, true) / (float)D + eps);
        if (md) {
            md[r] = mu;
            rd[r] = rs;
        }
        if (wd && bd)
            for (int64_t j = 0; j < D; j++)
                yr[j] = (xr[j] - mu) * rs * wd[j] + bd[j];
        else if (wd)
            for (int64_t j = 0; j < D; j++)
                yr[j] = (xr[j] - mu) * rs * wd[j];
        else if (bd)
            for (int64_t j = 0; j < D; j++)
                yr[j] = (xr[j] - mu) * rs + bd[j];
        else
            for (int64_t j = 0; j < D; j++)
                yr[j] = (xr[j] - mu) * rs;
    }
    if (record && norm_record(&layer_norm_kind, out, x, weight, bias, mean, rstd, true, eps))
        goto fail;
    tn_release(xc);
    tn_release(wc);
    tn_release(bc);
    tn_release(mean);
    tn_release(rstd);
    return out;
fail:
    tn_release(xc);
    tn_release(wc);
    tn_release(bc);
    tn_release(mean);
    tn_release(rstd);
    tn_release(out);
    return NULL;
}

/* ---- batch_norm ----------------------------------------------------------------------------- */

/* *sg = sum(g[j]) and *sgx = sum(g[j] * (x[j] - mu)) over j < n, in 8 lanes as tn__lane_sum. */
static void lane_sums_gx(const float *g, const float *x, int64_t n, float mu, float *sg, float *sgx)
{
    float a[8] = {0}, b[8] = {0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) {
            a[k] += g[j + k];
            b[k] += g[j + k] * (x[j + k] - mu);
        }
    for (int k = 0; j < n; j++, k++) {
        a[k] += g[j];
        b[k] += g[j] * (x[j] - mu);
    }
    *sg = tn__lanes_total(a);
    *sgx = tn__lanes_total(b);
}

/* Backward of y = (x - mean_c) * rstd_c * w_c + b_c over x [N, C, S] with M = N*S values per
 * channel and xhat = (x - mean_c) * rstd_c. Training (batch statistics depend on x):
 *   dx = w_c * rstd_c * (g - sum(g)/M - xhat * sum(g*xhat)/M);
 * eval (running statistics are constants): dx = g * w_c * rstd_c. Both: dw_c = sum g*xhat,
 * db_c = sum g. */
static int batch_norm_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    int w_in = (int)node->ints[NI_WIN], b_in = (int)node->ints[NI_BIN];
    int n_in = node->n_inputs;
    bool training = node->ints[NI_TRAIN] != 0;
    float eps = node->floats[0];
    bool need_x = tn__input_needs_grad(node, 0);
    bool need_w = w_in >= 0 && tn__input_needs_grad(node, w_in);
    bool need_b = b_in >= 0 && tn__input_needs_grad(node, b_in);
    tn_tensor *xs = NULL, *x = NULL, *ms = NULL, *m = NULL, *rs_s = NULL, *r = NULL;
    tn_tensor *ws = NULL, *w = NULL, *dx = NULL, *dw = NULL, *db = NULL;
    int rc = 0;

    xs = tn__saved(node, (int)node->ints[NI_X]);
    ms = tn__saved(node, (int)node->ints[NI_MEAN]);
    rs_s = tn__saved(node, (int)node->ints[NI_RSTD]);
    if (!xs || !ms || !rs_s) {
        rc = tn_last_error();
        goto done;
    }
    if (node->ints[NI_W] >= 0 && !(ws = tn__saved(node, (int)node->ints[NI_W]))) {
        rc = tn_last_error();
        goto done;
    }
    x = tn__contiguous_scratch(xs, "batch_norm");
    m = tn__contiguous_scratch(ms, "batch_norm");
    r = tn__contiguous_scratch(rs_s, "batch_norm");
    w = ws ? tn__contiguous_scratch(ws, "batch_norm") : NULL;
    if (!x || !m || !r || (ws && !w)) {
        rc = tn__pending_error();
        goto done;
    }
    const tn_node_input *xin = &node->inputs[0];
    int64_t N = xin->shape[0], C = xin->shape[1];
    int64_t S = tn__shape_numel(xin->ndim - 2, xin->shape + 2);
    if (need_x && !(dx = tn__new_output(xin->ndim, xin->shape, "batch_norm"))) {
        rc = tn__pending_error();
        goto done;
    }
    if (need_w && !(dw = tn__new_output(1, &C, "batch_norm"))) {
        rc = tn__pending_error();
        goto done;
    }
    if (need_b && !(db = tn__new_output(1, &C, "batch_norm"))) {
        rc = tn__pending_error();
        goto done;
    }

    const float *xd = tn_data_const(x), *gd = tn_data_const(g);
    const float *md = tn_data_const(m), *rd = tn_data_const(r);
    const float *wd = w ? tn_data_const(w) : NULL;
    float *dxd = dx ? tn_data(dx) : NULL;
    const float inv_m = 1.0f / (float)(N * S);
    for (int64_t c = 0; c < C; c++) {
        const float mu = md[c];
        /* Eval saves running_var: 1/std is recomputed from it. */
        const float rs = training ? rd[c] : 1.0f / sqrtf(rd[c] + eps);
        double sg = 0, sgx = 0;
        for (int64_t n = 0; n < N; n++) {
            const float *xr = xd + (n * C + c) * S, *gr = gd + (n * C + c) * S;
            float a, b;
            lane_sums_gx(gr, xr, S, mu, &a, &b);
            sg += a;
            sgx += b;
        }
        sgx *= rs; /* sum(g * xhat) */
        if (dw)
            tn_data(dw)[c] = (float)sgx;
        if (db)
            tn_data(db)[c] = (float)sg;
        if (!dxd)
            continue;
        const float k = (wd ? wd[c] : 1.0f) * rs;
        const float mg = (float)sg * inv_m, mgx = (float)sgx * inv_m;
        for (int64_t n = 0; n < N; n++) {
            const float *xr = xd + (n * C + c) * S, *gr = gd + (n * C + c) * S;
            float *dxr = dxd + (n * C + c) * S;
            if (training)
                for (int64_t s = 0; s < S; s++)
                    dxr[s] = k * (gr[s] - mg - (xr[s] - mu) * rs * mgx);
            else
                for (int64_t s = 0; s < S; s++)
                    dxr[s] = k * gr[s];
        }
    }
    grad_inputs[0] = dx;
    if (need_w)
        grad_inputs[w_in] = dw;
    if (need_b)
        grad_inputs[b_in] = db;
    dx = dw = db = NULL;
done:
    tn_release(dx);
    tn_release(dw);
    tn_release(db);
    tn_release(x);
    tn_release(xs);
    tn_release(m);
    tn_release(ms);
    tn_release(r);
    tn_release(rs_s);
    tn_release(w);
    tn_release(ws);
    return rc ? norm_fail(rc, grad_inputs, n_in) : 0;
}

static const tn_node_kind batch_norm_kind = {"batch_norm", "batch_norm_backward",
                                             batch_norm_backward};

/* running = (1 - momentum) * running + momentum * stat[c], in place and outside autograd (the
 * running statistics are buffers); bumps its version. */
static void batch_norm_update_running(tn_tensor *running, const float *stat, int64_t C,
                                      float momentum, float factor)
{
    if (!running)
        return;
    float *p = tn_data(running);
    int64_t st = running->strides[0];
    for (int64_t c = 0; c < C; c++)
        p[c * st] = (1.0f - momentum) * p[c * st] + momentum * stat[c] * factor;
    tn__bump_version(running);
}

/* x [N, C, ...], running_mean/var, weight, bias [C] (each may be NULL, but eval needs the running
 * statistics) -> [N, C, ...]. */
tn_tensor *tn_batch_norm(tn_tensor *x, tn_tensor *running_mean, tn_tensor *running_var,
                         tn_tensor *weight, tn_tensor *bias, bool training, float momentum,
                         float eps)
{
    const char *op = "batch_norm";
    if (tn__check_arg(op, "x", x))
        return NULL;
    char bx[96];
    if (x->ndim < 2)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: x %s must be [N, C, ...]", op,
                             tn_shape_str(x, bx, sizeof bx));
    int64_t N = x->shape[0], C = x->shape[1];
    int64_t S = tn__shape_numel(x->ndim - 2, x->shape + 2);
    int64_t M = N * S;
    if (norm_check_vec(op, "weight", weight, C, x) || norm_check_vec(op, "bias", bias, C, x) ||
        norm_check_vec(op, "running_mean", running_mean, C, x) ||
        norm_check_vec(op, "running_var", running_var, C, x))
        return NULL;
    if (!(eps >= 0) || isinf(eps))
        return TN__FAIL_NULL(TN_EINVAL, "%s: eps %g must be finite and >= 0", op, eps);
    if (training) {
        if (!(momentum >= 0 && momentum <= 1))
            return TN__FAIL_NULL(TN_EINVAL, "%s: momentum %g is outside [0, 1]", op, momentum);
        if (M <= 1)
            return TN__FAIL_NULL(TN_EINVAL,
                                 "%s: training needs more than one value per channel, got x %s", op,
                                 tn_shape_str(x, bx, sizeof bx));
        if ((running_mean && tn_requires_grad(running_mean)) ||
            (running_var && tn_requires_grad(running_var)))
            return TN__FAIL_NULL(TN_EGRAD, "%s: running statistics must not require grad", op);
    } else if (!running_mean || !running_var) {
        return TN__FAIL_NULL(TN_EINVAL, "%s: eval mode needs running_mean and running_var", op);
    }

    tn_tensor *inputs[3];
    int w_in, b_in;
    int n_in = norm_inputs(x, weight, bias, inputs, &w_in, &b_in);
    bool record = tn__grad_needed(n_in, inputs);
    int64_t C2 = 2 * C;
    tn_tensor *xc = tn__contiguous_scratch(x, op), *wc = NULL, *bc = NULL, *out = NULL;
    tn_tensor *mean = NULL, *rstd = NULL, *affine = NULL, *var = NULL;
    if (!xc || (weight && !(wc = tn__contiguous_scratch(weight, op))) || (bias && !(bc = tn__contiguous_scratch(bias, op))))
        goto fail;
    if (!(out = tn__new_output(x->ndim, x->shape, op)))
        goto fail;
    /* affine [2C]: per-channel scale and shift, so y = x * scale + shift. */
    if (!(affine = tn__new_tensor(1, &C2, LP_CAT_TEMPORARY, op)))
        goto fail;
    float *scale = tn_data(affine), *shift = scale ? scale + C : NULL;
    const float *xd = tn_data_const(xc);
    const float *wd = wc ? tn_data_const(wc) : NULL, *bd = bc ? tn_data_const(bc) : NULL;

    if (training) {
        /* mean and rstd [C] are saved when recording, scratch otherwise; var [C] is the biased
         * batch variance, for the running update. */
        if (record) {
            mean = tn__new_output(1, &C, op);
            rstd = tn__new_output(1, &C, op);
        } else {
            mean = tn__new_tensor(1, &C, LP_CAT_TEMPORARY, op);
            rstd = tn__new_tensor(1, &C, LP_CAT_TEMPORARY, op);
        }
        if (!mean || !rstd || !(var = tn__new_tensor(1, &C, LP_CAT_TEMPORARY, op)))
            goto fail;
        float *md = tn_data(mean), *rd = tn_data(rstd), *vd = tn_data(var);
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++)
                s += tn__lane_sum(xd + (n * C + c) * S, S, 0.0f, false);
            const float mu = (float)(s / (double)M);
            double v = 0;
            for (int64_t n = 0; n < N; n++)
                v += tn__lane_sum(xd + (n * C + c) * S, S, mu, true);
            md[c] = mu;
            vd[c] = (float)(v / (double)M);
            rd[c] = 1.0f / sqrtf(vd[c] + eps);
        }
        for (int64_t c = 0; c < C; c++) {
            scale[c] = (wd ? wd[c] : 1.0f) * rd[c];
            shift[c] = (bd ? bd[c] : 0.0f) - md[c] * scale[c];
        }
    } else {
        const float *rm = tn_data_const(running_mean), *rv = tn_data_const(running_var);
        int64_t sm = running_mean->strides[0], sv = running_var->strides[0];
        for (int64_t c = 0; c < C; c++) {
            scale[c] = (wd ? wd[c] : 1.0f) / sqrtf(rv[c * sv] + eps);
            shift[c] = (bd ? bd[c] : 0.0f) - rm[c * sm] * scale[c];
        }
    }

    float *yd = tn_data(out);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++) {
            const float *xr = xd + (n * C + c) * S;
            float *yr = yd + (n * C + c) * S;
            const float a = scale[c], b = shift[c];
            for (int64_t i = 0; i < S; i++)
                yr[i] = xr[i] * a + b;
        }

    if (record) {
        int rc = training
                     ? norm_record(&batch_norm_kind, out, x, weight, bias, mean, rstd, true, eps)
                     : norm_record(&batch_norm_kind, out, x, weight, bias, running_mean,
                                   running_var, false, eps);
        if (rc)
            goto fail;
    }
    if (training) {
        /* Running statistics use the unbiased variance, as PyTorch does. */
        batch_norm_update_running(running_mean, tn_data_const(mean), C, momentum, 1.0f);
        batch_norm_update_running(running_var, tn_data_const(var), C, momentum,
                                  (float)M / (float)(M - 1));
    }
    tn_release(xc);
    tn_release(wc);
    tn_release(bc);
    tn_release(mean);
    tn_release(rstd);
    tn_release(var);
    tn_release(affine);
    return out;
fail:
    tn_release(xc);
    tn_release(wc);
    tn_release(bc);
    tn_release(mean);
    tn_release(rstd);
    tn_release(var);
    tn_release(affine);
    tn_release(out);
    return NULL;
}
