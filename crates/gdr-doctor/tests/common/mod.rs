// SPDX-License-Identifier: GPL-2.0
//! Test helper: a private copy of a recorded sysfs tree (tests/fixtures/<name>), with the `config.xxd`
//! hex dumps turned into the binary `config` files sysfs has, which a test may then change (load a
//! module, take config space away from an unprivileged reader...) before running gdr-doctor on it.

#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

pub const BIN: &str = env!("CARGO_BIN_EXE_gdr-doctor");

/// Every recorded tree of tests/fixtures (make-fixtures.py writes them).
pub const ALL_FIXTURES: [&str; 14] = [
    "dgx-h100",
    "v100-proprietary",
    "gb10-spark",
    "iommu-acs",
    "vm-switch",
    "vm-split",
    "dmabuf-libraries",
    "legacy-libraries",
    "stale-build",
    "nvidia-peermem-without-ofed",
    "mig-550",
    "ofed-2410-invalidating",
    "upgraded-not-reloaded",
    "built-for-another-kernel",
];

pub struct Fixture {
    pub root: PathBuf,
}

pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The bytes of an `xxd` dump ("00000140: 0000 0d00 0100 5f00  ..."): lines at their offsets,
/// zeros in between, up to the last line.
pub fn xxd_reverse(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((off, rest)) = line.split_once(':') else {
            continue;
        };
        let off = usize::from_str_radix(off.trim(), 16).expect("xxd offset");
        let mut bytes = Vec::new();
        for group in rest.split_whitespace() {
            if group.len() % 2 != 0 || !group.chars().all(|c| c.is_ascii_hexdigit()) {
                break; // the ASCII column
            }
            for i in (0..group.len()).step_by(2) {
                bytes.push(u8::from_str_radix(&group[i..i + 2], 16).unwrap());
            }
        }
        if out.len() < off + bytes.len() {
            out.resize(off + bytes.len(), 0);
        }
        out[off..off + bytes.len()].copy_from_slice(&bytes);
    }
    out
}

fn copy_tree(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for entry in fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let (from, name) = (entry.path(), entry.file_name());
        let to = dst.join(&name);
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            symlink(fs::read_link(&from).unwrap(), &to).unwrap();
        } else if kind.is_dir() {
            copy_tree(&from, &to);
        } else if name == "config.xxd" {
            fs::write(
                dst.join("config"),
                xxd_reverse(&fs::read_to_string(&from).unwrap()),
            )
            .unwrap();
        } else if name != ".gitkeep" {
            fs::copy(&from, &to).unwrap();
        }
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Fixture {
    pub fn new(name: &str) -> Fixture {
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        assert!(src.is_dir(), "no fixture {}", src.display());
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("gdr-doctor-{}-{name}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        copy_tree(&src, &root);
        Fixture { root }
    }

    pub fn path(&self, abs: &str) -> PathBuf {
        self.root.join(abs.trim_start_matches('/'))
    }

    pub fn write(&self, abs: &str, content: impl AsRef<[u8]>) {
        let p = self.path(abs);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    pub fn read(&self, abs: &str) -> String {
        fs::read_to_string(self.path(abs)).unwrap()
    }

    pub fn remove(&self, abs: &str) {
        let p = self.path(abs);
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(p).unwrap();
        } else {
            fs::remove_file(p).unwrap();
        }
    }

    /// Every `config` file below /sys/devices (bridges' config space).
    pub fn configs(&self) -> Vec<PathBuf> {
        fn walk(d: &Path, out: &mut Vec<PathBuf>) {
            for e in fs::read_dir(d).unwrap() {
                let e = e.unwrap();
                let t = e.file_type().unwrap();
                if t.is_dir() {
                    walk(&e.path(), out);
                } else if e.file_name() == "config" {
                    out.push(e.path());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.path("/sys/devices"), &mut out);
        out.sort();
        out
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let out = Command::new(BIN)
            .arg("--root")
            .arg(&self.root)
            .args(args)
            .output()
            .expect("run gdr-doctor");
        Run {
            status: out.status.code().expect("exit status"),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }

    /// The --json report; checks that it parses and that it states the exit status the tool exited with.
    pub fn json(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let r = self.run(&all);
        let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| {
            panic!(
                "--json output is not JSON ({e}):\n{}\n{}",
                r.stdout, r.stderr
            )
        });
        assert_eq!(
            v["exit_status"].as_i64(),
            Some(r.status as i64),
            "exit_status field vs exit code"
        );
        (r.status, v)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The pair of `gpu` and `nic` in a --json report.
pub fn pair<'a>(report: &'a serde_json::Value, gpu: &str, nic: &str) -> &'a serde_json::Value {
    report["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["gpu"] == gpu && p["nic"] == nic)
        .unwrap_or_else(|| panic!("no pair {gpu}+{nic}"))
}

/// The codes of a list of findings.
pub fn codes(findings: &serde_json::Value) -> Vec<String> {
    findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_string())
        .collect()
}

/// The finding with `code` in a list of findings.
pub fn find<'a>(findings: &'a serde_json::Value, code: &str) -> &'a serde_json::Value {
    findings
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == code)
        .unwrap_or_else(|| panic!("no finding {code} in {findings:#}"))
}

/// A minimal kernel module file (ELF64 little-endian, relocatable) with the given sections and
/// symbols (name, section name, value), and the symbol and string tables the module loader reads:
/// enough for gdr-doctor's modinfo and symbol-version reading, which is what the tests need of it.
pub fn elf_module(sections: &[(&str, Vec<u8>)], symbols: &[(&str, &str, u64)]) -> Vec<u8> {
    let mut shstrtab = vec![0u8];
    let mut name_of = |n: &str| {
        let at = shstrtab.len() as u32;
        shstrtab.extend_from_slice(n.as_bytes());
        shstrtab.push(0);
        at
    };
    // (name offset, type, data, link)
    let mut secs: Vec<(u32, u32, Vec<u8>, u32)> = vec![(0, 0, Vec::new(), 0)];
    for (n, data) in sections {
        secs.push((name_of(n), 1, data.clone(), 0));
    }
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24];
    for (n, sec, value) in symbols {
        let shndx = 1 + sections
            .iter()
            .position(|(s, _)| s == sec)
            .expect("symbol's section") as u16;
        let at = strtab.len() as u32;
        strtab.extend_from_slice(n.as_bytes());
        strtab.push(0);
        symtab.extend_from_slice(&at.to_le_bytes());
        symtab.extend_from_slice(&[0x11, 0]); // STB_GLOBAL, STT_OBJECT
        symtab.extend_from_slice(&shndx.to_le_bytes());
        symtab.extend_from_slice(&value.to_le_bytes());
        symtab.extend_from_slice(&4u64.to_le_bytes());
    }
    let strtab_index = secs.len() as u32 + 1;
    secs.push((name_of(".symtab"), 2, symtab, strtab_index));
    secs.push((name_of(".strtab"), 3, strtab, 0));
    let shstrtab_name = name_of(".shstrtab");
    secs.push((shstrtab_name, 3, shstrtab.clone(), 0));
    let mut out = vec![0u8; 64];
    let mut offsets = Vec::new();
    for (_, _, data, _) in &secs {
        offsets.push(out.len() as u64);
        out.extend_from_slice(data);
    }
    while out.len() % 8 != 0 {
        out.push(0);
    }
    let shoff = out.len() as u64;
    for (i, (name, kind, data, link)) in secs.iter().enumerate() {
        out.extend_from_slice(&name.to_le_bytes());
        out.extend_from_slice(&kind.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // flags
        out.extend_from_slice(&0u64.to_le_bytes()); // addr
        out.extend_from_slice(&offsets[i].to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&link.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // info
        out.extend_from_slice(&1u64.to_le_bytes()); // addralign
        out.extend_from_slice(&(if *kind == 2 { 24u64 } else { 0 }).to_le_bytes());
    }
    out[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
    out[16..18].copy_from_slice(&1u16.to_le_bytes()); // ET_REL
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[40..48].copy_from_slice(&shoff.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[58..60].copy_from_slice(&64u16.to_le_bytes());
    out[60..62].copy_from_slice(&(secs.len() as u16).to_le_bytes());
    out[62..64].copy_from_slice(&(secs.len() as u16 - 1).to_le_bytes());
    out
}

/// `__versions` entries (struct modversion_info: an unsigned long CRC, a 56-byte name).
pub fn versions(entries: &[(&str, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, crc) in entries {
        out.extend_from_slice(&u64::from(*crc).to_le_bytes());
        let mut n = name.as_bytes().to_vec();
        n.resize(56, 0);
        out.extend_from_slice(&n);
    }
    out
}
