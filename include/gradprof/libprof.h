/*
 * libprof — gradprof's in-process profiling API.
 *
 * A tagging source (the tensor library, the PyTorch helper, the interposer) reports every buffer it
 * creates, frees or re-purposes; libprof keeps live and peak byte counters per category and device
 * and hands each event to the active listener (the trace recorder, or a test).
 *
 * Event model (../shared/DESIGN.md): alloc(address, bytes, device, tag), free(address, device),
 * retag(address, tag), region push/pop, mark. A tag is a category plus an op label, a module path and
 * the grad mode in force when the buffer was made.
 *
 * Counters are always on and cost two relaxed atomic adds per event; with no listener set, nothing
 * else happens. All functions are thread-safe.
 */
#ifndef GRADPROF_LIBPROF_H
#define GRADPROF_LIBPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/vocabulary.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Categories (lp_category, LP_CATEGORY_MAP, lp_category_is_graph), region names and recorder
 * defaults: gradprof/vocabulary.h. */

/* The lower-case name of a category ("saved"), or "invalid". */
const char *lp_category_name(lp_category category);

/* Parses a category name, case-insensitively ("SAVED", "saved"). Returns 0, or -1 if unknown. */
int lp_category_parse(const char *name, lp_category *out);

/* Devices: LP_DEVICE_HOST, or a CUDA ordinal 0..LP_MAX_CUDA_DEVICES-1. */
typedef int32_t lp_device;
#define LP_DEVICE_HOST ((lp_device)-1)
#define LP_MAX_CUDA_DEVICES 8

/*
 * A buffer's role. The strings are borrowed for the duration of the call: a listener that keeps them
 * copies them. `op` is the op that made the buffer ("linear", "relu_backward"); `module` the dotted
 * module path active at the time ("encoder.layers.0.fc1", "" at top level); `detail` optional extra
 * labels such as a shape ("[64,128]"), may be NULL.
 */
typedef struct lp_tag {
    lp_category category;
    const char *op;
    const char *module;
    const char *detail;
    bool grad_enabled;
} lp_tag;

/* Reports that [addr, addr+bytes) on `device` was just allocated, with role `tag`. */
void lp_alloc(const void *addr, size_t bytes, lp_device device, const lp_tag *tag);

/*
 * Reports that the buffer at `addr` is about to be freed. The caller passes back the size and the
 * category it last reported for it, so that counters need no lookup table.
 */
void lp_free(const void *addr, size_t bytes, lp_device device, lp_category category);

/* Reports that the live buffer at `addr` changed role from category `from` to `to->category`. */
void lp_retag(const void *addr, size_t bytes, lp_device device, lp_category from, const lp_tag *to);

/* Scopes: a region has a name (a module path, "no_grad", "inference", a user label); regions nest
 * per thread. A mark is a point label such as "iter 3". Names are borrowed for the call.
 * lp_module_push opens the region of a module's forward, named by its path: the analysers give a
 * buffer no tag names a module (an interposed malloc) the module whose forward made it. Both are
 * closed by lp_region_pop. */
void lp_region_push(const char *name);
void lp_module_push(const char *path);
void lp_region_pop(void);
void lp_mark(const char *label);

/*
 * A timed note: a fact a tagging source learned that is about no one buffer (who holds a graph
 * alive, an error autograd raised), as a key ("holder", "autograd_error") and a free-form value.
 * Strings borrowed for the call; NULL reads as "". The trace keeps values up to
 * LP_NOTE_MAX_VALUE bytes: a longer one is cut there and ends with " [cut: N bytes]", N its
 * whole length. Listeners get LP_EV_NOTE (name = key, value = value).
 */
#define LP_NOTE_MAX_VALUE (64u * 1024)
void lp_note(const char *key, const char *value);

/*
 * The profiler's own work: raw allocations the calling thread makes between lp_exclude_push and
 * the matching lp_exclude_pop are not recorded (a tagging source's bookkeeping, such as the Python
 * helper's scan for who holds a graph, is not the program's memory). Frees still are, so that a
 * program buffer freed meanwhile is not lost; an excluded block freed later reads as a free of an
 * unknown address. Nests; a pop without a push does nothing.
 */
void lp_exclude_push(void);
void lp_exclude_pop(void);

/*
 * Leaves the frames of one Python function out of the recorded stacks: a tagging source's own
 * wrapper around the program's calls (the PyTorch helper's around every module call), which is not
 * the program's frame and would take a place of the stack's depth at every level. `code` is the
 * function's code object (its id() in CPython), which must live as long as the recording; at most
 * LP_HIDDEN_CODE_MAX of them, later ones are ignored. Hidden frames are still read, so that each
 * eval-loop activation keeps its match to the Python frames it runs, but never emitted. Nothing
 * without Python frames (pyframes.h).
 */
#define LP_HIDDEN_CODE_MAX 8
void lp_hide_python_code(const void *code);

/* Live and peak bytes per category on one device, and of all categories together. The peak of each
 * category is that category's own maximum since the last reset. */
typedef struct lp_counters {
    int64_t live[LP_CAT_COUNT];
    int64_t peak[LP_CAT_COUNT];
    int64_t live_total;
    int64_t peak_total;
} lp_counters;

/* Copies the counters of `device` into *out. Returns 0, or -1 if the device is out of range. */
int lp_counters_get(lp_device device, lp_counters *out);

/* Sets every peak of every device to its current live value, so a phase can measure its own peak. */
void lp_counters_reset_peak(void);

/* ---------------------------------------------------------------------------------------------
 * Recording to a trace file (format: gradprof/trace_format.h)
 *
 * The recorder writes every event above, plus raw allocations when the interposer
 * (libprof_preload.so, or link-time wrapping) is active, with call stacks, into a crash-safe
 * trace. Under LD_PRELOAD=libprof_preload.so it starts by itself, configured by the environment:
 *   GRADPROF_OUTPUT        trace path; %p is replaced by the pid (default gradprof.%p.gptrace);
 *                          an existing file is never overwritten: .1, .2, ... are tried instead.
 *                          Empty or over 4000 bytes: the default name in the current directory,
 *                          and the warning names that absolute path. A path over 4095 bytes once
 *                          %p is expanded, or with a component over 255 bytes, is refused
 *                          (ENAMETOOLONG, said in the warning): nothing is recorded
 *   GRADPROF_STACK_DEPTH   frames per stack, 0..256 (default 32); 0 records no stacks
 *   GRADPROF_MIN_STACK_SIZE  allocations smaller than this many bytes get no stack (default 0)
 *   GRADPROF_STACK_SAMPLE  mean bytes between stack captures, geometric sampling (default 0:
 *                          every allocation); allocations are always all recorded, only their
 *                          stacks are sampled
 *   GRADPROF_FLUSH_MS      flush interval in ms, 1..10000 (default 20): no event stays unwritten
 *                          longer than about this; a SIGKILL loses at most the last interval
 *   GRADPROF_ENABLE        0 disables recording (default 1)
 *   GRADPROF_FRAME_POINTERS  0: no frame-pointer walk (default 1: a frame-pointer walk, checked
 *                          once per distinct walk against the other walks' stack, answers for
 *                          code built with frame pointers; the stacks recorded are the same)
 *   GRADPROF_CFI           0: no walk by call-frame information (default 1: the recorder's own
 *                          x86-64 .eh_frame walk answers for code without frame pointers, and
 *                          libunwind for what it cannot do; the stacks recorded are the same);
 *                          with both walks off, stacks come from libunwind only
 *   GRADPROF_VERBOSE       1: one line on stderr when a Python program's frames cannot be read
 * In a CPython 3.11 program the stacks hold its Python frames in place of the interpreter's eval
 * loop (the stack depth counts them; trace_format.h: "py:" modules), when libprof was built with
 * CPython 3.11's headers; the "python_frames" metadata says whether they were on and why not.
 * A bad value gives one warning line on stderr and the default. Setuid/setgid programs are not
 * profiled. If the trace cannot be written (disk full, bad path) recording stops with one warning
 * and the program runs on unchanged.
 *
 * The program's own doings do not disturb the trace: its descriptor sits at 1000 or above,
 * close-on-exec, and is checked (device, inode) before each chunk is written; closed or replaced
 * by the program (closefrom, close_range, dup2), it is reopened by path and nothing is lost.
 * Cancelled threads (pthread_cancel) and thread-specific-data destructors that run after the
 * recorder's own are recorded exactly. Per-thread times strictly increase, and a free (realloc's
 * included) is stamped before any allocation that reuses its address (trace_format.h).
 *
 * Metadata besides the command ("command": the whole command line up to 1 MB, else cut there and
 * "command_truncated" says so), pid, host, times and versions: "end_reason" says how the
 * recording ended: "exit" (lp_stop, exit, _exit), "exec" (the image was replaced; the new one
 * writes its own trace), "signal N" (a fatal signal N was caught, e.g. "signal 6" for abort).
 * Absent: the process was killed (SIGKILL) or is still running.
 * ------------------------------------------------------------------------------------------- */

/* Recording options; lp_options_default() fills the defaults above, lp_options_from_env() the
 * environment's values over them. */
typedef struct lp_options {
    char output[4096];
    int stack_depth;
    uint64_t min_stack_size;
    uint64_t stack_sample_bytes;
    uint32_t flush_ms;
    bool enabled;
    bool frame_pointers; /* GRADPROF_FRAME_POINTERS */
    bool cfi;            /* GRADPROF_CFI */
    bool tsc;            /* GRADPROF_TSC */
} lp_options;

void lp_options_default(lp_options *o);
/* Applies GRADPROF_* variables over *o; warns once per bad value. */
void lp_options_from_env(lp_options *o);

/* Starts recording into o->output (NULL: defaults + environment). Returns 0, or -1 with a
 * message on stderr if the file cannot be created; calling it while recording returns -1. */
int lp_start(const lp_options *o);
/* Writes the end reason "exit" and the end record, flushes and closes the trace. */
void lp_stop(void);
/* Writes every thread's buffered events now. */
void lp_flush(void);
bool lp_is_recording(void);
/* The path of the trace being written ("" if none). */
const char *lp_output_path(void);

/* Names the calling thread in the trace. */
void lp_thread_name(const char *name);
/* Records a grad-mode change on the calling thread (the tensor library reports its own). */
void lp_grad_mode(bool grad_enabled, bool inference_mode);

/* The unwinder: fills ips[0..max) with return addresses, innermost first; returns the count.
 * Replaceable so tests can feed fixed stacks; NULL restores libunwind (unw_backtrace). */
typedef int (*lp_unwind_fn)(void **ips, int max, void *user_data);
void lp_set_unwinder(lp_unwind_fn fn, void *user_data);

/* Events as a listener sees them. Pointers in the event are valid for the call only. */
typedef enum lp_event_kind {
    LP_EV_ALLOC,
    LP_EV_FREE,
    LP_EV_RETAG,
    LP_EV_REGION_PUSH,
    LP_EV_REGION_POP,
    LP_EV_MARK,
    LP_EV_NOTE,
} lp_event_kind;

typedef struct lp_event {
    lp_event_kind kind;
    const void *addr;          /* ALLOC, FREE, RETAG */
    size_t bytes;              /* ALLOC, FREE, RETAG */
    lp_device device;          /* ALLOC, FREE, RETAG */
    lp_category from_category; /* FREE: the category freed; RETAG: the previous category */
    const lp_tag *tag;         /* ALLOC, RETAG: the (new) tag; NULL otherwise */
    const char *name;          /* REGION_PUSH, MARK: the name; NOTE: the key; NULL otherwise */
    bool module_region;        /* REGION_PUSH: lp_module_push (name is the module's path) */
    const char *value;         /* NOTE: the value (whole, never cut); NULL otherwise */
} lp_event;

typedef void (*lp_listener_fn)(const lp_event *event, void *user_data);

/*
 * Installs `fn` (NULL removes it) to receive every event from now on, on the thread that reports it.
 * One listener at a time; the previous one is replaced. The listener must not call back into libprof
 * reporting functions. Setting the listener is not synchronised with events in flight on other
 * threads: install it before the work to observe starts.
 */
void lp_set_listener(lp_listener_fn fn, void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* GRADPROF_LIBPROF_H */
