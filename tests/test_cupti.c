/*
 * The CUPTI module without a GPU: the translation of CUPTI callback data and activity records
 * built by hand, the runtime/driver de-duplication and the activity join (through a fake CUPTI
 * and a fake recorder bridge), the "host only" init paths, and the injection module itself
 * (dlopen + InitializeInjection on a machine without a driver).
 *
 * What needs a GPU (real callbacks, real activity buffers, stacks of real calls) is checked by
 * tests/gpu/run_gpu_checks.sh.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cupti_module.h"
#include "gradprof/libprof.h"

/* ---- helpers ------------------------------------------------------------------------------- */

static CUpti_CallbackData make_cb(CUpti_ApiCallbackSite site, const void *params, const int *rc,
                                  uint32_t correlation)
{
    CUpti_CallbackData cb;
    memset(&cb, 0, sizeof cb);
    cb.callbackSite = site;
    cb.functionName = "test";
    cb.functionParams = params;
    cb.functionReturnValue = (void *)rc;
    cb.correlationId = correlation;
    return cb;
}

static const int ok = 0, failed = 2; /* cudaSuccess / cudaErrorMemoryAllocation */

/* Runs fn with fd 2 captured; returns what it wrote (static buffer). */
static char captured[4096];
static const char *capture_stderr(void (*fn)(void *), void *arg)
{
    char path[] = "/tmp/test_cupti_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, captured, sizeof captured - 1, 0);
    captured[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return captured;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- callback translation ------------------------------------------------------------------- */

static void test_runtime_malloc_and_free(void **state)
{
    (void)state;
    void *result = (void *)(uintptr_t)0x7f0000001000ull;
    cudaMalloc_v3020_params p = {.devPtr = &result, .size = 4096};
    lp__gpu_event ev;

    CUpti_CallbackData cb = make_cb(CUPTI_API_ENTER, &p, &ok, 11);
    assert_false(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_RUNTIME_API,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &cb, 2,
                                              &ev)); /* allocations: on exit only */
    cb = make_cb(CUPTI_API_EXIT, &p, &ok, 11);
    assert_true(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &cb, 2, &ev));
    assert_int_equal(ev.kind, LP__GPU_ALLOC);
    assert_int_equal(ev.device, 2);
    assert_int_equal(ev.addr, 0x7f0000001000ull);
    assert_int_equal(ev.size, 4096);
    assert_int_equal(ev.correlation_id, 11);
    assert_string_equal(ev.op, "cudaMalloc");
    assert_true(ev.flags & LP__GPU_FROM_RUNTIME);
    assert_false(ev.flags & LP__GPU_ASYNC);

    cb = make_cb(CUPTI_API_EXIT, &p, &failed, 12); /* a failed call allocated nothing */
    assert_false(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &cb, 2, &ev));

    cudaFree_v3020_params f = {.devPtr = result};
    cb = make_cb(CUPTI_API_EXIT, &f, &ok, 13);
    assert_false(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_RUNTIME_API,
                                              CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &cb, 2,
                                              &ev)); /* frees: on entry only */
    cb = make_cb(CUPTI_API_ENTER, &f, NULL, 13);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_RUNTIME_API,
                                             CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &cb, 2, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    assert_int_equal(ev.device, 2);
    assert_int_equal(ev.addr, 0x7f0000001000ull);
    assert_string_equal(ev.op, "cudaFree");

    cudaFree_v3020_params null_free = {.devPtr = NULL};
    cb = make_cb(CUPTI_API_ENTER, &null_free, NULL, 14);
    assert_false(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &cb, 0, &ev));
}

static void test_runtime_async_managed_host(void **state)
{
    (void)state;
    lp__gpu_event ev;
    void *result = (void *)(uintptr_t)0x500000ull;
    cudaMallocAsync_v11020_params a = {.devPtr = &result, .size = 1u << 20, .hStream = NULL};
    CUpti_CallbackData cb = make_cb(CUPTI_API_EXIT, &a, &ok, 20);
    assert_true(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, &cb, 1, &ev));
    assert_int_equal(ev.kind, LP__GPU_ALLOC);
    assert_int_equal(ev.size, 1u << 20);
    assert_int_equal(ev.device, 1);
    assert_true(ev.flags & LP__GPU_ASYNC);
    assert_string_equal(ev.op, "cudaMallocAsync");

    cudaFreeAsync_ptsz_v11020_params fa = {.devPtr = result, .hStream = NULL};
    cb = make_cb(CUPTI_API_ENTER, &fa, NULL, 21);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_RUNTIME_API,
                                             CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
                                             &cb, 1, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    assert_int_equal(ev.addr, 0x500000ull);
    assert_string_equal(ev.op, "cudaFreeAsync");

    cudaMallocManaged_v6000_params m = {.devPtr = &result, .size = 300, .flags = 1};
    cb = make_cb(CUPTI_API_EXIT, &m, &ok, 22);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_RUNTIME_API,
                                             CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, &cb,
                                             0, &ev));
    assert_int_equal(ev.size, 300);
    assert_int_equal(ev.device, 0);
    assert_string_equal(ev.op, "cudaMallocManaged");

    /* Pinned host memory is host memory, whatever the context's device. */
    void *host = (void *)(uintptr_t)0x7ff000000000ull;
    cudaMallocHost_v3020_params h = {.ptr = &host, .size = 8192};
    cb = make_cb(CUPTI_API_EXIT, &h, &ok, 23);
    assert_true(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, &cb, 3, &ev));
    assert_int_equal(ev.device, -1);
    assert_int_equal(ev.addr, 0x7ff000000000ull);
    assert_int_equal(ev.size, 8192);
    assert_string_equal(ev.op, "cudaMallocHost");
    cudaFreeHost_v3020_params fh = {.ptr = host};
    cb = make_cb(CUPTI_API_ENTER, &fh, NULL, 24);
    assert_true(lp__cupti_translate_callback(
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, &cb, 3, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    assert_int_equal(ev.device, -1);
}

static void test_driver_apis(void **state)
{
    (void)state;
    lp__gpu_event ev;
    CUdeviceptr d = 0x900000ull;
    cuMemAlloc_v2_params a = {.dptr = &d, .bytesize = 777};
    CUpti_CallbackData cb = make_cb(CUPTI_API_EXIT, &a, &ok, 30);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &cb, 0, &ev));
    assert_int_equal(ev.kind, LP__GPU_ALLOC);
    assert_int_equal(ev.addr, 0x900000ull);
    assert_int_equal(ev.size, 777);
    assert_false(ev.flags & LP__GPU_FROM_RUNTIME);
    assert_string_equal(ev.op, "cuMemAlloc");

    cuMemFree_v2_params f = {.dptr = d};
    cb = make_cb(CUPTI_API_ENTER, &f, NULL, 31);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &cb, 0, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    assert_int_equal(ev.addr, 0x900000ull);

    CUdeviceptr_v1 d1 = 0x1000;
    cuMemAlloc_params a1 = {.dptr = &d1, .bytesize = 64};
    cb = make_cb(CUPTI_API_EXIT, &a1, &ok, 32);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemAlloc, &cb, 0, &ev));
    assert_int_equal(ev.addr, 0x1000);
    assert_int_equal(ev.size, 64);

    CUdeviceptr da = 0xa00000ull;
    cuMemAllocAsync_params aa = {.dptr = &da, .bytesize = 4096, .hStream = NULL};
    cb = make_cb(CUPTI_API_EXIT, &aa, &ok, 33);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &cb, 0, &ev));
    assert_true(ev.flags & LP__GPU_ASYNC);

    /* Virtual memory management: Map is the allocation, Unmap the free, Create/Release nothing. */
    cuMemMap_params map = {.ptr = 0xb00000ull, .size = 2u << 20, .offset = 0, .handle = 5};
    cb = make_cb(CUPTI_API_EXIT, &map, &ok, 34);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemMap, &cb, 1, &ev));
    assert_int_equal(ev.kind, LP__GPU_ALLOC);
    assert_int_equal(ev.addr, 0xb00000ull);
    assert_int_equal(ev.size, 2u << 20);
    assert_int_equal(ev.device, 1);
    cuMemUnmap_params unmap = {.ptr = 0xb00000ull, .size = 2u << 20};
    cb = make_cb(CUPTI_API_ENTER, &unmap, NULL, 35);
    assert_true(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                             CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, &cb, 1, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    CUmemGenericAllocationHandle handle = 5;
    cuMemCreate_params create = {.handle = &handle, .size = 2u << 20, .prop = NULL, .flags = 0};
    cb = make_cb(CUPTI_API_EXIT, &create, &ok, 36);
    assert_false(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                              CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &cb, 1, &ev));
    bool rt = true;
    assert_true(
        lp__cupti_wanted(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &rt));
    assert_false(rt);
    assert_true(lp__cupti_wanted(CUPTI_CB_DOMAIN_RUNTIME_API,
                                 CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &rt));
    assert_true(rt);
    /* Not an allocation API. */
    assert_false(
        lp__cupti_wanted(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, NULL));
    cb = make_cb(CUPTI_API_EXIT, &a, &ok, 37);
    assert_false(lp__cupti_translate_callback(CUPTI_CB_DOMAIN_DRIVER_API,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &cb, 0, &ev));
}

/* ---- activity translation ---------------------------------------------------------------------
 */

static void test_activity_memory(void **state)
{
    (void)state;
    CUpti_ActivityMemory4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.correlationId = 77;
    m.address = 0x7f00dead0000ull;
    m.bytes = 123456;
    m.deviceId = 3;
    m.isAsync = 1;
    lp__gpu_event ev;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_int_equal(ev.kind, LP__GPU_ALLOC);
    assert_int_equal(ev.device, 3);
    assert_int_equal(ev.addr, 0x7f00dead0000ull);
    assert_int_equal(ev.size, 123456);
    assert_int_equal(ev.correlation_id, 77);
    assert_true(ev.flags & LP__GPU_FROM_ACTIVITY);
    assert_true(ev.flags & LP__GPU_ASYNC);
    assert_string_equal(ev.op, "cuda_device");

    m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_int_equal(ev.kind, LP__GPU_FREE);
    assert_int_equal(ev.size, 0);
    assert_int_equal(ev.device, 3);

    m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_int_equal(ev.device, -1);
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_MANAGED;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_int_equal(ev.device, 3);
    assert_string_equal(ev.op, "cuda_managed");

    m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID;
    assert_false(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));

    CUpti_ActivityMemoryPool3 p;
    memset(&p, 0, sizeof p);
    p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
    p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED;
    p.deviceId = 1;
    p.address = 0x1234000;
    p.size = 1 << 24;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&p, &ev));
    assert_int_equal(ev.kind, LP__GPU_POOL_TRIMMED);
    assert_int_equal(ev.device, 1);
    assert_int_equal(ev.size, 1 << 24);

    CUpti_Activity other = {.kind = CUPTI_ACTIVITY_KIND_KERNEL};
    assert_false(lp__cupti_translate_activity(&other, &ev));
    assert_false(lp__cupti_translate_activity(NULL, &ev));
}

/* ---- the module: fake CUPTI, fake recorder ----------------------------------------------------
 */

typedef struct rec {
    int what;
    uint64_t addr, size;
    int32_t device;
    char op[32];
} rec;
static rec recs[64];
static int n_recs;

static int fake_bridge(int what, const void *addr, size_t size, int32_t device, const char *op)
{
    if (n_recs < 64)
        recs[n_recs++] =
            (rec){.what = what, .addr = (uintptr_t)addr, .size = size, .device = device};
    snprintf(recs[n_recs - 1].op, sizeof recs[0].op, "%s", op ? op : "");
    return 1;
}

static CUpti_CallbackFunc fake_callback;
static CUptiResult fake_subscribe_result;
static int enabled_callbacks, activity_kinds;

static CUptiResult fake_subscribe(CUpti_SubscriberHandle *h, CUpti_CallbackFunc fn, void *user)
{
    (void)user;
    if (fake_subscribe_result != CUPTI_SUCCESS)
        return fake_subscribe_result;
    *h = (CUpti_SubscriberHandle)(uintptr_t)1;
    fake_callback = fn;
    return CUPTI_SUCCESS;
}
static CUptiResult fake_enable_callback(uint32_t on, CUpti_SubscriberHandle h,
                                        CUpti_CallbackDomain d, CUpti_CallbackId id)
{
    enabled_callbacks++;
    return CUPTI_SUCCESS;
}
static CUptiResult fake_activity_enable(CUpti_ActivityKind k)
{
    activity_kinds++;
    return CUPTI_SUCCESS;
}
static CUptiResult fake_activity_register(CUpti_BuffersCallbackRequestFunc a,
                                          CUpti_BuffersCallbackCompleteFunc b)
{
    return CUPTI_SUCCESS;
}
static CUptiResult fake_result_string(CUptiResult r, const char **s)
{
    *s = "CUPTI_ERROR_FAKE";
    return CUPTI_SUCCESS;
}
static const lp__cupti_api fake_api = {fake_subscribe, fake_enable_callback, fake_activity_enable,
                                       fake_activity_register, fake_result_string};

static int setup(void **state)
{
    (void)state;
    lp__cupti_reset_for_tests();
    n_recs = 0;
    fake_callback = NULL;
    fake_subscribe_result = CUPTI_SUCCESS;
    enabled_callbacks = activity_kinds = 0;
    return 0;
}

static lp__cupti_status init_status;
static void do_init(void *arg)
{
    init_status = lp__cupti_init(&fake_api, (lp__cupti_bridge_fn)arg);
}

static void test_init_subscribes(void **state)
{
    (void)state;
    const char *err = capture_stderr(do_init, (void *)fake_bridge);
    assert_int_equal(init_status, LP__CUPTI_ON);
    assert_string_equal(err, "");
    assert_non_null(fake_callback);
    assert_true(enabled_callbacks >= 30); /* one per allocation API, not whole domains */
    assert_int_equal(activity_kinds, 2);  /* MEMORY2, MEMORY_POOL */
    assert_int_equal(lp__cupti_init(&fake_api, fake_bridge), LP__CUPTI_ON); /* idempotent */
}

static void test_init_other_subscriber(void **state)
{
    (void)state;
    fake_subscribe_result = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    const char *err = capture_stderr(do_init, (void *)fake_bridge);
    assert_int_equal(init_status, LP__CUPTI_HOST_ONLY);
    assert_int_equal(count_lines(err), 1);
    assert_non_null(strstr(err, "gradprof: cuda: another CUPTI client"));
    assert_non_null(strstr(err, "host memory only"));
    /* Nothing is recorded afterwards. */
    lp__gpu_event ev = {.kind = LP__GPU_ALLOC, .addr = 1, .size = 1, .op = "x"};
    assert_false(lp__cupti_handle(&ev));
    assert_int_equal(n_recs, 0);
}

static void test_init_no_driver(void **state)
{
    (void)state;
    fake_subscribe_result = CUPTI_ERROR_NOT_INITIALIZED;
    const char *err = capture_stderr(do_init, (void *)fake_bridge);
    assert_int_equal(init_status, LP__CUPTI_HOST_ONLY);
    assert_int_equal(count_lines(err), 1);
    assert_non_null(strstr(err, "gradprof: cuda: CUPTI unavailable (CUPTI_ERROR_FAKE)"));
}

/* The recorder's bridge is found in the process (this test links libprof.so, which exports it). */
static void test_bridge_found_with_dlsym(void **state)
{
    (void)state;
    assert_non_null(dlsym(RTLD_DEFAULT, LP__CUPTI_BRIDGE_SYMBOL));
    const char *err = capture_stderr(do_init, NULL); /* NULL: look the bridge up */
    assert_int_equal(init_status, LP__CUPTI_ON);
    assert_string_equal(err, "");
}

/* A runtime call and the driver call under it are recorded once, on the right thread and site. */
static void test_runtime_driver_dedup(void **state)
{
    (void)state;
    capture_stderr(do_init, (void *)fake_bridge);
    assert_non_null(fake_callback);
    void *result = (void *)(uintptr_t)0xc00000ull;
    CUdeviceptr d = 0xc00000ull;
    cudaMalloc_v3020_params rp = {.devPtr = &result, .size = 1000};
    cuMemAlloc_v2_params dp = {.dptr = &d, .bytesize = 1024};
    CUpti_CallbackData r_in = make_cb(CUPTI_API_ENTER, &rp, NULL, 100);
    CUpti_CallbackData d_in = make_cb(CUPTI_API_ENTER, &dp, NULL, 101);
    CUpti_CallbackData d_out = make_cb(CUPTI_API_EXIT, &dp, &ok, 101);
    CUpti_CallbackData r_out = make_cb(CUPTI_API_EXIT, &rp, &ok, 100);
    fake_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                  &r_in);
    fake_callback(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &d_in);
    fake_callback(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &d_out);
    fake_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
                  &r_out);
    assert_int_equal(n_recs, 1);
    assert_int_equal(recs[0].what, LP__BRIDGE_ALLOC);
    assert_int_equal(recs[0].addr, 0xc00000ull);
    assert_int_equal(recs[0].size, 1000); /* the size the program asked for */
    assert_string_equal(recs[0].op, "cudaMalloc");

    /* A driver call on its own is recorded. */
    CUdeviceptr d2 = 0xd00000ull;
    cuMemAlloc_v2_params dp2 = {.dptr = &d2, .bytesize = 64};
    CUpti_CallbackData d2_out = make_cb(CUPTI_API_EXIT, &dp2, &ok, 102);
    fake_callback(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &d2_out);
    assert_int_equal(n_recs, 2);
    assert_int_equal(recs[1].size, 64);
    assert_string_equal(recs[1].op, "cuMemAlloc");

    /* cudaFree: the free is recorded on entry, the driver free under it is not. */
    cudaFree_v3020_params rf = {.devPtr = result};
    cuMemFree_v2_params df = {.dptr = d};
    CUpti_CallbackData rf_in = make_cb(CUPTI_API_ENTER, &rf, NULL, 103);
    CUpti_CallbackData df_in = make_cb(CUPTI_API_ENTER, &df, NULL, 104);
    CUpti_CallbackData rf_out = make_cb(CUPTI_API_EXIT, &rf, &ok, 103);
    fake_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
                  &rf_in);
    fake_callback(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &df_in);
    fake_callback(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
                  &rf_out);
    assert_int_equal(n_recs, 3);
    assert_int_equal(recs[2].what, LP__BRIDGE_FREE);
    assert_int_equal(recs[2].addr, 0xc00000ull);

    /* After the runtime call, driver calls are recorded again. */
    CUpti_CallbackData df2_in = make_cb(CUPTI_API_ENTER, &df, NULL, 105);
    fake_callback(NULL, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &df2_in);
    assert_int_equal(n_recs, 4);

    /* Activity records of those calls (by the runtime's or the driver's correlation id) are
     * joined, not recorded again; one no callback saw is recorded late; pools are counted. */
    lp__gpu_event ev;
    CUpti_ActivityMemory4 m;
    memset(&m, 0, sizeof m);
    m.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    m.memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
    m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.address = 0xc00000ull;
    m.bytes = 1024;
    for (uint32_t id = 100; id <= 101; id++) {
        m.correlationId = id;
        assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
        assert_false(lp__cupti_handle(&ev));
    }
    m.correlationId = 999;
    m.address = 0xe00000ull;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_true(lp__cupti_handle(&ev));
    assert_int_equal(n_recs, 5);
    assert_int_equal(recs[4].addr, 0xe00000ull);
    assert_int_equal(recs[4].size, 1024);
    m.correlationId = 0; /* cannot be joined: dropped, not guessed */
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&m, &ev));
    assert_false(lp__cupti_handle(&ev));
    CUpti_ActivityMemoryPool3 p;
    memset(&p, 0, sizeof p);
    p.kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
    p.memoryPoolOperationType = CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED;
    assert_true(lp__cupti_translate_activity((const CUpti_Activity *)&p, &ev));
    assert_false(lp__cupti_handle(&ev));

    lp__cupti_stats st;
    lp__cupti_get_stats(&st);
    assert_int_equal(st.recorded_allocs, 3);
    assert_int_equal(st.recorded_frees, 2);
    assert_int_equal(st.activity_matched, 2);
    assert_int_equal(st.activity_late, 1);
    assert_int_equal(st.activity_dropped, 1);
    assert_int_equal(st.pool_events, 1);
}

/* ---- the injection module, on a machine without a driver ---------------------------------------
 */

static int (*module_init)(void);
static int module_rc;
static void call_module(void *arg)
{
    (void)arg;
    module_rc = module_init();
}

/* libprof_cupti.so loads (libcupti resolves), exports only InitializeInjection, and
 * InitializeInjection returns 1 whatever happens, with at most one line on stderr. With no driver
 * CUPTI may refuse (one "host memory only" line) or subscribe lazily (no line): both are fine;
 * what must not happen is a crash, a hang or a second line. */
static void test_injection_module(void **state)
{
    (void)state;
    void *h = dlopen(GP_CUPTI_MODULE, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        fail_msg("dlopen %s: %s", GP_CUPTI_MODULE, dlerror());
    *(void **)&module_init = dlsym(h, "InitializeInjection");
    assert_non_null(module_init);
    assert_null(dlsym(h, "lp__cupti_init")); /* internals stay hidden */
    assert_null(dlsym(h, "lp__cupti_translate_callback"));
    const char *err = capture_stderr(call_module, NULL);
    assert_int_equal(module_rc, 1);
    assert_true(count_lines(err) <= 1);
    if (*err) {
        assert_non_null(strstr(err, "gradprof: cuda: "));
        assert_non_null(strstr(err, "host memory only"));
    }
    print_message("InitializeInjection without a driver: %s",
                  *err ? err : "(subscribed, silent)\n");
    /* Left loaded: CUPTI may have registered handlers that point into it. */
}

/* ---- gradprof run --cuda ------------------------------------------------------------------------
 */

#ifdef GP_CUDA_ALLOC_KNOWN
#include <sys/stat.h>
#include <sys/wait.h>

static char tmpdir[64];

static int run_shell(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static char *slurp(const char *path)
{
    static char buf[8192];
    FILE *f = fopen(path, "r");
    if (!f)
        return strcpy(buf, "");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_substr(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* --cuda sets CUDA_INJECTION64_PATH to the module next to the preload library. */
static void test_run_cuda_sets_injection(void **state)
{
    (void)state;
    char cmd[2048], out[128];
    snprintf(out, sizeof out, "%s/env.txt", tmpdir);
    snprintf(cmd, sizeof cmd,
             "env -u CUDA_INJECTION64_PATH -u GRADPROF_CUPTI %s run --cuda -o %s/env.%%p.gptrace "
             "-- sh -c 'printf %%s \"$CUDA_INJECTION64_PATH\"' > %s 2>/dev/null",
             GP_GRADPROF, tmpdir, out);
    assert_int_equal(run_shell(cmd), 0);
    char *env = slurp(out);
    size_t n = strlen(env);
    assert_true(n > strlen("/libprof_cupti.so"));
    assert_string_equal(env + n - strlen("/libprof_cupti.so"), "/libprof_cupti.so");
    assert_int_equal(access(env, R_OK), 0);

    /* A missing module is a usage error naming what to set. */
    snprintf(out, sizeof out, "%s/err.txt", tmpdir);
    snprintf(cmd, sizeof cmd,
             "GRADPROF_CUPTI=/nonexistent/libprof_cupti.so %s run --cuda -o %s/x.%%p.gptrace -- "
             "true 2> %s",
             GP_GRADPROF, tmpdir, out);
    assert_int_equal(run_shell(cmd), 2);
    assert_non_null(strstr(slurp(out), "GRADPROF_CUPTI"));
}

/* A CUDA program under `gradprof run --cuda`. Without a driver (this machine): one line says so,
 * the program runs (it finds no device, exit 3) and its host trace is written. With a driver,
 * tests/gpu/run_gpu_checks.sh checks the device figures; here only that the run completes. */
static void test_run_cuda_program(void **state)
{
    (void)state;
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    char cmd[2048], err[128];
    snprintf(err, sizeof err, "%s/run_err.txt", tmpdir);
    snprintf(cmd, sizeof cmd,
             "env -u CUDA_INJECTION64_PATH -u GRADPROF_CUPTI %s run --cuda -o %s/known.%%p.gptrace "
             "-- %s > /dev/null 2> %s",
             GP_GRADPROF, tmpdir, GP_CUDA_ALLOC_KNOWN, err);
    int rc = run_shell(cmd);
    const char *text = slurp(err);
    print_message("gradprof run --cuda cuda_alloc_known: exit %d\n%s", rc, text);
    assert_non_null(strstr(text, "gradprof: trace written to "));
    if (driver) {
        dlclose(driver);
        assert_true(rc == 0 || rc == 3);
        return;
    }
    assert_int_equal(rc, 3); /* the program's status: no device */
    assert_int_equal(count_substr(text, "gradprof run: warning: --cuda: no CUDA driver"), 1);
    assert_int_equal(count_substr(text, "host memory only"), 1); /* one line, not one per call */
}

static int make_tmpdir(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_cupti_run_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return run_shell(cmd);
}
/* The whole path without a GPU: callbacks (through the fake CUPTI) -> the bridge found by dlsym
 * in libprof.so -> the recorder -> a trace that `gradprof report` reads with the device columns
 * and the API names as ops. */
static void test_trace_through_recorder(void **state)
{
    (void)state;
    lp__cupti_reset_for_tests();
    fake_subscribe_result = CUPTI_SUCCESS;
    char trace[128], json[160], cmd[1024];
    snprintf(trace, sizeof trace, "%s/inproc.gptrace", tmpdir);
    snprintf(json, sizeof json, "%s/inproc.json", tmpdir);
    lp_options o;
    lp_options_default(&o);
    snprintf(o.output, sizeof o.output, "%s", trace);
    assert_int_equal(lp_start(&o), 0);
    assert_int_equal(lp__cupti_init(&fake_api, NULL), LP__CUPTI_ON); /* bridge from dlsym */
    assert_non_null(fake_callback);

    void *dev = (void *)(uintptr_t)0x7e0000000000ull, *host = (void *)(uintptr_t)0x7e1000000000ull;
    cudaMalloc_v3020_params m = {.devPtr = &dev, .size = 3u << 20};
    cudaMallocHost_v3020_params h = {.ptr = &host, .size = 1u << 20};
    cudaFree_v3020_params f = {.devPtr = dev};
    CUpti_CallbackData m_in = make_cb(CUPTI_API_ENTER, &m, NULL, 1);
    CUpti_CallbackData m_out = make_cb(CUPTI_API_EXIT, &m, &ok, 1);
    CUpti_CallbackData h_in = make_cb(CUPTI_API_ENTER, &h, NULL, 2);
    CUpti_CallbackData h_out = make_cb(CUPTI_API_EXIT, &h, &ok, 2);
    CUpti_CallbackData f_in = make_cb(CUPTI_API_ENTER, &f, NULL, 3);
    CUpti_CallbackData f_out = make_cb(CUPTI_API_EXIT, &f, &ok, 3);
    const CUpti_CallbackDomain RTD = CUPTI_CB_DOMAIN_RUNTIME_API;
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &m_in);
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &m_out);
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, &h_in);
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020, &h_out);
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &f_in);
    fake_callback(NULL, RTD, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, &f_out);
    lp_stop();

    snprintf(cmd, sizeof cmd, "%s report %s --format json --top 0 -o %s", GP_GRADPROF, trace,
             json);
    assert_int_equal(run_shell(cmd), 0);
    const char *text = slurp(json);
    /* Device 0: cuptiGetDeviceId fails without a driver, and device memory goes to cuda:0. */
    assert_non_null(strstr(text, "\"device\": \"cuda:0\""));
    assert_non_null(strstr(text, "\"op\": \"cudaMalloc\""));
    assert_non_null(strstr(text, "\"op\": \"cudaMallocHost\""));
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; r=json.load(open(\"%s\")); "
             "k={(t[\"op\"],t[\"device\"]):t for t in r[\"tag_keys\"]}; "
             "a=k[(\"cudaMalloc\",\"cuda:0\")]; b=k[(\"cudaMallocHost\",\"host\")]; "
             "d={x[\"device\"]:x for x in r[\"devices\"]}; "
             "sys.exit(0 if (a[\"count\"],a[\"total_bytes\"],a[\"frees\"])==(1,3<<20,1) and "
             "(b[\"count\"],b[\"total_bytes\"],b[\"live_at_end\"])==(1,1<<20,1<<20) and "
             "d[\"cuda:0\"][\"peak_bytes\"]==3<<20 and d[\"cuda:0\"][\"live_at_end\"]==0 else 1)'",
             json);
    if (run_shell(cmd) != 0)
        fail_msg("unexpected report: %s", text);
}
#endif

int main(void)
{
    /* Links libprof.so for real (not dropped by --as-needed): it exports the recorder's bridge. */
    if (lp_is_recording())
        lp_stop();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runtime_malloc_and_free),
        cmocka_unit_test(test_runtime_async_managed_host),
        cmocka_unit_test(test_driver_apis),
        cmocka_unit_test(test_activity_memory),
        cmocka_unit_test_setup(test_init_subscribes, setup),
        cmocka_unit_test_setup(test_init_other_subscriber, setup),
        cmocka_unit_test_setup(test_init_no_driver, setup),
        cmocka_unit_test_setup(test_bridge_found_with_dlsym, setup),
        cmocka_unit_test_setup(test_runtime_driver_dedup, setup),
        cmocka_unit_test(test_injection_module),
    };
    int n_failed = cmocka_run_group_tests(tests, NULL, NULL);
#ifdef GP_CUDA_ALLOC_KNOWN
    const struct CMUnitTest run_tests[] = {
        cmocka_unit_test(test_run_cuda_sets_injection),
        cmocka_unit_test(test_run_cuda_program),
        cmocka_unit_test(test_trace_through_recorder),
    };
    n_failed += cmocka_run_group_tests(run_tests, make_tmpdir, remove_tmpdir);
#endif
    return n_failed;
}
