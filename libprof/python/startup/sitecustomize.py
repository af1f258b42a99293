"""gradprof's Python startup hook: the PyTorch helper, attached with no change to the program, and
GRADPROF_GRAD_DEFAULT=off for PyTorch programs.

``gradprof run`` and ``gradprof compare`` put this folder first on ``PYTHONPATH``, so the ``site``
module imports this file at startup as ``sitecustomize``. An import hook on the name ``torch``
then acts once torch has been imported (a program that never imports torch pays for one entry on
``sys.meta_path`` and nothing else):

* Unless ``GRADPROF_TORCH`` is ``0`` (``gradprof run --no-torch``), it attaches gradprof's PyTorch
  helper (``gradprof_torch.py`` in the folder above this one, registered as the module
  ``gradprof_torch``): every module the program calls gets its region, parameters and saved
  tensors their tags, each call of the model an iteration mark (``gradprof_torch.attach``). If it
  cannot, one line says so and only raw allocations are recorded.
* When ``GRADPROF_GRAD_DEFAULT`` is ``off``, grad starts off, as in the gradprof tensor library:
  ``torch.set_grad_enabled(False)`` runs on the thread that imported torch, and every thread
  started through ``threading`` after that runs it before its ``run()``. ``with
  torch.enable_grad():``, ``torch.set_grad_enabled(True)`` and the like work as usual. Not
  covered: threads that were already running when torch was imported (PyTorch's grad mode is per
  thread), threads started without ``threading`` (from C++).

A process that exits, or execs another program (``os.execv``, ``os.execve``), without having
imported torch notes ``saves_seen`` ``all`` in its trace (it saved no tensor for backward), so
that ``gradprof check`` can judge it without tags or stacks.

``gradprof run`` records a Python program without call stacks unless told otherwise (the
PyTorch helper's tags say what the tensors are; README "PyTorch"); it then sets
``GRADPROF_PYTHON_NO_STACKS=1``, and a program that exits without having imported torch gets one
line saying that ``--stack-depth 32`` records its stacks. The variable is taken out of the
environment, so programs this one starts do not repeat the line.

Interpreters started with ``-S``, ``-E`` or ``-I`` skip this file or ignore ``PYTHONPATH``. A
value of either variable other than those documented gives one warning line and is ignored.
Then it runs the ``sitecustomize`` the program would have had without gradprof: the next one on
``sys.path`` after this folder (Debian's, a virtual environment's), loaded by its path, so this
file is not found again. ``import sitecustomize`` then gives that module.
"""

import os
import sys


def _install_torch_hook():
    # A meta path finder needs only find_spec: no importlib.abc base class, whose import (with
    # importlib.resources, pathlib, zipfile, typing, ...) costs a program that never imports
    # torch about 40 ms.
    class _TorchFinder:
        """Finds torch through the other finders and runs _after_torch once it has loaded."""

        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            # Wrap this loader instance's exec_module (the loader keeps its type, so torch's
            # __loader__ and __spec__ stay what they would be).
            exec_module = loader.exec_module

            def exec_then_disable(module):
                exec_module(module)
                try:
                    del loader.exec_module
                except AttributeError:
                    pass
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                _after_torch(module)

            loader.exec_module = exec_then_disable
            return spec

    sys.meta_path.insert(0, _TorchFinder())


def _attach_helper():
    """Attaches gradprof's PyTorch helper (gradprof_torch.py, one folder up) to the program:
    every module it calls gets a region and its saved tensors their tags (attach()). The module
    is registered as ``gradprof_torch``, so a program that imports the helper itself gets this
    same one."""
    import importlib.util
    helper = sys.modules.get("gradprof_torch")
    if helper is None:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "gradprof_torch.py")
        spec = importlib.util.spec_from_file_location("gradprof_torch", path)
        helper = importlib.util.module_from_spec(spec)
        sys.modules["gradprof_torch"] = helper
        try:
            spec.loader.exec_module(helper)
        except Exception:
            del sys.modules["gradprof_torch"]
            raise
    helper.attach()


def _after_torch(torch):
    if _wants_helper():
        try:
            _attach_helper()
        except Exception as e:  # never break the program
            sys.stderr.write("gradprof: the PyTorch helper could not attach (%s); recording "
                             "raw allocations only\n" % e)
    if os.environ.get("GRADPROF_GRAD_DEFAULT") != "off":
        return
    try:
        torch.set_grad_enabled(False)
    except Exception as e:  # never break the program
        sys.stderr.write("gradprof: GRADPROF_GRAD_DEFAULT=off: torch.set_grad_enabled(False) "
                         "failed (%s); grad stays on\n" % e)
        return
    import threading
    inner = getattr(threading.Thread, "_bootstrap_inner", None)
    if inner is None:
        return  # a Python without it: only the importing thread starts with grad off

    def _bootstrap_inner(self):
        try:
            torch.set_grad_enabled(False)
        except Exception:
            pass
        inner(self)

    threading.Thread._bootstrap_inner = _bootstrap_inner


def _chain():
    """Runs the next sitecustomize on sys.path after this folder, if there is one."""
    import importlib.machinery
    try:  # importlib.util's own, without importing it (contextlib, functools, ...: 3 ms a process)
        from importlib._bootstrap import module_from_spec
    except ImportError:
        from importlib.util import module_from_spec

    def real(p):
        return os.path.realpath(p or os.curdir)

    here = real(os.path.dirname(os.path.abspath(__file__)))
    rest, seen = [], False
    for p in sys.path:
        if not isinstance(p, str):
            continue
        if real(p) == here:
            seen = True
        elif seen:
            rest.append(p)
    if not seen:  # imported some other way: every other folder
        rest = [p for p in sys.path if isinstance(p, str) and real(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _setting(name, values):
    """The variable's value if it is one of `values` (or unset: ""); otherwise one warning line
    and ""."""
    value = os.environ.get(name, "")
    if value in values or value == "":
        return value
    sys.stderr.write("gradprof: %s='%.40s%s' is not %s; ignored\n" % (
        name, value, "..." if len(value) > 40 else "", " or ".join(repr(v) for v in values)))
    return ""


def _wants_helper():
    return _setting("GRADPROF_TORCH", ("1", "0")) != "0"


def _note_no_stacks():
    """At exit, when the program never imported torch: it was recorded without stacks."""
    if "torch" in sys.modules:
        return
    try:
        sys.stderr.write("gradprof: this Python program did not import torch, so nothing tagged "
                         "its memory and it was recorded without call stacks (the default for "
                         "Python programs); run it with --stack-depth 32 for them\n")
    except Exception:
        pass


def _note_torch_never_imported():
    """At exit, when this process never imported torch: no tensor was saved for backward in it,
    and its trace says so (note "saves_seen" "all", as the helper notes in a DataLoader worker)
    so that check can judge it (a process of the job that only serves the others:
    multiprocessing's resource tracker, a launcher)."""
    if "torch" in sys.modules:
        return
    try:
        import ctypes
        note = getattr(ctypes.CDLL(None), "lp_note", None)  # the preloaded recorder's
        if note is not None:
            note.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
            note.restype = None
            note(b"saves_seen", b"all")
    except Exception:
        pass


def _wrap_exec():
    """os.execv and os.execve, which os's other exec functions call, replace the program without
    running atexit: a process that never imported torch makes its note before."""
    for name in ("execv", "execve"):
        orig = getattr(os, name, None)
        if orig is None:
            continue

        def exec_after_note(*args, _orig=orig):
            _note_torch_never_imported()
            return _orig(*args)

        exec_after_note.__name__ = exec_after_note.__qualname__ = name
        exec_after_note.__doc__ = orig.__doc__
        setattr(os, name, exec_after_note)


def _main():
    import atexit
    grad_off = _setting("GRADPROF_GRAD_DEFAULT", ("on", "off")) == "off"
    if grad_off or _wants_helper():
        _install_torch_hook()
    if os.environ.pop("GRADPROF_PYTHON_NO_STACKS", None) == "1":
        atexit.register(_note_no_stacks)
    atexit.register(_note_torch_never_imported)
    _wrap_exec()


_main()
_chain()
