/*
 * The tagged allocator: every buffer the tensor library owns is made and freed here and reported to
 * libprof with its category, op, module path and grad mode; below it, the default allocator and its
 * buffer cache.
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "tensor_internal.h"

#define TN__ALIGN 64
#define TN__HUGE_PAGE ((size_t)2 << 20)

/* Offers the whole 2 MiB pages inside [p, p + bytes) to the kernel as transparent huge pages
 * (MADV_HUGEPAGE: one fault per 2 MiB instead of 512 where THP is `always` or `madvise`; a
 * refusal, as without THP, changes nothing and leaves errno as it was). */
static void tn__offer_huge_pages(void *p, size_t bytes)
{
    uintptr_t lo = ((uintptr_t)p + TN__HUGE_PAGE - 1) & ~(uintptr_t)(TN__HUGE_PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + bytes) & ~(uintptr_t)(TN__HUGE_PAGE - 1);
    if (hi <= lo)
        return;
    int saved_errno = errno;
    madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    errno = saved_errno;
}

/* Bytes in blocks glibc has mapped on their own (mallinfo2's hblkhd); 0 where that is unknown. */
static size_t tn__mapped_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    return mallinfo2().hblkhd;
#else
    return 0;
#endif
}

/* Whether buffers of 2 MiB or more are still 2 MiB-aligned (see tn__default_alloc). */
static _Atomic bool tn__align_big = true;

/*
 * 64-byte aligned; the whole 2 MiB pages inside a buffer of 2 MiB or more are offered as huge
 * pages. Such a buffer is also aligned to 2 MiB, so that all its pages are huge, for as long as
 * glibc maps each of them on its own: a small C program's glibc unmaps them when they are freed,
 * and each step of a loop makes them anew (bench/tensor_bench mlp train: 9,100 page faults a step
 * -> 25). From the first aligned buffer glibc serves from its heap instead on (its dynamic mmap
 * threshold has risen above it, or the program set one), they are 64-byte aligned: carving
 * aligned blocks out of the heap fragments it, and the resident set grows by the gaps (cnn train
 * with every big buffer aligned: 28 -> 66 MiB peak RSS; 29 -> 140 MiB with a 32 MiB threshold).
 * The two are told apart by mallinfo2's mapped bytes around the call (a big buffer costs far more
 * than that walk of glibc's free lists; another thread's munmap in between may end the alignment
 * early, which costs speed only). Where they are unknown, as under another malloc, nothing is
 * aligned beyond 64 bytes.
 */
static void *tn__default_alloc(size_t bytes, void *ctx)
{
    void *p = NULL;
    bool big = bytes >= TN__HUGE_PAGE;
    bool align = big && atomic_load_explicit(&tn__align_big, memory_order_relaxed);
    size_t mapped_before = align ? tn__mapped_bytes() : 0;
    if (posix_memalign(&p, align ? TN__HUGE_PAGE : TN__ALIGN, bytes ? bytes : 1) != 0)
        return NULL;
    if (align && tn__mapped_bytes() < mapped_before + bytes)
        atomic_store_explicit(&tn__align_big, false, memory_order_relaxed);
    if (big)
        tn__offer_huge_pages(p, bytes);
    return p;
}

static void tn__default_free(void *ptr, void *ctx) { free(ptr); }

static tn_allocator tn__allocator = {tn__default_alloc, tn__default_free, NULL};

/* ---- The buffer cache ---------------------------------------------------------------------- */

/*
 * A buffer of TN__CACHE_MIN bytes or more that a step made (not a parameter or optimizer state)
 * and that goes while gradprof is not recording is kept for the next request of exactly its size
 * instead of going back to malloc, as inference runtimes keep an arena: the next step of a loop
 * reuses the pages the last one faulted in, where glibc would have trimmed its heap or unmapped the
 * block and the step would fault them in again. Only the default allocator's buffers are kept (a
 * replaced allocator sees every request). The idle bytes are bounded by the limit, by default the
 * peak of the bytes of its buffers in use (so they at most double the tensors' peak); past it the
 * least recently freed go back to malloc. While gradprof records, the cache is emptied and
 * bypassed: a trace shows every buffer made and freed by malloc with its tensor, as without a
 * cache.
 *
 * An idle buffer holds its own links. Each size has a list of its idle buffers, newest first, in
 * an open-addressed table of sizes; one list orders all of them by age. One lock guards it all.
 */
#define TN__CACHE_MIN ((size_t)256)

typedef struct tn__idle {
    struct tn__idle *next_same, *prev_same; /* this size's list, newest first */
    struct tn__idle *newer, *older;         /* every idle buffer, by age */
    size_t bytes;
} tn__idle;

_Static_assert(TN__CACHE_MIN >= sizeof(tn__idle), "an idle buffer holds its own links");

typedef struct tn__size_slot {
    size_t bytes; /* 0: empty */
    tn__idle *newest;
} tn__size_slot;

static struct {
    pthread_mutex_t lock;
    tn__size_slot *slots; /* a power of two of them, at most half used */
    size_t capacity, used;
    tn__idle *newest, *oldest;
    size_t idle_bytes;
    size_t busy_bytes, busy_peak; /* the default allocator's buffers in use */
    size_t limit;                 /* TN_CACHE_LIMIT_PEAK: busy_peak */
} tn__cache = {.lock = PTHREAD_MUTEX_INITIALIZER, .limit = TN_CACHE_LIMIT_PEAK};

/* A fork while another thread holds the lock would leave it held in the child for good: the
 * forking thread takes it first and both sides let it go. */
static void tn__cache_lock(void) { pthread_mutex_lock(&tn__cache.lock); }
static void tn__cache_unlock(void) { pthread_mutex_unlock(&tn__cache.lock); }
__attribute__((constructor)) static void tn__cache_at_fork(void)
{
    pthread_atfork(tn__cache_lock, tn__cache_unlock, tn__cache_unlock);
}

/* The slot of `bytes` in `slots`: its own, or the empty one where it would go. */
static tn__size_slot *tn__slot_find(tn__size_slot *slots, size_t capacity, size_t bytes)
{
    size_t i = (size_t)(bytes * 0x9E3779B97F4A7C15ull >> 32) & (capacity - 1);
    while (slots[i].bytes && slots[i].bytes != bytes)
        i = (i + 1) & (capacity - 1);
    return &slots[i];
}

/* The slot for `bytes`, made if new; NULL if the table cannot grow. A rebuilt table keeps only the
 * sizes that have idle buffers, so it follows the sizes in the cache, not every size ever freed. */
static tn__size_slot *tn__slot_for(size_t bytes)
{
    if (tn__cache.slots) {
        tn__size_slot *s = tn__slot_find(tn__cache.slots, tn__cache.capacity, bytes);
        if (s->bytes || 2 * (tn__cache.used + 1) <= tn__cache.capacity) {
            tn__cache.used += !s->bytes;
            s->bytes = bytes;
            return s;
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < tn__cache.capacity; i++)
        kept += tn__cache.slots[i].newest != NULL;
    size_t capacity = 64;
    while (capacity < 4 * (kept + 1))
        capacity *= 2;
    tn__size_slot *slots = calloc(capacity, sizeof *slots);
    if (!slots)
        return NULL;
    for (size_t i = 0; i < tn__cache.capacity; i++)
        if (tn__cache.slots[i].newest)
            *tn__slot_find(slots, capacity, tn__cache.slots[i].bytes) = tn__cache.slots[i];
    free(tn__cache.slots);
    tn__cache.slots = slots;
    tn__cache.capacity = capacity;
    tn__cache.used = kept + 1;
    tn__size_slot *s = tn__slot_find(slots, capacity, bytes);
    s->bytes = bytes;
    return s;
}

/* Takes an idle buffer out of the cache. Caller holds the lock. */
static void tn__idle_unlink(tn__idle *b)
{
    if (b->prev_same)
        b->prev_same->next_same = b->next_same;
    else
        tn__slot_find(tn__cache.slots, tn__cache.capacity, b->bytes)->newest = b->next_same;
    if (b->next_same)
        b->next_same->prev_same = b->prev_same;
    *(b->newer ? &b->newer->older : &tn__cache.newest) = b->older;
    *(b->older ? &b->older->newer : &tn__cache.oldest) = b->newer;
    tn__cache.idle_bytes -= b->bytes;
}

/* Gives the oldest idle buffers back to malloc until at most `keep` bytes are idle. Caller holds
 * the lock. */
static void tn__cache_trim(size_t keep)
{
    while (tn__cache.idle_bytes > keep) {
        tn__idle *b = tn__cache.oldest;
        tn__idle_unlink(b);
        free(b);
    }
}

/* Counts a buffer of `bytes` as in use and returns an idle one of that size, or NULL (the caller
 * makes it; none idle, or gradprof records, which empties the cache). */
static void *tn__cache_take(size_t bytes)
{
    tn__idle *b = NULL;
    tn__cache_lock();
    tn__cache.busy_bytes += bytes;
    if (tn__cache.busy_bytes > tn__cache.busy_peak)
        tn__cache.busy_peak = tn__cache.busy_bytes;
    if (lp_is_recording()) {
        tn__cache_trim(0);
    } else if (tn__cache.idle_bytes) {
        b = tn__slot_find(tn__cache.slots, tn__cache.capacity, bytes)->newest;
        if (b)
            tn__idle_unlink(b);
    }
    tn__cache_unlock();
    return b;
}

/* Counts a buffer of `bytes` as no longer in use, and keeps it if `wanted` and the cache may;
 * false if the caller must free it. */
static bool tn__cache_keep(void *p, size_t bytes, bool wanted)
{
    tn__cache_lock();
    tn__cache.busy_bytes -= bytes;
    size_t limit = tn__cache.limit == TN_CACHE_LIMIT_PEAK ? tn__cache.busy_peak : tn__cache.limit;
    if (lp_is_recording())
        limit = 0;
    tn__size_slot *s = NULL;
    if (!wanted || bytes < TN__CACHE_MIN || bytes > limit || !(s = tn__slot_for(bytes))) {
        tn__cache_trim(limit);
        tn__cache_unlock();
        return false;
    }
    tn__cache_trim(limit - bytes);
    tn__idle *b = p;
    *b = (tn__idle){.next_same = s->newest, .older = tn__cache.newest, .bytes = bytes};
    if (s->newest)
        s->newest->prev_same = b;
    s->newest = b;
    *(tn__cache.newest ? &tn__cache.newest->newer : &tn__cache.oldest) = b;
    tn__cache.newest = b;
    tn__cache.idle_bytes += bytes;
    tn__cache_unlock();
    return true;
}

size_t tn_cache_set_limit(size_t bytes)
{
    tn__cache_lock();
    size_t before = tn__cache.limit;
    tn__cache.limit = bytes;
    if (bytes != TN_CACHE_LIMIT_PEAK)
        tn__cache_trim(bytes);
    tn__cache_unlock();
    return before;
}

void tn_cache_release(void)
{
    tn__cache_lock();
    tn__cache_trim(0);
    tn__cache_unlock();
}

size_t tn_cache_idle_bytes(void)
{
    tn__cache_lock();
    size_t idle = tn__cache.idle_bytes;
    tn__cache_unlock();
    return idle;
}

/* A buffer for tn__alloc: from the cache where the default allocator is in use; a failed request
 * is tried once more after the cache gave its idle buffers back. Nothing on the way to the default
 * allocator depends on the size, so that the stacks a recording interposer sees do not either. */
static void *tn__raw_alloc(size_t bytes)
{
    if (tn__allocator.alloc != tn__default_alloc)
        return tn__allocator.alloc(bytes, tn__allocator.ctx);
    void *p = tn__cache_take(bytes);
    for (int attempt = 0; !p && attempt < 2; attempt++) {
        if (attempt)
            tn_cache_release();
        p = tn__default_alloc(bytes, NULL);
    }
    if (!p) {
        tn__cache_lock();
        tn__cache.busy_bytes -= bytes;
        tn__cache_unlock();
    }
    return p;
}

/* Frees a buffer of tn__raw_alloc whose category is `category`: parameters and optimizer state,
 * made once and freed with their model or optimizer, go back to malloc; what a step makes and frees
 * (activations, gradients, inputs, scratch, graph nodes) may be kept for the next step. */
static void tn__raw_free(void *ptr, size_t bytes, lp_category category)
{
    bool per_step = category != LP_CAT_PARAMETER && category != LP_CAT_OPTIMIZER_STATE;
    if (tn__allocator.free != tn__default_free)
        tn__allocator.free(ptr, tn__allocator.ctx);
    else if (!tn__cache_keep(ptr, bytes, per_step))
        free(ptr);
}

void tn_set_allocator(const tn_allocator *allocator)
{
    tn_cache_release(); /* its buffers are the default allocator's */
    if (allocator)
        tn__allocator = *allocator;
    else
        tn__allocator = (tn_allocator){tn__default_alloc, tn__default_free, NULL};
}

static _Thread_local tn__context tn__thread_ctx = {"", NULL};

tn__context *tn__ctx(void) { return &tn__thread_ctx; }

lp_category tn__effective_category(lp_category category)
{
    if (tn__thread_ctx.backward_op && category == LP_CAT_ACTIVATION)
        return LP_CAT_GRADIENT;
    return category;
}

void *tn__alloc(size_t bytes, lp_category category, const char *op, const char *detail)
{
    void *p = tn__raw_alloc(bytes);
    if (!p) {
        tn__error(TN_ENOMEM, "%s: out of memory allocating %zu bytes", op, bytes);
        return NULL;
    }
    const tn__context *ctx = &tn__thread_ctx;
    lp_tag tag = {
        .category = tn__effective_category(category),
        .op = ctx->backward_op ? ctx->backward_op : op,
        .module = ctx->module,
        .detail = detail,
        .grad_enabled = tn_is_grad_enabled(),
    };
    lp_alloc(p, bytes, LP_DEVICE_HOST, &tag);
    return p;
}

void tn__free(void *ptr, size_t bytes, lp_category category)
{
    if (!ptr)
        return;
    lp_free(ptr, bytes, LP_DEVICE_HOST, category);
    tn__raw_free(ptr, bytes, category);
}
