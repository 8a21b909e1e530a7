#!/usr/bin/env python3
"""Boot the test kernel in QEMU with the stand-in PCIe topology and run a plan inside it.

The host side of every VM run. It probes whether KVM works here, packs busybox, our /init and a
payload directory into an initramfs, starts QEMU inside the build root with the topology of
tests/vm/topology.toml and waits for the guest to reboot. The guest's /init runs the plan (a shell
script) and sends its output, exit status, result files and dmesg back over the second serial port;
they land as files in the results directory, next to the console log.

    tests/vm/vm.py boot --variant switch --plan plan.sh --payload DIR --results DIR
    tests/vm/vm.py probe          # what accelerator would a run use, and why
    tests/vm/vm.py shell --variant switch-iommu --payload DIR   # interactive guest shell

Only one VM runs at a time on a machine (a lock in the cache serialises them): the machine has two
cores and a TCG guest uses both.
"""

import argparse
import ctypes
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VM_DIR = REPO / "tests" / "vm"
INFRA = REPO / "tests" / "infra"
CACHE = Path(os.environ.get("PEERMEM_CACHE") or
             Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "peermem-rs")
CACHE_WORK = CACHE / "work"
BUILD_ROOT = CACHE / "root"

KVM_PROBE_TIMEOUT = 60
# A healthy boot writes well under a megabyte to the console.
CONSOLE_LIMIT = 32 << 20
# Under TCG a boot has, rarely, gone silent for good before userspace (once in CI, right after
# "PCI: CLS", where the initramfs is unpacked). Healthy boots here are never silent for more than
# 4 s of guest time before /init, so a boot silent for this long before userspace is killed and
# booted again, at most BOOT_ATTEMPTS times in all; the stalled consoles are kept.
STALL_SECONDS = 240
BOOT_ATTEMPTS = 2


def source_state():
    """The commit the tree is at, and whether it has changes not committed: what a published figure
    was measured on ("<sha> clean" or "<sha> dirty"). The reports themselves (docs/, BENCHMARKS.*)
    are what the runs write, not what they run, and do not count."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "--",
                             ".", ":!docs", ":!BENCHMARKS.md", ":!BENCHMARKS.svg",
                             ":!BENCHMARKS.data.xz"],
                            capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    return f"{head.stdout.strip()} {'dirty' if status.stdout.strip() else 'clean'}"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)



def topology():
    with open(VM_DIR / "topology.toml", "rb") as f:
        return tomllib.load(f)


def stock_kernel(variant_name):
    """The [kernels] entry a variant boots ({release, version, ...}), or None for the test kernel.
    An entry with a `flavour` is a kernel built here (tests/infra/build-kernel.sh's
    PEERMEM_KERNEL_FLAVOUR), and its release is the build's: reading it builds the kernel on a cold
    cache."""
    topo = topology()
    name = topo["variants"][variant_name].get("kernel")
    if not name:
        return None
    entry = dict(topo["kernels"][name])
    if "flavour" in entry:
        kdir = kernel_dir(entry["flavour"])
        entry["release"] = (kdir / "include/config/kernel.release").read_text().strip()
        entry["kdir"] = kdir
    return entry


def kernel_image(variant_name, kdir):
    """The kernel QEMU boots for a variant: the test kernel's bzImage, a kernel built here in another
    flavour's bzImage, or a stock kernel's image as its package ships it (tests/infra/stock-kernel.sh
    fetch unpacks it; for the Ubuntu-style kernel, stock-kernel.sh build puts its bzImage in the same
    place)."""
    stock = stock_kernel(variant_name)
    if stock is None:
        return kdir / "arch/x86/boot/bzImage"
    if "kdir" in stock:
        return stock["kdir"] / "arch/x86/boot/bzImage"
    rel = stock["release"]
    return CACHE_WORK / "stock" / rel / "binary/usr/lib/modules" / rel / "vmlinuz"


def kernel_dir(flavour=None):
    """The cached test kernel's build directory, or that of another flavour of
    tests/infra/build-kernel.sh (builds it on first use)."""
    env = dict(os.environ, PEERMEM_KERNEL_FLAVOUR=flavour) if flavour else None
    out = subprocess.run([str(INFRA / "build-kernel.sh")], check=True, stdout=subprocess.PIPE, text=True,
                         env=env)
    return Path(out.stdout.strip().splitlines()[-1])


def base_initramfs():
    """busybox and our /init, as a cpio archive. Cached by content."""
    init = (VM_DIR / "init.sh").read_bytes()
    busybox = BUILD_ROOT / "bin" / "busybox"
    key = hashlib.sha256(init + busybox.read_bytes()).hexdigest()[:16]
    out = CACHE_WORK / "initramfs" / f"base-{key}.cpio"
    if out.exists():
        return out
    stage = CACHE_WORK / "initramfs" / f"stage-{key}"
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "bin").mkdir(parents=True)
    shutil.copy2(busybox, stage / "bin" / "busybox")
    (stage / "init").write_bytes(init)
    (stage / "init").chmod(0o755)
    for d in ("dev", "proc", "sys", "tmp", "results"):
        (stage / d).mkdir()
    tmp = out.with_suffix(".tmp")
    cpio(stage, tmp)
    tmp.rename(out)
    shutil.rmtree(stage)
    return out


def cpio(directory, out):
    """Pack a directory as a newc cpio archive (the initramfs format), owned by root."""
    directory = Path(directory)
    ino = 1
    with open(out, "wb") as f:
        def entry(name, mode, data=b"", nlink=1):
            nonlocal ino
            name_b = name.encode() + b"\0"
            hdr = "070701" + "".join(f"{v:08x}" for v in (
                ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name_b), 0))
            ino += 1
            f.write(hdr.encode() + name_b)
            f.write(b"\0" * (-(110 + len(name_b)) % 4))
            f.write(data)
            f.write(b"\0" * (-len(data) % 4))
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            rel = Path(root).relative_to(directory)
            if str(rel) != ".":
                entry(str(rel), 0o040755, nlink=2)
            for name in sorted(files):
                p = Path(root) / name
                st = p.lstat()
                if p.is_symlink():
                    entry(str(rel / name), 0o120777, os.readlink(p).encode())
                else:
                    entry(str(rel / name), 0o100000 | (st.st_mode & 0o7777), p.read_bytes())
        entry("TRAILER!!!", 0)


def initramfs(payload, plan, results):
    """The base archive followed by one holding the payload under /payload (and the plan): the kernel
    unpacks concatenated archives in order. A payload's rootfs/ goes to the guest's / instead (a
    stock kernel's /lib/modules)."""
    stage = results / "initramfs-stage"
    shutil.rmtree(stage, ignore_errors=True)
    if payload is not None:
        shutil.copytree(payload, stage / "payload", symlinks=True)
        if (stage / "payload" / "rootfs").is_dir():
            for p in (stage / "payload" / "rootfs").iterdir():
                shutil.move(p, stage / p.name)
            (stage / "payload" / "rootfs").rmdir()
    else:
        (stage / "payload").mkdir(parents=True)
    (stage / "payload" / "plan.sh").write_text(plan)
    cpio(stage, results / "payload.cpio")
    shutil.rmtree(stage)
    out = results / "initramfs.cpio"
    with open(out, "wb") as f:
        f.write(base_initramfs().read_bytes())
        f.write((results / "payload.cpio").read_bytes())
    (results / "payload.cpio").unlink()
    return out


def split_serial(results):
    """Turn the guest's ttyS1 stream into files: output, rc (plan.rc), each result file, dmesg."""
    raw = (results / "ttyS1.raw").read_bytes().replace(b"\r\n", b"\n")
    name = None
    parts = {}
    for line in raw.split(b"\n"):
        if line.startswith(b"==peermem== section "):
            name = line.split(b" ", 2)[2].decode(errors="replace").strip()
            parts[name] = []
        elif line.startswith(b"==peermem== rc "):
            parts["plan.rc"] = [line.split()[2]]
            name = None
        elif line.startswith(b"==peermem== end"):
            name = None
        elif name is not None:
            parts[name].append(line)
    for name, lines in parts.items():
        if "/" in name or name.startswith("."):
            continue
        (results / name).write_bytes(b"\n".join(lines) + b"\n")


@dataclass
class BootResult:
    variant: str
    accel: str
    seconds: float
    timed_out: bool
    qemu_rc: int
    plan_rc: int | None          # None: the plan never finished (crash, hang, panic)
    userspace_s: float | None    # guest uptime when /init started
    results: Path
    stalls: list = field(default_factory=list)  # last console line of each boot that stalled

    @property
    def console(self):
        return (self.results / "console.log").read_text(errors="replace")


def machine_config(overrides=None):
    """The [machine] table of topology.toml, with the runner's overrides: the `overrides` dict a
    caller passes (the stress run's larger GPU BAR), then PEERMEM_VM_MEMORY_MIB and
    PEERMEM_GPU_BAR_MIB from the environment. The GPU BAR is QEMU's ivshmem BAR: a power of two."""
    m = dict(topology()["machine"])
    m.update(overrides or {})
    for key, env in (("memory_mib", "PEERMEM_VM_MEMORY_MIB"), ("gpu_bar_mib", "PEERMEM_GPU_BAR_MIB")):
        if os.environ.get(env):
            m[key] = int(os.environ[env])
    bar = m["gpu_bar_mib"]
    if bar <= 0 or bar & (bar - 1):
        raise SystemExit(f"gpu_bar_mib {bar}: the ivshmem BAR must be a power of two")
    return m


def qemu_args(variant_name, accel, kdir, initrd, results, cmdline_extra=(), interactive=False,
              machine_overrides=None):
    topo = topology()
    machine = machine_config(machine_overrides)
    variant = topo["variants"][variant_name]
    layout = topo["layouts"][variant["layout"]]
    args = ["qemu-system-x86_64", "-machine", "q35", "-m", str(machine["memory_mib"]),
            "-smp", str(machine["cpus"]), "-no-reboot", "-nodefaults", "-display", "none"]
    if accel == "kvm":
        args += ["-accel", "kvm", "-cpu", "host"]
    else:
        args += ["-accel", "tcg,thread=multi", "-cpu", "max"]
    # no5lvl: TCG's "max" CPU offers 5-level paging, and an interrupt that lands while the boot CPU
    # re-reads its feature words (identify_cpu) then sees an address KASAN calls wild and floods the
    # console (seen once in ~10 boots here). Four levels are plenty for a 1 GiB guest.
    # log_buf_len: the runner reads the guest's whole kernel log (dmesg) at the end of a boot to find
    # splats; the config's 128 KiB ring loses the first reports of a boot with many (a KASAN report
    # is a few KiB), which would let a test that caused one pass. The guest also sends the ring's
    # oldest record, and run_tests.py fails a boot whose ring wrapped or whose dmesg (busybox's
    # reads at most 16 MiB) did not start there.
    cmdline = ["console=ttyS0", "rdinit=/init", "panic=-1", "kasan_multi_shot", "no_hash_pointers",
               "hung_task_panic=0", "no5lvl", "log_buf_len=64M"]
    if variant["iommu"]:
        # The IOMMU must be created before the devices it translates for.
        args += ["-device", "intel-iommu,intremap=off"]
        cmdline += ["intel_iommu=on", "iommu.strict=1"]
    gpu_mem = "gpumem"
    args += ["-object", f"memory-backend-memfd,id={gpu_mem},size={machine['gpu_bar_mib']}M,share=on"]
    for dev in layout["devices"]:
        args += ["-device", dev.format(gpu_mem=gpu_mem)]
    args += ["-kernel", str(kernel_image(variant_name, kdir)), "-initrd", str(initrd),
             "-append", " ".join([*cmdline, *cmdline_extra])]
    # ttyS0: the console. ttyS1: the results channel.
    if interactive:
        args += ["-serial", "mon:stdio"]
    else:
        args += ["-serial", "stdio", "-monitor", "none"]
    args += ["-serial", f"file:{results}/ttyS1.raw"]
    return args


def die_with_parent():
    """Runs in the QEMU child before exec: if this runner dies (killed, timed out), QEMU gets
    SIGKILL instead of running on, orphaned, for the rest of a two-core machine's day."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# How many guests may run at once on this machine. A test guest keeps about one of its two vCPUs
# busy (the tests run one after another), so a two-core machine runs two guests in about the time
# of one; more would only slow each down.
VM_SLOTS = max(1, min(2, os.cpu_count() or 1))


class VmLock:
    """Limit the VMs running on this machine to VM_SLOTS, across processes and threads: each
    guest holds one of the lock files vm.lock.<slot> (flock belongs to an open file, so two
    threads of one process exclude each other too)."""

    def __enter__(self):
        CACHE.mkdir(parents=True, exist_ok=True)
        said = False
        while True:
            for slot in range(VM_SLOTS):
                f = open(CACHE / f"vm.lock.{slot}", "w")
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.f = f
                    return self
                except BlockingIOError:
                    f.close()
            if not said:
                log(f"{VM_SLOTS} VM(s) already running on this machine; waiting")
                said = True
            time.sleep(1)

    def __exit__(self, *exc):
        self.f.close()


def boot(variant, plan, payload, results, accel, timeout, kdir=None, echo=False, cmdline_extra=(),
         machine_overrides=None):
    """Boot once, run `plan` (a shell script text) in the guest, return a BootResult.
    `machine_overrides` changes the [machine] table of topology.toml for this boot."""
    kdir = kdir or kernel_dir()
    results = Path(results).resolve()
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    initrd = initramfs(Path(payload).resolve() if payload else None, plan, results)
    args = qemu_args(variant, accel, kdir, initrd, results, cmdline_extra,
                     machine_overrides=machine_overrides)
    (results / "qemu-args").write_text("\n".join(args) + "\n")
    env = dict(os.environ, IN_ROOT_BINDS=str(results))
    with VmLock():
        run, stalls, seconds = run_qemu_watched([str(INFRA / "in-root"), *args], env, results, timeout,
                                                echo, variant)
    timed_out, qemu_rc, userspace_s = run.timed_out or run.stalled, run.qemu_rc, run.userspace_s
    if (results / "ttyS1.raw").exists():
        split_serial(results)
    rc_file = results / "plan.rc"
    plan_rc = int(rc_file.read_text()) if rc_file.exists() else None
    return BootResult(variant, accel, seconds, timed_out, qemu_rc, plan_rc, userspace_s, results, stalls)


def run_qemu_watched(command, env, results, timeout, echo, variant):
    """Run QEMU (`command`), and again while it stalls before userspace, at most BOOT_ATTEMPTS
    times. Returns (the last QemuRun, the last console line of each stalled run, seconds); the
    console of a stalled run that was followed by another is kept as console-stalled-N.log."""
    stalls = []
    start = time.monotonic()
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        run = run_qemu(command, env, results, timeout - (time.monotonic() - start), echo)
        if not run.stalled:
            break
        tail = (results / "console.log").read_bytes().rstrip().rsplit(b"\n", 1)[-1]
        stalls.append(tail.decode(errors="replace").strip())
        log(f"boot {variant}: no console output for {STALL_SECONDS} s before userspace, after {stalls[-1]!r}")
        if attempt == BOOT_ATTEMPTS:
            break
        # Nothing of ours ran yet (the modules load from /init), so this is the emulator or the
        # kernel's own boot, not a result: keep that console and boot once more.
        (results / "console.log").rename(results / f"console-stalled-{attempt}.log")
        (results / "ttyS1.raw").unlink(missing_ok=True)
    return run, stalls, time.monotonic() - start


@dataclass
class QemuRun:
    timed_out: bool
    stalled: bool                # silent for STALL_SECONDS before userspace, and killed
    qemu_rc: int
    userspace_s: float | None


def run_qemu(command, env, results, timeout, echo):
    """One QEMU process: copy its console to results/console.log until it exits, floods its
    console, outlives `timeout` or stalls before userspace."""
    userspace_s = None
    timed_out = stalled = False
    with open(results / "console.log", "wb") as console:
        start = last_output = time.monotonic()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=die_with_parent)
        os.set_blocking(proc.stdout.fileno(), False)
        buf = b""
        while True:
            chunk = None
            try:
                chunk = proc.stdout.read()
            except BlockingIOError:
                pass
            now = time.monotonic()
            if chunk:
                last_output = now
                console.write(chunk)
                console.flush()
                if echo:
                    sys.stderr.buffer.write(chunk)
                    sys.stderr.flush()
                buf = (buf + chunk)[-4096:]
                if userspace_s is None and b"peermem-vm: userspace after" in buf:
                    line = buf.split(b"peermem-vm: userspace after", 1)[1].split(b"\n", 1)[0]
                    try:
                        userspace_s = float(line.split()[0])
                    except (ValueError, IndexError):
                        pass
            elif chunk == b"" and proc.poll() is not None:
                break
            stalled = userspace_s is None and now - last_output > STALL_SECONDS
            # A guest that floods its console (a splat in a loop) would otherwise run until the
            # timeout; the first megabytes hold the story.
            timed_out = now - start > timeout or console.tell() > CONSOLE_LIMIT
            if stalled or timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.05)
        qemu_rc = proc.wait()
    return QemuRun(timed_out, stalled, qemu_rc, userspace_s)


def probe_kvm(kdir):
    """Can this machine boot the test kernel under KVM? Returns (usable, reason).

    /dev/kvm may exist while nested KVM hangs the guest at kernel decompression, so the only
    reliable probe is a real boot with a short timeout. The answer is cached per machine boot.
    """
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "no usable /dev/kvm"
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    cache = CACHE / f"kvm-probe-{boot_id}-{kdir.name}"
    if cache.exists():
        usable, reason = cache.read_text().split("\n", 1)
        return usable == "yes", reason.strip() + " (cached)"
    res = boot("switch", "true\n", None, CACHE_WORK / "kvm-probe", "kvm", KVM_PROBE_TIMEOUT, kdir)
    if res.plan_rc == 0:
        usable, reason = True, f"KVM boot reached userspace in {res.seconds:.1f} s"
    elif res.timed_out:
        tail = res.console.strip().splitlines()[-1:] or ["<no console output>"]
        usable, reason = False, f"KVM boot hung for {KVM_PROBE_TIMEOUT} s (last console line: {tail[0]!r})"
    else:
        errors = [l for l in res.console.splitlines() if "qemu-system" in l or "error" in l.lower()]
        usable, reason = False, f"KVM boot failed (qemu exit {res.qemu_rc}: {errors[-1] if errors else 'no output'})"
    cache.write_text(("yes" if usable else "no") + "\n" + reason + "\n")
    return usable, reason


def choose_accel(kdir):
    """PEERMEM_ACCEL=kvm|tcg forces; otherwise probe KVM and fall back to TCG."""
    forced = os.environ.get("PEERMEM_ACCEL", "auto")
    if forced in ("kvm", "tcg"):
        return forced, f"forced by PEERMEM_ACCEL={forced}"
    usable, reason = probe_kvm(kdir)
    return ("kvm" if usable else "tcg"), reason


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("boot", help="boot once and run a plan")
    b.add_argument("--variant", default="switch")
    b.add_argument("--plan", required=True, help="shell script to run in the guest")
    b.add_argument("--payload", required=True)
    b.add_argument("--results", required=True)
    b.add_argument("--timeout", type=int, default=1800)
    b.add_argument("--echo", action="store_true", help="copy the console to stderr")
    sub.add_parser("probe", help="report which accelerator a run would use")
    s = sub.add_parser("shell", help="interactive guest shell on the console")
    s.add_argument("--variant", default="switch")
    s.add_argument("--payload", default=str(REPO / ".build" / "payload"))
    a = ap.parse_args()

    kdir = kernel_dir()
    if a.cmd == "probe":
        accel, reason = choose_accel(kdir)
        print(f"accelerator: {accel} ({reason})")
        return 0
    if a.cmd == "boot":
        accel, reason = choose_accel(kdir)
        log(f"booting variant {a.variant} with {accel} ({reason})")
        res = boot(a.variant, Path(a.plan).read_text(), a.payload, a.results, accel, a.timeout, kdir,
                   echo=a.echo)
        log(f"boot {'timed out' if res.timed_out else 'ended'} after {res.seconds:.1f} s, "
            f"userspace at {res.userspace_s} s, plan exit {res.plan_rc}")
        return 0 if res.plan_rc == 0 else 1
    if a.cmd == "shell":
        accel, reason = choose_accel(kdir)
        results = REPO / ".build" / "shell-results"
        shutil.rmtree(results, ignore_errors=True)
        results.mkdir(parents=True)
        initrd = initramfs(Path(a.payload).resolve(), "", results)
        args = qemu_args(a.variant, accel, kdir, initrd, results,
                         cmdline_extra=["peermem.shell=1"], interactive=True)
        env = dict(os.environ, IN_ROOT_BINDS=str(results))
        with VmLock():
            return subprocess.call([str(INFRA / "in-root"), *args], env=env)
    return 2


if __name__ == "__main__":
    sys.exit(main())
