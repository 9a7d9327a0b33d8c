/* dl.c: choosing and reporting the libraries the loader opens. */
#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>

#include "dl.h"
#include "util/util.h"

const char *dcp_dl_choose(const char *param, const char *env_name, const char *fallback)
{
    if (param)
        return param;
    const char *env = getenv(env_name);
    return env && *env ? env : fallback;
}

char *dcp_dl_loaded_path(void *dl, const char *requested)
{
    struct link_map *map = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        return dcp_strdup(map->l_name);
    return dcp_strdup(requested);
}
