// SPDX-License-Identifier: GPL-2.0

//! Module load and unload: check the parameters, register the clients nvidia-peermem would, and
//! publish the statistics.

use core::fmt;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::debugfs::{Dir, File};
use kernel::prelude::*;
use kernel::sync::atomic::{Acquire, Atomic, Release};
use kernel::workqueue::Queue;

use crate::peer_mem::{ClientRegistration, HostLink, RegisterError, INVALIDATING, PERSISTENT};
use crate::{client, stats, sys};

/// The registered clients: the invalidating one (if any) and the persistent one.
struct Clients {
    _invalidating: Option<ClientRegistration>,
    _persistent: ClientRegistration,
}

/// This module's name: `peermem_rs`, or `nvidia_peermem` for the drop-in build.
fn module_name() -> &'static CStr {
    <crate::LocalModule as kernel::ModuleMetadata>::NAME
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

/// Is a module named `name` in the kernel (loaded, loading or unloading)?
///
/// A module cannot ask the loader (`find_module` is not exported since 5.12, nor is
/// `module_kset`), but every module in the kernel has a kobject in `module_kset`
/// (/sys/module/<name>), and so do we: the loader adds ours (`mod_sysfs_setup`, which sets
/// `mkobj.kobj.kset` to `module_kset`) before it calls our init. `kset_find_obj` (EXPORT_SYMBOL_GPL)
/// looks a name up there, as the loader itself does to refuse a second copy of a module
/// (`mod_sysfs_init`).
fn module_present(this: &ThisModule, name: &CStr) -> bool {
    let this = this.as_ptr();
    if this.is_null() {
        // Built in: no kobject of our own to start from (and peermem-rs is never built in).
        return false;
    }
    // SAFETY: `this` is our own module, which is being initialised: the loader has added its
    // kobject to `module_kset` and keeps it until the module is freed, after init has returned.
    let kset = unsafe { (*this).mkobj.kobj.kset };
    if kset.is_null() {
        return false;
    }
    // SAFETY: `kset` is `module_kset`, which lives as long as the kernel; `name` is a C string.
    let kobj = unsafe { bindings::kset_find_obj(kset, name.as_char_ptr()) };
    if kobj.is_null() {
        return false;
    }
    // SAFETY: `kset_find_obj` returned the kobject with a reference taken for us; we drop it.
    unsafe { bindings::kobject_put(kobj) };
    true
}

/// Refuses to load next to another module that registers `nv_mem` (see [`NV_MEM_MODULES`]).
///
/// The peer-memory host cannot always refuse the second client for us: MLNX_OFED/DOCA-OFED rejects a
/// duplicate name only through its `memory_peers` sysfs directory, which it builds only where the
/// kernel exports `mm_kobj` (before 6.6). On current kernels both would register, and ib_core would
/// hand GPU memory to whichever registered first.
fn refuse_beside_other_client(this: &ThisModule) -> Result {
    let me = module_name();
    for (other, who) in NV_MEM_MODULES {
        if other != me && module_present(this, other) {
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

/// The workqueue the registrations' work items run on, published for them by [`WorkQueue`].
static WORK_QUEUE: Atomic<*mut bindings::workqueue_struct> = Atomic::new(core::ptr::null_mut());

/// The module's own workqueue: a registration's work item may drop the last reference to it, and
/// with it the module reference, so module exit must wait for a running item to return before the
/// module's code goes, which destroying our own queue does (flushing a system queue is not
/// allowed).
///
/// # Invariants
///
/// `0` is a workqueue made by `alloc_workqueue`, destroyed on drop; while it exists, it is the one
/// `WORK_QUEUE` publishes.
struct WorkQueue(NonNull<bindings::workqueue_struct>);

// SAFETY: a workqueue may be used and destroyed from any task.
unsafe impl Send for WorkQueue {}
// SAFETY: as above.
unsafe impl Sync for WorkQueue {}

impl WorkQueue {
    fn new() -> Result<Self> {
        // SAFETY: a constant name with no format directive; unbound: the items sleep in driver
        // calls and need no particular CPU.
        let wq = unsafe {
            bindings::alloc_workqueue_noprof(
                c"peermem_rs".as_char_ptr(),
                bindings::wq_flags_WQ_UNBOUND,
                0,
            )
        };
        let wq = NonNull::new(wq).ok_or(ENOMEM)?;
        WORK_QUEUE.store(wq.as_ptr(), Release);
        // INVARIANT: made and published just now.
        Ok(Self(wq))
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        WORK_QUEUE.store(core::ptr::null_mut(), Release);
        // SAFETY: by the type invariant; it waits for a running item to return. Nothing can queue
        // an item any more: items are queued for registrations, every registration holds a
        // module reference, and module exit (this drop) runs only once there are none.
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// The queue for the registrations' work items.
pub(crate) fn work_queue() -> &'static Queue {
    let wq = WORK_QUEUE.load(Acquire);
    // SAFETY: registrations, the only users, exist only while the module is loaded: after the
    // queue is made (before the clients are registered) and before it is destroyed (after the
    // last registration went), so the queue is alive for as long as they may call this.
    unsafe { Queue::from_raw(wq) }
}

/// The loaded module. Field order is drop order: the clients are unregistered first (which waits
/// for their registrations to be released), then the work queue is destroyed (which waits for a
/// work item still returning), then the statistics files go.
#[pin_data(PinnedDrop)]
pub(crate) struct PeerMemRs {
    _clients: Clients,
    _queue: WorkQueue,
    #[pin]
    _stats: File<StatsText>,
    _debugfs: Dir,
}

/// /sys/kernel/debug/<module>/stats: the counters, one `key value` per line.
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
    if !persistent_only && !cfg!(peermem_persistent_api) {
        // The free callback's work item waits for the driver's teardown with a put_pages that
        // finds nothing; drivers before 535 read the table first, which would be freed memory.
        pr_err!(
            "persistent_api_support=0 needs an NVIDIA driver of 535 or later (nv-p2p.h with the \
             persistent API); this build is for an older one: use persistent_api_support=1\n"
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
    ClientRegistration::register(link, name, sys::version(), ex_unmaps).map_err(|e| match e {
        RegisterError::Refused => {
            pr_err!(
                "the peer-memory host refused client '{}': a client of that name is already registered \
                 by a module other than nvidia_peermem, peermem_rs and nv_peer_mem (which are looked \
                 for first); unload that module (its name is in /sys/kernel/mm/memory_peers or the \
                 kernel log)\n",
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
    client::init();
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
    fn init(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        // Nothing is made next to another nv_mem client. Then the queue: a registration may need
        // it as soon as a client is registered.
        let queue = refuse_beside_other_client(module).and_then(|()| WorkQueue::new());
        let clients = queue
            .as_ref()
            .map_err(|e| *e)
            .and_then(|_| register_clients());
        // Named after the module, like its log lines: /sys/kernel/debug/<module>/stats.
        let debugfs = Dir::new(module_name());
        try_pin_init!(Self {
            _stats <- debugfs.read_only_file(c"stats", StatsText),
            _clients: clients?,
            _queue: queue?,
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
