// SPDX-License-Identifier: GPL-2.0

//! What peermem-rs does for each peer-memory callback, in safe Rust: [`RegCtx`] implements the
//! host's callbacks (`peer_mem::PeerClient`) and the NVIDIA driver's free callback
//! (`nvidia::FreeCallback`), whose `extern "C"` entry points are in those two edges.
//!
//! One [`RegCtx`] per registration, reference counted. C code holds references as
//! [`ForeignRef`]s: the host one from acquire to release (its `client_context`), the NVIDIA driver
//! one while it may call our free callback (its `data`); our work item holds one while it is
//! queued or running. Every decision — which driver or host call to make, from which task, and
//! when a reference goes — is the registration state machine's (`logic::registration`, whose
//! documentation gives the rules and the reasons, and which `crates/protocol-model` checks against
//! a model of the real providers). This file only carries the steps out: it asks the state machine
//! for the next step under the registration lock, takes out what the step's call works on, makes
//! the call with the lock dropped, and under one hold of the lock again puts back what the call
//! left or made, reports its result and asks for the step after it.
//!
//! # The registration lock
//!
//! `RegCtx::inner` is a spinlock: it protects the state machine and the driver handles next to it,
//! and is held only to read or update them and to add to the statistics' atomic counters
//! (`stats::counts_only`; no call into the driver, the host or the allocator is
//! made under it; the SG entries are copied into the host's table under it, a plain store). It is
//! the innermost lock: it nests inside the NVIDIA driver's RM API lock (held by the teardown while
//! it runs our free callback), the host's per-MR mapping lock (held around our get_pages,
//! dma_map and a legacy host's dma_unmap/put_pages) and our `LINGERING`, and nothing is taken
//! inside it (the providers' locks: docs/provider-facts.md, [NV-API-LOCK, NV-TEARDOWN,
//! OFED-MAPPING-LOCK, OFED-INVALIDATE]).
//!
//! # Lingering registrations
//!
//! No notification pin N is ever unpinned by us (`logic::registration`, rule 2): a deregistration
//! leaves N armed until the free calls it back, and the registration *lingers*, listed in
//! `LINGERING` (below, with its rules). A later acquire of the same process whose range starts on
//! N's page takes a lingering registration over instead of pinning another N (`adopt_lingering`),
//! so that registering and deregistering one buffer again and again holds one N, not one per
//! cycle; the free callback takes its registration off the list when it claims N.
//!
//! # Time accounting
//!
//! Every function here that an entry point runs gets that entry point's [`Timing`] (in
//! [`HostArgs`] or as an argument) and times its steps with it (`crate::timing`): both locks (wait
//! and hold, through [`RegCtx::lock`] and [`lock_lingering`]), the state machine's calls, the SG
//! entries, the statistics, the registration's allocation and its last reference, and queueing
//! the work item; `nvidia.rs` times the driver calls. When the switch was off at the entry point,
//! none of it reads a clock.

use core::ops::DerefMut;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{Arc, ArcBorrow, SpinLock};
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

use crate::foreign::ForeignRef;
use crate::kapi::{self, SharedMutex, StaticMutex, StaticMutexGuard};
use crate::logic::cause::Cause;
use crate::logic::errno::Errno;
use crate::logic::range::{GpuRange, GPU_PAGE_SIZE};
use crate::logic::registration::{
    Actor, Commit, Flavour, HostCall, LingerKey, Op, Refusal, Registration, Step, Tgid, Violation,
};
use crate::logic::tables;
use crate::nvidia::{self, DmaMapping, PeerDevice, PersistentPin};
use crate::peer_mem::{HostLink, PeerClient};
use crate::sg::SgEntries;
use crate::stats;
use crate::timing::{self, Entry, Held, Timing};

/// A reference on this module, so that it cannot be unloaded while a registration exists, and a
/// count of live registrations.
///
/// It goes with the registration. When it is the last module reference, the code dropping it is
/// a host callback (the host's unregistration waits for it to return) or our work item (module
/// exit destroys the queue, waiting for it): never a driver callback.
struct ModuleRef(kapi::ModuleRef);

impl ModuleRef {
    fn get(t: Timing) -> Option<Self> {
        let r = kapi::ModuleRef::try_get()?;
        t.time(timing::Step::Stats, stats::registration_created);
        Some(ModuleRef(r))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        stats::registration_dropped();
        // The module reference (`self.0`) goes right after this.
    }
}

/// What the registration holds of the driver's, next to its state.
struct Inner {
    state: Registration,
    /// P: the persistent pin (acquire's), until `UnpinP`.
    p: Option<PersistentPin>,
    /// P's DMA mapping and the device it was made for.
    mapping: Option<(PeerDevice, DmaMapping)>,
    /// The reference the driver holds as the callback data of N, the non-persistent pin whose
    /// callback tells us the memory is going away (invalidating flavour).
    driver_ref: Option<ForeignRef<RegCtx>>,
    /// SG entries: allocated and filled by dma_map, then the host's until release.
    sg: Option<SgEntries>,
    /// On the list of lingering registrations (`LINGERING`)? Written only under that lock.
    listed: bool,
    /// Its neighbours on that list. Written only under that lock.
    lingering: Links,
}

/// A registration's neighbours on its bucket's list of lingering registrations (`LINGERING`), both
/// empty when it is not on it.
///
/// # Invariants
///
/// Written only with `LINGERING` held. While the registration is listed, `prev` points to the
/// listed registration before it in its bucket (`None`: it is the bucket's head), whose `next`
/// holds the reference to this one; `next` holds the reference to the registration after it.
#[derive(Default)]
struct Links {
    next: Option<Arc<RegCtx>>,
    prev: Option<NonNull<RegCtx>>,
}

// SAFETY: `prev` is a pointer to a registration (which is `Sync`), followed only with
// `LINGERING` held (the type's invariants), from whichever task holds it.
unsafe impl Send for Links {}

/// One registration.
#[pin_data]
pub(crate) struct RegCtx {
    link: &'static HostLink,
    #[pin]
    inner: SpinLock<Inner>,
    #[pin]
    work: Work<RegCtx>,
    _module: ModuleRef,
}

impl_has_work! {
    impl HasWork<Self> for RegCtx { self.work }
}

// One live registration's memory is one `RegCtx` behind the `Arc`'s reference count (4 bytes,
// padded to RegCtx's alignment; `KBox` allocates exactly that size): it fits a kmalloc-192 object
// wherever locks and work items carry no debugging state and spinlocks are not rtmutexes
// (distribution kernels, the benchmark kernel), exactly (184 + 8 bytes). It took a kmalloc-512
// before the state machine dropped its copy of the host's call, and a kmalloc-256 before it
// dropped N's page (the range's first page) and `SgEntries` its tag (issue 23). `Inner` has 7
// bytes of padding left (129 bytes used of 136); a field that needs more puts the registration
// back in a kmalloc-256, 64 bytes more each. Lock debugging adds its maps to the spinlock and the
// work item, and the object grows.
#[cfg(not(any(CONFIG_DEBUG_SPINLOCK, CONFIG_DEBUG_LOCK_ALLOC, CONFIG_PREEMPT_RT)))]
const _: () = assert!(core::mem::size_of::<RegCtx>() + core::mem::align_of::<RegCtx>() <= 192);

/// What a host call (or the free callback, or the work item) brings along.
struct HostArgs {
    /// The host's SG table (dma_map).
    sg: *mut bindings::sg_table,
    /// The NIC (dma_map), moved into the mapping when it is made.
    peer: Option<PeerDevice>,
    /// The time accounting of the entry point that runs this.
    t: Timing,
}

impl HostArgs {
    fn none(t: Timing) -> Self {
        Self {
            sg: core::ptr::null_mut(),
            peer: None,
            t,
        }
    }
}

/// The workqueue the work items of registrations run on; module exit destroys it, waiting for a
/// running item (the one that may drop the last reference, and the module's with it).
fn queue() -> &'static workqueue::Queue {
    // SAFETY: registrations, the only users, exist only while the module is loaded: after the
    // queue is made (module init makes it before the clients are registered) and before it is
    // destroyed (module exit, after the last registration went: each holds a module reference),
    // so the queue is alive for as long as they may call this.
    unsafe { kapi::work_queue() }
}

// No lock orders our pins and unpins against each other: peermem-rs unpins no pin by its page
// table's address (N lingers; P is unpinned through its own table, which the driver never frees
// on its own [NV-PERSISTENT]; the work item's barrier names a static's address, no pin's), so no
// stale address of ours can reach a pin another registration made meanwhile [NV-MULTI-PIN,
// NV-PUT-PAGES-LOOKUP, NV-INTERNAL-OBJECT]. (The client before N lingered held a module-wide
// mutex, `N_PINS`, around its pins of N, its unpins of N and every persistent pin for that
// reason: found by `make stress`, docs/stress.md; the protocol model's `proves-unpin`, `no-n-pins`
// and `unlocked-p` keep that record.)

/// Buckets of `LINGERING`'s hash table (a power of two): 2 KiB of heads.
const LINGER_BUCKETS: usize = 256;

/// The heads of `LINGERING`'s lists, one per bucket of [`LingerKey::bucket`].
struct Lingering([Option<Arc<RegCtx>>; LINGER_BUCKETS]);

impl Lingering {
    /// The head of the list `key` falls in.
    fn head(&mut self, key: LingerKey) -> &mut Option<Arc<RegCtx>> {
        &mut self.0[key.bucket(LINGER_BUCKETS)]
    }
}

static LINGERING: StaticMutex<Lingering> = {
    // A named constant: an array repeat needs a `Copy` value or a constant (rustc 1.78).
    const EMPTY: Option<Arc<RegCtx>> = None;
    // SAFETY: the shim's `peermem_lingering_lock` is used by this lock only.
    unsafe { StaticMutex::new(SharedMutex::Lingering, Lingering([EMPTY; LINGER_BUCKETS])) }
};

/// Takes `LINGERING`, its wait and hold timed.
fn lock_lingering(t: Timing) -> Held<StaticMutexGuard<'static, Lingering>> {
    t.lock(
        timing::Step::LingeringLockWait,
        timing::Step::LingeringLockHold,
        || LINGERING.lock(),
    )
}

// Lock rules of `LINGERING`, the hash table of lingering registrations.
//
// What: the registrations the host has released whose N the driver still holds, not yet called
// back (`Registration::lingers`), in a table of `LINGER_BUCKETS` doubly linked lists, each
// registration in the bucket of its `LingerKey` (process and N's page, which never change: an
// adoption gives a registration a new range, never a new N). Each forward link (a head,
// `Links::next`) holds a reference, each backward one (`Links::prev`) is a pointer, and
// `Inner::listed` says a registration is on a list. Taking one off is O(1): the free callback
// does it under the driver's API lock, and a teardown calls back every pin of an allocation (or
// of a P2P object) in one hold of that lock. Looking for one to adopt walks one bucket, with the
// registrations of that key and of the keys that share its bucket (one in 256 of them): a process
// that deregisters many buffers without freeing them does not slow every registration, nor the
// callbacks that wait.
// Why a table of our own: a registration that adopts needs one of the same process and GPU page
// (`Registration::adoptable`), and the driver gives no lookup of our pins.
//
// Protects: the heads, and every registration's `listed` and `lingering`, which are written only
// with this lock held (under the registration lock as well: they live in `Inner`).
// Who takes it: release, to list its registration if it lingers (`list_if_lingering`); acquire,
// after its persistent pin, to look for a registration to adopt (`adopt_lingering`); the free
// callback, around its claim of N (`Registration::begin_callback`) when its registration is
// listed, to take it off (`claim`). Because the listing decides under the registration lock too,
// and only while no claim was made (`lingers`), and the claim of a listed registration is made
// under both locks, a registration whose N was claimed is never listed, and one listed is taken
// off before its callback goes on: every listed registration's N is still armed, and its driver
// reference still held. A claim of a registration that is not listed needs the registration
// lock only (most callbacks: memory freed while registered).
//
// Under it: the registration locks (one at a time, each taken and dropped), the state machine's
// questions and `adopt`, and moving list references or dropping clones that are never the last:
// the reference a link held goes to the host (adoption) or is dropped by the callback after it
// let go of this lock, while the driver still holds its own (`claim`); the clones made to walk
// the list are of listed registrations. No driver or host call, no allocation, no sleep but for
// this lock itself.
//
// The free callback may sleep here: RM calls it in process context (CliDelThirdPartyP2PVidmemInfo,
// 595.45.04 src/nvidia/src/kernel/gpu/bus/third_party_p2p.c:556-582, under the API lock), and that
// lock is a sleeping rwlock whose acquire refuses a context that cannot sleep
// (os_acquire_rwlock_write, 550.163.01 kernel-open/nvidia/os-interface.c:311-320); MLNX's
// invalidate, which the callback calls, takes a mutex there already [OFED-INVALIDATE].
//
// Order: the driver's RM API lock (held around our free callback) -> `LINGERING` ->
// registration lock. The host's `peer_memory_mutex` (acquire) and whatever the host holds around
// release come before it; no holder of `LINGERING` waits for anything else, so a teardown that
// holds the API lock and waits here waits only for a holder that makes no driver call.

impl RegCtx {
    /// The registration's GPU range: the state machine's, which changes only when a lingering
    /// registration is adopted (with nobody else at work on it: `Registration::adoptable`).
    fn range(&self, t: Timing) -> GpuRange {
        self.lock(t).state.range()
    }

    /// The registration lock (`inner`), its wait and hold timed.
    fn lock(&self, t: Timing) -> Held<impl DerefMut<Target = Inner> + '_> {
        t.lock(timing::Step::RegLockWait, timing::Step::RegLockHold, || {
            self.inner.lock()
        })
    }

    /// Starts `actor` with `begin` and runs it until it is done, carrying out each step of the
    /// state machine. `begin` runs under the registration lock and the first step is asked for
    /// under the same hold; after a call, its result is reported, what it took out of the
    /// registration put back, the next step asked for and what that step's call needs taken out,
    /// all under one hold: a step that makes a call costs one round trip of the lock (`PinN`
    /// takes it once more inside, to hand the driver its reference, see [`RegCtx::call`]).
    ///
    /// `Err` is `begin`'s: the actor did not start. `Ok` is the actor's own answer.
    fn drive<E>(
        self: ArcBorrow<'_, Self>,
        actor: Actor,
        args: &mut HostArgs,
        begin: impl FnOnce(&mut Inner) -> Result<(), E>,
    ) -> Result<Result<(), Refusal>, E> {
        let t = args.t;
        let machine = timing::Step::StateMachine;
        let mut g = self.lock(t);
        t.time(machine, || begin(&mut g))?;
        loop {
            match t.time(machine, || g.state.next(actor)) {
                Step::Call(op) => {
                    let out = Handles::take(op, &mut g);
                    let range = g.state.range();
                    drop(g);
                    let (out, result) = self.call(op, range, out, args);
                    g = self.lock(t);
                    out.put_back(&mut g);
                    if t.time(machine, || g.state.done(actor, op, result)) == Commit::PublishSg {
                        if let Some(sg) = &g.sg {
                            let _publish = t.span(timing::Step::SgPublish);
                            // SAFETY: `args.sg` is the host's table passed to this dma_map
                            // (checked non-null before the registration started it).
                            unsafe { sg.publish(args.sg) };
                        }
                    }
                }
                Step::DropDriverRef => {
                    let r = g.driver_ref.take();
                    drop(g);
                    if let Some(r) = r {
                        // SAFETY: the driver holds no copy any more (the state machine says it
                        // will not call back); the caller holds another reference, so this is
                        // not the last.
                        drop(unsafe { r.take_back() });
                    }
                    g = self.lock(t);
                }
                Step::HandDriverRefToWork => {
                    let r = g.driver_ref.take();
                    drop(g);
                    if let Some(r) = r {
                        // SAFETY: the driver's callback is running and is the last use of its
                        // reference.
                        let ctx = unsafe { r.take_back() };
                        // Already queued: that item holds a reference, so this is not the last.
                        let _ = t.time(timing::Step::WorkQueue, || queue().enqueue(ctx));
                    }
                    // The callback returns now, without touching the registration again.
                    return Ok(Ok(()));
                }
                Step::QueueWork => {
                    drop(g);
                    let _ = t.time(timing::Step::WorkQueue, || queue().enqueue(Arc::from(self)));
                    g = self.lock(t);
                }
                Step::Note(event) => {
                    let range = g.state.range();
                    if stats::counts_only(event) {
                        // Atomic counters, nothing said: counted under the lock, whose rules
                        // allow it, without a round trip of it (a deregistration's `NLingers`,
                        // an unpin's `Unpinned`).
                        stats::event(self.link.name(), range, actor, event, t);
                    } else {
                        drop(g);
                        stats::event(self.link.name(), range, actor, event, t);
                        g = self.lock(t);
                    }
                }
                Step::Return(result) => return Ok(result),
            }
        }
    }

    /// Makes the call `op` on the registration's `range` with the registration lock dropped, with
    /// what [`Handles::take`] took out of the registration for it; gives that back, with what the
    /// call made, to be put back.
    fn call(
        self: ArcBorrow<'_, Self>,
        op: Op,
        range: GpuRange,
        mut out: Handles,
        args: &mut HostArgs,
    ) -> (Handles, Result<(), Errno>) {
        let t = args.t;
        let errno = kapi::errno;
        let result = match op {
            Op::PinN => {
                // N tells us the memory is going away, nothing else: one GPU page of the range is
                // enough (RM calls back every pin of the allocation at once, and a registration
                // lies in one allocation), and costs one 64 KiB BAR1 extent instead of a second
                // mapping of the whole range.
                let range = range.first_page();
                let data = ForeignRef::give(Arc::from(self));
                let data_ptr = data.as_ptr();
                self.lock(t).driver_ref = Some(data);
                // SAFETY: `data_ptr` is the pointer of `driver_ref`, a reference to this
                // registration, which the driver holds until the state machine takes it back:
                // after a failed pin (the driver keeps no callback then), or in the callback
                // itself, as its last step (`HandDriverRefToWork` in `drive`), after which the
                // callback does not use the registration; the work item it goes to drops it only
                // after `DriverBarrier`, which waits for the RM API lock that the driver holds
                // until the callback has returned. N is never unpinned by us, so no other moment
                // ends the driver's use of it. So the registration outlives the callback.
                unsafe { nvidia::get_pages::<RegCtx>(range, data_ptr, t) }.map_err(errno)
            }
            // Never asked: the module's registrations leave N to linger (`NRelease::Linger`);
            // the proof and the unpin of N are the protocol model's record of the client before.
            // Refused, so that the state machine would leave N armed for its callback.
            Op::UnpinN | Op::ProveUnpinN => Err(Errno::EINVAL),
            Op::DriverBarrier => {
                let r = nvidia::wait_for_teardowns(t);
                if r.is_err() {
                    // The state machine asks again, a bounded number of times; give the driver
                    // a moment (to find memory, to leave a state its lock refuses).
                    t.time(timing::Step::BarrierRetrySleep, || kapi::sleep_ms(100));
                }
                r.map_err(errno)
            }
            Op::MapP => match (args.peer.take(), &out.p) {
                (Some(peer), Some(p)) => {
                    // The entries first: if they cannot be had, nothing is mapped. Entries of an
                    // earlier dma_map that failed (never published) are freed here, with the lock
                    // dropped, when the new ones take their place.
                    let sg = t.time(timing::Step::SgAlloc, || SgEntries::alloc(range.pages()));
                    match sg {
                        Ok(sg) => {
                            out.sg = Some(sg);
                            p.dma_map(&peer, t)
                                .map(|mapping| out.mapping = Some((peer, mapping)))
                                .map_err(errno)
                        }
                        Err(e) => Err(errno(e)),
                    }
                }
                _ => Err(Errno::EINVAL),
            },
            Op::FillSg => match (&out.p, &mut out.sg, &out.mapping) {
                (Some(p), Some(sg), Some((_, m))) => fill_sg(sg, p, m, range, t),
                _ => Err(Errno::EINVAL),
            },
            Op::UnmapP => {
                if let (Some(p), Some((peer, m))) = (&out.p, out.mapping.take()) {
                    p.dma_unmap(&peer, m, t);
                }
                Ok(())
            }
            Op::UnpinP => match out.p.take() {
                Some(p) => p.put(range, t).map_err(errno),
                None => Ok(()),
            },
            Op::Invalidate => {
                t.time(timing::Step::HostInvalidate, || {
                    self.link.invalidate(out.core_context)
                });
                Ok(())
            }
        };
        (out, result)
    }
}

/// `Op::FillSg`: checks P's DMA mapping `m` for `range` and writes each page's DMA address into
/// `sg`, judging the page in the same pass; the entries are published only if the state machine
/// commits the call's success. `EINVAL`: a mapping of a layout we do not know; `EIO`: a page the
/// driver did not map, in a mapping it reported as made.
fn fill_sg(
    sg: &mut SgEntries,
    p: &PersistentPin,
    m: &DmaMapping,
    range: GpuRange,
    t: Timing,
) -> Result<(), Errno> {
    if t.time(timing::Step::SgCheck, || m.header().check(range.pages()))
        .is_err()
    {
        return Err(Errno::EINVAL);
    }
    let mut scan = tables::FailedPageScan::default();
    let filled = t.time(timing::Step::SgFill, || {
        sg.fill(GPU_PAGE_SIZE as u32, |i| {
            let dma = m.dma_address(i)?;
            if let Some(phys) = p.physical_address(i) {
                scan.page(i, phys, dma);
            }
            Some(dma)
        })
    });
    if scan.first_failed().is_some() {
        // (The fill stops early only on a mapping with no DMA addresses at all, at page 0, where
        // no page can be judged either way.)
        return Err(Errno::EIO);
    }
    filled.map_err(kapi::errno)
}

/// What a call of the state machine takes out of the registration, under the lock, for the time
/// it runs with the lock dropped, and what it made meanwhile: put back under the lock, before
/// the result is reported. The state machine keeps anyone else from the same handles meanwhile: P
/// and its mapping are reserved for one call at a time, whoever makes it (the state's `PUse`: a
/// dma_map holds P from its allocation of SG entries to its commit); the SG entries belong to the host's
/// dma_map in flight, and release.
#[derive(Default)]
struct Handles {
    p: Option<PersistentPin>,
    mapping: Option<(PeerDevice, DmaMapping)>,
    sg: Option<SgEntries>,
    /// For `Op::Invalidate`: the host's id of the registration.
    core_context: u64,
}

impl Handles {
    /// Takes out of `g` what `op` works on.
    fn take(op: Op, g: &mut Inner) -> Self {
        match op {
            Op::UnpinP => Self {
                p: g.p.take(),
                ..Self::default()
            },
            // The SG entries: what an earlier dma_map that failed left, replaced by the call, and
            // so freed with the lock dropped (`put_back` never has to replace a handle under the
            // lock).
            Op::MapP => Self {
                p: g.p.take(),
                sg: g.sg.take(),
                ..Self::default()
            },
            Op::UnmapP => Self {
                p: g.p.take(),
                mapping: g.mapping.take(),
                ..Self::default()
            },
            Op::FillSg => Self {
                p: g.p.take(),
                mapping: g.mapping.take(),
                sg: g.sg.take(),
                ..Self::default()
            },
            Op::Invalidate => Self {
                core_context: g.state.core_context(),
                ..Self::default()
            },
            Op::PinN | Op::UnpinN | Op::ProveUnpinN | Op::DriverBarrier => Self::default(),
        }
    }

    /// Puts back into `g` what is left of what was taken, and what the call made (the SG entries
    /// and the mapping of `MapP`); a handle the call used up (P after `UnpinP`, the
    /// mapping after `UnmapP`) stays gone. Each goes into a field [`Handles::take`] emptied for
    /// this call (the state machine lets no other call fill it meanwhile), so nothing is dropped
    /// under the lock.
    fn put_back(self, g: &mut Inner) {
        if self.p.is_some() {
            g.p = self.p;
        }
        if self.mapping.is_some() {
            g.mapping = self.mapping;
        }
        if self.sg.is_some() {
            g.sg = self.sg;
        }
    }
}

impl WorkItem for RegCtx {
    type Pointer = Arc<RegCtx>;

    fn run(this: Arc<RegCtx>) {
        let t = Timing::begin(Entry::WorkItem);
        let _total = t.span(timing::Step::Total);
        let machine = timing::Step::StateMachine;
        let _ = this
            .as_arc_borrow()
            .drive(Actor::Work, &mut HostArgs::none(t), |g| {
                g.state.begin_work();
                Ok::<(), core::convert::Infallible>(())
            });
        let keep = {
            let mut g = this.lock(t);
            t.time(machine, || g.state.take_keep())
        };
        if keep {
            // Nothing shows that the driver's teardown has returned from our callback: keep this
            // reference for good (the registration and the module stay until reboot) rather than
            // free them under it.
            core::mem::forget(this);
        } else {
            // `this` goes here, perhaps the last reference and the module's with it: the
            // workqueue core runs next, and module exit's destroy_workqueue waits for this
            // function to return (the spans' ends included).
            t.time(timing::Step::RegCtxFree, || drop(this));
        }
    }
}

/// Refuse `call` on `range` for `cause`: count it, explain it (rate-limited), and give the host
/// the errno back.
fn refuse(
    link: &HostLink,
    call: &str,
    range: Option<GpuRange>,
    errno: Errno,
    cause: Cause,
    t: Timing,
) -> Error {
    stats::refuse(link.name(), call, range, errno, cause, t);
    kapi::error(errno)
}

fn refused(link: &HostLink, call: &str, range: GpuRange, r: Refusal, t: Timing) -> Error {
    refuse(link, call, Some(range), r.errno, r.cause, t)
}

fn violation(link: &HostLink, call: &str, range: GpuRange, v: Violation, t: Timing) -> Error {
    stats::violation(link.name(), call, range, v, t);
    EINVAL
}

/// A host call: start it with the state machine (after `check`, under the same hold), run it,
/// explain a refusal. Returns the registration's range, read under that hold.
fn host_call(
    ctx: ArcBorrow<'_, RegCtx>,
    name: &str,
    call: HostCall,
    args: &mut HostArgs,
    check: impl FnOnce(&Inner) -> Result<(), Violation>,
) -> Result<GpuRange> {
    let link = ctx.link;
    let t = args.t;
    let caller = kapi::current_tgid();
    let mut range = None;
    let ran = ctx.drive(Actor::Host, args, |g| {
        range = Some(g.state.range());
        check(g)?;
        g.state.begin(call, caller)
    });
    // `begin` ran first, whatever came after; the range changes only at adoption, in acquire.
    let range = range.unwrap_or_else(|| ctx.range(t));
    ran.map_err(|v| violation(link, name, range, v, t))?
        .map_err(|r| refused(link, name, range, r, t))?;
    Ok(range)
}

/// Takes the registration whose lock `g` is off its bucket's list of lingering registrations if
/// it is on it (`LINGERING` held, as `table`), and gives back the reference its link held. `g` is
/// let go before a neighbour's lock is taken (one registration lock at a time).
fn unlink(
    table: &mut Lingering,
    mut g: impl DerefMut<Target = Inner>,
    t: Timing,
) -> Option<Arc<RegCtx>> {
    if !g.listed {
        return None;
    }
    g.listed = false;
    let key = g.state.linger_key();
    let Links { next, prev } = core::mem::take(&mut g.lingering);
    drop(g);
    if let Some(n) = &next {
        n.lock(t).lingering.prev = prev;
    }
    let link = match prev {
        Some(p) => {
            // SAFETY: by `Links`' invariants, with `LINGERING` held by the caller: `p` is the
            // registration before this one on its bucket's list, listed, so alive (the list
            // holds a reference to it), and it stays listed until this returns.
            let p = unsafe { p.as_ref() };
            core::mem::replace(&mut p.lock(t).lingering.next, next)
        }
        None => core::mem::replace(table.head(key), next),
    };
    stats::lingering_unlisted();
    link
}

/// release: list `ctx` if it lingers, at the head of its key's bucket, for a later acquire of its
/// process to adopt it.
fn list_if_lingering(ctx: &Arc<RegCtx>, t: Timing) {
    let mut table = lock_lingering(t);
    let old = {
        let mut g = ctx.lock(t);
        if g.listed || !t.time(timing::Step::StateMachine, || g.state.lingers()) {
            return;
        }
        // Listed in the same hold of its lock as `lingers` was asked: a callback's claim, which
        // ends `lingers`, takes that lock too, and then finds it listed (and takes `LINGERING`)
        // or was made before (and it is not listed). An adoption needs `LINGERING`.
        let head = table.head(g.state.linger_key());
        let old = head.take();
        let before = old.clone();
        g.listed = true;
        // Not listed: its links were empty, so nothing is dropped under the lock.
        g.lingering = Links {
            next: old,
            prev: None,
        };
        *head = Some(ctx.clone());
        before
    };
    if let Some(o) = old {
        o.lock(t).lingering.prev = Some(NonNull::from(&**ctx));
        // `o` goes: a clone of a listed registration (`ctx`'s link holds another).
    }
    stats::lingering_listed();
}

/// acquire, after its persistent pin `p` of `range` for process `tgid`: takes over a lingering
/// registration of the same process whose N pins the first page of `range`
/// (`Registration::adoptable`), giving it `range` and `p`, and returns the list's reference to it
/// as the host's; or gives `p` back. Walks the one bucket of that key.
fn adopt_lingering(
    range: GpuRange,
    tgid: Tgid,
    p: PersistentPin,
    t: Timing,
) -> Result<Arc<RegCtx>, PersistentPin> {
    let machine = timing::Step::StateMachine;
    let mut table = lock_lingering(t);
    let mut cur = table.head(LingerKey::of(range, tgid)).clone();
    while let Some(c) = cur {
        let next = {
            let mut g = c.lock(t);
            if t.time(machine, || g.state.adoptable(range, tgid)) {
                t.time(machine, || g.state.adopt(range));
                // Not held: `adoptable` says P is gone, so this replaces nothing.
                g.p = Some(p);
                // Listed (`adoptable` implies `lingers`), so the link is there; the callback
                // that would claim N waits for `LINGERING` and then finds it adopted.
                return Ok(unlink(&mut table, g, t).unwrap_or(c));
            }
            g.lingering.next.clone()
        };
        // `c` goes: a clone of a listed registration, never its last reference.
        cur = next;
    }
    Err(p)
}

impl PeerClient for RegCtx {
    /// acquire: is `[addr, addr + size)` GPU memory of the calling process? It pins it
    /// persistently to find out, and keeps that pin as the registration's. `None` means "not
    /// mine".
    fn acquire(link: &'static HostLink, addr: u64, size: u64, t: Timing) -> Option<Arc<RegCtx>> {
        let Ok(range) = GpuRange::covering(addr, size) else {
            refuse(link, "acquire", None, Errno::EINVAL, Cause::BadRange, t);
            return None;
        };
        let no = |errno, cause| {
            refuse(link, "acquire", Some(range), errno, cause, t);
            None
        };
        if !link.ready() {
            return no(Errno::EINVAL, Cause::NotReady);
        }
        let Some(module) = ModuleRef::get(t) else {
            return no(Errno::EINVAL, Cause::Unloading);
        };
        let p = match PersistentPin::get(range, t) {
            Ok(p) => p,
            Err(e) => {
                let errno = kapi::errno(e);
                return no(errno, Cause::of_persistent_pin_errno(errno));
            }
        };
        if p.header().check(range.pages()).is_err() {
            let _ = p.put(range, t);
            return no(Errno::EINVAL, Cause::UnknownLayout);
        }
        let tgid = kapi::current_tgid();
        // A registration holding P: adopted or new.
        let acquired = || {
            t.time(timing::Step::Stats, || {
                stats::pinned(range.len());
                stats::acquired();
            })
        };
        let p = match link.flavour() {
            Flavour::Invalidating => match adopt_lingering(range, tgid, p, t) {
                Ok(ctx) => {
                    // The adopted registration holds a module reference of its own: this one
                    // goes, and is not the last.
                    drop(module);
                    acquired();
                    t.time(timing::Step::Stats, stats::adopted);
                    return Some(ctx);
                }
                Err(p) => p,
            },
            Flavour::Persistent => p,
        };
        let state = t.time(timing::Step::StateMachine, || {
            Registration::acquired(link.flavour(), range, tgid)
        });
        let ctx = t.time(timing::Step::RegCtxAlloc, || {
            Arc::pin_init(
                pin_init!(RegCtx {
                    link,
                    inner <- kernel::new_spinlock!(Inner {
                        state,
                        p: None,
                        mapping: None,
                        driver_ref: None,
                        sg: None,
                        listed: false,
                        lingering: Links::default(),
                    }),
                    work <- new_work!("RegCtx::work"),
                    _module: module,
                }),
                GFP_KERNEL,
            )
        });
        let Ok(ctx) = ctx else {
            let _ = p.put(range, t);
            return no(Errno::ENOMEM, Cause::OutOfMemory);
        };
        // Nobody else knows the registration yet.
        ctx.lock(t).p = Some(p);
        acquired();
        Some(ctx)
    }

    /// get_pages: pin the GPU pages of the registration (acquire did, for P).
    fn get_pages(
        ctx: ArcBorrow<'_, RegCtx>,
        addr: u64,
        size: u64,
        core_context: u64,
        t: Timing,
    ) -> Result {
        let range = GpuRange::covering(addr, size).map_err(|_| {
            refuse(
                ctx.link,
                "get_pages",
                None,
                Errno::EINVAL,
                Cause::BadRange,
                t,
            )
        })?;
        host_call(
            ctx,
            "get_pages",
            HostCall::GetPages {
                range,
                core_context,
            },
            &mut HostArgs::none(t),
            |_| Ok(()),
        )
        .map(|_| ())
    }

    /// dma_map: map the pinned pages for the NIC and describe them in the host's SG table. Returns
    /// the number of SG entries. On failure the host's table is left untouched.
    ///
    /// `host_sg` is the host's `struct sg_table`, `peer` the NIC (`None`: not a PCI device).
    fn dma_map(
        ctx: ArcBorrow<'_, RegCtx>,
        host_sg: *mut bindings::sg_table,
        peer: Option<PeerDevice>,
        t: Timing,
    ) -> Result<u32> {
        if peer.is_none() {
            return Err(refuse(
                ctx.link,
                "dma_map",
                Some(ctx.range(t)),
                Errno::EINVAL,
                Cause::NotPciDevice,
                t,
            ));
        }
        if host_sg.is_null() {
            return Err(violation(
                ctx.link,
                "dma_map",
                ctx.range(t),
                Violation::OutOfOrder,
                t,
            ));
        }
        let mut args = HostArgs {
            sg: host_sg,
            peer,
            t,
        };
        let range = host_call(ctx, "dma_map", HostCall::DmaMap, &mut args, |_| Ok(()))?;
        t.time(timing::Step::Stats, stats::mapped);
        Ok(range.pages())
    }

    /// dma_unmap: undo dma_map.
    fn dma_unmap(ctx: ArcBorrow<'_, RegCtx>, host_sg: *const bindings::sg_table, t: Timing) {
        // Not the table our entries went into: not ours to unmap.
        let published = |g: &Inner| match &g.sg {
            Some(sg) if !sg.published_in(host_sg) => Err(Violation::OutOfOrder),
            _ => Ok(()),
        };
        let args = &mut HostArgs::none(t);
        let _ = host_call(ctx, "dma_unmap", HostCall::DmaUnmap, args, published);
    }

    /// put_pages: unpin (what the calling task may).
    fn put_pages(ctx: ArcBorrow<'_, RegCtx>, t: Timing) {
        let args = &mut HostArgs::none(t);
        let _ = host_call(ctx, "put_pages", HostCall::PutPages, args, |_| Ok(()));
    }

    /// get_page_size: GPU pages are 64 KiB.
    fn page_size() -> u64 {
        GPU_PAGE_SIZE
    }

    /// release: the host is done with the registration; its reference goes when this returns.
    fn release(ctx: Arc<RegCtx>, t: Timing) {
        let link = ctx.link;
        let caller = kapi::current_tgid();
        let mut sg = None;
        let ran = ctx
            .as_arc_borrow()
            .drive(Actor::Host, &mut HostArgs::none(t), |g| {
                g.state.begin(HostCall::Release, caller)?;
                // The host no longer reads the SG entries (no step of release uses them).
                sg = g.sg.take();
                Ok(())
            });
        if let Err(v) = ran {
            // A call of the host is still in flight for this registration: dropping the host's
            // reference could free it under that call. Keep it (a leak) and say so.
            let _ = violation(link, "release", ctx.range(t), v, t);
            core::mem::forget(ctx);
            return;
        }
        t.time(timing::Step::SgFree, || drop(sg));
        t.time(timing::Step::Stats, stats::released);
        // N left to the driver: listed for a later registration of its process to adopt (the
        // persistent flavour has no N, and takes no module-wide lock here).
        if link.flavour() == Flavour::Invalidating {
            list_if_lingering(&ctx, t);
        }
        // The host's reference: the last one unless the driver or the work item holds another.
        t.time(timing::Step::RegCtxFree, || drop(ctx));
    }
}

impl nvidia::FreeCallback for RegCtx {
    /// The NVIDIA driver's free callback for N: the memory is going away (cudaFree, process exit,
    /// unregistration from the P2P object). The driver holds its RM API lock; `driver_ref`, then
    /// the work item it is handed to, keeps this registration alive until the callback has
    /// returned (see `Op::PinN`).
    fn free_callback(ctx: ArcBorrow<'_, Self>, t: Timing) {
        // Claims N (under `LINGERING` when the registration lingers, to take it off the list:
        // its rules, a short wait for a holder that makes no driver call). Not ours to act on:
        // return at once. Else makes the NIC stop using the memory (through the host) if it may;
        // never waits, and never calls into the driver, which is locked by this very task.
        if claim(&ctx, t) {
            let _ = ctx.drive(Actor::Callback, &mut HostArgs::none(t), |_| {
                Ok::<(), core::convert::Infallible>(())
            });
        }
    }
}

/// The free callback's claim of N (`Registration::begin_callback`). A registration on the list
/// of lingering ones is claimed under `LINGERING` and taken off it. One that is not listed is
/// claimed under its own lock alone: listing it needs that lock too, and `Registration::lingers`,
/// which a claim ends; and only a listed registration can be adopted. So a registration freed
/// while it is registered (the common case) makes its callback wait for no module-wide lock.
fn claim(ctx: &RegCtx, t: Timing) -> bool {
    let machine = timing::Step::StateMachine;
    {
        let mut g = ctx.lock(t);
        if !g.listed {
            return t.time(machine, || g.state.begin_callback());
        }
    }
    // Listed a moment ago: asked again under `LINGERING` (an adoption may have taken it off
    // meanwhile, and then the claim is on the adopted registration, as it would be after it).
    let mut table = lock_lingering(t);
    let mut g = ctx.lock(t);
    let claimed = t.time(machine, || g.state.begin_callback());
    let link = if claimed {
        unlink(&mut table, g, t)
    } else {
        drop(g);
        None
    };
    drop(table);
    // Not the last reference: the driver holds its own until the callback hands it over.
    drop(link);
    claimed
}
