/*
 * A small strict JSON parser for safetensors headers; see json.h for what it accepts and how its
 * memory is bounded.
 *
 * The parser runs twice over the input with the same code: the counting pass validates everything
 * and counts values and decoded string bytes; the filling pass writes them into one block sized by
 * those counts. The second pass cannot fail, since it sees the same bytes.
 */
#include "json.h"

#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

/* Longest number literal accepted, in characters (an implementation limit RFC 8259 allows). */
#define JSON_MAX_NUMBER_CHARS 400

typedef struct json_parser {
    const unsigned char *s;
    size_t len;
    size_t pos;
    int depth;
    bool fill; /* false: counting pass; true: filling pass */
    /* Counting pass: totals. */
    size_t n_values;
    size_t str_bytes;
    /* Filling pass: where the next value and string go. */
    tn__json_value *values;
    size_t next_value;
    char *strs;
    size_t next_str;
    /* Counting pass: values are written here and forgotten. */
    tn__json_value scratch;
    char *err;
    size_t err_size;
} json_parser;

static int json_value(json_parser *p, tn__json_value **out);

/* Describes the byte at pos for an error message: "'x'", "byte 0x01" or "end of input". */
static const char *json_found(const json_parser *p, size_t pos, char *buf, size_t size)
{
    if (pos >= p->len) {
        snprintf(buf, size, "end of input");
    } else {
        unsigned char c = p->s[pos];
        if (c >= 0x20 && c < 0x7f)
            snprintf(buf, size, "'%c'", c);
        else
            snprintf(buf, size, "byte 0x%02x", c);
    }
    return buf;
}

/* Writes "at byte N: <message>" into the caller's buffer (first error only); returns -1. */
__attribute__((format(printf, 3, 4))) static int json_fail(json_parser *p, size_t at,
                                                           const char *fmt, ...)
{
    if (p->err && p->err_size > 0) {
        int n = snprintf(p->err, p->err_size, "at byte %zu: ", at);
        if (n >= 0 && (size_t)n < p->err_size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->err + n, p->err_size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* Fails with "expected <what>, found <the byte at pos>". */
static int json_expected(json_parser *p, size_t pos, const char *what)
{
    char found[32];
    return json_fail(p, pos, "expected %s, found %s", what, json_found(p, pos, found, sizeof found));
}

static void json_skip_ws(json_parser *p)
{
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

/* A fresh value of `type` at `offset`: a slot of the block when filling, the scratch otherwise. */
static tn__json_value *json_new_value(json_parser *p, tn__json_type type, size_t offset)
{
    tn__json_value *v;
    if (p->fill) {
        v = &p->values[p->next_value++];
    } else {
        p->n_values++;
        v = &p->scratch;
    }
    memset(v, 0, sizeof *v);
    v->type = type;
    v->offset = offset;
    return v;
}

/* Appends the UTF-8 encoding of code point cp (<= 0x10FFFF, not a surrogate) to the string being
 * decoded (counting only, in the first pass); adds its length to *n. */
static void json_put_utf8(json_parser *p, uint32_t cp, size_t *n)
{
    unsigned char b[4];
    size_t k;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        k = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18));
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        k = 4;
    }
    if (p->fill)
        memcpy(p->strs + p->next_str + *n, b, k);
    *n += k;
}

/* Reads 4 hex digits at pos into *out; fails naming the offending byte. */
static int json_hex4(json_parser *p, size_t pos, uint32_t *out)
{
    uint32_t v = 0;
    for (size_t i = 0; i < 4; i++) {
        if (pos + i >= p->len)
            return json_expected(p, pos + i, "4 hex digits after \\u");
        unsigned char c = p->s[pos + i];
        uint32_t d;
        if (c >= '0' && c <= '9')
            d = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (uint32_t)(c - 'A' + 10);
        else
            return json_expected(p, pos + i, "4 hex digits after \\u");
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* The length of the valid UTF-8 sequence starting at pos (a byte >= 0x80), or 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid; RFC 3629). */
static size_t json_utf8_len(const json_parser *p, size_t pos)
{
    const unsigned char *s = p->s + pos;
    size_t left = p->len - pos;
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (left < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Parses the string starting at pos (which is '"') and decodes it. When filling, *out points at
 * the NUL-terminated copy in the block; *out_len is the decoded length either way. */
static int json_string(json_parser *p, const char **out, size_t *out_len)
{
    size_t start = p->pos;
    size_t n = 0; /* decoded bytes so far */
    p->pos++;     /* the opening quote */
    for (;;) {
        if (p->pos >= p->len)
            return json_fail(p, p->pos, "unterminated string starting at byte %zu", start);
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            p->pos++;
            break;
        }
        if (c < 0x20)
            return json_fail(p, p->pos, "raw control character 0x%02x in a string (escape it)", c);
        if (c == '\\') {
            size_t esc = p->pos;
            if (esc + 1 >= p->len)
                return json_expected(p, esc + 1, "an escape character after '\\'");
            unsigned char e = p->s[esc + 1];
            uint32_t cp = 0;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (json_hex4(p, esc + 2, &cp) < 0)
                    return -1;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return json_fail(p, esc, "unpaired low surrogate \\u%04X", (unsigned)cp);
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    size_t lo_at = esc + 6;
                    uint32_t lo = 0;
                    if (lo_at + 1 >= p->len || p->s[lo_at] != '\\' || p->s[lo_at + 1] != 'u')
                        return json_fail(p, lo_at,
                                         "expected a \\uDC00-\\uDFFF low surrogate after \\u%04X",
                                         (unsigned)cp);
                    if (json_hex4(p, lo_at + 2, &lo) < 0)
                        return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF)
                        return json_fail(p, lo_at,
                                         "expected a \\uDC00-\\uDFFF low surrogate after \\u%04X, "
                                         "found \\u%04X",
                                         (unsigned)cp, (unsigned)lo);
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    p->pos = lo_at + 6;
                } else {
                    p->pos = esc + 6;
                }
                json_put_utf8(p, cp, &n);
                continue;
            default: {
                char found[32];
                return json_fail(p, esc + 1, "invalid escape \\%s (expected one of \"\\/bfnrtu)",
                                 json_found(p, esc + 1, found, sizeof found));
            }
            }
            json_put_utf8(p, cp, &n);
            p->pos = esc + 2;
            continue;
        }
        if (c < 0x80) {
            if (p->fill)
                p->strs[p->next_str + n] = (char)c;
            n++;
            p->pos++;
            continue;
        }
        size_t k = json_utf8_len(p, p->pos);
        if (k == 0)
            return json_fail(p, p->pos, "invalid UTF-8 byte 0x%02x in a string", c);
        if (p->fill)
            memcpy(p->strs + p->next_str + n, p->s + p->pos, k);
        n += k;
        p->pos += k;
    }
    if (p->fill) {
        p->strs[p->next_str + n] = '\0';
        *out = p->strs + p->next_str;
        p->next_str += n + 1;
    } else {
        p->str_bytes += n + 1;
        *out = NULL;
    }
    *out_len = n;
    return 0;
}

static bool json_is_digit(const json_parser *p, size_t pos)
{
    return pos < p->len && p->s[pos] >= '0' && p->s[pos] <= '9';
}

/* Parses a number literal at pos: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int json_number(json_parser *p, tn__json_value *v)
{
    size_t start = p->pos, i = p->pos;
    bool negative = false, integral = true;
    if (i < p->len && p->s[i] == '-') {
        negative = true;
        i++;
    }
    if (!json_is_digit(p, i))
        return json_expected(p, i, "a digit");
    if (p->s[i] == '0') {
        i++;
        if (json_is_digit(p, i))
            return json_fail(p, i, "leading zero in a number");
    } else {
        while (json_is_digit(p, i))
            i++;
    }
    if (i < p->len && p->s[i] == '.') {
        integral = false;
        i++;
        if (!json_is_digit(p, i))
            return json_expected(p, i, "a digit after the decimal point");
        while (json_is_digit(p, i))
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        integral = false;
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (!json_is_digit(p, i))
            return json_expected(p, i, "a digit in the exponent");
        while (json_is_digit(p, i))
            i++;
    }
    size_t n = i - start;
    if (n > JSON_MAX_NUMBER_CHARS)
        return json_fail(p, start, "number literal of %zu characters is too long (limit %d)", n,
                         JSON_MAX_NUMBER_CHARS);
    /* Exact integer value when the literal is integral and fits in int64_t. */
    if (integral) {
        uint64_t mag = 0;
        bool fits = true;
        for (size_t k = start + (negative ? 1 : 0); k < i; k++) {
            uint64_t d = (uint64_t)(p->s[k] - '0');
            if (mag > (UINT64_MAX - d) / 10) {
                fits = false;
                break;
            }
            mag = mag * 10 + d;
        }
        if (fits && !negative && mag <= (uint64_t)INT64_MAX) {
            v->is_integer = true;
            v->integer = (int64_t)mag;
        } else if (fits && negative && mag <= (uint64_t)INT64_MAX + 1) {
            v->is_integer = true;
            v->integer = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
        }
    }
    if (v->is_integer) {
        v->number = (double)v->integer;
    } else {
        /* strtod wants a NUL-terminated string and the locale's decimal point. */
        char buf[JSON_MAX_NUMBER_CHARS + 1];
        memcpy(buf, p->s + start, n);
        buf[n] = '\0';
        const char *dp = localeconv()->decimal_point;
        if (dp && dp[0] && !dp[1] && dp[0] != '.') {
            char *dot = strchr(buf, '.');
            if (dot)
                *dot = dp[0];
        }
        char *end = NULL;
        double d = strtod(buf, &end);
        if (end != buf + n)
            return json_fail(p, start, "cannot convert number %s", buf);
        if (isinf(d))
            return json_fail(p, start, "number %s is out of the range of a double", buf);
        v->number = d;
    }
    p->pos = i;
    return 0;
}

/* Matches the literal `word` (true/false/null) at pos. */
static int json_literal(json_parser *p, const char *word)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) {
        char what[16];
        snprintf(what, sizeof what, "'%s'", word);
        /* Point at the first byte that differs. */
        size_t k = 0;
        while (p->pos + k < p->len && k < n && p->s[p->pos + k] == (unsigned char)word[k])
            k++;
        return json_expected(p, p->pos + k, what);
    }
    p->pos += n;
    return 0;
}

static int json_enter(json_parser *p)
{
    if (++p->depth > TN__JSON_MAX_DEPTH)
        return json_fail(p, p->pos, "nesting deeper than %d levels", TN__JSON_MAX_DEPTH);
    return 0;
}

/* Parses an array at pos ('['); children are linked in order. */
static int json_array(json_parser *p, tn__json_value *v)
{
    if (json_enter(p) < 0)
        return -1;
    p->pos++;
    json_skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == ']') {
        p->pos++;
        p->depth--;
        return 0;
    }
    tn__json_value *last = NULL;
    for (;;) {
        json_skip_ws(p);
        tn__json_value *child;
        if (json_value(p, &child) < 0)
            return -1;
        if (last)
            last->next = child;
        else
            v->first = child;
        last = child;
        v->count++;
        json_skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == ']') {
            p->pos++;
            break;
        }
        return json_expected(p, p->pos, "',' or ']' after an array element");
    }
    p->depth--;
    return 0;
}

/* Parses an object at pos ('{'); members are linked in order with their keys. */
static int json_object(json_parser *p, tn__json_value *v)
{
    if (json_enter(p) < 0)
        return -1;
    p->pos++;
    json_skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == '}') {
        p->pos++;
        p->depth--;
        return 0;
    }
    /* Counted locally: v is scratch in the counting pass. */
    size_t members = 0;
    tn__json_value *last = NULL;
    for (;;) {
        json_skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != '"')
            return json_expected(p, p->pos, members == 0 ? "a string key or '}'" : "a string key");
        const char *key;
        size_t key_len;
        if (json_string(p, &key, &key_len) < 0)
            return -1;
        json_skip_ws(p);
        if (p->pos >= p->len || p->s[p->pos] != ':')
            return json_expected(p, p->pos, "':' after an object key");
        p->pos++;
        json_skip_ws(p);
        tn__json_value *child;
        if (json_value(p, &child) < 0)
            return -1;
        child->key = key;
        child->key_len = key_len;
        if (last)
            last->next = child;
        else
            v->first = child;
        last = child;
        v->count++;
        members++;
        json_skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == '}') {
            p->pos++;
            break;
        }
        return json_expected(p, p->pos, "',' or '}' after an object member");
    }
    p->depth--;
    return 0;
}

/* Parses one value at pos (whitespace already skipped). */
static int json_value(json_parser *p, tn__json_value **out)
{
    size_t at = p->pos;
    if (at >= p->len)
        return json_expected(p, at, "a value");
    tn__json_value *v;
    int rc;
    switch (p->s[at]) {
    case '{':
        v = json_new_value(p, TN__JSON_OBJECT, at);
        rc = json_object(p, v);
        break;
    case '[':
        v = json_new_value(p, TN__JSON_ARRAY, at);
        rc = json_array(p, v);
        break;
    case '"':
        v = json_new_value(p, TN__JSON_STRING, at);
        rc = json_string(p, &v->str, &v->len);
        break;
    case 't':
        v = json_new_value(p, TN__JSON_BOOL, at);
        v->boolean = true;
        rc = json_literal(p, "true");
        break;
    case 'f':
        v = json_new_value(p, TN__JSON_BOOL, at);
        rc = json_literal(p, "false");
        break;
    case 'n':
        v = json_new_value(p, TN__JSON_NULL, at);
        rc = json_literal(p, "null");
        break;
    default:
        if (p->s[at] == '-' || (p->s[at] >= '0' && p->s[at] <= '9')) {
            v = json_new_value(p, TN__JSON_NUMBER, at);
            rc = json_number(p, v);
            break;
        }
        return json_expected(p, at, "a value (object, array, string, number, true, false or null)");
    }
    *out = v;
    return rc;
}

/* Parses the whole input: one value between optional whitespace. */
static int json_document(json_parser *p, tn__json_value **root)
{
    p->pos = 0;
    p->depth = 0;
    json_skip_ws(p);
    if (json_value(p, root) < 0)
        return -1;
    json_skip_ws(p);
    if (p->pos != p->len)
        return json_expected(p, p->pos, "end of input after the value");
    return 0;
}

int tn__json_parse(const char *text, size_t len, const char *op, tn__json_doc **out, char *err,
                   size_t err_size)
{
    *out = NULL;
    if (err && err_size > 0)
        err[0] = '\0';
    json_parser p = {.s = (const unsigned char *)text, .len = len, .err = err,
                     .err_size = err_size};
    if (!text && len > 0) {
        json_fail(&p, 0, "no input");
        return TN_EFORMAT;
    }
    tn__json_value *root = NULL;
    if (json_document(&p, &root) < 0)
        return TN_EFORMAT;

    /* One block: the document header, the values, the strings. n_values <= len and
     * str_bytes <= 2 * len here, so the sizes cannot overflow unless len is absurd; check anyway. */
    size_t head = (sizeof(tn__json_doc) + _Alignof(tn__json_value) - 1) /
                  _Alignof(tn__json_value) * _Alignof(tn__json_value);
    if (p.n_values > (SIZE_MAX - head - p.str_bytes) / sizeof(tn__json_value)) {
        json_fail(&p, 0, "document too large");
        return TN_EFORMAT;
    }
    size_t bytes = head + p.n_values * sizeof(tn__json_value) + p.str_bytes;
    char *block = tn__alloc(bytes, LP_CAT_TEMPORARY, op ? op : "json_parse", NULL);
    if (!block) {
        if (err && err_size > 0)
            snprintf(err, err_size, "out of memory");
        return TN_ENOMEM;
    }
    tn__json_doc *doc = (tn__json_doc *)block;
    doc->block_bytes = bytes;
    p.fill = true;
    p.values = (tn__json_value *)(block + head);
    p.next_value = 0;
    p.strs = block + head + p.n_values * sizeof(tn__json_value);
    p.next_str = 0;
    int rc = json_document(&p, &root);
    (void)rc;
    /* The filling pass sees the bytes the counting pass accepted. */
    if (rc != 0 || p.next_value != p.n_values || p.next_str != p.str_bytes) {
        tn__free(block, bytes, LP_CAT_TEMPORARY);
        json_fail(&p, 0, "internal error: the two parsing passes disagree");
        return TN_EFORMAT;
    }
    doc->root = root;
    *out = doc;
    return 0;
}

void tn__json_free(tn__json_doc *doc)
{
    if (doc)
        tn__free(doc, doc->block_bytes, LP_CAT_TEMPORARY);
}

const tn__json_value *tn__json_get(const tn__json_value *obj, const char *key)
{
    if (!obj || obj->type != TN__JSON_OBJECT || !key)
        return NULL;
    size_t n = strlen(key);
    for (const tn__json_value *m = obj->first; m; m = m->next)
        if (m->key_len == n && memcmp(m->key, key, n) == 0)
            return m;
    return NULL;
}

const char *tn__json_type_name(tn__json_type type)
{
    switch (type) {
    case TN__JSON_NULL: return "null";
    case TN__JSON_BOOL: return "boolean";
    case TN__JSON_NUMBER: return "number";
    case TN__JSON_STRING: return "string";
    case TN__JSON_ARRAY: return "array";
    case TN__JSON_OBJECT: return "object";
    }
    return "unknown";
}
