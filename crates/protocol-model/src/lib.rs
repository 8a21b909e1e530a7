// SPDX-License-Identifier: GPL-2.0

//! An exhaustive model check of peermem-rs's registration protocol against a model of the real
//! providers.
//!
//! The model is a small machine of threads, each a stack of frames that advance one atomic step at
//! a time; the checker (`stateright`, breadth first) explores every interleaving of every thread's
//! steps, from every configuration, up to the bound below. Each provider's steps are in a file of
//! their own, each thread's program a named step enum beside it: `host.rs` (MLNX_OFED),
//! `nvidia.rs` (the NVIDIA driver), `kernel.rs` (the workqueue, rmmod), `client.rs` (peermem-rs as
//! it is, and the clients that differ from it only in their glue); this file holds the world,
//! its properties and the checker.
//! What the threads run:
//!
//! - **the NVIDIA driver** as `kernel-open/nvidia/nv-p2p.c` and RM's `osapi.c`/`p2p.c`/
//!   `third_party_p2p.c` behave (550-595, see docs/race-windows.md): one RM API lock, taken for
//!   write by every `rm_p2p_*` entry (twice in `get_pages`, with a window between the pin and the
//!   callback's registration), and a re-entry from the task that holds it is a bug (-EIO and a
//!   WARN); `dma_map_pages` reads the page table before the API lock and links its mapping into the
//!   pin's allocation (under a semaphore inside it) after dropping it; `dma_unmap_pages` takes only
//!   that semaphore; `put_pages` finds a pin only in the P2P objects whose pid list holds the
//!   calling process and answers 0 when it finds nothing (`NV_ERR_OBJECT_NOT_FOUND` -> 0)
//!   [NV-PUT-PAGES-LOOKUP], and `get_pages`, the callback's registration in its second API-lock
//!   section and `get_pages_persistent` look the memory up the same way (`RmP2PGetInfoWithoutToken`
//!   with token 0) and fail (EINVAL) when they find nothing; `put_pages_persistent` works from any
//!   task; the free path (cudaFree, process exit) holds the API lock, calls the pin's free
//!   callback, and frees the page table, its DMA mappings and the semaphore as soon as the callback
//!   returns. Persistent pins are never called back and never torn down. A page table has an
//!   address, which is a non-persistent pin's key: `put_pages` (token 0) looks the pin up by that
//!   address alone among the calling process's pins, of any of its allocations (`RmP2PPutPages` and
//!   `RmP2PGetInfoWithoutToken` [NV-PUT-PAGES-LOOKUP]; `CliGetThirdPartyP2PPlatformData`,
//!   550.163.01 `third_party_p2p.c:279-298`) and, when the process created RM's internal P2P
//!   object, where persistent pins live (`p2p.c:1218-1293`; created in `memmgrStateInitLocked`,
//!   `gpu/mem_mgr/mem_mgr.c:552`, with the creating task's pid in its pid list
//!   [NV-INTERNAL-OBJECT]; the lookup goes through every object whose list holds the caller,
//!   `CliNextThirdPartyP2PInfoWithPid`, `third_party_p2p.c:300-342`), among the persistent pins too
//!   (`Config::creator`); the driver's allocator hands each table, persistent or not, the lowest
//!   free address, so a freed table's address goes to the next table allocated (the table lives in
//!   `nv_p2p_mem_info`, kmalloc'ed at `nv-p2p.c:422` for both kinds: slab reuses addresses per size
//!   class, whatever the allocation).
//! - **the MLNX_OFED host** as `drivers/infiniband/core/peer_mem.c` and mlx5 do it: the per-umem
//!   mapping lock taken before get_pages and, for an invalidating client, held through dma_map until
//!   the memory key exists and the notifier is armed; invalidation (looked up by id) takes it,
//!   revokes, and for a legacy client calls dma_unmap and put_pages inline under it; deregistration
//!   revokes, stops the notifier (legacy: unmap under the lock; "ex": mark unmapped under the lock,
//!   unmap after it), then releases; `ib_unregister_peer_memory_client` waits for its users.
//! - **the tasks of a node**: the owner process registering (`ibv_reg_mr`); the owner freeing the
//!   memory (cudaFree or exit) at any moment; a deregistration from the owner, from a forked child
//!   doing the last close, or from a device-removal kworker; our work item; `rmmod`; and, in the
//!   reuse configurations, a second registration of the owner making its persistent pin P and its
//!   N on a second allocation at any moment. (Not on the first: in the model the teardown is
//!   cudaFree (`vidmemDestruct`) [NV-TEARDOWN, NV-CALLBACK-BEFORE-RANGE-REUSE], after which no
//!   pin of it can be made. RM also removes an allocation's pins without freeing it, on the
//!   unregister-vidmem control and when the P2P object is destroyed (`third_party_p2p_ctrl.c:
//!   152-167`, `third_party_p2p.c:210-217`), and
//!   the memory can then be pinned again; that changes nothing here, as put_pages's lookup ignores
//!   which allocation a pin is of.) In the MPS configurations (`Config::mps`) the owner is an MPS
//!   client: the server owns the memory and the P2P object, whose pid list holds the owner's pid
//!   (`REGISTER_PID`) [NV-PID-LIST]; the free is the server's; and at any moment, once, the owner
//!   leaves the object (its RM client freed: /dev/nvidiactl closed, an exit that closes it before
//!   the uverbs file, or however CUDA frees it; `CliUnregisterFromThirdPartyP2P`,
//!   `CliDelThirdPartyP2PClientPid` [NV-PID-LIST], under the API lock) without its pins going: from
//!   then on its put_pages finds nothing and answers 0, N staying armed with our data, and its
//!   get_pages and get_pages_persistent fail; the server's free still calls N back.
//! - **peermem-rs**: the fixed client runs `peermem_logic::registration` exactly as the glue in
//!   `src/client.rs` does (every decision is the state machine's), with `N_PINS` around its pins
//!   of N and around acquire's persistent pin; the owner's deregistration leaves N to the
//!   driver, as a foreign task's does, and a later registration of the owner adopts a lingering
//!   registration (`Config::adopt`; docs/design-lingering-n.md). The client before that
//!   (`ProvesUnpin`, at 0ae4785) proved the owner's reach (`Op::ProveUnpinN`: "still Proving?"
//!   under `N_PINS`, then a persistent pin of the range's first GPU page and its unpin) and then
//!   unpinned N (`Op::UnpinN`, "still Unpinning?" under `N_PINS`); the client of b477f12
//!   (`TrustsUnpin`, before 6c0a72f added the proof) is that one but takes the owner's 0 from
//!   put_pages of N as the unpin (it answers the proof Ok with no driver call); the client of
//!   d115ce6 (`UnlockedP`, the parent of 19a7cde) is `ProvesUnpin` but for `N_PINS` around the
//!   persistent pins (acquire's, the proof's); the client of eb5e4f5 (`NoNPins`, the parent of
//!   8071b8f) takes `N_PINS` nowhere and has no "still Unpinning?" check (the proof, which
//!   neither of these two had, they make as `ProvesUnpin` without `N_PINS`); and three variants
//!   of the fixed client break one rule of the state machine each, as the client of 8adc715
//!   broke them (`MapsN`, rule 1; `TrustsForeignPut`, rule 2; `DropsRefInCallback`, rule 4).
//!
//! Properties: no driver structure used after the driver freed it; no registration used after its
//! last reference went; no re-entry into the driver's API lock; no module code running after the
//! module was unloaded; the NIC never keeps a usable memory key on memory the driver freed or on a
//! dead DMA mapping; no put_pages unpins a pin its caller did not hold (another registration's N
//! or persistent pin, found by a reused table address); no deadlock; at the end nothing leaked
//! (every pin, mapping, reference, lock and the work item back to zero); and no registration kept
//! for good for a free callback the driver will never make (`World::kept_for_good`), but in the
//! one race where the state machine errs towards keeping on purpose (docs/known-limits.md, "MPS";
//! `World::kept_after_late_proof`, only for the clients that prove and unpin N): the owner's put_pages unpins N, then the memory is freed (or,
//! MPS, the owner leaves) before the proof's lookup, which fails, and the state machine cannot
//! tell that from a put_pages that found nothing. That outcome is no counterexample; the report
//! gives a run that reaches it (`Report::kept_after_late_proof`).
//!
//! Bound: one GPU allocation, one registration of it, one free, one deregistration, one work item
//! (which may run several times), one rmmod attempt, and optionally a driver that refuses unpins;
//! for the fixed client (`Config::adopt`), the owner registering the range again after its
//! deregistration and deregistering it, adopting the first registration if it lingers (else
//! refused: its own N would make it the first registration's case again), and optionally the
//! memory allocated again at the same address after the free, and freed in its turn;
//! for the invalidating flavour, optionally (`Config::reuse`) a second registration of the owner
//! on a second allocation that is never freed, of which only its acquire's persistent pin
//! (`N_PINS` around get_pages_persistent for the fixed client) and its pin of N (`N_PINS` for the
//! fixed client and `UnlockedP`, get_pages, `N_PINS` dropped) are modelled; it keeps both pins,
//! and a module reference, so rmmod is refused; and with it, and a driver that unpins,
//! optionally (`Config::creator`) the owner the creator of RM's internal P2P object, whose
//! put_pages then searches the persistent pins too (with a driver that refuses unpins nothing is
//! looked up: the same states); for the invalidating flavour deregistered by the owner, with a
//! driver that unpins and without the second registration, optionally (`Config::mps`) an MPS
//! owner that leaves the server's P2P object at any moment (`Config::all` says why not
//! elsewhere). Every table, persistent or not (the proof's too), gets the lowest free address (a
//! freed table's at once; `Addr` keeps only what tells them apart). Not modelled: the table
//! allocated before the API lock (the model allocates it in section #1, where the pin becomes
//! findable), a pin made by another module of the same process (which `N_PINS` cannot exclude),
//! more than two registrations; an MPS owner that leaves more than once or joins the object again
//! (one that left and joined again between its put_pages of N and the proof would be taken as
//! proven: docs/known-limits.md). Within the bound only the first registration's put_pages looks a
//! key up, and the proof follows it on the same task, so nothing here needs `N_PINS` around the
//! proof (the model is as clean without it); it is there because every persistent pin of ours is
//! under it (src/client.rs), for the unpins of other registrations the bound leaves out.

mod client;
mod host;
mod kernel;
mod nvidia;

pub use client::{AdoptStep, CallStep, Ours, ProofStep, RunPc, SecondPinStep};
pub use host::{HostDeregStep, HostRegStep, InvalidateStep};
pub use kernel::{RmmodStep, WorkItemStep};
pub use nvidia::{DriverStep, TeardownStep};

use std::fmt;

use peermem_logic::errno::Errno;
use peermem_logic::range::GpuRange;
use peermem_logic::registration::{self as reg, Actor, HostCall, Op};
use stateright::{Model, Property};

pub use reg::Flavour;

/// A thread of the model, by index.
pub type Tid = usize;
pub const T_REG: Tid = 0;
pub const T_DEREG: Tid = 1;
pub const T_FREE: Tid = 2;
pub const T_WORK: Tid = 3;
pub const T_RMMOD: Tid = 4;
/// The second registration's pin of N (reuse configurations only).
pub const T_PIN2: Tid = 5;
/// The owner leaving the MPS server's P2P object (MPS configurations only).
pub const T_LEAVE: Tid = 6;
const THREADS: usize = 7;

/// Processes (thread-group ids) as the driver tells them apart.
const OWNER: reg::Tgid = 1;
const CHILD: reg::Tgid = 2;
const KWORKER: reg::Tgid = 3;
const RMMOD: reg::Tgid = 4;
/// The MPS server, which owns the memory and the P2P object (MPS configurations only).
const SERVER: reg::Tgid = 5;

const EINVAL: Errno = Errno::EINVAL;
const EIO: Errno = Errno::EIO;

/// Which client runs.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Client {
    /// peermem-rs as it is now.
    Fixed,
    /// The `Fixed` client with rule 1 of the state machine broken (src/logic/registration.rs):
    /// the glue maps, unmaps and reads N's table, which the driver frees when its callback
    /// returns, where the state machine says P. The fault of the client of 8adc715 (H1), which
    /// mapped N; that client's own state machine and glue (`before.rs`) were kept until these
    /// three variants replaced them.
    MapsN,
    /// The `Fixed` client with rule 2 broken: where the state machine leaves N to the driver
    /// because a task other than the owner deregisters, the glue calls put_pages of N from that
    /// task anyway and takes its 0 as the unpin, dropping the driver's reference, as the client
    /// of 8adc715 did (H2).
    TrustsForeignPut,
    /// The `Fixed` client with rule 4 broken: the free callback drops the driver's reference
    /// itself, maybe the last one and with it the module reference, instead of handing it to
    /// the work item, as the client of 8adc715 did (L1).
    DropsRefInCallback,
    /// peermem-rs just before commit 8071b8f (at eb5e4f5): the state machine of `Fixed`, its glue
    /// without the `N_PINS` lock and without the "still Unpinning?" check under it. That glue had
    /// no `Op::ProveUnpinN` (the state machine of its time asked for none); here it carries the
    /// proof out as `Fixed` does, the "still Proving?" check included, but without `N_PINS`.
    NoNPins,
    /// peermem-rs just before commit 19a7cde (at d115ce6): the state machine of `Fixed`, its glue
    /// with `N_PINS` and its check around the pins and unpins of N, but acquire's persistent pin
    /// (`PersistentPin::get`) made without `N_PINS`. That glue had no `Op::ProveUnpinN` (the state
    /// machine of its time asked for none); here it carries the proof out as `Fixed` does, the
    /// "still Proving?" check included, but without `N_PINS`, as it made every persistent pin.
    UnlockedP,
    /// The `Fixed` glue at commit b477f12 (the parent of the fix, 6c0a72f, that added
    /// `Op::ProveUnpinN`; bfdb43e between them changed only the test stand-in): no proof; the
    /// owner's 0 from put_pages of N taken as the unpin. Here: the `Fixed` glue with a lock round
    /// trip per state-machine call, as it was then, which answers `Op::ProveUnpinN` with Ok at
    /// once, without any driver call.
    TrustsUnpin,
    /// peermem-rs before N was left to linger (at 0ae4785): the state machine with
    /// `NRelease::ProveThenUnpin` (the owner's deregistration proves its reach with a persistent
    /// pin, `Op::ProveUnpinN`, then unpins N, `Op::UnpinN`), its glue as `Fixed`'s. An MPS owner
    /// leaving the server's P2P object between the proof and the unpin gets 0 with N still
    /// armed: the counterexamples that made N linger (issue 22, item 1).
    ProvesUnpin,
}

impl Client {
    /// Does the owner's deregistration prove and unpin N (`NRelease::ProveThenUnpin`)? The
    /// clients before N lingered.
    pub fn proves_unpin(self) -> bool {
        matches!(
            self,
            Client::ProvesUnpin | Client::NoNPins | Client::UnlockedP | Client::TrustsUnpin
        )
    }

    /// One of the `Fixed` client's variants with a rule of the state machine broken, each checked
    /// without the reuse and without MPS (their faults need neither).
    pub fn breaks_a_rule(self) -> bool {
        matches!(
            self,
            Client::MapsN | Client::TrustsForeignPut | Client::DropsRefInCallback
        )
    }
}

/// Who deregisters the memory.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Dereg {
    /// The owner process (ibv_dereg_mr, or its exit closing the uverbs file).
    Owner,
    /// A forked child that inherited the uverbs file and closes it last.
    ForkedChild,
    /// ib_uverbs disassociating on device removal, from a kworker.
    DeviceRemoval,
}

impl Dereg {
    fn tgid(self) -> reg::Tgid {
        match self {
            Dereg::Owner => OWNER,
            Dereg::ForkedChild => CHILD,
            Dereg::DeviceRemoval => KWORKER,
        }
    }
}

/// One configuration of the node.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Config {
    pub client: Client,
    pub flavour: Flavour,
    /// The client registers as a legacy (non-"ex") client: the host unmaps inside invalidation.
    pub legacy: bool,
    pub dereg: Dereg,
    /// The driver refuses unpins (put_pages and put_pages_persistent return -EIO, pin kept).
    pub unpin_fails: bool,
    /// A second registration of the owner process makes its acquire's persistent pin and pins its
    /// N on a second allocation (never freed) at any moment, and the driver's allocator hands
    /// either the address of a page table it freed.
    pub reuse: bool,
    /// The owner process created RM's internal P2P object, where persistent pins live (RM makes it
    /// in `memmgrStateInitLocked`, for the GPU's first opener, and `thirdpartyp2pConstruct` puts
    /// the creating task's pid in its pid list [NV-INTERNAL-OBJECT]), so its put_pages (token 0),
    /// which searches every P2P object whose pid list holds the caller
    /// (`CliNextThirdPartyP2PInfoWithPid`, 550.163.01 `third_party_p2p.c:300-342`), finds
    /// persistent pins by their table's address too. Only with the reuse and a driver that unpins
    /// (`Config::all`).
    pub creator: bool,
    /// The owner is an MPS client: the server owns the memory and the P2P object, whose pid list
    /// holds the owner's pid (`REGISTER_PID`) [NV-PID-LIST], and at any moment, once, the owner
    /// leaves it (its RM client freed: /dev/nvidiactl closed, an exit that closes it before the
    /// uverbs file; `CliUnregisterFromThirdPartyP2P`, `CliDelThirdPartyP2PClientPid` [NV-PID-LIST],
    /// under the RM API lock) without its pins going. From then on every lookup of the owner's
    /// fails: its put_pages finds nothing and answers 0 (N stays armed, with our data), its
    /// get_pages and get_pages_persistent fail (EINVAL). The free is the server's, and still calls
    /// N back. Only for the invalidating flavour, deregistered by the owner, with a driver that
    /// unpins and without the reuse (`Config::all`).
    pub mps: bool,
    /// The fixed client only, for the invalidating flavour deregistered by
    /// the owner, with a driver that unpins and without the reuse: after its deregistration the
    /// owner registers the same range again, and deregisters it. Its acquire makes its persistent
    /// pin and then, under the registration lock, takes the first registration over if it
    /// lingers (`Registration::adoptable`, `Registration::adopt`), or else unpins that pin and
    /// refuses: a registration with an N of its own is the first registration's case again, and
    /// a second one beside it is beyond the bound. The host's registration of it finds the
    /// client gone once rmmod has unregistered it (`peer_memory_mutex` orders the two).
    pub adopt: bool,
    /// With `adopt`, without MPS: after the free, the memory is allocated again at the same
    /// address, and freed in its turn, so that a persistent pin made after the first free
    /// succeeds on new memory, while the first registration's N was called back with the old (or
    /// was pinned on the new one, when its get_pages came after the first free).
    pub realloc: bool,
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} client, {:?} flavour{}, deregistered by {:?}{}",
            self.client,
            self.flavour,
            if self.flavour == Flavour::Invalidating {
                if self.legacy {
                    " (legacy host semantics)"
                } else {
                    " (ex: PEER_MEM_INVALIDATE_UNMAPS)"
                }
            } else {
                ""
            },
            self.dereg,
            if self.unpin_fails {
                ", the driver refusing unpins"
            } else {
                ""
            }
        )?;
        if self.reuse {
            write!(
                f,
                ", a second registration pinning P and N on another allocation (table addresses reused)"
            )?;
        }
        if self.creator {
            write!(
                f,
                ", the owner the creator of RM's internal P2P object (its put_pages searches the persistent pins)"
            )?;
        }
        if self.mps {
            write!(
                f,
                ", MPS (the server frees the memory; the owner may leave the server's P2P object at any moment, its pins staying)"
            )?;
        }
        if self.adopt {
            write!(
                f,
                ", then the owner registering the range again (adopting a lingering N) and deregistering it"
            )?;
        }
        if self.realloc {
            write!(
                f,
                ", the memory allocated again at the same address after the free"
            )?;
        }
        Ok(())
    }
}

impl Config {
    /// Every configuration of `client`: with the second registration and the reuse of table
    /// addresses for the invalidating flavour (the only one with an N), except for the variants
    /// that break a rule (`Client::breaks_a_rule`: their faults need no second registration); and
    /// with the reuse and a driver that unpins, the owner the creator of RM's internal P2P object
    /// or not; and for the invalidating flavour deregistered by the owner, with a driver that
    /// unpins and without the reuse, an MPS owner that may leave the P2P object (`Config::mps`),
    /// except for those variants again; and, for the fixed client only, the adoption
    /// configurations (`Config::adopt`, `Config::realloc`).
    ///
    /// Where the MPS owner is left out: the persistent flavour has no N, and its only lookup of
    /// the owner's is acquire's pin, whose failure is a refused registration as when the memory is
    /// gone; a deregistration from a forked child or a kworker never unpins N (it abandons it
    /// before any driver call) and so never asks for the proof, and the registering side is the
    /// same as in the owner's configurations; a driver that refuses unpins answers the owner's
    /// put_pages of N with -EIO before looking anything up, so no proof is asked there either; and
    /// the reuse: the leave only takes lookups away from the owner (a put_pages that finds nothing
    /// finds no reused address either), and the proof's persistent pin, with its table from the
    /// same allocator, is already in every reuse configuration deregistered by the owner (each
    /// put_pages of N that answers 0 is followed by it).
    pub fn all(client: Client) -> Vec<Config> {
        let mut v = Vec::new();
        for flavour in [Flavour::Persistent, Flavour::Invalidating] {
            for legacy in [false, true] {
                if flavour == Flavour::Persistent && legacy {
                    continue;
                }
                for dereg in [Dereg::Owner, Dereg::ForkedChild, Dereg::DeviceRemoval] {
                    for unpin_fails in [false, true] {
                        for reuse in [false, true] {
                            if reuse && (flavour == Flavour::Persistent || client.breaks_a_rule()) {
                                continue;
                            }
                            for creator in [false, true] {
                                // A driver that refuses unpins looks no key up: there the creator
                                // changes nothing (the very same states).
                                if creator && (!reuse || unpin_fails) {
                                    continue;
                                }
                                for mps in [false, true] {
                                    if mps
                                        && (flavour == Flavour::Persistent
                                            || dereg != Dereg::Owner
                                            || unpin_fails
                                            || reuse
                                            || client.breaks_a_rule())
                                    {
                                        continue;
                                    }
                                    for (adopt, realloc) in
                                        [(false, false), (true, false), (true, true)]
                                    {
                                        if adopt
                                            && (client != Client::Fixed
                                                || flavour == Flavour::Persistent
                                                || dereg != Dereg::Owner
                                                || unpin_fails
                                                || reuse)
                                        {
                                            continue;
                                        }
                                        if realloc && mps {
                                            continue;
                                        }
                                        v.push(Config {
                                            client,
                                            flavour,
                                            legacy,
                                            dereg,
                                            unpin_fails,
                                            reuse,
                                            creator,
                                            mps,
                                            adopt,
                                            realloc,
                                        });
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        v
    }
}

/// What went wrong, one property each.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Bug {
    /// A page table, DMA mapping or pin semaphore used after the driver freed it.
    DriverUseAfterFree(&'static str),
    /// peermem-rs's registration used after its last reference went.
    RegistrationUseAfterFree(&'static str),
    /// A call that takes the RM API lock made by the task that holds it (the free callback).
    ApiLockReentered,
    /// Code of peermem-rs ran after the module was unloaded.
    ModuleCodeAfterUnload,
    /// The NIC kept a usable memory key on freed or unmapped memory.
    NicUsesDeadMemory(&'static str),
    /// A put_pages found and unpinned a pin its caller did not hold: the driver's lookup by table
    /// address found another registration's pin (its N, or, when the owner created RM's internal
    /// P2P object, its persistent P), made at the address of a table it had freed.
    StaleUnpin(&'static str),
    /// A registration adopted an N the driver had called back or unpinned (the design's
    /// adoption, `Config::adopt`).
    AdoptedDeadN,
}

/// A pin of the NVIDIA driver, with the page table (and the allocation holding its DMA-mapping
/// list and semaphore) it hands out.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Default)]
pub struct Pin {
    /// The driver tracks it (persistent: pinned; non-persistent: see `armed`).
    pub tracked: bool,
    /// Non-persistent pins: the free callback is registered (API-lock section #2 done).
    pub armed: bool,
    /// The page table / pin allocation is alive (not freed).
    pub table_alive: bool,
    /// A DMA mapping of it exists (alive).
    pub mapped: bool,
    /// Ever pinned (to tell "never existed" from "freed").
    pub existed: bool,
    /// The page table's address, as the driver's allocator hands them out (`World::free_slot`):
    /// once the table is freed, the next table allocated, persistent or not, may get the same one.
    pub slot: Addr,
}

impl Pin {
    /// A pin just made, its table at `slot`: tracked and alive, not yet armed or mapped.
    pub fn made(slot: Addr) -> Self {
        Pin {
            tracked: true,
            armed: false,
            table_alive: true,
            mapped: false,
            existed: true,
            slot,
        }
    }
}

/// A page table's address, told apart as far as a lookup by address and the allocator can tell.
/// The allocator hands out the lowest free address. Only the first registration's tables (and the
/// proof's) are ever freed (the second registration keeps its pins; a table freed by a stale unpin
/// is a bug, which ends the run), so only two addresses a key may name are ever handed out again:
/// P's (`P`), and N's when N got a fresh one (`N`; with P's table already freed, N gets P's
/// address). A fresh address is above every address used before, so P's is below N's: the lowest
/// free address is P's if free, else N's if free, else another. The second registration's fresh
/// addresses, and the proof's (`Op::ProveUnpinN`) when it got a fresh one, are `Other`: no key
/// names them (the proof's table is freed at once by the task that made it, and only N's key is
/// ever looked up), so their numbers play no part. (Numbering the addresses instead gives the same
/// states up to these labels, only more of them: every order of allocation that changes nothing
/// counts apart.)
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, Default)]
pub enum Addr {
    /// A fresh address no key names and no freed table had.
    #[default]
    Other,
    /// The address of the first registration's P.
    P,
    /// The address of the first registration's N, when it got a fresh one.
    N,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HostMr {
    Unmapped,
    Mapped,
    Invalidated,
}

/// A call into the NVIDIA driver.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DOp {
    PinP,
    /// get_pages_persistent of the second registration's P, on the second allocation.
    PinP2,
    PinN,
    /// get_pages of the second registration's N, on the second allocation.
    PinN2,
    /// put_pages of the table at address `key`.
    UnpinN {
        key: Addr,
    },
    UnpinP,
    /// dma_map_pages of P's table (`true`) or N's (`false`: the previous client).
    Map(bool),
    Unmap(bool),
    /// A put_pages from a kworker that finds nothing: it only takes (and drops) the API lock.
    Barrier,
    /// The proof's get_pages_persistent of the range's first GPU page (`Op::ProveUnpinN`): the
    /// memory looked up through the caller's P2P objects; its table from the same allocator.
    ProbePin,
    /// The proof's put_pages_persistent of that pin (any task).
    ProbeUnpin,
    /// `Config::adopt`: the second registration's acquire pins the range persistently, on the
    /// first allocation (`World::p_again`).
    PinPAgain,
    /// `Config::adopt`: that pin's unpin, when there is nothing to adopt.
    UnpinPAgain,
}

/// A host entry point into the client.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Entry {
    Acquire,
    GetPages,
    DmaMap,
    DmaUnmap,
    PutPages,
    Release,
    Callback,
    Work,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Frame {
    HostReg(HostRegStep),
    HostDereg {
        pc: HostDeregStep,
        cur: HostMr,
    },
    HostInvalidate(InvalidateStep),
    Teardown(TeardownStep),
    Driver {
        op: DOp,
        pc: DriverStep,
    },
    WorkItem(WorkItemStep),
    Rmmod(RmmodStep),
    Ours(Ours),
    /// The second registration's acquire (its persistent pin) and `Op::PinN`, reduced to what
    /// touches N_PINS and the driver.
    SecondPin(SecondPinStep),
    /// The MPS owner's RM client freed: its pid leaves the server's P2P object (MPS only).
    Leave,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Thread {
    pub tgid: reg::Tgid,
    pub stack: Vec<Frame>,
    /// What the frame popped last returned to the one below.
    pub ret: Option<Result<(), Errno>>,
    pub done: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Registered {
    Pending,
    Done,
    Failed,
}

/// The whole node.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct World {
    pub cfg: Config,
    pub threads: Vec<Thread>,
    // NVIDIA driver
    pub api_lock: Option<Tid>,
    pub allocated: bool,
    pub p: Pin,
    pub n: Pin,
    /// The driver holds our `data` for N's callback.
    pub n_data: bool,
    /// The second registration's N (reuse configurations), on an allocation that is never freed.
    pub n2: Pin,
    /// The second registration's persistent pin (reuse configurations), on that allocation.
    pub p2: Pin,
    /// The persistent pin of `Op::ProveUnpinN`, from its pin to its unpin.
    pub probe: Pin,
    /// `Config::adopt`: the second registration's persistent pin, from acquire's pin until it
    /// becomes the adopted registration's P (or is unpinned).
    pub p_again: Pin,
    /// `Config::adopt`: the second registration adopted the first.
    pub adopted: bool,
    /// `Config::realloc`: the memory was allocated again after the free.
    pub reallocated: bool,
    /// MPS: the owner has left the server's P2P object; none of its lookups finds anything.
    pub owner_left: bool,
    // MLNX host
    pub mapping_lock: Option<Tid>,
    pub xa: bool,
    pub mr: HostMr,
    pub nic_live: bool,
    pub usecnt: u8,
    pub registered: Registered,
    // peermem-rs
    pub state: Option<reg::Registration>,
    /// The glue's key of N (`Inner::n`): the address of the table get_pages handed back.
    pub n_key: Option<Addr>,
    /// The task holding `N_PINS`.
    pub n_pins: Option<Tid>,
    /// References to the registration (`Arc<RegCtx>`): the host's, the driver's, the work item's.
    pub refs: u8,
    pub ctx_created: bool,
    pub wq_queued: bool,
    pub wq_running: bool,
    /// rmmod's try_stop_module succeeded: no module reference can be taken any more.
    pub module_going: bool,
    pub module_gone: bool,
    pub bug: Option<Bug>,
}

fn range() -> GpuRange {
    GpuRange::covering(0x40_0000, 0x3_0000).unwrap()
}

impl World {
    pub fn new(cfg: Config) -> Self {
        let thread = |tgid, frame: Option<Frame>| Thread {
            tgid,
            done: frame.is_none(),
            stack: frame.into_iter().collect(),
            ret: None,
        };
        World {
            cfg,
            threads: vec![
                thread(OWNER, Some(Frame::HostReg(HostRegStep::Acquire))),
                {
                    let dereg = Frame::HostDereg {
                        pc: HostDeregStep::Revoke,
                        cur: HostMr::Unmapped,
                    };
                    let mut t = thread(cfg.dereg.tgid(), Some(dereg.clone()));
                    if cfg.adopt {
                        // Last in, first run: deregister, register again, deregister again.
                        t.stack = vec![dereg.clone(), Frame::HostReg(HostRegStep::Acquire), dereg];
                    }
                    t
                },
                thread(
                    if cfg.mps { SERVER } else { OWNER },
                    Some(Frame::Teardown(TeardownStep::Free)),
                ),
                thread(KWORKER, Some(Frame::WorkItem(WorkItemStep::Idle))),
                thread(RMMOD, Some(Frame::Rmmod(RmmodStep::TryStop))),
                thread(
                    OWNER,
                    cfg.reuse.then_some(Frame::SecondPin(SecondPinStep::PinP)),
                ),
                thread(OWNER, cfg.mps.then_some(Frame::Leave)),
            ],
            api_lock: None,
            allocated: true,
            p: Pin::default(),
            n: Pin::default(),
            n_data: false,
            n2: Pin::default(),
            p2: Pin::default(),
            probe: Pin::default(),
            p_again: Pin::default(),
            adopted: false,
            reallocated: false,
            owner_left: false,
            mapping_lock: None,
            xa: false,
            mr: HostMr::Unmapped,
            nic_live: false,
            usecnt: 0,
            registered: Registered::Pending,
            state: None,
            n_key: None,
            n_pins: None,
            refs: 0,
            ctx_created: false,
            wq_queued: false,
            wq_running: false,
            module_going: false,
            module_gone: false,
            bug: None,
        }
    }

    fn invalidating(&self) -> bool {
        self.cfg.flavour == Flavour::Invalidating
    }

    fn bug(&mut self, bug: Bug) {
        if self.bug.is_none() {
            self.bug = Some(bug);
        }
    }

    fn ctx_alive(&self) -> bool {
        self.ctx_created && self.refs > 0
    }

    /// peermem-rs code runs a step: the module must be loaded and, for steps on a registration,
    /// the registration alive.
    fn our_code(&mut self, uses_ctx: bool, what: &'static str) {
        if self.module_gone {
            self.bug(Bug::ModuleCodeAfterUnload);
        }
        if uses_ctx && !self.ctx_alive() {
            self.bug(Bug::RegistrationUseAfterFree(what));
        }
    }

    fn drop_ref(&mut self) {
        self.refs = self.refs.saturating_sub(1);
    }

    /// Taking the RM API lock from `tid`: `None` if another task holds it (blocked).
    fn api_free_for(&mut self, tid: Tid) -> Option<()> {
        match self.api_lock {
            None => Some(()),
            Some(t) if t == tid => {
                // The real driver answers NV_ERR_INVALID_LOCK_STATE (-EIO) and WARNs in put_pages.
                self.bug(Bug::ApiLockReentered);
                Some(())
            }
            Some(_) => None,
        }
    }

    fn mapping_free_for(&self, tid: Tid) -> bool {
        self.mapping_lock.is_none() || self.mapping_lock == Some(tid)
    }

    fn push(&mut self, tid: Tid, frame: Frame) {
        self.threads[tid].stack.push(frame);
    }

    fn ret(&mut self, tid: Tid, r: Result<(), Errno>) {
        let t = &mut self.threads[tid];
        t.stack.pop();
        t.ret = Some(r);
        if t.stack.is_empty() {
            t.done = true;
        }
    }

    fn take_ret(&mut self, tid: Tid) -> Option<Result<(), Errno>> {
        self.threads[tid].ret.take()
    }

    /// The frame called returned (whatever it answered): `None` while it has not.
    fn returned(&mut self, tid: Tid) -> Option<()> {
        self.take_ret(tid).map(|_| ())
    }

    /// Pushes the client's entry point `e` on `tid`.
    fn call_client(&mut self, tid: Tid, e: Entry) {
        let frame = match e {
            Entry::Acquire => Ours::Acquire(CallStep::Enter),
            Entry::Callback => Ours::Run {
                actor: Actor::Callback,
                call: None,
                pc: RunPc::Begin,
            },
            Entry::Work => Ours::Run {
                actor: Actor::Work,
                call: None,
                pc: RunPc::Begin,
            },
            _ => Ours::Run {
                actor: Actor::Host,
                call: Some(match e {
                    Entry::GetPages => HostCall::GetPages {
                        range: range(),
                        core_context: 0,
                    },
                    Entry::DmaMap => HostCall::DmaMap,
                    Entry::DmaUnmap => HostCall::DmaUnmap,
                    Entry::PutPages => HostCall::PutPages,
                    _ => HostCall::Release,
                }),
                pc: RunPc::Begin,
            },
        };
        self.push(tid, Frame::Ours(frame));
    }

    fn call_driver(&mut self, tid: Tid, op: DOp) {
        self.push(
            tid,
            Frame::Driver {
                op,
                pc: DriverStep::Start,
            },
        );
    }

    /// Can thread `tid` make a step? (Without side effects: steps a copy, unless `step` would
    /// refuse it at once.)
    pub fn enabled(&self, tid: Tid) -> bool {
        self.bug.is_none() && !self.threads[tid].done && self.clone().step(tid).is_some()
    }

    pub fn deadlocked(&self) -> bool {
        if self.bug.is_some() {
            // A bug ends the run; it is its own property.
            return false;
        }
        let live: Vec<Tid> = (0..THREADS).filter(|&t| !self.thread_idle(t)).collect();
        !live.is_empty() && live.iter().all(|&t| !self.enabled(t))
    }

    /// Done, or the work thread with nothing queued.
    fn thread_idle(&self, tid: Tid) -> bool {
        let t = &self.threads[tid];
        t.done
            || (tid == T_WORK
                && matches!(t.stack.last(), Some(Frame::WorkItem(WorkItemStep::Idle)))
                && !self.wq_queued)
    }

    pub fn all_done(&self) -> bool {
        (0..THREADS).all(|t| self.thread_idle(t))
    }

    /// What is still held when every thread is done (a leak), if anything.
    pub fn leak(&self) -> Option<&'static str> {
        if !self.all_done() || self.bug.is_some() {
            return None;
        }
        // A driver that refuses unpins keeps its pins: that is its leak, reported by the event.
        if self.p.tracked && !self.cfg.unpin_fails {
            return Some("the persistent pin P");
        }
        if self.probe.tracked && !self.cfg.unpin_fails {
            return Some("the proof's persistent pin");
        }
        if self.p_again.tracked {
            return Some("the persistent pin of the range registered again");
        }
        if self.p.mapped || self.n.mapped {
            return Some("a DMA mapping");
        }
        if self.n.tracked && !self.cfg.unpin_fails {
            return Some("the pin N");
        }
        if self.n_data {
            return Some("the driver's reference to the registration");
        }
        // The one reference of a registration kept for good is its own property (`kept_for_good`).
        if self.refs > 0 && !self.cfg.unpin_fails && !(self.refs == 1 && self.kept_for_good()) {
            return Some("a reference to the registration");
        }
        if self.api_lock.is_some() || self.mapping_lock.is_some() || self.n_pins.is_some() {
            return Some("a lock");
        }
        if self.usecnt > 0 {
            return Some("the host's use of the client");
        }
        if self.nic_live {
            return Some("a live memory key");
        }
        None
    }

    /// Every thread is done and the registration is still there, holding the reference the state
    /// machine believes the driver has (as its callback's data), while the driver holds none: no
    /// callback will ever come to let it go, so it and the module reference stay until reboot.
    pub fn kept_for_good(&self) -> bool {
        self.all_done()
            && self.bug.is_none()
            && self.refs > 0
            && !self.n_data
            && self
                .state
                .as_ref()
                .is_some_and(|st| st.driver_holds_ref() && !st.callback_running())
    }

    /// Kept for good (`kept_for_good`) with N abandoned by the state machine: what
    /// `Event::UnpinNUnproven` keeps when the owner's put_pages of N did find and unpin it (the
    /// driver dropped our data; N abandoned with the driver holding it would have been called back
    /// by the free, and torn down) and the proof's lookup then failed all the same, because the
    /// memory was freed (or, MPS, the owner left) between the two calls: the state machine cannot
    /// tell that from a put_pages that found nothing, and errs towards keeping (accepted:
    /// docs/known-limits.md, "MPS"). The proof fails in the model only when the memory is freed or
    /// the owner left, so this is that race and nothing else.
    pub fn kept_after_late_proof(&self) -> bool {
        self.kept_for_good()
            && self
                .state
                .as_ref()
                .is_some_and(|st| st.n_pin() == reg::NPin::Abandoned)
    }

    /// One atomic step of thread `tid`, or `None` if it is blocked (or done).
    pub fn step(mut self, tid: Tid) -> Option<World> {
        if self.bug.is_some() || self.threads[tid].done {
            return None;
        }
        let frame = self.threads[tid].stack.last()?.clone();
        match frame {
            Frame::HostReg(pc) => self.host_reg(tid, pc)?,
            Frame::HostDereg { pc, cur } => self.host_dereg(tid, pc, cur)?,
            Frame::HostInvalidate(pc) => self.host_invalidate(tid, pc)?,
            Frame::Teardown(pc) => self.teardown(tid, pc)?,
            Frame::Driver { op, pc } => self.driver(tid, op, pc)?,
            Frame::WorkItem(pc) => self.work_item(tid, pc)?,
            Frame::Rmmod(pc) => self.rmmod(tid, pc)?,
            Frame::Ours(Ours::Acquire(pc)) => self.fixed_acquire(tid, pc)?,
            Frame::Ours(Ours::Adopt(pc)) => self.adopting_acquire(tid, pc)?,
            Frame::Ours(Ours::Run { actor, call, pc }) => self.fixed_run(tid, actor, call, pc)?,
            Frame::Ours(Ours::TrustForeignPut(pc)) => self.trust_foreign_put(tid, pc)?,
            Frame::Ours(Ours::PinN(pc)) => self.glue_pin_n(tid, pc)?,
            Frame::Ours(Ours::UnpinN(pc)) => self.glue_unpin_n(tid, pc)?,
            Frame::Ours(Ours::ProveUnpinN(pc)) => self.glue_prove_unpin_n(tid, pc)?,
            Frame::SecondPin(pc) => self.second_pin(tid, pc)?,
            Frame::Leave => self.leave(tid)?,
        }
        Some(self)
    }

    fn set_pc(&mut self, tid: Tid, frame: Frame) {
        *self.threads[tid].stack.last_mut().unwrap() = frame;
    }
}

/// The model: every configuration given, every interleaving.
pub struct ProtocolModel {
    pub configs: Vec<Config>,
}

impl Model for ProtocolModel {
    type State = World;
    type Action = Tid;

    fn init_states(&self) -> Vec<World> {
        self.configs.iter().map(|c| World::new(*c)).collect()
    }

    fn actions(&self, state: &World, actions: &mut Vec<Tid>) {
        for t in 0..THREADS {
            if state.enabled(t) {
                actions.push(t);
            }
        }
    }

    fn next_state(&self, last: &World, action: Tid) -> Option<World> {
        last.clone().step(action)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        fn no_bug(s: &World, f: impl Fn(&Bug) -> bool) -> bool {
            !s.bug.as_ref().is_some_and(f)
        }
        vec![
            Property::always(
                "dma_map_pages never reads or links into a pin the driver freed",
                |_, s: &World| {
                    no_bug(
                        s,
                        |b| matches!(b, Bug::DriverUseAfterFree(w) if w.starts_with("dma_map_pages")),
                    )
                },
            ),
            Property::always(
                "dma_unmap_pages never takes the semaphore of a pin the driver freed",
                |_, s: &World| {
                    no_bug(
                        s,
                        |b| matches!(b, Bug::DriverUseAfterFree(w) if w.starts_with("dma_unmap_pages")),
                    )
                },
            ),
            Property::always(
                "no other driver structure is used after the driver freed it",
                |_, s: &World| {
                    no_bug(s, |b| {
                        matches!(b, Bug::DriverUseAfterFree(w)
                    if !w.starts_with("dma_map_pages") && !w.starts_with("dma_unmap_pages"))
                    })
                },
            ),
            Property::always(
                "no registration is used after its last reference went",
                |_, s: &World| no_bug(s, |b| matches!(b, Bug::RegistrationUseAfterFree(_))),
            ),
            Property::always(
                "the driver's API lock is never re-entered",
                |_, s: &World| no_bug(s, |b| matches!(b, Bug::ApiLockReentered)),
            ),
            Property::always("no module code runs after rmmod", |_, s: &World| {
                no_bug(s, |b| matches!(b, Bug::ModuleCodeAfterUnload))
            }),
            Property::always(
                "the NIC never keeps a usable key on dead memory",
                |_, s: &World| {
                    no_bug(s, |b| matches!(b, Bug::NicUsesDeadMemory(_)))
                        && !(s.nic_live && s.bug.is_none() && !live_mapping(s))
                },
            ),
            Property::always(
                "put_pages never unpins a pin its caller did not hold",
                |_, s: &World| no_bug(s, |b| matches!(b, Bug::StaleUnpin(_))),
            ),
            Property::always(
                "a registration adopts only an N the driver still holds",
                |_, s: &World| no_bug(s, |b| matches!(b, Bug::AdoptedDeadN)),
            ),
            Property::always("no deadlock", |_, s: &World| !s.deadlocked()),
            Property::always("nothing is left behind at the end", |_, s: &World| {
                s.leak().is_none()
            }),
            Property::always(
                "no registration is kept for a callback the driver will never make, but after a proof too late",
                |_, s: &World| !s.kept_for_good() || s.kept_after_late_proof(),
            ),
            Property::sometimes("a registration completes", |_, s: &World| {
                s.registered == Registered::Done
            }),
            Property::sometimes(ADOPTS, |_, s: &World| {
                s.adopted && s.registered == Registered::Done
            }),
            Property::sometimes(
                KEPT_AFTER_LATE_PROOF,
                |_, s: &World| s.kept_after_late_proof(),
            ),
            Property::sometimes(
                UNPROVEN_ABANDONS_N,
                |_, s: &World| {
                    s.owner_left
                        && s.n_data
                        && s
                            .state
                            .as_ref()
                            .is_some_and(|st| st.n_pin() == reg::NPin::Abandoned)
                },
            ),
        ]
    }
}

/// The accepted outcome of `World::kept_after_late_proof`, as a `sometimes` property.
const KEPT_AFTER_LATE_PROOF: &str = "a registration is kept for good after the memory went (or the owner left) between put_pages of N and the proof";
/// `Config::adopt`, not vacuous: a `sometimes` property.
const ADOPTS: &str = "a registration adopting a lingering N completes";
/// MPS, not vacuous: a `sometimes` property.
const UNPROVEN_ABANDONS_N: &str =
    "a deregistration by an owner that left the P2P object leaves N armed for the callback";

/// The NIC's key points at a DMA mapping that is alive.
fn live_mapping(s: &World) -> bool {
    if s.maps_n() {
        s.n.mapped && s.n.table_alive
    } else {
        s.p.mapped && s.p.table_alive
    }
}

/// A readable line for the step `tid` makes from `s`.
pub fn describe(s: &World, tid: Tid) -> String {
    let who = match tid {
        T_REG => "registering task (owner)".to_string(),
        T_DEREG => format!("deregistering task ({:?})", s.cfg.dereg),
        T_FREE if s.cfg.mps => "freeing task (MPS server: frees the memory)".to_string(),
        T_FREE => "freeing task (owner: cudaFree/exit)".to_string(),
        T_WORK => "peermem-rs work item".to_string(),
        T_RMMOD => "rmmod".to_string(),
        T_LEAVE => "MPS owner's RM client freed".to_string(),
        _ => "second registration (owner, another allocation)".to_string(),
    };
    let what = match s.threads[tid].stack.last() {
        None => "(done)".to_string(),
        Some(f) => match f {
            Frame::HostReg(pc) => format!("MLNX registration: {}", pc.what()),
            Frame::HostDereg { pc, .. } => format!("MLNX deregistration: {}", pc.what()),
            Frame::HostInvalidate(pc) => format!("MLNX invalidate: {}", pc.what()),
            Frame::Teardown(pc) => format!("NVIDIA free path: {}", pc.what()),
            Frame::Driver { op, pc } => format!(
                "NVIDIA {}",
                match (op, pc) {
                    (DOp::PinP, _) => "get_pages_persistent (API lock)",
                    (DOp::PinP2, _) => "get_pages_persistent (API lock; table allocated, at the lowest free address)",
                    (DOp::PinN, DriverStep::Start) => "get_pages: API-lock section #1 (pin, no callback yet)",
                    (DOp::PinN, _) => "get_pages: API-lock section #2 (register the callback)",
                    (DOp::PinN2, DriverStep::Start) => "get_pages: API-lock section #1 (table allocated, at the lowest free address; pin linked under it)",
                    (DOp::PinN2, _) => "get_pages: API-lock section #2 (register the callback)",
                    (DOp::UnpinN { .. }, _) => if s.cfg.creator && s.threads[tid].tgid == OWNER {
                        "put_pages (API lock; looks the table's address up among the caller's pins, persistent ones of RM's internal object included)"
                    } else {
                        "put_pages (API lock; looks the table's address up among the caller's pins)"
                    },
                    (DOp::UnpinP, _) => "put_pages_persistent (API lock)",
                    (DOp::Map(_), DriverStep::Start) => "dma_map_pages: read the page table (no lock)",
                    (DOp::Map(_), DriverStep::MapLocked) => "dma_map_pages: map under the API lock",
                    (DOp::Map(_), _) => "dma_map_pages: down() the pin's semaphore, link the mapping",
                    (DOp::Unmap(_), _) => "dma_unmap_pages: down() the pin's semaphore, unlink (no API lock)",
                    (DOp::Barrier, _) => "put_pages of a key that is no pin's, from a kworker (API lock only)",
                    (DOp::ProbePin, _) => "get_pages_persistent of the first page (API lock; the memory looked up through the caller's P2P objects; table allocated, at the lowest free address)",
                    (DOp::ProbeUnpin, _) => "put_pages_persistent of the proof's pin (API lock)",
                    (DOp::PinPAgain, _) => "get_pages_persistent of the range registered again (API lock; table allocated, at the lowest free address)",
                    (DOp::UnpinPAgain, _) => "put_pages_persistent of that pin (API lock)",
                }
            ),
            Frame::WorkItem(pc) => match pc {
                WorkItemStep::Idle => "start the work item",
                WorkItemStep::Ran => "drop the work item's reference",
                WorkItemStep::Returning => "return to the workqueue core (module code)",
            }
            .to_string(),
            Frame::Rmmod(pc) => match pc {
                RmmodStep::TryStop => "try_stop_module (refused while a module reference is held)",
                RmmodStep::Exit => "module exit: wait for the host's users and our queue, then free the module",
            }
            .to_string(),
            Frame::Ours(o) => match o {
                Ours::Acquire(CallStep::Enter) => if s.models_n_pins_around_p() {
                    "peermem-rs acquire: take N_PINS, call nvidia_p2p_get_pages_persistent"
                } else {
                    "peermem-rs acquire: call nvidia_p2p_get_pages_persistent"
                }
                .to_string(),
                Ours::Acquire(CallStep::Returned) => format!(
                    "peermem-rs acquire: get_pages_persistent returned{}; create the registration",
                    if s.models_n_pins_around_p() { ", drop N_PINS" } else { "" }
                ),
                Ours::Run { actor, call, pc } => format!(
                    "peermem-rs {}: {}",
                    match (actor, call) {
                        (Actor::Host, Some(HostCall::GetPages { .. })) => "get_pages",
                        (Actor::Host, Some(HostCall::DmaMap)) => "dma_map",
                        (Actor::Host, Some(HostCall::DmaUnmap)) => "dma_unmap",
                        (Actor::Host, Some(HostCall::PutPages)) => "put_pages",
                        (Actor::Host, _) => "release",
                        (Actor::Callback, _) => "free callback",
                        (Actor::Work, _) => "work item",
                    },
                    match (pc, s.one_hold()) {
                        (RunPc::Begin, true) => "begin, next step (one hold of the lock)".to_string(),
                        (RunPc::Begin, false) => "begin (lock)".to_string(),
                        (RunPc::Next, _) => "next step (lock)".to_string(),
                        (RunPc::Await(op), true) => {
                            format!("{op:?} returned: done, next step (one hold of the lock)")
                        }
                        (RunPc::Await(op), false) => format!("{op:?} returned: done (lock)"),
                        (RunPc::DropHostRef, _) => "drop the host's reference".to_string(),
                        (RunPc::Return(_), _) => "return".to_string(),
                    }
                ),
                Ours::TrustForeignPut(CallStep::Enter) => "peermem-rs put_pages (rule 2 broken): call nvidia_p2p_put_pages of N from this task".to_string(),
                Ours::TrustForeignPut(CallStep::Returned) => "peermem-rs put_pages (rule 2 broken): put_pages returned 0, taken as the unpin: drop the driver's reference".to_string(),
                Ours::Adopt(pc) => format!("peermem-rs acquire of the range registered again: {}", pc.what()),
                Ours::PinN(CallStep::Enter) => if s.glue_takes_n_pins(Op::PinN) {
                    "peermem-rs get_pages: take N_PINS, hand the driver a reference, call nvidia_p2p_get_pages"
                } else {
                    "peermem-rs get_pages: hand the driver a reference, call nvidia_p2p_get_pages"
                }
                .to_string(),
                Ours::PinN(CallStep::Returned) => format!(
                    "peermem-rs get_pages: store N's key{}",
                    if s.glue_takes_n_pins(Op::PinN) { ", drop N_PINS" } else { "" }
                ),
                Ours::UnpinN(CallStep::Enter) => if s.glue_takes_n_pins(Op::UnpinN) {
                    "peermem-rs put_pages: take N_PINS; lock: N still Unpinning? then read N's key and call nvidia_p2p_put_pages"
                } else {
                    "peermem-rs put_pages: lock: read N's key; unlock; call nvidia_p2p_put_pages"
                }
                .to_string(),
                Ours::UnpinN(CallStep::Returned) => format!(
                    "peermem-rs put_pages: nvidia_p2p_put_pages returned{}",
                    if s.glue_takes_n_pins(Op::UnpinN) { ", drop N_PINS" } else { "" }
                ),
                Ours::ProveUnpinN(ProofStep::Enter) => if s.glue_takes_n_pins(Op::ProveUnpinN) {
                    "peermem-rs put_pages, proof: take N_PINS; lock: N still Proving? then call nvidia_p2p_get_pages_persistent of the first page"
                } else {
                    "peermem-rs put_pages, proof: lock: N still Proving? then call nvidia_p2p_get_pages_persistent of the first page"
                }
                .to_string(),
                Ours::ProveUnpinN(ProofStep::Pinned) => "peermem-rs put_pages, proof: get_pages_persistent returned; if it pinned, call nvidia_p2p_put_pages_persistent".to_string(),
                Ours::ProveUnpinN(ProofStep::Unpinned) => format!(
                    "peermem-rs put_pages, proof: put_pages_persistent returned{}",
                    if s.glue_takes_n_pins(Op::ProveUnpinN) { ", drop N_PINS" } else { "" }
                ),
            },
            Frame::Leave => "RM takes the owner's pid out of the server's P2P object (API lock; its pins stay armed)".to_string(),
            Frame::SecondPin(pc) => match (pc, s.models_n_pins_around_p(), s.glue_takes_n_pins(Op::PinN)) {
                (SecondPinStep::PinP, true, _) => "peermem-rs acquire of its P: take N_PINS, call nvidia_p2p_get_pages_persistent",
                (SecondPinStep::PinP, false, _) => "peermem-rs acquire of its P: call nvidia_p2p_get_pages_persistent",
                (SecondPinStep::PinnedP, true, _) => "peermem-rs acquire of its P: returned, drop N_PINS",
                (SecondPinStep::PinnedP, false, _) => "peermem-rs acquire of its P: returned",
                (SecondPinStep::PinN, _, true) => "peermem-rs get_pages of its N: take N_PINS, call nvidia_p2p_get_pages",
                (SecondPinStep::PinN, _, false) => "peermem-rs get_pages of its N: call nvidia_p2p_get_pages",
                (SecondPinStep::PinnedN, _, true) => "peermem-rs get_pages of its N: returned, drop N_PINS",
                (SecondPinStep::PinnedN, _, false) => "peermem-rs get_pages of its N: returned",
            }
            .to_string(),
        },
    };
    format!("{who}: {what}")
}

/// A counterexample: the steps, and how the last state is wrong.
#[derive(Clone, Debug)]
pub struct Trace {
    pub steps: Vec<String>,
    pub end: String,
}

/// The result of checking one configuration.
pub struct Report {
    pub states: usize,
    pub unique_states: usize,
    /// Every `always` property, with a counterexample if it fails.
    pub properties: Vec<(&'static str, Option<Trace>)>,
    /// A registration completed in some run (the model is not vacuous).
    pub registration_completes: bool,
    /// MPS: in some run the owner left, its put_pages of N found nothing, the proof failed and N
    /// was abandoned, still armed with our data, for the server's free to call back.
    pub unproven_unpin_abandons_n: bool,
    /// A run in which the registration is kept for good because the memory went (or the MPS owner
    /// left) between its put_pages of N, which unpinned N, and the proof
    /// (`World::kept_after_late_proof`): not a counterexample, the price of the proof
    /// (docs/known-limits.md, "MPS").
    pub kept_after_late_proof: Option<Trace>,
    /// `Config::adopt`: in some run the second registration adopts the first and completes.
    pub adoption_completes: bool,
}

impl Report {
    /// The counterexample of the property whose name contains `what`.
    pub fn counterexample(&self, what: &str) -> Option<&Trace> {
        self.properties
            .iter()
            .find(|(name, _)| name.contains(what))
            .and_then(|(_, t)| t.as_ref())
    }

    pub fn all_hold(&self) -> bool {
        self.properties.iter().all(|(_, t)| t.is_none())
    }
}

/// Explores every interleaving of `cfg`, breadth first. A counterexample is the path to a failing
/// state, not always a shortest one: stateright 0.31 records the path of every failing state it
/// visits for an `always` property, and the last one stays.
pub fn check(cfg: Config) -> Report {
    use stateright::{Checker, Expectation};
    let model = ProtocolModel { configs: vec![cfg] };
    let properties = model.properties();
    let checker = model.checker().spawn_bfs().join();
    let mut report = Report {
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        properties: Vec::new(),
        registration_completes: false,
        unproven_unpin_abandons_n: false,
        kept_after_late_proof: None,
        adoption_completes: false,
    };
    for p in properties {
        let found = checker.discovery(p.name);
        let trace = found.map(|path| {
            let states = path.clone().into_states();
            let actions = path.into_actions();
            let last = states.last().unwrap();
            Trace {
                steps: states
                    .iter()
                    .zip(actions.iter())
                    .map(|(s, a)| describe(s, *a))
                    .collect(),
                end: last
                    .bug
                    .map(|b| format!("{b:?}"))
                    .or_else(|| last.leak().map(|l| format!("left behind: {l}")))
                    .or_else(|| {
                        last.kept_for_good().then(|| {
                            "kept for good: the registration and the module reference, for a \
                             callback the driver will never make (it holds no pin of ours)"
                                .to_string()
                        })
                    })
                    .unwrap_or_else(|| "no thread can move: deadlock".into()),
            }
        });
        if p.expectation == Expectation::Sometimes {
            match p.name {
                KEPT_AFTER_LATE_PROOF => report.kept_after_late_proof = trace,
                UNPROVEN_ABANDONS_N => report.unproven_unpin_abandons_n = trace.is_some(),
                ADOPTS => report.adoption_completes = trace.is_some(),
                _ => report.registration_completes = trace.is_some(),
            }
            continue;
        }
        report.properties.push((p.name, trace));
    }
    report
}
