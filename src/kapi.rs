// SPDX-License-Identifier: GPL-2.0

//! The kernel layer: everything peermem-rs takes from the kernel that differs between the releases
//! it builds on (Linux 6.12 LTS to 7.3), or that the kernel crate of one of them lacks.
//!
//! The kernel crate has no stable API: 6.12's lacks much of what 7.3's has (atomics, global locks,
//! `SetOnce`, `CStrExt`, time and sleeping, debugfs, `InPlaceModule`, `fmt!`), and both name some
//! things differently (`module!`'s keys, `THIS_MODULE`). Rather than one branch per release, this
//! file has one implementation for the whole range, so that building on the oldest and the newest
//! kernel compiles the code every kernel in between runs. It is built on the kernel crate where
//! every release has the API, and otherwise on functions every release's `kernel::bindings` has
//! (`try_module_get`, `kset_find_obj`, `mutex_lock`, `get_current`, `ktime_get`, `seq_write`, ...),
//! on our own bindgen output (`crate::sys`: `pci_dev_put`, which 6.12's lacks) or on the C shim
//! (`bindings/shim.c`: macros and static inlines). No code in src/ is keyed on a kernel version
//! (no version `cfg`); the notes on what a release lacks are here (and, for `module!`'s input, at
//! the crate root, where the macro is invoked).
//!
//! What the rest of the crate takes from the kernel crate directly is what every release has in
//! the same form: `Arc`, `ArcBorrow`, `SpinLock`, `KBox`, `Opaque`, `workqueue::{Queue, Work,
//! WorkItem}`, `kernel::Module`, `pr_*!`, the error codes of `kernel::prelude` (`EBUSY`, `EINVAL`,
//! `ENOMEM`), and `kernel::bindings` for the SG table and `struct device`.
//!
//! | what | here, on every release | why not the kernel crate's |
//! |---|---|---|
//! | C strings | [`CStr`] is `core::ffi::CStr` (`c"..."` literals), [`as_char_ptr`], [`cstr_from_ptr`], [`cstr_str`] | 6.12's `kernel::str::CStr` is a type of its own; 7.3's is core's plus `CStrExt` |
//! | atomics | [`atomic`] (`core::sync::atomic`) | no `kernel::sync::atomic` on 6.12 |
//! | THIS_MODULE, module references | [`set_this_module`] (init's `&'static ThisModule`), [`ModuleRef`] (`try_module_get`/`module_put`) | a crate-root static on 6.12 and 7.2, `ModuleMetadata::THIS_MODULE` on 7.3 |
//! | is module X loaded | [`module_present`] (`kset_find_obj` on `module_kset`) | no API |
//! | work queue | [`WorkQueue`] (shim `alloc_workqueue`, `destroy_workqueue`), [`work_queue`] | `alloc_workqueue` is a variadic function on 6.12, a macro (`alloc_workqueue_noprof`) on 7.3 |
//! | module-wide mutexes | [`StaticMutex`] on the shim's `DEFINE_MUTEX`es | no `kernel::sync::global_lock` on 6.12 |
//! | time, sleeping | [`monotonic_ms`], [`monotonic_ns`] (`ktime_get`), [`sleep_ms`] (shim `fsleep`) | no `kernel::time::{Instant, Delta}` or `time::delay` on 6.12 |
//! | current's tgid, pid | [`current_tgid`] (`get_current()->tgid`), [`current_pid`] (`current!().pid()`) | `Task::tgid` is 7.3's (not on 7.2) |
//! | PCI device references | [`PciDev`] (shim `dev_is_pci` + `pci_dev_get`, `pci_dev_put`) | not in 6.12's bindings; `dev_is_pci` is a macro |
//! | debugfs | [`DebugfsDir`] with [`SeqFile`] files (shim `DEFINE_SHOW_ATTRIBUTE`, `DEFINE_SHOW_STORE_ATTRIBUTE`) | no `kernel::debugfs` on 6.12 |
//! | errno without a kernel-crate constant | [`eopnotsupp`] | 6.12 has no `EOPNOTSUPP` |
//!
//! The `module!` invocation itself (crate root) uses only the keys every release accepts (`type`,
//! `name`, `description`, `license`); `MODULE_AUTHOR` is in the shim (the key is `author` on 6.12,
//! `authors` on 7.2 and 7.3).

use core::cell::UnsafeCell;
use core::ffi::c_void;
use core::fmt;
use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr::NonNull;

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_ulong};
use kernel::prelude::*;
use kernel::workqueue::Queue;

use crate::logic::errno::Errno;
use crate::logic::registration::Tgid;
use crate::sys;

pub(crate) use core::ffi::CStr;
/// Atomics: core's, the same on every release.
pub(crate) use core::sync::atomic;

use atomic::{AtomicPtr, Ordering};

// --- C strings -----------------------------------------------------------------------------------

/// The string as the kernel's `const char *` (`kernel::ffi::c_char` is `u8` on every release and
/// architecture: rust/ffi.rs).
pub(crate) fn as_char_ptr(s: &CStr) -> *const c_char {
    s.to_bytes_with_nul().as_ptr()
}

/// The C string at `ptr`.
///
/// # Safety
///
/// `ptr` points to a NUL-terminated string that stays alive and unchanged for `'a`.
// `CStr::from_ptr` is disallowed by the kernel's clippy.toml because core's `c_char` is signed on
// x86; the cast below is from the kernel's unsigned one, and 6.12 has no `CStrExt` to use instead.
#[allow(clippy::disallowed_methods)]
pub(crate) unsafe fn cstr_from_ptr<'a>(ptr: *const c_char) -> &'a CStr {
    // SAFETY: the caller's contract; both `c_char`s are one byte.
    unsafe { CStr::from_ptr(ptr.cast()) }
}

/// The string for a message (`{}` of a `CStr` compiles on 7.3 only). Our C strings are ASCII.
pub(crate) fn cstr_str(s: &CStr) -> &str {
    s.to_str().unwrap_or("(not UTF-8)")
}

// --- errors --------------------------------------------------------------------------------------

/// The logic's [`Errno`] of a kernel error.
pub(crate) fn errno(e: Error) -> Errno {
    Errno::from_negative(e.to_errno())
}

/// The kernel error of the logic's [`Errno`].
pub(crate) fn error(e: Errno) -> Error {
    Error::from_errno(e.negative())
}

/// `-EOPNOTSUPP`.
// Used only by a build for an NVIDIA driver without the persistent API (src/nvidia.rs).
#[cfg_attr(peermem_persistent_api, allow(dead_code))]
pub(crate) fn eopnotsupp() -> Error {
    Error::from_errno(-(bindings::EOPNOTSUPP as c_int))
}

// --- this module ---------------------------------------------------------------------------------

/// This module's descriptor (`THIS_MODULE`), from the `&'static ThisModule` module init is given;
/// null before. Published with release ordering, read with acquire.
static THIS_MODULE_PTR: AtomicPtr<bindings::module> = AtomicPtr::new(core::ptr::null_mut());

/// Records this module's descriptor. Called first thing in module init.
pub(crate) fn set_this_module(module: &'static ThisModule) {
    THIS_MODULE_PTR.store(module.as_ptr(), Ordering::Release);
}

fn this_module() -> *mut bindings::module {
    THIS_MODULE_PTR.load(Ordering::Acquire)
}

/// The module's version string (`MODULE_VERSION`), from the C shim.
// The `unsafe` around `addr_of!` of an extern static is needed before rustc 1.82 (see
// `SharedMutex::raw`).
#[allow(unused_unsafe)]
pub(crate) fn version() -> &'static CStr {
    // The C array is longer than its Rust declaration (`[c_char; 0]`, an extern array of unknown
    // size): take the object's address rather than a pointer derived from a zero-length reference.
    // SAFETY: taking the address of an extern static reads nothing and makes no reference.
    let p = unsafe { core::ptr::addr_of!(sys::peermem_param_version) }.cast();
    // SAFETY: `peermem_param_version` is a NUL-terminated `const char[]` defined in bindings/shim.c;
    // it is immutable and lives as long as the module.
    unsafe { cstr_from_ptr(p) }
}

/// A reference on this module: it cannot be unloaded while one exists. Dropping the last one lets
/// unload proceed, so the code that drops it must be code unload waits for (see its users).
pub(crate) struct ModuleRef(());

impl ModuleRef {
    /// Takes a reference; `None` once the module is going away (or before init recorded it).
    pub(crate) fn try_get() -> Option<Self> {
        let this = this_module();
        if this.is_null() {
            return None;
        }
        // SAFETY: `this` is this module's `struct module`, alive while its code runs.
        // `try_module_get` takes a reference unless the module is no longer live
        // (kernel/module/main.c), and is callable from any context.
        unsafe { bindings::try_module_get(this) }.then_some(Self(()))
    }
}

impl Drop for ModuleRef {
    fn drop(&mut self) {
        // SAFETY: drops the reference `try_get` took (so `this_module()` was set, and stays set).
        unsafe { bindings::module_put(this_module()) };
    }
}

/// Is a module named `name` in the kernel (loaded, loading or unloading)?
///
/// A module cannot ask the loader (`find_module` is not exported since 5.12, nor is
/// `module_kset`), but every module in the kernel has a kobject in `module_kset`
/// (/sys/module/<name>), and so do we: the loader adds ours (`mod_sysfs_setup`, which sets
/// `mkobj.kobj.kset` to `module_kset`) before it calls our init. `kset_find_obj` (EXPORT_SYMBOL_GPL)
/// looks a name up there, as the loader itself does to refuse a second copy of a module
/// (`mod_sysfs_init`). Only from module init (after [`set_this_module`]).
pub(crate) fn module_present(name: &CStr) -> bool {
    let this = this_module();
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
    let kobj = unsafe { bindings::kset_find_obj(kset, as_char_ptr(name)) };
    if kobj.is_null() {
        return false;
    }
    // SAFETY: `kset_find_obj` returned the kobject with a reference taken for us; we drop it.
    unsafe { bindings::kobject_put(kobj) };
    true
}

// --- the work queue ------------------------------------------------------------------------------

/// The workqueue [`work_queue`] gives, published by [`WorkQueue`].
static WORK_QUEUE: AtomicPtr<bindings::workqueue_struct> = AtomicPtr::new(core::ptr::null_mut());

/// The module's own unbound workqueue: module exit must wait for a running item to return before
/// the module's code goes (an item may drop the last module reference), which destroying our own
/// queue does (flushing a system queue is not allowed).
///
/// # Invariants
///
/// `0` is a workqueue made by `alloc_workqueue`, destroyed on drop; while it exists, it is the one
/// `WORK_QUEUE` publishes.
pub(crate) struct WorkQueue(NonNull<bindings::workqueue_struct>);

// SAFETY: a workqueue may be used and destroyed from any task.
unsafe impl Send for WorkQueue {}
// SAFETY: as above.
unsafe impl Sync for WorkQueue {}

impl WorkQueue {
    /// Makes the queue and publishes it. Only one may exist at a time.
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a C string that outlives the queue (the shim passes it as the "%s"
        // argument, so it is not a format); unbound: the items sleep in driver calls and need no
        // particular CPU.
        let wq = unsafe {
            sys::peermem_alloc_workqueue(as_char_ptr(name), bindings::wq_flags_WQ_UNBOUND, 0)
        };
        let wq = NonNull::new(wq).ok_or(ENOMEM)?;
        WORK_QUEUE.store(wq.as_ptr(), Ordering::Release);
        // INVARIANT: made and published just now.
        Ok(Self(wq))
    }
}

impl Drop for WorkQueue {
    fn drop(&mut self) {
        WORK_QUEUE.store(core::ptr::null_mut(), Ordering::Release);
        // SAFETY: by the type invariant. `destroy_workqueue` drains the queue and waits for a
        // running item to return. Nothing queues an item any more: items are queued only for
        // registrations, each registration holds a module reference (`ModuleRef`), and the owner
        // (`module::PeerMemRs`) is dropped only in module exit, which the kernel runs only when no
        // reference is left, and after its clients were unregistered (its field order).
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// The module's workqueue, for work items that exist only while a [`WorkQueue`] does.
///
/// # Safety
///
/// A [`WorkQueue`] exists, and the returned reference is not used after it is dropped.
pub(crate) unsafe fn work_queue() -> &'static Queue {
    let wq = WORK_QUEUE.load(Ordering::Acquire);
    // SAFETY: by the caller's contract `wq` is the live workqueue `WorkQueue` published.
    unsafe { Queue::from_raw(wq) }
}

// --- module-wide mutexes -------------------------------------------------------------------------

/// The statically initialised mutexes of the C shim (`DEFINE_MUTEX`), one per [`StaticMutex`].
#[derive(Clone, Copy)]
pub(crate) enum SharedMutex {
    /// `peermem_lingering_lock`: `client::LINGERING`.
    Lingering,
    /// `peermem_log_lock`: `stats::LOG_LIMIT`.
    Log,
}

impl SharedMutex {
    // `addr_of_mut!` in `unsafe`, not `&raw mut`: taking an extern static's address became safe
    // (and `&raw` appeared) in rustc 1.82, and 6.12 accepts rustc from 1.78; newer compilers call
    // the `unsafe` unnecessary.
    #[allow(unused_unsafe)]
    fn raw(self) -> *mut bindings::mutex {
        match self {
            // The shim's `struct mutex`, which bindgen sees as opaque bytes of its size.
            Self::Lingering => {
                // SAFETY: taking the address of an extern static reads nothing and makes no
                // reference.
                unsafe { core::ptr::addr_of_mut!(sys::peermem_lingering_lock) }.cast()
            }
            // SAFETY: as above.
            Self::Log => unsafe { core::ptr::addr_of_mut!(sys::peermem_log_lock) }.cast(),
        }
    }
}

/// A module-wide sleeping lock (a kernel `struct mutex`) guarding a `T`, usable from module load
/// on: the mutex is the C shim's, initialised at compile time, so there is nothing to set up or
/// tear down. Taken only in process context, where sleeping is allowed.
pub(crate) struct StaticMutex<T> {
    mutex: SharedMutex,
    data: UnsafeCell<T>,
}

// SAFETY: `data` is reached only through a guard, which holds the mutex: by one task at a time.
unsafe impl<T: Send> Sync for StaticMutex<T> {}

impl<T> StaticMutex<T> {
    /// A lock of `data` by the shim's `mutex`.
    ///
    /// # Safety
    ///
    /// No other `StaticMutex` uses `mutex`.
    pub(crate) const unsafe fn new(mutex: SharedMutex, data: T) -> Self {
        Self {
            mutex,
            data: UnsafeCell::new(data),
        }
    }

    /// Sleeps until the lock is ours. Process context only.
    pub(crate) fn lock(&self) -> StaticMutexGuard<'_, T> {
        let raw = self.mutex.raw();
        // SAFETY: `raw` is a `DEFINE_MUTEX` of the shim: initialised and alive as long as the
        // module. `mutex_lock` (the kernel crate's helper, on every release) may sleep, which our
        // callers allow.
        unsafe { bindings::mutex_lock(raw) };
        StaticMutexGuard {
            lock: self,
            raw,
            _not_send: PhantomData,
        }
    }
}

/// The lock of a [`StaticMutex`], held until dropped, by the task that took it.
pub(crate) struct StaticMutexGuard<'a, T> {
    lock: &'a StaticMutex<T>,
    raw: *mut bindings::mutex,
    /// A mutex is released by the task that took it.
    _not_send: PhantomData<*mut ()>,
}

impl<T> Deref for StaticMutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the mutex, so no other reference to the data exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> DerefMut for StaticMutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for StaticMutexGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: this task locked `raw` in `lock` and has not unlocked it (the guard is not
        // `Send`, so this runs in the task that took it).
        unsafe { bindings::mutex_unlock(self.raw) };
    }
}

// --- time and sleeping ---------------------------------------------------------------------------

/// Milliseconds of the monotonic clock (`ktime_get`, CLOCK_MONOTONIC), for rate limits.
pub(crate) fn monotonic_ms() -> u64 {
    // SAFETY: `ktime_get` may be called from any context but NMI (kernel/time/timekeeping.c warns
    // only when timekeeping is suspended); our callers are tasks.
    let ns = unsafe { bindings::ktime_get() };
    u64::try_from(ns).unwrap_or(0) / 1_000_000
}

/// Nanoseconds of the monotonic clock (`ktime_get`, CLOCK_MONOTONIC: what `ktime_get_ns`, a
/// static inline, returns), for the time accounting (`crate::timing`).
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: `ktime_get` may be called from any context but NMI (kernel/time/timekeeping.c warns
    // only when timekeeping is suspended), with or without locks held; our callers are tasks, in
    // callbacks, our work item or a debugfs read, some holding a spinlock.
    let ns = unsafe { bindings::ktime_get() };
    u64::try_from(ns).unwrap_or(0)
}

/// Sleeps for about `ms` milliseconds. Process context only.
pub(crate) fn sleep_ms(ms: u32) {
    // SAFETY: `fsleep` of a millisecond or more sleeps (usleep_range, or msleep from 20 ms:
    // include/linux/delay.h); our callers may sleep.
    unsafe { sys::peermem_fsleep((ms as c_ulong).saturating_mul(1000)) };
}

// --- the current task ----------------------------------------------------------------------------

/// The calling task's thread-group id (`current->tgid`): its process, as the NVIDIA driver tells
/// processes apart.
pub(crate) fn current_tgid() -> Tgid {
    // SAFETY: `get_current` (the kernel crate's helper for `current`, on every release) has no
    // precondition in process context, where our callers are.
    let task = unsafe { bindings::get_current() };
    // SAFETY: `task` is the running task, valid while it runs this code. `tgid` is set when the
    // task is created (copy_process) and never written again (an exec by a non-leader thread
    // swaps pids in de_thread, not tgids), so reading it races with no writer; this is the read
    // 7.3's `Task::tgid` makes. Not `tgid_nr_ns`: that is relative to a pid namespace, and the
    // NVIDIA driver compares the global `current->tgid`.
    unsafe { *core::ptr::addr_of!((*task).tgid) }
}

/// The calling task's pid, for messages.
pub(crate) fn current_pid() -> i32 {
    kernel::current!().pid()
}

// --- PCI devices ---------------------------------------------------------------------------------

/// A PCI device with a reference of ours on it.
///
/// # Invariants
///
/// Points to a `struct pci_dev` on which this value holds a reference (`pci_dev_get`), dropped
/// on drop.
pub(crate) struct PciDev(NonNull<bindings::pci_dev>);

// SAFETY: a reference on a `struct pci_dev` may be held and dropped from any task.
unsafe impl Send for PciDev {}

impl PciDev {
    /// The PCI device `dev` is, referenced; `None` when `dev` is null or not a PCI device.
    ///
    /// # Safety
    ///
    /// `dev` must be null or point to a live `struct device` for the duration of the call.
    pub(crate) unsafe fn from_device(dev: *mut bindings::device) -> Option<Self> {
        if dev.is_null() {
            return None;
        }
        // SAFETY: `dev` is a live device (caller's contract); the shim reads its bus
        // (`dev_is_pci`) and, for a PCI device, takes a reference on the `struct pci_dev` it is
        // embedded in (`pci_dev_get(to_pci_dev(dev))`), which keeps it alive.
        let pdev = unsafe { sys::peermem_pci_dev_get(dev) };
        // INVARIANT: referenced just now.
        NonNull::new(pdev).map(Self)
    }

    pub(crate) fn as_ptr(&self) -> *mut bindings::pci_dev {
        self.0.as_ptr()
    }
}

impl Drop for PciDev {
    fn drop(&mut self) {
        // SAFETY: drops the reference the type invariant says this value holds.
        unsafe { sys::pci_dev_put(self.0.as_ptr()) };
    }
}

// --- debugfs -------------------------------------------------------------------------------------

/// A debugfs file: what it shows, and what writing to it does. Neither function may panic (they
/// run under a C caller).
pub(crate) struct SeqFile {
    /// Called for each read from the start of the file: writes the whole text.
    pub(crate) show: fn(&mut dyn fmt::Write) -> fmt::Result,
    /// Called for each write (whatever is written); `None`: the file is read-only (0444),
    /// otherwise it is writable by root (0644).
    pub(crate) write: Option<fn()>,
}

/// A debugfs directory with its files; all removed on drop.
///
/// # Invariants
///
/// `0` is what `peermem_debugfs_create_dir` returned: a directory or an `ERR_PTR` (without
/// CONFIG_DEBUG_FS, `debugfs_create_dir` returns `ERR_PTR(-ENODEV)`), both of which
/// `debugfs_remove` (and `debugfs_create_file`) accept.
pub(crate) struct DebugfsDir(*mut c_void);

// SAFETY: a debugfs entry may be removed from any task.
unsafe impl Send for DebugfsDir {}
// SAFETY: no method takes `&self` to act on the entry.
unsafe impl Sync for DebugfsDir {}

impl DebugfsDir {
    /// /sys/kernel/debug/`dir`/, with a file per `(name, file)` in `files`. Failing is not an
    /// error: debugfs is optional, and the module works without it.
    pub(crate) fn new(dir: &CStr, files: &[(&CStr, &'static SeqFile)]) -> Self {
        // SAFETY: `dir` is a C string (debugfs copies it).
        let d = unsafe { sys::peermem_debugfs_create_dir(as_char_ptr(dir)) };
        for (name, file) in files {
            let data: *const SeqFile = *file;
            // SAFETY: `d` is the directory just made, or an `ERR_PTR` (then no file is made);
            // `name` is a C string (debugfs copies it); `data` is `'static`, so it outlives the
            // file, which reads it until `debugfs_remove` (in drop) has returned.
            unsafe {
                sys::peermem_debugfs_create_file(
                    d,
                    as_char_ptr(name),
                    data.cast(),
                    file.write.is_some(),
                )
            };
        }
        // INVARIANT: as returned.
        Self(d)
    }
}

impl Drop for DebugfsDir {
    fn drop(&mut self) {
        // SAFETY: by the type invariant. `debugfs_remove` removes the directory with its files and
        // waits for readers and writers of them that are inside their file operations
        // (fs/debugfs/inode.c: `__debugfs_file_removed`), and a file still open holds a module
        // reference (debugfs's proxy open takes `fops_get` of our `.owner = THIS_MODULE` fops), so
        // module exit, and this drop, cannot run while one is open: unloading is refused until it
        // is closed.
        unsafe { sys::peermem_debugfs_remove(self.0) };
    }
}

/// A `fmt::Write` into a seq_file.
struct SeqWriter(*mut bindings::seq_file);

impl fmt::Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // SAFETY: `self.0` is the seq_file of the read in progress (see `peermem_seq_show`);
        // `seq_write` copies `s.len()` bytes from `s`, or marks the buffer overflowed (the read
        // is then retried with a larger one).
        let rc = unsafe { bindings::seq_write(self.0, s.as_ptr().cast(), s.len()) };
        if rc == 0 {
            Ok(())
        } else {
            Err(fmt::Error)
        }
    }
}

/// The show callback of every [`DebugfsDir`] file (`peermem_show` and `peermem_rw_show` in the
/// shim call it).
///
/// # Safety
///
/// Called by the shim's `peermem_show` or `peermem_rw_show` (`single_open`'s show callback) with
/// the seq_file of the read and `m->private`: the `i_private` [`DebugfsDir::new`] gave, a
/// `&'static SeqFile`.
#[no_mangle]
pub(crate) unsafe extern "C" fn peermem_seq_show(
    m: *mut bindings::seq_file,
    data: *const c_void,
) -> c_int {
    // SAFETY: the function's contract: `data` is null or a `&'static SeqFile`.
    let Some(file) = (unsafe { data.cast::<SeqFile>().as_ref() }) else {
        return 0;
    };
    // An overflow stops the text early; seq_read sees it and calls again with a larger buffer.
    let _ = (file.show)(&mut SeqWriter(m));
    0
}

/// The write callback of the writable [`DebugfsDir`] files (`peermem_rw_write` in the shim calls
/// it): runs the file's `write`. Returns 0, or `-EINVAL` for a file without one.
///
/// # Safety
///
/// Called by the shim's `peermem_rw_write` with the seq_file's `private`: the `i_private`
/// [`DebugfsDir::new`] gave, a `&'static SeqFile`.
#[no_mangle]
pub(crate) unsafe extern "C" fn peermem_seq_write(data: *const c_void) -> c_int {
    // SAFETY: the function's contract: `data` is null or a `&'static SeqFile`.
    let write = unsafe { data.cast::<SeqFile>().as_ref() }.and_then(|file| file.write);
    match write {
        Some(write) => {
            write();
            0
        }
        None => EINVAL.to_errno(),
    }
}
