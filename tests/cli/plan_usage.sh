#!/bin/sh
# plan_usage.sh DCP_RUN BROKEN_CONFIG: the command line and bad input.
#   no FILE: plans the default deployment;  --help: exit 0
#   unknown option, two files: exit 2 with usage on stderr
#   missing file: exit 1;  broken config: exit 1, file:line:col diagnostics, no stdout
set -u
dcp_run=$1
broken=$2
. "$(dirname "$0")/common.sh"

# expect STATUS ARGS...: runs dcp-run plan ARGS, checks the exit status.
expect() {
    want=$1
    shift
    "$dcp_run" plan "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || fail "plan $* exited $got, expected $want: $(cat "$tmp/err")"
}

expect 0
grep -q '^verdict: ' "$tmp/out" || fail "plan with no FILE printed no verdict"

expect 0 --help
grep -q 'usage: dcp-run plan' "$tmp/out" || fail "--help printed no usage"
grep -qi 'performance model' "$tmp/out" || fail "--help does not name the performance model"

expect 2 --no-such-option
grep -q 'usage: dcp-run plan' "$tmp/err" || fail "bad option: no usage on stderr"
expect 2 "$broken" "$broken"
grep -q 'usage: dcp-run plan' "$tmp/err" || fail "two files: no usage on stderr"

expect 1 "$tmp/no-such-file.yaml"
[ -s "$tmp/err" ] || fail "missing file: nothing on stderr"

expect 1 "$broken"
cat "$tmp/err"
[ -s "$tmp/out" ] && fail "broken config: something on stdout"
name=$(basename "$broken")
positions=$(grep -c "$name:[0-9][0-9]*:[0-9][0-9]*: " "$tmp/err")
[ "$positions" -ge 2 ] || fail "broken config: $positions file:line:col lines, expected one per error"
for path in model.layers parallel.dcp; do
    grep -q "$name:[0-9][0-9]*:[0-9][0-9]*: $path" "$tmp/err" || fail "broken config: no positioned error for $path"
done
echo "ok"
