/*
 * libFuzzer harness: the CLI's option parsers (gp_parse_size, gp_parse_uint, gp_parse_categories,
 * gp_parse_detectors), gp_format_bytes, the path checks of output files (gp_path_check,
 * gp_path_shown) and the description of a recorder's end_reason (gp_check_end_reason) on the
 * input as a string. Checks the documented promises too: a parsed size
 * without unit or fraction equals its digits, a parsed uint lies in [min, max], the error message
 * is a terminated string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli.h"
#include "output.h"
#include "render.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[256];
    uint64_t v = 0;

    err[0] = '\0';
    if (gp_parse_size(text, &v, err, sizeof err) == 0) {
        char buf[64];
        gp_format_bytes(v, buf, sizeof buf);
        if (!memchr(buf, '\0', sizeof buf))
            abort();
    } else if (!memchr(err, '\0', sizeof err)) {
        abort();
    }
    /* A tiny error buffer must still be terminated and not overrun. */
    char small[4] = "";
    (void)gp_parse_size(text, &v, small, sizeof small);
    if (!memchr(small, '\0', sizeof small))
        abort();

    if (gp_parse_uint(text, 3, 1000, &v, err, sizeof err) == 0 && (v < 3 || v > 1000))
        abort();
    (void)gp_parse_uint(text, 0, UINT64_MAX, &v, err, sizeof err);

    bool set[LP_CAT_COUNT];
    (void)gp_parse_categories(text, set, err, sizeof err);
    (void)gp_parse_categories(text, set, small, sizeof small);

    bool kinds[GP_FIND_KIND_COUNT];
    if (gp_parse_detectors(text, kinds, err, sizeof err) != 0 && !memchr(err, '\0', sizeof err))
        abort();
    (void)gp_parse_detectors(text, kinds, small, sizeof small);

    /* Path checks: a terminated message whenever they refuse; refused exactly when too long. */
    err[0] = '\0';
    int prc = gp_path_check(text, err, sizeof err);
    if (prc != 0 && (!memchr(err, '\0', sizeof err) || strlen(text) < 256))
        abort();
    char shown[256];
    if (!memchr(gp_path_shown(text, shown, sizeof shown), '\0', sizeof shown))
        abort();
    char how[160];
    const char *ended = gp_check_end_reason(text, how, sizeof how);
    if (ended && !memchr(how, '\0', sizeof how))
        abort();
    free(text);
    return 0;
}
