#include "trace_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradprof/trace_format.h"

#define TB_THREADS 16
#define TB_CHUNK 768
#define TB_START 1000000000ull

typedef struct tb_thread_state {
    uint8_t buf[TB_CHUNK + 512];
    size_t len;
    uint64_t base, last_time, last_addr;
    char strings[256][64];
    int n_strings;
    int n_stacks;
    uint32_t frame_parent[1024], frame_module[1024];
    uint64_t frame_offset[1024];
    bool named;
} tb_thread_state;

struct tb {
    FILE *f;
    uint32_t cur;
    uint64_t now;
    tb_thread_state t[TB_THREADS];
};

static void tb_write_chunk(tb *b, uint32_t thread, uint64_t base, const uint8_t *p, size_t n)
{
    uint8_t h[GP_CHUNK_HEADER_BYTES];
    gp_put_u32(h, GP_CHUNK_MAGIC);
    gp_put_u32(h + 4, (uint32_t)n);
    gp_put_u32(h + 12, thread);
    gp_put_u64(h + 16, base);
    gp_put_u64(h + 24, base ? b->now + TB_START : 0);
    gp_put_u32(h + 8, gp_crc32c(gp_crc32c(0, h + 12, 20), p, n));
    fwrite(h, 1, sizeof h, b->f);
    fwrite(p, 1, n, b->f);
}

static void tb_flush(tb *b, uint32_t thread)
{
    tb_thread_state *t = &b->t[thread];
    if (t->len)
        tb_write_chunk(b, thread, t->base, t->buf, t->len);
    t->len = 0;
}

static size_t tb_put_str(uint8_t *p, const char *s)
{
    size_t n = strlen(s), k = gp_put_varint(p, n);
    memcpy(p + k, s, n);
    return k + n;
}

void tb_meta(tb *b, const char *key, const char *value)
{
    uint8_t p[1024];
    size_t n = 0;
    p[n++] = GP_REC_META;
    n += tb_put_str(p + n, key);
    n += tb_put_str(p + n, value);
    tb_write_chunk(b, 0, 0, p, n);
}

tb *tb_open(const char *path, const char *command)
{
    tb *b = calloc(1, sizeof *b);
    if (!b || !(b->f = fopen(path, "wb"))) {
        free(b);
        return NULL;
    }
    uint8_t header[GP_FILE_HEADER_BYTES] = {0};
    memcpy(header, GP_FILE_MAGIC, 8);
    header[8] = GP_VERSION_MAJOR;
    header[10] = GP_VERSION_MINOR;
    fwrite(header, 1, sizeof header, b->f);
    tb_meta(b, "command", command);
    tb_meta(b, "pid", "4242");
    tb_meta(b, "host", "testhost");
    tb_meta(b, "start_time", "2026-01-01T00:00:00Z");
    tb_meta(b, "start_monotonic_ns", "1000000000");
    tb_meta(b, "flush_interval_ns", "100000000");
    tb_meta(b, "mode", "preload");
    tb_meta(b, "gradprof_version", "test");
    b->cur = 1;
    return b;
}

void tb_module(tb *b, uint32_t id, uint64_t base, uint64_t size, const char *path,
               const char *build_id)
{
    uint8_t p[1024];
    size_t n = 0;
    p[n++] = GP_REC_MODULE;
    n += gp_put_varint(p + n, id);
    n += gp_put_varint(p + n, base);
    n += gp_put_varint(p + n, size);
    n += tb_put_str(p + n, path);
    n += tb_put_str(p + n, build_id);
    tb_write_chunk(b, 0, 0, p, n);
}

/* Room for one record in the current thread's chunk; starts a chunk if needed. */
static uint8_t *tb_room(tb *b)
{
    tb_thread_state *t = &b->t[b->cur];
    if (t->len > TB_CHUNK)
        tb_flush(b, b->cur);
    if (t->len == 0) {
        t->base = b->now + TB_START;
        t->last_time = t->base;
        t->last_addr = 0;
    }
    return t->buf + t->len;
}

void tb_thread(tb *b, uint32_t thread, const char *name)
{
    b->cur = thread;
    tb_thread_state *t = &b->t[thread];
    if (t->named)
        return;
    t->named = true;
    uint8_t *p = tb_room(b), *q = p;
    *q++ = GP_REC_THREAD;
    q += gp_put_varint(q, 1000 + thread);
    q += tb_put_str(q, name);
    t->len += (size_t)(q - p);
}

void tb_at(tb *b, uint64_t ns)
{
    /* Everything written so far was written "now": flush threads whose data is older than the
     * flush bound so the file honours the format's ordering contract. */
    b->now = ns;
    for (uint32_t i = 1; i < TB_THREADS; i++)
        if (b->t[i].len && b->t[i].base + 50000000ull < ns + TB_START)
            tb_flush(b, i);
}

static uint32_t tb_string(tb *b, const char *s)
{
    if (!s || !*s)
        return 0;
    tb_thread_state *t = &b->t[b->cur];
    for (int i = 0; i < t->n_strings; i++)
        if (!strcmp(t->strings[i], s))
            return (uint32_t)i + 1;
    snprintf(t->strings[t->n_strings], 64, "%s", s);
    uint32_t id = (uint32_t)++t->n_strings;
    uint8_t *p = tb_room(b), *q = p;
    *q++ = GP_REC_STRING;
    q += gp_put_varint(q, id);
    q += tb_put_str(q, s);
    t->len += (size_t)(q - p);
    return id;
}

uint32_t tb_stack(tb *b, int n, const uint32_t *modules, const uint64_t *offsets)
{
    tb_thread_state *t = &b->t[b->cur];
    uint32_t parent = 0;
    for (int i = n - 1; i >= 0; i--) {
        uint32_t found = 0;
        for (int s = 0; s < t->n_stacks && !found; s++)
            if (t->frame_parent[s] == parent && t->frame_module[s] == modules[i] &&
                t->frame_offset[s] == offsets[i])
                found = (uint32_t)s + 1;
        if (!found) {
            int s = t->n_stacks++;
            t->frame_parent[s] = parent;
            t->frame_module[s] = modules[i];
            t->frame_offset[s] = offsets[i];
            found = (uint32_t)s + 1;
            uint8_t *p = tb_room(b), *q = p;
            *q++ = GP_REC_STACK;
            q += gp_put_varint(q, found);
            q += gp_put_varint(q, parent);
            q += gp_put_varint(q, modules[i]);
            q += gp_put_varint(q, offsets[i]);
            t->len += (size_t)(q - p);
        }
        parent = found;
    }
    return parent;
}

/* Writes type, dt; returns the position after them. */
static uint8_t *tb_begin(tb *b, uint8_t type, uint8_t **type_at)
{
    tb_thread_state *t = &b->t[b->cur];
    uint8_t *p = tb_room(b);
    *type_at = p;
    *p++ = type;
    uint64_t now = b->now + TB_START;
    p += gp_put_varint(p, now - t->last_time);
    t->last_time = now;
    return p;
}

static uint8_t *tb_addr(tb *b, uint8_t *p, uint8_t *type_at, uint64_t addr, int32_t device)
{
    tb_thread_state *t = &b->t[b->cur];
    p += gp_put_varint(p, gp_zigzag((int64_t)(addr - t->last_addr)));
    t->last_addr = addr;
    if (device != LP_DEVICE_HOST) {
        *type_at |= GP_FLAG_DEVICE;
        p += gp_put_varint(p, (uint64_t)device + 1);
    }
    return p;
}

static void tb_commit(tb *b, uint8_t *end)
{
    tb_thread_state *t = &b->t[b->cur];
    t->len = (size_t)(end - t->buf);
}

void tb_alloc_dev(tb *b, uint64_t addr, uint64_t size, uint32_t stack, int32_t device)
{
    uint8_t *type_at, *p = tb_begin(b, GP_REC_ALLOC, &type_at);
    p = tb_addr(b, p, type_at, addr, device);
    p += gp_put_varint(p, size);
    p += gp_put_varint(p, stack);
    tb_commit(b, p);
}

void tb_alloc(tb *b, uint64_t addr, uint64_t size, uint32_t stack)
{
    tb_alloc_dev(b, addr, size, stack, LP_DEVICE_HOST);
}

void tb_free_dev(tb *b, uint64_t addr, int32_t device)
{
    uint8_t *type_at, *p = tb_begin(b, GP_REC_FREE, &type_at);
    tb_commit(b, tb_addr(b, p, type_at, addr, device));
}

void tb_free(tb *b, uint64_t addr) { tb_free_dev(b, addr, LP_DEVICE_HOST); }

void tb_tag(tb *b, uint64_t addr, uint64_t size, lp_category cat, const char *op,
            const char *module, const char *detail, bool grad, uint32_t stack)
{
    uint32_t o = tb_string(b, op), m = tb_string(b, module), d = tb_string(b, detail);
    uint8_t *type_at, *p = tb_begin(b, GP_REC_TAG, &type_at);
    if (grad)
        *type_at |= GP_FLAG_GRAD;
    p = tb_addr(b, p, type_at, addr, LP_DEVICE_HOST);
    p += gp_put_varint(p, size);
    p += gp_put_varint(p, (uint64_t)cat);
    p += gp_put_varint(p, o);
    p += gp_put_varint(p, m);
    p += gp_put_varint(p, d);
    p += gp_put_varint(p, stack);
    tb_commit(b, p);
}

static void region_push(tb *b, const char *name, uint8_t flags)
{
    uint32_t s = tb_string(b, name);
    uint8_t *type_at, *p = tb_begin(b, GP_REC_REGION_PUSH, &type_at);
    *type_at |= flags;
    p += gp_put_varint(p, s);
    tb_commit(b, p);
}

void tb_region_push(tb *b, const char *name)
{
    region_push(b, name, 0);
}
void tb_module_push(tb *b, const char *path)
{
    region_push(b, path, GP_FLAG_MODULE);
}

void tb_region_pop(tb *b)
{
    uint8_t *type_at;
    tb_commit(b, tb_begin(b, GP_REC_REGION_POP, &type_at));
}

void tb_mark(tb *b, const char *name)
{
    uint32_t s = tb_string(b, name);
    uint8_t *type_at, *p = tb_begin(b, GP_REC_MARK, &type_at);
    p += gp_put_varint(p, s);
    tb_commit(b, p);
}

void tb_note(tb *b, const char *key, const char *value)
{
    uint32_t k = tb_string(b, key);
    uint8_t *type_at, *p = tb_begin(b, GP_REC_NOTE, &type_at);
    p += gp_put_varint(p, k);
    p += tb_put_str(p, value);
    tb_commit(b, p);
}

void tb_grad_mode(tb *b, bool grad, bool inference)
{
    uint8_t *type_at, *p = tb_begin(b, GP_REC_GRAD_MODE, &type_at);
    *type_at |= (grad ? GP_FLAG_GRAD : 0) | (inference ? GP_FLAG_INFERENCE : 0);
    tb_commit(b, p);
}

void tb_end(tb *b)
{
    uint8_t *type_at;
    tb_commit(b, tb_begin(b, GP_REC_END, &type_at));
}

int tb_close(tb *b)
{
    for (uint32_t i = 1; i < TB_THREADS; i++)
        tb_flush(b, i);
    int rc = fclose(b->f) == 0 ? 0 : -1;
    free(b);
    return rc;
}
