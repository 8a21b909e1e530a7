// SPDX-License-Identifier: GPL-2.0
//! gdr-doctor on recorded trees of real-looking nodes (tests/fixtures/, written by make-fixtures.py):
//! the verdicts, the reasons and their fixes, and how they change when the node changes.

mod common;

use common::{codes, elf_module, find, pair, versions, Fixture, ALL_FIXTURES};

fn node_codes(r: &serde_json::Value) -> Vec<String> {
    codes(&r["node_findings"])
}

#[test]
fn dgx_h100_every_gpu_has_a_pix_nic() {
    let fx = Fixture::new("dgx-h100");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0);
    assert_eq!(r["verdict"], "works");
    let gpus = r["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 8);
    assert_eq!(r["nics"].as_array().unwrap().len(), 8);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["name"], format!("gpu{i}"));
        assert_eq!(g["model"], "H100 SXM5 80GB");
        assert_eq!(g["architecture"], "Hopper");
        assert_eq!(g["gpudirect_rdma_capable"], true);
        assert_eq!(g["bar1"]["bar"], 1);
        assert_eq!(g["bar1"]["size_bytes"].as_u64(), Some(128 << 30));
        assert_eq!(g["pci"]["numa_node"], if i < 4 { 0 } else { 1 });
        assert_eq!(g["findings"].as_array().unwrap().len(), 0, "{g:#}");
    }
    // Each GPU's own NIC sits in its leaf switch.
    for (i, b) in r["best_per_gpu"].as_array().unwrap().iter().enumerate() {
        assert_eq!(b["gpu"], format!("gpu{i}"));
        assert_eq!(b["nic"], format!("mlx5_{i}"));
        assert_eq!(b["link"], "PIX");
        assert_eq!(b["verdict"], "works");
    }
    // The other pairs, classified as nvidia-smi topo -m would.
    let p = pair(&r, "gpu0", "mlx5_0");
    assert_eq!(p["bridges"].as_array().unwrap().len(), 2);
    for acs in p["acs"].as_array().unwrap() {
        assert_eq!(acs["state"], "present");
        assert_eq!(acs["control"], "0x0000");
    }
    assert_eq!(pair(&r, "gpu0", "mlx5_1")["link"], "PXB");
    assert_eq!(pair(&r, "gpu0", "mlx5_1")["verdict"], "works");
    let node = pair(&r, "gpu0", "mlx5_2");
    assert_eq!(
        (node["link"].as_str(), node["verdict"].as_str()),
        (Some("NODE"), Some("slow"))
    );
    assert_eq!(codes(&node["reasons"]), ["topology-node"]);
    let sys = pair(&r, "gpu0", "mlx5_4");
    assert_eq!(
        (sys["link"].as_str(), sys["verdict"].as_str()),
        (Some("SYS"), Some("fails"))
    );
    let why = find(&sys["reasons"], "topology-sys");
    assert!(
        why["message"]
            .as_str()
            .unwrap()
            .contains("NUMA node 0, NIC on 1"),
        "{why}"
    );
    assert!(
        why["fix"].as_str().unwrap().contains("mlx5_0 (PIX)"),
        "{why}"
    );
    assert_eq!(pair(&r, "gpu7", "mlx5_6")["link"], "PXB");
    assert_eq!(pair(&r, "gpu5", "mlx5_0")["link"], "SYS");

    // The software side.
    assert_eq!(r["driver"]["flavour"], "open");
    assert_eq!(r["driver"]["evidence"], "taint OE");
    assert_eq!(r["driver"]["version"], "570.148.08");
    let pm = &r["peer_memory"];
    assert_eq!(pm["memory_peers"], true);
    assert_eq!(pm["host_symbol"], "found");
    assert_eq!(pm["host_symbol_module"], "ib_core");
    assert_eq!(pm["clients"][0]["name"], "nv_mem");
    assert_eq!(pm["clients"][0]["stats"]["num_alloc_mrs"], 1024);
    assert_eq!(pm["peermem_rs"]["version"], "0.1.0");
    assert_eq!(
        pm["peermem_rs"]["parameters"]["persistent_api_support"],
        "1"
    );
    assert_eq!(pm["peermem_rs"]["stats"]["acquired"], "1024");
    assert_eq!(pm["peermem_rs"]["stats"]["error_topology_unsupported"], "0");
    assert_eq!(
        pm["peermem_rs"]["stats_file"],
        "/sys/kernel/debug/peermem_rs/stats"
    );
    let client = find(&r["node_findings"], "client-registered");
    let msg = client["message"].as_str().unwrap();
    assert!(
        msg.contains("registered by peermem-rs")
            && msg.contains("24 MRs live")
            && msg.contains("1 GiB pinned"),
        "{msg}"
    );
    assert_eq!(
        node_codes(&r),
        [
            "driver-open",
            "peer-memory-host",
            "client-registered",
            "applications",
            "peermem-rs",
            "dmabuf",
            "libraries",
            "iommu"
        ]
    );
    // A host with memory_peers: every GPUDirect RDMA user finds nv_mem there, except NCCL's
    // GPU-initiated networking, which looks only for /sys/module/nvidia_peermem.
    let apps = find(&r["node_findings"], "applications");
    assert_eq!(apps["severity"], "note");
    assert!(
        apps["message"]
            .as_str()
            .unwrap()
            .ends_with("that do not: NCCL GIN GDAKI (>= 2.29.7)"),
        "{apps}"
    );
    assert!(
        apps["fix"]
            .as_str()
            .unwrap()
            .contains("make dkms-install, without DROPIN=0"),
        "{apps}"
    );
    let found: Vec<bool> = pm["applications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["found"].as_bool().unwrap())
        .collect();
    assert_eq!(found, [true, false, true, true, true, true]);
    assert_eq!(r["nics"][0]["iommu_domain"], "identity");
}

#[test]
fn dgx_h100_human_report() {
    let fx = Fixture::new("dgx-h100");
    let out = fx.run(&[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let want = [
        "gpu0  PIX ok    PXB ok    NODE slow NODE slow SYS no    SYS no    SYS no    SYS no",
        "gpu7  SYS no    SYS no    SYS no    SYS no    NODE slow NODE slow PXB ok    PIX ok",
        "gpu3 0000:40:00.0 -> mlx5_3 0000:41:00.0 (PIX): will work",
        "[ok]   NVIDIA driver 570.148.08: open kernel modules (taint OE)",
        "pinned_bytes 1073741824, acquired 1024, registrations 1024, releases 1000 (12 more counters at 0)",
        "Verdict: GPUDirect RDMA will work: every GPU has a NIC it works with (exit 0)",
    ];
    for w in want {
        assert!(out.stdout.contains(w), "missing {w:?} in:\n{}", out.stdout);
    }
    assert!(
        !out.stdout.contains("[FAIL]") && !out.stdout.contains("[slow]"),
        "{}",
        out.stdout
    );
    // --all shows why the cross-socket pairs are no good.
    let all = fx.run(&["--all"]);
    assert!(
        all.stdout
            .contains("gpu0 0000:1a:00.0 -> mlx5_4 0000:a0:00.0 (SYS): will not work"),
        "{}",
        all.stdout
    );
    assert!(
        all.stdout
            .contains("fix: use a NIC on the GPU's NUMA node 0; nearer to gpu0: mlx5_0 (PIX)"),
        "{}",
        all.stdout
    );
}

#[test]
fn dgx_h100_strict_judges_every_pair() {
    let fx = Fixture::new("dgx-h100");
    let (status, r) = fx.json(&["--strict"]);
    assert_eq!(status, 2, "cross-socket pairs do not work");
    assert_eq!(r["verdict"], "fails");
}

#[test]
fn dgx_h100_without_a_peer_memory_host() {
    let fx = Fixture::new("dgx-h100");
    fx.remove("/sys/kernel/mm/memory_peers");
    fx.write(
        "/proc/kallsyms",
        "0000000000000000 T ib_register_client\t[ib_core]\n",
    );
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["node_findings"], "no-peer-memory-host");
    assert_eq!(f["severity"], "fail");
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .contains("MLNX_OFED or DOCA-OFED"),
        "{f}"
    );
    assert_eq!(r["peer_memory"]["host_symbol"], "absent");
    // Every pair carries the reason.
    assert!(
        codes(&pair(&r, "gpu0", "mlx5_0")["reasons"]).contains(&"no-peer-memory-host".to_string())
    );

    // A host without memory_peers (MLNX_OFED on a kernel that does not export mm_kobj, 6.6 and
    // later; or the ib_uverbs variant): only the symbol. peermem_rs is loaded and registered, but
    // no GPUDirect RDMA user looks for it there: slow (they fall back to DMA-BUF or host memory).
    fx.write(
        "/proc/kallsyms",
        "0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n",
    );
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    assert!(
        node_codes(&r).contains(&"client-loaded".to_string()),
        "{:?}",
        node_codes(&r)
    );
    let f = find(&r["node_findings"], "client-invisible");
    assert_eq!(f["severity"], "slow");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("loaded under its own name, peermem_rs"),
        "{f}"
    );
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .contains("make dkms-install without DROPIN=0"),
        "{f}"
    );
    assert!(codes(&pair(&r, "gpu0", "mlx5_0")["reasons"]).contains(&"client-invisible".to_string()));

    // The drop-in instead: found by every current release; only the older ones, which look only
    // for memory_peers, do not (a note).
    let stats = fx.read("/sys/kernel/debug/peermem_rs/stats");
    fx.remove("/sys/module/peermem_rs");
    fx.remove("/sys/kernel/debug/peermem_rs");
    fx.write("/sys/module/nvidia_peermem/version", "0.1.0\n");
    fx.write(
        "/sys/module/nvidia_peermem/parameters/persistent_api_support",
        "1\n",
    );
    fx.write("/sys/kernel/debug/nvidia_peermem/stats", &stats);
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0, "{:?}", node_codes(&r));
    assert_eq!(r["peer_memory"]["nvidia_peermem_is"], "peermem-rs");
    let apps = find(&r["node_findings"], "applications");
    assert_eq!(apps["severity"], "note");
    let msg = apps["message"].as_str().unwrap();
    assert!(
        msg.contains("NCCL >= 2.23.4 (module/nvidia_peermem)")
            && msg.contains("NCCL GIN GDAKI (>= 2.29.7) (module/nvidia_peermem)")
            && msg.ends_with("that do not: NCCL <= 2.22, UCX <= 1.17, NVSHMEM < 3.3.9"),
        "{msg}"
    );
    let rs = find(&r["node_findings"], "peermem-rs");
    assert!(
        rs["message"]
            .as_str()
            .unwrap()
            .starts_with("peermem-rs 0.1.0 loaded as nvidia_peermem"),
        "{rs}"
    );

    // NVIDIA's nvidia-peermem: no statistics, the driver's version. Found by the same checks.
    fx.remove("/sys/kernel/debug/nvidia_peermem");
    fx.write(
        "/sys/module/nvidia_peermem/version",
        fx.read("/sys/module/nvidia/version"),
    );
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0, "{:?}", node_codes(&r));
    assert_eq!(r["peer_memory"]["nvidia_peermem_is"], "nvidia");
    assert!(!node_codes(&r).contains(&"peermem-rs".to_string()));

    // Nothing to tell: the kernel's symbols are not readable.
    fx.remove("/proc/kallsyms");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    assert_eq!(
        find(&r["node_findings"], "peer-memory-host-unknown")["severity"],
        "slow"
    );
}

#[test]
fn dgx_h100_client_problems() {
    let fx = Fixture::new("dgx-h100");
    fx.remove("/sys/kernel/mm/memory_peers/nv_mem");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["node_findings"], "client-not-registered");
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .contains("rmmod peermem_rs; modprobe peermem_rs"),
        "{f}"
    );

    fx.remove("/sys/module/peermem_rs");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["node_findings"], "no-peer-memory-client");
    assert_eq!(
        f["fix"],
        "install peermem-rs as the drop-in nvidia-peermem (make dkms-install, which builds the drop-in) and modprobe nvidia-peermem; or NVIDIA's nvidia-peermem"
    );
    assert!(!node_codes(&r).contains(&"peermem-rs".to_string()));
}

#[test]
fn dgx_h100_config_space_unreadable_without_root() {
    let fx = Fixture::new("dgx-h100");
    let configs = fx.configs();
    assert_eq!(configs.len(), 40, "bridges with config space");
    // What sysfs gives a reader without CAP_SYS_ADMIN: the first 64 bytes.
    for c in &configs {
        let bytes = std::fs::read(c).unwrap();
        std::fs::write(c, &bytes[..64]).unwrap();
    }
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0, "unknown ACS does not change the verdict");
    let f = find(&r["node_findings"], "acs-unreadable");
    assert_eq!(f["severity"], "note");
    // 40 bridges, but the 4 root ports and 4 top upstream ports are on no GPU-NIC path inside a switch.
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("ACS settings of 32 bridge(s)"),
        "{f}"
    );
    assert_eq!(f["fix"], "run gdr-doctor as root to check ACS");
    assert_eq!(pair(&r, "gpu0", "mlx5_0")["acs"][0]["state"], "unreadable");
}

#[test]
fn v100_proprietary_driver_without_client() {
    let fx = Fixture::new("v100-proprietary");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    assert_eq!(r["verdict"], "fails");
    for g in r["gpus"].as_array().unwrap() {
        assert_eq!(g["model"], "Tesla V100 PCIe 32GB");
        assert_eq!(g["architecture"], "Volta");
        assert_eq!(g["bar1"]["size_bytes"].as_u64(), Some(32 << 30));
    }
    assert_eq!(r["driver"]["flavour"], "proprietary");
    assert_eq!(r["driver"]["evidence"], "taint POE");
    let prop = find(&r["node_findings"], "driver-proprietary");
    assert_eq!(prop["severity"], "note");
    assert_eq!(
        prop["fix"],
        "peermem-rs needs the open kernel modules (Turing and newer); on this Tesla V100 PCIe 32GB (Volta) use NVIDIA's nvidia-peermem"
    );
    let none = find(&r["node_findings"], "no-peer-memory-client");
    assert_eq!(none["severity"], "fail");
    assert!(
        none["fix"]
            .as_str()
            .unwrap()
            .starts_with("modprobe nvidia-peermem"),
        "{none}"
    );
    assert_eq!(pair(&r, "gpu0", "mlx5_0")["link"], "PIX");
    assert_eq!(pair(&r, "gpu1", "mlx5_1")["link"], "SYS");
    assert_eq!(pair(&r, "gpu3", "mlx5_1")["link"], "PIX");
    assert_eq!(r["iommu"]["groups"], 0);

    let human = fx.run(&[]);
    assert!(human.stdout.contains("[note] proprietary NVIDIA driver 535.183.01 (taint POE): peermem-rs cannot load against it"), "{}", human.stdout);
    assert!(
        human.stdout.contains("[FAIL] no GPU peer-memory client"),
        "{}",
        human.stdout
    );
    let because = "(PIX): will not work\n    because of: no-peer-memory-client (node)\n";
    assert!(human.stdout.contains(because), "{}", human.stdout);
    assert!(
        human
            .stdout
            .contains("Verdict: GPUDirect RDMA will not work for gpu0, gpu1, gpu2, gpu3"),
        "{}",
        human.stdout
    );
}

#[test]
fn v100_with_nvidia_peermem_loaded() {
    let fx = Fixture::new("v100-proprietary");
    fx.write("/sys/module/nvidia_peermem/version", "535.183.01\n");
    fx.write(
        "/sys/module/nvidia_peermem/parameters/peerdirect_support",
        "0\n",
    );
    fx.write("/sys/kernel/mm/memory_peers/nv_mem/version", "535.183.01\n");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0);
    let f = find(&r["node_findings"], "client-registered");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("nv_mem 535.183.01 registered by nvidia-peermem"),
        "{f}"
    );
    // Still worth saying why peermem-rs is not the module here.
    assert!(node_codes(&r).contains(&"driver-proprietary".to_string()));
}

#[test]
fn v100_hardware_only() {
    let fx = Fixture::new("v100-proprietary");
    let (status, r) = fx.json(&["--hardware-only"]);
    assert_eq!(status, 0, "the PCIe side of this node is fine");
    assert!(r["driver"].is_null() && r["peer_memory"].is_null());
    assert_eq!(node_codes(&r), ["iommu"]);
}

#[test]
fn v100_driver_not_loaded_names_the_installed_flavour() {
    let fx = Fixture::new("v100-proprietary");
    fx.remove("/sys/module/nvidia");
    let modules: String = fx
        .read("/proc/modules")
        .lines()
        .filter(|l| !l.starts_with("nvidia"))
        .map(|l| format!("{l}\n"))
        .collect();
    fx.write("/proc/modules", modules);
    let lib = "/lib/modules/5.15.0-105-generic";
    fx.write(
        &format!("{lib}/modules.dep"),
        "kernel/drivers/infiniband/core/ib_core.ko:\nupdates/dkms/nvidia.ko:\nupdates/dkms/nvidia-uvm.ko: updates/dkms/nvidia.ko\n",
    );
    fx.write(
        &format!("{lib}/updates/dkms/nvidia.ko"),
        b"\x7fELF\x02\x01\x01\0\0\0version=535.183.01\0license=NVIDIA\0alias=pci:v000010DEd*\0"
            .as_slice(),
    );
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    assert_eq!(r["driver"]["loaded"], false);
    assert_eq!(r["driver"]["installed_license"], "NVIDIA");
    let f = find(&r["node_findings"], "nvidia-not-loaded");
    let fix = f["fix"].as_str().unwrap();
    assert!(fix.starts_with("load it (modprobe nvidia)"), "{fix}");
    assert!(
        fix.contains("updates/dkms/nvidia.ko is proprietary (license \"NVIDIA\")"),
        "{fix}"
    );
    // Without a loaded driver, a GPU without driver is no news.
    assert!(codes(&r["gpus"][0]["findings"]).is_empty());
}

#[test]
fn v100_on_open_modules_is_not_driven() {
    let fx = Fixture::new("v100-proprietary");
    fx.write("/sys/module/nvidia/taint", "OE\n");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["gpus"][0]["findings"], "gpu-needs-proprietary");
    assert_eq!(f["severity"], "fail");
}

#[test]
fn gpu_bound_to_another_driver() {
    let fx = Fixture::new("dgx-h100");
    let gpu = "/sys/bus/pci/devices/0000:1a:00.0/driver";
    fx.remove(gpu);
    std::os::unix::fs::symlink(
        "../../../../../../../../bus/pci/drivers/nouveau",
        fx.path(gpu),
    )
    .unwrap();
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["gpus"][0]["findings"], "gpu-not-bound");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("bound to nouveau, not nvidia"),
        "{f}"
    );
    assert!(
        f["fix"].as_str().unwrap().starts_with("blacklist nouveau"),
        "{f}"
    );
    assert_eq!(r["best_per_gpu"][0]["verdict"], "fails");
    assert_eq!(r["best_per_gpu"][1]["verdict"], "works");
}

#[test]
fn gb10_has_no_gpudirect_rdma() {
    let fx = Fixture::new("gb10-spark");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let g = &r["gpus"][0];
    assert_eq!(g["model"], "GB10");
    assert_eq!(g["gpudirect_rdma_capable"], false);
    let f = find(&g["findings"], "gpu-no-gdr");
    assert_eq!(f["severity"], "fail");
    assert!(
        f["fix"].as_str().unwrap().contains("register host memory"),
        "{f}"
    );
    let pairs = r["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 4);
    for p in pairs {
        assert_eq!(p["verdict"], "fails");
        assert_eq!(p["link"], "NODE", "the GPU has a PCIe domain of its own");
        assert!(codes(&p["reasons"]).contains(&"gpu-no-gdr".to_string()));
    }
    // Everything else on this node is in order.
    assert_eq!(r["driver"]["flavour"], "open");
    let client = find(&r["node_findings"], "client-registered");
    assert!(
        client["message"]
            .as_str()
            .unwrap()
            .contains("registered by nvidia-peermem"),
        "{client}"
    );
    assert_eq!(r["iommu"]["cmdline_flags"][0], "iommu.passthrough=1");
    assert_eq!(r["nics"][0]["name"], "rocep1s0f0");
    assert_eq!(r["nics"][2]["name"], "roceP2p1s0f0");

    // Declared as another model, the same GPU would be judged by its path only.
    let (status, r) = fx.json(&["--declare-gpu", "000f:01:00.0=H100 PCIe"]);
    assert_eq!(status, 1);
    assert_eq!(r["gpus"][0]["model"], "H100 PCIe");
    assert_eq!(r["gpus"][0]["declared"], true);
}

#[test]
fn iommu_translation_and_acs_redirect_slow_it_down() {
    let fx = Fixture::new("iommu-acs");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    assert_eq!(r["verdict"], "slow");
    for n in r["nics"].as_array().unwrap() {
        assert_eq!(n["iommu_domain"], "DMA-FQ");
        let f = find(&n["findings"], "iommu-translated");
        assert_eq!(f["severity"], "slow");
        assert!(
            f["fix"].as_str().unwrap().starts_with("boot with iommu=pt"),
            "{f}"
        );
    }
    let p = pair(&r, "gpu0", "mlx5_0");
    assert_eq!(p["link"], "PIX");
    assert_eq!(
        p["bridges"],
        serde_json::json!(["0000:32:00.0", "0000:32:01.0"])
    );
    for acs in p["acs"].as_array().unwrap() {
        assert_eq!(acs["control"], "0x001d");
        assert_eq!(
            acs["enabled"],
            "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"
        );
    }
    let f = find(&p["findings"], "acs-redirect");
    assert_eq!(f["severity"], "slow");
    let fix = f["fix"].as_str().unwrap();
    assert!(fix.contains("setpci -s 0000:32:00.0 ECAP_ACS+0x6.w=0000; setpci -s 0000:32:01.0 ECAP_ACS+0x6.w=0000"), "{fix}");
    assert!(
        fix.contains("pci=disable_acs_redir=0000:32:00.0;0000:32:01.0"),
        "{fix}"
    );
    assert_eq!(
        codes(&p["reasons"]),
        ["iommu-translated", "acs-redirect"],
        "the root port above the switch is not on the path"
    );
    let degraded = find(&r["gpus"][1]["findings"], "link-degraded");
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("x8, the device can do x16"),
        "{degraded}"
    );
    let failures = find(&r["node_findings"], "peermem-rs-failures");
    assert_eq!(
        failures["message"],
        "peermem-rs counted failures: error_topology_unsupported 3"
    );
    let human = fx.run(&[]);
    let also = "    also because of: link-degraded (gpu1), iommu-translated (mlx5_0)\n";
    assert!(human.stdout.contains(also), "{}", human.stdout);
    assert!(human.stdout.contains("Verdict: GPUDirect RDMA may work slowly for gpu0, gpu1: fix the [slow] lines above (exit 1)"), "{}", human.stdout);
}

#[test]
fn iommu_acs_node_works_once_fixed() {
    let fx = Fixture::new("iommu-acs");
    // setpci -s BDF ECAP_ACS+0x6.w=0000 on every bridge; iommu=pt; a reseated GPU.
    for c in fx.configs() {
        let mut bytes = std::fs::read(&c).unwrap();
        if bytes[0x148] == 0x0d {
            bytes[0x14e] = 0;
            bytes[0x14f] = 0;
        }
        std::fs::write(&c, bytes).unwrap();
    }
    for g in std::fs::read_dir(fx.path("/sys/kernel/iommu_groups")).unwrap() {
        std::fs::write(g.unwrap().path().join("type"), "identity\n").unwrap();
    }
    let gpu1 = "/sys/bus/pci/devices/0000:35:00.0/current_link_width";
    fx.write(gpu1, "16\n");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0, "{:#}", r["pairs"]);
    assert_eq!(r["verdict"], "works");
}

#[test]
fn vm_stand_ins_need_declaring() {
    let fx = Fixture::new("vm-switch");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 3);
    assert_eq!(r["verdict"], "nothing-to-check");
    let c = node_codes(&r);
    assert!(
        c.contains(&"no-gpu".to_string()) && c.contains(&"no-nic".to_string()),
        "{c:?}"
    );
}

#[test]
fn vm_switch_layout_will_work() {
    let fx = Fixture::new("vm-switch");
    let (status, r) = fx.json(&[
        "--hardware-only",
        "--declare-gpu",
        "0000:03:00.0",
        "--declare-nic",
        "04:00.0=edu",
    ]);
    assert_eq!(status, 0);
    let g = &r["gpus"][0];
    assert_eq!(
        (g["model"].as_str(), g["architecture"].as_str()),
        (Some("stand-in"), Some("stand-in"))
    );
    assert_eq!(g["bar1"]["size_bytes"].as_u64(), Some(256 << 20));
    let p = pair(&r, "gpu0", "edu");
    assert_eq!(p["link"], "PIX");
    assert_eq!(p["verdict"], "works");
    // With the software checks, nothing of the GPU side is there.
    let (status, r) = fx.json(&[
        "--declare-gpu",
        "0000:03:00.0",
        "--declare-nic",
        "0000:04:00.0",
    ]);
    assert_eq!(status, 2);
    let c = node_codes(&r);
    assert!(
        c.contains(&"nvidia-not-loaded".to_string())
            && c.contains(&"no-peer-memory-host".to_string()),
        "{c:?}"
    );
}

#[test]
fn vm_split_layout_may_work_slowly() {
    let fx = Fixture::new("vm-split");
    let (status, r) = fx.json(&[
        "--hardware-only",
        "--declare-gpu",
        "0000:01:00.0",
        "--declare-nic",
        "0000:02:00.0",
    ]);
    assert_eq!(status, 1);
    let p = pair(&r, "gpu0", "nic0");
    assert_eq!(p["link"], "PHB");
    assert_eq!(codes(&p["reasons"]), ["topology-phb"]);
}

#[test]
fn usage_errors() {
    let fx = Fixture::new("vm-switch");
    let r = fx.run(&["--declare-gpu", "0000:09:00.0"]);
    assert_eq!(r.status, 64);
    assert!(
        r.stderr
            .contains("--declare-gpu 0000:09:00.0: no such PCI function"),
        "{}",
        r.stderr
    );
    assert_eq!(fx.run(&["--bogus"]).status, 64);
    let help = fx.run(&["--help"]);
    assert_eq!(help.status, 0);
    assert!(help.stdout.contains("Exit status:"));
}

/// Every problem comes with a fix; every report is valid JSON with the exit status it exits with.
#[test]
fn every_problem_has_a_fix() {
    for name in ALL_FIXTURES {
        let fx = Fixture::new(name);
        for args in [&[][..], &["--all"][..]] {
            let (_, r) = fx.json(args);
            let mut all = Vec::new();
            all.extend(r["node_findings"].as_array().unwrap().iter().cloned());
            for list in ["gpus", "nics", "pairs"] {
                for item in r[list].as_array().unwrap() {
                    all.extend(item["findings"].as_array().unwrap().iter().cloned());
                }
            }
            assert!(!all.is_empty(), "{name}");
            for f in all {
                if f["severity"] == "slow" || f["severity"] == "fail" {
                    assert!(
                        f["fix"].as_str().is_some_and(|s| !s.is_empty()),
                        "{name}: no fix for {f}"
                    );
                }
            }
        }
    }
}

/// An installed peer-memory client built against another ib_core than the installed one (an OFED
/// upgrade it was not rebuilt for): the kernel would refuse it with only "disagrees about version
/// of symbol"; gdr-doctor compares the CRCs in the files and names the rebuild.
#[test]
fn stale_build_after_an_ofed_upgrade() {
    let fx = Fixture::new("dgx-h100");
    let lib = format!(
        "/lib/modules/{}",
        fx.read("/proc/sys/kernel/osrelease").trim()
    );
    fx.write(
        &format!("{lib}/modules.dep"),
        "updates/dkms/peermem_rs.ko: updates/dkms/ib_core.ko\nupdates/dkms/ib_core.ko:\n",
    );
    let modinfo = b"version=0.9.0\0description=GPUDirect RDMA peer-memory client for NVIDIA GPUs (Rust)\0license=GPL\0".to_vec();
    let client = |ext: bool| {
        let imports = [
            ("module_layout", 0x0abc_def0),
            ("ib_register_peer_memory_client", 0x1111_1111),
            ("ib_unregister_peer_memory_client", 0x2222_2222),
        ];
        let mut secs = vec![(".modinfo", modinfo.clone())];
        if ext {
            // CONFIG_EXTENDED_MODVERSIONS without the basic table: the names and CRCs apart.
            let crcs = imports
                .iter()
                .flat_map(|(_, c): &(&str, u32)| c.to_le_bytes())
                .collect();
            let names = imports
                .iter()
                .flat_map(|(n, _)| format!("{n}\0").into_bytes())
                .collect();
            secs.push(("__version_ext_crcs", crcs));
            secs.push(("__version_ext_names", names));
        } else {
            secs.push(("__versions", versions(&imports)));
        }
        elf_module(&secs, &[])
    };
    let provider = |register_crc: u32| {
        let mut crcs = register_crc.to_le_bytes().to_vec();
        crcs.extend_from_slice(&0x2222_2222u32.to_le_bytes());
        elf_module(
            &[
                (".modinfo", b"license=Dual BSD/GPL\0".to_vec()),
                ("__kcrctab", crcs),
            ],
            &[
                ("__crc_ib_register_peer_memory_client", "__kcrctab", 0),
                ("__crc_ib_unregister_peer_memory_client", "__kcrctab", 4),
            ],
        )
    };
    fx.write(&format!("{lib}/updates/dkms/peermem_rs.ko"), client(false));
    fx.write(
        &format!("{lib}/updates/dkms/ib_core.ko"),
        provider(0x9999_9999),
    );
    let (_, r) = fx.json(&[]);
    let f = find(&r["node_findings"], "stale-build");
    assert_eq!(f["severity"], "fail", "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!("peermem_rs ({lib}/updates/dkms/peermem_rs.ko) was built against other builds of its providers")),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("ib_register_peer_memory_client: linked against 0x11111111, ib_core ({lib}/updates/dkms/ib_core.ko) exports 0x99999999")),
        "{msg}"
    );
    assert!(
        msg.contains("disagrees about version of symbol ib_register_peer_memory_client"),
        "{msg}"
    );
    assert!(
        !msg.contains("ib_unregister_peer_memory_client"),
        "only the mismatched symbol: {msg}"
    );
    assert!(
        f["fix"].as_str().unwrap().starts_with(
            "rebuild it against the installed providers: dkms build --force -m peermem-rs -v 0.9.0 -k $(uname -r) && dkms install --force"
        ),
        "{f}"
    );
    assert!(!node_codes(&r).contains(&"symbol-versions".to_string()));

    // The same with only the extended tables (Rust's long names live there).
    fx.write(&format!("{lib}/updates/dkms/peermem_rs.ko"), client(true));
    let (_, r) = fx.json(&[]);
    assert!(
        node_codes(&r).contains(&"stale-build".to_string()),
        "{:#}",
        r["node_findings"]
    );

    // As DKMS installs them on Ubuntu (CONFIG_MODULE_COMPRESS_ZSTD): compressed, read through zstd.
    // zstd_all(ARGS, SUFFIX): zstd ARGS on both module files (named with SUFFIX), which it replaces.
    let zstd_all = |args: &[&str], suffix: &str| {
        for m in ["peermem_rs", "ib_core"] {
            let ko = fx
                .root
                .join(format!("{}/updates/dkms/{m}{suffix}", &lib[1..]));
            let st = std::process::Command::new("zstd")
                .args(args)
                .arg(&ko)
                .status();
            assert!(st.unwrap().success(), "zstd {args:?} {}", ko.display());
        }
    };
    if std::process::Command::new("zstd")
        .arg("--version")
        .output()
        .is_ok()
    {
        let dep = fx.read(&format!("{lib}/modules.dep"));
        fx.write(&format!("{lib}/modules.dep"), dep.replace(".ko", ".ko.zst"));
        zstd_all(&["-q", "--rm", "-f"], ".ko");
        let (_, r) = fx.json(&[]);
        let f = find(&r["node_findings"], "stale-build");
        let msg = f["message"].as_str().unwrap();
        assert!(msg.contains("peermem_rs.ko.zst)"), "{f}");
        // Back to plain files for the rest.
        zstd_all(&["-dq", "--rm", "-f"], ".ko.zst");
        fx.write(&format!("{lib}/modules.dep"), dep);
    } else {
        eprintln!("not applicable here: no zstd command, the compressed case is not checked");
    }

    // Rebuilt against the installed ib_core: the CRCs agree.
    fx.write(
        &format!("{lib}/updates/dkms/ib_core.ko"),
        provider(0x1111_1111),
    );
    let (_, r) = fx.json(&[]);
    assert!(!node_codes(&r).contains(&"stale-build".to_string()));
    let ok = find(&r["node_findings"], "symbol-versions");
    assert!(
        ok["message"]
            .as_str()
            .unwrap()
            .contains("(2 symbols of ib_core)"),
        "{ok}"
    );
}

#[test]
fn mig_instances_on_a_driver_before_555_refuse_peermem_rs() {
    let fx = Fixture::new("dgx-h100");
    // gpu0 (device minor 0) has two MIG GPU instances; 570 pins persistently on MIG.
    fx.write(
        "/proc/driver/nvidia/gpus/0000:1a:00.0/information",
        "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 187\nDevice Minor: \t 0\n",
    );
    fx.write("/proc/driver/nvidia/capabilities/gpu0/mig/gi1/access", "");
    fx.write("/proc/driver/nvidia/capabilities/gpu0/mig/gi2/access", "");
    let (_, r) = fx.json(&[]);
    assert!(!codes(&r["gpus"][0]["findings"]).contains(&"mig-persistent-pins-refused".to_string()));
    // 550 refuses them: every registration of that GPU's memory is declined, the others work.
    fx.write("/sys/module/nvidia/version", "550.163.01\n");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["gpus"][0]["findings"], "mig-persistent-pins-refused");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("gi1, gi2") && msg.contains("550.163.01"),
        "{f}"
    );
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .starts_with("upgrade the NVIDIA driver to 555"),
        "{f}"
    );
    assert_eq!(r["best_per_gpu"][0]["verdict"], "fails");
    assert_eq!(r["best_per_gpu"][1]["verdict"], "works");
    // MIG off (no GPU instance left): nothing again.
    fx.remove("/proc/driver/nvidia/capabilities/gpu0/mig/gi1");
    fx.remove("/proc/driver/nvidia/capabilities/gpu0/mig/gi2");
    let (_, r) = fx.json(&[]);
    assert!(!codes(&r["gpus"][0]["findings"]).contains(&"mig-persistent-pins-refused".to_string()));
}

#[test]
fn invalidating_flavour_on_ofed_before_25_04_is_slow_with_its_fix() {
    let fx = Fixture::new("dgx-h100");
    // The persistent flavour (the fixture's) does not meet the host's stop-notifier bug.
    let (_, r) = fx.json(&[]);
    assert!(!node_codes(&r).contains(&"ofed-stop-notifier-deadlock".to_string()));
    fx.write(
        "/sys/module/peermem_rs/parameters/persistent_api_support",
        "0\n",
    );
    let (_, r) = fx.json(&[]);
    let f = find(&r["node_findings"], "ofed-stop-notifier-deadlock");
    assert_eq!(f["severity"], "slow", "{f}");
    assert!(
        f["message"].as_str().unwrap().contains("24.10-1.1.4"),
        "{f}"
    );
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .contains("persistent_api_support=1"),
        "{f}"
    );
    // 25.04 fixed it.
    fx.write("/sys/module/mlx5_core/version", "25.04-0.6.0\n");
    let (_, r) = fx.json(&[]);
    assert!(!node_codes(&r).contains(&"ofed-stop-notifier-deadlock".to_string()));
}

/// The seed question, answer first: can each GPU do GPUDirect RDMA at all, whatever the node.
#[test]
fn can_this_gpu_do_gpudirect_rdma_at_all() {
    let cases = [
        ("gb10-spark", 2, "gpu0: GB10 (Blackwell): no: its memory is unified with the CPU's"),
        ("v100-proprietary", 0, "gpu0, gpu1, gpu2, gpu3: Tesla V100 PCIe 32GB (Volta): yes, with NVIDIA's proprietary driver and its nvidia-peermem"),
        ("dgx-h100", 0, "gpu0 ... gpu7 (8 GPUs): H100 SXM5 80GB (Hopper): yes, with either driver flavour"),
        ("vm-switch", 3, "no NVIDIA GPU found"),
    ];
    for (name, status, answer) in cases {
        let fx = Fixture::new(name);
        let out = fx.run(&["--gpu-support"]);
        assert_eq!(out.status, status, "{name}: {}", out.stdout);
        assert!(
            out.stdout
                .lines()
                .nth(1)
                .is_some_and(|l| l.contains(answer)),
            "{name}:\n{}",
            out.stdout
        );
        // The whole report starts with the same answer, after the verdict.
        let full = fx.run(&[]);
        let head: Vec<&str> = full.stdout.lines().take(4).collect();
        if status != 3 {
            assert!(
                head[2].starts_with("Verdict: ") && head[3].contains(answer),
                "{name}:\n{}",
                full.stdout
            );
        }
        let (_, json) = fx.json(&[]);
        for g in json["gpus"].as_array().unwrap() {
            let want = if status == 2 { "no" } else { "yes" };
            assert_eq!(g["gpudirect_rdma_support"], want, "{name}");
        }
    }
    // A model the table does not know: "probably", exit 1.
    let fx = Fixture::new("dgx-h100");
    let gpu = std::fs::read_link(fx.path("/sys/bus/pci/devices/0000:1a:00.0")).unwrap();
    let dev = fx.path("/sys/bus/pci/devices").join(gpu).join("device");
    std::fs::write(&dev, "0xfffe\n").unwrap();
    let out = fx.run(&["--gpu-support"]);
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert!(
        out.stdout
            .contains("gpu0: NVIDIA GPU 10de:fffe (unknown architecture): probably"),
        "{}",
        out.stdout
    );
}

/// The node's finding with `code`, its severity and its fix.
fn node_finding(r: &serde_json::Value, code: &str) -> (String, String, String) {
    let f = find(&r["node_findings"], code);
    (
        f["severity"].as_str().unwrap().to_string(),
        f["message"].as_str().unwrap().to_string(),
        f["fix"].as_str().unwrap_or("").to_string(),
    )
}

/// The path --json gives each library.
fn library_paths(r: &serde_json::Value) -> Vec<(String, String, bool)> {
    r["libraries"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["library"].as_str().unwrap().to_string(),
                p["path"].as_str().unwrap().to_string(),
                p["needs_peer_memory"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// A current node: DMA-BUF is there, so NCCL, UCX (and Open MPI through it) and NVSHMEM take it;
/// UCC's tl/mlx5 has only peer memory, which the drop-in serves.
#[test]
fn each_library_takes_dmabuf_where_it_can() {
    let fx = Fixture::new("dmabuf-libraries");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0);
    assert_eq!(r["libraries"]["dmabuf"]["ready"], "yes");
    let (sev, msg, _) = node_finding(&r, "dmabuf");
    assert_eq!(sev, "ok", "{msg}");
    let want = [
        ("nccl", "dmabuf", false),
        ("ucx", "dmabuf", false),
        ("nvshmem", "dmabuf", false),
        ("ucc", "peer-memory", true),
        ("openmpi", "dmabuf", false),
    ];
    let got = library_paths(&r);
    assert_eq!(
        got,
        want.map(|(l, p, n)| (l.to_string(), p.to_string(), n)),
        "{:#}",
        r["libraries"]
    );
    let human = fx.run(&[]).stdout;
    for line in [
        "NCCL 2.27.3 (/usr/lib/x86_64-linux-gnu/libnccl.so.2): GPUDirect RDMA over DMA-BUF: DMA-BUF is preferred when both work; with NCCL_DMABUF_ENABLE=0, peer memory (it finds /sys/module/nvidia_peermem/version)",
        "UCC 1.4.4 (/usr/lib/x86_64-linux-gnu/libucc.so.1.0.0): GPUDirect RDMA over peer memory",
        "Open MPI 4.1.7 (/usr/lib/x86_64-linux-gnu/libmpi.so.40.30.5): GPUDirect RDMA over DMA-BUF: through its UCX PML, UCX 1.19.0's path",
    ] {
        assert!(human.contains(line), "missing {line:?} in\n{human}");
    }

    // Without the kernel's dma-buf registration every library falls back to the peer-memory
    // client it finds: the drop-in, which each current release looks for.
    let kallsyms = fx
        .read("/proc/kallsyms")
        .replace("ib_umem_dmabuf_get", "ib_umem_get");
    fx.write("/proc/kallsyms", kallsyms);
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0);
    assert_eq!(r["libraries"]["dmabuf"]["kernel"]["state"], "no");
    for (lib, path, needs) in library_paths(&r) {
        assert_eq!((path.as_str(), needs), ("peer-memory", true), "{lib}");
    }
}

/// An older userland on a current host: no DMA-BUF (rdma-core 28), and NCCL 2.18 looks only in
/// memory_peers, which this kernel does not have: no GPUDirect RDMA for it (slow), with both fixes.
/// UCX built without CUDA does not handle GPU memory at all.
#[test]
fn an_old_library_on_a_current_kernel_gets_no_gpudirect_rdma() {
    let fx = Fixture::new("legacy-libraries");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    assert_eq!(r["libraries"]["dmabuf"]["verbs"]["state"], "no");
    assert_eq!(
        library_paths(&r),
        [
            ("nccl".to_string(), "none".to_string(), false),
            ("ucx".to_string(), "no-gpu-support".to_string(), false)
        ]
    );
    let f = &r["node_findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "library-path" && f["subject"] == "nccl")
        .unwrap()
        .clone();
    assert_eq!(f["severity"], "slow");
    let fix = f["fix"].as_str().unwrap();
    assert!(
        fix.contains("rdma-core 34 or later")
            && fix.contains("upgrade NCCL to 2.23.4 or later")
            && fix.contains("drop-in"),
        "{fix}"
    );
    // With rdma-core 34's libibverbs, DMA-BUF is its path.
    fx.remove("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.8.28.0");
    fx.write(
        "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.34.0",
        b"\x7fELF\0IBVERBS_1.12\0".as_slice(),
    );
    let (_, r) = fx.json(&[]);
    assert_eq!(
        library_paths(&r)[0],
        ("nccl".to_string(), "dmabuf".to_string(), false)
    );
}

/// The drop-in built against DOCA-OFED 25.04's ib_core, which 25.07 replaced: refused by the
/// kernel; gdr-doctor names the CRCs and the rebuild, and the missing client points to it.
#[test]
fn stale_build_fixture_names_the_rebuild() {
    let fx = Fixture::new("stale-build");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let (sev, msg, fix) = node_finding(&r, "stale-build");
    assert_eq!(sev, "fail");
    assert!(
        msg.contains("linked against 0x5d8b2c71, ib_core (/lib/modules/6.8.0-90-generic/updates/dkms/ib_core.ko) exports 0x9e44f1b3"),
        "{msg}"
    );
    assert!(
        fix.starts_with(
            "rebuild it against the installed providers: dkms build --force -m peermem-rs -v 0.1.0"
        ),
        "{fix}"
    );
    let (sev, msg, fix) = node_finding(&r, "no-peer-memory-client");
    assert_eq!(sev, "fail");
    assert!(msg.ends_with("is installed but cannot load"), "{msg}");
    assert!(fix.starts_with("fix the [FAIL] line about /lib/modules/6.8.0-90-generic/updates/dkms/nvidia-peermem.ko above"), "{fix}");
}

/// NVIDIA's nvidia-peermem built before DOCA-OFED was installed: it names no peer-memory symbol,
/// so its init returns EINVAL and it can never load.
#[test]
fn nvidia_peermem_built_without_the_peer_memory_api() {
    let fx = Fixture::new("nvidia-peermem-without-ofed");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let (sev, msg, fix) = node_finding(&r, "client-without-peer-memory");
    assert_eq!(sev, "fail");
    assert!(
        msg.contains("(NVIDIA's nvidia-peermem) was built without the peer-memory host's API")
            && msg.contains("\"Invalid argument\""),
        "{msg}"
    );
    assert!(
        fix.starts_with(
            "install MLNX_OFED/DOCA-OFED first, then rebuild the NVIDIA driver's kernel modules"
        ),
        "{fix}"
    );
    // Once it names the symbol (rebuilt against the host), that finding is gone and the client
    // only needs loading.
    let lib = "/lib/modules/6.8.0-90-generic/updates/dkms/nvidia-peermem.ko";
    let mut ko = std::fs::read(fx.path(lib)).unwrap();
    ko.extend_from_slice(b"ib_register_peer_memory_client\0");
    fx.write(lib, ko);
    let (_, r) = fx.json(&[]);
    assert!(!node_codes(&r).contains(&"client-without-peer-memory".to_string()));
    let (_, _, fix) = node_finding(&r, "no-peer-memory-client");
    assert!(fix.starts_with("modprobe nvidia-peermem"), "{fix}");
}

/// The two version findings of docs/known-limits.md, each in its own recorded tree.
#[test]
fn version_cases_in_their_own_trees() {
    let fx = Fixture::new("mig-550");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let f = find(&r["gpus"][0]["findings"], "mig-persistent-pins-refused");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("MIG GPU instances (gi1, gi2)"),
        "{f}"
    );
    assert!(
        f["fix"]
            .as_str()
            .unwrap()
            .starts_with("upgrade the NVIDIA driver to 555 or later"),
        "{f}"
    );

    let fx = Fixture::new("ofed-2410-invalidating");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    let (sev, msg, fix) = node_finding(&r, "ofed-stop-notifier-deadlock");
    assert_eq!(sev, "slow");
    assert!(msg.contains("24.10-1.1.4"), "{msg}");
    assert!(
        fix.starts_with("upgrade MLNX_OFED/DOCA-OFED to 25.04 or later"),
        "{fix}"
    );
}

/// Upgraded on disk but not reloaded: the driver (slow: CUDA of the new release refuses the old
/// kernel module) and the drop-in (a note: the old one runs); and a client built for another
/// kernel, which the kernel refuses.
#[test]
fn what_is_installed_against_what_runs() {
    let fx = Fixture::new("upgraded-not-reloaded");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 1);
    let (sev, msg, fix) = node_finding(&r, "driver-not-reloaded");
    assert_eq!(sev, "slow");
    assert!(
        msg.starts_with(
            "NVIDIA driver 580.95.05 is loaded, but the installed nvidia is 580.105.08"
        ),
        "{msg}"
    );
    assert!(fix.starts_with("reboot"), "{fix}");
    let (sev, msg, fix) = node_finding(&r, "client-not-reloaded");
    assert_eq!(sev, "note");
    assert!(msg.starts_with("nvidia_peermem 0.1.0 is loaded, but /lib/modules/6.8.0-90-generic/updates/dkms/nvidia-peermem.ko is 0.2.0"), "{msg}");
    assert!(
        fix.ends_with("rmmod nvidia_peermem && modprobe nvidia_peermem"),
        "{fix}"
    );
    // Once reloaded (and rebooted into the driver), nothing is left to say.
    fx.write("/sys/module/nvidia/version", "580.105.08\n");
    fx.write("/sys/module/nvidia_peermem/version", "0.2.0\n");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 0);
    for code in ["driver-not-reloaded", "client-not-reloaded"] {
        assert!(!node_codes(&r).contains(&code.to_string()), "{code}");
    }

    let fx = Fixture::new("built-for-another-kernel");
    let (status, r) = fx.json(&[]);
    assert_eq!(status, 2);
    let (sev, msg, fix) = node_finding(&r, "client-other-kernel");
    assert_eq!(sev, "fail");
    assert!(
        msg.contains("was built for kernel 6.8.0-87-generic"),
        "{msg}"
    );
    assert!(
        fix.starts_with("rebuild it for this kernel: dkms install --force -m peermem-rs -v 0.1.0"),
        "{fix}"
    );
    let (_, msg, fix) = node_finding(&r, "no-peer-memory-client");
    assert!(
        msg.ends_with("but cannot load") && fix.contains("extra/peermem_rs.ko above"),
        "{msg} / {fix}"
    );
    // With symbol versions the kernel skips the release in the vermagic (the CRCs decide, as
    // RHEL's weak-updates rely on): then the file can load, and gdr-doctor must not fail it.
    let modinfo = b"version=0.1.0\0description=GPUDirect RDMA peer-memory client (peermem-rs)\0license=GPL\0vermagic=6.8.0-87-generic SMP preempt mod_unload modversions\0";
    fx.write(
        "/lib/modules/6.8.0-90-generic/extra/peermem_rs.ko",
        elf_module(
            &[
                (".modinfo", modinfo.to_vec()),
                (
                    "__versions",
                    versions(&[("ib_register_peer_memory_client", 0)]),
                ),
            ],
            &[],
        ),
    );
    let (_, r) = fx.json(&[]);
    assert!(!node_codes(&r).contains(&"client-other-kernel".to_string()));
    let (_, _, fix) = node_finding(&r, "no-peer-memory-client");
    assert!(fix.starts_with("modprobe peermem-rs"), "{fix}");
}

/// NVSHMEM asks only the CUDA driver: where the driver exports dma-buf but the kernel cannot
/// register one, it falls back to ibv_reg_mr, which any loaded client serves, and without a client
/// its registrations fail. Open MPI follows the UCX beside it (HPC-X's), not the distribution's.
#[test]
fn nvshmem_falls_back_and_open_mpi_follows_its_own_ucx() {
    let fx = Fixture::new("dmabuf-libraries");
    let kallsyms = fx
        .read("/proc/kallsyms")
        .replace("ib_umem_dmabuf_get", "ib_umem_get");
    fx.write("/proc/kallsyms", kallsyms);
    fx.remove("/sys/module/nvidia_peermem");
    fx.remove("/sys/kernel/debug/nvidia_peermem");
    let (_, r) = fx.json(&[]);
    let nvshmem = r["libraries"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["library"] == "nvshmem")
        .unwrap()
        .clone();
    assert_eq!(nvshmem["path"], "none", "{nvshmem}");
    assert!(
        nvshmem["why"]
            .as_str()
            .unwrap()
            .contains("its fallback to ibv_reg_mr finds no peer-memory client"),
        "{nvshmem}"
    );

    // HPC-X beside a distribution's UCX without CUDA.
    let fx = Fixture::new("dmabuf-libraries");
    let lib = "/usr/lib/x86_64-linux-gnu";
    fx.remove(&format!("{lib}/ucx/libuct_cuda.so.0.0.0"));
    fx.write("/opt/hpcx/ucx/lib/libucp.so.0.0.0", b"\x7fELF\0".as_slice());
    fx.write("/opt/hpcx/ucx/lib/pkgconfig/ucx.pc", "Version: 1.19.0\n");
    fx.write(
        "/opt/hpcx/ucx/lib/ucx/libuct_cuda.so.0.0.0",
        b"\x7fELF\0".as_slice(),
    );
    fx.write(
        "/opt/hpcx/ompi/lib/libmpi.so.40.30.5",
        b"\x7fELF\0".as_slice(),
    );
    fx.write(
        "/opt/hpcx/ompi/lib/openmpi/mca_pml_ucx.so",
        b"\x7fELF\0".as_slice(),
    );
    let (_, r) = fx.json(&[]);
    let paths: Vec<(String, String)> = r["libraries"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["library"] == "ucx" || p["library"] == "openmpi")
        .map(|p| {
            (
                p["file"].as_str().unwrap().to_string(),
                p["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let of = |file: &str| {
        paths
            .iter()
            .find(|p| p.0 == file)
            .map(|p| p.1.clone())
            .unwrap_or_else(|| panic!("{file}: {paths:?}"))
    };
    assert_eq!(of(&format!("{lib}/libucp.so.0.0.0")), "no-gpu-support");
    assert_eq!(of("/opt/hpcx/ucx/lib/libucp.so.0.0.0"), "dmabuf");
    assert_eq!(
        of("/opt/hpcx/ompi/lib/libmpi.so.40.30.5"),
        "dmabuf",
        "{paths:?}"
    );
    assert_eq!(
        of(&format!("{lib}/libmpi.so.40.30.5")),
        "no-gpu-support",
        "{paths:?}"
    );
}
