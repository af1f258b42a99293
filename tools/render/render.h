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
} gp_render_options;

/* Fills *o with the defaults: top 10, measure "peak", no colour. */
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
 * Folded stacks for flamegraph.pl and speedscope: one "root;frame;...;leaf VALUE" line per call
 * site whose value is not 0, the root being the site's category (with the device, "cuda:0", as a
 * root above it for device memory, so the host's lines alone sum to the host's figures), frames
 * outermost first, the value by o->measure: "peak" (bytes live at the peak; the host lines sum
 * to the peak), "total" (bytes allocated), "count" (allocations) or "leaked" (bytes live at the
 * end). Lines with the same stack are merged (values added); lines are sorted. An unknown
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

#endif /* GRADPROF_TOOLS_RENDER_H */
