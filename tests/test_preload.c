/*
 * Subprocess tests of the interposers: each program in tests/preload/ runs under
 * LD_PRELOAD=libprof_preload.so (or, alloc_wrapped, linked with ld --wrap) with
 * GRADPROF_OUTPUT=<tmpdir>/t.%p.gptrace, and the trace it leaves is read back with gptrace. The
 * programs' own allocations have distinctive sizes (listed in the headers in tests/preload/); the
 * dynamic loader's and libc's are ignored by size. Every program also runs without the preload,
 * and its exit status and stdout must not change.
 *
 * Living inside other programs (issue 12): descriptor games (fd_games), cancelled threads
 * (cancel_alloc), thread-specific-data destructors (tsd_alloc), the realloc race (realloc_race),
 * every operator new/delete under glibc, tcmalloc and jemalloc (cxx_forms, c_forms), the end
 * reason, the command line and path messages. Counts are exact.
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gradprof/trace.h"
#include "preload/alloc_abort.h"
#include "preload/alloc_cxx.h"
#include "preload/alloc_fork.h"
#include "preload/alloc_known.h"
#include "preload/alloc_threads.h"
#include "preload/call_chain.h"
#include "preload/cancel_alloc.h"
#include "preload/cxx_forms.h"
#include "preload/fd_games.h"
#include "preload/py_alloc.h"
#include "preload/py_deep.h"
#include "preload/realloc_race.h"
#include "preload/tsd_alloc.h"
#include "preload/getattr_first.h"
#include "preload/exclude_own.h"
#include "preload/fp_chains.h"
#include "preload/fp_garbage.h"
#include "preload/fsize_limit.h"
#include "preload/vfork_exec.h"
#include "analysis.h"
#include "symbolize.h"
#include "tsc_clock.h"

#define RUN_TIMEOUT_S 120
static int run_timeout_s = RUN_TIMEOUT_S; /* a test that looks for hangs sets it lower */
static const char *preload_list;           /* LD_PRELOAD's value, if not the library alone */

/* The path of program `name` built beside alloc_known (tests/preload/ in the build tree). */
static const char *prog(const char *name)
{
    static char paths[8][PATH_MAX];
    static int next_slot;
    char *p = paths[next_slot++ % 8];
    const char *slash = strrchr(GP_ALLOC_KNOWN, '/');
    int dir = slash ? (int)(slash - GP_ALLOC_KNOWN) : 1;
    snprintf(p, PATH_MAX, "%.*s/%s", dir, slash ? GP_ALLOC_KNOWN : ".", name);
    return p;
}

/* ---- running a program ----------------------------------------------------------------------- */

typedef struct run_result {
    pid_t pid;
    int status; /* as from waitpid */
    char out[8192];
    size_t out_len;
    char err[16384];
    size_t err_len;
} run_result;

/* Appends what is readable on fd to buf (NUL-terminated, truncated at cap - 1); false at EOF. */
static bool drain(int fd, char *buf, size_t cap, size_t *len)
{
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    size_t keep = (size_t)n < cap - 1 - *len ? (size_t)n : cap - 1 - *len;
    memcpy(buf + *len, tmp, keep);
    *len += keep;
    buf[*len] = '\0';
    return true;
}

/*
 * Runs argv[0] with a fixed environment: PATH, GRADPROF_OUTPUT=<dir>/t.%p.gptrace,
 * GRADPROF_FLUSH_MS=20, LD_PRELOAD=<the preload library> (or preload_list) when `preload`, then
 * the "K=V" strings of
 * `extra` (NULL-terminated, may be NULL; later entries win in getenv's first-match order, so they
 * go first). Captures stdout and stderr; kills the program after run_timeout_s (and fails).
 */
static void run(char *const argv[], bool preload, const char *dir, const char *const *extra,
                run_result *r)
{
    memset(r, 0, sizeof *r);
    char output[PATH_MAX + 32], ld_preload[2 * PATH_MAX + 16];
    snprintf(output, sizeof output, "GRADPROF_OUTPUT=%s/t.%%p.gptrace", dir);
    snprintf(ld_preload, sizeof ld_preload, "LD_PRELOAD=%s",
             preload_list ? preload_list : GP_PRELOAD_LIB);
    const char *envp[32];
    size_t n = 0;
    for (size_t i = 0; extra && extra[i] && n < 24; i++)
        envp[n++] = extra[i];
    envp[n++] = "PATH=/usr/local/bin:/usr/bin:/bin";
    envp[n++] = output;
    envp[n++] = "GRADPROF_FLUSH_MS=20";
    if (preload)
        envp[n++] = ld_preload;
    envp[n] = NULL;

    int out[2], err[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(err, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core); /* abort() must not leave a core file */
        dup2(out[1], 1);
        dup2(err[1], 2);
        execve(argv[0], argv, (char *const *)envp);
        dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(126);
    }
    close(out[1]);
    close(err[1]);
    r->pid = pid;
    struct pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    time_t deadline = time(NULL) + run_timeout_s;
    while ((fds[0].fd >= 0 || fds[1].fd >= 0) && time(NULL) < deadline) {
        if (poll(fds, 2, 1000) < 0 && errno != EINTR)
            break;
        if (fds[0].fd >= 0 && fds[0].revents && !drain(out[0], r->out, sizeof r->out, &r->out_len))
            fds[0].fd = -1;
        if (fds[1].fd >= 0 && fds[1].revents && !drain(err[0], r->err, sizeof r->err, &r->err_len))
            fds[1].fd = -1;
    }
    if (fds[0].fd >= 0 || fds[1].fd >= 0)
        kill(pid, SIGKILL);
    close(out[0]);
    close(err[0]);
    assert_int_equal(waitpid(pid, &r->status, 0), pid);
    if (r->err_len)
        fprintf(stderr, "[%.200s stderr]\n%s", argv[0], r->err);
    if (time(NULL) >= deadline)
        fail_msg("%.200s did not finish in %d s (hung?)", argv[0], run_timeout_s);
}

/* Runs `exe` without arguments; see run(). */
static void run_exe(const char *exe, bool preload, const char *dir, const char *const *extra,
                    run_result *r)
{
    char *argv[] = {(char *)exe, NULL};
    run(argv, preload, dir, extra, r);
}

/* Runs `exe` with and without the preload and checks that exit status and stdout are the same;
 * the preloaded run's result is left in *r. */
static void run_both(const char *exe, const char *dir, const char *const *extra, run_result *r)
{
    static run_result plain;
    run_exe(exe, false, dir, extra, &plain);
    run_exe(exe, true, dir, extra, r);
    assert_int_equal(r->status, plain.status);
    assert_string_equal(r->out, plain.out);
}

static bool exited_with(const run_result *r, int code)
{
    return WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

/* ---- temporary directories ------------------------------------------------------------------- */

/* A new empty directory under TMPDIR (or /tmp); the path is static storage per slot. */
static const char *make_dir(void)
{
    static char path[PATH_MAX];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/gp_preload_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(path));
    return path;
}

/* Removes `dir` and the files in it. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[PATH_MAX + 256];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

/* The number of entries in `dir`. */
static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The traces of process `pid` in `dir` (t.<pid>.gptrace, then .1, .2, ...): fills paths[] and
 * returns how many exist. */
static int traces_of(const char *dir, pid_t pid, char paths[][PATH_MAX + 64], int max)
{
    int n = 0;
    for (int k = 0; k < 10 && n < max; k++) {
        char *p = paths[n];
        if (k == 0)
            snprintf(p, PATH_MAX + 64, "%s/t.%d.gptrace", dir, (int)pid);
        else
            snprintf(p, PATH_MAX + 64, "%s/t.%d.gptrace.%d", dir, (int)pid, k);
        if (access(p, R_OK) == 0)
            n++;
    }
    return n;
}

/* ---- reading a trace ------------------------------------------------------------------------- */

/* A live-block table: address -> size, open addressing with linear probing. */
typedef struct live_map {
    uint64_t *keys; /* 0 = empty (no block lives at address 0) */
    uint64_t *sizes;
    size_t cap, len;
} live_map;

static size_t live_slot(const live_map *m, uint64_t addr)
{
    size_t i = (size_t)((addr >> 4) * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
    while (m->keys[i] != 0 && m->keys[i] != addr)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void live_put(live_map *m, uint64_t addr, uint64_t size)
{
    if ((m->len + 1) * 2 > m->cap) {
        live_map bigger = {calloc(m->cap * 2, 8), calloc(m->cap * 2, 8), m->cap * 2, 0};
        assert_non_null(bigger.keys);
        assert_non_null(bigger.sizes);
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i])
                live_put(&bigger, m->keys[i], m->sizes[i]);
        free(m->keys);
        free(m->sizes);
        *m = bigger;
    }
    size_t i = live_slot(m, addr);
    m->len += m->keys[i] == 0;
    m->keys[i] = addr;
    m->sizes[i] = size;
}

/* Removes `addr`; returns its size, or -1 if it was not live. */
static int64_t live_take(live_map *m, uint64_t addr)
{
    size_t i = live_slot(m, addr);
    if (m->keys[i] == 0)
        return -1;
    int64_t size = (int64_t)m->sizes[i];
    m->keys[i] = 0;
    m->len--;
    /* Backward-shift deletion: re-place the rest of the probe run. */
    for (size_t j = (i + 1) & (m->cap - 1); m->keys[j] != 0; j = (j + 1) & (m->cap - 1)) {
        uint64_t k = m->keys[j], s = m->sizes[j];
        m->keys[j] = 0;
        m->len--;
        live_put(m, k, s);
    }
    return size;
}

/* What the trace says about one of the sizes a test asks about. */
typedef struct size_stat {
    uint64_t size;
    unsigned allocs, frees;
    uint64_t addr_bits;      /* OR of the block addresses: alignment */
    uint64_t last_alloc_seq; /* event number of the last ALLOC (1-based) */
    uint64_t last_free_seq;  /* event number of the last FREE */
    uint32_t thread;         /* the thread of the first ALLOC */
    bool other_threads;      /* an ALLOC or FREE on another thread */
    uint32_t stack;          /* the stack of the first ALLOC */
} size_stat;

typedef struct summary {
    gp_trace_info info;
    char mode[32];            /* META "mode" */
    char pid[16];             /* META "pid" */
    uint64_t allocs;          /* every ALLOC */
    uint64_t unmatched_frees; /* FREEs of addresses not live in this trace */
    uint64_t double_allocs;   /* ALLOCs of an address already live */
    uint64_t huge_allocs;     /* ALLOCs of >= 2^62 bytes (a failed allocation recorded) */
    uint64_t failed_notes;    /* LP_NOTE_ALLOC_FAILED notes */
    uint64_t failed_not_huge; /* of them, notes whose size is not SIZE_MAX / 2 */
    uint64_t tracked_bytes;   /* bytes of the ALLOCs of the tracked sizes */
    uint64_t tracked_frees;   /* FREEs of blocks of the tracked sizes */
    uint64_t not_increasing;  /* events whose time is not after their thread's previous one */
    char end_reason[32];      /* META "end_reason" */
    char clock[96];           /* META "clock" */
    size_t command_len;       /* length of META "command" */
    char command[512];        /* its first bytes */
    bool command_truncated;   /* META "command_truncated" present */
    size_stat sizes[32];
    int nsizes;
} summary;

/* The size_stat slot of `size`, or NULL if the test did not ask about it. */
static size_stat *stat_of(summary *s, uint64_t size)
{
    for (int i = 0; i < s->nsizes; i++)
        if (s->sizes[i].size == size)
            return &s->sizes[i];
    return NULL;
}

/* Reads the whole trace at `path`, tracking the `n` sizes in `sizes`. The trace stays open in *out
 * (for stacks and modules) when `out` is non-NULL; the caller closes it. */
static void summarize(const char *path, const uint64_t *sizes, int n, summary *s, gp_trace **out)
{
    memset(s, 0, sizeof *s);
    assert_true(n <= 32);
    for (int i = 0; i < n; i++)
        s->sizes[i].size = sizes[i];
    s->nsizes = n;

    char err[512] = "";
    gp_trace *t = NULL;
    if (gp_trace_open(path, &t, err, sizeof err) != 0)
        fail_msg("gp_trace_open(%s): %s", path, err);
    live_map live = {calloc(1024, 8), calloc(1024, 8), 1024, 0};
    assert_non_null(live.keys);
    assert_non_null(live.sizes);
    gp_event ev;
    int rc;
    uint64_t seq = 0;
    enum { MAX_THREADS = 4096 };
    uint64_t *last_time = calloc(MAX_THREADS, sizeof *last_time);
    assert_non_null(last_time);
    while ((rc = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
        seq++;
        if (ev.thread < MAX_THREADS) {
            s->not_increasing += last_time[ev.thread] != 0 && ev.time_ns <= last_time[ev.thread];
            last_time[ev.thread] = ev.time_ns;
        }
        if (ev.kind == GP_EV_ALLOC) {
            s->allocs++;
            s->huge_allocs += ev.size >= (1ull << 62);
            if (live_take(&live, ev.addr) >= 0)
                s->double_allocs++;
            live_put(&live, ev.addr, ev.size);
            size_stat *st = stat_of(s, ev.size);
            if (st) {
                if (st->allocs++ == 0) {
                    st->thread = ev.thread;
                    st->stack = ev.stack;
                }
                st->other_threads |= ev.thread != st->thread;
                st->addr_bits |= ev.addr;
                st->last_alloc_seq = seq;
                s->tracked_bytes += ev.size;
            }
        } else if (ev.kind == GP_EV_NOTE && strcmp(ev.name, LP_NOTE_ALLOC_FAILED) == 0) {
            s->failed_notes++;
            s->failed_not_huge += strtoull(ev.detail, NULL, 10) != SIZE_MAX / 2;
        } else if (ev.kind == GP_EV_FREE) {
            int64_t size = live_take(&live, ev.addr);
            if (size < 0) {
                s->unmatched_frees++;
                continue;
            }
            size_stat *st = stat_of(s, (uint64_t)size);
            if (st) {
                s->tracked_frees++;
                st->frees++;
                st->other_threads |= ev.thread != st->thread;
                st->last_free_seq = seq;
            }
        }
    }
    if (rc < 0)
        fail_msg("gp_trace_next(%s): %s", path, err);
    s->info = *gp_trace_info_get(t);
    const char *v = gp_trace_meta(t, "mode");
    snprintf(s->mode, sizeof s->mode, "%s", v ? v : "");
    v = gp_trace_meta(t, "pid");
    snprintf(s->pid, sizeof s->pid, "%s", v ? v : "");
    v = gp_trace_meta(t, "end_reason");
    snprintf(s->end_reason, sizeof s->end_reason, "%s", v ? v : "");
    v = gp_trace_meta(t, "clock");
    snprintf(s->clock, sizeof s->clock, "%s", v ? v : "");
    v = gp_trace_meta(t, "command");
    s->command_len = v ? strlen(v) : 0;
    snprintf(s->command, sizeof s->command, "%s", v ? v : "");
    s->command_truncated = gp_trace_meta(t, "command_truncated") != NULL;
    free(last_time);
    free(live.keys);
    free(live.sizes);
    if (out)
        *out = t;
    else
        gp_trace_close(t);
}

/* Asserts that size `size` was allocated `allocs` times and freed `frees` times. */
static void expect_size(summary *s, uint64_t size, unsigned allocs, unsigned frees)
{
    size_stat *st = stat_of(s, size);
    assert_non_null(st);
    if (st->allocs != allocs || st->frees != frees)
        fail_msg("size %llu: %u allocs, %u frees; expected %u and %u", (unsigned long long)size,
                 st->allocs, st->frees, allocs, frees);
}

/* Asserts that every block of `size` was aligned to `align`. */
static void expect_aligned(summary *s, uint64_t size, uint64_t align)
{
    size_stat *st = stat_of(s, size);
    assert_non_null(st);
    assert_int_equal(st->addr_bits % align, 0);
}

/* The single trace of process `pid` in `dir`, summarized. */
static void summarize_pid(const char *dir, pid_t pid, const uint64_t *sizes, int n, summary *s,
                          gp_trace **out)
{
    char paths[4][PATH_MAX + 64];
    int found = traces_of(dir, pid, paths, 4);
    if (found != 1)
        fail_msg("%d traces of pid %d in %s; expected 1", found, (int)pid, dir);
    summarize(paths[0], sizes, n, s, out);
    char want[16];
    snprintf(want, sizeof want, "%d", (int)pid);
    assert_string_equal(s->pid, want);
}

/* ---- alloc_known ----------------------------------------------------------------------------- */

static const uint64_t known_sizes[] = {
    AK_MALLOC_SIZE,
    AK_BIG_SIZE,
    (AK_CALLOC_N * AK_CALLOC_SIZE),
    AK_REALLOC_FIRST,
    AK_REALLOC_GROW,
    AK_REALLOC_SHRINK,
    AK_REALLOC_KEEP,
    AK_POSIX_MEMALIGN_SIZE,
    AK_ALIGNED_ALLOC_SIZE,
    AK_MEMALIGN_SIZE,
    AK_VALLOC_SIZE,
    AK_PVALLOC_SIZE,
    (AK_REALLOCARRAY_N1 * AK_REALLOCARRAY_SIZE),
    (AK_REALLOCARRAY_N2 * AK_REALLOCARRAY_SIZE),
    AK_STRDUP_SIZE,
};
#define KNOWN_WRAPPED_SIZES 9 /* the first 9 of known_sizes: what libprof_wrap.a sees */

/* The checks alloc_known and alloc_wrapped share: the functions both interposers hook. */
static void expect_known_common(summary *s)
{
    assert_true(s->info.clean_end);
    assert_false(s->info.damaged);
    assert_int_equal(s->info.lost_events, 0);
    assert_int_equal(s->double_allocs, 0);
    /* the failed malloc, realloc and posix_memalign: no allocation, a note each */
    assert_int_equal(s->huge_allocs, 0);
    assert_int_equal(s->failed_notes, AK_FAILED_COUNT);
    assert_int_equal(s->failed_not_huge, 0);
    expect_size(s, AK_MALLOC_SIZE, AK_MALLOC_COUNT, AK_MALLOC_COUNT);
    expect_size(s, AK_BIG_SIZE, 1, 1);
    expect_size(s, AK_CALLOC_N * AK_CALLOC_SIZE, AK_CALLOC_COUNT, AK_CALLOC_COUNT);
    /* realloc = free(old) + alloc(new), in that order; realloc(p, 0) frees. */
    expect_size(s, AK_REALLOC_FIRST, 1, 1);
    expect_size(s, AK_REALLOC_GROW, 1, 1);
    expect_size(s, AK_REALLOC_SHRINK, 1, 1);
    size_stat *first = stat_of(s, AK_REALLOC_FIRST), *grow = stat_of(s, AK_REALLOC_GROW),
              *shrink = stat_of(s, AK_REALLOC_SHRINK);
    assert_true(first->last_alloc_seq < first->last_free_seq);
    assert_true(first->last_free_seq < grow->last_alloc_seq);
    assert_true(grow->last_free_seq < shrink->last_alloc_seq);
    /* The failed realloc left the block alone: one alloc, one free (the program's own). */
    expect_size(s, AK_REALLOC_KEEP, 1, 1);
    expect_size(s, AK_POSIX_MEMALIGN_SIZE, 1, 1);
    expect_aligned(s, AK_POSIX_MEMALIGN_SIZE, AK_POSIX_MEMALIGN_ALIGN);
    expect_size(s, AK_ALIGNED_ALLOC_SIZE, 1, 1);
    expect_aligned(s, AK_ALIGNED_ALLOC_SIZE, AK_ALIGNED_ALLOC_ALIGN);
}

static void test_known_preload(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_KNOWN, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AK_STDOUT);
    assert_int_equal(r.err_len, 0); /* not a word from gradprof */
    assert_int_equal(count_files(dir), 1);

    summary s;
    summarize_pid(dir, r.pid, known_sizes, (int)(sizeof known_sizes / sizeof *known_sizes), &s,
                  NULL);
    assert_string_equal(s.mode, "preload");
    expect_known_common(&s);
    expect_size(&s, AK_MEMALIGN_SIZE, 1, 1);
    expect_aligned(&s, AK_MEMALIGN_SIZE, AK_MEMALIGN_ALIGN);
    expect_size(&s, AK_VALLOC_SIZE, 1, 1);
    expect_aligned(&s, AK_VALLOC_SIZE, 4096);
    expect_size(&s, AK_PVALLOC_SIZE, 1, 1);
    expect_aligned(&s, AK_PVALLOC_SIZE, 4096);
    uint64_t ra1 = AK_REALLOCARRAY_N1 * AK_REALLOCARRAY_SIZE,
             ra2 = AK_REALLOCARRAY_N2 * AK_REALLOCARRAY_SIZE;
    expect_size(&s, ra1, 1, 1);
    expect_size(&s, ra2, 1, 1);
    assert_true(stat_of(&s, ra1)->last_free_seq < stat_of(&s, ra2)->last_alloc_seq);
    expect_size(&s, AK_STRDUP_SIZE, 1, 1); /* inside libc, through the public malloc */
    uint64_t bytes = AK_MALLOC_COUNT * AK_MALLOC_SIZE + AK_BIG_SIZE +
                     AK_CALLOC_COUNT * AK_CALLOC_N * AK_CALLOC_SIZE + AK_REALLOC_FIRST +
                     AK_REALLOC_GROW + AK_REALLOC_SHRINK + AK_REALLOC_KEEP +
                     AK_POSIX_MEMALIGN_SIZE + AK_ALIGNED_ALLOC_SIZE + AK_MEMALIGN_SIZE +
                     AK_VALLOC_SIZE + AK_PVALLOC_SIZE + ra1 + ra2 + AK_STRDUP_SIZE;
    assert_int_equal(s.tracked_bytes, bytes);
    remove_dir(dir);
}

/* Link-time wrapping, no LD_PRELOAD: the same counts for the wrapped functions, and nothing else
 * (libc's own allocations and those of unwrapped objects are not seen). */
static void test_known_wrapped(void **state)
{
    const char *dir = make_dir();
    /* Under GRADPROF_SANITIZE alloc_wrapped carries ASan, which must let the huge malloc fail. */
    const char *extra[] = {"ASAN_OPTIONS=allocator_may_return_null=1", NULL};
    run_result plain, r;
    run_exe(GP_ALLOC_WRAPPED, false, dir, (const char *[]){"GRADPROF_ENABLE=0", extra[0], NULL},
            &plain);
    assert_int_equal(count_files(dir), 0);
    run_exe(GP_ALLOC_WRAPPED, false, dir, extra, &r);
    assert_true(exited_with(&r, 0));
    assert_true(exited_with(&plain, 0));
    assert_string_equal(r.out, AK_STDOUT);
    assert_string_equal(plain.out, AK_STDOUT);

    summary s;
    summarize_pid(dir, r.pid, known_sizes, KNOWN_WRAPPED_SIZES, &s, NULL);
    assert_string_equal(s.mode, "wrap");
    expect_known_common(&s);
    unsigned own = AK_MALLOC_COUNT + 1 + AK_CALLOC_COUNT + 3 + 1 + 1 + 1;
    assert_int_equal(s.allocs, own);
    assert_int_equal(s.unmatched_frees, 0);
    remove_dir(dir);
}

/* ---- C++ ------------------------------------------------------------------------------------- */

static void test_cxx_preload(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_CXX, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AX_STDOUT);

    const uint64_t sizes[] = {AX_NEW_SIZE,      AX_ARRAY_SIZE,    AX_ALIGNED_SIZE,
                              AX_NOTHROW_SIZE,  AX_ELEM_SIZE,     2 * AX_ELEM_SIZE,
                              4 * AX_ELEM_SIZE, 8 * AX_ELEM_SIZE, 16 * AX_ELEM_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, (int)(sizeof sizes / sizeof *sizes), &s, NULL);
    assert_true(s.info.clean_end);
    expect_size(&s, AX_NEW_SIZE, AX_NEW_COUNT, AX_NEW_COUNT);
    expect_size(&s, AX_ARRAY_SIZE, AX_ARRAY_COUNT, AX_ARRAY_COUNT);
    expect_size(&s, AX_ALIGNED_SIZE, 1, 1);
    expect_aligned(&s, AX_ALIGNED_SIZE, AX_ALIGNED_ALIGN);
    expect_size(&s, AX_NOTHROW_SIZE, 1, 1);
    /* push_back x5 grows the capacity 1 -> 2 -> 4 -> 8. */
    expect_size(&s, AX_ELEM_SIZE, 1, 1);
    expect_size(&s, 2 * AX_ELEM_SIZE, 1, 1);
    expect_size(&s, 4 * AX_ELEM_SIZE, 1, 1);
    expect_size(&s, 8 * AX_ELEM_SIZE, 1, 1);
    expect_size(&s, 16 * AX_ELEM_SIZE, 0, 0);
    remove_dir(dir);
}

/* ---- threads --------------------------------------------------------------------------------- */

static void test_threads_preload(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_THREADS, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AT_STDOUT);

    uint64_t sizes[AT_THREADS];
    for (int t = 0; t < AT_THREADS; t++)
        sizes[t] = AT_SIZE(t);
    summary s;
    summarize_pid(dir, r.pid, sizes, AT_THREADS, &s, NULL);
    assert_true(s.info.clean_end);
    assert_false(s.info.damaged);
    assert_int_equal(s.info.lost_events, 0);
    assert_int_equal(s.double_allocs, 0);
    for (int t = 0; t < AT_THREADS; t++) {
        expect_size(&s, sizes[t], AT_PAIRS, AT_PAIRS);
        assert_false(s.sizes[t].other_threads); /* each size on one thread only */
        for (int u = 0; u < t; u++)
            assert_int_not_equal(s.sizes[t].thread, s.sizes[u].thread);
    }
    assert_int_equal(s.tracked_bytes,
                     (uint64_t)AT_PAIRS * AT_THREADS * AT_SIZE(0) +
                         (uint64_t)AT_PAIRS * 8 * (AT_THREADS - 1) * AT_THREADS / 2);
    remove_dir(dir);
}

/* ---- fork, exit, _exit, exec ----------------------------------------------------------------- */

/* The pid alloc_fork printed for child k ("alloc_fork: child<k> <pid>" on stderr). */
static pid_t child_pid(const run_result *r, int k)
{
    char key[32];
    snprintf(key, sizeof key, "alloc_fork: child%d ", k);
    const char *p = strstr(r->err, key);
    if (!p)
        fail_msg("no '%s' in alloc_fork's stderr", key);
    return (pid_t)atoi(p + strlen(key));
}

static void test_fork_preload(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_FORK, dir, NULL, &r); /* the plain run leaves no traces */
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AF_STDOUT); /* execle passed argv and envp on */

    const uint64_t sizes[] = {AF_PARENT_BEFORE, AF_CHILD_EXIT, AF_CHILD_UNDERSCORE, AF_CHILD_EXEC,
                              AF_PARENT_AFTER};
    const int n = (int)(sizeof sizes / sizeof *sizes);
    summary s;
    /* The parent: its own allocations only. */
    summarize_pid(dir, r.pid, sizes, n, &s, NULL);
    assert_true(s.info.clean_end);
    expect_size(&s, AF_PARENT_BEFORE, AF_PARENT_BEFORE_COUNT, AF_PARENT_BEFORE_COUNT);
    expect_size(&s, AF_PARENT_AFTER, AF_PARENT_AFTER_COUNT, AF_PARENT_AFTER_COUNT);
    expect_size(&s, AF_CHILD_EXIT, 0, 0);
    expect_size(&s, AF_CHILD_UNDERSCORE, 0, 0);
    expect_size(&s, AF_CHILD_EXEC, 0, 0);

    /* Child 1 (exit): its own trace with its own allocations, and the free of an inherited block
     * this trace never saw allocated. */
    summarize_pid(dir, child_pid(&r, 1), sizes, n, &s, NULL);
    assert_true(s.info.clean_end);
    expect_size(&s, AF_CHILD_EXIT, AF_CHILD_EXIT_COUNT, AF_CHILD_EXIT_COUNT);
    expect_size(&s, AF_PARENT_BEFORE, 0, 0);
    expect_size(&s, AF_PARENT_AFTER, 0, 0);
    assert_true(s.unmatched_frees >= 1);

    /* Child 2 (_exit, which skips destructors): the hook ended the trace cleanly. */
    summarize_pid(dir, child_pid(&r, 2), sizes, n, &s, NULL);
    assert_true(s.info.clean_end);
    expect_size(&s, AF_CHILD_UNDERSCORE, AF_CHILD_UNDERSCORE_COUNT, AF_CHILD_UNDERSCORE_COUNT);
    expect_size(&s, AF_PARENT_BEFORE, 0, 0);

    /* Child 3 (execle): the image before exec flushed its trace; the shell after it wrote its own
     * under the same pid (t.<pid>.gptrace.1). */
    char paths[4][PATH_MAX + 64];
    pid_t c3 = child_pid(&r, 3);
    assert_int_equal(traces_of(dir, c3, paths, 4), 2);
    unsigned exec_allocs = 0;
    for (int i = 0; i < 2; i++) {
        summarize(paths[i], sizes, n, &s, NULL);
        exec_allocs += stat_of(&s, AF_CHILD_EXEC)->allocs;
    }
    assert_int_equal(exec_allocs, 1);
    assert_int_equal(count_files(dir), 5);
    remove_dir(dir);
}

/* ---- abort ----------------------------------------------------------------------------------- */

static void test_abort_preload(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_ABORT, dir, NULL, &r);
    assert_true(WIFSIGNALED(r.status));
    assert_int_equal(WTERMSIG(r.status), SIGABRT);
    assert_string_equal(r.out, AB_STDOUT);

    const uint64_t sizes[] = {AB_EARLY, AB_LATE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 2, &s, NULL);
    assert_false(s.info.clean_end);
    /* Written long before the abort (many flush intervals): all there, none freed. */
    expect_size(&s, AB_EARLY, AB_EARLY_COUNT, 0);
    assert_true(stat_of(&s, AB_LATE)->allocs <= AB_LATE_COUNT);
    assert_int_equal(stat_of(&s, AB_LATE)->frees, 0);
    remove_dir(dir);
}

/* ---- stacks ---------------------------------------------------------------------------------- */

/* The start of `name` in `exe` per nm, and the start of the next symbol after it. */
static void nm_range(const char *exe, const char *name, uint64_t *start, uint64_t *end)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "%s '%s'", GP_NM, exe);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[1024];
    uint64_t addrs[4096];
    size_t n = 0;
    *start = 0;
    while (fgets(line, sizeof line, f) && n < 4096) {
        unsigned long long a;
        char type, sym[900];
        if (sscanf(line, "%llx %c %899s", &a, &type, sym) != 3)
            continue;
        addrs[n++] = a;
        if (strcmp(sym, name) == 0)
            *start = a;
    }
    pclose(f);
    assert_true(*start != 0);
    *end = UINT64_MAX;
    for (size_t i = 0; i < n; i++)
        if (addrs[i] > *start && addrs[i] < *end)
            *end = addrs[i];
}

static void test_call_chain_stack(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_CALL_CHAIN, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, CC_STDOUT);

    const uint64_t sizes[] = {CC_SIZE};
    summary s;
    gp_trace *t;
    summarize_pid(dir, r.pid, sizes, 1, &s, &t);
    expect_size(&s, CC_SIZE, 1, 1);
    uint32_t stack = s.sizes[0].stack;
    assert_int_not_equal(stack, 0);

    char exe[PATH_MAX];
    assert_non_null(realpath(GP_CALL_CHAIN, exe));
    gp_symbolizer *sym = gp_symbolizer_new();
    assert_non_null(sym);
    for (uint32_t id = 1; id <= gp_trace_module_count(t); id++) {
        const gp_module *m = gp_trace_module(t, id);
        assert_non_null(m);
        assert_int_equal(gp_symbolizer_add_module(sym, id, m->path, m->build_id, m->base, m->size),
                         0);
    }
    /* Innermost first: the hook's own frames are dropped, so the leaf is cc_c in call_chain. */
    const char *chain[] = {"cc_c", "cc_b", "cc_a", "main"};
    for (int i = 0; i < 4; i++) {
        uint32_t module, parent;
        uint64_t offset;
        assert_int_equal(gp_trace_stack_frame(t, stack, &module, &offset, &parent), 0);
        const gp_module *m = gp_trace_module(t, module);
        assert_non_null(m);
        char path[PATH_MAX];
        assert_non_null(realpath(m->path, path));
        assert_string_equal(path, exe);
        const gp_symbol *fn = gp_symbolize(sym, module, offset);
        assert_non_null(fn);
        assert_string_equal(fn->function, chain[i]);
        /* The same, independently of libdw: the return address lies inside the function. */
        uint64_t start, end;
        nm_range(exe, chain[i], &start, &end);
        if (!(offset > start && offset < end))
            fail_msg("frame %d: offset 0x%llx outside %s [0x%llx, 0x%llx)", i,
                     (unsigned long long)offset, chain[i], (unsigned long long)start,
                     (unsigned long long)end);
        stack = parent;
        assert_int_not_equal(stack, 0); /* main has callers (libc's start-up) */
    }
    gp_symbolizer_free(sym);
    gp_trace_close(t);
    remove_dir(dir);
}

/* ---- the stack walks ------------------------------------------------------------------------- */

enum { FPC_N = FPC_ROLES * FPC_CHAINS * FPC_DEPTHS, FPC_STACK_MAX = 4096 };

/* The walks a run may use: the frame-pointer walk, the walk by call-frame information, libunwind
 * (always there, the reference). */
typedef struct {
    bool fp, cfi;
} fpc_walks;

/* The call stack of every (role, chain, depth) of fp_chains, as "module+offset;" from the
 * innermost frame out, from the trace of one run with the walks `w`; fails if two allocations of
 * one size got different stacks, or a size is missing. */
static void fp_chains_stacks(const char *exe, fpc_walks w, char stacks[FPC_N][FPC_STACK_MAX])
{
    const char *dir = make_dir();
    run_result r;
    run_exe(exe, true, dir,
            (const char *[]){w.fp ? "GRADPROF_FRAME_POINTERS=1" : "GRADPROF_FRAME_POINTERS=0",
                             w.cfi ? "GRADPROF_CFI=1" : "GRADPROF_CFI=0", NULL},
            &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, FPC_STDOUT);
    char paths[1][PATH_MAX + 64];
    assert_int_equal(traces_of(dir, r.pid, paths, 1), 1);
    char err[512] = "";
    gp_trace *t = NULL;
    if (gp_trace_open(paths[0], &t, err, sizeof err) != 0)
        fail_msg("gp_trace_open(%s): %s", paths[0], err);
    unsigned counts[FPC_N] = {0};
    gp_event ev;
    int rc;
    while ((rc = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
        if (ev.kind != GP_EV_ALLOC || ev.size < FPC_SIZE(0, 0, 0) ||
            ev.size > FPC_SIZE(FPC_ROLES - 1, FPC_CHAINS - 1, FPC_DEPTHS - 1))
            continue;
        uint64_t k = ev.size - FPC_SIZE(0, 0, 0);
        int role = (int)(k / 256), c = (int)(k % 256 / 16), d = (int)(k % 16);
        if (c >= FPC_CHAINS || d >= FPC_DEPTHS)
            continue;
        int i = (role * FPC_CHAINS + c) * FPC_DEPTHS + d;
        char s[FPC_STACK_MAX] = "";
        size_t len = 0;
        for (uint32_t id = ev.stack; id != 0 && len < sizeof s - 300;) {
            uint32_t module, parent;
            uint64_t offset;
            assert_int_equal(gp_trace_stack_frame(t, id, &module, &offset, &parent), 0);
            const gp_module *m = gp_trace_module(t, module);
            const char *base = m && m->path ? strrchr(m->path, '/') : NULL;
            len += (size_t)snprintf(s + len, sizeof s - len, "%s+%llx;", base ? base + 1 : "?",
                                    (unsigned long long)offset);
            id = parent;
        }
        assert_true(len > 0);
        if (counts[i]++ == 0)
            snprintf(stacks[i], FPC_STACK_MAX, "%s", s);
        else if (strcmp(stacks[i], s) != 0)
            fail_msg("%s (frame pointers %s, CFI %s): size %llu, allocation %u: stack\n  %s\nbut "
                     "the first was\n  %s",
                     exe, w.fp ? "on" : "off", w.cfi ? "on" : "off", (unsigned long long)ev.size,
                     counts[i], s, stacks[i]);
    }
    if (rc < 0)
        fail_msg("gp_trace_next(%s): %s", paths[0], err);
    for (int i = 0; i < FPC_N; i++)
        assert_int_equal(counts[i], FPC_ROUNDS);
    gp_trace_close(t);
    remove_dir(dir);
}

/* The walks' stacks are libunwind's, frame for frame: the frame-pointer walk's for a program with
 * frame pointers (where it answers after its first check) and for one without (where the check
 * refuses it), the CFI walk's for both, across signal frames and on an alternate signal stack
 * (where it hands over to libunwind); each repeated allocation keeps its stack, the innermost
 * frame is chain_leaf's caller in the program, and the signal handlers' stacks go on past the
 * signal frame into main. */
static void check_stack_walks(const char *exe)
{
    static char unwound[FPC_N][FPC_STACK_MAX], walked[FPC_N][FPC_STACK_MAX];
    const fpc_walks walks[] = {{true, true}, {false, true}, {true, false}};
    const char *what[] = {"both walks", "the CFI walk", "the frame-pointer walk"};
    fp_chains_stacks(exe, (fpc_walks){false, false}, unwound);
    const char *name = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    for (size_t w = 0; w < sizeof walks / sizeof *walks; w++) {
        fp_chains_stacks(exe, walks[w], walked);
        for (int i = 0; i < FPC_N; i++)
            if (strcmp(walked[i], unwound[i]) != 0)
                fail_msg("%s: allocation kind %d: stack with %s\n  %s\nwith libunwind only\n  %s",
                         exe, i, what[w], walked[i], unwound[i]);
    }
    char first[PATH_MAX];
    snprintf(first, sizeof first, "%s+", name);
    for (int i = 0; i < FPC_N; i++) {
        assert_memory_equal(unwound[i], first, strlen(first)); /* the program's frame first */
        /* chain_leaf's caller, the chain's frames, round_of, main or work (or for a handler: the
         * handler, the signal frame, raise's, main): at least 4 frames of the program. */
        int own = 0;
        for (const char *p = unwound[i]; (p = strstr(p, first)) != NULL; p += strlen(first))
            own++;
        if (own < 4)
            fail_msg("%s: allocation kind %d: %d frames of the program in\n  %s", exe, i, own,
                     unwound[i]);
    }
}

static void test_stack_walks_with_frame_pointers(void **state)
{
    (void)state;
    check_stack_walks(prog("fp_chains"));
}

static void test_stack_walks_without_frame_pointers(void **state)
{
    (void)state;
    check_stack_walks(prog("fp_chains_nofp"));
}

/* A frame-pointer walk that follows %rbp into the same fake frame at every allocation
 * (fp_garbage): refused at its first check, not checked and stored again at each (the refusals
 * piled up in the walk's table under one key, and each took longer to store than the one before:
 * 100 k allocations from one place of an -O1 program took 7 s). Every allocation is recorded. */
static void test_stack_walk_refused_once(void **state)
{
#ifdef GP_HAVE_FP_GARBAGE
    (void)state;
    const char *dir = make_dir();
    run_result r;
    run_timeout_s = 60;
    run_exe(prog("fp_garbage"), true, dir, (const char *[]){"GRADPROF_STACK_DEPTH=32", NULL}, &r);
    run_timeout_s = RUN_TIMEOUT_S;
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, FPG_STDOUT);
    const uint64_t sizes[] = {FPG_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 1, &s, NULL);
    assert_true(s.info.clean_end);
    expect_size(&s, FPG_SIZE, FPG_COUNT, FPG_COUNT);
    remove_dir(dir);
#else
    skip();
#endif
}

/* ---- configuration and failure --------------------------------------------------------------- */

/* GRADPROF_ENABLE=0: no trace, no change. */
static void test_disabled(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(GP_ALLOC_KNOWN, dir, (const char *[]){"GRADPROF_ENABLE=0", NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AK_STDOUT);
    assert_int_equal(r.err_len, 0);
    assert_int_equal(count_files(dir), 0);
    remove_dir(dir);
}

/* A trace that cannot be created: one warning naming the path, and the program runs unchanged. */
static void test_unwritable_output(void **state)
{
    const char *dir = make_dir();
    char output[PATH_MAX + 64];
    snprintf(output, sizeof output, "GRADPROF_OUTPUT=%s/missing/t.%%p.gptrace", dir);
    run_result r;
    run_both(GP_ALLOC_KNOWN, dir, (const char *[]){output, NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AK_STDOUT);
    assert_non_null(strstr(r.err, "gradprof: "));
    assert_non_null(strstr(r.err, "/missing/t."));
    assert_int_equal(count_files(dir), 0);
    remove_dir(dir);
}

/* Programs that were not written for the test (a shell, a pipeline, a child that execs) run
 * unchanged and leave readable traces. */
static void test_foreign_program(void **state)
{
    const char *dir = make_dir();
    char *argv[] = {"/bin/sh", "-c", "printf 'b\\na\\n' | sort; exit 3", NULL};
    run_result plain, r;
    run(argv, false, dir, NULL, &plain);
    run(argv, true, dir, NULL, &r);
    assert_true(exited_with(&plain, 3));
    assert_true(exited_with(&r, 3));
    assert_string_equal(plain.out, "a\nb\n");
    assert_string_equal(r.out, "a\nb\n");
    char paths[4][PATH_MAX + 64];
    assert_true(traces_of(dir, r.pid, paths, 4) >= 1);
    summary s;
    summarize(paths[0], NULL, 0, &s, NULL);
    assert_false(s.info.damaged);
    assert_true(s.allocs > 0);
    remove_dir(dir);
}

/* ---- descriptor games (issue 12: items 1 and 4) ---------------------------------------------- */

/* fd_games MODE: whatever the program does to its descriptors, the trace holds every event,
 * before and after, and the program's own file holds exactly what the program wrote. */
static void check_fd_game(const char *mode)
{
    const char *dir = make_dir();
    char file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s/own.txt", dir);
    char *argv[] = {(char *)prog("fd_games"), (char *)mode, file, NULL};
    run_result plain, r;
    run(argv, false, dir, NULL, &plain);
    run(argv, true, dir, NULL, &r);
    assert_true(exited_with(&plain, 0));
    if (!exited_with(&r, 0) || strcmp(r.out, FG_STDOUT) != 0)
        fail_msg("fd_games %s under the preload: status %d, stdout '%s'", mode, r.status, r.out);
    assert_int_equal(r.err_len, 0); /* not a word from gradprof: nothing was lost */
    /* After the exit (the last chunks are written then), the file is still the program's. */
    char buf[4096];
    int fd = open(file, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n != (ssize_t)strlen(FG_TEXT) || memcmp(buf, FG_TEXT, (size_t)n) != 0)
        fail_msg("fd_games %s: the program's file holds %zd bytes", mode, n);
    unlink(file);

    const uint64_t sizes[] = {FG_BEFORE_SIZE, FG_HELD_SIZE, FG_AFTER_SIZE, FG_WORKER_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 4, &s, NULL);
    assert_true(s.info.clean_end);
    assert_false(s.info.damaged);
    assert_string_equal(s.end_reason, "exit");
    assert_int_equal(s.unmatched_frees, 0);
    assert_int_equal(s.double_allocs, 0);
    expect_size(&s, FG_BEFORE_SIZE, FG_BEFORE, FG_BEFORE);
    expect_size(&s, FG_HELD_SIZE, FG_HELD, FG_HELD);
    expect_size(&s, FG_AFTER_SIZE, FG_AFTER, FG_AFTER);
    expect_size(&s, FG_WORKER_SIZE, FG_WORKER, FG_WORKER);
    assert_int_equal(s.tracked_bytes, (uint64_t)FG_BEFORE * FG_BEFORE_SIZE +
                                          (uint64_t)FG_HELD * FG_HELD_SIZE +
                                          (uint64_t)FG_AFTER * FG_AFTER_SIZE +
                                          (uint64_t)FG_WORKER * FG_WORKER_SIZE);
    remove_dir(dir);
}

/* `cmd 3>file`: the program puts its own file on descriptor 3 and writes there. */
static void test_fd_dup_onto_3(void **state) { check_fd_game("dup3"); }
/* dup2(/dev/null) over descriptors 3..20. */
static void test_fd_devnull_over_low(void **state) { check_fd_game("devnull"); }
/* A closefrom loop: close(3) .. close(RLIMIT_NOFILE - 1). */
static void test_fd_closefrom_loop(void **state) { check_fd_game("closefrom"); }
/* close_range(3, ~0U, 0). */
static void test_fd_close_range(void **state) { check_fd_game("close_range"); }
/* The program finds the trace's descriptor and puts its own file on that number. */
static void test_fd_hijacked(void **state) { check_fd_game("hijack"); }

/* A program that lowers its file size limit (fsize_limit): the trace stops at a whole chunk below
 * the limit, with end_reason "file size limit N" and one warning, and the program runs to its end
 * (a chunk written across the limit was torn, and one that starts at it gets SIGXFSZ, which
 * kills the program). */
static void test_file_size_limit(void **state)
{
    (void)state;
    const char *dir = make_dir();
    run_result r;
    run_both(prog("fsize_limit"), dir, (const char *[]){"GRADPROF_FLUSH_MS=1", NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, FL_STDOUT);
    assert_non_null(strstr(r.err, "file size limit (RLIMIT_FSIZE, 262144 bytes)"));
    summary s;
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_false(s.info.damaged);
    assert_true(s.info.file_bytes <= FL_LIMIT);
    assert_true(s.allocs > 0 && s.allocs < 2 * FL_COUNT);
    char want[32];
    snprintf(want, sizeof want, "file size limit %d", FL_LIMIT);
    assert_string_equal(s.end_reason, want);
    remove_dir(dir);
}

/* ---- pthread_cancel (item 2) ------------------------------------------------------------------ */

/* 200 allocating threads cancelled at random moments, 10 runs: none may hang (a cancellation
 * acting inside the recorder's write left its buffer held, and the thread-exit hook spun
 * forever), and the trace holds exactly the blocks each thread counted. GRADPROF_FLUSH_MS=1
 * makes the recorder write (a cancellation point, before the fix) all the time. */
static void test_cancelled_threads(void **state)
{
    const char *extra[] = {"GRADPROF_FLUSH_MS=1", NULL};
    run_timeout_s = 60;
    for (int round = 0; round < 10; round++) {
        const char *dir = make_dir();
        run_result r;
        run_exe(prog("cancel_alloc"), true, dir, extra, &r);
        if (!exited_with(&r, 0))
            fail_msg("round %d: cancel_alloc ended with status 0x%x, stdout '%s'", round, r.status,
                     r.out);
        unsigned long long allocs, frees;
        int cancelled;
        if (sscanf(r.out, "cancel_alloc: allocs %llu frees %llu cancelled %d", &allocs, &frees,
                   &cancelled) != 3)
            fail_msg("cancel_alloc printed '%s'", r.out);
        assert_int_equal(cancelled, CA_THREADS);
        const uint64_t sizes[] = {CA_SIZE, CA_MAIN_SIZE};
        summary s;
        summarize_pid(dir, r.pid, sizes, 2, &s, NULL);
        assert_true(s.info.clean_end);
        assert_false(s.info.damaged);
        assert_int_equal(s.unmatched_frees, 0);
        assert_int_equal(s.double_allocs, 0);
        size_stat *st = stat_of(&s, CA_SIZE);
        if (st->allocs != allocs || st->frees != frees)
            fail_msg("round %d: trace %u allocs %u frees of %d bytes; the threads made %llu and "
                     "%llu",
                     round, st->allocs, st->frees, CA_SIZE, allocs, frees);
        expect_size(&s, CA_MAIN_SIZE, CA_MAIN, CA_MAIN);
        remove_dir(dir);
    }
    run_timeout_s = RUN_TIMEOUT_S;
}

/* ---- thread-specific-data destructors (item 5) ------------------------------------------------ */

/* Destructors that run after the recorder's own thread-exit hook allocate and free: all recorded,
 * every free matched (202 allocations, 200 frees, 0 unknown frees; and a second round). */
static void test_tsd_destructors(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(prog("tsd_alloc"), dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, TD_STDOUT);
    const uint64_t sizes[] = {TD_BODY_SIZE, TD_DTOR_SIZE, TD_MAIN_SIZE, TD_ROUND2_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 4, &s, NULL);
    assert_true(s.info.clean_end);
    assert_int_equal(s.unmatched_frees, 0);
    assert_int_equal(s.double_allocs, 0);
    expect_size(&s, TD_BODY_SIZE, TD_THREADS, TD_THREADS);
    expect_size(&s, TD_DTOR_SIZE, TD_THREADS, TD_THREADS);
    expect_size(&s, TD_MAIN_SIZE, TD_MAIN, 0);
    expect_size(&s, TD_ROUND2_SIZE, TD_THREADS, TD_THREADS);
    unsigned shape_allocs = 0, shape_frees = 0;
    for (int i = 0; i < 3; i++) {
        shape_allocs += s.sizes[i].allocs;
        shape_frees += s.sizes[i].frees;
    }
    assert_int_equal(shape_allocs, 2 * TD_THREADS + TD_MAIN); /* 202 */
    assert_int_equal(shape_frees, 2 * TD_THREADS);            /* 200 */
    remove_dir(dir);
}

/* Threads whose first allocation happens inside pthread_getattr_np (glibc's, under the thread's
 * own lock): the recorder must not ask for the thread's stack bounds there (it hung, waiting for
 * that lock, under the frame-pointer walk); every thread's block is recorded. */
static void test_getattr_first(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_both(prog("getattr_first"), dir, NULL, &r);
    if (!exited_with(&r, 0))
        fail_msg("getattr_first under the preload: status %d (SIGALRM %d: hung)", r.status,
                 SIGALRM);
    assert_string_equal(r.out, GA_STDOUT);
    const uint64_t sizes[] = {GA_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 1, &s, NULL);
    assert_true(s.info.clean_end);
    assert_int_equal(s.unmatched_frees, 0);
    expect_size(&s, GA_SIZE, GA_THREADS, GA_THREADS);
    remove_dir(dir);
}

/* ---- the profiler's own work: lp_exclude_push/pop -------------------------------------------- */

/* Allocations between push and pop are not recorded, on that thread only; frees are (a block freed
 * meanwhile is not lost), and the excluded block's later free is the one unknown free. */
static void test_exclude_own_work(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_exe(prog("exclude_own"), true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, EO_STDOUT);
    const uint64_t sizes[] = {EO_KEPT_SIZE, EO_OWN_SIZE, EO_AFTER_SIZE, EO_OTHER_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 4, &s, NULL);
    assert_true(s.info.clean_end);
    assert_int_equal(s.double_allocs, 0);
    expect_size(&s, EO_KEPT_SIZE, 1, 1);
    expect_size(&s, EO_OWN_SIZE, 0, 0);
    expect_size(&s, EO_AFTER_SIZE, 1, 1);
    expect_size(&s, EO_OTHER_SIZE, 1, 1);
    assert_int_equal(s.unmatched_frees, 1);
    remove_dir(dir);
}

/* ---- the realloc window (item 6) ------------------------------------------------------------- */

/* A moving realloc's free is stamped before the real realloc, so in time order no other thread
 * ever allocates the old address before it is freed: no double allocation, no unknown free. */
static void test_realloc_free_comes_first(void **state)
{
    const char *dir = make_dir();
    const char *extra[] = {"MALLOC_ARENA_MAX=1", "GLIBC_TUNABLES=glibc.malloc.tcache_count=0",
                           NULL};
    run_result r;
    run_exe(prog("realloc_race"), true, dir, extra, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, RR_STDOUT);
    const uint64_t sizes[] = {RR_SMALL, RR_BIG};
    summary s;
    summarize_pid(dir, r.pid, sizes, 2, &s, NULL);
    assert_true(s.info.clean_end);
    if (s.double_allocs != 0 || s.unmatched_frees != 0)
        fail_msg("%llu allocations of a live address and %llu frees of an unknown one: a free "
                 "was stamped after the allocation that reused its address",
                 (unsigned long long)s.double_allocs, (unsigned long long)s.unmatched_frees);
    assert_int_equal(s.not_increasing, 0);
    assert_true(!strcmp(s.clock, "monotonic") || !strncmp(s.clock, "monotonic+tsc", 13));
    expect_size(&s, RR_SMALL, 2 * RR_ROUNDS, 2 * RR_ROUNDS); /* RR_OTHER == RR_SMALL */
    expect_size(&s, RR_BIG, RR_ROUNDS, RR_ROUNDS);
    remove_dir(dir);
}

/* ---- C++ under any allocator (item 3) --------------------------------------------------------- */

/* The sizes cxx_forms.h lists. */
#define CF_SIZE_ROW(size, n, d) size,
static const uint64_t cf_rows[CF_NROWS] = {CF_ROWS(CF_SIZE_ROW)};
#undef CF_SIZE_ROW

/* `soname` found in the usual library directories: its path in `out`, or false. */
static bool find_library(const char *soname, char *out, size_t size)
{
    const char *dirs[] = {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64",
                          "/usr/lib", "/usr/local/lib"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(out, size, "%s/%s", dirs[i], soname);
        if (access(out, R_OK) == 0)
            return true;
    }
    return false;
}

/* Runs cxx_forms or c_forms with LD_PRELOAD=`list` and checks every form: one allocation and one
 * free of each size, exact bytes, no unknown free, and a C++ allocation's innermost frame in the
 * program itself (not in the allocator or libstdc++). */
static void check_forms(const char *exe, bool cxx, const char *list)
{
    const char *dir = make_dir();
    run_result plain, r;
    run_exe(exe, false, dir, NULL, &plain);
    preload_list = list;
    run_exe(exe, true, dir, NULL, &r);
    preload_list = NULL;
    assert_true(exited_with(&plain, 0));
    if (!exited_with(&r, 0) || strcmp(r.out, CF_STDOUT) != 0)
        fail_msg("%s under LD_PRELOAD='%s': status %d, stdout '%s'", exe, list, r.status, r.out);

    uint64_t sizes[32];
    int n = 0;
    for (int i = 0; i < CF_NROWS; i++)
        sizes[n++] = cf_rows[i];
    const uint64_t more[] = {CF_EXPR_NEW_SIZE, CF_VECTOR_ELEM,    2 * CF_VECTOR_ELEM,
                             4 * CF_VECTOR_ELEM, 8 * CF_VECTOR_ELEM, CF_MALLOC_SIZE,
                             CF_CALLOC_N * CF_CALLOC_SIZE, CF_REALLOC_FIRST, CF_REALLOC_GROW,
                             CF_MEMALIGN_SIZE, CF_ALIGNED_ALLOC_SIZE, CF_RESERVE_SIZE,
                             CF_AFTER_SIZE};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++)
        sizes[n++] = more[i];
    summary s;
    gp_trace *t;
    summarize_pid(dir, r.pid, sizes, n, &s, &t);
    assert_true(s.info.clean_end);
    assert_false(s.info.damaged);
    if (s.unmatched_frees != 0 || s.double_allocs != 0 || s.huge_allocs != 0)
        fail_msg("%s under '%s': %llu unknown frees, %llu double allocations, %llu failed ones", exe,
                 list, (unsigned long long)s.unmatched_frees, (unsigned long long)s.double_allocs,
                 (unsigned long long)s.huge_allocs);
    uint64_t bytes = 0, count = 0;
    if (cxx) {
        for (int i = 0; i < CF_NROWS; i++) {
            expect_size(&s, cf_rows[i], 1, 1);
            expect_aligned(&s, cf_rows[i], i >= 6 ? CF_ALIGN : 8); /* rows 6..11 are aligned */
            bytes += cf_rows[i];
            count++;
        }
        expect_size(&s, CF_EXPR_NEW_SIZE, CF_EXPR_COUNT, CF_EXPR_COUNT);
        for (uint64_t k = 1; k <= 8; k *= 2)
            expect_size(&s, k * CF_VECTOR_ELEM, 1, 1);
        expect_size(&s, CF_RESERVE_SIZE, 1, 1); /* freed by the new_handler */
        expect_size(&s, CF_AFTER_SIZE, 1, 1);   /* recorded after three exceptions */
        bytes += CF_EXPR_COUNT * CF_EXPR_NEW_SIZE + 15 * CF_VECTOR_ELEM + CF_RESERVE_SIZE +
                 CF_AFTER_SIZE;
        count += CF_EXPR_COUNT + 4 + 2;
        /* The innermost frame of `operator new(7001)` is in the program. */
        uint32_t module, parent;
        uint64_t offset;
        assert_int_equal(gp_trace_stack_frame(t, s.sizes[0].stack, &module, &offset, &parent), 0);
        const gp_module *m = gp_trace_module(t, module);
        assert_non_null(m);
        char a[PATH_MAX], b[PATH_MAX];
        assert_non_null(realpath(m->path, a));
        assert_non_null(realpath(exe, b));
        assert_string_equal(a, b);
    }
    expect_size(&s, CF_MALLOC_SIZE, CF_MALLOC_COUNT, CF_MALLOC_COUNT);
    expect_size(&s, CF_CALLOC_N * CF_CALLOC_SIZE, 1, 1);
    expect_size(&s, CF_REALLOC_FIRST, 1, 1);
    expect_size(&s, CF_REALLOC_GROW, 1, 1);
    expect_size(&s, CF_MEMALIGN_SIZE, 1, 1);
    expect_aligned(&s, CF_MEMALIGN_SIZE, 64);
    expect_size(&s, CF_ALIGNED_ALLOC_SIZE, 1, 1);
    expect_aligned(&s, CF_ALIGNED_ALLOC_SIZE, CF_ALIGN);
    bytes += CF_MALLOC_COUNT * CF_MALLOC_SIZE + CF_CALLOC_N * CF_CALLOC_SIZE + CF_REALLOC_FIRST +
             CF_REALLOC_GROW + CF_MEMALIGN_SIZE + CF_ALIGNED_ALLOC_SIZE;
    count += CF_MALLOC_COUNT + 5;
    assert_int_equal(s.tracked_bytes, bytes);
    assert_int_equal(s.tracked_frees, count);
    gp_trace_close(t);
    remove_dir(dir);
}

static void check_forms_all(const char *allocator)
{
    char lib[PATH_MAX], list[2 * PATH_MAX + 2];
    if (allocator == NULL) {
        snprintf(list, sizeof list, "%s", GP_PRELOAD_LIB);
    } else {
        if (!find_library(allocator, lib, sizeof lib)) {
            fprintf(stderr, "SKIPPED: %s is not installed (scripts/bootstrap.sh --tests)\n",
                    allocator);
            skip();
        }
        snprintf(list, sizeof list, "%s %s", GP_PRELOAD_LIB, lib);
    }
    check_forms(prog("cxx_forms"), true, list);
    check_forms(prog("c_forms"), false, list);
}

static void test_forms_glibc(void **state) { check_forms_all(NULL); }
static void test_forms_tcmalloc(void **state) { check_forms_all("libtcmalloc_minimal.so.4"); }
static void test_forms_jemalloc(void **state) { check_forms_all("libjemalloc.so.2"); }

/* An allocator preloaded *before* libprof_preload.so takes every call: nothing can be recorded,
 * and one warning says so and what to do; the program runs unchanged. */
static void test_allocator_first_is_said(void **state)
{
    char lib[PATH_MAX], list[2 * PATH_MAX + 2];
    if (!find_library("libjemalloc.so.2", lib, sizeof lib) &&
        !find_library("libtcmalloc_minimal.so.4", lib, sizeof lib)) {
        fprintf(stderr, "SKIPPED: neither jemalloc nor tcmalloc is installed\n");
        skip();
    }
    snprintf(list, sizeof list, "%s %s", lib, GP_PRELOAD_LIB);
    const char *dir = make_dir();
    run_result r;
    preload_list = list;
    run_exe(prog("c_forms"), true, dir, NULL, &r);
    preload_list = NULL;
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, CF_STDOUT);
    assert_non_null(strstr(r.err, "gradprof: the program's malloc is the one in"));
    assert_non_null(strstr(r.err, "list libprof_preload.so first in LD_PRELOAD"));
    const uint64_t sizes[] = {CF_MALLOC_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 1, &s, NULL);
    expect_size(&s, CF_MALLOC_SIZE, 0, 0);
    remove_dir(dir);
}

/* A non-PIE program that takes malloc's address (/usr/bin/python3.11: a canonical PLT entry, so
 * dlsym(RTLD_DEFAULT, "malloc") names the program) is recorded and gets no warning; with an
 * allocator preloaded first, the same program gets the warning. */
static void test_allocator_check_non_pie(void **state)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "SKIPPED: no /usr/bin/python3\n");
        skip();
    }
    char *argv[] = {"/usr/bin/python3", "-S", "-c", "b = bytearray(1234567); print(len(b))", NULL};
    const char *dir = make_dir();
    run_result plain, r;
    run(argv, false, dir, NULL, &plain);
    run(argv, true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, plain.out);
    if (strstr(r.err, "gradprof:"))
        fail_msg("python3 under the preload warned: %s", r.err);
    const uint64_t sizes[] = {1234567 + 1}; /* bytearray keeps a NUL after the bytes */
    summary s;
    summarize_pid(dir, r.pid, sizes, 1, &s, NULL);
    expect_size(&s, 1234567 + 1, 1, 1);
    remove_dir(dir);

    char lib[PATH_MAX], list[2 * PATH_MAX + 2];
    if (!find_library("libtcmalloc_minimal.so.4", lib, sizeof lib) &&
        !find_library("libjemalloc.so.2", lib, sizeof lib)) {
        fprintf(stderr, "SKIPPED (second half): neither tcmalloc nor jemalloc is installed\n");
        return;
    }
    snprintf(list, sizeof list, "%s %s", lib, GP_PRELOAD_LIB);
    dir = make_dir();
    preload_list = list;
    run(argv, true, dir, NULL, &r);
    preload_list = NULL;
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, plain.out);
    if (!strstr(r.err, "gradprof: the program's malloc is the one in") || !strstr(r.err, lib))
        fail_msg("no warning naming %s: '%s'", lib, r.err);
    remove_dir(dir);
}

/* ---- Python frames (issue 13) ----------------------------------------------------------------- */

/* The Python frames of a stack, innermost first, as "function:line" in buf (space-separated). */
static void python_frames_of(gp_trace *t, gp_symbolizer *sym, uint32_t stack, char *buf,
                             size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t id = stack, parent; id; id = parent) {
        uint32_t module;
        uint64_t offset;
        assert_int_equal(gp_trace_stack_frame(t, id, &module, &offset, &parent), 0);
        const gp_module *m = gp_trace_module(t, module);
        if (!m || strncmp(m->path, "py:", 3) != 0)
            continue;
        const gp_symbol *fn = gp_symbolize(sym, module, offset);
        const char *file = fn->file ? fn->file : "?", *base = strrchr(file, '/');
        used += (size_t)snprintf(buf + used, size - used, "%s%s:%s:%d", used ? " " : "",
                                 base ? base + 1 : file, fn->function, fn->line);
        assert_true(used < size);
    }
}

/* Skips a Python-frames test where the feature cannot be on: built without CPython 3.11's
 * internal headers (python3.11-dev), or no /usr/bin/python3. */
static void skip_without_python(void)
{
#ifndef GP_HAVE_PYTHON_FRAMES
    fprintf(stderr, "SKIPPED: built without CPython 3.11's internal headers (python3.11-dev): "
                    "no Python frames\n");
    skip();
#endif
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "SKIPPED: no /usr/bin/python3\n");
        skip();
    }
}

/* Skips (closing t, removing dir) when trace t says Python frames were off (another interpreter
 * version). */
static void skip_if_python_frames_off(gp_trace *t, const char *dir)
{
    const char *status = gp_trace_meta(t, "python_frames");
    if (!status || strncmp(status, "on", 2) != 0) {
        fprintf(stderr, "SKIPPED: Python frames are off here: %s\n", status ? status : "?");
        gp_trace_close(t);
        remove_dir(dir);
        skip();
    }
}

/* A symbolizer of trace t's modules. */
static gp_symbolizer *trace_symbolizer(gp_trace *t)
{
    gp_symbolizer *sym = gp_symbolizer_new();
    assert_non_null(sym);
    for (uint32_t id = 1; id <= gp_trace_module_count(t); id++) {
        const gp_module *m = gp_trace_module(t, id);
        if (m)
            assert_int_equal(
                gp_symbolizer_add_module(sym, id, m->path, m->build_id, m->base, m->size), 0);
    }
    return sym;
}

/* The replay of the one trace process `pid` wrote in dir. */
static gp_profile *load_trace_of(const char *dir, pid_t pid)
{
    char paths[4][PATH_MAX + 64], err[512];
    assert_int_equal(traces_of(dir, pid, paths, 4), 1);
    gp_profile *p = NULL;
    if (gp_profile_load(paths[0], NULL, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    return p;
}

/* A real /usr/bin/python3 program under the preload: its stacks hold its Python frames in
 * place of the interpreter's eval loop, with file, function and line; the same native path
 * reached from two Python lines is two stacks; the replay engine labels each site by the
 * program's line. Skipped when the feature is off (no python3.11-dev at build time, another
 * interpreter version). */
static void test_python_frames(void **state)
{
    skip_without_python();
    char *argv[] = {"/usr/bin/python3", "-S", "-E", GP_PY_ALLOC, NULL};
    const char *dir = make_dir();
    run_result r;
    run(argv, true, dir, (const char *[]){"GRADPROF_VERBOSE=1", NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, PA_STDOUT);
    const uint64_t sizes[] = {PA_SIZE_A, PA_SIZE_B, PA_SIZE_C};
    summary s;
    gp_trace *t;
    summarize_pid(dir, r.pid, sizes, 3, &s, &t);
    skip_if_python_frames_off(t, dir);
    if (strstr(r.err, "gradprof:"))
        fail_msg("python3 under the preload said: %s", r.err);
    /* one thread recorded the interpreter's start-up, long enough for the TSC stamps */
    assert_string_equal(s.clock, expected_clock(true));
    for (int i = 0; i < 3; i++) {
        expect_size(&s, sizes[i], 1, 1);
        assert_int_not_equal(s.sizes[i].stack, 0);
    }
    /* Two lines of main() over one native path (make -> bytearray): two stacks. */
    assert_int_not_equal(s.sizes[0].stack, s.sizes[1].stack);

    gp_symbolizer *sym = trace_symbolizer(t);
    char got[1024], want[1024];
    const int lines[3][3] = {{PA_MAKE_LINE, PA_LINE_A, PA_LINE_MODULE},
                             {PA_MAKE_LINE, PA_LINE_B, PA_LINE_MODULE},
                             {0, PA_LINE_C, PA_LINE_MODULE}};
    for (int i = 0; i < 3; i++) {
        python_frames_of(t, sym, s.sizes[i].stack, got, sizeof got);
        if (lines[i][0])
            snprintf(want, sizeof want,
                     "py_alloc.py:make:%d py_alloc.py:main:%d "
                     "py_alloc.py:<module>:%d",
                     lines[i][0], lines[i][1], lines[i][2]);
        else
            snprintf(want, sizeof want, "py_alloc.py:main:%d py_alloc.py:<module>:%d", lines[i][1],
                     lines[i][2]);
        assert_string_equal(got, want);
    }
    gp_symbolizer_free(sym);
    gp_trace_close(t);

    /* The replay engine names each site by the program's line. */
    gp_profile *p = load_trace_of(dir, r.pid);
    const char *labels[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < p->n_sites; i++)
        for (int k = 0; k < 3; k++)
            if (p->sites[i].stats.total_bytes == sizes[k] && p->sites[i].stats.count == 1)
                labels[k] = gp_site_label(p, p->sites[i].stack);
    snprintf(want, sizeof want, "py_alloc.py:%d (make)", PA_MAKE_LINE);
    assert_non_null(labels[0]);
    assert_string_equal(labels[0], want);
    assert_non_null(labels[1]);
    assert_string_equal(labels[1], want);
    snprintf(want, sizeof want, "py_alloc.py:%d (main)", PA_LINE_C);
    assert_non_null(labels[2]);
    assert_string_equal(labels[2], want);
    gp_profile_free(p);
    remove_dir(dir);
}

/* A stack's shape: its frames, the native frames innermost before the first Python one that are
 * `fn`, the native frames after the first Python one, and whether the outermost is Python's. */
typedef struct stack_shape {
    int frames, inner_fn, native_after_python;
    bool outermost_python;
} stack_shape;

static stack_shape shape_of(gp_trace *t, gp_symbolizer *sym, uint32_t stack, const char *fn)
{
    stack_shape sh = {0, 0, 0, false};
    bool python = false;
    for (uint32_t id = stack, parent; id; id = parent) {
        uint32_t module;
        uint64_t offset;
        assert_int_equal(gp_trace_stack_frame(t, id, &module, &offset, &parent), 0);
        const gp_module *m = gp_trace_module(t, module);
        bool py = m && strncmp(m->path, "py:", 3) == 0;
        const gp_symbol *f = gp_symbolize(sym, module, offset);
        sh.frames++;
        sh.inner_fn += !python && !py && f->function && strcmp(f->function, fn) == 0;
        sh.native_after_python += python && !py;
        python = python || py;
        sh.outermost_python = py;
    }
    return sh;
}

/* Python frames stay in a stack however deep the code below them: 60 native frames under a
 * Python call (ctypes) keep the depth's 32 innermost ones and add the 3 Python frames above, 101
 * Python frames keep the innermost and the outermost, and each site is named by the program's
 * line; the interpreter's calls between Python frames (a
 * function that map() runs) and the frames that started the interpreter are left out. */
static void test_python_frames_deep(void **state)
{
    skip_without_python();
    char *argv[] = {"/usr/bin/python3", "-S", "-E", GP_PY_DEEP, GP_DEEP_NATIVE_LIB, NULL};
    const char *dir = make_dir();
    run_result r;
    run(argv, true, dir, (const char *[]){"GRADPROF_STACK_DEPTH=32", NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, PD_STDOUT);
    const uint64_t sizes[] = {PD_SIZE_DEEP, PD_SIZE_MAP, PD_SIZE_NEST};
    summary s;
    gp_trace *t;
    summarize_pid(dir, r.pid, sizes, 3, &s, &t);
    skip_if_python_frames_off(t, dir);
    gp_symbolizer *sym = trace_symbolizer(t);
    char got[1024], want[1024];
    for (int i = 0; i < 3; i++) {
        expect_size(&s, sizes[i], 1, 1);
        assert_int_not_equal(s.sizes[i].stack, 0);
    }
    /* The deep one: the innermost levels, then deep() and its callers. */
    stack_shape deep = shape_of(t, sym, s.sizes[0].stack, "gp_deep_level");
    python_frames_of(t, sym, s.sizes[0].stack, got, sizeof got);
    snprintf(want, sizeof want, "py_deep.py:deep:%d py_deep.py:main:%d py_deep.py:<module>:%d",
             PD_DEEP_LINE, PD_MAIN_DEEP_LINE, PD_MODULE_LINE);
    assert_string_equal(got, want);
    if (deep.frames != 32 + 3 || deep.inner_fn != 32 || deep.native_after_python != 0)
        fail_msg("deep stack: %d frames, %d of gp_deep_level first, %d native after Python",
                 deep.frames, deep.inner_fn, deep.native_after_python);
    /* The one make() made from map(): Python frames only, from make's line out. */
    stack_shape made = shape_of(t, sym, s.sizes[1].stack, "");
    python_frames_of(t, sym, s.sizes[1].stack, got, sizeof got);
    snprintf(want, sizeof want, "py_deep.py:make:%d py_deep.py:main:%d py_deep.py:<module>:%d",
             PD_MAKE_LINE, PD_MAIN_MAP_LINE, PD_MODULE_LINE);
    assert_string_equal(got, want);
    if (made.native_after_python != 0 || !made.outermost_python)
        fail_msg("map stack: %d native frames after the first Python one, outermost %s",
                 made.native_after_python, made.outermost_python ? "Python" : "native");
    /* 101 Python frames of nest(): the depth's 32 innermost frames, then 16 of the Python
     * frames beyond them, 8 of nest's and the outermost 8, main's and the module's among them. */
    stack_shape nest = shape_of(t, sym, s.sizes[2].stack, "");
    python_frames_of(t, sym, s.sizes[2].stack, got, sizeof got);
    char head[64];
    snprintf(head, sizeof head, "py_deep.py:nest:%d ", PD_NEST_LINE);
    snprintf(want, sizeof want, " py_deep.py:main:%d py_deep.py:<module>:%d", PD_MAIN_NEST_LINE,
             PD_MODULE_LINE);
    size_t n_got = strlen(got), n_want = strlen(want);
    bool ends = n_got > n_want && strcmp(got + n_got - n_want, want) == 0;
    if (nest.frames != 32 + 16 || strncmp(got, head, strlen(head)) != 0 || !ends ||
        nest.native_after_python != 0)
        fail_msg("nest stack: %d frames, %d native after Python; Python frames %s", nest.frames,
                 nest.native_after_python, got);
    gp_symbolizer_free(sym);
    gp_trace_close(t);

    gp_profile *p = load_trace_of(dir, r.pid);
    const char *label = NULL, *nest_label = NULL;
    for (size_t i = 0; i < p->n_sites; i++) {
        if (p->sites[i].stats.count != 1)
            continue;
        if (p->sites[i].stats.total_bytes == PD_SIZE_DEEP)
            label = gp_site_label(p, p->sites[i].stack);
        if (p->sites[i].stats.total_bytes == PD_SIZE_NEST)
            nest_label = gp_site_label(p, p->sites[i].stack);
    }
    snprintf(want, sizeof want, "py_deep.py:%d (deep)", PD_DEEP_LINE);
    assert_non_null(label);
    assert_string_equal(label, want);
    snprintf(want, sizeof want, "py_deep.py:%d (nest)", PD_NEST_LINE);
    assert_non_null(nest_label);
    assert_string_equal(nest_label, want);
    gp_profile_free(p);
    remove_dir(dir);
}

/* ---- how the recording ended, the command line, path messages (item 7) ------------------------ */

/* end_reason: "exit" (exit, _exit), "exec" (before an exec), "signal 6" (abort). */
static void test_end_reason(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_exe(GP_ALLOC_ABORT, true, dir, NULL, &r);
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT);
    summary s;
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_string_equal(s.end_reason, "signal 6");
    remove_dir(dir);

    dir = make_dir();
    run_exe(GP_ALLOC_FORK, true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_string_equal(s.end_reason, "exit");
    summarize_pid(dir, child_pid(&r, 2), NULL, 0, &s, NULL); /* _exit */
    assert_string_equal(s.end_reason, "exit");
    char paths[4][PATH_MAX + 64];
    assert_int_equal(traces_of(dir, child_pid(&r, 3), paths, 4), 2);
    summarize(paths[0], NULL, 0, &s, NULL); /* the image before execle */
    assert_string_equal(s.end_reason, "exec");
    remove_dir(dir);
}

/* vfork children share the parent's memory: one whose exec fails and that leaves with _exit, one
 * that execs. Neither may end the parent's trace: killed by SIGKILL afterwards, the parent leaves
 * a trace with every allocation and no END record nor end reason ("killed, or still running"). */
static void test_vfork_child_leaves_the_trace_alone(void **state)
{
    const char *dir = make_dir();
    run_result r;
    run_exe(prog("vfork_exec"), true, dir, NULL, &r);
    assert_true(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL);
    const uint64_t sizes[] = {VE_BEFORE_SIZE, VE_AFTER_SIZE};
    summary s;
    summarize_pid(dir, r.pid, sizes, 2, &s, NULL);
    assert_false(s.info.clean_end);
    assert_string_equal(s.end_reason, "");
    expect_size(&s, VE_BEFORE_SIZE, VE_BEFORE, VE_BEFORE);
    expect_size(&s, VE_AFTER_SIZE, VE_AFTER, VE_AFTER);
    remove_dir(dir);
}

/* The command line is stored whole (10,000 bytes), its arguments quoted where a shell needs
 * quotes; over one chunk (1.2 MB) it is cut there and the "command_truncated" metadata says so. */
static void test_long_command_line(void **state)
{
    enum { ARG = 120000, NARGS = 10 };
    static char args[NARGS][ARG + 1];
    for (int i = 0; i < NARGS; i++) {
        memset(args[i], 'a' + i, ARG);
        args[i][ARG] = '\0';
    }
    const char *dir = make_dir();
    char *argv[NARGS + 2];
    argv[0] = GP_ALLOC_KNOWN;
    args[0][10000] = '\0';
    argv[1] = args[0];
    argv[2] = NULL;
    run_result r;
    run(argv, true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    summary s;
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_int_equal(s.command_len, strlen(GP_ALLOC_KNOWN) + 1 + 10000);
    assert_false(s.command_truncated);
    remove_dir(dir);

    /* Arguments a shell would split or expand are quoted: the line can be run again. */
    char *quoted[] = {GP_ALLOC_KNOWN, "two words", "it's", "", "--naïve", "$HOME", NULL};
    dir = make_dir();
    run(quoted, true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_string_equal(s.command, GP_ALLOC_KNOWN " 'two words' 'it'\\''s' '' --naïve '$HOME'");
    assert_false(s.command_truncated);
    remove_dir(dir);

    args[0][10000] = 'a';
    for (int i = 0; i < NARGS; i++)
        argv[i + 1] = args[i];
    argv[NARGS + 1] = NULL;
    dir = make_dir();
    run(argv, true, dir, NULL, &r);
    assert_true(exited_with(&r, 0));
    summarize_pid(dir, r.pid, NULL, 0, &s, NULL);
    assert_true(s.command_truncated);
    assert_true(s.command_len > 1000000 && s.command_len < 1048576);
    remove_dir(dir);
}

/* A path component over 255 bytes: the one warning says why (ENAMETOOLONG) and which component. */
static void test_output_name_too_long(void **state)
{
    const char *dir = make_dir();
    char output[PATH_MAX + 400];
    int n = snprintf(output, sizeof output, "GRADPROF_OUTPUT=%s/", dir);
    memset(output + n, 'c', 300);
    snprintf(output + n + 300, sizeof output - (size_t)n - 300, "/t.gptrace");
    run_result r;
    run_both(GP_ALLOC_KNOWN, dir, (const char *[]){output, NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_string_equal(r.out, AK_STDOUT);
    assert_non_null(strstr(r.err, "gradprof: cannot create the trace file"));
    assert_non_null(strstr(r.err, "ENAMETOOLONG"));
    assert_non_null(strstr(r.err, "is 300 bytes; the limit is 255"));
    assert_non_null(strstr(r.err, "; not recording"));
    assert_int_equal(count_files(dir), 0);
    remove_dir(dir);
}

/* A path that is too long only once %p is expanded is refused, not cut short and used. */
static void test_output_too_long_expanded(void **state)
{
    const char *dir = make_dir();
    static char output[4200];
    int n = snprintf(output, sizeof output, "GRADPROF_OUTPUT=%s/", dir);
    while (n < 16 + 3990)
        n += snprintf(output + n, sizeof output - (size_t)n, "%%p/");
    run_result r;
    run_both(GP_ALLOC_KNOWN, dir, (const char *[]){output, NULL}, &r);
    assert_true(exited_with(&r, 0));
    assert_non_null(strstr(r.err, "once %p is expanded (ENAMETOOLONG); not recording"));
    assert_int_equal(count_files(dir), 0);
    remove_dir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_preload),
        cmocka_unit_test(test_known_wrapped),
        cmocka_unit_test(test_cxx_preload),
        cmocka_unit_test(test_threads_preload),
        cmocka_unit_test(test_fork_preload),
        cmocka_unit_test(test_abort_preload),
        cmocka_unit_test(test_call_chain_stack),
        cmocka_unit_test(test_stack_walks_with_frame_pointers),
        cmocka_unit_test(test_stack_walks_without_frame_pointers),
        cmocka_unit_test(test_stack_walk_refused_once),
        cmocka_unit_test(test_file_size_limit),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_unwritable_output),
        cmocka_unit_test(test_foreign_program),
        cmocka_unit_test(test_fd_dup_onto_3),
        cmocka_unit_test(test_fd_devnull_over_low),
        cmocka_unit_test(test_fd_closefrom_loop),
        cmocka_unit_test(test_fd_close_range),
        cmocka_unit_test(test_fd_hijacked),
        cmocka_unit_test(test_cancelled_threads),
        cmocka_unit_test(test_tsd_destructors),
        cmocka_unit_test(test_getattr_first),
        cmocka_unit_test(test_realloc_free_comes_first),
        cmocka_unit_test(test_exclude_own_work),
        cmocka_unit_test(test_forms_glibc),
        cmocka_unit_test(test_forms_tcmalloc),
        cmocka_unit_test(test_forms_jemalloc),
        cmocka_unit_test(test_allocator_first_is_said),
        cmocka_unit_test(test_allocator_check_non_pie),
        cmocka_unit_test(test_python_frames),
        cmocka_unit_test(test_python_frames_deep),
        cmocka_unit_test(test_end_reason),
        cmocka_unit_test(test_long_command_line),
        cmocka_unit_test(test_vfork_child_leaves_the_trace_alone),
        cmocka_unit_test(test_output_name_too_long),
        cmocka_unit_test(test_output_too_long_expanded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
