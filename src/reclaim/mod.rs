//! Writer-side reclamation, once for both front-ends: how what a write took
//! out of the tree (a `LatchTree` node, an `AddrIndex` record or table
//! segment) is dropped, freed or recycled once no reader can reach it.
//!
//! A front-end says how one retired item is emptied and what its memory
//! becomes ([`Garbage`], with its [`Shell`]); it wraps each write of its
//! tree in [`Reclaim::transact`] and calls [`Transaction::begin`] at the
//! body's start and [`Transaction::retire`] from the tree's release hook;
//! its `flush` is [`flush()`], its `synchronize` [`synchronize`], its `Drop`
//! frees what [`Pending::take_waiting`] hands it with [`free_now`]. This
//! folder does the rest.
//!
//! # Files
//!
//! | file | owns |
//! |---|---|
//! | `writer.rs` | the engine: [`Reclaim`] (beside the tree), [`Pending`] (under its writer lock), [`Transaction`] (one write's part, under the lock and after it) |
//! | `garbage.rs` | [`Garbage`]: what a front-end says about one item |
//! | `limbo.rs` | [`Limbo`]: retired items by period, waiting for the epoch |
//! | `job.rs` | [`Job`]: the announcement deferred through the epoch, and the flushes that move it |
//! | `flush.rs` | [`Front`]; [`flush()`], [`synchronize`], [`wait_for_drops`], [`free_shells`] |
//! | `scope.rs` | [`WriterScope`]: work postponed until a thread holds no writer lock |
//! | `two_phase.rs` | [`TwoPhase`]: the one two-phase counter |
//! | `section.rs` | [`Sections`], [`SectionClock`]: handler sections' grace period, on the counter |
//! | `ticket.rs` | [`Drops`], [`DropTicket`]: the drops in flight, on the counter |
//! | `return_stack.rs` | [`ReturnStack`], [`Spares`], [`Chain`], [`Shell`]: the one return stack |
//! | `panics.rs` | [`contain`], [`drop_all`]: the one helper for drops that may panic; [`swallowed_drop_panics`] |
//! | `collector.rs` | [`Reclaimer`], [`pin`], [`default_collector`]: which epoch collector readers pin |
//!
//! # Promises
//!
//! * **When.** An item is emptied only once every reader that could reach
//!   it is gone: every guard pinned before the write that retired it (an
//!   announcement deferred after that write's lock has run, [`Limbo`]),
//!   and for a front-end with handler sections every section open when it
//!   was unlinked ([`SectionClock`]). A later write of the same front-end
//!   empties it, or [`flush()`], or the owner's drop (`&mut`: no reader
//!   left).
//! * **Where.** On the thread of that write, flush or drop; never by a
//!   reader, never inside a reader's pin (the epoch only ever runs an
//!   announcement: a store to an atomic).
//! * **Never under a lock.** A write empties what it handed out after its
//!   own writer lock is released; inside another write (a batch closure of
//!   another tree, a [`WriterScope`] the objects layer holds) it postpones
//!   freeing them, and running its job, until the thread's outermost scope
//!   ends ([`after_outermost_write`]): no user `Drop`, no deferred
//!   destructor and no collecting pin runs under a writer lock, on any
//!   path, unwinding included (a transaction's after-lock work is a drop
//!   guard). Under the lock the engine only moves pointers, counts, and
//!   frees shells' memory beyond [`Shell::KEPT`] (no user code).
//! * **Panics.** A panic from a user `Drop` during reclamation is contained
//!   and counted ([`swallowed_drop_panics`]); an owner's drop of its live
//!   entries resumes the first ([`drop_all`]).
//! * **How much waits.** At most one announcement per front-end is
//!   outstanding; writes that find items waiting help the epoch along
//!   ([`HELP_EVERY`](limbo::HELP_EVERY), [`HELP_BACKLOG`](limbo::HELP_BACKLOG)),
//!   so a front-end whose later writes only insert, with no reader at all,
//!   still frees what it removed; [`flush()`] frees everything no reader holds.
//! * **Memory.** Emptied items' memory is reused by later inserts, up to
//!   [`Shell::KEPT`] per front-end; the rest goes back to the allocator.
//! * **Waiting.** [`synchronize`] waits for the readers that keep items and
//!   for the drops in flight on other threads ([`DropTicket`]); nothing
//!   else here waits for a reader or for another thread's drops (writers
//!   only take a short lock on the due-items buffer they hand back).
//!
//! This folder imports only the crate's floor (`sync`, `unwind`) and
//! crossbeam-epoch: no tree, no front-end.

mod collector;
mod flush;
mod garbage;
mod job;
mod limbo;
mod panics;
mod return_stack;
mod scope;
pub(crate) mod section;
mod ticket;
mod two_phase;
mod writer;

pub(crate) use collector::Reclaimer;
pub use collector::{default_collector, pin};
pub(crate) use flush::{Front, flush, free_shells, synchronize};
pub(crate) use garbage::{Garbage, free_now};
pub use panics::swallowed_drop_panics;
pub(crate) use panics::{contain, drop_all};
pub(crate) use return_stack::{Shell, Spares};
// For `LoadedObjects`, which holds a writer scope across its own lock and
// waits for the drops its refreshes handed out.
pub(crate) use scope::after_outermost_write;
pub(crate) use section::Sections;
pub(crate) use writer::{Pending, Reclaim, Transaction};
#[cfg_attr(
    not(all(feature = "objects", target_os = "linux", target_pointer_width = "64")),
    allow(unused_imports)
)]
pub(crate) use {flush::wait_for_drops, scope::WriterScope};

#[cfg(doc)]
use {
    job::Job,
    limbo::Limbo,
    return_stack::{Chain, ReturnStack},
    section::SectionClock,
    ticket::{DropTicket, Drops},
    two_phase::TwoPhase,
};
