/*
 * Unary elementwise ops: x [...] -> out [...], contiguous.
 *
 * This file shows the op-writing pattern of tensor_internal.h: validate, allocate the output with
 * tn__new_output, compute, then (only when tn__grad_needed) create the node and tn__save exactly
 * what backward needs. As in PyTorch's derivatives.yaml: exp, sqrt, tanh, sigmoid and relu save
 * their output (relu's threshold_backward reads the result); log, pow and gelu save their input;
 * add_scalar, mul_scalar and neg save nothing.
 *
 * Inputs may be non-contiguous views: they are read through their strides (tn__strided_rows), so no
 * contiguous copy is made or recorded in the graph.
 */
#include <math.h>
#include <string.h>

#include "tensor_internal.h"

#define UN_SQRT1_2 0.70710678118654752440f      /* 1/sqrt(2) */
#define UN_INV_SQRT_2PI 0.39894228040143267794f /* 1/sqrt(2*pi) */

/* Forward kernels (out = f(x)) and backward kernels (out = g * f'(v), v the saved input or output
 * as noted). `s` is the op's scalar (addend, factor or exponent). */
typedef enum un_op {
    UN_ADD_S,
    UN_MUL_S,
    UN_NEG,
    UN_EXP,
    UN_LOG,
    UN_SQRT,
    UN_POW,
    UN_RELU,
    UN_GELU,
    UN_TANH,
    UN_SIGMOID,
    UG_EXP,     /* v = y: g * y */
    UG_LOG,     /* v = x: g / x */
    UG_SQRT,    /* v = y: g / (2 y) */
    UG_POW,     /* v = x: g * s * x^(s-1), 0 when s == 0 (as PyTorch's masked_fill) */
    UG_RELU,    /* v = y: y > 0 ? g : 0 */
    UG_GELU,    /* v = x: g * (Phi(x) + x phi(x)) */
    UG_TANH,    /* v = y: g * (1 - y^2) */
    UG_SIGMOID, /* v = y: g * y (1 - y) */
} un_op;

/* Runs EXPR (of v = x element, and g[i] in backward kernels) over a row of n elements; the
 * unit-stride loop is separate so the compiler can vectorise it. */
#define UN_LOOP(EXPR)                                                                              \
    do {                                                                                           \
        if (sx == 1) {                                                                             \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float v = x[i];                                                                    \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float v = x[i * sx];                                                               \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* c ? a : b without a branch: on random signs a branch mispredicts half the time, which costs more
 * than the op itself when the loop is not vectorised. */
static inline float un_select(bool c, float a, float b)
{
    uint32_t ua, ub, m = -(uint32_t)c;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    uint32_t r = (ua & m) | (ub & ~m);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

static inline float un_sigmoid(float v)
{
    /* exp(-|v|) never overflows: sigmoid(|v|) = 1 / (1 + e) and sigmoid(-|v|) = e / (1 + e). */
    float e = expf(-fabsf(v));
    float s = 1.0f / (1.0f + e);
    return un_select(v < 0.0f, e * s, s);
}

static inline float un_gelu_grad(float v)
{
    float cdf = 0.5f * (1.0f + erff(v * UN_SQRT1_2));
    float pdf = UN_INV_SQRT_2PI * expf(-0.5f * v * v);
    return cdf + v * pdf;
}

/* o[i] = op(x[i*sx]) for i < n; o and g contiguous (g only for backward kernels). */
static void un_row(un_op op, float s, int64_t n, const float *restrict x, int64_t sx,
                   const float *restrict g, float *restrict o)
{
    switch (op) {
    case UN_ADD_S:
        UN_LOOP(v + s);
        break;
    case UN_MUL_S:
        UN_LOOP(v * s);
        break;
    case UN_NEG:
        UN_LOOP(-v);
        break;
    case UN_EXP:
        UN_LOOP(expf(v));
        break;
    case UN_LOG:
        UN_LOOP(logf(v));
        break;
    case UN_SQRT:
        UN_LOOP(sqrtf(v));
        break;
    case UN_POW:
        if (s == 2.0f)
            UN_LOOP(v * v);
        else if (s == 1.0f)
            UN_LOOP(v);
        else if (s == 0.5f)
            UN_LOOP(sqrtf(v));
        else if (s == -1.0f)
            UN_LOOP(1.0f / v);
        else if (s == 3.0f)
            UN_LOOP(v * v * v);
        else
            UN_LOOP(powf(v, s));
        break;
    case UN_RELU:
        UN_LOOP(un_select(v < 0.0f, 0.0f, v)); /* NaN stays NaN, as in PyTorch */
        break;
    case UN_GELU:
        UN_LOOP(0.5f * v * (1.0f + erff(v * UN_SQRT1_2)));
        break;
    case UN_TANH:
        UN_LOOP(tanhf(v));
        break;
    case UN_SIGMOID:
        UN_LOOP(un_sigmoid(v));
        break;
    case UG_EXP:
        UN_LOOP(g[i] * v);
        break;
    case UG_LOG:
        UN_LOOP(g[i] / v);
        break;
    case UG_SQRT:
        UN_LOOP(g[i] * 0.5f / v);
        break;
    case UG_POW:
        if (s == 0.0f)
            UN_LOOP(((void)v, 0.0f));
        else if (s == 2.0f)
            UN_LOOP(g[i] * 2.0f * v);
        else if (s == 1.0f)
            UN_LOOP(((void)v, g[i]));
        else
            UN_LOOP(g[i] * s * powf(v, s - 1.0f));
        break;
    case UG_RELU:
        UN_LOOP(un_select(v > 0.0f, g[i], 0.0f));
        break;
    case UG_GELU:
        UN_LOOP(g[i] * un_gelu_grad(v));
        break;
    case UG_TANH:
        UN_LOOP(g[i] * (1.0f - v * v));
        break;
    case UG_SIGMOID:
        UN_LOOP(g[i] * v * (1.0f - v));
        break;
    }
}

typedef struct un_ctx {
    un_op op;
    float s;
    const float *x;
    const float *g;
    float *out;
} un_ctx;

/* Row callback for tn__strided_rows: operand 0 is x, operand 1 the contiguous output (and g). */
static void un_rows_fn(int64_t n, const int64_t *offsets, const int64_t *inner_strides, void *ctx)
{
    const un_ctx *c = ctx;
    un_row(c->op, c->s, n, c->x + offsets[0], inner_strides[0], c->g ? c->g + offsets[1] : NULL,
           c->out + offsets[1]);
}

/* A new contiguous tensor of x's shape with op applied to x (read through its strides); g, for
 * backward kernels, is contiguous with x's shape. `name` labels the allocation. */
static tn_tensor *un_compute(un_op op, float s, tn_tensor *x, tn_tensor *g, const char *name)
{
    tn_tensor *out = tn__new_output(x->ndim, x->shape, name);
    if (!out)
        return NULL;
    int64_t n = tn_numel(out);
    if (n == 0)
        return out;
    const float *px = tn_data(x), *pg = g ? tn_data(g) : NULL;
    float *po = tn_data(out);
    if (tn_is_contiguous(x) || n == 1) {
        un_row(op, s, n, px, 1, pg, po);
        return out;
    }
    tn__strided it = {.ndim = x->ndim, .shape = x->shape, .nops = 2};
    for (int d = 0; d < x->ndim; d++)
        it.strides[0][d] = x->strides[d];
    tn__contiguous_strides(x->ndim, x->shape, it.strides[1]);
    un_ctx c = {.op = op, .s = s, .x = px, .g = pg, .out = po};
    tn__strided_rows(&it, un_rows_fn, &c);
    return out;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* node->ints[0] is the backward kernel (un_op), node->floats[0] the scalar; slot 0 holds the saved
 * input or output the kernel reads. */
static int saved_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    tn_tensor *v = tn__saved(node, 0);
    if (!v)
        return tn_last_error();
    grad_inputs[0] = un_compute((un_op)node->ints[0], node->floats[0], v, g, node->kind->name);
    tn_release(v);
    return grad_inputs[0] ? 0 : tn_last_error();
}

static int add_scalar_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    grad_inputs[0] = tn_retain(g);
    return 0;
}

static int mul_scalar_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    grad_inputs[0] = tn_mul_scalar(g, node->floats[0]);
    return grad_inputs[0] ? 0 : tn_last_error();
}

static int neg_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    grad_inputs[0] = tn_neg(g);
    return grad_inputs[0] ? 0 : tn_last_error();
}

static const tn_node_kind add_scalar_kind = {"add_scalar", "add_scalar_backward",
                                             add_scalar_backward};
static const tn_node_kind mul_scalar_kind = {"mul_scalar", "mul_scalar_backward",
                                             mul_scalar_backward};
static const tn_node_kind neg_kind = {"neg", "neg_backward", neg_backward};
static const tn_node_kind exp_kind = {"exp", "exp_backward", saved_backward};
static const tn_node_kind log_kind = {"log", "log_backward", saved_backward};
static const tn_node_kind sqrt_kind = {"sqrt", "sqrt_backward", saved_backward};
static const tn_node_kind pow_kind = {"pow", "pow_backward", saved_backward};
static const tn_node_kind relu_kind = {"relu", "relu_backward", saved_backward};
static const tn_node_kind gelu_kind = {"gelu", "gelu_backward", saved_backward};
static const tn_node_kind tanh_kind = {"tanh", "tanh_backward", saved_backward};
static const tn_node_kind sigmoid_kind = {"sigmoid", "sigmoid_backward", saved_backward};

/* ---- forward -------------------------------------------------------------------------------- */

/* What an op keeps for backward. */
typedef enum un_save { SAVE_NONE, SAVE_INPUT, SAVE_OUTPUT } un_save;

/* The common forward: out = op(x) with scalar s; records `kind` with backward kernel `grad_op`
 * (stored in ints[0]) and saves x or out as `save` says. Returns a new reference or NULL. */
static tn_tensor *un_forward(const tn_node_kind *kind, un_op op, un_op grad_op, un_save save,
                             tn_tensor *x, float s)
{
    /* 1. Validate. */
    if (tn__check_arg(kind->name, "x", x))
        return NULL;
    /* 2-3. Allocate the output (tagged ACTIVATION with the op's name) and compute. */
    tn_tensor *out = un_compute(op, s, x, NULL, kind->name);
    if (!out)
        return NULL;
    /* 4. Record the node and save what backward needs, only when some input requires grad. */
    if (!tn__grad_needed(1, &x))
        return out;
    tn_node *node = tn__node_new(kind, out, 1, &x);
    if (!node)
        goto fail;
    node->ints[0] = grad_op;
    node->floats[0] = s;
    if (save != SAVE_NONE && tn__save(node, save == SAVE_INPUT ? x : out) < 0)
        goto fail;
    return out;
fail:
    tn_release(out); /* also frees the node, which out owns */
    return NULL;
}

tn_tensor *tn_add_scalar(tn_tensor *a, float s)
{
    return un_forward(&add_scalar_kind, UN_ADD_S, UN_ADD_S, SAVE_NONE, a, s);
}

tn_tensor *tn_mul_scalar(tn_tensor *a, float s)
{
    return un_forward(&mul_scalar_kind, UN_MUL_S, UN_MUL_S, SAVE_NONE, a, s);
}

tn_tensor *tn_neg(tn_tensor *a)
{
    return un_forward(&neg_kind, UN_NEG, UN_NEG, SAVE_NONE, a, 0);
}

tn_tensor *tn_exp(tn_tensor *a)
{
    return un_forward(&exp_kind, UN_EXP, UG_EXP, SAVE_OUTPUT, a, 0);
}

tn_tensor *tn_log(tn_tensor *a)
{
    return un_forward(&log_kind, UN_LOG, UG_LOG, SAVE_INPUT, a, 0);
}

tn_tensor *tn_sqrt(tn_tensor *a)
{
    return un_forward(&sqrt_kind, UN_SQRT, UG_SQRT, SAVE_OUTPUT, a, 0);
}

tn_tensor *tn_pow_scalar(tn_tensor *a, float exponent)
{
    return un_forward(&pow_kind, UN_POW, UG_POW, SAVE_INPUT, a, exponent);
}

tn_tensor *tn_relu(tn_tensor *a)
{
    return un_forward(&relu_kind, UN_RELU, UG_RELU, SAVE_OUTPUT, a, 0);
}

tn_tensor *tn_gelu(tn_tensor *a)
{
    return un_forward(&gelu_kind, UN_GELU, UG_GELU, SAVE_INPUT, a, 0);
}

tn_tensor *tn_tanh(tn_tensor *a)
{
    return un_forward(&tanh_kind, UN_TANH, UG_TANH, SAVE_OUTPUT, a, 0);
}

tn_tensor *tn_sigmoid(tn_tensor *a)
{
    return un_forward(&sigmoid_kind, UN_SIGMOID, UG_SIGMOID, SAVE_OUTPUT, a, 0);
}
