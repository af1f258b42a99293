/*
 * libprof in-process API: live/peak counters per category and device, regions, marks, and the
 * listener that receives every event. Counters are relaxed atomics: a reader sees each counter
 * exactly, but a snapshot of several is not taken at one instant.
 */
#include "gradprof/libprof.h"
#include "recorder.h"

#include <stdatomic.h>
#include <stdio.h>

#define LP__NDEVICES (1 + LP_MAX_CUDA_DEVICES)

typedef struct lp__device_counters {
    _Atomic int64_t live[LP_CAT_COUNT];
    _Atomic int64_t peak[LP_CAT_COUNT];
    _Atomic int64_t live_total;
    _Atomic int64_t peak_total;
} lp__device_counters;

static lp__device_counters lp__counters[LP__NDEVICES];

/* The listener and its data are read as one pair; replaced rarely (see lp_set_listener). */
typedef struct lp__listener {
    lp_listener_fn fn;
    void *user_data;
} lp__listener;
static lp__listener lp__listeners[2];
static _Atomic(lp__listener *) lp__active_listener;

static _Thread_local int lp__region_depth;

static lp__device_counters *lp__device(lp_device device)
{
    int index = device == LP_DEVICE_HOST ? 0 : (int)device + 1;
    if (index < 0 || index >= LP__NDEVICES)
        return NULL;
    return &lp__counters[index];
}

static void lp__raise_peak(_Atomic int64_t *peak, int64_t value)
{
    int64_t seen = atomic_load_explicit(peak, memory_order_relaxed);
    while (value > seen &&
           !atomic_compare_exchange_weak_explicit(peak, &seen, value, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
}

/* Moves `delta` bytes into (or out of) one category; `with_total` also moves the device total. */
static void lp__count(lp_device device, lp_category category, int64_t delta, bool with_total)
{
    lp__device_counters *d = lp__device(device);
    if (!d || (unsigned)category >= LP_CAT_COUNT)
        return;
    int64_t live = atomic_fetch_add_explicit(&d->live[category], delta, memory_order_relaxed);
    if (delta > 0)
        lp__raise_peak(&d->peak[category], live + delta);
    if (with_total) {
        int64_t total = atomic_fetch_add_explicit(&d->live_total, delta, memory_order_relaxed);
        if (delta > 0)
            lp__raise_peak(&d->peak_total, total + delta);
    }
}

static void lp__emit(const lp_event *ev)
{
    lp__listener *l = atomic_load_explicit(&lp__active_listener, memory_order_acquire);
    if (l)
        l->fn(ev, l->user_data);
}

void lp_alloc(const void *addr, size_t bytes, lp_device device, const lp_tag *tag)
{
    lp__count(device, tag->category, (int64_t)bytes, true);
    lp_event ev = {.kind = LP_EV_ALLOC, .addr = addr, .bytes = bytes, .device = device,
                   .from_category = tag->category, .tag = tag};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_tag(addr, bytes, device, tag, true);
        lp__guard_exit();
    }
}

void lp_free(const void *addr, size_t bytes, lp_device device, lp_category category)
{
    lp__count(device, category, -(int64_t)bytes, true);
    lp_event ev = {.kind = LP_EV_FREE, .addr = addr, .bytes = bytes, .device = device,
                   .from_category = category};
    lp__emit(&ev);
    /* Under an interposer the raw free that follows records it. */
    if (lp__recording() && !lp__interposed() && lp__guard_enter()) {
        lp__record_free(addr, device);
        lp__guard_exit();
    }
}

void lp_retag(const void *addr, size_t bytes, lp_device device, lp_category from, const lp_tag *to)
{
    if (from != to->category) { /* the total is unchanged */
        lp__count(device, to->category, (int64_t)bytes, false);
        lp__count(device, from, -(int64_t)bytes, false);
    }
    lp_event ev = {.kind = LP_EV_RETAG, .addr = addr, .bytes = bytes, .device = device,
                   .from_category = from, .tag = to};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_tag(addr, bytes, device, to, false);
        lp__guard_exit();
    }
}

static void region_push(const char *name, bool module)
{
    lp__region_depth++;
    lp_event ev = {
        .kind = LP_EV_REGION_PUSH, .device = LP_DEVICE_HOST, .name = name, .module_region = module};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_region_push(name, module);
        lp__guard_exit();
    }
}

void lp_region_push(const char *name)
{
    region_push(name, false);
}

void lp_module_push(const char *path)
{
    region_push(path, true);
}

void lp_region_pop(void)
{
    if (lp__region_depth == 0) {
        static atomic_bool warned;
        if (!atomic_exchange(&warned, true))
            fprintf(stderr, "libprof: lp_region_pop without a matching push (ignored)\n");
        return;
    }
    lp__region_depth--;
    lp_event ev = {.kind = LP_EV_REGION_POP, .device = LP_DEVICE_HOST};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_region_pop();
        lp__guard_exit();
    }
}

void lp_mark(const char *label)
{
    lp_event ev = {.kind = LP_EV_MARK, .device = LP_DEVICE_HOST, .name = label};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_mark(label);
        lp__guard_exit();
    }
}

void lp_note(const char *key, const char *value)
{
    lp_event ev = {.kind = LP_EV_NOTE, .device = LP_DEVICE_HOST, .name = key ? key : "",
                   .value = value ? value : ""};
    lp__emit(&ev);
    if (lp__recording() && lp__guard_enter()) {
        lp__record_note(ev.name, ev.value);
        lp__guard_exit();
    }
}

int lp_counters_get(lp_device device, lp_counters *out)
{
    lp__device_counters *d = lp__device(device);
    if (!d || !out)
        return -1;
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        out->live[c] = atomic_load_explicit(&d->live[c], memory_order_relaxed);
        out->peak[c] = atomic_load_explicit(&d->peak[c], memory_order_relaxed);
    }
    out->live_total = atomic_load_explicit(&d->live_total, memory_order_relaxed);
    out->peak_total = atomic_load_explicit(&d->peak_total, memory_order_relaxed);
    return 0;
}

void lp_counters_reset_peak(void)
{
    for (int i = 0; i < LP__NDEVICES; i++) {
        lp__device_counters *d = &lp__counters[i];
        for (int c = 0; c < LP_CAT_COUNT; c++)
            atomic_store_explicit(&d->peak[c],
                                  atomic_load_explicit(&d->live[c], memory_order_relaxed),
                                  memory_order_relaxed);
        atomic_store_explicit(&d->peak_total,
                              atomic_load_explicit(&d->live_total, memory_order_relaxed),
                              memory_order_relaxed);
    }
}

void lp_set_listener(lp_listener_fn fn, void *user_data)
{
    /* Alternate between two slots so a reader on another thread never sees a half-written pair. */
    static int slot;
    if (!fn) {
        atomic_store_explicit(&lp__active_listener, NULL, memory_order_release);
        return;
    }
    slot ^= 1;
    lp__listeners[slot] = (lp__listener){fn, user_data};
    atomic_store_explicit(&lp__active_listener, &lp__listeners[slot], memory_order_release);
}
