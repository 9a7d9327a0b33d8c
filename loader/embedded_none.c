/* embedded_none.c: the module registry of a build without nvcc: no modules. */
#include "embedded.h"

/* C has no empty arrays: one zeroed entry that the count of 0 hides. */
const struct dcp_embedded_module dcp_embedded_modules[1];
const size_t dcp_embedded_module_count = 0;
