//! What a front-end tells reclamation: how one retired item is freed or
//! recycled ([`Garbage`]). Everything else (when, where, on which thread,
//! under which lock not) is the folder's.

use super::return_stack::Shell;
use core::ptr::NonNull;

/// An item a front-end's writes retire (a node, a record, a table
/// segment), as reclamation frees or recycles it once its grace period
/// passed.
pub(crate) trait Garbage: Sized {
    /// What an emptied item's memory becomes, kept for later inserts.
    type Shell: Shell;

    /// Whether the drops handed out to writers take drop tickets
    /// (`ticket.rs`): a front-end whose callers wait for them.
    const TICKETS: bool;

    /// Drops what the item holds for users, containing every user `Drop`
    /// with [`contain`](super::panics::contain) (a panic there belongs to an
    /// entry an earlier write removed), and returns its memory as a shell
    /// for reuse, or frees the memory and returns `None`. Called outside
    /// every writer lock.
    ///
    /// # Safety
    /// The item's grace period passed (no reader can reach it), and it is
    /// emptied once: reclamation hands each item out once.
    unsafe fn empty(self) -> Option<NonNull<Self::Shell>>;
}

/// Frees `item` whole: its user data (contained, as in
/// [`Garbage::empty`]) and its memory.
///
/// # Safety
/// As for [`Garbage::empty`].
pub(crate) unsafe fn free_now<G: Garbage>(item: G) {
    // SAFETY: the caller's contract.
    if let Some(shell) = unsafe { item.empty() } {
        // SAFETY: the shell `empty` handed over, freed once.
        unsafe { G::Shell::free(shell) };
    }
}
