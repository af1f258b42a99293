/*
 * MultiheadAttention (self-attention, batch_first) and TransformerEncoderLayer (post-norm), as
 * torch.nn builds them, with the same parameter names so PyTorch state_dicts load by name.
 */
#include <math.h>
#include <stdio.h>

#include "module_internal.h"

/* ---- MultiheadAttention --------------------------------------------------------------------- */

typedef struct mha_impl {
    int64_t dim, heads;
    float dropout;             /* on the attention weights, in training only */
    tn_tensor *in_proj_weight; /* [3D, D] */
    tn_tensor *in_proj_bias;   /* [3D] */
    tn_module *out_proj;       /* Linear(D, D), child "out_proj" */
} mha_impl;

/* Part i (0 q, 1 k, 2 v) of qkv [B, T, 3D] as heads [B, H, T, hd]: a view when the layout
 * allows (narrow, split the last dim, swap T and H). */
static tn_tensor *mha_split(tn_tensor *qkv, int i, int64_t D, int64_t H)
{
    int64_t B = qkv->shape[0], T = qkv->shape[1];
    tn_tensor *part = tn_narrow(qkv, 2, i * D, D); /* [B, T, D] */
    if (!part)
        return NULL;
    tn_tensor *split = tn_reshape(part, 4, (int64_t[]){B, T, H, D / H}); /* [B, T, H, hd] */
    tn_release(part);
    if (!split)
        return NULL;
    tn_tensor *heads = tn_transpose(split, 1, 2); /* [B, H, T, hd] */
    tn_release(split);
    return heads;
}

/* softmax(q k^T / sqrt(hd)) with dropout p on the weights, then @ v: [B, H, T, hd]. Used only in
 * training with p > 0, where tn_scaled_dot_product_attention (which has no dropout) cannot. */
static tn_tensor *attention_with_dropout(tn_tensor *q, tn_tensor *k, tn_tensor *v, float p)
{
    tn_tensor *out = NULL;
    int64_t hd = q->shape[q->ndim - 1];
    tn_tensor *kt = tn_transpose(k, -2, -1);          /* [B, H, hd, T] */
    tn_tensor *scores = kt ? tn_matmul(q, kt) : NULL; /* [B, H, T, T] */
    tn_tensor *scaled = scores ? tn_mul_scalar(scores, 1.0f / sqrtf((float)hd)) : NULL;
    tn_tensor *weights = scaled ? tn_softmax(scaled, -1) : NULL;
    tn_tensor *dropped = weights ? tn_dropout(weights, p, true) : NULL;
    if (dropped)
        out = tn_matmul(dropped, v); /* [B, H, T, hd] */
    tn_release(dropped);
    tn_release(weights);
    tn_release(scaled);
    tn_release(scores);
    tn_release(kt);
    return out;
}

/* x [B, T, D] -> [B, T, D]: in_proj, split into H heads, attention, merge, out_proj. */
static tn_tensor *mha_forward(tn_module *m, tn_tensor *x)
{
    mha_impl *A = m->impl;
    if (tn__check_arg("multihead_attention", "x", x) < 0)
        return NULL;
    if (x->ndim != 3 || x->shape[2] != A->dim) {
        char buf[96];
        return TN__FAIL_NULL(TN_ESHAPE,
                             "multihead_attention: x %s is not [B, T, %lld] as '%s' expects",
                             tn_shape_str(x, buf, sizeof(buf)), (long long)A->dim, m->path);
    }
    int64_t B = x->shape[0], T = x->shape[1], D = A->dim, H = A->heads;
    tn_tensor *out = NULL, *q = NULL, *k = NULL, *v = NULL, *attn = NULL, *merged = NULL;
    tn_tensor *flat = NULL;
    tn_tensor *qkv = tn_linear(x, A->in_proj_weight, A->in_proj_bias); /* [B, T, 3D] */
    if (!qkv)
        goto done;
    if (!(q = mha_split(qkv, 0, D, H)) || !(k = mha_split(qkv, 1, D, H)) ||
        !(v = mha_split(qkv, 2, D, H)))
        goto done;
    tn_release(qkv);
    qkv = NULL;
    if (m->training && A->dropout > 0.0f)
        attn = attention_with_dropout(q, k, v, A->dropout);
    else
        attn = tn_scaled_dot_product_attention(q, k, v, false); /* [B, H, T, hd] */
    if (!attn)
        goto done;
    tn_release(q);
    tn_release(k);
    tn_release(v);
    q = k = v = NULL;
    if (!(merged = tn_transpose(attn, 1, 2))) /* [B, T, H, hd] */
        goto done;
    if (!(flat = tn_reshape(merged, 3, (int64_t[]){B, T, D}))) /* [B, T, D], a copy */
        goto done;
    tn_release(merged);
    tn_release(attn);
    merged = attn = NULL;
    out = tn_module_forward(A->out_proj, flat);
done:
    tn_release(flat);
    tn_release(merged);
    tn_release(attn);
    tn_release(v);
    tn_release(k);
    tn_release(q);
    tn_release(qkv);
    return out;
}

static const tn__module_vtable mha_vt = {"MultiheadAttention", mha_forward, NULL};

/* MultiheadAttention with attention-weight dropout p (TransformerEncoderLayer passes its own). */
static tn_module *mha_new(int64_t dim, int64_t heads, float dropout)
{
    if (dim <= 0 || heads <= 0 || dim % heads != 0)
        return TN__FAIL_NULL(TN_EINVAL,
                             "multihead_attention_new: dim %lld must be a positive multiple of "
                             "heads %lld",
                             (long long)dim, (long long)heads);
    tn_module *m = tn__module_new(&mha_vt, sizeof(mha_impl));
    if (!m)
        return NULL;
    mha_impl *A = m->impl;
    A->dim = dim;
    A->heads = heads;
    A->dropout = dropout;
    /* PyTorch: xavier_uniform_ on in_proj_weight [3D, D] (bound sqrt(6 / (D + 3D))), zero biases,
     * out_proj.weight as Linear's default. */
    float bound = sqrtf(6.0f / (float)(dim + 3 * dim));
    A->in_proj_weight =
        tn_rand_uniform(2, (int64_t[]){3 * dim, dim}, -bound, bound, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "in_proj_weight", A->in_proj_weight, false) < 0)
        goto fail;
    A->in_proj_bias = tn_zeros(1, (int64_t[]){3 * dim}, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "in_proj_bias", A->in_proj_bias, false) < 0)
        goto fail;
    A->out_proj = tn_linear_new(dim, dim, true);
    if (tn__module_add_child(m, "out_proj", A->out_proj) < 0)
        goto fail;
    /* The bias requires grad, so it is zeroed with grad disabled, as PyTorch's init does. */
    bool prev = tn_set_grad_enabled(false);
    int rc = tn_fill_(tn_module_param_by_name(A->out_proj, "bias"), 0.0f);
    tn_set_grad_enabled(prev);
    if (rc < 0)
        goto fail;
    return m;
fail:
    tn_module_free(m);
    return NULL;
}

tn_module *tn_multihead_attention_new(int64_t dim, int64_t heads)
{
    return mha_new(dim, heads, 0.0f);
}

/* ---- TransformerEncoderLayer ---------------------------------------------------------------- */

typedef struct encoder_layer_impl {
    bool gelu;
    tn_module *self_attn, *linear1, *dropout, *linear2, *norm1, *norm2, *dropout1, *dropout2;
} encoder_layer_impl;

/* Releases a and b and returns c; keeps the forward below readable. */
static tn_tensor *release2(tn_tensor *a, tn_tensor *b, tn_tensor *c)
{
    tn_release(a);
    tn_release(b);
    return c;
}

/* Whether t is this forward's own intermediate and no graph is recorded for an op on it (and
 * `other`): then an in-place update is invisible to everyone but this forward. */
static bool mine_to_update(tn_tensor *t, tn_tensor *other)
{
    tn_tensor *in[2] = {t, other};
    return tn__exclusive(t) && !tn__grad_needed(other ? 2 : 1, in);
}

/* a + b. Consumes b: adds a into b in place when b is ours and nothing is recorded (the same
 * values, IEEE addition commutes), which saves an activation and a pass under no_grad. */
static tn_tensor *residual_add(tn_tensor *a, tn_tensor *b)
{
    if (mine_to_update(b, a) && tn_is_contiguous(a) &&
        tn__shape_equal(a->ndim, a->shape, b->ndim, b->shape)) {
        const float *restrict ad = tn_data_const(a);
        float *restrict bd = tn_data(b);
        for (int64_t i = 0, n = tn_numel(b); i < n; i++)
            bd[i] = ad[i] + bd[i];
        tn__bump_version(b);
        return b;
    }
    tn_tensor *sum = tn_add(a, b);
    tn_release(b);
    return sum;
}

/* relu(f) or gelu(f). Consumes f: relu is applied in place under the same condition as above. */
static tn_tensor *activation(tn_tensor *f, bool gelu)
{
    if (!gelu && mine_to_update(f, NULL)) {
        float *fd = tn_data(f);
        for (int64_t i = 0, n = tn_numel(f); i < n; i++)
            fd[i] = fd[i] < 0.0f ? 0.0f : fd[i]; /* NaN stays NaN, as tn_relu */
        tn__bump_version(f);
        return f;
    }
    tn_tensor *a = gelu ? tn_gelu(f) : tn_relu(f);
    tn_release(f);
    return a;
}

/* x [B, T, D] -> [B, T, D], post-norm:
 *   h = norm1(x + dropout1(self_attn(x)))
 *   y = norm2(h + dropout2(linear2(dropout(act(linear1(h)))))) */
static tn_tensor *encoder_layer_forward(tn_module *m, tn_tensor *x)
{
    encoder_layer_impl *E = m->impl;
    if (tn__check_arg("transformer_encoder_layer", "x", x) < 0)
        return NULL;
    tn_tensor *sa = tn_module_forward(E->self_attn, x); /* checks x is [B, T, D] */
    if (!sa)
        return NULL;
    tn_tensor *d1 = tn_module_forward(E->dropout1, sa);
    tn_release(sa);
    if (!d1)
        return NULL;
    tn_tensor *r1 = residual_add(x, d1);
    if (!r1)
        return NULL;
    tn_tensor *h = tn_module_forward(E->norm1, r1);
    tn_release(r1);
    if (!h)
        return NULL;

    tn_tensor *f = tn_module_forward(E->linear1, h); /* [B, T, F] */
    if (!f)
        return release2(h, NULL, NULL);
    tn_tensor *a = activation(f, E->gelu);
    if (!a)
        return release2(h, NULL, NULL);
    tn_tensor *d = tn_module_forward(E->dropout, a);
    tn_release(a);
    if (!d)
        return release2(h, NULL, NULL);
    tn_tensor *l2 = tn_module_forward(E->linear2, d); /* [B, T, D] */
    tn_release(d);
    if (!l2)
        return release2(h, NULL, NULL);
    tn_tensor *d2 = tn_module_forward(E->dropout2, l2);
    tn_release(l2);
    if (!d2)
        return release2(h, NULL, NULL);
    tn_tensor *r2 = residual_add(h, d2);
    tn_release(h);
    if (!r2)
        return NULL;
    tn_tensor *y = tn_module_forward(E->norm2, r2);
    tn_release(r2);
    return y;
}

static const tn__module_vtable encoder_layer_vt = {"TransformerEncoderLayer", encoder_layer_forward,
                                                   NULL};

tn_module *tn_transformer_encoder_layer_new(int64_t dim, int64_t heads, int64_t ff_dim,
                                            float dropout, bool gelu)
{
    if (dim <= 0 || heads <= 0 || dim % heads != 0 || ff_dim <= 0 ||
        !(dropout >= 0.0f && dropout <= 1.0f))
        return TN__FAIL_NULL(TN_EINVAL,
                             "transformer_encoder_layer_new: bad arguments dim %lld heads %lld "
                             "ff_dim %lld dropout %g (dim must be a multiple of heads, dropout in "
                             "[0, 1])",
                             (long long)dim, (long long)heads, (long long)ff_dim, (double)dropout);
    tn_module *m = tn__module_new(&encoder_layer_vt, sizeof(encoder_layer_impl));
    if (!m)
        return NULL;
    encoder_layer_impl *E = m->impl;
    E->gelu = gelu;
    /* Registration order as in torch.nn.TransformerEncoderLayer.__init__. */
    E->self_attn = mha_new(dim, heads, dropout);
    if (tn__module_add_child(m, "self_attn", E->self_attn) < 0)
        goto fail;
    E->linear1 = tn_linear_new(dim, ff_dim, true);
    if (tn__module_add_child(m, "linear1", E->linear1) < 0)
        goto fail;
    E->dropout = tn_dropout_new(dropout);
    if (tn__module_add_child(m, "dropout", E->dropout) < 0)
        goto fail;
    E->linear2 = tn_linear_new(ff_dim, dim, true);
    if (tn__module_add_child(m, "linear2", E->linear2) < 0)
        goto fail;
    E->norm1 = tn_layer_norm_new(dim);
    if (tn__module_add_child(m, "norm1", E->norm1) < 0)
        goto fail;
    E->norm2 = tn_layer_norm_new(dim);
    if (tn__module_add_child(m, "norm2", E->norm2) < 0)
        goto fail;
    E->dropout1 = tn_dropout_new(dropout);
    if (tn__module_add_child(m, "dropout1", E->dropout1) < 0)
        goto fail;
    E->dropout2 = tn_dropout_new(dropout);
    if (tn__module_add_child(m, "dropout2", E->dropout2) < 0)
        goto fail;
    return m;
fail:
    tn_module_free(m);
    return NULL;
}
