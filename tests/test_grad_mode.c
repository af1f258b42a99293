/* Grad modes: nesting, enable_grad inside no_grad, set_grad_enabled, thread-locality,
 * inference mode and inference tensors, and the regions they report. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gradprof/tensor.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static tn_tensor *leaf(void)
{
    tn_tensor *x = tn_full(SHAPE(2, 2), 0.5f, LP_CAT_PARAMETER);
    assert_int_equal(tn_set_requires_grad(x, true), 0);
    return x;
}

static void test_set_grad_enabled_returns_previous(void **state)
{
    assert_true(tn_is_grad_enabled());
    assert_true(tn_set_grad_enabled(false));
    assert_false(tn_is_grad_enabled());
    assert_false(tn_set_grad_enabled(true));
    assert_true(tn_is_grad_enabled());
}

static void test_nesting(void **state)
{
    tn_tensor *x = leaf();
    tn_grad_mode outer = tn_no_grad_begin();
    assert_false(tn_is_grad_enabled());
    tn_tensor *a = tn_exp(x);
    assert_false(tn_requires_grad(a));
    assert_null(tn_grad_fn_name(a));

    tn_grad_mode inner = tn_no_grad_begin();
    assert_false(tn_is_grad_enabled());
    tn_grad_mode_end(inner);
    assert_false(tn_is_grad_enabled());

    tn_grad_mode en = tn_enable_grad_begin();
    assert_true(tn_is_grad_enabled());
    tn_tensor *b = tn_exp(x);
    assert_true(tn_requires_grad(b));
    assert_string_equal(tn_grad_fn_name(b), "exp");
    tn_grad_mode_end(en);
    assert_false(tn_is_grad_enabled());
    tn_grad_mode_end(outer);
    assert_true(tn_is_grad_enabled());

    /* an op whose inputs do not require grad records nothing even with grad on */
    tn_tensor *c = tn_exp(a);
    assert_false(tn_requires_grad(c));
    tn_release(c);
    tn_release(b);
    tn_release(a);
    tn_release(x);
}

static void *thread_body(void *arg)
{
    bool *seen = arg;
    seen[0] = tn_is_grad_enabled(); /* a new thread starts with grad enabled */
    tn_set_grad_enabled(false);
    seen[1] = tn_is_grad_enabled();
    return NULL;
}

static void test_thread_local(void **state)
{
    tn_grad_mode prev = tn_no_grad_begin();
    bool seen[2] = {false, true};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_body, seen), 0);
    pthread_join(th, NULL);
    assert_true(seen[0]);
    assert_false(seen[1]);
    assert_false(tn_is_grad_enabled()); /* untouched by the other thread */
    tn_grad_mode_end(prev);
    assert_true(tn_is_grad_enabled());
}

static void test_inference_mode(void **state)
{
    tn_tensor *w = leaf();
    tn_grad_mode prev = tn_inference_mode_begin(true);
    assert_true(tn_is_inference_mode_enabled());
    assert_false(tn_is_grad_enabled());
    tn_tensor *y = tn_exp(w);
    assert_true(tn_is_inference(y));
    assert_false(tn_requires_grad(y));
    /* no version counter bumps for inference tensors */
    assert_int_equal(tn_fill_(y, 1.0f), 0);
    assert_int_equal(tn_version(y), 0);
    /* inference_mode(false) inside restores normal autograd */
    tn_grad_mode off = tn_inference_mode_begin(false);
    assert_false(tn_is_inference_mode_enabled());
    assert_true(tn_is_grad_enabled());
    tn_grad_mode_end(off);
    tn_grad_mode_end(prev);
    assert_false(tn_is_inference_mode_enabled());
    assert_true(tn_is_grad_enabled());
    assert_false(tn_is_inference(w));

    /* Outside: an op that must save the inference tensor for backward refuses it. */
    tn_tensor *z = tn_mul(y, w);
    assert_null(z);
    assert_int_equal(tn_last_error(), TN_EINFERENCE);
    assert_non_null(strstr(tn_last_error_message(), "inference"));
    assert_non_null(strstr(tn_last_error_message(), "mul"));
    /* ... in-place updates to it are refused, and it cannot require grad */
    assert_int_equal(tn_fill_(y, 2.0f), TN_EINFERENCE);
    assert_int_equal(tn_set_requires_grad(y, true), TN_EINFERENCE);
    /* ... but ops that do not need it saved work, and under no_grad anything goes */
    tn_tensor *s = tn_add(y, w);
    assert_non_null(s);
    assert_true(tn_requires_grad(s));
    tn_grad_mode ng = tn_no_grad_begin();
    tn_tensor *m = tn_mul(y, w);
    assert_non_null(m);
    assert_false(tn_is_inference(m));
    tn_grad_mode_end(ng);
    tn_release(m);
    tn_release(s);
    tn_release(y);
    tn_release(w);
}

typedef struct names {
    int n;
    char pushed[8][32];
    int pops;
} names;

static void on_event(const lp_event *ev, void *user)
{
    names *r = user;
    if (ev->kind == LP_EV_REGION_PUSH && r->n < 8)
        snprintf(r->pushed[r->n++], 32, "%s", ev->name);
    if (ev->kind == LP_EV_REGION_POP)
        r->pops++;
}

static void test_scopes_report_regions(void **state)
{
    names r = {0};
    lp_set_listener(on_event, &r);
    tn_grad_mode a = tn_no_grad_begin();
    tn_grad_mode b = tn_enable_grad_begin();
    tn_grad_mode c = tn_inference_mode_begin(true);
    tn_grad_mode_end(c);
    tn_grad_mode_end(b);
    tn_grad_mode_end(a);
    lp_set_listener(NULL, NULL);
    assert_int_equal(r.n, 3);
    assert_string_equal(r.pushed[0], "no_grad");
    assert_string_equal(r.pushed[1], "enable_grad");
    assert_string_equal(r.pushed[2], "inference_mode");
    assert_int_equal(r.pops, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_grad_enabled_returns_previous),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_thread_local),
        cmocka_unit_test(test_inference_mode),
        cmocka_unit_test(test_scopes_report_regions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
