/*
 * Occurrence counts by kind and instance (see occurrences.h).
 */
#include "occurrences.h"

#include <stdlib.h>

#include "array.h"
#include "hashmap.h"

/* ---- the map --------------------------------------------------------------------------------- */

static inline size_t u64map_home(const gp_u64map *m, uint64_t key)
{
    return gp__mix64(key) & (m->cap - 1);
}

static struct gp_u64slot *u64map_find(const gp_u64map *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    for (size_t i = u64map_home(m, key);; i = (i + 1) & (m->cap - 1)) {
        struct gp_u64slot *s = &m->slots[i];
        if (!s->val)
            return NULL;
        if (s->key == key)
            return s;
    }
}

/* Adds key -> val (val != 0; the key must not be present). false when out of memory. */
static bool u64map_put(gp_u64map *m, uint64_t key, uint64_t val)
{
    if ((m->len + 1) * 4 > m->cap * 3) {
        gp_u64map n = {.cap = m->cap ? 2 * m->cap : 1024};
        n.slots = gp__calloc_big(n.cap, sizeof *n.slots);
        if (!n.slots)
            return false;
        for (size_t i = 0; i < m->cap; i++) {
            const struct gp_u64slot *s = &m->slots[i];
            if (!s->val)
                continue;
            size_t j = u64map_home(&n, s->key);
            while (n.slots[j].val)
                j = (j + 1) & (n.cap - 1);
            n.slots[j] = *s;
        }
        free(m->slots);
        m->slots = n.slots;
        m->cap = n.cap;
    }
    size_t i = u64map_home(m, key);
    while (m->slots[i].val)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = (struct gp_u64slot){key, val};
    m->len++;
    return true;
}

static void u64map_free(gp_u64map *m)
{
    free(m->slots);
    *m = (gp_u64map){0};
}

/* ---- kinds and runs -------------------------------------------------------------------------- */

/* A scoped kind: `count` buffers so far in instance `ordinal` (its latest), and the runs of the
 * instances before it. */
struct gp_scoped_kind {
    uint64_t ordinal, count;
    uint32_t runs; /* 1 + index into runs[] of its newest run, 0 if none */
};

/* Instances first, first + step, ..., last of one kind each had `count` buffers (step 0: first
 * only). A kind's runs go from newest to oldest by `older`, their instances decreasing. */
struct gp_count_run {
    uint64_t first, last, step, count;
    uint32_t older; /* 1 + index into runs[], 0 if none */
};

#define SCOPED (1ull << 63) /* a kinds value that is an index into scoped[] */

uint64_t gp_instance_key(uint64_t kind, uint64_t ordinal)
{
    return kind ^ gp__mix64(ordinal * 5 + 1);
}

/* Ends the kind's latest instance: its count joins the kind's newest run or starts one. */
static bool run_add(gp_occurrences *o, struct gp_scoped_kind *k)
{
    struct gp_count_run *r = k->runs ? &o->runs[k->runs - 1] : NULL;
    if (r && r->count == k->count && (!r->step || k->ordinal - r->last == r->step)) {
        r->step = k->ordinal - r->last;
        r->last = k->ordinal;
        return true;
    }
    struct gp_count_run *n = gp__push((void **)&o->runs, &o->n_runs, &o->cap_runs, sizeof *n);
    if (!n)
        return false;
    *n = (struct gp_count_run){k->ordinal, k->ordinal, 0, k->count, k->runs};
    k->runs = (uint32_t)o->n_runs;
    return true;
}

/* The count of an instance before the kind's latest, from its runs (0: none made). */
static uint64_t run_count(const gp_occurrences *o, const struct gp_scoped_kind *k, uint64_t ordinal)
{
    for (uint32_t i = k->runs; i; i = o->runs[i - 1].older) {
        const struct gp_count_run *r = &o->runs[i - 1];
        if (ordinal > r->last)
            return 0;
        if (ordinal >= r->first)
            return (r->step ? (ordinal - r->first) % r->step == 0 : ordinal == r->first) ? r->count
                                                                                         : 0;
    }
    return 0;
}

uint64_t gp_occurrence_next(gp_occurrences *o, uint64_t kind, bool scoped, uint64_t ordinal,
                            bool *oom)
{
    struct gp_u64slot *m = u64map_find(&o->kinds, kind);
    if (m && !scoped)
        return m->val++;
    if (!m) {
        struct gp_scoped_kind *k = NULL;
        if (scoped) {
            k = gp__push((void **)&o->scoped, &o->n_scoped, &o->cap_scoped, sizeof *k);
            if (!k) {
                *oom = true;
                return 0;
            }
            *k = (struct gp_scoped_kind){ordinal, 1, 0};
        }
        if (!u64map_put(&o->kinds, kind, scoped ? SCOPED | (o->n_scoped - 1) : 1))
            *oom = true;
        return 0;
    }
    struct gp_scoped_kind *k = &o->scoped[m->val & ~SCOPED];
    if (ordinal == k->ordinal)
        return k->count++;
    if (ordinal > k->ordinal) {
        if (!run_add(o, k))
            *oom = true;
        k->ordinal = ordinal;
        k->count = 1;
        return 0;
    }
    uint64_t key = gp_instance_key(kind, ordinal);
    struct gp_u64slot *c = u64map_find(&o->back, key);
    if (c)
        return c->val++;
    uint64_t n = run_count(o, k, ordinal);
    if (!u64map_put(&o->back, key, n + 1))
        *oom = true;
    return n;
}

uint64_t gp_occurrence_count(const gp_occurrences *o, uint64_t kind, uint64_t ordinal)
{
    const struct gp_u64slot *m = u64map_find(&o->kinds, kind);
    if (!m || !(m->val & SCOPED))
        return m && ordinal == 0 ? m->val : 0;
    const struct gp_scoped_kind *k = &o->scoped[m->val & ~SCOPED];
    if (ordinal == k->ordinal)
        return k->count;
    const struct gp_u64slot *c = u64map_find(&o->back, gp_instance_key(kind, ordinal));
    return c ? c->val : run_count(o, k, ordinal);
}

void gp_occurrences_free(gp_occurrences *o)
{
    u64map_free(&o->kinds);
    free(o->scoped);
    free(o->runs);
    u64map_free(&o->back);
    *o = (gp_occurrences){0};
}
