//! Generates, for every NVIDIA header set found, the Rust bindings exactly as the module's build does
//! (same bindings/bindings.h, same bindgen.args) and a C probe that reports sizeof/offsetof for the
//! structures in layouts.txt, so the tests can compare the two views field by field.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

/// The NVIDIA source packages the setup script unpacks, by short name.
const NVIDIA_PACKAGES: &[(&str, &str)] = &[
    (
        "nv550_open",
        "nvidia-open-kernel-source/modules/nvidia-open-kernel",
    ),
    (
        "nv535_tesla",
        "nvidia-tesla-535-kernel-source/modules/nvidia-tesla-535-kernel",
    ),
    (
        "nv470_tesla",
        "nvidia-tesla-470-kernel-source/modules/nvidia-tesla-470-kernel",
    ),
];

fn cache_dir() -> PathBuf {
    if let Some(c) = env::var_os("PEERMEM_CACHE") {
        return PathBuf::from(c);
    }
    let base = env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env::var_os("HOME").unwrap_or_default()).join(".cache"));
    base.join("peermem-rs")
}

/// The bindgen options of bindings/bindgen.args, applied to a builder. Only the options that file
/// uses are understood; anything else is an error so the two builds cannot drift apart silently.
fn apply_args(mut b: bindgen::Builder, args: &str) -> bindgen::Builder {
    for line in args
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (opt, val) = line.split_once(' ').unwrap_or((line, ""));
        b = match opt {
            "--allowlist-type" => b.allowlist_type(val),
            "--allowlist-function" => b.allowlist_function(val),
            "--allowlist-var" => b.allowlist_var(val),
            "--blocklist-type" => b.blocklist_type(val),
            "--opaque-type" => b.opaque_type(val),
            "--constified-enum" => b.constified_enum(val),
            "--default-enum-style" => {
                assert_eq!(val, "consts", "unsupported enum style {val}");
                b.default_enum_style(bindgen::EnumVariation::Consts)
            }
            _ => panic!("bindgen.args option {opt} is not understood by abi-check's build.rs"),
        };
    }
    b
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let repo = manifest.join("../..").canonicalize().unwrap();
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let args_file = repo.join("bindings/bindgen.args");
    let layouts_file = manifest.join("layouts.txt");
    let peer_mem_inc = env::var("PEER_MEM_INC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo.join("tests/standins/include"));
    for p in [&args_file, &layouts_file, &repo.join("bindings/bindings.h")] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        peer_mem_inc.join("rdma/peer_mem.h").display()
    );
    println!("cargo:rerun-if-env-changed=PEERMEM_CACHE");
    println!("cargo:rerun-if-env-changed=PEER_MEM_INC");
    println!("cargo::rustc-check-cfg=cfg(abi_no_headers)");

    let args = fs::read_to_string(&args_file).unwrap();
    let layouts: Vec<(String, Vec<String>)> = fs::read_to_string(&layouts_file)
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut w = l.split_whitespace().map(String::from);
            (w.next().unwrap(), w.collect())
        })
        .collect();

    let cache = cache_dir().join("work/src");
    let mut rust = String::new();
    let mut found = Vec::new();
    for (name, dir) in NVIDIA_PACKAGES {
        let nv_dir = cache.join(dir).join("nvidia");
        println!(
            "cargo:rerun-if-changed={}",
            nv_dir.join("nv-p2p.h").display()
        );
        if !nv_dir.join("nv-p2p.h").exists() {
            println!(
                "cargo:warning=abi-check: {} not found; run `make setup` to fetch it",
                nv_dir.display()
            );
            continue;
        }
        found.push(*name);
        generate(
            name,
            &nv_dir,
            &peer_mem_inc,
            &repo,
            &manifest,
            &out,
            &args,
            &layouts,
            &mut rust,
        );
    }
    if found.is_empty() {
        println!("cargo:rustc-cfg=abi_no_headers");
    }
    writeln!(
        rust,
        "/// A header set: its name, the layouts bindgen gave Rust, and the C compiler's layouts.\n\
         pub type HeaderSet = (&'static str, &'static [(&'static str, usize)], fn() -> Vec<(String, usize)>);\n\
         pub const HEADER_SETS: &[HeaderSet] = &["
    )
    .unwrap();
    for name in &found {
        writeln!(rust, "    (\"{name}\", {name}::RUST, {name}::c_layouts),").unwrap();
    }
    writeln!(rust, "];").unwrap();
    fs::write(out.join("layouts.rs"), rust).unwrap();
}

#[allow(clippy::too_many_arguments)]
fn generate(
    name: &str,
    nv_dir: &Path,
    peer_mem_inc: &Path,
    repo: &Path,
    manifest: &Path,
    out: &Path,
    args: &str,
    layouts: &[(String, Vec<String>)],
    rust: &mut String,
) {
    let includes = [
        manifest.join("kstub"),
        nv_dir.to_path_buf(),
        peer_mem_inc.to_path_buf(),
        repo.join("bindings"),
    ];
    let mut b = bindgen::Builder::default()
        .header(repo.join("bindings/bindings.h").display().to_string())
        .use_core()
        .layout_tests(true)
        .clang_arg("-D__BINDGEN__");
    for i in &includes {
        b = b.clang_arg(format!("-I{}", i.display()));
    }
    let bindings = apply_args(b, args).generate().expect("bindgen failed");
    let file = out.join(format!("{name}_bindings.rs"));
    bindings.write_to_file(&file).unwrap();

    // The C view.
    let mut c = String::from("#include \"bindings.h\"\n#include <stddef.h>\n");
    writeln!(c, "struct abi_entry {{ const char *name; size_t value; }};").unwrap();
    writeln!(c, "const struct abi_entry {name}_c_layouts[] = {{").unwrap();
    let mut r = format!(
        "pub mod {name} {{\n    #![allow(dead_code, non_camel_case_types, non_upper_case_globals, non_snake_case, clashing_extern_declarations, clippy::all)]\n    \
         #[repr(C)] pub struct device {{ _opaque: [u8; 0] }}\n             #[repr(C)] pub struct pci_dev {{ _opaque: [u8; 0] }}\n    #[repr(C)] pub struct seq_file {{ _opaque: [u8; 0] }}\n    \
         #[repr(C)] pub struct workqueue_struct {{ _opaque: [u8; 0] }}\n    \
         #[repr(C)] pub struct sg_table {{ _opaque: [u8; 0] }}\n    #[repr(C)] pub struct scatterlist {{ _opaque: [u8; 0] }}\n    \
         include!(concat!(env!(\"OUT_DIR\"), \"/{name}_bindings.rs\"));\n    pub const RUST: &[(&str, usize)] = &[\n"
    );
    for (st, fields) in layouts {
        writeln!(c, "  {{ \"sizeof({st})\", sizeof(struct {st}) }},").unwrap();
        writeln!(
            r,
            "        (\"sizeof({st})\", core::mem::size_of::<{st}>()),"
        )
        .unwrap();
        for f in fields {
            writeln!(
                c,
                "  {{ \"offsetof({st}, {f})\", offsetof(struct {st}, {f}) }},"
            )
            .unwrap();
            writeln!(
                r,
                "        (\"offsetof({st}, {f})\", core::mem::offset_of!({st}, {f})),"
            )
            .unwrap();
        }
    }
    writeln!(c, "}};\nconst size_t {name}_c_layouts_len = sizeof({name}_c_layouts) / sizeof({name}_c_layouts[0]);").unwrap();
    writeln!(
        r,
        "    ];\n    #[repr(C)] struct Entry {{ name: *const core::ffi::c_char, value: usize }}\n    \
         extern \"C\" {{ static {name}_c_layouts: [Entry; 0]; static {name}_c_layouts_len: usize; }}\n    \
         pub fn c_layouts() -> Vec<(String, usize)> {{\n        \
         // SAFETY: the table and its length are defined by the C probe compiled by build.rs; the\n        \
         // names are NUL-terminated string literals.\n        \
         unsafe {{\n            let p = core::ptr::addr_of!({name}_c_layouts).cast::<Entry>();\n            \
         (0..{name}_c_layouts_len).map(|i| {{ let e = &*p.add(i); \
         (core::ffi::CStr::from_ptr(e.name).to_string_lossy().into_owned(), e.value) }}).collect()\n        }}\n    }}\n}}"
    )
    .unwrap();
    rust.push_str(&r);
    let cfile = out.join(format!("{name}_probe.c"));
    fs::write(&cfile, c).unwrap();
    let mut cc = cc::Build::new();
    cc.file(&cfile).define("__BINDGEN__", None);
    for i in &includes {
        cc.include(i);
    }
    cc.compile(&format!("{name}_probe"));
}
