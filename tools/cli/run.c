/*
 * Running a program under the recorder (API: run.h), shared by `gradprof run` and `gradprof
 * compare`.
 */
#define _GNU_SOURCE /* pipe2, strverscmp, strsignal */
#include "run.h"
#include "cli.h"
#include "output.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define PRELOAD_NAME "libprof_preload.so"
#define CUPTI_NAME "libprof_cupti.so"
#define STARTUP_NAME "sitecustomize.py"
#define STR(x) #x
#define XSTR(x) STR(x)

const char gp_run_options_help[] =
    "      --stack-depth N      frames per call stack, 0-" XSTR(LP_MAX_STACK_DEPTH)
    " (default " XSTR(LP_DEFAULT_STACK_DEPTH) "); a Python\n"
    "                           program's stack adds up to N/2 of the Python frames beyond them\n"
    "      --no-stacks          record no call stacks (--stack-depth 0)\n"
    "      --min-stack-size SIZE  allocations smaller than SIZE get no stack (default 0)\n"
    "      --stack-sample SIZE  capture a stack about once per SIZE bytes allocated (geometric\n"
    "                           sampling; default 0 = every allocation). Every allocation is\n"
    "                           still recorded, only stacks are sampled\n"
    "      --flush-ms N         flush interval, " XSTR(LP_MIN_FLUSH_MS) "-" XSTR(LP_MAX_FLUSH_MS)
    " ms (default " XSTR(LP_DEFAULT_FLUSH_MS) "): a program killed by\n"
    "                           SIGKILL loses at most about this much\n"
    "      --cuda               also record CUDA memory (cudaMalloc & co., with host stacks)\n"
    "                           through CUPTI: sets CUDA_INJECTION64_PATH to libprof_cupti.so\n"
    "                           ($GRADPROF_CUPTI, else next to the preload library). Without a\n"
    "                           CUDA driver, or when another CUPTI client is attached, one line\n"
    "                           says so and only host memory is recorded\n"
    "      --torch              attach gradprof's PyTorch helper to a Python program when it\n"
    "                           imports torch (the default, unless GRADPROF_TORCH=0): every\n"
    "                           module call gets its region, parameters and saved tensors their\n"
    "                           tags, each call of the model an iteration mark\n"
    "      --no-torch           never attach it: raw allocations and frame rules only\n";

int gp_run_option(const char *cmd, int c, const char *value, gp_run_config *cfg)
{
    char err[512];
    switch (c) {
    case GP_RUN_OPT_STACK_DEPTH:
        if (gp_parse_uint(value, 0, LP_MAX_STACK_DEPTH, &cfg->depth, err, sizeof err) != 0)
            return gp_cli_error(cmd, "--stack-depth: %s", err);
        cfg->have_depth = true;
        return 0;
    case GP_RUN_OPT_NO_STACKS:
        cfg->depth = 0;
        cfg->have_depth = true;
        return 0;
    case GP_RUN_OPT_MIN_STACK:
        if (gp_parse_size(value, &cfg->min_stack, err, sizeof err) != 0)
            return gp_cli_error(cmd, "--min-stack-size: %s", err);
        cfg->have_min = true;
        return 0;
    case GP_RUN_OPT_STACK_SAMPLE:
        if (gp_parse_size(value, &cfg->sample, err, sizeof err) != 0)
            return gp_cli_error(cmd, "--stack-sample: %s", err);
        cfg->have_sample = true;
        return 0;
    case GP_RUN_OPT_FLUSH_MS:
        if (gp_parse_uint(value, LP_MIN_FLUSH_MS, LP_MAX_FLUSH_MS, &cfg->flush_ms, err, sizeof err) != 0)
            return gp_cli_error(cmd, "--flush-ms: %s", err);
        cfg->have_flush = true;
        return 0;
    case GP_RUN_OPT_CUDA:
        cfg->cuda = true;
        return 0;
    case GP_RUN_OPT_TORCH:
    case GP_RUN_OPT_NO_TORCH:
        cfg->torch = c == GP_RUN_OPT_TORCH;
        return 0;
    default:
        return gp_cli_error(cmd, "internal error: option code %d is not a recorder option", c);
    }
}

/* ---- finding the libraries ------------------------------------------------------------------- */

/* The directory of the running gradprof binary into out; false if /proc/self/exe is unreadable. */
static bool exe_dir(char *out, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", out, size - 1);
    if (n <= 0)
        return false;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
    return true;
}

/* Finds libprof_preload.so; 0, or prints which paths were tried and returns GP_EXIT_USAGE. */
static int find_preload(const char *cmd, char *out, size_t size)
{
    const char *env = getenv("GRADPROF_PRELOAD");
    if (env && *env) {
        if (access(env, R_OK) != 0 || !realpath(env, out))
            return gp_cli_error(cmd, "GRADPROF_PRELOAD='%s': %s", env, strerror(errno));
        return 0;
    }
    char exe[PATH_MAX];
    if (!exe_dir(exe, sizeof exe))
        return gp_cli_error(cmd,
                            "cannot find %s: /proc/self/exe: %s; set GRADPROF_PRELOAD to its "
                            "path",
                            PRELOAD_NAME, strerror(errno));
    const char *const rel[] = {"../libprof/" PRELOAD_NAME, "../lib/gradprof/" PRELOAD_NAME};
    char tried[2][PATH_MAX + 64];
    for (size_t i = 0; i < 2; i++) {
        snprintf(tried[i], sizeof tried[i], "%s/%s", exe, rel[i]);
        if (access(tried[i], R_OK) == 0 && realpath(tried[i], out) && strlen(out) < size)
            return 0;
    }
    return gp_cli_error(cmd, "cannot find %s; tried %s and %s; set GRADPROF_PRELOAD to its path",
                        PRELOAD_NAME, tried[0], tried[1]);
}

/* Finds libprof_cupti.so for --cuda ($GRADPROF_CUPTI, else the preload library's directory).
 * Returns 0, or prints why and returns GP_EXIT_USAGE. Without a CUDA driver it warns once and
 * goes on (the program then runs host-only: CUDA never loads the injection). */
static int find_cupti(const char *cmd, const char *preload, char *out, size_t size)
{
    const char *env = getenv("GRADPROF_CUPTI");
    if (env && *env) {
        if (access(env, R_OK) != 0 || !realpath(env, out))
            return gp_cli_error(cmd, "GRADPROF_CUPTI='%s': %s", env, strerror(errno));
    } else {
        const char *slash = strrchr(preload, '/');
        int dir = slash ? (int)(slash - preload) : 0;
        snprintf(out, size, "%.*s/%s", dir, preload, CUPTI_NAME);
        if (access(out, R_OK) != 0)
            return gp_cli_error(cmd,
                                "--cuda: cannot find %s (it is built only when the CUDA toolkit "
                                "with CUPTI is found); set GRADPROF_CUPTI to its path",
                                out);
    }
    const char *old = getenv("CUDA_INJECTION64_PATH");
    if (old && *old && strcmp(old, out) != 0)
        gp_cli_warn(cmd, "--cuda: replacing CUDA_INJECTION64_PATH=%s", old);
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver)
        gp_cli_warn(cmd, "--cuda: no CUDA driver (libcuda.so.1 not found); recording host memory "
                         "only");
    else
        dlclose(driver);
    return 0;
}

/* Whether dir holds the startup hook; writes its absolute path to out. */
static bool startup_at(const char *dir, char *out)
{
    char file[PATH_MAX + 32];
    if ((size_t)snprintf(file, sizeof file, "%.*s/%s", PATH_MAX, dir, STARTUP_NAME) >= sizeof file)
        return false;
    return access(file, R_OK) == 0 && realpath(dir, out);
}

/* Finds the folder of the Python startup hook; "" when there is none. 0, or GP_EXIT_USAGE for a
 * $GRADPROF_PYTHON_STARTUP without sitecustomize.py. */
static int find_python_startup(const char *cmd, char *out, size_t size)
{
    out[0] = '\0';
    const char *env = getenv("GRADPROF_PYTHON_STARTUP");
    if (env && *env) {
        if (!startup_at(env, out))
            return gp_cli_error(cmd, "GRADPROF_PYTHON_STARTUP='%s': no readable %s there", env,
                                STARTUP_NAME);
        return 0;
    }
    char exe[PATH_MAX], dir[PATH_MAX];
    if (!exe_dir(exe, sizeof exe))
        return 0;
    const char *const rel[] = {"../python/startup", "../lib/gradprof/python/startup"};
    for (size_t i = 0; i < 2; i++) {
        if ((size_t)snprintf(dir, sizeof dir, "%.*s/%s", PATH_MAX - 64, exe, rel[i]) >= sizeof dir)
            continue;
        if (startup_at(dir, out) && strlen(out) < size)
            return 0;
    }
    out[0] = '\0';
    return 0;
}

int gp_run_setup_init(const char *cmd, const gp_run_config *cfg, gp_run_setup *s)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    int rc = find_preload(cmd, s->preload, sizeof s->preload);
    if (rc == 0 && cfg->cuda)
        rc = find_cupti(cmd, s->preload, s->cupti, sizeof s->cupti);
    if (rc == 0)
        rc = find_python_startup(cmd, s->python_startup, sizeof s->python_startup);
    return rc;
}

/* ---- the traces ------------------------------------------------------------------------------ */

/* Whether `name` matches `pat` from its start, with every %p standing for `pid` (digits). */
static bool match_with_pid(const char *pat, const char *name, const char *pid, size_t pid_len)
{
    while (*pat) {
        if (pat[0] == '%' && pat[1] == 'p') {
            if (strncmp(name, pid, pid_len) != 0)
                return false;
            name += pid_len;
            pat += 2;
        } else if (*pat++ != *name++) {
            return false;
        }
    }
    while (*name == '.') { /* .N suffixes */
        name++;
        if (!isdigit((unsigned char)*name))
            return false;
        while (isdigit((unsigned char)*name))
            name++;
    }
    return *name == '\0';
}

/* Whether `name` is a file the recorder may have made from the template `pat` (both without a
 * directory): every %p is the same pid (digits: the recorder expands them all with its pid), and
 * any number of ".N" suffixes may follow (.1, .2 for a taken name; .PID for a forked child of a
 * template without %p). The pid's length is not known from the name alone, so each length the
 * digits at the first %p allow is tried. */
static bool trace_name_matches(const char *pat, const char *name)
{
    const char *first = strstr(pat, "%p");
    if (!first)
        return match_with_pid(pat, name, "", 0);
    size_t lead = (size_t)(first - pat);
    if (strncmp(pat, name, lead) != 0)
        return false;
    const char *digits = name + lead;
    for (size_t len = 1; isdigit((unsigned char)digits[len - 1]); len++)
        if (match_with_pid(first + 2, digits + len, digits, len))
            return true;
    return false;
}

typedef struct name_list {
    char **names;
    size_t n, cap;
} name_list;

static void name_list_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static bool name_list_has(const name_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return true;
    return false;
}

static int name_list_add(name_list *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        char **p = realloc(l->names, cap * sizeof *p);
        if (!p)
            return -1;
        l->names = p;
        l->cap = cap;
    }
    if (!(l->names[l->n] = strdup(name)))
        return -1;
    l->n++;
    return 0;
}

/* The regular files in `dir` whose names match `pat`, except those in `skip` (may be NULL). */
static void list_traces(const char *dir, const char *pat, const name_list *skip, name_list *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!trace_name_matches(pat, e->d_name) || (skip && name_list_has(skip, e->d_name)))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            name_list_add(out, e->d_name);
    }
    closedir(d);
}

static int compare_versions(const void *a, const void *b)
{
    return strverscmp(*(const char *const *)a, *(const char *const *)b);
}

/* The main process's trace (the template expanded with its pid) first, then in version order. */
static const char *sort_first;
static int compare_names(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    bool fx = strcmp(x, sort_first) == 0, fy = strcmp(y, sort_first) == 0;
    if (fx != fy)
        return fx ? -1 : 1;
    return compare_versions(a, b);
}

/* A fixed trace name (no %p) whose traces exist already: a run would write its own beside them
 * (.1, .2, ...), where `check NAME` would judge the old one. Prints why; GP_EXIT_USAGE. */
static int refuse_existing(const char *cmd, const char *opt, const char *templ,
                           const name_list *found)
{
    char shown[256];
    qsort(found->names, found->n, sizeof *found->names, compare_versions);
    if (found->n == 1)
        return gp_cli_error(cmd,
                            "%s: '%s' exists: gradprof never overwrites a trace (remove it, or "
                            "name another file)",
                            opt, gp_path_shown(templ, shown, sizeof shown));
    return gp_cli_error(cmd,
                        "%s: %zu traces named '%s' exist (%s, ..., %s): gradprof never "
                        "overwrites a trace (remove them, or name another file)",
                        opt, found->n, gp_path_shown(templ, shown, sizeof shown), found->names[0],
                        found->names[found->n - 1]);
}

/* Expands %p with pid into out. */
static void expand_pid(char *out, size_t size, const char *templ, pid_t pid)
{
    size_t o = 0;
    for (const char *p = templ; *p && o + 1 < size; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            int n = snprintf(out + o, size - o, "%d", (int)pid);
            o = n > 0 && (size_t)n < size - o ? o + (size_t)n : size - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = '\0';
}

/* ---- the child's environment ----------------------------------------------------------------- */

/* Variables to set in the child: names are static strings, values are owned. */
typedef struct env_list {
    const char *name[16];
    char *value[16];
    int n;
} env_list;

static void env_list_free(env_list *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->value[i]);
    e->n = 0;
}

static int env_add(const char *cmd, env_list *e, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int env_add(const char *cmd, env_list *e, const char *name, const char *fmt, ...)
{
    if (e->n == (int)(sizeof e->name / sizeof e->name[0]))
        return gp_cli_error(cmd, "internal error: too many variables for the program");
    va_list ap;
    va_start(ap, fmt);
    char *v = NULL;
    int n = vasprintf(&v, fmt, ap);
    va_end(ap);
    if (n < 0)
        return gp_cli_error(cmd, "cannot set %s: out of memory", name);
    e->name[e->n] = name;
    e->value[e->n++] = v;
    return 0;
}

/* `first`, then the inherited value of `name` after `sep` if it has one. */
static int env_prepend(const char *cmd, env_list *e, const char *name, const char *first)
{
    const char *old = getenv(name);
    if (old && *old)
        return env_add(cmd, e, name, "%s:%s", first, old);
    return env_add(cmd, e, name, "%s", first);
}

/* ---- the child ------------------------------------------------------------------------------- */

static volatile sig_atomic_t child_pid, got_signal;

/* The signals gradprof handles while the program runs: noted (the first two) or passed on. */
static const int run_signals[4] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};

static void signals_restore(const struct sigaction old[4])
{
    for (int i = 0; i < 4; i++)
        sigaction(run_signals[i], &old[i], NULL);
}

/* SIGINT and SIGQUIT come from the terminal to the program as well: only noted. */
static void note_signal(int sig)
{
    got_signal = sig;
}

/* SIGTERM and SIGHUP are sent to gradprof alone: noted and passed on. */
static void forward_signal(int sig)
{
    got_signal = sig;
    if (child_pid > 0)
        kill((pid_t)child_pid, sig);
}

/* Runs argv with `env` added and fds 0, 1, 2 replaced by in/out/errfd where those are >= 0;
 * returns its wait status (and its pid in *pid_out, the signal gradprof got while it ran or 0 in
 * *signal_out), or -1 with *exec_errno set when it could not be started (fork failed, or the
 * environment or exec failed in the child). */
static int run_child(char **argv, const env_list *env, int infd, int outfd, int errfd,
                     int *exec_errno, pid_t *pid_out, int *signal_out)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        *exec_errno = errno;
        return -1;
    }
    /* Like a shell: ^C and ^\ go to the program (same process group), gradprof waits for it to
     * end and then says where the trace is; SIGTERM and SIGHUP sent to gradprof are passed on.
     * Installed before the fork, so a signal the program sends at once is not missed; the child
     * puts the old dispositions back before it runs the program. */
    struct sigaction note = {.sa_handler = note_signal}, fwd = {.sa_handler = forward_signal};
    struct sigaction old[4];
    got_signal = 0;
    child_pid = 0;
    for (int i = 0; i < 4; i++)
        sigaction(run_signals[i], i < 2 ? &note : &fwd, &old[i]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        *exec_errno = errno;
        signals_restore(old);
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        signals_restore(old);
        close(fds[0]);
        int e = 0;
        for (int i = 0; i < env->n && !e; i++)
            if (setenv(env->name[i], env->value[i], 1) != 0)
                e = errno;
        if ((infd >= 0 && dup2(infd, STDIN_FILENO) < 0) ||
            (outfd >= 0 && dup2(outfd, STDOUT_FILENO) < 0) ||
            (errfd >= 0 && dup2(errfd, STDERR_FILENO) < 0))
            e = errno;
        if (!e) {
            execvp(argv[0], argv);
            e = errno;
        }
        ssize_t w = write(fds[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(fds[1]);
    child_pid = pid;
    *pid_out = pid;
    int e = 0;
    ssize_t r;
    do
        r = read(fds[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    signals_restore(old);
    child_pid = 0;
    *signal_out = got_signal;
    if (r == (ssize_t)sizeof e) {
        *exec_errno = e;
        return -1;
    }
    return status;
}

/* ---- one run --------------------------------------------------------------------------------- */

bool gp_run_is_python(const char *prog)
{
    const char *base = strrchr(prog, '/');
    if (strncmp(base ? base + 1 : prog, "python", 6) == 0)
        return true;
    char path[PATH_MAX] = "";
    if (strchr(prog, '/')) {
        snprintf(path, sizeof path, "%s", prog);
    } else { /* the first executable of that name on PATH, as execvp finds it */
        const char *dirs = getenv("PATH");
        for (const char *d = dirs ? dirs : "/usr/local/bin:/usr/bin:/bin"; d && !path[0];) {
            const char *end = strchr(d, ':');
            size_t n = end ? (size_t)(end - d) : strlen(d);
            char cand[PATH_MAX];
            if (snprintf(cand, sizeof cand, "%.*s/%s", n ? (int)n : 1, n ? d : ".", prog) <
                    (int)sizeof cand &&
                access(cand, X_OK) == 0)
                snprintf(path, sizeof path, "%s", cand);
            d = end ? end + 1 : NULL;
        }
    }
    FILE *f = path[0] ? fopen(path, "re") : NULL;
    if (!f)
        return false;
    char line[256] = "";
    bool py = fgets(line, sizeof line, f) && strncmp(line, "#!", 2) == 0 &&
              strstr(line, "python") != NULL;
    fclose(f);
    return py;
}

/* Whether a Python program is recorded without stacks (gp_run_spec.python_no_stacks): the helper
 * may attach, and the user chose nothing about stacks. */
static bool python_no_stacks(const gp_run_setup *s, const gp_run_spec *spec, char **prog)
{
    const gp_run_config *c = &s->cfg;
    const char *torch = getenv("GRADPROF_TORCH");
    if (!spec->python_no_stacks || !s->python_startup[0] || c->have_depth || c->have_min ||
        c->have_sample || c->torch == 0 || (c->torch < 0 && torch && !strcmp(torch, "0")))
        return false;
    const char *const vars[] = {"GRADPROF_STACK_DEPTH", "GRADPROF_MIN_STACK_SIZE",
                                "GRADPROF_STACK_SAMPLE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]) && *getenv(vars[i]))
            return false;
    return gp_run_is_python(prog[0]);
}

/* The environment of the program (see gp_run_program). */
static int build_env(const char *cmd, const gp_run_setup *s, const gp_run_spec *spec, char **prog,
                     const char *abs_templ, env_list *e)
{
    const gp_run_config *c = &s->cfg;
    int rc;
    if (spec->no_record) /* the program as it is: GRADPROF_ENABLE=0 stays in its environment */
        return spec->grad_default ? env_add(cmd, e, "GRADPROF_GRAD_DEFAULT", "%s",
                                            spec->grad_default)
                                  : 0;
    if ((rc = env_prepend(cmd, e, "LD_PRELOAD", s->preload)) ||
        (rc = env_add(cmd, e, "GRADPROF_OUTPUT", "%s", abs_templ)) ||
        (rc = env_add(cmd, e, "GRADPROF_ENABLE", "1")) ||
        (c->have_depth && (rc = env_add(cmd, e, "GRADPROF_STACK_DEPTH", "%" PRIu64, c->depth))) ||
        (c->have_min &&
         (rc = env_add(cmd, e, "GRADPROF_MIN_STACK_SIZE", "%" PRIu64, c->min_stack))) ||
        (c->have_sample &&
         (rc = env_add(cmd, e, "GRADPROF_STACK_SAMPLE", "%" PRIu64, c->sample))) ||
        (python_no_stacks(s, spec, prog) &&
         ((rc = env_add(cmd, e, "GRADPROF_STACK_DEPTH", "0")) ||
          (rc = env_add(cmd, e, "GRADPROF_PYTHON_NO_STACKS", "1")))) ||
        (c->have_flush && (rc = env_add(cmd, e, "GRADPROF_FLUSH_MS", "%" PRIu64, c->flush_ms))) ||
        (s->cupti[0] && (rc = env_add(cmd, e, "CUDA_INJECTION64_PATH", "%s", s->cupti))) ||
        (c->torch >= 0 && (rc = env_add(cmd, e, "GRADPROF_TORCH", "%d", c->torch))) ||
        (s->python_startup[0] && (rc = env_prepend(cmd, e, "PYTHONPATH", s->python_startup))) ||
        (spec->grad_default &&
         (rc = env_add(cmd, e, "GRADPROF_GRAD_DEFAULT", "%s", spec->grad_default))) ||
        (spec->same_hash_seed && !getenv("PYTHONHASHSEED") &&
         (rc = env_add(cmd, e, "PYTHONHASHSEED", "0"))))
        return rc;
    const char *grad = spec->grad_default ? spec->grad_default : getenv("GRADPROF_GRAD_DEFAULT");
    if (grad && strcmp(grad, "off") == 0 && !s->python_startup[0])
        gp_cli_warn(cmd,
                    "GRADPROF_GRAD_DEFAULT=off: the Python startup hook (%s) was not found next "
                    "to gradprof, so a Python program starts with grad on; set "
                    "GRADPROF_PYTHON_STARTUP to the folder that holds it",
                    STARTUP_NAME);
    return 0;
}

/* Opens a capture file for the program (output.h: a new file, never an existing name, never
 * through a symbolic link), closed on exec. */
static int open_capture(const char *cmd, const char *path, int *fd)
{
    char err[768];
    if (gp_output_create_new(path, fd, err, sizeof err) != 0)
        return gp_cli_error(cmd, "%s", err);
    return 0;
}

bool gp_run_enabled(const char *cmd)
{
    const char *v = getenv("GRADPROF_ENABLE");
    if (!v || !strcmp(v, "1"))
        return true;
    if (!strcmp(v, "0"))
        return false;
    gp_cli_warn(cmd,
                "GRADPROF_ENABLE='%.40s%s' is not 0 or 1 (0 turns recording off); recording, as "
                "with 1",
                v, strlen(v) > 40 ? "..." : "");
    return true;
}

/* The longest GRADPROF_OUTPUT the recorder takes (libprof/config.c: longer values are refused). */
#define RECORDER_OUTPUT_MAX 4000
/* The most digits %p expands to (Linux's pid_max is at most 2^22 = 4194304). */
#define PID_DIGITS 7

/* The output template made absolute (the program may change directory before it writes), its
 * directory and its file name pattern. Checks that the directory exists and is writable, and
 * that the names the recorder will make fit (ENAMETOOLONG, with the lengths, instead of a name
 * cut off). 0, or prints why and returns GP_EXIT_USAGE. */
static int resolve_template(const char *cmd, const char *templ, const char *opt,
                            char abs_templ[PATH_MAX], char dir[PATH_MAX], char pat[PATH_MAX])
{
    char err[768], cwd[PATH_MAX], shown[256];
    if (gp_path_check(templ, err, sizeof err) != 0)
        return gp_cli_error(cmd, "%s: %s", opt, err);
    if (templ[0] != '/' && !getcwd(cwd, sizeof cwd))
        return gp_cli_error(cmd, "cannot get the current directory: %s", strerror(errno));
    int n = snprintf(abs_templ, PATH_MAX, "%s%s%s", templ[0] == '/' ? "" : cwd,
                     templ[0] == '/' ? "" : "/", templ);
    if (n < 0 || n > RECORDER_OUTPUT_MAX)
        return gp_cli_error(cmd,
                            "%s: '%s' is %d bytes as an absolute path, over the %d the recorder "
                            "takes: file name too long (ENAMETOOLONG)",
                            opt, gp_path_shown(templ, shown, sizeof shown), n, RECORDER_OUTPUT_MAX);
    const char *slash = strrchr(abs_templ, '/');
    snprintf(dir, PATH_MAX, "%.*s", (int)(slash - abs_templ) ? (int)(slash - abs_templ) : 1,
             abs_templ);
    snprintf(pat, PATH_MAX, "%s", slash + 1);
    if (!*pat)
        return gp_cli_error(cmd, "%s: '%s' names a directory, not a file", opt, templ);
    if (strstr(dir, "%p"))
        return gp_cli_error(cmd,
                            "%s: %%p may appear only in the file name, not in the directory "
                            "('%s')",
                            opt, templ);
    size_t name_len = 0;
    for (const char *c = pat; *c; c++, name_len++)
        if (c[0] == '%' && c[1] == 'p')
            c++, name_len += PID_DIGITS - 1;
    if (name_len > NAME_MAX)
        return gp_cli_error(cmd,
                            "%s: the file name of '%s' is up to %zu bytes once %%p is a pid, over "
                            "the %d a file name may have: file name too long (ENAMETOOLONG)",
                            opt, gp_path_shown(templ, shown, sizeof shown), name_len, NAME_MAX);
    struct stat st;
    if (stat(dir, &st) != 0 && errno != ENOENT && errno != ENOTDIR)
        return gp_cli_error(cmd, "%s: cannot use directory '%s': %s", opt,
                            gp_path_shown(dir, shown, sizeof shown), strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return gp_cli_error(cmd, "%s: directory '%s' does not exist", opt,
                            gp_path_shown(dir, shown, sizeof shown));
    if (access(dir, W_OK) != 0)
        return gp_cli_error(cmd, "%s: cannot write traces to '%s': %s", opt,
                            gp_path_shown(dir, shown, sizeof shown), strerror(errno));
    return 0;
}

int gp_run_program(const char *cmd, const gp_run_setup *s, const gp_run_spec *spec, char **prog,
                   gp_run_result *r)
{
    memset(r, 0, sizeof *r);
    const char *templ = spec->templ, *opt = spec->templ_option ? spec->templ_option : "-o";

    char abs_templ[PATH_MAX], dir[PATH_MAX], pat[PATH_MAX];
    if (!spec->no_record && resolve_template(cmd, templ, opt, abs_templ, dir, pat) != 0)
        return GP_EXIT_USAGE;

    env_list env = {0};
    name_list before = {0}, after = {0};
    int infd = -1, outfd = -1, errfd = -1;
    int rc = 0;
    if (!spec->no_record) {
        list_traces(dir, pat, NULL, &before);
        if (!strstr(pat, "%p") && before.n > 0)
            rc = refuse_existing(cmd, opt, templ, &before);
    }
    if (rc == 0)
        rc = build_env(cmd, s, spec, prog, abs_templ, &env);
    if (rc == 0 && spec->stdin_null && (infd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        rc = gp_cli_error(cmd, "cannot open /dev/null: %s", strerror(errno));
    if (rc == 0 && spec->stdout_path)
        rc = open_capture(cmd, spec->stdout_path, &outfd);
    if (rc == 0 && spec->stderr_path)
        rc = open_capture(cmd, spec->stderr_path, &errfd);
    if (rc != 0)
        goto done;

    int exec_errno = 0;
    pid_t pid = 0;
    int status = run_child(prog, &env, infd, outfd, errfd, &exec_errno, &pid, &r->interrupted);
    if (status < 0) {
        if (exec_errno == ENOENT) {
            gp_cli_error(cmd, "%s: %s", prog[0],
                         strchr(prog[0], '/') ? "no such file" : "command not found");
            rc = 127;
        } else {
            gp_cli_error(cmd, "cannot run %s: %s", prog[0], strerror(exec_errno));
            rc = exec_errno == EACCES || exec_errno == ENOEXEC || exec_errno == EISDIR ? 126 : 127;
        }
        goto done;
    }
    r->status = status;
    r->code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);

    if (!spec->no_record)
        list_traces(dir, pat, &before, &after);
    if (after.n > 0) {
        char first[PATH_MAX];
        expand_pid(first, sizeof first, pat, pid);
        sort_first = first;
        qsort(after.names, after.n, sizeof *after.names, compare_names);
        /* Named as the template was given: relative names stay relative. */
        const char *shown_slash = strrchr(templ, '/');
        int shown_dir = shown_slash ? (int)(shown_slash - templ) + 1 : 0;
        r->traces = calloc(after.n, sizeof *r->traces);
        for (size_t i = 0; r->traces && i < after.n; i++)
            if (asprintf(&r->traces[r->n_traces], "%.*s%s", shown_dir, templ, after.names[i]) >= 0)
                r->n_traces++;
    }

done:
    name_list_free(&before);
    name_list_free(&after);
    env_list_free(&env);
    if (infd >= 0)
        close(infd);
    if (outfd >= 0)
        close(outfd);
    if (errfd >= 0)
        close(errfd);
    return rc;
}

void gp_run_result_free(gp_run_result *r)
{
    for (size_t i = 0; i < r->n_traces; i++)
        free(r->traces[i]);
    free(r->traces);
    memset(r, 0, sizeof *r);
}

void gp_run_describe_status(int status, char *buf, size_t size)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(buf, size, "was killed by signal %d (%s)%s", sig, strsignal(sig),
                 WCOREDUMP(status) ? ", core dumped" : "");
    } else {
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    }
}
