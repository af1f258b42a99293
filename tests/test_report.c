/*
 * End-to-end tests of `gradprof report`: the gradprof binary runs as a subprocess on the fixture
 * traces of tests/traces/make_traces.c.
 *
 * Golden files: tests/golden/report_<trace>.{txt,json} hold the exact text and JSON output for
 * each fixture trace, compared byte for byte. After an intended change of the output, regenerate
 * them with
 *     GRADPROF_UPDATE_GOLDEN=1 ctest -R test_report     (or run the test binary with it set)
 * and review the diff before committing. The golden runs cd into the traces directory and pass a
 * relative path, so the build directory never shows in the output.
 *
 * The golden files are not trusted alone: test_numbers checks the key numbers against values
 * computed by hand from make_traces.c (the derivations are in the comments).
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "traces/trace_builder.h"

#ifndef GRADPROF_BIN
#error "GRADPROF_BIN (the gradprof executable) must be defined"
#endif
#ifndef GRADPROF_TEST_TRACES
#error "GRADPROF_TEST_TRACES (the fixture trace directory) must be defined"
#endif
#ifndef GRADPROF_GOLDEN_DIR
#error "GRADPROF_GOLDEN_DIR (tests/golden in the source tree) must be defined"
#endif

static char tmpdir[256];
static char out_path[512], err_path[512];

/* ---- helpers --------------------------------------------------------------------------------- */

/* Runs `sh -c CMD` with stdout and stderr to out_path and err_path; returns the exit status
 * (128 + N for signal N). */
#define run(...) e2e_shell(NULL, out_path, err_path, __VA_ARGS__)

/* A new trace at `path` of a program started as `command`, its thread 1 named "main". */
static tb *open_main(const char *path, const char *command)
{
    tb *b = tb_open(path, command);
    assert_non_null(b);
    tb_thread(b, 1, "main");
    return b;
}

/* Ends and closes trace b (at `path`) and returns the text `gradprof report` prints of it. */
static char *end_and_report(tb *b, const char *path)
{
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    assert_int_equal(run("'%s' report '%s'", GRADPROF_BIN, path), 0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    return text;
}

/* Runs the report of trace NAME in FORMAT (extra options in `extra`) from the traces directory and
 * compares its stdout with tests/golden/report_NAME[SUFFIX].EXT, or rewrites that file when
 * GRADPROF_UPDATE_GOLDEN=1. */
static void golden(const char *name, const char *format, const char *ext, const char *extra,
                   const char *suffix)
{
    int rc = run("cd '%s' && '%s' report %s.gptrace --format %s %s", GRADPROF_TEST_TRACES,
                 GRADPROF_BIN, name, format, extra ? extra : "");
    if (rc != 0)
        e2e_print_file("stderr", err_path);
    assert_int_equal(rc, 0);
    size_t len = 0;
    char *got = e2e_slurp(out_path, &len);
    assert_non_null(got);
    assert_true(len > 0);

    char golden_path[1024];
    snprintf(golden_path, sizeof golden_path, "%s/report_%s%s.%s", GRADPROF_GOLDEN_DIR, name,
             suffix ? suffix : "", ext);
    const char *update = getenv("GRADPROF_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        assert_true(e2e_write_file(golden_path, got, len));
        print_message("updated %s\n", golden_path);
        free(got);
        return;
    }
    size_t want_len = 0;
    char *want = e2e_slurp(golden_path, &want_len);
    if (!want)
        fail_msg("missing golden file %s (GRADPROF_UPDATE_GOLDEN=1 creates it)", golden_path);
    if (want_len != len || memcmp(want, got, len) != 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "diff -u '%s' '%s' | head -60 >&2", golden_path, out_path);
        if (system(cmd) == -1)
            print_message("(diff failed)\n");
        free(want);
        free(got);
        fail_msg("report of %s (%s) differs from %s; if intended, rerun with "
                 "GRADPROF_UPDATE_GOLDEN=1",
                 name, format, golden_path);
    }
    free(want);
    free(got);
}

/* The JSON in out_path parses with Python's json module (an independent parser). */
static void assert_json_parses(void)
{
    if (!e2e_have_python()) {
        print_message("no /usr/bin/python3: JSON validity not checked independently\n");
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '%s'", out_path);
    assert_int_equal(system(cmd), 0);
}

/*
 * The number after the last of a path of keys, each searched from where the previous was found
 * (the renderer's layout is fixed: one key per line, two spaces per level). A key "name" matches
 * `"name": `, "@name" a top-level `"name": ` only, and a key holding a quote is matched as is.
 * For example json_u64(doc, "@by_category", "saved", "bytes_at_peak", NULL). Fails the test if a
 * key is absent.
 */
static uint64_t json_u64(const char *doc, ...)
{
    va_list ap;
    va_start(ap, doc);
    const char *p = doc, *key;
    char pat[256];
    while ((key = va_arg(ap, const char *)) != NULL) {
        if (key[0] == '@')
            snprintf(pat, sizeof pat, "\n  \"%s\": ", key + 1);
        else if (strchr(key, '"'))
            snprintf(pat, sizeof pat, "%s", key);
        else
            snprintf(pat, sizeof pat, "\"%s\": ", key);
        const char *q = strstr(p, pat);
        if (!q) {
            va_end(ap);
            fail_msg("JSON key \"%s\" not found", key);
        }
        p = q + strlen(pat);
    }
    va_end(ap);
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (end == p)
        fail_msg("JSON value is not a number: %.40s", p);
    return (uint64_t)v;
}

/* Runs the JSON report of a fixture trace into out_path; returns its text (caller frees). */
static char *json_report(const char *name)
{
    int rc = run("'%s' report '%s/%s.gptrace' --format json --top 0", GRADPROF_BIN,
                 GRADPROF_TEST_TRACES, name);
    if (rc != 0)
        e2e_print_file("stderr", err_path);
    assert_int_equal(rc, 0);
    char *doc = e2e_slurp(out_path, NULL);
    assert_non_null(doc);
    return doc;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("expected to find \"%s\" in:\n%s", needle, hay);
}

/* ---- setup ----------------------------------------------------------------------------------- */

static int setup(void **state)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gp_test_report.XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(out_path, sizeof out_path, "%s/out", tmpdir);
    snprintf(err_path, sizeof err_path, "%s/err", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- golden outputs -------------------------------------------------------------------------- */

static void test_golden_mlp_grad(void **state)
{
    golden("mlp_grad", "text", "txt", NULL, NULL);
    golden("mlp_grad", "json", "json", NULL, NULL);
    assert_json_parses();
}

static void test_golden_mlp_nograd(void **state)
{
    golden("mlp_nograd", "text", "txt", NULL, NULL);
    golden("mlp_nograd", "json", "json", NULL, NULL);
    assert_json_parses();
}

static void test_golden_leak_accumulate(void **state)
{
    golden("leak_accumulate", "text", "txt", NULL, NULL);
    golden("leak_accumulate", "json", "json", NULL, NULL);
    assert_json_parses();
}

static void test_golden_raw(void **state)
{
    golden("raw", "text", "txt", NULL, NULL);
    golden("raw", "json", "json", NULL, NULL);
    assert_json_parses();
}

static void test_golden_damaged(void **state)
{
    golden("damaged", "text", "txt", NULL, NULL);
    /* The warning goes to stderr, not into the report's stdout: it says what was lost. */
    char *err = e2e_slurp(err_path, NULL);
    assert_non_null(err);
    assert_contains(err, "damaged");
    assert_contains(err, "damaged.gptrace");
    free(err);
    golden("damaged", "json", "json", NULL, NULL);
    assert_json_parses();
}

/* --top 1 and --measure total: every ranked table shows one row and says how many more. */
static void test_golden_top1(void **state)
{
    golden("leak_accumulate", "text", "txt", "--top 1 --measure total", "_top1");
    char *out = e2e_slurp(out_path, NULL);
    assert_non_null(out);
    /* Truncated: tags, sites, temporaries' sites... each says how many rows it left out. */
    size_t notes = 0;
    for (const char *q = out; (q = strstr(q, " more; --top 0 shows all)\n")) != NULL; q++)
        notes++;
    assert_true(notes >= 5); /* tags, sites, leaks, regions, marks (and finding items) */
    assert_contains(out, "  (5 more; --top 0 shows all)\n  iter 5 "); /* the last mark shows */
    assert_contains(out, "Top sites by bytes allocated");
    free(out);
}

/* ---- numbers computed by hand ---------------------------------------------------------------- */

/*
 * From make_traces.c: B = 32, W = 256, OUT = 10, ACT = B*W*4 = 32768, NODE = 512.
 * Parameters: 2 x (256*256*4 + 256*4) + (10*256*4 + 10*4) = 2 x 263168 + 10280 = 536616;
 * input ACT = 32768; together 569384 in 7 buffers, never freed.
 *
 * mlp_grad, one forward with grad, in order: h0 (ACT) + node; a0 (ACT) + node, a0 -> SAVED,
 * free h0; h1 (ACT) + node; a1 (ACT) + node, a1 -> SAVED, free h1; h2 (32*10*4 = 1280) + node.
 * The total is highest when the relu node of layer 1 is allocated:
 * 569384 + a0 + h1 + a1 + 4 nodes = 569384 + 3*32768 + 2048 = 669736, at t = 60 us (7 us of
 * parameters, then 20 + 1 + 5 + 1 + 20 + 1 + 5 us). Every iteration repeats it; the first wins.
 * At that instant saved holds a0 only (a1 is retagged after its node): 32768; activation holds
 * h1 and a1: 65536. Per iteration 10 allocations of 4*32768 + 1280 + 5*512 = 134912 bytes,
 * so 47 allocations and 569384 + 4*134912 = 1109032 bytes in all; 40 frees.
 *
 * mlp_nograd: the peak is two activations on top of the parameters: 569384 + 65536 = 634920,
 * first at a0's allocation (t = 28 us), nothing saved and no graph.
 *
 * leak_accumulate: every iteration keeps a0, a1 (SAVED), h2 and 5 nodes: 65536 + 1280 + 2560 =
 * 69376 bytes. The peak is in the 6th forward: 569384 + 5*69376 + 3*32768 + 2048 = 1016616; at
 * the end 569384 + 6*69376 = 985640 stay live; the live total grows by 69376 per mark.
 *
 * raw: 100 allocations of 64 B freed at once (temporaries); 4096 + 1000 = 5096 B never freed (2
 * leaks); cuda:0 1 MiB allocated and freed by the main thread with no other allocation of that
 * thread in between (a temporary too); the worker's 10 x 2048 B are freed after its last
 * allocation, so the last one is a temporary: 102 temporaries. The host peak: 5096 + 10*2048 =
 * 25576 at the worker's 10th allocation (t = 31 us); cuda:0 peaks at 1048576. One free of an
 * address never allocated.
 */
static void test_numbers_mlp_grad(void **state)
{
    char *doc = json_report("mlp_grad");
    assert_int_equal(json_u64(doc, "@peak_bytes", NULL), 669736);
    assert_int_equal(json_u64(doc, "@peak_time_ns", NULL), 60000);
    assert_int_equal(json_u64(doc, "@alloc_count", NULL), 47);
    assert_int_equal(json_u64(doc, "@free_count", NULL), 40);
    assert_int_equal(json_u64(doc, "@total_allocated_bytes", NULL), 1109032);
    assert_int_equal(json_u64(doc, "@leaked_bytes", NULL), 569384);
    assert_int_equal(json_u64(doc, "@leaked_count", NULL), 7);
    assert_int_equal(json_u64(doc, "@by_category", "parameter", "bytes_at_peak", NULL), 536616);
    assert_int_equal(json_u64(doc, "@by_category", "input", "bytes_at_peak", NULL), 32768);
    assert_int_equal(json_u64(doc, "@by_category", "saved", "bytes_at_peak", NULL), 32768);
    assert_int_equal(json_u64(doc, "@by_category", "activation", "bytes_at_peak", NULL), 65536);
    /* The graph's own maximum: both ReLU outputs of one forward saved at once. */
    assert_int_equal(json_u64(doc, "@by_category", "saved", "max_live", NULL), 65536);
    assert_int_equal(json_u64(doc, "@by_category", "saved", "live_at_end", NULL), 0);
    free(doc);

    /* The same numbers in the text report, exact bytes beside the human size. */
    assert_int_equal(run("'%s' report '%s/mlp_grad.gptrace'", GRADPROF_BIN, GRADPROF_TEST_TRACES),
                     0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_contains(text, "\nPeak          654.04 KiB (669,736 B) at 60.0 us on host\n");
    assert_contains(text, "\nLive at exit  556.04 KiB (569,384 B) in 7 allocations\n");
    free(text);
}

static void test_numbers_mlp_nograd(void **state)
{
    char *doc = json_report("mlp_nograd");
    assert_int_equal(json_u64(doc, "@peak_bytes", NULL), 634920);
    assert_int_equal(json_u64(doc, "@peak_time_ns", NULL), 28000);
    assert_int_equal(json_u64(doc, "@by_category", "saved", "bytes_at_peak", NULL), 0);
    assert_int_equal(json_u64(doc, "@by_category", "autograd", "bytes_at_peak", NULL), 0);
    assert_int_equal(json_u64(doc, "@by_category", "saved", "max_live", NULL), 0);
    assert_int_equal(json_u64(doc, "@leaked_bytes", NULL), 569384);
    assert_contains(doc, "\n  \"saved_tensors\": [],\n");
    free(doc);
}

static void test_numbers_leak_accumulate(void **state)
{
    char *doc = json_report("leak_accumulate");
    assert_int_equal(json_u64(doc, "@peak_bytes", NULL), 1016616);
    assert_int_equal(json_u64(doc, "@leaked_bytes", NULL), 985640);
    /* Saved at the end: 6 iterations x 2 ReLU outputs. */
    assert_int_equal(json_u64(doc, "@by_category", "saved", "live_at_end", NULL), 6 * 2 * 32768);
    /* The second mark: one iteration's graph and output more than the first. */
    assert_int_equal(json_u64(doc, "@iterations", "\"mark\": \"iter 1\"", "growth_bytes", NULL),
                     69376);
    assert_contains(doc, "\"kind\": \"growth_across_iterations\"");
    free(doc);
}

static void test_numbers_raw(void **state)
{
    char *doc = json_report("raw");
    assert_int_equal(json_u64(doc, "@leaked_bytes", NULL), 5096);
    assert_int_equal(json_u64(doc, "@leaked_count", NULL), 2);
    assert_int_equal(json_u64(doc, "@temporary_count", NULL), 102);
    assert_int_equal(json_u64(doc, "@peak_bytes", NULL), 25576);
    assert_int_equal(json_u64(doc, "@peak_time_ns", NULL), 31000);
    assert_int_equal(json_u64(doc, "@unknown_frees", NULL), 1);
    assert_int_equal(json_u64(doc, "@devices", "\"device\": \"cuda:0\"", "peak_bytes", NULL),
                     1048576);
    assert_int_equal(json_u64(doc, "@by_category", "other", "bytes_at_peak", NULL), 25576);
    assert_contains(doc, "\n  \"findings\": [],\n");
    assert_contains(doc, "\n  \"notes\": []\n"); /* the fixtures have no notes */
    free(doc);
}

static void test_numbers_damaged(void **state)
{
    char *doc = json_report("damaged");
    assert_contains(doc, "\"damaged\": true");
    /* make_traces cuts the last 40 bytes: the lost part starts inside the last chunk. */
    assert_true(json_u64(doc, "bytes_lost", NULL) >= 40);
    assert_contains(doc, "\"clean_end\": false");
    /* The first iteration's peak comes long before the damage. */
    assert_int_equal(json_u64(doc, "@peak_bytes", NULL), 669736);
    free(doc);
    char *err = e2e_slurp(err_path, NULL);
    assert_non_null(err);
    assert_contains(err, "gradprof report: warning: ");
    free(err);
}

/* ---- JSON schema ----------------------------------------------------------------------------- */

/* Every documented key is present even when its list is empty (no regions, no saved tensors). */
/* Allocations that failed: the Failed line, and the verdict (after a finding's, or alone). */
static void test_out_of_memory(void **state)
{
    (void)state;
    char trace[512];
    snprintf(trace, sizeof trace, "%s/oom.gptrace", tmpdir);
    for (int with_finding = 0; with_finding < 2; with_finding++) {
        tb *b = open_main(trace, "python3 eval.py");
        tb_at(b, 1000);
        if (with_finding)
            tb_region_push(b, "inference"); /* grad on there: a forgot_no_grad finding */
        tb_alloc(b, 0x10000, 4096, 0);
        tb_tag(b, 0x10000, 4096, LP_CAT_SAVED, "aten::relu", "net.1", "", true, 0);
        tb_region_push(b, "net.2");
        tb_at(b, 2000000);
        tb_note(b, LP_NOTE_ALLOC_FAILED, "1048576");
        tb_at(b, 3000000);
        tb_note(b, LP_NOTE_ALLOC_FAILED, "1048576");
        char *text = end_and_report(b, trace);
        assert_contains(text, "\nFailed        2 allocations (out of memory); the first: 1.00 MiB "
                              "asked at 2.00 ms in net.2, with 4.00 KiB live, 4.00 KiB of it graph "
                              "memory\n");
        if (with_finding)
            assert_contains(text, "; out of memory at 2.00 ms\n");
        else
            assert_contains(text, "\nverdict: out of memory: 1.00 MiB asked at 2.00 ms in net.2, "
                                  "with 4.00 KiB live, 4.00 KiB of it graph memory\n");
        free(text);
        remove(trace);
    }
}

static void test_json_keys_always_present(void **state)
{
    static const char *const keys[] = {"schema",          "trace",
                                       "primary_device",  "peak_bytes",
                                       "peak_time_ns",    "duration_ns",
                                       "alloc_count",     "free_count",
                                       "retag_count",     "total_allocated_bytes",
                                       "leaked_bytes",    "leaked_count",
                                       "temporary_count", "unknown_frees",
                                       "failed_allocs",   "first_failed",
                                       "by_category",     "devices",
                                       "order",           "counts",
                                       "tag_keys",        "sites",
                                       "modules",         "regions",
                                       "iterations",      "saved_tensors",
                                       "findings",        "notes"};
    char *doc = json_report("raw");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\n  \"%s\": ", keys[i]);
        assert_contains(doc, pat);
    }
    assert_contains(doc, "\"schema\": \"gradprof-report/1\"");
    static const char *const cats[] = {"parameter", "input",     "activation",
                                       "saved",     "gradient",  "optimizer_state",
                                       "autograd",  "temporary", "other"};
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, "\"%s\": {", cats[i]);
        assert_contains(doc, pat);
    }
    assert_contains(doc, "\n  \"regions\": [],\n");
    assert_contains(doc, "\n  \"iterations\": [],\n");
    free(doc);
}

/* With --python available, check the structure the README promises, with a real JSON parser. */
static void test_json_schema_python(void **state)
{
    if (!e2e_have_python()) {
        skip();
        return;
    }
    char *doc = json_report("mlp_grad");
    free(doc);
    static const char script[] =
        "import json,sys\n"
        "d=json.load(open(sys.argv[1]))\n"
        "assert d['schema']=='gradprof-report/1'\n"
        "assert d['by_category']['saved']['bytes_at_peak']==32768\n"
        "assert sum(c['bytes_at_peak'] for c in d['by_category'].values())==d['peak_bytes']\n"
        "assert sum(k['bytes_at_peak'] for k in d['tag_keys'])==d['peak_bytes']\n"
        "assert sum(s['bytes_at_peak'] for s in d['sites'])==d['peak_bytes']\n"
        "assert d['counts']['sites']==len(d['sites'])\n"
        "assert all(isinstance(s['frames'],list) for s in d['sites'])\n"
        "assert d['saved_tensors'] and all(t['op']=='relu' for t in d['saved_tensors'])\n"
        "assert any(f['kind']=='forgot_no_grad' for f in d['findings'])\n"
        "assert d['trace']['command']=='infer --grad' and d['trace']['pid']=='4242'\n";
    char script_path[512];
    snprintf(script_path, sizeof script_path, "%s/check.py", tmpdir);
    assert_true(e2e_write_file(script_path, script, strlen(script)));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script_path, out_path);
    assert_int_equal(system(cmd), 0);
}

/*
 * Strings from the trace with quotes, backslashes, control characters, non-ASCII UTF-8 and a byte
 * that is not UTF-8: JSON escapes them and keeps UTF-8 (Python reads back the same strings, the
 * bad byte as U+FFFD); the text report prints no control character at all.
 */
static void test_odd_strings(void **state)
{
    char trace[512];
    snprintf(trace, sizeof trace, "%s/odd.gptrace", tmpdir);
    tb *b =
        tb_open(trace, "prog \"q\" back\\slash\ttab\nnl \x01 na\xc3\xafve \xe2\x9c\x93 \xff end");
    assert_non_null(b);
    tb_module(b, 1, 0x400000, 0x1000, "/opt/gradprof-test/bin/odd", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    const uint64_t o[1] = {0x10};
    uint32_t st = tb_stack(b, 1, m, o);
    tb_region_push(b, "reg\"ion\n");
    tb_mark(b, "mark\\1");
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 100, st);
    tb_tag(b, 0x1000, 100, LP_CAT_ACTIVATION, "op\"x\\y", "mod\x1b[31m.\xc3\xbc", "[1,\t2]", false,
           0);
    tb_at(b, 2000);
    tb_region_pop(b);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);

    int rc = run("'%s' report '%s' --format json", GRADPROF_BIN, trace);
    if (rc != 0)
        e2e_print_file("stderr", err_path);
    assert_int_equal(rc, 0);
    assert_json_parses();
    if (e2e_have_python()) {
        static const char script[] =
            "import json,sys\n"
            "d=json.load(open(sys.argv[1],encoding='utf-8'))\n"
            "c=d['trace']['command']\n"
            "assert c=='prog \"q\" back\\\\slash\\ttab\\nnl \\x01 na\\u00efve \\u2713 \\ufffd "
            "end', repr(c)\n"
            "k=d['tag_keys'][0]\n"
            "assert k['op']=='op\"x\\\\y', repr(k)\n"
            "assert k['module']=='mod\\x1b[31m.\\u00fc', repr(k)\n"
            "assert d['regions'][0]['name']=='reg\"ion\\n', repr(d['regions'])\n"
            "assert d['iterations'][0]['mark']=='mark\\\\1', repr(d['iterations'])\n";
        char script_path[512], cmd[2048];
        snprintf(script_path, sizeof script_path, "%s/odd.py", tmpdir);
        assert_true(e2e_write_file(script_path, script, strlen(script)));
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script_path, out_path);
        assert_int_equal(system(cmd), 0);
    }
    /* Without Python: the raw bytes show the escapes. */
    char *doc = e2e_slurp(out_path, NULL);
    assert_non_null(doc);
    assert_contains(doc,
                    "\"prog \\\"q\\\" back\\\\slash\\ttab\\nnl \\u0001 na\xc3\xafve \xe2\x9c\x93 "
                    "\\ufffd end\"");
    assert_contains(doc, "\"module\": \"mod\\u001b[31m.\xc3\xbc\"");
    free(doc);

    rc = run("'%s' report '%s'", GRADPROF_BIN, trace);
    assert_int_equal(rc, 0);
    size_t len = 0;
    char *text = e2e_slurp(out_path, &len);
    assert_non_null(text);
    for (size_t i = 0; i < len; i++)
        if (((unsigned char)text[i] < 0x20 && text[i] != '\n') || text[i] == 0x7f)
            fail_msg("control character 0x%02x at offset %zu of the text report", text[i], i);
    assert_contains(text, "\nProgram       prog \"q\" back\\slash?tab?nl ? na\xc3\xafve");
    free(text);
}

/* Sites tied on their numbers are ordered by label, then index: within the rows shown (--top 2:
 * only the run that reaches them is ranked) and over the whole table in JSON (--top 0). Each
 * site's label is its Python line; the lines run backwards in the order the sites appear. */
static void test_site_ties_by_label(void **state)
{
    (void)state;
    char trace[512];
    snprintf(trace, sizeof trace, "%s/ties.gptrace", tmpdir);
    tb *b = tb_open(trace, "python3 ties.py");
    assert_non_null(b);
    tb_module(b, 1, 0, 0, "py:/srv/app/ties.py:f", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    uint64_t t = 1000, addr = 0x10000;
    for (int run = 0; run < 2; run++) /* two tied runs: 4 sites of 2000 B, then 4 of 1000 B */
        for (uint64_t line = 69; line >= 66; line--) {
            const uint64_t o[1] = {line - (uint64_t)run * 10};
            tb_at(b, t += 100);
            tb_alloc(b, addr += 0x1000, 2000 - (uint64_t)run * 1000, tb_stack(b, 1, m, o));
        }
    tb_end(b);
    assert_int_equal(tb_close(b), 0);

    assert_int_equal(run("'%s' report '%s' --top 2", GRADPROF_BIN, trace), 0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    const char *sites = strstr(text, "Top sites");
    assert_non_null(sites);
    const char *first = strstr(sites, "ties.py:66 (f)"), *second = strstr(sites, "ties.py:67 (f)");
    assert_non_null(first);
    assert_non_null(second);
    assert_true(first < second);
    free(text);

    assert_int_equal(run("'%s' report '%s' --format json --top 0", GRADPROF_BIN, trace), 0);
    char *doc = e2e_slurp(out_path, NULL);
    assert_non_null(doc);
    const char *at = strstr(doc, "\"sites\"");
    assert_non_null(at);
    static const char *const order[] = {"ties.py:66 (f)", "ties.py:67 (f)", "ties.py:68 (f)",
                                        "ties.py:69 (f)", "ties.py:56 (f)", "ties.py:57 (f)",
                                        "ties.py:58 (f)", "ties.py:59 (f)"};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++) {
        const char *next = strstr(at, order[i]);
        if (!next)
            fail_msg("site %s missing or out of order in the JSON sites", order[i]);
        at = next;
    }
    free(doc);
}

/* A trace without stacks (Python is recorded so by default) lists its leaks by tag, and its site
 * tables say why they are empty, where every site would read "[no stack]": 3 x 4096 B saved by
 * net.1's relu, a 10000 B parameter of net.0 and 2 x 100 B untagged stay live (a third 100 B buffer
 * and a fourth saved one are freed): 22,488 B in 6 allocations. The saved ones are made inside
 * "inference" with grad on. */
/* forgot_no_grad's verdict quotes the saved memory at the peak only when the peak is inside the
 * region where grad was forgotten: a training step's graph at the peak is not what no_grad in
 * the evaluation would save. Otherwise it says what the region saved over the run, and the most
 * of it alive at once where its graphs did not all live together. */
static void test_forgot_no_grad_verdict(void **state)
{
    (void)state;
    char trace[512];
    snprintf(trace, sizeof trace, "%s/train_eval.gptrace", tmpdir);
    enum { PEAK_IN_TRAINING, PEAK_IN_EVAL, ONE_AT_A_TIME };
    static const char *const want[] = {
        [PEAK_IN_TRAINING] = "\nverdict: forgot no_grad: 12.00 KiB saved for backward inside "
                             "'inference' by 1 module\n",
        [PEAK_IN_EVAL] = "\nverdict: forgot no_grad: 12.00 KiB saved for backward at the peak "
                         "by 1 module",
        [ONE_AT_A_TIME] = "\nverdict: forgot no_grad: 12.00 KiB saved for backward inside "
                          "'inference' by 1 module, at most 4.00 KiB alive at once\n",
    };
    for (int variant = PEAK_IN_TRAINING; variant <= ONE_AT_A_TIME; variant++) {
        tb *b = open_main(trace, "python3 train.py");
        uint64_t t = 1000, train = variant == PEAK_IN_EVAL ? 2048 : 65536;
        tb_region_push(b, "train"); /* a training step: its graph, then backward frees it */
        tb_at(b, t += 100);
        tb_alloc(b, 0x10000, train, 0);
        tb_tag(b, 0x10000, train, LP_CAT_SAVED, "aten::addmm", "net.0", "[16384]", true, 0);
        tb_at(b, t += 100);
        tb_free(b, 0x10000);
        tb_region_pop(b);
        /* the evaluation forgot no_grad: 3 x 4 KiB saved, in one region or one each */
        for (uint64_t i = 0; i < 3; i++) {
            if (i == 0 || variant == ONE_AT_A_TIME)
                tb_region_push(b, "inference");
            tb_at(b, t += 100);
            tb_alloc(b, 0x40000 + i * 0x1000, 4096, 0);
            tb_tag(b, 0x40000 + i * 0x1000, 4096, LP_CAT_SAVED, "aten::relu", "net.1", "[1024]",
                   true, 0);
            if (variant == ONE_AT_A_TIME) {
                tb_region_pop(b);
                tb_free(b, 0x40000 + i * 0x1000);
            }
        }
        tb_at(b, t += 100);
        if (variant != ONE_AT_A_TIME) {
            tb_region_pop(b);
            for (uint64_t i = 0; i < 3; i++)
                tb_free(b, 0x40000 + i * 0x1000);
        }
        char *text = end_and_report(b, trace);
        assert_contains(text, want[variant]);
        free(text);
        remove(trace);
    }
}

/* Graphs kept in a window of two outputs escape one at a time: the escape's figures say both
 * what escaped over the run and the most of it alive at once (report text and JSON, check). */
static void test_escape_at_once(void **state)
{
    (void)state;
    static const struct {
        const char *command, *options;
        int rc;
        const char *want[2];
    } cases[] = {
        {"report",
         "",
         0,
         {"\nverdict: graphs kept beyond the next iteration: up to 64.00 KiB of graph memory at "
          "once (320.00 KiB in all)\n",
          "(327,680 B), at most 64.00 KiB saved for backward alive at once, 10 events"}},
        {"report", "--format json", 0, {"\"bytes\": 327680,\n      \"peak_bytes\": 65536,"}},
        {"check",
         "--forbid none",
         1,
         {"in region 'inference': 320.00 KiB (327680 bytes), at most 64.00 KiB saved for "
          "backward alive at once, 10 events"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(run("'%s' %s '%s/leak_window.gptrace' %s", GRADPROF_BIN, cases[i].command,
                             GRADPROF_TEST_TRACES, cases[i].options),
                         cases[i].rc);
        char *text = e2e_slurp(out_path, NULL);
        assert_non_null(text);
        for (int k = 0; k < 2 && cases[i].want[k]; k++)
            assert_contains(text, cases[i].want[k]);
        free(text);
    }
}

/* Past its first 64 escapes the detector counts an escape's bytes without listing its buffers:
 * the finding's line and the verdict measure "at once" against the same total. 70 iterations
 * of a 1 KiB saved buffer, each kept for 66 iterations: 69 escape (68 judged when the iteration
 * after the next begins, the 69th at the end), 65 KiB of them alive at once (more than the 64
 * listed). */
static void test_escape_at_once_counted(void **state)
{
    (void)state;
    enum { ITERS = 70, KEPT = 66, SIZE = 1024 };
    char trace[512];
    snprintf(trace, sizeof trace, "%s/window66.gptrace", tmpdir);
    tb *b = open_main(trace, "python3 eval.py");
    uint64_t t = 1000;
    for (uint64_t i = 0; i < ITERS; i++) {
        tb_region_push(b, "inference");
        tb_at(b, t += 100);
        tb_alloc(b, 0x100000 + i * 0x1000, SIZE, 0);
        tb_tag(b, 0x100000 + i * 0x1000, SIZE, LP_CAT_SAVED, "aten::relu", "net.1", "[256]", true,
               0);
        tb_region_pop(b);
        if (i >= KEPT)
            tb_free(b, 0x100000 + (i - KEPT) * 0x1000);
    }
    char *text = end_and_report(b, trace);
    assert_contains(text, "graphs kept beyond the next iteration: up to 65.00 KiB of graph "
                          "memory at once (69.00 KiB in all)\n");
    assert_contains(text, "69.00 KiB (70,656 B), at most 65.00 KiB saved for backward alive at "
                          "once, 69 events");
    free(text);
    remove(trace);
}

static void test_leaks_by_tag_without_stacks(void **state)
{
    (void)state;
    char trace[512];
    snprintf(trace, sizeof trace, "%s/nostacks.gptrace", tmpdir);
    tb *b = open_main(trace, "python3 leak.py");
    uint64_t t = 1000;
    tb_at(b, t += 100);
    tb_alloc(b, 0x10000, 10000, 0);
    tb_tag(b, 0x10000, 10000, LP_CAT_PARAMETER, "parameter", "net.0", "[2500]", true, 0);
    tb_region_push(b, "inference"); /* grad on there: a forgot_no_grad finding */
    for (uint64_t i = 0; i < 4; i++) {
        tb_at(b, t += 100);
        tb_alloc(b, 0x20000 + i * 0x1000, 4096, 0);
        tb_tag(b, 0x20000 + i * 0x1000, 4096, LP_CAT_SAVED, "aten::relu", "net.1", "[1024]", true,
               0);
    }
    tb_region_pop(b);
    for (uint64_t i = 0; i < 3; i++) {
        tb_at(b, t += 100);
        tb_alloc(b, 0x30000 + i * 0x100, 100, 0);
    }
    tb_at(b, t += 100);
    tb_free(b, 0x23000);
    tb_free(b, 0x30200);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);

    assert_int_equal(run("'%s' report '%s' --top 2", GRADPROF_BIN, trace), 0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    const char *leaks =
        strstr(text, "\nLive at exit (leaks): 21.96 KiB (22,488 B) in 6 allocations\n"
                     "  by tag: no call stacks were recorded");
    assert_non_null(leaks);
    const char *first = strstr(leaks, "\n  1. 12.00 KiB (12,288 B) in 3 allocations, saved, "
                                      "op aten::relu, module net.1\n"
                                      "  2. 9.77 KiB (10,000 B) in 1 allocation, parameter, "
                                      "op parameter, module net.0\n"
                                      "  (1 more; --top 0 shows all)\n");
    assert_non_null(first);
    assert_null(strstr(text, "[no stack]"));
    /* The site tables say why they are empty instead of one "[no stack]" row. */
    assert_non_null(strstr(text, "\nTop sites by bytes at peak\n  none: no call stacks were "
                                 "recorded (gradprof run --stack-depth N records them)\n"));
    free(text);

    assert_int_equal(run("'%s' report '%s' --top 0", GRADPROF_BIN, trace), 0);
    text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "\n  3. 200 B in 2 allocations, other, op -, module -\n"));
    /* The finding's table has no site column: every item would read "-". */
    const char *finding = strstr(text, "[forgot_no_grad]");
    assert_non_null(finding);
    const char *header = strstr(finding, "bytes  count  category  op");
    assert_non_null(header);
    const char *eol = strchr(header, '\n');
    assert_non_null(eol);
    assert_null(memmem(header, (size_t)(eol - header), "site", 4));
    free(text);

    /* The HTML page's leaks too: by tag, the saved buffers first; nowhere a "[no stack]" cell (the
     * finding's table has no site column either). */
    assert_int_equal(run("'%s' report '%s' --format html", GRADPROF_BIN, trace), 0);
    text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "forgot_no_grad"));
    assert_null(strstr(text, "[no stack]"));
    const char *html = strstr(text, "<section id=\"leaks\">");
    assert_non_null(html);
    assert_non_null(strstr(html, "by tag: no call stacks were recorded"));
    const char *saved = strstr(html, "<td>aten::relu</td><td>net.1</td>");
    const char *param = strstr(html, "<td>parameter</td><td>net.0</td>");
    assert_non_null(saved);
    assert_non_null(param);
    assert_true(saved < param);
    assert_null(strstr(html, "[no stack]"));
    free(text);

    /* The stack exports: a path per tag key, its module and op under its category, where every
     * site would be "[no stack]"; at the peak (before the two frees) they sum to it. */
    assert_int_equal(run("'%s' report '%s' --format folded", GRADPROF_BIN, trace), 0);
    text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_string_equal(text, "other 300\n"
                              "parameter;net.0;parameter 10000\n"
                              "saved;net.1;aten::relu 16384\n");
    free(text);
    assert_int_equal(run("'%s' report '%s' --format speedscope", GRADPROF_BIN, trace), 0);
    text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "{\"name\":\"net.1\"}"));
    assert_non_null(strstr(text, "{\"name\":\"aten::relu\"}"));
    assert_non_null(strstr(text, "\"endValue\":26684"));
    assert_null(strstr(text, "[no stack]"));
    free(text);
}

/* The chart's iteration marks: one far from the others keeps its label; three in the last
 * hundredth of the run, where their labels would overlap, are labelled only where the label ends
 * before the next mark (the last one); each mark keeps its tick and tooltip. */
static void test_mark_labels_do_not_overlap(void **state)
{
    (void)state;
    char trace[512];
    snprintf(trace, sizeof trace, "%s/marks.gptrace", tmpdir);
    tb *b = open_main(trace, "python3 marks.py");
    tb_at(b, 1000);
    tb_alloc(b, 0x10000, 4096, 0);
    tb_at(b, 1000000000);
    tb_mark(b, "early");
    static const uint64_t late[] = {99000000000, 99300000000, 99600000000};
    static const char *const names[] = {"iter 1", "iter 2", "iter 3"};
    for (int i = 0; i < 3; i++) {
        tb_at(b, late[i]);
        tb_alloc(b, 0x20000 + (uint64_t)i * 0x1000, 4096, 0);
        tb_mark(b, names[i]);
    }
    tb_at(b, 100000000000);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);

    assert_int_equal(run("'%s' report '%s' --format html", GRADPROF_BIN, trace), 0);
    char *html = e2e_slurp(out_path, NULL);
    assert_non_null(html);
    assert_non_null(strstr(html, ">early</text>"));
    assert_null(strstr(html, ">iter 1</text>"));
    assert_null(strstr(html, ">iter 2</text>"));
    assert_non_null(strstr(html, ">iter 3</text>"));
    for (int i = 0; i < 3; i++) { /* every mark still has its tooltip */
        char title[64];
        snprintf(title, sizeof title, "<title>%s at ", names[i]);
        assert_non_null(strstr(html, title));
    }
    free(html);
}

/* A job of processes without ranks (a fork pool's): the first line names the worst by its pid. */
static void test_job_without_ranks(void **state)
{
    (void)state;
    char traces[2][512];
    for (int k = 0; k < 2; k++) {
        snprintf(traces[k], sizeof traces[k], "%s/pool%d.gptrace", tmpdir, k);
        tb *b = open_main(traces[k], "python3 pool.py");
        tb_at(b, 1000);
        tb_alloc(b, 0x10000, k ? 8192 : 4096, 0); /* the second one peaks higher */
        tb_end(b);
        assert_int_equal(tb_close(b), 0);
    }
    assert_int_equal(run("'%s' report '%s' '%s'", GRADPROF_BIN, traces[0], traces[1]), 0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    /* the builder records pid 4242 */
    const char *head = "gradprof job: 2 processes; the worst: pid 4242, peak 8.00 KiB,";
    assert_int_equal(strncmp(text, head, strlen(head)), 0);
    free(text);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_unwritable_output(void **state)
{
    int rc = run("'%s' report '%s/mlp_grad.gptrace' -o /nonexistent-dir/report.txt", GRADPROF_BIN,
                 GRADPROF_TEST_TRACES);
    assert_int_equal(rc, 2);
    char *err = e2e_slurp(err_path, NULL);
    assert_non_null(err);
    assert_contains(err, "gradprof report: ");
    assert_contains(err, "/nonexistent-dir/report.txt");
    assert_null(strchr(strchr(err, '\n') + 1, '\n')); /* one line */
    free(err);

    /* A write that fails after opening (a full device) is an error naming the output too. */
    if (access("/dev/full", W_OK) == 0) {
        rc = run("'%s' report '%s/mlp_grad.gptrace' -o /dev/full", GRADPROF_BIN,
                 GRADPROF_TEST_TRACES);
        assert_int_equal(rc, 2);
        err = e2e_slurp(err_path, NULL);
        assert_non_null(err);
        assert_contains(err, "'/dev/full'");
        free(err);
        rc = run("'%s' report '%s/mlp_grad.gptrace' --format json > /dev/full", GRADPROF_BIN,
                 GRADPROF_TEST_TRACES);
        assert_int_equal(rc, 2);
    }
}

static void test_usage_errors(void **state)
{
    struct {
        const char *args, *message;
    } cases[] = {
        {"report '%s/mlp_grad.gptrace' --format yaml", "unknown --format 'yaml'"},
        {"report '%s/mlp_grad.gptrace' --top -1", "--top"},
        {"report '%s/mlp_grad.gptrace' --top ten", "--top"},
        {"report '%s/mlp_grad.gptrace' --measure bytes", "unknown --measure 'bytes'"},
        {"report '%s/mlp_grad.gptrace' --bogus", "--bogus"},
        {"report '%s/mlp_grad.gptrace' --format", "--format"},
        {"report", "expected a trace file, got none"},
        {"report '%s/mlp_grad.gptrace' '%s/raw.gptrace' --format html", "takes one trace, got 2"},
        {"report '%s/no-such.gptrace'", "no-such.gptrace"},
        {"report '%s/../CMakeFiles'", "CMakeFiles"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, cases[i].args, GRADPROF_TEST_TRACES, GRADPROF_TEST_TRACES);
        int rc = run("'%s' %s", GRADPROF_BIN, args);
        char *err = e2e_slurp(err_path, NULL);
        assert_non_null(err);
        if (rc != 2 || !strstr(err, cases[i].message))
            fail_msg("gradprof %s: exit %d, stderr: %s", args, rc, err);
        assert_non_null(strstr(err, "gradprof report: "));
        char *out = e2e_slurp(out_path, NULL);
        assert_non_null(out);
        assert_string_equal(out, ""); /* nothing half-written on stdout */
        free(out);
        free(err);
    }
}

/* A file that is not a trace, and one cut inside its header: one error line, exit 2. */
static void test_bad_traces(void **state)
{
    char path[512];
    snprintf(path, sizeof path, "%s/notatrace.gptrace", tmpdir);
    assert_true(e2e_write_file(path, "hello, world\n", 13));
    int rc = run("'%s' report '%s'", GRADPROF_BIN, path);
    assert_int_equal(rc, 2);
    char *err = e2e_slurp(err_path, NULL);
    assert_non_null(err);
    assert_contains(err, "notatrace.gptrace");
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));
    free(err);

    snprintf(path, sizeof path, "%s/empty.gptrace", tmpdir);
    assert_true(e2e_write_file(path, "", 0));
    rc = run("'%s' report '%s'", GRADPROF_BIN, path);
    assert_int_equal(rc, 2);
}

static void test_help(void **state)
{
    assert_int_equal(run("'%s' report --help", GRADPROF_BIN), 0);
    char *out = e2e_slurp(out_path, NULL);
    assert_non_null(out);
    assert_contains(out, "usage: gradprof report FILE");
    assert_contains(out, "--format");
    assert_contains(out, "--top");
    free(out);
}

/* -o writes the file and nothing to stdout; every format renders the fixture. */
static void test_output_file_and_formats(void **state)
{
    static const char *const formats[] = {"text", "json", "html", "folded", "chrome"};
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/report.%s", tmpdir, formats[i]);
        int rc = run("'%s' report '%s/mlp_grad.gptrace' --format %s -o '%s'", GRADPROF_BIN,
                     GRADPROF_TEST_TRACES, formats[i], path);
        if (rc != 0)
            e2e_print_file("stderr", err_path);
        assert_int_equal(rc, 0);
        char *out = e2e_slurp(out_path, NULL), *file = e2e_slurp(path, NULL);
        assert_non_null(out);
        assert_non_null(file);
        assert_string_equal(out, "");
        assert_true(strlen(file) > 0);
        free(out);
        free(file);
    }
}

/* ---- a real trace ---------------------------------------------------------------------------- */

#ifdef GRADPROF_MLP_INFER
/* mlp_infer with grad on, recorded through `gradprof run`: the report renders, the graph shows. */
static void test_real_trace(void **state)
{
    char trace[512];
    snprintf(trace, sizeof trace, "%s/mlp.gptrace", tmpdir);
    /* Under GRADPROF_SANITIZE mlp_infer carries ASan, which must accept the (uninstrumented)
     * preload library ahead of it; the option is ignored by programs without ASan. */
    int rc = run("ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "
                 "GRADPROF_PRELOAD='%s' '%s' run -o '%s' -- '%s' --grad --layers 3 --width 64 "
                 "--batch 8 --iters 3",
                 GRADPROF_PRELOAD_LIB, GRADPROF_BIN, trace, GRADPROF_MLP_INFER);
    if (rc != 0)
        e2e_print_file("stderr", err_path);
    assert_int_equal(rc, 0);

    rc = run("'%s' report '%s'", GRADPROF_BIN, trace);
    if (rc != 0)
        e2e_print_file("stderr", err_path);
    assert_int_equal(rc, 0);
    char *text = e2e_slurp(out_path, NULL);
    assert_non_null(text);
    assert_contains(text, "gradprof report: peak ");
    assert_contains(text, "Program      ");
    assert_contains(text, "mlp_infer");
    assert_contains(text, "Live at peak by category (host)");
    assert_contains(text, "Tensors saved for backward");
    free(text);

    rc = run("'%s' report '%s' --format json", GRADPROF_BIN, trace);
    assert_int_equal(rc, 0);
    assert_json_parses();
    char *doc = e2e_slurp(out_path, NULL);
    assert_non_null(doc);
    assert_true(json_u64(doc, "@peak_bytes", NULL) > 0);
    assert_true(json_u64(doc, "@alloc_count", NULL) > 0);
    /* (layers - 1) ReLU outputs of 8 x 64 floats are saved by the last forward. */
    assert_true(json_u64(doc, "@by_category", "saved", "max_live", NULL) >= 2 * 8 * 64 * 4);
    free(doc);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_mlp_grad),
        cmocka_unit_test(test_golden_mlp_nograd),
        cmocka_unit_test(test_golden_leak_accumulate),
        cmocka_unit_test(test_golden_raw),
        cmocka_unit_test(test_golden_damaged),
        cmocka_unit_test(test_golden_top1),
        cmocka_unit_test(test_numbers_mlp_grad),
        cmocka_unit_test(test_numbers_mlp_nograd),
        cmocka_unit_test(test_numbers_leak_accumulate),
        cmocka_unit_test(test_numbers_raw),
        cmocka_unit_test(test_numbers_damaged),
        cmocka_unit_test(test_json_keys_always_present),
        cmocka_unit_test(test_json_schema_python),
        cmocka_unit_test(test_odd_strings),
        cmocka_unit_test(test_site_ties_by_label),
        cmocka_unit_test(test_forgot_no_grad_verdict),
        cmocka_unit_test(test_escape_at_once),
        cmocka_unit_test(test_escape_at_once_counted),
        cmocka_unit_test(test_leaks_by_tag_without_stacks),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_mark_labels_do_not_overlap),
        cmocka_unit_test(test_job_without_ranks),
        cmocka_unit_test(test_unwritable_output),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_bad_traces),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_output_file_and_formats),
#ifdef GRADPROF_MLP_INFER
        cmocka_unit_test(test_real_trace),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
