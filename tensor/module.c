/*
 * The generic module: dotted paths, named children, named parameters and buffers, train/eval,
 * and the forward wrapper that tags every allocation with the module path.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module_internal.h"

static char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* prefix + "." + name, or name when prefix is "". A new string, NULL on allocation failure. */
static char *join_path(const char *prefix, const char *name)
{
    if (prefix[0] == '\0')
        return str_dup(name);
    size_t a = strlen(prefix), b = strlen(name);
    char *s = malloc(a + 1 + b + 1);
    if (!s)
        return NULL;
    memcpy(s, prefix, a);
    s[a] = '.';
    memcpy(s + a + 1, name, b + 1);
    return s;
}

tn_module *tn__module_new(const tn__module_vtable *vt, size_t impl_bytes)
{
    tn_module *m = calloc(1, sizeof(*m));
    if (!m)
        return TN__FAIL_NULL(TN_ENOMEM, "%s: out of memory creating the module", vt->type);
    m->vt = vt;
    m->training = true;
    m->path = str_dup("");
    m->impl = impl_bytes ? calloc(1, impl_bytes) : NULL;
    if (!m->path || (impl_bytes && !m->impl)) {
        free(m->path);
        free(m->impl);
        free(m);
        return TN__FAIL_NULL(TN_ENOMEM, "%s: out of memory creating the module", vt->type);
    }
    return m;
}

/* Sets m's path to `path` (taking ownership of the string) and rebuilds every name below it.
 * On allocation failure the old names stay where they could not be rebuilt; returns TN_ENOMEM. */
static int module_set_path(tn_module *m, char *path)
{
    free(m->path);
    m->path = path;
    int rc = 0;
    for (int i = 0; i < m->n_params; i++) {
        char *full = join_path(m->path, m->params[i].local);
        if (!full) {
            rc = TN_ENOMEM;
            continue;
        }
        free(m->params[i].full);
        m->params[i].full = full;
    }
    for (int i = 0; i < m->n_children; i++) {
        char *child_path = join_path(m->path, m->child_names[i]);
        if (!child_path) {
            rc = TN_ENOMEM;
            continue;
        }
        int crc = module_set_path(m->children[i], child_path);
        if (crc < 0)
            rc = crc;
    }
    if (rc < 0)
        tn__error(TN_ENOMEM, "module: out of memory renaming '%s'", m->path);
    return rc;
}

int tn__module_add_param(tn_module *m, const char *name, tn_tensor *t, bool buffer)
{
    if (!t) {
        /* The tensor's creation failed and already set the error. */
        return tn_last_error() < 0 ? tn_last_error() : tn__error(TN_EINVAL, "module: NULL tensor");
    }
    if (m->n_params == m->cap_params) {
        int cap = m->cap_params ? 2 * m->cap_params : 4;
        tn__module_param *p = realloc(m->params, (size_t)cap * sizeof(*p));
        if (!p) {
            tn_release(t);
            return tn__error(TN_ENOMEM, "%s: out of memory registering '%s'", m->vt->type, name);
        }
        m->params = p;
        m->cap_params = cap;
    }
    tn__module_param *e = &m->params[m->n_params];
    e->local = str_dup(name);
    e->full = join_path(m->path, name);
    e->tensor = t;
    e->buffer = buffer;
    if (!e->local || !e->full) {
        free(e->local);
        free(e->full);
        tn_release(t);
        return tn__error(TN_ENOMEM, "%s: out of memory registering '%s'", m->vt->type, name);
    }
    int rc = tn_set_requires_grad(t, !buffer);
    if (rc < 0) {
        free(e->local);
        free(e->full);
        tn_release(t);
        return rc;
    }
    m->n_params++;
    return 0;
}

int tn__module_add_child(tn_module *m, const char *name, tn_module *child)
{
    if (!child)
        return tn_last_error() < 0 ? tn_last_error()
                                   : tn__error(TN_EINVAL, "%s: NULL child '%s'", m->vt->type, name);
    if (child->parent)
        return tn__error(TN_EINVAL, "%s: child '%s' (%s) already belongs to module '%s'",
                         m->vt->type, name, child->vt->type, child->parent->path);
    for (const tn_module *a = m; a; a = a->parent) {
        if (a == child) {
            /* Adding an ancestor would make a cycle; it is owned above us, so it is not freed. */
            return tn__error(TN_EINVAL, "%s: cannot add module '%s' as a child of itself",
                             m->vt->type, child->path);
        }
    }
    if (m->n_children == m->cap_children) {
        int cap = m->cap_children ? 2 * m->cap_children : 4;
        tn_module **c = realloc(m->children, (size_t)cap * sizeof(*c));
        if (c)
            m->children = c;
        char **n = c ? realloc(m->child_names, (size_t)cap * sizeof(*n)) : NULL;
        if (n)
            m->child_names = n;
        if (!c || !n) {
            tn_module_free(child);
            return tn__error(TN_ENOMEM, "%s: out of memory adding child '%s'", m->vt->type, name);
        }
        m->cap_children = cap;
    }
    char *local = str_dup(name);
    char *path = join_path(m->path, name);
    if (!local || !path) {
        free(local);
        free(path);
        tn_module_free(child);
        return tn__error(TN_ENOMEM, "%s: out of memory adding child '%s'", m->vt->type, name);
    }
    m->children[m->n_children] = child;
    m->child_names[m->n_children] = local;
    m->n_children++;
    child->parent = m;
    return module_set_path(child, path);
}

void tn_module_free(tn_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_children; i++) {
        m->children[i]->parent = NULL;
        tn_module_free(m->children[i]);
        free(m->child_names[i]);
    }
    free(m->children);
    free(m->child_names);
    for (int i = 0; i < m->n_params; i++) {
        tn_release(m->params[i].tensor);
        free(m->params[i].local);
        free(m->params[i].full);
    }
    free(m->params);
    if (m->vt->free)
        m->vt->free(m);
    free(m->impl);
    free(m->path);
    free(m);
}

/* ---- forward -------------------------------------------------------------------------------- */

const char *tn__module_enter(const tn_module *m)
{
    tn__context *ctx = tn__ctx();
    const char *saved = ctx->module;
    ctx->module = m->path;
    lp_module_push(m->path);
    return saved;
}

void tn__module_leave(const char *saved)
{
    lp_region_pop();
    tn__ctx()->module = saved;
}

tn_tensor *tn_module_forward(tn_module *m, tn_tensor *x)
{
    if (!m)
        return TN__FAIL_NULL(TN_EINVAL, "module_forward: module is NULL");
    if (!m->vt->forward)
        return TN__FAIL_NULL(
            TN_EINVAL, "module_forward: %s '%s' has no generic forward%s", m->vt->type, m->path,
            strcmp(m->vt->type, "Embedding") == 0 ? "; use tn_embedding_forward" : "");
    const char *saved = tn__module_enter(m);
    tn_tensor *out = m->vt->forward(m, x);
    tn__module_leave(saved);
    return out;
}

/* ---- queries -------------------------------------------------------------------------------- */

void tn_module_train(tn_module *m, bool training)
{
    if (!m)
        return;
    m->training = training;
    for (int i = 0; i < m->n_children; i++)
        tn_module_train(m->children[i], training);
}

bool tn_module_is_training(const tn_module *m)
{
    return m ? m->training : false;
}

const char *tn_module_type(const tn_module *m)
{
    return m ? m->vt->type : NULL;
}

const char *tn_module_path(const tn_module *m)
{
    return m ? m->path : NULL;
}

int tn_module_set_name(tn_module *m, const char *name)
{
    if (!m || !name)
        return tn__error(TN_EINVAL, "module_set_name: %s is NULL", m ? "name" : "module");
    if (m->parent)
        return tn__error(TN_EINVAL,
                         "module_set_name: '%s' is a child of '%s'; only a root can be renamed",
                         m->path, m->parent->path);
    char *path = str_dup(name);
    if (!path)
        return tn__error(TN_ENOMEM, "module_set_name: out of memory");
    return module_set_path(m, path);
}

tn_module *tn_module_child(const tn_module *m, int index)
{
    if (!m || index < 0 || index >= m->n_children)
        return NULL;
    return m->children[index];
}

static int subtree_param_count(const tn_module *m)
{
    int n = m->n_params;
    for (int i = 0; i < m->n_children; i++)
        n += subtree_param_count(m->children[i]);
    return n;
}

int tn_module_param_count(const tn_module *m)
{
    return m ? subtree_param_count(m) : 0;
}

/* Finds the *index-th entry of m's subtree, counting *index down by what it passes. */
static tn__module_param *find_entry(const tn_module *m, int *index)
{
    if (*index < m->n_params)
        return &m->params[*index];
    *index -= m->n_params;
    for (int i = 0; i < m->n_children; i++) {
        tn__module_param *e = find_entry(m->children[i], index);
        if (e)
            return e;
    }
    return NULL;
}

tn__module_param *tn__module_param_entry(const tn_module *m, int index)
{
    if (!m || index < 0)
        return NULL;
    return find_entry(m, &index);
}

tn_tensor *tn_module_param(const tn_module *m, int index, const char **name)
{
    tn__module_param *e = tn__module_param_entry(m, index);
    if (name)
        *name = e ? e->full : NULL;
    if (!e) {
        if (!m)
            return TN__FAIL_NULL(TN_EINVAL, "module_param: module is NULL");
        return TN__FAIL_NULL(TN_ENOTFOUND, "module_param: index %d out of range [0, %d) of '%s'",
                             index, tn_module_param_count(m), m->path);
    }
    return e->tensor;
}

/* The entry whose full name is `name`, or NULL. */
static tn__module_param *find_by_full_name(const tn_module *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].full, name) == 0)
            return &m->params[i];
    for (int i = 0; i < m->n_children; i++) {
        tn__module_param *e = find_by_full_name(m->children[i], name);
        if (e)
            return e;
    }
    return NULL;
}

/* Looks `name` up as a full name first, then relative to m's path ("0.weight" under a root
 * renamed "encoder" finds "encoder.0.weight"), so files written from an unnamed PyTorch module
 * load by name either way. */
tn_tensor *tn_module_param_by_name(const tn_module *m, const char *name)
{
    if (!m || !name)
        return TN__FAIL_NULL(TN_EINVAL, "module_param_by_name: %s is NULL", m ? "name" : "module");
    tn__module_param *e = find_by_full_name(m, name);
    if (!e && m->path[0] != '\0') {
        char *full = join_path(m->path, name);
        if (!full)
            return TN__FAIL_NULL(TN_ENOMEM, "module_param_by_name: out of memory");
        e = find_by_full_name(m, full);
        free(full);
    }
    if (!e)
        return TN__FAIL_NULL(TN_ENOTFOUND, "module_param_by_name: %s '%s' has no parameter '%s'",
                             m->vt->type, m->path, name);
    return e->tensor;
}

void tn_module_requires_grad(tn_module *m, bool requires_grad)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_params; i++)
        if (!m->params[i].buffer)
            tn_set_requires_grad(m->params[i].tensor, requires_grad);
    for (int i = 0; i < m->n_children; i++)
        tn_module_requires_grad(m->children[i], requires_grad);
}

void tn_module_zero_grad(tn_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_params; i++)
        tn_zero_grad(m->params[i].tensor);
    for (int i = 0; i < m->n_children; i++)
        tn_module_zero_grad(m->children[i]);
}

size_t tn_module_param_bytes(const tn_module *m)
{
    if (!m)
        return 0;
    size_t bytes = 0;
    for (int i = 0; i < m->n_params; i++)
        bytes += (size_t)tn_numel(m->params[i].tensor) * sizeof(float);
    for (int i = 0; i < m->n_children; i++)
        bytes += tn_module_param_bytes(m->children[i]);
    return bytes;
}
