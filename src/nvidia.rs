// SPDX-License-Identifier: GPL-2.0

//! Thin wrappers of the NVIDIA P2P API (`nv-p2p.h`).
//!
//! The driver hands out page tables and DMA mappings that it may free on its own (from a free
//! callback, on another task). So the handles here are plain pointer values: copying or passing one
//! to the driver is safe; reading through one is `unsafe` and allowed only while the caller knows
//! the driver has not torn it down (the registration state machine says so, under its lock).

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;

use crate::logic::range::GpuRange;
use crate::logic::tables::{DmaMappingHeader, PageTableHeader};
use crate::sys;

/// The driver's callback type: called with our `data` when the pinned memory goes away.
pub(crate) type FreeCallback = unsafe extern "C" fn(data: *mut c_void);

/// A page table the driver returned from a pin.
///
/// # Invariants
///
/// Points to a page table the driver handed out, which may since have been freed by the driver;
/// the pointer is never null.
#[derive(Clone, Copy)]
pub(crate) struct PageTable(NonNull<sys::nvidia_p2p_page_table>);

// SAFETY: a page table is a plain value shared with the driver; peermem-rs reads it only under the
// registration lock while the driver still owns it alive, from whatever task holds that lock.
unsafe impl Send for PageTable {}

/// A DMA mapping of a page table for one peer device.
///
/// # Invariants
///
/// Points to a mapping the driver handed out, which may since have been freed by the driver; never
/// null.
#[derive(Clone, Copy)]
pub(crate) struct DmaMapping(NonNull<sys::nvidia_p2p_dma_mapping>);

// SAFETY: as for `PageTable`.
unsafe impl Send for DmaMapping {}

/// A PCI device the NIC's DMA goes through.
///
/// # Invariants
///
/// Points to a live `struct pci_dev` for as long as the registration that holds it is mapped: the
/// peer-memory host keeps its device alive while memory is registered for it.
#[derive(Clone, Copy)]
pub(crate) struct PeerDevice(NonNull<bindings::pci_dev>);

// SAFETY: a `struct pci_dev` pointer may be used from any task; we only pass it to the driver.
unsafe impl Send for PeerDevice {}

impl PeerDevice {
    /// The PCI device behind the host's `dma_device`, or `None` when it is not a PCI device.
    ///
    /// # Safety
    ///
    /// `dev` must be null or point to a live `struct device`.
    pub(crate) unsafe fn from_device(dev: *mut bindings::device) -> Option<Self> {
        if dev.is_null() {
            return None;
        }
        // SAFETY: `dev` is a live device (caller's contract); `dev_is_pci` only reads its bus.
        if !unsafe { bindings::dev_is_pci(dev) } {
            return None;
        }
        // SAFETY: a PCI device's `struct device` is the `dev` field of its `struct pci_dev`, so the
        // containing structure is in bounds of the same allocation.
        let pdev = unsafe { kernel::container_of!(dev, bindings::pci_dev, dev) };
        NonNull::new(pdev).map(Self)
    }

    fn as_ptr(self) -> *mut bindings::pci_dev {
        self.0.as_ptr()
    }
}

fn check(rc: i32) -> Result {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::from_errno(rc))
    }
}

/// Runs a pin call with an out-pointer for the page table, and checks what it returned.
fn pin_with(call: impl FnOnce(*mut *mut sys::nvidia_p2p_page_table) -> i32) -> Result<PageTable> {
    let mut table: *mut sys::nvidia_p2p_page_table = core::ptr::null_mut();
    check(call(&mut table))?;
    NonNull::new(table).map(PageTable).ok_or(EIO)
}

/// Pins `range` of the calling process's GPU memory. The driver calls `callback(data)` if the
/// memory goes away while pinned.
///
/// # Safety
///
/// `data` must stay valid for `callback` until the pin is released with [`put_pages`] returning
/// `Ok`, or until `callback` has run.
pub(crate) unsafe fn get_pages(
    range: GpuRange,
    callback: FreeCallback,
    data: *mut c_void,
) -> Result<PageTable> {
    pin_with(|out| {
        // SAFETY: `out` is valid for the call; the callback contract is the caller's.
        unsafe {
            sys::nvidia_p2p_get_pages(0, 0, range.start(), range.len(), out, Some(callback), data)
        }
    })
}

/// Pins `range` without a free callback: the memory outlives cudaFree until unpinned.
pub(crate) fn get_pages_persistent(range: GpuRange) -> Result<PageTable> {
    pin_with(|out| {
        #[cfg(peermem_persistent_api)]
        let rc = {
            // SAFETY: `out` is valid for the call.
            unsafe { sys::nvidia_p2p_get_pages_persistent(range.start(), range.len(), out, 0) }
        };
        // Without the persistent API (drivers before 535), a persistent pin is a pin with no
        // callback, and so no `data` to keep alive.
        #[cfg(not(peermem_persistent_api))]
        // SAFETY: `out` is valid for the call.
        let rc = unsafe {
            sys::nvidia_p2p_get_pages(
                0,
                0,
                range.start(),
                range.len(),
                out,
                None,
                core::ptr::null_mut(),
            )
        };
        rc
    })
}

/// Unpins a non-persistent pin. The driver answers 0 also for a table it already tore down.
pub(crate) fn put_pages(range: GpuRange, table: PageTable) -> Result {
    // SAFETY: the driver looks the table up by value among its live pins and does not dereference a
    // table it no longer knows; passing a stale value is part of its documented contract.
    check(unsafe { sys::nvidia_p2p_put_pages(0, 0, range.start(), table.0.as_ptr()) })
}

/// Unpins a persistent pin.
pub(crate) fn put_pages_persistent(range: GpuRange, table: PageTable) -> Result {
    #[cfg(peermem_persistent_api)]
    // SAFETY: persistent tables are never torn down by the driver, so `table` is live.
    let rc = unsafe { sys::nvidia_p2p_put_pages_persistent(range.start(), table.0.as_ptr(), 0) };
    #[cfg(not(peermem_persistent_api))]
    // SAFETY: as for `put_pages`.
    let rc = unsafe { sys::nvidia_p2p_put_pages(0, 0, range.start(), table.0.as_ptr()) };
    check(rc)
}

/// Maps a pinned table's pages for DMA by `peer`.
pub(crate) fn dma_map_pages(peer: PeerDevice, table: PageTable) -> Result<DmaMapping> {
    let mut mapping: *mut sys::nvidia_p2p_dma_mapping = core::ptr::null_mut();
    // SAFETY: `peer` is a live PCI device (type invariant); the driver validates `table` among its
    // pins; the out-pointer is valid for the call.
    let rc =
        unsafe { sys::nvidia_p2p_dma_map_pages(peer.as_ptr(), table.0.as_ptr(), &mut mapping) };
    check(rc)?;
    NonNull::new(mapping).map(DmaMapping).ok_or(EIO)
}

/// Unmaps a mapping made by [`dma_map_pages`]. Always succeeds from our side; the driver ignores a
/// mapping it already tore down.
pub(crate) fn dma_unmap_pages(peer: PeerDevice, table: PageTable, mapping: DmaMapping) {
    // SAFETY: `peer` is the device the mapping was made for; the driver looks `mapping` up among
    // the table's live mappings. Its return value is always 0.
    let _ = unsafe {
        sys::nvidia_p2p_dma_unmap_pages(peer.as_ptr(), table.0.as_ptr(), mapping.0.as_ptr())
    };
}

impl PageTable {
    /// The header fields peermem-rs checks.
    ///
    /// # Safety
    ///
    /// The driver must not have torn the table down, and must not be able to while this runs (the
    /// caller holds the registration lock with the state machine saying the table is alive).
    pub(crate) unsafe fn header(self) -> PageTableHeader {
        // SAFETY: the table is alive (caller's contract); these fields are plain integers present in
        // every layout (1.x and 2.x share their prefix).
        let t = unsafe { self.0.as_ref() };
        PageTableHeader {
            version: t.version,
            page_size: t.page_size,
            entries: t.entries,
        }
    }
}

impl DmaMapping {
    /// The header fields peermem-rs checks.
    ///
    /// # Safety
    ///
    /// As for [`PageTable::header`], for the mapping.
    pub(crate) unsafe fn header(self) -> DmaMappingHeader {
        // SAFETY: the mapping is alive (caller's contract).
        let m = unsafe { self.0.as_ref() };
        DmaMappingHeader {
            version: m.version,
            page_size_type: m.page_size_type,
            entries: m.entries,
        }
    }

    /// The DMA address of GPU page `i`, or `None` past the end.
    ///
    /// # Safety
    ///
    /// As for [`PageTable::header`], for the mapping.
    pub(crate) unsafe fn dma_address(self, i: u32) -> Option<u64> {
        // SAFETY: the mapping is alive (caller's contract).
        let m = unsafe { self.0.as_ref() };
        if i >= m.entries || m.dma_addresses.is_null() {
            return None;
        }
        // SAFETY: `dma_addresses` holds `entries` addresses and `i < entries`.
        Some(unsafe { *m.dma_addresses.add(i as usize) })
    }
}
