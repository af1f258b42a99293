/*
 * The renderers' JSON writer (tools/render/json.h), byte for byte: both styles and both layouts,
 * a block inside a one-line level (the Chrome trace's shape), escaping and UTF-8 repair of values
 * and keys, exact decimals, doubles (null when not finite), and the errors gp__jw_finish reports.
 * The renderers' golden files cover the writer on real documents; these pin its rules.
 */
#define _GNU_SOURCE /* open_memstream */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json.h" /* tools/render/json.h (this test does not see tensor/json.h) */

typedef struct doc {
    char *buf;
    size_t len;
    FILE *f;
    gp__jw j;
} doc;

static void doc_open(doc *d, bool compact)
{
    memset(d, 0, sizeof *d);
    d->f = open_memstream(&d->buf, &d->len);
    assert_non_null(d->f);
    if (compact)
        gp__jw_begin_compact(&d->j, d->f);
    else
        gp__jw_begin(&d->j, d->f);
}

/* Finishes the document, checks gp__jw_finish's result and the bytes written. */
static void doc_expect(doc *d, int rc, const char *want)
{
    assert_int_equal(gp__jw_finish(&d->j), rc);
    assert_int_equal(fclose(d->f), 0);
    assert_string_equal(d->buf, want);
    free(d->buf);
}

static void test_readable(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, false);
    gp__jw_object(&d.j, NULL, false);
    gp__jw_str(&d.j, "schema", "x/1");
    gp__jw_object(&d.j, "one", true);
    gp__jw_u64(&d.j, "a", 1);
    gp__jw_i64(&d.j, "b", -2);
    gp__jw_array(&d.j, "c", true);
    gp__jw_bool(&d.j, NULL, true);
    gp__jw_null(&d.j, NULL);
    gp__jw_end(&d.j);
    gp__jw_end(&d.j);
    gp__jw_array(&d.j, "rows", false);
    gp__jw_object(&d.j, NULL, true);
    gp__jw_str(&d.j, "s", NULL);
    gp__jw_end(&d.j);
    gp__jw_array(&d.j, NULL, false); /* an empty block */
    gp__jw_end(&d.j);
    gp__jw_end(&d.j);
    gp__jw_object(&d.j, "empty", true);
    gp__jw_end(&d.j);
    gp__jw_end(&d.j);
    doc_expect(&d, 0,
               "{\n"
               "  \"schema\": \"x/1\",\n"
               "  \"one\": {\"a\": 1, \"b\": -2, \"c\": [true, null]},\n"
               "  \"rows\": [\n"
               "    {\"s\": null},\n"
               "    []\n"
               "  ],\n"
               "  \"empty\": {}\n"
               "}\n");
}

/* The Chrome trace's shape: a one-line top object holding a block array, compact. */
static void test_compact_block_inside_one_line(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, true);
    gp__jw_object(&d.j, NULL, true);
    gp__jw_array(&d.j, "traceEvents", false);
    for (int i = 0; i < 2; i++) {
        gp__jw_object(&d.j, NULL, true);
        gp__jw_str(&d.j, "ph", "C");
        gp__jw_decimal(&d.j, "ts", 1234567 + (uint64_t)i, 3);
        gp__jw_object(&d.j, "args", true);
        gp__jw_u64(&d.j, "n", (uint64_t)i);
        gp__jw_end(&d.j);
        gp__jw_end(&d.j);
    }
    gp__jw_end(&d.j);
    gp__jw_str(&d.j, "unit", "ms");
    gp__jw_end(&d.j);
    doc_expect(&d, 0,
               "{\"traceEvents\":[\n"
               "{\"ph\":\"C\",\"ts\":1234.567,\"args\":{\"n\":0}},\n"
               "{\"ph\":\"C\",\"ts\":1234.568,\"args\":{\"n\":1}}\n"
               "],\"unit\":\"ms\"}\n");
}

static void test_escaping(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, true);
    gp__jw_object(&d.j, NULL, true);
    gp__jw_str(&d.j, "q\"k\\", "a\"b\\c\n\r\t\b\f\x01\x1f\x7f/");
    gp__jw_str(&d.j, "utf8", "\xc3\xa9 \xe2\x80\x93 \xf0\x9f\x98\x80"); /* é – 😀: kept */
    gp__jw_str(&d.j, "bad", "\xff|\xc0\x80|\xed\xa0\x80|\xe2\x82");     /* each byte repaired */
    gp__jw_str(&d.j, "\xfe", "");
    gp__jw_end(&d.j);
    doc_expect(&d, 0,
               "{\"q\\\"k\\\\\":\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\\u007f/\","
               "\"utf8\":\"\xc3\xa9 \xe2\x80\x93 \xf0\x9f\x98\x80\","
               "\"bad\":\"\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd\","
               "\"\\ufffd\":\"\"}\n");
}

static void test_numbers(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, true);
    gp__jw_array(&d.j, NULL, true);
    gp__jw_decimal(&d.j, NULL, 5, 3);
    gp__jw_decimal(&d.j, NULL, 7, 0);
    gp__jw_decimal(&d.j, NULL, UINT64_MAX, 18);
    gp__jw_u64(&d.j, NULL, UINT64_MAX);
    gp__jw_i64(&d.j, NULL, INT64_MIN);
    gp__jw_f64(&d.j, NULL, 86.0, 1);
    gp__jw_f64(&d.j, NULL, 154000.0, 0);
    gp__jw_f64(&d.j, NULL, NAN, 0);
    gp__jw_f64(&d.j, NULL, -INFINITY, 1);
    gp__jw_end(&d.j);
    doc_expect(&d, 0,
               "[0.005,7,18.446744073709551615,18446744073709551615,-9223372036854775808,"
               "86.0,154000,null,null]\n");
}

static void test_embedded_has_no_newline(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, true);
    gp__jw_object(&d.j, NULL, true);
    gp__jw_u64(&d.j, "x", 1);
    gp__jw_end(&d.j);
    assert_int_equal(gp__jw_finish_embedded(&d.j), 0);
    assert_int_equal(fclose(d.f), 0);
    assert_string_equal(d.buf, "{\"x\":1}");
    free(d.buf);
}

static void test_errors(void **state)
{
    (void)state;
    doc d;
    doc_open(&d, false); /* left open */
    gp__jw_array(&d.j, NULL, true);
    doc_expect(&d, -1, "[\n");

    doc_open(&d, false); /* closed once too often */
    gp__jw_array(&d.j, NULL, true);
    gp__jw_end(&d.j);
    gp__jw_end(&d.j);
    doc_expect(&d, -1, "[]\n");

    doc_open(&d, true); /* a value its caller could not make */
    gp__jw_array(&d.j, NULL, true);
    gp__jw_fail(&d.j);
    gp__jw_end(&d.j);
    doc_expect(&d, -1, "[]\n");

    doc_open(&d, true); /* more decimals than a uint64_t has */
    gp__jw_decimal(&d.j, NULL, 1, 19);
    doc_expect(&d, -1, "0.000000000000000001\n");

    doc_open(&d, true); /* nesting deeper than GP__JW_MAX_DEPTH */
    for (int i = 0; i < GP__JW_MAX_DEPTH; i++)
        gp__jw_array(&d.j, NULL, true);
    assert_int_equal(gp__jw_finish(&d.j), -1);
    fclose(d.f);
    free(d.buf);

    FILE *full = fopen("/dev/full", "w"); /* a write that fails */
    if (full) {
        gp__jw j;
        gp__jw_begin(&j, full);
        gp__jw_str(&j, NULL, "x");
        assert_int_equal(gp__jw_finish(&j), -1);
        fclose(full);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_readable),
        cmocka_unit_test(test_compact_block_inside_one_line),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_embedded_has_no_newline),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
