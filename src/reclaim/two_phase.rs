//! The crate's one two-phase counter: a phase word and, per shard, one
//! counter of holders per phase parity. Both of the crate's grace periods
//! that wait for something other than the epoch are built on it:
//!
//! * handler sections (`section.rs`): async-signal-safe readers count
//!   themselves in *racing* the flips ([`TwoPhase::enter`]), and a writer
//!   polls for the holders of the parity a flip ended;
//! * drop tickets (`ticket.rs`): writers count a batch of due drops in
//!   *under the lock that orders the flips* ([`TwoPhase::enter_locked`]),
//!   and a waiter flips twice and waits for each ended parity to empty.
//!
//! Every flip happens under one lock (the owner's writer lock), so the
//! phase has one writer at a time. A holder leaves with a `Release`
//! decrement ([`TwoPhase::exit`]); [`TwoPhase::holders`] sums a parity with
//! `Acquire` loads, so a sum of 0 happens after everything the holders it
//! counted did. What orders a holder's entry against a flip is the caller's
//! protocol: the writer lock for tickets; for sections, the `SeqCst` fence
//! pair X/Y argued in `section.rs` (Y is the fence in [`TwoPhase::enter`]).

use crate::sync::{AtomicU64, AtomicUsize, Ordering, fence};

/// One shard's two counters (one per phase parity), on their own lines.
#[repr(align(128))]
struct Shard([AtomicUsize; 2]);

impl Shard {
    crate::sync::const_fn_unless_loom! {
        fn new() -> Self {
            Shard([AtomicUsize::new(0), AtomicUsize::new(0)])
        }
    }
}

/// The phase word and the `used` flag that every racing entry reads, on
/// their own lines.
#[repr(align(128))]
struct Head {
    /// 64 bits on every target: a racing entry's re-check compares it, and
    /// a 32-bit counter could come back to the same value (ABA) under a
    /// holder stalled for 2^32 flips.
    phase: AtomicU64,
    /// Set by the first racing entry (`section.rs`: lets a flipper whose
    /// holders never came skip the rest).
    used: AtomicUsize,
}

/// See the module docs. `SHARDS` counters per parity: holders on different
/// shards count on different cache lines.
pub(crate) struct TwoPhase<const SHARDS: usize> {
    head: Head,
    shards: [Shard; SHARDS],
}

impl<const SHARDS: usize> core::fmt::Debug for TwoPhase<SHARDS> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TwoPhase")
            .field("phase", &self.head.phase.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<const SHARDS: usize> TwoPhase<SHARDS> {
    crate::sync::const_fn_unless_loom! {
        /// Phase 0, no holder.
        pub(crate) fn new() -> Self {
            TwoPhase {
                head: Head {
                    phase: AtomicU64::new(0),
                    used: AtomicUsize::new(0),
                },
                shards: {
                    #[cfg(not(latchtree_loom))]
                    {
                        [const { Shard::new() }; SHARDS]
                    }
                    #[cfg(latchtree_loom)]
                    {
                        core::array::from_fn(|_| Shard::new())
                    }
                },
            }
        }
    }

    /// Counts a holder in on `shard`, racing the flips (no lock, async-
    /// signal-safe): marks the counter used, increments the current
    /// parity's counter, `fence(SeqCst)` (Y in `section.rs`'s argument),
    /// and re-reads the phase: if a flip came in between, undoes and
    /// retries, so that a holder is always counted under a phase that was
    /// current after its increment. Returns the counter to leave with
    /// ([`TwoPhase::exit`]). Each retry, only if a flip landed in between,
    /// adds two RMWs, a fence and two loads.
    #[inline]
    pub(crate) fn enter(&self, shard: usize) -> &AtomicUsize {
        // Relaxed: ordered before the flipper's check by the fence below.
        if self.head.used.load(Ordering::Relaxed) == 0 {
            self.head.used.store(1, Ordering::Relaxed);
        }
        let shard = &self.shards[shard];
        loop {
            // Relaxed: re-checked after the fence.
            let p = self.head.phase.load(Ordering::Relaxed);
            let count = &shard.0[parity(p)];
            // Relaxed: ordered by the fence below.
            count.fetch_add(1, Ordering::Relaxed);
            // SeqCst: Y in `section.rs`'s argument; pairs with the
            // flipper's fences (X).
            fence(Ordering::SeqCst);
            // Relaxed: after Y (`section.rs`).
            if self.head.phase.load(Ordering::Relaxed) == p {
                return count;
            }
            // Release: as in `exit` (nothing was read under this count).
            count.fetch_sub(1, Ordering::Release);
            crate::sync::retry_hint();
        }
    }

    /// Counts a holder in on shard 0, from under the lock that orders the
    /// flips (the phase cannot move meanwhile); returns its parity, to
    /// leave with ([`TwoPhase::exit_parity`]).
    pub(crate) fn enter_locked(&self) -> usize {
        let parity = self.parity();
        // Relaxed: the lock orders it before every later flip, and a waiter
        // reads the counter after such a flip (`ticket.rs`).
        self.shards[0].0[parity].fetch_add(1, Ordering::Relaxed);
        parity
    }

    /// Leaves: `count` came from [`enter`](TwoPhase::enter).
    #[inline]
    pub(crate) fn exit(count: &AtomicUsize) {
        // Release: pairs with the Acquire loads in `holders`: everything
        // the holder did happens before a sum of 0 that counted it.
        count.fetch_sub(1, Ordering::Release);
    }

    /// Leaves a parity entered with [`enter_locked`](TwoPhase::enter_locked).
    pub(crate) fn exit_parity(&self, parity: usize) {
        Self::exit(&self.shards[0].0[parity]);
    }

    /// The parity new holders take (the flippers' own read: under their
    /// lock).
    pub(crate) fn parity(&self) -> usize {
        // Relaxed: the phase is written only under the flippers' lock,
        // which the caller holds.
        parity(self.head.phase.load(Ordering::Relaxed))
    }

    /// Under the flippers' lock: new holders take the other parity from
    /// now on; returns the parity that ended. The store is `Relaxed`: what
    /// orders it against entries is the caller's protocol (module docs).
    pub(crate) fn flip(&self) -> usize {
        // Relaxed: written only under the flippers' lock (see `parity`).
        let phase = self.head.phase.load(Ordering::Relaxed);
        // Relaxed: see above.
        self.head
            .phase
            .store(phase.wrapping_add(1), Ordering::Relaxed);
        parity(phase)
    }

    /// How many holders are counted under `parity`, summed over the shards.
    pub(crate) fn holders(&self, parity: usize) -> usize {
        self.shards
            .iter()
            // Acquire: pairs with the Release decrement in `exit`: a sum of
            // 0 read here happens after everything the holders that left
            // did (their frees come after). The Acquire load, not a fence,
            // is also what ThreadSanitizer (which ignores fences) sees.
            .map(|s| s.0[parity].load(Ordering::Acquire))
            .fold(0, usize::wrapping_add)
    }

    /// Whether a racing entry ever came ([`enter`](TwoPhase::enter)).
    pub(crate) fn used(&self) -> bool {
        // Relaxed: the caller's protocol orders it (`section.rs`, `used`).
        self.head.used.load(Ordering::Relaxed) != 0
    }
}

/// The counter a phase's holders use.
fn parity(phase: u64) -> usize {
    (phase & 1) as usize
}
