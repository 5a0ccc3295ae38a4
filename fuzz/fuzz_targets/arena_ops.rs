//! `cargo fuzz run arena_ops`: arbitrary operation sequences against one arena, every
//! invariant checked after every step (see `../src/driver.rs`). Every 100,000 inputs it
//! prints the running totals (inputs, operations, bad inputs, errors, refusals, moves).
#![no_main]

use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;

#[path = "../src/driver.rs"]
#[allow(dead_code)]
mod driver;

static TOTAL: Mutex<driver::Tally> = Mutex::new(driver::Tally {
    inputs: 0,
    configs_rejected: 0,
    ops: 0,
    bad_inputs: 0,
    errors: 0,
    refusals: 0,
    moves: 0,
});

fuzz_target!(|data: &[u8]| {
    let t = driver::run(data);
    if let Ok(mut total) = TOTAL.lock() {
        total.add(&t);
        if total.inputs % 100_000 == 0 {
            eprintln!("[ukv] totals: {:?}", *total);
        }
    }
});
