/* Frame rules (see rules.h and tools/rules/pytorch.rules). */
#include "rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize.h" /* gp_function_short_name */

typedef struct rule {
    bool is_op;           /* an "op" rule */
    bool aten;            /* an op rule whose capture is an ATen operator's (struct) name */
    bool is_boundary;     /* a "boundary" rule; neither: a category rule */
    lp_category category;
    char *pattern;
} rule;

struct gp_rules {
    rule *items;
    size_t n;
};

bool gp__glob(const char *p, const char *t)
{
    const char *star = NULL, *resume = NULL;
    while (*t) {
        if (*p == '*') {
            star = p++;
            resume = t;
        } else if (*p == '?' || *p == *t) {
            p++;
            t++;
        } else if (star) {
            p = star + 1;
            t = ++resume;
        } else {
            return false;
        }
    }
    while (*p == '*')
        p++;
    return *p == '\0';
}

/* The function name without its parameter list: "ns::f(int) const" -> "ns::f" (templates and
 * operator() kept whole). Writes into buf. */
static const char *strip_params(const char *name, char *buf, size_t size)
{
    size_t depth = 0, n = strlen(name), end = n;
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '<')
            depth++;
        else if (name[i] == '>' && depth)
            depth--;
        else if (name[i] == '(' && depth == 0 && !(i >= 8 && !strncmp(name + i - 8, "operator", 8))) {
            end = i;
            break;
        }
    }
    if (end >= size)
        end = size - 1;
    memcpy(buf, name, end);
    buf[end] = '\0';
    return buf;
}

gp_rules *gp_rules_parse(const char *text, const char *origin, char *err, size_t err_size)
{
    gp_rules *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, err_size, "%s: out of memory", origin);
        return NULL;
    }
    size_t cap = 0, line_no = 0;
    for (const char *line = text; line && *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        line_no++;
        char buf[1024];
        if (len >= sizeof buf) {
            snprintf(err, err_size, "%s:%zu: line longer than %zu characters", origin, line_no,
                     sizeof buf - 1);
            gp_rules_free(r);
            return NULL;
        }
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = eol ? eol + 1 : NULL;
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char word[64], pattern[1024], extra[8], more[8];
        int fields = sscanf(buf, "%63s %1023s %7s %7s", word, pattern, extra, more);
        if (fields <= 0)
            continue; /* blank or comment */
        bool aten = fields == 3 && !strcmp(word, "op") && !strcmp(extra, "aten");
        if (fields != 2 && !aten) {
            snprintf(err, err_size,
                     "%s:%zu: expected 'CATEGORY PATTERN', 'op PATTERN' or 'boundary PATTERN', "
                     "got '%s'",
                     origin, line_no, buf);
            gp_rules_free(r);
            return NULL;
        }
        rule item = {.is_op = !strcmp(word, "op"), .aten = aten,
                     .is_boundary = !strcmp(word, "boundary")};
        if (!item.is_op && !item.is_boundary && lp_category_parse(word, &item.category) != 0) {
            snprintf(err, err_size,
                     "%s:%zu: unknown category '%s' (expected op, boundary or one of parameter, "
                     "input, activation, saved, gradient, optimizer_state, autograd, temporary, "
                     "other)",
                     origin, line_no, word);
            gp_rules_free(r);
            return NULL;
        }
        if (item.is_op && !strchr(pattern, '*')) {
            snprintf(err, err_size, "%s:%zu: an op pattern needs a '*' to capture the op name",
                     origin, line_no);
            gp_rules_free(r);
            return NULL;
        }
        if (r->n == cap) {
            cap = cap ? 2 * cap : 16;
            rule *items = realloc(r->items, cap * sizeof *items);
            if (!items) {
                snprintf(err, err_size, "%s: out of memory", origin);
                gp_rules_free(r);
                return NULL;
            }
            r->items = items;
        }
        if (!(item.pattern = strdup(pattern))) {
            snprintf(err, err_size, "%s: out of memory", origin);
            gp_rules_free(r);
            return NULL;
        }
        r->items[r->n++] = item;
    }
    return r;
}

gp_rules *gp_rules_load(const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_size, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            if (cap > (1u << 24)) {
                snprintf(err, err_size, "%s: larger than 16 MiB, not a rules file", path);
                free(text);
                fclose(f);
                return NULL;
            }
            cap = cap ? 2 * cap : 8192;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                snprintf(err, err_size, "%s: out of memory", path);
                return NULL;
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(err, err_size, "%s: read error", path);
        free(text);
        return NULL;
    }
    text[len] = '\0';
    gp_rules *r = gp_rules_parse(text, path, err, err_size);
    free(text);
    return r;
}

extern const char gp__pytorch_rules[]; /* generated from tools/rules/pytorch.rules */

gp_rules *gp_rules_default(void)
{
    char err[256];
    return gp_rules_parse(gp__pytorch_rules, "pytorch.rules", err, sizeof err);
}

void gp_rules_free(gp_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        free(r->items[i].pattern);
    free(r->items);
    free(r);
}

/* The text the pattern's first '*' matched in name (the pattern is known to match), shortest
 * first: "at::_ops::*::call" on "at::_ops::linear::call" gives "linear". */
static void capture(const char *pattern, const char *name, char *out, size_t size)
{
    const char *star = strchr(pattern, '*');
    size_t prefix = (size_t)(star - pattern), len = strlen(name), end = prefix;
    while (end < len && !gp__glob(star + 1, name + end))
        end++;
    size_t n = end - prefix < size ? end - prefix : size - 1;
    memcpy(out, name + prefix, n);
    out[n] = '\0';
}

extern const char gp__aten_ops[]; /* tools/rules/aten_ops.txt: one operator name per line */

static const char **aten_ops; /* sorted; made at first use */
static size_t n_aten_ops;

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Loads the operator names once; false when out of memory (names then stay as captured). */
static bool aten_ops_load(void)
{
    static char *text;
    if (aten_ops)
        return true;
    if (!(text = strdup(gp__aten_ops)))
        return false;
    size_t cap = 1;
    for (const char *c = text; *c; c++)
        cap += *c == '\n';
    aten_ops = malloc(cap * sizeof *aten_ops);
    if (!aten_ops) {
        free(text);
        text = NULL;
        return false;
    }
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        if (*line && *line != '#')
            aten_ops[n_aten_ops++] = line;
    qsort(aten_ops, n_aten_ops, sizeof *aten_ops, cmp_cstr);
    return true;
}

/* An ATen operator's struct name (at::_ops::softmax_int) into the operator's name as PyTorch
 * prints it (aten::softmax): the longest operator name that is the whole struct name or followed
 * by '_' and the overload; the struct name itself when no operator name fits. */
static void aten_name(char *op, size_t size)
{
    char name[128];
    snprintf(name, sizeof name, "%s", op);
    size_t len = strlen(name);
    if (aten_ops_load()) {
        for (size_t n = len; n > 0; n--) {
            if (name[n] != '\0' && name[n] != '_')
                continue;
            char saved = name[n];
            name[n] = '\0';
            const char *key = name;
            bool known = bsearch(&key, aten_ops, n_aten_ops, sizeof *aten_ops, cmp_cstr) != NULL;
            name[n] = saved;
            if (known) {
                len = n;
                break;
            }
        }
    }
    snprintf(op, size, "aten::%.*s", (int)len, name);
}

void gp_rules_match(const gp_rules *r, const char *function, gp_rule_match *m)
{
    m->rule = -1;
    m->category = LP_CAT_OTHER;
    m->op[0] = '\0';
    m->boundary = false;
    if (!r)
        return;
    char name[1024], shown_buf[1024];
    strip_params(function, name, sizeof name);
    /* the name as the tables show it, for a pattern copied from a report */
    const char *shown = gp_function_short_name(function, shown_buf, sizeof shown_buf);
    if (!strcmp(shown, name))
        shown = NULL;
    for (size_t k = 0; k < r->n; k++) {
        const rule *it = &r->items[k];
        const char *hit = gp__glob(it->pattern, name) ? name : NULL;
        if (!hit && shown && gp__glob(it->pattern, shown))
            hit = shown;
        if (!hit)
            continue;
        if (it->is_op) {
            if (!m->op[0]) {
                capture(it->pattern, hit, m->op, sizeof m->op);
                if (it->aten)
                    aten_name(m->op, sizeof m->op);
            }
        } else if (it->is_boundary) {
            m->boundary = true;
        } else if (m->rule < 0) {
            m->rule = (int)k;
            m->category = it->category;
        }
    }
}

bool gp_rules_classify(const gp_rules *r, const char *const *functions, size_t n,
                       lp_category *category, char *op_buf, size_t op_size)
{
    int best = -1;
    *category = LP_CAT_OTHER;
    if (op_size)
        op_buf[0] = '\0';
    for (size_t i = n; i-- > 0;) { /* outermost first: the first op found is the outermost */
        gp_rule_match m;
        gp_rules_match(r, functions[i], &m);
        if (m.boundary) { /* what the frames outside it said does not hold inside */
            best = -1;
            *category = LP_CAT_OTHER;
            if (op_size)
                op_buf[0] = '\0';
        }
        if (m.rule >= 0 && (best < 0 || m.rule < best)) {
            best = m.rule;
            *category = m.category;
        }
        if (m.op[0] && op_size && !op_buf[0])
            snprintf(op_buf, op_size, "%s", m.op);
    }
    return best >= 0 || (op_size && op_buf[0]);
}
