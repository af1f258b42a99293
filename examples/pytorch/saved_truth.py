"""Ground truth for the examples' --truth FILE: the bytes of tensors autograd has saved for
backward that are live at the program's memory peak, computed by the program itself (nothing of
gradprof is used).

    truth = SavedTruth(model, method="walk", peak="op")   # after gp.instrument(model), if any
    ... the program's forwards ...
    truth.write(path, program="mlp", mode="grad")

Where the peak is. An inference loop that forgot no_grad peaks inside a forward of the model:
every tensor that forward has saved so far is held, and so is the graph of the previous output
(``out = model(x)`` keeps the old ``out`` until ``model(x)`` returns) and of any output the
program kept. While grad is on, each forward of the root module runs under a
``TorchDispatchMode`` (entered in a forward pre-hook, left in the forward hook) that sees every
ATen op below autograd, in order, and polls glibc's ``mallinfo2()`` (bytes in use, ``uordblks +
hblkhd``) after each one: the op after which the most bytes were in use is that forward's peak
op, and it notes the storages allocated after it (by ops that return a new tensor, not a view or
an in-place result). The forward with the highest peak is the one reported (the first, on a tie).
Temporaries inside an op are not seen, so the peak is located to the op, not to the byte: an op
whose own scratch memory is larger than what the rest of the forward adds moves the real peak
into that op. OpenBLAS's threaded sgemm does this (it mallocs a 512 KiB job array per call): run
with ``OPENBLAS_NUM_THREADS=1`` for the figures to hold to the op. Without ``mallinfo2`` (not
glibc) or ``TorchDispatchMode`` (old PyTorch), or with ``peak="end"`` (``--truth-peak end``), the
end of the forward is taken as the peak.

Not in a recorded run. The dispatch mode puts Python frames into the call stack of every
allocation the forward makes, so under ``gradprof run`` A's buffers would have no twins in a
grad-off run at all: compute the truth in a run of its own (the programs are deterministic), or
use ``--truth-peak end`` (no dispatch mode; the graphs are still read, which allocates a little,
well below the peak).

What is counted. The saved tensors of every graph alive during that forward, each storage once
(by its base address), bytes = the storage's size (what PyTorch's CPU allocator asked
``posix_memalign`` for), except the storages the forward allocated after its peak op (written
as ``saved_after_peak_bytes``; ``saved_bytes`` + ``saved_after_peak_bytes`` =
``saved_forward_end_bytes``). Left out and written separately as ``saved_param_bytes`` and
``saved_input_bytes``: the model's parameters and buffers, and the storages of the tensors
passed to the model's forward that the program still holds (with or without grad it would);
and as ``saved_shared_bytes`` inputs in shared memory (a DataLoader worker's batches), which no
malloc serves, so that no allocation profiler sees them.
An input the program let go of that a graph still keeps is saved like an activation: the model
is given an alias of each such tensor (``_alias``), so the program's tensor dies with its last
reference whatever the graph keeps. Under no_grad / inference_mode there is no graph: 0.

When the graphs are read. Not at the peak: what the walk allocates (tens of KiB of Python
containers, which glibc's malloc serves) would sit on top of it. The graphs alive are read at
the start of each forward (those held while it runs) and after it, at the start of the next one
or in ``write()`` (those it built); for forward j the saved set is the union of the first and of
the second less what forward j allocated after its peak op. Between the two reads only the small
list of storages allocated after the current peak op is kept.

The figures, with each program's defaults (Debian's python3-torch 1.13, OPENBLAS_NUM_THREADS=1;
two graphs alive at the peak in each: the previous output's and the one being built):

    program      saved_bytes   after peak   peak op (of the forward's ATen ops)
    mlp.py         2,097,152            0   detach after the 4th ReLU
    cnn.py        10,092,544            0   the classifier's addmm (the last op)
    resnet.py     21,860,352            0   the fc's addmm (the last op)
    transformer   13,148,208            0   the head's addmm (the last op)
    rnn.py         8,388,608      262,144   the GRU's stack of outputs (1210 of 1218)
    loader_cnn    14,946,304            0   the classifier's addmm (the last op)

How the saved tensors are found:

* ``walk`` (default): from the ``grad_fn`` of every output still alive (weak references to each
  forward's outputs), over ``next_functions``; each node's ``_saved_*`` attributes (a tensor, or a
  list of tensors) are the tensors it saved. Reading one unpacks it into a new tensor object over
  the same storage; the object is dropped at once, so memory is unaffected. Safe under gradprof's
  helper (``--instrument``).
* ``hooks``: ``torch.autograd.graph.saved_tensors_hooks`` around each forward; pack records a
  weak reference to what it returns and the storage, and returns the tensor itself (detached when
  it has a ``grad_fn``, as the helper does: a saved output would otherwise hold its own graph node
  in a reference cycle that only the garbage collector frees), so no memory is copied. A save
  counts while that object is alive (while its node is). Hooks are a stack and the innermost
  wins, so this would shadow the helper's: not allowed with ``--instrument``. Written as
  ``hook_saved_forward_end_bytes`` (forward j's graphs at its end, read at the next read), to
  compare with ``saved_forward_end_bytes``.
* ``both``: the two side by side (``saved_bytes`` is the walk's).
"""
import ctypes
import json
import weakref

import torch

try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # older PyTorch: no peak location, the end of the forward is taken
    TorchDispatchMode = None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                               "usmblks", "fsmblks", "uordblks", "fordblks",
                                               "keepcost")]


def _mallinfo2():
    try:
        f = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    f.restype = _MallInfo2
    f.argtypes = []
    return f


_MALLINFO2 = _mallinfo2()


def malloc_in_use():
    m = _MALLINFO2()
    return m.uordblks + m.hblkhd


def _storage(t):
    """t's storage (untyped where this PyTorch has it)."""
    f = getattr(t, "untyped_storage", None)
    return f() if f is not None else t.storage()


def storage_of(t):
    """(base address, bytes) of a dense CPU tensor's storage, or None."""
    try:
        if t.layout != torch.strided or t.device.type != "cpu" or t.is_quantized:
            return None
        s = _storage(t)
        ptr, n = s.data_ptr(), s.nbytes()
    except Exception:
        return None
    if not ptr or n <= 0:
        return None
    return ptr, n


def _tensors(obj, out):
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)
    return out


def _alias(t):
    """t itself, or for a dense CPU leaf without grad a tensor on its storage that is not a view
    of it."""
    if (not isinstance(t, torch.Tensor) or t.requires_grad or t.grad_fn is not None or
            storage_of(t) is None):
        return t
    return torch.empty(0, dtype=t.dtype).set_(_storage(t), t.storage_offset(), t.size(), t.stride())


_SAVED_ATTRS = {}


def _saved_attrs(fn):
    cls = type(fn)
    names = _SAVED_ATTRS.get(cls)
    if names is None:
        names = _SAVED_ATTRS[cls] = [a for a in dir(fn) if a.startswith("_saved_") and
                                     not a.endswith(("_sym_sizes", "_sym_strides"))]
    return names


def walk_saved(roots):
    """{storage base: (bytes, saving node's type name)} of the tensors saved by the graph nodes
    reachable from the grad_fn of the tensors in roots (the first saver found names it), and the
    number of nodes visited."""
    found = {}
    seen = {}
    stack = [t.grad_fn for t in roots if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn  # held, so that ids are not reused during the walk
        for name in _saved_attrs(fn):
            try:
                val = getattr(fn, name)
            except Exception:  # freed by a backward, or not readable
                continue
            for t in _tensors(val, []):
                info = storage_of(t)
                if info is not None and info[0] not in found:
                    found[info[0]] = (info[1], type(fn).__name__)
            del val
        for nxt, _ in getattr(fn, "next_functions", ()):
            if nxt is not None and id(nxt) not in seen:
                stack.append(nxt)
    return found, len(seen)


if TorchDispatchMode is not None:
    class _OpClock(TorchDispatchMode):
        """Numbers the ATen ops of one forward; notes after which op the most malloc'ed bytes were
        in use, and the storages allocated after that op. Allocates as little as it can: it runs
        while memory peaks."""

        def __init__(self):
            super().__init__()
            self.ops = 0
            self.peak_bytes = -1
            self.peak_op = 0
            self.peak_func = None
            self.after_peak = []   # storage bases allocated after the peak op
            self.aliases = {}      # func -> whether its results alias its arguments

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.ops += 1
            aliases = self.aliases.get(func)
            if aliases is None:
                aliases = self.aliases[func] = any(r.alias_info is not None
                                                   for r in func._schema.returns)
            if _MALLINFO2 is not None:
                used = malloc_in_use()
                if used > self.peak_bytes:
                    self.peak_bytes, self.peak_op, self.peak_func = used, self.ops, func
                    del self.after_peak[:]
                elif not aliases:
                    for t in (out if isinstance(out, (tuple, list)) else (out,)):
                        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                            try:
                                base = t.data_ptr() - t.storage_offset() * t.element_size()
                            except Exception:
                                continue
                            self.after_peak.append(base)
            return out


class SavedTruth:
    def __init__(self, model, method="walk", peak="op"):
        if method not in ("walk", "hooks", "both"):
            raise ValueError("method must be walk, hooks or both")
        if peak not in ("op", "end"):
            raise ValueError("peak must be op or end")
        self.locate = peak == "op" and TorchDispatchMode is not None and _MALLINFO2 is not None
        self.model = model
        self.method = method
        self.fixed = set()     # parameter and buffer storages
        self.param_bytes = 0
        for t in list(model.parameters()) + list(model.buffers()):
            info = storage_of(t)
            if info is not None and info[0] not in self.fixed:
                self.fixed.add(info[0])
                self.param_bytes += info[1]
        self.inputs = {}       # storage base -> weak reference of an input tensor
        self.shared = {}       # storage base -> weak reference of the tensor the model got
        self.outputs = []      # weak references to each forward's output tensors
        self.packed = []       # (weak reference to what pack returned, (base, bytes))
        self.hook_ctx = None
        self.clock = None
        self.pending = None    # the last forward with grad, waiting for the read after it
        self.graphs = 0        # outputs with a graph alive at the last read
        self.forwards = 0
        self.best = None       # (key, result) of the forward whose peak was the highest
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    # -- saved-tensor hooks (method hooks / both) --
    def _pack(self, t):
        keep = t.detach() if t.grad_fn is not None else t
        info = storage_of(t)
        if info is not None:
            self.packed.append((weakref.ref(keep), info))
        return keep

    @staticmethod
    def _unpack(t):
        return t

    # -- module hooks --
    def _pre(self, module, args):
        held = self._read()    # also completes the previous forward
        for t in _tensors(args, []):
            info = storage_of(t)
            if info is not None:
                self.inputs[info[0]] = weakref.ref(t)
        # The model gets an alias of each tensor argument that is a leaf without grad (the same
        # storage, no _base): a graph that saves it holds the alias, so the program's tensor
        # dies when the program lets go of it, and its storage then counts as saved.
        args = tuple(_alias(a) for a in args)
        for t in _tensors(args, []):
            info = storage_of(t)
            if info is not None and t.is_shared():
                self.shared[info[0]] = weakref.ref(t)
        if not torch.is_grad_enabled():
            return args
        self.pending = {"held": held, "graphs": self.graphs, "clock": None,
                        "forward": self.forwards + 1}
        if self.method != "walk":
            self.hook_ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
            self.hook_ctx.__enter__()
        if self.locate:
            self.clock = _OpClock()
            self.clock.__enter__()
        return args

    def _post(self, module, args, output):
        clock, self.clock = self.clock, None
        if clock is not None:
            clock.__exit__(None, None, None)
        if self.hook_ctx is not None:
            self.hook_ctx.__exit__(None, None, None)
            self.hook_ctx = None
        self.forwards += 1
        if self.pending is not None:
            self.pending["clock"] = clock
        for t in _tensors(output, []):
            try:
                self.outputs.append(weakref.ref(t))
            except TypeError:
                pass

    # -- reading the graphs --
    def _kind(self, p):
        return ("param" if p in self.fixed else "input" if p in self.inputs else
                "shared" if p in self.shared else "saved")

    def _read(self):
        """Walks the graphs of the outputs alive now and completes the pending forward. Returns
        what they saved, {storage base: (bytes, saving node, kind)}, kind = param, input or
        saved, shared (as of now), and the same for what the saved-tensor hooks saw ({} with walk)."""
        self.inputs = {p: r for p, r in self.inputs.items() if r() is not None}
        self.shared = {p: r for p, r in self.shared.items() if r() is not None}
        self.outputs = [r for r in self.outputs if r() is not None]
        live = [t for t in (r() for r in self.outputs) if t is not None]
        found, nodes = walk_saved(live)
        self.graphs = sum(1 for t in live if t.grad_fn is not None)
        del live
        found = {p: (n, op, self._kind(p)) for p, (n, op) in found.items()}
        hooked = {}
        if self.method != "walk":
            self.packed = [(ref, info) for ref, info in self.packed if ref() is not None]
            for _ref, (p, n) in self.packed:
                hooked[p] = (n, "", self._kind(p))
        pend, self.pending = self.pending, None
        if pend is not None:
            self._complete(pend, found, hooked, nodes)
        return found, hooked

    def _complete(self, pend, after, after_hooked, nodes):
        clock = pend["clock"]
        late = set(clock.after_peak) if clock is not None else set()
        held, held_hooked = pend["held"]
        r = {"saved_bytes": 0, "saved_storages": 0, "saved_after_peak_bytes": 0,
             "saved_forward_end_bytes": 0, "saved_param_bytes": 0, "saved_input_bytes": 0,
             "saved_shared_bytes": 0,
             "by_op": {}}
        union = dict(held)
        for p, v in after.items():
            union.setdefault(p, v)
        for p, (n, op, kind) in union.items():
            if kind != "saved":
                r["saved_%s_bytes" % kind] += n
                continue
            r["saved_forward_end_bytes"] += n
            if p in late and p not in held:
                r["saved_after_peak_bytes"] += n
            else:
                r["saved_bytes"] += n
                r["saved_storages"] += 1
                r["by_op"][op] = r["by_op"].get(op, 0) + n
        r["by_op"] = dict(sorted(r["by_op"].items()))
        located = clock is not None and clock.ops > 0
        r.update({"forward": pend["forward"], "graphs_at_peak": pend["graphs"] + 1,
                  "graph_nodes": nodes,
                  "peak_located": "mallinfo2 after each op" if located else "forward end",
                  "peak_op_index": clock.peak_op if located else 0,
                  "peak_op": str(clock.peak_func) if located else "",
                  "forward_ops": clock.ops if clock is not None else 0,
                  "peak_malloc_in_use": clock.peak_bytes if located else 0})
        if self.method != "walk":
            union = dict(held_hooked)
            for p, v in after_hooked.items():
                union.setdefault(p, v)
            r["hook_saved_forward_end_bytes"] = sum(n for n, _op, kind in union.values()
                                                    if kind == "saved")
        key = (r["peak_malloc_in_use"], r["saved_forward_end_bytes"])
        if self.best is None or key > self.best[0]:
            self.best = (key, r)

    def result(self, **extra):
        self._read()
        if self.best is not None:
            r = dict(self.best[1])
        else:  # no forward with grad on
            r = {"saved_bytes": 0, "saved_storages": 0, "saved_after_peak_bytes": 0,
                 "saved_forward_end_bytes": 0, "saved_param_bytes": 0, "saved_input_bytes": 0,
                 "saved_shared_bytes": 0,
                 "by_op": {}, "forward": 0, "graphs_at_peak": 0, "graph_nodes": 0,
                 "peak_located": "", "peak_op_index": 0, "peak_op": "", "forward_ops": 0,
                 "peak_malloc_in_use": 0}
            if self.method != "walk":
                r["hook_saved_forward_end_bytes"] = 0
        r.update({"method": self.method, "forwards": self.forwards,
                  "param_bytes": self.param_bytes})
        r.update(extra)
        return r

    def write(self, path, **extra):
        r = self.result(**extra)
        with open(path, "w") as f:
            json.dump(r, f, indent=1, sort_keys=True)
            f.write("\n")
        return r
