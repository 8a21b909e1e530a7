#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The conformance scenarios under which NVIDIA's nvidia-peermem misbehaves (a kernel splat), in a
VM boot of their own: the findings of the differential test, with their evidence.

    tests/selftests/conformance/findings.py [--payload DIR]

`make check` fails any boot with a splat, so these scenarios are left out of nvidia-peermem's part
of the conformance run there (the `finding` lines of `differences`) and run here instead, against
both modules: nvidia-peermem's splat is expected and recorded, peermem-rs must have none. The
payload is the newest run's (`tests/run_tests.py --build-only` makes one). Everything lands in
.build/conformance-findings/: the boot's logs, the comparison (conformance-findings.md) and
findings.md, the evidence per finding, which report.py puts into docs/conformance.md.

Exit status 0 when every finding reproduced, peermem-rs caused no splat, and the two modules differed
only as documented.
"""

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "vm"))

import ktap  # noqa: E402
import vm    # noqa: E402

OUT = REPO / ".build" / "conformance-findings"
MARK = re.compile(r"conformance: conformance-findings against (\S+)")
PLAN = """\
set -u
export PEERMEM_MODULES=/payload/modules PEERMEM_VARIANT=switch
sh /payload/selftests/conformance/conformance.sh --findings
"""


def findings():
    """[(scenario, target, id, text)] from the `finding` lines of `differences`."""
    out = []
    for line in (HERE / "differences").read_text().splitlines():
        f = line.split(None, 4)
        if len(f) >= 4 and f[0] == "finding":
            out.append((f[1], f[2], f[3], f[4] if len(f) > 4 else ""))
    return out


def splats_by_target(dmesg):
    """{target: [lines of each splat]}: the kernel log after each target's start marker, cut into
    reports (a KASAN report runs from its 'BUG:' line to its closing '====' line)."""
    by = {}
    target = None
    current = None
    for line in dmesg.splitlines():
        m = MARK.search(line)
        if m:
            target = m.group(1)
            current = None
            continue
        if target is None:
            continue
        text = re.sub(r"^\[\s*\d+\.\d+\]\s?", "", line)
        if ktap.SPLAT.search(line) and current is None:
            current = [text]
            by.setdefault(target, []).append(current)
        elif current is not None:
            current.append(text)
            if text.startswith("=====") and len(current) > 1 or len(current) > 80:
                current = None
    return by


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payload", default=str(REPO / ".build" / "latest" / "payload"))
    ap.add_argument("--timeout", type=int, default=900)
    a = ap.parse_args()
    payload = Path(a.payload)
    if not (payload / "selftests" / "conformance" / "conformance").exists():
        raise SystemExit(f"no conformance selftest in {payload}: run tests/run_tests.py --build-only")
    kdir = vm.kernel_dir()
    accel, reason = vm.choose_accel(kdir)
    vm.log(f"findings boot: switch ({accel}: {reason})")
    res = vm.boot("switch", PLAN, payload, OUT, accel, a.timeout, kdir)
    # The payload's run says what source it was built from.
    source = payload.parent / "source"
    (OUT / "source").write_text(source.read_text() if source.exists() else "unknown\n")
    output = (OUT / "output").read_text(errors="replace") if (OUT / "output").exists() else ""
    dmesg = (OUT / "dmesg").read_text(errors="replace") if (OUT / "dmesg").exists() else res.console
    by = splats_by_target(dmesg)
    # The comparison itself must pass too: conformance.sh exits non-zero on an undocumented difference.
    ok = res.plan_rc == 0
    lines = [f"Findings boot: {accel}, whole boot {res.seconds:.0f} s; logs in "
             f"`{OUT.relative_to(REPO)}/`.", ""]
    if not ok:
        lines += [f"**The comparison failed** (the plan's exit status: {res.plan_rc}): see the "
                  "scenarios side by side below.", ""]
    for scenario, target, fid, text in findings():
        got = by.get(target, [])
        reproduced = bool(got)
        ok = ok and reproduced
        lines.append(f"### {fid}: {target}, scenario `{scenario}`")
        lines.append("")
        lines.append(text)
        lines.append("")
        if reproduced:
            lines.append(f"Reproduced: {len(got)} report(s) in the kernel log while the scenario ran "
                         f"against {target}. The first:")
            lines.append("")
            lines.append("```")
            lines.extend(got[0][:40])
            lines.append("```")
        else:
            lines.append(f"**Not reproduced** in this boot: no splat while the scenario ran against {target}.")
        lines.append("")
    clean = [t for t in by if t not in {f[1] for f in findings()}]
    for t in clean:
        ok = False
        lines.append(f"**{t} caused a splat too** (it must not):")
        lines.append("")
        lines.append("```")
        lines.extend(by[t][0][:40])
        lines.append("```")
        lines.append("")
    (OUT / "findings.md").write_text("\n".join(lines) + "\n")
    sys.stdout.write(output)
    print("\n".join(lines))
    vm.log(f"findings: {'as recorded' if ok else 'NOT as recorded'}; {OUT / 'findings.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
