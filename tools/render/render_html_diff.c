/*
 * The diff page, gp_render_html_diff (render.h): both runs' summary, their memory over time on
 * the same axes (render_svg.h), the per-category deltas and the held-by-graph tables per layer,
 * module, op and call site, with any remainder that does not add up shown as a row of its own,
 * as one self-contained page (render_html_common.h).
 */
#include <inttypes.h>

#include "diff.h"
#include "render.h"
#include "render_common.h"
#include "render_html_common.h"
#include "render_svg.h"

/* A diff row's bytes: A, B, delta, held. */
static void diff_cells(FILE *out, const gp_diff_row *r, uint64_t held_total)
{
    gp__html_td_bytes(out, r->a_bytes);
    gp__html_td_bytes(out, r->b_bytes);
    gp__html_td_delta(out, r->delta);
    gp__html_td_bytes_bar(out, r->held_bytes, held_total, gp__html_cat_color[LP_CAT_SAVED]);
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
    gp__html_td_delta(out, rem);
    for (int i = span + 3; i < ncols; i++)
        fputs("<td></td>", out);
    fputs("</tr>\n", out);
}

static void diff_run_line(FILE *out, const char *which, const gp_diff_run *r)
{
    char h[32], t[32];
    fprintf(out, "<p class=\"cmd\"><b>%s</b> <code>", which);
    gp__html_escape(out, r->path ? r->path : "");
    fputs("</code> command: <code>", out);
    gp__html_escape(out, r->command ? r->command : "");
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
    gp__html_damage_warnings(out, d->a.profile, "A: ");
    gp__html_damage_warnings(out, d->b.profile, "B: ");
    const char *const warnings[] = {d->other_program, d->b_graph, d->rerouted,
                                    d->diverged ? d->diverged_why : ""};
    for (size_t i = 0; i < sizeof warnings / sizeof *warnings; i++) {
        if (!warnings[i][0])
            continue;
        fputs(i == 2   ? "<div class=\"note\">"
              : i == 3 ? "<div class=\"warn\"><b>The runs do not align:</b> "
                       : "<div class=\"warn\">",
              out);
        gp__html_escape(out, warnings[i]);
        fputs("</div>\n", out);
    }
    fputs("<div class=\"cards\">\n", out);
    snprintf(det, sizeof det, "%s bytes", gp__format_count(d->a.peak_bytes, a, sizeof a));
    gp__html_card(out, NULL, "peak A", gp_format_bytes(d->a.peak_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%s bytes", gp__format_count(d->b.peak_bytes, a, sizeof a));
    gp__html_card(out, NULL, "peak B", gp_format_bytes(d->b.peak_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%+" PRId64 " bytes (%s of B)", d->peak_delta,
             d->b.peak_bytes ? gp__format_percent(d->peak_delta < 0 ? 0 : (uint64_t)d->peak_delta,
                                                  d->b.peak_bytes, b, sizeof b)
                             : "-");
    gp__html_card(out, d->peak_delta > 0 ? "bad" : NULL, "peak delta",
                  gp__format_delta(d->peak_delta, a, sizeof a), det);
    snprintf(det, sizeof det,
             "%s bytes live at A's peak that B had freed at the corresponding instant, or never "
             "allocated",
             gp__format_count(d->held_bytes, a, sizeof a));
    gp__html_card(out, d->held_bytes ? "bad" : "good", "held by graph construction",
                  gp_format_bytes(d->held_bytes, b, sizeof b), det);
    snprintf(det, sizeof det, "%s bytes live at A's peak kept for backward (found by alignment)",
             gp__format_count(d->saved_inferred_bytes, a, sizeof a));
    gp__html_card(out, d->saved_inferred_bytes ? "bad" : "good", "saved for backward",
                  gp_format_bytes(d->saved_inferred_bytes, b, sizeof b), det);
    fputs("</div>\n</header>\n", out);
}

static int diff_timeline(FILE *out, const gp_diff *d)
{
    gp_profile *pa = d->a.profile, *pb = d->b.profile;
    gp__svg_axes axes = {0}; /* both runs on the same axes */
    gp__svg_axes_fit(&axes, pa);
    gp__svg_axes_fit(&axes, pb);
    fputs("<section id=\"timeline\">\n<h2>Memory over time</h2>\n<p class=\"note\">Both runs on "
          "the same axes, stacked by category; the dashed line is the largest total within each "
          "sample.</p>\n<p class=\"chart-title\">A: ",
          out);
    gp__html_escape(out, d->a.command && d->a.command[0] ? d->a.command : d->a.path);
    fputs("</p>\n", out);
    if (gp__svg_chart(out, pa, "chart-a", &axes) != 0)
        return -1;
    fputs("<p class=\"chart-title\">B: ", out);
    gp__html_escape(out, d->b.command && d->b.command[0] ? d->b.command : d->b.path);
    fputs("</p>\n", out);
    if (gp__svg_chart(out, pb, "chart-b", &axes) != 0)
        return -1;
    fputs("</section>\n", out);
    return 0;
}

static void diff_categories(FILE *out, const gp_diff *d)
{
    fputs("<section id=\"categories\">\n<h2>By category at each run's peak</h2>\n", out);
    static const char *const cols[] = {"category", "#A", "#B", "#delta", "#held by graph"};
    gp__html_table_begin(out, "sortable", cols, 5);
    for (int k = 0; k < LP_CAT_COUNT; k++) {
        const gp_diff_row *r = &d->by_category[k];
        if (r->a_bytes == 0 && r->b_bytes == 0)
            continue;
        fputs("<tr>", out);
        gp__html_td_category(out, (lp_category)k);
        diff_cells(out, r, d->held_bytes);
        fputs("</tr>\n", out);
    }
    fputs("</tbody><tfoot><tr class=\"total\"><td>total (peak)</td>", out);
    gp__html_td_bytes(out, d->a.peak_bytes);
    gp__html_td_bytes(out, d->b.peak_bytes);
    gp__html_td_delta(out, d->peak_delta);
    gp__html_td_bytes(out, d->held_bytes);
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
    gp__html_escape(out, r->label);
    fputs("</td>", out);
}
static void labels_module(FILE *out, const gp_diff_row *r)
{
    gp__html_td_text(out, r->label);
}
static void labels_op(FILE *out, const gp_diff_row *r)
{
    gp__html_td_text_or(out, r->op, "-");
    gp__html_td_text_or(out, r->module, "(no module)");
}
static void labels_site(FILE *out, const gp_diff_row *r)
{
    fputs("<td class=\"mono\" title=\"", out);
    gp__html_escape(out, r->key);
    fputs("\">", out);
    gp__html_escape(out, r->label);
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
    gp__html_table_begin(out, graph_cols ? "" : "sortable", cols, ncols);
    for (size_t i = 0; i < shown; i++) {
        fputs("<tr>", out);
        labels(out, &rows[i]);
        diff_cells(out, &rows[i], d->held_bytes);
        if (graph_cols) {
            gp__html_td_bytes_class(out, rows[i].a_graph_bytes,
                                    rows[i].a_graph_bytes ? "graph" : NULL);
            gp__html_td_bytes(out, rows[i].b_graph_bytes);
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
    gp__html_page_begin(out, title);
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
               d->modules, d->n_modules, gp__html_limit_rows(d->n_modules, o), mcols, 5,
               labels_module, false, NULL, 0);
    static const char *const ocols[] = {"op", "module", "#A", "#B", "#delta", "#held by graph"};
    diff_table(out, d, "ops", "Held by graph construction, per op",
               "By op and module, across categories.", d->ops, d->n_ops,
               gp__html_limit_rows(d->n_ops, o), ocols, 6, labels_op, false, NULL, 0);
    static const char *const scols[] = {"call site", "#A", "#B", "#delta", "#held by graph"};
    if (gp_diff_has_stacks(d))
        diff_table(out, d, "sites", "Per call site",
                   "The sites that changed or hold something, matched across runs by "
                   "symbolized frames (hover a site for its key).",
                   d->call_sites, d->n_call_sites_changed,
                   gp__html_limit_rows(d->n_call_sites_changed, o), scols, 5, labels_site, false,
                   "peak delta minus the call-site deltas", d->remainder.call_sites);
    else
        fputs("<section id=\"sites\">\n<h2>Per call site</h2>\n<p "
              "class=\"note\">None: " GP__NO_STACKS_NOTE ".</p>\n</section>\n",
              out);
    return gp__html_page_end(out);
}
