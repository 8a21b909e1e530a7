//! Host build of peermem-rs's pure logic.
//!
//! The kernel module compiles `src/logic/` of the repository as its `logic` module; this crate
//! compiles the very same files as a `no_std` library so that `cargo test` exercises them on the host.
#![no_std]

#[cfg(test)]
extern crate std;

#[path = "../../../src/logic/mod.rs"]
mod logic;

#[allow(unused_imports)]
pub use logic::*;
