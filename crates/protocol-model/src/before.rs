// SPDX-License-Identifier: GPL-2.0

//! The registration state machine of peermem-rs before the fix (commit 8adc715,
//! `src/logic/registration.rs`, verbatim but for this header, the import path and `Hash`), kept so
//! that the model checker can show what it finds on the previous client: the counterexamples that
//! `tests/before.rs` asserts and `docs/model-check.md` reports.
//!
//! ---- original documentation ----
//!
//! The life of one registration: what peermem-rs may do, and must not do, at each step.
//!
//! A registration lives from `acquire` to `release`. The peer-memory host drives it (get_pages,
//! dma_map, dma_unmap, put_pages, release) and, for non-persistent pins, the NVIDIA driver may tear
//! it down at any moment from another task by calling our free callback (cudaFree, process exit),
//! after which the page table and every DMA mapping belong to the driver and die when the callback
//! returns. This module is the decision logic for that protocol; the kernel glue owns the pointers
//! and the lock, and asks this state machine before every step.
//!
//! The rules it encodes, and why:
//!
//! - Every call into the driver is bracketed: `begin_*` (under the registration lock) says whether
//!   to make the call, the call is made *without* the lock, `finish_*` (under the lock again)
//!   records the result. The lock is never held across a driver call, because the driver holds its
//!   own locks while it runs our free callback, and the callback needs our lock: holding ours while
//!   waiting for the driver's would deadlock.
//! - Once the free callback has started (`torn_down`), the driver owns the page table and mappings:
//!   no further driver call is made for them and their contents are never read again. The glue reads
//!   the driver's structures only under the lock and only when not torn down, and the callback takes
//!   the lock before it lets the driver free them, so no read can overlap the free.
//! - The callback asks the host to invalidate only when no driver call of ours is in flight for this
//!   registration. A call in flight means the host is inside registration or deregistration of this
//!   memory, holding its own lock and waiting for the driver, which waits for our callback: asking
//!   the host then would deadlock. In those cases the memory is not in the NIC's hands anyway (not
//!   mapped yet, or its key already revoked), and the torn-down flag makes the pending
//!   registration fail instead of handing out dead addresses.
//! - The driver holds a reference to the registration from the moment it may call the callback
//!   (`DriverRef::Held`). Exactly one party drops it: the callback when it ends, or put_pages when the
//!   driver confirmed the unpin (return 0) before any callback claimed it. So the registration
//!   cannot be freed under a running callback, even when `release` races with the invalidation.

use peermem_logic::errno::Errno;
use peermem_logic::range::GpuRange;

/// The two kinds of client nvidia-peermem registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// Pins with `nvidia_p2p_get_pages_persistent`: no free callback, no invalidation.
    Persistent,
    /// Pins with `nvidia_p2p_get_pages` and a free callback that invalidates through the host.
    Invalidating,
}

/// Where a registration is in its life, seen from the host's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// `acquire` said "mine"; maybe a probe pin is kept (persistent flavour).
    Acquired,
    /// `get_pages` succeeded: a pin exists (unless torn down).
    Pinned,
    /// `dma_map` succeeded: a DMA mapping exists too (unless torn down).
    Mapped,
    /// `put_pages` ran: nothing is pinned any more.
    Unpinned,
    /// `release` ran: the host is done with it.
    Released,
}

/// A driver call of ours that has begun and not finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Call {
    GetPages,
    DmaMap,
    DmaUnmap,
    PutPages,
}

/// Who owns the reference the driver holds to this registration (the `data` of the free callback).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverRef {
    /// The driver cannot call back with this registration.
    None,
    /// The driver may call the free callback with it.
    Held,
    /// A free callback has started and will drop it when it ends.
    Claimed,
}

/// A host call that breaks the peer-memory protocol. The glue refuses it with EINVAL and counts it;
/// the registration is left as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A call arrived while another call of the host for the same registration was in flight.
    Overlap,
    /// A call arrived in a phase where it makes no sense (e.g. dma_map before get_pages).
    OutOfOrder,
    /// get_pages asked for a range other than the one acquire accepted.
    RangeMismatch,
}

/// How to carry out get_pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinPlan {
    /// The persistent pin taken by acquire covers exactly this range: use it, no driver call.
    ReuseProbePin,
    /// Pin with the driver. If `drop_probe_pin` is set, first unpin that persistent probe pin
    /// (acquire's, for a range that turned out different). For the invalidating flavour the glue
    /// hands the driver a new reference to the registration (now `DriverRef::Held`).
    Pin { drop_probe_pin: Option<GpuRange> },
}

/// What get_pages' driver call amounted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PinOutcome {
    /// Pinned. The glue may read the page table now, under the lock.
    Pinned,
    /// The driver failed. `drop_driver_ref`: the reference handed over for the call must be dropped.
    Failed { drop_driver_ref: bool },
    /// The pin succeeded but the free callback ran meanwhile: the memory is being freed. The page
    /// table must not be touched; get_pages fails.
    TornDown,
}

/// What dma_map's driver call amounted to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapOutcome {
    /// Mapped. The glue may read the mapping and fill the SG table now, under the lock.
    Mapped,
    /// The driver failed; nothing to undo.
    Failed,
    /// The free callback ran meanwhile: the mapping is the driver's and dead. dma_map fails.
    TornDown,
}

/// Whether to make an unmap or unpin call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseCall {
    /// Call the driver.
    Call,
    /// Nothing to do: the driver already tore it down (or it was never there).
    Skip,
}

/// How to carry out put_pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UnpinPlan {
    /// Unmap the DMA mapping first (the host skipped dma_unmap).
    pub unmap_first: bool,
    /// Unpin through the driver; `Skip` when the driver already tore the pin down.
    pub unpin: ReleaseCall,
}

/// What the free callback must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallbackPlan {
    /// Ask the host to invalidate `core_context`, without our lock held.
    Invalidate { core_context: u64 },
    /// Do not call the host: a driver call of ours for this registration is in flight (the host is
    /// registering or deregistering it and holds its lock), or the host already released it.
    SkipInvalidate,
    /// Not ours to act on (a persistent registration, or no driver reference): do nothing.
    Ignore,
}

/// What release must clean up before the registration goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReleasePlan {
    /// A persistent probe pin from acquire that get_pages never used.
    pub put_probe_pin: Option<GpuRange>,
    /// The host released without put_pages: unmap (if mapped) and unpin ourselves.
    pub unmap: bool,
    pub unpin: bool,
}

/// The state of one registration. See the module documentation for the rules.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Registration {
    flavour: Flavour,
    /// The GPU pages acquire accepted.
    range: GpuRange,
    phase: Phase,
    in_flight: Option<Call>,
    torn_down: bool,
    callback_running: bool,
    driver_ref: DriverRef,
    probe_pin: Option<GpuRange>,
    core_context: u64,
}

impl Registration {
    /// A registration acquire accepted. `probe_pin` is the persistent pin acquire kept, if any.
    pub fn acquired(flavour: Flavour, range: GpuRange, keep_probe_pin: bool) -> Self {
        Self {
            flavour,
            range,
            phase: Phase::Acquired,
            in_flight: None,
            torn_down: false,
            callback_running: false,
            driver_ref: DriverRef::None,
            probe_pin: if keep_probe_pin && flavour == Flavour::Persistent {
                Some(range)
            } else {
                None
            },
            core_context: 0,
        }
    }

    pub fn flavour(&self) -> Flavour {
        self.flavour
    }
    pub fn range(&self) -> GpuRange {
        self.range
    }
    pub fn phase(&self) -> Phase {
        self.phase
    }
    pub fn in_flight(&self) -> Option<Call> {
        self.in_flight
    }
    pub fn torn_down(&self) -> bool {
        self.torn_down
    }
    pub fn driver_ref(&self) -> DriverRef {
        self.driver_ref
    }
    pub fn core_context(&self) -> u64 {
        self.core_context
    }
    pub fn probe_pin(&self) -> Option<GpuRange> {
        self.probe_pin
    }
    pub fn callback_running(&self) -> bool {
        self.callback_running
    }

    /// May the glue read the page table (and, when mapped, the mapping) right now?
    pub fn driver_structures_alive(&self) -> bool {
        !self.torn_down && matches!(self.phase, Phase::Pinned | Phase::Mapped)
    }

    /// Does the registration still hold a pin the driver has not torn down?
    pub fn holds_pin(&self) -> bool {
        self.driver_structures_alive() || self.probe_pin.is_some()
    }

    fn start(&mut self, call: Call) -> Result<(), Violation> {
        if self.in_flight.is_some() {
            return Err(Violation::Overlap);
        }
        self.in_flight = Some(call);
        Ok(())
    }

    fn end(&mut self, call: Call) -> Result<(), Violation> {
        if self.in_flight != Some(call) {
            return Err(Violation::OutOfOrder);
        }
        self.in_flight = None;
        Ok(())
    }

    /// get_pages arrived for `range` with the host's `core_context`.
    pub fn begin_get_pages(
        &mut self,
        range: GpuRange,
        core_context: u64,
    ) -> Result<PinPlan, Violation> {
        if self.phase != Phase::Acquired {
            return Err(if self.in_flight.is_some() {
                Violation::Overlap
            } else {
                Violation::OutOfOrder
            });
        }
        if range != self.range {
            return Err(Violation::RangeMismatch);
        }
        if self.in_flight.is_some() {
            return Err(Violation::Overlap);
        }
        self.core_context = core_context;
        if self.probe_pin == Some(range) {
            self.probe_pin = None;
            self.phase = Phase::Pinned;
            return Ok(PinPlan::ReuseProbePin);
        }
        self.start(Call::GetPages)?;
        let drop_probe_pin = self.probe_pin.take();
        if self.flavour == Flavour::Invalidating {
            self.driver_ref = DriverRef::Held;
        }
        Ok(PinPlan::Pin { drop_probe_pin })
    }

    /// get_pages' driver call returned (`pinned`: it succeeded).
    pub fn finish_get_pages(&mut self, pinned: bool) -> Result<PinOutcome, Violation> {
        self.end(Call::GetPages)?;
        if !pinned {
            // The driver kept nothing, so it cannot call back: its reference goes, unless a callback
            // somehow claimed it (then the callback drops it).
            let drop_driver_ref = self.driver_ref == DriverRef::Held;
            if drop_driver_ref {
                self.driver_ref = DriverRef::None;
            }
            return Ok(PinOutcome::Failed { drop_driver_ref });
        }
        self.phase = Phase::Pinned;
        Ok(if self.torn_down {
            PinOutcome::TornDown
        } else {
            PinOutcome::Pinned
        })
    }

    /// dma_map arrived. `Ok(false)`: the memory is being freed, refuse without a driver call.
    pub fn begin_dma_map(&mut self) -> Result<bool, Violation> {
        if self.phase != Phase::Pinned {
            return Err(if self.in_flight.is_some() {
                Violation::Overlap
            } else {
                Violation::OutOfOrder
            });
        }
        if self.torn_down {
            return Ok(false);
        }
        self.start(Call::DmaMap)?;
        Ok(true)
    }

    /// dma_map's driver call returned.
    pub fn finish_dma_map(&mut self, mapped: bool) -> Result<MapOutcome, Violation> {
        self.end(Call::DmaMap)?;
        if !mapped {
            return Ok(MapOutcome::Failed);
        }
        if self.torn_down {
            return Ok(MapOutcome::TornDown);
        }
        self.phase = Phase::Mapped;
        Ok(MapOutcome::Mapped)
    }

    /// dma_unmap arrived (from deregistration, from the host's invalidation on the callback's task,
    /// or from our own dma_map undoing a mapping it cannot use).
    pub fn begin_dma_unmap(&mut self) -> Result<ReleaseCall, Violation> {
        if self.in_flight.is_some() {
            return Err(Violation::Overlap);
        }
        if self.phase != Phase::Mapped {
            // Nothing mapped: a second dma_unmap, or one after a failed dma_map. Harmless.
            return Ok(ReleaseCall::Skip);
        }
        self.phase = Phase::Pinned;
        if self.torn_down {
            return Ok(ReleaseCall::Skip);
        }
        self.start(Call::DmaUnmap)?;
        Ok(ReleaseCall::Call)
    }

    /// dma_unmap's driver call returned.
    pub fn finish_dma_unmap(&mut self) -> Result<(), Violation> {
        self.end(Call::DmaUnmap)
    }

    /// put_pages arrived.
    pub fn begin_put_pages(&mut self) -> Result<UnpinPlan, Violation> {
        if self.in_flight.is_some() {
            return Err(Violation::Overlap);
        }
        match self.phase {
            Phase::Pinned | Phase::Mapped => {}
            // Already unpinned, or never pinned: nothing to give back.
            Phase::Unpinned | Phase::Acquired => {
                return Ok(UnpinPlan {
                    unmap_first: false,
                    unpin: ReleaseCall::Skip,
                })
            }
            Phase::Released => return Err(Violation::OutOfOrder),
        }
        let unmap_first = self.phase == Phase::Mapped && !self.torn_down;
        self.phase = Phase::Unpinned;
        if self.torn_down {
            return Ok(UnpinPlan {
                unmap_first: false,
                unpin: ReleaseCall::Skip,
            });
        }
        self.start(Call::PutPages)?;
        Ok(UnpinPlan {
            unmap_first,
            unpin: ReleaseCall::Call,
        })
    }

    /// put_pages' driver call returned (`unpinned`: it returned 0). Returns whether the driver's
    /// reference must be dropped now.
    pub fn finish_put_pages(&mut self, unpinned: bool) -> Result<bool, Violation> {
        self.end(Call::PutPages)?;
        // Only a confirmed unpin (0) means the driver will never call back. On an error we keep the
        // reference: a leak of one small structure is better than a callback into freed memory.
        if unpinned && self.driver_ref == DriverRef::Held {
            self.driver_ref = DriverRef::None;
            return Ok(true);
        }
        Ok(false)
    }

    /// The driver's free callback started.
    pub fn begin_callback(&mut self) -> CallbackPlan {
        if self.flavour != Flavour::Invalidating || self.driver_ref != DriverRef::Held {
            return CallbackPlan::Ignore;
        }
        self.driver_ref = DriverRef::Claimed;
        self.torn_down = true;
        self.callback_running = true;
        if self.in_flight.is_some() || self.phase == Phase::Released {
            CallbackPlan::SkipInvalidate
        } else {
            CallbackPlan::Invalidate {
                core_context: self.core_context,
            }
        }
    }

    /// The free callback is about to return (after which the driver frees its structures). Returns
    /// whether the callback must drop the driver's reference (it always must after `begin_callback`
    /// returned something other than `Ignore`).
    pub fn end_callback(&mut self) -> bool {
        if !self.callback_running {
            return false;
        }
        self.callback_running = false;
        self.driver_ref = DriverRef::None;
        true
    }

    /// release arrived: the host is done. Says what is left to clean up.
    pub fn release(&mut self) -> Result<ReleasePlan, Violation> {
        if self.in_flight.is_some() {
            return Err(Violation::Overlap);
        }
        if self.phase == Phase::Released {
            return Err(Violation::OutOfOrder);
        }
        let alive = !self.torn_down;
        let plan = ReleasePlan {
            put_probe_pin: self.probe_pin.take(),
            unmap: alive && self.phase == Phase::Mapped,
            unpin: alive && matches!(self.phase, Phase::Pinned | Phase::Mapped),
        };
        self.phase = Phase::Released;
        Ok(plan)
    }

    /// After a release that had to unpin: the driver confirmed the unpin (`unpinned`). Returns
    /// whether the driver's reference must be dropped.
    pub fn released_unpin_done(&mut self, unpinned: bool) -> bool {
        if unpinned && self.driver_ref == DriverRef::Held {
            self.driver_ref = DriverRef::None;
            return true;
        }
        false
    }
}

// ---- The previous glue (src/client.rs at 8adc715), as the model runs it -------------------------
//
// Each variant of `Frame` is one entry point of the old client.rs, and `pc` walks its code: a step
// under the registration lock ("lock:") is atomic, a driver or host call is pushed as a frame of
// its own. The invalidating flavour pinned only N (acquire's probe pin and unpin are left out: they
// end before get_pages and cannot touch the registration) and mapped N's page table.

use crate::{Bug, DOp, Entry, Frame as MFrame, Ours, Tid, World};

/// The previous client's per-registration data besides its state machine.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Old {
    pub reg: Registration,
    /// The table `Inner::table` points at: P (persistent) or N.
    pub table_is_p: Option<bool>,
    pub mapped: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Frame {
    pub entry: Entry,
    pub pc: u8,
}

impl Frame {
    pub fn new(entry: Entry) -> Self {
        Self { entry, pc: 0 }
    }
}

fn set(w: &mut World, tid: Tid, f: Frame, pc: u8) {
    *w.threads[tid].stack.last_mut().unwrap() = MFrame::Ours(Ours::Before(Frame { pc, ..f }));
}

fn ret(w: &mut World, tid: Tid, r: Result<(), Errno>) {
    let t = &mut w.threads[tid];
    t.stack.pop();
    t.ret = Some(r);
    if t.stack.is_empty() {
        t.done = true;
    }
}

fn call(w: &mut World, tid: Tid, op: DOp) {
    w.threads[tid].stack.push(MFrame::Driver {
        op,
        pc: crate::DriverStep::Start,
    });
}

const EINVAL: Errno = Errno::EINVAL;
const EFAULT: Errno = Errno::EFAULT;

pub fn step(w: &mut World, tid: Tid, f: Frame) -> Option<()> {
    if w.module_gone {
        w.bug(Bug::ModuleCodeAfterUnload);
    }
    let range = crate::range();
    let persistent = w.cfg.flavour == crate::Flavour::Persistent;
    match (f.entry, f.pc) {
        // acquire: the persistent pin is kept as the probe; the invalidating probe is left out.
        (Entry::Acquire, 0) => {
            set(w, tid, f, 1);
            if persistent {
                call(w, tid, DOp::PinP);
            } else {
                // The probe's outcome: is it GPU memory of the caller?
                let owner = w.threads[tid].tgid == crate::OWNER;
                w.threads[tid].ret = Some(if w.allocated && owner {
                    Ok(())
                } else {
                    Err(EINVAL)
                });
            }
        }
        (Entry::Acquire, _) => match w.take_ret(tid)? {
            Err(e) => ret(w, tid, Err(e)),
            Ok(()) => {
                w.old = Some(Old {
                    reg: Registration::acquired(
                        if persistent {
                            Flavour::Persistent
                        } else {
                            Flavour::Invalidating
                        },
                        range,
                        persistent,
                    ),
                    table_is_p: None,
                    mapped: false,
                });
                w.ctx_created = true;
                w.refs = 1;
                ret(w, tid, Ok(()));
            }
        },
        // Returning from release (after its last statement dropped the host's reference) and
        // from the callback touches the module's code but not the registration.
        (Entry::Release, 9) | (Entry::Callback, 4) => w.our_code(false, ""),
        _ => w.our_code(true, "a step of the registration (before the fix)"),
    }
    if w.bug.is_some() {
        return Some(());
    }
    match (f.entry, f.pc) {
        (Entry::Acquire, _) => {}
        _ => step_ctx(w, tid, f, range)?,
    }
    Some(())
}

fn old(w: &mut World) -> &mut Old {
    w.old.as_mut().expect("registration")
}

fn step_ctx(w: &mut World, tid: Tid, f: Frame, range: GpuRange) -> Option<()> {
    let p_or_n = |w: &mut World| old(w).table_is_p.unwrap_or(true);
    match (f.entry, f.pc) {
        // get_pages
        (Entry::GetPages, 0) => match old(w).reg.begin_get_pages(range, 0) {
            Err(_) => ret(w, tid, Err(EINVAL)),
            Ok(PinPlan::ReuseProbePin) => {
                old(w).table_is_p = Some(true);
                ret(w, tid, Ok(()));
            }
            Ok(PinPlan::Pin { .. }) => {
                // Arc::into_raw: the driver's reference.
                w.refs += 1;
                set(w, tid, f, 1);
                call(w, tid, DOp::PinN);
            }
        },
        (Entry::GetPages, _) => {
            let r = w.take_ret(tid)?;
            match old(w).reg.finish_get_pages(r.is_ok()) {
                Ok(PinOutcome::Pinned) => {
                    // table.header() under the lock.
                    if !w.n.table_alive {
                        w.bug(Bug::DriverUseAfterFree("get_pages read a freed page table"));
                    }
                    old(w).table_is_p = Some(false);
                    ret(w, tid, Ok(()));
                }
                Ok(PinOutcome::Failed { drop_driver_ref }) => {
                    if drop_driver_ref {
                        w.drop_ref();
                    }
                    ret(w, tid, Err(r.err().unwrap_or(EINVAL)));
                }
                _ => ret(w, tid, Err(EFAULT)),
            }
        }
        // dma_map
        (Entry::DmaMap, 0) => match old(w).reg.begin_dma_map() {
            Ok(true) => {
                set(w, tid, f, 1);
                let p = p_or_n(w);
                call(w, tid, DOp::Map(p));
            }
            _ => ret(w, tid, Err(EFAULT)),
        },
        (Entry::DmaMap, _) => {
            let r = w.take_ret(tid)?;
            match old(w).reg.finish_dma_map(r.is_ok()) {
                Ok(MapOutcome::Mapped) => {
                    // mapping.header() and the DMA addresses, under the lock.
                    let p = p_or_n(w);
                    let t = if p { w.p } else { w.n };
                    if !(t.table_alive && t.mapped) {
                        w.bug(Bug::DriverUseAfterFree("dma_map read a freed DMA mapping"));
                    }
                    old(w).mapped = true;
                    ret(w, tid, Ok(()));
                }
                _ => ret(w, tid, Err(EFAULT)),
            }
        }
        // dma_unmap
        (Entry::DmaUnmap, 0) => match old(w).reg.begin_dma_unmap() {
            Ok(ReleaseCall::Call) => {
                old(w).mapped = false;
                set(w, tid, f, 1);
                let p = p_or_n(w);
                call(w, tid, DOp::Unmap(p));
            }
            Ok(ReleaseCall::Skip) => {
                old(w).mapped = false;
                ret(w, tid, Ok(()));
            }
            Err(_) => ret(w, tid, Ok(())),
        },
        (Entry::DmaUnmap, _) => {
            w.returned(tid)?;
            let _ = old(w).reg.finish_dma_unmap();
            ret(w, tid, Ok(()));
        }
        // put_pages
        (Entry::PutPages, 0) => match old(w).reg.begin_put_pages() {
            Err(_) => ret(w, tid, Ok(())),
            Ok(plan) if plan.unpin == ReleaseCall::Skip => ret(w, tid, Ok(())),
            Ok(plan) => {
                let p = p_or_n(w);
                if plan.unmap_first && old(w).mapped {
                    old(w).mapped = false;
                    set(w, tid, f, 1);
                    call(w, tid, DOp::Unmap(p));
                } else {
                    set(w, tid, f, 2);
                }
            }
        },
        (Entry::PutPages, 1) => {
            w.returned(tid)?;
            set(w, tid, f, 2);
        }
        (Entry::PutPages, 2) => {
            set(w, tid, f, 3);
            let op = if p_or_n(w) {
                DOp::UnpinP
            } else {
                // Its glue's key is N's table, which it read under its lock.
                DOp::UnpinN { key: w.n.slot }
            };
            call(w, tid, op);
        }
        (Entry::PutPages, _) => {
            let r = w.take_ret(tid)?;
            // "put_pages returned 0, so the driver will never call back".
            if let Ok(true) = old(w).reg.finish_put_pages(r.is_ok()) {
                w.drop_ref();
            }
            ret(w, tid, Ok(()));
        }
        // release
        (Entry::Release, 0) => match old(w).reg.release() {
            Err(_) => {
                // The host's reference is leaked on purpose (mem::forget).
                set(w, tid, f, 9);
            }
            Ok(plan) => {
                if plan.put_probe_pin.is_some() {
                    set(w, tid, f, 1);
                    call(w, tid, DOp::UnpinP);
                } else if plan.unpin {
                    set(w, tid, f, 2);
                } else {
                    set(w, tid, f, 8);
                }
            }
        },
        (Entry::Release, 1) => {
            w.returned(tid)?;
            set(w, tid, f, 8);
        }
        (Entry::Release, 2) => {
            // Cleaning up after a host that skipped put_pages, outside the state machine.
            let p = p_or_n(w);
            if old(w).mapped {
                old(w).mapped = false;
                set(w, tid, f, 3);
                call(w, tid, DOp::Unmap(p));
            } else {
                set(w, tid, f, 3);
                w.threads[tid].ret = Some(Ok(()));
            }
        }
        (Entry::Release, 3) => {
            w.returned(tid)?;
            set(w, tid, f, 4);
            let op = if p_or_n(w) {
                DOp::UnpinP
            } else {
                // Its glue's key is N's table, which it read under its lock.
                DOp::UnpinN { key: w.n.slot }
            };
            call(w, tid, op);
        }
        (Entry::Release, 4) => {
            let r = w.take_ret(tid)?;
            if old(w).reg.released_unpin_done(r.is_ok()) {
                w.drop_ref();
            }
            set(w, tid, f, 8);
        }
        (Entry::Release, 8) => {
            // The host's reference goes.
            w.drop_ref();
            set(w, tid, f, 9);
        }
        (Entry::Release, _) => ret(w, tid, Ok(())),
        // the free callback
        (Entry::Callback, 0) => match old(w).reg.begin_callback() {
            CallbackPlan::Invalidate { .. } => {
                set(w, tid, f, 1);
                w.threads[tid]
                    .stack
                    .push(MFrame::HostInvalidate(crate::InvalidateStep::Lookup));
            }
            CallbackPlan::SkipInvalidate => set(w, tid, f, 2),
            CallbackPlan::Ignore => ret(w, tid, Ok(())),
        },
        (Entry::Callback, 1) => {
            w.returned(tid)?;
            set(w, tid, f, 2);
        }
        (Entry::Callback, 2) => {
            if old(w).reg.end_callback() {
                set(w, tid, f, 3);
            } else {
                set(w, tid, f, 4);
            }
        }
        (Entry::Callback, 3) => {
            // drop_driver_ref: maybe the last reference, and the module reference with it.
            w.drop_ref();
            set(w, tid, f, 4);
        }
        (Entry::Callback, _) => ret(w, tid, Ok(())),
        (Entry::Work, _) => ret(w, tid, Ok(())),
        (Entry::Acquire, _) => unreachable!(),
    }
    Some(())
}

/// What the previous client's code does at `f`, for traces.
pub fn describe(f: &Frame) -> &'static str {
    match (f.entry, f.pc) {
        (Entry::Acquire, 0) => "acquire: pin to probe",
        (Entry::Acquire, _) => "acquire: create the registration",
        (Entry::GetPages, 0) => "get_pages: lock, begin_get_pages, Arc::into_raw for the driver, call nvidia_p2p_get_pages",
        (Entry::GetPages, _) => "get_pages: lock, finish_get_pages, read the page table",
        (Entry::DmaMap, 0) => "dma_map: lock, begin_dma_map; unlock; call nvidia_p2p_dma_map_pages on N's table",
        (Entry::DmaMap, _) => "dma_map: lock, finish_dma_map, read the mapping",
        (Entry::DmaUnmap, 0) => "dma_unmap: lock, begin_dma_unmap; unlock; call nvidia_p2p_dma_unmap_pages",
        (Entry::DmaUnmap, _) => "dma_unmap: lock, finish_dma_unmap",
        (Entry::PutPages, 0) => "put_pages: lock, begin_put_pages",
        (Entry::PutPages, 1) => "put_pages: after the unmap",
        (Entry::PutPages, 2) => "put_pages: call nvidia_p2p_put_pages",
        (Entry::PutPages, _) => "put_pages: lock, finish_put_pages: it returned 0, so drop the driver's reference",
        (Entry::Release, 0) => "release: lock, release()",
        (Entry::Release, 8) => "release: drop the host's reference",
        (Entry::Release, 9) => "release: return to the host",
        (Entry::Release, _) => "release: clean up after the host",
        (Entry::Callback, 0) => "free callback: lock, begin_callback (a call in flight: skip the invalidation)",
        (Entry::Callback, 1) => "free callback: the host's invalidate returned",
        (Entry::Callback, 2) => "free callback: lock, end_callback",
        (Entry::Callback, 3) => "free callback: drop the driver's reference (and the module's, if last)",
        (Entry::Callback, _) => "free callback: return to the driver (module code)",
        (Entry::Work, _) => "(no work item)",
    }
}
