//! Drops that may panic: the one place the crate catches a panic from a
//! user `Drop` ([`catch`]), and the two things it then does with it.
//!
//! * [`contain`]: the drop belongs to an entry an earlier write removed,
//!   and runs at a point no caller of that write can see (after a later
//!   write's lock, in a `flush`, postponed to the end of another write):
//!   its panic is counted ([`swallowed_drop_panics`]) and goes no further.
//! * [`drop_all`]: an owner's own drop of its live entries: every one is
//!   dropped even if some panic, then the first panic resumes in the
//!   owner's caller (unless the thread is already unwinding: resuming would
//!   abort the process), and the others are counted.
//!
//! Without `std` nothing is caught: a panicking `Drop` aborts instead
//! (`crate::unwind`).

use crate::unwind::{AssertUnwindSafe, Payload, catch_unwind, panicking, resume_unwind};

/// Panics from user `Drop`s that could not be propagated, process-wide.
#[cfg(not(latchtree_loom))]
static SWALLOWED_DROP_PANICS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);

/// Counts one panic from a user `Drop` that was caught and not propagated.
fn count() {
    // Relaxed: a statistic; nothing is ordered by it.
    #[cfg(not(latchtree_loom))]
    SWALLOWED_DROP_PANICS.fetch_add(1, crate::sync::Ordering::Relaxed);
}

/// How many panics from a user `Drop` (a `LatchTree` key's or value's, an
/// `AddrIndex` module's value's)
/// were caught and not propagated, in the whole process: during
/// reclamation (which runs at a point where no caller could take the panic:
/// after a later write's lock, in a `flush`, or when another write nested in
/// has ended), after the first one in a tree's or index's own `drop`, and
/// every one when a tree or index is dropped while its thread is already
/// unwinding (resuming would abort the process).
///
/// Process-wide rather than per tree: a retired entry may be reclaimed after
/// its tree is gone. Always 0 under the crate's loom build.
///
/// ```
/// let before = latchtree::swallowed_drop_panics();
/// struct Bomb;
/// impl Drop for Bomb {
///     fn drop(&mut self) {
///         panic!("boom");
///     }
/// }
/// let r = std::panic::catch_unwind(|| {
///     let tree = latchtree::LatchTree::new();
///     tree.insert(1, Bomb);
///     panic!("unwinding drops the tree: its Bomb's panic is counted, not resumed");
/// });
/// assert!(r.is_err());
/// assert!(latchtree::swallowed_drop_panics() > before);
/// ```
pub fn swallowed_drop_panics() -> u64 {
    #[cfg(not(latchtree_loom))]
    {
        SWALLOWED_DROP_PANICS.load(crate::sync::Ordering::Relaxed)
    }
    #[cfg(latchtree_loom)]
    {
        0
    }
}

/// Runs `drop` (code that drops user values), catching a panic out of it.
fn catch(drop: impl FnOnce()) -> Option<Payload> {
    catch_unwind(AssertUnwindSafe(drop)).err()
}

/// Runs `drop`, a user `Drop` whose panic nobody could take: a panic is
/// caught and counted ([`swallowed_drop_panics`]).
#[inline]
pub(crate) fn contain(drop: impl FnOnce()) {
    if catch(drop).is_some() {
        count();
    }
}

/// Runs `drop` on every item of `items`, each even if an earlier one
/// panicked; then resumes the first panic, unless this thread is already
/// unwinding (it is counted then, as every later one is).
pub(crate) fn drop_all<I>(items: impl IntoIterator<Item = I>, mut drop: impl FnMut(I)) {
    let mut first = None;
    for item in items {
        if let Some(p) = catch(|| drop(item)) {
            if first.is_some() || panicking() {
                count();
            } else {
                first = Some(p);
            }
        }
    }
    if let Some(p) = first {
        resume_unwind(p);
    }
}
