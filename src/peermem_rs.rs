// SPDX-License-Identifier: GPL-2.0

//! peermem-rs: a GPUDirect RDMA peer-memory client for NVIDIA GPUs, in Rust.
//!
//! It registers with the ib_core peer-memory host (MLNX_OFED / DOCA-OFED) and answers its callbacks
//! by pinning GPU memory through the NVIDIA driver's `nvidia_p2p_*` API, so that RDMA NICs can DMA
//! straight into GPU memory. The crate root only declares the parts and the module.

mod client;
// The logic is shared with the host crate (crates/peermem-logic), whose tests use accessors the
// module does not need, and whose items are `pub` for that crate's sake.
#[allow(dead_code, unreachable_pub)]
mod logic;
mod module;
mod nvidia;
mod peer_mem;
mod sg;
mod stats;
mod sys;

kernel::macros::module! {
    type: module::PeerMemRs,
    name: "peermem_rs",
    authors: ["peermem-rs developers"],
    description: "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)",
    license: "GPL",
}
