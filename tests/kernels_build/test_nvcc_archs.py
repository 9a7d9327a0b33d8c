#!/usr/bin/env python3
"""kernel_archs as ptx/kernels/nvcc_fatbin.py reads it (the build's only parser):
plain SM numbers and an "a" suffix (90a: the architecture-specific sm_90a, so a
wgmma entry can come later) beside them; the targets string the registry records
and the loader matches (loader/modules.c parse_target), and the nvcc -gencode
list, keep sm_90 SASS when both 90 and 90a are named and put PTX on the newest
plain number. Anything else is refused. Needs no nvcc (nothing is compiled)."""
import os
import subprocess
import sys

ROOT = os.environ.get("DCP_SOURCE_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "ptx", "kernels", "nvcc_fatbin.py")
failures = []


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, "--nvcc", "nvcc-not-run", *args], capture_output=True, text=True)


def expect(cond, what):
    if not cond:
        failures.append(what)


for archs, want in (("80,90,100", "sm_80,sm_90,sm_100,compute_100"),
                    ("100, 90a ,80,90", "sm_80,sm_90,sm_90a,sm_100,compute_100"),
                    ("90a", "sm_90a,compute_90"),
                    ("80,90a,90a", "sm_80,sm_90a,compute_90")):
    r = run("--targets", archs)
    expect(r.returncode == 0 and r.stdout.strip() == want, "targets %r: got %r (%s), want %r"
           % (archs, r.stdout.strip(), r.stderr.strip(), want))

r = run("--archs", "80,90,90a,100", "--out", "o", "--report", "r", "--dry-run", "x.cu")
gencode = [a for a in r.stdout.split() if a.startswith("arch=")]
expect(gencode == ["arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_90a,code=sm_90a",
                   "arch=compute_100,code=sm_100", "arch=compute_100,code=compute_100"],
       "gencode of 80,90,90a,100: %r" % gencode)

for bad in ("75", "90b", "sm_90", "9x", "", ",", "90aa"):
    r = run("--targets", bad)
    expect(r.returncode != 0 and "kernel_archs" in r.stderr, "%r accepted: %r %r" % (bad, r.stdout, r.stderr))

for f in failures:
    print("FAIL: " + f)
print("%d failures" % len(failures))
sys.exit(1 if failures else 0)
