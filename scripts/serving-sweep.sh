#!/bin/sh
# serving-sweep.sh [DCP_RUN] [DEPLOYMENT]: where DCP wins and loses, as the performance
# model predicts it: the synthetic agentic trace (2,000 requests) at prompt length
# scales 0.03 .. 1 (median prompt ~2k .. ~67k tokens) and at a light and a heavy
# arrival rate, TP baseline vs DCP, simulated. Prints one line per point; the table in
# docs/serving.md comes from this script.
set -eu
dcp_run=${1:-build/runtime/cli/dcp-run}
dep=${2:-configs/kimi-k2-8xb200.yaml}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-6s %-5s | %-19s | %-15s | %-13s | %-11s | %s\n' scale rate "tok/s/GPU TP DCP" "TPOT p50 ms" \
    "conc mean" "KV use max" "prefix hits"
for ls in 0.03 0.1 0.3 0.6 1; do
    for rate in 0.5 8; do
        "$dcp_run" replay "$dep" --synthetic 2000 --rate "$rate" --length-scale "$ls" --simulate --quiet \
            --max-running 1024 --json >"$tmp/r.json"
        python3 - "$tmp/r.json" "$ls" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
t, c = d["layouts"]
print("%-6s %-5s | %6.0f %6.0f %5.2fx | %6.1f %6.1f | %5.1f %6.1f | %4.0f%% %4.0f%% | %3.0f%% %3.0f%%" % (
    sys.argv[2], sys.argv[3], t["output_tok_s_per_gpu"], c["output_tok_s_per_gpu"],
    c["output_tok_s_per_gpu"] / t["output_tok_s_per_gpu"], t["tpot_p50"] * 1e3, c["tpot_p50"] * 1e3,
    t["concurrency_mean"], c["concurrency_mean"], t["kv_use_max"] * 100, c["kv_use_max"] * 100,
    t["prefix_hit_rate"] * 100, c["prefix_hit_rate"] * 100))
PY
    done
done
