// SPDX-License-Identifier: GPL-2.0

//! The MLNX_OFED host: `ib_umem_get`'s peer path and mlx5's registration, deregistration and
//! invalidation (`drivers/infiniband/core/peer_mem.c`), as the crate documentation describes.

use crate::{Entry, Frame, HostMr, Registered, Tid, World};

/// The MLNX host's registration (`ib_umem_get`'s peer path, then mlx5), step by step.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HostRegStep {
    Acquire,
    Acquired,
    GetPages,
    GotPages,
    Mapped,
    UnwoundPut,
    Armed,
    Released,
}

impl HostRegStep {
    pub fn what(self) -> &'static str {
        match self {
            Self::Acquire => "ask the clients: acquire",
            Self::Acquired => "acquire answered: count the client's use",
            Self::GetPages => "take the mapping lock, allocate the id, get_pages",
            Self::GotPages => "get_pages answered: dma_map (mapping lock held), or unwind: release",
            Self::Mapped => "dma_map answered: the MR mapped, or unwind: put_pages",
            Self::UnwoundPut => "unwind: put_pages answered; drop the mapping lock, release",
            Self::Armed => "memory key ready: arm the notifier, drop the mapping lock",
            Self::Released => "unwind: release answered",
        }
    }
}

/// mlx5's deregistration, step by step.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum HostDeregStep {
    Revoke,
    StopNotifier,
    LegacyUnmapped,
    LegacyPut,
    ExUnmapped,
    ExPut,
    ReleaseUmem,
    UmemUnmapped,
    UmemPut,
    Release,
    Released,
}

impl HostDeregStep {
    pub fn what(self) -> &'static str {
        match self {
            Self::Revoke => "once registered: revoke the memory key",
            Self::StopNotifier => "stop the notifier (mapping lock; legacy: dma_unmap under it, ex: mark unmapped, dma_unmap after it)",
            Self::LegacyUnmapped => "legacy: dma_unmap answered; put_pages under the mapping lock",
            Self::LegacyPut => "legacy: put_pages answered; drop the mapping lock",
            Self::ExUnmapped => "ex: dma_unmap answered; put_pages after the mapping lock",
            Self::ExPut => "ex: put_pages answered",
            Self::ReleaseUmem => "ib_peer_umem_release: dma_unmap if still mapped",
            Self::UmemUnmapped => "ib_peer_umem_release: dma_unmap answered; put_pages",
            Self::UmemPut => "ib_peer_umem_release: put_pages answered",
            Self::Release => "erase the id, call release",
            Self::Released => "release answered: drop the client's use",
        }
    }
}

/// `ib_invalidate_peer_memory`, called by the client's free callback, step by step.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum InvalidateStep {
    Lookup,
    Revoke,
    LegacyUnmapped,
    LegacyPut,
    Unlock,
}

impl InvalidateStep {
    pub fn what(self) -> &'static str {
        match self {
            Self::Lookup => "look the id up",
            Self::Revoke => "take the mapping lock, revoke (legacy: dma_unmap)",
            Self::LegacyUnmapped => "legacy: dma_unmap answered; put_pages",
            Self::LegacyPut => "legacy: put_pages answered",
            Self::Unlock => "drop the mapping lock",
        }
    }
}

impl World {
    /// ib_umem_get's peer path, then mlx5 creating the key and arming the notifier.
    pub(crate) fn host_reg(&mut self, tid: Tid, pc: HostRegStep) -> Option<()> {
        let next = |w: &mut World, pc| w.set_pc(tid, Frame::HostReg(pc));
        match pc {
            HostRegStep::Acquire => {
                // A registration that follows another on this task (`Config::adopt`) starts
                // afresh: what the deregistration before it returned is not its.
                self.threads[tid].ret = None;
                self.registered = Registered::Pending;
                if self.module_gone {
                    // rmmod unregistered the client: the host no longer asks it.
                    self.registered = Registered::Failed;
                    self.ret(tid, Ok(()));
                    return Some(());
                }
                next(self, HostRegStep::Acquired);
                self.call_client(tid, Entry::Acquire);
            }
            HostRegStep::Acquired => match self.take_ret(tid)? {
                Err(_) => {
                    self.registered = Registered::Failed;
                    self.ret(tid, Ok(()));
                }
                Ok(()) => {
                    self.usecnt += 1;
                    next(self, HostRegStep::GetPages);
                }
            },
            HostRegStep::GetPages => {
                // mapping_lock before the id and get_pages [OFED-MAPPING-LOCK].
                if !self.mapping_free_for(tid) {
                    return None;
                }
                self.mapping_lock = Some(tid);
                self.xa = self.invalidating();
                next(self, HostRegStep::GotPages);
                self.call_client(tid, Entry::GetPages);
            }
            HostRegStep::GotPages => match self.take_ret(tid)? {
                Err(_) => {
                    self.xa = false;
                    self.mapping_lock = None;
                    next(self, HostRegStep::Released);
                    self.call_client(tid, Entry::Release);
                }
                Ok(()) => {
                    next(self, HostRegStep::Mapped);
                    self.call_client(tid, Entry::DmaMap);
                }
            },
            HostRegStep::Mapped => match self.take_ret(tid)? {
                Err(_) => {
                    // dma_map failed: put_pages, still under the lock.
                    next(self, HostRegStep::UnwoundPut);
                    self.call_client(tid, Entry::PutPages);
                }
                Ok(()) => {
                    self.mr = HostMr::Mapped;
                    if !self.invalidating() {
                        // Non-invalidating clients: the lock goes when ib_peer_umem_get returns.
                        self.mapping_lock = None;
                    }
                    next(self, HostRegStep::Armed);
                }
            },
            HostRegStep::UnwoundPut => {
                self.returned(tid)?;
                self.xa = false;
                self.mapping_lock = None;
                next(self, HostRegStep::Released);
                self.call_client(tid, Entry::Release);
            }
            HostRegStep::Armed => {
                // The memory key exists; the notifier is armed and the lock dropped
                // [OFED-MAPPING-LOCK].
                self.nic_live = true;
                if self.invalidating() {
                    self.mapping_lock = None;
                }
                self.registered = Registered::Done;
                self.ret(tid, Ok(()));
            }
            HostRegStep::Released => {
                self.returned(tid)?;
                self.usecnt -= 1;
                self.registered = Registered::Failed;
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }

    /// mlx5 deregistration: revoke, stop the notifier, ib_peer_umem_release.
    pub(crate) fn host_dereg(&mut self, tid: Tid, pc: HostDeregStep, cur: HostMr) -> Option<()> {
        let next = |w: &mut World, pc, cur| w.set_pc(tid, Frame::HostDereg { pc, cur });
        if pc == HostDeregStep::Revoke {
            // A deregistration that follows a registration on this task (`Config::adopt`) starts
            // afresh: what the registration before it returned is not its.
            self.threads[tid].ret = None;
        }
        match pc {
            HostDeregStep::Revoke => match self.registered {
                Registered::Pending => return None,
                Registered::Failed => self.ret(tid, Ok(())),
                Registered::Done => {
                    // mlx5r_umr_revoke_mr first.
                    self.nic_live = false;
                    next(self, HostDeregStep::StopNotifier, cur);
                }
            },
            HostDeregStep::StopNotifier => {
                if !self.invalidating() {
                    next(self, HostDeregStep::ReleaseUmem, cur);
                    return Some(());
                }
                if !self.mapping_free_for(tid) {
                    return None;
                }
                self.mapping_lock = Some(tid);
                if self.cfg.legacy {
                    if self.mr == HostMr::Mapped {
                        next(self, HostDeregStep::LegacyUnmapped, cur);
                        self.call_client(tid, Entry::DmaUnmap);
                    } else {
                        self.mr = HostMr::Unmapped;
                        self.mapping_lock = None;
                        next(self, HostDeregStep::ReleaseUmem, cur);
                    }
                } else {
                    let was = self.mr;
                    self.mr = HostMr::Unmapped;
                    self.mapping_lock = None;
                    if was == HostMr::Mapped {
                        next(self, HostDeregStep::ExUnmapped, was);
                        self.call_client(tid, Entry::DmaUnmap);
                    } else {
                        next(self, HostDeregStep::ReleaseUmem, was);
                    }
                }
            }
            HostDeregStep::LegacyUnmapped => {
                self.returned(tid)?;
                next(self, HostDeregStep::LegacyPut, cur);
                self.call_client(tid, Entry::PutPages);
            }
            HostDeregStep::LegacyPut => {
                self.returned(tid)?;
                self.mr = HostMr::Unmapped;
                self.mapping_lock = None;
                next(self, HostDeregStep::ReleaseUmem, cur);
            }
            HostDeregStep::ExUnmapped => {
                self.returned(tid)?;
                next(self, HostDeregStep::ExPut, cur);
                self.call_client(tid, Entry::PutPages);
            }
            HostDeregStep::ExPut => {
                self.returned(tid)?;
                next(self, HostDeregStep::ReleaseUmem, cur);
            }
            HostDeregStep::ReleaseUmem => {
                // ib_peer_umem_release: unmap only if still mapped (no lock).
                if self.mr == HostMr::Mapped {
                    next(self, HostDeregStep::UmemUnmapped, cur);
                    self.call_client(tid, Entry::DmaUnmap);
                } else {
                    next(self, HostDeregStep::Release, cur);
                }
            }
            HostDeregStep::UmemUnmapped => {
                self.returned(tid)?;
                next(self, HostDeregStep::UmemPut, cur);
                self.call_client(tid, Entry::PutPages);
            }
            HostDeregStep::UmemPut => {
                self.returned(tid)?;
                self.mr = HostMr::Unmapped;
                next(self, HostDeregStep::Release, cur);
            }
            HostDeregStep::Release => {
                self.xa = false;
                next(self, HostDeregStep::Released, cur);
                self.call_client(tid, Entry::Release);
            }
            HostDeregStep::Released => {
                self.returned(tid)?;
                self.usecnt -= 1;
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }

    /// ib_invalidate_peer_memory, called by the client's free callback.
    pub(crate) fn host_invalidate(&mut self, tid: Tid, pc: InvalidateStep) -> Option<()> {
        let next = |w: &mut World, pc| w.set_pc(tid, Frame::HostInvalidate(pc));
        match pc {
            InvalidateStep::Lookup => {
                if !self.xa {
                    // An id nobody has: counted and answered 0.
                    self.ret(tid, Ok(()));
                } else {
                    next(self, InvalidateStep::Revoke);
                }
            }
            InvalidateStep::Revoke => {
                if !self.mapping_free_for(tid) {
                    return None;
                }
                self.mapping_lock = Some(tid);
                if self.mr == HostMr::Mapped {
                    self.nic_live = false;
                    if self.cfg.legacy {
                        next(self, InvalidateStep::LegacyUnmapped);
                        self.call_client(tid, Entry::DmaUnmap);
                    } else {
                        self.mr = HostMr::Invalidated;
                        next(self, InvalidateStep::Unlock);
                    }
                } else {
                    next(self, InvalidateStep::Unlock);
                }
            }
            InvalidateStep::LegacyUnmapped => {
                self.returned(tid)?;
                next(self, InvalidateStep::LegacyPut);
                self.call_client(tid, Entry::PutPages);
            }
            InvalidateStep::LegacyPut => {
                self.returned(tid)?;
                self.mr = HostMr::Unmapped;
                next(self, InvalidateStep::Unlock);
            }
            InvalidateStep::Unlock => {
                self.mapping_lock = None;
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }
}
