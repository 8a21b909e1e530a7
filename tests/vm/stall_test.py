#!/usr/bin/env python3
"""Checks of the VM runner's stall watch (tests/vm/vm.py run_qemu_watched), as KTAP (a host script
of tests/run_tests.py).

A boot that goes silent before userspace is killed and booted once more; a boot that is silent
after userspace (a long test) is not, nor is a boot that keeps printing. QEMU is stood in for by a
shell script that prints what a boot prints, with the stall limit cut to one second.
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ktap  # noqa: E402
import vm  # noqa: E402

MARK = "peermem-vm: userspace after 1.5 s"


def watch(script, results):
    for old in results.glob("*"):
        old.unlink()
    return vm.run_qemu_watched(["sh", "-c", script], None, results, timeout=60, echo=False,
                               variant="stall-test")


def main():
    vm.STALL_SECONDS = 1
    results_ = []

    def check(desc, ok, why):
        results_.append((ok, desc, why))

    with tempfile.TemporaryDirectory() as tmp:
        res = Path(tmp)
        count = res.parent / f"{res.name}.count"

        t0 = time.monotonic()
        run, stalls, _ = watch("echo 'PCI: CLS 0 bytes, default 64'; sleep 30", res)
        took = time.monotonic() - t0
        check("a boot silent before userspace is killed and booted again, twice in all",
              run.stalled and run.timed_out is False and stalls == ["PCI: CLS 0 bytes, default 64"] * 2
              and took < 10 and (res / "console-stalled-1.log").exists()
              and not (res / "console-stalled-2.log").exists() and (res / "console.log").exists(),
              f"stalled={run.stalled} stalls={stalls} took {took:.1f} s, files {sorted(p.name for p in res.iterdir())}")

        # Stalls on its first run only: a counter outside the results directory, which is reused.
        script = (f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}; "
                  f"echo booting; [ $n -gt 0 ] || sleep 30; echo '{MARK}'; echo done")
        run, stalls, _ = watch(script, res)
        check("a boot that stalled once and then booted is the second boot's result",
              not run.stalled and not run.timed_out and run.userspace_s == 1.5 and stalls == ["booting"]
              and "done" in (res / "console.log").read_text()
              and "done" not in (res / "console-stalled-1.log").read_text(),
              f"stalled={run.stalled} userspace={run.userspace_s} stalls={stalls}")

        run, stalls, _ = watch(f"echo '{MARK}'; sleep 3; echo done", res)
        check("silence after userspace is not a stall",
              not run.stalled and not run.timed_out and stalls == [] and run.userspace_s == 1.5,
              f"stalled={run.stalled} stalls={stalls}")

        run, stalls, _ = watch(f"for i in 1 2 3 4 5 6; do echo line $i; sleep 0.5; done; echo '{MARK}'", res)
        check("a boot that keeps printing before userspace is not a stall",
              not run.stalled and stalls == [] and run.userspace_s == 1.5,
              f"stalled={run.stalled} stalls={stalls}")
        count.unlink(missing_ok=True)

    return ktap.print_checks(results_, "vm runner")


if __name__ == "__main__":
    sys.exit(main())
