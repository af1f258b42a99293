/* The autograd engine: gradients through views and reductions, accumulation, retain_graph, the
 * in-place version check, saved-tensor release, and user errors. */
#include "gradcheck.h"

#include <math.h>
#include <string.h>

static int64_t live(lp_category c)
{
    lp_counters k;
    lp_counters_get(LP_DEVICE_HOST, &k);
    return k.live[c];
}

static tn_tensor *f_views(tn_tensor *const *in, void *ctx)
{
    /* x [2,3,4] -> transpose -> reshape -> narrow -> expand -> permute -> sum over a dim */
    tn_tensor *t = tn_transpose(in[0], 0, 2);               /* [4,3,2] */
    tn_tensor *r = tn_reshape(t, GC_SHAPE(12, 2));          /* copies */
    tn_tensor *n = tn_narrow(r, 0, 3, 6);                   /* [6,2] */
    tn_tensor *v = tn_view(n, GC_SHAPE(6, 1, 2));
    tn_tensor *e = tn_expand(v, GC_SHAPE(6, 3, 2));
    tn_tensor *p = tn_permute(e, (const int[]){2, 0, 1});   /* [2,6,3] */
    tn_tensor *c = tn_contiguous(p);
    tn_tensor *m = tn_mean(c, 1, (const int[]){2}, false);  /* [2,6] */
    tn_tensor *s = tn_sum(m, 1, (const int[]){0}, true);    /* [1,6] */
    tn_tensor *all[] = {t, r, n, v, e, p, c, m};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        tn_release(all[i]);
    return s;
}

static void test_gradcheck_views_and_reductions(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(2, 3, 4), -1, 1, true);
    GC_CHECK("views", f_views, NULL, 1, &x);
    tn_release(x);
}

static void test_leaf_backward_and_accumulation(void **state)
{
    tn_tensor *x = tn_scalar(3.0f, LP_CAT_INPUT);
    tn_set_requires_grad(x, true);
    assert_int_equal(tn_backward(x, NULL, false), 0);
    assert_true(tn_item(tn_grad(x)) == 1.0f);
    assert_int_equal(tn_backward(x, NULL, false), 0);
    assert_true(tn_item(tn_grad(x)) == 2.0f); /* += */
    tn_zero_grad(x);
    assert_null(tn_grad(x));

    /* y = sum(x * x + x): dy/dx = 2x + 1, x used three times */
    tn_tensor *v = tn_from_data(GC_SHAPE(3), (const float[]){1, 2, 3}, LP_CAT_INPUT);
    tn_set_requires_grad(v, true);
    tn_tensor *sq = tn_mul(v, v);
    tn_tensor *a = tn_add(sq, v);
    tn_tensor *y = tn_sum(a, 0, NULL, false);
    assert_string_equal(tn_grad_fn_name(y), "sum");
    assert_int_equal(tn_backward(y, NULL, false), 0);
    const float expect[3] = {3, 5, 7};
    gc_assert_close("grad", tn_data(tn_grad(v)), expect, 3, 0, 0);
    tn_release(y);
    tn_release(a);
    tn_release(sq);
    tn_release(v);
    tn_release(x);
}

static void test_shared_gradient_is_not_aliased(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(4), 0, 1, true);
    tn_tensor *y = gc_rand(GC_SHAPE(4), 0, 1, true);
    tn_tensor *s = tn_add(x, y); /* add's backward hands the same gradient to both */
    tn_tensor *l = tn_sum(s, 0, NULL, false);
    assert_int_equal(tn_backward(l, NULL, true), 0);
    assert_ptr_not_equal(tn_data(tn_grad(x)), tn_data(tn_grad(y)));
    assert_int_equal(tn_backward(l, NULL, false), 0);
    assert_true(tn_data(tn_grad(x))[0] == 2.0f && tn_data(tn_grad(y))[0] == 2.0f);
    tn_release(l);
    tn_release(s);
    tn_release(x);
    tn_release(y);
}

static void test_given_gradient(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(3), 0, 1, true);
    tn_tensor *y = tn_mul_scalar(x, 2.0f);
    assert_int_equal(tn_backward(y, NULL, false), TN_EGRAD);
    assert_non_null(strstr(tn_last_error_message(), "one-element"));
    tn_tensor *g = tn_from_data(GC_SHAPE(3), (const float[]){1, 10, 100}, LP_CAT_INPUT);
    tn_tensor *bad = tn_zeros(GC_SHAPE(2), LP_CAT_INPUT);
    assert_int_equal(tn_backward(y, bad, false), TN_ESHAPE);
    assert_int_equal(tn_backward(y, g, false), 0);
    const float expect[3] = {2, 20, 200};
    gc_assert_close("grad", tn_data(tn_grad(x)), expect, 3, 0, 0);
    tn_release(bad);
    tn_release(g);
    tn_release(y);
    tn_release(x);
}

static void test_retain_graph_and_second_backward(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(3), 0.5f, 1, true);
    tn_tensor *e = tn_exp(x); /* saves its output */
    tn_tensor *l = tn_sum(e, 0, NULL, false);
    assert_int_equal(tn_backward(l, NULL, true), 0);
    assert_int_equal(tn_backward(l, NULL, false), 0); /* graph was retained */
    float g0 = tn_data(tn_grad(x))[0];
    assert_true(fabsf(g0 - 2 * tn_data(e)[0]) < 1e-5f);
    assert_int_equal(tn_backward(l, NULL, false), TN_EGRAD);
    assert_non_null(strstr(tn_last_error_message(), "second time"));
    assert_non_null(strstr(tn_last_error_message(), "exp"));
    assert_true(tn_data(tn_grad(x))[0] == g0); /* a failed backward adds nothing */
    tn_release(l);
    tn_release(e);
    tn_release(x);
}

static void test_inplace_change_of_saved_tensor(void **state)
{
    tn_tensor *x = gc_rand(GC_SHAPE(2, 2), 0, 1, true);
    tn_tensor *e = tn_exp(x);
    tn_tensor *l = tn_sum(e, 0, NULL, false);
    tn_tensor *one = tn_full(GC_SHAPE(1), 1.0f, LP_CAT_INPUT);
    /* e requires grad: refused while grad is on ... */
    assert_int_equal(tn_add_(e, one), TN_EGRAD);
    /* ... allowed under no_grad, which bumps the version autograd checks */
    tn_grad_mode prev = tn_no_grad_begin();
    assert_int_equal(tn_add_(e, one), 0);
    tn_grad_mode_end(prev);
    assert_int_equal(tn_backward(l, NULL, false), TN_EVERSION);
    const char *msg = tn_last_error_message();
    assert_non_null(strstr(msg, "exp"));
    assert_non_null(strstr(msg, "version 1"));
    assert_non_null(strstr(msg, "expected version 0"));
    assert_non_null(strstr(msg, "[2,2]"));
    tn_release(one);
    tn_release(l);
    tn_release(e);
    tn_release(x);
}

static void test_saved_released_after_backward(void **state)
{
    int64_t saved0 = live(LP_CAT_SAVED), graph0 = live(LP_CAT_AUTOGRAD);
    tn_tensor *x = gc_rand(GC_SHAPE(64), 0, 1, true);
    tn_tensor *h = tn_mul_scalar(x, 3.0f);
    tn_tensor *e = tn_exp(h); /* saves e: 256 bytes */
    tn_tensor *l = tn_sum(e, 0, NULL, false);
    assert_int_equal(live(LP_CAT_SAVED) - saved0, 64 * 4);
    assert_true(live(LP_CAT_AUTOGRAD) > graph0);
    assert_int_equal(tn_backward(l, NULL, false), 0);
    assert_int_equal(live(LP_CAT_SAVED), saved0); /* released by backward, e still alive */
    tn_release(l);
    tn_release(e);
    tn_release(h);
    assert_int_equal(live(LP_CAT_AUTOGRAD), graph0); /* nodes and the accumulator are gone */
    tn_release(x);
}

static void test_user_errors(void **state)
{
    tn_tensor *c = tn_zeros(GC_SHAPE(2), LP_CAT_INPUT);
    assert_int_equal(tn_backward(c, NULL, false), TN_EGRAD);
    assert_non_null(strstr(tn_last_error_message(), "does not require grad"));
    assert_int_equal(tn_backward(NULL, NULL, false), TN_EINVAL);
    tn_tensor *x = gc_rand(GC_SHAPE(2), 0, 1, true);
    tn_tensor *y = tn_mul_scalar(x, 2);
    assert_int_equal(tn_set_requires_grad(y, false), TN_EGRAD);
    assert_non_null(strstr(tn_last_error_message(), "mul_scalar"));
    tn_tensor *d = tn_detach(y);
    assert_true(tn_is_leaf(d));
    assert_false(tn_requires_grad(d));
    assert_ptr_equal(tn_data(d), tn_data(y));
    assert_int_equal(tn_set_requires_grad(d, true), 0);
    tn_release(d);
    tn_release(y);
    tn_release(x);
    tn_release(c);
}

static void test_long_chain_release(void **state)
{
    /* total += loss over many iterations builds a long chain; freeing it must not recurse. */
    int64_t graph0 = live(LP_CAT_AUTOGRAD);
    tn_tensor *w = gc_rand(GC_SHAPE(1), 0, 1, true);
    tn_tensor *total = tn_zeros(GC_SHAPE(1), LP_CAT_ACTIVATION);
    for (int i = 0; i < 200000; i++) {
        tn_tensor *next = tn_add(total, w);
        tn_release(total);
        total = next;
    }
    assert_true(live(LP_CAT_AUTOGRAD) > graph0);
    assert_int_equal(tn_backward(total, NULL, true), 0);
    assert_true(tn_data(tn_grad(w))[0] == 200000.0f);
    tn_release(total);
    tn_release(w);
    assert_int_equal(live(LP_CAT_AUTOGRAD), graph0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradcheck_views_and_reductions),
        cmocka_unit_test(test_leaf_backward_and_accumulation),
        cmocka_unit_test(test_shared_gradient_is_not_aliased),
        cmocka_unit_test(test_given_gradient),
        cmocka_unit_test(test_retain_graph_and_second_backward),
        cmocka_unit_test(test_inplace_change_of_saved_tensor),
        cmocka_unit_test(test_saved_released_after_backward),
        cmocka_unit_test(test_user_errors),
        cmocka_unit_test(test_long_chain_release),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
