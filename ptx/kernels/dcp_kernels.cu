/*
 * dcp_kernels.cu: the one translation unit nvcc turns into the embedded fatbin.
 * Every entry point is extern "C", takes its params.h struct by value as its only
 * argument and uses no CUDA runtime API. The list of entries is variants.h.
 */
#include "attn.cuh"
#include "attn_gqa_tc.cuh"
#include "attn_mla_tc.cuh"
#include "index.cuh"
#include "mma.cuh"
#include "rows.cuh"
