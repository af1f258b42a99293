/*
 * HTML reports: gp_render_html (one run) and gp_render_html_diff (two runs).
 *
 * Each is one self-contained file: inline CSS, the memory timeline drawn here as inline SVG (a
 * stacked area per category, human-unit axes, the peak marked, marks as ticks, region spans as a
 * band under the chart), plain HTML tables, and a little inline JavaScript that only adds sorting
 * and chart tooltips; the page reads the same without it. No URL, font, stylesheet or script is
 * referenced from outside the file, so it opens offline and leaks nothing when shared.
 *
 * Every number comes from the gp_profile / gp_diff; this file only lays them out. Byte cells show
 * a human size and carry the exact bytes in data-v (used for sorting) and in a tooltip.
 */
#include "render.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "render_common.h"

_Static_assert(LP_CAT_COUNT == 9, "one colour per category");
/* Category colours (Tableau 10), in lp_category order; graph memory in warm colours. */
static const char *const cat_color[LP_CAT_COUNT] = {
    "#4e79a7", /* parameter */
    "#76b7b2", /* input */
    "#59a14f", /* activation */
    "#e15759", /* saved */
    "#f28e2b", /* gradient */
    "#b07aa1", /* optimizer_state */
    "#edc948", /* autograd */
    "#bab0ac", /* temporary */
    "#9c755f", /* other */
};

/* Region band colours, picked by a hash of the region's name. */
static const char *const region_color[8] = {"#8da0cb", "#a6d854", "#ffd92f", "#e5c494",
                                            "#66c2a5", "#fc8d62", "#e78ac3", "#b3b3b3"};

static void esc(FILE *out, const char *s)
{
    gp__html_escape(out, s);
}

/* ---- page frame ------------------------------------------------------------------------------ */

/* The page's stylesheet and script, embedded at build time from assets/page.css and
 * assets/page.js (tools/embed_text.cmake). The script sorts table.sortable by a click on a header
 * (numeric by data-v, else text) and shows the chart tooltips from each chart's JSON data block;
 * it marks the page ready (body data-ready="1") last, which the headless-browser test checks. */
extern const char gp__html_page_css[];
extern const char gp__html_page_js[];

static void page_begin(FILE *out, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"gradprof\">\n<title>",
          out);
    esc(out, title);
    fputs("</title>\n<style>\n", out);
    fputs(gp__html_page_css, out);
    fputs("</style>\n</head>\n<body>\n<main>\n", out);
}

static void page_end(FILE *out)
{
    fputs("<footer>Made by gradprof. Self-contained: no network access needed. Click a table "
          "header to sort; hover the charts for values.</footer>\n</main>\n<script>\n",
          out);
    fputs(gp__html_page_js, out);
    fputs("</script>\n</body>\n</html>\n", out);
}

/* ---- cells ----------------------------------------------------------------------------------- */

static void td_bytes_class(FILE *out, uint64_t v, const char *cls)
{
    char h[32];
    fprintf(out, "<td class=\"num%s%s\" data-v=\"%" PRIu64 "\" title=\"%" PRIu64 " bytes\">%s</td>",
            cls ? " " : "", cls ? cls : "", v, v, gp_format_bytes(v, h, sizeof h));
}

static void td_bytes(FILE *out, uint64_t v)
{
    td_bytes_class(out, v, NULL);
}

/* A byte cell with a bar behind it showing v as a fraction of whole. */
static void td_bytes_bar(FILE *out, uint64_t v, uint64_t whole, const char *color)
{
    char h[32];
    double pct = whole ? 100.0 * (double)v / (double)whole : 0.0;
    if (pct > 100.0)
        pct = 100.0;
    fprintf(out,
            "<td class=\"num\" data-v=\"%" PRIu64 "\" title=\"%" PRIu64 " bytes\" "
            "style=\"background:linear-gradient(90deg,%s33 %.1f%%,transparent %.1f%%)\">%s</td>",
            v, v, color, pct, pct, gp_format_bytes(v, h, sizeof h));
}

static void td_delta(FILE *out, int64_t v)
{
    char h[32];
    fprintf(out, "<td class=\"num%s\" data-v=\"%" PRId64 "\" title=\"%+" PRId64 " bytes\">%s</td>",
            v > 0   ? " pos"
            : v < 0 ? " neg"
                    : "",
            v, v, gp__format_delta(v, h, sizeof h));
}

static void td_count(FILE *out, uint64_t v)
{
    char h[32];
    fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\">%s</td>", v,
            gp__format_count(v, h, sizeof h));
}

static void td_time(FILE *out, uint64_t ns)
{
    char h[32];
    fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\" title=\"%" PRIu64 " ns\">%s</td>", ns,
            ns, gp__format_ns(ns, h, sizeof h));
}

static void td_text(FILE *out, const char *s)
{
    fputs("<td>", out);
    esc(out, s);
    fputs("</td>", out);
}

/* A text cell that shows `empty` (greyed) for an empty string. */
static void td_text_or(FILE *out, const char *s, const char *empty)
{
    if (s == NULL || s[0] == '\0') {
        fprintf(out, "<td class=\"note\">%s</td>", empty);
        return;
    }
    td_text(out, s);
}

static void td_category(FILE *out, lp_category c)
{
    if ((int)c < 0 || c >= LP_CAT_COUNT) {
        fputs("<td></td>", out);
        return;
    }
    fprintf(out, "<td%s><i class=\"sw\" style=\"background:%s\"></i>%s</td>",
            lp_category_is_graph((lp_category)c) ? " class=\"graph\"" : "", cat_color[c], lp_category_name(c));
}

/* The header row of a table: columns whose name starts with '#' are numeric (right-aligned). */
static void table_begin(FILE *out, const char *cls, const char *const *cols, size_t n)
{
    fprintf(out, "<table class=\"%s\"><thead><tr>", cls);
    for (size_t i = 0; i < n; i++) {
        bool num = cols[i][0] == '#';
        fprintf(out, "<th%s>", num ? " class=\"num\"" : "");
        esc(out, cols[i] + (num ? 1 : 0));
        fputs("</th>", out);
    }
    fputs("</tr></thead>\n<tbody>\n", out);
}

/* Closes a table; `shown` of `total` rows were written. */
static void table_end(FILE *out, size_t shown, size_t total)
{
    fputs("</tbody></table>\n", out);
    if (shown < total)
        fprintf(out, "<p class=\"note\">%zu more rows not shown (use --top 0 for all).</p>\n",
                total - shown);
}

/* The frames of a site as a <details> list (innermost first), or its label alone. */
static void site_cell(FILE *out, gp_profile *p, uint32_t stack)
{
    const char *frames[48];
    size_t n = stack ? gp_site_frames(p, stack, frames, 48) : 0;
    fputs("<td class=\"mono\">", out);
    if (n <= 1) {
        esc(out, gp_site_label(p, stack));
    } else {
        fputs("<details><summary>", out);
        esc(out, gp_site_label(p, stack));
        fputs("</summary><ol>", out);
        for (size_t i = 0; i < n; i++) {
            fputs("<li>", out);
            esc(out, frames[i]);
            fputs("</li>", out);
        }
        fputs("</ol></details>", out);
    }
    fputs("</td>", out);
}

static size_t limit_rows(size_t n, const gp_render_options *o)
{
    size_t top = o != NULL ? o->top : 10;
    return top == 0 || top > n ? n : top;
}

/* ---- the chart ------------------------------------------------------------------------------- */

enum { CH_W = 1160, CH_ML = 86, CH_MR = 26, CH_PT = 54, CH_PH = 300, CH_ROW = 18 };
enum { MAX_ROWS_PER_THREAD = 4, MAX_BAND_ROWS = 12 };

typedef struct chart {
    double x0, pw, y0, ph;
    double t_max; /* ns at the right edge */
    double y_max; /* bytes at the top */
} chart;

static double cx(const chart *c, double t)
{
    return c->x0 + c->pw * (t / c->t_max);
}
static double cy(const chart *c, double v)
{
    return c->y0 + c->ph - c->ph * (v / c->y_max);
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

/* The region band's rows: row_of[thread] is the first row of that thread, -1 if not shown. */
typedef struct band {
    int *first_row; /* indexed by thread id, n_threads + 1 entries */
    int *depths;    /* rows per thread */
    uint32_t n_threads;
    int rows;
    size_t hidden; /* spans that did not fit */
} band;

static int band_make(gp_profile *p, band *b)
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

/* One span (or a run of coalesced ones) in the band. */
static void band_rect(FILE *out, gp_profile *p, const chart *c, double y, const char *name,
                      uint32_t thread, uint64_t begin, uint64_t end, size_t count)
{
    double x1 = cx(c, (double)begin), x2 = cx(c, (double)end);
    double w = x2 - x1 < 1.0 ? 1.0 : x2 - x1;
    char tb[32], te[32], td[32];
    fprintf(out,
            "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" rx=\"2\" "
            "fill=\"%s\" stroke=\"#fff\" stroke-width=\"0.5\"><title>",
            x1, y, w, CH_ROW - 3, region_color[name_hash(name) % 8]);
    esc(out, name);
    if (count > 1)
        fprintf(out, " \xc3\x97%zu", count);
    const char *tn = p->trace ? gp_trace_thread_name(p->trace, thread) : NULL;
    fprintf(out, " (thread %u%s", thread, tn ? " " : "");
    esc(out, tn ? tn : "");
    fprintf(out, "): %s \xe2\x80\x93 %s, %s</title></rect>", gp__format_ns(begin, tb, sizeof tb),
            gp__format_ns(end, te, sizeof te), gp__format_ns(end - begin, td, sizeof td));
    size_t len = strlen(name);
    if (count == 1 && w > 6.0 * (double)len + 8.0) {
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x1 + 4.0, y + CH_ROW - 7.0);
        esc(out, name);
        fputs("</text>", out);
    }
    fputs("</g>\n", out);
}

/* Draws the band: spans of a row are drawn in time order; spans of the same name closer than a
 * pixel to the previous one are coalesced into one rectangle (a loop of tiny regions). */
static void band_draw(FILE *out, gp_profile *p, const chart *c, const band *b, double top)
{
    if (b->rows == 0)
        return;
    fputs("<g class=\"rg\">\n", out);
    for (uint32_t t = 0; t <= b->n_threads; t++) {
        if (b->first_row[t] < 0)
            continue;
        const char *tn = p->trace ? gp_trace_thread_name(p->trace, t) : NULL;
        char label[64];
        if (b->n_threads <= 1 && b->rows > 0 && t == b->n_threads)
            snprintf(label, sizeof label, "regions");
        else
            snprintf(label, sizeof label, "%.40s", tn ? tn : "thread");
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" class=\"lbl\">", c->x0 - 6.0,
                top + b->first_row[t] * CH_ROW + CH_ROW - 7.0);
        esc(out, label);
        fputs("</text>\n", out);
        for (int d = 0; d < b->depths[t]; d++) {
            double y = top + (b->first_row[t] + d) * CH_ROW;
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
                    band_rect(out, p, c, y, run->name, t, run->begin_ns, run_end, run_n);
                run = s;
                run_end = end;
                run_n = 1;
            }
            if (run != NULL)
                band_rect(out, p, c, y, run->name, t, run->begin_ns, run_end, run_n);
        }
    }
    fputs("</g>\n", out);
}

/* The largest live total a profile's chart must show. */
static uint64_t chart_vmax(const gp_profile *p)
{
    uint64_t m = p->peak_bytes;
    for (size_t i = 0; i < p->n_timeline; i++) {
        if (p->timeline[i].max_total > m)
            m = p->timeline[i].max_total;
        if (p->timeline[i].live_total > m)
            m = p->timeline[i].live_total;
    }
    return m;
}

static double chart_tmax(const gp_profile *p)
{
    uint64_t t = p->duration_ns;
    if (p->n_timeline > 0 && p->timeline[p->n_timeline - 1].time_ns > t)
        t = p->timeline[p->n_timeline - 1].time_ns;
    return t > 0 ? (double)t : 1.0;
}

/* The timeline's samples as drawn: the points, after a lead sample at time 0 with nothing live
 * unless the first point is at 0. */
typedef struct samples {
    size_t n;    /* samples, the lead one included */
    size_t lead; /* 1 if there is a lead sample */
} samples;

static void samples_geom(const gp_profile *p, samples *s)
{
    s->lead = p->n_timeline > 0 && p->timeline[0].time_ns > 0 ? 1 : 0;
    s->n = p->n_timeline + s->lead;
}

/* When sample i starts (gp__timeline_start). */
static double samples_start(const gp_profile *p, const samples *s, size_t i)
{
    return i < s->lead ? 0.0 : (double)gp__timeline_start(p, i - s->lead);
}

/*
 * Writes the chart of one profile as <svg id=ID class="chart"> plus its data block for the
 * tooltip script. The y axis reaches at least vmax bytes and the x axis spans t_max ns, so two
 * charts drawn with the same values share their axes; `used` lists the categories to draw and put
 * in the legend. Returns -1 when out of memory.
 */
static int write_chart(FILE *out, gp_profile *p, const char *id, double t_max, uint64_t vmax,
                       const bool used[LP_CAT_COUNT])
{
    byte_axis ya;
    byte_axis_make((double)vmax, &ya);
    chart c = {.x0 = CH_ML,
               .pw = CH_W - CH_ML - CH_MR,
               .y0 = CH_PT,
               .ph = CH_PH,
               .t_max = t_max,
               .y_max = ya.n * ya.step * ya.unit};
    band b;
    if (band_make(p, &b) != 0) {
        band_free(&b);
        return -1;
    }
    double band_top = c.y0 + c.ph + 30.0;
    double height = band_top + b.rows * CH_ROW + (b.hidden ? 16.0 : 4.0);
    char h1[32], h2[32];

    /* The samples (see samples_geom): the areas are steps, sample s holding from its bucket's
     * start to the next sample's bucket start, the last to the end of the axis. Point j of an
     * edge is sample j/2 at the start of sample (j+1)/2 (the last point: at t_max). */
    samples sm;
    samples_geom(p, &sm);
    size_t n = sm.n, lead = sm.lead;
    size_t m = n > 0 ? 2 * n : 0;
    size_t mm = 4 * n; /* points of the max line */
    m = m > mm ? m : mm;
    pt *up = malloc((m ? m : 1) * sizeof *up), *lo = malloc((m ? m : 1) * sizeof *lo);
    double *cum = calloc(m ? m : 1, sizeof *cum);
    m = n > 0 ? 2 * n : 0;
    if (up == NULL || lo == NULL || cum == NULL) {
        free(up);
        free(lo);
        free(cum);
        band_free(&b);
        return -1;
    }

    fprintf(out,
            "<svg class=\"chart\" id=\"%s\" viewBox=\"0 0 %d %.0f\" width=\"%d\" height=\"%.0f\" "
            "role=\"img\" aria-label=\"Live memory over time, stacked by category\">\n",
            id, CH_W, height, CH_W, height);

    /* legend */
    double lx = c.x0;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (!used[k])
            continue;
        const char *name = lp_category_name((lp_category)k);
        fprintf(out,
                "<rect x=\"%.0f\" y=\"9\" width=\"12\" height=\"12\" rx=\"2\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"19.5\">%s</text>\n",
                lx, cat_color[k], lx + 16.0, name);
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

    /* plot area, y grid and labels */
    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fbfcfd\" "
            "stroke=\"#d5d9e0\"/>\n",
            c.x0, c.y0, c.pw, c.ph);
    for (int i = 0; i <= ya.n; i++) {
        double v = i * ya.step * ya.unit, y = cy(&c, v);
        if (i > 0)
            fprintf(out,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e9ee\"/>\n",
                    c.x0, y, c.x0 + c.pw, y);
        if (i == 0)
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">0</text>\n", c.x0 - 6.0,
                    y + 4.0);
        else
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n",
                    c.x0 - 6.0, y + 4.0, i * ya.step, ya.name);
    }

    /* stacked areas, bottom category first */
    for (size_t j = 0; j < m; j++) {
        size_t ts = (j + 1) / 2; /* the sample at whose start this point is */
        up[j].x = cx(&c, ts >= n ? t_max : samples_start(p, &sm, ts));
    }
    for (int k = 0; k < LP_CAT_COUNT && m > 0; k++) {
        if (!used[k])
            continue;
        for (size_t j = 0; j < m; j++) { /* lo is the lower edge backwards, to close the area */
            size_t si = j / 2;
            double v = si < lead ? 0.0 : (double)p->timeline[si - lead].live_by_category[k];
            lo[m - 1 - j].x = up[j].x;
            lo[m - 1 - j].y = cy(&c, cum[j]);
            cum[j] += v;
            up[j].y = cy(&c, cum[j]);
        }
        fputs("<path d=\"", out);
        path_points(out, up, m, true);
        path_points(out, lo, m, false);
        fprintf(out,
                " Z\" fill=\"%s\" fill-opacity=\"0.88\" stroke=\"%s\" stroke-width=\"0.6\">"
                "<title>%s</title></path>\n",
                cat_color[k], cat_color[k], lp_category_name((lp_category)k));
    }

    /* The largest total: within a sample's bucket its max_total, from the bucket's end to the
     * next bucket's start (nothing happened) its live total. */
    bool any = false;
    for (int k = 0; k < LP_CAT_COUNT; k++)
        any = any || used[k];
    if (m > 0 && any) {
        size_t k = 0;
        for (size_t si = 0; si < n; si++) {
            double start = samples_start(p, &sm, si);
            double next = si + 1 < n ? samples_start(p, &sm, si + 1) : t_max;
            double end = si < lead ? start : (double)p->timeline[si - lead].time_ns;
            double mx = si < lead ? 0.0 : (double)p->timeline[si - lead].max_total;
            double live = si < lead ? 0.0 : (double)p->timeline[si - lead].live_total;
            end = end > next ? next : end;
            up[k++] = (pt){cx(&c, start), cy(&c, mx)};
            up[k++] = (pt){cx(&c, end), cy(&c, mx)};
            up[k++] = (pt){cx(&c, end), cy(&c, live)};
            up[k++] = (pt){cx(&c, next), cy(&c, live)};
        }
        fputs("<path d=\"", out);
        path_points(out, up, k, true);
        fputs("\" fill=\"none\" stroke=\"#333\" stroke-opacity=\"0.6\" stroke-width=\"1\" "
              "stroke-dasharray=\"3 2\"><title>max in sample</title></path>\n",
              out);
    } else {
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" class=\"lbl\">No memory "
                "was live at any time in this trace.</text>\n",
                c.x0 + c.pw / 2.0, c.y0 + c.ph / 2.0);
    }

    /* x axis */
    double tstep = nice_step(t_max / 8.0);
    if (tstep < 1.0)
        tstep = 1.0;
    for (int i = 0; i * tstep <= t_max * (1.0 + 1e-9); i++) {
        double x = cx(&c, i * tstep);
        char lab[32];
        time_label(i * tstep, tstep, lab, sizeof lab);
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#9aa2b1\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                x, c.y0 + c.ph, x, c.y0 + c.ph + 5.0, x, c.y0 + c.ph + 18.0, lab);
    }

    /* marks: dashed ticks through the plot, labelled when there is room */
    size_t longest = 1;
    for (size_t i = 0; i < p->n_iterations; i++)
        if (strlen(p->iterations[i].mark) > longest)
            longest = strlen(p->iterations[i].mark);
    bool mark_labels =
        p->n_iterations > 0 && c.pw / (double)p->n_iterations >= 6.0 * (double)longest + 10.0;
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        double x = cx(&c, (double)it->time_ns);
        fprintf(out,
                "<g><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#6b7385\" "
                "stroke-opacity=\"0.55\" stroke-dasharray=\"2 3\"/><path d=\"M%.1f,%.1f l-4,-6 h8 "
                "z\" fill=\"#6b7385\"/><title>",
                x, c.y0, x, c.y0 + c.ph, x, c.y0);
        esc(out, it->mark);
        fprintf(out, " at %s: %s live</title>", gp__format_ns(it->time_ns, h1, sizeof h1),
                gp_format_bytes(it->live_bytes, h2, sizeof h2));
        if (mark_labels) {
            fprintf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 3.0, c.y0 + 12.0);
            esc(out, it->mark);
            fputs("</text>", out);
        }
        fputs("</g>\n", out);
    }

    /* the peak */
    if (p->peak_bytes > 0) {
        double x = cx(&c, (double)p->peak_time_ns), y = cy(&c, (double)p->peak_bytes);
        bool right = x > c.x0 + 0.62 * c.pw;
        fprintf(out,
                "<g><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#b00020\" "
                "stroke-width=\"1.5\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#b00020\"/>"
                "<text class=\"pk\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\">peak %s at %s</text>"
                "</g>\n",
                x, c.y0 - 14.0, x, c.y0 + c.ph, x, y, right ? x - 5.0 : x + 5.0, c.y0 - 18.0,
                right ? "end" : "start", gp_format_bytes(p->peak_bytes, h1, sizeof h1),
                gp__format_ns(p->peak_time_ns, h2, sizeof h2));
    }

    band_draw(out, p, &c, &b, band_top);
    if (b.hidden)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\">%zu region spans not drawn (deeper than %d "
                "levels or beyond %d rows)</text>\n",
                c.x0, band_top + b.rows * CH_ROW + 10.0, b.hidden, MAX_ROWS_PER_THREAD,
                MAX_BAND_ROWS);

    /* hover: a hairline and a transparent hit area the script activates */
    fprintf(out,
            "<line class=\"hair\" x1=\"0\" y1=\"%.1f\" x2=\"0\" y2=\"%.1f\" stroke=\"#1d2330\" "
            "stroke-width=\"0.8\" style=\"display:none\"/>\n"
            "<rect class=\"hit\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"transparent\" style=\"pointer-events:none\"/>\n</svg>\n",
            c.y0, c.y0 + c.ph, c.x0, c.y0, c.pw, c.ph);

    /* the data for the tooltips */
    fprintf(out,
            "<script type=\"application/json\" id=\"%s-data\">{\"x0\":%.1f,\"pw\":%.1f,"
            "\"tmax\":%.0f,\"t\":[",
            id, c.x0, c.pw, c.t_max);
    for (size_t i = 0; i < p->n_timeline; i++)
        fprintf(out, "%s%" PRIu64, i ? "," : "", p->timeline[i].time_ns);
    fputs("],\"start\":[", out);
    for (size_t i = 0; i < p->n_timeline; i++)
        fprintf(out, "%s%.0f", i ? "," : "", samples_start(p, &sm, i + lead));
    fputs("],\"cats\":[", out);
    bool first = true;
    for (int k = 0; k < LP_CAT_COUNT; k++)
        if (used[k]) {
            fprintf(out, "%s\"%s\"", first ? "" : ",", lp_category_name((lp_category)k));
            first = false;
        }
    fputs("],\"colors\":[", out);
    first = true;
    for (int k = 0; k < LP_CAT_COUNT; k++)
        if (used[k]) {
            fprintf(out, "%s\"%s\"", first ? "" : ",", cat_color[k]);
            first = false;
        }
    fputs("],\"v\":[", out);
    first = true;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (!used[k])
            continue;
        fprintf(out, "%s[", first ? "" : ",");
        first = false;
        for (size_t i = 0; i < p->n_timeline; i++)
            fprintf(out, "%s%" PRIu64, i ? "," : "", p->timeline[i].live_by_category[k]);
        fputs("]", out);
    }
    fputs("],\"max\":[", out);
    for (size_t i = 0; i < p->n_timeline; i++)
        fprintf(out, "%s%" PRIu64, i ? "," : "", p->timeline[i].max_total);
    fputs("]}</script>\n", out);

    free(up);
    free(lo);
    free(cum);
    band_free(&b);
    return 0;
}

/* ---- the report's parts ---------------------------------------------------------------------- */

static const char *trace_command(const gp_profile *p)
{
    const char *c = p->trace ? gp_trace_meta(p->trace, "command") : NULL;
    return c ? c : "";
}

/* The warnings about what the analysis could not see, one box each; `who` prefixes them ("A: "). */
static void damage_warnings(FILE *out, const gp_profile *p, const char *who)
{
    const gp_trace_info *info = p->info;
    char h[32], e[32];
    if (info != NULL && info->damaged) {
        fprintf(out,
                "<div class=\"warn\"><b>%sDamaged trace:</b> reading stopped at byte %" PRIu64 " (",
                who, info->damage_offset);
        esc(out, info->damage_reason);
        fprintf(out,
                "); %s after it could not be read. Everything before it (%s events) is in "
                "this report.</div>\n",
                gp_format_bytes(info->bytes_lost, h, sizeof h),
                gp__format_count(info->events, e, sizeof e));
    }
    if (info != NULL && !info->clean_end && !info->damaged)
        fprintf(out,
                "<div class=\"warn\"><b>%sIncomplete trace:</b> the program did not finish "
                "recording (no end record); memory live at the end may not be leaked.</div>\n",
                who);
    if (info != NULL && info->lost_events > 0)
        fprintf(out,
                "<div class=\"warn\"><b>%sDropped events:</b> the recorder lost %s events; "
                "totals may be low.</div>\n",
                who, gp__format_count(info->lost_events, h, sizeof h));
}

static void card(FILE *out, const char *cls, const char *key, const char *value, const char *detail)
{
    fprintf(out, "<div class=\"card%s%s\"><div class=\"k\">", cls ? " " : "", cls ? cls : "");
    esc(out, key);
    fputs("</div><div class=\"v\">", out);
    esc(out, value);
    fputs("</div><div class=\"d\">", out);
    esc(out, detail ? detail : "");
    fputs("</div></div>\n", out);
}

static void report_header(FILE *out, gp_profile *p)
{
    char a[64], b[64], c[64], d[160];
    fputs("<header>\n<h1>gradprof report <span class=\"sub\">", out);
    esc(out, p->path ? p->path : "");
    fputs("</span></h1>\n<p class=\"cmd\">command: <code>", out);
    esc(out, trace_command(p));
    fputs("</code></p>\n", out);
    damage_warnings(out, p, "");
    fputs("<div class=\"cards\">\n", out);
    snprintf(d, sizeof d, "%s bytes at %s on %s", gp__format_count(p->peak_bytes, a, sizeof a),
             gp__format_ns(p->peak_time_ns, b, sizeof b),
             gp__device_name(p->primary_device, c, sizeof c));
    card(out, NULL, "peak", gp_format_bytes(p->peak_bytes, a, sizeof a), d);
    snprintf(d, sizeof d, "%s allocations, %s frees", gp__format_count(p->alloc_count, a, sizeof a),
             gp__format_count(p->free_count, b, sizeof b));
    card(out, NULL, "allocated", gp_format_bytes(p->total_allocated_bytes, c, sizeof c), d);
    snprintf(d, sizeof d, "%s bytes in %s buffers", gp__format_count(p->leaked_bytes, a, sizeof a),
             gp__format_count(p->leaked_count, b, sizeof b));
    card(out, p->leaked_bytes ? "bad" : NULL, "live at end",
         gp_format_bytes(p->leaked_bytes, c, sizeof c), d);
    snprintf(d, sizeof d, "%s temporaries", gp__format_count(p->temporary_count, a, sizeof a));
    card(out, NULL, "duration", gp__format_ns(p->duration_ns, b, sizeof b), d);
    snprintf(a, sizeof a, "%zu", p->n_findings);
    card(out, p->n_findings ? "bad" : "good", "findings", a,
         p->n_findings ? "gradient-leak findings below" : "no gradient leak found");
    fputs("</div>\n</header>\n", out);
}

static void report_categories(FILE *out, gp_profile *p)
{
    const gp_device_stats *dev = gp__primary_device(p);
    char h[32], t[32];
    fputs("<section id=\"categories\">\n<h2>By category at peak</h2>\n", out);
    if (dev == NULL) {
        fputs("<p class=\"note\">No memory was recorded.</p>\n</section>\n", out);
        return;
    }
    fprintf(out,
            "<p class=\"note\">What was live on %s at its peak (%s), per category; each "
            "category's own maximum and what was live at the end.</p>\n",
            gp__device_name(dev->device, h, sizeof h),
            gp__format_ns(dev->peak_time_ns, t, sizeof t));
    static const char *const cols[] = {"category", "#at peak", "#bytes",
                                       "#share",   "#own max", "#live at end"};
    table_begin(out, "sortable", cols, 6);
    uint64_t sum = 0;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (dev->by_category_at_peak[k] == 0 && dev->by_category_max[k] == 0 &&
            dev->by_category_live[k] == 0)
            continue;
        sum += dev->by_category_at_peak[k];
        fputs("<tr>", out);
        td_category(out, (lp_category)k);
        td_bytes_bar(out, dev->by_category_at_peak[k], dev->peak_bytes, cat_color[k]);
        fprintf(out, "<td class=\"num mono\" data-v=\"%" PRIu64 "\">%" PRIu64 "</td>",
                dev->by_category_at_peak[k], dev->by_category_at_peak[k]);
        fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\">%s</td>",
                dev->by_category_at_peak[k],
                gp__format_percent(dev->by_category_at_peak[k], dev->peak_bytes, h, sizeof h));
        td_bytes(out, dev->by_category_max[k]);
        td_bytes(out, dev->by_category_live[k]);
        fputs("</tr>\n", out);
    }
    fputs("</tbody><tfoot><tr class=\"total\"><td>total</td>", out);
    td_bytes(out, dev->peak_bytes);
    fprintf(out, "<td class=\"num mono\">%" PRIu64 "</td><td class=\"num\">100%%</td><td></td>",
            dev->peak_bytes);
    td_bytes(out, dev->live_bytes);
    fputs("</tr>", out);
    if (sum != dev->peak_bytes) {
        fputs("<tr class=\"rem\"><td>not in any category</td>", out);
        td_delta(out, (int64_t)(dev->peak_bytes - sum));
        fputs("<td></td><td></td><td></td><td></td></tr>", out);
    }
    fputs("</tfoot></table>\n", out);

    if (p->n_devices > 1) {
        fputs("<h2>Devices</h2>\n", out);
        static const char *const dcols[] = {"device", "#peak", "#at", "#live at end"};
        table_begin(out, "sortable", dcols, 4);
        for (size_t i = 0; i < p->n_devices; i++) {
            const gp_device_stats *ds = &p->devices[i];
            fputs("<tr>", out);
            td_text(out, gp__device_name(ds->device, h, sizeof h));
            td_bytes(out, ds->peak_bytes);
            td_time(out, ds->peak_time_ns);
            td_bytes(out, ds->live_bytes);
            fputs("</tr>\n", out);
        }
        table_end(out, p->n_devices, p->n_devices);
    }
    fputs("</section>\n", out);
}

static void report_findings(FILE *out, gp_profile *p, const gp_render_options *o)
{
    char h[32], t[32], w[32];
    fputs("<section id=\"findings\">\n<h2>Findings</h2>\n", out);
    if (p->n_findings == 0)
        fputs("<div class=\"ok\">No gradient leak found: no graph memory where grad should be "
              "off, no growth across marked iterations.</div>\n",
              out);
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        fprintf(out, "<div class=\"finding\"><div><span class=\"kind\">%s</span><b>",
                gp_finding_kind_name(f->kind));
        esc(out, gp__finding_text(f));
        fputs("</b></div>\n<div class=\"fmeta\">", out);
        if (f->region && f->region[0]) {
            fputs("region <code>", out);
            esc(out, f->region);
            fputs("</code> \xc2\xb7 ", out);
        }
        fprintf(out, "%s (%" PRIu64 " bytes) \xc2\xb7 %s times \xc2\xb7 first at %s</div>\n",
                gp_format_bytes(f->bytes, h, sizeof h), f->bytes,
                gp__format_count(f->count, t, sizeof t),
                gp__format_ns(f->first_time_ns, w, sizeof w));
        if (f->n_items > 0) {
            static const char *const cols[] = {"category", "op",     "module",
                                               "site",     "#bytes", "#count"};
            table_begin(out, "sortable", cols, 6);
            size_t shown = limit_rows(f->n_items, o);
            size_t *ix = gp__sorted_finding_items(f); /* NULL when out of memory: as stored */
            for (size_t j = 0; j < shown; j++) {
                const gp_finding_item *it = &f->items[ix ? ix[j] : j];
                fputs("<tr>", out);
                td_category(out, it->category);
                td_text_or(out, it->op, "-");
                td_text_or(out, it->module, "-");
                site_cell(out, p, it->stack);
                td_bytes(out, it->bytes);
                td_count(out, it->count);
                fputs("</tr>\n", out);
            }
            table_end(out, shown, f->n_items);
            free(ix);
        }
        fputs("</div>\n", out);
    }
    fputs("</section>\n", out);
}

static void report_sites(FILE *out, gp_profile *p, const gp_render_options *o, gp__measure m,
                         const char *id, const char *title, const char *note)
{
    size_t n = 0;
    size_t *idx = gp__sorted_sites(p, m, &n);
    if (idx == NULL) /* empty, or out of memory */
        n = 0;
    size_t nz = 0; /* rows with a non-zero value */
    for (size_t i = 0; i < n; i++)
        if (gp__stats_measure(&p->sites[idx[i]].stats, m) != 0)
            nz++;
    fprintf(out, "<section id=\"%s\">\n<h2>%s</h2>\n<p class=\"note\">%s</p>\n", id, title, note);
    if (nz == 0) {
        fputs("<p class=\"note\">None.</p>\n</section>\n", out);
        free(idx);
        return;
    }
    static const char *const cols[] = {"#",        "site",       "category",     "op @ module",
                                       "#at peak", "#allocated", "#allocations", "#live at end"};
    table_begin(out, "sortable", cols, 8);
    size_t shown = limit_rows(nz, o);
    for (size_t i = 0; i < shown; i++) {
        gp_site *s = &p->sites[idx[i]];
        fprintf(out, "<tr><td class=\"num\" data-v=\"%zu\">%zu</td>", i + 1, i + 1);
        site_cell(out, p, s->stack);
        td_category(out, s->category);
        fputs("<td>", out);
        if (s->op && s->op[0]) {
            esc(out, s->op);
            if (s->module && s->module[0]) {
                fputs(" @ ", out);
                esc(out, s->module);
            }
        }
        fputs("</td>", out);
        td_bytes_bar(out, s->stats.peak_bytes, p->peak_bytes,
                     cat_color[s->category % LP_CAT_COUNT]);
        td_bytes(out, s->stats.total_bytes);
        td_count(out, s->stats.count);
        td_bytes(out, s->stats.live_bytes);
        fputs("</tr>\n", out);
    }
    table_end(out, shown, nz);
    fputs("</section>\n", out);
    free(idx);
}

static void report_saved(FILE *out, gp_profile *p, const gp_render_options *o)
{
    fputs("<section id=\"saved\">\n<h2>Tensors saved for backward</h2>\n", out);
    size_t n = 0;
    size_t *idx = gp__sorted_saved(p, &n);
    if (idx == NULL)
        n = 0;
    if (n == 0) {
        fputs("<p class=\"note\">None: no op kept a tensor for a backward pass.</p>\n</section>\n",
              out);
        free(idx);
        return;
    }
    fputs("<p class=\"note\">Activations an op kept alive for a backward pass, by module, op and "
          "shape.</p>\n",
          out);
    static const char *const cols[] = {"module",       "op",       "shape",     "#times saved",
                                       "#bytes saved", "#at peak", "#max live", "#live at end"};
    table_begin(out, "sortable", cols, 8);
    size_t shown = limit_rows(n, o);
    for (size_t i = 0; i < shown; i++) {
        const gp_saved_tensor *s = &p->saved[idx[i]];
        fputs("<tr>", out);
        td_text_or(out, s->module, "(no module)");
        td_text(out, s->op);
        fputs("<td class=\"mono\">", out);
        esc(out, s->shape);
        fputs("</td>", out);
        td_count(out, s->stats.count);
        td_bytes(out, s->stats.total_bytes);
        td_bytes_bar(out, s->stats.peak_bytes, p->peak_bytes, cat_color[LP_CAT_SAVED]);
        td_bytes(out, s->stats.max_live_bytes);
        td_bytes_class(out, s->stats.live_bytes, s->stats.live_bytes ? "graph" : NULL);
        fputs("</tr>\n", out);
    }
    table_end(out, shown, n);
    fputs("</section>\n", out);
    free(idx);
}

static void report_regions(FILE *out, gp_profile *p, const gp_render_options *o)
{
    fputs("<section id=\"regions\">\n<h2>Regions</h2>\n", out);
    size_t n = 0;
    size_t *idx = gp__sorted_regions(p, &n);
    if (idx == NULL)
        n = 0;
    if (n == 0) {
        fputs("<p class=\"note\">The program marked no regions.</p>\n</section>\n", out);
        free(idx);
        return;
    }
    fputs("<p class=\"note\">Graph bytes: saved, autograd and gradient memory allocated inside. "
          "Retained: the most bytes allocated inside and still live at one exit.</p>\n",
          out);
    static const char *const cols[] = {"region",    "#entries",  "#allocated inside",
                                       "#max live", "#retained", "#graph bytes"};
    table_begin(out, "sortable", cols, 6);
    size_t shown = limit_rows(n, o);
    for (size_t i = 0; i < shown; i++) {
        const gp_region_stats *r = &p->regions[idx[i]];
        fputs("<tr>", out);
        td_text(out, r->name);
        td_count(out, r->entries);
        td_bytes(out, r->allocated_bytes);
        td_bytes(out, r->max_live_bytes);
        td_bytes(out, r->retained_bytes);
        td_bytes_class(out, r->graph_bytes, r->graph_bytes ? "graph" : NULL);
        fputs("</tr>\n", out);
    }
    table_end(out, shown, n);
    fputs("</section>\n", out);
    free(idx);
}

static void report_iterations(FILE *out, gp_profile *p)
{
    fputs("<section id=\"iterations\">\n<h2>Iterations</h2>\n", out);
    if (p->n_iterations == 0) {
        fputs("<p class=\"note\">The program made no marks (lp_mark), so there are no "
              "iterations to compare.</p>\n</section>\n",
              out);
        return;
    }
    bool used[LP_CAT_COUNT] = {false};
    uint64_t top = 0;
    for (size_t i = 0; i < p->n_iterations; i++) {
        for (int k = 0; k < LP_CAT_COUNT; k++)
            if (p->iterations[i].live_by_category[k])
                used[k] = true;
        if (p->iterations[i].live_bytes > top)
            top = p->iterations[i].live_bytes;
    }
    fputs("<p class=\"note\">Live bytes at each mark; memory that grows from mark to mark is "
          "kept alive across iterations.</p>\n",
          out);
    fputs("<table class=\"sortable\"><thead><tr><th>mark</th><th class=\"num\">at</th>"
          "<th class=\"num\">live</th><th class=\"num\">change</th>",
          out);
    for (int k = 0; k < LP_CAT_COUNT; k++)
        if (used[k])
            fprintf(out, "<th class=\"num\">%s</th>", lp_category_name((lp_category)k));
    fputs("</tr></thead>\n<tbody>\n", out);
    for (size_t i = 0; i < p->n_iterations; i++) {
        const gp_iteration *it = &p->iterations[i];
        fputs("<tr>", out);
        td_text(out, it->mark);
        td_time(out, it->time_ns);
        td_bytes_bar(out, it->live_bytes, top, "#4e79a7");
        if (i == 0)
            fputs("<td class=\"num\" data-v=\"0\"></td>", out);
        else
            td_delta(out, (int64_t)(it->live_bytes - p->iterations[i - 1].live_bytes));
        for (int k = 0; k < LP_CAT_COUNT; k++)
            if (used[k])
                td_bytes_class(out, it->live_by_category[k],
                               lp_category_is_graph((lp_category)k) && it->live_by_category[k] ? "graph" : NULL);
        fputs("</tr>\n", out);
    }
    fputs("</tbody></table>\n</section>\n", out);
}

static int report_timeline(FILE *out, gp_profile *p)
{
    char h[32];
    bool used[LP_CAT_COUNT] = {false};
    gp__timeline_used_categories(p, used);
    fprintf(out,
            "<section id=\"timeline\">\n<h2>Memory over time</h2>\n<p class=\"note\">Live "
            "bytes on %s, stacked by category",
            gp__device_name(p->primary_device, h, sizeof h));
    if (p->n_timeline > 0)
        fprintf(out,
                ", sampled at %zu points (the dashed line is the largest total within each "
                "sample)",
                p->n_timeline);
    fputs(". Region spans run under the chart; triangles are marks.</p>\n", out);
    if (write_chart(out, p, "chart-run", chart_tmax(p), chart_vmax(p), used) != 0)
        return -1;
    fputs("</section>\n", out);
    return 0;
}

int gp_render_html(FILE *out, gp_profile *p, const gp_render_options *o)
{
    char title[512], h[32];
    snprintf(title, sizeof title, "gradprof report: %s (peak %s)",
             trace_command(p)[0] ? trace_command(p) : (p->path ? p->path : "trace"),
             gp_format_bytes(p->peak_bytes, h, sizeof h));
    page_begin(out, title);
    report_header(out, p);
    if (report_timeline(out, p) != 0)
        return -1;
    report_findings(out, p, o);
    report_categories(out, p);
    report_sites(out, p, o, GP__MEASURE_PEAK, "sites", "Top sites at peak",
                 "Call sites by bytes live at the peak; open a site for its frames.");
    report_saved(out, p, o);
    report_regions(out, p, o);
    report_iterations(out, p);
    report_sites(out, p, o, GP__MEASURE_LEAKED, "leaks", "Live at end",
                 "Call sites whose memory was still live when the trace ended.");
    page_end(out);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return 0;
}

/* ---- the diff -------------------------------------------------------------------------------- */

/* A diff row's bytes: A, B, delta, held. */
static void diff_cells(FILE *out, const gp_diff_row *r, uint64_t held_total)
{
    td_bytes(out, r->a_bytes);
    td_bytes(out, r->b_bytes);
    td_delta(out, r->delta);
    td_bytes_bar(out, r->held_bytes, held_total, cat_color[LP_CAT_SAVED]);
}

/* The row for what does not add up: label cells spanning `span` columns, the remainder in the
 * delta column, empty cells up to `ncols`. */
static void remainder_row(FILE *out, const char *what, int64_t rem, int span, int ncols)
{
    if (rem == 0)
        return;
    fprintf(out, "<tr class=\"rem\"><td colspan=\"%d\">unexplained remainder (%s)</td>", span,
            what);
    fputs("<td></td><td></td>", out);
    td_delta(out, rem);
    for (int i = span + 3; i < ncols; i++)
        fputs("<td></td>", out);
    fputs("</tr>\n", out);
}

static void diff_run_line(FILE *out, const char *which, const gp_diff_run *r)
{
    char h[32], t[32];
    fprintf(out, "<p class=\"cmd\"><b>%s</b> <code>", which);
    esc(out, r->path ? r->path : "");
    fputs("</code> command: <code>", out);
    esc(out, r->command ? r->command : "");
    fprintf(out, "</code> \xe2\x80\x94 peak %s at %s</p>\n",
            gp_format_bytes(r->peak_bytes, h, sizeof h),
            gp__format_ns(r->peak_time_ns, t, sizeof t));
}

static void diff_header(FILE *out, const gp_diff *d)
{
    char a[64], b[64], det[160];
    fputs("<header>\n<h1>gradprof diff <span class=\"sub\">A (usually grad on) vs B (grad off)"
          "</span></h1>\n",
          out);
    diff_run_line(out, "A", &d->a);
    diff_run_line(out, "B", &d->b);
    damage_warnings(out, d->a.profile, "A: ");
    damage_warnings(out, d->b.profile, "B: ");
    fputs("<div class=\"cards\">\n", out);
    snprintf(det, sizeof det, "%s bytes", gp__format_count(d->a.peak_bytes, a, sizeof a));
    card(out, NULL, "peak A", gp_format_bytes(d->a.peak_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%s bytes", gp__format_count(d->b.peak_bytes, a, sizeof a));
    card(out, NULL, "peak B", gp_format_bytes(d->b.peak_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%+" PRId64 " bytes (%s of B)", d->peak_delta,
             d->b.peak_bytes ? gp__format_percent(d->peak_delta < 0 ? 0 : (uint64_t)d->peak_delta,
                                                  d->b.peak_bytes, b, sizeof b)
                             : "-");
    card(out, d->peak_delta > 0 ? "bad" : NULL, "peak delta",
         gp__format_delta(d->peak_delta, a, sizeof a), det);
    snprintf(det, sizeof det,
             "%s bytes live at A's peak that B had freed at the corresponding instant, or never "
             "allocated",
             gp__format_count(d->held_bytes, a, sizeof a));
    card(out, d->held_bytes ? "bad" : "good", "held by graph construction",
         gp_format_bytes(d->held_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%s bytes live at A's peak kept for backward (found by alignment)",
             gp__format_count(d->saved_inferred_bytes, a, sizeof a));
    card(out, d->saved_inferred_bytes ? "bad" : "good", "saved for backward",
         gp_format_bytes(d->saved_inferred_bytes, b, sizeof b), det);
    fputs("</div>\n</header>\n", out);
}

static int diff_timeline(FILE *out, const gp_diff *d)
{
    gp_profile *pa = d->a.profile, *pb = d->b.profile;
    bool used[LP_CAT_COUNT] = {false};
    gp__timeline_used_categories(pa, used);
    gp__timeline_used_categories(pb, used);
    uint64_t va = chart_vmax(pa), vb = chart_vmax(pb);
    double ta = chart_tmax(pa), tb = chart_tmax(pb);
    uint64_t vmax = va > vb ? va : vb;
    double tmax = ta > tb ? ta : tb;
    fputs("<section id=\"timeline\">\n<h2>Memory over time</h2>\n<p class=\"note\">Both runs on "
          "the same axes, stacked by category; the dashed line is the largest total within each "
          "sample.</p>\n<p class=\"chart-title\">A: ",
          out);
    esc(out, d->a.command && d->a.command[0] ? d->a.command : d->a.path);
    fputs("</p>\n", out);
    if (write_chart(out, pa, "chart-a", tmax, vmax, used) != 0)
        return -1;
    fputs("<p class=\"chart-title\">B: ", out);
    esc(out, d->b.command && d->b.command[0] ? d->b.command : d->b.path);
    fputs("</p>\n", out);
    if (write_chart(out, pb, "chart-b", tmax, vmax, used) != 0)
        return -1;
    fputs("</section>\n", out);
    return 0;
}

static void diff_categories(FILE *out, const gp_diff *d)
{
    fputs("<section id=\"categories\">\n<h2>By category at each run's peak</h2>\n", out);
    static const char *const cols[] = {"category", "#A", "#B", "#delta", "#held by graph"};
    table_begin(out, "sortable", cols, 5);
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        const gp_diff_row *r = &d->by_category[k];
        if (r->a_bytes == 0 && r->b_bytes == 0)
            continue;
        fputs("<tr>", out);
        td_category(out, (lp_category)k);
        diff_cells(out, r, d->held_bytes);
        fputs("</tr>\n", out);
    }
    fputs("</tbody><tfoot><tr class=\"total\"><td>total (peak)</td>", out);
    td_bytes(out, d->a.peak_bytes);
    td_bytes(out, d->b.peak_bytes);
    td_delta(out, d->peak_delta);
    td_bytes(out, d->held_bytes);
    fputs("</tr>\n", out);
    remainder_row(out, "peak delta minus the category deltas", d->remainder.categories, 1, 5);
    fputs("</tfoot></table>\n", out);
    if (d->b_more_bytes)
        fprintf(out,
                "<p class=\"note\">B holds %" PRIu64 " bytes that A does not (tag keys larger "
                "in B); peak delta = held by graph &minus; that",
                d->b_more_bytes);
    if (d->b_more_bytes && d->remainder.keys)
        fprintf(out, " + a remainder of %+" PRId64 " bytes", d->remainder.keys);
    if (d->b_more_bytes)
        fputs(".</p>\n", out);
    fputs("</section>\n", out);
}

/* A table of diff rows (`label_cols` leading text columns filled by `labels`), sorted as given. */
typedef void (*row_labels_fn)(FILE *out, const gp_diff_row *r);

static void labels_layer(FILE *out, const gp_diff_row *r)
{
    fprintf(out, "<td class=\"mono\" style=\"padding-left:%dpx\">", 8 + 16 * r->depth);
    esc(out, r->label);
    fputs("</td>", out);
}
static void labels_module(FILE *out, const gp_diff_row *r)
{
    td_text(out, r->label);
}
static void labels_op(FILE *out, const gp_diff_row *r)
{
    td_text_or(out, r->op, "-");
    td_text_or(out, r->module, "(no module)");
}
static void labels_site(FILE *out, const gp_diff_row *r)
{
    fputs("<td class=\"mono\" title=\"", out);
    esc(out, r->key);
    fputs("\">", out);
    esc(out, r->label);
    fputs("</td>", out);
}

static void diff_table(FILE *out, const gp_diff *d, const char *id, const char *title,
                       const char *note, const gp_diff_row *rows, size_t n, size_t shown,
                       const char *const *cols, size_t ncols, row_labels_fn labels, bool graph_cols,
                       const char *rem_what, int64_t rem)
{
    fprintf(out, "<section id=\"%s\">\n<h2>%s</h2>\n<p class=\"note\">%s</p>\n", id, title, note);
    if (n == 0) {
        fputs("<p class=\"note\">No rows.</p>\n</section>\n", out);
        return;
    }
    table_begin(out, graph_cols ? "" : "sortable", cols, ncols);
    for (size_t i = 0; i < shown; i++) {
        fputs("<tr>", out);
        labels(out, &rows[i]);
        diff_cells(out, &rows[i], d->held_bytes);
        if (graph_cols) {
            td_bytes_class(out, rows[i].a_graph_bytes, rows[i].a_graph_bytes ? "graph" : NULL);
            td_bytes(out, rows[i].b_graph_bytes);
        }
        fputs("</tr>\n", out);
    }
    fputs("</tbody>", out);
    if (rem != 0) {
        fputs("<tfoot>", out);
        size_t label_cols = ncols - 4 - (graph_cols ? 2 : 0);
        remainder_row(out, rem_what, rem, (int)label_cols, (int)ncols);
        fputs("</tfoot>", out);
    }
    fputs("</table>\n", out);
    if (shown < n) {
        uint64_t held = 0;
        int64_t delta = 0;
        for (size_t i = shown; i < n; i++) {
            held += rows[i].held_bytes;
            delta += rows[i].delta;
        }
        char h1[32], h2[32];
        fprintf(out,
                "<p class=\"note\">%zu more rows not shown (use --top 0 for all): %s held, "
                "%s delta.</p>\n",
                n - shown, gp_format_bytes(held, h1, sizeof h1),
                gp__format_delta(delta, h2, sizeof h2));
    }
    fputs("</section>\n", out);
}

int gp_render_html_diff(FILE *out, const gp_diff *d, const gp_render_options *o)
{
    char title[512], h[32];
    snprintf(title, sizeof title, "gradprof diff: %s vs %s (held by graph %s)",
             d->a.path ? d->a.path : "A", d->b.path ? d->b.path : "B",
             gp_format_bytes(d->held_bytes, h, sizeof h));
    page_begin(out, title);
    diff_header(out, d);
    if (diff_timeline(out, d) != 0)
        return -1;
    diff_categories(out, d);

    static const char *const lcols[] = {"layer",          "#A",          "#B",         "#delta",
                                        "#held by graph", "#graph in A", "#graph in B"};
    diff_table(out, d, "layers", "Per layer",
               "Module paths in model order; graph = saved, autograd and gradient bytes at each "
               "run's peak.",
               d->layers, d->n_layers, d->n_layers, lcols, 7, labels_layer, true,
               "peak delta minus the layer deltas", d->remainder.layers);
    static const char *const mcols[] = {"module", "#A", "#B", "#delta", "#held by graph"};
    diff_table(out, d, "modules", "Held by graph construction, per module",
               "Memory live at A's peak that B had freed or never allocated, by module.",
               d->modules, d->n_modules, limit_rows(d->n_modules, o), mcols, 5, labels_module,
               false, NULL, 0);
    static const char *const ocols[] = {"op", "module", "#A", "#B", "#delta", "#held by graph"};
    diff_table(out, d, "ops", "Held by graph construction, per op",
               "By op and module, across categories.", d->ops, d->n_ops, limit_rows(d->n_ops, o),
               ocols, 6, labels_op, false, NULL, 0);
    static const char *const scols[] = {"call site", "#A", "#B", "#delta", "#held by graph"};
    diff_table(out, d, "sites", "Per call site",
               "Matched across runs by symbolized frames (hover a site for its key).",
               d->call_sites, d->n_call_sites, limit_rows(d->n_call_sites, o), scols, 5,
               labels_site, false, "peak delta minus the call-site deltas",
               d->remainder.call_sites);
    page_end(out);
    if (fflush(out) != 0 || ferror(out))
        return -1;
    return 0;
}
