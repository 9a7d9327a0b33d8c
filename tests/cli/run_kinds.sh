#!/bin/sh
# run_kinds.sh DCP_RUN CONFIG: `dcp-run run` on a CPU-sized deployment of layer kinds
# (configs/cpu-*.yaml, docs/design.md §13) on the host backend: exit 0, nothing on
# stderr, both layouts ran and passed their float64 check (which follows each checked
# layer's kind: the window, the sink, the top-k lists), and plan prints the layers by kind.
set -u
dcp_run=$1
config=$2
. "$(dirname "$0")/common.sh"

"$dcp_run" run --quiet --json --backend host "$config" >"$tmp/json" 2>"$tmp/err"
status=$?
[ "$status" -eq 0 ] || fail "run $config exited $status: $(cat "$tmp/err")"
[ -s "$tmp/err" ] && fail "run --quiet wrote to stderr: $(cat "$tmp/err")"
"$dcp_run" plan "$config" >"$tmp/plan" 2>"$tmp/err" || fail "plan $config failed: $(cat "$tmp/err")"
grep -q "^Layers by kind" "$tmp/plan" || fail "plan $config shows no layers by kind"

command -v python3 >/dev/null || { echo "python3 not found: JSON not checked"; exit 77; }
python3 - "$tmp/json" <<'PY' || fail "JSON output of run"
import json, sys

with open(sys.argv[1]) as f:
    d = json.load(f)
layouts = {x["name"]: x for x in d["layouts"]}
assert set(layouts) == {"tp_baseline", "dcp"}, sorted(layouts)
for x in layouts.values():
    assert x["ok"] is True, x["name"] + " not ok"
    assert x["check"]["pass"] is True, x["name"] + ": check failed: " + json.dumps(x["check"])
    assert x["check"]["rows"] > 0, x["name"] + ": nothing checked"
assert layouts["dcp"]["dcp"] > 1
PY
echo "ok"
