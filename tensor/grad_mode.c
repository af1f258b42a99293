/* Grad modes: thread-local and nestable, as c10/core/GradMode.h. A thread's mode starts as
 * GRADPROF_GRAD_DEFAULT says, read when the thread first uses its mode. */
#include "tensor_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local tn_grad_mode tn__mode = {.grad_enabled = true, .inference_mode = false};
static _Thread_local bool tn__mode_ready;
static atomic_bool tn__default_warned;

/* Whether grad starts enabled: GRADPROF_GRAD_DEFAULT unset, empty or "on" gives true, "off"
 * false. Any other value gives true and one warning line per process. */
static bool tn__grad_default(void)
{
    const char *v = getenv("GRADPROF_GRAD_DEFAULT");
    if (!v || !*v || strcmp(v, "on") == 0)
        return true;
    if (strcmp(v, "off") == 0)
        return false;
    if (!atomic_exchange(&tn__default_warned, true)) {
        char line[160];
        int n = snprintf(line, sizeof line,
                         "gradprof: GRADPROF_GRAD_DEFAULT='%.40s%s' is not 'on' or 'off'; "
                         "using on\n",
                         v, strlen(v) > 40 ? "..." : "");
        /* One write (the value is cut at 40 bytes, so the line fits). */
        ssize_t w = write(STDERR_FILENO, line, n > 0 ? strlen(line) : 0);
        (void)w;
    }
    return true;
}

/* This thread's mode, set from GRADPROF_GRAD_DEFAULT on its first use. A thread that starts
 * with grad off tells libprof, so that the trace knows its mode from the start. */
static tn_grad_mode *tn__mode_get(void)
{
    if (!tn__mode_ready) {
        tn__mode_ready = true;
        tn__mode = (tn_grad_mode){.grad_enabled = tn__grad_default(), .inference_mode = false};
        if (!tn__mode.grad_enabled)
            lp_grad_mode(false, false);
    }
    return &tn__mode;
}

bool tn_is_grad_enabled(void) { return tn__mode_get()->grad_enabled; }

bool tn_set_grad_enabled(bool enabled)
{
    tn_grad_mode *m = tn__mode_get();
    bool previous = m->grad_enabled;
    m->grad_enabled = enabled;
    if (previous != enabled)
        lp_grad_mode(enabled, m->inference_mode);
    return previous;
}

bool tn_is_inference_mode_enabled(void) { return tn__mode_get()->inference_mode; }

/* Sets the thread's mode, telling libprof when it changes. */
static void tn__set_mode(tn_grad_mode next)
{
    tn_grad_mode *m = tn__mode_get();
    bool changed = next.grad_enabled != m->grad_enabled || next.inference_mode != m->inference_mode;
    *m = next;
    if (changed)
        lp_grad_mode(next.grad_enabled, next.inference_mode);
}

static tn_grad_mode tn__enter(tn_grad_mode next, const char *region)
{
    tn_grad_mode previous = *tn__mode_get();
    lp_region_push(region);
    tn__set_mode(next);
    return previous;
}

tn_grad_mode tn_no_grad_begin(void)
{
    return tn__enter((tn_grad_mode){false, tn__mode_get()->inference_mode}, LP_REGION_NO_GRAD);
}

tn_grad_mode tn_enable_grad_begin(void)
{
    return tn__enter((tn_grad_mode){true, tn__mode_get()->inference_mode}, LP_REGION_ENABLE_GRAD);
}

tn_grad_mode tn_inference_mode_begin(bool enabled)
{
    /* inference_mode(false) inside inference mode restores normal autograd, as in PyTorch. */
    tn_grad_mode next = enabled ? (tn_grad_mode){false, true} : (tn_grad_mode){true, false};
    return tn__enter(next, enabled ? LP_REGION_INFERENCE_MODE : LP_REGION_INFERENCE_MODE_OFF);
}

void tn_grad_mode_end(tn_grad_mode previous)
{
    tn__set_mode(previous);
    lp_region_pop();
}

bool tn__grad_needed(int n, tn_tensor *const *inputs)
{
    if (!tn__mode_get()->grad_enabled)
        return false;
    for (int i = 0; i < n; i++)
        if (inputs[i] && inputs[i]->requires_grad)
            return true;
    return false;
}
