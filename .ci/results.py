#!/usr/bin/env python3
"""Sums Meson test logs (meson-logs/testlog*.json) into one verdict.

usage: results.py RUN=LOG... where RUN names the run (tests, asan, valgrind) and
LOG is its testlog JSON. Prints the failed and skipped tests by run, then, as the
last line, "N passed, N failed". A missing log (the build or the set-up failed
before any test ran) or an empty LOG (the run could not start) counts as one
failure. Exit status: 1 if anything failed.
"""
import json
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}  # exit 77: the suite needs hardware or a build option not present


def read_results(path):
    """The (name, result) of every test in a Meson JSON test log."""
    with open(path, encoding="utf-8") as f:
        return [(r["name"], r["result"]) for r in map(json.loads, f) if r]


def main(args):
    passed, failed, skipped = 0, [], []
    for arg in args:
        run, _, path = arg.partition("=")
        if not path:
            failed.append(f"{run}: did not run")
            continue
        try:
            results = read_results(path)
        except (OSError, ValueError) as e:
            failed.append(f"{run}: no test results ({path}: {e})")
            continue
        for name, result in results:
            if result in PASSED:
                passed += 1
            elif result in SKIPPED:
                skipped.append(f"{run}: {name}")
            else:
                failed.append(f"{run}: {name} ({result})")
    if failed:
        print("failed:")
        print("".join(f"  {f}\n" for f in failed), end="")
    if skipped:
        print(f"skipped ({len(skipped)}, not counted: exit 77, needs what this machine lacks):")
        print("".join(f"  {s}\n" for s in skipped), end="")
    print(f"{passed} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
