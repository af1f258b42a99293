/*
 * The HTML pages' common parts: category colours, the page frame, table cells, tables, summary
 * cards and trace warnings (render_html_common.h).
 */
#include "render_html_common.h"

#include <inttypes.h>
#include <stdbool.h>

#include "render_common.h"

_Static_assert(LP_CAT_COUNT == 9, "one colour per category");
const char *const gp__html_cat_color[LP_CAT_COUNT] = {
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

/* ---- page frame ------------------------------------------------------------------------------ */

void gp__html_page_begin(FILE *out, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"gradprof\">\n<title>",
          out);
    gp__html_escape(out, title);
    fputs("</title>\n<style>\n", out);
    fputs(gp__html_page_css, out);
    fputs("</style>\n</head>\n<body>\n<main>\n", out);
}

int gp__html_page_end(FILE *out)
{
    fputs("<footer>Made by gradprof. Self-contained: no network access needed. Click a table "
          "header to sort; hover the charts for values.</footer>\n</main>\n<script>\n",
          out);
    fputs(gp__html_page_js, out);
    fputs("</script>\n</body>\n</html>\n", out);
    return fflush(out) != 0 || ferror(out) ? -1 : 0;
}

/* ---- cells ----------------------------------------------------------------------------------- */

void gp__html_td_bytes_class(FILE *out, uint64_t v, const char *cls)
{
    char h[32];
    fprintf(out, "<td class=\"num%s%s\" data-v=\"%" PRIu64 "\" title=\"%" PRIu64 " bytes\">%s</td>",
            cls ? " " : "", cls ? cls : "", v, v, gp_format_bytes(v, h, sizeof h));
}

void gp__html_td_bytes(FILE *out, uint64_t v)
{
    gp__html_td_bytes_class(out, v, NULL);
}

/* A byte cell with a bar behind it showing v as a fraction of whole. */
void gp__html_td_bytes_bar(FILE *out, uint64_t v, uint64_t whole, const char *color)
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

void gp__html_td_delta(FILE *out, int64_t v)
{
    char h[32];
    fprintf(out, "<td class=\"num%s\" data-v=\"%" PRId64 "\" title=\"%+" PRId64 " bytes\">%s</td>",
            v > 0   ? " pos"
            : v < 0 ? " neg"
                    : "",
            v, v, gp__format_delta(v, h, sizeof h));
}

void gp__html_td_count(FILE *out, uint64_t v)
{
    char h[32];
    fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\">%s</td>", v,
            gp__format_count(v, h, sizeof h));
}

void gp__html_td_time(FILE *out, uint64_t ns)
{
    char h[32];
    fprintf(out, "<td class=\"num\" data-v=\"%" PRIu64 "\" title=\"%" PRIu64 " ns\">%s</td>", ns,
            ns, gp__format_ns(ns, h, sizeof h));
}

void gp__html_td_text(FILE *out, const char *s)
{
    fputs("<td>", out);
    gp__html_escape(out, s);
    fputs("</td>", out);
}

/* A text cell that shows `empty` (greyed) for an empty string. */
void gp__html_td_text_or(FILE *out, const char *s, const char *empty)
{
    if (s == NULL || s[0] == '\0') {
        fprintf(out, "<td class=\"note\">%s</td>", empty);
        return;
    }
    gp__html_td_text(out, s);
}

void gp__html_td_category(FILE *out, lp_category c)
{
    if ((int)c < 0 || c >= LP_CAT_COUNT) {
        fputs("<td></td>", out);
        return;
    }
    fprintf(out, "<td%s><i class=\"sw\" style=\"background:%s\"></i>%s</td>",
            lp_category_is_graph((lp_category)c) ? " class=\"graph\"" : "", gp__html_cat_color[c],
            lp_category_name(c));
}

/* The header row of a table: columns whose name starts with '#' are numeric (right-aligned). */
void gp__html_table_begin(FILE *out, const char *cls, const char *const *cols, size_t n)
{
    fprintf(out, "<table class=\"%s\"><thead><tr>", cls);
    for (size_t i = 0; i < n; i++) {
        bool num = cols[i][0] == '#';
        fprintf(out, "<th%s>", num ? " class=\"num\"" : "");
        gp__html_escape(out, cols[i] + (num ? 1 : 0));
        fputs("</th>", out);
    }
    fputs("</tr></thead>\n<tbody>\n", out);
}

/* Closes a table; `shown` of `total` rows were written. */
void gp__html_table_end(FILE *out, size_t shown, size_t total)
{
    fputs("</tbody></table>\n", out);
    if (shown < total)
        fprintf(out, "<p class=\"note\">%zu more rows not shown (use --top 0 for all).</p>\n",
                total - shown);
}

/* The frames of a site as a <details> list (innermost first), or its label alone. */
void gp__html_site_cell(FILE *out, gp_profile *p, uint32_t stack)
{
    const char *frames[48];
    size_t n = stack ? gp_site_frames(p, stack, frames, 48) : 0;
    fputs("<td class=\"mono\">", out);
    if (n <= 1) {
        gp__html_escape(out, gp_site_label(p, stack));
    } else {
        fputs("<details><summary>", out);
        gp__html_escape(out, gp_site_label(p, stack));
        fputs("</summary><ol>", out);
        for (size_t i = 0; i < n; i++) {
            fputs("<li>", out);
            gp__html_escape(out, frames[i]);
            fputs("</li>", out);
        }
        fputs("</ol></details>", out);
    }
    fputs("</td>", out);
}

size_t gp__html_limit_rows(size_t n, const gp_render_options *o)
{
    size_t top = o != NULL ? o->top : 10;
    return top == 0 || top > n ? n : top;
}

/* ---- header parts ---------------------------------------------------------------------------- */

/* The warnings about what the analysis could not see, one box each; `who` prefixes them ("A: "). */
void gp__html_damage_warnings(FILE *out, const gp_profile *p, const char *who)
{
    const gp_trace_info *info = p->info;
    char h[32], e[32];
    if (info != NULL && info->damaged) {
        fprintf(out,
                "<div class=\"warn\"><b>%sDamaged trace:</b> reading stopped at byte %" PRIu64 " (",
                who, info->damage_offset);
        gp__html_escape(out, info->damage_reason);
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

void gp__html_card(FILE *out, const char *cls, const char *key, const char *value,
                   const char *detail)
{
    fprintf(out, "<div class=\"card%s%s\"><div class=\"k\">", cls ? " " : "", cls ? cls : "");
    gp__html_escape(out, key);
    fputs("</div><div class=\"v\">", out);
    gp__html_escape(out, value);
    fputs("</div><div class=\"d\">", out);
    gp__html_escape(out, detail ? detail : "");
    fputs("</div></div>\n", out);
}
