/*
 * gradprof check: the CI gate. Parses the options into gp_check_rules, loads the trace (and the
 * baseline's aligned diff), runs the check engine (check.h) and writes its result with the check
 * writers (render.h: text or JSON on standard output, JUnit XML with --junit) through output.h.
 * Several traces are the processes of one job (job.h): each is checked with the same rules and
 * the per-process table is written, then each result. Exit status: the verdict (0 passed, 1
 * failed, 2 not judged; a job's is the worst of its processes'), or 2 for bad usage, a trace that
 * cannot be read or a report that cannot be written.
 */
#include "check.h"
#include "cli.h"
#include "commands.h"
#include "diff.h"
#include "job.h"
#include "output.h"
#include "render.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#define CMD "check"
#define MAX_REGIONS 64

static const char check_usage[] =
    "usage: gradprof check FILE... [--forbid CAT,...] [--region NAME]... [--max-peak SIZE]\n"
    "                              [--max-growth SIZE] [--no-leaks] [--detectors LIST]\n"
    "                              [--baseline B] [--junit OUT.xml] [--format text|json]\n"
    "\n"
    "The CI gate: fails (exit 1) when the trace breaks a rule, printing each violation with its\n"
    "category, bytes, op/module and the top frames of the call sites behind it. It never passes\n"
    "what it could not judge (exit 2, see below).\n"
    "\n"
    "Several traces are the processes of one job (the ranks of a torchrun job): each is checked\n"
    "with the same rules; the output is a table of the processes (rank, pid, verdict, peak,\n"
    "graph memory at the peak, violations), the worst first, then each check (json: the table,\n"
    "schema gradprof-check-job/1). The job passes when every process passes, is not judged\n"
    "when one is not. --baseline and --junit take one trace.\n"
    "\n"
    "rules:\n"
    "  --forbid CAT,...   categories that must never be allocated (default saved,gradient,\n"
    "                     autograd: the memory of an autograd graph); 'none' forbids nothing.\n"
    "                     Categories: parameter, input, activation, saved, gradient,\n"
    "                     optimizer_state, autograd, temporary, other\n"
    "  --region NAME      check only inside region NAME (repeatable): --forbid applies to the\n"
    "                     bytes that entered each forbidden category while NAME was open (a\n"
    "                     raw allocation tagged later counts under 'other' as well), --max-peak\n"
    "                     to the most bytes live while inside it, and NAME is the region the\n"
    "                     detectors treat as inference (default 'inference'). It must be in the\n"
    "                     trace\n"
    "  --max-peak SIZE    fail when the peak live bytes exceed SIZE\n"
    "  --max-growth SIZE  fail when live bytes grow by more than SIZE from the first marked\n"
    "                     iteration (lp_mark) to the last, naming the sites that grew\n"
    "  --no-leaks         fail when memory is still live at the end of the trace\n"
    "  --detectors LIST   gradient-leak detectors whose findings fail the check: all (default),\n"
    "                     none, or some of graph_without_grad, forgot_no_grad,\n"
    "                     growth_across_iterations, param_grad_in_inference,\n"
    "                     graph_escapes_inference\n"
    "  --rules FILE|none  frame rules for allocations nothing tagged (default: the built-in\n"
    "                     PyTorch rules, tools/rules/pytorch.rules)\n"
    "  --baseline B       also fail when this trace holds graph memory that trace B (the same\n"
    "                     program with grad off) does not, by the aligned diff: the bytes saved\n"
    "                     for backward (inferred, so it works on untagged runs), per op, and the\n"
    "                     held graph nodes and gradients (see 'gradprof diff --help')\n"
    "  --baseline-slack SIZE  graph memory tolerated against the baseline (default 64k)\n"
    "\n"
    "judging (exit 2 unless accepted):\n"
    "  --allow-incomplete    check a trace that is incomplete anyway: no metadata or no\n"
    "                        events, damaged, no end record, events the recorder dropped, or a\n"
    "                        program killed by a signal (one that exec'd is judged: its image\n"
    "                        ended there, the new program has a trace of its own); and a trace\n"
    "                        that passed the rules on saved memory although its tagging source\n"
    "                        missed some saves (saves_seen some: the program's own saved-tensor\n"
    "                        hooks, functorch transforms)\n"
    "  --allow-unclassified  check anyway when graph memory cannot be told from other memory:\n"
    "                        more than 50% of the bytes allocated are untagged and have no call\n"
    "                        stack (--no-stacks or --stack-sample, and nothing tagged them). Only\n"
    "                        asked of rules that need categories (--forbid, detectors, baseline)\n"
    "\n"
    "output:\n"
    "  --format FMT       text (default) or json (schema gradprof-check/2) on standard output\n"
    "  --junit OUT.xml    also write a JUnit XML report: one testcase per rule, one per doubt\n"
    "                     (never onto the trace, never through a symbolic link)\n"
    "  -h, --help         this help\n"
    "\n"
    "SIZE: bytes, or a number with a unit: 64k, 1.5MiB (K M G T = KiB MiB GiB TiB, powers of\n"
    "1024), 100MB (KB MB GB TB, powers of 1000).\n"
    "\n"
    "Exit status: 0 every rule passed, 1 at least one violation, 2 the trace could not be judged\n"
    "(incomplete, or its memory unclassified: the violations found are still listed), bad\n"
    "usage, a trace that cannot be read or a report that cannot be written.\n";

/* Each option's getopt code: a letter, as the other commands have it (no short options). */
static const struct option long_options[] = {
    {"forbid", required_argument, NULL, 'F'},
    {"region", required_argument, NULL, 'r'},
    {"max-peak", required_argument, NULL, 'P'},
    {"max-growth", required_argument, NULL, 'G'},
    {"no-leaks", no_argument, NULL, 'L'},
    {"detectors", required_argument, NULL, 'D'},
    {"junit", required_argument, NULL, 'J'},
    {"format", required_argument, NULL, 'f'},
    {"rules", required_argument, NULL, 'R'},
    {"baseline", required_argument, NULL, 'B'},
    {"baseline-slack", required_argument, NULL, 'S'},
    {"allow-incomplete", no_argument, NULL, 'I'},
    {"allow-unclassified", no_argument, NULL, 'U'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* The command line: the engine's rules and what the command itself needs. */
typedef struct check_args {
    gp_check_rules rules;
    const char *regions[MAX_REGIONS];
    const char *file, *junit, *frame_rules, *baseline;
    bool json;
} check_args;

/* One option with its value into a; 0 or an exit code. */
static int take_option(check_args *a, int c, const char *v)
{
    gp_check_rules *o = &a->rules;
    char err[512];
    switch (c) {
    case 'F':
        return gp_parse_categories(v, o->forbid, err, sizeof err)
                   ? gp_cli_error(CMD, "--forbid: %s", err)
                   : 0;
    case 'r':
        if (!*v)
            return gp_cli_error(CMD, "--region: empty region name");
        if (o->n_regions == MAX_REGIONS)
            return gp_cli_error(CMD, "--region: at most %d regions, got '%s' too", MAX_REGIONS, v);
        a->regions[o->n_regions++] = v;
        return 0;
    case 'P':
        o->has_max_peak = true;
        return gp_parse_size(v, &o->max_peak, err, sizeof err)
                   ? gp_cli_error(CMD, "--max-peak: %s", err)
                   : 0;
    case 'G':
        o->has_max_growth = true;
        return gp_parse_size(v, &o->max_growth, err, sizeof err)
                   ? gp_cli_error(CMD, "--max-growth: %s", err)
                   : 0;
    case 'S':
        return gp_parse_size(v, &o->baseline_slack, err, sizeof err)
                   ? gp_cli_error(CMD, "--baseline-slack: %s", err)
                   : 0;
    case 'D':
        return gp_parse_detectors(v, o->detectors, err, sizeof err)
                   ? gp_cli_error(CMD, "--detectors: %s", err)
                   : 0;
    case 'f':
        if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
            return gp_cli_error(CMD, "--format: unknown format '%s' (text or json)", v);
        a->json = strcmp(v, "json") == 0;
        return 0;
    case 'J':
    case 'B':
        if (!*v)
            return gp_cli_error(CMD, "--%s: empty file name", c == 'J' ? "junit" : "baseline");
        *(c == 'J' ? &a->junit : &a->baseline) = v;
        return 0;
    case 'R':
        a->frame_rules = v;
        return 0;
    case 'L':
    case 'I':
    case 'U':
        *(c == 'L'   ? &o->no_leaks
          : c == 'I' ? &o->allow_incomplete
                     : &o->allow_unclassified) = true;
        return 0;
    default: /* not reached: gp_cmd_check reports ':' and '?' */
        return GP_EXIT_USAGE;
    }
}

/* With --baseline: loads the trace (quietly: the result says what it lacks), the baseline and
 * their aligned diff. 0 or an exit code, having printed why. */
static int load_baseline(const check_args *a, const gp_analysis_options *ao, gp_profile **p,
                         gp_profile **pb, gp_diff **d)
{
    char err[768];
    if (gp_cli_probe_trace(a->file, err, sizeof err) ||
        gp_cli_probe_trace(a->baseline, err, sizeof err) ||
        gp_diff_load(a->file, a->baseline, ao, p, pb, d, err, sizeof err))
        return gp_cli_error(CMD, "%s", err);
    if ((*d)->diverged)
        return gp_cli_error(CMD, "--baseline: '%s' is no baseline for '%s': %s", a->baseline,
                            a->file, (*d)->diverged_why);
    if ((*d)->other_program[0])
        gp_cli_warn(CMD, "--baseline: %s", (*d)->other_program);
    return 0;
}

/* Writes the results to standard output (one trace: its check; several: the job's table, then
 * each check) and with --junit the JUnit file, opened first so that a refused name stops the
 * command before anything is written. 0 or 2. */
static int write_results(const check_args *a, const gp_render_process *procs,
                         gp_check_result *const *r, size_t n)
{
    gp_output out, junit = {0};
    const char *inputs[] = {a->file, a->baseline};
    int rc = a->junit ? gp_cli_output_open(CMD, "--junit", a->junit, inputs, 2, &junit) : 0;
    if (rc == 0 && (rc = gp_cli_output_open(CMD, "stdout", NULL, NULL, 0, &out)) == 0)
        rc = gp_cli_output_close(CMD, &out, gp_render_check_results(out.f, procs, r, n, a->json));
    if (rc == 0 && a->junit)
        rc = gp_cli_output_close(CMD, &junit, gp_render_check_junit(junit.f, procs[0].p, r[0]));
    gp_output_abort(&junit);
    return rc;
}

/* Evaluates the rules on each of n processes (a job, or one trace), writes the results, then on
 * stderr what kept each trace from being judged, or was accepted. The exit code of the verdict
 * (a job's: the worst), or 2. */
static int check(const check_args *a, const gp_render_process *procs, size_t n)
{
    gp_check_result **r = calloc(n, sizeof *r);
    int rc = r ? 0 : gp_cli_error(CMD, "out of memory");
    char err[768];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int e = gp_check_run(procs[i].p, &a->rules, &r[i], err, sizeof err);
        if (e)
            rc = gp_cli_error(CMD, "%s%s", e == GP_EINVAL ? "--region: " : "", err);
    }
    if (rc == 0 && (rc = write_results(a, procs, r, n)) == 0) {
        for (size_t i = 0; i < n; i++)
            gp_render_check_doubts(stderr, "gradprof " CMD, r[i]);
        gp_check_verdict v = gp_check_job_verdict(r, n);
        rc = v == GP_CHECK_PASSED   ? GP_EXIT_OK
             : v == GP_CHECK_FAILED ? GP_EXIT_FAIL
                                    : GP_EXIT_USAGE;
    }
    for (size_t i = 0; r && i < n; i++)
        gp_check_result_free(r[i]);
    free(r);
    return rc;
}

int gp_cmd_check(int argc, char **argv)
{
    check_args a = {0};
    gp_check_rules_default(&a.rules);
    a.rules.regions = a.regions;
    int c, rc;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
        if (c == 'h') {
            fputs(check_usage, stdout);
            return GP_EXIT_OK;
        }
        if (c == ':' || c == '?')
            return gp_cli_bad_option(CMD, c, argv);
        if ((rc = take_option(&a, c, optarg)))
            return rc;
    }
    if (optind >= argc)
        return gp_cli_error(CMD, "no trace file (usage: gradprof check FILE [options]; see "
                                 "'gradprof check --help')");
    if (argc - optind > 1 && (a.baseline || a.junit))
        return gp_cli_error(CMD, "%s takes one trace, got %d ('%s', '%s', ...)",
                            a.baseline ? "--baseline" : "--junit", argc - optind, argv[optind],
                            argv[optind + 1]);
    a.file = argv[optind];

    gp_analysis_options ao;
    gp_analysis_options_default(&ao);
    if ((rc = gp_cli_rules(CMD, a.frame_rules, &ao.rules)))
        return rc;
    gp_check_analysis_options(&a.rules, &ao);
    gp_cli_job job = {0}; /* the traces, each a process (without --baseline) */
    gp_profile *p = NULL, *pb = NULL;
    gp_diff *d = NULL;
    if (a.baseline)
        rc = load_baseline(&a, &ao, &p, &pb, &d);
    else if (gp_cli_job_load(CMD, argv + optind, (size_t)(argc - optind), &ao, false, true, &job))
        rc = GP_EXIT_USAGE;
    if (rc == 0) {
        a.rules.baseline = d;
        rc = d ? check(&a, &(gp_render_process){.p = p}, 1) : check(&a, job.procs, job.n);
    }
    gp_cli_job_free(&job);
    gp_diff_free(d);
    gp_profile_free(pb);
    gp_profile_free(p);
    return rc;
}
