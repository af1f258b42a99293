/*
 * The memory-over-time chart as inline SVG (render_svg.h). Coordinates are written with one
 * decimal; the layout constants below are in SVG user units (the chart scales with the page).
 */
#include "render_svg.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "render_common.h"
#include "render_html_common.h"

/* Width, left and right margins, plot top and height, band row height. */
enum { CH_W = 1160, CH_ML = 86, CH_MR = 26, CH_PT = 54, CH_PH = 300, CH_ROW = 18 };
enum { MAX_ROWS_PER_THREAD = 4, MAX_BAND_ROWS = 12 };

/* Region band colours, picked by a hash of the region's name. */
static const char *const region_color[8] = {"#8da0cb", "#a6d854", "#ffd92f", "#e5c494",
                                            "#66c2a5", "#fc8d62", "#e78ac3", "#b3b3b3"};

/*
 * One chart being drawn: where, what, the plot's geometry and the timeline's samples as drawn.
 * The samples are the points, after a lead sample at time 0 with nothing live unless the first
 * point is at 0; sample s holds from its start (gp__timeline_start) to the next sample's start,
 * the last one to t_max.
 */
typedef struct chart {
    FILE *out;
    gp_profile *p;
    const bool *used; /* [LP_CAT_COUNT] */
    double x0, pw, y0, ph;
    double t_max; /* ns at the right edge */
    double y_max; /* bytes at the top */
    size_t n;     /* samples, the lead one included */
    size_t lead;  /* 1 if there is a lead sample */
} chart;

static double cx(const chart *c, double t)
{
    return c->x0 + c->pw * (t / c->t_max);
}
static double cy(const chart *c, double v)
{
    return c->y0 + c->ph - c->ph * (v / c->y_max);
}

/* When sample s starts. */
static double sample_start(const chart *c, size_t s)
{
    return s < c->lead ? 0.0 : (double)gp__timeline_start(c->p, s - c->lead);
}

/* Sample s's point, or NULL for the lead sample. */
static const gp_timeline_point *sample_point(const chart *c, size_t s)
{
    return s < c->lead ? NULL : &c->p->timeline[s - c->lead];
}

/* ---- axes ------------------------------------------------------------------------------------ */

void gp__svg_axes_fit(gp__svg_axes *a, const gp_profile *p)
{
    uint64_t v = p->peak_bytes, t = p->duration_ns;
    for (size_t i = 0; i < p->n_timeline; i++) {
        if (p->timeline[i].max_total > v)
            v = p->timeline[i].max_total;
        if (p->timeline[i].live_total > v)
            v = p->timeline[i].live_total;
    }
    if (p->n_timeline > 0 && p->timeline[p->n_timeline - 1].time_ns > t)
        t = p->timeline[p->n_timeline - 1].time_ns;
    double tmax = t > 0 ? (double)t : 1.0;
    if (tmax > a->t_max)
        a->t_max = tmax;
    if (v > a->v_max)
        a->v_max = v;
    gp__timeline_used_categories(p, a->used);
}

/* 1, 2 or 5 times a power of ten, the smallest such >= raw (raw > 0). */
static double nice_step(double raw)
{
    double mag = 1.0;
    if (!(raw > 0.0))
        return 1.0;
    while (mag * 10.0 <= raw)
        mag *= 10.0;
    while (mag > raw)
        mag /= 10.0;
    double f = raw / mag;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * mag;
}

typedef struct byte_axis {
    double unit;      /* bytes per label unit */
    const char *name; /* "KiB" */
    double step;      /* in label units */
    int n;            /* ticks above 0 */
} byte_axis;

/* A y axis from 0 to at least vmax bytes, in the binary unit that fits, about 5 ticks. */
static void byte_axis_make(double vmax, byte_axis *a)
{
    static const char *const names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (vmax < 1.0)
        vmax = 1024.0;
    size_t k = 0;
    a->unit = 1.0;
    while (k + 1 < sizeof names / sizeof names[0] && vmax / a->unit >= 1024.0) {
        a->unit *= 1024.0;
        k++;
    }
    a->name = names[k];
    double v = vmax / a->unit;
    a->step = nice_step(v / 5.0);
    if (k == 0 && a->step < 1.0)
        a->step = 1.0;
    a->n = 1;
    while (a->n * a->step < v * (1.0 - 1e-9))
        a->n++;
}

/* A time label for t ns on an axis whose ticks are `step` ns apart. */
static void time_label(double t, double step, char *buf, size_t size)
{
    if (t == 0.0)
        snprintf(buf, size, "0");
    else if (step >= 1e9)
        snprintf(buf, size, "%g s", t / 1e9);
    else if (step >= 1e6)
        snprintf(buf, size, "%g ms", t / 1e6);
    else if (step >= 1e3)
        snprintf(buf, size, "%g \xc2\xb5s", t / 1e3);
    else
        snprintf(buf, size, "%g ns", t);
}

/* The plot area, the y grid and its labels. */
static void draw_y_axis(const chart *c, const byte_axis *ya)
{
    FILE *out = c->out;
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fbfcfd\" "
            "stroke=\"#d5d9e0\"/>\n",
            c->x0, c->y0, c->pw, c->ph);
    for (int i = 0; i <= ya->n; i++) {
        double v = i * ya->step * ya->unit, y = cy(c, v);
        if (i > 0)
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e9ee\"/>\n",
                    c->x0, y, c->x0 + c->pw, y);
        if (i == 0)
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n", c->x0 - 6.0,
                    y + 4.0);
        else
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
                    c->x0 - 6.0, y + 4.0, i * ya->step, ya->name);
    }
}

/* Ticks and time labels along the bottom, about 8. */
static void draw_x_axis(const chart *c)
{
    double tstep = nice_step(c->t_max / 8.0);
    if (tstep < 1.0)
        tstep = 1.0;
    for (int i = 0; i * tstep <= c->t_max * (1.0 + 1e-9); i++) {
        double x = cx(c, i * tstep);
        char lab[32];
        time_label(i * tstep, tstep, lab, sizeof lab);
        fprintf(c->out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#9aa2b1\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x, c->y0 + c->ph, x, c->y0 + c->ph + 5.0, x, c->y0 + c->ph + 18.0, lab);
    }
}

/* The legend along the top: the used categories, the max line, the peak. */
static void draw_legend(const chart *c)
{
    FILE *out = c->out;
    double lx = c->x0;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (!c->used[k])
            continue;
        const char *name = lp_category_name((lp_category)k);
        fprintf(out,
                "<rect x=\"%.0f\" y=\"9\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"19.5\">%s</text>\n",
                lx, gp__html_cat_color[k], lx + 16.0, name);
        lx += 16.0 + 6.5 * (double)strlen(name) + 18.0;
    }
    fprintf(
        out,
        "<line x1=\"%.0f\" y1=\"15\" x2=\"%.0f\" y2=\"15\" stroke=\"#333\" stroke-opacity=\"0.6\" "
        "stroke-dasharray=\"3 2\"/><text x=\"%.0f\" y=\"19.5\">max in sample</text>\n",
        lx, lx + 16.0, lx + 20.0);
    lx += 20.0 + 6.5 * 13 + 18.0;
    fprintf(
        out,
        "<line x1=\"%.0f\" y1=\"9\" x2=\"%.0f\" y2=\"21\" stroke=\"#b00020\" stroke-width=\"2\"/>"
        "<text x=\"%.0f\" y=\"19.5\">peak</text>\n",
        lx + 6.0, lx + 6.0, lx + 12.0);
}

/* ---- the areas and the max line -------------------------------------------------------------- */

typedef struct pt {
    double x, y;
} pt;

static long px10(double v)
{
    return (long)(v * 10.0 + (v < 0 ? -0.5 : 0.5));
}

/* Writes the points of a polyline as " L x,y" (or "M x,y" first when `move`), leaving out the
 * middle points of horizontal runs (they draw nothing). */
static void path_points(FILE *out, const pt *v, size_t n, bool move)
{
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && i + 1 < n && px10(v[i - 1].y) == px10(v[i].y) &&
            px10(v[i].y) == px10(v[i + 1].y))
            continue;
        fprintf(out, "%s%.1f,%.1f", i == 0 && move ? "M" : " L", v[i].x, v[i].y);
    }
}

/* The stacked areas, bottom category first. Each is a step line: point j of an edge is sample
 * j/2 at the start of sample (j+1)/2 (the last point: at t_max); the area closes along the
 * previous category's edge, backwards. Returns -1 when out of memory. */
static int draw_areas(const chart *c)
{
    size_t m = 2 * c->n;
    if (m == 0)
        return 0;
    pt *up = malloc(m * sizeof *up), *lo = malloc(m * sizeof *lo);
    double *cum = calloc(m, sizeof *cum);
    if (up == NULL || lo == NULL || cum == NULL) {
        free(up);
        free(lo);
        free(cum);
        return -1;
    }
    for (size_t j = 0; j < m; j++) {
        size_t ts = (j + 1) / 2; /* the sample at whose start this point is */
        up[j].x = cx(c, ts >= c->n ? c->t_max : sample_start(c, ts));
    }
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (!c->used[k])
            continue;
        for (size_t j = 0; j < m; j++) {
            const gp_timeline_point *tp = sample_point(c, j / 2);
            double v = tp ? (double)tp->live_by_category[k] : 0.0;
            lo[m - 1 - j].x = up[j].x;
            lo[m - 1 - j].y = cy(c, cum[j]);
            cum[j] += v;
            up[j].y = cy(c, cum[j]);
        }
        fputs("<path d=\"", c->out);
        path_points(c->out, up, m, true);
        path_points(c->out, lo, m, false);
        fprintf(c->out,
                " Z\" fill=\"%s\" fill-opacity=\"0.88\" stroke=\"%s\" stroke-width=\"0.6\">"
                "<title>%s</title></path>\n",
                gp__html_cat_color[k], gp__html_cat_color[k], lp_category_name((lp_category)k));
    }
    free(up);
    free(lo);
    free(cum);
    return 0;
}

/* The largest total: within a sample's bucket its max_total, from the bucket's end to the next
 * bucket's start (nothing happened) its live total; or a note when nothing was ever live.
 * Returns -1 when out of memory. */
static int draw_max_line(const chart *c)
{
    bool any = false;
    for (int k = 0; k < LP_CAT_COUNT; k++)
        any = any || c->used[k];
    if (c->n == 0 || !any) {
        fprintf(c->out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"lbl\">No memory "
                "was live at any time in this trace.</text>\n",
                c->x0 + c->pw / 2.0, c->y0 + c->ph / 2.0);
        return 0;
    }
    pt *line = malloc(4 * c->n * sizeof *line);
    if (line == NULL)
        return -1;
    size_t k = 0;
    for (size_t s = 0; s < c->n; s++) {
        const gp_timeline_point *tp = sample_point(c, s);
        double start = sample_start(c, s);
        double next = s + 1 < c->n ? sample_start(c, s + 1) : c->t_max;
        double end = tp ? (double)tp->time_ns : start;
        double mx = tp ? (double)tp->max_total : 0.0;
        double live = tp ? (double)tp->live_total : 0.0;
        end = end > next ? next : end;
        line[k++] = (pt){cx(c, start), cy(c, mx)};
        line[k++] = (pt){cx(c, end), cy(c, mx)};
        line[k++] = (pt){cx(c, end), cy(c, live)};
        line[k++] = (pt){cx(c, next), cy(c, live)};
    }
    fputs("<path d=\"", c->out);
    path_points(c->out, line, k, true);
    fputs("\" fill=\"none\" stroke=\"#333\" stroke-opacity=\"0.6\" stroke-width=\"1\" "
          "stroke-dasharray=\"3 2\"><title>max in sample</title></path>\n",
          c->out);
    free(line);
    return 0;
}

/* ---- marks and the peak ---------------------------------------------------------------------- */

/* The width a mark's label takes in the chart's 10 px font, with the room after it. */
static double mark_label_width(const char *mark)
{
    return 6.0 * (double)strlen(mark) + 10.0;
}

/* Marks: dashed ticks through the plot, each labelled when its label ends before the next mark
 * (marks close together, as a short loop at the end of a long run, keep theirs in the tooltip). */
static void draw_marks(const chart *c)
{
    const gp_profile *p = c->p;
    FILE *out = c->out;
    char h1[32], h2[32];
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        double x = cx(c, (double)it->time_ns);
        bool label = i + 1 == p->n_iterations ||
                     cx(c, (double)p->iterations[i + 1].time_ns) - x >= mark_label_width(it->mark);
        fprintf(out,
                "<g><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7385\" "
                "stroke-opacity=\"0.55\" stroke-dasharray=\"2 3\"/><path d=\"M%.1f,%.1f l-4,-6 h8 "
                "z\" fill=\"#6b7385\"/><title>",
                x, c->y0, x, c->y0 + c->ph, x, c->y0);
        gp__html_escape(out, it->mark);
        fprintf(out, " at %s: %s live</title>", gp__format_ns(it->time_ns, h1, sizeof h1),
                gp_format_bytes(it->live_bytes, h2, sizeof h2));
        if (label) {
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 3.0, c->y0 + 12.0);
            gp__html_escape(out, it->mark);
            fputs("</text>", out);
        }
        fputs("</g>\n", out);
    }
}

/* The peak: a line through the plot, a dot at the peak, its size and time above. */
static void draw_peak(const chart *c)
{
    const gp_profile *p = c->p;
    char h1[32], h2[32];
    if (p->peak_bytes == 0)
        return;
    double x = cx(c, (double)p->peak_time_ns), y = cy(c, (double)p->peak_bytes);
    bool right = x > c->x0 + 0.62 * c->pw;
    fprintf(c->out,
            "<g><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#b00020\" "
            "stroke-width=\"1.5\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#b00020\"/>"
            "<text class=\"pk\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">peak %s at %s</text>"
            "</g>\n",
            x, c->y0 - 14.0, x, c->y0 + c->ph, x, y, right ? x - 5.0 : x + 5.0, c->y0 - 18.0,
            right ? "end" : "start", gp_format_bytes(p->peak_bytes, h1, sizeof h1),
            gp__format_ns(p->peak_time_ns, h2, sizeof h2));
}

/* ---- the region band ------------------------------------------------------------------------- */

/* The band's rows: first_row[thread] is the first row of that thread, -1 if not shown. */
typedef struct band {
    int *first_row; /* indexed by thread id, n_threads + 1 entries */
    int *depths;    /* rows per thread */
    uint32_t n_threads;
    int rows;
    size_t hidden; /* spans that did not fit */
} band;

/* Lays out the band's rows. Returns -1 when out of memory (band_free it still). */
static int band_make(const gp_profile *p, band *b)
{
    memset(b, 0, sizeof *b);
    uint32_t nt = 0;
    for (size_t i = 0; i < p->n_spans; i++)
        if (p->spans[i].thread > nt)
            nt = p->spans[i].thread;
    b->n_threads = nt;
    b->first_row = malloc((nt + 1) * sizeof *b->first_row);
    b->depths = calloc(nt + 1, sizeof *b->depths);
    if (b->first_row == NULL || b->depths == NULL)
        return -1;
    for (size_t i = 0; i < p->n_spans; i++) {
        const gp_region_span *s = &p->spans[i];
        int d = s->depth + 1 > MAX_ROWS_PER_THREAD ? MAX_ROWS_PER_THREAD : (int)s->depth + 1;
        if (d > b->depths[s->thread])
            b->depths[s->thread] = d;
    }
    for (uint32_t t = 0; t <= nt; t++) {
        b->first_row[t] = -1;
        if (b->depths[t] > 0 && b->rows + b->depths[t] <= MAX_BAND_ROWS) {
            b->first_row[t] = b->rows;
            b->rows += b->depths[t];
        }
    }
    for (size_t i = 0; i < p->n_spans; i++) {
        const gp_region_span *s = &p->spans[i];
        if (b->first_row[s->thread] < 0 || s->depth >= MAX_ROWS_PER_THREAD)
            b->hidden++;
    }
    return 0;
}

static void band_free(band *b)
{
    free(b->first_row);
    free(b->depths);
}

static unsigned name_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* One span (or a run of `count` coalesced ones) in the band. */
static void band_rect(const chart *c, double y, const char *name, uint32_t thread, uint64_t begin,
                      uint64_t end, size_t count)
{
    FILE *out = c->out;
    double x1 = cx(c, (double)begin), x2 = cx(c, (double)end);
    double w = x2 - x1 < 1.0 ? 1.0 : x2 - x1;
    char tb[32], te[32], td[32];
    fprintf(out,
            "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" rx=\"2\" "
            "fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.5\"><title>",
            x1, y, w, CH_ROW - 3, region_color[name_hash(name) % 8]);
    gp__html_escape(out, name);
    if (count > 1)
        fprintf(out, " \xc3\x97%zu", count);
    const char *tn = c->p->trace ? gp_trace_thread_name(c->p->trace, thread) : NULL;
    fprintf(out, " (thread %u%s", thread, tn ? " " : "");
    gp__html_escape(out, tn ? tn : "");
    fprintf(out, "): %s \xe2\x80\x93 %s, %s</title></rect>", gp__format_ns(begin, tb, sizeof tb),
            gp__format_ns(end, te, sizeof te), gp__format_ns(end - begin, td, sizeof td));
    size_t len = strlen(name);
    if (count == 1 && w > 6.0 * (double)len + 8.0) {
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x1 + 4.0, y + CH_ROW - 7.0);
        gp__html_escape(out, name);
        fputs("</text>", out);
    }
    fputs("</g>\n", out);
}

/* The spans of thread t at depth d, at height y, in time order; a span of the same name closer
 * than a pixel to the previous one (and the run still under 3 pixels) joins it in one rectangle
 * (a loop of tiny regions). */
static void band_row(const chart *c, uint32_t t, int d, double y)
{
    const gp_profile *p = c->p;
    const gp_region_span *run = NULL;
    uint64_t run_end = 0;
    size_t run_n = 0;
    for (size_t i = 0; i < p->n_spans; i++) { /* spans are in time order per thread */
        const gp_region_span *s = &p->spans[i];
        if (s->thread != t || (int)s->depth != d)
            continue;
        uint64_t end = s->end_ns >= s->begin_ns ? s->end_ns : s->begin_ns;
        if (run != NULL && strcmp(run->name, s->name) == 0 &&
            cx(c, (double)s->begin_ns) - cx(c, (double)run_end) < 1.0 &&
            cx(c, (double)end) - cx(c, (double)run->begin_ns) < 3.0) {
            run_end = end > run_end ? end : run_end;
            run_n++;
            continue;
        }
        if (run != NULL)
            band_rect(c, y, run->name, t, run->begin_ns, run_end, run_n);
        run = s;
        run_end = end;
        run_n = 1;
    }
    if (run != NULL)
        band_rect(c, y, run->name, t, run->begin_ns, run_end, run_n);
}

/* The band from `top` down: each shown thread's label and rows, then a note of what was left
 * out. */
static void draw_band(const chart *c, const band *b, double top)
{
    FILE *out = c->out;
    if (b->rows > 0) {
        fputs("<g class=\"rg\">\n", out);
        for (uint32_t t = 0; t <= b->n_threads; t++) {
            if (b->first_row[t] < 0)
                continue;
            const char *tn = c->p->trace ? gp_trace_thread_name(c->p->trace, t) : NULL;
            char label[64];
            if (b->n_threads <= 1 && t == b->n_threads)
                snprintf(label, sizeof label, "regions");
            else
                snprintf(label, sizeof label, "%.40s", tn ? tn : "thread");
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"lbl\">",
                    c->x0 - 6.0, top + b->first_row[t] * CH_ROW + CH_ROW - 7.0);
            gp__html_escape(out, label);
            fputs("</text>\n", out);
            for (int d = 0; d < b->depths[t]; d++)
                band_row(c, t, d, top + (b->first_row[t] + d) * CH_ROW);
        }
        fputs("</g>\n", out);
    }
    if (b->hidden)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\">%zu region spans not drawn (deeper than %d "
                "levels or beyond %d rows)</text>\n",
                c->x0, top + b->rows * CH_ROW + 10.0, b->hidden, MAX_ROWS_PER_THREAD,
                MAX_BAND_ROWS);
}

/* ---- hover and data -------------------------------------------------------------------------- */

/* A hairline and a transparent hit area that the page's script activates; closes the svg. */
static void draw_hover(const chart *c)
{
    fprintf(c->out,
            "<line class=\"hair\" x1=\"0\" y1=\"%.1f\" x2=\"0\" y2=\"%.1f\" stroke=\"#1d2330\" "
            "stroke-width=\"0.8\" style=\"display:none\"/>\n"
            "<rect class=\"hit\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"transparent\" style=\"pointer-events:none\"/>\n</svg>\n",
            c->y0, c->y0 + c->ph, c->x0, c->y0, c->pw, c->ph);
}

/* The data block for the tooltips: the plot's x and width, t_max, each point's time and start,
 * the used categories with their colours and values per point, the max per point. */
static int write_data(const chart *c, const char *id)
{
    const gp_profile *p = c->p;
    gp__jw j;
    fprintf(c->out, "<script type=\"application/json\" id=\"%s-data\">", id);
    gp__jw_begin_compact(&j, c->out);
    gp__jw_object(&j, NULL, true);
    gp__jw_f64(&j, "x0", c->x0, 1);
    gp__jw_f64(&j, "pw", c->pw, 1);
    gp__jw_f64(&j, "tmax", c->t_max, 0);
    gp__jw_array(&j, "t", true);
    for (size_t i = 0; i < p->n_timeline; i++)
        gp__jw_u64(&j, NULL, p->timeline[i].time_ns);
    gp__jw_end(&j);
    gp__jw_array(&j, "start", true);
    for (size_t i = 0; i < p->n_timeline; i++)
        gp__jw_f64(&j, NULL, sample_start(c, i + c->lead), 0);
    gp__jw_end(&j);
    gp__jw_array(&j, "cats", true);
    for (int k = 0; k < LP_CAT_COUNT; k++)
        if (c->used[k])
            gp__jw_str(&j, NULL, lp_category_name((lp_category)k));
    gp__jw_end(&j);
    gp__jw_array(&j, "colors", true);
    for (int k = 0; k < LP_CAT_COUNT; k++)
        if (c->used[k])
            gp__jw_str(&j, NULL, gp__html_cat_color[k]);
    gp__jw_end(&j);
    gp__jw_array(&j, "v", true);
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (!c->used[k])
            continue;
        gp__jw_array(&j, NULL, true);
        for (size_t i = 0; i < p->n_timeline; i++)
            gp__jw_u64(&j, NULL, p->timeline[i].live_by_category[k]);
        gp__jw_end(&j);
    }
    gp__jw_end(&j);
    gp__jw_array(&j, "max", true);
    for (size_t i = 0; i < p->n_timeline; i++)
        gp__jw_u64(&j, NULL, p->timeline[i].max_total);
    gp__jw_end(&j);
    gp__jw_end(&j);
    int rc = gp__jw_finish_embedded(&j);
    fputs("</script>\n", c->out);
    return rc;
}

/* ---- the chart ------------------------------------------------------------------------------- */

int gp__svg_chart(FILE *out, gp_profile *p, const char *id, const gp__svg_axes *a)
{
    byte_axis ya;
    byte_axis_make((double)a->v_max, &ya);
    chart c = {.out = out,
               .p = p,
               .used = a->used,
               .x0 = CH_ML,
               .pw = CH_W - CH_ML - CH_MR,
               .y0 = CH_PT,
               .ph = CH_PH,
               .t_max = a->t_max,
               .y_max = ya.n * ya.step * ya.unit};
    c.lead = p->n_timeline > 0 && p->timeline[0].time_ns > 0 ? 1 : 0;
    c.n = p->n_timeline + c.lead;
    band b;
    if (band_make(p, &b) != 0) {
        band_free(&b);
        return -1;
    }
    double band_top = c.y0 + c.ph + 30.0;
    double height = band_top + b.rows * CH_ROW + (b.hidden ? 16.0 : 4.0);
    fprintf(out,
            "<svg class=\"chart\" id=\"%s\" viewBox=\"0 0 %d %.0f\" width=\"%d\" height=\"%.0f\" "
            "role=\"img\" aria-label=\"Live memory over time, stacked by category\">\n",
            id, CH_W, height, CH_W, height);
    draw_legend(&c);
    draw_y_axis(&c, &ya);
    int rc = draw_areas(&c);
    if (rc == 0)
        rc = draw_max_line(&c);
    if (rc == 0) {
        draw_x_axis(&c);
        draw_marks(&c);
        draw_peak(&c);
        draw_band(&c, &b, band_top);
        draw_hover(&c);
        rc = write_data(&c, id);
    }
    band_free(&b);
    return rc;
}
