#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make bench`: registration cost of peermem-rs against NVIDIA's nvidia-peermem 550, side by side.

Builds the benchmark kernel (tests/infra/build-kernel.sh with PEERMEM_KERNEL_FLAVOUR=bench: the test
kernel without its debug options, with /proc/slabinfo), the stand-ins, peermem_rs.ko and NVIDIA's
nvidia-peermem.ko against it, and the guest program tests/bench/bench.c; then boots `switch-iommu`
VMs (the emulated IOMMU on, so DMA mapping costs what it really costs there) with a GPU BAR big
enough for 1 GiB registrations, --boots of them at least. Three clients, each with the stand-ins'
cost model off and on:

  rs-i  peermem-rs, invalidating client    (persistent_api_support=0)
  nv    nvidia-peermem 550                 (invalidating only: 550 has no persistent option)
  rs-p  peermem-rs, persistent client      (persistent_api_support=1)

Within a boot, after a warm-up block of each client whose records are set aside, the six (client,
cost model) pairs run in many small blocks, each round of six in an order drawn from a seeded random
generator (the seed is in the report), every block on freshly loaded modules. A block measures
registration and deregistration latency per size (back to back, then counted: the provider's
counters and peermem-rs's own per-step time, docs/time-accounting.md, read around each call),
invalidation latency (invalidating clients), registration throughput with 1, 2 and 8 threads, and
(cost model off) kernel memory per live registration from /proc/slabinfo, cache by cache.

Every record of every boot (but for the warm-ups) is kept, in .build/bench/boots/N/ and in
BENCHMARKS.data.xz at the top of the repository (the input of --report-only). A boot that fails the
validity gate (`gate`: for some client, size and phase where the noise lets it judge, even the upper
end of the 95% interval of "cost model on" minus "off" is below 90% of the modelled cost: the two
halves then ran under different conditions) is kept, reported as rejected, left out of the figures, and another boot is run, up to --max-rejected times. Figures: per boot the
median of each (client, model, size, phase); ratios per boot; the report gives the median of the
per-boot figures, their range, and a 95% confidence interval from a two-level bootstrap (boots
resampled, then samples within each boot). Writes BENCHMARKS.md and BENCHMARKS.svg. Never part of
make check: TCG figures are noisy and never gate CI.

    tests/bench/bench.py [--boots N] [--blocks N] [--runs N] [--counted-runs N] [--sizes 64K,...]
                         [--seconds S] [--mem-n N] [--bar-mib M] [--seed S] [--max-rejected N]
    tests/bench/bench.py --report-only      # rewrite BENCHMARKS.md from BENCHMARKS.data.xz
    tests/bench/bench.py --self-test        # the unit checks of the statistics and the report

Exit status: 0 when every boot ran without an error (targets missed are reported, not failed);
non-zero on any error (a failed registration is an error, not a data point; so is a kernel splat).
"""

import argparse
import lzma
import io
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
os.environ.setdefault("PEERMEM_KERNEL_FLAVOUR", "bench")
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "vm"))

import ktap  # noqa: E402
import vm  # noqa: E402

OUT = REPO / ".build" / "bench"
PAYLOAD = OUT / "payload"
SRC = OUT / "src"
BOOTS = OUT / "boots"
DOC = REPO / "BENCHMARKS.md"
SVG = REPO / "BENCHMARKS.svg"
DATA = REPO / "BENCHMARKS.data.xz"
GPU_PAGE = 64 << 10
SHORT = ["gp", "gpp", "pp", "ppp", "dm", "du"]  # the provider's six entry points, bench.c's order
CLIENTS = [  # label, description, invalidating
    ("rs-i", "peermem-rs, invalidating client", True),
    ("nv", "nvidia-peermem 550", True),
    ("rs-p", "peermem-rs, persistent client", False),
]
LABELS = [c[0] for c in CLIENTS]
NAMES = {c[0]: c[1] for c in CLIENTS}
DEFAULT_SIZES = "64K,256K,1M,4M,16M,64M,256M,1G"
NOTES = "<!-- notes: hand-written, kept by bench.py across runs; check them against the figures above -->"
THREADS = [1, 2, 8]
BOOTSTRAP = 2000
# The validity gate: a boot is rejected where, with 97.5% confidence (the upper end of a 95%
# interval), "model on" cost less extra over "model off" than this share of what the model adds...
GATE_SHARE = 0.9
# ...judged only in cells whose interval's half-width is at most this share of what the model adds,
# so that a cell where the model did not act at all (on - off = 0) fails there (see `gate`).
BLIND_SHARE = 0.5
# NVIDIA's own persistent client (nvidia-peermem 560 and later, persistent_api_support=1, its
# default, client nv_mem_client_nc), read in NVIDIA/open-gpu-kernel-modules,
# kernel-open/nvidia-peermem/nvidia-peermem.c. Two shapes:
# - 560.28.03 to 575.64.05: its acquire is nv_mem_acquire (560.28.03 lines 198-243; the client at
#   479-487), a non-persistent pin with a dummy callback and its unpin, to probe; its get_pages,
#   nv_mem_get_pages_nc (446-477), pins persistently.
# - 580.65.06 to 595.45.04: its acquire is nv_mem_acquire_nc (595.45.04 lines 246-298), a
#   persistent pin and its unpin, to probe; nv_mem_get_pages_nc (501-532) pins persistently again.
# Both: nv_dma_map (595.45.04 300-355) maps; deregistration unmaps and unpins persistently
# (nv_mem_put_pages_common, 383-426).
NV_PERSISTENT_CALLS = [("nvidia-peermem 560.28.03-575.64.05", "gp1 gpp1 pp1 dm1", "ppp1 du1"),
                       ("nvidia-peermem 580.65.06-595.45.04", "gpp2 ppp1 dm1", "ppp1 du1")]

PLAN = r"""
set -u
M=/payload/modules
B=/payload/bench
R=/results/raw.txt
T=/sys/module/peermem_rs/parameters/time_accounting
: > $R
fail() {{ echo "BENCH-FAIL: $*"; exit 1; }}
{{ uname -r; nproc; cat /proc/cmdline; ls /sys/kernel/iommu_groups | wc -l; }} > /results/env.txt
unload() {{
  for m in peermem_rs nvidia_peermem peer_mem_host nvidia_p2p_standin; do
    # peermem-rs's work item may still hold a lingering registration's last reference for a
    # moment after the free that called it back: give it 5 s.
    for i in $(seq 50); do [ "$(cat /sys/module/$m/refcnt 2>/dev/null || echo 0)" = 0 ] && break; sleep 0.1; done
    [ -e /sys/module/$m/initstate ] && {{ rmmod $m || fail "rmmod $m"; }}
  done
}}
# One block: the client alone on freshly loaded stand-ins, the cost model as asked.
block() {{
  n=$1 label=$2 cost=$3 out=${{4:-$R}}
  L=$label:$cost
  echo "blk $n $label $cost" >> $out
  insmod $M/nvidia_p2p_standin.ko cost_model=$cost || fail "insmod nvidia_p2p_standin"
  insmod $M/peer_mem_host.ko || fail "insmod peer_mem_host"
  case $label in
    rs-p) insmod $M/peermem_rs.ko persistent_api_support=1 peerdirect_support=0 || fail "insmod peermem_rs" ;;
    rs-i) insmod $M/peermem_rs.ko persistent_api_support=0 peerdirect_support=0 || fail "insmod peermem_rs" ;;
    nv) insmod $M/nvidia-peermem.ko || fail "insmod nvidia-peermem" ;;
  esac
  # One pass of the same runs, discarded, before any is kept: right after the modules are loaded
  # a block's first sizes ran slower, peermem-rs's more than nv's (issue 23's notes); a node runs
  # its client for days, so the figures are of the settled module, every client alike.
  $B latency-plain $L {runs} {sizes} > /dev/null || fail "settling pass $L"
  $B latency-plain $L {runs} {sizes} >> $out || fail "latency $L"
  $B latency-first $L {runs} {first_sizes} >> $out || fail "first-registration latency $L"
  # peermem-rs's step accounting only while counted: the back-to-back runs above go without it.
  [ -e $T ] && {{ echo 1 > $T || fail "time_accounting on"; }}
  $B latency $L {counted_runs} {sizes} >> $out || fail "counted latency $L"
  [ -e $T ] && {{ echo 0 > $T || fail "time_accounting off"; }}
  case $label in rs-i|nv)
    $B invalidation $L {runs} {inv_sizes} >> $out || fail "invalidation $L" ;;
  esac
  $B throughput $L {seconds} 64K {threads} >> $out || fail "throughput $L"
  if [ $cost = 0 ]; then
    $B memory $L {mem_n} 64K >> $out || fail "memory $L"
  fi
  unload
}}
# A block of each client first, its records set aside: the first block after the boot runs colder
# (caches, the IOMMU's page tables, the allocator's slabs) than every later one.
for label in rs-i nv rs-p; do block 0 $label 0 /results/warmup.txt; done
t0=$(cut -d' ' -f1 /proc/uptime)
{blocks}
echo "bench: {nblocks} blocks took $(awk -v a=$t0 -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN {{ print b - a }}') s"
echo BENCH-DONE
"""


def schedule(rng, blocks):
    """`blocks` rounds; each round every (client, cost model) pair once, in an order drawn anew."""
    pairs = [(c, cost) for c in LABELS for cost in (0, 1)]
    out = []
    for _ in range(blocks):
        rng.shuffle(pairs)
        out += pairs
    return out


# ---- statistics (unit-checked by --self-test) ----

def median(xs):
    xs = sorted(xs)
    if not xs:
        raise ValueError("median of nothing")
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def percentile(xs, p):
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it
    (with fewer than 100 values, p99 is the largest: call it the maximum then)."""
    xs = sorted(xs)
    if not xs:
        raise ValueError("percentile of nothing")
    rank = max(1, math.ceil(p / 100 * len(xs)))
    return xs[rank - 1]


def ratio(a, b):
    return a / b if b else float("inf")


def bootstrap(groups, per_boot, seed, iters=BOOTSTRAP):
    """A 95% interval for "the median over boots of per_boot(boot's samples...)".

    `groups`: one tuple of sample lists per boot (for a ratio, the two clients' samples). Each
    iteration draws the boots with replacement, then within each drawn boot each sample list with
    replacement, and takes the median over the drawn boots of per_boot(...). Returns (low, high),
    the 2.5th and 97.5th percentiles of the iterations."""
    rng = random.Random(seed)
    n = len(groups)
    vals = []
    for _ in range(iters):
        per = []
        for _ in range(n):
            g = groups[rng.randrange(n)]
            per.append(per_boot(*(rng.choices(xs, k=len(xs)) for xs in g)))
        vals.append(median(per))
    return percentile(vals, 2.5), percentile(vals, 97.5)


class Figure:
    """One figure over the accepted boots: the median of its per-boot values, their range, the
    bootstrap interval, and the per-boot values themselves."""

    def __init__(self, groups, per_boot, seed):
        self.per_boot = [per_boot(*g) for g in groups]
        self.value = median(self.per_boot)
        self.lo, self.hi = min(self.per_boot), max(self.per_boot)
        self.ci = bootstrap(groups, per_boot, seed) if len(groups) > 1 else (self.value, self.value)

    def fmt(self, f):
        return f"{f(self.value)} [{f(self.ci[0])}, {f(self.ci[1])}]"


def ratio_of_medians(a, b):
    return ratio(median(a), median(b))


def rate(samples):
    """Registrations per second of (registrations, ns) samples, pooled."""
    return sum(r for r, _ in samples) / (sum(ns for _, ns in samples) / 1e9)


def ratio_of_rates(a, b):
    return ratio(rate(a), rate(b))


def size_name(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}iB"
    return f"{n} B"


def fmt_us(ns):
    us = ns / 1000
    return f"{us:.0f}" if abs(us) >= 100 else f"{us:.1f}" if abs(us) >= 10 else f"{us:.2f}"


def fmt_r(r):
    return f"{r:.2f}"


def fmt_against(limit, value, bad):
    """Two decimals, or three where two would show a missed target as the target itself (a 1.004x
    against at most 1.0x read "1.00 ✗")."""
    if bad and fmt_r(value) == fmt_r(limit):
        return lambda r: f"{r:.3f}"
    return fmt_r


def seed_of(*key):
    """A stable seed per figure, so that --report-only reproduces every interval."""
    return sum((i + 1) * ord(ch) for i, ch in enumerate(repr(key))) & 0xFFFFFFFF


# ---- parsing the guest's records ----

def parse(text, boot=0):
    """One boot's raw records into dicts, each with its boot and block. Malformed lines are an
    error."""
    out = {k: [] for k in ("lat", "latp", "latf", "latfc", "latpc", "inv", "tput", "mem", "slab", "steps", "blk",
                           "clr")}
    block = 0
    for n, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if not f:
            continue
        try:
            if f[0] == "blk":
                assert len(f) == 4 and f[2] in LABELS, "field layout"
                block = int(f[1])
                out["blk"].append({"boot": boot, "block": block, "client": f[2], "cost": int(f[3])})
                continue
            label, cost = f[1].split(":")
            base = {"boot": boot, "block": block, "client": label, "cost": int(cost)}
            if f[0] == "lat":
                assert f[6] == "reg" and f[20] == "dereg" and len(f) == 34, "field layout"
                r = dict(base, size=int(f[2]), run=int(f[3]), reg_ns=int(f[4]), dereg_ns=int(f[5]))
                for phase, at in (("reg", 7), ("dereg", 21)):
                    r[phase + "_calls"] = [int(x) for x in f[at:at + 6]]
                    r[phase + "_fn_ns"] = [int(x) for x in f[at + 6:at + 12]]
                    r[phase + "_model_ns"] = int(f[at + 12])
                out["lat"].append(r)
            elif f[0] in ("latp", "latf"):
                assert len(f) == 6, "field layout"
                out[f[0]].append(dict(base, size=int(f[2]), run=int(f[3]), reg_ns=int(f[4]),
                                        dereg_ns=int(f[5])))
            elif f[0] in ("latfc", "latpc"):
                assert f[4] == "cycles" and len(f) == 18, "field layout"
                out[f[0]].append(dict(base, size=int(f[2]), cycles=int(f[3]),
                                         calls=[int(x) for x in f[5:11]],
                                         fn_ns=[int(x) for x in f[11:17]], model_ns=int(f[17])))
            elif f[0] == "inv":
                assert f[5] == "free" and len(f) == 19, "field layout"
                out["inv"].append(dict(base, size=int(f[2]), ns=int(f[4]),
                                       calls=[int(x) for x in f[6:12]], fn_ns=[int(x) for x in f[12:18]]))
            elif f[0] == "tput":
                assert len(f) == 6, "field layout"
                out["tput"].append(dict(base, size=int(f[2]), threads=int(f[3]), regs=int(f[4]), ns=int(f[5])))
            elif f[0] == "mem":
                assert len(f) == 6, "field layout"
                out["mem"].append(dict(base, size=int(f[2]), n=int(f[3]), before_kb=int(f[4]),
                                       after_kb=int(f[5])))
            elif f[0] == "slab":
                assert len(f) == 8, "field layout"
                out["slab"].append(dict(base, size=int(f[2]), n=int(f[3]), cache=f[4], objsize=int(f[5]),
                                        before=int(f[6]), after=int(f[7])))
            elif f[0] == "clr":
                assert len(f) == 5 and f[2] in ("latp", "lat", "latf", "inv"), "field layout"
                out["clr"].append(dict(base, kind=f[2], size=int(f[3]), ns=int(f[4])))
            elif f[0] == "steps":
                assert f[4] in ("reg", "dereg"), "field layout"
                steps = {}
                for item in f[5:]:
                    name, calls, ns = item.rsplit(":", 2)
                    steps[name] = (int(calls), int(ns))
                out["steps"].append(dict(base, size=int(f[2]), run=int(f[3]), phase=f[4], steps=steps))
            else:
                raise ValueError(f"unknown record {f[0]}")
        except (ValueError, IndexError, AssertionError) as e:
            raise SystemExit(f"raw record {n} of boot {boot} is malformed ({e}): {line}")
    return out


def merge(parts):
    out = {k: [] for k in parts[0]} if parts else {}
    for p in parts:
        for k, v in p.items():
            out[k] += v
    return out


def load_data(path):
    """BENCHMARKS.data.xz: '# boot N STATUS: reason' headers, each followed by that boot's raw
    records; '# meta KEY VALUE' lines before the first boot. Returns (meta, [(boot, status,
    reason, text)])."""
    meta, boots, cur = {}, [], None
    with lzma.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("# meta "):
                k, _, v = line[7:].rstrip("\n").partition(" ")
                meta[k] = v
            elif line.startswith("# boot "):
                m = re.match(r"# boot (\d+) (\w+): ?(.*)", line.rstrip("\n"))
                cur = [int(m.group(1)), m.group(2), m.group(3), []]
                boots.append(cur)
            elif cur is not None:
                cur[3].append(line)
    return meta, [(b, st, why, "".join(t)) for b, st, why, t in boots]


def save_data(path, meta, boots):
    # xz, not gzip: 9 boots of records are 6.8 MB of text, 1.28 MB gzipped and 0.77 MB in xz, and
    # the file is committed. The same records make the same file (no timestamp in an xz stream).
    out = io.StringIO()
    for k, v in meta.items():
        out.write(f"# meta {k} {v}\n")
    for b, st, why, text in boots:
        out.write(f"# boot {b} {st}: {why}\n")
        out.write(text if text.endswith("\n") or not text else text + "\n")
    Path(path).write_bytes(lzma.compress(out.getvalue().encode("utf-8"), preset=9 | lzma.PRESET_EXTREME))


# ---- from records to figures ----

PHASES = ("reg", "dereg")


def latency_groups(data, boots, kind="latp"):
    """(client, cost, size, phase) -> {boot: [ns, ...]} from the back-to-back runs (`kind` latp:
    one buffer registered again and again; latf: each run a first registration)."""
    g = {}
    for r in data.get(kind, []):
        if r["boot"] in boots:
            for phase in PHASES:
                g.setdefault((r["client"], r["cost"], r["size"], phase), {}).setdefault(
                    r["boot"], []).append(r[phase + "_ns"])
    return g


def counted_groups(data, boots):
    """(client, cost, size) -> the counted runs' records (lat), of `boots`."""
    g = {}
    for r in data["lat"]:
        if r["boot"] in boots:
            g.setdefault((r["client"], r["cost"], r["size"]), []).append(r)
    return g


def block_groups(data, boot):
    """(client, cost, size, phase) -> [[ns of one block's runs], ...] of one boot."""
    g = {}
    for r in data["latp"]:
        if r["boot"] == boot:
            for phase in PHASES:
                g.setdefault((r["client"], r["cost"], r["size"], phase), {}).setdefault(
                    r["block"], []).append(r[phase + "_ns"])
    return {k: [v[b] for b in sorted(v)] for k, v in g.items()}


def block_bootstrap(a, b, seed, iters=1000):
    """A 95% interval for median(a) - median(b), a and b each a list of blocks (lists of runs):
    each draw takes the blocks with replacement, then the runs within each drawn block, so that
    what differs from block to block (the modules reloaded, whatever else the guest and the host
    did meanwhile) widens the interval as much as it moves the medians."""
    rng = random.Random(seed)

    def draw(blocks):
        out = []
        for _ in blocks:
            blk = blocks[rng.randrange(len(blocks))]
            out += rng.choices(blk, k=len(blk))
        return median(out)
    vals = [draw(a) - draw(b) for _ in range(iters)]
    return percentile(vals, 2.5), percentile(vals, 97.5)


def gate(data, boot):
    """The validity gate of one boot (issue 23: "model on" minus "model off" must be at least the
    modelled cost minus a tolerance). Per (client, size, phase) cell: the modelled cost (the
    stand-in's own count of its cost model's time, median of the boot's counted runs), the point
    estimate median(on) - median(off) over the boot's back-to-back runs, and its 95% interval
    (`block_bootstrap`: blocks, then runs within them).
    - A cell whose half-width exceeds BLIND_SHARE of the modelled cost is blind and only counted:
      there a model that did not act at all (on - off = 0) would pass with a chance above 6%
      (6-50% for half-widths between half the cost and 90% of it, 50% or more above).
    - A judged cell fails when even the interval's upper end is below GATE_SHARE of the modelled
      cost: the model-on half then cost less extra than the model adds, beyond what moves from
      block to block. In a judged cell a model that did not act fails with a chance of about 94%
      or more (the point estimate would have to land 1.57 standard errors high), while a cell
      whose halves ran alike (on - off = the model) fails with a chance of at most 2.5%. The
      third rule, which failed a cell when the point estimate alone was short, failed such a cell
      with a chance of up to 42% (at a half-width equal to the cost; 35% at half of it) and
      rejected 6 of the 9 boots of 6818d86's run, failing 10 of their 198 judged cells, short by
      1.6-31 µs of 34.6-271 µs needed. This rule was written after that run's data were seen;
      a run measured under it is its test.
    No upper bound: a call with the model on waits on a lock a busy-waiting holder keeps, and its
    busy wait ends late, so on - off above the model is expected. Returns (judged cells, blind
    cells, failed cells), each (margin_ns, needed_ns, client, size, phase), margin = the upper end
    - needed."""
    lat = block_groups(data, boot)
    model = {}
    for r in data["lat"]:
        if r["boot"] == boot and r["cost"] == 1:
            for phase in PHASES:
                model.setdefault((r["client"], r["size"], phase), []).append(r[phase + "_model_ns"])
    judged, blind, failed = [], [], []
    for (client, size, phase), m in sorted(model.items()):
        on, off = lat.get((client, 1, size, phase)), lat.get((client, 0, size, phase))
        if not on or not off:
            continue
        mod = median(m)
        lo, hi = block_bootstrap(on, off, seed_of("gate", boot, client, size, phase))
        cell = (hi - GATE_SHARE * mod, GATE_SHARE * mod, client, size, phase)
        verdict = judge_cell(lo, hi, mod)
        if verdict == "blind":
            blind.append(cell)
            continue
        judged.append(cell)
        if verdict == "failed":
            failed.append(cell)
    return judged, blind, failed


def judge_cell(lo, hi, modelled):
    """`gate`'s rule for one cell, from the 95% interval [lo, hi] of on - off and the modelled
    cost: 'blind', 'failed' or 'passed'."""
    if (hi - lo) / 2 > BLIND_SHARE * modelled:
        return "blind"
    return "failed" if hi < GATE_SHARE * modelled else "passed"


def boot_status(data, boot):
    """'accepted' or 'rejected', by the gate, and why."""
    _, _, failed = gate(data, boot)
    if not failed:
        return "accepted", ""
    return "rejected", "; ".join(f"{c} {p} {size_name(z)}: {fmt_us(m + need)} µs of the {fmt_us(need)} needed"
                                 for m, need, c, z, p in failed[:4]) + (
        f"; {len(failed) - 4} more" if len(failed) > 4 else "")


def memory_groups(data, boots):
    """client -> {boot: [bytes per registration, one per block]} from the slab caches."""
    per_block = {}
    for r in data["slab"]:
        if r["boot"] in boots:
            key = (r["client"], r["boot"], r["block"])
            per_block[key] = per_block.get(key, 0) + (r["after"] - r["before"]) * r["objsize"] / r["n"]
    # A block whose registrations moved no cache at all has no slab records: count it as 0.
    for r in data["mem"]:
        if r["boot"] in boots:
            per_block.setdefault((r["client"], r["boot"], r["block"]), 0.0)
    g = {}
    for (client, boot, _), v in sorted(per_block.items()):
        g.setdefault(client, {}).setdefault(boot, []).append(v)
    return g


def cache_breakdown(data, boots):
    """client -> cache -> (object bytes, median objects per registration over the blocks)."""
    out, blocks = {}, {}
    for r in data["mem"]:
        if r["boot"] in boots:
            blocks.setdefault(r["client"], set()).add((r["boot"], r["block"]))
    per = {}
    for r in data["slab"]:
        if r["boot"] in boots:
            per.setdefault((r["client"], r["cache"], r["objsize"]), {})[(r["boot"], r["block"])] = \
                (r["after"] - r["before"]) / r["n"]
    for (client, cache, objsize), v in per.items():
        vals = [v.get(b, 0.0) for b in sorted(blocks.get(client, ()))]
        out.setdefault(client, {})[cache] = (objsize, median(vals))
    return out


# ---- where the time goes ----

# peermem-rs's step accounting (src/timing.rs, debugfs `time`): "ENTRY.STEP" names.
def step_kind(name):
    """'total' (an entry point, whole), 'own' (its total minus the time outside the module, as the
    module derives it), 'provider' (an nvidia_p2p_* call), 'calibration' (timing.clock_read), or
    'inner' (a step inside an entry point)."""
    entry, _, step = name.partition(".")
    if entry == "timing":
        return "calibration"
    if step in ("total", "own"):
        return step
    if step.startswith("nvidia_p2p_"):
        return "provider"
    return "inner"


def where_time_goes(data, accs, sizes, lat):
    """The report's "Where the time goes"; `lat`: latency_groups of the accepted boots."""
    lines = ["## Where the time goes (counted runs, median per registration, µs)", "",
             "The counted runs read the NVIDIA stand-in's counters (its `calls_<fn>` and `ns_<fn>`, the "
             "cost model included) and peermem-rs's own step accounting (its `time_accounting` "
             "parameter, on only for these runs; debugfs `peermem_rs/time`) around each call. Total: "
             "the call's latency in these runs. Provider: time inside the stand-in's `nvidia_p2p_*` "
             "entry points. Client: peermem-rs's own time, the sum of its entry points' `own` lines "
             "(each entry point's total minus the provider calls, the host's invalidate and sleeps "
             "made from it; for nv not measurable, –). Rest: total minus provider minus client: the "
             "host stand-in, the ioctl and, for nv, nvidia-peermem's own code. The accounting is not "
             "free: each timed step reads the clock about twice, all inside \"client\" and not subtracted "
             "(how many steps a registration times, and the cost of one read when the run recorded the "
             "time file's `timing.clock_read` calibration, which the bench.c of c225cc9 did not print, "
             "are below the table); compare \"Back to back against counted\" "
             "below. \"Client\" also includes waits for the registration lock and the lock of lingering "
             "registrations; these runs have one thread.", ""]
    cnt, stp = counted_groups(data, accs), {}
    for r in data["steps"]:
        if r["boot"] in accs:
            stp.setdefault((r["client"], r["cost"], r["size"], r["phase"]), []).append(r["steps"])

    def client_own(st):
        return sum(ns for n, (c, ns) in st.items() if step_kind(n) == "own")
    lines += ["| client | model | size | reg total | provider | client | rest | dereg total | provider | "
              "client | rest | calls reg; dereg |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in LABELS:
        for cost in (0, 1):
            for size in sizes:
                rs = cnt.get((c, cost, size))
                if not rs:
                    continue
                cells = [c, "on" if cost else "off", size_name(size)]
                for phase in PHASES:
                    tot = median([r[phase + "_ns"] for r in rs])
                    prov = median([sum(r[phase + "_fn_ns"]) for r in rs])
                    st = stp.get((c, cost, size, phase))
                    own = median([client_own(s) for s in st]) if st else None
                    cells += [fmt_us(tot), fmt_us(prov), fmt_us(own) if own is not None else "–",
                              fmt_us(tot - prov - (own or 0))]
                calls = [calls_str([sorted({r[p + "_calls"][i] for r in rs}) for i in range(6)]) for p in PHASES]
                lines.append("| " + " | ".join(cells + ["; ".join(calls)]) + " |")
    lines.append("")
    reads = [s["timing.clock_read"][1] / s["timing.clock_read"][0] for v in stp.values() for s in v
             if s.get("timing.clock_read", (0, 0))[0]]
    spans = [sum(c for n, (c, _) in st.items() if step_kind(n) not in ("own", "calibration"))
             for st in stp.get(("rs-i", 0, 64 << 10, "reg"), [])]
    if spans:
        lines += [f"Timed steps in a 64 KiB registration of rs-i (cost model off, median of the counted "
                  f"runs, every entry point and nested step counted): {median(spans):.0f}, so about "
                  f"{2 * median(spans):.0f} clock reads."
                  + (f" One clock read (the time file's `timing.clock_read` calibration, median of "
                     f"{len(reads)} readings): {median(reads):.0f} ns, about "
                     f"{2 * median(spans) * median(reads) / 1000:.1f} µs of such a registration's \"client\"."
                     if reads else ""), ""]
    names = sorted({n for v in stp.values() for s in v for n in s if step_kind(n) != "calibration"})
    if names:
        show = [z for z in sizes if z in (64 << 10, 1 << 20, 16 << 20, 1 << 30)] or sizes
        lines += ["### peermem-rs's steps (cost model off; median µs per registration or deregistration, calls in brackets)",
                  "", "Entry point, then step (docs/time-accounting.md): `total` is the whole entry point, "
                  "`own` its total minus what it spent outside the module, `nvidia_p2p_*` the driver's "
                  "calls as peermem-rs times them; steps nest (a lock's hold includes what runs under "
                  "it). An empty cell: the step did not run in that phase.", "",
                  "| step | " + " | ".join(f"{c} {p} {size_name(z)}" for c in ("rs-i", "rs-p")
                                           for p in PHASES for z in show) + " |",
                  "|---" * (1 + 4 * len(show)) + "|"]
        for n in names:
            row = [f"`{n}`"]
            for c in ("rs-i", "rs-p"):
                for p in PHASES:
                    for z in show:
                        v = [s[n] for s in stp.get((c, 0, z, p), []) if n in s]
                        row.append(f"{median([x[1] for x in v]) / 1000:.1f} ({median([x[0] for x in v]):g})"
                                   if v else "")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    # The IOMMU's per-page mapping cost, as measured.
    rows = []
    for (c, cost, size), rs in sorted(cnt.items()):
        pages = size // GPU_PAGE
        dm = [r["reg_fn_ns"][4] / pages for r in rs if r["reg_calls"][4] == 1]
        du = [r["dereg_fn_ns"][5] / pages for r in rs if r["dereg_calls"][5] == 1]
        if cost == 0 and dm:
            rows.append((size, c, median(dm), median(du) if du else None))
    if rows:
        lines += ["### DMA mapping cost per 64 KiB page in this VM (measured)", "",
                  "`nvidia_p2p_dma_map_pages` and `nvidia_p2p_dma_unmap_pages` time per page, median of "
                  "the counted runs with the cost model off (the stand-in maps each 64 KiB page with "
                  "`dma_map_resource` through QEMU's emulated Intel IOMMU, strict mode; the cost model "
                  "does not touch these calls). Small sizes include the call's fixed cost.", "",
                  "| size | " + " | ".join(f"{c} map / unmap µs" for c in LABELS) + " |",
                  "|---|" + "---|" * len(LABELS)]
        by = {(z, c): (m, u) for z, c, m, u in rows}
        for z in sorted({z for z, _, _, _ in rows}):
            cells = []
            for c in LABELS:
                m, u = by.get((z, c), (None, None))
                cells.append("–" if m is None else f"{m / 1000:.2f} / {'–' if u is None else f'{u / 1000:.2f}'}")
            lines.append(f"| {size_name(z)} | " + " | ".join(cells) + " |")
        big = [m for z, _, m, _ in rows if z >= 16 << 20]
        if big:
            lines += ["", f"At 16 MiB and above (fixed costs amortised), all clients: median "
                      f"{median(big) / 1000:.2f} µs per 64 KiB page to map."]
        lines.append("")
    # The same two calls where the counters are read around all of a size's cycles instead of
    # around each call, and no step accounting runs: the back-to-back re-registration runs
    # (latpc, from the run after 232b265) and the first-registration runs (latfc).
    per_call = {}
    for kind, workload in (("latpc", "re-registration"), ("latfc", "first registration")):
        for r in data.get(kind, []):
            if r["boot"] in accs and r["calls"][4] and r["calls"][5]:
                per_call.setdefault((workload, r["size"], r["client"], r["cost"]), []).append(
                    (r["fn_ns"][4] / r["calls"][4], r["fn_ns"][5] / r["calls"][5]))
    if per_call:
        lines += ["### The DMA calls timed without per-call counting (µs per call)", "",
                  "`nvidia_p2p_dma_map_pages` and `nvidia_p2p_dma_unmap_pages` per call, in the "
                  "back-to-back runs of each workload: the NVIDIA stand-in's time in them "
                  "over a size's cycles (first registrations: all, warm-ups included; re-registrations: "
                  "all but the first warm-up, a first registration), read before them and after them "
                  "(no counters read between timed calls, no step accounting), divided by the calls; "
                  "median over the blocks. The counted runs above read the counters, and peermem-rs's time file, "
                  "around every call. The cost model does not touch these two calls: the same code on the "
                  "same arguments, so \"nv on − off\" is how far the same call of the same client moves "
                  "with the work around it (there, the cost model's pins and unpins), a yardstick for "
                  "\"rs-i − nv\".", "",
                  "| workload | size | " + " | ".join(f"{c} map / unmap, model off" for c in LABELS)
                  + " | rs-i − nv, model off | rs-i − nv, model on | nv on − off |",
                  "|---|---|" + "---|" * (len(LABELS) + 3)]

        def diff(got, a, b):
            if a not in got or b not in got:
                return "–"
            return f"{(got[a][0] - got[b][0]) / 1000:+.1f} / {(got[a][1] - got[b][1]) / 1000:+.1f}"

        for w, z in sorted({(w, z) for w, z, _, _ in per_call}, key=lambda k: (k[0] != "re-registration", k[1])):
            got = {(c, cost): (median([m for m, _ in v]), median([u for _, u in v]))
                   for (w2, z2, c, cost), v in per_call.items() if (w2, z2) == (w, z)}
            cells = [f"{got[(c, 0)][0] / 1000:.1f} / {got[(c, 0)][1] / 1000:.1f}" if (c, 0) in got else "–"
                     for c in LABELS]
            lines.append(f"| {w} | {size_name(z)} | " + " | ".join(cells)
                         + f" | {diff(got, ('rs-i', 0), ('nv', 0))} | {diff(got, ('rs-i', 1), ('nv', 1))}"
                         + f" | {diff(got, ('nv', 1), ('nv', 0))} |")
        lines.append("")

    # The DMA calls block by block: a block's map of a size either runs near the fastest blocks'
    # time or far above it, in every client; how often, per client.
    lines += slow_blocks_table(data, accs)
    # How much reading the counters (and peermem-rs's clock reads) changes a registration.
    lines += ["### Back to back against counted (registration median, µs)", "",
              "The cost of measuring: the same registrations timed back to back (no counters read, "
              "no step accounting) and counted.", "",
              "| client | model | " + " | ".join(size_name(z) for z in sizes) + " |",
              "|---|---|" + "---|" * len(sizes)]
    for c in LABELS:
        for cost in (0, 1):
            cells = []
            for z in sizes:
                g, rs = lat.get((c, cost, z, "reg")), cnt.get((c, cost, z))
                cells.append(f"{fmt_us(median([x for v in g.values() for x in v]))} / "
                             f"{fmt_us(median([r['reg_ns'] for r in rs]))}" if g and rs else "–")
            lines.append(f"| {c} | {'on' if cost else 'off'} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


# ---- the report ----

SLOW = 1.3  # a block's DMA call "slow": above this times the lowest quartile of all blocks' figures


def slow_blocks_table(data, accs, sizes=None):
    """Per size (`sizes`, default every size): each back-to-back block's map and unmap time per
    call (latpc), the lowest quartile over every client's blocks, and per (client, model) how many
    blocks ran above SLOW times it; then whether a block slow at its first size stays slow."""
    per = {}
    for r in data.get("latpc", []):
        if r["boot"] in accs and (sizes is None or r["size"] in sizes) and r["calls"][4] and r["calls"][5]:
            per.setdefault(r["size"], []).append(
                (r["client"], r["cost"], (r["boot"], r["block"]), r["fn_ns"][4] / r["calls"][4],
                 r["fn_ns"][5] / r["calls"][5]))
    if not per:
        return []
    # Each size's base for maps, which the counts, the runs and the other calls below all judge by.
    map_base = {z: percentile([x[3] for x in xs], 25) for z, xs in per.items()}
    slow_map = {(z, x[2]): x[3] > SLOW * map_base[z] for z, xs in per.items() for x in xs}
    lines = ["### The DMA calls block by block (back-to-back re-registrations, µs per call)", "",
             f"Each block's `dma_map_pages` and `dma_unmap_pages` time per call over its back-to-back "
             f"re-registrations of a size (as in the table above, before the median). Base: the lowest "
             f"quartile of every client's blocks at that size, model on and off. A block is slow when its "
             f"figure is above {SLOW} times the base: slow blocks over blocks, per client and cost model, "
             f"then the median of the slow ones. The cost model does not touch these calls.", "",
             "| size | call | base | " + " | ".join(f"{c} off | {c} on" for c in LABELS) + " |",
             "|---|---|---|" + "---|---|" * len(LABELS)]
    for z in sorted(per):
        for name, at in (("map", 3), ("unmap", 4)):
            base = map_base[z] if name == "map" else percentile([x[at] for x in per[z]], 25)
            cells = []
            for c in LABELS:
                for cost in (0, 1):
                    mine = [x[at] for x in per[z] if (x[0], x[1]) == (c, cost)]
                    slow = [v for v in mine if v > SLOW * base]
                    cells.append(f"{len(slow)}/{len(mine)}" + (f" ({fmt_us(median(slow))})" if slow else ""))
            lines.append(f"| {size_name(z)} | {name} | {fmt_us(base)} | " + " | ".join(cells) + " |")
    # Does a block that starts slow stay slow? Its maps at its first size against its next.
    first = sorted(per)[:2]
    if len(first) == 2:
        slow = {}
        for z in first:
            for _, _, block, _, _ in per[z]:
                slow.setdefault(block, {})[z] = slow_map[(z, block)]
        pairs = [v for v in slow.values() if len(v) == 2]
        a, b = first
        s_then = [v[b] for v in pairs if v[a]]
        f_then = [v[b] for v in pairs if not v[a]]
        lines += [f"Slow blocks come in runs from a block's start (the back-to-back runs go from the smallest "
                  f"size up, right after the modules are loaded): of the blocks whose {size_name(a)} maps were "
                  f"slow, {sum(s_then)} of {len(s_then)} were slow at {size_name(b)} too; of those whose "
                  f"{size_name(a)} maps were not, {sum(f_then)} of {len(f_then)} (every client, model on and off)."]
    # Is the slow mode the IOMMU's alone? The same blocks' other provider calls, which make no DMA
    # call here (each unpin follows its registration's unmap, so it finds no mapping left to undo).
    other = {(r["size"], (r["boot"], r["block"])): (sum(r["fn_ns"][:4]) - r["model_ns"]) / r["cycles"]
             for r in data.get("latpc", []) if r["boot"] in accs and r["cycles"]}
    others, maps = [], []
    for z, xs in per.items():
        for c in LABELS:
            for cost in (0, 1):
                mine = [(slow_map[(z, x[2])], other[(z, x[2])], x[3]) for x in xs
                        if (x[0], x[1]) == (c, cost) and (z, x[2]) in other]
                s = [(o, m) for is_slow, o, m in mine if is_slow]
                f = [(o, m) for is_slow, o, m in mine if not is_slow]
                if s and f and median([o for o, _ in f]) > 0:
                    others.append(median([o for o, _ in s]) / median([o for o, _ in f]))
                    maps.append(median([m for _, m in s]) / median([m for _, m in f]))
    if others:
        lines += ["", f"The slow mode is not the IOMMU's alone: in the blocks whose maps of a size were slow, "
                  f"the maps took {median(maps):.2f}x (from {min(maps):.2f}x to {max(maps):.2f}x) their time in "
                  f"the other blocks of the same client, cost model and size, and the NVIDIA stand-in's other "
                  f"calls of the same runs (its pins and unpins, which make no DMA call here: each unpin comes "
                  f"after its registration's unmap; the cost model's time left out) {median(others):.2f}x "
                  f"(from {min(others):.2f}x to {max(others):.2f}x); medians over the {len(others)} cells "
                  f"with slow and other blocks. In a slow block everything in the guest ran slower."]
    lines += slow_blocks_by_boot(per, slow_map)
    lines += fastest_blocks_table(per)
    return lines


def slow_blocks_by_boot(per, slow_map):
    """The slow maps of `slow_blocks_table` (`per`: size -> (client, cost, (boot, block), map,
    unmap) per block; `slow_map`: (size, (boot, block)) -> its map slow) counted per boot and client over every size, and whether a block right
    after a slow one (the block before it in its boot, whichever client's, at the same size) was
    slow more often than one after a block that was not."""
    by_boot, after = {}, {}
    for z, xs in per.items():
        slow = {x[2]: slow_map[(z, x[2])] for x in xs}
        for c, _, block, _, _ in xs:
            n = by_boot.setdefault(block[0], {}).setdefault(c, [0, 0])
            n[0] += slow[block]
            n[1] += 1
        for (boot, k), s in slow.items():
            if (boot, k - 1) in slow:
                n = after.setdefault(slow[(boot, k - 1)], [0, 0])
                n[0] += s
                n[1] += 1
    if not by_boot:
        return []
    boots = ["boot " + str(b) + ": " + ", ".join(f"{c} {n[0]}/{n[1]}" for c in LABELS if (n := by_boot[b].get(c)))
             for b in sorted(by_boot)]
    against = []
    for c in (c for c in LABELS if c != "nv"):
        pairs = [(v[c][0] / v[c][1], v["nv"][0] / v["nv"][1]) for v in by_boot.values() if c in v and "nv" in v]
        same = sum(a == b for a, b in pairs)
        against.append(f"{c}'s in {sum(a > b for a, b in pairs)} of {len(pairs)} boots"
                       + (f" (as often in {same})" if same else ""))
    line = (f"Slow maps by boot (every size, model on and off; slow blocks over blocks): {'; '.join(boots)}. "
            f"Slow more often than nv's blocks: {', '.join(against)}.")
    if True in after and False in after:
        s, f = after[True], after[False]
        line += (f" Slow blocks also come in runs across clients: a block right after a slow one (the block "
                 f"before it in its boot, whichever client's, at the same size) was slow {s[0]} of {s[1]} "
                 f"times ({s[0] / s[1]:.2f}), one after a block that was not {f[0]} of {f[1]} "
                 f"({f[0] / f[1]:.2f}).")
    return ["", line, ""]


def fastest_blocks_table(per):
    """Per size and call, each client's lowest quartile and median of its blocks' figures (model on
    and off together: the cost model does not touch these calls), and rs-i's against nv's of
    both: is a gap in every block's call, or in how many blocks ran slow?"""
    lines = ["### The DMA calls in each client's fastest blocks (µs per call)", "",
             "The blocks of the table above, per client with the cost model on and off together (it does "
             "not touch these calls): the lowest quartile of the blocks' figures (the fastest quarter's "
             "slowest), then their median, and rs-i's over nv's of each. Where the quartiles agree and "
             "the medians do not, the gap is in how many of a client's blocks ran slow, not in each call.",
             "",
             "| size | call | " + " | ".join(f"{c} q1" for c in LABELS) + " | rs-i / nv q1 | "
             + " | ".join(f"{c} median" for c in LABELS) + " | rs-i / nv median |",
             "|---|---|" + "---|" * (2 * len(LABELS) + 2)]
    big = {"q1": {}, "median": {}}
    for z in sorted(per):
        for name, at in (("map", 3), ("unmap", 4)):
            mine = {c: [x[at] for x in per[z] if x[0] == c] for c in LABELS}
            if not all(mine.values()):
                continue
            q1 = {c: percentile(v, 25) for c, v in mine.items()}
            med = {c: median(v) for c, v in mine.items()}
            rq, rm = ratio(q1["rs-i"], q1["nv"]), ratio(med["rs-i"], med["nv"])
            if z >= 1 << 20:
                big["q1"].setdefault(name, []).append(rq)
                big["median"].setdefault(name, []).append(rm)
            lines.append(f"| {size_name(z)} | {name} | " + " | ".join(fmt_us(q1[c]) for c in LABELS)
                         + f" | {rq:.2f}x | " + " | ".join(fmt_us(med[c]) for c in LABELS) + f" | {rm:.2f}x |")
    if big["q1"]:
        def span(kind, name):
            v = big[kind].get(name, [])
            return f"{min(v):.2f}x to {max(v):.2f}x" if v else "–"
        lines += ["", f"From 1 MiB up, rs-i's lowest quartile over nv's: maps {span('q1', 'map')}, unmaps "
                  f"{span('q1', 'unmap')}; its median over nv's: maps {span('median', 'map')}, unmaps "
                  f"{span('median', 'unmap')}."]
    lines.append("")
    return lines


def clear_waits(data, accs):
    """The header's sentence on the waits after each size (clr records; none before they were kept)."""
    waits = {}
    for r in data.get("clr", []):
        if r["boot"] in accs:
            waits.setdefault(r["client"], []).append(r["ns"])
    if not waits:
        return ""
    return (" After each size's runs (back to back, counted, first registrations, invalidations) the guest "
            "waits until nothing of them is live, polling every millisecond, before it goes on. That wait, "
            "per client, pooled over every size, block and boot: median (largest), and how many of the waits "
            "took over 1 ms (there the 100 ms poll of the runs before deff96d would have slept 100 ms): "
            + ", ".join(f"{c} {median(waits[c]) / 1e6:.2f} ms ({max(waits[c]) / 1e6:.2f}), "
                        f"{sum(w > 1e6 for w in waits[c])} of {len(waits[c])}" for c in LABELS if c in waits)
            + " (after the free that calls back its lingering registrations, peermem-rs's invalidating "
            "client drops each from a work item, once that item's barrier has passed the driver's lock).")


def calls_str(c):
    return " ".join(f"{SHORT[i]}{'/'.join(map(str, v))}" for i, v in enumerate(c) if v != [0]) or "none"


def report(data, meta, boots):
    """BENCHMARKS.md's text, the plot, and the targets missed. `boots`: [(boot, status, reason)]."""
    # Each boot's status is the gate's, computed here: the one recorded at run time (the data file's)
    # is history, shown beside it.
    judged = {b: boot_status(data, b) for b, _, _ in boots}
    acc = [b for b, _, _ in boots if judged[b][0] == "accepted"]
    if not acc:
        raise SystemExit("bench: no accepted boot: nothing to report")
    accs = set(acc)
    sizes = sorted({r["size"] for r in data["latp"]})
    lat = latency_groups(data, accs)
    first = latency_groups(data, accs, "latf")
    first_sizes = sorted({r["size"] for r in data.get("latf", [])})
    missed = []

    def groups(*keys, src=lat):
        return [tuple(src[k][b] for k in keys) for b in acc]

    def fig_abs(client, cost, size, phase):
        return Figure(groups((client, cost, size, phase)), median, seed_of(client, cost, size, phase))

    def fig_ratio(client, cost, size, phase, src=lat):
        if (client, cost, size, phase) not in src or ("nv", cost, size, phase) not in src:
            return None
        return Figure(groups((client, cost, size, phase), ("nv", cost, size, phase), src=src), ratio_of_medians,
                      seed_of(client, "nv", cost, size, phase, *(("first",) if src is first else ())))

    def rcell(f, limit, higher=False, what=""):
        if f is None:
            return "–"
        bad = limit is not None and (f.value < limit if higher else f.value > limit)
        fmt = fmt_against(limit, f.value, bad)
        if bad:
            missed.append(f"{what}: {f.fmt(fmt).replace(' [', 'x [', 1)} (target "
                          f"{'at least' if higher else 'at most'} {limit}x)")
        return f"{f.fmt(fmt)} ({fmt(f.lo)}–{fmt(f.hi)}){' ✗' if bad else ''}"

    def ratio_table(client, limit_of, every_boot=False, src=lat, zs=sizes, tag=""):
        """Latency ratios of `client` against nv, a row per size: registration and deregistration,
        model off and on. `limit_of(size, phase, cost)`: the target, or None; with `every_boot`,
        a median within its target whose worst boot is not is reported missed too. `src`, `zs`:
        the runs and their sizes (the re-registrations, or with `tag` the first registrations)."""
        rows = ["| size | registration, model off | registration, model on | deregistration, model off | "
                "deregistration, model on |", "|---|---|---|---|---|"]
        for size in zs:
            row = [size_name(size)]
            for phase in PHASES:
                for cost in (0, 1):
                    f, limit = fig_ratio(client, cost, size, phase, src), limit_of(size, phase, cost)
                    what = f"{client} {tag}{phase} {size_name(size)} model {'on' if cost else 'off'}"
                    one_boot = every_boot and limit is not None and f is not None and f.value <= limit < f.hi
                    over = sum(1 for v in f.per_boot if v > limit) if one_boot else 0
                    if one_boot:
                        missed.append(f"{what}: median {f.value:.2f}x but above it in {over} of "
                                      f"{len(f.per_boot)} boots, up to {f.hi:.2f}x (target {limit}x in "
                                      f"every boot)")
                    row.append(rcell(f, limit, what=what)
                               + (f" ✗ ({over} boot{'s' if over > 1 else ''})" if one_boot else ""))
            rows.append("| " + " | ".join(row) + " |")
        return rows

    lines = ["# Benchmarks: peermem-rs against nvidia-peermem 550", ""]
    rej = [b for b, _, _ in boots if judged[b][0] != "accepted"]
    lines += [
        f"Measured from commit `{meta['commit']}` (work tree {meta['tree']}) on {meta['date']} with "
        f"`{meta['command']}` (tests/bench/bench.py; wall time {meta['wall']}). Machine: "
        f"{meta['machine']}. Guest: {meta['guest']}."
        + (f" This report was written from those records by `tests/bench/bench.py --report-only` at commit "
           f"`{meta['report_commit']}`." if meta.get("report_commit", meta["commit"]) != meta["commit"] else ""),
        "",
        *([f"**This run stopped before it had the accepted boots it wanted: {meta['outcome']}.** "
           "Its figures are reported all the same, from the boots it accepted, as every run is. "
           "(Its counts of accepted and rejected boots are those the gate gave at run time; the line "
           "below, and the status column under \"Validity gate\", are the gate's as this report "
           "applies it.)", ""]
          if meta.get("outcome", "complete") != "complete" else []),
        f"**Boots: {len(acc)} accepted, {len(rej)} rejected by the validity gate**"
        + (f" (**fewer than the 5 accepted boots issue 23 asks for**: every figure below rests on {len(acc)})"
           if len(acc) < 5 else "") + " (every boot's records "
        "are in `BENCHMARKS.data.xz`; the rejected ones are listed under \"Validity gate\" and left "
        f"out of every figure). Per boot: {meta['blocks']} rounds of the six (client, cost model) "
        f"pairs in an order drawn from `random.Random({meta['seed']})`, each pair a block on freshly "
        f"loaded modules: "
        + ("first one pass of the back-to-back runs at every size, discarded (right after the modules "
           "are loaded a block's first sizes ran slower), then " if meta.get("settle") == "pass" else "")
        + f"{meta['runs']} back-to-back runs per size per block after 2 warm-up runs "
        f"({int(meta['runs']) * int(meta['blocks'])} per boot, client, cost model and size), "
        f"{meta['counted_runs']} counted runs, {meta['seconds']} s of throughput per thread count. "
        "Not kept: the warm-up runs and, per boot, a first warm-up block of each client (the first "
        "block after a boot runs colder than the rest); every other record is."
        + clear_waits(data, set(acc)),
        "",
        "How to read the figures. Each is the **median over the accepted boots of the per-boot "
        "figure** (a per-boot median latency, or a per-boot ratio of two medians taken in the same "
        "boot), then **[the 95% bootstrap interval]** (boots drawn with replacement, then runs within "
        f"each boot; {BOOTSTRAP} draws, seeds fixed so that `--report-only` reproduces them), then "
        "**(the range of the per-boot figures)**. A ratio is peermem-rs over nvidia-peermem: below "
        "1.0 peermem-rs is faster, except throughput, where above 1.0 it is. ✗ marks a median that "
        f"misses its target (issue 23's targets). With {len(acc)} boots the bootstrap interval is close "
        f"to the range, and says little more: the range of {len(acc)} boots is itself a "
        f"{100 * (1 - 2 * 0.5 ** len(acc)):.0f}% interval for the median boot's figure "
        "(distribution-free), and resampling the runs within a boot on top adds their spread once more.",
        "",
        "What is measured: `switch-iommu` boots (QEMU's emulated Intel IOMMU, strict mode: each "
        "`dma_map_resource` of a 64 KiB GPU page goes through its page tables and IOTLB "
        "invalidation), the benchmark kernel (the test kernel without KASAN, lockdep, kmemleak, "
        "UBSAN and the other debug options, `PEERMEM_KERNEL_FLAVOUR=bench`), the stand-ins of "
        "tests/standins (nvidia.ko 550 and an MLNX_OFED ib_core with an RDMA NIC), one peer-memory "
        "client loaded at a time. A registration is the host stand-in's REG_MR ioctl on GPU memory, "
        "timed in the guest from the call to its return (`ibv_reg_mr` minus the verbs library). The "
        "cost model (tests/standins/nvidia_p2p/README.md, \"Cost model\") adds to each pin and unpin "
        "what nvidia.ko's takes on a V100: with it off the provider costs only the stand-in's code and "
        "the module's own work dominates; with it on the provider costs hardware microseconds while "
        "everything else runs at TCG speed. Absolute times are those of an emulated CPU.",
        "",
        "Clients: **rs-i** peermem-rs `persistent_api_support=0` (the invalidating client), **nv** "
        "NVIDIA's nvidia-peermem 550 built against the stand-ins (invalidating only), **rs-p** "
        "peermem-rs `persistent_api_support=1` (the persistent client).",
        "",
    ]

    # 1. Like for like.
    def like_for_like(size, phase, cost):
        return 0.9 if phase == "reg" else (1.0 if size >= 1 << 20 else None)
    lines += ["## Like for like: peermem-rs's invalidating client against nvidia-peermem 550", "",
              "Both clients invalidating. Latency ratio rs-i / nv per boot, median [95% interval] "
              "(range). Targets: registration at most 0.9x at every size; deregistration at most 1.0x "
              "from 1 MiB up (below 1 MiB issue 23 sets none, for a notification pin's unpin that "
              "peermem-rs no longer makes: reported as measured).", "",
              "Two workloads. **Re-registration** (this table, and every latency table below but the "
              "next): each run registers the buffer the run before deregistered, as a registration "
              "cache that evicts and registers again does. There rs-i's registration adopts the "
              "registration its last deregistration left lingering with its notification pin "
              "(docs/design-lingering-n.md) and pins once; nv pins as for any registration. **First "
              "registration** (the next table): each run registers memory never registered before, "
              "where rs-i has nothing to adopt and pins twice. The provider calls of both are listed "
              "under each table.", "",
              ] + ratio_table("rs-i", like_for_like) + [""]
    if first:
        fc = {}
        for r in data.get("latfc", []):
            if r["boot"] in accs:
                t = fc.setdefault(r["client"], [0] * 7)
                t[6] += r["cycles"]
                for i in range(6):
                    t[i] += r["calls"][i]

        def per_cycle(client):
            t = fc.get(client)
            if not t or not t[6]:
                return "–"
            return " ".join(f"{SHORT[i]}{t[i] // t[6] if t[i] % t[6] == 0 else f'{t[i]}/{t[6]}'}"
                            for i in range(6) if t[i]) or "none"
        lines += ["### First registration of memory", "",
                  "Each run registers a piece of memory never registered before (bench.c's "
                  "`latency-first`: run k the k-th piece of one allocation; its registrations linger "
                  "until the allocation's free after the last run, as an application's would). Same "
                  "targets as above. Ratio rs-i / nv per boot, median [95% interval] (range).", "",
                  ] + ratio_table("rs-i", like_for_like, src=first, zs=first_sizes, tag="first ") + [
                  "", "Provider calls per cycle (a registration and its deregistration together; the "
                  "NVIDIA stand-in's counters read before a size's first cycle and after its last, "
                  "warm-up cycles included, then divided by the cycles; a call made in some cycles "
                  "only is shown as calls/cycles, such as the put_pages that rs-i's work item makes "
                  "after an earlier free; the put_pages of rs-i's lingering notification pins come "
                  "at this allocation's free, after the reading): "
                  + "; ".join(f"{c} {per_cycle(c)}" for c in LABELS) + ".", ""]

    # Where the like-for-like gap comes from: the provider's calls, or everything else.
    cnt = counted_groups(data, accs)

    def counted_median(rs, f):
        """Median over the accepted boots of the per-boot median of f(run) over counted runs."""
        per = {}
        for r in rs:
            per.setdefault(r["boot"], []).append(f(r))
        return median([median(v) for v in per.values()])
    lines += ["Where each gap comes from (µs per call, rs-i minus nv), all from the counted runs (whose "
              "calls are slower than the back-to-back runs above: see \"Back to back against counted\"): "
              "the whole gap, the part spent in the provider (the NVIDIA stand-in's `nvidia_p2p_*` time, "
              "cost model included, which follows from the calls each client makes, listed) and the rest "
              "(total minus provider: each client's own code and peermem-rs's clock reads, the host "
              "stand-in and the ioctl, which are the same code for both). Each figure is the median over "
              "the accepted boots of the difference of the two clients' per-boot medians.", "",
              "| size | model | registration: gap / provider / rest | calls rs-i; nv | "
              "deregistration: gap / provider / rest | calls rs-i; nv |", "|---|---|---|---|---|---|"]
    for size in sizes:
        for cost in (0, 1):
            a, b = cnt.get(("rs-i", cost, size)), cnt.get(("nv", cost, size))
            if not a or not b:
                continue
            cells = [size_name(size), "on" if cost else "off"]
            for phase in PHASES:
                def tot(r, phase=phase):
                    return r[phase + "_ns"]

                def prov(r, phase=phase):
                    return sum(r[phase + "_fn_ns"])

                def rest(r, phase=phase):
                    return r[phase + "_ns"] - sum(r[phase + "_fn_ns"])
                diff = [counted_median(a, f) - counted_median(b, f) for f in (tot, prov, rest)]
                calls = [calls_str([sorted({r[phase + "_calls"][i] for r in rs}) for i in range(6)]) for rs in (a, b)]
                cells += [" / ".join(f"{x / 1000:+.1f}" for x in diff), "; ".join(calls)]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    # The same split without per-call counting: each back-to-back cycle (a registration and its
    # deregistration) against the provider's time per cycle, read around all of a size's cycles.
    cyc, pc = {}, {}
    for r in data["latp"]:
        if r["boot"] in accs:
            cyc.setdefault((r["client"], r["cost"], r["size"]), {}).setdefault(r["boot"], []).append(
                r["reg_ns"] + r["dereg_ns"])
    for r in data.get("latpc", []):
        if r["boot"] in accs and r["cycles"]:
            pc.setdefault((r["client"], r["cost"], r["size"]), {}).setdefault(r["boot"], []).append(
                sum(r["fn_ns"]) / r["cycles"])

    def measured(extra=lambda k: True):
        """(size, cost) of the sizes and models where both clients have back-to-back runs and the
        provider's cycle counts in every accepted boot (and `extra`)."""
        return [(size, cost) for size in sizes for cost in (0, 1)
                if all(k in cyc and k in pc and accs <= set(cyc[k]) and accs <= set(pc[k]) and extra(k)
                       for k in [(c, cost, size) for c in ("rs-i", "nv")])]
    rows = []
    for size, cost in measured():
        per = {c: {x: (median(cyc[(c, cost, size)][x]), median(pc[(c, cost, size)][x])) for x in accs}
               for c in ("rs-i", "nv")}
        cells = [size_name(size), "on" if cost else "off"]
        parts = (lambda t: t[0], lambda t: t[1], lambda t: t[0] - t[1])  # cycle, provider, rest
        for part in parts:
            cells.append(" / ".join(fmt_us(median([part(per[c][x]) for x in accs])) for c in ("rs-i", "nv")))
        d = [[part(per["rs-i"][x]) - part(per["nv"][x]) for x in accs] for part in parts]
        cells.append(" / ".join(f"{median(v) / 1000:+.1f}" for v in d)
                     + f" ({min(d[2]) / 1000:+.1f} to {max(d[2]) / 1000:+.1f})")
        rows.append("| " + " | ".join(cells) + " |")
    if rows:
        lines += ["The same split from the back-to-back re-registration runs of the first table, which "
                  "read no counter between calls (µs per cycle: a registration and its deregistration "
                  "together, since the provider's time is read only around all of a size's cycles). "
                  "Cycle: the per-boot median of a run's registration plus deregistration. Provider: "
                  "the NVIDIA stand-in's `nvidia_p2p_*` time over the size's cycles but the first warm-up "
                  "(on a fresh buffer a first registration, unlike the runs timed; the second warm-up "
                  "is counted), divided by those cycles: a mean per cycle, per-boot median over the "
                  "blocks. Rest: the median cycle minus that mean (each client's own code, the host "
                  "stand-in and the ioctl). "
                  "Medians over the accepted boots; the gap is the median of the per-boot differences "
                  "(in brackets the range of the rest's).", "",
                  "| size | model | cycle rs-i / nv | provider rs-i / nv | rest rs-i / nv | "
                  "rs-i − nv: gap / provider / rest (rest's range) |", "|---|---|---|---|---|---|"] + rows + [""]

    # The same by phase: the provider's time per call of each entry point (latpc) times the calls
    # each phase makes (the counted runs' median counts), against the back-to-back medians.
    by_phase = []
    for size, cost in measured(lambda k: bool(cnt.get(k))):
        diffs = {phase: [] for phase in PHASES}
        for x in sorted(accs):
            per = {}
            for c in ("rs-i", "nv"):
                k = (c, cost, size)
                rs = [r for r in data.get("latpc", []) if (r["client"], r["cost"], r["size"]) == k
                      and r["boot"] == x]
                pcall = [median([r["fn_ns"][i] / r["calls"][i] for r in rs]) if all(r["calls"][i] for r in rs)
                         else 0 for i in range(6)]
                plain = [r for r in data["latp"] if (r["client"], r["cost"], r["size"]) == k and r["boot"] == x]
                for phase in PHASES:
                    calls = [median([r[phase + "_calls"][i] for r in cnt[k]]) for i in range(6)]
                    prov = sum(pcall[i] * calls[i] for i in range(6))
                    tot = median([r[phase + "_ns"] for r in plain])
                    per[(c, phase)] = (tot, prov, tot - prov)
            for phase in PHASES:
                diffs[phase].append([per[("rs-i", phase)][j] - per[("nv", phase)][j] for j in range(3)])
        cells = [size_name(size), "on" if cost else "off"]
        for phase in PHASES:
            cells.append(" / ".join(f"{median([d[j] for d in diffs[phase]]) / 1000:+.1f}" for j in range(3)))
        by_phase.append("| " + " | ".join(cells) + " |")
    if by_phase:
        lines += ["By phase, from the same back-to-back runs (µs, rs-i minus nv, median over the accepted "
                  "boots of the per-boot differences): the phase's median latency, the provider's part "
                  "(each entry point's time per call over the size's cycles, as above, times the calls "
                  "the counted runs make in that phase: this assumes a call costs the same in either "
                  "phase, which matters only for nv's put_pages, made once in each, both of the whole "
                  "range) and the rest.", "",
                  "| size | model | registration: gap / provider / rest | deregistration: gap / provider / rest |",
                  "|---|---|---|---|"] + by_phase + [""]

    # Invalidation, like for like.
    inv = {}
    for r in data["inv"]:
        if r["boot"] in accs:
            inv.setdefault((r["client"], r["cost"], r["size"]), {}).setdefault(r["boot"], []).append(r["ns"])
    if inv:
        lines += ["### Invalidation (cudaFree to the NIC's key revoked)", "",
                  "From the guest's clock before `NVP2P_IOC_FREE` to the host stand-in's timestamp when "
                  "the client's invalidation revoked the MR (ktime, same clock), µs. Issue 23 sets no "
                  "target here; ✗ marks a ratio above 1.0 for reference and is not counted as a target missed.",
                  "", "| size | model | rs-i | nv | rs-i / nv |", "|---|---|---|---|---|"]
        for size in sorted({k[2] for k in inv}):
            for cost in (0, 1):
                a, b = inv.get(("rs-i", cost, size)), inv.get(("nv", cost, size))
                if not a or not b or set(a) != accs or set(b) != accs:
                    continue
                fa = Figure([(a[x],) for x in acc], median, seed_of("inv", "rs-i", cost, size))
                fb = Figure([(b[x],) for x in acc], median, seed_of("inv", "nv", cost, size))
                fr = Figure([(a[x], b[x]) for x in acc], ratio_of_medians, seed_of("inv", cost, size))
                mode = "on" if cost else "off"
                cell = f"{fr.fmt(fmt_r)} ({fr.lo:.2f}–{fr.hi:.2f}){' ✗' if fr.value > 1.0 else ''}"
                lines.append(f"| {size_name(size)} | {mode} | {fa.fmt(fmt_us)} | {fb.fmt(fmt_us)} | {cell} |")
        lines.append("")

    # Throughput.
    tput = {}
    for r in data["tput"]:
        if r["boot"] in accs:
            tput.setdefault((r["client"], r["cost"], r["threads"]), {}).setdefault(r["boot"], []).append(
                (r["regs"], r["ns"]))
    if tput:
        lines += ["### Registration throughput (64 KiB, register then deregister, each thread its own "
                  "buffer and file)", "",
                  "Registrations per second, per boot all blocks pooled. Each thread registers its "
                  "buffer again and again: re-registrations, where rs-i adopts (above). Target: rs-i at "
                  "least 1.0x of nv at 1, 2 and 8 threads.", "",
                  "| threads | model | rs-i | nv | rs-p | rs-i / nv | rs-p / nv |", "|---|---|---|---|---|---|---|"]
        for t in THREADS:
            for cost in (0, 1):
                keys = [(c, cost, t) for c in ("rs-i", "nv", "rs-p")]
                if any(k not in tput or set(tput[k]) != accs for k in keys):
                    missed.append(f"throughput {t} threads model {'on' if cost else 'off'}: not measured in every boot")
                    continue
                f = [Figure([(tput[k][x],) for x in acc], rate, seed_of("tput", *k)) for k in keys]
                ri = Figure([(tput[keys[0]][x], tput[keys[1]][x]) for x in acc], ratio_of_rates,
                            seed_of("tput-r", "rs-i", cost, t))
                rp = Figure([(tput[keys[2]][x], tput[keys[1]][x]) for x in acc], ratio_of_rates,
                            seed_of("tput-r", "rs-p", cost, t))
                mode = "on" if cost else "off"
                cell = rcell(ri, 1.0, higher=True, what=f"throughput rs-i {t} threads model {mode}")
                lines.append(f"| {t} | {mode} | " + " | ".join(x.fmt(lambda v: f"{v:.0f}") for x in f)
                             + f" | {cell} | {rcell(rp, None)} |")
        lines.append("")

    # Memory.
    mem = memory_groups(data, accs)
    if mem:
        lines += ["### Kernel memory per live registration, from the slab caches", "",
                  f"/proc/slabinfo before and after {meta['mem_n']} live 64 KiB registrations of distinct "
                  "GPU memory, once per block with the cost model off: for each cache whose active "
                  "objects changed, the change times the cache's object size (with its alignment and "
                  "metadata), summed, divided by the registrations. Slab objects only: the client's, the "
                  "host stand-in's MR and SG table, the NVIDIA stand-in's pins, page tables and DMA "
                  "mappings (as many as the client's calls make); not counted are pages from the page "
                  "allocator (the SG table's chained pages, the IOMMU's page tables), vmalloc and "
                  "kmalloc above 8 KiB, and the stand-in's objects are the stand-in's, not nvidia.ko's. "
                  "Measured at 64 KiB only. "
                  "Target: rs-i no more than nv.", "",
                  "| client | bytes per registration | ratio to nv | blocks |", "|---|---|---|---|"]
        for c in LABELS:
            if c not in mem or set(mem[c]) != accs:
                missed.append(f"memory per registration {c}: not measured in every boot")
                continue
            f = Figure([(mem[c][x],) for x in acc], median, seed_of("mem", c))
            rr = "" if c == "nv" or "nv" not in mem else rcell(
                Figure([(mem[c][x], mem["nv"][x]) for x in acc], ratio_of_medians, seed_of("mem-r", c)),
                1.0 if c == "rs-i" else None, what=f"memory per registration {c}")
            lines.append(f"| {c} | {f.fmt(lambda v: f'{v:.0f}')} ({f.lo:.0f}–{f.hi:.0f}) | {rr} | "
                         f"{sum(len(v) for v in mem[c].values())} |")
        br = cache_breakdown(data, accs)
        caches = sorted({k for v in br.values() for k, (sz, n) in v.items() if abs(n) >= 0.05},
                        key=lambda k: (-max(br[c].get(k, (0, 0))[0] * abs(br[c].get(k, (0, 0))[1]) for c in br), k))
        lines += ["", "Where it goes: objects per registration by cache (median over the blocks; object "
                  "bytes in brackets; caches that moved by less than 0.05 objects per registration left out).",
                  "", "| cache (bytes) | " + " | ".join(c for c in LABELS if c in br) + " |",
                  "|---" * (1 + sum(c in br for c in LABELS)) + "|"]
        for k in caches:
            sz = next(br[c][k][0] for c in br if k in br[c])
            lines.append(f"| {k} ({sz}) | " + " | ".join(
                f"{br[c][k][1]:.2f}" if k in br[c] else "0" for c in LABELS if c in br) + " |")
        lines.append("")

    # 2. The persistent client, against 550's invalidating client.
    lines += ["## The persistent client against nvidia-peermem 550 (not like for like)", "",
              "rs-p pins persistently (one pin per registration, no invalidation); nv 550 has no "
              "persistent option and runs its invalidating client, so this compares two designs, not "
              "two implementations. Target: registration with the cost model on at most 0.75x at "
              "every size, in every boot (the range's upper end).", "",
              ] + ratio_table("rs-p", lambda size, phase, cost: 0.75 if (phase, cost) == ("reg", 1) else None,
                              every_boot=True)
    counted = {}
    for r in data["lat"]:
        if r["boot"] in accs:
            for phase in PHASES:
                counted.setdefault((r["client"], phase), set()).add(tuple(r[phase + "_calls"]))

    def seen(client, phase):
        cs = counted.get((client, phase), set())
        return calls_str([sorted({c[i] for c in cs}) for i in range(6)]) if cs else "–"
    lines += ["", "Provider calls per registration and deregistration (gp get_pages, gpp "
              "get_pages_persistent, pp put_pages, ppp put_pages_persistent, dm dma_map_pages, du "
              "dma_unmap_pages; measured: the NVIDIA stand-in's counters in the counted runs; NVIDIA's "
              "persistent client: read in its source, since no source of it newer than 550 builds "
              "here):", "",
              "| client | registration | deregistration |", "|---|---|---|"]
    for c in LABELS:
        lines.append(f"| {c} ({NAMES[c]}) | {seen(c, 'reg')} | {seen(c, 'dereg')} |")
    lines += [f"| NVIDIA's persistent client, {v} (read, not run) | {r} | {d} |" for v, r, d in NV_PERSISTENT_CALLS]
    lines += ["", "NVIDIA's persistent client probes the range in `acquire` with a pin and its unpin (a "
              "non-persistent pin with a dummy callback up to 575, `nv_mem_acquire` at 560.28.03 lines "
              "198-243; a persistent one from 580, `nv_mem_acquire_nc` at 595.45.04 lines 246-298), "
              "then pins persistently in `get_pages` (`nv_mem_get_pages_nc`, 560.28.03 lines 446-477, "
              "595.45.04 lines 501-532); rs-p pins once.", ""]

    # 3. Absolute latencies.
    for phase, title in (("reg", "Registration"), ("dereg", "Deregistration")):
        lines += [f"## {title} latency, µs", "",
                  "Median over boots of the per-boot median [95% interval]; p99: nearest rank over all "
                  "accepted runs pooled (n runs; with fewer than 100 it is the maximum and says so).", "",
                  "| size | model | " + " | ".join(LABELS) + " | " + " | ".join(f"{c} p99" for c in LABELS) + " |",
                  "|---" * (2 + 2 * len(LABELS)) + "|"]
        for size in sizes:
            for cost in (0, 1):
                cells, tails = [], []
                for c in LABELS:
                    k = (c, cost, size, phase)
                    if k not in lat:
                        cells.append("–")
                        tails.append("–")
                        continue
                    cells.append(fig_abs(*k).fmt(fmt_us))
                    pooled = [x for v in lat[k].values() for x in v]
                    tails.append(f"{fmt_us(percentile(pooled, 99))} ({'max of ' if len(pooled) < 100 else 'n='}"
                                 f"{len(pooled)})")
                lines.append(f"| {size_name(size)} | {'on' if cost else 'off'} | " + " | ".join(cells + tails) + " |")
        lines.append("")
    lines += ["![median latency against size](BENCHMARKS.svg)", ""]

    # 4. Where the time goes.
    lines += where_time_goes(data, accs, sizes, lat)

    # 5. The validity gate and every boot.
    lines += ["## Validity gate, boot by boot", "",
              "For each client, size and phase: the modelled cost (the stand-in's own count of its cost "
              "model's time, median of the boot's counted runs) and median(model on) − median(model "
              "off) over the boot's back-to-back runs, with the half-width of its 95% interval (the "
              "boot's blocks drawn with replacement, then the runs within them). Where that half-width "
              f"is larger than {BLIND_SHARE:.0%} of the modelled cost the cell is **blind** (a model that "
              "did not act at all would pass there with a chance above 6%; the gate cannot judge it and "
              f"only counts it). A **judged** cell fails when even the interval's upper end is below "
              f"{GATE_SHARE:.0%} of the modelled cost (the model-on half cost less extra than the model "
              "adds, with 97.5% confidence); a boot with a failed cell is rejected and left out of every "
              "figure. In a judged cell a model that did not act fails with a chance of about 94% or "
              "more; a cell whose halves ran alike fails with a chance of at most 2.5%. There is no "
              "upper bound: with the model on a call also waits on a lock a busy-waiting holder keeps, "
              "and a busy wait ends late, so on − off above the model is expected. Margin: the "
              "interval's upper end minus what is needed, µs. This rule is the fourth: c225cc9's judged "
              "the upper end in every cell, which a reviewer showed blind where the noise is large; the "
              "third judged the point estimate, which fails a cell whose halves ran alike with a chance "
              "of up to 42% (35% at half the cost's width) and rejected 6 of 6818d86's 9 boots, failing "
              "10 of their 198 judged cells, short by 1.6-31 µs of 34.6-271 µs needed; this rule was "
              "written after that run's data were seen, and a run measured under it is its test. The "
              "status column is this rule's, computed by this report; the last column says what the run "
              "recorded when it was measured.", "",
              "| boot | status | judged cells | blind cells | smallest margin (where) | failed cells | recorded "
              "at run time |", "|---|---|---|---|---|---|---|"]
    for b, st, why in boots:
        jc, bc, failed = gate(data, b)
        worst = min(jc) if jc else None
        lines.append(f"| {b} | {judged[b][0]} | {len(jc)} | {len(bc)} | " +
                     (f"{fmt_us(worst[0])} ({worst[2]} {worst[4]} {size_name(worst[3])})" if worst else "–") +
                     f" | {len(failed)}{': ' + judged[b][1] if failed else ''} | {st}{': ' + why if why else ''} |")
    allb = latency_groups(data, {b for b, _, _ in boots})
    for client in ("rs-i", "rs-p"):
        lines += ["", f"Per-boot ratios {client} / nv (median latency of the boot), every boot, accepted or not:", "",
                  "| boot | status | " + " | ".join(f"{size_name(z)} reg off/on, dereg off/on" for z in sizes) + " |",
                  "|---|---|" + "---|" * len(sizes)]
        for b, _, _ in boots:
            cells = []
            for z in sizes:
                vals = []
                for phase in PHASES:
                    for cost in (0, 1):
                        x, n = allb.get((client, cost, z, phase), {}).get(b), allb.get(("nv", cost, z, phase), {}).get(b)
                        vals.append(f"{ratio_of_medians(x, n):.2f}" if x and n else "–")
                cells.append(" ".join(vals))
            lines.append(f"| {b} | {judged[b][0]} | " + " | ".join(cells) + " |")
    lines.append("")

    lines += ["## Targets missed", ""]
    lines += [f"- {m}" for m in missed] or ["- none"]
    lines += ["", "Raw records of every boot: `BENCHMARKS.data.xz` (xz; `# meta` lines, then per boot a "
              "`# boot N STATUS: why` line and its records, whose format is documented at the top of "
              "tests/bench/bench.c). `tests/bench/bench.py --report-only` rewrites this file from it.", ""]
    plot_in = {}
    for (c, cost, size, phase), g in lat.items():
        plot_in.setdefault((c, cost, size), {})[phase] = {"median": median([median(g[b]) for b in acc])}
    return "\n".join(lines), plot(plot_in), missed




def synthetic(boots=2, sizes=(65536, 1 << 20), runs=5):
    """Records as the guest writes them, for the self-test: nv costs 100 µs + 10 µs a page, rs-i
    80% of it, rs-p 60%; the cost model adds 50 µs a registration and is counted as such."""
    out = []
    for b in range(1, boots + 1):
        lines, blk = [], 0
        for c, share in (("rs-i", 0.8), ("nv", 1.0), ("rs-p", 0.6)):
            for cost in (0, 1):
                blk += 1
                lines.append(f"blk {blk} {c} {cost}")
                for z in sizes:
                    base = (100_000 + 10_000 * z // GPU_PAGE) * share
                    for run in range(runs):
                        reg = int(base + 50_000 * cost + 1000 * run + 500 * b)
                        dereg = int(base / 2 + 50_000 * cost + 700 * run)
                        lines.append(f"latp {c}:{cost} {z} {run} {reg} {dereg}")
                        m = 50_000 * cost
                        lines.append(f"lat {c}:{cost} {z} {run} {reg} {dereg} reg 1 0 0 0 1 0 "
                                     f"{20_000 + m} 0 0 0 5000 0 {m} dereg 0 0 1 0 0 1 0 0 {1000 + m} 0 0 500 {m}")
                        lines.append(f"latf {c}:{cost} {z} {run} {reg + 9000} {dereg}")
                        if c != "nv":
                            lines.append(f"steps {c}:{cost} {z} {run} reg get_pages.total:1:30000 "
                                         f"get_pages.nvidia_p2p_get_pages:1:20000 get_pages.own:1:10000 "
                                         f"get_pages.reg_lock_hold:2:400 timing.clock_read:0:5")
                    lines.append(f"latfc {c}:{cost} {z} {runs + 2} cycles 7 7 0 7 7 7 1 2 3 4 5 6 0")
                    lines.append(f"latpc {c}:{cost} {z} {runs + 2} cycles 7 0 7 0 7 7 "
                                 f"{int(7 * share * 1000) + 350_000 * cost} 0 700 0 7000 7000 {350_000 * cost}")
                    lines.append(f"clr {c}:{cost} latp {z} {3_000_000 if c == 'rs-i' else 100_000}")
                for t in THREADS:
                    lines.append(f"tput {c}:{cost} 65536 {t} {int(1000 / share)} 1000000000")
                if cost == 0:
                    lines.append(f"mem {c}:0 65536 100 1000 1100")
                    lines.append(f"slab {c}:0 65536 100 kmalloc-256 256 10 {10 + int(100 * share)}")
                if c != "rs-p":
                    lines.append(f"inv {c}:{cost} 65536 0 {int(20_000 * share)} free 0 0 1 0 0 1 0 0 9 0 0 9 0")
        out.append((b, "\n".join(lines) + "\n"))
    return out


def check_statistics():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 2, 3]) == 2.5
    assert percentile(list(range(1, 31)), 99) == 30
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5], 50) == 5
    assert ratio(1, 2) == 0.5 and ratio(1, 0) == float("inf")
    assert size_name(65536) == "64 KiB" and size_name(1 << 30) == "1 GiB" and size_name(3 << 20) == "3 MiB"
    assert fmt_us(-672060) == "-672" and fmt_us(12345) == "12.3" and fmt_us(-1500) == "-1.50"
    assert rate([(10, 1e9), (30, 1e9)]) == 20.0
    # The bootstrap: an interval around the figure, reproducible.
    g = [([10, 11, 12, 13, 14], [20, 22, 24, 26, 28]) for _ in range(3)]
    f = Figure(g, ratio_of_medians, 1)
    assert f.value == 0.5 and f.lo == f.hi == 0.5 and f.ci[0] <= 0.5 <= f.ci[1]
    assert bootstrap(g, ratio_of_medians, 1, 200) == bootstrap(g, ratio_of_medians, 1, 200)
    wide = [([10, 30], [20, 20]), ([12, 14], [20, 20])]
    lo, hi = bootstrap(wide, ratio_of_medians, 2, 400)
    assert lo < 0.65 < 1.0 < hi, (lo, hi)


def check_schedule():
    """Every pair once per round, rounds in different orders, the same for the same seed."""
    a, b = schedule(random.Random(7), 4), schedule(random.Random(7), 4)
    assert a == b and len(a) == 24 and all(len(set(a[i:i + 6])) == 6 for i in range(0, 24, 6))
    assert len({tuple(a[i:i + 6]) for i in range(0, 24, 6)}) > 1
    assert schedule(random.Random(8), 4) != a


def check_parse():
    """Every kind of record, the block carried along; malformed lines refused."""
    d = merge([parse(t, b) for b, t in synthetic()])
    assert len(d["blk"]) == 12 and d["latp"][0]["block"] == 1 and d["latp"][-1]["boot"] == 2
    assert d["steps"][0]["steps"]["get_pages.total"] == (1, 30000)
    assert [step_kind(n) for n in ("a.total", "a.own", "a.nvidia_p2p_put_pages", "timing.clock_read", "a.sg_fill")] == \
        ["total", "own", "provider", "calibration", "inner"]
    assert d["slab"][0]["cache"] == "kmalloc-256" and d["slab"][0]["after"] == 90
    assert d["lat"][0]["reg_calls"] == [1, 0, 0, 0, 1, 0] and d["lat"][0]["reg_fn_ns"][0] == 20000
    assert len(d["latf"]) == len(d["latp"]) and d["latfc"][0]["cycles"] == 7 and d["latfc"][0]["calls"][3] == 7
    assert d["latpc"][0]["cycles"] == 7 and d["latpc"][0]["fn_ns"][0] == 5600 and d["latpc"][0]["calls"][1] == 0
    assert d["latpc"][0]["model_ns"] == 0 and d["clr"][0] == {"boot": 1, "block": 1, "client": "rs-i", "cost": 0,
                                                            "kind": "latp", "size": 65536, "ns": 3_000_000}
    for bad in ("lat rs-p:1 65536 0 1000", "latfc nv:0 65536 7 7 0 0 0 0 0", "latpc nv:0 65536 7 cycles 1 2", "xyz rs-i:0 1", "inv nv 1 2 3", "latp nv:0 1 2 3",
                "blk 1 nobody 0", "slab nv:0 1 2 cache 3", "steps rs-i:0 1 2 both a:1:2",
                "clr nv:0 latp 65536", "clr nv:0 tput 65536 5"):
        try:
            parse(bad)
        except SystemExit:
            continue
        raise AssertionError(f"parse accepted {bad!r}")


def check_gate():
    """A boot whose model-on half cost what the model adds passes; one whose model-off half ran
    slower than its model-on half fails, naming the cell; a cell whose noise exceeds the model's
    cost is blind, not judged."""
    boots = synthetic()
    d = merge([parse(t, b) for b, t in boots])
    judged, blind, failed = gate(d, 1)
    assert failed == [] and blind == [] and len(judged) == 12, (judged, blind, failed)
    assert boot_status(d, 1) == ("accepted", "")
    slow = parse(boots[0][1], 1)
    for r in slow["latp"]:
        if r["client"] == "rs-i" and r["cost"] == 0:
            r["reg_ns"] += 200_000
    failed = gate(slow, 1)[2]
    assert failed and {(c, p) for _, _, c, _, p in failed} == {("rs-i", "reg")}, failed
    assert boot_status(slow, 1)[0] == "rejected" and "rs-i reg" in boot_status(slow, 1)[1]
    noisy = parse(boots[0][1], 1)
    for r in noisy["latp"]:
        if r["client"] == "nv" and r["cost"] == 0 and r["run"] % 2:
            r["dereg_ns"] += 5_000_000
    _, blind, _ = gate(noisy, 1)
    assert {(c, p) for _, _, c, _, p in blind} == {("nv", "dereg")}, blind
    # The fourth rule: a cell whose point estimate (0.85 of the model) is short but whose interval
    # reaches 90% passes; one whose upper end is short fails; an interval wider than half the
    # model is blind, even with its point estimate at zero.
    assert judge_cell(700, 1000, 1000) == "passed"
    assert judge_cell(300, 850, 1000) == "failed"
    assert judge_cell(-550, 550, 1000) == "blind"
    assert judge_cell(-450, 450, 1000) == "failed"


def check_memory():
    """Bytes per registration: (after - before) * object size / n, per block."""
    m = memory_groups(merge([parse(t, b) for b, t in synthetic()]), {1, 2})
    assert m["nv"][1] == [256.0] and m["rs-i"][1] == [80 * 256 / 100]


def check_report():
    """The like-for-like table first, ratios as built, targets judged, the data file round trip."""
    boots = synthetic()
    d = merge([parse(t, b) for b, t in boots])
    text, svg, missed = report(d, {"commit": "abc", "tree": "clean", "date": "d", "command": "c", "wall": "w",
                                   "machine": "m", "guest": "g", "blocks": 1, "seed": 1, "runs": 5,
                                   "counted_runs": 5, "seconds": 1, "mem_n": 100},
                               [(1, "accepted", ""), (2, "accepted", "")])
    first = text.index("## Like for like")
    assert first < text.index("Where each gap comes from") < text.index("## The persistent client") < text.index("## Validity gate")
    row = next(line for line in text.splitlines() if line.startswith("| 64 KiB | 0."))
    assert row.startswith("| 64 KiB | 0.8") and "✗" not in row, row
    assert not missed, missed
    assert "| rs-i | 205 [205, 205] (205–205) | 0.80" in text
    # The first registrations, in their own table, after the re-registrations', judged alike.
    assert first < text.index("### First registration of memory") < text.index("Where each gap comes from")
    assert "rs-i gp1 gpp1 ppp1 dm1 du1" in text
    assert "would have slept 100 ms): rs-i 3.00 ms (3.00), 8 of 8, nv 0.10 ms (0.10), 0 of 8, rs-p 0.10 ms " \
        "(0.10), 0 of 8 (after" in text
    # The back-to-back split: cycle, provider per cycle (latpc), the rest, and the DMA calls of both
    # workloads without per-call counting.
    assert "| 64 KiB | off | 136 / 169 | 2.90 / 3.10 | 133 / 166 | -33.0 / -0.2 / -32.8 (-32.8 to -32.8) |" in text
    assert "| re-registration | 64 KiB | 1.0 / 1.0 | 1.0 / 1.0 | 1.0 / 1.0 | +0.0 / +0.0 |" in text
    assert "| 64 KiB | off | -22.0 / -0.2 / -21.8 | -11.0 / +0.0 / -11.0 |" in text
    # A block whose map runs three times the others' is counted slow, for its client and model only.
    tripled = merge([parse(t, b) for b, t in boots])
    for r in tripled["latpc"]:
        if (r["boot"], r["client"], r["cost"], r["size"]) == (1, "rs-i", 0, 65536):
            r["fn_ns"][4] *= 3
        if (r["boot"], r["client"], r["cost"], r["size"]) == (2, "rs-i", 0, 65536):
            r["fn_ns"][0] *= 2
            r["fn_ns"][2] *= 2
    row = next(x for x in slow_blocks_table(tripled, {1, 2}, sizes=(65536,)) if x.startswith("| 64 KiB | map"))
    assert row == "| 64 KiB | map | 1.00 | 1/2 (3.00) | 0/2 | 0/2 | 0/2 | 0/2 | 0/2 |", row
    runs = " ".join(slow_blocks_table(tripled, {1, 2}))
    assert "of the blocks whose 64 KiB maps were slow, 0 of 1 were slow at 1 MiB too; of those whose 64 KiB " \
        "maps were not, 0 of 11" in runs, runs
    # ...its maps against the same client's other block (3.00x), and its other calls (boot 2's block,
    # their time doubled): (5600 + 700) / 7 = 900 ns a cycle in the slow block, 1800 in the other.
    assert "the maps took 3.00x (from 3.00x to 3.00x) their time in the other blocks of the same client, " \
        "cost model and size, and the NVIDIA stand-in's other calls of the same runs" in runs, runs
    assert "the cost model's time left out) 0.50x (from 0.50x to 0.50x); medians over the 1 cells" in runs, runs
    # With the cost model on, its time (350 µs a cycle here) is left out of the other calls: their
    # own part doubled gives 0.50x again; with the model's time kept in it would be 0.98x.
    on = merge([parse(t, b) for b, t in boots])
    for r in on["latpc"]:
        if (r["boot"], r["client"], r["cost"], r["size"]) == (1, "rs-i", 1, 65536):
            assert r["model_ns"] == 350_000 and r["fn_ns"][0] == 355_600, r
            r["fn_ns"][4] *= 3
        if (r["boot"], r["client"], r["cost"], r["size"]) == (2, "rs-i", 1, 65536):
            r["fn_ns"][0] = 2 * 5600 + 350_000
            r["fn_ns"][2] *= 2
    runs = " ".join(slow_blocks_table(on, {1, 2}))
    assert "the cost model's time left out) 0.50x (from 0.50x to 0.50x); medians over the 1 cells" in runs, runs
    # Slow maps by boot, and after a slow block: boot 1's two rs-i blocks (1 and 2) slow at 64 KiB,
    # rs-i's model-off blocks (block 1 of each boot) slow at 1 MiB. Blocks 2 (64 KiB, boot 1) and
    # 2 (1 MiB, boots 1 and 2), and 3 (64 KiB, boot 1) follow a slow block: 1 of 4 slow. Each
    # client's fastest quarter stays at 1.00 where two of its four blocks tripled: its median 2.00.
    runs2 = merge([parse(t, b) for b, t in boots])
    for r in runs2["latpc"]:
        if (r["boot"], r["client"], r["size"]) == (1, "rs-i", 65536) or \
                (r["client"], r["cost"], r["size"]) == ("rs-i", 0, 1 << 20):
            r["fn_ns"][4] *= 3
    runs = " ".join(slow_blocks_table(runs2, {1, 2}))
    assert "(every size, model on and off; slow blocks over blocks): boot 1: rs-i 3/4, nv 0/4, rs-p 0/4; " \
        "boot 2: rs-i 1/4, nv 0/4, rs-p 0/4. Slow more often than nv's blocks: rs-i's in 2 of 2 boots, rs-p's " \
        "in 0 of 2 boots (as often in 2). Slow blocks also come" in runs, runs
    assert "at the same size) was slow 1 of 4 times (0.25), one after a block that was not 0 of 16 (0.00)." \
        in runs, runs
    assert "| 1 MiB | map | 1.00 | 1.00 | 1.00 | 1.00x | 2.00 | 1.00 | 1.00 | 2.00x |" in runs, runs
    assert "From 1 MiB up, rs-i's lowest quartile over nv's: maps 1.00x to 1.00x, unmaps 1.00x to 1.00x; its " \
        "median over nv's: maps 2.00x to 2.00x, unmaps 1.00x to 1.00x." in runs, runs
    slow = merge([parse(t, b) for b, t in boots])
    for r in slow["latf"]:
        if r["client"] == "rs-i" and r["size"] == 65536:
            r["reg_ns"] *= 1.5
    _, _, slow_missed = report(slow, {"commit": "abc", "tree": "clean", "date": "d", "command": "c", "wall": "w",
                                      "machine": "m", "guest": "g", "blocks": 1, "seed": 1, "runs": 5,
                                      "counted_runs": 5, "seconds": 1, "mem_n": 100},
                               [(1, "accepted", ""), (2, "accepted", "")])
    assert [m for m in slow_missed if m.startswith("rs-i first reg 64 KiB")] and \
        not [m for m in slow_missed if "first" not in m], slow_missed
    # A target missed by less than the second decimal is not shown as the target itself.
    assert fmt_against(1.0, 1.004, True)(1.004) == "1.004" and fmt_against(1.0, 1.02, True)(1.02) == "1.02"
    assert fmt_against(1.0, 0.996, False)(0.996) == "1.00"
    assert svg.startswith("<svg") and "polyline" in svg
    # A boot the gate rejects is left out, whatever the data file recorded for it at run time.
    for r in d["latp"]:
        if r["boot"] == 2 and r["client"] == "rs-i" and r["cost"] == 0:
            r["reg_ns"] += 200_000
    one, _, _ = report(d, {"commit": "abc", "tree": "clean", "date": "d", "command": "c", "wall": "w",
                           "machine": "m", "guest": "g", "blocks": 1, "seed": 1, "runs": 5,
                           "counted_runs": 5, "seconds": 1, "mem_n": 100, "settle": "pass"},
                       [(1, "accepted", ""), (2, "accepted", "")])
    assert "**Boots: 1 accepted, 1 rejected" in one and "| 2 | rejected |" in one, one
    # A run with the settling pass says so; one recorded before it (no "settle" in its meta) does not.
    settled = "loaded modules: first one pass of the back-to-back runs at every size, discarded"
    assert settled in one and settled not in text and "loaded modules: 5 back-to-back runs per size" in text
    assert "This run stopped" not in one
    cut, _, _ = report(d, {"commit": "abc", "tree": "clean", "date": "d", "command": "c", "wall": "w",
                           "machine": "m", "guest": "g", "blocks": 1, "seed": 1, "runs": 5,
                           "counted_runs": 5, "seconds": 1, "mem_n": 100, "outcome": "2 of 2 boots rejected"},
                       [(1, "accepted", ""), (2, "accepted", "")])
    assert "**This run stopped before it had the accepted boots it wanted: 2 of 2 boots rejected.**" in cut
    # The persistent client's target holds in every boot: a median within it and one boot above
    # it is a miss, and says how many boots.
    three = merge([parse(t, b) for b, t in synthetic(boots=3)])
    for r in three["latp"]:
        if r["boot"] == 2 and r["client"] == "rs-p" and r["cost"] == 1 and r["size"] == 65536:
            r["reg_ns"] *= 1.2
    worst, _, worst_missed = report(three, {"commit": "abc", "tree": "clean", "date": "d", "command": "c",
                                            "wall": "w", "machine": "m", "guest": "g", "blocks": 1, "seed": 1,
                                            "runs": 5, "counted_runs": 5, "seconds": 1, "mem_n": 100},
                                    [(1, "accepted", ""), (2, "accepted", ""), (3, "accepted", "")])
    assert [m for m in worst_missed if m.startswith("rs-p reg 64 KiB model on: median 0.7")
            and "above it in 1 of 3 boots, up to 0.8" in m], worst_missed
    assert "✗ (1 boot)" in worst
    assert "| 1 | accepted | 12 | 0 |" in one
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "d.gz"
        save_data(p, {"commit": "abc"}, [(b, "accepted", "", x) for b, x in boots])
        meta, back = load_data(p)
        assert meta == {"commit": "abc"} and [x[3] for x in back] == [x for _, x in boots]
        first = p.read_bytes()
        save_data(p, {"commit": "abc"}, [(b, "accepted", "", x) for b, x in boots])
        assert p.read_bytes() == first, "the same records must make the same file"


CHECKS = [("statistics: medians, percentiles, the bootstrap interval", check_statistics),
          ("the block order: every pair once a round, seeded", check_schedule),
          ("the guest's records: every kind parsed, malformed ones refused", check_parse),
          ("the validity gate: a model-on half cheaper than the model costs is rejected", check_gate),
          ("memory per registration from the slab caches", check_memory),
          ("the report: like for like first, targets judged, every boot kept", check_report)]


def check_self():
    for name, fn in CHECKS:
        try:
            fn()
        except AssertionError as e:
            raise SystemExit(f"bench.py self-test: {name}: failed: {e!r}")
    return "bench.py self-test: ok"


# ---- the plot: median latency against size, log-log, no dependencies ----

COLOURS = {"rs-p": "#1f77b4", "rs-i": "#2ca02c", "nv": "#d62728"}
NAMES = {c[0]: c[1] for c in CLIENTS}


def plot(s):
    W, H, L, R, T, B = 460, 360, 64, 12, 36, 48
    panels = [("reg", "registration (ibv_reg_mr)"), ("dereg", "deregistration (ibv_dereg_mr)")]
    sizes = sorted({k[2] for k in s})
    vals = [e[p]["median"] for e in s.values() for p, _ in panels]
    lo, hi = math.log10(max(1, min(vals)) / 1000), math.log10(max(vals) / 1000)
    lo, hi = math.floor(lo), math.ceil(hi) if math.ceil(hi) > math.floor(lo) else math.floor(lo) + 1
    xlo, xhi = math.log2(sizes[0]), math.log2(sizes[-1]) if len(sizes) > 1 else math.log2(sizes[0]) + 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H + 40}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{2 * W}" height="{H + 40}" fill="white"/>']
    for i, (phase, title) in enumerate(panels):
        ox = i * W

        def px(size):
            return ox + L + (math.log2(size) - xlo) / (xhi - xlo) * (W - L - R)

        def py(ns):
            return T + (hi - math.log10(max(ns, 1) / 1000)) / (hi - lo) * (H - T - B)
        out.append(f'<text x="{ox + W / 2}" y="18" text-anchor="middle" font-size="13">'
                   f'{title}: median latency (µs)</text>')
        out.append(f'<rect x="{ox + L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#888"/>')
        for d in range(lo, hi + 1):
            y = py(10 ** d * 1000)
            out.append(f'<line x1="{ox + L}" y1="{y:.1f}" x2="{ox + W - R}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{ox + L - 4}" y="{y + 4:.1f}" text-anchor="end">{10 ** d:g}</text>')
        for size in sizes:
            x = px(size)
            out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#eee"/>')
            out.append(f'<text x="{x:.1f}" y="{H - B + 14}" text-anchor="middle">'
                       f'{size_name(size).replace(" ", "")}</text>')
        out.append(f'<text x="{ox + W / 2}" y="{H - B + 32}" text-anchor="middle">registration size</text>')
        for client in COLOURS:
            for cost, dash in ((1, ""), (0, ' stroke-dasharray="5,4"')):
                pts = [(px(k[2]), py(e[phase]["median"])) for k, e in sorted(s.items())
                       if k[0] == client and k[1] == cost]
                if not pts:
                    continue
                pts.sort()
                out.append(f'<polyline fill="none" stroke="{COLOURS[client]}" stroke-width="1.8"{dash} '
                           f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}"/>')
                for x, y in pts:
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.2" fill="{COLOURS[client]}"/>')
    lx = 20
    for client, colour in COLOURS.items():
        out.append(f'<line x1="{lx}" y1="{H + 22}" x2="{lx + 24}" y2="{H + 22}" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 30}" y="{H + 26}">{NAMES[client]}</text>')
        lx += 220
    out.append(f'<text x="{lx}" y="{H + 26}">solid: cost model on; dashed: off</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ---- build and boot ----

def run(cmd, **kw):
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if res.returncode:
        sys.stderr.write(res.stdout)
        raise SystemExit(f"bench: build step failed: {' '.join(map(str, cmd))}")
    return res.stdout


def source_copy():
    """The repository's files (tracked and untracked, not ignored) copied into .build/bench/src,
    mtimes kept, so that the modules are built for the bench kernel there and never overwrite the
    test kernel's builds in the work tree (kbuild would not notice the change of kernel: a module
    built without KASAN would then be loaded into the KASAN kernel of make check)."""
    files = run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"]).split("\0")
    for f in files:
        src = REPO / f
        if not f or not src.is_file():
            continue
        dst = SRC / f
        st = src.stat()
        if dst.exists() and dst.stat().st_mtime == st.st_mtime and dst.stat().st_size == st.st_size:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    return SRC


def build(kdir):
    shutil.rmtree(PAYLOAD, ignore_errors=True)
    (PAYLOAD / "modules").mkdir(parents=True)
    vm.log("bench: building the stand-ins, peermem_rs.ko and nvidia-peermem.ko for the bench kernel "
           f"in {SRC}")
    src = source_copy()
    run(["make", "-s", "-C", str(src), "module"])
    shutil.copy2(src / "peermem_rs.ko", PAYLOAD / "modules")
    for s in ("nvidia_p2p", "peer_mem_host"):
        for ko in (src / "tests" / "standins" / s).glob("*.ko"):
            shutil.copy2(ko, PAYLOAD / "modules")
    run([str(src / "tests/reference/build-nvidia-peermem.sh"), str(PAYLOAD / "modules")])
    # The modules must be the bench kernel's: a module of the debug kernel would not load.
    vermagic = run([str(REPO / "tests/infra/in-root"), "modinfo", "-F", "vermagic",
                    str(PAYLOAD / "modules" / "peermem_rs.ko")]).strip()
    release = (kdir / "include/config/kernel.release").read_text().strip()
    if not vermagic.startswith(release):
        raise SystemExit(f"bench: peermem_rs.ko is for {vermagic}, the kernel is {release}")
    vm.log("bench: building the guest program")
    run([str(REPO / "tests/infra/in-root"), "cc", "-static", "-O2", "-Wall", "-Werror",
         f"-I{REPO / 'tests/selftests/common'}", f"-I{REPO / 'tests/standins/include'}",
         "-o", str(PAYLOAD / "bench"), str(HERE / "bench.c"), "-lpthread"])
    out = run([str(PAYLOAD / "bench"), "selftest"])
    vm.log(f"bench: {out.strip()}")


def host_load():
    qemus = subprocess.run(["pgrep", "-c", "-f", "qemu-system"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return f"load average {os.getloadavg()[0]:.2f}, {qemus or 0} QEMU process(es)"


def git(*args):
    return subprocess.run(["git", "-C", str(REPO), *args], stdout=subprocess.PIPE, text=True, check=True).stdout


def run_boot(n, plan, accel, kdir, a):
    """One boot: its records (text) and a line about the host's load. A guest error or a kernel
    splat ends the whole run: figures taken next to either mean nothing."""
    results = BOOTS / str(n)
    load_before = host_load()
    vm.log(f"bench: boot {n}: switch-iommu ({accel}; {load_before}), GPU BAR {a.bar_mib} MiB")
    res = vm.boot("switch-iommu", plan, PAYLOAD, results, accel, a.timeout, kdir,
                  machine_overrides={"gpu_bar_mib": a.bar_mib, "memory_mib": 2048})
    output = (results / "output").read_text(errors="replace") if (results / "output").exists() else ""
    sys.stderr.write("".join(f"  {line}\n" for line in output.splitlines() if line.startswith("bench")))
    if res.plan_rc != 0 or "BENCH-DONE" not in output:
        tail = "\n".join((output or res.console).splitlines()[-30:])
        raise SystemExit(f"bench: boot {n}: the guest did not finish (plan exit {res.plan_rc}, "
                         f"{'timed out' if res.timed_out else 'qemu exit ' + str(res.qemu_rc)}); "
                         f"logs in {results}\n{tail}")
    dmesg = (results / "dmesg").read_text(errors="replace") if (results / "dmesg").exists() else res.console
    splats = [line for line in dmesg.splitlines() if ktap.SPLAT.search(line)]
    if splats:
        raise SystemExit("bench: boot {}: kernel splat during the run; logs in {}\n{}".format(
            n, results, "\n".join(splats[:10])))
    return (results / "raw.txt").read_text(), res, f"boot {n}: {res.seconds:.0f} s, {load_before} before, {host_load()} after"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=5, help="accepted boots wanted")
    ap.add_argument("--max-rejected", type=int, default=3, help="boots the gate may reject before the run fails")
    ap.add_argument("--blocks", type=int, default=6, help="rounds of the six pairs per boot")
    ap.add_argument("--runs", type=int, default=5, help="back-to-back runs per size per block")
    ap.add_argument("--counted-runs", type=int, default=2, help="counted runs per size per block")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--first-sizes", default="64K,1M,16M",
                    help="sizes of the first-registration runs (each block allocates runs + 2 of each)")
    ap.add_argument("--inv-sizes", default="64K,16M")
    ap.add_argument("--seconds", type=int, default=1, help="seconds per throughput point per block")
    ap.add_argument("--mem-n", type=int, default=2048, help="live registrations for the memory figure")
    ap.add_argument("--bar-mib", type=int, default=2048, help="GPU BAR (a power of two; 1 GiB needs 2048)")
    ap.add_argument("--seed", type=int, default=None, help="the block order's seed (default: the time)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per boot")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()

    print(check_self(), file=sys.stderr)
    if a.self_test:
        return 0
    start = time.monotonic()
    if a.report_only:
        meta, boots = load_data(DATA)
        meta = dict(meta, report_commit=git("rev-parse", "HEAD").strip())
    else:
        # What the run writes (BENCHMARKS.*) does not count, as in vm.source_state.
        dirty = [line[3:] for line in git("status", "--porcelain", "--", ".", ":!BENCHMARKS.md", ":!BENCHMARKS.svg",
                                          ":!BENCHMARKS.data.xz").splitlines()]
        meta = {"commit": git("rev-parse", "HEAD").strip(),
                "tree": "clean" if not dirty else f"DIRTY ({', '.join(dirty[:8])}{', ...' if len(dirty) > 8 else ''})",
                "seed": a.seed if a.seed is not None else int(time.time()),
                "blocks": a.blocks, "runs": a.runs, "counted_runs": a.counted_runs, "seconds": a.seconds,
                "mem_n": a.mem_n, "settle": "pass",
                "command": "make bench" + (f" BENCH_ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else "")}
        if dirty:
            vm.log(f"bench: the work tree is dirty ({', '.join(dirty[:8])}): the report will say so")
        kdir = vm.kernel_dir()
        accel, reason = vm.choose_accel(kdir)
        build(kdir)
        rng = random.Random(meta["seed"])
        shutil.rmtree(BOOTS, ignore_errors=True)
        boots, notes, n, rejected, guest = [], [], 0, 0, ""
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.machine())

        def summary(outcome):
            """The run's summary as it stands, saved with every boot: a run cut short keeps it too."""
            meta.update({
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "wall": f"{time.monotonic() - start:.0f} s for {n} boots ({'; '.join(notes)})",
                "machine": f"{os.cpu_count()} host cores ({cpu}), QEMU {accel} ({reason}), guest 2 vCPUs, "
                           f"2 GiB RAM, GPU BAR {a.bar_mib} MiB",
                "guest": guest,
                "outcome": outcome,
            })
            save_data(DATA, meta, boots)

        stopped = None
        while sum(st == "accepted" for _, st, _, _ in boots) < a.boots:
            n += 1
            order = schedule(rng, a.blocks)
            plan = PLAN.format(runs=a.runs, counted_runs=a.counted_runs, sizes=" ".join(a.sizes.split(",")),
                               first_sizes=" ".join(a.first_sizes.split(",")),
                               inv_sizes=" ".join(a.inv_sizes.split(",")), seconds=a.seconds,
                               threads=" ".join(map(str, THREADS)), mem_n=a.mem_n, nblocks=len(order),
                               blocks="\n".join(f"block {i} {c} {cost}" for i, (c, cost) in enumerate(order, 1)))
            text, res, note = run_boot(n, plan, accel, kdir, a)
            notes.append(note)
            env = (BOOTS / str(n) / "env.txt").read_text().split("\n")
            guest = f"Linux {env[0]} (bench flavour, kernel {kdir.name}), {env[1]} CPUs, {env[3]} IOMMU groups"
            parsed = parse(text, n)
            if len({(r["client"], r["cost"]) for r in parsed["latp"]}) != 2 * len(LABELS):
                raise SystemExit(f"bench: boot {n} has no latency records of some client; logs in {BOOTS / str(n)}")
            if {r["client"] for r in parsed["steps"]} != {"rs-i", "rs-p"}:
                raise SystemExit(f"bench: boot {n}: peermem-rs's time accounting gave no steps "
                                 f"(debugfs peermem_rs/time); logs in {BOOTS / str(n)}")
            status, why = boot_status(parsed, n)
            boots.append((n, status, why, text))
            vm.log(f"bench: boot {n} {status}{': ' + why if why else ''}")
            rejected += status == "rejected"
            if rejected > a.max_rejected:
                stopped = (f"{rejected} of {n} boots rejected by the validity gate, more than "
                           f"--max-rejected {a.max_rejected} allows")
            # Keep every boot's records as they come: a run cut short (stopped here, or killed)
            # still leaves its data, and says how it ended.
            accepted = sum(st == "accepted" for _, st, _, _ in boots)
            summary(stopped or ("complete" if accepted >= a.boots else
                                f"cut short after boot {n} ({accepted} accepted, {rejected} rejected)"))
            if stopped:
                break
        if stopped and not any(st == "accepted" for _, st, _, _ in boots):
            raise SystemExit(f"bench: {stopped}, and none accepted; records in {DATA} and {BOOTS}")
    data = merge([parse(t, b) for b, _, _, t in boots])
    text, svg, missed = report(data, meta, [(b, st, why) for b, st, why, _ in boots])
    # A hand-written reading of a run (below NOTES in BENCHMARKS.md) is kept, marked as such.
    old = DOC.read_text() if DOC.exists() else ""
    if NOTES in old:
        text += "\n" + NOTES + old.split(NOTES, 1)[1]
    DOC.write_text(text)
    SVG.write_text(svg)
    vm.log(f"bench: wrote {DOC} and {SVG}{'' if a.report_only else f', with every record in {DATA}'}; {len(missed)} target(s) missed; "
           f"{time.monotonic() - start:.0f} s")
    if meta.get("outcome", "complete") != "complete":
        # The report is written, and says so at its top; the run still failed.
        raise SystemExit(f"bench: the run stopped: {meta['outcome']}; records in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
