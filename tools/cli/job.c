/* Jobs of several processes for the commands (job.h). */
#define _GNU_SOURCE /* asprintf */
#include "job.h"
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A metadata value when it is a plain decimal number of at most 9 digits, else NULL. */
static const char *meta_number(const gp_profile *p, const char *key)
{
    const char *v = p->trace ? gp_trace_meta(p->trace, key) : NULL;
    size_t n = v ? strspn(v, "0123456789") : 0;
    return v && n > 0 && n <= 9 && v[n] == '\0' ? v : NULL;
}

void gp_cli_process_init(gp_render_process *rp, gp_profile *p)
{
    *rp = (gp_render_process){.p = p};
    rp->rank = meta_number(p, "rank");
    rp->local_rank = meta_number(p, "local_rank");
    rp->world_size = meta_number(p, "world_size");
    const char *pid = meta_number(p, "pid");
    rp->pid = pid ? strtol(pid, NULL, 10) : 0;
    for (size_t d = 0; d < p->n_devices; d++)
        if (p->devices[d].device == p->primary_device) {
            const uint64_t *at = p->devices[d].by_category_at_peak;
            rp->graph_bytes = at[LP_CAT_SAVED] + at[LP_CAT_AUTOGRAD] + at[LP_CAT_GRADIENT];
        }
}

int gp_cli_job_load(const char *cmd, char *const *paths, size_t n, const gp_analysis_options *ao,
                    bool samples, bool quiet, gp_cli_job *job)
{
    *job = (gp_cli_job){0};
    job->procs = calloc(n ? n : 1, sizeof *job->procs);
    job->samples = calloc(n ? n : 1, sizeof *job->samples);
    if (!job->procs || !job->samples) {
        gp_cli_job_free(job);
        return gp_cli_error(cmd, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        gp_profile *p = NULL;
        int rc;
        if (samples) {
            char err[768] = "";
            rc = gp_cli_probe_trace(paths[i], err, sizeof err);
            if (rc == 0 &&
                gp_samples_load(paths[i], ao, &p, &job->samples[i], err, sizeof err) != 0)
                rc = errno == ENOMEM ? GP_ENOMEM : GP_EIO;
            if (rc)
                gp_cli_error(cmd, "%s", err[0] ? err : gp_strerror(rc));
            else if (!quiet)
                gp_cli_warn_trace(cmd, p);
        } else {
            rc = quiet ? gp_cli_load_profile_quiet(cmd, paths[i], ao, &p)
                       : gp_cli_load_profile(cmd, paths[i], ao, &p);
        }
        if (rc) {
            gp_cli_job_free(job);
            return rc;
        }
        job->n++;
        gp_cli_process_init(&job->procs[i], p);
        job->procs[i].samples = job->samples[i];
    }
    return 0;
}

void gp_cli_job_free(gp_cli_job *job)
{
    for (size_t i = 0; i < job->n; i++) {
        gp_samples_free(job->samples ? job->samples[i] : NULL);
        gp_profile_free(job->procs[i].p);
    }
    free(job->procs);
    free(job->samples);
    *job = (gp_cli_job){0};
}

/* The "rank" metadata of a trace (opened and read up to its metadata): 0 with *rank set (""
 * when it has none), or -1 with a message in err. */
static int trace_rank(const char *path, char *rank, size_t size, char *err, size_t err_size)
{
    gp_trace *t = NULL;
    if (gp_cli_probe_trace(path, err, err_size) != 0 || gp_trace_open(path, &t, err, err_size) != 0)
        return -1;
    gp_event ev;
    gp_trace_next(t, &ev, err, err_size); /* the first event: the metadata before it is read */
    const char *r = gp_trace_meta(t, "rank");
    snprintf(rank, size, "%s", r ? r : "");
    gp_trace_close(t);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The trace files in a folder (*.gptrace and *.gptrace.N), sorted, malloc'd; NULL on error. */
static char **folder_traces(const char *dir, size_t *n)
{
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **names = NULL;
    size_t cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *dot = strstr(e->d_name, ".gptrace");
        if (!dot || (dot[8] != '\0' && dot[8] != '.'))
            continue;
        if (*n == cap) {
            char **more = realloc(names, (cap = cap * 2 + 16) * sizeof *names);
            if (!more)
                break;
            names = more;
        }
        if (asprintf(&names[*n], "%s/%s", dir, e->d_name) < 0)
            break;
        (*n)++;
    }
    closedir(d);
    if (names)
        qsort(names, *n, sizeof *names, by_name);
    return names ? names : calloc(1, sizeof *names);
}

int gp_cli_pick_rank(const char *cmd, const char *side, char *const *args, size_t n,
                     const char *rank, const char **out, char **owned)
{
    *out = NULL;
    *owned = NULL;
    if (!rank) {
        struct stat st;
        if (n == 1 && !(stat(args[0], &st) == 0 && S_ISDIR(st.st_mode))) {
            *out = args[0];
            return 0;
        }
        if (n == 1)
            return gp_cli_error(cmd, "%s: '%s' is a folder: pick its process with --rank R", side,
                                args[0]);
        return gp_cli_error(cmd, "%s: %zu traces or folders given: pick the process with --rank R",
                            side, n);
    }
    const char *found = NULL;
    char *found_owned = NULL, err[768], r[64];
    size_t matches = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat st;
        size_t nf = 1;
        char **files = NULL;
        if (stat(args[i], &st) == 0 && S_ISDIR(st.st_mode)) {
            if (!(files = folder_traces(args[i], &nf))) {
                rc = gp_cli_error(cmd, "%s: cannot list folder '%s': %s", side, args[i],
                                  strerror(errno));
                break;
            }
        }
        for (size_t k = 0; k < nf && rc == 0; k++) {
            const char *path = files ? files[k] : args[i];
            if (trace_rank(path, r, sizeof r, err, sizeof err) != 0) {
                rc = gp_cli_error(cmd, "%s: %s", side, err);
            } else if (strcmp(r, rank) == 0) {
                if (matches++ == 0) {
                    found = path;
                    if (files) { /* keep this name: the folder's list is freed below */
                        found_owned = files[k];
                        files[k] = NULL;
                    }
                } else {
                    rc = gp_cli_error(cmd, "%s: more than one trace of rank %s: '%s' and '%s'",
                                      side, rank, found, path);
                }
            }
        }
        for (size_t k = 0; files && k < nf; k++)
            free(files[k]);
        free(files);
    }
    if (rc == 0 && matches == 0)
        rc = gp_cli_error(cmd,
                          "%s: no trace of rank %s among the %zu given (the rank is the RANK "
                          "variable of the program's environment, recorded as metadata)",
                          side, rank, n);
    if (rc) {
        free(found_owned);
        return rc;
    }
    *out = found;
    *owned = found_owned;
    return 0;
}
