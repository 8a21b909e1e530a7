#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Checks of compare.awk's rules, as KTAP (a host script of tests/run_tests.py).

Each check runs compare.awk, with the busybox awk the test VM has (from the build root), on a small
run made up here: a pinned scenario list, a differences list, a differences page with its anchors, and the
observations of both modules. One rule each: a difference must be named and seen as stated; an
entry's difference must be seen; no glob, wildcard value or scenario outside the pinned list; one
entry per scenario and key of a host; the pinned list must be the run's; a scenario must run
against both modules.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "vm"))
sys.path.insert(0, str(HERE.parents[1]))

import ktap  # noqa: E402
import vm  # noqa: E402

BUSYBOX = vm.BUILD_ROOT / "bin" / "busybox"

SCENARIOS = """\
switch reg.one
switch reg.two
switch free.one
memory_peers reg.one
"""

DOC = '<a id="diff-a"></a> <a id="diff-b"></a>\n'

DIFFERENCES = """\
set regs reg.one reg.two
diff both @regs d.gpu.calls_get_pages 2 1 diff-a no probe pin
diff both reg.one,reg.two registered.bytes n n+65536 diff-a one extent more
diff both free.one d.gpu.stale_put_pages - 1 diff-b the work item's put_pages of no pin
"""


def obs(values):
    """An observation log: {scenario: {key: value}} in the order given."""
    lines = ["T start"]
    for s, kv in values.items():
        lines.append(f"S {s} a_scenario")
        lines += [f"O {s} {k} {v}" for k, v in kv.items()]
    return "\n".join(lines + ["E end"]) + "\n"


NV = {"reg.one": {"d.gpu.calls_get_pages": 2, "registered.bytes": 65536},
      "reg.two": {"d.gpu.calls_get_pages": 2, "registered.bytes": 131072},
      "free.one": {"rc": 0}}
RS = {"reg.one": {"d.gpu.calls_get_pages": 1, "registered.bytes": 131072},
      "reg.two": {"d.gpu.calls_get_pages": 1, "registered.bytes": 196608},
      "free.one": {"rc": 0, "d.gpu.stale_put_pages": 1}}


def changed(base, scenario, key, value):
    out = {s: dict(kv) for s, kv in base.items()}
    if value is None:
        out[scenario].pop(key, None)
    else:
        out.setdefault(scenario, {})[key] = value
    return out


def compare(tmp, nv=NV, rs=RS, differences=DIFFERENCES, scenarios=SCENARIOS, run="switch",
            host="no_memory_peers", nv_text=None):
    d = Path(tmp)
    (d / "scenarios").write_text(scenarios)
    (d / "differences").write_text(differences)
    (d / "differences.md").write_text(DOC)
    (d / "a.obs").write_text(nv_text if nv_text is not None else obs(nv))
    (d / "b.obs").write_text(obs(rs))
    res = subprocess.run([str(BUSYBOX), "awk", "-f", str(HERE / "compare.awk"), "-v", "variant=switch",
                          "-v", f"run={run}", "-v", f"host={host}", "-v", f"report={d / 'report.md'}",
                          "-v", "rca=0", "-v", "rcb=0", str(d / "scenarios"), str(d / "differences"),
                          str(d / "differences.md"), str(d / "a.obs"), str(d / "b.obs")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return res.returncode, res.stdout


def main():
    results = []
    if not BUSYBOX.exists():
        print("TAP version 13\n1..1")
        print(f"not ok 1 compare.awk: no busybox at {BUSYBOX}: run tests/infra/setup-toolchain.sh")
        return 1

    with tempfile.TemporaryDirectory() as tmp:
        def expect(desc, rc_want, needles=(), **kw):
            rc, out = compare(tmp, **kw)
            ok = rc == rc_want and all(n in out for n in needles)
            results.append((ok, desc, f"exit {rc}, output:\n{out}"))

        expect("the differences as stated pass", 0, ["ok 4 reg.one: different, documented (diff-a)",
                                                     "ok 6 free.one: different, documented (diff-b)"])
        expect("a difference no entry names fails its scenario", 1,
               ["not ok 6 free.one: not as documented: rc(nvidia_peermem=0,peermem_rs=-5: undocumented)"],
               rs=changed(RS, "free.one", "rc", -5))
        expect("one put_pages more than stated fails", 1,
               ["not ok 6 free.one: not as documented: d.gpu.stale_put_pages(nvidia_peermem=-,peermem_rs=2: "
                "line 4 states - -> 1)"],
               rs=changed(RS, "free.one", "d.gpu.stale_put_pages", 2))
        expect("a relation that does not hold fails", 1,
               ["not ok 5 reg.two: not as documented: registered.bytes(nvidia_peermem=131072,"
                "peermem_rs=262144: line 3 states n -> n+65536)"],
               rs=changed(RS, "reg.two", "registered.bytes", 262144))
        expect("an entry whose difference is not seen fails", 1,
               ["not ok 4 reg.one: not as documented: d.gpu.calls_get_pages(both 2: line 2 states 2 -> 1)"],
               rs=changed(RS, "reg.one", "d.gpu.calls_get_pages", 2))
        expect("a glob fails the list", 1, ["line 5: reg.* is not a scenario", "not ok 8 the differences list"],
               differences=DIFFERENCES + "diff both reg.* rc 0 -1 diff-a any\n")
        expect("a wildcard value fails the list", 1, ["line 5: no glob and no wildcard value", "not ok 8"],
               differences=DIFFERENCES + "diff both free.one rc * * diff-a any\n")
        expect("a scenario and key named twice for one host fail the list", 1,
               ["line 5: free.one d.gpu.stale_put_pages is named by line 4 too", "not ok 8"],
               differences=DIFFERENCES + "diff no_memory_peers free.one d.gpu.stale_put_pages - 2 diff-b again\n")
        expect("an entry of the other host does not apply", 1,
               ["not ok 6 free.one: not as documented: d.gpu.stale_put_pages(nvidia_peermem=-,peermem_rs=1: "
                "undocumented)"],
               differences=DIFFERENCES.replace("diff both free.one", "diff memory_peers free.one"))
        expect("an anchor that docs/differences.md does not have fails", 1,
               ["docs/differences.md has no entry #diff-c", "not ok 8"],
               differences=DIFFERENCES.replace("diff-b the work", "diff-c the work"))
        expect("a pinned scenario that did not run fails", 1,
               ["not ok 3 the scenarios are not those scenarios lists for switch: missing:free.one"],
               nv={k: v for k, v in NV.items() if k != "free.one"},
               rs={k: v for k, v in RS.items() if k != "free.one"})
        expect("a scenario the pinned list does not know fails", 1, ["unpinned:reg.three"],
               nv=dict(NV, **{"reg.three": {"rc": 0}}), rs=dict(RS, **{"reg.three": {"rc": 0}}))
        expect("a scenario run against one module only fails", 1,
               ["not ok 6 free.one: not run against nvidia_peermem"],
               nv_text=obs(NV).replace("S free.one a_scenario", "X free.one skipped"))
    return ktap.print_checks(results, "compare.awk")


if __name__ == "__main__":
    sys.exit(main())
