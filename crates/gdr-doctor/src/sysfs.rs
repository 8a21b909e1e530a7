// SPDX-License-Identifier: GPL-2.0
//! Reading a sysfs/procfs tree below a configurable root, so that tests can point the tool at
//! recorded trees. Every path the rest of the tool uses is an absolute path of the live system
//! ("/sys/bus/pci/devices"), resolved below the root here.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub struct Fs {
    root: PathBuf,
    /// The root with symlinks resolved, to turn resolved paths back into system paths.
    canon_root: PathBuf,
}

impl Fs {
    pub fn new(root: &Path) -> io::Result<Fs> {
        let canon_root = fs::canonicalize(root)?;
        Ok(Fs {
            root: root.to_path_buf(),
            canon_root,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file behind an absolute system path.
    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    pub fn is_dir(&self, abs: &str) -> bool {
        self.path(abs).is_dir()
    }

    /// A small text attribute, trimmed; None if missing or unreadable.
    pub fn read(&self, abs: &str) -> Option<String> {
        fs::read_to_string(self.path(abs))
            .ok()
            .map(|s| s.trim().to_string())
    }

    pub fn read_bytes(&self, abs: &str) -> io::Result<Vec<u8>> {
        fs::read(self.path(abs))
    }

    /// A hexadecimal attribute such as `vendor` ("0x10de").
    pub fn read_hex(&self, abs: &str) -> Option<u64> {
        self.read(abs).and_then(|s| parse_hex(&s))
    }

    /// The entries of a directory, sorted; empty if it does not exist.
    pub fn list(&self, abs: &str) -> Vec<String> {
        let mut names: Vec<String> = match fs::read_dir(self.path(abs)) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        names
    }

    /// The last component of a symlink's target (a driver's or an IOMMU group's name).
    pub fn link_name(&self, abs: &str) -> Option<String> {
        let target = fs::read_link(self.path(abs)).ok()?;
        target.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    /// The system path a path resolves to, following every symlink ("/sys/devices/pci0000:00/...").
    pub fn resolve(&self, abs: &str) -> Option<String> {
        let canon = fs::canonicalize(self.path(abs)).ok()?;
        let rel = canon.strip_prefix(&self.canon_root).ok()?;
        Some(format!("/{}", rel.to_string_lossy()))
    }
}

pub fn parse_hex(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    u64::from_str_radix(digits, 16).ok()
}

/// "1.5 GiB" style sizes for people.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 || unit == 0 {
        format!("{} {}", value as u64, UNITS[unit])
    } else {
        format!("{:.1} {}", value, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_attributes() {
        assert_eq!(parse_hex("0x10de\n"), Some(0x10de));
        assert_eq!(parse_hex("0x030200"), Some(0x030200));
        assert_eq!(parse_hex("15b3"), Some(0x15b3));
        assert_eq!(parse_hex("nope"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(256 << 20), "256 MiB");
        assert_eq!(human_size(128 << 30), "128 GiB");
        assert_eq!(human_size(3 << 29), "1.5 GiB");
        assert_eq!(human_size(100), "100 B");
    }
}
