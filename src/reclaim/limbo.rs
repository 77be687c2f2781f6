//! The [`Limbo`]: what a front-end's transactions retired, waiting for
//! the epoch's grace period, under the writer lock.
//!
//! Each item is tagged with the transaction's *period* (a counter that
//! grows by one per transaction). Nothing user-visible is handed to
//! crossbeam-epoch: at most one tiny announcement ([`Job`]) per limbo is
//! outstanding at a time, a closure that stores "every period up to `p` is
//! past its grace period" into [`Limbo::passed`]. The owner's later
//! transactions ([`Limbo::begin`]) hand out what was announced as *due*, to
//! be freed or recycled after their lock is released: all of it, except
//! that a large backlog a guard kept goes a slice a transaction
//! ([`HAND_OUT_OLDER`]).
//!
//! Why one announcement covers every older period: it is deferred after the
//! writer lock of period `p` was released, so after every item of every
//! period `<= p` left both copies. crossbeam runs it only after every guard
//! pinned at the time of the `defer` is dropped; a guard pinned later cannot
//! reach those items, and one pinned earlier is among those waited for.
//! While an announcement is outstanding, newer periods wait for the next
//! one; a writer that finds its garbage still waiting every
//! [`HELP_EVERY`] transactions flushes its thread's epoch bag to push the
//! epoch along (a writer with no readers at all would otherwise never see
//! its announcement run).
//!
//! When to announce: each announcement costs an allocation (crossbeam's
//! queue node for the sealed bag) and two collections, so waiting items
//! are announced together, once [`HELP_BACKLOG`] of them wait (by the
//! retirement that makes them that many) or once [`HELP_EVERY`]
//! transactions in a row retired nothing (a removal that no other
//! follows), or at once after a hand-out that left items waiting (a
//! backlog: then the announcement is *pressing*, helped every
//! [`HELP_BACKLOG_EVERY`] writes); once the oldest has waited
//! [`MAX_AGE`] transactions, [`HELP_EVERY`] quiet ones announce them, in a
//! row or not. The announcing job re-pins, then collects twice, so with
//! no guard pinned anywhere and no other garbage queued ahead its
//! announcement has passed by the next write, which hands its items
//! out: an item then waits for at most 127 later retirements, 64 quiet
//! writes in a row, or [`MAX_AGE`] writes and 64 quiet ones, within the
//! documented bound. In an insert + remove churn that is one announcement
//! per 128 pairs.
//!
//! Under `cfg(latchtree_loom)` the epoch is invisible to the model checker
//! (crossbeam keys its own loom support on a different cfg), so nothing is
//! ever announced: the limbo is a graveyard emptied when its owner is
//! dropped, at the end of the model, and loom explores the latch and the
//! link stores, which is what it must see.

use super::job::Job;

/// Writes (while items wait) between two flushes a writer does to push the
/// epoch along while its announcement is outstanding, every such write
/// counted, whether it retires or only inserts; and writes in a row that
/// retired nothing after which waiting items that no announcement covers
/// are announced (see the module docs).
pub(crate) const HELP_EVERY: u32 = 64;

/// Items waiting from which a writer helps every [`HELP_BACKLOG_EVERY`]
/// writes rather than every [`HELP_EVERY`] (so does a pressing
/// announcement: `Limbo::pressing`): a large removal (a `clear`, a batch)
/// is freed within a few writes, while a guard held elsewhere (which no
/// flush can get past) costs at most one flush per that many writes.
pub(crate) const HELP_BACKLOG: usize = 128;

/// See [`HELP_BACKLOG`].
pub(crate) const HELP_BACKLOG_EVERY: u32 = 4;

/// Transactions the oldest waiting item waits before retirements stop
/// resetting the quiet count, so that [`HELP_EVERY`] quiet writes announce
/// it however rarely they come in a row (one removal every 63 writes would
/// otherwise wait for the 128th, some 8,000 writes): more than an insert +
/// remove churn takes to make [`HELP_BACKLOG`] wait (255), so that churn
/// still announces once per [`HELP_BACKLOG`].
const MAX_AGE: u64 = 4 * HELP_BACKLOG as u64;

/// Items waiting behind a hand-out (or a `flush` round) from which its
/// announcement is *pressing* (`Limbo::pressing`).
const PRESSING_FROM: usize = 32;

/// The queue capacity a [`Limbo`] keeps when it shrinks.
const LIMBO_KEPT: usize = 2 * HELP_BACKLOG;

/// The retiring transactions (those that retired anything) whose items are
/// *recent*: never held back by [`HAND_OUT_OLDER`]. The window of the
/// documented bound ("at most 128 removed values besides those the last
/// 16 writes removed"), counted in retiring transactions so that empty ones
/// (a `flush`'s rounds) and insert-only writes do not age anything.
const RECENT_RETIRING: usize = 16;

/// How many due items from before the last [`RECENT_RETIRING`] retiring
/// transactions a transaction hands out, at most, besides twice the recent
/// items waiting (each item counts as recent in 16 hand-outs, so over any
/// 16 retiring writes the backlog shrinks by more than they retire):
/// a backlog a guard kept through a mass removal (196,608 records after
/// removing three quarters of 262,144 modules) goes 1,024 a write (some
/// 40,000 instructions under the lock, 0.1 ms after it), not in one write
/// (8 M instructions under the lock, 11-14 ms of CPU in all). Only a
/// queue of more items than this, whose oldest waited past the window, is
/// held back: one that a guard or an outer write's lock kept from its
/// grace period. `flush` hands out everything ([`Limbo::begin`]'s
/// `uncapped`).
pub(crate) const HAND_OUT_OLDER: usize = 1024;

/// What a transaction retired, waiting for its grace period; kept under
/// the writer lock. See the module docs.
pub(crate) struct Limbo<T> {
    /// Retired items with their period, oldest first.
    queue: alloc::collections::VecDeque<(u64, T)>,
    /// The period of the queue's first and last items while it holds any
    /// (set by the push into an empty queue, every push, and the pop that
    /// stops at a newer item), kept beside it: every write asks, and a
    /// deque's ends cost an index computation each.
    ends: (u64, u64),
    /// The running (or last) transaction's period.
    period: u64,
    /// The period the outstanding (or last) announcement covers.
    announced: u64,
    /// Whether the running transaction retired anything yet.
    retiring: bool,
    /// Whether `begin` asked for this transaction's job already (so that
    /// its first retirement does not count it twice towards a help).
    asked: bool,
    /// Transactions since the announcement or the last help (counted
    /// while items wait).
    since_help: u32,
    /// Transactions in a row that retired nothing, counted while items
    /// wait since the queue was last empty or announced: what makes
    /// [`only_counted`](Limbo::only_counted) announce a few waiting items
    /// that no removal follows.
    quiet: u32,
    /// The outstanding announcement was made, by a hand-out or a `flush`
    /// (`always_help`), for at least [`PRESSING_FROM`] waiting items (a
    /// backlog that a guard, readers, or other garbage queued ahead kept):
    /// helped every [`HELP_BACKLOG_EVERY`] writes, like a backlog of
    /// [`HELP_BACKLOG`], not every [`HELP_EVERY`].
    pressing: bool,
    /// The period announced as past its grace period; made on first use.
    #[cfg(not(latchtree_loom))]
    passed: Option<alloc::sync::Arc<crate::sync::AtomicU64>>,
}

impl<T> core::fmt::Debug for Limbo<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Limbo")
            .field("waiting", &self.queue.len())
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl<T> Limbo<T> {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Limbo {
                queue: alloc::collections::VecDeque::new(),
                ends: (0, 0),
                period: 0,
                announced: 0,
                retiring: false,
                asked: false,
                since_help: 0,
                quiet: 0,
                pressing: false,
                #[cfg(not(latchtree_loom))]
                passed: None,
            }
        }
    }

    /// The latest period announced as past its grace period.
    fn passed(&self) -> u64 {
        #[cfg(not(latchtree_loom))]
        {
            // Acquire: pairs with the Release `fetch_max` of the
            // announcement (see `Job::run`).
            self.passed
                .as_ref()
                .map_or(0, |p| p.load(crate::sync::Ordering::Acquire))
        }
        #[cfg(latchtree_loom)]
        {
            0
        }
    }

    /// Starts a transaction (under the writer lock): hands every item whose
    /// grace periods have passed to `due`, to be freed after the lock: the
    /// epoch's, and `also`'s (the latest period another kind of reader is
    /// known to be done with: the address index's handler sections, or
    /// `u64::MAX`). Unless `uncapped()`, a large backlog's older items go
    /// at most [`HAND_OUT_OLDER`] at a time besides twice the recent ones
    /// ([`hand_out_older`](Limbo::hand_out_older)). If items of earlier
    /// periods still wait, sets `job` to announce them (no announcement
    /// outstanding, and [`HELP_BACKLOG`] of them wait, [`HELP_EVERY`]
    /// writes in a row (or, past [`MAX_AGE`], in all) retired nothing, or
    /// this write handed some out) or, every [`HELP_EVERY`] writes, to
    /// flush (one is): so
    /// that a tree whose later writes only insert still frees what it
    /// removed, readers or none. Announcing them now is sound: their
    /// transactions' locks were released before this one began, and the
    /// announcement is deferred after this one's.
    #[inline]
    pub(crate) fn begin(
        &mut self,
        also: u64,
        uncapped: impl FnOnce() -> bool,
        due: impl FnMut(T),
        job: &mut Option<Job>,
    ) {
        self.period += 1;
        let quiet = !core::mem::replace(&mut self.retiring, false);
        self.asked = false;
        if self.queue.is_empty() {
            return;
        }
        // The last transaction retired nothing while items waited
        // (wrapping: after 2^32 writes under a held-back announcement, a
        // few items may wait 64 writes more, no harm).
        self.quiet = self.quiet.wrapping_add(u32::from(quiet));
        let epoch = self.passed();
        if self.ends.0 > epoch.min(also) && self.only_counted(epoch) {
            // The common case while writes churn: nothing is due and the
            // job only counted towards the next help (what `begin_waiting`
            // does then, through `job_with`, without its call).
            self.asked = true;
            *job = None;
            return;
        }
        self.begin_waiting(epoch, also, uncapped, due, job);
    }

    /// [`job_with`](Limbo::job_with)'s common case, given the period
    /// announced as passed: fewer than [`HELP_BACKLOG`] items wait, and
    /// either an announcement is outstanding and no help comes due, or
    /// none is and the waiting items are not yet to be announced (fewer
    /// than [`HELP_EVERY`] transactions in a row retired nothing since the
    /// queue was last empty or announced; past [`MAX_AGE`], in all): then
    /// counts towards the next help (every [`HELP_BACKLOG_EVERY`] if the
    /// announcement is pressing) and returns true (the job is then
    /// `None`); else changes nothing.
    #[inline]
    fn only_counted(&mut self, epoch: u64) -> bool {
        let wait = if epoch < self.announced {
            let every = if self.pressing {
                HELP_BACKLOG_EVERY
            } else {
                HELP_EVERY
            };
            self.since_help + 1 < every
        } else {
            self.quiet < HELP_EVERY
        };
        if wait && self.queue.len() < HELP_BACKLOG {
            self.since_help += 1;
            return true;
        }
        false
    }

    /// [`begin`](Limbo::begin) while items wait, given the period
    /// announced as passed.
    fn begin_waiting(
        &mut self,
        epoch: u64,
        also: u64,
        uncapped: impl FnOnce() -> bool,
        mut due: impl FnMut(T),
        job: &mut Option<Job>,
    ) {
        let passed = epoch.min(also);
        let handed_out = self.ends.0 <= passed;
        if handed_out {
            // No more items than the bound (the common case: nothing kept
            // a backlog) all go, whatever their periods; so do recent ones.
            if self.queue.len() <= HAND_OUT_OLDER
                || uncapped()
                || self.hand_out_older(passed, &mut due)
            {
                while let Some(&(p, _)) = self.queue.front() {
                    if p > passed {
                        self.ends.0 = p;
                        break;
                    }
                    if let Some((_, item)) = self.queue.pop_front() {
                        due(item);
                    }
                }
            }
            // Returns the queue's memory once a burst of retirements (a
            // `clear` of a large tree) has drained.
            let cap = self.queue.capacity();
            if cap > LIMBO_KEPT && self.queue.len() * 4 < cap {
                self.queue.shrink_to((self.queue.len() * 2).max(LIMBO_KEPT));
            }
        }
        if !self.queue.is_empty() {
            // Announces them if nothing is outstanding, else counts towards
            // the next help: an outstanding announcement needs the epoch
            // moved twice more, and with no reader pinning, only this
            // writer's flushes move it (insert-only writes would otherwise
            // set no job, and what a `clear` retired would never be dropped).
            // After a hand-out, what still waits was retired while the
            // announcement was outstanding (a backlog a guard kept, or
            // removals while readers held the epoch back): announced at
            // once, not after the next [`HELP_BACKLOG`] or quiet writes
            // (if no announcement is outstanding; one that is keeps its
            // help cadence).
            *job = self.job_with(epoch, handed_out && epoch >= self.announced);
            self.asked = true;
        }
    }

    /// The period of the oldest of the last [`RECENT_RETIRING`] retiring
    /// transactions and the index of its first item, if that many have
    /// items waiting (`None` if not: then every waiting item is recent).
    /// Items before that index are *older*. Read off the queue, back to
    /// front, a binary search a period: hand-outs take items from the front
    /// only, so every retiring transaction since the front's has its items
    /// here (in the cold path only: nothing to keep up in every write).
    fn recent_floor(&self) -> Option<(u64, usize)> {
        let (mut end, mut floor) = (self.queue.len(), None);
        for _ in 0..RECENT_RETIRING {
            let &(p, _) = self.queue.get(end.checked_sub(1)?)?;
            end = self.queue.partition_point(|&(q, _)| q < p);
            floor = Some((p, end));
        }
        floor
    }

    /// [`begin_waiting`](Limbo::begin_waiting)'s first part when a backlog
    /// holds more than [`HAND_OUT_OLDER`] items: if its front is *older*
    /// (a guard or an outer write's lock kept it from its grace period),
    /// hands out at most that many of the older items that are due, plus
    /// twice as many as the recent items waiting (all behind them: over any
    /// 16 retiring writes, the backlog shrinks by more than they retire).
    /// False if that left older ones due: nothing newer may go before them.
    #[cold]
    #[inline(never)]
    fn hand_out_older(&mut self, passed: u64, due: &mut impl FnMut(T)) -> bool {
        let Some((floor, older)) = self.recent_floor() else {
            return true;
        };
        let recent = self.queue.len() - older;
        let mut left = HAND_OUT_OLDER.saturating_add(recent.saturating_mul(2));
        while let Some(&(p, _)) = self.queue.front() {
            if p >= floor || p > passed {
                return true;
            }
            if left == 0 {
                self.ends.0 = p;
                return false;
            }
            left -= 1;
            if let Some((_, item)) = self.queue.pop_front() {
                due(item);
            }
        }
        true
    }

    /// Retires `item`, which left every copy readers can reach in the
    /// running transaction (under the writer lock). Returns true for the
    /// transaction's first retirement and for the one that makes
    /// [`HELP_BACKLOG`] items wait: the caller then hands its job to
    /// [`on_retirement`](Limbo::on_retirement) (the others need not touch
    /// it).
    #[inline]
    pub(crate) fn retire(&mut self, item: T) -> bool {
        if self.queue.is_empty() {
            self.ends.0 = self.period;
        }
        // Only writes in a row that retire nothing are quiet: in a churn
        // the retirements, not the inserts between them, pace the
        // announcements (one per [`HELP_BACKLOG`]). Once the oldest item
        // waited [`MAX_AGE`] transactions, every quiet write counts again.
        if self.period - self.ends.0 < MAX_AGE {
            self.quiet = 0;
        }
        self.ends.1 = self.period;
        self.queue.push_back((self.period, item));
        !core::mem::replace(&mut self.retiring, true) || self.queue.len() == HELP_BACKLOG
    }

    /// After the transaction's first retirement, or the one that made
    /// [`HELP_BACKLOG`] items wait: sets `job` (if `begin` did not ask
    /// already, or to announce the backlog at once), or widens the
    /// announcement `begin` set to this transaction's period (deferred
    /// after this lock too, so it covers this period's items as well).
    #[inline]
    pub(crate) fn on_retirement(&mut self, job: &mut Option<Job>) {
        if let Some(j) = job {
            if j.widen(self.period) {
                self.announced = self.period;
            }
        } else if !self.asked || self.queue.len() >= HELP_BACKLOG {
            *job = self.job(false);
        }
    }

    /// What to do after the lock for the waiting items. If no announcement
    /// is outstanding: announce the latest period once
    /// [`only_counted`](Limbo::only_counted) says so ([`HELP_BACKLOG`]
    /// items wait, or [`HELP_EVERY`] writes in a row, past [`MAX_AGE`] in
    /// all, retired nothing), or at once if `always_help` (which also
    /// makes it pressing, see the field).
    /// Else flush every [`HELP_EVERY`] calls, every [`HELP_BACKLOG_EVERY`]
    /// while [`HELP_BACKLOG`] items wait or the announcement is pressing,
    /// or always if `always_help`.
    pub(crate) fn job(&mut self, always_help: bool) -> Option<Job> {
        self.job_with(self.passed(), always_help)
    }

    /// [`job`](Limbo::job), given the period announced as passed (read
    /// once by a caller that read it already).
    #[inline]
    fn job_with(&mut self, passed: u64, always_help: bool) -> Option<Job> {
        if self.queue.is_empty() || (!always_help && self.only_counted(passed)) {
            return None;
        }
        let latest = self.ends.1;
        if passed >= self.announced {
            if latest <= self.announced {
                // Announced and passed: due at the next `begin`.
                return None;
            }
            self.announced = latest;
            self.since_help = 0;
            self.quiet = 0;
            self.pressing = always_help && self.queue.len() >= PRESSING_FROM;
            #[cfg(not(latchtree_loom))]
            {
                let passed = self
                    .passed
                    .get_or_insert_with(|| alloc::sync::Arc::new(crate::sync::AtomicU64::new(0)));
                return Some(Job {
                    announce: Some((alloc::sync::Arc::clone(passed), latest)),
                });
            }
            #[cfg(latchtree_loom)]
            return Some(Job {});
        }
        self.since_help += 1;
        let backlog = (self.queue.len() >= HELP_BACKLOG || self.pressing)
            && self.since_help >= HELP_BACKLOG_EVERY;
        if always_help || backlog || self.since_help >= HELP_EVERY {
            self.since_help = 0;
            return Some(Job {
                #[cfg(not(latchtree_loom))]
                announce: None,
            });
        }
        None
    }

    /// Whether the oldest waiting item is past the epoch's grace period
    /// (so that `begin`'s `also` decides whether it is due).
    pub(crate) fn epoch_due(&self) -> bool {
        self.oldest().is_some_and(|p| p <= self.passed())
    }

    /// The period the next transaction will have.
    pub(crate) fn next_period(&self) -> u64 {
        self.period + 1
    }

    /// The period of the oldest waiting item.
    pub(crate) fn oldest(&self) -> Option<u64> {
        (!self.queue.is_empty()).then_some(self.ends.0)
    }

    /// Whether nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Gives the queue's spare memory back (after a [`drain`](Limbo::drain)).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.queue.shrink_to_fit();
    }

    /// Takes every waiting item (for the owner's `Drop` or `shrink_to_fit`:
    /// no reader is left).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.queue.drain(..).map(|(_, item)| item)
    }
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::*;
    use alloc::collections::VecDeque;
    use alloc::vec::Vec;

    /// Random retirements (none, a few, or bursts of thousands a
    /// transaction), an epoch (held still in stretches, as by a guard) and
    /// an `also` that move forward at random,
    /// against a model queue: every hand-out is a prefix of the model whose
    /// periods have passed (never an item not yet due), the queue's ends
    /// stay right, a transaction with something due hands out something,
    /// stops short only after [`HAND_OUT_OLDER`] items, hands out everything
    /// due when `uncapped`, and only holds back older items while recent
    /// ones wait behind them.
    #[test]
    #[cfg_attr(miri, ignore = "safe code over a deque; two cases took Miri 100 s")]
    fn hands_out_due_items_in_order_a_bounded_slice_of_a_backlog() {
        let (cases, steps) = (200, 600);
        let mut seed: u64 = 0x1234_5678;
        let mut rnd = move |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let burst = 3_000;
        let mut short = 0;
        for _ in 0..cases {
            let mut l: Limbo<u64> = Limbo::new();
            let passed = alloc::sync::Arc::new(crate::sync::AtomicU64::new(0));
            l.passed = Some(alloc::sync::Arc::clone(&passed));
            let (mut epoch, mut next) = (0u64, 0u64);
            let mut model: VecDeque<(u64, u64)> = VecDeque::new();
            for step in 0..steps {
                // Every other stretch of 100 transactions, a guard holds the
                // epoch: a backlog builds up behind it.
                if (step / 100) % 2 == 0 && rnd(3) == 0 {
                    // Never past the last finished transaction.
                    epoch = (epoch + rnd(40)).min(l.period);
                    passed.store(epoch, crate::sync::Ordering::SeqCst);
                }
                let also = if rnd(4) == 0 {
                    rnd(l.period + 1)
                } else {
                    u64::MAX
                };
                let uncapped = rnd(8) == 0;
                let limit = epoch.min(also);
                let due = model.iter().take_while(|&&(p, _)| p <= limit).count();
                // What a hand-out that stops short must have given at least.
                let slice = l
                    .recent_floor()
                    .map_or(0, |(_, older)| HAND_OUT_OLDER + 2 * (l.queue.len() - older));
                let (mut out, mut job) = (Vec::new(), None);
                l.begin(also, || uncapped, |x| out.push(x), &mut job);
                for &x in &out {
                    let (p, id) = model.pop_front().expect("handed out more than waits");
                    assert_eq!(id, x, "out of order");
                    assert!(p <= limit, "period {p} handed out, {limit} passed");
                }
                assert!(due == 0 || !out.is_empty(), "{due} due, none handed out");
                if out.len() < due {
                    short += 1;
                    assert!(!uncapped, "uncapped, {} of {due} due handed out", out.len());
                    assert!(out.len() >= slice, "stopped at {} of {slice}", out.len());
                    let floor = l.recent_floor().map(|(p, _)| p);
                    assert!(Some(l.ends.0) < floor, "held back a recent item");
                }
                if let (Some(f), Some(b)) = (l.queue.front(), l.queue.back()) {
                    assert_eq!((l.ends.0, l.ends.1), (f.0, b.0), "the queue's ends");
                }
                let k = match rnd(20) {
                    0 => burst + rnd(burst),
                    1..=3 => rnd(50),
                    4..=12 => 1,
                    _ => 0,
                };
                for _ in 0..k {
                    if l.retire(next) {
                        l.on_retirement(&mut job);
                    }
                    model.push_back((l.period, next));
                    next += 1;
                }
                drop(job);
            }
            assert_eq!(l.queue.len(), model.len());
        }
        assert!(short > 100, "the bound stopped only {short} hand-outs");
    }

    /// With the grace period passing at once: a lone retirement followed
    /// by quiet transactions is handed out after [`HELP_EVERY`] of them
    /// (and two: the one that announces, the one that hands out); sparse
    /// retirements, one every 63 transactions (never [`HELP_EVERY`] quiet
    /// ones in a row, far fewer than [`HELP_BACKLOG`]), after at most
    /// [`MAX_AGE`], twice [`HELP_EVERY`] and two; a churn that retires
    /// every other transaction is announced once per [`HELP_BACKLOG`]
    /// retirements, not more often.
    #[test]
    fn items_wait_a_bounded_number_of_transactions() {
        // Transactions a retirement waited for its hand-out (the longest),
        // and the announcements made, retiring at the transactions `every`
        // says out of `n`, none after `last`.
        let run = |n: u64, last: u64, every: &dyn Fn(u64) -> bool| {
            let mut l: Limbo<u64> = Limbo::new();
            let passed = alloc::sync::Arc::new(crate::sync::AtomicU64::new(0));
            l.passed = Some(alloc::sync::Arc::clone(&passed));
            let mut waiting: VecDeque<u64> = VecDeque::new();
            let (mut longest, mut announcements) = (0, 0);
            for t in 0..n {
                let (mut out, mut job) = (Vec::new(), None);
                l.begin(u64::MAX, || false, |x| out.push(x), &mut job);
                for x in out {
                    assert_eq!(waiting.pop_front(), Some(x), "out of order");
                    longest = longest.max(t - x);
                }
                if t <= last && every(t) && l.retire(t) {
                    l.on_retirement(&mut job);
                }
                if t <= last && every(t) {
                    waiting.push_back(t);
                }
                // The job runs after the lock; the epoch passes it at once.
                if let Some(Job {
                    announce: Some((_, p)),
                }) = job
                {
                    passed.store(p, crate::sync::Ordering::Release);
                    announcements += 1;
                }
            }
            assert!(waiting.is_empty(), "{} never handed out", waiting.len());
            (longest, announcements)
        };
        let (lone, _) = run(200, 0, &|t| t == 0);
        assert_eq!(lone, u64::from(HELP_EVERY) + 2, "a lone retirement");
        // Fewer transactions under Miri (the same rules at work).
        let n = if cfg!(miri) { 2_000 } else { 20_000 };
        let (sparse, _) = run(n, n / 2, &|t| t % 63 == 0);
        assert!(
            sparse > u64::from(HELP_EVERY) + 2 && sparse <= MAX_AGE + 2 * u64::from(HELP_EVERY) + 2,
            "sparse retirements waited {sparse} transactions"
        );
        // Announcements of 128 retirements, and one for the rest.
        let last = n - 1_000;
        let (_, churn) = run(n, last, &|t| t % 2 == 1);
        assert_eq!(
            churn,
            (last / 2) / HELP_BACKLOG as u64 + 1,
            "a churn's announcements"
        );
    }

    /// The floor is the 16th most recent period with items waiting, with
    /// the index of its first item, read off the queue whatever its
    /// periods' sizes, and `None` with fewer.
    #[test]
    fn the_recent_floor_is_the_sixteenth_newest_period_waiting() {
        let mut l: Limbo<u64> = Limbo::new();
        for t in 1..=40u64 {
            l.period = t * 10;
            // Period `10 t` retires `t % 3` items (none: no period).
            for i in 0..t % 3 {
                l.retire(i);
            }
        }
        let periods: Vec<u64> = (1..=40u64).filter(|t| t % 3 != 0).map(|t| t * 10).collect();
        // The floor, and the index of its first item, counted directly.
        let want = |l: &Limbo<u64>| {
            let waiting: Vec<u64> = periods
                .iter()
                .copied()
                .filter(|&p| l.queue.iter().any(|&(q, _)| q == p))
                .collect();
            let floor = *waiting.get(waiting.len().checked_sub(RECENT_RETIRING)?)?;
            Some((floor, l.queue.iter().filter(|&&(q, _)| q < floor).count()))
        };
        let floor = periods[periods.len() - RECENT_RETIRING];
        assert_eq!(l.recent_floor().map(|(p, _)| p), Some(floor));
        while !l.queue.is_empty() {
            assert_eq!(l.recent_floor(), want(&l));
            l.queue.pop_front();
        }
        assert_eq!(l.recent_floor(), None);
    }
}
