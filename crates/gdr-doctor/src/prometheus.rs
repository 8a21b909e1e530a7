// SPDX-License-Identifier: GPL-2.0
//! `--prometheus`: the report in Prometheus' text exposition format (version 0.0.4), for
//! node_exporter's textfile collector.
//!
//! The metric names and their labels are an interface: monitoring rules are written against them.
//! They are listed, with their meaning, in the crate's README ("Monitoring"); a renamed or removed
//! metric is a breaking change. The format's rules this output keeps are summarised in
//! `docs/prometheus-text-format.md` (one HELP and one TYPE line before each family's samples, a
//! family's samples together, no two samples with the same labels, label values escaped).

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::doctor::{self, Report};
use crate::finding::{Finding, Severity};
use crate::render;

/// One metric family: its samples, in the order they are added, each a label set and a value.
struct Family {
    name: String,
    kind: &'static str,
    help: String,
    samples: Vec<(Vec<(&'static str, String)>, u64)>,
}

/// The families of one report, in the order they are first named.
#[derive(Default)]
struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &'static str, help: &str) -> &mut Family {
        if let Some(i) = self.families.iter().position(|f| f.name == name) {
            return &mut self.families[i];
        }
        self.families.push(Family {
            name: name.to_string(),
            kind,
            help: help.to_string(),
            samples: Vec::new(),
        });
        self.families.last_mut().expect("just pushed")
    }

    /// Adds `value` to the sample with these labels (a new sample if there is none yet), so that two
    /// findings with the same code and subject are one series with the count.
    fn add(
        &mut self,
        name: &str,
        kind: &'static str,
        help: &str,
        labels: Vec<(&'static str, String)>,
        value: u64,
    ) {
        let fam = self.family(name, kind, help);
        match fam.samples.iter_mut().find(|(l, _)| *l == labels) {
            Some((_, v)) => *v += value,
            None => fam.samples.push((labels, value)),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(&f.help));
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (labels, value) in &f.samples {
                out.push_str(&f.name);
                if !labels.is_empty() {
                    let body: Vec<String> = labels
                        .iter()
                        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
                        .collect();
                    let _ = write!(out, "{{{}}}", body.join(","));
                }
                let _ = writeln!(out, " {value}");
            }
        }
        out
    }
}

/// HELP text: a backslash and a line feed are the two characters the format escapes there.
fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Label values: backslash, double quote and line feed are escaped.
fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A statistics key made into a metric name: letters, digits and `_` only, not starting with a digit.
fn metric_word(key: &str) -> String {
    let mut w: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    if w.starts_with(|c: char| c.is_ascii_digit()) {
        w.insert(0, '_');
    }
    w
}

/// peermem-rs's statistics (`src/logic/stats.rs`), each as a metric: the three levels as gauges, the
/// event counts as counters, the refusals as one counter with the cause as a label. A key a newer
/// peermem-rs adds is kept, untyped, as `peermem_rs_stat_<key>`.
const STATS: [(&str, &str, &str, &str); 15] = [
    ("live_registrations", "peermem_rs_live_registrations", "gauge", "Memory registrations alive now (each holds a module reference): from acquire to release, or, for a pin left to the driver (every invalidating registration), until the driver calls it back."),
    ("pinned_bytes", "peermem_rs_pinned_bytes", "gauge", "Bytes of GPU memory pinned for the NIC now."),
    ("acquired", "peermem_rs_acquired_total", "counter", "acquire calls that claimed a range as GPU memory."),
    ("registrations", "peermem_rs_registrations_total", "counter", "Memory registrations that completed their DMA mapping."),
    ("invalidations", "peermem_rs_invalidations_total", "counter", "Registrations invalidated through the host because their GPU memory was freed."),
    ("invalidations_skipped", "peermem_rs_invalidations_skipped_total", "counter", "Frees that found a deregistration in flight and left the host alone."),
    ("releases", "peermem_rs_releases_total", "counter", "Memory registrations released."),
    ("late_callbacks", "peermem_rs_late_callbacks_total", "counter", "Free callbacks after the host had already released the registration."),
    ("foreign_unpins", "peermem_rs_foreign_unpins_total", "counter", "Pins another process could not unpin; each stays until its owner frees the memory or exits."),
    ("unproven_unpins", "peermem_rs_unproven_unpins_total", "counter", "Unpins the registering process answered but could not prove; always 0 since peermem-rs leaves every pin N to the driver (see lingering)."),
    ("unpin_failures", "peermem_rs_unpin_failures_total", "counter", "Unpins the NVIDIA driver refused."),
    ("deferred_unpins", "peermem_rs_deferred_unpins_total", "counter", "Persistent pins unpinned later by peermem-rs's work item."),
    ("kept_registrations", "peermem_rs_kept_registrations_total", "counter", "Registrations kept until reboot because the driver never showed its teardown had returned."),
    ("lingering", "peermem_rs_lingering", "gauge", "Deregistered invalidating registrations whose pin N the driver still holds until the memory is freed (each keeps peermem-rs loaded; a later registration of the same process may adopt it)."),
    ("adoptions", "peermem_rs_adoptions_total", "counter", "Registrations that took a lingering one over instead of pinning a new N."),
];

fn module_stats(x: &mut Exposition, m: &crate::probe::Module) {
    let module = || vec![("module", m.name.clone())];
    let params: BTreeMap<&str, &str> = m
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    x.add(
        "peermem_rs_info",
        "gauge",
        "peermem-rs is loaded (value 1): its module name (peermem_rs, or nvidia_peermem for the drop-in), version and flavour.",
        vec![
            ("module", m.name.clone()),
            ("version", m.version.clone().unwrap_or_default()),
            (
                "persistent_api_support",
                params
                    .get("persistent_api_support")
                    .unwrap_or(&"")
                    .to_string(),
            ),
        ],
        1,
    );
    for (key, value) in &m.stats {
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        if let Some(cause) = key.strip_prefix("error_") {
            x.add(
                "peermem_rs_refusals_total",
                "counter",
                "Registrations peermem-rs refused, by cause (each is also explained in the kernel log).",
                vec![("module", m.name.clone()), ("cause", cause.to_string())],
                value,
            );
        } else if let Some((_, name, kind, help)) = STATS.iter().find(|s| s.0 == key) {
            x.add(name, kind, help, module(), value);
        } else {
            // Under a prefix of their own, so that no key can take a documented family's name.
            let name = format!("peermem_rs_stat_{}", metric_word(key));
            x.add(
                &name,
                "untyped",
                &format!("peermem-rs's statistic {key} (unknown to this gdr-doctor)."),
                module(),
                value,
            );
        }
    }
}

/// The findings that decide the verdict: the node's, every GPU's and NIC's, and those of the pairs
/// judged (each GPU's best pair; every pair with `--all` or `--strict`), as the human report shows.
fn judged_findings(r: &Report, all: bool) -> Vec<&Finding> {
    let pairs: Vec<&doctor::Pair> = if all || r.strict {
        r.pairs.iter().collect()
    } else {
        r.best_pairs()
    };
    r.node
        .iter()
        .chain(r.gpus.iter().flat_map(|g| &g.findings))
        .chain(r.nics.iter().flat_map(|n| &n.findings))
        .chain(pairs.into_iter().flat_map(|p| &p.findings))
        .collect()
}

/// The report as Prometheus text; `all` as `--all`: the findings of every pair, not only those of
/// each GPU's best one.
pub fn text(r: &Report, all: bool) -> String {
    let findings = judged_findings(r, all);
    let mut x = Exposition::default();
    x.add(
        "gdr_doctor_info",
        "gauge",
        "gdr-doctor ran (value 1), with its version.",
        vec![("version", render::version().to_string())],
        1,
    );
    x.add(
        "gdr_doctor_node_verdict",
        "gauge",
        "The node's verdict, as gdr-doctor's exit status: 0 GPUDirect RDMA will work, 1 it may work slowly, 2 it will not work for some GPU, 3 no GPU or no RDMA NIC.",
        Vec::new(),
        r.exit_status() as u64,
    );
    for p in r.best_pairs() {
        let g = &r.gpus[p.gpu];
        x.add(
            "gdr_doctor_gpu_verdict",
            "gauge",
            "Each GPU's verdict with its best NIC (named): 0 will work, 1 may work slowly, 2 will not work.",
            vec![
                ("gpu", g.name.clone()),
                ("pci", g.dev.bdf.clone()),
                ("model", g.model.name.clone()),
                ("nic", r.nics[p.nic].name.clone()),
                ("link", p.path.link.code().to_string()),
            ],
            p.verdict.exit_status() as u64,
        );
    }
    // Every finding judged, the passed checks too, counted by code, subject and severity.
    for f in &findings {
        x.add(
            "gdr_doctor_findings",
            "gauge",
            "Findings of this run by code, subject and severity (ok, note, slow, fail): the node, GPUs, NICs and each GPU best pair (every pair with --all or --strict); the message and its fix are in the human report.",
            vec![
                ("code", f.code.to_string()),
                ("subject", f.subject.clone()),
                ("severity", f.severity.key().to_string()),
            ],
            1,
        );
    }
    for s in [Severity::Fail, Severity::Slow, Severity::Note] {
        let n = findings.iter().filter(|f| f.severity == s).count();
        x.add(
            "gdr_doctor_problems",
            "gauge",
            "Findings of this run that are problems, by severity (fail, slow, note), of the pairs judged as in gdr_doctor_findings.",
            vec![("severity", s.key().to_string())],
            n as u64,
        );
    }
    if let Some((d, decisions)) = &r.libraries {
        for (name, (state, _)) in d.requirements() {
            x.add(
                "gdr_doctor_dmabuf_requirement",
                "gauge",
                "What DMA-BUF registration of GPU memory needs (gpu: the open kernel modules; kernel: ib_umem_dmabuf_get; verbs: ibv_reg_dmabuf_mr in libibverbs), by state (yes, no, unknown); value 1.",
                vec![("requirement", name.to_string()), ("state", state.key().to_string())],
                1,
            );
        }
        for dec in decisions {
            let i = &dec.installed;
            x.add(
                "gdr_doctor_library_path",
                "gauge",
                "The path GPUDirect RDMA takes for each installed library (dmabuf, peer-memory, none, no-gpu-support); value 1. needs_peer_memory=\"true\" where a peer-memory client such as peermem-rs is what it uses.",
                vec![
                    ("library", i.lib.key().to_string()),
                    ("version", i.version.map_or(String::new(), |(a, b, c)| format!("{a}.{b}.{c}"))),
                    ("file", i.file.clone()),
                    ("path", dec.path.key().to_string()),
                    ("needs_peer_memory", dec.needs_peer_memory.to_string()),
                ],
                1,
            );
        }
    }
    if let (Some(pm), Some(drv)) = (&r.peer_mem, &r.driver) {
        if let Some(m) = doctor::loaded_peermem_rs(pm, drv) {
            module_stats(&mut x, m);
        }
    }
    x.text()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_the_format_escapes() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
        assert_eq!(metric_word("Foo-bar.2"), "foo_bar_2");
        assert_eq!(metric_word("9lives"), "_9lives");
    }

    #[test]
    fn one_sample_per_label_set() {
        let mut x = Exposition::default();
        x.add("m", "gauge", "h", vec![("a", "1".into())], 1);
        x.add("m", "gauge", "h", vec![("a", "1".into())], 1);
        x.add("m", "gauge", "h", vec![("a", "2".into())], 1);
        assert_eq!(
            x.text(),
            "# HELP m h\n# TYPE m gauge\nm{a=\"1\"} 2\nm{a=\"2\"} 1\n"
        );
    }
}
