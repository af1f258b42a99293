/*
 * leak_eval_without_no_grad — an evaluation loop that forgot no_grad.
 *
 *     model.eval()                        # eval() switches batch norm and dropout, not autograd
 *     for x, y in loader:
 *         out = model(x)                  # bug: builds a graph (saved activations + nodes)
 *         correct += (out.argmax(1) == y).sum().item()
 *
 * Every forward records a graph that keeps the activations saved for backward alive for as long
 * as `out` lives -- in Python until the next iteration rebinds it, so the previous batch's graph
 * is still alive while the next one is built: the peak holds two graphs. Memory does not grow
 * with the number of batches; the cost is a graph per live output (several times the
 * activations of any single layer, growing with the batch size and the depth) plus the time to
 * build it. Fixed: the loop runs under no_grad (or inference_mode with --inference-mode).
 *
 * Profiling marks (what gradprof's detectors key on): lp_mark("iter <i>") starts each iteration
 * and the evaluation work of each one runs inside lp_region_push("inference") ... lp_region_pop().
 * With the bug, gradprof finds grad left on inside "inference" and a graph leaving it (`out`,
 * alive until the next iteration); --fixed has neither.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage[] =
    "usage: leak_eval_without_no_grad [--fixed] [--grad | --no-grad | --inference-mode]\n"
    "                                 [--iters N] [--batch B]\n"
    "\n"
    "Evaluates a small CNN (2 blocks of conv + batch norm + ReLU + max pool, then a Linear\n"
    "classifier) in eval mode on N random [B, 3, 16, 16] batches with grad left on: each output\n"
    "holds its graph until the next batch's output replaces it. Prints the accuracy, then live\n"
    "bytes per category at the first and last iteration and after the loop, and the peak.\n"
    "\n"
    "  --fixed            run the loop under no_grad (the same as --no-grad; with\n"
    "                     --inference-mode, under inference_mode)\n" EX_LEAK_USAGE_OPTIONS;

int main(int argc, char **argv)
{
    const char *prog = "leak_eval_without_no_grad";
    ex_leak_options o;
    int rc = ex_leak_parse(prog, usage, argc, argv, &o);
    if (rc)
        return ex_exit_code(rc);
    if (o.fixed && o.mode == EX_MODE_GRAD)
        o.mode = EX_MODE_NO_GRAD; /* the fix */
    o.fixed = o.mode != EX_MODE_GRAD;

    tn_manual_seed(0);
    uint64_t rng = 1;
    ex_cnn net;
    int64_t *labels = malloc((size_t)o.batch * sizeof *labels);
    if (!labels || ex_cnn_init(&net, 2, 8, 16, EX_LEAK_CLASSES) != 0) {
        fprintf(stderr, "%s: setup failed: %s\n", prog,
                labels ? tn_last_error_message() : "out of memory");
        free(labels);
        return 1;
    }

    ex_growth g = {0};
    tn_tensor *out = NULL; /* as Python's `out`: lives until the next iteration rebinds it */
    long correct = 0;
    int status = 0;
    lp_counters_reset_peak();
    tn_grad_mode prev = ex_mode_begin(o.mode); /* with --fixed: `with torch.no_grad():` */
    for (long i = 0; i < o.iters && status == 0; i++) {
        ex_growth_mark(&g, i); /* lp_mark("iter <i>") */
        ex_random_ids(labels, (size_t)o.batch, EX_LEAK_CLASSES, &rng);
        tn_tensor *x = tn_randn(4, (const int64_t[]){o.batch, 3, 16, 16}, LP_CAT_INPUT);

        lp_region_push("inference");
        tn_tensor *next = x ? ex_cnn_forward(&net, x) : NULL;
        tn_release(out); /* rebinding `out` drops the previous batch's output and graph */
        out = next;
        if (out) {
            for (int64_t b = 0; b < o.batch; b++)
                correct += ex_argmax_row(out, b) == labels[b];
        } else {
            fprintf(stderr, "%s: iteration %ld failed: %s\n", prog, i, tn_last_error_message());
            status = 1;
        }
        lp_region_pop();

        tn_release(x);
    }
    ex_growth_end(&g); /* the last `out` (and, with the bug, its graph) still held */
    ex_mode_end(o.mode, prev);

    if (status == 0) {
        printf("%s: %s, mode %s, %ld iters, batch %ld\n", prog,
               o.fixed ? "fixed (loop under a no-grad mode)" : "bug (grad left on)",
               ex_mode_name(o.mode), o.iters, o.batch);
        printf("accuracy %.4f (random labels: about 0.1)\n",
               (double)correct / (double)(o.iters * o.batch));
        ex_growth_print(&g);
    }
    tn_release(out);
    ex_cnn_free(&net);
    free(labels);
    return status;
}
