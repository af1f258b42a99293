/*
 * The recorder in-process (libprof.so linked, no interposer): every API event round-trips through
 * a real trace file with exact fields; deterministic stacks through a test unwinder; threads; the
 * tensor library's tags; fork; file creation rules; damage recovery on a real trace; the trace's
 * descriptor out of the way and surviving the program's descriptor games; strictly increasing
 * times, and stamps from the TSC that never run ahead of the clock.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "gradprof/libprof.h"
#include "gradprof/tensor.h"
#include "gradprof/trace_format.h"
#include "gradprof/trace.h"
#include "analysis.h"
#include "tsc_clock.h"

static char tmpdir[256];

static int setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gp_recorder_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void start(const char *name, lp_options *o)
{
    lp_options_default(o);
    snprintf(o->output, sizeof o->output, "%s/%s", tmpdir, name);
    o->flush_ms = 50; /* short, but long enough that a loaded machine keeps the time order */
    assert_int_equal(lp_start(o), 0);
    assert_true(lp_is_recording());
}

/* Stops recording and opens the trace that was written. */
static gp_trace *stop_and_open(char *path, size_t size)
{
    snprintf(path, size, "%s", lp_output_path());
    lp_stop();
    assert_false(lp_is_recording());
    gp_trace *t = NULL;
    char err[512];
    if (gp_trace_open(path, &t, err, sizeof err) != 0)
        fail_msg("%s", err);
    return t;
}

static int next(gp_trace *t, gp_event *ev)
{
    char err[256];
    int r = gp_trace_next(t, ev, err, sizeof err);
    if (r < 0)
        fail_msg("%s", err);
    return r;
}

/* A fixed three-frame stack: addresses inside three functions of this program. */
static void frame_a(void) {}
static void frame_b(void) {}
static void frame_c(void) {}
static int fixed_unwinder(void **ips, int max, void *user)
{
    void *fixed[3] = {(char *)frame_c + 1, (char *)frame_b + 2, (char *)frame_a + 3};
    int n = max < 3 ? max : 3;
    memcpy(ips, fixed, (size_t)n * sizeof *ips);
    return n;
}

static void test_api_events_round_trip(void **state)
{
    lp_set_unwinder(fixed_unwinder, NULL);
    lp_options o;
    start("api.gptrace", &o);
    static char buf[4][64] __attribute__((aligned(16)));
    lp_thread_name("main-test");
    lp_region_push("inference");
    lp_module_push("encoder.0");
    lp_mark("iter 0");
    lp_tag act = {LP_CAT_ACTIVATION, "relu", "encoder.0", "[2,32]", true};
    lp_alloc(buf[0], 256, LP_DEVICE_HOST, &act);
    lp_tag saved = act;
    saved.category = LP_CAT_SAVED;
    lp_retag(buf[0], 256, LP_DEVICE_HOST, LP_CAT_ACTIVATION, &saved);
    lp_tag grad = {LP_CAT_GRADIENT, "relu_backward", "encoder.0", NULL, false};
    lp_alloc(buf[1], 100, 2, &grad); /* cuda:2 */
    lp_grad_mode(false, true);
    lp_free(buf[1], 100, 2, LP_CAT_GRADIENT);
    lp_free(buf[0], 256, LP_DEVICE_HOST, LP_CAT_SAVED);
    lp_region_pop();
    lp_region_pop();
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    lp_set_unwinder(NULL, NULL);

    gp_event ev;
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_REGION_PUSH);
    assert_string_equal(ev.name, "inference");
    assert_false(ev.module_region);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_REGION_PUSH);
    assert_string_equal(ev.name, "encoder.0");
    assert_true(ev.module_region); /* lp_module_push */
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_MARK);
    assert_string_equal(ev.name, "iter 0");

    assert_int_equal(next(t, &ev), 1); /* in-process: a TAG of a new address is the allocation */
    assert_int_equal(ev.kind, GP_EV_TAG);
    assert_int_equal(ev.addr, (uint64_t)(uintptr_t)buf[0]);
    assert_int_equal(ev.size, 256);
    assert_int_equal(ev.category, LP_CAT_ACTIVATION);
    assert_string_equal(ev.op, "relu");
    assert_string_equal(ev.module, "encoder.0");
    assert_string_equal(ev.detail, "[2,32]");
    assert_true(ev.grad_enabled);
    assert_int_equal(ev.device, LP_DEVICE_HOST);
    /* the stack is the fixed one, innermost first: c, b, a, as module + offset */
    uint32_t module, parent, id = ev.stack;
    uint64_t offset;
    void *fns[3] = {(char *)frame_c + 1, (char *)frame_b + 2, (char *)frame_a + 3};
    Dl_info self;
    assert_true(dladdr((void *)frame_a, &self) != 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gp_trace_stack_frame(t, id, &module, &offset, &parent), 0);
        const gp_module *m = gp_trace_module(t, module);
        assert_non_null(m);
        assert_int_equal(offset, (uint64_t)((uintptr_t)fns[i] - (uintptr_t)self.dli_fbase));
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[n > 0 ? n : 0] = '\0';
        assert_string_equal(m->path, exe);
        id = parent;
    }
    assert_int_equal(parent, 0);

    assert_int_equal(next(t, &ev), 1); /* the retag */
    assert_int_equal(ev.kind, GP_EV_TAG);
    assert_int_equal(ev.category, LP_CAT_SAVED);
    assert_int_equal(ev.stack, 0);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_TAG);
    assert_int_equal(ev.device, 2);
    assert_int_equal(ev.category, LP_CAT_GRADIENT);
    assert_false(ev.grad_enabled);
    assert_string_equal(ev.detail, "");
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_GRAD_MODE);
    assert_false(ev.grad_enabled);
    assert_true(ev.inference);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_FREE);
    assert_int_equal(ev.device, 2);
    assert_int_equal(ev.addr, (uint64_t)(uintptr_t)buf[1]);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_FREE);
    assert_int_equal(ev.addr, (uint64_t)(uintptr_t)buf[0]);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_REGION_POP);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_REGION_POP);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_END);
    assert_int_equal(next(t, &ev), 0);

    const gp_trace_info *info = gp_trace_info_get(t);
    assert_true(info->clean_end);
    assert_false(info->damaged);
    assert_string_equal(gp_trace_thread_name(t, ev.thread), "main-test");
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    assert_string_equal(gp_trace_meta(t, "pid"), pid);
    assert_string_equal(gp_trace_meta(t, "mode"), "in-process");
    assert_int_equal(gp_trace_thread_os_tid(t, ev.thread), getpid()); /* the main thread */
    assert_string_equal(gp_trace_meta(t, "flush_interval_ns"), "50000000");
    assert_non_null(strstr(gp_trace_meta(t, "command"), "test_recorder"));
    gp_trace_close(t);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

/* What a listener saw of lp_note. */
typedef struct note_seen {
    int notes;
    char key[32];
    size_t value_len;
} note_seen;

static void on_note(const lp_event *ev, void *user)
{
    note_seen *n = user;
    if (ev->kind != LP_EV_NOTE)
        return;
    n->notes++;
    snprintf(n->key, sizeof n->key, "%s", ev->name);
    n->value_len = strlen(ev->value);
}

/* lp_note: recorder -> reader -> replay engine. Values up to 64 KiB whole (a long one as a chunk
 * of its own), a longer one cut on a character boundary and saying so; the listener gets the
 * whole value; notes keep their place in time among the other events. */
static void test_notes_round_trip(void **state)
{
    enum { BIG = LP_NOTE_MAX_VALUE, HUGE = LP_NOTE_MAX_VALUE + 1000 };
    char *big = malloc(BIG + 1), *huge = malloc(HUGE + 1);
    assert_non_null(big);
    assert_non_null(huge);
    memset(big, 'b', BIG);
    big[BIG] = '\0';
    for (size_t i = 0; i + 2 <= HUGE; i += 2) /* "é" (two bytes) over and over */
        memcpy(huge + i, "\xc3\xa9", 2);
    huge[HUGE] = '\0';

    note_seen seen = {0};
    lp_set_listener(on_note, &seen);
    lp_options o;
    start("notes.gptrace", &o);
    lp_mark("before");
    lp_note("holder", "loss_history (list) holds 3 graphs");
    lp_note("autograd_error", NULL);
    lp_note("big", big);
    lp_note("huge", huge);
    lp_mark("after");
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    lp_set_listener(NULL, NULL);
    assert_int_equal(seen.notes, 4);
    assert_string_equal(seen.key, "huge");
    assert_int_equal(seen.value_len, HUGE);

    char cut[64];
    snprintf(cut, sizeof cut, " [cut: %d bytes]", HUGE);
    gp_event ev;
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_MARK);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_NOTE);
    assert_string_equal(ev.name, "holder");
    assert_string_equal(ev.detail, "loss_history (list) holds 3 graphs");
    uint64_t t0 = ev.time_ns;
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_NOTE);
    assert_string_equal(ev.name, "autograd_error");
    assert_string_equal(ev.detail, "");
    assert_true(ev.time_ns > t0);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_NOTE);
    assert_string_equal(ev.name, "big");
    assert_string_equal(ev.detail, big);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_NOTE);
    assert_string_equal(ev.name, "huge");
    size_t len = strlen(ev.detail), tail = strlen(cut);
    assert_true(len <= LP_NOTE_MAX_VALUE);
    assert_true(len > LP_NOTE_MAX_VALUE - tail - 2);
    assert_string_equal(ev.detail + len - tail, cut);
    assert_int_equal((len - tail) % 2, 0); /* whole characters only */
    assert_memory_equal(ev.detail, huge, len - tail);
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_MARK);
    assert_string_equal(ev.name, "after");
    assert_int_equal(next(t, &ev), 1);
    assert_int_equal(ev.kind, GP_EV_END);
    assert_false(gp_trace_info_get(t)->damaged);
    assert_int_equal(gp_trace_info_get(t)->version_minor, GP_VERSION_MINOR);
    gp_trace_close(t);

    /* The replay engine keeps them, in time order, strings owned by the profile's trace. */
    gp_analysis_options opts;
    gp_analysis_options_default(&opts);
    gp_profile *p = NULL;
    char err[512];
    if (gp_profile_load(path, &opts, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(p->n_notes, 4);
    assert_int_equal(p->notes_dropped, 0);
    assert_string_equal(p->notes[0].key, "holder");
    assert_string_equal(p->notes[0].value, "loss_history (list) holds 3 graphs");
    assert_string_equal(p->notes[2].value, big);
    assert_true(p->notes[1].time_ns > p->notes[0].time_ns);
    assert_int_equal(p->notes[3].thread, p->notes[0].thread);
    gp_profile_free(p);
    free(big);
    free(huge);
}

/* Past GP_MAX_NOTES the engine counts instead of keeping. */
static void test_notes_cap(void **state)
{
    lp_options o;
    start("notes_cap.gptrace", &o);
    for (int i = 0; i < GP_MAX_NOTES + 25; i++)
        lp_note("n", "v");
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_trace_close(t);
    gp_analysis_options opts;
    gp_analysis_options_default(&opts);
    gp_profile *p = NULL;
    char err[512];
    if (gp_profile_load(path, &opts, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(p->n_notes, GP_MAX_NOTES);
    assert_int_equal(p->notes_dropped, 25);
    gp_profile_free(p);
}

enum { THREADS = 4, PER_THREAD = 20000 };

static void *worker(void *arg)
{
    long k = (long)arg;
    char name[16];
    snprintf(name, sizeof name, "worker%ld", k);
    lp_thread_name(name);
    lp_tag tag = {LP_CAT_TEMPORARY, "scratch", "", NULL, false};
    for (int i = 0; i < PER_THREAD; i++) {
        void *p = malloc(48);
        lp_alloc(p, 48, LP_DEVICE_HOST, &tag);
        if (i % 5000 == 0)
            usleep(2000);
        lp_free(p, 48, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
        free(p);
    }
    return NULL;
}

static void test_threads_exact_counts_in_time_order(void **state)
{
    lp_options o;
    start("threads.gptrace", &o);
    pthread_t th[THREADS];
    for (long k = 0; k < THREADS; k++)
        assert_int_equal(pthread_create(&th[k], NULL, worker, (void *)k), 0);
    for (int k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_event ev;
    uint64_t allocs = 0, frees = 0, last = 0, disorder = 0;
    uint64_t per_thread[64] = {0};
    while (next(t, &ev) == 1) {
        if (ev.time_ns < last)
            disorder++;
        last = ev.time_ns;
        if (ev.kind == GP_EV_TAG) {
            allocs++;
            assert_string_equal(ev.op, "scratch");
            if (ev.thread < 64)
                per_thread[ev.thread]++;
        } else if (ev.kind == GP_EV_FREE) {
            frees++;
        }
    }
    assert_int_equal(allocs, THREADS * PER_THREAD);
    assert_int_equal(frees, THREADS * PER_THREAD);
    assert_int_equal(disorder, 0);
    int named = 0;
    for (uint32_t i = 1; i <= gp_trace_thread_count(t); i++) {
        const char *n = gp_trace_thread_name(t, i);
        if (n && !strncmp(n, "worker", 6)) {
            named++;
            assert_int_equal(per_thread[i], PER_THREAD);
        }
    }
    assert_int_equal(named, THREADS);
    assert_true(gp_trace_info_get(t)->clean_end);
    gp_trace_close(t);
}

static void test_tensor_library_tags(void **state)
{
    lp_options o;
    start("tensor.gptrace", &o);
    tn_manual_seed(1);
    tn_module *net = tn_sequential_new();
    tn_sequential_append(net, tn_linear_new(16, 16, true));
    tn_sequential_append(net, tn_relu_new());
    tn_sequential_append(net, tn_linear_new(16, 16, true));
    tn_module_set_name(net, "mlp");
    tn_tensor *x = tn_randn(2, (const int64_t[]){4, 16}, LP_CAT_INPUT);
    tn_tensor *y = tn_module_forward(net, x);
    assert_non_null(y);
    tn_release(y);
    tn_grad_mode prev = tn_no_grad_begin();
    y = tn_module_forward(net, x);
    tn_grad_mode_end(prev);
    tn_release(y);
    tn_release(x);
    tn_module_free(net);
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_event ev;
    int saved = 0, unsaved = 0, autograd = 0, grad_off = 0, regions = 0;
    while (next(t, &ev) == 1) {
        if (ev.kind == GP_EV_TAG && ev.category == LP_CAT_SAVED) {
            saved++;
            assert_string_equal(ev.op, "relu");
            assert_string_equal(ev.module, "mlp.1");
            assert_string_equal(ev.detail, "[4,16]");
        } else if (ev.kind == GP_EV_TAG && ev.category == LP_CAT_ACTIVATION &&
                   !strcmp(ev.op, "relu") && ev.size == 4 * 16 * 4) {
            unsaved++; /* birth, and the retag back when the graph let go */
        } else if (ev.kind == GP_EV_TAG && ev.category == LP_CAT_AUTOGRAD) {
            autograd++;
        } else if (ev.kind == GP_EV_GRAD_MODE && !ev.grad_enabled) {
            grad_off++;
        } else if (ev.kind == GP_EV_REGION_PUSH && !strcmp(ev.name, "mlp.1")) {
            assert_true(ev.module_region); /* a module's forward */
            regions++;
        }
    }
    assert_int_equal(saved, 1);     /* relu saved its output once, under grad */
    assert_int_equal(unsaved, 3);   /* two births and one release */
    assert_true(autograd >= 3);     /* at least the three forward nodes */
    assert_int_equal(grad_off, 1);  /* the no_grad scope */
    assert_int_equal(regions, 2);   /* both forwards entered mlp.1 */
    gp_trace_close(t);
}

static void test_existing_file_and_symlink_are_not_overwritten(void **state)
{
    char taken[512], target[512], link[512];
    snprintf(taken, sizeof taken, "%s/taken.gptrace", tmpdir);
    FILE *f = fopen(taken, "w");
    fputs("precious", f);
    fclose(f);
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s", taken);
    assert_int_equal(lp_start(&o), 0);
    char expect[600];
    snprintf(expect, sizeof expect, "%s.1", taken);
    assert_string_equal(lp_output_path(), expect);
    lp_stop();
    f = fopen(taken, "r");
    char buf[16] = "";
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "precious");

    snprintf(target, sizeof target, "%s/target", tmpdir);
    snprintf(link, sizeof link, "%s/link.gptrace", tmpdir);
    assert_int_equal(symlink(target, link), 0);
    snprintf(o.output, sizeof o.output, "%s", link);
    assert_int_equal(lp_start(&o), 0);
    snprintf(expect, sizeof expect, "%s.1", link);
    assert_string_equal(lp_output_path(), expect);
    lp_stop();
    struct stat st;
    assert_int_equal(stat(target, &st), -1); /* the symlink was not followed */
}

static void test_unwritable_output_is_refused(void **state)
{
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s/no/such/dir/t.gptrace", tmpdir);
    assert_int_equal(lp_start(&o), -1);
    assert_false(lp_is_recording());
    lp_alloc(tmpdir, 1, LP_DEVICE_HOST, &(lp_tag){LP_CAT_OTHER, "", "", NULL, false});
    lp_free(tmpdir, 1, LP_DEVICE_HOST, LP_CAT_OTHER);
}

static void test_fork_child_writes_its_own_trace(void **state)
{
#if defined(__SANITIZE_THREAD__)
    /* TSan cannot follow this: the child starts its own flusher thread after a fork of a
     * threaded process, which TSan refuses ("dup thread with used id"). The other builds run it. */
    skip();
#endif
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s/fork.%%p.gptrace", tmpdir);
    assert_int_equal(lp_start(&o), 0);
    lp_tag tag = {LP_CAT_INPUT, "parent_op", "", NULL, false};
    static char a[16], b[16];
    lp_alloc(a, 16, LP_DEVICE_HOST, &tag);
    pid_t pid = fork();
    if (pid == 0) {
        lp_tag ct = {LP_CAT_INPUT, "child_op", "", NULL, false};
        lp_alloc(b, 16, LP_DEVICE_HOST, &ct);
        lp_stop();
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char parent_path[4096];
    gp_trace *t = stop_and_open(parent_path, sizeof parent_path);
    gp_event ev;
    int parent_ops = 0, child_ops = 0;
    while (next(t, &ev) == 1)
        if (ev.kind == GP_EV_TAG)
            *(!strcmp(ev.op, "parent_op") ? &parent_ops : &child_ops) += 1;
    gp_trace_close(t);
    assert_int_equal(parent_ops, 1);
    assert_int_equal(child_ops, 0);

    char child_path[600];
    snprintf(child_path, sizeof child_path, "%s/fork.%d.gptrace", tmpdir, (int)pid);
    char err[512];
    if (gp_trace_open(child_path, &t, err, sizeof err) != 0)
        fail_msg("%s", err);
    parent_ops = child_ops = 0;
    while (next(t, &ev) == 1)
        if (ev.kind == GP_EV_TAG)
            *(!strcmp(ev.op, "child_op") ? &child_ops : &parent_ops) += 1;
    char pidstr[32];
    snprintf(pidstr, sizeof pidstr, "%d", (int)pid);
    assert_string_equal(gp_trace_meta(t, "pid"), pidstr);
    assert_true(gp_trace_info_get(t)->clean_end);
    gp_trace_close(t);
    assert_int_equal(child_ops, 1);
    assert_int_equal(parent_ops, 0);
}

static void test_stack_sampling_keeps_every_event(void **state)
{
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s/sample.gptrace", tmpdir);
    o.stack_sample_bytes = 64 * 1024; /* about one stack per 1000 allocations of 64 bytes */
    assert_int_equal(lp_start(&o), 0);
    lp_tag tag = {LP_CAT_TEMPORARY, "s", "", NULL, false};
    static char x[16];
    for (int i = 0; i < 100000; i++) {
        lp_alloc(x, 64, LP_DEVICE_HOST, &tag);
        lp_free(x, 64, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    }
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_event ev;
    int allocs = 0, stacked = 0;
    while (next(t, &ev) == 1)
        if (ev.kind == GP_EV_TAG) {
            allocs++;
            stacked += ev.stack != 0;
        }
    gp_trace_close(t);
    assert_int_equal(allocs, 100000);
    assert_true(stacked > 50 && stacked < 200); /* mean 100 */
}

static void test_truncated_real_trace_recovers_prefix(void **state)
{
    lp_options o;
    start("trunc.gptrace", &o);
    lp_tag tag = {LP_CAT_TEMPORARY, "t", "", NULL, false};
    static char x[16];
    for (int i = 0; i < 50000; i++) {
        lp_alloc(x, 32, LP_DEVICE_HOST, &tag);
        lp_free(x, 32, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    }
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_trace_close(t);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    uint64_t previous = UINT64_MAX;
    for (int cut = 1; cut <= 4; cut++) {
        off_t len = st.st_size * (5 - cut) / 5 - 7;
        assert_int_equal(truncate(path, len), 0);
        char err[512];
        if (gp_trace_open(path, &t, err, sizeof err) != 0)
            fail_msg("%s", err);
        gp_event ev;
        uint64_t n = 0;
        while (next(t, &ev) == 1)
            n++;
        const gp_trace_info *info = gp_trace_info_get(t);
        assert_true(info->damaged);
        assert_false(info->clean_end);
        assert_true(info->damage_offset + info->bytes_lost == (uint64_t)len);
        assert_true(n < previous && n > 0);
        previous = n;
        gp_trace_close(t);
    }
}

static void *probe_ip;
static int probe_unwinder(void **ips, int max, void *user)
{
    ips[0] = probe_ip;
    return max > 0 ? 1 : 0;
}

static void test_module_map_follows_dlopen(void **state)
{
    lp_options o;
    start("dlopen.gptrace", &o);
    void *lib = dlopen(GP_DLOPEN_LIB, RTLD_NOW);
    assert_non_null(lib);
    void *fn = dlsym(lib, "gp_dlopen_probe");
    assert_non_null(fn);
    probe_ip = (char *)fn + 1;
    lp_set_unwinder(probe_unwinder, NULL);
    static char x[16];
    lp_alloc(x, 16, LP_DEVICE_HOST, &(lp_tag){LP_CAT_OTHER, "probe", "", NULL, false});
    lp_set_unwinder(NULL, NULL);
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_event ev;
    uint32_t stack = 0;
    while (next(t, &ev) == 1)
        if (ev.kind == GP_EV_TAG && !strcmp(ev.op, "probe"))
            stack = ev.stack;
    uint32_t module, parent;
    uint64_t offset;
    assert_int_equal(gp_trace_stack_frame(t, stack, &module, &offset, &parent), 0);
    const gp_module *m = gp_trace_module(t, module);
    assert_non_null(m);
    assert_string_equal(m->path, GP_DLOPEN_LIB);
    Dl_info info;
    assert_true(dladdr(fn, &info) != 0);
    assert_int_equal(offset, (uint64_t)((char *)probe_ip - (char *)info.dli_fbase));
    assert_true(strlen(m->build_id) == 40); /* GNU build-id, hex */
    gp_trace_close(t);
    dlclose(lib);
}


/* The descriptor /proc/self/fd says is open on `path`, or -1. */
static int fd_of(const char *path)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    int found = -1;
    struct dirent *e;
    char real[4096];
    assert_non_null(realpath(path, real));
    while ((e = readdir(d)) != NULL) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0)
            continue;
        target[n] = '\0';
        if (strcmp(target, real) == 0)
            found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

/* Counts the TAG events of op `op` (and checks the times of each thread strictly increase). */
static int count_op(gp_trace *t, const char *op)
{
    gp_event ev;
    int n = 0;
    uint64_t last[64] = {0};
    while (next(t, &ev) == 1) {
        if (ev.thread < 64) {
            if (last[ev.thread] != 0 && ev.time_ns <= last[ev.thread])
                fail_msg("thread %u: time %llu after %llu", ev.thread,
                         (unsigned long long)ev.time_ns, (unsigned long long)last[ev.thread]);
            last[ev.thread] = ev.time_ns;
        }
        n += ev.kind == GP_EV_TAG && !strcmp(ev.op, op);
    }
    return n;
}

/* The trace's descriptor sits high (>= 1000, or 64 under a low RLIMIT_NOFILE), close-on-exec,
 * out of the way of dup2(f, 3) and of the lowest free number. */
static void test_descriptor_is_out_of_the_way(void **state)
{
    lp_options o;
    start("fd_high.gptrace", &o);
    int fd = fd_of(lp_output_path());
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    long floor = rl.rlim_cur >= 1064 ? 1000 : (long)rl.rlim_cur - 64;
    if (fd < floor)
        fail_msg("the trace is on descriptor %d; want >= %ld", fd, floor);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    char path[4096];
    gp_trace_close(stop_and_open(path, sizeof path));
}

/* The program closes the trace's descriptor, then puts its own file on the number: the recorder
 * notices before its next write (fstat: another inode), opens the trace again by path, loses
 * nothing and writes nothing into the program's file. Also after a chdir (the path is kept
 * absolute). */
static void test_descriptor_closed_then_taken(void **state)
{
    lp_options o;
    start("fd_games.gptrace", &o);
    static char bufs[300][16] __attribute__((aligned(16)));
    lp_tag tag = {LP_CAT_TEMPORARY, "game", "", NULL, false};
    for (int i = 0; i < 100; i++)
        lp_alloc(bufs[i], 16, LP_DEVICE_HOST, &tag);
    int fd = fd_of(lp_output_path());
    assert_true(fd >= 0);
    assert_int_equal(close(fd), 0); /* a closefrom loop would do this */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir("/"), 0);
    for (int i = 100; i < 200; i++)
        lp_alloc(bufs[i], 16, LP_DEVICE_HOST, &tag);
    lp_flush(); /* reopens */
    int again = fd_of(lp_output_path());
    assert_true(again >= 0);
    char own[600];
    snprintf(own, sizeof own, "%s/own.txt", tmpdir);
    int mine = open(own, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(mine >= 0);
    assert_int_equal(dup2(mine, again), again); /* the program takes the trace's new number */
    for (int i = 200; i < 300; i++)
        lp_alloc(bufs[i], 16, LP_DEVICE_HOST, &tag);
    lp_flush();
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(count_op(t, "game"), 300);
    assert_true(gp_trace_info_get(t)->clean_end);
    assert_false(gp_trace_info_get(t)->damaged);
    assert_string_equal(gp_trace_meta(t, "end_reason"), "exit");
    gp_trace_close(t);
    struct stat st;
    assert_int_equal(stat(own, &st), 0);
    assert_int_equal(st.st_size, 0); /* not one byte of trace in the program's file */
    close(mine);
    close(again);
}

/* Records made faster than the clock ticks still get strictly increasing times per thread. */
static void test_times_strictly_increase(void **state)
{
    lp_options o;
    start("times.gptrace", &o);
    static char buf[16] __attribute__((aligned(16)));
    lp_tag tag = {LP_CAT_TEMPORARY, "tick", "", NULL, false};
    for (int i = 0; i < 20000; i++) {
        lp_alloc(buf, 16, LP_DEVICE_HOST, &tag);
        lp_free(buf, 16, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
    }
    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    assert_int_equal(count_op(t, "tick"), 20000);
    gp_trace_close(t);
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct {
    _Atomic(char *) handed; /* a block the first thread made, for the second to free */
    atomic_bool done;
} relay;

static void *free_what_is_handed(void *arg)
{
    (void)arg;
    for (;;) {
        /* done is read before the exchange: the last block, handed before done was set, is
         * then still taken (read after, done could hide a block handed in between) */
        bool done = atomic_load(&relay.done);
        char *p = atomic_exchange(&relay.handed, NULL);
        if (p) {
            lp_free(p, 16, LP_DEVICE_HOST, LP_CAT_TEMPORARY);
            continue;
        }
        if (done)
            return NULL;
    }
}

/*
 * Stamps while one thread records (read from the TSC where it is invariant, lp__event_time):
 * never later than the instant they stand for and at most a few microseconds before it. Then a
 * second thread frees blocks the first makes, one at a time: every free comes after its
 * allocation in the trace. With GRADPROF_TSC=0 (o.tsc) every stamp is an ordered read.
 */
static void check_stamps(bool tsc)
{
    enum { N = 200000, HANDED = 20000 };
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s/clock_%d.gptrace", tmpdir, (int)tsc);
    o.tsc = tsc;
    assert_int_equal(lp_start(&o), 0);
    uint64_t *before = malloc(N * sizeof *before), *after = malloc(N * sizeof *after);
    char *region = aligned_alloc(16, (size_t)(N + HANDED) * 16);
    assert_non_null(before);
    assert_non_null(after);
    assert_non_null(region);
    lp_tag tag = {LP_CAT_TEMPORARY, "clocked", "", NULL, false};
    for (int i = 0; i < N; i++) {
        before[i] = monotonic_ns();
        lp_alloc(region + 16 * (size_t)i, 16, LP_DEVICE_HOST, &tag);
        after[i] = monotonic_ns();
    }
    atomic_store(&relay.done, false);
    pthread_t other;
    assert_int_equal(pthread_create(&other, NULL, free_what_is_handed, NULL), 0);
    lp_tag handed_tag = {LP_CAT_TEMPORARY, "handed", "", NULL, false};
    for (int i = 0; i < HANDED; i++) {
        char *p = region + 16 * (size_t)(N + i);
        lp_alloc(p, 16, LP_DEVICE_HOST, &handed_tag);
        char *expected = NULL;
        while (!atomic_compare_exchange_weak(&relay.handed, &expected, p))
            expected = NULL;
    }
    atomic_store(&relay.done, true);
    pthread_join(other, NULL);

    char path[4096];
    gp_trace *t = stop_and_open(path, sizeof path);
    gp_event ev;
    int i = 0, frees = 0;
    uint64_t *stamp = malloc(N * sizeof *stamp); /* since the start, known once it is read */
    char *live = calloc(HANDED, 1);
    assert_non_null(stamp);
    assert_non_null(live);
    while (next(t, &ev) == 1) {
        if (ev.kind == GP_EV_TAG && !strcmp(ev.op, "clocked")) {
            assert_true(i < N);
            stamp[i++] = ev.time_ns;
        } else if (ev.kind == GP_EV_TAG && !strcmp(ev.op, "handed")) {
            live[(ev.addr - (uintptr_t)region) / 16 - N] = 1;
        } else if (ev.kind == GP_EV_FREE) {
            size_t k = (ev.addr - (uintptr_t)region) / 16 - N;
            assert_true(k < HANDED);
            if (!live[k])
                fail_msg("block %zu freed before its allocation", k);
            live[k] = 0;
            frees++;
        }
    }
    assert_int_equal(i, N);
    assert_int_equal(frees, HANDED);
    /* metadata is applied as the events are read: the end's "clock" is known now */
    const char *start_ns = gp_trace_meta(t, "start_monotonic_ns"), *clock = gp_trace_meta(t, "clock");
    assert_non_null(start_ns);
    assert_non_null(clock);
    assert_string_equal(clock, expected_clock(tsc));
    uint64_t origin = strtoull(start_ns, NULL, 10), worst_lag = 0;
    for (i = 0; i < N; i++) {
        uint64_t when = origin + stamp[i];
        if (when > after[i])
            fail_msg("event %d stamped %llu ns after the clock read that followed it", i,
                     (unsigned long long)(when - after[i]));
        if (when < before[i] && before[i] - when > worst_lag)
            worst_lag = before[i] - when;
    }
    if (worst_lag > 5000)
        fail_msg("a stamp %llu ns before the clock read that preceded it",
                 (unsigned long long)worst_lag);
    free(stamp);
    gp_trace_close(t);
    free(live);
    free(before);
    free(after);
    free(region);
}

static void test_stamps_follow_the_clock(void **state) { check_stamps(true); }
static void test_stamps_without_the_tsc(void **state) { check_stamps(false); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_events_round_trip),
        cmocka_unit_test(test_notes_round_trip),
        cmocka_unit_test(test_notes_cap),
        cmocka_unit_test(test_threads_exact_counts_in_time_order),
        cmocka_unit_test(test_tensor_library_tags),
        cmocka_unit_test(test_existing_file_and_symlink_are_not_overwritten),
        cmocka_unit_test(test_unwritable_output_is_refused),
        cmocka_unit_test(test_fork_child_writes_its_own_trace),
        cmocka_unit_test(test_stack_sampling_keeps_every_event),
        cmocka_unit_test(test_truncated_real_trace_recovers_prefix),
        cmocka_unit_test(test_module_map_follows_dlopen),
        cmocka_unit_test(test_descriptor_is_out_of_the_way),
        cmocka_unit_test(test_descriptor_closed_then_taken),
        cmocka_unit_test(test_times_strictly_increase),
        cmocka_unit_test(test_stamps_follow_the_clock),
        cmocka_unit_test(test_stamps_without_the_tsc),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
