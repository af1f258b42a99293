/*
 * Internals of libprof's recorder, shared by the in-process API (counters.c), the interposers
 * (preload.c, wrap.c) and the recorder itself (recorder.c). Not installed.
 *
 * Threads: each thread encodes its events into its own buffer (no global lock on the event path);
 * buffers are written as checksummed chunks with one write(2) each on an O_APPEND file. A
 * background thread flushes buffers that sat idle for half the flush interval.
 *
 * Re-entrancy: everything the recorder needs comes from mmap, never malloc, and a thread-local
 * guard (lp__guard_*) makes any allocation the recorder or libunwind does on the event path pass
 * through the interposer unrecorded.
 */
#ifndef GRADPROF_LIBPROF_RECORDER_H
#define GRADPROF_LIBPROF_RECORDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/libprof.h"

#define LP__TLS __thread __attribute__((tls_model("initial-exec")))

/* Internals are hidden: calls between them bind inside the library (no PLT), and only the public
 * lp_* API can be interposed (the preload library's recorder replaces libprof.so's). */
#pragma GCC visibility push(hidden)

/* Whether recording is on (one relaxed load; the fast-path check of every hook). */
bool lp__recording(void);

/* Set by an interposer before it starts the recorder: raw allocations are then recorded by the
 * interposer, so lp_alloc/lp_free only tag (TAG) and leave the FREE to the raw free. */
void lp__set_interposed(const char *how); /* "preload" or "wrap" */
bool lp__interposed(void);

/* Thread-local recursion guard. enter returns false if the thread is already inside the recorder
 * (then the caller must not record); every successful enter is paired with an exit. */
bool lp__guard_enter(void);
void lp__guard_exit(void);
/* Marks the calling thread as never recorded (the flusher thread, a dying thread). */
void lp__guard_forever(void);

/* Event recording; each is a no-op when not recording. The caller holds the guard. `skip` frames
 * of the caller's own are dropped from the stack (the unwinder also drops libprof's own frames). */
void lp__record_alloc(const void *addr, size_t size, lp_device device);
void lp__record_free(const void *addr, lp_device device);
/* A free stamped at `when` (an lp__stamp taken before the block went back to the allocator), or
 * just after the thread's previous record if that is later (times per thread only increase). */
void lp__record_free_at(const void *addr, lp_device device, uint64_t when);
/* The time to stamp a free with that is recorded later (realloc): makes sure the calling thread
 * can record first (its state, and the THREAD record that opens it, exist before the stamp).
 * 0 if not recording or the thread cannot record. The caller holds the guard. */
uint64_t lp__stamp(void);
void lp__record_tag(const void *addr, size_t size, lp_device device, const lp_tag *tag,
                    bool is_new);
void lp__record_region_push(const char *name, bool module);
void lp__record_region_pop(void);
void lp__record_mark(const char *name);
void lp__record_grad_mode(bool grad_enabled, bool inference);
/* A NOTE record (trace_format.h); a value over LP_NOTE_MAX_VALUE bytes is cut (lp_note). */
void lp__record_note(const char *key, const char *value);
/* An allocation of `size` bytes failed: the note LP_NOTE_ALLOC_FAILED, its value the size in
 * decimal. Keeps errno. */
void lp__record_failed(size_t size);

/* Lifecycle hooks for the interposer. Each writes the "end_reason" metadata. */
/* Before exec*: end reason "exec", flushes everything (the new image starts its own trace). */
void lp__before_exec(void);
/* Before _exit/_Exit: end reason "exit", the END record, flushes. */
void lp__before_exit(void);
/* Flushes what can be flushed from a signal handler (async-signal-safe: write(2) only). */
void lp__flush_from_signal(void);

/* Set by the preload library the first time the program calls pthread_cancel: from then on stack
 * unwinding runs with cancellation disabled too (the recorder's writes, file creation and locks
 * always do). */
extern atomic_bool lp__cancel_used;

/* Set by the preload library while this thread is inside pthread_getattr_np, which allocates
 * while holding the thread's own lock (ASan's thread start calls it, so can any program): the
 * frame-pointer walk must not ask for this thread's stack bounds then, which would wait for that
 * lock forever; libunwind answers instead. */
extern LP__TLS bool lp__in_getattr;

/* Warns on stderr, once per `key`, with the "gradprof: " prefix. Async-signal-safe. */
void lp__warn_once(int key, const char *message);
enum { LP__WARN_CONFIG = 0, LP__WARN_WRITE = 16, LP__WARN_MEMORY, LP__WARN_OTHER, LP__WARN_PYTHON };

#pragma GCC visibility pop

#endif /* GRADPROF_LIBPROF_RECORDER_H */
