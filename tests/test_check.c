/*
 * The check engine (tools/engine/check.h) without the command line: traces built with
 * trace_builder (and the fixture traces of make_traces.c, numbers derived in test_cli.c) are
 * loaded with gp_profile_load and judged with gp_check_run; the tests read the result struct.
 * Also the error table (error.h) and the tag key -> site link (gp_tag_key.top_site) the engine
 * shows stacks from.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "diff.h"
#include "error.h"
#include "traces/trace_builder.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gradprof_test_check.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static gp_profile *load(const char *path)
{
    char err[512];
    gp_profile *p = NULL;
    if (gp_profile_load(path, NULL, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    return p;
}

#define FIXTURE(name) GRADPROF_TEST_TRACES "/" name ".gptrace"

static gp_check_result *run(const gp_profile *p, const gp_check_rules *rules)
{
    char err[512] = "";
    gp_check_result *r = NULL;
    int rc = gp_check_run(p, rules, &r, err, sizeof err);
    if (rc != 0)
        fail_msg("gp_check_run: %s (%s)", err, gp_err_name(rc));
    return r;
}

static const gp_check_violation *find(const gp_check_result *r, const char *rule, int category)
{
    for (size_t i = 0; i < r->n_violations; i++)
        if (!strcmp(r->violations[i].rule, rule) &&
            (category < 0 || r->violations[i].category == (lp_category)category))
            return &r->violations[i];
    return NULL;
}

static void contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("expected '%s' in '%s'", needle, hay);
}

/* A small tagged program: two buffers of tag (saved, relu, m) from two call sites, 100 and 300
 * bytes; optionally a raw buffer at a third site that gets its tag later (first tag). */
static void write_small(const char *path, bool end, const char *end_reason)
{
    tb *b = tb_open(path, "small");
    assert_non_null(b);
    if (end_reason)
        tb_meta(b, "end_reason", end_reason);
    tb_module(b, 1, 0x400000, 0x10000, "/opt/small", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    const uint64_t o1[1] = {0x100}, o2[1] = {0x200}, o3[1] = {0x300};
    uint32_t s1 = tb_stack(b, 1, m, o1), s2 = tb_stack(b, 1, m, o2), s3 = tb_stack(b, 1, m, o3);
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 100, s1);
    tb_tag(b, 0x1000, 100, LP_CAT_SAVED, "relu", "m", NULL, true, 0);
    tb_alloc(b, 0x2000, 300, s2);
    tb_tag(b, 0x2000, 300, LP_CAT_SAVED, "relu", "m", NULL, true, 0);
    tb_alloc(b, 0x3000, 1000, s3); /* raw, then tagged: its bytes leave OTHER */
    tb_tag(b, 0x3000, 1000, LP_CAT_ACTIVATION, "linear", "m", NULL, true, 0);
    tb_at(b, 2000);
    tb_free(b, 0x1000);
    tb_free(b, 0x2000);
    tb_free(b, 0x3000);
    if (end)
        tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

/* ---- the data the engine reads --------------------------------------------------------------- */

static void test_error_table(void **state)
{
    (void)state;
    assert_string_equal(gp_strerror(GP_ENOENT), "no such file or directory");
    assert_string_equal(gp_strerror(GP_ENOTTRACE), "not a gradprof trace");
    assert_string_equal(gp_strerror(0), "success");
    assert_string_equal(gp_strerror(-99999), "unknown error");
    assert_string_equal(gp_err_name(GP_EINCOMPLETE), "GP_EINCOMPLETE");
    assert_int_equal(GP_ENOENT, -ENOENT);
    assert_int_equal(gp_error_from_errno(ENOENT), GP_ENOENT);
    assert_int_equal(gp_error_from_errno(ENOTDIR), GP_ENOENT);
    assert_int_equal(gp_error_from_errno(ELOOP), GP_ESYMLINK);
    assert_int_equal(gp_error_from_errno(ENOSPC), GP_EIO);
    assert_int_equal(gp_error_from_errno(0), GP_EIO);
}

/* top_site: the site where most of a key's bytes entered it; a raw buffer tagged later gives
 * its site to its tag's key, not to OTHER's. */
static void test_top_site(void **state)
{
    (void)state;
    write_small(tmp_path("small.gptrace"), true, NULL);
    gp_profile *p = load(tmp_path("small.gptrace"));
    bool saw_saved = false, saw_linear = false;
    for (size_t i = 0; i < p->n_tag_keys; i++) {
        const gp_tag_key *k = &p->tag_keys[i];
        if (k->stats.total_bytes == 0) {
            assert_int_equal(k->top_site, UINT32_MAX);
            continue;
        }
        assert_true(k->top_site < p->n_sites);
        const char *label = gp_site_label(p, p->sites[k->top_site].stack);
        if (k->category == LP_CAT_SAVED) {
            saw_saved = true;
            contains(label, "small+0x200"); /* 300 bytes from s2 beat 100 from s1 */
        } else if (k->category == LP_CAT_ACTIVATION) {
            saw_linear = true;
            contains(label, "small+0x300");
        }
    }
    assert_true(saw_saved && saw_linear);
    gp_profile_free(p);
}

static void test_end_reason(void **state)
{
    (void)state;
    char buf[160];
    assert_null(gp_check_end_reason(NULL, buf, sizeof buf));
    assert_null(gp_check_end_reason("exit", buf, sizeof buf));
    assert_string_equal(gp_check_end_reason("signal 6", buf, sizeof buf),
                        "was killed by signal 6 (SIGABRT)");
    assert_string_equal(gp_check_end_reason("signal 9", buf, sizeof buf),
                        "was killed by signal 9 (SIGKILL)");
    contains(gp_check_end_reason("exec", buf, sizeof buf), "exec'd another program");
    assert_string_equal(gp_check_end_reason("file size limit 65536", buf, sizeof buf),
                        "reached its file size limit (RLIMIT_FSIZE, 65536 bytes): the recorder "
                        "stopped there, the program went on");
    assert_string_equal(gp_check_end_reason("file size limit x", buf, sizeof buf),
                        "ended by 'file size limit x'");
    assert_string_equal(gp_check_end_reason("meteor", buf, sizeof buf), "ended by 'meteor'");
}

/* ---- judging --------------------------------------------------------------------------------- */

/* r was not judged for one doubt only: `code`, not accepted, which `option` would accept. */
static void expect_one_doubt(const gp_check_result *r, int code, const char *option)
{
    assert_int_equal(r->verdict, GP_CHECK_UNJUDGED);
    assert_int_equal(r->n_doubts, 1);
    assert_int_equal(r->doubts[0].code, code);
    assert_false(r->doubts[0].accepted);
    assert_string_equal(r->doubts[0].option, option);
}

static void expect_incomplete(const char *path, const char *why)
{
    gp_profile *p = load(path);
    char msg[768] = "";
    assert_int_equal(gp_check_complete(p, msg, sizeof msg), GP_EINCOMPLETE);
    contains(msg, why);
    contains(msg, path);
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_check_result *r = run(p, &rules);
    expect_one_doubt(r, GP_EINCOMPLETE, "--allow-incomplete");
    gp_check_result_free(r);
    rules.allow_incomplete = true;
    r = run(p, &rules);
    assert_int_not_equal(r->verdict, GP_CHECK_UNJUDGED);
    assert_true(r->doubts[0].accepted);
    gp_check_result_free(r);
    gp_profile_free(p);
}

static void test_incomplete(void **state)
{
    (void)state;
    /* a file header and nothing else */
    FILE *f = fopen(tmp_path("header.gptrace"), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("GPTRACE\0\1\0\0\0\0\0\0\0", 1, 16, f), 16);
    fclose(f);
    expect_incomplete(tmp_path("header.gptrace"), "it holds no metadata and no events");
    /* metadata but no events */
    tb *b = tb_open(tmp_path("empty.gptrace"), "empty");
    assert_int_equal(tb_close(b), 0);
    expect_incomplete(tmp_path("empty.gptrace"), "it holds no events");
    /* events but no END record */
    write_small(tmp_path("noend.gptrace"), false, NULL);
    expect_incomplete(tmp_path("noend.gptrace"), "it has no end record");
    /* the recorder says how it ended */
    write_small(tmp_path("abort.gptrace"), false, "signal 6");
    expect_incomplete(tmp_path("abort.gptrace"), "the program was killed by signal 6 (SIGABRT)");
    /* damaged (the fixture cut inside its last chunk) */
    expect_incomplete(FIXTURE("damaged"), "it is damaged at byte");
    /* complete: an END after a normal exit, or where the program exec'd another (its image
     * ended there, the new one records its own trace) */
    write_small(tmp_path("exit.gptrace"), true, "exit");
    write_small(tmp_path("exec.gptrace"), false, "exec");
    const char *complete[] = {"exit.gptrace", "exec.gptrace"};
    for (size_t i = 0; i < 2; i++) {
        gp_profile *p = load(tmp_path(complete[i]));
        char msg[768] = "";
        assert_int_equal(gp_check_complete(p, msg, sizeof msg), 0);
        gp_profile_free(p);
    }
}

/* 9000 raw bytes (with a stack or not) and 1000 tagged activation bytes; `notes` are
 * "saves_seen" values noted before them (NULL-terminated, or NULL for none). */
static void write_raw_noted(const char *path, bool stacks, const char *const *notes)
{
    tb *b = tb_open(path, "raw");
    tb_module(b, 1, 0x400000, 0x10000, "/opt/raw", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    const uint64_t o[1] = {0x100};
    uint32_t s = stacks ? tb_stack(b, 1, m, o) : 0;
    tb_at(b, 1000);
    for (size_t i = 0; notes && notes[i]; i++)
        tb_note(b, "saves_seen", notes[i]);
    tb_alloc(b, 0x1000, 9000, s);
    tb_alloc(b, 0x4000, 1000, 0);
    tb_tag(b, 0x4000, 1000, LP_CAT_ACTIVATION, "linear", "m", NULL, true, 0);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

static void write_raw(const char *path, bool stacks)
{
    write_raw_noted(path, stacks, NULL);
}

/* Rules with no category or detector: only a peak of at most `limit` bytes. */
static void max_peak_only(gp_check_rules *rules, uint64_t limit)
{
    gp_check_rules_default(rules);
    memset(rules->forbid, 0, sizeof rules->forbid);
    memset(rules->detectors, 0, sizeof rules->detectors);
    rules->has_max_peak = true;
    rules->max_peak = limit;
}

/* 90% of the bytes raw without a stack: unclassified; fine with stacks or when no rule needs
 * categories. */
static void test_unclassified(void **state)
{
    (void)state;
    write_raw(tmp_path("nostack.gptrace"), false);
    gp_profile *p = load(tmp_path("nostack.gptrace"));
    char msg[768] = "";
    uint64_t bytes = 0;
    assert_int_equal(gp_check_classified(p, &bytes, msg, sizeof msg), GP_EUNCLASSIFIED);
    assert_int_equal(bytes, 9000);
    contains(msg, "90% of the bytes allocated (9000 of 10000)");
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_check_result *r = run(p, &rules);
    expect_one_doubt(r, GP_EUNCLASSIFIED, "--allow-unclassified");
    gp_check_result_free(r);
    rules.allow_unclassified = true;
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    /* rules that do not need categories are judged */
    max_peak_only(&rules, 5000);
    r = run(p, &rules);
    assert_int_equal(r->n_doubts, 0);
    assert_int_equal(r->verdict, GP_CHECK_FAILED);
    gp_check_result_free(r);
    gp_profile_free(p);

    write_raw(tmp_path("stacks.gptrace"), true);
    p = load(tmp_path("stacks.gptrace"));
    assert_int_equal(gp_check_classified(p, &bytes, msg, sizeof msg), 0);
    assert_int_equal(bytes, 0);
    gp_profile_free(p);
}

/* A process where the tagging source saw every save (a DataLoader worker under the PyTorch
 * helper) is judged without tags or stacks, unless one of its notes says otherwise. */
static void test_every_save_seen(void **state)
{
    (void)state;
    static const char *const all[] = {"all", NULL}, *const lapsed[] = {"all", "some", NULL};
    char msg[768];
    write_raw_noted(tmp_path("seen.gptrace"), false, all);
    gp_profile *p = load(tmp_path("seen.gptrace"));
    assert_int_equal(gp_check_classified(p, NULL, msg, sizeof msg), 0);
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_check_result *r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    gp_profile_free(p);
    write_raw_noted(tmp_path("lapsed.gptrace"), false, lapsed);
    p = load(tmp_path("lapsed.gptrace"));
    assert_int_equal(gp_check_classified(p, NULL, msg, sizeof msg), GP_EUNCLASSIFIED);
    gp_profile_free(p);
}

/* Saves the tagging source did not see ("saves_seen" "some"): rules that passed on saved memory
 * could have failed on them (not judged unless accepted); rules that failed, failed. */
static void test_saves_unseen(void **state)
{
    (void)state;
    static const char *const some[] = {"all", "some (the program's own saved_tensors_hooks)", NULL};
    write_raw_noted(tmp_path("some.gptrace"), true, some);
    gp_profile *p = load(tmp_path("some.gptrace"));
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_check_result *r = run(p, &rules);
    expect_one_doubt(r, GP_EINCOMPLETE, "--allow-incomplete");
    contains(r->doubts[0].message, "does not show every tensor saved for backward (saves_seen: "
                                   "some (the program's own saved_tensors_hooks))");
    gp_check_result_free(r);
    rules.allow_incomplete = true;
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    /* failed anyway: the activation forbidden */
    gp_check_rules_default(&rules);
    rules.forbid[LP_CAT_ACTIVATION] = true;
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_FAILED);
    assert_int_equal(r->n_doubts, 0);
    gp_check_result_free(r);
    /* rules that never look at saved memory are judged */
    max_peak_only(&rules, 1 << 20);
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    gp_profile_free(p);
}

/* ---- the rules ------------------------------------------------------------------------------- */

/* mlp_grad: saved ReLU outputs (4 iterations x 2 x 32 KiB) and 20 graph nodes of 512 bytes. */
static void test_forbid(void **state)
{
    (void)state;
    gp_profile *p = load(FIXTURE("mlp_grad"));
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_check_result *r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_FAILED);
    assert_int_equal(r->n_rules, 3 + GP_FIND_KIND_COUNT);
    assert_string_equal(r->rules[0].name, "forbid saved");
    const gp_check_violation *v = find(r, "forbid", LP_CAT_SAVED);
    assert_non_null(v);
    assert_int_equal(v->bytes, 262144);
    assert_int_equal(v->count, 8);
    assert_int_equal(v->n_items, 2);
    assert_string_equal(v->items[0].module, "mlp.1");
    assert_string_equal(v->items[1].module, "mlp.3");
    for (size_t i = 0; i < v->n_items; i++) /* the stack of the key's top site */
        assert_int_not_equal(v->items[i].stack, 0);
    /* items: bytes, then the order the engine met the keys (forward order) */
    v = find(r, "forbid", LP_CAT_AUTOGRAD);
    assert_non_null(v);
    assert_int_equal(v->bytes, 10240);
    static const char *const order[][2] = {{"linear", "mlp.0"}, {"relu", "mlp.1"},
                                           {"linear", "mlp.2"}, {"relu", "mlp.3"},
                                           {"linear", "mlp.4"}};
    assert_int_equal(v->n_items, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(v->items[i].op, order[i][0]);
        assert_string_equal(v->items[i].module, order[i][1]);
    }
    /* a detector's violation: the finding and its items in the engine's order */
    v = find(r, "forgot_no_grad", -1);
    assert_non_null(v);
    assert_non_null(v->finding);
    assert_int_equal(v->kind, GP_CHECK_DETECTOR);
    assert_string_equal(v->region, "inference");
    assert_int_equal(v->n_items, v->finding->n_items);
    for (size_t i = 0; i < v->n_items; i++) {
        const gp_finding_item *x = &v->items[i], *y = &v->finding->items[i];
        assert_true(x->category == y->category && x->op == y->op && x->module == y->module &&
                    x->stack == y->stack && x->bytes == y->bytes && x->count == y->count);
    }
    assert_int_equal(v->category, LP_CAT_SAVED); /* its largest item's */
    gp_check_result_free(r);
    gp_profile_free(p);
}

static void test_region(void **state)
{
    (void)state;
    char err[512];
    gp_profile *p = load(FIXTURE("mlp_grad"));
    const char *regions[] = {"inference"};
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    rules.regions = regions;
    rules.n_regions = 1;
    rules.forbid[LP_CAT_ACTIVATION] = true; /* a category outside the graph */
    memset(rules.detectors, 0, sizeof rules.detectors);
    gp_check_result *r = run(p, &rules);
    const gp_region_stats *reg = NULL;
    for (size_t i = 0; i < p->n_regions; i++)
        if (!strcmp(p->regions[i].name, "inference"))
            reg = &p->regions[i];
    assert_non_null(reg);
    const gp_check_violation *v = find(r, "forbid", LP_CAT_ACTIVATION);
    assert_non_null(v);
    assert_string_equal(v->region, "inference");
    assert_int_equal(v->bytes, reg->allocated_by_category[LP_CAT_ACTIVATION]);
    assert_true(v->bytes > 0);
    v = find(r, "forbid", LP_CAT_SAVED);
    assert_non_null(v);
    assert_int_equal(v->bytes, 262144);
    assert_int_equal(v->n_items, 2); /* from the detectors that fired there */
    assert_null(find(r, "forbid", LP_CAT_GRADIENT));
    bool named = false;
    for (size_t i = 0; i < r->n_rules; i++)
        named = named || !strcmp(r->rules[i].name, "forbid activation in inference");
    assert_true(named);
    gp_check_result_free(r);

    const char *nosuch[] = {"nosuch"};
    rules.regions = nosuch;
    gp_check_result *none = NULL;
    assert_int_equal(gp_check_run(p, &rules, &none, err, sizeof err), GP_EINVAL);
    assert_null(none);
    contains(err, "no region 'nosuch'");
    contains(err, "inference");
    gp_profile_free(p);
}

/* A program that ran backward (the detectors fixture: gradients inside a backward region) and is
 * failed by forbid over the whole run gets a hint naming --region inference; not once the rules
 * are scoped to a region, nor a program that never ran backward (mlp_grad). */
static void test_backward_hint(void **state)
{
    (void)state;
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    gp_profile *p = load(FIXTURE("detectors"));
    gp_check_result *r = run(p, &rules);
    assert_non_null(find(r, "forbid", LP_CAT_GRADIENT));
    contains(r->hint, "ran backward 1 time: forbid counts the graphs backward needed too");
    contains(r->hint, "'--region inference' judges its evaluation alone");
    contains(r->hint, "which built graphs too"); /* its inference region made 12 KiB of graph */
    gp_check_result_free(r);
    const char *regions[] = {"inference"};
    rules.regions = regions;
    rules.n_regions = 1;
    r = run(p, &rules);
    assert_string_equal(r->hint, "");
    gp_check_result_free(r);
    gp_profile_free(p);

    /* a training step, then an evaluation that builds no graph */
    tb *b = tb_open(tmp_path("train_eval.gptrace"), "train_eval");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 256, 0);
    tb_tag(b, 0x1000, 256, LP_CAT_SAVED, "relu", "m", NULL, true, 0);
    tb_region_push(b, "backward");
    tb_free(b, 0x1000);
    tb_region_pop(b);
    tb_at(b, 2000);
    tb_region_push(b, "inference");
    tb_alloc(b, 0x2000, 128, 0);
    tb_tag(b, 0x2000, 128, LP_CAT_ACTIVATION, "relu", "m", NULL, false, 0);
    tb_free(b, 0x2000);
    tb_region_pop(b);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    gp_check_rules_default(&rules);
    p = load(tmp_path("train_eval.gptrace"));
    r = run(p, &rules);
    assert_non_null(find(r, "forbid", LP_CAT_SAVED));
    contains(r->hint, "ran backward 1 time: ");
    contains(r->hint, "'--region inference' judges its evaluation alone (the calls of a model in "
                      "eval mode), which built none");
    gp_check_result_free(r);
    rules.regions = regions;
    rules.n_regions = 1;
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    gp_profile_free(p);

    gp_check_rules_default(&rules);
    p = load(FIXTURE("mlp_grad"));
    r = run(p, &rules);
    assert_int_equal(r->verdict, GP_CHECK_FAILED);
    assert_string_equal(r->hint, "");
    gp_check_result_free(r);
    gp_profile_free(p);
}

static void test_peak_growth_leaks(void **state)
{
    (void)state;
    gp_profile *p = load(FIXTURE("leak_accumulate"));
    gp_check_rules rules;
    max_peak_only(&rules, 1);
    rules.has_max_growth = true;
    rules.max_growth = 64 * 1024;
    rules.no_leaks = true;
    gp_check_result *r = run(p, &rules);
    const gp_check_violation *v = find(r, "max-growth", -1);
    assert_non_null(v);
    assert_int_equal(v->bytes, 346880);
    assert_int_equal(v->limit, 64 * 1024);
    assert_string_equal(v->first_mark->mark, "iter 0");
    assert_string_equal(v->last_mark->mark, "iter 5");
    v = find(r, "max-peak", -1);
    assert_non_null(v);
    assert_int_equal(v->bytes, p->peak_bytes);
    assert_int_equal(v->time_ns, p->peak_time_ns);
    for (size_t i = 1; i < v->n_items; i++)
        assert_true(v->items[i - 1].bytes >= v->items[i].bytes);
    assert_non_null(find(r, "no-leaks", -1));
    gp_check_result_free(r);
    gp_profile_free(p);

    p = load(FIXTURE("raw")); /* no marks: max-growth is skipped, saying why */
    r = run(p, &rules);
    assert_int_equal(r->rules_skipped, 1);
    bool said = false;
    for (size_t i = 0; i < r->n_rules; i++)
        said = said || strstr(r->rules[i].skipped, "the trace has 0 marks");
    assert_true(said);
    v = find(r, "no-leaks", -1);
    assert_non_null(v);
    assert_int_equal(v->bytes, 5096);
    assert_string_equal(v->items[0].op, ""); /* untagged: by call site, with its stack */
    assert_int_not_equal(v->items[0].stack, 0);
    gp_check_result_free(r);
    gp_profile_free(p);
}

/* baseline: saved (inferred) per op, then the held graph nodes per key, adding up. */
static void test_baseline(void **state)
{
    (void)state;
    gp_profile *a = NULL, *b = NULL;
    gp_diff *d = NULL;
    char err[512];
    gp_analysis_options ao;
    gp_analysis_options_default(&ao);
    if (gp_diff_load(FIXTURE("mlp_grad"), FIXTURE("mlp_nograd"), &ao, &a, &b, &d, err,
                     sizeof err) != 0)
        fail_msg("%s", err);
    gp_check_rules rules;
    gp_check_rules_default(&rules);
    memset(rules.forbid, 0, sizeof rules.forbid);
    memset(rules.detectors, 0, sizeof rules.detectors);
    rules.baseline = d;
    rules.baseline_slack = 0;
    gp_check_result *r = run(a, &rules);
    const gp_check_violation *v = find(r, "baseline", -1);
    assert_non_null(v);
    uint64_t held_graph = d->by_category[LP_CAT_AUTOGRAD].held_bytes +
                          d->by_category[LP_CAT_GRADIENT].held_bytes;
    assert_true(d->saved_inferred_bytes > 0 && held_graph > 0);
    assert_int_equal(v->saved_bytes, d->saved_inferred_bytes);
    assert_int_equal(v->held_graph_bytes, held_graph);
    assert_int_equal(v->bytes, d->saved_inferred_bytes + held_graph);
    assert_int_equal(v->category, LP_CAT_SAVED);
    uint64_t saved = 0, nodes = 0;
    for (size_t i = 0; i < v->n_items; i++) {
        if (i < v->n_saved_items) {
            assert_int_equal(v->items[i].category, LP_CAT_SAVED);
            saved += v->items[i].bytes;
        } else {
            assert_true(v->items[i].category == LP_CAT_AUTOGRAD ||
                        v->items[i].category == LP_CAT_GRADIENT);
            nodes += v->items[i].bytes;
        }
    }
    assert_int_equal(v->more_items, 0);
    assert_int_equal(v->n_saved_ops, v->n_saved_items);
    assert_int_equal(saved, d->saved_inferred_bytes);
    assert_int_equal(nodes, held_graph);
    gp_check_result_free(r);
    /* within the slack: passes */
    rules.baseline_slack = d->saved_inferred_bytes + held_graph;
    r = run(a, &rules);
    assert_int_equal(r->verdict, GP_CHECK_PASSED);
    gp_check_result_free(r);
    gp_diff_free(d);
    gp_profile_free(b);
    gp_profile_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_table),
        cmocka_unit_test_setup_teardown(test_top_site, setup, teardown),
        cmocka_unit_test(test_end_reason),
        cmocka_unit_test_setup_teardown(test_incomplete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unclassified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_save_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_saves_unseen, setup, teardown),
        cmocka_unit_test(test_forbid),
        cmocka_unit_test(test_region),
        cmocka_unit_test_setup_teardown(test_backward_hint, setup, teardown),
        cmocka_unit_test(test_peak_growth_leaks),
        cmocka_unit_test(test_baseline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
