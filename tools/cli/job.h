/*
 * Jobs of several processes for the commands (`report` and `check` with several traces, `diff
 * --rank`): loading each trace with what its metadata says of its process (the launcher's rank,
 * local rank and world size, its pid), and picking a rank's trace from a list of traces and
 * folders.
 */
#ifndef GRADPROF_TOOLS_JOB_H
#define GRADPROF_TOOLS_JOB_H

#include <stdbool.h>
#include <stddef.h>

#include "analysis.h"
#include "render.h"
#include "samples.h"

typedef struct gp_cli_job {
    gp_render_process *procs; /* in the order of the paths */
    gp_samples **samples;     /* with samples: procs[i].samples, owned */
    size_t n;
} gp_cli_job;

/*
 * Fills rp from profile p: the "rank", "local_rank" and "world_size" metadata when each is a
 * plain decimal number (else NULL), the pid, and the graph bytes at the peak (saved + autograd +
 * gradient on the primary device).
 */
void gp_cli_process_init(gp_render_process *rp, gp_profile *p);

/*
 * Loads n traces (as gp_cli_load_profile: probed first, a damaged one with a warning unless
 * quiet; with `samples`, through gp_samples_load for the pprof export). Returns 0, or the error
 * code of the first trace that cannot be read (the message printed); *job is freed then.
 */
int gp_cli_job_load(const char *cmd, char *const *paths, size_t n, const gp_analysis_options *ao,
                    bool samples, bool quiet, gp_cli_job *job);
void gp_cli_job_free(gp_cli_job *job); /* a zeroed job is a no-op */

/*
 * The one trace of rank `rank` among `args` (files, and folders whose *.gptrace* files are looked
 * at), by the traces' "rank" metadata, into out (an element of args, or a path in a folder:
 * malloc'd, freed by the caller through *owned). With rank NULL, args must name exactly one
 * trace. `side` names the list in messages ("A"). Returns 0, or prints why (no trace of that rank,
 * several, a trace without a rank, an unreadable one) and returns GP_EXIT_USAGE.
 */
int gp_cli_pick_rank(const char *cmd, const char *side, char *const *args, size_t n,
                     const char *rank, const char **out, char **owned);

#endif /* GRADPROF_TOOLS_JOB_H */
