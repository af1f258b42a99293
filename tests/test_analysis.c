/*
 * The replay engine on the fixture traces (tests/traces/make_traces.c says what each holds). Every
 * expected number below is worked out by hand from that file:
 *   parameters 2*(256*256*4 + 256*4) + 10*256*4 + 10*4 = 536616 B, input 32*256*4 = 32768 B,
 *   an activation A = 32768 B, a graph node N = 512 B, the MLP output 32*10*4 = 1280 B.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis.h"
#include "rules.h"
#include "traces/trace_builder.h"

enum { PARAMS = 536616, INPUT = 32768, A = 32768, N = 512, OUT = 1280 };

/* The profile of the trace at `path` (default options), or the test fails. */
static gp_profile *load_path(const char *path)
{
    char err[512];
    gp_profile *p = NULL;
    if (gp_profile_load(path, NULL, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    return p;
}

static gp_profile *load(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.gptrace", GRADPROF_TEST_TRACES, name);
    return load_path(path);
}

static const gp_finding *finding(const gp_profile *p, gp_finding_kind kind)
{
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == kind)
            return &p->findings[i];
    return NULL;
}

static uint64_t at_peak(const gp_profile *p, lp_category c)
{
    return p->devices[0].by_category_at_peak[c];
}

/* Sums of a table's peak_bytes equal the peak: every buffer is in exactly one row. */
static void assert_tables_sum_to_peak(const gp_profile *p)
{
    uint64_t keys = 0, sites = 0, modules = 0, cats = 0;
    for (size_t i = 0; i < p->n_tag_keys; i++)
        if (p->tag_keys[i].device == p->primary_device)
            keys += p->tag_keys[i].stats.peak_bytes;
    for (size_t i = 0; i < p->n_sites; i++)
        if (gp_site_device(p, &p->sites[i]) == p->primary_device)
            sites += p->sites[i].stats.peak_bytes;
    for (size_t i = 0; i < p->n_modules; i++)
        if (p->modules[i].device == p->primary_device)
            modules += p->modules[i].stats.peak_bytes;
    for (int c = 0; c < LP_CAT_COUNT; c++)
        cats += at_peak(p, (lp_category)c);
    assert_int_equal(keys, p->peak_bytes);
    assert_int_equal(sites, p->peak_bytes);
    assert_int_equal(modules, p->peak_bytes);
    assert_int_equal(cats, p->peak_bytes);
}

static void test_mlp_grad(void **state)
{
    gp_profile *p = load("mlp_grad");
    /* The peak: inside iteration 0's second ReLU, once its graph node exists: the first ReLU
     * output (saved), the second linear output and ReLU output, four nodes. */
    assert_int_equal(p->peak_bytes, PARAMS + INPUT + 3 * A + 4 * N);
    assert_int_equal(at_peak(p, LP_CAT_PARAMETER), PARAMS);
    assert_int_equal(at_peak(p, LP_CAT_INPUT), INPUT);
    assert_int_equal(at_peak(p, LP_CAT_ACTIVATION), 2 * A);
    assert_int_equal(at_peak(p, LP_CAT_SAVED), A);
    assert_int_equal(at_peak(p, LP_CAT_AUTOGRAD), 4 * N);
    assert_int_equal(at_peak(p, LP_CAT_OTHER), 0); /* tags replace the raw category */
    assert_int_equal(p->peak_time_ns, 60000);      /* first reached in iteration 0 */
    assert_tables_sum_to_peak(p);
    /* 7 parameter/input buffers + 4 iterations x 10 buffers */
    assert_int_equal(p->alloc_count, 7 + 4 * 10);
    assert_int_equal(p->free_count, 4 * 10);
    assert_int_equal(p->leaked_bytes, PARAMS + INPUT);
    assert_int_equal(p->retag_count, 4 * 4); /* two saves and two releases per iteration */
    assert_int_equal(p->n_iterations, 4);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(p->iterations[i].live_bytes, PARAMS + INPUT);
    /* saved tensors */
    assert_int_equal(p->n_saved, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_string_equal(p->saved[i].op, "relu");
        assert_string_equal(p->saved[i].shape, "[32,256]");
        assert_int_equal(p->saved[i].stats.count, 4);
        assert_int_equal(p->saved[i].stats.total_bytes, 4 * A);
    }
    /* regions: "inference" retains the output and its graph at every exit */
    bool seen = false;
    for (size_t i = 0; i < p->n_regions; i++)
        if (!strcmp(p->regions[i].name, "inference")) {
            seen = true;
            assert_int_equal(p->regions[i].entries, 4);
            assert_int_equal(p->regions[i].retained_bytes, OUT + 2 * A + 5 * N);
        }
    assert_true(seen);
    /* detectors: grad left on in "inference" (both saves and all nodes); each iteration's graph
     * is released before the next one, so none is kept beyond the next iteration: no escape */
    const gp_finding *f = finding(p, GP_FIND_FORGOT_NO_GRAD);
    assert_non_null(f);
    assert_string_equal(f->region, "inference");
    assert_int_equal(f->bytes, 4 * (2 * A + 5 * N));
    assert_int_equal(f->n_items, 7);
    assert_int_equal(f->items[0].category, LP_CAT_SAVED);
    assert_string_equal(f->items[0].op, "relu");
    assert_null(finding(p, GP_FIND_GRAPH_ESCAPES));
    assert_null(finding(p, GP_FIND_GROWTH));
    assert_null(finding(p, GP_FIND_GRAPH_WITHOUT_GRAD));
    assert_null(finding(p, GP_FIND_PARAM_GRAD_IN_INFERENCE));
    gp_profile_free(p);
}

static void test_mlp_nograd(void **state)
{
    gp_profile *p = load("mlp_nograd");
    /* the peak: a linear output and a ReLU output at once, nothing saved */
    assert_int_equal(p->peak_bytes, PARAMS + INPUT + 2 * A);
    assert_int_equal(at_peak(p, LP_CAT_ACTIVATION), 2 * A);
    assert_int_equal(at_peak(p, LP_CAT_SAVED), 0);
    assert_int_equal(at_peak(p, LP_CAT_AUTOGRAD), 0);
    assert_tables_sum_to_peak(p);
    assert_int_equal(p->n_saved, 0);
    assert_int_equal(p->n_findings, 0); /* every detector's negative case */
    gp_profile_free(p);
}

static void test_leak_accumulate_grows(void **state)
{
    gp_profile *p = load("leak_accumulate");
    const uint64_t kept = OUT + 2 * A + 5 * N; /* what each iteration leaves alive */
    assert_int_equal(p->n_iterations, 6);
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(p->iterations[i].live_bytes, PARAMS + INPUT + i * kept);
    assert_int_equal(p->peak_bytes, PARAMS + INPUT + 5 * kept + 3 * A + 4 * N);
    assert_tables_sum_to_peak(p);
    /* Growth judges graph memory (saved + autograd) from mark 1 on (mark 0 warms up): 4 more
     * iterations' graphs at the last mark, growing in all 4 intervals. */
    const uint64_t graph = 2 * A + 5 * N;
    const gp_finding *f = finding(p, GP_FIND_GROWTH);
    assert_non_null(f);
    assert_int_equal(f->bytes, 4 * graph);
    assert_int_equal(f->count, 4);
    uint64_t items = 0;
    for (size_t i = 0; i < f->n_items; i++) {
        assert_true(lp_category_is_graph(f->items[i].category)); /* each graph key, not a site */
        items += f->items[i].bytes;
    }
    assert_int_equal(items, 4 * graph); /* the growing graph keys explain all of it */
    /* Every iteration's saved tensors are kept beyond the next iteration: iterations 0..3 are
     * judged when 2..5 begin, iteration 4 at the end of the trace, once 5 has ended (the last
     * cannot be: no iteration comes after it). */
    f = finding(p, GP_FIND_GRAPH_ESCAPES);
    assert_non_null(f);
    assert_int_equal(f->bytes, 5 * 2 * A);
    assert_int_equal(f->peak_bytes, 5 * 2 * A); /* all of them alive at the end */
    assert_int_equal(p->leaked_bytes, PARAMS + INPUT + 6 * kept);
    gp_profile_free(p);
}

/* A window of the last two outputs with their graphs: iterations 0..3 escape (each is alive
 * when the one after the next begins) and iteration 4 (alive at the end, after iteration 5), but
 * each is released during the iteration after its next: one escaped graph is alive at a time,
 * and nothing grows. */
static void test_leak_window_escapes_one_at_a_time(void **state)
{
    gp_profile *p = load("leak_window");
    const gp_finding *f = finding(p, GP_FIND_GRAPH_ESCAPES);
    assert_non_null(f);
    assert_int_equal(f->bytes, 5 * 2 * A);
    assert_int_equal(f->count, 5 * 2);
    assert_int_equal(f->peak_bytes, 2 * A);
    assert_null(finding(p, GP_FIND_GROWTH));
    gp_profile_free(p);
}

static void test_raw_sites_temporaries_leaks_devices(void **state)
{
    gp_profile *p = load("raw");
    /* host: two leaked blocks and ten 2 KiB blocks from the worker at once */
    assert_int_equal(p->peak_bytes, 4096 + 1000 + 10 * 2048);
    assert_int_equal(at_peak(p, LP_CAT_OTHER), p->peak_bytes);
    assert_int_equal(p->leaked_bytes, 4096 + 1000);
    assert_int_equal(p->leaked_count, 2);
    assert_int_equal(p->unknown_frees, 1);
    /* 100 alloc/free pairs, the worker's last block, main's device block (freed before main
     * allocated again) */
    assert_int_equal(p->temporary_count, 102);
    assert_int_equal(p->n_devices, 2);
    const gp_device_stats *cuda = &p->devices[1];
    assert_int_equal(cuda->device, 0);
    assert_int_equal(cuda->peak_bytes, 1 << 20);
    assert_int_equal(cuda->live_bytes, 0);
    assert_tables_sum_to_peak(p);
    /* three call sites on the host (hot, leaky, cold) plus the device one */
    uint64_t leaked = 0;
    for (size_t i = 0; i < p->n_sites; i++)
        leaked += p->sites[i].stats.live_bytes;
    assert_int_equal(leaked, 4096 + 1000);
    size_t *order = gp_sites_by(p, "total");
    assert_non_null(order);
    assert_int_equal(p->sites[order[0]].stats.total_bytes, 1 << 20); /* the device block */
    assert_int_equal(gp_site_device(p, &p->sites[order[0]]), 0);
    assert_int_equal(p->sites[order[1]].stats.total_bytes, 20480); /* the worker's */
    assert_int_equal(p->sites[order[2]].stats.total_bytes, 100 * 64); /* the temporaries */
    assert_int_equal(p->sites[order[2]].stats.temporaries, 100);
    free(order);
    assert_int_equal(p->n_findings, 0);
    gp_profile_free(p);
}

/* Every counter of a and b is the same (snap_epoch is the engine's own). */
static void assert_same_stats(const gp_stats *a, const gp_stats *b)
{
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->total_bytes, b->total_bytes);
    assert_int_equal(a->frees, b->frees);
    assert_int_equal(a->live_bytes, b->live_bytes);
    assert_int_equal(a->live_count, b->live_count);
    assert_int_equal(a->peak_bytes, b->peak_bytes);
    assert_int_equal(a->max_live_bytes, b->max_live_bytes);
    assert_int_equal(a->temporaries, b->temporaries);
}

/* without_sites: the replay counts nothing per site, and everything else is as in a full load
 * (totals, every tag key, module and saved-tensor key, findings), on every fixture trace: raw
 * allocations, tags and retags, devices, regions, a damaged file. Stacks are labelled the same. */
static void test_without_sites(void **state)
{
    (void)state;
    const char *const names[] = {"raw",      "detectors",  "leak_accumulate",
                                 "mlp_grad", "mlp_nograd", "damaged"};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%s.gptrace", GRADPROF_TEST_TRACES, names[n]);
        gp_analysis_options o;
        gp_analysis_options_default(&o);
        o.without_sites = true;
        gp_profile *full = load(names[n]), *lean = NULL;
        if (gp_profile_load(path, &o, &lean, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(lean->n_sites, 0);
        assert_null(lean->sites);
        assert_true(full->n_sites > 0);
        assert_int_equal(lean->alloc_count, full->alloc_count);
        assert_int_equal(lean->retag_count, full->retag_count);
        assert_int_equal(lean->peak_bytes, full->peak_bytes);
        assert_int_equal(lean->leaked_bytes, full->leaked_bytes);
        assert_int_equal(lean->temporary_count, full->temporary_count);
        assert_int_equal(lean->n_devices, full->n_devices);
        assert_memory_equal(lean->devices, full->devices, full->n_devices * sizeof *full->devices);
        assert_int_equal(lean->n_tag_keys, full->n_tag_keys);
        for (size_t i = 0; i < lean->n_tag_keys; i++) {
            assert_int_equal(lean->tag_keys[i].category, full->tag_keys[i].category);
            assert_same_stats(&lean->tag_keys[i].stats, &full->tag_keys[i].stats);
            assert_int_equal(lean->tag_keys[i].top_site, UINT32_MAX);
        }
        assert_int_equal(lean->n_modules, full->n_modules);
        for (size_t i = 0; i < lean->n_modules; i++)
            assert_same_stats(&lean->modules[i].stats, &full->modules[i].stats);
        assert_int_equal(lean->n_saved, full->n_saved);
        for (size_t i = 0; i < lean->n_saved; i++)
            assert_same_stats(&lean->saved[i].stats, &full->saved[i].stats);
        assert_int_equal(lean->n_findings, full->n_findings);
        for (size_t i = 0; i < lean->n_findings; i++) {
            assert_int_equal(lean->findings[i].kind, full->findings[i].kind);
            assert_int_equal(lean->findings[i].bytes, full->findings[i].bytes);
        }
        for (size_t i = 0; i < full->n_sites; i++) {
            uint32_t stack = full->sites[i].stack;
            assert_string_equal(gp_site_label(lean, stack), gp_site_label(full, stack));
            assert_string_equal(gp_site_key(lean, stack), gp_site_key(full, stack));
        }
        gp_profile_free(lean);
        gp_profile_free(full);
    }
}

static void test_detectors_positive_and_negative(void **state)
{
    gp_profile *p = load("detectors");
    const gp_finding *f = finding(p, GP_FIND_GRAPH_WITHOUT_GRAD);
    assert_non_null(f);
    assert_int_equal(f->bytes, 512); /* not the node made inside enable_grad */
    assert_int_equal(f->n_items, 1);
    assert_string_equal(f->items[0].op, "custom_op");
    f = finding(p, GP_FIND_PARAM_GRAD_IN_INFERENCE);
    assert_non_null(f);
    assert_int_equal(f->bytes, 4096); /* not the one inside "backward" */
    assert_string_equal(f->items[0].op, "accumulate_grad");
    assert_null(finding(p, GP_FIND_FORGOT_NO_GRAD));
    gp_profile_free(p);
}

static void test_damaged_trace_is_not_an_error(void **state)
{
    gp_profile *p = load("damaged");
    assert_true(p->info->damaged);
    assert_true(p->info->bytes_lost > 0);
    assert_false(p->info->clean_end);
    assert_int_equal(p->peak_bytes, PARAMS + INPUT + 3 * A + 4 * N); /* before the damage */
    gp_profile_free(p);
}

static void test_errors(void **state)
{
    gp_profile *p = (gp_profile *)1;
    char err[512];
    assert_int_equal(gp_profile_load("/nonexistent/x.gptrace", NULL, &p, err, sizeof err), -1);
    assert_null(p);
    assert_non_null(strstr(err, "/nonexistent/x.gptrace"));
    gp_profile_free(NULL);
}

static void test_timeline_keeps_the_peak(void **state)
{
    gp_profile *p = load("leak_accumulate");
    uint64_t max = 0;
    for (size_t i = 0; i < p->n_timeline; i++) {
        if (p->timeline[i].max_total > max)
            max = p->timeline[i].max_total;
        if (i)
            assert_true(p->timeline[i].time_ns > p->timeline[i - 1].time_ns);
    }
    assert_int_equal(max, p->peak_bytes);
    assert_true(p->n_timeline <= 512);
    gp_profile_free(p);
}

/* ---- Python frames ("py:" modules, trace format 1.1) ----------------------------------------- */

enum { M_C10 = 1, M_TORCH, M_LINEAR, M_MAIN, M_MODULE, M_HOOK, M_STEP };

/* A PyTorch-like program: native frames of libc10 (allocator plumbing, unsymbolized) and
 * libtorch_cpu under Python frames of torch's own files and of the program's eval.py. */
static const char *python_trace(void)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/python_frames_%d.gptrace", GRADPROF_TEST_TRACES, (int)getpid());
    tb *b = tb_open(path, "python3 eval.py");
    assert_non_null(b);
    tb_module(b, M_C10, 0x7f0000000000, 0x100000, "/nonexistent/libc10.so.1.13", "");
    tb_module(b, M_TORCH, 0x7f1000000000, 0x100000, "/nonexistent/libtorch_cpu.so.1.13", "");
    tb_module(b, M_LINEAR, 0, 0,
              "py:/usr/lib/python3/dist-packages/torch/nn/modules/linear.py:Linear.forward", "");
    tb_module(b, M_MAIN, 0, 0, "py:/srv/app/eval.py:main", "");
    tb_module(b, M_MODULE, 0, 0, "py:/srv/app/eval.py:<module>", "");
    tb_module(b, M_HOOK, 0, 0, "py:/srv/app/eval.py:hook", "");
    tb_module(b, M_STEP, 0, 0, "py:/srv/app/eval.py:train_step", "");
    tb_thread(b, 1, "main");
    /* the same native path from two lines of main(), then from torch's code only, then none */
    const uint32_t mods[] = {M_C10, M_TORCH, M_LINEAR, M_MAIN, M_MODULE};
    const uint64_t line36[] = {0x10, 0x20, 114, 36, 50}, line37[] = {0x10, 0x20, 114, 37, 50};
    uint32_t s36 = tb_stack(b, 5, mods, line36), s37 = tb_stack(b, 5, mods, line37);
    uint32_t torch_only = tb_stack(b, 3, mods, line36), native = tb_stack(b, 2, mods, line36);
    /* train_step (a rule says gradient) calls hook, which allocates: hook is a boundary */
    const uint32_t hook_mods[] = {M_C10, M_HOOK, M_STEP}, step_mods[] = {M_C10, M_STEP};
    const uint64_t hook_offs[] = {0x10, 7, 20}, step_offs[] = {0x10, 21};
    uint32_t in_hook = tb_stack(b, 3, hook_mods, hook_offs);
    uint32_t in_step = tb_stack(b, 2, step_mods, step_offs);
    uint64_t t = 1000, addr = 0x10000;
    const uint32_t stacks[] = {s36, s37, torch_only, native, in_hook, in_step};
    for (size_t i = 0; i < sizeof stacks / sizeof *stacks; i++) {
        tb_at(b, t += 100);
        tb_alloc(b, addr + i * 0x1000, 1000 + i, stacks[i]);
    }
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    return path;
}

/* The site of the allocation of `size` bytes. */
static const gp_site *site_of_size(const gp_profile *p, uint64_t size)
{
    for (size_t i = 0; i < p->n_sites; i++)
        if (p->sites[i].stats.total_bytes == size)
            return &p->sites[i];
    fail_msg("no site allocated %llu bytes", (unsigned long long)size);
    return NULL;
}

static void test_python_frames_label_sites(void **state)
{
    (void)state;
    const char *path = python_trace();
    char err[512];
    gp_rules *rules = gp_rules_parse("gradient train_step\n", "t", err, sizeof err);
    assert_non_null(rules);
    gp_analysis_options o;
    gp_analysis_options_default(&o);
    o.rules = rules;
    gp_profile *p = NULL;
    if (gp_profile_load(path, &o, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    /* two Python lines over one native path: two sites, each named by the program's line */
    const gp_site *a = site_of_size(p, 1000), *b = site_of_size(p, 1001);
    assert_int_not_equal(a->stack, b->stack);
    assert_string_equal(gp_site_label(p, a->stack), "eval.py:36 (main)");
    assert_string_equal(gp_site_label(p, b->stack), "eval.py:37 (main)");
    assert_string_not_equal(gp_site_key(p, a->stack), gp_site_key(p, b->stack));
    /* frames: libc10's unsymbolized allocator frame is plumbing; Python frames read as in a
     * traceback */
    const char *frames[8];
    size_t n = gp_site_frames(p, a->stack, frames, 8);
    assert_int_equal(n, 4);
    assert_string_equal(frames[0], "libtorch_cpu.so.1.13+0x20");
    assert_string_equal(frames[1], "linear.py:114 (Linear.forward)");
    assert_string_equal(frames[2], "eval.py:36 (main)");
    assert_string_equal(frames[3], "eval.py:50 (<module>)");
    /* the program's own lines: not torch's Python, not native code */
    n = gp_site_program_frames(p, a->stack, frames, 8);
    assert_int_equal(n, 2);
    assert_string_equal(frames[0], "eval.py:36 (main)");
    assert_string_equal(frames[1], "eval.py:50 (<module>)");
    assert_int_equal(gp_site_program_frames(p, a->stack, frames, 1), 1);
    assert_int_equal(gp_site_program_frames(p, site_of_size(p, 1002)->stack, frames, 8), 0);
    /* only torch's Python frames: the native label */
    assert_string_equal(gp_site_label(p, site_of_size(p, 1002)->stack),
                        "libtorch_cpu.so.1.13+0x20");
    assert_string_equal(gp_site_label(p, site_of_size(p, 1003)->stack),
                        "libtorch_cpu.so.1.13+0x20");
    /* Python frames are rule boundaries: train_step's rule does not reach into hook */
    assert_int_equal(gp_site_category(p, site_of_size(p, 1004)), LP_CAT_OTHER);
    assert_string_equal(gp_site_label(p, site_of_size(p, 1004)->stack), "eval.py:7 (hook)");
    assert_int_equal(gp_site_category(p, site_of_size(p, 1005)), LP_CAT_GRADIENT);
    gp_profile_free(p);
    gp_rules_free(rules);
    remove(path);
}

/* ---- grad mode is per thread -------------------------------------------------------------- */

/* Thread 1 turns grad off (a no_grad scope, or set_grad_enabled(False): main_scope false) and
 * starts thread 2, which runs a model in an inference region: with grad on there
 * (worker_no_grad false) or inside its own no_grad (true). */
static const char *threads_trace(bool main_scope, bool worker_no_grad)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/grad_threads_%d_%d%d.gptrace", GRADPROF_TEST_TRACES,
             (int)getpid(), main_scope, worker_no_grad);
    tb *b = tb_open(path, "python3 serve.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    if (main_scope)
        tb_region_push(b, LP_REGION_NO_GRAD);
    tb_grad_mode(b, false, false);
    tb_thread(b, 2, "worker");
    tb_at(b, 2000);
    if (worker_no_grad) {
        tb_region_push(b, LP_REGION_NO_GRAD);
        tb_grad_mode(b, false, false);
    }
    tb_region_push(b, LP_REGION_INFERENCE);
    tb_at(b, 3000);
    tb_alloc(b, 0x10000, 4096, 0);
    tb_tag(b, 0x10000, 4096, LP_CAT_SAVED, "aten::relu", "Net.relu", "", !worker_no_grad, 0);
    tb_at(b, 4000);
    tb_region_pop(b);
    if (worker_no_grad)
        tb_region_pop(b);
    tb_thread(b, 1, NULL);
    tb_at(b, 5000);
    if (main_scope)
        tb_region_pop(b);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    return path;
}

static void test_grad_per_thread(void **state)
{
    (void)state;
    for (int run = 0; run < 3; run++) {
        bool worker_no_grad = run == 2;
        const char *path = threads_trace(run != 1, worker_no_grad);
        gp_profile *p = load_path(path);
        const gp_finding *f = finding(p, GP_FIND_FORGOT_NO_GRAD);
        if (worker_no_grad) { /* no_grad where the model runs: nothing to find */
            assert_null(f);
        } else { /* the graph of thread 2, built while thread 1 was inside no_grad */
            assert_non_null(f);
            assert_int_equal(f->bytes, 4096);
            assert_int_equal(f->grad_off_thread, 1);
            assert_int_equal(f->built_thread, 2);
        }
        gp_profile_free(p);
        remove(path);
    }
}

/* ---- allocations that failed -------------------------------------------------------------- */

/* The recorder's notes that allocations failed: counted, the first kept with what was live then
 * (graph memory apart) and the region its thread was in; a note that is not a size is not one. */
static void test_failed_allocs(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/failed_%d.gptrace", GRADPROF_TEST_TRACES, (int)getpid());
    tb *b = tb_open(path, "python3 eval.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    tb_alloc(b, 0x10000, 3000, 0);
    tb_tag(b, 0x10000, 3000, LP_CAT_SAVED, "aten::relu", "Net.relu", "", true, 0);
    tb_alloc(b, 0x20000, 500, 0);
    tb_region_push(b, "Net.fc");
    tb_at(b, 2000);
    tb_note(b, LP_NOTE_ALLOC_FAILED, "not a size");
    tb_at(b, 3000);
    tb_note(b, LP_NOTE_ALLOC_FAILED, "1048576");
    tb_region_pop(b);
    tb_at(b, 4000);
    tb_note(b, LP_NOTE_ALLOC_FAILED, "64");
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    gp_profile *p = load_path(path);
    assert_int_equal(p->failed_allocs, 2);
    const gp_failed_alloc *f = &p->first_failed;
    assert_int_equal(f->size, 1048576);
    assert_int_equal(f->time_ns, 3000);
    assert_int_equal(f->thread, 1);
    assert_int_equal(f->live_bytes, 3500);
    assert_int_equal(f->graph_bytes, 3000);
    assert_string_equal(f->region, "Net.fc");
    gp_profile_free(p);
    remove(path);
}

/* The holders kept are those of the helper's look whose first holder kept the most graph nodes
 * (the latest of equals): a list of every batch's graph outweighs the last loss a global holds
 * at exit, and two holders of one graph do not add up. */
static void test_holders_of_the_fullest_look(void **state)
{
    (void)state;
    static const struct {
        const char *when;
        const char *notes[2]; /* name, kind, where, tensors, container, grad_fn, nodes */
    } looks[] = {
        {"call Net#2", {"outs\tlocal\teval.py:9\t1\tlist\tAddmmBackward0\t40"}},
        {"call Net#3",
         {"outs\tlocal\teval.py:9\t2\tlist\tAddmmBackward0\t80",
          "loss\tlocal\teval.py:10\t1\t\tMeanBackward0\t41"}},
        {"call Net#4", {"outs\tlocal\teval.py:9\t3\tlist\tAddmmBackward0\t120"}},
        {"exit", {"loss\tglobal\teval.py:10\t1\t\tMeanBackward0\t41"}},
    };
    for (int equal_at_exit = 0; equal_at_exit < 2; equal_at_exit++) {
        char path[4096], note[256];
        snprintf(path, sizeof path, "%s/holders_%d.gptrace", GRADPROF_TEST_TRACES, (int)getpid());
        tb *b = tb_open(path, "python3 eval.py");
        assert_non_null(b);
        tb_thread(b, 1, "main");
        uint64_t t = 1000;
        for (size_t i = 0; i < sizeof looks / sizeof looks[0]; i++)
            for (int k = 0; k < 2 && looks[i].notes[k]; k++) {
                tb_at(b, t += 100);
                bool exit = !strcmp(looks[i].when, "exit");
                snprintf(note, sizeof note, "%s\t%s",
                         exit && equal_at_exit ? "loss\tglobal\teval.py:10\t1\t\tMeanBackward0\t120"
                                               : looks[i].notes[k],
                         looks[i].when);
                tb_note(b, "holder", note);
            }
        tb_end(b);
        assert_int_equal(tb_close(b), 0);
        gp_profile *p = load_path(path);
        assert_int_equal(p->n_holders, 1);
        assert_string_equal(p->holders[0].name, equal_at_exit ? "loss" : "outs");
        assert_int_equal(p->holders[0].nodes, 120);
        gp_profile_free(p);
        remove(path);
    }
}

/* A look that finds a holder the program passes back into its model (kind carried: an RNN's
 * state) is kept over looks without one, however many nodes theirs reach: at exit the last
 * output reaches as many as the state, through it. */
static void test_holders_carried_first(void **state)
{
    (void)state;
    static const char *const notes[] = {
        "logits\tlocal\tlm.py:19\t1\t\tAddBackward0\t400\tcall LM#2",
        "state\tcarried\tlm.py:19\t2\ttuple\tStackBackward0\t300\tcall LM#3",
        "logits\tlocal\tlm.py:19\t1\t\tAddBackward0\t600\tcall LM#3",
        "logits\tglobal\tlm.py:19\t1\t\tAddBackward0\t900\texit",
        "state\tglobal\tlm.py:19\t2\ttuple\tStackBackward0\t890\texit",
    };
    char path[4096];
    snprintf(path, sizeof path, "%s/carried_%d.gptrace", GRADPROF_TEST_TRACES, (int)getpid());
    tb *b = tb_open(path, "python3 lm.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    uint64_t t = 1000;
    for (size_t i = 0; i < sizeof notes / sizeof notes[0]; i++) {
        tb_at(b, t += 100);
        tb_note(b, "holder", notes[i]);
    }
    tb_end(b);
    assert_int_equal(tb_close(b), 0);
    gp_profile *p = load_path(path);
    assert_int_equal(p->n_holders, 2);
    assert_string_equal(p->holders[0].name, "state");
    assert_string_equal(p->holders[0].kind, GP_HOLDER_CARRIED);
    assert_int_equal(p->holders[1].nodes, 600);
    gp_profile_free(p);
    remove(path);
}

/* The tag key (category, op, module) of p, or NULL. */
static const gp_tag_key *tag_key(const gp_profile *p, lp_category cat, const char *op,
                                 const char *module)
{
    for (size_t i = 0; i < p->n_tag_keys; i++) {
        const gp_tag_key *k = &p->tag_keys[i];
        if (k->category == cat && !strcmp(k->op, op) && !strcmp(k->module, module))
            return k;
    }
    return NULL;
}

static const gp_module_stats *module_stats(const gp_profile *p, const char *module)
{
    for (size_t i = 0; i < p->n_modules; i++)
        if (!strcmp(p->modules[i].module, module))
            return &p->modules[i];
    return NULL;
}

/* An untagged buffer belongs to the module whose forward made it: the innermost module region
 * (lp_module_push) open on its thread, through other regions; a region not marked as a module
 * (an older trace's) names none. Its key is then not its site's raw key: each key's top site
 * counts only the bytes that entered it. */
static void test_module_regions(void **state)
{
    (void)state;
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/modules_%d.gptrace", GRADPROF_TEST_TRACES, (int)getpid());
    tb *b = tb_open(path, "python3 eval.py");
    assert_non_null(b);
    tb_thread(b, 1, "main");
    tb_at(b, 1000);
    uint32_t s1 = tb_stack(b, 1, (const uint32_t[]){0}, (const uint64_t[]){0x1111});
    uint32_t s2 = tb_stack(b, 1, (const uint32_t[]){0}, (const uint64_t[]){0x2222});
    tb_alloc(b, 0x1000, 100, s1); /* outside any module */
    tb_module_push(b, "Net");
    tb_alloc(b, 0x2000, 200, s1);
    tb_region_push(b, "inference");
    tb_alloc(b, 0x3000, 300, s2);
    tb_module_push(b, "Net.fc");
    tb_alloc(b, 0x4000, 400, s2);
    tb_tag(b, 0x4000, 400, LP_CAT_ACTIVATION, "aten::linear", "Net.fc", "", true, 0);
    tb_alloc(b, 0x5000, 500, s2);
    tb_region_pop(b);
    tb_region_pop(b);
    tb_region_push(b, "Net.head"); /* a region, not a module: its buffers are Net's */
    tb_alloc(b, 0x6000, 600, s2);
    tb_region_pop(b);
    tb_region_pop(b);
    tb_alloc(b, 0x7000, 150, s2);
    tb_end(b);
    assert_int_equal(tb_close(b), 0);

    gp_profile *p = NULL, *lean = NULL;
    if (gp_profile_load(path, NULL, &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(module_stats(p, "")->stats.total_bytes, 100 + 150);
    assert_int_equal(module_stats(p, "Net")->stats.total_bytes, 200 + 300 + 600);
    assert_int_equal(module_stats(p, "Net.fc")->stats.total_bytes, 400 + 500);
    assert_null(module_stats(p, "Net.head"));
    const gp_tag_key *raw = tag_key(p, LP_CAT_OTHER, "", ""),
                     *net = tag_key(p, LP_CAT_OTHER, "", "Net"),
                     *fc = tag_key(p, LP_CAT_OTHER, "", "Net.fc"),
                     *linear = tag_key(p, LP_CAT_ACTIVATION, "aten::linear", "Net.fc");
    assert_non_null(raw);
    assert_non_null(net);
    assert_non_null(fc);
    assert_non_null(linear);
    assert_int_equal(raw->stats.total_bytes, 100 + 150);
    assert_int_equal(net->stats.total_bytes, 200 + 300 + 600);
    assert_int_equal(fc->stats.total_bytes, 500); /* the tagged buffer left it */
    assert_int_equal(linear->stats.total_bytes, 400);
    /* top sites by the bytes each key got there: the raw key 150 at s2 against 100 at s1 (s1's
     * module buffer is not the raw key's), Net 900 at s2 against 200 at s1 */
    const uint64_t s2_total = 300 + 400 + 500 + 600 + 150;
    assert_int_equal(p->sites[raw->top_site].stats.total_bytes, s2_total);
    assert_int_equal(p->sites[net->top_site].stats.total_bytes, s2_total);
    assert_int_equal(p->sites[fc->top_site].stats.total_bytes, s2_total);
    assert_int_equal(p->sites[linear->top_site].stats.total_bytes, s2_total);
    assert_tables_sum_to_peak(p);

    gp_analysis_options o;
    gp_analysis_options_default(&o);
    o.without_sites = true;
    if (gp_profile_load(path, &o, &lean, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(lean->n_tag_keys, p->n_tag_keys);
    for (size_t i = 0; i < p->n_tag_keys; i++)
        assert_same_stats(&lean->tag_keys[i].stats, &p->tag_keys[i].stats);
    assert_int_equal(lean->n_modules, p->n_modules);
    for (size_t i = 0; i < p->n_modules; i++)
        assert_same_stats(&lean->modules[i].stats, &p->modules[i].stats);
    gp_profile_free(lean);
    gp_profile_free(p);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlp_grad),
        cmocka_unit_test(test_grad_per_thread),
        cmocka_unit_test(test_failed_allocs),
        cmocka_unit_test(test_module_regions),
        cmocka_unit_test(test_mlp_nograd),
        cmocka_unit_test(test_leak_accumulate_grows),
        cmocka_unit_test(test_leak_window_escapes_one_at_a_time),
        cmocka_unit_test(test_holders_of_the_fullest_look),
        cmocka_unit_test(test_holders_carried_first),
        cmocka_unit_test(test_raw_sites_temporaries_leaks_devices),
        cmocka_unit_test(test_without_sites),
        cmocka_unit_test(test_detectors_positive_and_negative),
        cmocka_unit_test(test_damaged_trace_is_not_an_error),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_timeline_keeps_the_peak),
        cmocka_unit_test(test_python_frames_label_sites),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
