// SPDX-License-Identifier: GPL-2.0

//! The model check as tests: the fixed client satisfies every property in every configuration,
//! exhaustively to the model's bound; the previous client (commit 8adc715) does not, and the
//! counterexamples are the use-after-free paths H1 and H2 and the unload race L1 that reading the
//! real providers found.

use protocol_model::{check, Client, Config, Dereg, Flavour};

#[test]
fn the_fixed_client_satisfies_every_property_in_every_configuration() {
    let mut states = 0;
    for cfg in Config::all(Client::Fixed) {
        let r = check(cfg);
        states += r.unique_states;
        for (property, trace) in &r.properties {
            if let Some(t) = trace {
                panic!(
                    "{cfg}: {property} fails ({}):\n{}",
                    t.end,
                    t.steps.join("\n")
                );
            }
        }
        // Not vacuous: the registration really completes in some interleaving.
        assert!(
            r.registration_completes,
            "{cfg}: no registration ever completes"
        );
    }
    println!("{states} unique states explored");
    assert!(states > 100_000, "the model shrank: {states} states");
}

fn before(flavour: Flavour, dereg: Dereg) -> protocol_model::Report {
    check(Config {
        client: Client::Before,
        flavour,
        legacy: false,
        dereg,
        unpin_fails: false,
    })
}

#[test]
fn h1_the_previous_client_lets_the_driver_free_a_pin_under_its_own_dma_map_and_dma_unmap() {
    let r = before(Flavour::Invalidating, Dereg::Owner);
    let map = r
        .counterexample("dma_map_pages never")
        .expect("H1 in dma_map");
    assert!(
        map.end.contains("linked its mapping into a freed pin"),
        "{}",
        map.end
    );
    let unmap = r
        .counterexample("dma_unmap_pages never")
        .expect("H1 in dma_unmap");
    assert!(
        unmap.end.contains("semaphore of a freed pin"),
        "{}",
        unmap.end
    );
}

#[test]
fn h2_the_previous_client_frees_a_registration_the_driver_still_calls_back_after_a_foreign_put() {
    for dereg in [Dereg::ForkedChild, Dereg::DeviceRemoval] {
        let r = before(Flavour::Invalidating, dereg);
        let t = r
            .counterexample("no registration is used after")
            .unwrap_or_else(|| panic!("H2 with {dereg:?}"));
        assert!(t.end.contains("RegistrationUseAfterFree"), "{}", t.end);
    }
    // From the owner's own process put_pages really unpins: no H2 there.
    let r = before(Flavour::Invalidating, Dereg::Owner);
    assert!(r.counterexample("no registration is used after").is_none());
}

#[test]
fn l1_the_previous_client_drops_the_module_reference_inside_the_free_callback() {
    let r = before(Flavour::Invalidating, Dereg::Owner);
    assert!(r
        .counterexample("no module code runs after rmmod")
        .is_some());
}

#[test]
fn the_previous_persistent_client_was_safe() {
    for dereg in [Dereg::Owner, Dereg::ForkedChild, Dereg::DeviceRemoval] {
        assert!(before(Flavour::Persistent, dereg).all_hold());
    }
}
