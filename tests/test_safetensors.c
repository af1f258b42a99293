/*
 * Tests of safetensors I/O (tensor/safetensors.c) and the JSON parser under it (tensor/json.c):
 * round trips, every malformed-file path (a clear error that names the file, parameters left
 * untouched), atomic saves, and the parser's strictness and error offsets.
 *
 * The model is Sequential(Linear(4, 8), ReLU(), Linear(8, 3)): parameters 0.weight [8,4],
 * 0.bias [8], 2.weight [3,8], 2.bias [3] (268 bytes of F32). Malformed files are written byte by
 * byte into a directory made with mkdtemp.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gradprof/tensor.h"
#include "json.h"
#include "safetensors_internal.h"

static char g_dir[256];

/* ---- helpers -------------------------------------------------------------------------------- */

static void path_in_dir(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", g_dir, name);
}

static tn_module *make_mlp(uint64_t seed)
{
    tn_manual_seed(seed);
    tn_module *seq = tn_sequential_new();
    assert_non_null(seq);
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(4, 8, true)), 0);
    assert_int_equal(tn_sequential_append(seq, tn_relu_new()), 0);
    assert_int_equal(tn_sequential_append(seq, tn_linear_new(8, 3, true)), 0);
    assert_int_equal(tn_module_param_count(seq), 4);
    return seq;
}

/* The values and versions of every parameter, to check a failed load changed nothing. */
typedef struct snapshot {
    int count;
    float *values[8];
    int64_t numel[8];
    uint64_t version[8];
} snapshot;

static void snapshot_take(const tn_module *m, snapshot *s)
{
    s->count = tn_module_param_count(m);
    assert_true(s->count <= 8);
    for (int i = 0; i < s->count; i++) {
        tn_tensor *p = tn_module_param(m, i, NULL);
        s->numel[i] = tn_numel(p);
        s->values[i] = malloc((size_t)s->numel[i] * sizeof(float));
        assert_non_null(s->values[i]);
        tn_copy_to(p, s->values[i]);
        s->version[i] = tn_version(p);
    }
}

/* Asserts m's parameters are bit-identical to the snapshot and their versions unchanged. */
static void snapshot_check_unchanged(const tn_module *m, const snapshot *s)
{
    assert_int_equal(tn_module_param_count(m), s->count);
    for (int i = 0; i < s->count; i++) {
        const char *name = NULL;
        tn_tensor *p = tn_module_param(m, i, &name);
        float *now = malloc((size_t)s->numel[i] * sizeof(float));
        assert_non_null(now);
        tn_copy_to(p, now);
        if (memcmp(now, s->values[i], (size_t)s->numel[i] * sizeof(float)) != 0)
            fail_msg("parameter '%s' changed by a failed load", name);
        free(now);
        assert_int_equal(tn_version(p), s->version[i]);
    }
}

static void snapshot_free(snapshot *s)
{
    for (int i = 0; i < s->count; i++)
        free(s->values[i]);
}

/* Asserts that the parameters of a and b (same architecture, maybe different names) hold the
 * same bytes. */
static void assert_params_equal(const tn_module *a, const tn_module *b)
{
    int n = tn_module_param_count(a);
    assert_int_equal(n, tn_module_param_count(b));
    for (int i = 0; i < n; i++) {
        const char *na = NULL, *nb = NULL;
        tn_tensor *pa = tn_module_param(a, i, &na);
        tn_tensor *pb = tn_module_param(b, i, &nb);
        assert_int_equal(tn_numel(pa), tn_numel(pb));
        float *va = malloc((size_t)tn_numel(pa) * sizeof(float));
        float *vb = malloc((size_t)tn_numel(pb) * sizeof(float));
        tn_copy_to(pa, va);
        tn_copy_to(pb, vb);
        if (memcmp(va, vb, (size_t)tn_numel(pa) * sizeof(float)) != 0)
            fail_msg("parameter '%s' differs after the round trip", na);
        free(va);
        free(vb);
    }
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n > 0)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Writes a safetensors file: the little-endian header length (header_len, or strlen(header) when
 * header_len is UINT64_MAX), the header text, and data_len bytes of data holding floats
 * 0.25 * i (i = 0, 1, ...). */
static void write_st_raw(const char *path, const char *header, uint64_t header_len,
                         size_t data_len)
{
    size_t hn = strlen(header);
    uint64_t n = header_len == UINT64_MAX ? hn : header_len;
    size_t total = 8 + hn + data_len;
    unsigned char *buf = calloc(1, total);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, hn);
    for (size_t i = 0; i + 4 <= data_len; i += 4) {
        float v = 0.25f * (float)(i / 4);
        memcpy(buf + 8 + hn + i, &v, 4);
    }
    write_bytes(path, buf, total);
    free(buf);
}

static void write_st(const char *path, const char *header, size_t data_len)
{
    write_st_raw(path, header, UINT64_MAX, data_len);
}

/* A valid header for the MLP; the data buffer is 268 bytes. */
#define T_W0 "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[8,4],\"data_offsets\":[0,128]}"
#define T_B0 "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[128,160]}"
#define T_W2 "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],\"data_offsets\":[160,256]}"
#define T_B2 "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[256,268]}"
#define MLP_DATA 268

/* Loads path into a fresh MLP and asserts it fails with `code`, a message naming the path and
 * containing each of the NULL-terminated substrings, and unchanged parameters. */
static void expect_load_error(const char *path, bool allow_extra, int code, ...)
{
    tn_module *m = make_mlp(7);
    snapshot s;
    snapshot_take(m, &s);
    tn_clear_error();
    int rc = tn_module_load_safetensors(m, path, allow_extra);
    const char *msg = tn_last_error_message();
    if (rc != code)
        fail_msg("loading '%s': expected %s, got %d (%s)", path, tn_strerror(code), rc, msg);
    assert_int_equal(tn_last_error(), code);
    if (!strstr(msg, path))
        fail_msg("message does not name the file: %s", msg);
    if (!strstr(msg, "load_safetensors"))
        fail_msg("message does not name the operation: %s", msg);
    va_list ap;
    va_start(ap, code);
    for (const char *sub = va_arg(ap, const char *); sub; sub = va_arg(ap, const char *))
        if (!strstr(msg, sub))
            fail_msg("message lacks \"%s\": %s", sub, msg);
    va_end(ap);
    snapshot_check_unchanged(m, &s);
    snapshot_free(&s);
    tn_module_free(m);
}

/* The names in g_dir, to check no temporary file is left behind. */
static int count_dir_entries(const char *substring)
{
    DIR *d = opendir(g_dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e = readdir(d); e; e = readdir(d))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            strstr(e->d_name, substring))
            n++;
    closedir(d);
    return n;
}

static uint64_t read_le64(const unsigned char *b)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | b[i];
    return n;
}

/* ---- round trips ---------------------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "round_trip.safetensors");
    tn_module *a = make_mlp(1);
    tn_module *b = make_mlp(2);
    /* Different seeds give different weights (test_round_trip_seeds_differ), so the load must
     * really copy. */
    assert_int_equal(tn_module_save_safetensors(a, path), 0);
    uint64_t v0 = tn_version(tn_module_param(b, 0, NULL));
    assert_int_equal(tn_module_load_safetensors(b, path, false), 0);
    assert_params_equal(a, b);
    assert_true(tn_version(tn_module_param(b, 0, NULL)) > v0);

    /* Layout: header length, JSON starting with '{', data 8-aligned, exact file size. */
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char head[9];
    assert_int_equal(fread(head, 1, 9, f), 9);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    uint64_t n = read_le64(head);
    assert_int_equal(head[8], '{');
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal((uint64_t)size, 8 + n + MLP_DATA);

    /* Saving over an existing file replaces it and leaves no temporary file. */
    tn_module *c = make_mlp(3);
    assert_int_equal(tn_module_save_safetensors(c, path), 0);
    assert_int_equal(tn_module_load_safetensors(b, path, false), 0);
    assert_params_equal(c, b);
    assert_int_equal(count_dir_entries(".tmp."), 0);

    tn_module_free(a);
    tn_module_free(b);
    tn_module_free(c);
}

static void test_round_trip_seeds_differ(void **state)
{
    /* Guards the round trip test: two seeds must give different parameters. */
    tn_module *a = make_mlp(1), *b = make_mlp(2);
    float va[32], vb[32];
    tn_copy_to(tn_module_param(a, 0, NULL), va);
    tn_copy_to(tn_module_param(b, 0, NULL), vb);
    assert_true(memcmp(va, vb, sizeof va) != 0);
    tn_module_free(a);
    tn_module_free(b);
}

static void test_names_relative_to_module(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "named.safetensors");
    /* A named root writes names without its prefix, as PyTorch's state_dict. */
    tn_module *a = make_mlp(4);
    assert_int_equal(tn_module_set_name(a, "encoder"), 0);
    const char *full = NULL;
    tn_module_param(a, 0, &full);
    assert_string_equal(full, "encoder.0.weight");
    assert_int_equal(tn_module_save_safetensors(a, path), 0);
    tn__tensor_list *list = NULL;
    assert_int_equal(tn__safetensors_read(path, LP_CAT_INPUT, &list), 0);
    assert_non_null(tn__tensor_list_get(list, "0.weight"));
    assert_null(tn__tensor_list_get(list, "encoder.0.weight"));
    tn__tensor_list_free(list);
    tn_module *b = make_mlp(5);
    assert_int_equal(tn_module_load_safetensors(b, path, false), 0);
    assert_params_equal(a, b);

    /* A child module loads "weight" and "bias". */
    char child_path[512];
    path_in_dir(child_path, sizeof child_path, "child.safetensors");
    write_st(child_path,
             "{\"weight\":{\"dtype\":\"F32\",\"shape\":[8,4],\"data_offsets\":[0,128]},"
             "\"bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[128,160]}}",
             160);
    tn_module *first = tn_module_child(b, 0);
    assert_int_equal(tn_module_load_safetensors(first, child_path, false), 0);
    float w[32];
    tn_copy_to(tn_module_param(first, 0, NULL), w);
    for (int i = 0; i < 32; i++)
        assert_float_equal(w[i], 0.25f * (float)i, 0);
    tn_module_free(a);
    tn_module_free(b);
}

static void test_read_all(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "read_all.safetensors");
    tn_module *a = make_mlp(6);
    assert_int_equal(tn_module_save_safetensors(a, path), 0);
    tn__tensor_list *list = NULL;
    assert_int_equal(tn__safetensors_read(path, LP_CAT_INPUT, &list), 0);
    assert_int_equal(list->count, 4);
    tn_tensor *w = tn__tensor_list_get(list, "2.weight");
    assert_non_null(w);
    assert_int_equal(tn_ndim(w), 2);
    assert_int_equal(tn_shape(w)[0], 3);
    assert_int_equal(tn_shape(w)[1], 8);
    float got[24], want[24];
    tn_copy_to(w, got);
    tn_copy_to(tn_module_param_by_name(a, "2.weight"), want);
    assert_memory_equal(got, want, sizeof got);
    assert_null(tn__tensor_list_get(list, "nope"));
    tn__tensor_list_free(list);
    tn__tensor_list_free(NULL);

    /* Reading refuses non-F32 tensors, naming them. */
    char bad[512];
    path_in_dir(bad, sizeof bad, "read_all_i64.safetensors");
    write_st(bad, "{\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8);
    list = NULL;
    assert_int_equal(tn__safetensors_read(bad, LP_CAT_INPUT, &list), TN_EFORMAT);
    assert_null(list);
    assert_non_null(strstr(tn_last_error_message(), "'n'"));
    assert_non_null(strstr(tn_last_error_message(), "I64"));
    tn_module_free(a);
}

/* Scalars, metadata with escapes and extra tensors of other dtypes (PyTorch's I64
 * num_batches_tracked) are accepted. */
static void test_metadata_and_extras(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "extras.safetensors");
    write_st(path,
             "{\"__metadata__\":{\"format\":\"pt\",\"k\\u00e9y\":\"v\\ud83d\\ude00\\n\"},"
             "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[268,276]}," T_W0 "," T_B0
             "," T_W2 "," T_B2 ",\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],"
             "\"data_offsets\":[276,276]}}   ",
             MLP_DATA + 8);
    tn_module *m = make_mlp(8);
    assert_int_equal(tn_module_load_safetensors(m, path, true), 0);
    float b2[3];
    tn_copy_to(tn_module_param_by_name(m, "2.bias"), b2);
    for (int i = 0; i < 3; i++)
        assert_float_equal(b2[i], 0.25f * (float)(64 + i), 0);
    tn_module_free(m);
    /* Without allow_extra the same file is refused, naming an extra tensor. */
    expect_load_error(path, false, TN_EINVAL, "matches no parameter", NULL);
}

/* ---- malformed files ------------------------------------------------------------------------ */

static void test_empty_file(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "empty.safetensors");
    write_bytes(path, "", 0);
    expect_load_error(path, false, TN_EFORMAT, "empty", NULL);
}

static void test_short_file(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "short.safetensors");
    write_bytes(path, "\x10\x00\x00", 3);
    expect_load_error(path, false, TN_EFORMAT, "3 bytes", NULL);
}

static void test_truncated_header(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "truncated.safetensors");
    /* The length says 200 bytes of header; the file stops in the middle of it. */
    write_st_raw(path, "{\"0.weight\":{\"dtype\":\"F32\",\"sha", 200, 0);
    expect_load_error(path, false, TN_EFORMAT, "header length 200", NULL);
}

static void test_header_length_larger_than_file(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "huge_len.safetensors");
    write_st_raw(path, "{" T_W0 "," T_B0 "," T_W2 "," T_B2 "}", (uint64_t)1 << 40, MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "1099511627776", NULL);
    write_st_raw(path, "{}", UINT64_MAX - 1, 0);
    expect_load_error(path, false, TN_EFORMAT, "18446744073709551614", NULL);
}

static void test_header_length_over_cap(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "cap.safetensors");
    /* A sparse 150 MB file whose header length (120 MB) fits but exceeds the 100 MB cap. */
    uint64_t n = 120u * 1000u * 1000u;
    write_st_raw(path, "{", n, 0);
    assert_int_equal(truncate(path, (off_t)(8 + n + 16)), 0);
    expect_load_error(path, false, TN_EFORMAT, "exceeds the limit", NULL);
    unlink(path);
}

static void test_invalid_json(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "bad_json.safetensors");
    write_st(path, "{\"0.weight\":{\"dtype\":\"F32\",,\"shape\":[8,4]}}", MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "invalid JSON", "at byte 27", "expected a string key",
                      NULL);
    write_st(path, "[1,2,3]  ", 0);
    expect_load_error(path, false, TN_EFORMAT, "does not start with '{'", NULL);
    write_st(path, "{\"a\":1}{}", 0);
    expect_load_error(path, false, TN_EFORMAT, "at byte 7", "end of input", NULL);
    /* Padding with NUL bytes instead of spaces is not JSON. */
    write_bytes(path, "\x04\0\0\0\0\0\0\0{}\0\0", 12);
    expect_load_error(path, false, TN_EFORMAT, "at byte 2", "byte 0x00", NULL);
}

static void test_wrong_dtype(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "f16.safetensors");
    /* 0.weight as F16: 32 elements of 2 bytes. */
    write_st(path,
             "{\"0.weight\":{\"dtype\":\"F16\",\"shape\":[8,4],\"data_offsets\":[0,64]},"
             "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]},"
             "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],\"data_offsets\":[96,192]},"
             "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[192,204]}}",
             204);
    expect_load_error(path, false, TN_EFORMAT, "'0.weight'", "F16", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "unknown dtype 'F4'", NULL);
    write_st(path, "{\"x\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "dtype is a JSON number", NULL);
}

static void test_shape_mismatch(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "shape.safetensors");
    /* Same number of elements, transposed shape. */
    write_st(path,
             "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[0,128]}," T_B0
             "," T_W2 "," T_B2 "}",
             MLP_DATA);
    expect_load_error(path, false, TN_ESHAPE, "'0.weight'", "[8,4]", "[4,8]", NULL);
}

static void test_offsets_out_of_range(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "offsets.safetensors");
    write_st(path,
             "{" T_W0 "," T_B0 "," T_W2
             ",\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[268,280]}}",
             MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "'2.bias'", "out of range", "268", NULL);
    write_st(path,
             "{" T_W0 "," T_B0 "," T_W2
             ",\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[268,256]}}",
             MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "'2.bias'", "out of range", NULL);
    write_st(path,
             "{" T_W0 "," T_B0 "," T_W2
             ",\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[-4,8]}}",
             MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "'2.bias'", "non-negative integers", NULL);
    write_st(path,
             "{" T_W0 "," T_B0 "," T_W2
             ",\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[256]}}",
             MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "'2.bias'", "[begin, end]", NULL);
}

static void test_size_not_matching_shape(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "size.safetensors");
    write_st(path,
             "{\"0.weight\":{\"dtype\":\"F32\",\"shape\":[8,4],\"data_offsets\":[0,64]},"
             "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[64,96]},"
             "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],\"data_offsets\":[96,192]},"
             "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[192,204]}}",
             204);
    expect_load_error(path, false, TN_EFORMAT, "'0.weight'", "[8,4]", "needs 128 bytes", "hold 64",
                      NULL);
    /* A shape whose byte size overflows 64 bits. */
    write_st(path,
             "{\"x\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
             0);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "needs more than", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,0]}}", 0);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "shape[1]", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                   "\"data_offsets\":[0,4]}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "9 dims", NULL);
}

static void test_overlap_and_gaps(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "overlap.safetensors");
    write_st(path,
             "{" T_W0 ",\"0.bias\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[120,152]},"
             "\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],\"data_offsets\":[152,248]},"
             "\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[248,260]}}",
             260);
    expect_load_error(path, false, TN_EFORMAT, "overlap", "'0.weight'", "'0.bias'", NULL);
    write_st(path,
             "{" T_W0 "," T_B0 ",\"2.weight\":{\"dtype\":\"F32\",\"shape\":[3,8],"
             "\"data_offsets\":[164,260]},\"2.bias\":{\"dtype\":\"F32\",\"shape\":[3],"
             "\"data_offsets\":[260,272]}}",
             272);
    expect_load_error(path, false, TN_EFORMAT, "[160, 164)", "belong to no tensor", NULL);
    write_st(path, "{" T_W0 "," T_B0 "," T_W2 "," T_B2 "}", MLP_DATA + 4);
    expect_load_error(path, false, TN_EFORMAT, "272 bytes", "end at byte 268", NULL);
}

static void test_missing_tensor(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "missing.safetensors");
    write_st(path, "{" T_W0 "," T_B0 "," T_W2 "}", 256);
    expect_load_error(path, false, TN_ENOTFOUND, "parameter '2.bias'", NULL);
}

static void test_extra_tensor(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "extra.safetensors");
    write_st(path,
             "{" T_W0 "," T_B0 "," T_W2 "," T_B2 ",\"head.weight\":{\"dtype\":\"F32\","
             "\"shape\":[2],\"data_offsets\":[268,276]}}",
             MLP_DATA + 8);
    expect_load_error(path, false, TN_EINVAL, "'head.weight'", NULL);
    tn_module *m = make_mlp(9);
    assert_int_equal(tn_module_load_safetensors(m, path, true), 0);
    float w0[32];
    tn_copy_to(tn_module_param_by_name(m, "0.weight"), w0);
    for (int i = 0; i < 32; i++)
        assert_float_equal(w0[i], 0.25f * (float)i, 0);
    tn_module_free(m);
}

static void test_bad_structure(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "structure.safetensors");
    write_st(path, "{" T_W0 "," T_W0 "," T_B0 "," T_W2 "," T_B2 "}", MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "overlap", NULL); /* same offsets twice */
    write_st(path,
             "{" T_W0 ",\"0.weight\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[128,128]},"
             T_B0 "," T_W2 "," T_B2 "}",
             MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "'0.weight' appears twice", NULL);
    write_st(path, "{\"__metadata__\":{\"a\":1}," T_W0 "," T_B0 "," T_W2 "," T_B2 "}", MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "__metadata__ value 'a'", NULL);
    write_st(path, "{\"__metadata__\":[]," T_W0 "," T_B0 "," T_W2 "," T_B2 "}", MLP_DATA);
    expect_load_error(path, false, TN_EFORMAT, "__metadata__ is a JSON array", NULL);
    write_st(path, "{\"x\":[1,2]}", 0);
    expect_load_error(path, true, TN_EFORMAT, "'x' is a JSON array", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"y\":1}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "field 'y'", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "'x' has no shape", NULL);
    write_st(path, "{\"x\\u0000y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "NUL", NULL);
    write_st(path, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4);
    expect_load_error(path, true, TN_EFORMAT, "'x'", "shape[0]", NULL);
}

static void test_nonexistent_path(void **state)
{
    char path[512];
    path_in_dir(path, sizeof path, "does/not/exist.safetensors");
    expect_load_error(path, false, TN_EIO, strerror(ENOENT), NULL);
    /* A directory is not a file. */
    expect_load_error(g_dir, false, TN_EIO, strerror(EISDIR), NULL);
}

static void test_null_arguments(void **state)
{
    tn_module *m = make_mlp(10);
    assert_int_equal(tn_module_load_safetensors(m, NULL, false), TN_EINVAL);
    assert_non_null(strstr(tn_last_error_message(), "load_safetensors"));
    assert_int_equal(tn_module_load_safetensors(NULL, "x", false), TN_EINVAL);
    assert_int_equal(tn_module_save_safetensors(m, NULL), TN_EINVAL);
    assert_non_null(strstr(tn_last_error_message(), "save_safetensors"));
    assert_int_equal(tn_module_save_safetensors(NULL, "x"), TN_EINVAL);
    tn_module_free(m);
}

/* ---- failed saves --------------------------------------------------------------------------- */

static void test_save_errors(void **state)
{
    tn_module *m = make_mlp(11);
    char path[512];
    path_in_dir(path, sizeof path, "no/such/dir/model.safetensors");
    tn_clear_error();
    assert_int_equal(tn_module_save_safetensors(m, path), TN_EIO);
    assert_int_equal(tn_last_error(), TN_EIO);
    assert_non_null(strstr(tn_last_error_message(), path));
    assert_non_null(strstr(tn_last_error_message(), strerror(ENOENT)));

    /* The final rename fails (the target is a non-empty directory): an error naming the path, and
     * neither a partial file nor a temporary one is left. */
    char target[512], inner[600];
    path_in_dir(target, sizeof target, "target_dir.safetensors");
    assert_int_equal(mkdir(target, 0700), 0);
    snprintf(inner, sizeof inner, "%s/keep", target);
    write_bytes(inner, "x", 1);
    assert_int_equal(tn_module_save_safetensors(m, target), TN_EIO);
    assert_non_null(strstr(tn_last_error_message(), target));
    assert_int_equal(count_dir_entries(".tmp."), 0);
    struct stat st;
    assert_int_equal(stat(target, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    unlink(inner);
    rmdir(target);
    tn_module_free(m);
}

/* ---- the JSON parser ------------------------------------------------------------------------ */

static void test_json_values(void **state)
{
    const char *text = " {\"a\": [1, -2, 3.5e2, true, false, null], \"b\": \"x\\u00e9\\ud83d\\ude00"
                       "\\n\\\"\\/\\\\\", \"c\": {}, \"d\": -9223372036854775808, "
                       "\"e\": 18446744073709551616, \"f\": 0.125} ";
    tn__json_doc *doc = NULL;
    char err[128];
    assert_int_equal(tn__json_parse(text, strlen(text), "test", &doc, err, sizeof err), 0);
    assert_string_equal(err, "");
    const tn__json_value *root = doc->root;
    assert_int_equal(root->type, TN__JSON_OBJECT);
    assert_int_equal(root->count, 6);
    assert_int_equal(root->offset, 1);
    const tn__json_value *a = tn__json_get(root, "a");
    assert_non_null(a);
    assert_int_equal(a->type, TN__JSON_ARRAY);
    assert_int_equal(a->count, 6);
    const tn__json_value *v = a->first;
    assert_true(v->is_integer);
    assert_int_equal(v->integer, 1);
    v = v->next;
    assert_int_equal(v->integer, -2);
    v = v->next;
    assert_false(v->is_integer);
    assert_float_equal(v->number, 350.0, 0);
    v = v->next;
    assert_int_equal(v->type, TN__JSON_BOOL);
    assert_true(v->boolean);
    v = v->next;
    assert_false(v->boolean);
    v = v->next;
    assert_int_equal(v->type, TN__JSON_NULL);
    assert_null(v->next);
    const tn__json_value *b = tn__json_get(root, "b");
    assert_int_equal(b->type, TN__JSON_STRING);
    assert_string_equal(b->str, "x\xc3\xa9\xf0\x9f\x98\x80\n\"/\\");
    assert_int_equal(b->len, strlen("x\xc3\xa9\xf0\x9f\x98\x80\n\"/\\"));
    assert_int_equal(tn__json_get(root, "c")->count, 0);
    const tn__json_value *d = tn__json_get(root, "d");
    assert_true(d->is_integer);
    assert_true(d->integer == INT64_MIN);
    const tn__json_value *e = tn__json_get(root, "e");
    assert_false(e->is_integer); /* too large for int64 */
    assert_float_equal(e->number, 18446744073709551616.0, 1);
    assert_float_equal(tn__json_get(root, "f")->number, 0.125, 0);
    assert_null(tn__json_get(root, "zz"));
    assert_null(tn__json_get(a, "a"));
    tn__json_free(doc);
    tn__json_free(NULL);

    /* \u0000 in a string is kept, with its length. */
    const char *nul = "\"a\\u0000b\"";
    assert_int_equal(tn__json_parse(nul, strlen(nul), "test", &doc, err, sizeof err), 0);
    assert_int_equal(doc->root->len, 3);
    assert_memory_equal(doc->root->str, "a\0b", 4);
    tn__json_free(doc);
    /* The input need not be NUL-terminated: only len bytes are read. */
    assert_int_equal(tn__json_parse("[1]]]", 3, "test", &doc, err, sizeof err), 0);
    assert_int_equal(doc->root->count, 1);
    tn__json_free(doc);
}

/* Parses text and asserts a TN_EFORMAT error whose message starts with "at byte <offset>:" and
 * contains `what`. */
static void expect_json_error(const char *text, size_t len, size_t offset, const char *what)
{
    tn__json_doc *doc = (tn__json_doc *)1;
    char err[200], prefix[40];
    int rc = tn__json_parse(text, len, "test", &doc, err, sizeof err);
    if (rc != TN_EFORMAT)
        fail_msg("'%.*s' parsed (rc %d), expected an error", (int)len, text, rc);
    assert_null(doc);
    snprintf(prefix, sizeof prefix, "at byte %zu: ", offset);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, what))
        fail_msg("'%.*s': expected \"%s...%s\", got \"%s\"", (int)len, text, prefix, what, err);
}

#define JSON_ERR(text, offset, what) expect_json_error((text), strlen(text), (offset), (what))

static void test_json_errors(void **state)
{
    JSON_ERR("", 0, "expected a value");
    JSON_ERR("   ", 3, "found end of input");
    JSON_ERR("{\"a\":1,}", 7, "expected a string key, found '}'");
    JSON_ERR("{,}", 1, "expected a string key or '}'");
    JSON_ERR("[1,]", 3, "expected a value");
    JSON_ERR("[1 2]", 3, "expected ',' or ']'");
    JSON_ERR("{\"a\" 1}", 5, "expected ':'");
    JSON_ERR("{\"a\":1 \"b\":2}", 7, "expected ',' or '}'");
    JSON_ERR("{'a':1}", 1, "found '''");
    JSON_ERR("01", 1, "leading zero");
    JSON_ERR("1.", 2, "digit after the decimal point");
    JSON_ERR("1e", 2, "digit in the exponent");
    JSON_ERR("-", 1, "expected a digit");
    JSON_ERR("+1", 0, "expected a value");
    JSON_ERR(".5", 0, "expected a value");
    JSON_ERR("NaN", 0, "expected a value");
    JSON_ERR("1e999", 0, "out of the range");
    JSON_ERR("tru", 3, "expected 'true'");
    JSON_ERR("nulL", 3, "expected 'null'");
    JSON_ERR("1 2", 2, "expected end of input");
    JSON_ERR("\"abc", 4, "unterminated string starting at byte 0");
    JSON_ERR("\"a\tb\"", 2, "raw control character 0x09");
    JSON_ERR("\"\\x\"", 2, "invalid escape");
    JSON_ERR("\"\\u12G4\"", 5, "4 hex digits");
    JSON_ERR("\"\\ud800\"", 7, "low surrogate");
    JSON_ERR("\"\\ud800\\u0041\"", 7, "low surrogate");
    JSON_ERR("\"\\udc00\"", 1, "unpaired low surrogate");
    JSON_ERR("\"\xff\"", 1, "invalid UTF-8 byte 0xff");
    JSON_ERR("\"\xc0\x80\"", 1, "invalid UTF-8");         /* overlong NUL */
    JSON_ERR("\"\xed\xa0\x80\"", 1, "invalid UTF-8");     /* encoded surrogate */
    JSON_ERR("\"\xf4\x90\x80\x80\"", 1, "invalid UTF-8"); /* above U+10FFFF */
    JSON_ERR("\"\xe2\x82\"", 1, "invalid UTF-8");         /* truncated sequence */
    JSON_ERR("\xef\xbb\xbf{}", 0, "expected a value");   /* byte-order mark */
    JSON_ERR("{} // comment", 3, "expected end of input");
    /* A NUL byte inside the input is not whitespace. */
    expect_json_error("{}\0", 3, 2, "byte 0x00");

    /* Nesting: 64 levels parse, 65 do not. */
    char deep[200];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    tn__json_doc *doc = NULL;
    char err[128];
    assert_int_equal(tn__json_parse(deep, 128, "test", &doc, err, sizeof err), 0);
    tn__json_free(doc);
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    expect_json_error(deep, 130, 64, "nesting deeper than 64");
    /* Deep input far beyond the limit fails the same way, without deep recursion. */
    size_t big = 1u << 20;
    char *many = malloc(big);
    assert_non_null(many);
    memset(many, '[', big);
    expect_json_error(many, big, 64, "nesting deeper");
    free(many);
    /* A long number is an error, not a buffer overflow. */
    char longnum[600];
    memset(longnum, '1', sizeof longnum);
    longnum[1] = '.';
    expect_json_error(longnum, sizeof longnum, 0, "too long");
}

/* ---- main ----------------------------------------------------------------------------------- */

static int setup(void **state)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/gradprof_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    DIR *d = opendir(g_dir);
    if (d) {
        for (struct dirent *e = readdir(d); e; e = readdir(d)) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[600];
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_round_trip_seeds_differ),
        cmocka_unit_test(test_names_relative_to_module),
        cmocka_unit_test(test_read_all),
        cmocka_unit_test(test_metadata_and_extras),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_short_file),
        cmocka_unit_test(test_truncated_header),
        cmocka_unit_test(test_header_length_larger_than_file),
        cmocka_unit_test(test_header_length_over_cap),
        cmocka_unit_test(test_invalid_json),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_size_not_matching_shape),
        cmocka_unit_test(test_overlap_and_gaps),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_extra_tensor),
        cmocka_unit_test(test_bad_structure),
        cmocka_unit_test(test_nonexistent_path),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_save_errors),
        cmocka_unit_test(test_json_values),
        cmocka_unit_test(test_json_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
