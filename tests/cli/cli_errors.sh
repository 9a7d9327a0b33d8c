#!/bin/sh
# cli_errors.sh DCP_RUN DEFAULT_CONFIG: what dcp-run does with bad surroundings.
#   output to a full device (plan, plan --json, every --help): exit 1 and a message on stderr
#   run/replay --layers past the model's layers: exit 2 naming the layer count
#   a FIFO or /dev/zero as the deployment: exit 1 at once, "not a regular file"
#   DCP_DEFAULT_DEPLOYMENT naming no file: the message names the variable
#   over 100 errors: the summary gives the true total, not 101
#   replay --plot to a path it cannot write: refused before the run
#   replay executed: an over-long request is rejected, not fatal; nothing run is said so
#   replay --synthetic at its maximum: --limit applies first; without it, a clear error
#     when the trace would pass the memory cap, instead of the OOM killer
set -u
dcp_run=$1
config=$2
. "$(dirname "$0")/common.sh"

if [ -w /dev/full ]; then
    for args in "plan $config" "plan --json $config" "plan --help" "run --help" "bench --help" "replay --help" "--help"; do
        # shellcheck disable=SC2086
        "$dcp_run" $args >/dev/full 2>"$tmp/err"
        status=$?
        [ "$status" -eq 1 ] || fail "dcp-run $args > /dev/full exited $status, expected 1"
        grep -q 'cannot write the output' "$tmp/err" || fail "dcp-run $args > /dev/full: no message: $(cat "$tmp/err")"
    done
else
    echo "no /dev/full: full-device check skipped"
fi

"$dcp_run" run --quiet --layers 99 "$config" >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" -eq 2 ] || fail "run --layers 99 exited $status, expected 2"
grep -q -- '--layers 99: the model .* has 2 layers; give 1..2' "$tmp/err" || fail "run --layers 99: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "run --layers 99 printed to stdout"
"$dcp_run" run --quiet --layers 3 "$config" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "run --layers 3 on a 2-layer model did not exit 2"
# replay executes the engine too: the same check (it ran 3 layers of a 2-layer model, exit 0).
"$dcp_run" replay --quiet --synthetic 2 --layers 3 "$config" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "replay --layers 3 on a 2-layer model did not exit 2: $(cat "$tmp/err")"
grep -q -- '--layers 3: the model .* has 2 layers' "$tmp/err" || fail "replay --layers 3: $(cat "$tmp/err")"

# --synthetic at its maximum: --limit applies before generating (it used to generate
# every request first: gigabytes). A 3 GB address-space cap makes the old behaviour fail
# fast instead of swapping (not under ASan, which reserves terabytes of address space).
max=$("$dcp_run" replay --help | sed -n 's/.*--synthetic N .*\[1\.\.\([0-9]*\)\]$/\1/p')
[ -n "$max" ] || fail "replay --help gives no range for --synthetic"
limit_as() { if [ -z "${ASAN_OPTIONS:-}" ]; then ulimit -v 3000000; fi; }
gpu_config=$(dirname "$config")/deepseek-v3-8xh200.yaml # --simulate prices GPU deployments only
(limit_as; exec timeout 60 "$dcp_run" replay --quiet --simulate --synthetic "$max" --limit 3 "$gpu_config") \
    >"$tmp/out" 2>"$tmp/err" || fail "replay --synthetic $max --limit 3: $(cat "$tmp/err")"
grep -q '3 requests' "$tmp/out" || fail "replay --synthetic $max --limit 3 did not replay 3 requests: $(head -3 "$tmp/out")"
(limit_as; exec timeout 60 "$dcp_run" replay --quiet --simulate --synthetic "$max" "$gpu_config") >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] || fail "replay --synthetic $max exited $status, expected 1 with a message"
grep -q 'a trace may take in memory (max_memory_bytes); generate fewer' "$tmp/err" ||
    fail "replay --synthetic $max: $(cat "$tmp/err")"

# An executed replay with one request longer than the engine can hold (positions are
# 32-bit): that request is rejected (context), the others run; it used to fail the run.
printf '100\n200\n3000000000\n150\n' >"$tmp/long.txt"
"$dcp_run" replay --quiet --trace "$tmp/long.txt" --output-tokens 4 --json "$config" >"$tmp/out" 2>"$tmp/err" ||
    fail "replay with one over-long request failed: $(cat "$tmp/err")"
grep -q '"rejected_context": 1' "$tmp/out" || fail "the over-long request was not rejected for its context: $(cat "$tmp/out")"
# Every request rejected: nothing ran, which is said as such, not as a failed check.
printf '100\n200\n' >"$tmp/short.txt"
"$dcp_run" replay --quiet --trace "$tmp/short.txt" --output-tokens 4 --length-scale 10000 "$config" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "replay with every request rejected did not exit 1"
grep -q 'no request ran (2 rejected' "$tmp/err" || fail "replay with every request rejected: $(cat "$tmp/err")"
grep -q 'correctness check FAILED' "$tmp/err" && fail "replay with nothing run reports a failed check"

# --plot names a file the replay cannot write: refused before the replay runs (it ran to the
# end and then failed to write the plot).
for plot in "$tmp/no-such-dir/plot.svg" "$tmp"; do
    timeout 20 "$dcp_run" replay --quiet --simulate --synthetic 50 --plot "$plot" "$gpu_config" >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 2 ] || fail "replay --plot $plot exited $status, expected 2"
    grep -q -- "--plot $plot: \(its directory .* does not exist\|is a directory\)" "$tmp/err" ||
        fail "replay --plot $plot: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] && fail "replay --plot $plot replayed before refusing"
done

mkfifo "$tmp/fifo" || fail "mkfifo"
for f in "$tmp/fifo" /dev/zero; do
    timeout 20 "$dcp_run" plan "$f" >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 1 ] || fail "plan $f exited $status, expected 1 (124: it hung)"
    grep -q 'not a regular file' "$tmp/err" || fail "plan $f: $(cat "$tmp/err")"
done

DCP_DEFAULT_DEPLOYMENT=$tmp/nowhere.yaml "$dcp_run" plan >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "plan with DCP_DEFAULT_DEPLOYMENT pointing nowhere did not exit 1"
grep -q 'DCP_DEFAULT_DEPLOYMENT' "$tmp/err" || fail "the message does not name DCP_DEFAULT_DEPLOYMENT: $(cat "$tmp/err")"

{
    cat "$config"
    i=0
    while [ $i -lt 150 ]; do
        echo "x$i: 1"
        i=$((i + 1))
    done
} >"$tmp/many.yaml"
"$dcp_run" plan "$tmp/many.yaml" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "plan on 150 errors did not exit 1"
grep -q 'invalid deployment (150 errors)' "$tmp/err" || fail "150 errors not counted: $(tail -3 "$tmp/err")"
grep -q '101 errors' "$tmp/err" && fail "150 errors reported as 101"
echo ok
