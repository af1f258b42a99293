/*
 * A small strict JSON parser (RFC 8259), enough for safetensors headers. Internal; not installed.
 *
 * Strict: exactly one value with optional whitespace around it; no comments, trailing commas,
 * leading zeros, NaN/Infinity or byte-order mark; strings must be valid UTF-8 without raw control
 * characters, and \u escapes must pair surrogates. Nesting deeper than TN__JSON_MAX_DEPTH is refused,
 * so recursion stays bounded.
 *
 * Memory: the input is scanned twice, first to validate it and count values and string bytes, then
 * to fill ONE block from tn__alloc (tagged TEMPORARY with the caller's op). The block holds
 * sizeof(tn__json_value) per value plus the decoded strings, so it is bounded by the input length
 * (each value takes at least one input byte, and a decoded string is never longer than its source
 * plus its terminating NUL); callers bound the input length.
 */
#ifndef GRADPROF_TENSOR_JSON_H
#define GRADPROF_TENSOR_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TN__JSON_MAX_DEPTH 64

typedef enum tn__json_type {
    TN__JSON_NULL,
    TN__JSON_BOOL,
    TN__JSON_NUMBER,
    TN__JSON_STRING,
    TN__JSON_ARRAY,
    TN__JSON_OBJECT,
} tn__json_type;

typedef struct tn__json_value tn__json_value;

/* One parsed value. Containers list their children through first/next in input order. All
 * pointers point into the document's block and live as long as the document. */
struct tn__json_value {
    tn__json_type type;
    size_t offset;        /* byte offset of the value's first character in the input */
    const char *key;      /* the member name when the parent is an object (NUL-terminated), or NULL */
    size_t key_len;       /* its length in bytes (it may contain NUL from \u0000) */
    tn__json_value *next; /* the next element or member of the parent, or NULL */
    /* TN__JSON_ARRAY, TN__JSON_OBJECT */
    tn__json_value *first;
    size_t count;
    /* TN__JSON_STRING: decoded UTF-8, NUL-terminated */
    const char *str;
    size_t len;
    /* TN__JSON_NUMBER: number is always set; is_integer when the literal has no fraction or
     * exponent and fits in int64_t, in which case integer is its exact value. */
    double number;
    bool is_integer;
    int64_t integer;
    /* TN__JSON_BOOL */
    bool boolean;
};

typedef struct tn__json_doc {
    tn__json_value *root;
    size_t block_bytes; /* the size of this block, for tn__free */
} tn__json_doc;

/* Parses text[0, len) (need not be NUL-terminated). On success returns 0 and sets *out to a new
 * document the caller frees with tn__json_free. On a syntax error returns TN_EFORMAT and writes
 * "at byte N: expected ..." into err (always NUL-terminated; the thread's error is NOT set, so the
 * caller can add context). On allocation failure returns TN_ENOMEM with the thread's error set
 * (naming `op`) and err saying "out of memory". */
int tn__json_parse(const char *text, size_t len, const char *op, tn__json_doc **out, char *err,
                   size_t err_size);

/* Frees a document; NULL is a no-op. */
void tn__json_free(tn__json_doc *doc);

/* The member of object `obj` named `key` (the first if repeated), or NULL (also when obj is not an
 * object). */
const tn__json_value *tn__json_get(const tn__json_value *obj, const char *key);

/* The name of a type ("object"), for error messages. */
const char *tn__json_type_name(tn__json_type type);

#endif /* GRADPROF_TENSOR_JSON_H */
