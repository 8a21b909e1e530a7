#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""What the NVIDIA P2P stand-in does to a client that uses its pointers wrongly, in a VM boot of
its own: each case of stale_use.c must make the kernel report what nvidia.ko would do there, a
use after free (KASAN) or a WARN.

    tests/selftests/nvidia_p2p_standin/stale_use.py [--payload DIR] [CASE...]

`make check` fails any boot with a splat, so these cases cannot run there. The payload is the
newest run's (`tests/run_tests.py --build-only` makes one). The boot's logs and report.md (each
case, what it expects, and the first report found while it ran) land in .build/stale-use/.

Exit status 0 when every case produced its expected report.
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

OUT = REPO / ".build" / "stale-use"

# case: (kind of report, a line that must be in it)
CASES = {
    "reentry_put_in_callback": ("WARNING:", "the RM API lock is already held by this task"),
    "peer_mismatch": ("WARNING:", "the peer the mapping was made for"),
    "put_persistent_on_non_persistent": ("WARNING:", "is a non-persistent page table"),
    "map_after_teardown": ("BUG: KASAN: slab-use-after-free", "nvidia_p2p_dma_map_pages"),
    "persistent_double_put": ("BUG: KASAN: slab-use-after-free", "nvidia_p2p_put_pages_persistent"),
    "unmap_after_teardown": ("BUG: KASAN: slab-use-after-free", "nvidia_p2p_dma_unmap_pages"),
    "dma_map_racing_teardown": ("BUG: KASAN: slab-use-after-free", "nvidia_p2p_dma_map_pages"),
}
BEGIN = re.compile(r"stale_use: begin (\S+)")
END = re.compile(r"stale_use: end (\S+)")


def plan(cases):
    lines = ["set -u", "export PEERMEM_MODULES=/payload/modules PEERMEM_VARIANT=switch",
             "cd /payload/selftests/nvidia_p2p_standin"]
    for c in cases:
        lines.append(f"echo '# case {c}'; ./stale_use -r stale.{c} 2>&1")
    return "\n".join(lines) + "\n"


def windows(dmesg):
    """{case: (all lines, [lines of each report])} of the kernel log between a case's begin and
    end. A WARN's own message comes just before its 'WARNING:' line, so matching looks at the
    whole window."""
    by, case, current = {}, None, None
    for line in dmesg.splitlines():
        text = re.sub(r"^\[\s*\d+\.\d+\]\s?", "", line)
        m = BEGIN.search(text)
        if m:
            case, current = m.group(1), None
            by.setdefault(case, ([], []))
            continue
        if END.search(text):
            case, current = None, None
            continue
        if case is None:
            continue
        by[case][0].append(text)
        if ktap.SPLAT.search(line) and current is None:
            current = [text]
            by[case][1].append(current)
        elif current is not None:
            current.append(text)
            if text.startswith("=====") and len(current) > 1 or text.startswith("---[ end trace") \
                    or len(current) > 60:
                current = None
    return by


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payload", default=str(REPO / ".build" / "latest" / "payload"))
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("cases", nargs="*", help=f"default: all ({', '.join(CASES)})")
    a = ap.parse_args()
    cases = a.cases or list(CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}")
    payload = Path(a.payload)
    if not (payload / "selftests" / "nvidia_p2p_standin" / "stale_use").exists():
        raise SystemExit(f"no stale_use in {payload}: run tests/run_tests.py --build-only")
    kdir = vm.kernel_dir()
    accel, reason = vm.choose_accel(kdir)
    vm.log(f"stale-use boot: switch ({accel}: {reason})")
    res = vm.boot("switch", plan(cases), payload, OUT, accel, a.timeout, kdir)
    output = (OUT / "output").read_text(errors="replace") if (OUT / "output").exists() else ""
    # The console, not dmesg: dozens of KASAN reports overflow the kernel's log buffer before the
    # guest can copy it out.
    console = (OUT / "console.log").read_text(errors="replace") if (OUT / "console.log").exists() \
        else res.console
    by = windows(console.replace("\r", ""))
    ok = True
    lines = [f"stale_use boot: {accel}, whole boot {res.seconds:.0f} s; logs in "
             f"`{OUT.relative_to(REPO)}/`.", ""]
    for c in cases:
        kind, needle = CASES[c]
        window, got = by.get(c, ([], []))
        match = [r for r in got if kind in r[0]] if any(needle in x for x in window) else []
        ok = ok and bool(match)
        said = [x for x in output.splitlines() if x.startswith(f"stale_use: {c} ")]
        lines.append(f"### {c}: {'as expected' if match else 'NOT AS EXPECTED'}")
        lines.append("")
        lines.append(f"Expected: `{kind}` mentioning `{needle}`. "
                     f"{len(got)} report(s) while the case ran. {' '.join(said)}")
        best = [r for r in match if any(needle in x for x in r)] or match or got
        if best:
            lines += ["", "```", *best[0][:30], "```"]
        lines.append("")
    if res.timed_out or res.plan_rc is None:
        ok = False
        lines.append("**The boot did not finish** (timed out or the guest died).")
    (OUT / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    vm.log(f"stale_use: {'every case as expected' if ok else 'NOT as expected'}; {OUT / 'report.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
