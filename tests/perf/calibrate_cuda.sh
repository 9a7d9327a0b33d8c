#!/bin/sh
# calibrate_cuda.sh DCP_RUN SOURCE_ROOT: `dcp-run calibrate` on the CUDA backend, over the
# test doubles of libcuda and libnccl the test environment points to: with one fake GPU
# the 4 ranks are virtual (collectives as device copies), with four they use NCCL; both
# measure the three collectives, the attention points, and -- the doubles capture graphs
# -- the graph replay of the smallest call.
set -u
dcp_run=$1
root=$2
. "$root/tests/cli/common.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
for devices in 1 4; do
    FAKE_CUDA_DEVICES=$devices "$dcp_run" calibrate "$root/configs/default.yaml" --backend cuda --quick \
        --out "$tmp/cal$devices.yaml" --json >"$tmp/cal$devices.json" 2>"$tmp/err" ||
        fail "calibrate on $devices fake GPU(s): $(cat "$tmp/err")"
    python3 - "$tmp/cal$devices.json" "$devices" <<'PY' || fail "calibrate on $devices fake GPU(s)"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["backend"].startswith("cuda"), d["backend"]
assert sorted(x["kind"] for x in d["collective_fits"]) == ["all_gather", "all_to_all", "reduce_scatter"], d
assert len(d["attention"]) >= 2 and d["kernel_gap_eager_seconds"] > 0
assert d["kernel_gap_graph_seconds"] > 0, "no graph replay measured"
PY
    "$dcp_run" plan "$root/configs/kimi-k2-8xb200.yaml" --calibration "$tmp/cal$devices.yaml" --json \
        >"$tmp/plan.json" 2>"$tmp/err" || fail "plan with the CUDA calibration: $(cat "$tmp/err")"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["perf_inputs"]["kernel_gap_graph_us"]["source"] == "calibration"' \
        "$tmp/plan.json" || fail "the graph input is not calibrated"
done
echo ok
