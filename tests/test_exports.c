/*
 * End-to-end tests of gradprof's exports: `report --format folded|chrome|html` and
 * `diff --format html`, with the gradprof binary run as a subprocess on the fixture traces of
 * tests/traces/make_traces.c and on three traces written here with the trace builder: "weird"
 * (names full of ';', newlines, quotes and markup), "tiny" (one allocation at time 0, so the
 * trace lasts 0 ns) and "empty" (no events at all).
 *
 * Golden files: tests/golden/export_<trace>[_<measure>].folded, export_<trace>.chrome.json,
 * export_<trace>.html and export_diff_mlp.html hold the exact outputs, compared byte for byte.
 * After an intended change of an output, regenerate them with
 *     GRADPROF_UPDATE_GOLDEN=1 ctest -R test_exports     (or run the test binary with it set)
 * and review the diff before committing. The runs cd into the traces directory and pass relative
 * paths, so the build directory never shows in the output.
 *
 * The golden files are not trusted alone: folded lines are parsed and their values summed
 * against the JSON report and against numbers computed by hand from make_traces.c; the Chrome
 * JSON and the HTML are checked by tests/export_check.py under /usr/bin/python3 (JSON parses,
 * counters end at what was live at the end, regions are X events; HTML nests properly, has its
 * <svg>, refers to nothing outside the file). The headless-browser test is test_html_chromium.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
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
#ifndef GRADPROF_EXPORT_CHECK
#error "GRADPROF_EXPORT_CHECK (tests/export_check.py) must be defined"
#endif

#define PYTHON "/usr/bin/python3"

static char tmpdir[256];
static char out_path[512], err_path[512];

/* ---- helpers --------------------------------------------------------------------------------- */

/* Runs `sh -c CMD` with stdout and stderr to out_path and err_path; returns the exit status
 * (128 + N for signal N). */
#define run(...) e2e_shell(NULL, out_path, err_path, __VA_ARGS__)

/* Asserts that the last run exited with `want`, showing its stderr otherwise. */
static void expect_rc(int rc, int want)
{
    if (rc != want) {
        e2e_print_file("stdout", out_path);
        e2e_print_file("stderr", err_path);
    }
    assert_int_equal(rc, want);
}

/* Compares the last run's stdout with tests/golden/NAME, or rewrites NAME when
 * GRADPROF_UPDATE_GOLDEN=1. */
static void compare_golden(const char *name)
{
    size_t len = 0;
    char *got = e2e_slurp(out_path, &len);
    assert_non_null(got);
    assert_true(len > 0);
    char golden_path[1024];
    snprintf(golden_path, sizeof golden_path, "%s/%s", GRADPROF_GOLDEN_DIR, name);
    const char *update = getenv("GRADPROF_UPDATE_GOLDEN");
    if (update != NULL && strcmp(update, "1") == 0) {
        assert_true(e2e_write_file(golden_path, got, len));
        print_message("updated %s\n", golden_path);
        free(got);
        return;
    }
    size_t want_len = 0;
    char *want = e2e_slurp(golden_path, &want_len);
    if (want == NULL)
        fail_msg("missing golden file %s (GRADPROF_UPDATE_GOLDEN=1 creates it)", golden_path);
    if (want_len != len || memcmp(want, got, len) != 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "diff -u '%s' '%s' | head -40", golden_path, out_path);
        if (system(cmd) != 0)
            print_message("(diff failed)\n");
        free(want);
        free(got);
        fail_msg("output differs from %s (GRADPROF_UPDATE_GOLDEN=1 rewrites it)", golden_path);
    }
    free(want);
    free(got);
}

/* The path of a trace: a fixture or one of the traces written in setup. */
static const char *trace_path(const char *name, char *buf, size_t size)
{
    bool mine =
        strcmp(name, "weird") == 0 || strcmp(name, "tiny") == 0 || strcmp(name, "empty") == 0;
    snprintf(buf, size, "%s/%s.gptrace", mine ? tmpdir : GRADPROF_TEST_TRACES, name);
    return buf;
}

/* Writes `gradprof report NAME --format FORMAT [extra]` to `dest` (a file); returns the exit
 * status. */
static int report_to(const char *name, const char *format, const char *extra, const char *dest)
{
    char tp[512];
    return run("'%s' report '%s' --format %s %s -o '%s'", GRADPROF_BIN,
               trace_path(name, tp, sizeof tp), format, extra ? extra : "", dest);
}

/* A top-level unsigned number of the JSON report of a trace ("peak_bytes", ...): the first
 * occurrence of the key, which the report writes before any nested table. */
static uint64_t report_number(const char *name, const char *key)
{
    char tp[512], json[600];
    snprintf(json, sizeof json, "%s/%s.report.json", tmpdir, name);
    expect_rc(run("'%s' report '%s' --format json -o '%s'", GRADPROF_BIN,
                  trace_path(name, tp, sizeof tp), json),
              0);
    char *s = e2e_slurp(json, NULL);
    assert_non_null(s);
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(s, pat);
    if (at == NULL)
        fail_msg("the JSON report of %s has no %s", name, key);
    at += strlen(pat);
    while (*at == ' ')
        at++;
    assert_true(isdigit((unsigned char)*at));
    uint64_t v = strtoull(at, NULL, 10);
    free(s);
    return v;
}

/* Runs export_check.py MODE FILE ARGS under /usr/bin/python3 and asserts it passed. */
static void python_check(const char *mode, const char *file, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void python_check(const char *mode, const char *file, const char *fmt, ...)
{
    if (access(PYTHON, X_OK) != 0)
        fail_msg("%s is needed to check the %s output (apt-get install python3)", PYTHON, mode);
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = run("'%s' '%s' %s '%s' %s", PYTHON, GRADPROF_EXPORT_CHECK, mode, file, args);
    if (rc != 0) {
        e2e_print_file("export_check", out_path);
        e2e_print_file("stderr", err_path);
    }
    assert_int_equal(rc, 0);
}

/* ---- the traces written here ----------------------------------------------------------------- */

enum { M_EXE = 1, M_WEIRD = 2 };

/* Names made to break every format: ';' and newlines (folded), quotes, backslashes and control
 * characters (JSON), markup (HTML). The module's basename becomes an unresolved frame name. */
#define WEIRD_COMMAND "infer \"quoted\" <script>alert(1)</script> & back\\slash\ttab;semi\nline"
#define WEIRD_THREAD "main \"thr\" <i>x</i>"
#define WEIRD_REGION "reg;ion\n<b>\"q\"</b>"
#define WEIRD_MARK "mark \"1\" <m>&amp;"

static void write_weird(const char *path)
{
    tb *b = tb_open(path, WEIRD_COMMAND);
    assert_non_null(b);
    tb_module(b, M_EXE, 0x400000, 0x100000, "/opt/gradprof-test/bin/infer", "");
    tb_module(b, M_WEIRD, 0x7f0000000000, 0x100000, "/opt/gradprof-test/lib/we;ird\nname<b>.so",
              "");
    tb_thread(b, 1, WEIRD_THREAD);
    const uint32_t m[3] = {M_WEIRD, M_WEIRD, M_EXE};
    const uint64_t o1[3] = {0x1100, 0x2200, 0x1440}, o2[3] = {0x1100, 0x2300, 0x1440};
    uint32_t s1 = tb_stack(b, 3, m, o1), s2 = tb_stack(b, 3, m, o2);
    tb_mark(b, WEIRD_MARK);
    tb_region_push(b, WEIRD_REGION);
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 4096, s1);
    tb_tag(b, 0x1000, 4096, LP_CAT_ACTIVATION, "op;x\n<y>", "m\"od<ule>", "[1]", true, 0);
    tb_at(b, 2000);
    tb_alloc(b, 0x9000, 100, s2);
    tb_at(b, 3000);
    tb_region_pop(b);
    tb_at(b, 4000);
    tb_free(b, 0x9000);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

/* One allocation at time 0 and nothing else: a trace of duration 0. */
static void write_tiny(const char *path)
{
    tb *b = tb_open(path, "tiny");
    assert_non_null(b);
    tb_module(b, M_EXE, 0x400000, 0x100000, "/opt/gradprof-test/bin/tiny", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {M_EXE};
    const uint64_t o[1] = {0x1100};
    tb_alloc(b, 0x1000, 64, tb_stack(b, 1, m, o));
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

static void write_empty(const char *path)
{
    tb *b = tb_open(path, "empty");
    assert_non_null(b);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gp_test_exports.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(out_path, sizeof out_path, "%s/stdout", tmpdir);
    snprintf(err_path, sizeof err_path, "%s/stderr", tmpdir);
    char p[512];
    write_weird(trace_path("weird", p, sizeof p));
    write_tiny(trace_path("tiny", p, sizeof p));
    write_empty(trace_path("empty", p, sizeof p));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- golden files ---------------------------------------------------------------------------- */

static void golden_report(const char *name, const char *format, const char *extra,
                          const char *golden)
{
    expect_rc(run("cd '%s' && '%s' report %s.gptrace --format %s %s", GRADPROF_TEST_TRACES,
                  GRADPROF_BIN, name, format, extra ? extra : ""),
              0);
    compare_golden(golden);
}

static void test_golden_folded(void **state)
{
    (void)state;
    golden_report("mlp_grad", "folded", NULL, "export_mlp_grad.folded");
    golden_report("mlp_grad", "folded", "--measure total", "export_mlp_grad_total.folded");
    golden_report("leak_accumulate", "folded", NULL, "export_leak_accumulate.folded");
    golden_report("leak_accumulate", "folded", "--measure leaked",
                  "export_leak_accumulate_leaked.folded");
    golden_report("raw", "folded", NULL, "export_raw.folded");
    golden_report("raw", "folded", "--measure count", "export_raw_count.folded");
}

static void test_golden_chrome(void **state)
{
    (void)state;
    golden_report("mlp_grad", "chrome", NULL, "export_mlp_grad.chrome.json");
    golden_report("leak_accumulate", "chrome", NULL, "export_leak_accumulate.chrome.json");
    golden_report("raw", "chrome", NULL, "export_raw.chrome.json");
}

static void test_golden_html(void **state)
{
    (void)state;
    golden_report("mlp_grad", "html", NULL, "export_mlp_grad.html");
    expect_rc(run("cd '%s' && '%s' diff mlp_grad.gptrace mlp_nograd.gptrace --format html",
                  GRADPROF_TEST_TRACES, GRADPROF_BIN),
              0);
    compare_golden("export_diff_mlp.html");
}

/* ---- folded stacks --------------------------------------------------------------------------- */

typedef struct folded_sum {
    uint64_t host, device; /* sums of the host's lines and of the other devices' lines */
    size_t lines;
    uint64_t cuda0_other; /* the value of the "cuda:0;other;..." lines */
} folded_sum;

static bool is_category(const char *s, size_t n)
{
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        const char *name = lp_category_name((lp_category)c);
        if (strlen(name) == n && strncmp(s, name, n) == 0)
            return true;
    }
    return false;
}

/* Parses folded output: every line is "frame;frame;... VALUE" with non-empty frames, an integer
 * value > 0, the root a category (or "cuda:N" then a category); no stack comes twice. */
static folded_sum parse_folded(const char *text)
{
    folded_sum r = {0};
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        assert_non_null(nl); /* every line ends with a newline */
        const char *sp = nl;
        while (sp > line && sp[-1] != ' ')
            sp--;
        assert_true(sp > line + 1); /* "stack VALUE" */
        for (const char *d = sp; d < nl; d++)
            assert_true(isdigit((unsigned char)*d));
        assert_true(nl > sp);
        uint64_t v = strtoull(sp, NULL, 10);
        assert_true(v > 0);
        size_t stack_len = (size_t)(sp - 1 - line);
        /* frames: non-empty, no ';' inside (it separates them), no control characters */
        size_t frames = 0;
        const char *f = line, *end = line + stack_len;
        const char *first = NULL, *second = NULL;
        size_t first_len = 0, second_len = 0;
        while (f <= end) {
            const char *semi = memchr(f, ';', (size_t)(end - f));
            const char *fe = semi ? semi : end;
            assert_true(fe > f);
            for (const char *c = f; c < fe; c++)
                assert_true((unsigned char)*c >= 0x20 && *c != 0x7f);
            if (frames == 0) {
                first = f;
                first_len = (size_t)(fe - f);
            } else if (frames == 1) {
                second = f;
                second_len = (size_t)(fe - f);
            }
            frames++;
            f = fe + 1;
            if (!semi)
                break;
        }
        assert_true(frames >= 2); /* a root and at least one frame */
        bool device = first_len > 5 && strncmp(first, "cuda:", 5) == 0;
        if (device) {
            assert_true(is_category(second, second_len));
            r.device += v;
            if (first_len == 6 && first[5] == '0' && second_len == 5 &&
                strncmp(second, "other", 5) == 0)
                r.cuda0_other += v;
        } else {
            assert_true(is_category(first, first_len));
            r.host += v;
        }
        for (const char *o = text; o < line;) { /* no duplicate stacks */
            const char *o_nl = strchr(o, '\n');
            const char *o_sp = strrchr(o, ' ');
            while (o_sp > o_nl) /* the last space of line o */
                o_sp = memrchr(o, ' ', (size_t)(o_sp - o));
            assert_false((size_t)(o_sp - o) == stack_len && memcmp(o, line, stack_len) == 0);
            o = o_nl + 1;
        }
        r.lines++;
        line = nl + 1;
    }
    return r;
}

static folded_sum folded_of(const char *name, const char *measure)
{
    char dest[600], extra[64];
    snprintf(dest, sizeof dest, "%s/%s.%s.folded", tmpdir, name, measure);
    snprintf(extra, sizeof extra, "--measure %s", measure);
    expect_rc(report_to(name, "folded", extra, dest), 0);
    char *text = e2e_slurp(dest, NULL);
    assert_non_null(text);
    folded_sum r = parse_folded(text);
    free(text);
    return r;
}

/* The peak lines sum to the host peak, total to the bytes allocated, count to the allocations,
 * leaked to what was live at the end, for every fixture trace. */
static void test_folded_sums(void **state)
{
    (void)state;
    static const char *const traces[] = {
        "mlp_grad", "mlp_nograd", "leak_accumulate", "raw", "damaged", "weird", "tiny"};
    for (size_t i = 0; i < sizeof traces / sizeof traces[0]; i++) {
        const char *t = traces[i];
        folded_sum peak = folded_of(t, "peak");
        assert_int_equal(peak.host, report_number(t, "peak_bytes"));
        folded_sum total = folded_of(t, "total");
        assert_int_equal(total.host + total.device, report_number(t, "total_allocated_bytes"));
        folded_sum count = folded_of(t, "count");
        assert_int_equal(count.host + count.device, report_number(t, "alloc_count"));
        folded_sum leaked = folded_of(t, "leaked");
        assert_int_equal(leaked.host + leaked.device, report_number(t, "leaked_bytes"));
    }

    /* By hand (make_traces.c). mlp_grad peaks in iteration 0 right after relu mlp.3 made its
     * graph node: parameters 2*256*256*4 + 10*256*4 + 2*256*4 + 10*4 = 536616, input 32768, the
     * ReLU outputs a0 and a1 and the linear output h1 (3 * 32768), 4 graph nodes (2048):
     * 669736. */
    folded_sum g = folded_of("mlp_grad", "peak");
    assert_int_equal(g.host, 669736);
    assert_int_equal(g.device, 0);
    /* raw: the host peaks with the worker's 10 * 2048 live next to main's 4096 + 1000 leak
     * (25576); cuda:0 gets its own root with the 1 MiB buffer. */
    folded_sum r = folded_of("raw", "peak");
    assert_int_equal(r.host, 25576);
    assert_int_equal(r.cuda0_other, 1048576);
    assert_int_equal(r.device, 1048576);
    /* leak_accumulate keeps 6 graphs: per iteration 2 saved ReLU outputs (65536), 5 nodes
     * (2560) and the output (1280); plus parameters and input: 985640 live at the end. */
    folded_sum l = folded_of("leak_accumulate", "leaked");
    assert_int_equal(l.host, 536616 + 32768 + 6 * (65536 + 2560 + 1280));
}

/* Frame names lose their ';' and newlines but nothing else. */
static void test_folded_sanitized(void **state)
{
    (void)state;
    folded_sum w = folded_of("weird", "total");
    assert_int_equal(w.lines, 2); /* two stacks */
    char dest[600];
    snprintf(dest, sizeof dest, "%s/weird.total.folded", tmpdir);
    char *text = e2e_slurp(dest, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "we:ird name<b>.so+0x"));
    assert_null(strstr(text, "we;ird"));
    free(text);
}

/* --min cuts a frame whose stacks weigh less than the cut-off (a share of its root's total, or
 * an amount) at its caller, into a "[smaller stacks]" line: every root keeps its sum. */
static void test_folded_min(void **state)
{
    (void)state;
    char tp[512], dest[600];
    trace_path("raw", tp, sizeof tp);
    snprintf(dest, sizeof dest, "%s/raw.cut.folded", tmpdir);
    /* raw, total: other;infer+0x1440 splits into 6400 + 20480 + 5096 (31976); cuda:0 alone */
    static const char *const cuts[] = {"40%", "10000", "9.77KiB"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        expect_rc(run("'%s' report '%s' --format folded --measure total --min %s -o '%s'",
                      GRADPROF_BIN, tp, cuts[i], dest),
                  0);
        char *text = e2e_slurp(dest, NULL);
        assert_non_null(text);
        folded_sum f = parse_folded(text);
        assert_int_equal(f.host, 31976);
        assert_int_equal(f.device, 1048576);
        assert_int_equal(f.lines, 3);
        assert_non_null(strstr(text, "\nother;infer+0x1440;[smaller stacks] 11496\n"));
        assert_non_null(strstr(text, "\nother;infer+0x1440;infer+0x1900 20480\n"));
        free(text);
    }
    /* 0 keeps every stack; the default (0.1%) cuts nothing here */
    folded_sum whole = folded_of("raw", "total");
    assert_int_equal(whole.lines, 4);
    expect_rc(run("'%s' report '%s' --format folded --measure total --min 0 -o '%s'", GRADPROF_BIN,
                  tp, dest),
              0);
    char *text = e2e_slurp(dest, NULL);
    assert_non_null(text);
    assert_int_equal(parse_folded(text).lines, 4);
    assert_null(strstr(text, "[smaller stacks]"));
    free(text);
    /* bad cut-offs are usage errors that name the option */
    static const char *const bad[] = {"101%", "-1%", "x%", "%", "abc", "-5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_rc(run("'%s' report '%s' --format folded --min '%s'", GRADPROF_BIN, tp, bad[i]), 2);
        char *err = e2e_slurp(err_path, NULL);
        assert_non_null(err);
        assert_non_null(strstr(err, "--min"));
        free(err);
    }
}

/* Errors: an unknown measure is a usage error; a full disk is an error, not a silent truncation. */
static void test_folded_errors(void **state)
{
    (void)state;
    char tp[512];
    expect_rc(run("'%s' report '%s' --format folded --measure bogus", GRADPROF_BIN,
                  trace_path("mlp_grad", tp, sizeof tp)),
              2);
    char *err = e2e_slurp(err_path, NULL);
    assert_non_null(err);
    assert_non_null(strstr(err, "bogus"));
    free(err);
    static const char *const formats[] = {"folded", "chrome", "html"};
    for (size_t i = 0; i < 3; i++) {
        expect_rc(report_to("mlp_grad", formats[i], NULL, "/dev/full"), 2);
        err = e2e_slurp(err_path, NULL);
        assert_non_null(err);
        assert_non_null(strstr(err, "/dev/full"));
        free(err);
    }
    expect_rc(run("'%s' diff '%s' '%s/mlp_nograd.gptrace' --format html -o /dev/full", GRADPROF_BIN,
                  trace_path("mlp_grad", tp, sizeof tp), GRADPROF_TEST_TRACES),
              2);
}

/* ---- Chrome trace ---------------------------------------------------------------------------- */

static void chrome_of(const char *name, char *dest, size_t size)
{
    snprintf(dest, size, "%s/%s.chrome.json", tmpdir, name);
    expect_rc(report_to(name, "chrome", NULL, dest), 0);
}

static void test_chrome(void **state)
{
    (void)state;
    char dest[600], rep[600];
    static const char *const traces[] = {"mlp_grad", "mlp_nograd", "leak_accumulate",
                                         "raw",      "damaged",    "tiny"};
    for (size_t i = 0; i < sizeof traces / sizeof traces[0]; i++) {
        chrome_of(traces[i], dest, sizeof dest);
        report_number(traces[i], "peak_bytes"); /* writes NAME.report.json */
        snprintf(rep, sizeof rep, "%s/%s.report.json", tmpdir, traces[i]);
        python_check("chrome", dest, "--report '%s' --thread-name main", rep);
    }
    /* By hand: mlp_grad ends with the parameters and the input live, 4 iterations each entered
     * "inference" and the 5 module regions once. */
    chrome_of("mlp_grad", dest, sizeof dest);
    python_check("chrome", dest,
                 "--peak 669736 --live-end parameter=536616 --live-end input=32768 "
                 "--live-end activation=0 --live-end saved=0 --live-end autograd=0 "
                 "--regions inference=4 --regions mlp.0=4 --regions mlp.1=4 --regions mlp.4=4 "
                 "--marks 4 --process-contains 'infer --grad'");
    /* leak_accumulate: every iteration's graph is still live at the end (see test_folded_sums). */
    chrome_of("leak_accumulate", dest, sizeof dest);
    python_check("chrome", dest,
                 "--live-end saved=%d --live-end autograd=%d --live-end activation=%d "
                 "--regions inference=6 --marks 6",
                 6 * 65536, 6 * 2560, 6 * 1280);
    /* The names survive JSON escaping exactly. */
    chrome_of("weird", dest, sizeof dest);
    /* printf(1) turns the backslash-n back into WEIRD_REGION's newline */
    python_check("chrome", dest, "--thread-name '%s' --region-name \"$(printf '%s')\" --marks 1",
                 WEIRD_THREAD, "reg;ion\\n<b>\"q\"</b>");
    char *text = e2e_slurp(dest, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "\"gradprof: infer \\\"quoted\\\" <script>alert(1)</script> & "
                                 "back\\\\slash\\ttab;semi\\nline\""));
    free(text);
}

/* ---- HTML ------------------------------------------------------------------------------------ */

static void html_of(const char *name, char *dest, size_t size)
{
    snprintf(dest, size, "%s/%s.html", tmpdir, name);
    expect_rc(report_to(name, "html", NULL, dest), 0);
}

static void test_html(void **state)
{
    (void)state;
    char dest[600];
    html_of("mlp_grad", dest, sizeof dest);
    python_check("html", dest,
                 "--svgs 1 --contains 'peak 654.04 KiB at 60.0 us' --contains forgot_no_grad "
                 "--contains 'class=\"finding\"' --contains 'Top sites at peak' "
                 "--contains 'Tensors saved for backward' --contains '>iter 3<' "
                 "--contains 'data-v=\"669736\"' --not-contains 'Damaged trace'");
    html_of("mlp_nograd", dest, sizeof dest);
    python_check("html", dest, "--svgs 1 --contains 'No gradient leak found'");
    html_of("leak_accumulate", dest, sizeof dest);
    python_check("html", dest, "--svgs 1 --contains growth_across_iterations");
    html_of("raw", dest, sizeof dest);
    python_check("html", dest, "--svgs 1 --contains '>cuda:0<' --contains '<h2>Devices</h2>'");
    html_of("damaged", dest, sizeof dest);
    python_check("html", dest, "--svgs 1 --contains 'Damaged trace:'");
    html_of("tiny", dest, sizeof dest);
    python_check("html", dest, "--svgs 1 --contains 'peak 64 B'");
    /* Markup in names is escaped, never interpreted. */
    html_of("weird", dest, sizeof dest);
    python_check(
        "html", dest,
        "--svgs 1 --not-contains '<script>alert' --not-contains '<b>\"q\"' "
        "--contains '&lt;script&gt;alert(1)&lt;/script&gt;' "
        "--contains 'm&quot;od&lt;ule&gt;' --contains 'mark &quot;1&quot; &lt;m&gt;&amp;amp;'");

    snprintf(dest, sizeof dest, "%s/diff.html", tmpdir);
    char tp[512];
    expect_rc(run("'%s' diff '%s' '%s/mlp_nograd.gptrace' --format html -o '%s'", GRADPROF_BIN,
                  trace_path("mlp_grad", tp, sizeof tp), GRADPROF_TEST_TRACES, dest),
              0);
    /* Held by graph construction, by hand: A peaks (60 us) with h1 (linear mlp.2) and a1
     * (relu mlp.3) as activations, a0 saved (relu mlp.1) and 4 graph nodes; at the aligned
     * instant (B just made a1) B holds h1 and a1 and has freed a0: 32768 + 4 * 512 = 34816. */
    python_check("html", dest,
                 "--svgs 2 --contains 'held by graph construction' --contains 'Per layer' "
                 "--contains '34,816 bytes live at' "
                 "--contains 'Per call site' --contains 'id=\"chart-a\"' "
                 "--contains 'id=\"chart-b\"'");
}

/* An empty trace is refused like any unreadable input: one error line, exit 2, in every format. */
static void test_empty_trace(void **state)
{
    (void)state;
    static const char *const formats[] = {"folded", "chrome", "html"};
    for (size_t i = 0; i < 3; i++) {
        char dest[600];
        snprintf(dest, sizeof dest, "%s/empty.%s", tmpdir, formats[i]);
        int rc = report_to("empty", formats[i], NULL, dest);
        if (rc == 0) {
            /* accepted: the output must still be well formed */
            if (strcmp(formats[i], "chrome") == 0)
                python_check("chrome", dest, "%s", "");
            else if (strcmp(formats[i], "html") == 0)
                python_check("html", dest, "--svgs 1 --contains 'No memory was live'");
        } else {
            expect_rc(rc, 2);
            char *err = e2e_slurp(err_path, NULL);
            assert_non_null(err);
            assert_non_null(strstr(err, "empty.gptrace"));
            free(err);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_folded),    cmocka_unit_test(test_golden_chrome),
        cmocka_unit_test(test_golden_html),      cmocka_unit_test(test_folded_sums),
        cmocka_unit_test(test_folded_sanitized), cmocka_unit_test(test_folded_errors),
        cmocka_unit_test(test_folded_min),
        cmocka_unit_test(test_chrome),           cmocka_unit_test(test_html),
        cmocka_unit_test(test_empty_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
