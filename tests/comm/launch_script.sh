#!/bin/sh
# scripts/dcp-launch end to end on the CUDA doubles: --help; refusing to run
# outside a launcher; --local 2 running test_multiprocess's launched program,
# whose per-rank results must equal one process driving both ranks; and --timeout
# killing ranks that never finish (exit 124).
# Usage: launch_script.sh SCRIPT TEST_MULTIPROCESS
set -u
script=$1 prog=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/launch-test.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$script" --help >"$dir/help" || fail "--help exited $?"
grep -q "dcp-launch --local N" "$dir/help" || fail "--help does not show the usage"

env -u RANK -u SLURM_PROCID "$script" -- true 2>"$dir/err"
rc=$?
[ $rc -eq 2 ] || fail "outside a launcher: exit $rc, expected 2"
grep -q "no launcher environment" "$dir/err" || fail "outside a launcher: $(cat "$dir/err")"

export FAKE_CUDA_DEVICES=2 FAKE_NCCL_SHM_BYTES=65536
for c in mla:2:a2a gqa:2:ag_rs; do
    env -u RANK -u SLURM_PROCID -u DCP_RANK "$prog" --child "$c" "$dir/ref" || fail "$c: one process: exit $?"
    "$script" --local 2 --timeout 200 -- "$prog" --child "$c" "$dir/mp" || fail "$c: dcp-launch --local 2: exit $?"
    for r in 0 1; do
        [ -s "$dir/ref.rank$r" ] || fail "$c: no results of rank $r"
        cmp -s "$dir/ref.rank$r" "$dir/mp.rank$r" || fail "$c: rank $r differs between one process and two"
    done
    echo "$c: dcp-launch --local 2 == one process, bit for bit"
done

"$script" --local 2 --timeout 1 -- sleep 100 2>"$dir/err"
rc=$?
[ $rc -eq 124 ] || fail "--timeout 1: exit $rc, expected 124"
grep -q "rank 1 still running after 1 s: killed" "$dir/err" || fail "--timeout: $(cat "$dir/err")"
echo "--timeout 1 killed the stragglers"
