// SPDX-License-Identifier: GPL-2.0
//! The diagnosis: GPUs and RDMA NICs, what stands between each pair, and a verdict with every reason
//! and its fix.

use crate::apps::{app_checks, APP_NVIDIA_PEERMEM, APP_NV_MEM};
use crate::finding::{finding, Finding, Severity};
use crate::libs;
use crate::models::{self, Arch, GpuModel};
use crate::pci::{self, Acs, Bar, Link, PathInfo, PciDev};
use crate::probe::{self, Domain, Driver, Flavour, Iommu, PeerMem, Symbol};
use crate::sysfs::{human_size, Fs};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Works,
    Slow,
    Fails,
}

impl Verdict {
    pub fn of(sev: Severity) -> Verdict {
        match sev {
            Severity::Ok | Severity::Note => Verdict::Works,
            Severity::Slow => Verdict::Slow,
            Severity::Fail => Verdict::Fails,
        }
    }

    pub fn text(self) -> &'static str {
        match self {
            Verdict::Works => "will work",
            Verdict::Slow => "may work slowly",
            Verdict::Fails => "will not work",
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            Verdict::Works => "ok",
            Verdict::Slow => "slow",
            Verdict::Fails => "no",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Verdict::Works => "works",
            Verdict::Slow => "slow",
            Verdict::Fails => "fails",
        }
    }

    pub fn exit_status(self) -> i32 {
        match self {
            Verdict::Works => 0,
            Verdict::Slow => 1,
            Verdict::Fails => 2,
        }
    }
}

/// Exit status when there is no GPU or no NIC to judge.
pub const EXIT_NOTHING_TO_CHECK: i32 = 3;

#[derive(Clone, Debug)]
pub struct Gpu {
    pub name: String,
    pub dev: PciDev,
    pub model: GpuModel,
    pub declared: bool,
    pub bar: Option<Bar>,
    pub findings: Vec<Finding>,
}

#[derive(Clone, Debug)]
pub struct Port {
    pub port: String,
    pub state: Option<String>,
    pub link_layer: Option<String>,
    pub rate: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Nic {
    pub name: String,
    pub dev: PciDev,
    pub product: String,
    pub declared: bool,
    pub ports: Vec<Port>,
    pub domain: Domain,
    pub findings: Vec<Finding>,
}

#[derive(Clone, Debug)]
pub struct Pair {
    pub gpu: usize,
    pub nic: usize,
    pub path: PathInfo,
    pub acs: Vec<(String, Acs)>,
    /// Findings about this pair's connection only.
    pub findings: Vec<Finding>,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    pub json: bool,
    pub prometheus: bool,
    pub gpu_support: bool,
    pub all: bool,
    pub strict: bool,
    pub hardware_only: bool,
    pub declare_gpus: Vec<(String, Option<String>)>,
    pub declare_nics: Vec<(String, Option<String>)>,
    pub nvidia_module: String,
}

pub struct Report {
    pub root: String,
    pub hardware_only: bool,
    pub strict: bool,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub node: Vec<Finding>,
    pub pairs: Vec<Pair>,
    pub driver: Option<Driver>,
    pub peer_mem: Option<PeerMem>,
    /// What DMA-BUF needs here, and each installed library's path (not with --hardware-only).
    pub libraries: Option<(libs::DmaBuf, Vec<libs::Decision>)>,
    pub iommu: Iommu,
}

/// Names like mlx5_10 after mlx5_9.
fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (head, tail) = name.split_at(name.len() - digits);
    (head.to_ascii_lowercase(), tail.parse().unwrap_or(0))
}

pub fn diagnose(fs: &Fs, opts: &Options) -> Result<Report, String> {
    let devices = pci::all_devices(fs);
    let by_bdf = |bdf: &str| devices.iter().find(|d| d.bdf == bdf).cloned();
    let mut node = Vec::new();

    // GPUs: NVIDIA display/3D functions, plus the declared ones.
    let mut gpus: Vec<Gpu> = Vec::new();
    for (bdf, model) in &opts.declare_gpus {
        let dev = by_bdf(bdf)
            .ok_or_else(|| format!("--declare-gpu {bdf}: no such PCI function in sysfs"))?;
        gpus.push(new_gpu(
            fs,
            dev,
            models::declared_model(model.as_deref().unwrap_or("stand-in")),
            true,
        ));
    }
    for dev in devices
        .iter()
        .filter(|d| d.vendor == 0x10de && d.is_display())
    {
        if !gpus.iter().any(|g| g.dev.bdf == dev.bdf) {
            gpus.push(new_gpu(
                fs,
                dev.clone(),
                models::gpu_model(dev.device),
                false,
            ));
        }
    }
    gpus.sort_by(|a, b| a.dev.bdf.cmp(&b.dev.bdf));
    for (i, g) in gpus.iter_mut().enumerate() {
        g.name = format!("gpu{i}");
    }

    // NICs: every RDMA device on a PCI function, plus the declared ones.
    let mut nics: Vec<Nic> = Vec::new();
    let mut ib = fs.list("/sys/class/infiniband");
    ib.sort_by_key(|n| natural_key(n));
    for name in ib {
        let resolved = fs.resolve(&format!("/sys/class/infiniband/{name}/device"));
        match resolved.and_then(|p| pci::parse_device_path(&p)).and_then(|(_, chain)| by_bdf(chain.last()?)) {
            Some(dev) => nics.push(new_nic(fs, &name, dev, false)),
            None => node.push(finding(
                Severity::Note,
                "nic-not-pci",
                &name,
                format!("RDMA device {name} is not a PCI function (software RDMA such as rxe or siw): no GPUDirect RDMA through it"),
                None,
            )),
        }
    }
    for (i, (bdf, name)) in opts.declare_nics.iter().enumerate() {
        let dev = by_bdf(bdf)
            .ok_or_else(|| format!("--declare-nic {bdf}: no such PCI function in sysfs"))?;
        if let Some(n) = nics.iter_mut().find(|n| n.dev.bdf == *bdf) {
            n.declared = true;
            continue;
        }
        let name = name.clone().unwrap_or_else(|| format!("nic{i}"));
        nics.push(new_nic(fs, &name, dev, true));
    }

    let iommu = probe::probe_iommu(fs);
    for nic in &mut nics {
        nic.domain = iommu.domain(nic.dev.iommu_group.as_deref());
    }
    let (driver, peer_mem) = if opts.hardware_only {
        (None, None)
    } else {
        (
            Some(probe::probe_driver(fs, &opts.nvidia_module)),
            Some(probe::probe_peer_mem(fs)),
        )
    };

    if gpus.is_empty() {
        node.push(finding(
            Severity::Fail,
            "no-gpu",
            "node",
            "no NVIDIA GPU found (PCI vendor 10de, display or 3D class)".into(),
            Some("check `lspci -d 10de:`; to treat another PCI function as a GPU use --declare-gpu BDF".into()),
        ));
    }
    if nics.is_empty() {
        node.push(finding(
            Severity::Fail,
            "no-nic",
            "node",
            "no RDMA device on a PCI function in /sys/class/infiniband".into(),
            Some("load the NIC's RDMA driver (e.g. mlx5_ib) or install MLNX_OFED/DOCA-OFED; to treat a PCI function as a NIC use --declare-nic BDF".into()),
        ));
    }

    if let Some(drv) = &driver {
        node.extend(driver_findings(drv, &gpus));
    }
    if let (Some(pm), Some(drv)) = (&peer_mem, &driver) {
        node.extend(peer_mem_findings(pm, drv));
        node.extend(version_findings(fs, pm, drv));
        node.extend(installed_match_findings(pm, drv));
    }
    let mut libraries = None;
    if let Some(drv) = &driver {
        let (dmabuf, decisions, found) = libs::findings(fs, drv, peer_mem.as_ref());
        node.extend(found);
        libraries = Some((dmabuf, decisions));
    }
    node.push(finding(
        Severity::Ok,
        "iommu",
        "node",
        format!("IOMMU {}", iommu.summary()),
        None,
    ));

    let peermem_rs = match (&peer_mem, &driver) {
        (Some(pm), Some(drv)) => loaded_peermem_rs(pm, drv).is_some(),
        _ => false,
    };
    for g in &mut gpus {
        g.findings = gpu_findings(g, driver.as_ref());
        if let (true, Some(drv)) = (peermem_rs, &driver) {
            g.findings.extend(mig_finding(fs, g, drv));
        }
    }
    for n in &mut nics {
        n.findings = nic_findings(n);
    }

    // Pairs.
    let mut pairs = Vec::new();
    let mut unreadable: Vec<String> = Vec::new();
    for (gi, gpu) in gpus.iter().enumerate() {
        for (ni, nic) in nics.iter().enumerate() {
            let path = pci::classify(&gpu.dev, &nic.dev);
            let acs: Vec<(String, Acs)> = path
                .bridges
                .iter()
                .map(|b| (b.clone(), pci::read_acs(fs, b)))
                .collect();
            for (b, a) in &acs {
                if *a == Acs::Unreadable && !unreadable.contains(b) {
                    unreadable.push(b.clone());
                }
            }
            pairs.push(Pair {
                gpu: gi,
                nic: ni,
                path,
                acs,
                findings: Vec::new(),
                verdict: Verdict::Works,
            });
        }
    }
    // Each GPU's nearest NICs, to name in the fixes of worse pairs.
    for p in 0..pairs.len() {
        let (gi, ni) = (pairs[p].gpu, pairs[p].nic);
        let nearest = pairs
            .iter()
            .filter(|q| q.gpu == gi)
            .map(|q| q.path.link)
            .min()
            .unwrap_or(Link::Sys);
        let better: Vec<String> = pairs
            .iter()
            .filter(|q| q.gpu == gi && q.path.link == nearest && nearest < pairs[p].path.link)
            .map(|q| format!("{} ({})", nics[q.nic].name, nearest.code()))
            .collect();
        let f = pair_findings(&gpus[gi], &nics[ni], &pairs[p], &better);
        pairs[p].findings = f;
    }
    if !unreadable.is_empty() {
        unreadable.sort();
        node.push(finding(
            Severity::Note,
            "acs-unreadable",
            "node",
            format!(
                "ACS settings of {} bridge(s) between GPUs and NICs not checked: sysfs gives PCIe extended config space to root only ({})",
                unreadable.len(),
                abbreviate(&unreadable, 4)
            ),
            Some("run gdr-doctor as root to check ACS".into()),
        ));
    }

    let node_worst = node
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok);
    for p in &mut pairs {
        let worst = [
            node_worst,
            gpus[p.gpu]
                .findings
                .iter()
                .map(|f| f.severity)
                .max()
                .unwrap_or(Severity::Ok),
            nics[p.nic]
                .findings
                .iter()
                .map(|f| f.severity)
                .max()
                .unwrap_or(Severity::Ok),
            p.findings
                .iter()
                .map(|f| f.severity)
                .max()
                .unwrap_or(Severity::Ok),
        ]
        .into_iter()
        .max()
        .unwrap_or(Severity::Ok);
        p.verdict = Verdict::of(worst);
    }

    Ok(Report {
        root: fs.root().display().to_string(),
        hardware_only: opts.hardware_only,
        strict: opts.strict,
        gpus,
        nics,
        node,
        pairs,
        driver,
        peer_mem,
        libraries,
        iommu,
    })
}

fn abbreviate(items: &[String], n: usize) -> String {
    if items.len() <= n {
        items.join(", ")
    } else {
        format!("{}, and {} more", items[..n].join(", "), items.len() - n)
    }
}

fn new_gpu(fs: &Fs, dev: PciDev, model: GpuModel, declared: bool) -> Gpu {
    let bar = fs
        .read(&format!("{}/{}/resource", pci::PCI_DEVICES, dev.bdf))
        .and_then(|r| pci::gpu_aperture(&r));
    Gpu {
        name: String::new(),
        dev,
        model,
        declared,
        bar,
        findings: Vec::new(),
    }
}

fn new_nic(fs: &Fs, name: &str, dev: PciDev, declared: bool) -> Nic {
    let dir = format!("/sys/class/infiniband/{name}");
    let ports = fs
        .list(&format!("{dir}/ports"))
        .into_iter()
        .map(|p| {
            let pd = format!("{dir}/ports/{p}");
            Port {
                state: fs.read(&format!("{pd}/state")),
                link_layer: fs.read(&format!("{pd}/link_layer")),
                rate: fs.read(&format!("{pd}/rate")),
                port: p,
            }
        })
        .collect();
    let product = models::nic_name(dev.vendor, dev.device)
        .map(str::to_string)
        .or_else(|| fs.read(&format!("{dir}/hca_type")))
        .unwrap_or_else(|| {
            if declared {
                "declared NIC".into()
            } else {
                "RDMA device".into()
            }
        });
    Nic {
        name: name.to_string(),
        dev,
        product,
        declared,
        ports,
        domain: Domain::NoIommu,
        findings: Vec::new(),
    }
}

fn driver_findings(drv: &Driver, gpus: &[Gpu]) -> Vec<Finding> {
    let mut out = Vec::new();
    let m = &drv.module;
    let version = drv
        .version
        .as_deref()
        .map(|v| format!(" {v}"))
        .unwrap_or_default();
    let evidence = drv
        .evidence
        .as_deref()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    // The GPU that decides which peer-memory module fits: an old one needs the proprietary driver.
    let old_gpu = gpus
        .iter()
        .find(|g| g.model.arch.open_modules_support() == Some(false));
    if !drv.loaded {
        let installed = match (drv.installed_flavour(), &drv.installed) {
            (Some(Flavour::Proprietary), Some((lic, path))) => format!(
                "; the installed {path} is proprietary (license \"{lic}\"): peermem-rs will not load against it, use nvidia-peermem"
            ),
            (Some(Flavour::Open), Some((_, path))) => format!("; the installed {path} is the open kernel module"),
            _ => String::new(),
        };
        out.push(finding(
            Severity::Fail,
            "nvidia-not-loaded",
            "node",
            format!("NVIDIA kernel module `{m}` is not loaded"),
            Some(format!(
                "load it (modprobe {m}) and check dmesg for NVRM errors; peermem-rs needs the open kernel modules (Turing and newer){installed}"
            )),
        ));
        return out;
    }
    match drv.flavour {
        Flavour::Open => out.push(finding(
            Severity::Ok,
            "driver-open",
            "node",
            format!("NVIDIA driver{version}: open kernel modules{evidence}: peermem-rs can load against it"),
            None,
        )),
        Flavour::Proprietary => {
            let fix = match old_gpu {
                Some(g) => format!(
                    "peermem-rs needs the open kernel modules (Turing and newer); on this {} ({}) use NVIDIA's nvidia-peermem",
                    g.model.name,
                    g.model.arch.name()
                ),
                None => "to use peermem-rs install the open kernel modules (e.g. the *-open driver packages, or the .run installer with --kernel-module-type=open); or use NVIDIA's nvidia-peermem".into(),
            };
            out.push(finding(
                Severity::Note,
                "driver-proprietary",
                "node",
                format!(
                    "proprietary NVIDIA driver{version}{evidence}: peermem-rs cannot load against it (the kernel gives no module that uses GPL-only symbols the symbols of a proprietary one)"
                ),
                Some(fix),
            ));
        }
        Flavour::Unknown => out.push(finding(
            Severity::Note,
            "driver-flavour-unknown",
            "node",
            format!("NVIDIA driver{version} loaded, but its flavour (open or proprietary) could not be read"),
            Some(format!("check `modinfo -F license {m}`: \"Dual MIT/GPL\" is open (peermem-rs works), \"NVIDIA\" is proprietary (use nvidia-peermem)")),
        )),
    }
    out
}

/// Who the loaded `nvidia_peermem` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvidiaPeermem {
    /// peermem-rs built as the drop-in (what every install goal builds unless `DROPIN=0`).
    PeermemRs,
    /// NVIDIA's own module.
    Nvidia,
    /// Cannot tell (no debugfs to read, no driver version to compare with).
    Unknown,
}

impl NvidiaPeermem {
    pub fn key(self) -> &'static str {
        match self {
            NvidiaPeermem::PeermemRs => "peermem-rs",
            NvidiaPeermem::Nvidia => "nvidia",
            NvidiaPeermem::Unknown => "unknown",
        }
    }
}

/// Which module the loaded `nvidia_peermem` is: peermem-rs's drop-in has a statistics file in debugfs
/// (NVIDIA's has none); without a readable debugfs, NVIDIA's carries the driver's version and the
/// drop-in its own.
pub fn nvidia_peermem_is(pm: &PeerMem, drv: &Driver) -> Option<NvidiaPeermem> {
    let m = pm.nvidia_peermem.as_ref()?;
    Some(if m.stats_file.is_some() {
        NvidiaPeermem::PeermemRs
    } else if pm.debugfs_readable {
        NvidiaPeermem::Nvidia
    } else {
        match (&m.version, &drv.version) {
            (Some(v), Some(d)) if v == d => NvidiaPeermem::Nvidia,
            (Some(_), Some(_)) => NvidiaPeermem::PeermemRs,
            _ => NvidiaPeermem::Unknown,
        }
    })
}

/// The installed peer-memory clients' symbol versions against their installed providers: a client
/// built against other builds of ib_core or nvidia.ko (an OFED or driver upgrade it was not rebuilt
/// for) is refused by the kernel at load, with only "disagrees about version of symbol" to say why.
fn symbol_version_findings(pm: &PeerMem) -> Vec<Finding> {
    let versions = &pm.symbol_versions;
    if versions.is_empty() {
        return Vec::new();
    }
    let mut clients: Vec<&str> = versions.iter().map(|v| v.client.as_str()).collect();
    clients.dedup();
    let mut out = Vec::new();
    for client in clients {
        let mine: Vec<&probe::SymbolVersion> =
            versions.iter().filter(|v| v.client == client).collect();
        let first = mine[0];
        let stale: Vec<&&probe::SymbolVersion> = mine.iter().filter(|v| !v.matches()).collect();
        if stale.is_empty() {
            out.push(finding(
                Severity::Ok,
                "symbol-versions",
                "node",
                format!(
                    "symbol versions: {} ({}) was linked against the CRCs its installed providers export ({} symbols of {})",
                    client,
                    first.client_file,
                    mine.len(),
                    abbreviate(&provider_names(&mine), 3)
                ),
                None,
            ));
            continue;
        }
        let detail: Vec<String> = stale
            .iter()
            .map(|v| {
                let exported = match v.provider_crc {
                    Some(c) => format!("{c:#010x}"),
                    None => "no version of it".into(),
                };
                format!(
                    "{}: linked against {:#010x}, {} ({}) exports {exported}",
                    v.symbol, v.linked_crc, v.provider, v.provider_file
                )
            })
            .collect();
        let fix = if first.client_is_peermem_rs {
            let v = first.client_version.as_deref().unwrap_or("<version>");
            format!(
                "rebuild it against the installed providers: dkms build --force -m peermem-rs -v {v} -k $(uname -r) && dkms install --force -m peermem-rs -v {v} -k $(uname -r) (without DKMS: make KDIR=/lib/modules/$(uname -r)/build && make install in its sources)"
            )
        } else {
            "rebuild NVIDIA's nvidia-peermem against the installed MLNX_OFED/DOCA-OFED: it is part of the NVIDIA driver's kernel modules (dkms build --force and dkms install --force of the nvidia DKMS module, or reinstall the driver) and must be rebuilt after every OFED upgrade".to_string()
        };
        out.push(finding(
            Severity::Fail,
            "stale-build",
            "node",
            format!(
                "{client} ({}) was built against other builds of its providers than the installed ones, and the kernel will refuse it (\"disagrees about version of symbol {}\"): {}",
                first.client_file,
                stale[0].symbol,
                detail.join("; ")
            ),
            Some(fix),
        ));
    }
    out
}

fn provider_names(v: &[&probe::SymbolVersion]) -> Vec<String> {
    let mut names: Vec<String> = v.iter().map(|v| v.provider.clone()).collect();
    names.sort();
    names.dedup();
    names
}

/// Installed clients built without the peer-memory host's API (not naming
/// ib_register_peer_memory_client), and not loaded: NVIDIA's nvidia-peermem built so (the driver
/// installed before MLNX_OFED/DOCA-OFED) returns EINVAL from its init in every release from 535 to
/// 590 (kernel-open/nvidia-peermem/nvidia-peermem.c `nv_mem_client_init`, the `#else` of
/// NV_MLNX_IB_PEER_MEM_SYMBOLS_PRESENT: 550.163.01 lines 499 and 565, 590.48.01 lines 641 and
/// 680), so `modprobe nvidia-peermem` fails with "Invalid argument" and nothing registers.
/// peermem-rs refuses to build without the host (configure.sh).
fn unusable_client_findings(pm: &PeerMem) -> Vec<Finding> {
    let any_loaded = pm.peermem_rs.is_some() || pm.nvidia_peermem.is_some();
    // Built for another kernel (its vermagic): the kernel refuses it with ENOEXEC ("Invalid module
    // format"; Linux 7.3 kernel/module/main.c:2657-2660). See `InstalledClient::other_kernel` for
    // why only without symbol versions.
    let other_kernel = pm.installed_clients.iter().filter(|c| c.other_kernel).map(|c| {
        let fix = if c.is_peermem_rs {
            format!(
                "rebuild it for this kernel: dkms install --force -m peermem-rs -v {} -k $(uname -r) (or make install KDIR=/lib/modules/$(uname -r)/build in its sources)",
                c.version.as_deref().unwrap_or("<version>")
            )
        } else {
            "rebuild it for this kernel: dkms autoinstall -k $(uname -r), or reinstall the NVIDIA driver for this kernel".to_string()
        };
        finding(
            if any_loaded { Severity::Note } else { Severity::Fail },
            "client-other-kernel",
            "node",
            format!(
                "{} was built for kernel {}, not the running one: the kernel refuses it (\"Invalid module format\")",
                c.file,
                c.vermagic_release.as_deref().unwrap_or("?")
            ),
            Some(fix),
        )
    });
    let other_kernel: Vec<Finding> = other_kernel.collect();
    other_kernel.into_iter().chain(pm.installed_clients
        .iter()
        .filter(|c| !c.uses_peer_memory_api)
        .filter(|c| match c.module.as_str() {
            "peermem_rs" => pm.peermem_rs.is_none(),
            _ => pm.nvidia_peermem.is_none(),
        })
        .map(|c| {
            let (who, fix) = if c.is_peermem_rs {
                ("peermem-rs", "rebuild peermem-rs with MLNX_OFED/DOCA-OFED installed: make dkms-install (packaging/configure.sh finds the host's peer_mem.h and Module.symvers)".to_string())
            } else {
                ("NVIDIA's nvidia-peermem", "install MLNX_OFED/DOCA-OFED first, then rebuild the NVIDIA driver's kernel modules so that nvidia-peermem is built against its ib_core (dkms autoinstall, or reinstall the driver), and modprobe nvidia-peermem; or install peermem-rs as the drop-in (make dkms-install)".to_string())
            };
            finding(
                if any_loaded { Severity::Note } else { Severity::Fail },
                "client-without-peer-memory",
                "node",
                format!(
                    "{} ({who}) was built without the peer-memory host's API (it does not name {}): its init fails with EINVAL, so loading it fails with \"Invalid argument\" and it registers nothing{}",
                    c.file,
                    probe::PEER_MEM_SYMBOL,
                    if any_loaded { "; another client is loaded" } else { "" }
                ),
                Some(fix),
            )
        }))
        .collect()
}

/// The kernel refuses this installed client: built without the host's API, for another kernel,
/// or against other builds of its providers (a finding above says which).
fn refused(pm: &PeerMem, c: &probe::InstalledClient) -> bool {
    !c.uses_peer_memory_api
        || c.other_kernel
        || pm
            .symbol_versions
            .iter()
            .any(|v| v.client == c.module && !v.matches())
}

fn peer_mem_findings(pm: &PeerMem, drv: &Driver) -> Vec<Finding> {
    let mut out = symbol_version_findings(pm);
    out.extend(unusable_client_findings(pm));
    let host = pm.memory_peers || matches!(pm.symbol, Symbol::Found(_));
    let symbol_text = match &pm.symbol {
        Symbol::Found(Some(m)) => format!("{} exported by [{m}]", probe::PEER_MEM_SYMBOL),
        Symbol::Found(None) => format!("{} in the kernel", probe::PEER_MEM_SYMBOL),
        Symbol::NotFound => format!("no {} in /proc/kallsyms", probe::PEER_MEM_SYMBOL),
        Symbol::Unreadable => "/proc/kallsyms unreadable".into(),
    };
    if host {
        let dir = if pm.memory_peers {
            format!("{} present", probe::MEMORY_PEERS)
        } else {
            format!(
                "no {} (MLNX_OFED/DOCA-OFED creates it only on kernels that export mm_kobj, before 6.6; the ib_uverbs variant never does)",
                probe::MEMORY_PEERS
            )
        };
        out.push(finding(
            Severity::Ok,
            "peer-memory-host",
            "node",
            format!("peer-memory host: {dir}; {symbol_text}"),
            None,
        ));
    } else if pm.symbol == Symbol::Unreadable {
        out.push(finding(
            Severity::Slow,
            "peer-memory-host-unknown",
            "node",
            format!("no {}, and /proc/kallsyms is unreadable: a peer-memory host could not be confirmed", probe::MEMORY_PEERS),
            Some("check that MLNX_OFED or DOCA-OFED is installed (ofed_info -s) and its ib_core is loaded".into()),
        ));
    } else {
        out.push(finding(
            Severity::Fail,
            "no-peer-memory-host",
            "node",
            format!("no peer-memory host: no {} and {symbol_text}; this ib_core cannot ask a GPU client for GPU memory", probe::MEMORY_PEERS),
            Some("install MLNX_OFED or DOCA-OFED (their ib_core has the peer-memory API) and reload the RDMA stack; or register GPU memory with ibv_reg_dmabuf_mr (dma-buf, open kernel modules), which needs no peer-memory module".into()),
        ));
        return out;
    }

    let rs = pm.peermem_rs.as_ref();
    let nv = pm.nvidia_peermem.as_ref();
    let nv_is = nvidia_peermem_is(pm, drv);
    let dropin = nv_is == Some(NvidiaPeermem::PeermemRs);
    let nv_label = match nv_is {
        Some(NvidiaPeermem::PeermemRs) => "nvidia_peermem (peermem-rs, the drop-in)",
        Some(NvidiaPeermem::Nvidia) => "nvidia_peermem (NVIDIA's)",
        _ => "nvidia_peermem",
    };
    let loaded: Vec<&str> = [rs.map(|_| "peermem_rs"), nv.map(|_| nv_label)]
        .into_iter()
        .flatten()
        .collect();
    let nv_mem = pm.clients.iter().find(|c| c.name == "nv_mem");
    if let Some(c) = nv_mem {
        let owner = match (rs, nv) {
            (Some(r), _) if r.version.is_some() && r.version == c.version => {
                "peermem-rs".to_string()
            }
            (_, Some(n)) if n.version.is_some() && n.version == c.version && dropin => {
                "peermem-rs (drop-in nvidia_peermem)".to_string()
            }
            (_, Some(n)) if n.version.is_some() && n.version == c.version => {
                "nvidia-peermem".to_string()
            }
            (Some(_), None) => "peermem-rs".to_string(),
            (None, Some(_)) if dropin => "peermem-rs (drop-in nvidia_peermem)".to_string(),
            (None, Some(_)) => "nvidia-peermem".to_string(),
            _ => "an unknown module".to_string(),
        };
        let others: Vec<String> = pm
            .clients
            .iter()
            .filter(|o| o.name != "nv_mem")
            .map(|o| format!("{} {}", o.name, o.version.as_deref().unwrap_or("?")))
            .collect();
        let also = if others.is_empty() {
            String::new()
        } else {
            format!("; also registered: {}", others.join(", "))
        };
        out.push(finding(
            Severity::Ok,
            "client-registered",
            "node",
            format!(
                "GPU peer-memory client nv_mem {} registered by {owner}: {}{also}",
                c.version.as_deref().unwrap_or("?"),
                client_usage(c)
            ),
            None,
        ));
    } else if pm.memory_peers && !loaded.is_empty() {
        let m = if rs.is_some() {
            "peermem_rs"
        } else {
            "nvidia_peermem"
        };
        out.push(finding(
            Severity::Fail,
            "client-not-registered",
            "node",
            format!("{} is loaded but no nv_mem client is registered in {}", loaded[0], probe::MEMORY_PEERS),
            Some(format!("reload it after the RDMA stack (rmmod {m}; modprobe {m}) and look for its messages in dmesg")),
        ));
    } else if !pm.memory_peers && !loaded.is_empty() {
        // Nothing in sysfs lists the clients of such a host: the module's own word is all there is.
        let confirm = if rs.is_some() || dropin {
            "its registration shows in its log line (dmesg | grep 'peermem-rs .* loaded: client')"
        } else {
            "its registration cannot be confirmed from sysfs"
        };
        out.push(finding(
            Severity::Ok,
            "client-loaded",
            "node",
            format!(
                "{} loaded; this peer-memory host has no memory_peers directory, so {confirm}",
                loaded.join(", ")
            ),
            None,
        ));
    } else if let Some(c) = pm
        .installed_clients
        .iter()
        .find(|c| !refused(pm, c))
        .or(pm.installed_clients.first())
    {
        // Installed but not loaded: either the kernel refused it (a finding above says why) or
        // nobody loaded it. A loadable one is named first.
        let refused = refused(pm, c);
        let module = c.module.replace('_', "-");
        out.push(finding(
            Severity::Fail,
            "no-peer-memory-client",
            "node",
            format!("no GPU peer-memory client is loaded, so ibv_reg_mr() on GPU memory fails (EFAULT); {} is installed{}", c.file, if refused { " but cannot load" } else { "" }),
            Some(if refused {
                format!("fix the [FAIL] line about {} above, then modprobe {module}", c.file)
            } else {
                format!("modprobe {module}, and have it loaded at boot (echo {module} > /etc/modules-load.d/{module}.conf)")
            }),
        ));
    } else {
        let fix = match drv.flavour {
            Flavour::Proprietary => "modprobe nvidia-peermem (NVIDIA's module; peermem-rs cannot load against the proprietary driver)".to_string(),
            Flavour::Open => "install peermem-rs as the drop-in nvidia-peermem (make dkms-install, which builds the drop-in) and modprobe nvidia-peermem; or NVIDIA's nvidia-peermem".to_string(),
            Flavour::Unknown => "load the NVIDIA driver, then peermem-rs (open kernel modules; as the drop-in nvidia-peermem) or NVIDIA's nvidia-peermem (proprietary driver)".to_string(),
        };
        out.push(finding(
            Severity::Fail,
            "no-peer-memory-client",
            "node",
            "no GPU peer-memory client: neither peermem_rs nor nvidia_peermem is loaded, so ibv_reg_mr() on GPU memory fails (EFAULT)".into(),
            Some(fix),
        ));
    }
    if !loaded.is_empty() {
        out.extend(app_findings(pm, rs.is_some() && !dropin));
    }
    if rs.is_some() && nv.is_some() {
        out.push(finding(
            Severity::Note,
            "two-clients",
            "node",
            "both peermem_rs and nvidia_peermem are loaded: only the first to register gets the name nv_mem".into(),
            Some("unload one of them".into()),
        ));
    }
    if let Some(r) = rs {
        out.extend(peermem_rs_findings(r));
    }
    if let (Some(n), true) = (nv, dropin) {
        out.extend(peermem_rs_findings(n));
    }
    out
}

/// What GPUDirect RDMA users conclude, when a GPU client is loaded (see [`APP_CHECKS`]).
fn app_findings(pm: &PeerMem, own_name_only: bool) -> Vec<Finding> {
    let checks = app_checks(pm);
    let (found, missed): (Vec<_>, Vec<_>) = checks.iter().partition(|(_, p)| p.is_some());
    let short = |p: &str| {
        p.trim_start_matches("/sys/kernel/mm/")
            .trim_start_matches("/sys/")
            .trim_end_matches("/version")
            .to_string()
    };
    let list = |v: &[&(&str, Option<&str>)]| {
        v.iter()
            .map(|(n, p)| match p {
                Some(p) => format!("{n} ({})", short(p)),
                None => n.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The current releases are all but the last check.
    let current_found = checks[..checks.len() - 1].iter().any(|(_, p)| p.is_some());
    if missed.is_empty() {
        vec![finding(
            Severity::Ok,
            "applications",
            "node",
            format!("GPUDirect RDMA users find the client: {}", list(&found)),
            None,
        )]
    } else if !current_found {
        vec![finding(
            Severity::Slow,
            "client-invisible",
            "node",
            format!(
                "applications will not find GPUDirect RDMA: {} look for {APP_NV_MEM} or {APP_NVIDIA_PEERMEM}, and neither exists{}; they fall back to DMA-BUF where the kernel and NIC support it, else to staging through host memory, without an error",
                list(&missed),
                if own_name_only {
                    " (peermem-rs is loaded under its own name, peermem_rs, and this host has no memory_peers)"
                } else {
                    ""
                }
            ),
            Some("install peermem-rs as the drop-in nvidia-peermem, where they look on every kernel: make dkms-install without DROPIN=0 (README, \"Drop-in\")".into()),
        )]
    } else {
        let fix = if missed.iter().any(|(n, _)| n.starts_with("NCCL GIN")) {
            "NCCL's GPU-initiated networking looks only for /sys/module/nvidia_peermem/version: install peermem-rs as the drop-in (make dkms-install, without DROPIN=0)"
        } else {
            "the older releases look only for memory_peers, which kernels from 6.6 do not have; upgrade them, or use DMA-BUF"
        };
        vec![finding(
            Severity::Note,
            "applications",
            "node",
            format!(
                "GPUDirect RDMA users that find the client: {}; that do not: {}",
                list(&found),
                list(&missed)
            ),
            Some(fix.into()),
        )]
    }
}

fn client_usage(c: &probe::Client) -> String {
    let get = |k: &str| c.stats.get(k).copied();
    let mut parts = Vec::new();
    if let (Some(a), Some(d)) = (get("num_alloc_mrs"), get("num_dealloc_mrs")) {
        parts.push(format!(
            "{} MRs live ({a} registered, {d} released)",
            a.saturating_sub(d)
        ));
    }
    if let (Some(r), Some(d)) = (get("num_reg_bytes"), get("num_dereg_bytes")) {
        parts.push(format!("{} pinned", human_size(r.saturating_sub(d))));
    }
    if let Some(f) = get("num_free_callbacks") {
        parts.push(format!("{f} invalidations"));
    }
    if parts.is_empty() {
        "no statistics".into()
    } else {
        parts.join(", ")
    }
}

/// The leading number of a version ("550.163.01" -> 550, "24.10-1.1.4" -> 24) and the one after it.
fn version_prefix(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

/// The MIG GPU instances of `g` the NVIDIA driver exposes: /proc/driver/nvidia/capabilities/gpu<N>/mig/gi<M>,
/// one directory per instance (osRmCapRegisterSmcPartition, made with the instance), where N is the
/// GPU's device minor (/proc/driver/nvidia/gpus/<bdf>/information, "Device Minor:").
fn mig_instances(fs: &Fs, g: &Gpu) -> Vec<String> {
    let info = fs
        .read(&format!(
            "/proc/driver/nvidia/gpus/{}/information",
            g.dev.bdf
        ))
        .unwrap_or_default();
    let minor = info.lines().find_map(|l| {
        l.strip_prefix("Device Minor:")
            .and_then(|m| m.trim().parse::<u32>().ok())
    });
    let Some(minor) = minor else {
        return Vec::new();
    };
    fs.list(&format!("/proc/driver/nvidia/capabilities/gpu{minor}/mig"))
        .into_iter()
        .filter(|gi| gi.starts_with("gi"))
        .collect()
}

/// peermem-rs, under its own name or as the drop-in, when it is loaded.
pub fn loaded_peermem_rs<'a>(pm: &'a PeerMem, drv: &Driver) -> Option<&'a probe::Module> {
    pm.peermem_rs.as_ref().or_else(|| {
        pm.nvidia_peermem
            .as_ref()
            .filter(|_| nvidia_peermem_is(pm, drv) == Some(NvidiaPeermem::PeermemRs))
    })
}

/// A GPU with MIG instances on a driver before 555, which refuses persistent pins there (550
/// p2p.c `RmP2PGetGpuByAddress`): peermem-rs maps only persistent pins.
fn mig_finding(fs: &Fs, g: &Gpu, drv: &Driver) -> Option<Finding> {
    let driver = drv.version.as_deref()?;
    if version_prefix(driver).is_none_or(|(major, _)| major >= 555) {
        return None;
    }
    let mig = mig_instances(fs, g);
    if mig.is_empty() {
        return None;
    }
    Some(finding(
        Severity::Fail,
        "mig-persistent-pins-refused",
        &g.name,
        format!(
            "{} {} has MIG GPU instances ({}), and NVIDIA driver {driver} refuses persistent pins on MIG-enabled GPUs (every driver before 555): peermem-rs maps only persistent pins, so it declines every registration of this GPU's memory (cause persistent_pins_unsupported)",
            g.name,
            g.dev.bdf,
            abbreviate(&mig, 4)
        ),
        Some("upgrade the NVIDIA driver to 555 or later; or use NVIDIA's nvidia-peermem (its invalidating client pins non-persistently), or DMA-BUF (ibv_reg_dmabuf_mr)".into()),
    ))
}

/// What the peer-memory host's version decides for peermem-rs (its README, "What it targets";
/// docs/known-limits.md): the host's stop-notifier deadlock before MLNX_OFED/DOCA-OFED 25.04, for
/// the invalidating flavour. (The driver's version decides per GPU: [`mig_finding`].)
fn version_findings(fs: &Fs, pm: &PeerMem, drv: &Driver) -> Vec<Finding> {
    let mut out = Vec::new();
    let Some(rs) = loaded_peermem_rs(pm, drv) else {
        return out;
    };
    let invalidating = rs.params.get("persistent_api_support").map(String::as_str) == Some("0");
    let ofed = fs.read("/sys/module/mlx5_core/version");
    if let (true, Some(ofed)) = (invalidating, ofed.as_deref()) {
        if version_prefix(ofed).is_some_and(|v| v < (25, 4)) {
            out.push(finding(
                Severity::Slow,
                "ofed-stop-notifier-deadlock",
                "node",
                format!(
                    "peermem-rs's invalidating client (persistent_api_support=0) on MLNX_OFED/DOCA-OFED {ofed}: before 25.04 the host deadlocks on its own mapping lock when it tears down an invalidating memory region whose registration failed after mapping, and a later free of that memory then hangs the NVIDIA driver's lock for good"
                ),
                Some("upgrade MLNX_OFED/DOCA-OFED to 25.04 or later; or load peermem-rs with persistent_api_support=1 (its default)".into()),
            ));
        }
    }
    out
}

/// Whether what is installed is what runs: a client or the NVIDIA driver upgraded on disk but not
/// reloaded, and NVIDIA's nvidia-peermem from another driver release than the installed driver.
fn installed_match_findings(pm: &PeerMem, drv: &Driver) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in &pm.installed_clients {
        let loaded = match c.module.as_str() {
            "peermem_rs" => pm.peermem_rs.as_ref(),
            _ => pm.nvidia_peermem.as_ref(),
        };
        let rebuild = if c.is_peermem_rs {
            format!(
                "dkms install --force -m peermem-rs -v {} -k $(uname -r) (or make install KDIR=/lib/modules/$(uname -r)/build in its sources)",
                c.version.as_deref().unwrap_or("<version>")
            )
        } else {
            "dkms autoinstall -k $(uname -r), or reinstall the NVIDIA driver for this kernel"
                .to_string()
        };
        if let (Some(m), Some(file_version)) = (loaded, c.version.as_deref()) {
            if let Some(running) = m.version.as_deref().filter(|v| *v != file_version) {
                out.push(finding(
                    Severity::Note,
                    "client-not-reloaded",
                    "node",
                    format!(
                        "{} {running} is loaded, but {} is {file_version}: the installed one runs only once it is reloaded",
                        m.name, c.file
                    ),
                    Some(format!(
                        "stop the applications that hold registrations, then rmmod {0} && modprobe {0}",
                        m.name
                    )),
                ));
            }
        }
        if !c.is_peermem_rs {
            if let (Some(pm_version), Some(driver)) = (
                c.version.as_deref(),
                drv.installed_version.as_deref().or(drv.version.as_deref()),
            ) {
                if pm_version != driver {
                    out.push(finding(
                        Severity::Note,
                        "client-other-driver",
                        "node",
                        format!("{} is NVIDIA's nvidia-peermem of driver {pm_version}, not of the installed driver {driver}", c.file),
                        Some(format!("reinstall it with the driver: {rebuild}")),
                    ));
                }
            }
        }
    }
    if let (true, Some(running), Some(installed)) = (
        drv.loaded,
        drv.version.as_deref(),
        drv.installed_version.as_deref(),
    ) {
        if running != installed {
            // The kernel module checks the version of every user-space client at open and
            // refuses another ("NVRM: API mismatch", 550.163.01
            // src/nvidia/arch/nvalloc/unix/src/osapi.c:1024, 1114); NVML reports that as
            // "Driver/library version mismatch".
            out.push(finding(
                Severity::Slow,
                "driver-not-reloaded",
                "node",
                format!(
                    "NVIDIA driver {running} is loaded, but the installed {} is {installed}: CUDA of the new release refuses the old kernel module (\"Driver/library version mismatch\"), and peer-memory clients built for the installed one do not load until it runs",
                    drv.module
                ),
                Some("reboot (or stop every GPU user, unload the NVIDIA modules and load the installed ones)".into()),
            ));
        }
    }
    out
}

fn peermem_rs_findings(r: &probe::Module) -> Vec<Finding> {
    let version = r.version.as_deref().unwrap_or("?");
    let params = r
        .params
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ");
    // Counters at zero say little: name the others, count the rest.
    let zero = |v: &str| v.parse::<u64>() == Ok(0);
    let nonzero: Vec<String> = r
        .stats
        .iter()
        .filter(|(_, v)| !zero(v))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let zeros = r.stats.len() - nonzero.len();
    let stats = match (r.stats.is_empty(), nonzero.is_empty(), zeros) {
        (true, ..) => "no statistics file".to_string(),
        (false, true, _) => format!("all {zeros} counters at 0"),
        (false, false, 0) => nonzero.join(", "),
        (false, false, _) => format!("{} ({zeros} more counters at 0)", nonzero.join(", ")),
    };
    let mut out = vec![finding(
        Severity::Ok,
        "peermem-rs",
        "node",
        if r.name == "peermem_rs" {
            format!("peermem-rs {version} loaded [{params}]: {stats}")
        } else {
            format!(
                "peermem-rs {version} loaded as {} [{params}]: {stats}",
                r.name
            )
        },
        None,
    )];
    let failures: Vec<String> = r
        .stats
        .iter()
        .filter(|(k, v)| {
            let k = k.to_ascii_lowercase();
            (k.contains("fail") || k.contains("err")) && v.parse::<u64>().is_ok_and(|n| n > 0)
        })
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if !failures.is_empty() {
        out.push(finding(
            Severity::Note,
            "peermem-rs-failures",
            "node",
            format!("peermem-rs counted failures: {}", failures.join(", ")),
            Some("see `dmesg | grep peermem` for the reasons".into()),
        ));
    }
    out
}

fn link_finding(subject: &str, dev: &PciDev) -> Option<Finding> {
    let (Some(w), Some(max)) = (dev.link.width, dev.link.max_width) else {
        return None;
    };
    (w < max).then(|| {
        finding(
            Severity::Slow,
            "link-degraded",
            subject,
            format!("{subject} {}: PCIe link trained at x{w}, the device can do x{max}", dev.bdf),
            Some("reseat the card, check the slot, riser and BIOS lane bifurcation (lspci -vv: LnkSta vs LnkCap)".into()),
        )
    })
}

fn gpu_findings(g: &Gpu, driver: Option<&Driver>) -> Vec<Finding> {
    let mut out = Vec::new();
    let who = format!("{} {} ({})", g.name, g.dev.bdf, g.model.name);
    if !g.model.gdr {
        out.push(finding(
            Severity::Fail,
            "gpu-no-gdr",
            &g.name,
            format!("{who} has no GPUDirect RDMA: its memory is unified with the CPU's behind the SoC, PCIe devices cannot reach it through a BAR"),
            Some("register host memory (cudaHostAlloc or malloc) with the NIC instead; NCCL and UCX stage through host memory by themselves".into()),
        ));
    }
    if !g.model.known {
        out.push(finding(
            Severity::Note,
            "gpu-unknown-model",
            &g.name,
            format!("{} {}: device {} is not in gdr-doctor's table; GPUDirect RDMA support assumed", g.name, g.dev.bdf, g.dev.id()),
            Some("GPUDirect RDMA is supported on data-center and professional GPUs (Tesla, Quadro/RTX, A/H/L/B series)".into()),
        ));
    }
    if let Some(drv) = driver.filter(|d| d.loaded && !g.declared) {
        let open = drv.flavour == Flavour::Open;
        if open && g.model.arch.open_modules_support() == Some(false) {
            out.push(finding(
                Severity::Fail,
                "gpu-needs-proprietary",
                &g.name,
                format!("{who} is a {} GPU, which the open kernel modules do not drive", g.model.arch.name()),
                Some("install the proprietary driver and use NVIDIA's nvidia-peermem (peermem-rs cannot serve this GPU)".into()),
            ));
        } else if g.dev.driver.as_deref() != Some(drv.module.as_str()) {
            let (what, fix) = match g.dev.driver.as_deref() {
                Some("nouveau") => ("nouveau", "blacklist nouveau (modprobe.d), rebuild the initramfs and load nvidia".to_string()),
                Some("vfio-pci") => ("vfio-pci (passed through)", format!("unbind it from vfio-pci and bind it to {}", drv.module)),
                Some(other) => (other, format!("bind it to {}", drv.module)),
                None => ("no driver", "check dmesg for NVRM errors (e.g. BAR1 not assigned: enable Above 4G decoding in the BIOS)".to_string()),
            };
            out.push(finding(
                Severity::Fail,
                "gpu-not-bound",
                &g.name,
                format!("{who} is bound to {what}, not {}", drv.module),
                Some(fix),
            ));
        }
    }
    if g.model.arch != Arch::StandIn {
        match g.bar {
            None => out.push(finding(
                Severity::Note,
                "gpu-no-bar1",
                &g.name,
                format!("{who}: no 64-bit prefetchable BAR found (BAR1 not assigned?)"),
                Some("enable Above 4G decoding (and Resizable BAR) in the BIOS".into()),
            )),
            Some(b) if b.size < 1 << 30 => out.push(finding(
                Severity::Note,
                "gpu-small-bar1",
                &g.name,
                format!(
                    "{who}: BAR1 is {}: at most about {} of GPU memory can be registered at a time (the driver keeps 36 MiB)",
                    human_size(b.size),
                    human_size(b.size.saturating_sub(36 << 20))
                ),
                Some("keep registrations small, or enable a larger BAR1 (Resizable BAR) if the GPU and BIOS support it".into()),
            )),
            _ => {}
        }
    }
    out.extend(link_finding(&g.name, &g.dev));
    out
}

fn nic_findings(n: &Nic) -> Vec<Finding> {
    let mut out = Vec::new();
    let who = format!("{} {}", n.name, n.dev.bdf);
    let group = n.dev.iommu_group.as_deref().unwrap_or("?");
    match &n.domain {
        Domain::Translated(t) => out.push(finding(
            Severity::Slow,
            "iommu-translated",
            &n.name,
            format!("{who}: the IOMMU translates its DMA (group {group}, {t}): its reads and writes of GPU memory go up to the root complex instead of across the switch"),
            Some("boot with iommu=pt (pass-through; VFIO still works) or turn the IOMMU off (intel_iommu=off / amd_iommu=off)".into()),
        )),
        Domain::Unmanaged => out.push(finding(
            Severity::Fail,
            "nic-vfio",
            &n.name,
            format!("{who} belongs to VFIO (IOMMU group {group} is unmanaged): it is passed through, not driven by this host"),
            Some("give it back to the host driver (unbind from vfio-pci, bind mlx5_core)".into()),
        )),
        Domain::Blocked => out.push(finding(
            Severity::Fail,
            "nic-dma-blocked",
            &n.name,
            format!("{who}: the IOMMU blocks its DMA (group {group} is blocked)"),
            Some("bind the device to its driver; check dmesg for IOMMU errors".into()),
        )),
        Domain::Identity | Domain::NoIommu => {}
    }
    if !n.declared
        && !n.ports.is_empty()
        && !n
            .ports
            .iter()
            .any(|p| p.state.as_deref().is_some_and(|s| s.contains("ACTIVE")))
    {
        let states = n
            .ports
            .iter()
            .map(|p| format!("port {} {}", p.port, p.state.as_deref().unwrap_or("?")))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(finding(
            Severity::Note,
            "nic-port-down",
            &n.name,
            format!("{who}: no port is ACTIVE ({states}); registration works, traffic will not"),
            Some("check cable and switch; on InfiniBand a subnet manager (opensm) must run".into()),
        ));
    }
    out.extend(link_finding(&n.name, &n.dev));
    out
}

fn pair_findings(g: &Gpu, n: &Nic, p: &Pair, better: &[String]) -> Vec<Finding> {
    let mut out = Vec::new();
    let subject = format!("{}+{}", g.name, n.name);
    let link = p.path.link;
    let instead = if better.is_empty() {
        String::new()
    } else {
        format!("; nearer to {}: {}", g.name, better.join(", "))
    };
    let numa = |d: &PciDev| d.numa_node.map_or("?".to_string(), |x| x.to_string());
    let text = format!(
        "{}: {} and {} {}",
        link.code(),
        g.name,
        n.name,
        link.describe()
    );
    match link {
        Link::Pix | Link::Pxb => out.push(finding(Severity::Ok, "topology", &subject, text, None)),
        Link::Phb | Link::Node => out.push(finding(
            Severity::Slow,
            if link == Link::Phb { "topology-phb" } else { "topology-node" },
            &subject,
            format!("{text}: peer-to-peer goes through the CPU, with lower bandwidth, and some platforms or driver checks refuse it"),
            Some(format!(
                "use a NIC under the same PCIe switch as the GPU{instead} (NCCL uses GPUDirect RDMA this far only with NCCL_NET_GDR_LEVEL={})",
                link.code()
            )),
        )),
        Link::Sys => out.push(finding(
            Severity::Fail,
            "topology-sys",
            &subject,
            format!(
                "{text} (GPU on NUMA node {}, NIC on {}): the socket interconnect does not carry PCIe peer-to-peer traffic on most platforms",
                numa(&g.dev),
                numa(&n.dev)
            ),
            Some(format!("use a NIC on the GPU's NUMA node {}{instead}", numa(&g.dev))),
        )),
    }
    let redirecting: Vec<(&String, u16)> = p
        .acs
        .iter()
        .filter_map(|(b, a)| match a {
            Acs::Present { ctrl, .. } if ctrl & pci::ACS_REDIRECTS != 0 => Some((b, *ctrl)),
            _ => None,
        })
        .collect();
    if !redirecting.is_empty() {
        let list = redirecting
            .iter()
            .map(|(b, c)| format!("{b} ({})", pci::acs_names(*c)))
            .collect::<Vec<_>>()
            .join(", ");
        let setpci = redirecting
            .iter()
            .map(|(b, _)| format!("setpci -s {b} ECAP_ACS+0x6.w=0000"))
            .collect::<Vec<_>>()
            .join("; ");
        let bdfs = redirecting
            .iter()
            .map(|(b, _)| b.as_str())
            .collect::<Vec<_>>()
            .join(";");
        out.push(finding(
            Severity::Slow,
            "acs-redirect",
            &subject,
            format!("ACS redirect enabled on bridge(s) between {} and {}: {list}: their peer-to-peer requests detour through the root complex (slow, or fail where it does not route them back)", g.name, n.name),
            Some(format!("until reboot: {setpci}; for good: boot with \"pci=disable_acs_redir={bdfs}\" or disable ACS in the BIOS")),
        ));
    }
    let validating: Vec<&String> = p
        .acs
        .iter()
        .filter_map(|(b, a)| match a {
            Acs::Present { ctrl, .. }
                if ctrl & pci::ACS_REDIRECTS == 0 && ctrl & pci::ACS_SV != 0 =>
            {
                Some(b)
            }
            _ => None,
        })
        .collect();
    if !validating.is_empty() {
        out.push(finding(
            Severity::Note,
            "acs-source-validation",
            &subject,
            format!(
                "ACS Source Validation (no redirect) on bridge(s) {}: does not reroute peer-to-peer traffic",
                validating.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
            None,
        ));
    }
    out
}

impl Report {
    /// Every finding that bears on a pair: node-wide, both devices', the pair's own.
    pub fn reasons<'a>(&'a self, p: &'a Pair) -> Vec<&'a Finding> {
        self.node
            .iter()
            .chain(&self.gpus[p.gpu].findings)
            .chain(&self.nics[p.nic].findings)
            .chain(&p.findings)
            .collect()
    }

    /// The pair each GPU should use: best verdict, then nearest.
    pub fn best_pairs(&self) -> Vec<&Pair> {
        (0..self.gpus.len())
            .filter_map(|gi| {
                self.pairs
                    .iter()
                    .filter(|p| p.gpu == gi)
                    .min_by_key(|p| (p.verdict, p.path.link, p.nic))
            })
            .collect()
    }

    /// The node's verdict: each GPU judged by its best NIC (or, strictly, every pair); None when
    /// there is no GPU or no NIC to judge.
    pub fn verdict(&self) -> Option<Verdict> {
        if self.gpus.is_empty() || self.nics.is_empty() {
            return None;
        }
        if self.strict {
            self.pairs.iter().map(|p| p.verdict).max()
        } else {
            self.best_pairs().iter().map(|p| p.verdict).max()
        }
    }

    pub fn exit_status(&self) -> i32 {
        self.verdict()
            .map_or(EXIT_NOTHING_TO_CHECK, Verdict::exit_status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec![
            "mlx5_10",
            "mlx5_2",
            "mlx5_0",
            "ibp1s0",
            "roceP2p1s0f0",
            "rocep1s0f1",
        ];
        v.sort_by_key(|n| natural_key(n));
        assert_eq!(
            v,
            [
                "ibp1s0",
                "mlx5_0",
                "mlx5_2",
                "mlx5_10",
                "rocep1s0f1",
                "roceP2p1s0f0"
            ]
        );
    }

    #[test]
    fn verdicts_follow_the_worst_finding() {
        assert_eq!(Verdict::of(Severity::Note), Verdict::Works);
        assert_eq!(Verdict::of(Severity::Slow), Verdict::Slow);
        assert_eq!(Verdict::of(Severity::Fail), Verdict::Fails);
        assert!(Verdict::Works < Verdict::Slow && Verdict::Slow < Verdict::Fails);
        assert_eq!(Verdict::Fails.exit_status(), 2);
    }
}
