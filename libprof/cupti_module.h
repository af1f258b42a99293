/*
 * gradprof CUPTI module internals (libprof_cupti.so, loaded by CUDA through CUDA_INJECTION64_PATH).
 * Not installed.
 *
 * The module links nothing of libprof. At init it looks up the recorder's bridge,
 * lp__cupti_bridge_record (libprof/cupti_bridge.c, exported by libprof_preload.so and libprof.so),
 * with dlsym(RTLD_DEFAULT); without it the module warns once and stays passive.
 *
 * The translation from CUPTI callback data and activity records to gradprof events is pure (no
 * CUPTI calls, no global state) so that tests can run it on records built by hand.
 */
#ifndef GRADPROF_LIBPROF_CUPTI_MODULE_H
#define GRADPROF_LIBPROF_CUPTI_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

/* What the bridge records: an ALLOC (+ a TAG of category OTHER with op = `op`) or a FREE. */
enum { LP__BRIDGE_ALLOC = 1, LP__BRIDGE_FREE = 2 };
typedef int (*lp__cupti_bridge_fn)(int what, const void *addr, size_t size, int32_t device,
                                   const char *op);
#define LP__CUPTI_BRIDGE_SYMBOL "lp__cupti_bridge_record"

typedef enum lp__gpu_kind {
    LP__GPU_NONE = 0,       /* nothing to record (entry/exit not wanted, failed call, NULL free) */
    LP__GPU_ALLOC,          /* [addr, addr+size) became live on `device` */
    LP__GPU_FREE,           /* addr stops being live on `device` */
    LP__GPU_POOL_CREATED,   /* activity only: a stream-ordered pool was created / destroyed / */
    LP__GPU_POOL_DESTROYED, /* trimmed (not buffers: counted, not written to the trace) */
    LP__GPU_POOL_TRIMMED,
} lp__gpu_kind;

/* Marks an event translated from a runtime API call (the driver calls under it are skipped). */
#define LP__GPU_FROM_RUNTIME 0x1u
/* The event came from an activity record (delivered late, after the operation). */
#define LP__GPU_FROM_ACTIVITY 0x2u
/* Stream-ordered (cudaMallocAsync / cudaFreeAsync / pools). */
#define LP__GPU_ASYNC 0x4u

typedef struct lp__gpu_event {
    lp__gpu_kind kind;
    int32_t device; /* LP_DEVICE_HOST (-1) for pinned host memory, else the CUDA ordinal */
    uint64_t addr;
    uint64_t size; /* 0 for a FREE */
    uint32_t correlation_id;
    uint32_t flags; /* LP__GPU_* */
    const char *op; /* "cudaMalloc", "cuMemAlloc_v2", ... (static strings) */
} lp__gpu_event;

/* Whether a callback (domain, cbid) is one the module subscribes to, and whether it is a runtime
 * allocation API (which sets the thread's "inside a runtime allocation" flag). */
bool lp__cupti_wanted(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, bool *is_runtime);

/*
 * Translates one API callback into at most one event. `device` is the ordinal of cb->context (the
 * caller resolves it with cuptiGetDeviceId; -1 when unknown). Allocations are translated on
 * API exit (the address is known then, and only when the call succeeded); frees on entry (the
 * address is still valid, the stack is the caller's). Returns true when *out is an event.
 */
bool lp__cupti_translate_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                  const CUpti_CallbackData *cb, int32_t device, lp__gpu_event *out);

/* Translates one activity record (MEMORY2 as CUpti_ActivityMemory4, MEMORY_POOL as
 * CUpti_ActivityMemoryPool3). Returns true when *out is an event. */
bool lp__cupti_translate_activity(const CUpti_Activity *record, lp__gpu_event *out);

/* ---- the module's state (cupti.c), exposed for the tests ------------------------------------ */

/* The CUPTI entry points the module calls, replaceable by tests. */
typedef struct lp__cupti_api {
    CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                   CUpti_CallbackId);
    CUptiResult (*activity_enable)(CUpti_ActivityKind);
    CUptiResult (*activity_register)(CUpti_BuffersCallbackRequestFunc,
                                     CUpti_BuffersCallbackCompleteFunc);
    CUptiResult (*get_result_string)(CUptiResult, const char **);
} lp__cupti_api;

typedef enum lp__cupti_status {
    LP__CUPTI_ON = 0,         /* subscribed: device memory is recorded */
    LP__CUPTI_HOST_ONLY = 1,  /* CUPTI unavailable (no driver, another subscriber): host only */
    LP__CUPTI_NO_RECORDER = 2 /* no gradprof recorder in the process: nothing to record into */
} lp__cupti_status;

/* Sets the module up with `api` (NULL = the real CUPTI) and `bridge` (NULL = look it up with
 * dlsym). Prints at most one "gradprof: ..." line on stderr when it cannot record. Idempotent:
 * a second call returns the first call's status. */
lp__cupti_status lp__cupti_init(const lp__cupti_api *api, lp__cupti_bridge_fn bridge);
/* Forgets the state of lp__cupti_init (tests only; does not unsubscribe). */
void lp__cupti_reset_for_tests(void);

/* Feeds one translated event to the recorder, with the runtime/driver de-duplication and the
 * activity join. Returns true when it was recorded. (Exposed for the tests.) */
bool lp__cupti_handle(const lp__gpu_event *ev);

/* Counters of what the module did (for the exit summary and the tests). */
typedef struct lp__cupti_stats {
    uint64_t recorded_allocs, recorded_frees;
    uint64_t activity_matched, activity_late; /* activity records joined / recorded late */
    uint64_t pool_events, activity_dropped;
} lp__cupti_stats;
void lp__cupti_get_stats(lp__cupti_stats *out);

/* The entry point CUDA calls (CUDA_INJECTION64_PATH). Always returns 1 (the run goes on). */
int InitializeInjection(void);

#endif /* GRADPROF_LIBPROF_CUPTI_MODULE_H */
