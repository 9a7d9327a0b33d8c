#!/bin/sh
# options.sh DCP_RUN: one command-line contract for every subcommand, checked
# against the option list each subcommand's --help prints (so help and parser agree):
#   --help: exit 0, the list on stdout;
#   every listed option is known; one that takes a value, given none: exit 2 and a
#     message naming it; a flag given a value (--json=1): exit 2 naming it;
#   every listed numeric range [LO..HI]: HI+1 (and 2^64, which must not wrap) is
#     refused with exit 2 naming the option, before anything runs;
#   an unknown option: exit 2 naming it.
set -u
dcp_run=$1
. "$(dirname "$0")/common.sh"
nofile=$tmp/none.yaml   # run/replay/plan: an accepted command line then fails with exit 1

# expect STATUS NEEDLE ARGS...: dcp-run ARGS exits STATUS and stderr contains NEEDLE.
expect() {
    want=$1 needle=$2
    shift 2
    "$dcp_run" "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || fail "dcp-run $* exited $got, expected $want: $(cat "$tmp/err")"
    [ -z "$needle" ] || grep -q -F -e "$needle" "$tmp/err" || fail "dcp-run $*: stderr does not name '$needle': $(cat "$tmp/err")"
}

for cmd in plan run bench replay calibrate; do
    "$dcp_run" $cmd --help >"$tmp/help" 2>"$tmp/err" || fail "$cmd --help exited $?"
    [ -s "$tmp/err" ] && fail "$cmd --help wrote to stderr"
    grep -q "^usage: dcp-run $cmd" "$tmp/help" || fail "$cmd --help: no usage line"
    # "  --name METAVAR   help ... [LO..HI]"
    grep -E '^  --[a-z]' "$tmp/help" | grep -v -e '--help' >"$tmp/opts"
    [ -s "$tmp/opts" ] || fail "$cmd --help lists no option"
    expect 2 "--no-such-option" $cmd --no-such-option
    while read -r name meta rest; do
        case $meta in
            --*|[a-z]*) meta= ;;   # a flag: the second word is help text
        esac
        if [ -z "$meta" ]; then
            expect 2 "$name" $cmd "$name=1"
            grep -q 'takes no value' "$tmp/err" || fail "$cmd $name=1: $(cat "$tmp/err")"
            continue
        fi
        expect 2 "$name" $cmd "$name"
        grep -q 'needs a value' "$tmp/err" || fail "$cmd $name (no value): $(cat "$tmp/err")"
        range=$(printf '%s\n' "$rest" | sed -n 's/.*\[\([0-9][0-9]*\)\.\.\([0-9][0-9]*\)\]$/\2/p')
        [ -n "$range" ] || continue
        over=$((range + 1))
        for bad in "$over" 18446744073709551617 -1 1x; do
            expect 2 "$name" $cmd "$name" "$bad"
            grep -q 'bad value' "$tmp/err" || fail "$cmd $name $bad: $(cat "$tmp/err")"
        done
        [ $cmd = bench ] && continue   # bench has no file to fail on: it would run
        # The highest listed value passes the parser (then the missing file fails).
        extra=
        [ $cmd = replay ] && [ "$name" != --synthetic ] && extra="--synthetic 1"
        # shellcheck disable=SC2086
        expect 1 "" $cmd "$nofile" $extra "$name" "$range"
    done <"$tmp/opts"
done
# A value past 32 bits does not wrap into a small one (4294967297 was taken as 1).
expect 2 "--steps" run "$nofile" --steps 4294967297
expect 2 "--requests" run "$nofile" --requests 4294967296
echo ok
