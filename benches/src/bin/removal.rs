//! The largest single write of a mass removal, seen from outside: an
//! `AddrIndex` grown to `N` one-range modules (rising addresses), then all
//! but the first 1,000 removed one by one, in id order or in a random one.
//! Prints, per order: the largest remove's wall time in the first pass,
//! then, over `RUNS` passes in this process (the same removals each time),
//! each remove's least thread CPU time (descheduling on a shared machine
//! does not count, nor does a pass's one-off stall) at the median, the 99th
//! percentile and the largest, with its place in the removal. Among the
//! removes are those that compact the module table (once removed modules
//! outnumber the live ones: at a half, three quarters, … removed); in a
//! random order its tombstones alternate with live slots unpredictably,
//! the costliest case. Then batches that each remove the oldest module and
//! add a new one, at `N` modules: their median and largest least CPU time;
//! then the same for batches that remove the oldest and the newest module
//! and add two (changes at both ends of the module table in one write).
//! Last, the removes after a reader's guard, held while three quarters of
//! the `N` modules were removed, is dropped: the largest's CPU time in each
//! pass (the whole backlog the guard kept is due at once then). Uses only
//! `insert`, `remove`, `write` and `pin`, so the same file measures the
//! previous `main`.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin removal [-- N [RUNS]]
//! ```

use latchtree::AddrIndex;
use latchtree_benches::thread_cpu::thread_cpu;
use latchtree_benches::workload::SplitMix64;
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(262_144, |a| a.parse().expect("N"));
    let runs: usize = args.next().map_or(3, |a| a.parse().expect("RUNS"));
    if n <= 1000 || runs == 0 {
        eprintln!("removal: N must exceed the 1000 modules kept, and RUNS be at least 1");
        std::process::exit(2);
    }
    println!("removing all but 1000 of {n} modules one by one; {runs} passes");
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for random in [false, true] {
        let mut least: Vec<Duration> = Vec::new();
        let mut first_wall = (Duration::ZERO, 0);
        for run in 0..runs {
            let (cpu, wall) = once(n, random);
            if run == 0 {
                first_wall = wall;
                least = cpu;
            } else {
                least
                    .iter_mut()
                    .zip(cpu)
                    .for_each(|(l, c)| *l = (*l).min(c));
            }
        }
        let largest = *least.iter().max().expect("removes");
        let at = least
            .iter()
            .position(|&d| d == largest)
            .expect("the largest");
        least.sort_unstable();
        println!(
            "{:<6} order: largest remove (wall, first pass) {:>7.1} us (#{}); least CPU over the \
             passes: p50 {:>5.2} us, p99 {:>6.1} us, largest {:>7.1} us (#{at})",
            if random { "random" } else { "id" },
            us(first_wall.0),
            first_wall.1,
            us(least[least.len() / 2]),
            us(least[least.len() * 99 / 100]),
            us(largest),
        );
    }
    let (p50, largest) = replacing(n, runs, false);
    println!(
        "batches removing the oldest module and adding one, at {n}: least CPU over the passes: \
         p50 {:>6.2} us, largest {:>7.1} us",
        us(p50),
        us(largest),
    );
    let (p50, largest) = replacing(n, runs, true);
    println!(
        "batches removing the oldest and the newest module and adding two, at {n}: least CPU \
         over the passes: p50 {:>6.2} us, largest {:>7.1} us",
        us(p50),
        us(largest),
    );
    let largest: Vec<String> = (0..runs)
        .map(|_| format!("{:.1}", us(after_a_guard(n))))
        .collect();
    println!(
        "removes after a guard held through removing 3/4 of {n} is dropped: largest remove's \
         CPU time in each pass: {} us",
        largest.join(", ")
    );
    println!("{}", latchtree_benches::machine::describe());
}

/// Grows `n` modules, removes three quarters of them one by one while
/// another thread holds a guard, drops the guard, and removes 2,000 more:
/// the largest of those removes' thread CPU time.
fn after_a_guard(n: u64) -> Duration {
    let index = AddrIndex::new();
    let ids: Vec<_> = (0..n)
        .map(|i| index.insert(i * 16..i * 16 + 8, i).expect("disjoint"))
        .collect();
    let mut ids = ids.into_iter();
    let (pinned, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            let guard = index.pin();
            pinned.wait();
            release.wait();
            drop(guard);
        });
        pinned.wait();
        for id in ids.by_ref().take((n * 3 / 4) as usize) {
            drop(index.remove(id));
        }
        release.wait();
    });
    ids.take(2000)
        .map(|id| {
            let c = thread_cpu();
            drop(index.remove(id));
            thread_cpu().saturating_sub(c)
        })
        .max()
        .unwrap_or_default()
}

/// Batches that each remove the oldest module and add a new one (a loader
/// or a JIT replacing code) at `n` modules, or with `both_ends` the oldest
/// and the newest and add two (changes far apart in one batch): each
/// batch's least thread CPU time over `runs` passes, at the median and the
/// largest.
fn replacing(n: u64, runs: usize, both_ends: bool) -> (Duration, Duration) {
    const BATCHES: usize = 2000;
    let mut least = vec![Duration::MAX; BATCHES];
    for _ in 0..runs {
        let index = AddrIndex::new();
        let mut ids: std::collections::VecDeque<_> = (0..n)
            .map(|i| index.insert(i * 16..i * 16 + 8, i).expect("disjoint"))
            .collect();
        for (b, l) in least.iter_mut().enumerate() {
            let old = ids.pop_front().expect("modules");
            let newest = if both_ends { ids.pop_back() } else { None };
            let at = n + if both_ends { 2 * b as u64 } else { b as u64 };
            let c = thread_cpu();
            let (new, newer, removed) = index.write(|batch| {
                let removed = (batch.remove(old), newest.and_then(|id| batch.remove(id)));
                let new = batch.insert(at * 16..at * 16 + 8, at);
                let newer = newest.map(|_| batch.insert((at + 1) * 16..(at + 1) * 16 + 8, at + 1));
                (new, newer, removed)
            });
            *l = (*l).min(thread_cpu().saturating_sub(c));
            drop(removed);
            ids.push_back(new.expect("disjoint"));
            ids.extend(newer.map(|id| id.expect("disjoint")));
        }
    }
    let largest = *least.iter().max().expect("batches");
    least.sort_unstable();
    (least[BATCHES / 2], largest)
}

/// Each remove's thread CPU time, in removal order, and the largest wall
/// time of one, with its place.
fn once(n: u64, random: bool) -> (Vec<Duration>, (Duration, usize)) {
    let index = AddrIndex::new();
    let mut ids: Vec<_> = (0..n)
        .map(|i| index.insert(i * 16..i * 16 + 8, i).expect("disjoint"))
        .skip(1000)
        .collect();
    if random {
        let mut rng = SplitMix64(0x7265_6d6f ^ n);
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i as u64 + 1) as usize);
        }
    }
    let mut cpu = Vec::with_capacity(ids.len());
    let mut wall = (Duration::ZERO, 0);
    for id in ids {
        let (w, c) = (Instant::now(), thread_cpu());
        let removed = index.remove(id);
        cpu.push(thread_cpu().saturating_sub(c));
        if w.elapsed() > wall.0 {
            wall = (w.elapsed(), cpu.len() - 1);
        }
        drop(removed);
    }
    (cpu, wall)
}
