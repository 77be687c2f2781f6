//! Iterators under concurrent writes: the `SkipMap`-style guarantee.
//!
//! While a writer churns keys outside a stable set (inserts, removes,
//! batches) and replaces stable keys' entries (a new node under the same
//! key: the key stays present), iterating readers must yield every stable
//! key, in strictly increasing order from the front (decreasing from the
//! back), never a key twice, the ends never crossing, and only keys that
//! exist. Sizes shrink under Miri (run with `-Zmiri-tree-borrows`).

use latchtree::LatchTree;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::thread;

mod common;
use common::Rng;

/// Stable keys are multiples of 4; churned keys are the others.
fn is_stable(k: u64) -> bool {
    k.is_multiple_of(4)
}

struct Cfg {
    stable: u64,
    readers: usize,
    rounds: u64,
}

fn cfg() -> Cfg {
    if cfg!(miri) {
        Cfg {
            stable: 12,
            readers: 2,
            rounds: 6,
        }
    } else {
        Cfg {
            stable: 400,
            readers: 2,
            rounds: 3000,
        }
    }
}

/// Checks one walk: `keys` as yielded (in the direction's order), the
/// stable keys in `[lo, hi)` must all be there.
fn check_walk(keys: &[u64], increasing: bool, lo: u64, hi: u64, stable: u64) {
    for w in keys.windows(2) {
        assert!(
            if increasing { w[0] < w[1] } else { w[0] > w[1] },
            "not strictly monotone (or a duplicate): {} then {}",
            w[0],
            w[1]
        );
    }
    assert!(
        keys.iter().all(|&k| (lo..hi).contains(&k)),
        "a key outside the range"
    );
    let stable_seen = keys.iter().filter(|&&k| is_stable(k)).count() as u64;
    let stable_in_range = (lo..hi.min(stable * 4)).filter(|&k| is_stable(k)).count() as u64;
    assert_eq!(stable_seen, stable_in_range, "a stable key was skipped");
}

fn churn(tree: &LatchTree<u64, u64>, stable: u64, done: &AtomicBool) {
    let mut rng = Rng::new(7);
    let mut n = 0u64;
    while !done.load(Relaxed) {
        let k = rng.below(stable * 4 + 8);
        match rng.below(10) {
            0..=3 if !is_stable(k) => {
                tree.insert(k, n);
            }
            4..=6 if !is_stable(k) => {
                tree.remove(&k);
            }
            7 => {
                // A batch that moves churned keys around and replaces a
                // stable entry.
                tree.write(|b| {
                    for j in 0..4 {
                        let c = (k + j) | 1;
                        if b.contains_key(&c) {
                            b.remove(&c);
                        } else {
                            b.insert(c, n);
                        }
                    }
                    b.insert((k & !3) % (stable * 4), n);
                });
            }
            8 if is_stable(k) && k < stable * 4 => {
                // Replace: a new node under a key that stays present.
                assert!(!tree.insert(k, n));
            }
            _ => {}
        }
        n += 1;
        if cfg!(miri) {
            thread::yield_now();
        }
    }
}

/// Sets the flag when dropped (also while unwinding).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Relaxed);
    }
}

#[test]
fn iterators_yield_every_stable_key_once_in_order_under_churn() {
    let c = cfg();
    let tree = LatchTree::new();
    for k in 0..c.stable {
        tree.insert(k * 4, k);
    }
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let readers: Vec<_> = (0..c.readers)
            .map(|r| {
                let (tree, c) = (&tree, &c);
                s.spawn(move || {
                    let mut rng = Rng::new(100 + r as u64);
                    for round in 0..c.rounds {
                        let guard = latchtree::pin();
                        let top = c.stable * 4 + 8;
                        match round % 4 {
                            0 => {
                                let keys: Vec<u64> = tree.keys(&guard).copied().collect();
                                check_walk(&keys, true, 0, u64::MAX, c.stable);
                            }
                            1 => {
                                let keys: Vec<u64> = tree.keys(&guard).rev().copied().collect();
                                check_walk(&keys, false, 0, u64::MAX, c.stable);
                            }
                            2 => {
                                let lo = rng.below(top);
                                let hi = lo + rng.below(top);
                                let forward = rng.chance(50);
                                let range =
                                    tree.range((Bound::Included(lo), Bound::Excluded(hi)), &guard);
                                let keys: Vec<u64> = if forward {
                                    range.map(|(k, _)| *k).collect()
                                } else {
                                    range.rev().map(|(k, _)| *k).collect()
                                };
                                check_walk(&keys, forward, lo, hi, c.stable);
                            }
                            _ => {
                                // Both ends at random: front keys increase,
                                // back keys decrease, they never cross.
                                let mut it = tree.iter(&guard);
                                let (mut front, mut back) = (Vec::new(), Vec::new());
                                loop {
                                    let item = if rng.chance(50) {
                                        it.next().map(|(k, _)| front.push(*k))
                                    } else {
                                        it.next_back().map(|(k, _)| back.push(*k))
                                    };
                                    if item.is_none() {
                                        break;
                                    }
                                }
                                if let (Some(f), Some(b)) = (front.last(), back.last()) {
                                    assert!(f < b, "the ends crossed: {f} >= {b}");
                                }
                                back.reverse();
                                front.extend(back);
                                check_walk(&front, true, 0, u64::MAX, c.stable);
                            }
                        }
                    }
                })
            })
            .collect();
        let writer = s.spawn(|| churn(&tree, c.stable, &done));
        // Stops the writer even when a reader's assertion fails.
        let stop = StopOnDrop(&done);
        for r in readers {
            r.join().unwrap();
        }
        drop(stop);
        writer.join().unwrap();
    });
    tree.check_invariants().unwrap();
    eprintln!("stats after the churn: {:?}", tree.stats());
}

/// The documented semantics, deterministically: an iterator whose version
/// changed under it goes on from the last key it yielded, in the current
/// version.
#[test]
fn an_iterator_continues_after_its_last_key_in_the_current_version() {
    let tree: LatchTree<u32, char> = [(1, 'a'), (2, 'b'), (4, 'd'), (5, 'e')]
        .into_iter()
        .collect();
    let guard = latchtree::pin();
    let mut it = tree.iter(&guard);
    assert_eq!(it.next(), Some((&1, &'a')));
    tree.insert(3, 'c'); // ahead of the front: yielded
    tree.insert(0, '0'); // behind the front: never yielded
    tree.remove(&2); // the next key: gone, so skipped
    assert!(!tree.insert(4, 'D')); // replaced: the new entry is yielded
    let mut back = tree.range(..=5, &guard);
    assert_eq!(back.next_back(), Some((&5, &'e')));
    tree.remove(&5); // already yielded by `back`: not again
    assert_eq!(it.collect::<Vec<_>>(), [(&3, &'c'), (&4, &'D')]);
    assert_eq!(back.next_back(), Some((&4, &'D')));
    assert_eq!(back.next(), Some((&0, &'0')));
    assert_eq!(back.collect::<Vec<_>>(), [(&1, &'a'), (&3, &'c')]);
}

/// An iterator standing on entries that are removed (and, once no guard
/// can see them, freed) keeps working: the guard keeps them alive.
#[test]
fn an_iterator_survives_clear_and_rebuild_under_it() {
    let tree: LatchTree<u64, String> = (0..64).map(|k| (k, k.to_string())).collect();
    let guard = latchtree::pin();
    let mut it = tree.iter(&guard);
    let mut rev = tree.iter(&guard);
    assert_eq!(it.next().map(|(k, _)| *k), Some(0));
    assert_eq!(rev.next_back().map(|(k, _)| *k), Some(63));
    tree.clear();
    for _ in 0..8 {
        latchtree::pin().flush();
    }
    assert_eq!(it.next(), None);
    (&tree).extend((10..20).map(|k| (k, k.to_string())));
    assert_eq!(it.next(), None, "fused");
    assert_eq!(rev.next_back().map(|(k, _)| *k), Some(19));
}
