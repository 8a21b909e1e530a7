// SPDX-License-Identifier: GPL-2.0

//! The C declarations peermem-rs uses, fenced off.
//!
//! `bindings/generated.rs` is made at build time by bindgen from the NVIDIA and peer-memory headers
//! (see `bindings/bindgen.args`). Nothing else in the crate sees the generated module: what is used
//! is re-exported here by name, so a header change shows up as a build error in one place.

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    missing_docs,
    unreachable_pub,
    unsafe_op_in_unsafe_fn,
    improper_ctypes,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod generated {
    // Kernel types are blocklisted in bindgen.args and taken from the kernel crate instead.
    #[allow(unused_imports)]
    use kernel::bindings::{device, pci_dev, scatterlist, seq_file, sg_table, workqueue_struct};

    include!("../bindings/generated.rs");
}

pub(crate) use generated::{
    ib_register_peer_memory_client, ib_unregister_peer_memory_client, invalidate_peer_memory,
    nvidia_p2p_dma_map_pages, nvidia_p2p_dma_mapping, nvidia_p2p_dma_unmap_pages,
    nvidia_p2p_get_pages, nvidia_p2p_page_table, nvidia_p2p_put_pages, peer_memory_client,
    peer_memory_client_ex, IB_PEER_MEMORY_NAME_MAX, IB_PEER_MEMORY_VER_MAX,
    PEER_MEM_INVALIDATE_UNMAPS,
};
#[cfg(peermem_persistent_api)]
pub(crate) use generated::{nvidia_p2p_get_pages_persistent, nvidia_p2p_put_pages_persistent};
pub(crate) use generated::{
    pci_dev_put, peermem_alloc_workqueue, peermem_debugfs_create_dir, peermem_debugfs_create_file,
    peermem_debugfs_remove, peermem_fsleep, peermem_lingering_lock, peermem_log_lock,
    peermem_param_version, peermem_pci_dev_get,
};

/// The ABI facts the rest of the crate relies on, checked when the module is compiled.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<peer_memory_client>() == 136);
    assert!(offset_of!(peer_memory_client, acquire) == 80);
    assert!(offset_of!(peer_memory_client, release) == 128);
    assert!(offset_of!(peer_memory_client_ex, ex_size) == 136);
    assert!(IB_PEER_MEMORY_NAME_MAX == 64 && IB_PEER_MEMORY_VER_MAX == 16);
};

/// The values of the module parameters, declared in the C shim so that they appear read-only in
/// sysfs, as nvidia-peermem's do.
pub(crate) struct RawParams {
    pub(crate) persistent_api_support: i32,
    pub(crate) peerdirect_support: i32,
}

/// Reads the module parameters.
pub(crate) fn raw_params() -> RawParams {
    // SAFETY: the parameters are plain `int`s defined in bindings/shim.c with permissions 0444: the
    // kernel writes them only while parsing the module's arguments, before `init` runs, so reading
    // them afterwards cannot race.
    unsafe {
        RawParams {
            persistent_api_support: generated::peermem_param_persistent_api_support,
            peerdirect_support: generated::peermem_param_peerdirect_support,
        }
    }
}
