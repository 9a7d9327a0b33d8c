// Two do-nothing kernels named like libdcp's, compiled into a fatbin by
// tests/cuda/meson.build to check libdcp's reading of nvcc's fatbin layout.
extern "C" __global__ void dcpk_fill(unsigned long long p) { if (p == 1) __trap(); }
extern "C" __global__ void dcpk_attn__mla_bf16(unsigned long long p) { if (p == 2) __trap(); }
