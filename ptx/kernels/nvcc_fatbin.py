#!/usr/bin/env python3
"""Compiles the kernels into one fatbin and checks ptxas's resource report.

nvcc builds SASS for every architecture in --archs (an "a" suffix, 90a, adds the
architecture-specific sm_90a target beside the others) plus PTX for the newest, with
nvcc's own fatbin compression off (the library compresses the whole image with
zstd). ptxas runs verbose; its per-entry report (registers, stack frame, spills,
static shared memory) is written as a table to --report and printed, and the step
fails when any entry of any target spills or uses local memory.

--toolkit-version prints the CUDA release of --nvcc the way cuDriverGetVersion
encodes one (1000 * major + 10 * minor: 13000 for 13.0) and compiles nothing: the
build records it in the kernel registry, so the library can refuse a driver too
old for the fatbin (loader/embedded.h).
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
RELEASE = re.compile(r"release (\d+)\.(\d+)")
LMEM_WARNING = re.compile(r"ptxas warning : (Local memory used|Registers are spilled)")


ARCH = re.compile(r"^(\d+)(a?)$")


def parse_archs(text):
    """kernel_archs ("80,90,90a,100") -> sorted unique ["80", "90", "90a", "100"]. An "a" suffix
    names an architecture-specific target (sm_90a: wgmma and setmaxnreg, runs on 9.0 only),
    built beside the plain ones named; ValueError on anything else."""
    out = set()
    for a in text.split(","):
        a = a.strip()
        if not a:
            continue
        m = ARCH.match(a)
        if not m or int(m.group(1)) < 80:
            raise ValueError(f'kernel_archs: "{a}" is not an SM number >= 80, optionally with an "a" suffix')
        out.add(a)
    if not out:
        raise ValueError("kernel_archs is empty")
    return sorted(out, key=lambda a: (int(a.rstrip("a")), a.endswith("a")))


def ptx_arch(archs):
    """PTX goes with the newest number, without a suffix (compute_90a PTX would only JIT on 9.0)."""
    return str(max(int(a.rstrip("a")) for a in archs))


def targets(archs):
    """The registry's targets string: sm_<a> for each, then the PTX (dcp-embed, loader/embedded.h)."""
    return ",".join([f"sm_{a}" for a in archs] + [f"compute_{ptx_arch(archs)}"])


def nvcc_command(args):
    archs = parse_archs(args.archs)
    cmd = [args.nvcc, "-fatbin", "-O3", "-std=c++17", "--compress-mode=none",
           "-Xptxas", "-v,-warn-spills,-warn-lmem-usage", "--threads", str(args.threads),
           "-o", args.out]
    for a in archs:
        cmd += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    newest = ptx_arch(archs)
    cmd += ["-gencode", f"arch=compute_{newest},code=compute_{newest}"]
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
    for r in sorted(rows, key=lambda r: (int(r[0][3:].rstrip("a")), r[0].endswith("a"), r[1])):
        out.append("%-7s %-30s %4d %6d %6d %6d %6d" % r)
    return "\n".join(out) + "\n"


def toolkit_version(nvcc):
    """The release of nvcc (nvcc --version: "release 13.0, V13.0.88") as 13000; None if unknown."""
    proc = subprocess.run([nvcc, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = RELEASE.search(proc.stdout) if proc.returncode == 0 else None
    return 1000 * int(m.group(1)) + 10 * int(m.group(2)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--toolkit-version", action="store_true",
                    help="print the CUDA release of --nvcc as 1000*major+10*minor and exit")
    ap.add_argument("--archs", help="comma-separated SM numbers, e.g. 80,90,100 (90a: sm_90a beside them)")
    ap.add_argument("--targets", metavar="ARCHS", help="print the registry's targets string for ARCHS and exit")
    ap.add_argument("--dry-run", action="store_true", help="print the nvcc command instead of running it")
    ap.add_argument("--out")
    ap.add_argument("--report")
    ap.add_argument("--depfile")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("source", nargs="?")
    args = ap.parse_args()
    try:
        return run(ap, args)
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        return 1


def run(ap, args):
    if args.toolkit_version:
        v = toolkit_version(args.nvcc)
        if v is None:
            sys.stderr.write(f"error: cannot read the CUDA release from {args.nvcc} --version\n")
            return 1
        print(v)
        return 0
    if args.targets is not None:
        print(targets(parse_archs(args.targets)))
        return 0
    if not (args.archs and args.out and args.report and args.source):
        ap.error("--archs, --out, --report and the source are required")
    if args.dry_run:
        print(" ".join(nvcc_command(args)))
        return 0

    proc = subprocess.run(nvcc_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        return proc.returncode
    rows = parse_report(proc.stdout)
    report = format_report(rows, parse_archs(args.archs))
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
