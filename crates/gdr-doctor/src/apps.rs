// SPDX-License-Identifier: GPL-2.0
//! What GPUDirect RDMA users look for to find a GPU peer-memory client.

use crate::probe::PeerMem;

/// The files GPUDirect RDMA users test to decide whether a GPU peer-memory client is there. None of
/// them asks the module or reads a file: each tests whether one of its paths exists (`access(F_OK)`),
/// in order. From NCCL src/transport/net_ib/gdr.cc, UCX src/uct/ib/base/ib_md.c, NVSHMEM
/// src/modules/transport/common/transport_ib_common.cpp, UCC src/components/tl/mlx5/tl_mlx5_context.c
/// (docs/library-paths.md, NC-3/NC-4, UX-3, NV-2, UC-2); tests/selftests/peermem/gdr_detect.c makes
/// the same checks in the test VM.
pub const APP_CHECKS: [(&str, &[&str]); 6] = [
    (
        "NCCL >= 2.23.4",
        &[APP_NV_MEM, APP_NV_MEM_NC, APP_NVIDIA_PEERMEM],
    ),
    ("NCCL GIN GDAKI (>= 2.29.7)", &[APP_NVIDIA_PEERMEM]),
    (
        "UCX >= 1.18",
        &[APP_NV_MEM, APP_NVIDIA_PEERMEM, APP_NV_PEER_MEM],
    ),
    (
        "NVSHMEM >= 3.3.9",
        &[
            APP_NV_MEM,
            APP_MEMORY_PEERS_NVIDIA_PEERMEM,
            APP_NVIDIA_PEERMEM,
        ],
    ),
    (
        "UCC tl/mlx5",
        &[APP_NV_MEM, APP_NVIDIA_PEERMEM, APP_NV_PEER_MEM],
    ),
    ("NCCL <= 2.22, UCX <= 1.17, NVSHMEM < 3.3.9", &[APP_NV_MEM]),
];
pub(crate) const APP_NV_MEM: &str = "/sys/kernel/mm/memory_peers/nv_mem/version";
pub(crate) const APP_NV_MEM_NC: &str = "/sys/kernel/mm/memory_peers/nv_mem_nc/version";
pub(crate) const APP_MEMORY_PEERS_NVIDIA_PEERMEM: &str =
    "/sys/kernel/mm/memory_peers/nvidia-peermem/version";
pub(crate) const APP_NVIDIA_PEERMEM: &str = "/sys/module/nvidia_peermem/version";
pub(crate) const APP_NV_PEER_MEM: &str = "/sys/module/nv_peer_mem/version";

/// For each of [`APP_CHECKS`], the path that makes it find a client, or None.
pub fn app_checks(pm: &PeerMem) -> Vec<(&'static str, Option<&'static str>)> {
    let exists = |path: &str| -> bool {
        let client = |name: &str| {
            pm.clients
                .iter()
                .any(|c| c.name == name && c.version.is_some())
        };
        match path {
            APP_NV_MEM => client("nv_mem"),
            APP_NV_MEM_NC => client("nv_mem_nc"),
            APP_MEMORY_PEERS_NVIDIA_PEERMEM => client("nvidia-peermem"),
            APP_NVIDIA_PEERMEM => pm
                .nvidia_peermem
                .as_ref()
                .is_some_and(|m| m.version.is_some()),
            APP_NV_PEER_MEM => pm.nv_peer_mem,
            _ => false,
        }
    };
    APP_CHECKS
        .iter()
        .map(|(name, paths)| (*name, paths.iter().copied().find(|p| exists(p))))
        .collect()
}
