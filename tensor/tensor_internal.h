/*
 * Internals shared by the tensor library's source files. Not installed.
 *
 * Writing an op (see tensor/ops_unary.c for the pattern):
 *   1. validate arguments, returning NULL with tn__error(...) naming the op and the shapes;
 *   2. out = tn__new_output(ndim, shape, "op") — contiguous, tagged ACTIVATION (GRADIENT inside a
 *      backward), module path and grad mode taken from the thread's context;
 *   3. compute into tn_data(out);
 *   4. if tn__grad_needed(n, inputs): node = tn__node_new(&kind, out, n, inputs), then
 *      tn__save(node, t) for every tensor backward needs — the ONE way anything is kept for
 *      backward. On failure tn_release(out) and return NULL.
 * A backward function receives the output's gradient (contiguous, the output's shape) and sets
 * grad_inputs[i] (a new reference, the i-th input's shape) for each i with
 * tn__input_needs_grad(node, i); others stay NULL. It runs with grad disabled, so it may call the
 * public ops freely: their allocations are tagged GRADIENT with op "<op>_backward".
 */
#ifndef GRADPROF_TENSOR_INTERNAL_H
#define GRADPROF_TENSOR_INTERNAL_H

#include <stdatomic.h>

#include "gradprof/tensor.h"

#define TN_MAX_SAVED 4
#define TN_NODE_INTS 16
#define TN_NODE_FLOATS 4

/* ---- errors --------------------------------------------------------------------------------- */

/* Sets the thread's error (code + printf-style message) and returns code. */
int tn__error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The code a failed callee set (TN_ENOMEM if, oddly, it set none): for propagating a NULL. */
int tn__pending_error(void);
/* Returns NULL after setting the error; for pointer-returning functions. */
#define TN__FAIL_NULL(code, ...) (tn__error((code), __VA_ARGS__), (void *)0)

/* ---- allocator ------------------------------------------------------------------------------ */

/* Allocates `bytes` (64-byte aligned) and reports it to libprof with `category`, `op` and the
 * thread's module path and grad mode; inside a backward, ACTIVATION becomes GRADIENT and the op
 * label becomes the running backward's name. `detail` (a shape, may be NULL) is an extra label.
 * Returns NULL with TN_ENOMEM set (naming op and bytes) on failure. */
void *tn__alloc(size_t bytes, lp_category category, const char *op, const char *detail);
/* Reports and frees a buffer made by tn__alloc; `category` is its current category. */
void tn__free(void *ptr, size_t bytes, lp_category category);
/* The category an allocation of `category` gets in the current context (see tn__alloc). */
lp_category tn__effective_category(lp_category category);

/* The thread's allocation context: the module whose forward is running (a path owned by that
 * module or node, "" at top level) and the backward being run (NULL in forward). */
typedef struct tn__context {
    const char *module;
    const char *backward_op;
} tn__context;
tn__context *tn__ctx(void);

/* ---- storage and tensors ------------------------------------------------------------------- */

typedef struct tn_node tn_node;

typedef struct tn_storage {
    float *data;
    size_t nbytes;
    atomic_long refcount;        /* tensors and saved slots that point here */
    uint64_t version;            /* bumped by in-place ops (not on inference storage) */
    lp_category category;        /* current libprof category */
    lp_category unsaved_category; /* the category to return to when the last saver lets go */
    int save_count;              /* graph slots that keep this storage for backward */
    bool inference;              /* made under inference_mode */
} tn_storage;

struct tn_tensor {
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    int64_t strides[TN_MAX_DIMS];
    int64_t offset; /* in elements */
    tn_storage *storage;
    atomic_long refcount;
    bool requires_grad;
    tn_node *grad_fn;          /* owned reference; NULL for leaves */
    tn_node *grad_accumulator; /* weak: the leaf's AccumulateGrad node while one exists */
    tn_tensor *grad;           /* owned */
    char *name;
};

/* A storage of nbytes tagged `category` by `op`; refcount 1. */
tn_storage *tn__storage_new(size_t nbytes, lp_category category, const char *op,
                            const char *detail);
void tn__storage_retain(tn_storage *s);
void tn__storage_release(tn_storage *s);

/* A tensor header over `storage` (takes a new reference to it) with the given layout. */
tn_tensor *tn__tensor_wrap(tn_storage *storage, int ndim, const int64_t *shape,
                           const int64_t *strides, int64_t offset);
/* A new contiguous uninitialised tensor, tagged ACTIVATION by `op` (see tn__alloc). */
tn_tensor *tn__new_output(int ndim, const int64_t *shape, const char *op);
/* Same, with an explicit category (TEMPORARY scratch, SAVED extras, ...). */
tn_tensor *tn__new_tensor(int ndim, const int64_t *shape, lp_category category, const char *op);

/* A contiguous copy of t tagged TEMPORARY by `op`, outside the graph (the caller releases it). */
tn_tensor *tn__scratch_copy(const tn_tensor *t, const char *op);
/* t itself (a new reference) if contiguous, else tn__scratch_copy(t, op). */
tn_tensor *tn__contiguous_scratch(tn_tensor *t, const char *op);
/* Fills dst[0..n) with uniform [low, high) values from this thread's generator. */
void tn__rand_uniform_fill(float *dst, int64_t n, float low, float high);

void tn__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);
int64_t tn__shape_numel(int ndim, const int64_t *shape);
bool tn__shape_equal(int ndim_a, const int64_t *a, int ndim_b, const int64_t *b);
/* Formats a shape as "[2,3]"; returns buf. */
const char *tn__shape_fmt(int ndim, const int64_t *shape, char *buf, size_t size);
/* Normalises a possibly negative dim; returns -1 if out of range. */
int tn__wrap_dim(int dim, int ndim);
/* NumPy broadcast of two shapes into out (ndim *out_ndim); TN_ESHAPE error naming `op` if
 * incompatible. */
int tn__broadcast_shapes(const char *op, int na, const int64_t *a, int nb, const int64_t *b,
                         int *out_ndim, int64_t *out);

/*
 * e^x within 2 ulp of expf, without a call or a branch, so that GCC vectorises a loop of it
 * (softmax's exponentials; libm's expf is a call per element). Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2 (ln2 in two parts, so that n ln2 is exact), e^r by Cephes' degree-6 polynomial for
 * expf, 2^n written into the exponent bits. NaN gives NaN, x below -87.33 (where e^x leaves the
 * normal floats) gives 0, and -inf 0; x is at most 88 (e^88 = 1.65e38): softmax's inputs are <= 0.
 */
static inline float tn__exp_lane(float x)
{
    const float lo = -87.33654f, hi = 88.0f;
    /* Every comparison made unconditionally, then selects: GCC if-converts (vectorises) them. */
    bool nan = x != x;
    bool under = x < lo;
    bool over = x > hi;
    float xc = over ? hi : x;
    xc = under | nan ? lo : xc;
    /* n = round(x / ln2): adding 1.5 * 2^23 rounds to an integer in the default rounding mode. */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale = {.i = ((int32_t)n + 127) << 23};
    y *= scale.f;
    return nan ? x : (under ? 0.0f : y);
}

/* The total of 8 lanes' partial sums, added pairwise (lanes j and j + 4 first): the one order
 * every lane sum of the library ends with. */
static inline float tn__lanes_total(const float acc[8])
{
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* sum(x[j]) or, if `sq`, sum((x[j] - mu)^2) over j < n, in 8 vector lanes (reduce.c). */
float tn__lane_sum(const float *x, int64_t n, float mu, bool sq);
/* Sums grad over broadcast dims so it has shape (ndim, shape): a new reference (grad itself,
 * retained, when nothing needs summing). */
tn_tensor *tn__sum_to_shape(tn_tensor *grad, int ndim, const int64_t *shape);
/* Strides of t broadcast to (ndim, shape): 0 on expanded dims. t must be broadcastable. */
void tn__broadcast_strides(const tn_tensor *t, int ndim, const int64_t *shape, int64_t *strides);
/* Checks t is a usable argument of `op`: non-NULL. Returns 0 or sets TN_EINVAL. */
int tn__check_arg(const char *op, const char *what, const tn_tensor *t);

/* Calls fn(offset_a, offset_b, offset_out, i, ctx) over all elements of out's shape in row-major
 * order, with per-operand strides (0 for broadcast dims). Pointers into data are up to fn. */
typedef struct tn__strided {
    int ndim;
    const int64_t *shape;
    int64_t strides[3][TN_MAX_DIMS];
    int64_t offsets[3];
    int nops;
} tn__strided;
/* Advances the per-operand offsets through every index; calls fn once per innermost row with the
 * row length and inner strides so loops stay tight. */
typedef void (*tn__row_fn)(int64_t n, const int64_t *offsets, const int64_t *inner_strides,
                           void *ctx);
void tn__strided_rows(const tn__strided *it, tn__row_fn fn, void *ctx);

/* Bumps the version of t's storage (not for inference storage). */
void tn__bump_version(tn_tensor *t);

/* Whether nobody else can see t's values (one reference to t and to its storage, no graph slot
 * saves it, contiguous), so it may be updated in place. */
bool tn__exclusive(const tn_tensor *t);

/* In place, outside the graph: t (tn__exclusive) becomes the softmax over its last dim of t *
 * scale, the same values as tn_softmax(tn_mul_scalar(t, scale), -1). Returns 0. */
int tn__softmax_scaled_(tn_tensor *t, float scale);

/* ---- grad mode ------------------------------------------------------------------------------ */

/* Whether an op on these inputs must record a node: grad enabled and some input requires grad. */
bool tn__grad_needed(int n, tn_tensor *const *inputs);

/* ---- autograd ------------------------------------------------------------------------------- */

typedef int (*tn_backward_fn)(tn_node *node, tn_tensor *grad_output, tn_tensor **grad_inputs);

/* What kind of node: the op name ("relu") and the backward name ("relu_backward"). */
typedef struct tn_node_kind {
    const char *name;
    const char *backward_name;
    tn_backward_fn backward;
} tn_node_kind;

/* A slot keeping a tensor for backward: a reference to its storage and its layout (not the tensor
 * itself, so saving an op's own output makes no reference cycle). */
typedef struct tn_saved {
    tn_storage *storage;
    const char *made_by; /* the op that produced the tensor ("leaf" for one without a node) */
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    int64_t strides[TN_MAX_DIMS];
    int64_t offset;
    uint64_t version;
} tn_saved;

typedef struct tn_node_input {
    tn_node *next; /* owned: the producer's node, or the leaf's AccumulateGrad; NULL = no grad */
    int ndim;
    int64_t shape[TN_MAX_DIMS];
} tn_node_input;

struct tn_node {
    const tn_node_kind *kind;
    atomic_long refcount;
    uint64_t seq;      /* creation order; later nodes run first in backward */
    const char *module; /* copy of the module path at creation, in the same allocation */
    size_t alloc_bytes;
    int n_saved;
    bool saved_released;
    tn_saved saved[TN_MAX_SAVED];
    /* Op parameters: ints and floats, and an optional extra buffer (tagged AUTOGRAD). */
    int64_t ints[TN_NODE_INTS];
    float floats[TN_NODE_FLOATS];
    void *extra;
    size_t extra_bytes;
    tn_tensor *leaf; /* AccumulateGrad: the leaf (owned reference) */
    /* Engine scratch, valid during one tn_backward. */
    uint64_t visit_epoch;
    int deps;
    tn_tensor *pending;
    int n_inputs;
    tn_node_input inputs[]; /* n_inputs */
};

/* Creates out's graph node: one input edge per inputs[i], out->grad_fn = node (out owns it),
 * out->requires_grad = true. Call only when tn__grad_needed(). Returns NULL with an error set. */
tn_node *tn__node_new(const tn_node_kind *kind, tn_tensor *out, int n, tn_tensor *const *inputs);
/* Allocates node->extra (bytes, zeroed), tagged AUTOGRAD; freed with the node. */
void *tn__node_extra(tn_node *node, size_t bytes);
/* Keeps t for backward: the ONE function through which every op retains a tensor. Retags t's
 * storage SAVED (if it was an ACTIVATION) on the first save. Refuses inference tensors
 * (TN_EINFERENCE). Returns the slot index, or a negative error. */
int tn__save(tn_node *node, tn_tensor *t);
/* A fresh view of saved slot i (new reference, requires_grad false), or NULL with TN_EGRAD if the
 * graph was already released, TN_EVERSION if the tensor was modified in place since it was saved. */
tn_tensor *tn__saved(tn_node *node, int slot);
/* Whether backward must compute the gradient of input i. */
bool tn__input_needs_grad(const tn_node *node, int i);
void tn__node_release(tn_node *node);

#endif /* GRADPROF_TENSOR_INTERNAL_H */
