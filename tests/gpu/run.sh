#!/bin/sh
# The real-GPU check of libdcp: one call, at most 8 minutes, a short table last.
#
#   tests/gpu/run.sh --prepare [BUILD]   here, before carrying BUILD to the GPU
#                                        machine: copies the shared libraries it
#                                        needs there (libyaml, libzstd) into BUILD/gpu-libs
#   tests/gpu/run.sh [BUILD]             on the GPU machine (default BUILD: build)
#
# Steps: (1) every kernel against the float64 oracle over MLA/GQA shapes, all KV
# dtypes, 1/2/4/8 virtual ranks, both merge schemes (gpu_check); (2) decode
# attention GB/s next to a device-to-device copy of the same bytes, measured side
# by side (dcp-run bench); (3) the time split of a DCP step, merge and collectives
# included (gpu_check --breakdown); (4) dcp-run run on the default deployment.
# Exit: 0 all passed, 1 a check failed, 77 no GPU.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${1:-}" = "--prepare" ]; then
    B=${2:-$root/build}
    mkdir -p "$B/gpu-libs"
    for f in "$B/libdcp.so" "$B/tests/gpu/gpu_check" "$B/runtime/cli/dcp-run"; do
        ldd "$f" | awk '/libyaml|libzstd/ {print $3}'
    done | sort -u | while read -r lib; do cp -L "$lib" "$B/gpu-libs/"; done
    ls "$B/gpu-libs"
    exit 0
fi

B=${1:-$root/build}
if ! ls /dev/nvidia0 >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "tests/gpu/run.sh: no NVIDIA GPU here: skipped"
    exit 77
fi
if [ ! -x "$B/tests/gpu/gpu_check" ] || [ ! -x "$B/runtime/cli/dcp-run" ]; then
    echo "tests/gpu/run.sh: $B has no gpu_check/dcp-run: build here or carry a prepared build" >&2
    exit 1
fi
export LD_LIBRARY_PATH="$B/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset DCP_CUDA_LIBRARY DCP_NCCL_LIBRARY   # the real driver, not the test doubles
out=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null

echo "== 1. kernels against the float64 oracle"
timeout 280 "$B/tests/gpu/gpu_check" | tee "$out/check.txt"
check=$?
echo "== 2. decode attention vs device-to-device copy"
timeout 120 "$B/runtime/cli/dcp-run" bench --backend cuda --quiet --contexts 4k,32k,128k --repeat 10 \
    | tee "$out/bench.txt"
bench=$?
echo "== 3. DCP step breakdown"
timeout 60 "$B/tests/gpu/gpu_check" --breakdown | tee "$out/breakdown.txt"
breakdown=$?
echo "== 4. dcp-run run (default deployment)"
timeout 60 "$B/runtime/cli/dcp-run" run --backend cuda --quiet | tee "$out/run.txt"
run=$?

echo
echo "== summary"
printf '%-28s %s\n' "kernels vs oracle" "$(tail -n 1 "$out/check.txt") (exit $check)"
awk '$1 == "gqa" || $1 == "mla" { printf "%-28s attn %s GB/s, copy %s GB/s, ratio %s\n", \
     "bench " $1 " h=" $2 " L=" $3, $7, $8, $9 }' "$out/bench.txt"
awk '$1 == "a2a" || $1 == "ag_rs" { printf "%-28s step %s ms, merge %s, comm %s\n", \
     "breakdown " $1, $2, $6, $7 }' "$out/breakdown.txt"
printf '%-28s %s\n' "dcp-run run" "$(grep -E 'correctness: max rel' "$out/run.txt" | tr -s ' ') (exit $run)"
rm -rf "$out"
[ $check -eq 0 ] && [ $bench -eq 0 ] && [ $breakdown -eq 0 ] && [ $run -eq 0 ]
