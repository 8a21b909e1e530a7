// SPDX-License-Identifier: GPL-2.0
//! What a PCI device ID says about an NVIDIA GPU (model, architecture, GPUDirect RDMA support) and
//! about an RDMA NIC (its product name).
//!
//! Sources of the IDs: the PCI ID database (pciutils/pciids, `pci.ids`, vendor 10de and 15b3) and
//! NVIDIA's gpu-admin-tools (`gpu/devid_names.py`) for the Ada and Hopper entries. Which GPUs do
//! GPUDirect RDMA: docs/peer-memory-contract.md, section 5 (data-center GPUs
//! from Kepler on; not GB10, whose memory sits behind an SoC).

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Arch {
    Kepler,
    Maxwell,
    Pascal,
    Volta,
    Turing,
    Ampere,
    Ada,
    Hopper,
    Blackwell,
    /// A device declared a GPU on the command line (the test VM's ivshmem stand-in).
    StandIn,
    Unknown,
}

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Kepler => "Kepler",
            Arch::Maxwell => "Maxwell",
            Arch::Pascal => "Pascal",
            Arch::Volta => "Volta",
            Arch::Turing => "Turing",
            Arch::Ampere => "Ampere",
            Arch::Ada => "Ada Lovelace",
            Arch::Hopper => "Hopper",
            Arch::Blackwell => "Blackwell",
            Arch::StandIn => "stand-in",
            Arch::Unknown => "unknown architecture",
        }
    }

    /// NVIDIA's open kernel modules drive Turing and newer only.
    pub fn open_modules_support(self) -> Option<bool> {
        match self {
            Arch::Kepler | Arch::Maxwell | Arch::Pascal | Arch::Volta => Some(false),
            Arch::Turing
            | Arch::Ampere
            | Arch::Ada
            | Arch::Hopper
            | Arch::Blackwell
            | Arch::StandIn => Some(true),
            Arch::Unknown => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuModel {
    pub name: String,
    pub arch: Arch,
    /// Whether the hardware can do GPUDirect RDMA at all.
    pub gdr: bool,
    /// Found in the table (or declared); false for an NVIDIA display device the table lacks.
    pub known: bool,
}

/// The question operators start from: can this GPU do GPUDirect RDMA at all, and with what.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Support {
    Yes,
    /// Not in the table: most likely, but unconfirmed.
    Unknown,
    No,
}

impl Support {
    pub fn key(self) -> &'static str {
        match self {
            Support::Yes => "yes",
            Support::Unknown => "unknown",
            Support::No => "no",
        }
    }
}

impl GpuModel {
    /// Whether the GPU can do GPUDirect RDMA, whatever the node around it, and with which NVIDIA
    /// driver flavour and peer-memory client: the answer first, then the condition.
    pub fn support(&self) -> (Support, String) {
        if !self.gdr {
            return (
                Support::No,
                "no: its memory is unified with the CPU's behind the SoC, no PCIe device can reach it; register host memory with the NIC instead".into(),
            );
        }
        match self.arch.open_modules_support() {
            _ if self.arch == Arch::StandIn => (Support::Yes, "yes (declared)".into()),
            Some(false) => (
                Support::Yes,
                format!("yes, with NVIDIA's proprietary driver and its nvidia-peermem; peermem-rs needs the open kernel modules, which do not drive {} GPUs", self.arch.name()),
            ),
            Some(true) => (
                Support::Yes,
                "yes, with either driver flavour: the open kernel modules with peermem-rs or NVIDIA's nvidia-peermem, or the proprietary driver with nvidia-peermem".into(),
            ),
            None => (
                Support::Unknown,
                "probably: this device is not in gdr-doctor's table; data-center and professional GPUs from Kepler on can".into(),
            ),
        }
    }
}

use Arch::*;

/// (PCI device ID, model, architecture, GPUDirect RDMA capable).
const GPUS: &[(u16, &str, Arch, bool)] = &[
    // Kepler Tesla (GK110/GK110B/GK180/GK210, GK104 for K10).
    (0x101e, "Tesla K20X", Kepler, true),
    (0x101f, "Tesla K20", Kepler, true),
    (0x1020, "Tesla K20X", Kepler, true),
    (0x1021, "Tesla K20Xm", Kepler, true),
    (0x1022, "Tesla K20c", Kepler, true),
    (0x1023, "Tesla K40m", Kepler, true),
    (0x1024, "Tesla K40c", Kepler, true),
    (0x1026, "Tesla K20s", Kepler, true),
    (0x1027, "Tesla K40st", Kepler, true),
    (0x1028, "Tesla K20m", Kepler, true),
    (0x1029, "Tesla K40s", Kepler, true),
    (0x102a, "Tesla K40t", Kepler, true),
    (0x102d, "Tesla K80", Kepler, true),
    (0x102e, "Tesla K40d", Kepler, true),
    (0x118f, "Tesla K10", Kepler, true),
    // Maxwell Tesla.
    (0x13bd, "Tesla M10", Maxwell, true),
    (0x13f2, "Tesla M60", Maxwell, true),
    (0x13f3, "Tesla M6", Maxwell, true),
    (0x1431, "Tesla M4", Maxwell, true),
    (0x17fd, "Tesla M40", Maxwell, true),
    // Pascal (GP100, GP102, GP104).
    (0x15f7, "Tesla P100 PCIe 12GB", Pascal, true),
    (0x15f8, "Tesla P100 PCIe 16GB", Pascal, true),
    (0x15f9, "Tesla P100 SXM2 16GB", Pascal, true),
    (0x15fa, "Tesla P100 (DGX Station)", Pascal, true),
    (0x15fc, "Tesla P100-DGXS-16GB", Pascal, true),
    (0x1b38, "Tesla P40", Pascal, true),
    (0x1bb3, "Tesla P4", Pascal, true),
    // Volta (GV100).
    (0x1db1, "Tesla V100 SXM2 16GB", Volta, true),
    (0x1db2, "Tesla V100 DGXS 16GB", Volta, true),
    (0x1db3, "Tesla V100 FHHL 16GB", Volta, true),
    (0x1db4, "Tesla V100 PCIe 16GB", Volta, true),
    (0x1db5, "Tesla V100 SXM2 32GB", Volta, true),
    (0x1db6, "Tesla V100 PCIe 32GB", Volta, true),
    (0x1db7, "Tesla V100 DGXS 32GB", Volta, true),
    (0x1db8, "Tesla V100 SXM3 32GB", Volta, true),
    (0x1df5, "Tesla V100 SXM2 16GB", Volta, true),
    (0x1df6, "Tesla V100S PCIe 32GB", Volta, true),
    // Turing.
    (0x1e30, "Quadro RTX 6000/8000", Turing, true),
    (0x1e37, "Tesla T10", Turing, true),
    (0x1eb8, "Tesla T4", Turing, true),
    // Ampere (GA100, GA102, GA107).
    (0x20b0, "A100 SXM4 40GB", Ampere, true),
    (0x20b1, "A100 PCIe 40GB", Ampere, true),
    (0x20b2, "A100 SXM4 80GB", Ampere, true),
    (0x20b3, "A100 SXM 64GB", Ampere, true),
    (0x20b5, "A100 PCIe 80GB", Ampere, true),
    (0x20b7, "A30", Ampere, true),
    (0x20b8, "A100X", Ampere, true),
    (0x20b9, "A30X", Ampere, true),
    (0x20bd, "A800 SXM4 40GB", Ampere, true),
    (0x20f1, "A100 PCIe 40GB", Ampere, true),
    (0x20f3, "A800 SXM4 80GB", Ampere, true),
    (0x20f5, "A800 80GB PCIe", Ampere, true),
    (0x20f6, "A800 40GB PCIe", Ampere, true),
    (0x2230, "RTX A6000", Ampere, true),
    (0x2235, "A40", Ampere, true),
    (0x2236, "A10", Ampere, true),
    (0x2237, "A10G", Ampere, true),
    (0x25b6, "A2/A16", Ampere, true),
    // Ada Lovelace (AD102, AD104).
    (0x26b1, "RTX 6000 Ada Generation", Ada, true),
    (0x26b5, "L40", Ada, true),
    (0x26b7, "L20", Ada, true),
    (0x26b8, "L40G", Ada, true),
    (0x26b9, "L40S", Ada, true),
    (0x26ba, "L20", Ada, true),
    (0x27b6, "L2", Ada, true),
    (0x27b8, "L4", Ada, true),
    // Hopper (GH100).
    (0x2313, "H100 CNX", Hopper, true),
    (0x2321, "H100 NVL 94GB", Hopper, true),
    (0x2322, "H800 PCIe", Hopper, true),
    (0x2324, "H800", Hopper, true),
    (0x2330, "H100 SXM5 80GB", Hopper, true),
    (0x2331, "H100 PCIe", Hopper, true),
    (0x2335, "H200 SXM 141GB", Hopper, true),
    (0x2336, "H100", Hopper, true),
    (0x2337, "H100 SXM5 64GB", Hopper, true),
    (0x2338, "H100 SXM5 96GB", Hopper, true),
    (0x2339, "H100 SXM5 94GB", Hopper, true),
    (0x233a, "H800L 94GB", Hopper, true),
    (0x233b, "H200 NVL", Hopper, true),
    (0x233d, "H100 96GB", Hopper, true),
    (0x2342, "GH200 120GB/480GB", Hopper, true),
    (0x2348, "GH200 144GB HBM3e", Hopper, true),
    // Blackwell (GB100, GB102, GB110, GB202, GB20B).
    (0x2901, "B200", Blackwell, true),
    (0x2909, "HGX B200 168GB", Blackwell, true),
    (0x2920, "B100", Blackwell, true),
    (0x2941, "HGX GB200", Blackwell, true),
    (0x29bc, "B100", Blackwell, true),
    (
        0x2bb5,
        "RTX PRO 6000 Blackwell Server Edition",
        Blackwell,
        true,
    ),
    (0x3182, "B300 SXM6", Blackwell, true),
    (0x31c2, "GB300", Blackwell, true),
    (0x31c3, "GB300", Blackwell, true),
    // DGX Spark: the GPU shares LPDDR5X with the CPU behind the SoC; PCIe peers cannot reach it.
    (0x2e12, "GB10", Blackwell, false),
];

pub fn gpu_model(device_id: u16) -> GpuModel {
    match GPUS.iter().find(|(id, ..)| *id == device_id) {
        Some((_, name, arch, gdr)) => GpuModel {
            name: name.to_string(),
            arch: *arch,
            gdr: *gdr,
            known: true,
        },
        None => GpuModel {
            name: format!("NVIDIA GPU 10de:{device_id:04x}"),
            arch: Arch::Unknown,
            gdr: true,
            known: false,
        },
    }
}

/// A model given on the command line (`--declare-gpu BDF=MODEL`): a table entry if the name matches
/// one ("H100 PCIe", "gb10"), else a stand-in that can do GPUDirect RDMA.
pub fn declared_model(name: &str) -> GpuModel {
    let wanted = name.trim().to_ascii_lowercase();
    let found = GPUS
        .iter()
        .find(|(_, n, ..)| n.to_ascii_lowercase() == wanted)
        .or_else(|| {
            GPUS.iter()
                .find(|(_, n, ..)| n.to_ascii_lowercase().contains(&wanted))
        });
    match found {
        Some((_, n, arch, gdr)) if !wanted.is_empty() && wanted != "stand-in" => GpuModel {
            name: n.to_string(),
            arch: *arch,
            gdr: *gdr,
            known: true,
        },
        _ => GpuModel {
            name: if wanted.is_empty() {
                "stand-in".into()
            } else {
                name.trim().to_string()
            },
            arch: Arch::StandIn,
            gdr: true,
            known: true,
        },
    }
}

/// Product names of Mellanox/NVIDIA RDMA NICs (vendor 15b3, pci.ids).
pub fn nic_name(vendor: u16, device: u16) -> Option<&'static str> {
    if vendor != 0x15b3 {
        return None;
    }
    Some(match device {
        0x1013 => "ConnectX-4",
        0x1015 => "ConnectX-4 Lx",
        0x1017 => "ConnectX-5",
        0x1019 => "ConnectX-5 Ex",
        0x101b => "ConnectX-6",
        0x101d => "ConnectX-6 Dx",
        0x101f => "ConnectX-6 Lx",
        0x1021 => "ConnectX-7",
        0x1023 => "ConnectX-8",
        0xa2d6 => "BlueField-2",
        0xa2dc => "BlueField-3",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_question() {
        let answer = |id| gpu_model(id).support();
        // GB10 cannot; V100 can on the proprietary driver only; H100 with either; unknown: maybe.
        assert_eq!(answer(0x2e12).0, Support::No);
        let (v100, how) = answer(0x1db6);
        assert_eq!(v100, Support::Yes);
        assert!(how.contains("proprietary") && how.contains("nvidia-peermem"));
        let (h100, how) = answer(0x2330);
        assert_eq!(h100, Support::Yes);
        assert!(how.contains("either"));
        assert_eq!(answer(0xffff).0, Support::Unknown);
    }

    #[test]
    fn required_models_are_in_the_table() {
        for (id, name, arch) in [
            (0x1028, "Tesla K20m", Kepler),
            (0x1023, "Tesla K40m", Kepler),
            (0x102d, "Tesla K80", Kepler),
            (0x15f8, "Tesla P100 PCIe 16GB", Pascal),
            (0x1db4, "Tesla V100 PCIe 16GB", Volta),
            (0x1eb8, "Tesla T4", Turing),
            (0x20b2, "A100 SXM4 80GB", Ampere),
            (0x20b7, "A30", Ampere),
            (0x2236, "A10", Ampere),
            (0x27b8, "L4", Ada),
            (0x26b5, "L40", Ada),
            (0x26b9, "L40S", Ada),
            (0x2330, "H100 SXM5 80GB", Hopper),
            (0x2331, "H100 PCIe", Hopper),
            (0x2335, "H200 SXM 141GB", Hopper),
            (0x2901, "B200", Blackwell),
            (0x2e12, "GB10", Blackwell),
        ] {
            let m = gpu_model(id);
            assert_eq!(
                (m.name.as_str(), m.arch, m.known),
                (name, arch, true),
                "{id:04x}"
            );
        }
        assert!(!gpu_model(0x2e12).gdr, "GB10 has no GPUDirect RDMA");
        assert!(gpu_model(0x2330).gdr);
    }

    #[test]
    fn ids_are_unique() {
        for (i, a) in GPUS.iter().enumerate() {
            assert!(
                GPUS[i + 1..].iter().all(|b| b.0 != a.0),
                "{:04x} twice",
                a.0
            );
        }
    }

    #[test]
    fn unknown_and_declared_models() {
        let m = gpu_model(0x2684);
        assert!(!m.known);
        assert_eq!(m.arch, Arch::Unknown);
        assert_eq!(declared_model("stand-in").arch, Arch::StandIn);
        assert_eq!(declared_model("").name, "stand-in");
        assert!(!declared_model("gb10").gdr);
        assert_eq!(declared_model("H100 PCIe").arch, Arch::Hopper);
        assert_eq!(declared_model("my card").arch, Arch::StandIn);
    }

    #[test]
    fn open_modules_cover_turing_and_newer() {
        assert_eq!(Arch::Volta.open_modules_support(), Some(false));
        assert_eq!(Arch::Turing.open_modules_support(), Some(true));
        assert_eq!(Arch::Unknown.open_modules_support(), None);
    }
}
