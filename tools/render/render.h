/*
 * Renderers of a gp_profile (report) and of a gp_diff (diff). Each writes one format to `out` and
 * returns 0, or -1 if writing failed (the caller reports the error with the output's name).
 * Formats are documented in the README ("Reading a report", "JSON schema"); every number they
 * print comes from the profile, nothing is recomputed here.
 */
#ifndef GRADPROF_TOOLS_RENDER_H
#define GRADPROF_TOOLS_RENDER_H

#include <stdio.h>

#include "analysis.h"
#include "check.h"
#include "diff.h"

typedef struct gp_render_options {
    size_t top;           /* rows per table (default 10; 0 = all) */
    const char *measure;  /* folded: "peak" (default), "total", "count", "leaked" */
    bool color;           /* text: ANSI colour (only when writing to a terminal) */
} gp_render_options;

void gp_render_options_default(gp_render_options *o);

int gp_render_text(FILE *out, gp_profile *p, const gp_render_options *o);
int gp_render_json(FILE *out, gp_profile *p, const gp_render_options *o);
int gp_render_html(FILE *out, gp_profile *p, const gp_render_options *o);
/* Folded stacks ("frame;frame;frame value" lines, outermost first) for flamegraph.pl/speedscope. */
int gp_render_folded(FILE *out, gp_profile *p, const gp_render_options *o);
/* Chrome Trace Event JSON: counters of live bytes per category over time, regions as slices,
 * marks as instant events; opens in Perfetto and chrome://tracing. */
int gp_render_chrome(FILE *out, gp_profile *p, const gp_render_options *o);

/* Human sizes: "0 B", "512 B", "1.50 KiB", "3.25 MiB", "1.00 GiB" (binary units). */
const char *gp_format_bytes(uint64_t bytes, char *buf, size_t size);

/* Renderers of a diff: o->top limits the module, op and call-site tables of the text and HTML
 * output (0 = all); the JSON output always has every row. JSON schema "gradprof-diff/2"
 * (documented in the README). The HTML page: a summary (both peaks, the delta, the bytes held by
 * graph construction), both runs' memory over time stacked by category on the same axes, the
 * per-category delta table and the held-by-graph tables per layer, op and call site, with any
 * remainder that does not add up shown as a row of its own. */
int gp_render_diff_text(FILE *out, const gp_diff *d, const gp_render_options *o);
int gp_render_diff_json(FILE *out, const gp_diff *d, const gp_render_options *o);
int gp_render_html_diff(FILE *out, const gp_diff *d, const gp_render_options *o);

/* Writers of a check result (render_check.c): a PASS / FAIL / UNJUDGED headline with what kept
 * the trace from being judged, the rules, and one block per violation (its sentence, the rows
 * behind it, the top frames of their call sites); JSON schema "gradprof-check/2" (README); JUnit
 * XML with one testcase per rule, plus one per doubt (an error, or skipped when accepted). p is
 * the profile the result was computed from (for frames). */
int gp_render_check_text(FILE *out, gp_profile *p, const gp_check_result *r);
int gp_render_check_json(FILE *out, gp_profile *p, const gp_check_result *r);
int gp_render_check_junit(FILE *out, gp_profile *p, const gp_check_result *r);

#endif /* GRADPROF_TOOLS_RENDER_H */
