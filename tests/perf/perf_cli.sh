#!/bin/sh
# perf_cli.sh DCP_RUN SOURCE_ROOT: the performance model through `dcp-run replay --simulate`.
#   the sign of DCP's gain on the shipped DeepSeek-V3 8xB200 deployment, in a closed loop of
#     fixed-length requests (32k prompts, 256 outputs): DCP loses with 1 client and wins with 64
#     (no figure pinned);
#   a lengths trace without --output-tokens is refused, with the reason;
#   a CPU deployment is refused (the model prices GPU steps only);
#   requests past the model's context window are rejected with reason "context".
set -u
dcp_run=$1
root=$2
. "$root/tests/cli/common.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
ds=$root/configs/deepseek-v3-8xb200.yaml
python3 -c 'print("\n".join(["32768"] * 192))' >"$tmp/len32k.txt"

for c in 1 64; do
    "$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --clients $c --output-tokens 256 --limit $((c == 1 ? 2 : 192)) \
        --simulate --json --quiet >"$tmp/c$c.json" 2>"$tmp/err" || fail "clients $c: $(cat "$tmp/err")"
done
python3 - "$tmp/c1.json" "$tmp/c64.json" <<'PY' || fail "sign of DCP's gain"
import json, sys
(t1, d1), (t64, d64) = (json.load(open(p))["layouts"] for p in sys.argv[1:3])
for x in (t1, d1, t64, d64):
    assert x["completed"] == x["requests"] and x["rejected"] == 0, x
assert d1["output_tok_s_per_gpu"] < t1["output_tok_s_per_gpu"], (t1["output_tok_s_per_gpu"], d1["output_tok_s_per_gpu"])
assert d64["output_tok_s_per_gpu"] > t64["output_tok_s_per_gpu"], (t64["output_tok_s_per_gpu"], d64["output_tok_s_per_gpu"])
# TP holds fewer than 64 requests of 32k at once; DCP all of them.
assert t64["concurrency_max"] < 64 <= d64["concurrency_max"], (t64["concurrency_max"], d64["concurrency_max"])
print("sign ok: DCP/TP %.2fx at 1 client, %.2fx at 64" % (d1["output_tok_s_per_gpu"] / t1["output_tok_s_per_gpu"],
                                                         d64["output_tok_s_per_gpu"] / t64["output_tok_s_per_gpu"]))
PY

# A lengths trace says nothing about outputs.
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --simulate --quiet >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "no --output-tokens: exit status"
grep -q "give --output-tokens N" "$tmp/err" || fail "no --output-tokens: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "no --output-tokens wrote to stdout"

# The CPU default deployment has no GPU steps to price.
"$dcp_run" replay "$root/configs/default.yaml" --trace "$tmp/len32k.txt" --output-tokens 4 --simulate --quiet \
    >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "CPU deployment: exit status"
grep -q "is a CPU deployment" "$tmp/err" || fail "CPU deployment: $(cat "$tmp/err")"

# DeepSeek-V3's window is 163,840 tokens: 200k prompts are rejected, with their reason.
printf '200000\n1000\n' >"$tmp/long.txt"
"$dcp_run" replay "$ds" --trace "$tmp/long.txt" --output-tokens 16 --simulate --json --quiet >"$tmp/long.json" \
    2>"$tmp/err" || fail "context window: $(cat "$tmp/err")"
python3 - "$tmp/long.json" <<'PY' || fail "context window rejections"
import json, sys
for x in json.load(open(sys.argv[1]))["layouts"]:
    assert x["rejected_context"] == 1 and x["completed"] == 1, x
PY
echo ok
