// SPDX-License-Identifier: GPL-2.0

//! The model check as tests: the fixed client satisfies every property in every configuration,
//! exhaustively to the model's bound, including a second registration pinning at a reused table
//! address; with rule 1, 2 or 4 of its state machine broken, as the client of commit 8adc715
//! broke them, it does not, and the counterexamples are the use-after-free paths H1 and H2 and
//! the unload race L1 that reading the real providers found; the
//! client just before commit 8071b8f (no `N_PINS`) does not either, and its counterexample is the
//! stale unpin that `make stress` found; nor does the client that makes acquire's persistent pin
//! without `N_PINS` (d115ce6, before 19a7cde) when the owner created RM's internal P2P object: a
//! stale unpin then frees the second registration's persistent pin. Nor does the client that takes
//! the owner's 0 from put_pages of N as the unpin (b477f12, before the proof): when an MPS owner
//! has left the server's P2P object, that 0 unpinned nothing, and the server's free calls back a
//! registration that is gone (the KASAN report in `free_callback`). The fixed client makes the
//! proof, and pays for it in one race, on purpose (docs/known-limits.md, "MPS"): when the memory
//! goes (or the MPS owner leaves) between its put_pages of N, which did unpin N, and the proof's
//! lookup, it keeps the registration for good; the model checks that it keeps one in that race
//! only.

use std::sync::OnceLock;

use protocol_model::{check, Client, Config, Dereg, Flavour, Report, Trace};

/// The index of the first step at or after `from` that contains `what`.
fn at(t: &Trace, from: usize, what: &str) -> usize {
    from + t.steps[from..]
        .iter()
        .position(|s| s.contains(what))
        .unwrap_or_else(|| {
            panic!(
                "no step {what:?} after step {from}:\n{}",
                t.steps.join("\n")
            )
        })
}

/// A property that fails: the configuration, the property, how the run ends, and its steps.
fn fails(cfg: &Config, property: &str, t: &Trace) -> ! {
    panic!(
        "{cfg}: {property} fails ({}):\n{}",
        t.end,
        t.steps.join("\n")
    )
}

/// Checks every configuration, as many at once as there are CPUs (each check is one thread and
/// the same as alone): the results in the order given.
fn check_all(configs: &[Config]) -> Vec<(Config, Report)> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers.min(configs.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&cfg) = configs.get(i) else { break };
                let r = check(cfg);
                done.lock().unwrap().push((i, cfg, r));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _, _)| *i);
    done.into_iter().map(|(_, c, r)| (c, r)).collect()
}

/// Every configuration of the fixed client, checked once for the tests that read them.
fn fixed() -> &'static [(Config, Report)] {
    static FIXED: OnceLock<Vec<(Config, Report)>> = OnceLock::new();
    FIXED.get_or_init(|| check_all(&Config::all(Client::Fixed)))
}

/// Every configuration of the client before N lingered (`Client::ProvesUnpin`), checked once.
fn proves_unpin() -> &'static [(Config, Report)] {
    static PROVES: OnceLock<Vec<(Config, Report)>> = OnceLock::new();
    PROVES.get_or_init(|| check_all(&Config::all(Client::ProvesUnpin)))
}

/// peermem-rs as it is: the owner's deregistration leaves N to the driver, as a foreign task's
/// does, and a later registration of the owner adopts a lingering registration
/// (docs/design-lingering-n.md). Every property holds in every configuration, the MPS ones
/// included, where the client before it kept one window (below): no put_pages of N is made, so
/// none is believed; and a registration adopts only an N the driver still holds, also when the
/// memory was freed and allocated again at the same address.
#[test]
fn the_fixed_client_satisfies_every_property_in_every_configuration() {
    let mut states = 0;
    let configs = Config::all(Client::Fixed);
    assert!(
        configs.iter().any(|c| c.reuse),
        "the second registration at a reused address is checked"
    );
    assert!(
        configs.iter().any(|c| c.creator && c.dereg == Dereg::Owner),
        "put_pages searching the persistent pins (the owner created RM's object) is checked"
    );
    assert_eq!(
        configs.iter().filter(|c| !c.adopt).count(),
        Config::all(Client::ProvesUnpin).len(),
        "checked in the configurations of the client before"
    );
    assert_eq!(
        configs.iter().filter(|c| c.adopt).count(),
        6,
        "adoption: ex and legacy host, with and without MPS, and the memory allocated again"
    );
    assert!(
        configs.iter().filter(|c| c.mps).count() == 4,
        "the MPS owner leaving the P2P object is checked, ex and legacy host, with adoption too"
    );
    for (cfg, r) in fixed() {
        states += r.unique_states;
        for (property, trace) in &r.properties {
            if let Some(t) = trace {
                fails(cfg, property, t);
            }
        }
        // Not vacuous: the registration really completes in some interleaving; the range
        // registered again adopts the lingering registration and completes, in some run of every
        // adoption configuration; and with MPS, the owner's deregistration after it left leaves
        // N armed for the server's free to call back (which every property above then checks).
        assert!(
            r.registration_completes,
            "{cfg}: no registration ever completes"
        );
        assert!(r.kept_after_late_proof.is_none(), "{cfg}: no proof is made");
        assert_eq!(
            r.adoption_completes, cfg.adopt,
            "{cfg}: a registration adopting a lingering N completes"
        );
        assert_eq!(
            r.unproven_unpin_abandons_n, cfg.mps,
            "{cfg}: the deregistration of an owner that left leaves N armed"
        );
    }
    println!("{states} unique states explored");
    assert!(states > 100_000, "the model shrank: {states} states");
}

/// The owner left the server's P2P object after the proof's lookup found the memory and before
/// its put_pages of N looked N up: put_pages found nothing, N stays armed, and the registration
/// goes. nvidia.ko gives a client no way to make the two lookups one: why N now lingers.
fn leave_between_proof_and_unpin(t: &Trace) -> bool {
    let pos = |pat: &str| t.steps.iter().position(|s| s.contains(pat));
    let proof = pos("NVIDIA get_pages_persistent of the first page");
    let leave = pos("RM takes the owner's pid out of the server's P2P object");
    let unpin = pos("deregistering task (Owner): NVIDIA put_pages (API lock");
    matches!((proof, leave, unpin), (Some(p), Some(l), Some(u)) if p < l && l < u)
}

#[test]
fn the_client_that_proved_its_unpin_left_one_window_the_owner_leaving_between_the_two() {
    // The proof is made before the unpin: a free racing the deregistration calls N back (under
    // the API lock, before its memory stops being found) or finds N unpinned after a proof that
    // passed, so no registration is kept for good; and an owner gone before the proof is never
    // unpinned. What is left: the owner leaving between the two lookups. Reached only in the MPS
    // configurations, and every counterexample there is that one.
    let mut windows = 0;
    for (cfg, r) in proves_unpin() {
        assert!(r.kept_after_late_proof.is_none(), "{cfg}: kept for good");
        assert!(
            r.registration_completes,
            "{cfg}: no registration ever completes"
        );
        for (property, trace) in &r.properties {
            let Some(t) = trace else { continue };
            assert!(cfg.mps, "{cfg}: {property}");
            assert!(
                leave_between_proof_and_unpin(t),
                "{cfg}: {property} fails otherwise:\n{}",
                t.steps.join("\n")
            );
            windows += 1;
        }
    }
    assert!(
        windows > 0,
        "the window between the proof and the unpin was not reached"
    );
}

/// The fixed client with one rule of its state machine broken (`Client::breaks_a_rule`).
fn broken(client: Client, flavour: Flavour, dereg: Dereg) -> Report {
    assert!(client.breaks_a_rule());
    check(Config {
        client,
        flavour,
        legacy: false,
        dereg,
        unpin_fails: false,
        reuse: false,
        creator: false,
        mps: false,
        adopt: false,
        realloc: false,
    })
}

#[test]
fn h1_mapping_n_lets_the_driver_free_a_pin_under_dma_map_and_dma_unmap() {
    // Rule 1: no DMA mapping on a table the driver can tear down. Broken, as the client of
    // 8adc715 broke it (it mapped N).
    let r = broken(Client::MapsN, Flavour::Invalidating, Dereg::Owner);
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
fn h2_trusting_a_foreign_put_frees_a_registration_the_driver_still_calls_back() {
    // Rule 2: N is unpinned only from the owner's process. Broken: a forked child's or a
    // kworker's put_pages, which finds nothing and answers 0, taken as the unpin.
    for dereg in [Dereg::ForkedChild, Dereg::DeviceRemoval] {
        let r = broken(Client::TrustsForeignPut, Flavour::Invalidating, dereg);
        let t = r
            .counterexample("no registration is used after")
            .unwrap_or_else(|| panic!("H2 with {dereg:?}"));
        assert!(t.end.contains("RegistrationUseAfterFree"), "{}", t.end);
    }
    // From the owner's own process the state machine unpins (after its proof): no H2 there.
    let r = broken(
        Client::TrustsForeignPut,
        Flavour::Invalidating,
        Dereg::Owner,
    );
    assert!(r.all_hold());
}

#[test]
fn l1_dropping_the_reference_in_the_callback_runs_module_code_after_rmmod() {
    // Rule 4: the callback never drops the last reference. Broken: where the callback holds the
    // last one (N left to the driver by a forked child's deregistration), rmmod completes while
    // the callback is still returning through module code.
    let r = broken(
        Client::DropsRefInCallback,
        Flavour::Invalidating,
        Dereg::ForkedChild,
    );
    let t = r
        .counterexample("no module code runs after rmmod")
        .expect("L1");
    assert!(t.end.contains("ModuleCodeAfterUnload"), "{}", t.end);
}

#[test]
fn the_persistent_flavour_needs_none_of_the_three_rules() {
    // No N, no callback: the variants are the fixed client there.
    for client in [
        Client::MapsN,
        Client::TrustsForeignPut,
        Client::DropsRefInCallback,
    ] {
        for dereg in [Dereg::Owner, Dereg::ForkedChild, Dereg::DeviceRemoval] {
            assert!(
                broken(client, Flavour::Persistent, dereg).all_hold(),
                "{client:?}, {dereg:?}"
            );
        }
    }
}

/// The client without `N_PINS`, invalidating, deregistered by the owner, with or without the
/// second registration and the reuse of table addresses.
fn no_n_pins(legacy: bool, reuse: bool) -> Report {
    check(Config {
        client: Client::NoNPins,
        flavour: Flavour::Invalidating,
        legacy,
        dereg: Dereg::Owner,
        unpin_fails: false,
        reuse,
        creator: false,
        mps: false,
        adopt: false,
        realloc: false,
    })
}

#[test]
fn stale_unpin_the_client_without_n_pins_unpins_another_registrations_pin_at_a_reused_address() {
    for legacy in [false, true] {
        let r = no_n_pins(legacy, true);
        let t = r
            .counterexample("put_pages never unpins a pin its caller did not hold")
            .unwrap_or_else(|| panic!("no stale unpin (legacy: {legacy})"));
        assert!(t.end.contains("StaleUnpin"), "{}", t.end);
        assert!(t.end.contains("second registration's N"), "{}", t.end);
        // The stress run's steps, in this order: (1) the deregistration decides to unpin N and reads
        // its key; (2) the teardown calls the callback, which takes N over, and frees N's table;
        // (3) the second registration pins, its table at the freed address; (4) the deregistration's
        // put_pages, the last step, finds that pin by the address and unpins it.
        let reads_key = at(
            t,
            0,
            "deregistering task (Owner): peermem-rs put_pages: lock: read N's key",
        );
        let callback = at(
            t,
            reads_key,
            "freeing task (owner: cudaFree/exit): peermem-rs free callback: begin",
        );
        let freed = at(
            t,
            callback,
            "freeing task (owner: cudaFree/exit): NVIDIA free path: callback returned: free the table",
        );
        let pinned = at(
            t,
            freed,
            "second registration (owner, another allocation): NVIDIA get_pages: API-lock section #1",
        );
        let stale = at(
            t,
            pinned,
            "deregistering task (Owner): NVIDIA put_pages (API lock; looks the table's address up",
        );
        assert_eq!(stale, t.steps.len() - 1, "{}", t.steps.join("\n"));
        // That is all it gets wrong.
        for (property, trace) in &r.properties {
            assert!(
                property.contains("put_pages never unpins") || trace.is_none(),
                "{property} fails too (legacy: {legacy})"
            );
        }
    }
}

#[test]
fn the_one_registration_bound_could_not_see_the_stale_unpin() {
    for cfg in Config::all(Client::NoNPins) {
        if !cfg.reuse && !cfg.mps {
            assert!(check(cfg).all_hold(), "{cfg}");
        }
    }
    for legacy in [false, true] {
        assert!(no_n_pins(legacy, false).all_hold());
    }
}

/// The client that makes acquire's persistent pin without `N_PINS` (d115ce6, the parent of
/// 19a7cde), invalidating, deregistered by the owner, with the second registration; `creator`: the
/// owner created RM's internal P2P object, so its put_pages searches the persistent pins too.
fn unlocked_p(legacy: bool, creator: bool) -> Report {
    check(Config {
        client: Client::UnlockedP,
        flavour: Flavour::Invalidating,
        legacy,
        dereg: Dereg::Owner,
        unpin_fails: false,
        reuse: true,
        creator,
        mps: false,
        adopt: false,
        realloc: false,
    })
}

#[test]
fn stale_unpin_without_n_pins_around_acquires_pin_frees_the_second_registrations_persistent_pin() {
    for legacy in [false, true] {
        let r = unlocked_p(legacy, true);
        let t = r
            .counterexample("put_pages never unpins a pin its caller did not hold")
            .unwrap_or_else(|| panic!("no stale unpin of a persistent pin (legacy: {legacy})"));
        assert!(t.end.contains("StaleUnpin"), "{}", t.end);
        assert!(
            t.end.contains("second registration's persistent pin P"),
            "{}",
            t.end
        );
        // (1) the deregistration takes N_PINS, finds N still Unpinning and reads its key; (2) the
        // teardown calls the callback and frees N's table; (3) the second registration's acquire,
        // not held off by N_PINS, gets its persistent table at that address; (4) the
        // deregistration's put_pages, the last step, finds it among RM's persistent pins.
        let checks = at(
            t,
            0,
            "deregistering task (Owner): peermem-rs put_pages: take N_PINS; lock: N still Unpinning?",
        );
        let callback = at(
            t,
            checks,
            "freeing task (owner: cudaFree/exit): peermem-rs free callback: begin",
        );
        let freed = at(
            t,
            callback,
            "freeing task (owner: cudaFree/exit): NVIDIA free path: callback returned: free the table",
        );
        let pinned = at(
            t,
            freed,
            "second registration (owner, another allocation): NVIDIA get_pages_persistent",
        );
        let stale = at(
            t,
            pinned,
            "deregistering task (Owner): NVIDIA put_pages (API lock; looks the table's address up among the caller's pins, persistent ones",
        );
        assert_eq!(stale, t.steps.len() - 1, "{}", t.steps.join("\n"));
        for (property, trace) in &r.properties {
            assert!(
                property.contains("put_pages never unpins") || trace.is_none(),
                "{property} fails too (legacy: {legacy})"
            );
        }
        // When the owner did not create RM's object, its put_pages cannot find a persistent pin:
        // the same client passes.
        assert!(unlocked_p(legacy, false).all_hold(), "legacy: {legacy}");
    }
}

/// The client of b477f12 (the fixed glue before the proof: the owner's 0 from put_pages of N taken
/// as the unpin), invalidating, deregistered by the owner, an MPS owner that may leave the
/// server's P2P object.
fn trusts_unpin(legacy: bool) -> Report {
    check(Config {
        client: Client::TrustsUnpin,
        flavour: Flavour::Invalidating,
        legacy,
        dereg: Dereg::Owner,
        unpin_fails: false,
        reuse: false,
        creator: false,
        mps: true,
        adopt: false,
        realloc: false,
    })
}

#[test]
fn mps_the_client_that_trusts_the_owners_unpin_frees_a_registration_the_server_still_calls_back() {
    for legacy in [false, true] {
        let r = trusts_unpin(legacy);
        let t = r
            .counterexample("no registration is used after its last reference went")
            .unwrap_or_else(|| panic!("no use after free (legacy: {legacy})"));
        assert!(t.end.contains("RegistrationUseAfterFree"), "{}", t.end);
        // (1) the owner leaves the server's P2P object (its RM client freed); (2) its put_pages
        // of N finds nothing and answers 0, which the client takes as the unpin: it drops the
        // driver's reference, and release the host's, the last; (3) the server frees the memory
        // and the driver calls N's callback, with the registration that is gone, as data: the
        // last step.
        let left = at(
            t,
            0,
            "MPS owner's RM client freed: RM takes the owner's pid out of the server's P2P object",
        );
        let unpin = at(
            t,
            left,
            "deregistering task (Owner): NVIDIA put_pages (API lock; looks the table's address up",
        );
        let release = at(
            t,
            unpin,
            "deregistering task (Owner): peermem-rs release: drop the host's reference",
        );
        let callback = at(
            t,
            release,
            "freeing task (MPS server: frees the memory): peermem-rs free callback: begin",
        );
        assert_eq!(callback, t.steps.len() - 1, "{}", t.steps.join("\n"));
        assert!(
            !t.steps
                .iter()
                .any(|s| s.contains("get_pages_persistent of the first page")),
            "no proof"
        );
        // The callback may also return into a module rmmod freed meanwhile (no reference held it).
        assert!(
            r.counterexample("no module code runs after rmmod")
                .is_some(),
            "legacy: {legacy}"
        );
        for (property, trace) in &r.properties {
            assert!(
                property.starts_with("no registration is used after")
                    || property.starts_with("no module code runs after")
                    || trace.is_none(),
                "{property} fails too (legacy: {legacy})"
            );
        }
    }
}

#[test]
fn without_mps_the_owners_unpin_could_be_trusted() {
    // The owner's 0 unpinned N whenever the owner could not leave the P2P object: the same client
    // passes every configuration of one registration without MPS (and keeps nothing for good:
    // it makes no proof that could come too late).
    for cfg in Config::all(Client::TrustsUnpin) {
        if !cfg.reuse && !cfg.mps {
            let r = check(cfg);
            assert!(r.all_hold(), "{cfg}");
            assert!(r.kept_after_late_proof.is_none(), "{cfg}");
        }
    }
}
