/* The end-to-end tests' shared helpers (e2e.h). */
#include "e2e.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

int e2e_vshell(const char *dir, const char *out_path, const char *err_path, const char *fmt,
               va_list ap)
{
    char cmd[8192], full[8192 + 3 * 4096 + 64];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    if (dir)
        snprintf(full, sizeof full, "cd '%s' && ( %s ) >'%s' 2>'%s'", dir, cmd, out_path,
                 err_path);
    else
        snprintf(full, sizeof full, "( %s ) >'%s' 2>'%s'", cmd, out_path, err_path);
    int st = system(full);
    if (st == -1)
        return -1;
    return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

int e2e_shell(const char *dir, const char *out_path, const char *err_path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = e2e_vshell(dir, out_path, err_path, fmt, ap);
    va_end(ap);
    return rc;
}

char *e2e_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, k;
    char *buf = malloc(cap);
    while (buf && (k = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

bool e2e_write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

void e2e_print_file(const char *what, const char *path)
{
    char *s = e2e_slurp(path, NULL);
    print_message("---- %s ----\n%s\n", what, s ? s : "(unreadable)");
    free(s);
}

bool e2e_have_python(void)
{
    return access("/usr/bin/python3", X_OK) == 0;
}
