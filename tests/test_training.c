/*
 * Training: an MLP learns a regression task with SGD (momentum) and with Adam; optimizer state
 * appears as OPTIMIZER_STATE with the expected size; graph memory returns to where it started;
 * single updates match torch.optim's formulas computed by hand; gradients through attention
 * modules pass finite-difference checks.
 */
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------------------- */

static void assert_error(int code, const char *needle)
{
    assert_int_equal(tn_last_error(), code);
    if (!strstr(tn_last_error_message(), needle))
        fail_msg("error message '%s' does not name '%s'", tn_last_error_message(), needle);
}

static lp_counters counters(void)
{
    lp_counters c;
    assert_int_equal(lp_counters_get(LP_DEVICE_HOST, &c), 0);
    return c;
}

/* 2 -> 32 -> 32 -> 1 with ReLU. */
static tn_module *mlp_new(void)
{
    tn_module *m = tn_sequential_new();
    assert_non_null(m);
    assert_int_equal(tn_sequential_append(m, tn_linear_new(2, 32, true)), 0);
    assert_int_equal(tn_sequential_append(m, tn_relu_new()), 0);
    assert_int_equal(tn_sequential_append(m, tn_linear_new(32, 32, true)), 0);
    assert_int_equal(tn_sequential_append(m, tn_relu_new()), 0);
    assert_int_equal(tn_sequential_append(m, tn_linear_new(32, 1, true)), 0);
    return m;
}

/* N points x in [-2, 2]^2 and y = sin(1.5 x0) + 0.5 x0 x1, as [N, 2] and [N, 1] inputs. */
static void make_data(int64_t n, tn_tensor **x, tn_tensor **y)
{
    *x = tn_rand_uniform(GC_SHAPE(n, 2), -2.0f, 2.0f, LP_CAT_INPUT);
    assert_non_null(*x);
    float *xs = tn_data(*x);
    float *ys = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ys[i] = sinf(1.5f * xs[2 * i]) + 0.5f * xs[2 * i] * xs[2 * i + 1];
    *y = tn_from_data(GC_SHAPE(n, 1), ys, LP_CAT_INPUT);
    assert_non_null(*y);
    free(ys);
}

/* Trains `steps` full-batch steps; returns the first and last loss. Checks after the first step
 * that OPTIMIZER_STATE grew by exactly state_factor times the parameter bytes. */
static void train(tn_module *m, tn_optimizer *opt, tn_tensor *x, tn_tensor *y, int steps,
                  int state_factor, float *first, float *last)
{
    int64_t state_before = counters().live[LP_CAT_OPTIMIZER_STATE];
    for (int s = 0; s < steps; s++) {
        tn_optimizer_zero_grad(opt);
        tn_tensor *out = tn_module_forward(m, x);
        assert_non_null(out);
        tn_tensor *loss = tn_mse_loss(out, y);
        assert_non_null(loss);
        float l = tn_item(loss);
        assert_true(isfinite(l));
        if (s == 0)
            *first = l;
        *last = l;
        assert_int_equal(tn_backward(loss, NULL, false), 0);
        tn_release(loss);
        tn_release(out);
        assert_int_equal(tn_optimizer_step(opt), 0);
        if (s == 0) {
            int64_t grown = counters().live[LP_CAT_OPTIMIZER_STATE] - state_before;
            assert_int_equal(grown, state_factor * (int64_t)tn_module_param_bytes(m));
        }
    }
}

static void check_learns(bool adam)
{
    tn_manual_seed(1234);
    tn_module *m = mlp_new();
    tn_tensor *x, *y;
    make_data(128, &x, &y);
    lp_counters start = counters();
    tn_optimizer *opt =
        adam ? tn_adam_new(m, 0.01f, 0.9f, 0.999f, 1e-8f) : tn_sgd_new(m, 0.02f, 0.9f, 0.0f);
    assert_non_null(opt);
    assert_int_equal(counters().live[LP_CAT_OPTIMIZER_STATE], start.live[LP_CAT_OPTIMIZER_STATE]);

    float first = 0, last = 0;
    train(m, opt, x, y, 300, adam ? 2 : 1, &first, &last);
    printf("# %s: loss %.5f -> %.5f\n", adam ? "adam" : "sgd", (double)first, (double)last);
    assert_true(last * 10.0f < first);

    /* With the graph released and grads gone, graph memory is back where it started. */
    tn_optimizer_zero_grad(opt);
    lp_counters end = counters();
    static const lp_category graph[] = {LP_CAT_ACTIVATION, LP_CAT_SAVED, LP_CAT_AUTOGRAD,
                                        LP_CAT_TEMPORARY, LP_CAT_GRADIENT};
    for (size_t i = 0; i < sizeof(graph) / sizeof(graph[0]); i++)
        if (end.live[graph[i]] != start.live[graph[i]])
            fail_msg("%s: %lld live bytes at the end, %lld at the start",
                     lp_category_name(graph[i]), (long long)end.live[graph[i]],
                     (long long)start.live[graph[i]]);
    assert_int_equal(end.live[LP_CAT_OPTIMIZER_STATE] - start.live[LP_CAT_OPTIMIZER_STATE],
                     (adam ? 2 : 1) * (int64_t)tn_module_param_bytes(m));
    tn_optimizer_free(opt);
    assert_int_equal(counters().live[LP_CAT_OPTIMIZER_STATE], start.live[LP_CAT_OPTIMIZER_STATE]);
    tn_release(x);
    tn_release(y);
    tn_module_free(m);
}

static void test_sgd_learns(void **state)
{
    (void)state;
    check_learns(false);
}

static void test_adam_learns(void **state)
{
    (void)state;
    check_learns(true);
}

/* ---- single steps against the formulas ------------------------------------------------------ */

/* Linear(2, 1) with w = [0.5, -0.25], b = 0.1; x = [1, 2], target 1.
 * out = 0.5 - 0.5 + 0.1 = 0.1, loss = 0.81, dL/dout = 2 (out - 1) = -1.8,
 * dL/dw = -1.8 [1, 2] = [-1.8, -3.6], dL/db = -1.8. */
static tn_module *tiny_new(void)
{
    tn_module *lin = tn_linear_new(2, 1, true);
    assert_non_null(lin);
    float *w = tn_data(tn_module_param_by_name(lin, "weight"));
    float *b = tn_data(tn_module_param_by_name(lin, "bias"));
    w[0] = 0.5f;
    w[1] = -0.25f;
    b[0] = 0.1f;
    return lin;
}

/* One forward/backward of the tiny problem; returns the output value. */
static float tiny_backward(tn_module *lin)
{
    tn_tensor *x = tn_from_data(GC_SHAPE(1, 2), (const float[]){1.0f, 2.0f}, LP_CAT_INPUT);
    tn_tensor *t = tn_from_data(GC_SHAPE(1, 1), (const float[]){1.0f}, LP_CAT_INPUT);
    tn_tensor *out = tn_module_forward(lin, x);
    assert_non_null(out);
    float o = tn_item(out);
    tn_tensor *loss = tn_mse_loss(out, t);
    assert_non_null(loss);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    tn_release(loss);
    tn_release(out);
    tn_release(t);
    tn_release(x);
    return o;
}

static void read_params(tn_module *lin, double p[3])
{
    const float *w = tn_data_const(tn_module_param_by_name(lin, "weight"));
    const float *b = tn_data_const(tn_module_param_by_name(lin, "bias"));
    p[0] = w[0];
    p[1] = w[1];
    p[2] = b[0];
}

static void assert_params(tn_module *lin, const double want[3], double tol)
{
    double got[3];
    read_params(lin, got);
    for (int i = 0; i < 3; i++)
        if (fabs(got[i] - want[i]) > tol)
            fail_msg("param %d: got %.8f, expected %.8f", i, got[i], want[i]);
}

static void test_sgd_step_by_hand(void **state)
{
    (void)state;
    tn_module *lin = tiny_new();
    const double lr = 0.1, mom = 0.9, wd = 0.01;
    tn_optimizer *opt = tn_sgd_new(lin, (float)lr, (float)mom, (float)wd);
    assert_non_null(opt);
    tn_tensor *w = tn_module_param_by_name(lin, "weight");
    uint64_t v0 = tn_version(w);

    assert_true(fabsf(tiny_backward(lin) - 0.1f) < 1e-6f);
    assert_int_equal(tn_optimizer_step(opt), 0);
    assert_true(tn_version(w) > v0);
    /* d = g + wd p = [-1.8 + 0.005, -3.6 - 0.0025, -1.8 + 0.001]; buf = d; p -= lr buf. */
    const double step1[3] = {0.5 + 0.1 * 1.795, -0.25 + 0.1 * 3.6025, 0.1 + 0.1 * 1.799};
    assert_params(lin, step1, 1e-6);
    const double buf1[3] = {-1.795, -3.6025, -1.799};

    /* Second step: buf = mom buf + (g + wd p), computed here from the new parameters. */
    tn_optimizer_zero_grad(opt);
    assert_null(tn_grad(w));
    float out2 = tiny_backward(lin);
    double p[3];
    read_params(lin, p);
    double gout = 2.0 * (out2 - 1.0);
    const double g2[3] = {gout * 1.0, gout * 2.0, gout};
    double want[3];
    for (int i = 0; i < 3; i++)
        want[i] = p[i] - lr * (mom * buf1[i] + g2[i] + wd * p[i]);
    assert_int_equal(tn_optimizer_step(opt), 0);
    assert_params(lin, want, 1e-5);

    /* Parameters without a grad are skipped. */
    tn_optimizer_zero_grad(opt);
    read_params(lin, p);
    assert_int_equal(tn_optimizer_step(opt), 0);
    assert_params(lin, p, 0);
    tn_optimizer_free(opt);

    /* Plain SGD (no momentum) keeps no state. */
    int64_t before = counters().live[LP_CAT_OPTIMIZER_STATE];
    opt = tn_sgd_new(lin, 0.5f, 0.0f, 0.0f);
    read_params(lin, p);
    float o = tiny_backward(lin);
    assert_int_equal(tn_optimizer_step(opt), 0);
    gout = 2.0 * (o - 1.0);
    const double want_plain[3] = {p[0] - 0.5 * gout, p[1] - 0.5 * 2 * gout, p[2] - 0.5 * gout};
    assert_params(lin, want_plain, 1e-5);
    assert_int_equal(counters().live[LP_CAT_OPTIMIZER_STATE], before);
    tn_optimizer_free(opt);
    tn_module_zero_grad(lin);
    tn_module_free(lin);
}

static void test_adam_step_by_hand(void **state)
{
    (void)state;
    tn_module *lin = tiny_new();
    const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
    tn_optimizer *opt = tn_adam_new(lin, (float)lr, (float)b1, (float)b2, (float)eps);
    assert_non_null(opt);
    tiny_backward(lin);
    assert_int_equal(tn_optimizer_step(opt), 0);
    /* Step 1: m_hat = g, v_hat = g^2, so p -= lr g / (|g| + eps) = p + lr (all grads < 0). */
    const double g1[3] = {-1.8, -3.6, -1.8};
    const double step1[3] = {0.5 + lr, -0.25 + lr, 0.1 + lr};
    assert_params(lin, step1, 1e-6);

    tn_optimizer_zero_grad(opt);
    float out2 = tiny_backward(lin);
    double p[3], want[3];
    read_params(lin, p);
    double gout = 2.0 * (out2 - 1.0);
    const double g2[3] = {gout, 2.0 * gout, gout};
    for (int i = 0; i < 3; i++) {
        double m = b1 * (1 - b1) * g1[i] + (1 - b1) * g2[i];
        double v = b2 * (1 - b2) * g1[i] * g1[i] + (1 - b2) * g2[i] * g2[i];
        double mhat = m / (1 - b1 * b1), vhat_sqrt = sqrt(v) / sqrt(1 - b2 * b2);
        want[i] = p[i] - lr * mhat / (vhat_sqrt + eps);
    }
    assert_int_equal(tn_optimizer_step(opt), 0);
    assert_params(lin, want, 1e-5);
    tn_optimizer_free(opt);
    tn_module_zero_grad(lin);
    tn_module_free(lin);
}

/* Buffers (batch-norm running statistics) get no optimizer state; frozen parameters no update. */
static void test_buffers_and_frozen(void **state)
{
    (void)state;
    tn_module *seq = tn_sequential_new();
    assert_int_equal(tn_sequential_append(seq, tn_conv2d_new(1, 2, 3, 1, 1, true)), 0);
    assert_int_equal(tn_sequential_append(seq, tn_batch_norm2d_new(2)), 0);
    tn_tensor *conv_w = tn_module_param_by_name(seq, "0.weight");
    tn_set_requires_grad(conv_w, false);
    float before[18];
    tn_copy_to(conv_w, before);

    int64_t state0 = counters().live[LP_CAT_OPTIMIZER_STATE];
    tn_optimizer *opt = tn_sgd_new(seq, 0.1f, 0.9f, 0.0f);
    tn_tensor *x = gc_rand(GC_SHAPE(2, 1, 4, 4), -1.0f, 1.0f, false);
    tn_tensor *out = tn_module_forward(seq, x);
    tn_tensor *w = gc_rand(GC_SHAPE(2, 2, 4, 4), -1.0f, 1.0f, false);
    tn_tensor *prod = tn_mul(out, w);
    tn_tensor *loss = tn_sum(prod, 0, NULL, false);
    assert_non_null(loss);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    assert_int_equal(tn_optimizer_step(opt), 0);
    /* State for conv bias [2], bn weight [2], bn bias [2]; none for conv weight or buffers. */
    assert_int_equal(counters().live[LP_CAT_OPTIMIZER_STATE] - state0, 6 * sizeof(float));
    float after[18];
    tn_copy_to(conv_w, after);
    assert_memory_equal(before, after, sizeof(before));

    tn_release(loss);
    tn_release(prod);
    tn_release(w);
    tn_release(out);
    tn_release(x);
    tn_optimizer_free(opt);
    tn_module_zero_grad(seq);
    tn_module_free(seq);
}

static void test_optimizer_errors(void **state)
{
    (void)state;
    assert_null(tn_sgd_new(NULL, 0.1f, 0.0f, 0.0f));
    assert_error(TN_EINVAL, "sgd");
    tn_module *lin = tn_linear_new(2, 2, true);
    assert_null(tn_sgd_new(lin, -0.1f, 0.0f, 0.0f));
    assert_error(TN_EINVAL, "sgd");
    assert_null(tn_adam_new(lin, 0.1f, 1.0f, 0.999f, 1e-8f));
    assert_error(TN_EINVAL, "adam");
    assert_null(tn_adam_new(lin, NAN, 0.9f, 0.999f, 1e-8f));
    assert_error(TN_EINVAL, "adam");
    assert_int_equal(tn_optimizer_step(NULL), TN_EINVAL);
    assert_error(TN_EINVAL, "optimizer_step");
    tn_optimizer_free(NULL);
    tn_optimizer_zero_grad(NULL);
    tn_module_free(lin);
}

/* ---- gradients through attention ------------------------------------------------------------ */

static tn_tensor *run_module(tn_tensor *const *inputs, void *ctx)
{
    return tn_module_forward(ctx, inputs[0]);
}

static void test_attention_gradcheck(void **state)
{
    (void)state;
    tn_manual_seed(99);
    tn_module *mha = tn_multihead_attention_new(4, 2);
    tn_module *layer = tn_transformer_encoder_layer_new(4, 2, 6, 0.1f, true);
    assert_non_null(mha);
    assert_non_null(layer);
    tn_module_train(layer, false); /* no dropout: deterministic */

    /* Input and every parameter (the module reads its own parameters, passed here so that
     * gc_check perturbs them and compares their .grad). */
    tn_tensor *inputs[16];
    inputs[0] = gc_rand(GC_SHAPE(2, 3, 4), -1.0f, 1.0f, true);
    int n = 1;
    for (int i = 0; i < tn_module_param_count(mha); i++)
        inputs[n++] = tn_module_param(mha, i, NULL);
    GC_CHECK("multihead_attention", run_module, mha, n, inputs);

    n = 1;
    for (int i = 0; i < tn_module_param_count(layer) && n < 16; i++)
        inputs[n++] = tn_module_param(layer, i, NULL);
    GC_CHECK("transformer_encoder_layer", run_module, layer, n, inputs);

    tn_module_zero_grad(mha);
    tn_module_zero_grad(layer);
    tn_release(inputs[0]);
    tn_module_free(layer);
    tn_module_free(mha);
}

int main(void)
{
    // clang-format off
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_learns),
        cmocka_unit_test(test_adam_learns),
        cmocka_unit_test(test_sgd_step_by_hand),
        cmocka_unit_test(test_adam_step_by_hand),
        cmocka_unit_test(test_buffers_and_frozen),
        cmocka_unit_test(test_optimizer_errors),
        cmocka_unit_test(test_attention_gradcheck),
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
