#!/bin/sh
# perf_cli.sh DCP_RUN SOURCE_ROOT: the performance model through `dcp-run replay --simulate`.
#   the sign of DCP's gain on the shipped DeepSeek-V3 8xB200 deployment, in a closed loop of
#     fixed-length requests (32k prompts, 256 outputs): DCP loses with 1 client and wins with 64
#     (no figure pinned);
#   a lengths trace without --output-tokens is refused, with the reason;
#   a CPU deployment is refused (the model prices GPU steps only);
#   requests past the model's context window are rejected with reason "context";
#   --pd: prefill instances (their GPUs counted), decode-only steps on the decode instance,
#     refused without --simulate or without hardware.internode_gbps;
#   --dcp all / a list / an invalid size; --sweep-clients with the Pareto plot and its JSON;
#   calibrate on the host backend: the file it writes is read back by replay and plan
#     --calibration, which say which inputs were calibrated; a broken file is refused with
#     its position;
#   warnings: a layout falling behind open-loop arrivals, DCP raising TPOT; a group that
#     spans nodes priced on the network (plan and replay); the recommendation line.
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

# The same at 128k prompts with 1,024 outputs (the closed loop is mostly prefill there: DCP's
# gain is smaller than in the decode-only view, but its sign must hold).
python3 -c 'print("\n".join(["131072"] * 128))' >"$tmp/len128k.txt"
for c in 1 64; do
    "$dcp_run" replay "$ds" --trace "$tmp/len128k.txt" --clients $c --output-tokens 1024 --limit $((c == 1 ? 2 : 128)) \
        --simulate --json --quiet >"$tmp/l$c.json" 2>"$tmp/err" || fail "128k, clients $c: $(cat "$tmp/err")"
done
python3 - "$tmp/l1.json" "$tmp/l64.json" <<'PY' || fail "sign of DCP's gain at 128k"
import json, sys
(t1, d1), (t64, d64) = (json.load(open(p))["layouts"] for p in sys.argv[1:3])
for x in (t1, d1, t64, d64):
    assert x["completed"] == x["requests"] and x["rejected"] == 0, x
r1 = d1["output_tok_s_per_gpu"] / t1["output_tok_s_per_gpu"]
r64 = d64["output_tok_s_per_gpu"] / t64["output_tok_s_per_gpu"]
assert r1 < 1 < r64, (r1, r64)
# At 64 clients DCP's decode tokens ride mostly in steps that carry prefill chunks.
assert d64["mixed_decode_share"] > t64["mixed_decode_share"], (t64["mixed_decode_share"], d64["mixed_decode_share"])
print("128k sign ok: DCP/TP %.2fx at 1 client, %.2fx at 64" % (r1, r64))
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
grep -q "a CPU deployment" "$tmp/err" || fail "CPU deployment: $(cat "$tmp/err")"

# DeepSeek-V3's window is 163,840 tokens: 200k prompts are rejected, with their reason.
printf '200000\n1000\n' >"$tmp/long.txt"
"$dcp_run" replay "$ds" --trace "$tmp/long.txt" --output-tokens 16 --simulate --json --quiet >"$tmp/long.json" \
    2>"$tmp/err" || fail "context window: $(cat "$tmp/err")"
python3 - "$tmp/long.json" <<'PY' || fail "context window rejections"
import json, sys
for x in json.load(open(sys.argv[1]))["layouts"]:
    assert x["rejected_context"] == 1 and x["completed"] == 1, x
PY

# P/D: one prefill instance of 8 GPUs; the decode instance only decodes.
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --clients 16 --output-tokens 64 --limit 32 --simulate --pd \
    --json --quiet >"$tmp/pd.json" 2>"$tmp/err" || fail "pd: $(cat "$tmp/err")"
python3 - "$tmp/pd.json" <<'PY' || fail "pd output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "dcp-replay/1" and d["pd"]["prefill_instances"] == 1 and d["pd"]["prefill_tp"] == 8, d["pd"]
for x in d["layouts"]:
    assert x["completed"] == 32 and x["gpus"] == 16 and x["prefill_gpus"] == 8, x
    assert x["mixed_steps"] == 0 and x["decode_only_steps"] > 0, x
    assert abs(x["output_tok_s_per_gpu"] * 16 - x["output_tok_s_per_decode_gpu"] * 8) < 1e-6 * x["output_tok_s_per_decode_gpu"] * 8
    assert x["ttft_p50"] > 0 and x["tpot_p50"] > 0
PY
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --output-tokens 4 --pd --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "--pd without --simulate: exit status"
grep -q -- "--pd needs --simulate" "$tmp/err" || fail "--pd without --simulate: $(cat "$tmp/err")"
sed '/internode_gbps/d' "$ds" >"$tmp/nonet.yaml"
"$dcp_run" replay "$tmp/nonet.yaml" --trace "$tmp/len32k.txt" --output-tokens 4 --pd --simulate --quiet \
    >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "--pd without a network: exit status"
grep -q "gives no hardware.internode_gbps" "$tmp/err" || fail "--pd without a network: $(cat "$tmp/err")"

# --dcp: every valid size, a list, and a size the rules refuse.
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --clients 4 --output-tokens 16 --limit 8 --simulate --dcp all \
    --json --quiet >"$tmp/all.json" 2>"$tmp/err" || fail "--dcp all: $(cat "$tmp/err")"
python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["layouts"]; assert [x["dcp"] for x in l] == [1, 2, 4, 8], l' \
    "$tmp/all.json" || fail "--dcp all layouts"
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --clients 4 --output-tokens 16 --limit 8 --simulate --dcp 3 \
    --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "--dcp 3: exit status"
grep -q "dcp=3 does not divide tp=8" "$tmp/err" || fail "--dcp 3: $(cat "$tmp/err")"

# Two prefill instances of 4 GPUs each (Kimi K2 in nvfp4 fits 4 B200s).
kimi=$root/configs/kimi-k2-8xb200.yaml
"$dcp_run" replay "$kimi" --trace "$tmp/len32k.txt" --clients 8 --output-tokens 16 --limit 16 --simulate --pd \
    --prefill-instances 2 --prefill-tp 4 --json --quiet >"$tmp/pd2.json" 2>"$tmp/err" || fail "pd 2x4: $(cat "$tmp/err")"
python3 - "$tmp/pd2.json" <<'PY' || fail "pd 2x4 output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pd"]["prefill_instances"] == 2 and d["pd"]["prefill_tp"] == 4, d["pd"]
assert all(x["gpus"] == 16 and x["prefill_gpus"] == 8 and x["completed"] == 16 for x in d["layouts"]), d["layouts"]
PY
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --output-tokens 4 --prefill-tp 4 --simulate --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "--prefill-tp without --pd: exit status"

# plan: --dcp sizes in the decode table, a refused size, options over the model's inputs.
"$dcp_run" plan "$ds" --dcp 2,4 --kv-efficiency 0.5 --gemm-efficiency 0.3 --no-cuda-graphs --json >"$tmp/p24.json" \
    2>"$tmp/err" || fail "plan --dcp 2,4: $(cat "$tmp/err")"
"$dcp_run" plan "$ds" --json >"$tmp/pdef.json" 2>"$tmp/err" || fail "plan: $(cat "$tmp/err")"
python3 - "$tmp/p24.json" "$tmp/pdef.json" <<'PY' || fail "plan --dcp and model options"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for c in a["decode"]:
    assert [x["dcp"] for x in c["layouts"]] == [1, 2, 4], c
for k in ("kv_efficiency", "gemm_efficiency", "cuda_graphs"):
    assert a["perf_inputs"][k]["source"] == "option" and b["perf_inputs"][k]["source"] == "default", k
assert a["perf_inputs"]["kv_efficiency"]["value"] == 0.5 and a["perf_inputs"]["cuda_graphs"]["value"] == 0
# A slower attention kernel and eager launches: TP decodes slower at every context.
for x, y in zip(a["decode"], b["decode"]):
    assert x["layouts"][0]["tok_s_per_gpu"] < y["layouts"][0]["tok_s_per_gpu"], (x, y)
PY
"$dcp_run" plan "$ds" --dcp 6 >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "plan --dcp 6: exit status"
grep -q "dcp=6 does not divide tp=8" "$tmp/err" || fail "plan --dcp 6: $(cat "$tmp/err")"

# The sweep: one closed loop per number of clients for each layout, the Pareto plot.
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --sweep-clients 1,8,64 --output-tokens 1024 --limit 128 --simulate --json \
    --quiet --plot "$tmp/pareto.svg" >"$tmp/sweep.json" 2>"$tmp/err" || fail "sweep: $(cat "$tmp/err")"
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --sweep-clients 1,8,64 --output-tokens 1024 --limit 128 --simulate \
    --quiet >"$tmp/sweep.txt" 2>"$tmp/err" || fail "sweep text: $(cat "$tmp/err")"
python3 - "$tmp/sweep.json" "$tmp/pareto.svg" "$tmp/sweep.txt" <<'PY' || fail "sweep output"
import json, sys
import xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
assert "layouts" not in d and [p["clients"] for p in d["sweep"]] == [1, 8, 64], d.keys()
ids = {e.get("id"): e for e in ET.parse(sys.argv[2]).getroot().iter() if e.get("id")}
for p in d["sweep"]:
    for x in p["layouts"]:
        lay = "tp" if x["dcp"] == 1 else "dcp%d" % x["dcp"]
        c = ids["point-%s-%d" % (lay, p["clients"])]
        assert abs(float(c.get("data-value")) - x["output_tok_s_per_gpu"]) <= 1e-4 * x["output_tok_s_per_gpu"]
        assert abs(float(c.get("data-tpot")) - x["tpot_p50"]) <= 1e-4 * x["tpot_p50"]
    assert len(p["layouts"]) == 2
assert "pareto-tp" in ids and "pareto-dcp8" in ids
assert d["recommendation"].startswith("dcp 8 from concurrency"), d["recommendation"]
text = open(sys.argv[3]).read()
assert "dcp 8 beats TP from concurrency" in text and "\nrecommendation: dcp 8" in text, text
PY

# calibrate on the host backend, then replay and plan read the file.
"$dcp_run" calibrate "$root/configs/default.yaml" --backend host --out "$tmp/cal.yaml" --quick --json \
    >"$tmp/cal.json" 2>"$tmp/err" || fail "calibrate: $(cat "$tmp/err")"
"$dcp_run" calibrate "$root/configs/default.yaml" --backend host --out "$tmp/cal2.yaml" --repeats 2 --max-bytes 16384 \
    --max-context 1024 --kv-mb 8 --json >"$tmp/cal2.json" 2>"$tmp/err" || fail "calibrate small: $(cat "$tmp/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert sorted({x["bytes"] for x in d["collectives"]}) == [4096, 16384], d["collectives"]; assert max(x["context"] for x in d["attention"]) <= 1024' \
    "$tmp/cal2.json" || fail "calibrate --max-bytes / --max-context"
"$dcp_run" calibrate "$root/configs/default.yaml" --backend host --quick >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "calibrate without --out: exit status"
python3 - "$tmp/cal.json" <<'PY' || fail "calibrate output"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "dcp-calibrate/1" and d["backend"].startswith("host"), d
kinds = sorted({x["kind"] for x in d["collective_fits"]})
assert kinds == ["all_gather", "all_to_all", "reduce_scatter"], kinds
assert all(x["ranks"] == 4 and x["beta_bytes_per_s"] > 0 for x in d["collective_fits"])
assert len(d["attention"]) >= 2 and all(x["seconds"] > 0 for x in d["attention"])
assert d["kernel_gap_eager_seconds"] > 0 and d["kernel_gap_graph_seconds"] is None
PY
"$dcp_run" replay "$ds" --trace "$tmp/len32k.txt" --clients 4 --output-tokens 16 --limit 8 --simulate \
    --calibration "$tmp/cal.yaml" --json --quiet >"$tmp/calr.json" 2>"$tmp/err" || fail "replay --calibration: $(cat "$tmp/err")"
"$dcp_run" plan "$ds" --calibration "$tmp/cal.yaml" >"$tmp/calp.txt" 2>"$tmp/err" || fail "plan --calibration: $(cat "$tmp/err")"
python3 - "$tmp/calr.json" "$tmp/calp.txt" <<'PY' || fail "calibrated inputs"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["calibration"].endswith("cal.yaml") and d["calibrated_on"].startswith("host"), d
assert d["perf_inputs"]["kernel_gap_eager_us"]["source"] == "calibration"
assert d["perf_inputs"]["gemm_efficiency"]["source"] == "default"
assert len(d["collective_fits"]) == 3
assert "model inputs calibrated (" in open(sys.argv[2]).read()
PY
printf 'calibration:\n  version: 1\n  kv_efficiency: 3\n' >"$tmp/bad.yaml"
"$dcp_run" plan "$ds" --calibration "$tmp/bad.yaml" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "bad calibration: exit status"
grep -q "bad.yaml:3:18: calibration.kv_efficiency: 3 is out of range" "$tmp/err" || fail "bad calibration: $(cat "$tmp/err")"

# Warnings: an open loop faster than the layout serves falls behind; DCP raises TPOT at
# one client (its collectives); the recommendation line closes every report.
python3 -c 'print("\n".join(["32768"] * 96))' >"$tmp/burst.txt"
"$dcp_run" replay "$ds" --trace "$tmp/burst.txt" --output-tokens 64 --simulate --json --quiet >"$tmp/burst.json" \
    2>"$tmp/err" || fail "burst: $(cat "$tmp/err")"
python3 - "$tmp/burst.json" "$tmp/c1.json" <<'PY' || fail "warnings"
import json, sys
d, one = (json.load(open(p)) for p in sys.argv[1:3])
assert all(x["overloaded"] for x in d["layouts"]), [x["ttft_last_quarter"] for x in d["layouts"]]
assert any("falls behind the arrivals" in w for w in d["warnings"]), d["warnings"]
assert not any(x["overloaded"] for x in one["layouts"])
assert any("raises TPOT p50" in w for w in one["warnings"]), one["warnings"]
assert one["recommendation"].startswith("TP (dcp 1)"), one["recommendation"]
PY

# Two nodes of 4 GPUs: an instance of tp 8 spans them; plan and replay say so.
sed 's/gpus_per_node: 8/gpus_per_node: 4/; s/nodes: 1/nodes: 2/' "$ds" >"$tmp/two.yaml"
"$dcp_run" plan "$tmp/two.yaml" --json >"$tmp/two.json" 2>"$tmp/err" || fail "two nodes: $(cat "$tmp/err")"
"$dcp_run" replay "$tmp/two.yaml" --trace "$tmp/len32k.txt" --clients 2 --output-tokens 8 --limit 2 --simulate \
    --json --quiet >"$tmp/two-r.json" 2>"$tmp/err" || fail "two nodes replay: $(cat "$tmp/err")"
python3 - "$tmp/two.json" "$tmp/two-r.json" <<'PY' || fail "spanning nodes"
import json, sys
p, r = (json.load(open(x)) for x in sys.argv[1:3])
assert any("spans nodes" in w and "all-reduces" in w for w in p["warnings"]), p["warnings"]
assert any("DCP group of 8 spans nodes" in w for w in p["warnings"]), p["warnings"]
assert all(x["tp_link"] == "network" for x in r["layouts"]) and r["layouts"][1]["dcp_link"] == "network"
assert any("spans nodes" in w for w in r["warnings"]), r["warnings"]
PY
echo ok
