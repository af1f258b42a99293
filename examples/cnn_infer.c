/*
 * cnn_infer — a small image classifier (conv + batch norm + ReLU + max pool blocks, then a Linear
 * classifier) in eval mode on a random batch [B, 3, 32, 32], under a chosen grad mode. Prints the
 * time per forward and, per memory category, the bytes held while the last output is alive and
 * the peak over the run.
 *
 * With grad on, every block saves its input for the convolution's backward, the batch norm's
 * input and statistics, the ReLU output and the pool input: the graph of one forward holds several
 * times the activations of any single layer, for as long as the logits live.
 */
#include <stdio.h>

#include "common.h"

static const char usage[] =
    "usage: cnn_infer [--grad | --no-grad | --inference-mode] [--blocks K] [--width C]\n"
    "                 [--batch B] [--iters N]\n"
    "\n"
    "Runs K blocks of Conv2d(3x3) + BatchNorm2d + ReLU + MaxPool(2) (channels C, 2C, 4C, ...) and\n"
    "a Linear classifier to 10 classes, in eval mode, on a random [B, 3, 32, 32] batch N times;\n"
    "prints the median time per forward and live/peak bytes per memory category. 'live' is\n"
    "measured while the last output is still held.\n"
    "\n"
    "  --grad             grad enabled (the default, as in a script that forgot no_grad)\n"
    "  --no-grad          each forward under no_grad\n"
    "  --inference-mode   each forward under inference_mode\n"
    "  --blocks K         conv blocks, 1-5 (default 3)\n"
    "  --width C          channels of the first block (default 16)\n"
    "  --batch B          batch size (default 8)\n"
    "  --iters N          forwards to run (default 5)\n";

typedef struct model {
    ex_cnn net;
    tn_tensor *x; /* [B, 3, 32, 32] */
} model;

static tn_tensor *forward(void *ctx)
{
    model *m = ctx;
    return ex_cnn_forward(&m->net, m->x);
}

int main(int argc, char **argv)
{
    int mode = EX_MODE_GRAD;
    long blocks = 3, width = 16, batch = 8, iters = 5;
    const ex_opt opts[] = {
        EX_MODE_OPTS(&mode),
        {"--blocks", EX_OPT_COUNT, &blocks, .min = 1, .max = 5},
        {"--width", EX_OPT_COUNT, &width, .min = 1, .max = 4096},
        {"--batch", EX_OPT_COUNT, &batch, .min = 1, .max = 65536},
        {"--iters", EX_OPT_COUNT, &iters, .min = 1, .max = 1000000},
    };
    int rc = ex_parse_options("cnn_infer", usage, argc, argv, opts, sizeof opts / sizeof *opts);
    if (rc)
        return ex_exit_code(rc);

    tn_manual_seed(0);
    model m = {0};
    if (ex_cnn_init(&m.net, blocks, width, 32, 10) == 0)
        m.x = tn_randn(4, (const int64_t[]){batch, 3, 32, 32}, LP_CAT_INPUT);
    if (!m.x) {
        fprintf(stderr, "cnn_infer: setup failed: %s\n", tn_last_error_message());
        ex_cnn_free(&m.net);
        return 1;
    }

    ex_infer_result r;
    int status = ex_infer_run("cnn_infer", mode, iters, forward, &m, &r);
    if (status == 0) {
        printf("cnn_infer: %ld conv blocks, width %ld, input [%ld,3,32,32], %ld iters, mode %s\n",
               blocks, width, batch, iters, ex_mode_name(mode));
        printf("time per forward: %.3f ms (median)\n", r.median_ms);
        ex_print_counters(&r.counters);
    }
    tn_release(m.x);
    ex_cnn_free(&m.net);
    return status;
}
