/*
 * Writing a file for a command (API and rules: output.h).
 */
#define _GNU_SOURCE /* mkostemp */
#include "output.h"
#include "error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHOWN_MAX 160 /* paths longer than this are shortened in messages */

const char *gp_path_shown(const char *path, char *buf, size_t size)
{
    size_t n = strlen(path);
    if (n <= SHOWN_MAX)
        snprintf(buf, size, "%s", path);
    else
        snprintf(buf, size, "%.100s...%s (%zu bytes)", path, path + n - 40, n);
    return buf;
}

int gp_path_check(const char *path, char *err, size_t err_size)
{
    char shown[SHOWN_MAX + 64];
    size_t n = strlen(path);
    if (n >= PATH_MAX) {
        snprintf(err, err_size,
                 "'%s' is %zu bytes long, over the %d a path may have: file name too long "
                 "(ENAMETOOLONG)",
                 gp_path_shown(path, shown, sizeof shown), n, PATH_MAX - 1);
        return GP_ENAMETOOLONG;
    }
    for (const char *s = path; *s;) {
        size_t len = strcspn(s, "/");
        if (len > NAME_MAX) {
            snprintf(err, err_size,
                     "'%s': the name '%.40s...' in it is %zu bytes, over the %d a file name may "
                     "have: file name too long (ENAMETOOLONG)",
                     gp_path_shown(path, shown, sizeof shown), s, len, NAME_MAX);
            return GP_ENAMETOOLONG;
        }
        s += len;
        s += *s == '/';
    }
    return 0;
}

/* The error of a system call on path, as a code with "cannot WHAT 'path': strerror". */
static int sys_error(int errnum, const char *what, const char *path, char *err, size_t err_size)
{
    char shown[SHOWN_MAX + 64];
    snprintf(err, err_size, "cannot %s '%s': %s", what, gp_path_shown(path, shown, sizeof shown),
             strerror(errnum));
    return gp_error_from_errno(errnum);
}

/* Refuses what must not be written: a symbolic link, a directory, an input. `st` is the lstat of
 * the existing path. */
static int refuse(const char *path, const struct stat *st, const char *const *inputs,
                  size_t n_inputs, char *err, size_t err_size)
{
    char shown[SHOWN_MAX + 64];
    gp_path_shown(path, shown, sizeof shown);
    if (S_ISLNK(st->st_mode)) {
        struct stat target;
        bool dangling = stat(path, &target) != 0;
        snprintf(err, err_size,
                 "'%s' is a %ssymbolic link; gradprof never writes through one (name the file "
                 "itself, or remove the link)",
                 shown, dangling ? "dangling " : "");
        return GP_ESYMLINK;
    }
    if (S_ISDIR(st->st_mode)) {
        snprintf(err, err_size, "'%s' is a directory", shown);
        return GP_EISDIR;
    }
    if (!S_ISREG(st->st_mode) && !S_ISCHR(st->st_mode) && !S_ISFIFO(st->st_mode)) {
        snprintf(err, err_size, "'%s' is not a regular file", shown);
        return GP_ENOTREG;
    }
    for (size_t i = 0; i < n_inputs; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == st->st_dev &&
            in.st_ino == st->st_ino) {
            snprintf(err, err_size, "'%s' is the input '%s'; writing there would destroy it", shown,
                     inputs[i]);
            return GP_ESAMEFILE;
        }
    }
    return 0;
}

/* Opens a character device or FIFO in place (no temporary file, no truncation). */
static int open_in_place(gp_output *o, char *err, size_t err_size)
{
    int fd = open(o->path, O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return sys_error(errno, "write", o->path, err, err_size);
    if (fstat(fd, &st) != 0 || (!S_ISCHR(st.st_mode) && !S_ISFIFO(st.st_mode))) {
        close(fd); /* replaced since the lstat */
        snprintf(err, err_size, "'%s' changed while it was opened", o->path);
        return GP_EIO;
    }
    if (!(o->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        return sys_error(e, "write", o->path, err, err_size);
    }
    return 0;
}

/* Creates the temporary file next to the path with the mode the file will have. */
static int open_temporary(gp_output *o, const struct stat *old, char *err, size_t err_size)
{
    const char *slash = strrchr(o->path, '/');
    const char *name = slash ? slash + 1 : o->path;
    int dir_len = slash ? (int)(slash - o->path) + 1 : 0;
    if (strlen(name) + 8 <= NAME_MAX)
        snprintf(o->tmp, sizeof o->tmp, "%.*s.%s.XXXXXX", dir_len, o->path, name);
    else
        snprintf(o->tmp, sizeof o->tmp, "%.*s.gradprof.XXXXXX", dir_len, o->path);
    int fd = mkostemp(o->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        o->tmp[0] = '\0';
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", dir_len ? dir_len : 1, dir_len ? o->path : ".");
        if (e == ENOENT || e == ENOTDIR)
            return sys_error(e, "write", o->path, err, err_size);
        char what[PATH_MAX + 64];
        snprintf(what, sizeof what, "create a file in '%s' for", dir);
        return sys_error(e, what, o->path, err, err_size);
    }
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = old ? (old->st_mode & 0777) : (0666 & ~mask);
    if (fchmod(fd, mode) != 0 || !(o->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        o->tmp[0] = '\0';
        return sys_error(e, "write", o->path, err, err_size);
    }
    return 0;
}

int gp_output_open(gp_output *o, const char *path, const char *const *inputs, size_t n_inputs,
                   char *err, size_t err_size)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    if (!path) {
        o->f = stdout;
        return 0;
    }
    int rc = gp_path_check(path, err, err_size);
    if (rc)
        return rc;
    struct stat st;
    if (lstat(path, &st) == 0) {
        o->existed = true;
        if ((rc = refuse(path, &st, inputs, n_inputs, err, err_size)))
            return rc;
        if (!S_ISREG(st.st_mode))
            return open_in_place(o, err, err_size);
        return open_temporary(o, &st, err, err_size);
    }
    if (errno != ENOENT)
        return sys_error(errno, "write", path, err, err_size);
    return open_temporary(o, NULL, err, err_size);
}

int gp_output_close(gp_output *o, int write_rc, char *err, size_t err_size)
{
    int e = write_rc ? errno : 0; /* the failing write's, read first */
    if (!o->f)
        return 0;
    bool replacing = o->tmp[0] && o->existed;
    bool failed = write_rc != 0 || ferror(o->f);
    if (fflush(o->f) != 0 && !e)
        e = errno;
    failed = failed || ferror(o->f);
    if (o->f != stdout && fclose(o->f) != 0 && !failed) {
        failed = true;
        e = errno;
    }
    bool to_stdout = o->f == stdout;
    o->f = NULL;
    char shown[SHOWN_MAX + 64];
    const char *name = to_stdout ? "standard output" : gp_path_shown(o->path, shown, sizeof shown);
    if (!failed && o->tmp[0] && rename(o->tmp, o->path) != 0) {
        failed = true;
        e = errno;
    }
    if (!failed)
        return 0;
    if (o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = '\0';
    snprintf(err, err_size, "error writing %s%s%s: %s%s", to_stdout ? "" : "'", name,
             to_stdout ? "" : "'", strerror(e ? e : EIO),
             replacing ? " (the file there is unchanged)" : "");
    return gp_error_from_errno(e);
}

void gp_output_abort(gp_output *o)
{
    if (o->f && o->f != stdout)
        fclose(o->f);
    o->f = NULL;
    if (o->tmp[0])
        unlink(o->tmp);
    o->tmp[0] = '\0';
}

int gp_output_create_new(const char *path, int *fd, char *err, size_t err_size)
{
    int rc = gp_path_check(path, err, err_size);
    if (rc)
        return rc;
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (*fd < 0)
        return sys_error(errno, "create", path, err, err_size);
    return 0;
}
