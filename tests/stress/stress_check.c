/*
 * Reads a trace with the trace reader and prints one line of counts for the stress tests:
 *   events E allocs A frees F worker_allocs WA worker_frees WF threads T lost L damaged D
 *   clean_end C bytes_lost B
 * (worker_* = on threads that pushed a region named "stress worker", as stress_threads' workers
 * do before anything else; stress_threads' workers allocate nothing before it). Exits 2 if the file
 * cannot be read at all.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "gradprof/trace.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: stress_check TRACE\n");
        return 2;
    }
    char err[512];
    gp_trace *t;
    if (gp_trace_open(argv[1], &t, err, sizeof err) != 0) {
        fprintf(stderr, "stress_check: %s\n", err);
        return 2;
    }
    gp_event ev;
    uint64_t events = 0, allocs = 0, frees = 0, wallocs = 0, wfrees = 0;
    size_t cap = 1024;
    bool *worker = calloc(cap, sizeof *worker);
    if (!worker)
        return 2;
    int r;
    while ((r = gp_trace_next(t, &ev, err, sizeof err)) == 1) {
        events++;
        while (ev.thread >= cap) {
            bool *w = realloc(worker, 2 * cap * sizeof *w);
            if (!w)
                return 2;
            memset(w + cap, 0, cap * sizeof *w);
            worker = w;
            cap *= 2;
        }
        if (ev.kind == GP_EV_REGION_PUSH && ev.name && !strcmp(ev.name, "stress worker"))
            worker[ev.thread] = true;
        if (ev.kind == GP_EV_ALLOC) {
            allocs++;
            wallocs += worker[ev.thread];
        } else if (ev.kind == GP_EV_FREE) {
            frees++;
            wfrees += worker[ev.thread];
        }
    }
    if (r < 0) {
        fprintf(stderr, "stress_check: %s\n", err);
        gp_trace_close(t);
        free(worker);
        return 2;
    }
    const gp_trace_info *info = gp_trace_info_get(t);
    printf("events %" PRIu64 " allocs %" PRIu64 " frees %" PRIu64 " worker_allocs %" PRIu64
           " worker_frees %" PRIu64 " threads %" PRIu32 " lost %" PRIu64 " damaged %d clean_end %d"
           " bytes_lost %" PRIu64 "\n",
           events, allocs, frees, wallocs, wfrees, gp_trace_thread_count(t), info->lost_events,
           (int)info->damaged, (int)info->clean_end, info->bytes_lost);
    if (info->damaged)
        printf("damage: %s at byte %" PRIu64 "\n", info->damage_reason, info->damage_offset);
    gp_trace_close(t);
    free(worker);
    return 0;
}
