/* The embedded module registry of a build without nvcc: no kernels. */
#include <stddef.h>

#include "embedded.h"

const struct dcp_embedded_module dcp_embedded_modules[1];
const size_t dcp_embedded_module_count = 0;
