// SPDX-License-Identifier: GPL-2.0
//! PCI functions as sysfs shows them: identity, place in the PCIe tree, BARs, link, and the ACS
//! extended capability of bridges (read from the `config` file).

use crate::sysfs::Fs;

pub const PCI_DEVICES: &str = "/sys/bus/pci/devices";

#[derive(Clone, Debug)]
pub struct PciDev {
    pub bdf: String,
    /// Where sysfs keeps it, e.g. "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0".
    pub path: String,
    /// The host bridge ("pci0000:00") the device hangs below.
    pub host_bridge: String,
    /// Functions from the root bus down to the device itself (root port, switch ports, device).
    pub chain: Vec<String>,
    pub vendor: u16,
    pub device: u16,
    pub class: u32,
    pub numa_node: Option<u32>,
    pub driver: Option<String>,
    pub iommu_group: Option<String>,
    pub link: LinkState,
}

#[derive(Clone, Debug, Default)]
pub struct LinkState {
    pub speed: Option<String>,
    pub width: Option<u32>,
    pub max_speed: Option<String>,
    pub max_width: Option<u32>,
}

impl PciDev {
    pub fn id(&self) -> String {
        format!("{:04x}:{:04x}", self.vendor, self.device)
    }

    pub fn is_display(&self) -> bool {
        self.class >> 16 == 0x03
    }
}

/// "0000:03:00.0" (also 5-digit VMD domains).
pub fn is_bdf(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 3 {
        return false;
    }
    let (dom, bus, devfn) = (parts[0], parts[1], parts[2]);
    let hex = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_hexdigit());
    let Some((dev, func)) = devfn.split_once('.') else {
        return false;
    };
    dom.len() >= 4
        && hex(dom)
        && bus.len() == 2
        && hex(bus)
        && dev.len() == 2
        && hex(dev)
        && func.len() == 1
        && hex(func)
}

/// Host bridge and BDF chain of a resolved sysfs device path.
pub fn parse_device_path(path: &str) -> Option<(String, Vec<String>)> {
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let hb = comps
        .iter()
        .position(|c| c.starts_with("pci") && c.contains(':'))?;
    let chain: Vec<String> = comps[hb + 1..]
        .iter()
        .filter(|c| is_bdf(c))
        .map(|c| c.to_string())
        .collect();
    if chain.is_empty() {
        return None;
    }
    Some((comps[hb].to_string(), chain))
}

/// One PCI function by its BDF, or None if sysfs has no such function.
pub fn read_device(fs: &Fs, bdf: &str) -> Option<PciDev> {
    let dir = format!("{PCI_DEVICES}/{bdf}");
    let path = fs.resolve(&dir)?;
    let (host_bridge, chain) = parse_device_path(&path)?;
    let numa_node = fs
        .read(&format!("{dir}/numa_node"))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0)
        .map(|n| n as u32);
    let width = |f: &str| {
        fs.read(&format!("{dir}/{f}"))
            .and_then(|s| s.parse::<u32>().ok())
    };
    Some(PciDev {
        bdf: bdf.to_string(),
        path,
        host_bridge,
        chain,
        vendor: fs.read_hex(&format!("{dir}/vendor")).unwrap_or(0xffff) as u16,
        device: fs.read_hex(&format!("{dir}/device")).unwrap_or(0xffff) as u16,
        class: fs.read_hex(&format!("{dir}/class")).unwrap_or(0) as u32,
        numa_node,
        driver: fs.link_name(&format!("{dir}/driver")),
        iommu_group: fs.link_name(&format!("{dir}/iommu_group")),
        link: LinkState {
            speed: fs.read(&format!("{dir}/current_link_speed")),
            width: width("current_link_width"),
            max_speed: fs.read(&format!("{dir}/max_link_speed")),
            max_width: width("max_link_width"),
        },
    })
}

/// Every PCI function, in BDF order.
pub fn all_devices(fs: &Fs) -> Vec<PciDev> {
    fs.list(PCI_DEVICES)
        .iter()
        .filter_map(|bdf| read_device(fs, bdf))
        .collect()
}

// --- BARs -------------------------------------------------------------------------------------

// Resource flags of include/linux/ioport.h, as the `resource` file prints them.
const IORESOURCE_MEM: u64 = 0x0000_0200;
const IORESOURCE_PREFETCH: u64 = 0x0000_2000;
const IORESOURCE_MEM_64: u64 = 0x0010_0000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bar {
    pub index: usize,
    pub start: u64,
    pub size: u64,
}

/// The GPU's "BAR1" (the aperture through which peers reach GPU memory): the largest 64-bit
/// prefetchable memory BAR among the six standard ones. `resource` has one line per resource,
/// "start end flags" in hex; lines 0-5 are the BARs (a 64-bit BAR leaves the next line empty).
pub fn gpu_aperture(resource: &str) -> Option<Bar> {
    resource
        .lines()
        .take(6)
        .enumerate()
        .filter_map(|(index, line)| {
            let f: Vec<u64> = line
                .split_whitespace()
                .filter_map(crate::sysfs::parse_hex)
                .collect();
            let (start, end, flags) = (*f.first()?, *f.get(1)?, *f.get(2)?);
            let wanted = IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64;
            (flags & wanted == wanted && end > start).then_some(Bar {
                index,
                start,
                size: end - start + 1,
            })
        })
        .max_by_key(|b| (b.size, std::cmp::Reverse(b.index)))
}

// --- ACS --------------------------------------------------------------------------------------

/// Extended capability ID of Access Control Services (PCIe base spec, PCI_EXT_CAP_ID_ACS).
const EXT_CAP_ID_ACS: u16 = 0x000d;
/// Bits of the ACS Capability and Control registers (PCI_ACS_* in include/uapi/linux/pci_regs.h),
/// with the names lspci prints.
pub const ACS_BITS: [(u16, &str); 7] = [
    (0x0001, "SrcValid"),
    (0x0002, "TransBlk"),
    (0x0004, "ReqRedir"),
    (0x0008, "CmpltRedir"),
    (0x0010, "UpstreamFwd"),
    (0x0020, "EgressCtrl"),
    (0x0040, "DirectTrans"),
];
pub const ACS_SV: u16 = 0x0001;
/// The controls that send peer-to-peer traffic up to the root complex or block it.
pub const ACS_REDIRECTS: u16 = 0x0004 | 0x0008 | 0x0020;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acs {
    /// Only the first 64 bytes of config space were readable: sysfs gives the rest to root only.
    Unreadable,
    /// No extended config space, or no ACS capability in it.
    Absent,
    Present {
        offset: u16,
        cap: u16,
        ctrl: u16,
    },
}

/// Finds the ACS capability in a function's config space (as read from sysfs `config`).
pub fn parse_acs(config: &[u8]) -> Acs {
    if config.len() <= 64 {
        return Acs::Unreadable;
    }
    let dword = |off: usize| -> Option<u32> {
        config
            .get(off..off + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let mut offset = 0x100usize;
    // Extended capabilities are at least 4 bytes apart in 4 KiB: bound the walk against loops.
    for _ in 0..(4096 - 0x100) / 4 {
        let Some(header) = dword(offset) else {
            return Acs::Absent;
        };
        if header == 0 || header == 0xffff_ffff {
            return Acs::Absent;
        }
        if header & 0xffff == EXT_CAP_ID_ACS as u32 {
            return match (dword(offset + 4), offset + 8 <= config.len()) {
                (Some(regs), true) => Acs::Present {
                    offset: offset as u16,
                    cap: (regs & 0xffff) as u16,
                    ctrl: (regs >> 16) as u16,
                },
                _ => Acs::Absent,
            };
        }
        let next = ((header >> 20) & 0xffc) as usize;
        if next < 0x100 || next <= offset {
            return Acs::Absent;
        }
        offset = next;
    }
    Acs::Absent
}

pub fn read_acs(fs: &Fs, bdf: &str) -> Acs {
    match fs.read_bytes(&format!("{PCI_DEVICES}/{bdf}/config")) {
        Ok(bytes) => parse_acs(&bytes),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Acs::Unreadable,
        Err(_) => Acs::Absent,
    }
}

/// "SrcValid+ ReqRedir+ CmpltRedir+" for the set bits of an ACS register.
pub fn acs_names(bits: u16) -> String {
    ACS_BITS
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| format!("{n}+"))
        .collect::<Vec<_>>()
        .join(" ")
}

// --- topology ---------------------------------------------------------------------------------

/// How a GPU and a NIC are connected, in the terms of `nvidia-smi topo -m`, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Link {
    /// At most one PCIe bridge (one switch) between them.
    Pix,
    /// Several PCIe bridges (switches), without crossing the host bridge.
    Pxb,
    /// Through the PCIe host bridge (the CPU's root complex).
    Phb,
    /// Across PCIe host bridges within one NUMA node.
    Node,
    /// Across NUMA nodes (the CPU socket interconnect).
    Sys,
}

impl Link {
    pub fn code(self) -> &'static str {
        match self {
            Link::Pix => "PIX",
            Link::Pxb => "PXB",
            Link::Phb => "PHB",
            Link::Node => "NODE",
            Link::Sys => "SYS",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Link::Pix => "are under one PCIe switch",
            Link::Pxb => "are under several PCIe switches below one root port",
            Link::Phb => "only meet at the PCIe host bridge (CPU root complex)",
            Link::Node => "are on different PCIe host bridges of one NUMA node",
            Link::Sys => "are on different NUMA nodes (CPU socket interconnect)",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathInfo {
    pub link: Link,
    /// The bridges peer-to-peer traffic passes below the common upstream port; only for paths
    /// that stay inside the PCIe fabric (PIX, PXB), since the others go through the CPU anyway.
    pub bridges: Vec<String>,
}

pub fn classify(a: &PciDev, b: &PciDev) -> PathInfo {
    if a.host_bridge != b.host_bridge {
        let link = match (a.numa_node, b.numa_node) {
            (Some(x), Some(y)) if x != y => Link::Sys,
            _ => Link::Node,
        };
        return PathInfo {
            link,
            bridges: Vec::new(),
        };
    }
    let up_a = &a.chain[..a.chain.len() - 1];
    let up_b = &b.chain[..b.chain.len() - 1];
    let common = up_a.iter().zip(up_b).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return PathInfo {
            link: Link::Phb,
            bridges: Vec::new(),
        };
    }
    let (below_a, below_b) = (&up_a[common..], &up_b[common..]);
    let link = if below_a.len() <= 1 && below_b.len() <= 1 {
        Link::Pix
    } else {
        Link::Pxb
    };
    PathInfo {
        link,
        bridges: below_a.iter().chain(below_b).cloned().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(path: &str, numa: Option<u32>) -> PciDev {
        let (host_bridge, chain) = parse_device_path(path).unwrap();
        PciDev {
            bdf: chain.last().unwrap().clone(),
            path: path.into(),
            host_bridge,
            chain,
            vendor: 0,
            device: 0,
            class: 0,
            numa_node: numa,
            driver: None,
            iommu_group: None,
            link: LinkState::default(),
        }
    }

    #[test]
    fn bdfs() {
        assert!(is_bdf("0000:03:00.0"));
        assert!(is_bdf("10000:e0:06.0"));
        assert!(!is_bdf("pci0000:00"));
        assert!(!is_bdf("0000:03:00"));
        assert!(!is_bdf("infiniband"));
    }

    #[test]
    fn device_paths() {
        let (hb, chain) = parse_device_path(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0",
        )
        .unwrap();
        assert_eq!(hb, "pci0000:00");
        assert_eq!(
            chain,
            [
                "0000:00:01.0",
                "0000:01:00.0",
                "0000:02:08.0",
                "0000:03:00.0"
            ]
        );
        assert!(parse_device_path("/sys/devices/virtual/net/lo").is_none());
    }

    #[test]
    fn topology_like_nvidia_smi() {
        let sw = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0";
        let gpu = dev(&format!("{sw}/0000:02:08.0/0000:03:00.0"), Some(0));
        let nic = dev(&format!("{sw}/0000:02:10.0/0000:04:00.0"), Some(0));
        assert_eq!(
            classify(&gpu, &nic),
            PathInfo {
                link: Link::Pix,
                bridges: vec!["0000:02:08.0".into(), "0000:02:10.0".into()]
            }
        );
        // Two functions of one device.
        let nic1 = dev(&format!("{sw}/0000:02:10.0/0000:04:00.1"), Some(0));
        assert_eq!(classify(&nic, &nic1).link, Link::Pix);
        // A NIC behind a second-level switch.
        let deep = dev(
            &format!("{sw}/0000:02:0c.0/0000:05:00.0/0000:06:00.0/0000:07:00.0"),
            Some(0),
        );
        let p = classify(&gpu, &deep);
        assert_eq!(p.link, Link::Pxb);
        assert_eq!(
            p.bridges,
            [
                "0000:02:08.0",
                "0000:02:0c.0",
                "0000:05:00.0",
                "0000:06:00.0"
            ]
        );
        // Different root ports of one host bridge.
        let other_rp = dev("/sys/devices/pci0000:00/0000:00:03.0/0000:08:00.0", Some(0));
        assert_eq!(classify(&gpu, &other_rp).link, Link::Phb);
        // Different host bridges: same or different NUMA node.
        let hb_same = dev("/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", Some(0));
        assert_eq!(classify(&gpu, &hb_same).link, Link::Node);
        let hb_far = dev("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", Some(1));
        assert_eq!(classify(&gpu, &hb_far).link, Link::Sys);
        let hb_unknown = dev("/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", None);
        assert_eq!(classify(&gpu, &hb_unknown).link, Link::Node);
    }

    #[test]
    fn aperture_is_the_largest_64bit_prefetchable_bar() {
        // An H100: BAR0 16 MiB 32-bit, BAR1 128 GiB 64-bit prefetchable, BAR3 32 MiB 64-bit prefetchable.
        let resource = "\
0x00000000e2000000 0x00000000e2ffffff 0x0000000000040200
0x0000220000000000 0x0000221fffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000222000000000 0x0000222001ffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000e3000000 0x00000000e307ffff 0x0000000000046200
";
        assert_eq!(
            gpu_aperture(resource),
            Some(Bar {
                index: 1,
                start: 0x2200_0000_0000,
                size: 128 << 30
            })
        );
        // ivshmem-plain (the VM's GPU stand-in): BAR0 registers, BAR2 the 256 MiB memory.
        let ivshmem = "\
0x00000000fe800000 0x00000000fe8000ff 0x0000000000040200
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000380000000 0x000000038fffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
";
        assert_eq!(
            gpu_aperture(ivshmem).map(|b| (b.index, b.size)),
            Some((2, 256 << 20))
        );
        assert_eq!(gpu_aperture("0x0 0x0 0x0\n"), None);
    }

    /// A config space of `len` bytes with AER at 0x100 and ACS at 0x148.
    fn config_with_acs(len: usize, cap: u16, ctrl: u16) -> Vec<u8> {
        let mut c = vec![0u8; len];
        let put =
            |c: &mut Vec<u8>, off: usize, v: u32| c[off..off + 4].copy_from_slice(&v.to_le_bytes());
        put(&mut c, 0x100, 0x0001 | (2 << 16) | (0x148 << 20));
        put(&mut c, 0x148, 0x000d | (1 << 16));
        put(&mut c, 0x14c, cap as u32 | ((ctrl as u32) << 16));
        c
    }

    #[test]
    fn acs_capability_walk() {
        assert_eq!(
            parse_acs(&config_with_acs(4096, 0x5f, 0x1d)),
            Acs::Present {
                offset: 0x148,
                cap: 0x5f,
                ctrl: 0x1d
            }
        );
        assert_eq!(
            parse_acs(&config_with_acs(0x150, 0x5f, 0)),
            Acs::Present {
                offset: 0x148,
                cap: 0x5f,
                ctrl: 0
            },
            "a config space cut right after the capability"
        );
        // What an unprivileged reader gets.
        assert_eq!(
            parse_acs(&config_with_acs(4096, 0x5f, 0x1d)[..64]),
            Acs::Unreadable
        );
        // Conventional config space only.
        assert_eq!(parse_acs(&[0u8; 256]), Acs::Absent);
        // A capability list that loops back on itself ends.
        let mut looping = vec![0u8; 4096];
        looping[0x100..0x104].copy_from_slice(&(0x0001u32 | (0x100 << 20)).to_le_bytes());
        assert_eq!(parse_acs(&looping), Acs::Absent);
        assert_eq!(
            acs_names(0x1d),
            "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
        );
    }
}
