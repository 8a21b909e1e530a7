//! ABI checks of the generated bindings against the C compiler's view.
//!
//! For every NVIDIA header set in the cache (550 open, 535 tesla, 470 tesla) the build script runs
//! bindgen with the module's own `bindings/bindings.h` and `bindings/bindgen.args`, and compiles a C
//! probe of the same structures. The tests compare every size and offset listed in layouts.txt, and
//! pin the facts of the peer-memory contract that the module's code depends on.

include!(concat!(env!("OUT_DIR"), "/layouts.rs"));

#[cfg(test)]
mod tests {
    use super::HEADER_SETS;
    use std::collections::BTreeMap;

    #[test]
    #[cfg_attr(
        abi_no_headers,
        ignore = "no NVIDIA headers in the cache: run `make setup` first"
    )]
    fn rust_and_c_layouts_agree() {
        assert!(!HEADER_SETS.is_empty());
        for (set, rust, c) in HEADER_SETS {
            let c: BTreeMap<String, usize> = c().into_iter().collect();
            assert_eq!(c.len(), rust.len(), "{set}: probe tables differ in length");
            for (what, rust_value) in rust.iter() {
                let c_value = c
                    .get(*what)
                    .unwrap_or_else(|| panic!("{set}: C probe lacks {what}"));
                assert_eq!(
                    rust_value, c_value,
                    "{set}: {what}: bindgen says {rust_value}, C says {c_value}"
                );
            }
        }
    }

    /// The facts of docs/peer-memory-contract.md sections 1 and 2 that peermem-rs's code relies on.
    #[test]
    #[cfg_attr(
        abi_no_headers,
        ignore = "no NVIDIA headers in the cache: run `make setup` first"
    )]
    fn contract_facts_hold() {
        for (set, rust, _) in HEADER_SETS {
            let get = |k: &str| rust.iter().find(|(n, _)| *n == k).map(|(_, v)| *v).unwrap();
            assert_eq!(get("sizeof(peer_memory_client)"), 136, "{set}");
            assert_eq!(get("offsetof(peer_memory_client, acquire)"), 80, "{set}");
            assert_eq!(get("offsetof(peer_memory_client_ex, flags)"), 144, "{set}");
            assert_eq!(
                get("offsetof(nvidia_p2p_page, physical_address)"),
                0,
                "{set}"
            );
            assert_eq!(get("offsetof(nvidia_p2p_page_table, pages)"), 8, "{set}");
            assert_eq!(get("offsetof(nvidia_p2p_page_table, entries)"), 16, "{set}");
            assert_eq!(
                get("offsetof(nvidia_p2p_page_table, gpu_uuid)"),
                24,
                "{set}"
            );
            assert_eq!(
                get("offsetof(nvidia_p2p_dma_mapping, dma_addresses)"),
                16,
                "{set}"
            );
            assert_eq!(
                get("offsetof(nvidia_p2p_dma_mapping, pci_dev)"),
                32,
                "{set}"
            );
        }
    }
}
