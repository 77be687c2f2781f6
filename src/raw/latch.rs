//! The seqcount latch: a 64-bit sequence counter, even at rest, that steers
//! readers to whichever of the two copies is not being written.
//!
//! | `seq`  | readers use | the writer may modify |
//! |--------|-------------|-----------------------|
//! | even   | copy 0      | copy 1 (or nothing)   |
//! | odd    | copy 1      | copy 0                |
//!
//! # The ordering argument
//!
//! *Writer* ([`Latch::flip`]): `seq.store(s + 1, Release)` then
//! `fence(Release)`. The `Release` store publishes every link store of the
//! copy the writer just finished to readers that observe the new `seq`; the
//! `Release` fence orders the new `seq` before every link or field store the
//! writer makes afterwards.
//!
//! *Reader* ([`Latch::read`]): `s = seq.load(Acquire)` (pairs with the
//! `Release` store: everything written before the flip that produced `s` is
//! visible), the search, then `fence(Acquire)` and `seq.load(Relaxed) == s`.
//! Case analysis for a search that read some word `w` of copy `s & 1`:
//!
//! 1. `w` was last written before the flip that produced `s`: the reader sees
//!    it, by the `Acquire` load of `s`.
//! 2. `w` was written after a later flip: the reader's load of `w` reads from
//!    a store sequenced after that flip's `Release` fence, so that fence
//!    synchronizes with the reader's `Acquire` fence, the later flip happens
//!    before the re-check, and the re-check sees `seq != s`: retry.
//!
//! So a result is returned only when every word the search read belongs to
//! the version published at `s`.

use crate::sync::{AtomicU64, Ordering, fence, retry_hint};

/// Keeps a hot counter off the cache line of `seq`, so that retries (rare)
/// never make readers' line bounce.
#[repr(align(128))]
struct Padded<T>(T);

/// The sequence counter and its statistics.
pub(crate) struct Latch {
    seq: AtomicU64,
    /// Reads retried, and (only the writer, under its lock, touches this
    /// one) writes done: off `seq`'s line, which readers read twice per
    /// read, so that counting a write does not invalidate it once more.
    stats: Padded<Stats>,
}

struct Stats {
    retries: AtomicU64,
    writes: AtomicU64,
}

impl core::fmt::Debug for Latch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Latch")
            .field("seq", &self.seq.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Latch {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Latch {
                seq: AtomicU64::new(0),
                stats: Padded(Stats {
                    retries: AtomicU64::new(0),
                    writes: AtomicU64::new(0),
                }),
            }
        }
    }

    /// Runs `attempt(copy)` against a stable copy until it gives an answer
    /// from a version that did not change while it ran.
    ///
    /// `attempt` returns `None` when its walk exceeded the descent cap; that
    /// can only happen in a copy being rewritten, so it is retried too.
    /// Never blocks: a retry means a writer flipped `seq` meanwhile.
    #[inline(always)]
    pub(crate) fn read<R>(&self, attempt: impl FnMut(usize) -> Option<R>) -> R {
        self.read_versioned(attempt).0
    }

    /// [`Latch::read`], also returning the `seq` value the answer belongs
    /// to, so that a cursor can go on reading that version and validate
    /// each later step with [`Latch::unchanged`].
    #[inline(always)]
    pub(crate) fn read_versioned<R>(
        &self,
        mut attempt: impl FnMut(usize) -> Option<R>,
    ) -> (R, u64) {
        loop {
            // Acquire: pairs with the Release store in `flip`.
            let s = self.seq.load(Ordering::Acquire);
            let result = attempt((s & 1) as usize);
            if let Some(r) = result
                && self.unchanged(s)
            {
                return (r, s);
            }
            self.count_retry();
            retry_hint();
        }
    }

    /// The re-check that ends a read of version `s`: true when no flip
    /// happened since the `Acquire` load that returned `s`, so that every
    /// word read in between belongs to version `s` (case analysis above).
    /// A cursor calls it after each step it takes in version `s`.
    #[inline(always)]
    pub(crate) fn unchanged(&self, s: u64) -> bool {
        // Acquire: pairs with the Release fence in `flip` (case 2 above).
        fence(Ordering::Acquire);
        self.seq.load(Ordering::Relaxed) == s
    }

    /// Counts one read (or cursor step) that found its version gone.
    #[inline]
    pub(crate) fn count_retry(&self) {
        self.stats.0.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Advances `seq` by one. The caller holds the writer lock.
    #[inline]
    pub(crate) fn flip(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        // Release: pairs with the reader's Acquire load of `seq`.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
        // Release fence: pairs with the reader's Acquire fence before its
        // re-check. Removing it is the planted defect `no_release_fence`.
        if !cfg!(latchtree_defect = "no_release_fence") {
            fence(Ordering::Release);
        }
    }

    /// Counts one finished write. The caller holds the writer lock.
    #[inline]
    pub(crate) fn count_write(&self) {
        let w = &self.stats.0.writes;
        // Relaxed: a statistic, written under the writer lock only; it
        // orders nothing.
        w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// The current counter value (even at rest).
    pub(crate) fn seq(&self) -> u64 {
        self.seq.load(Ordering::Relaxed)
    }

    /// Reads that had to retry because a writer flipped meanwhile.
    pub(crate) fn retries(&self) -> u64 {
        self.stats.0.retries.load(Ordering::Relaxed)
    }

    /// Write transactions that changed the tree.
    pub(crate) fn writes(&self) -> u64 {
        self.stats.0.writes.load(Ordering::Relaxed)
    }
}
