/* The default allocator's buffer cache: reuse by exact size, the limit and its eviction order,
 * parameters left out, the bypass while gradprof records, a replaced allocator, contents, threads
 * and fork. The tests run in this order: the first one sees the process's first buffers (the
 * default limit follows their peak). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gradprof/tensor.h"
#include "xorshift.h"

static tn_tensor *floats(int64_t n)
{
    tn_tensor *t = tn_empty(1, (const int64_t[]){n}, LP_CAT_ACTIVATION);
    assert_non_null(t);
    return t;
}

/* By default the idle bytes never pass the peak of the bytes in use: two 8 KiB buffers (peak
 * 16 KiB) stay idle; a 32 KiB one raises the peak to 32 KiB and, freed, pushes them out. */
static void test_default_limit_is_the_peak_in_use(void **state)
{
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_tensor *a = floats(2048), *b = floats(2048);
    tn_release(a);
    tn_release(b);
    assert_int_equal(tn_cache_idle_bytes(), 16384);
    tn_tensor *c = floats(8192);
    assert_int_equal(tn_cache_idle_bytes(), 16384); /* no 32 KiB buffer was idle */
    tn_release(c);
    assert_int_equal(tn_cache_idle_bytes(), 32768);
    tn_cache_release();
    assert_int_equal(tn_cache_idle_bytes(), 0);
}

/* A freed buffer serves the next request of exactly its size, newest first; other sizes and
 * buffers under 256 bytes are not served from it. */
static void test_reuse_by_exact_size(void **state)
{
    tn_tensor *a = floats(1024), *b = floats(1024);
    const float *pa = tn_data(a), *pb = tn_data(b);
    tn_release(a);
    tn_release(b);
    assert_int_equal(tn_cache_idle_bytes(), 8192);
    tn_tensor *other = floats(1025);
    assert_ptr_not_equal(tn_data(other), pa);
    assert_ptr_not_equal(tn_data(other), pb);
    assert_int_equal(tn_cache_idle_bytes(), 8192);
    tn_tensor *c = floats(1024), *d = floats(1024);
    assert_ptr_equal(tn_data(c), pb);
    assert_ptr_equal(tn_data(d), pa);
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_tensor *small = floats(16); /* 64 bytes: straight back to malloc */
    tn_release(small);
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_release(other);
    tn_release(c);
    tn_release(d);
    tn_cache_release();
}

/* Parameters and optimizer state, made once and freed with their model or optimizer, go back to
 * malloc; a step's buffers of every other category are kept. */
static void test_parameters_go_back_to_malloc(void **state)
{
    const lp_category kept[] = {LP_CAT_INPUT, LP_CAT_ACTIVATION, LP_CAT_GRADIENT, LP_CAT_TEMPORARY};
    tn_tensor *t[4];
    for (int i = 0; i < 4; i++)
        t[i] = tn_empty(1, (const int64_t[]){1024}, kept[i]);
    for (int i = 0; i < 4; i++)
        tn_release(t[i]);
    assert_int_equal(tn_cache_idle_bytes(), 4 * 4096);
    tn_release(tn_empty(1, (const int64_t[]){1024}, LP_CAT_PARAMETER));
    tn_release(tn_empty(1, (const int64_t[]){2048}, LP_CAT_PARAMETER));
    tn_release(tn_empty(1, (const int64_t[]){2048}, LP_CAT_OPTIMIZER_STATE));
    assert_int_equal(tn_cache_idle_bytes(), 3 * 4096); /* one was taken, none came back */
    tn_cache_release();
}

/* Past the limit the least recently freed go back to malloc; lowering the limit trims at once; 0
 * turns the cache off; the previous limit is returned. */
static void test_limit_evicts_the_oldest(void **state)
{
    assert_int_equal(tn_cache_set_limit(3 * 4096), TN_CACHE_LIMIT_PEAK);
    tn_tensor *t[4];
    const float *data[4];
    for (int i = 0; i < 4; i++) {
        t[i] = floats(1024);
        data[i] = tn_data(t[i]);
    }
    for (int i = 0; i < 4; i++)
        tn_release(t[i]);
    assert_int_equal(tn_cache_idle_bytes(), 3 * 4096);
    for (int i = 3; i >= 1; i--) { /* data[0], the oldest, went back to malloc */
        t[i] = floats(1024);
        assert_ptr_equal(tn_data(t[i]), data[i]);
    }
    for (int i = 1; i < 4; i++)
        tn_release(t[i]);
    assert_int_equal(tn_cache_set_limit(4096), 3 * 4096);
    assert_int_equal(tn_cache_idle_bytes(), 4096);
    tn_tensor *kept = floats(1024);
    assert_ptr_equal(tn_data(kept), data[3]); /* the newest stayed */
    tn_release(kept);
    assert_int_equal(tn_cache_set_limit(0), 4096);
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_release(floats(4096));
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_cache_set_limit(TN_CACHE_LIMIT_PEAK);
}

/* A buffer from the cache is what its op makes of it: tn_zeros zeroes a reused one. */
static void test_reused_buffers_are_initialised(void **state)
{
    tn_tensor *dirty = tn_full(1, (const int64_t[]){4096}, 7.0f, LP_CAT_ACTIVATION);
    assert_non_null(dirty);
    const float *was = tn_data(dirty);
    tn_release(dirty);
    tn_tensor *z = tn_zeros(1, (const int64_t[]){4096}, LP_CAT_ACTIVATION);
    assert_ptr_equal(tn_data(z), was);
    for (int i = 0; i < 4096; i++)
        assert_true(tn_data(z)[i] == 0.0f);
    tn_release(z);
    tn_cache_release();
}

/* While gradprof records, nothing is kept and what was idle goes back to malloc at the next
 * request, so that a recording interposer sees every buffer freed with its tensor. */
static void test_bypassed_while_recording(void **state)
{
    char dir[] = "/tmp/gp_tensor_cache_XXXXXX";
    assert_non_null(mkdtemp(dir));
    tn_release(floats(1024));
    assert_int_equal(tn_cache_idle_bytes(), 4096);

    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s/t.gptrace", dir);
    assert_int_equal(lp_start(&o), 0);
    tn_tensor *t = floats(2048);
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_release(t);
    tn_release(floats(1024));
    assert_int_equal(tn_cache_idle_bytes(), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s", lp_output_path());
    lp_stop();

    tn_release(floats(1024)); /* recording ended: kept again */
    assert_int_equal(tn_cache_idle_bytes(), 4096);
    tn_cache_release();
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

static int custom_allocs;
static void *counting_alloc(size_t bytes, void *ctx)
{
    custom_allocs++;
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}
static void plain_free(void *p, void *ctx) { free(p); }

/* Replacing the allocator gives the idle buffers back, and a replaced allocator sees every
 * request. */
static void test_replaced_allocator_sees_every_request(void **state)
{
    tn_release(floats(1024));
    assert_int_equal(tn_cache_idle_bytes(), 4096);
    tn_set_allocator(&(tn_allocator){counting_alloc, plain_free, NULL});
    assert_int_equal(tn_cache_idle_bytes(), 0);
    for (int i = 0; i < 3; i++)
        tn_release(floats(1024));
    assert_int_equal(custom_allocs, 3);
    assert_int_equal(tn_cache_idle_bytes(), 0);
    tn_set_allocator(NULL);
}

/* Threads make and free buffers of a few sizes at once, each checking that its buffer held what it
 * wrote: no buffer is handed out twice (run under TSan by scripts/test.sh). */
static void *churn(void *arg)
{
    uint64_t seed = (uintptr_t)arg; /* 1 to 4 */
    tn_tensor *held[8] = {0};
    for (int i = 0; i < 20000; i++) {
        xorshift64(&seed);
        int slot = (int)((seed >> 16) % 8);
        if (held[slot]) {
            const float *d = tn_data(held[slot]);
            int64_t n = tn_numel(held[slot]);
            for (int64_t k = 0; k < n; k += 61)
                if (d[k] != (float)(uintptr_t)arg)
                    return "a buffer changed while its tensor held it";
            tn_release(held[slot]);
            held[slot] = NULL;
        } else {
            int64_t n = 64 << (seed >> 24) % 6; /* 64 to 2048 floats */
            held[slot] = tn_full(1, &n, (float)(uintptr_t)arg, LP_CAT_ACTIVATION);
            if (!held[slot])
                return "out of memory";
        }
    }
    for (int s = 0; s < 8; s++)
        tn_release(held[s]);
    return NULL;
}

static void test_threads_share_the_cache(void **state)
{
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *failure;
        assert_int_equal(pthread_join(th[i], &failure), 0);
        if (failure)
            fail_msg("%s", (const char *)failure);
    }
    tn_cache_release();
    assert_int_equal(tn_cache_idle_bytes(), 0);
}

static atomic_bool churning;
static void *churn_until_told(void *arg)
{
    while (atomic_load(&churning))
        tn_release(floats(1024));
    return NULL;
}

/* A child forked while another thread uses the cache can use it too: the lock is not left held
 * in the child (a child that hangs is killed by its alarm and the test fails). */
static void test_fork_while_another_thread_allocates(void **state)
{
    pthread_t th;
    atomic_store(&churning, true);
    assert_int_equal(pthread_create(&th, NULL, churn_until_told, NULL), 0);
    for (int i = 0; i < 50; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            alarm(10);
            tn_release(floats(1024));
            tn_release(floats(512));
            _exit(0);
        }
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    atomic_store(&churning, false);
    assert_int_equal(pthread_join(th, NULL), 0);
    tn_cache_release();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_limit_is_the_peak_in_use),
        cmocka_unit_test(test_reuse_by_exact_size),
        cmocka_unit_test(test_parameters_go_back_to_malloc),
        cmocka_unit_test(test_limit_evicts_the_oldest),
        cmocka_unit_test(test_reused_buffers_are_initialised),
        cmocka_unit_test(test_bypassed_while_recording),
        cmocka_unit_test(test_replaced_allocator_sees_every_request),
        cmocka_unit_test(test_threads_share_the_cache),
        cmocka_unit_test(test_fork_while_another_thread_allocates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
