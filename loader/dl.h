/* dl.h: what loading libcuda and libnccl have in common. */
#ifndef DCP_LOADER_DL_H
#define DCP_LOADER_DL_H

/** Which library the loader opens and where that name came from, for messages. */
struct dcp_dl_choice {
    const char *library;   ///< What to dlopen.
    const char *env_name;  ///< The variable that may override the default ("DCP_CUDA_LIBRARY").
    const char *fallback;  ///< The default soname ("libcuda.so.1").
    enum {
        DCP_DL_FROM_PARAM,   ///< The caller's open params named it.
        DCP_DL_FROM_ENV,     ///< env_name named it.
        DCP_DL_FROM_DEFAULT, ///< The default soname, found by the dynamic linker.
    } from;
};

/**
 * Chooses the library to dlopen: param if set, else the value of environment
 * variable env_name if set and non-empty, else fallback ("libcuda.so.1").
 */
struct dcp_dl_choice dcp_dl_choose(const char *param, const char *env_name, const char *fallback);

/**
 * Records (dcp_error) that the library of choice c could not be opened: what (e.g.
 * "the CUDA driver"), the file tried, where its name came from (naming the variable),
 * the dynamic linker's reason dlerr (without the repeated file name), and what to do.
 * Returns status.
 */
int dcp_dl_open_error(int status, const char *what, const struct dcp_dl_choice *c, const char *dlerr);

/**
 * After a library opened but turned out unusable (not the library wanted, too old):
 * appends to dcp_last_error() where the file's name came from, when it was not the
 * default (" [the file named by DCP_CUDA_LIBRARY]"). Returns status.
 */
int dcp_dl_blame_origin(int status, const struct dcp_dl_choice *c);

/**
 * The file the dynamic linker actually mapped for handle dl (a bare soname
 * resolves to a full path), malloc'd; requested if the linker does not say.
 * NULL only when out of memory.
 */
char *dcp_dl_loaded_path(void *dl, const char *requested);

#endif /* DCP_LOADER_DL_H */
