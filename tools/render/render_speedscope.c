/*
 * speedscope export: the file format of speedscope.app (its schema:
 * https://www.speedscope.app/file-format-schema.json), one "sampled" profile per measure and
 * process. The essentials of the format, all present:
 *   $schema          "https://www.speedscope.app/file-format-schema.json"
 *   shared.frames    [{"name", "file", "line"}]: one per distinct (function, file, line), plus
 *                    the root frames (a category, a device) and "[no stack]"
 *   profiles[]       {"type": "sampled", "name", "unit", "startValue": 0, "endValue": the sum,
 *                    "samples": [[frame index, outermost first], ...], "weights": [...]}
 *   name, activeProfileIndex (0), exporter ("gradprof")
 * Each process gives four profiles, by the measures of `report --measure`: peak (bytes live at
 * the peak), total (bytes allocated), count (allocations; unit "none") and leaked (bytes live at
 * the end); a job's are named after their rank ("rank 1: peak ..."). A sample is a call site, as
 * in the folded export: its category as the root frame (its device above it when not the host),
 * then its frames outermost first; sites whose value is 0 are left out, so the host samples of
 * the peak profile sum to the host peak. In a trace without call stacks a sample is a tag key, its
 * module and op under its category (gp__export_rows). Compact JSON, one sample per line.
 */
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"
#include "json.h"
#include "render.h"
#include "render_common.h"
#include "samples.h"

enum { MAX_FRAMES = 512 };

typedef struct frame {
    const char *name, *file; /* borrowed from the profile (symbols, labels), or static */
    int line;
} frame;

typedef struct frames {
    frame *items;
    size_t n, cap;
    gp_map map; /* (hash of name and file, line, salt) -> index */
    bool oom;
} frames;

static uint64_t hash_str(uint64_t h, const char *s)
{
    for (; s && *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return (h ^ 0xff) * 1099511628211ull;
}

static bool same(const char *a, const char *b)
{
    return (a ? a : "")[0] == (b ? b : "")[0] && strcmp(a ? a : "", b ? b : "") == 0;
}

/* The index of the frame (name, file, line), added if new. */
static uint32_t frame_id(frames *f, const char *name, const char *file, int line)
{
    uint64_t h = hash_str(hash_str(1469598103934665603ull, name), file), salt = 0;
    for (struct gp_map_slot *s; (s = gp__map_find(&f->map, h, (uint64_t)line, salt)); salt++)
        if (same(f->items[s->v].name, name) && same(f->items[s->v].file, file))
            return s->v;
    if (f->n == f->cap) {
        size_t cap = f->cap * 2 + 256;
        frame *items = realloc(f->items, cap * sizeof *items);
        if (!items) {
            f->oom = true;
            return 0;
        }
        f->items = items;
        f->cap = cap;
    }
    if (!gp__map_put(&f->map, h, (uint64_t)line, salt, (uint32_t)f->n)) {
        f->oom = true;
        return 0;
    }
    f->items[f->n] = (frame){name, file, line};
    return (uint32_t)f->n++;
}

/* Each row's frame indexes (gp__export_rows: a site, or a tag key in a trace without stacks),
 * outermost first, in one pool: row i holds pool[start[i] .. start[i + 1]). */
typedef struct stacks {
    gp__export_row *rows;
    size_t n_rows;
    uint32_t *pool;
    size_t n, cap;
    size_t *start;
} stacks;

static bool pool_add(stacks *s, uint32_t v)
{
    if (s->n == s->cap) {
        size_t cap = s->cap * 2 + 1024;
        uint32_t *pool = realloc(s->pool, cap * sizeof *pool);
        if (!pool)
            return false;
        s->pool = pool;
        s->cap = cap;
    }
    s->pool[s->n++] = v;
    return true;
}

/* The frames of every row of p into st (st->start gets a row count + 1 entries). */
static int row_stacks(gp_profile *p, frames *f, stacks *st)
{
    st->rows = gp__export_rows(p, &st->n_rows);
    st->start = malloc((st->n_rows + 1) * sizeof *st->start);
    if (!st->rows || !st->start)
        return -1;
    static const char *const cuda[] = {"cuda:0", "cuda:1", "cuda:2", "cuda:3",
                                       "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
    const gp_symbol *syms[MAX_FRAMES];
    for (size_t i = 0; i < st->n_rows; i++) {
        const gp__export_row *r = &st->rows[i];
        st->start[i] = st->n;
        bool ok = true;
        if (r->device != LP_DEVICE_HOST) /* frames keep their names: static strings only */
            ok = pool_add(
                st,
                frame_id(f, r->device >= 0 && r->device < 8 ? cuda[r->device] : "cuda:?", NULL, 0));
        ok = ok && pool_add(st, frame_id(f, lp_category_name(r->category), NULL, 0));
        if (r->module) { /* a tag key (the profile's strings) */
            const char *tag[2];
            size_t n = gp__tag_frames(r->module, r->op, tag);
            for (size_t k = 0; ok && k < n; k++)
                ok = pool_add(st, frame_id(f, tag[k], NULL, 0));
        } else {
            size_t n = gp_stack_symbols(p, r->stack, syms, NULL, NULL, MAX_FRAMES);
            if (n == 0)
                ok = ok && pool_add(st, frame_id(f, "[no stack]", NULL, 0));
            for (size_t k = n; ok && k-- > 0;)
                ok = pool_add(st, frame_id(f, syms[k]->function, syms[k]->file, syms[k]->line));
        }
        if (!ok)
            return -1;
    }
    st->start[st->n_rows] = st->n;
    return f->oom ? -1 : 0;
}

static const struct {
    const char *measure, *what, *unit;
} measures[] = {{"peak", "bytes live at the peak", "bytes"},
                {"total", "bytes allocated", "bytes"},
                {"count", "allocations", "none"},
                {"leaked", "bytes live at the end", "bytes"}};

static void profile(gp__jw *j, const gp_render_process *rp, const stacks *st, size_t m, bool job)
{
    gp__measure measure;
    gp__measure_parse(measures[m].measure, &measure);
    uint64_t total = 0;
    for (size_t i = 0; i < st->n_rows; i++)
        total += gp__stats_measure(st->rows[i].stats, measure);
    char name[256];
    snprintf(name, sizeof name, "%s%s%s%s: %s", job ? "rank " : "",
             job ? (rp->rank ? rp->rank : "?") : "", job ? ": " : "", measures[m].measure,
             measures[m].what);
    gp__jw_object(j, NULL, false);
    gp__jw_str(j, "type", "sampled");
    gp__jw_str(j, "name", name);
    gp__jw_str(j, "unit", measures[m].unit);
    gp__jw_u64(j, "startValue", 0);
    gp__jw_u64(j, "endValue", total);
    gp__jw_array(j, "samples", false);
    for (size_t i = 0; i < st->n_rows; i++) {
        if (!gp__stats_measure(st->rows[i].stats, measure))
            continue;
        gp__jw_array(j, NULL, true);
        for (size_t k = st->start[i]; k < st->start[i + 1]; k++)
            gp__jw_u64(j, NULL, st->pool[k]);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_array(j, "weights", true);
    for (size_t i = 0; i < st->n_rows; i++) {
        uint64_t v = gp__stats_measure(st->rows[i].stats, measure);
        if (v)
            gp__jw_u64(j, NULL, v);
    }
    gp__jw_end(j);
    gp__jw_end(j);
}

int gp_render_speedscope(FILE *out, const gp_render_process *procs, size_t n)
{
    frames f = {0};
    stacks *st = calloc(n ? n : 1, sizeof *st);
    int rc = st ? 0 : -1;
    for (size_t k = 0; rc == 0 && k < n; k++)
        rc = row_stacks(procs[k].p, &f, &st[k]);
    if (rc == 0) {
        const char *command =
            n && procs[0].p->trace ? gp_trace_meta(procs[0].p->trace, "command") : NULL;
        char name[512];
        snprintf(name, sizeof name, "gradprof: %s", command ? command : n ? procs[0].p->path : "");
        gp__jw j;
        gp__jw_begin_compact(&j, out);
        gp__jw_object(&j, NULL, false);
        gp__jw_str(&j, "$schema", "https://www.speedscope.app/file-format-schema.json");
        gp__jw_object(&j, "shared", false);
        gp__jw_array(&j, "frames", false);
        for (size_t i = 0; i < f.n; i++) {
            gp__jw_object(&j, NULL, true);
            gp__jw_str(&j, "name", f.items[i].name);
            if (f.items[i].file)
                gp__jw_str(&j, "file", f.items[i].file);
            if (f.items[i].line > 0)
                gp__jw_u64(&j, "line", (uint64_t)f.items[i].line);
            gp__jw_end(&j);
        }
        gp__jw_end(&j);
        gp__jw_end(&j);
        gp__jw_array(&j, "profiles", false);
        for (size_t k = 0; k < n; k++)
            for (size_t m = 0; m < sizeof measures / sizeof measures[0]; m++)
                profile(&j, &procs[k], &st[k], m, n > 1);
        gp__jw_end(&j);
        gp__jw_str(&j, "name", name);
        gp__jw_u64(&j, "activeProfileIndex", 0);
        gp__jw_str(&j, "exporter", "gradprof");
        gp__jw_end(&j);
        rc = gp__jw_finish(&j);
    }
    for (size_t k = 0; st && k < n; k++) {
        free(st[k].rows);
        free(st[k].pool);
        free(st[k].start);
    }
    free(st);
    free(f.items);
    gp__map_free(&f.map);
    return rc;
}
