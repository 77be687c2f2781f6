//! A writer's [`Job`] after its lock: announce a grace period through the
//! epoch, and flush its thread's epoch bag so that the epoch moves.
//!
//! An announcement is the one closure this crate defers through
//! crossbeam-epoch: it stores "every period up to `p` is past its grace
//! period" into an atomic shared with the limbo (`limbo.rs`)
//! (an `Arc`: the closure may run after the front-end is gone). A reader's
//! pin that collects runs at most that trivial closure, never a destructor
//! of a writer's garbage.

use super::collector::Reclaimer;
use super::scope::{after_outermost_write, in_writer_scope};

/// What a writer does after its lock for its limbo: announce a period
/// (defer the closure) and flush its epoch bag.
#[must_use]
pub(crate) struct Job {
    /// The limbo's `passed` word and the period to store there; `None`
    /// for a job that only flushes.
    #[cfg(not(latchtree_loom))]
    pub(super) announce: Option<(alloc::sync::Arc<crate::sync::AtomicU64>, u64)>,
}

impl Job {
    /// Whether the job announces (rather than only flushes).
    pub(crate) fn announces(&self) -> bool {
        #[cfg(not(latchtree_loom))]
        return self.announce.is_some();
        #[cfg(latchtree_loom)]
        return false;
    }

    /// Makes an announcing job cover `period` (later than what it covers);
    /// false for a job that only flushes.
    pub(super) fn widen(&mut self, period: u64) -> bool {
        #[cfg(not(latchtree_loom))]
        if let Some((_, p)) = &mut self.announce {
            *p = period;
            return true;
        }
        let _ = period;
        false
    }

    /// Runs the job; call it after the writer lock is released (pinning may
    /// run deferred closures). Inside another write's scope (a write nested
    /// in a batch closure) it is postponed to the end of the outermost
    /// scope instead: a collection would run other deferred closures under
    /// that write's lock.
    ///
    /// An announcing job re-pins, then collects twice (re-pinning in
    /// between): crossbeam runs a closure once the epoch moved twice past
    /// its `defer`, so with no guard pinned anywhere and no other garbage
    /// queued ahead the announcement has passed when the job returns, and
    /// the next write hands out what it covers. Announcements are rare
    /// (once `HELP_BACKLOG` items wait, after `HELP_EVERY` writes in a row
    /// that retired nothing (past `MAX_AGE`, in all), or after a hand-out
    /// that left items waiting, as after a backlog; and in `flush` rounds:
    /// `limbo.rs`): each one's allocation (crossbeam's queue node for the
    /// sealed bag) is shared by that many writes.
    pub(crate) fn run(self, reclaim: &Reclaimer) {
        let collects = if self.announces() { 2 } else { 1 };
        if in_writer_scope() {
            let reclaim = reclaim.same_collector();
            after_outermost_write(move || self.run_collecting(&reclaim, collects));
            return;
        }
        self.run_collecting(reclaim, collects);
    }

    /// [`run`](Job::run), collecting `collects` times (re-pinning in
    /// between, so that the epoch may advance): crossbeam frees at most 8
    /// sealed bags per collection, oldest first, so a backlog of other
    /// garbage queued ahead of the announcement needs several.
    pub(crate) fn run_collecting(self, reclaim: &Reclaimer, collects: usize) {
        #[cfg(not(latchtree_loom))]
        {
            let mut guard = reclaim.pin();
            if let Some((passed, period)) = self.announce {
                // A pin may itself collect and move the epoch on (a new
                // participant's first pin, every 128th of a thread's),
                // leaving this guard one step behind: the bag would then be
                // sealed a step later than the two collections below can
                // pass. Re-pinned, the guard is at the current epoch.
                guard.repin();
                // Release: pairs with the Acquire load in `Limbo::passed`;
                // the closure runs only after every guard pinned before this
                // `defer` is gone (crossbeam), which happens-before it, so
                // the writer that sees the store frees after those guards.
                guard.defer(move || {
                    passed.fetch_max(period, crate::sync::Ordering::Release);
                });
            }
            // Seals this thread's bag (so the announcement reaches the
            // global queue now rather than after 63 more deferrals) and
            // collects, which advances the epoch if it can.
            guard.flush();
            for _ in 1..collects {
                guard.repin();
                guard.flush();
            }
        }
        #[cfg(latchtree_loom)]
        {
            let _ = (reclaim, collects);
        }
    }
}
