//! The calls that run transactions of their own to move reclamation along:
//! [`flush`] (rounds until nothing waits), [`synchronize`] (and its
//! [`wait_for_drops`]), and [`free_shells`]. Each sees its front-end as a
//! [`Front`]: a way to run an empty transaction on its [`Pending`] part.

use super::garbage::Garbage;
use super::job::Job;
use super::scope::in_writer_scope;
use super::writer::{Pending, Reclaim};

/// A front-end, as the calls of this file see it.
pub(crate) trait Front {
    /// What its writes retire.
    type Garbage: Garbage + 'static;

    /// Its reclamation.
    fn reclaim(&self) -> &Reclaim<Self::Garbage>;

    /// Runs `f` on its reclamation's writer part as one transaction that
    /// changes nothing (no flip, not counted), through
    /// [`Reclaim::transact`] like every write: its start hands out what is
    /// due, its end frees it. Panics inside a write of the same front-end.
    fn empty_write<R>(&self, f: impl FnOnce(&mut Pending<Self::Garbage>) -> R) -> R;
}

/// What one flush round found, under the writer lock: the limbo's job,
/// whether items still wait, and whether anything was handed out as due.
struct Round {
    job: Option<Job>,
    left: bool,
    freed: bool,
}

/// A front-end's `flush`: runs rounds (one empty transaction each, which
/// frees what is due and asks for the limbo's job) and their jobs,
/// collecting [`FLUSH_COLLECTS`] times, doubled for each round in a row that
/// freed and announced nothing, until nothing waits, more than
/// [`FLUSH_PATIENCE`] rounds in a row freed and announced nothing (a guard
/// held somewhere keeps the rest), or [`FLUSH_ROUNDS`] rounds ran. So one
/// call works through at least 8 × (16 + 32 + 64 + 128 + 256) = 3,968 bags
/// of other code's garbage queued ahead of the front-end's (a guard held
/// elsewhere makes every flush spend those 496 collections, 504 when its
/// first round announces). Inside another write's scope, one round, whose
/// work waits for that write's end.
pub(crate) fn flush(front: &impl Front) {
    // Every round hands out all that is due, also a backlog the writes
    // hand out a slice at a time (`Limbo::begin`).
    front.reclaim().flushing(|| flush_rounds(front));
}

/// [`flush`]'s rounds.
fn flush_rounds(front: &impl Front) {
    let collector = front.reclaim().collector();
    let round = || {
        front.empty_write(|p| Round {
            job: p.limbo.job(true),
            left: !p.limbo.is_empty(),
            freed: p.handed_out,
        })
    };
    if in_writer_scope() {
        // Nested in another write's closure: what is due is dropped, and the
        // job runs, once that write has released its lock (no collecting
        // under it); waiting for more here could not help.
        if let Some(job) = round().job {
            job.run(collector);
        }
        return;
    }
    let mut idle = 0;
    for _ in 0..FLUSH_ROUNDS {
        let Round { job, left, freed } = round();
        // A round that announces what waits could not have freed it yet:
        // not counted as idle (a write no longer announces each removal,
        // so a flush's first round often does).
        let announces = job.as_ref().is_some_and(Job::announces);
        idle = if freed || announces { 0 } else { idle + 1 };
        if !left || idle > FLUSH_PATIENCE {
            // The round's job still runs: an announcement it made is
            // outstanding from now on (`Limbo::job_with`), and one never
            // deferred would never pass (the limbo would announce nothing
            // again, and free nothing).
            if let Some(job) = job {
                job.run(collector);
            }
            return;
        }
        if let Some(job) = job {
            // Twice as many collections for each round in a row that freed
            // nothing: other code's garbage may be queued ahead (about 2,000
            // bags once took five flushes).
            job.run_collecting(collector, FLUSH_COLLECTS << idle);
        }
    }
}

/// Rounds in a row in which [`flush`] may free and announce nothing before
/// it gives up.
/// An announcement needs two epoch steps after it was sealed and one more
/// round takes what it announced; the rest lets through other garbage
/// queued ahead of the announcement (a guard held elsewhere keeps all of it
/// queued, and then every flush spends these rounds: a small bound keeps
/// that affordable).
const FLUSH_PATIENCE: usize = 5;

/// Collections in a [`flush`] round after one that freed something:
/// crossbeam frees at most 8 sealed bags per collection, oldest first, so
/// this lets such a round work through up to 64 bags of other garbage
/// queued ahead of the front-end's.
const FLUSH_COLLECTS: usize = 8;

/// The most rounds one [`flush`] runs (each frees a whole announced
/// backlog, so a few suffice; the bound keeps a flush finite while other
/// threads keep writing).
const FLUSH_ROUNDS: usize = 32;

/// A front-end's `synchronize`: flushes until everything retired before
/// the call left the limbo (waiting for the readers that keep it: guards,
/// handler sections), then waits for the drops in flight
/// ([`wait_for_drops`]).
pub(crate) fn synchronize(front: &impl Front) {
    let before = front.empty_write(|p| p.limbo.next_period());
    loop {
        flush(front);
        let oldest = front.empty_write(|p| p.limbo.oldest());
        if oldest.is_none_or(|p| p >= before) {
            break;
        }
        crate::sync::wait_hint();
    }
    wait_for_drops(front);
}

/// Waits until the drops that writes (on any thread) took out of the limbo
/// before the call have run (`ticket.rs`). Never waits for a reader.
pub(crate) fn wait_for_drops(front: &impl Front) {
    if let Some(phases) = front.empty_write(|p| p.drops.phases()) {
        phases.wait_for_drops(|| front.empty_write(|p| p.drops.flip()));
    }
}

/// Frees the shells the front-end keeps for reuse (its writer's and its
/// return stack's), after the lock.
pub(crate) fn free_shells(front: &impl Front) {
    let reclaim = front.reclaim();
    let mut shells = front.empty_write(|p| reclaim.take_shells(p));
    shells.free();
}
