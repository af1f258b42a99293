/*
 * Shared helpers of the gradprof commands (API: cli.h).
 */
#include "cli.h"
#include "check.h"
#include "output.h"
#include "render.h"
#include "rules.h"
#include "gradprof/trace_format.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- sizes and numbers ----------------------------------------------------------------------- */

typedef struct size_unit {
    const char *name;
    uint64_t bytes;
} size_unit;

#define KI 1024ull
#define KD 1000ull
static const size_unit size_units[] = {
    {"", 1},
    {"b", 1},
    {"kb", KD},
    {"mb", KD *KD},
    {"gb", KD *KD *KD},
    {"tb", KD *KD *KD *KD},
    {"pb", KD *KD *KD *KD *KD},
    {"k", KI},
    {"m", KI *KI},
    {"g", KI *KI *KI},
    {"t", KI *KI *KI *KI},
    {"p", KI *KI *KI *KI *KI},
    {"kib", KI},
    {"mib", KI *KI},
    {"gib", KI *KI *KI},
    {"tib", KI *KI *KI *KI},
    {"pib", KI *KI *KI *KI *KI},
};

int gp_parse_size(const char *text, uint64_t *out, char *err, size_t err_size)
{
    if (!text || !*text) {
        snprintf(err, err_size, "empty size (expected e.g. 512, 64k, 1.5GiB, 100MB)");
        return -1;
    }
    const char *s = text;
    while (*s == ' ')
        s++;
    if (*s == '-') {
        snprintf(err, err_size, "size '%s' is negative", text);
        return -1;
    }
    if (!isdigit((unsigned char)*s) && !(*s == '.' && isdigit((unsigned char)s[1]))) {
        snprintf(err, err_size, "size '%s' is not a number (expected e.g. 512, 64k, 1.5GiB, 100MB)",
                 text);
        return -1;
    }
    bool overflow = false;
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (whole > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            whole = whole * 10 + d;
    }
    uint64_t frac = 0, scale = 1; /* the fraction is frac / scale; digits past 18 are dropped */
    bool has_frac = false;
    if (*s == '.') {
        for (s++; isdigit((unsigned char)*s); s++) {
            if (scale < 1000000000000000000ull) {
                frac = frac * 10 + (uint64_t)(*s - '0');
                scale *= 10;
            }
            has_frac = has_frac || *s != '0';
        }
    }
    if (*s == ' ')
        s++;
    const size_unit *unit = NULL;
    for (size_t i = 0; i < sizeof size_units / sizeof size_units[0]; i++) {
        if (strcasecmp(s, size_units[i].name) == 0) {
            unit = &size_units[i];
            break;
        }
    }
    if (!unit) {
        snprintf(err, err_size,
                 "unknown unit '%s' in size '%s' (units: B; KB, MB, GB, TB = powers of 1000; "
                 "KiB, MiB, GiB, TiB or K, M, G, T = powers of 1024)",
                 s, text);
        return -1;
    }
    if (has_frac && unit->bytes == 1) {
        snprintf(err, err_size, "size '%s' is not a whole number of bytes", text);
        return -1;
    }
    unsigned __int128 v = (unsigned __int128)whole * unit->bytes;
    v += ((unsigned __int128)frac * unit->bytes + scale / 2) / scale;
    if (overflow || v > UINT64_MAX) {
        snprintf(err, err_size, "size '%s' is too large (at most %" PRIu64 " bytes)", text,
                 UINT64_MAX);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int gp_parse_uint(const char *text, uint64_t min, uint64_t max, uint64_t *out, char *err,
                  size_t err_size)
{
    if (!text || !*text) {
        snprintf(err, err_size, "empty number (expected %" PRIu64 "-%" PRIu64 ")", min, max);
        return -1;
    }
    uint64_t v = 0;
    bool overflow = false;
    for (const char *s = text; *s; s++) {
        if (!isdigit((unsigned char)*s)) {
            snprintf(err, err_size, "'%s' is not a whole number (expected %" PRIu64 "-%" PRIu64 ")",
                     text, min, max);
            return -1;
        }
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            v = v * 10 + d;
    }
    if (overflow || v < min || v > max) {
        snprintf(err, err_size, "%s is out of range (expected %" PRIu64 "-%" PRIu64 ")", text, min,
                 max);
        return -1;
    }
    *out = v;
    return 0;
}

int gp_parse_categories(const char *text, bool set[LP_CAT_COUNT], char *err, size_t err_size)
{
    bool parsed[LP_CAT_COUNT] = {false};
    if (text && *text && strcasecmp(text, "none") != 0) {
        const char *s = text;
        for (;;) {
            size_t n = strcspn(s, ",");
            char name[64];
            lp_category c;
            snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), s);
            if (n == 0 || n >= sizeof name || lp_category_parse(name, &c) != 0) {
                char known[256];
                size_t k = 0;
                for (int i = 0; i < LP_CAT_COUNT && k < sizeof known; i++)
                    k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                                          lp_category_name((lp_category)i));
                if (n == 0)
                    snprintf(err, err_size, "empty category name in '%s' (categories: %s)", text,
                             known);
                else
                    snprintf(err, err_size, "unknown category '%.*s' in '%s' (categories: %s)",
                             (int)n, s, text, known);
                return -1;
            }
            parsed[c] = true;
            if (!s[n])
                break;
            s += n + 1;
        }
    }
    memcpy(set, parsed, sizeof parsed);
    return 0;
}

int gp_parse_detectors(const char *text, bool set[GP_FIND_KIND_COUNT], char *err,
                       size_t err_size)
{
    bool all = strcmp(text, "all") == 0, none = strcmp(text, "none") == 0 || !*text;
    bool parsed[GP_FIND_KIND_COUNT];
    for (int k = 0; k < GP_FIND_KIND_COUNT; k++)
        parsed[k] = all;
    for (const char *s = text; !all && !none;) {
        size_t n = strcspn(s, ",");
        int k = 0;
        while (k < GP_FIND_KIND_COUNT && (strlen(gp_finding_kind_name((gp_finding_kind)k)) != n ||
                                          strncmp(gp_finding_kind_name((gp_finding_kind)k), s, n)))
            k++;
        if (k == GP_FIND_KIND_COUNT) {
            char known[256];
            size_t used = 0;
            for (int j = 0; j < GP_FIND_KIND_COUNT && used < sizeof known; j++)
                used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", j ? ", " : "",
                                         gp_finding_kind_name((gp_finding_kind)j));
            snprintf(err, err_size, "unknown detector '%.*s' in '%s' (all, none, or: %s)", (int)n,
                     s, text, known);
            return -1;
        }
        parsed[k] = true;
        if (!s[n])
            break;
        s += n + 1;
    }
    memcpy(set, parsed, sizeof parsed);
    return 0;
}

/* ---- messages -------------------------------------------------------------------------------- */

int gp_cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gradprof%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return GP_EXIT_USAGE;
}

void gp_cli_warn(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "gradprof%s%s: warning: ", cmd ? " " : "", cmd ? cmd : "");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int gp_cli_bad_option(const char *cmd, int c, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "";
    bool is_long = strncmp(arg, "--", 2) == 0;
    if (c == ':') {
        if (is_long)
            return gp_cli_error(cmd, "option '%s' needs a value (see 'gradprof %s --help')", arg,
                                cmd);
        return gp_cli_error(cmd, "option '-%c' needs a value (see 'gradprof %s --help')", optopt,
                            cmd);
    }
    if (is_long && optopt != 0) {
        int n = (int)strcspn(arg, "=");
        return gp_cli_error(cmd,
                            "option '%.*s' takes no value, got '%s' (see 'gradprof %s --help')", n,
                            arg, arg, cmd);
    }
    if (is_long)
        return gp_cli_error(cmd, "unknown option '%s' (see 'gradprof %s --help')", arg, cmd);
    if (isprint(optopt))
        return gp_cli_error(cmd, "unknown option '-%c' (see 'gradprof %s --help')", optopt, cmd);
    return gp_cli_error(cmd, "unknown option '%s' (see 'gradprof %s --help')", arg, cmd);
}

/* ---- loading --------------------------------------------------------------------------------- */

int gp_cli_rules(const char *cmd, const char *value, const struct gp_rules **out)
{
    static gp_rules *loaded; /* one set per process: commands take one --rules */
    char err[512];
    *out = NULL;
    if (value && !strcmp(value, "none"))
        return 0;
    gp_rules_free(loaded);
    loaded = value ? gp_rules_load(value, err, sizeof err) : gp_rules_default();
    if (!loaded)
        return gp_cli_error(cmd, "--rules: %s", value ? err : "built-in rules did not parse");
    *out = loaded;
    return 0;
}

int gp_cli_probe_trace(const char *path, char *err, size_t err_size)
{
    int rc = gp_path_check(path, err, err_size);
    if (rc)
        return rc;
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        snprintf(err, err_size, "cannot open '%s': %s", path, strerror(e));
        return gp_error_from_errno(e);
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(err, err_size, "'%s' is a directory, not a gradprof trace", path);
        return GP_EISDIR;
    }
    if (!S_ISREG(st.st_mode)) /* a pipe or a device: read once, by the reader alone */
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char hdr[GP_FILE_HEADER_BYTES];
    ssize_t got = fd < 0 ? -1 : pread(fd, hdr, sizeof hdr, 0);
    if (got < 0) {
        rc = gp_error_from_errno(errno);
        snprintf(err, err_size, "cannot %s '%s': %s", fd < 0 ? "open" : "read", path,
                 strerror(errno));
    } else if (got == 0) {
        rc = GP_ENOTTRACE;
        snprintf(err, err_size, "'%s' is empty: not a gradprof trace", path);
    } else if (got < (ssize_t)sizeof hdr || memcmp(hdr, GP_FILE_MAGIC, 8) != 0) {
        rc = GP_ENOTTRACE;
        snprintf(err, err_size, "'%s' is not a gradprof trace (%s)", path,
                 memcmp(hdr, GP_FILE_MAGIC, got < 8 ? (size_t)got : 8) == 0
                     ? "cut inside its file header"
                     : "no gradprof file header");
    } else if ((hdr[8] | hdr[9] << 8) != GP_VERSION_MAJOR) {
        rc = GP_EVERSION;
        snprintf(err, err_size, "'%s' has trace format version %u.%u; this gradprof reads %d.x",
                 path, (unsigned)(hdr[8] | hdr[9] << 8), (unsigned)(hdr[10] | hdr[11] << 8),
                 GP_VERSION_MAJOR);
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

void gp_cli_warn_trace(const char *cmd, const gp_profile *p)
{
    const gp_trace_info *info = p ? p->info : NULL;
    if (!info)
        return;
    char lost[32], how[160];
    const char *ended = gp_check_end_reason(gp_trace_meta(p->trace, "end_reason"), how, sizeof how);
    if (info->damaged)
        gp_cli_warn(cmd,
                    "'%s' is damaged at byte %" PRIu64 " (%s): %s lost; analysed the %" PRIu64
                    " events before it",
                    p->path, info->damage_offset, info->damage_reason,
                    gp_format_bytes(info->bytes_lost, lost, sizeof lost), info->events);
    if (ended)
        gp_cli_warn(cmd, "'%s' ends where the program %s; analysed the %" PRIu64 " events written",
                    p->path, ended, info->events);
    else if (info->events == 0 && !info->damaged)
        gp_cli_warn(cmd, "'%s' holds no events: the program recorded nothing, or was killed "
                         "before it wrote any",
                    p->path);
    else if (!info->clean_end && !info->damaged)
        gp_cli_warn(cmd,
                    "'%s' has no end record: the program did not finish recording (killed, or "
                    "still running); analysed the %" PRIu64 " events written",
                    p->path, info->events);
    if (info->lost_events)
        gp_cli_warn(cmd, "the recorder dropped %" PRIu64 " events while writing '%s'",
                    info->lost_events, p->path);
}

void gp_cli_warn_unclassified(const char *cmd, const gp_profile *p)
{
    char why[768];
    if (gp_check_classified(p, NULL, why, sizeof why) != 0)
        gp_cli_warn(cmd, "cannot judge: %s", why);
}

static int load(const char *cmd, const char *path, const gp_analysis_options *opts,
                gp_profile **out, bool warn)
{
    char err[768] = "";
    *out = NULL;
    int rc = gp_cli_probe_trace(path, err, sizeof err);
    if (rc == 0) {
        errno = 0;
        if (gp_profile_load(path, opts, out, err, sizeof err) != 0) {
            rc = errno == ENOMEM ? GP_ENOMEM : GP_EIO;
            gp_profile_free(*out);
            *out = NULL;
        }
    }
    if (rc) {
        gp_cli_error(cmd, "%s", err[0] ? err : gp_strerror(rc));
        return rc;
    }
    if (warn)
        gp_cli_warn_trace(cmd, *out);
    return 0;
}

int gp_cli_load_profile(const char *cmd, const char *path, const gp_analysis_options *opts,
                        gp_profile **out)
{
    return load(cmd, path, opts, out, true);
}

int gp_cli_load_profile_quiet(const char *cmd, const char *path, const gp_analysis_options *opts,
                              gp_profile **out)
{
    return load(cmd, path, opts, out, false);
}

/* ---- output files ---------------------------------------------------------------------------- */

int gp_cli_output_open(const char *cmd, const char *option, const char *path,
                       const char *const *inputs, size_t n_inputs, gp_output *o)
{
    char err[768];
    if (gp_output_open(o, path, inputs, n_inputs, err, sizeof err) != 0)
        return gp_cli_error(cmd, "%s: %s", option, err);
    return 0;
}

int gp_cli_output_close(const char *cmd, gp_output *o, int write_rc)
{
    char err[768];
    if (gp_output_close(o, write_rc, err, sizeof err) != 0)
        return gp_cli_error(cmd, "%s", err);
    return 0;
}
