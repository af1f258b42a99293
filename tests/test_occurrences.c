/* The diff's occurrence counts (tools/engine/occurrences.h): the index each buffer gets and the
 * counts by instance, against a plain table of every (kind, instance) on random runs with
 * regions nested out of order; and the memory bound: a loop adds no runs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "occurrences.h"
#include "xorshift.h"

/* Counts `n` buffers of one kind in one instance; asserts their indexes are base, base+1, ... */
static void count_n(gp_occurrences *o, uint64_t kind, bool scoped, uint64_t ordinal, uint64_t n,
                    uint64_t base)
{
    bool oom = false;
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(gp_occurrence_next(o, kind, scoped, ordinal, &oom), base + i);
    assert_false(oom);
}

static void test_unscoped_counts_on(void **state)
{
    (void)state;
    gp_occurrences o = {0};
    count_n(&o, 42, false, 0, 1000, 0);
    assert_int_equal(gp_occurrence_count(&o, 42, 0), 1000);
    assert_int_equal(gp_occurrence_count(&o, 43, 0), 0);
    assert_int_equal(gp_occurrence_count(&o, 42, 1), 0);
    assert_int_equal(o.n_runs, 0);
    gp_occurrences_free(&o);
}

/* A loop: every iteration enters the region once and makes three buffers of the kind in it; a
 * second kind only in every third iteration. Each kind keeps one run whatever the length. */
static void test_loop_keeps_one_run(void **state)
{
    (void)state;
    gp_occurrences o = {0};
    for (uint64_t it = 0; it < 10000; it++) {
        count_n(&o, 7, true, it, 3, 0);
        if (it % 3 == 0)
            count_n(&o, 8, true, it, 2, 0);
    }
    assert_int_equal(o.n_scoped, 2);
    assert_int_equal(o.n_runs, 2);
    for (uint64_t it = 0; it < 10000; it++) {
        assert_int_equal(gp_occurrence_count(&o, 7, it), 3);
        assert_int_equal(gp_occurrence_count(&o, 8, it), it % 3 == 0 ? 2 : 0);
    }
    assert_int_equal(gp_occurrence_count(&o, 7, 10000), 0);
    assert_int_equal(gp_occurrence_count(&o, 8, 10001), 0);
    gp_occurrences_free(&o);
}

/* Regions of one name nested on a thread: the outer instance's buffers come back after the inner
 * one's, and are counted on where they stopped. */
static void test_nested_instances(void **state)
{
    (void)state;
    gp_occurrences o = {0};
    count_n(&o, 9, true, 5, 2, 0); /* outer (instance 5) */
    count_n(&o, 9, true, 6, 3, 0); /* inner (6) */
    count_n(&o, 9, true, 5, 1, 2); /* outer again */
    count_n(&o, 9, true, 7, 1, 0); /* the next inner (7) */
    count_n(&o, 9, true, 5, 2, 3); /* outer again */
    count_n(&o, 9, true, 4, 1, 0); /* an instance never seen, older than the latest */
    assert_int_equal(gp_occurrence_count(&o, 9, 5), 5);
    assert_int_equal(gp_occurrence_count(&o, 9, 6), 3);
    assert_int_equal(gp_occurrence_count(&o, 9, 7), 1);
    assert_int_equal(gp_occurrence_count(&o, 9, 4), 1);
    assert_int_equal(gp_occurrence_count(&o, 9, 3), 0);
    gp_occurrences_free(&o);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(uint64_t n)
{
    return xorshift64(&rng_state) % n;
}

#define KINDS 6
#define INSTANCES 400

/* Random runs: each kind moves forward through instances (by 1-3, sometimes back by a few, as
 * nested regions do) making 0-3 buffers in each visit. Every index and every count must be the
 * plain table's. */
static void test_random_against_table(void **state)
{
    (void)state;
    for (int round = 0; round < 50; round++) {
        gp_occurrences o = {0};
        static uint64_t table[KINDS][INSTANCES + 1];
        uint64_t at[KINDS] = {0};
        memset(table, 0, sizeof table);
        bool oom = false;
        for (int step = 0; step < 4000; step++) {
            int k = (int)rng(KINDS);
            bool scoped = k != 0; /* kind 0 is unscoped: always instance 0 */
            uint64_t ord = 0;
            if (scoped) {
                uint64_t r = rng(10);
                if (r < 6 && at[k] + 3 <= INSTANCES)
                    at[k] += rng(3); /* forward, or stay */
                ord = at[k];
                if (r >= 8 && ord >= 3)
                    ord -= 1 + rng(3); /* back into an outer instance */
            }
            uint64_t n = rng(4);
            for (uint64_t i = 0; i < n; i++)
                assert_int_equal(gp_occurrence_next(&o, 1000 + (uint64_t)k, scoped, ord, &oom),
                                 table[k][ord]++);
        }
        assert_false(oom);
        for (int k = 0; k < KINDS; k++)
            for (uint64_t ord = 0; ord <= INSTANCES; ord++)
                assert_int_equal(gp_occurrence_count(&o, 1000 + (uint64_t)k, ord), table[k][ord]);
        gp_occurrences_free(&o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unscoped_counts_on),
        cmocka_unit_test(test_loop_keeps_one_run),
        cmocka_unit_test(test_nested_instances),
        cmocka_unit_test(test_random_against_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
