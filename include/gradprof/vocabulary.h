/*
 * The event vocabulary: the words every part of gradprof shares. Tagging sources (the tensor
 * library, the PyTorch helper libprof/python/gradprof_torch.py, the interposer) write them, the
 * trace carries them, the tools read them. Each is defined here once; the Python helper holds a
 * copy of the category values and region names that tests/test_vocabulary.py checks against this
 * file.
 */
#ifndef GRADPROF_VOCABULARY_H
#define GRADPROF_VOCABULARY_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What a buffer is. X(ENUM, name, wire value): the name is what traces and reports print; the wire
 * value is the category's number in TAG records of a trace (trace_format.h), fixed forever: a new
 * category takes the next free number.
 */
#define LP_CATEGORY_MAP(X)                                                                         \
    X(PARAMETER, "parameter", 0)             /* model weights and buffers (running statistics) */  \
    X(INPUT, "input", 1)                     /* data fed to the model */                           \
    X(ACTIVATION, "activation", 2)           /* an op's output */                                  \
    X(SAVED, "saved", 3)                     /* an activation kept alive for backward */           \
    X(GRADIENT, "gradient", 4)               /* .grad of leaves, gradients flowing in backward */  \
    X(OPTIMIZER_STATE, "optimizer_state", 5) /* momentum, Adam moments */                          \
    X(AUTOGRAD, "autograd", 6)               /* graph nodes and their metadata */                  \
    X(TEMPORARY, "temporary", 7)             /* scratch an op frees before it returns */           \
    X(OTHER, "other", 8)                     /* untagged raw allocation */

typedef enum lp_category {
#define LP__CATEGORY_ENUM(e, s, v) LP_CAT_##e = v,
    LP_CATEGORY_MAP(LP__CATEGORY_ENUM)
#undef LP__CATEGORY_ENUM
        LP_CAT_COUNT
} lp_category;

/*
 * Graph memory: what exists only because autograd recorded a graph (tensors saved for backward,
 * graph nodes, gradients). It is what inference should never hold; every detector, gate and
 * "graph bytes" figure counts exactly these categories.
 */
static inline bool lp_category_is_graph(lp_category c)
{
    return c == LP_CAT_SAVED || c == LP_CAT_AUTOGRAD || c == LP_CAT_GRADIENT;
}

/*
 * The graph itself: what a recorded graph keeps alive until it is released (tensors saved for
 * backward and the nodes). Gradients are graph memory but not part of a graph: they are what a
 * backward produced, and a parameter's .grad outlives every graph. The detectors that ask "is a
 * graph still alive?" (an inference region's outputs escaping with their graph, a graph built in
 * inference) count these.
 */
static inline bool lp_category_is_graph_structure(lp_category c)
{
    return c == LP_CAT_SAVED || c == LP_CAT_AUTOGRAD;
}

/*
 * Region names with a meaning: a tagging source pushes one around each grad-mode scope the program
 * enters, and the analysis knows grad is off inside NO_GRAD and INFERENCE_MODE, back on inside
 * ENABLE_GRAD and INFERENCE_MODE_OFF, and that graph memory inside BACKWARD is expected.
 * INFERENCE is the default name of a region the program marks as inference (where grad should be
 * off). Any other name is a user label or a module path.
 */
#define LP_REGION_NO_GRAD "no_grad"
#define LP_REGION_ENABLE_GRAD "enable_grad"
#define LP_REGION_INFERENCE_MODE "inference_mode"
#define LP_REGION_INFERENCE_MODE_OFF "inference_mode(false)"
#define LP_REGION_BACKWARD "backward"
#define LP_REGION_INFERENCE "inference"

/* Notes (lp_note) the recorder writes itself: an allocation failed (out of memory); the value
 * is the bytes asked, in decimal. */
#define LP_NOTE_ALLOC_FAILED "alloc_failed"

/* Recorder options (GRADPROF_* variables, `gradprof run` options): defaults and limits. */
#define LP_DEFAULT_OUTPUT "gradprof.%p.gptrace"
#define LP_DEFAULT_STACK_DEPTH 32
#define LP_MAX_STACK_DEPTH 256
/* The most frames a recorded stack holds: the depth, and for a Python program up to half as many
 * Python frames beyond it (those the depth did not reach). */
#define LP_MAX_STACK_FRAMES (LP_MAX_STACK_DEPTH + LP_MAX_STACK_DEPTH / 2)
#define LP_DEFAULT_FLUSH_MS 20
#define LP_MIN_FLUSH_MS 1
#define LP_MAX_FLUSH_MS 10000

#ifdef __cplusplus
}
#endif

#endif /* GRADPROF_VOCABULARY_H */
