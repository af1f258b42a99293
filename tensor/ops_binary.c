/*
 * Binary elementwise ops with NumPy broadcasting: add, sub, mul, div.
 *
 * a [sa...] (op) b [sb...] -> out [broadcast(sa, sb)], contiguous. Inputs may be non-contiguous
 * views or stride-0 expansions; they are read through their strides. Backward reduces each
 * gradient to its input's shape with tn__sum_to_shape. What is saved follows PyTorch: add and sub
 * save nothing; mul saves the other operand of each input that needs grad; div saves b, and a only
 * when b needs grad.
 */
#include "tensor_internal.h"

/* The kernels. BIN_DIV_GRAD_B computes -g * a / (b * b), the gradient of a / b with respect to b
 * before reduction; g is contiguous and indexed like the output. */
typedef enum bin_op { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV, BIN_DIV_GRAD_B } bin_op;

/* Runs EXPR (of x = a element, y = b element, i) over a row of n elements, with loops specialised
 * for the common stride patterns so the compiler can vectorise them. */
#define BIN_LOOP(EXPR)                                                                             \
    do {                                                                                           \
        if (sa == 1 && sb == 1) {                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float x = a[i], y = b[i];                                                          \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else if (sa == 1 && sb == 0) {                                                           \
            const float y = b[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float x = a[i];                                                                    \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else if (sa == 0 && sb == 1) {                                                           \
            const float x = a[0];                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float y = b[i];                                                                    \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        } else {                                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                float x = a[i * sa], y = b[i * sb];                                                \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* o[i] = a[i*sa] (op) b[i*sb] for i < n; o (and g) contiguous. */
static void bin_row(bin_op op, int64_t n, const float *restrict a, int64_t sa,
                    const float *restrict b, int64_t sb, const float *restrict g, float *restrict o)
{
    switch (op) {
    case BIN_ADD:
        BIN_LOOP(x + y);
        break;
    case BIN_SUB:
        BIN_LOOP(x - y);
        break;
    case BIN_MUL:
        BIN_LOOP(x * y);
        break;
    case BIN_DIV:
        BIN_LOOP(x / y);
        break;
    case BIN_DIV_GRAD_B:
        BIN_LOOP(-g[i] * x / (y * y));
        break;
    }
}

typedef struct bin_ctx {
    bin_op op;
    const float *a;
    const float *b;
    const float *g;
    float *out;
} bin_ctx;

/* Row callback for tn__strided_rows: operands are a, b and the contiguous output (which also
 * indexes g). */
static void bin_rows_fn(int64_t n, const int64_t *offsets, const int64_t *inner_strides, void *ctx)
{
    const bin_ctx *c = ctx;
    bin_row(c->op, n, c->a + offsets[0], inner_strides[0], c->b + offsets[1], inner_strides[1],
            c->g ? c->g + offsets[2] : NULL, c->out + offsets[2]);
}

/* A new contiguous tensor [ndim, shape] = a (op) b, where (ndim, shape) is the broadcast shape of a
 * and b; g (for BIN_DIV_GRAD_B) is contiguous with that shape. `name` labels the allocation. */
static tn_tensor *bin_compute(bin_op op, const char *name, tn_tensor *a, tn_tensor *b, tn_tensor *g,
                              int ndim, const int64_t *shape)
{
    tn_tensor *out = tn__new_output(ndim, shape, name);
    if (!out)
        return NULL;
    int64_t n = tn_numel(out);
    if (n == 0)
        return out;
    const float *pa = tn_data(a), *pb = tn_data(b);
    const float *pg = g ? tn_data(g) : NULL;
    float *po = tn_data(out);
    int64_t na = tn_numel(a), nb = tn_numel(b);
    bool ca = tn_is_contiguous(a) || na == 1, cb = tn_is_contiguous(b) || nb == 1;

    /* Fast paths: an operand with the output's numel and a contiguous layout is laid out as the
     * output (broadcasting only added leading or size-1 dims); a one-element operand is a constant.
     */
    if (ca && cb && (na == n || na == 1) && (nb == n || nb == 1)) {
        bin_row(op, n, pa, na == 1 && n > 1 ? 0 : 1, pb, nb == 1 && n > 1 ? 0 : 1, pg, po);
        return out;
    }

    tn__strided it = {.ndim = ndim, .shape = shape, .nops = 3};
    tn__broadcast_strides(a, ndim, shape, it.strides[0]);
    tn__broadcast_strides(b, ndim, shape, it.strides[1]);
    tn__contiguous_strides(ndim, shape, it.strides[2]);
    bin_ctx c = {.op = op, .a = pa, .b = pb, .g = pg, .out = po};
    tn__strided_rows(&it, bin_rows_fn, &c);
    return out;
}

/* ---- backward ------------------------------------------------------------------------------- */

/* Sets grad_inputs[i] = t summed to input i's shape; consumes t. Returns 0 or a negative code. */
static int set_reduced(tn_node *node, int i, tn_tensor *t, tn_tensor **grad_inputs)
{
    if (!t)
        return tn_last_error() ? tn_last_error() : TN_ENOMEM;
    grad_inputs[i] = tn__sum_to_shape(t, node->inputs[i].ndim, node->inputs[i].shape);
    tn_release(t);
    return grad_inputs[i] ? 0 : (tn_last_error() ? tn_last_error() : TN_ENOMEM);
}

/* Releases whatever a failed backward already produced and returns rc. */
static int bin_fail(int rc, tn_tensor **grad_inputs)
{
    for (int i = 0; i < 2; i++) {
        tn_release(grad_inputs[i]);
        grad_inputs[i] = NULL;
    }
    return rc;
}

/* d(a+b): g to each input's shape. Saves nothing. */
static int add_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    for (int i = 0; i < 2; i++) {
        if (!tn__input_needs_grad(node, i))
            continue;
        int rc = set_reduced(node, i, tn_retain(g), grad_inputs);
        if (rc)
            return bin_fail(rc, grad_inputs);
    }
    return 0;
}

/* d(a-b): g for a, -g for b (negated after the reduction, which is cheaper). */
static int sub_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    int rc = add_backward(node, g, grad_inputs);
    if (rc || !grad_inputs[1])
        return rc;
    tn_tensor *neg = tn_neg(grad_inputs[1]);
    tn_release(grad_inputs[1]);
    grad_inputs[1] = neg;
    return neg ? 0 : bin_fail(tn_last_error() ? tn_last_error() : TN_ENOMEM, grad_inputs);
}

/* d(a*b): g*b for a, g*a for b. ints[0] / ints[1] are the slots of b / a (-1 if not saved). */
static int mul_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    for (int i = 0; i < 2; i++) {
        if (!tn__input_needs_grad(node, i))
            continue;
        tn_tensor *other = tn__saved(node, (int)node->ints[i]);
        if (!other)
            return bin_fail(tn_last_error(), grad_inputs);
        tn_tensor *prod = tn_mul(g, other);
        tn_release(other);
        int rc = set_reduced(node, i, prod, grad_inputs);
        if (rc)
            return bin_fail(rc, grad_inputs);
    }
    return 0;
}

/* d(a/b): g/b for a, -g*a/b^2 for b. ints[0] is the slot of b, ints[1] that of a (-1 if not
 * saved). */
static int div_backward(tn_node *node, tn_tensor *g, tn_tensor **grad_inputs)
{
    tn_tensor *b = tn__saved(node, (int)node->ints[0]);
    if (!b)
        return tn_last_error();
    int rc = 0;
    if (tn__input_needs_grad(node, 0)) {
        rc = set_reduced(node, 0, tn_div(g, b), grad_inputs);
        if (rc)
            goto done;
    }
    if (tn__input_needs_grad(node, 1)) {
        tn_tensor *a = tn__saved(node, (int)node->ints[1]);
        if (!a) {
            rc = tn_last_error();
            goto done;
        }
        tn_tensor *t = bin_compute(BIN_DIV_GRAD_B, "div", a, b, g, tn_ndim(g), tn_shape(g));
        tn_release(a);
        rc = set_reduced(node, 1, t, grad_inputs);
    }
done:
    tn_release(b);
    return rc ? bin_fail(rc, grad_inputs) : 0;
}

static const tn_node_kind add_kind = {"add", "add_backward", add_backward};
static const tn_node_kind sub_kind = {"sub", "sub_backward", sub_backward};
static const tn_node_kind mul_kind = {"mul", "mul_backward", mul_backward};
static const tn_node_kind div_kind = {"div", "div_backward", div_backward};

/* ---- forward -------------------------------------------------------------------------------- */

/* Saves t in node, storing its slot in *slot. Returns 0 or a negative code. */
static int save_slot(tn_node *node, tn_tensor *t, int64_t *slot)
{
    int s = tn__save(node, t);
    if (s < 0)
        return s;
    *slot = s;
    return 0;
}

/* Records the graph node of out = a (op) b and saves what its backward needs. Returns 0 or a
 * negative code. */
static int bin_record(bin_op op, const tn_node_kind *kind, tn_tensor *out, tn_tensor *a,
                      tn_tensor *b)
{
    tn_tensor *inputs[2] = {a, b};
    tn_node *node = tn__node_new(kind, out, 2, inputs);
    if (!node)
        return tn_last_error() ? tn_last_error() : TN_ENOMEM;
    node->ints[0] = node->ints[1] = -1;
    bool need_a = tn__input_needs_grad(node, 0), need_b = tn__input_needs_grad(node, 1);
    int rc = 0;
    if (op == BIN_MUL) {
        /* ints[0]: b (for a's grad); ints[1]: a (for b's grad). x*x saves x once. */
        if (need_a)
            rc = save_slot(node, b, &node->ints[0]);
        if (!rc && need_b) {
            if (a == b && need_a)
                node->ints[1] = node->ints[0];
            else
                rc = save_slot(node, a, &node->ints[1]);
        }
    } else if (op == BIN_DIV) {
        /* ints[0]: b (both grads use it); ints[1]: a (only b's grad). */
        rc = save_slot(node, b, &node->ints[0]);
        if (!rc && need_b) {
            if (a == b)
                node->ints[1] = node->ints[0];
            else
                rc = save_slot(node, a, &node->ints[1]);
        }
    }
    return rc;
}

static tn_tensor *bin_forward(bin_op op, const tn_node_kind *kind, tn_tensor *a, tn_tensor *b)
{
    const char *name = kind->name;
    if (tn__check_arg(name, "a", a) || tn__check_arg(name, "b", b))
        return NULL;
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    if (tn__broadcast_shapes(name, a->ndim, a->shape, b->ndim, b->shape, &ndim, shape))
        return NULL;
    tn_tensor *out = bin_compute(op, name, a, b, NULL, ndim, shape);
    if (!out)
        return NULL;
    tn_tensor *inputs[2] = {a, b};
    if (tn__grad_needed(2, inputs) && bin_record(op, kind, out, a, b)) {
        tn_release(out);
        return NULL;
    }
    return out;
}

tn_tensor *tn_add(tn_tensor *a, tn_tensor *b)
{
    return bin_forward(BIN_ADD, &add_kind, a, b);
}

tn_tensor *tn_sub(tn_tensor *a, tn_tensor *b)
{
    return bin_forward(BIN_SUB, &sub_kind, a, b);
}

tn_tensor *tn_mul(tn_tensor *a, tn_tensor *b)
{
    return bin_forward(BIN_MUL, &mul_kind, a, b);
}

tn_tensor *tn_div(tn_tensor *a, tn_tensor *b)
{
    return bin_forward(BIN_DIV, &div_kind, a, b);
}
