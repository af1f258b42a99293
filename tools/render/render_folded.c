/*
 * Folded stacks ("root;frame;...;leaf VALUE" lines) of a gp_profile, the input format of
 * flamegraph.pl, inferno and speedscope.
 *
 * Each call site with a value by the chosen measure is a path of frames: the device (other than
 * the host), the category, then the site's frames outermost first; in a trace without call stacks
 * each tag key is one, its module and op under its category (gp__export_rows). Paths are sorted
 * frame by frame (identical ones merged), so that every frame's callees form one run; then the tree
 * is walked from the roots and cut where a frame's run weighs less than the cut-off, its weight
 * going to the caller's "[smaller stacks]" line. The frame names are the profile's own strings: a
 * line costs one pointer per frame until it is written. Names are sanitized when written: ';'
 * becomes ':' and control characters become spaces, so every line parses.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "render_common.h"

enum { FOLDED_MAX_FRAMES = LP_MAX_STACK_FRAMES };

#define SMALLER_STACKS "[smaller stacks]"

typedef struct folded_path {
    size_t first;   /* its frames: pool[first .. first + n), outermost first */
    uint32_t n;     /* frames in the path */
    uint32_t roots; /* how many of them are roots (device, category): never cut */
    uint64_t value;
} folded_path;

typedef struct folded {
    FILE *out;
    const char **pool; /* every path's frames, one after the other */
    folded_path *paths;
    size_t n_paths;
    uint64_t min;      /* the absolute cut-off (o->folded_min) */
    double min_share;  /* the cut-off as a share of the root's total */
    uint64_t root_min; /* the cut-off in the root being written */
    struct {
        int32_t device;
        char name[32];
    } devices[16]; /* the device roots' names ("cuda:0"), as strings that live as long as f */
    size_t n_devices;
    int rc;
} folded;

/* The root frame of `device`: its name, kept in f (the 16 first devices; later ones share
 * "cuda:?"). */
static const char *device_root(folded *f, int32_t device)
{
    for (size_t i = 0; i < f->n_devices; i++)
        if (f->devices[i].device == device)
            return f->devices[i].name;
    if (f->n_devices == sizeof f->devices / sizeof f->devices[0])
        return "cuda:?";
    f->devices[f->n_devices].device = device;
    return gp__device_name(device, f->devices[f->n_devices++].name, sizeof f->devices[0].name);
}

static const char *frame_of(const folded *f, const folded_path *p, size_t d)
{
    return f->pool[p->first + d];
}

static folded *g_sorting; /* the folded whose paths qsort compares (one thread) */

static int cmp_path(const void *a, const void *b)
{
    const folded_path *x = a, *y = b;
    for (size_t d = 0; d < x->n && d < y->n; d++) {
        const char *fx = frame_of(g_sorting, x, d), *fy = frame_of(g_sorting, y, d);
        int c = fx == fy ? 0 : strcmp(fx, fy);
        if (c != 0)
            return c;
    }
    return (x->n > y->n) - (x->n < y->n); /* a caller's own line before its callees' */
}

/* Whether path a's frame d is path b's. */
static bool same_frame(const folded *f, const folded_path *a, const folded_path *b, size_t d)
{
    const char *x = frame_of(f, a, d), *y = frame_of(f, b, d);
    return x == y || strcmp(x, y) == 0;
}

/* Writes frames [0, d) of path p and then `leaf` (NULL: none) with `value`. */
static void put_line(folded *f, const folded_path *p, size_t d, const char *leaf, uint64_t value)
{
    for (size_t i = 0; i <= d; i++) {
        const char *name = i < d ? frame_of(f, p, i) : leaf;
        if (name == NULL)
            break;
        if (i > 0)
            fputc(';', f->out);
        if (name[0] == '\0')
            name = "[unknown]";
        for (const unsigned char *c = (const unsigned char *)name; *c; c++)
            fputc(*c == ';' ? ':' : *c < 0x20 || *c == 0x7f ? ' ' : *c, f->out);
    }
    if (fprintf(f->out, " %llu\n", (unsigned long long)value) < 0)
        f->rc = -1;
}

/* Writes paths [lo, hi), which share their first d frames (d >= 1) and together weigh at least
 * the cut-off (or are a root): the callers' own lines, each callee that weighs enough (walked
 * down), and the rest as one "[smaller stacks]" line. */
static void put_tree(folded *f, size_t lo, size_t hi, size_t d)
{
    uint64_t own = 0, smaller = 0;
    size_t i = lo;
    while (i < hi && f->paths[i].n == d) /* sorted: the path that ends here comes first */
        own += f->paths[i++].value;
    if (own)
        put_line(f, &f->paths[lo], d, NULL, own);
    while (i < hi) {
        size_t j = i;
        uint64_t run = 0;
        while (j < hi && same_frame(f, &f->paths[i], &f->paths[j], d))
            run += f->paths[j++].value;
        if (d == 0) { /* a root: its own cut-off */
            f->root_min = (uint64_t)(f->min_share * (double)run);
            if (f->root_min < f->min)
                f->root_min = f->min;
        }
        if (d < f->paths[i].roots || run >= f->root_min)
            put_tree(f, i, j, d + 1);
        else
            smaller += run;
        i = j;
    }
    if (smaller)
        put_line(f, &f->paths[lo], d, SMALLER_STACKS, smaller);
}

int gp_render_folded(FILE *out, gp_profile *p, const gp_render_options *o)
{
    gp__measure measure;
    if (gp__measure_parse(o != NULL ? o->measure : NULL, &measure) != 0) {
        errno = EINVAL; /* the CLI validates --measure; this guards library callers */
        return -1;
    }
    folded f = {.out = out,
                .min = o != NULL ? o->folded_min : 0,
                .min_share = o != NULL ? o->folded_min_share : 0.001};
    size_t pool_cap = 0, pool_len = 0, n_rows;
    gp__export_row *rows = gp__export_rows(p, &n_rows);
    f.paths = calloc(n_rows ? n_rows : 1, sizeof *f.paths);
    if (rows == NULL || f.paths == NULL) {
        free(rows);
        free(f.paths);
        return -1;
    }
    const char *frames[FOLDED_MAX_FRAMES];
    for (size_t i = 0; i < n_rows && f.rc == 0; i++) {
        const gp__export_row *r = &rows[i];
        uint64_t v = gp__stats_measure(r->stats, measure);
        if (v == 0)
            continue;
        size_t nf = 0;
        if (r->stack != 0) {
            nf = gp_site_frames(p, r->stack, frames, FOLDED_MAX_FRAMES);
        } else if (r->module) { /* a tag key (frames innermost first here) */
            const char *tag[2];
            for (size_t k = gp__tag_frames(r->module, r->op, tag); k-- > 0;)
                frames[nf++] = tag[k];
        }
        size_t need = nf + 3;
        if (pool_len + need > pool_cap) {
            size_t cap = pool_cap ? pool_cap * 2 : 4096;
            while (cap < pool_len + need)
                cap *= 2;
            const char **grown = realloc(f.pool, cap * sizeof *grown);
            if (grown == NULL) {
                f.rc = -1;
                break;
            }
            f.pool = grown;
            pool_cap = cap;
        }
        folded_path *path = &f.paths[f.n_paths++];
        *path = (folded_path){.first = pool_len, .value = v};
        const char **at = f.pool + pool_len;
        if (r->device != LP_DEVICE_HOST)
            at[path->n++] = device_root(&f, r->device);
        at[path->n++] = lp_category_name(r->category);
        path->roots = path->n;
        if (nf == 0 && !r->module)
            at[path->n++] = "[no stack]";
        for (size_t k = nf; k-- > 0;) /* innermost first -> outermost first */
            at[path->n++] = frames[k];
        pool_len += path->n;
    }
    if (f.rc == 0 && f.n_paths) {
        g_sorting = &f;
        qsort(f.paths, f.n_paths, sizeof *f.paths, cmp_path);
        g_sorting = NULL;
        put_tree(&f, 0, f.n_paths, 0);
    }
    free(rows);
    free(f.pool);
    free(f.paths);
    if (fflush(out) != 0 || ferror(out))
        f.rc = -1;
    return f.rc;
}
