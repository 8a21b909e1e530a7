#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Writes the figures of docs/model-check.md: runs `protocol-model <client>` (release build) for every
client the page describes, and rewrites the section between its "model check: begin/end" marks with a
table of what each run printed (configurations, states, unique states, counterexamples, the
configurations where a registration is kept for good in the accepted race, what the MPS
configurations among them add, seconds), and the commit it ran on and whether the tree had changes
not committed. The state counts and counterexamples are exact and repeatable; the seconds are of
this run, on this machine.

    crates/protocol-model/write-doc.py             # rewrites the section
    crates/protocol-model/write-doc.py --dry-run   # prints it instead
"""

import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "model-check.md"
BEGIN = "<!-- model check: begin (written by crates/protocol-model/write-doc.py; do not edit) -->"
END = "<!-- model check: end -->"
# (argument, what the client is): the sections of docs/model-check.md, in their order.
CLIENTS = [
    ("fixed", "the client as it is: N left to linger, adopted by a later registration of the owner (docs/design-lingering-n.md)"),
    ("maps-n", "the client as it is with rule 1 broken: N's table mapped (H1, as the client of 8adc715)"),
    ("trusts-foreign-put", "the client as it is with rule 2 broken: a foreign put_pages of N trusted (H2, as the client of 8adc715)"),
    ("drops-ref-in-callback", "the client as it is with rule 4 broken: the reference dropped in the callback (L1, as the client of 8adc715)"),
    ("no-n-pins", "the client before 8071b8f (eb5e4f5, no `N_PINS`)"),
    ("unlocked-p", "the client before 19a7cde (d115ce6, no `N_PINS` around acquire's persistent pin)"),
    ("trusts-unpin", "the client before 6c0a72f (b477f12, no proof: the owner's 0 from put_pages of N taken as the unpin)"),
    ("proves-unpin", "the client before N lingered (0ae4785: the owner's reach proved by a persistent pin, then N unpinned)"),
]
CONFIG = re.compile(r"^\S.*: (\d+) states \((\d+) unique\)$")
# The configurations with an MPS owner that may leave the server's P2P object (`Config::mps`).
MPS = ", MPS ("
TOTAL = re.compile(r"^total: (\d+) states \((\d+) unique\) in ([\d.]+) s; (\d+) counterexamples$")


def git(*args):
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def main():
    dry = sys.argv[1:] == ["--dry-run"]
    if sys.argv[1:] not in ([], ["--dry-run"]):
        raise SystemExit(f"usage: {sys.argv[0]} [--dry-run]")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    source = f"{git('rev-parse', 'HEAD')} {'dirty' if dirty else 'clean'}"
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "protocol-model"], cwd=REPO, check=True)
    binary = REPO / "target" / "release" / "protocol-model"
    rows = []
    for arg, what in CLIENTS:
        out = subprocess.run([str(binary), arg], cwd=REPO, capture_output=True, text=True)
        if out.returncode not in (0, 1):
            raise SystemExit(f"protocol-model {arg}: exit {out.returncode}\n{out.stderr}")
        lines = out.stdout.splitlines()
        configs = sum(1 for line in lines if CONFIG.match(line))
        total = next((TOTAL.match(line) for line in lines if TOTAL.match(line)), None)
        if total is None:
            raise SystemExit(f"protocol-model {arg}: no total line")
        states, unique, seconds, failures = total.groups()
        # Per configuration: its line, then its properties (FAILS: a counterexample) and, if a
        # registration can be kept for good in the accepted race, an "accepted" line.
        kept = sum(1 for line in lines if line.startswith("  accepted"))
        mps = [0, 0, 0, 0]  # configurations, states, unique, counterexamples
        in_mps = False
        failing = set()  # the configurations with a counterexample
        current = None
        for line in lines:
            config = CONFIG.match(line)
            if line.startswith("  FAILS") and current is not None:
                failing.add(current)
            if config:
                current = line
                in_mps = MPS in line
                if in_mps:
                    mps[0] += 1
                    mps[1] += int(config.group(1))
                    mps[2] += int(config.group(2))
            elif in_mps and line.startswith("  FAILS"):
                mps[3] += 1
        rows.append(f"| `{arg}` | {what} | {configs} | {states} | {unique} | {failures} | {len(failing)} | {kept} | "
                    f"{mps[0]}: {mps[1]} ({mps[2]}), {mps[3]} | {seconds} |")
        print(f"{arg}: {configs} configurations, {states} states ({unique} unique), {failures} "
              f"counterexamples in {len(failing)} configurations, kept for good in {kept}; MPS: {mps[0]} configurations, {mps[1]} "
              f"states ({mps[2]} unique), {mps[3]} counterexamples; {seconds} s", file=sys.stderr)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = [BEGIN, "",
             f"Measured by `crates/protocol-model/write-doc.py` on `{source}` (the commit, and whether the "
             f"tree had changes not committed), {when}, release build, one run per client:", "",
             "| client | what | configurations | states | unique | counterexamples | failing configurations | "
             "kept for good | MPS: configurations: states (unique), counterexamples | s |",
             "|---|---|---|---|---|---|---|---|---|---|", *rows, "",
             "*failing configurations*: those with at least one counterexample.", "",
             "*kept for good*: the configurations where a registration is kept, with the module "
             "reference, after a proof made too late (0 since the proof comes before the unpin). "
             "The fixed client's counterexamples are all in the MPS configurations and all the one "
             "window nvidia.ko leaves open, the owner leaving the P2P object between the proof and "
             "its put_pages of N (a test checks that; docs/model-check.md and docs/known-limits.md, "
             "\"MPS\"). *MPS*: the configurations (`Config::mps`, invalidating flavour, "
             "deregistered by the owner, a driver that unpins, no second registration, both hosts) "
             "where the owner is an MPS client that may leave the server's P2P object at any moment, "
             "its pins staying armed: its put_pages of N then finds nothing and answers 0, and the "
             "server's free still calls N back; their figures are included in the columns before.",
             "", END]
    if dry:
        print("\n".join(block))
        return
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: no '{BEGIN}' ... '{END}' section")
    before, rest = doc.split(BEGIN, 1)
    DOC.write_text(before + "\n".join(block) + rest.split(END, 1)[1])
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
