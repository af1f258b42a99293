/*
 * Internals of the text report (gp_render_text, declared in render.h), shared by its two files:
 *   render_text.c          the context and its writers, the summary, header, headline and the
 *                          categories at the peak, and gp_render_text, which calls the sections
 *   render_text_tables.c   the ranked tables (tag keys, sites, temporaries, leaks), regions,
 *                          iterations, tensors saved for backward and the findings
 * Internal to tools/render (gp__text_ prefix).
 */
#ifndef GRADPROF_TOOLS_RENDER_TEXT_COMMON_H
#define GRADPROF_TOOLS_RENDER_TEXT_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "render_common.h"

#define GP__TEXT_INDENT "  "

/* One report being written. */
typedef struct gp__text_ctx {
    FILE *out;
    gp_profile *p;
    size_t top; /* rows per ranked table; SIZE_MAX = all */
    gp__measure measure;
    bool color; /* ANSI bold titles and a yellow "Warning" */
    bool oom;   /* an allocation failed: the report is incomplete, gp_render_text returns -1 */
} gp__text_ctx;

/* Writes the formatted text with control characters from trace strings, newlines included, made
 * harmless (gp__sanitize_text): one call writes within one line. */
void gp__text_vput(gp__text_ctx *c, const char *fmt, va_list ap);
void gp__text_put(gp__text_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A section title on a line of its own after a blank line (bold with colour). */
void gp__text_title(gp__text_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One "Label      value" line of the header block; `label` NULL continues the previous one. */
void gp__text_field(gp__text_ctx *c, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints table t indented by GP__TEXT_INDENT (or `indent`), with a "(N more; --top 0 shows
 * all)" line when total > shown, and frees it; a NULL t (out of memory) sets c->oom. */
void gp__text_table_end(gp__text_ctx *c, gp__table *t, size_t shown, size_t total);
void gp__text_table_end_at(gp__text_ctx *c, gp__table *t, size_t shown, size_t total,
                           const char *indent);

static inline const char *gp__text_plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

/* s, or "-" for NULL or "". */
static inline const char *gp__text_dash(const char *s)
{
    return s && *s ? s : "-";
}

/* Whether the program finished recording: "exit" is then said for "the end of the trace". */
static inline bool gp__text_ended_cleanly(const gp_profile *p)
{
    return p->info && p->info->clean_end;
}

/* The sections of render_text_tables.c, in the report's order. */
void gp__text_tag_keys(gp__text_ctx *c);
void gp__text_sites(gp__text_ctx *c);
void gp__text_temporaries(gp__text_ctx *c);
void gp__text_leaks(gp__text_ctx *c);
void gp__text_regions(gp__text_ctx *c);
void gp__text_iterations(gp__text_ctx *c);
void gp__text_saved(gp__text_ctx *c);
void gp__text_findings(gp__text_ctx *c);
/* "kept by total_loss (local, eval.py:36; 8 tensors with a graph, 312 graph nodes)": the
 * holders of p, one line each (at most top), each line starting with indent. */
void gp__text_holders(gp__text_ctx *c, const char *indent);

#endif /* GRADPROF_TOOLS_RENDER_TEXT_COMMON_H */
