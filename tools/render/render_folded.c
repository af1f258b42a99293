/*
 * Folded stacks ("root;frame;...;leaf VALUE" lines) of a gp_profile, the input format of
 * flamegraph.pl and speedscope.
 *
 * One line per call site: the site's category as the root frame (so a flame graph splits by
 * category first), then the site's frames outermost first, then a space and the site's value by
 * the chosen measure — "peak" (bytes live at the peak; the default), "total" (bytes allocated),
 * "count" (allocations) or "leaked" (bytes live at the end). Sites whose value is 0 are left out.
 * Sites of a device other than the host get the device ("cuda:0") as an extra root above the
 * category, so the host's lines alone sum to the host's figures. Frame names are sanitized: ';'
 * becomes ':' and control characters become spaces, so every line parses. Lines with the same
 * stack (sites that differ only in skipped allocator frames) are merged by adding their values,
 * and lines are sorted, so the output is deterministic.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "render_common.h"

enum { FOLDED_MAX_FRAMES = 256 };

typedef struct folded_line {
    char *stack; /* "root;...;leaf", owned */
    uint64_t value;
} folded_line;

/* Appends `frame` to buf at *len, sanitized; returns -1 if buf is full (the frame is cut). */
static int append_frame(char *buf, size_t size, size_t *len, const char *frame)
{
    if (*len > 0) {
        if (*len + 1 >= size)
            return -1;
        buf[(*len)++] = ';';
    }
    if (frame == NULL || frame[0] == '\0')
        frame = "[unknown]";
    for (const unsigned char *c = (const unsigned char *)frame; *c; c++) {
        if (*len + 1 >= size) {
            buf[*len] = '\0';
            return -1;
        }
        unsigned char ch = *c;
        if (ch == ';')
            ch = ':';
        else if (ch < 0x20 || ch == 0x7f)
            ch = ' ';
        buf[(*len)++] = (char)ch;
    }
    buf[*len] = '\0';
    return 0;
}

static int cmp_line(const void *a, const void *b)
{
    const folded_line *x = a, *y = b;
    return strcmp(x->stack, y->stack);
}

int gp_render_folded(FILE *out, gp_profile *p, const gp_render_options *o)
{
    gp__measure measure;
    if (gp__measure_parse(o != NULL ? o->measure : NULL, &measure) != 0) {
        errno = EINVAL; /* the CLI validates --measure; this guards library callers */
        return -1;
    }
    folded_line *lines = calloc(p->n_sites ? p->n_sites : 1, sizeof *lines);
    if (lines == NULL)
        return -1;
    size_t n = 0;
    int rc = 0;
    const char *frames[FOLDED_MAX_FRAMES];
    char buf[16384];
    for (size_t i = 0; i < p->n_sites; i++) {
        const gp_site *s = &p->sites[i];
        uint64_t v = gp__stats_measure(&s->stats, measure);
        if (v == 0)
            continue;
        size_t len = 0;
        buf[0] = '\0';
        if (s->device != LP_DEVICE_HOST) {
            char dev[32];
            append_frame(buf, sizeof buf, &len, gp__device_name(s->device, dev, sizeof dev));
        }
        append_frame(buf, sizeof buf, &len, lp_category_name(s->category));
        size_t nf = s->stack != 0 ? gp_site_frames(p, s->stack, frames, FOLDED_MAX_FRAMES) : 0;
        if (nf == 0)
            append_frame(buf, sizeof buf, &len, "[no stack]");
        for (size_t f = nf; f-- > 0;) /* innermost first -> outermost first */
            if (append_frame(buf, sizeof buf, &len, frames[f]) != 0)
                break;
        lines[n].stack = strdup(buf);
        if (lines[n].stack == NULL) {
            rc = -1;
            break;
        }
        lines[n++].value = v;
    }
    if (rc == 0) {
        qsort(lines, n, sizeof *lines, cmp_line);
        for (size_t i = 0; i < n; i++) {
            uint64_t v = lines[i].value;
            while (i + 1 < n && strcmp(lines[i].stack, lines[i + 1].stack) == 0)
                v += lines[++i].value;
            if (fprintf(out, "%s %llu\n", lines[i].stack, (unsigned long long)v) < 0)
                rc = -1;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(lines[i].stack);
    free(lines);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    return rc;
}
