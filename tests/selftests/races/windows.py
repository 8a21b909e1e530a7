#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Every race window against every client configuration, nvidia-peermem's crashes and deadlocks
included: the sweep behind docs/race-windows.md (`make races`).

    tests/selftests/races/windows.py [--payload DIR] [--clients peermem_rs,nvidia_peermem]
                                     [--variant switch] [--write-doc]

`make check` fails any boot with a kernel splat, so there race_matrix.sh runs nvidia-peermem only
in the windows where it stays clean (nvidia_peermem_clean). Here each configuration's windows run
one after another in a boot; a window that leaves a splat (a KASAN report, a WARN, an oops) or
hangs ends its boot (the guest powers off after a splat; a deadlock trips the hung-task detector,
set to 10 s and to panic, and the boot ends with the lock chain on the console), and the next boot
goes on with the windows left. Each window is classified: clean, use-after-free, deadlock, oops,
warning, left behind (the test's own checks failed), and the evidence (the first report) is kept.

Results land in .build/race-windows/: one directory per boot, and windows.md, the table; with
--write-doc it also replaces the measured table in docs/race-windows.md and the
nvidia_peermem_clean list. Exit status 0 when peermem-rs was clean in every window.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "vm"))

import vm  # noqa: E402

OUT = REPO / ".build" / "race-windows"
DOC = REPO / "docs" / "race-windows.md"
# Where --open-windows --write-doc writes its table: the windows peermem-rs leaves open, measured.
OPEN_DOC = REPO / "docs" / "open-windows.md"
CONFIGS = [("1", "0"), ("0", "0"), ("0", "1")]
CONFIG_NAMES = {
    ("1", "0"): "persistent (default)",
    ("0", "0"): "invalidating, ex host",
    ("0", "1"): "invalidating, legacy",
}


def config_name(client, pas, pds):
    # nvidia-peermem 550 has no persistent_api_support parameter (insmod ignores it): it always
    # registers the invalidating client nv_mem (and nv_mem_nc), so its "default" column is the
    # ex host's invalidating client again, in another boot.
    if client == "nvidia_peermem" and pas == "1":
        return "550 default (no persistent_api_support: invalidating, ex host)"
    return CONFIG_NAMES[(pas, pds)]

# The guest runs the windows of one configuration in order, each marked in the kernel log; after a
# window it looks for a report in the log since its mark and powers off if there is one (the boot
# is not to be trusted after a use-after-free).
PLAN = r"""
set -u
export PEERMEM_MODULES=/payload/modules
. /payload/selftests/races/lib.sh
echo 10 > /proc/sys/kernel/hung_task_timeout_secs
echo 1 > /proc/sys/kernel/hung_task_panic
echo 0 > /proc/sys/kernel/hung_task_warnings 2>/dev/null || true
cd /payload/selftests/races
unload_all
load_standins && insmod $PEERMEM_MODULES/{ko} persistent_api_support={pas} peerdirect_support={pds} || {{ echo "WINDOW-LOAD-FAILED"; exit 1; }}
splats() {{ dmesg | grep -cE "BUG:|WARNING:|Oops|general protection|UBSAN:|possible circular|blocked for more than"; }}
for w in {windows}; do
    before=$(splats)
    echo "peermem-window: begin $w" > /dev/kmsg
    echo "WINDOW-BEGIN $w"
    RACE_CLIENT={client} {extra_env}timeout 120 ./races -r race.$w > /tmp/w.out 2>&1
    rc=$?
    cat /tmp/w.out
    echo "WINDOW-END $w rc=$rc"
    echo "peermem-window: end $w" > /dev/kmsg
    # Counted over the whole log (vm.py boots with a 64 MiB log_buf_len).
    if [ "$(splats)" != "$before" ]; then
        echo "WINDOW-SPLAT $w"
        sleep 1
        exit 3
    fi
    # A window may leave the module loaded on purpose (rmmod refused); start each one fresh.
    unload_all
    load_standins && insmod $PEERMEM_MODULES/{ko} persistent_api_support={pas} peerdirect_support={pds} || exit 1
done
unload_all
echo "WINDOWS-DONE"
"""

REPORT = re.compile(r"BUG: KASAN: ([\w-]+)|BUG: ([^\n]*)|WARNING: ([^\n]*)|INFO: task (\S+) blocked for more than|"
                    r"general protection fault|Oops|possible circular locking dependency")


def windows():
    """The test names of races.c, in order."""
    out = []
    for line in (HERE / "races.c").read_text().splitlines():
        m = re.match(r"TEST_F\(race, (\w+)\)", line)
        if m:
            out.append(m.group(1))
    return out


def classify(console, output, window):
    """(verdict, evidence lines) of `window` from the boot's console and the plan's output."""
    begin = console.find(f"peermem-window: begin {window}")
    log = console[begin:] if begin >= 0 else ""
    end = log.find(f"peermem-window: end {window}")
    body = log if end < 0 else log[:end + 200]
    lines = [re.sub(r"^\[\s*\d+\.\d+\]\s?", "", l) for l in body.splitlines()]

    def evidence(start_pat, n=40):
        for i, l in enumerate(lines):
            if re.search(start_pat, l):
                return lines[i:i + n]
        return []

    if re.search(r"blocked for more than", body):
        ev = evidence(r"blocked for more than", 80)
        return "deadlock", ev
    m = re.search(r"BUG: KASAN: ([\w-]+)", body)
    if m:
        return "use-after-free" if "use-after-free" in m.group(1) else f"KASAN {m.group(1)}", evidence(r"BUG: KASAN")
    if re.search(r"BUG: unable to handle|general protection fault|Oops", body):
        return "oops", evidence(r"BUG: unable to handle|general protection fault|Oops")
    if re.search(r"possible circular locking dependency", body):
        return "lockdep", evidence(r"possible circular locking dependency", 60)
    if re.search(r"WARNING:", body):
        return "warning", evidence(r"WARNING:")
    m = re.search(rf"WINDOW-END {window} rc=(\d+)", output)
    if not m:
        return "no result", []
    rc = int(m.group(1))
    seg = output[output.find(f"WINDOW-BEGIN {window}"):output.find(f"WINDOW-END {window}")]
    # A window that does not exist in this configuration SKIPs, and the harness still exits 0
    # when its one test was skipped: that is "not applicable", never "clean".
    if rc == 4 or (rc == 0 and re.search(rf"ok \d+ race\.{window} # SKIP", seg)):
        return "n/a", []
    if rc == 0:
        return "clean", []
    if "left behind" in seg:
        return "left behind", [l for l in seg.splitlines() if "left behind" in l or "Expected" in l][:10]
    return f"failed (exit {rc})", [l for l in seg.splitlines() if "Expected" in l or "FAIL" in l][:10]


def sweep(client, pas, pds, payload, variant, accel, kdir, timeout, only=None, old_host=False,
          open_windows=False):
    """{window: (verdict, evidence)} for one client configuration."""
    ko = "peermem_rs.ko" if client == "peermem_rs" else "nvidia-peermem.ko"
    left = [w for w in windows() if not only or w in only]
    result = {}
    boot_n = 0
    while left:
        boot_n += 1
        plan = PLAN.format(ko=ko, pas=pas, pds=pds, client=client, windows=" ".join(left),
                           extra_env=("RACE_OLD_HOST=1 " if old_host else "")
                           + ("RACE_OPEN_WINDOW=1 " if open_windows else ""))
        out = OUT / f"{client}-{pas}{pds}-boot{boot_n}"
        vm.log(f"windows: {client} persistent_api_support={pas} peerdirect_support={pds}: "
               f"boot {boot_n}, {len(left)} windows")
        res = vm.boot(variant, plan, payload, out, accel, timeout, kdir)
        output = (out / "output").read_text(errors="replace") if (out / "output").exists() else ""
        console = res.console
        ran = [w for w in left if f"WINDOW-BEGIN {w}" in output or f"peermem-window: begin {w}" in console]
        if not ran:
            for w in left:
                result[w] = ("no result", [f"boot {boot_n} ran nothing; see {out}"])
            break
        for w in ran:
            result[w] = classify(console, output, w)
        left = left[len(ran):]
        last = ran[-1]
        if result[last][0] == "clean" and f"WINDOW-END {last}" not in output:
            result[last] = ("no result", [f"the boot ended inside the window; see {out}"])
    return result


def table(results):
    lines = ["| window | " + " | ".join(f"{c} {config_name(c, p, d)}" for c, p, d in results) + " |",
             "|---|" + "---|" * len(results)]
    shown = {w for r in results.values() for w in r}
    for w in [w for w in windows() if w in shown]:
        row = [f"`{w}`"]
        for key in results:
            v = results[key].get(w, ("-", []))[0]
            row.append(v)
        lines.append("| " + " | ".join(row) + " |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payload", default=str(REPO / ".build" / "latest" / "payload"))
    ap.add_argument("--clients", default="peermem_rs,nvidia_peermem")
    ap.add_argument("--variant", default="switch")
    ap.add_argument("--timeout", type=int, default=1500)
    ap.add_argument("--write-doc", action="store_true")
    ap.add_argument("--windows", help="comma-separated windows (default: all)")
    ap.add_argument("--old-host", action="store_true",
                    help="also run the windows of the host of MLNX_OFED before 25.04 (RACE_OLD_HOST=1), which hang by design")
    ap.add_argument("--open-windows", action="store_true",
                    help="also run the windows peermem-rs leaves open (RACE_OPEN_WINDOW=1; docs/known-limits.md), which crash the kernel by design until they are closed")
    ap.add_argument("--configs", help="comma-separated persistent_api_support:peerdirect_support (default: all)")
    ap.add_argument("--out", help="results directory (default: .build/race-windows)")
    a = ap.parse_args()
    payload = Path(a.payload)
    if not (payload / "selftests" / "races" / "races").exists():
        raise SystemExit(f"no races selftest in {payload}: run tests/run_tests.py --build-only")
    source = payload.parent / "source"
    source = source.read_text().strip() if source.exists() else "unknown"
    if a.write_doc and not re.fullmatch(r"[0-9a-f]{40} clean", source):
        raise SystemExit(f"{payload} was built from {source!r}, not from a commit with a clean tree: "
                         "docs/race-windows.md cites the commit it measured (commit, then run_tests.py --build-only)")
    global OUT
    if a.out:
        OUT = Path(a.out).resolve()
    if a.old_host and a.write_doc:
        ap.error("--old-host hangs windows by design: its results do not go into docs/race-windows.md")
    if a.open_windows and a.write_doc and not a.windows:
        ap.error("--open-windows --write-doc takes --windows: docs/open-windows.md holds the open windows only")
    only = set(a.windows.split(",")) if a.windows else None
    configs = [tuple(c.split(":")) for c in a.configs.split(",")] if a.configs else CONFIGS
    kdir = vm.kernel_dir()
    accel, reason = vm.choose_accel(kdir)
    OUT.mkdir(parents=True, exist_ok=True)
    results = {}
    for client in a.clients.split(","):
        for pas, pds in configs:
            results[(client, pas, pds)] = sweep(client, pas, pds, payload, a.variant, accel, kdir,
                                                a.timeout, only, a.old_host, a.open_windows)
    lines = [f"Measured by `tests/selftests/races/windows.py` in the `{a.variant}` VM variant ({accel}), "
             f"on `{source}` (the commit the payload was built from, and whether the tree had changes "
             "not committed).", ""]
    # The counts, per configuration: "n/a" (the window does not exist there) is not "clean".
    for key, res in results.items():
        counts = {}
        for verdict, _ in res.values():
            counts[verdict] = counts.get(verdict, 0) + 1
        told = ", ".join(f"{n} {'not applicable' if v == 'n/a' else v}" for v, n in sorted(counts.items()))
        lines.append(f"- {key[0]}, {config_name(*key)}: {len(res)} windows: {told}")
    lines.append("")
    lines += table(results)
    lines.append("")
    for (client, pas, pds), res in results.items():
        for w, (verdict, ev) in res.items():
            if verdict in ("clean", "n/a") or not ev:
                continue
            lines += [f"### {client}, {config_name(client, pas, pds)}: `{w}`: {verdict}", "", "```"]
            lines += ev[:60]
            lines += ["```", ""]
    (OUT / "windows.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.write_doc and a.open_windows:
        # The windows left open, measured as they are: not docs/race-windows.md's sweep.
        OPEN_DOC.write_text("<!-- SPDX-License-Identifier: GPL-2.0 -->\n"
                            "# Race windows peermem-rs leaves open, forced\n\n"
                            "Written by `tests/selftests/races/windows.py --open-windows --write-doc` "
                            "(do not edit); docs/known-limits.md says what each window is and what "
                            "closes it.\n\n" + "\n".join(lines) + "\n")
    elif a.write_doc:
        doc = DOC.read_text()
        start, end = "<!-- measured: begin -->", "<!-- measured: end -->"
        if start in doc and end in doc:
            doc = doc[:doc.index(start) + len(start)] + "\n" + "\n".join(lines) + "\n" + doc[doc.index(end):]
            DOC.write_text(doc)
        clean = ["# The race windows in which NVIDIA's nvidia-peermem 550 stays clean, per configuration",
                 "# \"persistent_api_support:peerdirect_support\", as measured by windows.py (see",
                 "# docs/race-windows.md). race_matrix.sh runs nvidia-peermem only in these in `make check`;",
                 "# the others end their boot (use after free, deadlock) and run in `make races`."]
        for pas, pds in CONFIGS:
            res = results.get(("nvidia_peermem", pas, pds), {})
            ok = [w for w in windows() if res.get(w, ("",))[0] in ("clean", "n/a")]
            clean.append(f"{pas}:{pds} " + " ".join(ok))
        (HERE / "nvidia_peermem_clean").write_text("\n".join(clean) + "\n")
    ours_clean = all(v[0] in ("clean", "n/a") for (c, _, _), r in results.items() if c == "peermem_rs"
                     for v in r.values())
    vm.log(f"windows: peermem-rs {'clean in every window' if ours_clean else 'NOT clean'}; {OUT / 'windows.md'}")
    return 0 if ours_clean else 1


if __name__ == "__main__":
    sys.exit(main())
