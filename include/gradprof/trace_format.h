/*
 * The gradprof trace file format, version 1.1: the contract between libprof (writer) and the
 * tools (reader). Everything is little-endian.
 *
 * Versions. A reader accepts every minor version of its major and refuses another major. A minor
 * version only adds record types: 1.1 added NOTE (and the "py:" modules below, which are MODULE
 * records a 1.0 reader reads as unknown files). A 1.0 reader meets a NOTE as an unknown record
 * type: it stops at that chunk and reports the rest of the file as damage, keeping everything
 * before it.
 *
 * File   = header chunk*
 * header = "GPTRACE\0" (8 bytes), u16 major (1), u16 minor (1), u32 reserved (0)        16 bytes
 * chunk  = chunk header (32 bytes) + payload
 *   u32 magic           GP_CHUNK_MAGIC ("GPCK")
 *   u32 payload_bytes   <= GP_CHUNK_MAX_PAYLOAD
 *   u32 crc32c          CRC-32C (Castagnoli) of header bytes 12..31 followed by the payload
 *   u32 thread          the writing thread's index (1, 2, ...); 0 = process-wide records
 *   u64 base_time_ns    CLOCK_MONOTONIC time the first record's dt is relative to
 *   u64 write_time_ns   CLOCK_MONOTONIC time just before the chunk was written
 *
 * Chunks are appended whole, each with one write(2) on an O_APPEND file, so chunks from different
 * threads interleave but are never torn unless the process dies inside write(). A reader keeps
 * every chunk up to the first one that is short or fails its checksum, and says what it lost.
 *
 * Ordering. Every timed record carries a CLOCK_MONOTONIC time: read in order, or, while a single
 * thread records, interpolated from the TSC at a rate set a little low, so that it is never later
 * than the instant it stands for and at most a few microseconds earlier ("clock" metadata:
 * "monotonic" or "monotonic+tsc"). Records inside a chunk, and the
 * chunks of one thread (in file order), are in that thread's order, and their times strictly
 * increase, also across the OS threads that use one thread index in turn (libprof stamps a
 * record that would not be later than its thread's previous one with that time + 1 ns); a
 * chunk's base_time_ns is at or before its first record's time, its write_time_ns at or after
 * its last. A free is stamped before the memory is released and an allocation after it was
 * obtained, so a free is earlier than any allocation that reuses its address, on whatever
 * thread. A realloc is a FREE of the old block stamped before the real realloc was called
 * (written after it returned, only if it succeeded) and an ALLOC of the new one stamped after:
 * another thread that gets the old address back records its ALLOC later than that FREE. (The
 * one exception: when a signal handler records on the same thread during the realloc, the FREE
 * goes after the handler's records, the +1 ns rule.) Across threads the order is by time alone (equal times: by thread, then in the thread's
 * order), and a chunk may reach the file arbitrarily late (its thread or the flusher was not
 * scheduled): a reader must not assume a bound on how late. gptrace indexes the chunks' base
 * times first and opens a chunk before delivering anything later than its base time. Thread-0
 * chunks carry no timed records and may appear anywhere in the file. The flush interval
 * ("flush_interval_ns" metadata) bounds what a crash loses, not the order.
 *
 * Payload = record*. A record starts with one byte: the type in the low 5 bits, flags in the top 3.
 * Integers are unsigned LEB128 varints; "svarint" is a zigzag-encoded signed varint; "str" is a
 * varint length followed by that many bytes (no NUL). Per-chunk running state, reset at each chunk:
 * `time` (starts at base_time_ns) and `addr` (starts at 0).
 *   dt      varint: ns since the previous record's time in this chunk (time += dt)
 *   daddr   svarint: address delta (addr += daddr, or daddr * 16 with GP_FLAG_ADDR16)
 * Ids of STRING and STACK records belong to the writing thread (ids start at 1; 0 = none); they are
 * defined in that thread's chunks before their first use. A thread index may pass to a new OS
 * thread after the old one exited: the new one starts with a THREAD record and defines its ids
 * afresh; a definition replaces an earlier one of the same id. Thread-0 chunks (META, MODULE)
 * carry no timed records and have base_time_ns 0; the trace's time origin is the
 * "start_monotonic_ns" metadata.
 *
 * GP_REC_META        str key, str value                       process metadata (thread 0)
 * GP_REC_MODULE      varint id, varint base, varint size, str path, str build_id (hex, may be "")
 *                                                             a loaded object (thread 0); ids from 1
 *                    or a Python function (since 1.1): path "py:" + file name + ":" + qualified
 *                    name ("py:/srv/eval.py:Model.forward"; split at the last ':', the name has
 *                    none), base 0, size 0, build_id "", written once per distinct function. A
 *                    STACK node of such a module is a Python frame: its offset is the line.
 *                    Python frames replace the activations of CPython's eval loop in a native
 *                    stack, innermost first, as the interpreter ran them (libprof/pyframes.c).
 * GP_REC_THREAD      varint os_tid, str name                  names the chunk's thread
 * GP_REC_STRING      varint id, str text
 * GP_REC_STACK       varint id, varint parent, varint module, varint offset
 *                    a node of the calling-context tree: the frame (module id, offset into it; module
 *                    0 = unknown, offset then holds the raw address) called from stack `parent`
 *                    (0 = the outermost frame). An allocation's stack id is its innermost frame.
 * GP_REC_ALLOC       dt, daddr, varint size, varint stack     a raw allocation (category OTHER)
 * GP_REC_FREE        dt, daddr
 * GP_REC_TAG         dt, daddr, varint size, varint category (its wire value, vocabulary.h),
 *                    varint op, varint module,
 *                    varint detail (string ids), varint stack
 *                    gives the live buffer at addr a role (an lp_alloc or lp_retag); a TAG for an
 *                    address that is not live is an allocation of `size` bytes made at `stack`
 *                    (in-process recording, where no raw ALLOC precedes it). GP_FLAG_GRAD: grad
 *                    was enabled.
 * GP_REC_REGION_PUSH dt, varint name (string id); GP_FLAG_MODULE (since 1.2): the region is a
 *                    module's forward and its name the module's path (lp_module_push)
 * GP_REC_REGION_POP  dt
 * GP_REC_MARK        dt, varint name (string id)
 * GP_REC_GRAD_MODE   dt; GP_FLAG_GRAD: grad enabled, GP_FLAG_INFERENCE: inference mode
 * GP_REC_LOST        dt, varint count                         events the recorder had to drop
 * GP_REC_END         dt                                       clean end of recording
 * GP_REC_NOTE        dt, varint key (string id), str value    a timed fact about no one buffer
 *                    (lp_note: who holds a graph alive, an error autograd raised); the value is
 *                    at most 64 KiB (LP_NOTE_MAX_VALUE), a longer one was cut by the writer and
 *                    ends with " [cut: N bytes]". A note too big for the thread's buffer is a
 *                    chunk of its own. (Since 1.1.)
 * With GP_FLAG_DEVICE, ALLOC, FREE and TAG carry one more varint after daddr: the
 * device + 1 (CUDA ordinal); without it the device is the host.
 *
 * A reader skips no unknown record type: an unknown type ends the chunk's decoding with an error
 * (the format is versioned instead; readers accept any minor version of their major).
 */
#ifndef GRADPROF_TRACE_FORMAT_H
#define GRADPROF_TRACE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define GP_FILE_MAGIC "GPTRACE\0"
#define GP_FILE_HEADER_BYTES 16
#define GP_VERSION_MAJOR 1
#define GP_VERSION_MINOR 2

#define GP_CHUNK_MAGIC 0x4B434750u /* "GPCK" */
#define GP_CHUNK_HEADER_BYTES 32
#define GP_CHUNK_MAX_PAYLOAD (1u << 20)

enum gp_record_type {
    GP_REC_META = 1,
    GP_REC_MODULE = 2,
    GP_REC_THREAD = 3,
    GP_REC_STRING = 4,
    GP_REC_STACK = 5,
    GP_REC_ALLOC = 6,
    GP_REC_FREE = 7,
    GP_REC_TAG = 8,
    GP_REC_REGION_PUSH = 9,
    GP_REC_REGION_POP = 10,
    GP_REC_MARK = 11,
    GP_REC_GRAD_MODE = 12,
    GP_REC_LOST = 13,
    GP_REC_END = 14,
    GP_REC_NOTE = 15, /* since 1.1 */
};

#define GP_REC_TYPE_MASK 0x1Fu
#define GP_FLAG_ADDR16 0x20u    /* daddr is in units of 16 bytes */
#define GP_FLAG_DEVICE 0x40u    /* a device varint follows daddr */
#define GP_FLAG_GRAD 0x80u      /* TAG, GRAD_MODE: grad enabled */
#define GP_FLAG_MODULE 0x80u    /* REGION_PUSH only: a module's forward (since 1.2) */
#define GP_FLAG_INFERENCE 0x40u /* GRAD_MODE only: inference mode */

/* ---- codec helpers shared by the writer and the reader (header-only, static inline) ---------- */

/* Writes v as a LEB128 varint at p (at most 10 bytes); returns the bytes written. */
static inline size_t gp_put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static inline uint64_t gp_zigzag(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }
static inline int64_t gp_unzigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

/* Reads a varint from [*p, end); returns 0 and advances *p, or -1 if truncated or over 64 bits. */
static inline int gp_get_varint(const uint8_t **p, const uint8_t *end, uint64_t *out)
{
    uint64_t v = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 70; shift += 7) {
        if (q >= end)
            return -1;
        uint8_t b = *q++;
        if (shift == 63 && b > 1)
            return -1; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *out = v;
            *p = q;
            return 0;
        }
    }
    return -1;
}

static inline void gp_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void gp_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t gp_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gp_get_u64(const uint8_t *p)
{
    return (uint64_t)gp_get_u32(p) | (uint64_t)gp_get_u32(p + 4) << 32;
}

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven. `crc` starts at 0
 * and chains: gp_crc32c(gp_crc32c(0, a, n), b, m) == crc of a||b. Defined in libprof's codec. */
uint32_t gp_crc32c(uint32_t crc, const void *data, size_t n);

#endif /* GRADPROF_TRACE_FORMAT_H */
