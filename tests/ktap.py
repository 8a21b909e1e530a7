"""KTAP parsing, kernel-splat detection and the final report of a test run.

The guest prints KTAP per boot (tests/vm/ksft-run.sh) and writes markers into the kernel log around
each test. This module turns that, the guest's dmesg and the cargo test output into one KTAP report
whose last line is the plain summary `N passed, N failed, N skipped`.
"""

import re
from dataclasses import dataclass, field

RESULT = re.compile(r"^(not ok|ok) (\d+)\s*(.*?)(?:\s+#\s*(.*))?$")

# Kernel log lines that mean a splat: warnings, bugs, sanitizer and lockdep reports, leaks, oopses,
# hung tasks. Every kernel-side run fails on any of them.
SPLAT = re.compile(
    r"(\bWARNING:|\bBUG:|\bINFO: |UBSAN:|unreferenced object|kmemleak: \d+ new suspected|"
    r"\bOops\b|general protection fault|Kernel panic|Call Trace:|possible circular locking|"
    r"possible recursive locking|blocked for more than)"
)
MARK_BEGIN = re.compile(r"peermem-ksft: begin (\S+)")
MARK_END = re.compile(r"peermem-ksft: end (\S+)")


@dataclass
class Case:
    """One test: a kselftest program, a cargo test, or a synthetic check (a splat, a crashed boot)."""
    name: str
    status: str                      # "pass", "fail", "skip"
    reason: str = ""
    subtests: list = field(default_factory=list)   # [(status, name, directive)]
    output: list = field(default_factory=list)
    splats: list = field(default_factory=list)

    def leaves(self):
        """(passed, failed, skipped) counted at the finest level available."""
        p = sum(1 for s, _, _ in self.subtests if s == "pass")
        f = sum(1 for s, _, _ in self.subtests if s == "fail")
        k = sum(1 for s, _, _ in self.subtests if s == "skip")
        if not self.subtests:
            return ({"pass": 1, "fail": 0, "skip": 0}[self.status],
                    {"pass": 0, "fail": 1, "skip": 0}[self.status],
                    {"pass": 0, "fail": 0, "skip": 1}[self.status])
        if self.status == "fail" and f == 0:
            f += 1   # the program failed beyond its subtests: exit status, timeout or a splat
        return p, f, k


def print_checks(results, prefix):
    """Print a host script's checks as KTAP and return its exit status. `results` holds
    (ok, description, why) triples; `why` (any number of lines) is printed only for a failure."""
    print("TAP version 13")
    print(f"1..{len(results)}")
    for i, (ok, desc, why) in enumerate(results, 1):
        print(f"{'ok' if ok else 'not ok'} {i} {prefix}: {desc}")
        if not ok:
            print("\n".join("# " + line for line in str(why).splitlines()))
    return 0 if all(ok for ok, _, _ in results) else 1


def status_of(word, directive):
    if word == "not ok":
        return "fail"
    if directive and directive.upper().startswith("SKIP"):
        return "skip"
    return "pass"


def parse_level(lines):
    """Results at this KTAP level, each with its subtests: the "# "-prefixed lines that precede it,
    parsed as the next level. Returns [(status, name, directive, children, output)]."""
    nodes = []
    pending = []
    for line in lines:
        m = RESULT.match(line)
        if m:
            word, _, name, directive = m.groups()
            nodes.append((status_of(word, directive), name, directive or "", parse_level(pending), pending))
            pending = []
        elif line.startswith("#"):
            pending.append(line[2:] if line.startswith("# ") else line[1:])
    return nodes


def leaves_of(nodes):
    """(status, name, directive) of the innermost results below `nodes`. A node whose own status
    is a failure while none of its children failed (exit status, timeout, crash) counts itself."""
    out = []
    for status, name, directive, children, _ in nodes:
        below = leaves_of(children)
        if not below:
            out.append((status, name, directive))
            continue
        out.extend((s, f"{name}: {n}", d) for s, n, d in below)
        if status == "fail" and not any(s == "fail" for s, _, _ in below):
            out.append(("fail", f"{name}: exit", directive))
    return out


def parse_ksft(text):
    """Parse ksft-run.sh output into Cases: one per test program, with its innermost results as
    subtests."""
    cases = []
    for status, name, directive, children, output in parse_level(text.splitlines()):
        subtests = leaves_of(children)
        cases.append(Case(name=name, status=status, reason=directive, subtests=subtests, output=output))
    return cases


def attribute_splats(dmesg, cases, collection_prefix="selftests: "):
    """Mark tests whose window in the kernel log holds a splat as failed.

    Returns the splat lines that fell outside every test (boot, teardown): the caller fails the run
    on those too.
    """
    by_key = {}
    for c in cases:
        # "selftests: peermem: x.sh" <-> marker "peermem/x.sh"
        parts = c.name.split(": ")
        if len(parts) == 3:
            by_key[f"{parts[1]}/{parts[2]}"] = c
    current = None
    outside = []
    for line in dmesg.splitlines():
        mb = MARK_BEGIN.search(line)
        if mb:
            current = by_key.get(mb.group(1))
            continue
        if MARK_END.search(line):
            current = None
            continue
        if SPLAT.search(line):
            if current is not None:
                current.splats.append(line)
            else:
                outside.append(line)
    for c in cases:
        if c.splats:
            c.status = "fail"
            c.reason = (c.reason + "; " if c.reason else "") + f"kernel splat: {c.splats[0].strip()}"
    return outside


def parse_cargo(text):
    """cargo test's human output -> one Case per test."""
    cases = []
    for line in text.splitlines():
        m = re.match(r"^test (\S+) \.\.\. (ok|FAILED|ignored)(?:, (.*))?$", line)
        if m:
            name, res, why = m.groups()
            cases.append(Case(name=name, status={"ok": "pass", "FAILED": "fail", "ignored": "skip"}[res],
                              reason=f"SKIP {why}" if res == "ignored" and why else ("SKIP" if res == "ignored" else "")))
    return cases


@dataclass
class Group:
    """A group of cases reported together: the host's cargo tests, or one VM boot."""
    name: str
    header: list
    cases: list

    @property
    def ok(self):
        return all(c.status != "fail" for c in self.cases) and bool(self.cases)


RECAP_OUTPUT_LINES = 12


def write_recap(groups, out):
    """Repeat every failure, briefly, right before the summary line: a log read from its end (CI
    keeps only the tail of a long run) then still names what failed, why, and its last output."""
    failures = [(g, c) for g in groups for c in g.cases if c.status == "fail"]
    if not failures:
        return
    out.write(f"# {len(failures)} failed (repeated from above):\n")
    for g, c in failures:
        out.write(f"# - {g.name}: {c.name}" + (f": {c.reason}" if c.reason else "") + "\n")
        for status, name, directive in c.subtests:
            if status == "fail":
                out.write(f"#     not ok {name}" + (f" # {directive}" if directive else "") + "\n")
        for line in c.output[-RECAP_OUTPUT_LINES:]:
            out.write(f"#     | {line}\n")


def report(groups, out):
    """Print the whole run as KTAP, then the summary line. Returns (passed, failed, skipped)."""
    passed = failed = skipped = 0
    out.write("TAP version 13\n")
    out.write(f"1..{len(groups)}\n")
    for gi, g in enumerate(groups, 1):
        for h in g.header:
            out.write(f"# {h}\n")
        out.write("# TAP version 13\n")
        out.write(f"# 1..{len(g.cases)}\n")
        for ci, c in enumerate(g.cases, 1):
            if c.status == "fail" or c.splats:
                for line in c.output:
                    out.write(f"# # {line}\n")
                for s in c.splats[:40]:
                    out.write(f"# # splat: {s}\n")
            word = "not ok" if c.status == "fail" else "ok"
            directive = c.reason
            if c.status == "skip" and not directive.upper().startswith("SKIP"):
                directive = "SKIP " + directive
            out.write(f"# {word} {ci} {c.name}" + (f" # {directive}" if directive else "") + "\n")
            p, f, k = c.leaves()
            passed, failed, skipped = passed + p, failed + f, skipped + k
        out.write(f"{'ok' if g.ok else 'not ok'} {gi} {g.name}\n")
    write_recap(groups, out)
    summary = f"{passed} passed, {failed} failed"
    if skipped:
        summary += f", {skipped} skipped"
    out.write(summary + "\n")
    return passed, failed, skipped
