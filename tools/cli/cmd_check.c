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
    "                        program that exec'd or was killed by a signal\n"
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

enum {
    OPT_FORBID = 256,
    OPT_REGION,
    OPT_MAX_PEAK,
    OPT_MAX_GROWTH,
    OPT_NO_LEAKS,
    OPT_JUNIT,
    OPT_FORMAT,
    OPT_DETECTORS,
    OPT_RULES,
    OPT_BASELINE,
    OPT_BASELINE_SLACK,
    OPT_ALLOW_INCOMPLETE,
    OPT_ALLOW_UNCLASSIFIED,
};

static const struct option long_options[] = {
    {"forbid", required_argument, NULL, OPT_FORBID},
    {"region", required_argument, NULL, OPT_REGION},
    {"max-peak", required_argument, NULL, OPT_MAX_PEAK},
    {"max-growth", required_argument, NULL, OPT_MAX_GROWTH},
    {"no-leaks", no_argument, NULL, OPT_NO_LEAKS},
    {"detectors", required_argument, NULL, OPT_DETECTORS},
    {"junit", required_argument, NULL, OPT_JUNIT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"rules", required_argument, NULL, OPT_RULES},
    {"baseline", required_argument, NULL, OPT_BASELINE},
    {"baseline-slack", required_argument, NULL, OPT_BASELINE_SLACK},
    {"allow-incomplete", no_argument, NULL, OPT_ALLOW_INCOMPLETE},
    {"allow-unclassified", no_argument, NULL, OPT_ALLOW_UNCLASSIFIED},
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
    case OPT_FORBID:
        return gp_parse_categories(v, o->forbid, err, sizeof err)
                   ? gp_cli_error(CMD, "--forbid: %s", err)
                   : 0;
    case OPT_REGION:
        if (!*v)
            return gp_cli_error(CMD, "--region: empty region name");
        if (o->n_regions == MAX_REGIONS)
            return gp_cli_error(CMD, "--region: at most %d regions, got '%s' too", MAX_REGIONS, v);
        a->regions[o->n_regions++] = v;
        return 0;
    case OPT_MAX_PEAK:
        o->has_max_peak = true;
        return gp_parse_size(v, &o->max_peak, err, sizeof err)
                   ? gp_cli_error(CMD, "--max-peak: %s", err)
                   : 0;
    case OPT_MAX_GROWTH:
        o->has_max_growth = true;
        return gp_parse_size(v, &o->max_growth, err, sizeof err)
                   ? gp_cli_error(CMD, "--max-growth: %s", err)
                   : 0;
    case OPT_BASELINE_SLACK:
        return gp_parse_size(v, &o->baseline_slack, err, sizeof err)
                   ? gp_cli_error(CMD, "--baseline-slack: %s", err)
                   : 0;
    case OPT_DETECTORS:
        return gp_parse_detectors(v, o->detectors, err, sizeof err)
                   ? gp_cli_error(CMD, "--detectors: %s", err)
                   : 0;
    case OPT_FORMAT:
        if (strcmp(v, "text") != 0 && strcmp(v, "json") != 0)
            return gp_cli_error(CMD, "--format: unknown format '%s' (text or json)", v);
        a->json = strcmp(v, "json") == 0;
        return 0;
    case OPT_JUNIT:
    case OPT_BASELINE:
        if (!*v)
            return gp_cli_error(CMD, "--%s: empty file name",
                                c == OPT_JUNIT ? "junit" : "baseline");
        *(c == OPT_JUNIT ? &a->junit : &a->baseline) = v;
        return 0;
    case OPT_RULES:
        a->frame_rules = v;
        return 0;
    case OPT_NO_LEAKS:
    case OPT_ALLOW_INCOMPLETE:
    case OPT_ALLOW_UNCLASSIFIED:
        *(c == OPT_NO_LEAKS           ? &o->no_leaks
          : c == OPT_ALLOW_INCOMPLETE ? &o->allow_incomplete
                                      : &o->allow_unclassified) = true;
        return 0;
    default:
        return GP_EXIT_USAGE;
    }
}

/* Loads the trace (quietly: the result says what it lacks) and, with --baseline, the baseline and
 * the aligned diff. 0 or an exit code, having printed why. */
static int load(const check_args *a, const gp_analysis_options *ao, gp_profile **p, gp_profile **pb,
                gp_diff **d)
{
    char err[768];
    if (!a->baseline)
        return gp_cli_load_profile_quiet(CMD, a->file, ao, p) ? GP_EXIT_USAGE : 0;
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

/* Says on stderr what kept the trace from being judged, or what was accepted. */
static void report_doubts(const gp_check_result *r)
{
    for (size_t i = 0; i < r->n_doubts; i++) {
        const gp_check_doubt *d = &r->doubts[i];
        if (d->accepted)
            gp_cli_warn(CMD, "%s (accepted: %s)", d->message, d->option);
        else
            gp_cli_error(CMD, "cannot judge: %s; %s checks it anyway", d->message, d->option);
    }
}

/* Evaluates and writes: standard output, then the JUnit file (opened first, so a refused name
 * stops the command before anything is written). The verdict's exit code, or 2. */
static int check(const check_args *a, gp_profile *p)
{
    char err[768];
    gp_check_result *r = NULL;
    int e = gp_check_run(p, &a->rules, &r, err, sizeof err);
    if (e)
        return gp_cli_error(CMD, "%s%s", e == GP_EINVAL ? "--region: " : "", err);
    gp_output out, junit = {0};
    const char *inputs[] = {a->file, a->baseline};
    int rc = a->junit ? gp_cli_output_open(CMD, "--junit", a->junit, inputs, 2, &junit) : 0;
    if (rc == 0 && (rc = gp_cli_output_open(CMD, "stdout", NULL, NULL, 0, &out)) == 0) {
        int wrc = a->json ? gp_render_check_json(out.f, p, r) : gp_render_check_text(out.f, p, r);
        rc = gp_cli_output_close(CMD, &out, wrc);
    }
    if (rc == 0 && a->junit)
        rc = gp_cli_output_close(CMD, &junit, gp_render_check_junit(junit.f, p, r));
    gp_output_abort(&junit);
    if (rc == 0) {
        report_doubts(r);
        rc = r->verdict == GP_CHECK_PASSED   ? GP_EXIT_OK
             : r->verdict == GP_CHECK_FAILED ? GP_EXIT_FAIL
                                             : GP_EXIT_USAGE;
    }
    gp_check_result_free(r);
    return rc;
}

/* Several traces: each checked with the same rules; the job's table, then each result. The
 * worst verdict's exit code (not judged, then failed), or 2. */
static int check_job(const check_args *a, const gp_analysis_options *ao, char **paths, size_t n)
{
    gp_cli_job job;
    if (gp_cli_job_load(CMD, paths, n, ao, false, true, &job))
        return GP_EXIT_USAGE;
    gp_check_result **results = calloc(n, sizeof *results);
    int rc = results ? 0 : gp_cli_error(CMD, "out of memory");
    char err[768];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int e = gp_check_run(job.procs[i].p, &a->rules, &results[i], err, sizeof err);
        if (e)
            rc = gp_cli_error(CMD, "%s%s", e == GP_EINVAL ? "--region: " : "", err);
    }
    gp_output out;
    if (rc == 0 && (rc = gp_cli_output_open(CMD, "stdout", NULL, NULL, 0, &out)) == 0) {
        int wrc = a->json ? gp_render_check_job_json(out.f, job.procs, results, n)
                          : gp_render_check_job_text(out.f, job.procs, results, n);
        rc = gp_cli_output_close(CMD, &out, wrc);
    }
    if (rc == 0) {
        bool failed = false, unjudged = false;
        for (size_t i = 0; i < n; i++) {
            report_doubts(results[i]);
            failed |= results[i]->verdict == GP_CHECK_FAILED;
            unjudged |= results[i]->verdict == GP_CHECK_UNJUDGED;
        }
        rc = unjudged ? GP_EXIT_USAGE : failed ? GP_EXIT_FAIL : GP_EXIT_OK;
    }
    for (size_t i = 0; results && i < n; i++)
        gp_check_result_free(results[i]);
    free(results);
    gp_cli_job_free(&job);
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
        if (c < OPT_FORBID)
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
    if (a.rules.n_regions) {
        ao.inference_regions = a.regions;
        ao.n_inference_regions = a.rules.n_regions;
    }
    if (a.rules.has_max_growth)
        ao.growth_threshold = a.rules.max_growth;
    if (argc - optind > 1)
        return check_job(&a, &ao, argv + optind, (size_t)(argc - optind));
    gp_profile *p = NULL, *pb = NULL;
    gp_diff *d = NULL;
    if ((rc = load(&a, &ao, &p, &pb, &d)) == 0) {
        a.rules.baseline = d;
        rc = check(&a, p);
    }
    gp_diff_free(d);
    gp_profile_free(pb);
    gp_profile_free(p);
    return rc;
}
