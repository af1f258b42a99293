/*
 * The tools' error table (API: error.h).
 */
#include "error.h"

const char *gp_strerror(int err)
{
    switch (err) {
    case GP_OK:
        return "success";
#define GP__ERROR_TEXT(name, code, text)                                                           \
    case GP_##name:                                                                                \
        return text;
        GP_ERRNO_MAP(GP__ERROR_TEXT)
#undef GP__ERROR_TEXT
    default:
        return "unknown error";
    }
}

const char *gp_err_name(int err)
{
    switch (err) {
    case GP_OK:
        return "GP_OK";
#define GP__ERROR_NAME(name, code, text)                                                           \
    case GP_##name:                                                                                \
        return "GP_" #name;
        GP_ERRNO_MAP(GP__ERROR_NAME)
#undef GP__ERROR_NAME
    default:
        return "GP_UNKNOWN";
    }
}

int gp_error_from_errno(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case ENOTDIR: /* a component of the path is not a directory: no such file either */
        return GP_ENOENT;
    case EACCES:
    case EPERM:
    case EROFS:
        return GP_EACCES;
    case EISDIR:
        return GP_EISDIR;
    case ENAMETOOLONG:
        return GP_ENAMETOOLONG;
    case ENOMEM:
        return GP_ENOMEM;
    case EINVAL:
        return GP_EINVAL;
    case ELOOP:
        return GP_ESYMLINK;
    default:
        return GP_EIO;
    }
}
