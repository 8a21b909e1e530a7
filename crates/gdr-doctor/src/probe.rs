// SPDX-License-Identifier: GPL-2.0
//! The software side of GPUDirect RDMA as sysfs and procfs show it: the NVIDIA kernel module and its
//! flavour, the peer-memory host and its clients, peermem-rs itself, and the IOMMU.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use crate::sysfs::Fs;

// --- the NVIDIA kernel module -----------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// MODULE_LICENSE("Dual MIT/GPL"): NVIDIA's open kernel modules.
    Open,
    /// MODULE_LICENSE("NVIDIA"): the proprietary modules; the kernel taints itself with 'P'.
    Proprietary,
    Unknown,
}

impl Flavour {
    pub fn name(self) -> &'static str {
        match self {
            Flavour::Open => "open",
            Flavour::Proprietary => "proprietary",
            Flavour::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Driver {
    pub module: String,
    pub loaded: bool,
    pub version: Option<String>,
    /// Flavour of the loaded module (Unknown if not loaded).
    pub flavour: Flavour,
    /// What the flavour was read from, e.g. "taint OE".
    pub evidence: Option<String>,
    /// License of the module file installed for the running kernel, and its path, when readable.
    pub installed: Option<(String, String)>,
    /// That file's version: after an upgrade without a reload, not the loaded one's.
    pub installed_version: Option<String>,
}

/// The licenses the kernel treats as GPL-compatible (license_is_gpl_compatible()).
fn license_flavour(license: &str) -> Flavour {
    const GPL: [&str; 6] = [
        "GPL",
        "GPL v2",
        "GPL and additional rights",
        "Dual BSD/GPL",
        "Dual MIT/GPL",
        "Dual MPL/GPL",
    ];
    if GPL.contains(&license) {
        Flavour::Open
    } else if license == "NVIDIA" || !license.is_empty() {
        Flavour::Proprietary
    } else {
        Flavour::Unknown
    }
}

/// Taint letters of a loaded module ("POE"): 'P' marks a proprietary license.
fn taint_flavour(taint: &str) -> Flavour {
    if taint.contains('P') {
        Flavour::Proprietary
    } else {
        Flavour::Open
    }
}

/// The taint letters /proc/modules prints for a module: "nvidia 5 0 - Live 0x0 (POE)" -> "POE";
/// an untainted module has no parenthesis, which is "".
pub fn proc_modules_taint(proc_modules: &str, module: &str) -> Option<String> {
    let line = proc_modules
        .lines()
        .find(|l| l.split_whitespace().next() == Some(module))?;
    Some(match (line.rfind('('), line.rfind(')')) {
        (Some(a), Some(b)) if a < b => line[a + 1..b].to_string(),
        _ => String::new(),
    })
}

/// The `license=` entry of a module file's .modinfo section.
pub fn modinfo_license(ko: &[u8]) -> Option<String> {
    modinfo(ko, "license")
}

/// The module file of `module` for the running kernel, from modules.dep, and its bytes. A compressed
/// one (.ko.zst, as Ubuntu's and DKMS's on Ubuntu; .ko.xz, as Debian's; .ko.gz) is read through the
/// decompressor kmod would use, run as a command (the tool links no library); without that command,
/// None.
pub fn installed_module_file(fs: &Fs, module: &str) -> Option<(String, Vec<u8>)> {
    let release = fs.read("/proc/sys/kernel/osrelease")?;
    let base = format!("/lib/modules/{release}");
    let dep = fs.read(&format!("{base}/modules.dep"))?;
    let want = module.replace('-', "_");
    let file = dep.lines().find_map(|line| {
        let path = line.split(':').next()?.trim();
        let name = path.rsplit('/').next()?;
        let stem = name.split(".ko").next()?;
        (stem.replace('-', "_") == want).then(|| path.to_string())
    })?;
    let abs = if file.starts_with('/') {
        file
    } else {
        format!("{base}/{file}")
    };
    let tool = if abs.ends_with(".ko") {
        None
    } else if abs.ends_with(".ko.zst") {
        Some("zstd")
    } else if abs.ends_with(".ko.xz") {
        Some("xz")
    } else if abs.ends_with(".ko.gz") {
        Some("gzip")
    } else {
        return None;
    };
    let bytes = match tool {
        None => fs.read_bytes(&abs).ok()?,
        Some(tool) => {
            let out = std::process::Command::new(tool)
                .args(["-dc", "--"])
                .arg(fs.path(&abs))
                .stderr(std::process::Stdio::null())
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            out.stdout
        }
    };
    Some((abs, bytes))
}

/// The license of the module file of `module` for the running kernel, its path, and its version.
fn installed_module(fs: &Fs, module: &str) -> Option<(String, String, Option<String>)> {
    let (abs, bytes) = installed_module_file(fs, module)?;
    Some((modinfo_license(&bytes)?, abs, modinfo(&bytes, "version")))
}

pub fn probe_driver(fs: &Fs, module: &str) -> Driver {
    let dir = format!("/sys/module/{module}");
    let proc_modules = fs.read("/proc/modules").unwrap_or_default();
    let listed = proc_modules_taint(&proc_modules, module);
    let loaded = fs.is_dir(&dir) || listed.is_some();
    let (flavour, evidence) = if let Some(t) = fs.read(&format!("{dir}/taint")) {
        (
            taint_flavour(&t),
            Some(format!("taint {}", if t.is_empty() { "none" } else { &t })),
        )
    } else if let Some(t) = listed {
        (
            taint_flavour(&t),
            Some(format!(
                "/proc/modules taint {}",
                if t.is_empty() { "none" } else { &t }
            )),
        )
    } else {
        (Flavour::Unknown, None)
    };
    let file = installed_module(fs, module);
    let installed_version = file.as_ref().and_then(|(_, _, v)| v.clone());
    let installed = file.map(|(lic, path, _)| (lic, path));
    let (flavour, evidence) = match (&installed, loaded, flavour) {
        // Loaded, but neither taint file nor /proc/modules said anything: fall back to the file.
        (Some((lic, _)), true, Flavour::Unknown) => {
            (license_flavour(lic), Some(format!("license \"{lic}\"")))
        }
        _ => (flavour, evidence),
    };
    Driver {
        module: module.to_string(),
        loaded,
        version: fs.read(&format!("{dir}/version")),
        flavour,
        evidence,
        installed,
        installed_version,
    }
}

impl Driver {
    /// Flavour of the installed module file, when the loaded one tells nothing.
    pub fn installed_flavour(&self) -> Option<Flavour> {
        self.installed.as_ref().map(|(lic, _)| license_flavour(lic))
    }
}

// --- peer memory ------------------------------------------------------------------------------

pub const MEMORY_PEERS: &str = "/sys/kernel/mm/memory_peers";
pub const PEER_MEM_SYMBOL: &str = "ib_register_peer_memory_client";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Symbol {
    /// In /proc/kallsyms, with the module that exports it (None: built into the kernel).
    Found(Option<String>),
    NotFound,
    Unreadable,
}

#[derive(Clone, Debug)]
pub struct Client {
    pub name: String,
    pub version: Option<String>,
    pub stats: BTreeMap<String, u64>,
}

#[derive(Clone, Debug)]
pub struct Module {
    pub name: String,
    pub version: Option<String>,
    pub params: BTreeMap<String, String>,
    pub stats: Vec<(String, String)>,
    pub stats_file: Option<String>,
}

#[derive(Clone, Debug)]
pub struct PeerMem {
    /// /sys/kernel/mm/memory_peers exists: the host exports its clients there, which
    /// MLNX_OFED/DOCA-OFED does only on kernels that export mm_kobj (before 6.6).
    pub memory_peers: bool,
    pub symbol: Symbol,
    pub clients: Vec<Client>,
    /// peermem-rs under its own name.
    pub peermem_rs: Option<Module>,
    /// NVIDIA's nvidia-peermem, or peermem-rs built as its drop-in (which has a statistics file).
    pub nvidia_peermem: Option<Module>,
    /// /sys/module/nv_peer_mem/version: Mellanox's old module, which UCX and UCC also accept.
    pub nv_peer_mem: bool,
    /// debugfs is mounted and readable here: a module without a statistics file has none.
    pub debugfs_readable: bool,
    /// The installed clients' symbol versions against their installed providers.
    pub symbol_versions: Vec<SymbolVersion>,
    /// The installed clients' module files.
    pub installed_clients: Vec<InstalledClient>,
}

pub fn find_symbol(kallsyms: impl BufRead, symbol: &str) -> Symbol {
    for line in kallsyms.lines() {
        let Ok(line) = line else {
            return Symbol::Unreadable;
        };
        let mut f = line.split_whitespace();
        if f.nth(2) == Some(symbol) {
            let module = f
                .next()
                .map(|m| m.trim_matches(|c| c == '[' || c == ']').to_string());
            return Symbol::Found(module);
        }
    }
    Symbol::NotFound
}

/// `key value`, `key: value` or `key=value` lines.
pub fn parse_stats(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let (k, v) = line
                .split_once([':', '='])
                .or_else(|| line.split_once(char::is_whitespace))?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

fn probe_module(fs: &Fs, name: &str, stats_files: &[String]) -> Option<Module> {
    let dir = format!("/sys/module/{name}");
    if !fs.is_dir(&dir) {
        return None;
    }
    let params = fs
        .list(&format!("{dir}/parameters"))
        .into_iter()
        .filter_map(|p| {
            let v = fs.read(&format!("{dir}/parameters/{p}"))?;
            Some((p, v))
        })
        .collect();
    let (stats, stats_file) = stats_files
        .iter()
        .find_map(|f| fs.read(f).map(|t| (parse_stats(&t), Some(f.clone()))))
        .unwrap_or((Vec::new(), None));
    Some(Module {
        name: name.to_string(),
        version: fs.read(&format!("{dir}/version")),
        params,
        stats,
        stats_file,
    })
}

/// One symbol a peer-memory client imports from its providers, with the CRC it was linked against
/// and the CRC the provider installed for this kernel exports it with.
#[derive(Clone, Debug)]
pub struct SymbolVersion {
    /// The client module (peermem_rs or nvidia_peermem) and its installed file.
    pub client: String,
    pub client_file: String,
    /// Whether that file is peermem-rs (its modinfo description says so) or another module, and
    /// its modinfo version.
    pub client_is_peermem_rs: bool,
    pub client_version: Option<String>,
    pub symbol: String,
    pub linked_crc: u32,
    /// The providing module (the loaded one that exports the symbol, else ib_core or nvidia) and its
    /// installed file and CRC.
    pub provider: String,
    pub provider_file: String,
    pub provider_crc: Option<u32>,
}

impl SymbolVersion {
    pub fn matches(&self) -> bool {
        self.provider_crc == Some(self.linked_crc)
    }
}

/// The `key=` entry of a module file's .modinfo section.
pub fn modinfo(ko: &[u8], key: &str) -> Option<String> {
    let key = format!("{key}=");
    let mut at = 0;
    while let Some(i) = ko[at..]
        .windows(key.len())
        .position(|w| w == key.as_bytes())
    {
        let start = at + i;
        // An entry starts after a NUL (or at the start of the section).
        if start == 0 || ko[start - 1] == 0 {
            let rest = &ko[start + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            return Some(String::from_utf8_lossy(&rest[..end]).into_owned());
        }
        at = start + 1;
    }
    None
}

/// A peer-memory client's module file installed for the running kernel.
#[derive(Clone, Debug)]
pub struct InstalledClient {
    /// peermem_rs or nvidia_peermem.
    pub module: String,
    pub file: String,
    /// peermem-rs (its modinfo description says so) rather than NVIDIA's module.
    pub is_peermem_rs: bool,
    /// The file names ib_register_peer_memory_client (in its symbol versions or its symbol
    /// table): it was built against a peer-memory host. NVIDIA's module built without one returns
    /// EINVAL from its init, so it cannot be loaded at all.
    pub uses_peer_memory_api: bool,
    /// modinfo version, and the kernel release its vermagic names (its first word).
    pub version: Option<String>,
    pub vermagic_release: Option<String>,
    /// That release is not the running kernel's and the file has no symbol versions, so the kernel
    /// refuses it. A module with symbol versions (its vermagic says `modversions`) has the release
    /// skipped (Linux 7.3 kernel/module/version.c:96-104 `same_magic`, called with `has_crcs` from
    /// main.c:2657), and its symbol CRCs decide, which [`SymbolVersion`] checks.
    pub other_kernel: bool,
}

pub fn probe_installed_clients(fs: &Fs) -> Vec<InstalledClient> {
    let release = fs.read("/proc/sys/kernel/osrelease").unwrap_or_default();
    ["peermem_rs", "nvidia_peermem"]
        .into_iter()
        .filter_map(|module| {
            let (file, ko) = installed_module_file(fs, module)?;
            let magic = modinfo(&ko, "vermagic").unwrap_or_default();
            let modversions = magic.split_whitespace().any(|w| w == "modversions");
            let vermagic = magic.split_whitespace().next().map(str::to_string);
            Some(InstalledClient {
                module: module.to_string(),
                file,
                is_peermem_rs: module == "peermem_rs"
                    || modinfo(&ko, "description").is_some_and(|d| d.contains("peermem-rs")),
                uses_peer_memory_api: ko
                    .windows(PEER_MEM_SYMBOL.len())
                    .any(|w| w == PEER_MEM_SYMBOL.as_bytes()),
                version: modinfo(&ko, "version"),
                other_kernel: !modversions && vermagic.as_deref().is_some_and(|r| r != release),
                vermagic_release: vermagic,
            })
        })
        .collect()
}

/// The symbol versions of the installed peer-memory clients (peermem_rs, nvidia_peermem) against
/// their installed providers, for the symbols of the peer-memory host and the NVIDIA driver. Empty
/// where nothing is installed, the files are compressed, or the kernel has no symbol versions (all
/// CRCs 0).
pub fn probe_symbol_versions(fs: &Fs) -> Vec<SymbolVersion> {
    let kallsyms = fs.read("/proc/kallsyms").unwrap_or_default();
    let owner = |sym: &str| match find_symbol(kallsyms.as_bytes(), sym) {
        Symbol::Found(Some(m)) => Some(m),
        _ => None,
    };
    let mut out = Vec::new();
    for client in ["peermem_rs", "nvidia_peermem"] {
        let Some((client_file, ko)) = installed_module_file(fs, client) else {
            continue;
        };
        let ours = client == "peermem_rs"
            || modinfo(&ko, "description").is_some_and(|d| d.contains("peermem-rs"));
        for (symbol, linked_crc) in crate::modversions::imports(&ko) {
            let fallback = if symbol.starts_with("ib_") && symbol.contains("peer_memory") {
                "ib_core"
            } else if symbol.starts_with("nvidia_p2p_") {
                "nvidia"
            } else {
                continue;
            };
            if linked_crc == 0 {
                continue;
            }
            let provider = owner(&symbol).unwrap_or_else(|| fallback.to_string());
            let Some((provider_file, pko)) = installed_module_file(fs, &provider) else {
                continue;
            };
            out.push(SymbolVersion {
                client: client.to_string(),
                client_file: client_file.clone(),
                client_is_peermem_rs: ours,
                client_version: modinfo(&ko, "version"),
                provider_crc: crate::modversions::export_crc(&pko, &symbol),
                symbol,
                linked_crc,
                provider,
                provider_file,
            });
        }
    }
    out
}

/// `symbol` in this system's /proc/kallsyms.
pub fn kallsyms_symbol(fs: &Fs, symbol: &str) -> Symbol {
    match std::fs::File::open(fs.path("/proc/kallsyms")) {
        Ok(f) => find_symbol(BufReader::new(f), symbol),
        Err(_) => Symbol::Unreadable,
    }
}

pub fn probe_peer_mem(fs: &Fs) -> PeerMem {
    let symbol = kallsyms_symbol(fs, PEER_MEM_SYMBOL);
    let clients = fs
        .list(MEMORY_PEERS)
        .into_iter()
        .filter(|name| fs.is_dir(&format!("{MEMORY_PEERS}/{name}")))
        .map(|name| {
            let dir = format!("{MEMORY_PEERS}/{name}");
            let stats = fs
                .list(&dir)
                .into_iter()
                .filter(|f| f != "version")
                .filter_map(|f| Some((f.clone(), fs.read(&format!("{dir}/{f}"))?.parse().ok()?)))
                .collect();
            Client {
                version: fs.read(&format!("{dir}/version")),
                name,
                stats,
            }
        })
        .collect();
    let rs_stats = [
        "/sys/kernel/debug/peermem_rs/stats".to_string(),
        "/sys/module/peermem_rs/stats".to_string(),
    ];
    // The drop-in keeps its statistics under its module's name; NVIDIA's module has none.
    let dropin_stats = ["/sys/kernel/debug/nvidia_peermem/stats".to_string()];
    PeerMem {
        memory_peers: fs.is_dir(MEMORY_PEERS),
        symbol,
        clients,
        peermem_rs: probe_module(fs, "peermem_rs", &rs_stats),
        nvidia_peermem: probe_module(fs, "nvidia_peermem", &dropin_stats),
        nv_peer_mem: fs.read("/sys/module/nv_peer_mem/version").is_some(),
        debugfs_readable: !fs.list("/sys/kernel/debug").is_empty(),
        symbol_versions: probe_symbol_versions(fs),
        installed_clients: probe_installed_clients(fs),
    }
}

// --- IOMMU ------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct Iommu {
    /// Hardware units (/sys/class/iommu: dmar0, ivhd0, smmu3...).
    pub units: Vec<String>,
    /// Default domain type per group number.
    pub groups: BTreeMap<String, Option<String>>,
    /// The IOMMU- and ACS-related words of the kernel command line.
    pub cmdline_flags: Vec<String>,
}

/// How the IOMMU treats a device's DMA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Not in an IOMMU group: no IOMMU translates its DMA.
    NoIommu,
    /// Pass-through: bus addresses are physical addresses.
    Identity,
    /// Translated ("DMA", "DMA-FQ"; or assumed so).
    Translated(String),
    /// Owned by VFIO (passed to a VM or a userspace driver).
    Unmanaged,
    Blocked,
}

pub fn probe_iommu(fs: &Fs) -> Iommu {
    let groups = fs
        .list("/sys/kernel/iommu_groups")
        .into_iter()
        .map(|g| {
            let t = fs.read(&format!("/sys/kernel/iommu_groups/{g}/type"));
            (g, t)
        })
        .collect();
    let cmdline = fs.read("/proc/cmdline").unwrap_or_default();
    Iommu {
        units: fs.list("/sys/class/iommu"),
        groups,
        cmdline_flags: iommu_cmdline_flags(&cmdline),
    }
}

pub fn iommu_cmdline_flags(cmdline: &str) -> Vec<String> {
    cmdline
        .split_whitespace()
        .filter(|w| {
            w.starts_with("iommu")
                || w.starts_with("intel_iommu")
                || w.starts_with("amd_iommu")
                || (w.starts_with("pci=") && w.contains("acs"))
        })
        .map(str::to_string)
        .collect()
}

impl Iommu {
    /// Whether the command line asks for pass-through by default.
    pub fn cmdline_passthrough(&self) -> Option<bool> {
        let mut pt = None;
        for f in &self.cmdline_flags {
            match f.as_str() {
                "iommu=pt"
                | "iommu.passthrough=1"
                | "iommu.passthrough=on"
                | "iommu.passthrough=y" => pt = Some(true),
                "iommu=nopt"
                | "iommu.passthrough=0"
                | "iommu.passthrough=off"
                | "iommu.passthrough=n" => pt = Some(false),
                _ => {}
            }
        }
        pt
    }

    pub fn domain(&self, group: Option<&str>) -> Domain {
        let Some(g) = group else {
            return Domain::NoIommu;
        };
        match self.groups.get(g).cloned().flatten().as_deref() {
            Some("identity") => Domain::Identity,
            Some("unmanaged") => Domain::Unmanaged,
            Some("blocked") => Domain::Blocked,
            Some(t) => Domain::Translated(t.to_string()),
            // Kernels before 5.11 have no `type`: go by the command line.
            None if self.cmdline_passthrough() == Some(true) => Domain::Identity,
            None => Domain::Translated("DMA (assumed: no group type in sysfs)".into()),
        }
    }

    /// "on (dmar0, dmar1); 64 groups: identity 64; iommu=pt" for the summary line.
    pub fn summary(&self) -> String {
        let mut types: BTreeMap<&str, usize> = BTreeMap::new();
        for t in self.groups.values() {
            *types.entry(t.as_deref().unwrap_or("no type")).or_default() += 1;
        }
        let mut s = if self.groups.is_empty() && self.units.is_empty() {
            "off (no IOMMU groups)".to_string()
        } else if self.groups.is_empty() {
            format!(
                "units present ({}) but no IOMMU groups: DMA is not translated",
                self.units.join(", ")
            )
        } else {
            let units = match self.units.len() {
                0 => String::new(),
                1..=4 => format!(" ({})", self.units.join(", ")),
                n => format!(" ({}, ... {} units)", self.units[..2].join(", "), n),
            };
            let types = types
                .iter()
                .map(|(t, n)| format!("{t} {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            format!("on{units}; {} groups: {types}", self.groups.len())
        };
        if !self.cmdline_flags.is_empty() {
            s += &format!("; kernel command line: {}", self.cmdline_flags.join(" "));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavour_from_taint_and_license() {
        assert_eq!(taint_flavour("POE"), Flavour::Proprietary);
        assert_eq!(taint_flavour("OE"), Flavour::Open);
        assert_eq!(license_flavour("Dual MIT/GPL"), Flavour::Open);
        assert_eq!(license_flavour("NVIDIA"), Flavour::Proprietary);
        let modules = "nvidia_uvm 1937408 0 - Live 0x0000000000000000 (POE)\n\
                       nvidia 56623104 2 nvidia_uvm,nvidia_peermem, Live 0x0000000000000000 (POE)\n\
                       ib_core 434176 8 rdma_ucm,ib_uverbs, Live 0x0000000000000000\n";
        assert_eq!(
            proc_modules_taint(modules, "nvidia").as_deref(),
            Some("POE")
        );
        assert_eq!(proc_modules_taint(modules, "ib_core").as_deref(), Some(""));
        assert_eq!(proc_modules_taint(modules, "nvidia_peermem"), None);
        let ko =
            b"\x7fELF\0\0junk\0version=570.86.15\0license=Dual MIT/GPL\0firmware=nvidia/gsp.bin\0";
        assert_eq!(modinfo_license(ko).as_deref(), Some("Dual MIT/GPL"));
        assert_eq!(modinfo_license(b"nothing"), None);
    }

    #[test]
    fn kallsyms_lookup() {
        let ks = "0000000000000000 T ib_register_peer_memory_client_ex\t[foo]\n\
                  0000000000000000 r __ksymtab_ib_register_peer_memory_client\t[ib_core]\n\
                  0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n";
        assert_eq!(
            find_symbol(ks.as_bytes(), PEER_MEM_SYMBOL),
            Symbol::Found(Some("ib_core".into()))
        );
        assert_eq!(
            find_symbol(
                "ffffffff81000000 T ib_register_peer_memory_client\n".as_bytes(),
                PEER_MEM_SYMBOL
            ),
            Symbol::Found(None)
        );
        assert_eq!(
            find_symbol("0 T other\t[x]\n".as_bytes(), PEER_MEM_SYMBOL),
            Symbol::NotFound
        );
    }

    #[test]
    fn stats_lines() {
        assert_eq!(
            parse_stats("acquire 5\nget_pages: 4\n# comment\ndma_map_failed=1\n\n"),
            vec![
                ("acquire".to_string(), "5".to_string()),
                ("get_pages".to_string(), "4".to_string()),
                ("dma_map_failed".to_string(), "1".to_string())
            ]
        );
    }

    #[test]
    fn iommu_command_line() {
        let flags = iommu_cmdline_flags("BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt pci=disable_acs_redir=0000:02:08.0 quiet");
        assert_eq!(
            flags,
            [
                "intel_iommu=on",
                "iommu=pt",
                "pci=disable_acs_redir=0000:02:08.0"
            ]
        );
        let mut io = Iommu {
            units: vec![],
            groups: BTreeMap::new(),
            cmdline_flags: flags,
        };
        assert_eq!(io.cmdline_passthrough(), Some(true));
        io.groups.insert("3".into(), None);
        assert_eq!(io.domain(Some("3")), Domain::Identity);
        io.cmdline_flags = vec!["iommu.passthrough=0".into()];
        assert!(matches!(io.domain(Some("3")), Domain::Translated(_)));
        io.groups.insert("4".into(), Some("DMA-FQ".into()));
        assert_eq!(io.domain(Some("4")), Domain::Translated("DMA-FQ".into()));
        assert_eq!(io.domain(None), Domain::NoIommu);
        assert!(io.summary().starts_with(
            "on; 2 groups: DMA-FQ 1, no type 1; kernel command line: iommu.passthrough=0"
        ));
        let off = Iommu {
            units: vec!["dmar0".into()],
            groups: BTreeMap::new(),
            cmdline_flags: vec![],
        };
        assert_eq!(
            off.summary(),
            "units present (dmar0) but no IOMMU groups: DMA is not translated"
        );
    }
}
