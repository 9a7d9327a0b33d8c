#!/bin/sh
# The real-GPU check of libdcp: one call, at most 420 s (7 minutes), a short table last.
# tests/gpu/README.md says what to carry to the GPU machine and the exact call.
#
#   tests/gpu/run.sh --prepare [BUILD [DEST]]
#                                        here, before the GPU call: copies what the
#                                        check needs of BUILD (default build) into DEST
#                                        (default build-gpu, under 60 MiB), the folder
#                                        to carry
#   tests/gpu/run.sh [--case S]... [BUILD]
#                                        on the GPU machine (default BUILD: build)
#   tests/gpu/run.sh --doubles [--case S]... [BUILD]
#                                        the same steps on the test doubles of BUILD
#                                        (CPU kernels), with shapes scaled down: CI
#                                        runs it to keep this script honest
#
# --case S (repeatable; or DCP_GPU_CASE=S): only the gpu_check cases whose label
# contains S, in the steps that run gpu_check's cases (check, graph, reference).
#
# Steps, in this order (most wanted first: the deadline cuts the last ones), each with
# its own timeout, all inside one deadline:
#   check      every kernel against the float64 oracle (gpu_check): MLA/GQA shapes,
#              all KV dtypes, 1/2/4/8 virtual ranks, both merge schemes, precision
#              exact on an fp32 wire (bound 1e-4), the shipped defaults precision fast
#              and a bf16 wire (their documented bounds), more than 16 gathered heads,
#              several head tiles and passes, steps with more query tokens than
#              workload.q_len; keys per split beside each error; the primary context
#              retained once for the whole sweep;
#   graph      a decode step eager vs replayed from a CUDA graph captured once (MLA
#              bf16, precision fast, bf16 wire; 1 and 8 virtual ranks): results equal
#              bit for bit, and the latency of both (gpu_check --graph);
#   reference  the yardsticks, from their own fatbin (ptx/kernels/dcp_ref_kernels.fatbin):
#              a read-only streaming kernel (GB/s of bytes read) and an mma.sync bf16
#              loop (tensor-core TFLOP/s), results checked; then the reference cases
#              (GQA d128 8 heads per KV head bf16 b32 x 64k; MLA 16 and 128 heads b32 x 8k;
#              MLA 128 heads b1 x 8k), CUDA-event time per launch after an L2 flush,
#              ratios to the yardsticks, the launch the engine chose, outputs checked
#              (gpu_check --bench --ref);
#   ncu        when Nsight Compute (ncu) is on PATH: one profile of the MLA-128 and
#              one of the GQA-d128 tensor-core launch (a timed launch after an L2
#              flush), reports kept in the log folder;
#   racecheck, synccheck
#              when compute-sanitizer is on PATH: its racecheck and synccheck tools
#              over a quick sweep of the tensor-core attention entries;
#   bench      decode attention at 4k/32k/128k next to a copy (dcp-run bench);
#   breakdown  the time split of a DCP step, merge and collectives included;
#   run        dcp-run run on the default deployment, with its correctness check.
# Clocks, temperature, power and throttle reasons are printed before and after
# (nvidia-smi, when present; each call under a 10 s timeout cut to what the
# deadline leaves, so a hung driver query cannot overrun it).
#
# Logs: every step's output in LOGS/steps.log, the summary in LOGS/summary.txt, the
# GPU state in LOGS/state.txt, ncu reports in LOGS/ncu-*.ncu-rep (5 files: the device
# tool returns at most 8). LOGS is $DCP_GPU_LOG_DIR, else $OUT/gpu-logs when $OUT is
# set (the device tool returns what is under $OUT), else nothing is kept.
# For CI: DCP_GPU_STEPS="check graph ..." runs only those steps ("none": none);
# DCP_GPU_DEADLINE_S replaces the 420 s deadline (--doubles: 3 x 420 s, and 3 x each
# step's budget; DCP_GPU_BUDGET_SCALE sets the factor); DCP_GPU_CHECK_PERTURB=x makes
# gpu_check change one output by x (relative) so that its checks fail.
# Exit: 0 all passed; 1 a step failed, timed out or was skipped for lack of time
# (every step's exit status is kept: output is copied with tee, but the status is the
# command's, not tee's); 77 no GPU (not in --doubles mode). A tool that is not
# installed skips its step without failing.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)

# --prepare BUILD DEST: DEST gets what run.sh needs of BUILD, at the same relative paths
# (the programs find libdcp through their $ORIGIN-relative runpath): gpu_check, dcp-run,
# the build's shared libraries they load, the yardsticks' fatbin, and the system's
# libyaml/libzstd in DEST/gpu-libs (the GPU machine may lack them); debug sections
# stripped. Fails when DEST is not under 60 MiB (the device tool carries 64 MiB).
if [ "${1:-}" = "--prepare" ]; then
    B=$(cd "${2:-$root/build}" && pwd) || exit 1
    D=${3:-$root/build-gpu}
    rm -rf "$D"
    mkdir -p "$D/gpu-libs" "$D/tests/gpu" "$D/runtime/cli" "$D/ptx/kernels" || exit 1
    status=0
    for f in tests/gpu/gpu_check runtime/cli/dcp-run; do
        cp "$B/$f" "$D/$f" || status=1
    done
    cp "$B/ptx/kernels/dcp_ref_kernels.fatbin" "$D/ptx/kernels/" || status=1
    for f in tests/gpu/gpu_check runtime/cli/dcp-run; do
        ldd "$B/$f" | awk '$3 ~ /^\// {print $3}'
    done | sort -u | while read -r lib; do
        case $lib in
            "$B"/*) rel=${lib#"$B"/}; mkdir -p "$D/$(dirname "$rel")"; cp -L "$lib" "$D/$rel"
                    soname=$(objdump -p "$lib" 2>/dev/null | awk '/SONAME/ {print $2}')
                    [ -n "$soname" ] && [ ! -e "$D/$(dirname "$rel")/$soname" ] && cp -L "$lib" "$D/$(dirname "$rel")/$soname" ;;
            *libyaml*|*libzstd*) cp -L "$lib" "$D/gpu-libs/" ;;
        esac
    done
    find "$D" -type f ! -name '*.fatbin' -exec strip --strip-debug {} + 2>/dev/null
    kib=$(du -sk "$D" | cut -f1)
    (cd "$D" && find . -type f | sort | xargs ls -l | awk '{printf "  %9d  %s\n", $5, $9}')
    echo "$D: $kib KiB"
    [ "$kib" -lt $((60 * 1024)) ] || { echo "tests/gpu/run.sh: $D is over 60 MiB: too big to carry" >&2; status=1; }
    exit $status
fi

doubles=0
cases=
[ -n "${DCP_GPU_CASE:-}" ] && cases=$DCP_GPU_CASE
while [ $# -gt 0 ]; do
    case $1 in
        --doubles) doubles=1; shift ;;
        --case)
            [ $# -ge 2 ] || { echo "tests/gpu/run.sh: --case needs a value" >&2; exit 2; }
            cases="$cases${cases:+
}$2"
            shift 2 ;;
        *) break ;;
    esac
done
B=${1:-$root/build}
# On the test doubles every kernel runs on the CPU, under ASan or valgrind in CI: the
# budgets (and the default deadline) are DCP_GPU_BUDGET_SCALE times the GPU's (3).
scale=1
[ $doubles -eq 1 ] && scale=3
scale=${DCP_GPU_BUDGET_SCALE:-$scale}
DEADLINE_S=${DCP_GPU_DEADLINE_S:-$((420 * scale))}
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

if [ -n "${DCP_GPU_LOG_DIR:-}" ]; then
    logs=$DCP_GPU_LOG_DIR
elif [ -n "${OUT:-}" ]; then
    logs=$OUT/gpu-logs
else
    logs=
fi
# Each step's output and status first go to a scratch folder; the log folder gets few
# files (the device tool returns at most 8): steps.log (every step's output, in order),
# summary.txt, state.txt (nvidia-smi before and after) and the ncu reports.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -n "$logs" ] && mkdir -p "$logs" 2>/dev/null; then
    keep_logs=1
    rm -f "$logs/steps.log" "$logs/summary.txt" "$logs/state.txt" "$logs"/ncu-*.ncu-rep
else
    logs=$out
    keep_logs=0
fi

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
all_steps="check graph reference ncu racecheck synccheck bench breakdown run"
steps=${DCP_GPU_STEPS:-$all_steps}
wanted() {
    case " $steps " in *" $1 "*) return 0 ;; esac
    return 1
}
step() {
    name=$1 budget=$2
    shift 2
    wanted "$name" || return 0
    budget=$((budget * scale))
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
# no_tool NAME TOOL: records that TOOL is not installed (the step is skipped, not failed).
no_tool() {
    wanted "$1" || return 0
    echo "== $1: skipped, no $2 on PATH"
    echo "no-tool $2" >"$out/$1.rc"
    : >"$out/$1.txt"
}

gpu_check="$B/tests/gpu/gpu_check"
{
    echo "== GPU state before"
    if command -v nvidia-smi >/dev/null 2>&1; then
        smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/  /'
    fi
    gpu_state
} | tee "$out/state.txt"
# Per-step budgets add up to 410 s, under the 420 s deadline (10 s kept for the summary).
# The --case filters (one per line in $cases; the reference cases' names have spaces)
# as gpu_check arguments: "$@".
set --
set -f
saved_ifs=$IFS
IFS='
'
for c in $cases; do [ -n "$c" ] && set -- "$@" --case "$c"; done
IFS=$saved_ifs
set +f
step check 100 "$gpu_check" $quick "$@"
step graph 45 "$gpu_check" --graph $quick "$@"
step reference 75 "$gpu_check" --bench --ref "$B/ptx/kernels/dcp_ref_kernels.fatbin" $quick "$@"
# ncu: the MLA-128 and GQA-d128 tensor-core launches, one profile each (the third
# launch of the entry: the first timed one, after an L2 flush), reports kept.
if command -v ncu >/dev/null 2>&1; then
    step ncu 45 sh -c '
        g=$1 logs=$2 quick=$3
        status=0
        for c in "mla 128 heads bf16:mla128" "gqa d128 8q/kv bf16:gqa128"; do
            name=${c%%:*} tag=${c##*:}
            echo "-- ncu: $name (dcpk_attn__*, launch 3)"
            ncu --target-processes all -k regex:dcpk_attn__ --launch-skip 2 --launch-count 1 \
                --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
                --section Occupancy --section LaunchStats --section WarpStateStats \
                -f -o "$logs/ncu-$tag" "$g" --bench $quick --case "$name" || status=1
            ncu --import "$logs/ncu-$tag.ncu-rep" --page details || status=1
        done
        exit $status' ncu "$gpu_check" "$logs" "${quick:-}"
else
    no_tool ncu ncu
fi
# compute-sanitizer: racecheck (shared-memory hazards) and synccheck (barriers) over a
# quick sweep of the tensor-core attention entries (2 ranks: tiles, passes, splits).
tc_cases="--case mla-bf16-n2 --case mla-fp16-n2 --case mla-fp8_e4m3-n2 --case gqa64-bf16-n2 --case gqa128-bf16-n2 --case gqa256-bf16-n2"
if command -v compute-sanitizer >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    step racecheck 40 compute-sanitizer --tool racecheck --kernel-name kns=dcpk_attn__ --error-exitcode 1 \
        "$gpu_check" --quick $tc_cases
    # shellcheck disable=SC2086
    step synccheck 30 compute-sanitizer --tool synccheck --kernel-name kns=dcpk_attn__ --error-exitcode 1 \
        "$gpu_check" --quick $tc_cases
else
    no_tool racecheck compute-sanitizer
    no_tool synccheck compute-sanitizer
fi
# shellcheck disable=SC2086
step bench 35 "$B/runtime/cli/dcp-run" bench --backend cuda --quiet $bench_args
step breakdown 20 "$gpu_check" --breakdown $quick
# shellcheck disable=SC2086
step run 20 "$B/runtime/cli/dcp-run" run --backend cuda --quiet $run_args
{ echo "== GPU state after"; gpu_state; } | tee -a "$out/state.txt"

summary() {
    echo
    echo "== summary ($(($(date +%s) - start)) s of ${DEADLINE_S} s)"
    status=0
    for name in $all_steps; do
        wanted "$name" || continue
        rc=$(cat "$out/$name.rc" 2>/dev/null || echo missing)
        case $rc in
            0) verdict=ok ;;
            124|137) verdict="TIMED OUT" ;;
            skipped) verdict="SKIPPED (deadline)" ;;
            no-tool*) verdict="SKIPPED (no ${rc#no-tool })"; rc=0 ;;
            *) verdict="FAILED (exit $rc)" ;;
        esac
        [ "$rc" = 0 ] || status=1
        printf '%-12s %s\n' "$name" "$verdict"
    done
    if wanted check; then
        grep -E '^(correctness:|primary context:)' "$out/check.txt" | sed 's/^/check: /'
        grep -E '^(mla|gqa[0-9]+)-' "$out/check.txt" | grep -vE ' ok$' | sed 's/^/check: /'
    fi
    if wanted graph; then grep -E '^(ranks |[0-9]+ +[0-9]+ +[0-9]+ |graph: )' "$out/graph.txt" | sed 's/^/graph: /'; fi
    if wanted reference; then grep -E '^(read |mma |case |gqa|mla)' "$out/reference.txt" | sed 's/^/reference: /'; fi
    if wanted ncu; then grep -E '^(-- ncu|==PROF==|==ERROR==)' "$out/ncu.txt" | sed 's/^/ncu: /'; fi
    if wanted racecheck; then grep -E 'ERROR SUMMARY|^correctness:' "$out/racecheck.txt" | sed 's/^/racecheck: /'; fi
    if wanted synccheck; then grep -E 'ERROR SUMMARY|^correctness:' "$out/synccheck.txt" | sed 's/^/synccheck: /'; fi
    if wanted bench; then grep -E '^(kind |gqa|mla) ' "$out/bench.txt" | sed 's/^/bench: /'; fi
    if wanted breakdown; then grep -E '^(comm |a2a|ag_rs) ' "$out/breakdown.txt" | sed 's/^/breakdown: /'; fi
    if wanted run; then grep -E '^correctness' "$out/run.txt" | tr -s ' ' | sed 's/^/run: /'; fi
    if [ $keep_logs -eq 1 ]; then
        echo "logs: $logs: $(cd "$logs" && ls | tr '\n' ' ')"
    fi
    [ $status -eq 0 ] && echo "all steps passed" || echo "FAILED: see the steps above"
    return $status
}
if [ $keep_logs -eq 1 ]; then
    for name in $all_steps; do
        wanted "$name" || continue
        echo "== $name (exit $(cat "$out/$name.rc" 2>/dev/null || echo missing))"
        cat "$out/$name.txt" 2>/dev/null
    done >"$logs/steps.log"
    cp "$out/state.txt" "$logs/state.txt"
    : >"$logs/summary.txt"
    summary >"$logs/summary.txt"
    status=$?
    cat "$logs/summary.txt"
else
    summary
    status=$?
fi
exit $status
