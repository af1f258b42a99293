/*
 * Helpers shared by the renderers (text, JSON, HTML, folded, Chrome, diff): number and time
 * formatting, text and HTML escaping (JSON has its writer, json.h), the timeline's buckets,
 * deterministic orderings of the profile's tables, and an aligned text table. Internal to tools/
 * (gp__ prefix); the public renderer API is render.h.
 *
 * Orderings: every sort here breaks ties by name (label, category, op, module, ...) and last by
 * index, so output is byte-for-byte stable across runs and machines (golden files rely on it).
 */
#ifndef GRADPROF_TOOLS_RENDER_COMMON_H
#define GRADPROF_TOOLS_RENDER_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis.h"
#include "render.h"

/* "1,290,000": decimal with thousands separators. Returns buf. */
const char *gp__format_count(uint64_t n, char *buf, size_t size);

/* A human size with the exact count when they differ: "512 B", "1.50 KiB (1,536 B)". Returns
 * buf (64 bytes are always enough). */
const char *gp__format_bytes_exact(uint64_t bytes, char *buf, size_t size);

/* Signed human size: "+1.50 KiB", "-512 B", "0 B". Returns buf. */
const char *gp__format_delta(int64_t bytes, char *buf, size_t size);

/* A duration in ns with three significant digits: "850 ns", "60.0 us", "4.53 ms", "1.20 s".
 * Returns buf. */
const char *gp__format_ns(uint64_t ns, char *buf, size_t size);

/* "12.3%" of part in whole ("-" when whole is 0). Returns buf. */
const char *gp__format_percent(uint64_t part, uint64_t whole, char *buf, size_t size);

/* "host" for LP_DEVICE_HOST, "cuda:N" otherwise. Returns buf. */
const char *gp__device_name(int32_t device, char *buf, size_t size);

/* The length (1..4) of the valid UTF-8 sequence at s, with its code point in *cp; 0 when the
 * bytes there are not one (overlong forms, surrogates, code points above U+10FFFF). */
size_t gp__utf8_decode(const unsigned char *s, unsigned *cp);

/* Replaces control characters (below 0x20, and 0x7f) in s with '?', keeping '\n' when
 * keep_newlines: strings from a trace must not move the cursor or send escape sequences to a
 * terminal. Returns s. */
char *gp__sanitize_text(char *s, bool keep_newlines);

/* Writes s HTML-escaped (& < > " '). NULL writes nothing. */
void gp__html_escape(FILE *out, const char *s);

/*
 * The timeline's buckets, derived from the profile alone (analysis.h publishes the points and
 * timeline_bucket_ns, the bucket width when the replay ended): gp_timeline_point i is what was
 * live at the end of a bucket of events that ended at its time_ns; buckets without events have
 * no point. gp__timeline_start is that bucket's start: time_ns - timeline_bucket_ns, not before
 * point i-1's time_ns (nor 0). It is exact, except for a point the engine made by merging two
 * buckets that a quiet stretch kept apart: its start then falls inside that stretch. i must be
 * below p->n_timeline. The HTML chart and the Chrome trace's counters draw each point from there.
 */
uint64_t gp__timeline_start(const gp_profile *p, size_t i);
/* Sets used[c] for each category that was live at some point of the timeline (others are left
 * as they are, so two profiles can be merged into one set). */
void gp__timeline_used_categories(const gp_profile *p, bool used[LP_CAT_COUNT]);

/* Measures for the ranked tables; gp__measure_parse accepts "peak", "total", "count", "leaked"
 * (and NULL = peak). Returns 0, or -1 for an unknown name. */
typedef enum gp__measure {
    GP__MEASURE_PEAK,
    GP__MEASURE_TOTAL,
    GP__MEASURE_COUNT,
    GP__MEASURE_LEAKED,
    GP__MEASURE_TEMPORARIES /* not parsed: for the temporaries table */
} gp__measure;
int gp__measure_parse(const char *name, gp__measure *out);
const char *gp__measure_name(gp__measure m);
/* The value of a measure in a key's stats (peak_bytes, total_bytes, count, live_bytes,
 * temporaries). */
uint64_t gp__stats_measure(const gp_stats *s, gp__measure m);

/* Index arrays (caller frees; NULL when out of memory or the table is empty, *n = its length),
 * ordered by the measure, largest first; ties by name, then index.
 * Sites tie on their label (gp_site_label), tag keys on (category, op, module, device), saved
 * tensors on bytes_at_peak then (module, op, shape), regions on max live then name, modules on
 * the measure then path. gp__sorted_sites orders only the first `want` places by label (SIZE_MAX:
 * all); the rest keep their numbers' order, ties by index. */
size_t *gp__sorted_sites(gp_profile *p, gp__measure m, size_t want, size_t *n);
/* How many of the n sites in an order of gp__sorted_sites by m have m != 0 (they come first): a
 * binary search, not a pass over every site. */
size_t gp__sites_nonzero(const gp_profile *p, const size_t *ix, size_t n, gp__measure m);
size_t *gp__sorted_tag_keys(const gp_profile *p, gp__measure m, size_t *n);
/* True when some site has m != 0 and none of those has a call stack (a trace without stacks, as
 * Python is recorded by default): a site table by m would be one GP_NO_STACK row, so the
 * reports say why instead, and list leaks by tag key. */
bool gp__sites_lack_stacks(const gp_profile *p, gp__measure m);
/* The line the reports print for a site table of such a trace. */
#define GP__NO_STACKS_NOTE                                                                         \
    "no call stacks were recorded (gradprof run --stack-depth N records them)"
size_t *gp__sorted_saved(const gp_profile *p, size_t *n);
size_t *gp__sorted_regions(const gp_profile *p, size_t *n);
size_t *gp__sorted_modules(const gp_profile *p, gp__measure m, size_t *n);
/* The rows of the stack exports (folded, speedscope): a profile's call sites; or, when none of
 * its sites has a call stack (Python is recorded without by default), its tag keys, whose frames
 * are then their module and op under their category ("saved;ResNet.layer1.0.relu;aten::relu"),
 * where a site would only say "[no stack]". */
typedef struct gp__export_row {
    const gp_stats *stats;
    int32_t device;
    lp_category category;
    uint32_t stack;          /* a site's, 0 for a tag key */
    const char *module, *op; /* a tag key's ("" if none), NULL for a site */
} gp__export_row;
/* The rows of p into a new array of *n (the caller frees it); NULL when out of memory. */
gp__export_row *gp__export_rows(const gp_profile *p, size_t *n);
/* The frames that stand for a tag in the stack exports (folded, speedscope, pprof) where there
 * is no call stack, under its category, outermost first: its module, then its op, each when not
 * empty. Returns how many (0 to 2). */
size_t gp__tag_frames(const char *module, const char *op, const char *frames[2]);

/* A finding's items by bytes, then count (largest first), then category, op, module, stack. */
size_t *gp__sorted_finding_items(const gp_finding *f);
/* Whether some item of f has a call stack: its tables have a site column only then (Python is
 * recorded without stacks by default; a column of '-' says nothing). */
bool gp__finding_has_stacks(const gp_finding *f);

/* What a finding means, in one line: its message, or when the engine left that empty, a
 * description of its kind ("grad was on inside an inference region: ops built an autograd
 * graph"). Never NULL. */
const char *gp__finding_text(const gp_finding *f);

/* The first finding of `kind`, or NULL. */
const gp_finding *gp__finding_of(const gp_profile *p, gp_finding_kind kind);

/*
 * One line that says what is wrong in PyTorch terms, from the most telling finding (an autograd
 * error, then a graph built on a thread while another had grad off, growth, escapes,
 * forgot_no_grad, gradients in inference, graph memory where grad is off), naming who keeps the
 * graphs (p->holders) when the PyTorch helper found it:
 *   "forgot no_grad: 102 MiB saved for backward at the peak by 53 modules, 1 graph alive then"
 *   "graph kept across iterations by total_loss at eval.py:36: +8.2 MiB per iteration
 *    (+16.4 MiB from iteration 2 to 4)"
 * When allocations failed it adds "; out of memory at 33.3 s", or without a finding says
 * "out of memory: " and gp__failed_alloc_text. Written into buf; NULL (nothing written) when
 * there is neither.
 */
const char *gp__verdict(const gp_profile *p, char *buf, size_t size);

/* The first allocation that failed out of memory, into buf: "64.00 MiB asked at 3.21 s in
 * ResNet.layer4, with 7.94 GiB live, 6.10 GiB of it graph memory"; false, buf empty, when none
 * failed. */
bool gp__failed_alloc_text(const gp_profile *p, char *buf, size_t size);

/* A forgot_no_grad finding's note that grad mode is per thread (gp_finding.grad_off_thread),
 * written to buf: "grad mode is per thread: thread 1 (tid 4242) had grad off (...) while thread
 * 2 (tid 4250) built these graphs ..."; false, buf empty, when the finding has none. */
bool gp__finding_thread_note(const gp_profile *p, const gp_finding *f, char *buf, size_t size);

/* Whether a finding of this kind says the most of its saved memory alive at once
 * (gp_finding.peak_bytes: graph_escapes_inference, forgot_no_grad). */
bool gp__finding_has_peak(gp_finding_kind kind);

/* ", at most 256.00 KiB saved for backward alive at once" for a finding whose saved bytes, each
 * buffer counted once over the run, were not all alive together; "" otherwise. Returns buf. */
const char *gp__finding_at_once(const gp_finding *f, char *buf, size_t size);

/* The device stats of the profile's primary device, or NULL when the profile has none. */
const gp_device_stats *gp__primary_device(const gp_profile *p);

/*
 * An aligned text table (render_table.c): columns with a header and an alignment ('l' or 'r'); cells added left to
 * right with printf formats, a row ends after the last column. The last column is not padded.
 * Cells are sanitized (gp__sanitize_text). Allocation failures are remembered and make
 * gp__table_print return -1.
 */
typedef struct gp__table gp__table;

/* `align` has one character per column ("lrrl"); headers are copied. NULL when out of memory. */
gp__table *gp__table_new(size_t ncols, const char *const *headers, const char *align);
void gp__table_free(gp__table *t); /* NULL is a no-op */
void gp__table_cell(gp__table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line printed between rows as is (not aligned), e.g. "(12 more)". */
void gp__table_note(gp__table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t gp__table_rows(const gp__table *t);
/* Prints the header line and the rows, each line prefixed by `indent`. Returns 0 or -1. */
int gp__table_print(FILE *out, const gp__table *t, const char *indent);

#endif /* GRADPROF_TOOLS_RENDER_COMMON_H */
