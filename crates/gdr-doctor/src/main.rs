// SPDX-License-Identifier: GPL-2.0
//! gdr-doctor: tells an operator whether GPUDirect RDMA can work on this node, and why not.
//!
//! It reads sysfs, procfs, /lib/modules and the libraries' files (no GPU driver API), below a
//! configurable root so that tests can
//! run it on recorded trees. See `gdr-doctor --help`.

mod apps;
mod doctor;
mod finding;
mod json;
mod libs;
mod models;
mod modversions;
mod pci;
mod probe;
mod prometheus;
mod render;
mod sysfs;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: gdr-doctor [OPTIONS]

Tells whether GPUDirect RDMA (RDMA NIC <-> NVIDIA GPU memory, through peermem-rs or NVIDIA's
nvidia-peermem) can work on this node, and why not, from sysfs, procfs and files alone. Run it as root:
ACS settings live in PCIe extended config space, which sysfs shows to root only.

It judges every GPU/NIC pair: the PCIe path between them (PIX, PXB, PHB, NODE, SYS as in
`nvidia-smi topo -m`), ACS redirection on the bridges in between, the IOMMU mode of the NIC, the GPU
model, the NVIDIA kernel module and its flavour (open or proprietary), the peer-memory host
(MLNX_OFED/DOCA-OFED ib_core), the GPU peer-memory client (nv_mem), and whether NCCL, UCX, NVSHMEM
and UCC will find that client (on kernels without memory_peers, only under the name nvidia_peermem).
Every problem comes with a fix.

Options:
  --root DIR, --sysfs-root DIR
                        read DIR/sys, DIR/proc and DIR/lib/modules instead of the live system's
  --json                machine-readable report on stdout
  --prometheus          the verdicts, the findings and peermem-rs's statistics in Prometheus'
                        text format, for node_exporter's textfile collector (metrics: README)
  --gpu-support         only the first question: can each GPU do GPUDirect RDMA at all, and with
                        which driver and client (exit 0 all can, 1 a model gdr-doctor does not
                        know, 2 some cannot, 3 no GPU)
  --all                 show the findings of every GPU/NIC pair, not only each GPU's best NIC
  --strict              exit status from the worst pair instead of each GPU's best NIC
  --hardware-only       judge only the hardware path (GPU model, PCIe path, ACS, IOMMU, links),
                        skip the NVIDIA driver and peer-memory checks
  --declare-gpu BDF[=MODEL]
                        treat PCI function BDF as an NVIDIA GPU (repeatable); MODEL is a model of
                        the built-in table (e.g. \"H100 PCIe\", \"GB10\") or any name (default
                        \"stand-in\": a GPU that can do GPUDirect RDMA)
  --declare-nic BDF[=NAME]
                        treat PCI function BDF as an RDMA NIC (repeatable; default name nicN)
  --nvidia-module NAME  the GPU driver's kernel module (default nvidia)
  -h, --help            this text
  -V, --version         the version

Exit status:
  0  GPUDirect RDMA will work: every GPU has a NIC with which it works (--strict: every pair)
  1  it may work, but slowly (or fail on some platforms) for at least one GPU (--strict: pair)
  2  it will not work for at least one GPU (--strict: pair)
  3  nothing to judge: no NVIDIA GPU or no RDMA NIC found
  64 usage error, or the root is unreadable
";

const EXIT_USAGE: u8 = 64;

struct Args {
    root: PathBuf,
    opts: doctor::Options,
}

fn split_decl(v: &str) -> (String, Option<String>) {
    match v.split_once('=') {
        Some((bdf, name)) => (bdf.to_string(), Some(name.to_string())),
        None => (v.to_string(), None),
    }
}

/// Accepts "03:00.0" as well as "0000:03:00.0", like lspci.
fn full_bdf(bdf: &str) -> Result<String, String> {
    let full = if bdf.matches(':').count() == 1 {
        format!("0000:{bdf}")
    } else {
        bdf.to_string()
    };
    let full = full.to_ascii_lowercase();
    if pci::is_bdf(&full) {
        Ok(full)
    } else {
        Err(format!(
            "{bdf}: not a PCI address (expected DOMAIN:BUS:DEV.FN, e.g. 0000:03:00.0)"
        ))
    }
}

enum Parsed {
    Run(Args),
    Exit(String, u8),
}

fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Parsed, String> {
    let mut root = PathBuf::from("/");
    let mut opts = doctor::Options {
        nvidia_module: "nvidia".into(),
        ..Default::default()
    };
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Exit(USAGE.to_string(), 0)),
            "-V" | "--version" => {
                return Ok(Parsed::Exit(
                    format!("gdr-doctor {}\n", render::version()),
                    0,
                ))
            }
            "--root" | "--sysfs-root" => root = PathBuf::from(value(&flag)?),
            "--json" => opts.json = true,
            "--prometheus" => opts.prometheus = true,
            "--gpu-support" => opts.gpu_support = true,
            "--all" => opts.all = true,
            "--strict" => opts.strict = true,
            "--hardware-only" => opts.hardware_only = true,
            "--nvidia-module" => opts.nvidia_module = value(&flag)?,
            "--declare-gpu" => {
                let (bdf, model) = split_decl(&value(&flag)?);
                opts.declare_gpus.push((full_bdf(&bdf)?, model));
            }
            "--declare-nic" => {
                let (bdf, name) = split_decl(&value(&flag)?);
                opts.declare_nics.push((full_bdf(&bdf)?, name));
            }
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok(Parsed::Run(Args { root, opts }))
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Exit(text, code)) => {
            print!("{text}");
            return ExitCode::from(code);
        }
        Err(e) => {
            eprintln!("gdr-doctor: {e}\n(see gdr-doctor --help)");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let fs = match sysfs::Fs::new(&args.root) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("gdr-doctor: {}: {e}", args.root.display());
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let report = match doctor::diagnose(&fs, &args.opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gdr-doctor: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    if args.opts.gpu_support {
        print!("{}", render::gpu_support(&report));
        return ExitCode::from(render::gpu_support_status(&report) as u8);
    }
    if args.opts.prometheus {
        print!("{}", prometheus::text(&report, args.opts.all));
    } else if args.opts.json {
        print!("{}", render::json(&report));
    } else {
        print!("{}", render::human(&report, args.opts.all));
    }
    ExitCode::from(report.exit_status() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Parsed, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments() {
        let Ok(Parsed::Run(a)) = run(&[
            "--sysfs-root",
            "/tmp/x",
            "--declare-gpu=03:00.0",
            "--declare-gpu",
            "0000:05:00.0=H100 PCIe",
            "--declare-nic",
            "0000:04:00.0=edu",
            "--json",
            "--hardware-only",
        ]) else {
            panic!("not parsed");
        };
        assert_eq!(a.root, PathBuf::from("/tmp/x"));
        assert_eq!(
            a.opts.declare_gpus,
            [
                ("0000:03:00.0".to_string(), None),
                ("0000:05:00.0".to_string(), Some("H100 PCIe".to_string()))
            ]
        );
        assert_eq!(
            a.opts.declare_nics,
            [("0000:04:00.0".to_string(), Some("edu".to_string()))]
        );
        assert!(a.opts.json && a.opts.hardware_only && !a.opts.strict);
        assert_eq!(a.opts.nvidia_module, "nvidia");
    }

    #[test]
    fn bad_arguments() {
        assert!(run(&["--frobnicate"]).is_err());
        assert!(run(&["--root"]).is_err());
        assert!(run(&["--declare-gpu", "nonsense"]).is_err());
        assert!(matches!(run(&["--help"]), Ok(Parsed::Exit(_, 0))));
    }
}
