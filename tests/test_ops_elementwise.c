/*
 * Tests of the elementwise ops (ops_unary.c, ops_binary.c) and softmax (ops_softmax.c): forward
 * values against hand-computed numbers, finite-difference gradient checks (with broadcasting,
 * scalar, transposed and expanded inputs), what each op saves for backward, grad-mode behaviour and
 * every user-error path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "gradcheck.h"
#include "gradprof/tensor.h"
#include "tensor_internal.h" /* tn__exp_lane */

/* ---- helpers -------------------------------------------------------------------------------- */

static tn_tensor *leaf(int ndim, const int64_t *shape, const float *data, bool requires_grad)
{
    tn_tensor *t = tn_from_data(ndim, shape, data, LP_CAT_INPUT);
    assert_non_null(t);
    if (requires_grad)
        assert_int_equal(tn_set_requires_grad(t, true), 0);
    return t;
}

/* Asserts t has shape (ndim, shape) and elements close to want (row-major). */
static void assert_values(const char *what, const tn_tensor *t, int ndim, const int64_t *shape,
                          const float *want)
{
    assert_non_null(t);
    assert_int_equal(tn_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        assert_int_equal(tn_shape(t)[d], shape[d]);
    assert_true(tn_is_contiguous(t));
    int64_t n = tn_numel(t);
    float got[64];
    assert_true(n <= 64);
    tn_copy_to(t, got);
    gc_assert_close(what, got, want, n, 1e-6, 1e-5);
}

static void assert_error(int code, const char *needle)
{
    assert_int_equal(tn_last_error(), code);
    const char *msg = tn_last_error_message();
    if (!strstr(msg, needle))
        fail_msg("error message \"%s\" does not mention \"%s\"", msg, needle);
}

typedef tn_tensor *(*unary_fn)(tn_tensor *);
typedef tn_tensor *(*binary_fn)(tn_tensor *, tn_tensor *);

static tn_tensor *add_scalar_fn(tn_tensor *x)
{
    return tn_add_scalar(x, 1.5f);
}
static tn_tensor *mul_scalar_fn(tn_tensor *x)
{
    return tn_mul_scalar(x, -2.5f);
}
static tn_tensor *pow3_fn(tn_tensor *x)
{
    return tn_pow_scalar(x, 3.0f);
}
static tn_tensor *pow2_fn(tn_tensor *x)
{
    return tn_pow_scalar(x, 2.0f);
}
static tn_tensor *pow_half_fn(tn_tensor *x)
{
    return tn_pow_scalar(x, 0.5f);
}
static tn_tensor *pow_m15_fn(tn_tensor *x)
{
    return tn_pow_scalar(x, -1.5f);
}

/* A unary op, its op name and an input range that keeps it away from kinks and poles. */
typedef struct unary_case {
    const char *name;
    unary_fn fn;
    float lo, hi;
} unary_case;

static const unary_case unary_cases[] = {
    {"add_scalar", add_scalar_fn, -1.0f, 1.0f},
    {"mul_scalar", mul_scalar_fn, -1.0f, 1.0f},
    {"neg", tn_neg, -1.0f, 1.0f},
    {"exp", tn_exp, -1.0f, 1.0f},
    {"log", tn_log, 0.5f, 2.0f},
    {"sqrt", tn_sqrt, 0.5f, 2.0f},
    {"pow", pow3_fn, -1.0f, 1.0f},
    {"pow", pow2_fn, -1.0f, 1.0f},
    {"pow", pow_half_fn, 0.5f, 2.0f},
    {"pow", pow_m15_fn, 0.5f, 2.0f},
    {"relu", tn_relu, -1.0f, 1.0f},
    {"gelu", tn_gelu, -2.0f, 2.0f},
    {"tanh", tn_tanh, -1.5f, 1.5f},
    {"sigmoid", tn_sigmoid, -3.0f, 3.0f},
};
#define N_UNARY (int)(sizeof unary_cases / sizeof unary_cases[0])

typedef struct binary_case {
    const char *name;
    binary_fn fn;
} binary_case;

static const binary_case binary_cases[] = {
    {"add", tn_add}, {"sub", tn_sub}, {"mul", tn_mul}, {"div", tn_div}};
#define N_BINARY (int)(sizeof binary_cases / sizeof binary_cases[0])

/* Values of relu's input kept at least 0.2 away from the kink at 0. */
static tn_tensor *relu_safe_input(int ndim, const int64_t *shape)
{
    float v[64];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    assert_true(n <= 64);
    for (int64_t i = 0; i < n; i++)
        v[i] = (i % 2 ? -1.0f : 1.0f) * (0.2f + 0.07f * (float)(i % 11));
    return leaf(ndim, shape, v, true);
}

static tn_tensor *unary_input(const unary_case *c, int ndim, const int64_t *shape)
{
    if (c->fn == tn_relu)
        return relu_safe_input(ndim, shape);
    return gc_rand(ndim, shape, c->lo, c->hi, true);
}

/* ---- gradcheck adaptors --------------------------------------------------------------------- */

typedef struct op_ctx {
    unary_fn ufn;
    binary_fn bfn;
    int dim;
    bool log;
    int transpose; /* 1: transpose input 0 (dims 0,1) before the op; 2: expand input 0 */
    int ndim;
    int64_t shape[4]; /* expand target */
} op_ctx;

/* Input 0 as the op sees it: itself, its transpose, or its expansion (a new reference). */
static tn_tensor *arg0(tn_tensor *const *in, const op_ctx *c)
{
    if (c->transpose == 1)
        return tn_transpose(in[0], 0, 1);
    if (c->transpose == 2)
        return tn_expand(in[0], c->ndim, c->shape);
    return tn_retain(in[0]);
}

static tn_tensor *run_unary(tn_tensor *const *in, void *ctx)
{
    const op_ctx *c = ctx;
    tn_tensor *x = arg0(in, c);
    tn_tensor *out = x ? c->ufn(x) : NULL;
    tn_release(x);
    return out;
}

static tn_tensor *run_binary(tn_tensor *const *in, void *ctx)
{
    const op_ctx *c = ctx;
    tn_tensor *a = arg0(in, c);
    tn_tensor *out = a ? c->bfn(a, in[1]) : NULL;
    tn_release(a);
    return out;
}

static tn_tensor *run_square(tn_tensor *const *in, void *ctx)
{
    const op_ctx *c = ctx;
    return c->bfn(in[0], in[0]);
}

static tn_tensor *run_softmax(tn_tensor *const *in, void *ctx)
{
    const op_ctx *c = ctx;
    tn_tensor *x = arg0(in, c);
    tn_tensor *out = x ? (c->log ? tn_log_softmax(x, c->dim) : tn_softmax(x, c->dim)) : NULL;
    tn_release(x);
    return out;
}

/* Gradchecks a binary op on inputs of shapes (na, a) and (nb, b); b is kept in [0.5, 2) so div
 * stays away from its pole. */
static void check_binary(const binary_case *bc, int na, const int64_t *a, int nb, const int64_t *b,
                         int transpose)
{
    tn_tensor *in[2] = {gc_rand(na, a, -1.0f, 1.0f, true), gc_rand(nb, b, 0.5f, 2.0f, true)};
    op_ctx c = {.bfn = bc->fn, .transpose = transpose};
    GC_CHECK(bc->name, run_binary, &c, 2, in);
    tn_release(in[0]);
    tn_release(in[1]);
}

/* ---- forward values ------------------------------------------------------------------------- */

static void test_unary_values(void **state)
{
    (void)state;
    const float xv[5] = {-1.0f, 0.0f, 0.5f, 1.0f, 2.0f};
    tn_tensor *x = leaf(GC_SHAPE(5), xv, false);
    const struct {
        const char *what;
        tn_tensor *out;
        float want[5];
    } cases[] = {
        {"add_scalar", tn_add_scalar(x, 1.5f), {0.5f, 1.5f, 2.0f, 2.5f, 3.5f}},
        {"mul_scalar", tn_mul_scalar(x, -2.0f), {2.0f, -0.0f, -1.0f, -2.0f, -4.0f}},
        {"neg", tn_neg(x), {1.0f, 0.0f, -0.5f, -1.0f, -2.0f}},
        {"exp", tn_exp(x), {0.36787944f, 1.0f, 1.6487213f, 2.7182818f, 7.3890561f}},
        {"pow3", tn_pow_scalar(x, 3.0f), {-1.0f, 0.0f, 0.125f, 1.0f, 8.0f}},
        {"pow2.5", tn_pow_scalar(x, 2.5f), {NAN, 0.0f, 0.17677670f, 1.0f, 5.6568542f}},
        {"relu", tn_relu(x), {0.0f, 0.0f, 0.5f, 1.0f, 2.0f}},
        {"gelu", tn_gelu(x), {-0.15865525f, 0.0f, 0.34573123f, 0.84134475f, 1.9544997f}},
        {"tanh", tn_tanh(x), {-0.76159416f, 0.0f, 0.46211716f, 0.76159416f, 0.96402758f}},
        {"sigmoid", tn_sigmoid(x), {0.26894142f, 0.5f, 0.62245933f, 0.73105858f, 0.88079708f}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_non_null(cases[i].out);
        float got[5];
        tn_copy_to(cases[i].out, got);
        for (int k = 0; k < 5; k++) {
            if (isnan(cases[i].want[k])) {
                if (!isnan(got[k]))
                    fail_msg("%s[%d]: got %g, expected nan", cases[i].what, k, got[k]);
            } else {
                gc_assert_close(cases[i].what, &got[k], &cases[i].want[k], 1, 1e-6, 1e-5);
            }
        }
        tn_release(cases[i].out);
    }
    tn_release(x);

    const float pv[4] = {0.25f, 1.0f, 4.0f, 9.0f};
    tn_tensor *p = leaf(GC_SHAPE(4), pv, false);
    tn_tensor *lg = tn_log(p), *sq = tn_sqrt(p), *rs = tn_pow_scalar(p, -0.5f);
    assert_values("log", lg, GC_SHAPE(4),
                  (const float[]){-1.3862944f, 0.0f, 1.3862944f, 2.1972246f});
    assert_values("sqrt", sq, GC_SHAPE(4), (const float[]){0.5f, 1.0f, 2.0f, 3.0f});
    assert_values("pow-0.5", rs, GC_SHAPE(4), (const float[]){2.0f, 1.0f, 0.5f, 0.33333333f});
    tn_release(lg);
    tn_release(sq);
    tn_release(rs);
    tn_release(p);

    /* relu keeps NaN (as torch.relu does). */
    tn_tensor *nanx = leaf(GC_SHAPE(1), (const float[]){NAN}, false);
    tn_tensor *rn = tn_relu(nanx);
    assert_non_null(rn);
    assert_true(isnan(tn_item(rn)));
    tn_release(rn);
    tn_release(nanx);

    /* sigmoid saturates without overflow or NaN. */
    tn_tensor *big = leaf(GC_SHAPE(2), (const float[]){-100.0f, 100.0f}, false);
    tn_tensor *s = tn_sigmoid(big);
    assert_values("sigmoid saturation", s, GC_SHAPE(2), (const float[]){0.0f, 1.0f});
    tn_release(s);
    tn_release(big);
}

static void test_unary_noncontiguous_values(void **state)
{
    (void)state;
    /* x [2,3] = [[1,2,3],[4,5,6]]; x^T [3,2] = [[1,4],[2,5],[3,6]]. */
    tn_tensor *x = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}, false);
    tn_tensor *xt = tn_transpose(x, 0, 1);
    assert_false(tn_is_contiguous(xt));
    tn_tensor *y = tn_mul_scalar(xt, 10.0f);
    assert_values("mul_scalar(x^T)", y, GC_SHAPE(3, 2), (const float[]){10, 40, 20, 50, 30, 60});
    tn_tensor *r = tn_sqrt(xt);
    assert_values("sqrt(x^T)", r, GC_SHAPE(3, 2),
                  (const float[]){1.0f, 2.0f, 1.4142136f, 2.2360680f, 1.7320508f, 2.4494897f});
    /* A narrowed column: elements 2, 5. */
    tn_tensor *col = tn_narrow(x, 1, 1, 1);
    tn_tensor *nc = tn_neg(col);
    assert_values("neg(narrow)", nc, GC_SHAPE(2, 1), (const float[]){-2, -5});
    tn_release(nc);
    tn_release(col);
    tn_release(r);
    tn_release(y);
    tn_release(xt);
    tn_release(x);
}

static void test_binary_values(void **state)
{
    (void)state;
    /* a [2,3] (op) b [3]. */
    tn_tensor *a = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}, false);
    tn_tensor *b = leaf(GC_SHAPE(3), (const float[]){10, 20, 40}, false);
    tn_tensor *s = tn_add(a, b), *d = tn_sub(a, b), *m = tn_mul(a, b), *q = tn_div(a, b);
    assert_values("add", s, GC_SHAPE(2, 3), (const float[]){11, 22, 43, 14, 25, 46});
    assert_values("sub", d, GC_SHAPE(2, 3), (const float[]){-9, -18, -37, -6, -15, -34});
    assert_values("mul", m, GC_SHAPE(2, 3), (const float[]){10, 40, 120, 40, 100, 240});
    assert_values("div", q, GC_SHAPE(2, 3),
                  (const float[]){0.1f, 0.1f, 0.075f, 0.4f, 0.25f, 0.15f});
    tn_release(s);
    tn_release(d);
    tn_release(m);
    tn_release(q);

    /* b - a broadcasts the first operand: [3] - [2,3]. */
    tn_tensor *r = tn_sub(b, a);
    assert_values("sub [3]-[2,3]", r, GC_SHAPE(2, 3), (const float[]){9, 18, 37, 6, 15, 34});
    tn_release(r);

    /* [2,1,2] * [3,1] -> [2,3,2]: out[i,j,k] = p[i,k] * c[j]. */
    tn_tensor *p = leaf(GC_SHAPE(2, 1, 2), (const float[]){1, 2, 3, 4}, false);
    tn_tensor *c = leaf(GC_SHAPE(3, 1), (const float[]){1, 10, 100}, false);
    tn_tensor *pc = tn_mul(p, c);
    assert_values("mul [2,1,2]*[3,1]", pc, GC_SHAPE(2, 3, 2),
                  (const float[]){1, 2, 10, 20, 100, 200, 3, 4, 30, 40, 300, 400});
    tn_release(pc);

    /* Scalar operands: 0-d and [1]. */
    tn_tensor *z = tn_scalar(2.0f, LP_CAT_INPUT);
    tn_tensor *one = leaf(GC_SHAPE(1), (const float[]){4.0f}, false);
    tn_tensor *az = tn_div(a, z), *za = tn_sub(z, a), *zo = tn_mul(z, one), *oz = tn_add(z, z);
    assert_values("div [2,3]/[]", az, GC_SHAPE(2, 3), (const float[]){0.5f, 1, 1.5f, 2, 2.5f, 3});
    assert_values("sub []-[2,3]", za, GC_SHAPE(2, 3), (const float[]){1, 0, -1, -2, -3, -4});
    assert_values("mul []*[1]", zo, GC_SHAPE(1), (const float[]){8});
    assert_int_equal(tn_ndim(oz), 0);
    assert_true(fabsf(tn_item(oz) - 4.0f) < 1e-6f);
    tn_release(az);
    tn_release(za);
    tn_release(zo);
    tn_release(oz);

    /* Non-contiguous a^T [3,2] + expanded e [3,2] (stride 0) = a^T + [[1,1],[2,2],[3,3]]. */
    tn_tensor *at = tn_transpose(a, 0, 1);
    tn_tensor *e0 = leaf(GC_SHAPE(3, 1), (const float[]){1, 2, 3}, false);
    tn_tensor *e = tn_expand(e0, GC_SHAPE(3, 2));
    tn_tensor *ae = tn_add(at, e), *ea = tn_mul(e, at);
    assert_values("add(a^T, expand)", ae, GC_SHAPE(3, 2), (const float[]){2, 5, 4, 7, 6, 9});
    assert_values("mul(expand, a^T)", ea, GC_SHAPE(3, 2), (const float[]){1, 4, 4, 10, 9, 18});
    tn_release(ae);
    tn_release(ea);
    tn_release(e);
    tn_release(e0);
    tn_release(at);

    /* Zero-size broadcasting gives an empty result. */
    tn_tensor *empty = tn_zeros(GC_SHAPE(0, 3), LP_CAT_INPUT);
    tn_tensor *eb = tn_add(empty, b);
    assert_non_null(eb);
    assert_int_equal(tn_numel(eb), 0);
    assert_int_equal(tn_shape(eb)[1], 3);
    tn_release(eb);
    tn_release(empty);

    tn_release(one);
    tn_release(z);
    tn_release(c);
    tn_release(p);
    tn_release(b);
    tn_release(a);
}

/* Softmax's exponential is within 1.5 ulp of e^x over the floats where e^x is normal (1M of them,
 * evenly spread over the bit patterns), 0 below them and at -inf, NaN at NaN. */
static void test_exp_lane(void **state)
{
    (void)state;
    union {
        float f;
        uint32_t u;
    } lo = {-87.33f}, hi = {88.0f}, zero = {0.0f};
    double worst = 0;
    /* Side 0: the negative floats, whose bit patterns grow away from 0; side 1: the positive. */
    for (int side = 0; side < 2; side++) {
        uint32_t first = side ? zero.u : zero.u | 0x80000000u, last = side ? hi.u : lo.u;
        for (uint32_t u = first; u <= last; u += (last - first) / 500000 + 1) {
            union {
                uint32_t u;
                float f;
            } x = {u};
            double want = exp((double)x.f), ulp = ldexp(1.0, ilogb(want) - 23);
            double err = fabs((double)tn__exp_lane(x.f) - want) / ulp;
            if (err > worst)
                worst = err;
            if (err > 1.5)
                fail_msg("exp(%a): %a, want %a (%.2f ulp)", (double)x.f, (double)tn__exp_lane(x.f),
                         want, err);
        }
    }
    assert_true(worst > 0); /* the sweep ran */
    assert_true(tn__exp_lane(0.0f) == 1.0f);
    assert_true(tn__exp_lane(-INFINITY) == 0.0f);
    assert_true(tn__exp_lane(-100.0f) == 0.0f);
    assert_true(isnan(tn__exp_lane(NAN)));

    /* A masked (-inf) position gets exactly 0, a row with NaN is NaN. */
    tn_tensor *x = leaf(GC_SHAPE(2, 2), (const float[]){0, -INFINITY, NAN, 1}, false);
    tn_tensor *sm = tn_softmax(x, -1);
    assert_non_null(sm);
    const float *y = tn_data_const(sm);
    assert_true(y[0] == 1.0f && y[1] == 0.0f);
    assert_true(isnan(y[2]) && isnan(y[3]));
    tn_release(sm);
    tn_release(x);
}

static void test_softmax_values(void **state)
{
    (void)state;
    tn_tensor *x = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 1000, 1001, 1002}, false);
    tn_tensor *s = tn_softmax(x, -1), *l = tn_log_softmax(x, 1);
    const float sm[3] = {0.09003057f, 0.24472847f, 0.66524096f};
    const float lsm[3] = {-2.40760596f, -1.40760596f, -0.40760596f};
    assert_values("softmax", s, GC_SHAPE(2, 3),
                  (const float[]){sm[0], sm[1], sm[2], sm[0], sm[1], sm[2]});
    assert_values("log_softmax", l, GC_SHAPE(2, 3),
                  (const float[]){lsm[0], lsm[1], lsm[2], lsm[0], lsm[1], lsm[2]});
    tn_release(s);
    tn_release(l);

    /* Over dim 0: columns [1,1000], [2,1001], [3,1002] -> [0,1] each (stable, no NaN). */
    s = tn_softmax(x, 0);
    l = tn_log_softmax(x, 0);
    assert_values("softmax dim 0", s, GC_SHAPE(2, 3), (const float[]){0, 0, 0, 1, 1, 1});
    assert_values("log_softmax dim 0", l, GC_SHAPE(2, 3),
                  (const float[]){-999, -999, -999, 0, 0, 0});
    tn_release(s);
    tn_release(l);
    tn_release(x);

    tn_tensor *y = leaf(GC_SHAPE(2, 2), (const float[]){1, 2, 3, 4}, false);
    s = tn_softmax(y, 0);
    assert_values("softmax [2,2] dim 0", s, GC_SHAPE(2, 2),
                  (const float[]){0.11920292f, 0.11920292f, 0.88079708f, 0.88079708f});
    tn_release(s);
    l = tn_log_softmax(y, -2);
    assert_values("log_softmax [2,2] dim -2", l, GC_SHAPE(2, 2),
                  (const float[]){-2.12692801f, -2.12692801f, -0.12692801f, -0.12692801f});
    tn_release(l);
    /* Transposed input: softmax(y^T, -1) = rows [1,3] and [2,4]. */
    tn_tensor *yt = tn_transpose(y, 0, 1);
    s = tn_softmax(yt, -1);
    assert_values("softmax(y^T)", s, GC_SHAPE(2, 2),
                  (const float[]){0.11920292f, 0.88079708f, 0.11920292f, 0.88079708f});
    tn_release(s);
    tn_release(yt);
    tn_release(y);

    /* A 0-d tensor: softmax is 1, log_softmax 0. */
    tn_tensor *z = tn_scalar(3.0f, LP_CAT_INPUT);
    s = tn_softmax(z, 0);
    l = tn_log_softmax(z, -1);
    assert_non_null(s);
    assert_non_null(l);
    assert_true(fabsf(tn_item(s) - 1.0f) < 1e-6f);
    assert_true(fabsf(tn_item(l)) < 1e-6f);
    tn_release(s);
    tn_release(l);
    tn_release(z);
}

/* ---- gradient checks ------------------------------------------------------------------------ */

static void test_unary_grad(void **state)
{
    (void)state;
    for (int i = 0; i < N_UNARY; i++) {
        const unary_case *uc = &unary_cases[i];
        op_ctx c = {.ufn = uc->fn};
        tn_tensor *x = unary_input(uc, GC_SHAPE(2, 3, 4));
        GC_CHECK(uc->name, run_unary, &c, 1, &x);
        tn_release(x);
    }
}

static void test_unary_grad_transposed(void **state)
{
    (void)state;
    for (int i = 0; i < N_UNARY; i++) {
        const unary_case *uc = &unary_cases[i];
        op_ctx c = {.ufn = uc->fn, .transpose = 1};
        tn_tensor *x = unary_input(uc, GC_SHAPE(3, 5));
        GC_CHECK(uc->name, run_unary, &c, 1, &x);
        tn_release(x);
    }
}

static void test_binary_grad(void **state)
{
    (void)state;
    for (int i = 0; i < N_BINARY; i++) {
        const binary_case *bc = &binary_cases[i];
        check_binary(bc, GC_SHAPE(2, 3), GC_SHAPE(2, 3), 0);
        check_binary(bc, GC_SHAPE(2, 3), GC_SHAPE(3), 0);       /* [2,3] (op) [3] */
        check_binary(bc, GC_SHAPE(3), GC_SHAPE(2, 3), 0);       /* [3] (op) [2,3] */
        check_binary(bc, GC_SHAPE(2, 1, 4), GC_SHAPE(3, 1), 0); /* -> [2,3,4] */
        check_binary(bc, GC_SHAPE(2, 3), GC_SHAPE(1), 0);       /* [1] */
        check_binary(bc, GC_SHAPE(4, 3), GC_SHAPE(3, 4), 1);    /* a^T [3,4] (op) [3,4] */
        check_binary(bc, GC_SHAPE(3, 2), GC_SHAPE(4, 2, 3), 1); /* a^T [2,3] (op) [4,2,3] */

        /* 0-d operand, on either side. */
        int64_t none[1] = {0};
        tn_tensor *in[2] = {gc_rand(0, none, 0.5f, 2.0f, true),
                            gc_rand(GC_SHAPE(2, 3), 0.5f, 2.0f, true)};
        op_ctx c = {.bfn = bc->fn};
        GC_CHECK(bc->name, run_binary, &c, 2, in);
        tn_tensor *sw[2] = {in[1], in[0]};
        GC_CHECK(bc->name, run_binary, &c, 2, sw);
        tn_release(in[0]);
        tn_release(in[1]);
    }
}

static void test_binary_grad_partial(void **state)
{
    (void)state;
    /* Only one input requires grad: the other gets no .grad and the op still differentiates. */
    for (int i = 0; i < N_BINARY; i++) {
        for (int which = 0; which < 2; which++) {
            tn_tensor *in[2] = {gc_rand(GC_SHAPE(2, 3), -1.0f, 1.0f, which == 0),
                                gc_rand(GC_SHAPE(3), 0.5f, 2.0f, which == 1)};
            op_ctx c = {.bfn = binary_cases[i].fn};
            GC_CHECK(binary_cases[i].name, run_binary, &c, 2, in);
            assert_null(tn_grad(in[1 - which]));
            assert_non_null(tn_grad(in[which]));
            tn_release(in[0]);
            tn_release(in[1]);
        }
    }
}

static void test_binary_grad_special(void **state)
{
    (void)state;
    /* x*x and x/x use the same tensor twice. */
    for (int i = 2; i < 4; i++) {
        tn_tensor *x = gc_rand(GC_SHAPE(2, 3), 0.5f, 2.0f, true);
        op_ctx c = {.bfn = binary_cases[i].fn};
        GC_CHECK(binary_cases[i].name, run_square, &c, 1, &x);
        tn_release(x);
    }
    /* An expanded (stride-0) first operand: expand([3,1] -> [3,4]) (op) [4]. */
    for (int i = 0; i < N_BINARY; i++) {
        tn_tensor *in[2] = {gc_rand(GC_SHAPE(3, 1), -1.0f, 1.0f, true),
                            gc_rand(GC_SHAPE(4), 0.5f, 2.0f, true)};
        op_ctx c = {.bfn = binary_cases[i].fn, .transpose = 2, .ndim = 2, .shape = {3, 4}};
        GC_CHECK(binary_cases[i].name, run_binary, &c, 2, in);
        tn_release(in[0]);
        tn_release(in[1]);
    }
    /* Hand-computed: d/db sum(a * b) for a [2,3], b [3] is the column sums of a. */
    tn_tensor *a = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6}, true);
    tn_tensor *b = leaf(GC_SHAPE(3), (const float[]){1, 1, 1}, true);
    tn_tensor *m = tn_mul(a, b);
    tn_tensor *loss = tn_sum(m, 0, NULL, false);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    assert_values("d sum(a*b)/db", tn_grad(b), GC_SHAPE(3), (const float[]){5, 7, 9});
    assert_values("d sum(a*b)/da", tn_grad(a), GC_SHAPE(2, 3), (const float[]){1, 1, 1, 1, 1, 1});
    tn_release(loss);
    tn_release(m);
    tn_release(b);
    tn_release(a);
}

static void test_softmax_grad(void **state)
{
    (void)state;
    const int dims[] = {0, 1, -1, 2, -3};
    for (int lg = 0; lg < 2; lg++) {
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
            tn_tensor *x = gc_rand(GC_SHAPE(2, 3, 4), -2.0f, 2.0f, true);
            op_ctx c = {.dim = dims[i], .log = lg};
            GC_CHECK(lg ? "log_softmax" : "softmax", run_softmax, &c, 1, &x);
            tn_release(x);
        }
        /* Transposed input [4,3] -> [3,4], over both dims. */
        for (int d = 0; d < 2; d++) {
            tn_tensor *x = gc_rand(GC_SHAPE(4, 3), -2.0f, 2.0f, true);
            op_ctx c = {.dim = d, .log = lg, .transpose = 1};
            GC_CHECK(lg ? "log_softmax" : "softmax", run_softmax, &c, 1, &x);
            tn_release(x);
        }
    }
}

/* ---- what is saved for backward ------------------------------------------------------------- */

/* Records the addresses retagged SAVED (the first save of each storage). */
typedef struct save_log {
    int n;
    const void *addr[16];
} save_log;

static void save_listener(const lp_event *ev, void *user)
{
    save_log *log = user;
    if (ev->kind == LP_EV_RETAG && ev->tag && ev->tag->category == LP_CAT_SAVED && log->n < 16)
        log->addr[log->n++] = ev->addr;
}

/* Runs one op and checks that exactly the storages in `want` (n_want of them) were saved. */
static void expect_saves(const char *what, save_log *log, tn_tensor *out, int n_want,
                         const void *w0, const void *w1)
{
    if (!out)
        fail_msg("%s: %s", what, tn_last_error_message());
    if (log->n != n_want)
        fail_msg("%s: saved %d tensors, expected %d", what, log->n, n_want);
    const void *want[2] = {w0, w1};
    for (int i = 0; i < n_want; i++) {
        bool found = false;
        for (int k = 0; k < log->n; k++)
            found = found || log->addr[k] == want[i];
        if (!found)
            fail_msg("%s: expected tensor %d was not saved", what, i);
    }
    tn_release(out);
    log->n = 0;
}

static void test_saved_tensors(void **state)
{
    (void)state;
    /* Activations (only they are retagged SAVED): a and c require grad, b does not. */
    tn_tensor *xa = gc_rand(GC_SHAPE(4, 4), 0.5f, 2.0f, true);
    tn_tensor *xb = gc_rand(GC_SHAPE(4), 0.5f, 2.0f, false);
    tn_tensor *xc = gc_rand(GC_SHAPE(4), 0.5f, 2.0f, true);
    tn_tensor *a = tn_mul_scalar(xa, 1.0f), *b = tn_mul_scalar(xb, 1.0f);
    tn_tensor *c = tn_mul_scalar(xc, 1.0f);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    const void *pa = tn_data(a), *pb = tn_data(b), *pc = tn_data(c);

    save_log log = {0};
    lp_set_listener(save_listener, &log);
    expect_saves("add", &log, tn_add(a, c), 0, NULL, NULL);
    expect_saves("sub", &log, tn_sub(a, b), 0, NULL, NULL);
    expect_saves("mul a*b", &log, tn_mul(a, b), 1, pb, NULL);
    expect_saves("mul b*c", &log, tn_mul(b, c), 1, pb, NULL);
    expect_saves("mul a*c", &log, tn_mul(a, c), 2, pa, pc);
    expect_saves("div a/b", &log, tn_div(a, b), 1, pb, NULL);
    expect_saves("div b/c", &log, tn_div(b, c), 2, pb, pc);
    expect_saves("add_scalar", &log, tn_add_scalar(a, 1), 0, NULL, NULL);
    expect_saves("mul_scalar", &log, tn_mul_scalar(a, 2), 0, NULL, NULL);
    expect_saves("neg", &log, tn_neg(a), 0, NULL, NULL);
    expect_saves("log", &log, tn_log(a), 1, pa, NULL);
    expect_saves("pow", &log, tn_pow_scalar(a, 3), 1, pa, NULL);
    expect_saves("gelu", &log, tn_gelu(a), 1, pa, NULL);

    /* exp, sqrt, relu, tanh, sigmoid, softmax and log_softmax save their output. */
    unary_fn out_savers[] = {tn_exp, tn_sqrt, tn_relu, tn_tanh, tn_sigmoid};
    for (size_t i = 0; i < sizeof out_savers / sizeof out_savers[0]; i++) {
        tn_tensor *y = out_savers[i](a);
        expect_saves(tn_grad_fn_name(y), &log, tn_retain(y), 1, tn_data(y), NULL);
        tn_release(y);
    }
    tn_tensor *s = tn_softmax(a, -1);
    expect_saves("softmax", &log, tn_retain(s), 1, tn_data(s), NULL);
    tn_release(s);
    s = tn_log_softmax(a, 0);
    expect_saves("log_softmax", &log, tn_retain(s), 1, tn_data(s), NULL);
    tn_release(s);

    /* Nothing requires grad, or grad is off: nothing is saved. */
    expect_saves("mul b*b", &log, tn_mul(b, b), 0, NULL, NULL);
    expect_saves("exp(b)", &log, tn_exp(b), 0, NULL, NULL);
    tn_grad_mode prev = tn_no_grad_begin();
    expect_saves("no_grad mul", &log, tn_mul(a, c), 0, NULL, NULL);
    expect_saves("no_grad softmax", &log, tn_softmax(a, 0), 0, NULL, NULL);
    tn_grad_mode_end(prev);
    lp_set_listener(NULL, NULL);

    tn_release(a);
    tn_release(b);
    tn_release(c);
    tn_release(xa);
    tn_release(xb);
    tn_release(xc);
}

/* ---- grad modes ----------------------------------------------------------------------------- */

static tn_tensor *softmax_last(tn_tensor *x)
{
    return tn_softmax(x, -1);
}
static tn_tensor *log_softmax_last(tn_tensor *x)
{
    return tn_log_softmax(x, -1);
}

static void check_grad_fn(const char *name, tn_tensor *out, bool grad)
{
    if (!out)
        fail_msg("%s: %s", name, tn_last_error_message());
    if (grad) {
        assert_true(tn_requires_grad(out));
        assert_false(tn_is_leaf(out));
        assert_non_null(tn_grad_fn_name(out));
        assert_string_equal(tn_grad_fn_name(out), name);
    } else {
        assert_false(tn_requires_grad(out));
        assert_null(tn_grad_fn_name(out));
    }
    tn_release(out);
}

static void test_grad_modes(void **state)
{
    (void)state;
    tn_tensor *x = gc_rand(GC_SHAPE(2, 3), 0.5f, 2.0f, true);
    tn_tensor *y = gc_rand(GC_SHAPE(3), 0.5f, 2.0f, false);
    for (int pass = 0; pass < 3; pass++) {
        /* pass 0: grad on; 1: no_grad; 2: grad on but no input requires grad. */
        tn_grad_mode prev = pass == 1 ? tn_no_grad_begin() : (tn_grad_mode){0};
        tn_tensor *in = pass == 2 ? y : x;
        bool grad = pass == 0;
        for (int i = 0; i < N_UNARY; i++)
            check_grad_fn(unary_cases[i].name, unary_cases[i].fn(in), grad);
        for (int i = 0; i < N_BINARY; i++) {
            check_grad_fn(binary_cases[i].name, binary_cases[i].fn(in, y), grad);
            check_grad_fn(binary_cases[i].name, binary_cases[i].fn(y, in), grad);
        }
        check_grad_fn("softmax", softmax_last(in), grad);
        check_grad_fn("log_softmax", log_softmax_last(in), grad);
        if (pass == 1)
            tn_grad_mode_end(prev);
    }
    tn_release(x);
    tn_release(y);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    tn_tensor *a = tn_zeros(GC_SHAPE(2, 3), LP_CAT_INPUT);
    tn_tensor *b = tn_zeros(GC_SHAPE(4), LP_CAT_INPUT);

    for (int i = 0; i < N_BINARY; i++) {
        const binary_case *bc = &binary_cases[i];
        tn_clear_error();
        assert_null(bc->fn(a, b));
        assert_error(TN_ESHAPE, bc->name);
        assert_error(TN_ESHAPE, "[2,3]");
        assert_error(TN_ESHAPE, "[4]");
        tn_clear_error();
        assert_null(bc->fn(NULL, a));
        assert_error(TN_EINVAL, bc->name);
        tn_clear_error();
        assert_null(bc->fn(a, NULL));
        assert_error(TN_EINVAL, bc->name);
    }
    /* [2,1,4] and [3,2] do not broadcast either (4 vs 2). */
    tn_tensor *p = tn_zeros(GC_SHAPE(2, 1, 4), LP_CAT_INPUT),
              *q = tn_zeros(GC_SHAPE(3, 2), LP_CAT_INPUT);
    assert_null(tn_mul(p, q));
    assert_error(TN_ESHAPE, "mul");
    tn_release(p);
    tn_release(q);

    for (int i = 0; i < N_UNARY; i++) {
        tn_clear_error();
        assert_null(unary_cases[i].fn(NULL));
        assert_error(TN_EINVAL, unary_cases[i].name);
    }

    tn_tensor *x = tn_zeros(GC_SHAPE(2, 3, 4), LP_CAT_INPUT);
    const int bad[] = {3, -4, 100};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tn_clear_error();
        assert_null(tn_softmax(x, bad[i]));
        assert_error(TN_EINVAL, "softmax");
        assert_error(TN_EINVAL, "[2,3,4]");
        tn_clear_error();
        assert_null(tn_log_softmax(x, bad[i]));
        assert_error(TN_EINVAL, "log_softmax");
    }
    tn_tensor *z = tn_scalar(1.0f, LP_CAT_INPUT);
    assert_null(tn_softmax(z, 1));
    assert_error(TN_EINVAL, "softmax");
    tn_release(z);
    tn_clear_error();
    assert_null(tn_softmax(NULL, 0));
    assert_error(TN_EINVAL, "softmax");
    tn_clear_error();
    assert_null(tn_log_softmax(NULL, 0));
    assert_error(TN_EINVAL, "log_softmax");

    tn_release(x);
    tn_release(a);
    tn_release(b);
}

int main(void)
{
    tn_manual_seed(1234);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_values),
        cmocka_unit_test(test_unary_noncontiguous_values),
        cmocka_unit_test(test_binary_values),
        cmocka_unit_test(test_exp_lane),
        cmocka_unit_test(test_softmax_values),
        cmocka_unit_test(test_unary_grad),
        cmocka_unit_test(test_unary_grad_transposed),
        cmocka_unit_test(test_binary_grad),
        cmocka_unit_test(test_binary_grad_partial),
        cmocka_unit_test(test_binary_grad_special),
        cmocka_unit_test(test_softmax_grad),
        cmocka_unit_test(test_saved_tensors),
        cmocka_unit_test(test_grad_modes),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
