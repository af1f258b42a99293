/*
 * pprof export: a gzipped profile.proto (github.com/google/pprof, proto/profile.proto) of one or
 * more processes' heap-profile samples (samples.h), for `go tool pprof`, Pyroscope, Parca and
 * Grafana. Written by hand: the protobuf wire format needs varints and length-delimited fields
 * only, and zlib does the gzip.
 *
 * What the profile holds:
 *   sample_type   alloc_objects/count, alloc_space/bytes, inuse_objects/count, inuse_space/bytes
 *                 (Go's heap profiles; inuse_* at each device's peak, not at the end);
 *                 default_sample_type inuse_space; period_type space/bytes, period 1 (every
 *                 allocation is recorded, nothing is sampled)
 *   sample        one per (stack, device, category, op, module, grad mode) with a value not 0:
 *                 its locations innermost first, string labels category, op and module (when
 *                 not empty), device ("host", "cuda:0"), grad ("on"/"off", when known), and for
 *                 a job pid and, when the trace says, rank, local_rank, world_size
 *   location      one per (process, module, offset): the address is the module's recorded base
 *                 + offset, the mapping its module's, the lines the function and the line (and,
 *                 for inlined code, the function it was inlined into)
 *   function      one per (name, file)
 *   mapping       one per (process, module): base, size, path, build-id; has_functions,
 *                 has_filenames and has_line_numbers set, since the frames are symbolized
 *                 already (pprof then leaves them alone)
 *   time_nanos    the first process's start time ("start_time" metadata), duration_nanos the
 *                 longest trace; comments say what inuse means
 * A sample without a stack (Python is recorded without by default) gets locations made of its
 * labels, as the folded export's paths: its op, under its module, under its category, each a
 * function of that name without a mapping, so that pprof's tables and flame graphs show where
 * the memory is. Deterministic: the same traces give the same bytes (gzip without a name or a
 * time).
 */
#define _GNU_SOURCE /* timegm */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "hashmap.h"
#include "render.h"
#include "render_common.h"
#include "samples.h"

/* ---- protobuf wire format ------------------------------------------------------------------- */

typedef struct pb {
    uint8_t *d;
    size_t n, cap;
    bool oom;
} pb;

static void pb_put(pb *b, const void *src, size_t n)
{
    if (b->oom || n == 0) /* n == 0: src may be NULL (an empty field, as no mappings) */
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *d = realloc(b->d, cap);
        if (!d) {
            b->oom = true;
            return;
        }
        b->d = d;
        b->cap = cap;
    }
    memcpy(b->d + b->n, src, n);
    b->n += n;
}

static void pb_varint(pb *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    pb_put(b, tmp, n);
}

enum { WIRE_VARINT = 0, WIRE_LEN = 2 };

/* An integer field (uint64, or int64 as two's complement); 0 is the default and is left out. */
static void pb_uint(pb *b, int field, uint64_t v)
{
    if (!v)
        return;
    pb_varint(b, (uint64_t)field << 3 | WIRE_VARINT);
    pb_varint(b, v);
}

static void pb_len(pb *b, int field, const void *data, size_t n)
{
    pb_varint(b, (uint64_t)field << 3 | WIRE_LEN);
    pb_varint(b, n);
    pb_put(b, data, n);
}

/* A submessage built in `sub` as field `field` of b; sub is emptied for reuse. */
static void pb_message(pb *b, int field, pb *sub)
{
    if (sub->oom)
        b->oom = true;
    pb_len(b, field, sub->d, sub->n);
    sub->n = 0;
}

/* ---- the string table ----------------------------------------------------------------------- */

typedef struct strtab {
    char **s;
    size_t n, cap;
    gp_map map; /* (hash, length, salt) -> index; a hash collision takes the next salt */
    bool oom;
} strtab;

static uint64_t str_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The index of s in the table, added if new; "" and NULL are index 0. */
static uint64_t str_id(strtab *t, const char *s)
{
    if (!s || !*s)
        return 0;
    size_t n = strlen(s);
    uint64_t h = str_hash(s, n), salt = 0;
    for (struct gp_map_slot *slot; (slot = gp__map_find(&t->map, h, n, salt)); salt++)
        if (strcmp(t->s[slot->v], s) == 0)
            return slot->v;
    char *copy = strdup(s);
    if (!copy ||
        (t->n == t->cap && !(t->s = reallocarray(t->s, t->cap = t->cap * 2 + 64, sizeof *t->s)))) {
        free(copy);
        t->oom = true;
        return 0;
    }
    if (!gp__map_put(&t->map, h, n, salt, (uint32_t)t->n)) {
        free(copy);
        t->oom = true;
        return 0;
    }
    t->s[t->n] = copy;
    return t->n++;
}

/* ---- the profile ---------------------------------------------------------------------------- */

typedef struct builder {
    strtab strings;
    pb samples, mappings, locations, functions; /* repeated fields, each encoded with its key */
    pb msg, sub;                                /* scratch */
    gp_map function_ids;                        /* (name, file, 0) -> id */
    gp_map location_ids;                        /* (process, module, offset) -> id */
    gp_map mapping_ids;                         /* (process, module, 0) -> id */
    uint32_t n_functions, n_locations, n_mappings;
    bool oom;
} builder;

static uint64_t function_id(builder *b, const char *name, const char *file)
{
    uint64_t name_id = str_id(&b->strings, name), file_id = str_id(&b->strings, file);
    struct gp_map_slot *slot = gp__map_find(&b->function_ids, name_id, file_id, 0);
    if (slot)
        return slot->v;
    uint32_t id = ++b->n_functions;
    if (!gp__map_put(&b->function_ids, name_id, file_id, 0, id))
        b->oom = true;
    pb_uint(&b->msg, 1, id);
    pb_uint(&b->msg, 2, name_id);
    pb_uint(&b->msg, 3, name_id);
    pb_uint(&b->msg, 4, file_id);
    pb_message(&b->functions, 5, &b->msg);
    return id;
}

static uint64_t mapping_id(builder *b, size_t proc, gp_profile *p, uint32_t module)
{
    const gp_module *m = module ? gp_trace_module(p->trace, module) : NULL;
    if (!m)
        return 0;
    struct gp_map_slot *slot = gp__map_find(&b->mapping_ids, proc, module, 0);
    if (slot)
        return slot->v;
    uint32_t id = ++b->n_mappings;
    if (!gp__map_put(&b->mapping_ids, proc, module, 0, id))
        b->oom = true;
    pb_uint(&b->msg, 1, id);
    pb_uint(&b->msg, 2, m->base);
    pb_uint(&b->msg, 3, m->base + m->size);
    pb_uint(&b->msg, 5, str_id(&b->strings, m->path));
    pb_uint(&b->msg, 6, str_id(&b->strings, m->build_id));
    pb_uint(&b->msg, 7, 1); /* has_functions, has_filenames, has_line_numbers */
    pb_uint(&b->msg, 8, 1);
    pb_uint(&b->msg, 9, 1);
    pb_message(&b->mappings, 3, &b->msg);
    return id;
}

static uint64_t location_id(builder *b, size_t proc, gp_profile *p, uint32_t module,
                            uint64_t offset, const gp_symbol *sym)
{
    struct gp_map_slot *slot = gp__map_find(&b->location_ids, proc, module, offset);
    if (slot)
        return slot->v;
    uint32_t id = ++b->n_locations;
    if (!gp__map_put(&b->location_ids, proc, module, offset, id))
        b->oom = true;
    uint64_t fn = function_id(b, sym->function, sym->file);
    uint64_t inl = sym->inlined_into ? function_id(b, sym->inlined_into, sym->file) : 0;
    uint64_t map = mapping_id(b, proc, p, module);
    const gp_module *m = module ? gp_trace_module(p->trace, module) : NULL;
    pb_uint(&b->msg, 1, id);
    pb_uint(&b->msg, 2, map);
    pb_uint(&b->msg, 3, (m ? m->base : 0) + offset);
    pb_uint(&b->sub, 1, fn);
    pb_uint(&b->sub, 2, sym->line > 0 ? (uint64_t)sym->line : 0);
    pb_message(&b->msg, 4, &b->sub);
    if (inl) { /* the function the code was inlined into, as the caller line */
        pb_uint(&b->sub, 1, inl);
        pb_message(&b->msg, 4, &b->sub);
    }
    pb_message(&b->locations, 4, &b->msg);
    return id;
}

/* The location that stands for a label in a sample without a stack (see the top): a function
 * named `name`, no mapping, no address; one per name for every process. */
static uint64_t label_location_id(builder *b, const char *name)
{
    uint64_t name_id = str_id(&b->strings, name);
    struct gp_map_slot *slot = gp__map_find(&b->location_ids, UINT64_MAX, 0, name_id);
    if (slot)
        return slot->v;
    uint32_t id = ++b->n_locations;
    if (!gp__map_put(&b->location_ids, UINT64_MAX, 0, name_id, id))
        b->oom = true;
    uint64_t fn = function_id(b, name, "");
    pb_uint(&b->msg, 1, id);
    pb_uint(&b->sub, 1, fn);
    pb_message(&b->msg, 4, &b->sub);
    pb_message(&b->locations, 4, &b->msg);
    return id;
}

static void label(builder *b, pb *sample, const char *key, const char *value)
{
    if (!value || !*value)
        return;
    pb_uint(&b->sub, 1, str_id(&b->strings, key));
    pb_uint(&b->sub, 2, str_id(&b->strings, value));
    pb_message(sample, 3, &b->sub);
}

enum { MAX_FRAMES = 512 };

/* The samples of one process. */
static void process_samples(builder *b, size_t proc, const gp_render_process *rp, bool job)
{
    gp_profile *p = rp->p;
    const gp_samples *ss = rp->samples;
    const gp_symbol *syms[MAX_FRAMES];
    uint32_t modules[MAX_FRAMES];
    uint64_t offsets[MAX_FRAMES];
    char pid[32], dev[32];
    snprintf(pid, sizeof pid, "%ld", rp->pid);
    pb ids = {0}, values = {0};
    for (size_t i = 0; ss && i < ss->n; i++) {
        const gp_sample *s = &ss->items[i];
        if (!s->alloc_objects && !s->inuse_objects)
            continue;
        size_t n = gp_stack_symbols(p, s->stack, syms, modules, offsets, MAX_FRAMES);
        for (size_t f = 0; f < n; f++)
            pb_varint(&ids, location_id(b, proc, p, modules[f], offsets[f], syms[f]));
        if (n == 0) { /* its tag's frames, then its category (innermost first) */
            const char *tag[2];
            for (size_t k = gp__tag_frames(s->module, s->op, tag); k-- > 0;)
                pb_varint(&ids, label_location_id(b, tag[k]));
            pb_varint(&ids, label_location_id(b, lp_category_name(s->category)));
        }
        uint64_t v[4] = {s->alloc_objects, s->alloc_space, s->inuse_objects, s->inuse_space};
        for (int k = 0; k < 4; k++)
            pb_varint(&values, v[k]);
        pb sample = {0};
        if (ids.n)
            pb_len(&sample, 1, ids.d, ids.n);
        pb_len(&sample, 2, values.d, values.n);
        ids.n = values.n = 0;
        label(b, &sample, "category", lp_category_name(s->category));
        label(b, &sample, "op", s->op);
        label(b, &sample, "module", s->module);
        label(b, &sample, "device", gp__device_name(s->device, dev, sizeof dev));
        label(b, &sample, "grad", s->grad);
        if (job)
            label(b, &sample, "pid", pid);
        label(b, &sample, "rank", rp->rank);
        label(b, &sample, "local_rank", rp->local_rank);
        label(b, &sample, "world_size", rp->world_size);
        pb_message(&b->samples, 2, &sample);
        free(sample.d);
    }
    if (ids.oom || values.oom)
        b->oom = true;
    free(ids.d);
    free(values.d);
}

static void value_type(builder *b, pb *out, int field, const char *type, const char *unit)
{
    pb_uint(&b->sub, 1, str_id(&b->strings, type));
    pb_uint(&b->sub, 2, str_id(&b->strings, unit));
    pb_message(out, field, &b->sub);
}

/* The trace's "start_time" metadata (2026-01-02T03:04:05Z) in ns since the epoch; 0 if none. */
static uint64_t start_time_ns(const gp_profile *p)
{
    const char *s = p->trace ? gp_trace_meta(p->trace, "start_time") : NULL;
    struct tm tm = {0};
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm) : NULL;
    if (!end || *end)
        return 0;
    time_t t = timegm(&tm);
    return t > 0 ? (uint64_t)t * 1000000000ull : 0;
}

/* Writes data gzipped to out; 0 or -1. */
static int write_gzip(FILE *out, const uint8_t *data, size_t n)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return -1;
    uint8_t buf[65536];
    z.next_in = (Bytef *)data;
    int rc = 0, zrc;
    do {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        z.avail_in = chunk;
        n -= chunk;
        int flush = n ? Z_NO_FLUSH : Z_FINISH;
        do {
            z.next_out = buf;
            z.avail_out = sizeof buf;
            zrc = deflate(&z, flush);
            size_t have = sizeof buf - z.avail_out;
            if (zrc == Z_STREAM_ERROR || (have && fwrite(buf, 1, have, out) != have))
                rc = -1;
        } while (rc == 0 && z.avail_out == 0);
    } while (rc == 0 && n);
    if (rc == 0 && zrc != Z_STREAM_END)
        rc = -1;
    deflateEnd(&z);
    return rc;
}

int gp_render_pprof(FILE *out, const gp_render_process *procs, size_t n)
{
    builder b = {0};
    pb prof = {0};
    int rc = -1;
    /* The string table starts with "" (index 0); then the fixed strings, so that every profile
     * starts the same way. */
    if ((b.strings.s = malloc(64 * sizeof *b.strings.s)) && (b.strings.s[0] = strdup(""))) {
        b.strings.cap = 64;
        b.strings.n = 1;
    } else {
        b.strings.oom = true;
    }
    const char *types[4][2] = {{"alloc_objects", "count"},
                               {"alloc_space", "bytes"},
                               {"inuse_objects", "count"},
                               {"inuse_space", "bytes"}};
    for (int k = 0; k < 4; k++)
        value_type(&b, &prof, 1, types[k][0], types[k][1]);
    uint64_t duration = 0;
    for (size_t i = 0; i < n; i++) {
        process_samples(&b, i, &procs[i], n > 1);
        if (procs[i].p->duration_ns > duration)
            duration = procs[i].p->duration_ns;
    }
    uint64_t comments[2] = {
        str_id(&b.strings, "gradprof report --format pprof: every allocation, not sampled"),
        str_id(&b.strings, "inuse_objects, inuse_space: live at each device's peak instant, "
                           "not at the end (filter one device: -tagfocus=device=host)")};
    uint64_t default_type = str_id(&b.strings, "inuse_space");
    uint64_t space = str_id(&b.strings, "space"), bytes = str_id(&b.strings, "bytes");
    pb_put(&prof, b.samples.d, b.samples.n);
    pb_put(&prof, b.mappings.d, b.mappings.n);
    pb_put(&prof, b.locations.d, b.locations.n);
    pb_put(&prof, b.functions.d, b.functions.n);
    for (size_t i = 0; i < b.strings.n; i++)
        pb_len(&prof, 6, b.strings.s[i], strlen(b.strings.s[i]));
    pb_uint(&prof, 9, n ? start_time_ns(procs[0].p) : 0);
    pb_uint(&prof, 10, duration);
    pb_uint(&b.sub, 1, space);
    pb_uint(&b.sub, 2, bytes);
    pb_message(&prof, 11, &b.sub);
    pb_uint(&prof, 12, 1);
    for (int k = 0; k < 2; k++)
        pb_uint(&prof, 13, comments[k]);
    pb_uint(&prof, 14, default_type);
    bool oom = b.oom || b.strings.oom || prof.oom || b.samples.oom || b.mappings.oom ||
               b.locations.oom || b.functions.oom || b.msg.oom || b.sub.oom;
    if (!oom)
        rc = write_gzip(out, prof.d, prof.n);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    for (size_t i = 0; i < b.strings.n; i++)
        free(b.strings.s[i]);
    free(b.strings.s);
    gp__map_free(&b.strings.map);
    gp__map_free(&b.function_ids);
    gp__map_free(&b.location_ids);
    gp__map_free(&b.mapping_ids);
    free(b.samples.d);
    free(b.mappings.d);
    free(b.locations.d);
    free(b.functions.d);
    free(b.msg.d);
    free(b.sub.d);
    free(prof.d);
    return rc;
}
