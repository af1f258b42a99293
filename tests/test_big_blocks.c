/* The analysers' big blocks (libprof/format/support.h) and arrays (tools/engine/array.h): contents
 * survive every way a block or an array grows across the 2 MiB line, big blocks are 2 MiB-aligned,
 * zeroed where asked, and offered as huge pages (checked in /proc/self/smaps where the kernel
 * reports THP advice), and the hash map built on them keeps every entry through its rehashes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "array.h"
#include "hashmap.h"

#define BIG GP__BIG_BLOCK

/* Whether the mapping holding p is marked for huge pages ("hg" in smaps' VmFlags); -1 when the
 * kernel cannot say (built without transparent huge pages, no smaps, no VmFlags line). */
static int advised_huge(const void *p)
{
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) != 0)
        return -1;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int found = -1;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
            continue;
        }
        if (in && strncmp(line, "VmFlags:", 8) == 0) {
            found = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 131);
}

static void expect_filled(const uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (uint8_t)(seed + i * 131))
            fail_msg("byte %zu of %zu changed", i, n);
}

static void expect_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            fail_msg("byte %zu of %zu is not zero", i, n);
}

static void test_small_blocks_are_plain(void **state)
{
    (void)state;
    uint8_t *p = gp__calloc_big(1000, 1);
    assert_non_null(p);
    expect_zero(p, 1000);
    fill(p, 1000, 7);
    p = gp__realloc_big(p, 1000, 4000);
    assert_non_null(p);
    expect_filled(p, 1000, 7);
    free(p);
    assert_null(gp__calloc_big(SIZE_MAX / 2, 4)); /* n * size overflows */
}

/* small -> big (moved to an aligned block), big -> bigger (realloc): the contents stay. */
static void test_growth_across_the_line(void **state)
{
    (void)state;
    size_t small = BIG / 2 + 12345;
    uint8_t *p = gp__realloc_big(NULL, 0, small);
    assert_non_null(p);
    fill(p, small, 3);
    p = gp__realloc_big(p, small, BIG + 1);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % BIG, 0);
    expect_filled(p, small, 3);
    fill(p, BIG + 1, 5);
    p = gp__realloc_big(p, BIG + 1, 3 * BIG);
    assert_non_null(p);
    expect_filled(p, BIG + 1, 5);
    int huge = advised_huge(p);
    if (huge >= 0)
        assert_int_equal(huge, 1);
    free(p);
}

static void test_big_blocks_aligned_zeroed_advised(void **state)
{
    (void)state;
    uint8_t *m = gp__malloc_big(BIG);
    uint8_t *c = gp__calloc_big(BIG / 8 + 3, 8);
    assert_non_null(m);
    assert_non_null(c);
    assert_int_equal((uintptr_t)m % BIG, 0);
    assert_int_equal((uintptr_t)c % BIG, 0);
    expect_zero(c, BIG + 24);
    int huge = advised_huge(m);
    if (huge < 0)
        print_message("no VmFlags in /proc/self/smaps: huge-page advice not checked\n");
    else
        assert_int_equal(huge, 1);
    free(m);
    free(c);
}

/* gp__grow_zeroed across the line: old entries kept, new ones zero. */
static void test_grow_zeroed(void **state)
{
    (void)state;
    uint64_t *v = NULL;
    size_t n = 0;
    for (size_t want = 1000; want < 3 * BIG / sizeof *v; want *= 3) {
        size_t had = n;
        assert_true(gp__grow_zeroed((void **)&v, &n, want, sizeof *v));
        assert_int_equal(n, want);
        for (size_t i = 0; i < had; i++)
            assert_int_equal(v[i], i * 7 + 1);
        expect_zero((const uint8_t *)(v + had), (want - had) * sizeof *v);
        for (size_t i = had; i < want; i++)
            v[i] = i * 7 + 1;
    }
    free(v);
}

/* gp__push and gp__push_big past the line: every element kept, each new one zeroed. */
static void test_push(void **state)
{
    (void)state;
    for (int big = 0; big < 2; big++) {
        uint64_t *v = NULL;
        size_t n = 0, cap = 0, want = 3 * BIG / sizeof *v;
        for (size_t i = 0; i < want; i++) {
            uint64_t *e = big ? gp__push_big((void **)&v, &n, &cap, sizeof *v)
                              : gp__push((void **)&v, &n, &cap, sizeof *v);
            assert_non_null(e);
            assert_int_equal(*e, 0);
            *e = i * 7 + 1;
        }
        assert_int_equal(n, want);
        for (size_t i = 0; i < want; i++)
            if (v[i] != i * 7 + 1)
                fail_msg("element %zu of %zu changed (gp__push%s)", i, want, big ? "_big" : "");
        free(v);
    }
}

/* A map grown far past 2 MiB of slots finds every key it was given, and none it was not. */
static void test_map_on_big_blocks(void **state)
{
    (void)state;
    gp_map m = {0};
    const size_t n = 300000; /* 512 K slots of 32 bytes at the end: 16 MiB */
    for (size_t i = 0; i < n; i++)
        assert_true(gp__map_put(&m, i, i * 3, 1, (uint32_t)i));
    for (size_t i = 0; i < n; i++) {
        struct gp_map_slot *s = gp__map_find(&m, i, i * 3, 1);
        assert_non_null(s);
        assert_int_equal(s->v, i);
    }
    assert_null(gp__map_find(&m, n, n * 3, 1));
    assert_true(m.cap * sizeof *m.slots >= BIG);
    gp__map_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_blocks_are_plain),
        cmocka_unit_test(test_growth_across_the_line),
        cmocka_unit_test(test_big_blocks_aligned_zeroed_advised),
        cmocka_unit_test(test_grow_zeroed),
        cmocka_unit_test(test_push),
        cmocka_unit_test(test_map_on_big_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
