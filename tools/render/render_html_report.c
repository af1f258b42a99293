/*
 * The report page, gp_render_html (render.h): one run's summary cards, its memory over time
 * (render_svg.h), the findings, the categories at the peak, the top sites, the tensors saved for
 * backward, regions, iterations and what was live at the end, as one self-contained page
 * (render_html_common.h).
 */
#include <inttypes.h>
#include <stdlib.h>

#include "render.h"
#include "render_common.h"
#include "render_html_common.h"
#include "render_svg.h"

static const char *trace_command(const gp_profile *p)
{
    const char *c = p->trace ? gp_trace_meta(p->trace, "command") : NULL;
    return c ? c : "";
}

static void report_header(FILE *out, gp_profile *p)
{
    char a[64], b[64], c[64], d[400];
    fputs("<header>\n<h1>gradprof report <span class=\"sub\">", out);
    gp__html_escape(out, p->path ? p->path : "");
    fputs("</span></h1>\n<p class=\"cmd\">command: <code>", out);
    gp__html_escape(out, trace_command(p));
    fputs("</code></p>\n", out);
    gp__html_damage_warnings(out, p, "");
    fputs("<div class=\"cards\">\n", out);
    snprintf(d, sizeof d, "%s bytes at %s on %s", gp__format_count(p->peak_bytes, a, sizeof a),
             gp__format_ns(p->peak_time_ns, b, sizeof b),
             gp__device_name(p->primary_device, c, sizeof c));
    gp__html_card(out, NULL, "peak", gp_format_bytes(p->peak_bytes, a, sizeof a), d);
    snprintf(d, sizeof d, "%s allocations, %s frees", gp__format_count(p->alloc_count, a, sizeof a),
             gp__format_count(p->free_count, b, sizeof b));
    gp__html_card(out, NULL, "allocated", gp_format_bytes(p->total_allocated_bytes, c, sizeof c),
                  d);
    snprintf(d, sizeof d, "%s bytes in %s buffers", gp__format_count(p->leaked_bytes, a, sizeof a),
             gp__format_count(p->leaked_count, b, sizeof b));
    gp__html_card(out, p->leaked_bytes ? "bad" : NULL, "live at end",
                  gp_format_bytes(p->leaked_bytes, c, sizeof c), d);
    snprintf(d, sizeof d, "%s temporaries", gp__format_count(p->temporary_count, a, sizeof a));
    gp__html_card(out, NULL, "duration", gp__format_ns(p->duration_ns, b, sizeof b), d);
    if (gp__failed_alloc_text(p, d, sizeof d))
        gp__html_card(out, "bad", "out of memory",
                      gp_format_bytes(p->first_failed.size, a, sizeof a), d);
    snprintf(a, sizeof a, "%zu", p->n_findings);
    gp__html_card(out, p->n_findings ? "bad" : "good", "findings", a,
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
    gp__html_table_begin(out, "sortable", cols, 6);
    uint64_t sum = 0;
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        if (dev->by_category_at_peak[k] == 0 && dev->by_category_max[k] == 0 &&
            dev->by_category_live[k] == 0)
            continue;
        sum += dev->by_category_at_peak[k];
        fputs("<tr>", out);
        gp__html_td_category(out, (lp_category)k);
        gp__html_td_bytes_bar(out, dev->by_category_at_peak[k], dev->peak_bytes,
                              gp__html_cat_color[k]);
        fprintf(out, "<td class=\"num mono\" data-v=\"%" PRIu64 "\">%" PRIu64 "</td>",
                dev->by_category_at_peak[k], dev->by_category_at_peak[k]);
        fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\">%s</td>",
                dev->by_category_at_peak[k],
                gp__format_percent(dev->by_category_at_peak[k], dev->peak_bytes, h, sizeof h));
        gp__html_td_bytes(out, dev->by_category_max[k]);
        gp__html_td_bytes(out, dev->by_category_live[k]);
        fputs("</tr>\n", out);
    }
    fputs("</tbody><tfoot><tr class=\"total\"><td>total</td>", out);
    gp__html_td_bytes(out, dev->peak_bytes);
    fprintf(out, "<td class=\"num mono\">%" PRIu64 "</td><td class=\"num\">100%%</td><td></td>",
            dev->peak_bytes);
    gp__html_td_bytes(out, dev->live_bytes);
    fputs("</tr>", out);
    if (sum != dev->peak_bytes) {
        fputs("<tr class=\"rem\"><td>not in any category</td>", out);
        gp__html_td_delta(out, (int64_t)(dev->peak_bytes - sum));
        fputs("<td></td><td></td><td></td><td></td></tr>", out);
    }
    fputs("</tfoot></table>\n", out);

    if (p->n_devices > 1) {
        fputs("<h2>Devices</h2>\n", out);
        static const char *const dcols[] = {"device", "#peak", "#at", "#live at end"};
        gp__html_table_begin(out, "sortable", dcols, 4);
        for (size_t i = 0; i < p->n_devices; i++) {
            const gp_device_stats *ds = &p->devices[i];
            fputs("<tr>", out);
            gp__html_td_text(out, gp__device_name(ds->device, h, sizeof h));
            gp__html_td_bytes(out, ds->peak_bytes);
            gp__html_td_time(out, ds->peak_time_ns);
            gp__html_td_bytes(out, ds->live_bytes);
            fputs("</tr>\n", out);
        }
        gp__html_table_end(out, p->n_devices, p->n_devices);
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
        gp__html_escape(out, gp__finding_text(f));
        fputs("</b></div>\n<div class=\"fmeta\">", out);
        if (f->region && f->region[0]) {
            fputs("region <code>", out);
            gp__html_escape(out, f->region);
            fputs("</code> \xc2\xb7 ", out);
        }
        char once[80];
        fprintf(out, "%s (%" PRIu64 " bytes)%s \xc2\xb7 %s times \xc2\xb7 first at %s</div>\n",
                gp_format_bytes(f->bytes, h, sizeof h), f->bytes,
                gp__finding_at_once(f, once, sizeof once), gp__format_count(f->count, t, sizeof t),
                gp__format_ns(f->first_time_ns, w, sizeof w));
        char note[512];
        if (gp__finding_thread_note(p, f, note, sizeof note)) {
            fputs("<div class=\"fmeta\">", out);
            gp__html_escape(out, note);
            fputs("</div>\n", out);
        }
        if (f->n_items > 0) {
            static const char *const cols[] = {"category", "op",     "module",
                                               "site",     "#bytes", "#count"};
            static const char *const no_site[] = {"category", "op", "module", "#bytes", "#count"};
            bool stacks = gp__finding_has_stacks(f);
            gp__html_table_begin(out, "sortable", stacks ? cols : no_site, stacks ? 6 : 5);
            size_t shown = gp__html_limit_rows(f->n_items, o);
            size_t *ix = gp__sorted_finding_items(f); /* NULL when out of memory: as stored */
            for (size_t j = 0; j < shown; j++) {
                const gp_finding_item *it = &f->items[ix ? ix[j] : j];
                fputs("<tr>", out);
                gp__html_td_category(out, it->category);
                gp__html_td_text_or(out, it->op, "-");
                gp__html_td_text_or(out, it->module, "-");
                if (stacks)
                    gp__html_site_cell(out, p, it->stack);
                gp__html_td_bytes(out, it->bytes);
                gp__html_td_count(out, it->count);
                fputs("</tr>\n", out);
            }
            gp__html_table_end(out, shown, f->n_items);
            free(ix);
        }
        fputs("</div>\n", out);
    }
    fputs("</section>\n", out);
}

/* The last cells of a site or tag row, and its end: bytes at peak (a bar of the peak in the
 * category's color), allocated, allocations, live at end. */
static void td_stats(FILE *out, const gp_stats *st, uint64_t peak, lp_category c)
{
    gp__html_td_bytes_bar(out, st->peak_bytes, peak, gp__html_cat_color[c % LP_CAT_COUNT]);
    gp__html_td_bytes(out, st->total_bytes);
    gp__html_td_count(out, st->count);
    gp__html_td_bytes(out, st->live_bytes);
    fputs("</tr>\n", out);
}

/* The sites table by measure m. These tables return -1 when out of memory (the table is then
 * written as empty), else 0. */
static int report_sites(FILE *out, gp_profile *p, const gp_render_options *o, gp__measure m,
                        const char *id, const char *title, const char *note)
{
    size_t n = 0;
    size_t *idx = gp__sorted_sites(p, m, gp__html_limit_rows(p->n_sites, o), &n);
    int rc = idx == NULL && p->n_sites > 0 ? -1 : 0;
    if (idx == NULL) /* empty, or out of memory */
        n = 0;
    size_t nz = idx ? gp__sites_nonzero(p, idx, n, m) : 0; /* rows with a non-zero value */
    fprintf(out, "<section id=\"%s\">\n<h2>%s</h2>\n<p class=\"note\">%s</p>\n", id, title, note);
    if (nz == 0 || gp__sites_lack_stacks(p, m)) {
        fprintf(out, "<p class=\"note\">None%s.</p>\n</section>\n",
                nz ? ": " GP__NO_STACKS_NOTE : "");
        free(idx);
        return rc;
    }
    static const char *const cols[] = {"#",        "site",       "category",     "op @ module",
                                       "#at peak", "#allocated", "#allocations", "#live at end"};
    gp__html_table_begin(out, "sortable", cols, 8);
    size_t shown = gp__html_limit_rows(nz, o);
    for (size_t i = 0; i < shown; i++) {
        gp_site *s = &p->sites[idx[i]];
        fprintf(out, "<tr><td class=\"num\" data-v=\"%zu\">%zu</td>", i + 1, i + 1);
        gp__html_site_cell(out, p, s->stack);
        gp__html_td_category(out, gp_site_category(p, s));
        fputs("<td>", out);
        const char *op = gp_site_op(p, s), *module = gp_site_module(p, s);
        if (*op) {
            gp__html_escape(out, op);
            if (*module) {
                fputs(" @ ", out);
                gp__html_escape(out, module);
            }
        }
        fputs("</td>", out);
        td_stats(out, &s->stats, p->peak_bytes, gp_site_category(p, s));
    }
    gp__html_table_end(out, shown, nz);
    fputs("</section>\n", out);
    free(idx);
    return rc;
}

/* The tag keys (category, op, module) by measure m, like report_sites. */
static int report_tags(FILE *out, gp_profile *p, const gp_render_options *o, gp__measure m,
                       const char *id, const char *title, const char *note)
{
    size_t n = 0;
    size_t *idx = gp__sorted_tag_keys(p, m, &n);
    int rc = idx == NULL && p->n_tag_keys > 0 ? -1 : 0;
    size_t nz = 0;
    for (size_t i = 0; idx && i < n; i++)
        nz += gp__stats_measure(&p->tag_keys[idx[i]].stats, m) != 0;
    fprintf(out, "<section id=\"%s\">\n<h2>%s</h2>\n<p class=\"note\">%s</p>\n", id, title, note);
    if (nz == 0) {
        fputs("<p class=\"note\">None.</p>\n</section>\n", out);
        free(idx);
        return rc;
    }
    static const char *const cols[] = {"#",        "category",   "op",           "module",
                                       "#at peak", "#allocated", "#allocations", "#live at end"};
    gp__html_table_begin(out, "sortable", cols, 8);
    size_t shown = gp__html_limit_rows(nz, o), row = 0;
    for (size_t i = 0; i < n && row < shown; i++) {
        const gp_tag_key *k = &p->tag_keys[idx[i]];
        if (!gp__stats_measure(&k->stats, m))
            continue;
        row++;
        fprintf(out, "<tr><td class=\"num\" data-v=\"%zu\">%zu</td>", row, row);
        gp__html_td_category(out, k->category);
        gp__html_td_text(out, k->op);
        gp__html_td_text(out, k->module);
        td_stats(out, &k->stats, p->peak_bytes, k->category);
    }
    gp__html_table_end(out, shown, nz);
    fputs("</section>\n", out);
    free(idx);
    return rc;
}

static int report_saved(FILE *out, gp_profile *p, const gp_render_options *o)
{
    fputs("<section id=\"saved\">\n<h2>Tensors saved for backward</h2>\n", out);
    size_t n = 0;
    size_t *idx = gp__sorted_saved(p, &n);
    int rc = idx == NULL && p->n_saved > 0 ? -1 : 0;
    if (idx == NULL)
        n = 0;
    if (n == 0) {
        fputs("<p class=\"note\">None: no op kept a tensor for a backward pass.</p>\n</section>\n",
              out);
        free(idx);
        return rc;
    }
    fputs("<p class=\"note\">Activations kept alive for a backward pass: the module that saved "
          "each, the op that made it, its shape, and where the program was when it was saved (as "
          "the PyTorch helper saw it).</p>\n",
          out);
    static const char *const cols[] = {"saved by", "made by",      "shape",
                                       "where",    "#times saved", "#bytes saved",
                                       "#at peak", "#max live",    "#live at end"};
    gp__html_table_begin(out, "sortable", cols, 9);
    size_t shown = gp__html_limit_rows(n, o);
    for (size_t i = 0; i < shown; i++) {
        const gp_saved_tensor *s = &p->saved[idx[i]];
        fputs("<tr>", out);
        gp__html_td_text_or(out, s->module, "(no module)");
        gp__html_td_text(out, s->op);
        fputs("<td class=\"mono\">", out);
        gp__html_escape(out, s->shape);
        fputs("</td><td class=\"mono\">", out);
        gp__html_escape(out, s->where);
        fputs("</td>", out);
        gp__html_td_count(out, s->stats.count);
        gp__html_td_bytes(out, s->stats.total_bytes);
        gp__html_td_bytes_bar(out, s->stats.peak_bytes, p->peak_bytes,
                              gp__html_cat_color[LP_CAT_SAVED]);
        gp__html_td_bytes(out, s->stats.max_live_bytes);
        gp__html_td_bytes_class(out, s->stats.live_bytes, s->stats.live_bytes ? "graph" : NULL);
        fputs("</tr>\n", out);
    }
    gp__html_table_end(out, shown, n);
    fputs("</section>\n", out);
    free(idx);
    return rc;
}

static int report_regions(FILE *out, gp_profile *p, const gp_render_options *o)
{
    fputs("<section id=\"regions\">\n<h2>Regions</h2>\n", out);
    size_t n = 0;
    size_t *idx = gp__sorted_regions(p, &n);
    int rc = idx == NULL && p->n_regions > 0 ? -1 : 0;
    if (idx == NULL)
        n = 0;
    if (n == 0) {
        fputs("<p class=\"note\">The program marked no regions.</p>\n</section>\n", out);
        free(idx);
        return rc;
    }
    fputs("<p class=\"note\">Graph bytes: saved, autograd and gradient memory allocated inside. "
          "Retained: the most bytes allocated inside and still live at one exit.</p>\n",
          out);
    static const char *const cols[] = {"region",    "#entries",  "#allocated inside",
                                       "#max live", "#retained", "#graph bytes"};
    gp__html_table_begin(out, "sortable", cols, 6);
    size_t shown = gp__html_limit_rows(n, o);
    for (size_t i = 0; i < shown; i++) {
        const gp_region_stats *r = &p->regions[idx[i]];
        fputs("<tr>", out);
        gp__html_td_text(out, r->name);
        gp__html_td_count(out, r->entries);
        gp__html_td_bytes(out, r->allocated_bytes);
        gp__html_td_bytes(out, r->max_live_bytes);
        gp__html_td_bytes(out, r->retained_bytes);
        gp__html_td_bytes_class(out, r->graph_bytes, r->graph_bytes ? "graph" : NULL);
        fputs("</tr>\n", out);
    }
    gp__html_table_end(out, shown, n);
    fputs("</section>\n", out);
    free(idx);
    return rc;
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
        gp__html_td_text(out, it->mark);
        gp__html_td_time(out, it->time_ns);
        gp__html_td_bytes_bar(out, it->live_bytes, top, "#4e79a7");
        if (i == 0)
            fputs("<td class=\"num\" data-v=\"0\"></td>", out);
        else
            gp__html_td_delta(out, (int64_t)(it->live_bytes - p->iterations[i - 1].live_bytes));
        for (int k = 0; k < LP_CAT_COUNT; k++) {
            if (!used[k])
                continue;
            uint64_t v = it->live_by_category[k];
            bool graph = lp_category_is_graph((lp_category)k) && v != 0;
            gp__html_td_bytes_class(out, v, graph ? "graph" : NULL);
        }
        fputs("</tr>\n", out);
    }
    fputs("</tbody></table>\n</section>\n", out);
}

static int report_timeline(FILE *out, gp_profile *p)
{
    char h[32];
    gp__svg_axes axes = {0};
    gp__svg_axes_fit(&axes, p);
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
    if (gp__svg_chart(out, p, "chart-run", &axes) != 0)
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
    gp__html_page_begin(out, title);
    report_header(out, p);
    if (report_timeline(out, p) != 0)
        return -1;
    report_findings(out, p, o);
    report_categories(out, p);
    int rc = report_tags(out, p, o, GP__MEASURE_PEAK, "tags", "Top tags at peak",
                         "What the buffers live at the peak were (category, op, module), by "
                         "bytes.");
    rc |= report_sites(out, p, o, GP__MEASURE_PEAK, "sites", "Top sites at peak",
                       "Call sites by bytes live at the peak; open a site for its frames.");
    rc |= report_saved(out, p, o);
    rc |= report_regions(out, p, o);
    report_iterations(out, p);
    if (!gp__sites_lack_stacks(p, GP__MEASURE_LEAKED))
        rc |= report_sites(out, p, o, GP__MEASURE_LEAKED, "leaks", "Live at end",
                           "Call sites whose memory was still live when the trace ended.");
    else
        rc |=
            report_tags(out, p, o, GP__MEASURE_LEAKED, "leaks", "Live at end",
                        "Memory still live when the trace ended, by tag: " GP__NO_STACKS_NOTE ".");
    rc |= gp__html_page_end(out);
    return rc ? -1 : 0;
}
