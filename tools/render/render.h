/*
 * gp_render: the renderers of the gradprof tools, the one public header of tools/render. Each
 * function below writes one format of a gp_profile (report), a gp_diff (diff) or a
 * gp_check_result (check) to `out`; this header is their specification.
 *
 * What every renderer promises:
 *   - It only lays out what the engine computed (analysis.h, diff.h, check.h): no number is
 *     recomputed, except the column totals of the diff's text tables, summed from their rows.
 *   - The same input and options give the same bytes, on any machine: every ordering breaks
 *     ties by name and then by index (the golden files in tests/golden rely on it).
 *   - Strings from the trace cannot break the format: JSON strings are escaped and always valid
 *     UTF-8 (json.h), HTML text is escaped, folded frames have ';' and control characters
 *     replaced; the report's text and every aligned text table (render_common.h) replace control
 *     characters.
 *   - It returns 0, or -1 if writing failed (ferror on `out`) or memory ran out, in which case
 *     the output is incomplete; the caller reports the error with the output's name and must not
 *     keep the file. `out` is flushed where the format says so, never closed.
 *   - `o` may be NULL for the defaults (gp_render_options_default).
 *
 * Internals: render_common.h (formatting, orderings, the timeline's buckets, text tables), json.h
 * (the JSON writer), render_html_common.h and render_svg.h (the HTML pages and their chart).
 */
#ifndef GRADPROF_TOOLS_RENDER_H
#define GRADPROF_TOOLS_RENDER_H

#include <stdio.h>

#include "analysis.h"
#include "check.h"
#include "diff.h"

typedef struct gp_render_options {
    size_t top;          /* rows per ranked table (default 10; 0 = all) */
    const char *measure; /* what ranks the tables and weighs folded stacks: "peak" (default),
                            "total", "count" or "leaked" */
    bool color;          /* text: ANSI colour (only when writing to a terminal; default off) */
    /* folded: a stack that weighs less than max(folded_min, folded_min_share x the total of its
     * root) is cut at its caller (gp_render_folded); both 0 keep every stack whole */
    uint64_t folded_min;     /* in the measure's unit (bytes, or allocations for "count") */
    double folded_min_share; /* default 0.001: narrower than a pixel of a 1000-pixel graph */
} gp_render_options;

/* Fills *o with the defaults: top 10, measure "peak", no colour, folded_min_share 0.001. */
void gp_render_options_default(gp_render_options *o);

/* ---- a profile ------------------------------------------------------------------------------ */

/*
 * The human report (`gradprof report`, the default format), top to bottom: a one-line summary;
 * the trace and program, with a warning when the trace was damaged, unfinished or lost events;
 * peak, live at exit and temporaries; live at peak by category (and per device); the ranked
 * tables (tag keys and sites by o->measure, temporaries, leaks with their stacks); regions;
 * iterations; tensors saved for backward; the findings. Ranked tables show o->top rows and say
 * how many more there are. An unknown o->measure ranks by peak.
 */
int gp_render_text(FILE *out, gp_profile *p, const gp_render_options *o);

/*
 * The report as JSON, schema "gradprof-report/1" (README, "JSON schemas"): every key always
 * present (0, "" or [] when there is nothing); bytes and times as integers (bytes, ns); one
 * member per line, two-space indentation, small objects on one line. The ranked lists (tag_keys,
 * sites, modules, saved_tensors) hold their first o->top entries in the order of o->measure
 * (peak when unknown) and `counts` gives each list's full length; devices, regions, iterations
 * and findings are complete. Flushes `out`.
 */
int gp_render_json(FILE *out, gp_profile *p, const gp_render_options *o);

/*
 * The report as one self-contained HTML page that fetches nothing (no external URL, font,
 * stylesheet or script): summary cards and trace warnings; memory over time as an inline SVG
 * chart (live bytes stacked by category, the largest total per sample, the peak, marks, region
 * spans); findings; categories at the peak; top sites at the peak with their frames; tensors
 * saved for backward; regions; iterations; what was live at the end. Tables show o->top rows and
 * sort by a click on a header; the chart has tooltips; the page reads the same without its
 * script. Byte cells carry the exact count in a tooltip. Flushes `out`.
 */
int gp_render_html(FILE *out, gp_profile *p, const gp_render_options *o);

/*
 * Folded stacks for flamegraph.pl and speedscope: "root;frame;...;leaf VALUE" lines, the root
 * being the category (with the device, "cuda:0", as a root above it for device memory, so the
 * host's lines alone sum to the host's figures), frames outermost first, the value by
 * o->measure: "peak" (bytes live at the peak; the host lines sum to the peak), "total" (bytes
 * allocated), "count" (allocations) or "leaked" (bytes live at the end). Call sites with the same
 * frames are one line. A frame whose stacks together weigh less than the cut-off
 * (o->folded_min, o->folded_min_share of its root's total) is not shown: what it weighs goes to
 * its caller's line "CALLER;[smaller stacks]", so every root still sums to its total and the
 * output stays a size a flame graph tool can draw. Lines are sorted frame by frame. An unknown
 * o->measure writes nothing and returns -1 with errno EINVAL.
 */
int gp_render_folded(FILE *out, gp_profile *p, const gp_render_options *o);

/*
 * Chrome Trace Event JSON ({"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}})
 * for Perfetto and chrome://tracing, compact with one event per line: the process and thread
 * names; a counter "live bytes" with one series per category ever live, a sample per timeline
 * point at its bucket's start (gp__timeline_start), from 0 at time 0; a counter "live bytes (max
 * in sample)" with the largest total in each bucket; regions as complete events on their
 * threads; marks, the peak (with its bytes per category) and each finding as instant events.
 * Times in microseconds with three decimals (exact nanoseconds); the pid is the traced
 * program's, else 1. o is not used. Flushes `out`.
 */
int gp_render_chrome(FILE *out, gp_profile *p, const gp_render_options *o);

/* Human sizes: "0 B", "512 B", "1.50 KiB", "3.25 MiB", "1.00 GiB" (binary units, two decimals,
 * rounded to nearest; a value that rounds to 1024 of a unit is shown in the next one). Returns
 * buf (32 bytes are always enough). */
const char *gp_format_bytes(uint64_t bytes, char *buf, size_t size);

/* ---- a diff --------------------------------------------------------------------------------- */

/*
 * The diff as text: the headline (what B holds at A's peak, held by graph construction, saved
 * for backward; both runs' own peaks), the runs, the categories at A's peak and B's
 * corresponding instant, the held-by-graph tables by module, op and call site (o->top rows, the
 * rest folded into one "(N more)" row, a total over every row), the layers, and one line of
 * arithmetic; whatever does not add up to the peak delta is printed as an "(unexplained
 * remainder)" row, from the diff's own remainder fields.
 */
int gp_render_diff_text(FILE *out, const gp_diff *d, const gp_render_options *o);

/*
 * The diff as JSON, schema "gradprof-diff/2" (README): every row of every table, whatever
 * o->top (call sites with nothing changed or held are left out); one member per line, each row
 * on one line. Flushes `out`.
 */
int gp_render_diff_json(FILE *out, const gp_diff *d, const gp_render_options *o);

/*
 * The diff as one self-contained HTML page (as gp_render_html): a summary (both peaks, the
 * delta, the bytes held by graph construction and saved for backward), both runs' memory over
 * time stacked by category on the same axes, the per-category delta table, and the
 * held-by-graph tables per layer (all rows), module, op and call site (o->top rows, with what
 * the rest hold), with any remainder that does not add up shown as a row of its own. Flushes
 * `out`.
 */
int gp_render_html_diff(FILE *out, const gp_diff *d, const gp_render_options *o);

/* ---- a check result ------------------------------------------------------------------------- */

/*
 * Writers of a check result (render_check.c): a PASS / FAIL / UNJUDGED headline with what kept
 * the trace from being judged, the rules, and one block per violation (its sentence, the rows
 * behind it, the top frames of their call sites); JSON schema "gradprof-check/2" (README); JUnit
 * XML with one testcase per rule, plus one per doubt (an error, or skipped when accepted). p is
 * the profile the result was computed from (for frames).
 */
int gp_render_check_text(FILE *out, gp_profile *p, const gp_check_result *r);
int gp_render_check_json(FILE *out, gp_profile *p, const gp_check_result *r);
int gp_render_check_junit(FILE *out, gp_profile *p, const gp_check_result *r);

/* The doubts of r as lines for standard error, each after `prefix` ("gradprof check"): a doubt
 * that decides the verdict as "PREFIX: cannot judge: MESSAGE; OPTION checks it anyway", an
 * accepted one as "PREFIX: warning: MESSAGE (accepted: OPTION)". */
void gp_render_check_doubts(FILE *out, const char *prefix, const gp_check_result *r);

/* ---- a job: several processes of one program (ranks), and the pprof and speedscope exports -- */

struct gp_samples;

/*
 * One process of a job, as `report` and `check` take several traces: its profile, and what the
 * trace's metadata says of it (the launcher's RANK, LOCAL_RANK and WORLD_SIZE, as the recorder
 * copied them; NULL when absent) and its pid (0 if unknown). graph_bytes is what its primary
 * device held at the peak in saved, autograd and gradient memory. samples: for the pprof export
 * (samples.h), else NULL. A single trace is a job of one.
 */
typedef struct gp_render_process {
    gp_profile *p;
    const struct gp_samples *samples;
    const char *rank, *local_rank, *world_size;
    long pid;
    uint64_t graph_bytes;
} gp_render_process;

/*
 * The pprof export (render_pprof.c): a gzipped profile.proto of the processes' samples (every
 * gp_render_process needs its samples), sample types as Go's heap profiles (alloc_objects,
 * alloc_space, inuse_objects, inuse_space at each device's peak; default inuse_space),
 * symbolized locations and functions (file and line), and string labels category, op, module,
 * device, grad, and rank, local_rank, world_size (when known) and, for several processes, pid.
 * The same input gives the same bytes. Flushes `out`.
 */
int gp_render_pprof(FILE *out, const gp_render_process *procs, size_t n);

/*
 * The speedscope export (render_speedscope.c): speedscope's file format ($schema, shared.frames,
 * profiles[] of type "sampled" with samples and weights), four profiles per process, one per
 * measure (peak, total, count, leaked), each sample a call site with its category as the root
 * frame (as the folded export); a job's profiles are named by rank. Flushes `out`.
 */
int gp_render_speedscope(FILE *out, const gp_render_process *procs, size_t n);

/*
 * A job's report (render_job.c), for `report` with several traces. Text: a one-line summary, the
 * per-process table (rank, pid, peak, graph at peak, findings, trace), the worst process first
 * (highest peak, then graph bytes, then rank), then each process's text report in that order
 * under a line naming it. JSON, schema "gradprof-job/1": processes[] in that order (rank,
 * local_rank, world_size: numbers or null; pid, path, command, host, peak_bytes, peak_time_ns,
 * graph_bytes, leaked_bytes, findings (kinds)) and world_size (when all agree). Flushes `out`.
 */
int gp_render_job_text(FILE *out, const gp_render_process *procs, size_t n,
                       const gp_render_options *o);
int gp_render_job_json(FILE *out, const gp_render_process *procs, size_t n);

/*
 * The Chrome trace of a job (render_chrome.c): each process as gp_render_chrome writes one, under
 * its own pid (the trace's, unless two processes share one: then 1000000 + its index), named
 * "gradprof: rank R: COMMAND" and sorted by rank, in one traceEvents list, so that Perfetto (and
 * its trace processor) load the job as one trace. When every process ran on one host (the "host"
 * metadata) and says when it started on its monotonic clock ("start_monotonic_ns"), the times
 * share one axis, from the first start (otherData.one_time_axis true); else each process's times
 * start at 0. Flushes `out`.
 */
int gp_render_chrome_job(FILE *out, const gp_render_process *procs, size_t n);

/*
 * The checks of a job (render_job.c), results[i] of procs[i]: text, the per-process table (rank,
 * pid, verdict, peak, graph at peak, violations, trace), the worst first (unjudged, then failed,
 * then passed; then by peak), then each process's check text under a line naming it; JSON, schema
 * "gradprof-check-job/1": verdict and passed of the job (unjudged if any process is, else failed
 * if any is), processes[] in that order (rank, local_rank, world_size, pid, path, verdict, passed,
 * peak_bytes, graph_bytes, violations, failed_rules[]). Flushes `out`.
 */
int gp_render_check_job_text(FILE *out, const gp_render_process *procs,
                             gp_check_result *const *results, size_t n);
int gp_render_check_job_json(FILE *out, const gp_render_process *procs,
                             gp_check_result *const *results, size_t n);

/* The check command's output (render_check.c), results[i] of procs[i]: for one process its check
 * (gp_render_check_text, or _json with json), for several the job's (gp_render_check_job_text
 * or _json). */
int gp_render_check_results(FILE *out, const gp_render_process *procs,
                            gp_check_result *const *results, size_t n, bool json);

#endif /* GRADPROF_TOOLS_RENDER_H */
