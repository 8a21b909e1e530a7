// SPDX-License-Identifier: GPL-2.0

//! The statistics peermem-rs reports, and their text form.
//!
//! The module keeps the counters in atomics; this is the snapshot it formats, one `key value` per
//! line, so scripts (and gdr-doctor) can read it without a parser.

use crate::logic::cause::Cause;
use core::fmt;

/// A snapshot of the module's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Registrations alive now, each with a module reference: from acquire (before its pin) until
    /// the last reference goes, at the host's release or, for one whose pin N was left to the
    /// driver, when the work item lets go after the driver's callback.
    pub live_registrations: u64,
    /// Bytes of GPU memory pinned right now.
    pub pinned_bytes: u64,
    /// acquire calls that said "mine".
    pub acquired: u64,
    /// Registrations that completed dma_map (the key `registrations`).
    pub mapped: u64,
    /// Free callbacks that invalidated a registration through the host.
    pub invalidations: u64,
    /// Free callbacks that found a deregistration in flight and left the host alone.
    pub invalidations_skipped: u64,
    /// Registrations released.
    pub releases: u64,
    /// Free callbacks that came after the host had released the registration (its pin had been
    /// left to the driver).
    pub late_callbacks: u64,
    /// Non-persistent pins that a task other than the registering process could not unpin: each
    /// stays with the driver (and keeps peermem-rs loaded) until that process frees the memory or
    /// exits.
    pub foreign_unpins: u64,
    /// Non-persistent pins whose unpin by the registering process nothing could prove. Always 0
    /// since no pin N is unpinned by peermem-rs (each lingers, `lingering`); the key stays for
    /// the scripts that read it.
    pub unproven_unpins: u64,
    /// Unpins the NVIDIA driver refused.
    pub unpin_failures: u64,
    /// Persistent pins unpinned by peermem-rs's work item (after an invalidation, or for a host
    /// call made while a free callback ran).
    pub deferred_unpins: u64,
    /// Registrations kept until reboot because the driver failed, again and again, to show that
    /// its teardown had returned from peermem-rs's free callback.
    pub kept_registrations: u64,
    /// Registrations released whose pin N the driver still holds, not yet called back: each
    /// keeps its registration context, the driver's pin record (and, where BAR1 is mapped on
    /// demand, a 64 KiB BAR1 extent per GPU page and P2P object) and a module reference, until the
    /// memory is freed or a later registration of the same process adopts it. A gauge.
    pub lingering: u64,
    /// Registrations that took a lingering one over instead of pinning an N of their own.
    pub adoptions: u64,
    /// Refusals by cause, indexed by `Cause::index`.
    pub errors: [u64; Cause::COUNT],
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "live_registrations {}", self.live_registrations)?;
        writeln!(f, "pinned_bytes {}", self.pinned_bytes)?;
        writeln!(f, "acquired {}", self.acquired)?;
        writeln!(f, "registrations {}", self.mapped)?;
        writeln!(f, "invalidations {}", self.invalidations)?;
        writeln!(f, "invalidations_skipped {}", self.invalidations_skipped)?;
        writeln!(f, "releases {}", self.releases)?;
        writeln!(f, "late_callbacks {}", self.late_callbacks)?;
        writeln!(f, "foreign_unpins {}", self.foreign_unpins)?;
        writeln!(f, "unproven_unpins {}", self.unproven_unpins)?;
        writeln!(f, "unpin_failures {}", self.unpin_failures)?;
        writeln!(f, "deferred_unpins {}", self.deferred_unpins)?;
        writeln!(f, "kept_registrations {}", self.kept_registrations)?;
        writeln!(f, "lingering {}", self.lingering)?;
        writeln!(f, "adoptions {}", self.adoptions)?;
        for c in Cause::ALL {
            writeln!(f, "error_{} {}", c.name(), self.errors[c.index()])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn formats_key_value_lines() {
        let mut s = Snapshot {
            live_registrations: 2,
            pinned_bytes: 131072,
            ..Default::default()
        };
        s.errors[Cause::Bar1Exhausted.index()] = 3;
        let text = s.to_string();
        assert!(text.starts_with("live_registrations 2\npinned_bytes 131072\n"));
        assert!(text.contains("\nerror_bar1_exhausted 3\n"));
        assert_eq!(text.lines().count(), 15 + Cause::COUNT);
    }
}
