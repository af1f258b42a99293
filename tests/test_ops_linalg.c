/*
 * Tests of matmul, linear, conv2d, max_pool2d and avg_pool2d: forward values against hand-computed
 * numbers and naive loops, finite-difference checks of every backward (broadcast batch dims,
 * transposed and expanded inputs), what each op saves for backward, and every user-error path.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "gradprof/libprof.h"
#include "gradprof/tensor.h"
#include "xorshift.h"

/* ---- helpers -------------------------------------------------------------------------------- */

static tn_tensor *from(int ndim, const int64_t *shape, const float *data)
{
    tn_tensor *t = tn_from_data(ndim, shape, data, LP_CAT_INPUT);
    assert_non_null(t);
    return t;
}

/* Asserts t has the given shape and (row-major) values. */
static void expect_values(const char *what, tn_tensor *t, int ndim, const int64_t *shape,
                          const float *expected)
{
    if (!t)
        fail_msg("%s: op failed: %s", what, tn_last_error_message());
    assert_int_equal(tn_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        assert_int_equal(tn_shape(t)[d], shape[d]);
    int64_t n = tn_numel(t);
    float *got = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(got);
    tn_copy_to(t, got);
    gc_assert_close(what, got, expected, n, 1e-5, 1e-5);
    free(got);
}

/* Asserts r is NULL with error `code` and a message containing each non-NULL string. */
static void expect_error(tn_tensor *r, int code, const char *s1, const char *s2, const char *s3)
{
    assert_null(r);
    assert_int_equal(tn_last_error(), code);
    const char *msg = tn_last_error_message();
    const char *want[3] = {s1, s2, s3};
    for (int i = 0; i < 3; i++)
        if (want[i] && !strstr(msg, want[i]))
            fail_msg("error message \"%s\" lacks \"%s\"", msg, want[i]);
    tn_clear_error();
}

static int64_t live(lp_category c)
{
    lp_counters cnt;
    assert_int_equal(lp_counters_get(LP_DEVICE_HOST, &cnt), 0);
    return cnt.live[c];
}

/* Distinct values, 0.05 apart (a permutation of i * 0.05 - 1), so that finite differences never
 * change a max-pool argmax. n must be coprime with 37. */
static tn_tensor *distinct(int ndim, const int64_t *shape, bool requires_grad)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    float *v = malloc((size_t)n * sizeof(float));
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((i * 37) % n) * 0.05f - 1.0f;
    tn_tensor *t = from(ndim, shape, v);
    free(v);
    if (requires_grad)
        assert_int_equal(tn_set_requires_grad(t, true), 0);
    return t;
}

static void release_all(tn_tensor **t, int n)
{
    for (int i = 0; i < n; i++)
        tn_release(t[i]);
}

/* ---- functions under gradient check ------------------------------------------------------- */

static tn_tensor *f_matmul(tn_tensor *const *in, void *ctx)
{
    return tn_matmul(in[0], in[1]);
}

/* transpose(in0, -1, -2) @ in1: a non-contiguous left operand. */
static tn_tensor *f_matmul_ta(tn_tensor *const *in, void *ctx)
{
    tn_tensor *t = tn_transpose(in[0], -1, -2);
    tn_tensor *r = t ? tn_matmul(t, in[1]) : NULL;
    tn_release(t);
    return r;
}

/* in0 @ transpose(in1, -1, -2): a non-contiguous right operand. */
static tn_tensor *f_matmul_tb(tn_tensor *const *in, void *ctx)
{
    tn_tensor *t = tn_transpose(in[1], -1, -2);
    tn_tensor *r = t ? tn_matmul(in[0], t) : NULL;
    tn_release(t);
    return r;
}

/* expand(in0 [1, k] -> [3, k]) @ in1: a stride-0 operand sgemm cannot take. */
static tn_tensor *f_matmul_expand(tn_tensor *const *in, void *ctx)
{
    int64_t shape[2] = {3, tn_shape(in[0])[1]};
    tn_tensor *t = tn_expand(in[0], 2, shape);
    tn_tensor *r = t ? tn_matmul(t, in[1]) : NULL;
    tn_release(t);
    return r;
}

static tn_tensor *f_linear(tn_tensor *const *in, void *ctx)
{
    bool bias = *(const bool *)ctx;
    return tn_linear(in[0], in[1], bias ? in[2] : NULL);
}

/* linear(transpose(in0), transpose(in1), in2): both operands non-contiguous. */
static tn_tensor *f_linear_t(tn_tensor *const *in, void *ctx)
{
    tn_tensor *x = tn_transpose(in[0], 0, 1), *w = tn_transpose(in[1], 0, 1);
    tn_tensor *r = x && w ? tn_linear(x, w, in[2]) : NULL;
    tn_release(x);
    tn_release(w);
    return r;
}

/* linear(transpose(in0, 1, 2), in1, in2): a 3-D x whose rows do not fold without a copy. */
static tn_tensor *f_linear_t3(tn_tensor *const *in, void *ctx)
{
    tn_tensor *x = tn_transpose(in[0], 1, 2);
    tn_tensor *r = x ? tn_linear(x, in[1], in[2]) : NULL;
    tn_release(x);
    return r;
}

typedef struct conv_cfg {
    int stride, padding;
    bool bias, transpose_x, transpose_w;
} conv_cfg;

static tn_tensor *f_conv(tn_tensor *const *in, void *ctx)
{
    const conv_cfg *c = ctx;
    tn_tensor *x = c->transpose_x ? tn_transpose(in[0], 2, 3) : tn_retain(in[0]);
    tn_tensor *w = c->transpose_w ? tn_transpose(in[1], 2, 3) : tn_retain(in[1]);
    tn_tensor *r = x && w ? tn_conv2d(x, w, c->bias ? in[2] : NULL, c->stride, c->padding) : NULL;
    tn_release(x);
    tn_release(w);
    return r;
}

typedef struct pool_cfg {
    bool max;
    int kernel, stride, padding;
    bool transpose_x;
} pool_cfg;

static tn_tensor *f_pool(tn_tensor *const *in, void *ctx)
{
    const pool_cfg *c = ctx;
    tn_tensor *x = c->transpose_x ? tn_transpose(in[0], 2, 3) : tn_retain(in[0]);
    tn_tensor *r = NULL;
    if (x)
        r = c->max ? tn_max_pool2d(x, c->kernel, c->stride, c->padding)
                   : tn_avg_pool2d(x, c->kernel, c->stride, c->padding);
    tn_release(x);
    return r;
}

/* ---- matmul --------------------------------------------------------------------------------- */

static void test_matmul_forward(void **state)
{
    float a23[] = {1, 2, 3, 4, 5, 6}, b32[] = {7, 8, 9, 10, 11, 12};
    tn_tensor *a = from(GC_SHAPE(2, 3), a23), *b = from(GC_SHAPE(3, 2), b32);
    tn_tensor *r = tn_matmul(a, b);
    expect_values("2-D", r, GC_SHAPE(2, 2), (const float[]){58, 64, 139, 154});
    tn_release(r);

    /* a^T [3, 2] from the transposed view of a: [[1,4],[2,5],[3,6]] @ [[1,2],[3,4]]. */
    tn_tensor *at = tn_transpose(a, 0, 1);
    tn_tensor *c = from(GC_SHAPE(2, 2), (const float[]){1, 2, 3, 4});
    r = tn_matmul(at, c);
    expect_values("transposed", r, GC_SHAPE(3, 2), (const float[]){13, 18, 17, 24, 21, 30});
    tn_release(r);

    tn_tensor *u = from(GC_SHAPE(3), (const float[]){1, 2, 3});
    tn_tensor *v = from(GC_SHAPE(3), (const float[]){4, 5, 6});
    r = tn_matmul(u, v);
    assert_non_null(r);
    assert_int_equal(tn_ndim(r), 0);
    assert_float_equal(tn_item(r), 32.0f, 1e-6);
    tn_release(r);

    tn_tensor *p = from(GC_SHAPE(2), (const float[]){1, 2});
    r = tn_matmul(p, a); /* [2] @ [2, 3] -> [3] */
    expect_values("1-D @ 2-D", r, GC_SHAPE(3), (const float[]){9, 12, 15});
    tn_release(r);
    r = tn_matmul(a, u); /* [2, 3] @ [3] -> [2] */
    expect_values("2-D @ 1-D", r, GC_SHAPE(2), (const float[]){14, 32});
    tn_release(r);

    /* Batched with broadcast: [2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2], against a naive loop. */
    float av[12], bv[18], want[24];
    for (int i = 0; i < 12; i++)
        av[i] = (float)(i % 5) - 2.0f;
    for (int i = 0; i < 18; i++)
        bv[i] = (float)(i % 7) * 0.5f - 1.0f;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int n = 0; n < 2; n++)
                for (int m = 0; m < 2; m++) {
                    float s = 0;
                    for (int k = 0; k < 3; k++)
                        s += av[(i * 2 + n) * 3 + k] * bv[(j * 3 + k) * 2 + m];
                    want[((i * 3 + j) * 2 + n) * 2 + m] = s;
                }
    tn_tensor *ba = from(GC_SHAPE(2, 1, 2, 3), av), *bb = from(GC_SHAPE(3, 3, 2), bv);
    r = tn_matmul(ba, bb);
    expect_values("broadcast batch", r, GC_SHAPE(2, 3, 2, 2), want);
    tn_release(r);

    /* Folded path: [2, 2, 3] @ [3, 2] equals the per-batch products. */
    tn_tensor *fa = from(GC_SHAPE(2, 2, 3), av);
    tn_tensor *fb = from(GC_SHAPE(3, 2), bv);
    r = tn_matmul(fa, fb);
    float want2[8];
    for (int i = 0; i < 4; i++)
        for (int m = 0; m < 2; m++) {
            float s = 0;
            for (int k = 0; k < 3; k++)
                s += av[i * 3 + k] * bv[k * 2 + m];
            want2[i * 2 + m] = s;
        }
    expect_values("folded batch", r, GC_SHAPE(2, 2, 2), want2);
    tn_release(r);

    tn_tensor *all[] = {a, b, at, c, u, v, p, ba, bb, fa, fb};
    release_all(all, 11);
}

static void test_matmul_grad(void **state)
{
    struct {
        const char *name;
        gc_fn fn;
        int na, nb;
        int64_t sa[4], sb[4];
    } cases[] = {
        {"2-D", f_matmul, 2, 2, {3, 4}, {4, 2}},
        {"1-D @ 1-D", f_matmul, 1, 1, {5}, {5}},
        {"1-D @ 2-D", f_matmul, 1, 2, {4}, {4, 3}},
        {"2-D @ 1-D", f_matmul, 2, 1, {3, 4}, {4}},
        {"3-D @ 2-D", f_matmul, 3, 2, {2, 3, 4}, {4, 2}},
        {"3-D @ 1-D", f_matmul, 3, 1, {2, 3, 4}, {4}},
        {"2-D @ 3-D", f_matmul, 2, 3, {3, 4}, {2, 4, 2}},
        {"1-D @ 3-D", f_matmul, 1, 3, {4}, {2, 4, 3}},
        {"broadcast batch", f_matmul, 4, 3, {2, 1, 3, 4}, {3, 4, 2}},
        {"transposed a", f_matmul_ta, 2, 2, {4, 3}, {4, 2}},
        {"transposed b", f_matmul_tb, 2, 2, {3, 4}, {2, 4}},
        {"transposed 3-D a @ 2-D", f_matmul_ta, 3, 2, {2, 4, 3}, {4, 2}},
        {"3-D @ transposed 3-D b", f_matmul_tb, 3, 3, {2, 3, 4}, {2, 2, 4}},
        {"expanded a", f_matmul_expand, 2, 2, {1, 4}, {4, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tn_tensor *in[2] = {gc_rand(cases[i].na, cases[i].sa, -1, 1, true),
                            gc_rand(cases[i].nb, cases[i].sb, -1, 1, true)};
        GC_CHECK(cases[i].name, cases[i].fn, NULL, 2, in);
        /* Only one side requiring grad: only the other side is saved and used. */
        assert_int_equal(tn_set_requires_grad(in[1], false), 0);
        GC_CHECK(cases[i].name, cases[i].fn, NULL, 2, in);
        assert_int_equal(tn_set_requires_grad(in[1], true), 0);
        assert_int_equal(tn_set_requires_grad(in[0], false), 0);
        GC_CHECK(cases[i].name, cases[i].fn, NULL, 2, in);
        release_all(in, 2);
    }
}

/* matmul saves b only when a needs grad and a only when b does. */
static void test_matmul_saved(void **state)
{
    tn_tensor *a = tn_zeros(GC_SHAPE(3, 4), LP_CAT_ACTIVATION);
    tn_tensor *b = tn_zeros(GC_SHAPE(4, 5), LP_CAT_ACTIVATION);
    assert_int_equal(tn_set_requires_grad(a, true), 0);
    int64_t before = live(LP_CAT_SAVED);
    tn_tensor *r = tn_matmul(a, b);
    assert_non_null(r);
    assert_string_equal(tn_grad_fn_name(r), "matmul");
    assert_int_equal(live(LP_CAT_SAVED) - before, 4 * 5 * (int64_t)sizeof(float)); /* b only */
    tn_release(r);
    assert_int_equal(live(LP_CAT_SAVED), before);

    assert_int_equal(tn_set_requires_grad(a, false), 0);
    assert_int_equal(tn_set_requires_grad(b, true), 0);
    r = tn_matmul(a, b);
    assert_non_null(r);
    assert_int_equal(live(LP_CAT_SAVED) - before, 3 * 4 * (int64_t)sizeof(float)); /* a only */
    tn_release(r);

    /* No graph, nothing saved, under no_grad. */
    tn_grad_mode prev = tn_no_grad_begin();
    r = tn_matmul(a, b);
    tn_grad_mode_end(prev);
    assert_non_null(r);
    assert_null(tn_grad_fn_name(r));
    assert_int_equal(live(LP_CAT_SAVED), before);
    tn_release(r);
    tn_release(a);
    tn_release(b);
}

/* ---- linear --------------------------------------------------------------------------------- */

static void test_linear_forward(void **state)
{
    tn_tensor *x = from(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
    tn_tensor *w = from(GC_SHAPE(2, 3), (const float[]){1, 0, -1, 0.5f, 0.5f, 0.5f});
    tn_tensor *b = from(GC_SHAPE(2), (const float[]){10, 20});
    tn_tensor *r = tn_linear(x, w, b);
    expect_values("with bias", r, GC_SHAPE(2, 2), (const float[]){8, 23, 8, 27.5f});
    assert_non_null(r);
    tn_release(r);
    r = tn_linear(x, w, NULL);
    expect_values("without bias", r, GC_SHAPE(2, 2), (const float[]){-2, 3, -2, 7.5f});
    tn_release(r);

    tn_tensor *v = from(GC_SHAPE(3), (const float[]){1, 2, 3});
    r = tn_linear(v, w, b);
    expect_values("1-D x", r, GC_SHAPE(2), (const float[]){8, 23});
    tn_release(r);

    /* 3-D x [2, 1, 3] folds into rows. */
    tn_tensor *x3 = from(GC_SHAPE(2, 1, 3), (const float[]){1, 2, 3, 4, 5, 6});
    r = tn_linear(x3, w, b);
    expect_values("3-D x", r, GC_SHAPE(2, 1, 2), (const float[]){8, 23, 8, 27.5f});
    tn_release(r);

    /* Transposed x: [[1,4],[2,5],[3,6]]^T = x. */
    tn_tensor *xs = from(GC_SHAPE(3, 2), (const float[]){1, 4, 2, 5, 3, 6});
    tn_tensor *xt = tn_transpose(xs, 0, 1);
    r = tn_linear(xt, w, b);
    expect_values("transposed x", r, GC_SHAPE(2, 2), (const float[]){8, 23, 8, 27.5f});
    tn_release(r);

    tn_tensor *all[] = {x, w, b, v, x3, xs, xt};
    release_all(all, 7);
}

static void test_linear_grad(void **state)
{
    bool with = true, without = false;
    struct {
        const char *name;
        bool *bias;
        int nx;
        int64_t sx[3];
    } cases[] = {
        {"2-D bias", &with, 2, {3, 4}},    {"2-D no bias", &without, 2, {3, 4}},
        {"3-D bias", &with, 3, {2, 3, 4}}, {"3-D no bias", &without, 3, {2, 3, 4}},
        {"1-D bias", &with, 1, {4}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tn_tensor *in[3] = {gc_rand(cases[i].nx, cases[i].sx, -1, 1, true),
                            gc_rand(GC_SHAPE(5, 4), -1, 1, true),
                            gc_rand(GC_SHAPE(5), -1, 1, true)};
        GC_CHECK(cases[i].name, f_linear, cases[i].bias, *cases[i].bias ? 3 : 2, in);
        /* Frozen input (the usual case): only weight and bias get grads. */
        assert_int_equal(tn_set_requires_grad(in[0], false), 0);
        GC_CHECK(cases[i].name, f_linear, cases[i].bias, *cases[i].bias ? 3 : 2, in);
        /* Frozen weight: only x (and bias) get grads. */
        assert_int_equal(tn_set_requires_grad(in[0], true), 0);
        assert_int_equal(tn_set_requires_grad(in[1], false), 0);
        GC_CHECK(cases[i].name, f_linear, cases[i].bias, *cases[i].bias ? 3 : 2, in);
        release_all(in, 3);
    }
    /* Transposed x [4, 3] -> [3, 4] and transposed weight [4, 5] -> [5, 4]. */
    tn_tensor *in[3] = {gc_rand(GC_SHAPE(4, 3), -1, 1, true), gc_rand(GC_SHAPE(4, 5), -1, 1, true),
                        gc_rand(GC_SHAPE(5), -1, 1, true)};
    GC_CHECK("transposed", f_linear_t, NULL, 3, in);
    release_all(in, 3);
    tn_tensor *in3[3] = {gc_rand(GC_SHAPE(2, 4, 3), -1, 1, true),
                         gc_rand(GC_SHAPE(5, 4), -1, 1, true), gc_rand(GC_SHAPE(5), -1, 1, true)};
    GC_CHECK("transposed 3-D", f_linear_t3, NULL, 3, in3);
    release_all(in3, 3);
}

/* With x not requiring grad and weight requiring it, linear saves exactly x. */
static void test_linear_saved_memory(void **state)
{
    assert_true(tn_is_grad_enabled());
    tn_tensor *x = tn_zeros(GC_SHAPE(4, 3), LP_CAT_ACTIVATION);
    tn_tensor *w = tn_zeros(GC_SHAPE(2, 3), LP_CAT_PARAMETER);
    tn_tensor *b = tn_zeros(GC_SHAPE(2), LP_CAT_PARAMETER);
    assert_int_equal(tn_set_requires_grad(w, true), 0);
    assert_int_equal(tn_set_requires_grad(b, true), 0);

    int64_t before = live(LP_CAT_SAVED);
    tn_tensor *r = tn_linear(x, w, b);
    assert_non_null(r);
    assert_string_equal(tn_grad_fn_name(r), "linear");
    assert_int_equal(live(LP_CAT_SAVED) - before, 4 * 3 * (int64_t)sizeof(float));
    tn_release(r);
    assert_int_equal(live(LP_CAT_SAVED), before);

    /* x requiring grad, weight frozen (an ACTIVATION here so its save would show): saves w only. */
    tn_tensor *x2 = tn_zeros(GC_SHAPE(4, 3), LP_CAT_ACTIVATION);
    tn_tensor *w2 = tn_zeros(GC_SHAPE(2, 3), LP_CAT_ACTIVATION);
    assert_int_equal(tn_set_requires_grad(x2, true), 0);
    r = tn_linear(x2, w2, NULL);
    assert_non_null(r);
    assert_int_equal(live(LP_CAT_SAVED) - before, 2 * 3 * (int64_t)sizeof(float));
    tn_release(r);

    /* Bias alone requiring grad: nothing saved. */
    tn_tensor *w3 = tn_zeros(GC_SHAPE(2, 3), LP_CAT_ACTIVATION);
    r = tn_linear(x, w3, b);
    assert_non_null(r);
    assert_int_equal(live(LP_CAT_SAVED), before);
    tn_release(r);

    tn_tensor *all[] = {x, w, b, x2, w2, w3};
    release_all(all, 6);
}

/* ---- conv2d --------------------------------------------------------------------------------- */

/* Naive conv2d of contiguous arrays, for reference. */
static void conv_ref(const float *x, const float *w, const float *b, int N, int C, int H, int W,
                     int O, int k, int s, int p, float *out)
{
    int Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++) {
                    float acc = b ? b[o] : 0.0f;
                    for (int c = 0; c < C; c++)
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int ih = oh * s - p + i, iw = ow * s - p + j;
                                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                                    acc += x[((n * C + c) * H + ih) * W + iw] *
                                           w[((o * C + c) * k + i) * k + j];
                            }
                    out[((n * O + o) * Ho + oh) * Wo + ow] = acc;
                }
}

static void test_conv2d_forward(void **state)
{
    tn_tensor *x = from(GC_SHAPE(1, 1, 3, 3), (const float[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
    tn_tensor *w = from(GC_SHAPE(1, 1, 2, 2), (const float[]){1, 0, 0, 1});
    tn_tensor *b = from(GC_SHAPE(1), (const float[]){0.5f});
    tn_tensor *r = tn_conv2d(x, w, b, 1, 0);
    expect_values("s1 p0", r, GC_SHAPE(1, 1, 2, 2), (const float[]){6.5f, 8.5f, 12.5f, 14.5f});
    tn_release(r);
    r = tn_conv2d(x, w, NULL, 2, 1);
    expect_values("s2 p1", r, GC_SHAPE(1, 1, 2, 2), (const float[]){1, 3, 7, 14});
    tn_release(r);

    /* N=2, C=2, O=3 on 5x5 against the naive loop, in several configurations. */
    float xv[100], wv[54], bv[3], want[2 * 3 * 5 * 5];
    for (int i = 0; i < 100; i++)
        xv[i] = (float)((i * 13) % 17) * 0.125f - 1.0f;
    for (int i = 0; i < 54; i++)
        wv[i] = (float)((i * 5) % 11) * 0.25f - 1.25f;
    for (int i = 0; i < 3; i++)
        bv[i] = (float)i - 1.0f;
    tn_tensor *X = from(GC_SHAPE(2, 2, 5, 5), xv), *Wt = from(GC_SHAPE(3, 2, 3, 3), wv);
    tn_tensor *B = from(GC_SHAPE(3), bv);
    int cfg[][2] = {{1, 0}, {1, 1}, {2, 0}, {2, 1}};
    for (int i = 0; i < 4; i++) {
        int s = cfg[i][0], p = cfg[i][1], ho = (5 + 2 * p - 3) / s + 1;
        conv_ref(xv, wv, bv, 2, 2, 5, 5, 3, 3, s, p, want);
        r = tn_conv2d(X, Wt, B, s, p);
        expect_values("conv vs naive", r, GC_SHAPE(2, 3, ho, ho), want);
        tn_release(r);
    }
    /* 1x1 kernel (the no-im2col path). */
    tn_tensor *W1 = from(GC_SHAPE(3, 2, 1, 1), wv);
    conv_ref(xv, wv, NULL, 2, 2, 5, 5, 3, 1, 1, 0, want);
    r = tn_conv2d(X, W1, NULL, 1, 0);
    expect_values("1x1 conv", r, GC_SHAPE(2, 3, 5, 5), want);
    tn_release(r);

    tn_tensor *all[] = {x, w, b, X, Wt, B, W1};
    release_all(all, 7);
}

static void test_conv2d_grad(void **state)
{
    conv_cfg cfgs[] = {
        /* stride, padding, bias, transposed x, transposed weight */
        {1, 0, true, false, false}, {1, 1, true, false, false},  {2, 0, false, false, false},
        {2, 1, true, false, false}, {1, 1, false, false, false}, {2, 1, true, true, false},
        {1, 1, true, true, true},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        tn_tensor *in[3] = {gc_rand(GC_SHAPE(2, 2, 5, 5), -1, 1, true),
                            gc_rand(GC_SHAPE(3, 2, 3, 3), -1, 1, true),
                            gc_rand(GC_SHAPE(3), -1, 1, true)};
        GC_CHECK("conv2d", f_conv, &cfgs[i], cfgs[i].bias ? 3 : 2, in);
        /* A first layer: the image needs no grad. */
        assert_int_equal(tn_set_requires_grad(in[0], false), 0);
        GC_CHECK("conv2d frozen x", f_conv, &cfgs[i], cfgs[i].bias ? 3 : 2, in);
        /* Frozen weights: only the image's gradient. */
        assert_int_equal(tn_set_requires_grad(in[0], true), 0);
        assert_int_equal(tn_set_requires_grad(in[1], false), 0);
        GC_CHECK("conv2d frozen weight", f_conv, &cfgs[i], cfgs[i].bias ? 3 : 2, in);
        release_all(in, 3);
    }
    /* 1x1 kernel, stride 1, no padding: the pointwise path. */
    conv_cfg pw = {1, 0, true, false, false};
    tn_tensor *in[3] = {gc_rand(GC_SHAPE(2, 2, 3, 3), -1, 1, true),
                        gc_rand(GC_SHAPE(3, 2, 1, 1), -1, 1, true),
                        gc_rand(GC_SHAPE(3), -1, 1, true)};
    GC_CHECK("conv2d 1x1", f_conv, &pw, 3, in);
    release_all(in, 3);
}

/* conv2d saves x and weight (not the columns) and frees its column scratch before returning. */
static void test_conv2d_memory(void **state)
{
    tn_tensor *x = tn_zeros(GC_SHAPE(2, 2, 5, 5), LP_CAT_ACTIVATION);
    tn_tensor *w = tn_zeros(GC_SHAPE(3, 2, 3, 3), LP_CAT_PARAMETER);
    assert_int_equal(tn_set_requires_grad(w, true), 0);
    int64_t saved = live(LP_CAT_SAVED), temp = live(LP_CAT_TEMPORARY);
    tn_tensor *r = tn_conv2d(x, w, NULL, 1, 1);
    assert_non_null(r);
    assert_string_equal(tn_grad_fn_name(r), "conv2d");
    assert_int_equal(live(LP_CAT_SAVED) - saved, 2 * 2 * 5 * 5 * (int64_t)sizeof(float));
    assert_int_equal(live(LP_CAT_TEMPORARY), temp);

    tn_tensor *loss = tn_sum(r, 0, NULL, false);
    assert_non_null(loss);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    assert_int_equal(live(LP_CAT_TEMPORARY), temp);
    assert_int_equal(live(LP_CAT_SAVED), saved); /* released with the graph */
    /* d sum / d w[o,c,i,j] = sum of x over the window positions: x is zero. */
    tn_tensor *g = tn_grad(w);
    assert_non_null(g);
    assert_float_equal(tn_data(g)[0], 0.0f, 0);
    tn_release(loss);
    tn_release(r);
    tn_release(x);
    tn_release(w);
}

/* ---- pooling -------------------------------------------------------------------------------- */

static void test_pool_forward(void **state)
{
    float v16[16], v9[9];
    for (int i = 0; i < 16; i++)
        v16[i] = (float)(i + 1);
    for (int i = 0; i < 9; i++)
        v9[i] = (float)(i + 1);
    tn_tensor *x4 = from(GC_SHAPE(1, 1, 4, 4), v16), *x3 = from(GC_SHAPE(1, 1, 3, 3), v9);

    tn_tensor *r = tn_max_pool2d(x4, 2, 2, 0);
    expect_values("max k2 s2", r, GC_SHAPE(1, 1, 2, 2), (const float[]){6, 8, 14, 16});
    tn_release(r);
    r = tn_max_pool2d(x3, 3, 1, 1);
    expect_values("max k3 s1 p1", r, GC_SHAPE(1, 1, 3, 3),
                  (const float[]){5, 6, 6, 8, 9, 9, 8, 9, 9});
    tn_release(r);
    r = tn_avg_pool2d(x4, 2, 2, 0);
    expect_values("avg k2 s2", r, GC_SHAPE(1, 1, 2, 2), (const float[]){3.5f, 5.5f, 11.5f, 13.5f});
    tn_release(r);
    /* count_include_pad: corners divide 1+2+4+5 by 9, not 4. */
    r = tn_avg_pool2d(x3, 3, 1, 1);
    expect_values("avg k3 s1 p1", r, GC_SHAPE(1, 1, 3, 3),
                  (const float[]){12 / 9.f, 21 / 9.f, 16 / 9.f, 27 / 9.f, 45 / 9.f, 33 / 9.f,
                                  24 / 9.f, 39 / 9.f, 28 / 9.f});
    tn_release(r);

    /* Negative values under padding: padding is -inf for max, not 0. */
    tn_tensor *neg = from(GC_SHAPE(1, 1, 2, 2), (const float[]){-1, -2, -3, -4});
    r = tn_max_pool2d(neg, 2, 2, 1);
    expect_values("max negative padded", r, GC_SHAPE(1, 1, 2, 2), (const float[]){-1, -2, -3, -4});
    tn_release(r);

    /* A transposed (non-contiguous) input. */
    tn_tensor *x4t = tn_transpose(x4, 2, 3);
    r = tn_max_pool2d(x4t, 2, 2, 0);
    expect_values("max transposed", r, GC_SHAPE(1, 1, 2, 2), (const float[]){6, 14, 8, 16});
    tn_release(r);

    tn_tensor *all[] = {x4, x3, neg, x4t};
    release_all(all, 4);
}

static void test_pool_grad(void **state)
{
    pool_cfg cfgs[] = {
        {true, 2, 2, 0, false},  {true, 3, 1, 1, false},  {true, 3, 2, 1, true},
        {false, 2, 2, 0, false}, {false, 3, 1, 1, false}, {false, 3, 2, 1, true},
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        tn_tensor *x = distinct(GC_SHAPE(2, 2, 5, 5), true);
        GC_CHECK(cfgs[i].max ? "max_pool2d" : "avg_pool2d", f_pool, &cfgs[i], 1, &x);
        tn_release(x);
    }
}

/* max_pool2d's backward sends each window's gradient where PyTorch's CPU kernel does: to the first
 * maximum in row-major order, to the last NaN when the window holds NaNs, and to the first element
 * of a window of -inf only. */
static void test_pool_grad_ties(void **state)
{
    const float inf = INFINITY;
    tn_tensor *x = from(GC_SHAPE(1, 1, 2, 6),
                        (const float[]){1, 3, NAN, 1, -inf, -inf, 3, 2, 2, NAN, -inf, -inf});
    assert_int_equal(tn_set_requires_grad(x, true), 0);
    tn_tensor *y = tn_max_pool2d(x, 2, 2, 0);
    assert_non_null(y);
    tn_tensor *g = from(GC_SHAPE(1, 1, 1, 3), (const float[]){10, 20, 30});
    assert_int_equal(tn_backward(y, g, false), 0);
    expect_values("max_pool2d grad: first max, last NaN, first of -inf", tn_grad(x),
                  GC_SHAPE(1, 1, 2, 6), (const float[]){0, 10, 0, 0, 30, 0, 0, 0, 0, 20, 0, 0});
    tn_tensor *all[] = {x, y, g};
    release_all(all, 3);
}

/* The 2x2, stride-2 max pool over rows of unit stride (its own loops) gives the same bits as the
 * general path, which a transposed view of the same values takes: forward and gradient, with
 * ties, NaNs, infinities and signed zeros in the windows and in the incoming gradient, for even
 * sizes (the gradient written without zeroing) and odd ones (the last row and column left out). */
static void test_max_pool_2x2_matches_general_path(void **state)
{
    const float specials[] = {0.0f, -0.0f, 1.0f, 1.0f, -INFINITY, INFINITY, NAN, -1.0f};
    const int64_t shapes[][4] = {{2, 3, 6, 8}, {1, 2, 5, 7}, {1, 1, 2, 2}};
    uint64_t seed = 12345;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t *sh = shapes[s];
        int64_t swapped[4] = {sh[0], sh[1], sh[3], sh[2]};
        tn_tensor *a = tn_empty(4, sh, LP_CAT_INPUT), *b = tn_empty(4, swapped, LP_CAT_INPUT);
        float *av = tn_data(a), *bv = tn_data(b);
        for (int64_t n = 0; n < sh[0] * sh[1]; n++)
            for (int64_t h = 0; h < sh[2]; h++)
                for (int64_t w = 0; w < sh[3]; w++) {
                    float v = specials[(xorshift64(&seed) >> 16) % 8];
                    av[(n * sh[2] + h) * sh[3] + w] = bv[(n * sh[3] + w) * sh[2] + h] = v;
                }
        assert_int_equal(tn_set_requires_grad(a, true), 0);
        assert_int_equal(tn_set_requires_grad(b, true), 0);
        tn_tensor *bt = tn_transpose(b, 2, 3); /* a's values, rows of stride H */
        tn_tensor *ya = tn_max_pool2d(a, 2, 2, 0), *yb = tn_max_pool2d(bt, 2, 2, 0);
        assert_non_null(ya);
        assert_non_null(yb);
        int64_t m = tn_numel(ya);
        assert_int_equal(m, tn_numel(yb));
        assert_memory_equal(tn_data(ya), tn_data(yb), (size_t)m * sizeof(float));
        tn_tensor *g = tn_empty(4, tn_shape(ya), LP_CAT_INPUT);
        for (int64_t i = 0; i < m; i++)
            tn_data(g)[i] = specials[(i * 3) % 8] * (float)(1 + i % 3); /* -0 stays -0 */
        assert_int_equal(tn_backward(ya, g, false), 0);
        assert_int_equal(tn_backward(yb, g, false), 0);
        const float *ga = tn_data(tn_grad(a)), *gb = tn_data(tn_grad(b));
        for (int64_t n = 0; n < sh[0] * sh[1]; n++)
            for (int64_t h = 0; h < sh[2]; h++)
                for (int64_t w = 0; w < sh[3]; w++)
                    assert_memory_equal(&ga[(n * sh[2] + h) * sh[3] + w],
                                        &gb[(n * sh[3] + w) * sh[2] + h], sizeof(float));
        tn_tensor *all[] = {a, b, bt, ya, yb, g};
        release_all(all, 6);
    }
}

/* max_pool2d saves x only (no index buffer); avg_pool2d saves nothing. */
static void test_pool_saved(void **state)
{
    tn_tensor *x = tn_zeros(GC_SHAPE(2, 2, 4, 4), LP_CAT_ACTIVATION);
    assert_int_equal(tn_set_requires_grad(x, true), 0);
    int64_t before = live(LP_CAT_SAVED), autograd = live(LP_CAT_AUTOGRAD);
    tn_tensor *r = tn_max_pool2d(x, 2, 2, 0);
    assert_non_null(r);
    assert_string_equal(tn_grad_fn_name(r), "max_pool2d");
    assert_int_equal(live(LP_CAT_SAVED) - before, 2 * 2 * 4 * 4 * (int64_t)sizeof(float));
    tn_release(r);
    r = tn_avg_pool2d(x, 2, 2, 0);
    assert_non_null(r);
    assert_string_equal(tn_grad_fn_name(r), "avg_pool2d");
    assert_int_equal(live(LP_CAT_SAVED), before);
    tn_release(r);
    assert_int_equal(live(LP_CAT_AUTOGRAD), autograd);
    tn_release(x);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    tn_tensor *a = tn_zeros(GC_SHAPE(2, 3), LP_CAT_INPUT),
              *b = tn_zeros(GC_SHAPE(4, 2), LP_CAT_INPUT);
    tn_tensor *a3 = tn_zeros(GC_SHAPE(2, 3, 4), LP_CAT_INPUT);
    tn_tensor *b3 = tn_zeros(GC_SHAPE(3, 4, 5), LP_CAT_INPUT);
    tn_tensor *s = tn_scalar(1.0f, LP_CAT_INPUT);
    expect_error(tn_matmul(a, b), TN_ESHAPE, "matmul", "[2,3]", "[4,2]");
    expect_error(tn_matmul(a3, b3), TN_ESHAPE, "matmul", "[2,3,4]", "[3,4,5]");
    expect_error(tn_matmul(s, a), TN_ESHAPE, "matmul", "[]", "[2,3]");
    expect_error(tn_matmul(NULL, a), TN_EINVAL, "matmul", NULL, NULL);

    tn_tensor *w = tn_zeros(GC_SHAPE(4, 5), LP_CAT_PARAMETER);
    tn_tensor *w1 = tn_zeros(GC_SHAPE(3), LP_CAT_PARAMETER);
    tn_tensor *w23 = tn_zeros(GC_SHAPE(2, 3), LP_CAT_PARAMETER);
    tn_tensor *bias3 = tn_zeros(GC_SHAPE(3), LP_CAT_PARAMETER);
    expect_error(tn_linear(a, w, NULL), TN_ESHAPE, "linear", "[2,3]", "[4,5]");
    expect_error(tn_linear(a, w1, NULL), TN_ESHAPE, "linear", "[2,3]", "[3]");
    expect_error(tn_linear(a, w23, bias3), TN_ESHAPE, "linear", "[3]", "[2,3]");
    expect_error(tn_linear(s, w23, NULL), TN_ESHAPE, "linear", "[]", "[2,3]");
    expect_error(tn_linear(a, NULL, NULL), TN_EINVAL, "linear", NULL, NULL);

    tn_tensor *x = tn_zeros(GC_SHAPE(1, 2, 4, 4), LP_CAT_INPUT);
    tn_tensor *xs = tn_zeros(GC_SHAPE(2, 4, 4), LP_CAT_INPUT);
    tn_tensor *cw = tn_zeros(GC_SHAPE(3, 2, 3, 3), LP_CAT_PARAMETER);
    tn_tensor *cw3 = tn_zeros(GC_SHAPE(3, 3, 3, 3), LP_CAT_PARAMETER);
    tn_tensor *cwbig = tn_zeros(GC_SHAPE(3, 2, 7, 7), LP_CAT_PARAMETER);
    tn_tensor *cb = tn_zeros(GC_SHAPE(4), LP_CAT_PARAMETER);
    expect_error(tn_conv2d(xs, cw, NULL, 1, 0), TN_ESHAPE, "conv2d", "[2,4,4]", "[3,2,3,3]");
    expect_error(tn_conv2d(x, cw3, NULL, 1, 0), TN_ESHAPE, "conv2d", "[1,2,4,4]", "[3,3,3,3]");
    expect_error(tn_conv2d(x, cwbig, NULL, 1, 1), TN_ESHAPE, "conv2d", "[1,2,4,4]", "[3,2,7,7]");
    expect_error(tn_conv2d(x, cw, NULL, 0, 0), TN_EINVAL, "conv2d", "stride 0", NULL);
    expect_error(tn_conv2d(x, cw, NULL, 1, -1), TN_EINVAL, "conv2d", "padding -1", NULL);
    expect_error(tn_conv2d(x, cw, cb, 1, 0), TN_ESHAPE, "conv2d", "[4]", "[3,2,3,3]");
    expect_error(tn_conv2d(x, w1, NULL, 1, 0), TN_ESHAPE, "conv2d", "[3]", NULL);
    /* The kernel fits once padded: a valid call. */
    tn_tensor *ok = tn_conv2d(x, cwbig, NULL, 1, 2);
    assert_non_null(ok);
    tn_release(ok);

    const char *ops[2] = {"max_pool2d", "avg_pool2d"};
    for (int i = 0; i < 2; i++) {
        tn_tensor *(*pool)(tn_tensor *, int, int, int) = i ? tn_avg_pool2d : tn_max_pool2d;
        expect_error(pool(xs, 2, 2, 0), TN_ESHAPE, ops[i], "[2,4,4]", NULL);
        expect_error(pool(x, 0, 1, 0), TN_EINVAL, ops[i], "kernel 0", NULL);
        expect_error(pool(x, 2, 0, 0), TN_EINVAL, ops[i], "stride 0", NULL);
        expect_error(pool(x, 2, 2, -1), TN_EINVAL, ops[i], "padding -1", NULL);
        expect_error(pool(x, 3, 1, 2), TN_EINVAL, ops[i], "padding 2", "kernel 3");
        expect_error(pool(x, 5, 1, 0), TN_ESHAPE, ops[i], "kernel 5", "[1,2,4,4]");
        expect_error(pool(NULL, 2, 2, 0), TN_EINVAL, ops[i], NULL, NULL);
    }

    tn_tensor *all[] = {a, b, a3, b3, s, w, w1, w23, bias3, x, xs, cw, cw3, cwbig, cb};
    release_all(all, 15);
}

int main(void)
{
    tn_manual_seed(1234);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_forward), cmocka_unit_test(test_matmul_grad),
        cmocka_unit_test(test_matmul_saved),   cmocka_unit_test(test_linear_forward),
        cmocka_unit_test(test_linear_grad),    cmocka_unit_test(test_linear_saved_memory),
        cmocka_unit_test(test_conv2d_forward), cmocka_unit_test(test_conv2d_grad),
        cmocka_unit_test(test_conv2d_memory),  cmocka_unit_test(test_pool_forward),
        cmocka_unit_test(test_pool_grad),      cmocka_unit_test(test_pool_grad_ties),
        cmocka_unit_test(test_max_pool_2x2_matches_general_path),
        cmocka_unit_test(test_pool_saved),     cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
