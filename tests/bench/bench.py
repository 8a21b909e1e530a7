#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""`make bench`: registration cost of peermem-rs against NVIDIA's nvidia-peermem 550, side by side.

Builds the benchmark kernel (tests/infra/build-kernel.sh with PEERMEM_KERNEL_FLAVOUR=bench: the test
kernel without its debug options), the stand-ins, peermem_rs.ko and NVIDIA's nvidia-peermem.ko
against it, and the guest program tests/bench/bench.c; boots ONE `switch-iommu` VM (the emulated
IOMMU on, so DMA mapping costs what it really costs there) with a GPU BAR big enough for 1 GiB
registrations, and in that boot, on the same stand-ins, for the cost model off and on:

  peermem-rs, persistent client      (persistent_api_support=1)
  peermem-rs, invalidating client    (persistent_api_support=0)
  nvidia-peermem 550                 (invalidating only: 550 has no persistent option)

each loaded alone (one peer-memory client at a time), measures registration and deregistration
latency per size (median and p99 over --runs runs), invalidation latency (cudaFree to the NIC's key
revoked) for the invalidating clients, registration throughput with 1, 2 and 8 threads, and slab
memory per live registration; the NVIDIA stand-in's counters give the provider's calls and time per
registration. Writes BENCHMARKS.md and BENCHMARKS.svg at the top of the repository, and the raw
records in .build/bench/. Never part of make check: figures are TCG figures and noisy.

    tests/bench/bench.py [--runs N] [--sizes 64K,...] [--seconds S] [--mem-n N] [--bar-mib M]
    tests/bench/bench.py --report-only      # rewrite BENCHMARKS.md from .build/bench/results
    tests/bench/bench.py --self-test        # the unit checks of the statistics and the report

Exit status: 0 when the guest ran everything without an error (targets missed are reported, not
failed); non-zero on any error (a failed registration is an error, not a data point).
"""

import argparse
import math
import os
import platform
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
RESULTS = OUT / "results"
DOC = REPO / "BENCHMARKS.md"
SVG = REPO / "BENCHMARKS.svg"
GPU_PAGE = 64 << 10
FNS = ["get_pages", "get_pages_persistent", "put_pages", "put_pages_persistent", "dma_map_pages",
       "dma_unmap_pages"]
CLIENTS = [  # label, description, insmod arguments, invalidating
    ("rs-p", "peermem-rs, persistent client", "peermem_rs.ko persistent_api_support=1 peerdirect_support=0", False),
    ("rs-i", "peermem-rs, invalidating client", "peermem_rs.ko persistent_api_support=0 peerdirect_support=0", True),
    ("nv", "nvidia-peermem 550", "nvidia-peermem.ko", True),
]
MODNAME = {"rs-p": "peermem_rs", "rs-i": "peermem_rs", "nv": "nvidia_peermem"}
DEFAULT_SIZES = "64K,256K,1M,4M,16M,64M,256M,1G"
NOTES = "<!-- notes: hand-written, kept by bench.py across runs; check them against the figures above -->"
THREADS = [1, 2, 8]

PLAN = r"""
set -u
M=/payload/modules
B=/payload/bench
R=/results/raw.txt
: > $R
fail() {{ echo "BENCH-FAIL: $*"; exit 1; }}
{{ uname -r; nproc; cat /proc/cmdline; ls /sys/kernel/iommu_groups | wc -l; }} > /results/env.txt
# Two rounds, the clients in opposite orders, so that whatever drifts during a boot (the IOMMU's
# IOVA and page-table state, the host's other load) does not favour the client that runs first.
for round in 1 2; do
 for cost in 0 1; do
  [ $round = 1 ] && order="{clients}" || order="{clients_reversed}"
  for label in $order; do
    echo "bench: round $round $label cost_model=$cost"
    insmod $M/nvidia_p2p_standin.ko cost_model=$cost || fail "insmod nvidia_p2p_standin"
    insmod $M/peer_mem_host.ko || fail "insmod peer_mem_host"
    case $label in
      rs-p) insmod $M/peermem_rs.ko persistent_api_support=1 peerdirect_support=0 || fail "insmod peermem_rs" ;;
      rs-i) insmod $M/peermem_rs.ko persistent_api_support=0 peerdirect_support=0 || fail "insmod peermem_rs" ;;
      nv) insmod $M/nvidia-peermem.ko || fail "insmod nvidia-peermem" ;;
    esac
    t0=$(cut -d' ' -f1 /proc/uptime)
    $B latency-plain $label:$cost {runs} {sizes} >> $R || fail "latency $label cost $cost"
    $B latency $label:$cost {runs} {sizes} >> $R || fail "counted latency $label cost $cost"
    case $label in rs-i|nv)
      $B invalidation $label:$cost {runs} {inv_sizes} >> $R || fail "invalidation $label cost $cost" ;;
    esac
    $B throughput $label:$cost {seconds} 64K {threads} >> $R || fail "throughput $label cost $cost"
    if [ $cost = 0 ]; then
      $B memory $label:$cost {mem_n} 64K >> $R || fail "memory $label"
    fi
    echo "bench: round $round $label cost_model=$cost took $(awk -v a=$t0 -v b=$(cut -d' ' -f1 /proc/uptime) 'BEGIN {{ print b - a }}') s"
    for m in peermem_rs nvidia_peermem peer_mem_host nvidia_p2p_standin; do
      [ -e /sys/module/$m/initstate ] && {{ rmmod $m || fail "rmmod $m"; }}
    done
  done
 done
done
echo BENCH-DONE
"""


# ---- statistics (unit-checked by --self-test) ----

def median(xs):
    xs = sorted(xs)
    if not xs:
        raise ValueError("median of nothing")
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def percentile(xs, p):
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it
    (with 30 runs, p99 is the largest)."""
    xs = sorted(xs)
    if not xs:
        raise ValueError("percentile of nothing")
    rank = max(1, math.ceil(p / 100 * len(xs)))
    return xs[rank - 1]


def ratio(a, b):
    return a / b if b else float("inf")


def size_name(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}iB"
    return f"{n} B"


def fmt_us(ns):
    us = ns / 1000
    return f"{us:.0f}" if us >= 100 else f"{us:.1f}" if us >= 10 else f"{us:.2f}"


# ---- parsing the guest's records ----

def parse(text):
    """The guest's raw records into dicts keyed by kind. Malformed lines are an error."""
    lat, latp, inv, tput, mem = [], [], [], [], []
    for n, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if not f:
            continue
        try:
            if f[0] == "lat":
                label, cost = f[1].split(":")
                assert f[6] == "reg" and f[20] == "dereg" and len(f) == 34, "field layout"
                r = {"client": label, "cost": int(cost), "size": int(f[2]), "run": int(f[3]),
                     "reg_ns": int(f[4]), "dereg_ns": int(f[5])}
                for phase, at in (("reg", 7), ("dereg", 21)):
                    r[phase + "_calls"] = [int(x) for x in f[at:at + 6]]
                    r[phase + "_fn_ns"] = [int(x) for x in f[at + 6:at + 12]]
                    r[phase + "_model_ns"] = int(f[at + 12])
                lat.append(r)
            elif f[0] == "latp":
                label, cost = f[1].split(":")
                assert len(f) == 6, "field layout"
                latp.append({"client": label, "cost": int(cost), "size": int(f[2]), "run": int(f[3]),
                             "reg_ns": int(f[4]), "dereg_ns": int(f[5])})
            elif f[0] == "inv":
                label, cost = f[1].split(":")
                assert f[5] == "free" and len(f) == 19, "field layout"
                inv.append({"client": label, "cost": int(cost), "size": int(f[2]), "ns": int(f[4]),
                            "calls": [int(x) for x in f[6:12]], "fn_ns": [int(x) for x in f[12:18]]})
            elif f[0] == "tput":
                label, cost = f[1].split(":")
                tput.append({"client": label, "cost": int(cost), "size": int(f[2]), "threads": int(f[3]),
                             "regs": int(f[4]), "ns": int(f[5])})
            elif f[0] == "mem":
                label, cost = f[1].split(":")
                mem.append({"client": label, "size": int(f[2]), "n": int(f[3]),
                            "before_kb": int(f[4]), "after_kb": int(f[5])})
            else:
                raise ValueError(f"unknown record {f[0]}")
        except (ValueError, IndexError, AssertionError) as e:
            raise SystemExit(f"raw record {n} is malformed ({e}): {line}")
    return {"lat": lat, "latp": latp, "inv": inv, "tput": tput, "mem": mem}


def summarize(data):
    """Per (client, cost, size): latency statistics (from the back-to-back runs, latp, when there
    are any) and where the time goes (from the counted runs, lat)."""
    groups, plain = {}, {}
    for r in data["lat"]:
        groups.setdefault((r["client"], r["cost"], r["size"]), []).append(r)
    for r in data.get("latp", []):
        plain.setdefault((r["client"], r["cost"], r["size"]), []).append(r)
    s = {}
    for key, rs in groups.items():
        pages = key[2] // GPU_PAGE
        e = {"runs": len(plain.get(key, rs)), "pages": pages}
        for phase in ("reg", "dereg"):
            lat = [r[phase + "_ns"] for r in rs]
            timed = [r[phase + "_ns"] for r in plain.get(key, rs)]
            prov = [sum(r[phase + "_fn_ns"]) for r in rs]
            own = [r[phase + "_ns"] - sum(r[phase + "_fn_ns"]) for r in rs]
            e[phase] = {
                "median": median(timed), "p99": percentile(timed, 99), "counted_median": median(lat),
                "provider": median(prov), "own": median(own), "own_per_page": median(own) / pages,
                "model": median([r[phase + "_model_ns"] for r in rs]),
                # Calls per registration: the same in every run, or the run's spread says so.
                "calls": [sorted({r[phase + "_calls"][i] for r in rs}) for i in range(6)],
                "fn_ns": [median([r[phase + "_fn_ns"][i] for r in rs]) for i in range(6)],
            }
        s[key] = e
    return s


def check_self():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 2, 3]) == 2.5
    assert percentile(list(range(1, 31)), 99) == 30
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([5], 50) == 5
    assert percentile(list(range(1, 31)), 50) == 15
    assert ratio(1, 2) == 0.5 and ratio(1, 0) == float("inf")
    assert size_name(65536) == "64 KiB" and size_name(1 << 30) == "1 GiB" and size_name(3 << 20) == "3 MiB"
    line = ("lat rs-p:1 65536 0 1000 500 reg 0 1 0 0 1 0 0 300 0 0 200 0 100 "
            "dereg 0 0 0 1 0 1 0 0 0 50 0 40 30")
    d = parse(line + "\n" + line.replace(" 0 1000 ", " 1 3000 ") + "\ninv nv:0 65536 0 777 free 0 0 1 0 0 1 0 0 30 0 0 20 0\n"
              "tput nv:1 65536 2 100 1000000000\nmem rs-i:0 65536 1024 1000 1064\n"
              "latp rs-p:1 65536 0 900 400\nlatp rs-p:1 65536 1 1100 600\n")
    assert len(d["lat"]) == 2 and d["lat"][0]["reg_calls"] == [0, 1, 0, 0, 1, 0]
    assert d["lat"][0]["reg_fn_ns"] == [0, 300, 0, 0, 200, 0] and d["lat"][0]["reg_model_ns"] == 100
    assert d["lat"][0]["dereg_calls"] == [0, 0, 0, 1, 0, 1] and d["lat"][0]["dereg_model_ns"] == 30
    s = summarize(d)[("rs-p", 1, 65536)]
    assert s["reg"]["median"] == 1000 and s["reg"]["p99"] == 1100 and s["reg"]["counted_median"] == 2000
    assert s["dereg"]["median"] == 500 and s["reg"]["provider"] == 500
    assert s["reg"]["own"] == 1500 and s["reg"]["calls"][1] == [1]
    assert d["inv"][0]["calls"] == [0, 0, 1, 0, 0, 1] and d["inv"][0]["fn_ns"][5] == 20
    assert d["inv"][0]["ns"] == 777 and d["tput"][0]["threads"] == 2 and d["mem"][0]["after_kb"] == 1064
    for bad in ("lat rs-p:1 65536 0 1000", "xyz 1", "inv nv 1 2 3", "latp nv:0 1 2 3"):
        try:
            parse(bad)
        except SystemExit:
            continue
        raise AssertionError(f"parse accepted {bad!r}")
    svg = plot({("rs-p", 1, 65536): s, ("nv", 1, 65536): s, ("rs-p", 1, 1 << 20): s, ("nv", 1, 1 << 20): s})
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and "polyline" in svg
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


# ---- the report ----

def verdict(r, limit):
    return "met" if r <= limit else "**MISSED**"


def report(data, meta):
    s = summarize(data)
    sizes = sorted({k[2] for k in s})
    lines = ["# Benchmarks: peermem-rs against nvidia-peermem 550", ""]
    lines += [
        f"Measured {meta['date']} with `{meta['command']}` (tests/bench/bench.py; wall time "
        f"{meta['wall']}). Machine: {meta['machine']}. Guest: {meta['guest']}. Other load on the "
        f"host: {meta['load']}.",
        "",
        "What is measured and how: one `switch-iommu` VM boot (QEMU's emulated Intel IOMMU on, strict "
        "mode, so every `dma_map_resource` of a 64 KiB GPU page really goes through the IOMMU's page "
        "tables and IOTLB invalidation), the benchmark kernel (the test kernel's source and config "
        "without KASAN, lockdep, kmemleak, UBSAN, atomic-sleep and list debugging, DMA-API debugging "
        "and fault injection: `PEERMEM_KERNEL_FLAVOUR=bench`), the stand-ins of tests/standins (the "
        "NVIDIA stand-in plays nvidia.ko 550, the host stand-in an MLNX_OFED 5.x ib_core and an RDMA "
        "NIC), one peer-memory client loaded at a time. A registration is the host stand-in's "
        "REG_MR ioctl on GPU memory, timed in the guest from the call to its return (what "
        "`ibv_reg_mr` costs an application, minus the verbs library); deregistration likewise. "
        f"{meta['runs']} runs per size and round after 2 warm-up runs, the same GPU allocation re-registered, "
        "in two rounds with the clients in opposite orders (pooled: twice as many runs per figure). "
        f"p99 is the nearest-rank 99th percentile: with {2 * meta['runs']} pooled runs, the slowest "
        "run. The cost model (tests/standins/nvidia_p2p/README.md, \"Cost model\") adds to each pin "
        "and unpin what nvidia.ko's takes on a V100 (GDRCopy's figures, interpolated per 64 KiB "
        "page): with it off, the provider costs only the stand-in's own code, so the module's own "
        "work dominates; with it on, the provider costs hardware microseconds while the clients, "
        "both stand-ins and the emulated IOMMU run at TCG speed, so the provider's share is still "
        "understated, and persistent pins are charged like ordinary ones although nvidia.ko does "
        "more for them (the stand-in README, \"Not modelled\"). Figures are TCG figures: absolute "
        "times are those of an emulated CPU, several times slower than hardware.",
        "",
        "Clients: **rs-p** peermem-rs `persistent_api_support=1` (one persistent pin per "
        "registration), **rs-i** peermem-rs `persistent_api_support=0` (the invalidating client), "
        "**nv** NVIDIA's nvidia-peermem 550 built against the stand-ins (invalidating only).",
        "",
    ]

    # Ratio table: registration and deregistration medians, and p99.
    lines += ["## Latency ratios (peermem-rs / nvidia-peermem, median; p99 in brackets)", "",
              "Targets: persistent-client registration with the cost model on at most 0.75x; every other "
              "figure at most 1.0x.", "",
              "| size | rs-p reg, model on | rs-p reg, off | rs-i reg, on | rs-i reg, off | rs-p dereg, on | "
              "rs-p dereg, off | rs-i dereg, on | rs-i dereg, off |",
              "|---|---|---|---|---|---|---|---|---|"]
    missed = []
    for size in sizes:
        row = [size_name(size)]
        for phase in ("reg", "dereg"):
            for client in ("rs-p", "rs-i"):
                for cost in (1, 0):
                    a, b = s.get((client, cost, size)), s.get(("nv", cost, size))
                    if not a or not b:
                        row.append("–")
                        continue
                    r = ratio(a[phase]["median"], b[phase]["median"])
                    r99 = ratio(a[phase]["p99"], b[phase]["p99"])
                    limit = 0.75 if (client, phase, cost) == ("rs-p", "reg", 1) else 1.0
                    mark = "" if r <= limit else " ✗"
                    if r > limit:
                        missed.append(f"{client} {phase} {size_name(size)} cost model {'on' if cost else 'off'}: "
                                      f"{r:.2f}x (target {limit}x)")
                    if r99 > limit:
                        missed.append(f"{client} {phase} p99 {size_name(size)} cost model {'on' if cost else 'off'}: "
                                      f"{r99:.2f}x (target {limit}x)")
                    row.append(f"{r:.2f}{mark} ({r99:.2f})")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "✗: the median misses its target.", ""]

    # Absolute latencies.
    for phase, title in (("reg", "Registration"), ("dereg", "Deregistration")):
        lines += [f"## {title} latency, µs (median / p99)", "",
                  "Back to back, as an application calls them (nothing read between the calls).", "",
                  "| size | " + " | ".join(f"{c} model {'on' if cost else 'off'}" for cost in (1, 0)
                                          for c, *_ in CLIENTS) + " |",
                  "|---" * 7 + "|"]
        for size in sizes:
            row = [size_name(size)]
            for cost in (1, 0):
                for c, *_ in CLIENTS:
                    e = s.get((c, cost, size))
                    row.append(f"{fmt_us(e[phase]['median'])} / {fmt_us(e[phase]['p99'])}" if e else "–")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")

    lines += ["![median latency against size](BENCHMARKS.svg)", ""]

    # Where the time goes.
    lines += ["## Where the time goes (median per registration, µs)", "",
              "From the counted runs (the stand-in's debugfs counters read before and after each call; "
              "their totals differ from the back-to-back latencies above: see the next section). "
              "Provider: time inside the NVIDIA stand-in's `nvidia_p2p_*` entry points (its `ns_<fn>` "
              "counters, the cost model included). Own: the registration's latency minus that, "
              "i.e. the client module's own work plus the host stand-in's and the ioctl's, which are "
              "the same code for every client; per 64 KiB page in brackets. Calls: `nvidia_p2p_*` calls "
              "per registration (gp get_pages, gpp get_pages_persistent, pp put_pages, ppp "
              "put_pages_persistent, dm dma_map_pages, du dma_unmap_pages), from the stand-in's "
              "`calls_<fn>` counters.", "",
              "| client | model | size | reg total | provider | own (per page) | calls at reg | "
              "dereg total | provider | own (per page) | calls at dereg |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    short = ["gp", "gpp", "pp", "ppp", "dm", "du"]

    def calls(c):
        return " ".join(f"{short[i]}{'/'.join(map(str, v))}" for i, v in enumerate(c) if v != [0])
    for c, *_ in CLIENTS:
        for cost in (1, 0):
            for size in sizes:
                e = s.get((c, cost, size))
                if not e:
                    continue
                cells = [c, "on" if cost else "off", size_name(size)]
                for phase in ("reg", "dereg"):
                    p = e[phase]
                    cells += [fmt_us(p["counted_median"]), fmt_us(p["provider"]),
                              f"{fmt_us(p['own'])} ({fmt_us(p['own_per_page'])})", calls(p["calls"]) or "none"]
                lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    # How much reading the counters between the calls changes them.
    lines += ["## Back to back against counted (registration median, µs)", "",
              "The same registrations timed back to back (latency tables) and with the stand-in's "
              "debugfs counters read between the calls (the breakdown above).", "",
              "| client | model | " + " | ".join(size_name(z) for z in sizes) + " |",
              "|---|---|" + "---|" * len(sizes)]
    for c, *_ in CLIENTS:
        for cost in (1, 0):
            cells = []
            for z in sizes:
                e = s.get((c, cost, z))
                cells.append(f"{fmt_us(e['reg']['median'])} / {fmt_us(e['reg']['counted_median'])}" if e else "–")
            lines.append(f"| {c} | {'on' if cost else 'off'} | " + " | ".join(cells) + " |")
    lines.append("")

    # The IOMMU's per-page mapping cost, as measured.
    iommu = []
    for (c, cost, size), e in sorted(s.items()):
        dm = e["reg"]["calls"][4]
        if cost == 0 and dm == [1] and e["pages"] >= 1:
            iommu.append((size, c, e["reg"]["fn_ns"][4] / e["pages"],
                          e["dereg"]["fn_ns"][5] / e["pages"] if e["dereg"]["calls"][5] == [1] else None))
    if iommu:
        lines += ["## DMA mapping cost per 64 KiB page in this VM (measured)", "",
                  "`nvidia_p2p_dma_map_pages` time per page (median registration, cost model off; the "
                  "stand-in maps each 64 KiB page with `dma_map_resource` through QEMU's emulated "
                  "Intel IOMMU, strict mode), and `dma_unmap_pages` per page where the deregistration "
                  "called it. Small sizes include the call's fixed cost.", "",
                  "| size | client | dma_map µs/page | dma_unmap µs/page |", "|---|---|---|---|"]
        for size, c, m, u in iommu:
            lines.append(f"| {size_name(size)} | {c} | {m / 1000:.2f} | {'–' if u is None else f'{u / 1000:.2f}'} |")
        big = [m for size, c, m, u in iommu if size >= 16 << 20]
        if big:
            lines += ["", f"At 16 MiB and above (fixed costs amortised): median {median(big) / 1000:.2f} µs "
                      f"per 64 KiB page to map."]
        lines.append("")

    # Invalidation.
    inv = {}
    for r in data["inv"]:
        inv.setdefault((r["client"], r["cost"], r["size"]), []).append(r["ns"])
    if inv:
        lines += ["## Invalidation latency (cudaFree to the NIC's key revoked), µs", "",
                  "From the guest's clock before `NVP2P_IOC_FREE` to the host stand-in's timestamp when "
                  "the client's invalidation reached the MR and revoked it (ktime, same clock). The "
                  "provider calls the client makes during the whole cudaFree (from its free callback) "
                  "are listed; the revocation itself comes first.", "",
                  "| size | model | rs-i median / p99 | nv median / p99 | ratio (median) | calls during the free: rs-i; nv |",
                  "|---|---|---|---|---|---|"]
        short = ["gp", "gpp", "pp", "ppp", "dm", "du"]
        inv_calls = {}
        for r in data["inv"]:
            inv_calls.setdefault((r["client"], r["cost"], r["size"]), set()).add(
                " ".join(f"{short[i]}{v}" for i, v in enumerate(r["calls"]) if v) or "none")
        for size in sorted({k[2] for k in inv}):
            for cost in (1, 0):
                a, b = inv.get(("rs-i", cost, size)), inv.get(("nv", cost, size))
                if not a or not b:
                    continue
                r = ratio(median(a), median(b))
                ci = "/".join(sorted(inv_calls[("rs-i", cost, size)]))
                cn = "/".join(sorted(inv_calls[("nv", cost, size)]))
                if r > 1.0:
                    missed.append(f"invalidation {size_name(size)} cost model {'on' if cost else 'off'}: {r:.2f}x")
                lines.append(f"| {size_name(size)} | {'on' if cost else 'off'} | {fmt_us(median(a))} / "
                             f"{fmt_us(percentile(a, 99))} | {fmt_us(median(b))} / {fmt_us(percentile(b, 99))} | "
                             f"{r:.2f}{'' if r <= 1.0 else ' ✗'} | {ci}; {cn} |")
        lines.append("")

    # Throughput.
    if data["tput"]:
        agg = {}
        for r in data["tput"]:
            regs, ns = agg.get((r["client"], r["cost"], r["threads"]), (0, 0))
            agg[(r["client"], r["cost"], r["threads"])] = (regs + r["regs"], ns + r["ns"])
        # Both rounds pooled: all registrations over all the time.
        tp = {k: regs / (ns / 1e9) for k, (regs, ns) in agg.items()}
        lines += ["## Registration throughput, 64 KiB registrations per second (each thread its own "
                  f"buffer and file; register then deregister, {meta['seconds']} s per point and round, both "
                  "rounds pooled)", "",
                  "| threads | model | rs-p | rs-i | nv | rs-p / nv | rs-i / nv |", "|---|---|---|---|---|---|---|"]
        for t in THREADS:
            for cost in (1, 0):
                v = [tp.get((c, cost, t)) for c in ("rs-p", "rs-i", "nv")]
                if None in v:
                    continue
                # Throughput: higher is better, so the target is peermem-rs at least nvidia-peermem's.
                rp, ri = ratio(v[0], v[2]), ratio(v[1], v[2])
                for name, r in (("rs-p", rp), ("rs-i", ri)):
                    if r < 1.0:
                        missed.append(f"throughput {name} {t} threads cost model {'on' if cost else 'off'}: "
                                      f"{r:.2f}x of nvidia-peermem's")
                lines.append(f"| {t} | {'on' if cost else 'off'} | {v[0]:.0f} | {v[1]:.0f} | {v[2]:.0f} | "
                             f"{rp:.2f}{'' if rp >= 1 else ' ✗'} | {ri:.2f}{'' if ri >= 1 else ' ✗'} |")
        lines += ["", "Throughput ratios are peermem-rs's rate over nvidia-peermem's: higher is better, "
                  "the target is at least 1.0.", ""]

    # Memory.
    if data["mem"]:
        lines += ["## Kernel memory per live registration", "",
                  "`SUnreclaim:` of /proc/meminfo (the unreclaimable slab) before and after N live 64 KiB "
                  "registrations of distinct GPU memory, divided by N; once per round, cost model off. "
                  "It counts the whole stack: the client's objects, the host stand-in's MR and SG "
                  "table, and the NVIDIA stand-in's pin, page table and DMA mapping (whose number "
                  "depends on the calls the client makes).", "",
                  "| client | N | SUnreclaim delta per round | per registration (mean) | ratio to nv |",
                  "|---|---|---|---|---|"]
        per = {}
        for r in data["mem"]:
            per.setdefault(r["client"], []).append(((r["after_kb"] - r["before_kb"]) * 1024 / r["n"],
                                                    r["after_kb"] - r["before_kb"], r["n"]))
        mean = {c: sum(x[0] for x in v) / len(v) for c, v in per.items()}
        for c, v in per.items():
            rr = ratio(mean[c], mean["nv"]) if "nv" in mean else float("nan")
            if c != "nv" and rr > 1.0:
                missed.append(f"memory per registration {c}: {rr:.2f}x")
            lines.append(f"| {c} | {v[0][2]} | {', '.join(f'{x[1]} kB' for x in v)} | {mean[c]:.0f} B | "
                         f"{'' if c == 'nv' else f'{rr:.2f}'} |")
        lines.append("")

    lines += ["## Targets missed", ""]
    lines += [f"- {m}" for m in missed] or ["- none"]
    lines += ["", f"Raw records: `.build/bench/results/raw.txt` (format in tests/bench/bench.c).", ""]
    return "\n".join(lines), plot(s), missed


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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--inv-sizes", default="64K,16M")
    ap.add_argument("--seconds", type=int, default=3, help="seconds per throughput point")
    ap.add_argument("--mem-n", type=int, default=2048, help="live registrations for the memory figure")
    ap.add_argument("--bar-mib", type=int, default=2048, help="GPU BAR (a power of two; 1 GiB needs 2048)")
    ap.add_argument("--timeout", type=int, default=5400)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()

    print(check_self(), file=sys.stderr)
    if a.self_test:
        return 0
    start = time.monotonic()
    OUT.mkdir(parents=True, exist_ok=True)
    meta_file = OUT / "meta.txt"
    if not a.report_only:
        if a.runs < 30:
            vm.log(f"bench: --runs {a.runs}: fewer than the 30 the report asks for")
        kdir = vm.kernel_dir()
        accel, reason = vm.choose_accel(kdir)
        build(kdir)
        plan = PLAN.format(clients=" ".join(c[0] for c in CLIENTS),
                           clients_reversed=" ".join(c[0] for c in reversed(CLIENTS)), runs=a.runs,
                           sizes=" ".join(a.sizes.split(",")), inv_sizes=" ".join(a.inv_sizes.split(",")),
                           seconds=a.seconds, threads=" ".join(map(str, THREADS)), mem_n=a.mem_n)
        # vm.boot empties the results directory: keep the previous run's raw records.
        if (RESULTS / "raw.txt").exists():
            shutil.rmtree(OUT / "results.previous", ignore_errors=True)
            shutil.copytree(RESULTS, OUT / "results.previous")
        load_before = host_load()
        vm.log(f"bench: booting switch-iommu ({accel}; {load_before}), GPU BAR {a.bar_mib} MiB")
        res = vm.boot("switch-iommu", plan, PAYLOAD, RESULTS, accel, a.timeout, kdir,
                      machine_overrides={"gpu_bar_mib": a.bar_mib, "memory_mib": 2048})
        load_after = host_load()
        output = (RESULTS / "output").read_text(errors="replace") if (RESULTS / "output").exists() else ""
        sys.stderr.write("".join(f"  {line}\n" for line in output.splitlines() if line.startswith("bench")))
        if res.plan_rc != 0 or "BENCH-DONE" not in output:
            tail = "\n".join((output or res.console).splitlines()[-30:])
            raise SystemExit(f"bench: the guest did not finish (plan exit {res.plan_rc}, "
                             f"{'timed out' if res.timed_out else 'qemu exit ' + str(res.qemu_rc)}); "
                             f"logs in {RESULTS}\n{tail}")
        # A kernel splat during the run is an error too: figures taken next to one mean nothing.
        dmesg = (RESULTS / "dmesg").read_text(errors="replace") if (RESULTS / "dmesg").exists() else res.console
        splats = [line for line in dmesg.splitlines() if ktap.SPLAT.search(line)]
        if splats:
            raise SystemExit("bench: kernel splat during the run; logs in {}\n{}".format(
                RESULTS, "\n".join(splats[:10])))
        env = (RESULTS / "env.txt").read_text().split("\n")
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), platform.machine())
        meta = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": "make bench" + (f" BENCH_ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else ""),
            "wall": f"{time.monotonic() - start:.0f} s, of which the VM boot {res.seconds:.0f} s",
            "machine": f"{os.cpu_count()} host cores ({cpu}), QEMU {accel} ({reason}), guest 2 vCPUs, "
                       f"2 GiB RAM, GPU BAR {a.bar_mib} MiB",
            "guest": f"Linux {env[0]} (bench flavour, kernel {kdir.name}), {env[1]} CPUs, "
                     f"{env[3]} IOMMU groups",
            "load": f"before the boot {load_before}; after it {load_after} (this run's own QEMU included)",
            "runs": a.runs, "seconds": a.seconds,
        }
        meta_file.write_text(repr(meta))
    else:
        import ast
        meta = ast.literal_eval(meta_file.read_text())
    data = parse((RESULTS / "raw.txt").read_text())
    if not data["lat"]:
        raise SystemExit("bench: no latency records")
    text, svg, missed = report(data, meta)
    # A hand-written reading of a run (below NOTES in BENCHMARKS.md) is kept, marked as such.
    old = DOC.read_text() if DOC.exists() else ""
    if NOTES in old:
        text += "\n" + NOTES + old.split(NOTES, 1)[1]
    DOC.write_text(text)
    SVG.write_text(svg)
    vm.log(f"bench: wrote {DOC} and {SVG}; {len(missed)} target(s) missed; whole run "
           f"{time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
