// SPDX-License-Identifier: GPL-2.0

//! The NVIDIA driver: nv-p2p.c's entry points over RM's API lock, its free path, its allocator of
//! page tables, and (MPS) an owner leaving the server's P2P object, as the crate documentation
//! describes.

use crate::{Addr, Bug, DOp, Entry, Errno, Frame, Pin, Tid, World, EINVAL, EIO, OWNER};

/// The NVIDIA driver's free path (cudaFree, exit), step by step.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum TeardownStep {
    Free,
    CallBack,
    CalledBack,
    Unlock,
    /// `Config::realloc`: the memory allocated again at the same address.
    Realloc,
}

impl TeardownStep {
    pub fn what(self) -> &'static str {
        match self {
            Self::Free => "take the API lock, free the memory",
            Self::CallBack => "call the free callback (if N is armed)",
            Self::CalledBack => "callback returned: free the table, its mappings, the semaphore",
            Self::Unlock => "drop the API lock",
            Self::Realloc => {
                "allocate memory again at the same address (API lock), to be freed in turn"
            }
        }
    }
}

/// Where a driver call with more than one atomic step is (the others have only `Start`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum DriverStep {
    Start,
    /// get_pages: its second API-lock section (the callback's registration).
    SecondSection,
    /// dma_map_pages: the page table read, the API lock next.
    MapLocked,
    /// dma_map_pages: after the API lock, the mapping linked into the pin.
    MapLink,
}

impl World {
    /// cudaFree / exit: the API lock, the callback, the frees.
    pub(crate) fn teardown(&mut self, tid: Tid, pc: TeardownStep) -> Option<()> {
        let next = |w: &mut World, pc| w.set_pc(tid, Frame::Teardown(pc));
        match pc {
            TeardownStep::Free => {
                self.api_free_for(tid)?;
                self.api_lock = Some(tid);
                self.allocated = false;
                next(self, TeardownStep::CallBack);
            }
            TeardownStep::CallBack => {
                if self.n.tracked && self.n.armed {
                    next(self, TeardownStep::CalledBack);
                    // The callback gets our data: the registration must still be alive.
                    self.our_code(true, "the free callback's data");
                    self.call_client(tid, Entry::Callback);
                } else {
                    if self.n.tracked {
                        // Pinned in section #1, callback not yet registered: dropped silently.
                        self.n.tracked = false;
                    }
                    next(self, TeardownStep::Unlock);
                }
            }
            TeardownStep::CalledBack => {
                self.returned(tid)?;
                // nv_p2p_mem_info_free_callback: free the table, its mappings, the semaphore.
                self.n.table_alive = false;
                self.n.mapped = false;
                self.n.tracked = false;
                self.n_data = false;
                if self.invalidating() && self.nic_live {
                    self.bug(Bug::NicUsesDeadMemory(
                        "the memory key is still usable after the free callback returned",
                    ));
                }
                next(self, TeardownStep::Unlock);
            }
            TeardownStep::Unlock => {
                self.api_lock = None;
                if self.cfg.realloc && !self.reallocated {
                    next(self, TeardownStep::Realloc);
                } else {
                    self.ret(tid, Ok(()));
                }
            }
            TeardownStep::Realloc => {
                // The new memory is freed in its turn, once (its pins called back as the first's).
                self.api_free_for(tid)?;
                self.allocated = true;
                self.reallocated = true;
                next(self, TeardownStep::Free);
            }
        }
        Some(())
    }

    /// The address the driver's allocator hands the next page table, persistent or not: the
    /// lowest one no live table has, so a freed table's address is handed out again at once (as
    /// slab does for the size class of `nv_p2p_mem_info`, which holds both kinds, whatever the
    /// allocation it pins). The freed addresses, lowest first, are P's and N's (see `Addr`);
    /// with neither free, a fresh one: `fresh` (P's or N's own label for the first registration's
    /// P and N, `Other` for the second registration's tables).
    pub(crate) fn free_slot(&self, fresh: Addr) -> Addr {
        let tables = [
            &self.p,
            &self.n,
            &self.p2,
            &self.n2,
            &self.probe,
            &self.p_again,
        ];
        let taken = |a: Addr| tables.iter().any(|t| t.table_alive && t.slot == a);
        // An address exists once a table got it: P's with P, N's with an N that got a fresh one.
        let exists = |a: Addr| tables.iter().any(|t| t.existed && t.slot == a);
        [Addr::P, Addr::N]
            .into_iter()
            .find(|&a| exists(a) && !taken(a))
            .unwrap_or(fresh)
    }

    /// `RmP2PGetPagesPersistent` on the first allocation: found only where the caller reaches it
    /// (`reaches`: through its P2P objects, `RmP2PGetInfoWithoutToken`) and while it is allocated,
    /// the pin's table at the lowest free address (`fresh` when no freed one is free; see
    /// `free_slot`); else EINVAL.
    fn persistent_pin(&self, reaches: bool, fresh: Addr) -> Result<Pin, Errno> {
        if self.allocated && reaches {
            Ok(Pin::made(self.free_slot(fresh)))
        } else {
            Err(EINVAL)
        }
    }

    pub(crate) fn table(&mut self, p: bool) -> &mut Pin {
        if p {
            &mut self.p
        } else {
            &mut self.n
        }
    }

    pub(crate) fn driver(&mut self, tid: Tid, op: DOp, pc: DriverStep) -> Option<()> {
        // The caller reaches the first allocation's P2P object (`RmP2PGetInfoWithoutToken`: the
        // objects whose pid list holds the calling process): the owner, until it left (MPS).
        let owner = self.threads[tid].tgid == OWNER && !self.owner_left;
        match (op, pc) {
            (DOp::PinP, _) => {
                self.api_free_for(tid)?;
                let r = self.persistent_pin(owner, Addr::P).map(|pin| self.p = pin);
                self.ret(tid, r);
            }
            (DOp::PinPAgain, _) => {
                // The range registered again: looked up as acquire's pin is, on the first
                // allocation (or on the memory allocated again there, `Config::realloc`).
                self.api_free_for(tid)?;
                let r = self
                    .persistent_pin(owner, Addr::Other)
                    .map(|pin| self.p_again = pin);
                self.ret(tid, r);
            }
            (DOp::UnpinPAgain, _) => {
                self.api_free_for(tid)?;
                self.p_again = Pin::default();
                self.ret(tid, Ok(()));
            }
            (DOp::PinP2, _) => {
                // The second registration's persistent pin: its table from the same allocator, at
                // the lowest free address (the second allocation is never freed).
                self.api_free_for(tid)?;
                self.p2 = Pin::made(self.free_slot(Addr::Other));
                self.ret(tid, Ok(()));
            }
            (DOp::PinN, DriverStep::Start) => {
                // Section #1: find the memory by the calling process, create the pin.
                self.api_free_for(tid)?;
                if self.allocated && owner {
                    self.n = Pin::made(self.free_slot(Addr::N));
                    self.set_pc(
                        tid,
                        Frame::Driver {
                            op,
                            pc: DriverStep::SecondSection,
                        },
                    );
                } else {
                    self.ret(tid, Err(EINVAL));
                }
            }
            (DOp::PinN, _) => {
                // Section #2: register the callback, unless the free dropped the pin meanwhile.
                self.api_free_for(tid)?;
                if !self.n.tracked {
                    self.n.table_alive = false;
                    self.ret(tid, Err(EINVAL));
                } else if !owner {
                    // MPS, the owner left between the sections: `RmP2PRegisterCallback` (token 0)
                    // looks the memory up by the caller's pid and fails; nv-p2p.c's failure path
                    // calls put_pages, which finds nothing either, and frees the table. RM keeps
                    // the pin, with no callback: the free drops it silently.
                    self.n.table_alive = false;
                    self.ret(tid, Err(EINVAL));
                } else {
                    self.n.armed = true;
                    self.n_data = true;
                    self.ret(tid, Ok(()));
                }
            }
            (DOp::PinN2, DriverStep::Start) => {
                // Section #1 of the second registration's get_pages: its table is allocated (the
                // model allocates it here rather than before the API lock: only once linked here
                // can a lookup find it), the pin linked under that address.
                self.api_free_for(tid)?;
                self.n2 = Pin::made(self.free_slot(Addr::Other));
                self.set_pc(
                    tid,
                    Frame::Driver {
                        op,
                        pc: DriverStep::SecondSection,
                    },
                );
            }
            (DOp::PinN2, _) => {
                // Section #2: the callback registered (the second allocation is never freed).
                self.api_free_for(tid)?;
                let r = if self.n2.tracked {
                    self.n2.armed = true;
                    Ok(())
                } else {
                    // Unlinked under it by a stale put_pages (already a bug).
                    Err(EINVAL)
                };
                self.ret(tid, r);
            }
            (DOp::UnpinN { key }, _) => {
                self.api_free_for(tid)?;
                let r = if self.cfg.unpin_fails {
                    Err(EIO)
                } else {
                    // RmP2PPutPages with token 0: the P2P objects whose pid list holds the calling
                    // process, and in them the pin whose key is the table's address; the VA plays
                    // no part. Found: unlinked, and nv_p2p_put_pages frees the table. RM's internal
                    // object, which holds the persistent pins, is among them when the owner
                    // created it (`Config::creator`).
                    let live = |p: &Pin| p.tracked && p.table_alive && p.slot == key;
                    let persistent = owner && self.cfg.creator;
                    if owner && self.n.armed && live(&self.n) {
                        self.n.tracked = false;
                        self.n.table_alive = false;
                        self.n.mapped = false;
                        self.n_data = false;
                    } else if owner && live(&self.n2) {
                        self.n2.tracked = false;
                        self.n2.table_alive = false;
                        self.bug(Bug::StaleUnpin(
                            "put_pages of a freed table unpinned the second registration's N, \
                             made at the same address (no callback; its table freed under it)",
                        ));
                    } else if persistent && live(&self.p2) {
                        self.p2.tracked = false;
                        self.p2.table_alive = false;
                        self.bug(Bug::StaleUnpin(
                            "put_pages of a freed table unpinned the second registration's \
                             persistent pin P, made at the same address (found in RM's internal \
                             P2P object, which the owner created; its table freed under it)",
                        ));
                    } else if persistent && live(&self.p) {
                        self.p.tracked = false;
                        self.p.table_alive = false;
                        self.p.mapped = false;
                        self.bug(Bug::StaleUnpin(
                            "put_pages of a freed table unpinned the registration's own \
                             persistent pin P, made at the same address (found in RM's internal \
                             P2P object, which the owner created; its table freed under it)",
                        ));
                    }
                    // Not found among the caller's pins (another process, or torn down): 0.
                    Ok(())
                };
                self.ret(tid, r);
            }
            (DOp::UnpinP, _) => {
                self.api_free_for(tid)?;
                if !self.p.table_alive {
                    self.bug(Bug::DriverUseAfterFree(
                        "put_pages_persistent on a freed page table",
                    ));
                }
                let r = if self.cfg.unpin_fails {
                    Err(EIO)
                } else {
                    self.p.tracked = false;
                    self.p.table_alive = false;
                    self.p.mapped = false;
                    Ok(())
                };
                self.ret(tid, r);
            }
            (DOp::Map(p), DriverStep::Start) => {
                // The page table is read before the API lock.
                if !self.table(p).table_alive {
                    self.bug(Bug::DriverUseAfterFree(
                        "dma_map_pages read a freed page table",
                    ));
                }
                self.set_pc(
                    tid,
                    Frame::Driver {
                        op,
                        pc: DriverStep::MapLocked,
                    },
                );
            }
            (DOp::Map(_), DriverStep::MapLocked) => {
                self.api_free_for(tid)?;
                self.set_pc(
                    tid,
                    Frame::Driver {
                        op,
                        pc: DriverStep::MapLink,
                    },
                );
            }
            (DOp::Map(p), _) => {
                // After the API lock: down() on the semaphore inside the pin, link the mapping.
                if !self.table(p).table_alive {
                    self.bug(Bug::DriverUseAfterFree(
                        "dma_map_pages linked its mapping into a freed pin",
                    ));
                }
                self.table(p).mapped = true;
                self.ret(tid, Ok(()));
            }
            (DOp::Barrier, _) => {
                self.api_free_for(tid)?;
                self.ret(tid, Ok(()));
            }
            (DOp::ProbePin, _) => {
                // `RmP2PGetPagesPersistent`: the memory looked up through the caller's P2P objects
                // (`RmP2PGetInfoWithoutToken`, as put_pages does), then pinned in RM's internal
                // object; the table from the same allocator, at the lowest free address.
                self.api_free_for(tid)?;
                let r = self
                    .persistent_pin(owner, Addr::Other)
                    .map(|pin| self.probe = pin);
                self.ret(tid, r);
            }
            (DOp::ProbeUnpin, _) => {
                self.api_free_for(tid)?;
                if !self.probe.table_alive {
                    self.bug(Bug::DriverUseAfterFree(
                        "put_pages_persistent on a freed page table",
                    ));
                }
                let r = if self.cfg.unpin_fails {
                    Err(EIO)
                } else {
                    self.probe.tracked = false;
                    self.probe.table_alive = false;
                    Ok(())
                };
                self.ret(tid, r);
            }
            (DOp::Unmap(p), _) => {
                if !self.table(p).table_alive {
                    self.bug(Bug::DriverUseAfterFree(
                        "dma_unmap_pages took the semaphore of a freed pin",
                    ));
                }
                self.table(p).mapped = false;
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }

    /// MPS: the owner's RM client is freed (/dev/nvidiactl closed, an exit that closes it first)
    /// and RM takes its pid out of the server's P2P object, under the API lock, leaving its pins
    /// armed (`CliUnregisterFromThirdPartyP2P`, `CliDelThirdPartyP2PClientPid`) [NV-PID-LIST].
    pub(crate) fn leave(&mut self, tid: Tid) -> Option<()> {
        self.api_free_for(tid)?;
        self.owner_left = true;
        self.ret(tid, Ok(()));
        Some(())
    }
}
