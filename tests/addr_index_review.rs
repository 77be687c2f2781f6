//! Regression tests for the two findings of the independent review of the
//! address index (issue 9), named after the bugs. Both failed before the
//! index kept its module records in its own per-copy table under the range
//! tree's latch, and before rejected values were handed back.

#![cfg(not(miri))]

use latchtree::{AddrIndex, AddrIndexError, ModuleId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::thread;
use std::time::{Duration, Instant};

/// How long each race runs (longer in release builds, where the loops are
/// much faster and the window of the old bug much narrower).
fn race_time() -> Duration {
    Duration::from_millis(if cfg!(debug_assertions) { 700 } else { 400 })
}

/// Bug: `remove` took a module's ranges out in one write and its record in a
/// second one, so a reader that saw `lookup` miss a removed module's range
/// could still `get(id)` it (3.4 M times in 51 M probes).
#[test]
fn get_never_finds_a_module_whose_ranges_lookup_saw_removed() {
    let index: AddrIndex<u64> = AddrIndex::new();
    let r = 0x1000..0x2000;
    let last = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (mut probes, mut mixed) = (0u64, 0u64);
    thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            let mut k = 0;
            while start.elapsed() < race_time() {
                let id = index.insert(r.clone(), k).unwrap();
                // Release: a reader that loads `id` knows its insert returned.
                last.store(id.get(), Release);
                assert!(index.remove(id).is_some());
                k += 1;
            }
            stop.store(true, Release);
        });
        while !stop.load(Acquire) {
            let id = ModuleId::from_raw(last.load(Acquire));
            if id.get() == 0 {
                continue;
            }
            // `id` was inserted before this load; if `lookup` does not see
            // it now, it was removed before now, so its record is gone too.
            let guard = index.pin();
            if index.lookup(0x1800).map(|h| h.id()) != Some(id) {
                probes += 1;
                if index.get(id, &guard).is_some() || index.module(id, &guard).is_some() {
                    mixed += 1;
                }
            }
        }
    });
    println!("{probes} probes after a miss, {mixed} found the record");
    assert!(probes > 1000, "only {probes} probes");
    assert_eq!(mixed, 0, "a removed module's record outlived its ranges");
}

/// Bug: the record went into the module table before the ranges were
/// published, so `module_count()` could count a module whose ranges no
/// reader could find yet (`module_count() > len()` was observable).
#[test]
fn module_count_never_counts_a_module_whose_ranges_are_not_visible() {
    let index: AddrIndex<u64> = AddrIndex::new();
    let n = if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    let stop = AtomicBool::new(false);
    let (mut probes, mut mixed) = (0u64, 0u64);
    thread::scope(|s| {
        s.spawn(|| {
            // Module `i` (ids from 1) owns `i * 16 .. i * 16 + 8`, one range.
            for i in 1..=n {
                let id = index.insert(i * 16..i * 16 + 8, i).unwrap();
                assert_eq!(id.get(), i);
            }
            stop.store(true, Release);
        });
        while !stop.load(Acquire) {
            let count = index.module_count() as u64;
            let ranges = index.range_count() as u64;
            if count == 0 {
                continue;
            }
            probes += 1;
            // `count` modules counted: modules 1..=count are registered,
            // ranges and all, and stay so; a later read sees at least them.
            let seen = index.lookup(count * 16).map(|h| h.id().get());
            if seen != Some(count) || ranges < count {
                mixed += 1;
            }
        }
    });
    println!("{probes} probes, {mixed} mixed");
    assert!(probes > 1000, "only {probes} probes");
    assert_eq!(
        mixed, 0,
        "module_count counted a module whose ranges were not visible"
    );
}

/// A module value whose `Drop` unregisters a companion module of the same
/// index.
struct Companion(&'static AddrIndex<Companion>, Option<ModuleId>);

impl Drop for Companion {
    fn drop(&mut self) {
        if let Some(id) = self.1 {
            assert!(
                self.0.remove(id).is_some(),
                "companion {id} was not registered"
            );
        }
    }
}

/// Bug: a rejected insert (an `Overlap`, found under the writer lock)
/// dropped the caller's value there, so a value whose `Drop` writes to the
/// same index hit the re-entrancy assert (a panic instead of
/// `Err(Overlap)`), and its write was lost. Now the value comes back.
#[test]
fn rejected_insert_hands_the_value_back_instead_of_dropping_it_under_the_lock() {
    static INDEX: AddrIndex<Companion> = AddrIndex::new();
    let taken = INDEX
        .insert(0x1000..0x2000, Companion(&INDEX, None))
        .unwrap();
    let companion = INDEX
        .insert(0x9000..0x9100, Companion(&INDEX, None))
        .unwrap();
    let err = INDEX
        .insert(0x1800..0x1900, Companion(&INDEX, Some(companion)))
        .unwrap_err();
    assert_eq!(
        *err.error(),
        AddrIndexError::Overlap {
            range: 0x1800..0x1900,
            existing: 0x1000..0x2000,
            module: taken
        }
    );
    let value = err.into_value();
    assert_eq!(value.1, Some(companion), "the very value comes back");
    assert_eq!(INDEX.module_count(), 2, "nothing dropped yet");
    // Dropping it here, outside the lock, makes its write.
    drop(value);
    assert!(
        INDEX.lookup(0x9050).is_none(),
        "the value's Drop took effect"
    );
    assert_eq!(INDEX.module_count(), 1);
    // The same inside a batch: the error comes back to the closure, which
    // keeps the value until after the batch.
    let companion = INDEX
        .insert(0x9000..0x9100, Companion(&INDEX, None))
        .unwrap();
    let kept = INDEX.write(|b| {
        let e = b
            .insert(0x1000..0x1001, Companion(&INDEX, Some(companion)))
            .unwrap_err();
        assert!(matches!(e.error(), AddrIndexError::Overlap { .. }));
        e.into_value()
    });
    drop(kept);
    assert!(INDEX.lookup(0x9050).is_none());
    INDEX.check_invariants().unwrap();
}
