// SPDX-License-Identifier: GPL-2.0

//! The pure logic of peermem-rs: plain `core` Rust with no kernel dependency, so the same files build
//! in the module and on the host (crates/peermem-logic), where `cargo test` exercises them.

pub mod cause;
pub mod errno;
pub mod range;
pub mod ratelimit;
pub mod registration;
pub mod stats;
pub mod tables;
pub mod timing;
