/*
 * The renderers' one JSON writer (API: json.h): escaping, UTF-8 repair, separators and layout.
 */
#include "json.h"
#include "render_common.h" /* gp__utf8_decode */

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Writes s as a JSON string literal, quotes included (see json.h for the escaping). */
static void write_string(FILE *out, const char *s)
{
    fputc('"', out);
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc((int)c, out);
            p++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n':
                fputs("\\n", out);
                break;
            case '\r':
                fputs("\\r", out);
                break;
            case '\t':
                fputs("\\t", out);
                break;
            case '\b':
                fputs("\\b", out);
                break;
            case '\f':
                fputs("\\f", out);
                break;
            default:
                fprintf(out, "\\u%04x", c);
                break;
            }
            p++;
        } else if (c < 0x80) {
            fputc((int)c, out);
            p++;
        } else {
            unsigned cp;
            size_t n = gp__utf8_decode(p, &cp);
            if (n == 0) {
                fputs("\\ufffd", out); /* not UTF-8: keep the output valid */
                p++;
            } else {
                fwrite(p, 1, n, out);
                p += n;
            }
        }
    }
    fputc('"', out);
}

void gp__jw_begin(gp__jw *j, FILE *out)
{
    memset(j, 0, sizeof *j);
    j->out = out;
    j->first[0] = true;
}

void gp__jw_begin_compact(gp__jw *j, FILE *out)
{
    gp__jw_begin(j, out);
    j->compact = true;
}

/* A line break and the indentation of `depth`. */
static void new_line(gp__jw *j, int depth)
{
    fputc('\n', j->out);
    if (!j->compact)
        fprintf(j->out, "%*s", 2 * depth, "");
}

/* Starts a value: the comma and line break before it, the indentation and the key, if any. */
static void value_start(gp__jw *j, const char *key)
{
    if (j->depth > 0) {
        bool one_line = j->one_line[j->depth];
        if (!j->first[j->depth])
            fputs(one_line && !j->compact ? ", " : ",", j->out);
        if (!one_line)
            new_line(j, j->depth);
    }
    j->first[j->depth] = false;
    if (key) {
        write_string(j->out, key);
        fputs(j->compact ? ":" : ": ", j->out);
    }
}

static void open_level(gp__jw *j, const char *key, char open, char close, bool one_line)
{
    value_start(j, key);
    fputc(open, j->out);
    if (j->depth + 1 >= GP__JW_MAX_DEPTH) {
        j->failed = true;
        return;
    }
    j->depth++;
    j->first[j->depth] = true;
    j->one_line[j->depth] = one_line;
    j->close[j->depth] = close;
}

void gp__jw_object(gp__jw *j, const char *key, bool one_line)
{
    open_level(j, key, '{', '}', one_line);
}

void gp__jw_array(gp__jw *j, const char *key, bool one_line)
{
    open_level(j, key, '[', ']', one_line);
}

void gp__jw_end(gp__jw *j)
{
    if (j->depth == 0) {
        j->failed = true;
        return;
    }
    bool empty = j->first[j->depth], one_line = j->one_line[j->depth];
    char close = j->close[j->depth];
    j->depth--;
    if (!empty && !one_line)
        new_line(j, j->depth);
    fputc(close, j->out);
}

void gp__jw_str(gp__jw *j, const char *key, const char *value)
{
    value_start(j, key);
    if (value)
        write_string(j->out, value);
    else
        fputs("null", j->out);
}

void gp__jw_u64(gp__jw *j, const char *key, uint64_t value)
{
    value_start(j, key);
    fprintf(j->out, "%" PRIu64, value);
}

void gp__jw_i64(gp__jw *j, const char *key, int64_t value)
{
    value_start(j, key);
    fprintf(j->out, "%" PRId64, value);
}

void gp__jw_bool(gp__jw *j, const char *key, bool value)
{
    value_start(j, key);
    fputs(value ? "true" : "false", j->out);
}

void gp__jw_null(gp__jw *j, const char *key)
{
    value_start(j, key);
    fputs("null", j->out);
}

void gp__jw_decimal(gp__jw *j, const char *key, uint64_t value, unsigned places)
{
    value_start(j, key);
    if (places > 18) {
        j->failed = true;
        places = 18;
    }
    uint64_t div = 1;
    for (unsigned i = 0; i < places; i++)
        div *= 10;
    if (places == 0)
        fprintf(j->out, "%" PRIu64, value);
    else
        fprintf(j->out, "%" PRIu64 ".%0*" PRIu64, value / div, (int)places, value % div);
}

void gp__jw_f64(gp__jw *j, const char *key, double value, int decimals)
{
    value_start(j, key);
    if (isfinite(value))
        fprintf(j->out, "%.*f", decimals, value);
    else
        fputs("null", j->out);
}

void gp__jw_fail(gp__jw *j)
{
    j->failed = true;
}

int gp__jw_finish_embedded(gp__jw *j)
{
    return ferror(j->out) || j->failed || j->depth != 0 ? -1 : 0;
}

int gp__jw_finish(gp__jw *j)
{
    fputc('\n', j->out);
    int rc = gp__jw_finish_embedded(j);
    return fflush(j->out) != 0 ? -1 : rc;
}
