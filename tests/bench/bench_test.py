#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""make bench's own checks, as KTAP (a host script of tests/run_tests.py): the statistics, the block
order, the records, the validity gate and the report of bench.py (its CHECKS, on records made up
like the guest's), and bench.c's parsers (its `selftest`, built as the benchmark builds it). The
benchmark itself never runs in make check; what turns its records into figures does."""

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0]))
sys.path.insert(0, str(HERE.parents[0] / "vm"))

import bench  # noqa: E402
import ktap  # noqa: E402


def main():
    results = []
    for name, fn in bench.CHECKS:
        try:
            fn()
            results.append((True, name, ""))
        except AssertionError as e:
            results.append((False, name, repr(e)))
    # bench.c with the build root's compiler, as bench.py builds it for the guest.
    out_dir = bench.REPO / ".build" / "bench-test"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as t:
        exe = Path(t) / "bench"
        cc = subprocess.run([str(bench.REPO / "tests/infra/in-root"), "cc", "-static", "-O2", "-Wall", "-Werror",
                             f"-I{bench.REPO / 'tests/selftests/common'}", f"-I{bench.REPO / 'tests/standins/include'}",
                             "-o", str(exe), str(HERE / "bench.c"), "-lpthread"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if cc.returncode:
            results.append((False, "bench.c: its parsers (bench selftest)", f"cc failed:\n{cc.stdout}"))
        else:
            run = subprocess.run([str(exe), "selftest"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            results.append((run.returncode == 0 and "selftest: ok" in run.stdout,
                            "bench.c: its parsers (bench selftest)", run.stdout))
    return ktap.print_checks(results, "make bench")


if __name__ == "__main__":
    sys.exit(main())
