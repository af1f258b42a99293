/* libprof in-process API: counters, retag, peaks, listener events, regions, thread safety. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gradprof/libprof.h"

static lp_counters snapshot(void)
{
    lp_counters c;
    assert_int_equal(lp_counters_get(LP_DEVICE_HOST, &c), 0);
    return c;
}

static void test_category_names(void **state)
{
    assert_string_equal(lp_category_name(LP_CAT_SAVED), "saved");
    assert_string_equal(lp_category_name(LP_CAT_OPTIMIZER_STATE), "optimizer_state");
    assert_string_equal(lp_category_name((lp_category)99), "invalid");
    lp_category c;
    assert_int_equal(lp_category_parse("GRADIENT", &c), 0);
    assert_int_equal(c, LP_CAT_GRADIENT);
    assert_int_equal(lp_category_parse("autograd", &c), 0);
    assert_int_equal(c, LP_CAT_AUTOGRAD);
    assert_int_equal(lp_category_parse("nonsense", &c), -1);
    assert_int_equal(lp_category_parse(NULL, &c), -1);
}

static void test_counters_alloc_free_retag(void **state)
{
    lp_counters before = snapshot();
    lp_tag act = {.category = LP_CAT_ACTIVATION, .op = "relu", .module = "0", .grad_enabled = true};
    char buf_a, buf_b;
    lp_alloc(&buf_a, 1000, LP_DEVICE_HOST, &act);
    lp_alloc(&buf_b, 24, LP_DEVICE_HOST, &act);
    lp_counters c = snapshot();
    assert_int_equal(c.live[LP_CAT_ACTIVATION] - before.live[LP_CAT_ACTIVATION], 1024);
    assert_int_equal(c.live_total - before.live_total, 1024);

    lp_tag saved = act;
    saved.category = LP_CAT_SAVED;
    lp_retag(&buf_a, 1000, LP_DEVICE_HOST, LP_CAT_ACTIVATION, &saved);
    c = snapshot();
    assert_int_equal(c.live[LP_CAT_ACTIVATION] - before.live[LP_CAT_ACTIVATION], 24);
    assert_int_equal(c.live[LP_CAT_SAVED] - before.live[LP_CAT_SAVED], 1000);
    assert_int_equal(c.live_total - before.live_total, 1024); /* a retag moves, never adds */
    assert_true(c.peak_total >= before.live_total + 1024);

    lp_free(&buf_a, 1000, LP_DEVICE_HOST, LP_CAT_SAVED);
    lp_free(&buf_b, 24, LP_DEVICE_HOST, LP_CAT_ACTIVATION);
    c = snapshot();
    assert_int_equal(c.live[LP_CAT_SAVED], before.live[LP_CAT_SAVED]);
    assert_int_equal(c.live_total, before.live_total);
}

static void test_peak_and_reset(void **state)
{
    lp_counters_reset_peak();
    lp_counters base = snapshot();
    assert_int_equal(base.peak_total, base.live_total);
    lp_tag tmp = {.category = LP_CAT_TEMPORARY, .op = "scratch", .module = ""};
    char x;
    lp_alloc(&x, 4096, LP_DEVICE_HOST, &tmp);
    lp_free(&x, 4096, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    lp_counters c = snapshot();
    assert_int_equal(c.peak[LP_CAT_TEMPORARY], base.live[LP_CAT_TEMPORARY] + 4096);
    assert_int_equal(c.peak_total, base.live_total + 4096);
    lp_counters_reset_peak();
    c = snapshot();
    assert_int_equal(c.peak[LP_CAT_TEMPORARY], c.live[LP_CAT_TEMPORARY]);
}

static void test_devices(void **state)
{
    lp_counters c;
    assert_int_equal(lp_counters_get(0, &c), 0);
    assert_int_equal(lp_counters_get(LP_MAX_CUDA_DEVICES, &c), -1);
    assert_int_equal(lp_counters_get(-2, &c), -1);
    lp_tag t = {.category = LP_CAT_ACTIVATION, .op = "x", .module = ""};
    char a;
    lp_counters host = snapshot();
    lp_alloc(&a, 512, 1, &t);
    assert_int_equal(lp_counters_get(1, &c), 0);
    assert_int_equal(c.live[LP_CAT_ACTIVATION], 512);
    assert_int_equal(snapshot().live_total, host.live_total); /* host untouched */
    lp_free(&a, 512, 1, LP_CAT_ACTIVATION);
}

typedef struct recorded {
    int n;
    lp_event_kind kinds[16];
    char names[16][32];
    char ops[16][32];
    lp_category cats[16];
} recorded;

static void record(const lp_event *ev, void *user)
{
    recorded *r = user;
    if (r->n >= 16)
        return;
    r->kinds[r->n] = ev->kind;
    snprintf(r->names[r->n], 32, "%s", ev->name ? ev->name : "");
    snprintf(r->ops[r->n], 32, "%s", ev->tag ? ev->tag->op : "");
    r->cats[r->n] = ev->tag ? ev->tag->category : ev->from_category;
    r->n++;
}

static void test_listener_sees_events_in_order(void **state)
{
    recorded r = {0};
    lp_set_listener(record, &r);
    lp_region_push("inference");
    lp_mark("iter 0");
    lp_tag t = {.category = LP_CAT_GRADIENT, .op = "mul_backward", .module = "fc"};
    char a;
    lp_alloc(&a, 8, LP_DEVICE_HOST, &t);
    lp_free(&a, 8, LP_DEVICE_HOST, LP_CAT_GRADIENT);
    lp_region_pop();
    lp_set_listener(NULL, NULL);
    lp_mark("not seen");
    assert_int_equal(r.n, 5);
    assert_int_equal(r.kinds[0], LP_EV_REGION_PUSH);
    assert_string_equal(r.names[0], "inference");
    assert_int_equal(r.kinds[1], LP_EV_MARK);
    assert_string_equal(r.names[1], "iter 0");
    assert_int_equal(r.kinds[2], LP_EV_ALLOC);
    assert_string_equal(r.ops[2], "mul_backward");
    assert_int_equal(r.cats[2], LP_CAT_GRADIENT);
    assert_int_equal(r.kinds[3], LP_EV_FREE);
    assert_int_equal(r.cats[3], LP_CAT_GRADIENT);
    assert_int_equal(r.kinds[4], LP_EV_REGION_POP);
}

static void test_unbalanced_pop_is_ignored(void **state)
{
    recorded r = {0};
    lp_set_listener(record, &r);
    lp_region_pop(); /* warns once on stderr, emits nothing */
    lp_set_listener(NULL, NULL);
    assert_int_equal(r.n, 0);
}

enum { THREADS = 4, ROUNDS = 100000 };

static void *churn(void *arg)
{
    char *base = arg;
    lp_tag t = {.category = LP_CAT_TEMPORARY, .op = "churn", .module = ""};
    for (int i = 0; i < ROUNDS; i++) {
        lp_alloc(base + i % 7, 16, LP_DEVICE_HOST, &t);
        lp_free(base + i % 7, 16, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    }
    lp_alloc(base, 100, LP_DEVICE_HOST, &t);
    return NULL;
}

static void test_counters_exact_under_threads(void **state)
{
    lp_counters before = snapshot();
    pthread_t th[THREADS];
    static char bufs[THREADS][8];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn, bufs[i]), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    lp_counters c = snapshot();
    assert_int_equal(c.live[LP_CAT_TEMPORARY] - before.live[LP_CAT_TEMPORARY], THREADS * 100);
    for (int i = 0; i < THREADS; i++)
        lp_free(bufs[i], 100, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    assert_int_equal(snapshot().live[LP_CAT_TEMPORARY], before.live[LP_CAT_TEMPORARY]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_category_names),
        cmocka_unit_test(test_counters_alloc_free_retag),
        cmocka_unit_test(test_peak_and_reset),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_listener_sees_events_in_order),
        cmocka_unit_test(test_unbalanced_pop_is_ignored),
        cmocka_unit_test(test_counters_exact_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
