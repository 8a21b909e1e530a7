#!/usr/bin/env python3
"""Build everything and run every test of peermem-rs; the command behind `make check` and CI.

    tests/run_tests.py                 all tests: cargo test on the host, kselftests in the VM
    tests/run_tests.py --demo          the main job: show GPUDirect RDMA in the VM
    tests/run_tests.py --shell         an interactive VM with the payload loaded
    tests/run_tests.py --variants switch --tests skeleton_load.sh    a subset

Steps: the build root and test kernel (cached), the modules and the kselftests (built in the build
root), `cargo test --workspace` and the host-side test scripts, the packaging tests (configure, dkms,
make install: tests/packaging/host_tests.sh, which also put the DKMS-installed module into the payload),
then one VM boot per topology variant, each running its kselftests (two boots at a time). The output
is KTAP; the last line is `N passed, N failed, N skipped` and the exit status is non-zero on any
failure, including a kernel splat anywhere in a boot's log.
"""

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "vm"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "demo"))

import baseline  # noqa: E402
import ktap  # noqa: E402
import vm    # noqa: E402

REPO = vm.REPO
BUILD = REPO / ".build"
SELFTESTS = REPO / "tests" / "selftests"
# Each run builds its payload and keeps its results in a directory of its own, so that runs started
# side by side (they queue for the VM) cannot clobber each other's files. .build/latest points to
# the newest; only the few newest are kept.
RUN = BUILD / f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
PAYLOAD = RUN / "payload"
KEEP_RUNS = 6


def check_source_unchanged():
    """The payloads are built from the tree as it is when each is built (the stock boots' late in
    the run): a tree changed meanwhile, or a commit made, leaves no one source measured, and the
    run's `source` says so (the reports refuse such a run)."""
    first, last = (RUN / "source").read_text().strip(), vm.source_state()
    if last != first:
        (RUN / "source").write_text(f"{first}, then {last}: the tree changed during the run\n")
        log(f"the tree changed during the run ({first}, then {last}): no report may cite this run")


def new_run_dir():
    RUN.mkdir(parents=True, exist_ok=True)
    # What the run measured: the reports made from it (docs/) name it.
    (RUN / "source").write_text(vm.source_state() + "\n")
    latest = BUILD / "latest"
    tmp = BUILD / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(RUN.name)
    tmp.replace(latest)
    runs = sorted(p for p in BUILD.glob("run-*") if p.is_dir())
    for old in runs[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)

# Each VM boot costs a kernel boot under KASAN and lockdep, so tests share boots: a boot per topology
# variant, running every collection that asks for that variant. A collection names its variants in a
# `variants` file next to its Makefile, one per line; without one it runs in "switch" only. A line
# `variant: test ...` runs only those tests there: the ones that topology can tell anything new.
# stock-7.3 and stock-7.2 boot Debian's stock kernels instead of the test kernel, ubuntu-7.3 the
# Ubuntu-style kernel, lts-6.12 Linux 6.12 LTS built with the test kernel's debug options
# (topology.toml [kernels]); ubuntu-7.3 and lts-6.12 come second and third so that their builds
# (stock_payload; on a cold cache the kernels themselves) overlap the switch boot.
VARIANT_ORDER = ["switch", "ubuntu-7.3", "lts-6.12", "stock-7.3", "switch-iommu", "split", "stock-7.2"]


def boots():
    """[(variant, [(collection, [test, ...] or None for all), ...])] in VARIANT_ORDER."""
    plan = {v: [] for v in VARIANT_ORDER}
    for d in sorted(p for p in SELFTESTS.iterdir() if (p / "Makefile").exists()):
        f = d / "variants"
        lines = f.read_text().splitlines() if f.exists() else ["switch"]
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            v, _, subset = line.partition(":")
            v = v.strip()
            if v not in plan:
                raise SystemExit(f"{f}: unknown variant {v} (known: {', '.join(VARIANT_ORDER)})")
            plan[v].append((d.name, subset.split() or None))
    # A collection with a `runs-last` file goes after the others of its boot (it taints the kernel).
    for collections in plan.values():
        collections.sort(key=lambda c: (SELFTESTS / c[0] / "runs-last").exists())
    return [(v, c) for v, c in plan.items() if c]


def log(msg):
    vm.log(msg)


def run(cmd, **kw):
    """Run a build step; on failure show its output and stop."""
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if res.returncode != 0:
        sys.stderr.write(res.stdout)
        raise SystemExit(f"build step failed: {' '.join(map(str, cmd))}")
    return res.stdout


def build(kdir):
    """Build the modules and the kselftests into the VM payload."""
    ksrc = (kdir / "source").resolve()
    shutil.rmtree(PAYLOAD, ignore_errors=True)
    (PAYLOAD / "modules").mkdir(parents=True)
    log("building the stand-ins and peermem_rs.ko")
    # First a build for an MLNX_OFED before 25.04 (module_load.sh: it refuses the invalidating
    # flavour), then the one every other test loads, so that the tree is left with that one.
    run(["make", "-s", "-C", str(REPO), "module", "PEERMEM_OFED_RELEASE=24.10"])
    (PAYLOAD / "modules" / "ofed-24.10").mkdir()
    shutil.copy2(REPO / "peermem_rs.ko", PAYLOAD / "modules" / "ofed-24.10")
    run(["make", "-s", "-C", str(REPO), "module"])
    shutil.copy2(REPO / "peermem_rs.ko", PAYLOAD / "modules")
    # The drop-in build, module nvidia_peermem: beside NVIDIA's nvidia-peermem.ko (the reference,
    # below), so in a directory of its own.
    log("building the drop-in nvidia-peermem.ko")
    run(["make", "-s", "-C", str(REPO), "module", "DROPIN=1"])
    (PAYLOAD / "modules" / "dropin").mkdir()
    shutil.copy2(REPO / "nvidia-peermem.ko", PAYLOAD / "modules" / "dropin")
    for ko in sorted((REPO / "tests" / "standins").glob("*/*.ko")):
        shutil.copy2(ko, PAYLOAD / "modules")
    # NVIDIA's own nvidia-peermem.ko, built against the stand-ins: the reference implementation.
    run([str(REPO / "tests/reference/build-nvidia-peermem.sh"), str(PAYLOAD / "modules")])
    # And as NVIDIA's build makes it when the driver is installed before the OFED: it never loads.
    run([str(REPO / "tests/reference/build-nvidia-peermem.sh"), "--without-peer-memory",
         "--out", str(REPO / ".build/reference/nvidia-peermem-without-ofed"),
         str(PAYLOAD / "modules" / "without-ofed")])
    log("building the kselftests")
    for collection in sorted(p.name for p in SELFTESTS.iterdir() if (p / "Makefile").exists()):
        out = RUN / "selftests-build" / collection
        out.mkdir(parents=True, exist_ok=True)
        run([str(REPO / "tests/infra/in-root"), "make", "-s", "-C", str(SELFTESTS / collection),
             f"KSRC={ksrc}", f"OUTPUT={out}", "USERLDFLAGS=-static",
             "install", f"INSTALL_PATH={PAYLOAD / 'selftests' / collection}"])
    (PAYLOAD / "selftests" / "kselftest").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ksrc / "tools/testing/selftests/kselftest/ktap_helpers.sh", PAYLOAD / "selftests/kselftest")
    shutil.copy2(REPO / "tests/vm/ksft-run.sh", PAYLOAD)


def collection_tests(collection, ksrc):
    """The tests of a collection, in order, as lib.mk's emit_tests lists them."""
    out = run([str(REPO / "tests/infra/in-root"), "make", "-s", "-C", str(SELFTESTS / collection),
               f"KSRC={ksrc}", f"OUTPUT={RUN / 'selftests-build' / collection}", "emit_tests"])
    return [line.split(":", 1)[1] for line in out.splitlines() if ":" in line]


CARGO_GROUP = "host: cargo test --workspace"
PACKAGING_GROUP = "host: packaging (configure, dkms, make install)"


def cargo_group():
    log("cargo test --workspace")
    start = time.monotonic()
    res = subprocess.run(["cargo", "test", "--workspace", "--no-fail-fast"], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cases = ktap.parse_cargo(res.stdout)
    if res.returncode != 0 and not any(c.status == "fail" for c in cases):
        cases.append(ktap.Case("cargo test", "fail", reason=f"exit {res.returncode}",
                               output=res.stdout.splitlines()[-40:]))
    if not cases:
        cases.append(ktap.Case("cargo test", "fail", reason="no tests ran", output=res.stdout.splitlines()[-40:]))
    return ktap.Group(CARGO_GROUP, [f"{CARGO_GROUP} ({time.monotonic() - start:.1f} s)"], cases)


def script_group(name, script):
    """A host-side test script that prints KTAP (one result per check)."""
    log(name)
    start = time.monotonic()
    res = subprocess.run([str(script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cases = ktap.parse_ksft(res.stdout)
    if res.returncode != 0 and not any(c.status == "fail" for c in cases):
        cases.append(ktap.Case(name, "fail", reason=f"exit {res.returncode}", output=res.stdout.splitlines()[-40:]))
    if not cases:
        cases.append(ktap.Case(name, "fail", reason="no results", output=res.stdout.splitlines()[-40:]))
    return ktap.Group(name, [f"{name} ({time.monotonic() - start:.1f} s)"], cases)


def packaging_group(kdir):
    """The host-side packaging tests: configure.sh's discovery and refusals, a real dkms run, make
    install (tests/packaging/host_tests.sh, in the build root). They also leave in the payload what
    the packaging kselftests load (modules/packaging/)."""
    name = PACKAGING_GROUP
    log(name)
    start = time.monotonic()
    res = subprocess.run([str(REPO / "tests/infra/in-root"), str(REPO / "tests/packaging/host_tests.sh"),
                          str(kdir), str(PAYLOAD / "modules" / "packaging")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cases = ktap.parse_ksft(res.stdout)
    if res.returncode != 0 and not any(c.status == "fail" for c in cases):
        # Exit 4 without results: the script could not run here (it says why).
        cases.append(ktap.Case(name, "skip" if res.returncode == 4 and not cases else "fail",
                               reason=f"exit {res.returncode}", output=res.stdout.splitlines()[-40:]))
    return ktap.Group(name, [f"{name} ({time.monotonic() - start:.1f} s)"], cases)


# Host-side test scripts that print KTAP, run after the build.
HOST_SCRIPTS = [
    ("host: builds against each NVIDIA header", REPO / "tests/build/nv_headers.sh"),
    ("host: the test baseline's own checks", REPO / "tests/baseline_test.py"),
    ("host: the VM runner's stall watch", REPO / "tests/vm/stall_test.py"),
    ("host: the conformance comparison's rules", REPO / "tests/selftests/conformance/compare_test.py"),
    ("host: make bench's own checks", REPO / "tests/bench/bench_test.py"),
]


PLAN_PROLOGUE = """\
set -u
export PEERMEM_MODULES=/payload/modules
# Leaks from before the tests (boot) are not ours; report only what the tests leave behind.
[ -w /sys/kernel/debug/kmemleak ] && echo clear > /sys/kernel/debug/kmemleak
"""

PLAN_EPILOGUE = """\
# kmemleak reports an object once it is older than 5 s and unreferenced during a scan. One scan,
# after waiting out that age: a scan costs many seconds under TCG.
if [ -w /sys/kernel/debug/kmemleak ]; then
    sleep 6; echo scan > /sys/kernel/debug/kmemleak
    cat /sys/kernel/debug/kmemleak > /results/kmemleak
fi
"""


def vm_plan(variant, collections, ksrc, only):
    """The guest's script for a boot of `variant`, or None when none of its tests is wanted."""
    layout = vm.topology()["variants"][variant]["layout"]
    plan = PLAN_PROLOGUE + f"export PEERMEM_VARIANT={variant} PEERMEM_LAYOUT={layout}\n"
    runs = False
    for collection, subset in collections:
        all_tests = collection_tests(collection, ksrc)
        unknown = set(subset or ()) - set(all_tests)
        if unknown:
            raise SystemExit(f"{SELFTESTS / collection / 'variants'}: no test {', '.join(sorted(unknown))} "
                             f"in {collection} (it has {', '.join(all_tests)})")
        tests = [t for t in all_tests if (not only or t in only) and (subset is None or t in subset)]
        if tests:
            plan += f"sh /payload/ksft-run.sh /payload/selftests/{collection} {' '.join(tests)}\n"
            runs = True
    return plan + PLAN_EPILOGUE if runs else None


def kernel_name(stock):
    """What a [kernels] entry is, for the report."""
    return stock.get("description") or f"Debian's stock {stock['release']} ({stock['version']})"


def stock_payload(variant, stock):
    """The payload of a stock-kernel boot: the kselftests of PAYLOAD, with the modules built for that
    kernel and the module tree DKMS installed (rootfs/lib/modules) from tests/infra/stock-kernel.sh.
    Returns (payload, None) or (None, failing Case)."""
    out = RUN / f"stock-{variant}"
    log(f"{variant}: {kernel_name(stock)}: packages, test modules, DKMS install")
    start = time.monotonic()
    env = dict(os.environ, PEERMEM_KERNEL_FLAVOUR=stock["flavour"]) if "flavour" in stock else None
    res = subprocess.run([str(REPO / "tests/infra/stock-kernel.sh"), "build", stock["release"], stock["version"],
                          str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    (RUN / f"stock-{variant}.log").write_text(res.stdout)
    log(f"{variant}: stock-kernel.sh build took {time.monotonic() - start:.0f} s (exit {res.returncode})")
    if res.returncode != 0:
        return None, ktap.Case(f"vm {variant}: {kernel_name(stock)}: headers, test modules, DKMS install",
                               "fail", reason=f"tests/infra/stock-kernel.sh exit {res.returncode}",
                               output=res.stdout.splitlines()[-60:])
    payload = RUN / f"payload-{variant}"
    shutil.rmtree(payload, ignore_errors=True)
    shutil.copytree(PAYLOAD, payload, ignore=shutil.ignore_patterns("modules"), copy_function=os.link)
    shutil.copytree(out / "modules", payload / "modules", symlinks=True)
    shutil.copytree(out / "rootfs", payload / "rootfs", symlinks=True)
    return payload, None


def kernel_log_case(variant, results, dmesg):
    """Whether the runner read the guest's whole kernel log, or None when the guest sent none (the
    boot has failed already). The splat check reads only what dmesg gave: a log cut at its start,
    by a ring that wrapped or by a dmesg that read only the newest part of it, would hide the
    oldest reports."""
    first = results / "kmsg-first"
    if not first.exists() or not dmesg:
        return None
    name = f"vm {variant}: the whole kernel log was read (no record lost before the splat check)"
    record = first.read_text(errors="replace").split("\n", 1)[0]
    head, _, text = record.partition(";")
    fields = head.split(",")
    if len(fields) < 3 or not fields[1].isdigit():
        return ktap.Case(name, "fail", reason=f"cannot read /dev/kmsg's oldest record: {record[:200]!r}")
    if int(fields[1]) != 0:
        return ktap.Case(name, "fail", reason=f"the kernel's log ring wrapped: its oldest record is number "
                         f"{fields[1]}, so the first {fields[1]} records (and any report in them) are lost; "
                         "raise log_buf_len (tests/vm/vm.py)")
    line = dmesg.split("\n", 1)[0]
    if not line.rstrip().endswith(text.rstrip()):
        return ktap.Case(name, "fail", reason="dmesg did not begin at the log's oldest record "
                         f"({text.strip()[:120]!r}) but at {line.strip()[:160]!r}: it read only the newest part")
    return ktap.Case(name, "pass")


def vm_group(variant, plan, accel, accel_reason, timeout):
    payload = PAYLOAD
    try:
        stock = vm.stock_kernel(variant)
    except subprocess.CalledProcessError as e:
        # A kernel built here (a [kernels] entry with a flavour) whose build failed.
        return ktap.Group(f"vm: {variant}", [f"vm {variant}: not booted"],
                          [ktap.Case(f"vm {variant}: its kernel builds", "fail", reason=str(e))])
    if stock is not None:
        payload, failed = stock_payload(variant, stock)
        if failed:
            return ktap.Group(f"vm: {variant}", [f"vm {variant}: not booted"], [failed])
    log(f"VM boot: variant {variant} ({accel})")
    res = vm.boot(variant, plan, payload, RUN / "results" / variant, accel, timeout)
    log(f"VM boot: variant {variant} done in {res.seconds:.0f} s")
    kernel = f"{kernel_name(stock)}, " if stock else ""
    header = [f"vm {variant}: {kernel}{accel} ({accel_reason}); userspace after {res.userspace_s} s, "
              f"whole boot {res.seconds:.1f} s; logs in {res.results}"]
    header += [f"vm {variant}: boot {n} went silent for {vm.STALL_SECONDS} s before userspace, after "
               f"{tail!r} (its console: console-stalled-{n}.log); booted again"
               for n, tail in enumerate(res.stalls[:vm.BOOT_ATTEMPTS - 1], 1)]
    output = (res.results / "output").read_text(errors="replace") if (res.results / "output").exists() else ""
    cases = ktap.parse_ksft(output)
    dmesg = (res.results / "dmesg").read_text(errors="replace") if (res.results / "dmesg").exists() else ""
    if not dmesg:
        # The guest never got to send its log: use the console, which has it too.
        dmesg = res.console
    outside = ktap.attribute_splats(dmesg, cases)
    if res.timed_out or res.plan_rc is None:
        why = "timed out" if res.timed_out else f"guest died (qemu exit {res.qemu_rc})"
        if res.timed_out and len(res.stalls) == vm.BOOT_ATTEMPTS:
            why = f"all {vm.BOOT_ATTEMPTS} boots went silent for {vm.STALL_SECONDS} s before userspace"
        cases.append(ktap.Case(f"vm {variant}: boot completes", "fail", reason=why,
                               output=res.console.splitlines()[-60:]))
    cases.append(ktap.Case(f"vm {variant}: no kernel splat outside tests",
                           "fail" if outside else "pass", splats=outside))
    whole_log = kernel_log_case(variant, res.results, dmesg if (res.results / "dmesg").exists() else "")
    if whole_log is not None:
        cases.append(whole_log)
    if (res.results / "kmemleak").exists():
        leaks = (res.results / "kmemleak").read_text(errors="replace").strip()
        cases.append(ktap.Case(f"vm {variant}: kmemleak finds no leak", "fail" if leaks else "pass",
                               output=leaks.splitlines()[:80]))
    elif stock is not None and "flavour" not in stock:
        # Debian's kernels (and the Ubuntu-style one, as Ubuntu's) are built without kmemleak; the
        # test kernel and 6.12 (a flavour of it) have it, and there a missing scan means the plan
        # never got to it.
        cases.append(ktap.Case(f"vm {variant}: kmemleak finds no leak", "skip",
                               reason=f"not applicable: {kernel_name(stock)} has no kmemleak"))
    else:
        cases.append(ktap.Case(f"vm {variant}: kmemleak finds no leak", "fail",
                               reason="no kmemleak scan came back from the guest"))
    return ktap.Group(f"vm: {variant}", header, cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", action="store_true", help="run the main job instead of the tests")
    ap.add_argument("--shell", action="store_true", help="interactive VM shell with the payload")
    ap.add_argument("--variants", help="comma-separated VM variants to boot (default: all)")
    ap.add_argument("--tests", help="comma-separated kselftest names to run (default: all)")
    ap.add_argument("--no-cargo", action="store_true", help="skip cargo test")
    ap.add_argument("--no-packaging", action="store_true",
                    help="skip the host-side packaging tests (the packaging kselftests then skip too)")
    ap.add_argument("--no-vm", action="store_true", help="skip the VM boots")
    ap.add_argument("--build-only", action="store_true", help="build the modules and tests, run nothing")
    ap.add_argument("--timeout", type=int, default=2400, help="seconds per VM boot")
    a = ap.parse_args()
    # A whole run (make check) is held to tests/baseline/; a partial one is not.
    whole = not (a.variants or a.tests or a.no_cargo or a.no_packaging or a.no_vm)

    start = time.monotonic()
    new_run_dir()
    kdir = vm.kernel_dir()
    ksrc = (kdir / "source").resolve()
    build(kdir)
    if a.build_only:
        check_source_unchanged()
        return 0

    if a.shell:
        accel, reason = vm.choose_accel(kdir)
        log(f"shell with {accel} ({reason})")
        return subprocess.call([sys.executable, str(REPO / "tests/vm/vm.py"), "shell", "--payload", str(PAYLOAD)])
    if a.demo:
        import demo
        return demo.main(kdir, PAYLOAD)

    groups = []
    if not a.no_cargo:
        groups.append(cargo_group())
        for name, script in HOST_SCRIPTS:
            groups.append(script_group(name, script))
    only = set(a.tests.split(",")) if a.tests else None
    # With --tests, the packaging tests run only when named ("packaging") or their kselftests are.
    if not a.no_packaging and (only is None or only & ({"packaging"} | set(collection_tests("packaging", ksrc)))):
        groups.append(packaging_group(kdir))
    if not a.no_vm:
        accel, reason = vm.choose_accel(kdir)
        log(f"accelerator: {accel} ({reason})")
        wanted = a.variants.split(",") if a.variants else None
        plans = [(v, vm_plan(v, c, ksrc, only)) for v, c in boots() if not wanted or v in wanted]
        plans = [(v, p) for v, p in plans if p]
        # The boots run side by side, as many as the machine has VM slots; reported in order.
        with concurrent.futures.ThreadPoolExecutor(max_workers=vm.VM_SLOTS) as pool:
            futures = [pool.submit(vm_group, v, p, accel, reason, a.timeout) for v, p in plans]
            groups += [f.result() for f in futures]
    baseline.save(groups, RUN / "leaves.json", whole)
    check_source_unchanged()
    if whole:
        expected = [CARGO_GROUP, *(name for name, _ in HOST_SCRIPTS), PACKAGING_GROUP]
        expected += [f"vm: {v}" for v in VARIANT_ORDER]
        groups.append(baseline.check(groups, expected))
    _, failed, _ = ktap.report(groups, sys.stdout)
    log(f"whole run: {time.monotonic() - start:.0f} s")
    return 1 if failed or not groups else 0


if __name__ == "__main__":
    sys.exit(main())
