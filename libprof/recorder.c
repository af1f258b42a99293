/*
 * The recorder: encodes events into per-thread buffers and writes them as checksummed chunks of a
 * trace file (gradprof/trace_format.h).
 *
 * Threads. Each thread owns a buffer and its own string and stack tables (ids in the trace are per
 * thread), so the event path takes no global lock: only a per-buffer flag that the background
 * flusher also takes, briefly, to write out a buffer that sat idle. Chunks are written with one
 * writev(2) on an O_APPEND file, so writers never tear each other's chunks.
 *
 * Living inside someone else's program. Nothing the program does may change it, nor make the
 * recorder write anywhere but its trace:
 *  - Descriptors: the trace is moved to a high descriptor number at creation (out of the way of
 *    `cmd 3>file` and of dup2 onto low numbers), and before each chunk is written (one fstat per
 *    chunk, never per event) the descriptor is checked to still be the file this recorder created
 *    (device and inode). If the program closed it (a closefrom loop, close_range) or put another
 *    file on its number, the trace is reopened by path (O_APPEND | O_NOFOLLOW, same inode
 *    required) and recording goes on; buffered events are not lost. If the path no longer names
 *    that file, recording stops with one warning. The window left: a descriptor replaced between
 *    the fstat and the writev of one chunk.
 *  - Cancellation: no write, open or shared lock of the recorder runs with cancellation enabled
 *    (a deferred pthread_cancel acting inside the recorder's writev unwound out of it with its
 *    buffer held). Writes, file creation, module rescans and new thread states disable it
 *    (per chunk, per module, per thread); once the program has called pthread_cancel (the preload
 *    library sees it), stack unwinding does too (per allocation with a stack: libunwind may make
 *    system calls and takes the loader's lock). What is left of the event path touches only the
 *    thread's own state, which its thread-exit hook takes back whatever happened.
 *  - Thread exit: the recorder's thread-specific-data destructor flushes the thread's buffer but
 *    leaves the thread recording, so that destructors that run after it (other keys, later
 *    rounds, libc's own clean-up) are recorded too; the flusher writes the rest and recycles the
 *    state once the kernel says the thread is gone (tgkill(tid, 0) fails with ESRCH).
 *  - No spin that a dead or interrupted holder could leave held forever: a buffer flag left set
 *    by its own thread is taken back by that thread (its thread-exit hook included), the flusher
 *    never waits for one, and lp_flush waits for others only a bounded time (500 ms in all).
 *
 * Time. Each thread's records are strictly increasing in time (a record stamped no later than the
 * previous one gets the previous time + 1 ns). A free is stamped before the block is given back
 * to the allocator and an allocation after the allocator returned it, so across threads too the
 * free of an address comes before any allocation that reuses it (trace_format.h, "Ordering").
 * While one thread alone records, its stamps come from the TSC without waiting for earlier
 * instructions, never later than the instants they stand for (lp__event_time).
 *
 * Memory. Everything here comes from mmap: the recorder never calls malloc, so it neither recurses
 * into the interposer nor shows up in the program's heap. Tables grow by doubling.
 *
 * Stacks. Return addresses come from the first of three walks that can answer: the frame-pointer
 * walk (for a walk checked once against the others, below), the walk by call-frame information
 * (cfi.h: the rules cached per thread by return address), libunwind's unw_backtrace (or a test's
 * unwinder) for what neither can do. New frames are turned into (module id, offset) with the
 * module map (dl_iterate_phdr), and the chain is stored once as nodes of a calling-context tree,
 * so an allocation costs one hash lookup of its whole stack once that stack has been seen.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/prctl.h>
#include <x86intrin.h>
#define LP__HAVE_TSC 1
#else
#define LP__HAVE_TSC 0
#endif

#include "cfi.h"
#include "gradprof/trace_format.h"
#include "pyframes.h"
#include "recorder.h"

#define LP__BUF_BYTES (64u * 1024)  /* a thread's chunk payload */
#define LP__MAX_RECORD 256          /* bytes reserved for one fixed-size record */
#define LP__VERSION "0.1.0"

/* ---- mmap-backed memory ---------------------------------------------------------------------- */

static void *lp__map_pages(size_t bytes)
{
    int saved_errno = errno;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    /* A big table is probed at random: huge pages spare a TLB miss per probe (where the kernel
     * gives them only when asked). */
    if (p != MAP_FAILED && bytes >= (4u << 20))
        madvise(p, bytes, MADV_HUGEPAGE);
    errno = saved_errno;
    return p == MAP_FAILED ? NULL : p;
}

static void lp__unmap_pages(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* An open-addressing hash map from a 128-bit key (k1, k2) to a 64-bit value; k1 == 0 && k2 == 0
 * marks an empty slot, so callers never use that key. */
typedef struct lp__map {
    struct lp__slot {
        uint64_t k1, k2, value;
    } *slots;
    size_t cap, len;
} lp__map;

static uint64_t lp__mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool lp__map_get(const lp__map *m, uint64_t k1, uint64_t k2, uint64_t *value)
{
    if (!m->cap)
        return false;
    size_t mask = m->cap - 1;
    for (size_t i = lp__mix(k1 ^ lp__mix(k2)) & mask;; i = (i + 1) & mask) {
        const struct lp__slot *s = &m->slots[i];
        if (s->k1 == k1 && s->k2 == k2) {
            *value = s->value;
            return true;
        }
        if (!s->k1 && !s->k2)
            return false;
    }
}

static bool lp__map_grow(lp__map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    struct lp__slot *slots = lp__map_pages(cap * sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < m->cap; i++) {
        struct lp__slot *s = &m->slots[i];
        if (!s->k1 && !s->k2)
            continue;
        size_t j = lp__mix(s->k1 ^ lp__mix(s->k2)) & (cap - 1);
        while (slots[j].k1 || slots[j].k2)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    lp__unmap_pages(m->slots, m->cap * sizeof *m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

/* Adds (k1, k2) -> value; the key must not be in m (a second entry under it would never be
 * found, only probed past). False when out of memory. */
static bool lp__map_put(lp__map *m, uint64_t k1, uint64_t k2, uint64_t value)
{
    if ((m->len + 1) * 4 > m->cap * 3 && !lp__map_grow(m))
        return false;
    size_t mask = m->cap - 1;
    size_t i = lp__mix(k1 ^ lp__mix(k2)) & mask;
    while (m->slots[i].k1 || m->slots[i].k2)
        i = (i + 1) & mask;
    m->slots[i] = (struct lp__slot){k1, k2, value};
    m->len++;
    return true;
}

static void lp__map_clear(lp__map *m)
{
    lp__unmap_pages(m->slots, m->cap * sizeof *m->slots);
    *m = (lp__map){0};
}

/* The same for the stack tables, which hold the most entries: a 96-bit key (k1, k2) whose k1 is
 * never 0 (a hash | 1; k1 == 0 marks an empty slot) to a 32-bit stack id, in 16-byte slots. */
typedef struct lp__idmap {
    struct lp__idslot {
        uint64_t k1;
        uint32_t k2, id;
    } *slots;
    size_t cap, len;
} lp__idmap;

static size_t lp__idmap_at(const lp__idmap *m, uint64_t k1, uint32_t k2)
{
    return lp__mix(k1 ^ k2) & (m->cap - 1);
}

static bool lp__idmap_get(const lp__idmap *m, uint64_t k1, uint32_t k2, uint32_t *id)
{
    if (!m->cap)
        return false;
    for (size_t i = lp__idmap_at(m, k1, k2);; i = (i + 1) & (m->cap - 1)) {
        const struct lp__idslot *s = &m->slots[i];
        if (s->k1 == k1 && s->k2 == k2) {
            *id = s->id;
            return true;
        }
        if (!s->k1)
            return false;
    }
}

/* Starts loading the slot where (k1, k2) is probed first (an lp__idmap_get follows). */
static void lp__idmap_prefetch(const lp__idmap *m, uint64_t k1, uint32_t k2)
{
    if (m->cap)
        __builtin_prefetch(&m->slots[lp__idmap_at(m, k1, k2)]);
}

static bool lp__idmap_put(lp__idmap *m, uint64_t k1, uint32_t k2, uint32_t id)
{
    if ((m->len + 1) * 4 > m->cap * 3) {
        lp__idmap grown = {lp__map_pages((m->cap ? 2 * m->cap : 1024) * sizeof *m->slots),
                           m->cap ? 2 * m->cap : 1024, m->len};
        if (!grown.slots)
            return false;
        for (size_t i = 0; i < m->cap; i++) {
            const struct lp__idslot *s = &m->slots[i];
            if (!s->k1)
                continue;
            size_t j = lp__idmap_at(&grown, s->k1, s->k2);
            while (grown.slots[j].k1)
                j = (j + 1) & (grown.cap - 1);
            grown.slots[j] = *s;
        }
        lp__unmap_pages(m->slots, m->cap * sizeof *m->slots);
        *m = grown;
    }
    size_t i = lp__idmap_at(m, k1, k2);
    while (m->slots[i].k1)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = (struct lp__idslot){k1, k2, id};
    m->len++;
    return true;
}

static void lp__idmap_clear(lp__idmap *m)
{
    lp__unmap_pages(m->slots, m->cap * sizeof *m->slots);
    *m = (lp__idmap){0};
}

/* One step of the 128-bit hash of a sequence of words (return addresses, frame keys), kept as two
 * running 64-bit halves (a, b); lp__mix makes them final. */
static inline void lp__hash_step(uint64_t *a, uint64_t *b, uint64_t word)
{
    *a = (*a ^ word) * 0xff51afd7ed558ccdull;
    *b = (*b + word) * 0xc4ceb9fe1a85ec53ull;
}

/* 128-bit FNV-style hash of bytes, as two 64-bit halves (never both 0). */
static void lp__hash_bytes(const void *data, size_t n, uint64_t *h1, uint64_t *h2)
{
    const uint8_t *p = data;
    uint64_t a = 0xcbf29ce484222325ull ^ n, b = 0x84222325cbf29ce4ull + n;
    for (size_t i = 0; i < n; i++) {
        a = (a ^ p[i]) * 0x100000001b3ull;
        b = (b + p[i]) * 0xff51afd7ed558ccdull;
        b ^= b >> 29;
    }
    *h1 = lp__mix(a) | 1; /* never 0 */
    *h2 = lp__mix(b);
}

/* ---- global state ---------------------------------------------------------------------------- */

typedef struct lp__thread lp__thread;

typedef struct lp__module {
    uintptr_t lo, hi; /* [lo, hi): the union of the object's PT_LOAD segments */
    uintptr_t base;   /* dlpi_addr: offsets are ip - base */
    uint32_t id;
    lp__cfi_object cfi; /* where its call-frame information is (the stack walk's) */
} lp__module;

typedef struct lp__module_map {
    lp__module *items; /* sorted by lo */
    size_t len;
    unsigned long long subs; /* dlpi_subs when it was made: objects unloaded before */
} lp__module_map;

static struct {
    atomic_bool recording;
    atomic_bool disabled; /* a write failed: stays off until the next lp_start */
    bool interposed;
    const char *interposed_how;
    lp_options opts;
    atomic_int fd;      /* the trace's descriptor, or -1; replaced when it had to be reopened */
    dev_t fd_dev;       /* what the trace file is: checked before each chunk is written */
    ino_t fd_ino;
    /* the bytes of the trace file written or claimed by a writer about to write them
     * (lp__claim_file_bytes), and whether the trace reached the program's file size limit */
    _Atomic uint64_t file_bytes;
    atomic_bool file_limited;
    pid_t pid;          /* the process the state belongs to (tgkill) */
    bool fd_pending; /* forked child: create the file on the first write */
    char path[4096];
    char reopen_path[4096]; /* `path` made absolute at creation: the program may chdir */
    char path_template[4096];
    uint64_t start_ns;
    atomic_uint_fast64_t generation; /* bumped by each start and in a forked child */
    /* The clock (lp__event_time): true while every stamp must be an ordered read (more than one
     * thread has recorded since the start, no usable TSC, or the TSC ran ahead of the clock). */
    atomic_bool ordered_clock;
    atomic_uint writers; /* threads that have recorded since the start (or the fork) */
    atomic_bool tsc_used; /* some stamp came from the TSC ("clock" metadata) */
    atomic_int tsc_stop;  /* why the TSC stamps ended early: 0 none, else an LP__TSC_* reason */

    pthread_mutex_t lock; /* thread list, module map, process-wide records, file creation */
    lp__thread *threads;
    uint32_t next_thread_index;
    pthread_key_t key;
    bool key_made;

    pthread_t flusher;
    bool flusher_running;
    atomic_uint flusher_stop; /* 1: stop; a futex word, so that lp_stop wakes the flusher's nap */

    _Atomic(lp__module_map *) modules;
    atomic_uint_fast64_t modules_generation;
    uint32_t next_module_id;
    unsigned long long dl_subs;
    atomic_ullong dl_adds;       /* dlpi_adds at the last rescan: objects loaded so far */
    lp__map py_modules;          /* (hash of a "py:" path) -> its pseudo-module id; under `lock` */
    uint32_t py_overflow_id;     /* the "py:?:?" module used once the module ids run out */
    atomic_bool py_meta_written; /* the "python_frames" metadata is in this trace */
    uintptr_t self_lo, self_hi; /* libprof's own object, when it is a separate one */

    lp_unwind_fn unwinder;
    void *unwinder_user;
    bool handlers_installed;
} R = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

/* Set once the program has called pthread_cancel (preload.c): from then on stack unwinding runs
 * with cancellation disabled too. Before, only the recorder's writes, opens and rescans do. */
atomic_bool lp__cancel_used;
LP__TLS bool lp__in_getattr;

/* Who holds a buffer's `busy` flag. */
enum { LP__FREE = 0, LP__OWNER = 1, LP__OTHER = 2 };

struct lp__thread {
    atomic_int busy; /* LP__OWNER (its thread's event path) or LP__OTHER (the flusher, lp_flush) */
    uint32_t index;
    uint64_t generation;
    uint64_t modules_generation;
    pid_t tid;
    uint8_t *buf;
    size_t len;
    /* last_time: the time of the last record, in this chunk or before (kept across chunks and
     * across the OS threads that use the state in turn: times per thread index only increase);
     * first_time: when the buffer's oldest record was made (the flush-by-age clock). */
    uint64_t base_time, last_time, last_addr, first_time;
    /* The clock's anchor (lp__clock_anchor): an ordered read and the TSC just after it; the
     * thread's first one, which the rate is calibrated from; the rate (ns a tick, 32.32 fixed
     * point, 0 until calibrated), the ticks an interpolation may span, and the stamps taken
     * since the anchor. */
    uint64_t ns_at, tsc_at, ns_first, tsc_first, ns_per_tick, tsc_span;
    uint32_t tsc_uses;
    lp__map strings;  /* (hash1, hash2) -> string id */
    lp__idmap frames; /* (hash of the frame keys down to a node) -> stack id */
    lp__map ip_cache; /* (ip, 1) -> module id << 48 | offset */
    lp__map py_modules;  /* (code, its names and first line) -> "py:" module id */
    lp__map py_lines;    /* (code, its names and first line | instruction) -> module << 32 | line */
    lp__map fp_stacks;   /* (hash of a frame-pointer walk, depth) -> stack id: walks checked */
    struct lp__fp_memo { /* recent walks, direct-mapped by the hash (0: empty): fp_stacks'
                          * entries, and the walks refused (LP__FP_NO), kept nowhere else */
        uint64_t f1, f2, id;
    } fp_memo[64];
    /* This OS thread's stack [stack_lo, stack_hi), for the walks (0, 0: unknown), and the
     * thread they belong to (0: not asked yet). */
    uintptr_t stack_lo, stack_hi;
    pid_t stack_tid;
    lp__cfi_cache cfi;   /* the stack walk's rules by return address */
    struct lp__py_memo { /* py_lines' recent entries, direct-mapped (0: empty) */
        uint64_t k1, k2, where;
    } py_memo[256];
    /* Scratch of lp__capture_stack (here rather than on the program's stack): the Python
     * frames read, the merged stack and the words its hash is taken of. */
    lp__pyframe py[LP_MAX_STACK_FRAMES];
    struct lp__mframe {
        uintptr_t ip; /* a native return address, if py < 0 */
        int16_t py;   /* else the index of a Python frame in `py` */
    } merged[LP_MAX_STACK_FRAMES];
    /* The latest stack, one entry a frame from the outermost: what identifies the frame (a
     * return address and 0, or a Python frame's lp__py_key), the running hash of the frame keys
     * from the outermost frame down to it (lp__prefix_hash makes the node's key in `frames` of
     * it), its place (module << 48 | offset) if known (a Python frame's), and its node id (0: not
     * looked up). The next stack reuses the entries of the frames it shares from the outermost. */
    struct lp__prefix {
        uint64_t id1, id2, a, b, where;
        uint32_t node;
    } prefix[LP_MAX_STACK_FRAMES];
    int prefix_len;
    uint32_t next_string_id, next_stack_id;
    int64_t sample_left;
    uint64_t rng;
    volatile sig_atomic_t writing; /* a chunk of this buffer is being written (signal flush) */
    atomic_bool exiting; /* its thread ran the recorder's thread-exit hook; may still record */
    atomic_bool exited;  /* its thread is gone and the buffer written: the state may be reused */
    lp__thread *next;
};

static LP__TLS lp__thread *lp__self;
static LP__TLS int lp__guard_depth;
static LP__TLS bool lp__never;
static LP__TLS int lp__exclude_depth; /* lp_exclude_push nesting */

bool lp__recording(void) { return atomic_load_explicit(&R.recording, memory_order_relaxed); }
void lp__set_interposed(const char *how)
{
    R.interposed = true;
    R.interposed_how = how;
}
bool lp__interposed(void) { return R.interposed; }

bool lp__guard_enter(void)
{
    if (lp__guard_depth > 0 || lp__never)
        return false;
    lp__guard_depth++;
    return true;
}

void lp__guard_exit(void) { lp__guard_depth--; }
void lp__guard_forever(void) { lp__never = true; }
void lp_exclude_push(void) { lp__exclude_depth++; }
void lp_exclude_pop(void)
{
    if (lp__exclude_depth > 0)
        lp__exclude_depth--;
}

static uint64_t lp__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Event times. Every timed record carries a CLOCK_MONOTONIC time, and lp__now reads it in order:
 * after every earlier instruction. In a program that runs between its allocations (an interpreter
 * importing a library) that wait costs as much as the rest of the event path (bench/NOTES.md).
 * While a single thread records, its stamps are read from the TSC without the wait instead (x86-64
 * with an invariant TSC; GRADPROF_TSC=0 turns it off): interpolated from the thread's anchor (an
 * ordered read and the TSC just after it, taken again every LP__TSC_RUN stamps or LP__TSC_SPAN_NS)
 * at a rate calibrated a little low, so that a stamp is never later than the instant it stands
 * for, and times still strictly increase per thread (lp__begin). The trace's ordering contract
 * (trace_format.h) needs nothing more while no other thread records. The first time a second
 * thread records (lp__count_writer), every stamp is an ordered read again: that thread registers
 * before anything it does, and on x86 a thread that sees memory another one released also sees
 * what that one stored before, its registration included. A TSC that goes back or runs ahead of
 * the clock at an anchor (a move to a CPU whose counter differs, a changed rate) ends the TSC
 * stamps for the rest of the recording.
 */
#define LP__TSC_RUN 64                   /* interpolated stamps between two anchors */
#define LP__TSC_SPAN_NS 100000ull        /* nor further than this from the anchor */
#define LP__TSC_CALIBRATE_NS 4000000ull  /* the rate is measured over at least this */
#define LP__TSC_PAIR_NS 1000ull          /* an anchor's two clock reads at most this apart */

/* Whether this process may stamp from the TSC: the option, an invariant TSC, and a TSC the
 * process may read (prctl PR_SET_TSC can make RDTSC fault). */
static bool lp__tsc_usable(void)
{
#if LP__HAVE_TSC
    unsigned a, b, c, d;
    if (!R.opts.tsc || !__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    if (!__get_cpuid(0x80000007u, &a, &b, &c, &d) || !(d & (1u << 8)))
        return false;
#ifdef PR_GET_TSC
    int mode = 0;
    if (prctl(PR_GET_TSC, &mode, 0, 0, 0) == 0 && mode != PR_TSC_ENABLE)
        return false;
#endif
    return true;
#else
    return false;
#endif
}

/* A new recording (start, fork): no thread has recorded yet. Under R.lock, before the generation
 * is bumped. */
static void lp__clock_reset(void)
{
    atomic_store(&R.writers, 0);
    atomic_store(&R.tsc_used, false);
    atomic_store(&R.tsc_stop, 0);
    atomic_store(&R.ordered_clock, !lp__tsc_usable());
}

enum { LP__TSC_BACK = 1, LP__TSC_AHEAD };

/* The "clock" metadata: how the stamps were read. */
static const char *lp__clock_kind(void)
{
    if (!atomic_load(&R.tsc_used))
        return "monotonic";
    switch (atomic_load(&R.tsc_stop)) {
    case LP__TSC_BACK:
        return "monotonic+tsc (the TSC went back: monotonic from then on)";
    case LP__TSC_AHEAD:
        return "monotonic+tsc (the TSC ran ahead of the clock: monotonic from then on)";
    default:
        return "monotonic+tsc";
    }
}

/* Counts the calling thread as one that records, before its first stamp. */
static void lp__count_writer(void)
{
    if (atomic_fetch_add(&R.writers, 1) > 0)
        atomic_store(&R.ordered_clock, true);
}

#if LP__HAVE_TSC
/* Ends the TSC stamps for the rest of the recording, for `why`. */
static void lp__tsc_stop(int why)
{
    atomic_store(&R.tsc_stop, why);
    atomic_store(&R.ordered_clock, true);
}

/* An ordered read that becomes th's anchor: the clock, the TSC after it (LFENCE: not before the
 * clock was read), the clock again; the anchor is taken only if the two reads are close, so the
 * TSC reading lies between them. Checks the interpolation since the last anchor against it and
 * calibrates the rate. Returns the first clock read. */
static uint64_t lp__clock_anchor(lp__thread *th)
{
    uint64_t ns = lp__now();
    _mm_lfence();
    uint64_t tsc = __rdtsc(), after = lp__now();
    if (after - ns > LP__TSC_PAIR_NS)
        return ns; /* interrupted in between: no anchor this time */
    if (th->ns_per_tick) {
        uint64_t ticks = tsc - th->tsc_at;
        if ((int64_t)ticks < 0) {
            lp__tsc_stop(LP__TSC_BACK);
            return ns;
        }
        if (ticks < th->tsc_span && th->ns_at + (ticks * th->ns_per_tick >> 32) > after) {
            lp__tsc_stop(LP__TSC_AHEAD);
            return ns;
        }
    }
    if (!th->ns_first) {
        th->ns_first = ns;
        th->tsc_first = tsc;
    } else if (ns - th->ns_first >= LP__TSC_CALIBRATE_NS && tsc > th->tsc_first) {
        /* both anchors' TSC readings lie within LP__TSC_PAIR_NS after their clock reads: the
         * measured rate is within 2 * 1 us / 4 ms of the true one, and 1/256 below it is lower */
        double rate = (double)(ns - th->ns_first) / (double)(tsc - th->tsc_first) *
                      (1.0 - 1.0 / 256) * 4294967296.0;
        th->ns_per_tick = (uint64_t)rate;
        th->tsc_span = (uint64_t)((double)LP__TSC_SPAN_NS * 4294967296.0 / rate);
        if (!atomic_load_explicit(&R.tsc_used, memory_order_relaxed))
            atomic_store_explicit(&R.tsc_used, true, memory_order_relaxed);
    }
    /* tsc_at before ns_at, read in the other order by lp__event_time: a signal handler that
     * stamps in between makes its stamp earlier, never later */
    th->tsc_at = tsc;
    atomic_signal_fence(memory_order_seq_cst);
    th->ns_at = ns;
    th->tsc_uses = 0;
    return ns;
}
#endif

/* The time of an event th records now (see above). */
static inline uint64_t lp__event_time(lp__thread *th)
{
#if LP__HAVE_TSC
    if (atomic_load_explicit(&R.ordered_clock, memory_order_relaxed))
        return lp__now();
    if (th->tsc_uses < LP__TSC_RUN) {
        th->tsc_uses++;
        uint64_t rate = th->ns_per_tick;
        if (!rate) /* calibrating: an ordered read, an anchor every LP__TSC_RUN of them */
            return lp__now();
        uint64_t ns_at = th->ns_at;
        atomic_signal_fence(memory_order_seq_cst);
        uint64_t ticks = __rdtsc() - th->tsc_at;
        if (ticks < th->tsc_span)
            return ns_at + (ticks * rate >> 32);
    }
    return lp__clock_anchor(th);
#else
    (void)th;
    return lp__now();
#endif
}

static int lp__cancel_off(void);
static void lp__cancel_restore(int old);

/* ---- warnings -------------------------------------------------------------------------------- */

static atomic_uint_fast64_t lp__warned;

void lp__warn_once(int key, const char *message)
{
    uint64_t bit = 1ull << (key & 63);
    if (atomic_fetch_or(&lp__warned, bit) & bit)
        return;
    char line[512];
    size_t n = (size_t)snprintf(line, sizeof line, "gradprof: %s\n", message);
    if (n >= sizeof line)
        n = sizeof line - 1;
    int saved_errno = errno, cancel = lp__cancel_off();
    ssize_t w = write(STDERR_FILENO, line, n);
    (void)w;
    lp__cancel_restore(cancel);
    errno = saved_errno;
}

/* ---- the file -------------------------------------------------------------------------------- */

/* Expands %p in the template with the pid. Returns 0, or -1 if the result does not fit in `size`
 * bytes (then `out` holds a cut-off prefix that must not be used). */
static int lp__expand_path(char *out, size_t size, const char *templ, pid_t pid)
{
    size_t o = 0;
    for (const char *p = templ; *p; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            int n = snprintf(out + o, size - o, "%d", (int)pid);
            if (n < 0 || (size_t)n >= size - o)
                return -1;
            o += (size_t)n;
            p++;
        } else {
            if (o + 1 >= size)
                return -1;
            out[o++] = *p;
        }
    }
    out[o] = '\0';
    return 0;
}

/* A path for a message: whole if short, else its first and last 80 bytes around "...". */
static const char *lp__short_path(const char *path, char *buf, size_t size)
{
    size_t n = strlen(path);
    if (n <= 170 || size < 170)
        return path;
    snprintf(buf, size, "%.80s...%s", path, path + n - 80);
    return buf;
}

/* Why a path gives ENAMETOOLONG: "component 2 is 300 bytes (NAME_MAX 255)" or "the path is ...". */
static void lp__name_too_long_why(const char *path, char *why, size_t size)
{
    int k = 0;
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if (n == 0)
            break;
        k++;
        if (n > 255) {
            snprintf(why, size, "component %d of the path is %zu bytes; the limit is 255", k, n);
            return;
        }
        p += n;
    }
    snprintf(why, size, "the path is %zu bytes; the limit is 4095", strlen(path));
}

/* The reason `err` (an errno from creating the trace) in words, with ENAMETOOLONG explained. */
static void lp__create_error(int err, const char *path, char *out, size_t size)
{
    if (err == ENAMETOOLONG) {
        char why[96];
        lp__name_too_long_why(path, why, sizeof why);
        snprintf(out, size, "%s (ENAMETOOLONG: %s)", strerror(err), why);
    } else {
        snprintf(out, size, "%s", strerror(err));
    }
}

static bool lp__same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/*
 * Moves `fd`, open on the file `id`, out of the program's way: to the lowest free number at or
 * above 1000 (below the RLIMIT_NOFILE soft limit, 64 under it when the limit is low),
 * close-on-exec, closing `fd`. Programs take the lowest free number (open) or one they choose,
 * mostly low (dup2(f, 3), `cmd 3>file`): neither meets the trace up there. The program may close
 * or replace `fd` meanwhile (another thread's closefrom): the copy is checked to be `id`, and
 * `fd` is closed only while it still is. Returns the descriptor to use, or -1 if `fd` was taken
 * from under us (it is not ours to close then). Async-signal-safe.
 */
static int lp__fd_move_high(int fd, const struct stat *id)
{
    struct rlimit rl;
    long floor = 1000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < (rlim_t)floor + 64)
        floor = (long)rl.rlim_cur > 64 + 16 ? (long)rl.rlim_cur - 64 : 0;
    if (floor <= fd)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, (int)floor);
    if (high < 0)
        return fd; /* no room up there: stay, the inode check still guards every write */
    struct stat st;
    if (fstat(high, &st) != 0 || !lp__same_file(&st, id)) {
        close(high); /* a copy of what the program put on `fd`: ours */
        return -1;
    }
    if (fstat(fd, &st) == 0 && lp__same_file(&st, id))
        close(fd);
    return high;
}

/*
 * Opens `path` with `flags` (O_CREAT | O_EXCL the first time only) on a high descriptor
 * (lp__fd_move_high), checked to be the file the path names: a program that closes and opens
 * descriptors in another thread may take the number between the open and the check, and then
 * the open is tried again (the number is left alone). Fills *id. Returns the descriptor, or -1
 * with errno (EAGAIN when the program kept taking the numbers away). Async-signal-safe.
 */
static int lp__open_high(const char *path, int flags, struct stat *id)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        int fd = open(path, flags, 0600);
        if (fd < 0)
            return -1;
        flags &= ~(O_CREAT | O_EXCL); /* it exists now: ours, made just above */
        struct stat by_fd;
        if (stat(path, id) != 0 || fstat(fd, &by_fd) != 0 || !lp__same_file(&by_fd, id))
            continue;
        int high = lp__fd_move_high(fd, id);
        if (high >= 0)
            return high;
    }
    errno = EAGAIN;
    return -1;
}

/* Creates the trace file at R.path, never following a symlink and never overwriting: if the
 * name is taken, .1, .2, ... are tried. Writes the file header. Returns the fd or -1. */
static int lp__create_file(void)
{
    char candidate[sizeof R.path];
    for (int n = 0; n < 1000; n++) {
        if (n == 0)
            snprintf(candidate, sizeof candidate, "%s", R.path);
        else if ((size_t)snprintf(candidate, sizeof candidate, "%s.%d", R.path, n) >=
                 sizeof candidate) {
            errno = ENAMETOOLONG;
            return -1;
        }
        struct stat id;
        int fd = lp__open_high(
            candidate, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, &id);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return -1;
        }
        uint8_t header[GP_FILE_HEADER_BYTES] = {0};
        memcpy(header, GP_FILE_MAGIC, 8);
        header[8] = GP_VERSION_MAJOR;
        header[10] = GP_VERSION_MINOR;
        if (write(fd, header, sizeof header) != (ssize_t)sizeof header) {
            int err = errno;
            close(fd);
            unlink(candidate);
            errno = err;
            return -1;
        }
        R.fd_dev = id.st_dev;
        R.fd_ino = id.st_ino;
        atomic_store(&R.file_bytes, sizeof header);
        atomic_store(&R.file_limited, false);
        memcpy(R.path, candidate, sizeof candidate);
        R.reopen_path[0] = '\0';
        if (candidate[0] != '/' && getcwd(R.reopen_path, sizeof R.reopen_path) != NULL) {
            size_t cwd = strlen(R.reopen_path);
            if (snprintf(R.reopen_path + cwd, sizeof R.reopen_path - cwd, "/%s", candidate) >=
                (int)(sizeof R.reopen_path - cwd))
                R.reopen_path[0] = '\0';
        } else if (candidate[0] == '/') {
            memcpy(R.reopen_path, candidate, sizeof candidate);
        }
        return fd;
    }
    errno = EEXIST;
    return -1;
}

static void lp__disable(const char *why)
{
    atomic_store(&R.disabled, true);
    atomic_store(&R.recording, false);
    char msg[480], path[200];
    snprintf(msg, sizeof msg, "recording stopped: %.160s (%.180s); the program continues", why,
             R.path[0] ? lp__short_path(R.path, path, sizeof path) : "no trace file");
    lp__warn_once(LP__WARN_WRITE, msg);
}

/*
 * The program closed the trace's descriptor `old`, or put another file on its number: opens the
 * trace again by path (append, no symlink followed) if the path still names the same file, and
 * publishes the new descriptor (another thread may have done so first: then that one is used).
 * Never closes `old`, which is no longer the recorder's. Returns the descriptor, or -1 when the
 * trace is lost (recording stops with one warning). Async-signal-safe.
 */
static int lp__fd_reopen(int old)
{
    struct stat id;
    int fd = R.reopen_path[0]
                 ? lp__open_high(R.reopen_path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC, &id)
                 : -1;
    if (fd >= 0 && (id.st_dev != R.fd_dev || id.st_ino != R.fd_ino)) {
        close(fd); /* ours, but another file now has the trace's name */
        fd = -1;
    }
    if (fd < 0) {
        int now = atomic_load(&R.fd);
        if (now != old) /* another thread reopened it meanwhile */
            return now;
        lp__disable("the program closed or replaced the trace's descriptor, and the trace "
                    "could not be opened again by its path");
        return -1;
    }
    int expected = old;
    if (!atomic_compare_exchange_strong(&R.fd, &expected, fd)) {
        close(fd); /* ours: opened just above */
        return expected;
    }
    return fd;
}

/* The trace's descriptor, checked to be the trace file still (one fstat); reopened if not. */
static int lp__fd_checked(void)
{
    int fd = atomic_load_explicit(&R.fd, memory_order_acquire);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_dev == R.fd_dev && st.st_ino == R.fd_ino)
        return fd;
    return lp__fd_reopen(fd);
}

static size_t lp__put_str(uint8_t *p, const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max)
        n = max;
    size_t k = gp_put_varint(p, n);
    memcpy(p + k, s, n);
    return k + n;
}

/* A META record of `key` and `value`, cut at key_max and value_max bytes, at p; its length. */
static size_t lp__put_meta(uint8_t *p, const char *key, size_t key_max, const char *value,
                           size_t value_max)
{
    size_t n = 0;
    p[n++] = GP_REC_META;
    n += lp__put_str(p + n, key, key_max);
    n += lp__put_str(p + n, value, value_max);
    return n;
}

/* The bytes kept below the program's file size limit for the note that says the trace stops
 * there (lp__claim_file_bytes). */
#define LP__LIMIT_ROOM 256

/*
 * Claims the next `total` bytes of the trace file for one write, leaving `room` bytes below the
 * program's file size limit (RLIMIT_FSIZE, which it may lower at any time); 0 when that limit is
 * not in the way, else the limit. A write that starts at the limit gets the process SIGXFSZ, whose
 * default action kills it, and one that crosses it is cut short, leaving a torn chunk: the trace
 * ends at its last whole chunk instead. Writers claim their ranges one after the other, so none
 * of those within the limit can pass it, in whatever order O_APPEND lays them down.
 * Async-signal-safe.
 */
static uint64_t lp__claim_file_bytes(size_t total, uint64_t room)
{
    uint64_t at = atomic_fetch_add(&R.file_bytes, total);
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY ||
        (rl.rlim_cur >= room && at + total <= rl.rlim_cur - room))
        return 0;
    atomic_fetch_sub(&R.file_bytes, total); /* not written */
    return rl.rlim_cur;
}

/* Writes one chunk, within `room` bytes of the program's file size limit; returns that limit if
 * the chunk would pass it (nothing written), else 0. */
static uint64_t lp__write_chunk_within(uint32_t thread, uint64_t base_time, uint64_t last_time,
                                       const uint8_t *payload, size_t len, uint64_t room)
{
    int fd = lp__fd_checked();
    if (fd < 0)
        return 0;
    uint8_t header[GP_CHUNK_HEADER_BYTES];
    gp_put_u32(header, GP_CHUNK_MAGIC);
    gp_put_u32(header + 4, (uint32_t)len);
    gp_put_u32(header + 12, thread);
    uint64_t now = lp__now();
    gp_put_u64(header + 16, base_time);
    gp_put_u64(header + 24, now > last_time ? now : last_time);
    uint32_t crc = gp_crc32c(0, header + 12, GP_CHUNK_HEADER_BYTES - 12);
    gp_put_u32(header + 8, gp_crc32c(crc, payload, len));
    struct iovec iov[2] = {{header, sizeof header}, {(void *)payload, len}};
    size_t total = sizeof header + len;
    uint64_t limit = lp__claim_file_bytes(total, room);
    if (limit)
        return limit;
    int saved_errno = errno;
    for (bool reopened = false;;) {
        ssize_t w = writev(fd, iov, 2);
        if (w == (ssize_t)total)
            break;
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EBADF && !reopened) { /* closed between the check and the write */
            reopened = true;
            if ((fd = lp__fd_reopen(fd)) >= 0)
                continue;
            break;
        }
        lp__disable(w < 0 ? strerror(errno) : "short write (disk full?)");
        break;
    }
    errno = saved_errno;
    return 0;
}

/* Writes one chunk; `last_time` is its last record's time (0: none), which the write time is not
 * before. At the program's file size limit, the trace ends instead with the metadata
 * "end_reason" "file size limit N" (written in the room kept for it) and recording stops.
 * Async-signal-safe (fstat, getrlimit, writev; open and fcntl when the descriptor must be
 * reopened). Cancellation is off for the caller (lp__flush_thread) or never reaches here. */
static void lp__write_chunk_at(uint32_t thread, uint64_t base_time, uint64_t last_time,
                               const uint8_t *payload, size_t len)
{
    if (len == 0 || atomic_load(&R.disabled))
        return;
    uint64_t limit =
        lp__write_chunk_within(thread, base_time, last_time, payload, len, LP__LIMIT_ROOM);
    if (!limit || atomic_exchange(&R.file_limited, true))
        return;
    char value[48], why[120];
    uint8_t note[80];
    snprintf(value, sizeof value, "file size limit %llu", (unsigned long long)limit);
    lp__write_chunk_within(0, 0, 0, note, lp__put_meta(note, "end_reason", 16, value, 47), 0);
    snprintf(why, sizeof why,
             "the trace reached the program's file size limit (RLIMIT_FSIZE, %llu bytes)",
             (unsigned long long)limit);
    lp__disable(why);
}

static void lp__write_chunk(uint32_t thread, uint64_t base_time, const uint8_t *payload,
                            size_t len)
{
    lp__write_chunk_at(thread, base_time, 0, payload, len);
}

static void lp__write_metadata(void);

/* In a forked child the file is created on first use (a child that only execs leaves no file);
 * called with R.lock held. */
static bool lp__ensure_file(void)
{
    if (atomic_load(&R.fd) >= 0)
        return true;
    if (!R.fd_pending)
        return false;
    R.fd_pending = false;
    int fd = lp__create_file();
    if (fd < 0) {
        char why[200];
        lp__create_error(errno, R.path, why, sizeof why);
        lp__disable(why);
        return false;
    }
    atomic_store(&R.fd, fd);
    lp__write_metadata(); /* modules follow from the first rescan */
    return true;
}

/* ---- process-wide records (thread 0) --------------------------------------------------------- */

static uint8_t lp__global_buf[LP__BUF_BYTES];

/* Writes a META record as its own thread-0 chunk; R.lock held. */
static void lp__write_meta(const char *key, const char *value)
{
    lp__write_chunk(0, 0, lp__global_buf,
                    lp__put_meta(lp__global_buf, key, 256, value, LP__BUF_BYTES - 600));
}

/* Writes a META record with a short key and value from a buffer on the stack: no lock, so it is
 * fit for a signal handler (async-signal-safe as lp__write_chunk). */
static void lp__write_meta_unlocked(const char *key, const char *value)
{
    uint8_t p[160];
    lp__write_chunk(0, 0, p, lp__put_meta(p, key, 48, value, 96));
}

/* The most command-line bytes kept: what one chunk can hold. Longer command lines (the kernel
 * allows up to about 2 MB) are cut there and say so in the "command_truncated" metadata. */
#define LP__COMMAND_MAX (GP_CHUNK_MAX_PAYLOAD - 64)

/* Whether a POSIX shell reads argument a[0..n) back as one word without quotes. */
static bool lp__shell_bare(const uint8_t *a, size_t n)
{
    static const char safe[] = "_@%+=:,./-";
    for (size_t i = 0; i < n; i++) {
        uint8_t c = a[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        if (c < 0x80 && !alnum && !memchr(safe, c, sizeof safe - 1))
            return false;
    }
    return n > 0;
}

/* Appends argument a[0..n) to out[*len..cap) as a shell word: bare, or in single quotes with
 * each ' written '\''. Returns false, leaving *len, where the word does not fit. */
static bool lp__put_shell_word(uint8_t *out, size_t *len, size_t cap, const uint8_t *a, size_t n)
{
    size_t at = *len + (*len > 0); /* a space after the previous word */
    if (lp__shell_bare(a, n)) {
        if (at > cap || n > cap - at)
            return false;
        memcpy(out + at, a, n);
        at += n;
    } else {
        if (at + 2 > cap)
            return false;
        out[at++] = '\'';
        for (size_t i = 0; i < n; i++) {
            bool quote = a[i] == '\'';
            if (at + (quote ? 4 : 1) + 1 > cap)
                return false;
            if (quote) {
                memcpy(out + at, "'\\''", 4);
                at += 4;
            } else {
                out[at++] = a[i];
            }
        }
        out[at++] = '\'';
    }
    if (*len > 0)
        out[*len] = ' ';
    *len = at;
    return true;
}

/* Writes the "command" metadata: /proc/self/cmdline, whole, its arguments quoted as a shell
 * would need them (read into mmap'd memory: no malloc, no fixed cut-off); R.lock held. */
static void lp__write_command(void)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t cap = GP_CHUNK_MAX_PAYLOAD;
    uint8_t *raw = lp__map_pages(cap), *chunk = lp__map_pages(cap);
    if (!raw || !chunk) {
        close(fd);
        lp__unmap_pages(raw, cap);
        lp__unmap_pages(chunk, cap);
        return;
    }
    size_t n = 0, total = 0;
    for (;;) {
        uint8_t scratch[4096];
        uint8_t *dst = n < LP__COMMAND_MAX ? raw + n : scratch;
        size_t room = n < LP__COMMAND_MAX ? LP__COMMAND_MAX - n : sizeof scratch;
        ssize_t r = read(fd, dst, room < sizeof scratch ? room : sizeof scratch);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        total += (size_t)r;
        if (dst != scratch)
            n += (size_t)r;
    }
    close(fd);
    /* The value goes at a fixed offset past room for the record's head (type, key, length);
     * arguments are NUL-terminated, the last one too unless the line was cut. */
    static const char key[] = "command";
    const size_t value_at = 32;
    size_t len = 0, kept = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t *end = memchr(raw + i, '\0', n - i);
        size_t arg = end ? (size_t)(end - (raw + i)) : n - i;
        if (!lp__put_shell_word(chunk + value_at, &len, LP__COMMAND_MAX, raw + i, arg))
            break;
        i += arg + (end != NULL);
        kept = i;
    }
    if (len > 0) {
        uint8_t head[32];
        size_t h = 0;
        head[h++] = GP_REC_META;
        h += lp__put_str(head + h, key, sizeof key - 1);
        h += gp_put_varint(head + h, len);
        memmove(chunk + h, chunk + value_at, len);
        memcpy(chunk, head, h);
        lp__write_chunk(0, 0, chunk, h + len);
        if (total > kept) {
            char note[96];
            snprintf(note, sizeof note, "%zu bytes, the first %zu kept", total, kept);
            lp__write_meta("command_truncated", note);
        }
    }
    lp__unmap_pages(raw, cap);
    lp__unmap_pages(chunk, cap);
}

static void lp__write_metadata(void)
{
    char buf[4096];
    lp__write_command();
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) {
        buf[n] = '\0';
        lp__write_meta("exe", buf);
    }
    snprintf(buf, sizeof buf, "%d", (int)getpid());
    lp__write_meta("pid", buf);
    snprintf(buf, sizeof buf, "%d", (int)getppid());
    lp__write_meta("ppid", buf);
    struct utsname u;
    if (uname(&u) == 0)
        lp__write_meta("host", u.nodename);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    lp__write_meta("start_time", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)R.start_ns);
    lp__write_meta("start_monotonic_ns", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)R.opts.flush_ms * 1000000ull);
    lp__write_meta("flush_interval_ns", buf);
    snprintf(buf, sizeof buf, "%d", R.opts.stack_depth);
    lp__write_meta("stack_depth", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)R.opts.stack_sample_bytes);
    lp__write_meta("stack_sample_bytes", buf);
    lp__write_meta("mode", R.interposed ? R.interposed_how : "in-process");
    lp__write_meta("gradprof_version", LP__VERSION);
    snprintf(buf, sizeof buf, "%d.%d", GP_VERSION_MAJOR, GP_VERSION_MINOR);
    lp__write_meta("trace_format", buf);
    /* Python frames: known once a Python runtime was looked for (a forked child, a restart). */
    const char *py = lp__py_status();
    atomic_store(&R.py_meta_written, py != NULL);
    if (py)
        lp__write_meta("python_frames", py);
    /* A process of a job: the launcher's variables (torchrun's), when each is a plain number. */
    static const char *const job[][2] = {
        {"RANK", "rank"}, {"LOCAL_RANK", "local_rank"}, {"WORLD_SIZE", "world_size"}};
    for (size_t i = 0; i < sizeof job / sizeof job[0]; i++) {
        const char *v = getenv(job[i][0]);
        size_t digits = v ? strspn(v, "0123456789") : 0;
        if (digits > 0 && digits <= 9 && v[digits] == '\0')
            lp__write_meta(job[i][1], v);
    }
}

/* A new trace file: the "py:" modules are written into it afresh. R.lock held. */
static void lp__py_modules_reset(void)
{
    lp__map_clear(&R.py_modules);
    R.py_overflow_id = 0;
}

/* ---- the module map -------------------------------------------------------------------------- */

typedef struct lp__scan {
    lp__module items[1024];
    char paths[1024][256];
    char build_ids[1024][41];
    size_t len;
    unsigned long long subs, adds;
} lp__scan;

static lp__scan lp__scan_buf; /* used under R.lock only */

static void lp__read_build_id(const struct dl_phdr_info *info, char *out)
{
    out[0] = '\0';
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *nh;
            const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3u);
            const uint8_t *next = desc + ((nh->n_descsz + 3) & ~3u);
            if (next > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                size_t n = nh->n_descsz > 20 ? 20 : nh->n_descsz;
                for (size_t k = 0; k < n; k++) {
                    static const char hex[] = "0123456789abcdef";
                    out[2 * k] = hex[desc[k] >> 4];
                    out[2 * k + 1] = hex[desc[k] & 15];
                }
                out[2 * n] = '\0';
                return;
            }
            p = next;
        }
    }
}

static int lp__scan_one(struct dl_phdr_info *info, size_t size, void *data)
{
    lp__scan *s = data;
    s->subs = info->dlpi_subs;
    s->adds = info->dlpi_adds;
    if (s->len >= sizeof s->items / sizeof *s->items)
        return 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo)
            lo = a;
        if (a + ph->p_memsz > hi)
            hi = a + ph->p_memsz;
    }
    if (lo >= hi)
        return 0;
    size_t k = s->len++;
    s->items[k] = (lp__module){lo, hi, info->dlpi_addr, 0, {0}};
    lp__cfi_object_init(&s->items[k].cfi, info->dlpi_addr, info->dlpi_phdr, info->dlpi_phnum);
    const char *name = info->dlpi_name;
    if (!name || !*name) { /* the main program */
        ssize_t n = readlink("/proc/self/exe", s->paths[k], sizeof s->paths[k] - 1);
        s->paths[k][n > 0 ? n : 0] = '\0';
    } else {
        snprintf(s->paths[k], sizeof s->paths[k], "%s", name);
    }
    lp__read_build_id(info, s->build_ids[k]);
    return 0;
}

static int lp__module_cmp(const void *a, const void *b)
{
    const lp__module *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Rescans the loaded objects, assigns ids to new ones and writes their MODULE records; R.lock held.
 * Old maps are kept (never freed) so that lock-free readers stay valid. */
static void lp__rescan_modules(void)
{
    if (!lp__ensure_file())
        return;
    lp__scan *s = &lp__scan_buf;
    s->len = 0;
    dl_iterate_phdr(lp__scan_one, s);
    lp__module_map *old = atomic_load(&R.modules);
    lp__module_map *map = lp__map_pages(sizeof *map + s->len * sizeof(lp__module));
    if (!map)
        return;
    map->items = (lp__module *)(map + 1);
    map->len = s->len;
    map->subs = s->subs;
    for (size_t i = 0; i < s->len; i++) {
        lp__module m = s->items[i];
        /* Keep the id of an object already known at the same place. */
        for (size_t j = 0; old && j < old->len; j++)
            if (old->items[j].lo == m.lo && old->items[j].hi == m.hi &&
                old->items[j].base == m.base)
                m.id = old->items[j].id;
        if (!m.id) {
            m.id = ++R.next_module_id;
            uint8_t *p = lp__global_buf;
            size_t n = 0;
            p[n++] = GP_REC_MODULE;
            n += gp_put_varint(p + n, m.id);
            n += gp_put_varint(p + n, m.base);
            n += gp_put_varint(p + n, m.hi - m.base);
            n += lp__put_str(p + n, s->paths[i], 255);
            n += lp__put_str(p + n, s->build_ids[i], 40);
            lp__write_chunk(0, 0, p, n);
        }
        map->items[i] = m;
    }
    qsort(map->items, map->len, sizeof *map->items, lp__module_cmp);
    if (old && s->subs != R.dl_subs) /* something was unloaded: per-thread caches are stale */
        atomic_fetch_add(&R.modules_generation, 1);
    R.dl_subs = s->subs;
    atomic_store_explicit(&R.dl_adds, s->adds, memory_order_relaxed);
    atomic_store(&R.modules, map);
}

static const lp__module *lp__module_find(const lp__module_map *map, uintptr_t ip)
{
    if (!map)
        return NULL;
    size_t lo = 0, hi = map->len;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (map->items[mid].lo <= ip)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const lp__module *m = &map->items[lo - 1];
    return ip < m->hi ? m : NULL;
}

/* Rescans the loaded objects now (an address no object of the map holds, or objects unloaded
 * since it was made). */
static void lp__rescan_now(void)
{
    int saved_errno = errno, cancel = lp__cancel_off(); /* the rescan writes MODULE records */
    pthread_mutex_lock(&R.lock);
    lp__rescan_modules();
    pthread_mutex_unlock(&R.lock);
    lp__cancel_restore(cancel);
    errno = saved_errno;
}

/* (module id << 48 | offset) of an instruction address; module 0 holds the raw address. */
static uint64_t lp__locate(lp__thread *th, uintptr_t ip)
{
    uint64_t v;
    if (lp__map_get(&th->ip_cache, ip, 1, &v))
        return v;
    const lp__module *m = lp__module_find(atomic_load(&R.modules), ip);
    if (!m) {
        lp__rescan_now();
        m = lp__module_find(atomic_load(&R.modules), ip);
    }
    uint64_t offset = m ? ip - m->base : ip;
    v = m && offset < (1ull << 48) ? (uint64_t)m->id << 48 | offset : ip & ((1ull << 48) - 1);
    lp__map_put(&th->ip_cache, ip, 1, v);
    return v;
}

/* ---- threads --------------------------------------------------------------------------------- */

/* Cancellation off for a stretch of recorder work that may reach a cancellation point (write,
 * open, read, libunwind's own): returns the state to give to lp__cancel_restore. */
static int lp__cancel_off(void)
{
    int old = PTHREAD_CANCEL_ENABLE;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    return old;
}

static void lp__cancel_restore(int old)
{
    if (old != PTHREAD_CANCEL_DISABLE)
        pthread_setcancelstate(old, NULL);
}

/* Takes th->busy for its own thread. A flag found set by this same thread is one it left behind
 * (an event path it never returned from: a thread-exit hook run from inside it, an abandoned
 * signal handler): it is taken back. Waits only for another holder, whose hold is one write. */
#define LP__HOT static inline __attribute__((always_inline))

LP__HOT void lp__own(lp__thread *th)
{
    for (;;) {
        int expected = LP__FREE;
        if (atomic_compare_exchange_weak_explicit(&th->busy, &expected, LP__OWNER,
                                                  memory_order_acquire, memory_order_relaxed) ||
            expected == LP__OWNER)
            return;
    }
}

/* Takes th->busy for another thread (the flusher, lp_flush). false if it is held. */
static bool lp__borrow(lp__thread *th)
{
    int expected = LP__FREE;
    return atomic_compare_exchange_strong_explicit(&th->busy, &expected, LP__OTHER,
                                                   memory_order_acquire, memory_order_relaxed);
}

LP__HOT void lp__give_back(lp__thread *th)
{
    atomic_store_explicit(&th->busy, LP__FREE, memory_order_release);
}

/* Whether th's OS thread has ended: the kernel knows no thread of this process by its id (a
 * thread id is unique among the living, so ESRCH is certain; an id reused by a new thread of
 * ours only delays the answer). */
static bool lp__thread_gone(const lp__thread *th)
{
    int saved_errno = errno;
    bool gone = syscall(SYS_tgkill, (int)R.pid, (int)th->tid, 0) != 0 && errno == ESRCH;
    errno = saved_errno;
    return gone;
}

static void lp__thread_reset(lp__thread *th)
{
    lp__map_clear(&th->strings);
    lp__idmap_clear(&th->frames);
    th->prefix_len = 0;
    lp__map_clear(&th->ip_cache);
    lp__map_clear(&th->py_modules);
    lp__map_clear(&th->py_lines);
    lp__map_clear(&th->fp_stacks);
    memset(th->fp_memo, 0, sizeof th->fp_memo);
    lp__cfi_cache_clear(&th->cfi);
    th->stack_tid = 0;
    memset(th->py_memo, 0, sizeof th->py_memo);
    th->next_string_id = 1;
    th->next_stack_id = 1;
    th->ns_first = th->ns_per_tick = 0;
    th->len = 0;
    th->generation = atomic_load(&R.generation);
    th->modules_generation = atomic_load(&R.modules_generation);
}

static void lp__flush_thread(lp__thread *th);

/*
 * The recorder's thread-specific-data destructor, at thread exit. Writes what the thread
 * buffered, but leaves it recording: destructors of other keys run after this one (and later
 * rounds of them, and libc's clean-up of its own thread state), and what they allocate and free
 * belongs in the trace. The flusher writes the rest and recycles the state once the thread is gone
 * (lp__reclaim). A guard or flag still held here was left by an event path this thread never
 * returned from (a cancellation acting inside the recorder before it was made safe, a
 * pthread_exit from a signal handler): nothing else can hold them, so they are dropped.
 */
static void lp__thread_exit(void *arg)
{
    lp__thread *th = arg;
    lp__guard_depth = 0;
    lp__own(th);
    lp__flush_thread(th);
    atomic_store(&th->exiting, true);
    lp__give_back(th);
}

/* Recycles th if its thread is gone: writes what it still buffered, then marks it reusable. The
 * flag is taken first: while it is held, nobody reuses the state (its tid is the one to ask
 * about). A state whose thread died holding the flag (it died inside the recorder without
 * running the thread-exit hook: asynchronous cancellation) is left as it is. Not called with
 * R.lock held (the write may create the file). */
static void lp__reclaim(lp__thread *th)
{
    if (atomic_load(&th->exited) || !lp__borrow(th))
        return;
    if (!atomic_load(&th->exited) && lp__thread_gone(th)) {
        lp__flush_thread(th);
        atomic_store(&th->exited, true);
    }
    lp__give_back(th);
}

static void lp__emit_thread_record(lp__thread *th);

/* The calling thread's state, made on first use: the state of a thread that is gone is reused,
 * so churning threads cost no memory. NULL if none can be had. */
static lp__thread *lp__thread_get(void)
{
    lp__thread *th = lp__self;
    if (th && th->generation == atomic_load_explicit(&R.generation, memory_order_relaxed))
        return th;
    if (th) { /* a new recording (or a forked child): start the thread's tables afresh */
        lp__count_writer();
        lp__own(th);
        lp__thread_reset(th);
        lp__give_back(th);
        lp__emit_thread_record(th);
        return th;
    }
    bool reclaimed = false;
    int cancel = lp__cancel_off(); /* R.lock: even an asynchronous cancel must not leave it held */
    pthread_mutex_lock(&R.lock);
    for (th = R.threads; th; th = th->next)
        if (atomic_load(&th->exited) && atomic_load(&th->busy) == LP__FREE)
            break;
    /* None recycled yet: one whose thread ran its exit hook and is gone (asked of the kernel for
     * a few at most) is taken now, before the flusher gets to it, so that threads started and
     * joined in quick succession do not each cost a new state. */
    int asked = 0;
    for (lp__thread *t = th ? NULL : R.threads; t && asked < 4; t = t->next) {
        if (!atomic_load(&t->exiting) || atomic_load(&t->exited))
            continue;
        asked++;
        if (!lp__borrow(t))
            continue;
        if (!atomic_load(&t->exited) && lp__thread_gone(t)) {
            th = t;
            reclaimed = true;
            break;
        }
        lp__give_back(t);
    }
    if (th) {
        if (!reclaimed) {
            atomic_store(&th->exiting, false);
            atomic_store(&th->exited, false);
        }
    } else {
        th = lp__map_pages(sizeof *th + LP__BUF_BYTES);
        if (th) {
            th->buf = (uint8_t *)(th + 1);
            th->index = ++R.next_thread_index;
            th->next = R.threads;
            R.threads = th;
        }
    }
    pthread_mutex_unlock(&R.lock);
    lp__cancel_restore(cancel);
    if (!th) {
        lp__warn_once(LP__WARN_MEMORY, "out of memory for a thread buffer; its events are lost");
        return NULL;
    }
    if (reclaimed) { /* the dead thread's last events first, then the state is this thread's */
        lp__flush_thread(th);
        th->tid = (pid_t)syscall(SYS_gettid);
        atomic_store(&th->exiting, false);
        atomic_store(&th->exited, false);
        lp__give_back(th);
    }
    lp__count_writer();
    int saved_errno = errno;
    lp__own(th); /* the flusher sees the state in R.threads already */
    th->tid = (pid_t)syscall(SYS_gettid);
    th->rng = lp__mix((uint64_t)th->tid ^ lp__now()) | 1;
    th->sample_left = 0;
    lp__thread_reset(th);
    lp__give_back(th);
    lp__self = th;
    if (R.key_made)
        pthread_setspecific(R.key, th);
    lp__emit_thread_record(th);
    errno = saved_errno;
    return th;
}

/* ---- encoding -------------------------------------------------------------------------------- */

/* Writes the thread's buffer as a chunk; the caller holds th->busy. Cancellation is off meanwhile
 * (write and, in a forked child, open are cancellation points). Does not take R.lock when called
 * from a signal handler (lp__never is set then): a forked child's file is created by others. */
static void lp__flush_thread(lp__thread *th)
{
    if (!th->len)
        return;
    int saved_errno = errno, cancel = lp__cancel_off();
    if (atomic_load(&R.fd) < 0 && R.fd_pending) {
        if (!lp__never) {
            pthread_mutex_lock(&R.lock);
            lp__ensure_file();
            pthread_mutex_unlock(&R.lock);
        } else if (pthread_mutex_trylock(&R.lock) == 0) {
            lp__ensure_file();
            pthread_mutex_unlock(&R.lock);
        }
    }
    th->writing = 1;
    lp__write_chunk_at(th->index, th->base_time, th->last_time, th->buf, th->len);
    th->len = 0;
    th->writing = 0;
    lp__cancel_restore(cancel);
    errno = saved_errno;
}

/* Starts a chunk with a record that carries no time (a definition): the chunk's clock starts at
 * the thread's last record time, so the next timed record's dt is from there. */
static void lp__start_untimed(lp__thread *th)
{
    if (th->len != 0)
        return;
    uint64_t now = lp__now();
    if (th->last_time == 0)
        th->last_time = now;
    th->base_time = th->last_time;
    th->first_time = now;
    th->last_addr = 0;
}

/* Makes room for `need` bytes; a record never spans chunks. */
static uint8_t *lp__reserve(lp__thread *th, size_t need)
{
    if (th->len + need > LP__BUF_BYTES)
        lp__flush_thread(th);
    return th->buf + th->len;
}

/* Starts a timed record at time `now`, or just after the thread's previous record if `now` is
 * not later (times per thread strictly increase): reserves space, writes the type byte (flags
 * filled later) and dt. Returns the write position after dt; *type_at receives the type byte's
 * position. */
static uint8_t *lp__begin(lp__thread *th, uint8_t type, uint64_t now, size_t need,
                          uint8_t **type_at)
{
    uint8_t *p = lp__reserve(th, need);
    if (now <= th->last_time)
        now = th->last_time + 1;
    uint64_t dt = now - th->last_time;
    if (th->len == 0) {
        th->base_time = now;
        th->last_addr = 0;
        th->first_time = now;
        dt = 0;
    }
    th->last_time = now;
    *type_at = p;
    *p++ = type;
    p += gp_put_varint(p, dt);
    return p;
}

static uint8_t *lp__put_addr(lp__thread *th, uint8_t *p, uint8_t *type_at, uintptr_t addr,
                             lp_device device)
{
    int64_t delta = (int64_t)(addr - th->last_addr);
    if (!(addr & 15) && !(th->last_addr & 15)) {
        *type_at |= GP_FLAG_ADDR16;
        delta /= 16;
    }
    th->last_addr = addr;
    p += gp_put_varint(p, gp_zigzag(delta));
    if (device != LP_DEVICE_HOST) {
        *type_at |= GP_FLAG_DEVICE;
        p += gp_put_varint(p, (uint64_t)device + 1);
    }
    return p;
}

static void lp__commit(lp__thread *th, const uint8_t *end) { th->len = (size_t)(end - th->buf); }

/* The id of string s in this thread's table, writing its STRING record the first time; 0 for
 * NULL or "". */
static uint32_t lp__intern(lp__thread *th, const char *s)
{
    if (!s || !*s)
        return 0;
    size_t n = strlen(s);
    if (n > 4096)
        n = 4096;
    uint64_t h1, h2, id;
    lp__hash_bytes(s, n, &h1, &h2);
    if (lp__map_get(&th->strings, h1, h2, &id))
        return (uint32_t)id;
    id = th->next_string_id++;
    if (!lp__map_put(&th->strings, h1, h2, id))
        return 0;
    uint8_t *p = lp__reserve(th, n + 16);
    lp__start_untimed(th);
    uint8_t *q = p;
    *q++ = GP_REC_STRING;
    q += gp_put_varint(q, id);
    q += gp_put_varint(q, n);
    memcpy(q, s, n);
    lp__commit(th, q + n);
    return (uint32_t)id;
}

static void lp__emit_thread_record(lp__thread *th)
{
    lp__own(th);
    char name[32] = "";
    pthread_getname_np(pthread_self(), name, sizeof name);
    uint8_t *p = lp__reserve(th, 64);
    lp__start_untimed(th);
    *p++ = GP_REC_THREAD;
    p += gp_put_varint(p, (uint64_t)th->tid);
    p += lp__put_str(p, name, 31);
    lp__commit(th, p);
    lp__give_back(th);
}

/* ---- stacks ---------------------------------------------------------------------------------- */

static int lp__default_unwind(void **ips, int max, void *user) { return unw_backtrace(ips, max); }

/* Whether this allocation gets a stack: depth > 0, size >= min, and (if sampling) the thread's
 * byte countdown ran out — geometric sampling: the gap between sampled bytes is exponential with
 * mean stack_sample_bytes, so each byte is sampled with probability 1/mean. */
static bool lp__want_stack(lp__thread *th, size_t size)
{
    if (R.opts.stack_depth <= 0 || size < R.opts.min_stack_size)
        return false;
    uint64_t mean = R.opts.stack_sample_bytes;
    if (!mean)
        return true;
    th->sample_left -= (int64_t)size;
    if (th->sample_left > 0)
        return false;
    th->rng ^= th->rng << 13;
    th->rng ^= th->rng >> 7;
    th->rng ^= th->rng << 17;
    double u = ((double)(th->rng >> 11) + 0.5) * 0x1.0p-53;
    th->sample_left += (int64_t)(-log(u) * (double)mean) + 1;
    return true;
}

/* ---- Python frames (pyframes.h) ------------------------------------------------------------ */

/* Whether Python frames can be read in this process (looked for again when objects were loaded);
 * the first answer is written as the "python_frames" metadata. */
static bool lp__py_on(void)
{
    bool on = lp__py_ready(atomic_load_explicit(&R.dl_adds, memory_order_relaxed));
    if (!atomic_load_explicit(&R.py_meta_written, memory_order_relaxed) && lp__py_status() &&
        !atomic_exchange(&R.py_meta_written, true)) {
        int saved_errno = errno, cancel = lp__cancel_off();
        pthread_mutex_lock(&R.lock);
        if (lp__ensure_file())
            lp__write_meta("python_frames", lp__py_status());
        pthread_mutex_unlock(&R.lock);
        lp__cancel_restore(cancel);
        errno = saved_errno;
    }
    return on;
}

#define LP__MAX_MODULE_ID 60000 /* below the trace's 16-bit module ids (lp__locate, the reader) */

/* The id of the pseudo-module "py:<file>:<qualname>" of a Python frame's function, writing its
 * MODULE record the first time any thread meets it (per process, under R.lock); cached per
 * thread by the code object and what identifies it, so that a code object freed and another
 * made at its address is not taken for it. 0 when none can be had. */
static uint32_t lp__py_module(lp__thread *th, const lp__pyframe *f)
{
    uint64_t k1 = (uint64_t)(uintptr_t)f->code,
             k2 = lp__mix((uint64_t)(uintptr_t)f->filename ^
                          lp__mix((uint64_t)(uintptr_t)f->qualname) ^ (uint32_t)f->firstlineno),
             id;
    if (lp__map_get(&th->py_modules, k1, k2, &id))
        return (uint32_t)id;
    char path[1024];
    size_t n = lp__py_path(f, path, sizeof path);
    uint64_t h1, h2;
    lp__hash_bytes(path, n, &h1, &h2);
    int saved_errno = errno, cancel = lp__cancel_off(); /* the MODULE record is written here */
    pthread_mutex_lock(&R.lock);
    if (!lp__map_get(&R.py_modules, h1, h2, &id)) {
        bool fresh = true;
        if (R.next_module_id < LP__MAX_MODULE_ID) {
            id = ++R.next_module_id;
            lp__map_put(&R.py_modules, h1, h2, id);
        } else { /* out of ids: every further function shares one "py:?:?" module */
            fresh = R.py_overflow_id == 0;
            if (fresh)
                R.py_overflow_id = ++R.next_module_id;
            id = R.py_overflow_id;
            memcpy(path, "py:?:?", 7);
        }
        if (fresh && lp__ensure_file()) {
            uint8_t *p = lp__global_buf;
            size_t k = 0;
            p[k++] = GP_REC_MODULE;
            k += gp_put_varint(p + k, id);
            k += gp_put_varint(p + k, 0); /* base */
            k += gp_put_varint(p + k, 0); /* size */
            k += lp__put_str(p + k, path, sizeof path);
            k += lp__put_str(p + k, "", 0); /* build id */
            lp__write_chunk(0, 0, p, k);
        }
    }
    pthread_mutex_unlock(&R.lock);
    lp__cancel_restore(cancel);
    errno = saved_errno;
    lp__map_put(&th->py_modules, k1, k2, id);
    return (uint32_t)id;
}

/* What identifies a Python frame's place: its code object (k1) and, in k2, the code's names and
 * first line (the high half: a code object freed and another made at its address is not taken
 * for it, as lp__py_module checks too) with the instruction (the low half). */
static void lp__py_key(const lp__pyframe *f, uint64_t *k1, uint64_t *k2)
{
    *k1 = (uint64_t)(uintptr_t)f->code;
    *k2 = (lp__mix((uint64_t)(uintptr_t)f->filename ^ lp__mix((uint64_t)(uintptr_t)f->qualname) ^
                   (uint32_t)f->firstlineno) &
           ~0xFFFFFFFFull) |
          (uint32_t)f->lasti;
}

/* A Python frame's place, module id << 32 | line, computed once per (code, instruction) per
 * thread; (k1, k2) is its lp__py_key. */
static uint64_t lp__py_where(lp__thread *th, const lp__pyframe *f, uint64_t k1, uint64_t k2)
{
    uint64_t where;
    struct lp__py_memo *memo = &th->py_memo[lp__mix(k1 ^ k2) & 255];
    if (memo->k1 == k1 && memo->k2 == k2)
        return memo->where;
    if (!lp__map_get(&th->py_lines, k1, k2, &where)) {
        int line = lp__py_line(f);
        where = (uint64_t)lp__py_module(th, f) << 32 | (line > 0 ? (uint32_t)line & 0x7FFFFFFF : 0);
        lp__map_put(&th->py_lines, k1, k2, where);
    }
    *memo = (struct lp__py_memo){k1, k2, where};
    return where;
}

/*
 * Merges the native return addresses ips[0..n) (innermost first; n < depth: the whole stack) with
 * the thread's Python frames into th->merged, as py-spy shows them: each activation of the eval
 * loop is replaced by the Python frames it runs (pyframes.c), innermost first (an activation left
 * without frames, a mismatch, stays as it is), and the interpreter's other frames are left out
 * once a frame of other code or Python's is below them (the calls from one Python frame to the
 * next, or into an extension), and so are the frames outside the outermost Python frame (libc
 * starting the interpreter or a thread). A stack deeper than `depth` keeps its innermost `depth`
 * frames and adds up to depth / 2 of the Python frames beyond them, the innermost and the
 * outermost half each: the program's own line stays in the stack however deep the C++ below it.
 * Frames of hidden code (lp_hide_python_code) are left out, their activations still matched.
 * Returns the merged count, at most depth + depth / 2.
 */
static int lp__merge_python(lp__thread *th, const uintptr_t *ips, int n, int depth)
{
    /* th->py: the innermost `depth` Python frames, then the outermost depth / 2 of the rest */
    int np = -1, k = 0, m = 0, i = 0;
    bool calls = false; /* the interpreter's frames from here out are calls between frames */
    for (; i < n && m < depth; i++) {
        uintptr_t ip = ips[i];
        if (lp__py_is_eval(ip)) {
            if (np < 0)
                np = lp__py_walk(th->py, depth, depth / 2);
            calls = true;
            if (k < np) {
                do
                    if (!th->py[k].hidden)
                        th->merged[m++] = (struct lp__mframe){0, (int16_t)k};
                while (!th->py[k++].entry && k < np && m < depth);
                continue;
            }
        } else if (!lp__py_is_interpreter(ip)) {
            calls = true;
        } else if (calls) {
            continue;
        }
        th->merged[m++] = (struct lp__mframe){ip, -1};
    }
    if (n < depth && i == n && m < depth) { /* the whole stack fitted */
        while (np > 0 && k == np && th->merged[m - 1].py < 0)
            m--; /* what started the outermost Python frame: the interpreter's main, a thread */
        return m;
    }
    if (np < 0)
        np = lp__py_walk(th->py, depth, depth / 2);
    int16_t rest[LP_MAX_STACK_DEPTH + LP_MAX_STACK_DEPTH / 2];
    int n_rest = 0;
    for (; k < np; k++)
        if (!th->py[k].hidden)
            rest[n_rest++] = (int16_t)k;
    int take = n_rest < depth / 2 ? n_rest : depth / 2;
    for (int j = 0; j < take; j++) /* the innermost take - take / 2, then the outermost */
        th->merged[m++] = (struct lp__mframe){0, rest[j < take - take / 2 ? j : n_rest - take + j]};
    return m;
}

/* ---- the frame-pointer walk ------------------------------------------------------------------
 *
 * Where the program keeps frame pointers, the chain of saved (frame pointer, return address) pairs
 * gives the same return addresses as libunwind for a fraction of the cost. It is never trusted
 * blindly: each frame pointer must lie inside the thread's stack, above the previous one and
 * aligned (else the walk is abandoned before reading anything else), and a walk is used only
 * after it was checked once against libunwind. The check is per walk (the hash of its return
 * addresses): if the walk equals libunwind's stack, every function on it kept a frame pointer at
 * those call sites (where a function keeps one is a property of the instruction address), so any
 * later walk with the same addresses is right too, and its stack id is libunwind's. A walk that
 * ended on a zero frame pointer (the outermost frame: glibc's clone and _start clear it) may
 * stop up to two frames short of libunwind (start_thread and clone3, __libc_start_main and
 * _start, which keep no frame pointer); those outer frames are taken from the checked walk. A
 * walk that differs is remembered as such (LP__FP_NO) in the thread's memo only, and the unwinders
 * answer for it every time: code without frame pointers may leave in %rbp a pointer into data
 * that looks like a frame, a walk through it can differ at every allocation, and a table of
 * refusals would grow with them (one refusal stored again at each allocation piled up under its
 * key, each store slower than the last). A refusal that left the memo is checked again: a
 * comparison, beside the unwinders' walk it needs anyway.
 */
#define LP__FP_NO UINT64_MAX
/* Outer frames libunwind may add to a walk that ended on a zero frame pointer. */
#define LP__FP_OUTER 2

/* The calling thread's stack as (*lo, *hi), asked of pthread_getattr_np once per OS thread;
 * false when unknown, or when the caller runs on another stack (a signal stack, a coroutine's):
 * then neither walk of ours is used, libunwind answers. */
static bool lp__thread_stack(lp__thread *th, uintptr_t *lo, uintptr_t *hi)
{
    if (th->stack_tid != th->tid) {
        if (lp__in_getattr)
            return false; /* the bounds are asked for at the next allocation */
        pthread_attr_t attr;
        void *addr = NULL;
        size_t size = 0;
        /* For the main thread glibc reads /proc/self/maps (a cancellation point, allocations:
         * the guard keeps those out of the trace). */
        int saved_errno = errno, cancel = lp__cancel_off();
        th->stack_lo = th->stack_hi = 0;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            if (pthread_attr_getstack(&attr, &addr, &size) == 0 && size >= 16) {
                th->stack_lo = (uintptr_t)addr;
                th->stack_hi = (uintptr_t)addr + size;
            }
            pthread_attr_destroy(&attr);
        }
        lp__cancel_restore(cancel);
        errno = saved_errno;
        th->stack_tid = th->tid;
    }
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    *lo = th->stack_lo;
    *hi = th->stack_hi;
    return here >= *lo && here < *hi;
}

/* Walks the frame-pointer chain from fp: libprof's own frames (the innermost ones) are passed
 * over, then up to `depth` return addresses go into ips, hashed on the way into (*h1, *h2) (never
 * both 0). Returns their count, or -1 if a frame pointer was out of the thread's stack, not above
 * the previous one or misaligned; *zero_end tells whether the chain ended on a zero frame
 * pointer. */
static int lp__fp_walk(lp__thread *th, uintptr_t fp, uintptr_t *ips, int depth, bool *zero_end,
                       uint64_t *h1, uint64_t *h2)
{
#if defined(__x86_64__)
    uintptr_t lo, hi;
    if (!lp__thread_stack(th, &lo, &hi))
        return -1;
    lo = (uintptr_t)__builtin_frame_address(0);
    uint64_t a = 0x9E3779B97F4A7C15ull, b = 0xC2B2AE3D27D4EB4Full;
    int n = 0, own = 0;
    *zero_end = false;
    while (n < depth) {
        if (fp == 0) {
            *zero_end = true;
            break;
        }
        if (fp < lo || fp > hi - 16 || (fp & 7))
            return -1;
        const uintptr_t *frame = (const uintptr_t *)fp;
        uintptr_t next = frame[0], ret = frame[1];
        if (ret < 4096 || (next != 0 && next <= fp))
            return -1;
        lo = fp + 16;
        fp = next;
        if (n == 0 && ret >= R.self_lo && ret < R.self_hi) {
            if (++own > 8)
                return -1;
            continue;
        }
        ips[n++] = ret;
        lp__hash_step(&a, &b, ret);
    }
    *h1 = lp__mix(a ^ (uint64_t)n) | 1;
    *h2 = lp__mix(b + (uint64_t)n);
    return n;
#else
    (void)th, (void)fp, (void)ips, (void)depth, (void)zero_end, (void)h1, (void)h2;
    return -1;
#endif
}

/* ---- the walk by call-frame information (cfi.h) ---------------------------------------------- */

static int lp__dl_first(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    *(unsigned long long *)data = info->dlpi_subs;
    return 1; /* the counters are global: the first object is enough */
}

/* The object whose code holds ra, for a rule the thread has not cached: taken from a module map
 * that knows every object loaded now and none unloaded since (else its CFI may be gone). */
static const lp__cfi_object *lp__cfi_object_of(uintptr_t ra, void *user)
{
    (void)user;
    unsigned long long subs = 0;
    dl_iterate_phdr(lp__dl_first, &subs);
    const lp__module_map *map = atomic_load(&R.modules);
    const lp__module *m = map && map->subs == subs ? lp__module_find(map, ra) : NULL;
    if (!m) {
        lp__rescan_now();
        map = atomic_load(&R.modules);
        m = map && map->subs == subs ? lp__module_find(map, ra) : NULL;
    }
    return m ? &m->cfi : NULL;
}

/* The return addresses of the program's frames, innermost first, at most max, walked by CFI from
 * the first return address out of libprof (whose own frames keep frame pointers: the chain from
 * here leads to it); -1 where the walk cannot be used (libunwind answers). */
static int lp__cfi_stack(lp__thread *th, uintptr_t *ips, int max)
{
#if defined(__x86_64__)
    uintptr_t lo, hi;
    if (!R.self_hi || !lp__thread_stack(th, &lo, &hi))
        return -1;
    uintptr_t fp = (uintptr_t)__builtin_frame_address(0);
    lo = fp;
    for (int own = 0; own < 8; own++) {
        if (fp < lo || fp > hi - 16 || (fp & 7))
            return -1;
        const uintptr_t *frame = (const uintptr_t *)fp;
        uintptr_t next = frame[0], ret = frame[1];
        if (ret < R.self_lo || ret >= R.self_hi)
            return lp__cfi_walk(&th->cfi, lp__cfi_object_of, NULL, ret, fp + 16, next, hi, ips,
                                max);
        if (next <= fp)
            return -1;
        fp = next;
    }
#else
    (void)th, (void)ips, (void)max;
#endif
    return -1;
}

static uint32_t lp__stack_id(lp__thread *th, const uintptr_t *pcs, int n, bool py);

/* The return addresses of the program's frames from libunwind (or a test's unwinder), innermost
 * first, at most max; libprof's own frames are dropped. */
static int lp__unwind_stack(uintptr_t *pcs, int max)
{
    void *ips[LP_MAX_STACK_DEPTH + 16];
    /* libunwind may make system calls (memory validation, reading unwind tables) and takes the
     * loader's lock: once the program cancels threads, not a place to be cancelled in. */
    int saved_errno = errno, cancel = PTHREAD_CANCEL_DISABLE;
    if (__builtin_expect(atomic_load_explicit(&lp__cancel_used, memory_order_relaxed), 0))
        cancel = lp__cancel_off();
    int cap = (int)(sizeof ips / sizeof *ips), want = max + 8 < cap ? max + 8 : cap;
    int n = R.unwinder ? R.unwinder(ips, want, R.unwinder_user)
                       : lp__default_unwind(ips, want, NULL);
    lp__cancel_restore(cancel);
    errno = saved_errno;
    int first = 0;
    if (R.self_hi) {
        while (first < n && (uintptr_t)ips[first] >= R.self_lo && (uintptr_t)ips[first] < R.self_hi)
            first++;
    } else if (!R.unwinder) {
        first = n < 3 ? n : 3; /* statically linked: this function, lp__record_*, the hook */
    }
    int k = 0;
    for (int i = first; i < n && k < max; i++)
        pcs[k++] = (uintptr_t)ips[i];
    return k;
}

/* The stack id of the current call chain, writing STACK records for nodes not seen before.
 * Frames inside libprof itself are dropped; Python frames replace the eval loop's activations
 * (pseudo-module "py:<file>:<qualname>", offset = line). Kept out of line so the frames to drop
 * are ours. */
__attribute__((noinline)) static uint32_t lp__capture_stack(lp__thread *th)
{
    uintptr_t pcs[LP_MAX_STACK_DEPTH + 8], fp_ips[LP_MAX_STACK_DEPTH + 8];
    int depth = R.opts.stack_depth;
    if (th->modules_generation !=
        atomic_load_explicit(&R.modules_generation, memory_order_relaxed)) {
        /* Code was unloaded: an address may now belong to another object, so the frames and
         * stacks built from old addresses are stale too (their ids stay valid in the trace). */
        lp__map_clear(&th->ip_cache);
        lp__idmap_clear(&th->frames);
        th->prefix_len = 0;
        lp__map_clear(&th->fp_stacks);
        memset(th->fp_memo, 0, sizeof th->fp_memo);
        lp__cfi_cache_clear(&th->cfi);
        th->modules_generation = atomic_load(&R.modules_generation);
    }
    bool py = lp__py_on();
    /* The frame-pointer walk first, for a stack checked before (see above). */
    int fp_n = -1;
    bool fp_zero = false;
    uint64_t f1 = 0, f2 = 0, id;
    if (R.opts.frame_pointers && !R.unwinder && R.self_hi && !py) {
        fp_n = lp__fp_walk(th, (uintptr_t)__builtin_frame_address(0), fp_ips, depth, &fp_zero, &f1,
                           &f2);
        if (fp_n > 0) {
            struct lp__fp_memo *memo = &th->fp_memo[f1 >> 58];
            if (memo->f1 == f1 && memo->f2 == f2) {
                if (memo->id != LP__FP_NO)
                    return (uint32_t)memo->id;
                fp_n = 0; /* refused: the unwinders answer, with nothing to check */
            } else if (lp__map_get(&th->fp_stacks, f1, f2, &id)) {
                *memo = (struct lp__fp_memo){f1, f2, id};
                return (uint32_t)id;
            }
        }
    }
    /* Then the walk by call-frame information, libunwind where that cannot be used. */
    int n = R.opts.cfi && !R.unwinder ? lp__cfi_stack(th, pcs, depth) : -1;
    if (n < 0)
        n = lp__unwind_stack(pcs, depth);
    if (n <= 0)
        return 0;
    uint32_t stack = lp__stack_id(th, pcs, n, py);
    if (fp_n > 0) { /* check the walk against the unwinders' stack, once */
        int kb = n < depth ? n : depth;
        bool same = fp_n == kb || (fp_zero && fp_n < kb && kb - fp_n <= LP__FP_OUTER);
        for (int i = 0; same && i < fp_n; i++)
            same = fp_ips[i] == pcs[i];
        if (same && stack)
            lp__map_put(&th->fp_stacks, f1, f2, stack);
        th->fp_memo[f1 >> 58] = (struct lp__fp_memo){f1, f2, same && stack ? stack : LP__FP_NO};
    }
    return stack;
}

/* The key in `frames` of the node of prefix entry j (never 0 in *h1). */
static inline void lp__prefix_hash(const struct lp__prefix *pre, int j, uint64_t *h1, uint32_t *h2)
{
    *h1 = lp__mix(pre->a ^ (uint64_t)j) | 1;
    *h2 = (uint32_t)lp__mix(pre->b + (uint64_t)j);
}

/* The node of prefix entry j if it is in the tree (then remembered in the entry). */
static inline bool lp__prefix_known(lp__thread *th, int j)
{
    struct lp__prefix *pre = &th->prefix[j];
    uint64_t h1;
    uint32_t h2;
    lp__prefix_hash(pre, j, &h1, &h2);
    return pre->node || lp__idmap_get(&th->frames, h1, h2, &pre->node);
}

/* The stack id of the return addresses ips[0..n) (innermost first, libprof's own frames
 * dropped), merged with the Python frames if py, writing STACK records for new nodes. */
static uint32_t lp__stack_id(lp__thread *th, const uintptr_t *ips, int n, bool py)
{
    /* The frames, merged with Python's when the interpreter runs here. */
    int depth = R.opts.stack_depth, m = 0;
    if (py) {
        m = lp__merge_python(th, ips, n, depth);
    } else {
        for (int i = 0; i < n && m < depth; i++)
            th->merged[m++] = (struct lp__mframe){ips[i], -1};
    }
    if (m == 0)
        return 0;
    /* A node of the tree is found by the hash of the frame keys from the outermost frame down to
     * it (a return address, or for a Python frame its (module, line) with the top bit set, which
     * no return address has). The frames this stack shares with the previous one, from the
     * outermost, keep their prefix entries: their keys, hashes and nodes are known already. */
    int same = 0;
    uint64_t a = 0x9E3779B97F4A7C15ull, b = 0xC2B2AE3D27D4EB4Full;
    for (int j = 0; j < m; j++) {
        const struct lp__mframe *f = &th->merged[m - 1 - j];
        struct lp__prefix *pre = &th->prefix[j];
        uint64_t id1 = f->ip, id2 = 0;
        if (f->py >= 0)
            lp__py_key(&th->py[f->py], &id1, &id2);
        if (j == same && j < th->prefix_len && pre->id1 == id1 && pre->id2 == id2) {
            same++;
            a = pre->a, b = pre->b;
            continue;
        }
        uint64_t key = id1, where = 0;
        if (f->py >= 0) {
            uint64_t place = lp__py_where(th, &th->py[f->py], id1, id2);
            where = (place >> 32) << 48 | (place & 0xFFFFFFFF);
            key = 1ull << 63 | place;
        }
        lp__hash_step(&a, &b, key);
        *pre = (struct lp__prefix){id1, id2, a, b, where, 0};
    }
    th->prefix_len = m;
    /* A stack seen before is one lookup, that of its innermost node (none if it is the previous
     * stack or a part of it). A new one usually adds a few nodes to a known path: its longest
     * known prefix is searched from the innermost frame out, the slots of the innermost ones
     * loaded together, down to the deepest node the previous stack knew. */
    int floor = m - 1; /* the deepest node known already, or -1 (the root) */
    while (floor >= 0 && !th->prefix[floor].node)
        floor--;
    if (floor == m - 1)
        return th->prefix[m - 1].node;
    for (int j = m - 1; j > floor && j >= m - 9; j--) {
        uint64_t h1;
        uint32_t h2;
        lp__prefix_hash(&th->prefix[j], j, &h1, &h2);
        lp__idmap_prefetch(&th->frames, h1, h2);
    }
    if (lp__prefix_known(th, m - 1))
        return th->prefix[m - 1].node;
    int known = m - 2;
    while (known > floor && !lp__prefix_known(th, known))
        known--;
    uint32_t parent = known >= 0 ? th->prefix[known].node : 0; /* 0: the root */
    for (int j = known + 1; j < m; j++) {
        const struct lp__mframe *f = &th->merged[m - 1 - j];
        struct lp__prefix *pre = &th->prefix[j];
        uint64_t where = f->py < 0 ? lp__locate(th, f->ip) : pre->where, h1;
        uint32_t h2, node = th->next_stack_id++;
        lp__prefix_hash(pre, j, &h1, &h2);
        lp__idmap_put(&th->frames, h1, h2, node);
        pre->node = node;
        uint8_t *p = lp__reserve(th, 48);
        lp__start_untimed(th);
        *p++ = GP_REC_STACK;
        p += gp_put_varint(p, node);
        p += gp_put_varint(p, parent);
        p += gp_put_varint(p, where >> 48);
        p += gp_put_varint(p, where & ((1ull << 48) - 1));
        lp__commit(th, p);
        parent = node;
    }
    return parent;
}

/* ---- the event path -------------------------------------------------------------------------- */

/* Takes the calling thread's buffer, or NULL if this thread cannot record now. (*cancel: a
 * cancellation state to restore in lp__release; none is changed here any more: the stretches that
 * reach cancellation points or take shared locks turn it off themselves.) */
LP__HOT lp__thread *lp__acquire(int *cancel)
{
    *cancel = PTHREAD_CANCEL_DISABLE; /* nothing to restore */
    lp__thread *th = lp__thread_get();
    if (!th)
        return NULL;
    lp__own(th); /* only the flusher contends, for the time of one write */
    return th;
}

/* Gives the buffer back, flushing it first when it is older than the flush interval. */
LP__HOT void lp__release(lp__thread *th, uint64_t now, int cancel)
{
    if (th->len && now > th->first_time &&
        now - th->first_time >= (uint64_t)R.opts.flush_ms * 1000000ull)
        lp__flush_thread(th);
    lp__give_back(th);
    lp__cancel_restore(cancel);
}

uint64_t lp__stamp(void)
{
    if (!lp__recording())
        return 0;
    lp__thread *th = lp__thread_get();
    return th ? lp__event_time(th) : 0;
}

void lp__record_alloc(const void *addr, size_t size, lp_device device)
{
    if (!lp__recording() || lp__exclude_depth > 0)
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (!th)
        return;
    uint32_t stack = lp__want_stack(th, size) ? lp__capture_stack(th) : 0;
    uint64_t now = lp__event_time(th);
    uint8_t *type_at;
    uint8_t *p = lp__begin(th, GP_REC_ALLOC, now, LP__MAX_RECORD, &type_at);
    p = lp__put_addr(th, p, type_at, (uintptr_t)addr, device);
    p += gp_put_varint(p, size);
    p += gp_put_varint(p, stack);
    lp__commit(th, p);
    lp__release(th, now, cancel);
}

LP__HOT void lp__free_at(const void *addr, lp_device device, uint64_t when)
{
    if (!lp__recording())
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (!th)
        return;
    uint64_t now = when ? when : lp__event_time(th);
    uint8_t *type_at;
    uint8_t *p = lp__begin(th, GP_REC_FREE, now, LP__MAX_RECORD, &type_at);
    p = lp__put_addr(th, p, type_at, (uintptr_t)addr, device);
    lp__commit(th, p);
    lp__release(th, now, cancel);
}

void lp__record_free_at(const void *addr, lp_device device, uint64_t when)
{
    lp__free_at(addr, device, when);
}

void lp__record_free(const void *addr, lp_device device) { lp__free_at(addr, device, 0); }

void lp__record_tag(const void *addr, size_t size, lp_device device, const lp_tag *tag,
                    bool is_new)
{
    if (!lp__recording())
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (!th)
        return;
    /* In-process, a new tagged buffer is its own allocation and needs the stack; under an
     * interposer the raw ALLOC just recorded has it. */
    uint32_t stack = is_new && !R.interposed && lp__want_stack(th, size) ? lp__capture_stack(th)
                                                                         : 0;
    uint32_t op = lp__intern(th, tag->op), module = lp__intern(th, tag->module),
             detail = lp__intern(th, tag->detail);
    uint64_t now = lp__event_time(th);
    uint8_t *type_at;
    uint8_t *p = lp__begin(th, GP_REC_TAG, now, LP__MAX_RECORD, &type_at);
    if (tag->grad_enabled)
        *type_at |= GP_FLAG_GRAD;
    p = lp__put_addr(th, p, type_at, (uintptr_t)addr, device);
    p += gp_put_varint(p, size);
    p += gp_put_varint(p, (uint64_t)tag->category);
    p += gp_put_varint(p, op);
    p += gp_put_varint(p, module);
    p += gp_put_varint(p, detail);
    p += gp_put_varint(p, stack);
    lp__commit(th, p);
    lp__release(th, now, cancel);
}

/* A record of dt and an optional string id. */
static void lp__record_simple(uint8_t type, uint8_t flags, const char *name, bool has_name,
                              uint64_t count, bool has_count)
{
    if (!lp__recording())
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (!th)
        return;
    uint32_t sid = has_name ? lp__intern(th, name) : 0;
    uint64_t now = lp__event_time(th);
    uint8_t *type_at;
    uint8_t *p = lp__begin(th, type, now, LP__MAX_RECORD, &type_at);
    *type_at |= flags;
    if (has_name)
        p += gp_put_varint(p, sid);
    if (has_count)
        p += gp_put_varint(p, count);
    lp__commit(th, p);
    lp__release(th, now, cancel);
}

void lp__record_region_push(const char *name, bool module)
{
    lp__record_simple(GP_REC_REGION_PUSH, module ? GP_FLAG_MODULE : 0, name, true, 0, false);
}
void lp__record_region_pop(void) { lp__record_simple(GP_REC_REGION_POP, 0, NULL, false, 0, false); }
void lp__record_mark(const char *name) { lp__record_simple(GP_REC_MARK, 0, name, true, 0, false); }
void lp__record_grad_mode(bool grad_enabled, bool inference)
{
    lp__record_simple(GP_REC_GRAD_MODE,
                      (grad_enabled ? GP_FLAG_GRAD : 0) | (inference ? GP_FLAG_INFERENCE : 0),
                      NULL, false, 0, false);
}

/* Writes the NOTE record `rec` (len bytes, its dt 0) as a chunk of its own, after the thread's
 * buffer (which holds the key's definition): a record too big for the buffer. */
static void lp__write_own_chunk(lp__thread *th, uint64_t now, const uint8_t *rec, size_t len)
{
    lp__flush_thread(th);
    if (now <= th->last_time)
        now = th->last_time + 1;
    th->last_time = now;
    int saved_errno = errno, cancel = lp__cancel_off();
    lp__write_chunk_at(th->index, now, now, rec, len);
    lp__cancel_restore(cancel);
    errno = saved_errno;
}

void lp__record_note(const char *key, const char *value)
{
    if (!lp__recording())
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (!th)
        return;
    size_t whole = strlen(value), keep = whole;
    char cut[48] = "";
    if (whole > LP_NOTE_MAX_VALUE) { /* cut, and say so, on a UTF-8 character boundary */
        snprintf(cut, sizeof cut, " [cut: %zu bytes]", whole);
        keep = LP_NOTE_MAX_VALUE - strlen(cut);
        while (keep > 0 && ((unsigned char)value[keep] & 0xC0) == 0x80)
            keep--;
    }
    size_t n = keep + strlen(cut), need = n + 32;
    uint32_t kid = lp__intern(th, key);
    uint64_t now = lp__event_time(th);
    uint8_t *big = NULL, *type_at, *p;
    if (need <= LP__BUF_BYTES) {
        p = lp__begin(th, GP_REC_NOTE, now, need, &type_at);
    } else if ((big = lp__map_pages(need)) != NULL) {
        p = big;
        *p++ = GP_REC_NOTE;
        *p++ = 0; /* dt: the chunk's base time is the note's */
    } else {
        lp__release(th, now, cancel);
        lp__warn_once(LP__WARN_MEMORY, "out of memory for a long note; it is not recorded");
        return;
    }
    p += gp_put_varint(p, kid);
    p += gp_put_varint(p, n);
    memcpy(p, value, keep);
    memcpy(p + keep, cut, n - keep);
    p += n;
    if (big) {
        lp__write_own_chunk(th, now, big, (size_t)(p - big));
        lp__unmap_pages(big, need);
    } else {
        lp__commit(th, p);
    }
    lp__release(th, now, cancel);
}

void lp__record_failed(size_t size)
{
    char digits[24], *d = digits + sizeof digits;
    *--d = '\0';
    do
        *--d = (char)('0' + size % 10);
    while ((size /= 10) != 0);
    int saved_errno = errno;
    lp__record_note(LP_NOTE_ALLOC_FAILED, d);
    errno = saved_errno;
}

/* ---- flushing -------------------------------------------------------------------------------- */

void lp_flush(void)
{
    if (!lp__recording() || !lp__guard_enter())
        return;
    pthread_mutex_lock(&R.lock);
    lp__thread *list = R.threads;
    pthread_mutex_unlock(&R.lock);
    /* Others' buffers are waited for while their owner records one event, but not forever: a
     * thread stopped inside the recorder (SIGSTOP, a debugger) must not hang the exit. */
    uint64_t deadline = lp__now() + 500000000ull;
    for (lp__thread *th = list; th; th = th->next) {
        if (th == lp__self) {
            lp__own(th);
        } else {
            while (!lp__borrow(th)) {
                if (lp__now() > deadline)
                    goto next;
                struct timespec nap = {0, 50000};
                nanosleep(&nap, NULL);
            }
        }
        lp__flush_thread(th);
        lp__give_back(th);
    next:;
    }
    lp__guard_exit();
}

/*
 * The background flusher: every quarter flush interval, writes the buffers that sat idle for half
 * an interval, and recycles the states of threads that are gone: at once for those that ran the
 * thread-exit hook, and about once a second it asks about every thread (one that never ran the
 * hook, e.g. cancelled before its first event, is found then).
 */
static void *lp__flusher_main(void *arg)
{
    lp__guard_forever();
    uint64_t interval = (uint64_t)R.opts.flush_ms * 1000000ull;
    struct timespec nap = {(time_t)(interval / 4 / 1000000000ull),
                           (long)(interval / 4 % 1000000000ull)};
    uint64_t last_census = lp__now();
    while (!atomic_load(&R.flusher_stop)) {
        /* the nap, which lp_stop cuts short: an exiting program does not wait it out */
        if (syscall(SYS_futex, &R.flusher_stop, FUTEX_WAIT_PRIVATE, 0u, &nap, NULL, 0) != 0 &&
            errno != ETIMEDOUT && errno != EAGAIN && errno != EINTR)
            nanosleep(&nap, NULL); /* no futex here (a sandbox's filter): the plain nap */
        if (atomic_load(&R.flusher_stop))
            break;
        uint64_t now = lp__now();
        bool census = now - last_census >= 1000000000ull;
        if (census)
            last_census = now;
        pthread_mutex_lock(&R.lock);
        lp__thread *list = R.threads;
        pthread_mutex_unlock(&R.lock);
        for (lp__thread *th = list; th; th = th->next) {
            if (atomic_load(&th->exited))
                continue;
            if (census || atomic_load(&th->exiting)) {
                lp__reclaim(th);
                if (atomic_load(&th->exited))
                    continue;
            }
            if (!lp__borrow(th))
                continue; /* its owner is recording and flushes by age itself */
            if (th->len && now > th->first_time && now - th->first_time >= interval / 2)
                lp__flush_thread(th);
            lp__give_back(th);
        }
    }
    return NULL;
}

static void lp__start_flusher(void)
{
    atomic_store(&R.flusher_stop, 0u);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the flusher takes no signals */
    R.flusher_running = pthread_create(&R.flusher, NULL, lp__flusher_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!R.flusher_running)
        lp__warn_once(LP__WARN_OTHER, "no flusher thread: idle threads flush only at exit");
}

void lp__flush_from_signal(void)
{
    if (!lp__recording())
        return;
    lp__never = true;
    for (lp__thread *th = R.threads; th; th = th->next) {
        /* The interrupted thread's own buffer is consistent (len moves after a record is whole),
         * unless the signal came while it was being written (then writing it again could
         * duplicate it: it is left); other threads' busy buffers are left alone. */
        if (th == lp__self) {
            if (!th->writing)
                lp__flush_thread(th);
        } else if (lp__borrow(th)) {
            lp__flush_thread(th);
            lp__give_back(th);
        }
    }
}

/* ---- fatal signals --------------------------------------------------------------------------- */

static const int lp__fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT,
                                        SIGTERM, SIGINT, SIGQUIT, SIGHUP};

static void lp__on_fatal_signal(int sig)
{
    int saved_errno = errno;
    if (lp__recording() && getpid() != R.pid) { /* a vfork child: not the trace's process */
        signal(sig, SIG_DFL);
        errno = saved_errno;
        raise(sig);
        return;
    }
    if (lp__recording()) {
        char reason[32] = "signal ";
        size_t n = strlen(reason);
        /* No snprintf in a signal handler: the signal number by hand. */
        if (sig >= 10)
            reason[n++] = (char)('0' + sig / 10 % 10);
        reason[n++] = (char)('0' + sig % 10);
        reason[n] = '\0';
        lp__write_meta_unlocked("end_reason", reason);
        lp__write_meta_unlocked("clock", lp__clock_kind());
    }
    lp__flush_from_signal();
    signal(sig, SIG_DFL);
    errno = saved_errno;
    raise(sig); /* delivered when the handler returns (or at once for synchronous faults) */
}

/* Installs the flush-then-die handler on fatal signals the program left at their default. */
static void lp__install_signal_handlers(void)
{
    if (R.handlers_installed)
        return;
    R.handlers_installed = true;
    for (size_t i = 0; i < sizeof lp__fatal_signals / sizeof *lp__fatal_signals; i++) {
        struct sigaction old;
        if (sigaction(lp__fatal_signals[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
            (old.sa_flags & SA_SIGINFO))
            continue;
        struct sigaction sa = {0};
        sa.sa_handler = lp__on_fatal_signal;
        sigfillset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND | SA_NODEFER;
        sigaction(lp__fatal_signals[i], &sa, NULL);
    }
}

/* ---- fork ------------------------------------------------------------------------------------ */

static void lp__atfork_prepare(void) { pthread_mutex_lock(&R.lock); }
static void lp__atfork_parent(void) { pthread_mutex_unlock(&R.lock); }

/* The child gets its own trace: other threads are gone (their states are dropped), this thread's
 * tables start afresh, and the file is created on first use with the child's pid. The parent's
 * descriptor, inherited, is closed (if it still is the parent's trace). */
static void lp__atfork_child(void)
{
    pthread_mutex_init(&R.lock, NULL);
    if (!lp__recording())
        return;
    R.pid = getpid();
    lp__thread *self = lp__self;
    R.threads = NULL;
    R.next_thread_index = 0;
    if (self) {
        self->tid = (pid_t)syscall(SYS_gettid);
        atomic_store(&self->busy, LP__FREE);
        atomic_store(&self->exiting, false);
        atomic_store(&self->exited, false);
        self->writing = 0;
        self->len = 0;
        self->next = NULL;
        self->index = ++R.next_thread_index;
        R.threads = self;
    }
    int inherited = atomic_load(&R.fd);
    struct stat st;
    if (inherited >= 0 && fstat(inherited, &st) == 0 && st.st_dev == R.fd_dev &&
        st.st_ino == R.fd_ino)
        close(inherited);
    atomic_store(&R.fd, -1);
    R.fd_pending = true;
    R.flusher_running = false;
    int rc;
    if (strstr(R.path_template, "%p"))
        rc = lp__expand_path(R.path, sizeof R.path, R.path_template, R.pid);
    else
        rc = (size_t)snprintf(R.path, sizeof R.path, "%s.%d", R.path_template, (int)R.pid) <
                     sizeof R.path
                 ? 0
                 : -1;
    if (rc != 0) {
        R.fd_pending = false;
        R.path[0] = '\0';
        lp__disable("the forked child's trace path would be over 4095 bytes (ENAMETOOLONG); "
                    "the child is not recorded");
        return;
    }
    atomic_store(&R.modules, NULL);
    R.next_module_id = 0;
    lp__py_modules_reset();
    lp__clock_reset();
    atomic_fetch_add(&R.generation, 1);
    R.start_ns = lp__now();
    lp__start_flusher();
}

/* ---- lifecycle ------------------------------------------------------------------------------- */

static void lp__find_self(void)
{
    Dl_info info;
    if (!dladdr((void *)lp__find_self, &info) || !info.dli_fbase)
        return;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    if (info.dli_fname && strcmp(info.dli_fname, exe) == 0)
        return; /* linked into the program: frames are skipped by count */
    const lp__module *m = lp__module_find(atomic_load(&R.modules), (uintptr_t)lp__find_self);
    if (m) {
        R.self_lo = m->lo;
        R.self_hi = m->hi;
    }
}

int lp_start(const lp_options *o)
{
    if (lp__recording())
        return -1;
    if (!lp__guard_enter())
        return -1;
    int rc = -1, cancel = lp__cancel_off();
    pthread_mutex_lock(&R.lock);
    if (o)
        R.opts = *o;
    else {
        lp_options_default(&R.opts);
        lp_options_from_env(&R.opts);
    }
    if (R.opts.stack_depth > LP_MAX_STACK_DEPTH)
        R.opts.stack_depth = LP_MAX_STACK_DEPTH;
    if (R.opts.flush_ms < 1)
        R.opts.flush_ms = 1;
    if (!R.opts.enabled)
        goto out;
    R.pid = getpid();
    snprintf(R.path_template, sizeof R.path_template, "%s", R.opts.output);
    char msg[480], why[200], shown[200];
    if (lp__expand_path(R.path, sizeof R.path, R.path_template, R.pid) != 0) {
        snprintf(msg, sizeof msg,
                 "the trace path '%s' is over 4095 bytes once %%p is expanded (ENAMETOOLONG); "
                 "not recording",
                 lp__short_path(R.path_template, shown, sizeof shown));
        lp__warn_once(LP__WARN_WRITE, msg);
        R.path[0] = '\0';
        goto out;
    }
    int fd = lp__create_file();
    if (fd < 0) {
        lp__create_error(errno, R.path, why, sizeof why);
        snprintf(msg, sizeof msg, "cannot create the trace file: %s; path '%s'; not recording",
                 why, lp__short_path(R.path, shown, sizeof shown));
        lp__warn_once(LP__WARN_WRITE, msg);
        goto out;
    }
    atomic_store(&R.fd, fd);
    R.fd_pending = false;
    atomic_store(&R.disabled, false);
    R.start_ns = lp__now();
    lp__clock_reset();
    atomic_fetch_add(&R.generation, 1);
    lp__py_modules_reset();
    lp__write_metadata();
    lp__rescan_modules();
    lp__find_self();
    if (!R.key_made)
        R.key_made = pthread_key_create(&R.key, lp__thread_exit) == 0;
    static bool atfork_done;
    if (!atfork_done)
        atfork_done = pthread_atfork(lp__atfork_prepare, lp__atfork_parent, lp__atfork_child) == 0;
    lp__install_signal_handlers();
    atomic_store(&R.recording, true);
    rc = 0;
out:
    pthread_mutex_unlock(&R.lock);
    if (rc == 0)
        lp__start_flusher();
    lp__cancel_restore(cancel);
    lp__guard_exit();
    return rc;
}

/* Writes why the recording ended ("end_reason" metadata: "exit", "exec", "signal N") and how
 * its times were read ("clock"). */
static void lp__end_reason(const char *reason)
{
    int cancel = lp__cancel_off();
    lp__write_meta_unlocked("end_reason", reason);
    lp__write_meta_unlocked("clock", lp__clock_kind());
    lp__cancel_restore(cancel);
}

/* Writes the end reason "exit" and the END record on this thread and flushes everything. */
static void lp__finish(void)
{
    lp__end_reason("exit");
    lp__record_simple(GP_REC_END, 0, NULL, false, 0, false);
    lp_flush();
}

void lp_stop(void)
{
    if (!lp__recording())
        return;
    lp__finish();
    atomic_store(&R.recording, false);
    if (R.flusher_running) {
        atomic_store(&R.flusher_stop, 1u);
        syscall(SYS_futex, &R.flusher_stop, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        pthread_join(R.flusher, NULL);
        R.flusher_running = false;
    }
    /* The descriptor stays open: a thread that saw `recording` just before it went off may still
     * write one chunk, which must land in the trace, never in a file the program opened since. */
    pthread_mutex_lock(&R.lock);
    atomic_store(&R.fd, -1);
    R.fd_pending = false;
    pthread_mutex_unlock(&R.lock);
}

/* Whether this is a child that shares the recorder's memory without being its process: a vfork
 * child (posix_spawn's, Python's subprocess), where no fork handler ran. Its exec or _exit is
 * not the end of the trace, which belongs to the parent: nothing is written. */
static bool lp__in_vfork_child(void) { return getpid() != R.pid; }

void lp__before_exit(void)
{
    if (lp__recording() && !lp__in_vfork_child())
        lp__finish();
}

void lp__before_exec(void)
{
    if (!lp__recording() || lp__in_vfork_child())
        return;
    /* If the exec fails the program goes on, and the end reason written at its end replaces
     * this one (the last META of a key wins). */
    lp__end_reason("exec");
    lp_flush();
}

bool lp_is_recording(void) { return lp__recording(); }
const char *lp_output_path(void) { return atomic_load(&R.fd) >= 0 || R.fd_pending ? R.path : ""; }

void lp_set_unwinder(lp_unwind_fn fn, void *user_data)
{
    R.unwinder = fn;
    R.unwinder_user = user_data;
}

void lp_thread_name(const char *name)
{
    if (!lp__recording() || !lp__guard_enter())
        return;
    int cancel;
    lp__thread *th = lp__acquire(&cancel);
    if (th) {
        uint8_t *p = lp__reserve(th, 64 + 16);
        lp__start_untimed(th);
        *p++ = GP_REC_THREAD;
        p += gp_put_varint(p, (uint64_t)th->tid);
        p += lp__put_str(p, name ? name : "", 63);
        lp__commit(th, p);
        lp__release(th, lp__now(), cancel);
    }
    lp__guard_exit();
}

void lp_grad_mode(bool grad_enabled, bool inference_mode)
{
    if (!lp__recording() || !lp__guard_enter())
        return;
    lp__record_grad_mode(grad_enabled, inference_mode);
    lp__guard_exit();
}
