// SPDX-License-Identifier: GPL-2.0

//! References handed to C code: an `Arc` count that a C provider holds as a `void *` (the host's
//! `client_context`, the NVIDIA driver's callback `data`), for both edges to use.

use core::ffi::c_void;
use core::ptr::NonNull;

use kernel::sync::{Arc, ArcBorrow};

/// A reference to a `T` held by C code: `Arc::into_raw`'s pointer.
///
/// Neither `Clone` nor `Copy`: one value is one count, so a count cannot be taken back twice
/// through copies. Dropping one without [`ForeignRef::take_back`] leaks its count.
///
/// # Invariants
///
/// Made by [`ForeignRef::give`] from an `Arc<T>` whose count it holds, until
/// [`ForeignRef::take_back`].
pub(crate) struct ForeignRef<T>(NonNull<T>);

// SAFETY: a counted reference to a `T`, which may be sent and shared like the `Arc<T>` it was.
unsafe impl<T: Send + Sync> Send for ForeignRef<T> {}

impl<T> ForeignRef<T> {
    /// Hands a reference to C code.
    pub(crate) fn give(ctx: Arc<T>) -> Self {
        let ptr = Arc::into_raw(ctx).cast_mut();
        // SAFETY: `into_raw` gives the address of the `Arc`'s data, which is never null.
        // INVARIANT: it keeps the count.
        Self(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// The pointer to give C code; the count stays with this value.
    pub(crate) fn as_ptr(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    /// The pointer to give C code, with the count: [`ForeignRef::from_ptr`] gets it back.
    pub(crate) fn into_ptr(self) -> *mut c_void {
        self.0.as_ptr().cast()
    }

    /// The reference behind a pointer C code hands back; `None` for null.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` must come from [`ForeignRef::into_ptr`], and its count not have been taken
    /// back.
    pub(crate) unsafe fn from_ptr(ptr: *mut c_void) -> Option<Self> {
        // INVARIANT: the caller's contract.
        NonNull::new(ptr.cast()).map(Self)
    }

    /// Borrows the `T` behind a pointer C code holds; `None` for null.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` must come from [`ForeignRef::as_ptr`] or [`ForeignRef::into_ptr`], its
    /// count not taken back yet, and the `T` must stay alive while the borrow lives (the reference
    /// is not taken back meanwhile, or another one keeps it alive).
    pub(crate) unsafe fn borrow<'a>(ptr: *mut c_void) -> Option<ArcBorrow<'a, T>> {
        let ptr = NonNull::new(ptr.cast::<T>())?;
        // SAFETY: by the caller's contract the pointer comes from `Arc::into_raw` (through
        // `give`), and a count keeps the `T` alive for the whole borrow.
        Some(unsafe { ArcBorrow::from_raw(ptr.as_ptr()) })
    }

    /// Takes the reference back.
    ///
    /// # Safety
    ///
    /// The C code given this reference's pointer no longer relies on its count: it makes no
    /// further use of the pointer, or another reference keeps the `T` alive while it does.
    pub(crate) unsafe fn take_back(self) -> Arc<T> {
        // SAFETY: by the type invariant the pointer comes from `Arc::into_raw` and holds one
        // count, which moves to the `Arc`; the caller's contract covers C's copy of the pointer.
        unsafe { Arc::from_raw(self.0.as_ptr()) }
    }
}
