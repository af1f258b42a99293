/* Recording options: defaults and the GRADPROF_* environment. A bad value never changes the host
 * program's behaviour: it gives one warning line and the default. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recorder.h"

#define LP__ENV_MAX 4000 /* longer values are refused (the output path buffer is 4096) */

void lp_options_default(lp_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->output, sizeof o->output, "%s", LP_DEFAULT_OUTPUT);
    o->stack_depth = LP_DEFAULT_STACK_DEPTH;
    o->min_stack_size = 0;
    o->stack_sample_bytes = 0;
    o->flush_ms = LP_DEFAULT_FLUSH_MS;
    o->enabled = true;
    o->frame_pointers = true;
    o->cfi = true;
    o->tsc = true;
}

/* Warns about variable `name` (index `key`) once: "gradprof: GRADPROF_X='v' <why>; using <dflt>". */
static void lp__config_warn(int key, const char *name, const char *value, const char *why,
                            const char *fallback)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s='%.40s%s' %s; using %s", name, value,
             strlen(value) > 40 ? "..." : "", why, fallback);
    lp__warn_once(LP__WARN_CONFIG + key, msg);
}

/* Parses an unsigned decimal in [lo, hi]; returns 0, or -1 (and warns) if it is not one. */
static int lp__env_uint(int key, const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    const char *v = getenv(name);
    if (!v)
        return 0;
    char fallback[32];
    snprintf(fallback, sizeof fallback, "%llu", (unsigned long long)*out);
    if (strlen(v) > 20 || !*v || strspn(v, "0123456789") != strlen(v)) {
        lp__config_warn(key, name, v, "is not a non-negative integer", fallback);
        return -1;
    }
    errno = 0;
    unsigned long long x = strtoull(v, NULL, 10);
    if (errno || x < lo || x > hi) {
        char why[64];
        snprintf(why, sizeof why, "is outside [%llu, %llu]", (unsigned long long)lo,
                 (unsigned long long)hi);
        lp__config_warn(key, name, v, why, fallback);
        return -1;
    }
    *out = x;
    return 0;
}

/*
 * A GRADPROF_OUTPUT that cannot be used (empty, or longer than LP__ENV_MAX): the trace goes to
 * the default name in the current directory, made absolute, and the warning says where, with the
 * pid in place of %p ("(or .1, .2, ... if taken)" is in the README); if even that path cannot be
 * made, nothing is recorded and the warning says so.
 */
static void lp__output_refused(lp_options *o, const char *value)
{
    char why[64], cwd[4096], shown[200], where[240];
    size_t n = strlen(value);
    if (n == 0)
        snprintf(why, sizeof why, "is empty");
    else
        snprintf(why, sizeof why, "is too long (%zu bytes; the limit is %d)", n, LP__ENV_MAX);
    if (getcwd(cwd, sizeof cwd) != NULL &&
        (size_t)snprintf(o->output, sizeof o->output, "%s/%s", cwd, LP_DEFAULT_OUTPUT) <
            sizeof o->output) {
        char expanded[4160];
        snprintf(expanded, sizeof expanded, "%s/gradprof.%d.gptrace", cwd, (int)getpid());
        size_t len = strlen(expanded);
        if (len > 190)
            snprintf(shown, sizeof shown, "%.80s...%s", expanded, expanded + len - 80);
        else
            snprintf(shown, sizeof shown, "%.190s", expanded); /* len <= 190 */
        snprintf(where, sizeof where, "the trace goes to %s instead", shown);
    } else {
        o->enabled = false;
        snprintf(where, sizeof where, "and the current directory cannot stand in; not recording");
    }
    char msg[400];
    snprintf(msg, sizeof msg, "GRADPROF_OUTPUT='%.40s%s' %s; %s", value, n > 40 ? "..." : "", why,
             where);
    lp__warn_once(LP__WARN_CONFIG, msg);
}

void lp_options_from_env(lp_options *o)
{
    const char *out = getenv("GRADPROF_OUTPUT");
    if (out) {
        if (!*out || strlen(out) > LP__ENV_MAX)
            lp__output_refused(o, out);
        else
            snprintf(o->output, sizeof o->output, "%s", out);
    }
    uint64_t v = (uint64_t)o->stack_depth;
    if (lp__env_uint(1, "GRADPROF_STACK_DEPTH", 0, LP_MAX_STACK_DEPTH, &v) == 0)
        o->stack_depth = (int)v;
    lp__env_uint(2, "GRADPROF_MIN_STACK_SIZE", 0, UINT64_MAX / 2, &o->min_stack_size);
    lp__env_uint(3, "GRADPROF_STACK_SAMPLE", 0, UINT64_MAX / 2, &o->stack_sample_bytes);
    v = o->flush_ms;
    if (lp__env_uint(4, "GRADPROF_FLUSH_MS", LP_MIN_FLUSH_MS, LP_MAX_FLUSH_MS, &v) == 0)
        o->flush_ms = (uint32_t)v;
    v = o->enabled;
    if (lp__env_uint(5, "GRADPROF_ENABLE", 0, 1, &v) == 0)
        o->enabled = v != 0;
    v = o->frame_pointers;
    if (lp__env_uint(6, "GRADPROF_FRAME_POINTERS", 0, 1, &v) == 0)
        o->frame_pointers = v != 0;
    v = o->cfi;
    if (lp__env_uint(7, "GRADPROF_CFI", 0, 1, &v) == 0)
        o->cfi = v != 0;
    v = o->tsc;
    if (lp__env_uint(8, "GRADPROF_TSC", 0, 1, &v) == 0)
        o->tsc = v != 0;
}
