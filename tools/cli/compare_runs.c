/*
 * The two runs of `gradprof compare` (API: compare_runs.h): their files, and whether they did the
 * same thing.
 */
#define _GNU_SOURCE /* getline */
#include "compare_runs.h"
#include "cli.h"
#include "output.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int gp_compare_names(const char *cmd, gp_compare_files *f, const char *base, const char *suffix)
{
    char *paths[] = {f->trace, f->out, f->err};
    static const char *const kinds[] = {"gptrace", "stdout", "stderr"};
    char err[768], shown[256];
    for (size_t i = 0; i < 3; i++) {
        int n = snprintf(paths[i], sizeof f->trace, "%s.%s.%s", base, suffix, kinds[i]);
        if (n < 0 || (size_t)n >= sizeof f->trace)
            return gp_cli_error(cmd,
                                "--name: '%s' makes names of %d bytes, over the %d a path may "
                                "have: file name too long (ENAMETOOLONG)",
                                gp_path_shown(base, shown, sizeof shown), n, PATH_MAX - 1);
        if (gp_path_check(paths[i], err, sizeof err) != 0)
            return gp_cli_error(cmd, "--name: %s", err);
        struct stat st;
        if (lstat(paths[i], &st) == 0)
            return gp_cli_error(cmd, "'%s' exists; give another --name or remove it", paths[i]);
        if (errno != ENOENT && errno != ENOTDIR)
            return gp_cli_error(cmd, "--name: cannot use '%s': %s", paths[i], strerror(errno));
    }
    return 0;
}

void gp_compare_show_line(const char *line, size_t len)
{
    if (!line) {
        fputs("(end of output)", stderr);
        return;
    }
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        len--;
    size_t n = len < 160 ? len : 160;
    fputc('\'', stderr);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)line[i];
        fputc(ch < 0x20 && ch != '\t' ? '?' : ch, stderr);
    }
    fputc('\'', stderr);
    if (n < len)
        fputs("...", stderr);
}

int gp_compare_first_difference(const char *pa, const char *pb, size_t *line_no, char **la,
                                size_t *na, char **lb, size_t *nb)
{
    FILE *a = fopen(pa, "rb"), *b = fopen(pb, "rb");
    int rc = -1;
    *la = *lb = NULL;
    *na = *nb = 0;
    if (!a || !b)
        goto done;
    size_t ca = 0, cb = 0;
    for (size_t line = 1;; line++) {
        ssize_t ra = getline(la, &ca, a), rb = getline(lb, &cb, b);
        if (ra < 0 && rb < 0) {
            rc = ferror(a) || ferror(b) ? -1 : 0;
            break;
        }
        if (ra != rb || memcmp(*la, *lb, (size_t)ra) != 0) {
            *line_no = line;
            if (ra < 0) {
                free(*la);
                *la = NULL;
            }
            if (rb < 0) {
                free(*lb);
                *lb = NULL;
            }
            *na = ra < 0 ? 0 : (size_t)ra;
            *nb = rb < 0 ? 0 : (size_t)rb;
            rc = 1;
            break;
        }
    }
done:
    if (rc != 1) {
        free(*la);
        free(*lb);
        *la = *lb = NULL;
    }
    if (a)
        fclose(a);
    if (b)
        fclose(b);
    return rc;
}

void gp_compare_show_last_line(const char *cmd, const char *label, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return;
    char buf[4096];
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    long from = size > (long)sizeof buf ? size - (long)sizeof buf : 0;
    size_t n = size >= 0 && fseek(f, from, SEEK_SET) == 0 ? fread(buf, 1, sizeof buf, f) : 0;
    fclose(f);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (n == 0)
        return;
    size_t start = n;
    while (start > 0 && buf[start - 1] != '\n')
        start--;
    fprintf(stderr, "gradprof %s:   %s's stderr ends with: ", cmd, label);
    gp_compare_show_line(buf + start, n - start);
    fputc('\n', stderr);
}

int gp_compare_diverged(const char *cmd, const char *prog, bool ignore_stdout,
                        const gp_compare_files *fa, const gp_compare_files *fb,
                        const gp_run_result *ra, const gp_run_result *rb)
{
    char how_a[128], how_b[128];
    gp_run_describe_status(ra->status, how_a, sizeof how_a);
    gp_run_describe_status(rb->status, how_b, sizeof how_b);
    int rc = 0;
    if (ra->status != rb->status) {
        gp_cli_error(cmd, "the runs diverged: A %s, B %s", how_a, how_b);
        if (ra->code)
            gp_compare_show_last_line(cmd, "A", fa->err);
        if (rb->code)
            gp_compare_show_last_line(cmd, "B", fb->err);
        rc = GP_EXIT_DIVERGED;
    } else if (ra->code != 0) {
        gp_cli_error(cmd, "%s %s in both runs", prog, how_a);
        gp_compare_show_last_line(cmd, "A", fa->err);
        rc = ra->code;
    }
    if (rc) {
        gp_cli_error(cmd,
                     "no diff (the traces are kept: 'gradprof diff %s %s' compares them "
                     "anyway)",
                     fa->trace, fb->trace);
        return rc;
    }
    if (ignore_stdout)
        return 0;
    size_t line = 0, na, nb;
    char *la = NULL, *lb = NULL;
    int d = gp_compare_first_difference(fa->out, fb->out, &line, &la, &na, &lb, &nb);
    if (d < 0)
        rc = gp_cli_error(cmd, "cannot read back %s or %s: %s", fa->out, fb->out, strerror(errno));
    if (d > 0) {
        gp_cli_error(cmd, "the runs diverged: their standard output differs from line %zu on",
                     line);
        fprintf(stderr, "gradprof %s:   A (%s): ", cmd, fa->out);
        gp_compare_show_line(la, na);
        fprintf(stderr, "\ngradprof %s:   B (%s): ", cmd, fb->out);
        gp_compare_show_line(lb, nb);
        fputc('\n', stderr);
        gp_cli_error(cmd, "no diff: the traces may not record the same computation "
                          "(--ignore-stdout diffs them anyway)");
        rc = GP_EXIT_DIVERGED;
    }
    free(la);
    free(lb);
    return rc;
}
