/*
 * Writers of a check result (check.h) as text, JSON (schema "gradprof-check/2", documented in the
 * README) and JUnit XML. They only describe what the engine decided: one sentence per violation
 * (check_message, which takes a detector's meaning from gp__finding_text, the report's own), the
 * rows behind it in the engine's order, and the top frames of the first rows' call sites.
 */
#include "error.h"
#include "json.h"
#include "render.h"
#include "render_common.h"

#include <inttypes.h>
#include <string.h>

#define TEXT_ITEMS 10 /* rows per violation (per group for the baseline) in text and JUnit */
#define MAX_FRAMES 8  /* frames per stack */
#define FRAME_ITEMS 2 /* rows whose stack is printed in text */

/* ---- the words ------------------------------------------------------------------------------- */

static const char *bytes_text(uint64_t bytes, char *buf, size_t size)
{
    char h[32];
    if (bytes < 1024)
        snprintf(buf, size, "%s", gp_format_bytes(bytes, h, sizeof h));
    else
        snprintf(buf, size, "%s (%" PRIu64 " bytes)", gp_format_bytes(bytes, h, sizeof h), bytes);
    return buf;
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

/* "relu @ mlp.1, relu @ mlp.3 and 5 more ops": the first saved rows of a baseline violation. */
static void saved_ops_text(const gp_check_violation *v, char *buf, size_t size)
{
    size_t used = 0, shown = v->n_saved_items < 3 ? v->n_saved_items : 3;
    buf[0] = '\0';
    for (size_t i = 0; i < shown && used < size; i++) {
        const gp_finding_item *it = &v->items[i];
        int n = snprintf(buf + used, size - used, "%s%s%s%s", i ? ", " : "", or_dash(it->op),
                         *it->module ? " @ " : "", it->module);
        used = n < 0 ? size : used + (size_t)n;
    }
    if (v->n_saved_ops > shown && used < size)
        snprintf(buf + used, size - used, " and %zu more", v->n_saved_ops - shown);
}

/* The one sentence that says what a violation is. */
static void check_message(const gp_profile *p, const gp_check_violation *v, char *buf, size_t size)
{
    char b[64], l[64], t[32], s[64], g[64], ops[256];
    const char *cat = v->category < LP_CAT_COUNT ? lp_category_name(v->category) : "";
    bytes_text(v->bytes, b, sizeof b);
    bytes_text(v->limit, l, sizeof l);
    switch (v->kind) {
    case GP_CHECK_FORBID:
        if (*v->region)
            snprintf(buf, size,
                     "%s of %s memory entered region '%s' (allocated or tagged %s while it was "
                     "open); %s is forbidden there",
                     b, cat, v->region, cat, cat);
        else
            snprintf(buf, size, "%s of %s memory allocated in %" PRIu64 " buffers; %s is forbidden",
                     b, cat, v->count, cat);
        return;
    case GP_CHECK_MAX_PEAK:
        if (*v->region)
            snprintf(buf, size, "%s live while inside region '%s' exceeds --max-peak %s", b,
                     v->region, l);
        else
            snprintf(buf, size, "peak %s at %s exceeds --max-peak %s", b,
                     gp__format_ns(v->time_ns, t, sizeof t), l);
        return;
    case GP_CHECK_MAX_GROWTH:
        snprintf(buf, size,
                 "live memory grew by %s from mark '%s' to mark '%s' (%zu marks), over "
                 "--max-growth %s",
                 b, v->first_mark->mark, v->last_mark->mark, v->n_marks, l);
        return;
    case GP_CHECK_NO_LEAKS:
        snprintf(buf, size, "%s in %" PRIu64 " buffers still live at the end of the trace", b,
                 v->count);
        return;
    case GP_CHECK_DETECTOR: {
        char note[512], once[80];
        gp__finding_thread_note(p, v->finding, note, sizeof note);
        snprintf(buf, size, "%s; %s%s%s%s%s, %" PRIu64 " events%s%s", gp__finding_text(v->finding),
                 *v->region ? "in region '" : "", v->region, *v->region ? "': " : "", b,
                 gp__finding_at_once(v->finding, once, sizeof once), v->count, *note ? "; " : "",
                 note);
        return;
    }
    case GP_CHECK_BASELINE:
        saved_ops_text(v, ops, sizeof ops);
        snprintf(buf, size,
                 "holds %s of graph memory that the grad-off baseline '%s' does not: %s saved for "
                 "backward (inferred) by %zu ops%s%s%s, and %s of graph nodes and gradients "
                 "(slack %s)",
                 b, v->baseline_path, bytes_text(v->saved_bytes, s, sizeof s), v->n_saved_ops,
                 *ops ? " (" : "", ops, *ops ? ")" : "",
                 bytes_text(v->held_graph_bytes, g, sizeof g), l);
        return;
    }
    snprintf(buf, size, "%s", v->rule);
}

static const char *verdict_name(gp_check_verdict v)
{
    return v == GP_CHECK_PASSED ? "pass" : v == GP_CHECK_FAILED ? "fail" : "unjudged";
}

static const char *doubt_reason(const gp_check_doubt *d)
{
    return d->code == GP_EINCOMPLETE ? "incomplete" : "unclassified";
}

/* The rows of items [from, to) of v (at most TEXT_ITEMS), then "(N more)" for `more` rows. */
static void table_rows(gp__table *t, const gp_check_violation *v, size_t from, size_t to,
                       size_t more)
{
    char h[32], cnt[32];
    for (size_t j = from; j < to && j < from + TEXT_ITEMS; j++) {
        const gp_finding_item *it = &v->items[j];
        gp__table_cell(t, "%s", gp_format_bytes(it->bytes, h, sizeof h));
        gp__table_cell(t, "(%" PRIu64 ")", it->bytes);
        gp__table_cell(t, "%s", it->count ? gp__format_count(it->count, cnt, sizeof cnt) : "-");
        gp__table_cell(t, "%s", lp_category_name(it->category));
        gp__table_cell(t, "%s", or_dash(it->op));
        gp__table_cell(t, "%s", or_dash(it->module));
    }
    if (to - from > TEXT_ITEMS || more)
        gp__table_note(t, "(%zu more)",
                       to - from > TEXT_ITEMS ? to - from - TEXT_ITEMS + more : more);
}

/* ---- text ------------------------------------------------------------------------------------ */

void gp_render_check_doubts(FILE *out, const char *prefix, const gp_check_result *r)
{
    for (size_t i = 0; i < r->n_doubts; i++) {
        const gp_check_doubt *d = &r->doubts[i];
        if (d->accepted)
            fprintf(out, "%s: warning: %s (accepted: %s)\n", prefix, d->message, d->option);
        else
            fprintf(out, "%s: cannot judge: %s; %s checks it anyway\n", prefix, d->message,
                    d->option);
    }
}

static void text_headline(FILE *out, const gp_check_result *r)
{
    size_t nv = r->n_violations;
    if (r->verdict == GP_CHECK_PASSED)
        fprintf(out, "PASS %s: %zu rules passed", r->path, r->n_rules - r->rules_skipped);
    else if (r->verdict == GP_CHECK_FAILED)
        fprintf(out, "FAIL %s: %zu violation%s; %zu of %zu rules failed", r->path, nv,
                nv == 1 ? "" : "s", r->rules_failed, r->n_rules);
    else
        fprintf(out,
                "UNJUDGED %s: the trace cannot be judged; in what it holds %zu violation%s, "
                "%zu of %zu rules failed",
                r->path, nv, nv == 1 ? "" : "s", r->rules_failed, r->n_rules);
    if (r->rules_skipped)
        fprintf(out, ", %zu skipped", r->rules_skipped);
    fputc('\n', out);
    for (size_t i = 0; i < r->n_doubts; i++) {
        const gp_check_doubt *d = &r->doubts[i];
        if (d->accepted)
            fprintf(out, "accepted (%s): %s\n", d->option, d->message);
        else
            fprintf(out, "cannot judge: %s (%s accepts it)\n", d->message, d->option);
    }
    fprintf(out, "rules:");
    for (size_t i = 0; i < r->n_rules; i++)
        fprintf(out, "%s %s%s", i ? "," : "", r->rules[i].name,
                r->rules[i].skipped[0] ? " (skipped)"
                : r->rules[i].n        ? " (FAILED)"
                                       : "");
    fprintf(out, "%s\n", r->n_rules ? "" : " none");
    for (size_t i = 0; i < r->n_rules; i++)
        if (r->rules[i].skipped[0])
            fprintf(out, "skipped %s: %s\n", r->rules[i].name, r->rules[i].skipped);
    if (r->hint[0])
        fprintf(out, "hint: %s\n", r->hint);
}

/* The stacks of the first rows with one, each printed in full once per output (`printed`). */
static void text_stacks(FILE *out, gp_profile *p, const gp_check_violation *v, uint32_t *printed,
                        size_t *n_printed, size_t max_printed)
{
    for (size_t j = 0, shown = 0; j < v->n_items && shown < FRAME_ITEMS; j++) {
        const gp_finding_item *it = &v->items[j];
        if (!it->stack)
            continue;
        shown++;
        if (*it->op || *it->module)
            fprintf(out, "  %s %s in %s, allocated at", lp_category_name(it->category),
                    or_dash(it->op), or_dash(it->module));
        else
            fprintf(out, "  %s (untagged), allocated at", lp_category_name(it->category));
        size_t k = 0;
        while (k < *n_printed && printed[k] != it->stack)
            k++;
        if (k < *n_printed) {
            fprintf(out, " %s (stack above)\n", gp_site_label(p, it->stack));
            continue;
        }
        if (*n_printed < max_printed)
            printed[(*n_printed)++] = it->stack;
        fputs(":\n", out);
        const char *frames[MAX_FRAMES];
        size_t n = gp_site_frames(p, it->stack, frames, MAX_FRAMES);
        if (n == 0)
            fputs("      [no stack]\n", out);
        for (size_t f = 0; f < n; f++)
            fprintf(out, "      %s\n", frames[f]);
    }
}

int gp_render_check_text(FILE *out, gp_profile *p, const gp_check_result *r)
{
    static const char *const headers[] = {"bytes", "", "count", "category", "op", "module"};
    uint32_t printed[64];
    size_t n_printed = 0;
    char msg[1024];
    text_headline(out, r);
    if (r->verdict != GP_CHECK_PASSED && gp__verdict(p, msg, sizeof msg))
        fprintf(out, "verdict: %s\n", msg);
    for (size_t i = 0; i < r->n_violations; i++) {
        const gp_check_violation *v = &r->violations[i];
        check_message(p, v, msg, sizeof msg);
        fprintf(out, "\n[%s] %s\n", v->rule, msg);
        if (!v->n_items && !v->more_items)
            continue;
        gp__table *t = gp__table_new(6, headers, "rrrlll");
        if (!t)
            return -1;
        if (v->kind == GP_CHECK_BASELINE) {
            size_t total = v->n_items + v->more_items, saved = v->n_saved_items;
            table_rows(t, v, 0, saved, v->n_saved_ops - saved);
            gp__table_note(t, "held graph nodes and gradients:");
            table_rows(t, v, saved, v->n_items, total - v->n_saved_ops - (v->n_items - saved));
        } else {
            table_rows(t, v, 0, v->n_items, v->more_items);
        }
        int rc = gp__table_print(out, t, "    ");
        gp__table_free(t);
        if (rc)
            return -1;
        text_stacks(out, p, v, printed, &n_printed, sizeof printed / sizeof printed[0]);
    }
    return ferror(out) ? -1 : 0;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static void json_frames(gp__jw *j, gp_profile *p, uint32_t stack)
{
    const char *frames[MAX_FRAMES];
    size_t n = stack ? gp_site_frames(p, stack, frames, MAX_FRAMES) : 0;
    gp__jw_array(j, "frames", true);
    for (size_t i = 0; i < n; i++)
        gp__jw_str(j, NULL, frames[i]);
    gp__jw_end(j);
}

static void json_violation(gp__jw *j, gp_profile *p, const gp_check_violation *v)
{
    char msg[1024];
    const gp_finding_item *top = v->n_items ? &v->items[0] : NULL;
    check_message(p, v, msg, sizeof msg);
    gp__jw_object(j, NULL, false);
    gp__jw_str(j, "rule", v->rule);
    gp__jw_str(j, "region", v->region);
    gp__jw_str(j, "category", v->category < LP_CAT_COUNT ? lp_category_name(v->category) : NULL);
    gp__jw_u64(j, "bytes", v->bytes);
    if (v->finding && gp__finding_has_peak(v->finding->kind))
        gp__jw_u64(j, "peak_bytes", v->finding->peak_bytes);
    gp__jw_u64(j, "count", v->count);
    if (v->has_limit)
        gp__jw_u64(j, "limit", v->limit);
    else
        gp__jw_null(j, "limit");
    gp__jw_str(j, "op", top ? top->op : "");
    gp__jw_str(j, "module", top ? top->module : "");
    gp__jw_str(j, "message", msg);
    json_frames(j, p, top ? top->stack : 0);
    gp__jw_u64(j, "saved_inferred_bytes", v->saved_bytes);
    gp__jw_u64(j, "held_graph_bytes", v->held_graph_bytes);
    gp__jw_array(j, "items", false);
    for (size_t i = 0; i < v->n_items; i++) {
        const gp_finding_item *it = &v->items[i];
        gp__jw_object(j, NULL, true);
        gp__jw_str(j, "category", lp_category_name(it->category));
        gp__jw_str(j, "op", it->op);
        gp__jw_str(j, "module", it->module);
        gp__jw_u64(j, "bytes", it->bytes);
        gp__jw_u64(j, "count", it->count);
        json_frames(j, p, it->stack);
        gp__jw_end(j);
    }
    gp__jw_end(j);
    gp__jw_u64(j, "more_items", v->more_items);
    gp__jw_end(j);
}

int gp_render_check_json(FILE *out, gp_profile *p, const gp_check_result *r)
{
    gp__jw j;
    gp__jw_begin(&j, out);
    gp__jw_object(&j, NULL, false);
    gp__jw_str(&j, "schema", "gradprof-check/2");
    gp__jw_str(&j, "trace", r->path);
    gp__jw_str(&j, "verdict", verdict_name(r->verdict));
    char summary[512];
    gp__jw_str(&j, "summary", gp__verdict(p, summary, sizeof summary) ? summary : "");
    gp__jw_bool(&j, "passed", r->verdict == GP_CHECK_PASSED);
    gp__jw_str(&j, "hint", r->hint);
    gp__jw_array(&j, "doubts", false);
    for (size_t i = 0; i < r->n_doubts; i++) {
        const gp_check_doubt *d = &r->doubts[i];
        gp__jw_object(&j, NULL, true);
        gp__jw_str(&j, "reason", doubt_reason(d));
        gp__jw_bool(&j, "accepted", d->accepted);
        gp__jw_str(&j, "option", d->option);
        gp__jw_str(&j, "message", d->message);
        gp__jw_end(&j);
    }
    gp__jw_end(&j);
    gp__jw_array(&j, "rules", false);
    for (size_t i = 0; i < r->n_rules; i++) {
        const gp_check_rule *ru = &r->rules[i];
        gp__jw_object(&j, NULL, true);
        gp__jw_str(&j, "name", ru->name);
        gp__jw_bool(&j, "passed", ru->n == 0);
        gp__jw_str(&j, "skipped", ru->skipped[0] ? ru->skipped : NULL);
        gp__jw_u64(&j, "violations", ru->n);
        gp__jw_end(&j);
    }
    gp__jw_end(&j);
    gp__jw_array(&j, "violations", false);
    for (size_t i = 0; i < r->n_violations; i++)
        json_violation(&j, p, &r->violations[i]);
    gp__jw_end(&j);
    gp__jw_end(&j);
    return gp__jw_finish(&j);
}

/* ---- JUnit XML ------------------------------------------------------------------------------- */

/* Writes s escaped for XML (the tools' one XML escaper): the five entities; tab, newline and CR
 * as character references in an attribute (where a parser would turn them into spaces) and as
 * they are in text; U+FFFD for what XML 1.0 cannot hold (other control characters, bytes that
 * are not UTF-8). NULL writes nothing. */
static void xml_write(FILE *out, const char *s, bool attr)
{
    static const char *const entities[] = {
        ['&'] = "&amp;", ['<'] = "&lt;", ['>'] = "&gt;", ['"'] = "&quot;", ['\''] = "&apos;"};
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        unsigned cp;
        size_t n = gp__utf8_decode(p, &cp);
        if (n == 0 || cp == 0xfffe || cp == 0xffff || /* not XML characters */
            (n == 1 && *p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')) {
            fputs("\xef\xbf\xbd", out);
            p++;
        } else if (n > 1) {
            fwrite(p, 1, n, out);
            p += n;
        } else if (*p < sizeof entities / sizeof entities[0] && entities[*p]) {
            fputs(entities[*p++], out);
        } else if (attr && (*p == '\t' || *p == '\n' || *p == '\r')) {
            fprintf(out, "&#%u;", *p++);
        } else {
            fputc(*p++, out);
        }
    }
}

/* The failure text of a violation: its sentence, its rows and the top frames, as in text. */
static void junit_details(FILE *out, gp_profile *p, const gp_check_violation *v, const char *msg)
{
    char line[1024], h[32];
    xml_write(out, msg, false);
    fputs("\n", out);
    for (size_t j = 0; j < v->n_items && j < TEXT_ITEMS; j++) {
        const gp_finding_item *it = &v->items[j];
        snprintf(line, sizeof line, "  %s (%" PRIu64 " bytes) x%" PRIu64 "  %s  op %s  module %s\n",
                 gp_format_bytes(it->bytes, h, sizeof h), it->bytes, it->count,
                 lp_category_name(it->category), or_dash(it->op), or_dash(it->module));
        xml_write(out, line, false);
        const char *frames[MAX_FRAMES];
        size_t n =
            j < FRAME_ITEMS && it->stack ? gp_site_frames(p, it->stack, frames, MAX_FRAMES) : 0;
        for (size_t k = 0; k < n; k++) {
            fputs("      ", out);
            xml_write(out, frames[k], false);
            fputs("\n", out);
        }
    }
}

/* A testcase per doubt: an error when it decides the verdict, skipped when accepted. */
static void junit_doubts(FILE *out, const gp_check_result *r)
{
    for (size_t i = 0; i < r->n_doubts; i++) {
        const gp_check_doubt *d = &r->doubts[i];
        fprintf(out, "    <testcase classname=\"gradprof-check\" name=\"judge: %s\">\n",
                d->code == GP_EINCOMPLETE ? "complete trace" : "classified memory");
        if (d->accepted)
            fprintf(out, "      <skipped message=\"accepted by %s: ", d->option);
        else
            fprintf(out, "      <error type=\"%s\" message=\"", doubt_reason(d));
        xml_write(out, d->message, true);
        fputs("\"/>\n    </testcase>\n", out);
    }
}

static void junit_rule(FILE *out, gp_profile *p, const gp_check_result *r, const gp_check_rule *ru)
{
    char msg[1024];
    fputs("    <testcase classname=\"gradprof-check\" name=\"", out);
    xml_write(out, ru->name, true);
    if (ru->skipped[0]) {
        fputs("\">\n      <skipped message=\"", out);
        xml_write(out, ru->skipped, true);
        fputs("\"/>\n    </testcase>\n", out);
        return;
    }
    if (!ru->n) {
        fputs("\"/>\n", out);
        return;
    }
    fputs("\">\n", out);
    for (size_t j = ru->first; j < ru->first + ru->n; j++) {
        const gp_check_violation *v = &r->violations[j];
        check_message(p, v, msg, sizeof msg);
        fputs("      <failure type=\"", out);
        xml_write(out, v->rule, true);
        fputs("\" message=\"", out);
        xml_write(out, msg, true);
        fputs("\">", out);
        junit_details(out, p, v, msg);
        fputs("</failure>\n", out);
    }
    fputs("    </testcase>\n", out);
}

int gp_render_check_junit(FILE *out, gp_profile *p, const gp_check_result *r)
{
    size_t errors = 0, accepted = 0;
    for (size_t i = 0; i < r->n_doubts; i++) {
        errors += !r->doubts[i].accepted;
        accepted += r->doubts[i].accepted;
    }
    size_t tests = r->n_rules + r->n_doubts, skipped = r->rules_skipped + accepted;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", out);
    fprintf(out,
            "<testsuites name=\"gradprof\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
            "skipped=\"%zu\">\n",
            tests, r->rules_failed, errors, skipped);
    fprintf(out,
            "  <testsuite name=\"gradprof-check\" tests=\"%zu\" failures=\"%zu\" errors=\"%zu\" "
            "skipped=\"%zu\">\n",
            tests, r->rules_failed, errors, skipped);
    fputs("    <properties>\n      <property name=\"trace\" value=\"", out);
    xml_write(out, r->path, true);
    fputs("\"/>\n    </properties>\n", out);
    junit_doubts(out, r);
    for (size_t i = 0; i < r->n_rules; i++)
        junit_rule(out, p, r, &r->rules[i]);
    fputs("  </testsuite>\n</testsuites>\n", out);
    return ferror(out) ? -1 : 0;
}

/* ---- the command's output -------------------------------------------------------------------- */

int gp_render_check_results(FILE *out, const gp_render_process *procs,
                            gp_check_result *const *results, size_t n, bool json)
{
    if (n > 1)
        return json ? gp_render_check_job_json(out, procs, results, n)
                    : gp_render_check_job_text(out, procs, results, n);
    return json ? gp_render_check_json(out, procs[0].p, results[0])
                : gp_render_check_text(out, procs[0].p, results[0]);
}
