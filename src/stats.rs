// SPDX-License-Identifier: GPL-2.0

//! The module's counters, its explanations of refusals, and their debugfs files.
//!
//! Counters are global atomics, so every callback can bump them without a lock. The explanation of a
//! refusal is one kernel log line, rate limited, and a per-cause counter, so an operator can tell
//! what went wrong without reproducing it.

use kernel::prelude::*;

use crate::kapi::atomic::{AtomicU64, Ordering::Relaxed};
use crate::kapi::{self, cstr_str, CStr, SharedMutex, StaticMutex};

use crate::logic::cause::Cause;
use crate::logic::errno::Errno;
use crate::logic::range::GpuRange;
use crate::logic::ratelimit::{RateLimit, Verdict};
use crate::logic::registration::{Actor, Event, Violation};
use crate::logic::stats::Snapshot;
use crate::timing::{Step, Timing};

/// One global counter.
struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
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
static MAPPED: Counter = Counter::new();
static INVALIDATIONS: Counter = Counter::new();
static INVALIDATIONS_SKIPPED: Counter = Counter::new();
static RELEASES: Counter = Counter::new();
static LATE_CALLBACKS: Counter = Counter::new();
static FOREIGN_UNPINS: Counter = Counter::new();
static UNPROVEN_UNPINS: Counter = Counter::new();
static UNPIN_FAILURES: Counter = Counter::new();
static DEFERRED_UNPINS: Counter = Counter::new();
static KEPT_REGISTRATIONS: Counter = Counter::new();
static LINGERING: Counter = Counter::new();
static ADOPTIONS: Counter = Counter::new();
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
    MAPPED.add(1);
}
pub(crate) fn released() {
    RELEASES.add(1);
}
pub(crate) fn lingering_listed() {
    LINGERING.add(1);
}
pub(crate) fn lingering_unlisted() {
    LINGERING.sub(1);
}
pub(crate) fn adopted() {
    ADOPTIONS.add(1);
}

pub(crate) fn snapshot() -> Snapshot {
    let mut s = Snapshot {
        live_registrations: LIVE_REGISTRATIONS.get(),
        pinned_bytes: PINNED_BYTES.get(),
        acquired: ACQUIRED.get(),
        mapped: MAPPED.get(),
        invalidations: INVALIDATIONS.get(),
        invalidations_skipped: INVALIDATIONS_SKIPPED.get(),
        releases: RELEASES.get(),
        late_callbacks: LATE_CALLBACKS.get(),
        foreign_unpins: FOREIGN_UNPINS.get(),
        unproven_unpins: UNPROVEN_UNPINS.get(),
        unpin_failures: UNPIN_FAILURES.get(),
        deferred_unpins: DEFERRED_UNPINS.get(),
        kept_registrations: KEPT_REGISTRATIONS.get(),
        lingering: LINGERING.get(),
        adoptions: ADOPTIONS.get(),
        ..Default::default()
    };
    for c in Cause::ALL {
        s.errors[c.index()] = ERRORS[c.index()].get();
    }
    s
}

/// The rate limit of the explanations in the kernel log.
///
/// Lock rules: protects the `RateLimit` only; held just to check it (no call, no print, nothing
/// else taken inside), from tasks only (every caller is a host or driver callback, or our work
/// item, in process context). A leaf lock.
// SAFETY: the shim's `peermem_log_lock` is used by this lock only.
static LOG_LIMIT: StaticMutex<RateLimit> =
    unsafe { StaticMutex::new(SharedMutex::Log, RateLimit::new(5000, 10)) };

/// Counts a refusal and explains it in the kernel log (rate limited). `t` times it (`stats`, and
/// the explanation `log`).
pub(crate) fn refuse(
    client: &CStr,
    call: &str,
    range: Option<GpuRange>,
    errno: Errno,
    cause: Cause,
    t: Timing,
) {
    let _stats = t.span(Step::Stats);
    ERRORS[cause.index()].add(1);
    let pid = kapi::current_pid();
    let client = cstr_str(client);
    match range {
        Some(r) => say(
            t,
            format_args!(
                "{}: {} of GPU VA {:#x}+{:#x} (pid {}) refused, errno {}: {}\n",
                client,
                call,
                r.start(),
                r.len(),
                pid,
                errno,
                cause.explain()
            ),
        ),
        None => say(
            t,
            format_args!(
                "{}: {} (pid {}) refused, errno {}: {}\n",
                client,
                call,
                pid,
                errno,
                cause.explain()
            ),
        ),
    }
}

/// Does [`event`] do nothing for `event` but add to atomic counters (no log line, no lock)? Then
/// the registration lock may be held around it.
pub(crate) fn counts_only(event: Event) -> bool {
    matches!(
        event,
        Event::Unpinned
            | Event::Invalidated
            | Event::InvalidationSkipped
            | Event::LateCallback
            | Event::NLingers
    )
}

/// Counts (and, where an operator needs to know, explains) what happened to a registration of
/// `range` of `client`; `actor` is who noticed it. `t` times it (`stats`, and an explanation `log`).
pub(crate) fn event(client: &CStr, range: GpuRange, actor: Actor, event: Event, t: Timing) {
    let _stats = t.span(Step::Stats);
    let client = cstr_str(client);
    match event {
        Event::Unpinned => {
            unpinned(range.len());
            if actor == Actor::Work {
                DEFERRED_UNPINS.add(1);
            }
        }
        Event::Invalidated => INVALIDATIONS.add(1),
        Event::InvalidationSkipped => INVALIDATIONS_SKIPPED.add(1),
        Event::LateCallback => LATE_CALLBACKS.add(1),
        // Counted when release lists the registration (`lingering`): a deregistration's normal
        // end, not worth a log line.
        Event::NLingers => {}
        Event::UnpinNForeign => {
            FOREIGN_UNPINS.add(1);
            say(t, format_args!(
                "{}: GPU VA {:#x}+{:#x} was deregistered by pid {}, not by the process that \
                 registered it; the NVIDIA driver unpins a pin only for that process, so this one \
                 stays pinned (and peermem-rs loaded) until that process frees the memory or exits\n",
                client,
                range.start(),
                range.len(),
                kapi::current_pid()
            ));
        }
        Event::UnpinNUnproven(errno) => {
            UNPROVEN_UNPINS.add(1);
            let why = if errno == Errno::EINVAL {
                "no longer reaches that memory through the driver (an MPS client whose RM client \
                 went before its memory registration)"
            } else {
                "could not have it checked (the driver failed)"
            };
            say(
                t,
                format_args!(
                "{}: GPU VA {:#x}+{:#x}: pid {} {} (errno {}), so its unpin would prove nothing: \
                 the pin is left to the driver, and the registration stays (and peermem-rs \
                 loaded) until the driver calls it back when the memory is freed\n",
                client,
                range.start(),
                range.len(),
                kapi::current_pid(),
                why,
                errno
            ),
            );
        }
        Event::UnpinPFailed(errno) | Event::UnpinNFailed(errno) => {
            UNPIN_FAILURES.add(1);
            say(
                t,
                format_args!(
                    "{}: the NVIDIA driver refused to unpin GPU VA {:#x}+{:#x} (errno {}); {}\n",
                    client,
                    range.start(),
                    range.len(),
                    errno,
                    if matches!(event, Event::UnpinNFailed(_)) {
                        "the registration stays until the driver calls it back (cudaFree or exit)"
                    } else {
                        "the driver keeps the pin"
                    }
                ),
            );
        }
        Event::BarrierFailed(errno) => {
            KEPT_REGISTRATIONS.add(1);
            say(t, format_args!(
                "{}: the NVIDIA driver failed {} times (last errno {}) to show that its teardown of \
                 GPU VA {:#x}+{:#x} has returned from peermem-rs's callback; the registration is \
                 kept, and peermem-rs stays loaded until reboot, rather than freed under it\n",
                client,
                crate::logic::registration::BARRIER_TRIES,
                errno,
                range.start(),
                range.len()
            ));
        }
        Event::ReleasedWithoutPutPages => {
            ERRORS[Cause::HostProtocol.index()].add(1);
            say(
                t,
                format_args!(
                "{}: the peer-memory host released GPU VA {:#x}+{:#x} without put_pages (a host \
                 bug); unpinning it\n",
                client,
                range.start(),
                range.len()
            ),
            );
        }
    }
}

/// A host call that broke the protocol: counted as a host_protocol refusal and explained. `t`
/// times it (`stats`, and the explanation `log`).
pub(crate) fn violation(client: &CStr, call: &str, range: GpuRange, v: Violation, t: Timing) {
    let _stats = t.span(Step::Stats);
    ERRORS[Cause::HostProtocol.index()].add(1);
    say(t, format_args!(
        "{}: {} of GPU VA {:#x}+{:#x} refused, errno {}: the peer-memory host broke the protocol: {}\n",
        cstr_str(client),
        call,
        range.start(),
        range.len(),
        Errno::EINVAL,
        v.explain()
    ));
}

/// One rate-limited warning, timed by `t` (`log`).
fn say(t: Timing, args: core::fmt::Arguments<'_>) {
    let _log = t.span(Step::Log);
    let verdict = LOG_LIMIT.lock().check(kapi::monotonic_ms());
    let Verdict::Print { suppressed } = verdict else {
        return;
    };
    pr_warn!("{}", args);
    if suppressed > 0 {
        pr_warn!("({} similar messages suppressed)\n", suppressed);
    }
}
