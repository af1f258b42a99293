/*
 * Internals of the HTML renderers (gp_render_html and gp_render_html_diff are declared in
 * render.h).
 *
 * Both HTML outputs are one self-contained file: inline CSS, inline SVG charts and a little inline
 * JavaScript (sortable tables, chart tooltips) that the page does not need to be read. Nothing is
 * fetched from the network: there is no external URL, font, stylesheet or script in the output.
 */
#ifndef GRADPROF_TOOLS_RENDER_HTML_H
#define GRADPROF_TOOLS_RENDER_HTML_H

#include <stdio.h>

#include "render.h"

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
