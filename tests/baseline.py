#!/usr/bin/env python3
"""The test baseline: what a whole `make check` must run, boot by boot.

A test that silently stops running looks exactly like a test that passes: a test dropped from a
collection, a scenario removed from a program, a boot whose collections all moved elsewhere, a host
test that skips because its inputs went missing. So a whole run (`make check`, no --variants,
--tests or --no-*) compares what each group ran with tests/baseline/<group>.txt, one line per
innermost result:

    pass<TAB>name                 must run and pass
    skip<TAB>name<TAB>reason      may be skipped, for that reason only (a skip is "not applicable",
                                  never "clean": the reason says why it does not apply there)

and fails, with one result per group, when a listed test did not run, a listed pass was skipped,
a skip changed its reason, a test ran that the baseline does not know, or a group of the baseline
(a boot) planned nothing. A failure is reported by the test itself and not repeated here.

Every run records what it ran in .build/<run>/leaves.json. `tests/baseline.py update [RUN]`
rewrites the files from a whole run (default .build/latest) that failed nothing but this check;
the diff of tests/baseline/ then shows, in review, what was added, dropped or newly skipped.
"""

import json
import re
import sys
from pathlib import Path

import ktap

DIR = Path(__file__).resolve().parent / "baseline"

# Parts of names that change from run to run without the test changing: durations, and how many
# allocation sites the stress collection's failslab sweep reached (65 or 66 for the persistent
# client in two runs of one commit: an allocation in the work item lands in the sweep or not).
_VOLATILE = [
    (re.compile(r"\btime=\d+(\.\d+)?s\b"), "time=Ns"),
    (re.compile(r"\(\d+(\.\d+)? s\)"), "(N s)"),
    (re.compile(r"\b\d+ allocation sites of peermem-rs failed in turn"), "N allocation sites of peermem-rs failed in turn"),
]


def normalize(text):
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text.replace("\t", " ").strip()


def file_of(group_name):
    """tests/baseline/<file> of a group: "vm: switch" -> vm-switch.txt."""
    return DIR / (re.sub(r"[^A-Za-z0-9.]+", "-", group_name).strip("-") + ".txt")


def leaves(group):
    """{name: (status, reason)} of a group's innermost results, as ktap.report counts them."""
    out = {}

    def add(name, status, reason):
        # A name seen again (the same subtest in two runs of one program) is counted apart.
        name, n = normalize(name), 2
        key = name
        while key in out:
            key, n = f"{name} [{n}]", n + 1
        out[key] = (status, normalize(reason))

    for c in group.cases:
        if c.subtests:
            for status, name, directive in c.subtests:
                add(f"{c.name}: {name}", status, directive)
            if c.status == "fail" and not any(s == "fail" for s, _, _ in c.subtests):
                add(f"{c.name}: exit", "fail", c.reason)
        else:
            add(c.name, c.status, c.reason)
    return out


def _skip_reason(reason):
    return re.sub(r"^SKIP\s*", "", reason, flags=re.I)


def load(path):
    """{name: (status, reason)} from a baseline file."""
    want = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if parts[0] == "pass" and len(parts) == 2:
            want[parts[1]] = ("pass", "")
        elif parts[0] == "skip" and len(parts) == 3:
            want[parts[1]] = ("skip", parts[2])
        else:
            raise SystemExit(f"{path}:{n}: not 'pass<TAB>name' or 'skip<TAB>name<TAB>reason': {line!r}")
    return want


def compare(group, want):
    """The problems of a group against its baseline, as lines (empty: as expected)."""
    got = leaves(group)
    problems = []
    for name, (status, reason) in want.items():
        if name not in got:
            problems.append(f"did not run: {name}")
            continue
        g_status, g_reason = got[name]
        if g_status == "fail":
            continue  # reported by the test itself
        if status == "pass" and g_status == "skip":
            problems.append(f"skipped, the baseline says it runs: {name} ({_skip_reason(g_reason)})")
        elif status == "skip" and g_status == "skip" and _skip_reason(g_reason) != reason:
            problems.append(f"skipped for another reason: {name}: {_skip_reason(g_reason)!r}, "
                            f"the baseline says {reason!r}")
    for name, (g_status, g_reason) in got.items():
        if name not in want and g_status != "fail":
            problems.append(f"not in the baseline ({g_status}): {name}")
    return problems


def check(groups, expected_groups):
    """One Case per baseline file: the group ran exactly what it lists. `expected_groups` are the
    group names a whole run must have (a boot that planned nothing is missing from `groups`)."""
    by_name = {g.name: g for g in groups}
    cases = []
    files = sorted(DIR.glob("*.txt"))
    known = {file_of(n) for n in expected_groups}
    for path in files:
        if path not in known:
            cases.append(ktap.Case(f"baseline: {path.name} belongs to a group of the run", "fail",
                                   reason="no group of a whole run writes this file: remove it"))
    for name in expected_groups:
        path = file_of(name)
        case_name = f"baseline: {name} ran what tests/baseline/{path.name} lists"
        if not path.exists():
            cases.append(ktap.Case(case_name, "fail", reason=f"no {path}: run tests/baseline.py update after a whole run"))
            continue
        group = by_name.get(name)
        if group is None:
            cases.append(ktap.Case(case_name, "fail", reason="the group did not run (a boot that planned nothing?)"))
            continue
        problems = compare(group, load(path))
        cases.append(ktap.Case(case_name, "fail" if problems else "pass",
                               reason=f"{len(problems)} differences" if problems else "",
                               output=problems[:80]))
    return ktap.Group("baseline: what ran, against tests/baseline/", ["baseline (tests/baseline.py)"], cases)


def save(groups, path, whole):
    """Record what a run ran ({group: {name: [status, reason]}}) for `update`."""
    path.write_text(json.dumps({"whole": whole, "groups": {g.name: leaves(g) for g in groups}}, indent=1))


def write(run_dir):
    """Rewrite tests/baseline/ from a run's leaves.json."""
    data = json.loads((Path(run_dir) / "leaves.json").read_text())
    if not data["whole"]:
        raise SystemExit(f"{run_dir} was a partial run (--variants, --tests or --no-*): no baseline from it")
    failed = [f"{g}: {n}" for g, ls in data["groups"].items() for n, (st, _) in ls.items() if st == "fail"]
    if failed:
        raise SystemExit("no baseline from a run with failures:\n  " + "\n  ".join(failed[:20]))
    DIR.mkdir(exist_ok=True)
    for old in DIR.glob("*.txt"):
        old.unlink()
    for name, ls in data["groups"].items():
        lines = [f"# {name}: what a whole make check runs here (tests/baseline.py). Regenerate with",
                 "# tests/baseline.py update, after a whole run that failed nothing else."]
        # Normalized again: the run may predate a pattern added to _VOLATILE.
        for leaf, (status, reason) in sorted((normalize(n), v) for n, v in ls.items()):
            lines.append(f"pass\t{leaf}" if status == "pass" else f"skip\t{leaf}\t{_skip_reason(reason)}")
        file_of(name).write_text("\n".join(lines) + "\n")
        print(f"{file_of(name)}: {len(ls)} results", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "update" or len(sys.argv) > 3:
        raise SystemExit("usage: tests/baseline.py update [RUN_DIR, default .build/latest]")
    write(sys.argv[2] if len(sys.argv) == 3 else Path(__file__).resolve().parents[1] / ".build" / "latest")
