#!/usr/bin/env python3
"""Checks of tests/baseline.py itself, as KTAP (a host script of tests/run_tests.py).

Each check builds a small run (groups of cases as ktap.parse_ksft makes them), a baseline of it, and
one change that a whole make check must catch: a test dropped from a collection, a pass turned skip,
a skip with another reason, a test the baseline does not know, a boot that planned nothing; and that
an unchanged run, a failing test (reported by itself) and a changed duration pass.
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import baseline  # noqa: E402
import ktap  # noqa: E402

KSFT = """\
# TAP version 13
# 1..3
# ok 1 load
# ok 2 dma_addresses_go_through_the_iommu # SKIP no IOMMU translates the NIC's DMA in this VM variant
# ok 3 invalidate
ok 1 selftests: peermem: client_matrix.sh # time=100.7s
# ok 1 scenario.a
# ok 2 scenario.b
ok 2 selftests: conformance: conformance.sh # time=23.8s
"""


def run(ksft=KSFT, extra=()):
    cases = ktap.parse_ksft(ksft) + [ktap.Case(n, s, reason=r) for n, s, r in extra]
    return [ktap.Group("host: cargo test --workspace", [], [ktap.Case("logic::t1", "pass")]),
            ktap.Group("vm: switch", [], cases)]


EXPECTED = ["host: cargo test --workspace", "vm: switch"]


def verdict(groups):
    """The baseline group's cases: {group: (status, output)}."""
    g = baseline.check(groups, EXPECTED)
    return {c.name.split(" ran ")[0].removeprefix("baseline: "): (c.status, c.output + [c.reason]) for c in g.cases}


def main():
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        baseline.DIR = Path(tmp) / "baseline"
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        baseline.save(run(), run_dir / "leaves.json", True)
        baseline.write(run_dir)

        def expect(desc, groups, status, needle=None):
            v = verdict(groups)
            st, out = v["vm: switch"]
            ok = st == status and (needle is None or any(needle in line for line in out))
            results.append((ok, desc, f"got {st}: {out}"))

        expect("an unchanged run passes", run(), "pass")
        expect("a changed duration passes", run(KSFT.replace("time=100.7s", "time=3.1s")), "pass")
        expect("a test dropped from a collection fails", run(KSFT.replace("# ok 2 scenario.b\n", "")), "fail",
               "did not run: selftests: conformance: conformance.sh: scenario.b")
        expect("a pass turned skip fails",
               run(KSFT.replace("# ok 3 invalidate", "# ok 3 invalidate # SKIP no host")), "fail",
               "skipped, the baseline says it runs")
        expect("a skip for another reason fails",
               run(KSFT.replace("in this VM variant", "anywhere")), "fail", "skipped for another reason")
        expect("a test the baseline does not know fails",
               run(extra=[("vm switch: a new check", "pass", "")]), "fail", "not in the baseline (pass)")
        expect("a failing test is left to its own report",
               run(KSFT.replace("# ok 1 scenario.a", "# not ok 1 scenario.a")), "pass")
        v = verdict(run()[:1])
        results.append((v["vm: switch"][0] == "fail" and any("did not run" in line for line in v["vm: switch"][1]),
                        "a boot that planned nothing fails", f"got {v['vm: switch']}"))
        (baseline.DIR / "vm-gone.txt").write_text("pass\tx\n")
        v = verdict(run())
        results.append((v.get("vm-gone.txt belongs to a group of the run", ("pass",))[0] == "fail",
                        "a baseline file no group writes fails", f"got {v}"))
    return ktap.print_checks(results, "baseline")


if __name__ == "__main__":
    sys.exit(main())
