/*
 * leak_accumulate — the classic "total_loss += loss" leak.
 *
 *     total_loss = 0
 *     for x, y in loader:                 # model.eval(), but grad left on
 *         loss = criterion(model(x), y)
 *         total_loss = total_loss + loss  # bug: total_loss now owns loss's graph
 *
 * The sum is a tensor with history: its add node points at the previous sum's node and at this
 * loss's graph, so every iteration's graph -- the activations saved for backward and the nodes --
 * stays alive until total_loss goes, and memory grows by one graph per batch. Fixed: accumulate
 * the loss's value, total += loss.item() (tn_item), which keeps no graph.
 *
 * Profiling marks (what gradprof's detectors key on): lp_mark("iter <i>") starts each iteration
 * and the evaluation work of each one runs inside lp_region_push("inference") ... lp_region_pop().
 * With the bug, gradprof finds live memory growing across the marks, a graph leaving each
 * "inference" region (total_loss) and grad left on inside it; --fixed removes the first two (grad
 * is still on, so each iteration still builds a graph and frees it: add --no-grad for none at all).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage[] =
    "usage: leak_accumulate [--fixed] [--grad | --no-grad | --inference-mode] [--iters N]\n"
    "                       [--batch B]\n"
    "\n"
    "Evaluates a 3-layer MLP (64 -> 256 -> 256 -> 10) on N random batches and sums the\n"
    "cross-entropy loss as a tensor, total_loss = total_loss + loss, with grad on: every\n"
    "iteration's graph stays alive. Prints the mean loss, then live bytes per category at the\n"
    "first and last iteration and after the loop, and their growth.\n"
    "\n"
    "  --fixed            accumulate the loss's value (tn_item) instead: no graph\n"
    "                     is kept\n" EX_LEAK_USAGE_OPTIONS;

int main(int argc, char **argv)
{
    const char *prog = "leak_accumulate";
    ex_leak_options o;
    int rc = ex_leak_parse(prog, usage, argc, argv, &o);
    if (rc)
        return ex_exit_code(rc);

    tn_manual_seed(0);
    uint64_t rng = 1;
    int64_t *labels = malloc((size_t)o.batch * sizeof *labels);
    tn_module *net = ex_mlp_new(EX_LEAK_IN, EX_LEAK_HIDDEN, EX_LEAK_CLASSES, 3, "mlp");
    tn_tensor *total_loss = net ? tn_scalar(0.0f, LP_CAT_ACTIVATION) : NULL; /* the bug's sum */
    if (!total_loss || !labels) {
        fprintf(stderr, "%s: setup failed: %s\n", prog,
                labels ? tn_last_error_message() : "out of memory");
        tn_release(total_loss);
        tn_module_free(net);
        free(labels);
        return 1;
    }
    double total_value = 0; /* the fix's sum */

    ex_growth g = {0};
    int status = 0;
    lp_counters_reset_peak();
    tn_grad_mode prev = ex_mode_begin(o.mode);
    for (long i = 0; i < o.iters && status == 0; i++) {
        ex_growth_mark(&g, i); /* lp_mark("iter <i>") */
        tn_tensor *x = ex_leak_batch(o.batch, labels, &rng);

        lp_region_push("inference");
        tn_tensor *logits = x ? tn_module_forward(net, x) : NULL;
        tn_tensor *loss = logits ? tn_cross_entropy(logits, labels) : NULL;
        if (loss && o.fixed) {
            total_value += tn_item(loss); /* a float: the graph goes with loss */
        } else if (loss) {
            tn_tensor *sum = tn_add(total_loss, loss); /* the sum's node holds loss's graph */
            tn_release(total_loss);
            total_loss = sum;
        }
        if (!loss || !total_loss) {
            fprintf(stderr, "%s: iteration %ld failed: %s\n", prog, i, tn_last_error_message());
            status = 1;
        }
        tn_release(loss);
        tn_release(logits);
        lp_region_pop();

        tn_release(x);
    }
    ex_growth_end(&g); /* total_loss (and, with the bug, every graph) still held */
    ex_mode_end(o.mode, prev);

    if (status == 0) {
        double mean = (o.fixed ? total_value : (double)tn_item(total_loss)) / (double)o.iters;
        printf("%s: %s, mode %s, %ld iters, batch %ld\n", prog,
               o.fixed ? "fixed (total += tn_item(loss))" : "bug (total_loss = total_loss + loss)",
               ex_mode_name(o.mode), o.iters, o.batch);
        printf("mean loss %.6f\n", mean);
        ex_growth_print(&g);
    }
    tn_release(total_loss); /* the whole chain of graphs goes here */
    tn_module_free(net);
    free(labels);
    return status;
}
