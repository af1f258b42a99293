/*
 * The renderers' one JSON writer: every JSON document the tools write (report, diff, check,
 * Chrome trace, the HTML charts' data blocks) goes through it, so escaping, UTF-8 repair, commas
 * and indentation are decided here and nowhere else. Internal to tools/ (gp__ prefix).
 *
 * A document is written as a stream: objects and arrays nest, each opened either as a block
 * (members one per line) or on one line; a level's layout is its own, whatever its parent's (a
 * block inside a one-line object puts its members on lines of their own, as the Chrome trace's
 * event list does). Two styles for the whole document:
 *   - readable (gp__jw_begin): "key": value, members of one-line levels separated by ", ",
 *     block members indented two spaces per level;
 *   - compact (gp__jw_begin_compact): "key":value, separated by ",", no indentation.
 * Strings are escaped (quote, backslash, control characters as \n, \t, ... or \u00XX) and always
 * valid UTF-8: a byte that does not start a valid UTF-8 sequence is written as \ufffd. Keys go
 * through the same escaping.
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
 *
 * An empty object or array is written "{}" / "[]" in either layout.
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
    bool compact;                    /* the compact style (no spaces, no indentation) */
    bool first[GP__JW_MAX_DEPTH];    /* nothing written yet at this depth */
    bool one_line[GP__JW_MAX_DEPTH]; /* this level's members go on one line */
    char close[GP__JW_MAX_DEPTH];    /* the bracket that ends this level */
    bool failed; /* nesting too deep or unbalanced (an internal error), or gp__jw_fail */
} gp__jw;

/* Starts a document on `out` in the readable or the compact style. */
void gp__jw_begin(gp__jw *j, FILE *out);
void gp__jw_begin_compact(gp__jw *j, FILE *out);
/* Opens an object or array as a member named `key` (NULL inside an array or at the top); its
 * members go on one line when `one_line`, else one per line. */
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
/* value / 10^places, exactly, with `places` decimals (at most 18): (1234567, 3) writes 1234.567,
 * (5, 3) writes 0.005. For times kept in integer nanoseconds and shown in larger units. */
void gp__jw_decimal(gp__jw *j, const char *key, uint64_t value, unsigned places);
/* A double with `decimals` decimals ("%.*f"); null when it is not finite (NaN or infinite have no
 * JSON form). */
void gp__jw_f64(gp__jw *j, const char *key, double value, int decimals);

/* Marks the document as failed (the caller could not produce a value, e.g. out of memory): the
 * writer goes on, and gp__jw_finish returns -1. */
void gp__jw_fail(gp__jw *j);
/* Ends the document with a newline and flushes `out`. Returns 0, or -1 if a write failed
 * (ferror), the nesting was not closed, or gp__jw_fail was called. */
int gp__jw_finish(gp__jw *j);
/* The same without the newline, for a document embedded in another one (the HTML page's chart
 * data). Does not flush. */
int gp__jw_finish_embedded(gp__jw *j);

#endif /* GRADPROF_TOOLS_JSON_H */
