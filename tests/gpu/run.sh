#!/bin/sh
# The real-GPU check of libdcp: one call, at most 420 s (7 minutes), a short table last.
#
#   tests/gpu/run.sh --prepare [BUILD]   here, before carrying BUILD to the GPU
#                                        machine: copies the shared libraries it
#                                        needs there (libyaml, libzstd) into BUILD/gpu-libs
#   tests/gpu/run.sh [BUILD]             on the GPU machine (default BUILD: build)
#   tests/gpu/run.sh --doubles [BUILD]   the same steps on the test doubles of BUILD
#                                        (CPU kernels), with shapes scaled down: CI
#                                        runs it to keep this script honest
#
# Steps, each with its own timeout, all inside one deadline:
#   (1) every kernel against the float64 oracle over MLA/GQA shapes, all KV dtypes,
#       1/2/4/8 virtual ranks, both merge schemes (gpu_check), tolerance 1e-4;
#   (2) the yardsticks, from their own fatbin (ptx/kernels/dcp_ref_kernels.fatbin):
#       a read-only streaming kernel (GB/s of bytes read; a copy would move 2N) and
#       an mma.sync bf16 loop (tensor-core TFLOP/s), results checked; then the
#       reference cases (GQA d128 8 heads per KV head bf16 b32 x 64k; MLA 16 and
#       128 heads b32 x 8k; MLA 128 heads b1 x 8k), CUDA-event time per launch after
#       an L2 flush, GB/s and TFLOP/s over the yardsticks of the same run,
#       registers / occupancy / splits / grid of each launch, outputs of the timed
#       launches checked against the oracle (gpu_check --bench --ref);
#   (3) decode attention at 4k/32k/128k next to a copy (dcp-run bench);
#   (4) the time split of a DCP step, merge and collectives included (gpu_check --breakdown);
#   (5) dcp-run run on the default deployment, with its correctness check;
#   (6) only when DCP_GPU_STEPS names it ("graph"; not in the default 420 s): the
#       latency of a decode step eager vs replayed from a CUDA graph captured once
#       (MLA bf16, 8 layers, 1 and 8 virtual ranks, batch 1/16; gpu_check --graph),
#       whose results must agree bit for bit. Run it on its own:
#       DCP_GPU_STEPS=graph tests/gpu/run.sh (about 30 s).
# Clocks, temperature, power and throttle reasons are printed before and after
# (nvidia-smi, when present; each call under a 10 s timeout cut to what the
# deadline leaves, so a hung driver query cannot overrun it).
# For CI: DCP_GPU_STEPS="check reference ..." runs only those steps;
# DCP_GPU_DEADLINE_S replaces the 420 s deadline; DCP_GPU_CHECK_PERTURB=x makes
# gpu_check change one output by x (relative) so that its checks fail.
# Exit: 0 all passed; 1 a step failed, timed out or was skipped for lack of time
# (every step's exit status is kept: output is copied with tee, but the status is the
# command's, not tee's); 77 no GPU (not in --doubles mode).
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

doubles=0
if [ "${1:-}" = "--doubles" ]; then
    doubles=1
    shift
fi
B=${1:-$root/build}
DEADLINE_S=${DCP_GPU_DEADLINE_S:-420}
start=$(date +%s)

if [ $doubles -eq 0 ] && ! ls /dev/nvidia0 >/dev/null 2>&1 && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "tests/gpu/run.sh: no NVIDIA GPU here: skipped"
    exit 77
fi
if [ ! -x "$B/tests/gpu/gpu_check" ] || [ ! -x "$B/runtime/cli/dcp-run" ]; then
    echo "tests/gpu/run.sh: $B has no gpu_check/dcp-run: build here or carry a prepared build" >&2
    exit 1
fi
export LD_LIBRARY_PATH="$B/gpu-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $doubles -eq 1 ]; then
    export DCP_CUDA_LIBRARY="$B/tests/doubles/libcuda.so.1" DCP_NCCL_LIBRARY="$B/tests/doubles/libnccl.so.2"
    quick=--quick
    bench_args="--contexts 256 --repeat 1"
    run_args="--steps 2 --requests 2 --layers 1 --kv-mb 64"
else
    unset DCP_CUDA_LIBRARY DCP_NCCL_LIBRARY   # the real driver, not the test doubles
    quick=
    bench_args="--contexts 4k,32k,128k --repeat 10"
    run_args=
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# smi ARGS...: nvidia-smi under `timeout 10`, cut to what the deadline leaves (3 s
# kept), so that a hung driver query cannot overrun the deadline; 124 when it timed
# out (or no time was left).
smi() {
    t=$((DEADLINE_S - ($(date +%s) - start) - 3))
    [ $t -gt 10 ] && t=10
    [ $t -lt 1 ] && return 124
    timeout -k 1 "$t" nvidia-smi "$@"
}

# Clocks and throttle reasons: newer drivers call them "clocks_event_reasons". (The
# output is taken whole: in `smi ... | sed` the status would be sed's.)
gpu_state() {
    command -v nvidia-smi >/dev/null 2>&1 || { echo "  (no nvidia-smi: clocks not shown)"; return 0; }
    for reasons in clocks_event_reasons.active clocks_throttle_reasons.active; do
        state=$(smi --query-gpu=index,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw,$reasons \
            --format=csv 2>/dev/null)
        rc=$?
        if [ $rc -eq 0 ]; then
            printf '%s\n' "$state" | sed 's/^/  /'
            return 0
        fi
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            echo "  (nvidia-smi timed out: clocks not shown)"
            return 0
        fi
    done
    echo "  (nvidia-smi could not report clocks)"
}

# step NAME BUDGET_S CMD...: runs CMD with output shown and kept in $out/NAME.txt,
# under a timeout of BUDGET_S cut to what the deadline leaves (10 s kept for the
# summary); records the exit status in $out/NAME.rc (124: timed out; "skipped").
steps=${DCP_GPU_STEPS:-check reference bench breakdown run}
wanted() {
    case " $steps " in *" $1 "*) return 0 ;; esac
    return 1
}
step() {
    name=$1 budget=$2
    shift 2
    wanted "$name" || return 0
    left=$((DEADLINE_S - ($(date +%s) - start) - 10))
    [ $budget -gt $left ] && budget=$left
    if [ $budget -lt 5 ]; then
        echo "== $name: skipped, $left s left of the ${DEADLINE_S} s deadline"
        echo skipped >"$out/$name.rc"
        : >"$out/$name.txt"
        return
    fi
    echo "== $name (timeout ${budget} s)"
    { timeout -k 5 "$budget" "$@" 2>&1; echo $? >"$out/$name.rc"; } | tee "$out/$name.txt"
}

echo "== GPU state before"
if command -v nvidia-smi >/dev/null 2>&1; then
    smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/  /'
fi
gpu_state
# Per-step budgets add up to 400 s, under the 420 s deadline.
step check 150 "$B/tests/gpu/gpu_check" $quick
step reference 110 "$B/tests/gpu/gpu_check" --bench --ref "$B/ptx/kernels/dcp_ref_kernels.fatbin" $quick
step bench 60 "$B/runtime/cli/dcp-run" bench --backend cuda --quiet $bench_args
step breakdown 45 "$B/tests/gpu/gpu_check" --breakdown $quick
# shellcheck disable=SC2086
step run 35 "$B/runtime/cli/dcp-run" run --backend cuda --quiet $run_args
step graph 60 "$B/tests/gpu/gpu_check" --graph $quick
echo "== GPU state after"
gpu_state

echo
echo "== summary ($(($(date +%s) - start)) s of ${DEADLINE_S} s)"
status=0
for name in check reference bench breakdown run graph; do
    wanted "$name" || continue
    rc=$(cat "$out/$name.rc" 2>/dev/null || echo missing)
    case $rc in
        0) verdict=ok ;;
        124|137) verdict="TIMED OUT" ;;
        skipped) verdict="SKIPPED (deadline)" ;;
        *) verdict="FAILED (exit $rc)" ;;
    esac
    [ "$rc" = 0 ] || status=1
    printf '%-12s %s\n' "$name" "$verdict"
done
if wanted check; then grep -E '^correctness:' "$out/check.txt" | sed 's/^/check: /'; fi
if wanted reference; then grep -E '^(read |mma |case |gqa|mla)' "$out/reference.txt" | sed 's/^/reference: /'; fi
if wanted bench; then grep -E '^(kind |gqa|mla) ' "$out/bench.txt" | sed 's/^/bench: /'; fi
if wanted breakdown; then grep -E '^(comm |a2a|ag_rs) ' "$out/breakdown.txt" | sed 's/^/breakdown: /'; fi
if wanted run; then grep -E '^correctness' "$out/run.txt" | tr -s ' ' | sed 's/^/run: /'; fi
if wanted graph; then grep -E '^(ranks |[0-9]+ +[0-9]+ +[0-9]+ )' "$out/graph.txt" | sed 's/^/graph: /'; fi
[ $status -eq 0 ] && echo "all steps passed" || echo "FAILED: see the steps above"
exit $status
