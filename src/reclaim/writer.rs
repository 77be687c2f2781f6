//! The engine both front-ends write through: [`Reclaim`] (a front-end's
//! reclamation, beside its tree), [`Pending`] (its part under the writer
//! lock, in the front-end's writer state) and [`Transaction`] (one write's
//! part: what it does under the lock, and after it).
//!
//! A front-end's write is
//!
//! ```text
//! reclaim.transact(|tx| tree.write(
//!     |txn, w| { tx.begin(&mut w.pending, sections); body(txn, w) },
//!     publish,
//!     |w, node| tx.retire(&mut w.pending, node),
//! ))
//! ```
//!
//! and the engine does the rest: `begin` hands out what became due (the
//! epoch's and the sections' grace periods both passed) with a drop ticket,
//! takes the shells given back since the last write, and asks the limbo
//! for its job; `retire` puts what left both copies into the limbo; once
//! the lock is released (also when unwinding), the transaction's drop
//! empties the due items and gives their shells back (or, nested in another
//! write, postpones freeing them to the end of the outermost one), ends the
//! ticket, and runs the job.

use super::collector::Reclaimer;
use super::garbage::{Garbage, free_now};
use super::job::Job;
use super::limbo::Limbo;
use super::return_stack::{Chain, ReturnStack, Spares};
use super::scope::{WriterScope, after_outermost_write, in_writer_scope};
use super::section::{SectionClock, Sections};
use super::ticket::{DropTicket, Drops};
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::cell::Cell;
use core::mem::ManuallyDrop;
use crossbeam_epoch::Guard;

/// The capacity a due-items buffer keeps between writes.
const DUE_KEPT: usize = 2 * super::limbo::HELP_BACKLOG;

/// A front-end's reclamation, outside its writer lock.
pub(crate) struct Reclaim<G: Garbage> {
    /// Which collector its readers pin (read by every guarded read).
    collector: Reclaimer,
    /// What the threads that run due drops hand back, on lines of its own.
    returns: Returns<G>,
}

/// What the threads that run a front-end's due drops hand back to its
/// writer, on cache lines that readers never touch.
#[repr(align(128))]
struct Returns<G: Garbage> {
    /// The emptied items' memory.
    shells: ReturnStack<G::Shell>,
    /// A due-items buffer, back from the thread that ran its drops, for the
    /// next write that hands some out (no allocation once warm).
    due_buffer: crate::sync::Mutex<Vec<G>>,
    /// `flush` calls running: while any does, a write hands out everything
    /// due, however large the backlog (`Limbo::begin`'s `uncapped`).
    flushing: crate::sync::AtomicUsize,
}

impl<G: Garbage> core::fmt::Debug for Reclaim<G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Reclaim")
            .field("collector", &self.collector)
            .field("shells", &self.returns.shells)
            .finish_non_exhaustive()
    }
}

/// A front-end's reclamation under its writer lock: a field of its writer
/// state.
pub(crate) struct Pending<G: Garbage> {
    /// What its transactions retired, waiting for the grace periods.
    pub(super) limbo: Limbo<G>,
    /// The buffer the next transaction collects its due items in.
    due: Vec<G>,
    /// Shells ready for reuse by the running transaction's inserts.
    shells: Spares<G::Shell>,
    /// The handler sections' grace period (`section.rs`), for a front-end
    /// that has them.
    clock: SectionClock,
    /// Due drops in flight (`ticket.rs`).
    pub(super) drops: Drops,
    /// Whether the running transaction handed out due items.
    pub(super) handed_out: bool,
}

impl<G: Garbage> core::fmt::Debug for Pending<G> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pending")
            .field("limbo", &self.limbo)
            .field("shells", &self.shells)
            .finish_non_exhaustive()
    }
}

/// One write's part of reclamation (see the module docs): made by
/// [`Reclaim::transact`] before the lock; its drop runs after it.
pub(crate) struct Transaction<'a, G: Garbage + 'static> {
    reclaim: &'a Reclaim<G>,
    /// What `begin` handed out, to empty after the lock (`None`, one word,
    /// in most writes). Taken by the drop (no drop glue of its own).
    due: ManuallyDrop<Cell<Option<Due<G>>>>,
    /// The limbo's job, set by `begin` or the first `retire`. Taken by the
    /// drop.
    job: ManuallyDrop<Cell<Option<Job>>>,
}

/// Items a transaction handed out, and the ticket taken with them.
struct Due<G> {
    items: Vec<G>,
    /// Ended after the items were emptied (`ticket.rs`).
    ticket: Option<DropTicket>,
}

impl<G: Garbage> Reclaim<G> {
    crate::sync::const_fn_unless_loom! {
        /// Reclamation for a front-end whose readers pin `collector`.
        pub(crate) fn new(collector: Reclaimer) -> Self {
            Reclaim {
                collector,
                returns: Returns {
                    shells: ReturnStack::new(),
                    due_buffer: crate::sync::Mutex::new(Vec::new()),
                    flushing: crate::sync::AtomicUsize::new(0),
                },
            }
        }
    }

    /// Which collector the front-end's readers pin.
    pub(crate) fn collector(&self) -> &Reclaimer {
        &self.collector
    }

    /// Pins the front-end's collector ([`Reclaimer::pin`]).
    pub(crate) fn pin(&self) -> Guard {
        self.collector.pin()
    }

    /// Panics unless `guard` pins the front-end's collector
    /// ([`Reclaimer::check_guard`]).
    #[inline(always)]
    pub(crate) fn check_guard(&self, guard: &Guard) {
        self.collector.check_guard(guard);
    }

    /// A collector handle for another front-end that uses the same one.
    pub(crate) fn same_collector(&self) -> Reclaimer {
        self.collector.same_collector()
    }

    /// Runs `write` (one transaction of the front-end's tree, whose hooks
    /// call [`Transaction::begin`] and [`Transaction::retire`]) inside a
    /// writer scope; then, after the writer lock is released, also when
    /// `write` unwinds, the transaction's after-lock work (module docs).
    #[inline(always)]
    pub(crate) fn transact<R>(&self, write: impl FnOnce(&Transaction<'_, G>) -> R) -> R
    where
        G: 'static,
    {
        // Dropped after the scope below ends, so after the writer lock is
        // released, also when unwinding.
        let tx = Transaction {
            reclaim: self,
            due: ManuallyDrop::new(Cell::new(None)),
            job: ManuallyDrop::new(Cell::new(None)),
        };
        // From before the lock until after it: what a nested write (or a
        // pin inside the body) would run under the lock is postponed until
        // the scope ends (`scope.rs`).
        let _scope = WriterScope::enter();
        write(&tx)
    }

    /// Empties the due items (their user data dropped, each `Drop`
    /// contained), gives their shells back, and the buffer too: after the
    /// lock, outside every writer scope.
    fn recycle(&self, mut due: Vec<G>) {
        let mut shells = Chain::new();
        for item in due.drain(..) {
            // SAFETY: handed out once by the limbo, its grace period passed.
            if let Some(shell) = unsafe { item.empty() } {
                // SAFETY: the shell `empty` handed over.
                unsafe { shells.push(shell) };
            }
        }
        self.returns.shells.give(shells);
        // Not a mass removal's capacity, for good.
        due.shrink_to(DUE_KEPT);
        let mut slot = crate::sync::lock(&self.returns.due_buffer);
        if slot.capacity() < due.capacity() {
            *slot = due;
        }
    }

    /// Runs `f` (a `flush`) with every write of the front-end handing out
    /// all that is due, whatever the backlog (also when `f` unwinds).
    pub(crate) fn flushing<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Running<'a>(&'a crate::sync::AtomicUsize);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                // Relaxed: see `Transaction::begin`.
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.returns.flushing.fetch_add(1, Ordering::Relaxed);
        let _running = Running(&self.returns.flushing);
        f()
    }

    /// Under the writer lock: every shell the writer holds and the return
    /// stack's, taken whole, to be freed (a `flush` that gives memory back).
    pub(crate) fn take_shells(&self, p: &mut Pending<G>) -> Chain<G::Shell> {
        p.shells.take_all(&self.returns.shells)
    }
}

impl<G: Garbage + 'static> Transaction<'_, G> {
    /// Starts the transaction's reclamation, under the writer lock before
    /// the body: hands out what is due (past the epoch's grace period and,
    /// for a front-end with handler `sections`, theirs), with a drop ticket
    /// if the front-end takes them; takes the shells given back; sets the
    /// limbo's job.
    #[inline(always)]
    pub(crate) fn begin(&self, p: &mut Pending<G>, sections: Option<&Sections>) {
        p.handed_out = false;
        let also = match sections {
            // Sections are polled only for items the epoch already let go
            // (never under loom, where it keeps everything: the models stay
            // small).
            Some(s) => {
                let waiting = p.limbo.epoch_due();
                let period = p.limbo.next_period();
                p.clock.poll(s, period, waiting)
            }
            None => u64::MAX,
        };
        let mut job = None;
        // Into the writer's buffer, handed on with the items if any are due
        // (and back by `recycle`).
        let due = &mut p.due;
        // Relaxed: a policy, not a protocol; a flush's own rounds read
        // what its thread stored before them.
        let uncapped = || self.reclaim.returns.flushing.load(Ordering::Relaxed) != 0;
        p.limbo
            .begin(also, uncapped, |item| due.push(item), &mut job);
        // The cell is empty (each transaction begins once): nothing to drop.
        let old = self.job.replace(job);
        debug_assert!(old.is_none(), "a transaction began twice");
        core::mem::forget(old);
        if !p.due.is_empty() {
            self.hand_out(p);
        }
        p.shells.refill(&self.reclaim.returns.shells);
    }

    /// Hands the items `begin` found due over to the after-lock work, with
    /// a ticket, and gives the writer a buffer for the next ones.
    #[inline(never)]
    fn hand_out(&self, p: &mut Pending<G>) {
        p.handed_out = true;
        let ticket = G::TICKETS.then(|| p.drops.ticket());
        let spare = core::mem::take(&mut *crate::sync::lock(&self.reclaim.returns.due_buffer));
        let items = core::mem::replace(&mut p.due, spare);
        // The cell is empty (`begin` runs once): nothing to drop.
        let old = self.due.replace(Some(Due { items, ticket }));
        debug_assert!(old.is_none(), "a transaction began twice");
        core::mem::forget(old);
    }

    /// Retires `item`, which left every copy readers can reach in this
    /// transaction (under the writer lock: the tree's release hook).
    #[inline]
    pub(crate) fn retire(&self, p: &mut Pending<G>, item: G) {
        if p.limbo.retire(item) {
            let mut job = self.job.take();
            p.limbo.on_retirement(&mut job);
            // Taken just above: the cell is empty.
            core::mem::forget(self.job.replace(job));
        }
    }
}

impl<G: Garbage + 'static> Drop for Transaction<'_, G> {
    /// After the writer lock (see [`Reclaim::transact`]); takes both
    /// fields, so nothing is left to the drop glue.
    fn drop(&mut self) {
        if let Some(due) = self.due.take() {
            self.reclaim.empty_due(due);
        }
        if let Some(job) = self.job.take() {
            job.run(&self.reclaim.collector);
        }
    }
}

impl<G: Garbage + 'static> Reclaim<G> {
    /// Empties what a transaction handed out, after its lock, then ends its
    /// ticket: now, or inside another write (its batch closure: no user
    /// `Drop` under its lock) freed whole once the outermost one ends.
    #[inline(never)]
    fn empty_due(&self, Due { items, ticket }: Due<G>) {
        if in_writer_scope() {
            after_outermost_write(move || {
                for item in items {
                    // SAFETY: handed out once by the limbo, its grace period
                    // passed.
                    unsafe { free_now(item) };
                }
                drop(ticket);
            });
        } else {
            self.recycle(items);
            drop(ticket);
        }
    }
}

impl<G: Garbage> Pending<G> {
    crate::sync::const_fn_unless_loom! {
        /// Nothing waits.
        pub(crate) fn new() -> Self {
            Pending {
                limbo: Limbo::new(),
                due: Vec::new(),
                shells: Spares::new(),
                clock: SectionClock::new(),
                drops: Drops::new(),
                handed_out: false,
            }
        }
    }

    /// The shells the running transaction's inserts reuse.
    #[inline]
    pub(crate) fn shells(&mut self) -> &mut Spares<G::Shell> {
        &mut self.shells
    }

    /// Every item still waiting, taken out, and the waiting list's memory
    /// given back: for the owner's `Drop` and `shrink_to_fit` (`&mut`: no
    /// reader is left, so their grace periods are over), which free them
    /// ([`free_now`]) with no lock held.
    pub(crate) fn take_waiting(&mut self) -> Vec<G> {
        let mut waiting: Vec<G> = self.limbo.drain().collect();
        // Due but not handed over (nothing can panic in between today).
        waiting.append(&mut self.due);
        self.limbo.shrink_to_fit();
        self.due = Vec::new();
        waiting
    }
}
