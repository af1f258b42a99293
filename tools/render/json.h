/*
 * A streaming JSON writer for the renderers: objects and arrays nest, each either as a block
 * (members one per line, indented two spaces per level) or on one line (and so is everything
 * inside it); strings go through gp__json_string (render_common.h: escaped, always valid UTF-8).
 * The writer places the commas, newlines and indentation, so a renderer only says what to write.
 * Internal to tools/ (gp__ prefix). Used by the check writers (render_check.c); the report's and
 * the diff's JSON renderers still place their own commas and may move onto it.
 *
 *   gp__jw j;
 *   gp__jw_begin(&j, out);
 *   gp__jw_object(&j, NULL, false);          {
 *   gp__jw_str(&j, "schema", "x/1");           "schema": "x/1",
 *   gp__jw_array(&j, "rows", false);           "rows": [
 *   gp__jw_object(&j, NULL, true);               {"n": 1}
 *   gp__jw_u64(&j, "n", 1);
 *   gp__jw_end(&j);
 *   gp__jw_end(&j);                            ]
 *   gp__jw_end(&j);                          }
 *   return gp__jw_finish(&j);                (newline; 0, or -1 when writing failed)
 */
#ifndef GRADPROF_TOOLS_JSON_H
#define GRADPROF_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define GP__JW_MAX_DEPTH 16

typedef struct gp__jw {
    FILE *out;
    int depth;
    bool first[GP__JW_MAX_DEPTH];    /* nothing written yet at this depth */
    bool one_line[GP__JW_MAX_DEPTH]; /* this level's members go on one line */
    char close[GP__JW_MAX_DEPTH];    /* the bracket that ends this level */
    bool broken;                     /* nesting too deep or unbalanced: an internal error */
} gp__jw;

void gp__jw_begin(gp__jw *j, FILE *out);
/* Opens an object or array as a member named `key` (NULL inside an array or at the top). */
void gp__jw_object(gp__jw *j, const char *key, bool one_line);
void gp__jw_array(gp__jw *j, const char *key, bool one_line);
/* Closes the innermost object or array. */
void gp__jw_end(gp__jw *j);
/* Values; `key` as above. gp__jw_str writes null for NULL. */
void gp__jw_str(gp__jw *j, const char *key, const char *value);
void gp__jw_u64(gp__jw *j, const char *key, uint64_t value);
void gp__jw_i64(gp__jw *j, const char *key, int64_t value);
void gp__jw_bool(gp__jw *j, const char *key, bool value);
void gp__jw_null(gp__jw *j, const char *key);
/* Ends the document with a newline. Returns 0, or -1 if a write failed (ferror) or the nesting
 * was not closed. */
int gp__jw_finish(gp__jw *j);

#endif /* GRADPROF_TOOLS_JSON_H */
