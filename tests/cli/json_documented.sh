#!/bin/sh
# json_documented.sh DOCS SCHEMA COMMAND...: runs COMMAND (a dcp-run ... --json), and checks
# that its output is one JSON object whose "schema" is SCHEMA and whose every key, at any
# depth, is documented in DOCS (one file, or several joined by ':'): it appears there inside
# a `code span` (as `name`, or in a list such as `check{rows, pass}`). A key added to the
# output without its line in the documents fails here.
set -eu
doc=$1 schema=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" >"$out" || { echo "FAIL: $* exited $?" >&2; exit 1; }
python3 - "$doc" "$schema" "$out" <<'PY'
import json, re, sys
doc, schema, out = sys.argv[1:]
data = json.load(open(out))
if data.get("schema") != schema:
    sys.exit(f"FAIL: schema is {data.get('schema')!r}, expected {schema!r}")
spans = [s for d in doc.split(":") for s in re.findall(r"`([^`]*)`", open(d).read())]
documented = {w for s in spans for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", s)}
keys = set()
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            keys.add(k)
            walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
walk(data)
missing = sorted(keys - documented)
if missing:
    sys.exit(f"FAIL: keys of the output not documented in {doc}: {', '.join(missing)}")
print(f"ok: {len(keys)} keys, all documented in {doc}")
PY
