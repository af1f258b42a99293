/*
 * The gradient-leak detectors through their engine hooks (tools/engine/detectors.h), without a
 * trace: each test hands them the facts a replay would and reads the findings they give the
 * profile. (test_analysis checks the same findings end to end, from traces.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "detectors.h"

/* Ends the replay: the findings into p (p->findings, n_findings). */
static void finish(gp__detectors *d, gp_profile *p)
{
    assert_int_equal(gp__detectors_finish(d, p), 0);
}

static void free_findings(gp_profile *p)
{
    for (size_t i = 0; i < p->n_findings; i++)
        free(p->findings[i].items);
    free(p->findings);
}

/* Graph memory inside no_grad is graph_without_grad; inside enable_grad or backward it is not. */
static void test_graph_without_grad(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    assert_non_null(d);
    gp__grad_context c = {.grad_off_depth = 1, .event_grad = true};
    gp__detect_graph_buffer(d, &c, LP_CAT_SAVED, "mul", "mlp.0", 7, 100, 1005, 5);
    gp__detect_graph_buffer(d, &c, LP_CAT_AUTOGRAD, "mul", "mlp.0", 7, 20, 1006, 6);
    gp__detect_graph_buffer(d, &c, LP_CAT_SAVED, "relu", "mlp.1", 8, 300, 1007, 7);
    c.grad_on_depth = 1; /* enable_grad inside no_grad: expected */
    gp__detect_graph_buffer(d, &c, LP_CAT_SAVED, "relu", "mlp.1", 8, 1000, 1008, 8);
    c.grad_on_depth = 0;
    c.backward_depth = 1;
    gp__detect_graph_buffer(d, &c, LP_CAT_GRADIENT, "", "", 9, 1000, 1009, 9);
    gp_profile p = {0};
    finish(d, &p);
    assert_false(oom);
    assert_int_equal(p.n_findings, 1);
    const gp_finding *f = &p.findings[0];
    assert_int_equal(f->kind, GP_FIND_GRAPH_WITHOUT_GRAD);
    assert_string_equal(f->region, LP_REGION_NO_GRAD);
    assert_int_equal(f->bytes, 420);
    assert_int_equal(f->count, 3);
    assert_int_equal(f->first_time_ns, 5);
    assert_int_equal(f->n_items, 3); /* per (category, op, module), largest first */
    assert_int_equal(f->items[0].bytes, 300);
    assert_string_equal(f->items[0].op, "relu");
    assert_int_equal(f->items[0].stack, 8);
    assert_int_equal(f->items[1].bytes, 100);
    assert_int_equal(f->items[2].category, LP_CAT_AUTOGRAD);
    free_findings(&p);
    gp__detectors_free(d);
}

/* In an inference region: a graph built with grad on is forgot_no_grad, a gradient is
 * param_grad_in_inference; with grad off (mode, scope or the event's flag) no graph is flagged. */
static void test_inference_region(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    gp__grad_context on = {.event_grad = true, .inference_region = "eval"};
    gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "linear", "fc", 1, 64, 1001, 1);
    gp__detect_graph_buffer(d, &on, LP_CAT_GRADIENT, "", "fc", 2, 32, 1002, 2);
    gp__grad_context off = on;
    off.mode_off = true;
    gp__detect_graph_buffer(d, &off, LP_CAT_SAVED, "linear", "fc", 1, 64, 1003, 3);
    off = on;
    off.event_grad = false;
    gp__detect_graph_buffer(d, &off, LP_CAT_AUTOGRAD, "linear", "fc", 1, 64, 1004, 4);
    gp_profile p = {0};
    finish(d, &p);
    assert_int_equal(p.n_findings, 2); /* by kind */
    assert_int_equal(p.findings[0].kind, GP_FIND_FORGOT_NO_GRAD);
    assert_string_equal(p.findings[0].region, "eval");
    assert_int_equal(p.findings[0].bytes, 64);
    assert_int_equal(p.findings[1].kind, GP_FIND_PARAM_GRAD_IN_INFERENCE);
    assert_int_equal(p.findings[1].bytes, 32);
    free_findings(&p);
    gp__detectors_free(d);
}

/* A graph built with grad on in an inference region and then used by a backward pass (input
 * gradients of a model in eval mode) was not forgotten: its buffers leave forgot_no_grad when
 * they leave their category inside backward; those that leave outside one stay counted. */
static void test_graph_used_by_backward(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    gp__grad_context on = {.event_grad = true, .inference_region = "inference"};
    assert_true(gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "relu", "net.1", 1, 100, 11, 1));
    assert_true(gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "relu", "net.1", 1, 200, 12, 2));
    assert_true(gp__detect_graph_buffer(d, &on, LP_CAT_AUTOGRAD, "mm", "net.2", 2, 30, 13, 3));
    gp__grad_context no_graph = on;
    no_graph.event_grad = false;
    assert_false(gp__detect_graph_buffer(d, &no_graph, LP_CAT_SAVED, "relu", "net.1", 1, 7, 14, 4));
    gp__detect_graph_left(d, 11, 100, true, true);  /* released by backward */
    gp__detect_graph_left(d, 12, 200, true, false); /* the output died: forgotten */
    gp__detect_graph_left(d, 13, 30, true, true);
    gp__detect_graph_left(d, 13, 30, true, true); /* once only */
    gp__detect_graph_left(d, 99, 5, true, true);  /* never counted */
    gp_profile p = {0};
    finish(d, &p);
    assert_false(oom);
    assert_int_equal(p.n_findings, 1);
    assert_int_equal(p.findings[0].kind, GP_FIND_FORGOT_NO_GRAD);
    assert_int_equal(p.findings[0].bytes, 200);
    assert_int_equal(p.findings[0].count, 1);
    assert_int_equal(p.findings[0].n_items, 1); /* mm's item is left empty: dropped */
    assert_string_equal(p.findings[0].items[0].op, "relu");
    assert_int_equal(p.findings[0].items[0].bytes, 200);
    free_findings(&p);
    gp__detectors_free(d);

    /* All of it used by backward: no finding at all. */
    d = gp__detectors_new(64 << 10, &oom);
    assert_true(gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "relu", "net.1", 1, 100, 21, 1));
    gp__detect_graph_left(d, 21, 100, true, true);
    p = (gp_profile){0};
    finish(d, &p);
    assert_int_equal(p.n_findings, 0);
    free_findings(&p);
    gp__detectors_free(d);
}

/* Outside every inference region, the saved tensors of a run that iterated and never ran
 * backward are forgot_no_grad of the whole run (region ""): an evaluation whose model was never
 * put in eval mode. Not when a backward pass ran, with one iteration, or when an inference region
 * already has the finding; graph nodes (a frame rule can make those) never count. */
static void run_whole(size_t marks, bool backward, bool inference, gp_profile *p)
{
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    gp__grad_context on = {.event_grad = true};
    gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "aten::relu", "ResNet.relu", 3, 4096, 1, 10);
    gp__detect_graph_buffer(d, &on, LP_CAT_AUTOGRAD, "", "ResNet", 4, 512, 2, 11);
    gp__detect_graph_buffer(d, &on, LP_CAT_SAVED, "aten::relu", "ResNet.relu", 3, 4096, 3, 12);
    gp__detect_graph_left(d, 1, 4096, true, false); /* freed with its graph, no backward: stays */
    if (inference) {
        gp__grad_context inf = {.event_grad = true, .inference_region = "inference"};
        gp__detect_graph_buffer(d, &inf, LP_CAT_SAVED, "aten::addmm", "fc", 5, 64, 4, 13);
    }
    static gp_region_stats regions[] = {{.name = LP_REGION_BACKWARD, .entries = 1}};
    *p = (gp_profile){.n_iterations = marks, .regions = regions, .n_regions = backward};
    finish(d, p);
    assert_false(oom);
    gp__detectors_free(d);
}

static void test_whole_run(void **state)
{
    (void)state;
    gp_profile p;
    run_whole(2, false, false, &p);
    assert_int_equal(p.n_findings, 1);
    const gp_finding *f = &p.findings[0];
    assert_int_equal(f->kind, GP_FIND_FORGOT_NO_GRAD);
    assert_string_equal(f->region, "");
    assert_int_equal(f->bytes, 8192); /* the saved buffers, not the graph node */
    assert_int_equal(f->count, 2);
    assert_int_equal(f->peak_bytes, 8192);
    assert_int_equal(f->n_items, 1);
    assert_int_equal(f->first_time_ns, 10);
    free_findings(&p);
    run_whole(2, true, false, &p); /* the program ran backward: its graphs may be training's */
    assert_int_equal(p.n_findings, 0);
    free_findings(&p);
    run_whole(1, false, false, &p); /* one iteration: a training step that did not get there */
    assert_int_equal(p.n_findings, 0);
    free_findings(&p);
    run_whole(2, false, true, &p); /* an inference region says it */
    assert_int_equal(p.n_findings, 1);
    assert_string_equal(p.findings[0].region, "inference");
    assert_int_equal(p.findings[0].bytes, 64);
    free_findings(&p);
}

/* The escape detector asks for items for its first 64 escapes, then counts the bytes itself. */
static void test_escape_bounded(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    for (int i = 0; i < 70; i++) {
        bool items = gp__detect_escape(d, "inference", 10, (uint64_t)i);
        assert_int_equal(items, i < 64);
        if (items)
            gp__detect_escape_item(d, "inference", LP_CAT_SAVED, "mm", "head", 3, 10, (uint64_t)i);
    }
    gp_profile p = {0};
    finish(d, &p);
    assert_int_equal(p.n_findings, 1);
    assert_int_equal(p.findings[0].kind, GP_FIND_GRAPH_ESCAPES);
    assert_int_equal(p.findings[0].count, 70);
    assert_int_equal(p.findings[0].bytes, 700);
    assert_int_equal(p.findings[0].n_items, 1);
    assert_int_equal(p.findings[0].items[0].count, 64);
    free_findings(&p);
    gp__detectors_free(d);
}

/* Growth: graph memory at the marks after the first grows by more than the threshold in at least
 * 3/4 of the intervals; the items are the graph tag keys that grew, with their top site's stack. */
static void test_growth(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(1000, &oom);
    gp_site sites[1] = {{.stack = 42}};
    gp_tag_key keys[2] = {
        {.category = LP_CAT_SAVED, .op = "add", .module = "", .top_site = 0},
        {.category = LP_CAT_ACTIVATION, .op = "add", .module = "", .top_site = UINT32_MAX}};
    gp_iteration its[5] = {{0}};
    gp_profile p = {
        .sites = sites, .n_sites = 1, .tag_keys = keys, .n_tag_keys = 2, .iterations = its};
    for (size_t m = 0; m < 5; m++) {
        keys[0].stats.live_bytes = 1000 * m;
        keys[1].stats.live_bytes = 5000 * m; /* not graph memory: not an item */
        its[m].time_ns = 10 * m;
        its[m].live_by_category[LP_CAT_SAVED] = 1000 * m;
        p.n_iterations = m + 1;
        gp__detect_mark(d, &p);
    }
    finish(d, &p);
    assert_false(oom);
    assert_int_equal(p.n_findings, 1);
    const gp_finding *f = &p.findings[0];
    assert_int_equal(f->kind, GP_FIND_GROWTH);
    assert_int_equal(f->bytes, 3000); /* from the mark after the warm-up to the last */
    assert_int_equal(f->count, 3);
    assert_int_equal(f->first_time_ns, 10);
    assert_int_equal(f->n_items, 1);
    assert_int_equal(f->items[0].bytes, 3000);
    assert_int_equal(f->items[0].stack, 42);
    free_findings(&p);
    gp__detectors_free(d);

    /* the same growth under the threshold is no finding */
    d = gp__detectors_new(5000, &oom);
    gp_profile q = p;
    q.findings = NULL;
    q.n_findings = 0;
    q.n_iterations = 0;
    for (size_t m = 0; m < 5; m++) {
        q.n_iterations = m + 1;
        gp__detect_mark(d, &q);
    }
    finish(d, &q);
    assert_int_equal(q.n_findings, 0);
    free_findings(&q);
    gp__detectors_free(d);

    /* the same growth, taken back by a backward pass after the last mark (REINFORCE keeps each
     * step's graph to the end of its episode): graph buffers born before that mark and released
     * inside backward, at least half the growth, make it no finding; those born after the mark,
     * or released outside backward, do not count */
    for (int used = 0; used < 2; used++) {
        d = gp__detectors_new(1000, &oom);
        q.findings = NULL;
        q.n_findings = q.n_iterations = 0;
        for (size_t m = 0; m < 5; m++) {
            q.n_iterations = m + 1;
            q.alloc_count = 100 * m;
            gp__detect_mark(d, &q);
        }
        gp__detect_graph_left(d, 350, 1000, false, true);
        gp__detect_graph_left(d, 401, 5000, false, true);  /* born after the last mark */
        gp__detect_graph_left(d, 360, 5000, false, false); /* not inside backward */
        if (used)
            gp__detect_graph_left(d, 370, 500, false, true); /* 1500 of 3000: half */
        finish(d, &q);
        assert_int_equal(q.n_findings, used ? 0 : 1);
        free_findings(&q);
        gp__detectors_free(d);
    }
}

/* autograd_error: one item per (op, module); the first error's kind, message and where. */
static void test_autograd_error(void **state)
{
    (void)state;
    bool oom = false;
    gp__detectors *d = gp__detectors_new(64 << 10, &oom);
    const char *first[5] = {"inplace", "one of the variables was modified", "relu_", "act",
                            "eval.py:10"};
    const char *second[5] = {"inference_tensor", "Inference tensors cannot be saved", "mm", "fc",
                             "eval.py:20"};
    gp__detect_autograd_error(d, first, 3);
    gp__detect_autograd_error(d, second, 4);
    gp_profile p = {0};
    finish(d, &p);
    assert_int_equal(p.n_findings, 1);
    const gp_finding *f = &p.findings[0];
    assert_int_equal(f->kind, GP_FIND_AUTOGRAD_ERROR);
    assert_int_equal(f->count, 2);
    assert_int_equal(f->n_items, 2);
    assert_string_equal(f->error_kind, "inplace");
    assert_string_equal(f->where, "eval.py:10");
    assert_int_equal(f->first_time_ns, 3);
    free_findings(&p);
    gp__detectors_free(d);
    gp__detectors_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_graph_without_grad),     cmocka_unit_test(test_inference_region),
        cmocka_unit_test(test_graph_used_by_backward), cmocka_unit_test(test_whole_run),
        cmocka_unit_test(test_escape_bounded),         cmocka_unit_test(test_growth),
        cmocka_unit_test(test_autograd_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
