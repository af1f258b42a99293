/*
 * The gradient-leak detectors (detectors.h): findings accumulated per (kind, region) while the
 * engine replays a trace, and the growth detector, which judges the marks at the end.
 */
#include "detectors.h"
#include "array.h"
#include "hashmap.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define COUNTED_ITEM_BITS 20

/* The region of forgot_no_grad outside every inference region: the whole run, judged so only when
 * no backward pass ran in it (gp__detectors_finish). One pointer: findings are keyed by it. */
static const char WHOLE_RUN[] = "";

typedef struct finding_acc {
    gp_finding f;
    uint64_t live; /* its saved-for-backward bytes alive now (live_add) */
    size_t cap;    /* of f.items */
    gp_map items;  /* (category, op, module) -> item index */
} finding_acc;

/* A graph tag key's live bytes at the marks, parallel to p->tag_keys. */
typedef struct key_growth {
    uint64_t first, prev, last; /* at the first mark after the warm-up, the previous and the last */
    uint32_t grew;              /* intervals after the warm-up in which it grew */
} key_growth;

struct gp__detectors {
    uint64_t growth_threshold;
    bool *oom;             /* the engine's */
    finding_acc *findings; /* one per (kind, region), in order of first occurrence */
    size_t n_findings, cap_findings;
    gp_map finding_map; /* (kind, region) -> index */
    /* the forgot_no_grad buffers still in their graph category: birth number -> the finding's
     * index << COUNTED_ITEM_BITS | the item's (gp__detect_graph_left takes them back out) */
    gp_map counted;
    key_growth *key_growth;
    size_t n_key_growth;
    /* births up to the last mark, and the bytes of those graph buffers that a backward pass
     * released since it */
    uint64_t mark_seq, used_since_mark;
};

static const char *const finding_names[GP_FIND_KIND_COUNT] = {
    "graph_without_grad",      "forgot_no_grad",          "growth_across_iterations",
    "param_grad_in_inference", "graph_escapes_inference", "autograd_error"};

const char *gp_finding_kind_name(gp_finding_kind k)
{
    return (unsigned)k < GP_FIND_KIND_COUNT ? finding_names[k] : "unknown";
}

gp__detectors *gp__detectors_new(uint64_t growth_threshold, bool *oom)
{
    gp__detectors *d = calloc(1, sizeof *d);
    if (d) {
        d->growth_threshold = growth_threshold;
        d->oom = oom;
    }
    return d;
}

void gp__detectors_free(gp__detectors *d)
{
    if (!d)
        return;
    for (size_t k = 0; k < d->n_findings; k++) {
        free(d->findings[k].items.slots);
        free(d->findings[k].f.items);
    }
    free(d->findings);
    free(d->finding_map.slots);
    free(d->counted.slots);
    free(d->key_growth);
    free(d);
}

/* ---- findings -------------------------------------------------------------------------------- */

/* The accumulator of findings of `kind` in `region` (NULL = none), made on first use. */
static finding_acc *finding_get(gp__detectors *d, gp_finding_kind kind, const char *region,
                                uint64_t now)
{
    region = region ? region : "";
    struct gp_map_slot *s = gp__map_find(&d->finding_map, kind, (uintptr_t)region, 0);
    if (s)
        return &d->findings[s->v];
    finding_acc *a = gp__push((void **)&d->findings, &d->n_findings, &d->cap_findings, sizeof *a);
    if (!a ||
        !gp__map_put(&d->finding_map, kind, (uintptr_t)region, 0, (uint32_t)(d->n_findings - 1))) {
        *d->oom = true;
        return NULL;
    }
    a->f.kind = kind;
    a->f.region = region;
    a->f.first_time_ns = now;
    return a;
}

/* Saved-for-backward bytes of finding a came (delta > 0) or went: f.peak_bytes keeps the most
 * alive at once. */
static void live_add(finding_acc *a, int64_t delta)
{
    a->live += (uint64_t)delta;
    if (a->live > a->f.peak_bytes)
        a->f.peak_bytes = a->live;
}

/* Counts a buffer in finding a, under its item (category, op, module); the item's index, or NONE
 * when out of memory. */
static uint32_t item_add(gp__detectors *d, finding_acc *a, lp_category cat, const char *op,
                         const char *module, uint32_t stack, uint64_t bytes)
{
    a->f.bytes += bytes;
    a->f.count++;
    struct gp_map_slot *s =
        gp__map_find(&a->items, (uint64_t)cat, (uintptr_t)op, (uintptr_t)module);
    gp_finding_item *it;
    if (s) {
        it = &a->f.items[s->v];
    } else {
        it = gp__push((void **)&a->f.items, &a->f.n_items, &a->cap, sizeof *it);
        if (!it || !gp__map_put(&a->items, (uint64_t)cat, (uintptr_t)op, (uintptr_t)module,
                                (uint32_t)(a->f.n_items - 1))) {
            *d->oom = true;
            return NONE;
        }
        *it = (gp_finding_item){.category = cat, .op = op, .module = module, .stack = stack};
    }
    it->bytes += bytes;
    it->count++;
    return (uint32_t)(it - a->f.items);
}

/* Counts a buffer in the finding of (kind, region), made on first use. */
static void finding_add(gp__detectors *d, gp_finding_kind kind, const char *region, lp_category cat,
                        const char *op, const char *module, uint32_t stack, uint64_t bytes,
                        uint64_t now)
{
    finding_acc *a = finding_get(d, kind, region, now);
    if (a)
        item_add(d, a, cat, op, module, stack, bytes);
}

/* ---- the per-buffer detectors ---------------------------------------------------------------- */

bool gp__detect_graph_buffer(gp__detectors *d, const gp__grad_context *c, lp_category cat,
                             const char *op, const char *module, uint32_t stack, uint64_t size,
                             uint64_t seq, uint64_t now)
{
    if (c->grad_off_depth > 0 && c->grad_on_depth == 0 && c->backward_depth == 0)
        finding_add(d, GP_FIND_GRAPH_WITHOUT_GRAD, LP_REGION_NO_GRAD, cat, op, module, stack, size,
                    now);
    const char *inf = c->inference_region;
    if (c->backward_depth > 0)
        return false;
    if (inf && cat == LP_CAT_GRADIENT)
        finding_add(d, GP_FIND_PARAM_GRAD_IN_INFERENCE, inf, cat, op, module, stack, size, now);
    bool grad_on = !c->mode_off && c->grad_off_depth == 0 && c->event_grad;
    if (!lp_category_is_graph_structure(cat) || !grad_on)
        return false;
    /* outside inference regions only tagged saves count (a tagging source, which also records
     * the backward passes), and only for a run that turns out to have none (finish) */
    if (!inf && cat != LP_CAT_SAVED)
        return false;
    finding_acc *a = finding_get(d, GP_FIND_FORGOT_NO_GRAD, inf ? inf : WHOLE_RUN, now);
    if (!a)
        return false;
    if (c->grad_off_elsewhere && !a->f.grad_off_thread) {
        a->f.grad_off_thread = c->grad_off_elsewhere;
        a->f.built_thread = c->thread;
    }
    uint32_t item = item_add(d, a, cat, op, module, stack, size);
    size_t finding = (size_t)(a - d->findings);
    if (item == NONE || finding >= (NONE >> COUNTED_ITEM_BITS) ||
        item >= 1u << COUNTED_ITEM_BITS) /* beyond what a count can name: it stays counted */
        return false;
    if (!gp__map_put(&d->counted, seq, 0, 0, (uint32_t)finding << COUNTED_ITEM_BITS | item)) {
        *d->oom = true;
        return false;
    }
    if (cat == LP_CAT_SAVED)
        live_add(a, (int64_t)size);
    return true;
}

void gp__detect_graph_left(gp__detectors *d, uint64_t seq, uint64_t size, bool counted,
                           bool in_backward)
{
    if (in_backward && seq <= d->mark_seq)
        d->used_since_mark += size;
    struct gp_map_slot *s = counted ? gp__map_find(&d->counted, seq, 0, 0) : NULL;
    if (!s)
        return;
    uint32_t v = s->v;
    gp__map_remove(&d->counted, s);
    finding_acc *a = &d->findings[v >> COUNTED_ITEM_BITS];
    gp_finding *f = &a->f;
    gp_finding_item *it = &f->items[v & ((1u << COUNTED_ITEM_BITS) - 1)];
    if (it->category == LP_CAT_SAVED)
        live_add(a, -(int64_t)size);
    if (!in_backward)
        return;
    it->bytes -= size;
    it->count--;
    f->bytes -= size;
    f->count--;
}

bool gp__detect_escape(gp__detectors *d, const char *region, uint64_t saved, uint64_t now)
{
    finding_acc *a = finding_get(d, GP_FIND_GRAPH_ESCAPES, region, now);
    if (!a)
        return false;
    if (a->f.count < 64) /* bounded, so that a long run cannot make the engine's scan quadratic */
        return true;
    a->f.bytes += saved; /* counted, not itemised */
    a->f.count++;
    return false;
}

void gp__detect_escape_item(gp__detectors *d, const char *region, lp_category cat, const char *op,
                            const char *module, uint32_t stack, uint64_t size, uint64_t now)
{
    finding_add(d, GP_FIND_GRAPH_ESCAPES, region, cat, op, module, stack, size, now);
}

void gp__detect_escape_live(gp__detectors *d, const char *region, int64_t delta, uint64_t now)
{
    finding_acc *a = finding_get(d, GP_FIND_GRAPH_ESCAPES, region, now);
    if (a)
        live_add(a, delta);
}

void gp__detect_autograd_error(gp__detectors *d, const char *const f[5], uint64_t now)
{
    finding_add(d, GP_FIND_AUTOGRAD_ERROR, "", LP_CAT_SAVED, f[2], f[3], 0, 0, now);
    finding_acc *a = finding_get(d, GP_FIND_AUTOGRAD_ERROR, "", now);
    if (a && !a->f.message) {
        a->f.error_kind = f[0];
        a->f.message = f[1];
        a->f.where = f[4];
    }
}

/* ---- growth across iterations ---------------------------------------------------------------- */

#define GROWTH_WARMUP 1 /* marks the growth detector skips: the first iteration warms up */

void gp__detect_mark(gp__detectors *d, const gp_profile *p)
{
    size_t mark = p->n_iterations - 1;
    d->mark_seq = p->alloc_count;
    d->used_since_mark = 0;
    if (d->n_key_growth < p->n_tag_keys) {
        key_growth *g = realloc(d->key_growth, p->n_tag_keys * sizeof *g);
        if (!g) {
            *d->oom = true;
            return;
        }
        memset(g + d->n_key_growth, 0, (p->n_tag_keys - d->n_key_growth) * sizeof *g);
        d->key_growth = g;
        d->n_key_growth = p->n_tag_keys;
    }
    for (size_t k = 0; k < p->n_tag_keys; k++) {
        if (!lp_category_is_graph_structure(p->tag_keys[k].category))
            continue;
        key_growth *g = &d->key_growth[k];
        uint64_t live = p->tag_keys[k].stats.live_bytes;
        if (mark == GROWTH_WARMUP)
            g->first = live;
        else if (mark > GROWTH_WARMUP && live > g->prev)
            g->grew++;
        g->prev = g->last = live;
    }
}

/* The graph at a mark: saved tensors and graph nodes (parameter gradients, made once by the
 * first backward and kept, say nothing of what a graph keeps). */
static uint64_t graph_live(const gp_iteration *it)
{
    uint64_t sum = 0;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        sum += lp_category_is_graph_structure((lp_category)c) ? it->live_by_category[c] : 0;
    return sum;
}

/*
 * The growth detector, at the end. It judges the graphs only (saved, autograd): a program whose
 * own data grows (a cache, collected results) does not build a graph by growing.
 * The first GROWTH_WARMUP marks warm up; from there to the last mark, the graph memory live at
 * the marks must grow by more than the threshold, in at least 3/4 of the intervals, over 2
 * intervals or more: a steady loop, whose graph memory is the same at every mark, never fires;
 * nor does a loop whose graph memory at the last mark a backward pass then took back, at least
 * half the growth (REINFORCE keeps each step's graph to the end of its episode, for backward).
 * Items: each graph-structure tag key (category, op, module) that grew, with its top site.
 */
static void detect_growth(gp__detectors *d, const gp_profile *p)
{
    size_t n = p->n_iterations, base = GROWTH_WARMUP;
    if (n < base + 3)
        return;
    const gp_iteration *first = &p->iterations[base], *last = &p->iterations[n - 1];
    uint64_t at_first = graph_live(first), at_last = graph_live(last);
    if (at_last <= at_first + d->growth_threshold)
        return;
    size_t grew = 0;
    for (size_t i = base + 1; i < n; i++)
        grew += graph_live(&p->iterations[i]) > graph_live(&p->iterations[i - 1]);
    if (grew * 4 < (n - 1 - base) * 3)
        return;
    if (d->used_since_mark * 2 >= at_last - at_first)
        return;
    finding_acc *a = finding_get(d, GP_FIND_GROWTH, "", first->time_ns);
    if (!a)
        return;
    a->f.first_time_ns = first->time_ns;
    a->f.bytes = at_last - at_first;
    a->f.count = grew;
    a->f.grew_from = (uint32_t)base + 1;
    a->f.grew_to = (uint32_t)n;
    for (size_t k = 0; k < d->n_key_growth; k++) {
        const key_growth *g = &d->key_growth[k];
        const gp_tag_key *key = &p->tag_keys[k];
        if (!lp_category_is_graph_structure(key->category) || g->last <= g->first)
            continue;
        gp_finding_item *it = gp__push((void **)&a->f.items, &a->f.n_items, &a->cap, sizeof *it);
        if (!it) {
            *d->oom = true;
            return;
        }
        uint32_t stack = key->top_site != NONE ? p->sites[key->top_site].stack : 0;
        *it = (gp_finding_item){key->category,      key->op, key->module, stack,
                                g->last - g->first, g->grew};
    }
}

/* ---- the end --------------------------------------------------------------------------------- */

/* Whether the graphs saved outside every inference region are forgot_no_grad's: the run
 * iterated (two marks or more) and never ran backward, so no graph it built was used (an
 * evaluation whose model was never put in eval mode), and no inference region found one. */
static bool whole_run_judged(const gp__detectors *d, const gp_profile *p)
{
    if (p->n_iterations < 2)
        return false;
    for (size_t i = 0; i < p->n_regions; i++)
        if (p->regions[i].entries && !strcmp(p->regions[i].name, LP_REGION_BACKWARD))
            return false;
    for (size_t i = 0; i < d->n_findings; i++) {
        const gp_finding *f = &d->findings[i].f;
        if (f->kind == GP_FIND_FORGOT_NO_GRAD && f->region != WHOLE_RUN && f->count)
            return false;
    }
    return true;
}

int gp__detectors_finish(gp__detectors *d, gp_profile *p)
{
    detect_growth(d, p);
    bool whole_run = whole_run_judged(d, p);
    /* items by bytes, largest first; one finding per (kind, region), by kind then first seen;
     * forgot_no_grad's buffers that a backward pass used are gone from their items (an item or a
     * finding left with none is dropped) */
    p->findings = calloc(d->n_findings ? d->n_findings : 1, sizeof *p->findings);
    if (!p->findings)
        return -1;
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        for (size_t fi = 0; fi < d->n_findings; fi++) {
            finding_acc *a = &d->findings[fi];
            if (a->f.kind != (gp_finding_kind)k)
                continue;
            if (k == GP_FIND_FORGOT_NO_GRAD) {
                if (a->f.region == WHOLE_RUN && !whole_run)
                    continue;
                size_t n = 0;
                for (size_t i = 0; i < a->f.n_items; i++)
                    if (a->f.items[i].count)
                        a->f.items[n++] = a->f.items[i];
                a->f.n_items = n;
                if (!a->f.count)
                    continue;
            }
            for (size_t i = 1; i < a->f.n_items; i++) /* insertion sort: few items, stable */
                for (size_t j = i; j > 0 && a->f.items[j].bytes > a->f.items[j - 1].bytes; j--) {
                    gp_finding_item tmp = a->f.items[j];
                    a->f.items[j] = a->f.items[j - 1];
                    a->f.items[j - 1] = tmp;
                }
            gp_finding *f = &p->findings[p->n_findings++];
            *f = a->f;
            a->f.items = NULL; /* the profile's now */
        }
    return 0;
}
