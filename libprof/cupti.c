/*
 * gradprof CUPTI module: device memory with host stacks. Built as libprof_cupti.so (a MODULE that
 * CUDA loads through CUDA_INJECTION64_PATH and starts with InitializeInjection). See
 * cupti_module.h.
 *
 * Events come from two sources:
 *  - API callbacks on the allocation entry points of the runtime and the driver, recorded on the
 *    calling thread (so the recorder captures the host stack of the call): allocations on API
 *    exit, when the address is known and the call succeeded; frees on API entry. A runtime call
 *    sets a thread-local depth while it runs, and driver callbacks under it are skipped, so
 *    cudaMalloc and the cuMemAlloc it may call are counted once.
 *  - Activity records (MEMORY2, MEMORY_POOL), delivered later in buffers. They are joined with the
 *    callbacks by correlation id: an operation a callback already recorded is only counted; one no
 *    callback saw (e.g. made inside the driver) is recorded late, without a stack. Pool records are
 *    counted only (a pool is not a buffer). Buffers are flushed at exit (cuptiActivityFlushAll).
 *
 * Nothing here allocates with malloc (activity buffers come from mmap), so the preload
 * interposer sees none of the module's own memory.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "cupti_module.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LP_HOST ((int32_t)-1)
#define EXPORT __attribute__((visibility("default")))

/* ---- the APIs ------------------------------------------------------------------------------- */

/* What a callback does: allocates (the address is written through a pointer parameter) or
 * frees, on the device or on the host (pinned). */
typedef enum { API_ALLOC, API_FREE, API_IGNORE } api_role;

typedef struct api_entry {
    CUpti_CallbackDomain domain;
    CUpti_CallbackId cbid;
    api_role role;
    bool host;  /* pinned host memory */
    bool async; /* stream-ordered */
    const char *op;
} api_entry;

/* op: the API's name without its version suffix ("cudaMalloc", "cuMemAlloc"). */
#define RT(name, op, role, host, async)                                                            \
    {                                                                                              \
        CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_##name, role, host, async, op        \
    }
#define DRV(name, op, role, host, async)                                                           \
    {                                                                                              \
        CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, role, host, async, op          \
    }

static const api_entry apis[] = {
    RT(cudaMalloc_v3020, "cudaMalloc", API_ALLOC, false, false),
    RT(cudaMallocPitch_v3020, "cudaMallocPitch", API_ALLOC, false, false),
    RT(cudaFree_v3020, "cudaFree", API_FREE, false, false),
    RT(cudaMallocManaged_v6000, "cudaMallocManaged", API_ALLOC, false, false),
    RT(cudaMallocHost_v3020, "cudaMallocHost", API_ALLOC, true, false),
    RT(cudaHostAlloc_v3020, "cudaHostAlloc", API_ALLOC, true, false),
    RT(cudaFreeHost_v3020, "cudaFreeHost", API_FREE, true, false),
    RT(cudaMallocAsync_v11020, "cudaMallocAsync", API_ALLOC, false, true),
    RT(cudaMallocAsync_ptsz_v11020, "cudaMallocAsync", API_ALLOC, false, true),
    RT(cudaMallocFromPoolAsync_v11020, "cudaMallocFromPoolAsync", API_ALLOC, false, true),
    RT(cudaMallocFromPoolAsync_ptsz_v11020, "cudaMallocFromPoolAsync", API_ALLOC, false, true),
    RT(cudaFreeAsync_v11020, "cudaFreeAsync", API_FREE, false, true),
    RT(cudaFreeAsync_ptsz_v11020, "cudaFreeAsync", API_FREE, false, true),
    DRV(cuMemAlloc, "cuMemAlloc", API_ALLOC, false, false),
    DRV(cuMemAlloc_v2, "cuMemAlloc", API_ALLOC, false, false),
    DRV(cuMemAllocPitch, "cuMemAllocPitch", API_ALLOC, false, false),
    DRV(cuMemAllocPitch_v2, "cuMemAllocPitch", API_ALLOC, false, false),
    DRV(cuMemFree, "cuMemFree", API_FREE, false, false),
    DRV(cuMemFree_v2, "cuMemFree", API_FREE, false, false),
    DRV(cuMemAllocManaged, "cuMemAllocManaged", API_ALLOC, false, false),
    DRV(cuMemAllocHost, "cuMemAllocHost", API_ALLOC, true, false),
    DRV(cuMemAllocHost_v2, "cuMemAllocHost", API_ALLOC, true, false),
    DRV(cuMemHostAlloc, "cuMemHostAlloc", API_ALLOC, true, false),
    DRV(cuMemFreeHost, "cuMemFreeHost", API_FREE, true, false),
    DRV(cuMemAllocAsync, "cuMemAllocAsync", API_ALLOC, false, true),
    DRV(cuMemAllocAsync_ptsz, "cuMemAllocAsync", API_ALLOC, false, true),
    DRV(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", API_ALLOC, false, true),
    DRV(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", API_ALLOC, false, true),
    DRV(cuMemFreeAsync, "cuMemFreeAsync", API_FREE, false, true),
    DRV(cuMemFreeAsync_ptsz, "cuMemFreeAsync", API_FREE, false, true),
    /* Virtual memory management: physical memory (cuMemCreate / cuMemRelease) has a handle, not
     * an address; the bytes become visible at an address when mapped. Map is the allocation and
     * Unmap the free; Create and Release are subscribed but record nothing. */
    DRV(cuMemMap, "cuMemMap", API_ALLOC, false, false),
    DRV(cuMemUnmap, "cuMemUnmap", API_FREE, false, false),
    DRV(cuMemCreate, "cuMemCreate", API_IGNORE, false, false),
    DRV(cuMemRelease, "cuMemRelease", API_IGNORE, false, false),
};
#define N_APIS (sizeof apis / sizeof *apis)

static const api_entry *find_api(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    for (size_t i = 0; i < N_APIS; i++)
        if (apis[i].domain == domain && apis[i].cbid == cbid)
            return &apis[i];
    return NULL;
}

bool lp__cupti_wanted(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool *is_runtime)
{
    const api_entry *a = find_api(domain, cbid);
    if (is_runtime)
        *is_runtime = a && domain == CUPTI_CB_DOMAIN_RUNTIME_API;
    return a != NULL;
}

/* ---- pure translation ----------------------------------------------------------------------- */

/* The pointer an allocation API wrote, and the size it was asked for. */
static bool alloc_result(const api_entry *a, const void *params, uint64_t *addr, uint64_t *size)
{
    void **pp = NULL;
    CUdeviceptr *dp = NULL;
    switch (a->cbid + (a->domain == CUPTI_CB_DOMAIN_DRIVER_API ? 100000u : 0u)) {
#define RT_CASE(name, ptr_field, size_expr)                                                        \
    case CUPTI_RUNTIME_TRACE_CBID_##name: {                                                        \
        const name##_params *p = params;                                                           \
        pp = (void **)p->ptr_field;                                                                \
        *size = (uint64_t)(size_expr);                                                             \
        break;                                                                                     \
    }
        RT_CASE(cudaMalloc_v3020, devPtr, p->size)
        RT_CASE(cudaMallocManaged_v6000, devPtr, p->size)
        RT_CASE(cudaMallocHost_v3020, ptr, p->size)
        RT_CASE(cudaHostAlloc_v3020, pHost, p->size)
        RT_CASE(cudaMallocAsync_v11020, devPtr, p->size)
        RT_CASE(cudaMallocAsync_ptsz_v11020, devPtr, p->size)
        RT_CASE(cudaMallocFromPoolAsync_v11020, ptr, p->size)
        RT_CASE(cudaMallocFromPoolAsync_ptsz_v11020, ptr, p->size)
        RT_CASE(cudaMallocPitch_v3020, devPtr, (p->pitch ? *p->pitch : p->width) * p->height)
#undef RT_CASE
#define DRV_CASE(name, size_expr)                                                                  \
    case 100000u + CUPTI_DRIVER_TRACE_CBID_##name: {                                               \
        const name##_params *p = params;                                                           \
        dp = (CUdeviceptr *)p->dptr;                                                               \
        *size = (uint64_t)(size_expr);                                                             \
        break;                                                                                     \
    }
        DRV_CASE(cuMemAlloc_v2, p->bytesize)
        DRV_CASE(cuMemAllocManaged, p->bytesize)
        DRV_CASE(cuMemAllocAsync, p->bytesize)
        DRV_CASE(cuMemAllocAsync_ptsz, p->bytesize)
        DRV_CASE(cuMemAllocFromPoolAsync, p->bytesize)
        DRV_CASE(cuMemAllocFromPoolAsync_ptsz, p->bytesize)
        DRV_CASE(cuMemAllocPitch_v2, (p->pPitch ? *p->pPitch : p->WidthInBytes) * p->Height)
#undef DRV_CASE
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemAlloc: { /* 32-bit CUdeviceptr_v1 */
        const cuMemAlloc_params *p = params;
        if (!p->dptr)
            return false;
        *addr = *p->dptr;
        *size = p->bytesize;
        return true;
    }
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch: {
        const cuMemAllocPitch_params *p = params;
        if (!p->dptr)
            return false;
        *addr = *p->dptr;
        *size = (uint64_t)(p->pPitch ? *p->pPitch : p->WidthInBytes) * p->Height;
        return true;
    }
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost:
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
        const cuMemAllocHost_v2_params *p = params;
        pp = p->pp;
        *size = p->bytesize;
        break;
    }
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
        const cuMemHostAlloc_params *p = params;
        pp = p->pp;
        *size = p->bytesize;
        break;
    }
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
        const cuMemMap_params *p = params;
        *addr = p->ptr;
        *size = p->size;
        return true;
    }
    default:
        return false;
    }
    if (pp) {
        *addr = (uint64_t)(uintptr_t)*pp;
        return true;
    }
    if (dp) {
        *addr = *dp;
        return true;
    }
    return false;
}

/* The pointer a free API is given. */
static bool free_arg(const api_entry *a, const void *params, uint64_t *addr)
{
    switch (a->cbid + (a->domain == CUPTI_CB_DOMAIN_DRIVER_API ? 100000u : 0u)) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
        *addr = (uintptr_t)((const cudaFree_v3020_params *)params)->devPtr;
        return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020:
        *addr = (uintptr_t)((const cudaFreeHost_v3020_params *)params)->ptr;
        return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
        *addr = (uintptr_t)((const cudaFreeAsync_v11020_params *)params)->devPtr;
        return true;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020:
        *addr = (uintptr_t)((const cudaFreeAsync_ptsz_v11020_params *)params)->devPtr;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemFree:
        *addr = ((const cuMemFree_params *)params)->dptr;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
        *addr = ((const cuMemFree_v2_params *)params)->dptr;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
        *addr = (uintptr_t)((const cuMemFreeHost_params *)params)->p;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
        *addr = ((const cuMemFreeAsync_params *)params)->dptr;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz:
        *addr = ((const cuMemFreeAsync_ptsz_params *)params)->dptr;
        return true;
    case 100000u + CUPTI_DRIVER_TRACE_CBID_cuMemUnmap:
        *addr = ((const cuMemUnmap_params *)params)->ptr;
        return true;
    default:
        return false;
    }
}

bool lp__cupti_translate_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                  const CUpti_CallbackData *cb, int32_t device, lp__gpu_event *out)
{
    memset(out, 0, sizeof *out);
    const api_entry *a = find_api(domain, cbid);
    if (!a || !cb || !cb->functionParams || a->role == API_IGNORE)
        return false;
    out->device = a->host ? LP_HOST : device;
    out->correlation_id = cb->correlationId;
    out->op = a->op;
    out->flags = (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? LP__GPU_FROM_RUNTIME : 0u) |
                 (a->async ? LP__GPU_ASYNC : 0u);
    if (a->role == API_ALLOC) {
        if (cb->callbackSite != CUPTI_API_EXIT)
            return false;
        /* cudaError_t and CUresult: 0 is success in both. */
        if (!cb->functionReturnValue || *(const int *)cb->functionReturnValue != 0)
            return false;
        if (!alloc_result(a, cb->functionParams, &out->addr, &out->size) || !out->addr)
            return false;
        out->kind = LP__GPU_ALLOC;
        return true;
    }
    if (cb->callbackSite != CUPTI_API_ENTER)
        return false;
    if (!free_arg(a, cb->functionParams, &out->addr) || !out->addr)
        return false; /* cudaFree(NULL) frees nothing */
    out->kind = LP__GPU_FREE;
    return true;
}

bool lp__cupti_translate_activity(const CUpti_Activity *record, lp__gpu_event *out)
{
    memset(out, 0, sizeof *out);
    if (!record)
        return false;
    out->flags = LP__GPU_FROM_ACTIVITY;
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
        const CUpti_ActivityMemory4 *m = (const CUpti_ActivityMemory4 *)record;
        if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION)
            out->kind = LP__GPU_ALLOC;
        else if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
            out->kind = LP__GPU_FREE;
        else
            return false;
        if (!m->address)
            return false;
        bool host = m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
        out->device = host ? LP_HOST : (int32_t)m->deviceId;
        out->addr = m->address;
        out->size = out->kind == LP__GPU_ALLOC ? m->bytes : 0;
        out->correlation_id = m->correlationId;
        if (m->isAsync)
            out->flags |= LP__GPU_ASYNC;
        out->op = host                                                  ? "cuda_pinned"
                  : m->memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED ? "cuda_managed"
                                                                        : "cuda_device";
        return true;
    }
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL) {
        const CUpti_ActivityMemoryPool3 *p = (const CUpti_ActivityMemoryPool3 *)record;
        switch (p->memoryPoolOperationType) {
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_CREATED:
            out->kind = LP__GPU_POOL_CREATED;
            break;
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_DESTROYED:
            out->kind = LP__GPU_POOL_DESTROYED;
            break;
        case CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED:
            out->kind = LP__GPU_POOL_TRIMMED;
            break;
        default:
            return false;
        }
        out->device = (int32_t)p->deviceId;
        out->addr = p->address;
        out->size = p->size;
        out->correlation_id = p->correlationId;
        out->flags |= LP__GPU_ASYNC;
        out->op = "cuda_mempool";
        return true;
    }
    return false;
}

/* ---- state ------------------------------------------------------------------------------------
 */

static struct {
    pthread_mutex_t lock;
    bool initialized;
    lp__cupti_status status;
    lp__cupti_bridge_fn bridge;
    CUpti_SubscriberHandle subscriber;
    /* Correlation ids of the API calls the callbacks handled (an open-addressing set that forgets
     * the oldest ids when full: activity records arrive within a flush interval). */
    uint32_t seen[1u << 14];
    uint32_t seen_count;
    _Atomic uint64_t allocs, frees, matched, late, pools, dropped;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread int runtime_depth; /* inside a runtime allocation API on this thread */

#define SEEN_SLOTS (sizeof S.seen / sizeof *S.seen)

static void seen_add(uint32_t id)
{
    if (!id)
        return;
    pthread_mutex_lock(&S.lock);
    if (S.seen_count >= SEEN_SLOTS / 2) { /* forget everything older than a half-full table */
        memset(S.seen, 0, sizeof S.seen);
        S.seen_count = 0;
    }
    uint32_t h = (id * 2654435761u) & (SEEN_SLOTS - 1);
    while (S.seen[h] && S.seen[h] != id)
        h = (h + 1) & (SEEN_SLOTS - 1);
    if (!S.seen[h]) {
        S.seen[h] = id;
        S.seen_count++;
    }
    pthread_mutex_unlock(&S.lock);
}

static bool seen_has(uint32_t id)
{
    if (!id)
        return false;
    pthread_mutex_lock(&S.lock);
    uint32_t h = (id * 2654435761u) & (SEEN_SLOTS - 1);
    while (S.seen[h] && S.seen[h] != id)
        h = (h + 1) & (SEEN_SLOTS - 1);
    bool found = S.seen[h] == id;
    pthread_mutex_unlock(&S.lock);
    return found;
}

static void say(const char *fmt, const char *detail)
{
    char line[512];
    int n = snprintf(line, sizeof line, fmt, detail ? detail : "");
    if (n > 0) {
        size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
        ssize_t w = write(2, line, len);
        (void)w;
    }
}

bool lp__cupti_handle(const lp__gpu_event *ev)
{
    if (!S.bridge)
        return false;
    if (ev->kind == LP__GPU_POOL_CREATED || ev->kind == LP__GPU_POOL_DESTROYED ||
        ev->kind == LP__GPU_POOL_TRIMMED) {
        atomic_fetch_add(&S.pools, 1);
        return false;
    }
    if (ev->kind != LP__GPU_ALLOC && ev->kind != LP__GPU_FREE)
        return false;
    if (ev->flags & LP__GPU_FROM_ACTIVITY) {
        if (seen_has(ev->correlation_id)) {
            atomic_fetch_add(&S.matched, 1);
            return false;
        }
        if (!ev->correlation_id) {
            atomic_fetch_add(&S.dropped, 1);
            return false;
        }
        atomic_fetch_add(&S.late, 1);
    } else {
        seen_add(ev->correlation_id);
    }
    int what = ev->kind == LP__GPU_ALLOC ? LP__BRIDGE_ALLOC : LP__BRIDGE_FREE;
    if (!S.bridge(what, (const void *)(uintptr_t)ev->addr, (size_t)ev->size, ev->device, ev->op))
        return false;
    atomic_fetch_add(what == LP__BRIDGE_ALLOC ? &S.allocs : &S.frees, 1);
    return true;
}

void lp__cupti_get_stats(lp__cupti_stats *out)
{
    out->recorded_allocs = atomic_load(&S.allocs);
    out->recorded_frees = atomic_load(&S.frees);
    out->activity_matched = atomic_load(&S.matched);
    out->activity_late = atomic_load(&S.late);
    out->pool_events = atomic_load(&S.pools);
    out->activity_dropped = atomic_load(&S.dropped);
}

/* ---- CUPTI callbacks --------------------------------------------------------------------------
 */

static void CUPTIAPI lp__cupti_on_callback(void *user, CUpti_CallbackDomain domain,
                                           CUpti_CallbackId cbid, const void *data)
{
    (void)user;
    const CUpti_CallbackData *cb = data;
    bool is_runtime = false;
    if (!cb || !lp__cupti_wanted(domain, cbid, &is_runtime))
        return;
    if (is_runtime) {
        if (cb->callbackSite == CUPTI_API_ENTER)
            runtime_depth++;
    } else if (runtime_depth > 0) {
        /* The driver call under a runtime allocation: the runtime callback records it. Its
         * correlation id joins the runtime call's (activity records may carry either). */
        seen_add(cb->correlationId);
        return;
    }
    /* The device of the call's context (NULL = the current one); 0 if CUPTI cannot say (device
     * memory is never put on the host column for want of an ordinal). */
    int32_t device = 0;
    uint32_t dev = 0;
    if (cuptiGetDeviceId(cb->context, &dev) == CUPTI_SUCCESS)
        device = (int32_t)dev;
    lp__gpu_event ev;
    if (lp__cupti_translate_callback(domain, cbid, cb, device, &ev))
        lp__cupti_handle(&ev);
    else
        seen_add(cb->correlationId);
    if (is_runtime && cb->callbackSite == CUPTI_API_EXIT && runtime_depth > 0)
        runtime_depth--;
}

#define BUFFER_BYTES (1u << 20)

static void CUPTIAPI lp__cupti_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    void *p = mmap(NULL, BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *buffer = p == MAP_FAILED ? NULL : p;
    *size = p == MAP_FAILED ? 0 : BUFFER_BYTES;
    *max_records = 0;
}

static void CUPTIAPI lp__cupti_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                                size_t size, size_t valid)
{
    (void)ctx;
    (void)stream;
    (void)size;
    if (!buffer)
        return;
    CUpti_Activity *record = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        lp__gpu_event ev;
        if (lp__cupti_translate_activity(record, &ev))
            lp__cupti_handle(&ev);
    }
    munmap(buffer, BUFFER_BYTES);
}

static void at_exit(void)
{
    if (S.status != LP__CUPTI_ON)
        return;
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    const char *v = getenv("GRADPROF_CUDA_VERBOSE");
    if (v && *v && *v != '0') {
        lp__cupti_stats st;
        lp__cupti_get_stats(&st);
        fprintf(stderr,
                "gradprof: cuda: %llu allocations, %llu frees recorded; activity records: %llu "
                "joined, %llu recorded late, %llu without correlation; %llu pool events\n",
                (unsigned long long)st.recorded_allocs, (unsigned long long)st.recorded_frees,
                (unsigned long long)st.activity_matched, (unsigned long long)st.activity_late,
                (unsigned long long)st.activity_dropped, (unsigned long long)st.pool_events);
    }
}

/* ---- init -------------------------------------------------------------------------------------
 */

static CUptiResult real_get_result_string(CUptiResult r, const char **s)
{
    return cuptiGetResultString(r, s);
}

static const lp__cupti_api real_api = {
    .subscribe = cuptiSubscribe,
    .enable_callback = cuptiEnableCallback,
    .activity_enable = cuptiActivityEnable,
    .activity_register = cuptiActivityRegisterCallbacks,
    .get_result_string = real_get_result_string,
};

static const char *result_text(const lp__cupti_api *api, CUptiResult r)
{
    const char *s = NULL;
    if (api->get_result_string && api->get_result_string(r, &s) == CUPTI_SUCCESS && s)
        return s;
    return "unknown CUPTI error";
}

lp__cupti_status lp__cupti_init(const lp__cupti_api *api, lp__cupti_bridge_fn bridge)
{
    if (S.initialized)
        return S.status;
    S.initialized = true;
    if (!api)
        api = &real_api;
    if (!bridge) {
        union {
            void *p;
            lp__cupti_bridge_fn f;
        } u = {.p = dlsym(RTLD_DEFAULT, LP__CUPTI_BRIDGE_SYMBOL)};
        bridge = u.f;
    }
    if (!bridge) {
        say("gradprof: cuda: no gradprof recorder in this process (run it with 'gradprof run "
            "--cuda'); device memory is not recorded%s\n",
            NULL);
        return S.status = LP__CUPTI_NO_RECORDER;
    }
    CUptiResult r = api->subscribe(&S.subscriber, lp__cupti_on_callback, NULL);
    if (r != CUPTI_SUCCESS) {
        if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
            say("gradprof: cuda: another CUPTI client (Nsight, the PyTorch profiler, ...) holds "
                "the subscription; recording host memory only%s\n",
                NULL);
        else
            say("gradprof: cuda: CUPTI unavailable (%s); recording host memory only\n",
                result_text(api, r));
        return S.status = LP__CUPTI_HOST_ONLY;
    }
    for (size_t i = 0; i < N_APIS; i++) {
        r = api->enable_callback(1, S.subscriber, apis[i].domain, apis[i].cbid);
        if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_INVALID_PARAMETER) {
            say("gradprof: cuda: cannot enable CUPTI callbacks (%s); recording host memory "
                "only\n",
                result_text(api, r));
            return S.status = LP__CUPTI_HOST_ONLY;
        }
    }
    S.bridge = bridge;
    /* Activity records are an addition: without them, the callbacks still record everything
     * made through the APIs above. */
    if (api->activity_register(lp__cupti_buffer_requested, lp__cupti_buffer_completed) ==
        CUPTI_SUCCESS) {
        api->activity_enable(CUPTI_ACTIVITY_KIND_MEMORY2);
        api->activity_enable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    }
    S.status = LP__CUPTI_ON;
    if (api == &real_api)
        atexit(at_exit);
    return S.status;
}

void lp__cupti_reset_for_tests(void)
{
    S.initialized = false;
    S.status = LP__CUPTI_ON;
    S.bridge = NULL;
    memset(S.seen, 0, sizeof S.seen);
    S.seen_count = 0;
    atomic_store(&S.allocs, 0);
    atomic_store(&S.frees, 0);
    atomic_store(&S.matched, 0);
    atomic_store(&S.late, 0);
    atomic_store(&S.pools, 0);
    atomic_store(&S.dropped, 0);
    runtime_depth = 0;
}

EXPORT int InitializeInjection(void)
{
    lp__cupti_init(NULL, NULL);
    return 1;
}
