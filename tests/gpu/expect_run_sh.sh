#!/bin/sh
# CI's check of tests/gpu/run.sh on the test doubles: runs it and requires an exit
# status and lines in its output, so that a forced failure is shown to fail the
# script for the right reason (and a clean run to pass).
#   expect_run_sh.sh STATUS 'REGEX' ['REGEX' ...] -- run.sh ARGS...
set -u
want=$1
shift
patterns=
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    patterns="$patterns
$1"
    shift
done
[ "${1:-}" = "--" ] && shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
echo "---- expect_run_sh: exit $status (want $want)"
[ "$status" -eq "$want" ] || { echo "FAIL: exit $status, expected $want"; exit 1; }
printf '%s\n' "$patterns" | while IFS= read -r p; do
    [ -z "$p" ] && continue
    printf '%s\n' "$output" | grep -Eq -- "$p" || { echo "FAIL: no line matches /$p/"; exit 1; }
done || exit 1
echo "ok"
