/*
 * Tests of the neural-network ops (ops_norm.c, ops_misc.c, ops_loss.c): layer_norm, batch_norm,
 * dropout, embedding, concat, cross_entropy, mse_loss and scaled dot-product attention. Forward
 * values against hand-computed numbers, finite-difference gradient checks (with non-contiguous
 * inputs where the op takes them), what is recorded and saved, and every user-error path.
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
#include "gradprof/tensor.h"

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
                          const float *want, double tol)
{
    assert_non_null(t);
    assert_int_equal(tn_ndim(t), ndim);
    for (int d = 0; d < ndim; d++)
        assert_int_equal(tn_shape(t)[d], shape[d]);
    int64_t n = tn_numel(t);
    float got[128];
    assert_true(n <= 128);
    tn_copy_to(t, got);
    gc_assert_close(what, got, want, n, tol, tol);
}

/* Asserts the call returned NULL with `code` and a message mentioning each needle. */
static void assert_fails(tn_tensor *r, int code, const char *needle1, const char *needle2)
{
    if (r)
        fail_msg("expected an error %d (%s), got a tensor", code, needle1);
    assert_int_equal(tn_last_error(), code);
    const char *msg = tn_last_error_message();
    if (!strstr(msg, needle1))
        fail_msg("error message \"%s\" does not mention \"%s\"", msg, needle1);
    if (needle2 && !strstr(msg, needle2))
        fail_msg("error message \"%s\" does not mention \"%s\"", msg, needle2);
    tn_clear_error();
}

static int setup(void **state)
{
    tn_manual_seed(1234);
    tn_clear_error();
    return 0;
}

/* ---- layer_norm ----------------------------------------------------------------------------- */

static void test_layer_norm_values(void **state)
{
    tn_tensor *x = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 10, 10, 13}, false);
    tn_tensor *y = tn_layer_norm(x, NULL, NULL, 1e-5f);
    /* Row 2: mean 11, deviations -1, -1, 2, var 2: (d / sqrt(2)). */
    assert_values("layer_norm", y, GC_SHAPE(2, 3),
                  (const float[]){-1.2247357f, 0, 1.2247357f, -0.7071050f, -0.7071050f, 1.4142100f},
                  1e-4);
    tn_release(y);

    tn_tensor *w = leaf(GC_SHAPE(3), (const float[]){2, 1, -1}, false);
    tn_tensor *b = leaf(GC_SHAPE(3), (const float[]){0.5f, 0, 1}, false);
    y = tn_layer_norm(x, w, b, 1e-5f);
    assert_values(
        "layer_norm affine", y, GC_SHAPE(2, 3),
        (const float[]){-1.9494714f, 0, -0.2247357f, -0.9142100f, -0.7071050f, -0.4142100f}, 1e-4);
    /* No grad needed: no node. */
    assert_null(tn_grad_fn_name(y));
    tn_release(y);
    tn_release(w);
    tn_release(b);
    tn_release(x);
}

static tn_tensor *ln_affine_fn(tn_tensor *const *in, void *ctx)
{
    return tn_layer_norm(in[0], in[1], in[2], 1e-5f);
}

static tn_tensor *ln_weight_only_fn(tn_tensor *const *in, void *ctx)
{
    return tn_layer_norm(in[0], in[1], NULL, 1e-5f);
}

/* layer_norm of x^T: a non-contiguous input. */
static tn_tensor *ln_transposed_fn(tn_tensor *const *in, void *ctx)
{
    tn_tensor *xt = tn_transpose(in[0], 0, 1);
    if (!xt)
        return NULL;
    tn_tensor *y = tn_layer_norm(xt, NULL, NULL, 1e-5f);
    tn_release(xt);
    return y;
}

static void test_layer_norm_grad(void **state)
{
    tn_tensor *in[3] = {gc_rand(GC_SHAPE(2, 3, 4), -2, 2, true),
                        gc_rand(GC_SHAPE(4), 0.5f, 1.5f, true), gc_rand(GC_SHAPE(4), -1, 1, true)};
    GC_CHECK("layer_norm affine 3-D", ln_affine_fn, NULL, 3, in);

    tn_tensor *y = tn_layer_norm(in[0], in[1], in[2], 1e-5f);
    assert_non_null(y);
    assert_string_equal(tn_grad_fn_name(y), "layer_norm");
    tn_release(y);

    GC_CHECK("layer_norm weight only", ln_weight_only_fn, NULL, 2, in);

    /* Gradient to weight and bias only. */
    tn_tensor *x_const = gc_rand(GC_SHAPE(3, 4), -2, 2, false);
    tn_tensor *in2[3] = {x_const, in[1], in[2]};
    GC_CHECK("layer_norm affine params only", ln_affine_fn, NULL, 3, in2);
    tn_release(x_const);

    tn_tensor *xt[1] = {gc_rand(GC_SHAPE(5, 3), -2, 2, true)};
    GC_CHECK("layer_norm no affine, transposed x", ln_transposed_fn, NULL, 1, xt);
    tn_release(xt[0]);
    for (int i = 0; i < 3; i++)
        tn_release(in[i]);
}

static void test_layer_norm_errors(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(2, 3), -1, 1, false);
    tn_tensor *w4 = gc_rand(GC_SHAPE(4), -1, 1, false);
    tn_tensor *w23 = gc_rand(GC_SHAPE(2, 3), -1, 1, false);
    tn_tensor *s = tn_scalar(1, LP_CAT_INPUT);
    assert_fails(tn_layer_norm(NULL, NULL, NULL, 1e-5f), TN_EINVAL, "layer_norm", "x");
    assert_fails(tn_layer_norm(x, w4, NULL, 1e-5f), TN_ESHAPE, "layer_norm", "[4]");
    assert_fails(tn_layer_norm(x, NULL, w4, 1e-5f), TN_ESHAPE, "layer_norm", "bias");
    assert_fails(tn_layer_norm(x, w23, NULL, 1e-5f), TN_ESHAPE, "layer_norm", "[2,3]");
    assert_fails(tn_layer_norm(s, NULL, NULL, 1e-5f), TN_ESHAPE, "layer_norm", "[]");
    assert_fails(tn_layer_norm(x, NULL, NULL, -1.0f), TN_EINVAL, "layer_norm", "eps");
    tn_release(x);
    tn_release(w4);
    tn_release(w23);
    tn_release(s);
}

/* ---- batch_norm ----------------------------------------------------------------------------- */

static void test_batch_norm_training_values(void **state)
{
    /* x [4, 2]: channel 0 = 1, 2, 3, 6 (mean 3, biased var 3.5, unbiased 14/3);
     * channel 1 = 0, 0, 4, 4 (mean 2, biased var 4, unbiased 16/3). */
    tn_tensor *x = leaf(GC_SHAPE(4, 2), (const float[]){1, 0, 2, 0, 3, 4, 6, 4}, false);
    tn_tensor *rm = leaf(GC_SHAPE(2), (const float[]){0.5f, -1}, false);
    tn_tensor *rv = leaf(GC_SHAPE(2), (const float[]){1, 2}, false);
    uint64_t vm = tn_version(rm), vv = tn_version(rv);
    const float eps = 1e-5f;
    tn_tensor *y = tn_batch_norm(x, rm, rv, NULL, NULL, true, 0.1f, eps);
    float r0 = 1.0f / sqrtf(3.5f + eps), r1 = 1.0f / sqrtf(4.0f + eps);
    assert_values("batch_norm train", y, GC_SHAPE(4, 2),
                  (const float[]){-2 * r0, -2 * r1, -1 * r0, -2 * r1, 0, 2 * r1, 3 * r0, 2 * r1},
                  1e-5);
    /* running = 0.9 * running + 0.1 * batch stat, with the unbiased variance. */
    assert_values("running_mean", rm, GC_SHAPE(2),
                  (const float[]){0.9f * 0.5f + 0.1f * 3, 0.9f * -1 + 0.1f * 2}, 1e-6);
    assert_values("running_var", rv, GC_SHAPE(2),
                  (const float[]){0.9f * 1 + 0.1f * 14.0f / 3, 0.9f * 2 + 0.1f * 16.0f / 3}, 1e-6);
    assert_true(tn_version(rm) > vm);
    assert_true(tn_version(rv) > vv);
    tn_release(y);

    /* Eval uses the (updated) running statistics and leaves them alone. */
    tn_tensor *w = leaf(GC_SHAPE(2), (const float[]){2, -1}, false);
    tn_tensor *b = leaf(GC_SHAPE(2), (const float[]){1, 0.5f}, false);
    float m0 = 0.9f * 0.5f + 0.1f * 3, v0 = 0.9f + 0.1f * 14.0f / 3;
    float m1 = 0.9f * -1 + 0.1f * 2, v1 = 0.9f * 2 + 0.1f * 16.0f / 3;
    float want[8];
    const float xs[8] = {1, 0, 2, 0, 3, 4, 6, 4};
    for (int i = 0; i < 8; i++)
        want[i] = i % 2 == 0 ? (xs[i] - m0) / sqrtf(v0 + eps) * 2 + 1
                             : (xs[i] - m1) / sqrtf(v1 + eps) * -1 + 0.5f;
    vm = tn_version(rm);
    y = tn_batch_norm(x, rm, rv, w, b, false, 0.1f, eps);
    assert_values("batch_norm eval", y, GC_SHAPE(4, 2), want, 1e-5);
    assert_int_equal(tn_version(rm), vm);
    assert_values("running_mean unchanged", rm, GC_SHAPE(2), (const float[]){m0, m1}, 1e-6);
    tn_release(y);

    /* 3-D x [N, C, L]: statistics over N and L. */
    tn_tensor *x3 = leaf(GC_SHAPE(2, 1, 2), (const float[]){1, 3, 5, 7}, false);
    y = tn_batch_norm(x3, NULL, NULL, NULL, NULL, true, 0.1f, 0);
    float r = 1.0f / sqrtf(5.0f);
    assert_values("batch_norm 3-D", y, GC_SHAPE(2, 1, 2), (const float[]){-3 * r, -r, r, 3 * r},
                  1e-5);
    tn_release(y);
    tn_release(x3);
    tn_release(w);
    tn_release(b);
    tn_release(rm);
    tn_release(rv);
    tn_release(x);
}

typedef struct bn_ctx {
    tn_tensor *running_mean, *running_var;
    bool training;
} bn_ctx;

static tn_tensor *bn_fn(tn_tensor *const *in, void *ctx)
{
    const bn_ctx *c = ctx;
    return tn_batch_norm(in[0], c->running_mean, c->running_var, in[1], in[2], c->training, 0.1f,
                         1e-5f);
}

/* batch_norm of x permuted from [N, H, W, C] to [N, C, H, W]: a non-contiguous input. */
static tn_tensor *bn_permuted_fn(tn_tensor *const *in, void *ctx)
{
    tn_tensor *xp = tn_permute(in[0], (const int[]){0, 3, 1, 2});
    if (!xp)
        return NULL;
    tn_tensor *y = bn_fn((tn_tensor *const[]){xp, in[1], in[2]}, ctx);
    tn_release(xp);
    return y;
}

static void test_batch_norm_grad(void **state)
{
    /* Training, 2-D, no running statistics. */
    bn_ctx c = {NULL, NULL, true};
    tn_tensor *in2[3] = {gc_rand(GC_SHAPE(4, 3), -2, 2, true),
                         gc_rand(GC_SHAPE(3), 0.5f, 1.5f, true), gc_rand(GC_SHAPE(3), -1, 1, true)};
    GC_CHECK("batch_norm train 2-D", bn_fn, &c, 3, in2);

    /* Training, 4-D, with running statistics (updated on every call, which does not change the
     * training output). */
    tn_tensor *rm = tn_zeros(GC_SHAPE(3), LP_CAT_PARAMETER);
    tn_tensor *rv = tn_full(GC_SHAPE(3), 1, LP_CAT_PARAMETER);
    c = (bn_ctx){rm, rv, true};
    tn_tensor *in4[3] = {gc_rand(GC_SHAPE(2, 3, 2, 2), -2, 2, true), in2[1], in2[2]};
    GC_CHECK("batch_norm train 4-D", bn_fn, &c, 3, in4);

    /* Without affine parameters. */
    tn_tensor *in_plain[3] = {in4[0], NULL, NULL};
    GC_CHECK("batch_norm train 4-D, no affine", bn_fn, &c, 1, in_plain);

    /* Non-contiguous x. */
    tn_tensor *in_nhwc[3] = {gc_rand(GC_SHAPE(2, 2, 2, 3), -2, 2, true), in2[1], in2[2]};
    GC_CHECK("batch_norm train permuted", bn_permuted_fn, &c, 3, in_nhwc);

    /* Eval, 4-D: running statistics are constants. */
    tn_tensor *erm = leaf(GC_SHAPE(3), (const float[]){0.2f, -0.5f, 1}, false);
    tn_tensor *erv = leaf(GC_SHAPE(3), (const float[]){0.5f, 2, 1.5f}, false);
    c = (bn_ctx){erm, erv, false};
    GC_CHECK("batch_norm eval 4-D", bn_fn, &c, 3, in4);
    GC_CHECK("batch_norm eval 2-D", bn_fn, &c, 3, in2);

    /* Eval dx is exactly g * w / sqrt(running_var + eps): check it with g = 1. */
    tn_zero_grad(in2[0]);
    tn_tensor *y = tn_batch_norm(in2[0], erm, erv, in2[1], NULL, false, 0.1f, 1e-5f);
    tn_tensor *loss = tn_sum(y, 0, NULL, false);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    float w[3], want[12], rvd[3];
    tn_copy_to(in2[1], w);
    tn_copy_to(erv, rvd);
    for (int i = 0; i < 12; i++)
        want[i] = w[i % 3] / sqrtf(rvd[i % 3] + 1e-5f);
    assert_values("batch_norm eval dx", tn_grad(in2[0]), GC_SHAPE(4, 3), want, 1e-5);
    tn_release(loss);
    tn_release(y);

    /* Eval saves the running statistics: updating them in place before backward is caught. */
    y = tn_batch_norm(in2[0], erm, erv, in2[1], in2[2], false, 0.1f, 1e-5f);
    loss = tn_sum(y, 0, NULL, false);
    tn_tensor *y2 = tn_batch_norm(in2[0], erm, erv, NULL, NULL, true, 0.1f, 1e-5f);
    assert_non_null(y2);
    assert_int_equal(tn_backward(loss, NULL, false), TN_EVERSION);
    tn_clear_error();
    tn_release(y2);
    tn_release(loss);
    tn_release(y);

    tn_release(erm);
    tn_release(erv);
    tn_release(rm);
    tn_release(rv);
    tn_release(in4[0]);
    tn_release(in_nhwc[0]);
    for (int i = 0; i < 3; i++)
        tn_release(in2[i]);
}

static void test_batch_norm_errors(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(4, 3), -1, 1, false);
    tn_tensor *x1 = gc_rand(GC_SHAPE(3), -1, 1, false);
    tn_tensor *one = gc_rand(GC_SHAPE(1, 3), -1, 1, false);
    tn_tensor *v3 = tn_zeros(GC_SHAPE(3), LP_CAT_PARAMETER);
    tn_tensor *v4 = tn_zeros(GC_SHAPE(4), LP_CAT_PARAMETER);
    tn_tensor *g3 = gc_rand(GC_SHAPE(3), -1, 1, true);
    assert_fails(tn_batch_norm(NULL, v3, v3, NULL, NULL, true, 0.1f, 1e-5f), TN_EINVAL,
                 "batch_norm", "x");
    assert_fails(tn_batch_norm(x1, v3, v3, NULL, NULL, true, 0.1f, 1e-5f), TN_ESHAPE, "batch_norm",
                 "[3]");
    assert_fails(tn_batch_norm(x, v4, v3, NULL, NULL, true, 0.1f, 1e-5f), TN_ESHAPE, "batch_norm",
                 "running_mean");
    assert_fails(tn_batch_norm(x, v3, v3, v4, NULL, true, 0.1f, 1e-5f), TN_ESHAPE, "batch_norm",
                 "weight");
    assert_fails(tn_batch_norm(x, v3, v3, NULL, v4, false, 0.1f, 1e-5f), TN_ESHAPE, "batch_norm",
                 "bias");
    assert_fails(tn_batch_norm(x, NULL, NULL, NULL, NULL, false, 0.1f, 1e-5f), TN_EINVAL,
                 "batch_norm", "running");
    assert_fails(tn_batch_norm(one, v3, v3, NULL, NULL, true, 0.1f, 1e-5f), TN_EINVAL, "batch_norm",
                 "[1,3]");
    assert_fails(tn_batch_norm(x, v3, v3, NULL, NULL, true, 1.5f, 1e-5f), TN_EINVAL, "batch_norm",
                 "momentum");
    assert_fails(tn_batch_norm(x, g3, v3, NULL, NULL, true, 0.1f, 1e-5f), TN_EGRAD, "batch_norm",
                 "running");
    /* A failed call leaves the running statistics alone. */
    float z[3];
    tn_copy_to(v3, z);
    assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);
    tn_release(x);
    tn_release(x1);
    tn_release(one);
    tn_release(v3);
    tn_release(v4);
    tn_release(g3);
}

/* ---- dropout -------------------------------------------------------------------------------- */

static void test_dropout_values(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(100, 100), 1, 2, true);
    /* Eval and p = 0: x itself. */
    tn_tensor *y = tn_dropout(x, 0.5f, false);
    assert_ptr_equal(y, x);
    tn_release(y);
    y = tn_dropout(x, 0, true);
    assert_ptr_equal(y, x);
    tn_release(y);

    const float p = 0.3f;
    y = tn_dropout(x, p, true);
    assert_non_null(y);
    assert_string_equal(tn_grad_fn_name(y), "dropout");
    const float *xd = tn_data_const(x), *yd = tn_data_const(y);
    int zeros = 0;
    for (int i = 0; i < 10000; i++) {
        if (yd[i] == 0) {
            zeros++;
            continue;
        }
        if (fabsf(yd[i] - xd[i] / (1 - p)) > 1e-5f)
            fail_msg("dropout[%d]: got %g, expected %g", i, yd[i], xd[i] / (1 - p));
    }
    if (fabs(zeros / 10000.0 - p) > 0.03)
        fail_msg("dropout zeroed %d of 10000 with p = %g", zeros, p);

    /* The gradient is the saved mask: 0 where dropped, 1/(1-p) elsewhere. */
    tn_tensor *loss = tn_sum(y, 0, NULL, false);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    const float *gd = tn_data_const(tn_grad(x));
    for (int i = 0; i < 10000; i++) {
        float want = yd[i] == 0 ? 0 : 1 / (1 - p);
        if (fabsf(gd[i] - want) > 1e-5f)
            fail_msg("dropout grad[%d]: got %g, expected %g", i, gd[i], want);
    }
    tn_release(loss);
    tn_release(y);

    /* The same seed gives the same mask; under no_grad nothing is recorded. */
    tn_manual_seed(7);
    tn_tensor *a = tn_dropout(x, 0.5f, true);
    tn_manual_seed(7);
    tn_grad_mode prev = tn_no_grad_begin();
    tn_tensor *b = tn_dropout(x, 0.5f, true);
    tn_grad_mode_end(prev);
    assert_null(tn_grad_fn_name(b));
    float *av = malloc(10000 * sizeof(float)), *bv = malloc(10000 * sizeof(float));
    assert_non_null(av);
    assert_non_null(bv);
    tn_copy_to(a, av);
    tn_copy_to(b, bv);
    assert_memory_equal(av, bv, 10000 * sizeof(float));
    free(av);
    free(bv);
    tn_release(a);
    tn_release(b);
    tn_release(x);
}

/* Reseeds before each call so every evaluation of the gradcheck draws the same mask. */
static tn_tensor *dropout_fn(tn_tensor *const *in, void *ctx)
{
    tn_manual_seed(99);
    tn_tensor *xt = tn_transpose(in[0], 0, 1);
    if (!xt)
        return NULL;
    tn_tensor *y = tn_dropout(xt, 0.4f, true);
    tn_release(xt);
    return y;
}

static void test_dropout_grad_and_errors(void **state)
{
    tn_tensor *in[1] = {gc_rand(GC_SHAPE(4, 5), -1, 1, true)};
    GC_CHECK("dropout (transposed x)", dropout_fn, NULL, 1, in);
    assert_fails(tn_dropout(in[0], 1.0f, true), TN_EINVAL, "dropout", "1");
    assert_fails(tn_dropout(in[0], -0.1f, false), TN_EINVAL, "dropout", "-0.1");
    assert_fails(tn_dropout(in[0], NAN, true), TN_EINVAL, "dropout", NULL);
    assert_fails(tn_dropout(NULL, 0.5f, true), TN_EINVAL, "dropout", "x");
    tn_release(in[0]);
}

/* ---- embedding ------------------------------------------------------------------------------ */

static const int64_t emb_ids[6] = {1, 3, 1, 4, 1, 0};

static tn_tensor *embedding_fn(tn_tensor *const *in, void *ctx)
{
    return tn_embedding(in[0], emb_ids, GC_SHAPE(2, 3));
}

static void test_embedding(void **state)
{
    float wd[15];
    for (int i = 0; i < 15; i++)
        wd[i] = (float)i;
    tn_tensor *w = leaf(GC_SHAPE(5, 3), wd, true);
    tn_tensor *y = tn_embedding(w, emb_ids, GC_SHAPE(2, 3));
    assert_values("embedding", y, GC_SHAPE(2, 3, 3),
                  (const float[]){3, 4, 5, 9, 10, 11, 3, 4, 5, 12, 13, 14, 3, 4, 5, 0, 1, 2}, 0);
    assert_string_equal(tn_grad_fn_name(y), "embedding");

    /* Repeated ids accumulate: with g = 1, row 1 (three times) gets 3, row 2 (never) 0. */
    tn_tensor *loss = tn_sum(y, 0, NULL, false);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    assert_values("embedding grad", tn_grad(w), GC_SHAPE(5, 3),
                  (const float[]){1, 1, 1, 3, 3, 3, 0, 0, 0, 1, 1, 1, 1, 1, 1}, 0);
    tn_release(loss);
    tn_release(y);

    /* A single id (0-d ids) gives [D]. */
    y = tn_embedding(w, (const int64_t[]){2}, 0, NULL);
    assert_values("embedding 0-d ids", y, GC_SHAPE(3), (const float[]){6, 7, 8}, 0);
    tn_release(y);

    tn_tensor *in[1] = {w};
    GC_CHECK("embedding", embedding_fn, NULL, 1, in);

    assert_fails(tn_embedding(w, (const int64_t[]){0, 1, 5}, GC_SHAPE(3)), TN_EINVAL, "embedding",
                 "id 5 at index 2");
    assert_fails(tn_embedding(w, (const int64_t[]){-1}, GC_SHAPE(1)), TN_EINVAL, "embedding",
                 "id -1 at index 0");
    assert_fails(tn_embedding(w, NULL, GC_SHAPE(2)), TN_EINVAL, "embedding", "ids");
    tn_tensor *w1 = gc_rand(GC_SHAPE(5), -1, 1, false);
    assert_fails(tn_embedding(w1, emb_ids, GC_SHAPE(2)), TN_ESHAPE, "embedding", "[5]");
    assert_fails(tn_embedding(NULL, emb_ids, GC_SHAPE(2)), TN_EINVAL, "embedding", "weight");
    tn_release(w1);
    tn_release(w);
}

/* ---- concat --------------------------------------------------------------------------------- */

static tn_tensor *concat_fn(tn_tensor *const *in, void *ctx)
{
    return tn_concat(in, 3, *(const int *)ctx);
}

/* concat(a, b^T, a) along dim 1: a non-contiguous input and a repeated one. */
static tn_tensor *concat_mixed_fn(tn_tensor *const *in, void *ctx)
{
    tn_tensor *bt = tn_transpose(in[1], 0, 1);
    if (!bt)
        return NULL;
    tn_tensor *y = tn_concat((tn_tensor *const[]){in[0], bt, in[0]}, 3, 1);
    tn_release(bt);
    return y;
}

static void test_concat(void **state)
{
    tn_tensor *a = leaf(GC_SHAPE(2, 1), (const float[]){1, 2}, false);
    tn_tensor *b = leaf(GC_SHAPE(2, 2), (const float[]){3, 4, 5, 6}, false);
    tn_tensor *y = tn_concat((tn_tensor *const[]){a, b, a}, 3, -1);
    assert_values("concat dim -1", y, GC_SHAPE(2, 4), (const float[]){1, 3, 4, 1, 2, 5, 6, 2}, 0);
    tn_release(y);
    tn_tensor *bt = tn_transpose(b, 0, 1);
    y = tn_concat((tn_tensor *const[]){b, bt}, 2, 0);
    assert_values("concat dim 0", y, GC_SHAPE(4, 2), (const float[]){3, 4, 5, 6, 3, 5, 4, 6}, 0);
    tn_release(y);

    int dim = 0;
    tn_tensor *in0[3] = {gc_rand(GC_SHAPE(1, 3), -1, 1, true), gc_rand(GC_SHAPE(2, 3), -1, 1, true),
                         gc_rand(GC_SHAPE(3, 3), -1, 1, true)};
    GC_CHECK("concat dim 0", concat_fn, &dim, 3, in0);
    dim = 1;
    tn_tensor *in1[3] = {gc_rand(GC_SHAPE(2, 1), -1, 1, true),
                         gc_rand(GC_SHAPE(2, 2), -1, 1, false),
                         gc_rand(GC_SHAPE(2, 3), -1, 1, true)};
    GC_CHECK("concat dim 1 (middle input without grad)", concat_fn, &dim, 3, in1);
    tn_tensor *in_mixed[2] = {gc_rand(GC_SHAPE(3, 2), -1, 1, true),
                              gc_rand(GC_SHAPE(4, 3), -1, 1, true)};
    GC_CHECK("concat transposed and repeated", concat_mixed_fn, NULL, 2, in_mixed);

    assert_fails(tn_concat((tn_tensor *const[]){a, b, in0[0]}, 3, 1), TN_ESHAPE, "concat",
                 "tensor 2 [1,3]");
    assert_fails(tn_concat((tn_tensor *const[]){a, b}, 2, 0), TN_ESHAPE, "concat", "[2,2]");
    assert_fails(tn_concat((tn_tensor *const[]){a, b}, 2, 2), TN_EINVAL, "concat", "dim 2");
    assert_fails(tn_concat((tn_tensor *const[]){a, NULL}, 2, 0), TN_EINVAL, "concat", "NULL");
    assert_fails(tn_concat((tn_tensor *const[]){a}, 0, 0), TN_EINVAL, "concat", "0");
    tn_tensor *a3 = gc_rand(GC_SHAPE(2, 1, 1), -1, 1, false);
    assert_fails(tn_concat((tn_tensor *const[]){a, a3}, 2, 1), TN_ESHAPE, "concat", "[2,1,1]");
    tn_release(a3);
    for (int i = 0; i < 3; i++) {
        tn_release(in0[i]);
        tn_release(in1[i]);
    }
    tn_release(in_mixed[0]);
    tn_release(in_mixed[1]);
    tn_release(bt);
    tn_release(a);
    tn_release(b);
}

/* ---- cross_entropy and mse_loss ------------------------------------------------------------- */

static const int64_t ce_targets[3] = {0, 3, 1};

static tn_tensor *cross_entropy_fn(tn_tensor *const *in, void *ctx)
{
    return tn_cross_entropy(in[0], ce_targets);
}

static tn_tensor *cross_entropy_t_fn(tn_tensor *const *in, void *ctx)
{
    tn_tensor *xt = tn_transpose(in[0], 0, 1);
    if (!xt)
        return NULL;
    tn_tensor *y = tn_cross_entropy(xt, ce_targets);
    tn_release(xt);
    return y;
}

static void test_cross_entropy(void **state)
{
    tn_tensor *u = tn_full(GC_SHAPE(3, 5), 0.7f, LP_CAT_INPUT);
    tn_tensor *y = tn_cross_entropy(u, (const int64_t[]){0, 4, 2});
    assert_values("cross_entropy uniform", y, 0, NULL, (const float[]){logf(5)}, 1e-6);
    tn_release(y);
    tn_release(u);

    /* -log softmax([1, 2, 3])[2] = log(1 + e^-1 + e^-2); large logits stay finite. */
    tn_tensor *x = leaf(GC_SHAPE(2, 3), (const float[]){1, 2, 3, 1000, 0, -1000}, false);
    y = tn_cross_entropy(x, (const int64_t[]){2, 0});
    assert_values("cross_entropy", y, 0, NULL, (const float[]){0.40760596f / 2}, 1e-6);
    tn_release(y);

    tn_tensor *in[1] = {gc_rand(GC_SHAPE(3, 4), -2, 2, true)};
    GC_CHECK("cross_entropy", cross_entropy_fn, NULL, 1, in);
    tn_tensor *in_t[1] = {gc_rand(GC_SHAPE(4, 3), -2, 2, true)};
    GC_CHECK("cross_entropy transposed", cross_entropy_t_fn, NULL, 1, in_t);

    assert_fails(tn_cross_entropy(in[0], (const int64_t[]){0, 4, 1}), TN_EINVAL, "cross_entropy",
                 "target 4 at index 1");
    assert_fails(tn_cross_entropy(in[0], (const int64_t[]){0, 1, -2}), TN_EINVAL, "cross_entropy",
                 "target -2 at index 2");
    assert_fails(tn_cross_entropy(in[0], NULL), TN_EINVAL, "cross_entropy", "targets");
    tn_tensor *x1 = gc_rand(GC_SHAPE(4), -1, 1, false);
    assert_fails(tn_cross_entropy(x1, ce_targets), TN_ESHAPE, "cross_entropy", "[4]");
    assert_fails(tn_cross_entropy(NULL, ce_targets), TN_EINVAL, "cross_entropy", "logits");
    tn_release(x1);
    tn_release(in[0]);
    tn_release(in_t[0]);
    tn_release(x);
}

static tn_tensor *mse_fn(tn_tensor *const *in, void *ctx)
{
    return tn_mse_loss(in[0], in[1]);
}

static void test_mse_loss(void **state)
{
    tn_tensor *a = leaf(GC_SHAPE(3), (const float[]){1, 2, 3}, false);
    tn_tensor *b = leaf(GC_SHAPE(3), (const float[]){1, 1, 1}, false);
    tn_tensor *y = tn_mse_loss(a, b);
    assert_values("mse_loss", y, 0, NULL, (const float[]){5.0f / 3}, 1e-6);
    tn_release(y);

    tn_tensor *in[2] = {gc_rand(GC_SHAPE(2, 3), -1, 1, true), gc_rand(GC_SHAPE(2, 3), -1, 1, true)};
    GC_CHECK("mse_loss", mse_fn, NULL, 2, in);
    tn_tensor *c = gc_rand(GC_SHAPE(3, 2), -1, 1, false);
    tn_tensor *ct = tn_transpose(c, 0, 1);
    tn_tensor *in2[2] = {in[0], ct};
    GC_CHECK("mse_loss transposed target", mse_fn, NULL, 2, in2);

    assert_fails(tn_mse_loss(in[0], c), TN_ESHAPE, "mse_loss", "[3,2]");
    assert_fails(tn_mse_loss(a, NULL), TN_EINVAL, "mse_loss", "target");
    tn_release(ct);
    tn_release(c);
    tn_release(in[0]);
    tn_release(in[1]);
    tn_release(a);
    tn_release(b);
}

/* ---- scaled dot-product attention ----------------------------------------------------------- */

static void test_attention_values(void **state)
{
    /* q [1, 2], k [2, 2], v [2, 2]: scores q k^T / sqrt(2). */
    tn_tensor *q = leaf(GC_SHAPE(2, 2), (const float[]){1, 0, 0, 2}, false);
    tn_tensor *k = leaf(GC_SHAPE(2, 2), (const float[]){1, 0, 0, 1}, false);
    tn_tensor *v = leaf(GC_SHAPE(2, 2), (const float[]){1, 2, 3, 4}, false);
    float s = 1 / sqrtf(2);
    /* Row 0: scores (s, 0); row 1: scores (0, 2s). */
    float p0 = expf(s) / (expf(s) + 1), p1 = 1 / (1 + expf(2 * s));
    tn_tensor *y = tn_scaled_dot_product_attention(q, k, v, false);
    assert_values("attention", y, GC_SHAPE(2, 2),
                  (const float[]){p0 * 1 + (1 - p0) * 3, p0 * 2 + (1 - p0) * 4,
                                  p1 * 1 + (1 - p1) * 3, p1 * 2 + (1 - p1) * 4},
                  1e-5);
    tn_release(y);
    /* Causal: row 0 sees only position 0. */
    y = tn_scaled_dot_product_attention(q, k, v, true);
    assert_values("attention causal", y, GC_SHAPE(2, 2),
                  (const float[]){1, 2, p1 * 1 + (1 - p1) * 3, p1 * 2 + (1 - p1) * 4}, 1e-5);
    tn_release(y);
    tn_release(q);
    tn_release(k);
    tn_release(v);
}

static tn_tensor *attention_fn(tn_tensor *const *in, void *ctx)
{
    return tn_scaled_dot_product_attention(in[0], in[1], in[2], *(const bool *)ctx);
}

static void test_attention_grad_and_errors(void **state)
{
    bool causal = false;
    tn_tensor *in[3] = {gc_rand(GC_SHAPE(2, 3, 4), -1, 1, true),
                        gc_rand(GC_SHAPE(2, 5, 4), -1, 1, true),
                        gc_rand(GC_SHAPE(2, 5, 2), -1, 1, true)};
    GC_CHECK("attention", attention_fn, &causal, 3, in);
    causal = true;
    GC_CHECK("attention causal (Tq < Tk)", attention_fn, &causal, 3, in);
    tn_tensor *sq[3] = {gc_rand(GC_SHAPE(2, 1, 4, 3), -1, 1, true),
                        gc_rand(GC_SHAPE(2, 4, 3), -1, 1, true),
                        gc_rand(GC_SHAPE(4, 2), -1, 1, true)};
    GC_CHECK("attention causal, broadcast batch", attention_fn, &causal, 3, sq);

    tn_tensor *y = tn_scaled_dot_product_attention(in[0], in[1], in[2], true);
    assert_non_null(y);
    assert_string_equal(tn_grad_fn_name(y), "matmul");
    tn_release(y);

    assert_fails(tn_scaled_dot_product_attention(in[0], sq[1], in[2], false), TN_ESHAPE,
                 "scaled_dot_product_attention", "[2,4,3]");
    assert_fails(tn_scaled_dot_product_attention(in[0], in[1], sq[2], false), TN_ESHAPE,
                 "scaled_dot_product_attention", "[4,2]");
    tn_tensor *q1 = gc_rand(GC_SHAPE(4), -1, 1, false);
    assert_fails(tn_scaled_dot_product_attention(q1, in[1], in[2], false), TN_ESHAPE,
                 "scaled_dot_product_attention", "[4]");
    tn_tensor *q3 = gc_rand(GC_SHAPE(3, 3, 4), -1, 1, false);
    assert_fails(tn_scaled_dot_product_attention(q3, in[1], in[2], false), TN_ESHAPE,
                 "scaled_dot_product_attention", NULL);
    assert_fails(tn_scaled_dot_product_attention(in[0], NULL, in[2], false), TN_EINVAL,
                 "scaled_dot_product_attention", "k");
    tn_release(q1);
    tn_release(q3);
    for (int i = 0; i < 3; i++) {
        tn_release(in[i]);
        tn_release(sq[i]);
    }
}

/* ---- what is saved for backward ------------------------------------------------------------- */

/* Live bytes of `category` on the host. */
static int64_t live_bytes(lp_category category)
{
    lp_counters c;
    assert_int_equal(lp_counters_get(LP_DEVICE_HOST, &c), 0);
    return c.live[category];
}

/* An ACTIVATION [ndim, shape] made by an op that saves nothing (x + 0 on a leaf needing grad). */
static tn_tensor *activation(int ndim, const int64_t *shape, tn_tensor **leaf_out)
{
    *leaf_out = gc_rand(ndim, shape, -1, 1, true);
    tn_tensor *x = tn_add_scalar(*leaf_out, 0);
    assert_non_null(x);
    return x;
}

/* Runs op, asserting it turns exactly `saved` more bytes SAVED, leaves no TEMPORARY behind, and
 * that releasing its output (and graph) gives them back. */
#define ASSERT_SAVES(saved, call)                                                                  \
    do {                                                                                           \
        int64_t s0_ = live_bytes(LP_CAT_SAVED), t0_ = live_bytes(LP_CAT_TEMPORARY);                \
        tn_tensor *y_ = (call);                                                                    \
        assert_non_null(y_);                                                                       \
        assert_int_equal(live_bytes(LP_CAT_SAVED) - s0_, (saved));                                 \
        assert_int_equal(live_bytes(LP_CAT_TEMPORARY), t0_);                                       \
        tn_release(y_);                                                                            \
        assert_int_equal(live_bytes(LP_CAT_SAVED), s0_);                                           \
    } while (0)

static void test_saved_bytes(void **state)
{
    tn_tensor *l1, *l2;
    tn_tensor *x = activation(GC_SHAPE(4, 8), &l1); /* 128 bytes */
    tn_tensor *w = gc_rand(GC_SHAPE(8), 0.5f, 1.5f, true), *b = gc_rand(GC_SHAPE(8), -1, 1, true);
    /* layer_norm: x, and mean and rstd [4, 1]. */
    ASSERT_SAVES(128 + 16 + 16, tn_layer_norm(x, w, b, 1e-5f));
    /* Transposed x: the view is saved (its storage), the contiguous copy is scratch. */
    tn_tensor *xt = tn_transpose(x, 0, 1);
    ASSERT_SAVES(128 + 32 + 32, tn_layer_norm(xt, NULL, NULL, 1e-5f));
    tn_release(xt);

    /* batch_norm on x as [4, 8]: x and the batch mean and rstd [8] in training; x alone in eval
     * (the running statistics are saved too, but they are not activations). */
    tn_tensor *rm = tn_zeros(GC_SHAPE(8), LP_CAT_PARAMETER);
    tn_tensor *rv = tn_full(GC_SHAPE(8), 1, LP_CAT_PARAMETER);
    ASSERT_SAVES(128 + 32 + 32, tn_batch_norm(x, rm, rv, w, b, true, 0.1f, 1e-5f));
    ASSERT_SAVES(128, tn_batch_norm(x, rm, rv, w, b, false, 0.1f, 1e-5f));

    /* dropout: the mask only. */
    ASSERT_SAVES(128, tn_dropout(x, 0.5f, true));
    /* concat and embedding: nothing (embedding keeps its ids as AUTOGRAD metadata). */
    ASSERT_SAVES(0, tn_concat((tn_tensor *const[]){x, x}, 2, 0));
    tn_tensor *table = gc_rand(GC_SHAPE(5, 2), -1, 1, true);
    int64_t a0 = live_bytes(LP_CAT_AUTOGRAD);
    tn_tensor *e = tn_embedding(table, (const int64_t[]){1, 2, 3}, GC_SHAPE(3, 1));
    assert_non_null(e);
    assert_true(live_bytes(LP_CAT_AUTOGRAD) - a0 >= 3 * (int64_t)sizeof(int64_t));
    tn_release(e);
    ASSERT_SAVES(0, tn_embedding(table, (const int64_t[]){1, 2, 3}, GC_SHAPE(3, 1)));
    tn_release(table);

    /* cross_entropy: its log-softmax [4, 8], not the logits. mse_loss: both operands. */
    ASSERT_SAVES(128, tn_cross_entropy(x, (const int64_t[]){0, 7, 3, 3}));
    tn_tensor *x2 = activation(GC_SHAPE(4, 8), &l2);
    ASSERT_SAVES(256, tn_mse_loss(x, x2));

    /* Under no_grad nothing is saved or recorded. */
    tn_grad_mode prev = tn_no_grad_begin();
    ASSERT_SAVES(0, tn_layer_norm(x, w, b, 1e-5f));
    ASSERT_SAVES(0, tn_batch_norm(x, rm, rv, w, b, true, 0.1f, 1e-5f));
    ASSERT_SAVES(0, tn_dropout(x, 0.5f, true));
    ASSERT_SAVES(0, tn_cross_entropy(x, (const int64_t[]){0, 7, 3, 3}));
    ASSERT_SAVES(0, tn_mse_loss(x, x2));
    tn_tensor *y = tn_layer_norm(x, w, b, 1e-5f);
    assert_null(tn_grad_fn_name(y));
    tn_release(y);
    tn_grad_mode_end(prev);

    tn_release(x2);
    tn_release(l2);
    tn_release(rm);
    tn_release(rv);
    tn_release(w);
    tn_release(b);
    tn_release(x);
    tn_release(l1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_layer_norm_values, setup),
        cmocka_unit_test_setup(test_layer_norm_grad, setup),
        cmocka_unit_test_setup(test_layer_norm_errors, setup),
        cmocka_unit_test_setup(test_batch_norm_training_values, setup),
        cmocka_unit_test_setup(test_batch_norm_grad, setup),
        cmocka_unit_test_setup(test_batch_norm_errors, setup),
        cmocka_unit_test_setup(test_dropout_values, setup),
        cmocka_unit_test_setup(test_dropout_grad_and_errors, setup),
        cmocka_unit_test_setup(test_embedding, setup),
        cmocka_unit_test_setup(test_concat, setup),
        cmocka_unit_test_setup(test_cross_entropy, setup),
        cmocka_unit_test_setup(test_mse_loss, setup),
        cmocka_unit_test_setup(test_attention_values, setup),
        cmocka_unit_test_setup(test_attention_grad_and_errors, setup),
        cmocka_unit_test_setup(test_saved_bytes, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
