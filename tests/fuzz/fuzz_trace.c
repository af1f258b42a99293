/*
 * libFuzzer harness: the trace reader (gp_trace_open + gp_trace_next to the end) and every
 * accessor over what it read, on a file holding the input. Damaged and hostile files must give an
 * error or a damage report, never a crash, a leak or an allocation sized by an unchecked field.
 *
 * Inputs of even length have their chunks' CRC-32C fixed before they are written, so mutations
 * reach the record decoder instead of stopping at the checksum; odd ones are written as they are.
 * Whatever the input, events leave in time order (times never go back) and each names a thread
 * the reader counts; and a second reader of the same file with readahead (gp_trace_readahead)
 * answers every call as the first does, in lockstep: anything else aborts, so the fuzzer reports
 * it.
 */
#include "fuzz_common.h"

#include <stdbool.h>

#include "gradprof/trace.h"
#include "gradprof/trace_format.h"

/* Recomputes the checksum of every whole chunk with a good magic, in place. */
static void fix_checksums(uint8_t *d, size_t size)
{
    size_t off = 16;
    while (off + GP_CHUNK_HEADER_BYTES <= size) {
        uint8_t *h = d + off;
        if (gp_get_u32(h) != GP_CHUNK_MAGIC)
            return;
        uint32_t n = gp_get_u32(h + 4);
        if (n > GP_CHUNK_MAX_PAYLOAD || n > size - off - GP_CHUNK_HEADER_BYTES)
            return;
        uint32_t crc = gp_crc32c(0, h + 12, GP_CHUNK_HEADER_BYTES - 12);
        crc = gp_crc32c(crc, h + GP_CHUNK_HEADER_BYTES, n);
        h[8] = (uint8_t)crc;
        h[9] = (uint8_t)(crc >> 8);
        h[10] = (uint8_t)(crc >> 16);
        h[11] = (uint8_t)(crc >> 24);
        off += GP_CHUNK_HEADER_BYTES + n;
    }
}

static bool same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static bool same_event(const gp_event *a, const gp_event *b)
{
    return a->kind == b->kind && a->time_ns == b->time_ns && a->thread == b->thread &&
           a->addr == b->addr && a->size == b->size && a->device == b->device &&
           a->stack == b->stack && a->category == b->category && same_str(a->op, b->op) &&
           same_str(a->module, b->module) && same_str(a->detail, b->detail) &&
           same_str(a->name, b->name) && a->grad_enabled == b->grad_enabled &&
           a->inference == b->inference && a->count == b->count;
}

/* Whether a and b show the same modules, threads, stack frames and metadata ("command"). */
static bool same_tables(const gp_trace *a, const gp_trace *b)
{
    if (gp_trace_module_count(a) != gp_trace_module_count(b) ||
        gp_trace_thread_count(a) != gp_trace_thread_count(b) ||
        gp_trace_stack_count(a) != gp_trace_stack_count(b) ||
        !same_str(gp_trace_meta(a, "command"), gp_trace_meta(b, "command")))
        return false;
    for (uint32_t i = 1; i <= gp_trace_module_count(a); i++) {
        const gp_module *x = gp_trace_module(a, i), *y = gp_trace_module(b, i);
        if ((x == NULL) != (y == NULL) ||
            (x && (x->base != y->base || x->size != y->size || !same_str(x->path, y->path) ||
                   !same_str(x->build_id, y->build_id))))
            return false;
    }
    for (uint32_t i = 1; i <= gp_trace_thread_count(a); i++)
        if (!same_str(gp_trace_thread_name(a, i), gp_trace_thread_name(b, i)) ||
            gp_trace_thread_os_tid(a, i) != gp_trace_thread_os_tid(b, i))
            return false;
    for (uint32_t id = 1; id <= gp_trace_stack_count(a); id++) {
        uint32_t m1, m2, p1, p2;
        uint64_t o1, o2;
        if (gp_trace_stack_frame(a, id, &m1, &o1, &p1) !=
                gp_trace_stack_frame(b, id, &m2, &o2, &p2) ||
            m1 != m2 || o1 != o2 || p1 != p2)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256];
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (size % 2 == 0)
        fix_checksums(copy, size);
    int wrote = fuzz_write_file(copy, size, ".gptrace", path, sizeof path);
    free(copy);
    if (wrote != 0)
        return 0;
    char err[512], err_ahead[512];
    gp_trace *t = NULL, *ahead = NULL;
    if (gp_trace_open(path, &t, err, sizeof err) == 0) {
        if (gp_trace_open(path, &ahead, err_ahead, sizeof err_ahead) != 0)
            abort();
        gp_trace_readahead(ahead);
        gp_event ev, ev_ahead;
        uint64_t n = 0, last_time = 0;
        /* Touch every string an event points to, so a dangling one is caught. */
        size_t sink = 0;
        int r;
        while ((r = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
            if (gp_trace_next(ahead, &ev_ahead, err_ahead, sizeof err_ahead) != 1 ||
                !same_event(&ev, &ev_ahead) ||
                gp_trace_stack_count(t) != gp_trace_stack_count(ahead) ||
                gp_trace_thread_count(t) != gp_trace_thread_count(ahead))
                abort();
            if (ev.time_ns < last_time || ev.thread == 0 || ev.thread > gp_trace_thread_count(t))
                abort();
            last_time = ev.time_ns;
            if (ev.op)
                sink += strlen(ev.op);
            if (ev.module)
                sink += strlen(ev.module);
            if (ev.detail)
                sink += strlen(ev.detail);
            if (ev.name)
                sink += strlen(ev.name);
            uint32_t mod, parent;
            uint64_t off;
            uint32_t s = ev.stack, depth = 0;
            while (s && depth++ < 256 && gp_trace_stack_frame(t, s, &mod, &off, &parent) == 0)
                s = parent;
            if (++n > 1000000)
                break;
        }
        if (r != 1 && (gp_trace_next(ahead, &ev_ahead, err_ahead, sizeof err_ahead) != r ||
                       (r < 0 && strcmp(err, err_ahead) != 0)))
            abort();
        const gp_trace_info *info = gp_trace_info_get(t);
        sink += info->events;
        for (size_t i = 1; i <= gp_trace_module_count(t); i++) {
            const gp_module *m = gp_trace_module(t, (uint32_t)i);
            if (m && m->path)
                sink += strlen(m->path);
        }
        for (uint32_t i = 1; i <= gp_trace_thread_count(t); i++) {
            const char *name = gp_trace_thread_name(t, i);
            if (name)
                sink += strlen(name);
        }
        const char *cmd = gp_trace_meta(t, "command");
        if (cmd)
            sink += strlen(cmd);
        if (r != 1 && !same_tables(t, ahead))
            abort();
        (void)sink;
        gp_trace_close(t);
        gp_trace_close(ahead);
    }
    unlink(path);
    return 0;
}
