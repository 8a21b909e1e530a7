// SPDX-License-Identifier: GPL-2.0

//! The edge to the peer-memory host (`rdma/peer_mem.h`): the client structure, its registration,
//! and the `extern "C"` callbacks the host calls.
//!
//! Each callback converts the host's raw arguments, calls the client's safe implementation (the
//! [`PeerClient`] trait, which `client.rs` implements) and turns the result into what the ABI
//! wants. None of them can panic, and every error goes back as an errno or "not mine". Each reads
//! the time accounting's switch once and times itself whole (`crate::timing`, step `total`),
//! handing the [`Timing`] down to the client.

use core::ffi::c_void;

use core::marker::PhantomData;
use core::ptr::NonNull;
use kernel::ffi::{c_char, c_int, c_ulong};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow};
use kernel::types::Opaque;

use crate::kapi::atomic::Ordering::{Acquire, Release};
use crate::kapi::atomic::{AtomicBool, AtomicPtr};
use crate::kapi::{self, CStr};

use crate::foreign::ForeignRef;
use crate::logic::registration::Flavour;
use crate::nvidia::PeerDevice;
use crate::sys;
use crate::timing::{Entry, Step, Timing};

/// What the host's callbacks do, in safe Rust: implemented by the client for its registration, one
/// `Arc`-counted value per registration, which the host holds as its `client_context` from acquire
/// to release. [`Callbacks`] makes each method the `extern "C"` callback the host calls. None of
/// them may panic (their caller is C). Each gets the [`Timing`] of its callback, to time its steps
/// with.
pub(crate) trait PeerClient: Send + Sync + Sized {
    /// acquire: is `[addr, addr + size)` memory of this client, for the calling process? `None`
    /// means "not mine".
    fn acquire(link: &'static HostLink, addr: u64, size: u64, t: Timing) -> Option<Arc<Self>>;

    /// get_pages: pin the pages of the registration.
    fn get_pages(
        ctx: ArcBorrow<'_, Self>,
        addr: u64,
        size: u64,
        core_context: u64,
        t: Timing,
    ) -> Result;

    /// dma_map: map the pages for the NIC and describe them in the host's SG table `host_sg`.
    /// Returns the number of SG entries. `peer` is the NIC (`None`: not a PCI device).
    fn dma_map(
        ctx: ArcBorrow<'_, Self>,
        host_sg: *mut bindings::sg_table,
        peer: Option<PeerDevice>,
        t: Timing,
    ) -> Result<u32>;

    /// dma_unmap: undo dma_map.
    fn dma_unmap(ctx: ArcBorrow<'_, Self>, host_sg: *const bindings::sg_table, t: Timing);

    /// put_pages: undo get_pages.
    fn put_pages(ctx: ArcBorrow<'_, Self>, t: Timing);

    /// get_page_size: the page size of the client's memory.
    fn page_size() -> u64;

    /// release: the host is done with the registration; its reference goes when this returns.
    fn release(ctx: Arc<Self>, t: Timing);
}

/// What a registration needs to know about the client it belongs to: its name, its flavour, and
/// how to reach the host's invalidate. One per flavour, as statics, because the host's callbacks
/// carry no pointer back to the client.
pub(crate) struct HostLink {
    flavour: Flavour,
    /// The client's name, a `'static` C string; null while not registered.
    name: AtomicPtr<c_char>,
    /// The handle `ib_register_peer_memory_client` returned; null while not registered.
    handle: AtomicPtr<c_void>,
    /// Where the host writes its invalidate function during registration.
    invalidate_fn: Opaque<sys::invalidate_peer_memory>,
}

// SAFETY: the atomics are Sync; `invalidate_fn` is written only by the host inside
// `ib_register_peer_memory_client`, before the client is visible to any registration, and only
// read after a registration of this client exists.
unsafe impl Sync for HostLink {}

/// Registrations are accepted: module init has finished, every client is registered, and nothing
/// can fail any more. Before that a registration could outlive a failed init: the host would hand
/// memory to the first client while the second one's registration fails, and init's failure
/// path unloads the module whatever references registrations hold.
static ACCEPTING: AtomicBool = AtomicBool::new(false);

/// Module init has finished: accept registrations from now on.
pub(crate) fn accept_registrations() {
    ACCEPTING.store(true, Release);
}

pub(crate) static INVALIDATING: HostLink = HostLink::new(Flavour::Invalidating);
pub(crate) static PERSISTENT: HostLink = HostLink::new(Flavour::Persistent);

impl HostLink {
    const fn new(flavour: Flavour) -> Self {
        Self {
            flavour,
            name: AtomicPtr::new(core::ptr::null_mut()),
            handle: AtomicPtr::new(core::ptr::null_mut()),
            invalidate_fn: Opaque::new(None),
        }
    }

    pub(crate) fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The client's name ("nv_mem", "nv_mem_nc"), for messages.
    pub(crate) fn name(&self) -> &'static CStr {
        let p = self.name.load(Acquire);
        if p.is_null() {
            return c"peermem_rs";
        }
        // SAFETY: `name` is only ever set to a `'static` C string literal.
        unsafe { kapi::cstr_from_ptr(p) }
    }

    /// May this client accept a registration? Only once module init has finished
    /// ([`accept_registrations`]), which is also after the invalidating client's host handle is
    /// published: an invalidation needs it, and the host could otherwise hand us memory (and the
    /// driver call back for it) between `ib_register_peer_memory_client` adding the client and
    /// our storing the handle it returns.
    pub(crate) fn ready(&self) -> bool {
        ACCEPTING.load(Acquire)
            && (self.flavour == Flavour::Persistent || !self.handle.load(Acquire).is_null())
    }

    /// Asks the host to invalidate the registration it knows as `core_context`.
    pub(crate) fn invalidate(&self, core_context: u64) {
        let handle = self.handle.load(Acquire);
        // SAFETY: see the `Sync` impl: the host wrote the function before any registration existed.
        let f = unsafe { *self.invalidate_fn.get() };
        if let (Some(f), false) = (f, handle.is_null()) {
            // SAFETY: the host's invalidate, called with the handle it gave us and an id it gave us.
            let _ = unsafe { f(handle, core_context) };
        }
    }
}

/// A client registered with the host; unregistered on drop.
///
/// # Invariants
///
/// `handle` is a live registration of `client`, whose memory is owned here and stays put (boxed)
/// until unregistration, which waits for every registration of the client to be released.
pub(crate) struct ClientRegistration {
    link: &'static HostLink,
    handle: NonNull<c_void>,
    client: KBox<Opaque<sys::peer_memory_client_ex>>,
}

// SAFETY: the handle and the client structure are only used to unregister, from any task.
unsafe impl Send for ClientRegistration {}
// SAFETY: no method takes `&self` to mutate.
unsafe impl Sync for ClientRegistration {}

/// Why registering with the host failed.
pub(crate) enum RegisterError {
    /// The host refused: a client of this name is already registered (or the host is out of memory).
    Refused,
    /// We could not allocate the client structure.
    NoMemory,
}

impl ClientRegistration {
    /// Registers the client `C` of `link`'s flavour under `name`.
    ///
    /// `ex_unmaps`: declare the client "extended" with `PEER_MEM_INVALIDATE_UNMAPS` (the host must
    /// not unmap on invalidation); otherwise a legacy client (MLNX_OFED 4.9 semantics).
    pub(crate) fn register<C: PeerClient>(
        link: &'static HostLink,
        name: &'static CStr,
        version: &CStr,
        ex_unmaps: bool,
    ) -> Result<Self, RegisterError> {
        let mut c: sys::peer_memory_client_ex = Default::default();
        copy_cstr(&mut c.client.name, name);
        // Leave the last two bytes of the version: its terminator, and the "extended" marker.
        copy_cstr(
            &mut c.client.version[..sys::IB_PEER_MEMORY_VER_MAX as usize - 1],
            version,
        );
        let invalidating = link.flavour == Flavour::Invalidating;
        if invalidating {
            // The host treats a client as extended only when this byte is set and ex_size covers flags.
            c.client.version[sys::IB_PEER_MEMORY_VER_MAX as usize - 1] = 1;
            if ex_unmaps {
                c.ex_size = core::mem::size_of::<sys::peer_memory_client_ex>();
                // An enum in MLNX_OFED's header, a plain constant elsewhere: cast either way.
                #[allow(clippy::unnecessary_cast)]
                let unmaps = sys::PEER_MEM_INVALIDATE_UNMAPS as u32;
                c.flags = unmaps;
            }
        }
        install::<C>(&mut c.client, link.flavour);
        let client = KBox::new(Opaque::new(c), GFP_KERNEL).map_err(|_| RegisterError::NoMemory)?;
        // Never written through: `AtomicPtr` has no `*const` flavour.
        link.name.store(kapi::as_char_ptr(name).cast_mut(), Release);
        let invalidate_out = if invalidating {
            link.invalidate_fn.get()
        } else {
            core::ptr::null_mut()
        };
        // SAFETY: `client` is a fully initialised client structure that stays at this address until
        // unregistration (boxed and owned by the returned value); `invalidate_out` is null or points
        // to `link`'s slot, which is static.
        let handle =
            unsafe { sys::ib_register_peer_memory_client(client.get().cast(), invalidate_out) };
        let Some(handle) = NonNull::new(handle) else {
            link.name.store(core::ptr::null_mut(), Release);
            return Err(RegisterError::Refused);
        };
        link.handle.store(handle.as_ptr(), Release);
        // INVARIANT: registered just now; `client` moves into the value, its heap address unchanged.
        Ok(Self {
            link,
            handle,
            client,
        })
    }
}

impl Drop for ClientRegistration {
    fn drop(&mut self) {
        // SAFETY: type invariant: a live registration. This waits until every registration of the
        // client has been released, after which the host no longer uses `client`.
        unsafe { sys::ib_unregister_peer_memory_client(self.handle.as_ptr()) };
        self.link.handle.store(core::ptr::null_mut(), Release);
        let _ = &self.client;
    }
}

/// Copies `src` into the fixed-size C string `dst`, truncating, always NUL-terminated.
fn copy_cstr(dst: &mut [c_char], src: &CStr) {
    let Some(room) = dst.len().checked_sub(1) else {
        return;
    };
    let bytes = src.to_bytes();
    let n = bytes.len().min(room);
    for (d, s) in dst.iter_mut().zip(bytes[..n].iter()) {
        *d = *s as c_char;
    }
    for d in dst[n..].iter_mut() {
        *d = 0;
    }
}

/// The callbacks of one flavour's client `C`.
struct Callbacks<C, F>(PhantomData<(C, F)>);

/// Selects a flavour's [`HostLink`] at compile time, so each client gets its own callbacks.
trait LinkOf {
    fn link() -> &'static HostLink;
}
struct InvalidatingClient;
struct PersistentClient;
impl LinkOf for InvalidatingClient {
    fn link() -> &'static HostLink {
        &INVALIDATING
    }
}
impl LinkOf for PersistentClient {
    fn link() -> &'static HostLink {
        &PERSISTENT
    }
}

/// Fills in `c`'s callbacks: `C`'s, for `flavour`.
fn install<C: PeerClient>(c: &mut sys::peer_memory_client, flavour: Flavour) {
    match flavour {
        Flavour::Invalidating => Callbacks::<C, InvalidatingClient>::fill(c),
        Flavour::Persistent => Callbacks::<C, PersistentClient>::fill(c),
    }
}

/// Borrows the registration behind a `client_context`.
///
/// # Safety
///
/// `ctx` must be null or a `client_context` that `C`'s acquire callback returned and the host has
/// not released (the host's reference then keeps the registration alive for the callback's
/// duration).
unsafe fn borrow<'a, C>(ctx: *mut c_void) -> Option<ArcBorrow<'a, C>> {
    // SAFETY: the function's contract; the host gives its reference back only with release, which
    // cannot overlap its other calls for the registration.
    unsafe { ForeignRef::borrow(ctx) }
}

impl<C: PeerClient, F: LinkOf> Callbacks<C, F> {
    fn fill(c: &mut sys::peer_memory_client) {
        c.acquire = Some(Self::acquire);
        c.get_pages = Some(Self::get_pages);
        c.dma_map = Some(Self::dma_map);
        c.dma_unmap = Some(Self::dma_unmap);
        c.put_pages = Some(Self::put_pages);
        c.get_page_size = Some(Self::get_page_size);
        c.release = Some(Self::release);
    }

    /// # Safety
    ///
    /// Called by the host in the registering process's context; `client_context` is a valid
    /// out-pointer.
    unsafe extern "C" fn acquire(
        addr: c_ulong,
        size: usize,
        _peer_mem_private_data: *mut c_void,
        _peer_mem_name: *mut c_char,
        client_context: *mut *mut c_void,
    ) -> c_int {
        let t = Timing::begin(Entry::Acquire);
        let _total = t.span(Step::Total);
        if client_context.is_null() {
            return 0;
        }
        match C::acquire(F::link(), addr as u64, size as u64, t) {
            Some(ctx) => {
                // SAFETY: `client_context` is a valid out-pointer (checked non-null above).
                unsafe { *client_context = ForeignRef::give(ctx).into_ptr() };
                1
            }
            None => 0,
        }
    }

    /// # Safety
    ///
    /// `client_context` is what our acquire returned, not yet released.
    unsafe extern "C" fn get_pages(
        addr: c_ulong,
        size: usize,
        _write: c_int,
        _force: c_int,
        _sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        core_context: u64,
    ) -> c_int {
        let t = Timing::begin(Entry::GetPages);
        let _total = t.span(Step::Total);
        // SAFETY: the host's contract, see above.
        let Some(ctx) = (unsafe { borrow(client_context) }) else {
            return EINVAL.to_errno();
        };
        match C::get_pages(ctx, addr as u64, size as u64, core_context, t) {
            Ok(()) => 0,
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// `client_context` as above; `sg_head` the host's table; `dma_device` a live device or null;
    /// `nmap` a valid out-pointer.
    unsafe extern "C" fn dma_map(
        sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        dma_device: *mut bindings::device,
        _dmasync: c_int,
        nmap: *mut c_int,
    ) -> c_int {
        let t = Timing::begin(Entry::DmaMap);
        let _total = t.span(Step::Total);
        // SAFETY: the host's contract, see above.
        let Some(ctx) = (unsafe { borrow(client_context) }) else {
            return EINVAL.to_errno();
        };
        if nmap.is_null() {
            return EINVAL.to_errno();
        }
        // SAFETY: `dma_device` is null or live (host's contract).
        let peer = unsafe { PeerDevice::from_device(dma_device) };
        match C::dma_map(ctx, sg_head, peer, t) {
            Ok(n) => {
                // SAFETY: checked non-null; the host's out-pointer.
                unsafe { *nmap = n as c_int };
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// As for `dma_map`. Must return 0.
    unsafe extern "C" fn dma_unmap(
        sg_head: *mut bindings::sg_table,
        client_context: *mut c_void,
        _dma_device: *mut bindings::device,
    ) -> c_int {
        let t = Timing::begin(Entry::DmaUnmap);
        let _total = t.span(Step::Total);
        // SAFETY: the host's contract, see above.
        if let Some(ctx) = unsafe { borrow(client_context) } {
            C::dma_unmap(ctx, sg_head, t);
        }
        0
    }

    /// # Safety
    ///
    /// As for `dma_map`.
    unsafe extern "C" fn put_pages(_sg_head: *mut bindings::sg_table, client_context: *mut c_void) {
        let t = Timing::begin(Entry::PutPages);
        let _total = t.span(Step::Total);
        // SAFETY: the host's contract, see above.
        if let Some(ctx) = unsafe { borrow(client_context) } {
            C::put_pages(ctx, t);
        }
    }

    /// # Safety
    ///
    /// None beyond the ABI: the context is not needed, all of the client's pages are one size.
    unsafe extern "C" fn get_page_size(_client_context: *mut c_void) -> c_ulong {
        C::page_size() as c_ulong
    }

    /// # Safety
    ///
    /// `client_context` is what our acquire returned; the host gives up its reference here.
    unsafe extern "C" fn release(client_context: *mut c_void) {
        // The registration, and the module reference it holds, may go inside `C::release`; this
        // span's end still runs in this callback, which the host's unregistration (and so module
        // exit) waits for.
        let t = Timing::begin(Entry::Release);
        let _total = t.span(Step::Total);
        // SAFETY: the host's contract: what our acquire returned, given back once, here.
        let Some(r) = (unsafe { ForeignRef::from_ptr(client_context) }) else {
            return;
        };
        // SAFETY: as above; the host makes no other call for this registration from now on.
        C::release(unsafe { r.take_back() }, t);
    }
}
