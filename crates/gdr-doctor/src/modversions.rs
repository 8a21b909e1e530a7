// SPDX-License-Identifier: GPL-2.0
//! Symbol versions (CONFIG_MODVERSIONS) read from kernel module files: the CRC a module recorded for
//! each symbol it imports, and the CRC its provider exports the symbol with. The kernel refuses a
//! module whose recorded CRC differs from the loaded provider's ("disagrees about version of
//! symbol"), which is what happens to a peer-memory client after an OFED or driver upgrade it was
//! not rebuilt for.
//!
//! Where the kernel's module loader and modpost keep them (a module is an ELF64 relocatable object):
//! - imports: section `__versions`, entries of `struct modversion_info` (an `unsigned long` CRC and
//!   a 56-byte NUL-padded name, 64 bytes); with CONFIG_EXTENDED_MODVERSIONS also
//!   `__version_ext_crcs` (u32 CRCs) and `__version_ext_names` (NUL-terminated names, same order),
//!   which also carry names too long for `__versions` (Rust's);
//! - exports: the symbol `__crc_<name>` in the symbol table, whose value is the offset of the u32 CRC
//!   in its section (`__kcrctab` or `__kcrctab_gpl`; modpost writes them with SYMBOL_CRC since
//!   5.19), or, before, the CRC itself (an absolute symbol).
//!
//! Only little-endian ELF64 is read (x86_64, aarch64, ppc64le); anything else reads as nothing.

struct Section<'a> {
    name: &'a [u8],
    data: &'a [u8],
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The NUL-terminated string at `at` in `b`.
fn cstr(b: &[u8], at: usize) -> Option<&[u8]> {
    let rest = b.get(at..)?;
    Some(&rest[..rest.iter().position(|&c| c == 0)?])
}

/// The sections of an ELF64 little-endian file, in header order (index = section number).
fn sections(elf: &[u8]) -> Option<Vec<Section<'_>>> {
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(elf, 0x28)?).ok()?;
    let shentsize = usize::from(u16_at(elf, 0x3a)?);
    let shnum = usize::from(u16_at(elf, 0x3c)?);
    let shstrndx = usize::from(u16_at(elf, 0x3e)?);
    if shentsize < 64 {
        return None;
    }
    let header = |i: usize| -> Option<(u32, u32, &[u8])> {
        let h = shoff.checked_add(i.checked_mul(shentsize)?)?;
        let (name, kind) = (u32_at(elf, h)?, u32_at(elf, h + 4)?);
        let off = usize::try_from(u64_at(elf, h + 24)?).ok()?;
        let size = usize::try_from(u64_at(elf, h + 32)?).ok()?;
        // SHT_NOBITS (8) occupies no bytes of the file.
        let data = if kind == 8 {
            &[][..]
        } else {
            elf.get(off..off.checked_add(size)?)?
        };
        Some((name, kind, data))
    };
    let names = header(shstrndx)?.2;
    (0..shnum)
        .map(|i| {
            let (name, _, data) = header(i)?;
            Some(Section {
                name: cstr(names, usize::try_from(name).ok()?)?,
                data,
            })
        })
        .collect()
}

fn section<'a>(secs: &'a [Section<'a>], name: &str) -> Option<&'a Section<'a>> {
    secs.iter().find(|s| s.name == name.as_bytes())
}

/// The symbols a module imports with the CRC it recorded for each, read as the loader reads them
/// (kernel/module/version.c, check_version): the extended tables when the module has them (then
/// they alone count), else `__versions`. Empty for a module built without symbol versions.
pub fn imports(ko: &[u8]) -> Vec<(String, u32)> {
    let Some(secs) = sections(ko) else {
        return Vec::new();
    };
    if let (Some(c), Some(n)) = (
        section(&secs, "__version_ext_crcs"),
        section(&secs, "__version_ext_names"),
    ) {
        let names = n.data.split(|&b| b == 0).filter(|s| !s.is_empty());
        return c
            .data
            .chunks_exact(4)
            .zip(names)
            .map(|(crc, name)| {
                (
                    String::from_utf8_lossy(name).into_owned(),
                    u32::from_le_bytes(crc.try_into().unwrap_or([0; 4])),
                )
            })
            .collect();
    }
    let Some(v) = section(&secs, "__versions") else {
        return Vec::new();
    };
    v.data
        .chunks_exact(64)
        .map(|e| {
            let crc = u64::from_le_bytes(e[..8].try_into().unwrap_or([0; 8]));
            let name = &e[8..];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            (String::from_utf8_lossy(name).into_owned(), crc as u32)
        })
        .collect()
}

/// The CRC `ko` exports `symbol` with (the value behind its `__crc_<symbol>`), or None when it does
/// not export it with a version.
pub fn export_crc(ko: &[u8], symbol: &str) -> Option<u32> {
    let secs = sections(ko)?;
    let symtab = section(&secs, ".symtab")?;
    let strtab = section(&secs, ".strtab")?;
    let want = format!("__crc_{symbol}");
    for sym in symtab.data.chunks_exact(24) {
        let name = cstr(strtab.data, usize::try_from(u32_at(sym, 0)?).ok()?)?;
        if name != want.as_bytes() {
            continue;
        }
        let shndx = u16_at(sym, 6)?;
        let value = u64_at(sym, 8)?;
        // SHN_ABS: kernels before 5.19 made the CRC the symbol's value itself.
        if shndx == 0xfff1 {
            return u32::try_from(value).ok();
        }
        return u32_at(
            secs.get(usize::from(shndx))?.data,
            usize::try_from(value).ok()?,
        );
    }
    None
}
