// SPDX-License-Identifier: GPL-2.0

//! The kernel around the module: the workqueue running our work item, and `rmmod`.

use crate::{Entry, Frame, HostRegStep, Registered, Tid, World};

/// The kernel's worker running our work item.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum WorkItemStep {
    Idle,
    Ran,
    Returning,
}

/// `rmmod`: the module reference check, then module exit.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RmmodStep {
    TryStop,
    Exit,
}

impl World {
    pub(crate) fn work_item(&mut self, tid: Tid, pc: WorkItemStep) -> Option<()> {
        match pc {
            WorkItemStep::Idle => {
                if !self.wq_queued {
                    return None;
                }
                self.wq_queued = false;
                self.wq_running = true;
                self.set_pc(tid, Frame::WorkItem(WorkItemStep::Ran));
                self.call_client(tid, Entry::Work);
            }
            WorkItemStep::Ran => {
                self.returned(tid)?;
                // The work function drops the reference it was queued with: maybe the last one.
                self.our_code(true, "the work item");
                self.drop_ref();
                self.set_pc(tid, Frame::WorkItem(WorkItemStep::Returning));
            }
            WorkItemStep::Returning => {
                // ...and returns to the workqueue: still module code until here.
                self.our_code(false, "");
                self.wq_running = false;
                self.set_pc(tid, Frame::WorkItem(WorkItemStep::Idle));
            }
        }
        Some(())
    }

    pub(crate) fn rmmod(&mut self, tid: Tid, pc: RmmodStep) -> Option<()> {
        match pc {
            RmmodStep::TryStop => {
                if !self.ctx_created && self.registered == Registered::Pending {
                    return None;
                }
                // try_stop_module: refused while anything holds a module reference (the second
                // registration holds one for as long as it lives, i.e. to the end of the model).
                if self.ctx_alive() || self.cfg.reuse {
                    self.ret(tid, Ok(()));
                } else {
                    self.module_going = true;
                    self.set_pc(tid, Frame::Rmmod(RmmodStep::Exit));
                }
            }
            RmmodStep::Exit => {
                // Module exit: ib_unregister_peer_memory_client waits for the host's users;
                // destroying our workqueue waits for a running work item.
                // `peer_memory_mutex`, held by the host around acquire and the client's use count
                // that follows it, orders the unregistration against a registration asking us.
                let asking = self.threads.iter().any(|t| {
                    t.stack
                        .iter()
                        .any(|f| matches!(f, Frame::HostReg(HostRegStep::Acquired)))
                });
                if self.usecnt > 0 || self.wq_running || self.wq_queued || asking {
                    return None;
                }
                self.module_gone = true;
                self.ret(tid, Ok(()));
            }
        }
        Some(())
    }
}
