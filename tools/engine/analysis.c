/*
 * The replay engine (see analysis.h for what it computes and the definitions).
 *
 * Live at peak, in one pass. Each key (a tag key, a site, a module, a saved-tensor key) belongs
 * to one device and keeps its live bytes; when the device reaches a new peak its epoch advances,
 * and a key copies its live bytes into peak_bytes the next time it changes (or at the end) if it
 * has not done so since that epoch: a key that did not change since the peak still holds the value
 * it had at the peak. That makes every table exact at the peak instant for O(1) per event.
 *
 * Detectors. The gradient-leak findings are made by detectors.c: the replay feeds it through the
 * hooks of detectors.h (a buffer entering a graph category, an inference region's escaped graph,
 * a mark, an autograd_error note, the end) with the facts each detector judges.
 *
 * Regions. Each push opens an instance (a node in a tree of instances, parent = the enclosing
 * instance on the same thread); a buffer remembers the innermost instance open when it was made.
 * Making or freeing it adjusts the live-inside counters of that instance and its open ancestors,
 * so at a pop the bytes made inside and still live (and the graph part of them) are known. Closed
 * instances are recycled once no buffer or child refers to them.
 */
#include "analysis.h"
#include "array.h"
#include "detectors.h"
#include "hashmap.h"
#include "rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* The labels (op, module) of untagged buffers without a rule op: one pointer, since keys are
 * told apart by their strings' addresses. */
static const char empty_label[] = "";

/* ---- small utilities ------------------------------------------------------------------------- */


static const char *own(gp_profile *p, const char *s);

/* ---- engine state ---------------------------------------------------------------------------- */

typedef struct object { /* a live buffer (its address is its key in the live set); 40 bytes */
    uint64_t size;
    uint64_t seq;                          /* birth number (slots are reused, numbers not) */
    uint32_t tag_key, site, module, saved; /* indexes; saved = NONE unless SAVED */
    uint32_t instance;                     /* innermost region instance at birth, or NONE */
    int16_t device;                        /* -1 .. GP_TRACE_MAX_DEVICE */
    uint8_t category;                      /* an lp_category */
    bool tagged : 1;
    bool keyed : 1;   /* its key is not its site's raw key: tagged, or untagged in a module */
    bool counted : 1; /* counted in forgot_no_grad, in its graph category (uncount) */
} object;
_Static_assert(GP_TRACE_MAX_DEVICE <= INT16_MAX, "object.device holds every device id");

/* The live set: (address, device) -> object, open addressing with 16-byte slots (half a
 * gp_map's: every event probes it, so its footprint is what the cache sees), removal by shifting
 * the probe run back (no tombstones). */
typedef struct live_slot {
    uint64_t addr;
    int32_t device;
    uint32_t obj; /* NONE = empty */
} live_slot;

typedef struct live_map {
    live_slot *slots;
    size_t cap, len; /* cap is 0 or a power of two */
} live_map;

static inline size_t live_home(const live_map *m, uint64_t addr, int32_t device)
{
    return gp__mix64(addr ^ (uint64_t)(uint32_t)device << 40) & (m->cap - 1);
}

static inline live_slot *live_find(const live_map *m, uint64_t addr, int32_t device)
{
    if (!m->cap)
        return NULL;
    for (size_t i = live_home(m, addr, device);; i = (i + 1) & (m->cap - 1)) {
        live_slot *s = &m->slots[i];
        if (s->obj == NONE)
            return NULL;
        if (s->addr == addr && s->device == device)
            return s;
    }
}

static inline void live_prefetch(const live_map *m, uint64_t addr, int32_t device)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[live_home(m, addr, device)]);
}

/* Adds (addr, device) -> obj; the key must not be present. false when out of memory. */
static bool live_put(live_map *m, uint64_t addr, int32_t device, uint32_t obj)
{
    if ((m->len + 1) * 4 > m->cap * 3) {
        live_map n = {.cap = m->cap ? 2 * m->cap : 1024};
        n.slots = gp__malloc_big(n.cap * sizeof *n.slots);
        if (!n.slots)
            return false;
        for (size_t i = 0; i < n.cap; i++)
            n.slots[i].obj = NONE;
        for (size_t i = 0; i < m->cap; i++) {
            const live_slot *s = &m->slots[i];
            if (s->obj == NONE)
                continue;
            size_t j = live_home(&n, s->addr, s->device);
            while (n.slots[j].obj != NONE)
                j = (j + 1) & (n.cap - 1);
            n.slots[j] = *s;
        }
        free(m->slots);
        m->slots = n.slots;
        m->cap = n.cap;
    }
    size_t i = live_home(m, addr, device);
    while (m->slots[i].obj != NONE)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = (live_slot){addr, device, obj};
    m->len++;
    return true;
}

static void live_remove(live_map *m, live_slot *s)
{
    size_t mask = m->cap - 1, i = (size_t)(s - m->slots);
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        live_slot *t = &m->slots[j];
        if (t->obj == NONE)
            break;
        size_t home = live_home(m, t->addr, t->device);
        /* t may move into the hole at i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->slots[i] = *t;
            i = j;
        }
    }
    m->slots[i].obj = NONE;
    m->len--;
}

typedef struct instance {
    const char *name;
    const char *module; /* the innermost module region's name, this one or above it ("": none) */
    uint32_t parent, region, thread, depth;
    uint32_t refs; /* live objects made inside + child instances */
    uint64_t ordinal; /* regions of this name entered before this one (all threads) */
    bool open, inference;
    bool escaped;    /* an inference instance whose graphs outlived the next one (escape_judge) */
    uint8_t scope;   /* grad_scope: what kind of grad-mode scope it is, if any */
    /* live bytes allocated inside (while open), and live bytes allocated inside that are saved
     * for backward (open or closed: what its graphs keep; a graph's nodes and the parameters'
     * gradient accumulators are shared by later graphs, so they do not say a graph escaped) */
    uint64_t live_inside, saved_inside, begin_ns;
} instance;

typedef struct thread_state {
    uint32_t top; /* innermost open instance, or NONE */
    /* The thread's last two inference-region instances, newest first (NONE: none yet); each
     * holds a reference, so the instance outlives its region (graph_escapes_inference). */
    uint32_t inference_recent[2];
    uint32_t depth;
    bool grad_disabled;
    int no_grad_depth, enable_grad_depth, backward_depth, inference_depth;
    uint64_t last_alloc_addr;
    int32_t last_alloc_device;
    bool last_alloc_valid;
} thread_state;

typedef struct device_state {
    gp_device_stats pub;
    uint64_t epoch;
    uint64_t peak_seq; /* the allocation (by birth number) that set the peak */
    uint64_t graphs_at_peak; /* inference instances with saved tensors alive then */
    uint64_t live_by_cat[LP_CAT_COUNT];
} device_state;

/*
 * Engine-side facts about a site, parallel to p->sites (8 bytes: there is one site per distinct
 * stack). Most sites only ever make untagged buffers, all of one frame-rule category: such a
 * "pure" site needs nothing more, since the bytes it allocated in that category and the bytes
 * that entered its raw tag key from it are both its stats.total_bytes. A site that makes a
 * tagged buffer, or whose buffer gets its first tag, gets a side record with the figures.
 */
typedef struct site_extra {
    uint32_t side;    /* 1 + index into site_sides, or 0 */
    uint8_t cat;      /* pure: the category of its buffers */
    uint8_t flags;    /* SITE_RAW_SEEN, SITE_PURE */
    uint8_t category; /* after the replay: site_category, for gp_site_category */
} site_extra;

/* A site's identity, when p->sites (which has it too) is not kept. */
typedef struct site_id {
    uint32_t stack;
    int32_t device;
} site_id;

#define SITE_RAW_SEEN 1 /* an untagged buffer was made here (its rule labels were applied) */
#define SITE_PURE 2     /* only untagged buffers, never tagged later, so far */

typedef struct site_side {
    uint64_t raw_key_bytes;          /* bytes that entered the site's raw tag key from it */
    uint64_t by_cat[LP_CAT_COUNT];   /* bytes allocated here, per category (a first tag moves
                                      * a buffer's bytes to its new category) */
} site_side;

/* The keys of the untagged buffers of one frame-rule class made in one module on one device. */
typedef struct raw_keys {
    uint32_t tag_key, module;
} raw_keys;

/* A frame (module, offset) of the trace, symbolized once: what the rules, the labels, the
 * frames and the site keys need of it. */
typedef struct frame_info { /* 24 bytes: one per distinct frame */
    const gp_symbol *sym; /* NULL when out of memory */
    const char *text;     /* "function (file:line)", interned; NULL until asked */
    uint32_t cls;         /* frame-rule class + 1; 0 until asked */
    int8_t plumbing;      /* is_plumbing(sym): -1 until asked */
    bool symbolized;      /* sym and plumbing are set */
} frame_info;

struct gp__profile_internal {
    live_map objects_map;
    object *objects;
    size_t n_objects, cap_objects;
    uint32_t free_object; /* free list through object.tag_key */
    uint32_t *handles;    /* by object, with an observer only: its gp_buffer_event.handle */
    size_t cap_handles;

    gp_map tag_map, site_map, module_map, saved_map, region_map;
    uint32_t *host_sites; /* host site index + 1 by stack id, 0 if none yet */
    size_t n_host_sites;
    size_t cap_tag_keys, cap_sites, cap_modules, cap_saved, cap_regions, cap_iterations, cap_spans;
    size_t cap_notes;
    /* Sites are indexed the same in all three; p->sites (the counters of the site tables) only
     * when the caller wants them (!opts->without_sites), site_ids (their identity) otherwise. */
    bool want_sites;
    site_extra *extra;
    size_t n_extra, cap_extra;
    site_id *site_ids;
    size_t cap_site_ids;
    site_side *site_sides; /* of the sites that are not pure */
    size_t n_site_sides, cap_site_sides;

    instance *instances;
    size_t n_instances, cap_instances;
    uint32_t free_instance;

    thread_state *threads;
    size_t n_threads;
    uint32_t grad_off_threads; /* threads with grad off now (grad_off) */
    uint32_t grad_off_hint;    /* the one grad_off_thread found last (0: none yet) */
    device_state *devices;
    size_t cap_devices;

    /* timeline: buckets of `width` ns; when full, pairs merge and the width doubles */
    uint64_t bucket_width, bucket_end;
    uint64_t bucket_max;
    size_t cap_timeline;

    gp__detectors *detectors; /* owned: fed by the hooks of detectors.h */
    gp_map key_site_map;      /* (tag key, site) -> index in key_site_bytes */
    uint64_t *key_site_bytes; /* bytes that entered the tag key from the site (for top_site) */
    size_t n_key_site, cap_key_site;
    const gp_analysis_options *opts;
    gp_analysis_options opts_copy;
    uint64_t now;
    uint64_t graph_instances;  /* inference instances whose saved tensors are alive now */
    /* The helper's holder scans (notes "holder", one scan per `when`): the scan being read, and
     * p->holders, the one that found a holder the program passes back into its model ("carried")
     * or else whose top holder kept the most graph nodes so far (holders_commit). */
    const char *holder_scan; /* the `when` of the scan being read */
    gp_holder *scan;
    size_t n_scan, cap_scan, cap_holders;
    uint64_t scan_nodes, holders_nodes;
    bool scan_carried, holders_carried;
    bool oom;
    char **owned_strings;
    size_t n_owned, cap_owned;
    gp_map strings_map; /* interned owned strings */
    /* Frame rules. A class is an interned (rule, category, op); a function's class is memoized
     * by its interned name, a stack node's by its id (0 = not yet, else class + 1). */
    struct stack_class *classes;
    size_t n_classes, cap_classes;
    gp_map class_map;     /* (rule, category, op) -> class */
    gp_map function_memo; /* function name -> class */
    uint16_t *stack_class; /* by stack id */
    size_t n_stack_class;
    uint32_t classified; /* stack ids up to this one are classified, in id order */
    uint32_t *path;      /* stack_classify_walk's path */
    size_t cap_path;
    gp_map raw_key_map; /* (class, device, module) -> index into raw_keys */
    raw_keys *raw_keys;
    size_t n_raw_keys, cap_raw_keys;
    frame_info *frames; /* by the trace's frame id (gp_trace_stack_node); [0] unused */
    size_t n_frames;
    const char **site_labels; /* by site index, filled on demand (gp__site_label_at) */
    struct site_key_slot *site_keys; /* gp_site_key's memo */
    size_t n_site_keys, cap_site_keys;
    uint32_t symbolized_modules;
    bool python_modules; /* a registered module is a Python function's ("py:", is_python) */
    uint32_t *py_frame;  /* program_python_frame's memo by stack id: 0 = not yet, 1 = none,
                          * k + 2 = frame k */
    size_t n_py_frame;
};

typedef struct gp__profile_internal engine;

void gp_analysis_options_default(gp_analysis_options *o)
{
    static const char *const inference[] = {LP_REGION_INFERENCE};
    memset(o, 0, sizeof *o);
    o->inference_regions = inference;
    o->n_inference_regions = 1;
    o->timeline_points = 512;
    o->growth_threshold = 64 << 10;
}

/* ---- keys and stats -------------------------------------------------------------------------- */

/* The state of `device`, or NULL when it has not allocated yet. */
static device_state *device_find(gp_profile *p, int32_t device)
{
    engine *e = p->internal;
    for (size_t i = 0; i < p->n_devices; i++)
        if (e->devices[i].pub.device == device)
            return &e->devices[i];
    return NULL;
}

/* The state of `device`, made on first use. */
static device_state *device_get(gp_profile *p, int32_t device)
{
    engine *e = p->internal;
    device_state *d = device_find(p, device);
    if (d)
        return d;
    d = gp__push((void **)&e->devices, &p->n_devices, &e->cap_devices, sizeof *d);
    if (!d) {
        e->oom = true;
        return &e->devices[0];
    }
    d->pub.device = device;
    return d;
}

/* Brings a key's peak_bytes up to date before it changes (see the top of this file). */
static void stats_sync(gp_stats *s, const device_state *d)
{
    if (s->snap_epoch != d->epoch) {
        s->peak_bytes = s->live_bytes;
        s->snap_epoch = d->epoch;
    }
}

static void stats_add(gp_stats *s, const device_state *d, uint64_t size, bool count)
{
    stats_sync(s, d);
    if (count) {
        s->count++;
        s->total_bytes += size;
    }
    s->live_bytes += size;
    s->live_count++;
    if (s->live_bytes > s->max_live_bytes)
        s->max_live_bytes = s->live_bytes;
}

static void stats_sub(gp_stats *s, const device_state *d, uint64_t size)
{
    stats_sync(s, d);
    s->frees++;
    s->live_bytes -= size;
    s->live_count--;
}

static uint32_t tag_key_get(gp_profile *p, lp_category cat, const char *op, const char *module,
                            int32_t device)
{
    engine *e = p->internal;
    struct gp_map_slot *s = gp__map_find(&e->tag_map, (uint64_t)cat << 32 | (uint32_t)device,
                              (uintptr_t)op, (uintptr_t)module);
    if (s)
        return s->v;
    gp_tag_key *k = gp__push((void **)&p->tag_keys, &p->n_tag_keys, &e->cap_tag_keys, sizeof *k);
    if (!k || !gp__map_put(&e->tag_map, (uint64_t)cat << 32 | (uint32_t)device, (uintptr_t)op,
                       (uintptr_t)module, (uint32_t)(p->n_tag_keys - 1))) {
        e->oom = true;
        return 0;
    }
    *k = (gp_tag_key){.category = cat, .op = op, .module = module, .device = device,
                      .top_site = NONE};
    return (uint32_t)(p->n_tag_keys - 1);
}

static void sync_modules(gp_profile *p);
static frame_info *frame_at(gp_profile *p, uint32_t frame);

/* A stack node's classification by the frame rules, memoized per node of the calling-context
 * tree: a node combines its parent's with its own frame's (see gp_rules_match), so each node and
 * each distinct function is looked at once. Classes are interned, so a node's memo is a 16-bit
 * class index. */
typedef struct stack_class {
    int rule;
    lp_category category;
    const char *op; /* interned (own) or empty_label */
    bool boundary;  /* a frame's class only: the frames outside it do not count (rules.h) */
} stack_class;

#define CLASS_NONE 0 /* class 0 is {-1, OTHER, ""}: nothing matched */

/* The index of class c, interned; CLASS_NONE when out of memory. */
static uint32_t class_intern(gp_profile *p, stack_class c)
{
    engine *e = p->internal;
    uint64_t k1 = (uint64_t)(uint32_t)c.rule << 32 | (uint32_t)c.category |
                  (c.boundary ? 1u << 31 : 0);
    struct gp_map_slot *s = gp__map_find(&e->class_map, k1, (uintptr_t)c.op, 0);
    if (s)
        return s->v;
    stack_class *slot =
        gp__push((void **)&e->classes, &e->n_classes, &e->cap_classes, sizeof *slot);
    if (!slot || !gp__map_put(&e->class_map, k1, (uintptr_t)c.op, 0,
                              (uint32_t)(e->n_classes - 1))) {
        e->oom = true;
        if (slot)
            e->n_classes--;
        return CLASS_NONE;
    }
    *slot = c;
    return (uint32_t)(e->n_classes - 1);
}

static bool is_python(const gp_symbol *s);

/* The class of a frame: what the rules say of its function (memoized by function); a boundary
 * class for Python frames. */
static uint32_t frame_class(gp_profile *p, frame_info *f)
{
    engine *e = p->internal;
    if (f->cls)
        return f->cls - 1;
    uint32_t c = CLASS_NONE;
    const gp_symbol *sym = f->sym;
    if (sym && sym->resolved) {
        struct gp_map_slot *s = gp__map_find(&e->function_memo, (uintptr_t)sym->function, 0, 0);
        if (s) {
            c = s->v;
        } else {
            gp_rule_match m;
            gp_rules_match(e->opts->rules, sym->function, &m);
            c = class_intern(p, (stack_class){m.rule, m.category,
                                              m.op[0] ? own(p, m.op) : empty_label, m.boundary});
            if (!gp__map_put(&e->function_memo, (uintptr_t)sym->function, 0, 0, c))
                e->oom = true;
        }
        if (is_python(sym) && !e->classes[c].boundary) { /* every Python frame is a boundary */
            stack_class b = e->classes[c];
            b.boundary = true;
            c = class_intern(p, b);
        }
    }
    f->cls = c + 1;
    return c;
}

/* The new length of an array indexed by stack id, now `n` long, to hold `id`: the trace's
 * stack count so far, grown by at least an eighth (stack ids keep growing while the trace is
 * read; an eighth keeps the reallocations few and what is never touched small). */
static size_t per_stack_size(const gp_profile *p, size_t n, uint32_t id)
{
    size_t want = gp_trace_stack_count(p->trace) + 1;
    if (want < n + n / 8 + 1024)
        want = n + n / 8 + 1024;
    return want > id ? want : (size_t)id + 1;
}

/* The memoized class of stack node `id` (class + 1), 0 if not known yet. */
static uint32_t stack_class_memo(const engine *e, uint32_t id)
{
    return id < e->n_stack_class ? e->stack_class[id] : 0;
}

static void stack_class_set(gp_profile *p, uint32_t id, uint32_t c)
{
    engine *e = p->internal;
    if (c + 1 > UINT16_MAX)
        return; /* not memoized: computed again when asked (never with real rule sets) */
    if (id >= e->n_stack_class &&
        !gp__grow_zeroed((void **)&e->stack_class, &e->n_stack_class,
                         per_stack_size(p, e->n_stack_class, id), sizeof *e->stack_class)) {
        e->oom = true;
        return;
    }
    e->stack_class[id] = (uint16_t)(c + 1);
}

/* The class of a node whose parent has class `above`: the node's frame's class, applied. */
static uint32_t class_step(gp_profile *p, uint32_t above, uint32_t frame)
{
    engine *e = p->internal;
    frame_info *fr = frame_at(p, frame);
    uint32_t fi = fr ? frame_class(p, fr) : CLASS_NONE;
    /* the frames outside a boundary do not classify inside */
    uint32_t ci = e->classes[fi].boundary ? CLASS_NONE : above;
    if (fi == CLASS_NONE)
        return ci;
    stack_class c = e->classes[ci], f = e->classes[fi];
    bool changed = false;
    if (f.rule >= 0 && (c.rule < 0 || f.rule < c.rule)) {
        c.rule = f.rule;
        c.category = f.category;
        changed = true;
    }
    if (!*c.op && *f.op) { /* the outermost op wins: the parent's, if it has one */
        c.op = f.op;
        changed = true;
    }
    return changed ? class_intern(p, c) : ci;
}

/* The class of a node whose ancestors' classes are not all memoized: a walk up to the first
 * memoized one, then back down, memoizing the path. */
static uint32_t stack_classify_walk(gp_profile *p, uint32_t stack)
{
    engine *e = p->internal;
    size_t n = 0;
    uint32_t id = stack, memo;
    uint32_t above = CLASS_NONE;
    while (id) {
        if ((memo = stack_class_memo(e, id))) {
            above = memo - 1;
            break;
        }
        uint32_t *slot = gp__push((void **)&e->path, &n, &e->cap_path, sizeof *slot);
        if (!slot) {
            e->oom = true;
            return CLASS_NONE;
        }
        *slot = id;
        uint32_t frame, parent;
        if (gp_trace_stack_node(p->trace, id, &frame, &parent) != 0)
            break;
        id = parent;
    }
    const uint32_t *path = e->path;
    uint32_t ci = above;
    for (size_t i = n; i-- > 0;) {
        uint32_t frame, parent;
        if (gp_trace_stack_node(p->trace, path[i], &frame, &parent) != 0)
            break;
        ci = class_step(p, ci, frame);
        stack_class_set(p, path[i], ci);
    }
    return ci;
}

/* The class of stack node `stack`. The nodes not classified yet up to it are classified in id
 * order, which is the order the reader stores them in: a parent has a smaller id than its
 * children, so its class is known when theirs is made, and the nodes are read one after the
 * other instead of by a walk up each new stack. */
static uint32_t stack_classify(gp_profile *p, uint32_t stack)
{
    engine *e = p->internal;
    if (!stack)
        return CLASS_NONE;
    uint32_t memo = stack_class_memo(e, stack);
    if (memo)
        return memo - 1;
    for (uint32_t id = e->classified + 1; id <= stack && !e->oom; id++) {
        uint32_t frame, parent;
        if (gp_trace_stack_node(p->trace, id, &frame, &parent) != 0)
            break;
        uint32_t above = !parent                                ? CLASS_NONE
                         : (memo = stack_class_memo(e, parent)) ? memo - 1
                                                                : stack_classify_walk(p, parent);
        stack_class_set(p, id, class_step(p, above, frame));
        e->classified = id;
    }
    memo = stack_class_memo(e, stack);
    return memo ? memo - 1 : stack_classify_walk(p, stack);
}

static uint32_t tag_key_get(gp_profile *p, lp_category cat, const char *op, const char *module,
                            int32_t device);
static uint32_t module_get(gp_profile *p, const char *module, int32_t device);

/* The keys (tag key, module) of untagged buffers of class `cls` made in `module` (a canonical
 * string, "" for none) on `device`, made on first use; NULL when out of memory. */
static raw_keys *raw_keys_get(gp_profile *p, uint32_t cls, int32_t device, const char *module)
{
    engine *e = p->internal;
    struct gp_map_slot *s = gp__map_find(&e->raw_key_map, cls, (uint32_t)device, (uintptr_t)module);
    if (s)
        return &e->raw_keys[s->v];
    raw_keys *k = gp__push((void **)&e->raw_keys, &e->n_raw_keys, &e->cap_raw_keys, sizeof *k);
    if (!k || !gp__map_put(&e->raw_key_map, cls, (uint32_t)device, (uintptr_t)module,
                           (uint32_t)(e->n_raw_keys - 1))) {
        e->oom = true;
        return NULL;
    }
    const stack_class *c = &e->classes[cls];
    k->tag_key = tag_key_get(p, c->category, c->op, module, device);
    k->module = module_get(p, module, device);
    return k;
}

/* The stack and device of site i. */
static uint32_t site_stack(const gp_profile *p, uint32_t i)
{
    const engine *e = p->internal;
    return e->want_sites ? p->sites[i].stack : e->site_ids[i].stack;
}

static int32_t site_device(const gp_profile *p, uint32_t i)
{
    const engine *e = p->internal;
    return e->want_sites ? gp_site_device(p, &p->sites[i]) : e->site_ids[i].device;
}

/* The index of the site (stack, device), made on first use. */
static uint32_t site_get(gp_profile *p, uint32_t stack, int32_t device)
{
    engine *e = p->internal;
    /* Host sites by stack id directly (ids are dense): the lookup every allocation makes. */
    bool host = device == LP_DEVICE_HOST;
    if (host && stack < e->n_host_sites && e->host_sites[stack] != 0)
        return e->host_sites[stack] - 1;
    struct gp_map_slot *s = host ? NULL : gp__map_find(&e->site_map, stack, (uint32_t)device, 0);
    if (s)
        return s->v;
    uint32_t index = (uint32_t)e->n_extra;
    site_extra *x = gp__push((void **)&e->extra, &e->n_extra, &e->cap_extra, sizeof *x);
    if (!x || (!host && !gp__map_put(&e->site_map, stack, (uint32_t)device, 0, index))) {
        e->oom = true;
        return 0;
    }
    if (e->want_sites) {
        gp_site *site = gp__push((void **)&p->sites, &p->n_sites, &e->cap_sites, sizeof *site);
        if (!site) {
            e->oom = true;
            return 0;
        }
        site->stack = stack;
        site->tag_key = NONE; /* its first buffer's, once known (on_alloc) */
    } else {
        size_t n = index;
        site_id *id = gp__push((void **)&e->site_ids, &n, &e->cap_site_ids, sizeof *id);
        if (!id) {
            e->oom = true;
            return 0;
        }
        *id = (site_id){stack, device};
    }
    if (host) {
        if (stack >= e->n_host_sites &&
            !gp__grow_zeroed((void **)&e->host_sites, &e->n_host_sites,
                             per_stack_size(p, e->n_host_sites, stack), sizeof *e->host_sites)) {
            e->oom = true;
            return index;
        }
        e->host_sites[stack] = index + 1;
    }
    return index;
}

/* The frame-rule class of a site's untagged buffers (CLASS_NONE without rules or stack). */
static uint32_t site_class(gp_profile *p, uint32_t site)
{
    engine *e = p->internal;
    uint32_t stack = site_stack(p, site);
    if (!e->opts->rules || !stack)
        return CLASS_NONE;
    uint32_t memo = stack_class_memo(e, stack);
    if (memo)
        return memo - 1;
    sync_modules(p);
    return stack_classify(p, stack);
}

/* The raw tag key of a site that made untagged buffers outside any module (SITE_RAW_SEEN). */
static uint32_t site_raw_key(gp_profile *p, uint32_t site)
{
    const raw_keys *k = raw_keys_get(p, site_class(p, site), site_device(p, site), empty_label);
    return k ? k->tag_key : NONE;
}

static uint32_t module_get(gp_profile *p, const char *module, int32_t device)
{
    engine *e = p->internal;
    struct gp_map_slot *s = gp__map_find(&e->module_map, (uintptr_t)module, (uint32_t)device, 0);
    if (s)
        return s->v;
    gp_module_stats *m = gp__push((void **)&p->modules, &p->n_modules, &e->cap_modules, sizeof *m);
    if (!m || !gp__map_put(&e->module_map, (uintptr_t)module, (uint32_t)device, 0,
                       (uint32_t)(p->n_modules - 1))) {
        e->oom = true;
        return 0;
    }
    m->module = module;
    m->device = device;
    return (uint32_t)(p->n_modules - 1);
}

static uint32_t saved_get(gp_profile *p, const char *module, const char *op, const char *shape,
                          int32_t device)
{
    engine *e = p->internal;
    struct gp_map_slot *s = gp__map_find(&e->saved_map, (uintptr_t)module ^ (uint32_t)device, (uintptr_t)op,
                              (uintptr_t)shape);
    if (s && p->saved[s->v].device == device)
        return s->v;
    gp_saved_tensor *t = gp__push((void **)&p->saved, &p->n_saved, &e->cap_saved, sizeof *t);
    if (!t || !gp__map_put(&e->saved_map, (uintptr_t)module ^ (uint32_t)device, (uintptr_t)op,
                       (uintptr_t)shape, (uint32_t)(p->n_saved - 1))) {
        e->oom = true;
        return 0;
    }
    t->module = module;
    t->op = op;
    t->shape = shape;
    t->where = empty_label;
    const char *at = strstr(shape, " at ");
    if (at) { /* "[64,512] at model.py:88 (forward)": the shape, then where */
        char *prefix = strndup(shape, (size_t)(at - shape));
        t->shape = prefix ? own(p, prefix) : shape;
        t->where = own(p, at + 4);
        free(prefix);
    }
    t->device = device;
    return (uint32_t)(p->n_saved - 1);
}

static uint32_t region_get(gp_profile *p, const char *name)
{
    engine *e = p->internal;
    struct gp_map_slot *s = gp__map_find(&e->region_map, (uintptr_t)name, 0, 0);
    if (s)
        return s->v;
    gp_region_stats *r = gp__push((void **)&p->regions, &p->n_regions, &e->cap_regions, sizeof *r);
    if (!r || !gp__map_put(&e->region_map, (uintptr_t)name, 0, 0, (uint32_t)(p->n_regions - 1))) {
        e->oom = true;
        return 0;
    }
    r->name = name;
    return (uint32_t)(p->n_regions - 1);
}

static thread_state *thread_get(gp_profile *p, uint32_t thread)
{
    engine *e = p->internal;
    static thread_state spare = {.top = NONE, .inference_recent = {NONE, NONE}};
    if (thread >= e->n_threads) {
        size_t n = thread + 16;
        thread_state *t = realloc(e->threads, n * sizeof *t);
        if (!t) {
            e->oom = true;
            return &spare;
        }
        for (size_t i = e->n_threads; i < n; i++)
            t[i] = (thread_state){.top = NONE, .inference_recent = {NONE, NONE}};
        e->threads = t;
        e->n_threads = n;
    }
    return &e->threads[thread];
}

/* ---- detector hooks (detectors.h) ---------------------------------------------------------- */

/* The innermost open region of the thread that is one of the inference regions, or NULL. */
static const char *inference_region(gp_profile *p, const thread_state *t)
{
    engine *e = p->internal;
    if (t->inference_depth == 0)
        return NULL;
    for (uint32_t i = t->top; i != NONE; i = e->instances[i].parent)
        if (e->instances[i].inference)
            return e->instances[i].name;
    return NULL;
}

/* Whether grad is off on thread t: inside no_grad or inference_mode, or turned off
 * (set_grad_enabled(False)). engine.grad_off_threads counts the threads where it is. */
static bool grad_off(const thread_state *t)
{
    return t->no_grad_depth > 0 || t->grad_disabled;
}

/* A thread other than `self` with grad off now (its index), or 0. */
static uint32_t grad_off_thread(engine *e, uint32_t self)
{
    if (e->grad_off_threads == 0)
        return 0;
    uint32_t h = e->grad_off_hint;
    if (h && h != self && h < e->n_threads && grad_off(&e->threads[h]))
        return h;
    for (uint32_t i = 1; i < e->n_threads; i++)
        if (i != self && grad_off(&e->threads[i]))
            return e->grad_off_hint = i;
    return 0;
}

/* Buffer o has just entered its category on thread t, index `self` (an allocation, a first tag
 * or a retag that changed it; grad_flag: the event's): the per-buffer detectors judge graph
 * memory. */
static void detect(gp_profile *p, const thread_state *t, uint32_t self, object *o, bool grad_flag)
{
    if (!lp_category_is_graph(o->category))
        return;
    const gp_tag_key *k = &p->tag_keys[o->tag_key];
    engine *e = p->internal;
    gp__grad_context c = {.grad_off_depth = t->no_grad_depth,
                          .grad_on_depth = t->enable_grad_depth,
                          .backward_depth = t->backward_depth,
                          .mode_off = t->grad_disabled,
                          .event_grad = grad_flag,
                          .inference_region = inference_region(p, t),
                          .thread = self,
                          .grad_off_elsewhere = grad_off(t) ? 0 : grad_off_thread(e, self)};
    o->counted = gp__detect_graph_buffer(p->internal->detectors, &c, o->category, k->op, k->module,
                                         site_stack(p, o->site), o->size, o->seq, p->internal->now);
}

/* Buffer o leaves its category (freed, retagged): a graph buffer tells the detectors whether a
 * backward pass, on any thread, is using the graph now (gp__detect_graph_left). */
static void uncount(gp_profile *p, object *o)
{
    if (!lp_category_is_graph(o->category))
        return;
    engine *e = p->internal;
    bool in_backward = false;
    for (size_t i = 0; i < e->n_threads && !in_backward; i++)
        in_backward = e->threads[i].backward_depth > 0;
    gp__detect_graph_left(e->detectors, o->seq, o->size, o->counted, in_backward);
    o->counted = false;
}

/* ---- the live set ---------------------------------------------------------------------------- */

static uint32_t object_new(engine *e)
{
    if (e->free_object != NONE) {
        uint32_t i = e->free_object;
        e->free_object = e->objects[i].tag_key;
        return i;
    }
    object *o = gp__push((void **)&e->objects, &e->n_objects, &e->cap_objects, sizeof *o);
    if (!o || (e->opts->observer && e->n_objects > e->cap_handles &&
               !gp__grow_zeroed((void **)&e->handles, &e->cap_handles, e->cap_objects,
                                sizeof *e->handles))) {
        e->oom = true;
        return NONE;
    }
    return (uint32_t)(e->n_objects - 1);
}

static void object_delete(engine *e, uint32_t i)
{
    e->objects[i].tag_key = e->free_object;
    e->free_object = i;
}

/* Counts `size` bytes (negative: takes them back) as having entered tag key `key` from `site`:
 * gp_tag_key.top_site is chosen from these sums when the replay ends. The bytes of untagged
 * buffers (`raw`: their key is the site's raw key) are counted in the site, others in
 * key_site_map; finish() adds the two up. */
static void key_site_add(gp_profile *p, uint32_t key, uint32_t site, int64_t size, bool raw)
{
    engine *e = p->internal;
    if (!e->want_sites)
        return;
    if (raw) { /* an untagged buffer: key is the site's raw key */
        const site_extra *x = &e->extra[site];
        if (x->side) /* else pure: the site's total_bytes */
            e->site_sides[x->side - 1].raw_key_bytes += (uint64_t)size;
        return;
    }
    struct gp_map_slot *s = gp__map_find(&e->key_site_map, key, site, 0);
    if (!s) {
        uint64_t *b = gp__push((void **)&e->key_site_bytes, &e->n_key_site, &e->cap_key_site,
                               sizeof *b);
        if (!b || !gp__map_put(&e->key_site_map, key, site, 0, (uint32_t)(e->n_key_site - 1))) {
            e->oom = true;
            return;
        }
        *b = (uint64_t)size;
        return;
    }
    e->key_site_bytes[s->v] += (uint64_t)size;
}

/* Adds `size` bytes (negative: takes them back) to what site `site` allocated in `cat` (nothing
 * to do for a pure site: its untagged buffers are in its stats). */
static void site_cat_add(gp_profile *p, uint32_t site, lp_category cat, int64_t size)
{
    engine *e = p->internal;
    if (!e->want_sites)
        return;
    const site_extra *x = &e->extra[site];
    if (x->side)
        e->site_sides[x->side - 1].by_cat[cat] += (uint64_t)size;
}

/* Gives site `site` its side record, from its figures as a pure site (or zeros, for a site
 * without buffers yet), before a tagged buffer or a first tag changes them. */
static void site_unpure(gp_profile *p, uint32_t site)
{
    engine *e = p->internal;
    site_extra *x = &e->extra[site];
    if (x->side || !e->want_sites)
        return;
    site_side *d =
        gp__push((void **)&e->site_sides, &e->n_site_sides, &e->cap_site_sides, sizeof *d);
    if (!d) {
        e->oom = true;
        return;
    }
    if (x->flags & SITE_PURE) {
        uint64_t total = p->sites[site].stats.total_bytes;
        d->raw_key_bytes = total;
        d->by_cat[x->cat] = total;
    }
    x->flags &= (uint8_t)~SITE_PURE;
    x->side = (uint32_t)e->n_site_sides;
}

/* Adds o's bytes to every key it belongs to. `count` also counts it as an allocation (or a
 * retag into) there; `count_site` does the same for its site, which counts only allocations. */
static void object_enter(gp_profile *p, object *o, bool count, bool count_site)
{
    engine *e = p->internal;
    device_state *d = device_get(p, o->device);
    stats_add(&p->tag_keys[o->tag_key].stats, d, o->size, count);
    if (count)
        key_site_add(p, o->tag_key, o->site, (int64_t)o->size, !o->keyed);
    if (e->want_sites)
        stats_add(&p->sites[o->site].stats, d, o->size, count_site);
    if (count_site)
        site_cat_add(p, o->site, o->category, (int64_t)o->size);
    gp_module_stats *m = &p->modules[o->module];
    stats_add(&m->stats, d, o->size, count);
    stats_add(&m->by_category[o->category], d, o->size, count);
    if (o->saved != NONE)
        stats_add(&p->saved[o->saved].stats, d, o->size, count);
    bool escape_counted = false; /* in the innermost escaped instance only */
    for (uint32_t i = o->instance; i != NONE; i = e->instances[i].parent) {
        instance *in = &e->instances[i];
        if (o->category == LP_CAT_SAVED) {
            if (in->inference && in->saved_inside == 0 && o->size)
                e->graph_instances++;
            in->saved_inside += o->size;
            if (in->escaped && !escape_counted) {
                gp__detect_escape_live(e->detectors, in->name, (int64_t)o->size, e->now);
                escape_counted = true;
            }
        }
        if (in->open)
            in->live_inside += o->size;
    }
    d->live_by_cat[o->category] += o->size;
    if (d->live_by_cat[o->category] > d->pub.by_category_max[o->category])
        d->pub.by_category_max[o->category] = d->live_by_cat[o->category];
    d->pub.live_bytes += o->size;
    if (d->pub.live_bytes > d->pub.peak_bytes) {
        d->pub.peak_bytes = d->pub.live_bytes;
        d->pub.peak_time_ns = e->now;
        memcpy(d->pub.by_category_at_peak, d->live_by_cat, sizeof d->live_by_cat);
        d->epoch++;
        d->peak_seq = o->seq;
        d->graphs_at_peak = e->graph_instances;
        const gp_replay_observer *obs = e->opts->observer;
        if (obs && obs->peak)
            obs->peak(obs->ctx, p, o->device, o->seq);
    }
    if (o->device == p->primary_device && d->pub.live_bytes > e->bucket_max)
        e->bucket_max = d->pub.live_bytes;
}

/* Takes o's bytes out of every key (a free, or the first half of a retag). */
static void object_leave(gp_profile *p, object *o)
{
    engine *e = p->internal;
    device_state *d = device_get(p, o->device);
    stats_sub(&p->tag_keys[o->tag_key].stats, d, o->size);
    if (e->want_sites)
        stats_sub(&p->sites[o->site].stats, d, o->size);
    gp_module_stats *m = &p->modules[o->module];
    stats_sub(&m->stats, d, o->size);
    stats_sub(&m->by_category[o->category], d, o->size);
    if (o->saved != NONE)
        stats_sub(&p->saved[o->saved].stats, d, o->size);
    bool escape_counted = false;
    for (uint32_t i = o->instance; i != NONE; i = e->instances[i].parent) {
        instance *in = &e->instances[i];
        if (o->category == LP_CAT_SAVED) {
            in->saved_inside -= o->size;
            if (in->inference && in->saved_inside == 0 && o->size)
                e->graph_instances--;
            if (in->escaped && !escape_counted) {
                gp__detect_escape_live(e->detectors, in->name, -(int64_t)o->size, e->now);
                escape_counted = true;
            }
        }
        if (in->open)
            in->live_inside -= o->size;
    }
    d->live_by_cat[o->category] -= o->size;
    d->pub.live_bytes -= o->size;
}

/* Gives o the role of tag key `k` (category, op, module) and the matching module/saved keys. */
static void object_set_role(gp_profile *p, object *o, lp_category cat, const char *op,
                            const char *module, const char *detail)
{
    o->category = cat;
    o->tag_key = tag_key_get(p, cat, op, module, o->device);
    o->module = module_get(p, module, o->device);
    o->saved = cat == LP_CAT_SAVED ? saved_get(p, module, op, detail, o->device) : NONE;
    if ((*op || *module) && p->internal->want_sites)
        p->sites[o->site].tag_key = o->tag_key;
}

/* ---- region instances ------------------------------------------------------------------------ */

static void instance_unref(engine *e, uint32_t i)
{
    while (i != NONE) {
        instance *in = &e->instances[i];
        if (--in->refs > 0 || in->open)
            return;
        uint32_t parent = in->parent;
        in->parent = e->free_instance; /* recycle */
        e->free_instance = i;
        i = parent;
    }
}

static uint32_t instance_new(engine *e)
{
    if (e->free_instance != NONE) {
        uint32_t i = e->free_instance;
        e->free_instance = e->instances[i].parent;
        return i;
    }
    instance *in = gp__push((void **)&e->instances, &e->n_instances, &e->cap_instances, sizeof *in);
    if (!in) {
        e->oom = true;
        return NONE;
    }
    return (uint32_t)(e->n_instances - 1);
}

static bool is_inference_name(const engine *e, const char *name)
{
    for (size_t i = 0; i < e->opts->n_inference_regions; i++)
        if (!strcmp(name, e->opts->inference_regions[i]))
            return true;
    return false;
}

/* Grad-mode scopes, by region name (vocabulary.h): grad off, grad back on, backward. */
enum grad_scope { SCOPE_NONE, SCOPE_GRAD_OFF, SCOPE_GRAD_ON, SCOPE_BACKWARD };

static enum grad_scope grad_scope(const char *name)
{
    if (!strcmp(name, LP_REGION_NO_GRAD) || !strcmp(name, LP_REGION_INFERENCE_MODE))
        return SCOPE_GRAD_OFF;
    if (!strcmp(name, LP_REGION_ENABLE_GRAD) || !strcmp(name, LP_REGION_INFERENCE_MODE_OFF))
        return SCOPE_GRAD_ON;
    return !strcmp(name, LP_REGION_BACKWARD) ? SCOPE_BACKWARD : SCOPE_NONE;
}

/* Adds d (+1 on entry, -1 on exit) to the thread's depth in scope kind k. */
static void grad_scope_enter(engine *e, thread_state *t, enum grad_scope k, int d)
{
    if (k == SCOPE_GRAD_OFF) {
        bool was_off = grad_off(t);
        t->no_grad_depth += d;
        e->grad_off_threads += grad_off(t) - was_off;
    } else if (k == SCOPE_GRAD_ON)
        t->enable_grad_depth += d;
    else if (k == SCOPE_BACKWARD)
        t->backward_depth += d;
}

static void inference_entered(gp_profile *p, thread_state *t, uint32_t i);

/* The region `name` opens on thread t (index `thread`); `module`: it is a module's forward. */
static void region_push(gp_profile *p, thread_state *t, uint32_t thread, const char *name,
                        bool module)
{
    engine *e = p->internal;
    uint32_t i = instance_new(e);
    if (i == NONE)
        return;
    instance *in = &e->instances[i];
    const char *outer = t->top != NONE ? e->instances[t->top].module : empty_label;
    *in = (instance){.name = name,
                     .module = module ? name : outer,
                     .parent = t->top,
                     .region = region_get(p, name),
                     .thread = thread,
                     .depth = t->depth,
                     .refs = 1,
                     .open = true,
                     .inference = is_inference_name(e, name),
                     .begin_ns = e->now,
                     .scope = (uint8_t)grad_scope(name)};
    if (t->top != NONE)
        e->instances[t->top].refs++;
    t->top = i;
    t->depth++;
    if (p->regions[in->region].entries == 0)
        p->regions[in->region].first_entry_ns = e->now;
    in->ordinal = p->regions[in->region].entries++;
    grad_scope_enter(e, t, (enum grad_scope)in->scope, 1);
    if (in->inference) {
        t->inference_depth++;
        inference_entered(p, t, i);
    }
}

/* Hands the escape detector the live buffers saved for backward that were made inside instance
 * `inst` (gp__detect_escape_item), scanning the live set: the detector asks for this only for
 * its first few escapes, so a long run cannot make it quadratic. */
static void escape_items(gp_profile *p, uint32_t inst, const char *region)
{
    engine *e = p->internal;
    for (size_t k = 0; k < e->n_objects; k++) {
        object *o = &e->objects[k];
        if (!o->size || o->category != LP_CAT_SAVED)
            continue;
        for (uint32_t i = o->instance; i != NONE; i = e->instances[i].parent)
            if (i == inst) {
                const gp_tag_key *key = &p->tag_keys[o->tag_key];
                gp__detect_escape_item(e->detectors, region, o->category, key->op, key->module,
                                       site_stack(p, o->site), o->size, e->now);
                break;
            }
    }
}

/*
 * Instance `old` of an inference region is judged once the next instance of it on its thread has
 * ended: if tensors allocated inside it are still saved for backward then, a graph was kept beyond
 * the next iteration: outputs left the region attached to their graph, and something keeps them
 * (the escape detector, gp__detect_escape). An output kept only until the next iteration replaces
 * it (Python's `out = model(x)`, the loss of the last batch) is not an escape. The engine judges
 * when the region is entered again (inference_entered), and at the end of the trace
 * (escapes_at_end).
 */
static void escape_judge(gp_profile *p, uint32_t old)
{
    engine *e = p->internal;
    instance *in = &e->instances[old];
    if (in->saved_inside == 0)
        return;
    if (gp__detect_escape(e->detectors, in->name, in->saved_inside, e->now))
        escape_items(p, old, in->name);
    in->escaped = true;
    gp__detect_escape_live(e->detectors, in->name, (int64_t)in->saved_inside, e->now);
}

static void inference_entered(gp_profile *p, thread_state *t, uint32_t i)
{
    engine *e = p->internal;
    uint32_t old = t->inference_recent[1];
    if (old != NONE) {
        escape_judge(p, old);
        instance_unref(e, old);
    }
    t->inference_recent[1] = t->inference_recent[0];
    t->inference_recent[0] = i;
    e->instances[i].refs++;
}

/* At the end of the trace, each thread's last-but-one inference instance, once the last one has
 * ended too: a graph that outlived the next iteration and the program's last line is kept as
 * surely as one that outlived the next iteration and the one after it. */
static void escapes_at_end(gp_profile *p)
{
    engine *e = p->internal;
    for (size_t i = 0; i < e->n_threads; i++) {
        const thread_state *t = &e->threads[i];
        uint32_t old = t->inference_recent[1], last = t->inference_recent[0];
        if (old != NONE && last != NONE && !e->instances[last].open)
            escape_judge(p, old);
    }
}

static void region_pop(gp_profile *p, thread_state *t)
{
    engine *e = p->internal;
    uint32_t i = t->top;
    if (i == NONE)
        return; /* unbalanced pop: ignored, as the recorder does */
    instance *in = &e->instances[i];
    gp_region_stats *r = &p->regions[in->region];
    if (in->live_inside > r->retained_bytes)
        r->retained_bytes = in->live_inside;
    if (p->n_spans < GP_MAX_SPANS) {
        gp_region_span *s = gp__push((void **)&p->spans, &p->n_spans, &e->cap_spans, sizeof *s);
        if (s)
            *s = (gp_region_span){in->name, in->thread, in->depth, in->begin_ns, e->now};
    }
    grad_scope_enter(e, t, (enum grad_scope)in->scope, -1);
    if (in->inference)
        t->inference_depth--;
    in->open = false;
    t->top = in->parent;
    t->depth--;
    instance_unref(e, i);
}

/* Region statistics that depend on the live total: the max while inside, per open region. */
static void regions_note_live(gp_profile *p, const thread_state *t, uint64_t live)
{
    engine *e = p->internal;
    for (uint32_t i = t->top; i != NONE; i = e->instances[i].parent) {
        gp_region_stats *r = &p->regions[e->instances[i].region];
        if (live > r->max_live_bytes)
            r->max_live_bytes = live;
    }
}

/* Counts o into the open regions of its thread: as allocated bytes when `allocated`, and as graph
 * bytes if it is (now) graph memory. */
static void regions_note_alloc(gp_profile *p, const thread_state *t, const object *o,
                               bool allocated)
{
    engine *e = p->internal;
    for (uint32_t i = t->top; i != NONE; i = e->instances[i].parent) {
        gp_region_stats *r = &p->regions[e->instances[i].region];
        if (allocated)
            r->allocated_bytes += o->size;
        r->allocated_by_category[o->category] += o->size;
        if (lp_category_is_graph(o->category))
            r->graph_bytes += o->size;
    }
}

/* ---- timeline -------------------------------------------------------------------------------- */

static void timeline_close_bucket(gp_profile *p)
{
    engine *e = p->internal;
    if (p->n_timeline == e->cap_timeline) { /* full: merge pairs, double the width */
        size_t n = p->n_timeline / 2;
        for (size_t i = 0; i < n; i++) {
            gp_timeline_point a = p->timeline[2 * i], b = p->timeline[2 * i + 1];
            b.max_total = a.max_total > b.max_total ? a.max_total : b.max_total;
            p->timeline[i] = b;
        }
        if (p->n_timeline % 2)
            p->timeline[n++] = p->timeline[p->n_timeline - 1];
        p->n_timeline = n;
        e->bucket_width *= 2;
    }
    const device_state *d = device_get(p, p->primary_device);
    gp_timeline_point *pt = &p->timeline[p->n_timeline++];
    pt->time_ns = e->bucket_end;
    pt->live_total = d->pub.live_bytes;
    pt->max_total = e->bucket_max > d->pub.live_bytes ? e->bucket_max : d->pub.live_bytes;
    memcpy(pt->live_by_category, d->live_by_cat, sizeof d->live_by_cat);
    e->bucket_max = d->pub.live_bytes;
}

/* Called before each event at time `now`: closes the buckets that ended before it. */
static void timeline_advance(gp_profile *p, uint64_t now)
{
    engine *e = p->internal;
    if (now < e->bucket_end)
        return;
    timeline_close_bucket(p);
    if (now >= e->bucket_end + e->bucket_width) /* a quiet stretch: one point, then jump */
        e->bucket_end = now - now % e->bucket_width;
    e->bucket_end += e->bucket_width;
}

/* ---- iterations ------------------------------------------------------------------------------ */

static void iteration_mark(gp_profile *p, const char *name)
{
    engine *e = p->internal;
    gp_iteration *it = gp__push((void **)&p->iterations, &p->n_iterations, &e->cap_iterations,
                            sizeof *it);
    if (!it) {
        e->oom = true;
        return;
    }
    const device_state *d = device_get(p, p->primary_device);
    it->mark = name;
    it->time_ns = e->now;
    it->live_bytes = d->pub.live_bytes;
    memcpy(it->live_by_category, d->live_by_cat, sizeof d->live_by_cat);
    gp__detect_mark(e->detectors, p);
}

/* ---- events ---------------------------------------------------------------------------------- */

/* Tells the observer, if any, about buffer o (see gp_replay_observer). */
static void observe(gp_profile *p, void (*fn)(void *, gp_profile *, const gp_buffer_event *),
                    object *o, uint32_t thread, bool first_tag)
{
    const gp_replay_observer *obs = p->internal->opts->observer;
    if (!obs || !fn)
        return;
    const engine *e = p->internal;
    const gp_tag_key *k = &p->tag_keys[o->tag_key];
    gp_buffer_event b = {.seq = o->seq,
                         .allocs = p->alloc_count,
                         .time_ns = e->now,
                         .thread = thread,
                         .device = o->device,
                         .size = o->size,
                         .stack = site_stack(p, o->site),
                         .site = o->site,
                         .category = o->category,
                         .op = k->op,
                         .module = k->module,
                         .scope = "",
                         .first_tag = first_tag,
                         .handle = &e->handles[o - e->objects]};
    uint32_t i = o->instance;
    while (i != NONE && e->instances[i].scope != SCOPE_NONE)
        i = e->instances[i].parent;
    if (i != NONE) {
        b.scope = e->instances[i].name;
        b.scope_ordinal = e->instances[i].ordinal;
    }
    fn(obs->ctx, p, &b);
}

#define OBSERVER(p) ((p)->internal->opts->observer)

static void on_alloc(gp_profile *p, thread_state *t, const gp_event *ev, bool tagged)
{
    engine *e = p->internal;
    live_slot *s = live_find(&e->objects_map, ev->addr, ev->device);
    if (s) { /* allocated again without a free in between (missed free): drop the old one */
        if (OBSERVER(p))
            observe(p, OBSERVER(p)->free, &e->objects[s->obj], ev->thread, false);
        object_leave(p, &e->objects[s->obj]);
        uncount(p, &e->objects[s->obj]);
        instance_unref(e, e->objects[s->obj].instance);
        e->objects[s->obj].size = 0;
        object_delete(e, s->obj);
        live_remove(&e->objects_map, s);
        p->unknown_frees++;
    }
    uint32_t i = object_new(e);
    if (i == NONE)
        return;
    object *o = &e->objects[i];
    *o = (object){.size = ev->size,
                  .device = (int16_t)ev->device,
                  .instance = t->top,
                  .saved = NONE,
                  .seq = p->alloc_count + 1};
    if (e->handles)
        e->handles[i] = 0;
    o->site = site_get(p, ev->stack, ev->device);
    if (e->oom)
        return;
    if (tagged) {
        site_unpure(p, o->site);
        o->tagged = o->keyed = true;
        object_set_role(p, o, ev->category, ev->op, ev->module, ev->detail);
    } else { /* untagged: what the frame rules say, if anything, in the module whose forward
              * made it, if any (keys cached per class and module) */
        uint32_t cls = site_class(p, o->site);
        const stack_class *c = &e->classes[cls];
        site_extra *x = &e->extra[o->site];
        const char *module = t->top != NONE ? e->instances[t->top].module : empty_label;
        if (*module) { /* not the site's raw key: counted per key, as a tagged buffer is */
            site_unpure(p, o->site);
            o->keyed = true;
        } else if (!x->side && !(x->flags & SITE_PURE)) { /* its first buffer */
            x->flags |= SITE_PURE;
            x->cat = (uint8_t)c->category;
        }
        if (!(x->flags & SITE_RAW_SEEN) || c->category == LP_CAT_SAVED) {
            object_set_role(p, o, c->category, c->op, module, empty_label);
            x->flags |= SITE_RAW_SEEN;
        } else {
            const raw_keys *k = raw_keys_get(p, cls, o->device, module);
            o->category = c->category;
            o->tag_key = k ? k->tag_key : 0;
            o->module = k ? k->module : 0;
        }
    }
    if (e->oom) /* a key or a class could not be made: o has no valid indexes */
        return;
    if (e->want_sites && p->sites[o->site].tag_key == NONE)
        p->sites[o->site].tag_key = o->tag_key;
    if (!live_put(&e->objects_map, ev->addr, ev->device, i)) {
        e->oom = true;
        return;
    }
    if (t->top != NONE)
        e->instances[t->top].refs++;
    if (OBSERVER(p)) {
        p->alloc_count++; /* the observer sees this allocation counted */
        observe(p, OBSERVER(p)->alloc, o, ev->thread, false);
        p->alloc_count--;
    }
    object_enter(p, o, true, true);
    p->alloc_count++;
    p->total_allocated_bytes += ev->size;
    t->last_alloc_addr = ev->addr;
    t->last_alloc_device = ev->device;
    t->last_alloc_valid = true;
    regions_note_alloc(p, t, o, true);
    regions_note_live(p, t, device_get(p, o->device)->pub.live_bytes);
    detect(p, t, ev->thread, o, ev->grad_enabled);
}

/* A TAG: the first one of a raw allocation gives it its role (its counts move from OTHER); a
 * later one is a retag (e.g. ACTIVATION -> SAVED), counted into the new key but not as an
 * allocation of the site. A TAG of an unknown address is an in-process allocation. */
static void on_tag(gp_profile *p, thread_state *t, const gp_event *ev)
{
    engine *e = p->internal;
    live_slot *s = live_find(&e->objects_map, ev->addr, ev->device);
    if (!s) {
        on_alloc(p, t, ev, true);
        return;
    }
    object *o = &e->objects[s->obj];
    lp_category before = o->category;
    bool first_tag = !o->tagged;
    object_leave(p, o);
    if (e->want_sites)
        p->sites[o->site].stats.frees--; /* the site keeps its allocation */
    if (first_tag) {     /* as if it had never been counted as OTHER */
        site_unpure(p, o->site);
        gp_stats *undo[3] = {&p->tag_keys[o->tag_key].stats, &p->modules[o->module].stats,
                             &p->modules[o->module].by_category[o->category]};
        for (int i = 0; i < 3; i++) {
            undo[i]->count--;
            undo[i]->total_bytes -= o->size;
            undo[i]->frees--;
        }
        key_site_add(p, o->tag_key, o->site, -(int64_t)o->size, !o->keyed);
        site_cat_add(p, o->site, o->category, -(int64_t)o->size);
        site_cat_add(p, o->site, ev->category, (int64_t)o->size);
        o->tagged = o->keyed = true;
    } else {
        p->retag_count++;
    }
    if (ev->category != before)
        uncount(p, o);
    object_set_role(p, o, ev->category, ev->op, ev->module, ev->detail);
    if (e->oom)
        return;
    if (OBSERVER(p))
        observe(p, OBSERVER(p)->retag, o, ev->thread, first_tag);
    object_enter(p, o, true, false);
    /* The peak instant is the allocation that first reached it, with that buffer's own tag
     * applied: under an interposer every buffer reaches the peak as a raw allocation and gets its
     * tag in the next event, which changes no total. */
    device_state *d = device_get(p, o->device);
    if (first_tag && d->pub.live_bytes == d->pub.peak_bytes &&
        d->peak_seq == o->seq) {
        memcpy(d->pub.by_category_at_peak, d->live_by_cat, sizeof d->live_by_cat);
        d->epoch++;
    }
    if (first_tag || o->category != before) {
        regions_note_alloc(p, t, o, false);
        detect(p, t, ev->thread, o, ev->grad_enabled);
    }
}

static void on_free(gp_profile *p, thread_state *t, const gp_event *ev)
{
    engine *e = p->internal;
    live_slot *s = live_find(&e->objects_map, ev->addr, ev->device);
    if (!s) {
        p->unknown_frees++;
        return;
    }
    uint32_t i = s->obj;
    object *o = &e->objects[i];
    if (OBSERVER(p))
        observe(p, OBSERVER(p)->free, o, ev->thread, false);
    object_leave(p, o);
    uncount(p, o);
    p->free_count++;
    if (t->last_alloc_valid && t->last_alloc_addr == ev->addr &&
        t->last_alloc_device == ev->device) {
        p->temporary_count++;
        p->tag_keys[o->tag_key].stats.temporaries++;
        if (e->want_sites)
            p->sites[o->site].stats.temporaries++;
        t->last_alloc_valid = false;
    }
    instance_unref(e, o->instance);
    live_remove(&e->objects_map, s);
    o->size = 0;
    object_delete(e, i);
}

/* The tab-separated fields of a note's value into f[0..n), owned by the profile; the count. */
static size_t note_fields(gp_profile *p, const char *value, const char **f, size_t n)
{
    size_t k = 0;
    while (k < n) {
        const char *tab = strchr(value, '\t');
        size_t len = tab ? (size_t)(tab - value) : strlen(value);
        char *part = strndup(value, len);
        f[k++] = part ? own(p, part) : empty_label;
        free(part);
        if (!tab)
            break;
        value = tab + 1;
    }
    return k;
}

/* The scan read so far becomes p->holders if it found a carried holder and p->holders did not,
 * or, both alike, if its top holder keeps at least as many graph nodes as the top one there
 * (holders' graphs overlap: their sum would count nodes twice): the look that saw the most graph
 * memory is kept, not the last one (at exit, a global holding the last loss outlives the list
 * that held every batch's graph, and the last output reaches as many nodes as the state carried
 * into each call). */
static void holders_commit(gp_profile *p)
{
    engine *e = p->internal;
    bool better =
        e->scan_carried != e->holders_carried ? e->scan_carried : e->scan_nodes >= e->holders_nodes;
    if (e->n_scan && better) {
        gp_holder *h = p->holders;
        size_t cap = e->cap_holders;
        p->holders = e->scan, p->n_holders = e->n_scan, e->cap_holders = e->cap_scan;
        e->scan = h, e->cap_scan = cap;
        e->holders_nodes = e->scan_nodes;
        e->holders_carried = e->scan_carried;
    }
    e->n_scan = 0;
    e->scan_nodes = 0;
    e->scan_carried = false;
}

/*
 * A holder note of the PyTorch helper (name, kind, where, tensors, container, grad_fn, nodes,
 * when: tab-separated). Its scans write a burst of them with one `when` ("call Net#3", "exit");
 * the profile keeps one scan's (holders_commit).
 */
static void holder_note(gp_profile *p, const gp_event *ev)
{
    engine *e = p->internal;
    const char *f[8];
    if (note_fields(p, ev->detail, f, 8) != 8)
        return;
    if (f[7] != e->holder_scan) { /* interned: a new scan */
        holders_commit(p);
        e->holder_scan = f[7];
    }
    gp_holder *h = gp__push((void **)&e->scan, &e->n_scan, &e->cap_scan, sizeof *h);
    if (!h) {
        e->oom = true;
        return;
    }
    *h = (gp_holder){f[0], f[1], f[2], f[4], f[5], strtoull(f[3], NULL, 10),
                     strtoull(f[6], NULL, 10), ev->time_ns};
    if (h->nodes > e->scan_nodes)
        e->scan_nodes = h->nodes;
    e->scan_carried |= !strcmp(h->kind, GP_HOLDER_CARRIED);
}

/* An autograd_error note (kind, message, op, module, where: tab-separated), for the detector
 * of that name. */
static void autograd_error_note(gp_profile *p, const gp_event *ev)
{
    const char *f[5];
    if (note_fields(p, ev->detail, f, 5) == 5)
        gp__detect_autograd_error(p->internal->detectors, f, p->internal->now);
}

/* The recorder's note that an allocation failed: counted, and the first one kept with what was
 * live then and where its thread was. */
static void failed_note(gp_profile *p, const gp_event *ev)
{
    char *end;
    errno = 0;
    unsigned long long size = strtoull(ev->detail, &end, 10);
    if (errno || end == ev->detail || *end)
        return; /* not a size: not the recorder's */
    if (p->failed_allocs++)
        return;
    engine *e = p->internal;
    const thread_state *t = thread_get(p, ev->thread);
    const device_state *d = device_find(p, LP_DEVICE_HOST);
    uint64_t graph = 0;
    for (int c = 0; d && c < LP_CAT_COUNT; c++)
        graph += lp_category_is_graph((lp_category)c) ? d->live_by_cat[c] : 0;
    p->first_failed = (gp_failed_alloc){.size = size,
                                        .time_ns = ev->time_ns,
                                        .thread = ev->thread,
                                        .live_bytes = d ? d->pub.live_bytes : 0,
                                        .graph_bytes = graph,
                                        .region = t->top != NONE ? e->instances[t->top].name : ""};
}

/* Keeps a note (the first GP_MAX_NOTES; the rest are counted) and takes in what the engine
 * understands of it: holders, autograd errors and failed allocations. */
static void note_add(gp_profile *p, const gp_event *ev)
{
    engine *e = p->internal;
    if (!strcmp(ev->name, "holder"))
        holder_note(p, ev);
    else if (!strcmp(ev->name, "autograd_error"))
        autograd_error_note(p, ev);
    else if (!strcmp(ev->name, LP_NOTE_ALLOC_FAILED))
        failed_note(p, ev);
    gp_note *n = p->n_notes < GP_MAX_NOTES ? gp__push((void **)&p->notes, &p->n_notes,
                                                      &e->cap_notes, sizeof *n)
                                           : NULL;
    if (!n) {
        p->notes_dropped++;
        return;
    }
    *n = (gp_note){ev->time_ns, ev->thread, ev->name, ev->detail};
}

/* Starts loading what replaying ev will read first. */
static void prefetch_event(const engine *e, const gp_event *ev)
{
    if (ev->kind == GP_EV_ALLOC && ev->device == LP_DEVICE_HOST && ev->stack < e->n_host_sites)
        __builtin_prefetch(&e->host_sites[ev->stack]);
    if (ev->kind == GP_EV_ALLOC || ev->kind == GP_EV_FREE || ev->kind == GP_EV_TAG)
        live_prefetch(&e->objects_map, ev->addr, ev->device);
}

static void on_event(gp_profile *p, const gp_event *ev)
{
    engine *e = p->internal;
    e->now = ev->time_ns;
    timeline_advance(p, ev->time_ns);
    thread_state *t = thread_get(p, ev->thread);
    switch (ev->kind) {
    case GP_EV_ALLOC:
        on_alloc(p, t, ev, false);
        break;
    case GP_EV_TAG:
        on_tag(p, t, ev);
        break;
    case GP_EV_FREE:
        on_free(p, t, ev);
        break;
    case GP_EV_REGION_PUSH:
        region_push(p, t, ev->thread, ev->name, ev->module_region);
        break;
    case GP_EV_REGION_POP:
        region_pop(p, t);
        break;
    case GP_EV_MARK:
        iteration_mark(p, ev->name);
        break;
    case GP_EV_GRAD_MODE: {
        bool was_off = grad_off(t);
        t->grad_disabled = !ev->grad_enabled;
        p->internal->grad_off_threads += grad_off(t) - was_off;
        break;
    }
    case GP_EV_NOTE:
        note_add(p, ev);
        break;
    case GP_EV_LOST:
    case GP_EV_END:
        break;
    }
}

/* ---- loading --------------------------------------------------------------------------------- */

/* The category of the most bytes allocated at site i: the lowest such category, or OTHER when
 * OTHER has as many as any. */
static lp_category site_category(const gp_profile *p, size_t i)
{
    const engine *e = p->internal;
    const site_extra *x = &e->extra[i];
    if (!x->side)
        return x->flags & SITE_PURE && p->sites[i].stats.total_bytes > 0 ? (lp_category)x->cat
                                                                          : LP_CAT_OTHER;
    const uint64_t *by = e->site_sides[x->side - 1].by_cat;
    lp_category best = LP_CAT_OTHER;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        if (by[c] > by[best])
            best = (lp_category)c;
    return best;
}

uint64_t gp_site_allocated(const gp_profile *p, size_t site, lp_category c)
{
    const engine *e = p->internal;
    if (site >= p->n_sites || (unsigned)c >= LP_CAT_COUNT)
        return 0;
    const site_extra *x = &e->extra[site];
    if (x->side)
        return e->site_sides[x->side - 1].by_cat[c];
    return x->flags & SITE_PURE && x->cat == c ? p->sites[site].stats.total_bytes : 0;
}

/* The bytes that entered site i's raw tag key from it. */
static uint64_t site_raw_key_bytes(const gp_profile *p, size_t i)
{
    const engine *e = p->internal;
    const site_extra *x = &e->extra[i];
    if (x->side)
        return e->site_sides[x->side - 1].raw_key_bytes;
    return x->flags & SITE_PURE ? p->sites[i].stats.total_bytes : 0;
}

/* Makes `site` the top site of tag key `key` if `bytes` entered it from there is more than the
 * best so far (ties to the lower site index). */
static void top_site_consider(gp_profile *p, uint64_t *best, uint32_t key, uint32_t site,
                              uint64_t bytes)
{
    gp_tag_key *k = &p->tag_keys[key];
    if (bytes && (bytes > best[key] || (bytes == best[key] && site < k->top_site))) {
        best[key] = bytes;
        k->top_site = site;
    }
}

static int finish(gp_profile *p)
{
    engine *e = p->internal;
    /* Bring every key's live-at-peak up to date (see the top of the file). */
    for (size_t i = 0; i < p->n_tag_keys; i++)
        stats_sync(&p->tag_keys[i].stats, device_get(p, p->tag_keys[i].device));
    for (size_t i = 0; i < p->n_sites; i++) {
        gp_site *s = &p->sites[i];
        stats_sync(&s->stats, device_get(p, gp_site_device(p, s)));
        e->extra[i].category = (uint8_t)site_category(p, i);
    }
    for (size_t i = 0; i < p->n_saved; i++)
        stats_sync(&p->saved[i].stats, device_get(p, p->saved[i].device));
    for (size_t i = 0; i < p->n_modules; i++) {
        gp_module_stats *m = &p->modules[i];
        const device_state *d = device_get(p, m->device);
        stats_sync(&m->stats, d);
        for (int c = 0; c < LP_CAT_COUNT; c++)
            stats_sync(&m->by_category[c], d);
    }
    for (size_t i = 0; i < p->n_devices; i++) {
        device_state *d = &e->devices[i];
        memcpy(d->pub.by_category_live, d->live_by_cat, sizeof d->live_by_cat);
        p->leaked_bytes += d->pub.live_bytes;
    }
    for (size_t i = 0; i < p->n_tag_keys; i++)
        p->leaked_count += p->tag_keys[i].stats.live_count;
    /* each tag key's top site: the most bytes entered from it, ties to the lower site index;
     * a (key, site) pair's bytes are in key_site_map, plus the site's own count when the key is
     * the site's raw key */
    uint64_t *best = calloc(p->n_tag_keys ? p->n_tag_keys : 1, sizeof *best);
    if (!best)
        return -1;
    for (size_t i = 0; i < e->key_site_map.cap; i++) {
        const struct gp_map_slot *s = &e->key_site_map.slots[i];
        if (s->v == GP_MAP_NONE)
            continue;
        uint64_t bytes = e->key_site_bytes[s->v];
        const site_extra *x = &e->extra[s->k2];
        uint64_t raw = x->flags & SITE_RAW_SEEN ? site_raw_key_bytes(p, s->k2) : 0;
        if (raw && s->k1 == site_raw_key(p, (uint32_t)s->k2))
            bytes += raw;
        top_site_consider(p, best, (uint32_t)s->k1, (uint32_t)s->k2, bytes);
    }
    for (size_t i = 0; i < p->n_sites; i++) {
        const site_extra *x = &e->extra[i];
        uint64_t raw = site_raw_key_bytes(p, i);
        if (!(x->flags & SITE_RAW_SEEN) || raw == 0)
            continue;
        uint32_t key = site_raw_key(p, (uint32_t)i);
        if (key != NONE && !gp__map_find(&e->key_site_map, key, i, 0))
            top_site_consider(p, best, key, (uint32_t)i, raw);
    }
    free(best);
    gp__map_free(&e->key_site_map); /* read by nothing after the top sites */
    free(e->key_site_bytes);
    e->key_site_bytes = NULL;
    e->n_key_site = e->cap_key_site = 0;
    timeline_close_bucket(p);
    escapes_at_end(p);
    holders_commit(p);
    free(e->scan);
    e->scan = NULL;
    e->cap_scan = 0;
    if (gp__detectors_finish(e->detectors, p) != 0)
        return -1;
    /* what only the replay needed: the live set, the lookups by stack id */
    free(e->objects_map.slots);
    e->objects_map = (live_map){0};
    free(e->objects);
    e->objects = NULL;
    e->n_objects = e->cap_objects = 0;
    e->free_object = NONE;
    free(e->handles);
    e->handles = NULL;
    e->cap_handles = 0;
    free(e->host_sites);
    e->host_sites = NULL;
    e->n_host_sites = 0;
    gp__map_free(&e->site_map); /* the device sites' twin of host_sites */
    free(e->stack_class);
    e->stack_class = NULL;
    e->n_stack_class = 0;
    e->classified = 0;
    free(e->path);
    e->path = NULL;
    e->cap_path = 0;
    /* publish the devices */
    gp_device_stats *devs = calloc(p->n_devices ? p->n_devices : 1, sizeof *devs);
    if (!devs)
        return -1;
    for (size_t i = 0; i < p->n_devices; i++)
        devs[i] = e->devices[i].pub;
    p->devices = devs;
    const device_state *primary = device_get(p, p->primary_device);
    p->peak_bytes = primary->pub.peak_bytes;
    p->graphs_at_peak = primary->graphs_at_peak;
    p->peak_time_ns = primary->pub.peak_time_ns;
    p->duration_ns = e->now;
    p->timeline_bucket_ns = e->bucket_width;
    return e->oom ? -1 : 0;
}

/* gp_analysis_options.without_sites: the sites' identities and flags, which only the replay reads
 * (nothing else per site was made). */
static void drop_site_ids(gp_profile *p)
{
    engine *e = p->internal;
    free(e->extra);
    e->extra = NULL;
    e->n_extra = e->cap_extra = 0;
    free(e->site_ids);
    e->site_ids = NULL;
    e->cap_site_ids = 0;
}

int gp_profile_load(const char *path, const gp_analysis_options *opts, gp_profile **out,
                    char *err, size_t err_size)
{
    return gp__profile_load_with(path, opts, NULL, NULL, out, err, err_size);
}

int gp__profile_load_with(const char *path, const gp_analysis_options *opts,
                          gp_symbolizer *symbolizer, gp_trace *trace, gp_profile **out, char *err,
                          size_t err_size)
{
    *out = NULL;
    gp_profile *p = calloc(1, sizeof *p);
    engine *e = p ? calloc(1, sizeof *e) : NULL;
    if (!e) {
        free(p);
        gp_symbolizer_free(symbolizer);
        gp_trace_close(trace);
        snprintf(err, err_size, "%s: out of memory", path);
        return -1;
    }
    p->symbolizer = symbolizer; /* owned from here on, freed with p */
    p->trace = trace;           /* likewise */
    p->internal = e;
    if (opts)
        e->opts_copy = *opts;
    else
        gp_analysis_options_default(&e->opts_copy);
    e->opts = &e->opts_copy;
    e->want_sites = !e->opts->without_sites;
    e->free_object = NONE;
    e->free_instance = NONE;
    p->primary_device = LP_DEVICE_HOST;
    p->path = own(p, path);
    if (!p->trace) {
        if (gp_trace_open(path, &p->trace, err, err_size) != 0) {
            gp_profile_free(p);
            return -1;
        }
        gp_trace_readahead(p->trace); /* the trace decodes while the replay works */
    }
    p->info = gp_trace_info_get(p->trace);
    e->cap_timeline = e->opts->timeline_points < 16 ? 16 : e->opts->timeline_points;
    p->timeline = calloc(e->cap_timeline, sizeof *p->timeline);
    if (!p->symbolizer)
        p->symbolizer = gp_symbolizer_new();
    e->detectors = gp__detectors_new(e->opts->growth_threshold, &e->oom);
    if (!p->timeline || !p->symbolizer || !e->detectors) {
        snprintf(err, err_size, "%s: out of memory", path);
        gp_profile_free(p);
        return -1;
    }
    class_intern(p, (stack_class){-1, LP_CAT_OTHER, empty_label, false}); /* CLASS_NONE */
    e->bucket_width = 1000; /* 1 µs, doubling as the run gets longer */
    e->bucket_end = e->bucket_width;
    device_get(p, LP_DEVICE_HOST);
    /* One event ahead: while event i is replayed, what event i + 1 will touch is already on
     * its way into the cache (the live set's slot, the site of its stack). */
    gp_event evs[2];
    int cur = 0;
    int r = gp_trace_next(p->trace, &evs[0], err, err_size);
    bool host_seen = false;
    while (r == 1) {
        gp_event *ev = &evs[cur];
        r = gp_trace_next(p->trace, &evs[cur ^ 1], err, err_size);
        if (r == 1)
            prefetch_event(e, &evs[cur ^ 1]);
        if (!host_seen && (ev->kind == GP_EV_ALLOC || ev->kind == GP_EV_TAG)) {
            /* the primary device is the host, unless the first buffer is elsewhere and the host
             * never allocates: fixed at the end */
            host_seen = ev->device == LP_DEVICE_HOST;
        }
        on_event(p, ev);
        if (e->oom)
            break;
        cur ^= 1;
    }
    if (r < 0) {
        gp_profile_free(p);
        return -1;
    }
    if (!host_seen) {
        for (size_t i = 0; i < p->n_devices; i++)
            if (e->devices[i].pub.peak_bytes > 0) {
                p->primary_device = e->devices[i].pub.device;
                break;
            }
    }
    if (e->oom || finish(p) != 0) {
        snprintf(err, err_size, "%s: out of memory while analysing", path);
        gp_profile_free(p);
        return -1;
    }
    if (!e->want_sites)
        drop_site_ids(p);
    *out = p;
    return 0;
}

void gp_profile_free(gp_profile *p)
{
    if (!p)
        return;
    engine *e = p->internal;
    if (e) {
        free(e->objects_map.slots);
        free(e->objects);
        free(e->handles);
        free(e->tag_map.slots);
        free(e->site_map.slots);
        free(e->module_map.slots);
        free(e->saved_map.slots);
        free(e->region_map.slots);
        free(e->extra);
        free(e->site_ids);
        free(e->site_sides);
        free(e->host_sites);
        free(e->instances);
        free(e->threads);
        free(e->devices);
        gp__detectors_free(e->detectors);
        free(e->key_site_map.slots);
        free(e->key_site_bytes);
        for (size_t i = 0; i < e->n_owned; i++)
            free(e->owned_strings[i]);
        free(e->owned_strings);
        free(e->strings_map.slots);
        free(e->classes);
        free(e->class_map.slots);
        free(e->function_memo.slots);
        free(e->stack_class);
        free(e->path);
        free(e->raw_key_map.slots);
        free(e->raw_keys);
        free(e->frames);
        free(e->site_labels);
        free(e->site_keys);
        free(e->py_frame);
        free(e->scan);
        free(e);
    }
    for (size_t i = 0; i < p->n_findings; i++)
        free(p->findings[i].items);
    free(p->findings);
    free(p->devices);
    free(p->tag_keys);
    free(p->sites);
    free(p->modules);
    free(p->saved);
    free(p->regions);
    free(p->iterations);
    free(p->timeline);
    free(p->spans);
    free(p->notes);
    free(p->holders);
    gp_symbolizer_free(p->symbolizer);
    gp_trace_close(p->trace);
    free(p);
}

/* ---- symbolized sites ------------------------------------------------------------------------ */

/* An interned copy of s owned by the profile: equal strings get the same pointer, so they can
 * serve as keys like the trace's own strings. */
static const char *own(gp_profile *p, const char *s)
{
    engine *e = p->internal;
    size_t n = strlen(s);
    uint64_t h1, h2;
    gp__hash_text(s, n, &h1, &h2);
    struct gp_map_slot *found = gp__map_find(&e->strings_map, h1, h2, n);
    if (found)
        return e->owned_strings[found->v];
    char *copy = strdup(s);
    char **slot = copy ? gp__push((void **)&e->owned_strings, &e->n_owned, &e->cap_owned,
                              sizeof *slot)
                       : NULL;
    if (!slot || !gp__map_put(&e->strings_map, h1, h2, n, (uint32_t)(e->n_owned - 1))) {
        free(copy);
        return "?";
    }
    *slot = copy;
    return copy;
}

/* Registers the trace's modules the symbolizer has not seen yet. */
static void sync_modules(gp_profile *p)
{
    engine *e = p->internal;
    size_t n = gp_trace_module_count(p->trace);
    for (uint32_t id = e->symbolized_modules + 1; id <= n; id++) {
        const gp_module *m = gp_trace_module(p->trace, id);
        if (m)
            gp_symbolizer_add_module(p->symbolizer, id, m->path, m->build_id, m->base, m->size);
        if (m && !strncmp(m->path, "py:", 3))
            e->python_modules = true;
    }
    e->symbolized_modules = (uint32_t)n;
}

/* Whether a frame is allocator or profiler plumbing rather than the code that wanted memory:
 * the malloc family, libprof, the tensor library's allocator, C++ new, c10's CPU allocator
 * (c10::alloc_cpu, c10::DefaultCPUAllocator, at::detail::empty_*); any frame of libprof's own
 * modules or of the CUDA runtime, driver and CUPTI; and frames of the C library and of libc10
 * that could not be symbolized. */
static bool is_plumbing(const gp_symbol *s)
{
    static const char *const prefixes[] = {
        "malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc", "memalign",
        "valloc", "pvalloc", "reallocarray", "__libc_", "_int_", "operator new", "operator delete",
        "lp_", "lp__", "__wrap_", "tn__alloc", "tn__default_alloc", "tn__storage_new", "tn__node_",
        "tn__new_tensor", "tn__new_output", "tn_empty", "tn_zeros", "tn_full", "__GI_", "tcache",
        "sysmalloc", "c10::alloc_cpu", "c10::DefaultCPUAllocator", "at::detail::empty_"};
    const char *f = s->function;
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(f, prefixes[i], strlen(prefixes[i])))
            return true;
    const char *base = strrchr(s->module, '/');
    base = base ? base + 1 : s->module;
    static const char *const plumbing_modules[] = {"libprof_preload", "libprof_cupti",
                                                   "libcupti", "libcuda.so", "libcudart"};
    for (size_t i = 0; i < sizeof plumbing_modules / sizeof *plumbing_modules; i++)
        if (strstr(base, plumbing_modules[i]))
            return true;
    return !s->resolved && (!strncmp(base, "libc.so", 7) || !strncmp(base, "libc-", 5) ||
                            !strncmp(base, "libc10.so", 9));
}

/* Whether a symbolized frame is a Python frame (a "py:" pseudo-module, trace_format.h). */
static bool is_python(const gp_symbol *s)
{
    return s->resolved && !strncmp(s->module, "py:", 3);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Whether a Python frame's file is the library's or the profiler's rather than the program's:
 * torch's own (a path with a "/torch/" folder), gradprof's helper, pytest plugin and startup
 * hook (gradprof_torch.py, gradprof_pytest.py, the sitecustomize.py of a python/startup folder,
 * where the build tree and the installed tree keep it), and
 * Python's import machinery ("<frozen importlib...>"). A site is labelled by the innermost
 * Python frame that is none of these. */
static bool is_python_library(const gp_symbol *s)
{
    const char *file = s->file ? s->file : "";
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    return strstr(file, "/torch/") || !strncmp(file, "torch/", 6) ||
           !strcmp(base, "gradprof_torch.py") || !strcmp(base, "gradprof_pytest.py") ||
           ends_with(file, "/python/startup/sitecustomize.py") ||
           !strncmp(file, "<frozen importlib", 17);
}

/* "function (file:line)" for native frames, a C++ function by its short name
 * (gp_function_short_name); "file:line (function)" for Python frames, as Python tracebacks put
 * them. */
static const char *frame_text(const gp_symbol *s, char *buf, size_t size)
{
    if (is_python(s) && s->file) {
        const char *base = strrchr(s->file, '/');
        snprintf(buf, size, "%s:%d (%s)", base ? base + 1 : s->file, s->line, s->function);
        return buf;
    }
    char name[1024];
    const char *fn =
        s->resolved ? gp_function_short_name(s->function, name, sizeof name) : s->function;
    if (s->file && s->line > 0) {
        const char *base = strrchr(s->file, '/');
        snprintf(buf, size, "%s (%s:%d)", fn, base ? base + 1 : s->file, s->line);
    } else {
        snprintf(buf, size, "%s", fn);
    }
    return buf;
}

/* The trace's frame `frame`, symbolized on first use; NULL at an unknown id or when out of
 * memory. The caller has registered the modules (sync_modules). The array may move: a pointer
 * is good until the next call. */
static frame_info *frame_at(gp_profile *p, uint32_t frame)
{
    engine *e = p->internal;
    if (frame >= e->n_frames) {
        size_t n = e->n_frames + e->n_frames / 8 + 1024;
        if (!gp__grow_zeroed((void **)&e->frames, &e->n_frames, n > frame ? n : (size_t)frame + 1,
                             sizeof *e->frames)) {
            e->oom = true;
            return NULL;
        }
    }
    frame_info *f = &e->frames[frame];
    if (!f->symbolized) {
        uint32_t module;
        uint64_t offset;
        if (gp_trace_frame(p->trace, frame, &module, &offset) != 0)
            return NULL;
        f->sym = gp_symbolize(p->symbolizer, module, offset);
        f->plumbing = -1;
        f->symbolized = true;
    }
    return f;
}

static bool frame_plumbing(frame_info *f)
{
    if (f->plumbing < 0)
        f->plumbing = is_plumbing(f->sym);
    return f->plumbing;
}

static const char *frame_label(gp_profile *p, frame_info *f)
{
    if (!f->text) {
        char buf[4096];
        f->text = own(p, frame_text(f->sym, buf, sizeof buf));
    }
    return f->text;
}

/* The frame of stack node `id` and its parent; NULL at an unknown id or a frame that could not be
 * symbolized. */
static frame_info *stack_frame(gp_profile *p, uint32_t id, uint32_t *parent)
{
    uint32_t frame;
    if (gp_trace_stack_node(p->trace, id, &frame, parent) != 0)
        return NULL;
    frame_info *f = frame_at(p, frame);
    return f && f->sym ? f : NULL;
}

size_t gp_site_frames(gp_profile *p, uint32_t stack, const char **frames, size_t max)
{
    sync_modules(p);
    size_t n = 0;
    bool leading = true; /* plumbing is skipped only at the innermost end */
    uint32_t parent;
    for (uint32_t id = stack; id && n < max; id = parent) {
        frame_info *f = stack_frame(p, id, &parent);
        if (!f)
            break;
        if (leading && frame_plumbing(f))
            continue;
        leading = false;
        frames[n++] = frame_label(p, f);
    }
    return n;
}

size_t gp_site_program_frames(gp_profile *p, uint32_t stack, const char **frames, size_t max)
{
    sync_modules(p);
    if (!p->internal->python_modules)
        return 0;
    size_t n = 0;
    uint32_t parent;
    for (uint32_t id = stack; id && n < max; id = parent) {
        frame_info *f = stack_frame(p, id, &parent);
        if (!f)
            break;
        if (is_python(f->sym) && !is_python_library(f->sym))
            frames[n++] = frame_label(p, f);
    }
    return n;
}

/* The innermost Python frame of the program's own code on a stack (not torch's, not gradprof's:
 * is_python_library), or NULL. */
static frame_info *program_python_frame(gp_profile *p, uint32_t stack)
{
    sync_modules(p);
    if (!p->internal->python_modules) /* no Python frame anywhere: no need to walk the stack */
        return NULL;
    /* memoized per stack node: the answer of a node is its own frame's or its parent's */
    engine *e = p->internal;
    size_t n = 0;
    uint32_t parent, found = 1; /* the answer: 1 = none, k + 2 = frame k */
    for (uint32_t id = stack; id; id = parent) {
        if (id < e->n_py_frame && e->py_frame[id]) {
            found = e->py_frame[id];
            break;
        }
        uint32_t *slot = gp__push((void **)&e->path, &n, &e->cap_path, sizeof *slot);
        if (!slot) {
            e->oom = true;
            return NULL;
        }
        *slot = id;
        frame_info *f = stack_frame(p, id, &parent);
        if (!f)
            break;
        if (is_python(f->sym) && !is_python_library(f->sym)) {
            found = (uint32_t)(f - e->frames) + 2;
            break;
        }
    }
    size_t need = gp_trace_stack_count(p->trace) + 1;
    if (e->n_py_frame < need) /* memoized if there is memory for it */
        gp__grow_zeroed((void **)&e->py_frame, &e->n_py_frame, need, sizeof *e->py_frame);
    for (size_t i = 0; i < n; i++)
        if (e->path[i] < e->n_py_frame)
            e->py_frame[e->path[i]] = found;
    return found > 1 ? &e->frames[found - 2] : NULL;
}

static const gp_tag_key *site_tag(const gp_profile *p, const gp_site *s)
{
    return s->tag_key < p->n_tag_keys ? &p->tag_keys[s->tag_key] : NULL;
}

int32_t gp_site_device(const gp_profile *p, const gp_site *s)
{
    const gp_tag_key *k = site_tag(p, s);
    return k ? k->device : LP_DEVICE_HOST;
}

lp_category gp_site_category(const gp_profile *p, const gp_site *s)
{
    size_t i = (size_t)(s - p->sites);
    const engine *e = p->internal;
    return e && i < e->n_extra ? (lp_category)e->extra[i].category : LP_CAT_OTHER;
}

const char *gp_site_op(const gp_profile *p, const gp_site *s)
{
    const gp_tag_key *k = site_tag(p, s);
    return k ? k->op : "";
}

const char *gp_site_module(const gp_profile *p, const gp_site *s)
{
    const gp_tag_key *k = site_tag(p, s);
    return k ? k->module : "";
}

const char *gp_site_label(gp_profile *p, uint32_t stack)
{
    if (!stack)
        return GP_NO_STACK;
    sync_modules(p);
    frame_info *py = program_python_frame(p, stack);
    if (py)
        return frame_label(p, py);
    const char *frame;
    if (gp_site_frames(p, stack, &frame, 1) == 0)
        return GP_NO_STACK;
    return frame;
}

const char *gp__site_label_at(gp_profile *p, size_t site)
{
    engine *e = p->internal;
    if (!e->site_labels && !(e->site_labels = calloc(p->n_sites ? p->n_sites : 1,
                                                     sizeof *e->site_labels)))
        return gp_site_label(p, p->sites[site].stack);
    if (!e->site_labels[site])
        e->site_labels[site] = gp_site_label(p, p->sites[site].stack);
    return e->site_labels[site];
}

/* Site keys by what they are made of: up to 4 symbolizer-interned function names (NULL-padded)
 * and the program's Python frame (its symbol, or NULL); open addressing, grown at 3/4. */
typedef struct site_key_slot {
    const char *fn[4];
    const gp_symbol *py;
    const char *key; /* NULL = empty */
} site_key_slot;

static size_t site_key_home(const char *const fn[4], const gp_symbol *py, size_t cap)
{
    uint64_t h = gp__mix64((uint64_t)(uintptr_t)py);
    for (int i = 0; i < 4; i++)
        h = gp__mix64(h ^ (uint64_t)(uintptr_t)fn[i]);
    return h & (cap - 1);
}

/* The slot of key (fn, py) (found or where it goes); NULL when out of memory. */
static site_key_slot *site_key_find(engine *e, const char *const fn[4], const gp_symbol *py)
{
    if ((e->n_site_keys + 1) * 4 > e->cap_site_keys * 3) {
        size_t cap = e->cap_site_keys ? 2 * e->cap_site_keys : 1024;
        site_key_slot *t = calloc(cap, sizeof *t);
        if (!t)
            return NULL;
        for (size_t i = 0; i < e->cap_site_keys; i++) {
            const site_key_slot *o = &e->site_keys[i];
            if (!o->key)
                continue;
            size_t j = site_key_home(o->fn, o->py, cap);
            while (t[j].key)
                j = (j + 1) & (cap - 1);
            t[j] = *o;
        }
        free(e->site_keys);
        e->site_keys = t;
        e->cap_site_keys = cap;
    }
    size_t mask = e->cap_site_keys - 1;
    for (size_t j = site_key_home(fn, py, e->cap_site_keys);; j = (j + 1) & mask) {
        site_key_slot *s = &e->site_keys[j];
        if (!s->key || (s->py == py && !memcmp(s->fn, fn, sizeof s->fn)))
            return s;
    }
}

static void site_key_put(engine *e, site_key_slot *s, const char *const fn[4],
                         const gp_symbol *py, const char *key)
{
    memcpy(s->fn, fn, sizeof s->fn);
    s->py = py;
    s->key = key;
    e->n_site_keys++;
}

/* Appends text to the string of `used` bytes in buf[size] as snprintf(buf + used, size - used,
 * "%s", text) would, cut short and terminated within size; returns used + strlen(text). A site
 * key is made of several such pieces for each of 10^5 stacks, which snprintf parses formats for. */
static size_t put_text(char *buf, size_t size, size_t used, const char *text)
{
    size_t len = strlen(text);
    if (used < size) {
        size_t k = len < size - used - 1 ? len : size - used - 1;
        memcpy(buf + used, text, k);
        buf[used + k] = '\0';
    }
    return used + len;
}

const char *gp_site_key(gp_profile *p, uint32_t stack)
{
    if (!stack)
        return GP_NO_STACK;
    sync_modules(p);
    /* the functions of the key (interned by the symbolizer), then the key made of them once */
    const char *fn[4] = {NULL, NULL, NULL, NULL};
    size_t nf = 0;
    bool leading = true;
    uint32_t frame, parent;
    for (uint32_t id = stack; id && nf < 4; id = parent) {
        if (gp_trace_stack_node(p->trace, id, &frame, &parent) != 0)
            break;
        frame_info *f = frame_at(p, frame);
        if (!f || !f->sym || (leading && frame_plumbing(f)))
            continue;
        leading = false;
        fn[nf++] = f->sym->function;
    }
    frame_info *py = program_python_frame(p, stack);
    engine *e = p->internal;
    site_key_slot *slot = site_key_find(e, fn, py ? py->sym : NULL);
    if (slot && slot->key)
        return slot->key;
    char key[1024] = "";
    size_t used = 0, n = 0;
    for (size_t i = 0; i < nf; i++) {
        /* Unresolved frames carry an offset that is the same across runs of the same binary. */
        used = put_text(key, sizeof key, put_text(key, sizeof key, used, n ? ";" : ""), fn[i]);
        if (used >= sizeof key)
            break; /* cut short; a first frame that long alone leaves no frame kept */
        n++;
    }
    /* Python programs: the program's own line too, so that the same native path from two lines
     * is two keys (file:line is as stable across runs as a function name). */
    if (used < sizeof key && py)
        put_text(key, sizeof key, put_text(key, sizeof key, used, n++ ? ";" : ""),
                 frame_label(p, py));
    const char *k = own(p, n ? key : GP_NO_STACK);
    if (slot)
        site_key_put(e, slot, fn, py ? py->sym : NULL, k);
    return k;
}

/* ---- sorting --------------------------------------------------------------------------------- */

static uint64_t measure_of(const gp_stats *s, const char *measure)
{
    if (!strcmp(measure, "total"))
        return s->total_bytes;
    if (!strcmp(measure, "count"))
        return s->count;
    if (!strcmp(measure, "leaked"))
        return s->live_bytes;
    return s->peak_bytes;
}

typedef struct sort_item {
    uint64_t value;
    size_t index;
} sort_item;

static int sort_desc(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

static size_t *sorted(size_t n, const gp_stats *(*get)(const gp_profile *, size_t),
                      const gp_profile *p, const char *measure)
{
    sort_item *items = malloc((n ? n : 1) * sizeof *items);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!items || !order) {
        free(items);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        items[i] = (sort_item){measure_of(get(p, i), measure ? measure : "peak"), i};
    qsort(items, n, sizeof *items, sort_desc);
    for (size_t i = 0; i < n; i++)
        order[i] = items[i].index;
    free(items);
    return order;
}

static const gp_stats *site_stats(const gp_profile *p, size_t i) { return &p->sites[i].stats; }
static const gp_stats *tag_stats(const gp_profile *p, size_t i) { return &p->tag_keys[i].stats; }

int gp_natural_cmp(const char *a, const char *b)
{
    const char *a0 = a, *b0 = b;
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            while (a[0] == '0' && a[1] >= '0' && a[1] <= '9')
                a++;
            while (b[0] == '0' && b[1] >= '0' && b[1] <= '9')
                b++;
            size_t la = strspn(a, "0123456789"), lb = strspn(b, "0123456789");
            if (la != lb)
                return la < lb ? -1 : 1;
            int c = memcmp(a, b, la);
            if (c)
                return c;
            a += la;
            b += lb;
        } else if (*a != *b) {
            return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        } else {
            a++;
            b++;
        }
    }
    if (*a || *b)
        return *a ? 1 : -1;
    return strcmp(a0, b0);
}

size_t *gp_sites_by(const gp_profile *p, const char *measure)
{
    return sorted(p->n_sites, site_stats, p, measure);
}

size_t *gp_tag_keys_by(const gp_profile *p, const char *measure)
{
    return sorted(p->n_tag_keys, tag_stats, p, measure);
}

/* ---- labels that tell sites apart ------------------------------------------------------------ */

/* Number of leading ';'-separated frames two site keys share. */
static size_t common_frames(const char *a, const char *b)
{
    size_t n = 0;
    for (;;) {
        size_t la = strcspn(a, ";"), lb = strcspn(b, ";");
        if (la != lb || memcmp(a, b, la) != 0)
            return n;
        n++;
        if (!a[la] || !b[lb])
            return n;
        a += la + 1;
        b += lb + 1;
    }
}

/* A row whose label other rows share: its label's text as a number (the same for equal texts,
 * as own() tells them: by two hashes and the length), its key, its index. */
typedef struct label_ref {
    uint32_t label;
    const char *key;
    size_t i;
} label_ref;

/* Keys frame by frame: ';' before any other byte, so that a key comes right before the keys
 * that extend it ("f;main" < "f;main;start" < "f (x);main", where strcmp puts ' ' first). */
static int key_cmp(const char *a, const char *b)
{
    for (;; a++, b++) {
        int ca = *a == ';' ? 1 : (unsigned char)*a, cb = *b == ';' ? 1 : (unsigned char)*b;
        if (ca != cb || !ca)
            return ca - cb;
    }
}

static int by_label_then_key(const void *pa, const void *pb)
{
    const label_ref *a = pa, *b = pb;
    if (a->label != b->label)
        return a->label < b->label ? -1 : 1;
    return key_cmp(a->key, b->key);
}

/* Frame n of key (its first is 0) and its length; NULL and 0 past the end. */
static const char *key_frame(const char *key, size_t n, size_t *len)
{
    for (size_t k = 0; k < n && key; k++) {
        key = strchr(key, ';');
        key = key ? key + 1 : NULL;
    }
    *len = key ? strcspn(key, ";") : 0;
    return key;
}

/* How a label's "via" frame is shown: the first form in which it reads apart from its
 * neighbours'. */
enum frame_form {
    FORM_SHORT,     /* gp_function_short_name */
    FORM_SIGNATURE, /* gp_function_signature: two overloads */
    FORM_FULL,      /* as symbolized: two instances of one template */
};

/* The frame f (len bytes, no NUL) in `form`, in buf (2 * size bytes); NULL for a frame of size
 * bytes or more. */
static const char *frame_in(const char *f, size_t len, enum frame_form form, char *buf, size_t size)
{
    if (len >= size)
        return NULL;
    memcpy(buf, f, len);
    buf[len] = '\0';
    if (form == FORM_SHORT)
        return gp_function_short_name(buf, buf + size, size);
    return form == FORM_SIGNATURE ? gp_function_signature(buf, buf + size, size) : buf;
}

/* Whether frame n of keys a and b, which differ there, reads the same in `form`. */
static bool same_frame_in(const char *a, const char *b, size_t n, enum frame_form form)
{
    size_t la, lb;
    const char *fa = key_frame(a, n, &la), *fb = key_frame(b, n, &lb);
    char ba[2048], bb[2048];
    const char *sa = fa ? frame_in(fa, la, form, ba, sizeof ba / 2) : NULL;
    const char *sb = fb ? frame_in(fb, lb, form, bb, sizeof bb / 2) : NULL;
    return sa && sb && !strcmp(sa, sb);
}

/* "LABEL via F" (F frame lcp of key, in `form`; as symbolized when too long for it) or "LABEL
 * (outermost)" when key has no frame there. */
static char *label_via(const char *label, const char *key, size_t lcp, enum frame_form form)
{
    size_t flen, llen = strlen(label);
    const char *f = key_frame(key, lcp, &flen), *shown;
    char buf[2048];
    if (flen && form != FORM_FULL && (shown = frame_in(f, flen, form, buf, sizeof buf / 2))) {
        f = shown;
        flen = strlen(f);
    }
    static const char via[] = " via ", outermost[] = " (outermost)";
    char *s = malloc(llen + (flen ? sizeof via - 1 + flen : sizeof outermost - 1) + 1);
    if (!s)
        return NULL;
    memcpy(s, label, llen);
    if (flen) {
        memcpy(s + llen, via, sizeof via - 1);
        memcpy(s + llen + sizeof via - 1, f, flen);
        s[llen + sizeof via - 1 + flen] = '\0';
    } else {
        memcpy(s + llen, outermost, sizeof outermost);
    }
    return s;
}

/* The rows whose label another row shares, into by[] (most rows of a table have a label of
 * their own); their number, or -1 when out of memory. */
static ptrdiff_t labels_shared(const char *const *labels, const char *const *keys, size_t n,
                               label_ref *by)
{
    gp_map texts = {0}; /* a label's text (two hashes, length) -> its number */
    uint32_t *text_of = malloc(n * sizeof *text_of), *rows = calloc(n, sizeof *rows);
    ptrdiff_t m = -1;
    if (!text_of || !rows || !gp__map_reserve(&texts, n))
        goto out;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(labels[i]);
        uint64_t h1, h2;
        gp__hash_text(labels[i], len, &h1, &h2);
        struct gp_map_slot *t = gp__map_find(&texts, h1, h2, len);
        text_of[i] = t ? t->v : (uint32_t)texts.len;
        if (!t && !gp__map_put(&texts, h1, h2, len, text_of[i]))
            goto out;
        rows[text_of[i]]++;
    }
    m = 0;
    for (size_t i = 0; i < n; i++)
        if (rows[text_of[i]] > 1)
            by[m++] = (label_ref){text_of[i], keys[i], i};
out:
    gp__map_free(&texts);
    free(text_of);
    free(rows);
    return m;
}

/* Sorted by (label, key), rows with one label and key form a run, and the longest prefix a key
 * shares with another key of its label is the one it shares with the run just before or after. */
int gp_labels_distinct(const char *const *labels, const char *const *keys, size_t n, char **out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    if (n < 2)
        return 0;
    label_ref *by = malloc(n * sizeof *by);
    ptrdiff_t shared = by ? labels_shared(labels, keys, n, by) : -1;
    if (shared < 0) {
        free(by);
        return -1;
    }
    size_t m = (size_t)shared;
    qsort(by, m, sizeof *by, by_label_then_key);
    int rc = 0;
    for (size_t a = 0, b; a < m && rc == 0; a = b) {
        for (b = a + 1; b < m && by_label_then_key(&by[a], &by[b]) == 0; b++)
            ;
        bool before = a > 0 && by[a - 1].label == by[a].label;
        bool after = b < m && by[b].label == by[a].label;
        if (!before && !after)
            continue; /* the only key with its label */
        size_t lcp_before = before ? common_frames(by[a - 1].key, by[a].key) : 0;
        size_t lcp_after = after ? common_frames(by[b].key, by[a].key) : 0;
        size_t lcp = lcp_before > lcp_after ? lcp_before : lcp_after;
        /* the frame where the key parts, in the first form that is not the neighbour's too */
        enum frame_form form = FORM_SHORT;
        while (
            form != FORM_FULL &&
            ((before && lcp_before == lcp && same_frame_in(by[a - 1].key, by[a].key, lcp, form)) ||
             (after && lcp_after == lcp && same_frame_in(by[b].key, by[a].key, lcp, form))))
            form++;
        for (size_t i = a; i < b && rc == 0; i++)
            if (!(out[by[i].i] = label_via(labels[by[i].i], by[i].key, lcp, form)))
                rc = -1;
    }
    free(by);
    if (rc != 0)
        for (size_t i = 0; i < n; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    return rc;
}
