/*
 * gptrace: the trace reader (API: gradprof/trace.h, format: gradprof/trace_format.h).
 *
 * Reading is chunk by chunk into one reusable buffer. Each good chunk is decoded whole into its
 * thread's queue; the queues are merged in time order through a min-heap of the threads whose
 * queues are not empty, keyed by (head time, dense thread index). An event leaves only when its
 * time is before (latest chunk write time) - 2 * flush interval, the point before which the writer
 * guarantees every record is already in the file (trace_format.h, "Ordering"), or when the file
 * (or its readable part) has ended. So memory holds one merge window of events, plus the string,
 * stack, module and thread tables, which the API keeps until gp_trace_close().
 *
 * Threads: a reader thread (the dense index of events) is one OS thread. The writer hands an
 * exited thread's index to the next new thread, which announces itself with a THREAD record of
 * another os_tid and defines its ids afresh; the reader then starts a new dense index on the same
 * writer index, and a definition replaces an earlier one of the same id.
 *
 * Per-thread ids: STRING and STACK ids belong to the writing thread. Strings are interned once for
 * the whole trace (events point at that storage); stack nodes are merged into one global calling
 * context tree keyed by (global parent, module, offset), so equal call chains from any thread get
 * the same global id.
 *
 * Times: ns since the META "start_monotonic_ns", or without it since the smallest base time of
 * the chunks with events read when the first event leaves; a time before the start reads as 0.
 *
 * Untrusted input: every length is checked against the chunk, every id against a cap, and no
 * allocation is sized by a field that was not checked first. A chunk that fails to decode is
 * dropped whole (its events never leave), and reading stops there.
 */
#include "gradprof/trace.h"
#include "gradprof/trace_format.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Caps on values that size the reader's tables: far above what a real program writes, low enough
 * that a damaged or hostile file cannot make the reader allocate without bound. */
#define GPT_MAX_WRITER_THREADS (1u << 20) /* distinct chunk `thread` values */
#define GPT_MAX_MODULE_ID (1u << 16)      /* MODULE ids and the module field of STACK */
#define GPT_MAX_DEVICE (1u << 16)         /* CUDA ordinals */
#define GPT_MAX_LOCAL_ID UINT32_MAX       /* STRING / STACK ids of one thread */
#define GPT_MAX_GLOBAL (UINT32_MAX / 2)   /* global strings and stack nodes */
/* Queued events beyond this are released oldest first even inside the window (only a file whose
 * write times stop advancing gets there); about 120 MB of queued events. */
#define GPT_MAX_QUEUED ((size_t)1 << 20)
#define GPT_DEFAULT_FLUSH_NS 100000000ull /* without the metadata: a conservative 100 ms */
#define GPT_MAX_FLUSH_NS 60000000000ull   /* a larger recorded value is taken as this */

/* ---- small containers ------------------------------------------------------------------------ */

/* Grows *p (an array of *cap elements of `size` bytes) to hold at least `need`. 0 or -1 (OOM). */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / size)
            return -1;
        n *= 2;
    }
    void *q = realloc(*p, n * size);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* An open-addressing map from a u64 key to a u32 value. Keys are stored plus one, so 0 marks an
 * empty slot; callers use keys below UINT64_MAX. */
typedef struct idmap {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap, n; /* cap is 0 or a power of two */
} idmap;

static void idmap_free(idmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static bool idmap_get(const idmap *m, uint64_t key, uint32_t *val)
{
    if (m->cap == 0)
        return false;
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (m->keys[i] == 0)
            return false;
        if (m->keys[i] == key + 1) {
            *val = m->vals[i];
            return true;
        }
    }
}

/* Inserts or replaces. Returns 0, or -1 when out of memory (the map is unchanged then). */
static int idmap_put(idmap *m, uint64_t key, uint32_t val)
{
    if ((m->n + 1) * 4 > m->cap * 3) {
        size_t ncap = m->cap ? m->cap * 2 : 64;
        uint64_t *nk = calloc(ncap, sizeof *nk);
        uint32_t *nv = malloc(ncap * sizeof *nv);
        if (!nk || !nv) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] == 0)
                continue;
            size_t j = mix64(m->keys[i] - 1) & (ncap - 1);
            while (nk[j] != 0)
                j = (j + 1) & (ncap - 1);
            nk[j] = m->keys[i];
            nv[j] = m->vals[i];
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = ncap;
    }
    size_t mask = m->cap - 1;
    size_t i = mix64(key) & mask;
    while (m->keys[i] != 0 && m->keys[i] != key + 1)
        i = (i + 1) & mask;
    if (m->keys[i] == 0) {
        m->keys[i] = key + 1;
        m->n++;
    }
    m->vals[i] = val;
    return 0;
}

/* Interned strings: index 0 is "" so that a string id of 0 maps to it. Text lives in arena blocks
 * that never move, so the pointers handed out stay valid until gp_trace_close(). */
typedef struct str_entry {
    const char *s;
    uint32_t len;
    uint32_t hash;
} str_entry;

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
} arena_block;

typedef struct strtab {
    str_entry *e;
    size_t n, cap;
    uint32_t *slots; /* entry index + 1, 0 = empty */
    size_t nslots;   /* 0 or a power of two */
    arena_block *blocks;
} strtab;

static uint32_t str_hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static char *arena_alloc(strtab *st, size_t n)
{
    arena_block *b = st->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b)
            return NULL;
        b->cap = cap;
        b->used = 0;
        if (st->blocks && n > 65536) { /* a big string gets its own block behind the current one */
            b->next = st->blocks->next;
            st->blocks->next = b;
        } else {
            b->next = st->blocks;
            st->blocks = b;
        }
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

static void strtab_free(strtab *st)
{
    for (arena_block *b = st->blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(st->e);
    free(st->slots);
    memset(st, 0, sizeof *st);
}

static bool str_equal(const str_entry *e, const uint8_t *p, size_t n, uint32_t h)
{
    return e->hash == h && e->len == n && memcmp(e->s, p, n) == 0;
}

/* The index of the string p[0..n) if interned, else -1. */
static int64_t strtab_find(const strtab *st, const uint8_t *p, size_t n)
{
    if (st->nslots == 0)
        return -1;
    uint32_t h = str_hash(p, n);
    size_t mask = st->nslots - 1;
    for (size_t i = h & mask; st->slots[i] != 0; i = (i + 1) & mask) {
        const str_entry *e = &st->e[st->slots[i] - 1];
        if (str_equal(e, p, n, h))
            return st->slots[i] - 1;
    }
    return -1;
}

/* Interns p[0..n); returns its index in *idx. 0, or -1 when out of memory or over the cap. */
static int strtab_intern(strtab *st, const uint8_t *p, size_t n, uint32_t *idx)
{
    int64_t found = strtab_find(st, p, n);
    if (found >= 0) {
        *idx = (uint32_t)found;
        return 0;
    }
    if (st->n >= GPT_MAX_GLOBAL || n > UINT32_MAX - 1)
        return -1;
    if ((st->n + 1) * 4 > st->nslots * 3) {
        size_t ns = st->nslots ? st->nslots * 2 : 256;
        uint32_t *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < st->n; i++) {
            size_t j = st->e[i].hash & (ns - 1);
            while (slots[j] != 0)
                j = (j + 1) & (ns - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(st->slots);
        st->slots = slots;
        st->nslots = ns;
    }
    if (grow((void **)&st->e, &st->cap, st->n + 1, sizeof *st->e) != 0)
        return -1;
    char *s = arena_alloc(st, n + 1);
    if (!s)
        return -1;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    uint32_t h = str_hash(p, n);
    st->e[st->n] = (str_entry){s, (uint32_t)n, h};
    size_t mask = st->nslots - 1;
    size_t j = h & mask;
    while (st->slots[j] != 0)
        j = (j + 1) & mask;
    st->slots[j] = (uint32_t)st->n + 1;
    *idx = (uint32_t)st->n++;
    return 0;
}

/* ---- the reader ------------------------------------------------------------------------------ */

/* One writing thread (one value of the chunk header's `thread`). */
typedef struct wthread {
    uint32_t writer; /* the writer's index */
    uint32_t dense;  /* the current OS thread's dense index, 0 until it has an event or a name */
    bool have_tid;   /* a THREAD record was seen on this writer index */
    uint64_t os_tid; /* from the last THREAD record */
    idmap strings;   /* local string id -> string index */
    idmap stacks;    /* local stack id -> global stack id */
    gp_event *q;     /* ring of decoded, not yet delivered events, in the thread's order */
    size_t qhead, qlen, qcap; /* qcap is 0 or a power of two */
    size_t heap_pos;          /* index in the merge heap, SIZE_MAX if not in it */
} wthread;

typedef struct stack_node {
    uint32_t parent; /* global id, 0 = outermost */
    uint32_t module;
    uint64_t offset;
} stack_node;

struct gp_trace {
    FILE *f;
    char *path;
    uint8_t *buf;    /* chunk header + payload */
    uint64_t offset; /* file offset of the next chunk */
    bool eof;        /* no more chunks will be read (end of file or damage) */
    bool failed;     /* an I/O error or out of memory: every later call fails the same way */
    char fail_msg[256];
    gp_trace_info info;

    strtab strings;
    idmap meta;         /* key string index -> value string index */
    gp_module *modules; /* by id - 1; a hole has path NULL */
    size_t nmodules, modules_cap;

    stack_node *stacks; /* global stack id - 1 */
    size_t nstacks, stacks_cap;
    uint32_t *stack_slots; /* hash of stack nodes: global id, 0 = empty */
    size_t nstack_slots;

    wthread *threads;
    size_t nthreads, threads_cap;
    idmap thread_by_writer; /* writer index -> slot in threads */
    uint32_t *names;        /* dense index - 1 -> name string index, 0 = unnamed */
    size_t ndense, names_cap;

    size_t *heap; /* slots of threads with queued events */
    size_t nheap, heap_cap;
    size_t queued;

    uint64_t max_write_ns;
    uint64_t flush_ns;
    bool have_meta_start;
    uint64_t meta_start_ns;
    bool have_min_base;
    uint64_t min_base_ns;
    bool start_fixed;
    uint64_t start_ns;
};

static void set_err(char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t err_size, const char *fmt, ...)
{
    if (!err || err_size == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
}

static const char *string_at(const gp_trace *t, uint32_t idx)
{
    return t->strings.e[idx].s;
}

/* ---- the merge heap -------------------------------------------------------------------------- */

static const gp_event *queue_head(const wthread *w)
{
    return &w->q[w->qhead];
}

/* Whether thread slot a's head goes before slot b's: time, then dense index. */
static bool heap_less(const gp_trace *t, size_t a, size_t b)
{
    const gp_event *ea = queue_head(&t->threads[a]), *eb = queue_head(&t->threads[b]);
    if (ea->time_ns != eb->time_ns)
        return ea->time_ns < eb->time_ns;
    return ea->thread < eb->thread;
}

static void heap_set(gp_trace *t, size_t pos, size_t slot)
{
    t->heap[pos] = slot;
    t->threads[slot].heap_pos = pos;
}

static void heap_up(gp_trace *t, size_t pos)
{
    size_t slot = t->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!heap_less(t, slot, t->heap[parent]))
            break;
        heap_set(t, pos, t->heap[parent]);
        pos = parent;
    }
    heap_set(t, pos, slot);
}

static void heap_down(gp_trace *t, size_t pos)
{
    size_t slot = t->heap[pos];
    for (;;) {
        size_t c = 2 * pos + 1;
        if (c >= t->nheap)
            break;
        if (c + 1 < t->nheap && heap_less(t, t->heap[c + 1], t->heap[c]))
            c++;
        if (!heap_less(t, t->heap[c], slot))
            break;
        heap_set(t, pos, t->heap[c]);
        pos = c;
    }
    heap_set(t, pos, slot);
}

static int heap_push(gp_trace *t, size_t slot)
{
    if (grow((void **)&t->heap, &t->heap_cap, t->nheap + 1, sizeof *t->heap) != 0)
        return -1;
    t->heap[t->nheap++] = slot;
    heap_up(t, t->nheap - 1);
    return 0;
}

/* Removes the first event of the top thread into *ev and fixes the heap. */
static void heap_pop_event(gp_trace *t, gp_event *ev)
{
    size_t slot = t->heap[0];
    wthread *w = &t->threads[slot];
    *ev = w->q[w->qhead];
    w->qhead = (w->qhead + 1) & (w->qcap - 1);
    w->qlen--;
    t->queued--;
    if (w->qlen > 0) {
        heap_down(t, 0);
        return;
    }
    w->heap_pos = SIZE_MAX;
    t->nheap--;
    if (t->nheap > 0) {
        heap_set(t, 0, t->heap[t->nheap]);
        heap_down(t, 0);
    }
}

/* Appends a slot for one more event at the tail of w's queue; NULL when out of memory. */
static gp_event *queue_append(wthread *w)
{
    if (w->qlen == w->qcap) {
        size_t ncap = w->qcap ? w->qcap * 2 : 64;
        gp_event *q = malloc(ncap * sizeof *q);
        if (!q)
            return NULL;
        for (size_t i = 0; i < w->qlen; i++)
            q[i] = w->q[(w->qhead + i) & (w->qcap - 1)];
        free(w->q);
        w->q = q;
        w->qcap = ncap;
        w->qhead = 0;
    }
    gp_event *ev = &w->q[(w->qhead + w->qlen) & (w->qcap - 1)];
    w->qlen++;
    return ev;
}

/* ---- decoding -------------------------------------------------------------------------------- */

enum { DEC_OK = 0, DEC_BAD = 1, DEC_OOM = 2 };

typedef struct decoder {
    gp_trace *t;
    wthread *w;
    const uint8_t *start, *p, *end;
    const uint8_t *rec; /* the record being decoded */
    uint64_t time, addr;
    char why[96];
} decoder;

static int bad(decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(decoder *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
    return DEC_BAD;
}

/* A varint: at most 10 bytes, and a 10th byte may only hold bit 63 (gp_get_varint checks both). */
static int get_varint(decoder *d, uint64_t *v)
{
    const uint8_t *q = d->p;
    if (gp_get_varint(&q, d->end, v) != 0) {
        if (d->end - d->p >= 10 && (d->p[9] & 0x80))
            return bad(d, "varint over 10 bytes");
        if (d->end - d->p >= 10)
            return bad(d, "varint over 64 bits");
        return bad(d, "record runs past the end of the chunk");
    }
    d->p = q;
    return DEC_OK;
}

static int get_u32(decoder *d, uint32_t *v, uint64_t max, const char *what)
{
    uint64_t x;
    int r = get_varint(d, &x);
    if (r != DEC_OK)
        return r;
    if (x > max)
        return bad(d, "%s %" PRIu64 " out of range", what, x);
    *v = (uint32_t)x;
    return DEC_OK;
}

/* A str field, interned; its index in *idx. */
static int get_str(decoder *d, uint32_t *idx)
{
    uint64_t n;
    int r = get_varint(d, &n);
    if (r != DEC_OK)
        return r;
    if (n > (uint64_t)(d->end - d->p))
        return bad(d, "record runs past the end of the chunk");
    if (strtab_intern(&d->t->strings, d->p, (size_t)n, idx) != 0)
        return DEC_OOM;
    d->p += n;
    return DEC_OK;
}

/* A string id reference of the chunk's thread: 0 is "", others must be defined. */
static int get_string_ref(decoder *d, const char **s)
{
    uint64_t id;
    int r = get_varint(d, &id);
    if (r != DEC_OK)
        return r;
    uint32_t idx = 0;
    if (id != 0 && !idmap_get(&d->w->strings, id, &idx))
        return bad(d, "undefined string id %" PRIu64, id);
    *s = string_at(d->t, idx);
    return DEC_OK;
}

/* A stack id reference of the chunk's thread, mapped to its global id (0 = none). */
static int get_stack_ref(decoder *d, uint32_t *global, const char *what)
{
    uint64_t id;
    int r = get_varint(d, &id);
    if (r != DEC_OK)
        return r;
    *global = 0;
    if (id != 0 && !idmap_get(&d->w->stacks, id, global))
        return bad(d, "undefined %s id %" PRIu64, what, id);
    return DEC_OK;
}

static int get_time(decoder *d)
{
    uint64_t dt;
    int r = get_varint(d, &dt);
    if (r == DEC_OK)
        d->time += dt;
    return r;
}

/* daddr, then the device varint when GP_FLAG_DEVICE is set. */
static int get_addr_device(decoder *d, uint8_t flags, gp_event *ev)
{
    uint64_t z;
    int r = get_varint(d, &z);
    if (r != DEC_OK)
        return r;
    uint64_t delta = (uint64_t)gp_unzigzag(z); /* two's complement: adding it subtracts */
    d->addr += (flags & GP_FLAG_ADDR16) ? delta << 4 : delta;
    ev->addr = d->addr;
    ev->device = LP_DEVICE_HOST;
    if (flags & GP_FLAG_DEVICE) {
        uint64_t dev;
        if ((r = get_varint(d, &dev)) != DEC_OK)
            return r;
        if (dev > GPT_MAX_DEVICE)
            return bad(d, "device %" PRIu64 " out of range", dev - 1);
        ev->device = (lp_device)dev - 1;
    }
    return DEC_OK;
}

/* Gives the chunk's thread a new dense index (unnamed). */
static int new_dense(decoder *d)
{
    gp_trace *t = d->t;
    if (t->ndense >= UINT32_MAX - 1)
        return bad(d, "too many threads");
    if (grow((void **)&t->names, &t->names_cap, t->ndense + 1, sizeof *t->names) != 0)
        return DEC_OOM;
    t->names[t->ndense++] = 0;
    d->w->dense = (uint32_t)t->ndense;
    return DEC_OK;
}

/* Gives the chunk's thread its dense index if it has none yet. */
static int assign_dense(decoder *d)
{
    return d->w->dense != 0 ? DEC_OK : new_dense(d);
}

/* Starts an event of the chunk's thread at the current time. */
static int new_event(decoder *d, gp_event_kind kind, gp_event **out)
{
    int r = assign_dense(d);
    if (r != DEC_OK)
        return r;
    gp_event *ev = queue_append(d->w);
    if (!ev)
        return DEC_OOM;
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->thread = d->w->dense;
    ev->device = LP_DEVICE_HOST;
    ev->category = LP_CAT_OTHER;
    ev->op = ev->module = ev->detail = ev->name = "";
    *out = ev;
    return DEC_OK;
}

static void meta_applied(gp_trace *t, const char *key, const char *value)
{
    char *endp;
    if (value[0] < '0' || value[0] > '9')
        return;
    errno = 0;
    unsigned long long v = strtoull(value, &endp, 10);
    if (errno != 0 || *endp != '\0')
        return;
    if (strcmp(key, "start_monotonic_ns") == 0) {
        t->have_meta_start = true;
        t->meta_start_ns = v;
    } else if (strcmp(key, "flush_interval_ns") == 0 && v > 0) {
        t->flush_ns = v < GPT_MAX_FLUSH_NS ? v : GPT_MAX_FLUSH_NS;
    }
}

static int dec_meta(decoder *d)
{
    uint32_t key = 0, value = 0;
    int r = get_str(d, &key);
    if (r == DEC_OK)
        r = get_str(d, &value);
    if (r != DEC_OK)
        return r;
    if (idmap_put(&d->t->meta, key, value) != 0)
        return DEC_OOM;
    meta_applied(d->t, string_at(d->t, key), string_at(d->t, value));
    return DEC_OK;
}

static int dec_module(decoder *d)
{
    gp_trace *t = d->t;
    uint32_t id = 0, path = 0, build_id = 0;
    uint64_t base = 0, size = 0;
    int r = get_u32(d, &id, GPT_MAX_MODULE_ID, "module id");
    if (r == DEC_OK && id == 0)
        r = bad(d, "module id 0");
    if (r == DEC_OK)
        r = get_varint(d, &base);
    if (r == DEC_OK)
        r = get_varint(d, &size);
    if (r == DEC_OK)
        r = get_str(d, &path);
    if (r == DEC_OK)
        r = get_str(d, &build_id);
    if (r != DEC_OK)
        return r;
    if (id > t->nmodules) {
        if (grow((void **)&t->modules, &t->modules_cap, id, sizeof *t->modules) != 0)
            return DEC_OOM;
        memset(&t->modules[t->nmodules], 0, (id - t->nmodules) * sizeof *t->modules);
        t->nmodules = id;
    }
    t->modules[id - 1] = (gp_module){base, size, string_at(t, path), string_at(t, build_id)};
    return DEC_OK;
}

static int dec_thread(decoder *d)
{
    uint64_t tid = 0;
    uint32_t name = 0;
    int r = get_varint(d, &tid);
    if (r == DEC_OK)
        r = get_str(d, &name);
    if (r != DEC_OK)
        return r;
    wthread *w = d->w;
    /* Another OS thread on a known index is a new thread; the same one renames itself. */
    if (w->dense == 0 || (w->have_tid && w->os_tid != tid))
        r = new_dense(d);
    if (r != DEC_OK)
        return r;
    w->have_tid = true;
    w->os_tid = tid;
    d->t->names[w->dense - 1] = name;
    return DEC_OK;
}

static int dec_string(decoder *d)
{
    uint32_t id = 0, idx = 0;
    int r = get_u32(d, &id, GPT_MAX_LOCAL_ID, "string id");
    if (r == DEC_OK && id == 0)
        r = bad(d, "string id 0");
    if (r == DEC_OK)
        r = get_str(d, &idx);
    if (r != DEC_OK)
        return r;
    return idmap_put(&d->w->strings, id, idx) == 0 ? DEC_OK : DEC_OOM;
}

static uint32_t stack_hash(uint32_t parent, uint32_t module, uint64_t offset)
{
    return (uint32_t)mix64(offset ^ mix64(((uint64_t)parent << 32) | module));
}

/* The global id of the node (parent, module, offset), added if new; 0 when out of memory. */
static uint32_t stack_intern(gp_trace *t, uint32_t parent, uint32_t module, uint64_t offset)
{
    uint32_t h = stack_hash(parent, module, offset);
    if (t->nstack_slots) {
        size_t mask = t->nstack_slots - 1;
        for (size_t i = h & mask; t->stack_slots[i] != 0; i = (i + 1) & mask) {
            const stack_node *s = &t->stacks[t->stack_slots[i] - 1];
            if (s->parent == parent && s->module == module && s->offset == offset)
                return t->stack_slots[i];
        }
    }
    if (t->nstacks >= GPT_MAX_GLOBAL)
        return 0;
    if ((t->nstacks + 1) * 4 > t->nstack_slots * 3) {
        size_t ns = t->nstack_slots ? t->nstack_slots * 2 : 256;
        uint32_t *slots = calloc(ns, sizeof *slots);
        if (!slots)
            return 0;
        for (size_t i = 0; i < t->nstacks; i++) {
            const stack_node *s = &t->stacks[i];
            size_t j = stack_hash(s->parent, s->module, s->offset) & (ns - 1);
            while (slots[j] != 0)
                j = (j + 1) & (ns - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(t->stack_slots);
        t->stack_slots = slots;
        t->nstack_slots = ns;
    }
    if (grow((void **)&t->stacks, &t->stacks_cap, t->nstacks + 1, sizeof *t->stacks) != 0)
        return 0;
    t->stacks[t->nstacks++] = (stack_node){parent, module, offset};
    uint32_t id = (uint32_t)t->nstacks;
    size_t mask = t->nstack_slots - 1;
    size_t j = h & mask;
    while (t->stack_slots[j] != 0)
        j = (j + 1) & mask;
    t->stack_slots[j] = id;
    return id;
}

static int dec_stack(decoder *d)
{
    uint32_t id = 0, parent = 0, module = 0;
    uint64_t offset = 0;
    int r = get_u32(d, &id, GPT_MAX_LOCAL_ID, "stack id");
    if (r == DEC_OK && id == 0)
        r = bad(d, "stack id 0");
    if (r == DEC_OK)
        r = get_stack_ref(d, &parent, "parent stack");
    if (r == DEC_OK)
        r = get_u32(d, &module, GPT_MAX_MODULE_ID, "module id");
    if (r == DEC_OK)
        r = get_varint(d, &offset);
    if (r != DEC_OK)
        return r;
    uint32_t global = stack_intern(d->t, parent, module, offset);
    if (global == 0)
        return DEC_OOM;
    return idmap_put(&d->w->stacks, id, global) == 0 ? DEC_OK : DEC_OOM;
}

/* Records with a time: the event kinds. */
static int dec_event(decoder *d, unsigned type, uint8_t flags)
{
    static const gp_event_kind kinds[] = {
        [GP_REC_ALLOC] = GP_EV_ALLOC,
        [GP_REC_FREE] = GP_EV_FREE,
        [GP_REC_TAG] = GP_EV_TAG,
        [GP_REC_REGION_PUSH] = GP_EV_REGION_PUSH,
        [GP_REC_REGION_POP] = GP_EV_REGION_POP,
        [GP_REC_MARK] = GP_EV_MARK,
        [GP_REC_GRAD_MODE] = GP_EV_GRAD_MODE,
        [GP_REC_LOST] = GP_EV_LOST,
        [GP_REC_END] = GP_EV_END,
    };
    gp_event *ev;
    int r = get_time(d);
    if (r == DEC_OK)
        r = new_event(d, kinds[type], &ev);
    if (r != DEC_OK)
        return r;
    ev->time_ns = d->time;
    switch (type) {
    case GP_REC_ALLOC:
        if ((r = get_addr_device(d, flags, ev)) != DEC_OK ||
            (r = get_varint(d, &ev->size)) != DEC_OK)
            return r;
        return get_stack_ref(d, &ev->stack, "stack");
    case GP_REC_FREE:
        return get_addr_device(d, flags, ev);
    case GP_REC_TAG: {
        uint32_t category = 0;
        if ((r = get_addr_device(d, flags, ev)) != DEC_OK ||
            (r = get_varint(d, &ev->size)) != DEC_OK ||
            (r = get_u32(d, &category, LP_CAT_COUNT - 1, "category")) != DEC_OK ||
            (r = get_string_ref(d, &ev->op)) != DEC_OK ||
            (r = get_string_ref(d, &ev->module)) != DEC_OK ||
            (r = get_string_ref(d, &ev->detail)) != DEC_OK)
            return r;
        ev->category = (lp_category)category;
        ev->grad_enabled = (flags & GP_FLAG_GRAD) != 0;
        return get_stack_ref(d, &ev->stack, "stack");
    }
    case GP_REC_REGION_PUSH:
    case GP_REC_MARK:
        return get_string_ref(d, &ev->name);
    case GP_REC_GRAD_MODE:
        ev->grad_enabled = (flags & GP_FLAG_GRAD) != 0;
        ev->inference = (flags & GP_FLAG_INFERENCE) != 0;
        return DEC_OK;
    case GP_REC_LOST:
        return get_varint(d, &ev->count);
    default: /* REGION_POP, END */
        return DEC_OK;
    }
}

static int decode_records(decoder *d)
{
    while (d->p < d->end) {
        d->rec = d->p;
        uint8_t b = *d->p++;
        unsigned type = b & GP_REC_TYPE_MASK;
        uint8_t flags = (uint8_t)(b & ~GP_REC_TYPE_MASK);
        int r;
        switch (type) {
        case GP_REC_META:
            r = dec_meta(d);
            break;
        case GP_REC_MODULE:
            r = dec_module(d);
            break;
        case GP_REC_THREAD:
            r = dec_thread(d);
            break;
        case GP_REC_STRING:
            r = dec_string(d);
            break;
        case GP_REC_STACK:
            r = dec_stack(d);
            break;
        case GP_REC_ALLOC:
        case GP_REC_FREE:
        case GP_REC_TAG:
        case GP_REC_REGION_PUSH:
        case GP_REC_REGION_POP:
        case GP_REC_MARK:
        case GP_REC_GRAD_MODE:
        case GP_REC_LOST:
        case GP_REC_END:
            r = dec_event(d, type, flags);
            break;
        default:
            r = bad(d, "unknown record type %u", type);
            break;
        }
        if (r != DEC_OK)
            return r;
    }
    return DEC_OK;
}

/* The slot of writer thread `writer`, created on first sight; SIZE_MAX when out of memory, or
 * over the cap (then *over is set). */
static size_t thread_slot(gp_trace *t, uint32_t writer, bool *over)
{
    uint32_t slot;
    *over = false;
    if (idmap_get(&t->thread_by_writer, writer, &slot))
        return slot;
    if (t->nthreads >= GPT_MAX_WRITER_THREADS) {
        *over = true;
        return SIZE_MAX;
    }
    if (grow((void **)&t->threads, &t->threads_cap, t->nthreads + 1, sizeof *t->threads) != 0)
        return SIZE_MAX;
    if (idmap_put(&t->thread_by_writer, writer, (uint32_t)t->nthreads) != 0)
        return SIZE_MAX;
    wthread *w = &t->threads[t->nthreads];
    memset(w, 0, sizeof *w);
    w->writer = writer;
    w->heap_pos = SIZE_MAX;
    return t->nthreads++;
}

/* ---- chunks ---------------------------------------------------------------------------------- */

/* Marks the readable part as ended at the chunk at `off`, for `fmt`'s reason. */
static void damage(gp_trace *t, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void damage(gp_trace *t, uint64_t off, const char *fmt, ...)
{
    struct stat st;
    if (fstat(fileno(t->f), &st) == 0 && S_ISREG(st.st_mode))
        t->info.file_bytes = (uint64_t)st.st_size;
    if (t->info.file_bytes < off)
        t->info.file_bytes = off;
    t->info.damaged = true;
    t->info.damage_offset = off;
    t->info.bytes_lost = t->info.file_bytes - off;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->info.damage_reason, sizeof t->info.damage_reason, fmt, ap);
    va_end(ap);
    t->eof = true;
}

static int fail(gp_trace *t, char *err, size_t err_size, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Records a fatal error (I/O, memory) that every later gp_trace_next() repeats. Returns -1. */
static int fail(gp_trace *t, char *err, size_t err_size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->fail_msg, sizeof t->fail_msg, fmt, ap);
    va_end(ap);
    t->failed = true;
    t->eof = true;
    set_err(err, err_size, "%s", t->fail_msg);
    return -1;
}

/* Decodes the chunk in t->buf (payload of n bytes) into its thread's queue; *had_events says
 * whether it held any. On failure the chunk's events are dropped again. Returns DEC_OK, DEC_BAD
 * (reason in d->why) or DEC_OOM. */
static int decode_chunk(gp_trace *t, decoder *d, uint32_t n, bool *had_events)
{
    const uint8_t *h = t->buf;
    d->t = t;
    d->start = d->p = d->rec = h + GP_CHUNK_HEADER_BYTES;
    d->end = d->start + n;
    bool over;
    size_t slot = thread_slot(t, gp_get_u32(h + 12), &over);
    if (slot == SIZE_MAX) {
        if (!over)
            return DEC_OOM;
        snprintf(d->why, sizeof d->why, "more than %u threads", GPT_MAX_WRITER_THREADS);
        return DEC_BAD;
    }
    wthread *w = &t->threads[slot];
    size_t qlen0 = w->qlen;
    uint32_t dense0 = w->dense;
    size_t ndense0 = t->ndense;
    bool have_tid0 = w->have_tid;
    uint64_t tid0 = w->os_tid;
    d->w = w;
    d->time = gp_get_u64(h + 16);
    d->addr = 0;
    int r = decode_records(d);
    if (r == DEC_OK && w->qlen > qlen0 && w->heap_pos == SIZE_MAX && heap_push(t, slot) != 0)
        r = DEC_OOM;
    *had_events = w->qlen > qlen0;
    if (r != DEC_OK) {
        w->qlen = qlen0;     /* the events were appended at the tail */
        t->ndense = ndense0; /* only this chunk's thread got new indexes */
        w->dense = dense0;
        w->have_tid = have_tid0;
        w->os_tid = tid0;
        return r;
    }
    t->queued += w->qlen - qlen0;
    return DEC_OK;
}

/* Reads up to n bytes; returns the count (short only at end of file or on an error). */
static size_t read_full(gp_trace *t, uint8_t *p, size_t n)
{
    return fread(p, 1, n, t->f);
}

/* Reads and decodes the next chunk. Returns 0 (a chunk was read, or the readable part ended:
 * t->eof is set then) or -1 on a fatal error (message in err). */
static int read_chunk(gp_trace *t, char *err, size_t err_size)
{
    uint64_t off = t->offset;
    uint8_t *h = t->buf;
    size_t got = read_full(t, h, GP_CHUNK_HEADER_BYTES);
    if (ferror(t->f))
        return fail(t, err, err_size, "cannot read %s at byte %" PRIu64 ": %s", t->path, off,
                    strerror(errno));
    if (got == 0) {
        t->eof = true;
        return 0;
    }
    if (got < GP_CHUNK_HEADER_BYTES) {
        damage(t, off, "file ends inside a chunk header (%zu of %d bytes)", got,
               GP_CHUNK_HEADER_BYTES);
        return 0;
    }
    uint32_t magic = gp_get_u32(h), n = gp_get_u32(h + 4);
    if (magic != GP_CHUNK_MAGIC) {
        damage(t, off, "bad chunk magic 0x%08" PRIx32, magic);
        return 0;
    }
    if (n > GP_CHUNK_MAX_PAYLOAD) {
        damage(t, off, "chunk payload of %" PRIu32 " bytes over the limit of %u", n,
               GP_CHUNK_MAX_PAYLOAD);
        return 0;
    }
    got = read_full(t, h + GP_CHUNK_HEADER_BYTES, n);
    if (ferror(t->f))
        return fail(t, err, err_size, "cannot read %s at byte %" PRIu64 ": %s", t->path,
                    off + GP_CHUNK_HEADER_BYTES, strerror(errno));
    if (got < n) {
        damage(t, off, "file ends inside a chunk (%zu of %" PRIu32 " payload bytes)", got, n);
        return 0;
    }
    uint32_t crc = gp_crc32c(0, h + 12, GP_CHUNK_HEADER_BYTES - 12);
    crc = gp_crc32c(crc, h + GP_CHUNK_HEADER_BYTES, n);
    if (crc != gp_get_u32(h + 8)) {
        damage(t, off, "chunk checksum mismatch");
        return 0;
    }
    decoder d;
    bool had_events = false;
    int r = decode_chunk(t, &d, n, &had_events);
    if (r == DEC_OOM)
        return fail(t, err, err_size, "out of memory reading %s", t->path);
    if (r == DEC_BAD) {
        damage(t, off, "bad record at payload byte %zu: %s", (size_t)(d.rec - d.start), d.why);
        return 0;
    }
    uint64_t base = gp_get_u64(h + 16), written = gp_get_u64(h + 24);
    /* Only chunks with events: definition-only chunks (META, MODULE) may carry base time 0. */
    if (had_events && (!t->have_min_base || base < t->min_base_ns)) {
        t->have_min_base = true;
        t->min_base_ns = base;
    }
    if (written > t->max_write_ns)
        t->max_write_ns = written;
    t->offset = off + GP_CHUNK_HEADER_BYTES + n;
    t->info.chunks++;
    return 0;
}

/* ---- the API --------------------------------------------------------------------------------- */

int gp_trace_open(const char *path, gp_trace **out, char *err, size_t err_size)
{
    if (out)
        *out = NULL;
    if (!path || !out) {
        set_err(err, err_size, "gp_trace_open: no %s given", path ? "result pointer" : "path");
        return -1;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        set_err(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        set_err(err, err_size, "cannot stat %s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        set_err(err, err_size, "%s is a directory, not a gradprof trace", path);
        fclose(f);
        return -1;
    }
    uint8_t hdr[GP_FILE_HEADER_BYTES];
    size_t got = fread(hdr, 1, sizeof hdr, f);
    if (ferror(f)) {
        set_err(err, err_size, "cannot read %s: %s", path, strerror(errno));
        fclose(f);
        return -1;
    }
    if (got == 0) {
        set_err(err, err_size, "%s is empty", path);
        fclose(f);
        return -1;
    }
    if (got < sizeof hdr || memcmp(hdr, GP_FILE_MAGIC, 8) != 0) {
        if (got < sizeof hdr && memcmp(hdr, GP_FILE_MAGIC, got < 8 ? got : 8) == 0)
            set_err(err, err_size, "%s is not a gradprof trace (only %zu bytes, the header is %d)",
                    path, got, GP_FILE_HEADER_BYTES);
        else
            set_err(err, err_size, "%s is not a gradprof trace (bad magic)", path);
        fclose(f);
        return -1;
    }
    uint16_t major = (uint16_t)(hdr[8] | hdr[9] << 8), minor = (uint16_t)(hdr[10] | hdr[11] << 8);
    if (major != GP_VERSION_MAJOR) {
        set_err(err, err_size,
                "%s has trace format version %u.%u; this reader reads version %d.x only", path,
                major, minor, GP_VERSION_MAJOR);
        fclose(f);
        return -1;
    }
    gp_trace *t = calloc(1, sizeof *t);
    size_t plen = strlen(path);
    if (t) {
        t->path = malloc(plen + 1);
        t->buf = malloc(GP_CHUNK_HEADER_BYTES + (size_t)GP_CHUNK_MAX_PAYLOAD);
    }
    uint32_t empty;
    if (!t || !t->path || !t->buf || strtab_intern(&t->strings, (const uint8_t *)"", 0, &empty)) {
        set_err(err, err_size, "out of memory opening %s", path);
        fclose(f);
        gp_trace_close(t);
        return -1;
    }
    memcpy(t->path, path, plen + 1);
    t->f = f;
    t->offset = GP_FILE_HEADER_BYTES;
    t->flush_ns = GPT_DEFAULT_FLUSH_NS;
    t->info.version_major = major;
    t->info.version_minor = minor;
    t->info.file_bytes = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    *out = t;
    return 0;
}

void gp_trace_close(gp_trace *t)
{
    if (!t)
        return;
    if (t->f)
        fclose(t->f);
    for (size_t i = 0; i < t->nthreads; i++) {
        idmap_free(&t->threads[i].strings);
        idmap_free(&t->threads[i].stacks);
        free(t->threads[i].q);
    }
    free(t->threads);
    idmap_free(&t->thread_by_writer);
    idmap_free(&t->meta);
    strtab_free(&t->strings);
    free(t->modules);
    free(t->stacks);
    free(t->stack_slots);
    free(t->names);
    free(t->heap);
    free(t->buf);
    free(t->path);
    free(t);
}

/* Whether the top event may leave now (see the file comment). */
static bool may_release(const gp_trace *t)
{
    if (t->eof || t->queued > GPT_MAX_QUEUED)
        return true;
    uint64_t window = 2 * t->flush_ns;
    if (t->max_write_ns <= window)
        return false;
    return queue_head(&t->threads[t->heap[0]])->time_ns < t->max_write_ns - window;
}

int gp_trace_next(gp_trace *t, gp_event *ev, char *err, size_t err_size)
{
    if (!t || !ev) {
        set_err(err, err_size, "gp_trace_next: no %s given", t ? "event" : "trace");
        return -1;
    }
    for (;;) {
        if (t->nheap > 0 && may_release(t)) {
            heap_pop_event(t, ev);
            if (!t->start_fixed) {
                t->start_fixed = true;
                t->start_ns = t->have_meta_start ? t->meta_start_ns : t->min_base_ns;
            }
            ev->time_ns = ev->time_ns >= t->start_ns ? ev->time_ns - t->start_ns : 0;
            t->info.events++;
            if (ev->kind == GP_EV_LOST)
                t->info.lost_events = ev->count > UINT64_MAX - t->info.lost_events
                                          ? UINT64_MAX
                                          : t->info.lost_events + ev->count;
            else if (ev->kind == GP_EV_END)
                t->info.clean_end = true;
            return 1;
        }
        if (t->failed) {
            set_err(err, err_size, "%s", t->fail_msg);
            return -1;
        }
        if (t->eof)
            return 0;
        if (read_chunk(t, err, err_size) != 0)
            return -1;
    }
}

const gp_trace_info *gp_trace_info_get(const gp_trace *t)
{
    return t ? &t->info : NULL;
}

const char *gp_trace_meta(const gp_trace *t, const char *key)
{
    if (!t || !key)
        return NULL;
    int64_t k = strtab_find(&t->strings, (const uint8_t *)key, strlen(key));
    uint32_t v;
    if (k < 0 || !idmap_get(&t->meta, (uint64_t)k, &v))
        return NULL;
    return string_at(t, v);
}

size_t gp_trace_module_count(const gp_trace *t)
{
    return t ? t->nmodules : 0;
}

const gp_module *gp_trace_module(const gp_trace *t, uint32_t id)
{
    if (!t || id == 0 || id > t->nmodules || !t->modules[id - 1].path)
        return NULL;
    return &t->modules[id - 1];
}

int gp_trace_stack_frame(const gp_trace *t, uint32_t stack, uint32_t *module, uint64_t *offset,
                         uint32_t *parent)
{
    if (!t || stack == 0 || stack > t->nstacks)
        return -1;
    const stack_node *s = &t->stacks[stack - 1];
    if (module)
        *module = s->module;
    if (offset)
        *offset = s->offset;
    if (parent)
        *parent = s->parent;
    return 0;
}

size_t gp_trace_stack_count(const gp_trace *t)
{
    return t ? t->nstacks : 0;
}

const char *gp_trace_thread_name(const gp_trace *t, uint32_t thread)
{
    if (!t || thread == 0 || thread > t->ndense)
        return NULL;
    return t->names[thread - 1] ? string_at(t, t->names[thread - 1]) : NULL;
}

uint32_t gp_trace_thread_count(const gp_trace *t)
{
    return t ? (uint32_t)t->ndense : 0;
}
