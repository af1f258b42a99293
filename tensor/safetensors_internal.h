/*
 * Reading whole safetensors files into loose tensors, for tests and tools that need more than
 * tn_module_load_safetensors (reference data, inputs). Internal; not installed. Uses the same
 * reader and validation as the module loader (tensor/safetensors.c).
 */
#ifndef GRADPROF_TENSOR_SAFETENSORS_INTERNAL_H
#define GRADPROF_TENSOR_SAFETENSORS_INTERNAL_H

#include "tensor_internal.h"

/* The tensors of one file, sorted by name. Each is a new leaf (requires_grad false) named after
 * its key (tn_name). The list owns one reference to each. */
typedef struct tn__tensor_list {
    int count;
    tn_tensor **tensors;
} tn__tensor_list;

/* Reads every tensor of the safetensors file at `path` (all must be F32) into new tensors of
 * `category`. Returns 0 and sets *out, or a negative TN_E* code with the error naming the path
 * (the same checks and messages as tn_module_load_safetensors). */
int tn__safetensors_read(const char *path, lp_category category, tn__tensor_list **out);

/* The tensor named `name` (borrowed), or NULL. */
tn_tensor *tn__tensor_list_get(const tn__tensor_list *list, const char *name);

/* Releases the tensors and frees the list; NULL is a no-op. */
void tn__tensor_list_free(tn__tensor_list *list);

#endif /* GRADPROF_TENSOR_SAFETENSORS_INTERNAL_H */
