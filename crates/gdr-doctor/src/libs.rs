// SPDX-License-Identifier: GPL-2.0
//! Which path GPUDirect RDMA will take for each GPU communication library installed here. The
//! choices are DMA-BUF (`ibv_reg_dmabuf_mr` on a dma-buf the CUDA driver exports), peer memory
//! (`ibv_reg_mr` on a cudaMalloc pointer, served by a peer-memory client such as peermem-rs), or
//! none (staging through host memory, or the transport left out). The answer is read from files
//! only: library file names and the strings in them, pkg-config files, /proc/kallsyms.
//!
//! Each rule here is a fact of `docs/library-paths.md`, which gives its source and the releases it
//! holds for; the ids in the comments (NC-5, UX-3, ...) are that page's.

use crate::apps::app_checks;
use crate::finding::{Finding, Severity};
use crate::probe::{kallsyms_symbol, Driver, Flavour, PeerMem, Symbol};
use crate::sysfs::Fs;

/// Where distributions, NVIDIA's repositories, CUDA and HPC-X put the libraries.
pub const LIB_DIRS: [&str; 10] = [
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/opt/hpcx/ucx/lib",
    "/opt/hpcx/ucc/lib",
    "/opt/hpcx/ompi/lib",
    "/opt/hpcx/nccl_rdma_sharp_plugin/lib",
];

pub type Version = (u32, u32, u32);

fn parse_version(s: &str) -> Option<Version> {
    let mut it = s.split('.').map(|p| {
        let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse::<u32>().ok()
    });
    let major = it.next()??;
    let minor = it.next()??;
    let patch = it.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

fn show(v: Option<Version>) -> String {
    v.map_or("(version unknown)".into(), |(a, b, c)| {
        format!("{a}.{b}.{c}")
    })
}

/// The first occurrence of `needle` in `hay`, and what follows it up to the next NUL or space.
fn string_after(hay: &[u8], needle: &str) -> Option<String> {
    let at = hay
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?;
    let rest = &hay[at + needle.len()..];
    let end = rest
        .iter()
        .position(|&b| b == 0 || b == b' ' || b == b'\n')
        .unwrap_or(rest.len().min(64));
    Some(String::from_utf8_lossy(&rest[..end]).into_owned())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Nccl,
    Ucx,
    Nvshmem,
    Ucc,
    OpenMpi,
}

impl Lib {
    pub fn name(self) -> &'static str {
        match self {
            Lib::Nccl => "NCCL",
            Lib::Ucx => "UCX",
            Lib::Nvshmem => "NVSHMEM",
            Lib::Ucc => "UCC",
            Lib::OpenMpi => "Open MPI",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Lib::Nccl => "nccl",
            Lib::Ucx => "ucx",
            Lib::Nvshmem => "nvshmem",
            Lib::Ucc => "ucc",
            Lib::OpenMpi => "openmpi",
        }
    }
}

/// One installed library.
#[derive(Clone, Debug)]
pub struct Installed {
    pub lib: Lib,
    pub version: Option<Version>,
    pub file: String,
    /// UCX: its CUDA transport (`ucx/libuct_cuda.so*`) is installed. UCC: its tl/mlx5 component.
    /// Open MPI: its UCX PML (`mca_pml_ucx.so`). NCCL, NVSHMEM: always true.
    pub component: bool,
}

/// The version a pkg-config file next to the library states (`<dir>/pkgconfig/<name>.pc`).
fn pc_version(fs: &Fs, dir: &str, name: &str) -> Option<Version> {
    let pc = fs.read(&format!("{dir}/pkgconfig/{name}.pc"))?;
    pc.lines()
        .find_map(|l| l.strip_prefix("Version:"))
        .and_then(|v| parse_version(v.trim()))
}

/// The X.Y.Z of the first file named `<prefix>X.Y.Z` (the real file behind a soname).
fn version_in_name(names: &[String], prefix: &str) -> Option<Version> {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(prefix))
        .filter(|v| v.matches('.').count() == 2)
        .find_map(parse_version)
}

/// A file below `dir` (at most `depth` levels down) whose name starts with `prefix`.
fn find_below(fs: &Fs, dir: &str, prefix: &str, depth: u32) -> bool {
    fs.list(dir).iter().any(|n| {
        let p = format!("{dir}/{n}");
        n.starts_with(prefix)
            || (depth > 0 && fs.is_dir(&p) && find_below(fs, &p, prefix, depth - 1))
    })
}

/// Every library of [`Lib`] in [`LIB_DIRS`], one entry per file found.
pub fn installed(fs: &Fs) -> Vec<Installed> {
    let mut out = Vec::new();
    for dir in LIB_DIRS {
        let names = fs.list(dir);
        let mut add = |lib, version, file: &str, component| {
            out.push(Installed {
                lib,
                version,
                file: format!("{dir}/{file}"),
                component,
            })
        };
        // NCCL (NC-12): libnccl.so.2.X.Y, or the string "NCCL version X.Y.Z" inside libnccl.so.2.
        if let Some(n) = names.iter().find(|n| n.starts_with("libnccl.so.")) {
            let v = version_in_name(&names, "libnccl.so.").or_else(|| {
                let bytes = fs.read_bytes(&format!("{dir}/{n}")).ok()?;
                parse_version(&string_after(&bytes, "NCCL version ")?)
            });
            add(Lib::Nccl, v, n, true);
        }
        // UCX (UX-8): no version in the file names; ucx.pc has it. CUDA only with libuct_cuda.
        if let Some(n) = names.iter().find(|n| n.starts_with("libucp.so")) {
            let cuda = fs
                .list(&format!("{dir}/ucx"))
                .iter()
                .any(|m| m.starts_with("libuct_cuda.so"));
            add(Lib::Ucx, pc_version(fs, dir, "ucx"), n, cuda);
        }
        // NVSHMEM (NV-7): libnvshmem_host.so.X.Y.Z.
        if let Some(n) = names.iter().find(|n| n.starts_with("libnvshmem_host.so")) {
            add(
                Lib::Nvshmem,
                version_in_name(&names, "libnvshmem_host.so."),
                n,
                true,
            );
        }
        // UCC (UC-2, UC-3): ucc.pc; its tl/mlx5 component in ucc/.
        if let Some(n) = names.iter().find(|n| n.starts_with("libucc.so")) {
            let mlx5 = fs
                .list(&format!("{dir}/ucc"))
                .iter()
                .any(|m| m.starts_with("libucc_tl_mlx5.so"));
            add(Lib::Ucc, pc_version(fs, dir, "ucc"), n, mlx5);
        }
        // Open MPI (OM-1, OM-2): libmpi.so.40 and, below openmpi/, its UCX PML.
        if let Some(n) = names.iter().find(|n| n.starts_with("libmpi.so.")) {
            let ucx = find_below(fs, &format!("{dir}/openmpi"), "mca_pml_ucx.so", 3)
                || find_below(fs, dir, "mca_pml_ucx.so", 1);
            add(Lib::OpenMpi, pc_version(fs, dir, "ompi"), n, ucx);
        }
    }
    out
}

/// One requirement of DMA-BUF: met, not met, or cannot be told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tri {
    Yes,
    No,
    Unknown,
}

/// What DMA-BUF registration of GPU memory needs here (DRV-1, DRV-4, DRV-6), each with what was seen.
#[derive(Clone, Debug)]
pub struct DmaBuf {
    /// The CUDA driver can export GPU memory as a dma-buf: NVIDIA's open kernel modules.
    pub gpu: (Tri, String),
    /// ib_core can register a dma-buf (`ib_umem_dmabuf_get`, Linux 5.12+ or an OFED backport).
    pub kernel: (Tri, String),
    /// rdma-core's libibverbs has `ibv_reg_dmabuf_mr` (symbol version IBVERBS_1.12, rdma-core 34+).
    pub verbs: (Tri, String),
}

impl Tri {
    pub fn key(self) -> &'static str {
        match self {
            Tri::Yes => "yes",
            Tri::No => "no",
            Tri::Unknown => "unknown",
        }
    }
}

impl DmaBuf {
    /// The three requirements by name, for the JSON and Prometheus reports.
    pub fn requirements(&self) -> [(&'static str, &(Tri, String)); 3] {
        [
            ("gpu", &self.gpu),
            ("kernel", &self.kernel),
            ("verbs", &self.verbs),
        ]
    }

    pub fn ready(&self) -> Tri {
        let all = [self.gpu.0, self.kernel.0, self.verbs.0];
        if all.contains(&Tri::No) {
            Tri::No
        } else if all.contains(&Tri::Unknown) {
            Tri::Unknown
        } else {
            Tri::Yes
        }
    }

    /// The requirements not met (or not known to be), as text.
    pub fn missing(&self) -> Vec<&str> {
        [&self.gpu, &self.kernel, &self.verbs]
            .into_iter()
            .filter(|(t, _)| *t != Tri::Yes)
            .map(|(_, why)| why.as_str())
            .collect()
    }

    /// What to install for each requirement not met.
    pub fn actions(&self) -> Vec<&'static str> {
        self.requirements()
            .into_iter()
            .filter(|(_, (t, _))| *t != Tri::Yes)
            .map(|(name, _)| match name {
                "gpu" => "NVIDIA's open kernel modules",
                "kernel" => "a kernel from 5.12 on (or an MLNX_OFED/DOCA-OFED that adds dma-buf registration) with ib_core loaded",
                _ => "rdma-core 34 or later (libibverbs with ibv_reg_dmabuf_mr)",
            })
            .collect()
    }
}

pub fn probe_dmabuf(fs: &Fs, drv: &Driver) -> DmaBuf {
    let gpu = match (drv.loaded, drv.flavour) {
        (true, Flavour::Open) => (Tri::Yes, "the open kernel modules export GPU memory as dma-buf".to_string()),
        (true, Flavour::Proprietary) => (
            Tri::Unknown,
            "the proprietary NVIDIA driver: whether it exports dma-buf is in no published source (NVIDIA documents DMA-BUF with the open kernel modules)".to_string(),
        ),
        _ => (Tri::Unknown, "the NVIDIA driver's flavour is not known (not loaded)".to_string()),
    };
    let kernel = match kallsyms_symbol(fs, "ib_umem_dmabuf_get") {
            Symbol::Found(m) => (
                Tri::Yes,
                format!("ib_umem_dmabuf_get in {}", m.as_deref().unwrap_or("the kernel")),
            ),
            Symbol::NotFound => (
                Tri::No,
                "the RDMA stack cannot register a dma-buf (no ib_umem_dmabuf_get: a kernel before 5.12 without an OFED that adds it, or ib_core not loaded)".to_string(),
            ),
            Symbol::Unreadable => (Tri::Unknown, "/proc/kallsyms unreadable".to_string()),
    };
    let verbs = LIB_DIRS
        .iter()
        .find_map(|dir| {
            let n = fs
                .list(dir)
                .into_iter()
                .find(|n| n.starts_with("libibverbs.so.1"))?;
            let bytes = fs.read_bytes(&format!("{dir}/{n}")).ok()?;
            Some(if bytes.windows(12).any(|w| w == b"IBVERBS_1.12") {
                (Tri::Yes, format!("{dir}/{n} has ibv_reg_dmabuf_mr"))
            } else {
                (
                    Tri::No,
                    format!("{dir}/{n} has no ibv_reg_dmabuf_mr (rdma-core before 34)"),
                )
            })
        })
        .unwrap_or((Tri::Unknown, "no libibverbs found".to_string()));
    DmaBuf { gpu, kernel, verbs }
}

/// The path a library takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    DmaBuf,
    PeerMemory,
    /// Neither: staging through host memory (or, NVSHMEM, the IB transport left out).
    None,
    /// The library does not handle GPU memory at all (UCX without its CUDA transport).
    NoGpu,
}

impl Path {
    pub fn key(self) -> &'static str {
        match self {
            Path::DmaBuf => "dmabuf",
            Path::PeerMemory => "peer-memory",
            Path::None => "none",
            Path::NoGpu => "no-gpu-support",
        }
    }
}

/// A library's path and why, and whether a peer-memory client (peermem-rs) is what serves it.
#[derive(Clone, Debug)]
pub struct Decision {
    pub installed: Installed,
    pub path: Path,
    pub why: String,
    pub needs_peer_memory: bool,
}

fn at_least(v: Option<Version>, min: Version) -> bool {
    // A library whose version cannot be read is taken to be a current one.
    v.is_none_or(|v| v >= min)
}

/// The peer-memory file a library of this release looks for and finds, by the rows of
/// [`crate::apps::APP_CHECKS`] (NC-3/NC-4, UX-3, NV-2, UC-2).
fn peer_memory_found(pm: &PeerMem, i: &Installed) -> Option<&'static str> {
    let row = match i.lib {
        Lib::Nccl if at_least(i.version, (2, 23, 4)) => "NCCL >= 2.23.4",
        Lib::Ucx if at_least(i.version, (1, 18, 0)) => "UCX >= 1.18",
        Lib::Nvshmem if at_least(i.version, (3, 3, 9)) => "NVSHMEM >= 3.3.9",
        Lib::Ucc => "UCC tl/mlx5",
        _ => "NCCL <= 2.22, UCX <= 1.17, NVSHMEM < 3.3.9",
    };
    app_checks(pm)
        .into_iter()
        .find(|(name, _)| *name == row)
        .and_then(|(_, path)| path)
}

/// Open MPI takes UCX's path (OM-1): it passes GPU buffers to UCX and has no logic of its own.
fn decide_open_mpi(i: &Installed, ucx: Option<&Decision>) -> Decision {
    let (path, why) = match ucx {
        _ if !i.component => (
            Path::NoGpu,
            "built without UCX (no mca_pml_ucx.so): no GPUDirect RDMA through it".to_string(),
        ),
        None => (
            Path::NoGpu,
            "its UCX PML is there but no UCX library was found".to_string(),
        ),
        Some(u) => (
            u.path,
            format!(
                "through its UCX PML, UCX {}'s path: {}",
                show(u.installed.version),
                u.why
            ),
        ),
    };
    Decision {
        needs_peer_memory: path == Path::PeerMemory,
        installed: i.clone(),
        path,
        why,
    }
}

pub fn decide(i: &Installed, d: &DmaBuf, pm: Option<&PeerMem>) -> Decision {
    let peer = pm.and_then(|pm| peer_memory_found(pm, i));
    let ready = d.ready() == Tri::Yes;
    let dmabuf_since = match i.lib {
        Lib::Nccl => Some((2, 13, 4)),
        Lib::Ucx => Some((1, 14, 0)),
        Lib::Nvshmem => Some((2, 7, 0)),
        Lib::Ucc | Lib::OpenMpi => None,
    };
    let dmabuf = ready && dmabuf_since.is_some_and(|min| at_least(i.version, min));
    let peer_text = |p: &str| format!("peer memory (it finds {p})");
    let (path, why) = match i.lib {
        // Open MPI is judged from UCX's decision (findings); alone, it has no UCX to follow.
        Lib::OpenMpi => return decide_open_mpi(i, None),
        Lib::Ucx if !i.component => (
            Path::NoGpu,
            "built without its CUDA transport (no ucx/libuct_cuda.so): it does not handle GPU memory at all, as Debian's and Ubuntu's libucx0".to_string(),
        ),
        Lib::Ucc if !i.component => (
            Path::NoGpu,
            "no tl/mlx5 component: GPU buffers go through its tl/ucp (UCX's path) or tl/nccl (NCCL's)".to_string(),
        ),
        // NVSHMEM asks only the CUDA driver (NV-1): with dma-buf export it registers through
        // ibv_reg_dmabuf_mr, and where that fails falls back to ibv_reg_mr (NV-3), which whatever
        // peer-memory client ib_core has serves, whatever its module's name; it looks at the
        // peer-memory files only without dma-buf export (NV-2).
        Lib::Nvshmem if d.gpu.0 == Tri::Yes && !dmabuf => {
            let client = pm.is_some_and(|pm| pm.peermem_rs.is_some() || pm.nvidia_peermem.is_some());
            if ready {
                (Path::PeerMemory, format!("this release predates its DMA-BUF support ({}); {}", show(dmabuf_since), peer_text(peer.unwrap_or("a loaded client"))))
            } else if client {
                (
                    Path::PeerMemory,
                    format!(
                        "it tries DMA-BUF (the driver exports dma-buf) and, as that fails here ({}), falls back to ibv_reg_mr, which the loaded peer-memory client serves",
                        d.missing().join("; ")
                    ),
                )
            } else {
                (
                    Path::None,
                    format!(
                        "it tries DMA-BUF (the driver exports dma-buf), which fails here ({}), and its fallback to ibv_reg_mr finds no peer-memory client: its registrations of GPU memory fail",
                        d.missing().join("; ")
                    ),
                )
            }
        }
        _ if dmabuf => (
            Path::DmaBuf,
            match (i.lib, peer) {
                (Lib::Nccl, Some(p)) => format!("DMA-BUF is preferred when both work; with NCCL_DMABUF_ENABLE=0, {}", peer_text(p)),
                (Lib::Ucx, Some(p)) => format!("DMA-BUF is preferred when both work; with UCX_CUDA_COPY_DMABUF=no, {}", peer_text(p)),
                (Lib::Nvshmem, Some(p)) => format!("DMA-BUF is preferred; where a dma-buf registration fails, or with NVSHMEM_IB_DISABLE_DMABUF=1, {}", peer_text(p)),
                _ => "no peer-memory client it looks for is there, so DMA-BUF is its only path".to_string(),
            },
        ),
        _ => {
            let no_dmabuf = if i.lib == Lib::Ucc {
                "tl/mlx5 has no DMA-BUF path".to_string()
            } else if !ready {
                format!("no DMA-BUF: {}", d.missing().join("; "))
            } else {
                format!("this release predates its DMA-BUF support ({})", show(dmabuf_since))
            };
            match peer {
                Some(p) => (Path::PeerMemory, format!("{no_dmabuf}; {}", peer_text(p))),
                None => (
                    Path::None,
                    format!(
                        "{no_dmabuf}; and no peer-memory client it looks for ({}): {}",
                        match i.lib {
                            Lib::Nccl if at_least(i.version, (2, 23, 4)) => "memory_peers/nv_mem, memory_peers/nv_mem_nc, /sys/module/nvidia_peermem",
                            Lib::Ucx if at_least(i.version, (1, 18, 0)) => "memory_peers/nv_mem, /sys/module/nvidia_peermem, /sys/module/nv_peer_mem",
                            Lib::Nvshmem if at_least(i.version, (3, 3, 9)) => "memory_peers/nv_mem, memory_peers/nvidia-peermem, /sys/module/nvidia_peermem",
                            Lib::Ucc => "memory_peers/nv_mem, /sys/module/nvidia_peermem, /sys/module/nv_peer_mem",
                            _ => "memory_peers/nv_mem only, which kernels from 6.6 do not have",
                        },
                        match i.lib {
                            Lib::Nccl => "it logs \"GPU Direct RDMA Disabled\" and stages through host memory",
                            Lib::Ucx | Lib::OpenMpi => "it stages GPU memory through host buffers",
                            Lib::Nvshmem => "it skips its InfiniBand transport (\"neither nv_peer_mem, or nvidia_peermem detected\")",
                            Lib::Ucc => "tl/mlx5 handles host memory only",
                        }
                    ),
                ),
            }
        }
    };
    let why = if i.version.is_none() && matches!(path, Path::DmaBuf | Path::PeerMemory | Path::None)
    {
        format!("{why} (its version could not be read, so it is taken to be a current release)")
    } else {
        why
    };
    Decision {
        needs_peer_memory: path == Path::PeerMemory,
        installed: i.clone(),
        path,
        why,
    }
}

/// The findings: what DMA-BUF needs, then one line per library with its path and why.
pub fn findings(
    fs: &Fs,
    drv: &Driver,
    pm: Option<&PeerMem>,
) -> (DmaBuf, Vec<Decision>, Vec<Finding>) {
    let d = probe_dmabuf(fs, drv);
    let libs = installed(fs);
    let mut decisions: Vec<Decision> = libs
        .iter()
        .filter(|i| i.lib != Lib::OpenMpi)
        .map(|i| decide(i, &d, pm))
        .collect();
    // Each Open MPI follows the UCX installed nearest to it (HPC-X's beside HPC-X's Open MPI, not
    // a distribution's libucx0 in /usr/lib): the longest common directory prefix.
    let nearest_ucx = |i: &Installed| {
        decisions
            .iter()
            .filter(|x| x.installed.lib == Lib::Ucx)
            .max_by_key(|x| {
                x.installed
                    .file
                    .split('/')
                    .zip(i.file.split('/'))
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .cloned()
    };
    let mpi: Vec<Decision> = libs
        .iter()
        .filter(|i| i.lib == Lib::OpenMpi)
        .map(|i| decide_open_mpi(i, nearest_ucx(i).as_ref()))
        .collect();
    decisions.extend(mpi);
    let mut out = vec![match d.ready() {
        Tri::Yes => Finding {
            severity: Severity::Ok,
            code: "dmabuf",
            subject: "node".into(),
            message: format!(
                "DMA-BUF registration of GPU memory is likely to work (the libraries confirm it at run time): {}; {}; {}",
                d.gpu.1, d.kernel.1, d.verbs.1
            ),
            fix: None,
        },
        _ => Finding {
            severity: Severity::Note,
            code: "dmabuf",
            subject: "node".into(),
            message: format!(
                "DMA-BUF registration of GPU memory {}: {}; GPUDirect RDMA then depends on a peer-memory client",
                if d.ready() == Tri::No { "will not work here" } else { "cannot be confirmed" },
                d.missing().join("; ")
            ),
            fix: None,
        },
    }];
    if decisions.is_empty() {
        out.push(Finding {
            severity: Severity::Note,
            code: "libraries",
            subject: "node".into(),
            message: format!(
                "no NCCL, UCX, NVSHMEM, UCC or Open MPI found in {} and the other usual places: which path applications take depends on the libraries they bring",
                LIB_DIRS[0]
            ),
            fix: None,
        });
    }
    for dec in &decisions {
        let i = &dec.installed;
        let who = format!("{} {}", i.lib.name(), show(i.version));
        let peermem = match dec.path {
            Path::DmaBuf => "peermem-rs is not what it uses",
            Path::PeerMemory => "peermem-rs (or nvidia-peermem) is what it uses",
            Path::None => "a peer-memory client it finds would give it GPUDirect RDMA",
            Path::NoGpu => "peermem-rs does not matter to it",
        };
        let (severity, fix) = match dec.path {
            Path::DmaBuf | Path::PeerMemory => (Severity::Ok, None),
            Path::NoGpu => (
                Severity::Note,
                Some(match i.lib {
                    Lib::Ucx | Lib::OpenMpi => "install a UCX built with CUDA (NVIDIA's ucx and ucx-cuda packages, DOCA-Host or HPC-X) if applications pass GPU memory to it".to_string(),
                    _ => "install UCC with its tl/mlx5 component (HPC-X, DOCA-Host) if collectives on GPU memory should use it".to_string(),
                }),
            ),
            Path::None if i.lib == Lib::OpenMpi => (
                Severity::Slow,
                Some("Open MPI takes UCX's path: fix the UCX line".to_string()),
            ),
            Path::None => {
                // The release from which each looks for /sys/module/nvidia_peermem (NC-4, UX-3, NV-2).
                let sees_dropin = match i.lib {
                    Lib::Nccl => Some((2, 23, 4)),
                    Lib::Ucx | Lib::OpenMpi => Some((1, 18, 0)),
                    Lib::Nvshmem => Some((3, 3, 9)),
                    Lib::Ucc => None,
                };
                // The client there is: on the proprietary driver only NVIDIA's can load.
                let client = if drv.flavour == Flavour::Proprietary {
                    "load NVIDIA's nvidia-peermem (modprobe nvidia-peermem)"
                } else {
                    "install peermem-rs as the drop-in nvidia-peermem (make dkms-install)"
                };
                let peer = match sees_dropin {
                    Some(min) if !at_least(i.version, min) => format!(
                        "upgrade {} to {} or later (it then also looks for /sys/module/nvidia_peermem) and {client}",
                        i.lib.name(),
                        show(Some(min))
                    ),
                    _ => client.to_string(),
                };
                let actions = d.actions();
                let fix = if i.lib == Lib::Ucc {
                    format!("for peer memory: {peer}")
                } else if actions.is_empty() {
                    format!("for DMA-BUF: upgrade {} to a release with DMA-BUF support; or, for peer memory: {peer}", i.lib.name())
                } else {
                    format!("for DMA-BUF: install {}; or, for peer memory: {peer}", actions.join(", "))
                };
                (Severity::Slow, Some(fix))
            }
        };
        out.push(Finding {
            severity,
            code: "library-path",
            subject: i.lib.key().into(),
            message: format!(
                "{who} ({}): {}: {}; {peermem}",
                i.file,
                match dec.path {
                    Path::DmaBuf => "GPUDirect RDMA over DMA-BUF",
                    Path::PeerMemory => "GPUDirect RDMA over peer memory",
                    Path::None => "no GPUDirect RDMA",
                    Path::NoGpu => "no GPU memory",
                },
                dec.why
            ),
            fix,
        });
    }
    (d, decisions, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("2.21.5"), Some((2, 21, 5)));
        assert_eq!(parse_version("1.19.0-rc1"), Some((1, 19, 0)));
        assert_eq!(parse_version("2.27"), Some((2, 27, 0)));
        assert_eq!(parse_version("x"), None);
        assert_eq!(
            string_after(b"\0NCCL version 2.18.5+cuda12.2\0", "NCCL version "),
            Some("2.18.5+cuda12.2".into())
        );
        assert!(at_least(None, (9, 9, 9)) && !at_least(Some((2, 22, 3)), (2, 23, 4)));
    }
}
