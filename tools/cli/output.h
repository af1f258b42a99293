/*
 * The one way the gradprof commands write a file: report -o, diff -o (and compare -o, through
 * diff), check --junit, standard output, and the new files compare captures a program's output
 * in. The rules, for every command:
 *   - never onto an input of the command: the output is refused when it is the same file
 *     (st_dev and st_ino, so another name or a hard link of an input is caught too);
 *   - never through a symbolic link, dangling or not: refused, the link and its target untouched;
 *   - never a half file: a regular file is written to a new temporary file in the same directory
 *     (".NAME.XXXXXX") and renamed onto the name only when everything was written, so a failed
 *     write leaves the old file as it was (or no file) and removes the temporary one. A new file
 *     gets mode 0666 minus the umask, a replaced one keeps its permission bits;
 *   - a character device or a FIFO that exists (/dev/null, a named pipe) is written in place;
 *     a directory or any other kind of file is refused;
 *   - a path over PATH_MAX or with a component over NAME_MAX bytes is refused with that reason.
 * Errors are codes of error.h with one line in err naming the file and why.
 */
#ifndef GRADPROF_TOOLS_OUTPUT_H
#define GRADPROF_TOOLS_OUTPUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct gp_output {
    const char *path;   /* as given; NULL: standard output */
    FILE *f;            /* where to write */
    char tmp[PATH_MAX]; /* the temporary file, "" when writing in place or to stdout */
    bool existed;       /* a file was at path when it was opened */
} gp_output;

/*
 * Opens the output at `path` (NULL: standard output) for a command whose input files are
 * inputs[0, n_inputs) (NULL entries are skipped). Returns 0 with o->f ready, or GP_ENAMETOOLONG,
 * GP_ESYMLINK, GP_ESAMEFILE, GP_EISDIR, GP_ENOTREG, GP_EACCES, GP_ENOENT (no such directory),
 * GP_EIO ... with a message in err; then nothing was created.
 */
int gp_output_open(gp_output *o, const char *path, const char *const *inputs, size_t n_inputs,
                   char *err, size_t err_size);

/*
 * Finishes the output: call it right after writing, with write_rc the writer's result (non-zero:
 * it failed; errno is read first, as the failing write left it). Flushes and closes, then renames
 * the temporary file onto the path. Returns 0, or a code with a message in err (the error of the
 * first write, flush, close or rename that failed); on error the temporary file is removed and
 * the old file at path, if any, is unchanged. Standard output is flushed, not closed.
 */
int gp_output_close(gp_output *o, int write_rc, char *err, size_t err_size);

/* Abandons an open output: closes it and removes the temporary file (the old file is unchanged).
 * A closed or zeroed output is a no-op. */
void gp_output_abort(gp_output *o);

/*
 * Creates a new file for a program's output (compare's captures), never an existing name and
 * never through a symbolic link (O_CREAT | O_EXCL | O_NOFOLLOW), closed on exec. Returns 0 with
 * *fd set, or a code with a message in err.
 */
int gp_output_create_new(const char *path, int *fd, char *err, size_t err_size);

/*
 * Checks that a path can name a file: under PATH_MAX bytes in all, and no component over NAME_MAX
 * bytes. Returns 0, or GP_ENAMETOOLONG with a message in err that gives the lengths and the
 * reason instead of a name cut off.
 */
int gp_path_check(const char *path, char *err, size_t err_size);

/* The path for a message: itself when it is short, else its first and last bytes with its length
 * ("/tmp/aaaa...aaaa.xml (5000 bytes)"). Returns buf. */
const char *gp_path_shown(const char *path, char *buf, size_t size);

#endif /* GRADPROF_TOOLS_OUTPUT_H */
