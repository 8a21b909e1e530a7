// SPDX-License-Identifier: GPL-2.0

//! Module load and unload.

use kernel::prelude::*;

use crate::sys;

/// The loaded module.
pub(crate) struct PeerMemRs;

impl kernel::Module for PeerMemRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let params = sys::raw_params();
        pr_info!(
            "peermem-rs {} loaded (persistent_api_support={}, peerdirect_support={})\n",
            sys::version(),
            params.persistent_api_support,
            params.peerdirect_support
        );
        Ok(PeerMemRs)
    }
}

impl Drop for PeerMemRs {
    fn drop(&mut self) {
        pr_info!("peermem-rs unloaded\n");
    }
}
