/* Storage, tensor headers, creation, metadata, the random generator and in-place ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

/* ---- storage -------------------------------------------------------------------------------- */

tn_storage *tn__storage_new(size_t nbytes, lp_category category, const char *op,
                            const char *detail)
{
    tn_storage *s = calloc(1, sizeof *s);
    if (!s)
        return TN__FAIL_NULL(TN_ENOMEM, "%s: out of memory allocating a storage header", op);
    lp_category effective = tn__effective_category(category);
    if (nbytes > 0) {
        s->data = tn__alloc(nbytes, category, op, detail);
        if (!s->data) {
            free(s);
            return NULL;
        }
    }
    s->nbytes = nbytes;
    atomic_init(&s->refcount, 1);
    s->category = effective;
    s->unsaved_category = effective;
    s->inference = tn_is_inference_mode_enabled();
    return s;
}

void tn__storage_retain(tn_storage *s) { atomic_fetch_add(&s->refcount, 1); }

void tn__storage_release(tn_storage *s)
{
    if (!s || atomic_fetch_sub(&s->refcount, 1) != 1)
        return;
    tn__free(s->data, s->nbytes, s->category);
    free(s);
}

/* ---- tensor headers ------------------------------------------------------------------------- */

void tn__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides)
{
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = stride;
        stride *= shape[d] > 0 ? shape[d] : 1;
    }
}

int64_t tn__shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

bool tn__shape_equal(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b)
{
    if (ndim_a != ndim_b)
        return false;
    for (int d = 0; d < ndim_a; d++)
        if (a[d] != b[d])
            return false;
    return true;
}

const char *tn__shape_fmt(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ",%ld" : "%ld", (long)shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

int tn__wrap_dim(int dim, int ndim)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return -1;
    return dim < 0 ? dim + n : dim;
}

int tn__check_arg(const char *op, const char *what, const tn_tensor *t)
{
    if (!t)
        return tn__error(TN_EINVAL, "%s: %s is NULL", op, what);
    return 0;
}

static int tn__check_shape(const char *op, int ndim, const int64_t *shape)
{
    if (ndim < 0 || ndim > TN_MAX_DIMS)
        return tn__error(TN_EINVAL, "%s: ndim %d is outside [0, %d]", op, ndim, TN_MAX_DIMS);
    if (ndim > 0 && !shape)
        return tn__error(TN_EINVAL, "%s: shape is NULL", op);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return tn__error(TN_EINVAL, "%s: negative size %ld in dim %d", op, (long)shape[d], d);
        if (shape[d] > 0 && numel > INT64_MAX / 4 / shape[d])
            return tn__error(TN_EINVAL, "%s: shape too large", op);
        numel *= shape[d];
    }
    return 0;
}

tn_tensor *tn__tensor_wrap(tn_storage *storage, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset)
{
    tn_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return TN__FAIL_NULL(TN_ENOMEM, "tensor: out of memory allocating a tensor header");
    t->ndim = ndim;
    if (ndim > 0) {
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
        memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    }
    t->offset = offset;
    t->storage = storage;
    tn__storage_retain(storage);
    atomic_init(&t->refcount, 1);
    return t;
}

tn_tensor *tn__new_tensor(int ndim, const int64_t *shape, lp_category category, const char *op)
{
    if (tn__check_shape(op, ndim, shape) != 0)
        return NULL;
    char detail[96];
    tn__shape_fmt(ndim, shape, detail, sizeof detail);
    int64_t numel = tn__shape_numel(ndim, shape);
    tn_storage *s = tn__storage_new((size_t)numel * sizeof(float), category, op, detail);
    if (!s)
        return NULL;
    int64_t strides[TN_MAX_DIMS];
    tn__contiguous_strides(ndim, shape, strides);
    tn_tensor *t = tn__tensor_wrap(s, ndim, shape, strides, 0);
    tn__storage_release(s); /* the tensor holds it now */
    return t;
}

tn_tensor *tn__new_output(int ndim, const int64_t *shape, const char *op)
{
    return tn__new_tensor(ndim, shape, LP_CAT_ACTIVATION, op);
}

/* ---- creation ------------------------------------------------------------------------------- */

static const char *tn__category_op(lp_category category)
{
    switch (category) {
    case LP_CAT_PARAMETER:
        return "parameter";
    case LP_CAT_INPUT:
        return "input";
    case LP_CAT_OPTIMIZER_STATE:
        return "optimizer_state";
    default:
        return "empty";
    }
}

tn_tensor *tn_empty(int ndim, const int64_t *shape, lp_category category)
{
    if ((unsigned)category >= LP_CAT_COUNT)
        return TN__FAIL_NULL(TN_EINVAL, "empty: invalid category %d", (int)category);
    return tn__new_tensor(ndim, shape, category, tn__category_op(category));
}

tn_tensor *tn_full(int ndim, const int64_t *shape, float value, lp_category category)
{
    tn_tensor *t = tn_empty(ndim, shape, category);
    if (!t)
        return NULL;
    float *p = tn_data(t);
    int64_t n = tn_numel(t);
    for (int64_t i = 0; i < n; i++)
        p[i] = value;
    return t;
}

tn_tensor *tn_zeros(int ndim, const int64_t *shape, lp_category category)
{
    tn_tensor *t = tn_empty(ndim, shape, category);
    if (t && t->storage->nbytes)
        memset(t->storage->data, 0, t->storage->nbytes);
    return t;
}

tn_tensor *tn_from_data(int ndim, const int64_t *shape, const float *data, lp_category category)
{
    tn_tensor *t = tn_empty(ndim, shape, category);
    if (!t)
        return NULL;
    if (t->storage->nbytes) {
        if (!data) {
            tn_release(t);
            return TN__FAIL_NULL(TN_EINVAL, "from_data: data is NULL");
        }
        memcpy(t->storage->data, data, t->storage->nbytes);
    }
    return t;
}

tn_tensor *tn_scalar(float value, lp_category category)
{
    return tn_full(0, NULL, value, category);
}

/* ---- random generator: xoshiro256** seeded by splitmix64 ------------------------------------ */

static _Thread_local uint64_t tn__rng[4] = {0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull,
                                            0x94D049BB133111EBull, 0x2545F4914F6CDD1Dull};

static uint64_t tn__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t tn__rng_next(void)
{
    uint64_t *s = tn__rng;
    uint64_t result = tn__rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = tn__rotl(s[3], 45);
    return result;
}

void tn_manual_seed(uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        tn__rng[i] = z ^ (z >> 31);
    }
}

/* Uniform in [0, 1) with 24 random bits. */
static float tn__rng_uniform(void) { return (float)(tn__rng_next() >> 40) * 0x1.0p-24f; }

void tn__rand_uniform_fill(float *dst, int64_t n, float low, float high)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = low + (high - low) * tn__rng_uniform();
}

tn_tensor *tn_rand_uniform(int ndim, const int64_t *shape, float low, float high,
                           lp_category category)
{
    if (!(low <= high))
        return TN__FAIL_NULL(TN_EINVAL, "rand_uniform: low %g > high %g", low, high);
    tn_tensor *t = tn_empty(ndim, shape, category);
    if (!t)
        return NULL;
    tn__rand_uniform_fill(tn_data(t), tn_numel(t), low, high);
    return t;
}

tn_tensor *tn_randn(int ndim, const int64_t *shape, lp_category category)
{
    tn_tensor *t = tn_empty(ndim, shape, category);
    if (!t)
        return NULL;
    float *p = tn_data(t);
    int64_t n = tn_numel(t);
    for (int64_t i = 0; i < n; i += 2) { /* Box-Muller: two normals per pair of uniforms */
        double u1 = ((double)(tn__rng_next() >> 11) + 1.0) * 0x1.0p-53;
        double u2 = (double)(tn__rng_next() >> 11) * 0x1.0p-53;
        double r = sqrt(-2.0 * log(u1));
        p[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n)
            p[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
    return t;
}

tn_tensor *tn__scratch_copy(const tn_tensor *t, const char *op)
{
    tn_tensor *c = tn__new_tensor(t->ndim, t->shape, LP_CAT_TEMPORARY, op);
    if (c)
        tn_copy_to(t, tn_data(c));
    return c;
}

tn_tensor *tn__contiguous_scratch(tn_tensor *t, const char *op)
{
    return tn_is_contiguous(t) ? tn_retain(t) : tn__scratch_copy(t, op);
}

/* ---- references ----------------------------------------------------------------------------- */

tn_tensor *tn_retain(tn_tensor *t)
{
    if (t)
        atomic_fetch_add(&t->refcount, 1);
    return t;
}

void tn_release(tn_tensor *t)
{
    if (!t || atomic_fetch_sub(&t->refcount, 1) != 1)
        return;
    tn__node_release(t->grad_fn);
    tn_release(t->grad);
    tn__storage_release(t->storage);
    free(t->name);
    free(t);
}

/* ---- metadata ------------------------------------------------------------------------------- */

int tn_ndim(const tn_tensor *t) { return t->ndim; }
const int64_t *tn_shape(const tn_tensor *t) { return t->shape; }
const int64_t *tn_strides(const tn_tensor *t) { return t->strides; }

int64_t tn_size(const tn_tensor *t, int dim)
{
    int d = tn__wrap_dim(dim, t->ndim);
    if (d < 0 || t->ndim == 0)
        return 1;
    return t->shape[d];
}

int64_t tn_numel(const tn_tensor *t) { return tn__shape_numel(t->ndim, t->shape); }

bool tn_is_contiguous(const tn_tensor *t)
{
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expected)
            return false;
        expected *= t->shape[d];
    }
    return true;
}

const char *tn_shape_str(const tn_tensor *t, char *buf, size_t buf_size)
{
    return tn__shape_fmt(t->ndim, t->shape, buf, buf_size);
}

float *tn_data(tn_tensor *t) { return t->storage->data ? t->storage->data + t->offset : NULL; }

const float *tn_data_const(const tn_tensor *t)
{
    return t->storage->data ? t->storage->data + t->offset : NULL;
}

float tn_item(const tn_tensor *t)
{
    if (tn_numel(t) != 1) {
        char buf[96];
        tn__error(TN_ESHAPE, "item: tensor %s has %ld elements, not 1",
                  tn_shape_str(t, buf, sizeof buf), (long)tn_numel(t));
        return NAN;
    }
    return t->storage->data[t->offset];
}

static void tn__copy_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    float **p = ctx; /* p[0] destination base, p[1] source base */
    float *dst = p[0] + offsets[0];
    const float *src = p[1] + offsets[1];
    if (inner[0] == 1 && inner[1] == 1) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; i++)
        dst[i * inner[0]] = src[i * inner[1]];
}

void tn_copy_to(const tn_tensor *t, float *out)
{
    if (tn_numel(t) == 0)
        return;
    tn__strided it = {.ndim = t->ndim, .shape = t->shape, .nops = 2};
    tn__contiguous_strides(t->ndim, t->shape, it.strides[0]);
    memcpy(it.strides[1], t->strides, sizeof t->strides);
    it.offsets[0] = 0;
    it.offsets[1] = t->offset;
    float *bases[2] = {out, t->storage->data};
    tn__strided_rows(&it, tn__copy_row, bases);
}

uint64_t tn_version(const tn_tensor *t) { return t->storage->version; }

bool tn_is_inference(const tn_tensor *t) { return t->storage->inference; }

int tn_set_name(tn_tensor *t, const char *name)
{
    if (tn__check_arg("set_name", "tensor", t) != 0)
        return TN_EINVAL;
    char *copy = name ? strdup(name) : NULL;
    if (name && !copy)
        return tn__error(TN_ENOMEM, "set_name: out of memory");
    free(t->name);
    t->name = copy;
    return 0;
}

const char *tn_name(const tn_tensor *t) { return t->name; }

/* ---- strided iteration ---------------------------------------------------------------------- */

void tn__strided_rows(const tn__strided *it, tn__row_fn fn, void *ctx)
{
    int nd = it->ndim;
    int64_t offsets[3];
    int64_t inner[3] = {0, 0, 0};
    for (int k = 0; k < it->nops; k++) {
        offsets[k] = it->offsets[k];
        if (nd > 0)
            inner[k] = it->strides[k][nd - 1];
    }
    if (nd == 0) {
        fn(1, offsets, inner, ctx);
        return;
    }
    for (int d = 0; d < nd; d++)
        if (it->shape[d] == 0)
            return;
    int64_t row = it->shape[nd - 1];
    int64_t index[TN_MAX_DIMS] = {0};
    for (;;) {
        fn(row, offsets, inner, ctx);
        /* Odometer over the outer dims, updating offsets incrementally. */
        int d = nd - 2;
        for (; d >= 0; d--) {
            index[d]++;
            for (int k = 0; k < it->nops; k++)
                offsets[k] += it->strides[k][d];
            if (index[d] < it->shape[d])
                break;
            for (int k = 0; k < it->nops; k++)
                offsets[k] -= it->strides[k][d] * it->shape[d];
            index[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- in-place ops --------------------------------------------------------------------------- */

void tn__bump_version(tn_tensor *t)
{
    if (!t->storage->inference)
        t->storage->version++;
}

/* In-place ops are refused on tensors that autograd is tracking, and on inference tensors outside
 * inference mode (as PyTorch does). */
static int tn__inplace_check(const char *op, const tn_tensor *t)
{
    if (tn__check_arg(op, "tensor", t) != 0)
        return TN_EINVAL;
    char buf[96];
    if (t->requires_grad && tn_is_grad_enabled())
        return tn__error(TN_EGRAD,
                         "%s: in-place op on tensor %s that requires grad while grad is enabled "
                         "(run it under no_grad, or on a detached tensor)",
                         op, tn_shape_str(t, buf, sizeof buf));
    if (t->storage->inference && !tn_is_inference_mode_enabled())
        return tn__error(TN_EINFERENCE,
                         "%s: in-place update to inference tensor %s outside inference mode", op,
                         tn_shape_str(t, buf, sizeof buf));
    return 0;
}

static void tn__fill_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    const float *value = ((const float **)ctx)[1];
    float *dst = ((float **)ctx)[0] + offsets[0];
    for (int64_t i = 0; i < n; i++)
        dst[i * inner[0]] = *value;
}

static void tn__for_each_self(tn_tensor *t, tn__row_fn fn, const void *arg)
{
    tn__strided it = {.ndim = t->ndim, .shape = t->shape, .nops = 1};
    memcpy(it.strides[0], t->strides, sizeof t->strides);
    it.offsets[0] = t->offset;
    const void *ctx[2] = {t->storage->data, arg};
    tn__strided_rows(&it, fn, (void *)ctx);
}

int tn_fill_(tn_tensor *t, float value)
{
    int rc = tn__inplace_check("fill_", t);
    if (rc)
        return rc;
    if (tn_numel(t))
        tn__for_each_self(t, tn__fill_row, &value);
    tn__bump_version(t);
    return 0;
}

static void tn__scale_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    float s = *((const float **)ctx)[1];
    float *dst = ((float **)ctx)[0] + offsets[0];
    for (int64_t i = 0; i < n; i++)
        dst[i * inner[0]] *= s;
}

int tn_mul_scalar_(tn_tensor *t, float s)
{
    int rc = tn__inplace_check("mul_scalar_", t);
    if (rc)
        return rc;
    if (tn_numel(t))
        tn__for_each_self(t, tn__scale_row, &s);
    tn__bump_version(t);
    return 0;
}

static void tn__add_row(int64_t n, const int64_t *offsets, const int64_t *inner, void *ctx)
{
    float **p = ctx;
    float *dst = p[0] + offsets[0];
    const float *src = p[1] + offsets[1];
    for (int64_t i = 0; i < n; i++)
        dst[i * inner[0]] += src[i * inner[1]];
}

int tn_add_(tn_tensor *t, const tn_tensor *other)
{
    int rc = tn__inplace_check("add_", t);
    if (rc || (rc = tn__check_arg("add_", "other", other)))
        return rc;
    int nd;
    int64_t shape[TN_MAX_DIMS];
    rc = tn__broadcast_shapes("add_", t->ndim, t->shape, other->ndim, other->shape, &nd, shape);
    if (rc)
        return rc;
    if (!tn__shape_equal(nd, shape, t->ndim, t->shape)) {
        char a[96], b[96];
        return tn__error(TN_ESHAPE, "add_: other %s does not broadcast to self %s",
                         tn_shape_str(other, b, sizeof b), tn_shape_str(t, a, sizeof a));
    }
    if (tn_numel(t) == 0)
        return 0;
    tn__strided it = {.ndim = t->ndim, .shape = t->shape, .nops = 2};
    memcpy(it.strides[0], t->strides, sizeof t->strides);
    tn__broadcast_strides(other, t->ndim, t->shape, it.strides[1]);
    it.offsets[0] = t->offset;
    it.offsets[1] = other->offset;
    float *bases[2] = {t->storage->data, other->storage->data};
    tn__strided_rows(&it, tn__add_row, bases);
    tn__bump_version(t);
    return 0;
}

int tn_copy_(tn_tensor *dst, const tn_tensor *src)
{
    int rc = tn__inplace_check("copy_", dst);
    if (rc || (rc = tn__check_arg("copy_", "src", src)))
        return rc;
    if (tn_numel(dst) != tn_numel(src)) {
        char a[96], b[96];
        return tn__error(TN_ESHAPE, "copy_: src %s has %ld elements, dst %s has %ld",
                         tn_shape_str(src, b, sizeof b), (long)tn_numel(src),
                         tn_shape_str(dst, a, sizeof a), (long)tn_numel(dst));
    }
    int64_t n = tn_numel(src);
    if (n == 0)
        return 0;
    if (tn_is_contiguous(dst)) {
        tn_copy_to(src, tn_data(dst));
    } else {
        float *tmp = malloc((size_t)n * sizeof(float));
        if (!tmp)
            return tn__error(TN_ENOMEM, "copy_: out of memory");
        tn_copy_to(src, tmp);
        /* Scatter row-major values into dst's layout. */
        tn__strided it = {.ndim = dst->ndim, .shape = dst->shape, .nops = 2};
        memcpy(it.strides[0], dst->strides, sizeof dst->strides);
        tn__contiguous_strides(dst->ndim, dst->shape, it.strides[1]);
        it.offsets[0] = dst->offset;
        it.offsets[1] = 0;
        float *bases[2] = {dst->storage->data, tmp};
        tn__strided_rows(&it, tn__copy_row, bases);
        free(tmp);
    }
    tn__bump_version(dst);
    return 0;
}
