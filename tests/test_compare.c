/*
 * gradprof compare, run as a subprocess: its help and usage errors; compare_prog (a tensor-library
 * program, tests/compare_prog.c) and mlp_infer compared with grad on and with grad off from the
 * start (GRADPROF_GRAD_DEFAULT=off), the traces and captured output kept, the diff printed; the
 * divergences (stdout, exit status) reported with exit 3 and no diff; a failure of both runs
 * passed on; ^C during A stopping there; and Python programs through the startup hook
 * (libprof/python/startup): the user's own sitecustomize still runs, torch is not imported for a
 * program that does not import it, and, when /usr/bin/python3 has torch, grad starts off in B in
 * the main thread and in new threads while enable_grad still turns it on. The Python cases are
 * skipped without /usr/bin/python3 (or torch).
 *
 * Which run is grad-free is checked through `gradprof check --forbid saved`, not through the
 * diff's numbers, so that the test does not depend on the diff's layout.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define E2E_SESSION S /* the short names of e2e.h act on S */
#include "e2e.h"

#define PYTHON "/usr/bin/python3"

/* ---- helpers --------------------------------------------------------------------------------- */

static e2e_session S; /* the scratch directory (S.dir) and the last command's S.out, S.err */

/* One line on stderr: usage errors are one clear line. */
#define one_line_error() e2e_one_line_error(&S, "gradprof compare: ")

/* A file in S.dir, read whole (NULL if missing); free it. */
static char *file_text(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", S.dir, name);
    return e2e_slurp(path, NULL);
}

static bool exists(const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", S.dir, name);
    return stat(path, &st) == 0;
}

/* Under GRADPROF_SANITIZE, programs carrying ASan (compare_prog, mlp_infer, gradprof) refuse to
 * start when another library is preloaded before the ASan runtime unless told this is fine. */
#define ASAN_PRELOAD_OK "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" "
/* gradprof ARGS (a shell fragment), from S.dir. */
#define gradprof(...) sh(ASAN_PRELOAD_OK "'" GRADPROF_BIN "' " __VA_ARGS__)
#define PROG "'" GRADPROF_COMPARE_PROG "'"

/* The file `name` in S.dir contains `needle`. */
static void file_contains(const char *name, const char *needle)
{
    char *text = file_text(name);
    if (!text)
        print_message("missing file %s\n", name);
    assert_non_null(text);
    if (!strstr(text, needle)) {
        print_message("%s does not contain: %s\n---- %s\n%s----\n", name, needle, name, text);
        free(text);
        show();
        fail();
    }
    free(text);
}

/* Every file of a compare run with base name `base` is there. */
static void all_files(const char *base)
{
    static const char *const suffixes[] = {".grad.gptrace",   ".grad.stdout",   ".grad.stderr",
                                           ".nograd.gptrace", ".nograd.stdout", ".nograd.stderr"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char name[512];
        snprintf(name, sizeof name, "%s%s", base, suffixes[i]);
        if (!exists(name)) {
            print_message("missing %s\n", name);
            show();
            fail();
        }
    }
}

/* A holds saved (graph) memory, B none: B ran with grad off from the start. */
static void grad_only_in_a(const char *base)
{
    char *keep_out = S.out, *keep_err = S.err;
    S.out = S.err = NULL;
    int a = gradprof("check '%s.grad.gptrace' --forbid saved --detectors none", base);
    char *a_out = S.out;
    S.out = NULL;
    int b = gradprof("check '%s.nograd.gptrace' --forbid saved --detectors none", base);
    if (a != 1 || b != 0)
        print_message("check --forbid saved: A %d (want 1), B %d (want 0)\n---- A\n%s", a, b,
                      a_out ? a_out : "");
    free(a_out);
    free(S.out);
    free(S.err);
    S.out = keep_out;
    S.err = keep_err;
    assert_int_equal(a, 1);
    assert_int_equal(b, 0);
}

static int setup(void **state)
{
    return e2e_session_open(&S, "test_compare");
}

static int teardown(void **state)
{
    return e2e_session_close(&S);
}

/* ---- help and usage -------------------------------------------------------------------------- */

static void test_help(void **state)
{
    static const char *const words[] = {"usage: gradprof compare",
                                        "-n, --name BASE",
                                        "--format",
                                        "-o, --output",
                                        "--top",
                                        "--rules",
                                        "--ignore-stdout",
                                        "--stack-depth",
                                        "--no-stacks",
                                        "--min-stack-size",
                                        "--stack-sample",
                                        "--flush-ms",
                                        "--cuda",
                                        "-h, --help",
                                        "BASE.grad.gptrace",
                                        "BASE.nograd.stdout",
                                        "GRADPROF_GRAD_DEFAULT=off",
                                        "Divergence",
                                        "Exit status",
                                        "--require-aligned"};
    for (const char *flag = "--help"; flag; flag = strcmp(flag, "--help") ? NULL : "-h") {
        expect_rc(gradprof("compare %s", flag), 0);
        for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
            contains(S.out, words[i]);
        assert_string_equal(S.err, "");
    }
    expect_rc(gradprof("help compare"), 0);
    contains(S.out, "usage: gradprof compare");
    expect_rc(gradprof("--help"), 0);
    contains(S.out, "compare");
    /* run shares the recorder options and says what it puts on PYTHONPATH */
    expect_rc(gradprof("run --help"), 0);
    contains(S.out, "--stack-sample SIZE");
    contains(S.out, "--cuda");
    contains(S.out, "PYTHONPATH");
}

static void test_usage_errors(void **state)
{
    expect_rc(gradprof("compare"), 2);
    one_line_error();
    contains(S.err, "no program to run");
    expect_rc(gradprof("compare --"), 2);
    one_line_error();
    expect_rc(gradprof("compare --format xml -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "unknown --format 'xml'");
    expect_rc(gradprof("compare --top many -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "--top: ");
    contains(S.err, "'many'");
    expect_rc(gradprof("compare --stack-depth 999 -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "--stack-depth: ");
    expect_rc(gradprof("compare --name 'x.%%p' -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "--name: 'x.%p'");
    expect_rc(gradprof("compare --rules /nonexistent/rules -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "--rules: cannot read '/nonexistent/rules'");
    expect_rc(gradprof("compare --bogus -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "unknown option '--bogus'");
    expect_rc(gradprof("compare -n sub/x -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "--name: directory");
    /* nothing ran for any of these */
    assert_false(exists("x.grad.stdout"));

    /* An existing file: compare stops before running anything. */
    expect_rc(sh("touch e.nograd.stderr"), 0);
    expect_rc(gradprof("compare -n e -- /bin/true"), 2);
    one_line_error();
    contains(S.err, "'e.nograd.stderr' exists");
    assert_false(exists("e.grad.gptrace"));
    assert_false(exists("e.grad.stdout"));
}

static void test_not_found(void **state)
{
    expect_rc(gradprof("compare -n nf -- /nonexistent/program"), 127);
    contains(S.err, "/nonexistent/program: no such file");
    assert_false(exists("nf.nograd.stdout")); /* B was not tried */
    expect_rc(gradprof("compare -n nx -- /"), 126);
}

/* ---- the same computation twice -------------------------------------------------------------- */

static void test_same_output(void **state)
{
    expect_rc(gradprof("compare -n c -- " PROG), 0);
    all_files("c");
    /* the diff on stdout names both traces; stderr says where everything is */
    contains(S.out, "c.grad.gptrace");
    contains(S.out, "c.nograd.gptrace");
    contains(S.err, "A (GRADPROF_GRAD_DEFAULT=on) exited with status 0; trace c.grad.gptrace; "
                    "stdout c.grad.stdout, stderr c.grad.stderr");
    contains(S.err, "B (GRADPROF_GRAD_DEFAULT=off) exited with status 0; trace c.nograd.gptrace; "
                    "stdout c.nograd.stdout, stderr c.nograd.stderr");
    lacks(S.err, "diverged");
    file_contains("c.grad.stdout", "checksum ");
    file_contains("c.nograd.stdout", "checksum ");
    grad_only_in_a("c");

    /* JSON into a file; the recorder options reach the recorder */
    expect_rc(gradprof("compare -n j --no-stacks --flush-ms 5 --format json -o diff.json --top 2 "
                       "-- " PROG),
              0);
    all_files("j");
    assert_string_equal(S.out, "");
    contains(S.err, "diff written to diff.json");
    file_contains("diff.json", "\"schema\"");
    file_contains("diff.json", "j.nograd.gptrace");
    if (e2e_have_python())
        expect_rc(sh(PYTHON " -c \"import json,sys; json.load(open(sys.argv[1]))\" diff.json"), 0);
    grad_only_in_a("j");

    /* the default base name: gradprof.PROGRAM.PID in the current directory */
    expect_rc(gradprof("compare -- " PROG), 0);
    contains(S.err, "trace gradprof.compare_prog.");
    contains(S.err, ".nograd.gptrace; stdout gradprof.compare_prog.");

    /* Python's hash seed is the same in both runs: 0, or the environment's */
    expect_rc(gradprof("compare -n h -- /bin/sh -c 'echo seed=$PYTHONHASHSEED'"), 0);
    file_contains("h.grad.stdout", "seed=0\n");
    file_contains("h.nograd.stdout", "seed=0\n");
    expect_rc(sh("PYTHONHASHSEED=7 " ASAN_PRELOAD_OK "'" GRADPROF_BIN
                 "' compare -n h7 -- /bin/sh -c 'echo seed=$PYTHONHASHSEED'"),
              0);
    file_contains("h7.grad.stdout", "seed=7\n");
    file_contains("h7.nograd.stdout", "seed=7\n");
}

/* A program that starts other processes: the diff takes the main process (the one that ran the
 * model), not the worker with the larger trace; a script that execs the program, its last
 * program (after the exec). */
static void test_processes(void **state)
{
    expect_rc(gradprof("compare -n w -- " PROG " --worker"), 0);
    contains(S.err, "A wrote 2 traces, one per process and program (w.grad.gptrace, "
                    "w.grad.gptrace.");
    contains(S.err, "the diff takes the main process's, w.grad.gptrace\n");
    contains(S.out, "  A    w.grad.gptrace ");
    contains(S.out, "  B    w.nograd.gptrace ");
    contains(S.out, "KiB held by graph construction");
    expect_rc(gradprof("compare -n x -- /bin/sh -c 'exec \"$0\"' " PROG), 0);
    contains(S.err, "the diff takes the main process's last program (after exec), "
                    "x.grad.gptrace.1\n");
    contains(S.out, "  A    x.grad.gptrace.1 ");
    contains(S.out, "KiB held by graph construction");
}

#ifdef GRADPROF_MLP_INFER
/* mlp_infer --grad leaves the mode alone ("the default"), so B runs it with grad off. It prints
 * timings and memory figures, which differ: compare refuses, and diffs with --ignore-stdout. */
static void test_mlp_infer(void **state)
{
#define MLP "'" GRADPROF_MLP_INFER "' --grad --iters 2 --layers 3 --width 64 --batch 4"
    expect_rc(gradprof("compare -n m -- " MLP), 3);
    contains(S.err, "the runs diverged: their standard output differs from line");
    assert_string_equal(S.out, "");
    expect_rc(gradprof("compare -n m2 --ignore-stdout -- " MLP), 0);
    all_files("m2");
    contains(S.out, "m2.grad.gptrace");
    file_contains("m2.grad.stdout", "mlp_infer: 3 layers");
    grad_only_in_a("m2");
#undef MLP
}
#endif

/* ---- divergence ------------------------------------------------------------------------------ */

static void test_diverged_stdout(void **state)
{
    expect_rc(gradprof("compare -n d -- " PROG " --print-grad"), 3);
    all_files("d");
    assert_string_equal(S.out, ""); /* no diff */
    contains(S.err, "the runs diverged: their standard output differs from line 2 on");
    contains(S.err, "A (d.grad.stdout): 'grad enabled: main yes, thread yes'");
    contains(S.err, "B (d.nograd.stdout): 'grad enabled: main no, thread no'");
    contains(S.err, "--ignore-stdout"); /* which test_mlp_infer uses */

    /* one output longer than the other */
    expect_rc(gradprof("compare -n l -- /bin/sh -c "
                       "'echo same; test \"$GRADPROF_GRAD_DEFAULT\" = off || echo more'"),
              3);
    contains(S.err, "differs from line 2 on");
    contains(S.err, "A (l.grad.stdout): 'more'");
    contains(S.err, "B (l.nograd.stdout): (end of output)");
}

static void test_diverged_status(void **state)
{
    expect_rc(gradprof("compare -n s -- " PROG " --fail-without-grad"), 3);
    all_files("s");
    assert_string_equal(S.out, "");
    contains(S.err, "the runs diverged: A exited with status 0, B exited with status 4");
    contains(S.err, "B's stderr ends with: 'compare_prog: grad is off, giving up'");
    contains(S.err, "'gradprof diff s.grad.gptrace s.nograd.gptrace' compares them anyway");
    file_contains("s.nograd.stderr", "grad is off");
}

/* Both runs fail the same way: no diff, the program's status. */
static void test_same_failure(void **state)
{
    expect_rc(gradprof("compare -n f -- " PROG " --exit 5"), 5);
    all_files("f");
    assert_string_equal(S.out, "");
    contains(S.err, "exited with status 5 in both runs");
    expect_rc(gradprof("compare -n k -- /bin/sh -c 'kill -TERM $$'"), 143);
    contains(S.err, "was killed by signal 15 (Terminated) in both runs");
}

/* ^C reaching gradprof during A stops it there: B is not run. */
static void test_interrupted(void **state)
{
    expect_rc(gradprof("compare -n i -- /bin/sh -c 'kill -INT $PPID; sleep 1'"), 130);
    contains(S.err, "interrupted by signal 2 (Interrupt) during A; B not run");
    assert_true(exists("i.grad.stdout"));
    assert_false(exists("i.nograd.stdout"));
}

/* ---- Python ---------------------------------------------------------------------------------- */

/* The startup hook chains to the user's own sitecustomize, and a program that never imports
 * torch does not get it imported. */
static void test_python_chain(void **state)
{
    if (!e2e_have_python()) {
        print_message("SKIPPED: " PYTHON " is not installed\n");
        skip();
    }
    expect_rc(sh("mkdir -p user && printf '%%s\\n' 'import sys' "
                 "'print(\"user sitecustomize ran\")' 'MARK = 42' >user/sitecustomize.py && "
                 "printf '%%s\\n' 'import sys, sitecustomize' "
                 "'print(\"mark\", sitecustomize.MARK, \"torch\", \"torch\" in sys.modules)' "
                 ">p.py"),
              0);
    /* the user's PYTHONPATH comes after the hook's folder */
    expect_rc(sh("PYTHONPATH=user " ASAN_PRELOAD_OK "'" GRADPROF_BIN
                 "' compare -n py --no-stacks -- " PYTHON " p.py"),
              0);
    all_files("py");
    file_contains("py.grad.stdout", "user sitecustomize ran\nmark 42 torch False\n");
    file_contains("py.nograd.stdout", "user sitecustomize ran\nmark 42 torch False\n");
}

static void test_python_torch(void **state)
{
    if (!e2e_have_python() || system(PYTHON " -c 'import torch' >/dev/null 2>&1") != 0) {
        print_message("SKIPPED: " PYTHON " cannot import torch\n");
        skip();
    }
    expect_rc(sh("printf '%%s\\n' 'import threading' 'import torch' 'r = []' "
                 "'t = threading.Thread(target=lambda: r.append(torch.is_grad_enabled()))' "
                 "'t.start()' 't.join()' 'with torch.enable_grad():' "
                 "'    e = torch.is_grad_enabled()' "
                 "'print(\"grad\", torch.is_grad_enabled(), \"thread\", r[0], \"enable_grad\", e)' "
                 ">t.py"),
              0);
    expect_rc(gradprof("compare -n t --no-stacks -- " PYTHON " t.py"), 3);
    all_files("t");
    contains(S.err, "A (t.grad.stdout): 'grad True thread True enable_grad True'");
    contains(S.err, "B (t.nograd.stdout): 'grad False thread False enable_grad True'");
    /* gradprof run passes GRADPROF_GRAD_DEFAULT on to the hook as well */
    expect_rc(sh("GRADPROF_GRAD_DEFAULT=off " ASAN_PRELOAD_OK "'" GRADPROF_BIN
                 "' run --no-stacks -o r.gptrace -- " PYTHON " t.py"),
              0);
    contains(S.out, "grad False thread False enable_grad True");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_help, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_processes, setup, teardown),
#ifdef GRADPROF_MLP_INFER
        cmocka_unit_test_setup_teardown(test_mlp_infer, setup, teardown),
#endif
        cmocka_unit_test_setup_teardown(test_diverged_stdout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_diverged_status, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_interrupted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_python_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_python_torch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
