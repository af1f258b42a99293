/* Grad modes: nesting, enable_grad inside no_grad, set_grad_enabled, thread-locality,
 * inference mode and inference tensors, the regions they report, and GRADPROF_GRAD_DEFAULT (read
 * by each thread on its first use, so each case runs in a new thread). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- GRADPROF_GRAD_DEFAULT ------------------------------------------------------------------- */

typedef struct start_seen {
    bool initial;        /* tn_is_grad_enabled() first thing in the thread */
    bool records_graph;  /* an op on a leaf that requires grad recorded a node */
    bool tagged;         /* the listener saw the thread's first tensor allocation */
    bool tag_grad;       /* ... and the grad flag of its tag */
    bool enable_grad;    /* inside tn_enable_grad_begin */
    bool enable_records; /* ... and an op there recorded a node */
    bool after_scope;    /* after tn_grad_mode_end */
    bool set_previous;   /* tn_set_grad_enabled(true) returned */
    bool no_grad_end;    /* after a no_grad scope inside, back to the start */
    bool inference;      /* tn_is_inference_mode_enabled() at the start */
} start_seen;

static _Thread_local start_seen *listen_into;
static _Thread_local bool listen_first;

static void on_alloc(const lp_event *ev, void *user)
{
    if (ev->kind == LP_EV_ALLOC && listen_into && !listen_first) {
        listen_first = true;
        listen_into->tagged = true;
        listen_into->tag_grad = ev->tag->grad_enabled;
    }
}

/* Everything a thread sees of its start mode; the first grad-mode use is tn_full in leaf(). */
static void *start_body(void *arg)
{
    start_seen *s = arg;
    listen_into = s;
    tn_tensor *x = leaf();
    listen_into = NULL;
    s->initial = tn_is_grad_enabled();
    s->inference = tn_is_inference_mode_enabled();
    tn_tensor *a = tn_exp(x);
    s->records_graph = tn_grad_fn_name(a) != NULL;
    tn_grad_mode en = tn_enable_grad_begin();
    s->enable_grad = tn_is_grad_enabled();
    tn_tensor *b = tn_exp(x);
    s->enable_records = tn_grad_fn_name(b) != NULL;
    tn_grad_mode_end(en);
    s->after_scope = tn_is_grad_enabled();
    tn_grad_mode ng = tn_no_grad_begin();
    tn_grad_mode_end(ng);
    s->no_grad_end = tn_is_grad_enabled();
    s->set_previous = tn_set_grad_enabled(true);
    tn_release(b);
    tn_release(a);
    tn_release(x);
    return NULL;
}

/* Runs start_body in a new thread with GRADPROF_GRAD_DEFAULT = value (NULL: unset). */
static start_seen start_in_thread(const char *value)
{
    if (value)
        assert_int_equal(setenv("GRADPROF_GRAD_DEFAULT", value, 1), 0);
    else
        assert_int_equal(unsetenv("GRADPROF_GRAD_DEFAULT"), 0);
    start_seen s;
    memset(&s, 0, sizeof s);
    lp_set_listener(on_alloc, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, start_body, &s), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    lp_set_listener(NULL, NULL);
    assert_int_equal(unsetenv("GRADPROF_GRAD_DEFAULT"), 0);
    return s;
}

static void test_default_off(void **state)
{
    assert_true(tn_is_grad_enabled()); /* this thread started before the variable was set */
    start_seen s = start_in_thread("off");
    assert_false(s.initial);
    assert_false(s.inference);
    assert_true(s.tagged);
    assert_false(s.tag_grad); /* the first allocation is already tagged grad off */
    assert_false(s.records_graph);
    assert_true(s.enable_grad);
    assert_true(s.enable_records);
    assert_false(s.after_scope);
    assert_false(s.no_grad_end);
    assert_false(s.set_previous);
    assert_true(tn_is_grad_enabled()); /* still untouched here */
}

static void test_default_on(void **state)
{
    const char *const values[] = {"on", "", NULL};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        start_seen s = start_in_thread(values[i]);
        assert_true(s.initial);
        assert_true(s.tagged);
        assert_true(s.tag_grad);
        assert_true(s.records_graph);
        assert_true(s.after_scope);
        assert_true(s.no_grad_end);
        assert_true(s.set_previous);
    }
}

/* Reads what was written to the file behind fd into buf (NUL-terminated). */
static void read_back(int fd, char *buf, size_t size)
{
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    ssize_t n = read(fd, buf, size - 1);
    assert_true(n >= 0);
    buf[n] = '\0';
}

static void test_default_bad_value(void **state)
{
    char path[] = "/tmp/gradprof_test_grad_mode.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    /* Two threads, two bad values: grad on in both, one warning per process. */
    start_seen a = start_in_thread("Off");
    start_seen b = start_in_thread("0");
    fflush(stderr);
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    char text[1024];
    read_back(fd, text, sizeof text);
    close(fd);
    assert_true(a.initial);
    assert_true(a.records_graph);
    assert_true(b.initial);
    assert_string_equal(text, "gradprof: GRADPROF_GRAD_DEFAULT='Off' is not 'on' or 'off'; "
                              "using on\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_grad_enabled_returns_previous),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_thread_local),
        cmocka_unit_test(test_inference_mode),
        cmocka_unit_test(test_scopes_report_regions),
        cmocka_unit_test(test_default_off),
        cmocka_unit_test(test_default_on),
        cmocka_unit_test(test_default_bad_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
