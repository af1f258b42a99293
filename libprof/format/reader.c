/*
 * gptrace: the trace reader (API: gradprof/trace.h, format: gradprof/trace_format.h).
 *
 * Two passes. The scan (at the first gp_trace_next, or before it: gp_trace_scan) reads the file
 * once from the start, up to its size at gp_trace_open: it checks every chunk (header, size,
 * CRC-32C, and every record, including that each string and stack id is defined in its thread's
 * earlier chunks) and stops at the first bad one exactly as a decoding pass would, so the damage
 * report is the same and nothing after the damage is ever delivered. It keeps only an index
 * entry per good chunk: its offset, its writer and its key, the header's base time raised to the
 * key of the writer's previous chunk (so that a writer's chunks keep their file order, which is
 * that thread's order).
 *
 * The merge then opens chunks in (key, offset) order and emits events in time order: an event is
 * delivered only once every chunk whose key is at or before its time is open, and it is the least,
 * by (time, dense thread index), of the open chunks' next events. A chunk holds no record before
 * its base time, so nothing not yet opened can come earlier, however late the chunk reached the
 * file. An open chunk is decoded lazily, one record ahead, from its payload (read with pread), and
 * closed when consumed. Only one chunk per writer is being decoded at a time; a later chunk of the
 * same writer waits behind it (its definitions must not be applied before the earlier events),
 * so a thread's records leave in its own order and its ids mean what they meant when written.
 * Memory: the index (24 bytes a chunk), the open chunks (about one per thread active at a time),
 * and the string, stack, module and thread tables, which the API keeps until gp_trace_close().
 *
 * Readahead (gp_trace_readahead): the merge runs on a thread of the reader's own, in batches
 * (RA_BATCHES x RA_BATCH events, about 450 KB), and the caller's thread delivers them; what the
 * caller sees is the same (see "what the accessors show").
 *
 * Times never go back: an event's time is raised to its writer's previous event's time and to its
 * chunk's key. A well-formed trace never needs that; for any other it keeps the stream ordered.
 *
 * Threads: a reader thread (the dense index of events) is one OS thread, numbered in the order
 * the merge reaches it. The writer hands an exited thread's index to the next new thread, which
 * announces itself with a THREAD record of another os_tid and defines its ids afresh; the reader
 * then starts a new dense index on the same writer index, and a definition replaces an earlier one
 * of the same id.
 *
 * Per-thread ids: STRING and STACK ids belong to the writing thread. Strings are interned once for
 * the whole trace (events point at that storage); stack nodes are merged into one global calling
 * context tree keyed by (global parent, module, offset), so equal call chains from any thread get
 * the same global id.
 *
 * Times: ns since the META "start_monotonic_ns", or without it since the smallest base time of
 * the chunks with events; a time before the start reads as 0.
 *
 * Untrusted input: every length is checked against the chunk, every id against a cap, and no
 * allocation is sized by a field that was not checked first. The merge decodes with the same
 * checks as the scan; a chunk that passed the scan and then fails (the file was rewritten while it
 * was read) is an error, never a crash.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "gradprof/trace.h"
#include "gradprof/trace_format.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support.h"

/* Caps on values that size the reader's tables: far above what a real program writes, low enough
 * that a damaged or hostile file cannot make the reader allocate without bound. */
#define GPT_MAX_WRITER_THREADS (1u << 20) /* distinct chunk `thread` values */
#define GPT_MAX_MODULE_ID (1u << 16)      /* MODULE ids and the module field of STACK */
#define GPT_MAX_LOCAL_ID UINT32_MAX       /* STRING / STACK ids of one thread */
#define GPT_MAX_GLOBAL (UINT32_MAX / 2)   /* global strings and stack nodes */
#define GPT_SCAN_WINDOW ((size_t)4 << 20) /* the scan's read buffer; holds the largest chunk */
#define GPT_STACK_PENDING 256             /* new stack nodes hashed in one batch */

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

/* Per-thread ids (STRING, STACK) to values: an array while the ids are dense, as the writer's
 * are (1, 2, 3, ...), a hash map for the ids past it. The array never exceeds 2 * (1024 + 32 n)
 * entries for n definitions, so a hostile id cannot size it. Values are below UINT32_MAX. */
typedef struct idtab {
    uint32_t *arr; /* value + 1 by id, 0 = not in the array */
    size_t narr;
    size_t n;  /* definitions made */
    idmap big; /* ids that were past the array when defined */
    /* While every definition so far defined the next id as itself (1 -> 1, 2 -> 2, ...: a
     * single thread's stacks, which become the global ones), nothing is stored: ids 1..ident. */
    uint32_t ident;
} idtab;

static void idtab_free(idtab *m)
{
    free(m->arr);
    idmap_free(&m->big);
    memset(m, 0, sizeof *m);
}

/* Empties m for the merge, keeping its array trimmed to the ids the scan defined there, so the
 * merge fills it without growing it. */
static void idtab_reset(idtab *m)
{
    size_t n = m->narr;
    while (n > 0 && m->arr[n - 1] == 0)
        n--;
    if (n == 0) {
        idtab_free(m);
        return;
    }
    uint32_t *a = realloc(m->arr, n * sizeof *a);
    m->arr = a ? a : m->arr;
    m->narr = n;
    memset(m->arr, 0, n * sizeof *m->arr);
    idmap_free(&m->big);
    m->n = 0;
    m->ident = 0;
}

static inline bool idtab_get(const idtab *m, uint64_t id, uint32_t *val)
{
    if (id - 1 < m->ident) {
        *val = (uint32_t)id;
        return true;
    }
    if (id < m->narr && m->arr[id] != 0) {
        *val = m->arr[id] - 1;
        return true;
    }
    return m->big.n != 0 && idmap_get(&m->big, id, val);
}

/* Stores id -> val in the array or the map (m->n already counts it). 0, or -1 when out of
 * memory. */
static int idtab_store(idtab *m, uint64_t id, uint32_t val)
{
    if (id >= m->narr && id < 1024 + 32 * (uint64_t)m->n) {
        size_t ncap = m->narr ? m->narr : 64;
        while (ncap <= id)
            ncap *= 2;
        uint32_t *a = realloc(m->arr, ncap * sizeof *a);
        if (!a)
            return -1;
        memset(a + m->narr, 0, (ncap - m->narr) * sizeof *a);
        m->arr = a;
        m->narr = ncap;
    }
    if (id < m->narr) { /* shadows an older value in big, if any */
        m->arr[id] = val + 1;
        return 0;
    }
    return idmap_put(&m->big, id, val);
}

/* Defines or redefines id. 0, or -1 when out of memory. */
static int idtab_put(idtab *m, uint64_t id, uint32_t val)
{
    m->n++;
    if (m->narr == 0 && m->big.n == 0) {
        if (id == (uint64_t)m->ident + 1 && val == id && m->ident < UINT32_MAX - 1) {
            m->ident++;
            return 0;
        }
        /* the run of ids defined as themselves ends: store it like any other */
        uint32_t run = m->ident;
        m->ident = 0;
        for (uint32_t k = 1; k <= run; k++)
            if (idtab_store(m, k, k) != 0)
                return -1;
    }
    return idtab_store(m, id, val);
}

/* ---- the reader ------------------------------------------------------------------------------ */

struct cursor;

/* One writing thread (one value of the chunk header's `thread`). */
typedef struct wthread {
    uint32_t writer;    /* the writer's index */
    uint32_t dense;     /* the current OS thread's dense index, 0 until it has an event or a name */
    bool have_tid;      /* a THREAD record was seen on this writer index */
    uint64_t os_tid;    /* from the last THREAD record */
    idtab strings;      /* scan: the ids defined; merge: local string id -> string index */
    idtab stacks;       /* scan: the ids defined; merge: local stack id -> global stack id */
    uint64_t last_key;  /* scan: the key of its last chunk */
    uint64_t last_time; /* merge: the time of its last event */
    struct cursor *active; /* merge: its chunk being decoded, NULL if none */
    size_t *waiting;       /* merge: index positions of its opened chunks behind `active` */
    size_t nwaiting, waiting_head, waiting_cap;
} wthread;

/* A good chunk, found by the scan. */
typedef struct chunk_ref {
    uint64_t key;   /* base time, raised to the key of the writer's previous chunk */
    uint64_t off;   /* file offset of its header */
    uint32_t slot;  /* its writer's slot */
    uint32_t bytes; /* payload bytes */
} chunk_ref;

/* A node of the merged call tree: its frame and its caller's node. */
typedef struct stack_node {
    uint32_t parent; /* global id, 0 = outermost */
    uint32_t frame;  /* global frame id (frames[frame - 1]) */
} stack_node;

/* A distinct frame (module, offset) of the call tree: many nodes share one (the same code
 * reached from many callers), so a node names its frame by id. */
typedef struct frame_rec {
    uint64_t offset;
    uint32_t module;
} frame_rec;

/* A fingerprint of a node's children (stack_kids): bit h % 8 is set for each child with hash h,
 * so a clear bit proves that no child with that hash exists (no hash lookup needed). */
static inline uint8_t stack_child_bit(uint32_t h)
{
    return (uint8_t)(1u << (h % 8));
}

enum { DEC_OK = 0, DEC_BAD = 1, DEC_OOM = 2 };

/* Decoding state of one chunk. In scan mode it checks and skips, defining ids as merely defined;
 * in merge mode it fills the tables and events. */
typedef struct decoder {
    gp_trace *t;
    wthread *w;
    const uint8_t *start, *p, *end;
    const uint8_t *rec; /* the record being decoded */
    uint64_t time, addr;
    bool scan;
    char why[96];
} decoder;

/* An open chunk: its bytes and its decoder, one event ahead. */
typedef struct cursor {
    decoder d;
    uint8_t *buf; /* header + payload (regular files); NULL when read from the in-memory copy */
    size_t cap;
    uint64_t off;
    uint64_t head_time;   /* the next event's time; d.p is just past its dt */
    uint32_t head_thread; /* and its dense thread */
    uint8_t head_byte;    /* and its type and flags */
    struct cursor *next_free;
} cursor;

/* What the accessors show. Only show() changes it (see there). */
typedef struct shown {
    gp_module *modules; /* by id - 1; a hole has path NULL */
    size_t nmodules, modules_cap;
    struct shown_thread { /* dense index - 1 -> */
        const char *name; /* NULL = unnamed */
        uint64_t os_tid;  /* from its THREAD record, 0 = unknown */
    } *threads;
    size_t nthreads, threads_cap;
    struct shown_meta {
        const char *key, *value;
    } *meta; /* in the order the keys were first defined */
    size_t nmeta, meta_cap;
    idmap meta_by_key; /* key string index -> position in meta */
    size_t nstacks;    /* stack ids 1..nstacks are defined */
} shown;

/* A change to what the accessors show, made while an event is decoded. */
typedef struct change {
    enum { CHANGE_MODULE, CHANGE_THREAD, CHANGE_META } kind;
    uint32_t id;         /* the module id, the dense index, the key's string index */
    uint64_t base, size; /* MODULE */
    uint64_t os_tid;     /* THREAD */
    const char *a, *b; /* MODULE: path, build id; THREAD: name (NULL = unnamed); META: key, value */
    size_t at;         /* readahead: the position in its batch of the event it goes with */
} change;

struct gp_trace {
    int fd;
    char *path;
    bool regular;   /* a regular file: read with pread up to `limit` */
    uint64_t limit; /* its size at gp_trace_open */
    bool scanned;
    bool released; /* the stream ended: release_decoding ran */
    bool failed; /* an I/O error or out of memory: every later call fails the same way */
    char fail_msg[256];
    gp_trace_info info;

    /* The scan's window on the file: bytes [win_off, win_off + win_len). Not a regular file:
     * everything read stays here (win_off 16) and the merge reads chunks from it. */
    uint8_t *win;
    size_t win_cap, win_len;
    uint64_t win_off;
    bool win_eof;
    uint64_t scan_threads; /* an upper bound of the dense indexes the merge can make */

    chunk_ref *index; /* sorted by (key, off) after the scan */
    size_t nindex, index_cap;
    size_t next_chunk; /* the first not yet opened */

    cursor **heap; /* the open chunks with a next event, least (time, thread) first */
    size_t nheap, heap_cap;
    cursor **cursors; /* every cursor made, for gp_trace_close */
    size_t ncursors, cursors_cap;
    cursor *free_cursors;

    strtab strings;

    stack_node *stacks; /* global stack id - 1 */
    size_t nstacks;
    uint8_t *stack_kids;   /* by global stack id - 1: its children's fingerprint (the merge's) */
    frame_rec *frames;     /* global frame id - 1; room for stack_capacity, never moved */
    size_t nframes;        /* written by the merge, read with acquire (gp_trace_frame) */
    uint32_t *frame_slots; /* the merge's frame hash: frame ids, open addressing, 0 = empty */
    size_t nframe_slots;   /* a power of two, grown at 3/4 */
    uint32_t *stack_slots; /* the stack hash (see stack_table_build) */
    size_t nstack_slots;   /* a power of two */
    size_t stack_capacity; /* nodes it is sized for */
    unsigned stack_id_bits;
    uint64_t scan_stacks;  /* STACK records the scan saw: at most that many nodes */
    uint64_t merged_stacks; /* STACK records the merge decoded: at scan_stacks, no more come */
    uint64_t stack_pending[GPT_STACK_PENDING]; /* hash << 32 | id of nodes not yet hashed */
    size_t stack_pending_n;
    uint64_t stack_pending_slots[GPT_STACK_PENDING * 2]; /* the same, hashed; 0 = empty */

    wthread *threads;
    size_t nthreads, threads_cap;
    idmap thread_by_writer; /* writer index -> slot in threads */
    uint32_t ndense;        /* dense indexes made */

    bool have_meta_start;
    uint64_t meta_start_ns;
    bool have_min_base;
    uint64_t min_base_ns;
    bool start_fixed;
    uint64_t start_ns;

    shown shown;
    bool want_readahead;
    struct ra_state *ra; /* decoding on the reader's own thread; NULL when it is not */
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

/* ---- decoding -------------------------------------------------------------------------------- */

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
static inline int get_varint(decoder *d, uint64_t *v)
{
    const uint8_t *q = d->p;
    if (d->end - q >= 10) { /* no bounds to check: the first 9 bytes hold 63 bits */
        uint64_t x = 0;
        for (int i = 0; i < 9; i++) {
            uint8_t b = q[i];
            x |= (uint64_t)(b & 0x7F) << (7 * i);
            if (b < 0x80) {
                *v = x;
                d->p = q + i + 1;
                return DEC_OK;
            }
        }
        if (q[9] <= 1) { /* the 10th byte holds bit 63 only, and ends it */
            *v = x | (uint64_t)q[9] << 63;
            d->p = q + 10;
            return DEC_OK;
        }
    }
    if (gp_get_varint(&q, d->end, v) != 0) {
        *v = 0;
        if (d->end - d->p >= 10 && (d->p[9] & 0x80))
            return bad(d, "varint over 10 bytes");
        if (d->end - d->p >= 10)
            return bad(d, "varint over 64 bits");
        return bad(d, "record runs past the end of the chunk");
    }
    d->p = q;
    return DEC_OK;
}

/* A varint whose value the scan does not need: checked exactly as get_varint checks it, and
 * skipped. Values are read only in the merge. */
static inline int skip_varint(decoder *d)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint8_t *q = d->p;
    if (d->end - q >= 10) {
        uint64_t w;
        memcpy(&w, q, 8);
        uint64_t last = ~w & 0x8080808080808080ull; /* the bytes without a continuation bit */
        if (last) {
            d->p = q + (__builtin_ctzll(last) >> 3) + 1;
            return DEC_OK;
        }
        if (q[8] < 0x80 || q[9] <= 1) {
            d->p = q + (q[8] < 0x80 ? 9 : 10);
            return DEC_OK;
        }
    }
#endif
    uint64_t v;
    return get_varint(d, &v);
}

/* A varint, read in the merge and only checked in the scan (*v unchanged then). */
static inline int get_value(decoder *d, uint64_t *v)
{
    return d->scan ? skip_varint(d) : get_varint(d, v);
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

/* A str field, interned (merge) or skipped (scan: *idx = 0, the empty string). */
static int get_str(decoder *d, uint32_t *idx)
{
    uint64_t n;
    int r = get_varint(d, &n);
    if (r != DEC_OK)
        return r;
    if (n > (uint64_t)(d->end - d->p))
        return bad(d, "record runs past the end of the chunk");
    *idx = 0;
    if (!d->scan && strtab_intern(&d->t->strings, d->p, (size_t)n, idx) != 0)
        return DEC_OOM;
    d->p += n;
    return DEC_OK;
}

/* A string id reference of the chunk's thread: 0 is "", others must be defined. (The scan
 * defines ids with the value 0, the empty string.) */
static int get_string_ref(decoder *d, const char **s)
{
    uint64_t id;
    int r = get_varint(d, &id);
    if (r != DEC_OK)
        return r;
    uint32_t idx = 0;
    if (id != 0 && !idtab_get(&d->w->strings, id, &idx))
        return bad(d, "undefined string id %" PRIu64, id);
    *s = string_at(d->t, idx);
    return DEC_OK;
}

/* A stack id reference of the chunk's thread, mapped to its global id (0 = none; always 0 in
 * the scan). */
static int get_stack_ref(decoder *d, uint32_t *global, const char *what)
{
    uint64_t id;
    int r = get_varint(d, &id);
    if (r != DEC_OK)
        return r;
    *global = 0;
    if (id != 0 && !idtab_get(&d->w->stacks, id, global))
        return bad(d, "undefined %s id %" PRIu64, what, id);
    return DEC_OK;
}

static int get_time(decoder *d)
{
    uint64_t dt = 0;
    int r = get_value(d, &dt);
    if (r == DEC_OK)
        d->time += dt;
    return r;
}

/* daddr, then the device varint when GP_FLAG_DEVICE is set. */
static int get_addr_device(decoder *d, uint8_t flags, gp_event *ev)
{
    uint64_t z = 0;
    int r = get_value(d, &z);
    if (r != DEC_OK)
        return r;
    uint64_t delta = (uint64_t)gp_unzigzag(z); /* two's complement: adding it subtracts */
    d->addr += (flags & GP_FLAG_ADDR16) ? delta << 4 : delta;
    ev->addr = d->addr;
    if (flags & GP_FLAG_DEVICE) {
        uint64_t dev;
        if ((r = get_varint(d, &dev)) != DEC_OK)
            return r;
        if (dev > (uint64_t)GP_TRACE_MAX_DEVICE + 1)
            return bad(d, "device %" PRIu64 " out of range", dev - 1);
        ev->device = (lp_device)dev - 1;
    }
    return DEC_OK;
}

/* ---- what the accessors show ----------------------------------------------------------------- */

/*
 * Readahead: the merge runs on a thread of the reader's own, up to RA_BATCHES batches of RA_BATCH
 * events ahead of the caller, who must see exactly what it would see without. So the merge never
 * changes what the accessors show: it logs each change (show()) with the event it is decoding,
 * and the caller's thread applies it when it delivers that event. The stack nodes and their
 * frames are the tables both threads read: the scan sizes their arrays, which never move after;
 * the merge appends nodes, published with the batch that first refers to them (each event carries
 * the count of nodes to show with it), and frames, whose count it stores with release order
 * before a node names them. Only the merge touches the hashes and the children's fingerprints.
 */
#define RA_BATCH 512
#define RA_BATCHES 8
#define RA_WAKE (RA_BATCHES / 2) /* a sleeping side is woken once this many batches wait for it */

typedef struct ra_batch {
    gp_event ev[RA_BATCH];
    uint32_t nstacks[RA_BATCH]; /* the stack count to show with each event */
    size_t n;                   /* events in it */
    int end; /* 1: more batches follow; 0: the stream ends after its events; -1: it failed there */
    uint32_t end_nstacks;
    change *changes; /* in the order they were made */
    size_t nchanges, changes_cap;
} ra_batch;

typedef struct ra_state {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t to_merge;  /* RA_WAKE batches are free, or stop was set */
    pthread_cond_t to_reader; /* RA_WAKE batches are filled, or the last one */
    size_t filled, taken;     /* batches the merge has filled; batches the caller is done with */
    bool merge_waits, reader_waits;
    bool stop;
    ra_batch *fill;          /* the merge's batch */
    ra_batch *read;          /* the caller's batch; NULL between batches */
    size_t pos, next_change; /* the caller's next event and change in it */
    char err[256];           /* the merge's message */
    ra_batch batches[RA_BATCHES];
} ra_state;

/* Makes *n at least `need` (*p an array of *cap elements of `size` bytes), the new elements
 * zeroed. 0 or -1 (OOM). */
static int extend_zeroed(void **p, size_t *n, size_t *cap, size_t need, size_t size)
{
    if (need <= *n)
        return 0;
    if (grow(p, cap, need, size) != 0)
        return -1;
    memset((char *)*p + *n * size, 0, (need - *n) * size);
    *n = need;
    return 0;
}

/* Applies a change to what the accessors show. 0, or -1 when out of memory. */
static int apply(shown *sh, const change *c)
{
    switch (c->kind) {
    case CHANGE_MODULE:
        if (extend_zeroed((void **)&sh->modules, &sh->nmodules, &sh->modules_cap, c->id,
                          sizeof *sh->modules) != 0)
            return -1;
        sh->modules[c->id - 1] = (gp_module){c->base, c->size, c->a, c->b};
        return 0;
    case CHANGE_THREAD:
        if (extend_zeroed((void **)&sh->threads, &sh->nthreads, &sh->threads_cap, c->id,
                          sizeof *sh->threads) != 0)
            return -1;
        sh->threads[c->id - 1] = (struct shown_thread){c->a, c->os_tid};
        return 0;
    case CHANGE_META: {
        uint32_t at;
        if (idmap_get(&sh->meta_by_key, c->id, &at)) {
            sh->meta[at].value = c->b;
            return 0;
        }
        if (grow((void **)&sh->meta, &sh->meta_cap, sh->nmeta + 1, sizeof *sh->meta) != 0 ||
            idmap_put(&sh->meta_by_key, c->id, (uint32_t)sh->nmeta) != 0)
            return -1;
        sh->meta[sh->nmeta++] = (struct shown_meta){c->a, c->b};
        return 0;
    }
    }
    return 0;
}

/* Changes what the accessors show: at once, or with readahead logged with the event being
 * decoded. DEC_OK or DEC_OOM. */
static int show(gp_trace *t, const change *c)
{
    if (!t->ra)
        return apply(&t->shown, c) == 0 ? DEC_OK : DEC_OOM;
    ra_batch *b = t->ra->fill;
    if (grow((void **)&b->changes, &b->changes_cap, b->nchanges + 1, sizeof *b->changes) != 0)
        return DEC_OOM;
    b->changes[b->nchanges] = *c;
    b->changes[b->nchanges++].at = b->n;
    return DEC_OK;
}

static void shown_free(shown *sh)
{
    free(sh->modules);
    free(sh->threads);
    free(sh->meta);
    idmap_free(&sh->meta_by_key);
}

/* Gives the chunk's thread a new dense index (unnamed). */
static int new_dense(decoder *d)
{
    gp_trace *t = d->t;
    if (t->ndense >= UINT32_MAX - 1)
        return bad(d, "too many threads");
    d->w->dense = ++t->ndense;
    return show(t, &(change){.kind = CHANGE_THREAD, .id = t->ndense});
}

/* Gives the chunk's thread its dense index if it has none yet. */
static int assign_dense(decoder *d)
{
    return d->w->dense != 0 ? DEC_OK : new_dense(d);
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
    }
}

static int dec_meta(decoder *d)
{
    uint32_t key = 0, value = 0;
    int r = get_str(d, &key);
    if (r == DEC_OK)
        r = get_str(d, &value);
    if (r != DEC_OK || d->scan)
        return r;
    meta_applied(d->t, string_at(d->t, key), string_at(d->t, value));
    return show(d->t, &(change){.kind = CHANGE_META,
                                .id = key,
                                .a = string_at(d->t, key),
                                .b = string_at(d->t, value)});
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
    if (r != DEC_OK || d->scan)
        return r;
    return show(t, &(change){.kind = CHANGE_MODULE,
                             .id = id,
                             .base = base,
                             .size = size,
                             .a = string_at(t, path),
                             .b = string_at(t, build_id)});
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
    if (d->scan) /* each THREAD record makes at most one dense index in the merge */
        return ++d->t->scan_threads >= UINT32_MAX - 1 ? bad(d, "too many threads") : DEC_OK;
    wthread *w = d->w;
    /* Another OS thread on a known index is a new thread; the same one renames itself. */
    if (w->dense == 0 || (w->have_tid && w->os_tid != tid))
        r = new_dense(d);
    if (r != DEC_OK)
        return r;
    w->have_tid = true;
    w->os_tid = tid;
    return show(d->t, &(change){.kind = CHANGE_THREAD,
                                .id = w->dense,
                                .os_tid = tid,
                                .a = name ? string_at(d->t, name) : NULL});
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
    return idtab_put(&d->w->strings, id, idx) == 0 ? DEC_OK : DEC_OOM;
}

static uint32_t stack_hash(uint32_t parent, uint32_t frame)
{
    return (uint32_t)mix64(((uint64_t)parent << 32) | frame);
}

static size_t frame_home(const gp_trace *t, uint32_t module, uint64_t offset)
{
    return mix64(offset ^ mix64(module)) & (t->nframe_slots - 1);
}

/* The global id of frame (module, offset), added if new; 0 when out of memory or out of room
 * (frames are at most as many as nodes: no room only in a file that changed since the scan). The
 * array never moves; its hash grows (it is the merge's alone). */
static uint32_t frame_intern(gp_trace *t, uint32_t module, uint64_t offset)
{
    size_t mask = t->nframe_slots - 1, i = frame_home(t, module, offset);
    for (uint32_t id; (id = t->frame_slots[i]) != 0; i = (i + 1) & mask)
        if (t->frames[id - 1].offset == offset && t->frames[id - 1].module == module)
            return id;
    if (t->nframes == t->stack_capacity)
        return 0;
    if ((t->nframes + 1) * 4 > t->nframe_slots * 3) {
        size_t n = t->nframe_slots * 2;
        uint32_t *slots = calloc(n, sizeof *slots);
        if (!slots)
            return 0;
        free(t->frame_slots);
        t->frame_slots = slots;
        t->nframe_slots = n;
        for (uint32_t id = 1; id <= t->nframes; id++) {
            size_t j = frame_home(t, t->frames[id - 1].module, t->frames[id - 1].offset);
            while (slots[j] != 0)
                j = (j + 1) & (n - 1);
            slots[j] = id;
        }
        mask = n - 1;
        i = frame_home(t, module, offset);
        while (slots[i] != 0)
            i = (i + 1) & mask;
    }
    t->frames[t->nframes] = (frame_rec){offset, module};
    uint32_t id = (uint32_t)t->nframes + 1;
    __atomic_store_n(&t->nframes, t->nframes + 1, __ATOMIC_RELEASE); /* readahead's caller */
    t->frame_slots[i] = id;
    return id;
}

/*
 * The stack hash: open addressing over the node array. A 32-bit slot holds a node's id in its low
 * `stack_id_bits` bits and the high bits of the node's hash above them (0 = empty), so a probe
 * compares those bits before it touches the node array. Sized once from the scan's count of STACK
 * records (which bounds the nodes), never rehashed in a well-formed read. New nodes wait in a
 * small pending table (looked up as well) and enter the big one in batches, their slots
 * prefetched ahead, which turns one cache miss per node into overlapping ones.
 */
static inline uint32_t stack_slot_of(const gp_trace *t, uint32_t h, uint32_t id)
{
    unsigned b = t->stack_id_bits;
    return b >= 32 ? id : (h >> b << b) | id;
}

static inline bool stack_node_is(const stack_node *s, uint32_t parent, uint32_t frame)
{
    return s->parent == parent && s->frame == frame;
}

/* The id of the node (parent, frame) with hash h in the big table, or 0. */
static uint32_t stack_probe(const gp_trace *t, uint32_t h, uint32_t parent, uint32_t frame)
{
    size_t mask = t->nstack_slots - 1;
    uint32_t idmask = t->stack_id_bits >= 32 ? UINT32_MAX : (1u << t->stack_id_bits) - 1;
    uint32_t tag = stack_slot_of(t, h, 0);
    for (size_t i = h & mask; t->stack_slots[i] != 0; i = (i + 1) & mask) {
        uint32_t slot = t->stack_slots[i];
        if ((slot & ~idmask) == tag &&
            stack_node_is(&t->stacks[(slot & idmask) - 1], parent, frame))
            return slot & idmask;
    }
    return 0;
}

static inline void stack_slot_put(gp_trace *t, uint32_t h, uint32_t id)
{
    size_t mask = t->nstack_slots - 1, j = h & mask;
    while (t->stack_slots[j] != 0)
        j = (j + 1) & mask;
    t->stack_slots[j] = stack_slot_of(t, h, id);
}

/* Makes the node and frame arrays and the big table for `nodes` nodes, the scan's count of STACK
 * records: the merge makes at most that many nodes and frames, so none of them ever grows (nor
 * moves; only the frames' hash grows). 0 or -1 (OOM). */
static int stack_table_build(gp_trace *t, size_t nodes)
{
    size_t ns = 256;
    while (ns / 4 * 3 < nodes)
        ns *= 2;
    t->stacks = gp__malloc_big(nodes * sizeof *t->stacks);
    t->stack_kids = gp__malloc_big(nodes * sizeof *t->stack_kids);
    t->frames =
        malloc(nodes * sizeof *t->frames); /* what is touched: as many frames as there are */
    t->nframe_slots = 1024;
    t->frame_slots = calloc(t->nframe_slots, sizeof *t->frame_slots);
    /* Written before it is read (a calloc'd mapping faults every page twice: read, then write),
     * on huge pages where the system allows it: the probes land anywhere in it. */
    t->stack_slots = gp__malloc_big(ns * sizeof *t->stack_slots);
    if (!t->stacks || !t->stack_kids || !t->frames || !t->frame_slots || !t->stack_slots)
        return -1;
    memset(t->stack_slots, 0, ns * sizeof *t->stack_slots);
    t->nstack_slots = ns;
    t->stack_capacity = nodes;
    unsigned bits = 1;
    while (bits < 32 && ((uint64_t)1 << bits) <= nodes)
        bits++;
    t->stack_id_bits = bits;
    return 0;
}

/* Moves the pending nodes into the big table. */
static void stack_flush(gp_trace *t)
{
    size_t n = t->stack_pending_n, mask = t->nstack_slots - 1;
    const uint64_t *pend = t->stack_pending;
    for (size_t i = 0; i < n; i++) {
        if (i + 16 < n)
            __builtin_prefetch(&t->stack_slots[(uint32_t)(pend[i + 16] >> 32) & mask], 1);
        stack_slot_put(t, (uint32_t)(pend[i] >> 32), (uint32_t)pend[i]);
    }
    t->stack_pending_n = 0;
    memset(t->stack_pending_slots, 0, sizeof t->stack_pending_slots);
}

/* The pending node (parent, frame) with hash h, or 0. */
static uint32_t stack_pending_find(const gp_trace *t, uint32_t h, uint32_t parent, uint32_t frame)
{
    size_t mask = GPT_STACK_PENDING * 2 - 1;
    for (size_t i = h & mask; t->stack_pending_slots[i] != 0; i = (i + 1) & mask) {
        uint64_t slot = t->stack_pending_slots[i];
        if ((uint32_t)(slot >> 32) == h &&
            stack_node_is(&t->stacks[(uint32_t)slot - 1], parent, frame))
            return (uint32_t)slot;
    }
    return 0;
}

/* The global id of the node (parent, module, offset), added if new; 0 when there is no room for
 * it: more STACK records than the scan counted, which only a file that changed since has;
 * UINT32_MAX when out of memory. A parent whose children's fingerprint lacks this hash's bit
 * (every node below the first new one of a call chain has no children at all) cannot have this
 * child: no lookup then. */
static uint32_t stack_intern(gp_trace *t, uint32_t parent, uint32_t module, uint64_t offset)
{
    if (t->stack_capacity == 0 || !t->stack_slots)
        return 0;
    uint32_t frame = frame_intern(t, module, offset);
    if (frame == 0)
        return t->nframes == t->stack_capacity ? 0 : UINT32_MAX;
    uint32_t h = stack_hash(parent, frame), id;
    if (parent == 0 || (t->stack_kids[parent - 1] & stack_child_bit(h)) != 0) {
        if ((id = stack_probe(t, h, parent, frame)) != 0)
            return id;
        if (t->stack_pending_n && (id = stack_pending_find(t, h, parent, frame)) != 0)
            return id;
    }
    if (t->nstacks == t->stack_capacity)
        return 0;
    if (t->stack_pending_n == GPT_STACK_PENDING)
        stack_flush(t);
    t->stack_kids[t->nstacks] = 0;
    t->stacks[t->nstacks++] = (stack_node){parent, frame};
    if (parent)
        t->stack_kids[parent - 1] |= stack_child_bit(h);
    id = (uint32_t)t->nstacks;
    uint64_t slot = (uint64_t)h << 32 | id;
    t->stack_pending[t->stack_pending_n++] = slot;
    size_t mask = GPT_STACK_PENDING * 2 - 1, j = h & mask;
    while (t->stack_pending_slots[j] != 0)
        j = (j + 1) & mask;
    t->stack_pending_slots[j] = slot;
    return id;
}

/* Frees what only interning new nodes needs (the node and frame hashes, the children's
 * fingerprints): once the merge has decoded every STACK record the scan counted, or at the end. */
static void stack_interning_done(gp_trace *t)
{
    free(t->stack_slots);
    t->stack_slots = NULL;
    t->nstack_slots = 0;
    free(t->stack_kids);
    t->stack_kids = NULL;
    free(t->frame_slots);
    t->frame_slots = NULL;
    t->nframe_slots = 0;
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
    uint32_t global = id; /* the scan only notes the id as defined */
    if (d->scan)
        d->t->scan_stacks++;
    else if ((global = stack_intern(d->t, parent, module, offset)) == 0)
        return bad(d, "more STACK records than when the file was scanned");
    else if (global == UINT32_MAX)
        return DEC_OOM;
    else if (++d->t->merged_stacks == d->t->scan_stacks)
        stack_interning_done(d->t); /* the file's last STACK record */
    return idtab_put(&d->w->stacks, id, global) == 0 ? DEC_OK : DEC_OOM;
}

/* The records without a time. */
static int dec_definition(decoder *d, unsigned type)
{
    switch (type) {
    case GP_REC_META:
        return dec_meta(d);
    case GP_REC_MODULE:
        return dec_module(d);
    case GP_REC_THREAD:
        return dec_thread(d);
    case GP_REC_STRING:
        return dec_string(d);
    case GP_REC_STACK:
        return dec_stack(d);
    default:
        return bad(d, "unknown record type %u", type);
    }
}

static bool is_event_type(unsigned type)
{
    return type >= GP_REC_ALLOC && type <= GP_REC_NOTE;
}

static const gp_event_kind event_kinds[] = {
    [GP_REC_ALLOC] = GP_EV_ALLOC,
    [GP_REC_FREE] = GP_EV_FREE,
    [GP_REC_TAG] = GP_EV_TAG,
    [GP_REC_REGION_PUSH] = GP_EV_REGION_PUSH,
    [GP_REC_REGION_POP] = GP_EV_REGION_POP,
    [GP_REC_MARK] = GP_EV_MARK,
    [GP_REC_GRAD_MODE] = GP_EV_GRAD_MODE,
    [GP_REC_LOST] = GP_EV_LOST,
    [GP_REC_END] = GP_EV_END,
    [GP_REC_NOTE] = GP_EV_NOTE,
};

/* The fields of an event record after its dt, into ev (already cleared to the defaults). */
static int dec_event_fields(decoder *d, unsigned type, uint8_t flags, gp_event *ev)
{
    int r;
    switch (type) {
    case GP_REC_ALLOC:
        if ((r = get_addr_device(d, flags, ev)) != DEC_OK ||
            (r = get_value(d, &ev->size)) != DEC_OK)
            return r;
        return get_stack_ref(d, &ev->stack, "stack");
    case GP_REC_FREE:
        return get_addr_device(d, flags, ev);
    case GP_REC_TAG: {
        uint32_t category = 0;
        if ((r = get_addr_device(d, flags, ev)) != DEC_OK ||
            (r = get_value(d, &ev->size)) != DEC_OK ||
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
        ev->module_region = (flags & GP_FLAG_MODULE) != 0;
        return get_string_ref(d, &ev->name);
    case GP_REC_MARK:
        return get_string_ref(d, &ev->name);
    case GP_REC_GRAD_MODE:
        ev->grad_enabled = (flags & GP_FLAG_GRAD) != 0;
        ev->inference = (flags & GP_FLAG_INFERENCE) != 0;
        return DEC_OK;
    case GP_REC_LOST:
        return get_varint(d, &ev->count);
    case GP_REC_NOTE: { /* key, value (interned like every string: the trace owns it) */
        uint32_t value = 0;
        if ((r = get_string_ref(d, &ev->name)) != DEC_OK || (r = get_str(d, &value)) != DEC_OK)
            return r;
        ev->detail = string_at(d->t, value);
        return DEC_OK;
    }
    default: /* REGION_POP, END */
        return DEC_OK;
    }
}

static void event_clear(gp_event *ev, unsigned type, uint64_t time, uint32_t thread)
{
    *ev = (gp_event){.kind = event_kinds[type],
                     .time_ns = time,
                     .thread = thread,
                     .device = LP_DEVICE_HOST,
                     .category = LP_CAT_OTHER,
                     .op = "",
                     .module = "",
                     .detail = "",
                     .name = ""};
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
    t->scan_threads++; /* its first event may make a dense index */
    return t->nthreads++;
}

/* ---- errors ---------------------------------------------------------------------------------- */

/* Marks the readable part as ended at the chunk at `off`, for `fmt`'s reason. */
static void damage(gp_trace *t, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void damage(gp_trace *t, uint64_t off, const char *fmt, ...)
{
    t->info.file_bytes = t->regular ? t->limit : t->win_off + t->win_len;
    if (t->info.file_bytes < off)
        t->info.file_bytes = off;
    t->info.damaged = true;
    t->info.damage_offset = off;
    t->info.bytes_lost = t->info.file_bytes - off;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->info.damage_reason, sizeof t->info.damage_reason, fmt, ap);
    va_end(ap);
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
    set_err(err, err_size, "%s", t->fail_msg);
    return -1;
}

/* ---- the scan -------------------------------------------------------------------------------- */

/* Makes file bytes [off, off + n) readable at *p. `off` never goes below an earlier call's and is
 * at most the end of what was read. Returns how many of the n bytes are there (fewer only at the
 * end of the data), or -1 on a read error (errno set). */
static int64_t scan_bytes(gp_trace *t, uint64_t off, size_t n, const uint8_t **p)
{
    if (off + n > t->win_off + t->win_len && !t->win_eof) {
        if (t->regular) { /* slide the window to start at off, then fill it */
            size_t keep = (size_t)(t->win_off + t->win_len - off);
            memmove(t->win, t->win + (off - t->win_off), keep);
            t->win_off = off;
            t->win_len = keep;
            while (t->win_len < t->win_cap && t->win_off + t->win_len < t->limit) {
                uint64_t at = t->win_off + t->win_len;
                uint64_t left = t->limit - at;
                size_t want =
                    t->win_cap - t->win_len < left ? t->win_cap - t->win_len : (size_t)left;
                ssize_t got = pread(t->fd, t->win + t->win_len, want, (off_t)at);
                if (got < 0 && errno == EINTR)
                    continue;
                if (got < 0)
                    return -1;
                if (got == 0) { /* the file shrank */
                    t->limit = at;
                    break;
                }
                t->win_len += (size_t)got;
            }
        } else { /* keep everything: the merge reads its chunks from here */
            size_t need = (size_t)(off + n - t->win_off);
            if (grow((void **)&t->win, &t->win_cap, need, 1) != 0) {
                errno = ENOMEM;
                return -1;
            }
            while (t->win_len < need) {
                ssize_t got = read(t->fd, t->win + t->win_len, t->win_cap - t->win_len);
                if (got < 0 && errno == EINTR)
                    continue;
                if (got < 0)
                    return -1;
                if (got == 0) {
                    t->win_eof = true;
                    break;
                }
                t->win_len += (size_t)got;
            }
        }
    }
    uint64_t end = t->win_off + t->win_len;
    *p = t->win + (off - t->win_off);
    return off >= end ? 0 : (int64_t)(end - off < n ? end - off : n);
}

static int ref_cmp(const void *a, const void *b)
{
    const chunk_ref *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Checks the chunk at h (header + n payload bytes) record by record. Returns DEC_OK, DEC_BAD
 * (reason in d->why, position at d->rec) or DEC_OOM; *slot is its writer's slot. */
static int scan_chunk(gp_trace *t, decoder *d, const uint8_t *h, uint32_t n, size_t *slot,
                      bool *had_events)
{
    d->t = t;
    d->scan = true;
    d->start = d->p = d->rec = h + GP_CHUNK_HEADER_BYTES;
    d->end = d->start + n;
    bool over;
    *slot = thread_slot(t, gp_get_u32(h + 12), &over);
    if (*slot == SIZE_MAX) {
        if (!over)
            return DEC_OOM;
        return bad(d, "more than %u threads", GPT_MAX_WRITER_THREADS);
    }
    d->w = &t->threads[*slot];
    d->time = gp_get_u64(h + 16);
    d->addr = 0;
    *had_events = false;
    gp_event scratch;
    while (d->p < d->end) {
        d->rec = d->p;
        uint8_t b = *d->p++;
        unsigned type = b & GP_REC_TYPE_MASK;
        int r;
        if (is_event_type(type)) {
            *had_events = true;
            r = get_time(d);
            if (r == DEC_OK)
                r = dec_event_fields(d, type, (uint8_t)(b & ~GP_REC_TYPE_MASK), &scratch);
        } else {
            r = dec_definition(d, type);
        }
        if (r != DEC_OK)
            return r;
    }
    return DEC_OK;
}

/* Reads the file once (up to its size at open), checks every chunk and indexes the good ones up
 * to the first bad one. 0, or -1 on a fatal error (message in err). */
static int scan(gp_trace *t, char *err, size_t err_size)
{
    t->scanned = true;
    t->win_cap = t->regular ? GPT_SCAN_WINDOW : (size_t)1 << 20;
    t->win = malloc(t->win_cap);
    if (!t->win)
        return fail(t, err, err_size, "out of memory reading %s", t->path);
    t->win_off = GP_FILE_HEADER_BYTES;
    t->win_len = 0;
    uint64_t off = GP_FILE_HEADER_BYTES;
    decoder d;
    for (;;) {
        const uint8_t *h;
        int64_t got = scan_bytes(t, off, GP_CHUNK_HEADER_BYTES, &h);
        if (got < 0)
            return fail(t, err, err_size, "cannot read %s at byte %" PRIu64 ": %s", t->path, off,
                        strerror(errno));
        if (got == 0)
            break;
        if (got < GP_CHUNK_HEADER_BYTES) {
            damage(t, off, "file ends inside a chunk header (%zu of %d bytes)", (size_t)got,
                   GP_CHUNK_HEADER_BYTES);
            break;
        }
        uint32_t magic = gp_get_u32(h), n = gp_get_u32(h + 4);
        if (magic != GP_CHUNK_MAGIC) {
            damage(t, off, "bad chunk magic 0x%08" PRIx32, magic);
            break;
        }
        if (n > GP_CHUNK_MAX_PAYLOAD) {
            damage(t, off, "chunk payload of %" PRIu32 " bytes over the limit of %u", n,
                   GP_CHUNK_MAX_PAYLOAD);
            break;
        }
        got = scan_bytes(t, off, GP_CHUNK_HEADER_BYTES + (size_t)n, &h);
        if (got < 0)
            return fail(t, err, err_size, "cannot read %s at byte %" PRIu64 ": %s", t->path,
                        off + GP_CHUNK_HEADER_BYTES, strerror(errno));
        if (got < GP_CHUNK_HEADER_BYTES + (int64_t)n) {
            damage(t, off, "file ends inside a chunk (%zu of %" PRIu32 " payload bytes)",
                   (size_t)got - GP_CHUNK_HEADER_BYTES, n);
            break;
        }
        uint32_t crc = gp_crc32c(0, h + 12, GP_CHUNK_HEADER_BYTES - 12);
        crc = gp_crc32c(crc, h + GP_CHUNK_HEADER_BYTES, n);
        if (crc != gp_get_u32(h + 8)) {
            damage(t, off, "chunk checksum mismatch");
            break;
        }
        size_t slot = 0;
        bool had_events = false;
        uint64_t stacks_before = t->scan_stacks;
        int r = scan_chunk(t, &d, h, n, &slot, &had_events);
        if (r == DEC_OOM)
            return fail(t, err, err_size, "out of memory reading %s", t->path);
        if (r == DEC_BAD) {
            t->scan_stacks = stacks_before;
            damage(t, off, "bad record at payload byte %zu: %s", (size_t)(d.rec - d.start), d.why);
            break;
        }
        if (grow((void **)&t->index, &t->index_cap, t->nindex + 1, sizeof *t->index) != 0)
            return fail(t, err, err_size, "out of memory reading %s", t->path);
        wthread *w = &t->threads[slot];
        uint64_t base = gp_get_u64(h + 16);
        uint64_t key = base > w->last_key ? base : w->last_key;
        w->last_key = key;
        t->index[t->nindex++] = (chunk_ref){key, off, (uint32_t)slot, n};
        /* Only chunks with events: definition-only chunks (META, MODULE) may carry base time 0. */
        if (had_events && (!t->have_min_base || base < t->min_base_ns)) {
            t->have_min_base = true;
            t->min_base_ns = base;
        }
        off += GP_CHUNK_HEADER_BYTES + n;
        t->info.chunks++;
    }
    if (!t->regular)
        t->info.file_bytes = t->win_off + t->win_len;
    if (t->regular) {
        free(t->win);
        t->win = NULL;
        t->win_cap = t->win_len = 0;
    }
    if (t->scan_stacks > 0 &&
        stack_table_build(t, t->scan_stacks < GPT_MAX_GLOBAL ? (size_t)t->scan_stacks
                                                             : GPT_MAX_GLOBAL) != 0)
        return fail(t, err, err_size, "out of memory reading %s", t->path);
    for (size_t i = 0; i < t->nthreads; i++) { /* the merge fills them again, with values */
        idtab_reset(&t->threads[i].strings);
        idtab_reset(&t->threads[i].stacks);
    }
    bool sorted = true;
    for (size_t i = 1; i < t->nindex && sorted; i++)
        sorted = ref_cmp(&t->index[i - 1], &t->index[i]) <= 0;
    if (!sorted)
        qsort(t->index, t->nindex, sizeof *t->index, ref_cmp);
    return 0;
}

/* ---- the merge ------------------------------------------------------------------------------- */

/* Whether cursor a's next event goes before b's: time, then dense thread. (Two open cursors are
 * of two writers, so of two dense threads.) */
static inline bool head_less(const cursor *a, const cursor *b)
{
    if (a->head_time != b->head_time)
        return a->head_time < b->head_time;
    return a->head_thread < b->head_thread;
}

static void heap_up(gp_trace *t, size_t pos)
{
    cursor *c = t->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!head_less(c, t->heap[parent]))
            break;
        t->heap[pos] = t->heap[parent];
        pos = parent;
    }
    t->heap[pos] = c;
}

static void heap_down(gp_trace *t, size_t pos)
{
    cursor *c = t->heap[pos];
    for (;;) {
        size_t k = 2 * pos + 1;
        if (k >= t->nheap)
            break;
        if (k + 1 < t->nheap && head_less(t->heap[k + 1], t->heap[k]))
            k++;
        if (!head_less(t->heap[k], c))
            break;
        t->heap[pos] = t->heap[k];
        pos = k;
    }
    t->heap[pos] = c;
}

static int heap_push(gp_trace *t, cursor *c)
{
    if (grow((void **)&t->heap, &t->heap_cap, t->nheap + 1, sizeof *t->heap) != 0)
        return -1;
    t->heap[t->nheap++] = c;
    heap_up(t, t->nheap - 1);
    return 0;
}

static void heap_pop(gp_trace *t)
{
    t->heap[0] = t->heap[--t->nheap];
    if (t->nheap > 0)
        heap_down(t, 0);
}

static cursor *cursor_new(gp_trace *t)
{
    cursor *c = t->free_cursors;
    if (c) {
        t->free_cursors = c->next_free;
        return c;
    }
    if (grow((void **)&t->cursors, &t->cursors_cap, t->ncursors + 1, sizeof *t->cursors) != 0)
        return NULL;
    c = calloc(1, sizeof *c);
    if (c)
        t->cursors[t->ncursors++] = c;
    return c;
}

static void cursor_release(gp_trace *t, cursor *c)
{
    c->next_free = t->free_cursors;
    t->free_cursors = c;
}

/* A chunk that passed the scan no longer decodes (or memory ran out). Returns -1. */
static int merge_failed(gp_trace *t, const cursor *c, int r, char *err, size_t err_size)
{
    if (r == DEC_OOM)
        return fail(t, err, err_size, "out of memory reading %s", t->path);
    return fail(t, err, err_size,
                "%s changed while it was read: the chunk at byte %" PRIu64
                " no longer decodes (payload byte %zu: %s)",
                t->path, c->off, (size_t)(c->d.rec - c->d.start), c->d.why);
}

/* Reads chunk `ref` into c and makes it its writer's active chunk. 0 or -1 (message in err). */
static int cursor_load(gp_trace *t, cursor *c, const chunk_ref *ref, char *err, size_t err_size)
{
    wthread *w = &t->threads[ref->slot];
    size_t total = GP_CHUNK_HEADER_BYTES + (size_t)ref->bytes;
    const uint8_t *h;
    if (t->regular) {
        if (c->cap < total) {
            size_t cap =
                total < 65536 + GP_CHUNK_HEADER_BYTES ? 65536 + GP_CHUNK_HEADER_BYTES : total;
            uint8_t *b = malloc(cap);
            if (!b)
                return fail(t, err, err_size, "out of memory reading %s", t->path);
            free(c->buf);
            c->buf = b;
            c->cap = cap;
        }
        size_t have = 0;
        while (have < total) {
            ssize_t got = pread(t->fd, c->buf + have, total - have, (off_t)(ref->off + have));
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                return fail(t, err, err_size, "cannot read %s at byte %" PRIu64 ": %s", t->path,
                            ref->off + have, strerror(errno));
            if (got == 0)
                return fail(t, err, err_size,
                            "%s changed while it was read: it ends at byte %" PRIu64
                            ", inside a chunk read before",
                            t->path, ref->off + have);
            have += (size_t)got;
        }
        h = c->buf;
    } else {
        h = t->win + (ref->off - t->win_off);
    }
    if (gp_get_u32(h) != GP_CHUNK_MAGIC || gp_get_u32(h + 4) != ref->bytes ||
        gp_get_u32(h + 12) != w->writer)
        return fail(t, err, err_size,
                    "%s changed while it was read: the chunk at byte %" PRIu64 " is another one",
                    t->path, ref->off);
    decoder *d = &c->d;
    d->t = t;
    d->w = w;
    d->scan = false;
    d->start = d->p = d->rec = h + GP_CHUNK_HEADER_BYTES;
    d->end = d->start + ref->bytes;
    d->time = gp_get_u64(h + 16);
    d->addr = 0;
    c->off = ref->off;
    if (w->last_time < ref->key) /* nothing of it goes before its key */
        w->last_time = ref->key;
    w->active = c;
    return 0;
}

/* Decodes c up to its next event, applying the definitions before it: *has says whether there is
 * one (its time, thread and type in c->head_*; c->d.p just past its dt). DEC_OK or an error. */
static inline int cursor_advance(cursor *c, bool *has)
{
    decoder *d = &c->d;
    while (d->p < d->end) {
        d->rec = d->p;
        uint8_t b = *d->p++;
        unsigned type = b & GP_REC_TYPE_MASK;
        int r;
        if (is_event_type(type)) {
            if ((r = get_time(d)) != DEC_OK || (r = assign_dense(d)) != DEC_OK)
                return r;
            wthread *w = d->w;
            if (d->time > w->last_time)
                w->last_time = d->time;
            c->head_time = w->last_time;
            c->head_thread = w->dense;
            c->head_byte = b;
            *has = true;
            return DEC_OK;
        }
        if ((r = dec_definition(d, type)) != DEC_OK)
            return r;
    }
    *has = false;
    return DEC_OK;
}

/* Starts writer w's chunk at index position i, and after it, while a chunk holds no event, the
 * writer's next waiting one. 0 or -1 (message in err). */
static int chunk_start(gp_trace *t, wthread *w, size_t i, char *err, size_t err_size)
{
    for (;;) {
        cursor *c = cursor_new(t);
        if (!c)
            return fail(t, err, err_size, "out of memory reading %s", t->path);
        if (cursor_load(t, c, &t->index[i], err, err_size) != 0) {
            cursor_release(t, c);
            return -1;
        }
        bool has = false;
        int r = cursor_advance(c, &has);
        if (r != DEC_OK)
            return merge_failed(t, c, r, err, err_size);
        if (has) {
            if (heap_push(t, c) != 0)
                return fail(t, err, err_size, "out of memory reading %s", t->path);
            return 0;
        }
        w->active = NULL;
        cursor_release(t, c);
        if (w->nwaiting == 0)
            return 0;
        i = w->waiting[w->waiting_head++];
        if (--w->nwaiting == 0)
            w->waiting_head = 0;
    }
}

/* Opens the next chunk in (key, offset) order: starts it, or queues it behind its writer's
 * active chunk. 0 or -1 (message in err). */
static int chunk_open(gp_trace *t, char *err, size_t err_size)
{
    size_t i = t->next_chunk++;
    wthread *w = &t->threads[t->index[i].slot];
    if (!w->active)
        return chunk_start(t, w, i, err, err_size);
    size_t at = w->waiting_head + w->nwaiting;
    if (grow((void **)&w->waiting, &w->waiting_cap, at + 1, sizeof *w->waiting) != 0)
        return fail(t, err, err_size, "out of memory reading %s", t->path);
    w->waiting[at] = i;
    w->nwaiting++;
    return 0;
}

/* At the end of the stream: frees what only decoding needed (the stack hash, the per-thread id
 * tables, the chunk buffers and the index); the tables the accessors read stay. */
static void release_decoding(gp_trace *t)
{
    if (t->released)
        return;
    t->released = true;
    stack_interning_done(t);
    for (size_t i = 0; i < t->nthreads; i++) {
        idtab_free(&t->threads[i].strings);
        idtab_free(&t->threads[i].stacks);
        free(t->threads[i].waiting);
        t->threads[i].waiting = NULL;
        t->threads[i].nwaiting = t->threads[i].waiting_head = t->threads[i].waiting_cap = 0;
    }
    for (size_t i = 0; i < t->ncursors; i++) {
        free(t->cursors[i]->buf);
        t->cursors[i]->buf = NULL;
        t->cursors[i]->cap = 0;
    }
    free(t->index);
    t->index = NULL;
    t->nindex = t->index_cap = t->next_chunk = 0;
    free(t->win); /* a pipe's bytes, kept for the merge */
    t->win = NULL;
    t->win_cap = t->win_len = 0;
}

/* Decodes the next event in time order into ev; deliver() accounts for it. 1, 0 at the end (the
 * decoding state is released then), or -1 (message in err). */
static int produce(gp_trace *t, gp_event *ev, char *err, size_t err_size)
{
    /* Open every chunk that may hold an event at or before the least next event now open:
     * after that, nothing not yet open can go before it. */
    while (t->next_chunk < t->nindex &&
           (t->nheap == 0 || t->index[t->next_chunk].key <= t->heap[0]->head_time)) {
        if (chunk_open(t, err, err_size) != 0)
            return -1;
    }
    if (t->nheap == 0) {
        release_decoding(t);
        return 0;
    }
    cursor *c = t->heap[0];
    unsigned type = c->head_byte & GP_REC_TYPE_MASK;
    event_clear(ev, type, c->head_time, c->head_thread);
    bool has = false;
    int r = dec_event_fields(&c->d, type, (uint8_t)(c->head_byte & ~GP_REC_TYPE_MASK), ev);
    if (r == DEC_OK)
        r = cursor_advance(c, &has);
    if (r != DEC_OK)
        return merge_failed(t, c, r, err, err_size);
    if (has) {
        heap_down(t, 0);
    } else { /* consumed: the writer's next chunk, if one is waiting, takes its place */
        heap_pop(t);
        wthread *w = c->d.w;
        w->active = NULL;
        cursor_release(t, c);
        if (w->nwaiting > 0) {
            size_t i = w->waiting[w->waiting_head++];
            if (--w->nwaiting == 0)
                w->waiting_head = 0;
            if (chunk_start(t, w, i, err, err_size) != 0)
                return -1;
        }
    }
    if (!t->start_fixed) {
        t->start_fixed = true;
        t->start_ns = t->have_meta_start ? t->meta_start_ns : t->min_base_ns;
    }
    ev->time_ns = ev->time_ns >= t->start_ns ? ev->time_ns - t->start_ns : 0;
    return 1;
}

/* Counts an event the caller receives. */
static void deliver(gp_trace *t, const gp_event *ev)
{
    t->info.events++;
    if (ev->kind == GP_EV_LOST)
        t->info.lost_events = ev->count > UINT64_MAX - t->info.lost_events
                                  ? UINT64_MAX
                                  : t->info.lost_events + ev->count;
    else if (ev->kind == GP_EV_END)
        t->info.clean_end = true;
}

/* ---- readahead (see "what the accessors show") ----------------------------------------------- */

/* The merge's thread: fills batches until the stream ends or fails, or stop is set. */
static void *ra_main(void *arg)
{
    gp_trace *t = arg;
    ra_state *ra = t->ra;
    pthread_setname_np(pthread_self(), "gptrace-ahead"); /* for top -H, perf, gdb */
    for (size_t k = 0;; k++) {
        pthread_mutex_lock(&ra->mu);
        while (k - ra->taken == RA_BATCHES && !ra->stop) {
            ra->merge_waits = true;
            pthread_cond_wait(&ra->to_merge, &ra->mu);
        }
        ra->merge_waits = false;
        bool stop = ra->stop;
        pthread_mutex_unlock(&ra->mu);
        if (stop)
            return NULL;
        ra_batch *b = &ra->batches[k % RA_BATCHES];
        b->n = b->nchanges = 0;
        ra->fill = b;
        int r = 1;
        while (r == 1 && b->n < RA_BATCH) {
            r = produce(t, &b->ev[b->n], ra->err, sizeof ra->err);
            if (r == 1)
                b->nstacks[b->n++] = (uint32_t)t->nstacks;
        }
        b->end = r;
        b->end_nstacks = (uint32_t)t->nstacks;
        pthread_mutex_lock(&ra->mu);
        ra->filled = k + 1;
        if (ra->reader_waits && (r != 1 || ra->filled - ra->taken >= RA_WAKE))
            pthread_cond_signal(&ra->to_reader);
        pthread_mutex_unlock(&ra->mu);
        if (r != 1)
            return NULL;
    }
}

/* Starts the merge's thread. 0, or -1 (the caller then decodes on its own thread). */
static int ra_start(gp_trace *t)
{
    ra_state *ra = calloc(1, sizeof *ra);
    if (!ra)
        return -1;
    pthread_mutex_init(&ra->mu, NULL);
    pthread_cond_init(&ra->to_merge, NULL);
    pthread_cond_init(&ra->to_reader, NULL);
    t->ra = ra;
    if (gp__start_quiet_thread(&ra->thread, ra_main, t) != 0) {
        t->ra = NULL;
        pthread_cond_destroy(&ra->to_reader);
        pthread_cond_destroy(&ra->to_merge);
        pthread_mutex_destroy(&ra->mu);
        free(ra);
        return -1;
    }
    return 0;
}

/* Stops the merge's thread (at once if it is still decoding) and frees the batches. */
static void ra_stop(gp_trace *t)
{
    ra_state *ra = t->ra;
    pthread_mutex_lock(&ra->mu);
    ra->stop = true;
    pthread_cond_signal(&ra->to_merge);
    pthread_mutex_unlock(&ra->mu);
    pthread_join(ra->thread, NULL);
    for (size_t i = 0; i < RA_BATCHES; i++)
        free(ra->batches[i].changes);
    pthread_cond_destroy(&ra->to_reader);
    pthread_cond_destroy(&ra->to_merge);
    pthread_mutex_destroy(&ra->mu);
    free(ra);
    t->ra = NULL;
}

/* gp_trace_next with readahead: the next event of the merge's batches, after the changes made
 * with it. At the end of the stream the thread is gone and the trace reads as without. */
static int ra_next(gp_trace *t, gp_event *ev, char *err, size_t err_size)
{
    ra_state *ra = t->ra;
    if (!ra->read) {
        pthread_mutex_lock(&ra->mu);
        while (ra->filled == ra->taken) {
            ra->reader_waits = true;
            pthread_cond_wait(&ra->to_reader, &ra->mu);
        }
        ra->reader_waits = false;
        pthread_mutex_unlock(&ra->mu);
        ra->read = &ra->batches[ra->taken % RA_BATCHES];
        ra->pos = ra->next_change = 0;
    }
    ra_batch *b = ra->read;
    for (; ra->next_change < b->nchanges && b->changes[ra->next_change].at == ra->pos;
         ra->next_change++) {
        if (apply(&t->shown, &b->changes[ra->next_change]) != 0) {
            ra_stop(t);
            return fail(t, err, err_size, "out of memory reading %s", t->path);
        }
    }
    if (ra->pos < b->n) {
        *ev = b->ev[ra->pos];
        t->shown.nstacks = b->nstacks[ra->pos++];
        if (ra->pos == b->n && b->end == 1) { /* done with it: the merge may fill it again */
            ra->read = NULL;
            pthread_mutex_lock(&ra->mu);
            ra->taken++;
            if (ra->merge_waits && ra->filled - ra->taken <= RA_BATCHES - RA_WAKE)
                pthread_cond_signal(&ra->to_merge);
            pthread_mutex_unlock(&ra->mu);
        }
        deliver(t, ev);
        return 1;
    }
    int r = b->end; /* the stream ended or failed (t->failed and t->fail_msg set by the merge) */
    t->shown.nstacks = b->end_nstacks;
    ra_stop(t);
    if (r < 0)
        set_err(err, err_size, "%s", t->fail_msg);
    return r;
}

/* ---- the API --------------------------------------------------------------------------------- */

/* Reads up to n bytes at the start of the file; the count, or -1 (errno set). */
static ssize_t read_head(int fd, bool regular, uint8_t *p, size_t n)
{
    size_t have = 0;
    while (have < n) {
        ssize_t got =
            regular ? pread(fd, p + have, n - have, (off_t)have) : read(fd, p + have, n - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return -1;
        if (got == 0)
            break;
        have += (size_t)got;
    }
    return (ssize_t)have;
}

int gp_trace_open(const char *path, gp_trace **out, char *err, size_t err_size)
{
    if (out)
        *out = NULL;
    if (!path || !out) {
        set_err(err, err_size, "gp_trace_open: no %s given", path ? "result pointer" : "path");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, err_size, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, err_size, "cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        set_err(err, err_size, "%s is a directory, not a gradprof trace", path);
        close(fd);
        return -1;
    }
    bool regular = S_ISREG(st.st_mode);
    uint8_t hdr[GP_FILE_HEADER_BYTES];
    ssize_t r = read_head(fd, regular, hdr, sizeof hdr);
    if (r < 0) {
        set_err(err, err_size, "cannot read %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t got = (size_t)r;
    if (got == 0) {
        set_err(err, err_size, "%s is empty", path);
        close(fd);
        return -1;
    }
    if (got < sizeof hdr || memcmp(hdr, GP_FILE_MAGIC, 8) != 0) {
        if (got < sizeof hdr && memcmp(hdr, GP_FILE_MAGIC, got < 8 ? got : 8) == 0)
            set_err(err, err_size, "%s is not a gradprof trace (only %zu bytes, the header is %d)",
                    path, got, GP_FILE_HEADER_BYTES);
        else
            set_err(err, err_size, "%s is not a gradprof trace (bad magic)", path);
        close(fd);
        return -1;
    }
    uint16_t major = (uint16_t)(hdr[8] | hdr[9] << 8), minor = (uint16_t)(hdr[10] | hdr[11] << 8);
    if (major != GP_VERSION_MAJOR) {
        set_err(err, err_size,
                "%s has trace format version %u.%u; this reader reads version %d.x only", path,
                major, minor, GP_VERSION_MAJOR);
        close(fd);
        return -1;
    }
    gp_trace *t = calloc(1, sizeof *t);
    size_t plen = strlen(path);
    if (t) {
        t->fd = -1;
        t->path = malloc(plen + 1);
    }
    uint32_t empty;
    if (!t || !t->path || strtab_intern(&t->strings, (const uint8_t *)"", 0, &empty)) {
        set_err(err, err_size, "out of memory opening %s", path);
        close(fd);
        gp_trace_close(t);
        return -1;
    }
    memcpy(t->path, path, plen + 1);
    t->fd = fd;
    t->regular = regular;
    t->limit = regular ? (uint64_t)st.st_size : 0;
    t->info.version_major = major;
    t->info.version_minor = minor;
    t->info.file_bytes = regular ? (uint64_t)st.st_size : 0;
    *out = t;
    return 0;
}

void gp_trace_close(gp_trace *t)
{
    if (!t)
        return;
    if (t->ra)
        ra_stop(t);
    if (t->fd >= 0)
        close(t->fd);
    for (size_t i = 0; i < t->nthreads; i++) {
        idtab_free(&t->threads[i].strings);
        idtab_free(&t->threads[i].stacks);
        free(t->threads[i].waiting);
    }
    for (size_t i = 0; i < t->ncursors; i++) {
        free(t->cursors[i]->buf);
        free(t->cursors[i]);
    }
    free(t->cursors);
    free(t->heap);
    free(t->index);
    free(t->win);
    free(t->threads);
    idmap_free(&t->thread_by_writer);
    strtab_free(&t->strings);
    shown_free(&t->shown);
    free(t->stacks);
    free(t->frames);
    stack_interning_done(t);
    free(t->path);
    free(t);
}

int gp_trace_readahead(gp_trace *t)
{
    if (!t || t->scanned)
        return -1;
    cpu_set_t cpus; /* on one CPU the two threads would only take turns */
    t->want_readahead = sched_getaffinity(0, sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) >= 2;
    return t->want_readahead ? 1 : 0;
}

int gp_trace_scan(gp_trace *t, char *err, size_t err_size)
{
    if (!t) {
        set_err(err, err_size, "gp_trace_scan: no trace given");
        return -1;
    }
    if (t->failed) {
        set_err(err, err_size, "%s", t->fail_msg);
        return -1;
    }
    return t->scanned ? 0 : scan(t, err, err_size);
}

int gp_trace_next(gp_trace *t, gp_event *ev, char *err, size_t err_size)
{
    if (!t || !ev) {
        set_err(err, err_size, "gp_trace_next: no %s given", t ? "event" : "trace");
        return -1;
    }
    if (t->ra)
        return ra_next(t, ev, err, err_size);
    if (gp_trace_scan(t, err, err_size) != 0)
        return -1;
    if (t->want_readahead) { /* the first event: the merge's thread starts */
        t->want_readahead = false;
        if (ra_start(t) == 0)
            return ra_next(t, ev, err, err_size);
    }
    int r = produce(t, ev, err, err_size);
    t->shown.nstacks = t->nstacks;
    if (r == 1)
        deliver(t, ev);
    return r;
}

const gp_trace_info *gp_trace_info_get(const gp_trace *t)
{
    return t ? &t->info : NULL;
}

const char *gp_trace_meta(const gp_trace *t, const char *key)
{
    if (!t || !key)
        return NULL;
    for (size_t i = 0; i < t->shown.nmeta; i++)
        if (strcmp(t->shown.meta[i].key, key) == 0)
            return t->shown.meta[i].value;
    return NULL;
}

size_t gp_trace_module_count(const gp_trace *t)
{
    return t ? t->shown.nmodules : 0;
}

const gp_module *gp_trace_module(const gp_trace *t, uint32_t id)
{
    if (!t || id == 0 || id > t->shown.nmodules || !t->shown.modules[id - 1].path)
        return NULL;
    return &t->shown.modules[id - 1];
}

int gp_trace_stack_frame(const gp_trace *t, uint32_t stack, uint32_t *module, uint64_t *offset,
                         uint32_t *parent)
{
    if (!t || stack == 0 || stack > t->shown.nstacks)
        return -1;
    const stack_node *s = &t->stacks[stack - 1];
    const frame_rec *f = &t->frames[s->frame - 1];
    if (module)
        *module = f->module;
    if (offset)
        *offset = f->offset;
    if (parent)
        *parent = s->parent;
    return 0;
}

int gp_trace_stack_node(const gp_trace *t, uint32_t stack, uint32_t *frame, uint32_t *parent)
{
    if (!t || stack == 0 || stack > t->shown.nstacks)
        return -1;
    *frame = t->stacks[stack - 1].frame;
    *parent = t->stacks[stack - 1].parent;
    return 0;
}

int gp_trace_frame(const gp_trace *t, uint32_t frame, uint32_t *module, uint64_t *offset)
{
    if (!t || frame == 0 || frame > __atomic_load_n(&t->nframes, __ATOMIC_ACQUIRE))
        return -1;
    *module = t->frames[frame - 1].module;
    *offset = t->frames[frame - 1].offset;
    return 0;
}

size_t gp_trace_stack_count(const gp_trace *t)
{
    return t ? t->shown.nstacks : 0;
}

const char *gp_trace_thread_name(const gp_trace *t, uint32_t thread)
{
    if (!t || thread == 0 || thread > t->shown.nthreads)
        return NULL;
    return t->shown.threads[thread - 1].name;
}

uint64_t gp_trace_thread_os_tid(const gp_trace *t, uint32_t thread)
{
    if (!t || thread == 0 || thread > t->shown.nthreads)
        return 0;
    return t->shown.threads[thread - 1].os_tid;
}

uint32_t gp_trace_thread_count(const gp_trace *t)
{
    return t ? (uint32_t)t->shown.nthreads : 0;
}
