//! How long `AddrIndex::synchronize` holds the writer lock at a time, seen
//! from outside: an index grown to `N` ranges in random order, all but one
//! range in `KEEP` removed, then `synchronize` while a watcher thread does
//! empty writes (each takes the lock and changes nothing) in a loop. Prints,
//! per case and run: the whole call, the writes it made, the longest wait
//! of an empty write for its closure to run (what another writer waits for
//! the lock: the longest write of the call, or more when the call takes
//! the lock again first), the
//! longest gap between two of the call's writes (also counting the drops a
//! write does after its lock), and the node bytes resident after. On 2
//! cores the watcher and the call have one each. Uses only API that earlier
//! releases have too (`insert`, `remove`, `write`, `synchronize`, `stats`,
//! `node_memory`), so the same file measures the previous `main`.
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

/// What one case measured.
struct Case {
    call: Duration,
    writes: u64,
    wait: Duration,
    gap: Duration,
    resident: usize,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(262_144, |a| a.parse().expect("N"));
    let runs: usize = args.next().map_or(3, |a| a.parse().expect("RUNS"));
    println!("synchronize after removal, {n} ranges grown in random order");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for run in 1..=runs {
        for keep in KEEP {
            let c = once(n, keep);
            println!(
                "run {run}, one in {keep:>3} kept: synchronize {:>6.2} ms in {:>4} writes; \
                 longest wait for the lock {:>6.3} ms, longest gap between writes {:>6.3} ms; \
                 {:.1} MiB of nodes resident after",
                ms(c.call),
                c.writes,
                ms(c.wait),
                ms(c.gap),
                c.resident as f64 / (1 << 20) as f64,
            );
        }
    }
    println!("{}", latchtree_benches::machine::describe());
}

fn once(n: usize, keep: usize) -> Case {
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
            let (mut seen, mut at) = (before, Instant::now());
            let (mut wait, mut gap) = (Duration::ZERO, Duration::ZERO);
            while !done.load(Ordering::Acquire) {
                // Until its closure runs: not the drops of what the call
                // removed that the empty write may do after its lock.
                let t = Instant::now();
                let locked = index.write(|_| Instant::now());
                wait = wait.max(locked - t);
                let now = Instant::now();
                let writes = index.stats().writes;
                if writes != seen {
                    gap = gap.max(now - at);
                    (seen, at) = (writes, now);
                }
            }
            (wait, gap)
        });
        let t = Instant::now();
        index.synchronize();
        let call = t.elapsed();
        done.store(true, Ordering::Release);
        let (wait, gap) = watcher.join().expect("watcher");
        Case {
            call,
            writes: index.stats().writes - before,
            wait,
            gap,
            resident: index.node_memory().resident_node_bytes,
        }
    })
}
