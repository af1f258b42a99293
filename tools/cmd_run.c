/*
 * gradprof run: runs a program under libprof_preload.so and says where its trace(s) went.
 *
 * The recorder in the program names its file from GRADPROF_OUTPUT (%p = its pid), never
 * overwrites (an existing name gets .1, .2, ...), and a forked child or an exec'd image writes a
 * trace of its own. So the traces of a run are found afterwards by listing the names in the
 * output's directory that match the template and were not there before the program started.
 */
#define _GNU_SOURCE /* pipe2, strverscmp, strsignal */
#include "cli.h"
#include "commands.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define CMD "run"
#define PRELOAD_NAME "libprof_preload.so"
#define CUPTI_NAME "libprof_cupti.so"

static const char run_usage[] =
    "usage: gradprof run [options] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Runs PROGRAM with libprof_preload.so in LD_PRELOAD: every allocation is recorded with its\n"
    "call stack (and a program that uses the gradprof tensor library gets its exact tags) into a\n"
    "trace file, which 'gradprof report', 'diff' and 'check' read.\n"
    "\n"
    "options:\n"
    "  -o, --output FILE        trace path; %p is replaced by the pid of the process writing it\n"
    "                           (default gradprof.PROGRAM.%p.gptrace). An existing file is never\n"
    "                           overwritten: .1, .2, ... are appended instead. A forked child\n"
    "                           writes its own trace (its pid, or .PID appended)\n"
    "      --stack-depth N      frames per call stack, 0-256 (default 32)\n"
    "      --no-stacks          record no call stacks (--stack-depth 0)\n"
    "      --min-stack-size SIZE  allocations smaller than SIZE get no stack (default 0)\n"
    "      --stack-sample SIZE  capture a stack about once per SIZE bytes allocated (geometric\n"
    "                           sampling; default 0 = every allocation). Every allocation is\n"
    "                           still recorded, only stacks are sampled\n"
    "      --flush-ms N         flush interval, 1-10000 ms (default 20): a program killed by\n"
    "                           SIGKILL loses at most about this much\n"
    "      --cuda               also record CUDA memory (cudaMalloc & co., with host stacks)\n"
    "                           through CUPTI: sets CUDA_INJECTION64_PATH to libprof_cupti.so\n"
    "                           ($GRADPROF_CUPTI, else next to the preload library). Without a\n"
    "                           CUDA driver, or when another CUPTI client is attached, one line\n"
    "                           says so and only host memory is recorded\n"
    "  -h, --help               this help\n"
    "\n"
    "SIZE: bytes, or a number with a unit: 64k, 1.5MiB (K M G T = KiB MiB GiB TiB, powers of\n"
    "1024), 100MB (KB MB GB TB, powers of 1000).\n"
    "\n"
    "The preload library is $GRADPROF_PRELOAD if set, else <gradprof's dir>/../libprof/\n"
    "libprof_preload.so (build tree), else <gradprof's dir>/../lib/gradprof/libprof_preload.so.\n"
    "Other GRADPROF_* variables in the environment are passed on (see the README).\n"
    "\n"
    "Exit status: PROGRAM's; 128+N if signal N killed it; 127 if PROGRAM was not found, 126 if\n"
    "it could not be executed; 2 for a bad option or a missing preload library.\n";

enum {
    OPT_STACK_DEPTH = 256,
    OPT_NO_STACKS,
    OPT_MIN_STACK,
    OPT_STACK_SAMPLE,
    OPT_FLUSH_MS,
    OPT_CUDA
};

static const struct option run_options[] = {
    {"output", required_argument, NULL, 'o'},
    {"stack-depth", required_argument, NULL, OPT_STACK_DEPTH},
    {"no-stacks", no_argument, NULL, OPT_NO_STACKS},
    {"min-stack-size", required_argument, NULL, OPT_MIN_STACK},
    {"stack-sample", required_argument, NULL, OPT_STACK_SAMPLE},
    {"flush-ms", required_argument, NULL, OPT_FLUSH_MS},
    {"cuda", no_argument, NULL, OPT_CUDA},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* ---- the preload library --------------------------------------------------------------------- */

/* Finds libprof_preload.so (see the usage text) and writes its absolute path to out. Returns 0,
 * or prints which paths were tried and returns GP_EXIT_USAGE. */
static int find_preload(char *out, size_t size)
{
    const char *env = getenv("GRADPROF_PRELOAD");
    if (env && *env) {
        if (access(env, R_OK) != 0 || !realpath(env, out))
            return gp_cli_error(CMD, "GRADPROF_PRELOAD='%s': %s", env, strerror(errno));
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return gp_cli_error(CMD,
                            "cannot find %s: /proc/self/exe: %s; set GRADPROF_PRELOAD to its "
                            "path",
                            PRELOAD_NAME, strerror(errno));
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    const char *const rel[] = {"../libprof/" PRELOAD_NAME, "../lib/gradprof/" PRELOAD_NAME};
    char tried[2][PATH_MAX + 64];
    for (size_t i = 0; i < 2; i++) {
        snprintf(tried[i], sizeof tried[i], "%s/%s", exe, rel[i]);
        if (access(tried[i], R_OK) == 0 && realpath(tried[i], out) && strlen(out) < size)
            return 0;
    }
    return gp_cli_error(CMD, "cannot find %s; tried %s and %s; set GRADPROF_PRELOAD to its path",
                        PRELOAD_NAME, tried[0], tried[1]);
}

static int set_env(const char *name, const char *value);

/* ---- --cuda --------------------------------------------------------------------------------- */

/* Sets CUDA_INJECTION64_PATH to libprof_cupti.so ($GRADPROF_CUPTI, else the preload library's
 * directory). Returns 0, or prints why and returns GP_EXIT_USAGE. Without a CUDA driver it warns
 * once and goes on (the program then runs host-only: CUDA never loads the injection). */
static int setup_cuda(const char *preload)
{
    char path[PATH_MAX];
    const char *env = getenv("GRADPROF_CUPTI");
    if (env && *env) {
        if (access(env, R_OK) != 0 || !realpath(env, path))
            return gp_cli_error(CMD, "GRADPROF_CUPTI='%s': %s", env, strerror(errno));
    } else {
        const char *slash = strrchr(preload, '/');
        int dir = slash ? (int)(slash - preload) : 0;
        snprintf(path, sizeof path, "%.*s/%s", dir, preload, CUPTI_NAME);
        if (access(path, R_OK) != 0)
            return gp_cli_error(CMD,
                                "--cuda: cannot find %s (it is built only when the CUDA toolkit "
                                "with CUPTI is found); set GRADPROF_CUPTI to its path",
                                path);
    }
    const char *old = getenv("CUDA_INJECTION64_PATH");
    if (old && *old && strcmp(old, path) != 0)
        gp_cli_warn(CMD, "--cuda: replacing CUDA_INJECTION64_PATH=%s", old);
    void *driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!driver)
        gp_cli_warn(CMD, "--cuda: no CUDA driver (libcuda.so.1 not found); recording host memory "
                         "only");
    else
        dlclose(driver);
    return set_env("CUDA_INJECTION64_PATH", path);
}

/* ---- the traces ------------------------------------------------------------------------------ */

/* Whether `name` is a file the recorder may have made from the template `pat` (both without a
 * directory): %p matches a pid (digits), and any number of ".N" suffixes may follow (.1, .2 for a
 * taken name; .PID for a forked child of a template without %p). */
static bool trace_name_matches(const char *pat, const char *name)
{
    while (*pat) {
        if (pat[0] == '%' && pat[1] == 'p') {
            if (!isdigit((unsigned char)*name))
                return false;
            while (isdigit((unsigned char)*name))
                name++;
            pat += 2;
        } else if (*pat++ != *name++) {
            return false;
        }
    }
    while (*name == '.') {
        name++;
        if (!isdigit((unsigned char)*name))
            return false;
        while (isdigit((unsigned char)*name))
            name++;
    }
    return *name == '\0';
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

/* The main process's trace (the template expanded with its pid) first, then in version order. */
static const char *sort_first;
static int compare_names(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    bool fx = strcmp(x, sort_first) == 0, fy = strcmp(y, sort_first) == 0;
    if (fx != fy)
        return fx ? -1 : 1;
    return strverscmp(x, y);
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

/* ---- the child ------------------------------------------------------------------------------- */

static volatile sig_atomic_t child_pid;

static void forward_signal(int sig)
{
    if (child_pid > 0)
        kill((pid_t)child_pid, sig);
}

/* Runs argv with the environment already set; returns its wait status (and its pid in *pid_out),
 * or -1 with *exec_errno set when it could not be started (fork failed, or exec failed in the
 * child). */
static int run_child(char **argv, int *exec_errno, pid_t *pid_out)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        *exec_errno = errno;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        *exec_errno = errno;
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(fds[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(fds[1]);
    child_pid = pid;
    *pid_out = pid;
    /* Like a shell: ^C and ^\ go to the program (same process group), gradprof waits for it to
     * end and then says where the trace is; SIGTERM and SIGHUP sent to gradprof are passed on. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, fwd = {.sa_handler = forward_signal};
    struct sigaction old[4];
    sigaction(SIGINT, &ign, &old[0]);
    sigaction(SIGQUIT, &ign, &old[1]);
    sigaction(SIGTERM, &fwd, &old[2]);
    sigaction(SIGHUP, &fwd, &old[3]);
    int e = 0;
    ssize_t r;
    do
        r = read(fds[0], &e, sizeof e);
    while (r < 0 && errno == EINTR);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    sigaction(SIGINT, &old[0], NULL);
    sigaction(SIGQUIT, &old[1], NULL);
    sigaction(SIGTERM, &old[2], NULL);
    sigaction(SIGHUP, &old[3], NULL);
    child_pid = 0;
    if (r == (ssize_t)sizeof e) {
        *exec_errno = e;
        return -1;
    }
    return status;
}

/* ---- the command ----------------------------------------------------------------------------- */

static int set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0)
        return gp_cli_error(CMD, "cannot set %s: %s", name, strerror(errno));
    return 0;
}

static int set_env_u64(const char *name, uint64_t value)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, value);
    return set_env(name, buf);
}

int gp_cmd_run(int argc, char **argv)
{
    const char *output = NULL;
    bool have_depth = false, have_min = false, have_sample = false, have_flush = false;
    bool cuda = false;
    uint64_t depth = 32, min_stack = 0, sample = 0, flush_ms = 100;
    char err[512];
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+:o:h", run_options, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg)
                return gp_cli_error(CMD, "-o: empty file name");
            output = optarg;
            break;
        case OPT_STACK_DEPTH:
            if (gp_parse_uint(optarg, 0, 256, &depth, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--stack-depth: %s", err);
            have_depth = true;
            break;
        case OPT_NO_STACKS:
            depth = 0;
            have_depth = true;
            break;
        case OPT_MIN_STACK:
            if (gp_parse_size(optarg, &min_stack, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--min-stack-size: %s", err);
            have_min = true;
            break;
        case OPT_STACK_SAMPLE:
            if (gp_parse_size(optarg, &sample, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--stack-sample: %s", err);
            have_sample = true;
            break;
        case OPT_FLUSH_MS:
            if (gp_parse_uint(optarg, 1, 10000, &flush_ms, err, sizeof err) != 0)
                return gp_cli_error(CMD, "--flush-ms: %s", err);
            have_flush = true;
            break;
        case OPT_CUDA:
            cuda = true;
            break;
        case 'h':
            fputs(run_usage, stdout);
            return GP_EXIT_OK;
        default:
            return gp_cli_bad_option(CMD, c, argv);
        }
    }
    if (optind >= argc)
        return gp_cli_error(CMD, "no program to run (usage: gradprof run [options] -- PROGRAM "
                                 "[ARGS...])");
    char **prog = argv + optind;

    char preload[PATH_MAX];
    int rc = find_preload(preload, sizeof preload);
    if (rc)
        return rc;
    if (cuda && (rc = setup_cuda(preload)))
        return rc;

    /* The output template: as given (for messages) and absolute (for the program, which may
     * change directory before it writes). */
    char templ[PATH_MAX], abs_templ[PATH_MAX], cwd[PATH_MAX];
    if (output) {
        snprintf(templ, sizeof templ, "%s", output);
    } else {
        const char *base = strrchr(prog[0], '/');
        snprintf(templ, sizeof templ, "gradprof.%s.%%p.gptrace", base ? base + 1 : prog[0]);
    }
    if (templ[0] == '/') {
        snprintf(abs_templ, sizeof abs_templ, "%s", templ);
    } else {
        if (!getcwd(cwd, sizeof cwd))
            return gp_cli_error(CMD, "cannot get the current directory: %s", strerror(errno));
        if ((size_t)snprintf(abs_templ, sizeof abs_templ, "%s/%s", cwd, templ) >= sizeof abs_templ)
            return gp_cli_error(CMD, "-o: path too long: %s", templ);
    }
    char dir[PATH_MAX], pat[PATH_MAX];
    const char *slash = strrchr(abs_templ, '/');
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - abs_templ) ? (int)(slash - abs_templ) : 1,
             abs_templ);
    snprintf(pat, sizeof pat, "%s", slash + 1);
    if (!*pat)
        return gp_cli_error(CMD, "-o: '%s' names a directory, not a file", templ);
    if (strstr(dir, "%p"))
        return gp_cli_error(CMD,
                            "-o: %%p may appear only in the file name, not in the directory "
                            "('%s')",
                            templ);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return gp_cli_error(CMD, "-o: directory '%s' does not exist", dir);
    if (access(dir, W_OK) != 0)
        return gp_cli_error(CMD, "-o: cannot write traces to '%s': %s", dir, strerror(errno));

    /* The environment the program inherits. */
    const char *old_preload = getenv("LD_PRELOAD");
    char ld_preload[2 * PATH_MAX];
    if (old_preload && *old_preload)
        snprintf(ld_preload, sizeof ld_preload, "%s:%s", preload, old_preload);
    else
        snprintf(ld_preload, sizeof ld_preload, "%s", preload);
    if ((rc = set_env("LD_PRELOAD", ld_preload)) || (rc = set_env("GRADPROF_OUTPUT", abs_templ)) ||
        (rc = set_env("GRADPROF_ENABLE", "1")) ||
        (have_depth && (rc = set_env_u64("GRADPROF_STACK_DEPTH", depth))) ||
        (have_min && (rc = set_env_u64("GRADPROF_MIN_STACK_SIZE", min_stack))) ||
        (have_sample && (rc = set_env_u64("GRADPROF_STACK_SAMPLE", sample))) ||
        (have_flush && (rc = set_env_u64("GRADPROF_FLUSH_MS", flush_ms))))
        return rc;

    name_list before = {0}, after = {0};
    list_traces(dir, pat, NULL, &before);
    int exec_errno = 0;
    pid_t pid = 0;
    int status = run_child(prog, &exec_errno, &pid);
    if (status < 0) {
        name_list_free(&before);
        if (exec_errno == ENOENT) {
            gp_cli_error(CMD, "%s: %s", prog[0],
                         strchr(prog[0], '/') ? "no such file" : "command not found");
            return 127;
        }
        gp_cli_error(CMD, "cannot run %s: %s", prog[0], strerror(exec_errno));
        return exec_errno == EACCES || exec_errno == ENOEXEC || exec_errno == EISDIR ? 126 : 127;
    }
    int code;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        gp_cli_error(CMD, "%s was killed by signal %d (%s)%s", prog[0], sig, strsignal(sig),
                     WCOREDUMP(status) ? ", core dumped" : "");
        code = 128 + sig;
    } else {
        code = WEXITSTATUS(status);
    }

    list_traces(dir, pat, &before, &after);
    if (after.n == 0) {
        gp_cli_warn(CMD,
                    "no trace was written to %s (a static or setuid program, or one that "
                    "clears LD_PRELOAD, is not profiled; see the messages above)",
                    templ);
    } else {
        char first[PATH_MAX];
        expand_pid(first, sizeof first, pat, pid);
        sort_first = first;
        qsort(after.names, after.n, sizeof *after.names, compare_names);
        /* Shown as -o was given: relative names stay relative. */
        const char *shown_slash = strrchr(templ, '/');
        int shown_dir = shown_slash ? (int)(shown_slash - templ) + 1 : 0;
        fprintf(stderr, "gradprof: trace written to ");
        for (size_t i = 0; i < after.n; i++)
            fprintf(stderr, "%s%.*s%s", i ? ", " : "", shown_dir, templ, after.names[i]);
        fputc('\n', stderr);
    }
    name_list_free(&before);
    name_list_free(&after);
    return code;
}
