// SPDX-License-Identifier: GPL-2.0

//! `protocol-model [fixed|maps-n|trusts-foreign-put|drops-ref-in-callback|no-n-pins|unlocked-p|`
//! `trusts-unpin|proves-unpin] [--traces]`: check the
//! registration protocol of peermem-rs exhaustively against the model of the real providers, one
//! configuration at a time; print the states explored and which properties hold, and with
//! `--traces` a counterexample of every property that fails, step by step. Exits 1 if any
//! property fails.
//!
//! The clients: `fixed`, peermem-rs as it is (N left to linger, adopted by a later registration
//! of the owner: docs/design-lingering-n.md); `maps-n`, `trusts-foreign-put` and
//! `drops-ref-in-callback`, the fixed client with rule 1, 2 or 4 of its state machine broken, as
//! the client of commit 8adc715 broke them;
//! `no-n-pins`, the client before 8071b8f (eb5e4f5, no `N_PINS`); `unlocked-p`, the client before
//! 19a7cde (d115ce6, no `N_PINS` around acquire's persistent pin); `trusts-unpin`, the client
//! before the proof of the owner's unpin (b477f12: the owner's 0 from put_pages of N taken as the
//! unpin), which the MPS configurations catch; `proves-unpin`, the client before N lingered
//! (0ae4785: the owner's reach proved, then N unpinned), whose one window the MPS configurations
//! catch.
//!
//! Also printed, not counted as a counterexample: where a client that proves and unpins N can keep
//! a registration for good because the memory went (or the MPS owner left) between the owner's
//! put_pages of N and its proof, with `--traces` a run that gets there.

use std::time::Instant;

use protocol_model::{check, Client, Config};

fn main() {
    let mut client = Client::Fixed;
    let mut traces = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "fixed" => client = Client::Fixed,
            "maps-n" => client = Client::MapsN,
            "trusts-foreign-put" => client = Client::TrustsForeignPut,
            "drops-ref-in-callback" => client = Client::DropsRefInCallback,
            "no-n-pins" => client = Client::NoNPins,
            "unlocked-p" => client = Client::UnlockedP,
            "trusts-unpin" => client = Client::TrustsUnpin,
            "proves-unpin" => client = Client::ProvesUnpin,
            "--traces" => traces = true,
            other => {
                eprintln!(
                    "usage: protocol-model [fixed|maps-n|trusts-foreign-put|drops-ref-in-callback|no-n-pins|unlocked-p|trusts-unpin|proves-unpin] [--traces] (not {other})"
                );
                std::process::exit(2);
            }
        }
    }
    let start = Instant::now();
    let (mut states, mut unique, mut failures, mut kept) = (0, 0, 0, 0);
    println!("{client:?} client: every interleaving of one registration, one free, one deregistration, the work item, one rmmod attempt, (reuse configurations) a second registration's pins of P and N and (MPS configurations) the owner leaving the server's P2P object");
    for cfg in Config::all(client) {
        let r = check(cfg);
        states += r.states;
        unique += r.unique_states;
        println!("\n{cfg}: {} states ({} unique)", r.states, r.unique_states);
        for (property, outcome) in &r.properties {
            match outcome {
                None => println!("  holds: {property}"),
                Some(trace) => {
                    failures += 1;
                    println!(
                        "  FAILS: {property} ({} steps: {})",
                        trace.steps.len(),
                        trace.end
                    );
                    if traces {
                        for (i, s) in trace.steps.iter().enumerate() {
                            println!("    {:3}. {s}", i + 1);
                        }
                    }
                }
            }
        }
        if let Some(trace) = &r.kept_after_late_proof {
            kept += 1;
            println!(
                "  accepted (docs/known-limits.md): {} ({} steps)",
                trace.end,
                trace.steps.len()
            );
            if traces {
                for (i, s) in trace.steps.iter().enumerate() {
                    println!("    {:3}. {s}", i + 1);
                }
            }
        }
    }
    println!(
        "\ntotal: {states} states ({unique} unique) in {:.1} s; {failures} counterexamples",
        start.elapsed().as_secs_f64()
    );
    println!(
        "kept for good after a proof too late (accepted, not counted): in {kept} configurations"
    );
    if failures > 0 {
        std::process::exit(1);
    }
}
