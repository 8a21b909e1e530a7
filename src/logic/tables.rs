// SPDX-License-Identifier: GPL-2.0

//! Checks of what the NVIDIA driver hands back: page tables and DMA mappings.
//!
//! Both are versioned structures whose first `u32` is a version: major in the high 16 bits, minor in
//! the low 16. A structure is compatible when the major matches and the minor is at least the one
//! expected. Page tables come in two layouts: 1.x (up to driver 575) and 2.x (580+, with a `flags`
//! field appended); peermem-rs reads only the fields both share, so it accepts both majors.

/// The page-table version nv-p2p.h declares up to driver 575.
pub const PAGE_TABLE_VERSION_1: u32 = 0x0001_0002;
/// The page-table version since driver 580 (a `flags` field appended).
pub const PAGE_TABLE_VERSION_2: u32 = 0x0002_0000;
/// The DMA-mapping version peermem-rs understands.
pub const DMA_MAPPING_VERSION: u32 = 0x0002_0003;
/// `enum nvidia_p2p_page_size_type`: 64 KiB pages.
pub const PAGE_SIZE_64KB: u32 = 1;

/// Same major, minor at least the expected one (NVIDIA_P2P_VERSION_COMPATIBLE).
pub fn version_compatible(actual: u32, expected: u32) -> bool {
    actual >> 16 == expected >> 16 && actual & 0xffff >= expected & 0xffff
}

/// What is wrong with a page table or a DMA mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableError {
    /// A version this module does not know.
    Version(u32),
    /// Pages that are not 64 KiB (the `nvidia_p2p_page_size_type` value).
    PageSize(u32),
    /// Fewer or more entries than the pinned range has GPU pages.
    Entries { got: u32, want: u32 },
}

/// The fields of a page table that matter, read from the driver's structure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageTableHeader {
    pub version: u32,
    pub page_size: u32,
    pub entries: u32,
}

impl PageTableHeader {
    /// Is this a page table peermem-rs can use for a pin of `pages` GPU pages?
    pub fn check(&self, pages: u32) -> Result<(), TableError> {
        if !version_compatible(self.version, PAGE_TABLE_VERSION_1)
            && !version_compatible(self.version, PAGE_TABLE_VERSION_2)
        {
            return Err(TableError::Version(self.version));
        }
        if self.page_size != PAGE_SIZE_64KB {
            return Err(TableError::PageSize(self.page_size));
        }
        if self.entries != pages {
            return Err(TableError::Entries {
                got: self.entries,
                want: pages,
            });
        }
        Ok(())
    }
}

/// What the driver leaves in the entry of a page it failed to map: `nv_dma_map_mmio` stores what
/// `dma_map_resource` returned, the kernel's `DMA_MAPPING_ERROR` (550.163.01
/// kernel-open/nvidia/nv-dma.c).
pub const DMA_MAPPING_ERROR: u64 = u64::MAX;

/// Finds the first page (0-based) of a DMA mapping that the driver did not map, looking at the
/// pages one at a time in order, in the pass that fills the SG entries from them ([`Self::page`]
/// for each page whose physical (BAR1) address, the value the driver starts from, and DMA address
/// are known; [`Self::first_failed`] at the end).
///
/// Drivers up to 580 go on after a page fails: they unmap the pages before it and return the last
/// page's status, so a failure before the last page comes back as a mapping made
/// (`rm_p2p_dma_map_pages` [NV-PARTIAL-DMA-MAP]; 590 stops).
/// The unmapped pages before it keep addresses that look good; the failed page is the sign:
/// - a failure of `dma_map_resource` leaves `DMA_MAPPING_ERROR` in its entry (`nv_dma_map_mmio`,
///   550.163.01 kernel-open/nvidia/nv-dma.c);
/// - a page `nv_dma_map_peer` refuses before mapping (its bounds check, which takes the BAR's
///   inclusive end for an exclusive one and so refuses the last 64 KiB of BAR1, nv-dma.c 550:837)
///   keeps its physical address, which tells only where the other pages were translated (an
///   IOMMU): without translation every DMA address is its physical one.
///
/// So a page failed when its DMA address is `DMA_MAPPING_ERROR`, or, when some page of the mapping
/// was translated, when its DMA address is its physical one; the first such page is the answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailedPageScan {
    /// Some page's DMA address is neither its physical one nor `DMA_MAPPING_ERROR`.
    translated: bool,
    /// The first page whose DMA address is `DMA_MAPPING_ERROR`.
    first_error: Option<u32>,
    /// The first page whose DMA address is its physical one.
    first_untranslated: Option<u32>,
}

impl FailedPageScan {
    /// Page `i` (pages come in increasing order) has physical address `phys` and DMA address `dma`.
    pub fn page(&mut self, i: u32, phys: u64, dma: u64) {
        if dma == DMA_MAPPING_ERROR {
            self.first_error.get_or_insert(i);
        } else if dma == phys {
            self.first_untranslated.get_or_insert(i);
        } else {
            self.translated = true;
        }
    }

    /// The first page the driver did not map, among those seen; `None` if none.
    pub fn first_failed(&self) -> Option<u32> {
        let untranslated = self.first_untranslated.filter(|_| self.translated);
        match (self.first_error, untranslated) {
            (Some(e), Some(u)) => Some(e.min(u)),
            (e, u) => e.or(u),
        }
    }
}

/// The fields of a DMA mapping that matter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaMappingHeader {
    pub version: u32,
    pub page_size_type: u32,
    pub entries: u32,
}

impl DmaMappingHeader {
    /// Is this a mapping peermem-rs can turn into `pages` SG entries?
    pub fn check(&self, pages: u32) -> Result<(), TableError> {
        if !version_compatible(self.version, DMA_MAPPING_VERSION) {
            return Err(TableError::Version(self.version));
        }
        if self.page_size_type != PAGE_SIZE_64KB {
            return Err(TableError::PageSize(self.page_size_type));
        }
        if self.entries != pages {
            return Err(TableError::Entries {
                got: self.entries,
                want: pages,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    fn first_failed_page(pages: &[(u64, u64)]) -> Option<u32> {
        let mut scan = FailedPageScan::default();
        for (i, &(phys, dma)) in pages.iter().enumerate() {
            scan.page(i as u32, phys, dma);
        }
        scan.first_failed()
    }

    #[test]
    fn a_mapping_with_a_failed_page_is_found_out() {
        // No translation: every DMA address is its physical one.
        let direct = [(0xa000, 0xa000), (0xb000, 0xb000), (0xc000, 0xc000)];
        assert_eq!(first_failed_page(&direct), None);
        // Translated by an IOMMU.
        let iommu = [(0xa000, 0xf000), (0xb000, 0xe000), (0xc000, 0xd000)];
        assert_eq!(first_failed_page(&iommu), None);
        // dma_map_resource failed for page 1.
        let failed = [
            (0xa000, 0xf000),
            (0xb000, DMA_MAPPING_ERROR),
            (0xc000, 0xd000),
        ];
        assert_eq!(first_failed_page(&failed), Some(1));
        assert_eq!(
            first_failed_page(&[(0xa000, DMA_MAPPING_ERROR), (0xb000, 0xb000)]),
            Some(0)
        );
        // Page 2 refused before mapping: its physical address, among translated ones.
        let refused = [(0xa000, 0xf000), (0xb000, 0xe000), (0xc000, 0xc000)];
        assert_eq!(first_failed_page(&refused), Some(2));
        // ... and before the translated ones: found once a later page shows translation.
        let refused_first = [(0xa000, 0xa000), (0xb000, 0xe000), (0xc000, 0xd000)];
        assert_eq!(first_failed_page(&refused_first), Some(0));
        // A refused page after a failed one: the failed one is first, and the other way round.
        let both = [
            (0xa000, 0xf000),
            (0xb000, DMA_MAPPING_ERROR),
            (0xc000, 0xc000),
        ];
        assert_eq!(first_failed_page(&both), Some(1));
        let both = [
            (0xa000, 0xf000),
            (0xb000, 0xb000),
            (0xc000, DMA_MAPPING_ERROR),
        ];
        assert_eq!(first_failed_page(&both), Some(1));
        assert_eq!(first_failed_page(&[]), None);
    }

    /// The one-pass scan gives what the rule says, read over the whole mapping at once (the
    /// definition the glue used before it checked in the pass that fills the SG entries): every
    /// mapping of up to 4 pages whose addresses are drawn from a physical one, another, and
    /// `DMA_MAPPING_ERROR`.
    #[test]
    fn the_scan_finds_what_the_whole_mapping_rule_finds() {
        fn by_rule(pages: &[(u64, u64)]) -> Option<u32> {
            let translated = pages
                .iter()
                .any(|&(phys, dma)| dma != phys && dma != DMA_MAPPING_ERROR);
            (0..pages.len() as u32).find(|&i| {
                let (phys, dma) = pages[i as usize];
                dma == DMA_MAPPING_ERROR || (translated && dma == phys)
            })
        }
        let mut checked = 0;
        let mut failed = 0;
        for n in 0..=4u32 {
            for code in 0..3u32.pow(n) {
                let pages: Vec<(u64, u64)> = (0..n)
                    .map(|i| {
                        let phys = 0x10_0000 + u64::from(i) * 0x1_0000;
                        let dma = match code / 3u32.pow(i) % 3 {
                            0 => phys,
                            1 => 0xf000_0000 - u64::from(i) * 0x1_0000,
                            _ => DMA_MAPPING_ERROR,
                        };
                        (phys, dma)
                    })
                    .collect();
                assert_eq!(first_failed_page(&pages), by_rule(&pages), "{pages:x?}");
                checked += 1;
                failed += usize::from(by_rule(&pages).is_some());
            }
        }
        assert_eq!(checked, 1 + 3 + 9 + 27 + 81);
        assert!(failed > 0 && failed < checked);
    }

    #[test]
    fn version_rule() {
        assert!(version_compatible(0x0001_0002, 0x0001_0002));
        assert!(version_compatible(0x0001_0003, 0x0001_0002));
        assert!(!version_compatible(0x0001_0001, 0x0001_0002));
        assert!(!version_compatible(0x0002_0002, 0x0001_0002));
    }

    #[test]
    fn page_tables_of_both_layouts_pass() {
        for version in [PAGE_TABLE_VERSION_1, PAGE_TABLE_VERSION_2, 0x0002_0001] {
            let h = PageTableHeader {
                version,
                page_size: PAGE_SIZE_64KB,
                entries: 4,
            };
            assert_eq!(h.check(4), Ok(()));
        }
    }

    #[test]
    fn bad_page_tables_are_named() {
        let ok = PageTableHeader {
            version: PAGE_TABLE_VERSION_1,
            page_size: PAGE_SIZE_64KB,
            entries: 4,
        };
        assert_eq!(
            PageTableHeader {
                version: 0x0001_0001,
                ..ok
            }
            .check(4),
            Err(TableError::Version(0x0001_0001))
        );
        assert_eq!(
            PageTableHeader {
                version: 0x0003_0000,
                ..ok
            }
            .check(4),
            Err(TableError::Version(0x0003_0000))
        );
        assert_eq!(
            PageTableHeader { page_size: 0, ..ok }.check(4),
            Err(TableError::PageSize(0))
        );
        assert_eq!(ok.check(5), Err(TableError::Entries { got: 4, want: 5 }));
    }

    #[test]
    fn mappings() {
        let ok = DmaMappingHeader {
            version: DMA_MAPPING_VERSION,
            page_size_type: PAGE_SIZE_64KB,
            entries: 2,
        };
        assert_eq!(ok.check(2), Ok(()));
        assert_eq!(
            DmaMappingHeader {
                version: 0x0002_0002,
                ..ok
            }
            .check(2),
            Err(TableError::Version(0x0002_0002))
        );
        assert_eq!(
            DmaMappingHeader {
                version: 0x0001_0003,
                ..ok
            }
            .check(2),
            Err(TableError::Version(0x0001_0003))
        );
        assert_eq!(ok.check(3), Err(TableError::Entries { got: 2, want: 3 }));
    }
}
