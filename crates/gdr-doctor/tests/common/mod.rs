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
