#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Write docs/conformance.md: the side-by-side comparison of peermem-rs with NVIDIA's nvidia-peermem.

    tests/selftests/conformance/report.py [--print] [--out FILE]

Made from files the test runs leave behind: the newest run (.build/run-*/results/<variant>/) whose
switch and split boots ran the conformance selftest, and the findings boot
(.build/conformance-findings/, made by findings.py). The tables themselves are written by
compare.awk in the VM; this adds the context, the durations, the findings' evidence, and a check
that every documented difference was seen at least once (exit 1 otherwise, or when a part is
missing or failed).
"""

import argparse
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = REPO / ".build"


def newest(variant, name):
    """The newest results directory of a boot of `variant` that ran the conformance test `name`."""
    found = sorted(BUILD.glob(f"run-*/results/{variant}/{name}.md"))
    return found[-1].parent if found else None


def guest_seconds(results):
    """(userspace after, done after) seconds of guest uptime, from the console log."""
    console = (results / "console.log").read_text(errors="replace") if (results / "console.log").exists() else ""
    up = re.search(r"peermem-vm: userspace after ([\d.]+) s", console)
    done = re.search(r"peermem-vm: done after ([\d.]+) s", console)
    return (float(up.group(1)) if up else None, float(done.group(1)) if done else None)


def conformance_window(results, test):
    """Seconds of guest time between the start of the conformance test and its end (kernel log)."""
    dmesg = (results / "dmesg").read_text(errors="replace") if (results / "dmesg").exists() else ""
    b = re.search(rf"\[\s*([\d.]+)\] peermem-ksft: begin conformance/{test}", dmesg)
    e = re.search(rf"\[\s*([\d.]+)\] peermem-ksft: end conformance/{test} rc=(\d+)", dmesg)
    if not b or not e:
        return None, None
    return float(e.group(1)) - float(b.group(1)), int(e.group(2))


def used_entries(dirs):
    """The line numbers of the `differences` entries the runs in `dirs` used."""
    used = set()
    for d in dirs:
        for f in d.glob("conformance-*.md.used"):
            used.update(int(line.split()[1]) for line in f.read_text().splitlines()
                        if line.startswith("used: "))
    return used


def source_of(results):
    """The source a run measured ("<sha> clean|dirty"), from its run directory."""
    for f in (results / "source", results.parent.parent / "source"):
        if f.exists():
            return f.read_text().strip()
    return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "conformance.md"))
    ap.add_argument("--print", action="store_true", help="print the report instead of writing it")
    a = ap.parse_args()

    ok = True
    parts = []
    dirs = []
    # (VM variant, the test's report, the test, the section's title): the host of current kernels
    # (no memory_peers) in both topologies, and the host of kernels before 6.6 where it matters.
    for variant, name, test, title in (
            ("switch", "conformance-switch", "conformance.sh", "VM variant `switch`"),
            ("split", "conformance-split", "conformance.sh", "VM variant `split`"),
            ("switch", "conformance-switch-memory_peers", "conformance_memory_peers.sh",
             "VM variant `switch`, a host with memory_peers (kernels before 6.6)")):
        d = newest(variant, name)
        if d is None:
            parts.append(f"## {title}\n\n**No run of this found** "
                         f"(`tests/run_tests.py --no-cargo --variants {variant} --tests {test}`).\n")
            ok = False
            continue
        if d not in dirs:
            dirs.append(d)
        up, done = guest_seconds(d)
        window, rc = conformance_window(d, test)
        summary = (d / f"{name}.md.summary").read_text().strip().splitlines()
        durations = next((s.lstrip("# ").strip() for s in summary if "durations" in s), "")
        head = [f"From `{d.relative_to(REPO)}`. The boot reached userspace after {up} s and ended "
                f"after {done} s (guest uptime); the conformance test took "
                f"{window:.0f} s" if window is not None else "?", ]
        if durations:
            head.append(f" ({durations.replace('durations: ', '')})")
        head.append(f"; {summary[0] if summary else ''}.")
        if rc not in (0, None):
            ok = False
            head.append(f" **The test failed (exit {rc}).**")
        body = (d / f"{name}.md").read_text()
        body = body.replace(f"## VM variant `{variant}`\n", "")
        parts.append(f"## {title}\n\n{''.join(head)}\n{body}")

    fdir = BUILD / "conformance-findings"
    if (fdir / "findings.md").exists():
        dirs.append(fdir)
        findings = (fdir / "findings.md").read_text()
        if (fdir / "conformance-findings.md").exists():
            findings += "\nThe findings scenarios side by side (from the same boot):\n\n"
            findings += (fdir / "conformance-findings.md").read_text().replace(
                "## VM variant `switch`\n", "")
        if "Not reproduced" in findings or "caused a splat too" in findings or "comparison failed" in findings:
            ok = False
    else:
        findings = ("**No findings boot found**: run `tests/selftests/conformance/findings.py` "
                    "(after `tests/run_tests.py --build-only`).\n")
        ok = False

    entries = []
    for n, line in enumerate((HERE / "differences").read_text().splitlines(), 1):
        f = line.split()
        if f and f[0] == "diff":
            entries.append((n, " ".join(f[1:5])))
    used = used_entries(dirs)
    unused = [f"line {n}: {e}" for n, e in entries if n not in used]
    sources = sorted({source_of(d) for d in dirs})
    if len(sources) != 1 or not sources[0].endswith(" clean"):
        ok = False

    text = f"""<!-- SPDX-License-Identifier: GPL-2.0 -->
<!-- Generated by tests/selftests/conformance/report.py on {time.strftime('%Y-%m-%d %H:%M')}; do not edit. -->
# Conformance with NVIDIA's nvidia-peermem

Measured on: {"; ".join(f"`{x}`" for x in sources)} (the commit of the runs below, and whether the
tree had changes not committed).

peermem-rs claims to be a drop-in replacement for NVIDIA's `nvidia-peermem`. The conformance
selftest (`tests/selftests/conformance/`) checks that claim by differential testing: the same
scenarios run, in one VM boot, first against NVIDIA's own `nvidia-peermem.ko` (driver 550, from
Debian's `nvidia-open-kernel-source`, built at test time against the stand-ins by
`tests/reference/build-nvidia-peermem.sh`), then against `peermem_rs.ko`, each time from freshly
loaded stand-ins. For every scenario it compares what a user of ib_core can observe: return codes,
the clients that took the memory, SG lists (DMA addresses relative to the GPU memory, and lengths),
the `memory_peers` statistics, whether and when an invalidation reached the host (state,
invalidation count, time relative to the cudaFree, `unmapped_by_invalidation`), the module's
reference count, every counter of the host and the NVIDIA stand-in (but time spent, and three of
the stand-in's own counts: `kernel_clients` and `user_clients`, read from pins and files compared
already, and the high-water mark `peak_page_mappings`), and every live object left behind. A difference fails the test unless an entry of `tests/selftests/conformance/differences`
states it: over scenarios it names (no globs, no wildcard values), the exact values of both modules
or peermem-rs's as nvidia-peermem's plus or minus a number, with its reason and the entry of
[differences.md](differences.md) that documents it. One entry per scenario and key; an
entry whose difference is not seen in a scenario it names fails that scenario too; and the
scenarios of each run are pinned in `tests/selftests/conformance/scenarios`.

**Like with like.** nvidia-peermem 550 has only `peerdirect_support`: it always registers an
invalidating `nv_mem` (asked first) and a persistent `nv_mem_nc`. peermem-rs does the same with
`persistent_api_support=0`, which is the configuration compared here; its default,
`persistent_api_support=1` (a single persistent `nv_mem`, the default of newer nvidia-peermem), has
no counterpart in 550 and is covered by the peermem selftests instead. Both run with
`peerdirect_support=0` and `1`, on a 5.x host (`ex_support=1`) and on a 4.9 host (`ex_support=0`).

**Not compared by design**: peermem-rs's debugfs statistics and its explanation lines in the kernel
log (nvidia-peermem has neither), and module names and version strings.

**Two peer-memory hosts.** The scenarios run on the host of the kernels GPU nodes run today (no
`memory_peers`: Linux 6.6 and later do not export `mm_kobj`, and MLNX_OFED/DOCA-OFED then creates
no sysfs directory and accepts a second client of the same name), and again, those where it shows
something more, on the host of kernels before 6.6 (`memory_peers` statistics, duplicate names
refused by the host).

Regenerate: `tests/run_tests.py --no-cargo --variants switch,split --tests conformance.sh,conformance_memory_peers.sh`, then
`tests/selftests/conformance/findings.py`, then `tests/selftests/conformance/report.py`.

{chr(10).join(parts)}
## Findings: where nvidia-peermem itself misbehaves

{findings}
"""
    if unused:
        text += ("\n## Documented differences not seen in these runs\n\n" +
                 "".join(f"- `{e}`\n" for e in unused))
        ok = False
    if a.print:
        sys.stdout.write(text)
    else:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"wrote {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
