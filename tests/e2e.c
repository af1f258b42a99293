/* The end-to-end tests' shared helpers (e2e.h). */
#include "e2e.h"

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

int e2e_vshell(const char *dir, const char *out_path, const char *err_path, const char *fmt,
               va_list ap)
{
    char cmd[8192], full[8192 + 3 * 4096 + 64];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    if (dir)
        snprintf(full, sizeof full, "cd '%s' && ( %s ) >'%s' 2>'%s'", dir, cmd, out_path, err_path);
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

int e2e_session_open(e2e_session *s, const char *name)
{
    *s = (e2e_session){0};
    snprintf(s->dir, sizeof s->dir, "/tmp/gradprof_%s.XXXXXX", name);
    if (!mkdtemp(s->dir))
        return -1;
    snprintf(s->out_path, sizeof s->out_path, "%s/.stdout", s->dir);
    snprintf(s->err_path, sizeof s->err_path, "%s/.stderr", s->dir);
    return 0;
}

int e2e_session_close(e2e_session *s)
{
    free(s->out);
    free(s->err);
    s->out = s->err = NULL;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    return system(cmd) == 0 ? 0 : -1;
}

int e2e_sh(e2e_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = e2e_vshell(s->dir, s->out_path, s->err_path, fmt, ap);
    va_end(ap);
    free(s->out);
    free(s->err);
    s->out = e2e_slurp(s->out_path, NULL);
    s->err = e2e_slurp(s->err_path, NULL);
    assert_non_null(s->out);
    assert_non_null(s->err);
    return rc;
}

void e2e_show(const e2e_session *s)
{
    print_message("---- stdout\n%s---- stderr\n%s----\n", s->out, s->err);
}

void e2e_contains(const e2e_session *s, const char *hay, const char *needle)
{
    if (!hay || !strstr(hay, needle)) {
        print_message("expected to find: %s\n", needle);
        e2e_show(s);
        fail();
    }
}

void e2e_lacks(const e2e_session *s, const char *hay, const char *needle)
{
    if (hay && strstr(hay, needle)) {
        print_message("expected not to find: %s\n", needle);
        e2e_show(s);
        fail();
    }
}

void e2e_expect_rc(const e2e_session *s, int rc, int want)
{
    if (rc != want) {
        print_message("exit status %d, expected %d\n", rc, want);
        e2e_show(s);
    }
    assert_int_equal(rc, want);
}

void e2e_one_line_error(const e2e_session *s, const char *prefix)
{
    size_t n = strlen(s->err);
    if (n == 0 || s->err[n - 1] != '\n' || strchr(s->err, '\n') != s->err + n - 1) {
        print_message("expected exactly one line on stderr\n");
        e2e_show(s);
        fail();
    }
    e2e_contains(s, s->err, prefix);
}
