/*
 * leak_cached_activation — a custom layer that caches its last output with its history.
 *
 * Streaming inference (a video, a sensor feed): a backbone embeds each frame, a custom smoothing
 * layer blends the embedding with its previous output to steady the predictions, and a head
 * classifies:
 *
 *     class Smooth(nn.Module):                 # y_t = a * h_t + (1 - a) * y_{t-1}
 *         def forward(self, h):
 *             y = h if self.cache is None else self.alpha * h + (1 - self.alpha) * self.cache
 *             self.cache = y                   # bug: the cache keeps y's graph
 *             return y
 *
 * With grad on, the cached output has history: its node points at this frame's graph (the
 * backbone's saved activations) and, through (1 - a) * cache, at the previous cached output's
 * node, so the graphs of all frames chain and stay alive -- memory grows by one graph per frame,
 * exactly the un-detached hidden state of an RNN. Fixed: self.cache = y.detach() (tn_detach), which
 * shares y's storage but not its graph.
 *
 * Profiling marks (what gradprof's detectors key on): lp_mark("iter <i>") starts each iteration
 * and the evaluation work of each one runs inside lp_region_push("inference") ... lp_region_pop().
 * With the bug, gradprof finds live memory growing across the marks, a graph leaving each
 * "inference" region (in the cache) and grad left on inside it; --fixed removes the first two
 * (grad is still on, so each frame still builds a graph and frees it: add --no-grad for none).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage[] =
    "usage: leak_cached_activation [--fixed] [--grad | --no-grad | --inference-mode]\n"
    "                              [--iters N] [--batch B]\n"
    "\n"
    "Streams N frames for B streams through a backbone MLP (64 -> 256 -> 256), a custom smoothing\n"
    "layer that caches its last output, y_t = 0.5 h_t + 0.5 y_{t-1}, and a Linear head to 10\n"
    "classes, with grad on: the cache keeps its graph, which chains every frame's graph. Prints\n"
    "the last frame's predictions, then live bytes per category at the first and last iteration\n"
    "and after the loop, and their growth.\n"
    "\n"
    "  --fixed            cache tn_detach(output): the cache holds the values, not\n"
    "                     the graph\n" EX_LEAK_USAGE_OPTIONS;

/* The custom layer: temporal smoothing with a cache of its last output. */
typedef struct smooth_layer {
    float alpha;
    bool detach_cache; /* the fix */
    tn_tensor *cache;  /* y_{t-1} [B, D], owned; NULL before the first frame */
} smooth_layer;

/* h [B, D] -> y [B, D] = alpha * h + (1 - alpha) * cache (y = h on the first frame); caches y. */
static tn_tensor *smooth_forward(smooth_layer *s, tn_tensor *h)
{
    tn_tensor *y;
    if (!s->cache) {
        y = tn_retain(h);
    } else {
        tn_tensor *now = tn_mul_scalar(h, s->alpha);
        tn_tensor *before = now ? tn_mul_scalar(s->cache, 1.0f - s->alpha) : NULL;
        y = before ? tn_add(now, before) : NULL; /* its node points at the old cache's node */
        tn_release(before);
        tn_release(now);
    }
    if (!y)
        return NULL;
    tn_tensor *keep = s->detach_cache ? tn_detach(y) : tn_retain(y); /* the bug: tn_retain */
    if (!keep) {
        tn_release(y);
        return NULL;
    }
    tn_release(s->cache);
    s->cache = keep;
    return y;
}

int main(int argc, char **argv)
{
    const char *prog = "leak_cached_activation";
    ex_leak_options o;
    int rc = ex_leak_parse(prog, usage, argc, argv, &o);
    if (rc)
        return ex_exit_code(rc);

    tn_manual_seed(0);
    uint64_t rng = 1;
    /* backbone: Linear, ReLU, Linear, ReLU (64 -> 256 -> 256); head: Linear(256, 10) */
    tn_module *backbone = ex_mlp_new(EX_LEAK_IN, EX_LEAK_HIDDEN, EX_LEAK_HIDDEN, 2, "backbone");
    tn_module *head = tn_linear_new(EX_LEAK_HIDDEN, EX_LEAK_CLASSES, true);
    int64_t *predicted = calloc((size_t)o.batch, sizeof *predicted);
    if (!backbone || !head || !predicted || tn_sequential_append(backbone, tn_relu_new()) ||
        tn_module_set_name(head, "head")) {
        fprintf(stderr, "%s: setup failed: %s\n", prog,
                predicted ? tn_last_error_message() : "out of memory");
        tn_module_free(head);
        tn_module_free(backbone);
        free(predicted);
        return 1;
    }
    tn_module_train(backbone, false);
    tn_module_train(head, false);
    smooth_layer smooth = {.alpha = 0.5f, .detach_cache = o.fixed, .cache = NULL};

    ex_growth g = {0};
    int status = 0;
    lp_counters_reset_peak();
    tn_grad_mode prev = ex_mode_begin(o.mode);
    for (long i = 0; i < o.iters && status == 0; i++) {
        ex_growth_mark(&g, i); /* lp_mark("iter <i>") */
        /* frame i of each of the B streams */
        tn_tensor *frame = ex_leak_batch(o.batch, NULL, &rng);

        lp_region_push("inference");
        tn_tensor *h = frame ? tn_module_forward(backbone, frame) : NULL;
        tn_tensor *y = h ? smooth_forward(&smooth, h) : NULL;
        tn_tensor *logits = y ? tn_module_forward(head, y) : NULL;
        if (logits) {
            for (int64_t b = 0; b < o.batch; b++)
                predicted[b] = ex_argmax_row(logits, b);
        } else {
            fprintf(stderr, "%s: frame %ld failed: %s\n", prog, i, tn_last_error_message());
            status = 1;
        }
        tn_release(logits);
        tn_release(y);
        tn_release(h);
        lp_region_pop();

        tn_release(frame);
    }
    ex_growth_end(&g); /* the cache (and, with the bug, every frame's graph) still held */
    ex_mode_end(o.mode, prev);

    if (status == 0) {
        printf("%s: %s, mode %s, %ld frames, %ld streams\n", prog,
               o.fixed ? "fixed (cache = tn_detach(y))" : "bug (cache = y, with its graph)",
               ex_mode_name(o.mode), o.iters, o.batch);
        printf("last frame's predicted classes:");
        for (int64_t b = 0; b < o.batch && b < 16; b++)
            printf(" %lld", (long long)predicted[b]);
        printf("%s\n", o.batch > 16 ? " ..." : "");
        ex_growth_print(&g);
    }
    tn_release(smooth.cache); /* with the bug, the chain of every frame's graph goes here */
    tn_module_free(head);
    tn_module_free(backbone);
    free(predicted);
    return status;
}
