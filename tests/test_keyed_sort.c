/* The analysers' large sorts: gp__sort_keyed (tools/engine/keyed_sort.h) against qsort, and the
 * call-site labels that tell rows apart (gp_labels_distinct, analysis.h) against a reference that
 * compares every pair of rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis.h"
#include "keyed_sort.h"
#include "xorshift.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(uint64_t n)
{
    return xorshift64(&rng_state) % n;
}

static int cmp_keyed(const void *x, const void *y)
{
    const gp_keyed *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index); /* stable: input order */
}

/* Sorts n random keys of the given spread and checks order and stability against qsort. */
static void check_sort(size_t n, uint64_t (*key)(void))
{
    gp_keyed *v = malloc(2 * (n ? n : 1) * sizeof *v), *want = malloc((n ? n : 1) * sizeof *want);
    assert_non_null(v);
    assert_non_null(want);
    for (size_t i = 0; i < n; i++)
        want[i] = v[i] = (gp_keyed){key(), i};
    qsort(want, n, sizeof *want, cmp_keyed);
    const gp_keyed *got = gp__sort_keyed(v, v + n, n);
    assert_true(got == v || got == v + n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(got[i].key, want[i].key);
        assert_int_equal(got[i].index, want[i].index);
    }
    free(v);
    free(want);
}

/* Keys with many ties (one pass), over all eight bytes, varying only in the outer bytes, and all
 * equal (every pass skipped). */
static uint64_t small_key(void)
{
    return rng(50);
}

static uint64_t wide_key(void)
{
    return rng_state ^= rng_state << 9;
}

static uint64_t high_key(void)
{
    return rng(4) << 56 | rng(3);
}

static uint64_t same_key(void)
{
    return 0x0102030405060708ull;
}

static void test_sort_keyed_like_qsort(void **state)
{
    (void)state;
    size_t sizes[] = {0, 1, 2, 3, 255, 256, 257, 10000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        check_sort(sizes[s], small_key);
        check_sort(sizes[s], wide_key);
        check_sort(sizes[s], high_key);
        check_sort(sizes[s], same_key);
    }
}

/* How many leading ';'-separated frames two keys share, frame by frame from copies split up. */
static size_t frames_in_common(const char *a, const char *b)
{
    char ca[64], cb[64];
    snprintf(ca, sizeof ca, "%s", a);
    snprintf(cb, sizeof cb, "%s", b);
    char *sa = NULL, *sb = NULL;
    size_t n = 0;
    for (char *fa = strtok_r(ca, ";", &sa), *fb = strtok_r(cb, ";", &sb);
         fa && fb && !strcmp(fa, fb); fa = strtok_r(NULL, ";", &sa), fb = strtok_r(NULL, ";", &sb))
        n++;
    return n;
}

/* How a frame is shown: by its short name, its signature, or as it is. */
enum { SHORT, SIGNATURE, FULL };

/* Frame n of key (its first is 0), copied into buf in `form`; NULL past the end. */
static const char *nth_frame(const char *key, size_t n, int form, char *buf, size_t size)
{
    for (size_t k = 0; k < n && key; k++) {
        key = strchr(key, ';');
        key = key ? key + 1 : NULL;
    }
    if (!key)
        return NULL;
    char frame[256];
    snprintf(frame, sizeof frame, "%.*s", (int)strcspn(key, ";"), key);
    snprintf(buf, size, "%s",
             form == SHORT       ? gp_function_short_name(frame, buf + size, size)
             : form == SIGNATURE ? gp_function_signature(frame, buf + size, size)
                                 : frame);
    return buf;
}

/* What gp_labels_distinct promises for row i, from every other row: NULL when no row with another
 * key has its label; else "LABEL via F", F the first frame of its key past the most frames it
 * shares with such a row, by its short name unless such a row sharing as many frames has one of
 * that short name there, then by its signature unless such a row has that signature there, else
 * as it is; or "LABEL (outermost)" when its key has no frame there. */
static char *reference_label(const char *const *labels, const char *const *keys, size_t n, size_t i)
{
    size_t lcp = 0;
    int others = 0;
    for (size_t j = 0; j < n; j++) {
        if (j == i || strcmp(labels[j], labels[i]) != 0 || strcmp(keys[j], keys[i]) == 0)
            continue;
        others++;
        size_t c = frames_in_common(keys[i], keys[j]);
        lcp = c > lcp ? c : lcp;
    }
    if (!others)
        return NULL;
    char mine[512], theirs[512];
    int form = SHORT;
    for (bool apart = false; !apart && form != FULL;) {
        apart = nth_frame(keys[i], lcp, form, mine, 256) != NULL;
        for (size_t j = 0; j < n && apart; j++)
            if (j != i && !strcmp(labels[j], labels[i]) && strcmp(keys[j], keys[i]) &&
                frames_in_common(keys[i], keys[j]) == lcp &&
                nth_frame(keys[j], lcp, form, theirs, 256))
                apart = strcmp(mine, theirs) != 0;
        form += !apart;
    }
    const char *f = nth_frame(keys[i], lcp, form, mine, 256);
    char *out = malloc(strlen(labels[i]) + strlen(keys[i]) + 16);
    assert_non_null(out);
    if (f)
        sprintf(out, "%s via %s", labels[i], f);
    else
        sprintf(out, "%s (outermost)", labels[i]);
    return out;
}

static void check_labels(const char *const *labels, const char *const *keys, size_t n)
{
    char **got = calloc(n ? n : 1, sizeof *got);
    assert_non_null(got);
    assert_int_equal(gp_labels_distinct(labels, keys, n, got), 0);
    for (size_t i = 0; i < n; i++) {
        char *want = reference_label(labels, keys, n, i);
        if (n < 2 || !want)
            assert_null(got[i]);
        else
            assert_string_equal(got[i], want);
        free(want);
        free(got[i]);
    }
    free(got);
}

static void test_labels_by_hand(void **state)
{
    (void)state;
    /* equal texts at different addresses (two runs intern their own) are one label */
    char f_a[] = "f", f_b[] = "f";
    const char *labels[] = {f_a, "g", f_b, f_a, "h"};
    const char *keys[] = {"f;main;start", "g;main", "f;run;start", "f", "h;x"};
    char *got[5];
    assert_int_equal(gp_labels_distinct(labels, keys, 5, got), 0);
    assert_string_equal(got[0], "f via main");
    assert_null(got[1]);
    assert_string_equal(got[2], "f via run");
    assert_string_equal(got[3], "f (outermost)");
    assert_null(got[4]);
    for (int i = 0; i < 5; i++)
        free(got[i]);
    check_labels(labels, keys, 5);

    /* C++ frames by their short names, unless two keys would then read the same */
    const char *same[] = {"at::empty", "at::empty", "at::empty", "x"};
    const char *overloads[] = {"at::empty(int);ns::run(int)", "at::empty(int);ns::go<int>(int)",
                               "at::empty(long);ns::run(int)", "x"};
    assert_int_equal(gp_labels_distinct(same, overloads, 4, got), 0);
    assert_string_equal(got[0], "at::empty via ns::run");
    assert_string_equal(got[1], "at::empty via ns::go");
    assert_string_equal(got[2], "at::empty via at::empty(long)"); /* its neighbour's, when short */
    assert_null(got[3]);
    for (int i = 0; i < 4; i++)
        free(got[i]);
    const char *callers[] = {"at::empty(int);ns::run(int)", "at::empty(int);ns::go<int>(int)",
                             "at::empty(int)", "x"};
    assert_int_equal(gp_labels_distinct(same, callers, 4, got), 0);
    assert_string_equal(got[0], "at::empty via ns::run");
    assert_string_equal(got[1], "at::empty via ns::go");
    assert_string_equal(got[2], "at::empty (outermost)");
    for (int i = 0; i < 4; i++)
        free(got[i]);
    check_labels(same, overloads, 4);
    check_labels(same, callers, 4);
}

static void test_labels_random_against_reference(void **state)
{
    (void)state;
    static const char *const frames[] = {"a",
                                         "b(int)",
                                         "b(long)",
                                         "cc<int>(int)",
                                         "cc<long>(int)",
                                         "d<int>(int) const",
                                         "d<int>(long)",
                                         "d<int>(long) &",
                                         "main"};
    const uint64_t n_frames = sizeof frames / sizeof *frames;
    for (int round = 0; round < 40; round++) {
        size_t n = 1 + rng(60);
        char **labels = calloc(n, sizeof *labels), **keys = calloc(n, sizeof *keys);
        assert_non_null(labels);
        assert_non_null(keys);
        for (size_t i = 0; i < n; i++) {
            labels[i] = malloc(8);
            keys[i] = malloc(128);
            assert_non_null(labels[i]);
            assert_non_null(keys[i]);
            snprintf(labels[i], 8, "L%d", (int)rng(6));
            size_t depth = 1 + rng(4), used = 0;
            keys[i][0] = '\0';
            for (size_t k = 0; k < depth; k++)
                used += (size_t)snprintf(keys[i] + used, 128 - used, "%s%s", k ? ";" : "",
                                         frames[rng(n_frames)]);
        }
        check_labels((const char *const *)labels, (const char *const *)keys, n);
        for (size_t i = 0; i < n; i++) {
            free(labels[i]);
            free(keys[i]);
        }
        free(labels);
        free(keys);
    }
}

/* Names in the tables' tie order: digit runs by value, the rest by byte, a total order. */
static void test_natural_order(void **state)
{
    (void)state;
    static const char *const ascending[] = {"",
                                            "0",
                                            "1",
                                            "2",
                                            "10",
                                            "a",
                                            "enc.2",
                                            "enc.10",
                                            "encoder_layer_2",
                                            "encoder_layer_10",
                                            "tensor.c:54",
                                            "tensor.c:120",
                                            "x9y",
                                            "x10a"};
    size_t n = sizeof ascending / sizeof *ascending;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            int c = gp_natural_cmp(ascending[i], ascending[j]);
            if ((i < j && c >= 0) || (i > j && c <= 0) || (i == j && c != 0))
                fail_msg("'%s' vs '%s': %d", ascending[i], ascending[j], c);
        }
    /* equal by value, still ordered and never 0 */
    assert_true(gp_natural_cmp("07", "7") != 0);
    assert_true(gp_natural_cmp("07", "7") == -gp_natural_cmp("7", "07"));
    /* antisymmetric and transitive on random names of digits and letters */
    char names[200][8];
    for (size_t i = 0; i < 200; i++) {
        size_t len = rng(7);
        for (size_t k = 0; k < len; k++)
            names[i][k] = "0019ab_"[rng(7)];
        names[i][len] = '\0';
    }
    for (size_t i = 0; i < 200; i++)
        for (size_t j = 0; j < 200; j++) {
            int ij = gp_natural_cmp(names[i], names[j]), ji = gp_natural_cmp(names[j], names[i]);
            assert_true((ij > 0) == (ji < 0) && (ij == 0) == (strcmp(names[i], names[j]) == 0));
            for (size_t k = 0; ij < 0 && k < 200; k += 7)
                if (gp_natural_cmp(names[j], names[k]) < 0)
                    assert_true(gp_natural_cmp(names[i], names[k]) < 0);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sort_keyed_like_qsort),
        cmocka_unit_test(test_natural_order),
        cmocka_unit_test(test_labels_by_hand),
        cmocka_unit_test(test_labels_random_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
