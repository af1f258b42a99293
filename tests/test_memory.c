/*
 * Memory semantics the whole project rests on, measured with libprof's counters:
 * an L-layer MLP (width W, batch B) with grad on keeps (L-1)*B*W*4 SAVED bytes alive until its
 * output goes; under no_grad it keeps 0 SAVED and 0 AUTOGRAD bytes and its activations peak at two
 * layers' worth; after backward and release only PARAMETER and GRADIENT remain.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gradprof/tensor.h"

enum { L = 6, W = 64, B = 16 };
static const int64_t ACT_BYTES = (int64_t)B * W * 4;

typedef struct mlp {
    tn_tensor *w[L], *b[L];
} mlp;

static lp_counters counters(void)
{
    lp_counters c;
    lp_counters_get(LP_DEVICE_HOST, &c);
    return c;
}

static void mlp_init(mlp *m)
{
    tn_manual_seed(1);
    for (int i = 0; i < L; i++) {
        m->w[i] = tn_rand_uniform(2, (const int64_t[]){W, W}, -0.125f, 0.125f, LP_CAT_PARAMETER);
        m->b[i] = tn_zeros(1, (const int64_t[]){W}, LP_CAT_PARAMETER);
        tn_set_requires_grad(m->w[i], true);
        tn_set_requires_grad(m->b[i], true);
    }
}

static void mlp_free(mlp *m)
{
    for (int i = 0; i < L; i++) {
        tn_release(m->w[i]);
        tn_release(m->b[i]);
    }
}

/* Linear+ReLU layers, the last without ReLU; intermediates released as soon as possible. */
static tn_tensor *mlp_forward(mlp *m, tn_tensor *x)
{
    tn_tensor *a = tn_retain(x);
    for (int i = 0; i < L; i++) {
        tn_tensor *h = tn_linear(a, m->w[i], m->b[i]);
        assert_non_null(h);
        tn_release(a);
        if (i == L - 1)
            return h;
        a = tn_relu(h);
        assert_non_null(a);
        tn_release(h);
    }
    return NULL;
}

static void test_grad_on_keeps_saved_activations(void **state)
{
    mlp m;
    mlp_init(&m);
    tn_tensor *x = tn_randn(2, (const int64_t[]){B, W}, LP_CAT_INPUT);
    lp_counters base = counters();
    tn_tensor *y = mlp_forward(&m, x);
    lp_counters c = counters();
    int64_t saved = c.live[LP_CAT_SAVED] - base.live[LP_CAT_SAVED];
    assert_true(saved >= (int64_t)(L - 1) * ACT_BYTES);
    assert_int_equal(saved, (int64_t)(L - 1) * ACT_BYTES); /* exactly the ReLU outputs */
    assert_true(c.live[LP_CAT_AUTOGRAD] > base.live[LP_CAT_AUTOGRAD]);
    assert_string_equal(tn_grad_fn_name(y), "linear");

    tn_release(y); /* the graph goes with the output */
    c = counters();
    assert_int_equal(c.live[LP_CAT_SAVED], base.live[LP_CAT_SAVED]);
    assert_int_equal(c.live[LP_CAT_AUTOGRAD], base.live[LP_CAT_AUTOGRAD]);
    assert_int_equal(c.live[LP_CAT_ACTIVATION], base.live[LP_CAT_ACTIVATION]);
    tn_release(x);
    mlp_free(&m);
}

static void test_no_grad_keeps_nothing_and_peaks_at_two_layers(void **state)
{
    mlp m;
    mlp_init(&m);
    tn_tensor *x = tn_randn(2, (const int64_t[]){B, W}, LP_CAT_INPUT);
    lp_counters_reset_peak();
    lp_counters base = counters();
    tn_grad_mode prev = tn_no_grad_begin();
    tn_tensor *y = mlp_forward(&m, x);
    tn_grad_mode_end(prev);
    lp_counters c = counters();
    assert_false(tn_requires_grad(y));
    assert_int_equal(c.live[LP_CAT_SAVED], base.live[LP_CAT_SAVED]);
    assert_int_equal(c.live[LP_CAT_AUTOGRAD], base.live[LP_CAT_AUTOGRAD]);
    assert_int_equal(c.peak[LP_CAT_SAVED], base.live[LP_CAT_SAVED]);
    assert_int_equal(c.peak[LP_CAT_AUTOGRAD], base.live[LP_CAT_AUTOGRAD]);
    assert_int_equal(c.peak[LP_CAT_ACTIVATION] - base.live[LP_CAT_ACTIVATION], 2 * ACT_BYTES);
    assert_int_equal(c.live[LP_CAT_ACTIVATION] - base.live[LP_CAT_ACTIVATION], ACT_BYTES);
    tn_release(y);

    /* inference_mode: the same */
    lp_counters_reset_peak();
    prev = tn_inference_mode_begin(true);
    y = mlp_forward(&m, x);
    tn_grad_mode_end(prev);
    c = counters();
    assert_int_equal(c.peak[LP_CAT_SAVED], base.live[LP_CAT_SAVED]);
    assert_int_equal(c.peak[LP_CAT_AUTOGRAD], base.live[LP_CAT_AUTOGRAD]);
    assert_int_equal(c.peak[LP_CAT_ACTIVATION] - base.live[LP_CAT_ACTIVATION], 2 * ACT_BYTES);
    tn_release(y);
    tn_release(x);
    mlp_free(&m);
}

static void test_after_backward_only_parameters_and_gradients_remain(void **state)
{
    lp_counters base = counters();
    mlp m;
    mlp_init(&m);
    tn_tensor *x = tn_randn(2, (const int64_t[]){B, W}, LP_CAT_INPUT);
    tn_tensor *y = mlp_forward(&m, x);
    tn_tensor *loss = tn_mean(y, 0, NULL, false);
    assert_int_equal(tn_backward(loss, NULL, false), 0);
    lp_counters c = counters();
    /* backward released the saved activations though y and loss are still alive */
    assert_int_equal(c.live[LP_CAT_SAVED], base.live[LP_CAT_SAVED]);
    for (int i = 0; i < L; i++)
        assert_non_null(tn_grad(m.w[i]));
    tn_release(loss);
    tn_release(y);
    tn_release(x);
    c = counters();
    for (int cat = 0; cat < LP_CAT_COUNT; cat++) {
        int64_t delta = c.live[cat] - base.live[cat];
        if (cat == LP_CAT_PARAMETER)
            assert_int_equal(delta, (int64_t)L * (W * W + W) * 4);
        else if (cat == LP_CAT_GRADIENT)
            assert_int_equal(delta, (int64_t)L * (W * W + W) * 4); /* one .grad per parameter */
        else if (delta != 0)
            fail_msg("category %s: %ld bytes left after release", lp_category_name(cat),
                     (long)delta);
    }
    mlp_free(&m);
    c = counters();
    assert_int_equal(c.live_total, base.live_total);
}

typedef struct tagged {
    int saved_retags, unsaved_retags;
    char first_saved_op[32], first_saved_module[32], first_saved_detail[32];
} tagged;

static void on_event(const lp_event *ev, void *user)
{
    tagged *t = user;
    if (ev->kind != LP_EV_RETAG)
        return;
    if (ev->tag->category == LP_CAT_SAVED) {
        if (t->saved_retags++ == 0) {
            snprintf(t->first_saved_op, 32, "%s", ev->tag->op);
            snprintf(t->first_saved_module, 32, "%s", ev->tag->module);
            snprintf(t->first_saved_detail, 32, "%s", ev->tag->detail ? ev->tag->detail : "");
        }
    } else if (ev->from_category == LP_CAT_SAVED) {
        t->unsaved_retags++;
    }
}

static void test_module_forward_tags_saved_with_module_and_shape(void **state)
{
    tn_manual_seed(3);
    tn_module *net = tn_sequential_new();
    tn_sequential_append(net, tn_linear_new(8, 16, true));
    tn_sequential_append(net, tn_relu_new());
    tn_sequential_append(net, tn_linear_new(16, 4, true));
    tn_module_set_name(net, "mlp");
    tn_module_train(net, false);
    tn_tensor *x = tn_randn(2, (const int64_t[]){3, 8}, LP_CAT_INPUT);
    tagged t = {0};
    lp_set_listener(on_event, &t);
    tn_tensor *y = tn_module_forward(net, x);
    assert_non_null(y);
    tn_release(y);
    lp_set_listener(NULL, NULL);
    /* relu saved its output (ACTIVATION -> SAVED) once; released with the graph */
    assert_int_equal(t.saved_retags, 1);
    assert_int_equal(t.unsaved_retags, 1);
    assert_string_equal(t.first_saved_op, "relu");
    assert_string_equal(t.first_saved_module, "mlp.1");
    assert_string_equal(t.first_saved_detail, "[3,16]");
    tn_release(x);
    tn_module_free(net);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_on_keeps_saved_activations),
        cmocka_unit_test(test_no_grad_keeps_nothing_and_peaks_at_two_layers),
        cmocka_unit_test(test_after_backward_only_parameters_and_gradients_remain),
        cmocka_unit_test(test_module_forward_tags_saved_with_module_and_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
