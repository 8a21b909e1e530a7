// SPDX-License-Identifier: GPL-2.0

//! The steps peermem-rs times when its `time_accounting` parameter is on, and the text of its
//! debugfs file `time` (the counters themselves are atomics in `src/timing.rs`).
//!
//! Every span of time is counted under the entry point whose run it belongs to (one of the host's
//! callbacks, the NVIDIA driver's free callback, or the module's work item) and under the step it
//! measured, so that the provider's time inside each callback can be told from the module's own.
//! The file has one line per (entry point, step) that has been timed since load or the last reset,
//! `<entry>.<step> <calls> <ns>`, then, for each entry point that has run, a derived line
//! `<entry>.own <calls> <ns>`: its `total` minus the time spent in other code it called and waited
//! for ([`Step::outside`]: the `nvidia_p2p_*` calls, the host's invalidate, a retry's sleep).

use core::fmt;

/// Where a span was timed: the entry point of the module's code that ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Entry {
    /// The host's acquire callback.
    Acquire,
    /// The host's get_pages callback.
    GetPages,
    /// The host's dma_map callback.
    DmaMap,
    /// The host's dma_unmap callback.
    DmaUnmap,
    /// The host's put_pages callback.
    PutPages,
    /// The host's release callback.
    Release,
    /// The NVIDIA driver's free callback (invalidating client).
    FreeCallback,
    /// The module's work item (deferred unpins, and the end of a free callback's work).
    WorkItem,
}

impl Entry {
    /// Every entry point, in the file's order.
    pub const ALL: [Entry; 8] = [
        Entry::Acquire,
        Entry::GetPages,
        Entry::DmaMap,
        Entry::DmaUnmap,
        Entry::PutPages,
        Entry::Release,
        Entry::FreeCallback,
        Entry::WorkItem,
    ];
    /// Number of entry points.
    pub const COUNT: usize = Self::ALL.len();

    /// Index into the counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Entry::Acquire => "acquire",
            Entry::GetPages => "get_pages",
            Entry::DmaMap => "dma_map",
            Entry::DmaUnmap => "dma_unmap",
            Entry::PutPages => "put_pages",
            Entry::Release => "release",
            Entry::FreeCallback => "free_callback",
            Entry::WorkItem => "work_item",
        }
    }
}

/// What a span measured. Spans nest: a step's time includes the steps timed inside it (see
/// [`Step::within`]), and every step lies within its entry point's `total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// The whole entry point: from its `extern "C"` function's start to its return (the work
    /// item: `run`).
    Total,
    /// `nvidia_p2p_get_pages`: the notification pin N with the free callback (and, in a build for
    /// a driver without the persistent API, every persistent pin).
    NvGetPages,
    /// `nvidia_p2p_get_pages_persistent`: acquire's pin P, and the proof pin before N's unpin.
    NvGetPagesPersistent,
    /// `nvidia_p2p_put_pages` of N (and, without the persistent API, of P).
    NvPutPages,
    /// `nvidia_p2p_put_pages_persistent`: P's unpin, and the proof pin's.
    NvPutPagesPersistent,
    /// `nvidia_p2p_dma_map_pages` of P.
    NvDmaMapPages,
    /// `nvidia_p2p_dma_unmap_pages` of P.
    NvDmaUnmapPages,
    /// `nvidia_p2p_put_pages` with a key that is no pin's: the work item's wait for the driver's
    /// teardown (`DriverBarrier`).
    NvPutPagesBarrier,
    /// The host's invalidate function, called from the free callback.
    HostInvalidate,
    /// The sleep after a failed `DriverBarrier`, before it is tried again.
    BarrierRetrySleep,
    /// Waiting for the registration's spinlock (`RegCtx::inner`).
    RegLockWait,
    /// Holding the registration's spinlock, its unlock included.
    RegLockHold,
    /// Waiting for the module-wide mutex `LINGERING` (the table of lingering registrations).
    LingeringLockWait,
    /// Holding `LINGERING`, its unlock included.
    LingeringLockHold,
    /// The registration state machine (`logic::registration`): its construction, `begin`, `next`,
    /// `done` and the other questions the glue asks it.
    StateMachine,
    /// Allocating the registration context (`RegCtx`: `Arc::pin_init`).
    RegCtxAlloc,
    /// Dropping a reference to the registration that may be its last (release's, the work
    /// item's): when it is, the `RegCtx` and its module reference are freed here.
    RegCtxFree,
    /// Allocating the SG entries (`sg_alloc_table`).
    SgAlloc,
    /// Checking the DMA mapping's header before filling.
    SgCheck,
    /// Writing the DMA addresses into the SG entries, each page checked as mapped in the same
    /// pass.
    SgFill,
    /// Copying the SG table header into the host's table (under the registration's lock).
    SgPublish,
    /// Freeing the SG entries (release).
    SgFree,
    /// Updating the statistics (`src/stats.rs`), an explanation's log line included.
    Stats,
    /// Explaining a refusal or an event in the kernel log: the rate limit and `printk`.
    Log,
    /// Queueing the work item.
    WorkQueue,
}

impl Step {
    /// Every step, in the file's order.
    pub const ALL: [Step; 25] = [
        Step::Total,
        Step::NvGetPages,
        Step::NvGetPagesPersistent,
        Step::NvPutPages,
        Step::NvPutPagesPersistent,
        Step::NvDmaMapPages,
        Step::NvDmaUnmapPages,
        Step::NvPutPagesBarrier,
        Step::HostInvalidate,
        Step::BarrierRetrySleep,
        Step::RegLockWait,
        Step::RegLockHold,
        Step::LingeringLockWait,
        Step::LingeringLockHold,
        Step::StateMachine,
        Step::RegCtxAlloc,
        Step::RegCtxFree,
        Step::SgAlloc,
        Step::SgCheck,
        Step::SgFill,
        Step::SgPublish,
        Step::SgFree,
        Step::Stats,
        Step::Log,
        Step::WorkQueue,
    ];
    /// Number of steps.
    pub const COUNT: usize = Self::ALL.len();

    /// Index into the counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Step::Total => "total",
            Step::NvGetPages => "nvidia_p2p_get_pages",
            Step::NvGetPagesPersistent => "nvidia_p2p_get_pages_persistent",
            Step::NvPutPages => "nvidia_p2p_put_pages",
            Step::NvPutPagesPersistent => "nvidia_p2p_put_pages_persistent",
            Step::NvDmaMapPages => "nvidia_p2p_dma_map_pages",
            Step::NvDmaUnmapPages => "nvidia_p2p_dma_unmap_pages",
            Step::NvPutPagesBarrier => "nvidia_p2p_put_pages_barrier",
            Step::HostInvalidate => "host_invalidate",
            Step::BarrierRetrySleep => "barrier_retry_sleep",
            Step::RegLockWait => "reg_lock_wait",
            Step::RegLockHold => "reg_lock_hold",
            Step::LingeringLockWait => "lingering_lock_wait",
            Step::LingeringLockHold => "lingering_lock_hold",
            Step::StateMachine => "state_machine",
            Step::RegCtxAlloc => "regctx_alloc",
            Step::RegCtxFree => "regctx_free",
            Step::SgAlloc => "sg_alloc",
            Step::SgCheck => "sg_check",
            Step::SgFill => "sg_fill",
            Step::SgPublish => "sg_publish",
            Step::SgFree => "sg_free",
            Step::Stats => "stats",
            Step::Log => "log",
            Step::WorkQueue => "work_queue",
        }
    }

    /// Is this time spent outside the module's own code: in the NVIDIA driver, in the host, or
    /// asleep? `own` is `total` minus these (which never nest in one another).
    pub fn outside(self) -> bool {
        matches!(
            self,
            Step::NvGetPages
                | Step::NvGetPagesPersistent
                | Step::NvPutPages
                | Step::NvPutPagesPersistent
                | Step::NvDmaMapPages
                | Step::NvDmaUnmapPages
                | Step::NvPutPagesBarrier
                | Step::HostInvalidate
                | Step::BarrierRetrySleep
        )
    }

    /// The step whose span always encloses this one's, besides `total`; `None`: this one may be
    /// timed directly in `total`. (`lingering_lock_hold` encloses `reg_lock_*` and
    /// `state_machine` spans, but not always: not listed here.)
    pub fn within(self) -> Option<Step> {
        match self {
            Step::StateMachine | Step::SgPublish => Some(Step::RegLockHold),
            Step::Log => Some(Step::Stats),
            _ => None,
        }
    }
}

/// A counter pair: how many spans, and their nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cell {
    pub calls: u64,
    pub ns: u64,
}

/// The `own` line of an entry point whose steps' counters are `cells` (indexed by
/// [`Step::index`]): `total`'s calls, and its nanoseconds minus those of the [`Step::outside`]
/// steps (0 rather than negative, should a reset or a concurrent update leave more outside).
pub fn own(cells: &[Cell; Step::COUNT]) -> Cell {
    let mut own = Cell::default();
    let mut outside = 0u64;
    for (s, c) in Step::ALL.iter().zip(cells) {
        if *s == Step::Total {
            own = *c;
        } else if s.outside() {
            outside = outside.saturating_add(c.ns);
        }
    }
    own.ns = own.ns.saturating_sub(outside);
    own
}

/// Writes the file: for each entry point in order, its counters read by `read` (once each),
/// as `<entry>.<step> <calls> <ns>` for the steps with calls, then `<entry>.own`; and last,
/// when `clock_read` has calls, `timing.clock_read <reads> <ns>`: back-to-back reads of the clock
/// the spans use, made while writing, so that a reader can tell what a span's own reads cost.
pub fn write(
    w: &mut dyn fmt::Write,
    mut read: impl FnMut(Entry, Step) -> Cell,
    clock_read: Cell,
) -> fmt::Result {
    for e in Entry::ALL {
        let mut cells = [Cell::default(); Step::COUNT];
        for (c, s) in cells.iter_mut().zip(Step::ALL) {
            *c = read(e, s);
        }
        for (c, s) in cells.iter().zip(Step::ALL) {
            if c.calls != 0 {
                writeln!(w, "{}.{} {} {}", e.name(), s.name(), c.calls, c.ns)?;
            }
        }
        let own = own(&cells);
        if own.calls != 0 {
            writeln!(w, "{}.own {} {}", e.name(), own.calls, own.ns)?;
        }
    }
    if clock_read.calls != 0 {
        writeln!(
            w,
            "timing.clock_read {} {}",
            clock_read.calls, clock_read.ns
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::String;
    use std::vec::Vec;

    #[test]
    fn indices_follow_the_lists() {
        for (i, e) in Entry::ALL.iter().enumerate() {
            assert_eq!(e.index(), i);
        }
        for (i, s) in Step::ALL.iter().enumerate() {
            assert_eq!(s.index(), i);
        }
    }

    #[test]
    fn names_are_unique_words() {
        let mut names: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
        names.extend(Entry::ALL.iter().map(|e| e.name()));
        names.push("own");
        for n in &names {
            assert!(n
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'));
        }
        let mut steps: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
        steps.push("own");
        steps.sort_unstable();
        steps.dedup();
        assert_eq!(steps.len(), Step::COUNT + 1);
    }

    #[test]
    fn the_enclosing_step_is_not_outside() {
        for s in Step::ALL {
            if let Some(outer) = s.within() {
                assert!(!outer.outside() && !s.outside() && outer != Step::Total);
            }
        }
        assert!(!Step::Total.outside());
    }

    #[test]
    fn own_is_total_minus_outside() {
        let mut cells = [Cell::default(); Step::COUNT];
        cells[Step::Total.index()] = Cell { calls: 4, ns: 1000 };
        cells[Step::NvGetPagesPersistent.index()] = Cell { calls: 4, ns: 600 };
        cells[Step::RegLockHold.index()] = Cell { calls: 4, ns: 650 };
        cells[Step::Stats.index()] = Cell { calls: 8, ns: 40 };
        assert_eq!(own(&cells), Cell { calls: 4, ns: 400 });
        cells[Step::HostInvalidate.index()] = Cell { calls: 1, ns: 900 };
        assert_eq!(own(&cells), Cell { calls: 4, ns: 0 });
    }

    #[test]
    fn writes_timed_steps_only_with_own_lines() {
        let read = |e: Entry, s: Step| match (e, s) {
            (Entry::Acquire, Step::Total) => Cell { calls: 2, ns: 500 },
            (Entry::Acquire, Step::NvGetPagesPersistent) => Cell { calls: 2, ns: 300 },
            (Entry::Acquire, Step::RegCtxAlloc) => Cell { calls: 2, ns: 20 },
            (Entry::WorkItem, Step::Total) => Cell { calls: 1, ns: 70 },
            _ => Cell::default(),
        };
        let mut text = String::new();
        write(
            &mut text,
            read,
            Cell {
                calls: 65,
                ns: 1300,
            },
        )
        .unwrap();
        assert_eq!(
            text,
            "acquire.total 2 500\n\
             acquire.nvidia_p2p_get_pages_persistent 2 300\n\
             acquire.regctx_alloc 2 20\n\
             acquire.own 2 200\n\
             work_item.total 1 70\n\
             work_item.own 1 70\n\
             timing.clock_read 65 1300\n"
        );
    }

    #[test]
    fn nothing_timed_writes_nothing() {
        let mut text = String::new();
        write(&mut text, |_, _| Cell::default(), Cell::default()).unwrap();
        assert!(text.is_empty());
    }
}
