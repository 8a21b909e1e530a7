// SPDX-License-Identifier: GPL-2.0

//! What peermem-rs does for each peer-memory callback, in safe Rust.
//!
//! One [`RegCtx`] per registration, reference counted: the host holds one reference from acquire to
//! release, the NVIDIA driver holds one while it may call our free callback, and a free callback in
//! progress keeps the registration (and the module) alive even if release races with it. Each step
//! asks the registration state machine (`logic::registration`) what to do, under the registration's
//! lock, and calls the driver with the lock dropped; see that module for why.

use core::ffi::c_void;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, Mutex};

use crate::logic::cause::{Cause, EFAULT, EINVAL as EINVAL_NR, ENOMEM as ENOMEM_NR};
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::logic::registration::{
    CallbackPlan, Flavour, MapOutcome, PinOutcome, PinPlan, Registration, ReleaseCall, Violation,
};
use crate::nvidia::{self, DmaMapping, PageTable, PeerDevice};
use crate::peer_mem::HostLink;
use crate::sg::SgEntries;
use crate::stats;

/// This module's descriptor.
fn this_module() -> *mut bindings::module {
    <crate::LocalModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr()
}

/// A reference on this module, so that it cannot be unloaded while a registration exists, and a
/// count of live registrations.
struct ModuleRef;

impl ModuleRef {
    fn get() -> Option<Self> {
        // SAFETY: `this_module()` is this module's descriptor; taking a reference is always allowed.
        if unsafe { bindings::try_module_get(this_module()) } {
            stats::registration_created();
            Some(ModuleRef)
        } else {
            None
        }
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        stats::registration_dropped();
        // SAFETY: drops the reference taken in `get`.
        unsafe { bindings::module_put(this_module()) };
    }
}

/// The driver structures a registration holds, valid only as the state machine says.
struct Inner {
    state: Registration,
    /// The persistent pin acquire kept (cheaper registration).
    probe: Option<PageTable>,
    /// The pin get_pages took (or reused).
    table: Option<PageTable>,
    /// The DMA mapping dma_map made, and the device it is for.
    mapping: Option<(PeerDevice, DmaMapping)>,
    /// The SG entries handed to the host; freed at release.
    sg: Option<SgEntries>,
}

/// One registration.
#[pin_data]
pub(crate) struct RegCtx {
    link: &'static HostLink,
    #[pin]
    inner: Mutex<Inner>,
    _module: ModuleRef,
}

impl RegCtx {
    fn new(
        link: &'static HostLink,
        state: Registration,
        probe: Option<PageTable>,
    ) -> Result<Arc<Self>> {
        let module = ModuleRef::get().ok_or(ENODEV)?;
        let ctx = Arc::pin_init(
            pin_init!(RegCtx {
                link,
                inner <- kernel::new_mutex!(Inner { state, probe, table: None, mapping: None, sg: None }),
                _module: module,
            }),
            GFP_KERNEL,
        )?;
        Ok(ctx)
    }

    fn range(&self) -> GpuRange {
        self.inner.lock().state.range()
    }
}

/// Refuse `call` on `range` for `cause`: count it, explain it (rate-limited), and give the host
/// `errno` (positive) back.
fn refuse(link: &HostLink, call: &str, range: GpuRange, errno: i32, cause: Cause) -> Error {
    stats::refuse(link.name(), call, Some(range), errno, cause);
    Error::from_errno(-errno)
}

/// Refuse a call that broke the protocol.
fn violation(link: &HostLink, call: &str, range: GpuRange, v: Violation) -> Error {
    let _ = v;
    refuse(link, call, range, EINVAL_NR, Cause::HostProtocol)
}

/// The free callback the probe pin of acquire registers: the pin is dropped right away, so there is
/// nothing to invalidate; the driver frees the table itself.
///
/// # Safety
///
/// None: `_data` is never used, so the driver may pass anything.
unsafe extern "C" fn probe_free_callback(_data: *mut c_void) {}

/// acquire: is `[addr, addr + size)` GPU memory of the calling process? `None` means "not mine".
pub(crate) fn acquire(link: &'static HostLink, addr: u64, size: u64) -> Option<Arc<RegCtx>> {
    let name = link.name();
    let Ok(range) = GpuRange::covering(addr, size) else {
        stats::refuse(name, "acquire", None, EINVAL_NR, Cause::BadRange);
        return None;
    };
    let refuse = |errno: i32, cause: Cause| {
        stats::refuse(name, "acquire", Some(range), errno, cause);
        None
    };
    let pin_refused = |e: Error| refuse(-e.to_errno(), Cause::of_pin_errno(-e.to_errno()));
    let flavour = link.flavour();
    let probe = match flavour {
        Flavour::Persistent => {
            let table = match nvidia::get_pages_persistent(range) {
                Ok(table) => table,
                Err(e) => return pin_refused(e),
            };
            // SAFETY: a persistent pin we just took: the driver never tears those down.
            if unsafe { table.header() }.check(range.pages()).is_err() {
                let _ = nvidia::put_pages_persistent(range, table);
                return refuse(EINVAL_NR, Cause::UnknownLayout);
            }
            // Kept, and handed to get_pages when it asks for the same range.
            Some(table)
        }
        Flavour::Invalidating => {
            // Probe by pinning and unpinning, as nvidia-peermem does. The probe callback ignores its
            // data, so nothing of ours can be touched if the memory goes away meanwhile.
            // SAFETY: `probe_free_callback` never uses its data.
            match unsafe { nvidia::get_pages(range, probe_free_callback, core::ptr::null_mut()) } {
                Ok(table) => {
                    let _ = nvidia::put_pages(range, table);
                    None
                }
                Err(e) => return pin_refused(e),
            }
        }
    };
    let keep_probe = probe.is_some();
    match RegCtx::new(
        link,
        Registration::acquired(flavour, range, keep_probe),
        probe,
    ) {
        Ok(ctx) => {
            if keep_probe {
                stats::pinned(range.len());
            }
            stats::acquired();
            Some(ctx)
        }
        Err(_) => {
            if let Some(table) = probe {
                let _ = nvidia::put_pages_persistent(range, table);
            }
            refuse(ENOMEM_NR, Cause::OutOfMemory)
        }
    }
}

/// Drops the reference the driver held, handed over as `Arc::into_raw` when pinning.
fn drop_driver_ref(ctx: ArcBorrow<'_, RegCtx>) {
    let ptr: *const RegCtx = &*ctx;
    // SAFETY: the state machine said the driver's reference is to be dropped now, exactly once; it
    // was made by `Arc::into_raw` on an `Arc` of this very registration, whose raw pointer is the
    // same for every `Arc` of it.
    drop(unsafe { Arc::from_raw(ptr) });
}

/// get_pages: pin the GPU pages of the registration.
pub(crate) fn get_pages(
    ctx: ArcBorrow<'_, RegCtx>,
    addr: u64,
    size: u64,
    core_context: u64,
) -> Result {
    let link = ctx.link;
    let range = GpuRange::covering(addr, size).map_err(|_| {
        stats::refuse(link.name(), "get_pages", None, EINVAL_NR, Cause::BadRange);
        EINVAL
    })?;
    let plan = ctx.inner.lock().state.begin_get_pages(range, core_context);
    let plan = plan.map_err(|v| violation(link, "get_pages", range, v))?;
    let drop_probe = match plan {
        PinPlan::ReuseProbePin => {
            let mut g = ctx.inner.lock();
            g.table = g.probe.take();
            return Ok(());
        }
        PinPlan::Pin { drop_probe_pin } => drop_probe_pin,
    };
    if let Some(probe_range) = drop_probe {
        let probe = ctx.inner.lock().probe.take();
        if let Some(table) = probe {
            let _ = nvidia::put_pages_persistent(probe_range, table);
            stats::unpinned(probe_range.len());
        }
    }
    let result = match link.flavour() {
        Flavour::Persistent => nvidia::get_pages_persistent(range),
        Flavour::Invalidating => {
            let data = Arc::into_raw(Arc::from(ctx)).cast_mut().cast::<c_void>();
            // SAFETY: `data` is a reference to this registration handed to the driver: it stays valid
            // until the state machine lets the callback or put_pages drop it.
            unsafe { nvidia::get_pages(range, free_callback, data) }
        }
    };
    let mut g = ctx.inner.lock();
    let outcome = g
        .state
        .finish_get_pages(result.is_ok())
        .map_err(|v| violation(link, "get_pages", range, v))?;
    match (outcome, result) {
        (PinOutcome::Pinned, Ok(table)) => {
            // SAFETY: pinned and not torn down, and the lock keeps the free callback from proceeding.
            let header = unsafe { table.header() };
            g.table = Some(table);
            stats::pinned(range.len());
            if header.check(range.pages()).is_err() {
                drop(g);
                put_pages(ctx, core::ptr::null());
                return Err(refuse(
                    link,
                    "get_pages",
                    range,
                    EINVAL_NR,
                    Cause::UnknownLayout,
                ));
            }
            Ok(())
        }
        (
            PinOutcome::Failed {
                drop_driver_ref: drop_ref,
            },
            result,
        ) => {
            drop(g);
            if drop_ref {
                drop_driver_ref(ctx);
            }
            let errno = result.err().map(|e| -e.to_errno()).unwrap_or(EINVAL_NR);
            Err(refuse(
                link,
                "get_pages",
                range,
                errno,
                Cause::of_pin_errno(errno),
            ))
        }
        _ => {
            drop(g);
            Err(refuse(
                link,
                "get_pages",
                range,
                EFAULT,
                Cause::FreedWhileRegistering,
            ))
        }
    }
}

/// dma_map: map the pinned pages for the NIC and describe them in the host's SG table. Returns the
/// number of SG entries. On failure the host's table is left untouched.
///
/// `host_sg` is the host's `struct sg_table`, `peer` the NIC (`None`: not a PCI device).
pub(crate) fn dma_map(
    ctx: ArcBorrow<'_, RegCtx>,
    host_sg: *mut bindings::sg_table,
    peer: Option<PeerDevice>,
) -> Result<u32> {
    let link = ctx.link;
    let range = ctx.range();
    let Some(peer) = peer else {
        return Err(refuse(
            link,
            "dma_map",
            range,
            EINVAL_NR,
            Cause::NotPciDevice,
        ));
    };
    if host_sg.is_null() {
        return Err(violation(link, "dma_map", range, Violation::OutOfOrder));
    }
    let table = {
        let mut g = ctx.inner.lock();
        let go = g
            .state
            .begin_dma_map()
            .map_err(|v| violation(link, "dma_map", range, v))?;
        if !go {
            drop(g);
            return Err(refuse(
                link,
                "dma_map",
                range,
                EFAULT,
                Cause::FreedWhileRegistering,
            ));
        }
        g.table
    };
    let result = match table {
        Some(table) => nvidia::dma_map_pages(peer, table),
        None => Err(EINVAL),
    };
    let mut g = ctx.inner.lock();
    let outcome = g
        .state
        .finish_dma_map(result.is_ok())
        .map_err(|v| violation(link, "dma_map", range, v))?;
    let (mapping, table) = match (outcome, result, table) {
        (MapOutcome::Mapped, Ok(mapping), Some(table)) => (mapping, table),
        (MapOutcome::Failed, result, _) => {
            drop(g);
            let errno = result.err().map(|e| -e.to_errno()).unwrap_or(EINVAL_NR);
            return Err(refuse(
                link,
                "dma_map",
                range,
                errno,
                Cause::of_map_errno(errno),
            ));
        }
        _ => {
            drop(g);
            return Err(refuse(
                link,
                "dma_map",
                range,
                EFAULT,
                Cause::FreedWhileRegistering,
            ));
        }
    };
    let pages = range.pages();
    // SAFETY: mapped and not torn down, and the lock keeps the free callback from proceeding.
    let header = unsafe { mapping.header() };
    let entries = match header.check(pages) {
        Ok(()) => SgEntries::new(pages, GPU_PAGE_SIZE as u32, |i| {
            // SAFETY: as above; still under the lock.
            unsafe { mapping.dma_address(i) }
        })
        .map_err(|e| (e, Cause::OutOfMemory)),
        Err(_) => Err((EINVAL, Cause::UnknownLayout)),
    };
    match entries {
        Ok(entries) => {
            // SAFETY: `host_sg` is the host's table passed to dma_map (non-null, checked above).
            unsafe { entries.publish(host_sg) };
            g.sg = Some(entries);
            g.mapping = Some((peer, mapping));
            stats::mapped();
            Ok(pages)
        }
        Err((err, cause)) => {
            // Undo the mapping we cannot use; the host's table is untouched.
            let unmap = g.state.begin_dma_unmap();
            drop(g);
            if let Ok(ReleaseCall::Call) = unmap {
                nvidia::dma_unmap_pages(peer, table, mapping);
                let _ = ctx.inner.lock().state.finish_dma_unmap();
            }
            Err(refuse(link, "dma_map", range, -err.to_errno(), cause))
        }
    }
}

/// dma_unmap: undo dma_map (unless the driver already tore it all down).
pub(crate) fn dma_unmap(ctx: ArcBorrow<'_, RegCtx>, host_sg: *const bindings::sg_table) {
    let link = ctx.link;
    let mut g = ctx.inner.lock();
    let range = g.state.range();
    if let Some(sg) = &g.sg {
        if !sg.published_in(host_sg) {
            drop(g);
            let _ = violation(link, "dma_unmap", range, Violation::OutOfOrder);
            return;
        }
    }
    match g.state.begin_dma_unmap() {
        Ok(ReleaseCall::Call) => {
            let mapping = g.mapping.take();
            let table = g.table;
            drop(g);
            if let (Some((peer, mapping)), Some(table)) = (mapping, table) {
                nvidia::dma_unmap_pages(peer, table, mapping);
            }
            let _ = ctx.inner.lock().state.finish_dma_unmap();
        }
        Ok(ReleaseCall::Skip) => g.mapping = None,
        Err(v) => {
            drop(g);
            let _ = violation(link, "dma_unmap", range, v);
        }
    }
}

/// put_pages: unpin (unless the driver already tore it down).
pub(crate) fn put_pages(ctx: ArcBorrow<'_, RegCtx>, _host_sg: *const bindings::sg_table) {
    let link = ctx.link;
    let mut g = ctx.inner.lock();
    let range = g.state.range();
    let plan = match g.state.begin_put_pages() {
        Ok(plan) => plan,
        Err(v) => {
            drop(g);
            let _ = violation(link, "put_pages", range, v);
            return;
        }
    };
    if plan.unpin == ReleaseCall::Skip {
        return;
    }
    let table = g.table.take();
    let mapping = if plan.unmap_first {
        g.mapping.take()
    } else {
        None
    };
    drop(g);
    let Some(table) = table else {
        let _ = ctx.inner.lock().state.finish_put_pages(false);
        return;
    };
    if let Some((peer, mapping)) = mapping {
        nvidia::dma_unmap_pages(peer, table, mapping);
    }
    let unpinned = match link.flavour() {
        Flavour::Persistent => nvidia::put_pages_persistent(range, table),
        Flavour::Invalidating => nvidia::put_pages(range, table),
    }
    .is_ok();
    stats::unpinned(range.len());
    let drop_ref = ctx.inner.lock().state.finish_put_pages(unpinned);
    if let Ok(true) = drop_ref {
        drop_driver_ref(ctx);
    }
}

/// get_page_size: GPU pages are 64 KiB.
pub(crate) fn page_size() -> u64 {
    GPU_PAGE_SIZE
}

/// release: the host is done with the registration; drop its reference.
pub(crate) fn release(ctx: Arc<RegCtx>) {
    let link = ctx.link;
    let mut g = ctx.inner.lock();
    let range = g.state.range();
    let plan = match g.state.release() {
        Ok(plan) => plan,
        Err(v) => {
            // A call is still in flight for this registration: dropping the host's reference could
            // free it under that call. Keep it (a leak) and say so.
            drop(g);
            let _ = violation(link, "release", range, v);
            core::mem::forget(ctx);
            return;
        }
    };
    let probe = if plan.put_probe_pin.is_some() {
        g.probe.take()
    } else {
        None
    };
    let table = if plan.unpin { g.table.take() } else { None };
    let mapping = if plan.unmap { g.mapping.take() } else { None };
    let sg = g.sg.take();
    drop(g);
    if let (Some(probe), Some(probe_range)) = (probe, plan.put_probe_pin) {
        let _ = nvidia::put_pages_persistent(probe_range, probe);
        stats::unpinned(probe_range.len());
    }
    if let Some(table) = table {
        // The host released without put_pages: clean up after it, and say so.
        let _ = violation(link, "release", range, Violation::OutOfOrder);
        if let Some((peer, mapping)) = mapping {
            nvidia::dma_unmap_pages(peer, table, mapping);
        }
        let unpinned = match link.flavour() {
            Flavour::Persistent => nvidia::put_pages_persistent(range, table),
            Flavour::Invalidating => nvidia::put_pages(range, table),
        }
        .is_ok();
        stats::unpinned(range.len());
        if ctx.inner.lock().state.released_unpin_done(unpinned) {
            drop_driver_ref(ctx.as_arc_borrow());
        }
    }
    drop(sg);
    stats::released();
}

/// The NVIDIA driver's free callback for invalidating pins: the memory is going away (cudaFree,
/// process exit). Make the NIC stop using it, then let the driver free its structures.
///
/// # Safety
///
/// `data` is the reference to a [`RegCtx`] handed to the driver by [`get_pages`]; the driver calls
/// this at most once per pin, in process context.
pub(crate) unsafe extern "C" fn free_callback(data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` came from `Arc::into_raw` and the driver's reference keeps it alive at least
    // until `end_callback` below lets us drop it.
    let ctx = unsafe { ArcBorrow::<RegCtx>::from_raw(data.cast_const().cast()) };
    let plan = ctx.inner.lock().state.begin_callback();
    match plan {
        CallbackPlan::Invalidate { core_context } => {
            ctx.link.invalidate(core_context);
            stats::invalidated();
        }
        CallbackPlan::SkipInvalidate => stats::invalidation_skipped(),
        CallbackPlan::Ignore => return,
    }
    let mut g = ctx.inner.lock();
    let drop_ref = g.state.end_callback();
    // The driver frees the page table and its mappings as soon as we return.
    if g.table.take().is_some() {
        stats::unpinned(g.state.range().len());
    }
    g.mapping = None;
    drop(g);
    if drop_ref {
        drop_driver_ref(ctx);
    }
}
