/*
 * Buffer-by-buffer alignment of two runs (see align.h for the definitions).
 *
 * Each side keeps a record per live host buffer and a lazy snapshot of its live set at its
 * instant (A: the peak; B: the corresponding instant, which moves forward while B replays): when
 * the instant moves, the records freed since the last one are dropped; a record freed later, but
 * live at the instant, goes to the `gone` list; a record retagged after the instant keeps the
 * labels it had at it. At the end the snapshot is the live records born up to the instant plus
 * the gone list.
 *
 * Memory: the live buffers of each run, the buffers live at A's peak, the anchors and the
 * occurrence counts (occurrences.h: by kind, not by iteration), never the length of the trace.
 */
#include "align.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "hashmap.h"
#include "keyed_sort.h"
#include "occurrences.h"

#define NONE GP_MAP_NONE

typedef struct rec { /* 104 bytes */
    uint64_t kind, ordinal, occ; /* its twin: buffer occ of kind in its scope's instance ordinal */
    uint64_t seq, size;          /* seq: its birth number, the allocations so far; 0: not in use */
    uint64_t loose_key; /* the twin key with only GP_ALIGN_LOOSE_FRAMES frames */
    uint64_t alloc_ns, free_ns, free_allocs; /* free_allocs = UINT64_MAX: live */
    const char *op, *module;
    uint32_t stack;
    union {
        uint32_t twin;      /* B: index of its twin among A's peak buffers (a_peak[]), or NONE */
        uint32_t next_free; /* not in use: the next free record */
    };
    uint32_t frozen; /* 1 + index into the side's frozen labels, 0 if none (rec_snap_labels) */
    uint8_t cat;     /* an lp_category */
    bool ever_saved; /* tagged SAVED at some point of its life (A: after the peak too) */
} rec;

/* The labels a record in the snapshot had at the instant, kept when it is retagged after it;
 * the list is emptied whenever the instant moves. */
typedef struct frozen_labels {
    uint32_t rec; /* whose */
    uint8_t cat;
    const char *op, *module;
} frozen_labels;

/* A buffer live at A's peak, with what B did with its twin. */
typedef struct peak_buf {
    rec a; /* A's record (labels resolved to the peak) */
    uint64_t b_seq, b_alloc_ns, b_free_ns, b_free_allocs; /* b_seq 0: no twin */
} peak_buf;

/* An allocation of A after its peak, and the allocation of B that is its twin. */
typedef struct anchor {
    uint64_t key, occ;     /* gp_instance_key, occurrence */
    uint64_t a_seq, b_seq; /* b_seq 0: B made no twin */
} anchor;

/* The stack hashes of one site (stack_hashes), 0 until computed. */
typedef struct site_hash {
    uint64_t strict, loose;
} site_hash;

typedef struct side {
    rec *recs;
    size_t n_recs, cap_recs;
    uint32_t free_rec;
    size_t n_live; /* records of live buffers (a buffer's record: its gp_buffer_event.handle - 1) */
    uint32_t *gone;
    size_t n_gone, cap_gone;
    uint64_t snap_seq, snap_ns;
    frozen_labels *frozen;
    size_t n_frozen, cap_frozen;
    gp_occurrences occ; /* the buffers so far of each kind, by instance of its scope */
    gp_map threads; /* the reader's thread index -> its stable identity (thread_identity) */
    gp_map memo;  /* (kind, id) -> index into hashes: string hashes (kind 1) */
    uint64_t *hashes;
    size_t n_hashes, cap_hashes;
    struct {
        const char *str;
        uint64_t hash;
    } recent[GP_RECENT];    /* string_hash's last answers: a few labels, asked for per buffer */
    site_hash *site_hashes; /* by the profile's site index */
    size_t n_site_hashes;
    uint64_t allocs, end_ns;
} side;

struct gp__align_internal {
    side s[2];
    gp_replay_observer obs[2];
    peak_buf *peak;   /* A's buffers live at its peak, in birth order */
    size_t n_peak;
    anchor *anchors;  /* A's allocations after its peak, sampled every `stride` */
    size_t n_anchors, cap_anchors;
    uint64_t stride;
    /* The twins B may make (A's peak buffers and anchors), by instance key (gp_instance_key):
     * each key's twins in order of occurrence, and a cursor that B's buffers of that key, which
     * come in order of occurrence too, move along them. A buffer is a twin when its occurrence is
     * the cursor's: one probe of a table of keys, whose slot holds the twin at the cursor, where
     * a map of (key, occurrence) costs a probe of a table as large as A's peak. Without stacks a
     * key has many twins and the table is small. */
    struct twin_key {
        uint64_t key;
        uint64_t occ;       /* the twin at the cursor: its occurrence (UINT64_MAX: none left) */
        uint32_t v;         /* and which (< n_peak: index into peak[]; else n_peak + anchor
                             * index); NONE marks an empty slot */
        uint32_t next, end; /* the key's twins after it: twins[next..end) */
    } * twin_keys;
    size_t twin_keys_mask; /* slots - 1 */
    struct twin {
        uint64_t occ;
        uint32_t v;
    } * twins; /* by (key, occurrence) */
    /* A bit per hash of the keys, 8 bits a key: most of B's buffers have no twin (with stacks,
     * 70%), and a clear bit says so without a probe of the table (a cache miss). */
    uint64_t *key_bits;
    uint64_t key_bits_mask; /* bits - 1 */
    uint64_t best_a_seq; /* B: the newest peak buffer whose twin B has made */
    bool oom;
};

/* ---- records --------------------------------------------------------------------------------- */

static uint32_t rec_new(gp_align *al, side *s)
{
    if (s->free_rec != NONE) {
        uint32_t i = s->free_rec;
        s->free_rec = s->recs[i].next_free;
        return i;
    }
    if (!gp__push_big((void **)&s->recs, &s->n_recs, &s->cap_recs, sizeof(rec))) {
        al->internal->oom = true;
        return NONE;
    }
    return (uint32_t)(s->n_recs - 1);
}

static void rec_delete(side *s, uint32_t i)
{
    s->recs[i].seq = 0; /* not in use */
    s->recs[i].next_free = s->free_rec;
    s->free_rec = i;
}

/* Whether record r is a live buffer's (in use, not freed). */
static bool rec_live(const rec *r)
{
    return r->seq != 0 && r->free_allocs == UINT64_MAX;
}

/* The labels record i had at its side's instant. */
static void rec_snap_labels(const side *s, uint32_t i, lp_category *cat, const char **op,
                            const char **module)
{
    const rec *r = &s->recs[i];
    const frozen_labels *f = r->frozen && r->frozen <= s->n_frozen &&
                                     s->frozen[r->frozen - 1].rec == i
                                 ? &s->frozen[r->frozen - 1]
                                 : NULL;
    *cat = (lp_category)(f ? f->cat : r->cat);
    *op = f ? f->op : r->op;
    *module = f ? f->module : r->module;
}

/* Moves the instant to right after allocation `seq`: records freed since the last instant are
 * no longer in the snapshot, and no labels are frozen at the new one yet. */
static void snapshot_move(side *s, uint64_t seq, uint64_t now)
{
    for (size_t i = 0; i < s->n_gone; i++)
        rec_delete(s, s->gone[i]);
    s->n_gone = 0;
    s->snap_seq = seq;
    s->snap_ns = now;
    s->n_frozen = 0;
}

/* ---- twin keys ------------------------------------------------------------------------------- */

/* Memoized per side: kind 1 = interned string (by address), 2 = stack id. */
static bool memo_get(side *s, uint64_t kind, uint64_t id, uint64_t *h)
{
    struct gp_map_slot *m = gp__map_find(&s->memo, kind, id, 0);
    if (!m)
        return false;
    *h = s->hashes[m->v];
    return true;
}

/* Stores value h in the side's hashes[] under (a, b) of map m. */
static void memo_put_map(gp_align *al, side *s, gp_map *m, uint64_t a, uint64_t b, uint64_t h)
{
    uint64_t *slot = gp__push((void **)&s->hashes, &s->n_hashes, &s->cap_hashes, sizeof h);
    if (!slot || !gp__map_put(m, a, b, 0, (uint32_t)(s->n_hashes - 1))) {
        al->internal->oom = true;
        return;
    }
    *slot = h;
}

static void memo_put(gp_align *al, side *s, uint64_t kind, uint64_t id, uint64_t h)
{
    memo_put_map(al, s, &s->memo, kind, id, h);
}

static uint64_t string_hash(gp_align *al, side *s, const char *str)
{
    uint64_t h;
    if (!*str)
        return 0;
    size_t r = gp__recent_slot(str);
    if (s->recent[r].str == str)
        return s->recent[r].hash;
    if (!memo_get(s, 1, (uint64_t)(uintptr_t)str, &h)) {
        uint64_t unused;
        gp__hash_text(str, strlen(str), &h, &unused);
        memo_put(al, s, 1, (uint64_t)(uintptr_t)str, h);
    }
    s->recent[r].str = str;
    s->recent[r].hash = h;
    return h;
}

/* The innermost frames of the site's stack as module path + offset: the hash of the first
 * GP_ALIGN_STACK_FRAMES (strict) and of the first GP_ALIGN_LOOSE_FRAMES (loose), from one walk
 * (the loose hash is the walk's value after that many frames), memoized per site. */
static const site_hash *stack_hashes(gp_align *al, side *s, gp_profile *p,
                                     const gp_buffer_event *b)
{
    static const site_hash none = {0, 0};
    if (!b->stack)
        return &none;
    if (b->site >= s->n_site_hashes) {
        size_t n = p->n_sites > b->site ? p->n_sites : (size_t)b->site + 1;
        if (n < s->n_site_hashes + s->n_site_hashes / 8 + 1024)
            n = s->n_site_hashes + s->n_site_hashes / 8 + 1024;
        if (!gp__grow_zeroed((void **)&s->site_hashes, &s->n_site_hashes, n,
                             sizeof *s->site_hashes)) {
            al->internal->oom = true;
            return &none;
        }
    }
    site_hash *sh = &s->site_hashes[b->site];
    if (sh->strict || sh->loose)
        return sh;
    uint64_t h = 0x6a09e667f3bcc908ull, loose = h;
    uint32_t id = b->stack;
    int depth = 0;
    for (; id && depth < GP_ALIGN_STACK_FRAMES; depth++) {
        uint32_t module, parent;
        uint64_t offset;
        if (gp_trace_stack_frame(p->trace, id, &module, &offset, &parent) != 0)
            break;
        const gp_module *m = gp_trace_module(p->trace, module);
        uint64_t mh = m && m->path ? string_hash(al, s, m->path) : module;
        h = gp__mix64(h ^ mh ^ gp__mix64(offset + (uint64_t)depth));
        if (depth + 1 == GP_ALIGN_LOOSE_FRAMES)
            loose = h;
        id = parent;
    }
    if (depth < GP_ALIGN_LOOSE_FRAMES)
        loose = h;
    *sh = (site_hash){h, loose};
    return sh;
}

/*
 * A thread's identity across runs: the main thread is itself; another thread is known by its name
 * and how many threads of that name made a buffer before it did. The reader's thread numbers say
 * which thread came first, which a helper thread (an OpenBLAS or sanitizer thread that allocates
 * at start-up in one run and not in the other) changes from run to run.
 */
#define MAIN_THREAD 0x6d61696e746872ull /* "mainthr": the identity of every trace's main thread */

static uint64_t thread_identity(gp_align *al, side *s, gp_profile *p, uint32_t thread)
{
    struct gp_map_slot *m = gp__map_find(&s->threads, thread, 0, 0);
    if (m)
        return s->hashes[m->v];
    const char *pid = gp_trace_meta(p->trace, "pid");
    uint64_t tid = gp_trace_thread_os_tid(p->trace, thread);
    if (pid && tid && strtoull(pid, NULL, 10) == tid) {
        memo_put_map(al, s, &s->threads, thread, 0, MAIN_THREAD);
        return MAIN_THREAD;
    }
    const char *name = gp_trace_thread_name(p->trace, thread);
    uint64_t nh = string_hash(al, s, name ? name : "");
    struct gp_map_slot *c = gp__map_find(&s->threads, nh, 1, 0); /* threads of that name so far */
    uint64_t ordinal = c ? ++s->hashes[c->v] : 0;
    if (!c)
        memo_put_map(al, s, &s->threads, nh, 1, 0);
    uint64_t id = gp__mix64(nh ^ gp__mix64(ordinal + 0x9e3779b97f4a7c15ull));
    memo_put_map(al, s, &s->threads, thread, 0, id);
    return id;
}

static uint64_t labels_key(uint64_t h, uint64_t size, uint64_t op, uint64_t module, uint64_t stack)
{
    h = gp__mix64(h ^ size);
    h = gp__mix64(h ^ op);
    h = gp__mix64(h ^ module);
    return gp__mix64(h ^ stack);
}

/* A new buffer's kind (occurrences.h), with the innermost GP_ALIGN_STACK_FRAMES frames of its
 * stack and its scope's name, and its loose key, with GP_ALIGN_LOOSE_FRAMES frames and no scope
 * (stack_hashes). */
static void twin_kinds(gp_align *al, side *s, gp_profile *p, const gp_buffer_event *b,
                       const site_hash *sh, uint64_t *strict, uint64_t *loose)
{
    uint64_t who = gp__mix64(thread_identity(al, s, p, b->thread) ^ (uint64_t)b->category);
    uint64_t op = string_hash(al, s, b->op), module = string_hash(al, s, b->module) * 3;
    uint64_t scope = string_hash(al, s, b->scope);
    *strict = labels_key(gp__mix64(who ^ scope), b->size, op, module, sh->strict);
    *loose = labels_key(who, b->size, op, module, sh->loose);
}

/* The slot of key (hash h = gp__mix64(key)) in twin_keys: its own, or the empty one where it
 * would go. */
static struct twin_key *twin_key_slot(struct gp__align_internal *in, uint64_t h, uint64_t key)
{
    size_t i = h & in->twin_keys_mask;
    while (in->twin_keys[i].v != NONE && in->twin_keys[i].key != key)
        i = (i + 1) & in->twin_keys_mask;
    return &in->twin_keys[i];
}

/* The twin of B's buffer (key, occ) (see gp__align_internal.twin_keys), or NONE. */
static uint32_t twin_of(struct gp__align_internal *in, uint64_t key, uint64_t occ)
{
    uint64_t h = gp__mix64(key), bit = h & in->key_bits_mask;
    if (!(in->key_bits[bit / 64] >> (bit % 64) & 1))
        return NONE;
    struct twin_key *k = twin_key_slot(in, h, key);
    if (k->v == NONE)
        return NONE;
    uint32_t v = NONE;
    while (k->occ <= occ) { /* equal, unless two instances' keys collide */
        if (k->occ == occ)
            v = k->v;
        if (k->next < k->end) { /* the cursor moves to the key's next twin */
            k->occ = in->twins[k->next].occ;
            k->v = in->twins[k->next++].v;
        } else {
            k->occ = UINT64_MAX;
        }
    }
    return v;
}

/* ---- A's anchors ----------------------------------------------------------------------------- */

/* Samples A's allocation `r` made after its current peak: every `stride`-th is kept; when the
 * array is full, every other one is dropped and the stride doubles. */
static void anchor_note(gp_align *al, const rec *r)
{
    struct gp__align_internal *in = al->internal;
    uint64_t since = r->seq - in->s[0].snap_seq;
    if (since % in->stride != 0)
        return;
    if (in->n_anchors == GP_ALIGN_ANCHORS) {
        size_t j = 0;
        for (size_t i = 1; i < in->n_anchors; i += 2)
            in->anchors[j++] = in->anchors[i];
        in->n_anchors = j;
        in->stride *= 2;
        if (since % in->stride != 0)
            return;
    }
    anchor *a = gp__push((void **)&in->anchors, &in->n_anchors, &in->cap_anchors, sizeof *a);
    if (!a) {
        in->oom = true;
        return;
    }
    *a = (anchor){gp_instance_key(r->kind, r->ordinal), r->occ, r->seq, 0};
}

/* ---- observers ------------------------------------------------------------------------------- */

static void on_alloc(gp_align *al, int which, gp_profile *p, const gp_buffer_event *b)
{
    struct gp__align_internal *in = al->internal;
    side *s = &in->s[which];
    s->allocs = b->allocs;
    s->end_ns = b->time_ns;
    if (b->device != LP_DEVICE_HOST || in->oom)
        return;
    uint32_t i = rec_new(al, s);
    if (i == NONE)
        return;
    uint64_t kind, loose;
    twin_kinds(al, s, p, b, stack_hashes(al, s, p, b), &kind, &loose);
    rec *r = &s->recs[i];
    *r = (rec){.kind = kind,
               .ordinal = b->scope_ordinal,
               .occ =
                   gp_occurrence_next(&s->occ, kind, *b->scope != '\0', b->scope_ordinal, &in->oom),
               .seq = b->seq,
               .size = b->size,
               .loose_key = loose,
               .alloc_ns = b->time_ns,
               .free_allocs = UINT64_MAX,
               .stack = b->stack,
               .twin = NONE,
               .cat = (uint8_t)b->category,
               .op = b->op,
               .module = b->module,
               .ever_saved = b->category == LP_CAT_SAVED};
    *b->handle = i + 1;
    s->n_live++;
    if (which == 0) {
        if (s->snap_seq && b->seq > s->snap_seq)
            anchor_note(al, r);
        return;
    }
    uint32_t v = twin_of(in, gp_instance_key(kind, r->ordinal), r->occ);
    if (v == NONE)
        return;
    if (v >= in->n_peak) {
        in->anchors[v - in->n_peak].b_seq = b->seq;
        return;
    }
    peak_buf *pb = &in->peak[v];
    r->twin = v;
    pb->b_seq = b->seq;
    pb->b_alloc_ns = b->time_ns;
    if (pb->a.seq > in->best_a_seq) { /* a newer buffer of A's peak: the instant moves here */
        in->best_a_seq = pb->a.seq;
        snapshot_move(s, b->seq, b->time_ns);
    }
}

static void on_retag(gp_align *al, int which, const gp_buffer_event *b)
{
    side *s = &al->internal->s[which];
    if (!*b->handle)
        return;
    uint32_t i = *b->handle - 1;
    rec *r = &s->recs[i];
    /* A buffer in the snapshot keeps the labels it had at the instant, except the one that made
     * the instant getting its first tag right after (the engine counts it so too). */
    bool in_snapshot = r->seq <= s->snap_seq && !(b->first_tag && r->seq == s->snap_seq);
    bool frozen = r->frozen && r->frozen <= s->n_frozen && s->frozen[r->frozen - 1].rec == i;
    if (in_snapshot && !frozen) {
        frozen_labels *f =
            gp__push((void **)&s->frozen, &s->n_frozen, &s->cap_frozen, sizeof *f);
        if (!f) {
            al->internal->oom = true;
            return;
        }
        *f = (frozen_labels){i, r->cat, r->op, r->module};
        r->frozen = (uint32_t)s->n_frozen;
    }
    r->cat = (uint8_t)b->category;
    r->op = b->op;
    r->module = b->module;
    r->ever_saved = r->ever_saved || b->category == LP_CAT_SAVED;
}

static void on_free(gp_align *al, int which, const gp_buffer_event *b)
{
    struct gp__align_internal *in = al->internal;
    side *s = &in->s[which];
    s->end_ns = b->time_ns;
    if (!*b->handle)
        return;
    uint32_t i = *b->handle - 1;
    s->n_live--;
    rec *r = &s->recs[i];
    r->free_ns = b->time_ns;
    r->free_allocs = b->allocs;
    if (which == 1 && r->twin != NONE) {
        in->peak[r->twin].b_free_ns = b->time_ns;
        in->peak[r->twin].b_free_allocs = b->allocs;
    }
    if (r->seq <= s->snap_seq) { /* live at the instant: keep it in the snapshot */
        uint32_t *g = gp__push_big((void **)&s->gone, &s->n_gone, &s->cap_gone, sizeof *g);
        if (g) {
            *g = i;
            return;
        }
        in->oom = true;
    }
    rec_delete(s, i);
}

static void alloc0(void *c, gp_profile *p, const gp_buffer_event *b) { on_alloc(c, 0, p, b); }
static void alloc1(void *c, gp_profile *p, const gp_buffer_event *b) { on_alloc(c, 1, p, b); }
static void retag0(void *c, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    on_retag(c, 0, b);
}
static void retag1(void *c, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    on_retag(c, 1, b);
}
static void free0(void *c, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    on_free(c, 0, b);
}
static void free1(void *c, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    on_free(c, 1, b);
}

/* A's host peak moved to allocation `seq` (observed just before, so its time is the latest). */
static void peak0(void *c, gp_profile *p, int32_t device, uint64_t seq)
{
    struct gp__align_internal *in = ((gp_align *)c)->internal;
    (void)p;
    if (device != LP_DEVICE_HOST)
        return;
    snapshot_move(&in->s[0], seq, in->s[0].end_ns);
    in->n_anchors = 0;
    in->stride = 1;
}

/* ---- between the runs: A's snapshot becomes the twin table ----------------------------------- */

/* Indexes A's peak buffers and anchors by instance key, each key's twins in order of occurrence
 * (gp__align_internal.twin_keys): sorted by occurrence, then stably by key. */
static void index_twins(struct gp__align_internal *in)
{
    size_t n = in->n_peak + in->n_anchors, keys = 0;
    gp_keyed *v = gp__malloc_big(2 * (n ? n : 1) * sizeof *v);
    uint64_t *key = gp__malloc_big((n ? n : 1) * sizeof *key);
    struct twin *by_occ = gp__malloc_big((n ? n : 1) * sizeof *by_occ);
    in->twins = gp__malloc_big((n ? n : 1) * sizeof *in->twins);
    if (!v || !key || !by_occ || !in->twins) {
        in->oom = true;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const anchor *a = i < in->n_peak ? NULL : &in->anchors[i - in->n_peak];
        const rec *r = a ? NULL : &in->peak[i].a;
        key[i] = a ? a->key : gp_instance_key(r->kind, r->ordinal);
        v[i] = (gp_keyed){a ? a->occ : r->occ, i};
    }
    gp_keyed *sorted = gp__sort_keyed(v, v + n, n);
    for (size_t i = 0; i < n; i++) {
        by_occ[i] = (struct twin){sorted[i].key, (uint32_t)sorted[i].index};
        sorted[i] = (gp_keyed){key[sorted[i].index], i};
    }
    const gp_keyed *by_key = gp__sort_keyed(sorted, sorted == v ? v + n : v, n);
    for (size_t i = 0; i < n; i++) { /* by_key's index: the twin's place by occurrence */
        in->twins[i] = by_occ[by_key[i].index];
        keys += i == 0 || by_key[i].key != by_key[i - 1].key;
    }
    size_t slots = 64, bits = 64;
    while (slots < keys + keys / 2)
        slots *= 2;
    while (bits < 8 * keys)
        bits *= 2;
    in->twin_keys = gp__malloc_big(slots * sizeof *in->twin_keys);
    in->key_bits = gp__calloc_big(bits / 64, sizeof *in->key_bits);
    if (!in->twin_keys || !in->key_bits) {
        in->oom = true;
        goto out;
    }
    in->twin_keys_mask = slots - 1;
    in->key_bits_mask = bits - 1;
    for (size_t i = 0; i < slots; i++)
        in->twin_keys[i].v = NONE;
    for (size_t i = 0, end; i < n; i = end) {
        for (end = i + 1; end < n && by_key[end].key == by_key[i].key; end++)
            ;
        uint64_t h = gp__mix64(by_key[i].key), bit = h & in->key_bits_mask;
        in->key_bits[bit / 64] |= 1ull << (bit % 64);
        *twin_key_slot(in, h, by_key[i].key) = (struct twin_key){
            by_key[i].key, in->twins[i].occ, in->twins[i].v, (uint32_t)i + 1, (uint32_t)end};
    }
out:
    free(v);
    free(key);
    free(by_occ);
}

/* Collects A's buffers live at its peak into peak[], in birth order, with their labels at the
 * peak, and indexes them and the anchors by twin identity. Frees A's other records. */
static void a_done(gp_align *al)
{
    struct gp__align_internal *in = al->internal;
    side *s = &in->s[0];
    size_t n = 0, cap = s->n_gone + s->n_live;
    gp_keyed *by_seq = gp__malloc_big(2 * (cap ? cap : 1) * sizeof *by_seq);
    in->peak = gp__calloc_big(cap ? cap : 1, sizeof *in->peak);
    if (!by_seq || !in->peak) {
        free(by_seq);
        in->oom = true;
        return;
    }
    for (size_t i = 0; i < s->n_recs; i++)
        if (rec_live(&s->recs[i]) && s->recs[i].seq <= s->snap_seq)
            by_seq[n++] = (gp_keyed){s->recs[i].seq, i};
    for (size_t k = 0; k < s->n_gone; k++)
        by_seq[n++] = (gp_keyed){s->recs[s->gone[k]].seq, s->gone[k]};
    const gp_keyed *sorted = gp__sort_keyed(by_seq, by_seq + n, n);
    for (size_t k = 0; k < n; k++) {
        uint32_t i = (uint32_t)sorted[k].index;
        rec *r = &in->peak[k].a; /* the record, with its labels at the peak */
        *r = s->recs[i];
        lp_category cat;
        rec_snap_labels(s, i, &cat, &r->op, &r->module);
        r->cat = (uint8_t)cat;
        r->frozen = 0;
    }
    free(by_seq);
    in->n_peak = n;
    index_twins(in);
    al->a_peak_seq = s->snap_seq;
    al->a_peak_time_ns = s->snap_ns;
    al->a_allocs = s->allocs;
    free(s->recs);
    s->recs = NULL;
    s->n_recs = s->cap_recs = 0;
    s->free_rec = NONE;
    s->n_live = 0;
    free(s->frozen);
    s->frozen = NULL;
    s->n_frozen = s->cap_frozen = 0;
    free(s->gone);
    s->gone = NULL;
    s->n_gone = s->cap_gone = 0;
    free(s->site_hashes); /* A's twin keys are all made */
    s->site_hashes = NULL;
    s->n_site_hashes = 0;
}

const gp_replay_observer *gp_align_observer(gp_align *al, int which)
{
    if (which == 1 && !al->internal->peak)
        a_done(al);
    return &al->internal->obs[which ? 1 : 0];
}

/* ---- the classification ---------------------------------------------------------------------- */

/* Only tensor memory can be saved for backward: tagged or classified by frame rules as an
 * activation, a saved tensor or a temporary. Raw allocations nothing classified (interpreter
 * objects, BLAS workspaces) are never counted: their twins misalign too easily to judge. */
static bool may_be_saved(lp_category c)
{
    return c == LP_CAT_SAVED || c == LP_CAT_ACTIVATION || c == LP_CAT_TEMPORARY;
}

static int cmp_anchor_a(const void *x, const void *y)
{
    const anchor *a = x, *b = y;
    return a->a_seq < b->a_seq ? -1 : a->a_seq > b->a_seq;
}

/*
 * Keeps the longest chain of twins (peak buffers and anchors, sorted by A's birth number) whose
 * B birth numbers increase too, and drops the rest: the twins that say where in B a moment of A
 * falls. Both runs make their allocations in the same order, so a twin off that chain was paired
 * across a shift (raw allocations of one size, a batch that came from a data-loader worker a
 * little earlier): one such twin must not move the whole mapping. Patience sorting, O(n log n).
 * Returns the chain's length; order[0..len) is the chain.
 */
static size_t monotone_twins(anchor *order, size_t n)
{
    if (n == 0)
        return 0;
    uint32_t *tail = malloc(n * sizeof *tail), *prev = malloc(n * sizeof *prev);
    if (!tail || !prev) { /* out of memory: keep the running maximum instead */
        free(tail);
        free(prev);
        for (size_t i = 1; i < n; i++)
            if (order[i].b_seq < order[i - 1].b_seq)
                order[i].b_seq = order[i - 1].b_seq;
        return n;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t lo = 0, hi = len; /* first tail whose b_seq >= this one */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (order[tail[mid]].b_seq < order[i].b_seq)
                lo = mid + 1;
            else
                hi = mid;
        }
        prev[i] = lo ? tail[lo - 1] : UINT32_MAX;
        tail[lo] = (uint32_t)i;
        if (lo == len)
            len++;
    }
    /* The chain's indexes, back from its end into tail[] (free now), then moved to the front in
     * increasing order: the k-th index is at least k, so no entry is overwritten before it is
     * read. */
    uint32_t i = tail[len - 1];
    for (size_t k = len; k-- > 0; i = prev[i])
        tail[k] = i;
    for (size_t k = 0; k < len; k++)
        order[k] = order[tail[k]];
    free(tail);
    free(prev);
    return len;
}

/* The latest B allocation that is the twin of an allocation A made at or before A's allocation
 * count `a_allocs`, on the chain of monotone_twins (sorted by A's birth number, B's increasing). */
static uint64_t b_position_of(const anchor *order, size_t n, uint64_t a_allocs)
{
    size_t lo = 0, hi = n; /* first with a_seq > a_allocs */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (order[mid].a_seq <= a_allocs)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? order[lo - 1].b_seq : 0;
}

/* A leftover of the strict alignment, for the loose pass. */
typedef struct leftover {
    uint64_t loose_key, seq;
    uint32_t index; /* A: into peak[]; B: into the side's recs */
} leftover;

static int cmp_leftover(const void *x, const void *y)
{
    const leftover *a = x, *b = y;
    if (a->loose_key != b->loose_key)
        return a->loose_key < b->loose_key ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* Whether A made a buffer of this kind, instance and occurrence: B's buffer has a twin in A. */
static bool has_twin_in_a(const struct gp__align_internal *in, const rec *r)
{
    return r->occ < gp_occurrence_count(&in->s[0].occ, r->kind, r->ordinal);
}

static bool add_leftover(gp_align *al, leftover **v, size_t *n, size_t *cap, leftover x)
{
    leftover *slot = gp__push((void **)v, n, cap, sizeof *slot);
    if (!slot)
        al->internal->oom = true;
    else
        *slot = x;
    return slot != NULL;
}

/* Raw memory: what no tag or frame rule says is tensor or graph memory (interpreter objects,
 * library workspaces, and parameters, inputs and optimizer state, which a graph never holds). */
static bool is_raw(lp_category c) { return !may_be_saved(c) && !lp_category_is_graph(c); }

/* Whether B freed peak buffer pb's twin before the instant. */
static bool twin_freed(const gp_align *al, const peak_buf *pb)
{
    return pb->b_seq && pb->b_free_allocs && pb->b_free_allocs < al->b_seq;
}

/*
 * The loose passes: leftovers of the strict alignment, paired by the loose key (the strict key
 * with only the innermost GP_ALIGN_LOOSE_FRAMES frames and no scope), in birth order. A loose twin
 * is then a twin like any other.
 *   1. A's peak buffers B made no twin of, with B's buffers live at the instant that have no twin
 *      anywhere in A: the same code reached from another caller in the two runs (a table resized
 *      at another moment, a cache first filled from another path).
 *   2. Raw memory only (is_raw): A's peak buffers still without a twin live in B, with B's
 *      buffers live at the instant whose twin is not live at A's peak. Raw allocations of the
 *      same key are interchangeable, and a few more or fewer of them in one run (a graph node
 *      object A makes) shift every later occurrence index: without stacks, whole sequences of
 *      small interpreter objects pair with the wrong twin. Tensor memory is never re-paired here.
 * Graph memory only A makes (nodes, copies autograd makes) has no loose twin in either pass
 * unless B has a raw leftover of the same key (without stacks: thread and size).
 */
static void pair_loose(gp_align *al, int pass)
{
    struct gp__align_internal *in = al->internal;
    side *b = &in->s[1];
    leftover *la = NULL, *lb = NULL;
    size_t na = 0, nb = 0, ca = 0, cb = 0;
    for (size_t i = 0; i < in->n_peak; i++) {
        const peak_buf *pb = &in->peak[i];
        bool want = pass == 1 ? !pb->b_seq
                              : is_raw(pb->a.cat) && (!pb->b_seq || twin_freed(al, pb));
        if (want && !add_leftover(al, &la, &na, &ca, (leftover){pb->a.loose_key, pb->a.seq,
                                                                  (uint32_t)i}))
            goto out;
    }
    for (int list = 0; list < 2; list++) {
        size_t n = list == 0 ? b->n_recs : b->n_gone;
        for (size_t i = 0; i < n; i++) {
            uint32_t ri = list == 0 ? (uint32_t)i : b->gone[i];
            if (list == 0 && !rec_live(&b->recs[ri]))
                continue;
            const rec *r = &b->recs[ri];
            if (r->seq > b->snap_seq || r->twin != NONE)
                continue;
            lp_category cat;
            const char *op, *module;
            rec_snap_labels(b, ri, &cat, &op, &module);
            bool want = pass == 1 ? !has_twin_in_a(in, r) : is_raw(cat);
            if (want && !add_leftover(al, &lb, &nb, &cb, (leftover){r->loose_key, r->seq, ri}))
                goto out;
        }
    }
    if (!na || !nb)
        goto out;
    qsort(la, na, sizeof *la, cmp_leftover);
    qsort(lb, nb, sizeof *lb, cmp_leftover);
    for (size_t i = 0, j = 0; i < na && j < nb;) {
        if (la[i].loose_key != lb[j].loose_key) {
            la[i].loose_key < lb[j].loose_key ? i++ : j++;
            continue;
        }
        peak_buf *pb = &in->peak[la[i++].index];
        rec *r = &b->recs[lb[j++].index];
        r->twin = (uint32_t)(pb - in->peak);
        pb->b_seq = r->seq;
        pb->b_alloc_ns = r->alloc_ns;
        pb->b_free_ns = r->free_ns;
        pb->b_free_allocs = r->free_allocs == UINT64_MAX ? 0 : r->free_allocs;
        al->loose_bytes += pb->a.size;
    }
out:
    free(la);
    free(lb);
}

/* Frees what only the classification needed: the records, maps and twins of both runs. */
static void internal_free(struct gp__align_internal *in)
{
    for (int i = 0; in && i < 2; i++) {
        side *s = &in->s[i];
        free(s->recs);
        free(s->frozen);
        free(s->gone);
        gp_occurrences_free(&s->occ);
        free(s->site_hashes);
        gp__map_free(&s->memo);
        gp__map_free(&s->threads);
        free(s->hashes);
    }
    if (in) {
        free(in->peak);
        free(in->anchors);
        free(in->twin_keys);
        free(in->key_bits);
        free(in->twins);
        free(in);
    }
}

static gp_aligned *add_buffer(gp_align *al, size_t *cap)
{
    gp_aligned *x = gp__push_big((void **)&al->buffers, &al->n_buffers, cap, sizeof *x);
    if (!x)
        al->internal->oom = true;
    return x;
}

int gp_align_finish(gp_align *al)
{
    struct gp__align_internal *in = al->internal;
    if (!in->peak)
        a_done(al);
    side *b = &in->s[1];
    if (in->oom)
        return -1;
    al->b_seq = b->snap_seq;
    al->b_time_ns = b->snap_ns;
    al->b_found = in->best_a_seq != 0;
    al->b_allocs = b->allocs;
    pair_loose(al, 1);
    pair_loose(al, 2);

    /* twins ordered by A's birth number, on a chain where B's increase too */
    size_t n_order = 0;
    anchor *order = gp__malloc_big((in->n_peak + in->n_anchors + 1) * sizeof *order);
    if (!order)
        return -1;
    for (size_t i = 0; i < in->n_peak; i++)
        if (in->peak[i].b_seq)
            order[n_order++] = (anchor){0, 0, in->peak[i].a.seq, in->peak[i].b_seq};
    for (size_t i = 0; i < in->n_anchors; i++)
        if (in->anchors[i].b_seq)
            order[n_order++] = in->anchors[i];
    /* sorted already: peak[] is in birth order and the anchors, in theirs, were all born after
     * A's peak (peak0 drops the ones before) */
    for (size_t i = 1; i < n_order; i++)
        if (order[i - 1].a_seq > order[i].a_seq) {
            qsort(order, n_order, sizeof *order, cmp_anchor_a);
            break;
        }
    n_order = monotone_twins(order, n_order);

    size_t cap = 0;
    uint64_t bs = al->b_seq;
    for (size_t i = 0; i < in->n_peak; i++) {
        const peak_buf *pb = &in->peak[i];
        gp_aligned *x = add_buffer(al, &cap);
        if (!x)
            break;
        const rec *r = &pb->a;
        *x = (gp_aligned){.side = 0, .category = (lp_category)r->cat, .op = r->op,
                          .module = r->module, .stack = r->stack, .size = r->size};
        bool b_freed = twin_freed(al, pb);
        if (!pb->b_seq)
            x->state = GP_TWIN_NONE;
        else if (pb->b_seq > bs)
            x->state = GP_TWIN_LATER;
        else if (b_freed)
            x->state = GP_TWIN_FREED;
        else
            x->state = GP_TWIN_PAIRED;
        if (x->state == GP_TWIN_PAIRED && pb->b_free_allocs) {
            /* B freed it after the instant: sooner than A, when before B made the twin of an
             * allocation A made while the buffer was still live */
            uint64_t a_free = r->free_allocs;
            uint64_t b_pos = b_position_of(order, n_order,
                                           a_free == UINT64_MAX ? UINT64_MAX - 1 : a_free);
            x->saved_inferred = b_pos > pb->b_free_allocs;
        }
        if (x->state == GP_TWIN_FREED || x->state == GP_TWIN_NONE)
            x->saved_inferred = true;
        if (r->cat == LP_CAT_SAVED || r->ever_saved)
            x->saved_inferred = true;
        else if (!may_be_saved(r->cat))
            x->saved_inferred = false;
        if (x->state == GP_TWIN_FREED) {
            x->a_freed = r->free_allocs != UINT64_MAX;
            uint64_t a_end_ns = x->a_freed ? r->free_ns : in->s[0].end_ns;
            uint64_t a_end_allocs = x->a_freed ? r->free_allocs : al->a_allocs;
            x->a_life_ns = a_end_ns - r->alloc_ns;
            x->a_life_allocs = a_end_allocs - r->seq;
            x->b_life_ns = pb->b_free_ns - pb->b_alloc_ns;
            x->b_life_allocs = pb->b_free_allocs - pb->b_seq;
        }
        al->a_bytes += r->size;
        if (x->state == GP_TWIN_FREED || x->state == GP_TWIN_NONE)
            al->held_bytes += r->size;
        else if (x->state == GP_TWIN_LATER)
            al->unaligned_bytes += r->size;
        else
            al->paired_bytes += r->size;
        if (x->saved_inferred)
            al->saved_inferred_bytes += r->size;
    }
    free(order);

    /* B's snapshot: its live records born up to the instant and the gone list, in birth order
     * (the buffers' order, so the rows' labels, does not depend on a hash table's layout) */
    size_t n_snap = 0, most = b->n_live + b->n_gone + 1;
    gp_keyed *by_seq = gp__malloc_big(2 * most * sizeof *by_seq);
    if (!by_seq)
        return -1;
    for (size_t i = 0; i < b->n_recs; i++)
        if (rec_live(&b->recs[i]) && b->recs[i].seq <= bs)
            by_seq[n_snap++] = (gp_keyed){b->recs[i].seq, i};
    for (size_t i = 0; i < b->n_gone; i++)
        if (b->recs[b->gone[i]].seq <= bs)
            by_seq[n_snap++] = (gp_keyed){b->recs[b->gone[i]].seq, b->gone[i]};
    const gp_keyed *snap = gp__sort_keyed(by_seq, by_seq + most, n_snap);
    for (size_t i = 0; i < n_snap && !in->oom; i++) {
        uint32_t ri = (uint32_t)snap[i].index;
        const rec *r = &b->recs[ri];
        al->b_bytes += r->size;
        if (r->twin != NONE)
            continue; /* paired: counted under its twin's labels */
        gp_aligned *x = add_buffer(al, &cap);
        if (!x)
            break;
        *x = (gp_aligned){.state = GP_TWIN_B_MORE, .side = 1, .size = r->size,
                          .stack = r->stack};
        rec_snap_labels(b, ri, &x->category, &x->op, &x->module);
        al->b_more_bytes += r->size;
    }
    free(by_seq);
    if (in->oom)
        return -1;
    internal_free(in); /* buffers[] and the sums are the result: the rest goes before the diff */
    al->internal = NULL;
    return 0;
}

gp_align *gp_align_new(void)
{
    gp_align *al = calloc(1, sizeof *al);
    struct gp__align_internal *in = al ? calloc(1, sizeof *in) : NULL;
    if (!in) {
        free(al);
        return NULL;
    }
    al->internal = in;
    in->stride = 1;
    for (int i = 0; i < 2; i++)
        in->s[i].free_rec = NONE;
    in->obs[0] = (gp_replay_observer){al, alloc0, retag0, free0, peak0};
    in->obs[1] = (gp_replay_observer){al, alloc1, retag1, free1, NULL};
    return al;
}

void gp_align_free(gp_align *al)
{
    if (!al)
        return;
    internal_free(al->internal);
    free(al->buffers);
    free(al);
}
