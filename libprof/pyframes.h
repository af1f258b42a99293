/*
 * Python frames for the recorder's stacks (pyframes.c): the calling thread's CPython 3.11
 * frames, read without the GIL and without calling into the interpreter beyond pure functions,
 * so that each activation of the eval loop on a native stack can be replaced by the Python
 * frames it runs. Not installed.
 *
 * Built for real only where CMake found CPython 3.11's internal headers (GRADPROF_PYTHON_FRAMES);
 * otherwise every function here says "no Python" and the recorder records native frames only.
 */
#ifndef GRADPROF_LIBPROF_PYFRAMES_H
#define GRADPROF_LIBPROF_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* One Python frame, as read: enough to hash a stack and, later, to name the frame. */
typedef struct lp__pyframe {
    const void *code;                /* its PyCodeObject */
    const void *filename, *qualname; /* the code's co_filename and co_qualname objects */
    int32_t lasti;                   /* the instruction being run (code units), -1 before any */
    int32_t firstlineno;             /* the code's co_firstlineno */
    bool entry; /* the outermost frame of one C activation of the eval loop: the frames from
                 * the previous entry (or the innermost) up to this one are that activation's */
    bool hidden; /* its code was given to lp_hide_python_code: left out of the stack */
} lp__pyframe;

/*
 * Looks for a Python runtime in the process when the loaded objects changed since the last look
 * (`loads` is dl_iterate_phdr's dlpi_adds: a new object may be libpython). Cheap when nothing
 * changed. Returns whether Python frames can be read. Walks the loaded objects
 * (dl_iterate_phdr, which takes a loader lock): never call it with the recorder's lock held.
 */
bool lp__py_ready(unsigned long long loads);

/* What the last look found, for the trace's metadata: "on (CPython 3.11.2)", "off: ..." or NULL
 * when no Python runtime was seen (a program that is not Python). */
const char *lp__py_status(void);

/* Whether `ip` (a return address) lies in the eval loop, _PyEval_EvalFrameDefault. */
bool lp__py_is_eval(uintptr_t ip);

/* Whether `ip` (a return address) lies in the interpreter's own code (the object that defines
 * the eval loop: libpython, or the python executable), the eval loop included. */
bool lp__py_is_interpreter(uintptr_t ip);

/* The calling thread's Python frames, innermost first: at most `max` of them, then, when there
 * are more, the outermost `outer` (at most LP_MAX_STACK_DEPTH) of the rest; the frames between
 * are passed over unread. Returns the frames written; 0 when the thread has no Python state or
 * the interpreter is not running (starting, finalizing). A frame that cannot be read ends it. */
int lp__py_walk(lp__pyframe *out, int max, int outer);

/* The frame's line (PyCode_Addr2Line; the first line when no instruction ran yet). */
int lp__py_line(const lp__pyframe *f);

/* The frame's function as a trace pseudo-module path, "py:" + file name + ":" + qualified name
 * (trace_format.h), NUL-terminated in out (cut to fit; a ':' in the qualified name becomes '.'),
 * "?" for a name that cannot be read safely. Returns the length. */
size_t lp__py_path(const lp__pyframe *f, char *out, size_t size);

#pragma GCC visibility pop

#endif /* GRADPROF_LIBPROF_PYFRAMES_H */
