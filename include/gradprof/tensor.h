/*
 * libtensor — float32 n-d tensors with reverse-mode autograd, instrumented for gradprof.
 *
 * Every buffer (tensor storage, graph node, optimizer state, scratch) is allocated through one
 * tagged allocator that reports to libprof with its category, the op that made it, the module path
 * active at the time and the grad mode. When an op keeps a tensor for backward its storage is
 * retagged SAVED; when the graph lets it go it is retagged back.
 *
 * Ownership: every function that returns a tn_tensor* returns a new reference that the caller must
 * give back with tn_release(). Functions that take tensors borrow them (they take their own
 * references where they keep one). tn_release(NULL) is a no-op.
 *
 * Errors: functions that return a pointer return NULL on error; functions that return int return 0
 * or a negative TN_E* code. In both cases tn_last_error() / tn_last_error_message() (thread-local)
 * say what went wrong, naming the op, the shapes and the bad value. Nothing aborts on bad input.
 *
 * Grad modes follow PyTorch: thread-local and nestable. An op records a graph node only when grad
 * is enabled and one of its inputs requires grad.
 */
#ifndef GRADPROF_TENSOR_H
#define GRADPROF_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/libprof.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TN_MAX_DIMS 8

/* ---------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------- */

/* X(ENUM, value, description) */
#define TN_ERRNO_MAP(X)                                                                            \
    X(EINVAL, -1, "invalid argument")                                                              \
    X(ESHAPE, -2, "shape mismatch")                                                                \
    X(ENOMEM, -3, "out of memory")                                                                 \
    X(EGRAD, -4, "autograd misuse")                                                                \
    X(EVERSION, -5, "saved tensor modified in place")                                              \
    X(EINFERENCE, -6, "inference tensor used where autograd needs it")                            \
    X(EIO, -7, "i/o error")                                                                        \
    X(EFORMAT, -8, "malformed file")                                                               \
    X(ENOTFOUND, -9, "not found")

typedef enum tn_errno {
    TN_OK = 0,
#define TN__ERRNO_ENUM(e, v, s) TN_##e = (v),
    TN_ERRNO_MAP(TN__ERRNO_ENUM)
#undef TN__ERRNO_ENUM
} tn_errno;

/* A static description of an error code ("shape mismatch"); "unknown error" for others. */
const char *tn_strerror(int code);
/* The code and message of the last error on this thread (TN_OK and "" if none since the last clear). */
int tn_last_error(void);
const char *tn_last_error_message(void);
void tn_clear_error(void);

/* ---------------------------------------------------------------------------------------------
 * Allocator
 * ------------------------------------------------------------------------------------------- */

/* The raw allocator underneath the tagged one, replaceable for fault injection (as in libuv).
 * alloc returns memory aligned to at least 64 bytes, or NULL. */
typedef struct tn_allocator {
    void *(*alloc)(size_t bytes, void *ctx);
    void (*free)(void *ptr, void *ctx);
    void *ctx;
} tn_allocator;

/* Replaces the raw allocator; NULL restores the default (posix_memalign/free, 64-byte aligned; a
 * buffer of 2 MiB or more has its whole 2 MiB pages offered to the kernel as transparent huge
 * pages, and is 2 MiB-aligned as long as glibc maps such buffers on their own rather than from its
 * heap: README, "Speed in a loop"). Only call it while no tensor, node or module exists, since
 * buffers must be freed by the allocator that made them. */
void tn_set_allocator(const tn_allocator *allocator);

/* The buffer cache of the default allocator (README, "Speed in a loop"). A buffer of 256 bytes or
 * more that goes while gradprof is not recording, other than a parameter or optimizer state, is
 * kept for the next request of exactly its size, so that a loop's next step reuses its pages
 * instead of faulting them in again (parameters and optimizer state go back to malloc when their
 * model or optimizer goes). While gradprof records, the cache is emptied and bypassed, and a trace
 * shows every buffer made and freed with its tensor. The idle bytes are bounded by a limit:
 * TN_CACHE_LIMIT_PEAK (the default) is the peak of the bytes of the default allocator's buffers in
 * use so far; 0 turns the cache off. Past the limit, the least recently freed go back to malloc.
 * tn_cache_set_limit returns the previous limit. */
#define TN_CACHE_LIMIT_PEAK ((size_t)-1)
size_t tn_cache_set_limit(size_t bytes);
/* Gives every idle buffer back to malloc (as torch.cuda.empty_cache() does). */
void tn_cache_release(void);
/* The bytes of the idle buffers the cache holds now. */
size_t tn_cache_idle_bytes(void);

/* ---------------------------------------------------------------------------------------------
 * Grad modes
 * ------------------------------------------------------------------------------------------- */

/* The grad mode of this thread, saved and restored as one value.
 *
 * Every thread starts with grad enabled and inference mode off, unless the environment variable
 * GRADPROF_GRAD_DEFAULT is "off": then every thread starts with grad disabled, as if its whole
 * life ran inside no_grad (but with no "no_grad" region). "on", empty or unset is the usual
 * default; any other value gives one warning line on stderr per process and is ignored. The
 * variable is read by each thread when it first uses its grad mode (any tn_* call that queries
 * or changes it, such as creating a tensor), so a thread started after a setenv() sees the new
 * value. The scopes and tn_set_grad_enabled work as usual from either start: enable_grad turns
 * grad on inside a thread that started with it off. `gradprof compare` uses this to run a
 * program once as it is and once with grad off from the start. */
typedef struct tn_grad_mode {
    bool grad_enabled;
    bool inference_mode;
} tn_grad_mode;

bool tn_is_grad_enabled(void);
/* Sets whether grad is enabled on this thread; returns the previous value. */
bool tn_set_grad_enabled(bool enabled);
bool tn_is_inference_mode_enabled(void);

/* Scopes. Each *_begin returns the mode to give back to tn_grad_mode_end(), which restores it:
 *     tn_grad_mode prev = tn_no_grad_begin();  ...  tn_grad_mode_end(prev);
 * no_grad disables grad; enable_grad enables it (also inside no_grad); inference_mode(true) disables
 * grad and also version counters and view tracking: tensors made there are inference tensors, which
 * autograd refuses to save for backward later. Each scope also pushes a libprof region ("no_grad",
 * "enable_grad", "inference_mode"), popped by tn_grad_mode_end. */
tn_grad_mode tn_no_grad_begin(void);
tn_grad_mode tn_enable_grad_begin(void);
tn_grad_mode tn_inference_mode_begin(bool enabled);
void tn_grad_mode_end(tn_grad_mode previous);

/* ---------------------------------------------------------------------------------------------
 * Tensors
 * ------------------------------------------------------------------------------------------- */

typedef struct tn_tensor tn_tensor;

/* Creation. `category` is the role of the new buffer: LP_CAT_INPUT for data, LP_CAT_PARAMETER for
 * weights, LP_CAT_ACTIVATION for anything else. The result is a leaf that does not require grad. */
tn_tensor *tn_empty(int ndim, const int64_t *shape, lp_category category);
tn_tensor *tn_zeros(int ndim, const int64_t *shape, lp_category category);
tn_tensor *tn_full(int ndim, const int64_t *shape, float value, lp_category category);
/* Copies shape-product floats from `data`. */
tn_tensor *tn_from_data(int ndim, const int64_t *shape, const float *data, lp_category category);
tn_tensor *tn_scalar(float value, lp_category category);
/* Random tensors from this thread's generator (see tn_manual_seed). */
tn_tensor *tn_randn(int ndim, const int64_t *shape, lp_category category);
tn_tensor *tn_rand_uniform(int ndim, const int64_t *shape, float low, float high,
                           lp_category category);
/* Seeds this thread's generator (xoshiro256**); deterministic for a given seed. */
void tn_manual_seed(uint64_t seed);

/* Gives back one reference; the storage is freed when its last tensor goes. NULL is a no-op. */
void tn_release(tn_tensor *t);
/* Takes one more reference and returns t. */
tn_tensor *tn_retain(tn_tensor *t);

/* Metadata. */
int tn_ndim(const tn_tensor *t);
const int64_t *tn_shape(const tn_tensor *t);
const int64_t *tn_strides(const tn_tensor *t); /* in elements */
int64_t tn_size(const tn_tensor *t, int dim);  /* negative dims count from the end */
int64_t tn_numel(const tn_tensor *t);
bool tn_is_contiguous(const tn_tensor *t);
/* Formats the shape as "[2,3,4]" into buf (always NUL-terminated); returns buf. */
const char *tn_shape_str(const tn_tensor *t, char *buf, size_t buf_size);
/* The first element's address; elements are at data[sum(index[d] * strides[d])]. */
float *tn_data(tn_tensor *t);
const float *tn_data_const(const tn_tensor *t);
/* The value of a one-element tensor. */
float tn_item(const tn_tensor *t);
/* Copies the elements in row-major order into out[numel]. */
void tn_copy_to(const tn_tensor *t, float *out);
/* The storage's version counter (bumped by in-place ops, except on inference tensors). */
uint64_t tn_version(const tn_tensor *t);
bool tn_is_inference(const tn_tensor *t);
/* An optional name, used in error messages and tags; copied. */
int tn_set_name(tn_tensor *t, const char *name);
const char *tn_name(const tn_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Autograd
 * ------------------------------------------------------------------------------------------- */

/* Marks a leaf as requiring grad (error on a non-leaf, as in PyTorch). */
int tn_set_requires_grad(tn_tensor *t, bool requires_grad);
bool tn_requires_grad(const tn_tensor *t);
bool tn_is_leaf(const tn_tensor *t);
/* The op name of the node that made t ("linear"), or NULL for leaves and detached tensors. */
const char *tn_grad_fn_name(const tn_tensor *t);
/* The accumulated gradient of a leaf (a borrowed pointer, NULL if none yet). */
tn_tensor *tn_grad(const tn_tensor *t);
/* Frees the leaf's .grad (set_to_none semantics). */
void tn_zero_grad(tn_tensor *t);

/* Runs backward from `root`. `grad` is the gradient of root (NULL means ones, allowed only for a
 * one-element root). Gradients accumulate (+=) into .grad of leaves that require grad. Without
 * retain_graph the saved tensors of the graph are released as soon as each node has run, and a
 * second backward through it fails with TN_EGRAD. */
int tn_backward(tn_tensor *root, const tn_tensor *grad, bool retain_graph);

/* A new tensor sharing t's storage, outside the graph (requires_grad false). */
tn_tensor *tn_detach(tn_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Views: share storage with the input; grads flow through them.
 * ------------------------------------------------------------------------------------------- */

/* Same elements, new shape; one dim may be -1. view requires a compatible layout (TN_ESHAPE
 * otherwise); reshape copies when it must. */
tn_tensor *tn_view(tn_tensor *t, int ndim, const int64_t *shape);
tn_tensor *tn_reshape(tn_tensor *t, int ndim, const int64_t *shape);
tn_tensor *tn_transpose(tn_tensor *t, int dim0, int dim1);
tn_tensor *tn_permute(tn_tensor *t, const int *dims); /* dims[ndim] */
/* Elements [start, start+length) along dim. */
tn_tensor *tn_narrow(tn_tensor *t, int dim, int64_t start, int64_t length);
/* Broadcasts size-1 dims (and new leading dims) to `shape`, with stride 0. */
tn_tensor *tn_expand(tn_tensor *t, int ndim, const int64_t *shape);
/* t itself (a new reference) if contiguous, else a contiguous copy. */
tn_tensor *tn_contiguous(tn_tensor *t);

/* ---------------------------------------------------------------------------------------------
 * Ops. Outputs are new contiguous tensors tagged ACTIVATION with the op's name.
 * Binary elementwise ops broadcast like NumPy.
 * ------------------------------------------------------------------------------------------- */

tn_tensor *tn_add(tn_tensor *a, tn_tensor *b);
tn_tensor *tn_sub(tn_tensor *a, tn_tensor *b);
tn_tensor *tn_mul(tn_tensor *a, tn_tensor *b);
tn_tensor *tn_div(tn_tensor *a, tn_tensor *b);
tn_tensor *tn_add_scalar(tn_tensor *a, float s);
tn_tensor *tn_mul_scalar(tn_tensor *a, float s);
tn_tensor *tn_neg(tn_tensor *a);
tn_tensor *tn_exp(tn_tensor *a);
tn_tensor *tn_log(tn_tensor *a);
tn_tensor *tn_sqrt(tn_tensor *a);
tn_tensor *tn_pow_scalar(tn_tensor *a, float exponent);
tn_tensor *tn_relu(tn_tensor *a);
tn_tensor *tn_gelu(tn_tensor *a); /* exact (erf) form, PyTorch's default */
tn_tensor *tn_tanh(tn_tensor *a);
tn_tensor *tn_sigmoid(tn_tensor *a);

/* a [..., n, k] @ b [..., k, m] -> [..., n, m]. 1-D and 2-D as in torch.matmul; batch dims
 * broadcast. */
tn_tensor *tn_matmul(tn_tensor *a, tn_tensor *b);
/* x [..., in] @ weight[out, in]^T + bias[out] -> [..., out]; bias may be NULL. */
tn_tensor *tn_linear(tn_tensor *x, tn_tensor *weight, tn_tensor *bias);
/* x [N, C, H, W], weight [O, C, kh, kw], bias [O] or NULL -> [N, O, Ho, Wo] (im2col + sgemm). */
tn_tensor *tn_conv2d(tn_tensor *x, tn_tensor *weight, tn_tensor *bias, int stride, int padding);
/* x [N, C, H, W] -> [N, C, Ho, Wo]; padding counts as -inf for max and as zeros for avg. */
tn_tensor *tn_max_pool2d(tn_tensor *x, int kernel, int stride, int padding);
tn_tensor *tn_avg_pool2d(tn_tensor *x, int kernel, int stride, int padding);

/* Softmax over `dim` (negative counts from the end). */
tn_tensor *tn_softmax(tn_tensor *x, int dim);
tn_tensor *tn_log_softmax(tn_tensor *x, int dim);
/* Normalises over the last dim; weight/bias [D] or NULL. */
tn_tensor *tn_layer_norm(tn_tensor *x, tn_tensor *weight, tn_tensor *bias, float eps);
/* x [N, C, ...]. In training uses batch statistics and updates running_mean/var (unbiased var)
 * with `momentum`; in eval uses them. weight/bias/running tensors [C]; weight/bias may be NULL. */
tn_tensor *tn_batch_norm(tn_tensor *x, tn_tensor *running_mean, tn_tensor *running_var,
                         tn_tensor *weight, tn_tensor *bias, bool training, float momentum,
                         float eps);
/* Zeroes elements with probability p and scales the rest by 1/(1-p) in training; identity (a new
 * reference to x) otherwise. */
tn_tensor *tn_dropout(tn_tensor *x, float p, bool training);
/* weight [V, D]; ids has `ndim` dims `shape`, values in [0, V) -> [shape..., D]. */
tn_tensor *tn_embedding(tn_tensor *weight, const int64_t *ids, int ndim, const int64_t *shape);

/* Sum / mean over `ndims` dims (negative allowed); ndims == 0 reduces over all dims. */
tn_tensor *tn_sum(tn_tensor *x, int ndims, const int *dims, bool keepdim);
tn_tensor *tn_mean(tn_tensor *x, int ndims, const int *dims, bool keepdim);
/* Concatenates n tensors along dim; all other dims must match. */
tn_tensor *tn_concat(tn_tensor *const *tensors, int n, int dim);

/* Mean cross-entropy of logits [N, C] against class indices targets[N]. */
tn_tensor *tn_cross_entropy(tn_tensor *logits, const int64_t *targets);
/* Mean squared error; shapes must be equal. */
tn_tensor *tn_mse_loss(tn_tensor *input, tn_tensor *target);
/* softmax(q k^T / sqrt(d) + mask) v, for q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv]; with
 * causal, position i attends to j <= i. Built from matmul and softmax, so it saves what they save. */
tn_tensor *tn_scaled_dot_product_attention(tn_tensor *q, tn_tensor *k, tn_tensor *v, bool causal);

/* In-place ops bump the version counter. They are refused (TN_EGRAD) while grad is enabled on a
 * tensor that requires grad; a saved tensor changed by them makes a later backward fail with
 * TN_EVERSION. */
int tn_fill_(tn_tensor *t, float value);
int tn_add_(tn_tensor *t, const tn_tensor *other); /* other broadcasts to t */
int tn_mul_scalar_(tn_tensor *t, float s);
int tn_copy_(tn_tensor *dst, const tn_tensor *src); /* same numel */

/* ---------------------------------------------------------------------------------------------
 * Modules
 * ------------------------------------------------------------------------------------------- */

typedef struct tn_module tn_module;

/* Layers. Parameters are initialised as PyTorch does (uniform ±1/sqrt(fan_in) for Linear and Conv2d;
 * ones/zeros for norms; N(0,1) for Embedding) from this thread's generator. */
tn_module *tn_linear_new(int64_t in_features, int64_t out_features, bool bias);
tn_module *tn_conv2d_new(int64_t in_channels, int64_t out_channels, int kernel, int stride,
                         int padding, bool bias);
tn_module *tn_batch_norm2d_new(int64_t channels);
tn_module *tn_layer_norm_new(int64_t dim);
tn_module *tn_dropout_new(float p);
tn_module *tn_relu_new(void);
tn_module *tn_gelu_new(void);
tn_module *tn_embedding_new(int64_t num_embeddings, int64_t dim);
/* As torch.nn.MultiheadAttention(batch_first=True) for self-attention: x [B, T, D] -> [B, T, D].
 * Parameters in_proj_weight [3D, D], in_proj_bias [3D], out_proj.{weight,bias}. */
tn_module *tn_multihead_attention_new(int64_t dim, int64_t heads);
/* As torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=false): self_attn, linear1,
 * dropout, linear2, norm1, norm2, dropout1, dropout2; activation relu or gelu. */
tn_module *tn_transformer_encoder_layer_new(int64_t dim, int64_t heads, int64_t ff_dim,
                                            float dropout, bool gelu);
/* An empty container; children are named "0", "1", ... in order. */
tn_module *tn_sequential_new(void);
/* Appends `child` to a Sequential; the Sequential takes ownership (also on error). */
int tn_sequential_append(tn_module *seq, tn_module *child);

/* Frees a module, its children and its parameters (tensors still referenced elsewhere live on). */
void tn_module_free(tn_module *m);

/* Runs the module on x, with its dotted path as the current module (allocations are tagged with it)
 * and as a libprof region. */
tn_tensor *tn_module_forward(tn_module *m, tn_tensor *x);
/* Embedding's forward: ids as in tn_embedding. */
tn_tensor *tn_embedding_forward(tn_module *m, const int64_t *ids, int ndim, const int64_t *shape);

/* train(true) / eval (train(false)) for m and all its children. */
void tn_module_train(tn_module *m, bool training);
bool tn_module_is_training(const tn_module *m);
/* The module's type name ("Linear") and dotted path ("" for the root, "0.fc1" below it). */
const char *tn_module_type(const tn_module *m);
const char *tn_module_path(const tn_module *m);
/* Sets the root's path prefix (e.g. "encoder"), which renames every descendant. */
int tn_module_set_name(tn_module *m, const char *name);
/* A child by index (NULL past the end), e.g. the layers of a Sequential. */
tn_module *tn_module_child(const tn_module *m, int index);

/* Named parameters and buffers in registration order, with full dotted names
 * ("encoder.0.weight"). Buffers (batch-norm running statistics) are included but never require
 * grad. The returned tensor is borrowed. */
int tn_module_param_count(const tn_module *m);
tn_tensor *tn_module_param(const tn_module *m, int index, const char **name);
tn_tensor *tn_module_param_by_name(const tn_module *m, const char *name);
/* Sets requires_grad on every trainable parameter (buffers excluded). */
void tn_module_requires_grad(tn_module *m, bool requires_grad);
/* tn_zero_grad on every parameter. */
void tn_module_zero_grad(tn_module *m);
/* Total bytes of parameters and buffers. */
size_t tn_module_param_bytes(const tn_module *m);

/* ---------------------------------------------------------------------------------------------
 * Weights in the safetensors format (8-byte LE header length, JSON header, raw LE data).
 * ------------------------------------------------------------------------------------------- */

/* Loads F32 tensors into the module's parameters by name. Every parameter must be present with the
 * same shape (extra tensors in the file are an error unless allow_extra). Nothing is changed unless
 * the whole file validates. */
int tn_module_load_safetensors(tn_module *m, const char *path, bool allow_extra);
/* Writes every parameter and buffer. */
int tn_module_save_safetensors(const tn_module *m, const char *path);

/* ---------------------------------------------------------------------------------------------
 * Optimizers. They keep borrowed pointers to the module's parameters: free the optimizer first.
 * ------------------------------------------------------------------------------------------- */

typedef struct tn_optimizer tn_optimizer;

tn_optimizer *tn_sgd_new(tn_module *m, float lr, float momentum, float weight_decay);
tn_optimizer *tn_adam_new(tn_module *m, float lr, float beta1, float beta2, float eps);
/* One update from the parameters' .grad (parameters without a grad are skipped). */
int tn_optimizer_step(tn_optimizer *opt);
void tn_optimizer_zero_grad(tn_optimizer *opt);
void tn_optimizer_free(tn_optimizer *opt);

#ifdef __cplusplus
}
#endif

#endif /* GRADPROF_TENSOR_H */
