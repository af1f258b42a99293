/*
 * The renderers' aligned text table (gp__table, declared in render_common.h): rows of cells
 * formatted with printf, sanitized, and printed with each column as wide as its widest cell
 * (counted in code points, so non-ASCII names line up).
 */
#define _GNU_SOURCE /* vasprintf */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "render_common.h"

typedef struct table_line {
    char **cells; /* ncols cells, or NULL for a note */
    char *note;
} table_line;

struct gp__table {
    size_t ncols;
    char **headers;
    char *align;
    table_line *lines;
    size_t n_lines, cap_lines;
    size_t col; /* next cell's column in the current row */
    bool failed;
};

gp__table *gp__table_new(size_t ncols, const char *const *headers, const char *align)
{
    gp__table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->ncols = ncols;
    t->headers = calloc(ncols, sizeof *t->headers);
    t->align = calloc(ncols + 1, 1);
    if (!t->headers || !t->align) {
        gp__table_free(t);
        return NULL;
    }
    for (size_t i = 0; i < ncols; i++) {
        t->headers[i] = strdup(headers[i]);
        t->align[i] = align && align[i] == 'r' ? 'r' : 'l';
        if (!t->headers[i]) {
            gp__table_free(t);
            return NULL;
        }
    }
    return t;
}

void gp__table_free(gp__table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_lines; i++) {
        if (t->lines[i].cells)
            for (size_t c = 0; c < t->ncols; c++)
                free(t->lines[i].cells[c]);
        free(t->lines[i].cells);
        free(t->lines[i].note);
    }
    free(t->lines);
    if (t->headers)
        for (size_t i = 0; i < t->ncols; i++)
            free(t->headers[i]);
    free(t->headers);
    free(t->align);
    free(t);
}

static table_line *table_push(gp__table *t)
{
    if (t->n_lines == t->cap_lines) {
        size_t cap = t->cap_lines ? 2 * t->cap_lines : 16;
        table_line *l = realloc(t->lines, cap * sizeof *l);
        if (!l)
            return NULL;
        t->lines = l;
        t->cap_lines = cap;
    }
    table_line *l = &t->lines[t->n_lines++];
    l->cells = NULL;
    l->note = NULL;
    return l;
}

void gp__table_cell(gp__table *t, const char *fmt, ...)
{
    if (!t || t->failed)
        return;
    if (t->col == 0) {
        table_line *l = table_push(t);
        if (!l || !(l->cells = calloc(t->ncols, sizeof *l->cells))) {
            if (l)
                t->n_lines--;
            t->failed = true;
            return;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        s = NULL;
        t->failed = true;
    }
    va_end(ap);
    gp__sanitize_text(s, false);
    t->lines[t->n_lines - 1].cells[t->col] = s;
    t->col = (t->col + 1) % t->ncols;
}

void gp__table_note(gp__table *t, const char *fmt, ...)
{
    if (!t || t->failed)
        return;
    table_line *l = table_push(t);
    if (!l) {
        t->failed = true;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&l->note, fmt, ap) < 0) {
        l->note = NULL;
        t->failed = true;
    }
    va_end(ap);
    gp__sanitize_text(l->note, false);
    t->col = 0;
}

size_t gp__table_rows(const gp__table *t)
{
    size_t n = 0;
    for (size_t i = 0; t && i < t->n_lines; i++)
        n += t->lines[i].cells != NULL;
    return n;
}

/* Display width of a UTF-8 string: code points, not bytes (labels may hold non-ASCII names). */
static size_t text_width(const char *s)
{
    size_t w = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        w += (*p & 0xc0) != 0x80;
    return w;
}

static void print_cell(FILE *out, const char *s, size_t width, char align, bool last)
{
    size_t w = text_width(s), pad = width > w ? width - w : 0;
    if (align == 'r')
        fprintf(out, "%*s", (int)pad, "");
    fputs(s ? s : "", out);
    if (align == 'l' && !last)
        fprintf(out, "%*s", (int)pad, "");
}

static void print_row(FILE *out, const gp__table *t, char *const *cells, const size_t *width,
                      const char *indent)
{
    fputs(indent, out);
    for (size_t c = 0; c < t->ncols; c++) {
        if (c)
            fputs("  ", out);
        print_cell(out, cells[c], width[c], t->align[c], c + 1 == t->ncols);
    }
    fputc('\n', out);
}

int gp__table_print(FILE *out, const gp__table *t, const char *indent)
{
    if (!t || t->failed)
        return -1;
    size_t *width = calloc(t->ncols, sizeof *width);
    if (!width)
        return -1;
    for (size_t c = 0; c < t->ncols; c++)
        width[c] = text_width(t->headers[c]);
    for (size_t i = 0; i < t->n_lines; i++) {
        if (!t->lines[i].cells)
            continue;
        for (size_t c = 0; c < t->ncols; c++) {
            size_t w = text_width(t->lines[i].cells[c]);
            if (w > width[c])
                width[c] = w;
        }
    }
    print_row(out, t, t->headers, width, indent);
    for (size_t i = 0; i < t->n_lines; i++) {
        if (t->lines[i].cells)
            print_row(out, t, t->lines[i].cells, width, indent);
        else
            fprintf(out, "%s%s\n", indent, t->lines[i].note ? t->lines[i].note : "");
    }
    free(width);
    return ferror(out) ? -1 : 0;
}
