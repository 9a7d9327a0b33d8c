/* dl.c: choosing and reporting the libraries the loader opens. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp/common.h"
#include "dl.h"
#include "util/util.h"

struct dcp_dl_choice dcp_dl_choose(const char *param, const char *env_name, const char *fallback)
{
    struct dcp_dl_choice c = {.library = fallback, .env_name = env_name, .fallback = fallback,
                              .from = DCP_DL_FROM_DEFAULT};
    const char *env = getenv(env_name);
    if (param) {
        c.library = param;
        c.from = DCP_DL_FROM_PARAM;
    } else if (env && *env) {
        c.library = env;
        c.from = DCP_DL_FROM_ENV;
    }
    return c;
}

int dcp_dl_open_error(int status, const char *what, const struct dcp_dl_choice *c, const char *dlerr)
{
    /* dlerror() says "FILE: reason"; the file is named once, by us. */
    const char *why = dlerr ? dlerr : "unknown dlopen error";
    const size_t n = strlen(c->library);
    if (!strncmp(why, c->library, n) && !strncmp(why + n, ": ", 2))
        why += n + 2;
    switch (c->from) {
    case DCP_DL_FROM_ENV:
        return dcp_error(status, "cannot load %s %s (named by %s): %s (correct %s, or unset it to load %s)",
                         what, c->library, c->env_name, why, c->env_name, c->fallback);
    case DCP_DL_FROM_PARAM:
        return dcp_error(status, "cannot load %s %s (given by the caller, which overrides %s): %s", what,
                         c->library, c->env_name, why);
    case DCP_DL_FROM_DEFAULT:
    default:
        return dcp_error(status, "cannot load %s %s: %s (is it installed? set %s to its path if it is not on "
                         "the library search path)", what, c->library, why, c->env_name);
    }
}

int dcp_dl_blame_origin(int status, const struct dcp_dl_choice *c)
{
    if (c->from == DCP_DL_FROM_DEFAULT)
        return status;
    char msg[400];
    snprintf(msg, sizeof(msg), "%s", dcp_last_error());
    if (c->from == DCP_DL_FROM_ENV)
        return dcp_error(status, "%s [%s is named by %s]", msg, c->library, c->env_name);
    return dcp_error(status, "%s [%s was given by the caller]", msg, c->library);
}

char *dcp_dl_loaded_path(void *dl, const char *requested)
{
    struct link_map *map = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        return dcp_strdup(map->l_name);
    return dcp_strdup(requested);
}
