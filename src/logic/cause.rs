// SPDX-License-Identifier: GPL-2.0

//! Why peermem-rs refused something: the causes it explains in the kernel log and counts.
//!
//! Every refusal maps to one cause, with a fixed name (the statistics key) and a sentence that says
//! what happened and what to do. nvidia-peermem answers most of these with a bare errno, or not at
//! all; an operator reading `dmesg` should not need the source to understand an EFAULT.

use crate::logic::errno::Errno;

/// A cause of refusal. The discriminants index the per-cause counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// The range is empty, wraps around the address space, or is larger than a page table counts.
    BadRange,
    /// The NVIDIA driver does not know the range as GPU memory of the calling process (EINVAL).
    NotGpuMemory,
    /// The GPU's BAR1 aperture is full (ENOMEM from the driver).
    Bar1Exhausted,
    /// The driver refuses peer DMA between this GPU and this NIC (ENOTSUPP from dma_map_pages).
    TopologyUnsupported,
    /// The driver returned a page table or DMA mapping of a version or shape we do not understand.
    UnknownLayout,
    /// The host's dma_device is not a PCI device, so the driver cannot map for it.
    NotPciDevice,
    /// The memory was freed (cudaFree, process exit) while it was being registered.
    FreedWhileRegistering,
    /// The host called us out of the protocol's order.
    HostProtocol,
    /// We ran out of kernel memory.
    OutOfMemory,
    /// Any other error from the NVIDIA driver.
    DriverError,
    /// peermem-rs is being unloaded (rmmod in progress): no new registration can take a module
    /// reference.
    Unloading,
    /// Module init has not finished (its clients are still being registered with the host): a
    /// registration racing module load.
    NotReady,
    /// The driver refuses persistent pins of this GPU's memory (ENOTSUPP from
    /// get_pages_persistent): MIG, vGPU or PPC64LE before 555, APM on every driver, and on 555+
    /// a few configurations of their own (a vGPU profile without GPUDirect RDMA, for one).
    PersistentPinsUnsupported,
    /// The driver reported a DMA mapping as made with a page of it not mapped (its address is
    /// `DMA_MAPPING_ERROR`): drivers up to 580 go on after a failed page.
    PartialDmaMapping,
}

impl Cause {
    /// Every cause, in counter order.
    pub const ALL: [Cause; 14] = [
        Cause::BadRange,
        Cause::NotGpuMemory,
        Cause::Bar1Exhausted,
        Cause::TopologyUnsupported,
        Cause::UnknownLayout,
        Cause::NotPciDevice,
        Cause::FreedWhileRegistering,
        Cause::HostProtocol,
        Cause::OutOfMemory,
        Cause::DriverError,
        Cause::Unloading,
        Cause::NotReady,
        Cause::PersistentPinsUnsupported,
        Cause::PartialDmaMapping,
    ];
    /// Number of causes.
    pub const COUNT: usize = Self::ALL.len();

    /// Index into per-cause counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The statistics key.
    pub fn name(self) -> &'static str {
        match self {
            Cause::BadRange => "bad_range",
            Cause::NotGpuMemory => "not_gpu_memory",
            Cause::Bar1Exhausted => "bar1_exhausted",
            Cause::TopologyUnsupported => "topology_unsupported",
            Cause::UnknownLayout => "unknown_layout",
            Cause::NotPciDevice => "not_pci_device",
            Cause::FreedWhileRegistering => "freed_while_registering",
            Cause::HostProtocol => "host_protocol",
            Cause::OutOfMemory => "out_of_memory",
            Cause::DriverError => "driver_error",
            Cause::Unloading => "unloading",
            Cause::NotReady => "not_ready",
            Cause::PersistentPinsUnsupported => "persistent_pins_unsupported",
            Cause::PartialDmaMapping => "partial_dma_mapping",
        }
    }

    /// What happened and what to do, for the kernel log.
    pub fn explain(self) -> &'static str {
        match self {
            Cause::BadRange => "the range is empty, wraps around, or is too large for a GPU page table",
            Cause::NotGpuMemory => {
                "not GPU memory of the registering process (a host pointer, freed memory, or memory \
                 of another process: register from the process that allocated it)"
            }
            Cause::Bar1Exhausted => {
                "the GPU's BAR1 aperture is full: deregister memory, register smaller buffers, or use a \
                 GPU/VBIOS with a larger BAR1 (see nvidia-smi -q -d MEMORY)"
            }
            Cause::TopologyUnsupported => {
                "the NVIDIA driver refuses peer-to-peer DMA between this GPU and this NIC: put them \
                 under one PCIe switch (nvidia-smi topo -m), or see NVreg_GrdmaPciTopoCheckOverride"
            }
            Cause::UnknownLayout => {
                "the NVIDIA driver returned a page table or DMA mapping this peermem-rs does not \
                 understand: rebuild peermem-rs against this driver's nv-p2p.h"
            }
            Cause::NotPciDevice => "the RDMA device is not a PCI device, the NVIDIA driver can only map for PCI peers",
            Cause::FreedWhileRegistering => "the GPU memory was freed while it was being registered",
            Cause::HostProtocol => "the peer-memory host called out of order (a bug in the host)",
            Cause::OutOfMemory => "out of kernel memory",
            Cause::DriverError => "the NVIDIA driver failed",
            Cause::Unloading => {
                "peermem-rs is being unloaded (rmmod in progress): load it again to register GPU memory"
            }
            Cause::NotReady => {
                "peermem-rs is still loading (registering its clients with the peer-memory host): \
                 retry in a moment; should the load fail, the log says why"
            }
            Cause::PersistentPinsUnsupported => {
                "the NVIDIA driver refuses persistent pins of this memory, and peermem-rs maps only \
                 persistent pins: drivers before 555 refuse them on MIG-enabled GPUs, in vGPU \
                 guests and on PPC64LE (there use driver 555 or later, NVIDIA's nvidia-peermem, or \
                 DMA-BUF: ibv_reg_dmabuf_mr); every driver refuses them with APM, and newer ones \
                 for a vGPU profile without GPUDirect RDMA"
            }
            Cause::PartialDmaMapping => {
                "the NVIDIA driver reported the DMA mapping made, but a page of it failed to map and \
                 the pages before it were unmapped (drivers up to 580 go on after a failed page; an \
                 IOMMU out of mapping space?): refused rather than hand the NIC unmapped addresses; \
                 driver 590 or later reports the failure itself"
            }
        }
    }

    /// The cause of an errno returned by the NVIDIA driver's pin call (get_pages).
    pub fn of_pin_errno(errno: Errno) -> Cause {
        match errno {
            Errno::EINVAL => Cause::NotGpuMemory,
            Errno::ENOMEM => Cause::Bar1Exhausted,
            _ => Cause::DriverError,
        }
    }

    /// The cause of an errno returned by the NVIDIA driver's persistent pin
    /// (get_pages_persistent): its ENOTSUPP is the refusal of persistent pins on this GPU (550
    /// p2p.c `RmP2PGetGpuByAddress`; peermem-rs passes no flag that could be refused).
    pub fn of_persistent_pin_errno(errno: Errno) -> Cause {
        match errno {
            Errno::ENOTSUPP | Errno::EOPNOTSUPP => Cause::PersistentPinsUnsupported,
            _ => Cause::of_pin_errno(errno),
        }
    }

    /// The cause of an errno returned by the NVIDIA driver's dma_map_pages.
    pub fn of_map_errno(errno: Errno) -> Cause {
        match errno {
            Errno::ENOTSUPP | Errno::EOPNOTSUPP => Cause::TopologyUnsupported,
            Errno::ENOMEM => Cause::OutOfMemory,
            _ => Cause::DriverError,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_dense_and_names_unique() {
        for (i, c) in Cause::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
            assert!(!c.explain().is_empty());
            for d in &Cause::ALL[i + 1..] {
                assert_ne!(c.name(), d.name());
            }
        }
    }

    #[test]
    fn errnos_map_to_causes() {
        assert_eq!(Cause::of_pin_errno(Errno::EINVAL), Cause::NotGpuMemory);
        assert_eq!(Cause::of_pin_errno(Errno::ENOMEM), Cause::Bar1Exhausted);
        assert_eq!(Cause::of_pin_errno(Errno::EIO), Cause::DriverError);
        assert_eq!(
            Cause::of_persistent_pin_errno(Errno::ENOTSUPP),
            Cause::PersistentPinsUnsupported
        );
        assert_eq!(
            Cause::of_persistent_pin_errno(Errno::ENOMEM),
            Cause::Bar1Exhausted
        );
        assert_eq!(Cause::of_pin_errno(Errno::ENOTSUPP), Cause::DriverError);
        assert_eq!(
            Cause::of_map_errno(Errno::ENOTSUPP),
            Cause::TopologyUnsupported
        );
    }
}
