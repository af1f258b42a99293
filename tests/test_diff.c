/*
 * gradprof diff, end to end: the diff arithmetic on the fixture traces of traces/make_traces.c
 * (called as a library: gp_diff_load), and the `gradprof diff` command run
 * as a subprocess (golden outputs, exit codes, error messages).
 *
 * Golden files: tests/golden/diff_*. They are compared byte for byte; run the test with
 * GRADPROF_UPDATE_GOLDEN=1 in the environment to rewrite them from the current output instead
 * (then review the change with git diff).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "diff.h"

#include "e2e.h"
#include "traces/trace_builder.h"

#ifndef GRADPROF_BIN
#error "GRADPROF_BIN (the gradprof executable) must be defined"
#endif
#ifndef GRADPROF_TEST_TRACES
#error "GRADPROF_TEST_TRACES (the fixture trace directory) must be defined"
#endif
#ifndef GRADPROF_GOLDEN_DIR
#error "GRADPROF_GOLDEN_DIR (tests/golden) must be defined"
#endif

/* ---- the fixture's numbers, by hand from traces/make_traces.c -------------------------------- */

/* Shapes: batch B = 32, width W = 256, OUT = 10, float32. */
#define ACT (32ull * 256 * 4) /* a [32,256] activation: 32768 */
#define NODE 512ull           /* an autograd node */
/* Parameters: two [256,256] weights, two [256] biases, a [10,256] weight and a [10] bias. */
#define PARAMS (2 * 256ull * 256 * 4 + 2 * 256ull * 4 + 10ull * 256 * 4 + 10ull * 4)
#define INPUT ACT /* the [32,256] input */

/*
 * mlp_nograd's peak (first reached in iteration 0): in mlp.1, the relu output a0 is allocated
 * while the linear output h0 of mlp.0 is still live (h0 is freed right after). Later layers never
 * hold more: mlp.2 frees a0 once h1 exists, mlp.4's output is [32,10]. Live: params, input,
 * h0 (activation, linear, mlp.0) and a0 (activation, relu, mlp.1).
 */
#define NOGRAD_PEAK (PARAMS + INPUT + 2 * ACT)
/*
 * mlp_grad's peak (iteration 0, the instant mlp.3's graph node is made): a0 is kept (SAVED by
 * relu, mlp.1), h1 (activation, linear, mlp.2) is not freed yet, a1 (relu, mlp.3) has just been
 * made, and four graph nodes exist (linear mlp.0, relu mlp.1, linear mlp.2, relu mlp.3). Right
 * after, h1 is freed; mlp.4 then adds only a [32,10] output and a fifth node, 1280 + 512 bytes
 * against the 32768 just freed, so the end of the forward pass (2 SAVED + 5 nodes + the output)
 * is not the peak.
 */
#define GRAD_PEAK (PARAMS + INPUT + 3 * ACT + 4 * NODE)
/*
 * The aligned instant of B: the newest buffer live at A's peak with a twin in B is a1 (relu,
 * mlp.3; mlp.3's graph node has none), so B is measured right after it made its a1. B then holds
 * the parameters, the input, h1 (the relu's input) and a1; it freed a0 when h1 existed. So
 * held by graph construction = a0 (freed by B, kept SAVED by A) + the 4 graph nodes (no twin),
 * b_more = 0 and A's peak - B then = held.
 */
#define B_AT_A_PEAK (PARAMS + INPUT + 2 * ACT)
#define HELD (ACT + 4 * NODE)

static const char *const traces[] = {"mlp_grad", "mlp_nograd", "leak_accumulate", "raw", "damaged"};
#define N_TRACES (sizeof traces / sizeof traces[0])

static void trace_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s.gptrace", GRADPROF_TEST_TRACES, name);
}


/* Profiles and their diff, freed together. */
typedef struct pair {
    gp_profile *a, *b;
    gp_diff *d;
} pair;

static pair diff_of(const char *a, const char *b)
{
    pair p = {NULL, NULL, NULL};
    char pa[4096], pb[4096], err[512];
    trace_path(a, pa, sizeof pa);
    trace_path(b, pb, sizeof pb);
    if (gp_diff_load(pa, pb, NULL, &p.a, &p.b, &p.d, err, sizeof err) != 0)
        fail_msg("diff %s %s: %s", a, b, err);
    assert_non_null(p.d);
    return p;
}

static void pair_free(pair *p)
{
    gp_diff_free(p->d);
    gp_profile_free(p->a);
    gp_profile_free(p->b);
}

static const gp_diff_row *find_row(const gp_diff_row *rows, size_t n, const char *label)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].label, label) == 0)
            return &rows[i];
    return NULL;
}

/* ---- arithmetic ------------------------------------------------------------------------------ */

static void test_held_by_graph_mlp(void **state)
{
    (void)state;
    pair p = diff_of("mlp_grad", "mlp_nograd");
    const gp_diff *d = p.d;
    /* each run's own peak */
    assert_int_equal(d->a.peak_bytes, GRAD_PEAK);
    assert_int_equal(d->b.peak_bytes, NOGRAD_PEAK);
    assert_int_equal(d->peak_delta, (int64_t)(ACT + 4 * NODE));
    /* the aligned instants */
    assert_int_equal(d->a.instant_bytes, GRAD_PEAK);
    assert_int_equal(d->b.instant_bytes, B_AT_A_PEAK);
    assert_int_equal(d->aligned_delta, (int64_t)(GRAD_PEAK - B_AT_A_PEAK));
    assert_int_equal(d->held_bytes, HELD);
    assert_int_equal(d->b_more_bytes, 0);
    assert_int_equal(d->unaligned_bytes, 0);
    assert_false(d->diverged);
    /* saved for backward: a0, tagged SAVED at the peak, and a1, which the next op saves right
     * after the peak (tagged SAVED later in its life): what saved_tensors_hooks would see */
    assert_int_equal(d->saved_inferred_bytes, 2 * ACT);
    /* By category: a0 SAVED, the nodes AUTOGRAD; h1 and a1 are paired activations. */
    assert_int_equal(d->by_category[LP_CAT_SAVED].a_bytes, ACT);
    assert_int_equal(d->by_category[LP_CAT_SAVED].b_bytes, 0);
    assert_int_equal(d->by_category[LP_CAT_SAVED].held_bytes, ACT);
    assert_int_equal(d->by_category[LP_CAT_AUTOGRAD].held_bytes, 4 * NODE);
    assert_int_equal(d->by_category[LP_CAT_ACTIVATION].a_bytes, 2 * ACT);
    assert_int_equal(d->by_category[LP_CAT_ACTIVATION].b_bytes, 2 * ACT);
    assert_int_equal(d->by_category[LP_CAT_ACTIVATION].held_bytes, 0);
    assert_int_equal(d->by_category[LP_CAT_PARAMETER].a_bytes, PARAMS);
    assert_int_equal(d->by_category[LP_CAT_PARAMETER].delta, 0);
    assert_int_equal(d->by_category[LP_CAT_INPUT].delta, 0);
    /* Per module: mlp.1 keeps a0 and its node; mlp.0, mlp.2, mlp.3 only their nodes. */
    const gp_diff_row *m;
    assert_non_null(m = find_row(d->modules, d->n_modules, "mlp.1"));
    assert_int_equal(m->held_bytes, ACT + NODE);
    assert_int_equal(m->delta, (int64_t)(ACT + NODE));
    assert_int_equal(m->freed_bytes, ACT); /* a0 has a twin: its lifetimes are known */
    assert_true(m->a_life_ns > m->b_life_ns);
    assert_true(m->a_life_allocs > m->b_life_allocs);
    assert_string_equal(d->modules[0].module, "mlp.1"); /* sorted by held */
    for (size_t i = 0; i < 3; i++) {
        static const char *const nodes_only[] = {"mlp.0", "mlp.2", "mlp.3"};
        assert_non_null(m = find_row(d->modules, d->n_modules, nodes_only[i]));
        assert_int_equal(m->held_bytes, NODE);
        assert_int_equal(m->delta, (int64_t)NODE);
        assert_int_equal(m->freed_bytes, 0);
    }
    assert_non_null(m = find_row(d->modules, d->n_modules, "mlp.4")); /* its parameters only */
    assert_int_equal(m->held_bytes, 0);
    assert_int_equal(m->delta, 0);
    const gp_diff_row *k = find_row(d->keys, d->n_keys, "relu, saved by mlp.1");
    assert_non_null(k);
    assert_int_equal(k->a_bytes, ACT);
    assert_int_equal(k->b_bytes, 0);
    assert_int_equal(k->held_bytes, ACT);
    assert_int_equal(k->saved_inferred_bytes, ACT);
    assert_non_null(k = find_row(d->keys, d->n_keys, "relu @ mlp.3 (activation)"));
    assert_int_equal(k->held_bytes, 0); /* paired: B holds its twin at the instant */
    assert_int_equal(k->saved_inferred_bytes, ACT);
    assert_non_null(k = find_row(d->ops, d->n_ops, "linear @ mlp.2"));
    assert_int_equal(k->held_bytes, NODE);
    assert_int_equal(k->delta, (int64_t)NODE); /* h1 is paired */
    const gp_diff_row *l = find_row(d->layers, d->n_layers, "mlp.1");
    assert_non_null(l);
    assert_int_equal(l->a_graph_bytes, ACT + NODE);
    assert_int_equal(l->b_graph_bytes, 0);
    assert_int_equal(l->depth, 1);
    assert_int_equal(l->held_bytes, ACT + NODE);
    pair_free(&p);
}

/* One row obeys the identity: delta = a - b = held - b_more + unaligned. */
static void assert_row(const gp_diff_row *r)
{
    assert_int_equal(r->delta, (int64_t)(r->a_bytes - r->b_bytes));
    assert_int_equal(r->delta, (int64_t)(r->held_bytes + r->unaligned_bytes - r->b_more_bytes));
    assert_true(r->saved_inferred_bytes <= r->a_bytes);
}

/* Every table of d adds up to the aligned delta, each sum computed here from the rows. */
static void assert_sums(const gp_diff *d)
{
    const gp_diff_row *tables[] = {d->by_category, d->keys, d->ops, d->modules, d->call_sites,
                                   d->layers};
    size_t ns[] = {LP_CAT_COUNT, d->n_keys, d->n_ops, d->n_modules, d->n_call_sites, d->n_layers};
    assert_int_equal(d->aligned_delta,
                     (int64_t)(d->held_bytes + d->unaligned_bytes - d->b_more_bytes));
    assert_int_equal(d->aligned_delta, (int64_t)(d->a.instant_bytes - d->b.instant_bytes));
    assert_int_equal(d->peak_delta, (int64_t)(d->a.peak_bytes - d->b.peak_bytes));
    for (size_t t = 0; t < 6; t++) {
        int64_t delta = 0;
        uint64_t held = 0, b_more = 0, saved = 0;
        for (size_t i = 0; i < ns[t]; i++) {
            assert_row(&tables[t][i]);
            delta += tables[t][i].delta;
            held += tables[t][i].held_bytes;
            b_more += tables[t][i].b_more_bytes;
            saved += tables[t][i].saved_inferred_bytes;
        }
        assert_int_equal(delta, d->aligned_delta);
        assert_int_equal(held, d->held_bytes);
        assert_int_equal(b_more, d->b_more_bytes);
        assert_int_equal(saved, d->saved_inferred_bytes);
    }
    for (size_t i = 1; i < d->n_keys; i++)
        assert_true(d->keys[i - 1].delta >= d->keys[i].delta); /* sorted by delta, desc */
    /* call sites: the changed rows first, sorted by held, their labels distinct; then the rest */
    assert_true(d->n_call_sites_changed <= d->n_call_sites);
    for (size_t i = 0; i < d->n_call_sites; i++) {
        const gp_diff_row *r = &d->call_sites[i];
        bool changed = r->delta != 0 || r->held_bytes != 0 || r->saved_inferred_bytes != 0;
        assert_int_equal(changed, i < d->n_call_sites_changed);
        if (i > 0 && changed)
            assert_true(d->call_sites[i - 1].held_bytes >= r->held_bytes);
        for (size_t k = 0; changed && k < i; k++)
            assert_string_not_equal(d->call_sites[k].label, r->label);
    }
    assert_int_equal(d->remainder.categories, 0);
    assert_int_equal(d->remainder.keys, 0);
    assert_int_equal(d->remainder.call_sites, 0);
    assert_int_equal(d->remainder.layers, 0);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        assert_int_equal(d->remainder.keys_by_category[c], 0);
}

static void test_sums_add_up(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_TRACES; i++)
        for (size_t j = 0; j < N_TRACES; j++) {
            pair p = diff_of(traces[i], traces[j]);
            print_message("%s vs %s\n", traces[i], traces[j]);
            assert_sums(p.d);
            pair_free(&p);
        }
}

static void test_self_diff_is_zero(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_TRACES; i++) {
        pair p = diff_of(traces[i], traces[i]);
        const gp_diff *d = p.d;
        assert_true(d->a.peak_bytes > 0);
        assert_int_equal(d->peak_delta, 0);
        assert_int_equal(d->held_bytes, 0);
        assert_int_equal(d->b_more_bytes, 0);
        for (int c = 0; c < LP_CAT_COUNT; c++)
            assert_int_equal(d->by_category[c].delta, 0);
        const gp_diff_row *tables[] = {d->keys, d->ops, d->modules, d->call_sites, d->layers};
        size_t ns[] = {d->n_keys, d->n_ops, d->n_modules, d->n_call_sites, d->n_layers};
        for (size_t t = 0; t < 5; t++) {
            for (size_t r = 0; r < ns[t]; r++) {
                assert_int_equal(tables[t][r].delta, 0);
                assert_int_equal(tables[t][r].held_bytes, 0);
                assert_int_equal(tables[t][r].a_bytes, tables[t][r].b_bytes);
            }
        }
        assert_true(d->n_keys > 0 && d->n_call_sites > 0 && d->n_layers > 0);
        pair_free(&p);
    }
}

/* Reversed (grad off as A): nothing is held by graph construction, nothing saved. */
static void test_reversed_holds_no_graph(void **state)
{
    (void)state;
    pair p = diff_of("mlp_nograd", "mlp_grad");
    assert_sums(p.d);
    assert_int_equal(p.d->by_category[LP_CAT_SAVED].held_bytes, 0);
    assert_int_equal(p.d->by_category[LP_CAT_AUTOGRAD].held_bytes, 0);
    assert_int_equal(p.d->saved_inferred_bytes, p.d->by_category[LP_CAT_ACTIVATION].saved_inferred_bytes);
    pair_free(&p);
}


/* ---- the command ----------------------------------------------------------------------------- */

/* Runs gradprof with argv (NULL-terminated, without the program) in the traces directory, stdout
 * and stderr to files. Returns the exit status, or -1 if it did not exit normally. */
static int run(const char *out_file, const char *err_file, const char *const *args)
{
    char *argv[32];
    size_t n = 0;
    argv[n++] = (char *)GRADPROF_BIN;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(GRADPROF_TEST_TRACES) != 0)
            _exit(126);
        int o = open(out_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        execv(GRADPROF_BIN, argv);
        _exit(127);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

typedef struct tmp {
    char out[64], err[64], file[64];
} tmp;

static void tmp_make(tmp *t)
{
    strcpy(t->out, "/tmp/gp_test_diff_outXXXXXX");
    strcpy(t->err, "/tmp/gp_test_diff_errXXXXXX");
    strcpy(t->file, "/tmp/gp_test_diff_fileXXXXXX");
    int a = mkstemp(t->out), b = mkstemp(t->err), c = mkstemp(t->file);
    assert_true(a >= 0 && b >= 0 && c >= 0);
    close(a);
    close(b);
    close(c);
}

static void tmp_remove(tmp *t)
{
    unlink(t->out);
    unlink(t->err);
    unlink(t->file);
}

/* Compares `path`'s contents with tests/golden/<name>, or rewrites the golden file when
 * GRADPROF_UPDATE_GOLDEN=1. */
static void check_golden(const char *path, const char *name)
{
    char golden[4096];
    snprintf(golden, sizeof golden, "%s/%s", GRADPROF_GOLDEN_DIR, name);
    size_t n = 0, m = 0;
    char *got = e2e_slurp(path, &n);
    assert_non_null(got);
    const char *update = getenv("GRADPROF_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(golden, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(got, 1, n, f), n);
        assert_int_equal(fclose(f), 0);
        print_message("updated %s\n", golden);
        free(got);
        return;
    }
    char *want = e2e_slurp(golden, &m);
    if (!want)
        fail_msg("missing golden file %s (run with GRADPROF_UPDATE_GOLDEN=1 to create it)", golden);
    if (n != m || memcmp(got, want, n) != 0) {
        size_t i = 0, line = 1, start = 0;
        for (; i < n && i < m && got[i] == want[i]; i++)
            if (got[i] == '\n') {
                line++;
                start = i + 1;
            }
        print_message("first difference at line %zu:\n  got:  %.*s\n  want: %.*s\n", line,
                      (int)strcspn(got + start, "\n"), got + start,
                      (int)strcspn(want + start, "\n"), want + start);
        fail_msg("%s differs from golden %s (GRADPROF_UPDATE_GOLDEN=1 rewrites it)", path, golden);
    }
    free(got);
    free(want);
}

static void test_golden_text(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    const char *args[] = {"diff", "mlp_grad.gptrace", "mlp_nograd.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *err = e2e_slurp(t.err, NULL);
    assert_string_equal(err, ""); /* nothing on stderr for two clean traces */
    free(err);
    check_golden(t.out, "diff_mlp.txt");
    char *out = e2e_slurp(t.out, NULL);
    assert_non_null(strstr(out, "At A's peak (654.04 KiB) B holds 620.04 KiB: 34.00 KiB held by "
                                "graph construction"));
    assert_null(strstr(out, "unexplained remainder"));
    free(out);
    /* --top 1 and -o: the same diff, one row per held table, into a file. */
    const char *top[] = {
        "diff", "--top", "1", "-o", t.file, "mlp_grad.gptrace", "mlp_nograd.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, top), 0);
    check_golden(t.file, "diff_mlp_top1.txt");
    tmp_remove(&t);
}

static void test_golden_json(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    const char *args[] = {
        "diff", "--format", "json", "-o", t.file, "mlp_grad.gptrace", "mlp_nograd.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    check_golden(t.file, "diff_mlp.json");
    char *out = e2e_slurp(t.file, NULL);
    char want[128];
    snprintf(want, sizeof want, "\"held_by_graph_bytes\": %llu,", (unsigned long long)HELD);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "\"peak_bytes\": {\"a\": %llu, \"b\": %llu, \"delta\": %llu}",
             (unsigned long long)GRAD_PEAK, (unsigned long long)NOGRAD_PEAK,
             (unsigned long long)(GRAD_PEAK - NOGRAD_PEAK));
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "\"schema\": \"gradprof-diff/2\""));
    assert_non_null(strstr(out, "\"remainder_bytes\": 0,"));
    free(out);
    /* The reverse diff too (negative deltas in the output). */
    const char *rev[] = {
        "diff", "--format=json", "-o", t.file, "mlp_nograd.gptrace", "mlp_grad.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, rev), 0);
    check_golden(t.file, "diff_mlp_reversed.json");
    tmp_remove(&t);
}

static void test_html(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    const char *args[] = {
        "diff", "--format", "html", "-o", t.file, "mlp_grad.gptrace", "mlp_nograd.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *out = e2e_slurp(t.file, NULL);
    assert_non_null(out);
    assert_non_null(strstr(out, "<html"));
    assert_non_null(strstr(out, "</html>"));
    free(out);
    tmp_remove(&t);
}

/* Runs args, expects exit status `code` and stderr containing every string of `want`. */
static void expect(int code, const char *const *args, const char *const *want)
{
    tmp t;
    tmp_make(&t);
    int rc = run(t.out, t.err, args);
    char *err = e2e_slurp(t.err, NULL);
    assert_non_null(err);
    print_message("stderr: %s", err);
    assert_int_equal(rc, code);
    for (size_t i = 0; want && want[i]; i++)
        if (!strstr(err, want[i]))
            fail_msg("stderr lacks '%s': %s", want[i], err);
    free(err);
    tmp_remove(&t);
}

static void test_errors(void **state)
{
    (void)state;
    /* One missing file: exit 2, the message names it; the other one is fine. */
    expect(2, (const char *[]){"diff", "mlp_grad.gptrace", "nosuch.gptrace", NULL},
           (const char *[]){"gradprof diff:", "nosuch.gptrace", NULL});
    expect(2, (const char *[]){"diff", "nosuch_a.gptrace", "mlp_grad.gptrace", NULL},
           (const char *[]){"nosuch_a.gptrace", NULL});
    /* Not a trace at all, either of them (B is opened and scanned while A loads). */
    expect(2, (const char *[]){"diff", GRADPROF_BIN, "mlp_grad.gptrace", NULL},
           (const char *[]){GRADPROF_BIN, NULL});
    expect(2, (const char *[]){"diff", "mlp_grad.gptrace", GRADPROF_BIN, NULL},
           (const char *[]){GRADPROF_BIN, NULL});
    /* Usage. */
    expect(2, (const char *[]){"diff", NULL}, (const char *[]){"two traces", NULL});
    expect(2, (const char *[]){"diff", "mlp_grad.gptrace", NULL},
           (const char *[]){"two traces", NULL});
    expect(2, (const char *[]){"diff", "a", "b", "c", NULL}, (const char *[]){"two traces", NULL});
    expect(2, (const char *[]){"diff", "--format", "xml", "mlp_grad.gptrace", "raw.gptrace", NULL},
           (const char *[]){"--format", "xml", NULL});
    expect(2, (const char *[]){"diff", "--top", "many", "mlp_grad.gptrace", "raw.gptrace", NULL},
           (const char *[]){"--top", "many", NULL});
    expect(2, (const char *[]){"diff", "--frobnicate", "mlp_grad.gptrace", "raw.gptrace", NULL},
           (const char *[]){"--frobnicate", NULL});
    expect(2, (const char *[]){"diff", "mlp_grad.gptrace", "raw.gptrace", "-o", NULL},
           (const char *[]){"-o", NULL});
    expect(2,
           (const char *[]){"diff", "-o", "/nonexistent-dir/x.txt", "mlp_grad.gptrace",
                            "raw.gptrace", NULL},
           (const char *[]){"/nonexistent-dir/x.txt", NULL});
    /* A write error (a full device) is reported with the output's name. */
    if (access("/dev/full", W_OK) == 0)
        expect(2,
               (const char *[]){"diff", "-o", "/dev/full", "mlp_grad.gptrace", "raw.gptrace", NULL},
               (const char *[]){"error writing '/dev/full'", NULL});
    /* --help: usage on stdout, exit 0. */
    tmp t;
    tmp_make(&t);
    assert_int_equal(run(t.out, t.err, (const char *[]){"diff", "--help", NULL}), 0);
    char *out = e2e_slurp(t.out, NULL);
    assert_non_null(strstr(out, "usage: gradprof diff A B"));
    free(out);
    tmp_remove(&t);
}

/* Two different programs: the diff is written, with a warning naming both on stderr, in the
 * text and in the JSON; one program under two paths or options draws none (test_golden_text's
 * empty stderr, the goldens' empty other_program). */
static void test_other_program(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    const char *args[] = {"diff", "mlp_grad.gptrace", "raw.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *err = e2e_slurp(t.err, NULL), *out = e2e_slurp(t.out, NULL);
    print_message("stderr: %s", err);
    const char *want = "A runs 'infer' and B 'raw_program': two different programs";
    assert_non_null(strstr(err, want));
    assert_non_null(strstr(out, want));
    free(err);
    free(out);
    const char *json[] = {
        "diff", "--format", "json", "-o", t.file, "mlp_grad.gptrace", "raw.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, json), 0);
    out = e2e_slurp(t.file, NULL);
    assert_non_null(strstr(out, "\"other_program\": \"A runs 'infer' and B 'raw_program'"));
    free(out);
    const char *html[] = {"diff", "--format",         "html",        "-o",
                          t.file, "mlp_grad.gptrace", "raw.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, html), 0);
    out = e2e_slurp(t.file, NULL);
    assert_non_null(
        strstr(out, "<div class=\"warn\">A runs &#39;infer&#39; and B &#39;raw_program&#39;"));
    free(out);
    tmp_remove(&t);
}

/* One run of a program recorded without stacks: a 1000 B parameter, an `act`-byte relu output
 * that a run with grad saves for backward and one without frees at once, then a 512 B output. */
static void write_stackless_run(const char *path, bool grad, uint64_t act)
{
    tb *b = tb_open(path, "python3 m.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    tb_alloc(b, 0x10000, 1000, 0);
    tb_tag(b, 0x10000, 1000, LP_CAT_PARAMETER, "parameter", "net.0", "[250]", true, 0);
    tb_at(b, 2000);
    tb_alloc(b, 0x20000, act, 0);
    tb_tag(b, 0x20000, act, LP_CAT_ACTIVATION, "aten::relu", "net.1", "[n]", grad, 0);
    tb_at(b, 3000);
    if (grad)
        tb_tag(b, 0x20000, act, LP_CAT_SAVED, "aten::relu", "net.1", "[n]", true, 0);
    else
        tb_free(b, 0x20000);
    tb_at(b, 4000);
    tb_alloc(b, 0x20000 + act, 512, 0);
    tb_tag(b, 0x20000 + act, 512, LP_CAT_ACTIVATION, "aten::linear", "net.2", "[128]", grad, 0);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

/* A (grad on) and B (grad_b) into two new temporary files, named in a and b (64 bytes each). */
static void stackless_pair(char *a, char *b, bool grad_b, uint64_t act)
{
    strcpy(a, "/tmp/gp_test_diff_aXXXXXX");
    strcpy(b, "/tmp/gp_test_diff_bXXXXXX");
    int fa = mkstemp(a), fb = mkstemp(b);
    assert_true(fa >= 0 && fb >= 0);
    close(fa);
    close(fb);
    write_stackless_run(a, true, act);
    write_stackless_run(b, grad_b, act);
}

/* Without stacks the call-site table would be one "[no stack]" row: the diff says why instead,
 * and its numbers are unchanged (A's relu output, 4096 B, held by graph construction). */
static void test_without_stacks(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    char a[64], b[64];
    stackless_pair(a, b, false, 4096);
    const char *args[] = {"diff", a, b, NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *out = e2e_slurp(t.out, NULL);
    assert_non_null(out);
    assert_non_null(strstr(out, "4.00 KiB held by graph construction"));
    assert_non_null(strstr(out, "\nHeld by graph construction, by call site: none: no call stacks "
                                "were recorded (gradprof run --stack-depth N records them)\n"));
    assert_null(strstr(out, "[no stack]"));
    free(out);
    const char *html[] = {"diff", "--format", "html", "-o", t.file, a, b, NULL};
    assert_int_equal(run(t.out, t.err, html), 0);
    out = e2e_slurp(t.file, NULL);
    assert_non_null(out);
    assert_non_null(strstr(out, "<section id=\"sites\">\n<h2>Per call site</h2>\n<p "
                                "class=\"note\">None: no call stacks were recorded"));
    assert_null(strstr(out, "[no stack]"));
    free(out);
    unlink(a);
    unlink(b);
    tmp_remove(&t);
}

/* B built a graph too (grad on in both runs, as when the program enables grad itself): the diff
 * warns, on stderr, in the text, JSON and HTML; a B without one (test_without_stacks) does not. */
static void test_b_builds_a_graph(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    char a[64], b[64];
    const char *want = "B's own peak holds graph memory too (2.00 MiB saved for backward, 0.00 MiB "
                       "in graph nodes): grad was on in B as well";
    for (int grad_b = 0; grad_b < 2; grad_b++) {
        stackless_pair(a, b, grad_b, 2u << 20);
        const char *args[] = {"diff", a, b, NULL};
        assert_int_equal(run(t.out, t.err, args), 0);
        char *out = e2e_slurp(t.out, NULL), *err = e2e_slurp(t.err, NULL);
        assert_non_null(out);
        assert_non_null(err);
        assert_int_equal(strstr(out, want) != NULL, grad_b);
        assert_int_equal(strstr(err, want) != NULL, grad_b);
        /* with grad off in B the relu output is held; with grad on in both it cancels */
        assert_non_null(strstr(out, grad_b ? "0 B held by graph construction"
                                           : "2.00 MiB held by graph construction"));
        free(out);
        free(err);
        const char *json[] = {"diff", "--format", "json", "-o", t.file, a, b, NULL};
        assert_int_equal(run(t.out, t.err, json), 0);
        out = e2e_slurp(t.file, NULL);
        assert_non_null(out);
        assert_non_null(strstr(out, grad_b ? "\"b_graph\": \"B's own peak holds graph memory too"
                                           : "\"b_graph\": \"\""));
        free(out);
        const char *html[] = {"diff", "--format", "html", "-o", t.file, a, b, NULL};
        assert_int_equal(run(t.out, t.err, html), 0);
        out = e2e_slurp(t.file, NULL);
        assert_non_null(out);
        assert_int_equal(
            strstr(out, "<div class=\"warn\">B&#39;s own peak holds graph memory") != NULL, grad_b);
        free(out);
        unlink(a);
        unlink(b);
    }
    tmp_remove(&t);
}

/* One run of a model whose layer `layer` PyTorch may compute two ways: with grad (A) three ops
 * whose 64 KiB outputs autograd saves, without (B) one fused op `fused` whose output it frees
 * before the next layer. Around it: 8 KiB of interpreter memory nothing tags, a 1000 B
 * parameter, a 512 B head. */
static void write_layer_run(const char *path, bool grad, const char *layer, const char *fused)
{
    tb *b = tb_open(path, "python3 m.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 8192, 0);
    tb_alloc(b, 0x10000, 1000, 0);
    tb_tag(b, 0x10000, 1000, LP_CAT_PARAMETER, "parameter", "net.0", "[250]", true, 0);
    tb_module_push(b, "net");
    tb_module_push(b, layer);
    const char *ops[] = {"aten::linear", "aten::softmax", "aten::relu"};
    uint64_t at = 2000;
    for (int i = 0; i < (grad ? 3 : 1); i++) {
        uint64_t addr = 0x100000 + (uint64_t)i * 0x10000;
        tb_at(b, at += 1000);
        tb_alloc(b, addr, 65536, 0);
        tb_tag(b, addr, 65536, LP_CAT_ACTIVATION, grad ? ops[i] : fused, layer, "[64,256]", grad,
               0);
        if (grad)
            tb_tag(b, addr, 65536, LP_CAT_SAVED, ops[i], layer, "[64,256]", true, 0);
    }
    tb_region_pop(b);
    tb_at(b, at += 1000);
    if (!grad)
        tb_free(b, 0x100000);
    tb_alloc(b, 0x200000, 512, 0);
    tb_tag(b, 0x200000, 512, LP_CAT_ACTIVATION, "aten::linear", "net.head", "[128]", grad, 0);
    tb_region_pop(b);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

/* B ran a layer another way (PyTorch's fused kernels without grad): A's buffers made in it have
 * no twin, count as held, and are left out of the alignment's judgement, which the rest passes;
 * the diff names the layer and B's op in the text, JSON and HTML. The model's own module is never
 * taken for rerouted: the same runs with the fused op in "net" do not align. */
static void test_rerouted_layer(void **state)
{
    (void)state;
    char a[64] = "/tmp/gp_test_diff_aXXXXXX", b[64] = "/tmp/gp_test_diff_bXXXXXX";
    int fa = mkstemp(a), fb = mkstemp(b);
    assert_true(fa >= 0 && fb >= 0);
    close(fa);
    close(fb);
    write_layer_run(a, true, "net.enc", "");
    write_layer_run(b, false, "net.enc", "aten::_fused_fwd");
    gp_profile *pa, *pb;
    gp_diff *d;
    char err[512];
    assert_int_equal(gp_diff_load(a, b, NULL, &pa, &pb, &d, err, sizeof err), 0);
    assert_false(d->diverged);
    assert_string_equal(d->rerouted,
                        "B ran 1 module another way, with an op A never ran there (net.enc: "
                        "aten::_fused_fwd), as PyTorch does where it has a fused kernel for use "
                        "without grad: A's buffers made in it (0.19 MiB at A's peak) have no twin "
                        "and count as held; the alignment is judged on the rest");
    assert_int_equal(d->rerouted_bytes, 3 * 65536);
    assert_int_equal(d->twinnable_bytes, 8192 + 1000 + 512);
    assert_int_equal(d->twinned_bytes, 8192 + 1000 + 512);
    assert_int_equal(d->held_bytes, 3 * 65536);
    assert_sums(d);
    gp_diff_free(d);
    gp_profile_free(pa);
    gp_profile_free(pb);

    tmp t;
    tmp_make(&t);
    const char *args[] = {"diff", "--require-aligned", a, b, NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *out = e2e_slurp(t.out, NULL);
    assert_non_null(strstr(out, "\n  note: B ran 1 module another way, with an op A never ran "
                                "there (net.enc: aten::_fused_fwd)"));
    free(out);
    const char *json[] = {"diff", "--format", "json", "-o", t.file, a, b, NULL};
    assert_int_equal(run(t.out, t.err, json), 0);
    out = e2e_slurp(t.file, NULL);
    assert_non_null(strstr(out, "\"rerouted\": \"B ran 1 module another way"));
    assert_non_null(strstr(out, "\"rerouted_bytes\": 196608"));
    free(out);
    const char *html[] = {"diff", "--format", "html", "-o", t.file, a, b, NULL};
    assert_int_equal(run(t.out, t.err, html), 0);
    out = e2e_slurp(t.file, NULL);
    assert_non_null(strstr(out, "<div class=\"note\">B ran 1 module another way"));
    free(out);

    write_layer_run(a, true, "net", "");
    write_layer_run(b, false, "net", "aten::_fused_fwd");
    assert_int_equal(run(t.out, t.err, args), 3);
    out = e2e_slurp(t.out, NULL);
    assert_null(strstr(out, "another way"));
    free(out);
    char *errs = e2e_slurp(t.err, NULL);
    /* one of A's outputs pairs with B's fused one by the loose key (same size, no stacks) */
    assert_non_null(strstr(errs, "the runs do not align: only 36.5% of the bytes live at A's peak "
                                 "(75240 of 206312, graph memory left out)"));
    free(errs);
    unlink(a);
    unlink(b);
    tmp_remove(&t);
}

static void test_damaged(void **state)
{
    (void)state;
    tmp t;
    tmp_make(&t);
    const char *args[] = {"diff", "damaged.gptrace", "mlp_nograd.gptrace", NULL};
    assert_int_equal(run(t.out, t.err, args), 0);
    char *err = e2e_slurp(t.err, NULL), *out = e2e_slurp(t.out, NULL);
    print_message("stderr: %s", err);
    assert_non_null(strstr(err, "warning"));
    assert_non_null(strstr(err, "damaged.gptrace"));
    assert_non_null(strstr(out, "At A's peak"));
    assert_non_null(strstr(out, "note: A is damaged"));
    free(err);
    free(out);
    check_golden(t.out, "diff_damaged.txt");
    /* The recovered part still holds iteration 0, so the numbers match the intact trace's. */
    pair p = diff_of("damaged", "mlp_nograd");
    assert_true(p.d->a.damaged);
    assert_false(p.d->b.damaged);
    assert_int_equal(p.d->a.peak_bytes, GRAD_PEAK);
    assert_int_equal(p.d->held_bytes, HELD);
    assert_sums(p.d);
    pair_free(&p);
    tmp_remove(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_by_graph_mlp),
        cmocka_unit_test(test_sums_add_up),
        cmocka_unit_test(test_self_diff_is_zero),
        cmocka_unit_test(test_reversed_holds_no_graph),
        cmocka_unit_test(test_golden_text),
        cmocka_unit_test(test_golden_json),
        cmocka_unit_test(test_html),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_other_program),
        cmocka_unit_test(test_without_stacks),
        cmocka_unit_test(test_b_builds_a_graph),
        cmocka_unit_test(test_rerouted_layer),
        cmocka_unit_test(test_damaged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
