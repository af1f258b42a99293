/*
 * dropout, embedding and concat.
 *
 * Saved for backward, as in PyTorch: dropout keeps its mask (values 0 or 1/(1-p), the shape of x);
 * embedding keeps the ids in the node's extra buffer (AUTOGRAD) and no tensor; concat keeps
 * nothing (the input shapes are on the node's edges).
 */
#include <string.h>

#include "tensor_internal.h"

/* ---- dropout -------------------------------------------------------------------------------- */

/* d(x * mask) = g * mask; the mask is saved in slot 0. */
static int dropout_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    tn_tensor *mask = tn__saved(node, 0);
    if (!mask)
        return tn_last_error();
    grad_inputs[0] = tn_mul(g, mask);
    tn_release(mask);
    return grad_inputs[0] ? 0 : tn__pending_error();
}

static const tn_node_kind dropout_kind = {"dropout", "dropout_backward", dropout_backward};

/* x [...] -> [...]. In training each element is kept with probability 1-p (uniform u >= p) and
 * scaled by 1/(1-p). The mask is made only when a node is recorded. */
tn_tensor *tn_dropout(tn_tensor *x, float p, bool training)
{
    const char *op = "dropout";
    if (tn__check_arg(op, "x", x))
        return NULL;
    if (!(p >= 0.0f && p < 1.0f))
        return TN__FAIL_NULL(TN_EINVAL, "%s: p %g is outside [0, 1)", op, p);
    if (!training || p == 0.0f)
        return tn_retain(x);

    bool record = tn__grad_needed(1, &x);
    const float scale = 1.0f / (1.0f - p);
    tn_tensor *xc = tn__contiguous_scratch(x, op), *out = NULL, *mask = NULL;
    if (!xc || !(out = tn__new_output(x->ndim, x->shape, op)))
        goto fail;
    if (record && !(mask = tn__new_output(x->ndim, x->shape, op)))
        goto fail;
    const float *xd = tn_data_const(xc);
    float *yd = tn_data(out), *md = mask ? tn_data(mask) : NULL;
    int64_t numel = tn_numel(x);
    /* Draw the uniforms into the mask (or straight into the output), then threshold in place. */
    float *u = md ? md : yd;
    tn__rand_uniform_fill(u, numel, 0.0f, 1.0f);
    for (int64_t i = 0; i < numel; i++) {
        float keep = u[i] >= p ? scale : 0.0f;
        u[i] = keep;
        yd[i] = xd[i] * keep;
    }
    if (record) {
        if (!tn__node_new(&dropout_kind, out, 1, &x) || tn__save(out->grad_fn, mask) < 0)
            goto fail;
    }
    tn_release(xc);
    tn_release(mask);
    return out;
fail:
    tn_release(xc);
    tn_release(mask);
    tn_release(out);
    return NULL;
}

/* ---- embedding ------------------------------------------------------------------------------ */

/* dweight [V, D] = 0, then dweight[ids[i]] += g[i] for every id (repeated ids accumulate).
 * ints[0] is the number of ids; extra holds them. */
static int embedding_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    const tn_node_input *win = &node->inputs[0];
    int64_t D = win->shape[1], n_ids = node->ints[0];
    tn_tensor *dw = tn__new_output(2, win->shape, "embedding");
    if (!dw)
        return tn__pending_error();
    float *dwd = tn_data(dw);
    if (dwd)
        memset(dwd, 0, (size_t)tn_numel(dw) * sizeof(float));
    const int64_t *ids = node->extra;
    const float *gd = tn_data_const(g);
    for (int64_t i = 0; i < n_ids; i++) {
        float *row = dwd + ids[i] * D;
        const float *gr = gd + i * D;
        for (int64_t j = 0; j < D; j++)
            row[j] += gr[j];
    }
    grad_inputs[0] = dw;
    return 0;
}

static const tn_node_kind embedding_kind = {"embedding", "embedding_backward", embedding_backward};

/* weight [V, D], ids of shape [shape...] -> [shape..., D]: row ids[i] of weight for each i. */
tn_tensor *tn_embedding(tn_tensor *weight, const int64_t *ids, int ndim, const int64_t *shape)
{
    const char *op = "embedding";
    if (tn__check_arg(op, "weight", weight))
        return NULL;
    char bw[96];
    if (weight->ndim != 2)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: weight %s must be [V, D]", op,
                             tn_shape_str(weight, bw, sizeof bw));
    if (ndim < 0 || ndim > TN_MAX_DIMS - 1)
        return TN__FAIL_NULL(TN_EINVAL, "%s: ids ndim %d is outside [0, %d]", op, ndim,
                             TN_MAX_DIMS - 1);
    if (ndim > 0 && !shape)
        return TN__FAIL_NULL(TN_EINVAL, "%s: ids shape is NULL", op);
    int64_t out_shape[TN_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return TN__FAIL_NULL(TN_EINVAL, "%s: ids shape has negative size %ld in dim %d", op,
                                 (long)shape[d], d);
        out_shape[d] = shape[d];
    }
    int64_t V = weight->shape[0], D = weight->shape[1];
    out_shape[ndim] = D;
    int64_t n_ids = tn__shape_numel(ndim, shape);
    if (n_ids > 0 && !ids)
        return TN__FAIL_NULL(TN_EINVAL, "%s: ids is NULL", op);
    for (int64_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return TN__FAIL_NULL(
                TN_EINVAL, "%s: id %ld at index %ld is outside [0, %ld) for weight %s", op,
                (long)ids[i], (long)i, (long)V, tn_shape_str(weight, bw, sizeof bw));

    tn_tensor *wc = tn__contiguous_scratch(weight, op), *out = NULL;
    if (!wc || !(out = tn__new_output(ndim + 1, out_shape, op)))
        goto fail;
    const float *wd = tn_data_const(wc);
    float *yd = tn_data(out);
    if (D > 0)
        for (int64_t i = 0; i < n_ids; i++)
            memcpy(yd + i * D, wd + ids[i] * D, (size_t)D * sizeof(float));
    if (tn__grad_needed(1, &weight)) {
        tn_node *node = tn__node_new(&embedding_kind, out, 1, &weight);
        if (!node)
            goto fail;
        node->ints[0] = n_ids;
        if (n_ids > 0) {
            int64_t *kept = tn__node_extra(node, (size_t)n_ids * sizeof(int64_t));
            if (!kept)
                goto fail;
            memcpy(kept, ids, (size_t)n_ids * sizeof(int64_t));
        }
    }
    tn_release(wc);
    return out;
fail:
    tn_release(wc);
    tn_release(out);
    return NULL;
}

/* ---- concat --------------------------------------------------------------------------------- */

/* The gradient of input i is g narrowed along dim to input i's slice. ints[0] is dim. */
static int concat_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    int dim = (int)node->ints[0];
    int64_t start = 0;
    for (int i = 0; i < node->n_inputs; i++) {
        int64_t len = node->inputs[i].shape[dim];
        if (tn__input_needs_grad(node, i)) {
            /* A view of g: the engine copies it when it must own the gradient. */
            grad_inputs[i] = tn_narrow(g, dim, start, len);
            if (!grad_inputs[i]) {
                int rc = tn__pending_error();
                for (int j = 0; j < i; j++) {
                    tn_release(grad_inputs[j]);
                    grad_inputs[j] = NULL;
                }
                return rc;
            }
        }
        start += len;
    }
    return 0;
}

static const tn_node_kind concat_kind = {"concat", "concat_backward", concat_backward};

/* tensors[i] [..., n_i, ...] (dim `dim`), equal elsewhere -> [..., sum n_i, ...]. */
tn_tensor *tn_concat(tn_tensor *const *tensors, int n, int dim)
{
    const char *op = "concat";
    if (!tensors || n < 1)
        return TN__FAIL_NULL(TN_EINVAL, "%s: needs at least one tensor, got %d", op, n);
    for (int i = 0; i < n; i++)
        if (!tensors[i])
            return TN__FAIL_NULL(TN_EINVAL, "%s: tensor %d is NULL", op, i);
    const tn_tensor *t0 = tensors[0];
    char b0[96], bi[96];
    if (t0->ndim < 1)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: tensor 0 %s has no dims to concatenate along", op,
                             tn_shape_str(t0, b0, sizeof b0));
    int d = tn__wrap_dim(dim, t0->ndim);
    if (d < 0)
        return TN__FAIL_NULL(TN_EINVAL, "%s: dim %d is out of range for tensor 0 %s", op, dim,
                             tn_shape_str(t0, b0, sizeof b0));
    int64_t out_shape[TN_MAX_DIMS];
    memcpy(out_shape, t0->shape, (size_t)t0->ndim * sizeof(int64_t));
    out_shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const tn_tensor *t = tensors[i];
        bool ok = t->ndim == t0->ndim;
        for (int k = 0; ok && k < t0->ndim; k++)
            ok = k == d || t->shape[k] == t0->shape[k];
        if (!ok)
            return TN__FAIL_NULL(
                TN_ESHAPE, "%s: tensor %d %s does not match tensor 0 %s outside dim %d", op, i,
                tn_shape_str(t, bi, sizeof bi), tn_shape_str(t0, b0, sizeof b0), d);
        out_shape[d] += t->shape[d];
    }

    tn_tensor *out = tn__new_output(t0->ndim, out_shape, op);
    if (!out)
        return NULL;
    /* Each input is `outer` blocks of shape[d] * inner contiguous floats. */
    int64_t outer = tn__shape_numel(d, out_shape);
    int64_t inner = tn__shape_numel(t0->ndim - d - 1, out_shape + d + 1);
    int64_t row = out_shape[d] * inner, start = 0;
    float *yd = tn_data(out);
    for (int i = 0; i < n; i++) {
        int64_t block = tensors[i]->shape[d] * inner;
        if (block > 0 && outer > 0) {
            tn_tensor *c = tn__contiguous_scratch(tensors[i], op);
            if (!c) {
                tn_release(out);
                return NULL;
            }
            const float *src = tn_data_const(c);
            for (int64_t o = 0; o < outer; o++)
                memcpy(yd + o * row + start, src + o * block, (size_t)block * sizeof(float));
            tn_release(c);
        }
        start += block;
    }
    if (tn__grad_needed(n, tensors)) {
        tn_node *node = tn__node_new(&concat_kind, out, n, tensors);
        if (!node) {
            tn_release(out);
            return NULL;
        }
        node->ints[0] = d;
    }
    return out;
}
