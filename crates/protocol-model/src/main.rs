// SPDX-License-Identifier: GPL-2.0

//! `protocol-model [fixed|before|no-n-pins|unlocked-p] [--traces]`: check the registration
//! protocol of peermem-rs exhaustively against the model of the real providers, one configuration
//! at a time; print the states explored and which properties hold, and with `--traces` a
//! counterexample of every property that fails, step by step. Exits 1 if any property fails.

use std::time::Instant;

use protocol_model::{check, Client, Config};

fn main() {
    let mut client = Client::Fixed;
    let mut traces = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "fixed" => client = Client::Fixed,
            "before" => client = Client::Before,
            "no-n-pins" => client = Client::NoNPins,
            "unlocked-p" => client = Client::UnlockedP,
            "--traces" => traces = true,
            other => {
                eprintln!(
                    "usage: protocol-model [fixed|before|no-n-pins|unlocked-p] [--traces] (not {other})"
                );
                std::process::exit(2);
            }
        }
    }
    let start = Instant::now();
    let (mut states, mut unique, mut failures) = (0, 0, 0);
    println!("{client:?} client: every interleaving of one registration, one free, one deregistration, the work item, one rmmod attempt and (reuse configurations) a second registration's pins of P and N");
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
    }
    println!(
        "\ntotal: {states} states ({unique} unique) in {:.1} s; {failures} counterexamples",
        start.elapsed().as_secs_f64()
    );
    if failures > 0 {
        std::process::exit(1);
    }
}
