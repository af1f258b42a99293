/*
 * gradprof compare [options] -- PROGRAM [ARGS...]
 *
 * Runs PROGRAM twice under the recorder (run.h): A with GRADPROF_GRAD_DEFAULT=on, as it is, and
 * B with GRADPROF_GRAD_DEFAULT=off, where every thread starts with grad off (the tensor library
 * reads it, and gradprof's Python startup hook makes PyTorch do the same). Both runs' stdout and
 * stderr go to files beside the traces. When the runs behaved the same (same exit status, same
 * stdout) it prints `gradprof diff --require-aligned A B` through gp_cmd_diff; otherwise it says
 * where they diverged and exits GP_EXIT_DIVERGED without a diff.
 */
#define _GNU_SOURCE /* getline, strsignal */
#include "cli.h"
#include "commands.h"
#include "compare_runs.h"
#include "output.h"
#include "run.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CMD "compare"

static const char usage_head[] =
    "usage: gradprof compare [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM twice under the recorder, as 'gradprof run' does: A as it is, and B with\n"
    "GRADPROF_GRAD_DEFAULT=off, so that every thread starts with grad off -- in a program of the\n"
    "gradprof tensor library, and in a PyTorch program through gradprof's Python startup hook\n"
    "(the thread that imports torch and the threads started after). The scopes the program\n"
    "enters itself (no_grad, enable_grad, inference_mode) act the same in both runs. Then, if\n"
    "the runs behaved the same, it prints 'gradprof diff --require-aligned A B': the memory\n"
    "that graph construction holds.\n"
    "\n"
    "Files, all kept (BASE is --name, default gradprof.PROGRAM.PID, PID = gradprof's own):\n"
    "  BASE.grad.gptrace    BASE.grad.stdout    BASE.grad.stderr      run A\n"
    "  BASE.nograd.gptrace  BASE.nograd.stdout  BASE.nograd.stderr    run B\n"
    "Existing files are never overwritten: compare stops before running anything. Standard\n"
    "input is /dev/null in both runs, and PYTHONHASHSEED=0 unless the environment sets it (a\n"
    "Python program's dicts and sets then take the same sizes in both). A process the program\n"
    "forks or execs writes a trace of its own (BASE.grad.gptrace.N); the diff then takes each\n"
    "run's main process (what it exec'd last), not a worker it started.\n"
    "\n"
    "options:\n"
    "  -n, --name BASE          the files' base name, a path (no %p)\n"
    "      --format FMT         the diff: text (default), json or html\n"
    "  -o, --output OUT         write the diff to OUT instead of standard output\n"
    "      --top N              rows per table of the diff (default 10, 0 = all)\n"
    "      --rules FILE|none    frame rules for the diff (see 'gradprof diff --help')\n"
    "      --ignore-stdout      diff even when the runs' standard output differs (for programs\n"
    "                           that print timings or memory figures)\n";
/* ... gp_run_options_help ... */
static const char usage_tail[] =
    "  -h, --help               this help\n"
    "\n"
    "Divergence: when the runs' exit statuses differ, or their standard output differs (the\n"
    "output depends on the grad mode, or on something else that changes from run to run: time,\n"
    "random numbers, addresses), the traces may not record the same computation. compare then\n"
    "says which run did what, or the first line that differs, and exits 3 without a diff.\n"
    "Standard error is not compared.\n"
    "\n"
    "Exit status: 0 the diff was printed; 2 bad usage, a missing library, an existing file, no\n"
    "trace written, or a trace that cannot be read; 3 the runs diverged, or do not align (see\n"
    "'gradprof diff --help'); when the program failed the same way in both runs, its status\n"
    "(128+N for signal N) without a diff; 127 if PROGRAM was not found, 126 if it could not be\n"
    "executed; 128+N when gradprof got signal N (^C) during A, which stops it before B.\n";

enum { OPT_FORMAT = GP_RUN_OPT_END, OPT_TOP, OPT_RULES, OPT_IGNORE_STDOUT };

/* ---- the command ----------------------------------------------------------------------------- */

/* The "pid" metadata of a trace (read as far as its first records), or -1. */
static long trace_pid(const char *path)
{
    gp_trace *t = NULL;
    char err[256];
    gp_event ev;
    long pid = -1;
    if (gp_trace_open(path, &t, err, sizeof err) == 0) {
        const char *v = NULL;
        while (!(v = gp_trace_meta(t, "pid")) && gp_trace_next(t, &ev, err, sizeof err) == 1)
            ;
        char *end;
        if (v && *v && (pid = strtol(v, &end, 10), *end))
            pid = -1;
    }
    gp_trace_close(t);
    return pid;
}

/* The trace of a run the diff reads: the main process's, its last image (what it exec'd last:
 * a shell script that execs python ends there), not a worker it started. */
static const char *pick_trace(const gp_compare_files *f, const gp_run_result *r)
{
    const char *main = r->traces[0]; /* the main process's first image */
    if (r->n_traces == 1)
        return main;
    long pid = trace_pid(main);
    for (size_t i = 1; pid > 0 && i < r->n_traces; i++) /* in version order: images in turn */
        if (trace_pid(r->traces[i]) == pid)
            main = r->traces[i];
    gp_cli_warn(CMD,
                "%s wrote %zu traces, one per process and program (%s, %s%s); the diff takes "
                "the main process's%s, %s",
                f->label, r->n_traces, r->traces[0], r->traces[1], r->n_traces > 2 ? ", ..." : "",
                main != r->traces[0] ? " last program (after exec)" : "", main);
    return main;
}

/* Runs one of the two runs and says how it ended and where its files are. */
static int run_one(const gp_run_setup *setup, gp_compare_files *f, char **prog, gp_run_result *r)
{
    gp_run_spec spec = {.templ = f->trace,
                        .templ_option = "--name",
                        .grad_default = f->grad,
                        .stdout_path = f->out,
                        .stderr_path = f->err,
                        .stdin_null = true,
                        .same_hash_seed = true};
    int rc = gp_run_program(CMD, setup, &spec, prog, r);
    if (rc)
        return rc;
    char how[128];
    gp_run_describe_status(r->status, how, sizeof how);
    fprintf(stderr,
            "gradprof %s: %s (GRADPROF_GRAD_DEFAULT=%s) %s; trace %s; stdout %s, stderr %s\n", CMD,
            f->label, f->grad, how, r->n_traces ? r->traces[0] : "(none)", f->out, f->err);
    return 0;
}

/* The command line. */
typedef struct compare_args {
    const char *name, *output, *format, *top, *rules;
    bool ignore_stdout, help;
    gp_run_config cfg;
    char **prog;
} compare_args;

/* One option with its value into a; 0 or an exit code. */
static int take_option(compare_args *a, int c, const char *v, char **argv)
{
    char err[512];
    uint64_t top_n;
    switch (c) {
    case 'n':
        if (!*v)
            return gp_cli_error(CMD, "--name: empty name");
        if (strstr(v, "%p"))
            return gp_cli_error(CMD,
                                "--name: '%s': %%p is not allowed (the files of a run share one "
                                "name)",
                                v);
        a->name = v;
        return 0;
    case 'o':
        if (!*v)
            return gp_cli_error(CMD, "-o: empty file name");
        a->output = v;
        return 0;
    case OPT_FORMAT:
        if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0 && strcmp(v, "html") != 0)
            return gp_cli_error(CMD, "unknown --format '%s' (text, json or html)", v);
        a->format = v;
        return 0;
    case OPT_TOP:
        if (gp_parse_uint(v, 0, 1000000000, &top_n, err, sizeof err))
            return gp_cli_error(CMD, "--top: %s", err);
        a->top = v;
        return 0;
    case OPT_RULES:
        if (strcmp(v, "none") != 0 && access(v, R_OK) != 0)
            return gp_cli_error(CMD, "--rules: cannot read '%s': %s", v, strerror(errno));
        a->rules = v;
        return 0;
    case OPT_IGNORE_STDOUT:
        a->ignore_stdout = true;
        return 0;
    case 'h':
        a->help = true;
        return 0;
    default:
        if (c >= GP_RUN_OPT_STACK_DEPTH && c < GP_RUN_OPT_END)
            return gp_run_option(CMD, c, v, &a->cfg);
        return gp_cli_bad_option(CMD, c, argv);
    }
}

static int parse_args(int argc, char **argv, compare_args *a)
{
    static const struct option longs[] = {
        {"name", required_argument, NULL, 'n'},
        {"output", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"top", required_argument, NULL, OPT_TOP},
        {"rules", required_argument, NULL, OPT_RULES},
        {"ignore-stdout", no_argument, NULL, OPT_IGNORE_STDOUT},
        GP_RUN_LONG_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:n:o:h", longs, NULL)) != -1)
        if ((rc = take_option(a, c, optarg, argv)) || a->help)
            return rc;
    if (optind >= argc)
        return gp_cli_error(CMD, "no program to run (usage: gradprof compare [options] -- "
                                 "PROGRAM [ARGS...])");
    a->prog = argv + optind;
    return 0;
}

/* The diff, as `gradprof diff --require-aligned` would print it. */
static int print_diff(const compare_args *a, const gp_compare_files *fa, const gp_compare_files *fb,
                      const gp_run_result *ra, const gp_run_result *rb)
{
    char *dargv[16];
    int n = 0;
    dargv[n++] = "diff";
    dargv[n++] = "--require-aligned";
    const char *const pairs[][2] = {
        {"--format", a->format}, {"-o", a->output}, {"--top", a->top}, {"--rules", a->rules}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (pairs[i][1]) {
            dargv[n++] = (char *)pairs[i][0];
            dargv[n++] = (char *)pairs[i][1];
        }
    dargv[n++] = (char *)pick_trace(fa, ra);
    dargv[n++] = (char *)pick_trace(fb, rb);
    dargv[n] = NULL;
    fflush(stderr);
    int rc = gp_cmd_diff(n, dargv);
    if (rc == 0 && a->output)
        fprintf(stderr, "gradprof %s: diff written to %s\n", CMD, a->output);
    return rc;
}

int gp_cmd_compare(int argc, char **argv)
{
    compare_args a = {.cfg = GP_RUN_CONFIG_INIT};
    int rc = parse_args(argc, argv, &a);
    if (rc || a.help) {
        if (a.help) {
            fputs(usage_head, stdout);
            fputs(gp_run_options_help, stdout);
            fputs(usage_tail, stdout);
        }
        return rc;
    }
    if (!gp_run_enabled(CMD))
        return gp_cli_error(CMD, "GRADPROF_ENABLE=0 in the environment turns recording off, and "
                                 "compare needs both runs recorded; unset it");
    char base[PATH_MAX];
    const char *slash = strrchr(a.prog[0], '/');
    int n_base = a.name ? snprintf(base, sizeof base, "%s", a.name)
                        : snprintf(base, sizeof base, "gradprof.%s.%d",
                                   slash ? slash + 1 : a.prog[0], (int)getpid());
    if (n_base < 0 || (size_t)n_base >= sizeof base)
        return gp_cli_error(CMD,
                            "--name: the base name is %d bytes, over the %d a path may have: file "
                            "name too long (ENAMETOOLONG)",
                            n_base, PATH_MAX - 1);
    gp_compare_files fa = {.label = "A", .grad = "on"}, fb = {.label = "B", .grad = "off"};
    if ((rc = gp_compare_names(CMD, &fa, base, "grad")) ||
        (rc = gp_compare_names(CMD, &fb, base, "nograd")))
        return rc;
    gp_run_setup setup;
    if ((rc = gp_run_setup_init(CMD, &a.cfg, &setup)))
        return rc;
    gp_run_result ra = {0}, rb = {0};
    if ((rc = run_one(&setup, &fa, a.prog, &ra)))
        goto done;
    if (ra.interrupted) { /* ^C: the user wants to stop, not a second run */
        gp_cli_error(CMD, "interrupted by signal %d (%s) during A; B not run", ra.interrupted,
                     strsignal(ra.interrupted));
        rc = 128 + ra.interrupted;
        goto done;
    }
    if ((rc = run_one(&setup, &fb, a.prog, &rb)) ||
        (rc = gp_compare_diverged(CMD, a.prog[0], a.ignore_stdout, &fa, &fb, &ra, &rb)))
        goto done;
    if (ra.n_traces == 0 || rb.n_traces == 0) {
        rc = gp_cli_error(CMD,
                          "no trace was written for %s (a static or setuid program, or one that "
                          "clears LD_PRELOAD, is not profiled; see %s)",
                          ra.n_traces == 0 ? "A" : "B", ra.n_traces == 0 ? fa.err : fb.err);
        goto done;
    }
    rc = print_diff(&a, &fa, &fb, &ra, &rb);
done:
    gp_run_result_free(&ra);
    gp_run_result_free(&rb);
    return rc;
}
