/*
 * gp_samples (samples.h): heap-profile samples collected by a replay observer.
 *
 * Live at the peak, in one pass, as the engine does it (analysis.c): each device's epoch advances
 * when it reaches a new peak, and a sample copies its live counts into inuse_* the next time it
 * changes (or at the end) if it has not done so since that epoch, so a sample that did not change
 * since the peak still holds what it had at the peak. The engine also re-takes the peak when the
 * buffer that reached it gets its first tag right away (an interposed buffer is born raw and
 * tagged in the next event); the observer is not told, so this file does the same test itself:
 * a first tag of the peak's buffer while the device's live bytes still equal the peak.
 *
 * The grad mode: every ALLOC and TAG event of the trace gives the observer exactly one alloc or
 * retag call, in order. So a pass over the trace before the replay notes, for the n-th ALLOC or
 * TAG event, its thread and grad mode (a TAG's own flag; for an ALLOC, its thread's mode from the
 * GRAD_MODE records before it), and the n-th call takes the n-th note (8 bytes per event; the
 * pass's reader is closed before the replay opens its own, so the two never hold memory at once).
 * Should a call ever not match its note (another thread), grad modes are given up: "" for every
 * sample.
 */
#include "samples.h"
#include "array.h"
#include "hashmap.h"

#include <stdio.h>
#include <string.h>

#define N_DEVICES (LP_MAX_CUDA_DEVICES + 1)

typedef struct sample_state {
    uint64_t live_objects, live_space;
    uint64_t epoch;
} sample_state;

typedef struct device_state {
    uint64_t epoch, live, peak, peak_seq;
} device_state;

struct gp__samples_state {
    gp_map keys; /* (stack | device << 32, op, module | category << 48 | grad << 56) -> index */
    gp_map live; /* buffer seq -> sample index */
    sample_state *st; /* parallel to the samples */
    size_t cap, st_cap;
    device_state dev[N_DEVICES];
    uint32_t *notes; /* per ALLOC/TAG event in order: thread << 1 | grad on */
    size_t n_notes, next_note;
    bool grad_known;
    bool oom;
};

static device_state *dev_of(struct gp__samples_state *s, int32_t device)
{
    int i = device == LP_DEVICE_HOST ? 0 : device + 1;
    return &s->dev[i >= 0 && i < N_DEVICES ? i : 0];
}

/* Brings sample i's inuse_* up to date before it changes. */
static void sync(gp_samples *ss, size_t i)
{
    struct gp__samples_state *s = ss->state;
    const device_state *d = dev_of(s, ss->items[i].device);
    if (s->st[i].epoch != d->epoch) {
        ss->items[i].inuse_objects = s->st[i].live_objects;
        ss->items[i].inuse_space = s->st[i].live_space;
        s->st[i].epoch = d->epoch;
    }
}

/* The grad mode of the event being replayed: the next note. */
static const char *grad_of(struct gp__samples_state *s, const gp_buffer_event *b)
{
    if (!s->grad_known)
        return "";
    if (s->next_note >= s->n_notes || s->notes[s->next_note] >> 1 != b->thread) {
        s->grad_known = false; /* out of step: give up */
        return "";
    }
    return s->notes[s->next_note++] & 1 ? "on" : "off";
}

/* The pass before the replay: the notes of every ALLOC and TAG event. false when the trace
 * cannot be read or memory runs out (then grad modes are not known). */
static bool grad_pass(struct gp__samples_state *s, const char *path)
{
    gp_trace *t = NULL;
    char err[256];
    if (gp_trace_open(path, &t, err, sizeof err) != 0)
        return false;
    bool *off = NULL; /* per thread: grad disabled now */
    size_t n_threads = 0, cap = 0;
    bool ok = true;
    gp_event ev;
    while (ok && gp_trace_next(t, &ev, err, sizeof err) == 1) {
        if (ev.thread >= n_threads) {
            size_t n = (size_t)ev.thread + 64;
            bool *more = realloc(off, n * sizeof *more);
            if (!(ok = more != NULL && ev.thread < (1u << 31)))
                break;
            memset(more + n_threads, 0, (n - n_threads) * sizeof *more);
            off = more;
            n_threads = n;
        }
        if (ev.kind == GP_EV_GRAD_MODE) {
            off[ev.thread] = !ev.grad_enabled;
        } else if (ev.kind == GP_EV_ALLOC || ev.kind == GP_EV_TAG) {
            bool on = ev.kind == GP_EV_TAG ? ev.grad_enabled : !off[ev.thread];
            uint32_t *note = gp__push((void **)&s->notes, &s->n_notes, &cap, sizeof *note);
            if (!(ok = note != NULL))
                break;
            *note = ev.thread << 1 | (on ? 1u : 0u);
        }
    }
    free(off);
    gp_trace_close(t);
    return ok;
}

/* The index of the sample of this key, made if new; SIZE_MAX when out of memory. */
static size_t sample_get(gp_samples *ss, const gp_buffer_event *b, const char *grad)
{
    struct gp__samples_state *s = ss->state;
    uint64_t g = grad[0] == 'o' ? (grad[1] == 'n' ? 1 : 2) : 0;
    uint64_t k1 = (uint64_t)b->stack | (uint64_t)(uint32_t)b->device << 32;
    uint64_t k2 = (uint64_t)(uintptr_t)b->op;
    uint64_t k3 = (uint64_t)(uintptr_t)b->module | (uint64_t)b->category << 48 | g << 56;
    struct gp_map_slot *slot = gp__map_find(&s->keys, k1, k2, k3);
    if (slot)
        return slot->v;
    size_t n_items = ss->n, n_st = ss->n;
    gp_sample *it = gp__push((void **)&ss->items, &n_items, &s->cap, sizeof *it);
    sample_state *st = it ? gp__push((void **)&s->st, &n_st, &s->st_cap, sizeof *st) : NULL;
    if (!it || !st || !gp__map_put(&s->keys, k1, k2, k3, (uint32_t)ss->n)) {
        s->oom = true;
        return SIZE_MAX;
    }
    *it = (gp_sample){.stack = b->stack,
                      .device = b->device,
                      .category = b->category,
                      .op = b->op,
                      .module = b->module,
                      .grad = grad};
    st->epoch = dev_of(s, b->device)->epoch;
    return ss->n++;
}

static void enter(gp_samples *ss, size_t i, uint64_t size, bool count)
{
    sync(ss, i);
    ss->state->st[i].live_objects++;
    ss->state->st[i].live_space += size;
    if (count) {
        ss->items[i].alloc_objects++;
        ss->items[i].alloc_space += size;
    }
}

static void leave(gp_samples *ss, size_t i, uint64_t size, bool uncount)
{
    sync(ss, i);
    ss->state->st[i].live_objects--;
    ss->state->st[i].live_space -= size;
    if (uncount) {
        ss->items[i].alloc_objects--;
        ss->items[i].alloc_space -= size;
    }
}

static void on_alloc(void *ctx, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    gp_samples *ss = ctx;
    struct gp__samples_state *s = ss->state;
    size_t i = sample_get(ss, b, grad_of(s, b));
    if (i == SIZE_MAX)
        return;
    enter(ss, i, b->size, true);
    dev_of(s, b->device)->live += b->size;
    if (!gp__map_put(&s->live, b->seq, 0, 0, (uint32_t)i))
        s->oom = true;
}

static void on_retag(void *ctx, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    gp_samples *ss = ctx;
    struct gp__samples_state *s = ss->state;
    const char *grad = grad_of(s, b);
    struct gp_map_slot *slot = gp__map_find(&s->live, b->seq, 0, 0);
    if (!slot)
        return;
    size_t from = slot->v, to = sample_get(ss, b, grad); /* (changes keys, not live) */
    if (to == SIZE_MAX)
        return;
    leave(ss, from, b->size, b->first_tag); /* a first tag: as if never counted raw */
    enter(ss, to, b->size, b->first_tag);
    slot->v = (uint32_t)to;
    device_state *d = dev_of(s, b->device);
    if (b->first_tag && d->live == d->peak && d->peak_seq == b->seq)
        d->epoch++; /* the engine re-takes the peak with this buffer's tag applied */
}

static void on_free(void *ctx, gp_profile *p, const gp_buffer_event *b)
{
    (void)p;
    gp_samples *ss = ctx;
    struct gp__samples_state *s = ss->state;
    struct gp_map_slot *slot = gp__map_find(&s->live, b->seq, 0, 0);
    if (!slot)
        return;
    leave(ss, slot->v, b->size, false);
    dev_of(s, b->device)->live -= b->size;
    gp__map_remove(&s->live, slot);
}

static void on_peak(void *ctx, gp_profile *p, int32_t device, uint64_t seq)
{
    (void)p;
    gp_samples *ss = ctx;
    device_state *d = dev_of(ss->state, device);
    d->epoch++;
    d->peak = d->live;
    d->peak_seq = seq;
}

int gp_samples_load(const char *path, const gp_analysis_options *opts, gp_profile **p,
                    gp_samples **out, char *err, size_t err_size)
{
    *p = NULL;
    *out = NULL;
    gp_samples *ss = calloc(1, sizeof *ss);
    if (ss)
        ss->state = calloc(1, sizeof *ss->state);
    if (!ss || !ss->state) {
        gp_samples_free(ss);
        snprintf(err, err_size, "%s: out of memory", path);
        return -1;
    }
    struct gp__samples_state *s = ss->state;
    s->grad_known = grad_pass(s, path);
    if (!s->grad_known) { /* the replay says why the trace cannot be read, if it cannot */
        free(s->notes);
        s->notes = NULL;
        s->n_notes = 0;
    }
    gp_replay_observer obs = {
        .ctx = ss, .alloc = on_alloc, .retag = on_retag, .free = on_free, .peak = on_peak};
    gp_analysis_options o;
    if (opts)
        o = *opts;
    else
        gp_analysis_options_default(&o);
    o.observer = &obs;
    if (gp_profile_load(path, &o, p, err, err_size) != 0) {
        gp_samples_free(ss);
        return -1;
    }
    for (size_t i = 0; i < ss->n; i++) {
        sync(ss, i);
        if (!s->grad_known)
            ss->items[i].grad = "";
    }
    if (s->grad_known && s->next_note != s->n_notes) /* calls and notes did not pair up */
        for (size_t i = 0; i < ss->n; i++)
            ss->items[i].grad = "";
    free(s->notes);
    s->notes = NULL;
    if (s->oom) {
        gp_profile_free(*p);
        *p = NULL;
        gp_samples_free(ss);
        snprintf(err, err_size, "%s: out of memory collecting the samples", path);
        return -1;
    }
    *out = ss;
    return 0;
}

void gp_samples_free(gp_samples *ss)
{
    if (!ss)
        return;
    if (ss->state) {
        gp__map_free(&ss->state->keys);
        gp__map_free(&ss->state->live);
        free(ss->state->notes);
        free(ss->state->st);
        free(ss->state);
    }
    free(ss->items);
    free(ss);
}

size_t gp_stack_symbols(gp_profile *p, uint32_t stack, const gp_symbol **syms, uint32_t *modules,
                        uint64_t *offsets, size_t max)
{
    enum { DEPTH = 1024 };
    const char *labels[DEPTH];
    uint32_t mod[DEPTH];
    uint64_t off[DEPTH];
    if (!stack)
        return 0;
    /* gp_site_frames registers the modules with the symbolizer and skips the innermost plumbing
     * (allocator, libprof): what it kept are the outermost frames of the chain. */
    size_t kept = gp_site_frames(p, stack, labels, DEPTH);
    size_t depth = 0;
    uint32_t parent;
    for (uint32_t id = stack; id && depth < DEPTH; id = parent)
        if (gp_trace_stack_frame(p->trace, id, &mod[depth], &off[depth], &parent) != 0)
            break;
        else
            depth++;
    if (kept > depth)
        kept = depth;
    size_t n = 0;
    for (size_t i = depth - kept; i < depth && n < max; i++) {
        const gp_symbol *sym = gp_symbolize(p->symbolizer, mod[i], off[i]);
        if (!sym)
            break;
        syms[n] = sym;
        if (modules)
            modules[n] = mod[i];
        if (offsets)
            offsets[n] = off[i];
        n++;
    }
    return n;
}
