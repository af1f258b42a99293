/*
 * Internals of the HTML pages (gp_render_html and gp_render_html_diff, declared in render.h):
 * the page frame, table cells and the parts both pages share. Internal to tools/render
 * (gp__html_ prefix). The files:
 *   render_html_common.c   this header: colours, page frame, cells, tables, cards, warnings
 *   render_svg.c           the memory-over-time chart (render_svg.h), drawn for both pages
 *   render_html_report.c   the report page (one run)
 *   render_html_diff.c     the diff page (two runs)
 *   assets/page.css, page.js   the stylesheet and script, embedded at build time
 *
 * Both pages are one self-contained file: inline CSS, inline SVG and a little inline JavaScript
 * (sortable tables, chart tooltips) that the page does not need to be read. Nothing is fetched:
 * there is no external URL, font, stylesheet or script in the output. Every number comes from the
 * gp_profile / gp_diff; these files only lay them out. Byte cells show a human size and carry the
 * exact bytes in data-v (used for sorting) and in a tooltip. Text from the trace is always
 * written through gp__html_escape (render_common.h).
 */
#ifndef GRADPROF_TOOLS_RENDER_HTML_COMMON_H
#define GRADPROF_TOOLS_RENDER_HTML_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "render.h"

/* The page's stylesheet and script (assets/page.css, assets/page.js), embedded at build time by
 * tools/embed_text.cmake. The script sorts table.sortable by a click on a header (numeric by
 * data-v, else text) and shows the chart tooltips from each chart's JSON data block; it marks
 * the page ready (body data-ready="1") last, which the headless-browser test checks. */
extern const char gp__html_page_css[];
extern const char gp__html_page_js[];

/* One colour per category (Tableau 10), in lp_category order; graph memory in warm colours. */
extern const char *const gp__html_cat_color[LP_CAT_COUNT];

/* The page up to <main> (doctype, head with the title escaped and the stylesheet), and from the
 * footer to the end (the script). gp__html_page_end flushes `out` and returns 0, or -1 if
 * writing failed. */
void gp__html_page_begin(FILE *out, const char *title);
int gp__html_page_end(FILE *out);

/* Table cells, each a whole <td>...</td>. Bytes: a human size with the exact count in data-v and
 * in the tooltip; `cls` adds a class (e.g. "graph"; NULL for none). A bar cell draws v as a
 * fraction of `whole` behind the number, in `color`. */
void gp__html_td_bytes(FILE *out, uint64_t v);
void gp__html_td_bytes_class(FILE *out, uint64_t v, const char *cls);
void gp__html_td_bytes_bar(FILE *out, uint64_t v, uint64_t whole, const char *color);
/* A signed byte delta, "pos" (red) or "neg" (green). */
void gp__html_td_delta(FILE *out, int64_t v);
/* A count with thousands separators; a time in ns in three significant digits. */
void gp__html_td_count(FILE *out, uint64_t v);
void gp__html_td_time(FILE *out, uint64_t ns);
/* Escaped text; gp__html_td_text_or shows `empty` (greyed, not escaped) for NULL or "". */
void gp__html_td_text(FILE *out, const char *s);
void gp__html_td_text_or(FILE *out, const char *s, const char *empty);
/* The category with its colour swatch; graph categories in the warning colour. */
void gp__html_td_category(FILE *out, lp_category c);
/* The frames of a site as a <details> list (innermost first), or its label alone. */
void gp__html_site_cell(FILE *out, gp_profile *p, uint32_t stack);

/* A table's start up to <tbody>: `cols` are the header names, those starting with '#' numeric
 * (right-aligned, the '#' not shown); `cls` its class ("sortable" or ""). gp__html_table_end
 * closes it and says how many of `total` rows were left out when only `shown` were written. */
void gp__html_table_begin(FILE *out, const char *cls, const char *const *cols, size_t n);
void gp__html_table_end(FILE *out, size_t shown, size_t total);
/* How many of n rows to show under o->top (0 = all; 10 without options). */
size_t gp__html_limit_rows(size_t n, const gp_render_options *o);

/* A summary card: key, value, detail (escaped); `cls` is NULL, "bad" or "good". */
void gp__html_card(FILE *out, const char *cls, const char *key, const char *value,
                   const char *detail);
/* The warnings about what the analysis could not see (a damaged or unfinished trace, dropped
 * events), one box each; `who` prefixes them ("A: ", or ""). */
void gp__html_damage_warnings(FILE *out, const gp_profile *p, const char *who);

#endif /* GRADPROF_TOOLS_RENDER_HTML_COMMON_H */
