//! Readers racing the purge of emptied node chunks: lookups of ranges that
//! stay registered, and of addresses never registered, always answer right
//! while a writer grows the index by tens of thousands of ranges and
//! empties it again, over and over, giving the emptied chunks' pages back
//! to the OS (`madvise`) both in its writes and in `synchronize`. A reader
//! standing on a purged node reads old words or zeros, never faults, and
//! retries. Also run under ThreadSanitizer (`.ci/run`); not under Miri,
//! where nothing is purged (no `madvise`).

#![cfg(not(miri))]

use latchtree::AddrIndex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::thread;

/// Stable ranges: every 1 MiB, below the churned ones.
const STABLE: u64 = 64;
const CHURN_BASE: u64 = 1 << 40;

fn stable(k: u64) -> std::ops::Range<u64> {
    k << 20..(k << 20) + 0x100
}

#[test]
fn readers_never_err_while_emptied_chunks_are_purged() {
    // Sized for ThreadSanitizer too (`.ci/run`), which runs it in release.
    let (rounds, churn) = if cfg!(debug_assertions) {
        (4, 12_000)
    } else {
        (6, 20_000)
    };
    let index: AddrIndex<u64> = AddrIndex::new();
    let ids: Vec<_> = (0..STABLE)
        .map(|k| index.insert(stable(k), k).unwrap())
        .collect();
    let done = AtomicBool::new(false);
    let lookups = AtomicU64::new(0);
    let purged = thread::scope(|s| {
        for r in 0..2u64 {
            let (index, done, lookups, ids) = (&index, &done, &lookups, &ids);
            s.spawn(move || {
                let mut n = 0;
                let mut x = r + 1;
                while !done.load(Relaxed) {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let k = (x >> 33) % STABLE;
                    let addr = (k << 20) + (x >> 20) % 0x100;
                    let hit = index.lookup(addr).expect("a stable range was missed");
                    assert_eq!((hit.id(), hit.range()), (ids[k as usize], stable(k)));
                    // Between two stable ranges: never registered.
                    assert!(
                        index.lookup((k << 20) + 0x8_0000).is_none(),
                        "a phantom hit"
                    );
                    n += 1;
                }
                lookups.fetch_add(n, Relaxed);
            });
        }
        let mut purged = 0;
        for round in 0..rounds {
            let base = CHURN_BASE + round * (churn << 5);
            // Single inserts (migrations move the tree; the old trees'
            // chunks empty), then removal in batches.
            let churned: Vec<_> = (0..churn)
                .map(|i| index.insert(base + i * 16..base + i * 16 + 8, i).unwrap())
                .collect();
            let grown = index.node_memory();
            for batch in churned.chunks(997) {
                index.write(|b| batch.iter().for_each(|&id| drop(b.remove(id).unwrap())));
            }
            index.synchronize();
            let after = index.node_memory();
            purged += grown
                .resident_node_bytes
                .saturating_sub(after.resident_node_bytes);
        }
        done.store(true, Relaxed);
        purged
    });
    index.check_invariants().unwrap();
    let lookups = lookups.load(Relaxed);
    eprintln!(
        "{lookups} lookups, {} read retries, {} MiB of node pages given back",
        index.stats().read_retries,
        purged >> 20
    );
    assert!(lookups > 0);
    #[cfg(all(feature = "std", target_os = "linux"))]
    assert!(purged > 0, "no chunk was purged: the test did not test");
}
