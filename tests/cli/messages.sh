#!/bin/sh
# messages.sh DCP_RUN CONFIG HAVE_KERNELS: what dcp-run says when things go wrong, and what
# it loaded when they go right. The test environment points DCP_CUDA_LIBRARY and
# DCP_NCCL_LIBRARY at the test doubles.
#   DCP_CUDA_LIBRARY / DCP_NCCL_LIBRARY naming a missing file, a non-library or the wrong
#     library: the message names the file tried, the variable it came from and the
#     dynamic linker's reason; never "libcuda.so.1 not found"; the layout is named in
#     words ("TP baseline (dcp=1)"), not a bare "dcp=1:";
#   success on the CUDA backend: text and --json show the driver and NCCL files loaded,
#     with their versions;
#   the CPU backend out of memory (an address-space limit): the message suggests
#     --kv-mb with a value, and that value runs;
#   bench: a failing case does not stop the others (its row says FAILED, exit 1), and
#     when every case fails no empty table is printed;
#   --json with a file name that is not UTF-8 (byte 0xff): still valid JSON.
set -u
dcp_run=$1
config=$2
have_kernels=$3
. "$(dirname "$0")/common.sh"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
fake_cuda=${DCP_CUDA_LIBRARY:?the test environment sets DCP_CUDA_LIBRARY}
fake_nccl=${DCP_NCCL_LIBRARY:?the test environment sets DCP_NCCL_LIBRARY}

# --- JSON with a file name in no UTF-8 -------------------------------------------------
odd=$tmp/$(printf 'dep\377loy').yaml
cp "$config" "$odd"
"$dcp_run" plan --json "$odd" >"$tmp/plan.json" 2>"$tmp/err" || fail "plan --json on a 0xff name: $(cat "$tmp/err")"
"$dcp_run" run --json --quiet --backend host --steps 1 --requests 1 "$odd" >"$tmp/run.json" 2>"$tmp/err" ||
    fail "run --json on a 0xff name: $(cat "$tmp/err")"
python3 - "$tmp/plan.json" "$tmp/run.json" <<'PY' || fail "--json with a non-UTF-8 file name is not valid JSON"
import json, sys
for name in sys.argv[1:]:
    d = json.loads(open(name, "rb").read().decode("utf-8"))   # strict: a raw 0xff fails here
    assert "dep\ufffdloy.yaml" in json.dumps(d, ensure_ascii=False), name
PY

# --- the CPU backend out of memory suggests --kv-mb --------------------------------------
sed 's/^\( *memory_gb:\).*/\1 16/' "$config" >"$tmp/big.yaml"   # 12 GB of KV per rank
if (ulimit -v 1500000 && "$dcp_run" --version) >/dev/null 2>&1; then
    (ulimit -v 1500000; exec "$dcp_run" run --quiet --backend host "$tmp/big.yaml") >"$tmp/out" 2>"$tmp/err"
    status=$?
    [ "$status" -eq 1 ] || fail "run in 1.5 GB of address space exited $status: $(cat "$tmp/err")"
    mb=$(sed -n 's/.*e\.g\. --kv-mb \([0-9][0-9]*\).*/\1/p' "$tmp/err")
    [ -n "$mb" ] || fail "out of memory: no --kv-mb suggestion: $(cat "$tmp/err")"
    grep -q 'runtime.host.memory_mb' "$tmp/err" || fail "out of memory: runtime.host.memory_mb not named: $(cat "$tmp/err")"
    grep -q 'TP baseline (dcp=1): ' "$tmp/err" || fail "the layout is not named in words: $(cat "$tmp/err")"
    (ulimit -v 1500000; exec "$dcp_run" run --quiet --backend host --kv-mb "$mb" --steps 1 --requests 1 \
        "$tmp/big.yaml") >"$tmp/out" 2>"$tmp/err" || fail "the suggested --kv-mb $mb does not run: $(cat "$tmp/err")"
else
    echo "no address-space limit here (sanitizer?): --kv-mb suggestion not checked"
fi

# --- bench: a failing case among others, and every case failing -------------------------
"$dcp_run" bench --backend host --contexts 256,1099511627776 --repeat 1 --threads 1 --quiet \
    >"$tmp/bench" 2>"$tmp/err"
status=$?
cat "$tmp/bench"
[ "$status" -eq 1 ] || fail "bench with failing cases exited $status"
[ "$(grep -c 'FAILED' "$tmp/bench")" -eq 3 ] || fail "bench: not 3 FAILED rows"
[ "$(grep -cE '^(gqa|mla) +[0-9]+ +256 ' "$tmp/bench")" -eq 3 ] || fail "bench: the 256-token cases did not all run"
grep -q '3 of 6 cases failed' "$tmp/err" || fail "bench: no summary on stderr: $(cat "$tmp/err")"
DCP_CUDA_LIBRARY=$tmp/missing.so "$dcp_run" bench --backend cuda --contexts 256 --repeat 1 --quiet \
    >"$tmp/bench" 2>"$tmp/err"
[ $? -eq 1 ] || fail "bench with every case failing did not exit 1"
[ -s "$tmp/bench" ] && fail "bench printed a table of no case: $(cat "$tmp/bench")"
[ "$(grep -c 'h=.* L=256: ' "$tmp/err")" -eq 3 ] || fail "bench: not every case reported: $(cat "$tmp/err")"

[ "$have_kernels" = 1 ] || { echo "ok (no CUDA kernels built: loader messages not checked)"; exit 0; }

# --- DCP_CUDA_LIBRARY / DCP_NCCL_LIBRARY naming a bad file --------------------------------
echo "not a library" >"$tmp/text.so"
for lib in "$tmp/missing.so" "$tmp/text.so" "$fake_nccl"; do
    DCP_CUDA_LIBRARY=$lib "$dcp_run" run --quiet --backend cuda --steps 1 >"$tmp/out" 2>"$tmp/err"
    [ $? -eq 1 ] || fail "DCP_CUDA_LIBRARY=$lib: run did not exit 1"
    cat "$tmp/err"
    grep -q -F "$lib" "$tmp/err" || fail "DCP_CUDA_LIBRARY=$lib: the file is not named"
    grep -q 'named by DCP_CUDA_LIBRARY' "$tmp/err" || fail "DCP_CUDA_LIBRARY=$lib: the variable is not named"
    grep -q 'not found' "$tmp/err" && fail "DCP_CUDA_LIBRARY=$lib: says 'not found'"
    grep -q 'run: dcp=' "$tmp/err" && fail "a bare 'dcp=' prefix"
    grep -q 'TP baseline (dcp=1): ' "$tmp/err" || fail "the layout is not named in words"
done
grep -q 'cuGetProcAddress' "$tmp/err" || fail "the wrong library: no reason given"
DCP_CUDA_LIBRARY=$tmp/missing.so "$dcp_run" run --quiet --backend cuda >/dev/null 2>"$tmp/err"
grep -q 'No such file' "$tmp/err" || fail "a missing file: no dlopen reason: $(cat "$tmp/err")"
[ "$(grep -o -F "$tmp/missing.so" "$tmp/err" | wc -l)" -eq 1 ] || fail "the file is named more than once"
DCP_NCCL_LIBRARY=$tmp/text.so FAKE_CUDA_DEVICES=4 "$dcp_run" run --quiet --backend cuda --steps 1 --requests 1 \
    >/dev/null 2>"$tmp/err"
cat "$tmp/err"
grep -q "DCP layout (dcp=4): .*cannot load NCCL $tmp/text.so (named by DCP_NCCL_LIBRARY)" "$tmp/err" ||
    fail "DCP_NCCL_LIBRARY naming a text file: $(cat "$tmp/err")"

# --- success: which driver and NCCL were loaded ------------------------------------------
FAKE_CUDA_DEVICES=4 "$dcp_run" run --quiet --backend cuda --steps 1 --requests 1 >"$tmp/out" 2>"$tmp/err" ||
    fail "run on the doubles: $(cat "$tmp/err")"
grep -q -F "CUDA driver 13.0 ($fake_cuda)" "$tmp/out" || fail "text: no driver file: $(cat "$tmp/out")"
grep -q -F "NCCL 2.28.9 ($fake_nccl)" "$tmp/out" || fail "text: no NCCL file: $(cat "$tmp/out")"
FAKE_CUDA_DEVICES=4 "$dcp_run" run --json --quiet --backend cuda --steps 1 --requests 1 >"$tmp/json" 2>"$tmp/err" ||
    fail "run --json on the doubles: $(cat "$tmp/err")"
python3 - "$tmp/json" "$fake_cuda" "$fake_nccl" <<'PY' || fail "--json: the loaded files"
import json, sys
d = json.load(open(sys.argv[1]))
libs = {x["name"]: x["backend_libraries"] for x in d["layouts"]}
for name, text in libs.items():
    assert "CUDA driver 13.0 (%s)" % sys.argv[2] in text, (name, text)
assert "NCCL 2.28.9 (%s)" % sys.argv[3] in libs["dcp"], libs
assert "NCCL not loaded" in libs["tp_baseline"], libs
PY
echo ok
