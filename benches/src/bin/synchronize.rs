//! How long `AddrIndex::synchronize` holds the writer lock at a time, seen
//! from outside: an index grown to `N` ranges in random order, all but one
//! range in `KEEP` removed, then `synchronize` while a watcher thread spins
//! on `stats().writes` and keeps the longest time between two counted
//! writes (an upper bound on the longest write of the call; on 2 cores the
//! watcher and the call each have one). Prints, per case and run: the whole
//! call, the writes it made, the longest gap, and the node bytes resident
//! after. Uses only API that earlier releases have too (`insert`, `remove`,
//! `synchronize`, `stats`, `node_memory`), so the same file measures the
//! previous `main`.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin synchronize [-- N [RUNS]]
//! ```

use latchtree::AddrIndex;
use latchtree_benches::workload::SplitMix64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One range in `KEEP` stays.
const KEEP: [usize; 3] = [2, 4, 100];

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(262_144, |a| a.parse().expect("N"));
    let runs: usize = args.next().map_or(3, |a| a.parse().expect("RUNS"));
    println!("synchronize after removal, {n} ranges grown in random order");
    for run in 1..=runs {
        for keep in KEEP {
            let (call, writes, longest, resident) = once(n, keep);
            println!(
                "run {run}, one in {keep:>3} kept: synchronize {:>6.2} ms in {writes:>4} writes, \
                 longest gap between writes {:>6.3} ms, {:.1} MiB of nodes resident after",
                call.as_secs_f64() * 1e3,
                longest.as_secs_f64() * 1e3,
                resident as f64 / (1 << 20) as f64,
            );
        }
    }
    println!("{}", latchtree_benches::machine::describe());
}

/// One case: `(whole call, writes, longest gap, resident node bytes)`.
fn once(n: usize, keep: usize) -> (Duration, u64, Duration, usize) {
    let mut rng = SplitMix64(0x7379_6e63 ^ n as u64);
    let index = AddrIndex::new();
    let ids: Vec<_> = (0..n)
        .map(|_| {
            let start = (rng.next_u64() >> 4) & !0xf;
            index.insert(start..start + 8, ())
        })
        .filter_map(Result::ok)
        .collect();
    for (i, id) in ids.into_iter().enumerate() {
        if i % keep != 0 {
            drop(index.remove(id));
        }
    }
    let before = index.stats().writes;
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let (mut seen, mut at, mut longest) = (before, Instant::now(), Duration::ZERO);
            while !done.load(Ordering::Acquire) {
                let now = index.stats().writes;
                if now != seen {
                    let t = Instant::now();
                    longest = longest.max(t - at);
                    (seen, at) = (now, t);
                }
            }
            longest
        });
        let t = Instant::now();
        index.synchronize();
        let call = t.elapsed();
        done.store(true, Ordering::Release);
        let longest = watcher.join().expect("watcher");
        let writes = index.stats().writes - before;
        (
            call,
            writes,
            longest,
            index.node_memory().resident_node_bytes,
        )
    })
}
