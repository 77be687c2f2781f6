//! Handler read sections: a grace period that async-signal-safe readers can
//! take part in (no thread-local, no allocation, no lock, bounded).
//!
//! A [`lookup`](crate::AddrIndex::lookup) pins nothing, so it can only copy
//! words out of the type-stable range nodes. A signal handler that must read
//! a module's *value* in place (a trap table, an unwinder) opens a section
//! first ([`Sections::enter`]): it counts itself into one of two counters of
//! a shard picked by its stack address, and the writer does not free a
//! removed record before every section that was open when it was unlinked
//! has closed.
//!
//! # The protocol (an SRCU with a poll instead of a wait)
//!
//! *Reader* ([`Sections::enter`]): `p = phase` (`SeqCst`), `count[p & 1] +=
//! 1` (`SeqCst`), re-read `phase`: if it moved, undo and retry, so an open
//! section is always counted under a phase that was current after its
//! increment. Then the read, whose first load of the latch's `seq` is
//! `SeqCst` ([`crate::raw::RawTree::read_after_section`]). Closing is one
//! `Release` decrement.
//!
//! *Writer* ([`SectionClock::poll`], under the writer lock, at the start of
//! period `f`, when everything retired in periods `< f` already left every
//! copy): `fence(SeqCst)`; if a drain is running, and the counters of the
//! previous phase sum to 0, it is complete. If none is running, flip
//! `phase` and start one (checking it at once: with no handler open, a
//! drain completes in the same poll). A drain started at period `f`
//! completes ⇒ every section open at its flip has closed ⇒ periods `< f`
//! are past their grace period for sections.
//!
//! Why a section never sees a record after the drain that covers it: the
//! writer's flips of `seq` that unlinked the record precede its `SeqCst`
//! fence X; the reader's increment R precedes its `SeqCst` load L of `seq`.
//! If the writer's counter load missed R, then X precedes R in the single
//! order S (C++20 [atomics.order] 4.3), so X precedes L, and L cannot read a
//! `seq` older than the unlinking flips (4.2): the reader reads a version
//! without the record. Otherwise the drain waits for the reader to close.
//! A section that loaded an older `phase` and was counted under it after a
//! drain of that counter completed fails the re-check and moves to the
//! current phase, which is why one drain per grace period is enough.
//!
//! `used` keeps writers of an index whose handlers never open a section
//! from paying for any of this: a reader sets it (`SeqCst`, before its
//! increment) the first time; a writer that reads it false after its fence
//! knows, by the same argument, that no section can see what it unlinked.

use crate::sync::{AtomicUsize, Ordering, fence};

/// Shards of counters: sections on different threads (stacks) mostly
/// count on different cache lines.
const SHARDS: usize = 16;

/// One shard's two counters (one per phase parity), on their own lines.
#[repr(align(128))]
struct Shard([AtomicUsize; 2]);

/// The phase word and the `used` flag that every section reads.
#[repr(align(128))]
struct Phase {
    phase: AtomicUsize,
    used: AtomicUsize,
}

/// See the module docs.
pub(crate) struct Sections {
    head: Phase,
    shards: [Shard; SHARDS],
}

impl core::fmt::Debug for Sections {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sections")
            .field("phase", &self.head.phase.load(Ordering::Relaxed))
            .finish_non_exhaustive()
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
        pub(crate) fn new() -> Self {
            Sections {
                head: Phase {
                    phase: AtomicUsize::new(0),
                    used: AtomicUsize::new(0),
                },
                shards: [const { Shard([AtomicUsize::new(0), AtomicUsize::new(0)]) }; SHARDS],
            }
        }
    }

    /// Opens a section; returns the counter to close it with
    /// ([`Sections::exit`]). Async-signal-safe: two atomic RMWs and three
    /// loads, retried only if a writer flipped the phase in between (at
    /// most once per concurrent write; never when interrupting the writer).
    #[inline]
    pub(crate) fn enter(&self) -> &AtomicUsize {
        // SeqCst load and store: see the module docs (`used`).
        if self.head.used.load(Ordering::SeqCst) == 0 {
            self.head.used.store(1, Ordering::SeqCst);
        }
        let marker = 0u8;
        let shard = &self.shards[shard_of(core::ptr::addr_of!(marker).addr())];
        loop {
            // SeqCst: the re-check below and the writer's fence (module docs).
            let p = self.head.phase.load(Ordering::SeqCst);
            let count = &shard.0[p & 1];
            // SeqCst: R in the module docs' argument.
            count.fetch_add(1, Ordering::SeqCst);
            if self.head.phase.load(Ordering::SeqCst) == p {
                return count;
            }
            // Release: as in `exit` (nothing was read under this count).
            count.fetch_sub(1, Ordering::Release);
            crate::sync::retry_hint();
        }
    }

    /// Closes a section opened by [`enter`](Sections::enter).
    #[inline]
    pub(crate) fn exit(count: &AtomicUsize) {
        // Release: pairs with the writer's Acquire fence after it reads the
        // sum as 0: every read of the section happens before the free.
        count.fetch_sub(1, Ordering::Release);
    }

    /// The sum of the counters of parity `parity`.
    fn open(&self, parity: usize) -> usize {
        self.shards
            .iter()
            // Relaxed: ordered by the fences in `SectionClock::poll`.
            .map(|s| s.0[parity].load(Ordering::Relaxed))
            .fold(0, usize::wrapping_add)
    }
}

/// The writer's side of [`Sections`] (under the writer lock).
#[derive(Debug, Default)]
pub(crate) struct SectionClock {
    /// The period at whose start the running drain flipped the phase.
    draining: Option<u64>,
    /// Every period up to this one is past its grace period for sections.
    passed: u64,
}

impl SectionClock {
    pub(crate) const fn new() -> Self {
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
    pub(crate) fn poll(&mut self, s: &Sections, period: u64, waiting: bool) -> u64 {
        let before = period - 1;
        if !waiting || self.passed >= before {
            return self.passed;
        }
        // SeqCst: X in the module docs' argument; after the unlinking
        // flips of every earlier period (their locks were released before
        // this one was taken).
        fence(Ordering::SeqCst);
        // SeqCst: see the module docs (`used`).
        if s.head.used.load(Ordering::SeqCst) == 0 && self.draining.is_none() {
            self.passed = before;
            return self.passed;
        }
        if cfg!(latchtree_defect = "section_no_wait") {
            // Planted defect: frees without waiting for open sections.
            self.passed = before;
            return self.passed;
        }
        let parity = |p: usize| p & 1;
        // Relaxed: the phase is written only by writers, under the lock.
        let phase = s.head.phase.load(Ordering::Relaxed);
        if let Some(f) = self.draining
            && s.open(parity(phase.wrapping_sub(1))) == 0
        {
            self.passed = f - 1;
            self.draining = None;
        }
        if self.draining.is_none() && self.passed < before {
            // SeqCst: a section's re-check that reads the old phase is
            // before this store in S, so its count is seen below.
            s.head.phase.store(phase.wrapping_add(1), Ordering::SeqCst);
            // SeqCst: X again, for the drain started now.
            fence(Ordering::SeqCst);
            if s.open(parity(phase)) == 0 {
                self.passed = before;
            } else {
                self.draining = Some(period);
            }
        }
        // Acquire: pairs with the Release decrements of the sections whose
        // close made a sum read 0 above.
        fence(Ordering::Acquire);
        self.passed
    }
}
