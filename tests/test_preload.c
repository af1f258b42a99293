/*
 * Subprocess tests of the interposers: each program in tests/preload/ runs under
 * LD_PRELOAD=libprof_preload.so (or, alloc_wrapped, linked with ld --wrap) with
 * GRADPROF_OUTPUT=<tmpdir>/t.%p.gptrace, and the trace it leaves is read back with gptrace. The
 * programs' own allocations have distinctive sizes (listed in the headers in tests/preload/); the
 * dynamic loader's and libc's are ignored by size. Every program also runs without the preload,
 * and its exit status and stdout must not change.
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
#include "symbolize.h"

#define RUN_TIMEOUT_S 120

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
 * GRADPROF_FLUSH_MS=20, LD_PRELOAD=<the preload library> when `preload`, then the "K=V" strings of
 * `extra` (NULL-terminated, may be NULL; later entries win in getenv's first-match order, so they
 * go first). Captures stdout and stderr; kills the program after RUN_TIMEOUT_S.
 */
static void run(char *const argv[], bool preload, const char *dir, const char *const *extra,
                run_result *r)
{
    memset(r, 0, sizeof *r);
    char output[PATH_MAX + 32], ld_preload[PATH_MAX + 16];
    snprintf(output, sizeof output, "GRADPROF_OUTPUT=%s/t.%%p.gptrace", dir);
    snprintf(ld_preload, sizeof ld_preload, "LD_PRELOAD=%s", GP_PRELOAD_LIB);
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
    time_t deadline = time(NULL) + RUN_TIMEOUT_S;
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
        fprintf(stderr, "[%s stderr]\n%s", argv[0], r->err);
    assert_true(time(NULL) < deadline);
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
    uint64_t tracked_bytes;   /* bytes of the ALLOCs of the tracked sizes */
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
    while ((rc = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
        seq++;
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
        } else if (ev.kind == GP_EV_FREE) {
            int64_t size = live_take(&live, ev.addr);
            if (size < 0) {
                s->unmatched_frees++;
                continue;
            }
            size_stat *st = stat_of(s, (uint64_t)size);
            if (st) {
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
    assert_int_equal(s->huge_allocs, 0); /* the failed malloc and realloc recorded nothing */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_preload),     cmocka_unit_test(test_known_wrapped),
        cmocka_unit_test(test_cxx_preload),       cmocka_unit_test(test_threads_preload),
        cmocka_unit_test(test_fork_preload),      cmocka_unit_test(test_abort_preload),
        cmocka_unit_test(test_call_chain_stack),  cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_unwritable_output), cmocka_unit_test(test_foreign_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
