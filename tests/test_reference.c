/*
 * Reference tests against PyTorch (as llm.c's test_gpt2.c): outputs and gradients of libtensor's
 * ops and modules compared with values that tests/fixtures/gen_reference.py dumped from PyTorch
 * 1.13 into small safetensors files.
 *
 * Every case computes y = f(inputs), runs backward with gradient w (that is, of sum(y * w)) and
 * compares y and the gradient of every input (and parameter) with the fixture. The references
 * were computed in float64 from the same float32 inputs and rounded to float32, so the only error
 * is libtensor's own float32 rounding, and one tolerance fits every case:
 * |got - want| <= 1e-5 + 1e-4 |want|. (Measured: the largest error is 2e-6, conv2d's weight
 * gradient of magnitude 13, a sum of 50 products; the transformer layer's is 1e-6. No case needs a
 * looser bound, since the shapes are small and nothing sums more than ~50 terms.)
 *
 * Model weights are loaded with tn_module_load_safetensors (strictly: every parameter, no extra);
 * inputs and expected values through tn__safetensors_read, the same reader.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradprof/tensor.h"
#include "safetensors_internal.h"

#define ATOL 1e-5
#define RTOL 1e-4

static tn__tensor_list *g_ops, *g_mlp, *g_transformer;

static void fixture_path(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", GRADPROF_FIXTURES_DIR, name);
}

static tn__tensor_list *read_fixture(const char *name)
{
    char path[1024];
    fixture_path(path, sizeof path, name);
    tn__tensor_list *list = NULL;
    if (tn__safetensors_read(path, LP_CAT_INPUT, &list) != 0) {
        fprintf(stderr, "cannot read fixture %s: %s\n", path, tn_last_error_message());
        return NULL;
    }
    return list;
}

/* A fixture tensor (borrowed); fails the test if it is missing. */
static tn_tensor *fx(const tn__tensor_list *list, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static tn_tensor *fx(const tn__tensor_list *list, const char *fmt, ...)
{
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    tn_tensor *t = tn__tensor_list_get(list, name);
    if (!t)
        fail_msg("fixture tensor '%s' is missing (regenerate with gen_reference.py)", name);
    return t;
}

/* A new contiguous leaf holding t's values (category INPUT), optionally requiring grad. */
static tn_tensor *leaf_copy(const tn_tensor *t, bool requires_grad)
{
    int64_t n = tn_numel(t);
    float *buf = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(buf);
    tn_copy_to(t, buf);
    tn_tensor *c = tn_from_data(tn_ndim(t), tn_shape(t), buf, LP_CAT_INPUT);
    free(buf);
    assert_non_null(c);
    if (requires_grad)
        assert_int_equal(tn_set_requires_grad(c, true), 0);
    return c;
}

/* Compares got with want elementwise (|got - want| <= atol + rtol |want|). Prints every mismatch
 * summary and returns false on failure, so that a test reports all its mismatching tensors. */
static bool check_close(const char *what, const tn_tensor *got, const tn_tensor *want, double atol,
                        double rtol)
{
    char gs[96], ws[96];
    if (!got) {
        print_error("MISMATCH %s: no tensor (expected %s)\n", what,
                    tn_shape_str(want, ws, sizeof ws));
        return false;
    }
    tn_shape_str(got, gs, sizeof gs);
    tn_shape_str(want, ws, sizeof ws);
    if (strcmp(gs, ws) != 0) {
        print_error("MISMATCH %s: shape %s, expected %s\n", what, gs, ws);
        return false;
    }
    int64_t n = tn_numel(want);
    float *g = malloc((size_t)(n ? n : 1) * sizeof(float));
    float *w = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert_non_null(g);
    assert_non_null(w);
    tn_copy_to(got, g);
    tn_copy_to(want, w);
    int64_t bad = 0, worst = -1;
    double worst_excess = 0, max_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - (double)w[i]);
        double tol = atol + rtol * fabs((double)w[i]);
        if (err > max_abs || isnan(err))
            max_abs = isnan(err) ? INFINITY : err;
        if (!(err <= tol)) {
            bad++;
            if (worst < 0 || err / tol > worst_excess || isnan(err)) {
                worst = i;
                worst_excess = isnan(err) ? INFINITY : err / tol;
            }
        }
    }
    if (bad > 0)
        print_error("MISMATCH %s %s: %lld of %lld elements off; worst [%lld] got %.8g want %.8g "
                    "(max abs err %.3g, atol %g rtol %g)\n",
                    what, ws, (long long)bad, (long long)n, (long long)worst, g[worst], w[worst],
                    max_abs, atol, rtol);
    free(g);
    free(w);
    return bad == 0;
}

/* ---- ops ------------------------------------------------------------------------------------ */

typedef tn_tensor *(*op_fn)(tn_tensor *const *in, void *ctx);

/* Runs fixture case `name` of ops.safetensors: inputs name.<input[i]> (leaves requiring grad when
 * the fixture has name.grad.<input[i]>), y = fn(inputs), backward with name.w; compares name.y
 * and every name.grad.<input>. */
static void run_op_case(const char *name, int n, const char *const *input_names, op_fn fn,
                        void *ctx, double atol, double rtol)
{
    assert_non_null(g_ops);
    tn_tensor *in[8] = {0};
    bool needs_grad[8] = {0};
    assert_true(n <= 8);
    char gname[256];
    for (int i = 0; i < n; i++) {
        snprintf(gname, sizeof gname, "%s.grad.%s", name, input_names[i]);
        needs_grad[i] = tn__tensor_list_get(g_ops, gname) != NULL;
        in[i] = leaf_copy(fx(g_ops, "%s.%s", name, input_names[i]), needs_grad[i]);
    }
    bool ok = true;
    char what[300];
    tn_tensor *y = fn(in, ctx);
    if (!y)
        fail_msg("%s: forward failed: %s", name, tn_last_error_message());
    snprintf(what, sizeof what, "%s: output", name);
    ok &= check_close(what, y, fx(g_ops, "%s.y", name), atol, rtol);
    if (tn_backward(y, fx(g_ops, "%s.w", name), false) != 0)
        fail_msg("%s: backward failed: %s", name, tn_last_error_message());
    for (int i = 0; i < n; i++) {
        if (!needs_grad[i])
            continue;
        snprintf(what, sizeof what, "%s: gradient of %s", name, input_names[i]);
        ok &= check_close(what, tn_grad(in[i]), fx(g_ops, "%s.grad.%s", name, input_names[i]),
                          atol, rtol);
    }
    tn_release(y);
    for (int i = 0; i < n; i++)
        tn_release(in[i]);
    if (!ok)
        fail_msg("%s: does not match PyTorch (see MISMATCH lines above)", name);
}

typedef struct pool_args {
    int kernel, stride, padding;
} pool_args;

typedef struct conv_args {
    int stride, padding;
} conv_args;

static tn_tensor *op_gelu(tn_tensor *const *in, void *ctx) { return tn_gelu(in[0]); }
static tn_tensor *op_softmax_last(tn_tensor *const *in, void *ctx) { return tn_softmax(in[0], -1); }
static tn_tensor *op_softmax_dim0(tn_tensor *const *in, void *ctx) { return tn_softmax(in[0], 0); }
static tn_tensor *op_log_softmax(tn_tensor *const *in, void *ctx)
{
    return tn_log_softmax(in[0], -1);
}
static tn_tensor *op_layer_norm(tn_tensor *const *in, void *ctx)
{
    return tn_layer_norm(in[0], in[1], in[2], 1e-5f);
}
static tn_tensor *op_conv2d(tn_tensor *const *in, void *ctx)
{
    const conv_args *a = ctx;
    return tn_conv2d(in[0], in[1], in[2], a->stride, a->padding);
}
static tn_tensor *op_max_pool2d(tn_tensor *const *in, void *ctx)
{
    const pool_args *a = ctx;
    return tn_max_pool2d(in[0], a->kernel, a->stride, a->padding);
}
static tn_tensor *op_avg_pool2d(tn_tensor *const *in, void *ctx)
{
    const pool_args *a = ctx;
    return tn_avg_pool2d(in[0], a->kernel, a->stride, a->padding);
}
static tn_tensor *op_cross_entropy(tn_tensor *const *in, void *ctx)
{
    return tn_cross_entropy(in[0], ctx);
}
static tn_tensor *op_matmul(tn_tensor *const *in, void *ctx) { return tn_matmul(in[0], in[1]); }
static tn_tensor *op_attention_causal(tn_tensor *const *in, void *ctx)
{
    return tn_scaled_dot_product_attention(in[0], in[1], in[2], true);
}

static const char *const X[] = {"x"};
static const char *const X_W_B[] = {"x", "weight", "bias"};

static void test_gelu(void **state) { run_op_case("gelu", 1, X, op_gelu, NULL, ATOL, RTOL); }

static void test_softmax(void **state)
{
    run_op_case("softmax", 1, X, op_softmax_last, NULL, ATOL, RTOL);
    run_op_case("softmax_dim0", 1, X, op_softmax_dim0, NULL, ATOL, RTOL);
}

static void test_log_softmax(void **state)
{
    run_op_case("log_softmax", 1, X, op_log_softmax, NULL, ATOL, RTOL);
}

static void test_layer_norm(void **state)
{
    run_op_case("layer_norm", 3, X_W_B, op_layer_norm, NULL, ATOL, RTOL);
}

static void test_conv2d(void **state)
{
    conv_args same = {1, 1}, strided = {2, 0};
    run_op_case("conv2d", 3, X_W_B, op_conv2d, &same, ATOL, RTOL);
    run_op_case("conv2d_s2p0", 3, X_W_B, op_conv2d, &strided, ATOL, RTOL);
}

static void test_max_pool2d(void **state)
{
    pool_args k2 = {2, 2, 0}, k3 = {3, 2, 1};
    run_op_case("max_pool2d", 1, X, op_max_pool2d, &k2, ATOL, RTOL);
    /* Overlapping windows: an element that is the max of two windows gets both gradients. */
    run_op_case("max_pool2d_k3s2p1", 1, X, op_max_pool2d, &k3, ATOL, RTOL);
}

static void test_avg_pool2d(void **state)
{
    pool_args k3 = {3, 2, 1};
    run_op_case("avg_pool2d_k3s2p1", 1, X, op_avg_pool2d, &k3, ATOL, RTOL);
}

static void test_cross_entropy(void **state)
{
    tn_tensor *t = fx(g_ops, "cross_entropy.targets");
    int64_t n = tn_numel(t);
    float f[16];
    int64_t targets[16];
    assert_true(n <= 16);
    tn_copy_to(t, f);
    for (int64_t i = 0; i < n; i++)
        targets[i] = (int64_t)f[i];
    run_op_case("cross_entropy", 1, X, op_cross_entropy, targets, ATOL, RTOL);
}

static void test_matmul(void **state)
{
    static const char *const ab[] = {"a", "b"};
    run_op_case("matmul", 2, ab, op_matmul, NULL, ATOL, RTOL);
}

static void test_attention_causal(void **state)
{
    static const char *const qkv[] = {"q", "k", "v"};
    run_op_case("attention_causal", 3, qkv, op_attention_causal, NULL, ATOL, RTOL);
}

/* ---- modules -------------------------------------------------------------------------------- */

/* Loads `weights` into m strictly, runs it on io's x, compares out, then backward with io's w and
 * compares grad.x and grad.<param> for every parameter. Also checks that the output under no_grad
 * is the same and records no graph. */
static void run_module_case(const char *what, tn_module *m, const char *weights,
                            const tn__tensor_list *io, double atol, double rtol)
{
    char path[1024];
    fixture_path(path, sizeof path, weights);
    if (tn_module_load_safetensors(m, path, false) != 0)
        fail_msg("%s: loading %s failed: %s", what, path, tn_last_error_message());
    assert_non_null(io);
    tn_tensor *x = leaf_copy(fx(io, "x"), true);
    tn_tensor *out = tn_module_forward(m, x);
    if (!out)
        fail_msg("%s: forward failed: %s", what, tn_last_error_message());
    bool ok = true;
    char label[300];
    snprintf(label, sizeof label, "%s: output", what);
    ok &= check_close(label, out, fx(io, "out"), atol, rtol);

    tn_grad_mode prev = tn_no_grad_begin();
    tn_tensor *out_ng = tn_module_forward(m, x);
    tn_grad_mode_end(prev);
    if (!out_ng)
        fail_msg("%s: forward under no_grad failed: %s", what, tn_last_error_message());
    snprintf(label, sizeof label, "%s: output under no_grad", what);
    ok &= check_close(label, out_ng, fx(io, "out"), atol, rtol);
    if (tn_grad_fn_name(out_ng) != NULL || tn_requires_grad(out_ng)) {
        print_error("MISMATCH %s: output under no_grad has a graph (%s)\n", what,
                    tn_grad_fn_name(out_ng) ? tn_grad_fn_name(out_ng) : "requires_grad");
        ok = false;
    }
    tn_release(out_ng);

    if (tn_backward(out, fx(io, "w"), false) != 0)
        fail_msg("%s: backward failed: %s", what, tn_last_error_message());
    snprintf(label, sizeof label, "%s: gradient of x", what);
    ok &= check_close(label, tn_grad(x), fx(io, "grad.x"), atol, rtol);
    int count = tn_module_param_count(m);
    int checked = 0;
    for (int i = 0; i < count; i++) {
        const char *name = NULL;
        tn_tensor *p = tn_module_param(m, i, &name);
        snprintf(label, sizeof label, "%s: gradient of %s", what, name);
        ok &= check_close(label, tn_grad(p), fx(io, "grad.%s", name), atol, rtol);
        checked++;
    }
    /* Every gradient in the fixture belongs to a parameter (nothing silently skipped). */
    int in_fixture = 0;
    for (int i = 0; i < io->count; i++)
        if (strncmp(tn_name(io->tensors[i]), "grad.", 5) == 0 &&
            strcmp(tn_name(io->tensors[i]), "grad.x") != 0)
            in_fixture++;
    assert_int_equal(checked, in_fixture);
    tn_release(out);
    tn_release(x);
    if (!ok)
        fail_msg("%s: does not match PyTorch (see MISMATCH lines above)", what);
}

static void test_mlp(void **state)
{
    tn_manual_seed(123); /* weights are overwritten by the load */
    tn_module *m = tn_sequential_new();
    assert_non_null(m);
    assert_int_equal(tn_sequential_append(m, tn_linear_new(4, 8, true)), 0);
    assert_int_equal(tn_sequential_append(m, tn_relu_new()), 0);
    assert_int_equal(tn_sequential_append(m, tn_linear_new(8, 3, true)), 0);
    run_module_case("mlp", m, "mlp.safetensors", g_mlp, ATOL, RTOL);
    tn_module_free(m);
}

static void test_transformer_encoder_layer(void **state)
{
    tn_manual_seed(123);
    tn_module *m = tn_transformer_encoder_layer_new(8, 2, 16, 0.0f, false);
    if (!m)
        fail_msg("transformer_encoder_layer_new failed: %s", tn_last_error_message());
    tn_module_train(m, false);
    run_module_case("transformer_encoder_layer", m, "transformer.safetensors", g_transformer,
                    ATOL, RTOL);
    tn_module_free(m);
}

/* ---- main ----------------------------------------------------------------------------------- */

static int setup(void **state)
{
    g_ops = read_fixture("ops.safetensors");
    g_mlp = read_fixture("mlp_io.safetensors");
    g_transformer = read_fixture("transformer_io.safetensors");
    return g_ops && g_mlp && g_transformer ? 0 : -1;
}

static int teardown(void **state)
{
    tn__tensor_list_free(g_ops);
    tn__tensor_list_free(g_mlp);
    tn__tensor_list_free(g_transformer);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_layer_norm),
        cmocka_unit_test(test_conv2d),
        cmocka_unit_test(test_max_pool2d),
        cmocka_unit_test(test_avg_pool2d),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_transformer_encoder_layer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
