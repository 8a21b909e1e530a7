// SPDX-License-Identifier: GPL-2.0

//! The kernel crate's API where it differs between the kernels peermem-rs builds on: the one place
//! for those differences.
//!
//! The kernel crate changes every release and has no stable API, so an out-of-tree module that
//! builds on more than one kernel must name what differs. Kbuild sets one cfg per release that
//! changed something we use, from the kernel's own VERSION and PATCHLEVEL (`peermem_kernel_ge_7_3`:
//! Linux 7.3 or later). The rest of the crate calls these functions and never tests a kernel
//! version itself. The kernels built and loaded in CI, and the oldest one this file knows, are in
//! README.md ("Kernels").
//!
//! Differences, with the release that made them:
//! - 7.3: `THIS_MODULE` became an associated constant of `ModuleMetadata`; before, `module!`
//!   emitted a `static THIS_MODULE` at the crate root.
//! - 7.3: `Task::tgid()` appeared; before, only `Task::pid()` existed.

use crate::logic::registration::Tgid;
use kernel::bindings;

/// This module's descriptor (the C `THIS_MODULE`).
#[cfg(peermem_kernel_ge_7_3)]
pub(crate) fn this_module() -> *mut bindings::module {
    <crate::LocalModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr()
}

/// This module's descriptor (the C `THIS_MODULE`).
#[cfg(not(peermem_kernel_ge_7_3))]
pub(crate) fn this_module() -> *mut bindings::module {
    crate::THIS_MODULE.as_ptr()
}

/// The calling task's thread-group id (`current->tgid`): its process, as the NVIDIA driver tells
/// processes apart.
#[cfg(peermem_kernel_ge_7_3)]
pub(crate) fn current_tgid() -> Tgid {
    kernel::current!().tgid()
}

/// The calling task's thread-group id (`current->tgid`): its process, as the NVIDIA driver tells
/// processes apart.
#[cfg(not(peermem_kernel_ge_7_3))]
pub(crate) fn current_tgid() -> Tgid {
    let task = kernel::current!().as_ptr();
    // SAFETY: `current!()` is the running task, valid while it runs this code. `tgid` is set when
    // the task is created (copy_process) and never written again (an exec by a non-leader thread
    // swaps pids in de_thread, not tgids), so reading it races with no writer; this is the read
    // 7.3's `Task::tgid` makes. Not 7.2's `tgid_nr_ns`: that is relative to a pid namespace, and
    // the NVIDIA driver compares the global `current->tgid`.
    unsafe { *core::ptr::addr_of!((*task).tgid) }
}
