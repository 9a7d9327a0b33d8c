#!/bin/sh
# plan_cli.sh DCP_RUN CONFIG: `dcp-run plan CONFIG` as text and as --json.
# Text: exit 0, nothing on stderr, every section and the verdict present.
# JSON: one object that parses, with the documented keys and consistent figures.
# Paste-back: the JSON's "config" object, saved as a deployment file (JSON is YAML
# flow syntax) and planned again, gives the same plan (only "source" differs).
set -u
dcp_run=$1
config=$2
. "$(dirname "$0")/common.sh"

"$dcp_run" plan "$config" >"$tmp/text" 2>"$tmp/err" || fail "plan $config exited $?: $(cat "$tmp/err")"
cat "$tmp/text"
[ -s "$tmp/err" ] && fail "plan $config wrote to stderr: $(cat "$tmp/err")"
for section in 'Memory per GPU' 'KV layout per GPU' 'Capacity per instance' \
        'Communication per rank' 'KV read per rank' 'verdict: ' 'DCP sizes at tp' 'Decode throughput' \
        'recommendation: '; do
    grep -q "^$section" "$tmp/text" || fail "text output lacks '$section'"
done

command -v python3 >/dev/null || { echo "python3 not found: JSON not checked"; exit 77; }
"$dcp_run" plan --json "$config" >"$tmp/json" 2>"$tmp/err" || fail "plan --json exited $?"
python3 - "$tmp/json" <<'PY' || fail "JSON output of $config"
import json, math, sys

with open(sys.argv[1]) as f:
    d = json.load(f)
assert d["schema"] == "dcp-plan/4", d["schema"]
for key in ("source", "config", "instances", "memory", "layouts", "contexts", "kv_read_per_token", "comm",
            "verdict", "dcp_sizes", "modelled", "decode", "cluster", "warnings", "recommendation", "dense"):
    assert key in d, "missing key " + key
# The deployment file's vocabulary: sections and key names as in YAML.
cfg = d["config"]
for section in ("model", "hardware", "parallel", "memory", "workload", "runtime"):
    assert section in cfg, "config lacks section " + section
for key in ("layers", "query_heads", "kv_heads", "parameters"):
    assert key in cfg["model"], "config.model lacks " + key
for key in ("memory_gb", "hbm_gbps", "link_gbps", "collective_latency_us"):
    assert key in cfg["hardware"], "config.hardware lacks " + key
base, dcp = d["layouts"]["baseline"], d["layouts"]["dcp"]
n = cfg["parallel"]["dcp"]
assert base["dcp"] == 1 and dcp["dcp"] == n
assert base["pages"] == dcp["pages"] and base["page_bytes"] == dcp["page_bytes"]
assert dcp["context_tokens"] == base["context_tokens"] * n
assert math.isclose(dcp["kv_bytes_per_token"] * n, base["kv_bytes_per_token"])
mem = d["memory"]
assert math.isclose(mem["kv_budget_bytes"],
                    mem["usable_bytes"] - mem["weight_bytes"] - mem["reserve_bytes"],
                    rel_tol=1e-9, abs_tol=1.0)
assert len(d["contexts"]) >= 1
for c in d["contexts"]:
    assert c["dcp_concurrency"] >= c["baseline_concurrency"]
    assert c["dcp_pages"] * n >= c["baseline_pages"]
comm = d["comm"]
assert comm["scheme"] == cfg["parallel"]["comm"], comm["scheme"]
assert comm["collectives"] == len(comm["rows"])
kinds = ("all_gather", "reduce_scatter", "all_to_all", "all_reduce", "peer_write")
for row in comm["rows"]:
    assert row["kind"] in kinds and row["what"] and row["ranks"] == n, row
    assert row["send_bytes"] > 0 and row["recv_bytes"] > 0, row
for total, key in (("total_send", "send_bytes"), ("total_recv", "recv_bytes")):
    assert math.isclose(comm[total], sum(row[key] for row in comm["rows"]), rel_tol=1e-12), total
if n == 1:
    assert d["comm"]["collectives"] == 0
else:
    assert d["comm"]["collectives"] >= 1
assert d["verdict"] and d["recommendation"]
assert d["dense"] == (cfg["model"].get("experts", 0) == 0), (d["dense"], cfg["model"])
# The valid DCP sizes are those the validity rules accept, the configured one among them.
valid = [x["dcp"] for x in d["dcp_sizes"] if x["valid"]]
assert 1 in valid and n in valid, valid
assert all(x["reason"] for x in d["dcp_sizes"] if not x["valid"])
if d["modelled"]:
    # The performance model: per context, TP first, then the deployment's dcp.
    assert d["not_modelled"] is None and d["perf_inputs"]["kv_efficiency"]["source"] == "default"
    assert [c["context_len"] for c in d["decode"]] == [c["context_len"] for c in d["contexts"]]
    for c, cap in zip(d["decode"], d["contexts"]):
        lay = c["layouts"]
        assert [x["dcp"] for x in lay] == ([1] if n == 1 else [1, n]), lay
        assert lay[0]["requests_at_once"] == cap["baseline_concurrency"]
        assert lay[-1]["requests_at_once"] == cap["dcp_concurrency"]
        for x in lay:
            assert (x["tok_s_per_gpu"] > 0) == (x["requests_at_once"] > 0), x
        assert lay[0]["wins_from"] is None
else:
    assert d["not_modelled"] and d["decode"] == [] and d["recommendation"].startswith("none")
with open(sys.argv[1] + ".config.yaml", "w") as f:
    json.dump(cfg, f)
PY
"$dcp_run" plan --json "$tmp/json.config.yaml" >"$tmp/json2" 2>"$tmp/err" ||
    fail "the pasted-back config did not plan: $(cat "$tmp/err")"
python3 - "$tmp/json" "$tmp/json2" <<'PY' || fail "the pasted-back config gives another plan"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["source"].endswith("json.config.yaml"), b["source"]
del a["source"], b["source"]
for key in a:
    assert a[key] == b[key], "%s differs:\n%s\n%s" % (key, a[key], b[key])
assert a == b
PY
echo "JSON ok"
