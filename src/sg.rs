// SPDX-License-Identifier: GPL-2.0

//! The scatter-gather table peermem-rs fills for the host in `dma_map`.
//!
//! The host owns the `struct sg_table` header and passes it in; the entries are ours: allocated with
//! `sg_alloc_table`, one per GPU page, with no `struct page` behind them (GPU memory has none), only
//! a DMA address and a length. They are allocated before the mapping (a sleeping allocation, made
//! with no lock held), filled from the mapping, and their header is copied into the host's table
//! only when everything succeeded, so a failing `dma_map` leaves the host's table untouched. The
//! entries are freed when the registration is released (the host keeps using them until then).

use core::ptr::NonNull;

use kernel::bindings;
use kernel::prelude::*;

/// SG entries allocated by us and handed to the host.
///
/// The fields are those of the `struct sg_table` header that `sg_alloc_table` filled, kept apart
/// so that `Option<SgEntries>` needs no tag of its own (the first entry is never null): a
/// registration holds one, and 8 bytes fewer keep it in a kmalloc-192 (src/client.rs). The header
/// has these three fields and no other (include/linux/scatterlist.h, `struct sg_table`, line 39
/// in 6.12 and 7.3).
///
/// # Invariants
///
/// `sgl`, `nents` and `orig_nents` are the header of a table a successful `sg_alloc_table`
/// initialised, which is freed exactly once, on drop.
pub(crate) struct SgEntries {
    sgl: NonNull<bindings::scatterlist>,
    nents: u32,
    orig_nents: u32,
}

// SAFETY: the entries are plain memory owned by this value; the host only reads them, and only
// between dma_map and release, while this value is kept alive in the registration.
unsafe impl Send for SgEntries {}

impl SgEntries {
    /// `n` entries, not yet filled. May sleep: called with no lock held.
    pub(crate) fn alloc(n: u32) -> Result<Self> {
        if n == 0 {
            return Err(EINVAL);
        }
        let mut table = bindings::sg_table::default();
        // SAFETY: `table` is a valid, zeroed `struct sg_table` to initialise.
        let rc = unsafe { bindings::sg_alloc_table(&mut table, n, bindings::GFP_KERNEL) };
        if rc != 0 {
            // A failed `sg_alloc_table` has freed what it allocated (lib/scatterlist.c,
            // `sg_alloc_table`: 6.12 line 375, 7.3 line 377).
            return Err(Error::from_errno(rc));
        }
        let Some(sgl) = NonNull::new(table.sgl) else {
            // Not reached: a successful `sg_alloc_table` of `n > 0` entries sets the first.
            // SAFETY: `table` was initialised by the call above; freed once, here.
            unsafe { bindings::sg_free_table(&mut table) };
            return Err(ENOMEM);
        };
        // INVARIANT: `sg_alloc_table` succeeded and this is its header; from here on, dropping
        // the value frees it.
        Ok(Self {
            sgl,
            nents: table.nents,
            orig_nents: table.orig_nents,
        })
    }

    /// The table header the entries came with.
    fn header(&self) -> bindings::sg_table {
        bindings::sg_table {
            sgl: self.sgl.as_ptr(),
            nents: self.nents,
            orig_nents: self.orig_nents,
        }
    }

    /// Makes every entry `len` bytes long; entry `i` gets DMA address `address(i)`. Fails with
    /// EINVAL if `address` has no answer for some entry.
    pub(crate) fn fill(&mut self, len: u32, mut address: impl FnMut(u32) -> Option<u64>) -> Result {
        let mut sg = self.sgl.as_ptr();
        for i in 0..self.orig_nents {
            let (Some(addr), Some(entry)) = (address(i), NonNull::new(sg)) else {
                return Err(EINVAL);
            };
            // SAFETY: `entry` is one of the entries `sg_alloc_table` allocated (walked with
            // `sg_next`), exclusively ours until published.
            unsafe { set_dma_entry(entry.as_ptr(), addr, len) };
            // SAFETY: as above; `sg_next` follows chained allocations and returns null at the end.
            sg = unsafe { bindings::sg_next(sg) };
        }
        Ok(())
    }

    /// Hands the entries to the host by copying the table header into `host`.
    ///
    /// # Safety
    ///
    /// `host` must point to the host's writable `struct sg_table` passed to `dma_map`.
    pub(crate) unsafe fn publish(&self, host: *mut bindings::sg_table) {
        // SAFETY: `host` is valid for writes (caller's contract); the header is a plain struct copy,
        // and the entries it points to stay alive as long as `self`.
        unsafe { host.write(self.header()) };
    }

    /// Is `host` the table these entries were published in? (The host must hand back the table it
    /// got from dma_map.)
    pub(crate) fn published_in(&self, host: *const bindings::sg_table) -> bool {
        if host.is_null() {
            return false;
        }
        // SAFETY: a non-null `host` is the host's table header, readable for the duration of the
        // callback that passed it.
        let sgl = unsafe { (*host).sgl };
        sgl == self.sgl.as_ptr()
    }
}

impl Drop for SgEntries {
    fn drop(&mut self) {
        let mut table = self.header();
        // SAFETY: type invariant: the header of a table `sg_alloc_table` initialised, freed
        // only here. `sg_free_table` reads only `sgl` and `orig_nents` of the header
        // (lib/scatterlist.c, `sg_free_table` and `__sg_free_table`: 6.12 lines 196-262, 7.3
        // lines 198-264), the two fields kept as they came.
        unsafe { bindings::sg_free_table(&mut table) };
    }
}

/// Makes `sg` describe `len` bytes at bus address `addr`, with no page (peer memory has none).
///
/// # Safety
///
/// `sg` must point to a writable, initialised scatterlist entry.
unsafe fn set_dma_entry(sg: *mut bindings::scatterlist, addr: u64, len: u32) {
    // SAFETY: `sg` is valid for writes (caller's contract). `page_link` stays as `sg_alloc_table`
    // left it (no page, end marker on the last entry), which is what `sg_set_page(sg, NULL, ..)`
    // would leave too.
    unsafe {
        (*sg).offset = 0;
        (*sg).length = len;
        (*sg).dma_address = addr;
        #[cfg(CONFIG_NEED_SG_DMA_LENGTH)]
        {
            (*sg).dma_length = len;
        }
    }
}
