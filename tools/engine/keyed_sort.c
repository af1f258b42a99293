/* LSD radix sort of (key, index) pairs; see keyed_sort.h. */
#include "keyed_sort.h"

gp_keyed *gp__sort_keyed(gp_keyed *v, gp_keyed *tmp, size_t n)
{
    if (n < 2)
        return v;
    size_t count[8][256] = {{0}};
    for (size_t i = 0; i < n; i++)
        for (unsigned d = 0; d < 8; d++)
            count[d][(v[i].key >> (8 * d)) & 0xFF]++;
    gp_keyed *from = v, *to = tmp;
    for (unsigned d = 0; d < 8; d++) {
        size_t *c = count[d];
        if (c[(v[0].key >> (8 * d)) & 0xFF] == n)
            continue; /* one digit for all: this pass would change nothing */
        size_t at = 0;
        for (unsigned b = 0; b < 256; b++) { /* counts -> where each digit's run starts */
            size_t k = c[b];
            c[b] = at;
            at += k;
        }
        for (size_t i = 0; i < n; i++)
            to[c[(from[i].key >> (8 * d)) & 0xFF]++] = from[i];
        gp_keyed *t = from;
        from = to;
        to = t;
    }
    return from;
}
