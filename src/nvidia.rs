// SPDX-License-Identifier: GPL-2.0

//! Thin wrappers of the NVIDIA P2P API (`nv-p2p.h`), with what the real driver guarantees, and the
//! `extern "C"` free callback the driver calls ([`FreeCallback`] says what it runs).
//!
//! What peermem-rs relies on, as NVIDIA's open kernel modules implement it (550 to 595; each fact
//! with its versions and source lines in docs/provider-facts.md, by the id in brackets):
//!
//! - A **persistent** pin (`nvidia_p2p_get_pages_persistent`, or before 535 `nvidia_p2p_get_pages`
//!   with no free callback) is never called back and never torn down by the driver: RM duplicates
//!   the memory into its internal client, so freeing the user's memory leaves the pin, its page
//!   table and its DMA mappings alone; only `nvidia_p2p_put_pages_persistent` frees them, and it
//!   finds the pin through the table itself, from any task. So a [`PersistentPin`] and a
//!   [`DmaMapping`] of it are alive for as long as peermem-rs holds them [NV-PERSISTENT].
//! - A **non-persistent** pin is torn down by the driver (cudaFree, process exit, unregistration
//!   from the P2P object): it calls the free callback with its RM API lock held and frees the page
//!   table, its DMA mappings and the semaphore guarding them as soon as the callback returns.
//!   peermem-rs never reads such a table, never maps it and never unpins it: it keeps no pointer to
//!   it at all, and leaves the pin to the driver until its callback [NV-TEARDOWN] (the owner's
//!   put_pages of it would answer 0 also when it unpinned nothing [NV-PUT-PAGES-LOOKUP,
//!   NV-PID-LIST]; `logic::registration`, rule 2).
//! - The driver keeps no reference on the peer `pci_dev` and dereferences it when unmapping, so a
//!   [`PeerDevice`] holds one of ours for as long as a mapping for it exists [NV-NO-PEER-REF].

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::ArcBorrow;

use crate::foreign::ForeignRef;
use crate::kapi;
use crate::logic::range::GpuRange;
use crate::logic::tables::{DmaMappingHeader, PageTableHeader};
use crate::sys;
use crate::timing::{Entry, Step, Timing};

/// What runs when the driver calls back for a pin of [`get_pages`]: the memory is going away
/// (cudaFree, process exit, unregistration from the P2P object). The client implements it, in
/// safe Rust; [`free_callback`] is the C entry point the driver calls.
pub(crate) trait FreeCallback: Send + Sync + Sized {
    /// The driver calls back for `this`'s pin: at most once per pin, in process context, with its
    /// RM API lock held, so this must not call into the driver (locked by this very task). It
    /// must not panic (its caller is C). `t` times its steps (`crate::timing`).
    fn free_callback(this: ArcBorrow<'_, Self>, t: Timing);
}

fn check(rc: i32) -> Result {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::from_errno(rc))
    }
}

/// Runs a pin call with an out-pointer for the page table and checks what it returned. Only the
/// return code says whether a table exists: on failure the driver may leave the out-pointer at
/// memory it has already freed (nv-p2p.c's failure path frees the pin without resetting it).
fn pin_with(
    call: impl FnOnce(*mut *mut sys::nvidia_p2p_page_table) -> i32,
) -> Result<NonNull<sys::nvidia_p2p_page_table>> {
    let mut table: *mut sys::nvidia_p2p_page_table = core::ptr::null_mut();
    check(call(&mut table))?;
    NonNull::new(table).ok_or(EIO)
}

/// A persistent pin and its page table.
///
/// # Invariants
///
/// Points to the page table of a persistent pin peermem-rs took and has not given back: the
/// driver never frees it on its own (see the module documentation), so it is alive and readable
/// for as long as this value exists. Dropping it without [`PersistentPin::put`] leaks the pin.
pub(crate) struct PersistentPin(NonNull<sys::nvidia_p2p_page_table>);

// SAFETY: the pin belongs to no task: the driver finds it through the table from any task, and
// peermem-rs passes it between tasks only under the registration lock.
unsafe impl Send for PersistentPin {}

impl PersistentPin {
    /// Pins `range` of the calling process's GPU memory, with no free callback.
    pub(crate) fn get(range: GpuRange, t: Timing) -> Result<Self> {
        let table = pin_with(|out| {
            #[cfg(peermem_persistent_api)]
            let rc = {
                let _call = t.span(Step::NvGetPagesPersistent);
                // SAFETY: `out` is valid for the call; flags 0 is the default on every driver.
                unsafe { sys::nvidia_p2p_get_pages_persistent(range.start(), range.len(), out, 0) }
            };
            // Before 535 a pin with no callback is persistent: the driver never calls back.
            #[cfg(not(peermem_persistent_api))]
            let rc = {
                let _call = t.span(Step::NvGetPages);
                // SAFETY: `out` is valid for the call; no callback, so no `data` to keep alive.
                unsafe {
                    sys::nvidia_p2p_get_pages(
                        0,
                        0,
                        range.start(),
                        range.len(),
                        out,
                        None,
                        core::ptr::null_mut(),
                    )
                }
            };
            rc
        })?;
        // INVARIANT: just pinned, persistently.
        Ok(Self(table))
    }

    /// Gives the pin back. Works from any task. On an error the driver keeps the pin (it never
    /// calls back for it), and this value is gone either way.
    pub(crate) fn put(self, range: GpuRange, t: Timing) -> Result {
        let table = self.0.as_ptr();
        #[cfg(peermem_persistent_api)]
        let rc = {
            let _call = t.span(Step::NvPutPagesPersistent);
            // SAFETY: by the type invariant the table is alive and ours to give back; it is not
            // used again (`self` is consumed).
            unsafe { sys::nvidia_p2p_put_pages_persistent(range.start(), table, 0) }
        };
        #[cfg(not(peermem_persistent_api))]
        let rc = {
            let _call = t.span(Step::NvPutPages);
            // SAFETY: as above; before 535 a pin with no callback is persistent, and the driver
            // finds it through the table, from any task.
            unsafe { sys::nvidia_p2p_put_pages(0, 0, range.start(), table) }
        };
        check(rc)
    }

    /// The header fields peermem-rs checks.
    pub(crate) fn header(&self) -> PageTableHeader {
        // SAFETY: alive by the type invariant; these fields are plain integers present in every
        // layout (1.x and 2.x share their prefix).
        let t = unsafe { self.0.as_ref() };
        PageTableHeader {
            version: t.version,
            page_size: t.page_size,
            entries: t.entries,
        }
    }

    /// The physical (BAR1) address of GPU page `i`, or `None` past the end.
    pub(crate) fn physical_address(&self, i: u32) -> Option<u64> {
        // SAFETY: alive by the type invariant.
        let t = unsafe { self.0.as_ref() };
        if i >= t.entries || t.pages.is_null() {
            return None;
        }
        // SAFETY: `pages` holds `entries` pointers and `i < entries`; each points to a page entry
        // the driver allocated with the table and frees with it.
        let page = unsafe { *t.pages.add(i as usize) };
        // SAFETY: as above, when not null.
        (!page.is_null()).then(|| unsafe { (*page).physical_address })
    }

    /// Maps the pinned pages for DMA by `peer`.
    pub(crate) fn dma_map(&self, peer: &PeerDevice, t: Timing) -> Result<DmaMapping> {
        let mut mapping: *mut sys::nvidia_p2p_dma_mapping = core::ptr::null_mut();
        let rc = {
            let _call = t.span(Step::NvDmaMapPages);
            // SAFETY: `peer` is a live PCI device (its invariant); the table is alive and will not
            // be torn down under the call (this type's invariant); the out-pointer is valid.
            unsafe { sys::nvidia_p2p_dma_map_pages(peer.as_ptr(), self.0.as_ptr(), &mut mapping) }
        };
        check(rc)?;
        let mapping = NonNull::new(mapping).ok_or(EIO)?;
        // INVARIANT: a mapping of this persistent table, handed out just now.
        Ok(DmaMapping(mapping))
    }

    /// Unmaps `mapping` (made by [`PersistentPin::dma_map`] on this pin for `peer`).
    pub(crate) fn dma_unmap(&self, peer: &PeerDevice, mapping: DmaMapping, t: Timing) {
        let _call = t.span(Step::NvDmaUnmapPages);
        // SAFETY: the table and the mapping are alive (type invariants) and the mapping was made
        // for `peer`; the driver takes only the semaphore inside the pin, no driver lock, so this
        // is allowed from any context that may sleep, the free callback included. It always
        // returns 0 for a mapping it knows.
        let _ = unsafe {
            sys::nvidia_p2p_dma_unmap_pages(peer.as_ptr(), self.0.as_ptr(), mapping.0.as_ptr())
        };
    }
}

/// A DMA mapping of a [`PersistentPin`].
///
/// # Invariants
///
/// Points to a mapping the driver handed out for a persistent pin that is still held and that
/// has not been unmapped: alive for as long as this value exists.
pub(crate) struct DmaMapping(NonNull<sys::nvidia_p2p_dma_mapping>);

// SAFETY: as for `PersistentPin`.
unsafe impl Send for DmaMapping {}

impl DmaMapping {
    /// The header fields peermem-rs checks.
    pub(crate) fn header(&self) -> DmaMappingHeader {
        // SAFETY: alive by the type invariant.
        let m = unsafe { self.0.as_ref() };
        DmaMappingHeader {
            version: m.version,
            page_size_type: m.page_size_type,
            entries: m.entries,
        }
    }

    /// The DMA address of GPU page `i`, or `None` past the end.
    pub(crate) fn dma_address(&self, i: u32) -> Option<u64> {
        // SAFETY: alive by the type invariant.
        let m = unsafe { self.0.as_ref() };
        if i >= m.entries || m.dma_addresses.is_null() {
            return None;
        }
        // SAFETY: `dma_addresses` holds `entries` addresses and `i < entries`.
        Some(unsafe { *m.dma_addresses.add(i as usize) })
    }
}

/// Pins `range` of the calling process's GPU memory; the driver calls
/// [`FreeCallback::free_callback`] of the `T` behind `data` before it frees the pin (cudaFree,
/// process exit, unregistration from the P2P object).
///
/// # Safety
///
/// `data` must be the pointer of a [`ForeignRef<T>`] ([`ForeignRef::as_ptr`]), and that `T` must
/// stay alive (by that reference or another) until the driver can no longer call back: until
/// this call failed (the driver keeps no callback then: it arms the callback last, and unwinds
/// what it made before), or until the callback has returned. The pin is never unpinned by us: the
/// driver keeps it until its teardown calls back.
pub(crate) unsafe fn get_pages<T: FreeCallback>(
    range: GpuRange,
    data: *mut c_void,
    t: Timing,
) -> Result {
    let callback = free_callback::<T>;
    // The page table is the driver's, and dead once the callback returns: not kept.
    pin_with(|out| {
        let _call = t.span(Step::NvGetPages);
        // SAFETY: `out` is valid for the call; `data` is what `callback` expects, kept alive for
        // it as the caller's contract says.
        unsafe {
            sys::nvidia_p2p_get_pages(0, 0, range.start(), range.len(), out, Some(callback), data)
        }
    })
    .map(|_table| ())
}

/// The free callback of the pins of [`get_pages`]: the C entry point of
/// [`FreeCallback::free_callback`].
///
/// # Safety
///
/// The driver calls it at most once per pin, in process context, with its RM API lock held, and
/// with the `data` given to [`get_pages`]: the pointer of a [`ForeignRef<T>`] whose `T` stays
/// alive until this function has returned (`get_pages`'s contract).
unsafe extern "C" fn free_callback<T: FreeCallback>(data: *mut c_void) {
    let t = Timing::begin(Entry::FreeCallback);
    let _total = t.span(Step::Total);
    // SAFETY: the function's contract: `data` is a `ForeignRef<T>`'s pointer, and its `T` outlives
    // this borrow.
    let Some(this) = (unsafe { ForeignRef::<T>::borrow(data) }) else {
        return;
    };
    T::free_callback(this, t);
}

/// Waits until every free callback the driver has started has returned to it: a
/// `nvidia_p2p_put_pages` that can find no pin. The driver takes its RM API lock for it before it
/// looks for the key [NV-API-LOCK] and answers 0 for a key it does not find
/// [NV-PUT-PAGES-LOOKUP]; every teardown of a non-persistent pin holds that lock, for write or for
/// read, across the client's callback and the frees [NV-TEARDOWN, NV-TEARDOWN-LOCK-MODE], and a
/// writer waits for readers too. An error means the driver may not have
/// waited: it could not allocate its stack (`-ENOMEM`, before RM), or RM refused its lock
/// (`NV_ERR_INVALID_LOCK_STATE`; from 570 also `NV_ERR_NOT_READY`) or failed after it; nv-p2p.c
/// WARNs at every RM error but "not found" (550 nv-p2p.c:324-338). Its caller asks again a bounded
/// number of times (`BARRIER_TRIES` in `logic::registration`), then keeps its reference for good.
///
/// Drivers without the persistent API read the table before the lookup (the GPU UUID and the pin's
/// flags: 530.30.02's `mem_info->bPersistent`) [NV-PUT-PAGES-NO-READ], so this exists only in
/// builds for the persistent API (its macro is in exactly the releases whose put_pages looks the
/// key up first [NV-PERSISTENT-API]); peermem-rs refuses its invalidating flavour, the only user,
/// in the others.
#[cfg(peermem_persistent_api)]
pub(crate) fn wait_for_teardowns(t: Timing) -> Result {
    let _call = t.span(Step::NvPutPagesBarrier);
    // A key that is no pin's: the address of this static, which is never a table the driver made.
    static NO_PIN: u8 = 0;
    let key = core::ptr::addr_of!(NO_PIN)
        .cast_mut()
        .cast::<sys::nvidia_p2p_page_table>();
    // SAFETY: what the driver does with this key:
    // - it reads no table before looking the key up among the caller's pins in every release
    //   with the persistent API [NV-PUT-PAGES-NO-READ], and this function exists only in builds
    //   for such a header (`peermem_persistent_api`) [NV-PERSISTENT-API];
    // - no pin has the address of a static of ours, so the lookup finds nothing and nothing is
    //   dereferenced or unpinned [NV-PUT-PAGES-LOOKUP];
    // - the virtual address is ignored in that lookup.
    check(unsafe { sys::nvidia_p2p_put_pages(0, 0, 0, key) })
}

/// Without the persistent API the invalidating flavour is refused at load (see above), so nothing
/// waits for teardowns; should it be called, it fails and its caller waits and asks again.
#[cfg(not(peermem_persistent_api))]
pub(crate) fn wait_for_teardowns(_t: Timing) -> Result {
    Err(kapi::eopnotsupp())
}

/// A PCI device the NIC's DMA goes through, with a reference of ours on it.
pub(crate) struct PeerDevice(kapi::PciDev);

impl PeerDevice {
    /// The PCI device behind the host's `dma_device`, referenced; `None` when it is not a PCI
    /// device.
    ///
    /// # Safety
    ///
    /// `dev` must be null or point to a live `struct device` for the duration of the call.
    pub(crate) unsafe fn from_device(dev: *mut bindings::device) -> Option<Self> {
        // SAFETY: the caller's contract.
        unsafe { kapi::PciDev::from_device(dev) }.map(Self)
    }

    fn as_ptr(&self) -> *mut bindings::pci_dev {
        self.0.as_ptr()
    }
}
