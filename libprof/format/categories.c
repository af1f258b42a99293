/* Category names: shared by libprof and the tools (which read them back from traces). */
#include <strings.h>

#include "gradprof/libprof.h"

static const char *const lp__category_names[] = {
#define LP__CATEGORY_NAME(e, s, v) [v] = s,
    LP_CATEGORY_MAP(LP__CATEGORY_NAME)
#undef LP__CATEGORY_NAME
};

const char *lp_category_name(lp_category category)
{
    if ((unsigned)category >= LP_CAT_COUNT)
        return "invalid";
    return lp__category_names[category];
}

int lp_category_parse(const char *name, lp_category *out)
{
    if (!name)
        return -1;
    for (int c = 0; c < LP_CAT_COUNT; c++) {
        if (strcasecmp(name, lp__category_names[c]) == 0) {
            *out = (lp_category)c;
            return 0;
        }
    }
    return -1;
}
