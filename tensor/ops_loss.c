/*
 * Losses (cross_entropy, mse_loss) and scaled dot-product attention.
 *
 * Saved for backward, as in PyTorch: cross_entropy keeps its log-softmax [N, C] (log_softmax +
 * nll_loss) and the targets in the node's extra buffer; mse_loss keeps input and target. Attention
 * is a composite of matmul, mul_scalar, add, softmax and matmul and has no node of its own, so it
 * saves exactly what those save.
 */
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

/* ---- cross_entropy -------------------------------------------------------------------------- */

/* dlogits[n, c] = g / N * (softmax[n, c] - [c == target[n]]), softmax = exp(log-softmax).
 * Slot 0 is the log-softmax [N, C]; ints[0], ints[1] are N, C; extra holds the targets. */
static int cross_entropy_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    int64_t N = node->ints[0], C = node->ints[1];
    const int64_t *targets = node->extra;
    tn_tensor *ls = tn__saved(node, 0);
    if (!ls)
        return tn_last_error();
    tn_tensor *lsc = tn__contiguous_scratch(ls, "cross_entropy");
    tn_release(ls);
    if (!lsc)
        return tn__pending_error();
    tn_tensor *dx = tn__new_output(2, (const int64_t[]){N, C}, "cross_entropy");
    if (!dx) {
        tn_release(lsc);
        return tn__pending_error();
    }
    const float k = tn_item(g) / (float)N;
    const float *ld = tn_data_const(lsc);
    float *dd = tn_data(dx);
    for (int64_t n = 0; n < N; n++) {
        const float *lr = ld + n * C;
        float *dr = dd + n * C;
        for (int64_t c = 0; c < C; c++)
            dr[c] = k * expf(lr[c]);
        dr[targets[n]] -= k;
    }
    tn_release(lsc);
    grad_inputs[0] = dx;
    return 0;
}

static const tn_node_kind cross_entropy_kind = {"cross_entropy", "cross_entropy_backward",
                                                cross_entropy_backward};

/* logits [N, C], targets[N] in [0, C) -> scalar mean over n of logsumexp(logits[n]) -
 * logits[n, targets[n]]. The log-softmax is materialised only when a node is recorded. */
tn_tensor *tn_cross_entropy(tn_tensor *logits, const int64_t *targets)
{
    const char *op = "cross_entropy";
    if (tn__check_arg(op, "logits", logits))
        return NULL;
    char bl[96];
    if (logits->ndim != 2 || logits->shape[0] < 1 || logits->shape[1] < 1)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: logits %s must be [N, C] with N, C >= 1", op,
                             tn_shape_str(logits, bl, sizeof bl));
    if (!targets)
        return TN__FAIL_NULL(TN_EINVAL, "%s: targets is NULL", op);
    int64_t N = logits->shape[0], C = logits->shape[1];
    for (int64_t n = 0; n < N; n++)
        if (targets[n] < 0 || targets[n] >= C)
            return TN__FAIL_NULL(
                TN_EINVAL, "%s: target %ld at index %ld is outside [0, %ld) for logits %s", op,
                (long)targets[n], (long)n, (long)C, tn_shape_str(logits, bl, sizeof bl));

    bool record = tn__grad_needed(1, &logits);
    tn_tensor *xc = tn__contiguous_scratch(logits, op), *out = NULL, *ls = NULL;
    if (!xc || !(out = tn__new_output(0, NULL, op)))
        goto fail;
    if (record && !(ls = tn__new_output(2, logits->shape, op)))
        goto fail;
    const float *xd = tn_data_const(xc);
    float *ld = ls ? tn_data(ls) : NULL;
    double total = 0;
    for (int64_t n = 0; n < N; n++) {
        const float *xr = xd + n * C;
        float mx = xr[0];
        for (int64_t c = 1; c < C; c++)
            mx = xr[c] > mx ? xr[c] : mx;
        float s = 0;
        for (int64_t c = 0; c < C; c++)
            s += expf(xr[c] - mx);
        const float lse = mx + logf(s);
        total += (double)lse - xr[targets[n]];
        if (ld) {
            float *lr = ld + n * C;
            for (int64_t c = 0; c < C; c++)
                lr[c] = xr[c] - lse;
        }
    }
    tn_data(out)[0] = (float)(total / (double)N);
    if (record) {
        tn_node *node = tn__node_new(&cross_entropy_kind, out, 1, &logits);
        if (!node)
            goto fail;
        node->ints[0] = N;
        node->ints[1] = C;
        int64_t *kept = tn__node_extra(node, (size_t)N * sizeof(int64_t));
        if (!kept || tn__save(node, ls) < 0)
            goto fail;
        memcpy(kept, targets, (size_t)N * sizeof(int64_t));
    }
    tn_release(xc);
    tn_release(ls);
    return out;
fail:
    tn_release(xc);
    tn_release(ls);
    tn_release(out);
    return NULL;
}

/* ---- mse_loss ------------------------------------------------------------------------------- */

/* d/dinput = 2 g (input - target) / n, d/dtarget = its negation. Slots 0, 1: input, target. */
static int mse_loss_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    bool need_a = tn__input_needs_grad(node, 0), need_b = tn__input_needs_grad(node, 1);
    tn_tensor *as = tn__saved(node, 0), *bs = tn__saved(node, 1);
    tn_tensor *a = NULL, *b = NULL, *da = NULL, *db = NULL;
    int rc = 0;
    if (!as || !bs) {
        rc = tn_last_error();
        goto done;
    }
    a = tn__contiguous_scratch(as, "mse_loss");
    b = tn__contiguous_scratch(bs, "mse_loss");
    const tn_node_input *in = &node->inputs[0];
    if (!a || !b || (need_a && !(da = tn__new_output(in->ndim, in->shape, "mse_loss"))) ||
        (need_b && !(db = tn__new_output(in->ndim, in->shape, "mse_loss")))) {
        rc = tn__pending_error();
        goto done;
    }
    int64_t n = tn_numel(a);
    const float k = 2.0f * tn_item(g) / (float)n;
    const float *ad = tn_data_const(a), *bd = tn_data_const(b);
    float *dad = da ? tn_data(da) : NULL, *dbd = db ? tn_data(db) : NULL;
    if (dad)
        for (int64_t i = 0; i < n; i++)
            dad[i] = k * (ad[i] - bd[i]);
    if (dbd)
        for (int64_t i = 0; i < n; i++)
            dbd[i] = k * (bd[i] - ad[i]);
    grad_inputs[0] = da;
    grad_inputs[1] = db;
    da = db = NULL;
done:
    tn_release(as);
    tn_release(bs);
    tn_release(a);
    tn_release(b);
    tn_release(da);
    tn_release(db);
    return rc;
}

static const tn_node_kind mse_loss_kind = {"mse_loss", "mse_loss_backward", mse_loss_backward};

/* input, target [...] (equal shapes) -> scalar mean((input - target)^2). */
tn_tensor *tn_mse_loss(tn_tensor *input, tn_tensor *target)
{
    const char *op = "mse_loss";
    if (tn__check_arg(op, "input", input) || tn__check_arg(op, "target", target))
        return NULL;
    char ba[96], bb[96];
    if (!tn__shape_equal(input->ndim, input->shape, target->ndim, target->shape))
        return TN__FAIL_NULL(TN_ESHAPE, "%s: input %s and target %s must have the same shape", op,
                             tn_shape_str(input, ba, sizeof ba),
                             tn_shape_str(target, bb, sizeof bb));
    tn_tensor *ac = tn__contiguous_scratch(input, op), *bc = NULL, *out = NULL;
    if (!ac || !(bc = tn__contiguous_scratch(target, op)) || !(out = tn__new_output(0, NULL, op)))
        goto fail;
    int64_t n = tn_numel(input);
    const float *ad = tn_data_const(ac), *bd = tn_data_const(bc);
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)ad[i] - bd[i];
        total += d * d;
    }
    tn_data(out)[0] = (float)(total / (double)n); /* NaN for empty inputs, as in PyTorch */
    tn_tensor *inputs[2] = {input, target};
    if (tn__grad_needed(2, inputs)) {
        tn_node *node = tn__node_new(&mse_loss_kind, out, 2, inputs);
        if (!node || tn__save(node, input) < 0 || tn__save(node, target) < 0)
            goto fail;
    }
    tn_release(ac);
    tn_release(bc);
    return out;
fail:
    tn_release(ac);
    tn_release(bc);
    tn_release(out);
    return NULL;
}

/* ---- scaled dot-product attention ----------------------------------------------------------- */

/* q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv] -> [..., Tq, dv]:
 * softmax(q k^T / sqrt(d) + mask) v with mask[i, j] = -inf for j > i when causal. The scale is
 * applied to the scores rather than to q, so nothing extra is saved (matmul saves q and k^T,
 * softmax its output, the second matmul the weights and v). */
tn_tensor *tn_scaled_dot_product_attention(tn_tensor *q, tn_tensor *k, tn_tensor *v, bool causal)
{
    const char *op = "scaled_dot_product_attention";
    if (tn__check_arg(op, "q", q) || tn__check_arg(op, "k", k) || tn__check_arg(op, "v", v))
        return NULL;
    char bq[96], bk[96], bv[96];
    tn_shape_str(q, bq, sizeof bq);
    tn_shape_str(k, bk, sizeof bk);
    tn_shape_str(v, bv, sizeof bv);
    if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: q %s, k %s and v %s must have at least 2 dims", op, bq,
                             bk, bv);
    int64_t Tq = q->shape[q->ndim - 2], d = q->shape[q->ndim - 1];
    int64_t Tk = k->shape[k->ndim - 2];
    if (k->shape[k->ndim - 1] != d || d == 0)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: q %s and k %s must share a non-empty last dim", op, bq,
                             bk);
    if (v->shape[v->ndim - 2] != Tk)
        return TN__FAIL_NULL(TN_ESHAPE, "%s: k %s and v %s must have the same length (dim -2)", op,
                             bk, bv);
    int bn;
    int64_t bshape[TN_MAX_DIMS];
    if (tn__broadcast_shapes(op, q->ndim - 2, q->shape, k->ndim - 2, k->shape, &bn, bshape) ||
        tn__broadcast_shapes(op, bn, bshape, v->ndim - 2, v->shape, &bn, bshape))
        return NULL;

    tn_tensor *kt = NULL, *scores = NULL, *scaled = NULL, *mask = NULL, *masked = NULL;
    tn_tensor *weights = NULL, *out = NULL;
    if (!(kt = tn_transpose(k, k->ndim - 2, k->ndim - 1)) || !(scores = tn_matmul(q, kt)))
        goto done;
    tn_release(kt);
    kt = NULL;
    tn_tensor *qkv[3] = {q, k, v};
    if (!causal && tn__exclusive(scores) && !tn__grad_needed(3, qkv)) {
        /* Nothing is recorded: scale and softmax the scores in place (the same values). */
        tn__softmax_scaled_(scores, 1.0f / sqrtf((float)d));
        out = tn_matmul(scores, v);
        goto done;
    }
    if (!(scaled = tn_mul_scalar(scores, 1.0f / sqrtf((float)d))))
        goto done;
    tn_release(scores);
    scores = NULL;
    if (causal) {
        /* mask [Tq, Tk]: 0 where j <= i, -inf above the diagonal; a constant, not in the graph. */
        if (!(mask = tn__new_tensor(2, (const int64_t[]){Tq, Tk}, LP_CAT_TEMPORARY, op)))
            goto done;
        float *md = tn_data(mask);
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = 0; j < Tk; j++)
                md[i * Tk + j] = j <= i ? 0.0f : -INFINITY;
        masked = tn_add(scaled, mask);
        tn_release(mask);
        mask = NULL;
        if (!masked)
            goto done;
        tn_release(scaled);
        scaled = masked;
        masked = NULL;
    }
    if (!(weights = tn_softmax(scaled, -1)))
        goto done;
    out = tn_matmul(weights, v);
done:
    tn_release(kt);
    tn_release(scores);
    tn_release(scaled);
    tn_release(mask);
    tn_release(masked);
    tn_release(weights);
    return out;
}
