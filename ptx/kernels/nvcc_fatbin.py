#!/usr/bin/env python3
"""Compiles the kernels into one fatbin and checks ptxas's resource report.

nvcc builds SASS for every architecture in --archs plus PTX for the newest, with
nvcc's own fatbin compression off (the library compresses the whole image with
zstd). ptxas runs verbose; its per-entry report (registers, stack frame, spills,
static shared memory) is written as a table to --report and printed, and the step
fails when any entry of any target spills or uses local memory.
"""
import argparse
import os
import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+a?)'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(.*)")
SMEM = re.compile(r"(\d+) bytes smem")
LMEM_WARNING = re.compile(r"ptxas warning : (Local memory used|Registers are spilled)")


def nvcc_command(args):
    archs = sorted({int(a) for a in args.archs.split(",") if a.strip()})
    cmd = [args.nvcc, "-fatbin", "-O3", "-std=c++17", "--compress-mode=none",
           "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "--threads", str(args.threads),
           "-o", args.out]
    for a in archs:
        cmd += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    cmd += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]
    if args.depfile:
        cmd += ["-MD", "-MF", args.depfile]
    for inc in args.include:
        cmd += ["-I", inc]
    return cmd + [args.source]


def parse_report(text):
    """Rows (arch, entry, regs, stack, spill_stores, spill_loads, smem) from ptxas -v."""
    rows, entry, arch, frame = [], None, None, None
    for line in text.splitlines():
        m = ENTRY.search(line)
        if m:
            entry, arch, frame = m.group(1), m.group(2), None
            continue
        m = FRAME.search(line)
        if m and entry:
            frame = tuple(int(x) for x in m.groups())
            continue
        m = USED.search(line)
        if m and entry and frame:
            smem = SMEM.search(m.group(2))
            rows.append((arch, entry, int(m.group(1)), *frame, int(smem.group(1)) if smem else 0))
            entry = None
    return rows


def format_report(rows, archs):
    out = [f"# ptxas resource usage of dcp_kernels (SASS for sm_{', sm_'.join(archs)})",
           "# arch entry regs stack_bytes spill_store_bytes spill_load_bytes static_smem_bytes"]
    for r in sorted(rows, key=lambda r: (int(r[0][3:].rstrip("a")), r[1])):
        out.append("%-7s %-30s %4d %6d %6d %6d %6d" % r)
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--archs", required=True, help="comma-separated SM numbers, e.g. 80,90,100")
    ap.add_argument("--out", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--depfile")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("source")
    args = ap.parse_args()

    proc = subprocess.run(nvcc_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        return proc.returncode
    rows = parse_report(proc.stdout)
    archs = [str(a) for a in sorted({int(a) for a in args.archs.split(",") if a.strip()})]
    report = format_report(rows, archs)
    with open(args.report, "w") as f:
        f.write(report)
    sys.stdout.write(report)

    bad = [r for r in rows if r[3] or r[4] or r[5]]
    warnings = [l for l in proc.stdout.splitlines() if LMEM_WARNING.search(l)]
    if bad or warnings or not rows:
        for r in bad:
            sys.stdout.write(f"error: {r[1]} on {r[0]} uses local memory (stack {r[3]} B, "
                             f"spills {r[4]}/{r[5]} B)\n")
        for w in warnings:
            sys.stdout.write(w + "\n")
        if not rows:
            sys.stdout.write("error: ptxas printed no resource report\n")
        os.remove(args.out)  # so that the next build compiles again
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
