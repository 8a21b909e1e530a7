// SPDX-License-Identifier: GPL-2.0

//! peermem-rs: a GPUDirect RDMA peer-memory client for NVIDIA GPUs, in Rust.
//!
//! It registers with the ib_core peer-memory host (MLNX_OFED / DOCA-OFED) and answers its callbacks
//! by pinning GPU memory through the NVIDIA driver's `nvidia_p2p_*` API, so that RDMA NICs can DMA
//! straight into GPU memory. The crate root only declares the parts and the module.

mod client;
mod foreign;
mod kapi;
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
mod timing;

// A plain identifier for `module!`'s `type` (6.12's takes no path).
use module::PeerMemRs;

/// Declares the module under `$name`. The kernel names a loadable module after its object (Kbuild
/// chooses `peermem_rs.o` or, for the drop-in, `nvidia-peermem.o`); the macro's `name` must match it,
/// because it is the prefix of every log line (`pr_*!`), and a log line should name the module an
/// operator can `rmmod`. Only the keys every kernel's `module!` accepts (see `kapi`); the author is
/// in the C shim. `tt`, not `literal`: 6.12's `module!` expects a bare literal token, and a
/// `literal` fragment reaches it wrapped in an invisible group.
macro_rules! peermem_module {
    ($name:tt, $description:tt) => {
        kernel::macros::module! {
            type: PeerMemRs,
            name: $name,
            description: $description,
            license: "GPL",
        }

        /// This module's name, as in `module!`: `peermem_rs`, or `nvidia_peermem` for the drop-in.
        const MODULE_NAME: &kapi::CStr =
            match kapi::CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                Ok(name) => name,
                Err(_) => panic!("a module name has no NUL"),
            };
    };
}

#[cfg(not(peermem_dropin))]
peermem_module!(
    "peermem_rs",
    "GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)"
);
#[cfg(peermem_dropin)]
peermem_module!(
    "nvidia_peermem",
    "GPUDirect RDMA peer-memory client for NVIDIA GPUs (peermem-rs, a drop-in for nvidia-peermem)"
);
