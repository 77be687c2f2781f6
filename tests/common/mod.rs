//! Helpers shared by the integration tests.

#![allow(dead_code)] // each test binary uses a different subset

/// A small deterministic PRNG (xorshift64*): a failing seed can be replayed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(latchtree_loom)]
/// Runs `f` under loom (`LOOM_MAX_PREEMPTIONS` from the environment, 2 if
/// unset). `f` returns how many reads retried in that execution.
///
/// loom's partial-order reduction only remembers the *last* access to each
/// atomic, so a writer's own load before its store hides an earlier reader
/// load of the same word (loom issues #166 and #392). A writer thread
/// spawned next to a reader in the model's main thread then gets explored in
/// one order only. Every model here therefore runs its writes on the main
/// thread and its reads on spawned threads (reader loads always find the
/// writer's stores), and this runner fails the model unless loom explored
/// more than one execution and at least one in which a reader retried: a
/// model that never raced proves nothing.
pub(crate) fn loom_model(f: impl Fn() -> u64 + Sync + Send + 'static) {
    run_model(loom::model::Builder::new(), f);
}

/// [`loom_model`] for a model whose executions take up to `max_branches`
/// scheduling points (loom's default is 1,000): one that rewrites many
/// atomics in one write, such as a relocation of every node.
#[cfg(latchtree_loom)]
pub(crate) fn loom_model_long(max_branches: usize, f: impl Fn() -> u64 + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.max_branches = max_branches;
    run_model(b, f);
}

/// [`loom_model`] with at most one preemption, whatever the environment
/// asks: for a model whose question needs only one (a reader stopped
/// between two reads of a node while whole writes run), and whose writes
/// are long enough that a second preemption multiplies the executions
/// without asking anything new. The recycled-node models: one preemption
/// explores 86 thousand executions in 24 s and still catches the planted
/// missing fence; two explored a million in six minutes.
#[cfg(latchtree_loom)]
pub(crate) fn loom_model_preempted_once(f: impl Fn() -> u64 + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    run_model(b, f);
}

/// Runs `f` under `b` (preemption bound 2 where neither the caller nor the
/// environment set one) and checks that some execution raced.
#[cfg(latchtree_loom)]
fn run_model(mut b: loom::model::Builder, f: impl Fn() -> u64 + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let counts = std::sync::Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let c = counts.clone();
    let started = std::time::Instant::now();
    b.check(move || {
        c[0].fetch_add(1, Relaxed);
        if f() > 0 {
            c[1].fetch_add(1, Relaxed);
        }
    });
    let (runs, retried) = (counts[0].load(Relaxed), counts[1].load(Relaxed));
    eprintln!(
        "loom: {runs} executions ({retried} with a retried read) in {:.1?}",
        started.elapsed()
    );
    assert!(
        runs > 1 && retried > 0,
        "loom explored no racing interleaving ({runs} executions, {retried} with a retry)"
    );
}

/// A `u32` key for loom models whose every read goes through loom's
/// causality checker: a reader that compares a key whose creation does not
/// happen-before the read makes loom fail the model ("Causality violation").
#[cfg(latchtree_loom)]
pub(crate) struct LoomKey(loom::cell::UnsafeCell<u32>);

// SAFETY: the cell is written only by `UnsafeCell::new`; afterwards it is
// only read, and loom checks every read against that write.
#[cfg(latchtree_loom)]
unsafe impl Sync for LoomKey {}

#[cfg(latchtree_loom)]
impl LoomKey {
    pub(crate) fn new(v: u32) -> Self {
        LoomKey(loom::cell::UnsafeCell::new(v))
    }

    pub(crate) fn get(&self) -> u32 {
        // SAFETY: never written after creation (see the `Sync` impl); loom
        // reports a read that is not ordered after the creation.
        self.0.with(|p| unsafe { *p })
    }
}

#[cfg(latchtree_loom)]
impl PartialEq for LoomKey {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}
#[cfg(latchtree_loom)]
impl Eq for LoomKey {}
#[cfg(latchtree_loom)]
impl PartialOrd for LoomKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
#[cfg(latchtree_loom)]
impl Ord for LoomKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.get().cmp(&other.get())
    }
}

/// Values alive in this test binary: made by [`Counted::new`], not yet
/// dropped (one count for the process: a binary that uses it runs one
/// `#[test]`, or its tests one at a time).
static ALIVE: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// A value that counts itself in [`alive`] until it is dropped.
pub(crate) struct Counted;

impl Counted {
    pub(crate) fn new() -> Self {
        ALIVE.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, core::sync::atomic::Ordering::SeqCst);
    }
}

/// How many [`Counted`] values are alive.
pub(crate) fn alive() -> usize {
    ALIVE.load(core::sync::atomic::Ordering::SeqCst)
}
