/* Grad modes: thread-local and nestable, as c10/core/GradMode.h. */
#include "tensor_internal.h"

static _Thread_local tn_grad_mode tn__mode = {.grad_enabled = true, .inference_mode = false};

bool tn_is_grad_enabled(void) { return tn__mode.grad_enabled; }

bool tn_set_grad_enabled(bool enabled)
{
    bool previous = tn__mode.grad_enabled;
    tn__mode.grad_enabled = enabled;
    if (previous != enabled)
        lp_grad_mode(enabled, tn__mode.inference_mode);
    return previous;
}

bool tn_is_inference_mode_enabled(void) { return tn__mode.inference_mode; }

/* Sets the thread's mode, telling libprof when it changes. */
static void tn__set_mode(tn_grad_mode next)
{
    bool changed = next.grad_enabled != tn__mode.grad_enabled ||
                   next.inference_mode != tn__mode.inference_mode;
    tn__mode = next;
    if (changed)
        lp_grad_mode(next.grad_enabled, next.inference_mode);
}

static tn_grad_mode tn__enter(tn_grad_mode next, const char *region)
{
    tn_grad_mode previous = tn__mode;
    lp_region_push(region);
    tn__set_mode(next);
    return previous;
}

tn_grad_mode tn_no_grad_begin(void)
{
    return tn__enter((tn_grad_mode){false, tn__mode.inference_mode}, "no_grad");
}

tn_grad_mode tn_enable_grad_begin(void)
{
    return tn__enter((tn_grad_mode){true, tn__mode.inference_mode}, "enable_grad");
}

tn_grad_mode tn_inference_mode_begin(bool enabled)
{
    /* inference_mode(false) inside inference mode restores normal autograd, as in PyTorch. */
    tn_grad_mode next = enabled ? (tn_grad_mode){false, true} : (tn_grad_mode){true, false};
    return tn__enter(next, enabled ? "inference_mode" : "inference_mode(false)");
}

void tn_grad_mode_end(tn_grad_mode previous)
{
    tn__set_mode(previous);
    lp_region_pop();
}

bool tn__grad_needed(int n, tn_tensor *const *inputs)
{
    if (!tn__mode.grad_enabled)
        return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad)
            return true;
    return false;
}
