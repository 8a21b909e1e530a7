// SPDX-License-Identifier: GPL-2.0

//! The life of one registration: which calls peermem-rs makes, from which task, and when.
//!
//! A registration lives from `acquire` to `release`. Three kinds of actor drive it, and this module
//! is the one place that decides what each of them does next:
//!
//! - **the host** (ib_core's peer-memory support) calls get_pages, dma_map, dma_unmap, put_pages and
//!   release, from the registering process, from whatever task destroys the MR (a forked child's
//!   last close, a device-removal kworker), or inline from inside our own invalidation;
//! - **the NVIDIA driver's teardown** calls our free callback when the memory goes away (cudaFree,
//!   process exit, unregistration from the P2P object), with its RM API lock held;
//! - **our work item** finishes what the other two may not do in their context.
//!
//! The glue (`client.rs`) owns the driver's pointers and the lock around this state; it asks
//! [`Registration::next`] for a [`Step`], carries it out with the lock dropped, and reports the
//! result with [`Registration::done`]. The glue adds no decision of its own, so the model checker
//! (`crates/protocol-model`), which drives this same state machine against a model of the real
//! providers, checks what the module does.
//!
//! # What the real providers force (see docs/race-windows.md for the sources)
//!
//! 1. The NVIDIA driver frees a non-persistent pin's page table, its DMA mappings and the semaphore
//!    that guards them right after our free callback returns, while `nvidia_p2p_dma_map_pages`
//!    reads the table before taking the API lock and links its mapping into that allocation after
//!    dropping it, and `nvidia_p2p_dma_unmap_pages` takes that semaphore without any driver lock.
//!    A callback cannot wait for a `dma_map_pages` blocked on the API lock (the teardown holds it),
//!    and returning frees memory under it. So **no DMA mapping is ever made on a table the driver
//!    can tear down**: every registration maps a *persistent* pin P (`get_pages_persistent`: no
//!    callback, never torn down by the driver, released only by our `put_pages_persistent`, from
//!    any task). The invalidating flavour takes, in addition, a non-persistent pin N of the
//!    range's first GPU page, whose only use is the free callback that tells us the memory is
//!    going away (RM calls back every pin of an allocation at once, and a registration lies in one
//!    allocation); N's table is never read, and never handed back to the driver (rule 2).
//! 2. `nvidia_p2p_put_pages` finds N only among the pins of the calling process (the tgid) and
//!    answers 0 also when it found nothing. From a task other than the owner's it finds nothing;
//!    and even the owner's 0 proves nothing: "the calling process" is the set of P2P objects whose
//!    pid list holds it, and that set shrinks without the pins going (an MPS client whose RM
//!    client was freed leaves the server's object; its pins stay armed until the server frees the
//!    memory), with no way to make a check and the unpin one lookup. So **N is never unpinned**:
//!    every deregistration leaves it armed ([`NRelease::Linger`]), with the driver's reference to
//!    the registration (and so the module reference), until its callback comes when the memory is
//!    freed; the registration *lingers*. A later registration of the owner whose range starts on
//!    N's page takes a lingering registration over ([`Registration::adoptable`],
//!    [`Registration::adopt`]) instead of pinning another N, so that a process registering and
//!    deregistering one buffer again and again holds one N, not one per cycle. (The client
//!    before this proved the owner's reach with a persistent pin and then unpinned N,
//!    [`NRelease::ProveThenUnpin`]; an MPS owner leaving between the two passed. The protocol
//!    model keeps it to show that.)
//! 3. The callback runs with the RM API lock held: any driver call that takes it fails there
//!    (-EIO). And the host may hold the MR's mapping lock while it calls us (registration from
//!    before get_pages until the MR is armed; a legacy deregistration), while the callback's
//!    invalidation takes that lock. So: **the callback never waits for anything and never makes a
//!    driver call that takes the API lock; and while a callback of this registration runs, no
//!    host-driven call makes one either** (it is left to the work item, which holds no host lock).
//!    The callback asks the host to invalidate only when the registration is [`Phase::Mapped`],
//!    which by construction means no host call of ours is between its steps, so the mapping lock
//!    is free or held by a task that will release it without waiting for the driver.
//! 4. The last reference to a registration (and with it the module reference) is never dropped by
//!    the callback: it hands the driver's reference to the work item, whose queue module exit
//!    destroys (waiting for a running item), so no module code runs after the module is gone.

use crate::logic::cause::Cause;
use crate::logic::errno::Errno;
use crate::logic::range::{GpuRange, GPU_PAGE_SHIFT};

/// A process, as the NVIDIA driver tells them apart: the thread-group id (`current->tgid`).
pub type Tgid = i32;

/// What the owner's deregistration does with N (invalidating flavour).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NRelease {
    /// Leave N armed, with the driver's reference to the registration, until the free calls it
    /// back or a later registration of the owner adopts it ([`Registration::adopt`]), as a
    /// foreign task's deregistration does: no put_pages of N is made, so no 0 from it is believed
    /// (an MPS owner that left the server's P2P object gets 0 with N still armed [NV-PID-LIST,
    /// NV-PUT-PAGES-LOOKUP]) and no stale key of N can reach another pin. What the module does
    /// (docs/design-lingering-n.md).
    Linger,
    /// Prove that the owner still reaches N's object ([`Op::ProveUnpinN`]), then unpin N
    /// ([`Op::UnpinN`]): peermem-rs from 6c0a72f until N was left to linger. Kept so that the
    /// protocol model can show that client's counterexamples (an MPS owner leaving between the
    /// proof and the unpin); the module never asks for it.
    ProveThenUnpin,
}

/// The two kinds of client nvidia-peermem registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// Only the persistent pin P: no free callback, no invalidation (the default).
    Persistent,
    /// P for the NIC, plus a non-persistent pin N whose free callback invalidates through the host.
    Invalidating,
}

/// Where a registration is in the host's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// `acquire` said "mine" (and pinned P).
    Acquired,
    /// `get_pages` succeeded.
    Pinned,
    /// `dma_map` succeeded and no host call of ours is between its steps: the NIC may use it.
    Mapped,
    /// `dma_unmap` ran.
    Unmapped,
    /// `put_pages` ran.
    Unpinned,
    /// `release` ran: the host is done with it.
    Released,
}

/// The host's calls, which [`Registration::begin`] starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostCall {
    /// get_pages for `range` with the host's id for the registration.
    GetPages {
        range: GpuRange,
        core_context: u64,
    },
    DmaMap,
    DmaUnmap,
    PutPages,
    Release,
}

/// Which host call is in flight: a [`HostCall`] without what `begin` already took from it (the
/// range is checked and the host's id kept there), so that a registration's state stays small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum InFlight {
    GetPages,
    DmaMap,
    DmaUnmap,
    PutPages,
    Release,
}

impl From<HostCall> for InFlight {
    fn from(call: HostCall) -> Self {
        match call {
            HostCall::GetPages { .. } => Self::GetPages,
            HostCall::DmaMap => Self::DmaMap,
            HostCall::DmaUnmap => Self::DmaUnmap,
            HostCall::PutPages => Self::PutPages,
            HostCall::Release => Self::Release,
        }
    }
}

/// Who is asking for the next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    /// The host's call that [`Registration::begin`] started.
    Host,
    /// The NVIDIA driver's free callback that [`Registration::begin_callback`] started.
    Callback,
    /// Our work item, started by [`Registration::begin_work`].
    Work,
}

/// A call peermem-rs makes with the registration lock dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `nvidia_p2p_get_pages` of the range with our free callback: pins N. Before the call the glue
    /// hands the driver a reference to the registration as the callback's `data`.
    PinN,
    /// `nvidia_p2p_put_pages` of N (only from the owner's process, after `ProveUnpinN`; only
    /// with [`NRelease::ProveThenUnpin`], which the module never uses).
    UnpinN,
    /// Before the owner's `UnpinN`: `nvidia_p2p_get_pages_persistent` of the range's first GPU
    /// page, then `nvidia_p2p_put_pages_persistent` of it, from the same task. The driver finds
    /// the memory only through the P2P objects whose pid list holds the caller, as put_pages will
    /// look for N; found: the process still reaches N's object, and put_pages follows (the two
    /// calls are not atomic: a process that leaves the object in between passes); not found or
    /// failed (`Err`) with N not claimed by a callback (a free calls back before its memory
    /// stops being found, under one hold of the API lock): the process may have left the object
    /// (an MPS client whose RM client was freed: put_pages would find nothing and answer 0
    /// anyway), so N is abandoned without a put_pages, kept armed for the callback of the free.
    /// Pinned under `N_PINS`, as every persistent pin of that client. Only with
    /// [`NRelease::ProveThenUnpin`], which the module never uses.
    ProveUnpinN,
    /// Allocate the SG entries dma_map will hand the host (it may sleep), then
    /// `nvidia_p2p_dma_map_pages` of P's table for the host's device. Entries that cannot be
    /// allocated end the call with `ENOMEM` before the driver is called (nothing mapped). One
    /// call, not two, so that the lock is not taken between the allocation and the mapping:
    /// nothing the state machine decides depends on what happens between them.
    MapP,
    /// Read P's DMA mapping (checked) into the SG entries allocated by `MapP`.
    FillSg,
    /// `nvidia_p2p_dma_unmap_pages` of P's mapping (takes no driver lock).
    UnmapP,
    /// `nvidia_p2p_put_pages_persistent` of P (any task).
    UnpinP,
    /// The host's invalidate for the host's id of the registration
    /// ([`Registration::core_context`]).
    Invalidate,
    /// From the work item, after a free callback: a `nvidia_p2p_put_pages` that can find no pin
    /// (a key that is no pin's, from a kworker). It answers 0, but only after taking the RM API
    /// lock, which the teardown that called us holds until after our callback has returned: so
    /// once it returns, no code of ours is still running on the teardown's task, and the reference
    /// the callback handed over may be dropped even if it is the last one. It does not need N's
    /// key, so it waits also when the callback came before `get_pages` of N returned. If it fails
    /// (the driver could not enter RM, e.g. out of memory, before taking the lock), it has not
    /// waited: the work item makes it again before it lets go of anything.
    DriverBarrier,
}

impl Op {
    /// Does the NVIDIA driver take its RM API lock inside this call? (Then it must never be made
    /// from the free callback, which runs with that lock held.)
    pub fn takes_driver_api_lock(self) -> bool {
        matches!(
            self,
            Op::PinN | Op::UnpinN | Op::ProveUnpinN | Op::MapP | Op::UnpinP | Op::DriverBarrier
        )
    }

    /// Did the client that proved and unpinned N ([`NRelease::ProveThenUnpin`]) make this call
    /// under `N_PINS`, its module-wide lock of the notification pins' keys? Its pins and unpins of
    /// N, and the proof's persistent pin (and acquire's): no pin of its own could take a table
    /// address that a stale unpin named. The module, which unpins nothing by a table's address,
    /// has no such lock; the protocol model keeps that client's record.
    pub fn takes_n_pins(self) -> bool {
        matches!(self, Op::PinN | Op::UnpinN | Op::ProveUnpinN)
    }

    /// Was this call made only if, asked again under `N_PINS`, [`Registration::still_to_make`]
    /// still said so ([`NRelease::ProveThenUnpin`] only)? The two that a free callback makes
    /// pointless or unsafe: the unpin names N's table, which the driver frees when the callback
    /// returns; the proof is for that unpin.
    pub fn asked_again(self) -> bool {
        matches!(self, Op::UnpinN | Op::ProveUnpinN)
    }
}

/// Something the glue counts or explains; it needs no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// P was unpinned: its bytes are no longer pinned.
    Unpinned,
    /// The driver refused to unpin P (errno): the persistent pin stays (no callback can come).
    UnpinPFailed(Errno),
    /// The driver refused to unpin N (errno): it may still call back, so the registration stays.
    UnpinNFailed(Errno),
    /// N could not be unpinned because the caller is not the pinning process: the driver keeps it,
    /// and the registration, until the owner frees the memory or exits.
    UnpinNForeign,
    /// The owner deregistered ([`NRelease::Linger`]): N stays armed, with the driver's reference
    /// (and so the module reference), until the free calls it back or a later registration of
    /// the owner adopts the registration.
    NLingers,
    /// The owner no longer reaches its memory through the driver (errno of the proof), and no
    /// callback has claimed N: it has left the P2P object (MPS), or the driver failed. Its
    /// put_pages would prove nothing: N stays armed, and the registration until its callback.
    UnpinNUnproven(Errno),
    /// The free callback invalidated the registration through the host.
    Invalidated,
    /// The free callback found a host call in flight (registration or deregistration) and left the
    /// host alone.
    InvalidationSkipped,
    /// A free callback came after the host had released the registration (N was abandoned).
    LateCallback,
    /// The host released a registration it had not unpinned (a host bug); we unpin it.
    ReleasedWithoutPutPages,
    /// [`BARRIER_TRIES`] `DriverBarrier`s failed (the last errno): the work item keeps its
    /// reference, so the registration and the module stay (until reboot).
    BarrierFailed(Errno),
}

/// How many `DriverBarrier`s in a row may fail before the work item gives up waiting and keeps
/// its reference.
pub const BARRIER_TRIES: u8 = 10;

/// Why a host call fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Refusal {
    pub errno: Errno,
    pub cause: Cause,
}

impl Refusal {
    fn new(errno: Errno, cause: Cause) -> Self {
        Self { errno, cause }
    }
}

/// What the glue does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Make this call with the lock dropped, then report it with [`Registration::done`].
    Call(Op),
    /// Take back the reference handed to the driver with `PinN` and drop it (never the last one:
    /// the asking host call holds another). Then ask again.
    DropDriverRef,
    /// Take back the driver's reference, queue the work item with it (if it is already queued,
    /// drop it: the queued item holds another), and return from the callback at once, without
    /// touching the registration again. This is the callback's last step: the work item drops the
    /// reference only after `DriverBarrier`, i.e. after this callback has returned to the driver.
    HandDriverRefToWork,
    /// Queue the work item (with a new reference; if it is already queued, drop that one). Then ask
    /// again.
    QueueWork,
    /// Count or explain this. Then ask again.
    Note(Event),
    /// The actor is done; for the host, this is what its call answers.
    Return(Result<(), Refusal>),
}

/// What the glue must do under the same lock as [`Registration::done`], before anyone else can
/// see the new state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Commit {
    Nothing,
    /// dma_map succeeded: copy the filled SG entries into the host's table now.
    PublishSg,
}

/// A host call that breaks the peer-memory protocol. The glue refuses it with EINVAL, logs its
/// kind and counts it; the registration is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A call arrived while another call of the host for the same registration was in flight.
    Overlap,
    /// A call arrived in a phase where it makes no sense (e.g. dma_map before get_pages).
    OutOfOrder,
    /// get_pages asked for a range other than the one acquire accepted.
    RangeMismatch,
}

impl Violation {
    /// For the log.
    pub fn explain(self) -> &'static str {
        match self {
            Violation::Overlap => "a call overlapping another call for the same registration",
            Violation::OutOfOrder => "a call out of the protocol's order",
            Violation::RangeMismatch => "get_pages for another range than acquire's",
        }
    }
}

/// The non-persistent pin N of the invalidating flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NPin {
    None,
    /// `nvidia_p2p_get_pages` in flight.
    Pinning,
    /// Pinned; the driver may call back.
    Armed,
    /// `nvidia_p2p_put_pages` to be made (proven) or in flight.
    Unpinning,
    /// [`Op::ProveUnpinN`] is to show, or is showing, that the owner still reaches N's object,
    /// before its unpin. The driver may still call back.
    Proving,
    /// Left to the driver (foreign task, or the driver refused the unpin): it may still call back.
    Abandoned,
    /// The driver's teardown called back: N is the driver's, and dead once the callback returns.
    TornDown,
    /// Unpinned by us; the driver will never call back.
    Gone,
}

impl NPin {
    /// May the driver still call our callback for N?
    fn armed(self) -> bool {
        matches!(
            self,
            NPin::Pinning | NPin::Armed | NPin::Unpinning | NPin::Proving | NPin::Abandoned
        )
    }
}

/// Where the host's current call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum HostStage {
    Start,
    /// Waiting for the result of this call.
    Waiting(Op),
    /// dma_map failed after mapping P: unmap it, then fail with this.
    Undo(Refusal),
    /// The undoing unmap is in flight; then fail with this.
    Undoing(Refusal),
    /// put_pages / release: let go of everything this registration holds.
    LetGo,
    /// Give this answer next.
    Finish(Result<(), Refusal>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct HostActivity {
    call: InFlight,
    caller: Tgid,
    stage: HostStage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum CallbackStage {
    Idle,
    /// Started: decide whether the host is to be asked to invalidate.
    Start,
    /// The host's invalidate is in flight.
    Invalidating,
    /// The host's invalidate returned.
    Invalidated,
    /// Hand over to the work item and return. `invalidated`: the host's invalidate was called
    /// for this registration. An "ex" host (`PEER_MEM_INVALIDATE_UNMAPS`) then calls neither
    /// dma_unmap nor put_pages for it before release (peer_mem.c: the MR is marked invalidated
    /// and its deregistration skips the unmap).
    Finish {
        invalidated: bool,
    },
    /// Returned (the driver calls a pin back at most once).
    Done {
        invalidated: bool,
    },
}

impl CallbackStage {
    /// Has the host's invalidate been called (and returned) for this registration?
    fn invalidated(self) -> bool {
        matches!(
            self,
            CallbackStage::Invalidated
                | CallbackStage::Finish { invalidated: true }
                | CallbackStage::Done { invalidated: true }
        )
    }
}

/// What an actor has to tell the glue before its next call or answer: the glue's side effects
/// that follow from a result, decided under the lock with the result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Pending {
    note: Option<Event>,
    drop_driver_ref: bool,
    queue_work: bool,
}

impl Pending {
    fn take(&mut self) -> Option<Step> {
        if let Some(e) = self.note.take() {
            return Some(Step::Note(e));
        }
        if core::mem::take(&mut self.drop_driver_ref) {
            return Some(Step::DropDriverRef);
        }
        if core::mem::take(&mut self.queue_work) {
            return Some(Step::QueueWork);
        }
        None
    }
}

/// The persistent pin P, which acquire takes and the registration maps for the host's device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PPin {
    /// Pinned. `release`: P is to be unpinned (the host let go, or the callback took over for a
    /// host that will not).
    Held { using: PUse, release: bool },
    /// `UnpinP` returned (unpinned, or refused by the driver: then the pin stays the driver's,
    /// and no callback can come of a persistent pin).
    Gone,
}

/// What is being done with a held P: one call at a time, whoever makes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum PUse {
    /// Not mapped, no call on it.
    Idle,
    /// Reserved by a dma_map: `MapP` in flight.
    Mapping,
    /// `MapP` succeeded; P stays reserved for that dma_map until its `FillSg` is reported.
    MappedReserved,
    /// DMA-mapped for the host's device, no call on it.
    Mapped,
    /// `UnmapP` in flight.
    Unmapping,
    /// `UnpinP` in flight.
    Unpinning,
}

impl PPin {
    fn held(self) -> bool {
        matches!(self, PPin::Held { .. })
    }
    /// Held and being used as `u`.
    fn is(self, u: PUse) -> bool {
        matches!(self, PPin::Held { using, .. } if using == u)
    }
    fn mapped(self) -> bool {
        matches!(
            self,
            PPin::Held {
                using: PUse::MappedReserved | PUse::Mapped | PUse::Unmapping,
                ..
            }
        )
    }
    /// Held and to be unpinned.
    fn to_release(self) -> bool {
        matches!(self, PPin::Held { release: true, .. })
    }
    fn set(&mut self, u: PUse) {
        if let PPin::Held { using, .. } = self {
            *using = u;
        }
    }
    fn mark_release(&mut self) {
        if let PPin::Held { release, .. } = self {
            *release = true;
        }
    }
}

/// Our work item, as the workqueue runs it: queueing a running item queues it again, and the
/// kernel never runs one item twice at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum WorkRun {
    Idle,
    Queued,
    Running,
    /// Running, and queued again.
    RunningQueued,
}

impl WorkRun {
    fn queued(self) -> bool {
        matches!(self, WorkRun::Queued | WorkRun::RunningQueued)
    }
    fn queue(&mut self) {
        *self = match *self {
            WorkRun::Running | WorkRun::RunningQueued => WorkRun::RunningQueued,
            WorkRun::Idle | WorkRun::Queued => WorkRun::Queued,
        };
    }
}

/// The work item's wait for the teardown that called us back (`DriverBarrier`), before it lets
/// go of the reference the callback handed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Barrier {
    /// None due. `failed`: barriers that failed in a row before the one in flight, if one is
    /// (reset by one that succeeds; [`BARRIER_TRIES`] once the work item kept its reference).
    NotDue { failed: u8 },
    /// Due, after `failed` failures in a row.
    Due { failed: u8 },
    /// [`BARRIER_TRIES`] barriers failed: nothing shows the teardown has returned, so the work
    /// item keeps its reference for good (taken by [`Registration::take_keep`]).
    GaveUp,
}

impl Barrier {
    /// Barriers that failed in a row so far ([`BARRIER_TRIES`] once the work item gave up).
    fn failed(self) -> u8 {
        match self {
            Barrier::NotDue { failed } | Barrier::Due { failed } => failed,
            Barrier::GaveUp => BARRIER_TRIES,
        }
    }
}

/// What a lingering registration and one that may adopt it ([`Registration::adoptable`]) have in
/// common: the process, and the GPU page N pins, which is the first page of the range N was
/// pinned for. A registration whose range starts on another page pins an N of its own, even where
/// its range holds a lingering N's page: the glue then finds a registration to adopt by this key
/// alone, in one bucket of a hash table ([`LingerKey::bucket`]), however many registrations
/// linger, instead of comparing every lingering one with the new range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LingerKey {
    owner: Tgid,
    n_page: u64,
}

impl LingerKey {
    /// The key of a registration of `range` by process `tgid`.
    pub fn of(range: GpuRange, tgid: Tgid) -> Self {
        Self {
            owner: tgid,
            n_page: range.first_page().start(),
        }
    }

    /// Which of `buckets` buckets (a power of two) this key falls in: the GPU page's index mixed
    /// with the process id (Fibonacci hashing: the top bits of a product by 2^64 / phi), so that
    /// one process's consecutive pages, and the same page of several processes, spread.
    pub fn bucket(&self, buckets: usize) -> usize {
        debug_assert!(buckets.is_power_of_two() && buckets > 1);
        let page = self.n_page >> GPU_PAGE_SHIFT;
        let mixed =
            (page ^ (u64::from(self.owner as u32) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (mixed >> (64 - buckets.trailing_zeros())) as usize
    }
}

/// The state of one registration. See the module documentation for the rules.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Registration {
    flavour: Flavour,
    /// The range the host registered. Its first page is the GPU page N pins (invalidating
    /// flavour), also after a later registration adopted this one: only a range that starts on
    /// that page may ([`Registration::adoptable`]), so no field of its own keeps N's page.
    range: GpuRange,
    owner: Tgid,
    n_release: NRelease,
    core_context: u64,
    phase: Phase,
    p: PPin,
    /// The non-persistent pin N (invalidating flavour). While N may be called back, and until
    /// its callback has handed over, the driver holds the reference handed over with `PinN`
    /// ([`Registration::driver_holds_ref`]).
    n: NPin,
    callback: CallbackStage,
    host: Option<HostActivity>,
    host_pending: Pending,
    work_pending: Pending,
    work: WorkRun,
    barrier: Barrier,
}

impl Registration {
    /// A registration acquire accepted, holding the persistent pin P it took, for `owner`.
    pub fn acquired(flavour: Flavour, range: GpuRange, owner: Tgid) -> Self {
        Self {
            flavour,
            range,
            owner,
            n_release: NRelease::Linger,
            core_context: 0,
            phase: Phase::Acquired,
            p: PPin::Held {
                using: PUse::Idle,
                release: false,
            },
            n: NPin::None,
            callback: CallbackStage::Idle,
            host: None,
            host_pending: Pending::default(),
            work_pending: Pending::default(),
            work: WorkRun::Idle,
            barrier: Barrier::NotDue { failed: 0 },
        }
    }

    /// The same registration, whose owner's deregistration proves and unpins N
    /// ([`NRelease::ProveThenUnpin`]): for the protocol model's record of that client only.
    pub fn proving_then_unpinning(mut self) -> Self {
        self.n_release = NRelease::ProveThenUnpin;
        self
    }

    pub fn flavour(&self) -> Flavour {
        self.flavour
    }
    pub fn range(&self) -> GpuRange {
        self.range
    }
    pub fn owner(&self) -> Tgid {
        self.owner
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn core_context(&self) -> u64 {
        self.core_context
    }
    pub fn n_pin(&self) -> NPin {
        self.n
    }
    /// Does the driver hold a reference to this registration (as a callback's `data`)? From
    /// `PinN` while N may be called back, and through a callback until it hands the reference
    /// to the work item.
    pub fn driver_holds_ref(&self) -> bool {
        self.n.armed()
            || (self.n == NPin::TornDown && !matches!(self.callback, CallbackStage::Done { .. }))
    }
    /// Is P still pinned?
    pub fn holds_persistent_pin(&self) -> bool {
        self.p.held()
    }
    /// Is P DMA-mapped?
    pub fn is_mapped(&self) -> bool {
        self.p.mapped()
    }
    /// Is a free callback of this registration running?
    pub fn callback_running(&self) -> bool {
        matches!(
            self.callback,
            CallbackStage::Start
                | CallbackStage::Invalidating
                | CallbackStage::Invalidated
                | CallbackStage::Finish { .. }
        )
    }
    /// Is a host call between its steps?
    pub fn host_call_in_flight(&self) -> bool {
        self.host.is_some()
    }
    /// Is the work item queued or running?
    pub fn work_pending(&self) -> bool {
        self.work != WorkRun::Idle || matches!(self.barrier, Barrier::Due { .. })
    }
    /// Nothing of the driver's is held any more and no actor is busy.
    pub fn quiescent(&self) -> bool {
        !self.p.held()
            && !self.driver_holds_ref()
            && self.host.is_none()
            && !self.callback_running()
            && !self.work_pending()
    }

    /// May the host's current call make a driver call that takes the API lock? Not while a
    /// callback of this registration runs (rule 3): the host may hold the mapping lock that the
    /// callback's invalidation waits for, while the callback's task holds the API lock.
    fn host_may_take_api_lock(&self) -> bool {
        !self.callback_running()
    }

    /// The host starts `call` from process `caller`.
    pub fn begin(&mut self, call: HostCall, caller: Tgid) -> Result<(), Violation> {
        if self.host.is_some() {
            return Err(Violation::Overlap);
        }
        match call {
            HostCall::GetPages {
                range,
                core_context,
            } => {
                // N is None, or adopted: armed, or called back since ([`Registration::adopt`]).
                if self.phase != Phase::Acquired
                    || !matches!(self.n, NPin::None | NPin::Armed | NPin::TornDown)
                {
                    return Err(Violation::OutOfOrder);
                }
                if range != self.range {
                    return Err(Violation::RangeMismatch);
                }
                self.core_context = core_context;
            }
            HostCall::DmaMap => {
                if self.phase != Phase::Pinned {
                    return Err(Violation::OutOfOrder);
                }
            }
            HostCall::DmaUnmap => {
                if self.phase == Phase::Released {
                    return Err(Violation::OutOfOrder);
                }
                // Leaving `Mapped` first thing: from here on a callback sees a host call in flight.
                if self.phase == Phase::Mapped {
                    self.phase = Phase::Unmapped;
                }
            }
            HostCall::PutPages => match self.phase {
                Phase::Pinned | Phase::Mapped | Phase::Unmapped => {
                    self.phase = Phase::Unpinned;
                    self.p.mark_release();
                }
                // After a failed get_pages the host does not call put_pages; harmless if it does.
                Phase::Acquired => {}
                Phase::Unpinned | Phase::Released => return Err(Violation::OutOfOrder),
            },
            HostCall::Release => {
                if self.phase == Phase::Released {
                    return Err(Violation::OutOfOrder);
                }
                if !self.callback.invalidated()
                    && matches!(self.phase, Phase::Pinned | Phase::Mapped | Phase::Unmapped)
                {
                    // Pinned for the host and never put, and not invalidated (after which an
                    // "ex" host rightly skips dma_unmap and put_pages): the host skipped put_pages.
                    self.host_pending.note = Some(Event::ReleasedWithoutPutPages);
                }
                self.phase = Phase::Released;
                self.p.mark_release();
            }
        }
        self.host = Some(HostActivity {
            call: call.into(),
            caller,
            stage: HostStage::Start,
        });
        Ok(())
    }

    /// The driver's free callback started. `false`: it is not ours to act on (a persistent
    /// registration, or no pin of ours the driver could call back for): return at once.
    pub fn begin_callback(&mut self) -> bool {
        if self.flavour != Flavour::Invalidating
            || !self.n.armed()
            || self.callback != CallbackStage::Idle
        {
            return false;
        }
        self.n = NPin::TornDown;
        self.callback = CallbackStage::Start;
        true
    }

    /// Is N left to the driver after the host's release, not yet called back (the registration
    /// *lingers*)? The glue lists such a registration, for [`Registration::adoptable`], until
    /// its callback claims N or a registration adopts it.
    pub fn lingers(&self) -> bool {
        self.phase == Phase::Released
            && self.n == NPin::Abandoned
            && self.callback == CallbackStage::Idle
    }

    /// May a registration of `range` by process `tgid`, whose persistent pin acquire has just
    /// made, take this one over instead of pinning an N of its own? Only a registration the host
    /// has released whose N was left to the driver and not yet called back (it *lingers*), with
    /// nothing else of it in flight, of the same process, and whose N pins the first page of
    /// `range` (the page the new registration's own N would pin: [`LingerKey`]). Then N is of the
    /// new range's allocation: the new persistent pin shows that allocation is live, N not called
    /// back shows N's is, a free calls every pin of an allocation back before its address can be
    /// registered to other memory, and live allocations do not overlap. The caller asks under the
    /// registration lock, which the callback takes to claim N.
    pub fn adoptable(&self, range: GpuRange, tgid: Tgid) -> bool {
        self.flavour == Flavour::Invalidating
            && self.lingers()
            && self.owner == tgid
            && self.host.is_none()
            && self.work == WorkRun::Idle
            && matches!(self.barrier, Barrier::NotDue { .. })
            && self.host_pending == Pending::default()
            && self.work_pending == Pending::default()
            && !self.p.held()
            && LingerKey::of(range, tgid) == self.linger_key()
    }

    /// What a registration that adopts this one must match: its process and N's page.
    pub fn linger_key(&self) -> LingerKey {
        LingerKey::of(self.range, self.owner)
    }

    /// Takes this lingering registration over ([`Registration::adoptable`]) for a new one of
    /// `range`, holding the persistent pin P that acquire made: as [`Registration::acquired`],
    /// but with N armed and the driver's reference kept. get_pages then pins nothing.
    pub fn adopt(&mut self, range: GpuRange) {
        debug_assert!(self.adoptable(range, self.owner));
        // N's page stays the first page of the range: `adoptable` compared the keys.
        self.range = range;
        self.core_context = 0;
        self.phase = Phase::Acquired;
        self.p = PPin::Held {
            using: PUse::Idle,
            release: false,
        };
        self.n = NPin::Armed;
    }

    /// Must the work item keep its reference for good ([`BARRIER_TRIES`] barriers failed)? True
    /// once: the one reference kept is the running work item's.
    pub fn take_keep(&mut self) -> bool {
        if self.barrier != Barrier::GaveUp {
            return false;
        }
        self.barrier = Barrier::NotDue {
            failed: BARRIER_TRIES,
        };
        true
    }

    /// The work item started running.
    pub fn begin_work(&mut self) {
        self.work = WorkRun::Running;
    }

    /// ([`NRelease::ProveThenUnpin`] only: the model's record of the client before N lingered.)
    /// Asked again under `N_PINS`, right before the driver call of `op`: is it still to be made?
    /// Between the step that asked for the call and `N_PINS`, the driver's free callback may have
    /// torn N down (it marks N torn down before the driver frees N's table, which the driver does
    /// as soon as the callback returns: `nv_p2p_mem_info_free_callback` [NV-TEARDOWN]): N's table
    /// may then be freed and its address another pin's (put_pages finds a pin by that address
    /// among the caller's [NV-MULTI-PIN, NV-PUT-PAGES-LOOKUP]), so no put_pages of N; and no
    /// proof, since the callback has N and the driver's reference. The result of a call not made
    /// is `Ok`, which [`Registration::done`] ignores once N is torn down.
    pub fn still_to_make(&self, op: Op) -> bool {
        match op {
            Op::UnpinN => self.n == NPin::Unpinning,
            Op::ProveUnpinN => self.n == NPin::Proving,
            _ => true,
        }
    }

    /// The next step for `actor`.
    pub fn next(&mut self, actor: Actor) -> Step {
        match actor {
            Actor::Host => self.next_host(),
            Actor::Callback => self.next_callback(),
            Actor::Work => self.next_work(),
        }
    }

    /// `actor`'s call `op` returned `result` (`Err` holds the errno). The caller holds the
    /// lock, and carries out the returned [`Commit`] before dropping it.
    pub fn done(&mut self, actor: Actor, op: Op, result: Result<(), Errno>) -> Commit {
        match op {
            Op::MapP if result.is_ok() => {
                // P stays reserved for this dma_map until its commit (FillSg).
                self.p.set(PUse::MappedReserved);
            }
            Op::MapP | Op::UnmapP => self.p.set(PUse::Idle),
            Op::UnpinP => {
                // A refused unpin of P is not retried: the pin stays with the driver (no callback
                // can come of a persistent pin), and the event says so.
                self.p = PPin::Gone;
                let note = match result {
                    Ok(()) => Event::Unpinned,
                    Err(errno) => Event::UnpinPFailed(errno),
                };
                match actor {
                    Actor::Work => self.work_pending.note = Some(note),
                    _ => self.host_pending.note = Some(note),
                }
            }
            _ => {}
        }
        match actor {
            Actor::Host => self.host_done(op, result),
            Actor::Callback => {
                if op == Op::Invalidate {
                    self.callback = CallbackStage::Invalidated;
                }
                Commit::Nothing
            }
            Actor::Work => {
                if op == Op::DriverBarrier {
                    let failed = self.barrier.failed();
                    self.barrier = match result {
                        Ok(()) => Barrier::NotDue { failed: 0 },
                        Err(errno) => {
                            // The driver failed before or after taking its API lock: it may not
                            // have waited. Ask again, a bounded number of times (each failure
                            // after the lock is a WARN in nv-p2p.c); then keep the reference
                            // rather than free the registration under a callback.
                            let failed = failed.saturating_add(1);
                            if failed < BARRIER_TRIES {
                                Barrier::Due { failed }
                            } else {
                                self.work_pending.note = Some(Event::BarrierFailed(errno));
                                Barrier::GaveUp
                            }
                        }
                    };
                }
                Commit::Nothing
            }
        }
    }

    fn set_host_stage(&mut self, stage: HostStage) {
        if let Some(h) = self.host.as_mut() {
            h.stage = stage;
        }
    }

    fn host_call(&mut self, op: Op) -> Step {
        self.set_host_stage(HostStage::Waiting(op));
        Step::Call(op)
    }

    fn host_return(&mut self, result: Result<(), Refusal>) -> Step {
        self.host = None;
        Step::Return(result)
    }

    fn next_host(&mut self) -> Step {
        if let Some(step) = self.host_pending.take() {
            return step;
        }
        let Some(h) = self.host else {
            return Step::Return(Ok(()));
        };
        match h.stage {
            // Asked again before the call was reported: the glue never does that; repeat it.
            HostStage::Waiting(op) => Step::Call(op),
            HostStage::Undoing(_) => Step::Call(Op::UnmapP),
            HostStage::Finish(result) => self.host_return(result),
            HostStage::Undo(refusal) => {
                if self.p.is(PUse::Mapped) {
                    self.p.set(PUse::Unmapping);
                    self.set_host_stage(HostStage::Undoing(refusal));
                    return Step::Call(Op::UnmapP);
                }
                self.host_return(Err(refusal))
            }
            HostStage::LetGo => self.let_go(h.caller),
            HostStage::Start => match h.call {
                InFlight::GetPages => match self.flavour {
                    Flavour::Persistent => {
                        // acquire's pin is the registration's pin.
                        self.phase = Phase::Pinned;
                        self.host_return(Ok(()))
                    }
                    Flavour::Invalidating => match self.n {
                        NPin::Armed => {
                            // Adopted: N is pinned and armed already.
                            self.phase = Phase::Pinned;
                            self.host_return(Ok(()))
                        }
                        // Adopted, and the memory freed since: the callback has claimed N.
                        NPin::TornDown => self.host_return(Err(FREED)),
                        _ => {
                            // The glue hands the driver a reference with the call.
                            self.n = NPin::Pinning;
                            self.host_call(Op::PinN)
                        }
                    },
                },
                InFlight::DmaMap => {
                    if self.n == NPin::TornDown || self.callback_running() {
                        return self.host_return(Err(FREED));
                    }
                    if !self.p.is(PUse::Idle) {
                        // Not reachable: P is the host's alone until the registration is Mapped.
                        return self
                            .host_return(Err(Refusal::new(Errno::EINVAL, Cause::HostProtocol)));
                    }
                    // P is reserved for this dma_map from the allocation to the commit.
                    self.p.set(PUse::Mapping);
                    self.host_call(Op::MapP)
                }
                InFlight::DmaUnmap => {
                    if self.p.is(PUse::Mapped) {
                        self.p.set(PUse::Unmapping);
                        return self.host_call(Op::UnmapP);
                    }
                    // Not mapped (after a failed dma_map, a repeated call, or the work item already
                    // unmapped it), or the work item is unmapping it: nothing to do.
                    self.host_return(Ok(()))
                }
                InFlight::PutPages => {
                    if self.phase != Phase::Unpinned {
                        // put_pages after a failed get_pages: nothing was pinned for it.
                        return self.host_return(Ok(()));
                    }
                    self.set_host_stage(HostStage::LetGo);
                    self.let_go(h.caller)
                }
                InFlight::Release => {
                    self.set_host_stage(HostStage::LetGo);
                    self.let_go(h.caller)
                }
            },
        }
    }

    /// put_pages and release: unmap P, unpin N (from the owner only) and P, as this context allows.
    fn let_go(&mut self, caller: Tgid) -> Step {
        let api = self.host_may_take_api_lock();
        if self.p.is(PUse::Mapped) {
            self.p.set(PUse::Unmapping);
            return self.host_call(Op::UnmapP);
        }
        if self.n == NPin::Armed {
            if caller != self.owner {
                // nvidia_p2p_put_pages would find nothing among the caller's pins and answer 0:
                // the pin stays armed, with our reference as its data, until the owner frees it.
                self.n = NPin::Abandoned;
                return Step::Note(Event::UnpinNForeign);
            }
            if self.n_release == NRelease::Linger {
                // Left to the driver as from a foreign task: no put_pages of N, whose 0 would
                // prove nothing (the module documentation, rule 2).
                self.n = NPin::Abandoned;
                return Step::Note(Event::NLingers);
            }
            if api {
                // First the proof that the owner still reaches N's object, then the unpin.
                self.n = NPin::Proving;
                return self.host_call(Op::ProveUnpinN);
            }
            // Not reachable: a running callback has torn N down before anyone could see it armed.
        }
        if self.n == NPin::Unpinning && api {
            // Proven (above): unpin. (A running callback has torn N down: never Unpinning here
            // without the API lock.)
            return self.host_call(Op::UnpinN);
        }
        if self.p.to_release() && self.p.is(PUse::Idle) {
            if api {
                self.p.set(PUse::Unpinning);
                return self.host_call(Op::UnpinP);
            }
            if !self.work.queued() {
                self.work.queue();
                return Step::QueueWork;
            }
        }
        // If P is busy, the work item is unmapping or unpinning it, and finishes by itself.
        self.host_return(Ok(()))
    }

    fn host_done(&mut self, op: Op, result: Result<(), Errno>) -> Commit {
        let Some(h) = self.host else {
            return Commit::Nothing;
        };
        match (h.call, op) {
            (InFlight::GetPages, Op::PinN) => {
                let answer = match result {
                    Ok(()) if self.n == NPin::Pinning => {
                        self.n = NPin::Armed;
                        self.phase = Phase::Pinned;
                        Ok(())
                    }
                    // The memory was freed between the pin and its return to us: the callback
                    // has claimed the pin and our reference.
                    Ok(()) => Err(FREED),
                    Err(errno) => {
                        // The driver keeps no callback for a failed pin: its reference comes back.
                        if self.n == NPin::Pinning {
                            self.n = NPin::None;
                            self.host_pending.drop_driver_ref = true;
                        }
                        // P proves the range was GPU memory of this process at acquire: the driver
                        // not finding it now means it was freed (or unmapped) meanwhile.
                        Err(if errno == Errno::EINVAL {
                            FREED
                        } else {
                            Refusal::new(errno, Cause::of_pin_errno(errno))
                        })
                    }
                };
                self.set_host_stage(HostStage::Finish(answer));
            }
            (InFlight::DmaMap, Op::MapP) => match result {
                Ok(()) => self.set_host_stage(HostStage::Waiting(Op::FillSg)),
                Err(errno) => {
                    // Nothing mapped. ENOMEM also stands for SG entries the glue could not
                    // allocate: out of memory either way (`Cause::of_map_errno`).
                    let refusal = if self.n == NPin::TornDown {
                        FREED
                    } else {
                        Refusal::new(errno, Cause::of_map_errno(errno))
                    };
                    self.set_host_stage(HostStage::Finish(Err(refusal)));
                }
            },
            (InFlight::DmaMap, Op::FillSg) => {
                // P is no longer reserved: either unmapped next (Undo), or handed to the host.
                self.p.set(PUse::Mapped);
                let refusal = match result {
                    // The glue's EIO: a page the driver did not map (`tables::FailedPageScan`).
                    Err(Errno::EIO) => Some(Refusal::new(Errno::EIO, Cause::PartialDmaMapping)),
                    Err(_) => Some(Refusal::new(Errno::EINVAL, Cause::UnknownLayout)),
                    Ok(()) if self.n == NPin::TornDown => Some(FREED),
                    Ok(()) => None,
                };
                match refusal {
                    Some(refusal) => self.set_host_stage(HostStage::Undo(refusal)),
                    None => {
                        // Committed under this very lock: a callback from now on invalidates.
                        self.phase = Phase::Mapped;
                        self.set_host_stage(HostStage::Finish(Ok(())));
                        return Commit::PublishSg;
                    }
                }
            }
            (InFlight::DmaMap, Op::UnmapP) => {
                if let HostStage::Undoing(refusal) = h.stage {
                    self.set_host_stage(HostStage::Finish(Err(refusal)));
                }
            }
            (InFlight::DmaUnmap, Op::UnmapP) => {
                self.set_host_stage(HostStage::Finish(Ok(())));
                if self.p.to_release() && !self.work.queued() {
                    // The callback took P over meanwhile: the work item unpins it.
                    self.work.queue();
                    self.host_pending.queue_work = true;
                }
            }
            (InFlight::PutPages | InFlight::Release, Op::UnmapP | Op::UnpinP) => {
                self.set_host_stage(HostStage::LetGo);
            }
            (InFlight::PutPages | InFlight::Release, Op::UnpinN) => {
                match result {
                    Ok(()) => {
                        if self.n == NPin::Unpinning {
                            // Found among the owner's pins, which the proof showed it reaches,
                            // and unpinned: no callback will come. (Had the teardown unlinked it
                            // first, its callback, which runs under the API lock our call waited
                            // for, would have claimed N already.)
                            self.n = NPin::Gone;
                            self.host_pending.drop_driver_ref = true;
                        }
                    }
                    Err(errno) => {
                        if self.n == NPin::Unpinning {
                            self.n = NPin::Abandoned;
                        }
                        self.host_pending.note = Some(Event::UnpinNFailed(errno));
                    }
                }
                self.set_host_stage(HostStage::LetGo);
            }
            (InFlight::PutPages | InFlight::Release, Op::ProveUnpinN) => {
                if self.n == NPin::Proving {
                    match result {
                        Ok(()) => {
                            // The owner reaches N's object: its put_pages will find N (let_go).
                            self.n = NPin::Unpinning;
                        }
                        Err(errno) => {
                            // The memory is not found, and no callback has claimed N (a free
                            // calls it back before the memory stops being found, under the same
                            // hold of the API lock): the owner has left N's object, or the
                            // driver failed. put_pages would prove nothing: N stays armed, with
                            // our reference as its data, until the memory is freed.
                            self.n = NPin::Abandoned;
                            self.host_pending.note = Some(Event::UnpinNUnproven(errno));
                        }
                    }
                }
                self.set_host_stage(HostStage::LetGo);
            }
            _ => {}
        }
        Commit::Nothing
    }

    fn next_callback(&mut self) -> Step {
        match self.callback {
            CallbackStage::Start => {
                if self.phase == Phase::Mapped {
                    self.callback = CallbackStage::Invalidating;
                    return Step::Call(Op::Invalidate);
                }
                self.callback = CallbackStage::Finish { invalidated: false };
                Step::Note(if self.phase == Phase::Released {
                    Event::LateCallback
                } else {
                    Event::InvalidationSkipped
                })
            }
            CallbackStage::Invalidating => Step::Call(Op::Invalidate),
            CallbackStage::Invalidated => {
                self.callback = CallbackStage::Finish { invalidated: true };
                Step::Note(Event::Invalidated)
            }
            CallbackStage::Finish { invalidated } => {
                self.callback = CallbackStage::Done { invalidated };
                if self.phase == Phase::Mapped {
                    // Still mapped after the invalidation: the host (of an "ex" client) will not
                    // call dma_unmap/put_pages for it. The work item lets go of P.
                    self.p.mark_release();
                }
                // The work item always runs after this: it unpins P if that is wanted, and drops
                // the driver's reference (handed over with this step), which may be the last one.
                self.work.queue();
                self.barrier = Barrier::Due {
                    failed: self.barrier.failed(),
                };
                Step::HandDriverRefToWork
            }
            CallbackStage::Idle | CallbackStage::Done { .. } => Step::Return(Ok(())),
        }
    }

    fn next_work(&mut self) -> Step {
        if let Some(step) = self.work_pending.take() {
            return step;
        }
        if let Barrier::Due { failed } = self.barrier {
            self.barrier = Barrier::NotDue { failed };
            return Step::Call(Op::DriverBarrier);
        }
        if self.p.to_release() {
            let (using, op) = if self.p.is(PUse::Mapped) {
                (PUse::Unmapping, Op::UnmapP)
            } else {
                (PUse::Unpinning, Op::UnpinP)
            };
            if self.p.is(PUse::Mapped) || self.p.is(PUse::Idle) {
                self.p.set(using);
                return Step::Call(op);
            }
        }
        // If P is busy, its user (a host call) queues the work item again when done.
        self.work = if self.work == WorkRun::RunningQueued {
            WorkRun::Queued
        } else {
            WorkRun::Idle
        };
        Step::Return(Ok(()))
    }
}

/// A registration freed while it was being registered.
const FREED: Refusal = Refusal {
    errno: Errno::EFAULT,
    cause: Cause::FreedWhileRegistering,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logic::range::GPU_PAGE_SIZE;
    use std::vec::Vec;

    const OWNER: Tgid = 100;
    const CHILD: Tgid = 200;

    fn range() -> GpuRange {
        GpuRange::covering(0x10_0000, 0x2_0000).unwrap()
    }

    /// Runs `actor` until it returns, answering each call with `answer`; returns every step.
    fn run(
        r: &mut Registration,
        actor: Actor,
        mut answer: impl FnMut(&mut Registration, Op) -> Result<(), Errno>,
    ) -> (Vec<Step>, Result<(), Refusal>) {
        let mut steps = Vec::new();
        for _ in 0..64 {
            let step = r.next(actor);
            steps.push(step);
            match step {
                Step::Call(op) => {
                    let result = answer(r, op);
                    r.done(actor, op, result);
                }
                Step::Return(result) => return (steps, result),
                // The callback's last step: it returns at once.
                Step::HandDriverRefToWork => return (steps, Ok(())),
                _ => {}
            }
        }
        panic!("actor {actor:?} did not return: {steps:?}");
    }

    fn ok(_: &mut Registration, _: Op) -> Result<(), Errno> {
        Ok(())
    }

    /// An answer that fails `failed` with `errno` and lets every other call succeed.
    fn failing(failed: Op, errno: Errno) -> impl FnMut(&mut Registration, Op) -> Result<(), Errno> {
        move |_, op| if op == failed { Err(errno) } else { Ok(()) }
    }

    fn calls(steps: &[Step]) -> Vec<Op> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Call(op) => Some(*op),
                _ => None,
            })
            .collect()
    }

    /// Runs a host call that succeeds; returns its steps.
    fn host(r: &mut Registration, call: HostCall, caller: Tgid) -> Vec<Step> {
        r.begin(call, caller).unwrap();
        let (steps, result) = run(r, Actor::Host, ok);
        assert_eq!(result, Ok(()), "{call:?}: {steps:?}");
        steps
    }

    fn get_pages() -> HostCall {
        HostCall::GetPages {
            range: range(),
            core_context: 7,
        }
    }

    fn mapped(flavour: Flavour) -> Registration {
        mapped_as(Registration::acquired(flavour, range(), OWNER))
    }

    /// An invalidating registration, mapped, whose owner's deregistration proves and unpins N
    /// ([`NRelease::ProveThenUnpin`], the client before N lingered; the model's record of it).
    fn mapped_proving() -> Registration {
        mapped_as(
            Registration::acquired(Flavour::Invalidating, range(), OWNER).proving_then_unpinning(),
        )
    }

    fn mapped_as(mut r: Registration) -> Registration {
        host(&mut r, get_pages(), OWNER);
        let steps = host(&mut r, HostCall::DmaMap, OWNER);
        assert_eq!(calls(&steps), [Op::MapP, Op::FillSg]);
        assert_eq!(r.phase(), Phase::Mapped);
        r
    }

    /// The free's callback of a registration the host has released, its N left to the driver:
    /// it claims N (the registration no longer lingers), leaves the host alone and hands the
    /// driver's reference to the work item, which waits for the teardown to be over, then drops it.
    fn late_callback_lets_go(r: &mut Registration) {
        assert!(r.begin_callback());
        assert!(!r.lingers());
        let (steps, _) = run(r, Actor::Callback, ok);
        assert_eq!(
            steps,
            [Step::Note(Event::LateCallback), Step::HandDriverRefToWork]
        );
        assert_eq!(work(r), [Op::DriverBarrier]);
        assert!(r.quiescent());
    }

    /// Runs the work item if it is queued.
    fn work(r: &mut Registration) -> Vec<Op> {
        assert!(r.work_pending(), "no work queued: {r:?}");
        r.begin_work();
        calls(&run(r, Actor::Work, ok).0)
    }

    #[test]
    fn persistent_registration_pins_once_and_lets_go_from_any_task() {
        let mut r = mapped(Flavour::Persistent);
        assert_eq!(
            calls(&host(&mut r, HostCall::DmaUnmap, CHILD)),
            [Op::UnmapP]
        );
        let steps = host(&mut r, HostCall::PutPages, CHILD);
        assert_eq!(calls(&steps), [Op::UnpinP]);
        assert!(steps.contains(&Step::Note(Event::Unpinned)));
        assert!(calls(&host(&mut r, HostCall::Release, CHILD)).is_empty());
        assert!(r.quiescent());
    }

    #[test]
    fn the_owner_s_deregistration_leaves_n_to_linger_until_the_free_calls_it_back() {
        let mut r = mapped(Flavour::Invalidating);
        assert!(r.driver_holds_ref());
        assert_eq!(
            calls(&host(&mut r, HostCall::DmaUnmap, OWNER)),
            [Op::UnmapP]
        );
        let steps = host(&mut r, HostCall::PutPages, OWNER);
        // P goes; N is neither proven nor unpinned: no put_pages whose 0 would prove nothing.
        assert_eq!(calls(&steps), [Op::UnpinP]);
        assert!(steps.contains(&Step::Note(Event::NLingers)));
        assert!(!steps.contains(&Step::DropDriverRef));
        assert!(!r.lingers(), "not before the host's release");
        host(&mut r, HostCall::Release, OWNER);
        assert!(r.lingers());
        assert!(r.driver_holds_ref());
        assert!(!r.quiescent());
        // The free calls N back: late, the host left alone; the work item lets go.
        late_callback_lets_go(&mut r);
    }

    #[test]
    fn the_client_before_proved_and_unpinned_n_at_the_owner_s_deregistration() {
        let mut r = mapped_proving();
        host(&mut r, HostCall::DmaUnmap, OWNER);
        let steps = host(&mut r, HostCall::PutPages, OWNER);
        assert_eq!(calls(&steps), [Op::ProveUnpinN, Op::UnpinN, Op::UnpinP]);
        assert!(steps.contains(&Step::DropDriverRef));
        host(&mut r, HostCall::Release, OWNER);
        assert!(r.quiescent());
    }

    #[test]
    fn a_foreign_task_cannot_unpin_n_so_the_registration_waits_for_the_callback() {
        let mut r = mapped(Flavour::Invalidating);
        host(&mut r, HostCall::DmaUnmap, CHILD);
        let steps = host(&mut r, HostCall::PutPages, CHILD);
        // P goes (any task may unpin it); N stays with the driver, and so does its reference.
        assert_eq!(calls(&steps), [Op::UnpinP]);
        assert!(steps.contains(&Step::Note(Event::UnpinNForeign)));
        host(&mut r, HostCall::Release, CHILD);
        assert!(r.driver_holds_ref());
        assert!(!r.quiescent());
        // The owner frees the memory: the callback leaves the host alone and lets go.
        late_callback_lets_go(&mut r);
    }

    /// A registration of the owner whose N was left to the driver at deregistration (here by a
    /// foreign task): it lingers until the free's callback.
    fn lingering() -> Registration {
        let mut r = mapped(Flavour::Invalidating);
        host(&mut r, HostCall::DmaUnmap, CHILD);
        host(&mut r, HostCall::PutPages, CHILD);
        host(&mut r, HostCall::Release, CHILD);
        assert_eq!(r.n_pin(), NPin::Abandoned);
        r
    }

    #[test]
    fn a_later_registration_of_the_owner_adopts_a_lingering_n_and_pins_no_n_of_its_own() {
        let mut r = lingering();
        // Only the owner, and only for a range that starts on N's page.
        assert!(!r.adoptable(range(), CHILD));
        let elsewhere = GpuRange::covering(0x20_0000, 0x1_0000).unwrap();
        assert!(!r.adoptable(elsewhere, OWNER));
        let from_before = GpuRange::covering(0xf_0000, 0x4_0000).unwrap();
        assert!(from_before.covers(range().start(), GPU_PAGE_SIZE));
        assert!(
            !r.adoptable(from_before, OWNER),
            "holds N's page, but does not start there"
        );
        let larger = GpuRange::covering(range().start(), 0x4_0000).unwrap();
        assert!(r.adoptable(larger, OWNER));
        assert_eq!(LingerKey::of(larger, OWNER), r.linger_key());
        r.adopt(larger);
        assert_eq!(r.range(), larger);
        assert!(r.driver_holds_ref());
        let steps = host(
            &mut r,
            HostCall::GetPages {
                range: larger,
                core_context: 8,
            },
            OWNER,
        );
        assert!(calls(&steps).is_empty(), "no pin of N: {steps:?}");
        assert_eq!(r.phase(), Phase::Pinned);
        assert_eq!(r.core_context(), 8);
        let steps = host(&mut r, HostCall::DmaMap, OWNER);
        assert_eq!(calls(&steps), [Op::MapP, Op::FillSg]);
        // The free calls N back: the adopted registration is the one invalidated.
        assert!(r.begin_callback());
        let (steps, _) = run(&mut r, Actor::Callback, ok);
        assert_eq!(calls(&steps), [Op::Invalidate]);
    }

    #[test]
    fn linger_keys_spread_over_the_buckets() {
        const BUCKETS: usize = 256;
        let fill = |keys: &mut dyn Iterator<Item = LingerKey>| {
            let mut n = [0u32; BUCKETS];
            for k in keys {
                n[k.bucket(BUCKETS)] += 1;
            }
            (*n.iter().min().unwrap(), *n.iter().max().unwrap())
        };
        // One process's 4096 consecutive GPU pages (a 256 MiB allocation registered a page at a
        // time), then the same page of 4096 processes: 16 a bucket on average.
        let page = |i: u64| GpuRange::covering(0x7f00_0000_0000 + i * GPU_PAGE_SIZE, 1).unwrap();
        let (lo, hi) = fill(&mut (0..4096).map(|i| LingerKey::of(page(i), OWNER)));
        assert!(
            lo >= 8 && hi <= 24,
            "one process's pages: {lo}..{hi} a bucket"
        );
        let (lo, hi) = fill(&mut (1..=4096).map(|tgid| LingerKey::of(page(0), tgid)));
        assert!(
            lo >= 8 && hi <= 24,
            "one page of many processes: {lo}..{hi} a bucket"
        );
    }

    #[test]
    fn a_lingering_n_called_back_is_not_adopted_nor_one_in_use() {
        // Called back: N is the driver's, and the new registration pins its own.
        let mut r = lingering();
        assert!(r.begin_callback());
        assert!(!r.adoptable(range(), OWNER));
        // Not released yet: N is the live registration's.
        let r = mapped(Flavour::Invalidating);
        assert!(!r.adoptable(range(), OWNER));
        // Adopted, then called back before get_pages: the memory went.
        let mut r = lingering();
        r.adopt(range());
        assert!(r.begin_callback());
        let (steps, _) = run(&mut r, Actor::Callback, ok);
        assert!(calls(&steps).is_empty(), "not mapped: no invalidation");
        r.begin(get_pages(), OWNER).unwrap();
        let (steps, result) = run(&mut r, Actor::Host, ok);
        assert!(calls(&steps).is_empty());
        assert_eq!(result, Err(FREED));
    }

    #[test]
    fn a_failed_barrier_is_made_again_before_the_work_item_lets_go() {
        // The driver may fail before it takes its API lock (it could not enter RM): then it has
        // not waited for the teardown, and nothing may be let go yet.
        let mut r = mapped(Flavour::Invalidating);
        assert!(r.begin_callback());
        assert_eq!(run(&mut r, Actor::Callback, ok).1, Ok(()));
        r.begin_work();
        let mut barriers = 0;
        let (steps, _) = run(&mut r, Actor::Work, |_, op| {
            if op == Op::DriverBarrier {
                barriers += 1;
                if barriers == 1 {
                    return Err(Errno::ENOMEM);
                }
            }
            Ok(())
        });
        assert_eq!(
            calls(&steps),
            [Op::DriverBarrier, Op::DriverBarrier, Op::UnmapP, Op::UnpinP]
        );
        assert!(r.quiescent());
    }

    #[test]
    fn a_barrier_that_keeps_failing_is_given_up_and_the_reference_kept() {
        let mut r = mapped(Flavour::Invalidating);
        assert!(r.begin_callback());
        assert_eq!(run(&mut r, Actor::Callback, ok).1, Ok(()));
        r.begin_work();
        let (steps, _) = run(&mut r, Actor::Work, |_, op| {
            if op == Op::DriverBarrier {
                return Err(Errno::ENOMEM);
            }
            Ok(())
        });
        let barriers = calls(&steps)
            .iter()
            .filter(|&&op| op == Op::DriverBarrier)
            .count();
        assert_eq!(barriers, usize::from(BARRIER_TRIES));
        assert!(steps.contains(&Step::Note(Event::BarrierFailed(Errno::ENOMEM))));
        // P is still let go of; the reference is kept, once.
        assert!(!r.holds_persistent_pin());
        assert!(r.take_keep());
        assert!(!r.take_keep());
    }

    #[test]
    fn callback_on_a_mapped_registration_invalidates_and_the_work_item_lets_go_of_p() {
        // An "ex" host: invalidation makes no calls into the client.
        let mut r = mapped(Flavour::Invalidating);
        assert!(r.begin_callback());
        let (steps, _) = run(&mut r, Actor::Callback, ok);
        assert_eq!(calls(&steps), [Op::Invalidate]);
        assert_eq!(r.core_context(), 7);
        assert!(steps.contains(&Step::Note(Event::Invalidated)));
        assert!(steps.iter().all(|s| match s {
            Step::Call(op) => !op.takes_driver_api_lock(),
            _ => true,
        }));
        assert_eq!(work(&mut r), [Op::DriverBarrier, Op::UnmapP, Op::UnpinP]);
        // The host deregisters the invalidated MR later, calling neither dma_unmap nor put_pages
        // (peer_mem.c: an invalidated umem's deregistration skips them): nothing left to do, and
        // nothing to complain about.
        let steps = host(&mut r, HostCall::Release, CHILD);
        assert!(calls(&steps).is_empty());
        assert!(!steps.contains(&Step::Note(Event::ReleasedWithoutPutPages)));
        assert!(r.quiescent());
    }

    #[test]
    fn legacy_host_unmaps_inline_and_the_unpin_is_left_to_the_work_item() {
        let mut r = mapped(Flavour::Invalidating);
        assert!(r.begin_callback());
        let (steps, _) = run(&mut r, Actor::Callback, |r, op| {
            if op == Op::Invalidate {
                // The legacy host calls dma_unmap and put_pages on the callback's task.
                let s = host(r, HostCall::DmaUnmap, OWNER);
                assert_eq!(calls(&s), [Op::UnmapP]);
                let s = host(r, HostCall::PutPages, OWNER);
                assert!(
                    calls(&s).is_empty(),
                    "no API-lock call under the callback: {s:?}"
                );
                assert!(s.contains(&Step::QueueWork));
            }
            Ok(())
        });
        assert_eq!(calls(&steps), [Op::Invalidate]);
        assert_eq!(r.core_context(), 7);
        assert_eq!(work(&mut r), [Op::DriverBarrier, Op::UnpinP]);
        host(&mut r, HostCall::Release, OWNER);
        assert!(r.quiescent());
    }

    #[test]
    fn callback_during_dma_map_fails_the_map_without_invalidating() {
        let mut r = Registration::acquired(Flavour::Invalidating, range(), OWNER);
        host(&mut r, get_pages(), OWNER);
        r.begin(HostCall::DmaMap, OWNER).unwrap();
        let (steps, result) = run(&mut r, Actor::Host, |r, op| {
            if op == Op::MapP {
                // cudaFree while our dma_map_pages of P waits for the driver's API lock.
                assert!(r.begin_callback());
                let (cb, _) = run(r, Actor::Callback, ok);
                assert!(calls(&cb).is_empty());
                assert!(cb.contains(&Step::Note(Event::InvalidationSkipped)));
            }
            Ok(())
        });
        assert_eq!(calls(&steps), [Op::MapP, Op::FillSg, Op::UnmapP]);
        assert_eq!(result, Err(FREED));
        // The host unwinds: put_pages (P goes), release.
        let steps = host(&mut r, HostCall::PutPages, OWNER);
        assert_eq!(calls(&steps), [Op::UnpinP]);
        host(&mut r, HostCall::Release, OWNER);
        work(&mut r);
        assert!(r.quiescent());
    }

    /// SG entries the glue cannot allocate (or a mapping the driver cannot) end the dma_map out
    /// of memory with nothing mapped and nothing to undo; P is free for the host's next try.
    #[test]
    fn a_dma_map_out_of_memory_maps_nothing_and_may_be_tried_again() {
        for flavour in [Flavour::Persistent, Flavour::Invalidating] {
            let mut r = Registration::acquired(flavour, range(), OWNER);
            host(&mut r, get_pages(), OWNER);
            r.begin(HostCall::DmaMap, OWNER).unwrap();
            let (steps, result) = run(&mut r, Actor::Host, failing(Op::MapP, Errno::ENOMEM));
            assert_eq!(calls(&steps), [Op::MapP]);
            assert_eq!(result, Err(Refusal::new(Errno::ENOMEM, Cause::OutOfMemory)));
            assert!(!r.is_mapped());
            assert_eq!(r.phase(), Phase::Pinned);
            let steps = host(&mut r, HostCall::DmaMap, OWNER);
            assert_eq!(calls(&steps), [Op::MapP, Op::FillSg]);
            assert_eq!(r.phase(), Phase::Mapped);
        }
    }

    #[test]
    fn a_half_made_mapping_is_unmapped_and_refused() {
        for flavour in [Flavour::Persistent, Flavour::Invalidating] {
            let mut r = Registration::acquired(flavour, range(), OWNER);
            host(&mut r, get_pages(), OWNER);
            r.begin(HostCall::DmaMap, OWNER).unwrap();
            let (steps, result) = run(&mut r, Actor::Host, failing(Op::FillSg, Errno::EIO));
            assert_eq!(calls(&steps), [Op::MapP, Op::FillSg, Op::UnmapP]);
            assert_eq!(
                result,
                Err(Refusal::new(Errno::EIO, Cause::PartialDmaMapping))
            );
            assert!(!r.is_mapped());
            assert_eq!(r.phase(), Phase::Pinned);
        }
    }

    #[test]
    fn callback_while_get_pages_returns_fails_it_and_keeps_the_reference_with_the_callback() {
        let mut r = Registration::acquired(Flavour::Invalidating, range(), OWNER);
        r.begin(get_pages(), OWNER).unwrap();
        let (steps, result) = run(&mut r, Actor::Host, |r, _| {
            assert!(r.begin_callback());
            assert_eq!(run(r, Actor::Callback, ok).1, Ok(()));
            Ok(())
        });
        assert_eq!(result, Err(FREED));
        assert!(!steps.contains(&Step::DropDriverRef));
        host(&mut r, HostCall::Release, OWNER);
        work(&mut r);
        assert!(r.quiescent());
    }

    #[test]
    fn failed_pin_gives_the_reference_back_and_says_why() {
        let mut r = Registration::acquired(Flavour::Invalidating, range(), OWNER);
        r.begin(get_pages(), OWNER).unwrap();
        let (steps, result) = run(&mut r, Actor::Host, |_, _| Err(Errno::EINVAL));
        assert!(steps.contains(&Step::DropDriverRef));
        assert_eq!(result, Err(FREED));
        let mut r = Registration::acquired(Flavour::Invalidating, range(), OWNER);
        r.begin(get_pages(), OWNER).unwrap();
        let (_, result) = run(&mut r, Actor::Host, |_, _| Err(Errno::ENOMEM));
        assert_eq!(
            result,
            Err(Refusal::new(Errno::ENOMEM, Cause::Bar1Exhausted))
        );
    }

    #[test]
    fn a_refused_unpin_of_n_keeps_the_registration_for_the_callback() {
        let mut r = mapped_proving();
        host(&mut r, HostCall::DmaUnmap, OWNER);
        r.begin(HostCall::PutPages, OWNER).unwrap();
        let (steps, _) = run(&mut r, Actor::Host, failing(Op::UnpinN, Errno::EIO));
        assert!(steps.contains(&Step::Note(Event::UnpinNFailed(Errno::EIO))));
        assert!(r.driver_holds_ref());
        host(&mut r, HostCall::Release, OWNER);
        assert!(r.begin_callback());
        assert_eq!(run(&mut r, Actor::Callback, ok).1, Ok(()));
        work(&mut r);
        assert!(r.quiescent());
    }

    #[test]
    fn an_unpin_the_owner_cannot_prove_keeps_the_registration_for_the_callback() {
        // An MPS client whose RM client was freed: its put_pages finds nothing and answers 0, and
        // its lookup of the memory fails too. N stays armed.
        let mut r = mapped_proving();
        host(&mut r, HostCall::DmaUnmap, OWNER);
        r.begin(HostCall::PutPages, OWNER).unwrap();
        let (steps, result) = run(&mut r, Actor::Host, failing(Op::ProveUnpinN, Errno::EINVAL));
        assert_eq!(result, Ok(()));
        // No put_pages: it would find nothing and prove nothing.
        assert_eq!(calls(&steps), [Op::ProveUnpinN, Op::UnpinP]);
        assert!(steps.contains(&Step::Note(Event::UnpinNUnproven(Errno::EINVAL))));
        assert!(!steps.contains(&Step::DropDriverRef));
        assert!(r.driver_holds_ref());
        assert_eq!(r.n_pin(), NPin::Abandoned);
        host(&mut r, HostCall::Release, OWNER);
        assert!(!r.quiescent());
        // The server frees the memory: the callback comes, late, and the work item lets go.
        late_callback_lets_go(&mut r);
    }

    #[test]
    fn a_callback_during_the_proof_claims_n_and_the_proof_is_ignored() {
        // put_pages found nothing (the owner left), and the memory is freed while the proof runs:
        // the callback claims N and the reference; whatever the proof answers changes nothing.
        for proof in [Ok(()), Err(Errno::EINVAL)] {
            let mut r = mapped_proving();
            host(&mut r, HostCall::DmaUnmap, OWNER);
            r.begin(HostCall::PutPages, OWNER).unwrap();
            let (steps, _) = run(&mut r, Actor::Host, |r, op| {
                if op == Op::ProveUnpinN {
                    assert!(r.begin_callback());
                    assert_eq!(run(r, Actor::Callback, ok).1, Ok(()));
                    return proof;
                }
                Ok(())
            });
            assert!(!steps.contains(&Step::DropDriverRef));
            assert!(!steps
                .iter()
                .any(|s| matches!(s, Step::Note(Event::UnpinNUnproven(_)))));
            assert_eq!(r.n_pin(), NPin::TornDown);
            host(&mut r, HostCall::Release, OWNER);
            work(&mut r);
            assert!(r.quiescent());
        }
    }

    #[test]
    fn release_without_put_pages_lets_go_and_says_so() {
        let mut r = mapped(Flavour::Invalidating);
        let steps = host(&mut r, HostCall::Release, OWNER);
        assert_eq!(steps[0], Step::Note(Event::ReleasedWithoutPutPages));
        assert_eq!(calls(&steps), [Op::UnmapP, Op::UnpinP]);
        assert!(r.lingers());
        let mut r = mapped_proving();
        let steps = host(&mut r, HostCall::Release, OWNER);
        assert_eq!(
            calls(&steps),
            [Op::UnmapP, Op::ProveUnpinN, Op::UnpinN, Op::UnpinP]
        );
        assert!(r.quiescent());
    }

    #[test]
    fn protocol_violations_are_refused() {
        let mut r = Registration::acquired(Flavour::Invalidating, range(), OWNER);
        assert_eq!(r.begin(HostCall::DmaMap, OWNER), Err(Violation::OutOfOrder));
        let other = GpuRange::covering(0x20_0000, 0x1_0000).unwrap();
        assert_eq!(
            r.begin(
                HostCall::GetPages {
                    range: other,
                    core_context: 1
                },
                OWNER
            ),
            Err(Violation::RangeMismatch)
        );
        r.begin(get_pages(), OWNER).unwrap();
        assert_eq!(r.begin(HostCall::Release, OWNER), Err(Violation::Overlap));
        assert_eq!(run(&mut r, Actor::Host, ok).1, Ok(()));
        host(&mut r, HostCall::Release, OWNER);
        assert_eq!(
            r.begin(HostCall::Release, OWNER),
            Err(Violation::OutOfOrder)
        );
    }

    #[test]
    fn a_callback_before_n_pins_cancels_the_proof_and_the_unpin_it_overtook() {
        for overtaken in [Op::ProveUnpinN, Op::UnpinN] {
            let mut r = mapped_proving();
            host(&mut r, HostCall::DmaUnmap, OWNER);
            r.begin(HostCall::PutPages, OWNER).unwrap();
            assert_eq!(r.next(Actor::Host), Step::Call(Op::ProveUnpinN));
            if overtaken == Op::UnpinN {
                assert_eq!(
                    r.done(Actor::Host, Op::ProveUnpinN, Ok(())),
                    Commit::Nothing
                );
                assert_eq!(r.next(Actor::Host), Step::Call(Op::UnpinN));
            }
            assert!(overtaken.takes_n_pins() && overtaken.asked_again());
            assert!(r.still_to_make(overtaken));
            // The free callback, before the host's task got N_PINS.
            assert!(r.begin_callback());
            assert!(!r.still_to_make(overtaken), "{overtaken:?}");
            assert!(r.still_to_make(Op::UnpinP));
        }
    }

    #[test]
    fn persistent_registrations_never_act_on_callbacks() {
        let mut r = mapped(Flavour::Persistent);
        assert!(!r.begin_callback());
    }
}
