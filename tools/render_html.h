/*
 * The HTML diff report (the single-run report, gp_render_html, is declared in render.h).
 *
 * Both HTML outputs are one self-contained file: inline CSS, inline SVG charts and a little inline
 * JavaScript (sortable tables, chart tooltips) that the page does not need to be read. Nothing is
 * fetched from the network: there is no external URL, font, stylesheet or script in the output.
 */
#ifndef GRADPROF_TOOLS_RENDER_HTML_H
#define GRADPROF_TOOLS_RENDER_HTML_H

#include <stdio.h>

#include "diff.h"
#include "render.h"

/* Writes the diff of two runs as HTML: a summary (both peaks, the delta, the bytes held by graph
 * construction), both runs' memory over time stacked by category on the same axes, the per-category
 * delta table and the held-by-graph tables per layer, op and call site, with any remainder that
 * does not add up shown as a row of its own. o->top limits the op and call-site tables (0 = all).
 * Returns 0, or -1 if writing failed. */
int gp_render_html_diff(FILE *out, const gp_diff *d, const gp_render_options *o);

/*
 * Internal, shared with render_chrome.c: where the timeline's points start. Each
 * gp_timeline_point is what was live at the end of a time bucket [time_ns - width, time_ns) that
 * had events (buckets without events have no point). The profile does not carry the width; it is
 * taken as the smallest gap between two points, which is exact whenever two buckets in a row had
 * events and otherwise errs towards a wider bucket, never past the previous point.
 */
uint64_t gp__timeline_width(const gp_profile *p);
/* The start of point i's bucket: time_ns - width, not before point i-1 (nor 0). */
uint64_t gp__timeline_start(const gp_profile *p, uint64_t width, size_t i);

#endif /* GRADPROF_TOOLS_RENDER_HTML_H */
