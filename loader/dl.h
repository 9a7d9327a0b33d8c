/* dl.h: what loading libcuda and libnccl have in common. */
#ifndef DCP_LOADER_DL_H
#define DCP_LOADER_DL_H

/**
 * The library to dlopen: param if set, else the value of environment variable
 * env_name if set and non-empty, else fallback ("libcuda.so.1").
 */
const char *dcp_dl_choose(const char *param, const char *env_name, const char *fallback);

/**
 * The file the dynamic linker actually mapped for handle dl (a bare soname
 * resolves to a full path), malloc'd; requested if the linker does not say.
 * NULL only when out of memory.
 */
char *dcp_dl_loaded_path(void *dl, const char *requested);

#endif /* DCP_LOADER_DL_H */
