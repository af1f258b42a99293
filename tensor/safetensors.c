/*
 * Weights in the safetensors format (https://github.com/huggingface/safetensors):
 *
 *     u64 N (little-endian) | N bytes of UTF-8 JSON header | data buffer
 *
 * The header maps tensor names to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
 * (byte offsets relative to the data buffer) and may hold "__metadata__": {string: string}.
 *
 * Reading validates the whole header before anything is used: N within the file and at most
 * ST_MAX_HEADER bytes, strict JSON, known dtypes, shapes whose byte size equals end - begin, and
 * tensors that tile the data buffer exactly (sorted by offset, each begins where the previous ends,
 * the last ends at the end of the file), as the reference implementation requires. Module loading
 * is all-or-nothing: the needed data is read into a staging buffer first and copied into the
 * parameters only when everything has been read.
 *
 * Names in the file are the module's parameter names relative to the module itself, as PyTorch's
 * state_dict: loading into a module whose path is "encoder" looks for "0.weight", not
 * "encoder.0.weight".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "safetensors_internal.h"
#include "tensor_internal.h"

/* The largest header accepted (the reference implementation's limit). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define ST_BIG_ENDIAN 1
#else
#define ST_BIG_ENDIAN 0
#endif

typedef struct st_dtype {
    const char *name;
    size_t size; /* bytes per element */
} st_dtype;

/* The dtypes the format defines with whole-byte elements. Only F32 can be loaded; the others are
 * known so that extra tensors of other types (e.g. PyTorch's I64 num_batches_tracked) can be
 * validated and skipped. */
static const st_dtype st_dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
    {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
    {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
};
#define ST_F32 1

/* One tensor of the header. */
typedef struct st_entry {
    const char *name; /* in the JSON document */
    int dtype;        /* index into st_dtypes */
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    uint64_t begin, end; /* byte offsets relative to the data buffer */
    tn_tensor *param;    /* loading: the parameter it goes into (borrowed), or NULL */
    size_t staging;      /* loading: its offset in the staging buffer */
} st_entry;

/* An open file with its validated header. */
typedef struct st_file {
    const char *path;
    const char *op;
    FILE *f;
    uint64_t file_size;
    uint64_t header_len;
    uint64_t data_len;
    char *header;
    tn__json_doc *doc;
    st_entry *entries;
    size_t entries_bytes;
    size_t n;
} st_file;

static void st_close(st_file *sf)
{
    if (sf->f)
        fclose(sf->f);
    tn__free(sf->header, (size_t)sf->header_len, LP_CAT_TEMPORARY);
    tn__json_free(sf->doc);
    tn__free(sf->entries, sf->entries_bytes, LP_CAT_TEMPORARY);
    memset(sf, 0, sizeof *sf);
}

/* Reads exactly n bytes at the current position. A short read is TN_EIO (read error) or
 * TN_EFORMAT (the file ended early, i.e. it changed since its size was taken). */
static int st_read(st_file *sf, void *buf, size_t n, const char *what)
{
    if (n == 0)
        return 0;
    size_t got = fread(buf, 1, n, sf->f);
    if (got == n)
        return 0;
    if (ferror(sf->f)) {
        int e = errno;
        return tn__error(TN_EIO, "%s: error reading %s of '%s': %s", sf->op, what, sf->path,
                         strerror(e));
    }
    return tn__error(TN_EFORMAT, "%s: '%s' ended while reading %s (%zu of %zu bytes; the file "
                     "changed while it was read?)", sf->op, sf->path, what, got, n);
}

static int st_seek(st_file *sf, uint64_t pos)
{
    if (pos > (uint64_t)INT64_MAX || fseeko(sf->f, (off_t)pos, SEEK_SET) != 0) {
        int e = errno;
        return tn__error(TN_EIO, "%s: cannot seek to byte %llu of '%s': %s", sf->op,
                         (unsigned long long)pos, sf->path, strerror(e));
    }
    return 0;
}

static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int st_cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

/* Reads a non-negative JSON integer into *out; 0 or -1. */
static int st_uint(const tn__json_value *v, uint64_t *out)
{
    if (!v || v->type != TN__JSON_NUMBER || !v->is_integer || v->integer < 0)
        return -1;
    *out = (uint64_t)v->integer;
    return 0;
}

/* Whether member f's key is exactly `key` (keys may hold NUL characters from \u0000). */
static bool st_key_is(const tn__json_value *f, const char *key)
{
    return f->key_len == strlen(key) && memcmp(f->key, key, f->key_len) == 0;
}

/* Validates one tensor member of the header into e. */
static int st_parse_entry(st_file *sf, const tn__json_value *m, st_entry *e)
{
    const char *op = sf->op, *path = sf->path, *name = m->key;
    if (strlen(m->key) != m->key_len)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor name with a NUL character at header byte "
                         "%zu", op, path, m->offset);
    if (m->type != TN__JSON_OBJECT)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' is a JSON %s, expected an object with "
                         "dtype, shape and data_offsets", op, path, name,
                         tn__json_type_name(m->type));
    const tn__json_value *dtype = NULL, *shape = NULL, *offsets = NULL;
    for (const tn__json_value *f = m->first; f; f = f->next) {
        if (st_key_is(f, "dtype") && !dtype)
            dtype = f;
        else if (st_key_is(f, "shape") && !shape)
            shape = f;
        else if (st_key_is(f, "data_offsets") && !offsets)
            offsets = f;
        else
            return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has an unexpected or repeated "
                             "field '%s'", op, path, name, f->key);
    }
    if (!dtype || !shape || !offsets)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has no %s", op, path, name,
                         !dtype ? "dtype" : !shape ? "shape" : "data_offsets");

    if (dtype->type != TN__JSON_STRING)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': dtype is a JSON %s, expected a "
                         "string", op, path, name, tn__json_type_name(dtype->type));
    e->dtype = -1;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(dtype->str, st_dtypes[i].name) == 0 && strlen(dtype->str) == dtype->len)
            e->dtype = (int)i;
    if (e->dtype < 0)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has unknown dtype '%s'", op, path,
                         name, dtype->str);

    if (shape->type != TN__JSON_ARRAY)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': shape is a JSON %s, expected an "
                         "array", op, path, name, tn__json_type_name(shape->type));
    if (shape->count > TN_MAX_DIMS)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has %zu dims; at most %d are "
                         "supported", op, path, name, shape->count, TN_MAX_DIMS);
    e->ndim = (int)shape->count;
    /* numel with overflow detection; any zero dim makes it 0 whatever the others are. */
    uint64_t numel = 1;
    bool overflow = false, zero = false;
    int d = 0;
    for (const tn__json_value *s = shape->first; s; s = s->next, d++) {
        uint64_t size;
        if (st_uint(s, &size) < 0)
            return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': shape[%d] is not a "
                             "non-negative integer", op, path, name, d);
        e->shape[d] = (int64_t)size;
        if (size == 0)
            zero = true;
        else if (numel > UINT64_MAX / size)
            overflow = true;
        else
            numel *= size;
    }
    uint64_t elem = st_dtypes[e->dtype].size;
    if (zero)
        numel = 0;
    else if (numel > UINT64_MAX / elem)
        overflow = true;

    if (offsets->type != TN__JSON_ARRAY || offsets->count != 2 ||
        st_uint(offsets->first, &e->begin) < 0 || st_uint(offsets->first->next, &e->end) < 0)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': data_offsets must be an array of two "
                         "non-negative integers [begin, end]", op, path, name);
    if (e->begin > e->end || e->end > sf->data_len)
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': data_offsets [%llu, %llu] out of "
                         "range: the data buffer has %llu bytes", op, path, name,
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)sf->data_len);
    if (overflow || numel * elem != e->end - e->begin) {
        char buf[160];
        tn__shape_fmt(e->ndim, e->shape, buf, sizeof buf);
        return tn__error(TN_EFORMAT, "%s: '%s': tensor '%s': shape %s of %s needs %s%llu bytes "
                         "but data_offsets [%llu, %llu] hold %llu", op, path, name, buf,
                         st_dtypes[e->dtype].name, overflow ? "more than " : "",
                         overflow ? (unsigned long long)UINT64_MAX
                                  : (unsigned long long)(numel * elem),
                         (unsigned long long)e->begin, (unsigned long long)e->end,
                         (unsigned long long)(e->end - e->begin));
    }
    e->name = name;
    return 0;
}

/* Validates __metadata__: an object of strings. */
static int st_check_metadata(st_file *sf, const tn__json_value *m)
{
    if (m->type != TN__JSON_OBJECT)
        return tn__error(TN_EFORMAT, "%s: '%s': __metadata__ is a JSON %s, expected an object of "
                         "strings", sf->op, sf->path, tn__json_type_name(m->type));
    for (const tn__json_value *f = m->first; f; f = f->next)
        if (f->type != TN__JSON_STRING)
            return tn__error(TN_EFORMAT, "%s: '%s': __metadata__ value '%s' is a JSON %s, "
                             "expected a string", sf->op, sf->path, f->key,
                             tn__json_type_name(f->type));
    return 0;
}

/* Opens `path`, reads and validates its header. On success sf->entries holds every tensor, sorted
 * by name, and the file is positioned after the header. On failure sf is closed. */
static int st_open(st_file *sf, const char *path, const char *op)
{
    memset(sf, 0, sizeof *sf);
    sf->path = path;
    sf->op = op;
    int rc;
    sf->f = fopen(path, "rb");
    if (!sf->f) {
        int e = errno;
        return tn__error(TN_EIO, "%s: cannot open '%s': %s", op, path, strerror(e));
    }
    struct stat st;
    if (fstat(fileno(sf->f), &st) != 0) {
        int e = errno;
        rc = tn__error(TN_EIO, "%s: cannot stat '%s': %s", op, path, strerror(e));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = tn__error(TN_EIO, "%s: '%s': %s", op, path,
                       S_ISDIR(st.st_mode) ? strerror(EISDIR) : "not a regular file");
        goto fail;
    }
    sf->file_size = (uint64_t)st.st_size;
    if (sf->file_size < 8) {
        rc = tn__error(TN_EFORMAT, "%s: '%s' is %s (%llu bytes): too short for the 8-byte header "
                       "length", op, path, sf->file_size == 0 ? "empty" : "truncated",
                       (unsigned long long)sf->file_size);
        goto fail;
    }
    unsigned char len_bytes[8];
    if ((rc = st_read(sf, len_bytes, 8, "the header length")) < 0)
        goto fail;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | len_bytes[i];
    if (n > sf->file_size - 8) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': header length %llu is larger than the %llu bytes "
                       "after it (truncated or not a safetensors file)", op, path,
                       (unsigned long long)n, (unsigned long long)(sf->file_size - 8));
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': header length %llu exceeds the limit of %u bytes",
                       op, path, (unsigned long long)n, ST_MAX_HEADER);
        goto fail;
    }
    if (n < 2) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': header length %llu is too short for a JSON object",
                       op, path, (unsigned long long)n);
        goto fail;
    }
    sf->header_len = n;
    sf->data_len = sf->file_size - 8 - n;
    sf->header = tn__alloc((size_t)n, LP_CAT_TEMPORARY, op, "safetensors header");
    if (!sf->header) {
        rc = TN_ENOMEM;
        goto fail;
    }
    if ((rc = st_read(sf, sf->header, (size_t)n, "the header")) < 0)
        goto fail;
    if (sf->header[0] != '{') {
        rc = tn__error(TN_EFORMAT, "%s: '%s': the header does not start with '{' (not a "
                       "safetensors file?)", op, path);
        goto fail;
    }
    char err[256];
    rc = tn__json_parse(sf->header, (size_t)n, op, &sf->doc, err, sizeof err);
    if (rc == TN_ENOMEM)
        goto fail;
    if (rc < 0) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': invalid JSON header (offsets count from the header "
                       "start, file byte 8): %s", op, path, err);
        goto fail;
    }
    const tn__json_value *root = sf->doc->root;
    if (root->type != TN__JSON_OBJECT) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': the header is a JSON %s, expected an object", op,
                       path, tn__json_type_name(root->type));
        goto fail;
    }

    /* At most root->count entries, which the header length bounds. */
    sf->entries_bytes = (root->count ? root->count : 1) * sizeof(st_entry);
    sf->entries = tn__alloc(sf->entries_bytes, LP_CAT_TEMPORARY, op, "safetensors entries");
    if (!sf->entries) {
        rc = TN_ENOMEM;
        goto fail;
    }
    bool seen_metadata = false;
    for (const tn__json_value *m = root->first; m; m = m->next) {
        if (st_key_is(m, "__metadata__")) {
            if (seen_metadata) {
                rc = tn__error(TN_EFORMAT, "%s: '%s': __metadata__ appears twice", op, path);
                goto fail;
            }
            seen_metadata = true;
            if ((rc = st_check_metadata(sf, m)) < 0)
                goto fail;
            continue;
        }
        st_entry *e = &sf->entries[sf->n];
        memset(e, 0, sizeof *e);
        if ((rc = st_parse_entry(sf, m, e)) < 0)
            goto fail;
        sf->n++;
    }

    /* The tensors must tile the data buffer: no overlap, no gap, nothing after the last. */
    qsort(sf->entries, sf->n, sizeof(st_entry), st_cmp_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < sf->n; i++) {
        const st_entry *e = &sf->entries[i];
        if (e->begin < at) {
            const st_entry *prev = &sf->entries[i - 1];
            rc = tn__error(TN_EFORMAT, "%s: '%s': tensors '%s' [%llu, %llu) and '%s' [%llu, "
                           "%llu) overlap", op, path, prev->name,
                           (unsigned long long)prev->begin, (unsigned long long)prev->end,
                           e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
            goto fail;
        }
        if (e->begin > at) {
            rc = tn__error(TN_EFORMAT, "%s: '%s': data bytes [%llu, %llu) belong to no tensor "
                           "(before '%s')", op, path, (unsigned long long)at,
                           (unsigned long long)e->begin, e->name);
            goto fail;
        }
        at = e->end;
    }
    if (at != sf->data_len) {
        rc = tn__error(TN_EFORMAT, "%s: '%s': the data buffer has %llu bytes but its tensors end "
                       "at byte %llu", op, path, (unsigned long long)sf->data_len,
                       (unsigned long long)at);
        goto fail;
    }

    /* Names must be unique; sorted by name they also allow bsearch. */
    qsort(sf->entries, sf->n, sizeof(st_entry), st_cmp_name);
    for (size_t i = 1; i < sf->n; i++) {
        if (strcmp(sf->entries[i - 1].name, sf->entries[i].name) == 0) {
            rc = tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' appears twice in the header", op,
                           path, sf->entries[i].name);
            goto fail;
        }
    }
    return 0;

fail:
    st_close(sf);
    return rc;
}

static st_entry *st_find(st_file *sf, const char *name)
{
    st_entry key = {.name = name};
    return bsearch(&key, sf->entries, sf->n, sizeof(st_entry), st_cmp_name);
}

/* Reads entry e's data (F32, end - begin bytes) into dst, converting from little-endian. */
static int st_read_entry(st_file *sf, const st_entry *e, void *dst)
{
    int rc = st_seek(sf, 8 + sf->header_len + e->begin);
    if (rc == 0) {
        char what[160];
        snprintf(what, sizeof what, "the data of tensor '%s'", e->name);
        rc = st_read(sf, dst, (size_t)(e->end - e->begin), what);
    }
#if ST_BIG_ENDIAN
    if (rc == 0) {
        uint32_t *w = dst;
        for (size_t i = 0; i < (size_t)(e->end - e->begin) / 4; i++)
            w[i] = __builtin_bswap32(w[i]);
    }
#endif
    return rc;
}

/* The name of the module's index-th parameter relative to the module: its full name without the
 * module's own path prefix ("encoder.0.weight" -> "0.weight" for the module at "encoder"). */
static const char *st_local_name(const tn_module *m, const char *full)
{
    const char *prefix = tn_module_path(m);
    size_t n = prefix ? strlen(prefix) : 0;
    if (n > 0 && strncmp(full, prefix, n) == 0 && full[n] == '.')
        return full + n + 1;
    return full;
}

int tn_module_load_safetensors(tn_module *m, const char *path, bool allow_extra)
{
    const char *op = "load_safetensors";
    if (!m || !path)
        return tn__error(TN_EINVAL, "%s: %s is NULL", op, !m ? "module" : "path");
    st_file sf;
    int rc = st_open(&sf, path, op);
    if (rc < 0)
        return rc;
    char *staging = NULL;
    size_t staging_bytes = 0;

    /* Match every parameter to a tensor of the file. */
    int count = tn_module_param_count(m);
    for (int i = 0; i < count; i++) {
        const char *full = NULL;
        tn_tensor *p = tn_module_param(m, i, &full);
        const char *name = st_local_name(m, full);
        st_entry *e = st_find(&sf, name);
        if (!e) {
            rc = tn__error(TN_ENOTFOUND, "%s: '%s': parameter '%s' is not in the file", op, path,
                           name);
            goto done;
        }
        if (e->param) {
            rc = tn__error(TN_EINVAL, "%s: '%s': two parameters of the module are named '%s'", op,
                           path, name);
            goto done;
        }
        if (e->dtype != ST_F32) {
            rc = tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has dtype %s; only F32 is "
                           "supported", op, path, name, st_dtypes[e->dtype].name);
            goto done;
        }
        if (!tn__shape_equal(tn_ndim(p), tn_shape(p), e->ndim, e->shape)) {
            char want[160], got[160];
            tn_shape_str(p, want, sizeof want);
            tn__shape_fmt(e->ndim, e->shape, got, sizeof got);
            rc = tn__error(TN_ESHAPE, "%s: '%s': parameter '%s' has shape %s but the file's "
                           "tensor has shape %s", op, path, name, want, got);
            goto done;
        }
        if (!tn_is_contiguous(p)) {
            rc = tn__error(TN_EINVAL, "%s: '%s': parameter '%s' is not contiguous", op, path,
                           name);
            goto done;
        }
        e->param = p;
        e->staging = staging_bytes;
        staging_bytes += (size_t)(e->end - e->begin);
    }
    for (size_t i = 0; i < sf.n; i++) {
        if (!sf.entries[i].param && !allow_extra) {
            rc = tn__error(TN_EINVAL, "%s: '%s': tensor '%s' matches no parameter of the module "
                           "(allow_extra skips such tensors)", op, path, sf.entries[i].name);
            goto done;
        }
    }

    /* Read everything needed, in file order, before touching any parameter. */
    if (staging_bytes > 0) {
        staging = tn__alloc(staging_bytes, LP_CAT_TEMPORARY, op, NULL);
        if (!staging) {
            rc = TN_ENOMEM;
            goto done;
        }
    }
    qsort(sf.entries, sf.n, sizeof(st_entry), st_cmp_offset);
    for (size_t i = 0; i < sf.n; i++) {
        const st_entry *e = &sf.entries[i];
        if (e->param && (rc = st_read_entry(&sf, e, staging + e->staging)) < 0)
            goto done;
    }

    /* Commit: nothing below can fail. */
    for (size_t i = 0; i < sf.n; i++) {
        const st_entry *e = &sf.entries[i];
        if (!e->param)
            continue;
        if (e->end > e->begin)
            memcpy(tn_data(e->param), staging + e->staging, (size_t)(e->end - e->begin));
        tn__bump_version(e->param);
    }
    rc = 0;

done:
    tn__free(staging, staging_bytes, LP_CAT_TEMPORARY);
    st_close(&sf);
    return rc;
}

/* ---- reading whole files -------------------------------------------------------------------- */

int tn__safetensors_read(const char *path, lp_category category, tn__tensor_list **out)
{
    const char *op = "read_safetensors";
    if (!out || !path)
        return tn__error(TN_EINVAL, "%s: %s is NULL", op, !path ? "path" : "out");
    *out = NULL;
    st_file sf;
    int rc = st_open(&sf, path, op);
    if (rc < 0)
        return rc;
    tn__tensor_list *list = calloc(1, sizeof *list);
    if (list)
        list->tensors = calloc(sf.n ? sf.n : 1, sizeof(tn_tensor *));
    if (!list || !list->tensors) {
        free(list);
        st_close(&sf);
        return tn__error(TN_ENOMEM, "%s: '%s': out of memory", op, path);
    }
    for (size_t i = 0; i < sf.n; i++) {
        const st_entry *e = &sf.entries[i];
        if (e->dtype != ST_F32) {
            rc = tn__error(TN_EFORMAT, "%s: '%s': tensor '%s' has dtype %s; only F32 is "
                           "supported", op, path, e->name, st_dtypes[e->dtype].name);
            goto fail;
        }
        tn_tensor *t = tn_empty(e->ndim, e->shape, category);
        if (!t) {
            rc = tn_last_error();
            goto fail;
        }
        list->tensors[list->count++] = t;
        if ((rc = tn_set_name(t, e->name)) < 0)
            goto fail;
        if ((rc = st_read_entry(&sf, e, tn_data(t))) < 0)
            goto fail;
    }
    st_close(&sf);
    *out = list;
    return 0;

fail:
    st_close(&sf);
    tn__tensor_list_free(list);
    return rc < 0 ? rc : TN_EINVAL;
}

tn_tensor *tn__tensor_list_get(const tn__tensor_list *list, const char *name)
{
    if (!list || !name)
        return NULL;
    for (int i = 0; i < list->count; i++) {
        const char *n = tn_name(list->tensors[i]);
        if (n && strcmp(n, name) == 0)
            return list->tensors[i];
    }
    return NULL;
}

void tn__tensor_list_free(tn__tensor_list *list)
{
    if (!list)
        return;
    for (int i = 0; i < list->count; i++)
        tn_release(list->tensors[i]);
    free(list->tensors);
    free(list);
}

/* ---- saving --------------------------------------------------------------------------------- */

/* A byte buffer that only counts when data is NULL (the measuring pass). */
typedef struct st_buf {
    char *data;
    size_t len;
} st_buf;

static void st_put(st_buf *b, const char *s, size_t n)
{
    if (b->data)
        memcpy(b->data + b->len, s, n);
    b->len += n;
}

static void st_puts(st_buf *b, const char *s) { st_put(b, s, strlen(s)); }

static void st_put_u64(st_buf *b, uint64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    st_put(b, tmp, (size_t)n);
}

/* Writes s as a JSON string literal. */
static void st_put_json_string(st_buf *b, const char *s)
{
    st_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            st_put(b, esc, 2);
        } else if (*c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", *c);
            st_put(b, esc, 6);
        } else {
            st_put(b, (const char *)c, 1);
        }
    }
    st_put(b, "\"", 1);
}

/* The header: {"__metadata__":{"format":"pt"},"name":{"dtype":"F32","shape":[..],
 * "data_offsets":[b,e]},...} in module order, padded with spaces so that 8 + its length is a
 * multiple of 8 (the data then starts 8-aligned, as the format recommends). */
static void st_put_header(st_buf *b, const tn_module *m)
{
    st_puts(b, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t offset = 0;
    int count = tn_module_param_count(m);
    for (int i = 0; i < count; i++) {
        const char *full = NULL;
        const tn_tensor *p = tn_module_param(m, i, &full);
        uint64_t bytes = (uint64_t)tn_numel(p) * sizeof(float);
        st_puts(b, ",");
        st_put_json_string(b, st_local_name(m, full));
        st_puts(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < tn_ndim(p); d++) {
            if (d > 0)
                st_puts(b, ",");
            st_put_u64(b, (uint64_t)tn_shape(p)[d]);
        }
        st_puts(b, "],\"data_offsets\":[");
        st_put_u64(b, offset);
        st_puts(b, ",");
        st_put_u64(b, offset + bytes);
        st_puts(b, "]}");
        offset += bytes;
    }
    st_puts(b, "}");
    while (b->len % 8 != 0)
        st_puts(b, " ");
}

static int st_cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Refuses modules with two parameters of the same name, whose file could not be loaded. */
static int st_check_unique_names(const tn_module *m, const char *op, const char *path)
{
    int count = tn_module_param_count(m);
    if (count < 2)
        return 0;
    const char **names = malloc((size_t)count * sizeof *names);
    if (!names)
        return tn__error(TN_ENOMEM, "%s: '%s': out of memory", op, path);
    for (int i = 0; i < count; i++) {
        const char *full = NULL;
        tn_module_param(m, i, &full);
        names[i] = st_local_name(m, full);
    }
    qsort(names, (size_t)count, sizeof *names, st_cmp_str);
    int rc = 0;
    for (int i = 1; i < count && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = tn__error(TN_EINVAL, "%s: '%s': two parameters are named '%s'", op, path,
                           names[i]);
    free(names);
    return rc;
}

static int st_write(FILE *f, const void *data, size_t n, const char *op, const char *path)
{
    if (n > 0 && fwrite(data, 1, n, f) != n) {
        int e = errno;
        return tn__error(TN_EIO, "%s: error writing '%s': %s", op, path, strerror(e));
    }
    return 0;
}

/* Writes parameter p's elements in row-major order as little-endian F32. */
static int st_write_param(FILE *f, const tn_tensor *p, const char *op, const char *path)
{
    size_t bytes = (size_t)tn_numel(p) * sizeof(float);
    if (bytes == 0)
        return 0;
    if (tn_is_contiguous(p) && !ST_BIG_ENDIAN)
        return st_write(f, tn_data_const(p), bytes, op, path);
    float *tmp = tn__alloc(bytes, LP_CAT_TEMPORARY, op, NULL);
    if (!tmp)
        return TN_ENOMEM;
    tn_copy_to(p, tmp);
#if ST_BIG_ENDIAN
    uint32_t *w = (uint32_t *)tmp;
    for (size_t i = 0; i < bytes / 4; i++)
        w[i] = __builtin_bswap32(w[i]);
#endif
    int rc = st_write(f, tmp, bytes, op, path);
    tn__free(tmp, bytes, LP_CAT_TEMPORARY);
    return rc;
}

int tn_module_save_safetensors(const tn_module *m, const char *path)
{
    static atomic_uint tmp_counter;
    const char *op = "save_safetensors";
    if (!m || !path)
        return tn__error(TN_EINVAL, "%s: %s is NULL", op, !m ? "module" : "path");
    int rc = st_check_unique_names(m, op, path);
    if (rc < 0)
        return rc;

    /* Build the header: measure, then write, then check it with the reader's parser so that a
     * file this function writes always loads. */
    st_buf hb = {NULL, 0};
    st_put_header(&hb, m);
    size_t header_bytes = hb.len;
    hb.data = tn__alloc(header_bytes, LP_CAT_TEMPORARY, op, "safetensors header");
    if (!hb.data)
        return TN_ENOMEM;
    hb.len = 0;
    st_put_header(&hb, m);
    tn__json_doc *doc = NULL;
    char err[256];
    rc = tn__json_parse(hb.data, header_bytes, op, &doc, err, sizeof err);
    tn__json_free(doc);
    if (rc == TN_EFORMAT)
        rc = tn__error(TN_EINVAL, "%s: '%s': a parameter name is not valid UTF-8 (%s)", op, path,
                       err);
    if (rc < 0) {
        tn__free(hb.data, header_bytes, LP_CAT_TEMPORARY);
        return rc;
    }

    /* Write a temporary file next to the target, then rename it over the target (atomic on POSIX
     * file systems), so a failed save never leaves a partial file under `path`. */
    size_t tmp_size = strlen(path) + 64;
    char *tmp = malloc(tmp_size);
    FILE *f = NULL;
    if (!tmp) {
        rc = tn__error(TN_ENOMEM, "%s: '%s': out of memory", op, path);
        goto done;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, tmp_size, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int e = errno;
        rc = tn__error(TN_EIO, "%s: cannot create a temporary file next to '%s' ('%s'): %s", op,
                       path, tmp, strerror(e));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    f = fdopen(fd, "wb");
    if (!f) {
        int e = errno;
        close(fd);
        rc = tn__error(TN_EIO, "%s: cannot open '%s' for writing: %s", op, tmp, strerror(e));
        goto done;
    }
    unsigned char len_bytes[8];
    for (int i = 0; i < 8; i++)
        len_bytes[i] = (unsigned char)((uint64_t)header_bytes >> (8 * i));
    if ((rc = st_write(f, len_bytes, 8, op, path)) < 0 ||
        (rc = st_write(f, hb.data, header_bytes, op, path)) < 0)
        goto done;
    int count = tn_module_param_count(m);
    for (int i = 0; i < count; i++) {
        const char *name = NULL;
        if ((rc = st_write_param(f, tn_module_param(m, i, &name), op, path)) < 0)
            goto done;
    }
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;
        rc = tn__error(TN_EIO, "%s: error writing '%s': %s", op, path, strerror(e));
        goto done;
    }
    int closed = fclose(f);
    f = NULL;
    if (closed != 0) {
        int e = errno;
        rc = tn__error(TN_EIO, "%s: error writing '%s': %s", op, path, strerror(e));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        rc = tn__error(TN_EIO, "%s: cannot rename '%s' to '%s': %s", op, tmp, path, strerror(e));
        goto done;
    }
    free(tmp);
    tmp = NULL;
    rc = 0;

done:
    if (f)
        fclose(f);
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    tn__free(hb.data, header_bytes, LP_CAT_TEMPORARY);
    return rc;
}
