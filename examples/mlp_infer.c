/*
 * mlp_infer — an L-layer Linear+ReLU MLP in eval mode on random input, run under a chosen grad
 * mode. Prints the time per forward and, per memory category, the bytes still held when the last
 * output is done with (the live set) and the peak over the run, as counted by libprof.
 *
 * The classic mistake it demonstrates: with grad on, each forward records a graph whose nodes keep
 * every ReLU output alive ("saved for backward") for as long as the output lives.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gradprof/tensor.h"

typedef enum { MODE_GRAD, MODE_NO_GRAD, MODE_INFERENCE } grad_mode_opt;

typedef struct options {
    grad_mode_opt mode;
    long layers, width, batch, iters;
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: mlp_infer [--grad | --no-grad | --inference-mode] [--layers L] [--width W]\n"
            "                 [--batch B] [--iters N]\n"
            "\n"
            "Runs an L-layer Linear+ReLU MLP (the last layer without ReLU) in eval mode on random\n"
            "input N times and prints the median time per forward and live/peak bytes per memory\n"
            "category. 'live' is measured while the last output is still held.\n"
            "\n"
            "  --grad             grad enabled (the default, as in a script that forgot no_grad)\n"
            "  --no-grad          each forward under no_grad\n"
            "  --inference-mode   each forward under inference_mode\n"
            "  --layers L         number of Linear layers (default 8)\n"
            "  --width W          hidden width (default 1024)\n"
            "  --batch B          batch size (default 64)\n"
            "  --iters N          forwards to run (default 10)\n");
}

/* Parses a positive integer option value; prints an error naming the option on failure. */
static int parse_count(const char *opt, const char *value, long max, long *out)
{
    if (!value) {
        fprintf(stderr, "mlp_infer: %s needs a value\n", opt);
        return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (errno || *end || end == value || v < 1 || v > max) {
        fprintf(stderr, "mlp_infer: %s: '%s' is not an integer in [1, %ld]\n", opt, value, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* Returns 0 to run, 1 to exit successfully (--help), 2 on a usage error. */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){MODE_GRAD, 8, 1024, 64, 10};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--grad")) {
            o->mode = MODE_GRAD;
        } else if (!strcmp(a, "--no-grad")) {
            o->mode = MODE_NO_GRAD;
        } else if (!strcmp(a, "--inference-mode")) {
            o->mode = MODE_INFERENCE;
        } else if (!strcmp(a, "--layers")) {
            if (parse_count(a, v, 1000, &o->layers))
                return 2;
            i++;
        } else if (!strcmp(a, "--width")) {
            if (parse_count(a, v, 65536, &o->width))
                return 2;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (parse_count(a, v, 65536, &o->batch))
                return 2;
            i++;
        } else if (!strcmp(a, "--iters")) {
            if (parse_count(a, v, 1000000, &o->iters))
                return 2;
            i++;
        } else {
            fprintf(stderr, "mlp_infer: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    return 0;
}

static double now_ms(void)
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

static tn_module *build_mlp(const options *o)
{
    tn_module *net = tn_sequential_new();
    if (!net)
        return NULL;
    for (long i = 0; i < o->layers; i++) {
        if (tn_sequential_append(net, tn_linear_new(o->width, o->width, true)) != 0 ||
            (i + 1 < o->layers && tn_sequential_append(net, tn_relu_new()) != 0)) {
            tn_module_free(net);
            return NULL;
        }
    }
    tn_module_train(net, false);
    return net;
}

static const char *mode_name(grad_mode_opt m)
{
    return m == MODE_GRAD ? "grad" : m == MODE_NO_GRAD ? "no_grad" : "inference_mode";
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;

    tn_manual_seed(0);
    tn_module *net = build_mlp(&o);
    tn_tensor *x = net ? tn_randn(2, (const int64_t[]){o.batch, o.width}, LP_CAT_INPUT) : NULL;
    if (!x) {
        fprintf(stderr, "mlp_infer: setup failed: %s\n", tn_last_error_message());
        tn_module_free(net);
        return 1;
    }

    double *times = calloc((size_t)o.iters, sizeof *times);
    tn_tensor *y = NULL;
    lp_counters held = {0};
    lp_counters_reset_peak();
    lp_region_push("inference");
    for (long it = 0; it < o.iters && times; it++) {
        char mark[32];
        snprintf(mark, sizeof mark, "iter %ld", it);
        lp_mark(mark);
        tn_release(y); /* the previous output (and the graph it holds) goes now */
        double t0 = now_ms();
        tn_grad_mode prev = {0};
        if (o.mode == MODE_NO_GRAD)
            prev = tn_no_grad_begin();
        else if (o.mode == MODE_INFERENCE)
            prev = tn_inference_mode_begin(true);
        y = tn_module_forward(net, x);
        if (o.mode != MODE_GRAD)
            tn_grad_mode_end(prev);
        times[it] = now_ms() - t0;
        if (!y) {
            fprintf(stderr, "mlp_infer: forward failed: %s\n", tn_last_error_message());
            break;
        }
    }
    lp_region_pop();
    if (y)
        lp_counters_get(LP_DEVICE_HOST, &held);
    lp_counters peak;
    lp_counters_get(LP_DEVICE_HOST, &peak);
    int status = y && times ? 0 : 1;
    tn_release(y);

    if (status == 0) {
        qsort(times, (size_t)o.iters, sizeof *times, cmp_double);
        printf("mlp_infer: %ld layers, width %ld, batch %ld, %ld iters, mode %s\n", o.layers,
               o.width, o.batch, o.iters, mode_name(o.mode));
        printf("time per forward: %.3f ms (median)\n", times[o.iters / 2]);
        printf("%-16s %14s %14s\n", "category", "live_bytes", "peak_bytes");
        for (int c = 0; c < LP_CAT_COUNT; c++)
            printf("%-16s %14lld %14lld\n", lp_category_name((lp_category)c),
                   (long long)held.live[c], (long long)peak.peak[c]);
        printf("%-16s %14lld %14lld\n", "total", (long long)held.live_total,
               (long long)peak.peak_total);
    }
    free(times);
    tn_release(x);
    tn_module_free(net);
    return status;
}
