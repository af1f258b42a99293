/*
 * The memory-over-time chart of the HTML pages, as inline SVG (render_svg.c). The report page
 * draws one profile's chart; the diff page draws both runs' on the same axes. Internal to
 * tools/render (gp__svg_ prefix).
 *
 * What a chart shows, all from the profile: live bytes on the primary device stacked by category
 * (a step area per category, each timeline point holding from its bucket's start,
 * gp__timeline_start, to the next point's), a dashed line of the largest total within each
 * bucket, a y axis in the binary unit that fits and an x axis in time units, marks as dashed
 * ticks (labelled when there is room), the peak with its size and time, and the regions as a band
 * of spans under the chart (a row per nesting depth per thread, up to 4 deep and 12 rows; tiny
 * spans of the same name a pixel apart are drawn as one, "name xN"). After the <svg> comes a
 * <script type="application/json" id="ID-data"> block (compact JSON through json.h: x0, pw, tmax,
 * t, start, cats, colors, v, max) from which the page's script draws the tooltips.
 */
#ifndef GRADPROF_TOOLS_RENDER_SVG_H
#define GRADPROF_TOOLS_RENDER_SVG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis.h"

/* What the charts drawn together share: the time at the right edge (ns, > 0), the bytes the y
 * axis must reach, and the categories drawn and put in the legend. Start from {0} and fit each
 * profile. */
typedef struct gp__svg_axes {
    double t_max;
    uint64_t v_max;
    bool used[LP_CAT_COUNT];
} gp__svg_axes;

/* Widens the axes to hold p: its duration or last point, its peak and largest totals, the
 * categories live at some point of its timeline. */
void gp__svg_axes_fit(gp__svg_axes *a, const gp_profile *p);

/* Writes p's chart as <svg id="ID" class="chart"> on axes `a` (fitted to p at least), then its
 * data block. Returns 0, or -1 when out of memory (part of the chart may have been written). */
int gp__svg_chart(FILE *out, gp_profile *p, const char *id, const gp__svg_axes *a);

#endif /* GRADPROF_TOOLS_RENDER_SVG_H */
