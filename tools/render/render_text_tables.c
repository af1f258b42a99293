/*
 * The text report's tables (render_text_common.h): the ranked tables by the chosen measure (tag
 * keys, sites, temporaries, leaks with their stacks), regions, iterations, tensors saved for
 * backward and the findings with the rows behind them. Ranked tables skip rows whose value is 0
 * and show c->top rows.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "render_common.h"
#include "render_text_common.h"

#define LEAK_FRAMES 4 /* frames printed per leaking site */
#define LEAK_STACK_MAX 256 /* frames counted per leaking site */

static uint64_t device_peak(const gp_profile *p, int32_t device)
{
    for (size_t i = 0; i < p->n_devices; i++)
        if (p->devices[i].device == device)
            return p->devices[i].peak_bytes;
    return 0;
}

/* ---- ranked tables --------------------------------------------------------------------------- */

static const char *measure_title(gp__measure m)
{
    switch (m) {
    case GP__MEASURE_TOTAL:
        return "bytes allocated";
    case GP__MEASURE_COUNT:
        return "allocations";
    case GP__MEASURE_LEAKED:
        return "bytes live at exit";
    default:
        return "bytes at peak";
    }
}

/* The sites ordered by m, for a site table under its title (already written): NULL when there is
 * nothing to show (after writing "none", or why there are no stacks) or no memory (c->oom set);
 * else *n sites in order, *total of them with m not 0. The caller frees the array. */
static size_t *site_table_order(gp__text_ctx *c, gp__measure m, size_t *n, size_t *total)
{
    gp_profile *p = c->p;
    if (gp__sites_lack_stacks(p, m)) {
        fprintf(c->out, GP__TEXT_INDENT "none: " GP__NO_STACKS_NOTE "\n");
        return NULL;
    }
    size_t *ix = gp__sorted_sites(p, m, c->top, n);
    if (*n && !ix) {
        c->oom = true;
        return NULL;
    }
    *total = gp__sites_nonzero(p, ix, *n, m);
    if (!*total) {
        fprintf(c->out, GP__TEXT_INDENT "none\n");
        free(ix);
        return NULL;
    }
    return ix;
}

void gp__text_tag_keys(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = 0;
    size_t *ix = gp__sorted_tag_keys(p, c->measure, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += gp__stats_measure(&p->tag_keys[ix[i]].stats, c->measure) != 0;
    gp__text_title(c, "Top tags by %s (category, op, module)", measure_title(c->measure));
    if (!total) {
        fprintf(c->out, GP__TEXT_INDENT "none\n");
        free(ix);
        return;
    }
    bool multi = p->n_devices > 1;
    static const char *const h[] = {"#",      "at peak",  "% of peak", "allocated", "count",
                                    "device", "category", "op",        "module"};
    static const char *const h1[] = {"#",     "at peak",  "% of peak", "allocated",
                                     "count", "category", "op",        "module"};
    gp__table *t = multi ? gp__table_new(9, h, "rrrrrllll") : gp__table_new(8, h1, "rrrrrlll");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_tag_key *k = &p->tag_keys[ix[i]];
        if (!gp__stats_measure(&k->stats, c->measure))
            continue;
        char b1[32], b2[32], n1[32], pc[16], dev[16];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp_format_bytes(k->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(
            t, "%s",
            gp__format_percent(k->stats.peak_bytes, device_peak(p, k->device), pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(k->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(k->stats.count, n1, sizeof n1));
        if (multi)
            gp__table_cell(t, "%s", gp__device_name(k->device, dev, sizeof dev));
        gp__table_cell(t, "%s", lp_category_name(k->category));
        gp__table_cell(t, "%s", gp__text_dash(k->op));
        gp__table_cell(t, "%s", gp__text_dash(k->module));
    }
    gp__text_table_end(c, t, shown, total);
    free(ix);
}

/* The rows of a site table: the first (at most) `top` sites of an ordering whose measure is not
 * 0, and their labels: gp_site_label, told apart where two rows share one by the first frame
 * where their stacks part (gp_labels_distinct over their frames, innermost first). */
typedef struct site_rows {
    size_t n, *site;     /* site indexes */
    const char **label;  /* borrowed from the profile, or owned[i] */
    char **owned;
} site_rows;

static void site_rows_free(site_rows *r)
{
    for (size_t i = 0; r->owned && i < r->n; i++)
        free(r->owned[i]);
    free(r->site);
    free(r->label);
    free(r->owned);
}

/* A site's frames (gp_site_frames, up to 64) joined by ';': a key for gp_labels_distinct. NULL
 * when out of memory. */
static char *frames_key(gp_profile *p, uint32_t stack)
{
    const char *frames[64];
    size_t nf = gp_site_frames(p, stack, frames, 64), len = 1;
    for (size_t f = 0; f < nf; f++)
        len += strlen(frames[f]) + 1;
    char *key = malloc(len), *at = key;
    for (size_t f = 0; key && f < nf; f++)
        at += sprintf(at, "%s%s", f ? ";" : "", frames[f]);
    if (key)
        *at = '\0';
    return key;
}

/* false when out of memory (r is freed then). */
static bool site_rows_make(gp_profile *p, const size_t *ix, size_t n, gp__measure m, size_t top,
                           site_rows *r)
{
    size_t cap = n < top ? n : top;
    *r = (site_rows){0};
    r->site = malloc((cap ? cap : 1) * sizeof *r->site);
    r->label = malloc((cap ? cap : 1) * sizeof *r->label);
    r->owned = calloc(cap ? cap : 1, sizeof *r->owned);
    char **keys = calloc(cap ? cap : 1, sizeof *keys);
    bool ok = r->site && r->label && r->owned && keys;
    for (size_t i = 0; ok && i < n && r->n < cap; i++)
        if (gp__stats_measure(&p->sites[ix[i]].stats, m))
            r->site[r->n++] = ix[i];
    for (size_t i = 0; ok && i < r->n; i++) {
        r->label[i] = gp_site_label(p, p->sites[r->site[i]].stack);
        ok = (keys[i] = frames_key(p, p->sites[r->site[i]].stack)) != NULL;
    }
    ok = ok && gp_labels_distinct(r->label, (const char *const *)keys, r->n, r->owned) == 0;
    for (size_t i = 0; ok && i < r->n; i++)
        if (r->owned[i])
            r->label[i] = r->owned[i];
    for (size_t i = 0; keys && i < r->n; i++)
        free(keys[i]);
    free(keys);
    if (!ok)
        site_rows_free(r);
    return ok;
}

void gp__text_sites(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    gp__text_title(c, "Top sites by %s", measure_title(c->measure));
    size_t n = 0, total = 0;
    size_t *ix = site_table_order(c, c->measure, &n, &total);
    if (!ix)
        return;
    /* op: the op whose buffers this call stack made last (a stack is the same for every layer
     * that runs the same code, so no module is shown here; the tag tables have them). */
    bool multi = p->n_devices > 1;
    static const char *const h[] = {"#",      "at peak",  "% of peak", "allocated", "count",
                                    "device", "category", "op",        "site"};
    static const char *const h1[] = {"#",     "at peak",  "% of peak", "allocated",
                                     "count", "category", "op",        "site"};
    site_rows rows;
    if (!site_rows_make(p, ix, n, c->measure, c->top, &rows)) {
        c->oom = true;
        free(ix);
        return;
    }
    gp__table *t = multi ? gp__table_new(9, h, "rrrrrllll") : gp__table_new(8, h1, "rrrrrlll");
    for (size_t r = 0; r < rows.n; r++) {
        const gp_site *s = &p->sites[rows.site[r]];
        char b1[32], b2[32], n1[32], pc[16], dev[16];
        int32_t device = gp_site_device(p, s);
        gp__table_cell(t, "%zu", r + 1);
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(
            t, "%s",
            gp__format_percent(s->stats.peak_bytes, device_peak(p, device), pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(s->stats.count, n1, sizeof n1));
        if (multi)
            gp__table_cell(t, "%s", gp__device_name(device, dev, sizeof dev));
        gp__table_cell(t, "%s", lp_category_name(gp_site_category(p, s)));
        gp__table_cell(t, "%s", gp__text_dash(gp_site_op(p, s)));
        gp__table_cell(t, "%s", rows.label[r]);
    }
    gp__text_table_end(c, t, rows.n, total);
    site_rows_free(&rows);
    free(ix);
}

void gp__text_temporaries(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    char n1[32];
    gp__text_title(c, "Temporaries: %s allocation%s freed before their thread's next allocation",
                   gp__format_count(p->temporary_count, n1, sizeof n1),
                   p->temporary_count == 1 ? "" : "s");
    size_t n = 0, total = 0;
    size_t *ix = site_table_order(c, GP__MEASURE_TEMPORARIES, &n, &total);
    if (!ix)
        return;
    static const char *const h[] = {"#", "temporaries", "of allocations", "allocated", "site"};
    site_rows rows;
    if (!site_rows_make(p, ix, n, GP__MEASURE_TEMPORARIES, c->top, &rows)) {
        c->oom = true;
        free(ix);
        return;
    }
    gp__table *t = gp__table_new(5, h, "rrrrl");
    for (size_t r = 0; r < rows.n; r++) {
        const gp_site *s = &p->sites[rows.site[r]];
        char b1[32], n2[32], pc[16];
        gp__table_cell(t, "%zu", r + 1);
        gp__table_cell(t, "%s", gp__format_count(s->stats.temporaries, n2, sizeof n2));
        gp__table_cell(t, "%s",
                       gp__format_percent(s->stats.temporaries, s->stats.count, pc, sizeof pc));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", rows.label[r]);
    }
    gp__text_table_end(c, t, rows.n, total);
    site_rows_free(&rows);
    free(ix);
}

/* One line of the frames under a leak row: `len` bytes of `text`, "at" before the first. */
static void text_leak_frame(gp__text_ctx *c, bool first, const char *text, int len)
{
    gp__text_put(c, GP__TEXT_INDENT "     %s %.*s", first ? "at" : "  ", len, text);
    fputc('\n', c->out);
}

/* Whether saved tensor s is of tag key k (a SAVED key: same op, module and device). */
static bool saved_of_key(const gp_saved_tensor *s, const gp_tag_key *k)
{
    return s->device == k->device && !strcmp(s->op, k->op) && !strcmp(s->module, k->module);
}

/* Under a leak row of saved tag key k, without call stacks: where the program was when it saved
 * the tensors still live (the tag's detail, from the PyTorch helper), one line per frame of its
 * own code, for the place holding the most bytes, then how many other places there are. */
static void text_leak_saved_where(gp__text_ctx *c, const gp_tag_key *k)
{
    const gp_profile *p = c->p;
    const gp_saved_tensor *best = NULL;
    for (size_t i = 0; i < p->n_saved; i++) {
        const gp_saved_tensor *s = &p->saved[i];
        if (s->stats.live_bytes && *s->where && saved_of_key(s, k) &&
            (!best || s->stats.live_bytes > best->stats.live_bytes))
            best = s;
    }
    if (!best)
        return;
    size_t others = 0; /* distinct places other than best's */
    for (size_t i = 0; i < p->n_saved; i++) {
        const gp_saved_tensor *s = &p->saved[i];
        if (!s->stats.live_bytes || !*s->where || !saved_of_key(s, k) ||
            !strcmp(s->where, best->where))
            continue;
        size_t j = 0;
        while (j < i && !(p->saved[j].stats.live_bytes && saved_of_key(&p->saved[j], k) &&
                          !strcmp(p->saved[j].where, s->where)))
            j++;
        others += j == i;
    }
    const char *w = best->where;
    for (int f = 0; *w && f < LEAK_FRAMES; f++) {
        const char *end = strstr(w, " < ");
        int len = end ? (int)(end - w) : (int)strlen(w);
        text_leak_frame(c, f == 0, w, len);
        w = end ? end + 3 : w + len;
    }
    if (others)
        fprintf(c->out,
                GP__TEXT_INDENT "        (and %zu other place%s: see \"Tensors saved for "
                                "backward\")\n",
                others, others == 1 ? "" : "s");
}

/* The leaks of a trace without stacks: one row per tag key (category, op, module). */
static void text_leaks_by_tag(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = 0, total = 0;
    size_t *ix = gp__sorted_tag_keys(p, GP__MEASURE_LEAKED, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    for (size_t i = 0; i < n; i++)
        total += p->tag_keys[ix[i]].stats.live_bytes != 0;
    if (!total) {
        fprintf(c->out, GP__TEXT_INDENT "none\n");
        free(ix);
        return;
    }
    fprintf(c->out, GP__TEXT_INDENT "by tag: " GP__NO_STACKS_NOTE "\n");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_tag_key *k = &p->tag_keys[ix[i]];
        if (!k->stats.live_bytes)
            continue;
        char x1[64], n1[32], dev[16];
        gp__text_put(c, GP__TEXT_INDENT "%zu. %s in %s allocation%s, %s, op %s, module %s", ++shown,
                     gp__format_bytes_exact(k->stats.live_bytes, x1, sizeof x1),
                     gp__format_count(k->stats.live_count, n1, sizeof n1),
                     k->stats.live_count == 1 ? "" : "s", lp_category_name(k->category),
                     gp__text_dash(k->op), gp__text_dash(k->module));
        if (p->n_devices > 1)
            fprintf(c->out, ", %s", gp__device_name(k->device, dev, sizeof dev));
        fputc('\n', c->out);
        if (k->category == LP_CAT_SAVED)
            text_leak_saved_where(c, k);
    }
    if (total > shown)
        fprintf(c->out, GP__TEXT_INDENT "(%zu more; --top 0 shows all)\n", total - shown);
    free(ix);
}

void gp__text_leaks(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    char x1[64], n1[32];
    if (gp__text_ended_cleanly(p))
        gp__text_title(c, "Live at exit (leaks): %s in %s allocation%s",
                       gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
                       gp__format_count(p->leaked_count, n1, sizeof n1),
                       p->leaked_count == 1 ? "" : "s");
    else
        gp__text_title(c,
                       "Live at the end of the trace: %s in %s allocation%s (the recording stopped "
                       "early, so not all are leaks)",
                       gp__format_bytes_exact(p->leaked_bytes, x1, sizeof x1),
                       gp__format_count(p->leaked_count, n1, sizeof n1),
                       p->leaked_count == 1 ? "" : "s");
    if (gp__sites_lack_stacks(p, GP__MEASURE_LEAKED)) {
        text_leaks_by_tag(c);
        return;
    }
    size_t n = 0, total = 0;
    size_t *ix = site_table_order(c, GP__MEASURE_LEAKED, &n, &total);
    if (!ix)
        return;
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_site *s = &p->sites[ix[i]];
        if (!s->stats.live_bytes)
            continue;
        char dev[16];
        fprintf(c->out, GP__TEXT_INDENT "%zu. %s in %s allocation%s, %s", ++shown,
                gp__format_bytes_exact(s->stats.live_bytes, x1, sizeof x1),
                gp__format_count(s->stats.live_count, n1, sizeof n1),
                s->stats.live_count == 1 ? "" : "s", lp_category_name(gp_site_category(p, s)));
        const char *op = gp_site_op(p, s); /* "relu", not "parameter, parameter" */
        if (*op && strcmp(op, lp_category_name(gp_site_category(p, s))) != 0)
            fprintf(c->out, ", %s", op);
        if (p->n_devices > 1)
            fprintf(c->out, ", %s", gp__device_name(gp_site_device(p, s), dev, sizeof dev));
        fputc('\n', c->out);
        /* The innermost frames, or a Python program's own lines where it has some (written over
         * them): its innermost native frames are torch's, the same for every leak. */
        const char *frames[LEAK_STACK_MAX];
        size_t nf = gp_site_frames(p, s->stack, frames, LEAK_STACK_MAX);
        size_t np = gp_site_program_frames(p, s->stack, frames, LEAK_FRAMES);
        if (nf == 0)
            text_leak_frame(c, true, gp_site_label(p, s->stack), INT_MAX);
        size_t shown_frames = np ? np : nf < LEAK_FRAMES ? nf : LEAK_FRAMES;
        for (size_t f = 0; f < shown_frames; f++)
            text_leak_frame(c, f == 0, frames[f], INT_MAX);
        if (nf > shown_frames)
            fprintf(c->out, GP__TEXT_INDENT "        (%s%zu more frame%s%s)\n",
                    nf == LEAK_STACK_MAX ? "at least " : "", nf - shown_frames,
                    nf - shown_frames == 1 ? "" : "s",
                    np ? "; --format folded shows whole stacks" : "");
    }
    if (total > shown)
        fprintf(c->out, GP__TEXT_INDENT "(%zu more; --top 0 shows all)\n", total - shown);
    free(ix);
}

/* ---- regions, iterations, saved tensors ------------------------------------------------------ */

void gp__text_regions(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    gp__text_title(c, "Regions (graph = saved + autograd + gradient)");
    size_t n = 0;
    size_t *ix = gp__sorted_regions(p, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    if (!n) {
        fprintf(c->out, GP__TEXT_INDENT "none (the program marked no regions)\n");
        return;
    }
    static const char *const h[] = {"region",   "entries",  "allocated",
                                    "max live", "retained", "graph allocated"};
    gp__table *t = gp__table_new(6, h, "lrrrrr");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++, shown++) {
        const gp_region_stats *r = &p->regions[ix[i]];
        char b1[32], b2[32], b3[32], b4[32], n1[32];
        gp__table_cell(t, "%s", gp__text_dash(r->name));
        gp__table_cell(t, "%s", gp__format_count(r->entries, n1, sizeof n1));
        gp__table_cell(t, "%s", gp_format_bytes(r->allocated_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", gp_format_bytes(r->max_live_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp_format_bytes(r->retained_bytes, b3, sizeof b3));
        gp__table_cell(t, "%s", gp_format_bytes(r->graph_bytes, b4, sizeof b4));
    }
    gp__text_table_end(c, t, shown, n);
    free(ix);
}

static uint64_t graph_bytes(const uint64_t *by_category)
{
    uint64_t sum = 0;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        sum += lp_category_is_graph((lp_category)c) ? by_category[c] : 0;
    return sum;
}

static void iteration_row(gp__text_ctx *c, gp__table *t, size_t i)
{
    const gp_iteration *it = &c->p->iterations[i];
    char t1[32], b1[32], b2[32], b3[32];
    gp__table_cell(t, "%s", gp__text_dash(it->mark));
    gp__table_cell(t, "%s", gp__format_ns(it->time_ns, t1, sizeof t1));
    gp__table_cell(t, "%s", gp_format_bytes(it->live_bytes, b1, sizeof b1));
    if (i == 0) {
        gp__table_cell(t, "-");
    } else {
        int64_t d = (int64_t)(it->live_bytes - c->p->iterations[i - 1].live_bytes);
        gp__table_cell(t, "%s", gp__format_delta(d, b2, sizeof b2));
    }
    gp__table_cell(t, "%s", gp_format_bytes(graph_bytes(it->live_by_category), b3, sizeof b3));
}

void gp__text_iterations(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    size_t n = p->n_iterations;
    if (!n) {
        gp__text_title(c, "Iterations");
        fprintf(c->out, GP__TEXT_INDENT "none (the program made no marks)\n");
        return;
    }
    const gp_iteration *first = &p->iterations[0], *last = &p->iterations[n - 1];
    char b1[32], b2[32], b3[32];
    gp__text_title(
        c, "Iterations: %zu mark%s, live %s at '%s', %s at '%s' (%s)", n, n == 1 ? "" : "s",
        gp_format_bytes(first->live_bytes, b1, sizeof b1), gp__text_dash(first->mark),
        gp_format_bytes(last->live_bytes, b2, sizeof b2), gp__text_dash(last->mark),
        gp__format_delta((int64_t)(last->live_bytes - first->live_bytes), b3, sizeof b3));
    static const char *const h[] = {"mark", "at", "live", "change", "graph live"};
    gp__table *t = gp__table_new(5, h, "lrrrr");
    if (n <= c->top) {
        for (size_t i = 0; i < n; i++)
            iteration_row(c, t, i);
        gp__text_table_end(c, t, n, n);
        return;
    }
    /* Truncated: the first top - 1 marks, then the last one (growth shows at the end). */
    size_t head = c->top - 1;
    for (size_t i = 0; i < head; i++)
        iteration_row(c, t, i);
    gp__table_note(t, "(%zu more; --top 0 shows all)", n - head - 1);
    iteration_row(c, t, n - 1);
    gp__text_table_end(c, t, n, n); /* the note is already in */
}

void gp__text_saved(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    gp__text_title(c, "Tensors saved for backward");
    size_t n = 0;
    size_t *ix = gp__sorted_saved(p, &n);
    if (n && !ix) {
        c->oom = true;
        return;
    }
    if (!n) {
        fprintf(c->out, GP__TEXT_INDENT "none (no op saved a tensor for backward)\n");
        return;
    }
    static const char *const h[] = {"#",      "at peak",  "saved",   "times", "max live",
                                    "at end", "saved by", "made by", "shape", "where"};
    gp__table *t = gp__table_new(10, h, "rrrrrrllll");
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < c->top; i++) {
        const gp_saved_tensor *s = &p->saved[ix[i]];
        char b1[32], b2[32], b3[32], b4[32], n1[32];
        gp__table_cell(t, "%zu", ++shown);
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.peak_bytes, b1, sizeof b1));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.total_bytes, b2, sizeof b2));
        gp__table_cell(t, "%s", gp__format_count(s->stats.count, n1, sizeof n1));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.max_live_bytes, b3, sizeof b3));
        gp__table_cell(t, "%s", gp_format_bytes(s->stats.live_bytes, b4, sizeof b4));
        gp__table_cell(t, "%s", gp__text_dash(s->module));
        gp__table_cell(t, "%s", gp__text_dash(s->op));
        gp__table_cell(t, "%s", gp__text_dash(s->shape));
        gp__table_cell(t, "%s", gp__text_dash(s->where));
    }
    gp__text_table_end(c, t, shown, n);
    free(ix);
}

/* ---- findings -------------------------------------------------------------------------------- */

void gp__text_holders(gp__text_ctx *c, const char *indent)
{
    const gp_profile *p = c->p;
    for (size_t i = 0; i < p->n_holders && i < c->top; i++) {
        const gp_holder *h = &p->holders[i];
        char n1[32], n2[32];
        gp__text_put(c, "%s%s %s (%s%s%s%s%s; %s tensor%s with a graph, %s graph nodes)",
                     indent, i ? "       " : "kept by", h->name, h->kind,
                     *h->container ? ", a " : "", h->container, *h->where ? ", " : "",
                     h->where, gp__format_count(h->tensors, n1, sizeof n1),
                     h->tensors == 1 ? "" : "s", gp__format_count(h->nodes, n2, sizeof n2));
        fputc('\n', c->out);
    }
}

void gp__text_findings(gp__text_ctx *c)
{
    gp_profile *p = c->p;
    if (!p->n_findings) {
        gp__text_title(c, "Findings");
        fprintf(c->out, GP__TEXT_INDENT "No gradient-leak findings.\n");
        return;
    }
    gp__text_title(c, "Findings: %zu gradient-leak finding%s", p->n_findings,
                   p->n_findings == 1 ? "" : "s");
    for (size_t i = 0; i < p->n_findings; i++) {
        const gp_finding *f = &p->findings[i];
        char x1[64], c1[32], t1[32], once[80];
        gp__text_put(c, "%s%zu. [%s] %s", GP__TEXT_INDENT, i + 1, gp_finding_kind_name(f->kind),
                     gp__finding_text(f));
        fputc('\n', c->out);
        fprintf(c->out, "%s   ", GP__TEXT_INDENT);
        if (f->region && *f->region)
            gp__text_put(c, "region '%s'; ", f->region);
        fprintf(c->out, "%s%s, %s event%s, first at %s\n",
                gp__format_bytes_exact(f->bytes, x1, sizeof x1),
                gp__finding_at_once(f, once, sizeof once),
                gp__format_count(f->count, c1, sizeof c1), f->count == 1 ? "" : "s",
                gp__format_ns(f->first_time_ns, t1, sizeof t1));
        if (f->message && *f->message) {
            gp__text_put(c, "%s   %s", GP__TEXT_INDENT, f->message);
            fputc('\n', c->out);
        }
        if (f->where && *f->where) {
            gp__text_put(c, "%s   at %s", GP__TEXT_INDENT, f->where);
            fputc('\n', c->out);
        }
        char note[512];
        if (gp__finding_thread_note(p, f, note, sizeof note)) {
            gp__text_put(c, "%s   %s", GP__TEXT_INDENT, note);
            fputc('\n', c->out);
        }
        if (f->kind == GP_FIND_GROWTH || f->kind == GP_FIND_GRAPH_ESCAPES)
            gp__text_holders(c, GP__TEXT_INDENT "   ");
        if (!f->n_items)
            continue;
        size_t *ix = gp__sorted_finding_items(f);
        if (!ix) {
            c->oom = true;
            continue;
        }
        bool stacks = gp__finding_has_stacks(f);
        static const char *const h[] = {"bytes", "count", "category", "op", "module", "site"};
        gp__table *t = gp__table_new(stacks ? 6 : 5, h, "rrllll");
        size_t shown = 0;
        for (size_t k = 0; k < f->n_items && shown < c->top; k++, shown++) {
            const gp_finding_item *it = &f->items[ix[k]];
            char b2[32], n2[32];
            gp__table_cell(t, "%s", gp_format_bytes(it->bytes, b2, sizeof b2));
            gp__table_cell(t, "%s", gp__format_count(it->count, n2, sizeof n2));
            gp__table_cell(t, "%s", lp_category_name(it->category));
            gp__table_cell(t, "%s", gp__text_dash(it->op));
            gp__table_cell(t, "%s", gp__text_dash(it->module));
            if (stacks)
                gp__table_cell(t, "%s", it->stack ? gp_site_label(p, it->stack) : "-");
        }
        gp__text_table_end_at(c, t, shown, f->n_items, GP__TEXT_INDENT "     ");
        free(ix);
    }
}
