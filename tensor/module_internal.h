/*
 * Internals of tn_module shared by module.c, modules_basic.c, modules_attention.c and optim.c.
 * Not installed.
 *
 * A module is generic bookkeeping (type, dotted path, training flag, named children, named
 * parameters and buffers) plus a vtable and a per-type `impl` block. Writing a layer:
 *   1. m = tn__module_new(&vtable, sizeof(impl));
 *   2. tn__module_add_param(m, "weight", tensor, false) for each parameter (buffers: true), and
 *      tn__module_add_child(m, "out_proj", child) for each submodule, in PyTorch's registration
 *      order so names and order match its state_dict;
 *   3. keep borrowed pointers to the tensors and children in the impl block for forward.
 * Both add functions take ownership of what they are given, also on error; on error free m and
 * return NULL.
 *
 * Bookkeeping (the struct, names, arrays) uses malloc: it is not tensor memory and stays tiny.
 */
#ifndef GRADPROF_MODULE_INTERNAL_H
#define GRADPROF_MODULE_INTERNAL_H

#include "tensor_internal.h"

typedef struct tn__module_vtable {
    const char *type; /* "Linear" */
    /* The module's computation on x (borrowed); a new reference or NULL with an error set. Runs
     * inside tn_module_forward, so the module path is already the current module. NULL means the
     * module has no generic forward (Embedding). */
    tn_tensor *(*forward)(tn_module *m, tn_tensor *x);
    /* Frees what impl owns beyond itself; may be NULL. impl itself is freed by tn_module_free. */
    void (*free)(tn_module *m);
} tn__module_vtable;

/* One named parameter or buffer. */
typedef struct tn__module_param {
    char *local;       /* "weight" */
    char *full;        /* "encoder.0.weight": the module path + "." + local, or local at "" */
    tn_tensor *tensor; /* owned reference */
    bool buffer;       /* running statistics: never requires grad, not given to optimizers */
} tn__module_param;

struct tn_module {
    const tn__module_vtable *vt;
    char *path; /* "" at an unnamed root; owned */
    bool training;
    tn_module *parent; /* NULL at the root */
    int n_children, cap_children;
    tn_module **children; /* owned */
    char **child_names;   /* owned */
    int n_params, cap_params;
    tn__module_param *params;
    void *impl; /* per-type block, zeroed at creation; owned */
};

/* A new root module (path "", training) with a zeroed impl block of impl_bytes (may be 0).
 * Returns NULL with TN_ENOMEM set. */
tn_module *tn__module_new(const tn__module_vtable *vt, size_t impl_bytes);

/* Registers `t` under `name`; takes ownership of the reference (also on error). Parameters get
 * requires_grad true; buffers false. Returns 0 or a negative TN_E* code. */
int tn__module_add_param(tn_module *m, const char *name, tn_tensor *t, bool buffer);

/* Adds `child` (a root, owned by nobody) under `name` and renames its subtree to
 * m->path + "." + name; takes ownership (also on error, unless the child already has a parent, in
 * which case it is left alone). Returns 0 or a negative TN_E* code. */
int tn__module_add_child(tn_module *m, const char *name, tn_module *child);

/* The index-th parameter entry of m's subtree in named_parameters order (own entries first, then
 * each child's, depth first), or NULL past the end. Borrowed. */
tn__module_param *tn__module_param_entry(const tn_module *m, int index);

/* Makes m the current module (allocation tag and libprof region) until tn__module_leave(saved). */
const char *tn__module_enter(const tn_module *m);
void tn__module_leave(const char *saved);

#endif /* GRADPROF_MODULE_INTERNAL_H */
