/*
 * The one entry point through which the CUPTI module (libprof_cupti.so, which links nothing of
 * libprof) records into the recorder of the process: built into libprof_preload.so and libprof.so
 * (see cupti.cmake) and exported; the module finds it with dlsym(RTLD_DEFAULT). Under LD_PRELOAD
 * the preload library's copy is found first, like its lp_* API.
 */
#include "recorder.h"

/* what: 1 = ALLOC (then a TAG of category OTHER whose op is the API, e.g. "cudaMalloc"),
 * 2 = FREE. Returns 1 when recorded, 0 when not recording (or re-entered). */
__attribute__((visibility("default"))) int
lp__cupti_bridge_record(int what, const void *addr, size_t size, int32_t device, const char *op);

int lp__cupti_bridge_record(int what, const void *addr, size_t size, int32_t device, const char *op)
{
    if (!lp__recording() || (what != 1 && what != 2))
        return 0;
    if (!lp__guard_enter())
        return 0;
    if (what == 1) {
        lp__record_alloc(addr, size, (lp_device)device);
        lp_tag tag = {.category = LP_CAT_OTHER,
                      .op = op ? op : "",
                      .module = "",
                      .detail = NULL,
                      .grad_enabled = false};
        lp__record_tag(addr, size, (lp_device)device, &tag, true);
    } else {
        lp__record_free(addr, (lp_device)device);
    }
    lp__guard_exit();
    return 1;
}
