/*
 * Basic layers: Linear, Conv2d, BatchNorm2d, LayerNorm, Dropout, ReLU, GELU, Embedding and
 * Sequential. Parameter names, order and initialisation follow torch.nn.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "module_internal.h"

/* ---- Linear --------------------------------------------------------------------------------- */

typedef struct linear_impl {
    int64_t in, out;
    tn_tensor *weight; /* [out, in], borrowed from the parameter list */
    tn_tensor *bias;   /* [out] or NULL */
} linear_impl;

/* x [..., in] -> [..., out]. */
static tn_tensor *linear_forward(tn_module *m, tn_tensor *x)
{
    linear_impl *L = m->impl;
    if (tn__check_arg("linear", "x", x) < 0)
        return NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != L->in) {
        char buf[96];
        return TN__FAIL_NULL(TN_ESHAPE, "linear: x %s does not end in in_features %lld of '%s'",
                             tn_shape_str(x, buf, sizeof(buf)), (long long)L->in, m->path);
    }
    return tn_linear(x, L->weight, L->bias);
}

static const tn__module_vtable linear_vt = {"Linear", linear_forward, NULL};

tn_module *tn_linear_new(int64_t in_features, int64_t out_features, bool bias)
{
    if (in_features <= 0 || out_features <= 0)
        return TN__FAIL_NULL(TN_EINVAL,
                             "linear_new: features must be positive, got in %lld out %lld",
                             (long long)in_features, (long long)out_features);
    tn_module *m = tn__module_new(&linear_vt, sizeof(linear_impl));
    if (!m)
        return NULL;
    linear_impl *L = m->impl;
    L->in = in_features;
    L->out = out_features;
    /* PyTorch: kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in); the bias uses the same. */
    float bound = 1.0f / sqrtf((float)in_features);
    L->weight =
        tn_rand_uniform(2, (int64_t[]){out_features, in_features}, -bound, bound, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "weight", L->weight, false) < 0)
        goto fail;
    if (bias) {
        L->bias = tn_rand_uniform(1, (int64_t[]){out_features}, -bound, bound, LP_CAT_PARAMETER);
        if (tn__module_add_param(m, "bias", L->bias, false) < 0)
            goto fail;
    }
    return m;
fail:
    tn_module_free(m);
    return NULL;
}

/* ---- Conv2d --------------------------------------------------------------------------------- */

typedef struct conv2d_impl {
    int64_t in, out;
    int kernel, stride, padding;
    tn_tensor *weight; /* [out, in, k, k] */
    tn_tensor *bias;   /* [out] or NULL */
} conv2d_impl;

/* x [N, in, H, W] -> [N, out, Ho, Wo]. */
static tn_tensor *conv2d_forward(tn_module *m, tn_tensor *x)
{
    conv2d_impl *C = m->impl;
    if (tn__check_arg("conv2d", "x", x) < 0)
        return NULL;
    if (x->ndim != 4 || x->shape[1] != C->in) {
        char buf[96];
        return TN__FAIL_NULL(TN_ESHAPE, "conv2d: x %s is not [N, %lld, H, W] as '%s' expects",
                             tn_shape_str(x, buf, sizeof(buf)), (long long)C->in, m->path);
    }
    return tn_conv2d(x, C->weight, C->bias, C->stride, C->padding);
}

static const tn__module_vtable conv2d_vt = {"Conv2d", conv2d_forward, NULL};

tn_module *tn_conv2d_new(int64_t in_channels, int64_t out_channels, int kernel, int stride,
                         int padding, bool bias)
{
    if (in_channels <= 0 || out_channels <= 0 || kernel <= 0 || stride <= 0 || padding < 0)
        return TN__FAIL_NULL(TN_EINVAL,
                             "conv2d_new: bad arguments in %lld out %lld kernel %d stride %d "
                             "padding %d",
                             (long long)in_channels, (long long)out_channels, kernel, stride,
                             padding);
    tn_module *m = tn__module_new(&conv2d_vt, sizeof(conv2d_impl));
    if (!m)
        return NULL;
    conv2d_impl *C = m->impl;
    C->in = in_channels;
    C->out = out_channels;
    C->kernel = kernel;
    C->stride = stride;
    C->padding = padding;
    float bound = 1.0f / sqrtf((float)(in_channels * kernel * kernel));
    C->weight = tn_rand_uniform(4, (int64_t[]){out_channels, in_channels, kernel, kernel}, -bound,
                                bound, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "weight", C->weight, false) < 0)
        goto fail;
    if (bias) {
        C->bias = tn_rand_uniform(1, (int64_t[]){out_channels}, -bound, bound, LP_CAT_PARAMETER);
        if (tn__module_add_param(m, "bias", C->bias, false) < 0)
            goto fail;
    }
    return m;
fail:
    tn_module_free(m);
    return NULL;
}

/* ---- BatchNorm2d ---------------------------------------------------------------------------- */

typedef struct batch_norm_impl {
    int64_t channels;
    tn_tensor *weight, *bias;              /* [C], ones and zeros */
    tn_tensor *running_mean, *running_var; /* [C] buffers, zeros and ones */
} batch_norm_impl;

/* x [N, C, H, W] -> same shape; batch statistics in training (updating the running ones with
 * momentum 0.1), running statistics in eval. */
static tn_tensor *batch_norm_forward(tn_module *m, tn_tensor *x)
{
    batch_norm_impl *B = m->impl;
    if (tn__check_arg("batch_norm", "x", x) < 0)
        return NULL;
    if (x->ndim != 4 || x->shape[1] != B->channels) {
        char buf[96];
        return TN__FAIL_NULL(TN_ESHAPE, "batch_norm: x %s is not [N, %lld, H, W] as '%s' expects",
                             tn_shape_str(x, buf, sizeof(buf)), (long long)B->channels, m->path);
    }
    return tn_batch_norm(x, B->running_mean, B->running_var, B->weight, B->bias, m->training, 0.1f,
                         1e-5f);
}

static const tn__module_vtable batch_norm_vt = {"BatchNorm2d", batch_norm_forward, NULL};

/* PyTorch also has the buffer num_batches_tracked; it is not registered here (it only matters with
 * momentum=None), so files from PyTorch load with allow_extra. */
tn_module *tn_batch_norm2d_new(int64_t channels)
{
    if (channels <= 0)
        return TN__FAIL_NULL(TN_EINVAL, "batch_norm2d_new: channels must be positive, got %lld",
                             (long long)channels);
    tn_module *m = tn__module_new(&batch_norm_vt, sizeof(batch_norm_impl));
    if (!m)
        return NULL;
    batch_norm_impl *B = m->impl;
    const int64_t shape[1] = {channels};
    B->channels = channels;
    B->weight = tn_full(1, shape, 1.0f, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "weight", B->weight, false) < 0)
        goto fail;
    B->bias = tn_zeros(1, shape, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "bias", B->bias, false) < 0)
        goto fail;
    B->running_mean = tn_zeros(1, shape, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "running_mean", B->running_mean, true) < 0)
        goto fail;
    B->running_var = tn_full(1, shape, 1.0f, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "running_var", B->running_var, true) < 0)
        goto fail;
    return m;
fail:
    tn_module_free(m);
    return NULL;
}

/* ---- LayerNorm ------------------------------------------------------------------------------ */

typedef struct layer_norm_impl {
    int64_t dim;
    tn_tensor *weight, *bias; /* [D], ones and zeros */
} layer_norm_impl;

/* x [..., D] -> same shape, normalised over the last dim with eps 1e-5. */
static tn_tensor *layer_norm_forward(tn_module *m, tn_tensor *x)
{
    layer_norm_impl *N = m->impl;
    if (tn__check_arg("layer_norm", "x", x) < 0)
        return NULL;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != N->dim) {
        char buf[96];
        return TN__FAIL_NULL(TN_ESHAPE, "layer_norm: x %s does not end in %lld as '%s' expects",
                             tn_shape_str(x, buf, sizeof(buf)), (long long)N->dim, m->path);
    }
    return tn_layer_norm(x, N->weight, N->bias, 1e-5f);
}

static const tn__module_vtable layer_norm_vt = {"LayerNorm", layer_norm_forward, NULL};

tn_module *tn_layer_norm_new(int64_t dim)
{
    if (dim <= 0)
        return TN__FAIL_NULL(TN_EINVAL, "layer_norm_new: dim must be positive, got %lld",
                             (long long)dim);
    tn_module *m = tn__module_new(&layer_norm_vt, sizeof(layer_norm_impl));
    if (!m)
        return NULL;
    layer_norm_impl *N = m->impl;
    N->dim = dim;
    N->weight = tn_full(1, (int64_t[]){dim}, 1.0f, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "weight", N->weight, false) < 0)
        goto fail;
    N->bias = tn_zeros(1, (int64_t[]){dim}, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "bias", N->bias, false) < 0)
        goto fail;
    return m;
fail:
    tn_module_free(m);
    return NULL;
}

/* ---- Dropout, ReLU, GELU -------------------------------------------------------------------- */

typedef struct dropout_impl {
    float p;
} dropout_impl;

static tn_tensor *dropout_forward(tn_module *m, tn_tensor *x)
{
    if (tn__check_arg("dropout", "x", x) < 0)
        return NULL;
    return tn_dropout(x, ((dropout_impl *)m->impl)->p, m->training);
}

static const tn__module_vtable dropout_vt = {"Dropout", dropout_forward, NULL};

tn_module *tn_dropout_new(float p)
{
    if (!(p >= 0.0f && p <= 1.0f))
        return TN__FAIL_NULL(TN_EINVAL, "dropout_new: p must be in [0, 1], got %g", (double)p);
    tn_module *m = tn__module_new(&dropout_vt, sizeof(dropout_impl));
    if (m)
        ((dropout_impl *)m->impl)->p = p;
    return m;
}

static tn_tensor *relu_forward(tn_module *m, tn_tensor *x)
{
    if (tn__check_arg("relu", "x", x) < 0)
        return NULL;
    return tn_relu(x);
}

static const tn__module_vtable relu_vt = {"ReLU", relu_forward, NULL};

tn_module *tn_relu_new(void)
{
    return tn__module_new(&relu_vt, 0);
}

static tn_tensor *gelu_forward(tn_module *m, tn_tensor *x)
{
    if (tn__check_arg("gelu", "x", x) < 0)
        return NULL;
    return tn_gelu(x);
}

static const tn__module_vtable gelu_vt = {"GELU", gelu_forward, NULL};

tn_module *tn_gelu_new(void)
{
    return tn__module_new(&gelu_vt, 0);
}

/* ---- Embedding ------------------------------------------------------------------------------ */

typedef struct embedding_impl {
    int64_t num, dim;
    tn_tensor *weight; /* [V, D] ~ N(0, 1) */
} embedding_impl;

/* No generic forward: ids are integers, not a tensor (tn_module_forward says so). */
static const tn__module_vtable embedding_vt = {"Embedding", NULL, NULL};

tn_module *tn_embedding_new(int64_t num_embeddings, int64_t dim)
{
    if (num_embeddings <= 0 || dim <= 0)
        return TN__FAIL_NULL(TN_EINVAL, "embedding_new: sizes must be positive, got %lld x %lld",
                             (long long)num_embeddings, (long long)dim);
    tn_module *m = tn__module_new(&embedding_vt, sizeof(embedding_impl));
    if (!m)
        return NULL;
    embedding_impl *E = m->impl;
    E->num = num_embeddings;
    E->dim = dim;
    E->weight = tn_randn(2, (int64_t[]){num_embeddings, dim}, LP_CAT_PARAMETER);
    if (tn__module_add_param(m, "weight", E->weight, false) < 0) {
        tn_module_free(m);
        return NULL;
    }
    return m;
}

tn_tensor *tn_embedding_forward(tn_module *m, const int64_t *ids, int ndim, const int64_t *shape)
{
    if (!m)
        return TN__FAIL_NULL(TN_EINVAL, "embedding: module is NULL");
    if (m->vt != &embedding_vt)
        return TN__FAIL_NULL(TN_EINVAL, "embedding: '%s' is a %s, not an Embedding", m->path,
                             m->vt->type);
    const char *saved = tn__module_enter(m);
    tn_tensor *out = tn_embedding(((embedding_impl *)m->impl)->weight, ids, ndim, shape);
    tn__module_leave(saved);
    return out;
}

/* ---- Sequential ----------------------------------------------------------------------------- */

/* Runs the children in order, each as its own module (nested paths and regions); an empty
 * Sequential returns x itself, as PyTorch does. */
static tn_tensor *sequential_forward(tn_module *m, tn_tensor *x)
{
    if (tn__check_arg("sequential", "x", x) < 0)
        return NULL;
    tn_tensor *h = tn_retain(x);
    for (int i = 0; i < m->n_children && h; i++) {
        tn_tensor *next = tn_module_forward(m->children[i], h);
        tn_release(h);
        h = next;
    }
    return h;
}

static const tn__module_vtable sequential_vt = {"Sequential", sequential_forward, NULL};

tn_module *tn_sequential_new(void)
{
    return tn__module_new(&sequential_vt, 0);
}

int tn_sequential_append(tn_module *seq, tn_module *child)
{
    if (!seq || seq->vt != &sequential_vt) {
        int rc = tn__error(TN_EINVAL, "sequential_append: %s%s%s is not a Sequential",
                           seq ? seq->vt->type : "NULL", seq ? " " : "", seq ? seq->path : "");
        if (child && child != seq && !child->parent)
            tn_module_free(child);
        return rc;
    }
    if (!child)
        return tn__error(TN_EINVAL, "sequential_append: child is NULL");
    if (child == seq)
        return tn__error(TN_EINVAL, "sequential_append: cannot append '%s' to itself", seq->path);
    char name[24];
    snprintf(name, sizeof(name), "%d", seq->n_children);
    return tn__module_add_child(seq, name, child);
}
