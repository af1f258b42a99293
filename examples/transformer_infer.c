/*
 * transformer_infer — a Transformer encoder (token + learned position embeddings, then N
 * TransformerEncoderLayers: self-attention, layer norm, ReLU MLP, as torch.nn builds them) in eval
 * mode on random token ids, under a chosen grad mode. Prints the time per forward and, per memory
 * category, the bytes held while the last output is alive and the peak over the run.
 *
 * With grad on, every layer saves its attention weights [B, H, T, T] (the softmax output, kept for
 * softmax's and the second matmul's backward), q, k and v, both layer norms' inputs and statistics
 * and the MLP's hidden activation [B, T, F]: graph memory grows with layers x T^2 for attention and
 * layers x T x F for the MLP, while the output itself is only [B, T, D].
 */
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage[] =
    "usage: transformer_infer [--grad | --no-grad | --inference-mode] [--layers L] [--dim D]\n"
    "                         [--heads H] [--ff F] [--seq T] [--vocab V] [--batch B]\n"
    "                         [--iters N]\n"
    "\n"
    "Embeds B random sequences of T token ids (token + learned position embeddings), runs L\n"
    "Transformer encoder layers (self-attention with H heads, layer norm, a ReLU MLP of width F)\n"
    "in eval mode N times, and prints the median time per forward and live/peak bytes per memory\n"
    "category. 'live' is measured while the last output [B, T, D] is still held.\n"
    "\n"
    "  --grad             grad enabled (the default, as in a script that forgot no_grad)\n"
    "  --no-grad          each forward under no_grad\n"
    "  --inference-mode   each forward under inference_mode\n"
    "  --layers L         encoder layers (default 2)\n"
    "  --dim D            model width, a multiple of H (default 64)\n"
    "  --heads H          attention heads (default 4)\n"
    "  --ff F             MLP hidden width (default 4 x D)\n"
    "  --seq T            tokens per sequence (default 32)\n"
    "  --vocab V          vocabulary size (default 1000)\n"
    "  --batch B          sequences per batch (default 4)\n"
    "  --iters N          forwards to run (default 5)\n";

typedef struct model {
    tn_module *embed;     /* Embedding(V, D), "embed" */
    tn_module *pos_embed; /* Embedding(T, D), "pos_embed" */
    tn_module *encoder;   /* Sequential of L TransformerEncoderLayers, "encoder" */
    int64_t *ids;         /* [B, T] token ids */
    int64_t *positions;   /* [T]: 0, 1, ..., T-1 */
    int64_t batch, seq;
} model;

/* ids [B, T] -> embed(ids) + pos_embed(0..T-1) [B, T, D] -> encoder -> [B, T, D]. */
static tn_tensor *forward(void *ctx)
{
    model *m = ctx;
    tn_tensor *tok = tn_embedding_forward(m->embed, m->ids, 2, (const int64_t[]){m->batch, m->seq});
    tn_tensor *pos = tok ? tn_embedding_forward(m->pos_embed, m->positions, 1, &m->seq) : NULL;
    tn_tensor *x = pos ? tn_add(tok, pos) : NULL; /* [B, T, D] + [T, D] broadcasts */
    tn_release(pos);
    tn_release(tok);
    tn_tensor *y = x ? tn_module_forward(m->encoder, x) : NULL;
    tn_release(x);
    return y;
}

static void model_free(model *m)
{
    tn_module_free(m->embed);
    tn_module_free(m->pos_embed);
    tn_module_free(m->encoder);
    free(m->ids);
    free(m->positions);
}

static int model_init(model *m, long layers, long dim, long heads, long ff, long seq, long vocab,
                      long batch)
{
    *m = (model){.batch = batch, .seq = seq};
    m->ids = malloc((size_t)(batch * seq) * sizeof *m->ids);
    m->positions = malloc((size_t)seq * sizeof *m->positions);
    if (!m->ids || !m->positions)
        return -1;
    uint64_t rng = 1;
    ex_random_ids(m->ids, (size_t)(batch * seq), vocab, &rng);
    for (long t = 0; t < seq; t++)
        m->positions[t] = t;
    if (!(m->embed = tn_embedding_new(vocab, dim)) || tn_module_set_name(m->embed, "embed") ||
        !(m->pos_embed = tn_embedding_new(seq, dim)) ||
        tn_module_set_name(m->pos_embed, "pos_embed") || !(m->encoder = tn_sequential_new()))
        return -1;
    for (long l = 0; l < layers; l++)
        if (tn_sequential_append(m->encoder,
                                 tn_transformer_encoder_layer_new(dim, heads, ff, 0.1f, false)))
            return -1;
    if (tn_module_set_name(m->encoder, "encoder"))
        return -1;
    tn_module_train(m->embed, false);
    tn_module_train(m->pos_embed, false);
    tn_module_train(m->encoder, false);
    return 0;
}

int main(int argc, char **argv)
{
    int mode = EX_MODE_GRAD;
    long layers = 2, dim = 64, heads = 4, ff = 0, seq = 32, vocab = 1000, batch = 4, iters = 5;
    const ex_opt opts[] = {
        EX_MODE_OPTS(&mode),
        {"--layers", EX_OPT_COUNT, &layers, .min = 1, .max = 1000},
        {"--dim", EX_OPT_COUNT, &dim, .min = 1, .max = 65536},
        {"--heads", EX_OPT_COUNT, &heads, .min = 1, .max = 1024},
        {"--ff", EX_OPT_COUNT, &ff, .min = 1, .max = 262144},
        {"--seq", EX_OPT_COUNT, &seq, .min = 1, .max = 65536},
        {"--vocab", EX_OPT_COUNT, &vocab, .min = 1, .max = 10000000},
        {"--batch", EX_OPT_COUNT, &batch, .min = 1, .max = 65536},
        {"--iters", EX_OPT_COUNT, &iters, .min = 1, .max = 1000000},
    };
    const char *prog = "transformer_infer";
    int rc = ex_parse_options(prog, usage, argc, argv, opts, sizeof opts / sizeof *opts);
    if (rc)
        return ex_exit_code(rc);
    if (dim % heads) {
        fprintf(stderr, "%s: --heads: %ld does not divide --dim %ld\n", prog, heads, dim);
        return 2;
    }
    if (!ff)
        ff = 4 * dim;

    tn_manual_seed(0);
    model m;
    if (model_init(&m, layers, dim, heads, ff, seq, vocab, batch)) {
        fprintf(stderr, "%s: setup failed: %s\n", prog,
                m.ids && m.positions ? tn_last_error_message() : "out of memory");
        model_free(&m);
        return 1;
    }

    ex_infer_result r;
    int status = ex_infer_run(prog, mode, iters, forward, &m, &r);
    if (status == 0) {
        printf("%s: %ld layers, dim %ld, %ld heads, ff %ld, batch %ld x seq %ld, vocab %ld, %ld "
               "iters, mode %s\n",
               prog, layers, dim, heads, ff, batch, seq, vocab, iters, ex_mode_name(mode));
        printf("time per forward: %.3f ms (median)\n", r.median_ms);
        ex_print_counters(&r.counters);
    }
    model_free(&m);
    return status;
}
