/*
 * Tests of gptrace, the trace reader (gradprof/trace.h), and of the codec it shares with the
 * writer (gradprof/trace_format.h). Traces are made by a small encoder written here from the
 * format description, so the tests check the reader against the format, not against the writer.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gradprof/trace.h"
#include "gradprof/trace_format.h"
#include "xorshift.h"

/* ---- a scratch directory --------------------------------------------------------------------- */

static char tmpdir[64];

static const char *path_in(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

static int setup_dir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/gptrace-test-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

/* Removes the files the tests wrote (plain files only), then the directory. */
static int teardown_dir(void **state)
{
    (void)state;
    DIR *d = opendir(tmpdir);
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
            unlink(path_in(de->d_name));
    }
    closedir(d);
    return rmdir(tmpdir);
}

/* ---- an encoder, from trace_format.h --------------------------------------------------------- */

/* One chunk's payload and its running state. */
typedef struct enc {
    uint8_t p[1 << 16];
    size_t n;
    uint64_t time, addr;
} enc;

/* A whole file being built in memory. */
typedef struct fbuf {
    uint8_t *data;
    size_t n, cap;
} fbuf;

static void fb_put(fbuf *f, const void *p, size_t n)
{
    if (f->n + n > f->cap) {
        f->cap = (f->n + n) * 2 + 1024;
        f->data = realloc(f->data, f->cap);
        assert_non_null(f->data);
    }
    memcpy(f->data + f->n, p, n);
    f->n += n;
}

static void fb_header(fbuf *f, uint16_t major, uint16_t minor)
{
    uint8_t h[GP_FILE_HEADER_BYTES] = {0};
    memcpy(h, GP_FILE_MAGIC, 8);
    h[8] = (uint8_t)major, h[9] = (uint8_t)(major >> 8);
    h[10] = (uint8_t)minor, h[11] = (uint8_t)(minor >> 8);
    fb_put(f, h, sizeof h);
}

static void fb_free(fbuf *f)
{
    free(f->data);
    memset(f, 0, sizeof *f);
}

/* Recomputes the checksum of the chunk at `off` (after a test changed its bytes). */
static void fix_crc(fbuf *f, size_t off)
{
    uint32_t n = gp_get_u32(f->data + off + 4);
    assert_true(off + GP_CHUNK_HEADER_BYTES + n <= f->n);
    uint32_t crc = gp_crc32c(0, f->data + off + 12, 20);
    crc = gp_crc32c(crc, f->data + off + GP_CHUNK_HEADER_BYTES, n);
    gp_put_u32(f->data + off + 8, crc);
}

/* Appends e as a chunk of `thread`; returns the chunk's file offset. */
static size_t fb_chunk(fbuf *f, uint32_t thread, uint64_t base, uint64_t write_time, const enc *e)
{
    uint8_t h[GP_CHUNK_HEADER_BYTES];
    gp_put_u32(h, GP_CHUNK_MAGIC);
    gp_put_u32(h + 4, (uint32_t)e->n);
    gp_put_u32(h + 12, thread);
    gp_put_u64(h + 16, base);
    gp_put_u64(h + 24, write_time);
    gp_put_u32(h + 8, gp_crc32c(gp_crc32c(0, h + 12, 20), e->p, e->n));
    size_t off = f->n;
    fb_put(f, h, sizeof h);
    fb_put(f, e->p, e->n);
    return off;
}

static void expect_readahead_same(const char *path);

/* Writes the file, and checks that reading it with readahead answers as reading it without. */
static void fb_write(const fbuf *f, const char *path)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (f->n)
        assert_int_equal(fwrite(f->data, 1, f->n, fp), f->n);
    assert_int_equal(fclose(fp), 0);
    expect_readahead_same(path);
}

static void e_begin(enc *e, uint64_t base)
{
    e->n = 0;
    e->time = base;
    e->addr = 0;
}

static void e_byte(enc *e, uint8_t b)
{
    assert_true(e->n < sizeof e->p);
    e->p[e->n++] = b;
}

static void e_bytes(enc *e, const void *p, size_t n)
{
    assert_true(e->n + n <= sizeof e->p);
    memcpy(e->p + e->n, p, n);
    e->n += n;
}

static void e_var(enc *e, uint64_t v)
{
    assert_true(e->n + 10 <= sizeof e->p);
    e->n += gp_put_varint(e->p + e->n, v);
}

static void e_str(enc *e, const char *s)
{
    e_var(e, strlen(s));
    e_bytes(e, s, strlen(s));
}

static void e_dt(enc *e, uint64_t t)
{
    assert_true(t >= e->time);
    e_var(e, t - e->time);
    e->time = t;
}

/* daddr to the absolute address `addr`, scaled by 16 with ADDR16. */
static void e_addr(enc *e, uint64_t addr, bool addr16)
{
    int64_t d = (int64_t)(addr - e->addr);
    if (addr16) {
        assert_int_equal(d % 16, 0);
        d /= 16;
    }
    e_var(e, gp_zigzag(d));
    e->addr = addr;
}

static uint8_t addr_flags(bool addr16, lp_device dev)
{
    return (uint8_t)((addr16 ? GP_FLAG_ADDR16 : 0) | (dev != LP_DEVICE_HOST ? GP_FLAG_DEVICE : 0));
}

static void e_device(enc *e, lp_device dev)
{
    if (dev != LP_DEVICE_HOST)
        e_var(e, (uint64_t)dev + 1);
}

static void r_meta(enc *e, const char *k, const char *v)
{
    e_byte(e, GP_REC_META);
    e_str(e, k);
    e_str(e, v);
}

static void r_module(enc *e, uint64_t id, uint64_t base, uint64_t size, const char *path,
                     const char *build_id)
{
    e_byte(e, GP_REC_MODULE);
    e_var(e, id);
    e_var(e, base);
    e_var(e, size);
    e_str(e, path);
    e_str(e, build_id);
}

static void r_thread(enc *e, uint64_t tid, const char *name)
{
    e_byte(e, GP_REC_THREAD);
    e_var(e, tid);
    e_str(e, name);
}

static void r_string(enc *e, uint64_t id, const char *s)
{
    e_byte(e, GP_REC_STRING);
    e_var(e, id);
    e_str(e, s);
}

static void r_stack(enc *e, uint64_t id, uint64_t parent, uint64_t module, uint64_t offset)
{
    e_byte(e, GP_REC_STACK);
    e_var(e, id);
    e_var(e, parent);
    e_var(e, module);
    e_var(e, offset);
}

static void r_alloc(enc *e, uint64_t t, uint64_t addr, uint64_t size, uint64_t stack, lp_device dev,
                    bool addr16)
{
    e_byte(e, GP_REC_ALLOC | addr_flags(addr16, dev));
    e_dt(e, t);
    e_addr(e, addr, addr16);
    e_device(e, dev);
    e_var(e, size);
    e_var(e, stack);
}

static void r_free(enc *e, uint64_t t, uint64_t addr, lp_device dev, bool addr16)
{
    e_byte(e, GP_REC_FREE | addr_flags(addr16, dev));
    e_dt(e, t);
    e_addr(e, addr, addr16);
    e_device(e, dev);
}

static void r_tag(enc *e, uint64_t t, uint64_t addr, uint64_t size, uint64_t category, uint64_t op,
                  uint64_t module, uint64_t detail, uint64_t stack, bool grad, lp_device dev,
                  bool addr16)
{
    e_byte(e, (uint8_t)(GP_REC_TAG | addr_flags(addr16, dev) | (grad ? GP_FLAG_GRAD : 0)));
    e_dt(e, t);
    e_addr(e, addr, addr16);
    e_device(e, dev);
    e_var(e, size);
    e_var(e, category);
    e_var(e, op);
    e_var(e, module);
    e_var(e, detail);
    e_var(e, stack);
}

/* REGION_POP, GRAD_MODE, END: a time and flags only. */
static void r_plain(enc *e, uint8_t type_and_flags, uint64_t t)
{
    e_byte(e, type_and_flags);
    e_dt(e, t);
}

/* REGION_PUSH, MARK (string id) and LOST (count). */
static void r_with(enc *e, uint8_t type, uint64_t t, uint64_t v)
{
    e_byte(e, type);
    e_dt(e, t);
    e_var(e, v);
}

/* NOTE (1.1): a time, the key's string id and the value. */
static void r_note(enc *e, uint64_t t, uint64_t key, const char *value)
{
    e_byte(e, GP_REC_NOTE);
    e_dt(e, t);
    e_var(e, key);
    e_str(e, value);
}

/* ---- reading helpers ------------------------------------------------------------------------- */

static gp_trace *open_ok(const char *path)
{
    gp_trace *t = NULL;
    char err[512] = "";
    int r = gp_trace_open(path, &t, err, sizeof err);
    if (r != 0)
        print_error("gp_trace_open(%s): %s\n", path, err);
    assert_int_equal(r, 0);
    assert_non_null(t);
    return t;
}

/* Reads every event (the first `max` into ev); the reader must end with 0, never -1. */
static size_t read_all(gp_trace *t, gp_event *ev, size_t max)
{
    char err[512] = "";
    gp_event e;
    size_t n = 0;
    int r;
    while ((r = gp_trace_next(t, &e, err, sizeof err)) == 1) {
        if (n < max)
            ev[n] = e;
        n++;
    }
    if (r != 0)
        print_error("gp_trace_next: %s\n", err);
    assert_int_equal(r, 0);
    assert_int_equal(gp_trace_next(t, &e, err, sizeof err), 0); /* stays at the end */
    return n;
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static void expect_same_event(const gp_event *a, const gp_event *b)
{
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->time_ns, b->time_ns);
    assert_int_equal(a->thread, b->thread);
    assert_int_equal(a->addr, b->addr);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->device, b->device);
    assert_int_equal(a->stack, b->stack);
    assert_int_equal(a->category, b->category);
    assert_true(same_str(a->op, b->op) && same_str(a->module, b->module));
    assert_true(same_str(a->detail, b->detail) && same_str(a->name, b->name));
    assert_int_equal(a->grad_enabled, b->grad_enabled);
    assert_int_equal(a->inference, b->inference);
    assert_int_equal(a->count, b->count);
}

/* What the accessors of a and b answer now: the same. */
static void expect_same_tables(const gp_trace *a, const gp_trace *b)
{
    static const char *const keys[] = {
        "command", "empty", "flush_interval_ns", "pid", "start_monotonic_ns", "missing"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_true(same_str(gp_trace_meta(a, keys[i]), gp_trace_meta(b, keys[i])));
    assert_int_equal(gp_trace_module_count(a), gp_trace_module_count(b));
    for (uint32_t id = 0; id <= gp_trace_module_count(a) + 1; id++) {
        const gp_module *ma = gp_trace_module(a, id), *mb = gp_trace_module(b, id);
        assert_true((ma == NULL) == (mb == NULL));
        if (ma) {
            assert_int_equal(ma->base, mb->base);
            assert_int_equal(ma->size, mb->size);
            assert_true(same_str(ma->path, mb->path) && same_str(ma->build_id, mb->build_id));
        }
    }
    assert_int_equal(gp_trace_thread_count(a), gp_trace_thread_count(b));
    for (uint32_t th = 0; th <= gp_trace_thread_count(a) + 1; th++) {
        assert_true(same_str(gp_trace_thread_name(a, th), gp_trace_thread_name(b, th)));
        assert_int_equal(gp_trace_thread_os_tid(a, th), gp_trace_thread_os_tid(b, th));
    }
    assert_int_equal(gp_trace_stack_count(a), gp_trace_stack_count(b));
    for (uint32_t id = 0; id <= gp_trace_stack_count(a) + 1; id++) {
        uint32_t m1 = 0, m2 = 0, p1 = 0, p2 = 0;
        uint64_t o1 = 0, o2 = 0;
        assert_int_equal(gp_trace_stack_frame(a, id, &m1, &o1, &p1),
                         gp_trace_stack_frame(b, id, &m2, &o2, &p2));
        assert_true(m1 == m2 && o1 == o2 && p1 == p2);
    }
}

typedef struct scan_job {
    gp_trace *t;
    int rc;
    char err[512];
} scan_job;

static void *scan_main(void *arg)
{
    scan_job *job = arg;
    job->rc = gp_trace_scan(job->t, job->err, sizeof job->err);
    return NULL;
}

/* Reads `path` with and without readahead in lockstep: every call answers the same, every
 * event and every accessor after it, to the end or the same error. The one with readahead is
 * scanned first, on a thread of its own (gp_trace_scan, as `gradprof diff` does with B). */
static void expect_readahead_same(const char *path)
{
    gp_trace *a = NULL, *b = NULL;
    char ea[512] = "", eb[512] = "";
    int oa = gp_trace_open(path, &a, ea, sizeof ea), ob = gp_trace_open(path, &b, eb, sizeof eb);
    assert_int_equal(oa, ob);
    if (oa != 0)
        return;
    cpu_set_t cpus;
    bool two = sched_getaffinity(0, sizeof cpus, &cpus) != 0 || CPU_COUNT(&cpus) >= 2;
    assert_int_equal(gp_trace_readahead(b), two ? 1 : 0);
    scan_job job = {.t = b};
    pthread_t scanner;
    assert_int_equal(pthread_create(&scanner, NULL, scan_main, &job), 0);
    assert_int_equal(pthread_join(scanner, NULL), 0);
    assert_int_equal(gp_trace_scan(b, eb, sizeof eb), job.rc); /* scanned once, same answer */
    if (job.rc != 0)
        assert_string_equal(eb, job.err);
    int ra, rb;
    do {
        gp_event va, vb;
        ra = gp_trace_next(a, &va, ea, sizeof ea);
        rb = gp_trace_next(b, &vb, eb, sizeof eb);
        assert_int_equal(ra, rb);
        if (ra == 1)
            expect_same_event(&va, &vb);
        else if (ra < 0)
            assert_string_equal(ea, eb);
        expect_same_tables(a, b);
        assert_int_equal(gp_trace_readahead(b), -1); /* too late */
    } while (ra == 1);
    const gp_trace_info *ia = gp_trace_info_get(a), *ib = gp_trace_info_get(b);
    assert_int_equal(ia->events, ib->events);
    assert_int_equal(ia->chunks, ib->chunks);
    assert_int_equal(ia->damaged, ib->damaged);
    assert_int_equal(ia->damage_offset, ib->damage_offset);
    assert_string_equal(ia->damage_reason, ib->damage_reason);
    assert_int_equal(ia->clean_end, ib->clean_end);
    assert_int_equal(ia->lost_events, ib->lost_events);
    gp_trace_close(a);
    gp_trace_close(b);
}

/* Opens `path` expecting failure; returns the message. */
static const char *open_fails(const char *path)
{
    static char err[512];
    gp_trace *t = (gp_trace *)&err; /* must be reset to NULL */
    err[0] = '\0';
    assert_int_equal(gp_trace_open(path, &t, err, sizeof err), -1);
    assert_null(t);
    assert_true(err[0] != '\0');
    return err;
}

static void assert_contains(const char *s, const char *needle)
{
    if (!strstr(s, needle))
        print_error("\"%s\" does not contain \"%s\"\n", s, needle);
    assert_non_null(strstr(s, needle));
}

/* ---- codec ----------------------------------------------------------------------------------- */

static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

/* The table-driven CRC, which gp_crc32c uses when the CPU has no crc32 instruction (codec.c). */
uint32_t gp__crc32c_table(uint32_t crc, const void *data, size_t n);

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(gp_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(gp_crc32c(0, "", 0), 0);
    uint8_t zeros[32] = {0}, ones[32];
    memset(ones, 0xFF, sizeof ones);
    assert_int_equal(gp_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720, B.4 */
    assert_int_equal(gp_crc32c(0, ones, 32), 0x62A8AB43u);
    /* Chaining at every split point. */
    static const char check[] = "123456789";
    for (size_t k = 0; k <= 9; k++)
        assert_int_equal(gp_crc32c(gp_crc32c(0, check, k), &check[k], 9 - k), 0xE3069283u);
    /* Every table, length and alignment against the bitwise definition. */
    uint8_t buf[300];
    uint64_t x = 12345;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(xorshift64(&x) >> 16);
    for (size_t start = 0; start < 9; start++)
        for (size_t n = 0; n + start <= sizeof buf; n += 7) {
            assert_int_equal(gp_crc32c(0, buf + start, n), crc_bitwise(0, buf + start, n));
            assert_int_equal(gp__crc32c_table(0, buf + start, n), crc_bitwise(0, buf + start, n));
        }
    assert_int_equal(gp_crc32c(0x1234, buf, 100), crc_bitwise(0x1234, buf, 100));
    assert_int_equal(gp__crc32c_table(0x1234, buf, 100), crc_bitwise(0x1234, buf, 100));
}

static void test_varint(void **state)
{
    (void)state;
    static const struct {
        uint64_t v;
        size_t bytes;
    } cases[] = {{0, 1},          {1, 1},     {127, 1},        {128, 2},
                 {16383, 2},      {16384, 3}, {UINT32_MAX, 5}, {(uint64_t)1 << 63, 10},
                 {UINT64_MAX, 10}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t b[16];
        size_t n = gp_put_varint(b, cases[i].v);
        assert_int_equal(n, cases[i].bytes);
        const uint8_t *p = b;
        uint64_t v = 1;
        assert_int_equal(gp_get_varint(&p, b + n, &v), 0);
        assert_true(v == cases[i].v);
        assert_ptr_equal(p, b + n);
        p = b; /* truncated by one byte */
        assert_int_equal(gp_get_varint(&p, b + n - 1, &v), -1);
        assert_ptr_equal(p, b);
    }
    uint8_t b128[2] = {0x80, 0x01};
    uint8_t enc128[2];
    assert_int_equal(gp_put_varint(enc128, 128), 2);
    assert_memory_equal(enc128, b128, 2);
    /* Eleven bytes: rejected even though all are there. */
    uint8_t eleven[11];
    memset(eleven, 0x80, 10);
    eleven[10] = 0x01;
    const uint8_t *p = eleven;
    uint64_t v;
    assert_int_equal(gp_get_varint(&p, eleven + 11, &v), -1);
    static const int64_t sv[] = {0, 1, -1, 63, -64, 64, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++)
        assert_true(gp_unzigzag(gp_zigzag(sv[i])) == sv[i]);
    assert_int_equal(gp_zigzag(-1), 1);
    assert_int_equal(gp_zigzag(1), 2);
    assert_true(gp_zigzag(INT64_MIN) == UINT64_MAX);
}

/* ---- round trip ------------------------------------------------------------------------------ */

#define A 0x7f0000001000ull
#define GPU_ADDR 0x7f1200000000ull

static void test_round_trip(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 1000);
    r_meta(&e, "start_monotonic_ns", "1000");
    r_meta(&e, "command", "old");
    r_meta(&e, "command", "python3 infer.py --naïve");
    r_meta(&e, "empty", "");
    r_module(&e, 1, 0x400000, 0x1000, "/usr/bin/python3", "abcdef01");
    r_module(&e, 2, 0x7f0000000000, 0x200000, "/lib/libtensor.so", "");
    fb_chunk(&f, 0, 900, 1500, &e); /* times count from start_monotonic_ns, not this base */

    e_begin(&e, 2000);
    r_thread(&e, 4242, "main ✓");
    r_string(&e, 1, "linear");
    r_string(&e, 2, "encoder.layers.0.fc1");
    r_string(&e, 3, "");
    r_string(&e, 4, "[64,128]");
    r_string(&e, 5, "iter 0 — ß");
    r_stack(&e, 1, 0, 1, 0x100);
    r_stack(&e, 2, 1, 2, 0x20);
    r_stack(&e, 3, 2, 0, 0xdeadbeef);
    r_alloc(&e, 2000, A, 4096, 2, LP_DEVICE_HOST, false);
    r_tag(&e, 2005, A, 4096, LP_CAT_SAVED, 1, 2, 4, 2, true, LP_DEVICE_HOST, true);
    r_tag(&e, 2005, A - 0x800, 64, LP_CAT_TEMPORARY, 3, 0, 0, 0, false, LP_DEVICE_HOST, true);
    r_free(&e, 2010, A, LP_DEVICE_HOST, false);
    r_free(&e, 2011, A - 0x10, LP_DEVICE_HOST, false);
    r_alloc(&e, 2020, GPU_ADDR, (uint64_t)1 << 40, 3, 3, true);
    r_tag(&e, 2020, GPU_ADDR, (uint64_t)1 << 40, LP_CAT_PARAMETER, 1, 2, 0, 3, false, 3, true);
    r_free(&e, 2030, 0x10, 0, false);
    r_free(&e, 2031, UINT64_MAX - 15, LP_DEVICE_HOST, true); /* wraps around through 0 */
    r_with(&e, GP_REC_REGION_PUSH, 2040, 2);
    r_with(&e, GP_REC_MARK, 2041, 5);
    r_plain(&e, GP_REC_REGION_POP, 2050);
    r_plain(&e, GP_REC_GRAD_MODE | GP_FLAG_INFERENCE, 2060);
    r_plain(&e, GP_REC_GRAD_MODE | GP_FLAG_GRAD, 2061);
    r_with(&e, GP_REC_LOST, 2070, 7);
    r_with(&e, GP_REC_LOST, 2070, 5);
    r_plain(&e, GP_REC_END, 2080);
    fb_chunk(&f, 7, 2000, 9000, &e);
    fb_write(&f, path_in("roundtrip.gptrace"));

    gp_trace *t = open_ok(path_in("roundtrip.gptrace"));
    gp_event ev[32];
    size_t n = read_all(t, ev, 32);
    assert_int_equal(n, 17);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ev[i].thread, 1); /* writer thread 7 is the first with events */
        assert_non_null(ev[i].op);
        assert_non_null(ev[i].module);
        assert_non_null(ev[i].detail);
        assert_non_null(ev[i].name);
    }

    assert_int_equal(ev[0].kind, GP_EV_ALLOC);
    assert_int_equal(ev[0].time_ns, 1000);
    assert_true(ev[0].addr == A);
    assert_int_equal(ev[0].size, 4096);
    assert_int_equal(ev[0].device, LP_DEVICE_HOST);
    assert_int_equal(ev[0].category, LP_CAT_OTHER);
    uint32_t module, parent, parent2;
    uint64_t offset;
    assert_int_equal(gp_trace_stack_frame(t, ev[0].stack, &module, &offset, &parent), 0);
    assert_int_equal(module, 2);
    assert_int_equal(offset, 0x20);
    assert_int_equal(gp_trace_stack_frame(t, parent, &module, &offset, &parent2), 0);
    assert_int_equal(module, 1);
    assert_int_equal(offset, 0x100);
    assert_int_equal(parent2, 0);

    assert_int_equal(ev[1].kind, GP_EV_TAG);
    assert_int_equal(ev[1].time_ns, 1005);
    assert_true(ev[1].addr == A);
    assert_int_equal(ev[1].size, 4096);
    assert_int_equal(ev[1].category, LP_CAT_SAVED);
    assert_string_equal(ev[1].op, "linear");
    assert_string_equal(ev[1].module, "encoder.layers.0.fc1");
    assert_string_equal(ev[1].detail, "[64,128]");
    assert_true(ev[1].grad_enabled);
    assert_int_equal(ev[1].stack, ev[0].stack);

    assert_int_equal(ev[2].kind, GP_EV_TAG); /* an address never allocated, below the last */
    assert_int_equal(ev[2].time_ns, 1005);
    assert_true(ev[2].addr == A - 0x800);
    assert_int_equal(ev[2].size, 64);
    assert_int_equal(ev[2].category, LP_CAT_TEMPORARY);
    assert_string_equal(ev[2].op, "");
    assert_string_equal(ev[2].module, "");
    assert_string_equal(ev[2].detail, "");
    assert_false(ev[2].grad_enabled);
    assert_int_equal(ev[2].stack, 0);

    assert_int_equal(ev[3].kind, GP_EV_FREE);
    assert_true(ev[3].addr == A);
    assert_int_equal(ev[3].device, LP_DEVICE_HOST);
    assert_int_equal(ev[4].kind, GP_EV_FREE);
    assert_true(ev[4].addr == A - 0x10);
    assert_int_equal(ev[4].time_ns, 1011);

    assert_int_equal(ev[5].kind, GP_EV_ALLOC);
    assert_true(ev[5].addr == GPU_ADDR);
    assert_true(ev[5].size == (uint64_t)1 << 40);
    assert_int_equal(ev[5].device, 3);
    assert_int_equal(gp_trace_stack_frame(t, ev[5].stack, &module, &offset, &parent), 0);
    assert_int_equal(module, 0);
    assert_int_equal(offset, 0xdeadbeef);
    assert_int_equal(parent, ev[0].stack);
    assert_int_equal(ev[6].kind, GP_EV_TAG);
    assert_int_equal(ev[6].device, 3);
    assert_int_equal(ev[6].category, LP_CAT_PARAMETER);
    assert_string_equal(ev[6].detail, "");
    assert_int_equal(ev[6].stack, ev[5].stack);
    assert_int_equal(ev[7].kind, GP_EV_FREE);
    assert_int_equal(ev[7].device, 0);
    assert_true(ev[7].addr == 0x10);
    assert_int_equal(ev[8].kind, GP_EV_FREE);
    assert_true(ev[8].addr == UINT64_MAX - 15);

    assert_int_equal(ev[9].kind, GP_EV_REGION_PUSH);
    assert_string_equal(ev[9].name, "encoder.layers.0.fc1");
    assert_int_equal(ev[9].time_ns, 1040);
    assert_int_equal(ev[10].kind, GP_EV_MARK);
    assert_string_equal(ev[10].name, "iter 0 — ß");
    assert_int_equal(ev[11].kind, GP_EV_REGION_POP);
    assert_int_equal(ev[11].time_ns, 1050);
    assert_int_equal(ev[12].kind, GP_EV_GRAD_MODE);
    assert_false(ev[12].grad_enabled);
    assert_true(ev[12].inference);
    assert_int_equal(ev[13].kind, GP_EV_GRAD_MODE);
    assert_true(ev[13].grad_enabled);
    assert_false(ev[13].inference);
    assert_int_equal(ev[14].kind, GP_EV_LOST);
    assert_int_equal(ev[14].count, 7);
    assert_int_equal(ev[15].kind, GP_EV_LOST);
    assert_int_equal(ev[15].count, 5);
    assert_int_equal(ev[15].time_ns, 1070);
    assert_int_equal(ev[16].kind, GP_EV_END);
    assert_int_equal(ev[16].time_ns, 1080);

    /* The same text from two string ids is one interned string. */
    assert_ptr_equal(ev[1].op, ev[6].op);

    const gp_trace_info *info = gp_trace_info_get(t);
    assert_int_equal(info->version_major, 1);
    assert_int_equal(info->version_minor, 0);
    assert_int_equal(info->file_bytes, f.n);
    assert_int_equal(info->chunks, 2);
    assert_int_equal(info->events, 17);
    assert_false(info->damaged);
    assert_int_equal(info->bytes_lost, 0);
    assert_true(info->clean_end);
    assert_int_equal(info->lost_events, 12);

    assert_string_equal(gp_trace_meta(t, "command"), "python3 infer.py --naïve");
    assert_string_equal(gp_trace_meta(t, "start_monotonic_ns"), "1000");
    assert_string_equal(gp_trace_meta(t, "empty"), "");
    assert_null(gp_trace_meta(t, "pid"));
    assert_null(gp_trace_meta(t, NULL));

    assert_int_equal(gp_trace_module_count(t), 2);
    const gp_module *m = gp_trace_module(t, 1);
    assert_non_null(m);
    assert_int_equal(m->base, 0x400000);
    assert_int_equal(m->size, 0x1000);
    assert_string_equal(m->path, "/usr/bin/python3");
    assert_string_equal(m->build_id, "abcdef01");
    m = gp_trace_module(t, 2);
    assert_non_null(m);
    assert_true(m->base == 0x7f0000000000ull);
    assert_string_equal(m->build_id, "");
    assert_null(gp_trace_module(t, 0));
    assert_null(gp_trace_module(t, 3));

    assert_int_equal(gp_trace_stack_count(t), 3);
    assert_int_equal(gp_trace_stack_frame(t, 0, &module, &offset, &parent), -1);
    assert_int_equal(gp_trace_stack_frame(t, 4, &module, &offset, &parent), -1);

    assert_int_equal(gp_trace_thread_count(t), 1);
    assert_string_equal(gp_trace_thread_name(t, 1), "main ✓");
    assert_null(gp_trace_thread_name(t, 0));
    assert_null(gp_trace_thread_name(t, 2));
    assert_int_equal(gp_trace_thread_os_tid(t, 1), 4242);
    assert_int_equal(gp_trace_thread_os_tid(t, 0), 0);
    assert_int_equal(gp_trace_thread_os_tid(t, 2), 0);
    gp_trace_close(t);
    fb_free(&f);
}

/* Any minor version of major 1 is read; the header says which. */
static void test_minor_version(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 7);
    e_begin(&e, 50);
    r_with(&e, GP_REC_MARK, 60, 0);
    fb_chunk(&f, 1, 50, 70, &e);
    fb_write(&f, path_in("minor.gptrace"));
    gp_trace *t = open_ok(path_in("minor.gptrace"));
    gp_event ev[4];
    assert_int_equal(read_all(t, ev, 4), 1);
    assert_int_equal(ev[0].kind, GP_EV_MARK);
    assert_string_equal(ev[0].name, "");
    /* No start_monotonic_ns: time counts from the smallest chunk base time. */
    assert_int_equal(ev[0].time_ns, 10);
    assert_int_equal(gp_trace_info_get(t)->version_minor, 7);
    assert_false(gp_trace_info_get(t)->clean_end);
    gp_trace_close(t);
    fb_free(&f);
}

/* NOTE records (1.1): the key by string id, the value inline (possibly empty), each
 * in time order among other events, on their thread. */
static void test_notes(void **state)
{
    (void)state;
    static enc e, e2;
    fbuf f = {0};
    fb_header(&f, 1, 1);
    e_begin(&e, 100);
    r_string(&e, 1, "holder");
    r_with(&e, GP_REC_MARK, 110, 1);
    r_note(&e, 120, 1, "loss_history holds 3 graphs");
    r_note(&e, 140, 0, "");
    fb_chunk(&f, 1, 100, 150, &e);
    e_begin(&e2, 100);
    r_string(&e2, 1, "autograd_error");
    r_note(&e2, 130, 1, "element 0 of tensors does not require grad");
    fb_chunk(&f, 2, 100, 150, &e2);
    fb_write(&f, path_in("notes.gptrace"));
    gp_trace *t = open_ok(path_in("notes.gptrace"));
    gp_event ev[8];
    assert_int_equal(read_all(t, ev, 8), 4);
    assert_int_equal(ev[0].kind, GP_EV_MARK);
    assert_int_equal(ev[1].kind, GP_EV_NOTE);
    assert_string_equal(ev[1].name, "holder");
    assert_string_equal(ev[1].detail, "loss_history holds 3 graphs");
    assert_int_equal(ev[1].time_ns, 20);
    assert_int_equal(ev[2].kind, GP_EV_NOTE);
    assert_string_equal(ev[2].name, "autograd_error");
    assert_string_equal(ev[2].detail, "element 0 of tensors does not require grad");
    assert_int_not_equal(ev[2].thread, ev[1].thread);
    assert_int_equal(ev[3].kind, GP_EV_NOTE);
    assert_string_equal(ev[3].name, "");
    assert_string_equal(ev[3].detail, "");
    assert_int_equal(gp_trace_info_get(t)->version_minor, 1);
    assert_false(gp_trace_info_get(t)->damaged);
    gp_trace_close(t);
    fb_free(&f);
}

/* Without start_monotonic_ns, time counts from the smallest base time of the chunks with events,
 * which need not be the first chunk's; chunks of definitions only (base time 0 from the writer)
 * do not count. Threads are numbered in time order, not in the order of their chunks. */
static void test_start_time(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "pid", "42");
    fb_chunk(&f, 0, 0, 4000, &e);
    e_begin(&e, 5000);
    r_with(&e, GP_REC_MARK, 5000, 0);
    fb_chunk(&f, 1, 5000, 5100, &e);
    e_begin(&e, 3000);
    r_with(&e, GP_REC_MARK, 3500, 0);
    fb_chunk(&f, 2, 3000, 5200, &e);
    fb_write(&f, path_in("start.gptrace"));
    gp_trace *t = open_ok(path_in("start.gptrace"));
    gp_event ev[4];
    assert_int_equal(read_all(t, ev, 4), 2);
    assert_int_equal(ev[0].time_ns, 500);
    assert_int_equal(ev[0].thread, 1); /* writer 2 */
    assert_int_equal(ev[1].time_ns, 2000);
    assert_int_equal(ev[1].thread, 2); /* writer 1 */
    gp_trace_close(t);
    fb_free(&f);
}

/* ---- time order across threads --------------------------------------------------------------- */

static void test_merge_threads(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "flush_interval_ns", "1000"); /* the order does not depend on it */
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    /* Writer 2 is written first although writer 1 has the earlier events (and so the lower
     * thread index, which orders the events of equal times). */
    e_begin(&e, 150);
    r_string(&e, 1, "w2");
    r_string(&e, 2, "w2b");
    r_free(&e, 150, 0x1000, LP_DEVICE_HOST, false); /* frees writer 1's allocation */
    r_with(&e, GP_REC_MARK, 300, 1);
    r_with(&e, GP_REC_MARK, 300, 2);
    fb_chunk(&f, 2, 150, 400, &e);
    e_begin(&e, 100);
    r_string(&e, 1, "w1");
    r_alloc(&e, 100, 0x1000, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 200, 0x2000, 8, 0, LP_DEVICE_HOST, false);
    r_with(&e, GP_REC_MARK, 300, 1);
    fb_chunk(&f, 1, 100, 410, &e);
    e_begin(&e, 305);
    r_free(&e, 305, 0x2000, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 305, 420, &e);
    fb_write(&f, path_in("merge.gptrace"));

    gp_trace *t = open_ok(path_in("merge.gptrace"));
    gp_event ev[16];
    assert_int_equal(read_all(t, ev, 16), 7);
    static const struct {
        gp_event_kind kind;
        uint64_t time;
        uint32_t thread;
        const char *name;
    } want[] = {
        {GP_EV_ALLOC, 100, 1, ""},  {GP_EV_FREE, 150, 2, ""},   {GP_EV_ALLOC, 200, 1, ""},
        {GP_EV_MARK, 300, 1, "w1"}, {GP_EV_MARK, 300, 2, "w2"}, {GP_EV_MARK, 300, 2, "w2b"},
        {GP_EV_FREE, 305, 2, ""},
    };
    for (size_t i = 0; i < 7; i++) {
        assert_int_equal(ev[i].kind, want[i].kind);
        assert_int_equal(ev[i].time_ns, want[i].time);
        assert_int_equal(ev[i].thread, want[i].thread);
        assert_string_equal(ev[i].name, want[i].name);
    }
    assert_true(ev[0].addr == 0x1000 && ev[1].addr == 0x1000); /* the free after its alloc */
    assert_int_equal(gp_trace_thread_count(t), 2);             /* writer 1 -> 1, writer 2 -> 2 */
    assert_null(gp_trace_thread_name(t, 1));
    assert_int_equal(gp_trace_info_get(t)->chunks, 4);
    gp_trace_close(t);
    fb_free(&f);
}

/* The first gp_trace_next() indexes every chunk (info->chunks is then final); events then leave
 * in time order, chunk by chunk. */
static void test_streaming(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "flush_interval_ns", "1000");
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    enum { NCHUNKS = 200 };
    for (uint64_t i = 0; i < NCHUNKS; i++) {
        uint64_t base = 10000 * (i + 1);
        uint32_t writer = 1 + (uint32_t)(i % 3);
        e_begin(&e, base);
        for (uint64_t k = 0; k < 3; k++)
            r_alloc(&e, base + k, 0x1000 * (i + 1) + k * 16, 16, 0, LP_DEVICE_HOST, true);
        fb_chunk(&f, writer, base, base + 10, &e);
    }
    fb_write(&f, path_in("stream.gptrace"));

    gp_trace *t = open_ok(path_in("stream.gptrace"));
    gp_event ev;
    char err[256];
    assert_int_equal(gp_trace_next(t, &ev, err, sizeof err), 1);
    assert_int_equal(ev.time_ns, 10000);
    assert_int_equal(gp_trace_info_get(t)->chunks, NCHUNKS + 1);
    assert_int_equal(gp_trace_info_get(t)->events, 1);
    uint64_t last = ev.time_ns, n = 1;
    int r;
    while ((r = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
        assert_true(ev.time_ns >= last);
        last = ev.time_ns;
        n++;
    }
    assert_int_equal(r, 0);
    assert_int_equal(n, 3 * NCHUNKS);
    assert_int_equal(gp_trace_info_get(t)->chunks, NCHUNKS + 1);
    assert_int_equal(gp_trace_thread_count(t), 3);
    gp_trace_close(t);
    fb_free(&f);
}

/* The writer gives an exited thread's index to the next new thread, which announces itself with
 * a THREAD record of another os_tid and starts its ids afresh: a new reader thread. */
static void build_reuse(fbuf *f, bool damage_second)
{
    static enc e;
    fb_header(f, 1, 0);
    e_begin(&e, 10);
    r_thread(&e, 100, "a");
    r_string(&e, 1, "x");
    r_with(&e, GP_REC_MARK, 10, 1);
    r_thread(&e, 100, "a2"); /* the same thread renames itself */
    fb_chunk(f, 1, 10, 15, &e);
    e_begin(&e, 20);
    r_thread(&e, 200, "b");
    r_string(&e, 1, "y"); /* id 1 again, now "y" */
    r_with(&e, GP_REC_MARK, 20, 1);
    r_with(&e, GP_REC_MARK, 30, 1);
    if (damage_second)
        e_byte(&e, 29);
    fb_chunk(f, 1, 20, 35, &e);
}

static void test_thread_reuse(void **state)
{
    (void)state;
    fbuf f = {0};
    build_reuse(&f, false);
    fb_write(&f, path_in("reuse.gptrace"));
    gp_trace *t = open_ok(path_in("reuse.gptrace"));
    gp_event ev[8];
    assert_int_equal(read_all(t, ev, 8), 3);
    assert_int_equal(ev[0].thread, 1);
    assert_string_equal(ev[0].name, "x");
    assert_int_equal(ev[1].thread, 2);
    assert_string_equal(ev[1].name, "y");
    assert_int_equal(ev[2].thread, 2);
    assert_int_equal(ev[2].time_ns, 20);
    assert_int_equal(gp_trace_thread_count(t), 2);
    assert_string_equal(gp_trace_thread_name(t, 1), "a2");
    assert_string_equal(gp_trace_thread_name(t, 2), "b");
    gp_trace_close(t);
    fb_free(&f);

    build_reuse(&f, true); /* the new thread's chunk is damaged: it never existed */
    fb_write(&f, path_in("reuse.gptrace"));
    t = open_ok(path_in("reuse.gptrace"));
    assert_int_equal(read_all(t, ev, 8), 1);
    assert_true(gp_trace_info_get(t)->damaged);
    assert_int_equal(gp_trace_thread_count(t), 1);
    assert_string_equal(gp_trace_thread_name(t, 1), "a2");
    gp_trace_close(t);
    fb_free(&f);
}

/* ---- global stacks and strings --------------------------------------------------------------- */

static void test_global_stacks(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 100);
    r_string(&e, 1, "linear");
    r_stack(&e, 1, 0, 1, 0x10);
    r_stack(&e, 2, 1, 1, 0x20);
    r_stack(&e, 3, 2, 2, 0x30);
    r_alloc(&e, 100, 0x1000, 8, 3, LP_DEVICE_HOST, false);
    r_tag(&e, 101, 0x1000, 8, LP_CAT_ACTIVATION, 1, 0, 0, 3, false, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 100, 200, &e);
    e_begin(&e, 110);
    r_string(&e, 1, "relu");
    r_string(&e, 2, "linear");
    r_stack(&e, 5, 0, 1, 0x10);
    r_stack(&e, 9, 5, 1, 0x20);
    r_stack(&e, 4, 9, 2, 0x30); /* the same chain as writer 1's stack 3 */
    r_stack(&e, 7, 9, 2, 0x31); /* differs in the innermost frame */
    r_stack(&e, 1, 0, 2, 0x30); /* the same frame with another caller */
    r_alloc(&e, 110, 0x2000, 8, 4, LP_DEVICE_HOST, false);
    r_alloc(&e, 111, 0x3000, 8, 7, LP_DEVICE_HOST, false);
    r_alloc(&e, 112, 0x4000, 8, 1, LP_DEVICE_HOST, false);
    r_tag(&e, 113, 0x2000, 8, LP_CAT_ACTIVATION, 1, 0, 0, 0, false, LP_DEVICE_HOST, false);
    r_tag(&e, 114, 0x3000, 8, LP_CAT_ACTIVATION, 2, 0, 0, 0, false, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 110, 210, &e);
    fb_write(&f, path_in("stacks.gptrace"));

    gp_trace *t = open_ok(path_in("stacks.gptrace"));
    gp_event ev[16];
    assert_int_equal(read_all(t, ev, 16), 7);
    /* Time order: 100 w1, 101 w1, 110 w2, 111 w2, 112 w2, 113 w2, 114 w2. */
    uint32_t s1 = ev[0].stack, s2 = ev[2].stack, s3 = ev[3].stack, s4 = ev[4].stack;
    assert_int_equal(ev[0].thread, 1);
    assert_int_equal(ev[2].thread, 2);
    assert_int_not_equal(s1, 0);
    assert_int_equal(s1, s2);
    assert_int_equal(ev[1].stack, s1);
    assert_int_not_equal(s3, s1);
    assert_int_not_equal(s4, s1);
    assert_int_not_equal(s4, s3);
    assert_int_equal(gp_trace_stack_count(t), 5);

    static const struct {
        uint32_t module;
        uint64_t offset;
    } chain[] = {{2, 0x30}, {1, 0x20}, {1, 0x10}};
    uint32_t id = s1;
    for (size_t i = 0; i < 3; i++) {
        uint32_t module, parent;
        uint64_t offset;
        assert_int_equal(gp_trace_stack_frame(t, id, &module, &offset, &parent), 0);
        assert_int_equal(module, chain[i].module);
        assert_int_equal(offset, chain[i].offset);
        assert_true((parent == 0) == (i == 2));
        id = parent;
    }
    uint32_t p3, p1, module, parent;
    uint64_t offset;
    assert_int_equal(gp_trace_stack_frame(t, s3, &module, &offset, &p3), 0);
    assert_int_equal(offset, 0x31);
    assert_int_equal(gp_trace_stack_frame(t, s1, NULL, NULL, &p1), 0);
    assert_int_equal(p3, p1); /* the shared caller */
    assert_int_equal(gp_trace_stack_frame(t, s4, &module, &offset, &parent), 0);
    assert_int_equal(module, 2);
    assert_int_equal(offset, 0x30);
    assert_int_equal(parent, 0);
    /* Frames by id: the innermost frame of s1 and s4 is (2, 0x30) under two callers, one frame;
     * s3's (2, 0x31) is another. Four distinct frames in all. */
    uint32_t f1, f3, f4, unused;
    assert_int_equal(gp_trace_stack_node(t, s1, &f1, &unused), 0);
    assert_int_equal(gp_trace_stack_node(t, s3, &f3, &unused), 0);
    assert_int_equal(gp_trace_stack_node(t, s4, &f4, &parent), 0);
    assert_int_equal(parent, 0);
    assert_int_equal(f1, f4);
    assert_int_not_equal(f1, f3);
    assert_int_equal(gp_trace_frame(t, f3, &module, &offset), 0);
    assert_int_equal(module, 2);
    assert_int_equal(offset, 0x31);
    for (uint32_t frame = 1; frame <= 4; frame++)
        assert_int_equal(gp_trace_frame(t, frame, &module, &offset), 0);
    assert_int_equal(gp_trace_frame(t, 0, &module, &offset), -1);
    assert_int_equal(gp_trace_frame(t, 5, &module, &offset), -1);
    assert_int_equal(gp_trace_stack_node(t, 0, &f1, &parent), -1);
    assert_int_equal(gp_trace_stack_node(t, 6, &f1, &parent), -1);

    /* String ids are per thread: writer 2's id 1 is "relu", writer 1's is "linear". */
    assert_string_equal(ev[1].op, "linear");
    assert_string_equal(ev[5].op, "relu");
    assert_string_equal(ev[6].op, "linear");
    assert_ptr_equal(ev[1].op, ev[6].op);
    gp_trace_close(t);
    fb_free(&f);
}

/* ---- damage ---------------------------------------------------------------------------------- */

/* A trace of three chunks of writer 1, two ALLOCs each (times 100*k + 10, + 20), chunk 2 with
 * the given payload instead when `mid` is set; off[] gets the chunk offsets. */
static void build_three(fbuf *f, size_t off[3], const enc *mid)
{
    static enc e;
    fb_header(f, 1, 0);
    for (int k = 0; k < 3; k++) {
        uint64_t base = 100 * (uint64_t)(k + 1);
        e_begin(&e, base);
        r_alloc(&e, base + 10, 0x1000 * (uint64_t)(k + 1), 64, 0, LP_DEVICE_HOST, false);
        r_alloc(&e, base + 20, 0x1000 * (uint64_t)(k + 1) + 64, 64, 0, LP_DEVICE_HOST, false);
        off[k] = fb_chunk(f, 1, base, base + 50, k == 1 && mid ? mid : &e);
    }
}

/* Reads `path` and checks: `events` events, damage at `offset` for `reason`, `lost` bytes lost. */
static void expect_damage(const char *path, size_t events, uint64_t offset, uint64_t lost,
                          const char *reason)
{
    gp_trace *t = open_ok(path);
    gp_event ev[16];
    size_t n = read_all(t, ev, 16);
    assert_int_equal(n, events);
    for (size_t i = 0; i < n && i < 16; i++) {
        assert_int_equal(ev[i].kind, GP_EV_ALLOC);
        assert_true(ev[i].addr == 0x1000 * (i / 2 + 1) + 64 * (i % 2));
    }
    const gp_trace_info *info = gp_trace_info_get(t);
    assert_true(info->damaged);
    assert_int_equal(info->damage_offset, offset);
    assert_int_equal(info->bytes_lost, lost);
    assert_int_equal(info->events, events);
    assert_contains(info->damage_reason, reason);
    gp_trace_close(t);
}

static void test_damage_truncated(void **state)
{
    (void)state;
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, NULL);
    size_t full = f.n;
    const char *path = path_in("trunc.gptrace");

    f.n = off[2] + GP_CHUNK_HEADER_BYTES + 3; /* inside the third payload */
    fb_write(&f, path);
    expect_damage(path, 4, off[2], f.n - off[2], "file ends inside a chunk");
    f.n = off[2] + 10; /* inside the third header */
    fb_write(&f, path);
    expect_damage(path, 4, off[2], 10, "file ends inside a chunk header");

    /* Every cut: the chunks that end before it are read, damage iff it is not a boundary. */
    size_t ends[3] = {off[1], off[2], full};
    for (size_t cut = GP_FILE_HEADER_BYTES; cut <= full; cut++) {
        f.n = cut;
        fb_write(&f, path);
        gp_trace *t = open_ok(path);
        gp_event ev[8];
        size_t whole = 0;
        while (whole < 3 && ends[whole] <= cut)
            whole++;
        assert_int_equal(read_all(t, ev, 8), 2 * whole);
        const gp_trace_info *info = gp_trace_info_get(t);
        bool boundary = cut == GP_FILE_HEADER_BYTES || (whole > 0 && ends[whole - 1] == cut);
        assert_int_equal(info->damaged, !boundary);
        assert_int_equal(info->chunks, whole);
        if (!boundary) {
            assert_int_equal(info->damage_offset, off[whole]);
            assert_int_equal(info->bytes_lost, cut - off[whole]);
        }
        gp_trace_close(t);
    }
    fb_free(&f);
}

static void test_damage_checksum(void **state)
{
    (void)state;
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, NULL);
    const char *path = path_in("crc.gptrace");
    f.data[off[1] + GP_CHUNK_HEADER_BYTES + 2] ^= 0x04; /* payload of the 2nd chunk */
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "chunk checksum mismatch");
    f.data[off[1] + GP_CHUNK_HEADER_BYTES + 2] ^= 0x04;
    f.data[off[1] + 20] ^= 0x80; /* its base time: covered by the checksum too */
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "chunk checksum mismatch");
    f.data[off[1] + 20] ^= 0x80;
    f.data[off[1]] = 'X'; /* its magic */
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "bad chunk magic");
    fb_free(&f);
}

static void test_damage_oversized(void **state)
{
    (void)state;
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, NULL);
    const char *path = path_in("big.gptrace");
    gp_put_u32(f.data + off[1] + 4, GP_CHUNK_MAX_PAYLOAD + 1);
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "over the limit");
    gp_put_u32(f.data + off[1] + 4, UINT32_MAX);
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "over the limit");
    /* A payload size within the limit but past the end of the file. */
    gp_put_u32(f.data + off[1] + 4, GP_CHUNK_MAX_PAYLOAD);
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], "file ends inside a chunk");
    fb_free(&f);
}

static void test_damage_garbage(void **state)
{
    (void)state;
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, NULL);
    size_t good = f.n;
    const char *path = path_in("garbage.gptrace");
    char junk[100];
    memset(junk, 'g', sizeof junk);
    fb_put(&f, junk, sizeof junk);
    fb_write(&f, path);
    expect_damage(path, 6, good, 100, "bad chunk magic");
    f.n = good + 7; /* too short for a header */
    fb_write(&f, path);
    expect_damage(path, 6, good, 7, "chunk header");
    /* Zeros, as a crash can leave at the end of a file. */
    memset(f.data + good, 0, 7);
    fb_write(&f, path);
    expect_damage(path, 6, good, 7, "chunk header");
    fb_free(&f);
}

/* A second chunk whose first ALLOC is fine and whose next record is `bad`: the whole chunk is
 * dropped, the first chunk's events delivered. */
static void check_bad_record(const enc *bad_rec, const char *reason)
{
    static enc mid;
    e_begin(&mid, 200);
    r_alloc(&mid, 210, 0x2000, 64, 0, LP_DEVICE_HOST, false);
    e_bytes(&mid, bad_rec->p, bad_rec->n);
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, &mid);
    const char *path = path_in("badrec.gptrace");
    fb_write(&f, path);
    expect_damage(path, 2, off[1], f.n - off[1], reason);
    fb_free(&f);
}

static void test_damage_bad_records(void **state)
{
    (void)state;
    static enc b;
    e_begin(&b, 210);
    e_byte(&b, 31);
    check_bad_record(&b, "unknown record type 31");
    e_begin(&b, 210);
    e_byte(&b, 0);
    check_bad_record(&b, "unknown record type 0");
    e_begin(&b, 210);
    e_byte(&b, 16 | GP_FLAG_GRAD); /* the first type after NOTE (1.1) */
    check_bad_record(&b, "unknown record type 16");
    e_begin(&b, 210);
    r_note(&b, 220, 5, "v");
    check_bad_record(&b, "undefined string id 5");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_NOTE);
    e_dt(&b, 220);
    e_var(&b, 0);
    e_var(&b, 9); /* a value longer than the record */
    e_bytes(&b, "abc", 3);
    check_bad_record(&b, "record runs past the end of the chunk");

    e_begin(&b, 210);
    r_stack(&b, 1, 9, 1, 0x10);
    check_bad_record(&b, "undefined parent stack id 9");
    e_begin(&b, 210);
    r_stack(&b, 0, 0, 1, 0x10);
    check_bad_record(&b, "stack id 0");
    e_begin(&b, 210);
    r_stack(&b, (uint64_t)UINT32_MAX + 1, 0, 1, 0x10);
    check_bad_record(&b, "stack id 4294967296 out of range");
    e_begin(&b, 210);
    r_stack(&b, 1, 0, 1u << 20, 0x10);
    check_bad_record(&b, "module id 1048576 out of range");
    e_begin(&b, 210);
    r_alloc(&b, 220, 0x3000, 8, 4, LP_DEVICE_HOST, false);
    check_bad_record(&b, "undefined stack id 4");
    e_begin(&b, 210);
    r_tag(&b, 220, 0x3000, 8, LP_CAT_SAVED, 0, 3, 0, 0, false, LP_DEVICE_HOST, false);
    check_bad_record(&b, "undefined string id 3");
    e_begin(&b, 210);
    r_with(&b, GP_REC_MARK, 220, 1);
    check_bad_record(&b, "undefined string id 1");
    e_begin(&b, 210);
    r_tag(&b, 220, 0x3000, 8, LP_CAT_COUNT, 0, 0, 0, 0, false, LP_DEVICE_HOST, false);
    check_bad_record(&b, "category 9 out of range");
    e_begin(&b, 210);
    r_string(&b, 0, "x");
    check_bad_record(&b, "string id 0");
    e_begin(&b, 210);
    r_module(&b, 0, 0, 0, "x", "");
    check_bad_record(&b, "module id 0");
    e_begin(&b, 210);
    r_alloc(&b, 220, 0x3000, 8, 0, 1 << 20, false);
    check_bad_record(&b, "device 1048576 out of range");
    e_begin(&b, 210);
    r_alloc(&b, 220, 0x3000, 8, 0, GP_TRACE_MAX_DEVICE + 1, false);
    check_bad_record(&b, "device 32768 out of range");

    /* Records that run past the end of the payload. */
    e_begin(&b, 210);
    e_byte(&b, GP_REC_ALLOC);
    e_var(&b, 5);
    check_bad_record(&b, "runs past the end");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_FREE | GP_FLAG_DEVICE);
    e_var(&b, 5);
    e_var(&b, 2);
    check_bad_record(&b, "runs past the end");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_STRING);
    e_var(&b, 1);
    e_var(&b, 1000); /* length over what is left */
    e_bytes(&b, "abc", 3);
    check_bad_record(&b, "runs past the end");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_META);
    e_var(&b, UINT64_MAX);
    check_bad_record(&b, "runs past the end");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_LOST);
    e_var(&b, 1);
    e_byte(&b, 0x80); /* unterminated varint at the end */
    check_bad_record(&b, "runs past the end");

    /* Varints: eleven bytes, and ten whose last byte overflows 64 bits. */
    e_begin(&b, 210);
    e_byte(&b, GP_REC_END);
    for (int i = 0; i < 10; i++)
        e_byte(&b, 0x80);
    e_byte(&b, 0x01);
    check_bad_record(&b, "varint over 10 bytes");
    e_begin(&b, 210);
    e_byte(&b, GP_REC_END);
    for (int i = 0; i < 9; i++)
        e_byte(&b, 0xFF);
    e_byte(&b, 0x02);
    check_bad_record(&b, "varint over 64 bits");
}

/* A definition made in a damaged chunk, and the events of it, are not delivered. */
static void test_damage_drops_whole_chunk(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 100);
    r_alloc(&e, 100, 0x1000, 64, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 100, 150, &e);
    e_begin(&e, 200);
    r_thread(&e, 99, "late"); /* the writer's first event-bearing chunk: no thread index */
    r_alloc(&e, 200, 0x2000, 64, 0, LP_DEVICE_HOST, false);
    e_byte(&e, 30);
    size_t off = fb_chunk(&f, 2, 200, 250, &e);
    fb_write(&f, path_in("drop.gptrace"));
    gp_trace *t = open_ok(path_in("drop.gptrace"));
    gp_event ev[4];
    assert_int_equal(read_all(t, ev, 4), 1);
    assert_int_equal(gp_trace_info_get(t)->damage_offset, off);
    assert_int_equal(gp_trace_info_get(t)->chunks, 1);
    assert_int_equal(gp_trace_thread_count(t), 1);
    gp_trace_close(t);
    fb_free(&f);
}

/* Random bytes changed in a good trace, checksums fixed up so the decoder sees them: the reader
 * ends with 0 every time and never crashes (ASan and valgrind runs of this test check memory). */
static void test_damage_fuzz(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 1000);
    r_meta(&e, "flush_interval_ns", "500");
    r_module(&e, 1, 0x400000, 0x1000, "/bin/x", "ab");
    size_t offs[4];
    offs[0] = fb_chunk(&f, 0, 1000, 1000, &e);
    for (uint32_t w = 1; w <= 3; w++) {
        e_begin(&e, 2000 + w);
        r_thread(&e, w, "worker");
        r_string(&e, 1, "op");
        r_string(&e, 2, "mod");
        r_stack(&e, 1, 0, 1, 0x10);
        r_stack(&e, 2, 1, 0, 0x20);
        r_alloc(&e, 2000 + w, 0x1000 * w, 64, 2, LP_DEVICE_HOST, false);
        r_tag(&e, 2010, 0x1000 * w, 64, LP_CAT_SAVED, 1, 2, 0, 1, true, 1, true);
        r_with(&e, GP_REC_REGION_PUSH, 2011, 2);
        r_plain(&e, GP_REC_REGION_POP, 2012);
        r_with(&e, GP_REC_LOST, 2013, 3);
        r_free(&e, 2020, 0x1000 * w, 1, true);
        r_plain(&e, GP_REC_END, 2030);
        offs[w] = fb_chunk(&f, w, 2000 + w, 2100, &e);
    }
    const char *path = path_in("fuzz.gptrace");
    fbuf m = {0};
    uint64_t x = 88172645463325252ull;
    for (int iter = 0; iter < 1500; iter++) {
        m.n = 0;
        fb_put(&m, f.data, f.n);
        int flips = 1 + iter % 4;
        size_t c = offs[iter % 4];
        uint32_t n = gp_get_u32(m.data + c + 4);
        for (int k = 0; k < flips; k++) {
            xorshift64(&x);
            size_t at = c + 12 + (x >> 8) % (GP_CHUNK_HEADER_BYTES - 12 + n);
            m.data[at] = (uint8_t)x;
        }
        fix_crc(&m, c);
        fb_write(&m, path);
        gp_trace *t = open_ok(path);
        gp_event ev[64];
        size_t got = read_all(t, ev, 64);
        assert_true(got <= 64);
        const gp_trace_info *info = gp_trace_info_get(t);
        assert_int_equal(info->events, got);
        if (info->damaged)
            assert_true(info->damage_reason[0] != '\0');
        for (size_t i = 0; i < got; i++) {
            assert_true(ev[i].thread >= 1 && ev[i].thread <= gp_trace_thread_count(t));
            assert_non_null(ev[i].op);
            assert_non_null(ev[i].name);
            assert_true((unsigned)ev[i].category < LP_CAT_COUNT);
            uint32_t id = ev[i].stack, steps = 0;
            while (id != 0 && steps++ < 100) /* every stack walks to a root */
                assert_int_equal(gp_trace_stack_frame(t, id, NULL, NULL, &id), 0);
            assert_int_equal(id, 0);
        }
        gp_trace_close(t);
    }
    fb_free(&m);
    fb_free(&f);
}

/* ---- exact time order, however late a chunk reaches the file --------------------------------- */

/* What a test expects of one event. */
typedef struct want_ev {
    gp_event_kind kind;
    uint64_t time;
    uint32_t thread;
    uint64_t addr;
} want_ev;

static void expect_events(const gp_event *ev, size_t n, const want_ev *want, size_t nwant)
{
    assert_int_equal(n, nwant);
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != want[i].kind || ev[i].time_ns != want[i].time ||
            ev[i].thread != want[i].thread || ev[i].addr != want[i].addr)
            print_error("event %zu: kind %d time %" PRIu64 " thread %u addr 0x%" PRIx64
                        "; want kind %d time %" PRIu64 " thread %u addr 0x%" PRIx64 "\n",
                        i, (int)ev[i].kind, ev[i].time_ns, ev[i].thread, ev[i].addr,
                        (int)want[i].kind, want[i].time, want[i].thread, want[i].addr);
        assert_int_equal(ev[i].kind, want[i].kind);
        assert_int_equal(ev[i].time_ns, want[i].time);
        assert_int_equal(ev[i].thread, want[i].thread);
        assert_true(ev[i].addr == want[i].addr);
    }
}

/* A thread's chunk reaches the file after a thousand chunks of another thread, long after its
 * write time and any merge window (the flush interval says 1 us): its events still leave at their
 * times. It holds the allocation of a block that the busy thread frees and allocates again (the
 * allocator's reuse of the address), so a late merge would see the free before the allocation. */
static void test_late_chunk(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "flush_interval_ns", "1000");
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    enum { NCHUNKS = 1000 };
    /* Writer 1: ALLOC at 10000 k + 100, FREE at + 200; chunk 3 also frees the late block X at
     * 30300 and allocates X again at 30400. */
    const uint64_t X = 0x7000;
    for (uint64_t k = 1; k <= NCHUNKS; k++) {
        uint64_t base = 10000 * k + 100;
        e_begin(&e, base);
        if (k == 1)
            r_thread(&e, 11, "busy");
        r_alloc(&e, base, 0x100000 + 0x100 * k, 32, 0, LP_DEVICE_HOST, false);
        r_free(&e, base + 100, 0x100000 + 0x100 * k, LP_DEVICE_HOST, false);
        if (k == 3) {
            r_free(&e, 30300, X, LP_DEVICE_HOST, false);
            r_alloc(&e, 30400, X, 64, 0, LP_DEVICE_HOST, false);
        }
        fb_chunk(&f, 1, base, base + 500, &e);
    }
    /* Writer 2, written last (at 10^10 ns): its thread allocated X at 30250, and marks 10500. */
    e_begin(&e, 10500);
    r_thread(&e, 22, "late");
    r_string(&e, 1, "late mark");
    r_with(&e, GP_REC_MARK, 10500, 1);
    r_alloc(&e, 30250, X, 64, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 10500, 10000000000ull, &e);
    fb_write(&f, path_in("late.gptrace"));

    gp_trace *t = open_ok(path_in("late.gptrace"));
    enum { MAX = 2 * NCHUNKS + 8 };
    static gp_event ev[MAX];
    size_t n = read_all(t, ev, MAX);
    assert_int_equal(n, 2 * NCHUNKS + 4);
    const want_ev head[] = {
        {GP_EV_ALLOC, 10100, 1, 0x100100}, {GP_EV_FREE, 10200, 1, 0x100100},
        {GP_EV_MARK, 10500, 2, 0},         {GP_EV_ALLOC, 20100, 1, 0x100200},
        {GP_EV_FREE, 20200, 1, 0x100200},  {GP_EV_ALLOC, 30100, 1, 0x100300},
        {GP_EV_FREE, 30200, 1, 0x100300},  {GP_EV_ALLOC, 30250, 2, X},
        {GP_EV_FREE, 30300, 1, X},         {GP_EV_ALLOC, 30400, 1, X},
        {GP_EV_ALLOC, 40100, 1, 0x100400},
    };
    expect_events(ev, sizeof head / sizeof head[0], head, sizeof head / sizeof head[0]);
    assert_string_equal(ev[2].name, "late mark");
    for (size_t i = 1; i < n; i++)
        assert_true(ev[i].time_ns >= ev[i - 1].time_ns);
    assert_int_equal(ev[n - 1].time_ns, 10000 * NCHUNKS + 200);
    assert_string_equal(gp_trace_thread_name(t, 1), "busy");
    assert_string_equal(gp_trace_thread_name(t, 2), "late");
    assert_false(gp_trace_info_get(t)->damaged);
    assert_int_equal(gp_trace_info_get(t)->chunks, NCHUNKS + 2);
    gp_trace_close(t);
    fb_free(&f);
}

/* Thread-0 chunks (META, MODULE; base time 0) anywhere in the file apply before any event: a
 * start time written after every event's chunk still sets the time origin. */
static void test_thread0_chunks_anywhere(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 5000);
    r_alloc(&e, 5000, 0x1000, 16, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 5100, 0x2000, 16, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 5000, 5200, &e);
    e_begin(&e, 0);
    r_module(&e, 1, 0x400000, 0x1000, "/bin/middle", "");
    fb_chunk(&f, 0, 0, 5300, &e);
    e_begin(&e, 5050);
    r_stack(&e, 1, 0, 1, 0x10); /* a frame in the module defined above */
    r_alloc(&e, 5050, 0x3000, 16, 1, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 5050, 5400, &e);
    e_begin(&e, 0);
    r_meta(&e, "start_monotonic_ns", "4000");
    r_meta(&e, "command", "at the end");
    fb_chunk(&f, 0, 0, 9000, &e);
    fb_write(&f, path_in("t0.gptrace"));

    gp_trace *t = open_ok(path_in("t0.gptrace"));
    gp_event ev[8];
    size_t n = read_all(t, ev, 8);
    const want_ev want[] = {
        {GP_EV_ALLOC, 1000, 1, 0x1000},
        {GP_EV_ALLOC, 1050, 2, 0x3000},
        {GP_EV_ALLOC, 1100, 1, 0x2000},
    };
    expect_events(ev, n, want, 3);
    uint32_t module;
    assert_int_equal(gp_trace_stack_frame(t, ev[1].stack, &module, NULL, NULL), 0);
    assert_int_equal(module, 1);
    assert_string_equal(gp_trace_module(t, 1)->path, "/bin/middle");
    assert_string_equal(gp_trace_meta(t, "command"), "at the end");
    assert_int_equal(gp_trace_info_get(t)->chunks, 4);
    gp_trace_close(t);
    fb_free(&f);
}

/* Equal times: the lower thread index first (threads are numbered in time order), and within a
 * thread the record order, also across two of its chunks with the same time; whatever the order
 * of the chunks in the file. */
static void test_equal_times(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    /* Writer 1 (thread 2: its first event is at 60): chunks A (60, 100, 100) and B (100, 100). */
    e_begin(&e, 60);
    r_alloc(&e, 60, 0xA0, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 100, 0xA1, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 100, 0xA2, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 60, 100, &e);
    e_begin(&e, 100);
    r_alloc(&e, 100, 0xB0, 8, 0, LP_DEVICE_HOST, false);
    r_free(&e, 100, 0xA1, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 100, 100, &e);
    /* Writer 2 (thread 1: first event at 50), written last: C (50, 100, 100, 101). */
    e_begin(&e, 50);
    r_alloc(&e, 50, 0xC0, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 100, 0xC1, 8, 0, LP_DEVICE_HOST, false);
    r_free(&e, 100, 0xC0, LP_DEVICE_HOST, false);
    r_free(&e, 101, 0xC1, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 50, 101, &e);
    fb_write(&f, path_in("ties.gptrace"));

    gp_trace *t = open_ok(path_in("ties.gptrace"));
    gp_event ev[16];
    size_t n = read_all(t, ev, 16);
    const want_ev want[] = {
        {GP_EV_ALLOC, 50, 1, 0xC0},  {GP_EV_ALLOC, 60, 2, 0xA0},  {GP_EV_ALLOC, 100, 1, 0xC1},
        {GP_EV_FREE, 100, 1, 0xC0},  {GP_EV_ALLOC, 100, 2, 0xA1}, {GP_EV_ALLOC, 100, 2, 0xA2},
        {GP_EV_ALLOC, 100, 2, 0xB0}, {GP_EV_FREE, 100, 2, 0xA1},  {GP_EV_FREE, 101, 1, 0xC1},
    };
    expect_events(ev, n, want, sizeof want / sizeof want[0]);
    gp_trace_close(t);
    fb_free(&f);
}

/* Damage after a late chunk: everything before the bad chunk in the file is delivered, in time
 * order (the late chunk too); nothing after it, not even a chunk with the earliest times. */
static void test_damage_after_late_chunk(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    e_begin(&e, 100);
    r_alloc(&e, 100, 0x100, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 150, 0x150, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 100, 160, &e);
    e_begin(&e, 200);
    r_alloc(&e, 200, 0x200, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 200, 210, &e);
    e_begin(&e, 50); /* late: writer 2's events at 50 and 175 */
    r_alloc(&e, 50, 0x50, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 175, 0x175, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 50, 100000, &e);
    e_begin(&e, 120); /* damaged by a bad checksum */
    r_alloc(&e, 120, 0x120, 8, 0, LP_DEVICE_HOST, false);
    size_t bad = fb_chunk(&f, 3, 120, 100001, &e);
    f.data[bad + 8] ^= 1;
    e_begin(&e, 10); /* after the damage: never delivered */
    r_alloc(&e, 10, 0x10, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 4, 10, 100002, &e);
    fb_write(&f, path_in("latedamage.gptrace"));

    gp_trace *t = open_ok(path_in("latedamage.gptrace"));
    gp_event ev[16];
    size_t n = read_all(t, ev, 16);
    const want_ev want[] = {
        {GP_EV_ALLOC, 50, 1, 0x50},   {GP_EV_ALLOC, 100, 2, 0x100}, {GP_EV_ALLOC, 150, 2, 0x150},
        {GP_EV_ALLOC, 175, 1, 0x175}, {GP_EV_ALLOC, 200, 2, 0x200},
    };
    expect_events(ev, n, want, sizeof want / sizeof want[0]);
    const gp_trace_info *info = gp_trace_info_get(t);
    assert_true(info->damaged);
    assert_int_equal(info->damage_offset, bad);
    assert_int_equal(info->bytes_lost, f.n - bad);
    assert_contains(info->damage_reason, "checksum");
    assert_int_equal(info->chunks, 4);
    assert_int_equal(gp_trace_thread_count(t), 2);
    gp_trace_close(t);

    /* The same with a record the scan rejects in the bad chunk (checksum right). */
    f.data[bad + 8] ^= 1;
    f.data[bad + GP_CHUNK_HEADER_BYTES] = 30; /* an unknown record type */
    fix_crc(&f, bad);
    fb_write(&f, path_in("latedamage.gptrace"));
    t = open_ok(path_in("latedamage.gptrace"));
    n = read_all(t, ev, 16);
    expect_events(ev, n, want, sizeof want / sizeof want[0]);
    assert_int_equal(gp_trace_info_get(t)->damage_offset, bad);
    assert_contains(gp_trace_info_get(t)->damage_reason, "unknown record type 30");
    gp_trace_close(t);
    fb_free(&f);
}

/* A thread index reused by a new OS thread while another thread's chunk arrives late in between:
 * each event resolves its ids with the definitions of its own OS thread. */
static void test_reuse_with_late_chunk(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    e_begin(&e, 10);
    r_thread(&e, 100, "a");
    r_string(&e, 1, "x");
    r_with(&e, GP_REC_MARK, 10, 1);
    fb_chunk(&f, 1, 10, 20, &e);
    e_begin(&e, 30);
    r_thread(&e, 200, "b"); /* a new OS thread on writer 1 */
    r_string(&e, 1, "y");
    r_with(&e, GP_REC_MARK, 40, 1);
    fb_chunk(&f, 1, 30, 45, &e);
    e_begin(&e, 35); /* late, between the two */
    r_thread(&e, 300, "c");
    r_string(&e, 1, "z");
    r_with(&e, GP_REC_MARK, 35, 1);
    fb_chunk(&f, 2, 35, 99999, &e);
    fb_write(&f, path_in("reuselate.gptrace"));
    gp_trace *t = open_ok(path_in("reuselate.gptrace"));
    gp_event ev[8];
    size_t n = read_all(t, ev, 8);
    const want_ev want[] = {
        {GP_EV_MARK, 10, 1, 0},
        {GP_EV_MARK, 35, 3, 0},
        {GP_EV_MARK, 40, 2, 0},
    };
    expect_events(ev, n, want, 3);
    assert_string_equal(ev[0].name, "x");
    assert_string_equal(ev[1].name, "z");
    assert_string_equal(ev[2].name, "y");
    assert_string_equal(gp_trace_thread_name(t, 1), "a");
    assert_string_equal(gp_trace_thread_name(t, 2), "b");
    assert_string_equal(gp_trace_thread_name(t, 3), "c");
    gp_trace_close(t);
    fb_free(&f);
}

/* A file that breaks the ordering contract (a chunk whose base time is before its thread's last
 * event, dt sums that wrap): the thread's events still leave in its record order and times never
 * go back. */
static void test_times_never_go_back(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 0);
    r_meta(&e, "start_monotonic_ns", "0");
    fb_chunk(&f, 0, 0, 0, &e);
    e_begin(&e, 500);
    r_alloc(&e, 500, 0x1, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 900, 0x2, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 500, 900, &e);
    e_begin(&e, 300); /* goes back to 300 */
    r_alloc(&e, 300, 0x3, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 950, 0x4, 8, 0, LP_DEVICE_HOST, false);
    e_byte(&e, GP_REC_ALLOC); /* dt wraps the time around to 100 */
    e_var(&e, UINT64_MAX - 849);
    e_var(&e, gp_zigzag(1));
    e_var(&e, 8);
    e_var(&e, 0);
    fb_chunk(&f, 1, 300, 950, &e);
    e_begin(&e, 400);
    r_alloc(&e, 400, 0x10, 8, 0, LP_DEVICE_HOST, false);
    r_alloc(&e, 920, 0x11, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 400, 920, &e);
    fb_write(&f, path_in("back.gptrace"));
    gp_trace *t = open_ok(path_in("back.gptrace"));
    gp_event ev[8];
    size_t n = read_all(t, ev, 8);
    const want_ev want[] = {
        /* writer 2 is thread 1: its first event is the earliest */
        {GP_EV_ALLOC, 400, 1, 0x10}, {GP_EV_ALLOC, 500, 2, 0x1},  {GP_EV_ALLOC, 900, 2, 0x2},
        {GP_EV_ALLOC, 900, 2, 0x3},  {GP_EV_ALLOC, 920, 1, 0x11}, {GP_EV_ALLOC, 950, 2, 0x4},
        {GP_EV_ALLOC, 950, 2, 0x5},
    };
    expect_events(ev, n, want, sizeof want / sizeof want[0]);
    gp_trace_close(t);
    fb_free(&f);
}

/* Random traces: W threads with random event times (many equal across threads), cut into random
 * chunks, laid out in the file in random orders that keep each thread's own order (some chunks
 * very late), thread-0 chunks anywhere. Every layout must give the same stream, sorted by (time,
 * thread, the thread's record order). Events carry (writer << 32 | sequence) as address. */
static void test_exact_any_layout(void **state)
{
    (void)state;
    enum { W = 6, PER = 400, LAYOUTS = 4, MAXCH = 64 };
    static enc e;
    static uint64_t times[W + 1][PER];
    static size_t cut[W + 1][MAXCH + 1]; /* chunk k of writer w: events [cut[k], cut[k + 1]) */
    static size_t ncut[W + 1];
    static gp_event first[W * PER + 8], ev[W * PER + 8];
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    for (int round = 0; round < 20; round++) {
        for (uint32_t w = 1; w <= W; w++) {
            uint64_t tm = 1000 + w; /* distinct first times: thread w is thread index w */
            for (size_t i = 0; i < PER; i++) {
                times[w][i] = tm;
                uint64_t r = xorshift64(&seed) % 8;
                tm += r < 3 ? 0 : (r < 6 ? 10 - (tm % 10) : xorshift64(&seed) % 200);
            }
            ncut[w] = 0;
            cut[w][ncut[w]++] = 0;
            size_t at = 0;
            while (at < PER && ncut[w] < MAXCH) {
                at += 1 + xorshift64(&seed) % (2 * PER / MAXCH * 4);
                cut[w][ncut[w]++] = at < PER ? at : PER;
            }
            cut[w][ncut[w] - 1] = PER;
        }
        size_t nev_first = 0;
        for (int layout = 0; layout < LAYOUTS; layout++) {
            fbuf f = {0};
            fb_header(&f, 1, 0);
            size_t next[W + 1];
            for (uint32_t w = 1; w <= W; w++)
                next[w] = 0;
            bool meta_done = false;
            for (;;) {
                /* Pick a writer with chunks left; layout 0 favours writer 1, others random. */
                uint32_t cand[W], nc = 0;
                for (uint32_t w = 1; w <= W; w++)
                    if (next[w] + 1 < ncut[w])
                        cand[nc++] = w;
                if (nc == 0)
                    break;
                uint32_t w = cand[layout == 0 ? 0 : xorshift64(&seed) % nc];
                size_t k = next[w]++;
                uint64_t base = times[w][cut[w][k]];
                e_begin(&e, base);
                for (size_t i = cut[w][k]; i < cut[w][k + 1]; i++) {
                    uint64_t addr = (uint64_t)w << 32 | i;
                    if (i % 3 == 2)
                        r_free(&e, times[w][i], addr, LP_DEVICE_HOST, false);
                    else
                        r_alloc(&e, times[w][i], addr, 8, 0, LP_DEVICE_HOST, false);
                }
                fb_chunk(&f, w, base, times[w][cut[w][k + 1] - 1], &e);
                if (!meta_done && xorshift64(&seed) % 16 == 0) {
                    e_begin(&e, 0);
                    r_meta(&e, "start_monotonic_ns", "0");
                    fb_chunk(&f, 0, 0, 0, &e);
                    meta_done = true;
                }
            }
            if (!meta_done) {
                e_begin(&e, 0);
                r_meta(&e, "start_monotonic_ns", "0");
                fb_chunk(&f, 0, 0, 0, &e);
            }
            fb_write(&f, path_in("layout.gptrace"));
            fb_free(&f);
            gp_trace *t = open_ok(path_in("layout.gptrace"));
            gp_event *out = layout == 0 ? first : ev;
            size_t n = read_all(t, out, W * PER + 8);
            assert_int_equal(n, W * PER);
            assert_int_equal(gp_trace_thread_count(t), W);
            gp_trace_close(t);
            uint64_t last_seq[W + 1];
            memset(last_seq, 0, sizeof last_seq);
            for (size_t i = 0; i < n; i++) {
                uint32_t w = (uint32_t)(out[i].addr >> 32);
                uint64_t seq = out[i].addr & 0xFFFFFFFFu;
                assert_int_equal(out[i].thread, w);
                assert_int_equal(out[i].time_ns, times[w][seq]);
                assert_int_equal(out[i].kind, seq % 3 == 2 ? GP_EV_FREE : GP_EV_ALLOC);
                assert_true(seq == 0 ? last_seq[w] == 0 : seq == last_seq[w] + 1);
                last_seq[w] = seq;
                if (i > 0) { /* sorted by (time, thread), the thread's order within */
                    assert_true(out[i - 1].time_ns <= out[i].time_ns);
                    if (out[i - 1].time_ns == out[i].time_ns)
                        assert_true(out[i - 1].thread <= out[i].thread);
                }
            }
            if (layout == 0) {
                nev_first = n;
                continue;
            }
            assert_int_equal(n, nev_first);
            for (size_t i = 0; i < n; i++) {
                assert_true(ev[i].addr == first[i].addr);
                assert_int_equal(ev[i].time_ns, first[i].time_ns);
            }
        }
    }
}

/* A trace still being written is read up to its size at gp_trace_open: a chunk appended after
 * that is not delivered, whatever its times. */
static void test_growing_file(void **state)
{
    (void)state;
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    e_begin(&e, 100);
    r_alloc(&e, 100, 0x100, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 1, 100, 110, &e);
    fb_write(&f, path_in("growing.gptrace"));
    gp_trace *t = open_ok(path_in("growing.gptrace"));
    size_t size_at_open = f.n;
    e_begin(&e, 50);
    r_alloc(&e, 50, 0x50, 8, 0, LP_DEVICE_HOST, false);
    fb_chunk(&f, 2, 50, 120, &e);
    fb_write(&f, path_in("growing.gptrace"));
    gp_event ev[4];
    assert_int_equal(read_all(t, ev, 4), 1);
    assert_true(ev[0].addr == 0x100);
    assert_false(gp_trace_info_get(t)->damaged);
    assert_int_equal(gp_trace_info_get(t)->file_bytes, size_at_open);
    gp_trace_close(t);
    fb_free(&f);
}

/* A long trace: `nchunks` chunks of one thread, 2000 allocations each, at 16-byte steps. Returns
 * the file offset of chunk `mark` (or 0). */
static size_t build_long(const char *path, size_t nchunks, size_t mark)
{
    static enc e;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    size_t at = 0;
    for (size_t c = 0; c < nchunks; c++) {
        uint64_t base = 1000 + c * 10000;
        e_begin(&e, base);
        for (uint64_t i = 0; i < 2000; i++)
            r_alloc(&e, base + i, 0x10000 + (c * 2000 + i) * 16, 16, 0, LP_DEVICE_HOST, true);
        size_t off = fb_chunk(&f, 1, base, base + 2000, &e);
        if (c == mark)
            at = off;
    }
    FILE *fp = fopen(path, "wb"); /* not fb_write: the tests below read it their own way */
    assert_non_null(fp);
    assert_int_equal(fwrite(f.data, 1, f.n, fp), f.n);
    assert_int_equal(fclose(fp), 0);
    fb_free(&f);
    return at;
}

/* A file changed after the scan, in a chunk the merge has not reached: with readahead as without,
 * the events before it, then the same error. (Readahead decodes at most a few thousand events
 * ahead, so chunk 40 of 50 is still unread after the first event.) */
static void test_readahead_changed_file(void **state)
{
    (void)state;
    const char *path = path_in("changed.gptrace");
    for (int ahead = 0; ahead < 2; ahead++) {
        size_t off = build_long(path, 50, 40);
        gp_trace *t = open_ok(path);
        if (ahead)
            assert_true(gp_trace_readahead(t) >= 0);
        gp_event ev;
        char err[512] = "";
        assert_int_equal(gp_trace_next(t, &ev, err, sizeof err), 1);
        int fd = open(path, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, "XXXX", 4, (off_t)off), 4); /* chunk 40's magic */
        assert_int_equal(close(fd), 0);
        size_t n = 1;
        int r;
        while ((r = gp_trace_next(t, &ev, err, sizeof err)) == 1)
            n++;
        assert_int_equal(r, -1);
        assert_int_equal(n, 40 * 2000);
        assert_contains(err, "changed while it was read: the chunk at byte");
        assert_int_equal(gp_trace_next(t, &ev, err, sizeof err), -1); /* stays failed */
        assert_contains(err, "changed while it was read");
        gp_trace_close(t);
    }
}

/* Closing a trace while readahead is decoding stops its thread (no hang; no leak under ASan). */
static void test_readahead_close_early(void **state)
{
    (void)state;
    const char *path = path_in("early.gptrace");
    build_long(path, 20, 0);
    for (size_t stop_after = 0; stop_after < 5000; stop_after += 1111) {
        gp_trace *t = open_ok(path);
        assert_true(gp_trace_readahead(t) >= 0);
        gp_event ev;
        char err[512] = "";
        for (size_t i = 0; i < stop_after; i++)
            assert_int_equal(gp_trace_next(t, &ev, err, sizeof err), 1);
        gp_trace_close(t);
    }
    expect_readahead_same(path);
}

/* A trace read from a pipe (not a regular file) gives the same events and damage report. */
static void test_pipe(void **state)
{
    (void)state;
    fbuf f = {0};
    size_t off[3];
    build_three(&f, off, NULL);
    f.n = off[2] + 20; /* inside the third chunk's header */
    const char *fifo = path_in("pipe.gptrace");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *fp = fopen(fifo, "wb");
        size_t w = fp ? fwrite(f.data, 1, f.n, fp) : 0;
        _exit(fp && w == f.n && fclose(fp) == 0 ? 0 : 1);
    }
    gp_trace *t = open_ok(fifo);
    gp_event ev[8];
    assert_int_equal(read_all(t, ev, 8), 4);
    for (size_t i = 0; i < 4; i++)
        assert_true(ev[i].addr == 0x1000 * (i / 2 + 1) + 64 * (i % 2));
    const gp_trace_info *info = gp_trace_info_get(t);
    assert_true(info->damaged);
    assert_int_equal(info->damage_offset, off[2]);
    assert_int_equal(info->bytes_lost, 20);
    assert_int_equal(info->file_bytes, f.n);
    gp_trace_close(t);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unlink(fifo);
    fb_free(&f);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_open_errors(void **state)
{
    (void)state;
    const char *missing = path_in("missing.gptrace");
    const char *msg = open_fails(missing);
    assert_contains(msg, missing);
    assert_contains(msg, strerror(ENOENT));

    fbuf f = {0};
    const char *empty = path_in("empty.gptrace");
    fb_write(&f, empty);
    msg = open_fails(empty);
    assert_contains(msg, empty);
    assert_contains(msg, "is empty");

    const char *bad = path_in("bad.gptrace");
    fb_put(&f, "NOTATRACE_______________________", 32);
    fb_write(&f, bad);
    msg = open_fails(bad);
    assert_contains(msg, bad);
    assert_contains(msg, "is not a gradprof trace (bad magic)");

    f.n = 0;
    fb_put(&f, "GPTRA", 5); /* too short for the header */
    fb_write(&f, bad);
    msg = open_fails(bad);
    assert_contains(msg, bad);
    assert_contains(msg, "is not a gradprof trace");
    f.n = 0;
    fb_put(&f, "ELF", 3);
    fb_write(&f, bad);
    assert_contains(open_fails(bad), "bad magic");

    f.n = 0;
    fb_header(&f, 2, 0);
    fb_write(&f, bad);
    msg = open_fails(bad);
    assert_contains(msg, bad);
    assert_contains(msg, "version 2.0");

    f.n = 0;
    fb_header(&f, 0, 9);
    fb_write(&f, bad);
    assert_contains(open_fails(bad), "version 0.9");

    assert_contains(open_fails(tmpdir), "directory");

    char err[64];
    gp_trace *t;
    assert_int_equal(gp_trace_open(NULL, &t, err, sizeof err), -1);
    assert_int_equal(gp_trace_open(empty, NULL, err, sizeof err), -1);
    assert_int_equal(gp_trace_open(missing, &t, NULL, 0), -1); /* no message buffer: no crash */
    gp_event ev;
    assert_int_equal(gp_trace_next(NULL, &ev, err, sizeof err), -1);
    gp_trace_close(NULL);
    assert_null(gp_trace_info_get(NULL));
    assert_null(gp_trace_meta(NULL, "command"));
    assert_int_equal(gp_trace_thread_count(NULL), 0);
    fb_free(&f);
}

static void test_header_only(void **state)
{
    (void)state;
    fbuf f = {0};
    fb_header(&f, 1, 0);
    fb_write(&f, path_in("header.gptrace"));
    gp_trace *t = open_ok(path_in("header.gptrace"));
    gp_event ev[1];
    assert_int_equal(read_all(t, ev, 1), 0);
    const gp_trace_info *info = gp_trace_info_get(t);
    assert_false(info->damaged);
    assert_int_equal(info->chunks, 0);
    assert_int_equal(info->events, 0);
    assert_int_equal(info->file_bytes, GP_FILE_HEADER_BYTES);
    assert_false(info->clean_end);
    assert_int_equal(gp_trace_thread_count(t), 0);
    assert_int_equal(gp_trace_module_count(t), 0);
    assert_int_equal(gp_trace_stack_count(t), 0);
    assert_null(gp_trace_meta(t, "command"));
    gp_trace_close(t);
    fb_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_varint),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_minor_version),
        cmocka_unit_test(test_start_time),
        cmocka_unit_test(test_merge_threads),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_thread_reuse),
        cmocka_unit_test(test_global_stacks),
        cmocka_unit_test(test_damage_truncated),
        cmocka_unit_test(test_damage_checksum),
        cmocka_unit_test(test_damage_oversized),
        cmocka_unit_test(test_damage_garbage),
        cmocka_unit_test(test_damage_bad_records),
        cmocka_unit_test(test_notes),
        cmocka_unit_test(test_damage_drops_whole_chunk),
        cmocka_unit_test(test_damage_fuzz),
        cmocka_unit_test(test_late_chunk),
        cmocka_unit_test(test_thread0_chunks_anywhere),
        cmocka_unit_test(test_equal_times),
        cmocka_unit_test(test_damage_after_late_chunk),
        cmocka_unit_test(test_reuse_with_late_chunk),
        cmocka_unit_test(test_times_never_go_back),
        cmocka_unit_test(test_exact_any_layout),
        cmocka_unit_test(test_growing_file),
        cmocka_unit_test(test_readahead_changed_file),
        cmocka_unit_test(test_readahead_close_early),
        cmocka_unit_test(test_pipe),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_header_only),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
