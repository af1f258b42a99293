/*
 * The tools' one hash table: open addressing with linear probing from a (k1, k2, k3) key of three
 * 64-bit words to a uint32 value (GP_MAP_NONE marks an empty slot, so it is not a valid value).
 * Removal shifts the rest of the probe run back (no tombstones), so a table with constant churn,
 * such as a live set, keeps short probes. A zeroed gp_map is empty; gp__map_free releases it.
 * Also the tools' hashes: of a word (gp__mix64), of a text (gp__hash_text), of an address for a
 * cache of recent answers (gp__recent_slot).
 */
#ifndef GRADPROF_TOOLS_HASHMAP_H
#define GRADPROF_TOOLS_HASHMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"

#define GP_MAP_NONE UINT32_MAX

/* A 64-bit finalizer (MurmurHash3's fmix64). */
static inline uint64_t gp__mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Two independent 64-bit hashes of the n bytes at s, 8 at a time: with n, a key for the text
 * that two different strings share with negligible probability. */
static inline void gp__hash_text(const char *s, size_t n, uint64_t *h1_out, uint64_t *h2_out)
{
    uint64_t h1 = 0xcbf29ce484222325ull ^ n, h2 = 0x84222325cbf29ce4ull + n;
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, s + i, n - i < 8 ? n - i : 8);
        h1 = gp__mix64(h1 ^ w);
        h2 = (h2 ^ w) * 0x9E3779B97F4A7C15ull;
        h2 ^= h2 >> 29;
    }
    *h1_out = h1;
    *h2_out = gp__mix64(h2);
}

/* A direct-mapped cache of the last answers asked by address (an interned string's, say) has
 * GP_RECENT entries; address p goes in slot gp__recent_slot(p). */
#define GP_RECENT 64
static inline size_t gp__recent_slot(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    return (a >> 3 ^ a >> 9) % GP_RECENT;
}

typedef struct gp_map {
    struct gp_map_slot {
        uint64_t k1, k2, k3;
        uint32_t v;
    } *slots;
    size_t cap, len;
} gp_map;

static inline size_t gp__map_hash(uint64_t a, uint64_t b, uint64_t c)
{
    return gp__mix64(a ^ (b * 0x9E3779B97F4A7C15ull) ^ (c * 0xC2B2AE3D27D4EB4Full));
}

/* The slot holding (a, b, c), or NULL. */
static inline struct gp_map_slot *gp__map_find(const gp_map *m, uint64_t a, uint64_t b, uint64_t c)
{
    if (!m->cap)
        return NULL;
    for (size_t i = gp__map_hash(a, b, c) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        struct gp_map_slot *s = &m->slots[i];
        if (s->v == GP_MAP_NONE)
            return NULL;
        if (s->k1 == a && s->k2 == b && s->k3 == c)
            return s;
    }
}

static inline bool gp__map_grow(gp_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 256;
    struct gp_map_slot *slots = gp__malloc_big(cap * sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < cap; i++)
        slots[i].v = GP_MAP_NONE;
    for (size_t i = 0; i < m->cap; i++) {
        struct gp_map_slot *s = &m->slots[i];
        if (s->v == GP_MAP_NONE)
            continue;
        size_t j = gp__map_hash(s->k1, s->k2, s->k3) & (cap - 1);
        while (slots[j].v != GP_MAP_NONE)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return true;
}

/* Makes room for n entries in all, so that adding them rehashes nothing. Returns false when out
 * of memory (then the map is unchanged but perhaps grown). */
static inline bool gp__map_reserve(gp_map *m, size_t n)
{
    while ((n + 1) * 4 > m->cap * 3)
        if (!gp__map_grow(m))
            return false;
    return true;
}

/* Adds (a, b, c) -> v; the key must not be present. Returns false when out of memory. */
static inline bool gp__map_put(gp_map *m, uint64_t a, uint64_t b, uint64_t c, uint32_t v)
{
    if ((m->len + 1) * 4 > m->cap * 3 && !gp__map_grow(m))
        return false;
    size_t i = gp__map_hash(a, b, c) & (m->cap - 1);
    while (m->slots[i].v != GP_MAP_NONE)
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = (struct gp_map_slot){a, b, c, v};
    m->len++;
    return true;
}

/* Removes a slot found by gp__map_find (pointers into the table are invalid afterwards). */
static inline void gp__map_remove(gp_map *m, struct gp_map_slot *s)
{
    size_t mask = m->cap - 1, i = (size_t)(s - m->slots);
    for (size_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        struct gp_map_slot *t = &m->slots[j];
        if (t->v == GP_MAP_NONE)
            break;
        size_t home = gp__map_hash(t->k1, t->k2, t->k3) & mask;
        /* t may move into the hole at i unless its home lies cyclically in (i, j] */
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->slots[i] = *t;
            i = j;
        }
    }
    m->slots[i].v = GP_MAP_NONE;
    m->len--;
}

static inline void gp__map_free(gp_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}

#endif
