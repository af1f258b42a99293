/*
 * gradprof report FILE... [--format text|json|html|folded|chrome|pprof|speedscope] [-o OUT]
 *                         [--top N] [--measure peak|total|count|leaked] [--region NAME]...
 *
 * Loads the trace (a damaged one with a warning on stderr saying what was recovered and lost: the
 * report covers what was read), renders it in the chosen format and writes it to OUT or standard
 * output (output.h: never onto the trace, never through a symbolic link, never a half file).
 * Several traces are the processes of one job (job.h): text and json give the per-process table
 * and each report, chrome, pprof and speedscope one file of all of them. Exit codes: 0 done, 2
 * bad command line, a trace that cannot be read at all, or an output that cannot be written (the
 * message names the file and why).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "commands.h"
#include "job.h"
#include "output.h"
#include "render.h"
#include "render_common.h"

static const char usage[] =
    "usage: gradprof report FILE... [--format FMT] [-o OUT] [--top N] [--measure M]\n"
    "                               [--min CUT] [--region NAME]... [--rules FILE|none]\n"
    "\n"
    "Reads a trace and reports: the peak and when it happened; live memory at the peak by\n"
    "category and device; the top tags (category, op, module) and call sites; temporaries;\n"
    "leaks (live at exit) with their stacks; live bytes per region and per marked iteration;\n"
    "the tensors saved for backward; and the gradient-leak findings.\n"
    "\n"
    "Several traces are the processes of one job (the ranks of a torchrun job: each trace\n"
    "records its RANK, LOCAL_RANK and WORLD_SIZE): text and json give a table of the\n"
    "processes (rank, pid, peak, graph memory at the peak, findings), the worst first, then\n"
    "each report (json: the table only, schema gradprof-job/1); chrome, pprof and speedscope\n"
    "put every process in one file (one pid, profile or label per rank).\n"
    "\n"
    "options:\n"
    "  --format FMT      text (default), json (schema gradprof-report/1), html (one\n"
    "                    self-contained page), folded (flamegraph.pl / speedscope input),\n"
    "                    chrome (Chrome Trace Event JSON for Perfetto / chrome://tracing),\n"
    "                    pprof (gzipped profile.proto for go tool pprof, Pyroscope, Parca,\n"
    "                    Grafana: alloc/inuse objects and space, inuse at the peak) or\n"
    "                    speedscope (speedscope.app's JSON, one profile per measure)\n"
    "  -o, --output OUT  write to OUT instead of standard output (written whole or not at\n"
    "                    all: never onto the trace, never through a symbolic link)\n"
    "  --top N           rows per table (default 10, 0 = all)\n"
    "  --measure M       what ranks the tag and site tables and weighs folded stacks: peak\n"
    "                    (bytes live at the peak, default), total (bytes allocated), count\n"
    "                    (allocations) or leaked (bytes live at exit)\n"
    "  --min CUT         folded: a frame whose stacks weigh less than CUT is not shown, its\n"
    "                    weight goes to its caller's '[smaller stacks]' line (every root\n"
    "                    still sums to its total). CUT is a share of each root's total\n"
    "                    (0.5%), or an amount in the measure's unit (64KiB; allocations for\n"
    "                    count); default 0.1%: narrower than a pixel of a 1000-pixel flame\n"
    "                    graph. 0 keeps every stack whole\n"
    "  --region NAME     a region the program marked as inference, where grad should be off\n"
    "                    (repeatable; default 'inference')\n"
    "  --rules FILE|none  frame rules for allocations nothing tagged (default: the\n"
    "                    built-in PyTorch rules, tools/rules/pytorch.rules)\n"
    "  -h, --help        this help\n"
    "\n"
    "A damaged or truncated trace is reported up to the damage, with a warning saying what was\n"
    "lost. Exit status: 0 done, 2 bad usage, a trace that cannot be read or an output that\n"
    "cannot be written.\n";

typedef enum {
    FMT_TEXT,
    FMT_JSON,
    FMT_HTML,
    FMT_FOLDED,
    FMT_CHROME,
    FMT_PPROF,
    FMT_SPEEDSCOPE
} report_format;

static const struct {
    const char *name;
    report_format format;
} formats[] = {{"text", FMT_TEXT},
               {"json", FMT_JSON},
               {"html", FMT_HTML},
               {"folded", FMT_FOLDED},
               {"chrome", FMT_CHROME},
               {"pprof", FMT_PPROF},
               {"speedscope", FMT_SPEEDSCOPE}};

#define MAX_REGIONS 64

/* Several traces (a job), or the exports of one or more processes: pprof, speedscope. */
static int report_job(const char *cmd, char **paths, size_t n, const gp_analysis_options *ao,
                      report_format format, const char *out_path, const gp_render_options *ro)
{
    gp_cli_job job;
    int rc = gp_cli_job_load(cmd, paths, n, ao, format == FMT_PPROF, false, &job);
    if (rc)
        return GP_EXIT_USAGE;
    for (size_t i = 0; i < n; i++)
        gp_cli_warn_unclassified(cmd, job.procs[i].p);
    gp_output out;
    if ((rc = gp_cli_output_open(cmd, "-o", out_path, (const char *const *)paths, n, &out)) == 0) {
        int wrc;
        switch (format) {
        case FMT_PPROF:
            wrc = gp_render_pprof(out.f, job.procs, n);
            break;
        case FMT_SPEEDSCOPE:
            wrc = gp_render_speedscope(out.f, job.procs, n);
            break;
        case FMT_CHROME:
            wrc = gp_render_chrome_job(out.f, job.procs, n);
            break;
        case FMT_JSON:
            wrc = gp_render_job_json(out.f, job.procs, n);
            break;
        default:
            wrc = gp_render_job_text(out.f, job.procs, n, ro);
            break;
        }
        rc = gp_cli_output_close(cmd, &out, wrc);
    }
    gp_cli_job_free(&job);
    return rc;
}

/* --min: "P%" (a share of each root's total, 0 to 100) or an amount (gp_parse_size). */
static int parse_min(const char *text, gp_render_options *ro, char *err, size_t err_size)
{
    size_t len = strlen(text);
    if (len > 0 && text[len - 1] == '%') {
        char *end;
        errno = 0;
        double pct = strtod(text, &end);
        if (end != text + len - 1 || end == text || errno || !(pct >= 0 && pct <= 100)) {
            snprintf(err, err_size, "'%s' is not a percentage from 0%% to 100%%", text);
            return -1;
        }
        ro->folded_min = 0;
        ro->folded_min_share = pct / 100;
        return 0;
    }
    uint64_t v;
    if (gp_parse_size(text, &v, err, err_size) != 0)
        return -1;
    ro->folded_min = v;
    ro->folded_min_share = 0;
    return 0;
}

int gp_cmd_report(int argc, char **argv)
{
    static const struct option longs[] = {{"format", required_argument, NULL, 'f'},
                                          {"output", required_argument, NULL, 'o'},
                                          {"top", required_argument, NULL, 't'},
                                          {"measure", required_argument, NULL, 'm'},
                                          {"min", required_argument, NULL, 'M'},
                                          {"region", required_argument, NULL, 'r'},
                                          {"rules", required_argument, NULL, 'R'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    const char *cmd = "report", *out_path = NULL, *rules = NULL;
    report_format format = FMT_TEXT;
    const char *regions[MAX_REGIONS];
    size_t n_regions = 0;
    gp_render_options ro;
    gp_render_options_default(&ro);
    char err[512];

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":o:h", longs, NULL)) != -1) {
        switch (c) {
        case 'f': {
            size_t i = 0;
            while (i < sizeof formats / sizeof formats[0] && strcmp(optarg, formats[i].name))
                i++;
            if (i == sizeof formats / sizeof formats[0])
                return gp_cli_error(
                    cmd,
                    "unknown --format '%s' (text, json, html, folded, chrome, pprof or speedscope)",
                    optarg);
            format = formats[i].format;
            break;
        }
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
        case 'm': {
            gp__measure m;
            if (gp__measure_parse(optarg, &m) != 0)
                return gp_cli_error(cmd, "unknown --measure '%s' (peak, total, count or leaked)",
                                    optarg);
            ro.measure = gp__measure_name(m);
            break;
        }
        case 'M':
            if (parse_min(optarg, &ro, err, sizeof err) != 0)
                return gp_cli_error(cmd, "--min: %s", err);
            break;
        case 'r':
            if (!*optarg)
                return gp_cli_error(cmd, "--region needs a region name, got ''");
            if (n_regions == MAX_REGIONS)
                return gp_cli_error(cmd, "too many --region options (at most %d)", MAX_REGIONS);
            regions[n_regions++] = optarg;
            break;
        case 'R':
            rules = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            return GP_EXIT_OK;
        default:
            return gp_cli_bad_option(cmd, c, argv);
        }
    }
    if (argc - optind < 1)
        return gp_cli_error(cmd, "expected a trace file, got none (see 'gradprof report --help')");
    size_t n_paths = (size_t)(argc - optind);
    char **paths = argv + optind;
    if (n_paths > 1 && (format == FMT_HTML || format == FMT_FOLDED))
        return gp_cli_error(cmd, "--format %s takes one trace, got %zu (text, json, chrome, pprof "
                                 "and speedscope take a job's traces)",
                            format == FMT_HTML ? "html" : "folded", n_paths);
    const char *path = paths[0];

    gp_analysis_options ao;
    gp_analysis_options_default(&ao);
    int rules_rc = gp_cli_rules(cmd, rules, &ao.rules);
    if (rules_rc)
        return rules_rc;
    if (n_regions) {
        ao.inference_regions = regions;
        ao.n_inference_regions = n_regions;
    }
    if (n_paths > 1 || format == FMT_PPROF || format == FMT_SPEEDSCOPE)
        return report_job(cmd, paths, n_paths, &ao, format, out_path, &ro);
    gp_profile *p = NULL;
    if (gp_cli_load_profile(cmd, path, &ao, &p) != 0)
        return GP_EXIT_USAGE;
    gp_cli_warn_unclassified(cmd, p);
    gp_output out;
    const char *inputs[] = {path};
    int rc = gp_cli_output_open(cmd, "-o", out_path, inputs, 1, &out);
    if (rc != 0) {
        gp_profile_free(p);
        return rc;
    }
    /* Colour only for a human at a terminal (https://no-color.org). */
    const char *no_color = getenv("NO_COLOR");
    ro.color = format == FMT_TEXT && !out_path && isatty(STDOUT_FILENO) && !(no_color && *no_color);
    int wrc;
    switch (format) {
    case FMT_JSON:
        wrc = gp_render_json(out.f, p, &ro);
        break;
    case FMT_HTML:
        wrc = gp_render_html(out.f, p, &ro);
        break;
    case FMT_FOLDED:
        wrc = gp_render_folded(out.f, p, &ro);
        break;
    case FMT_CHROME:
        wrc = gp_render_chrome(out.f, p, &ro);
        break;
    case FMT_TEXT:
    default:
        wrc = gp_render_text(out.f, p, &ro);
        break;
    }
    rc = gp_cli_output_close(cmd, &out, wrc);
    gp_profile_free(p);
    return rc;
}
