#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Writes the figures of docs/model-check.md: runs `protocol-model <client>` (release build) for every
client the page describes, and rewrites the section between its "model check: begin/end" marks with a
table of what each run printed (configurations, states, unique states, counterexamples, seconds),
and the commit it ran on and whether the tree had changes not committed. The state counts and
counterexamples are exact and repeatable; the seconds are of this run, on this machine.

    crates/protocol-model/write-doc.py
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
    ("fixed", "the client as it is"),
    ("before", "the client of commit 8adc715"),
    ("no-n-pins", "the client before 8071b8f (eb5e4f5, no `N_PINS`)"),
    ("unlocked-p", "the client before 19a7cde (d115ce6, no `N_PINS` around acquire's persistent pin)"),
]
CONFIG = re.compile(r"^\S.*: (\d+) states \((\d+) unique\)$")
TOTAL = re.compile(r"^total: (\d+) states \((\d+) unique\) in ([\d.]+) s; (\d+) counterexamples$")


def git(*args):
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def main():
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
        rows.append(f"| `{arg}` | {what} | {configs} | {states} | {unique} | {failures} | {seconds} |")
        print(f"{arg}: {configs} configurations, {states} states ({unique} unique), {failures} "
              f"counterexamples, {seconds} s", file=sys.stderr)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = [BEGIN, "",
             f"Measured by `crates/protocol-model/write-doc.py` on `{source}` (the commit, and whether the "
             f"tree had changes not committed), {when}, release build, one run per client:", "",
             "| client | what | configurations | states | unique | counterexamples | s |",
             "|---|---|---|---|---|---|---|", *rows, "", END]
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"{DOC}: no '{BEGIN}' ... '{END}' section")
    before, rest = doc.split(BEGIN, 1)
    DOC.write_text(before + "\n".join(block) + rest.split(END, 1)[1])
    print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()
