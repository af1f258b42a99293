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
    "input is /dev/null in both runs. A process the program forks or execs writes a trace of its\n"
    "own (BASE.grad.gptrace.N); the diff then takes each run's largest trace.\n"
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

/* The files of one run. */
typedef struct run_files {
    const char *label; /* "A" or "B" */
    const char *grad;  /* GRADPROF_GRAD_DEFAULT */
    char trace[4096], out[4096], err[4096];
} run_files;

static int make_names(run_files *f, const char *base, const char *suffix)
{
    if ((size_t)snprintf(f->trace, sizeof f->trace, "%s.%s.gptrace", base, suffix) >=
            sizeof f->trace ||
        (size_t)snprintf(f->out, sizeof f->out, "%s.%s.stdout", base, suffix) >= sizeof f->out ||
        (size_t)snprintf(f->err, sizeof f->err, "%s.%s.stderr", base, suffix) >= sizeof f->err)
        return gp_cli_error(CMD, "--name: path too long: %s", base);
    const char *paths[] = {f->trace, f->out, f->err};
    for (size_t i = 0; i < 3; i++) {
        struct stat st;
        if (lstat(paths[i], &st) == 0)
            return gp_cli_error(CMD, "'%s' exists; give another --name or remove it", paths[i]);
    }
    return 0;
}

/* ---- reading the captured output ------------------------------------------------------------- */

/* Prints a line of the program's output on stderr: at most 160 bytes, control characters as
 * '?', "..." when cut; "(end of output)" for NULL. */
static void show_line(const char *line, size_t len)
{
    if (!line) {
        fputs("(end of output)", stderr);
        return;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    size_t n = len < 160 ? len : 160;
    fputc('\'', stderr);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        fputc(ch < 0x20 && ch != '\t' ? '?' : ch, stderr);
    }
    fputc('\'', stderr);
    if (n < len)
        fputs("...", stderr);
}

/* Compares two files line by line. Returns 0 if they are the same, 1 if they differ (with the
 * 1-based number of the first differing line in *line_no and both lines, NULL for a file that
 * ended, in *la and *lb with their lengths; free them), -1 if one cannot be read. */
static int first_difference(const char *pa, const char *pb, size_t *line_no, char **la, size_t *na,
                            char **lb, size_t *nb)
{
    FILE *a = fopen(pa, "rb"), *b = fopen(pb, "rb");
    int rc = -1;
    *la = *lb = NULL;
    *na = *nb = 0;
    if (!a || !b)
        goto done;
    size_t ca = 0, cb = 0;
    for (size_t line = 1;; line++) {
        ssize_t ra = getline(la, &ca, a), rb = getline(lb, &cb, b);
        if (ra < 0 && rb < 0) {
            rc = ferror(a) || ferror(b) ? -1 : 0;
            break;
        }
        if (ra != rb || memcmp(*la, *lb, (size_t)ra) != 0) {
            *line_no = line;
            if (ra < 0) {
                free(*la);
                *la = NULL;
            }
            if (rb < 0) {
                free(*lb);
                *lb = NULL;
            }
            *na = ra < 0 ? 0 : (size_t)ra;
            *nb = rb < 0 ? 0 : (size_t)rb;
            rc = 1;
            break;
        }
    }
done:
    if (rc != 1) {
        free(*la);
        free(*lb);
        *la = *lb = NULL;
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    return rc;
}

/* Prints the last non-empty line of the file at path (from its last 4 KiB), if it has one, as
 * "gradprof compare:   LABEL's stderr ends with: '...'". */
static void show_last_line(const char *label, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char buf[4096];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    long from = size > (long)sizeof buf ? size - (long)sizeof buf : 0;
    size_t n = size >= 0 && fseek(f, from, SEEK_SET) == 0 ? fread(buf, 1, sizeof buf, f) : 0;
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (n == 0)
        return;
    size_t start = n;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    fprintf(stderr, "gradprof %s:   %s's stderr ends with: ", CMD, label);
    show_line(buf + start, n - start);
    fputc('\n', stderr);
}

/* ---- the command ----------------------------------------------------------------------------- */

/* The trace of a run the diff reads: its only one, or its largest. */
static const char *pick_trace(const run_files *f, const gp_run_result *r)
{
    const char *best = r->traces[0];
    off_t best_size = -1;
    for (size_t i = 0; i < r->n_traces; i++) {
        struct stat st;
        if (stat(r->traces[i], &st) == 0 && st.st_size > best_size) {
            best = r->traces[i];
            best_size = st.st_size;
        }
    }
    if (r->n_traces > 1)
        gp_cli_warn(CMD,
                    "%s wrote %zu traces (forked or exec'd processes: %s, ...); the diff "
                    "takes the largest, %s",
                    f->label, r->n_traces, r->traces[0], best);
    return best;
}

/* Runs one of the two runs and says how it ended and where its files are. */
static int run_one(const gp_run_setup *setup, run_files *f, char **prog, gp_run_result *r)
{
    gp_run_spec spec = {.templ = f->trace,
                        .templ_option = "--name",
                        .grad_default = f->grad,
                        .stdout_path = f->out,
                        .stderr_path = f->err,
                        .stdin_null = true};
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

int gp_cmd_compare(int argc, char **argv)
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
    const char *name = NULL, *output = NULL, *format = NULL, *top = NULL, *rules = NULL;
    bool ignore_stdout = false;
    gp_run_config cfg = {.depth = 32};
    char err[512];
    uint64_t top_n;
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:n:o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!*optarg)
                return gp_cli_error(CMD, "--name: empty name");
            if (strstr(optarg, "%p"))
                return gp_cli_error(CMD,
                                    "--name: '%s': %%p is not allowed (the files of a run "
                                    "share one name)",
                                    optarg);
            name = optarg;
            break;
        case 'o':
            if (!*optarg)
                return gp_cli_error(CMD, "-o: empty file name");
            output = optarg;
            break;
        case OPT_FORMAT:
            if (strcmp(optarg, "text") != 0 && strcmp(optarg, "json") != 0 &&
                strcmp(optarg, "html") != 0)
                return gp_cli_error(CMD, "unknown --format '%s' (text, json or html)", optarg);
            format = optarg;
            break;
        case OPT_TOP:
            if (gp_parse_uint(optarg, 0, 1000000000, &top_n, err, sizeof err))
                return gp_cli_error(CMD, "--top: %s", err);
            top = optarg;
            break;
        case OPT_RULES:
            if (strcmp(optarg, "none") != 0 && access(optarg, R_OK) != 0)
                return gp_cli_error(CMD, "--rules: cannot read '%s': %s", optarg, strerror(errno));
            rules = optarg;
            break;
        case OPT_IGNORE_STDOUT:
            ignore_stdout = true;
            break;
        case 'h':
            fputs(usage_head, stdout);
            fputs(gp_run_options_help, stdout);
            fputs(usage_tail, stdout);
            return GP_EXIT_OK;
        default:
            if (c >= GP_RUN_OPT_STACK_DEPTH && c < GP_RUN_OPT_END) {
                if ((rc = gp_run_option(CMD, c, optarg, &cfg)))
                    return rc;
                break;
            }
            return gp_cli_bad_option(CMD, c, argv);
        }
    }
    if (optind >= argc)
        return gp_cli_error(CMD, "no program to run (usage: gradprof compare [options] -- "
                                 "PROGRAM [ARGS...])");
    char **prog = argv + optind;

    char base[4096];
    if (name) {
        snprintf(base, sizeof base, "%s", name);
    } else {
        const char *slash = strrchr(prog[0], '/');
        snprintf(base, sizeof base, "gradprof.%s.%d", slash ? slash + 1 : prog[0], (int)getpid());
    }
    run_files fa = {.label = "A", .grad = "on"}, fb = {.label = "B", .grad = "off"};
    if ((rc = make_names(&fa, base, "grad")) || (rc = make_names(&fb, base, "nograd")))
        return rc;
    gp_run_setup setup;
    if ((rc = gp_run_setup_init(CMD, &cfg, &setup)))
        return rc;

    gp_run_result ra = {0}, rb = {0};
    char *la = NULL, *lb = NULL;
    if ((rc = run_one(&setup, &fa, prog, &ra)))
        goto done;
    if (ra.interrupted) { /* ^C: the user wants to stop, not a second run */
        gp_cli_error(CMD, "interrupted by signal %d (%s) during A; B not run", ra.interrupted,
                     strsignal(ra.interrupted));
        rc = 128 + ra.interrupted;
        goto done;
    }
    if ((rc = run_one(&setup, &fb, prog, &rb)))
        goto done;

    /* Divergence: the two runs did not do the same thing. */
    char how_a[128], how_b[128];
    gp_run_describe_status(ra.status, how_a, sizeof how_a);
    gp_run_describe_status(rb.status, how_b, sizeof how_b);
    if (ra.status != rb.status) {
        gp_cli_error(CMD, "the runs diverged: A %s, B %s", how_a, how_b);
        if (ra.code)
            show_last_line("A", fa.err);
        if (rb.code)
            show_last_line("B", fb.err);
        gp_cli_error(CMD,
                     "no diff (the traces are kept: 'gradprof diff %s %s' compares them "
                     "anyway)",
                     fa.trace, fb.trace);
        rc = GP_EXIT_DIVERGED;
        goto done;
    }
    if (ra.code != 0) {
        gp_cli_error(CMD, "%s %s in both runs", prog[0], how_a);
        show_last_line("A", fa.err);
        gp_cli_error(CMD,
                     "no diff (the traces are kept: 'gradprof diff %s %s' compares them "
                     "anyway)",
                     fa.trace, fb.trace);
        rc = ra.code;
        goto done;
    }
    if (!ignore_stdout) {
        size_t line = 0, na, nb;
        int d = first_difference(fa.out, fb.out, &line, &la, &na, &lb, &nb);
        if (d < 0) {
            rc =
                gp_cli_error(CMD, "cannot read back %s or %s: %s", fa.out, fb.out, strerror(errno));
            goto done;
        }
        if (d > 0) {
            gp_cli_error(CMD, "the runs diverged: their standard output differs from line %zu on",
                         line);
            fprintf(stderr, "gradprof %s:   A (%s): ", CMD, fa.out);
            show_line(la, na);
            fprintf(stderr, "\ngradprof %s:   B (%s): ", CMD, fb.out);
            show_line(lb, nb);
            fputc('\n', stderr);
            gp_cli_error(CMD, "no diff: the traces may not record the same computation "
                              "(--ignore-stdout diffs them anyway)");
            rc = GP_EXIT_DIVERGED;
            goto done;
        }
    }
    if (ra.n_traces == 0 || rb.n_traces == 0) {
        rc = gp_cli_error(CMD,
                          "no trace was written for %s (a static or setuid program, or one that "
                          "clears LD_PRELOAD, is not profiled; see %s)",
                          ra.n_traces == 0 ? "A" : "B", ra.n_traces == 0 ? fa.err : fb.err);
        goto done;
    }

    /* The diff, as `gradprof diff` would print it. */
    char *dargv[16];
    int n = 0;
    dargv[n++] = "diff";
    dargv[n++] = "--require-aligned";
    if (format) {
        dargv[n++] = "--format";
        dargv[n++] = (char *)format;
    }
    if (output) {
        dargv[n++] = "-o";
        dargv[n++] = (char *)output;
    }
    if (top) {
        dargv[n++] = "--top";
        dargv[n++] = (char *)top;
    }
    if (rules) {
        dargv[n++] = "--rules";
        dargv[n++] = (char *)rules;
    }
    dargv[n++] = (char *)pick_trace(&fa, &ra);
    dargv[n++] = (char *)pick_trace(&fb, &rb);
    dargv[n] = NULL;
    fflush(stderr);
    rc = gp_cmd_diff(n, dargv);
    if (rc == 0 && output)
        fprintf(stderr, "gradprof %s: diff written to %s\n", CMD, output);

done:
    free(la);
    free(lb);
    gp_run_result_free(&ra);
    gp_run_result_free(&rb);
    return rc;
}
