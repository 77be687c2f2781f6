//! Handler read sections: a grace period that async-signal-safe readers can
//! take part in (no thread-local, no allocation, no lock, bounded).
//!
//! An `AddrIndex::lookup` pins nothing, so it can only copy
//! words out of the type-stable range nodes. A signal handler that must read
//! a module's *value* in place (a trap table, an unwinder) opens a section
//! first ([`Sections::enter`]): it counts itself into one of two counters of
//! a shard picked by its stack address, and the writer does not free a
//! removed record before every section that was open when it was unlinked
//! has closed.
//!
//! # The protocol (an SRCU with a poll instead of a wait)
//!
//! The counters are the crate's one two-phase counter (`two_phase.rs`,
//! sharded 16 ways); the protocol is this file's.
//!
//! *Reader* ([`Sections::enter`], through `TwoPhase::enter`): `p = phase`,
//! `count[p & 1] += 1`, then `fence(SeqCst)` (Y), then re-read `phase`: if
//! it moved, undo and retry, so an open section is always counted under a
//! phase that was current after its increment. Then the lookups (the
//! latch's usual `Acquire` reads). Closing is one `Release` decrement.
//!
//! *Writer* ([`SectionClock::poll`], under the writer lock, at the start of
//! period `f`, when everything retired in periods `< f` already left every
//! copy): `fence(SeqCst)` (X); if a drain is running and the counters of
//! the previous phase sum to 0, it is complete. If none is running, flip
//! `phase`, `fence(SeqCst)` again, and start one, checking it at once (with
//! no handler open, a drain completes in the same poll). A drain started at
//! period `f` completes ⇒ every section open at its flip has closed ⇒
//! periods `< f` are past their grace period for sections.
//!
//! Why a section never sees a record after the drain that covers it (C++20
//! [atomics.order] p4.4, two `SeqCst` fences): X and Y are in the single
//! order S. If X precedes Y, the section's loads after Y see the writer's
//! stores before X, among them the `seq` flips that unlinked the record:
//! it reads a version without it. If Y precedes X, the writer's loads after
//! X see the section's increment (and `used`) before Y: the drain waits
//! for it to close. The same pair of fences orders the phase flip against
//! the re-check: a section whose re-check misses the new phase is seen by
//! the drain started with it. A section counted under a stale phase after
//! that counter's drain completed fails its re-check and moves to the
//! current phase, which is why one drain per grace period is enough.
//!
//! `used` keeps writers of an index whose handlers never open a section
//! from paying for any of this: a reader sets it before its increment the
//! first time; a writer that reads it as 0 after X knows, by the same
//! argument, that no section can see what it unlinked.
//!
//! Only fences carry the argument: loom models `SeqCst` fences but not
//! `SeqCst` loads and stores (tokio-rs/loom#180), so the model in
//! `tests/loom_addr_index.rs` checks exactly this code and the counter's.

// `pub` only for the loom model's re-export (`crate::loom_section`).
#![cfg_attr(not(latchtree_loom), allow(unreachable_pub))]

use super::two_phase::TwoPhase;
use crate::sync::{AtomicUsize, Ordering, fence};

/// Shards of counters: sections on different threads (stacks) mostly
/// count on different cache lines.
const SHARDS: usize = 16;

/// See the module docs.
pub struct Sections(TwoPhase<SHARDS>);

impl core::fmt::Debug for Sections {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("Sections").field(&self.0).finish()
    }
}

/// The shard for a section opened with its frame at stack address `sp`:
/// threads' stacks (and alternate signal stacks) lie megabytes apart.
fn shard_of(sp: usize) -> usize {
    let h = (sp >> 16).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize);
    h >> (usize::BITS - SHARDS.trailing_zeros())
}

impl Sections {
    crate::sync::const_fn_unless_loom! {
        /// No section open.
        pub fn new() -> Self {
            Sections(TwoPhase::new())
        }
    }

    /// Opens a section; returns the counter to close it with
    /// ([`Sections::exit`]). Async-signal-safe: an atomic RMW, a fence and
    /// three loads (and, the first time on this index, a store to `used`);
    /// each retry, only if a writer flipped the phase in between (at most
    /// once per concurrent write; never when interrupting the writer), adds
    /// two RMWs, a fence and two loads.
    #[inline]
    pub fn enter(&self) -> &AtomicUsize {
        let marker = 0u8;
        // Under loom one shard: a stack address differs between explored
        // executions, and a model must be deterministic.
        let sp = if cfg!(latchtree_loom) {
            0
        } else {
            core::ptr::addr_of!(marker).addr()
        };
        // `used`, then the count, fence Y and the re-check (module docs).
        self.0.enter(shard_of(sp))
    }

    /// Closes a section opened by [`enter`](Sections::enter).
    #[inline]
    pub fn exit(count: &AtomicUsize) {
        // Release (in `TwoPhase::exit`): pairs with the writer's Acquire
        // loads of the counters (`TwoPhase::holders`): every read of the
        // section happens before the free.
        TwoPhase::<SHARDS>::exit(count);
    }
}

/// The writer's side of [`Sections`] (under the writer lock).
#[derive(Debug, Default)]
pub struct SectionClock {
    /// The period at whose start the running drain flipped the phase.
    draining: Option<u64>,
    /// Every period up to this one is past its grace period for sections.
    passed: u64,
}

impl SectionClock {
    /// No drain running, nothing known past.
    pub const fn new() -> Self {
        SectionClock {
            draining: None,
            passed: 0,
        }
    }

    /// At the start of period `period` (everything retired in earlier
    /// periods left every copy readers can reach): advances the grace
    /// period if it can, never waiting; returns the latest period no open
    /// section can still see the retirements of. Only polls when `waiting`
    /// (items retired after what is known to be past wait).
    pub fn poll(&mut self, s: &Sections, period: u64, waiting: bool) -> u64 {
        let before = period - 1;
        if !waiting || self.passed >= before {
            return self.passed;
        }
        // SeqCst: X in the module docs' argument; after the unlinking
        // flips of every earlier period (their locks were released before
        // this one was taken).
        fence(Ordering::SeqCst);
        // After X (module docs, `used`).
        if !s.0.used() && self.draining.is_none() {
            self.passed = before;
            return self.passed;
        }
        if cfg!(latchtree_defect = "section_no_wait") {
            // Planted defect: frees without waiting for open sections.
            self.passed = before;
            return self.passed;
        }
        if let Some(f) = self.draining
            && s.0.holders(s.0.parity() ^ 1) == 0
        {
            self.passed = f - 1;
            self.draining = None;
        }
        if self.draining.is_none() && self.passed < before {
            // Ordered against sections' re-checks by the fence below and
            // theirs (module docs).
            let ended = s.0.flip();
            // SeqCst: X again, for the drain started now.
            fence(Ordering::SeqCst);
            if s.0.holders(ended) == 0 {
                self.passed = before;
            } else {
                self.draining = Some(period);
            }
        }
        self.passed
    }
}
