/*
 * leak_collect_outputs — collecting every batch's output for metrics at the end.
 *
 *     outputs = []
 *     for x, y in loader:                 # model.eval(), but grad left on
 *         outputs.append(model(x))        # bug: each output keeps its graph
 *     accuracy = (torch.cat(outputs).argmax(1) == labels).float().mean()
 *
 * The outputs are tiny ([B, 10] logits), but each has history: its node holds the graph of its
 * forward, with the activations saved for backward (and the input batch, which the first Linear
 * saves), so the list keeps every batch's graph alive and memory grows by one graph per batch.
 * Fixed: collect tn_detach(output) (output.detach()), which keeps the logits and not the graph.
 *
 * Profiling marks (what gradprof's detectors key on): lp_mark("iter <i>") starts each iteration
 * and the evaluation work of each one runs inside lp_region_push("inference") ... lp_region_pop().
 * With the bug, gradprof finds live memory growing across the marks, graphs leaving each
 * "inference" region (in the list) and grad left on inside it; --fixed removes the first two (grad
 * is still on, so each batch still builds a graph and frees it: add --no-grad for none). The
 * detached logits still add B x 10 floats per batch: that growth is the program's own data.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage[] =
    "usage: leak_collect_outputs [--fixed] [--grad | --no-grad | --inference-mode] [--iters N]\n"
    "                            [--batch B]\n"
    "\n"
    "Evaluates a 3-layer MLP (64 -> 256 -> 256 -> 10) on N random batches with grad on, keeping\n"
    "every batch's output in an array to compute the accuracy at the end: every output keeps its\n"
    "graph. Prints the accuracy, then live bytes per category at the first and last iteration and\n"
    "after the loop, and their growth.\n"
    "\n"
    "  --fixed            collect tn_detach(output): the logits without their\n"
    "                     graph\n" EX_LEAK_USAGE_OPTIONS;

/* The accuracy of the collected logits: concatenated ([N*B, 10]) and compared with labels. */
static int accuracy(tn_tensor **outputs, long n, const int64_t *labels, double *out)
{
    tn_tensor *all = tn_concat(outputs, (int)n, 0);
    if (!all)
        return -1;
    long correct = 0;
    for (int64_t i = 0; i < tn_size(all, 0); i++)
        correct += ex_argmax_row(all, i) == labels[i];
    *out = (double)correct / (double)tn_size(all, 0);
    tn_release(all);
    return 0;
}

int main(int argc, char **argv)
{
    const char *prog = "leak_collect_outputs";
    ex_leak_options o;
    int rc = ex_leak_parse(prog, usage, argc, argv, &o);
    if (rc)
        return ex_exit_code(rc);

    tn_manual_seed(0);
    uint64_t rng = 1;
    tn_module *net = ex_mlp_new(EX_LEAK_IN, EX_LEAK_HIDDEN, EX_LEAK_CLASSES, 3, "mlp");
    tn_tensor **outputs = calloc((size_t)o.iters, sizeof *outputs); /* the collected list */
    int64_t *labels = malloc((size_t)(o.iters * o.batch) * sizeof *labels);
    if (!net || !outputs || !labels) {
        fprintf(stderr, "%s: setup failed: %s\n", prog,
                net ? "out of memory" : tn_last_error_message());
        tn_module_free(net);
        free(outputs);
        free(labels);
        return 1;
    }

    ex_growth g = {0};
    long collected = 0;
    int status = 0;
    double acc = 0;
    lp_counters_reset_peak();
    tn_grad_mode prev = ex_mode_begin(o.mode);
    for (long i = 0; i < o.iters && status == 0; i++) {
        ex_growth_mark(&g, i); /* lp_mark("iter <i>") */
        tn_tensor *x = ex_leak_batch(o.batch, labels + i * o.batch, &rng);

        lp_region_push("inference");
        tn_tensor *out = x ? tn_module_forward(net, x) : NULL;
        tn_tensor *keep = !out ? NULL : o.fixed ? tn_detach(out) : tn_retain(out); /* bug: retain */
        if (keep) {
            outputs[collected++] = keep;
        } else {
            fprintf(stderr, "%s: iteration %ld failed: %s\n", prog, i, tn_last_error_message());
            status = 1;
        }
        tn_release(out);
        lp_region_pop();

        tn_release(x);
    }
    ex_growth_end(&g); /* the list (and, with the bug, every batch's graph) still held */
    if (status == 0 && accuracy(outputs, collected, labels, &acc)) {
        fprintf(stderr, "%s: accuracy failed: %s\n", prog, tn_last_error_message());
        status = 1;
    }
    ex_mode_end(o.mode, prev);

    if (status == 0) {
        printf("%s: %s, mode %s, %ld iters, batch %ld\n", prog,
               o.fixed ? "fixed (collect tn_detach(out))" : "bug (collect out, with its graph)",
               ex_mode_name(o.mode), o.iters, o.batch);
        printf("accuracy %.4f over %ld collected outputs (random labels: about 0.1)\n", acc,
               collected * o.batch);
        ex_growth_print(&g);
    }
    for (long i = 0; i < collected; i++)
        tn_release(outputs[i]); /* with the bug, every batch's graph goes here */
    free(outputs);
    free(labels);
    tn_module_free(net);
    return status;
}
