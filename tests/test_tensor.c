/* Tensors: creation, layout, views, copies, in-place ops, the generator, allocation failure. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradprof/tensor.h"

#define SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}

static tn_tensor *arange(int ndim, const int64_t *shape)
{
    tn_tensor *t = tn_empty(ndim, shape, LP_CAT_INPUT);
    assert_non_null(t);
    for (int64_t i = 0; i < tn_numel(t); i++)
        tn_data(t)[i] = (float)i;
    return t;
}

static void test_create_and_layout(void **state)
{
    tn_tensor *t = tn_zeros(SHAPE(2, 3, 4), LP_CAT_INPUT);
    assert_non_null(t);
    assert_int_equal(tn_ndim(t), 3);
    assert_int_equal(tn_numel(t), 24);
    assert_int_equal(tn_strides(t)[0], 12);
    assert_int_equal(tn_strides(t)[1], 4);
    assert_int_equal(tn_strides(t)[2], 1);
    assert_int_equal(tn_size(t, -1), 4);
    assert_true(tn_is_contiguous(t));
    assert_true(tn_is_leaf(t));
    assert_false(tn_requires_grad(t));
    char buf[32];
    assert_string_equal(tn_shape_str(t, buf, sizeof buf), "[2,3,4]");
    for (int i = 0; i < 24; i++)
        assert_true(tn_data(t)[i] == 0.0f);
    tn_release(t);

    tn_tensor *s = tn_scalar(2.5f, LP_CAT_INPUT);
    assert_int_equal(tn_ndim(s), 0);
    assert_true(tn_item(s) == 2.5f);
    tn_release(s);

    tn_tensor *f = tn_full(SHAPE(3), 7.0f, LP_CAT_ACTIVATION);
    assert_true(tn_data(f)[2] == 7.0f);
    tn_release(f);
    tn_release(NULL); /* no-op */
}

static void test_bad_creation(void **state)
{
    assert_null(tn_empty(SHAPE(2, -1), LP_CAT_INPUT));
    assert_int_equal(tn_last_error(), TN_EINVAL);
    assert_non_null(strstr(tn_last_error_message(), "negative size"));
    assert_null(tn_empty(9, (const int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}, LP_CAT_INPUT));
    assert_int_equal(tn_last_error(), TN_EINVAL);
    assert_null(tn_empty(SHAPE(2), (lp_category)42));
    assert_null(tn_rand_uniform(SHAPE(2), 1.0f, 0.0f, LP_CAT_INPUT));
    assert_non_null(strstr(tn_last_error_message(), "rand_uniform"));
    assert_string_equal(tn_strerror(TN_ESHAPE), "shape mismatch");
    assert_string_equal(tn_strerror(12345), "unknown error");
    tn_clear_error();
    assert_int_equal(tn_last_error(), TN_OK);
}

static void test_views_share_storage(void **state)
{
    tn_tensor *t = arange(SHAPE(2, 3));
    tn_tensor *tt = tn_transpose(t, 0, 1);
    assert_non_null(tt);
    assert_int_equal(tn_shape(tt)[0], 3);
    assert_false(tn_is_contiguous(tt));
    float out[6];
    tn_copy_to(tt, out);
    const float expect_t[6] = {0, 3, 1, 4, 2, 5};
    assert_memory_equal(out, expect_t, sizeof out);

    /* view of a transposed tensor cannot work without a copy; reshape copies */
    assert_null(tn_view(tt, SHAPE(6)));
    assert_int_equal(tn_last_error(), TN_ESHAPE);
    assert_non_null(strstr(tn_last_error_message(), "reshape"));
    tn_tensor *flat = tn_reshape(tt, SHAPE(-1));
    assert_non_null(flat);
    tn_copy_to(flat, out);
    assert_memory_equal(out, expect_t, sizeof out);

    tn_tensor *v = tn_view(t, SHAPE(3, -1));
    assert_non_null(v);
    assert_int_equal(tn_shape(v)[1], 2);
    tn_data(v)[0] = 42.0f; /* shares storage */
    assert_true(tn_data(t)[0] == 42.0f);

    tn_tensor *n = tn_narrow(t, 1, 1, 2);
    assert_non_null(n);
    tn_copy_to(n, out);
    const float expect_n[4] = {1, 2, 4, 5};
    assert_memory_equal(out, expect_n, sizeof expect_n);
    assert_null(tn_narrow(t, 1, 2, 2));
    assert_int_equal(tn_last_error(), TN_EINVAL);

    int perm[2] = {1, 0};
    tn_tensor *p = tn_permute(t, perm);
    assert_non_null(p);
    assert_int_equal(tn_strides(p)[0], 1);
    int bad_perm[2] = {0, 0};
    assert_null(tn_permute(t, bad_perm));

    tn_tensor *row = tn_narrow(t, 0, 1, 1); /* [1,3] */
    tn_tensor *e = tn_expand(row, SHAPE(4, 3));
    assert_non_null(e);
    assert_int_equal(tn_strides(e)[0], 0);
    tn_tensor *c = tn_contiguous(e);
    tn_copy_to(c, (float[12]){0});
    assert_true(tn_data(c)[9] == 3.0f && tn_data(c)[11] == 5.0f);
    assert_null(tn_expand(t, SHAPE(4, 3)));
    assert_int_equal(tn_last_error(), TN_ESHAPE);

    assert_null(tn_view(t, SHAPE(4)));
    assert_int_equal(tn_last_error(), TN_ESHAPE);
    assert_null(tn_view(t, SHAPE(-1, -1)));
    assert_null(tn_transpose(t, 0, 5));

    tn_tensor *views[] = {tt, flat, v, n, p, row, e, c};
    for (size_t i = 0; i < sizeof views / sizeof *views; i++)
        tn_release(views[i]);
    tn_release(t);
}

static void test_inplace_ops_and_version(void **state)
{
    tn_tensor *t = tn_zeros(SHAPE(2, 3), LP_CAT_INPUT);
    assert_int_equal(tn_version(t), 0);
    assert_int_equal(tn_fill_(t, 1.5f), 0);
    assert_int_equal(tn_version(t), 1);
    tn_tensor *row = tn_from_data(SHAPE(3), (const float[]){1, 2, 3}, LP_CAT_INPUT);
    assert_int_equal(tn_add_(t, row), 0);
    assert_true(tn_data(t)[5] == 4.5f);
    assert_int_equal(tn_mul_scalar_(t, 2.0f), 0);
    assert_true(tn_data(t)[0] == 5.0f);
    assert_int_equal(tn_version(t), 3);
    tn_tensor *bad = tn_zeros(SHAPE(4), LP_CAT_INPUT);
    assert_int_equal(tn_add_(t, bad), TN_ESHAPE);
    assert_int_equal(tn_copy_(t, bad), TN_ESHAPE);
    assert_non_null(strstr(tn_last_error_message(), "copy_"));

    /* copy_ into a non-contiguous destination scatters in row-major order */
    tn_tensor *tt = tn_transpose(t, 0, 1); /* [3,2] view */
    tn_tensor *src = tn_from_data(SHAPE(6), (const float[]){0, 1, 2, 3, 4, 5}, LP_CAT_INPUT);
    assert_int_equal(tn_copy_(tt, src), 0);
    const float expect[6] = {0, 2, 4, 1, 3, 5};
    assert_memory_equal(tn_data(t), expect, sizeof expect);
    /* views share the version counter */
    assert_int_equal(tn_version(t), 4);

    tn_tensor *p = tn_zeros(SHAPE(2), LP_CAT_PARAMETER);
    tn_set_requires_grad(p, true);
    assert_int_equal(tn_fill_(p, 1.0f), TN_EGRAD);
    assert_non_null(strstr(tn_last_error_message(), "requires grad"));
    tn_grad_mode prev = tn_no_grad_begin();
    assert_int_equal(tn_fill_(p, 1.0f), 0);
    tn_grad_mode_end(prev);
    tn_release(p);
    tn_release(tt);
    tn_release(src);
    tn_release(bad);
    tn_release(row);
    tn_release(t);
}

static void test_generator_is_deterministic(void **state)
{
    tn_manual_seed(7);
    tn_tensor *a = tn_randn(SHAPE(10000), LP_CAT_INPUT);
    tn_manual_seed(7);
    tn_tensor *b = tn_randn(SHAPE(10000), LP_CAT_INPUT);
    assert_memory_equal(tn_data(a), tn_data(b), 10000 * sizeof(float));
    double mean = 0, var = 0;
    for (int i = 0; i < 10000; i++)
        mean += tn_data(a)[i];
    mean /= 10000;
    for (int i = 0; i < 10000; i++)
        var += (tn_data(a)[i] - mean) * (tn_data(a)[i] - mean);
    var /= 10000;
    assert_true(fabs(mean) < 0.05 && fabs(var - 1) < 0.05);
    tn_tensor *u = tn_rand_uniform(SHAPE(1000), -2, 3, LP_CAT_INPUT);
    for (int i = 0; i < 1000; i++)
        assert_true(tn_data(u)[i] >= -2 && tn_data(u)[i] < 3);
    tn_release(a);
    tn_release(b);
    tn_release(u);
}

/* Whether the mapping holding p is marked for transparent huge pages ("VmFlags: ... hg"). */
static bool mapping_has_hugepage_flag(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    bool inside = false, flagged = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        else if (inside && strncmp(line, "VmFlags:", 8) == 0)
            flagged = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return flagged;
}

/* Whether THP is given on request (`madvise`) rather than always or never. */
static bool thp_on_request(void)
{
    char mode[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        if (!fgets(mode, sizeof mode, f))
            mode[0] = '\0';
        fclose(f);
    }
    return strstr(mode, "[madvise]") != NULL;
}

#define HUGE_PAGE ((uintptr_t)2 << 20)

/* Whether this process's malloc is glibc's, taking mallopt and telling mapped blocks apart in
 * mallinfo2 (not under a sanitizer's allocator); sets an mmap threshold of 1 MiB if so. */
static bool glibc_malloc_maps_big_blocks(void)
{
    if (mallopt(M_MMAP_THRESHOLD, 1 << 20) != 1)
        return false;
    size_t before = mallinfo2().hblkhd;
    void *p = malloc(3 << 20);
    bool mapped = p && mallinfo2().hblkhd >= before + (3 << 20);
    free(p);
    return mapped;
}

/* The first byte of the first whole 2 MiB page inside t's data. */
static const void *first_whole_page(tn_tensor *t)
{
    return (const void *)(((uintptr_t)tn_data(t) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

/* Buffers are 64-byte aligned, and the whole 2 MiB pages inside one of 2 MiB or more are marked
 * for huge pages where the kernel gives them on request. While glibc maps such buffers on their
 * own they are 2 MiB-aligned; once it serves one from its heap (here: its mmap threshold set above
 * the buffers' size, as MALLOC_MMAP_THRESHOLD_ does), no longer; under another malloc, never.
 * Runs first in this process: the tensor library learns which it is at the first big buffers. */
static void test_buffer_alignment(void **state)
{
    bool glibc = glibc_malloc_maps_big_blocks();
    tn_tensor *small = tn_zeros(SHAPE(1000), LP_CAT_INPUT);
    tn_tensor *big = tn_zeros(SHAPE(5, 256, 1024), LP_CAT_INPUT); /* 5 MiB: holds a whole page */
    assert_non_null(small);
    assert_non_null(big);
    assert_int_equal((uintptr_t)tn_data(small) % 64, 0);
    assert_int_equal((uintptr_t)tn_data(big) % 64, 0);
    if (glibc)
        assert_int_equal((uintptr_t)tn_data(big) % HUGE_PAGE, 0);
    if (thp_on_request())
        assert_true(mapping_has_hugepage_flag(first_whole_page(big)));
    tn_release(big);

    tn_tensor *first = NULL; /* glibc: aligned, from the heap */
    if (glibc) {
        assert_int_equal(mallopt(M_MMAP_THRESHOLD, 32 << 20), 1);
        first = tn_zeros(SHAPE(3, 256, 1024), LP_CAT_INPUT);
        assert_non_null(first);
        assert_int_equal((uintptr_t)tn_data(first) % HUGE_PAGE, 0);
    }
    tn_tensor *later[2] = {tn_zeros(SHAPE(5, 256, 1024), LP_CAT_INPUT),
                           tn_zeros(SHAPE(5, 256, 1024), LP_CAT_INPUT)};
    bool both_aligned = true;
    for (int i = 0; i < 2; i++) {
        assert_non_null(later[i]);
        uintptr_t at = (uintptr_t)tn_data(later[i]);
        assert_int_equal(at % 64, 0);
        both_aligned &= at % HUGE_PAGE == 0; /* one by chance: 1 in 32768 */
        if (thp_on_request())
            assert_true(mapping_has_hugepage_flag(first_whole_page(later[i])));
        tn_release(later[i]);
    }
    if (glibc)
        assert_false(both_aligned);
    tn_release(first);
    tn_release(small);
    if (glibc)
        assert_int_equal(mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);
}

/* Fault injection: fail the n-th raw allocation. */
static int alloc_countdown;
static void *failing_alloc(size_t bytes, void *ctx)
{
    if (alloc_countdown-- == 0)
        return NULL;
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}
static void plain_free(void *p, void *ctx) { free(p); }

static void test_out_of_memory_is_an_error(void **state)
{
    lp_counters before, after;
    lp_counters_get(LP_DEVICE_HOST, &before);
    tn_allocator a = {failing_alloc, plain_free, NULL};
    tn_set_allocator(&a);
    alloc_countdown = 0;
    assert_null(tn_zeros(SHAPE(1024), LP_CAT_INPUT));
    assert_int_equal(tn_last_error(), TN_ENOMEM);
    assert_non_null(strstr(tn_last_error_message(), "4096 bytes"));

    /* Every op fails cleanly at every allocation it makes, leaking nothing. */
    for (int k = 0; k < 6; k++) {
        alloc_countdown = 1000;
        tn_tensor *x = tn_full(SHAPE(4, 4), 1.0f, LP_CAT_INPUT);
        tn_set_requires_grad(x, true);
        alloc_countdown = k;
        tn_tensor *s = tn_sum(x, 1, (const int[]){1}, false);
        tn_tensor *m = s ? tn_mean(s, 0, NULL, false) : NULL;
        int rc = m ? tn_backward(m, NULL, false) : tn_last_error();
        if (rc)
            assert_int_equal(rc, TN_ENOMEM);
        tn_release(m);
        tn_release(s);
        tn_release(x);
    }
    tn_set_allocator(NULL);
    lp_counters_get(LP_DEVICE_HOST, &after);
    assert_int_equal(after.live_total, before.live_total);
}

static void test_empty_tensors(void **state)
{
    tn_tensor *e = tn_zeros(SHAPE(0, 3), LP_CAT_INPUT);
    assert_non_null(e);
    assert_int_equal(tn_numel(e), 0);
    tn_tensor *s = tn_sum(e, 1, (const int[]){0}, false);
    assert_non_null(s);
    assert_int_equal(tn_numel(s), 3);
    assert_true(tn_data(s)[0] == 0.0f);
    tn_release(s);
    tn_release(e);
}

static void test_sum_mean_values(void **state)
{
    tn_tensor *t = arange(SHAPE(2, 3, 4));
    tn_tensor *s = tn_sum(t, 2, (const int[]){0, -1}, false); /* [3] */
    assert_non_null(s);
    assert_int_equal(tn_ndim(s), 1);
    /* sum over i,k of 12i + 4j + k = 2*4*4j + 4*(0+12) + 2*(0+1+2+3) */
    for (int j = 0; j < 3; j++)
        assert_true(tn_data(s)[j] == (float)(32 * j + 48 + 12));
    tn_tensor *m = tn_mean(t, 1, (const int[]){1}, true); /* [2,1,4] */
    assert_int_equal(tn_shape(m)[1], 1);
    assert_true(tn_data(m)[0] == 4.0f);
    tn_tensor *all = tn_sum(t, 0, NULL, false);
    assert_int_equal(tn_ndim(all), 0);
    assert_true(tn_item(all) == 276.0f);
    tn_tensor *tt = tn_transpose(t, 0, 2); /* strided input */
    tn_tensor *st = tn_sum(tt, 1, (const int[]){2}, false); /* [4,3] */
    assert_true(tn_data(st)[0] == 12.0f); /* t[0,0,0] + t[1,0,0] */
    assert_null(tn_sum(t, 2, (const int[]){1, 1}, false));
    assert_non_null(strstr(tn_last_error_message(), "twice"));
    assert_null(tn_mean(t, 1, (const int[]){3}, false));
    assert_int_equal(tn_last_error(), TN_EINVAL);
    tn_release(st);
    tn_release(tt);
    tn_release(all);
    tn_release(m);
    tn_release(s);
    tn_release(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buffer_alignment), /* first: it learns the process's malloc */
        cmocka_unit_test(test_create_and_layout),
        cmocka_unit_test(test_bad_creation),
        cmocka_unit_test(test_views_share_storage),
        cmocka_unit_test(test_inplace_ops_and_version),
        cmocka_unit_test(test_generator_is_deterministic),
        cmocka_unit_test(test_out_of_memory_is_an_error),
        cmocka_unit_test(test_empty_tensors),
        cmocka_unit_test(test_sum_mean_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
