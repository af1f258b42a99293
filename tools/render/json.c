/*
 * The renderers' streaming JSON writer (API: json.h).
 */
#include "json.h"
#include "render_common.h"

#include <inttypes.h>
#include <string.h>

void gp__jw_begin(gp__jw *j, FILE *out)
{
    memset(j, 0, sizeof *j);
    j->out = out;
    j->first[0] = true;
}

/* Starts a value: the comma and line break before it, the indentation and the key, if any. */
static void value_start(gp__jw *j, const char *key)
{
    if (j->depth > 0) {
        if (!j->first[j->depth])
            fputs(j->one_line[j->depth] ? ", " : ",", j->out);
        if (!j->one_line[j->depth])
            fprintf(j->out, "\n%*s", 2 * j->depth, "");
    }
    j->first[j->depth] = false;
    if (key) {
        gp__json_string(j->out, key);
        fputs(": ", j->out);
    }
}

static void open_level(gp__jw *j, const char *key, char open, char close, bool one_line)
{
    value_start(j, key);
    fputc(open, j->out);
    if (j->depth + 1 >= GP__JW_MAX_DEPTH) {
        j->broken = true;
        return;
    }
    bool outer_one_line = j->depth > 0 && j->one_line[j->depth];
    j->depth++;
    j->first[j->depth] = true;
    j->one_line[j->depth] = one_line || outer_one_line;
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
        j->broken = true;
        return;
    }
    bool empty = j->first[j->depth], one_line = j->one_line[j->depth];
    char close = j->close[j->depth];
    j->depth--;
    if (!empty && !one_line)
        fprintf(j->out, "\n%*s", 2 * j->depth, "");
    fputc(close, j->out);
}

void gp__jw_str(gp__jw *j, const char *key, const char *value)
{
    value_start(j, key);
    if (value)
        gp__json_string(j->out, value);
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

int gp__jw_finish(gp__jw *j)
{
    fputc('\n', j->out);
    return ferror(j->out) || j->broken || j->depth != 0 ? -1 : 0;
}
