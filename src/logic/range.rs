// SPDX-License-Identifier: GPL-2.0

//! Range math: from the byte range a user registers to the GPU pages that cover it.
//!
//! The NVIDIA API pins whole 64 KiB GPU pages and refuses unaligned ranges, so a registration of
//! `[addr, addr + size)` pins the pages from `addr` rounded down to `addr + size` rounded up. All of
//! it is checked arithmetic: ranges near `u64::MAX`, empty ranges and ranges too large for the
//! driver's 32-bit page count are refusals, never wraps or panics.

/// log2 of the GPU page size.
pub const GPU_PAGE_SHIFT: u32 = 16;
/// The GPU page size the NVIDIA P2P API works in: 64 KiB.
pub const GPU_PAGE_SIZE: u64 = 1 << GPU_PAGE_SHIFT;
const GPU_PAGE_MASK: u64 = GPU_PAGE_SIZE - 1;

/// Why a byte range cannot be turned into GPU pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RangeError {
    /// `size` is zero.
    Empty,
    /// `addr + size`, or its rounding up to a GPU page, does not fit in 64 bits.
    Overflow,
    /// More GPU pages than the driver's page tables can count (`u32` entries).
    TooLarge,
}

/// A non-empty range of whole GPU pages.
///
/// # Invariants
///
/// `start` and `len` are multiples of [`GPU_PAGE_SIZE`], `len > 0`, `start + len` does not
/// overflow and `len / GPU_PAGE_SIZE` fits in a `u32`.
// `len > 0` by the invariant: an `is_empty` would always say false.
#[allow(clippy::len_without_is_empty)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpuRange {
    start: u64,
    len: u64,
}

impl GpuRange {
    /// The GPU pages covering the bytes `[addr, addr + size)`.
    pub fn covering(addr: u64, size: u64) -> Result<Self, RangeError> {
        if size == 0 {
            return Err(RangeError::Empty);
        }
        let end = addr.checked_add(size).ok_or(RangeError::Overflow)?;
        let start = addr & !GPU_PAGE_MASK;
        let end = end.checked_add(GPU_PAGE_MASK).ok_or(RangeError::Overflow)? & !GPU_PAGE_MASK;
        Self::new(start, end - start)
    }

    /// An already aligned range, as the NVIDIA API wants it: `start` and `len` GPU-page aligned.
    pub fn aligned(start: u64, len: u64) -> Result<Self, RangeError> {
        if len == 0 {
            return Err(RangeError::Empty);
        }
        if start & GPU_PAGE_MASK != 0 || len & GPU_PAGE_MASK != 0 {
            return Err(RangeError::Overflow);
        }
        Self::new(start, len)
    }

    fn new(start: u64, len: u64) -> Result<Self, RangeError> {
        start.checked_add(len).ok_or(RangeError::Overflow)?;
        if len >> GPU_PAGE_SHIFT > u64::from(u32::MAX) {
            return Err(RangeError::TooLarge);
        }
        // INVARIANT: checked above; `covering` rounds to page multiples and `aligned` checks them.
        Ok(Self { start, len })
    }

    /// The first GPU page of the range alone.
    pub fn first_page(&self) -> Self {
        // INVARIANT: one page of a valid range is a valid range.
        Self {
            start: self.start,
            len: GPU_PAGE_SIZE,
        }
    }

    /// First byte of the first page.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Length in bytes (a multiple of the GPU page size).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// One past the last byte. Cannot overflow (type invariant).
    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    /// Number of GPU pages. Fits in `u32` (type invariant).
    pub fn pages(&self) -> u32 {
        (self.len >> GPU_PAGE_SHIFT) as u32
    }

    /// Does this range cover all of `[addr, addr + size)`?
    pub fn covers(&self, addr: u64, size: u64) -> bool {
        match addr.checked_add(size) {
            Some(end) => addr >= self.start && end <= self.end(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_page_is_one_gpu_page_at_the_start() {
        let r = GpuRange::covering(0x12_3456, 0x3_0000).unwrap();
        assert_eq!(
            r.first_page(),
            GpuRange::aligned(0x12_0000, GPU_PAGE_SIZE).unwrap()
        );
        assert_eq!(r.first_page().pages(), 1);
    }

    #[test]
    fn rounds_out_to_gpu_pages() {
        let r = GpuRange::covering(0x1_0001, 0x1_0000).unwrap();
        assert_eq!((r.start(), r.len(), r.pages()), (0x1_0000, 0x2_0000, 2));
        let r = GpuRange::covering(0x2_0000, 0x1_0000).unwrap();
        assert_eq!((r.start(), r.len(), r.pages()), (0x2_0000, 0x1_0000, 1));
        let r = GpuRange::covering(0x2_ffff, 1).unwrap();
        assert_eq!((r.start(), r.len()), (0x2_0000, 0x1_0000));
    }

    #[test]
    fn refuses_empty_and_overflowing_ranges() {
        assert_eq!(GpuRange::covering(0x1000, 0), Err(RangeError::Empty));
        assert_eq!(GpuRange::covering(u64::MAX, 1), Err(RangeError::Overflow));
        assert_eq!(
            GpuRange::covering(u64::MAX - 0x100, 0x80),
            Err(RangeError::Overflow)
        );
        assert_eq!(GpuRange::covering(1, u64::MAX), Err(RangeError::Overflow));
        // The last GPU page of the address space cannot be described: its end is 2^64.
        assert_eq!(
            GpuRange::covering(u64::MAX - GPU_PAGE_SIZE + 1, 1),
            Err(RangeError::Overflow)
        );
        assert!(GpuRange::covering(u64::MAX - 2 * GPU_PAGE_SIZE + 1, 1).is_ok());
    }

    #[test]
    fn refuses_more_pages_than_a_page_table_counts() {
        let max = u64::from(u32::MAX) * GPU_PAGE_SIZE;
        assert!(GpuRange::covering(0, max).is_ok());
        assert_eq!(GpuRange::covering(0, max + 1), Err(RangeError::TooLarge));
    }

    #[test]
    fn aligned_checks_alignment() {
        assert!(GpuRange::aligned(0x10000, 0x10000).is_ok());
        assert!(GpuRange::aligned(0x10001, 0x10000).is_err());
        assert!(GpuRange::aligned(0x10000, 0x1000).is_err());
        assert_eq!(GpuRange::aligned(0x10000, 0), Err(RangeError::Empty));
    }
}
