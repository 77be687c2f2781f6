//! Drop tickets: a grace period for the drops writers run after their
//! lock, so that a caller can wait for every drop handed out before it
//! began, on whichever thread runs it (a `synchronize` that found the limbo
//! empty must not return while another thread is still inside a removed
//! value's `Drop`).
//!
//! A writer that hands out due items under its lock takes a [`DropTicket`]
//! there ([`Drops::ticket`]: one holder of the crate's two-phase counter,
//! `two_phase.rs`, counted in under the writer lock) and drops it after
//! the items. A waiter ([`Phases::wait_for_drops`]) holds the waiters' lock
//! across two flips, each made by a transaction of the owner (so under the
//! writer lock, which orders every ticket's entry before or after it) and
//! followed by a wait for the parity it ended: the kernel's SRCU, with the
//! writer lock ordering the flips. One waiter at a time is what makes two
//! flips enough (three unserialized flippers could end an empty phase
//! twice and return early), and an ended parity's count only falls while
//! its waiter waits (no flip can bring new tickets to it).

use super::scope::{in_writer_scope, tickets};
use super::two_phase::TwoPhase;
use alloc::sync::Arc;

/// The writer's side of the tickets (under the writer lock).
#[derive(Debug)]
pub(crate) struct Drops {
    /// Made on first use (`new` is `const`, and a ticket may outlive its
    /// owner when its drops are postponed).
    phases: Option<Arc<Phases>>,
}

/// The counter of [`Drops`], shared with tickets and waiters.
#[derive(Debug)]
pub(crate) struct Phases {
    /// Tickets outstanding per parity (one shard: tickets are taken under
    /// the writer lock, one per write that hands out due items).
    counter: TwoPhase<1>,
    /// Held by a waiter across its two flips and waits.
    waiting: crate::sync::Mutex<()>,
}

/// One writer's due drops in flight (see the module docs): dropped after
/// them, on the thread that took it (not `Send`: this thread's ticket
/// count (`scope.rs`) counts it).
#[derive(Debug)]
pub(crate) struct DropTicket {
    phases: Arc<Phases>,
    parity: usize,
    _here: core::marker::PhantomData<*const ()>,
}

impl Drops {
    crate::sync::const_fn_unless_loom! {
        pub(crate) fn new() -> Self {
            Drops { phases: None }
        }
    }

    /// Under the writer lock, before handing out due items: the ticket to
    /// drop once they are dropped.
    pub(crate) fn ticket(&mut self) -> DropTicket {
        let phases = Arc::clone(self.phases.get_or_insert_with(|| {
            Arc::new(Phases {
                counter: TwoPhase::new(),
                waiting: crate::sync::Mutex::new(()),
            })
        }));
        let parity = phases.counter.enter_locked();
        tickets(1);
        DropTicket {
            phases,
            parity,
            _here: core::marker::PhantomData,
        }
    }

    /// Under the writer lock: the counter, if a ticket was ever taken.
    pub(crate) fn phases(&self) -> Option<Arc<Phases>> {
        self.phases.clone()
    }

    /// Under the writer lock, by a waiter holding [`Phases::waiting`]: new
    /// tickets take the other parity from now on; returns the one that
    /// ended.
    pub(crate) fn flip(&mut self) -> usize {
        self.phases.as_ref().map_or(0, |p| p.counter.flip())
    }
}

impl Phases {
    /// Waits until every ticket taken before the call was dropped: two
    /// flips, each run by `flip` (a transaction of the owner that calls
    /// [`Drops::flip`]), each followed by a wait for the parity it ended,
    /// yielding meanwhile. A thread that holds a ticket itself (inside a
    /// due drop, or with one postponed to the end of its outermost write)
    /// would wait for itself, and so would one inside a writer scope (the
    /// flips' own drops would wait for that scope's end): both return at
    /// once (the callers' docs say so).
    pub(crate) fn wait_for_drops(&self, mut flip: impl FnMut() -> usize) {
        if tickets(0) > 0 || in_writer_scope() {
            return;
        }
        let _one_waiter = crate::sync::lock(&self.waiting);
        for _ in 0..2 {
            let ended = flip();
            // Acquire (in `holders`): pairs with each ticket's Release
            // decrement (all of them read-modify-writes, so reading the
            // last one's value synchronizes with every earlier one).
            while self.counter.holders(ended) > 0 {
                crate::sync::wait_hint();
            }
        }
    }
}

impl Drop for DropTicket {
    fn drop(&mut self) {
        tickets(-1);
        // Release (in `exit_parity`): pairs with the Acquire load in
        // `Phases::wait_for_drops`, so that the drops this ticket covered
        // happen-before its return.
        self.phases.counter.exit_parity(self.parity);
    }
}
