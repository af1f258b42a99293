"""gradprof_torch -- one line for exact gradprof attribution in a PyTorch program.

Usage (no installation: put libprof/python on sys.path, or run with PYTHONPATH=libprof/python)::

    import gradprof_torch as gp
    gp.instrument(model)                 # or: with gp.profile(model): ...
    for i, batch in enumerate(loader):
        gp.mark(f"iter {i}")             # optional: iterations for the growth detector
        with gp.region("inference"):     # optional: what forgot_no_grad & co. key on
            out = model(batch)

    gradprof run -o eval.gptrace -- python3 eval.py   # then gradprof report/diff/check

Where it records to. Under ``gradprof run`` (libprof_preload.so in the process) the helper calls
the preload's libprof through ``ctypes.CDLL(None)``: every raw allocation is already recorded with
its stack, and the helper *retags* the live buffers it knows (parameters, tensors saved for
backward, ``.grad``, optimizer state) with exact categories and module paths. Run without
``gradprof run`` it loads ``libprof.so`` from ``$GRADPROF_LIBPROF``, from a build folder next to
this file (``../../build*/libprof/libprof.so``, not a sanitizer build) or, installed, from its
prefix's ``lib/`` (or ``lib/<triplet>/``) or the system's (``ctypes.util.find_library("prof")``),
and starts recording itself (``lp_start``, configured by the ``GRADPROF_*`` variables, stopped at
exit); raw allocations are then not seen, so the trace holds only what the helper reports:
parameters, saved tensors for as long as the graph holds them (allocated when saved, freed when
released), and gradients. If neither works it warns once and does nothing: it never breaks the
program.
``GRADPROF_TORCH=0`` turns it off.

What it records:

* **module regions**: forward pre/post hooks on every module of ``model.named_modules()`` push and
  pop a region named by the dotted path, the root named by the model's class name or ``name=``
  (``MLP``, ``MLP.body.0``, ...);
* **grad mode**: ``lp_grad_mode`` whenever it changed, and regions ``no_grad``, ``inference_mode``
  (``inference_mode(false)`` for ``mode=False``) and ``enable_grad`` around ``torch.no_grad()``,
  ``torch.inference_mode()`` and ``torch.enable_grad()`` blocks and decorated functions (their
  ``__enter__``/``__exit__`` are wrapped while instrumented and restored by ``uninstall``);
  ``backward`` around ``Tensor.backward`` / ``torch.autograd.backward`` / ``torch.autograd.grad``;
* **parameters and buffers**: each storage is tagged ``parameter`` (op ``parameter`` or
  ``buffer``, module = its owner's path, detail = its name) at instrument time, and new ones at
  each forward;
* **tensors saved for backward** (``torch.autograd.graph.saved_tensors_hooks``: on in every thread
  once ``attach`` ran, so from ``import torch`` under ``gradprof run``; otherwise during an
  instrumented model's forward): the saved tensor's storage is retagged ``saved`` with op = the
  ATen operator that made it, from its ``grad_fn`` (``aten::relu``, ``aten::addmm``,
  ``aten::convolution``; for a view, such as a flattened input of a Linear, its base's: the view
  made no memory; a custom ``torch.autograd.Function``'s class name;
  for a tensor without one, such as max-pool indices, the op whose graph node saves it as its
  own output, named when the module returns (name_leaf_saves), else ``leaf``;
  ``autocast::weight_cast`` for autocast's cached cast copy of a weight, _autocast_weight),
  module = the innermost module running (the module that saves it), detail = the shape and the
  program's own lines at that moment (``[64,512] at model.py:88 (forward) < eval.py:36 (main)``).
  A storage saved several times is retagged once and goes back
  to ``activation`` when the last saver lets go (after backward, or when the output that owns the
  graph dies). Parameters, buffers and leaves that require grad are never retagged. A model's
  positional input (one that owns its storage) is the program's, not retagged, until the program
  lets go of it while a graph still keeps it: at the model's next call or at exit it is then
  retagged ``saved``, op ``input`` (promote_dropped_inputs): the batches that
  ``total = total + model(x).sum()`` keeps;
* **gradients**: after each backward every parameter's ``.grad`` storage is tagged ``gradient``
  (op ``accumulate_grad``, module = the parameter's owner) once;
* **optimizer state**: after each ``step()`` of an optimizer (torch's or the program's own class:
  every one calls ``Optimizer.__init__``, which wraps its class's ``step``) and each
  ``load_state_dict()`` the tensors of its state not seen yet are tagged ``optimizer_state``
  (op ``Adam.exp_avg``: the class and the state's key; module and detail those of the
  parameter they belong to);
* ``gp.mark(name)``, ``gp.region(name)`` (context manager or decorator), ``gp.thread_name(name)``.

``gp.saved_bytes_by_module()`` returns what the saved-tensor hook saw: per module, the bytes of
unique storages saved and live at the moment the most bytes were saved at once (``which="last"``:
those saved by the last complete forward of an instrumented model).

Limits:

* CUDA tensors are tagged like CPU ones (same categories, on their device ``cuda:N``) only where
  each storage is its own device allocation the recorder saw: under ``gradprof run --cuda`` with
  ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (``_cuda_tags``), or when the helper loaded libprof itself
  (it then reports each buffer's birth and end); otherwise the caching allocator's segments stay
  what the recorder saw. Tensors on other devices (``meta``, ``mps``, ``xpu``) are never tagged;
* zero-size
  storages, storages in shared memory (a ``DataLoader`` worker's batches in the main process)
  and storages whose base is not 64-byte aligned (so not from PyTorch's CPU allocator, e.g. a
  view into a NumPy array) are never tagged, because under the preload a tag of an address the
  recorder did not see allocated counts as a new allocation (a 64-byte aligned storage that is
  not the start of a malloc block, from ``from_blob`` or a NumPy slice, would);
* a storage is attributed whole (its base and size, not the view's) to the first module and op
  that saved it: storages shared by views go to the first saver;
* with ``instrument`` alone (no ``attach``), tensors saved outside an instrumented model's forward
  (a loss computed after it) are not seen; activations that are never saved keep what the frame
  rules (``tools/rules/pytorch.rules``) give them;
* while the program has its own ``saved_tensors_hooks`` active (``save_on_cpu``, its own) the
  saves go to them, not to the helper's, and are not seen (noted ``saves_seen`` ``some``); a
  non-reentrant ``torch.utils.checkpoint`` is the exception: its hooks keep no tensor, and the
  arguments it keeps for the recomputation count as saved by its outputs' graph
  (_wrap_checkpoint); keyword-only inputs of the root module are not known as inputs (a saved one
  without ``grad_fn`` would be tagged ``leaf``);
* if a module's forward raises, its regions are closed at the next forward of an instrumented
  model or when an enclosing region (``gp.region``, ``no_grad``) exits.

Where the saved-tensor hooks are on in every thread (after ``attach``, and in a child process: a
DataLoader worker, forked or started by spawn or forkserver, which writes its own trace and calls
no model), the helper notes ``saves_seen`` ``all`` (``some`` if threads were running before, or
once the program pushes its own hooks), so that ``gradprof check`` can judge a process that tagged
nothing, such as a program without modules (_see_all_saves); a forked child first forgets the
parent's saved tensors (_in_forked_child).
"""

import atexit
import contextlib
import ctypes
import dataclasses
import functools
import glob
import os
import re
import sys
import threading
import types
import weakref

__all__ = ["attach", "instrument", "uninstall", "profile", "mark", "region", "thread_name",
           "saved_bytes_by_module", "saved_report", "enabled", "mode"]

# The event vocabulary (include/gradprof/vocabulary.h; tests/test_vocabulary.py checks these
# copies).
# Category wire values (lp_category):
PARAMETER = 0
INPUT = 1
ACTIVATION = 2
SAVED = 3
GRADIENT = 4
OPTIMIZER_STATE = 5
AUTOGRAD = 6
TEMPORARY = 7
OTHER = 8
# Region names with a meaning (LP_REGION_*):
REGION_NO_GRAD = "no_grad"
REGION_ENABLE_GRAD = "enable_grad"
REGION_INFERENCE_MODE = "inference_mode"
REGION_INFERENCE_MODE_OFF = "inference_mode(false)"
REGION_BACKWARD = "backward"
REGION_INFERENCE = "inference"
_HOST = -1  # LP_DEVICE_HOST
_MAX_CUDA_DEVICES = 8  # LP_MAX_CUDA_DEVICES
_ALIGN = 64  # c10's CPU allocator aligns every storage to 64 bytes
_SANITIZED = (b"__asan_init", b"__tsan_init", b"__msan_init", b"libasan.so", b"libtsan.so")


class _Storage(tuple):
    """(base address, bytes) of a tensor's storage; .device is its lp_device (_HOST, or the CUDA
    ordinal)."""
    device = _HOST


def _lp_device(device):
    """The lp_device of a torch.device (or its string): _HOST for "cpu", N for "cuda:N" (a bare
    "cuda" is the current device), None for any other device or an ordinal libprof has no
    counters for (LP_MAX_CUDA_DEVICES)."""
    try:
        import torch
        d = torch.device(device)
        if d.type == "cpu":
            return _HOST
        if d.type != "cuda":
            return None
        i = d.index if d.index is not None else torch.cuda.current_device()
    except Exception:
        return None
    return i if 0 <= i < _MAX_CUDA_DEVICES else None


def _cuda_tags(mode, environ=None):
    """Whether CUDA tensors get tags in this libprof mode: "standalone" (the helper reports each
    buffer's birth and end itself), or "preload" with the CUPTI module injected (gradprof run
    --cuda) and PyTorch's caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING set and not 0), so
    that each storage is one cudaMalloc the recorder saw. A tag on a device address it did not see
    allocated would count as a new allocation."""
    env = os.environ if environ is None else environ
    if mode == "standalone":
        return True
    return (mode == "preload" and env.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "0") not in ("", "0")
            and "libprof_cupti" in env.get("CUDA_INJECTION64_PATH", ""))


class _Tag(ctypes.Structure):
    _fields_ = [("category", ctypes.c_int), ("op", ctypes.c_char_p), ("module", ctypes.c_char_p),
                ("detail", ctypes.c_char_p), ("grad_enabled", ctypes.c_bool)]


def _warn(msg):
    try:
        sys.stderr.write("gradprof_torch: %s\n" % msg)
    except Exception:
        pass


def _b(s):
    return (s or "").encode("utf-8", "replace")


class _Counters(ctypes.Structure):  # lp_counters
    _fields_ = [("live", ctypes.c_int64 * 9), ("peak", ctypes.c_int64 * 9),
                ("live_total", ctypes.c_int64), ("peak_total", ctypes.c_int64)]


class _Lib:
    """libprof through ctypes, or nothing. mode: 'preload', 'standalone' or 'off'. With
    record=False a libprof.so loaded here does not start a trace: its counters (lp_counters_get)
    still count what the helper tags (the pytest plugin judges tests by them)."""

    def __init__(self, record=True):
        self.mode = "off"
        self.lib = None
        self.path = ""
        self.record = record
        if os.environ.get("GRADPROF_TORCH", "1") == "0":
            return
        try:
            self._load()
        except Exception as e:  # never break the program
            _warn("disabled (%s)" % e)
            self.mode, self.lib = "off", None

    def _load(self):
        try:
            me = ctypes.CDLL(None)
        except OSError:
            me = None
        if me is not None and hasattr(me, "lp_region_push") and hasattr(me, "lp_retag"):
            self._bind(me)
            self.mode = "preload"
            return
        candidates = []
        env = os.environ.get("GRADPROF_LIBPROF")
        if env:
            candidates.append(env)
        here = os.path.dirname(os.path.abspath(__file__))
        root = os.path.normpath(os.path.join(here, "..", ".."))
        found = glob.glob(os.path.join(root, "build*", "libprof", "libprof.so"))
        # plain "build" first, then the most recently built
        found.sort(key=lambda p: (os.path.basename(os.path.dirname(os.path.dirname(p))) != "build",
                                  -os.path.getmtime(p)))
        candidates += found
        # Installed (cmake --install, the Debian package): from <prefix>/lib/gradprof/python or a
        # dist-packages folder, <prefix>/lib or a multiarch <prefix>/lib/<triplet>; then what the
        # dynamic loader knows (ldconfig's cache: a bare soname, loaded by the loader's search).
        for pattern in ("libprof.so.0", os.path.join("*-linux-gnu*", "libprof.so.0")):
            candidates += sorted(glob.glob(os.path.join(root, pattern)))
        import ctypes.util as ctypes_util  # (binds ctypes_util only: ctypes stays the module's)
        system = ctypes_util.find_library("prof")
        if system:
            candidates.append(system)
        errors = []
        for path in candidates:
            try:
                data = b""
                if os.sep in path:  # a file; a soname is read by the loader only
                    with open(path, "rb") as f:
                        data = f.read()
                if any(m in data for m in _SANITIZED):  # loading it would abort this process
                    errors.append("%s: built with a sanitizer" % path)
                    continue
                lib = ctypes.CDLL(path)
                self._bind(lib)
            except (OSError, AttributeError) as e:
                errors.append(str(e) if path in str(e) else "%s: %s" % (path, e))
                continue
            if self.record and not lib.lp_is_recording():
                if lib.lp_start(None) != 0:
                    errors.append("%s: lp_start failed" % path)
                    continue
                atexit.register(self._stop)
            self.path = path
            self.mode = "standalone"
            return
        why = "; ".join(errors) if errors else (
            "libprof not found: run under `gradprof run`, or set GRADPROF_LIBPROF to libprof.so")
        _warn("disabled, recording nothing (%s)" % why)

    def _bind(self, lib):
        tagp = ctypes.POINTER(_Tag)
        sig = {
            "lp_alloc": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32, tagp]),
            "lp_free": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int]),
            "lp_retag": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int,
                                tagp]),
            "lp_region_push": (None, [ctypes.c_char_p]),
            "lp_region_pop": (None, []),
            "lp_mark": (None, [ctypes.c_char_p]),
            "lp_grad_mode": (None, [ctypes.c_bool, ctypes.c_bool]),
            "lp_thread_name": (None, [ctypes.c_char_p]),
            "lp_start": (ctypes.c_int, [ctypes.c_void_p]),
            "lp_stop": (None, []),
            "lp_is_recording": (ctypes.c_bool, []),
            "lp_flush": (None, []),
            "lp_counters_get": (ctypes.c_int, [ctypes.c_int32, ctypes.POINTER(_Counters)]),
            "lp_counters_reset_peak": (None, []),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        # newer libprof: module regions (an untagged buffer is given the module that made it)
        self.module_push = getattr(lib, "lp_module_push", lib.lp_region_push)
        self.module_push.restype = None
        self.module_push.argtypes = [ctypes.c_char_p]
        if hasattr(lib, "lp_note"):  # newer libprof: timed notes (who holds a graph)
            lib.lp_note.restype = None
            lib.lp_note.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        if hasattr(lib, "lp_exclude_push"):  # newer libprof: the helper's own memory left out
            lib.lp_exclude_push.restype = lib.lp_exclude_pop.restype = None
            lib.lp_exclude_push.argtypes = lib.lp_exclude_pop.argtypes = []
            self.own_begin, self.own_end = lib.lp_exclude_push, lib.lp_exclude_pop
        self.lib = lib

    @staticmethod
    def own_begin():
        """From here to own_end, this thread's allocations are the helper's own bookkeeping, not
        the program's memory: not recorded (lp_exclude_push). Nests."""

    @staticmethod
    def own_end():
        pass

    def note(self, key, value):
        """A timed note (lp_note: key, value, bytes) in the trace; nothing with an older libprof
        that has none."""
        note = getattr(self.lib, "lp_note", None)
        if note is not None:
            note(key, value)

    def counters(self):
        """The host's lp_counters: live and peak bytes per category since the last reset."""
        c = _Counters()
        self.lib.lp_counters_get(_HOST, ctypes.byref(c))
        return c

    def _stop(self):
        try:
            if self.lib is not None:
                self.lib.lp_stop()
        except Exception:
            pass

    # -- events (each swallows errors: profiling must not break the program) --
    def tag_new(self, ptr, nbytes, cat, op, module, detail, grad, device=_HOST):
        """Gives a live, so far untagged buffer its role."""
        t = _Tag(cat, _b(op), _b(module), _b(detail), grad)
        if self.mode == "preload":
            self.lib.lp_retag(ptr, nbytes, device, OTHER, ctypes.byref(t))
        else:
            self.lib.lp_alloc(ptr, nbytes, device, ctypes.byref(t))

    def retag(self, ptr, nbytes, frm, cat, op, module, detail, grad, device=_HOST):
        t = _Tag(cat, _b(op), _b(module), _b(detail), grad)
        self.lib.lp_retag(ptr, nbytes, device, frm, ctypes.byref(t))

    def untag(self, ptr, nbytes, cat, device=_HOST):
        """Standalone mode: the helper's record of the buffer ends (no raw free is seen)."""
        self.lib.lp_free(ptr, nbytes, device, cat)


class _TLS(threading.local):
    def __init__(self):
        self.stack = []        # [_Entry] regions pushed here, innermost last
        self.modules = []      # module paths running, innermost last
        self.grad = None       # last (grad_enabled, inference_mode) reported
        self.backward = 0
        self.user_hooks = 0    # the program's own saved_tensors_hooks contexts active
        self.hooks = 0         # our saved-tensor hooks pushed (everywhere, or by a root forward)
        self.hooks_off = 0     # disable_saved_tensors_hooks blocks open (ours taken off)
        self.checkpoint = 0    # non-reentrant torch.utils.checkpoint calls running here
        self.jit_trace = 0     # torch.jit.trace calls running here
        self.roots = []        # the attached roots (_Model) whose forward runs here, innermost last
        self.leaves = []       # (weakref to tensor, storage key, module): saves without grad_fn,
                               # untagged until that module returns (name_leaf_saves)
        self.call_kwargs = {}  # the keyword arguments of the last module call made here


class _Entry:
    """A region this helper pushed. A module's holds the frame of its call (to notice a forward
    that raised); a root module's also what its forward set up: our saved-tensor hooks (on a
    thread that lacked them), the storages of its inputs, and whether it is the outermost forward
    of an instrumented model on its thread (saved_bytes_by_module("last") counts its saves)."""
    __slots__ = ("kind", "key", "name", "frame", "hooks", "inputs", "forward")

    def __init__(self, kind, key, name, frame):
        self.kind, self.key, self.name, self.frame = kind, key, name, frame
        self.hooks, self.inputs, self.forward = False, (), False


class _SavedEntry:
    """A storage the graph keeps: how many saves hold it, what to tag it. A model's input saved in
    its forward is the program's (tagged False: not counted, not retagged) until the program lets
    go of it while a graph still keeps it (_State.promote_dropped_inputs); `arg` is then a weakref
    to the tensor the model was called with, `direct` the saves that hold that very object."""
    __slots__ = ("count", "nbytes", "op", "module", "detail", "device", "tagged", "arg", "direct",
                 "where")

    def __init__(self, nbytes, op, module, detail, device=_HOST):
        self.count, self.nbytes, self.op, self.module, self.detail = 1, nbytes, op, module, detail
        self.device = device
        self.tagged, self.arg, self.direct, self.where = True, None, 0, ""


class _Packed:
    """What the graph keeps for a saved tensor: the tensor (detached), what PyTorch's own
    SavedVariable would check when backward unpacks it (its version, and how to name it), and, if
    retagged, the storage key whose save count drops when the graph lets go of it."""
    __slots__ = ("t", "key", "version", "what", "__weakref__")

    def __init__(self, key, orig):
        self.t, self.key = None, key
        self.version = orig._version
        fn = orig.grad_fn
        self.what = "[%s [%s]]%s" % (orig.type(), ", ".join(str(d) for d in orig.shape),
                                     ", which is output %d of %s," % (orig.output_nr,
                                                                      type(fn).__name__)
                                     if fn is not None else "")

    def __del__(self):
        if self.key is not None:
            try:
                _S.saved_release(self.key, self.t)
            except Exception:
                pass


class _State:
    def __init__(self):
        self.lib = None
        self.lock = threading.RLock()
        self.tls = _TLS()
        self.models = {}        # id(model) -> _Model
        self.patches = []       # (obj, attr, original)
        self.param_keys = set()  # storage bases of parameters/buffers (tagged or not)
        self.tagged_params = {}  # storage base -> weakref to the tensor (to notice replaced ones)
        # id(parameter or buffer) -> (weakref, data_ptr, module path, name) at its last look
        self.params_seen = {}
        self.state_seen = {}    # id(optimizer state tensor) -> (weakref, data_ptr) once tagged
        self.optimizer_classes = set()  # optimizer classes whose step is wrapped (_patch)
        self.grad_tags = {}     # id(param) -> (storage base, weakref to the grad tensor)
        self.saved = {}         # storage base -> _SavedEntry
        self.saved_live = {}    # module -> bytes saved and live now
        self.saved_live_total = 0
        self.saved_peak_total = 0
        self.saved_peak = {}    # module -> bytes at the moment saved_live_total peaked
        self.saved_last = {}    # module -> bytes saved by the last complete forward
        self.saved_cur = None   # module -> bytes saved by the forward in progress
        self.saved_count = 0
        self.retag_count = 0
        self.input_keys = {}    # storage base -> root forwards running that have it as input
        self.input_args = {}    # storage base -> weakref to the input tensor owning that storage
        self.unpromoted = set()  # storage bases of saved inputs the program may still hold
        self.explicit = set()   # ids of the modules of instrumented models (their own hooks)
        self.attached = False   # torch's global module hooks are installed (attach())
        self.auto_roots = {}    # id(module) -> _Model: modules called outside any other module
        self.primary = None     # id of the attached root whose calls are iterations (_primary)
        self.root_calls = 0     # calls of attached roots so far (their order: _Model.last_call)
        self.iteration_places = {}  # an owned primary's caller code -> where it first called it
        self.sites_since_mark = set()  # the program's call sites of the primary since its mark
        self.iterations = 0         # iteration marks made
        self.user_marks = False  # the program calls gp.mark itself: no automatic marks
        self.global_handles = []
        self.watch = None       # a test being watched (watch_begin), or None
        self.last_holders = []  # what the last holder scan found
        self.attribute_nodes = {}  # a called model's attribute -> graph nodes at the last look
        self.holder_names = set()  # the names earlier holder scans found
        self.saves_all = False  # the hooks are on in every thread (_see_all_saves)
        self.saves_noted = 0    # the process (pid) whose trace notes that (saves_seen)
        self.unseen_noted = 0   # the process whose trace notes saves made with the hooks off

    # -- library --
    def ensure_lib(self):
        if self.lib is None:
            self.lib = _Lib()
        return self.lib.mode != "off"

    @property
    def cuda_tags(self):
        """Whether CUDA tensors get tags (_cuda_tags of the libprof mode)."""
        return self.lib is not None and _cuda_tags(self.lib.mode)

    @property
    def on(self):
        return self.lib is not None and self.lib.mode != "off"

    # -- grad mode --
    def grad_mode(self):
        import torch
        try:
            inf = bool(torch.is_inference_mode_enabled())
        except Exception:
            inf = False
        return bool(torch.is_grad_enabled()), inf

    def emit_grad_mode(self):
        if not self.on:
            return
        try:
            g = self.grad_mode()
            if g != self.tls.grad:
                self.tls.grad = g
                self.lib.lib.lp_grad_mode(g[0], g[1])
        except Exception:
            pass

    # -- regions: one per-thread stack, so an exception that skipped a pop is repaired --
    def push(self, kind, key, name, frame=None):
        if not self.on:
            return None
        try:
            lib = self.lib
            (lib.module_push if kind == "module" else lib.lib.lp_region_push)(_b(name))
            e = _Entry(kind, key, name, frame)
            self.tls.stack.append(e)
            if kind == "module":
                self.tls.modules.append(name)
            return e
        except Exception:
            return None

    def _pop_one(self):
        tls = self.tls
        e = tls.stack.pop()
        if e.kind == "module" and tls.modules:
            tls.modules.pop()
        self.lib.lib.lp_region_pop()
        if e.hooks:
            import torch
            torch._C._autograd._pop_saved_tensors_default_hooks()
            tls.hooks -= 1
        for k in e.inputs:
            left = self.input_keys.get(k, 0) - 1
            if left > 0:
                self.input_keys[k] = left
            else:
                self.input_keys.pop(k, None)
                self.input_args.pop(k, None)

    def find(self, kind, key):
        st = self.tls.stack
        for i in range(len(st) - 1, -1, -1):
            if st[i].kind == kind and st[i].key == key:
                return i
        return -1

    def pop(self, kind, key):
        """Pops the innermost region (kind, key) and any left open above it."""
        if not self.on:
            return
        try:
            i = self.find(kind, key)
            if i >= 0:
                while len(self.tls.stack) > i:
                    self._pop_one()
        except Exception:
            pass

    def drop_stale(self):
        """Pops the module regions whose forward is no longer running (it raised, so its post
        hook never came): each module entry holds the frame of its call while it is open."""
        st = self.tls.stack
        if not st:
            return
        live = set()
        f = sys._getframe(1)
        while f is not None:
            live.add(id(f))
            f = f.f_back
        for i, e in enumerate(st):
            if e.kind == "module" and id(e.frame) not in live:
                while len(st) > i:
                    self._pop_one()
                return

    # -- storages --
    def storage_of(self, t):
        """The _Storage (base address, bytes, .device) of a tensor's storage that came from
        PyTorch's CPU allocator, or its CUDA one where CUDA tensors get tags (_cuda_tags); else
        None."""
        try:
            import torch
            dev = t.device
            if dev.type == "cpu":
                if t.is_shared():  # shared memory (a DataLoader worker's batch): no malloc's
                    return None
                device = _HOST
            elif dev.type == "cuda" and self.cuda_tags:
                device = _lp_device(dev)
                if device is None:
                    return None
            else:
                return None
            if t.layout != torch.strided or t.is_quantized:
                return None
            f = getattr(t, "untyped_storage", None) or getattr(t, "_storage", None)
            s = f() if f is not None else t.storage()
            ptr, n = s.data_ptr(), s.nbytes()
        except Exception:
            return None
        if not ptr or n <= 0 or ptr % _ALIGN:
            return None
        info = _Storage((ptr, n))
        info.device = device
        return info

    def tag_param(self, t, module, name, op):
        # A tensor looked at before, still at the same address, needs nothing: its storage is
        # the one tagged then (the tensor holds it alive). Every root call looks at all the
        # model's parameters, so this is the common case.
        try:
            addr = t.data_ptr()
            if _recalled(self.params_seen, t, addr):
                return
        except Exception:
            addr = None
        self._tag_param(t, module, name, op)
        if addr is not None:
            _remember(self.params_seen, t, addr, module, name)

    def _tag_param(self, t, module, name, op):
        info = self.storage_of(t)
        if info is None:
            return
        ptr = info[0]
        self.param_keys.add(ptr)
        old = self.tagged_params.get(ptr)
        if old is not None and old() is not None:
            return
        self.tagged_params[ptr] = weakref.ref(t)
        try:
            self._tag_tensor(t, info, PARAMETER, op, module, name, t.requires_grad)
        except Exception:
            pass

    def _tag_tensor(self, t, info, cat, op, module, detail, grad):
        """Tags the storage of tensor `t` (info: storage_of(t)) as a new buffer of category
        `cat`; recording standalone, the tag is taken back when `t` dies (under the preload the
        storage's free says so)."""
        self.lib.tag_new(info[0], info[1], cat, op, module, detail, grad, info.device)
        if self.lib.mode == "standalone":
            weakref.finalize(t, self._untag_quiet, info[0], info[1], cat, info.device)

    def _untag_quiet(self, ptr, n, cat, device=_HOST):
        try:
            if self.on:
                self.lib.untag(ptr, n, cat, device)
        except Exception:
            pass

    def tag_params(self, m):
        if m.module is None:
            return
        for mod_name, mod in m.module.named_modules():
            path = m.path(mod_name)
            for pname, p in mod.named_parameters(recurse=False):
                if p is not None:
                    self.tag_param(p, path, pname, "parameter")
            for bname, b in mod.named_buffers(recurse=False):
                if b is not None:
                    self.tag_param(b, path, bname, "buffer")

    def tag_grads(self):
        """After backward: each parameter's .grad storage becomes GRADIENT, once."""
        if not self.on:
            return
        for m in list(self.models.values()) + list(self.auto_roots.values()):
            if m.module is None:
                continue
            for mod_name, mod in m.module.named_modules():
                path = m.path(mod_name)
                for _pname, p in mod.named_parameters(recurse=False):
                    g = getattr(p, "grad", None)
                    if g is None:
                        continue
                    info = self.storage_of(g)
                    if info is None:
                        continue
                    prev = self.grad_tags.get(id(p))
                    if prev is not None and prev[0] == info[0] and prev[1]() is g:
                        continue
                    self.grad_tags[id(p)] = (info[0], weakref.ref(g))
                    try:
                        self._tag_tensor(g, info, GRADIENT, "accumulate_grad", path,
                                         "[%s]" % ",".join(str(d) for d in g.shape),
                                         self.grad_mode()[0])
                    except Exception:
                        pass

    def tag_optimizer_state(self, opt):
        """After a step or a load_state_dict of optimizer `opt`: the tensors of its state
        (SGD's momentum buffers, Adam's moments) become OPTIMIZER_STATE, each once, op
        `Adam.exp_avg` (the optimizer's class and the state's key), module and name those of the
        parameter it belongs to."""
        import torch
        cls = type(opt).__name__
        for p, state in list(getattr(opt, "state", {}).items()):
            named = _recalled(self.params_seen, p)
            module, pname = named[2:] if named else ("", "")
            for key, v in list(state.items()) if isinstance(state, dict) else ():
                if not isinstance(v, torch.Tensor):
                    continue
                addr = v.data_ptr()
                if _recalled(self.state_seen, v, addr):
                    continue
                info = self.storage_of(v)
                if info is None:
                    continue
                try:
                    _remember(self.state_seen, v, addr)
                    self._tag_tensor(v, info, OPTIMIZER_STATE, "%s.%s" % (cls, key), module,
                                     pname, False)
                except Exception:
                    pass

    # -- saved tensors --
    def pack(self, t):
        try:
            return self._pack(t)
        except Exception:
            return t

    def _pack(self, t):
        """The saved-tensor pack hook. Its bookkeeping is the helper's own memory (own_begin); the
        tensor the graph keeps is detached, as PyTorch's SavedVariable keeps an op's output: it
        would otherwise hold its own graph node in a reference cycle that only the garbage
        collector breaks. The detached copy is made after the retag, so that the allocation it
        makes comes after the tag."""
        fn = t.grad_fn
        lib = self.lib
        lib.own_begin()
        try:
            packed = _Packed(self._saved_key(t, fn), t)
        finally:
            lib.own_end()
        packed.t = t.detach() if fn is not None else t
        return packed

    def _saved_key(self, t, fn):
        """Counts a save of t's storage and tags the storage saved at its first save (a model's
        input: once the program lets go of it, promote_dropped_inputs); returns the storage key,
        or None for tensors the program holds anyway."""
        # After uninstall() the hooks pushed on every thread stay there: they tag nothing then
        uninstalled = self.saves_all and not self.patches
        info = self.storage_of(t) if self.on and not uninstalled else None
        if info is None:
            return None
        ptr, n = info
        if ptr in self.param_keys or (fn is None and t.requires_grad) or _tracing():
            return None  # parameters, buffers, leaves: held by the program anyway; a jit trace
        mods = self.tls.modules
        module = mods[-1] if mods else ""
        with self.lock:
            e = self.saved.get(ptr)
            if e is not None:
                e.count += 1
                if fn is None and e.arg is not None and e.arg() is t:
                    e.direct += 1  # the save holds t itself (_pack detaches only outputs)
                return ptr
            op = "leaf" if fn is None else _op_name(_maker(t, fn))
            detail = "[%s]" % ",".join(str(d) for d in t.shape)
            weight = _autocast_weight(fn, self.param_keys, any(
                e.kind == "ctx" and e.name == "autocast" for e in self.tls.stack))
            if weight is not None:  # autocast's cached copy of a weight, with a graph
                op = AUTOCAST_WEIGHT_CAST
                detail = "%s copy of %s %s" % (str(t.dtype).replace("torch.", ""),
                                               str(weight.dtype).replace("torch.", ""), detail)
            where = _user_lines(sys._getframe(3))
            if where:
                detail += " at " + where
            e = self.saved[ptr] = _SavedEntry(n, op, module, detail, info.device)
            e.where = where
            self.saved_count += 1
            if ptr in self.input_keys:  # the model's input: the program's, for now
                e.tagged = False
                if fn is None:
                    e.op = "input"
                e.arg = self.input_args.get(ptr)
                if e.arg is not None:  # an input that owns its storage: promotable
                    e.direct = 1 if fn is None and e.arg() is t else 0
                    self.unpromoted.add(ptr)
                return ptr
            if fn is None and module:  # tagged by its saver when the module returns
                e.tagged = False
                self.tls.leaves.append((weakref.ref(t), ptr, module))
                return ptr
            self._count_saved(e)
        self._tag_saved(ptr, e)
        return ptr

    def _count_saved(self, e):
        """Adds a storage now tagged saved to the per-module figures (under self.lock)."""
        module, n = e.module, e.nbytes
        self.saved_live[module] = self.saved_live.get(module, 0) + n
        self.saved_live_total += n
        if self.saved_live_total > self.saved_peak_total:
            self.saved_peak_total = self.saved_live_total
            self.saved_peak = {k: v for k, v in self.saved_live.items() if v}
        if self.saved_cur is not None:
            self.saved_cur[module] = self.saved_cur.get(module, 0) + n
        w = self.watch
        if w is not None:
            b, first = w["saved_modules"].get(module, (0, e.where))
            w["saved_modules"][module] = (b + n, first)

    def _tag_saved(self, ptr, e):
        try:
            # A tensor is only ever saved while grad is on (the pack hook itself runs with grad
            # disabled), so the tag's grad flag is true.
            if self.lib.mode == "preload":
                self.lib.retag(ptr, e.nbytes, OTHER, SAVED, e.op, e.module, e.detail, True,
                               e.device)
            else:
                self.lib.tag_new(ptr, e.nbytes, SAVED, e.op, e.module, e.detail, True, e.device)
        except Exception:
            pass

    def name_leaf_saves(self, module, output):
        """Tags the saves without grad_fn made directly in the forward of `module` (a path) that
        just returned `output` (or, output None, every one left: a forward that raised): a
        non-differentiable output of an op (max-pool indices) by that op, whose graph node saved
        it, found from the output's graph (_savers), else `leaf` (a constant, or a tensor made
        where grad was off). A tensor already gone went with its graph: nothing to tag."""
        tls = self.tls
        mine, rest = [], []
        for x in tls.leaves:  # (weakrefs compare their tensors: split by module, not by value)
            (mine if output is None or x[2] == module else rest).append(x)
        if not mine:
            return
        tls.leaves = rest
        found = (_savers(output, {ptr for _, ptr, _ in mine}, self.storage_of)
                 if output is not None else {})
        tagged = []
        with self.lock:
            for ref, ptr, _ in mine:
                t, e = ref(), self.saved.get(ptr)
                if t is None or e is None or e.tagged:
                    continue
                e.op = found.get(ptr, "leaf")
                e.tagged = True
                self._count_saved(e)
                tagged.append((ptr, e))
        for ptr, e in tagged:
            self._tag_saved(ptr, e)

    def promote_dropped_inputs(self):
        """A model's input that a live graph saved was the program's; at the model's next call,
        the ones the program no longer refers to (the input tensor gone, or held only by the
        graph's saves) are kept by the graph alone: tagged saved from now on, as an activation
        (the graph of `total = total + model(x).sum()` keeps every batch x)."""
        if not self.unpromoted:
            return
        promoted = []
        with self.lock:
            for ptr in list(self.unpromoted):
                e = self.saved.get(ptr)
                if e is None or e.tagged:
                    self.unpromoted.discard(ptr)
                    continue
                if ptr in self.input_keys:
                    continue  # an input of a forward running now
                obj = e.arg()
                # the references: obj here, getrefcount's argument, the graph's direct saves
                if obj is not None and sys.getrefcount(obj) - 2 > e.direct:
                    continue
                self.unpromoted.discard(ptr)
                e.tagged = True
                self._count_saved(e)
                promoted.append((ptr, e))
        for ptr, e in promoted:
            self._tag_saved(ptr, e)

    def saved_release(self, ptr, t=None):
        """A save of storage ptr ends (t: the tensor that save held)."""
        with self.lock:
            e = self.saved.get(ptr)
            if e is None:
                return
            if e.arg is not None and t is not None and e.arg() is t:
                e.direct -= 1
            e.count -= 1
            if e.count > 0:
                return
            del self.saved[ptr]
            if not e.tagged:
                self.unpromoted.discard(ptr)
                return
            left = self.saved_live.get(e.module, 0) - e.nbytes
            if left > 0:
                self.saved_live[e.module] = left
            else:
                self.saved_live.pop(e.module, None)
            self.saved_live_total -= e.nbytes
        if not self.on:
            return
        try:
            if self.lib.mode == "preload":
                self.lib.retag(ptr, e.nbytes, SAVED, ACTIVATION, e.op, e.module, e.detail, True,
                               e.device)
            else:
                self.lib.untag(ptr, e.nbytes, SAVED, e.device)
            self.retag_count += 1
        except Exception:
            pass


_S = _State()


def _note_saves_seen(value):
    if _S.on:
        _S.lib.note(b"saves_seen", value)


def _hooks_everywhere(s):
    """Pushes the saved-tensor hooks for good on this thread and on every thread started later
    (threading's bootstrap wrapped). False, pushing nothing, where that cannot be promised: the
    hooks or the program's own are already on here, or threading has no such bootstrap."""
    import torch
    boot = getattr(threading.Thread, "_bootstrap_inner", None)
    if boot is None or s.tls.hooks or s.tls.user_hooks:
        return False

    def push():
        if s.tls.hooks == 0:
            torch._C._autograd._push_saved_tensors_default_hooks(s.pack, _unpack)
            s.tls.hooks += 1

    @functools.wraps(boot)
    def _bootstrap_inner(self):
        try:
            push()
        except Exception:
            pass
        return boot(self)

    _patch(threading.Thread, "_bootstrap_inner", _bootstrap_inner, hide=True)
    push()
    return True


def _see_all_saves(s):
    """The saved-tensor hooks on in this thread and every thread started later, for the process's
    whole life, noted ("saves_seen" "all") once: a trace without saved tensors is then one where
    no graph kept a tensor, which check can judge even with nothing tagged (a program without
    modules, a DataLoader worker). Threads already running keep only their models' forwards
    (_enter_module pushes the hooks there): then the note says "some"."""
    if not s.on or s.saves_noted == os.getpid():
        return
    # a forked child of a process where they were on has them on too (in the thread that forked)
    if not (s.saves_all and s.tls.hooks) and not _hooks_everywhere(s):
        return
    s.saves_all = True
    s.saves_noted = os.getpid()
    _note_saves_seen(b"all" if threading.active_count() == 1 else
                     b"some (threads that ran before torch was imported)")


def _in_forked_child():
    """After a fork (os.register_at_fork): the child's trace holds none of the parent's tags, so
    the helper forgets the parent's saved tensors; then _see_all_saves."""
    s = _S
    if not s.on or "torch" not in sys.modules:
        return
    try:
        s.lock = threading.RLock()  # another thread of the parent may have held it at the fork
        s.saved.clear()
        s.saved_live.clear()
        s.saved_live_total = 0
        s.saved_cur = None
        s.input_keys.clear()
        s.input_args.clear()
        s.unpromoted.clear()
        _see_all_saves(s)
    except Exception:
        pass


def _wrap_process_bootstrap(cls):
    """multiprocessing's start of a child process: one started by spawn or forkserver (a
    DataLoader worker with multiprocessing_context="spawn") has attached the helper when it
    imported torch, and is a child like a forked one from the moment it bootstraps."""
    boot = cls._bootstrap

    @functools.wraps(boot)
    def _bootstrap(self, *a, **k):
        try:
            _see_all_saves(_S)
        except Exception:
            pass
        return boot(self, *a, **k)

    _patch(cls, "_bootstrap", _bootstrap, hide=True)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_forked_child)
# The op of a saved tensor that is autocast's cast copy of a weight (_autocast_weight).
AUTOCAST_WEIGHT_CAST = "autocast::weight_cast"
_VIEW_NODES = ("TBackward0", "TransposeBackward0", "PermuteBackward0", "ViewBackward0",
               "ExpandBackward0", "UnsqueezeBackward0", "AliasBackward0")


def _autocast_weight(fn, param_keys, in_autocast):
    """The weight (a parameter, by its storage base in param_keys) whose cast copy a saved tensor
    made by grad_fn `fn` is, if the program is in a torch.autocast block (in_autocast: inside the
    op that saves, autocast's dispatch key is excluded, so torch.is_autocast_*_enabled() says
    False) and `fn` is that cast (a _to_copy of the parameter, possibly seen through a view such
    as the transpose linear saves); else None. While grad is on autocast keeps such a copy of
    every weight in its cache until the autocast block ends, and autograd saves it."""
    for _ in range(4):
        if not in_autocast or fn is None:
            return None
        name = type(fn).__name__
        if name == "ToCopyBackward0":
            for nxt, _i in fn.next_functions:
                v = getattr(nxt, "variable", None)  # AccumulateGrad of a leaf
                if v is not None and v.data_ptr() in param_keys:
                    return v
            return None
        if name not in _VIEW_NODES or not fn.next_functions:
            return None
        fn = fn.next_functions[0][0]
    return None


_OP_RE = re.compile(r"Backward\d*$")
_CPP_NODE_RE = re.compile(r"CppNode<(.+)>$")
_WORD_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _op_name(fn):
    """The ATen operator that made a tensor, from its grad_fn's class, as PyTorch prints it:
    AddmmBackward0 -> aten::addmm, MaxPool2DWithIndicesBackward0 ->
    aten::max_pool2d_with_indices, NativeBatchNormBackward0 -> aten::native_batch_norm; for a
    custom torch.autograd.Function, its class (MyReLU), as PyTorch's profiler names it; for a C++
    one (an extension's, torchvision's roi_align), its qualified name
    (vision::ops::ROIAlignFunction)."""
    custom = getattr(fn, "_forward_cls", None)
    if isinstance(custom, type):
        return custom.__name__
    if type(fn).__name__ == "CppFunction":
        m = _CPP_NODE_RE.search(fn.name())
        if m:
            return m.group(1).replace("(anonymous namespace)::", "")
    name = _OP_RE.sub("", type(fn).__name__)
    return "aten::" + _WORD_RE.sub("_", name).lower() if name else "unknown"


def _class_name(module):
    """A module's class name; for a TorchScript module (torch.jit.script or trace), the class it
    was made from, marked: ResNet[jit], not RecursiveScriptModule (nor the name of the Python model
    it was traced from, which torch.jit.trace calls too)."""
    import torch
    if isinstance(module, torch.jit.ScriptModule):
        name = getattr(module, "original_name", None)
        if isinstance(name, str) and name:
            return name + "[jit]"
    return type(module).__name__


def _maker(t, fn):
    """The grad_fn of the op that made t's storage: a view's (t.flatten(1), t.view(...), t.t())
    owns no memory, so its base's op, the last that wrote the storage, made what a view saves.
    fn is t's own grad_fn when the base has none."""
    if t._is_view():
        base = t._base
        if base is not None and base.grad_fn is not None:
            return base.grad_fn
    return fn


def _user_lines(f, limit=4):
    """The program's own frames (not torch's or gradprof's) from frame f outwards, innermost
    first, as "file.py:LINE (function)" joined by " < ": where the program was when it happened."""
    out = []
    while f is not None and len(out) < limit:
        code = f.f_code
        if not _internal_file(code.co_filename):
            out.append("%s:%d (%s)" % (os.path.basename(code.co_filename), f.f_lineno,
                                       code.co_name))
        f = f.f_back
    return " < ".join(out)


def _unpack(p):
    """What backward gets back. PyTorch does not check the versions of tensors saved through
    saved_tensors_hooks, so the helper does what its SavedVariable would: a tensor changed in
    place since it was saved raises the same error, instead of a silently wrong gradient."""
    if not isinstance(p, _Packed):
        return p
    if p.t._version != p.version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            "inplace operation: %s is at version %d; expected version %d instead. Hint: enable "
            "anomaly detection to find the operation that failed to compute its gradient, with "
            "torch.autograd.set_detect_anomaly(True)." % (p.what, p.t._version, p.version))
    return p.t


class _Model:
    """A model the helper knows: instrumented (held strongly, as the program holds it) or
    attached (a module the program called outside any other module; held weakly, so that a
    module made and dropped per call is not kept alive)."""

    def __init__(self, module, name, weak=False):
        self._ref = weakref.ref(module) if weak else (lambda: module)
        self.weak = weak
        self.name = name
        self.handles = []
        self.paths = None  # id(submodule) -> dotted path, made at the first lookup
        self.calls = 0
        self.last_call = 0  # State.root_calls at its latest call (attached roots)
        self.last_call_at = {}  # a place in the program (_program_site) -> the same, from there
        self.stateful = None  # has parameters or buffers (_has_state), asked once
        self.owned = False  # an attached root named by its path in the module whose method calls it

    @property
    def module(self):
        return self._ref()

    def path(self, sub):
        return self.name + "." + sub if sub else self.name

    def lookup(self, mod):
        """The dotted path of submodule `mod` (its registered name), or None."""
        root = self.module
        if root is None:
            return None
        if self.paths is None or id(mod) not in self.paths:
            self.paths = {id(m): self.path(sub) for sub, m in root.named_modules()}
        return self.paths.get(id(mod))


_SAVER_NODES = 64  # graph nodes looked at per module return with saves to name


def _savers(output, wanted, storage_of):
    """{storage: op} for the storages of `wanted` (storage_of's keys) that a node of output's graph
    saves as an output of its own op, nearest nodes first, at most _SAVER_NODES of them:
    max_pool2d_with_indices's node saves its indices (`_saved_result1`), which have no grad_fn to
    name their op. An input without grad_fn that a node saves (`_saved_self`) was made by another
    op, or none: not named here. (What a node gives back is a new tensor on the saved storage.)"""
    import collections
    import torch
    found, seen = {}, set()
    todo = collections.deque(_graph_tensors(output, _SAVER_NODES) or ())
    while todo and len(seen) < _SAVER_NODES and len(found) < len(wanted):
        fn = todo.popleft()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for name in dir(fn):
            if not name.startswith("_saved_result"):  # its outputs: result, result1, ...
                continue
            try:
                v = getattr(fn, name)
                for x in v if isinstance(v, (list, tuple)) else (v,):
                    info = storage_of(x) if isinstance(x, torch.Tensor) else None
                    if info is not None and info[0] in wanted:
                        found.setdefault(info[0], _op_name(fn))
            except Exception:  # released, or not a tensor's
                continue
        todo.extend(n for n, _ in fn.next_functions if n is not None)
    return found


def _tensors_in(args):
    import torch
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, torch.Tensor):
                    yield b
        elif isinstance(a, dict):
            for b in a.values():
                if isinstance(b, torch.Tensor):
                    yield b


def _tracing():
    """True inside torch.jit.trace on this thread (_wrap_jit_trace: the tracing and the runs that
    check it, which are not the program's calls of its model) or while the tracer records (it
    would record every op the helper's hooks run)."""
    import torch
    return _S.tls.jit_trace > 0 or torch._C._get_tracing_state() is not None


def _wrap_jit_trace(jit):
    """torch.jit.trace and trace_module: the helper does nothing inside them (_tracing), so the
    graph a trace builds with grad on is not the program's saved memory, and the eager model
    run to check the trace does not become the model whose calls are iterations."""
    for name in ("trace", "trace_module"):
        orig = getattr(jit, name, None)
        if orig is None:
            continue

        def traced(*args, _orig=orig, **kwargs):
            tls = _S.tls
            tls.jit_trace += 1
            try:
                return _orig(*args, **kwargs)
            finally:
                tls.jit_trace -= 1

        functools.update_wrapper(traced, orig)
        _patch(jit, name, traced, hide=True)


def _enter_module(s, mod, path, root, args, frame):
    """A forward of `mod` (dotted `path`) begins; `root` is its _Model when this is the root
    module's call, else None. Pushes its region; a root's call also tags new parameters, installs
    the saved-tensor hooks and notes its inputs (an attached root's also marks an iteration and,
    in eval mode, an inference region)."""
    key = id(mod)
    if root is not None or s.find("module", key) >= 0:
        s.drop_stale()  # a forward that raised left its regions open
    s.emit_grad_mode()
    if root is not None:
        s.tag_params(root)  # parameters made or replaced since the last forward
        s.name_leaf_saves(None, None)  # left by a forward that raised
        if root.weak:
            _enter_attached_root(s, mod, root, args, frame)
        # inside the inference region the call opened, as the saves were made inside the last
        # one: a graph built in eval mode keeps them (forgot_no_grad counts them)
        s.promote_dropped_inputs()
    e = s.push("module", key, path, frame)
    if e is None or root is None:
        return
    inputs = {}
    for t in _tensors_in(args):
        info = s.storage_of(t)
        if info is not None and info[0] not in inputs:
            inputs[info[0]] = t
            # an input that owns its storage, or a view of all of it whose base nothing else
            # in Python holds (a flatten of a model's last output: the base has no Python
            # object, and getrefcount sees only the one made for it here): the program lets go
            # of the storage when it lets go of the tensor
            if (t.storage_offset() == 0 and info[1] == t.numel() * t.element_size() and
                    (t._base is None or sys.getrefcount(t._base) <= 1)):
                s.input_args[info[0]] = weakref.ref(t)
    e.inputs = tuple(inputs)
    for k in e.inputs:
        s.input_keys[k] = s.input_keys.get(k, 0) + 1
    tls = s.tls
    if tls.user_hooks:
        return  # the program's own hooks see the saves
    if tls.hooks == 0 and tls.hooks_off == 0:  # a thread without them (not attached, or older)
        import torch
        torch._C._autograd._push_saved_tensors_default_hooks(s.pack, _unpack)
        e.hooks = True
        tls.hooks += 1
    if not root.weak and not any(x.forward for x in tls.stack):
        e.forward = True  # saved_bytes_by_module("last"): an instrumented model's forward
        s.saved_cur = {}


def _exit_module(s, mod, output):
    key = id(mod)
    i = s.find("module", key)
    if i >= 0 and s.tls.leaves:
        s.name_leaf_saves(s.tls.stack[i].name, output)
    if i >= 0 and s.tls.stack[i].forward and s.saved_cur is not None:
        s.saved_last, s.saved_cur = s.saved_cur, None  # a complete forward
    s.pop("module", key)
    s.pop("attached", key)  # an attached root's inference region, if it pushed one
    s.emit_grad_mode()


def _make_hooks(m, mod, path, is_root):
    """The forward hooks of one module of an instrumented model."""
    def pre(module, args):
        try:
            if _S.on and not _tracing():
                _enter_module(_S, module, path, m if is_root else None, args, sys._getframe(1))
        except Exception:
            pass
        return None

    def post(module, args, output):
        try:
            if _S.on and not _tracing():
                _exit_module(_S, module, output)
        except Exception:
            pass
        return None

    return pre, post


# -- zero-code attachment: torch's global module hooks ------------------------------------------

_MAX_ATTACHED_ROOTS = 256  # distinct root modules followed (a program making modules per call)
_MAX_CALL_SITES = 256  # places in the program a root's calls are remembered from (last_call_at)


def _attached_root(s, mod, frame):
    """The _Model of `mod`, called outside any other module (from `frame`, its caller's): a model,
    named by its class (a second live model of the same class gets "#2", ...), or, when the
    forward of a module that holds it calls it, by that path (ResNet.layer1: the program called
    model.forward(x) itself, which runs no module hooks). Under the lock: threads calling one
    model at once get one _Model."""
    with s.lock:
        return _attach_root_locked(s, mod, frame)


def _attach_root_locked(s, mod, frame):
    m = s.auto_roots.get(id(mod))
    if m is not None and m.module is mod:
        return m
    if len(s.auto_roots) >= _MAX_ATTACHED_ROOTS:
        for k in [k for k, v in s.auto_roots.items() if v.module is None]:
            del s.auto_roots[k]
        if len(s.auto_roots) >= _MAX_ATTACHED_ROOTS:
            return None
    owned = _owner_in_caller(mod, frame)[0]
    base = owned or _class_name(mod)
    taken = {v.name for v in s.auto_roots.values() if v.module is not None}
    name, n = base, 1
    while name in taken:
        n += 1
        name = "%s#%d" % (base, n)
    m = s.auto_roots[id(mod)] = _Model(mod, name, weak=True)
    m.owned = owned is not None
    return m


def _has_state(mod):
    """True for a module with a parameter or a buffer: a model, not a transform (torchvision's
    Resize and Normalize are modules too, called once per sample by a data pipeline)."""
    return (next(mod.parameters(), None) is not None or
            next(mod.buffers(), None) is not None)


def _primary(s, mod, root, previous):
    """Whether the call of attached root `mod` (`root`; `previous`: State.root_calls at its
    previous call from the same place in the program, 0 for none) is one of the calls that are
    the program's iterations, making it the primary root if it should be: the first root called
    that has parameters or buffers (root.stateful), or, once the primary has not been called
    since this root's previous call from here, a stateful root the program calls itself (not
    `owned`) called again from here: a model run once before the loop (prototypes, a warm-up)
    leaves the loop's model the iterations, and a second model called twice in the loop's first
    pass (a student on clean and on noisy input, after its teacher) does not take them."""
    if s.primary == id(mod):
        return True
    if not root.stateful:
        return False
    old = s.auto_roots.get(s.primary) if s.primary is not None else None
    if old is None or old.module is None or (
            not root.owned and previous and old.last_call < previous):
        s.primary = id(mod)
        s.sites_since_mark.clear()
        return True
    return False


def _owner_in_caller(mod, frame):
    """(owner path, frame) when `frame`, or one of the two frames outside it past torch's and
    gradprof's own (_internal_file), runs a method of a module that has `mod` among its submodules:
    its forward (the program called model.forward(x) itself, which runs no module hooks), or any
    method of the program's own code (a generate() that calls the submodules); else (None, None).
    The path is "Owner.path"."""
    import torch
    for _ in range(3):
        if frame is None:
            return None, None
        code = frame.f_code
        internal = _internal_file(code.co_filename)
        if (code.co_argcount and code.co_varnames[0] == "self" and
                (code.co_name == "forward" or not internal)):
            scope = frame.f_locals
            owner = scope.get("self")
            _forget_locals(frame, scope)
            if not isinstance(owner, torch.nn.Module) or owner is mod:
                return None, None
            for path, sub in owner.named_modules():
                if sub is mod and path:
                    return "%s.%s" % (_class_name(owner), path), frame
            return None, None
        if not internal:
            return None, None
        frame = frame.f_back
    return None, None


def _starts_iteration(s, root, frame, site):
    """Whether this call of the primary root (from `frame`, its caller's; at `site`,
    _program_site) starts an iteration.
    Of a submodule that a method of its owner calls (named Owner.path), only the calls from the
    place in that method where it first called it do: a generate() that embeds the prompt, then
    each new token in a loop, is one iteration a call. Of a model, a call from a place in the
    program that already called it since the last iteration began does (the first call too): a
    loop body that runs the model twice (test-time augmentation: model(x), model(x.flip(3))) is
    one iteration a pass, and a warm-up call before the loop joins the loop's first pass."""
    if root.owned:
        owner = _owner_in_caller(root.module, frame)[1]
        if owner is not None:
            place = s.iteration_places.setdefault(owner.f_code, owner.f_lasti)
            return place == owner.f_lasti
    seen = s.sites_since_mark
    new = not seen or site in seen
    if new:
        seen.clear()
    seen.add(site)
    return new


def _program_site(frame):
    """Where the program is, from `frame` outwards: (code, instruction) of its four innermost own
    frames (call sites: model(x) and model(x.flip(3)) on one line are two, and so are two calls
    of a predict(x) of its own that calls the model), or of the last frame looked at when the
    sixteen innermost are all torch's or the libraries' (map(model, xs) from a pool)."""
    site, last = [], None
    for _ in range(16):
        if frame is None or len(site) == 4:
            break
        last = (frame.f_code, frame.f_lasti)
        if not _internal_file(frame.f_code.co_filename):
            site.append(last)
        frame = frame.f_back
    return tuple(site) if site else last


def _enter_attached_root(s, mod, root, args, frame):
    """An attached root's call: the program's iteration (a mark at each call of the primary
    root, _primary, that _starts_iteration, unless the program marks iterations itself), who
    keeps graphs of earlier calls alive (and which of them the call takes back in: `args`), and
    an inference region around a call in eval mode (model.eval()), unless the program has an
    inference region open. A graph such a call builds that a backward pass then uses (training
    in eval mode, input gradients) is not a finding: the engine takes its buffers back."""
    root.calls += 1
    if root.stateful is None:
        root.stateful = _has_state(mod)
    s.root_calls += 1
    root.last_call = s.root_calls
    previous = 0
    site = _program_site(frame) if root.stateful else None
    if site is not None:
        previous = root.last_call_at.get(site, 0)
        if len(root.last_call_at) >= _MAX_CALL_SITES and not previous:
            root.last_call_at.clear()
        root.last_call_at[site] = s.root_calls
    tls = s.tls
    w = s.watch
    if w is not None:
        if w["model_id"] is None and root.stateful:  # a model, not a transform
            w["model_id"], w["model"] = id(mod), root.name
        if w["model_id"] == id(mod):
            w["live_at_calls"].append(s.saved_live_total)
    if s.saved_live_total > 0:
        _note_holders(s, "call %s#%d" % (root.name, root.calls), (args, tls.call_kwargs), mod)
    if (_primary(s, mod, root, previous) and not s.user_marks
            and _starts_iteration(s, root, frame, site)):
        s.iterations += 1
        s.lib.lib.lp_mark(_b("iter %d" % s.iterations))
    if not mod.training and not any(e.name == REGION_INFERENCE for e in tls.stack):
        s.push("attached", id(mod), REGION_INFERENCE)


def _global_pre(module, args):
    s = _S
    try:
        if not s.on or id(module) in s.explicit or _tracing():
            return None
        tls = s.tls
        if not tls.modules:  # outside any module on this thread: a model's call
            root = _attached_root(s, module, sys._getframe(2))
            if root is None:
                return None
            tls.roots.append(root)
            _enter_module(s, module, root.name, root, args, sys._getframe(1))
            return None
        root = tls.roots[-1] if tls.roots else None
        path = root.lookup(module) if root is not None else None
        if path is None:
            path = "%s.%s" % (tls.modules[-1], _class_name(module))
        _enter_module(s, module, path, None, args, sys._getframe(1))
    except Exception:
        pass
    return None


def _global_post(module, args, output):
    s = _S
    try:
        if not s.on or id(module) in s.explicit or _tracing():
            return None
        _exit_module(s, module, output)
        tls = s.tls
        if tls.roots and tls.roots[-1].module is module and not tls.modules:
            tls.roots.pop()
    except Exception:
        pass
    return None


def attach():
    """Attaches the helper to every module the program calls, with no change to the program:
    torch's global forward hooks give each module a region named by its path in the model that
    called it (the model, a module called outside any other, is named by its class), the
    model's parameters their tags, its forward the saved-tensor hooks; the calls of the primary
    model (_primary) mark iterations ("iter N", _starts_iteration), a call in eval mode opens an
    inference region, and graphs of earlier calls still alive are traced to the names that hold
    them (notes "holder").
    `gradprof run` attaches it when the program imports torch (the startup hook); instrumented
    models (instrument) keep their own hooks. Returns True if it is attached."""
    try:
        if not _S.ensure_lib():
            return False
        with _S.lock:
            if _S.attached:
                return True
            if not _S.patches:
                _install_globals()
            import torch.nn.modules.module as mm
            _S.global_handles = [mm.register_module_forward_pre_hook(_global_pre),
                                 mm.register_module_forward_hook(_global_post)]
            _S.attached = True
            _see_all_saves(_S)
        _S.emit_grad_mode()
        atexit.register(_note_holders_at_exit)
        return True
    except Exception as e:
        _warn("attach failed, continuing without it (%s)" % e)
        return False


def _note_holders_at_exit():
    try:
        if _S.on:
            _S.promote_dropped_inputs()  # the last call's, if only its graph keeps them
        if _S.on and _S.saved_live_total > 0:
            _note_holders(_S, "exit")
    except Exception:
        pass


# -- who keeps a graph alive ------------------------------------------------------------------

_HOLDER_NAMES = 2000       # names looked at per scope
_HOLDER_ITEMS = 10000      # items looked at per container
_HOLDER_NODES = 20000      # graph nodes walked per scan
_HOLDER_DEPTH = 3          # containers looked into within a name's value
_INTERNAL = None


def _internal_file(filename):
    """True for files that are not the program's own: torch's, gradprof's, and the interpreter's
    libraries (the standard library, site- and dist-packages: pytest, numpy, ...)."""
    global _INTERNAL
    if _INTERNAL is None:
        import sysconfig
        import torch
        dirs = {os.path.dirname(os.path.abspath(torch.__file__)),
                os.path.dirname(os.path.abspath(__file__))}
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            try:
                dirs.add(os.path.abspath(sysconfig.get_paths()[key]))
            except (KeyError, OSError):
                pass
        _INTERNAL = tuple(sorted(d + os.sep for d in dirs))
    return (filename.startswith(_INTERNAL) or filename.startswith("<") or
            "/site-packages/" in filename or "/dist-packages/" in filename)


_STORE_LINES = {}  # code -> {name: sorted lines where the code stores it or puts into it}
_STORES = ("STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR")
_LOADS = ("LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_ATTR")
# what a nested function's code reads or writes of the enclosing code's names (its own
# locals, LOAD_FAST, are other variables); attributes are not scoped
_OUTER = ("STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_ATTR")
# the methods that put something into a container: `outputs.append(out)` keeps `out`
_MUTATORS = frozenset(("append", "extend", "insert", "add", "update", "appendleft",
                       "extendleft", "setdefault", "put", "put_nowait"))


def _store_lines(code, name):
    """The lines where `code` stores `name` (a variable or, for STORE_ATTR, an attribute) or puts
    something into it (`name.append(x)`, `self.name.extend(xs)`, `name[key] = x` with a name or a
    constant for key: how a list or dict of outputs gets each one), sorted; in the functions
    `code` defines too (a hook's lambda appending to the list), for the names they share with
    it. Which of several stores ran last is not known without tracing the program, so all
    count. One pass over the code's instructions finds the stores of every name (cached per
    code object)."""
    table = _STORE_LINES.get(code)
    if table is None:
        import dis
        found, todo = {}, [(code, False)]
        while todo:
            c, nested = todo.pop()
            cur, prev, before = None, None, None  # the last two instructions
            for ins in dis.get_instructions(c):
                if ins.starts_line is not None:
                    cur = ins.starts_line
                if isinstance(ins.argval, types.CodeType):
                    todo.append((ins.argval, True))
                if cur is not None and (not nested or ins.opname in _OUTER):
                    if ins.opname in _STORES:
                        found.setdefault(ins.argval, set()).add(cur)
                # `name.append(x)`, and `name[key] = x` with a name or a constant for key
                if ins.opname in ("LOAD_METHOD", "LOAD_ATTR") and ins.argval in _MUTATORS:
                    into = prev
                elif (ins.opname == "STORE_SUBSCR" and prev is not None and
                      (prev.opname in _LOADS or prev.opname == "LOAD_CONST")):
                    into = before
                else:
                    into = None
                if (into is not None and into.opname in _LOADS and cur is not None and
                        (not nested or into.opname in _OUTER)):
                    found.setdefault(into.argval, set()).add(cur)
                before, prev = prev, ins
        table = {k: sorted(v) for k, v in found.items()}
        if len(_STORE_LINES) < 4096:
            _STORE_LINES[code] = table
    return table.get(name, [])


def _where(filename, lines, fallback):
    """"file.py:55,57" (up to three lines), or "file.py:FALLBACK" when there are none."""
    shown = ",".join(str(n) for n in lines[:3]) + (",..." if len(lines) > 3 else "")
    return "%s:%s" % (os.path.basename(filename), shown or fallback)


def _stores(code, name, fallback):
    """Where `code` stores `name`: "file.py:55,57", or "file.py:FALLBACK" when it never does."""
    return _where(code.co_filename, _store_lines(code, name), fallback)


def _program_class(cls):
    """True for a class the program defined (in __main__ or a file of its own, not a library's)."""
    if cls.__module__ == "__main__":
        return True
    f = getattr(sys.modules.get(cls.__module__), "__file__", None)
    return f is not None and not _internal_file(f)


def _program_object_attrs(v):
    """The attributes of an instance of a class the program defined (a meter, an evaluator,
    `self` in its methods), or None for anything else: a library's object (a function's class
    is a builtin), a class, a dataclass (a container, _contents) or a torch.nn.Module (its
    attributes are looked at as a model's modules, and its submodules hold no graph of their
    own)."""
    import torch
    d = getattr(v, "__dict__", None)
    if (not isinstance(d, dict) or isinstance(v, (type, torch.nn.Module)) or
            dataclasses.is_dataclass(v) or not _program_class(type(v))):
        return None
    return list(d.items())[:_HOLDER_NAMES]


def _attr_stores(cls, attr):
    """Where the methods of cls (and of its program-defined bases) store attribute `attr`:
    "meter.py:9", "" when none does (the attribute is set from outside)."""
    lines, filename = set(), None
    for klass in cls.__mro__:
        if not _program_class(klass):
            continue
        for fn in vars(klass).values():
            code = getattr(fn, "__code__", None)
            found = _store_lines(code, attr) if code is not None else ()
            if found and filename in (None, code.co_filename):
                filename = code.co_filename
                lines.update(found)
    return _where(filename, sorted(lines), "") if filename else ""


def _graph_nodes(fns, seen, budget):
    """Walks the graph from grad_fns `fns`, adding unseen nodes to `seen`; returns how many it
    added (at most `budget`): the nodes of the graph those tensors keep alive. A node's Python
    object lives only while referenced and its id can then be reused by another node's, so the
    walk keeps every object it saw until it ends."""
    stack, added, keep = list(fns), 0, []
    while stack and added < budget:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        keep.append(fn)
        added += 1
        for nxt, _ in getattr(fn, "next_functions", ()):
            if nxt is not None and id(nxt) not in seen:
                stack.append(nxt)
    return added


def _contents(v):
    """What a container holds (a list, tuple, set, deque; a dict's values, which covers
    HuggingFace's ModelOutput) or a dataclass's fields (a model's output object); None for
    anything else."""
    if isinstance(v, (list, tuple, set, frozenset)) or type(v).__name__ == "deque":
        return v
    if isinstance(v, dict):
        return v.values()
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return [getattr(v, f.name, None) for f in dataclasses.fields(v)]
    return None


def _graph_tensors(v, limit):
    """The grad_fns of the tensors with a graph in v: a tensor, or what containers and output
    objects hold, up to _HOLDER_DEPTH of them deep (outputs kept in a dict, a cache of (key,
    value) pairs in a list); at most `limit` values looked at. None when v holds none."""
    import torch
    fns, todo, looked = [], [(v, 0)], 0
    while todo and looked < limit:
        x, depth = todo.pop()
        looked += 1
        if isinstance(x, torch.Tensor):
            if x.grad_fn is not None:
                fns.append(x.grad_fn)
            continue
        items = _contents(x) if depth < _HOLDER_DEPTH else None
        for i, y in enumerate(items or ()):
            if i >= limit - looked:
                break
            todo.append((y, depth + 1))
    return fns or None


def _holders(s, inputs=(), called=None):
    """The names that hold tensors with a graph: locals and globals of the program's frames (not
    torch's or gradprof's), attributes of the program's own objects they name (`meter.sum`,
    `self.outputs`), attributes of the attached and instrumented models' modules, and the tensors
    within their values (_graph_tensors). A name that holds a tensor with a graph among `inputs`
    (the positional and the keyword arguments of the model's call being made) is kind "carried":
    the program passes the graph of an earlier call back in (an RNN's state, a key/value cache
    not detached), so each call's graph reaches all the earlier ones; so is a tensor or tuple
    attribute of the model being called (`called`) whose graph has more nodes at each of its
    calls than at the one before (a key/value cache the model keeps on itself; a list that
    grows by appending is not). Returns dicts, carried ones first, then those an earlier scan
    found too among the ones that reach at least half the most graph nodes (graphs kept from
    one call to the next were held by a name some scan saw; a name made later from it, such as
    `torch.cat(outputs)` after the loop, reaches the same nodes but kept nothing across the
    calls), then the most graph nodes first. Cost is bounded by _HOLDER_NAMES, _HOLDER_ITEMS,
    _HOLDER_DEPTH and _HOLDER_NODES."""
    out = []
    budget = [_HOLDER_NODES]
    objects = set()  # ids of the program's objects whose attributes were looked at
    carried_fns = [fn for v in inputs for fn in _graph_tensors(v, _HOLDER_ITEMS) or ()]
    carried = {id(fn) for fn in carried_fns}  # carried_fns keeps them alive: their ids stay

    def consider(name, kind, where, v, state=False):
        """`where()` says where the program stores `v` (called only for a name that holds a
        graph); `state`: v is an attribute of the model being called."""
        fns = _graph_tensors(v, _HOLDER_ITEMS)
        if not fns:
            return
        nodes = _graph_nodes(fns, set(), budget[0])
        budget[0] -= nodes
        grew = False
        if state and (_is_tensor(v) or isinstance(v, tuple)):  # a list grows by appending
            grew = nodes > s.attribute_nodes.get(name, nodes)
            s.attribute_nodes[name] = nodes
        if grew or (carried and any(id(fn) in carried for fn in fns)):
            kind = "carried"
        out.append({"name": name, "kind": kind, "where": where(), "tensors": len(fns),
                    "container": type(v).__name__ if not _is_tensor(v) else "",
                    "grad_fn": type(fns[0]).__name__, "nodes": nodes})

    def scan(scope, kind, code, lineno):
        """A scope's names (stored by `code`, or the function that gives it) and the attributes
        of the program's objects they name (each object once)."""
        def where(var):
            c = code() if callable(code) else code
            return _stores(c, var, lineno) if c is not None else ""

        for i, (name, v) in enumerate(list(scope.items())):
            if i >= _HOLDER_NAMES:
                break
            consider(name, kind, functools.partial(where, name), v)
            attrs = _program_object_attrs(v) if id(v) not in objects else None
            if attrs is not None:
                objects.add(id(v))
                for attr, av in attrs:
                    consider(name + "." + attr, "attribute",
                             functools.partial(_attr_stores, type(v), attr), av)

    main = sys.modules.get("__main__")
    main_globals = vars(main) if main is not None else None
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not _internal_file(code.co_filename):
            top = code.co_name == "<module>"
            if top:
                scan(f.f_globals, "global", code, f.f_lineno)
                if f.f_globals is main_globals:
                    main_globals = None
            else:
                scope = f.f_locals
                scan(scope, "local", code, f.f_lineno)
                _forget_locals(f, scope)
        f = f.f_back
    if main_globals is not None:  # at exit, the program's frames are gone; its globals stay
        scan(main_globals, "global", functools.partial(_main_code, main), 0)
    models = list(s.models.values()) + list(s.auto_roots.values())
    for m in models:
        root = m.module
        if root is None:
            continue
        for sub, mod in root.named_modules():
            fwd = getattr(type(mod), "forward", None)
            code = getattr(fwd, "__code__", None)
            for name, v in list(vars(mod).items())[:_HOLDER_NAMES]:
                if name in ("_parameters", "_buffers", "_modules") or name.endswith("_hooks"):
                    continue
                consider(m.path(sub) + "." + name, "attribute",
                         functools.partial(_stores, code, name, code.co_firstlineno)
                         if code is not None else str, v, root is called)
    most = max((h["nodes"] for h in out), default=0)
    out.sort(key=lambda h: (h["kind"] != "carried",
                            not (h["name"] in s.holder_names and 2 * h["nodes"] >= most),
                            -h["nodes"]))
    s.holder_names.update(h["name"] for h in out)
    return out


@functools.lru_cache(maxsize=1)
def _main_code(main):
    """The code of the program's main file, compiled again (at exit its frame is gone), for the
    lines that store a global; None where there is no file to read (python -c). CPython removes
    __main__.__file__ once the file has run: then sys.argv[0] names it."""
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else None)
    try:
        with open(path, "rb") as f:
            return compile(f.read(), path, "exec", dont_inherit=True)
    except Exception:
        return None


def _forget_locals(f, scope):
    """Empties the copy of a function's locals that reading f.f_locals made (Python 3.11 and
    3.12 keep it on the frame, with a reference to every local, until the next read): else a
    tensor the program deletes right after this look would live on in it. Only that copy: a
    namespace that is the scope itself (a class body, exec) and 3.13's write-through proxy are
    left alone. CPython refreshes the copy from the frame before anything reads it again, except
    under a Python trace function (pdb), which writes it back into the frame when it returns: a
    model called at pdb's prompt would empty the frame being debugged. So not while one runs."""
    if (type(scope) is dict and f.f_code.co_flags & _CO_OPTIMIZED and f.f_trace is None and
            sys.gettrace() is None):
        scope.clear()


_CO_OPTIMIZED = 0x0001  # inspect.CO_OPTIMIZED: a function's frame, whose locals are copied


def _is_tensor(v):
    import torch
    return isinstance(v, torch.Tensor)


def _note_holders(s, when, inputs=(), called=None):
    """Finds who keeps graphs alive (_holders; `called`, `inputs`: the model being called and
    the arguments of that call), keeps the list (last_holders) and writes one note "holder" per
    name."""
    s.lib.own_begin()
    try:
        s.last_holders = _holders(s, inputs, called)[:16]
    finally:
        s.lib.own_end()
    for h in s.last_holders:
        s.lib.note(b"holder", _b("%s\t%s\t%s\t%d\t%s\t%s\t%d\t%s" % (
            h["name"], h["kind"], h["where"], h["tensors"], h["container"], h["grad_fn"],
            h["nodes"], when)))


def _remember(table, t, *value):
    """table[id(t)] = (a weak reference to t, *value), removed when t dies (an id is reused
    then); nothing for a tensor that cannot be weakly referenced (looked at every time)."""
    key = id(t)

    def forget(ref):
        if table.get(key, (None,))[0] is ref:
            del table[key]
    try:
        table[key] = (weakref.ref(t, forget),) + value
    except TypeError:
        pass


def _recalled(table, t, addr=None):
    """What _remember stored for t: (weak reference, address, ...), or None when nothing is
    stored for t or, given `addr`, t has moved to another address since."""
    entry = table.get(id(t))
    if entry is None or entry[0]() is not t or (addr is not None and entry[1] != addr):
        return None
    return entry


# -- grad-mode context managers, backward, the program's own saved-tensor hooks ----------------

def _patch(obj, attr, new, hide=False):
    """Sets obj.attr to new, restored by _uninstall_globals. hide: new is a wrapper around the
    program's own code (a module call, a thread's run): its frames are left out of the recorded
    stacks (lp_hide_python_code), where the one around Module.__call__ would otherwise take a
    place of the stack's depth at every module level."""
    _S.patches.append((obj, attr, obj.__dict__.get(attr, _MISSING) if isinstance(obj, type)
                       else getattr(obj, attr)))
    setattr(obj, attr, new)
    lib = _S.lib.lib if _S.lib else None
    if hide and hasattr(lib, "lp_hide_python_code"):  # newer libprof
        lib.lp_hide_python_code.restype = None
        lib.lp_hide_python_code.argtypes = [ctypes.c_void_p]
        lib.lp_hide_python_code(id(new.__code__))


_MISSING = object()


def _ctx_region_name(cls_name, self):
    if cls_name == REGION_INFERENCE_MODE:
        return REGION_INFERENCE_MODE if getattr(self, "mode", True) else REGION_INFERENCE_MODE_OFF
    return cls_name


def _wrap_ctx(cls, cls_name):
    enter, exit_ = cls.__enter__, cls.__exit__

    @functools.wraps(enter)
    def __enter__(self, *a, **k):
        r = enter(self, *a, **k)
        try:
            _S.push("ctx", id(self), _ctx_region_name(cls_name, self))
            _S.emit_grad_mode()
        except Exception:
            pass
        return r

    @functools.wraps(exit_)
    def __exit__(self, *a, **k):
        try:
            _S.pop("ctx", id(self))
        except Exception:
            pass
        r = exit_(self, *a, **k)
        _S.emit_grad_mode()
        return r

    _patch(cls, "__enter__", __enter__)
    _patch(cls, "__exit__", __exit__)


def _wrap_set_grad_enabled(cls):
    init, exit_ = cls.__init__, cls.__exit__

    @functools.wraps(init)
    def __init__(self, *a, **k):
        init(self, *a, **k)
        _S.emit_grad_mode()

    @functools.wraps(exit_)
    def __exit__(self, *a, **k):
        r = exit_(self, *a, **k)
        _S.emit_grad_mode()
        return r

    _patch(cls, "__init__", __init__)
    _patch(cls, "__exit__", __exit__)


def _wrap_user_hooks(cls):
    enter, exit_ = cls.__enter__, cls.__exit__

    @functools.wraps(enter)
    def __enter__(self, *a, **k):
        r = enter(self, *a, **k)
        _S.tls.user_hooks += 1
        # the program's hooks now see the saves the helper's would have; a non-reentrant
        # checkpoint's keep no tensor: what its graph keeps, its inputs, _wrap_checkpoint counts
        if _S.saves_all and not _S.tls.checkpoint:
            _S.saves_all = False
            _note_saves_seen(b"some (the program's own saved_tensors_hooks)")
        return r

    @functools.wraps(exit_)
    def __exit__(self, *a, **k):
        _S.tls.user_hooks = max(0, _S.tls.user_hooks - 1)
        return exit_(self, *a, **k)

    _patch(cls, "__enter__", __enter__)
    _patch(cls, "__exit__", __exit__)


_VERSION_RE = re.compile(r"\[torch\.\w+ \[([\d, ]*)\]\], which is output \d+ of (\w+),")


def _wrap_checkpoint(module):
    """torch.utils.checkpoint.checkpoint. The non-reentrant kind (use_reentrant=False) runs the
    function under saved-tensor hooks of its own, which keep no tensor (it recomputes them at
    backward), and keeps the function's tensor arguments for that until the graph goes: those
    are what its graph holds, counted as saves of the graph of each output (a _Packed in the
    output's grad_fn.metadata). The reentrant kind saves its inputs through save_for_backward,
    which the helper's hooks see already."""
    orig = module.checkpoint

    @functools.wraps(orig)
    def checkpoint(function, *args, **kwargs):
        import torch
        s = _S
        if kwargs.get("use_reentrant", True) is not False or not s.on or \
                not torch.is_grad_enabled():
            return orig(function, *args, **kwargs)
        s.tls.checkpoint += 1
        try:
            out = orig(function, *args, **kwargs)
        finally:
            s.tls.checkpoint -= 1
        try:
            _checkpoint_saves(s, out, args)
        except Exception:
            pass
        return out

    _patch(module, "checkpoint", checkpoint, hide=True)


def _checkpoint_saves(s, out, args):
    """The tensor arguments of a non-reentrant checkpoint, saved by the graph of its outputs (as
    the pack hook saves a tensor)."""
    nodes = [t.grad_fn for t in _tensors_in((out,)) if t.grad_fn is not None]
    if not nodes:
        return
    packs = [s._pack(t) for t in _tensors_in(args)]
    for node in nodes:
        node.metadata["gradprof_checkpoint_inputs"] = packs


def _wrap_disable_hooks(graph):
    """torch.autograd.graph.disable_saved_tensors_hooks, which functorch's transforms (vmap,
    grad) enter and which refuses to start while any saved-tensor hooks are on: the helper's are
    taken off this thread for the block (tls.hooks unchanged, so no forward inside pushes them
    again) and put back after it. The saves made there are not seen: noted "some"."""
    orig = graph.disable_saved_tensors_hooks

    @contextlib.contextmanager
    def disable_saved_tensors_hooks(error_message):
        import torch
        tls = _S.tls
        # taken off by the outermost block; the program's own hooks on top: its problem
        ours = tls.hooks if tls.user_hooks == 0 and tls.hooks_off == 0 else 0
        for _ in range(ours):
            torch._C._autograd._pop_saved_tensors_default_hooks()
        if ours and _S.unseen_noted != os.getpid():  # once per process's trace
            _S.unseen_noted = os.getpid()
            _note_saves_seen(b"some (functorch transforms)")
        tls.hooks_off += 1
        try:
            with orig(error_message):
                yield
        finally:
            tls.hooks_off -= 1
            for _ in range(ours):
                torch._C._autograd._push_saved_tensors_default_hooks(_S.pack, _unpack)

    _patch(graph, "disable_saved_tensors_hooks", disable_saved_tensors_hooks)


def _note_autograd_error(e, module=None):
    """Notes an error autograd raised ("autograd_error": kind, the message's first line, the op
    and module of the tensor concerned and the program's lines), once per exception. Kinds:
    inplace (a tensor saved for backward changed in place: PyTorch's version-counter error),
    inference_tensor (an inference_mode tensor where autograd needs one)."""
    s = _S
    if not s.on or getattr(s, "noted_error", None) is e:
        return
    msg = str(e)
    if "modified by an inplace operation" in msg:
        kind = "inplace"
    elif "Inference tensors cannot be saved for backward" in msg:
        kind = "inference_tensor"
    else:
        return
    s.noted_error = e
    op = mod = where = ""
    m = _VERSION_RE.search(msg)
    if m:  # find the saved storage: its shape and the op that made it
        shape = "[%s]" % m.group(1).replace(" ", "")
        op = _op_name(type(m.group(2), (), {})())
        with s.lock:
            for entry in s.saved.values():
                if entry.op == op and entry.detail.split(" at ")[0] == shape:
                    mod = entry.module
                    where = entry.detail.partition(" at ")[2]
                    break
    if module is not None and not mod:
        mod = next((e2.name for e2 in reversed(s.tls.stack) if e2.kind == "module"), "")
    if not where:
        tb = e.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = _user_lines(tb.tb_frame if tb is not None else sys._getframe(1))
    s.lib.note(b"autograd_error", _b("%s\t%s\t%s\t%s\t%s" % (
        kind, msg.splitlines()[0][:300], op, mod, where)))


def _wrap_module_call(orig):
    @functools.wraps(orig)
    def __call__(self, *a, **k):
        tls = _S.tls
        tls.call_kwargs = k  # for the forward hooks, which see only the positional ones
        try:
            return orig(self, *a, **k)
        except RuntimeError as e:
            try:
                _note_autograd_error(e, self)
            except Exception:
                pass
            raise
        finally:
            tls.call_kwargs = {}  # not a reference to the program's tensors past the call
    return __call__


def _wrap_backward(orig):
    @functools.wraps(orig)
    def backward(*a, **k):
        s = _S
        tls = s.tls
        if tls.backward or not s.on:
            return orig(*a, **k)
        tls.backward += 1
        key = object()
        s.push(REGION_BACKWARD, id(key), REGION_BACKWARD)
        try:
            return orig(*a, **k)
        except RuntimeError as e:
            try:
                _note_autograd_error(e)
            except Exception:
                pass
            raise
        finally:
            try:
                s.tag_grads()  # inside the region: backward made them
            except Exception:
                pass
            s.pop(REGION_BACKWARD, id(key))
            tls.backward -= 1

    return backward


def _wrap_optimizer_init(orig):
    """Optimizer.__init__, then its class's step wrapped once (_tagging_optimizer_state): every
    optimizer, torch's or the program's own, calls it."""
    @functools.wraps(orig)
    def __init__(self, *a, **k):
        orig(self, *a, **k)
        cls = type(self)
        if _S.on and cls not in _S.optimizer_classes:
            try:
                _S.optimizer_classes.add(cls)
                _patch(cls, "step", _tagging_optimizer_state(cls.step), hide=True)
            except Exception:
                pass

    return __init__


def _tagging_optimizer_state(orig):
    """An optimizer's step or load_state_dict, then its state tagged (tag_optimizer_state): a
    step makes it lazily, at the first one; loading a checkpoint makes it at once."""
    @functools.wraps(orig)
    def wrapper(self, *a, **k):
        out = orig(self, *a, **k)
        s = _S
        if s.on:
            try:
                s.tag_optimizer_state(self)
            except Exception:
                pass
        return out

    return wrapper


def _install_globals():
    import torch
    import torch.autograd.graph as graph
    _wrap_ctx(torch.no_grad, REGION_NO_GRAD)
    _wrap_ctx(torch.enable_grad, REGION_ENABLE_GRAD)
    _wrap_ctx(torch.inference_mode, REGION_INFERENCE_MODE)
    _wrap_set_grad_enabled(torch.set_grad_enabled)
    _wrap_user_hooks(graph.saved_tensors_hooks)
    if hasattr(graph, "disable_saved_tensors_hooks"):
        _wrap_disable_hooks(graph)
    import torch.utils.checkpoint
    _wrap_checkpoint(torch.utils.checkpoint)
    _wrap_jit_trace(torch.jit)
    _patch(torch.Tensor, "backward", _wrap_backward(torch.Tensor.backward), hide=True)
    _patch(torch.nn.Module, "__call__", _wrap_module_call(torch.nn.Module.__call__),
           hide=True)
    _wrap_ctx(torch.autocast, "autocast")
    import torch.optim
    _patch(torch.optim.Optimizer, "__init__", _wrap_optimizer_init(torch.optim.Optimizer.__init__))
    _patch(torch.optim.Optimizer, "load_state_dict",
           _tagging_optimizer_state(torch.optim.Optimizer.load_state_dict), hide=True)
    _patch(torch.autograd, "backward", _wrap_backward(torch.autograd.backward), hide=True)
    _patch(torch.autograd, "grad", _wrap_backward(torch.autograd.grad), hide=True)
    import multiprocessing.process as mp_process
    if hasattr(mp_process.BaseProcess, "_bootstrap"):
        _wrap_process_bootstrap(mp_process.BaseProcess)


def _uninstall_globals():
    _S.optimizer_classes.clear()
    while _S.patches:
        obj, attr, orig = _S.patches.pop()
        try:
            if orig is _MISSING:
                delattr(obj, attr)
            else:
                setattr(obj, attr, orig)
        except Exception:
            pass


# -- public API ---------------------------------------------------------------------------------

def enabled():
    """True if the helper is recording (libprof found)."""
    return _S.ensure_lib()


def mode():
    """'preload' (under gradprof run), 'standalone' (libprof.so loaded here) or 'off'."""
    _S.ensure_lib()
    return _S.lib.mode


def instrument(model=None, name=None):
    """Instruments `model` (a torch.nn.Module; None: only the grad-mode contexts and backward) and
    returns it. Calling it again for the same model does nothing."""
    try:
        if not _S.ensure_lib():
            return model
        with _S.lock:
            if not _S.patches:
                _install_globals()
            if model is not None and id(model) not in _S.models:
                m = _Model(model, name or _class_name(model))
                _S.models[id(model)] = m
                for sub, mod in model.named_modules():
                    _S.explicit.add(id(mod))
                    pre, post = _make_hooks(m, mod, m.path(sub), mod is model)
                    m.handles.append(mod.register_forward_pre_hook(pre))
                    m.handles.append(mod.register_forward_hook(post))
                _S.tag_params(m)
        _S.emit_grad_mode()
    except Exception as e:
        _warn("instrument failed, continuing without it (%s)" % e)
    return model


def uninstall(model=None):
    """Removes the hooks of `model` (None: of every model, and detaches what attach() installed)
    and, when nothing is left, restores torch's grad-mode contexts and backward. Tensors already
    saved still go back to `activation` when their graph lets them go."""
    try:
        with _S.lock:
            ids = [id(model)] if model is not None else list(_S.models)
            for i in ids:
                m = _S.models.pop(i, None)
                if m is None:
                    continue
                for h in m.handles:
                    h.remove()
                if m.module is not None:
                    _S.explicit.difference_update(id(mod) for mod in m.module.modules())
            if model is None and _S.attached:
                for h in _S.global_handles:
                    h.remove()
                _S.global_handles, _S.attached = [], False
            if not _S.models and not _S.attached:
                _uninstall_globals()
    except Exception as e:
        _warn("uninstall: %s" % e)


class profile:
    """`with gp.profile(model, name=None): ...` instruments the model for the block."""

    def __init__(self, model=None, name=None):
        self.model, self.name = model, name

    def __enter__(self):
        instrument(self.model, self.name)
        return self

    def __exit__(self, *exc):
        uninstall(self.model)
        return False


def mark(name):
    """A point label, such as "iter 3" (iterations for the growth detector)."""
    if not _S.ensure_lib():
        return
    try:
        _S.user_marks = True  # the program marks its iterations: attach() marks none
        _S.emit_grad_mode()
        _S.lib.lib.lp_mark(_b(name))
    except Exception:
        pass


class region:
    """`with gp.region("inference"): ...` or `@gp.region("inference")`: a named region."""

    def __init__(self, name):
        self.name = str(name)
        self._keys = []

    def __enter__(self):
        if _S.ensure_lib():
            key = object()
            self._keys.append(key)
            _S.emit_grad_mode()
            _S.push("user", id(key), self.name)
        return self

    def __exit__(self, *exc):
        if self._keys:
            key = self._keys.pop()
            _S.pop("user", id(key))
            _S.emit_grad_mode()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*a, **k):
            with region(self.name):
                return func(*a, **k)
        return wrapper


def thread_name(name):
    """Names the calling thread in the trace."""
    if _S.ensure_lib():
        try:
            _S.lib.lib.lp_thread_name(_b(name))
        except Exception:
            pass


def saved_bytes_by_module(which="peak"):
    """Bytes of unique storages the saved-tensor hook retagged, per module path: at the moment the
    most were saved and live at once ("peak"), live now ("live"), or saved by the last complete
    forward ("last")."""
    with _S.lock:
        src = {"peak": _S.saved_peak, "live": _S.saved_live, "last": _S.saved_last}[which]
        return dict(sorted(src.items()))


def saved_report():
    """Everything the saved-tensor hook saw, as a JSON-ready dict."""
    with _S.lock:
        return {
            "mode": _S.lib.mode if _S.lib else "off",
            "models": [m.name for m in _S.models.values()],
            "peak_bytes": _S.saved_peak_total,
            "peak_by_module": dict(sorted(_S.saved_peak.items())),
            "last_forward_by_module": dict(sorted(_S.saved_last.items())),
            "live_bytes": _S.saved_live_total,
            "storages_saved": _S.saved_count,
        }


# -- in-process judgement of a piece of code (the pytest plugin's) ------------------------------

def watch_begin():
    """Starts watching (one watch at a time): attaches the helper (loading libprof.so without
    recording if it is not loaded yet) and resets libprof's peaks. Returns False when libprof is
    not available (watch_unavailable says why)."""
    if _S.lib is None:
        _S.lib = _Lib(record=False)
    if not _S.on or not attach():
        return False
    _S.lib.lib.lp_counters_reset_peak()
    c = _S.lib.counters()
    _S.watch = {"saved_live": c.live[SAVED], "gradient_live": c.live[GRADIENT],
                "saved_modules": {}, "model_id": None, "model": "", "live_at_calls": [],
                "saved_total": _S.saved_live_total}
    _S.last_holders = []
    _S.holder_names.clear()  # an earlier test's names say nothing of this one
    return True


def watch_unavailable():
    """Why watch_begin() returned False."""
    if _S.lib is None or _S.lib.mode == "off":
        return ("libprof not found (run under `gradprof run`, or set GRADPROF_LIBPROF to "
                "libprof.so)")
    return "the helper could not attach"


def watch_end():
    """Ends the watch; returns what happened since watch_begin(): saved_peak (bytes saved for
    backward at their most, beyond what was saved before), saved_modules (module -> (bytes,
    first program line)), gradient_bytes (.grad allocated), growth (bytes saved and alive at the
    start of the model's last call minus at its second; the end minus the start with fewer than
    three calls), calls, model (the first model called) and holders (who kept graphs alive at
    the last call that found some)."""
    w, _S.watch = _S.watch, None
    if w is None:
        return None
    c = _S.lib.counters()
    calls = w["live_at_calls"]
    if len(calls) >= 3:
        growth = calls[-1] - calls[1]
    else:
        growth = _S.saved_live_total - w["saved_total"]
    return {"saved_peak": max(0, c.peak[SAVED] - w["saved_live"]),
            "saved_modules": w["saved_modules"],
            "gradient_bytes": max(0, c.peak[GRADIENT] - w["gradient_live"]),
            "growth": max(0, growth), "calls": len(calls), "model": w["model"],
            "holders": list(_S.last_holders)}
