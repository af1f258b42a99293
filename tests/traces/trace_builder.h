/*
 * A small writer of gradprof traces for tests: deterministic files (fixed times, addresses, pids
 * and paths) in the format of gradprof/trace_format.h, so analysis output can be compared with
 * golden files. Not the recorder: it writes exactly what it is told.
 */
#ifndef GRADPROF_TESTS_TRACE_BUILDER_H
#define GRADPROF_TESTS_TRACE_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "gradprof/libprof.h"

typedef struct tb tb;

/* Creates `path` (truncating) with the file header and META records for pid 4242, command
 * `command`, start_monotonic_ns 1e9, flush_interval_ns 100 ms. NULL on error. */
tb *tb_open(const char *path, const char *command);
/* Flushes and closes; returns 0 or -1. */
int tb_close(tb *b);

void tb_meta(tb *b, const char *key, const char *value);
/* A module (thread-0 record). */
void tb_module(tb *b, uint32_t id, uint64_t base, uint64_t size, const char *path,
               const char *build_id);
/* Switches the current thread (1..15), naming it the first time. */
void tb_thread(tb *b, uint32_t thread, const char *name);
/* Sets the current time, in ns after the trace start (must not go backwards per thread). */
void tb_at(tb *b, uint64_t ns);
/* A stack of `n` frames given innermost first as (module id, offset) pairs; returns its id in
 * the current thread's table. */
uint32_t tb_stack(tb *b, int n, const uint32_t *modules, const uint64_t *offsets);

void tb_alloc(tb *b, uint64_t addr, uint64_t size, uint32_t stack);
void tb_alloc_dev(tb *b, uint64_t addr, uint64_t size, uint32_t stack, int32_t device);
void tb_free(tb *b, uint64_t addr);
void tb_free_dev(tb *b, uint64_t addr, int32_t device);
void tb_tag(tb *b, uint64_t addr, uint64_t size, lp_category cat, const char *op,
            const char *module, const char *detail, bool grad, uint32_t stack);
void tb_region_push(tb *b, const char *name);
void tb_module_push(tb *b, const char *path); /* a module's forward (GP_FLAG_MODULE) */
void tb_region_pop(tb *b);
void tb_mark(tb *b, const char *name);
void tb_note(tb *b, const char *key, const char *value); /* a timed note (lp_note) */
void tb_grad_mode(tb *b, bool grad, bool inference);
void tb_end(tb *b);

#endif
