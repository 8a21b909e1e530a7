// SPDX-License-Identifier: GPL-2.0

//! Module load and unload: check the parameters, register the clients nvidia-peermem would, and
//! publish the statistics.

use core::fmt;

use kernel::debugfs::{Dir, File};
use kernel::prelude::*;

use crate::peer_mem::{ClientRegistration, HostLink, RegisterError, INVALIDATING, PERSISTENT};
use crate::{stats, sys};

/// The registered clients: the invalidating one (if any) and the persistent one.
struct Clients {
    _invalidating: Option<ClientRegistration>,
    _persistent: ClientRegistration,
}

/// The loaded module. Field order is drop order: the clients are unregistered first (which waits
/// for their registrations to be released), then the statistics files go.
#[pin_data(PinnedDrop)]
pub(crate) struct PeerMemRs {
    _clients: Clients,
    #[pin]
    _stats: File<StatsText>,
    _debugfs: Dir,
}

/// /sys/kernel/debug/peermem_rs/stats: the counters, one `key value` per line.
struct StatsText;

impl fmt::Debug for StatsText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", stats::snapshot())
    }
}

/// The parameters, checked. Meanings as in nvidia-peermem.
struct Params {
    /// One persistent client named nv_mem (true), or an invalidating nv_mem plus a persistent
    /// nv_mem_nc (false).
    persistent_only: bool,
    /// The invalidating client registers as legacy (MLNX_OFED 4.9) instead of "extended" with
    /// PEER_MEM_INVALIDATE_UNMAPS.
    legacy_peerdirect: bool,
}

fn params() -> Result<Params> {
    let raw = sys::raw_params();
    let persistent_only = match raw.persistent_api_support {
        0 => false,
        1 => true,
        v => {
            pr_err!(
                "invalid persistent_api_support={}: use 1 (one persistent client, the default) or 0 \
                 (an invalidating client plus a persistent one)\n",
                v
            );
            return Err(EINVAL);
        }
    };
    let legacy_peerdirect = match raw.peerdirect_support {
        0 => false,
        1 => true,
        v => {
            pr_err!(
                "invalid peerdirect_support={}: use 0 (the default) or 1 (legacy hosts, MLNX_OFED 4.9 LTS)\n",
                v
            );
            return Err(EINVAL);
        }
    };
    Ok(Params {
        persistent_only,
        legacy_peerdirect,
    })
}

fn register(
    link: &'static HostLink,
    name: &'static CStr,
    ex_unmaps: bool,
) -> Result<ClientRegistration> {
    ClientRegistration::register(link, name, sys::version(), ex_unmaps).map_err(|e| match e {
        RegisterError::Refused => {
            pr_err!(
                "the peer-memory host refused client '{}': a client of that name is already registered, \
                 usually by NVIDIA's nvidia_peermem (unload it first: rmmod nvidia_peermem)\n",
                name
            );
            EBUSY
        }
        RegisterError::NoMemory => ENOMEM,
    })
}

/// Registers the clients nvidia-peermem would for these parameters.
fn register_clients() -> Result<Clients> {
    let params = params()?;
    stats::init();
    let clients = if params.persistent_only {
        Clients {
            _invalidating: None,
            _persistent: register(&PERSISTENT, c"nv_mem", false)?,
        }
    } else {
        // The invalidating client first, so the host asks it before the persistent one.
        let invalidating = register(&INVALIDATING, c"nv_mem", !params.legacy_peerdirect)?;
        Clients {
            _invalidating: Some(invalidating),
            _persistent: register(&PERSISTENT, c"nv_mem_nc", false)?,
        }
    };
    if !cfg!(peermem_persistent_api) {
        pr_info!(
            "built against an nv-p2p.h without the persistent API: persistent pins use get_pages \
             without a free callback, which only drivers before 535 accept\n"
        );
    }
    pr_info!(
        "peermem-rs {} loaded: {} (persistent_api_support={}, peerdirect_support={})\n",
        sys::version(),
        if params.persistent_only {
            "client nv_mem (persistent)"
        } else if params.legacy_peerdirect {
            "clients nv_mem (invalidating, legacy) and nv_mem_nc (persistent)"
        } else {
            "clients nv_mem (invalidating) and nv_mem_nc (persistent)"
        },
        u8::from(params.persistent_only),
        u8::from(params.legacy_peerdirect)
    );
    Ok(clients)
}

impl kernel::InPlaceModule for PeerMemRs {
    fn init(_module: &'static ThisModule) -> impl PinInit<Self, Error> {
        let clients = register_clients();
        let debugfs = Dir::new(c"peermem_rs");
        try_pin_init!(Self {
            _stats <- debugfs.read_only_file(c"stats", StatsText),
            _clients: clients?,
            _debugfs: debugfs,
        })
    }
}

#[pinned_drop]
impl PinnedDrop for PeerMemRs {
    fn drop(self: Pin<&mut Self>) {
        pr_info!(
            "peermem-rs unloading ({} registrations served)\n",
            stats::snapshot().registrations
        );
    }
}
