/*
 * gradprof diff A B [--format text|json|html] [-o OUT] [--top N]
 * gradprof diff --rank R A... -- B...
 *
 * With --rank, each side may be a job's traces (files and folders, job.h): the trace of rank R is
 * taken from each. Loads both traces (a damaged one with a warning: the diff covers what was
 * recovered), computes the diff (diff.h) and renders it. Exit codes: 0 done, 2 bad command line or
 * a trace that cannot be read at all (the message names the file).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "diff.h"
#include "job.h"
#include "output.h"
#include "render.h"

static const char usage[] =
    "usage: gradprof diff A B [--format text|json|html] [-o OUT] [--top N] [--require-aligned]\n"
    "       gradprof diff --rank R A... -- B... [options]\n"
    "\n"
    "Compares two traces of the same program, A usually with grad on and B with grad off. The\n"
    "runs are aligned buffer by buffer (twins: same thread, size, role at birth, innermost call\n"
    "frames and occurrence index; never addresses), and A's peak is compared with the instant\n"
    "of B where B made the twins of A's last allocations before its peak:\n"
    "  held by graph construction  live at A's peak, twin already freed by B then, or no twin\n"
    "  b_more                      live in B then, twin not live at A's peak\n"
    "  unaligned                   live at A's peak, twin not made by B yet\n"
    "  A's peak - B then = held - b_more + unaligned, in every table (category, op, module,\n"
    "  call site, layer); any remainder is printed as a row of its own.\n"
    "  saved (inferred)            live at A's peak and kept for backward, found without tags:\n"
    "                              tagged saved, no twin, or freed sooner by B\n"
    "Each run's own peak and the difference of the two peaks are shown as well.\n"
    "\n"
    "options:\n"
    "  --format FMT   text (default), json (schema gradprof-diff/2) or html\n"
    "  -o, --output OUT  write to OUT instead of standard output (written whole or not at\n"
    "                 all: never onto A or B, never through a symbolic link)\n"
    "  --top N        rows per module/op/call-site table in text and html (default 10, 0 = all)\n"
    "  --rules FILE|none  frame rules for allocations nothing tagged (default: the built-in\n"
    "                     PyTorch rules, tools/rules/pytorch.rules)\n"
    "  --require-aligned  exit 3 without a diff when the runs do not align (less than half of\n"
    "                     the bytes live at A's peak, graph memory aside, have a twin in B)\n"
    "  --rank R       a job's process of rank R (the RANK its launcher set, recorded in each\n"
    "                 trace): each side is then traces and folders of traces (A... -- B..., or\n"
    "                 two folders), and the trace of rank R is taken from each\n"
    "  -h, --help     this help\n"
    "\n"
    "exit status: 0 done, 2 bad usage or a trace that cannot be read, 3 the runs do not align\n"
    "(with --require-aligned; otherwise a warning)\n";

typedef enum { FMT_TEXT, FMT_JSON, FMT_HTML } diff_format;

static int diff_files(const char *cmd, const char *a_path, const char *b_path, const char *rules,
                      bool require_aligned, diff_format format, const char *out_path,
                      const gp_render_options *ro);

int gp_cmd_diff(int argc, char **argv)
{
    static const struct option longs[] = {{"format", required_argument, NULL, 'f'},
                                          {"output", required_argument, NULL, 'o'},
                                          {"top", required_argument, NULL, 't'},
                                          {"rules", required_argument, NULL, 'R'},
                                          {"require-aligned", no_argument, NULL, 'A'},
                                          {"rank", required_argument, NULL, 'K'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *cmd = "diff", *out_path = NULL, *rules = NULL, *rank = NULL;
    bool require_aligned = false;
    diff_format format = FMT_TEXT;
    gp_render_options ro;
    gp_render_options_default(&ro);
    char err[512];

    /* A... -- B...: the options are before "--" (getopt stops there; it may reorder only what
     * comes before it). */
    int split = 0;
    for (int i = 1; i < argc && !split; i++)
        if (strcmp(argv[i], "--") == 0)
            split = i;
    int n_opts = split ? split : argc;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(n_opts, argv, ":o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (strcmp(optarg, "text") == 0)
                format = FMT_TEXT;
            else if (strcmp(optarg, "json") == 0)
                format = FMT_JSON;
            else if (strcmp(optarg, "html") == 0)
                format = FMT_HTML;
            else
                return gp_cli_error(cmd, "unknown --format '%s' (text, json or html)", optarg);
            break;
        case 'o':
            if (!*optarg)
                return gp_cli_error(cmd, "-o/--output needs a file name, got ''");
            out_path = optarg;
            break;
        case 't': {
            uint64_t n;
            if (gp_parse_uint(optarg, 0, 1000000000, &n, err, sizeof err))
                return gp_cli_error(cmd, "--top: %s", err);
            ro.top = (size_t)n;
            break;
        }
        case 'R':
            rules = optarg;
            break;
        case 'A':
            require_aligned = true;
            break;
        case 'K':
            if (gp_parse_uint(optarg, 0, 999999999, &(uint64_t){0}, err, sizeof err))
                return gp_cli_error(cmd, "--rank: %s", err);
            rank = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return GP_EXIT_OK;
        default:
            return gp_cli_bad_option(cmd, c, argv);
        }
    }
    char **a_args = argv + optind, **b_args = split ? argv + split + 1 : argv + optind + 1;
    size_t n_a = split ? (size_t)(split - optind) : 1, n_b = split ? (size_t)(argc - split - 1) : 1;
    if (!split && argc - optind != 2)
        return gp_cli_error(cmd,
                            "expected two traces, A and B, got %d (see 'gradprof diff "
                            "--help')",
                            argc - optind);
    if (split && (n_a == 0 || n_b == 0))
        return gp_cli_error(cmd, "A... -- B...: no trace %s '--' (see 'gradprof diff --help')",
                            n_a == 0 ? "before" : "after");
    const char *a_path, *b_path;
    char *a_owned = NULL, *b_owned = NULL;
    if (gp_cli_pick_rank(cmd, "A", a_args, n_a, rank, &a_path, &a_owned))
        return GP_EXIT_USAGE;
    if (gp_cli_pick_rank(cmd, "B", b_args, n_b, rank, &b_path, &b_owned)) {
        free(a_owned);
        return GP_EXIT_USAGE;
    }
    if (rank)
        fprintf(stderr, "gradprof %s: rank %s: A is %s, B is %s\n", cmd, rank, a_path, b_path);
    int rc = diff_files(cmd, a_path, b_path, rules, require_aligned, format, out_path, &ro);
    free(a_owned);
    free(b_owned);
    return rc;
}

/* The diff of two traces, as the options say. */
static int diff_files(const char *cmd, const char *a_path, const char *b_path, const char *rules,
                      bool require_aligned, diff_format format, const char *out_path,
                      const gp_render_options *ro)
{
    char err[512];
    gp_analysis_options ao;
    gp_analysis_options_default(&ao);
    ao.without_sites = true; /* the diff reads stacks and labels, not A's site tables */
    int rules_rc = gp_cli_rules(cmd, rules, &ao.rules);
    if (rules_rc)
        return rules_rc;
    gp_profile *a = NULL, *b = NULL;
    gp_diff *d = NULL;
    int rc = GP_EXIT_OK;
    if (gp_cli_probe_trace(a_path, err, sizeof err) != 0 ||
        gp_cli_probe_trace(b_path, err, sizeof err) != 0 ||
        gp_diff_load(a_path, b_path, &ao, &a, &b, &d, err, sizeof err) != 0) {
        rc = gp_cli_error(cmd, "%s", err);
        goto done;
    }
    gp_cli_warn_trace(cmd, a);
    gp_cli_warn_trace(cmd, b);
    if (d->other_program[0])
        gp_cli_warn(cmd, "%s", d->other_program);
    if (d->b_graph[0])
        gp_cli_warn(cmd, "%s", d->b_graph);
    if (d->diverged) {
        if (require_aligned) {
            fprintf(stderr, "gradprof %s: the runs do not align: %s\n", cmd, d->diverged_why);
            rc = GP_EXIT_DIVERGED;
            goto done;
        }
        gp_cli_warn(cmd, "the runs do not align: %s; the diff below may mean little",
                    d->diverged_why);
    }

    gp_output out;
    const char *inputs[] = {a_path, b_path};
    if ((rc = gp_cli_output_open(cmd, "-o", out_path, inputs, 2, &out)) != 0)
        goto done;
    int wrc = format == FMT_JSON   ? gp_render_diff_json(out.f, d, ro)
              : format == FMT_HTML ? gp_render_html_diff(out.f, d, ro)
                                   : gp_render_diff_text(out.f, d, ro);
    rc = gp_cli_output_close(cmd, &out, wrc);
done:
    gp_diff_free(d);
    gp_profile_free(b);
    gp_profile_free(a);
    return rc;
}
