// SPDX-License-Identifier: GPL-2.0
//! `--prometheus` on the recorded trees: the text is read by two parsers written apart from the
//! writer (the `prometheus-parse` crate, and `tests/selftests/gdr_doctor/prom_check.c`, the strict
//! checker the VM test uses too), which must find the same samples; and what they find must say what
//! `--json` says: the verdicts, the findings, peermem-rs's statistics.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use common::{Fixture, ALL_FIXTURES};

/// A sample as `name{a="x",b="y"}` (labels sorted, values escaped as the format escapes them) and
/// its value.
type Samples = BTreeMap<String, f64>;

/// `labels` as `prometheus-parse` 0.2.5 gives them: values as written, still escaped (it does not
/// unescape), which is the form prom_check prints.
fn key(name: &str, labels: &BTreeMap<String, String>) -> String {
    if labels.is_empty() {
        return name.to_string();
    }
    let body: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    format!("{name}{{{}}}", body.join(","))
}

/// prom_check, built once per test run with the host's C compiler. A missing compiler fails the
/// test: `make check` builds kernel modules, so it has one.
fn prom_check() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/selftests/gdr_doctor/prom_check.c");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("prom_check-{}", std::process::id()));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let st = Command::new(&cc)
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| panic!("{cc} (to build {}): {e}", src.display()));
        assert!(st.success(), "{cc} failed on {}", src.display());
        out
    })
}

/// prom_check's reading: Err(its complaint) when the text breaks a rule.
fn checked(text: &str) -> Result<Samples, String> {
    let mut child = Command::new(prom_check())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run prom_check");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').expect("prom_check's line");
            (k.to_string(), v.parse::<f64>().expect("prom_check's value"))
        })
        .collect())
}

/// The `prometheus-parse` crate's reading, with each family's type.
fn parsed(text: &str) -> (Samples, BTreeMap<String, String>) {
    let scrape =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parse");
    let mut samples = Samples::new();
    for s in &scrape.samples {
        let labels: BTreeMap<String, String> = s
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let value = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{}: a histogram or summary", s.metric),
        };
        let k = key(&s.metric, &labels);
        assert!(samples.insert(k.clone(), value).is_none(), "{k} twice");
    }
    let types = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
    (samples, types)
}

struct Exposition {
    samples: Samples,
    types: BTreeMap<String, String>,
    status: i32,
    json: serde_json::Value,
}

fn expose(fx: &Fixture, args: &[&str]) -> Exposition {
    let mut a = vec!["--prometheus"];
    a.extend_from_slice(args);
    let run = fx.run(&a);
    let (samples, types) = parsed(&run.stdout);
    let strict = checked(&run.stdout).unwrap_or_else(|e| panic!("prom_check: {e}{}", run.stdout));
    assert_eq!(
        strict, samples,
        "the two parsers read different samples from:\n{}",
        run.stdout
    );
    let (status, json) = fx.json(args);
    assert_eq!(run.status, status, "--prometheus exits as --json does");
    Exposition {
        samples,
        types,
        status,
        json,
    }
}

fn verdict_value(v: &str) -> f64 {
    match v {
        "works" => 0.0,
        "slow" => 1.0,
        "fails" => 2.0,
        other => panic!("verdict {other}"),
    }
}

#[test]
fn every_fixture_parses_and_says_what_json_says() {
    for name in ALL_FIXTURES {
        let fx = Fixture::new(name);
        let x = expose(&fx, &[]);
        let s = &x.samples;
        assert_eq!(s["gdr_doctor_node_verdict"], x.status as f64, "{name}");
        // One verdict per GPU, that of its best NIC, as --json gives it.
        let best = x.json["best_per_gpu"].as_array().unwrap();
        let verdicts: Vec<(&String, &f64)> = s
            .iter()
            .filter(|(k, _)| k.starts_with("gdr_doctor_gpu_verdict{"))
            .collect();
        assert_eq!(verdicts.len(), best.len(), "{name}");
        for b in best {
            let (gpu, nic) = (b["gpu"].as_str().unwrap(), b["nic"].as_str().unwrap());
            let (_, v) = verdicts
                .iter()
                .find(|(k, _)| {
                    k.contains(&format!("gpu=\"{gpu}\"")) && k.contains(&format!("nic=\"{nic}\""))
                })
                .unwrap_or_else(|| panic!("{name}: no verdict for {gpu} with {nic}"));
            assert_eq!(
                **v,
                verdict_value(b["verdict"].as_str().unwrap()),
                "{name} {gpu}"
            );
        }
        // The findings: the node's, the devices', those of each GPU's best pair.
        let mut want: BTreeSet<(String, String, String)> = BTreeSet::new();
        let mut add = |fs: &serde_json::Value| {
            for f in fs.as_array().unwrap() {
                want.insert((
                    f["code"].as_str().unwrap().into(),
                    f["subject"].as_str().unwrap().into(),
                    f["severity"].as_str().unwrap().into(),
                ));
            }
        };
        add(&x.json["node_findings"]);
        for d in x.json["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .chain(x.json["nics"].as_array().unwrap())
        {
            add(&d["findings"]);
        }
        for b in best {
            let p = common::pair(
                &x.json,
                b["gpu"].as_str().unwrap(),
                b["nic"].as_str().unwrap(),
            );
            add(&p["findings"]);
        }
        let got: BTreeSet<(String, String, String)> = s
            .keys()
            .filter_map(|k| k.strip_prefix("gdr_doctor_findings{"))
            .map(|k| {
                let label = |l: &str| {
                    let at = k.find(&format!("{l}=\"")).unwrap() + l.len() + 2;
                    k[at..].split('"').next().unwrap().to_string()
                };
                (label("code"), label("subject"), label("severity"))
            })
            .collect();
        assert_eq!(got, want, "{name}: the findings");
        for sev in ["fail", "slow", "note"] {
            let n = want.iter().filter(|(_, _, s)| s == sev).count();
            assert!(
                s[&format!("gdr_doctor_problems{{severity=\"{sev}\"}}")] >= n as f64,
                "{name}: {sev}"
            );
        }
        // Each library's path, as --json gives it.
        let paths = x.json["libraries"]["paths"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let series: Vec<&String> = s
            .keys()
            .filter(|k| k.starts_with("gdr_doctor_library_path{"))
            .collect();
        assert_eq!(series.len(), paths.len(), "{name}: {series:?}");
        for p in &paths {
            let (lib, path) = (p["library"].as_str().unwrap(), p["path"].as_str().unwrap());
            assert!(
                series
                    .iter()
                    .any(|k| k.contains(&format!("library=\"{lib}\""))
                        && k.contains(&format!("path=\"{path}\""))),
                "{name}: no series for {lib} {path} in {series:?}"
            );
        }
        for (family, kind) in &x.types {
            if family.ends_with("_total") {
                assert_eq!(kind, "counter", "{name}: {family}");
            }
        }
    }
}

#[test]
fn peermem_rs_statistics_are_the_modules_own() {
    let fx = Fixture::new("dgx-h100");
    let stats = fx.read("/sys/kernel/debug/peermem_rs/stats");
    let x = expose(&fx, &[]);
    let s = &x.samples;
    let stat = |k: &str| -> f64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in the fixture's stats"))
            .parse()
            .unwrap()
    };
    let m = "{module=\"peermem_rs\"}";
    assert_eq!(
        s[&format!("peermem_rs_live_registrations{m}")],
        stat("live_registrations")
    );
    assert_eq!(
        s[&format!("peermem_rs_pinned_bytes{m}")],
        stat("pinned_bytes")
    );
    assert_eq!(
        s[&format!("peermem_rs_releases_total{m}")],
        stat("releases")
    );
    assert_eq!(
        s["peermem_rs_refusals_total{cause=\"bar1_exhausted\",module=\"peermem_rs\"}"],
        stat("error_bar1_exhausted")
    );
    assert_eq!(x.types["peermem_rs_live_registrations"], "gauge");
    assert_eq!(x.types["peermem_rs_refusals_total"], "counter");
    assert!(s.keys().any(|k| k.starts_with("peermem_rs_info{")
        && k.contains("module=\"peermem_rs\"")
        && k.contains("persistent_api_support=\"1\"")));

    // A refusal counted by the module shows as that cause's counter; an unknown statistic is kept.
    fx.write(
        "/sys/kernel/debug/peermem_rs/stats",
        stats.replace("error_bar1_exhausted 0", "error_bar1_exhausted 7") + "new_counter 3\n",
    );
    let x = expose(&fx, &[]);
    assert_eq!(
        x.samples["peermem_rs_refusals_total{cause=\"bar1_exhausted\",module=\"peermem_rs\"}"],
        7.0
    );
    assert_eq!(x.samples[&format!("peermem_rs_stat_new_counter{m}")], 3.0);
    assert_eq!(x.types["peermem_rs_stat_new_counter"], "untyped");
}

#[test]
fn label_values_are_escaped() {
    // A declared GPU model is free text: quotes, a backslash and a line feed must stay in the label.
    let fx = Fixture::new("vm-switch");
    let gpu = fx.json(&[]).1; // nothing declared: no GPU
    assert!(gpu["gpus"].as_array().unwrap().is_empty());
    let x = expose(
        &fx,
        &[
            "--declare-gpu",
            "0000:01:00.0=Odd \"GPU\" \\ name",
            "--declare-nic",
            "0000:02:00.0=edu",
            "--hardware-only",
        ],
    );
    assert!(
        x.samples
            .keys()
            .any(|k| k.contains(r#"model="Odd \"GPU\" \\ name""#)),
        "{:?}",
        x.samples.keys().collect::<Vec<_>>()
    );
}

#[test]
fn the_checker_refuses_what_the_format_forbids() {
    let good = "# HELP a x\n# TYPE a gauge\na{b=\"1\"} 1\n";
    assert!(checked(good).is_ok());
    for (bad, why) in [
        ("a 1\n", "no HELP/TYPE"),
        ("# HELP a x\n# TYPE a counter\na -1\n", "negative counter"),
        (
            "# HELP a x\n# TYPE a gauge\na 1\na 2\n",
            "same labels twice",
        ),
        (
            "# HELP a x\n# TYPE a gauge\n# HELP b y\n# TYPE b gauge\na 1\nb 1\na{c=\"d\"} 1\n",
            "family apart",
        ),
        ("# HELP a x\n# TYPE a gauge\na{b=\"\\t\"} 1\n", "bad escape"),
        (
            "# HELP a x\n# TYPE a gauge\na{__b=\"1\"} 1\n",
            "reserved label",
        ),
        ("# HELP a x\n# TYPE a gauge\na one\n", "not a number"),
        ("# HELP a x\n# TYPE a gauge\na 1", "no final line feed"),
        (
            "# HELP a x\n# TYPE a gauge\na 1\n# TYPE a gauge\n",
            "TYPE after samples",
        ),
        ("# HELP a x\n# TYPE a gauges\na 1\n", "unknown type"),
        ("# HELP 1a x\n# TYPE 1a gauge\n1a 1\n", "bad name"),
    ] {
        assert!(checked(bad).is_err(), "prom_check accepted {why}: {bad:?}");
    }
}
