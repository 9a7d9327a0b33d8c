#!/bin/sh
# replay_cli.sh DCP_RUN SOURCE_ROOT: `dcp-run replay` end to end.
#   simulate: the shipped Mooncake excerpt on the Kimi K2 8xB200 deployment, --json and
#     --plot: both layouts complete every request; the SVG parses as XML and its series
#     (concurrency and KV use per layout, the bars) agree with the JSON;
#   the text table on a wide case: no two cells run together, rejection reasons as in the JSON;
#     the plots' labels inside the viewBox, apart, bar values to 3 significant digits;
#   execute (host backend, default deployment): a prefix-heavy trace in a KV budget small
#     enough to preempt, with 2 MTP drafts a step, every request arriving at once (closed
#     loop, --clients 12: executed steps take wall time, so open-loop arrivals would overlap
#     more or less depending on the machine's speed, and whether anything is preempted
#     with them): the correctness check passes, with rows
#     of requests served from the prefix cache and of preempted-then-recomputed ones; the
#     output digests equal those of a run with ample KV, no prefix cache and no MTP
#     (identical outputs: recompute, cache hits and truncated drafts change nothing);
#   execute the Mooncake excerpt (first 20 requests, scaled to CPU size): all complete in
#     both layouts and the check passes; no progress line when stderr is a file, one on a
#     terminal (under script, when installed);
#   bad traces (a missing field, a FIFO) and bad usage: exit 1 / 2 with the reason.
set -u
dcp_run=$1
root=$2
. "$root/tests/cli/common.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
excerpt=$root/tests/serve/mooncake-excerpt.jsonl
small=$root/tests/serve/prefix-small.jsonl

"$dcp_run" replay "$root/configs/kimi-k2-8xb200.yaml" --trace "$excerpt" --simulate --json --quiet \
    --plot "$tmp/plot.svg" >"$tmp/sim.json" 2>"$tmp/err" || fail "simulate: $(cat "$tmp/err")"
python3 - "$tmp/sim.json" "$tmp/plot.svg" <<'PY' || fail "simulate output"
import json, sys
import xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
assert d["simulate"] is True and d["requests"] == 200, d["requests"]
lay = {x["name"]: x for x in d["layouts"]}
assert set(lay) == {"tp_baseline", "dcp"}, sorted(lay)
for x in lay.values():
    assert x["completed"] == 200 and x["rejected"] == 0, x
    assert x["output_tok_s_per_gpu"] > 0 and x["ttft_p50"] > 0 and x["tpot_p50"] > 0, x
    assert 0 < x["kv_use_max"] <= 1 and x["concurrency_max"] >= 1, x
# DCP holds 8x the tokens per block in the same pages: more cached prefixes survive.
assert lay["dcp"]["tokens_per_block"] == 8 * lay["tp_baseline"]["tokens_per_block"]
assert lay["dcp"]["prefix_hit_rate"] > 0
ns = {"s": "http://www.w3.org/2000/svg"}
svg = ET.parse(sys.argv[2]).getroot()
assert svg.tag == "{http://www.w3.org/2000/svg}svg"
ids = {e.get("id"): e for e in svg.iter() if e.get("id")}
for name, short in (("tp_baseline", "tp"), ("dcp", "dcp8")):
    x = lay[name]
    for series in ("concurrency", "kv"):
        line = ids[series + "-" + short]
        pts = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
        assert len(pts) >= 100, (series, len(pts))
        assert all(a[0] < b[0] for a, b in zip(pts, pts[1:])), "x not increasing"
    assert float(ids["concurrency-" + short].get("data-max")) == x["concurrency_max"]
    assert abs(float(ids["kv-" + short].get("data-max")) - x["kv_use_max"]) < 1e-6
    bar = float(ids["bar-throughput-" + short].get("data-value"))
    assert abs(bar - x["output_tok_s_per_gpu"]) <= 1e-4 * x["output_tok_s_per_gpu"], (bar, x)
    assert abs(float(ids["bar-ttft-" + short].get("data-value")) - x["ttft_p50"]) <= 1e-4 * x["ttft_p50"]
print("simulate ok")
PY

# The text table: a wide case (TTFT in hours, TP rejecting requests that DCP holds) keeps
# every cell apart (the TTFT cells ran together at 30 characters), and the rejection
# reasons printed agree with the JSON. Requests of 1M+ tokens exceed K2.x's 256k window,
# so the case runs a copy of the deployment without context_window (TP's 1.2M-token
# pool rejects them, DCP's 9.7M holds them).
sed '/context_window/d' "$root/configs/kimi-k2-8xb200.yaml" >"$tmp/kimi-nowindow.yaml"
wide="--trace $excerpt --simulate --length-scale 40 --time-scale 0.01 --quiet"
# shellcheck disable=SC2086 # $wide is a list of arguments
"$dcp_run" replay "$tmp/kimi-nowindow.yaml" $wide --plot "$tmp/wide.svg" >"$tmp/wide.txt" 2>"$tmp/err" ||
    fail "wide text: $(cat "$tmp/err")"
# shellcheck disable=SC2086
"$dcp_run" replay "$tmp/kimi-nowindow.yaml" $wide --json >"$tmp/wide.json" 2>"$tmp/err" ||
    fail "wide json: $(cat "$tmp/err")"
python3 - "$tmp/wide.txt" "$tmp/wide.json" <<'PY' || fail "text table: $(cat "$tmp/wide.txt")"
import json, re, sys
lines = open(sys.argv[1]).read().split("\n")
lay = json.load(open(sys.argv[2]))["layouts"]
top = lines.index("") + 1          # the table follows the first blank line
end = lines.index("", top)
head, rows = lines[top], lines[top + 1:end]
cells = lambda l: re.split(r" {2,}", l.strip())
assert cells(head) == ["TP baseline (dcp=1)", "DCP (dcp=8)"], head
table = {}
for l in rows:
    c = cells(l)
    assert len(c) == 1 + len(lay), "cells run together: %r" % l
    table[c[0]] = c[1:]
ttft = table["TTFT p50 / p90 / p99"]
assert max(map(len, ttft)) >= 30, ttft   # the case is wide enough to have glued
assert table["rejected (never fit)"] == [str(x["rejected"]) for x in lay]
assert table["reason: pool / context"] == ["%d / %d" % (x["rejected_pool"], x["rejected_context"]) for x in lay]
assert lay[0]["rejected_pool"] > 0 and lay[1]["rejected"] == 0, lay
print("text table ok")
PY

# The plots' text (the excerpt's and the wide one's, with 5-digit times): every label
# inside the viewBox and clear of every other (from an estimated width: 0.6 font sizes a
# character); bar labels give their value to 3 significant digits (8.56 was "9").
python3 - "$tmp/plot.svg" "$tmp/wide.svg" <<'PY' || fail "plot text"
import sys
import xml.etree.ElementTree as ET
for path in sys.argv[1:]:
    svg = ET.parse(path).getroot()
    vx, vy, vw, vh = map(float, svg.get("viewBox").split())
    boxes = []
    for t in svg.iter("{http://www.w3.org/2000/svg}text"):
        s, fs = t.text or "", float(t.get("font-size"))
        x, y, w = float(t.get("x")), float(t.get("y")), 0.6 * fs * len(t.text or "")
        x0 = {"start": x, "middle": x - w / 2, "end": x - w}[t.get("text-anchor", "start")]
        b = (x0, y - 0.75 * fs, x0 + w, y + 0.25 * fs, s)
        assert vx <= b[0] and b[2] <= vx + vw and vy <= b[1] and b[3] <= vy + vh, (path, "outside", b)
        for o in boxes:
            assert b[2] <= o[0] or o[2] <= b[0] or b[3] <= o[1] or o[3] <= b[1], (path, "overlap", b, o)
        boxes.append(b)
    ids = {e.get("id"): e for e in svg.iter() if e.get("id")}
    bars = [k for k in ids if k.startswith("bar-")]
    assert len(bars) == 8, bars
    for k in bars:
        v, label = float(ids[k].get("data-value")), ids["label-" + k[4:]].text
        assert abs(float(label.replace(",", "")) - v) <= 0.005 * v, (path, k, v, label)
    if path == sys.argv[-1]:  # the wide plot's last time label ("25,000 s") sits at the right edge
        assert max(b[2] for b in boxes if b[4].endswith(",000 s")) >= vx + vw - 60, "no wide label at the edge"
print("plot text ok")
PY

# The model's qualitative prediction (docs/serving.md): on the synthetic agentic trace,
# DCP loses at low load and short contexts (its collectives add to TPOT at equal
# throughput) and wins at high load and long contexts (more than 1.5x the throughput).
kimi=$root/configs/kimi-k2-8xb200.yaml
"$dcp_run" replay "$kimi" --synthetic 500 --length-scale 0.03 --rate 0.5 --simulate --max-running 1024 --json \
    --quiet >"$tmp/short.json" 2>"$tmp/err" || fail "short contexts: $(cat "$tmp/err")"
"$dcp_run" replay "$kimi" --synthetic 500 --rate 8 --simulate --max-running 1024 --json --quiet \
    >"$tmp/long.json" 2>"$tmp/err" || fail "long contexts: $(cat "$tmp/err")"
python3 - "$tmp/short.json" "$tmp/long.json" <<'PY' || fail "crossover"
import json, sys
(st, sd), (lt, ld) = ([x for x in json.load(open(p))["layouts"]] for p in sys.argv[1:3])
assert sd["tpot_p50"] > 1.3 * st["tpot_p50"], (st["tpot_p50"], sd["tpot_p50"])
assert sd["output_tok_s_per_gpu"] <= 1.01 * st["output_tok_s_per_gpu"]
assert ld["output_tok_s_per_gpu"] > 1.5 * lt["output_tok_s_per_gpu"], (lt["output_tok_s_per_gpu"], ld["output_tok_s_per_gpu"])
assert ld["concurrency_mean"] > 2 * lt["concurrency_mean"]
print("crossover ok")
PY

# Idle time counts as nothing running: two short requests 1,000 s apart keep the
# time-weighted mean concurrency near 0 (it was ~0.5 when a gap took the next step's value).
printf '{"timestamp": 0, "input_length": 1000, "output_length": 10}\n{"timestamp": 1000000, "input_length": 1000, "output_length": 10}\n' >"$tmp/gap.jsonl"
"$dcp_run" replay "$kimi" --trace "$tmp/gap.jsonl" --simulate --json --quiet >"$tmp/gap.json" 2>"$tmp/err" ||
    fail "gap: $(cat "$tmp/err")"
python3 - "$tmp/gap.json" <<'PY' || fail "idle gaps in the mean concurrency"
import json, sys
for x in json.load(open(sys.argv[1]))["layouts"]:
    assert x["completed"] == 2 and x["makespan_seconds"] > 999, x
    assert x["concurrency_mean"] < 0.01 and x["concurrency_max"] == 1, x
PY

# Closed loop: never more than N requests in the system, all of them served.
"$dcp_run" replay "$kimi" --trace "$excerpt" --clients 4 --simulate --json --quiet >"$tmp/closed.json" 2>"$tmp/err" ||
    fail "clients: $(cat "$tmp/err")"
python3 - "$tmp/closed.json" <<'PY' || fail "closed loop"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["clients"] == 4
for x in d["layouts"]:
    assert x["completed"] == 200 and 1 <= x["concurrency_max"] <= 4, x
PY

run_exec() { # OUT ARGS...: execute mode on the default deployment (host backend)
    out=$1
    shift
    "$dcp_run" replay --trace "$small" --length-scale 0.1 --limit 12 --watermark 0 --backend host --json \
        --quiet "$@" >"$out" 2>"$tmp/err" || fail "execute $*: $(cat "$tmp/err")"
}
run_exec "$tmp/tight.json" --kv-mb 3 --clients 12 --mtp 2 --mtp-acceptance 0.6
run_exec "$tmp/ample.json" --kv-mb 40 --no-prefix-cache
python3 - "$tmp/tight.json" "$tmp/ample.json" <<'PY' || fail "execute output"
import json, sys
tight, ample = (json.load(open(p)) for p in sys.argv[1:3])
pre = cached = 0
for d in (tight, ample):
    assert d["simulate"] is False
    for x in d["layouts"]:
        assert x["completed"] == x["requests"] == 12, x
        assert x["check"]["pass"] is True and x["check"]["rows"] >= 12, x["check"]
for a, b in zip(tight["layouts"], ample["layouts"]):
    assert a["name"] == b["name"]
    assert a["check"]["digest"] == b["check"]["digest"], (a["name"], a["check"], b["check"])
    pre += a["check"]["rows_preempted"]
    cached += a["check"]["rows_cached"]
    assert b["preemptions"] == 0 and b["prefix_hit_rate"] == 0
    assert 0 < a["mtp_accepted"] < a["mtp_drafted"], a
assert pre > 0, "no preempted request was checked"
assert cached > 0, "no request served from the prefix cache was checked"
print("execute ok: %d checked rows of preempted requests, %d of cached ones" % (pre, cached))
PY

# The shipped Mooncake excerpt executed (as docs/serving.md runs it, first 20 requests):
# every request completes in both layouts and the check passes, with a row for every
# request that decodes (more than one output token).
# Without --quiet, but stderr is a file: no progress line in it.
excerpt_exec="--trace $excerpt --length-scale 0.05 --output-scale 0.1 --limit 20 --backend host --json"
# shellcheck disable=SC2086 # a list of arguments
"$dcp_run" replay $excerpt_exec >"$tmp/mooncake.json" 2>"$tmp/err" || fail "execute the excerpt: $(cat "$tmp/err")"
grep -q "replay TP baseline" "$tmp/err" && fail "progress line written to a file: $(cat "$tmp/err")"
[ -s "$tmp/err" ] && fail "execute the excerpt wrote to stderr: $(cat "$tmp/err")"
python3 - "$tmp/mooncake.json" "$excerpt" <<'PY' || fail "executed excerpt"
import json, math, sys
d = json.load(open(sys.argv[1]))
outs = [json.loads(l)["output_length"] for l in open(sys.argv[2]).readlines()[:20]]
decoding = sum(max(1, math.floor(o * 0.1 + 0.5)) > 1 for o in outs)
assert d["simulate"] is False and d["requests"] == 20 and decoding > 10, (d["requests"], decoding)
assert [x["name"] for x in d["layouts"]] == ["tp_baseline", "dcp"]
for x in d["layouts"]:
    assert x["completed"] == x["requests"] == 20 and x["rejected"] == 0, x
    assert x["check"]["pass"] is True and x["check"]["rows"] >= decoding, (x["name"], x["check"], decoding)
print("executed excerpt ok: %s checked rows" % " / ".join(str(x["check"]["rows"]) for x in d["layouts"]))
PY

# The progress line on a terminal: the same run with stderr on a pseudo-terminal (script,
# from util-linux) shows "replay <layout>: done/total (..%" for each layout that ran
# long enough to draw it (it first draws after 0.5 s), and the results do not change.
if command -v script >/dev/null 2>&1; then
    script -qec "'$dcp_run' replay $excerpt_exec >'$tmp/tty.json'" /dev/null </dev/null >"$tmp/tty.out" 2>&1 ||
        fail "execute on a terminal: $(cat "$tmp/tty.out")"
    python3 - "$tmp/tty.json" "$tmp/tty.out" "$tmp/mooncake.json" <<'PY' || fail "progress line"
import json, re, sys
d, term, ref = json.load(open(sys.argv[1])), open(sys.argv[2], errors="replace").read(), json.load(open(sys.argv[3]))
shown = 0
for x, r in zip(d["layouts"], ref["layouts"]):
    assert x["check"]["digest"] == r["check"]["digest"] and x["completed"] == 20, (x, r)
    label = "TP baseline" if x["dcp"] == 1 else "DCP"
    if x["wall_seconds"] >= 1.0:
        assert re.search(r"replay %s: \d+/20 \(\d+%%" % label, term), (label, x["wall_seconds"], term)
        shown += 1
assert "\033[K" not in term or term.rstrip("\r\n").endswith("\033[K"), "progress line not cleared: %r" % term[-80:]
print("progress line ok (%d of %d layouts ran long enough to show it)" % (shown, len(d["layouts"])))
PY
else
    echo "script (util-linux) not found: progress line on a terminal not checked"
fi

# Bad traces: the reason with its line, nothing on stdout.
head -2 "$excerpt" >"$tmp/bad.jsonl"
echo '{"timestamp": 99000, "input_length": 10}' >>"$tmp/bad.jsonl"
"$dcp_run" replay --trace "$tmp/bad.jsonl" --simulate --quiet >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "bad trace: exit status"
grep -q "bad.jsonl:3: missing field output_length" "$tmp/err" || fail "bad trace: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "bad trace wrote to stdout"
mkfifo "$tmp/fifo"
timeout 20 "$dcp_run" replay --trace "$tmp/fifo" --simulate --quiet >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "FIFO: exit status"
grep -q "not a regular file" "$tmp/err" || fail "FIFO: $(cat "$tmp/err")"
"$dcp_run" replay --simulate >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "no trace: exit status"
"$dcp_run" replay --trace "$excerpt" --length-scale -1 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "negative scale: exit status"
echo "ok"
