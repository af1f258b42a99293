/*
 * Reverse-mode autograd: graph nodes, the one function through which tensors are saved for
 * backward, and the engine (Kahn's algorithm over the reachable graph, later nodes first, as
 * PyTorch's sequence-number priority).
 */
#include <stdlib.h>
#include <string.h>

#include "tensor_internal.h"

static atomic_uint_fast64_t tn__node_seq;
static atomic_uint_fast64_t tn__backward_epoch;

static int tn__accumulate_backward(tn_node *node, tn_tensor *g, tn_tensor **gin);
static const tn_node_kind tn__accumulate_kind = {"accumulate_grad", "accumulate_grad",
                                                 tn__accumulate_backward};

/* ---- nodes ---------------------------------------------------------------------------------- */

static tn_node *tn__node_alloc(const tn_node_kind *kind, int n_inputs)
{
    const char *module = tn__ctx()->module ? tn__ctx()->module : "";
    size_t module_len = strlen(module) + 1;
    size_t inputs_bytes = (size_t)n_inputs * sizeof(tn_node_input);
    size_t bytes = sizeof(tn_node) + inputs_bytes + module_len;
    tn_node *node = tn__alloc(bytes, LP_CAT_AUTOGRAD, kind->name, NULL);
    if (!node)
        return NULL;
    memset(node, 0, sizeof(tn_node) + inputs_bytes);
    char *module_copy = (char *)node + sizeof(tn_node) + inputs_bytes;
    memcpy(module_copy, module, module_len);
    node->kind = kind;
    node->module = module_copy;
    node->alloc_bytes = bytes;
    node->n_inputs = n_inputs;
    atomic_init(&node->refcount, 1);
    node->seq = atomic_fetch_add(&tn__node_seq, 1);
    return node;
}

/* The AccumulateGrad node of a leaf that requires grad: shared while it lives (new reference). */
static tn_node *tn__grad_accumulator(tn_tensor *leaf)
{
    if (leaf->grad_accumulator) {
        atomic_fetch_add(&leaf->grad_accumulator->refcount, 1);
        return leaf->grad_accumulator;
    }
    tn_node *node = tn__node_alloc(&tn__accumulate_kind, 0);
    if (!node)
        return NULL;
    node->leaf = tn_retain(leaf);
    leaf->grad_accumulator = node;
    return node;
}

tn_node *tn__node_new(const tn_node_kind *kind, tn_tensor *out, int n, tn_tensor *const *inputs)
{
    tn_node *node = tn__node_alloc(kind, n);
    if (!node)
        return NULL;
    for (int i = 0; i < n; i++) {
        tn_tensor *in = inputs[i];
        if (!in)
            continue;
        node->inputs[i].ndim = in->ndim;
        memcpy(node->inputs[i].shape, in->shape, sizeof in->shape);
        if (!in->requires_grad)
            continue;
        if (in->grad_fn) {
            atomic_fetch_add(&in->grad_fn->refcount, 1);
            node->inputs[i].next = in->grad_fn;
        } else if (!(node->inputs[i].next = tn__grad_accumulator(in))) {
            tn__node_release(node);
            return NULL;
        }
    }
    tn__node_release(out->grad_fn);
    out->grad_fn = node;
    out->requires_grad = true;
    return node;
}

void *tn__node_extra(tn_node *node, size_t bytes)
{
    if (node->extra) {
        tn__error(TN_EINVAL, "%s: node extra buffer allocated twice", node->kind->name);
        return NULL;
    }
    node->extra = tn__alloc(bytes, LP_CAT_AUTOGRAD, node->kind->name, NULL);
    if (!node->extra)
        return NULL;
    memset(node->extra, 0, bytes);
    node->extra_bytes = bytes;
    return node->extra;
}

bool tn__input_needs_grad(const tn_node *node, int i)
{
    return i >= 0 && i < node->n_inputs && node->inputs[i].next != NULL;
}

/* ---- saving for backward -------------------------------------------------------------------- */

/* A saved storage's tag: the op that produced it and the module of the node that saves it (the
 * two questions "what is this tensor?" and "who keeps it?"), with its shape. */
static void tn__saved_retag(tn_node *node, const tn_saved *slot, lp_category from, lp_category to)
{
    tn_storage *s = slot->storage;
    char detail[96];
    tn__shape_fmt(slot->ndim, slot->shape, detail, sizeof detail);
    lp_tag tag = {.category = to, .op = slot->made_by, .module = node->module,
                  .detail = detail, .grad_enabled = tn_is_grad_enabled()};
    lp_retag(s->data, s->nbytes, LP_DEVICE_HOST, from, &tag);
    s->category = to;
}

int tn__save(tn_node *node, tn_tensor *t)
{
    char buf[96];
    if (!t)
        return tn__error(TN_EINVAL, "%s: saving a NULL tensor for backward", node->kind->name);
    if (t->storage->inference)
        return tn__error(TN_EINFERENCE,
                         "%s: cannot save inference tensor %s for backward (it was created under "
                         "inference_mode; make it outside inference mode to use it in autograd)",
                         node->kind->name, tn_shape_str(t, buf, sizeof buf));
    if (node->n_saved >= TN_MAX_SAVED)
        return tn__error(TN_EINVAL, "%s: more than %d tensors saved for backward",
                         node->kind->name, TN_MAX_SAVED);
    tn_saved *slot = &node->saved[node->n_saved];
    slot->storage = t->storage;
    slot->made_by = t->grad_fn ? t->grad_fn->kind->name : "leaf";
    tn__storage_retain(t->storage);
    slot->ndim = t->ndim;
    memcpy(slot->shape, t->shape, sizeof t->shape);
    memcpy(slot->strides, t->strides, sizeof t->strides);
    slot->offset = t->offset;
    slot->version = t->storage->version;
    if (t->storage->save_count++ == 0 && t->storage->category == LP_CAT_ACTIVATION)
        tn__saved_retag(node, slot, LP_CAT_ACTIVATION, LP_CAT_SAVED);
    return node->n_saved++;
}

tn_tensor *tn__saved(tn_node *node, int i)
{
    if (node->saved_released)
        return TN__FAIL_NULL(TN_EGRAD,
                             "%s: trying to backward through the graph a second time (saved "
                             "tensors are freed by backward; pass retain_graph=true to the first "
                             "backward if you need a second)",
                             node->kind->name);
    if (i < 0 || i >= node->n_saved)
        return TN__FAIL_NULL(TN_EINVAL, "%s: no saved tensor %d", node->kind->name, i);
    tn_saved *slot = &node->saved[i];
    if (slot->storage->version != slot->version) {
        char buf[96];
        return TN__FAIL_NULL(TN_EVERSION,
                             "%s: one of the variables needed for gradient computation has been "
                             "modified by an in-place operation: tensor %s saved by %s is at "
                             "version %lu; expected version %lu",
                             node->kind->name,
                             tn__shape_fmt(slot->ndim, slot->shape, buf, sizeof buf),
                             node->kind->name, (unsigned long)slot->storage->version,
                             (unsigned long)slot->version);
    }
    return tn__tensor_wrap(slot->storage, slot->ndim, slot->shape, slot->strides, slot->offset);
}

/* Lets go of every saved tensor; a storage no other node keeps returns to its former category. */
static void tn__release_saved(tn_node *node)
{
    if (node->saved_released)
        return;
    node->saved_released = true;
    for (int i = 0; i < node->n_saved; i++) {
        tn_saved *slot = &node->saved[i];
        tn_storage *s = slot->storage;
        if (--s->save_count == 0 && s->category == LP_CAT_SAVED)
            tn__saved_retag(node, slot, LP_CAT_SAVED, s->unsaved_category);
        tn__storage_release(s);
        slot->storage = NULL;
    }
}

static void tn__node_destroy(tn_node *node)
{
    tn__release_saved(node);
    tn__free(node->extra, node->extra_bytes, LP_CAT_AUTOGRAD);
    if (node->leaf) {
        node->leaf->grad_accumulator = NULL;
        tn_release(node->leaf);
    }
    tn_release(node->pending);
    tn__free(node, node->alloc_bytes, LP_CAT_AUTOGRAD);
}

void tn__node_release(tn_node *node)
{
    /* Iterative, so that releasing a long chain (a loss accumulated over many iterations) cannot
     * overflow the stack. */
    tn_node *local[64];
    tn_node **stack = local;
    size_t cap = 64, top = 0;
    if (node)
        stack[top++] = node;
    while (top > 0) {
        tn_node *n = stack[--top];
        if (atomic_fetch_sub(&n->refcount, 1) != 1)
            continue;
        for (int i = 0; i < n->n_inputs; i++) {
            if (!n->inputs[i].next)
                continue;
            if (top == cap) {
                tn_node **bigger = malloc(2 * cap * sizeof *bigger);
                if (!bigger) { /* cannot grow: fall back to recursion for this edge */
                    tn__node_release(n->inputs[i].next);
                    continue;
                }
                memcpy(bigger, stack, top * sizeof *bigger);
                if (stack != local)
                    free(stack);
                stack = bigger;
                cap *= 2;
            }
            stack[top++] = n->inputs[i].next;
        }
        tn__node_destroy(n);
    }
    if (stack != local)
        free(stack);
}

/* ---- leaves --------------------------------------------------------------------------------- */

int tn_set_requires_grad(tn_tensor *t, bool requires_grad)
{
    if (tn__check_arg("set_requires_grad", "tensor", t))
        return TN_EINVAL;
    if (t->grad_fn)
        return tn__error(TN_EGRAD,
                         "set_requires_grad: only leaves can change requires_grad; this tensor "
                         "was made by %s (use detach() to get a leaf)",
                         t->grad_fn->kind->name);
    if (requires_grad && t->storage->inference && !tn_is_inference_mode_enabled())
        return tn__error(TN_EINFERENCE,
                         "set_requires_grad: an inference tensor cannot require grad outside "
                         "inference mode");
    t->requires_grad = requires_grad;
    return 0;
}

bool tn_requires_grad(const tn_tensor *t) { return t && t->requires_grad; }
bool tn_is_leaf(const tn_tensor *t) { return t && !t->grad_fn; }
const char *tn_grad_fn_name(const tn_tensor *t)
{
    return t && t->grad_fn ? t->grad_fn->kind->name : NULL;
}
tn_tensor *tn_grad(const tn_tensor *t) { return t ? t->grad : NULL; }

void tn_zero_grad(tn_tensor *t)
{
    if (!t)
        return;
    tn_release(t->grad);
    t->grad = NULL;
}

/* ---- the engine ----------------------------------------------------------------------------- */

bool tn__exclusive(const tn_tensor *t)
{
    return atomic_load(&t->refcount) == 1 && atomic_load(&t->storage->refcount) == 1 &&
           t->storage->save_count == 0 && tn_is_contiguous(t);
}

/* *slot += g, where *slot is NULL or a gradient the engine owns. Consumes nothing; g is borrowed. */
static int tn__accumulate_into(tn_tensor **slot, tn_tensor *g)
{
    if (!*slot) {
        if (tn__exclusive(g)) {
            *slot = tn_retain(g);
            return 0;
        }
        tn_tensor *copy = tn__new_output(g->ndim, g->shape, "accumulate_grad");
        if (!copy)
            return tn_last_error();
        tn_copy_to(g, tn_data(copy));
        *slot = copy;
        return 0;
    }
    if (tn__exclusive(*slot))
        return tn_add_(*slot, g);
    tn_tensor *sum = tn_add(*slot, g);
    if (!sum)
        return tn_last_error();
    tn_release(*slot);
    *slot = sum;
    return 0;
}

static int tn__accumulate_backward(tn_node *node, tn_tensor *g, tn_tensor **gin)
{
    return tn__accumulate_into(&node->leaf->grad, g);
}

/* A max-heap of nodes by seq: the most recently created ready node runs first. */
typedef struct tn__heap {
    tn_node **items;
    size_t len, cap;
} tn__heap;

static int tn__heap_push(tn__heap *h, tn_node *n)
{
    if (h->len == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        tn_node **items = realloc(h->items, cap * sizeof *items);
        if (!items)
            return tn__error(TN_ENOMEM, "backward: out of memory");
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->len++;
    while (i > 0 && h->items[(i - 1) / 2]->seq < n->seq) {
        h->items[i] = h->items[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->items[i] = n;
    return 0;
}

static tn_node *tn__heap_pop(tn__heap *h)
{
    tn_node *top = h->items[0];
    tn_node *last = h->items[--h->len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && h->items[c + 1]->seq > h->items[c]->seq)
            c++;
        if (h->items[c]->seq <= last->seq)
            break;
        h->items[i] = h->items[c];
        i = c;
    }
    if (h->len > 0)
        h->items[i] = last;
    return top;
}

/* Lists the nodes reachable from root and counts, for each, the edges that point to it. */
static int tn__collect(tn_node *root, tn_node ***out, size_t *count)
{
    uint64_t epoch = atomic_fetch_add(&tn__backward_epoch, 1) + 1;
    size_t len = 0, cap = 64, next = 0;
    tn_node **list = malloc(cap * sizeof *list);
    if (!list)
        return tn__error(TN_ENOMEM, "backward: out of memory");
    root->visit_epoch = epoch;
    root->deps = 0;
    list[len++] = root;
    while (next < len) { /* breadth-first over the list itself */
        tn_node *n = list[next++];
        for (int i = 0; i < n->n_inputs; i++) {
            tn_node *m = n->inputs[i].next;
            if (!m)
                continue;
            if (m->visit_epoch != epoch) {
                m->visit_epoch = epoch;
                m->deps = 0;
                if (len == cap) {
                    tn_node **bigger = realloc(list, 2 * cap * sizeof *list);
                    if (!bigger) {
                        free(list);
                        return tn__error(TN_ENOMEM, "backward: out of memory");
                    }
                    list = bigger;
                    cap *= 2;
                }
                list[len++] = m;
            }
            m->deps++;
        }
    }
    *out = list;
    *count = len;
    return 0;
}

/* Runs one node: its backward, then hands each input's gradient to the producer's pending sum. */
static int tn__run_node(tn_node *n, tn_tensor *g, bool retain_graph, tn__heap *ready)
{
    if (n->kind == &tn__accumulate_kind)
        return tn__accumulate_backward(n, g, NULL);
    tn_tensor *local[8] = {NULL};
    tn_tensor **gin = n->n_inputs <= 8 ? local : calloc((size_t)n->n_inputs, sizeof *gin);
    if (!gin)
        return tn__error(TN_ENOMEM, "backward: out of memory");
    int rc = n->kind->backward(n, g, gin);
    if (!retain_graph)
        tn__release_saved(n);
    for (int i = 0; i < n->n_inputs && rc == 0; i++) {
        tn_node *next = n->inputs[i].next;
        if (!next || !gin[i])
            continue;
        if (!tn__shape_equal(gin[i]->ndim, gin[i]->shape, n->inputs[i].ndim, n->inputs[i].shape)) {
            char a[96], b[96];
            rc = tn__error(TN_ESHAPE, "%s: gradient %s of input %d does not match its shape %s",
                           n->kind->backward_name, tn_shape_str(gin[i], a, sizeof a), i,
                           tn__shape_fmt(n->inputs[i].ndim, n->inputs[i].shape, b, sizeof b));
            break;
        }
        if (!tn_is_contiguous(gin[i])) {
            tn_tensor *c = tn_contiguous(gin[i]);
            tn_release(gin[i]);
            if (!(gin[i] = c)) {
                rc = tn_last_error();
                break;
            }
        }
        rc = tn__accumulate_into(&next->pending, gin[i]);
        if (rc == 0 && --next->deps == 0)
            rc = tn__heap_push(ready, next);
    }
    for (int i = 0; i < n->n_inputs; i++)
        tn_release(gin[i]);
    if (gin != local)
        free(gin);
    return rc;
}

int tn_backward(tn_tensor *root, const tn_tensor *grad, bool retain_graph)
{
    char a[96], b[96];
    if (tn__check_arg("backward", "root", root))
        return TN_EINVAL;
    if (!root->requires_grad)
        return tn__error(TN_EGRAD, "backward: tensor %s does not require grad and has no grad_fn",
                         tn_shape_str(root, a, sizeof a));
    if (!grad && tn_numel(root) != 1)
        return tn__error(TN_EGRAD,
                         "backward: grad can be implicitly created only for one-element outputs, "
                         "not %s",
                         tn_shape_str(root, a, sizeof a));
    if (grad && tn_numel(grad) != tn_numel(root))
        return tn__error(TN_ESHAPE, "backward: grad %s does not match root %s",
                         tn_shape_str(grad, b, sizeof b), tn_shape_str(root, a, sizeof a));

    tn__context *ctx = tn__ctx();
    tn__context saved_ctx = *ctx;
    bool saved_grad = tn_set_grad_enabled(false);
    lp_region_push(LP_REGION_BACKWARD);
    ctx->backward_op = "backward";

    int rc = 0;
    tn_node *root_node = root->grad_fn ? root->grad_fn : tn__grad_accumulator(root);
    if (root->grad_fn && root_node)
        atomic_fetch_add(&root_node->refcount, 1);
    tn_tensor *seed = NULL;
    if (!root_node)
        rc = tn_last_error();
    else if (grad)
        seed = tn_reshape((tn_tensor *)grad, root->ndim, root->shape);
    else
        seed = tn_full(root->ndim, root->shape, 1.0f, LP_CAT_ACTIVATION);
    if (rc == 0 && !seed)
        rc = tn_last_error();

    tn_node **nodes = NULL;
    size_t count = 0;
    tn__heap ready = {0};
    if (rc == 0)
        rc = tn__collect(root_node, &nodes, &count);
    if (rc == 0) {
        root_node->pending = tn_retain(seed);
        rc = tn__heap_push(&ready, root_node);
    }
    while (rc == 0 && ready.len > 0) {
        tn_node *n = tn__heap_pop(&ready);
        tn_tensor *g = n->pending;
        n->pending = NULL;
        ctx->backward_op = n->kind->backward_name;
        ctx->module = n->module;
        rc = tn__run_node(n, g, retain_graph, &ready);
        tn_release(g);
    }
    for (size_t i = 0; i < count; i++) { /* after an error some sums are left over */
        tn_release(nodes[i]->pending);
        nodes[i]->pending = NULL;
    }
    free(nodes);
    free(ready.items);
    tn_release(seed);
    tn__node_release(root_node);

    *ctx = saved_ctx;
    tn_set_grad_enabled(saved_grad);
    lp_region_pop();
    return rc;
}
