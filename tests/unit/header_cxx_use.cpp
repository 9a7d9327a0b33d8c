// C++ embedders: every public header compiles under g++ -Wall -Wextra -Wshadow -Werror
// (tests/meson.build compiles each alone too), and each public struct name is usable as a
// type on its own, so no function may share a struct's name (a function named like a
// struct hides it: "dcp_kv_budget b;" would not compile and -Wshadow rejects the header).
#include <dcp/dcp.h>
#include <dcp/tools.h>

#include <cstdio>

int main()
{
    dcp_rank_geometry geo = {};
    dcp_kv_budget budget = {};
    dcp_sched_step step = {};
    dcp_engine_params params = {};
    dcp_synth_desc synth = {};
    dcp_dtype dtype = DCP_DTYPE_FP32;
    if (dcp_dtype_from_name("bf16", &dtype) != DCP_OK || dtype != DCP_DTYPE_BF16) {
        std::printf("dcp_dtype_from_name(\"bf16\") failed: %s\n", dcp_last_error());
        return 1;
    }
    std::printf("libdcp %s from C++: %zu %zu %zu %zu %zu bytes of structs\n", dcp_version(), sizeof geo,
                sizeof budget, sizeof step, sizeof params, sizeof synth);
    return 0;
}
