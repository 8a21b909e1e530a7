// SPDX-License-Identifier: GPL-2.0
//! The report for people (short, one line per finding, each problem followed by its fix) and for
//! tools (--json).

use std::fmt::Write;

use crate::apps;
use crate::doctor::{self, Pair, Report, Verdict};
use crate::finding::{Finding, Severity};
use crate::json::Json;
use crate::models::{Arch, Support};
use crate::pci::{Acs, PciDev};
use crate::probe::{Domain, Symbol};
use crate::sysfs::human_size;

const VERSION: &str = match option_env!("CARGO_PKG_VERSION") {
    Some(v) => v,
    None => "unknown",
};

pub fn version() -> &'static str {
    VERSION
}

fn numa(d: &PciDev) -> String {
    d.numa_node.map_or("NUMA ?".into(), |n| format!("NUMA {n}"))
}

fn link(d: &PciDev) -> String {
    match (&d.link.speed, d.link.width) {
        (Some(s), Some(w)) => format!("  {s} x{w}"),
        _ => String::new(),
    }
}

fn push_finding(out: &mut String, indent: &str, f: &Finding) {
    let _ = writeln!(
        out,
        "{indent}[{}]{} {}",
        f.severity.label(),
        pad_label(f.severity),
        f.message
    );
    if let Some(fix) = &f.fix {
        let _ = writeln!(out, "{indent}       fix: {fix}");
    }
}

fn pad_label(s: Severity) -> &'static str {
    match s {
        Severity::Ok => "  ",
        Severity::Note | Severity::Slow | Severity::Fail => "",
    }
}

pub fn human(r: &Report, all: bool) -> String {
    let mut out = String::new();
    let _ =
        writeln!(
        out,
        "gdr-doctor {VERSION}: can GPUDirect RDMA work on this node? (sysfs and procfs below {}{})",
        r.root,
        if r.hardware_only { "; hardware checks only" } else { "" }
    );
    // The answer first; the evidence and each fix follow, and the verdict is repeated at the end.
    let _ = writeln!(out, "\n{}", verdict_line(r, "below"));
    support_lines(&mut out, r);

    let nw = r
        .gpus
        .iter()
        .map(|g| g.name.len())
        .chain(r.nics.iter().map(|n| n.name.len()))
        .max()
        .unwrap_or(0);
    let _ = writeln!(out, "\nGPUs");
    if r.gpus.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for g in &r.gpus {
        let bar = g.bar.map_or("BAR1 ?".into(), |b| {
            format!("BAR1 {} (BAR{})", human_size(b.size), b.index)
        });
        let what = match (g.model.arch, g.declared) {
            (Arch::StandIn, _) => format!("{} GPU ({}, declared)", g.model.name, g.dev.id()),
            (arch, declared) => format!(
                "{} ({}, {}{})",
                g.model.name,
                arch.name(),
                g.dev.id(),
                if declared { ", declared" } else { "" }
            ),
        };
        let _ = writeln!(
            out,
            "  {:<nw$}  {}  {what}  {bar}  {}  driver {}{}",
            g.name,
            g.dev.bdf,
            numa(&g.dev),
            g.dev.driver.as_deref().unwrap_or("none"),
            link(&g.dev)
        );
        for f in g.findings.iter().filter(|f| f.severity > Severity::Ok) {
            push_finding(&mut out, "         ", f);
        }
    }

    let _ = writeln!(out, "\nRDMA NICs");
    if r.nics.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for n in &r.nics {
        let ports = n
            .ports
            .iter()
            .map(|p| {
                let state = p.state.as_deref().unwrap_or("?");
                // "4: ACTIVE" -> "ACTIVE"
                let state = state.split_once(": ").map_or(state, |(_, s)| s);
                let mut s = format!("port {} {state}", p.port);
                if let Some(l) = &p.link_layer {
                    s += &format!(" {l}");
                }
                if let Some(rate) = &p.rate {
                    s += &format!(" {rate}");
                }
                s
            })
            .collect::<Vec<_>>()
            .join(", ");
        let iommu = match &n.domain {
            Domain::NoIommu | Domain::Identity => String::new(),
            Domain::Translated(t) => format!("  IOMMU {t}"),
            Domain::Unmanaged => "  IOMMU unmanaged (VFIO)".into(),
            Domain::Blocked => "  IOMMU blocked".into(),
        };
        let _ = writeln!(
            out,
            "  {:<nw$}  {}  {} ({}{})  {}  driver {}{}{iommu}{}",
            n.name,
            n.dev.bdf,
            n.product,
            n.dev.id(),
            if n.declared && n.product != "declared NIC" {
                ", declared"
            } else {
                ""
            },
            numa(&n.dev),
            n.dev.driver.as_deref().unwrap_or("none"),
            link(&n.dev),
            if ports.is_empty() {
                String::new()
            } else {
                format!("  {ports}")
            }
        );
        for f in n.findings.iter().filter(|f| f.severity > Severity::Ok) {
            push_finding(&mut out, "         ", f);
        }
    }

    let _ = writeln!(out, "\nNode");
    for f in &r.node {
        push_finding(&mut out, "  ", f);
    }

    if !r.pairs.is_empty() {
        let _ = writeln!(
            out,
            "\nGPU-NIC paths (as nvidia-smi topo -m names them) and verdicts"
        );
        let width = r
            .nics
            .iter()
            .map(|n| n.name.len())
            .max()
            .unwrap_or(0)
            .max(9)
            + 1;
        let gw = r.gpus.iter().map(|g| g.name.len()).max().unwrap_or(0) + 2;
        let mut head = format!("  {:gw$}", "");
        for n in &r.nics {
            let _ = write!(head, "{:width$}", n.name);
        }
        let _ = writeln!(out, "{}", head.trim_end());
        for (gi, g) in r.gpus.iter().enumerate() {
            let mut row = format!("  {:gw$}", g.name);
            for p in r.pairs.iter().filter(|p| p.gpu == gi) {
                let _ = write!(
                    row,
                    "{:width$}",
                    format!("{} {}", p.path.link.code(), p.verdict.short())
                );
            }
            let _ = writeln!(out, "{}", row.trim_end());
        }

        let _ = writeln!(out, "\nEach GPU with its best NIC");
        for p in r.best_pairs() {
            pair_block(&mut out, r, p);
        }
        if all {
            let _ = writeln!(out, "\nEvery pair");
            for p in &r.pairs {
                pair_block(&mut out, r, p);
            }
        } else if r.pairs.len() > r.gpus.len() {
            let _ = writeln!(out, "  (--all lists the findings of every pair)");
        }
    }

    let _ = writeln!(out, "\n{}", verdict_line(r, "above"));
    out
}

/// Whether each GPU model can do GPUDirect RDMA at all, one line per model: its GPUs, the answer.
fn support_lines(out: &mut String, r: &Report) {
    let mut models: Vec<(&str, Vec<&str>, String)> = Vec::new();
    for g in &r.gpus {
        let what = format!("{} ({})", g.model.name, g.model.arch.name());
        match models.iter_mut().find(|(m, ..)| *m == g.model.name) {
            Some((_, names, _)) => names.push(&g.name),
            None => models.push((&g.model.name, vec![&g.name], what)),
        }
    }
    for (_, names, what) in models {
        let g = r
            .gpus
            .iter()
            .find(|g| g.name == names[0])
            .expect("named above");
        let who = match names.len() {
            1 => names[0].to_string(),
            2..=4 => names.join(", "),
            n => format!("{} ... {} ({n} GPUs)", names[0], names[n - 1]),
        };
        let _ = writeln!(out, "  {who}: {what}: {}", g.model.support().1);
    }
}

/// `--gpu-support`: the seed question alone, for each GPU whatever the node around it.
pub fn gpu_support(r: &Report) -> String {
    let mut out = format!("gdr-doctor {VERSION}: can these GPUs do GPUDirect RDMA at all?\n");
    if r.gpus.is_empty() {
        out.push_str("  no NVIDIA GPU found\n");
        return out;
    }
    support_lines(&mut out, r);
    out.push_str("Whether it works on this node (driver, peer-memory client, PCIe path): run gdr-doctor without --gpu-support.\n");
    out
}

/// `--gpu-support`'s exit status: 0 every GPU can, 1 some GPU's model is unknown, 2 some GPU
/// cannot, 3 no GPU.
pub fn gpu_support_status(r: &Report) -> i32 {
    match r.gpus.iter().map(|g| g.model.support().0).max() {
        None => doctor::EXIT_NOTHING_TO_CHECK,
        Some(Support::Yes) => 0,
        Some(Support::Unknown) => 1,
        Some(Support::No) => 2,
    }
}

fn pair_block(out: &mut String, r: &Report, p: &Pair) {
    let (g, n) = (&r.gpus[p.gpu], &r.nics[p.nic]);
    let _ = writeln!(
        out,
        "  {} {} -> {} {} ({}): {}",
        g.name,
        g.dev.bdf,
        n.name,
        n.dev.bdf,
        p.path.link.code(),
        p.verdict.text()
    );
    for f in p.findings.iter().filter(|f| f.severity > Severity::Ok) {
        push_finding(out, "    ", f);
    }
    // Reasons printed further up (node, GPU, NIC): name them, so the verdict is explained here too.
    let elsewhere: Vec<String> = r
        .reasons(p)
        .into_iter()
        .filter(|f| {
            f.severity > Severity::Note && !p.findings.iter().any(|own| std::ptr::eq(own, *f))
        })
        .map(|f| format!("{} ({})", f.code, f.subject))
        .collect();
    if !elsewhere.is_empty() {
        let also = if p.findings.iter().any(|f| f.severity > Severity::Note) {
            "also "
        } else {
            ""
        };
        let _ = writeln!(out, "    {also}because of: {}", elsewhere.join(", "));
    }
}

/// The verdict; `where_` says where the [slow] and [FAIL] lines are ("above" or "below").
fn verdict_line(r: &Report, where_: &str) -> String {
    let exit = r.exit_status();
    let Some(v) = r.verdict() else {
        return format!("Verdict: nothing to check: no GPU or no RDMA NIC (exit {exit})");
    };
    let affected: Vec<String> = if r.strict {
        r.pairs
            .iter()
            .filter(|p| p.verdict == v)
            .map(|p| format!("{}+{}", r.gpus[p.gpu].name, r.nics[p.nic].name))
            .collect()
    } else {
        r.best_pairs()
            .iter()
            .filter(|p| p.verdict == v)
            .map(|p| r.gpus[p.gpu].name.clone())
            .collect()
    };
    let who = if affected.len() > 6 {
        format!(
            "{} and {} more",
            affected[..6].join(", "),
            affected.len() - 6
        )
    } else {
        affected.join(", ")
    };
    match v {
        Verdict::Works if r.strict => format!("Verdict: GPUDirect RDMA will work between every GPU and every NIC (exit {exit})"),
        Verdict::Works => format!("Verdict: GPUDirect RDMA will work: every GPU has a NIC it works with (exit {exit})"),
        Verdict::Slow => format!("Verdict: GPUDirect RDMA may work slowly for {who}: fix the [slow] lines {where_} (exit {exit})"),
        Verdict::Fails => format!("Verdict: GPUDirect RDMA will not work for {who}: fix the [FAIL] lines {where_} (exit {exit})"),
    }
}

// --- JSON -------------------------------------------------------------------------------------

fn finding_json(f: &Finding) -> Json {
    Json::obj()
        .with("severity", f.severity.key())
        .with("code", f.code)
        .with("subject", &f.subject)
        .with("message", &f.message)
        .with("fix", f.fix.clone())
}

fn findings_json<'a>(fs: impl IntoIterator<Item = &'a Finding>) -> Json {
    Json::Arr(fs.into_iter().map(finding_json).collect())
}

fn dev_json(d: &PciDev) -> Json {
    Json::obj()
        .with("bdf", &d.bdf)
        .with("pci_id", d.id())
        .with("class", format!("0x{:06x}", d.class))
        .with("sysfs_path", &d.path)
        .with("numa_node", d.numa_node)
        .with("driver", d.driver.clone())
        .with("iommu_group", d.iommu_group.clone())
        .with("link_speed", d.link.speed.clone())
        .with("link_width", d.link.width)
        .with("max_link_speed", d.link.max_speed.clone())
        .with("max_link_width", d.link.max_width)
}

pub fn json(r: &Report) -> String {
    let gpus: Vec<Json> = r
        .gpus
        .iter()
        .map(|g| {
            Json::obj()
                .with("name", &g.name)
                .with("pci", dev_json(&g.dev))
                .with("model", &g.model.name)
                .with("architecture", g.model.arch.name())
                .with("known_model", g.model.known)
                .with("declared", g.declared)
                .with("gpudirect_rdma_capable", g.model.gdr)
                .with("gpudirect_rdma_support", g.model.support().0.key())
                .with("gpudirect_rdma_support_text", g.model.support().1)
                .with(
                    "bar1",
                    g.bar.map_or(Json::Null, |b| {
                        Json::obj()
                            .with("bar", b.index)
                            .with("size_bytes", b.size)
                            .with("size", human_size(b.size))
                    }),
                )
                .with("findings", findings_json(&g.findings))
        })
        .collect();
    let nics: Vec<Json> = r
        .nics
        .iter()
        .map(|n| {
            let ports: Vec<Json> = n
                .ports
                .iter()
                .map(|p| {
                    Json::obj()
                        .with("port", &p.port)
                        .with("state", p.state.clone())
                        .with("link_layer", p.link_layer.clone())
                        .with("rate", p.rate.clone())
                })
                .collect();
            let domain = match &n.domain {
                Domain::NoIommu => "none".to_string(),
                Domain::Identity => "identity".into(),
                Domain::Translated(t) => t.clone(),
                Domain::Unmanaged => "unmanaged".into(),
                Domain::Blocked => "blocked".into(),
            };
            Json::obj()
                .with("name", &n.name)
                .with("pci", dev_json(&n.dev))
                .with("product", &n.product)
                .with("declared", n.declared)
                .with("iommu_domain", domain)
                .with("ports", Json::Arr(ports))
                .with("findings", findings_json(&n.findings))
        })
        .collect();
    let driver = r.driver.as_ref().map_or(Json::Null, |d| {
        Json::obj()
            .with("module", &d.module)
            .with("loaded", d.loaded)
            .with("version", d.version.clone())
            .with("flavour", d.flavour.name())
            .with("evidence", d.evidence.clone())
            .with(
                "installed_license",
                d.installed.as_ref().map(|(l, _)| l.clone()),
            )
            .with(
                "installed_file",
                d.installed.as_ref().map(|(_, p)| p.clone()),
            )
    });
    let peer_mem = r.peer_mem.as_ref().map_or(Json::Null, |pm| {
        let module = |m: &Option<crate::probe::Module>| {
            m.as_ref().map_or(Json::Null, |m| {
                Json::obj()
                    .with("module", &m.name)
                    .with("version", m.version.clone())
                    .with(
                        "parameters",
                        Json::Obj(
                            m.params
                                .iter()
                                .map(|(k, v)| (k.clone(), Json::from(v)))
                                .collect(),
                        ),
                    )
                    .with("stats_file", m.stats_file.clone())
                    .with(
                        "stats",
                        Json::Obj(
                            m.stats
                                .iter()
                                .map(|(k, v)| (k.clone(), Json::from(v)))
                                .collect(),
                        ),
                    )
            })
        };
        let (symbol, symbol_module) = match &pm.symbol {
            Symbol::Found(m) => ("found", m.clone()),
            Symbol::NotFound => ("absent", None),
            Symbol::Unreadable => ("unreadable", None),
        };
        Json::obj()
            .with("memory_peers", pm.memory_peers)
            .with("host_symbol", symbol)
            .with("host_symbol_module", symbol_module)
            .with(
                "clients",
                Json::Arr(
                    pm.clients
                        .iter()
                        .map(|c| {
                            Json::obj()
                                .with("name", &c.name)
                                .with("version", c.version.clone())
                                .with(
                                    "stats",
                                    Json::Obj(
                                        c.stats
                                            .iter()
                                            .map(|(k, v)| (k.clone(), Json::from(*v)))
                                            .collect(),
                                    ),
                                )
                        })
                        .collect(),
                ),
            )
            .with("peermem_rs", module(&pm.peermem_rs))
            .with("nvidia_peermem", module(&pm.nvidia_peermem))
            .with(
                "nvidia_peermem_is",
                r.driver
                    .as_ref()
                    .and_then(|d| doctor::nvidia_peermem_is(pm, d))
                    .map(|n| n.key()),
            )
            .with(
                "applications",
                Json::Arr(
                    apps::app_checks(pm)
                        .into_iter()
                        .map(|(name, path)| {
                            Json::obj()
                                .with("name", name)
                                .with("found", path.is_some())
                                .with("path", path)
                        })
                        .collect(),
                ),
            )
    });
    let libraries = r.libraries.as_ref().map_or(Json::Null, |(d, decisions)| {
        let mut dmabuf = Json::obj().with("ready", d.ready().key());
        for (name, (state, why)) in d.requirements() {
            dmabuf = dmabuf.with(
                name,
                Json::obj().with("state", state.key()).with("why", why),
            );
        }
        Json::obj().with("dmabuf", dmabuf).with(
            "paths",
            Json::Arr(
                decisions
                    .iter()
                    .map(|x| {
                        Json::obj()
                            .with("library", x.installed.lib.key())
                            .with(
                                "version",
                                x.installed.version.map(|(a, b, c)| format!("{a}.{b}.{c}")),
                            )
                            .with("file", &x.installed.file)
                            .with("path", x.path.key())
                            .with("why", &x.why)
                            .with("needs_peer_memory", x.needs_peer_memory)
                    })
                    .collect(),
            ),
        )
    });
    let iommu = Json::obj()
        .with("units", r.iommu.units.clone())
        .with("groups", r.iommu.groups.len())
        .with("cmdline_flags", r.iommu.cmdline_flags.clone())
        .with("summary", r.iommu.summary());
    let pairs: Vec<Json> = r
        .pairs
        .iter()
        .map(|p| {
            let acs: Vec<Json> = p
                .acs
                .iter()
                .map(|(b, a)| {
                    let j = Json::obj().with("bridge", b);
                    match a {
                        Acs::Unreadable => j.with("state", "unreadable"),
                        Acs::Absent => j.with("state", "absent"),
                        Acs::Present { cap, ctrl, .. } => j
                            .with("state", "present")
                            .with("capability", format!("0x{cap:04x}"))
                            .with("control", format!("0x{ctrl:04x}"))
                            .with("enabled", crate::pci::acs_names(*ctrl)),
                    }
                })
                .collect();
            Json::obj()
                .with("gpu", &r.gpus[p.gpu].name)
                .with("gpu_bdf", &r.gpus[p.gpu].dev.bdf)
                .with("nic", &r.nics[p.nic].name)
                .with("nic_bdf", &r.nics[p.nic].dev.bdf)
                .with("link", p.path.link.code())
                .with("bridges", p.path.bridges.clone())
                .with("acs", Json::Arr(acs))
                .with("verdict", p.verdict.key())
                .with("verdict_text", p.verdict.text())
                .with(
                    "reasons",
                    findings_json(
                        r.reasons(p)
                            .into_iter()
                            .filter(|f| f.severity > Severity::Note),
                    ),
                )
                .with("findings", findings_json(&p.findings))
        })
        .collect();
    let best: Vec<Json> = r
        .best_pairs()
        .iter()
        .map(|p| {
            Json::obj()
                .with("gpu", &r.gpus[p.gpu].name)
                .with("nic", &r.nics[p.nic].name)
                .with("link", p.path.link.code())
                .with("verdict", p.verdict.key())
        })
        .collect();
    Json::obj()
        .with("tool", "gdr-doctor")
        .with("version", VERSION)
        .with("root", &r.root)
        .with("hardware_only", r.hardware_only)
        .with("strict", r.strict)
        .with(
            "verdict",
            r.verdict().map_or("nothing-to-check", |v| v.key()),
        )
        .with("exit_status", r.exit_status())
        .with("gpus", Json::Arr(gpus))
        .with("nics", Json::Arr(nics))
        .with("driver", driver)
        .with("peer_memory", peer_mem)
        .with("libraries", libraries)
        .with("iommu", iommu)
        .with("node_findings", findings_json(&r.node))
        .with("best_per_gpu", Json::Arr(best))
        .with("pairs", Json::Arr(pairs))
        .pretty()
}
