#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The long stress run (`make stress`): stress.sh with the long run's figures against peermem-rs in
every configuration, in a `switch` boot (IOMMU off) and a `switch-iommu` boot (IOMMU on, the host
kind with memory_peers), each with a larger GPU BAR so that tens of thousands of registrations can
be live at once; then the same run against NVIDIA's nvidia-peermem 550 in a boot of its own, which
is expected to end in use-after-free reports or a crash (make check never runs it). Prints a
summary: registrations (the hold phase's apart), those in flight or live at a free and those ended
by another task, bytes the NIC moved, failslab injections, splats and leaks per boot, wall time.

    tests/selftests/stress/stress.py [--payload DIR] [--ops N] [--hold N] [--bar-mib M]
                                     [--seconds S] [--clients peermem_rs,nvidia_peermem] [--nvidia-seconds S]
                                     [--variants switch,switch-iommu] [--only 0:0:1,...]

The boots run the debug kernel of `make check`; with PEERMEM_KERNEL_FLAVOUR=bench, the benchmark
kernel (no KASAN, lockdep, kmemleak or fault injection; several times faster under TCG), for the
operation counts a debug kernel cannot reach here, with a payload built for it.

--ops is the target over all peermem-rs boots and configurations (1,000,000 by default), split
evenly between them; --seconds bounds each configuration. Results land in .build/stress/: a
directory per boot (console, output, dmesg, the per-configuration reports) and summary.txt.
Exit status 0 when every peermem-rs boot passed every check with no splat and no leak.

--write-doc (what `make stress` passes) keeps the run: its summary goes to docs/stress-runs/ (one
file per run, named by date and commit, never overwritten), and the section of docs/stress.md
between its "make stress: begin/end" marks is rewritten with the newest run's summary and the list
of every kept run. It needs a payload built from a commit with a clean tree, which the files cite.
--render-doc rewrites that section from the kept runs alone.
"""

import argparse
import concurrent.futures
import os
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "vm"))

import ktap  # noqa: E402
import vm    # noqa: E402

OUT = REPO / ".build" / "stress"
CONFIGS = 4  # stress.sh's configurations per boot (--only: fewer)
ONLY = []
# The kernel the boots run (build-kernel.sh reads the same variable).
FLAVOUR = os.environ.get("PEERMEM_KERNEL_FLAVOUR", "test")
KERNELS = {
    "test": "the debug kernel of make check (KASAN, lockdep, kmemleak, UBSAN, DEBUG_ATOMIC_SLEEP, "
            "hung-task detector, DMA-API debugging, failslab)",
    "bench": "the benchmark kernel (the test kernel without the debugging options tests/bench/kernel.config "
             "turns off: KASAN, lockdep, kmemleak, UBSAN, DMA-API debugging, fault injection and more; so "
             "no randomized failslab and no leak scan; WARN, BUG, oops and the hung-task detector still "
             "fail a boot)",
}

# DMA-API debugging keeps one entry per live mapping (65,536 by default, then it disables itself);
# the hold phase keeps tens of thousands live.
PLAN = r"""
set -u
export PEERMEM_MODULES=/payload/modules
export PEERMEM_VARIANT={variant}
[ -w /sys/kernel/debug/kmemleak ] && echo clear > /sys/kernel/debug/kmemleak
echo "peermem-ksft: begin stress/stress.sh" > /dev/kmsg
cd /payload/selftests/stress
./stress.sh --client {client} {only} --ops {ops} --seconds {seconds} --hold {hold} --results /results -- {extra}
echo "STRESS-RC $?"
echo "peermem-ksft: end stress/stress.sh" > /dev/kmsg
if [ -w /sys/kernel/debug/kmemleak ]; then
    sleep 6; echo scan > /sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak > /results/kmemleak
fi
"""

RESULT = re.compile(r"# stress result: (?P<regs>\d+) registrations \((?P<hold>\d+) in the hold phase\), "
                    r"(?P<ends>\d+) ends, in (?P<s>[\d.]+) s; at a free: (?P<inflight>\d+) in flight, "
                    r"(?P<live>\d+) live; (?P<foreign>\d+) deregistered by another task; .*NIC DMA "
                    r"(?P<nic>\d+) bytes \((?P<nic_cmp>\d+) read back and compared\), CPU compared "
                    r"(?P<cpu>\d+) bytes; (?P<refused>\d+) transfers refused after a free")
FIELDS = ["regs", "hold", "ends", "inflight", "live", "foreign", "nic", "nic_cmp", "cpu", "refused"]
TOTALS = re.compile(r"# stress totals: .*")


def read(p):
    return p.read_text(errors="replace") if p.exists() else ""


def first_report(log):
    """The first kernel report of a boot's log, classified, with its first lines."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if ktap.SPLAT.search(line):
            m = re.search(r"BUG: KASAN: ([\w-]+)", line)
            if m:
                kind = m.group(1)
            elif re.search(r"blocked for more than", line):
                kind = "hung task (a task blocked past the hung-task timeout)"
            elif re.search(r"general protection fault|Oops|unable to handle", line):
                kind = "oops"
            elif "WARNING:" in line:
                kind = "warning"
            else:
                kind = line.strip()[:60]
            return kind, lines[i:i + 30]
    return None, []


class Done:
    """What vm.boot returned, for a boot summarized again from its files (--summarize)."""
    def __init__(self, out):
        self.console = read(out / "console.log")
        m = re.findall(r"peermem-vm: done after ([\d.]+) s", self.console)
        self.seconds = float(m[-1]) if m else 0.0
        self.timed_out = not (out / "plan.rc").exists()


def run_boot(name, variant, client, ops, seconds, hold, bar_mib, payload, accel, kdir, extra, summarize=False):
    # A boot's time: each configuration's bound, loading, the hold phase and the settling.
    timeout = CONFIGS * (seconds + 300) + 600
    out = OUT / name
    only = " ".join(f"--only {c}" for c in ONLY)
    plan = PLAN.format(variant=variant, client=client, only=only, ops=ops, seconds=seconds, hold=hold,
                       extra=extra)
    if summarize:
        res = Done(out)
    else:
        vm.log(f"stress: boot {name} ({variant}, {client}, {ops} operations per configuration, hold {hold}, "
               f"GPU BAR {bar_mib} MiB)")
        # nvidia-peermem 550 deadlocks under this run (docs/stress.md): its boot ends at the first
        # hung-task report instead of waiting out the timeout with its tasks stuck for good.
        panic = ["hung_task_panic=1"] if client == "nvidia_peermem" else []
        res = vm.boot(variant, plan, payload, out, accel, timeout, kdir,
                      cmdline_extra=["dma_debug_entries=262144", *panic],
                      machine_overrides={"gpu_bar_mib": bar_mib, "memory_mib": 2048})
        (out / "kernel").write_text(FLAVOUR + "\n")  # for --summarize
    output = read(out / "output")
    dmesg = read(out / "dmesg") or res.console
    splats = [line for line in dmesg.splitlines() if ktap.SPLAT.search(line)]
    kind, evidence = first_report(dmesg)
    leaks = read(out / "kmemleak").strip()
    ktap_lines = [line for line in output.splitlines() if re.match(r"^(not )?ok \d+ ", line)]
    failed = [line for line in ktap_lines if line.startswith("not ok")]
    results = [RESULT.search(line) for line in output.splitlines()]
    results = [m for m in results if m]
    rc = re.search(r"STRESS-RC (\d+)", output)
    b = {
        "name": name, "variant": variant, "client": client, "seconds": res.seconds,
        "completed": rc is not None and not res.timed_out, "rc": int(rc.group(1)) if rc else None,
        "timed_out": res.timed_out, "tests": len(ktap_lines), "failed": failed,
        **{f: sum(int(m.group(f)) for m in results) for f in FIELDS},
        "stress_s": sum(float(m.group("s")) for m in results),
        "configs_done": len(results),
        "totals": (TOTALS.search(output).group(0) if TOTALS.search(output) else ""),
        "splats": len(splats), "first_report": kind, "evidence": evidence,
        "leaks": len(re.findall(r"unreferenced object", leaks)), "kmemleak": (out / "kmemleak").exists(),
        "kernel": read(out / "kernel").strip() or "test", "results": out,
        "findings": [line.lstrip("# ") for line in output.splitlines()
                     if re.search(r"MISMATCH|^# FAIL: |still live|LEFT BEHIND", line)][:20],
    }
    vm.log(f"stress: boot {name} done in {res.seconds:.0f} s: {b['regs']} registrations, "
           f"{len(failed)} of {len(ktap_lines)} checks failed, {b['splats']} splat lines, {b['leaks']} leaks")
    return b


def describe(b):
    s = [f"## {b['name']}: {b['client']} in {b['variant']}, boot {b['seconds']:.0f} s "
         f"({b['stress_s']:.0f} s of stress in {b['configs_done']} of {CONFIGS} configurations)"]
    s.append(f"- registrations {b['regs']} ({b['hold']} in the hold phase), ends {b['ends']}; at a free: "
             f"{b['inflight']} in flight, {b['live']} live; {b['foreign']} deregistered by another task")
    s.append(f"- NIC DMA {b['nic']} bytes ({b['nic_cmp']} read back and compared); CPU compared {b['cpu']} bytes; "
             f"{b['refused']} transfers to invalidated MRs refused after their memory's free")
    if b["totals"]:
        s.append(f"- {b['totals'][2:]}")
    s.append(f"- checks: {b['tests'] - len(b['failed'])} of {b['tests']} passed; run "
             f"{'completed' if b['completed'] else 'timed out' if b['timed_out'] else 'did not complete'}"
             f" (stress.sh exit {b['rc']})")
    for f in b["failed"][:20]:
        s.append(f"  - {f}")
    for f in b["findings"]:
        s.append(f"  - {f}")
    s.append(f"- kernel splat lines {b['splats']}, first report: {b['first_report'] or 'none'}; "
             + (f"kmemleak: {b['leaks']} unreferenced objects" if b["kmemleak"] else
                "no kmemleak in this kernel" if b["kernel"] == "bench" else
                "kmemleak not read (the boot did not reach the end of its plan)"))
    if b["evidence"]:
        s.append("```")
        s += [re.sub(r"^\[\s*\d+\.\d+\]\s?", "", line) for line in b["evidence"][:25]]
        s.append("```")
    s.append(f"- logs: {b['results']}")
    return "\n".join(s)


def check_payload_kernel(payload):
    """A payload built for the other kernel would fail to load (KASAN's symbols) or, worse, run
    uninstrumented code on the debug kernel: refuse it before booting."""
    ko = payload / "modules" / "peermem_rs.ko"
    if not ko.exists():
        raise SystemExit(f"{payload}: no peermem_rs.ko; run tests/run_tests.py --build-only first")
    # Only KASAN tells the two apart: they share the release string, so vermagic cannot.
    kasan = b"__asan_" in ko.read_bytes()
    if kasan != (FLAVOUR == "test"):
        raise SystemExit(f"{ko} was built for the {'test' if kasan else 'bench'} kernel, this run boots the "
                         f"{FLAVOUR} kernel: build the payload with PEERMEM_KERNEL_FLAVOUR={FLAVOUR} "
                         "tests/run_tests.py --build-only"
                         + (" in a clone of its own (the work tree's builds are the test kernel's)"
                            if FLAVOUR == "bench" else ""))


DOC = REPO / "docs" / "stress.md"
RUNS = REPO / "docs" / "stress-runs"
BEGIN = "<!-- make stress: begin (written by tests/selftests/stress/stress.py --write-doc; do not edit) -->"
END = "<!-- make stress: end -->"


def write_doc(text, source, args):
    """Keep this run's summary in docs/stress-runs/ and show the newest in docs/stress.md."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    RUNS.mkdir(exist_ok=True)
    name = f"{time.strftime('%Y%m%d-%H%M', time.gmtime())}-{source[:12]}.txt"
    (RUNS / name).write_text(f"# stress.py {args}\n# measured on {source} (commit, and whether the tree had "
                             f"changes not committed), {when}\n\n{text}")
    print(f"wrote {RUNS / name}", file=sys.stderr)
    render_doc()


def render_doc():
    """Rewrite the marked section of docs/stress.md from the kept runs: the newest one's summary
    (everything before its first boot's section) and the list of them all."""
    runs = sorted(p.name for p in RUNS.glob("*.txt"))
    if not runs:
        raise SystemExit(f"no run kept in {RUNS}")
    newest = (RUNS / runs[-1]).read_text()
    command, measured, rest = newest.split("\n", 2)
    head = rest.strip("\n").split("\n## ", 1)[0].rstrip()
    block = [BEGIN, "",
             f"The newest `make stress` run: `docs/stress-runs/{runs[-1]}`, "
             f"{measured.removeprefix('# ')}, by `{command.removeprefix('# ')}`. Its summary (every "
             "boot's details are in the file):", "",
             "```", head, "```", "",
             "Every run kept (none is left out; the newest last): "
             + ", ".join(f"`docs/stress-runs/{r}`" for r in runs) + ".", "", END]
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: no '{BEGIN}' ... '{END}' section to write")
    before, rest = doc.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    DOC.write_text(before + "\n".join(block) + after)
    print(f"wrote {DOC}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--payload", default=str(REPO / ".build" / "latest" / "payload"))
    ap.add_argument("--ops", type=int, default=1_000_000,
                    help="register/deregister operations over all peermem-rs boots and configurations")
    ap.add_argument("--hold", type=int, default=20000, help="registrations held live at once, per configuration")
    ap.add_argument("--bar-mib", type=int, default=1024, help="the GPU BAR of the boots (a power of two)")
    ap.add_argument("--seconds", type=int, default=1500, help="bound of each configuration's run")
    ap.add_argument("--clients", default="peermem_rs,nvidia_peermem")
    ap.add_argument("--variants", default="switch,switch-iommu")
    ap.add_argument("--nvidia-ops", type=int, default=0,
                    help="operations per configuration for nvidia-peermem (default: as peermem-rs's)")
    ap.add_argument("--nvidia-seconds", type=int, default=0,
                    help="bound of each configuration's run for nvidia-peermem (default: --seconds)")
    ap.add_argument("--extra", default="", help="more stress options, e.g. '--slab-permille 5'")
    ap.add_argument("--only", default="",
                    help="only these of stress.sh's configurations, e.g. 0:0:1,0:1:1 (persistent_api_support:"
                         "peerdirect_support:ex_support), to chase what one of them found")
    ap.add_argument("--summarize", action="store_true",
                    help="boot nothing: summarize the boots already in .build/stress/")
    ap.add_argument("--write-doc", action="store_true",
                    help="keep the summary in docs/stress-runs/ and show it in docs/stress.md")
    ap.add_argument("--render-doc", action="store_true",
                    help="boot nothing: rewrite docs/stress.md's section from the runs kept in docs/stress-runs/")
    a = ap.parse_args()
    if a.render_doc:
        render_doc()
        return 0
    source = Path(a.payload).resolve().parent / "source"
    source = source.read_text().strip() if source.exists() else "unknown"
    if a.write_doc and not re.fullmatch(r"[0-9a-f]{40} clean", source):
        raise SystemExit(f"{a.payload} was built from {source!r}, not from a commit with a clean tree: "
                         "docs/stress.md cites the commit it measured (commit, then run_tests.py --build-only)")

    global CONFIGS, ONLY
    ONLY = [c for c in a.only.split(",") if c]
    CONFIGS = len(ONLY) or CONFIGS
    start = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    kdir = vm.kernel_dir()
    accel, reason = vm.choose_accel(kdir)
    vm.log(f"stress: accelerator {accel} ({reason})")
    payload = Path(a.payload).resolve()
    if not a.summarize:
        if not (payload / "selftests" / "stress" / "stress").exists():
            raise SystemExit(f"{payload}: no stress build; run tests/run_tests.py --build-only first")
        check_payload_kernel(payload)
    clients = a.clients.split(",")
    variants = a.variants.split(",")
    per_config = max(1, a.ops // (len(variants) * CONFIGS))
    jobs = []
    if "peermem_rs" in clients:
        for v in variants:
            jobs.append((f"peermem_rs-{v}", v, "peermem_rs", per_config, a.seconds))
    if "nvidia_peermem" in clients:
        jobs.append(("nvidia_peermem-switch", "switch", "nvidia_peermem", a.nvidia_ops or per_config,
                     a.nvidia_seconds or a.seconds))
    with concurrent.futures.ThreadPoolExecutor(max_workers=vm.VM_SLOTS) as pool:
        futures = [pool.submit(run_boot, name, v, c, ops, seconds, a.hold, a.bar_mib, payload, accel,
                               kdir, a.extra, a.summarize) for name, v, c, ops, seconds in jobs
                   if not a.summarize or (OUT / name).exists()]
        boots = [f.result() for f in futures]

    ours = [b for b in boots if b["client"] == "peermem_rs"]
    theirs = [b for b in boots if b["client"] != "peermem_rs"]
    wall = time.monotonic() - start
    kernels = sorted({b["kernel"] for b in boots}) or [FLAVOUR]
    scanned = [b for b in ours if b["kernel"] != "bench"]
    head = [
        "# make stress",
        *[f"kernel: {k}, {KERNELS[k]}" for k in kernels],
        f"machine: {accel} ({reason}); GPU BAR {a.bar_mib} MiB; hold {a.hold} per configuration; "
        f"target {a.ops} operations; wall time {wall:.0f} s",
        "",
        f"peermem-rs: {sum(b['regs'] for b in ours)} registrations "
        f"({sum(b['hold'] for b in ours)} in the hold phase); at a free "
        f"{sum(b['inflight'] for b in ours)} in flight and {sum(b['live'] for b in ours)} live; "
        f"{sum(b['foreign'] for b in ours)} deregistered by another task; "
        f"NIC DMA {sum(b['nic'] for b in ours)} bytes; "
        f"{sum(len(b['failed']) for b in ours)} failed checks, {sum(b['splats'] for b in ours)} splat lines, "
        + (f"{sum(b['leaks'] for b in scanned)} leaks (kmemleak)" if scanned or FLAVOUR != "bench"
           else "no leak scan (no kmemleak)"),
    ]
    for b in theirs:
        head.append(f"nvidia-peermem 550: {b['regs']} registrations completed in {b['configs_done']} of {CONFIGS} "
                    f"configurations, {len(b['failed'])} failed checks, {b['splats']} splat lines, first "
                    f"report: {b['first_report'] or 'none'}, run "
                    f"{'completed' if b['completed'] else 'did not complete'}")
    text = "\n".join(head) + "\n\n" + "\n\n".join(describe(b) for b in boots) + "\n"
    (OUT / "summary.txt").write_text(text)
    sys.stdout.write(text)
    if a.write_doc:
        write_doc(text, source, " ".join(sys.argv[1:]))
    ok = all(b["completed"] and not b["failed"] and not b["splats"] and not b["leaks"] and b["tests"] for b in ours)
    return 0 if ours and ok else 1


if __name__ == "__main__":
    sys.exit(main())
