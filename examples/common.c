/*
 * Helpers shared by the example programs (see common.h).
 */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- options -------------------------------------------------------------------------------- */

/* Converts `value` for option o into its target; prints an error naming the option on failure. */
static int parse_value(const char *prog, const ex_opt *o, const char *value)
{
    char *end;
    errno = 0;
    switch (o->kind) {
    case EX_OPT_COUNT: {
        long v = strtol(value, &end, 10);
        if (errno || *end || end == value || v < o->min || v > o->max) {
            fprintf(stderr, "%s: %s: '%s' is not an integer in [%ld, %ld]\n", prog, o->name, value,
                    o->min, o->max);
            return -1;
        }
        *(long *)o->target = v;
        return 0;
    }
    case EX_OPT_REAL: {
        double v = strtod(value, &end);
        if (errno || *end || end == value || !isfinite(v) || v < o->fmin || v > o->fmax) {
            fprintf(stderr, "%s: %s: '%s' is not a number in [%g, %g]\n", prog, o->name, value,
                    o->fmin, o->fmax);
            return -1;
        }
        *(double *)o->target = v;
        return 0;
    }
    case EX_OPT_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(value, o->choices[i])) {
                *(int *)o->target = i;
                return 0;
            }
        fprintf(stderr, "%s: %s: '%s' is not one of", prog, o->name, value);
        for (int i = 0; o->choices[i]; i++)
            fprintf(stderr, "%s %s", i ? "," : "", o->choices[i]);
        fputc('\n', stderr);
        return -1;
    default:
        return -1; /* flags take no value; the caller never gets here for them */
    }
}

int ex_parse_options(const char *prog, const char *usage, int argc, char **argv, const ex_opt *opts,
                     size_t n)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            fputs(usage, stdout);
            return 1;
        }
        const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const ex_opt *o = NULL;
        for (size_t k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == name_len && !strncmp(opts[k].name, arg, name_len))
                o = &opts[k];
        if (!o) {
            fprintf(stderr, "%s: unknown option '%.*s' (see --help)\n", prog, (int)name_len, arg);
            return 2;
        }
        if (o->kind == EX_OPT_FLAG || o->kind == EX_OPT_SET) {
            if (eq) {
                fprintf(stderr, "%s: %s takes no value (got '%s')\n", prog, o->name, eq + 1);
                return 2;
            }
            if (o->kind == EX_OPT_FLAG)
                *(bool *)o->target = true;
            else
                *(int *)o->target = o->value;
            continue;
        }
        const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!value) {
            fprintf(stderr, "%s: %s needs a value\n", prog, o->name);
            return 2;
        }
        if (parse_value(prog, o, value))
            return 2;
    }
    return 0;
}

/* ---- grad modes ----------------------------------------------------------------------------- */

const char *ex_mode_name(int mode)
{
    return mode == EX_MODE_NO_GRAD     ? "no_grad"
           : mode == EX_MODE_INFERENCE ? "inference_mode"
                                       : "grad";
}

tn_grad_mode ex_mode_begin(int mode)
{
    if (mode == EX_MODE_NO_GRAD)
        return tn_no_grad_begin();
    if (mode == EX_MODE_INFERENCE)
        return tn_inference_mode_begin(true);
    return (tn_grad_mode){tn_is_grad_enabled(), tn_is_inference_mode_enabled()};
}

void ex_mode_end(int mode, tn_grad_mode previous)
{
    if (mode != EX_MODE_GRAD) /* grad mode entered no scope, so there is none to pop */
        tn_grad_mode_end(previous);
}

/* ---- timing and randomness ------------------------------------------------------------------ */

double ex_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ex_median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void ex_random_ids(int64_t *ids, size_t n, int64_t bound, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        /* splitmix64 (Steele, Lea, Flood 2014); the modulo bias is irrelevant for these bounds */
        uint64_t z = (*state += 0x9e3779b97f4a7c15u);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        ids[i] = (int64_t)((z ^ (z >> 31)) % (uint64_t)bound);
    }
}

/* ---- models --------------------------------------------------------------------------------- */

tn_module *ex_mlp_new(int64_t in, int64_t hidden, int64_t out, long layers, const char *name)
{
    tn_module *net = tn_sequential_new();
    if (!net)
        return NULL;
    for (long i = 0; i < layers; i++) {
        int64_t fan_in = i == 0 ? in : hidden, fan_out = i + 1 == layers ? out : hidden;
        if (tn_sequential_append(net, tn_linear_new(fan_in, fan_out, true)) != 0 ||
            (i + 1 < layers && tn_sequential_append(net, tn_relu_new()) != 0)) {
            tn_module_free(net);
            return NULL;
        }
    }
    if (name && tn_module_set_name(net, name) != 0) {
        tn_module_free(net);
        return NULL;
    }
    tn_module_train(net, false);
    return net;
}

int ex_cnn_init(ex_cnn *net, long blocks, int64_t width, int64_t size, int64_t classes)
{
    *net = (ex_cnn){0};
    int rc = TN_ENOMEM;
    int64_t in = 3, ch = width, side = size;
    if (!(net->features = tn_sequential_new()))
        goto fail;
    for (long b = 0; b < blocks; b++, in = ch, ch *= 2, side /= 2) {
        tn_module *block = tn_sequential_new();
        if ((rc = tn_sequential_append(net->features, block)) || /* owns block from here */
            (rc = tn_sequential_append(block, tn_conv2d_new(in, ch, 3, 1, 1, false))) ||
            (rc = tn_sequential_append(block, tn_batch_norm2d_new(ch))) ||
            (rc = tn_sequential_append(block, tn_relu_new())))
            goto fail;
    }
    rc = TN_ENOMEM;
    if (!(net->classifier = tn_linear_new(in * side * side, classes, true)))
        goto fail;
    if ((rc = tn_module_set_name(net->features, "features")) ||
        (rc = tn_module_set_name(net->classifier, "classifier")))
        goto fail;
    tn_module_train(net->features, false);
    tn_module_train(net->classifier, false);
    return 0;
fail:
    ex_cnn_free(net);
    return rc;
}

tn_tensor *ex_cnn_forward(ex_cnn *net, tn_tensor *x)
{
    tn_tensor *y = tn_retain(x);
    tn_module *block;
    for (int b = 0; y && (block = tn_module_child(net->features, b)); b++) {
        tn_tensor *conv = tn_module_forward(block, y); /* conv + batch norm + relu */
        tn_release(y);
        y = conv ? tn_max_pool2d(conv, 2, 2, 0) : NULL; /* no pool module: applied here */
        tn_release(conv);
    }
    if (!y)
        return NULL;
    tn_tensor *flat = tn_reshape(y, 2, (const int64_t[]){tn_size(y, 0), -1});
    tn_release(y);
    tn_tensor *logits = flat ? tn_module_forward(net->classifier, flat) : NULL;
    tn_release(flat);
    return logits;
}

void ex_cnn_free(ex_cnn *net)
{
    tn_module_free(net->features);
    tn_module_free(net->classifier);
    *net = (ex_cnn){0};
}

/* ---- the inference loop --------------------------------------------------------------------- */

int ex_infer_run(const char *prog, int mode, long iters, ex_forward_fn forward, void *ctx,
                 ex_infer_result *out)
{
    double *times = calloc((size_t)iters, sizeof *times);
    if (!times) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    tn_tensor *y = NULL;
    long done = 0;
    lp_counters_reset_peak();
    lp_region_push("inference");
    for (long it = 0; it < iters; it++) {
        char mark[32];
        snprintf(mark, sizeof mark, "iter %ld", it);
        lp_mark(mark);
        tn_release(y); /* the previous output (and the graph it holds) goes now */
        double t0 = ex_now_ms();
        tn_grad_mode prev = ex_mode_begin(mode);
        y = forward(ctx);
        ex_mode_end(mode, prev);
        times[it] = ex_now_ms() - t0;
        if (!y) {
            fprintf(stderr, "%s: forward failed: %s\n", prog, tn_last_error_message());
            break;
        }
        done++;
    }
    lp_counters_get(LP_DEVICE_HOST, &out->counters);
    lp_region_pop();
    out->median_ms = done == iters ? ex_median(times, (size_t)iters) : 0;
    tn_release(y);
    free(times);
    return done == iters ? 0 : 1;
}

/* ---- tables --------------------------------------------------------------------------------- */

void ex_print_counters(const lp_counters *c)
{
    printf("%-16s %14s %14s\n", "category", "live_bytes", "peak_bytes");
    for (int k = 0; k < LP_CAT_COUNT; k++)
        printf("%-16s %14lld %14lld\n", lp_category_name((lp_category)k), (long long)c->live[k],
               (long long)c->peak[k]);
    printf("%-16s %14lld %14lld\n", "total", (long long)c->live_total, (long long)c->peak_total);
}

/* ---- the leak programs ---------------------------------------------------------------------- */

int ex_leak_parse(const char *prog, const char *usage, int argc, char **argv, ex_leak_options *o)
{
    *o = (ex_leak_options){.fixed = false, .mode = EX_MODE_GRAD, .iters = 20, .batch = 32};
    const ex_opt opts[] = {
        {.name = "--fixed", .kind = EX_OPT_FLAG, .target = &o->fixed},
        EX_MODE_OPTS(&o->mode),
        {"--iters", EX_OPT_COUNT, &o->iters, .min = 1, .max = 1000000},
        {"--batch", EX_OPT_COUNT, &o->batch, .min = 1, .max = 65536},
    };
    return ex_parse_options(prog, usage, argc, argv, opts, sizeof opts / sizeof *opts);
}

tn_tensor *ex_leak_batch(long batch, int64_t *labels, uint64_t *rng)
{
    if (labels)
        ex_random_ids(labels, (size_t)batch, EX_LEAK_CLASSES, rng);
    return tn_randn(2, (const int64_t[]){batch, EX_LEAK_IN}, LP_CAT_INPUT);
}

int64_t ex_argmax_row(const tn_tensor *logits, int64_t i)
{
    int64_t classes = tn_size(logits, 1);
    const float *row = tn_data_const(logits) + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; c++)
        if (row[c] > row[best])
            best = c;
    return best;
}

void ex_growth_mark(ex_growth *g, long i)
{
    char mark[32];
    snprintf(mark, sizeof mark, "iter %ld", i);
    lp_mark(mark);
    lp_counters_get(LP_DEVICE_HOST, &g->last);
    if (i == 0) {
        g->first = g->second = g->last;
        g->first_ms = ex_now_ms();
    } else if (i == 1) {
        g->second = g->last;
    }
    g->iters = i + 1;
}

void ex_growth_end(ex_growth *g)
{
    lp_counters_get(LP_DEVICE_HOST, &g->end);
    g->end_ms = ex_now_ms();
}

/* One table row; `base` is the live value growth is measured from, over `span` iterations. */
static void growth_row(const char *name, int64_t first, int64_t second, int64_t last, int64_t end,
                       int64_t base, long span, int64_t peak)
{
    printf("%-16s %11lld %11lld %11lld %11lld %11lld %11lld %11lld\n", name, (long long)first,
           (long long)second, (long long)last, (long long)end, (long long)(end - base),
           (long long)((end - base) / span), (long long)peak);
}

void ex_growth_print(const ex_growth *g)
{
    long n = g->iters > 0 ? g->iters : 1;
    bool from_second = n > 1;
    const lp_counters *base = from_second ? &g->second : &g->first;
    long span = from_second ? n - 1 : 1;
    char last[32];
    snprintf(last, sizeof last, "iter %ld", n - 1);
    printf("time per iteration: %.3f ms (mean)\n", (g->end_ms - g->first_ms) / (double)n);
    printf("live bytes at the marks of the first, second and last iteration and after the loop;\n"
           "growth from iteration %d's mark to after the loop (%ld iteration%s); peak over the "
           "loop:\n",
           from_second ? 1 : 0, span, span == 1 ? "" : "s");
    printf("%-16s %11s %11s %11s %11s %11s %11s %11s\n", "category", "iter 0",
           from_second ? "iter 1" : "(iter 0)", last, "after_loop", "growth", "per_iter", "peak");
    for (int c = 0; c < LP_CAT_COUNT; c++)
        growth_row(lp_category_name((lp_category)c), g->first.live[c], g->second.live[c],
                   g->last.live[c], g->end.live[c], base->live[c], span, g->end.peak[c]);
    growth_row("total", g->first.live_total, g->second.live_total, g->last.live_total,
               g->end.live_total, base->live_total, span, g->end.peak_total);
    int64_t growth = g->end.live_total - base->live_total;
    int64_t graph = g->end.live[LP_CAT_SAVED] + g->end.live[LP_CAT_AUTOGRAD];
    int64_t graph_growth = graph - base->live[LP_CAT_SAVED] - base->live[LP_CAT_AUTOGRAD];
    printf("live total grew by %lld bytes over %ld iteration%s (%lld per iteration); saved + "
           "autograd by %lld\n",
           (long long)growth, span, span == 1 ? "" : "s", (long long)(growth / span),
           (long long)graph_growth);
    printf("graph memory (saved + autograd) live after the loop: %lld bytes%s\n", (long long)graph,
           graph > 0 ? ": a graph outlives the iteration that built it" : "");
}
