/*
 * render_common — formatting, escaping, the timeline's buckets and orderings shared by the
 * renderers; see render_common.h (the text table is in render_table.c). Also defines render.h's
 * gp_render_options_default and gp_format_bytes.
 */
#include "render_common.h"

#include "keyed_sort.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

void gp_render_options_default(gp_render_options *o)
{
    o->top = 10;
    o->measure = "peak";
    o->color = false;
    o->folded_min = 0;
    o->folded_min_share = 0.001;
}

const char *gp_format_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, size, "%" PRIu64 " B", bytes);
        return buf;
    }
    /* The largest unit not above the value, in hundredths rounded to nearest; a value that rounds
     * up to 1024.00 of a unit is shown in the next one ("1.00 MiB", not "1024.00 KiB"). */
    int u = 0;
    while (u < 6 && bytes >> (10 * (u + 1)))
        u++;
    uint64_t div = 1ull << (10 * u);
    uint64_t hundredths = (uint64_t)(((unsigned __int128)bytes * 100 + div / 2) / div);
    if (hundredths >= 102400 && u < 6) {
        u++;
        div <<= 10;
        hundredths = (uint64_t)(((unsigned __int128)bytes * 100 + div / 2) / div);
    }
    snprintf(buf, size, "%" PRIu64 ".%02" PRIu64 " %s", hundredths / 100, hundredths % 100,
             units[u]);
    return buf;
}

const char *gp__format_count(uint64_t n, char *buf, size_t size)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%" PRIu64, n);
    char tmp[48];
    size_t k = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            tmp[k++] = ',';
        tmp[k++] = digits[i];
    }
    tmp[k] = '\0';
    snprintf(buf, size, "%s", tmp);
    return buf;
}

const char *gp__format_bytes_exact(uint64_t bytes, char *buf, size_t size)
{
    char h[32], n[32];
    gp_format_bytes(bytes, h, sizeof h);
    if (bytes < 1024)
        snprintf(buf, size, "%s", h);
    else
        snprintf(buf, size, "%s (%s B)", h, gp__format_count(bytes, n, sizeof n));
    return buf;
}

const char *gp__format_delta(int64_t bytes, char *buf, size_t size)
{
    char h[32];
    if (bytes == 0) {
        snprintf(buf, size, "0 B");
        return buf;
    }
    uint64_t mag = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
    snprintf(buf, size, "%c%s", bytes < 0 ? '-' : '+', gp_format_bytes(mag, h, sizeof h));
    return buf;
}

const char *gp__format_ns(uint64_t ns, char *buf, size_t size)
{
    static const char *const units[] = {"us", "ms", "s"};
    if (ns < 1000) {
        snprintf(buf, size, "%" PRIu64 " ns", ns);
        return buf;
    }
    double v = (double)ns / 1000.0;
    size_t u = 0;
    while (u + 1 < sizeof units / sizeof units[0] && v >= 999.5) {
        v /= 1000.0;
        u++;
    }
    if (v < 9.995)
        snprintf(buf, size, "%.2f %s", v, units[u]);
    else if (v < 99.95)
        snprintf(buf, size, "%.1f %s", v, units[u]);
    else
        snprintf(buf, size, "%.0f %s", v, units[u]);
    return buf;
}

const char *gp__format_percent(uint64_t part, uint64_t whole, char *buf, size_t size)
{
    if (whole == 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.1f%%", 100.0 * (double)part / (double)whole);
    return buf;
}

const char *gp__device_name(int32_t device, char *buf, size_t size)
{
    if (device == LP_DEVICE_HOST)
        snprintf(buf, size, "host");
    else
        snprintf(buf, size, "cuda:%" PRId32, device);
    return buf;
}

size_t gp__utf8_decode(const unsigned char *s, unsigned *cp)
{
    unsigned c = s[0], min;
    size_t n;
    *cp = c;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned v = c & (0x7fu >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

char *gp__sanitize_text(char *s, bool keep_newlines)
{
    for (unsigned char *p = (unsigned char *)s; p && *p; p++)
        if ((*p < 0x20 && !(keep_newlines && *p == '\n')) || *p == 0x7f)
            *p = '?';
    return s;
}

void gp__html_escape(FILE *out, const char *s)
{
    for (const char *p = s ? s : ""; *p; p++) {
        switch (*p) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&#39;", out);
            break;
        default:
            fputc(*p, out);
            break;
        }
    }
}

/* ---- the timeline's buckets ------------------------------------------------------------------ */

uint64_t gp__timeline_start(const gp_profile *p, size_t i)
{
    uint64_t t = p->timeline[i].time_ns, floor = i > 0 ? p->timeline[i - 1].time_ns : 0;
    return t - floor > p->timeline_bucket_ns ? t - p->timeline_bucket_ns : floor;
}

void gp__timeline_used_categories(const gp_profile *p, bool used[LP_CAT_COUNT])
{
    for (size_t i = 0; i < p->n_timeline; i++)
        for (int c = 0; c < LP_CAT_COUNT; c++)
            if (p->timeline[i].live_by_category[c] != 0)
                used[c] = true;
}

/* ---- measures and orderings ------------------------------------------------------------------ */

static const char *const measure_names[] = {"peak", "total", "count", "leaked"};

int gp__measure_parse(const char *name, gp__measure *out)
{
    if (!name) {
        *out = GP__MEASURE_PEAK;
        return 0;
    }
    for (size_t i = 0; i < sizeof measure_names / sizeof measure_names[0]; i++) {
        if (strcmp(name, measure_names[i]) == 0) {
            *out = (gp__measure)i;
            return 0;
        }
    }
    return -1;
}

const char *gp__measure_name(gp__measure m)
{
    if (m == GP__MEASURE_TEMPORARIES)
        return "temporaries";
    return (unsigned)m < sizeof measure_names / sizeof measure_names[0] ? measure_names[m] : "peak";
}

uint64_t gp__stats_measure(const gp_stats *s, gp__measure m)
{
    switch (m) {
    case GP__MEASURE_TOTAL:
        return s->total_bytes;
    case GP__MEASURE_COUNT:
        return s->count;
    case GP__MEASURE_LEAKED:
        return s->live_bytes;
    case GP__MEASURE_TEMPORARIES:
        return s->temporaries;
    case GP__MEASURE_PEAK:
    default:
        return s->peak_bytes;
    }
}

/* qsort has no context argument in C11: the comparators read these (renderers are not run
 * concurrently; see symbolize.h, the symbolizer is single-threaded too). */
static const gp_profile *sort_profile;
static gp__measure sort_measure;

static int cmp_u64_desc(uint64_t a, uint64_t b)
{
    return a > b ? -1 : a < b ? 1 : 0;
}

static int cmp_str(const char *a, const char *b)
{
    return gp_natural_cmp(a ? a : "", b ? b : "");
}

static int cmp_index(size_t a, size_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

static size_t *index_array(size_t n)
{
    if (n == 0)
        return NULL;
    size_t *ix = malloc(n * sizeof *ix);
    if (ix)
        for (size_t i = 0; i < n; i++)
            ix[i] = i;
    return ix;
}

/*
 * Sites: there can be one per distinct call stack (hundreds of thousands), and ties on the
 * numbers are common (one allocation of 32 bytes...), so the order is made in passes on plain
 * arrays instead of a qsort whose comparator reads the site and symbolizes its label: sort by
 * (measure, total bytes, index); then, only for runs that tie on both numbers, look up the
 * labels, rank the distinct labels by gp_natural_cmp (equal strings share a rank) and sort each
 * run by (rank, index). The result is the order of (measure desc, total desc, label, index).
 */
typedef struct site_key {
    uint64_t measure, total;
    uint32_t rank; /* of the label among the tied sites' labels; 0 for untied sites */
    uint32_t index;
} site_key;

static inline bool site_key_before(const site_key *a, const site_key *b)
{
    if (a->measure != b->measure)
        return a->measure > b->measure;
    if (a->total != b->total)
        return a->total > b->total;
    if (a->rank != b->rank)
        return a->rank < b->rank;
    return a->index < b->index;
}

static void site_key_swap(site_key *a, site_key *b)
{
    site_key t = *a;
    *a = *b;
    *b = t;
}

static void site_key_sift(site_key *v, size_t root, size_t n)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && site_key_before(&v[c], &v[c + 1]))
            c++;
        if (!site_key_before(&v[root], &v[c]))
            return;
        site_key_swap(&v[root], &v[c]);
        root = c;
    }
}

/* Sorts v[0..n) in place by site_key_before: quicksort (median of three) down to short ranges,
 * which insertion sort finishes; heapsort past a depth of 2 log2 n, so never quadratic. */
static void sort_site_keys(site_key *v, size_t n)
{
    size_t depth = 0;
    for (size_t m = n; m > 1; m >>= 1)
        depth += 2;
    while (n > 16) {
        if (depth-- == 0) { /* heapsort */
            for (size_t i = n / 2; i-- > 0;)
                site_key_sift(v, i, n);
            for (size_t i = n; i-- > 1;) {
                site_key_swap(&v[0], &v[i]);
                site_key_sift(v, 0, i);
            }
            return;
        }
        size_t mid = n / 2;
        if (site_key_before(&v[mid], &v[0]))
            site_key_swap(&v[mid], &v[0]);
        if (site_key_before(&v[n - 1], &v[mid]))
            site_key_swap(&v[n - 1], &v[mid]);
        if (site_key_before(&v[mid], &v[0]))
            site_key_swap(&v[mid], &v[0]);
        site_key pivot = v[mid]; /* keys are distinct (the index) */
        size_t i = 0, j = n - 1;
        for (;;) {
            while (site_key_before(&v[i], &pivot))
                i++;
            while (site_key_before(&pivot, &v[j]))
                j--;
            if (i >= j)
                break;
            site_key_swap(&v[i++], &v[j--]);
        }
        /* [0, j] before or at the pivot, [j + 1, n) after: recurse into the smaller part */
        size_t left = j + 1;
        if (left < n - left) {
            sort_site_keys(v, left);
            v += left;
            n -= left;
        } else {
            sort_site_keys(v + left, n - left);
            n = left;
        }
    }
    for (size_t i = 1; i < n; i++) {
        site_key x = v[i];
        size_t j = i;
        for (; j > 0 && site_key_before(&x, &v[j - 1]); j--)
            v[j] = v[j - 1];
        v[j] = x;
    }
}

/* The distinct labels of the tied sites: an open-addressing set of pointers (the profile interns
 * labels, so there are few), each numbered in order of first sight. */
typedef struct label_set {
    const char **ptr; /* NULL = empty slot */
    uint32_t *id;     /* the label's number, in order of first sight */
    size_t cap, n;
} label_set;

/* The number of label s, added if new; UINT32_MAX when out of memory. */
static uint32_t label_set_id(label_set *ls, const char *s)
{
    if ((ls->n + 1) * 2 > ls->cap) {
        size_t cap = ls->cap ? ls->cap * 2 : 1024;
        const char **ptr = calloc(cap, sizeof *ptr);
        uint32_t *id = malloc(cap * sizeof *id);
        if (!ptr || !id) {
            free(ptr);
            free(id);
            return UINT32_MAX;
        }
        for (size_t i = 0; i < ls->cap; i++) {
            if (!ls->ptr[i])
                continue;
            size_t j = ((uintptr_t)ls->ptr[i] >> 4) * 0x9E3779B97F4A7C15ull >> 20 & (cap - 1);
            while (ptr[j])
                j = (j + 1) & (cap - 1);
            ptr[j] = ls->ptr[i];
            id[j] = ls->id[i];
        }
        free(ls->ptr);
        free(ls->id);
        ls->ptr = ptr;
        ls->id = id;
        ls->cap = cap;
    }
    size_t j = ((uintptr_t)s >> 4) * 0x9E3779B97F4A7C15ull >> 20 & (ls->cap - 1);
    while (ls->ptr[j]) {
        if (ls->ptr[j] == s)
            return ls->id[j];
        j = (j + 1) & (ls->cap - 1);
    }
    ls->ptr[j] = s;
    ls->id[j] = (uint32_t)ls->n;
    return (uint32_t)ls->n++;
}

static int cmp_label_ptr(const void *a, const void *b)
{
    return gp_natural_cmp(*(const char *const *)a, *(const char *const *)b);
}

/* (rank, index) of a tied site, sorted within its run. */
typedef struct rank_index {
    uint32_t rank, index;
} rank_index;

static int cmp_rank_index(const void *a, const void *b)
{
    const rank_index *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Orders each run ix[start[r]..start[r+1]) of sites tied on the numbers (runs of one need
 * nothing) by (label, index), for the runs that begin before position `want` (later ones stay in
 * index order: nobody reads them, and their labels would cost the most): labels are numbered by
 * pointer, the distinct ones ranked by gp_natural_cmp (equal strings share a rank), then each run
 * sorted by (rank, index). -1 when out of memory. */
static int rank_ties(gp_profile *p, size_t *ix, const uint32_t *start, size_t nruns, size_t want)
{
    while (nruns > 0 && start[nruns - 1] >= want)
        nruns--;
    label_set ls = {0};
    int rc = -1;
    const char **by_id = NULL, **sorted = NULL;
    uint32_t *rank = NULL, *label_of = NULL;
    rank_index *tmp = NULL;
    size_t most = 0, tied = 0;
    for (size_t r = 0; r < nruns; r++) {
        size_t len = start[r + 1] - start[r];
        if (len > 1) {
            tied += len;
            most = len > most ? len : most;
        }
    }
    if (tied == 0)
        return 0;
    label_of = malloc(tied * sizeof *label_of);
    tmp = malloc(most * sizeof *tmp);
    if (!label_of || !tmp)
        goto out;
    for (size_t r = 0, k = 0; r < nruns; r++) {
        if (start[r + 1] - start[r] < 2)
            continue;
        for (size_t i = start[r]; i < start[r + 1]; i++) {
            const char *label = gp__site_label_at(p, ix[i]);
            if ((label_of[k++] = label_set_id(&ls, label ? label : "")) == UINT32_MAX)
                goto out;
        }
    }
    sorted = malloc(ls.n * sizeof *sorted);
    by_id = malloc(ls.n * sizeof *by_id);
    rank = malloc(ls.n * sizeof *rank);
    if (!sorted || !by_id || !rank)
        goto out;
    for (size_t i = 0; i < ls.cap; i++)
        if (ls.ptr[i])
            by_id[ls.id[i]] = ls.ptr[i];
    memcpy(sorted, by_id, ls.n * sizeof *sorted);
    qsort(sorted, ls.n, sizeof *sorted, cmp_label_ptr);
    for (size_t i = 0, rk = 0; i < ls.n; i++) {
        if (i > 0 && strcmp(sorted[i - 1], sorted[i]) != 0)
            rk++;
        rank[label_set_id(&ls, sorted[i])] = (uint32_t)rk + 1; /* present: its number */
    }
    for (size_t r = 0, k = 0; r < nruns; r++) {
        size_t lo = start[r], len = start[r + 1] - lo;
        if (len < 2)
            continue;
        for (size_t i = 0; i < len; i++)
            tmp[i] = (rank_index){rank[label_of[k++]], (uint32_t)ix[lo + i]};
        qsort(tmp, len, sizeof *tmp, cmp_rank_index);
        for (size_t i = 0; i < len; i++)
            ix[lo + i] = tmp[i].index;
    }
    rc = 0;
out:
    free(ls.ptr);
    free(ls.id);
    free(sorted);
    free(by_id);
    free(rank);
    free(label_of);
    free(tmp);
    return rc;
}

/* Sorts distinct (measure, total) pairs (the keys' index: the pair's number) by (measure desc,
 * total desc). When both fit in 64 bits together (the usual case), as one integer by
 * gp__sort_keyed; else by sort_site_keys. */
static void sort_pairs(site_key *v, size_t n)
{
    uint64_t max_m = 0, max_t = 0;
    for (size_t i = 0; i < n; i++) {
        max_m = v[i].measure > max_m ? v[i].measure : max_m;
        max_t = v[i].total > max_t ? v[i].total : max_t;
    }
    unsigned tb = 0;
    while (tb < 64 && max_t >> tb)
        tb++;
    unsigned mb = 0;
    while (mb < 64 && max_m >> mb)
        mb++;
    gp_keyed *a = n > 1 && mb + tb <= 64 ? malloc(2 * n * sizeof *a) : NULL;
    if (!a) {
        sort_site_keys(v, n);
        return;
    }
    for (size_t i = 0; i < n; i++) /* descending as ascending: the complement */
        a[i] = (gp_keyed){~((tb < 64 ? v[i].measure << tb : 0) | v[i].total), v[i].index};
    const gp_keyed *sorted = gp__sort_keyed(a, a + n, n);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = ~sorted[i].key;
        v[i] = (site_key){tb < 64 ? k >> tb : 0, tb < 64 ? k & ((1ull << tb) - 1) : k, 0,
                          (uint32_t)sorted[i].index};
    }
    free(a);
}

/* The distinct (measure, total) pairs of the sites: an open-addressing map to their numbers. */
typedef struct pair_map {
    uint64_t *m, *t;
    uint32_t *id; /* UINT32_MAX = empty */
    size_t cap, n;
} pair_map;

static size_t pair_hash(uint64_t m, uint64_t t, size_t cap)
{
    uint64_t h = (m * 0x9E3779B97F4A7C15ull) ^ (t + 0x632BE59BD9B4E019ull + (m << 6));
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

/* The number of the pair (m, t), added if new; UINT32_MAX when out of memory. */
static uint32_t pair_id(pair_map *pm, uint64_t m, uint64_t t)
{
    if ((pm->n + 1) * 2 > pm->cap) {
        size_t cap = pm->cap ? pm->cap * 2 : 1024;
        uint64_t *nm = malloc(cap * sizeof *nm), *nt = malloc(cap * sizeof *nt);
        uint32_t *nid = malloc(cap * sizeof *nid);
        if (!nm || !nt || !nid) {
            free(nm);
            free(nt);
            free(nid);
            return UINT32_MAX;
        }
        memset(nid, 0xFF, cap * sizeof *nid);
        for (size_t i = 0; i < pm->cap; i++) {
            if (pm->id[i] == UINT32_MAX)
                continue;
            size_t j = pair_hash(pm->m[i], pm->t[i], cap);
            while (nid[j] != UINT32_MAX)
                j = (j + 1) & (cap - 1);
            nm[j] = pm->m[i];
            nt[j] = pm->t[i];
            nid[j] = pm->id[i];
        }
        free(pm->m);
        free(pm->t);
        free(pm->id);
        pm->m = nm;
        pm->t = nt;
        pm->id = nid;
        pm->cap = cap;
    }
    size_t j = pair_hash(m, t, pm->cap);
    while (pm->id[j] != UINT32_MAX) {
        if (pm->m[j] == m && pm->t[j] == t)
            return pm->id[j];
        j = (j + 1) & (pm->cap - 1);
    }
    pm->m[j] = m;
    pm->t[j] = t;
    pm->id[j] = (uint32_t)pm->n;
    return (uint32_t)pm->n++;
}

/*
 * The sites in order of (measure desc, total desc, label, index) without comparing sites: each
 * site's (measure, total) pair gets a number, the distinct pairs (usually far fewer than the
 * sites) are sorted, the sites are placed by a counting sort (index order within a pair), and
 * only pairs with several sites that begin among the first `want` places look at labels
 * (rank_ties).
 */
size_t *gp__sorted_sites(gp_profile *p, gp__measure m, size_t want, size_t *n)
{
    size_t ns = p->n_sites;
    *n = 0;
    if (ns == 0)
        return NULL;
    pair_map pm = {0};
    size_t *ix = malloc(ns * sizeof *ix);
    uint32_t *pair_of = malloc(ns * sizeof *pair_of), *start = NULL;
    site_key *pairs = NULL;
    if (!ix || !pair_of)
        goto fail;
    for (size_t i = 0; i < ns; i++) {
        const gp_stats *st = &p->sites[i].stats;
        if ((pair_of[i] = pair_id(&pm, gp__stats_measure(st, m), st->total_bytes)) == UINT32_MAX)
            goto fail;
    }
    pairs = malloc(pm.n * sizeof *pairs);
    start = calloc(pm.n + 1, sizeof *start);
    if (!pairs || !start)
        goto fail;
    for (size_t i = 0; i < pm.cap; i++)
        if (pm.id[i] != UINT32_MAX)
            pairs[pm.id[i]] = (site_key){pm.m[i], pm.t[i], 0, pm.id[i]};
    sort_pairs(pairs, pm.n);
    uint32_t *place = (uint32_t *)pm.id; /* reused: a pair's position in sorted order */
    for (size_t k = 0; k < pm.n; k++)
        place[pairs[k].index] = (uint32_t)k;
    for (size_t i = 0; i < ns; i++)
        start[place[pair_of[i]] + 1]++;
    for (size_t k = 0; k < pm.n; k++)
        start[k + 1] += start[k];
    uint32_t *fill = malloc(pm.n * sizeof *fill); /* each run's next free place */
    if (!fill)
        goto fail;
    memcpy(fill, start, pm.n * sizeof *fill);
    for (size_t i = 0; i < ns; i++)
        ix[fill[place[pair_of[i]]]++] = i;
    free(fill);
    if (rank_ties(p, ix, start, pm.n, want) != 0)
        goto fail;
    free(pm.m);
    free(pm.t);
    free(pm.id);
    free(pair_of);
    free(pairs);
    free(start);
    *n = ns;
    return ix;
fail:
    free(pm.m);
    free(pm.t);
    free(pm.id);
    free(ix);
    free(pair_of);
    free(pairs);
    free(start);
    return NULL;
}

size_t gp__sites_nonzero(const gp_profile *p, const size_t *ix, size_t n, gp__measure m)
{
    size_t lo = 0, hi = n; /* the first place whose site has m == 0 */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (gp__stats_measure(&p->sites[ix[mid]].stats, m) != 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_tag_keys(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const gp_tag_key *ka = &sort_profile->tag_keys[a], *kb = &sort_profile->tag_keys[b];
    int c = cmp_u64_desc(gp__stats_measure(&ka->stats, sort_measure),
                         gp__stats_measure(&kb->stats, sort_measure));
    if (!c)
        c = cmp_u64_desc(ka->stats.total_bytes, kb->stats.total_bytes);
    if (!c)
        c = cmp_str(lp_category_name(ka->category), lp_category_name(kb->category));
    if (!c)
        c = cmp_str(ka->op, kb->op);
    if (!c)
        c = cmp_str(ka->module, kb->module);
    if (!c)
        c = ka->device < kb->device ? -1 : ka->device > kb->device;
    if (!c)
        c = cmp_index(a, b);
    return c;
}

bool gp__sites_lack_stacks(const gp_profile *p, gp__measure m)
{
    bool any = false;
    for (size_t i = 0; i < p->n_sites; i++) {
        if (!gp__stats_measure(&p->sites[i].stats, m))
            continue;
        if (p->sites[i].stack)
            return false;
        any = true;
    }
    return any;
}

size_t *gp__sorted_tag_keys(const gp_profile *p, gp__measure m, size_t *n)
{
    size_t *ix = index_array(p->n_tag_keys);
    *n = ix ? p->n_tag_keys : 0;
    if (ix) {
        sort_profile = p;
        sort_measure = m;
        qsort(ix, p->n_tag_keys, sizeof *ix, cmp_tag_keys);
    }
    return ix;
}

static int cmp_saved(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const gp_saved_tensor *sa = &sort_profile->saved[a], *sb = &sort_profile->saved[b];
    int c = cmp_u64_desc(sa->stats.peak_bytes, sb->stats.peak_bytes);
    if (!c)
        c = cmp_u64_desc(sa->stats.total_bytes, sb->stats.total_bytes);
    if (!c)
        c = cmp_str(sa->module, sb->module);
    if (!c)
        c = cmp_str(sa->op, sb->op);
    if (!c)
        c = cmp_str(sa->shape, sb->shape);
    if (!c)
        c = cmp_str(sa->where, sb->where);
    if (!c)
        c = sa->device < sb->device ? -1 : sa->device > sb->device;
    if (!c)
        c = cmp_index(a, b);
    return c;
}

size_t *gp__sorted_saved(const gp_profile *p, size_t *n)
{
    size_t *ix = index_array(p->n_saved);
    *n = ix ? p->n_saved : 0;
    if (ix) {
        sort_profile = p;
        qsort(ix, p->n_saved, sizeof *ix, cmp_saved);
    }
    return ix;
}

static int cmp_regions(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const gp_region_stats *ra = &sort_profile->regions[a], *rb = &sort_profile->regions[b];
    int c = cmp_u64_desc(ra->max_live_bytes, rb->max_live_bytes);
    if (!c)
        c = cmp_str(ra->name, rb->name);
    if (!c)
        c = cmp_index(a, b);
    return c;
}

size_t *gp__sorted_regions(const gp_profile *p, size_t *n)
{
    size_t *ix = index_array(p->n_regions);
    *n = ix ? p->n_regions : 0;
    if (ix) {
        sort_profile = p;
        qsort(ix, p->n_regions, sizeof *ix, cmp_regions);
    }
    return ix;
}

static int cmp_modules(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const gp_module_stats *ma = &sort_profile->modules[a], *mb = &sort_profile->modules[b];
    int c = cmp_u64_desc(gp__stats_measure(&ma->stats, sort_measure),
                         gp__stats_measure(&mb->stats, sort_measure));
    if (!c)
        c = cmp_u64_desc(ma->stats.total_bytes, mb->stats.total_bytes);
    if (!c)
        c = cmp_str(ma->module, mb->module);
    if (!c)
        c = cmp_index(a, b);
    return c;
}

size_t *gp__sorted_modules(const gp_profile *p, gp__measure m, size_t *n)
{
    size_t *ix = index_array(p->n_modules);
    *n = ix ? p->n_modules : 0;
    if (ix) {
        sort_profile = p;
        sort_measure = m;
        qsort(ix, p->n_modules, sizeof *ix, cmp_modules);
    }
    return ix;
}

static const gp_finding *sort_finding;

static int cmp_items(const void *pa, const void *pb)
{
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    const gp_finding_item *x = &sort_finding->items[a], *y = &sort_finding->items[b];
    int c = cmp_u64_desc(x->bytes, y->bytes);
    if (!c)
        c = cmp_u64_desc(x->count, y->count);
    if (!c)
        c = cmp_str(lp_category_name(x->category), lp_category_name(y->category));
    if (!c)
        c = cmp_str(x->op, y->op);
    if (!c)
        c = cmp_str(x->module, y->module);
    if (!c)
        c = x->stack < y->stack ? -1 : x->stack > y->stack;
    if (!c)
        c = cmp_index(a, b);
    return c;
}

size_t *gp__sorted_finding_items(const gp_finding *f)
{
    size_t *ix = index_array(f->n_items);
    if (ix) {
        sort_finding = f;
        qsort(ix, f->n_items, sizeof *ix, cmp_items);
    }
    return ix;
}

gp__export_row *gp__export_rows(const gp_profile *p, size_t *n)
{
    bool by_site = false;
    for (size_t i = 0; i < p->n_sites && !by_site; i++)
        by_site = p->sites[i].stack != 0;
    *n = by_site ? p->n_sites : p->n_tag_keys;
    gp__export_row *rows = malloc((*n ? *n : 1) * sizeof *rows);
    if (!rows) {
        *n = 0;
        return NULL;
    }
    for (size_t i = 0; i < *n; i++) {
        if (by_site) {
            const gp_site *s = &p->sites[i];
            rows[i] = (gp__export_row){
                &s->stats, gp_site_device(p, s), gp_site_category(p, s), s->stack, NULL, NULL};
        } else {
            const gp_tag_key *k = &p->tag_keys[i];
            rows[i] = (gp__export_row){&k->stats, k->device, k->category, 0, k->module, k->op};
        }
    }
    return rows;
}

size_t gp__tag_frames(const char *module, const char *op, const char *frames[2])
{
    size_t n = 0;
    if (module && *module)
        frames[n++] = module;
    if (op && *op)
        frames[n++] = op;
    return n;
}

bool gp__finding_has_stacks(const gp_finding *f)
{
    for (size_t i = 0; i < f->n_items; i++)
        if (f->items[i].stack)
            return true;
    return false;
}

const char *gp__finding_text(const gp_finding *f)
{
    switch (f->kind) {
    case GP_FIND_GRAPH_WITHOUT_GRAD:
        return "graph memory (saved, autograd, gradient) was allocated where grad should be off";
    case GP_FIND_FORGOT_NO_GRAD:
        if (!*f->region) /* the whole run (detectors.c) */
            return "grad was on in a run that never ran backward: these ops built autograd "
                   "graphs that nothing used (forgot no_grad? a PyTorch model not in eval mode?)";
        return "grad was on inside an inference region: these ops built an autograd graph "
               "(forgot no_grad?)";
    case GP_FIND_GROWTH:
        return "graph memory grew across iterations: something keeps each iteration's graph "
               "alive (e.g. total += loss chains every graph)";
    case GP_FIND_PARAM_GRAD_IN_INFERENCE:
        return "parameter gradients were allocated during inference";
    case GP_FIND_GRAPH_ESCAPES:
        return "graphs built in an inference region were kept beyond the next iteration: its "
               "outputs left it attached to their graph, and something keeps them";
    case GP_FIND_AUTOGRAD_ERROR:
        return "autograd raised an error about a tensor it saved for backward";
    default:
        return "unknown finding";
    }
}

bool gp__failed_alloc_text(const gp_profile *p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!p->failed_allocs)
        return false;
    const gp_failed_alloc *f = &p->first_failed;
    char asked[32], at[32], live[32], graph[32];
    snprintf(buf, size, "%s asked at %s%s%s, with %s live, %s of it graph memory",
             gp_format_bytes(f->size, asked, sizeof asked),
             gp__format_ns(f->time_ns, at, sizeof at), *f->region ? " in " : "", f->region,
             gp_format_bytes(f->live_bytes, live, sizeof live),
             gp_format_bytes(f->graph_bytes, graph, sizeof graph));
    return true;
}

/* "thread 2 (tid 4250, name)" of a dense thread index; the name when the trace has one. */
static void thread_phrase(const gp_profile *p, uint32_t thread, char *buf, size_t size)
{
    const char *name = gp_trace_thread_name(p->trace, thread);
    snprintf(buf, size, "thread %" PRIu32 " (tid %" PRIu64 "%s%s)", thread,
             gp_trace_thread_os_tid(p->trace, thread), name && *name ? ", " : "", name ? name : "");
}

/* Distinct modules among a finding's saved items. */
static size_t saved_modules(const gp_finding *f)
{
    size_t n = 0;
    for (size_t i = 0; i < f->n_items; i++) {
        const gp_finding_item *it = &f->items[i];
        bool seen = it->category != LP_CAT_SAVED || !*it->module;
        for (size_t j = 0; j < i && !seen; j++)
            seen = f->items[j].category == LP_CAT_SAVED && !strcmp(f->items[j].module, it->module);
        n += !seen;
    }
    return n;
}

static uint64_t saved_bytes(const gp_finding *f)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < f->n_items; i++)
        sum += f->items[i].category == LP_CAT_SAVED ? f->items[i].bytes : 0;
    return sum;
}

bool gp__finding_has_peak(gp_finding_kind kind)
{
    return kind == GP_FIND_GRAPH_ESCAPES || kind == GP_FIND_FORGOT_NO_GRAD;
}

/* The most of a finding's saved memory alive at once (gp_finding.peak_bytes) where that is less
 * than all it saved over the run, else 0. An escape's bytes are all saved memory, the itemised
 * and, past its first escapes, the counted; forgot_no_grad's items hold every byte. */
static uint64_t saved_at_once(const gp_finding *f)
{
    uint64_t total = f->kind == GP_FIND_GRAPH_ESCAPES ? f->bytes : saved_bytes(f);
    return f->peak_bytes < total ? f->peak_bytes : 0;
}

const char *gp__finding_at_once(const gp_finding *f, char *buf, size_t size)
{
    char b[32];
    uint64_t once = saved_at_once(f);
    buf[0] = '\0';
    if (once)
        snprintf(buf, size, ", at most %s saved for backward alive at once",
                 gp_format_bytes(once, b, sizeof b));
    return buf;
}

bool gp__finding_thread_note(const gp_profile *p, const gp_finding *f, char *buf, size_t size)
{
    buf[0] = '\0';
    if (f->kind != GP_FIND_FORGOT_NO_GRAD || !f->grad_off_thread)
        return false;
    char off[160], built[160];
    thread_phrase(p, f->grad_off_thread, off, sizeof off);
    thread_phrase(p, f->built_thread, built, sizeof built);
    snprintf(buf, size,
             "grad mode is per thread: %s had grad off (no_grad, inference_mode or "
             "set_grad_enabled(False)) while %s built these graphs with grad on; a thread does "
             "not inherit the grad mode of the thread that started it (threading, "
             "ThreadPoolExecutor): turn grad off in the thread's own function",
             off, built);
    return true;
}

const gp_finding *gp__finding_of(const gp_profile *p, gp_finding_kind kind)
{
    for (size_t i = 0; i < p->n_findings; i++)
        if (p->findings[i].kind == kind)
            return &p->findings[i];
    return NULL;
}

/* Whether the host peak fell inside a recorded instance of region `name` (the spans are capped:
 * past the cap, none is found). */
static bool peak_in_region(const gp_profile *p, const char *name)
{
    for (size_t i = 0; i < p->n_spans; i++) {
        const gp_region_span *s = &p->spans[i];
        if (s->begin_ns <= p->peak_time_ns && p->peak_time_ns <= s->end_ns &&
            !strcmp(s->name, name))
            return true;
    }
    return false;
}

/* " by total_loss, a list at eval.py:36" for the first holder (the one keeping the most graph
 * nodes); " through state, a tuple, which each call of the model takes back with its graph, at
 * lm.py:19 (detach() it)" for one carried into the model's calls; "" if none. */
static void holder_phrase(const gp_profile *p, char *buf, size_t size)
{
    buf[0] = '\0';
    if (p->n_holders == 0)
        return;
    const gp_holder *h = &p->holders[0];
    bool carried = !strcmp(h->kind, GP_HOLDER_CARRIED);
    snprintf(buf, size, " %s %s%s%s%s%s%s%s", carried ? "through" : "by", h->name,
             *h->container ? ", a " : "", h->container,
             carried ? ", which each call of the model takes back with its graph," : "",
             *h->where ? " at " : "", h->where, carried ? " (detach() it)" : "");
}

/* gp__verdict from the findings alone; NULL when there is none. */
static const char *finding_verdict(const gp_profile *p, char *buf, size_t size)
{
    char b1[32], b2[32], by[300];
    const gp_finding *f;
    holder_phrase(p, by, sizeof by);
    if ((f = gp__finding_of(p, GP_FIND_AUTOGRAD_ERROR))) {
        const char *kind = f->error_kind ? f->error_kind : "";
        const char *what =
            !strcmp(kind, "inplace")            ? "a tensor saved for backward was changed in place"
            : !strcmp(kind, "inference_tensor") ? "an inference_mode tensor was saved for backward"
            : f->message                        ? f->message
                                                : "";
        const gp_finding_item *it = f->n_items ? &f->items[0] : NULL;
        size_t n = (size_t)snprintf(buf, size, "autograd error: %s", what);
        if (it && *it->op && n < size)
            n += (size_t)snprintf(buf + n, size - n, " (%s%s%s)", it->op,
                                  *it->module ? ", saved by " : "", it->module);
        if (f->where && *f->where && n < size)
            snprintf(buf + n, size - n, " at %s", f->where);
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_FORGOT_NO_GRAD)) && f->grad_off_thread) {
        snprintf(buf, size,
                 "grad mode does not reach other threads: graphs built with grad on (%s) on thread "
                 "%" PRIu32 " while thread %" PRIu32 " had grad off%s%s",
                 gp_format_bytes(f->bytes, b1, sizeof b1), f->built_thread, f->grad_off_thread,
                 *by ? ", kept" : "", by);
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_GROWTH))) {
        uint64_t per = f->count ? f->bytes / f->count : f->bytes;
        snprintf(buf, size,
                 "graph kept across iterations%s: +%s per iteration (+%s from iteration %" PRIu32
                 " to %" PRIu32 ")",
                 *by ? by : "", gp_format_bytes(per, b1, sizeof b1),
                 gp_format_bytes(f->bytes, b2, sizeof b2), f->grew_from, f->grew_to);
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_GRAPH_ESCAPES))) {
        if (saved_at_once(f))
            snprintf(buf, size,
                     "graphs kept beyond the next iteration%s: up to %s of graph memory at once "
                     "(%s in all)",
                     *by ? by : "", gp_format_bytes(f->peak_bytes, b1, sizeof b1),
                     gp_format_bytes(f->bytes, b2, sizeof b2));
        else
            snprintf(buf, size, "graphs kept beyond the next iteration%s: %s of graph memory",
                     *by ? by : "", gp_format_bytes(f->bytes, b1, sizeof b1));
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_FORGOT_NO_GRAD))) {
        size_t mods = saved_modules(f);
        const gp_device_stats *d = gp__primary_device(p);
        uint64_t at_peak = d ? d->by_category_at_peak[LP_CAT_SAVED] : 0, saved = saved_bytes(f);
        /* "" is the whole run, which ran no backward pass (detectors.c) */
        bool whole_run = !*f->region;
        char inside[96] = "";
        if (!whole_run)
            snprintf(inside, sizeof inside, " inside '%.80s'", f->region);
        const char *tail = whole_run ? "; the run never ran backward" : "";
        if (saved && whole_run && at_peak) /* no inference instances: no count of graphs */
            snprintf(buf, size,
                     "forgot no_grad: %s saved for backward at the peak by %zu module%s%s",
                     gp_format_bytes(at_peak, b1, sizeof b1), mods, mods == 1 ? "" : "s", tail);
        else if (saved && !whole_run && peak_in_region(p, f->region))
            snprintf(buf, size,
                     "forgot no_grad: %s saved for backward at the peak by %zu module%s, %" PRIu64
                     " graph%s alive then",
                     gp_format_bytes(at_peak, b1, sizeof b1), mods, mods == 1 ? "" : "s",
                     p->graphs_at_peak, p->graphs_at_peak == 1 ? "" : "s");
        else if (saved_at_once(f)) /* not all alive together */
            snprintf(buf, size,
                     "forgot no_grad: %s saved for backward%s by %zu module%s, at most %s alive at "
                     "once%s",
                     gp_format_bytes(saved, b1, sizeof b1), inside, mods, mods == 1 ? "" : "s",
                     gp_format_bytes(f->peak_bytes, b2, sizeof b2), tail);
        else if (saved) /* the peak is outside the region, or its saved memory is training's */
            snprintf(buf, size, "forgot no_grad: %s saved for backward%s by %zu module%s%s",
                     gp_format_bytes(saved, b1, sizeof b1), inside, mods, mods == 1 ? "" : "s",
                     tail);
        else
            snprintf(buf, size, "forgot no_grad: %s of graph memory built%s%s",
                     gp_format_bytes(f->bytes, b1, sizeof b1), inside, tail);
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_PARAM_GRAD_IN_INFERENCE))) {
        snprintf(buf, size, "gradients allocated during inference: %s",
                 gp_format_bytes(f->bytes, b1, sizeof b1));
        return buf;
    }
    if ((f = gp__finding_of(p, GP_FIND_GRAPH_WITHOUT_GRAD))) {
        snprintf(buf, size, "graph memory where grad is off: %s in '%s'",
                 gp_format_bytes(f->bytes, b1, sizeof b1), f->region);
        return buf;
    }
    return NULL;
}

const char *gp__verdict(const gp_profile *p, char *buf, size_t size)
{
    char oom[320], at[32];
    bool failed = gp__failed_alloc_text(p, oom, sizeof oom);
    if (finding_verdict(p, buf, size)) {
        size_t n = strlen(buf);
        if (failed && n < size)
            snprintf(buf + n, size - n, "; out of memory at %s",
                     gp__format_ns(p->first_failed.time_ns, at, sizeof at));
        return buf;
    }
    if (!failed)
        return NULL;
    snprintf(buf, size, "out of memory: %s", oom);
    return buf;
}

const gp_device_stats *gp__primary_device(const gp_profile *p)
{
    for (size_t i = 0; i < p->n_devices; i++)
        if (p->devices[i].device == p->primary_device)
            return &p->devices[i];
    return p->n_devices ? &p->devices[0] : NULL;
}
