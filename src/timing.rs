// SPDX-License-Identifier: GPL-2.0

//! Time accounting: how long each step of the module's callbacks takes, measured in the run itself,
//! for the benchmark's "own time per registration" (issue 23).
//!
//! Off by default (module parameter `time_accounting`, writable at runtime). Each entry point (the
//! host's callbacks, the driver's free callback, the work item) reads the switch once, with one
//! relaxed atomic load, into a [`Timing`] it hands down to the code it runs; when the switch was
//! off, nothing else happens: no clock is read and no counter touched. When it was on, every
//! [`Span`] reads the monotonic clock when it starts and when it is dropped, and adds one call and
//! the nanoseconds in between to the global counter of its (entry point, step), a relaxed atomic
//! like the statistics'. The steps and the file's text are in `logic::timing`; the counters are
//! shown, and reset by a write, in /sys/kernel/debug/<module>/time ([`FILE`]).
//!
//! What it costs when on: a clock read (`ktime_get`) at each span's start and end (one for both
//! when a lock's wait ends and its hold starts) and two relaxed atomic additions per span; nested
//! spans include the reads of those inside them. The file's `timing.clock_read` line says what a
//! read costs on this machine.

use core::fmt;
use core::ops::{Deref, DerefMut};

use crate::kapi::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use crate::kapi::{self, SeqFile};
use crate::logic::timing::{self as report, Cell};
pub(crate) use crate::logic::timing::{Entry, Step};

/// The parameter `time_accounting`: its value lives here, and the C shim's parameter operations
/// store and load it through the two functions below (so no C variable is written under readers).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// The parameter's set operation (shim.c), at load and on each write of
/// /sys/module/<module>/parameters/time_accounting. Entry points that have already read the
/// switch finish as they started.
#[no_mangle]
pub(crate) extern "C" fn peermem_time_accounting_store(on: bool) {
    ENABLED.store(on, Relaxed);
}

/// The parameter's get operation (shim.c).
#[no_mangle]
pub(crate) extern "C" fn peermem_time_accounting_load() -> bool {
    ENABLED.load(Relaxed)
}

/// One (entry point, step): spans counted and their nanoseconds.
struct Counter {
    calls: AtomicU64,
    ns: AtomicU64,
}

impl Counter {
    const fn new() -> Self {
        Self {
            calls: AtomicU64::new(0),
            ns: AtomicU64::new(0),
        }
    }
}

/// The counters, entry point major.
static COUNTERS: [Counter; Entry::COUNT * Step::COUNT] =
    [const { Counter::new() }; Entry::COUNT * Step::COUNT];

fn counter(entry: Entry, step: Step) -> Option<&'static Counter> {
    COUNTERS.get(entry.index() * Step::COUNT + step.index())
}

fn add(entry: Entry, step: Step, ns: u64) {
    if let Some(c) = counter(entry, step) {
        c.calls.fetch_add(1, Relaxed);
        c.ns.fetch_add(ns, Relaxed);
    }
}

/// Whether, and under which entry point, the code of one entry point's run is timed. Read once
/// at the entry point ([`Timing::begin`]) and passed down by value.
#[derive(Clone, Copy)]
pub(crate) struct Timing {
    entry: Entry,
    on: bool,
}

impl Timing {
    /// The entry point `entry` starts: the one load of the switch for its whole run.
    pub(crate) fn begin(entry: Entry) -> Self {
        Self {
            entry,
            on: ENABLED.load(Relaxed),
        }
    }

    /// Times `step` from now until the returned span is dropped; `None` (nothing timed) when off.
    pub(crate) fn span(self, step: Step) -> Option<Span> {
        self.on.then(|| Span {
            entry: self.entry,
            step,
            start: kapi::monotonic_ns(),
        })
    }

    /// Runs `f`, timed as `step`.
    pub(crate) fn time<R>(self, step: Step, f: impl FnOnce() -> R) -> R {
        let _span = self.span(step);
        f()
    }

    /// Takes a lock with `take`, timing the wait as `wait` and then, until the returned guard is
    /// dropped (unlock included), the hold as `hold`.
    pub(crate) fn lock<G>(self, wait: Step, hold: Step, take: impl FnOnce() -> G) -> Held<G> {
        let waiting = self.span(wait);
        let guard = take();
        Held {
            guard,
            _hold: waiting.map(|w| w.then(hold)),
        }
    }
}

/// A step being timed: dropping it adds the time since it started to its counter.
#[must_use]
pub(crate) struct Span {
    entry: Entry,
    step: Step,
    start: u64,
}

impl Span {
    /// Ends this step and starts `next` at the same instant, with one clock read.
    fn then(mut self, next: Step) -> Self {
        let now = kapi::monotonic_ns();
        add(self.entry, self.step, now.saturating_sub(self.start));
        self.step = next;
        self.start = now;
        self
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let ns = kapi::monotonic_ns().saturating_sub(self.start);
        add(self.entry, self.step, ns);
    }
}

/// A lock guard whose hold is timed ([`Timing::lock`]). Fields drop in order: the lock is released
/// before the hold's span ends.
pub(crate) struct Held<G> {
    guard: G,
    _hold: Option<Span>,
}

impl<G: Deref> Deref for Held<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Held<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// Back-to-back clock reads made for the file's `timing.clock_read` line.
const CLOCK_READS: u64 = 64;

/// /sys/kernel/debug/<module>/time: the counters (`logic::timing::write`); a write resets them.
pub(crate) static FILE: SeqFile = SeqFile {
    show,
    write: Some(reset),
};

fn show(w: &mut dyn fmt::Write) -> fmt::Result {
    let read = |entry, step| match counter(entry, step) {
        Some(c) => Cell {
            calls: c.calls.load(Relaxed),
            ns: c.ns.load(Relaxed),
        },
        None => Cell::default(),
    };
    // CLOCK_READS reads after the first one: as many intervals between reads.
    let first = kapi::monotonic_ns();
    let mut last = first;
    for _ in 0..CLOCK_READS {
        last = kapi::monotonic_ns();
    }
    let clock_read = Cell {
        calls: CLOCK_READS,
        ns: last.saturating_sub(first),
    };
    report::write(w, read, clock_read)
}

/// Zeroes every counter. Spans in flight add to the zeroed counters when they end; reset while
/// the module is idle for an exact count.
fn reset() {
    for c in &COUNTERS {
        c.calls.store(0, Relaxed);
        c.ns.store(0, Relaxed);
    }
}
