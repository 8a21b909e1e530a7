// SPDX-License-Identifier: GPL-2.0

//! The module's counters, its explanations of refusals, and their debugfs files.
//!
//! Counters are global atomics, so every callback can bump them without a lock. The explanation of a
//! refusal is one kernel log line, rate limited, and a per-cause counter, so an operator can tell
//! what went wrong without reproducing it.

use kernel::prelude::*;
use kernel::sync::atomic::{Atomic, Relaxed};
use kernel::time::{Instant, Monotonic};

use crate::logic::cause::Cause;
use crate::logic::range::GpuRange;
use crate::logic::ratelimit::{RateLimit, Verdict};
use crate::logic::stats::Snapshot;

/// One global counter.
struct Counter(Atomic<u64>);

impl Counter {
    const fn new() -> Self {
        Self(Atomic::new(0))
    }
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    fn sub(&self, n: u64) {
        self.0.fetch_sub(n, Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

static LIVE_REGISTRATIONS: Counter = Counter::new();
static PINNED_BYTES: Counter = Counter::new();
static ACQUIRED: Counter = Counter::new();
static REGISTRATIONS: Counter = Counter::new();
static INVALIDATIONS: Counter = Counter::new();
static INVALIDATIONS_SKIPPED: Counter = Counter::new();
static RELEASES: Counter = Counter::new();
static ERRORS: [Counter; Cause::COUNT] = [const { Counter::new() }; Cause::COUNT];

pub(crate) fn registration_created() {
    LIVE_REGISTRATIONS.add(1);
}
pub(crate) fn acquired() {
    ACQUIRED.add(1);
}
pub(crate) fn registration_dropped() {
    LIVE_REGISTRATIONS.sub(1);
}
pub(crate) fn pinned(bytes: u64) {
    PINNED_BYTES.add(bytes);
}
pub(crate) fn unpinned(bytes: u64) {
    PINNED_BYTES.sub(bytes);
}
pub(crate) fn mapped() {
    REGISTRATIONS.add(1);
}
pub(crate) fn invalidated() {
    INVALIDATIONS.add(1);
}
pub(crate) fn invalidation_skipped() {
    INVALIDATIONS_SKIPPED.add(1);
}
pub(crate) fn released() {
    RELEASES.add(1);
}

pub(crate) fn snapshot() -> Snapshot {
    let mut s = Snapshot {
        live_registrations: LIVE_REGISTRATIONS.get(),
        pinned_bytes: PINNED_BYTES.get(),
        acquired: ACQUIRED.get(),
        registrations: REGISTRATIONS.get(),
        invalidations: INVALIDATIONS.get(),
        invalidations_skipped: INVALIDATIONS_SKIPPED.get(),
        releases: RELEASES.get(),
        ..Default::default()
    };
    for c in Cause::ALL {
        s.errors[c.index()] = ERRORS[c.index()].get();
    }
    s
}

kernel::sync::global_lock! {
    // SAFETY: initialised in `init` before any refusal can be explained.
    unsafe(uninit) static LOG_LIMIT: Mutex<RateLimit> = RateLimit::new(5000, 10);
}

/// Sets up the rate limiter. Called once from module init.
pub(crate) fn init() {
    // SAFETY: called once, from module init, before anything else uses `LOG_LIMIT`.
    unsafe { LOG_LIMIT.init() };
}

/// The time base of the rate limit: the first refusal.
static START: kernel::sync::SetOnce<Instant<Monotonic>> = kernel::sync::SetOnce::new();

fn now_ms() -> u64 {
    START.populate(Instant::now());
    match START.as_ref() {
        Some(start) => u64::try_from(start.elapsed().as_millis()).unwrap_or(0),
        None => 0,
    }
}

/// Counts a refusal and explains it in the kernel log (rate limited).
pub(crate) fn refuse(client: &CStr, call: &str, range: Option<GpuRange>, errno: i32, cause: Cause) {
    ERRORS[cause.index()].add(1);
    let verdict = LOG_LIMIT.lock().check(now_ms());
    let Verdict::Print { suppressed } = verdict else {
        return;
    };
    let pid = kernel::current!().pid();
    match range {
        Some(r) => pr_warn!(
            "{}: {} of GPU VA {:#x}+{:#x} (pid {}) refused, errno -{}: {}\n",
            client,
            call,
            r.start(),
            r.len(),
            pid,
            errno,
            cause.explain()
        ),
        None => pr_warn!(
            "{}: {} (pid {}) refused, errno -{}: {}\n",
            client,
            call,
            pid,
            errno,
            cause.explain()
        ),
    }
    if suppressed > 0 {
        pr_warn!("({} similar messages suppressed)\n", suppressed);
    }
}
