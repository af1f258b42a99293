/*
 * Modules: names and dotted paths (as PyTorch's state_dict), renaming, train/eval, parameter
 * bytes, allocation tags carrying the module path, forward shapes and values against plain-C
 * references, and user errors.
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
#include "tensor_internal.h"

/* ---- helpers -------------------------------------------------------------------------------- */

/* SHAPE(2, 3) -> 2, (int64_t[]){2, 3}. */
// clang-format off
#define SHAPE(...)                                                                                 \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
// clang-format on

static void assert_error(int code, const char *needle)
{
    assert_int_equal(tn_last_error(), code);
    if (!strstr(tn_last_error_message(), needle))
        fail_msg("error message '%s' does not name '%s'", tn_last_error_message(), needle);
}

static void assert_shape(const tn_tensor *t, int ndim, const int64_t *shape)
{
    assert_non_null(t);
    assert_int_equal(tn_ndim(t), ndim);
    for (int i = 0; i < ndim; i++)
        assert_int_equal(tn_shape(t)[i], shape[i]);
}
#define ASSERT_SHAPE(t, ...)                                                                       \
    assert_shape((t), (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                   \
                 (const int64_t[]){__VA_ARGS__})

static void assert_names(const tn_module *m, const char *const *names, int n)
{
    assert_int_equal(tn_module_param_count(m), n);
    for (int i = 0; i < n; i++) {
        const char *name = NULL;
        tn_tensor *p = tn_module_param(m, i, &name);
        assert_non_null(p);
        assert_non_null(name);
        assert_string_equal(name, names[i]);
        assert_ptr_equal(tn_module_param_by_name(m, names[i]), p);
    }
    const char *name = "unset";
    assert_null(tn_module_param(m, n, &name));
    assert_null(name);
}

/* Overwrites a parameter with deterministic values in [-0.5, 0.5) (for value tests). */
static void fill_param(tn_module *m, const char *name, uint32_t seed)
{
    tn_tensor *p = tn_module_param_by_name(m, name);
    assert_non_null(p);
    float *d = tn_data(p);
    for (int64_t i = 0; i < tn_numel(p); i++) {
        seed = seed * 1664525u + 1013904223u;
        d[i] = (float)(seed >> 8) / (float)(1u << 24) - 0.5f;
    }
}

static tn_module *mlp_new(void)
{
    tn_module *seq = tn_sequential_new();
    assert_non_null(seq);
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(4, 3, true)), 0);
    assert_int_equal(tn_sequential_append(seq, tn_relu_new()), 0);
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(3, 2, true)), 0);
    return seq;
}

/* ---- plain-C references --------------------------------------------------------------------- */

/* y[n, out] = x[n, in] @ w[out, in]^T + b[out]. */
static void ref_linear(const float *x, const float *w, const float *b, float *y, int64_t n,
                       int64_t in, int64_t out)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < in; i++)
                s += (double)x[r * in + i] * w[o * in + i];
            y[r * out + o] = (float)s;
        }
}

static void ref_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n,
                           int64_t d)
{
    for (int64_t r = 0; r < n; r++) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; i++)
            mean += x[r * d + i];
        mean /= (double)d;
        for (int64_t i = 0; i < d; i++)
            var += (x[r * d + i] - mean) * (x[r * d + i] - mean);
        var /= (double)d;
        for (int64_t i = 0; i < d; i++)
            y[r * d + i] = (float)((x[r * d + i] - mean) / sqrt(var + 1e-5) * w[i] + b[i]);
    }
}

/* Self-attention of x [B, T, D] with PyTorch's MultiheadAttention layout. */
static void ref_mha(const float *x, const float *w_in, const float *b_in, const float *w_out,
                    const float *b_out, float *y, int64_t B, int64_t T, int64_t D, int64_t H)
{
    int64_t hd = D / H;
    float *qkv = malloc((size_t)(B * T * 3 * D) * sizeof(float));
    float *o = malloc((size_t)(B * T * D) * sizeof(float));
    double *p = malloc((size_t)T * sizeof(double));
    ref_linear(x, w_in, b_in, qkv, B * T, D, 3 * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *q = qkv + (b * T + t) * 3 * D + h * hd;
                double mx = -INFINITY, z = 0;
                for (int64_t s = 0; s < T; s++) {
                    const float *k = qkv + (b * T + s) * 3 * D + D + h * hd;
                    double dot = 0;
                    for (int64_t e = 0; e < hd; e++)
                        dot += (double)q[e] * k[e];
                    p[s] = dot / sqrt((double)hd);
                    mx = p[s] > mx ? p[s] : mx;
                }
                for (int64_t s = 0; s < T; s++)
                    z += (p[s] = exp(p[s] - mx));
                for (int64_t e = 0; e < hd; e++) {
                    double acc = 0;
                    for (int64_t s = 0; s < T; s++)
                        acc += p[s] / z * qkv[(b * T + s) * 3 * D + 2 * D + h * hd + e];
                    o[(b * T + t) * D + h * hd + e] = (float)acc;
                }
            }
    ref_linear(o, w_out, b_out, y, B * T, D, D);
    free(p);
    free(o);
    free(qkv);
}

static const float *param_data(tn_module *m, const char *name)
{
    tn_tensor *p = tn_module_param_by_name(m, name);
    assert_non_null(p);
    return tn_data_const(p);
}

static void assert_close(const char *what, const float *a, const float *b, int64_t n, double tol)
{
    for (int64_t i = 0; i < n; i++)
        if (fabs((double)a[i] - b[i]) > tol + tol * fabs((double)b[i]))
            fail_msg("%s[%lld]: got %.7g, expected %.7g", what, (long long)i, (double)a[i],
                     (double)b[i]);
}

static tn_tensor *values(int ndim, const int64_t *shape, uint32_t seed)
{
    tn_tensor *t = tn_zeros(ndim, shape, LP_CAT_INPUT);
    assert_non_null(t);
    float *d = tn_data(t);
    for (int64_t i = 0; i < tn_numel(t); i++) {
        seed = seed * 1664525u + 1013904223u;
        d[i] = 2.0f * ((float)(seed >> 8) / (float)(1u << 24)) - 1.0f;
    }
    return t;
}

/* ---- names, paths, renaming ----------------------------------------------------------------- */

static void test_sequential_names(void **state)
{
    (void)state;
    tn_module *seq = mlp_new();
    assert_string_equal(tn_module_type(seq), "Sequential");
    assert_string_equal(tn_module_path(seq), "");
    static const char *const names[] = {"0.weight", "0.bias", "2.weight", "2.bias"};
    assert_names(seq, names, 4);
    assert_string_equal(tn_module_type(tn_module_child(seq, 0)), "Linear");
    assert_string_equal(tn_module_type(tn_module_child(seq, 1)), "ReLU");
    assert_string_equal(tn_module_path(tn_module_child(seq, 0)), "0");
    assert_string_equal(tn_module_path(tn_module_child(seq, 2)), "2");
    assert_null(tn_module_child(seq, 3));
    assert_null(tn_module_child(seq, -1));
    ASSERT_SHAPE(tn_module_param_by_name(seq, "0.weight"), 3, 4);
    ASSERT_SHAPE(tn_module_param_by_name(seq, "2.bias"), 2);
    for (int i = 0; i < 4; i++) {
        assert_true(tn_requires_grad(tn_module_param(seq, i, NULL)));
        assert_true(tn_is_leaf(tn_module_param(seq, i, NULL)));
    }
    assert_int_equal(tn_module_param_bytes(seq), (12 + 3 + 6 + 2) * sizeof(float));
    /* A child's own names are full names too. */
    const char *name = NULL;
    assert_non_null(tn_module_param(tn_module_child(seq, 2), 1, &name));
    assert_string_equal(name, "2.bias");
    tn_module_free(seq);
}

static void test_rename_and_nesting(void **state)
{
    (void)state;
    tn_module *inner = mlp_new();
    tn_module *outer = tn_sequential_new();
    assert_int_equal(tn_sequential_append(outer, tn_layer_norm_new(4)), 0);
    assert_int_equal(tn_sequential_append(outer, inner), 0);
    static const char *const nested[] = {"0.weight", "0.bias",     "1.0.weight",
                                         "1.0.bias", "1.2.weight", "1.2.bias"};
    assert_names(outer, nested, 6);
    assert_string_equal(tn_module_path(tn_module_child(inner, 2)), "1.2");

    assert_int_equal(tn_module_set_name(outer, "encoder"), 0);
    assert_string_equal(tn_module_path(outer), "encoder");
    assert_string_equal(tn_module_path(inner), "encoder.1");
    assert_string_equal(tn_module_path(tn_module_child(inner, 0)), "encoder.1.0");
    static const char *const renamed[] = {"encoder.0.weight",   "encoder.0.bias",
                                          "encoder.1.0.weight", "encoder.1.0.bias",
                                          "encoder.1.2.weight", "encoder.1.2.bias"};
    assert_names(outer, renamed, 6);
    /* Names relative to the root also resolve (files written from an unnamed PyTorch model). */
    assert_ptr_equal(tn_module_param_by_name(outer, "1.2.bias"),
                     tn_module_param_by_name(outer, "encoder.1.2.bias"));

    /* Only a root can be renamed. */
    assert_int_equal(tn_module_set_name(inner, "x"), TN_EINVAL);
    assert_error(TN_EINVAL, "module_set_name");
    assert_string_equal(tn_module_path(inner), "encoder.1");

    assert_int_equal(tn_module_set_name(outer, ""), 0);
    assert_names(outer, nested, 6);

    assert_null(tn_module_param_by_name(outer, "1.3.weight"));
    assert_error(TN_ENOTFOUND, "1.3.weight");
    assert_null(tn_module_param_by_name(outer, NULL));
    assert_error(TN_EINVAL, "module_param_by_name");
    tn_module_free(outer);
}

static void test_encoder_layer_names(void **state)
{
    (void)state;
    tn_module *layer = tn_transformer_encoder_layer_new(8, 2, 16, 0.1f, false);
    assert_non_null(layer);
    assert_string_equal(tn_module_type(layer), "TransformerEncoderLayer");
    static const char *const names[] = {"self_attn.in_proj_weight",
                                        "self_attn.in_proj_bias",
                                        "self_attn.out_proj.weight",
                                        "self_attn.out_proj.bias",
                                        "linear1.weight",
                                        "linear1.bias",
                                        "linear2.weight",
                                        "linear2.bias",
                                        "norm1.weight",
                                        "norm1.bias",
                                        "norm2.weight",
                                        "norm2.bias"};
    assert_names(layer, names, 12);
    static const char *const children[] = {"self_attn", "linear1", "dropout",  "linear2",
                                           "norm1",     "norm2",   "dropout1", "dropout2"};
    static const char *const types[] = {"MultiheadAttention", "Linear",    "Dropout", "Linear",
                                        "LayerNorm",          "LayerNorm", "Dropout", "Dropout"};
    for (int i = 0; i < 8; i++) {
        assert_string_equal(tn_module_path(tn_module_child(layer, i)), children[i]);
        assert_string_equal(tn_module_type(tn_module_child(layer, i)), types[i]);
    }
    assert_null(tn_module_child(layer, 8));
    ASSERT_SHAPE(tn_module_param_by_name(layer, "self_attn.in_proj_weight"), 24, 8);
    ASSERT_SHAPE(tn_module_param_by_name(layer, "self_attn.in_proj_bias"), 24);
    ASSERT_SHAPE(tn_module_param_by_name(layer, "self_attn.out_proj.weight"), 8, 8);
    ASSERT_SHAPE(tn_module_param_by_name(layer, "linear1.weight"), 16, 8);
    ASSERT_SHAPE(tn_module_param_by_name(layer, "linear2.weight"), 8, 16);
    size_t expect = (24 * 8 + 24 + 64 + 8 + 128 + 16 + 128 + 8 + 4 * 8) * sizeof(float);
    assert_int_equal(tn_module_param_bytes(layer), expect);

    /* PyTorch's init: zero in_proj and out_proj biases, xavier bound on in_proj_weight. */
    const float *b_in = param_data(layer, "self_attn.in_proj_bias");
    const float *b_out = param_data(layer, "self_attn.out_proj.bias");
    const float *w_in = param_data(layer, "self_attn.in_proj_weight");
    float bound = sqrtf(6.0f / 32.0f);
    for (int i = 0; i < 24; i++)
        assert_true(b_in[i] == 0.0f);
    for (int i = 0; i < 8; i++)
        assert_true(b_out[i] == 0.0f);
    for (int i = 0; i < 24 * 8; i++)
        assert_true(fabsf(w_in[i]) <= bound);

    assert_int_equal(tn_module_set_name(layer, "layers.0"), 0);
    assert_non_null(tn_module_param_by_name(layer, "layers.0.self_attn.out_proj.weight"));
    assert_string_equal(tn_module_path(tn_module_child(tn_module_child(layer, 0), 0)),
                        "layers.0.self_attn.out_proj");
    tn_module_free(layer);
}

static void test_init_ranges(void **state)
{
    (void)state;
    tn_manual_seed(7);
    tn_module *lin = tn_linear_new(16, 8, true);
    tn_module *conv = tn_conv2d_new(2, 3, 3, 1, 0, true);
    tn_module *bn = tn_batch_norm2d_new(5);
    tn_module *ln = tn_layer_norm_new(6);
    tn_module *emb = tn_embedding_new(100, 10);
    tn_module *nobias = tn_linear_new(3, 2, false);
    assert_non_null(lin);
    assert_non_null(conv);
    assert_non_null(bn);
    assert_non_null(ln);
    assert_non_null(emb);
    assert_non_null(nobias);

    const float *w = param_data(lin, "weight");
    float lo = 1, hi = -1;
    for (int i = 0; i < 128; i++) {
        assert_true(fabsf(w[i]) <= 0.25f);
        lo = fminf(lo, w[i]);
        hi = fmaxf(hi, w[i]);
    }
    assert_true(lo < -0.15f && hi > 0.15f); /* spread over the range, not constant */
    const float *cw = param_data(conv, "weight");
    for (int i = 0; i < 3 * 2 * 9; i++)
        assert_true(fabsf(cw[i]) <= 1.0f / sqrtf(18.0f));
    ASSERT_SHAPE(tn_module_param_by_name(conv, "weight"), 3, 2, 3, 3);

    static const char *const bn_names[] = {"weight", "bias", "running_mean", "running_var"};
    assert_names(bn, bn_names, 4);
    for (int i = 0; i < 5; i++) {
        assert_true(param_data(bn, "weight")[i] == 1.0f);
        assert_true(param_data(bn, "bias")[i] == 0.0f);
        assert_true(param_data(bn, "running_mean")[i] == 0.0f);
        assert_true(param_data(bn, "running_var")[i] == 1.0f);
    }
    assert_true(tn_requires_grad(tn_module_param_by_name(bn, "weight")));
    assert_false(tn_requires_grad(tn_module_param_by_name(bn, "running_mean")));
    assert_false(tn_requires_grad(tn_module_param_by_name(bn, "running_var")));
    /* Buffers never require grad, whatever tn_module_requires_grad says. */
    tn_module_requires_grad(bn, false);
    assert_false(tn_requires_grad(tn_module_param_by_name(bn, "weight")));
    tn_module_requires_grad(bn, true);
    assert_true(tn_requires_grad(tn_module_param_by_name(bn, "bias")));
    assert_false(tn_requires_grad(tn_module_param_by_name(bn, "running_var")));

    for (int i = 0; i < 6; i++)
        assert_true(param_data(ln, "weight")[i] == 1.0f && param_data(ln, "bias")[i] == 0.0f);

    const float *e = param_data(emb, "weight");
    double mean = 0, sq = 0;
    for (int i = 0; i < 1000; i++) {
        mean += e[i];
        sq += (double)e[i] * e[i];
    }
    mean /= 1000;
    assert_true(fabs(mean) < 0.15);
    assert_true(fabs(sq / 1000 - 1.0) < 0.2);

    static const char *const nb_names[] = {"weight"};
    assert_names(nobias, nb_names, 1);

    tn_module_free(lin);
    tn_module_free(conv);
    tn_module_free(bn);
    tn_module_free(ln);
    tn_module_free(emb);
    tn_module_free(nobias);
}

static void test_train_eval(void **state)
{
    (void)state;
    tn_module *layer = tn_transformer_encoder_layer_new(8, 2, 16, 0.5f, true);
    assert_non_null(layer);
    assert_true(tn_module_is_training(layer));
    tn_module_train(layer, false);
    assert_false(tn_module_is_training(layer));
    for (int i = 0; i < 8; i++)
        assert_false(tn_module_is_training(tn_module_child(layer, i)));
    assert_false(tn_module_is_training(tn_module_child(tn_module_child(layer, 0), 0)));
    tn_module_train(layer, true);
    assert_true(tn_module_is_training(tn_module_child(tn_module_child(layer, 0), 0)));
    tn_module_free(layer);

    /* Dropout follows the flag: identity in eval, zeros and 1/(1-p) scaling in training. */
    tn_manual_seed(3);
    tn_module *drop = tn_dropout_new(0.5f);
    tn_tensor *x = tn_full(SHAPE(4, 64), 1.0f, LP_CAT_INPUT);
    tn_module_train(drop, false);
    tn_tensor *y = tn_module_forward(drop, x);
    assert_non_null(y);
    float *v = malloc(256 * sizeof(float));
    tn_copy_to(y, v);
    for (int i = 0; i < 256; i++)
        assert_true(v[i] == 1.0f);
    tn_release(y);
    tn_module_train(drop, true);
    y = tn_module_forward(drop, x);
    assert_non_null(y);
    tn_copy_to(y, v);
    int zeros = 0;
    for (int i = 0; i < 256; i++) {
        assert_true(v[i] == 0.0f || fabsf(v[i] - 2.0f) < 1e-6f);
        zeros += v[i] == 0.0f;
    }
    assert_true(zeros > 80 && zeros < 176);
    free(v);
    tn_release(y);
    tn_release(x);
    tn_module_free(drop);
}

/* ---- allocation tags ------------------------------------------------------------------------ */

#define MAX_EVENTS 256

typedef struct recorded {
    lp_event_kind kind;
    const void *addr;
    lp_category category;
    char op[32];
    char module[64];
} recorded;

static recorded events[MAX_EVENTS];
static int n_events;

static void record(const lp_event *ev, void *user)
{
    (void)user;
    if (n_events >= MAX_EVENTS)
        return;
    recorded *r = &events[n_events++];
    memset(r, 0, sizeof(*r));
    r->kind = ev->kind;
    r->addr = ev->addr;
    if (ev->tag) {
        r->category = ev->tag->category;
        snprintf(r->op, sizeof(r->op), "%s", ev->tag->op ? ev->tag->op : "");
        snprintf(r->module, sizeof(r->module), "%s", ev->tag->module ? ev->tag->module : "");
    }
    if (ev->name)
        snprintf(r->module, sizeof(r->module), "%s", ev->name);
}

static const recorded *first_alloc(const char *op, int from)
{
    for (int i = from; i < n_events; i++)
        if (events[i].kind == LP_EV_ALLOC && strcmp(events[i].op, op) == 0)
            return &events[i];
    return NULL;
}

/* Runs seq on x with a listener and checks tags and regions against prefix ("" or "net."). */
static void check_tags(tn_module *seq, tn_tensor *x, const char *prefix)
{
    char want[64];
    const char *outer_module = tn__ctx()->module;
    n_events = 0;
    lp_set_listener(record, NULL);
    tn_tensor *y = tn_module_forward(seq, x);
    lp_set_listener(NULL, NULL);
    assert_non_null(y);
    assert_ptr_equal(tn__ctx()->module, outer_module); /* restored after forward */

    const recorded *lin0 = first_alloc("linear", 0);
    assert_non_null(lin0);
    assert_int_equal(lin0->category, LP_CAT_ACTIVATION);
    snprintf(want, sizeof(want), "%s0", prefix);
    assert_string_equal(lin0->module, want);
    const recorded *relu = first_alloc("relu", 0);
    assert_non_null(relu);
    snprintf(want, sizeof(want), "%s1", prefix);
    assert_string_equal(relu->module, want);
    const recorded *lin2 = first_alloc("linear", (int)(relu - events) + 1);
    assert_non_null(lin2);
    snprintf(want, sizeof(want), "%s2", prefix);
    assert_string_equal(lin2->module, want);
    /* The output of the last Linear is y's storage. */
    int found = 0;
    for (int i = 0; i < n_events; i++)
        if (events[i].kind == LP_EV_ALLOC && events[i].addr == tn_data(y)) {
            assert_string_equal(events[i].module, want);
            assert_string_equal(events[i].op, "linear");
            found = 1;
        }
    assert_true(found);

    /* Regions: the root, then each child nested in it. */
    const char *expect[4] = {tn_module_path(seq), NULL, NULL, NULL};
    char names[3][64];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof(names[i]), "%s%d", prefix, i);
        expect[i + 1] = names[i];
    }
    int depth = 0, pushes = 0, max_depth = 0;
    for (int i = 0; i < n_events; i++) {
        if (events[i].kind == LP_EV_REGION_PUSH) {
            assert_true(pushes < 4);
            assert_string_equal(events[i].module, expect[pushes]);
            pushes++;
            depth++;
            max_depth = depth > max_depth ? depth : max_depth;
        } else if (events[i].kind == LP_EV_REGION_POP) {
            depth--;
        }
    }
    assert_int_equal(pushes, 4);
    assert_int_equal(depth, 0);
    assert_int_equal(max_depth, 2);
    tn_release(y);
}

static void test_alloc_tags(void **state)
{
    (void)state;
    tn_module *seq = mlp_new();
    tn_tensor *x = tn_randn(SHAPE(2, 4), LP_CAT_INPUT);
    check_tags(seq, x, "");
    assert_int_equal(tn_module_set_name(seq, "net"), 0);
    check_tags(seq, x, "net.");
    tn_release(x);
    tn_module_free(seq);
}

/* ---- forward shapes and values -------------------------------------------------------------- */

static void test_linear_values(void **state)
{
    (void)state;
    tn_module *lin = tn_linear_new(4, 3, true);
    tn_tensor *x = values(SHAPE(2, 5, 4), 11);
    tn_tensor *y = tn_module_forward(lin, x);
    ASSERT_SHAPE(y, 2, 5, 3);
    float want[30], got[30];
    ref_linear(tn_data(x), param_data(lin, "weight"), param_data(lin, "bias"), want, 10, 4, 3);
    tn_copy_to(y, got);
    assert_close("linear", got, want, 30, 1e-5);
    assert_string_equal(tn_grad_fn_name(y), "linear");
    tn_release(y);
    tn_release(x);
    tn_module_free(lin);
}

static void test_conv_bn_shapes(void **state)
{
    (void)state;
    tn_module *conv = tn_conv2d_new(3, 4, 3, 1, 1, true);
    tn_module *strided = tn_conv2d_new(3, 4, 3, 2, 0, false);
    tn_module *bn = tn_batch_norm2d_new(4);
    tn_tensor *x = values(SHAPE(2, 3, 5, 5), 5);
    tn_tensor *y = tn_module_forward(conv, x);
    ASSERT_SHAPE(y, 2, 4, 5, 5);
    tn_tensor *x7 = values(SHAPE(2, 3, 7, 7), 6);
    tn_tensor *y2 = tn_module_forward(strided, x7);
    ASSERT_SHAPE(y2, 2, 4, 3, 3);

    /* Training: batch statistics, so each channel of the output has mean 0; running stats move. */
    tn_tensor *z = tn_module_forward(bn, y);
    ASSERT_SHAPE(z, 2, 4, 5, 5);
    float *v = malloc(200 * sizeof(float));
    tn_copy_to(z, v);
    for (int c = 0; c < 4; c++) {
        double s = 0;
        for (int n = 0; n < 2; n++)
            for (int i = 0; i < 25; i++)
                s += v[(n * 4 + c) * 25 + i];
        assert_true(fabs(s / 50) < 1e-4);
    }
    float rm[4];
    tn_copy_to(tn_module_param_by_name(bn, "running_mean"), rm);
    int moved = 0;
    for (int c = 0; c < 4; c++)
        moved += rm[c] != 0.0f;
    assert_true(moved > 0);

    /* Eval: running statistics, which stay as they are. */
    tn_module_train(bn, false);
    tn_tensor *z2 = tn_module_forward(bn, y);
    ASSERT_SHAPE(z2, 2, 4, 5, 5);
    float rm2[4];
    tn_copy_to(tn_module_param_by_name(bn, "running_mean"), rm2);
    assert_memory_equal(rm, rm2, sizeof(rm));
    free(v);
    tn_release(z2);
    tn_release(z);
    tn_release(y2);
    tn_release(x7);
    tn_release(y);
    tn_release(x);
    tn_module_free(bn);
    tn_module_free(strided);
    tn_module_free(conv);
}

static void test_small_module_values(void **state)
{
    (void)state;
    float xs[6] = {-2.0f, -0.5f, 0.0f, 0.5f, 1.0f, 3.0f};
    tn_tensor *x = tn_from_data(SHAPE(2, 3), xs, LP_CAT_INPUT);
    tn_module *relu = tn_relu_new();
    tn_module *gelu = tn_gelu_new();
    tn_module *ln = tn_layer_norm_new(3);
    float got[6], want[6];

    tn_tensor *y = tn_module_forward(relu, x);
    ASSERT_SHAPE(y, 2, 3);
    tn_copy_to(y, got);
    for (int i = 0; i < 6; i++)
        want[i] = xs[i] > 0 ? xs[i] : 0;
    assert_close("relu", got, want, 6, 0);
    tn_release(y);

    y = tn_module_forward(gelu, x);
    ASSERT_SHAPE(y, 2, 3);
    tn_copy_to(y, got);
    for (int i = 0; i < 6; i++)
        want[i] = (float)(0.5 * xs[i] * (1.0 + erf(xs[i] / sqrt(2.0))));
    assert_close("gelu", got, want, 6, 1e-5);
    tn_release(y);

    fill_param(ln, "weight", 1);
    fill_param(ln, "bias", 2);
    y = tn_module_forward(ln, x);
    ASSERT_SHAPE(y, 2, 3);
    tn_copy_to(y, got);
    ref_layer_norm(xs, param_data(ln, "weight"), param_data(ln, "bias"), want, 2, 3);
    assert_close("layer_norm", got, want, 6, 1e-4);
    tn_release(y);

    tn_module *emb = tn_embedding_new(5, 3);
    int64_t ids[4] = {4, 0, 2, 4};
    y = tn_embedding_forward(emb, ids, SHAPE(2, 2));
    ASSERT_SHAPE(y, 2, 2, 3);
    float e[12];
    tn_copy_to(y, e);
    const float *w = param_data(emb, "weight");
    for (int i = 0; i < 4; i++)
        assert_memory_equal(e + 3 * i, w + 3 * ids[i], 3 * sizeof(float));
    tn_release(y);
    /* Embedding has no generic forward. */
    assert_null(tn_module_forward(emb, x));
    assert_error(TN_EINVAL, "tn_embedding_forward");
    assert_null(tn_embedding_forward(relu, ids, SHAPE(4)));
    assert_error(TN_EINVAL, "embedding");
    assert_null(tn_embedding_forward(NULL, ids, SHAPE(4)));
    assert_error(TN_EINVAL, "embedding");

    /* An empty Sequential is the identity. */
    tn_module *empty = tn_sequential_new();
    y = tn_module_forward(empty, x);
    assert_ptr_equal(y, x);
    tn_release(y);

    tn_module_free(empty);
    tn_module_free(emb);
    tn_module_free(ln);
    tn_module_free(gelu);
    tn_module_free(relu);
    tn_release(x);
}

static void test_mha_values(void **state)
{
    (void)state;
    const int64_t B = 2, T = 3, D = 4, H = 2;
    tn_module *mha = tn_multihead_attention_new(D, H);
    assert_non_null(mha);
    assert_string_equal(tn_module_type(mha), "MultiheadAttention");
    static const char *const names[] = {"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                        "out_proj.bias"};
    assert_names(mha, names, 4);
    fill_param(mha, "in_proj_bias", 9);
    fill_param(mha, "out_proj.bias", 10);
    tn_tensor *x = values(SHAPE(2, 3, 4), 12);
    tn_tensor *y = tn_module_forward(mha, x);
    ASSERT_SHAPE(y, 2, 3, 4);
    float got[24], want[24];
    tn_copy_to(y, got);
    ref_mha(tn_data(x), param_data(mha, "in_proj_weight"), param_data(mha, "in_proj_bias"),
            param_data(mha, "out_proj.weight"), param_data(mha, "out_proj.bias"), want, B, T, D, H);
    assert_close("multihead_attention", got, want, 24, 1e-4);
    tn_release(y);
    tn_release(x);
    tn_module_free(mha);
}

/* The encoder layer in eval against the same computation written out in C. */
static void check_encoder_layer(bool gelu)
{
    const int64_t B = 2, T = 3, D = 4, H = 2, F = 6, N = B * T;
    tn_module *layer = tn_transformer_encoder_layer_new(D, H, F, 0.1f, gelu);
    assert_non_null(layer);
    tn_module_train(layer, false);
    for (int i = 0; i < tn_module_param_count(layer); i++) {
        const char *name;
        tn_module_param(layer, i, &name);
        fill_param(layer, name, 100u + (uint32_t)i);
    }
    tn_tensor *x = values(SHAPE(2, 3, 4), 13);
    tn_tensor *y = tn_module_forward(layer, x);
    ASSERT_SHAPE(y, 2, 3, 4);

    const float *xs = tn_data(x);
    float sa[24], r1[24], h[24], f[36], l2[24], r2[24], want[24], got[24];
    ref_mha(xs, param_data(layer, "self_attn.in_proj_weight"),
            param_data(layer, "self_attn.in_proj_bias"),
            param_data(layer, "self_attn.out_proj.weight"),
            param_data(layer, "self_attn.out_proj.bias"), sa, B, T, D, H);
    for (int i = 0; i < 24; i++)
        r1[i] = xs[i] + sa[i];
    ref_layer_norm(r1, param_data(layer, "norm1.weight"), param_data(layer, "norm1.bias"), h, N, D);
    ref_linear(h, param_data(layer, "linear1.weight"), param_data(layer, "linear1.bias"), f, N, D,
               F);
    for (int i = 0; i < 36; i++)
        f[i] = gelu ? (float)(0.5 * f[i] * (1.0 + erf(f[i] / sqrt(2.0)))) : (f[i] > 0 ? f[i] : 0);
    ref_linear(f, param_data(layer, "linear2.weight"), param_data(layer, "linear2.bias"), l2, N, F,
               D);
    for (int i = 0; i < 24; i++)
        r2[i] = h[i] + l2[i];
    ref_layer_norm(r2, param_data(layer, "norm2.weight"), param_data(layer, "norm2.bias"), want, N,
                   D);
    tn_copy_to(y, got);
    assert_close(gelu ? "encoder_layer(gelu)" : "encoder_layer(relu)", got, want, 24, 2e-4);
    tn_release(y);
    tn_release(x);
    tn_module_free(layer);
}

static void test_encoder_layer_values(void **state)
{
    (void)state;
    check_encoder_layer(false);
    check_encoder_layer(true);

    /* Training mode with dropout runs (attention dropout included) and keeps the shape. */
    tn_module *layer = tn_transformer_encoder_layer_new(8, 4, 16, 0.2f, false);
    tn_tensor *x = values(SHAPE(3, 5, 8), 21);
    tn_tensor *y = tn_module_forward(layer, x);
    ASSERT_SHAPE(y, 3, 5, 8);
    tn_release(y);
    tn_release(x);
    tn_module_free(layer);
}

static void test_backward_through_modules(void **state)
{
    (void)state;
    tn_module *seq = mlp_new();
    tn_tensor *x = values(SHAPE(3, 4), 4);
    tn_tensor *y = tn_module_forward(seq, x);
    tn_tensor *s = tn_sum(y, 0, NULL, false);
    assert_non_null(s);
    assert_int_equal(tn_backward(s, NULL, false), 0);
    for (int i = 0; i < tn_module_param_count(seq); i++) {
        tn_tensor *p = tn_module_param(seq, i, NULL);
        assert_non_null(tn_grad(p));
        assert_int_equal(tn_numel(tn_grad(p)), tn_numel(p));
    }
    tn_module_zero_grad(seq);
    for (int i = 0; i < tn_module_param_count(seq); i++)
        assert_null(tn_grad(tn_module_param(seq, i, NULL)));

    /* With requires_grad off nothing is recorded. */
    tn_module_requires_grad(seq, false);
    tn_tensor *y2 = tn_module_forward(seq, x);
    assert_false(tn_requires_grad(y2));
    assert_null(tn_grad_fn_name(y2));
    tn_release(y2);
    tn_release(s);
    tn_release(y);
    tn_release(x);
    tn_module_free(seq);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_forward_errors(void **state)
{
    (void)state;
    tn_module *lin = tn_linear_new(4, 3, true);
    tn_module *conv = tn_conv2d_new(3, 4, 3, 1, 1, true);
    tn_module *bn = tn_batch_norm2d_new(4);
    tn_module *ln = tn_layer_norm_new(4);
    tn_module *mha = tn_multihead_attention_new(4, 2);
    tn_module *layer = tn_transformer_encoder_layer_new(4, 2, 8, 0.0f, false);
    tn_tensor *x25 = values(SHAPE(2, 5), 1);
    tn_tensor *x3d = values(SHAPE(2, 3, 5), 2);
    tn_tensor *x4d = values(SHAPE(1, 2, 5, 5), 3);
    tn_tensor *x24 = values(SHAPE(2, 4), 4);

    assert_null(tn_module_forward(lin, x25));
    assert_error(TN_ESHAPE, "linear");
    assert_null(tn_module_forward(conv, x3d));
    assert_error(TN_ESHAPE, "conv2d");
    assert_null(tn_module_forward(conv, x4d)); /* 2 channels, not 3 */
    assert_error(TN_ESHAPE, "conv2d");
    assert_null(tn_module_forward(bn, x4d));
    assert_error(TN_ESHAPE, "batch_norm");
    assert_null(tn_module_forward(ln, x25));
    assert_error(TN_ESHAPE, "layer_norm");
    assert_null(tn_module_forward(mha, x24));
    assert_error(TN_ESHAPE, "multihead_attention");
    assert_null(tn_module_forward(layer, x3d));
    assert_error(TN_ESHAPE, "multihead_attention");
    assert_null(tn_module_forward(lin, NULL));
    assert_error(TN_EINVAL, "linear");
    assert_null(tn_module_forward(NULL, x25));
    assert_error(TN_EINVAL, "module_forward");

    /* A failure deep in a Sequential surfaces and leaks nothing (checked under ASan). */
    tn_module *seq = tn_sequential_new();
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(4, 3, true)), 0);
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(4, 2, true)), 0);
    assert_null(tn_module_forward(seq, x24));
    assert_error(TN_ESHAPE, "linear");
    assert_non_null(strstr(tn_last_error_message(), "'1'"));

    tn_release(x24);
    tn_release(x4d);
    tn_release(x3d);
    tn_release(x25);
    tn_module_free(seq);
    tn_module_free(layer);
    tn_module_free(mha);
    tn_module_free(ln);
    tn_module_free(bn);
    tn_module_free(conv);
    tn_module_free(lin);
}

static void test_constructor_errors(void **state)
{
    (void)state;
    assert_null(tn_linear_new(0, 3, true));
    assert_error(TN_EINVAL, "linear_new");
    assert_null(tn_conv2d_new(3, 4, 0, 1, 0, true));
    assert_error(TN_EINVAL, "conv2d_new");
    assert_null(tn_conv2d_new(3, 4, 3, 1, -1, true));
    assert_error(TN_EINVAL, "conv2d_new");
    assert_null(tn_batch_norm2d_new(0));
    assert_error(TN_EINVAL, "batch_norm2d_new");
    assert_null(tn_layer_norm_new(-2));
    assert_error(TN_EINVAL, "layer_norm_new");
    assert_null(tn_dropout_new(1.5f));
    assert_error(TN_EINVAL, "dropout_new");
    assert_null(tn_dropout_new(NAN));
    assert_error(TN_EINVAL, "dropout_new");
    assert_null(tn_embedding_new(10, 0));
    assert_error(TN_EINVAL, "embedding_new");
    assert_null(tn_multihead_attention_new(6, 4));
    assert_error(TN_EINVAL, "multihead_attention_new");
    assert_null(tn_transformer_encoder_layer_new(6, 4, 8, 0.1f, false));
    assert_error(TN_EINVAL, "transformer_encoder_layer_new");
    assert_null(tn_transformer_encoder_layer_new(8, 4, 8, -0.1f, false));
    assert_error(TN_EINVAL, "transformer_encoder_layer_new");

    /* Appending: ownership passes even on error (ASan checks the child is freed). */
    tn_module *lin = tn_linear_new(2, 2, true);
    assert_int_equal(tn_sequential_append(lin, tn_relu_new()), TN_EINVAL);
    assert_error(TN_EINVAL, "sequential_append");
    assert_int_equal(tn_sequential_append(NULL, tn_relu_new()), TN_EINVAL);
    assert_error(TN_EINVAL, "sequential_append");
    tn_module *seq = tn_sequential_new();
    assert_int_equal(tn_sequential_append(seq, NULL), TN_EINVAL);
    assert_int_equal(tn_sequential_append(seq, seq), TN_EINVAL);
    assert_int_equal(tn_module_param_count(seq), 0);
    /* A module already inside another cannot be appended twice; it stays where it is. */
    tn_module *inner = tn_relu_new();
    assert_int_equal(tn_sequential_append(seq, inner), 0);
    tn_module *other = tn_sequential_new();
    assert_int_equal(tn_sequential_append(other, inner), TN_EINVAL);
    assert_error(TN_EINVAL, "already belongs");
    assert_ptr_equal(tn_module_child(seq, 0), inner);
    assert_null(tn_module_child(other, 0));

    tn_module_free(NULL);
    assert_null(tn_module_path(NULL));
    assert_int_equal(tn_module_param_count(NULL), 0);
    assert_int_equal(tn_module_param_bytes(NULL), 0);
    assert_null(tn_module_param(NULL, 0, NULL));
    assert_error(TN_EINVAL, "module_param");
    assert_null(tn_module_param(seq, 0, NULL));
    assert_error(TN_ENOTFOUND, "module_param");
    assert_int_equal(tn_module_set_name(seq, NULL), TN_EINVAL);
    tn_module_free(other);
    tn_module_free(seq);
    tn_module_free(lin);
}

int main(void)
{
    // clang-format off
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential_names),
        cmocka_unit_test(test_rename_and_nesting),
        cmocka_unit_test(test_encoder_layer_names),
        cmocka_unit_test(test_init_ranges),
        cmocka_unit_test(test_train_eval),
        cmocka_unit_test(test_alloc_tags),
        cmocka_unit_test(test_linear_values),
        cmocka_unit_test(test_conv_bn_shapes),
        cmocka_unit_test(test_small_module_values),
        cmocka_unit_test(test_mha_values),
        cmocka_unit_test(test_encoder_layer_values),
        cmocka_unit_test(test_backward_through_modules),
        cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_constructor_errors),
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
