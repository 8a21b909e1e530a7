// SPDX-License-Identifier: GPL-2.0

//! A log rate limit: at most `burst` messages per `interval`, then a count of what was suppressed.
//!
//! A failing job can register memory thousands of times a second; one explanation per burst is
//! enough, and the suppressed count says how often it kept happening.

/// The verdict for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Print it. `suppressed` messages were dropped since the last one printed.
    Print { suppressed: u64 },
    /// Drop it.
    Suppress,
}

/// A fixed-window limiter over a caller-supplied clock (milliseconds).
#[derive(Clone, Debug)]
pub struct RateLimit {
    interval_ms: u64,
    burst: u32,
    window_start: Option<u64>,
    printed: u32,
    suppressed: u64,
}

impl RateLimit {
    pub const fn new(interval_ms: u64, burst: u32) -> Self {
        Self {
            interval_ms,
            burst,
            window_start: None,
            printed: 0,
            suppressed: 0,
        }
    }

    /// Decide for a message at time `now_ms`.
    pub fn check(&mut self, now_ms: u64) -> Verdict {
        let new_window = match self.window_start {
            None => true,
            Some(start) => now_ms.saturating_sub(start) >= self.interval_ms || now_ms < start,
        };
        if new_window {
            self.window_start = Some(now_ms);
            self.printed = 0;
        }
        if self.printed < self.burst {
            self.printed += 1;
            let suppressed = core::mem::take(&mut self.suppressed);
            Verdict::Print { suppressed }
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
            Verdict::Suppress
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_suppresses_then_reports_the_count() {
        let mut r = RateLimit::new(1000, 2);
        assert_eq!(r.check(0), Verdict::Print { suppressed: 0 });
        assert_eq!(r.check(10), Verdict::Print { suppressed: 0 });
        assert_eq!(r.check(20), Verdict::Suppress);
        assert_eq!(r.check(30), Verdict::Suppress);
        assert_eq!(r.check(1000), Verdict::Print { suppressed: 2 });
    }

    #[test]
    fn a_clock_going_backwards_opens_a_new_window() {
        let mut r = RateLimit::new(1000, 1);
        assert_eq!(r.check(5000), Verdict::Print { suppressed: 0 });
        assert_eq!(r.check(5001), Verdict::Suppress);
        assert_eq!(r.check(10), Verdict::Print { suppressed: 1 });
    }
}
