/*
 * The gradprof command line: option helpers (cli.c) called directly, and the gradprof binary run
 * as a subprocess for exit codes and messages of every command, the check rules on the fixture
 * traces (numbers from tests/traces/make_traces.c, derived below), JUnit XML and JSON
 * well-formedness (parsed by /usr/bin/python3), and `gradprof run`.
 *
 * Golden files: tests/golden/check_* hold the text, JSON and JUnit output of `gradprof check` on
 * the fixtures; a test compares byte for byte, or rewrites them when GRADPROF_UPDATE_GOLDEN=1.
 *
 * Fixture numbers (make_traces.c: B=32, W=256, OUT=10, ACT = B*W*4 = 32768, graph node 512):
 *   parameters 2*(256*256*4 + 256*4) + 10*256*4 + 10*4 = 536616, input 32768: 569384 never freed.
 *   mlp_grad peak: + ReLU-0 output (saved) + linear-1 output + ReLU-1 output + 4 nodes
 *                  = 569384 + 3*32768 + 4*512 = 669736.
 *   mlp_nograd peak: + two activations = 569384 + 65536 = 634920.
 *   leak_accumulate: each iteration keeps 2 saved ReLU outputs, the 32x10 output (1280) and 5
 *                  nodes = 69376; the 6 marks see 0..5 of them: growth 5*69376 = 346880.
 *   raw: 4096 + 1000 = 5096 bytes never freed.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "render.h"
#define E2E_SESSION S /* the short names of e2e.h act on S */
#include "e2e.h"
#include "traces/trace_builder.h"

#define PEAK_GRAD 669736ull
#define PEAK_NOGRAD 634920ull
#define LEAKED_MLP 569384ull
#define GROWTH_ACCUMULATE 346880ull
#define LEAKED_RAW 5096ull
#define PYTHON "/usr/bin/python3"

/* ---- helpers --------------------------------------------------------------------------------- */

static e2e_session S; /* the scratch directory (S.dir) and the last command's S.out, S.err */

/* One line on stderr: usage errors are one clear line. */
#define one_line_error() e2e_one_line_error(&S, "gradprof")

/* gradprof ARGS (a shell fragment), from S.dir. */
#define gradprof(...) sh("'" GRADPROF_BIN "' " __VA_ARGS__)
/* A fixture trace by name. */
#define TRACE(name) "'" GRADPROF_TEST_TRACES "/" name ".gptrace'"

static void python_parses(const char *what, const char *path)
{
    char cmd[1024];
    if (strcmp(what, "xml") == 0)
        snprintf(cmd, sizeof cmd,
                 PYTHON " -c \"import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])\" "
                        "'%s'",
                 path);
    else
        snprintf(cmd, sizeof cmd,
                 PYTHON " -c \"import json,sys; json.load(open(sys.argv[1]))\" '%s'", path);
    char *keep_out = S.out, *keep_err = S.err;
    S.out = S.err = NULL;
    int rc = sh("%s", cmd);
    if (rc != 0) {
        print_message("%s does not parse as %s:\n", path, what);
        char *doc = e2e_slurp(path, NULL);
        print_message("%s\n", doc ? doc : "(unreadable)");
        free(doc);
        show();
    }
    free(S.out);
    free(S.err);
    S.out = keep_out;
    S.err = keep_err;
    assert_int_equal(rc, 0);
}

/* Compares `text` with tests/golden/NAME, or rewrites it when GRADPROF_UPDATE_GOLDEN=1. */
static void golden(const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", GRADPROF_GOLDEN_DIR, name);
    const char *update = getenv("GRADPROF_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
        assert_int_equal(fclose(f), 0);
        return;
    }
    char *want = e2e_slurp(path, NULL);
    if (!want)
        print_message("missing golden file %s (GRADPROF_UPDATE_GOLDEN=1 writes it)\n", path);
    assert_non_null(want);
    if (strcmp(want, text) != 0) {
        print_message("output differs from %s (GRADPROF_UPDATE_GOLDEN=1 rewrites it)\n---- got\n"
                      "%s---- want\n%s----\n",
                      path, text, want);
        free(want);
        fail();
    }
    free(want);
}

static int setup(void **state)
{
    return e2e_session_open(&S, "test_cli");
}

static int teardown(void **state)
{
    return e2e_session_close(&S);
}

/* ---- option helpers -------------------------------------------------------------------------- */

static void test_parse_size(void **state)
{
    static const struct {
        const char *text;
        uint64_t want;
    } good[] = {
        {"0", 0},
        {"512", 512},
        {"512B", 512},
        {"64k", 65536},
        {"64K", 65536},
        {"64KiB", 65536},
        {"64kib", 65536},
        {"2KB", 2000},
        {"100MB", 100000000},
        {"100mb", 100000000},
        {"1.5GiB", 1610612736},
        {"1.5 GiB", 1610612736},
        {"1.5g", 1610612736},
        {"2GB", 2000000000},
        {"1TiB", 1099511627776ull},
        {"1T", 1099511627776ull},
        {"0.5k", 512},
        {"0.0001k", 0}, /* 0.1024 bytes: rounded to the nearest byte */
        {"0.0005k", 1}, /* 0.512 */
        {".5KiB", 512},
        {"1.0", 1},
        {"18446744073709551615", UINT64_MAX},
        {"16383PiB", 16383ull << 50},
    };
    char e[512];
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 12345;
        int rc = gp_parse_size(good[i].text, &v, e, sizeof e);
        if (rc != 0 || v != good[i].want)
            print_message("'%s': rc %d, %llu (want %llu): %s\n", good[i].text, rc,
                          (unsigned long long)v, (unsigned long long)good[i].want, e);
        assert_int_equal(rc, 0);
        assert_true(v == good[i].want);
    }
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"", "empty size"},
        {"-1", "size '-1' is negative"},
        {"-0", "negative"},
        {"1.5XB", "unknown unit 'XB' in size '1.5XB'"},
        {"12 34", "unknown unit '34'"},
        {"1e3", "unknown unit 'e3'"},
        {"abc", "size 'abc' is not a number"},
        {".", "not a number"},
        {"+5", "not a number"},
        {"1.5", "size '1.5' is not a whole number of bytes"},
        {"1.5B", "not a whole number"},
        {"99999999999999999999", "size '99999999999999999999' is too large"},
        {"18446744073709551616", "too large"},
        {"16384PiB", "too large"},
        {"17179869184GiB", "too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v = 777;
        e[0] = '\0';
        int rc = gp_parse_size(bad[i].text, &v, e, sizeof e);
        if (rc != -1 || !strstr(e, bad[i].message))
            print_message("'%s': rc %d, message '%s' (want '%s')\n", bad[i].text, rc, e,
                          bad[i].message);
        assert_int_equal(rc, -1);
        assert_non_null(strstr(e, bad[i].message));
        assert_true(v == 777); /* untouched on error */
    }
}

static void test_parse_uint(void **state)
{
    char e[256];
    uint64_t v = 0;
    assert_int_equal(gp_parse_uint("0", 0, 256, &v, e, sizeof e), 0);
    assert_true(v == 0);
    assert_int_equal(gp_parse_uint("256", 0, 256, &v, e, sizeof e), 0);
    assert_true(v == 256);
    assert_int_equal(gp_parse_uint("257", 0, 256, &v, e, sizeof e), -1);
    assert_non_null(strstr(e, "257 is out of range (expected 0-256)"));
    assert_int_equal(gp_parse_uint("0", 1, 10000, &v, e, sizeof e), -1);
    assert_int_equal(gp_parse_uint("-3", 0, 10, &v, e, sizeof e), -1);
    assert_non_null(strstr(e, "'-3' is not a whole number"));
    assert_int_equal(gp_parse_uint("4x", 0, 10, &v, e, sizeof e), -1);
    assert_int_equal(gp_parse_uint("", 0, 10, &v, e, sizeof e), -1);
    assert_int_equal(gp_parse_uint("99999999999999999999", 0, UINT64_MAX, &v, e, sizeof e), -1);
    assert_non_null(strstr(e, "out of range"));
}

static void test_parse_categories(void **state)
{
    char e[512];
    bool set[LP_CAT_COUNT];
    assert_int_equal(gp_parse_categories("saved,GRADIENT,autograd", set, e, sizeof e), 0);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        assert_int_equal(set[c], c == LP_CAT_SAVED || c == LP_CAT_GRADIENT || c == LP_CAT_AUTOGRAD);
    assert_int_equal(gp_parse_categories("none", set, e, sizeof e), 0);
    for (int c = 0; c < LP_CAT_COUNT; c++)
        assert_false(set[c]);
    set[LP_CAT_OTHER] = true;
    assert_int_equal(gp_parse_categories("saved,foo", set, e, sizeof e), -1);
    assert_non_null(strstr(e, "unknown category 'foo' in 'saved,foo'"));
    assert_non_null(strstr(e, "optimizer_state"));        /* lists the categories */
    assert_true(set[LP_CAT_OTHER] && !set[LP_CAT_SAVED]); /* untouched on error */
    assert_int_equal(gp_parse_categories("saved,,autograd", set, e, sizeof e), -1);
    assert_non_null(strstr(e, "empty category name"));
    assert_int_equal(gp_parse_categories("saved,", set, e, sizeof e), -1);
}

static void test_parse_detectors(void **state)
{
    char e[512];
    bool set[GP_FIND_KIND_COUNT];
    assert_int_equal(gp_parse_detectors("forgot_no_grad,graph_escapes_inference", set, e, sizeof e),
                     0);
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        assert_int_equal(set[k], k == GP_FIND_FORGOT_NO_GRAD || k == GP_FIND_GRAPH_ESCAPES);
    assert_int_equal(gp_parse_detectors("all", set, e, sizeof e), 0);
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        assert_true(set[k]);
    assert_int_equal(gp_parse_detectors("forgot_no_grad,bogus", set, e, sizeof e), -1);
    assert_non_null(strstr(e, "unknown detector 'bogus' in 'forgot_no_grad,bogus'"));
    assert_true(set[GP_FIND_GROWTH]); /* untouched on error */
    assert_int_equal(gp_parse_detectors("none", set, e, sizeof e), 0);
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        assert_false(set[k]);
}

static void test_format_bytes(void **state)
{
    static const struct {
        uint64_t bytes;
        const char *text;
    } cases[] = {
        {0, "0 B"},
        {512, "512 B"},
        {1023, "1023 B"},
        {1024, "1.00 KiB"},
        {1536, "1.50 KiB"},
        {3407872, "3.25 MiB"},
        {1073741824, "1.00 GiB"},
        {1048575, "1.00 MiB"}, /* 1023.999 KiB rounds into the next unit */
        {669736, "654.04 KiB"},
        {UINT64_MAX, "16.00 EiB"},
    };
    char buf[32];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_string_equal(gp_format_bytes(cases[i].bytes, buf, sizeof buf), cases[i].text);
}

/* ---- the front end --------------------------------------------------------------------------- */

static void test_no_command(void **state)
{
    expect_rc(gradprof(""), 2);
    contains(S.err, "usage: gradprof COMMAND");
    assert_string_equal(S.out, "");
}

static void test_unknown_command(void **state)
{
    expect_rc(gradprof("frobnicate x"), 2);
    one_line_error();
    contains(S.err, "unknown command 'frobnicate'");
    expect_rc(gradprof("--frobnicate"), 2);
    one_line_error();
    contains(S.err, "unknown option '--frobnicate'");
    expect_rc(gradprof("help frobnicate"), 2);
    contains(S.err, "unknown command 'frobnicate'");
}

static void test_top_help(void **state)
{
    expect_rc(gradprof("--help"), 0);
    static const char *const words[] = {"run", "report", "diff", "check", "help", "--version"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        contains(S.out, words[i]);
    assert_string_equal(S.err, "");
    expect_rc(gradprof("help"), 0);
    contains(S.out, "usage: gradprof COMMAND");
    expect_rc(gradprof("help check"), 0);
    contains(S.out, "usage: gradprof check");
    expect_rc(gradprof("--version"), 0);
    contains(S.out, "gradprof 0.");
    contains(S.out, "trace format 1.");
}

/* Every command's --help: exit 0, on stdout, naming every option. */
static void test_command_help(void **state)
{
    static const struct {
        const char *cmd;
        const char *options[16];
    } cmds[] = {
        {"run",
         {"-o, --output", "--stack-depth", "--no-stacks", "--min-stack-size", "--stack-sample",
          "--flush-ms", "--help", "PROGRAM", "Exit status", NULL}},
        {"report",
         {"--format", "text", "json", "html", "folded", "chrome", "-o, --output", "--top", "--help",
          NULL}},
        {"diff", {"--format", "text", "json", "html", "-o, --output", "--top", "--help", NULL}},
        {"check",
         {"--forbid", "--region", "--max-peak", "--max-growth", "--no-leaks", "--detectors",
          "--junit", "--format", "--help", "Exit status", NULL}},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        for (const char *flag = "--help"; flag; flag = strcmp(flag, "--help") ? NULL : "-h") {
            expect_rc(gradprof("%s %s", cmds[i].cmd, flag), 0);
            char usage[64];
            snprintf(usage, sizeof usage, "usage: gradprof %s", cmds[i].cmd);
            contains(S.out, usage);
            for (size_t j = 0; cmds[i].options[j]; j++)
                contains(S.out, cmds[i].options[j]);
            assert_string_equal(S.err, "");
        }
    }
}

static void test_unknown_option(void **state)
{
    static const char *const cmds[] = {"run", "report", "diff", "check"};
    for (size_t i = 0; i < 4; i++) {
        expect_rc(gradprof("%s --bogus " TRACE("mlp_grad") " " TRACE("mlp_nograd"), cmds[i]), 2);
        one_line_error();
        contains(S.err, "'--bogus'");
        expect_rc(gradprof("%s -Z " TRACE("mlp_grad") " " TRACE("mlp_nograd"), cmds[i]), 2);
        one_line_error();
        contains(S.err, "'-Z'");
    }
    expect_rc(gradprof("check " TRACE("mlp_grad") " --max-peak"), 2);
    one_line_error();
    contains(S.err, "'--max-peak' needs a value");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --no-leaks=yes"), 2);
    one_line_error();
    contains(S.err, "'--no-leaks' takes no value");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --format xml"), 2);
    contains(S.err, "unknown format 'xml'");
    expect_rc(gradprof("check " TRACE("mlp_grad") " " TRACE("mlp_nograd") " --junit j.xml"), 2);
    contains(S.err, "--junit takes one trace");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --detectors forgot_no_grad,bogus"), 2);
    contains(S.err, "unknown detector 'bogus'");
}

/* ---- unreadable input ------------------------------------------------------------------------ */

static void test_missing_file(void **state)
{
    expect_rc(gradprof("check"), 2);
    one_line_error();
    contains(S.err, "no trace file");
    expect_rc(gradprof("report"), 2);
    one_line_error();
    expect_rc(gradprof("diff"), 2);
    one_line_error();
    expect_rc(gradprof("diff " TRACE("mlp_grad")), 2);
    one_line_error();
}

/* Nonexistent, empty and not-a-trace files: exit 2 with one line naming the file, for every
 * command that reads traces. */
static void test_bad_files(void **state)
{
    char path[600];
    snprintf(path, sizeof path, "%s/empty.gptrace", S.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/text.gptrace", S.dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("this is a text file, not a gradprof trace\nsecond line\n", f);
    fclose(f);
    static const char *const files[] = {"does-not-exist.gptrace", "empty.gptrace", "text.gptrace"};
    for (size_t i = 0; i < 3; i++) {
        expect_rc(gradprof("check %s", files[i]), 2);
        one_line_error();
        contains(S.err, files[i]);
        assert_string_equal(S.out, "");
        expect_rc(gradprof("report %s", files[i]), 2);
        one_line_error();
        contains(S.err, files[i]);
        expect_rc(gradprof("diff %s " TRACE("mlp_nograd"), files[i]), 2);
        one_line_error();
        contains(S.err, files[i]);
        expect_rc(gradprof("diff " TRACE("mlp_grad") " %s", files[i]), 2);
        one_line_error();
        contains(S.err, files[i]);
    }
    /* a directory */
    expect_rc(gradprof("check ."), 2);
    one_line_error();
    contains(S.err, "'.' is a directory");
    /* a pipe is read by the reader, once */
    expect_rc(gradprof("check /dev/stdin < " TRACE("mlp_grad")), 1);
    expect_rc(sh("cat " TRACE("mlp_grad") " | '" GRADPROF_BIN "' check /dev/stdin"), 1);
    contains(S.out, "FAIL /dev/stdin: 3 violations");
}

/* The damaged fixture (mlp_grad cut inside its last chunk): analysed up to the damage, with one
 * warning line saying what was lost. */
static void test_damaged(void **state)
{
    expect_rc(gradprof("report " TRACE("damaged")), 0);
    contains(S.err, "warning");
    contains(S.err, "damaged");
    /* check: an incomplete trace is not judged (exit 2), even with violations in it ... */
    expect_rc(gradprof("check " TRACE("damaged")), 2);
    one_line_error();
    contains(S.err, "cannot judge: '" GRADPROF_TEST_TRACES "/damaged.gptrace' is incomplete: it is "
                    "damaged at byte");
    contains(S.err, "bytes lost; --allow-incomplete checks it anyway");
    contains(S.out, "UNJUDGED");
    contains(S.out, "in what it holds 3 violations");
    contains(S.out, "[forbid]");
    expect_rc(gradprof("check " TRACE("damaged") " --forbid none --detectors none"), 2);
    /* ... unless accepted: then judged on what it holds, with a warning */
    expect_rc(gradprof("check " TRACE("damaged") " --allow-incomplete"), 1);
    one_line_error();
    contains(S.err, "warning: '" GRADPROF_TEST_TRACES "/damaged.gptrace' is incomplete");
    contains(S.err, "(accepted: --allow-incomplete)");
    contains(S.out, "FAIL");
    contains(S.out, "accepted (--allow-incomplete): ");
    expect_rc(gradprof("check " TRACE("damaged") " --forbid none --detectors none "
                                                 "--allow-incomplete"),
              0);
    contains(S.out, "PASS");
    expect_rc(gradprof("diff " TRACE("damaged") " " TRACE("mlp_nograd")), 0);
    contains(S.err, "damaged");
}

static void test_bad_values(void **state)
{
    static const char *const sizes[] = {"1.5XB", "-1", "99999999999999999999"};
    for (size_t i = 0; i < 3; i++) {
        expect_rc(gradprof("check " TRACE("mlp_grad") " --max-peak %s", sizes[i]), 2);
        one_line_error();
        contains(S.err, "--max-peak");
        contains(S.err, sizes[i]);
        expect_rc(gradprof("check " TRACE("mlp_grad") " --max-growth=%s", sizes[i]), 2);
        one_line_error();
        contains(S.err, "--max-growth");
        contains(S.err, sizes[i]);
        expect_rc(gradprof("run --min-stack-size %s -- /bin/true", sizes[i]), 2);
        one_line_error();
        contains(S.err, sizes[i]);
    }
    expect_rc(gradprof("check " TRACE("mlp_grad") " --forbid saved,foo"), 2);
    one_line_error();
    contains(S.err, "--forbid: unknown category 'foo' in 'saved,foo'");
    expect_rc(gradprof("run --stack-depth 257 -- /bin/true"), 2);
    contains(S.err, "--stack-depth: 257 is out of range (expected 0-256)");
    expect_rc(gradprof("run --flush-ms 0 -- /bin/true"), 2);
    contains(S.err, "--flush-ms");
}

/* ---- check rules ----------------------------------------------------------------------------- */

static void test_check_default(void **state)
{
    /* mlp_grad: grad left on inside "inference": saved ReLU outputs and graph nodes. */
    expect_rc(gradprof("check " TRACE("mlp_grad")), 1);
    contains(S.out, "FAIL");
    contains(S.out, "[forbid] 256.00 KiB (262144 bytes) of saved memory allocated in 8 buffers");
    contains(S.out, "[forbid] 10.00 KiB (10240 bytes) of autograd memory allocated in 20 buffers");
    contains(S.out, "relu  mlp.1");
    contains(S.out, "[forgot_no_grad]");
    contains(S.out, "allocated at:");
    lacks(S.out, "forbid gradient (FAILED)");
    assert_string_equal(S.err, "");
    /* mlp_nograd: the same model under no_grad. */
    expect_rc(gradprof("check " TRACE("mlp_nograd")), 0);
    contains(S.out, "PASS");
    lacks(S.out, "FAIL");
    assert_string_equal(S.err, "");
}

static void test_check_forbid(void **state)
{
    expect_rc(gradprof("check " TRACE("mlp_grad") " --forbid autograd --detectors none"), 1);
    contains(S.out, "1 violation; 1 of 1 rules failed");
    contains(S.out, "of autograd memory");
    lacks(S.out, "of saved memory");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --forbid AUTOGRAD --format json"), 1);
    contains(S.out,
             "\"rule\": \"forbid\",\n      \"region\": \"\",\n      \"category\": \"autograd\",\n"
             "      \"bytes\": 10240,\n      \"count\": 20,");
    lacks(S.out, "\"rule\": \"forbid\",\n      \"region\": \"\",\n      \"category\": \"saved\"");
    expect_rc(gradprof("check " TRACE("mlp_nograd") " --forbid autograd"), 0);
    /* every category the MLP allocates */
    expect_rc(gradprof("check " TRACE("mlp_nograd") " --forbid parameter --detectors none"), 1);
    contains(S.out,
             "[forbid] 524.04 KiB (536616 bytes) of parameter memory allocated in 6 buffers");
}

static void test_check_max_peak(void **state)
{
    const char *only = "--forbid none --detectors none";
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak %llu", only, PEAK_GRAD), 0);
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak %llu", only, PEAK_GRAD - 1), 1);
    contains(S.out, "[max-peak] peak 654.04 KiB (669736 bytes)");
    contains(S.out, "exceeds --max-peak 654.04 KiB (669735 bytes)");
    contains(S.out, "parameter   parameter  mlp.0"); /* the largest at the peak */
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak 655KiB", only), 0);
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak 654KiB", only), 1);
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak 0.67MB", only), 0);
    expect_rc(gradprof("check " TRACE("mlp_nograd") " %s --max-peak %llu", only, PEAK_NOGRAD), 0);
    expect_rc(gradprof("check " TRACE("mlp_nograd") " %s --max-peak %llu", only, PEAK_NOGRAD - 1),
              1);
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-peak %llu --format json", only,
                       PEAK_GRAD - 1),
              1);
    contains(S.out, "\"rule\": \"max-peak\",\n      \"region\": \"\",\n      \"category\": "
                    "\"parameter\",\n      \"bytes\": 669736,\n      \"count\": 0,\n      "
                    "\"limit\": 669735,");
}

static void test_check_leaks(void **state)
{
    const char *only = "--forbid none --detectors none";
    expect_rc(gradprof("check " TRACE("raw") " %s --no-leaks", only), 1);
    contains(S.out, "[no-leaks] 4.98 KiB (5096 bytes) in 2 buffers still live at the end");
    contains(S.out, "infer+0x1a00");                           /* the leaking call site */
    expect_rc(gradprof("check " TRACE("raw") " %s", only), 0); /* not checked unless asked */
    /* The MLP fixtures never free their parameters and input. */
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --no-leaks", only), 1);
    contains(S.out, "556.04 KiB (569384 bytes) in 7 buffers still live");
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --no-leaks --format json", only), 1);
    contains(S.out, "\"rule\": \"no-leaks\"");
    contains(S.out, "\"bytes\": 569384");
}

static void test_check_region(void **state)
{
    /* one rule per forbidden category inside the region */
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region inference --detectors none"), 1);
    contains(S.out, "rules: forbid saved in inference (FAILED), forbid gradient in inference, "
                    "forbid autograd in inference (FAILED)");
    contains(S.out, "[forbid] 256.00 KiB (262144 bytes) of saved memory entered region 'inference' "
                    "(allocated or tagged saved while it was open); saved is forbidden there");
    contains(S.out, "[forbid] 10.00 KiB (10240 bytes) of autograd memory entered region "
                    "'inference'");
    contains(S.out, "relu  mlp.1");
    expect_rc(gradprof("check " TRACE("mlp_nograd") " --region inference"), 0);
    /* mlp.0 (the first Linear): its graph node, 512 bytes per iteration */
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region mlp.0 --detectors none"), 1);
    contains(S.out, "2.00 KiB (2048 bytes) of autograd memory entered region 'mlp.0'");
    /* any category can be forbidden inside a region, not only the graph's */
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region inference --forbid activation "
                                                  "--detectors none"),
              1);
    contains(S.out, "rules: forbid activation in inference (FAILED)\n");
    contains(S.out, "of activation memory entered region 'inference'");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region inference --forbid parameter "
                                                  "--detectors none"),
              0); /* the parameters were made before inference */
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region inference --forbid autograd "
                                                  "--detectors none --format json"),
              1);
    contains(S.out, "\"name\": \"forbid autograd in inference\", \"passed\": false");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region inference --forbid none "
                                                  "--detectors none --max-peak %llu",
                       PEAK_GRAD - 1),
              1);
    contains(S.out, "live while inside region 'inference'");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --region nosuch"), 2);
    one_line_error();
    contains(S.err, "no region 'nosuch'");
    contains(S.err, "inference"); /* lists the regions there are */
}

static void test_check_growth(void **state)
{
    const char *only = "--forbid none --detectors none";
    expect_rc(gradprof("check " TRACE("leak_accumulate") " %s --max-growth 64k", only), 1);
    contains(S.out, "[max-growth] live memory grew by 338.75 KiB (346880 bytes) from mark 'iter 0' "
                    "to mark 'iter 5'");
    contains(S.out, "relu    mlp.3"); /* a growing site */
    expect_rc(gradprof("check " TRACE("leak_accumulate") " %s --max-growth %llu", only,
                       GROWTH_ACCUMULATE),
              0);
    expect_rc(gradprof("check " TRACE("leak_accumulate") " %s --max-growth %llu", only,
                       GROWTH_ACCUMULATE - 1),
              1);
    expect_rc(gradprof("check " TRACE("mlp_grad") " %s --max-growth 0", only), 0);
    expect_rc(gradprof("check " TRACE("mlp_nograd") " %s --max-growth 0", only), 0);
    /* raw has no marks: the rule is skipped, and says why */
    expect_rc(gradprof("check " TRACE("raw") " %s --max-growth 0", only), 0);
    contains(S.out, "1 skipped");
    contains(S.out, "skipped max-growth: the trace has 0 marks");
    /* The growth detector alone (default threshold 64 KiB) */
    expect_rc(gradprof("check " TRACE("leak_accumulate") " --forbid none "
                                                         "--detectors growth_across_iterations"),
              1);
    contains(S.out, "[growth_across_iterations]");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --forbid none "
                                                  "--detectors growth_across_iterations"),
              0);
}

static void test_check_json(void **state)
{
    char path[600];
    snprintf(path, sizeof path, "%s/check.json", S.dir);
    static const char *const runs[] = {
        TRACE("mlp_grad"),
        TRACE("mlp_nograd"),
        TRACE("leak_accumulate") " --max-growth 1k --no-leaks --max-peak 1",
        TRACE("raw") " --max-growth 1k --no-leaks",
    };
    for (size_t i = 0; i < 4; i++) {
        int rc = gradprof("check %s --format json > '%s'", runs[i], path);
        assert_true(rc == 0 || rc == 1);
        python_parses("json", path);
    }
    expect_rc(gradprof("check " TRACE("mlp_nograd") " --format json"), 0);
    contains(S.out, "\"schema\": \"gradprof-check/2\"");
    contains(S.out, "\"verdict\": \"pass\"");
    contains(S.out, "\"passed\": true");
    contains(S.out, "\"doubts\": []");
    contains(S.out, "\"violations\": []");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --format json"), 1);
    contains(S.out, "\"verdict\": \"fail\"");
    contains(S.out, "\"passed\": false");
    contains(S.out, "\"op\": \"relu\", \"module\": \"mlp.1\"");
    contains(S.out, "\"frames\": [\"");
    /* not judged: passed is false, and the doubt says why */
    expect_rc(gradprof("check " TRACE("damaged") " --format json > '%s'", path), 2);
    python_parses("json", path);
    char *doc = e2e_slurp(path, NULL);
    assert_non_null(doc);
    contains(doc, "\"verdict\": \"unjudged\"");
    contains(doc, "\"passed\": false");
    contains(doc, "{\"reason\": \"incomplete\", \"accepted\": false, \"option\": "
                  "\"--allow-incomplete\", \"message\": \"'");
    free(doc);
}

static void test_check_junit(void **state)
{
    char xml[600];
    snprintf(xml, sizeof xml, "%s/junit.xml", S.dir);
    expect_rc(gradprof("check " TRACE("mlp_grad") " --junit '%s'", xml), 1);
    python_parses("xml", xml);
    char *doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    contains(doc, "<testsuite name=\"gradprof-check\" tests=\"9\" failures=\"3\"");
    contains(doc, "<testcase classname=\"gradprof-check\" name=\"forbid saved\">");
    contains(doc, "<failure type=\"forbid\" message=\"256.00 KiB (262144 bytes) of saved memory");
    contains(doc, "<testcase classname=\"gradprof-check\" name=\"forbid gradient\"/>");
    free(doc);

    expect_rc(gradprof("check " TRACE("mlp_nograd") " --junit '%s'", xml), 0);
    python_parses("xml", xml);
    doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    lacks(doc, "<failure");
    contains(doc, "failures=\"0\"");
    free(doc);

    expect_rc(gradprof("check " TRACE("raw") " --max-growth 1 --junit '%s'", xml), 0);
    python_parses("xml", xml);
    doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    contains(doc, "<skipped message=\"the trace has 0 marks");
    free(doc);

    expect_rc(gradprof("check " TRACE("mlp_grad") " --junit /nonexistent-dir/j.xml"), 2);
    one_line_error();
    contains(S.err, "/nonexistent-dir/j.xml");
}

/* A trace whose op and module names hold XML and JSON metacharacters, control characters and
 * bytes that are not UTF-8: the JUnit and JSON outputs must still parse. */
static void test_check_hostile_names(void **state)
{
    char trace[600], xml[600], json[600];
    snprintf(trace, sizeof trace, "%s/hostile.gptrace", S.dir);
    snprintf(xml, sizeof xml, "%s/hostile.xml", S.dir);
    snprintf(json, sizeof json, "%s/hostile.json", S.dir);
    tb *b = tb_open(trace, "hostile <&>");
    assert_non_null(b);
    tb_module(b, 1, 0x400000, 0x1000, "/opt/x/<prog>&\"'", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    const uint64_t o[1] = {0x10};
    uint32_t s = tb_stack(b, 1, m, o);
    tb_region_push(b, "inference");
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 4096, s);
    tb_tag(b, 0x1000, 4096, LP_CAT_AUTOGRAD, "op<&>\"'\x01\x1b]", "mod\xff\xfe\xc3(\t\n\r]]>", NULL,
           true, 0);
    tb_region_pop(b);
    tb_at(b, 2000);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    expect_rc(gradprof("check '%s' --junit '%s' --format json > '%s'", trace, xml, json), 1);
    python_parses("xml", xml);
    python_parses("json", json);
    expect_rc(gradprof("check '%s'", trace), 1);
    contains(S.out, "of autograd memory");
}

/* A trace with everything freed and no graph: every rule passes. */
static void test_check_clean(void **state)
{
    char trace[600];
    snprintf(trace, sizeof trace, "%s/clean.gptrace", S.dir);
    tb *b = tb_open(trace, "clean");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    for (int i = 0; i < 4; i++) {
        char mark[16];
        snprintf(mark, sizeof mark, "iter %d", i);
        tb_at(b, (uint64_t)i * 1000 + 1);
        tb_mark(b, mark);
        tb_alloc(b, 0x1000, 100, 0);
        tb_tag(b, 0x1000, 100, LP_CAT_ACTIVATION, "linear", "fc", NULL, false, 0);
        tb_free(b, 0x1000);
    }
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    expect_rc(gradprof("check '%s' --no-leaks --max-growth 0 --max-peak 100", trace), 0);
    contains(S.out, "PASS");
    contains(S.out, "rules passed");
    expect_rc(gradprof("check '%s' --max-peak 99", trace), 1);
}

/* Golden text, JSON and JUnit outputs, run from the traces directory so paths are relative. */
static void test_check_golden(void **state)
{
    static const struct {
        const char *golden, *args;
        int rc;
    } cases[] = {
        {"check_mlp_grad.txt", "mlp_grad.gptrace", 1},
        {"check_mlp_grad.json", "mlp_grad.gptrace --format json", 1},
        {"check_leak_accumulate.txt",
         "leak_accumulate.gptrace --max-growth 64k --no-leaks --max-peak 1MiB", 1},
        {"check_mlp_nograd.txt", "mlp_nograd.gptrace --no-leaks --max-growth 0", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_rc(sh("cd '" GRADPROF_TEST_TRACES "' && '" GRADPROF_BIN "' check %s", cases[i].args),
                  cases[i].rc);
        golden(cases[i].golden, S.out);
    }
    char xml[600];
    snprintf(xml, sizeof xml, "%s/golden.xml", S.dir);
    expect_rc(sh("cd '" GRADPROF_TEST_TRACES "' && '" GRADPROF_BIN "' check mlp_grad.gptrace "
                 "--max-peak 600k --junit '%s'",
                 xml),
              1);
    char *doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    golden("check_mlp_grad.xml", doc);
    free(doc);
}

/* How many names in S.dir start with `prefix`. */
static int count_files(const char *prefix)
{
    DIR *d = opendir(S.dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* ---- the gate fails closed ------------------------------------------------------------------- */

/* A trace of a small tagged program: a saved buffer from a call site, freed; an END record when
 * `end`, META end_reason when given, and `raw` untagged bytes without a stack. */
static void small_trace(const char *name, bool end, const char *end_reason, uint64_t raw)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", S.dir, name);
    tb *b = tb_open(path, "small");
    assert_non_null(b);
    if (end_reason)
        tb_meta(b, "end_reason", end_reason);
    tb_module(b, 1, 0x400000, 0x10000, "/opt/small", "");
    tb_thread(b, 1, "main");
    const uint32_t m[1] = {1};
    const uint64_t o[1] = {0x100};
    uint32_t s = tb_stack(b, 1, m, o);
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 1000, s);
    tb_tag(b, 0x1000, 1000, LP_CAT_ACTIVATION, "linear", "fc", NULL, false, 0);
    if (raw)
        tb_alloc(b, 0x8000, raw, 0);
    tb_at(b, 2000);
    tb_free(b, 0x1000);
    if (raw)
        tb_free(b, 0x8000);
    if (end)
        tb_end(b);
    assert_int_equal(tb_close(b), 0);
}

/* A trace that holds no run cannot pass: exit 2 with what is missing, unless accepted. */
static void test_check_incomplete(void **state)
{
    /* the 16-byte file header alone */
    expect_rc(sh("printf 'GPTRACE\\000\\001\\000\\000\\000\\000\\000\\000\\000' > header.gptrace"), 0);
    expect_rc(gradprof("check header.gptrace"), 2);
    one_line_error();
    contains(S.err, "gradprof check: cannot judge: 'header.gptrace' is incomplete: it holds no "
                    "metadata and no events (only the file header");
    contains(S.err, "--allow-incomplete checks it anyway");
    contains(S.out, "UNJUDGED header.gptrace: the trace cannot be judged");
    lacks(S.out, "PASS");
    expect_rc(gradprof("check header.gptrace --allow-incomplete"), 0);
    contains(S.out, "PASS header.gptrace");
    contains(S.out, "accepted (--allow-incomplete): 'header.gptrace' is incomplete");
    /* metadata but no events */
    char path[600];
    snprintf(path, sizeof path, "%s/noevents.gptrace", S.dir);
    tb *b = tb_open(path, "noevents");
    assert_int_equal(tb_close(b), 0);
    expect_rc(gradprof("check noevents.gptrace"), 2);
    contains(S.err, "'noevents.gptrace' is incomplete: it holds no events");
    /* events, no END record */
    small_trace("noend.gptrace", false, NULL, 0);
    expect_rc(gradprof("check noend.gptrace --format json"), 2);
    contains(S.err, "it has no end record (the program was killed, or is still running)");
    contains(S.out, "\"verdict\": \"unjudged\"");
    expect_rc(gradprof("check noend.gptrace --allow-incomplete"), 0);
    /* how the recorder says the program ended: signal, exec */
    small_trace("abort.gptrace", false, "signal 6", 0);
    expect_rc(gradprof("check abort.gptrace"), 2);
    contains(S.err, "'abort.gptrace' is incomplete: the program was killed by signal 6 (SIGABRT)");
    expect_rc(gradprof("report abort.gptrace"), 0);
    contains(S.err, "gradprof report: warning: 'abort.gptrace' ends where the program was killed "
                    "by signal 6 (SIGABRT)");
    contains(S.out, "Warning       the trace ends where the program was killed by signal 6 "
                    "(SIGABRT);\n              the report covers what was written");
    /* the recorder stopped at the program's file size limit */
    small_trace("limit.gptrace", false, "file size limit 65536", 0);
    expect_rc(gradprof("check limit.gptrace"), 2);
    contains(S.err, "'limit.gptrace' is incomplete: the program reached its file size limit "
                    "(RLIMIT_FSIZE, 65536 bytes)");
    /* an exec ends the image: judged like an exit (the new program writes a trace of its own),
     * and report says where it ended */
    small_trace("exec.gptrace", false, "exec", 0);
    expect_rc(gradprof("check exec.gptrace"), 0);
    assert_string_equal(S.err, "");
    expect_rc(gradprof("report exec.gptrace"), 0);
    contains(S.err, "the program exec'd another program");
    small_trace("exit.gptrace", true, "exit", 0);
    expect_rc(gradprof("check exit.gptrace"), 0);
    assert_string_equal(S.err, "");
    /* JUnit: the doubt is an error testcase, or skipped when accepted */
    char xml[600];
    snprintf(xml, sizeof xml, "%s/judge.xml", S.dir);
    expect_rc(gradprof("check abort.gptrace --junit '%s'", xml), 2);
    python_parses("xml", xml);
    char *doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    contains(doc, "errors=\"1\"");
    contains(doc, "<testcase classname=\"gradprof-check\" name=\"judge: complete trace\">\n"
                  "      <error type=\"incomplete\" message=\"&apos;abort.gptrace&apos; is "
                  "incomplete");
    free(doc);
    expect_rc(gradprof("check abort.gptrace --allow-incomplete --junit '%s'", xml), 0);
    doc = e2e_slurp(xml, NULL);
    assert_non_null(doc);
    contains(doc, "<skipped message=\"accepted by --allow-incomplete: ");
    contains(doc, "errors=\"0\"");
    free(doc);
}

/* Memory nothing classifies (untagged, no stacks) cannot show graph memory: not judged. */
static void test_check_unclassified(void **state)
{
    small_trace("nostacks.gptrace", true, NULL, 9000); /* 90% raw without a stack */
    expect_rc(gradprof("check nostacks.gptrace"), 2);
    one_line_error();
    contains(S.err, "gradprof check: cannot judge: 'nostacks.gptrace': 90% of the bytes allocated "
                    "(9000 of 10000) are untagged and have no call stack");
    contains(S.err, "graph memory cannot be told from other memory");
    contains(S.err, "--allow-unclassified checks it anyway");
    contains(S.out, "UNJUDGED");
    expect_rc(gradprof("check nostacks.gptrace --allow-unclassified"), 0);
    contains(S.out, "PASS");
    contains(S.err, "(accepted: --allow-unclassified)");
    /* rules that need no categories are judged */
    expect_rc(gradprof("check nostacks.gptrace --forbid none --detectors none --max-peak 1M"), 0);
    expect_rc(gradprof("check nostacks.gptrace --forbid none --detectors none --max-peak 1k"), 1);
    /* report says the same */
    expect_rc(gradprof("report nostacks.gptrace"), 0);
    contains(S.err, "gradprof report: warning: cannot judge: 'nostacks.gptrace': 90% of the bytes");
    /* half and half: judged */
    small_trace("half.gptrace", true, NULL, 1000);
    expect_rc(gradprof("check half.gptrace"), 0);
    /* a real program recorded without stacks: raw memory nothing can classify */
    expect_rc(gradprof("run --no-stacks -o ls.gptrace -- /bin/ls /"), 0);
    expect_rc(gradprof("check ls.gptrace"), 2);
    contains(S.err, "are untagged and have no call stack");
    expect_rc(gradprof("check ls.gptrace --allow-unclassified"), 0);
    /* a tagging source attached (parameters tagged: the PyTorch helper without stacks): judged */
    char path[600];
    snprintf(path, sizeof path, "%s/helper.gptrace", S.dir);
    tb *b = tb_open(path, "python3");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    tb_alloc(b, 0x1000, 1000, 0);
    tb_tag(b, 0x1000, 1000, LP_CAT_PARAMETER, "parameter", "Net.fc", "weight", true, 0);
    tb_alloc(b, 0x8000, 9000, 0);
    tb_at(b, 2000);
    tb_free(b, 0x8000);
    tb_free(b, 0x1000);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    expect_rc(gradprof("check helper.gptrace"), 0);
    contains(S.out, "PASS");
    lacks(S.err, "cannot judge");
}

/* ---- output files ---------------------------------------------------------------------------- */

/* Never onto an input, never through a symbolic link, never a half file. */
static void test_output_files(void **state)
{
    expect_rc(sh("cp " TRACE("mlp_grad") " in.gptrace && cp in.gptrace keep.gptrace && "
                 "echo KEEP > victim && ln -s victim link && ln -s missing dangling && "
                 "ln in.gptrace hard.gptrace"),
              0);
    static const char *const onto_input[] = {
        "report in.gptrace -o in.gptrace",
        "report in.gptrace -o hard.gptrace", /* the same file under another name */
        "report in.gptrace --format html -o ./in.gptrace",
        "diff in.gptrace " TRACE("mlp_nograd") " -o in.gptrace",
        "check in.gptrace --junit in.gptrace",
    };
    for (size_t i = 0; i < sizeof onto_input / sizeof onto_input[0]; i++) {
        expect_rc(gradprof("%s", onto_input[i]), 2);
        one_line_error();
        contains(S.err, "is the input 'in.gptrace'; writing there would destroy it");
        expect_rc(sh("cmp in.gptrace keep.gptrace"), 0);
    }
    static const char *const through_link[] = {
        "report in.gptrace -o link",
        "diff in.gptrace " TRACE("mlp_nograd") " -o link",
        "check in.gptrace --junit link",
        "report in.gptrace -o dangling",
    };
    for (size_t i = 0; i < sizeof through_link / sizeof through_link[0]; i++) {
        expect_rc(gradprof("%s", through_link[i]), 2);
        one_line_error();
        contains(S.err, "symbolic link; gradprof never writes through one");
        if (strstr(through_link[i], "dangling"))
            contains(S.err, "'dangling' is a dangling symbolic link");
        assert_string_equal(S.out, "");
        expect_rc(sh("test \"$(cat victim)\" = KEEP && test -L link && test -L dangling && "
                     "test ! -e missing"),
                  0);
    }
    /* the error names the option */
    expect_rc(gradprof("check in.gptrace --junit link"), 2);
    contains(S.err, "gradprof check: --junit: 'link' is a symbolic link");
    /* replacing a file keeps no temporary behind */
    expect_rc(sh("echo OLD > out.txt && chmod 640 out.txt"), 0);
    expect_rc(gradprof("report in.gptrace -o out.txt"), 0);
    expect_rc(sh("grep -q 'gradprof report' out.txt && test \"$(stat -c %%a out.txt)\" = 640 && "
                 "test -z \"$(ls -A | grep '^\\.out')\""),
              0);
    /* a write that fails (the file size limit, as on a full disk) leaves the old file as it was
     * and no half file */
    expect_rc(sh("echo OLD > big.html"), 0);
    expect_rc(sh("trap '' XFSZ; ulimit -f 1; '" GRADPROF_BIN "' report in.gptrace --format html "
                 "-o big.html"),
              2);
    contains(S.err, "error writing 'big.html'");
    contains(S.err, "(the file there is unchanged)");
    expect_rc(sh("test \"$(cat big.html)\" = OLD && test -z \"$(ls -A | grep '^\\.big')\""), 0);
    expect_rc(sh("trap '' XFSZ; ulimit -f 1; '" GRADPROF_BIN "' report in.gptrace --format html "
                 "-o new.html"),
              2);
    expect_rc(sh("test ! -e new.html && test -z \"$(ls -A | grep '^\\.new')\""), 0);
    /* a directory, a missing directory */
    expect_rc(gradprof("report in.gptrace -o ."), 2);
    contains(S.err, "'.' is a directory");
    expect_rc(gradprof("diff in.gptrace " TRACE("mlp_nograd") " -o ''"), 2);
    contains(S.err, "-o/--output needs a file name");
}

/* Names over NAME_MAX or PATH_MAX: refused with the reason, never cut off. */
static void test_long_paths(void **state)
{
    char name[300], deep[5200];
    memset(name, 'n', 280);
    name[280] = '\0';
    size_t n = 0;
    while (n + 100 < sizeof deep - 10)
        n += (size_t)snprintf(deep + n, sizeof deep - n, "%s/", "dddddddddddddddddddddddddddddddd"
                                                                "dddddddddddddddddddddddddddddddd"
                                                                "ddd");
    snprintf(deep + n, sizeof deep - n, "t.gptrace");
    expect_rc(gradprof("run -o '%s.gptrace' -- /bin/true", name), 2);
    one_line_error();
    contains(S.err, "file name too long (ENAMETOOLONG)");
    contains(S.err, "is 288 bytes, over the 255 a file name may have");
    expect_rc(gradprof("run -o 'x%%p%s' -- /bin/true", name + 30), 2); /* 251 bytes + a pid */
    contains(S.err, "once %p is a pid");
    expect_rc(gradprof("run -o '%s' -- /bin/true", deep), 2);
    one_line_error();
    contains(S.err, "ENAMETOOLONG");
    expect_rc(gradprof("report '%s.gptrace'", name), 2);
    one_line_error();
    contains(S.err, "ENAMETOOLONG");
    expect_rc(gradprof("report '%s'", deep), 2);
    one_line_error();
    contains(S.err, "over the 4095 a path may have: file name too long (ENAMETOOLONG)");
    expect_rc(gradprof("report " TRACE("mlp_grad") " -o '%s.txt'", name), 2);
    contains(S.err, "-o: ");
    contains(S.err, "ENAMETOOLONG");
    expect_rc(gradprof("check " TRACE("mlp_grad") " --junit '%s.xml'", name), 2);
    contains(S.err, "ENAMETOOLONG");
    expect_rc(gradprof("compare -n '%s' -- /bin/true", name), 2);
    one_line_error();
    contains(S.err, "--name: ");
    contains(S.err, "ENAMETOOLONG");
    expect_rc(gradprof("compare -n '%s' -- /bin/true", deep), 2);
    contains(S.err, "ENAMETOOLONG");
    assert_int_equal(count_files("n"), 0); /* nothing was run or written */
}

/* ---- gradprof run ---------------------------------------------------------------------------- */

/* Under GRADPROF_SANITIZE, programs carrying ASan (mlp_infer, gradprof) refuse to start when
 * another library is preloaded before the ASan runtime unless told this is fine. */
#define ASAN_PRELOAD_OK "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "

#ifdef GRADPROF_MLP_INFER
static void test_run_mlp_infer(void **state)
{
    expect_rc(sh(ASAN_PRELOAD_OK "'" GRADPROF_BIN "' run -o infer.%%p.gptrace -- '%s' --iters 2 "
                                 "--layers 3 --width 64 --batch 4",
                 GRADPROF_MLP_INFER),
              0);
    contains(S.err, "gradprof: trace written to infer.");
    assert_int_equal(count_files("infer."), 1);
    /* the path it names is the trace, and it reads */
    char *line = strstr(S.err, "trace written to ");
    assert_non_null(line);
    char path[512];
    assert_int_equal(sscanf(line, "trace written to %511s", path), 1);
    expect_rc(gradprof("report '%s'", path), 0);
    contains(S.out, "saved"); /* mlp_infer leaves grad on by default */
    expect_rc(gradprof("check '%s' --forbid saved --detectors none", path), 1);
    contains(S.out, "of saved memory allocated");
}
#endif

static void test_run_exit_status(void **state)
{
    expect_rc(gradprof("run -- /bin/false"), 1);
    contains(S.err, "gradprof: trace written to gradprof.false.");
    expect_rc(gradprof("run -o t.%%p.gptrace /bin/sh -c 'exit 7'"), 7);
    contains(S.err, "trace written to t.");
    expect_rc(gradprof("run -- /bin/sh -c 'kill -TERM $$'"), 143);
    contains(S.err, "gradprof run: /bin/sh was killed by signal 15 (Terminated)");
    contains(S.err, "trace written to gradprof.sh.");
}

/* A program that starts many processes: each writes a trace, and the message names a few. */
static void test_run_many_processes(void **state)
{
    expect_rc(gradprof("run -o many.gptrace -- /bin/sh -c 'for i in 1 2 3 4 5 6; do /bin/true; "
                       "done'"),
              0);
    assert_int_equal(count_files("many.gptrace"), 7);
    contains(S.err, "gradprof: 7 traces written (each process the program started writes its "
                    "own): many.gptrace, many.gptrace.");
    contains(S.err, ", ..., many.gptrace.");
    one_line_error();
}

static void test_run_not_found(void **state)
{
    expect_rc(gradprof("run -- /nonexistent/program"), 127);
    one_line_error();
    contains(S.err, "/nonexistent/program: no such file");
    expect_rc(gradprof("run -- gradprof-no-such-command-xyz arg"), 127);
    one_line_error();
    contains(S.err, "gradprof-no-such-command-xyz: command not found");
    expect_rc(gradprof("run -- /"), 126);
    one_line_error();
    expect_rc(gradprof("run"), 2);
    one_line_error();
    contains(S.err, "no program to run");
    expect_rc(gradprof("run --"), 2);
    one_line_error();
    /* nothing was recorded */
    assert_int_equal(count_files("gradprof."), 0);
}

static void test_run_output(void **state)
{
    /* a fixed name: a second run refuses it (nothing overwritten, nothing written beside it,
     * where `check fixed.gptrace` would judge the old trace), as it refuses FILE.N of a run */
    expect_rc(gradprof("run -o fixed.gptrace -- /bin/true"), 0);
    contains(S.err, "trace written to fixed.gptrace\n");
    expect_rc(gradprof("run -o fixed.gptrace -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "-o: 'fixed.gptrace' exists: gradprof never overwrites a trace");
    assert_int_equal(count_files("fixed.gptrace"), 1);
    expect_rc(sh("mv fixed.gptrace fixed.gptrace.3 && touch fixed.gptrace.12"), 0);
    expect_rc(gradprof("run -o fixed.gptrace -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "-o: 2 traces named 'fixed.gptrace' exist (fixed.gptrace.3, ..., "
                    "fixed.gptrace.12)");
    assert_int_equal(count_files("fixed.gptrace"), 2);
    /* a subdirectory, kept relative in the message */
    expect_rc(sh("mkdir -p sub"), 0);
    expect_rc(gradprof("run -o sub/x.%%p.gptrace -- /bin/true"), 0);
    contains(S.err, "trace written to sub/x.");
    /* forked children write their own traces, all listed */
    expect_rc(gradprof("run -o fork.%%p.gptrace -- /bin/sh -c '/bin/true; /bin/true; exit 0'"), 0);
    contains(S.err, "trace written to fork.");
    int n = count_files("fork.");
    assert_true(n >= 2);
    int commas = 0;
    for (const char *c = strstr(S.err, "trace written to"); c && *c; c++)
        commas += *c == ',';
    assert_int_equal(commas, n - 1);
    /* bad output locations */
    expect_rc(gradprof("run -o /nonexistent-dir/t.gptrace -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "/nonexistent-dir");
    expect_rc(gradprof("run -o sub/ -- /bin/true"), 2);
    one_line_error();
}

/* Every %p of the template is the pid; the trace is found and named. */
static void test_run_pid_twice(void **state)
{
    expect_rc(gradprof("run -o 'z%%p%%p.gptrace' -- /bin/true"), 0);
    contains(S.err, "gradprof: trace written to z");
    lacks(S.err, "no trace was written");
    char *line = strstr(S.err, "trace written to ");
    assert_non_null(line);
    char path[512];
    assert_int_equal(sscanf(line, "trace written to %511s", path), 1);
    size_t digits = strlen(path) - strlen("z.gptrace");
    assert_true(digits % 2 == 0 && digits > 0);
    assert_memory_equal(path + 1, path + 1 + digits / 2, digits / 2); /* the same pid twice */
    expect_rc(gradprof("report '%s'", path), 0);
    expect_rc(gradprof("run -o 'p%%p-%%p.x' -- /bin/true"), 0);
    contains(S.err, "trace written to p");
    assert_int_equal(count_files("p"), 1);
}

/* GRADPROF_ENABLE=0: the program runs without recording, and one line says so. */
static void test_run_enable(void **state)
{
    expect_rc(sh("GRADPROF_ENABLE=0 '" GRADPROF_BIN "' run -o off.gptrace -- /bin/sh -c "
                 "'echo \"[$GRADPROF_ENABLE] [$LD_PRELOAD]\"; exit 3'"),
              3);
    one_line_error();
    contains(S.err, "gradprof run: GRADPROF_ENABLE=0 in the environment: running /bin/sh without "
                    "recording");
    contains(S.out, "[0] []");
    assert_int_equal(count_files("off"), 0);
    /* a bad value: a warning naming it, and recording as with 1 */
    expect_rc(sh("GRADPROF_ENABLE=yes '" GRADPROF_BIN "' run -o on.gptrace -- /bin/true"), 0);
    contains(S.err, "gradprof run: warning: GRADPROF_ENABLE='yes' is not 0 or 1");
    contains(S.err, "trace written to on.gptrace");
    /* compare needs both runs recorded: refused */
    expect_rc(sh("GRADPROF_ENABLE=0 '" GRADPROF_BIN "' compare -n cmp -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "GRADPROF_ENABLE=0");
    assert_int_equal(count_files("cmp"), 0);
}

static void test_run_preload_env(void **state)
{
    expect_rc(gradprof("run -- /bin/true"), 0); /* found next to the binary (build tree) */
    expect_rc(sh("GRADPROF_PRELOAD=/nonexistent/libprof_preload.so '" GRADPROF_BIN "' run -- "
                 "/bin/true"),
              2);
    one_line_error();
    contains(S.err, "GRADPROF_PRELOAD='/nonexistent/libprof_preload.so'");
    expect_rc(sh("GRADPROF_PRELOAD='" GRADPROF_PRELOAD_LIB "' '" GRADPROF_BIN "' run -o e.%%p "
                 "-- /bin/true"),
              0);
    contains(S.err, "trace written to e.");
    /* A copy of gradprof with no preload library next to it says where it looked. */
    expect_rc(sh("mkdir -p bin && cp '" GRADPROF_BIN "' bin/gradprof && ./bin/gradprof run -- "
                 "/bin/true"),
              2);
    one_line_error();
    contains(S.err, "cannot find libprof_preload.so; tried");
    contains(S.err, "/bin/../libprof/libprof_preload.so and");
    contains(S.err, "/bin/../lib/gradprof/libprof_preload.so");
    /* the program's own LD_PRELOAD is kept, after ours */
    expect_rc(sh(ASAN_PRELOAD_OK "LD_PRELOAD=libm.so.6 '" GRADPROF_BIN
                                 "' run -o p.%%p -- /bin/sh -c "
                                 "'echo \"$LD_PRELOAD\"'"),
              0);
    contains(S.out, "libprof_preload.so:libm.so.6");
}

/* A Python program is recorded without stacks unless the user says otherwise; others as told. */
static void test_run_python_stacks(void **state)
{
    /* a Python by its name (a shell script here: the name decides) */
    char path[600];
    snprintf(path, sizeof path, "%s/python-fake", S.dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("#!/bin/sh\necho \"depth=$GRADPROF_STACK_DEPTH marker=$GRADPROF_PYTHON_NO_STACKS "
          "sample=$GRADPROF_STACK_SAMPLE\"\n",
          f);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
    expect_rc(gradprof("run -o a.%%p -- ./python-fake"), 0);
    contains(S.out, "depth=0 marker=1 sample=\n");
    expect_rc(gradprof("run --stack-depth 16 -o b.%%p -- ./python-fake"), 0);
    contains(S.out, "depth=16 marker= sample=\n");
    expect_rc(gradprof("run --stack-sample 64k -o c.%%p -- ./python-fake"), 0);
    contains(S.out, "depth= marker= sample=65536\n");
    expect_rc(gradprof("run --no-torch -o d.%%p -- ./python-fake"), 0);
    contains(S.out, "depth= marker= sample=\n");
    expect_rc(sh("GRADPROF_STACK_SAMPLE=4096 '" GRADPROF_BIN "' run -o e.%%p -- ./python-fake"), 0);
    contains(S.out, "depth= marker= sample=4096\n");
    expect_rc(sh("GRADPROF_TORCH=0 '" GRADPROF_BIN "' run -o g.%%p -- ./python-fake"), 0);
    contains(S.out, "depth= marker= sample=\n");
    /* not a Python program */
    expect_rc(gradprof("run -o h.%%p -- /bin/sh -c 'echo \"depth=$GRADPROF_STACK_DEPTH\"'"), 0);
    contains(S.out, "depth=\n");
    /* a script whose #! line names python, found on PATH */
    if (access(PYTHON, X_OK) == 0) {
        snprintf(path, sizeof path, "%s/tool", S.dir);
        f = fopen(path, "w");
        assert_non_null(f);
        fputs("#!" PYTHON "\nimport os\nprint('depth=%s' % os.environ.get('GRADPROF_STACK_DEPTH'))"
              "\n",
              f);
        fclose(f);
        assert_int_equal(chmod(path, 0755), 0);
        expect_rc(sh("PATH=\"$PWD:$PATH\" '" GRADPROF_BIN "' run -o t.%%p -- tool"), 0);
        contains(S.out, "depth=0\n");
        /* the startup hook says it once when the program never imported torch */
        contains(S.err, "did not import torch");
        /* a launcher that execs the program: its image is judged (it notes that it saved
         * nothing before the exec, where no atexit runs), and so is the program's */
        expect_rc(gradprof("run -o launch.gptrace -- " PYTHON
                           " -c 'import os; os.execv(\"/bin/true\", [\"true\"])'"),
                  0);
        expect_rc(gradprof("check launch.gptrace launch.gptrace.1"), 0);
        contains(S.out, "PASS job of 2 processes: 2 passed, 0 failed, 0 not judged");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_uint),
        cmocka_unit_test(test_parse_categories),
        cmocka_unit_test(test_parse_detectors),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test_setup_teardown(test_no_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_command, setup, teardown),
        cmocka_unit_test_setup_teardown(test_top_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_option, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_default, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_forbid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_max_peak, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_leaks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_region, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_growth, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_junit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_hostile_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_clean, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_golden, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_incomplete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_unclassified, setup, teardown),
        cmocka_unit_test_setup_teardown(test_output_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_paths, setup, teardown),
#ifdef GRADPROF_MLP_INFER
        cmocka_unit_test_setup_teardown(test_run_mlp_infer, setup, teardown),
#endif
        cmocka_unit_test_setup_teardown(test_run_python_stacks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_many_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_exit_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_pid_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_enable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_preload_env, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
