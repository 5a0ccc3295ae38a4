//! Replays the fuzz driver (`fuzz/src/driver.rs`, shared with `cargo fuzz run arena_ops`)
//! under a plain `cargo test`: every committed seed and crash regression input, then a
//! seeded random stream. `UKV_FUZZ_INPUTS=N` sets the stream's length (default 3000).
//! Also pins the configuration-size panics the audit found.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../fuzz/src/driver.rs"]
#[allow(dead_code)]
mod driver;

use std::path::PathBuf;

use ukv_core::{Arena, ArenaConfig, Direction, PoolSpec, UkvError};

fn fuzz_dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz")
        .join(sub)
}

fn replay_dir(sub: &str) -> (usize, driver::Tally) {
    let dir = fuzz_dir(sub);
    let mut tally = driver::Tally::default();
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => return (0, tally),
    };
    files.sort();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let name = f.display().to_string();
        let t = std::panic::catch_unwind(|| driver::run(&data))
            .unwrap_or_else(|_| panic!("fuzz input {name} fails"));
        tally.add(&t);
    }
    (files.len(), tally)
}

#[test]
fn committed_regressions_pass() {
    let (n, t) = replay_dir("regressions/arena_ops");
    eprintln!("regressions: {n} inputs, {t:?}");
}

#[test]
fn committed_seed_corpus_passes() {
    let (n, t) = replay_dir("seeds/arena_ops");
    eprintln!("seed corpus: {n} inputs, {t:?}");
}

#[test]
fn seeded_random_stream() {
    let inputs: u64 = std::env::var("UKV_FUZZ_INPUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    // UKV_FUZZ_SKIP=k starts at input k; UKV_FUZZ_PROGRESS=1 names each input before it
    // runs (an abort, unlike a panic, cannot be caught and named afterwards).
    let skip: u64 = std::env::var("UKV_FUZZ_SKIP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let progress = std::env::var_os("UKV_FUZZ_PROGRESS").is_some();
    let mut rng = driver::SplitMix(0x0075_6b76_f022);
    let mut tally = driver::Tally::default();
    let start = std::time::Instant::now();
    for k in 0..inputs {
        let len = 8 + (rng.next_u64() % 1500) as usize;
        let data = rng.bytes(len);
        if k < skip {
            continue;
        }
        if progress {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            eprintln!("input #{k}: {hex}");
        }
        let t = std::panic::catch_unwind(|| driver::run(&data)).unwrap_or_else(|_| {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            panic!("random input #{k} fails; bytes: {hex}")
        });
        tally.add(&t);
    }
    eprintln!(
        "random stream: {inputs} inputs in {:.1} s, {tally:?}",
        start.elapsed().as_secs_f64()
    );
    assert!(tally.ops > inputs - skip, "the stream ran no operations");
}

/// `UKV_FUZZ_FILE=path` (raw bytes) or `UKV_FUZZ_HEX=...`: replay one input, e.g. a
/// fresh crash from `fuzz/artifacts/`, with `UKV_FUZZ_TRACE=1` to print every operation.
#[test]
fn replay_one_from_env() {
    let data = if let Some(path) = std::env::var_os("UKV_FUZZ_FILE") {
        std::fs::read(path).unwrap()
    } else if let Ok(hex) = std::env::var("UKV_FUZZ_HEX") {
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    } else {
        return;
    };
    eprintln!("{:?}", driver::run(&data));
}

fn two_pools(total: u64, entry: u64, ps: u64) -> ArenaConfig {
    let spec = |name: &str, direction| PoolSpec {
        name: name.into(),
        entry_bytes: entry,
        page_size: ps,
        direction,
        id_owner: None,
    };
    ArenaConfig::new(
        total,
        vec![spec("a", Direction::Up), spec("b", Direction::Down)],
    )
}

/// Found by the audit: tables too large for the host aborted the process ("memory
/// allocation failed") or panicked ("capacity overflow"); both are config errors now.
#[test]
fn huge_tables_are_a_config_error() {
    for (total, entry) in [(1u64 << 56, 16u64), (1 << 61, 1), (u64::MAX / 4, 1)] {
        match Arena::new(two_pools(total, entry, 1)) {
            Err(UkvError::Config { field, .. }) => assert_eq!(field, "total_bytes"),
            other => panic!("total {total} entry {entry}: {other:?}"),
        }
    }
}

/// Found by the seeded stream (input #750250, 160 GiB allocation abort): a page size of
/// 2^32 was accepted and `alloc` of 5 pages listed 5 * 2^32 token ids. Page sizes above
/// 2^16, and pools whose token ids would not fit i64, are config errors now.
#[test]
fn absurd_page_sizes_are_config_errors() {
    for (total, entry, ps) in [
        (1u64 << 40, 1u64, 1u64 << 32),
        (u64::MAX, 1, i64::MAX as u64),
        (1 << 20, 1, (1 << 16) + 1),
    ] {
        match Arena::new(two_pools(total, entry, ps)) {
            Err(UkvError::Config { .. }) => {}
            other => panic!("total {total} entry {entry} page_size {ps}: {other:?}"),
        }
    }
    let mut a = Arena::new(two_pools(1 << 20, 1, 1 << 16)).unwrap();
    assert!(a.alloc(0, 3).unwrap());
    assert_eq!(a.plan().tokens.len(), 3 << 16);
    a.check_invariants().unwrap();
}

/// Size arithmetic near the top of u64: page bytes overflow, a buffer of u64::MAX bytes.
#[test]
fn extreme_sizes_do_not_panic() {
    assert!(Arena::new(two_pools(u64::MAX, 1 << 40, 1 << 30)).is_err());
    assert!(Arena::new(two_pools(u64::MAX, u64::MAX, 1)).is_err());
    let mut a = Arena::new(two_pools(u64::MAX, 1 << 60, 1)).unwrap();
    assert!(a.alloc(0, 4).unwrap());
    assert!(a.alloc(1, 4).unwrap());
    assert!(!a.alloc(0, usize::MAX).unwrap());
    assert!(!a.alloc_tokens(1, i64::MAX).unwrap());
    a.check_invariants().unwrap();
    let ids = a.plan().tokens.clone();
    assert!(ids.is_empty());
    a.free(0, &[1, 2]).unwrap_or_else(|e| panic!("{e}"));
    a.check_invariants().unwrap();
}
