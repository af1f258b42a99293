/* The error table and the thread's last error. */
#include <stdarg.h>
#include <stdio.h>

#include "tensor_internal.h"

static _Thread_local int tn__last_code;
static _Thread_local char tn__last_message[512];

const char *tn_strerror(int code)
{
    switch (code) {
    case TN_OK:
        return "success";
#define TN__ERRNO_CASE(e, v, s)                                                                    \
    case TN_##e:                                                                                   \
        return s;
        TN_ERRNO_MAP(TN__ERRNO_CASE)
#undef TN__ERRNO_CASE
    }
    return "unknown error";
}

int tn__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tn__last_message, sizeof tn__last_message, fmt, ap);
    va_end(ap);
    tn__last_code = code;
    return code;
}

int tn_last_error(void) { return tn__last_code; }

int tn__pending_error(void) { return tn__last_code < 0 ? tn__last_code : TN_ENOMEM; }

const char *tn_last_error_message(void) { return tn__last_message; }

void tn_clear_error(void)
{
    tn__last_code = TN_OK;
    tn__last_message[0] = '\0';
}
