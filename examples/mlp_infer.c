/*
 * mlp_infer — an L-layer Linear+ReLU MLP in eval mode on random input, run under a chosen grad
 * mode. Prints the time per forward and, per memory category, the bytes still held when the last
 * output is done with (the live set) and the peak over the run, as counted by libprof.
 *
 * The classic mistake it demonstrates: with grad on, each forward records a graph whose nodes keep
 * every ReLU output alive ("saved for backward") for as long as the output lives.
 */
#include <stdio.h>

#include "common.h"

static const char usage[] =
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
    "  --iters N          forwards to run (default 10)\n";

typedef struct model {
    tn_module *net;
    tn_tensor *x; /* [batch, width] */
} model;

static tn_tensor *forward(void *ctx)
{
    model *m = ctx;
    return tn_module_forward(m->net, m->x);
}

int main(int argc, char **argv)
{
    int mode = EX_MODE_GRAD;
    long layers = 8, width = 1024, batch = 64, iters = 10;
    const ex_opt opts[] = {
        EX_MODE_OPTS(&mode),
        {"--layers", EX_OPT_COUNT, &layers, .min = 1, .max = 1000},
        {"--width", EX_OPT_COUNT, &width, .min = 1, .max = 65536},
        {"--batch", EX_OPT_COUNT, &batch, .min = 1, .max = 65536},
        {"--iters", EX_OPT_COUNT, &iters, .min = 1, .max = 1000000},
    };
    int rc = ex_parse_options("mlp_infer", usage, argc, argv, opts, sizeof opts / sizeof *opts);
    if (rc)
        return ex_exit_code(rc);

    tn_manual_seed(0);
    model m = {ex_mlp_new(width, width, width, layers, "mlp"), NULL};
    m.x = m.net ? tn_randn(2, (const int64_t[]){batch, width}, LP_CAT_INPUT) : NULL;
    if (!m.x) {
        fprintf(stderr, "mlp_infer: setup failed: %s\n", tn_last_error_message());
        tn_module_free(m.net);
        return 1;
    }

    ex_infer_result r;
    int status = ex_infer_run("mlp_infer", mode, iters, forward, &m, &r);
    if (status == 0) {
        printf("mlp_infer: %ld layers, width %ld, batch %ld, %ld iters, mode %s\n", layers, width,
               batch, iters, ex_mode_name(mode));
        printf("time per forward: %.3f ms (median)\n", r.median_ms);
        ex_print_counters(&r.counters);
    }
    tn_release(m.x);
    tn_module_free(m.net);
    return status;
}
