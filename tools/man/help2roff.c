/*
 * help2roff: writes a man page (roff, man macros) made from what `gradprof COMMAND --help`
 * prints, so that the man pages and --help cannot drift apart: the build runs it for every
 * command and tests/test_man.sh checks the pages against the binary.
 *
 *   help2roff GRADPROF COMMAND OUT.1      the page of one command (gradprof-COMMAND(1))
 *   help2roff GRADPROF - OUT.1            the page of gradprof itself (gradprof(1))
 *
 * It runs `GRADPROF COMMAND --help` (or `GRADPROF --help`), `GRADPROF --help` for the commands'
 * one-line summaries and `GRADPROF --version`. The help text is read as blocks separated by blank
 * lines:
 *   - "usage: ..." and the lines under it are the SYNOPSIS, verbatim;
 *   - a short line at the left margin ending in ':' ("options:", "rules:") opens a section; in a
 *     section, an indented line whose text has a gap of two spaces ("  --top N   rows per ...")
 *     is an item (.TP: the term in bold, metavariables in italics), and the lines indented under
 *     its description continue it;
 *   - other text at the left margin is a paragraph (filled), other indented lines are kept as
 *     they are (a table, a formula);
 * then SEE ALSO names gradprof(1) and every command's page. Output is deterministic (no date).
 * Exit status 0, or 1 with a message naming what failed.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_LINES 4096
#define MAX_COMMANDS 32

typedef struct text {
    char *buf;
    char *lines[MAX_LINES];
    size_t n;
} text;

/* Runs argv and reads its standard output into t (split into lines). 0, or -1 with a message. */
static int capture(char *const argv[], text *t)
{
    int fds[2];
    if (pipe(fds) != 0) {
        perror("help2roff: pipe");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("help2roff: fork");
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execv(argv[0], argv);
        fprintf(stderr, "help2roff: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 8192;
    t->buf = malloc(cap);
    for (;;) {
        if (t->buf != NULL && len + 1 >= cap) {
            char *more = realloc(t->buf, cap *= 2);
            if (more == NULL)
                free(t->buf);
            t->buf = more;
        }
        if (t->buf == NULL) {
            fprintf(stderr, "help2roff: out of memory\n");
            close(fds[0]);
            return -1;
        }
        ssize_t k = read(fds[0], t->buf + len, cap - len - 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        len += (size_t)k;
    }
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "help2roff: '%s %s' failed (status %d)\n", argv[0], argv[1] ? argv[1] : "",
                status);
        return -1;
    }
    t->buf[len] = '\0';
    t->n = 0;
    for (char *s = t->buf; *s && t->n < MAX_LINES;) {
        char *nl = strchr(s, '\n');
        t->lines[t->n++] = s;
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    return 0;
}

static size_t indent_of(const char *s)
{
    size_t i = 0;
    while (s[i] == ' ')
        i++;
    return i;
}

static bool blank(const char *s)
{
    return s[indent_of(s)] == '\0';
}

/* Writes s escaped for roff: backslash and hyphen-minus, and a leading '.' or '\''. */
static void put_escaped_n(FILE *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++) {
        if (s[i] == '\\')
            fputs("\\e", out);
        else if (s[i] == '-')
            fputs("\\-", out);
        else
            fputc(s[i], out);
    }
}

static void put_line(FILE *out, const char *s)
{
    if (s[0] == '.' || s[0] == '\'')
        fputs("\\&", out);
    put_escaped_n(out, s, strlen(s));
    fputc('\n', out);
}

/* Where an item's description starts: after the first gap of two or more spaces that follows
 * the term (which starts at `from`); 0 when the line has no such gap. */
static size_t item_gap(const char *s, size_t from, size_t *term_end)
{
    for (size_t i = from; s[i]; i++)
        if (s[i] == ' ' && s[i + 1] == ' ') {
            *term_end = i;
            size_t j = i;
            while (s[j] == ' ')
                j++;
            return s[j] ? j : 0;
        }
    return 0;
}

/* An item's term: words starting with '-' (options) in bold, others (values) in italics. */
static void put_term(FILE *out, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] == ' ') {
            fputc(' ', out);
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] != ' ')
            j++;
        size_t w = j - i;
        bool comma = w > 1 && s[j - 1] == ',';
        if (comma)
            w--;
        bool opt = s[i] == '-';
        fputs(opt ? "\\fB" : "\\fI", out);
        put_escaped_n(out, s + i, w);
        fputs("\\fR", out);
        if (comma)
            fputc(',', out);
        i = j;
    }
}

static void upper_line(FILE *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fputc(toupper((unsigned char)s[i]), out);
}

/* Whether line i opens a section: at the margin, short, ending in ':'. */
static bool section_header(const char *s)
{
    size_t n = strlen(s);
    return s[0] != ' ' && n > 1 && n <= 40 && s[n - 1] == ':';
}

/* The one-line summary of `command` in `gradprof --help`'s commands section. */
static const char *summary_of(const text *top, const char *command, char *buf, size_t size)
{
    size_t n = strlen(command);
    for (size_t i = 0; i < top->n; i++) {
        const char *s = top->lines[i];
        if (indent_of(s) == 2 && strncmp(s + 2, command, n) == 0 && s[2 + n] == ' ') {
            const char *d = s + 2 + n;
            while (*d == ' ')
                d++;
            snprintf(buf, size, "%s", d);
            return buf;
        }
    }
    return NULL;
}

/* The commands listed in `gradprof --help` ("commands:" section), but "help". */
static size_t commands_of(const text *top, const char **names, char bufs[][32], size_t max)
{
    size_t k = 0;
    bool in = false;
    for (size_t i = 0; i < top->n && k < max; i++) {
        const char *s = top->lines[i];
        if (section_header(s)) {
            in = strcmp(s, "commands:") == 0;
            continue;
        }
        if (!in || blank(s) || indent_of(s) != 2)
            continue;
        size_t w = strcspn(s + 2, " ");
        if (w == 0 || w >= 32 || strncmp(s + 2, "help", w) == 0)
            continue;
        memcpy(bufs[k], s + 2, w);
        bufs[k][w] = '\0';
        names[k] = bufs[k];
        k++;
    }
    return k;
}

static void write_body(FILE *out, const text *h)
{
    bool in_section = false;
    size_t i = 0;
    while (i < h->n) {
        const char *s = h->lines[i];
        if (blank(s)) {
            i++;
            continue;
        }
        if (strncmp(s, "usage: ", 7) == 0) {
            fputs(".SH SYNOPSIS\n.nf\n", out);
            for (; i < h->n && !blank(h->lines[i]); i++) {
                const char *l = h->lines[i];
                size_t skip = strncmp(l, "usage: ", 7) == 0 ? 7 : indent_of(l) >= 7 ? 7 : 0;
                put_line(out, l + skip);
            }
            fputs(".fi\n", out);
            if (!in_section)
                fputs(".SH DESCRIPTION\n", out);
            continue;
        }
        if (section_header(s)) {
            fputs(".SH ", out);
            upper_line(out, s, strlen(s) - 1);
            fputc('\n', out);
            in_section = true;
            i++;
            continue;
        }
        if (indent_of(s) == 0) { /* a paragraph, up to the next blank line or indented line */
            fputs(".PP\n", out);
            for (; i < h->n && !blank(h->lines[i]) && indent_of(h->lines[i]) == 0 &&
                   !section_header(h->lines[i]);
                 i++)
                put_line(out, h->lines[i]);
            continue;
        }
        size_t ind = indent_of(s), term_end = 0;
        size_t desc = in_section ? item_gap(s, ind, &term_end) : 0;
        if (desc) { /* an item and its continuation lines */
            fputs(".TP\n", out);
            put_term(out, s + ind, term_end - ind);
            fputc('\n', out);
            put_line(out, s + desc);
            /* Continuation: deeper than the item, and no option of the same list (those may
             * be indented further: "  -n, --name BASE" then "      --format FMT"). */
            for (i++;
                 i < h->n && !blank(h->lines[i]) && indent_of(h->lines[i]) > ind &&
                 (h->lines[i][indent_of(h->lines[i])] != '-' || indent_of(h->lines[i]) + 2 >= desc);
                 i++)
                put_line(out, h->lines[i] + indent_of(h->lines[i]));
            continue;
        }
        /* Indented lines that are no item: kept as they are. */
        fputs(".PP\n.RS 2\n.nf\n", out);
        for (; i < h->n && !blank(h->lines[i]) && indent_of(h->lines[i]) > 0; i++) {
            const char *l = h->lines[i];
            put_line(out, l + (indent_of(l) >= 2 ? 2 : indent_of(l)));
        }
        fputs(".fi\n.RE\n", out);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: help2roff GRADPROF COMMAND|- OUT.1\n");
        return 1;
    }
    const char *bin = argv[1], *command = strcmp(argv[2], "-") ? argv[2] : NULL;
    text top = {0}, help = {0}, version = {0};
    char *top_argv[] = {(char *)bin, "--help", NULL};
    char *ver_argv[] = {(char *)bin, "--version", NULL};
    char *cmd_argv[] = {(char *)bin, (char *)command, "--help", NULL};
    if (capture(top_argv, &top) || capture(ver_argv, &version) ||
        (command && capture(cmd_argv, &help)))
        return 1;
    const char *ver = version.n ? version.lines[0] : "gradprof";

    char sum[512];
    const char *summary = "a memory profiler for ML inference that shows what autograd holds";
    if (command && !(summary = summary_of(&top, command, sum, sizeof sum))) {
        fprintf(stderr, "help2roff: '%s --help' lists no command '%s'\n", bin, command);
        return 1;
    }
    const char *names[MAX_COMMANDS];
    char name_bufs[MAX_COMMANDS][32];
    size_t n_commands = commands_of(&top, names, name_bufs, MAX_COMMANDS);

    FILE *out = fopen(argv[3], "w");
    if (!out) {
        fprintf(stderr, "help2roff: %s: %s\n", argv[3], strerror(errno));
        return 1;
    }
    fprintf(out, ".\\\" Made by tools/man/help2roff from 'gradprof%s%s --help'; do not edit.\n",
            command ? " " : "", command ? command : "");
    fputs(".TH ", out);
    upper_line(out, "gradprof", 8);
    if (command) {
        fputs("\\-", out);
        upper_line(out, command, strlen(command));
    }
    fputs(" 1 \"\" \"", out);
    put_escaped_n(out, ver, strlen(ver));
    fputs("\" \"gradprof manual\"\n.SH NAME\ngradprof", out);
    if (command) {
        fputs("\\-", out);
        put_escaped_n(out, command, strlen(command));
    }
    fputs(" \\- ", out);
    put_escaped_n(out, summary, strlen(summary));
    fputc('\n', out);
    write_body(out, command ? &help : &top);
    fputs(".SH SEE ALSO\n", out);
    bool first = true;
    if (command) {
        fputs("\\fBgradprof\\fR(1)", out);
        first = false;
    }
    for (size_t i = 0; i < n_commands; i++) {
        if (command && strcmp(names[i], command) == 0)
            continue;
        fprintf(out, "%s\\fBgradprof\\-%s\\fR(1)", first ? "" : ",\n", names[i]);
        first = false;
    }
    fputs("\n.PP\nThe README of gradprof describes the trace format, the categories, the "
          "detectors and the JSON schemas in full.\n",
          out);
    free(top.buf);
    free(help.buf);
    free(version.buf);
    if (fclose(out) != 0) {
        fprintf(stderr, "help2roff: %s: %s\n", argv[3], strerror(errno));
        return 1;
    }
    return 0;
}
