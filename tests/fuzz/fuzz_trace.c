/*
 * libFuzzer harness: the trace reader (gp_trace_open + gp_trace_next to the end) and every
 * accessor over what it read, on a file holding the input. Damaged and hostile files must give an
 * error or a damage report, never a crash, a leak or an allocation sized by an unchecked field.
 *
 * Inputs of even length have their chunks' CRC-32C fixed before they are written, so mutations
 * reach the record decoder instead of stopping at the checksum; odd ones are written as they are.
 * Whatever the input, events leave in time order (times never go back) and each names a thread
 * the reader counts: anything else aborts, so the fuzzer reports it.
 */
#include "fuzz_common.h"

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
    char err[512];
    gp_trace *t = NULL;
    if (gp_trace_open(path, &t, err, sizeof err) == 0) {
        gp_event ev;
        uint64_t n = 0, last_time = 0;
        /* Touch every string an event points to, so a dangling one is caught. */
        size_t sink = 0;
        while (gp_trace_next(t, &ev, err, sizeof err) == 1) {
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
        (void)sink;
        gp_trace_close(t);
    }
    unlink(path);
    return 0;
}
