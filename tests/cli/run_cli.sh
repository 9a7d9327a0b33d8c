#!/bin/sh
# run_cli.sh DCP_RUN BROKEN_CONFIG [BACKEND]: `dcp-run run` end to end, on BACKEND
# (host or cuda; cuda runs on the test doubles the test environment points to).
#   no FILE (the default deployment), --quiet --json: exit 0, nothing on stderr, one
#     JSON object in which both layouts (TP baseline and DCP) ran and passed their
#     correctness check, and DCP admitted at least 3x the baseline's concurrency;
#   a broken deployment: exit 1, the problem on stderr, nothing on stdout.
set -u
dcp_run=$1
broken=$2
backend=${3:-auto}
. "$(dirname "$0")/common.sh"

"$dcp_run" run --quiet --json --backend "$backend" >"$tmp/json" 2>"$tmp/err"
status=$?
cat "$tmp/json"
[ "$status" -eq 0 ] || fail "run --quiet --json exited $status: $(cat "$tmp/err")"
[ -s "$tmp/err" ] && fail "run --quiet wrote to stderr: $(cat "$tmp/err")"

command -v python3 >/dev/null || { echo "python3 not found: JSON not checked"; exit 77; }
python3 - "$tmp/json" "$backend" <<'PY' || fail "JSON output of run"
import json, sys

with open(sys.argv[1]) as f:
    d = json.load(f)
if sys.argv[2] != "auto":
    for x in d["layouts"]:
        assert x["backend"].startswith(sys.argv[2] + " "), x["backend"]
assert d["deployment"].endswith("default.yaml"), d["deployment"]
layouts = {x["name"]: x for x in d["layouts"]}
assert set(layouts) == {"tp_baseline", "dcp"}, sorted(layouts)
base, dcp = layouts["tp_baseline"], layouts["dcp"]
assert base["dcp"] == 1 and dcp["dcp"] > 1, (base["dcp"], dcp["dcp"])
for x in (base, dcp):
    check = x["check"]
    assert x["ok"] is True, x["name"] + " not ok"
    assert check["pass"] is True, x["name"] + ": check failed: " + json.dumps(check)
    assert check["rows"] > 0, x["name"] + ": nothing checked"
    assert check["max_rel_err"] <= d["check_tolerance"], x["name"]
    assert x["concurrency"] >= 1 and x["decode_steps"] >= 1, x["name"]
    assert x["kv_blocks_used_per_rank"] <= x["kv_blocks_per_rank"], x["name"]
assert dcp["concurrency"] >= 3 * base["concurrency"], (dcp["concurrency"], base["concurrency"])
assert dcp["context_tokens"] > base["context_tokens"]
PY
echo "JSON ok"

"$dcp_run" run --quiet "$broken" >"$tmp/out" 2>"$tmp/err"
status=$?
[ "$status" -eq 1 ] || fail "run on a broken deployment exited $status, expected 1"
[ -s "$tmp/out" ] && fail "run on a broken deployment printed to stdout: $(cat "$tmp/out")"
grep -q "$(basename "$broken"):[0-9][0-9]*:[0-9][0-9]*: " "$tmp/err" ||
    fail "run on a broken deployment: no file:line:col diagnostic: $(cat "$tmp/err")"
echo "ok"
