// SPDX-License-Identifier: GPL-2.0

//! Module load and unload: check the parameters, register the clients nvidia-peermem would, and
//! publish the statistics.

use kernel::prelude::*;

use crate::client::RegCtx;
use crate::kapi::{self, cstr_str, CStr, DebugfsDir, SeqFile, WorkQueue};
use crate::peer_mem::{
    self, ClientRegistration, HostLink, RegisterError, INVALIDATING, PERSISTENT,
};
use crate::{stats, sys, timing};

/// The registered clients: the invalidating one (if any) and the persistent one.
struct Clients {
    _invalidating: Option<ClientRegistration>,
    _persistent: ClientRegistration,
}

/// This module's name: `peermem_rs`, or `nvidia_peermem` for the drop-in build.
fn module_name() -> &'static CStr {
    crate::MODULE_NAME
}

/// The modules that register a GPU peer-memory client named `nv_mem`, and who they are.
const NV_MEM_MODULES: [(&CStr, &str); 3] = [
    (
        c"nvidia_peermem",
        "NVIDIA's, or peermem-rs built as its drop-in",
    ),
    (c"peermem_rs", "peermem-rs"),
    (c"nv_peer_mem", "Mellanox's nv_peer_mem"),
];

/// Refuses to load next to another module that registers `nv_mem` (see [`NV_MEM_MODULES`]).
///
/// The peer-memory host cannot always refuse the second client for us: MLNX_OFED/DOCA-OFED rejects a
/// duplicate name only through its `memory_peers` sysfs directory, which it builds only where the
/// kernel exports `mm_kobj` (before 6.6). On current kernels both would register, and ib_core would
/// hand GPU memory to whichever registered first.
fn refuse_beside_other_client() -> Result {
    let me = module_name();
    for (other, who) in NV_MEM_MODULES {
        if other != me && kapi::module_present(other) {
            let other = cstr_str(other);
            pr_err!(
                "{} ({}) is loaded and registers the GPU peer-memory client nv_mem: refusing to \
                 register a second one, which the peer-memory host may not refuse (unload it \
                 first: rmmod {})\n",
                other,
                who,
                other
            );
            return Err(EBUSY);
        }
    }
    Ok(())
}

/// The loaded module. Field order is drop order: the clients are unregistered first (which waits
/// for their registrations to be released), then the work queue is destroyed (which waits for a
/// work item still returning), then the statistics files go.
pub(crate) struct PeerMemRs {
    _clients: Clients,
    _queue: WorkQueue,
    _debugfs: DebugfsDir,
}

/// /sys/kernel/debug/<module>/stats: the counters, one `key value` per line, and an empty line
/// last, as the file had when kernel::debugfs wrote it (`writeln!` of the value). Read-only.
static STATS_FILE: SeqFile = SeqFile {
    show: |w| writeln!(w, "{}", stats::snapshot()),
    write: None,
};

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
    if !persistent_only && !cfg!(peermem_persistent_api) {
        // The free callback's work item waits for the driver's teardown with a put_pages that
        // finds nothing; drivers before 535 read the table first, which would be freed memory.
        pr_err!(
            "persistent_api_support=0 needs an NVIDIA driver of 535 or later (nv-p2p.h with the \
             persistent API); this build is for an older one: use persistent_api_support=1\n"
        );
        return Err(EINVAL);
    }
    if !persistent_only && cfg!(peermem_ofed_stop_notifier_deadlock) {
        // The host tears down an invalidating MR whose registration failed after mapping by taking
        // its mapping lock a second time, and hangs there; a later free of that memory then hangs
        // in our callback's invalidation, holding the NVIDIA driver's lock (Kbuild).
        pr_err!(
            "persistent_api_support=0 refused: this build is for an MLNX_OFED/DOCA-OFED before \
             25.04, whose peer-memory host hangs tearing down an invalidating memory registration \
             that failed, and then every GPU process on the node with it; use \
             persistent_api_support=1 (the default), or upgrade MLNX_OFED/DOCA-OFED to 25.04 or \
             later and rebuild peermem-rs\n"
        );
        return Err(EINVAL);
    }
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
    let version = kapi::version();
    ClientRegistration::register::<RegCtx>(link, name, version, ex_unmaps).map_err(|e| match e {
        RegisterError::Refused => {
            pr_err!(
                "the peer-memory host refused client '{}': a client of that name is already registered \
                 by a module other than nvidia_peermem, peermem_rs and nv_peer_mem (which are looked \
                 for first); unload that module (its name is in /sys/kernel/mm/memory_peers or the \
                 kernel log)\n",
                cstr_str(name)
            );
            EBUSY
        }
        RegisterError::NoMemory => ENOMEM,
    })
}

/// Registers the clients nvidia-peermem would for these parameters.
fn register_clients() -> Result<Clients> {
    let params = params()?;
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
        cstr_str(kapi::version()),
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

impl kernel::Module for PeerMemRs {
    fn init(module: &'static ThisModule) -> Result<Self> {
        kapi::set_this_module(module);
        // Nothing is made next to another nv_mem client. Then the queue: a registration may need
        // it as soon as a client is registered.
        refuse_beside_other_client()?;
        let queue = WorkQueue::new(c"peermem_rs")?;
        let clients = register_clients()?;
        // Named after the module, like its log lines: /sys/kernel/debug/<module>/stats, and the
        // time accounting's counters next to it (`time`).
        let debugfs = DebugfsDir::new(
            module_name(),
            &[(c"stats", &STATS_FILE), (c"time", &timing::FILE)],
        );
        // Nothing fails after this point: registrations may begin.
        peer_mem::accept_registrations();
        Ok(Self {
            _clients: clients,
            _queue: queue,
            _debugfs: debugfs,
        })
    }
}

impl Drop for PeerMemRs {
    fn drop(&mut self) {
        pr_info!(
            "peermem-rs unloading ({} registrations served)\n",
            stats::snapshot().mapped
        );
    }
}
