/*
 * gptrace — reads gradprof trace files (format: gradprof/trace_format.h) as one time-ordered
 * stream of events, for the gradprof tools. The order is exact however late a thread's chunk
 * reached the file: by time, equal times by thread index, then in the thread's own order.
 *
 * Streams: the first gp_trace_next() reads the file once to check and index its chunks (24 bytes
 * of memory a chunk); events then leave chunk by chunk, so memory is bounded by the index, the
 * chunks open at once (about one per thread active at the same time, each at most one chunk
 * payload), the stack and string tables and the module map, not by the event count or by how
 * late a chunk arrived. A trace still being written is read up to its size at gp_trace_open().
 * A pipe or other file that is not a regular one is kept in memory whole.
 *
 * Damage: reading stops at the first chunk that is short, has a bad magic or size, fails its
 * checksum or does not decode; every event of the chunks before it in the file is delivered, none
 * after it (even earlier in time), and gp_trace_info() says what was lost (the byte offset, the
 * bytes after it and why); it is found by the first gp_trace_next(), before any event leaves.
 * Damage is not an error: a truncated trace is the normal result of a crash. Errors are for files
 * that cannot be read at all (missing, not a trace, a version this reader does not know, I/O
 * errors) or that change while they are read (other than by appending).
 *
 * Ownership: strings and arrays returned by accessors, and the strings an event points to, belong
 * to the gp_trace and live until gp_trace_close(); the gp_event itself is overwritten by the next
 * gp_trace_next().
 */
#ifndef GRADPROF_TRACE_H
#define GRADPROF_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gradprof/libprof.h" /* lp_category, lp_device */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_trace gp_trace;

/* The largest device id an event may carry (CUDA ordinals; the host is LP_DEVICE_HOST): the reader
 * refuses a record with a larger one, so that a device id fits in 16 bits. */
#define GP_TRACE_MAX_DEVICE 32767

typedef enum gp_event_kind {
    GP_EV_ALLOC,       /* addr, size, device, stack; a raw or tagged buffer is born */
    GP_EV_FREE,        /* addr, device */
    GP_EV_TAG,         /* addr, size, device, category, op, module, detail, grad_enabled, stack */
    GP_EV_REGION_PUSH, /* name */
    GP_EV_REGION_POP,
    GP_EV_MARK,        /* name */
    GP_EV_GRAD_MODE,   /* grad_enabled, inference */
    GP_EV_LOST,        /* count: events the recorder dropped */
    GP_EV_END,         /* the program's recording ended cleanly */
    GP_EV_NOTE,        /* name (the key), detail (the value): lp_note (format 1.1) */
} gp_event_kind;

typedef struct gp_event {
    gp_event_kind kind;
    uint64_t time_ns; /* since the trace's start */
    uint32_t thread;  /* dense thread index, 1..gp_trace_thread_count(), by first appearance */
    uint64_t addr;
    uint64_t size;
    lp_device device;
    uint32_t stack;        /* global stack id (gp_trace_stack_frame), 0 = none */
    lp_category category;  /* TAG */
    const char *op;        /* TAG: never NULL ("" if none) */
    const char *module;    /* TAG */
    const char *detail;    /* TAG; NOTE: the value */
    const char *name;      /* REGION_PUSH, MARK; NOTE: the key */
    bool grad_enabled;     /* TAG, GRAD_MODE */
    bool inference;        /* GRAD_MODE */
    bool module_region;    /* REGION_PUSH: a module's forward, name its path (format 1.2) */
    uint64_t count;        /* LOST */
} gp_event;

/* What reading found. The chunk count, the damage and file_bytes are final after the first
 * gp_trace_next(); events, clean_end and lost_events once it returned 0. */
typedef struct gp_trace_info {
    uint16_t version_major, version_minor;
    uint64_t file_bytes;
    uint64_t chunks;          /* good chunks read */
    uint64_t events;          /* events delivered */
    bool damaged;             /* reading stopped before the end of the file */
    uint64_t damage_offset;   /* byte offset of the first bad chunk */
    uint64_t bytes_lost;      /* bytes from there to the end of the file */
    char damage_reason[128];  /* e.g. "chunk checksum mismatch", "file ends inside a chunk" */
    bool clean_end;           /* an END record was seen: the program finished recording */
    uint64_t lost_events;     /* sum of LOST records */
} gp_trace_info;

/* Opens a trace. Returns 0, or -1 with a message naming the file and the problem in err. */
int gp_trace_open(const char *path, gp_trace **out, char *err, size_t err_size);
void gp_trace_close(gp_trace *t); /* NULL is a no-op */

/* Decodes ahead on a thread of the reader's own, in batches (at most 4096 events, about 450 KB,
 * ahead), in parallel with the caller: for a caller that spends about as long on each event as
 * the reader does. Every call answers exactly as without it; gp_trace_close() stops the thread.
 * Call before the first gp_trace_next(). Returns 1 when it will, 0 when it will not (the process
 * may use only one CPU), -1 when it is too late. */
int gp_trace_readahead(gp_trace *t);

/* Reads the whole file once to check it and index its chunks, as the first gp_trace_next() does
 * otherwise: a caller may have it done early, on a thread of its own (no other call on the trace
 * may run meanwhile), say while it works on another trace. Call gp_trace_readahead() before it if
 * wanted. Returns 0 (also when scanned already), or -1 with the message gp_trace_next() would
 * give. */
int gp_trace_scan(gp_trace *t, char *err, size_t err_size);

/* The next event in time order: 1 with *ev filled, 0 at the end (of the file or of the readable
 * part), -1 on an I/O error (message in err). */
int gp_trace_next(gp_trace *t, gp_event *ev, char *err, size_t err_size);

const gp_trace_info *gp_trace_info_get(const gp_trace *t);

/* Metadata (META records: "command", "pid", "start_time", "host", "gradprof_version", ...);
 * NULL if absent. */
const char *gp_trace_meta(const gp_trace *t, const char *key);

/* The loaded objects: module ids are 1..gp_trace_module_count(). */
typedef struct gp_module {
    uint64_t base, size;
    const char *path;
    const char *build_id;
} gp_module;
size_t gp_trace_module_count(const gp_trace *t);
const gp_module *gp_trace_module(const gp_trace *t, uint32_t id); /* NULL if unknown */

/* One frame of a global stack id: its module id and offset, and the id of its caller's stack
 * (0 at the outermost frame). Returns 0, or -1 if the id is unknown. Stack ids are global: the
 * reader merges the per-thread tables, so equal call chains get equal ids. */
int gp_trace_stack_frame(const gp_trace *t, uint32_t stack, uint32_t *module, uint64_t *offset,
                         uint32_t *parent);
size_t gp_trace_stack_count(const gp_trace *t);
/* The same node by its frame's global id: nodes that run the same code (module, offset) share a
 * frame id, dense from 1, so a reader can keep what it learns of a frame in an array. */
int gp_trace_stack_node(const gp_trace *t, uint32_t stack, uint32_t *frame, uint32_t *parent);
/* A frame id's module and offset. Returns 0, or -1 if the id is unknown. */
int gp_trace_frame(const gp_trace *t, uint32_t frame, uint32_t *module, uint64_t *offset);

/* Thread names (THREAD records), by dense index; NULL if unnamed. */
const char *gp_trace_thread_name(const gp_trace *t, uint32_t thread);
uint32_t gp_trace_thread_count(const gp_trace *t);
/* A thread's operating-system id (from its THREAD record; the main thread's equals the "pid"
 * metadata), 0 if unknown. */
uint64_t gp_trace_thread_os_tid(const gp_trace *t, uint32_t thread);

#ifdef __cplusplus
}
#endif

#endif /* GRADPROF_TRACE_H */
