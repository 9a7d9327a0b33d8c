#!/bin/sh
# bench_cli.sh DCP_RUN: `dcp-run bench` on the host backend, scaled down (256-token
# contexts, 2 runs). Its JSON must give, for every case, the read-only stream as
# the bandwidth reference with a ratio that is attention / stream, and the FMA
# loop of the widest ISA with its flops ratio; the text table must name both.
# "Widest" is checked against /proc/cpuinfo: avx512f when the CPU has it, else
# avx2+fma when it has both, else scalar (not checked without a flags line).
# DCP_CPU_ISA=baseline caps the CPU attention kernel: the backend line says so.
set -u
dcp_run=$1
. "$(dirname "$0")/common.sh"

"$dcp_run" bench --backend host --contexts 256 --repeat 2 --threads 2 --quiet --json \
    >"$tmp/json" 2>"$tmp/err"
status=$?
cat "$tmp/json"
[ "$status" -eq 0 ] || fail "bench --json exited $status: $(cat "$tmp/err")"

# The FMA loop bench must pick on this CPU ("": unknown here, any is accepted).
want_isa=
flags=$(grep -m1 -E '^(flags|Features)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | cut -d: -f2)
if [ -n "$flags" ]; then
    case " $flags " in
        *" avx512f "*) want_isa=avx512f ;;
        *" avx2 "*" fma "* | *" fma "*" avx2 "*) want_isa=avx2+fma ;;
        *) want_isa=scalar ;;
    esac
fi
echo "widest FMA ISA by /proc/cpuinfo: ${want_isa:-unknown}"

command -v python3 >/dev/null || { echo "python3 not found: JSON not checked"; exit 77; }
python3 - "$tmp/json" "$want_isa" <<'PY' || fail "JSON output of bench"
import json, math, sys

with open(sys.argv[1]) as f:
    d = json.load(f)
rows = d["results"]
assert [(r["kind"], r["heads"]) for r in rows] == [("gqa", 8), ("mla", 16), ("mla", 128)], rows
for r in rows:
    assert r["backend"].startswith("host "), r["backend"]
    assert "attention kernel " in r["backend"], r["backend"]
    assert r["bandwidth_reference"] == "read", r
    assert r["reference_gbps"] > 0 and r["attention_gbps"] > 0, r
    assert math.isclose(r["bandwidth_ratio"], r["attention_gbps"] / r["reference_gbps"], rel_tol=1e-9), r
    assert r["fma_isa"] in ("avx512f", "avx2+fma", "scalar"), r
    assert sys.argv[2] in ("", r["fma_isa"]), (sys.argv[2], r)  # the widest this CPU has
    assert r["fma_gflops"] > 0, r
    assert math.isclose(r["flops_ratio"], r["attention_gflops"] / r["fma_gflops"], rel_tol=1e-9), r
PY

DCP_CPU_ISA=baseline "$dcp_run" bench --backend host --contexts 256 --repeat 1 --threads 1 --quiet \
    >"$tmp/text" 2>"$tmp/err" ||
    fail "bench exited $?: $(cat "$tmp/err")"
cat "$tmp/text"
grep -q 'read GB/s' "$tmp/text" || fail "no read GB/s column"
grep -q 'attention kernel baseline)' "$tmp/text" || fail "DCP_CPU_ISA=baseline not in effect"
grep -q 'FMA GFLOP/s' "$tmp/text" || fail "no FMA GFLOP/s column"
[ "$(grep -cE '^(gqa|mla) ' "$tmp/text")" -eq 3 ] || fail "not 3 rows"
echo ok
