//! The crate's one return stack: how the memory of emptied items
//! ([`Shell`]s) gets back to the writer that reuses it.
//!
//! Items are emptied after the writer lock, by whichever thread ran the
//! write that found them due; their shells go back through a
//! [`ReturnStack`], a push-only (Treiber) stack that any thread pushes a
//! whole [`Chain`] onto and the writer takes whole, under its lock, into
//! its [`Spares`]. Only the writer takes, and it takes everything, so no
//! pointer is ever popped while another thread may push it again: no ABA.
//!
//! **Bounded**: the shells on the stack and those the writer holds stay
//! within [`Shell::KEPT`] (about: the counts are read racily, and a chain
//! pushed while the writer takes may be counted late). A giver keeps only
//! what fits and frees the rest itself, after the lock; the writer frees
//! what it takes beyond the bound (memory only: no user code).

use crate::sync::{AtomicPtr, AtomicUsize, Ordering};
use core::ptr::{self, NonNull};

/// The memory of an emptied item, kept for reuse.
///
/// # Safety
/// [`next`](Shell::next) and [`set_next`](Shell::set_next) read and write a
/// link word in the shell's own memory that nothing else reads or writes
/// while the shell is in a [`Chain`] or on a [`ReturnStack`] (its user data
/// is gone and no reader can reach it), and [`free`](Shell::free) frees
/// that memory without running user code.
pub(crate) unsafe trait Shell: Sized {
    /// The most shells a front-end keeps for reuse: its writer's and its
    /// return stack's together.
    const KEPT: usize;

    /// The shell after `this` in its chain.
    ///
    /// # Safety
    /// `this` is a shell the caller holds.
    unsafe fn next(this: NonNull<Self>) -> *mut Self;

    /// Links `next` after `this`.
    ///
    /// # Safety
    /// `this` is a shell the caller holds.
    unsafe fn set_next(this: NonNull<Self>, next: *mut Self);

    /// Frees the shell's memory.
    ///
    /// # Safety
    /// `this` is a shell the caller holds and never uses again.
    unsafe fn free(this: NonNull<Self>);
}

/// Shells one owner holds, linked through their link words; freed if
/// dropped.
pub(crate) struct Chain<S: Shell> {
    head: *mut S,
    /// The last shell (null when empty), for pushing the chain whole.
    tail: *mut S,
    len: usize,
}

impl<S: Shell> core::fmt::Debug for Chain<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Chain").field("len", &self.len).finish()
    }
}

impl<S: Shell> Chain<S> {
    /// No shell.
    pub(crate) const fn new() -> Self {
        Chain {
            head: ptr::null_mut(),
            tail: ptr::null_mut(),
            len: 0,
        }
    }

    /// Adds `shell` in front.
    ///
    /// # Safety
    /// `shell` is a shell the caller hands over: nobody else holds or
    /// reaches it.
    pub(crate) unsafe fn push(&mut self, shell: NonNull<S>) {
        // SAFETY: the caller hands it over: ours to link.
        unsafe { S::set_next(shell, self.head) };
        if self.head.is_null() {
            self.tail = shell.as_ptr();
        }
        self.head = shell.as_ptr();
        self.len += 1;
    }

    /// Takes the front shell, now the caller's alone.
    pub(crate) fn pop(&mut self) -> Option<NonNull<S>> {
        let shell = NonNull::new(self.head)?;
        // SAFETY: a shell of this chain, which holds it.
        self.head = unsafe { S::next(shell) };
        self.len -= 1;
        if self.head.is_null() {
            self.tail = ptr::null_mut();
        }
        Some(shell)
    }

    /// Takes the chain's first and last shells (the whole chain, linked),
    /// leaving it empty.
    fn take_ends(&mut self) -> Option<(NonNull<S>, NonNull<S>)> {
        let first = NonNull::new(core::mem::replace(&mut self.head, ptr::null_mut()))?;
        let last = NonNull::new(core::mem::replace(&mut self.tail, ptr::null_mut()))?;
        self.len = 0;
        Some((first, last))
    }

    /// Frees every shell past the first `keep`.
    fn truncate(&mut self, keep: usize) {
        if keep >= self.len {
            return;
        }
        let mut rest = Chain::new();
        core::mem::swap(&mut rest, self);
        for _ in 0..keep {
            if let Some(s) = rest.pop() {
                // SAFETY: taken off `rest` just now: ours to hand over.
                unsafe { self.push(s) };
            }
        }
        rest.free();
    }

    /// Frees every shell (memory only, no user code).
    pub(crate) fn free(&mut self) {
        while let Some(s) = self.pop() {
            // SAFETY: taken off the chain, which held it; freed once.
            unsafe { S::free(s) };
        }
    }
}

impl<S: Shell> Drop for Chain<S> {
    fn drop(&mut self) {
        self.free();
    }
}

/// See the module docs. Givers and the writer touch it, readers never do:
/// its owner keeps it off readers' cache lines (`writer.rs`).
pub(crate) struct ReturnStack<S: Shell> {
    /// The pushed shells, linked through their link words.
    head: AtomicPtr<S>,
    /// Shells pushed and not yet taken, about: a giver counts its shells
    /// in before it pushes them, the writer counts out what it took.
    pushed: AtomicUsize,
    /// The shells the writer holds ([`Spares`]), as it last published.
    held: AtomicUsize,
}

impl<S: Shell> core::fmt::Debug for ReturnStack<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ReturnStack")
            .field("pushed", &self.pushed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<S: Shell> ReturnStack<S> {
    crate::sync::const_fn_unless_loom! {
        /// No shell.
        pub(crate) fn new() -> Self {
            ReturnStack {
                head: AtomicPtr::new(ptr::null_mut()),
                pushed: AtomicUsize::new(0),
                held: AtomicUsize::new(0),
            }
        }
    }

    /// Hands `chain` back, from any thread and no lock: keeps what fits
    /// within [`Shell::KEPT`] with what the writer holds, and frees the
    /// rest here.
    pub(crate) fn give(&self, mut chain: Chain<S>) {
        let k = chain.len;
        if k == 0 {
            return;
        }
        // Relaxed: an approximate bound on memory; the CAS below publishes
        // the shells.
        let before = self.pushed.fetch_add(k, Ordering::Relaxed);
        // Relaxed: as above.
        let held = self.held.load(Ordering::Relaxed);
        let room = S::KEPT.saturating_sub(before.saturating_add(held));
        if room < k {
            // Relaxed: as above.
            self.pushed.fetch_sub(k - room, Ordering::Relaxed);
            chain.truncate(room);
        }
        // The chain's shells are the stack's from the CAS on.
        let Some((first, last)) = chain.take_ends() else {
            return;
        };
        // Relaxed: the CAS below publishes.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `last` is the giver's until the CAS publishes it.
            unsafe { S::set_next(last, head) };
            // Release: pairs with the Acquire swap in `Spares::refill`, so
            // the links and everything the giver did to the shells (the
            // drops of their items' user data) happen before their reuse.
            match self.head.compare_exchange_weak(
                head,
                first.as_ptr(),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(h) => head = h,
            }
        }
    }

    /// Frees every shell on the stack (`&mut`: no giver runs).
    fn free_all(&mut self) {
        // Relaxed: `&mut self` (loom's atomics have no `get_mut`): whatever
        // handed this thread the stack ordered the givers' pushes before.
        let mut next = self.head.swap(ptr::null_mut(), Ordering::Relaxed);
        while let Some(s) = NonNull::new(next) {
            // SAFETY: `&mut self`: the stack's shells are ours alone.
            next = unsafe { S::next(s) };
            // SAFETY: as above; each freed once.
            unsafe { S::free(s) };
        }
        // Relaxed: as above.
        self.pushed.store(0, Ordering::Relaxed);
    }
}

impl<S: Shell> Drop for ReturnStack<S> {
    fn drop(&mut self) {
        self.free_all();
    }
}

/// The writer's shells (under its lock): taken from the [`ReturnStack`] at
/// each transaction's start, popped by its inserts; freed if dropped.
pub(crate) struct Spares<S: Shell> {
    list: Chain<S>,
    /// What the stack was last told the writer holds.
    published: usize,
}

impl<S: Shell> core::fmt::Debug for Spares<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Spares").field("held", &self.list).finish()
    }
}

impl<S: Shell> Spares<S> {
    /// No shell.
    pub(crate) const fn new() -> Self {
        Spares {
            list: Chain::new(),
            published: 0,
        }
    }

    /// A shell for an insert, now the caller's alone, if one is held.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<NonNull<S>> {
        self.list.pop()
    }

    /// Under the writer lock, at a transaction's start: takes what was
    /// handed back (keeping up to [`Shell::KEPT`], freeing the rest), and
    /// tells the stack how many the writer holds.
    #[inline]
    pub(crate) fn refill(&mut self, stack: &ReturnStack<S>) {
        // Relaxed: a hint, skipping the swap when nothing was returned.
        if !stack.head.load(Ordering::Relaxed).is_null() {
            self.take(stack);
        }
        if self.list.len != self.published {
            self.published = self.list.len;
            // Relaxed: an approximate bound (module docs).
            stack.held.store(self.published, Ordering::Relaxed);
        }
    }

    /// Takes the stack's shells whole.
    fn take(&mut self, stack: &ReturnStack<S>) {
        // Acquire: pairs with the Release CAS in `ReturnStack::give`.
        let mut next = stack.head.swap(ptr::null_mut(), Ordering::Acquire);
        let mut taken = 0;
        while let Some(s) = NonNull::new(next) {
            // SAFETY: the swap made this writer the only holder of the
            // taken shells.
            next = unsafe { S::next(s) };
            taken += 1;
            if self.list.len < S::KEPT {
                // SAFETY: as above: handed over to the list.
                unsafe { self.list.push(s) };
            } else {
                // SAFETY: as above; freed once (memory only).
                unsafe { S::free(s) };
            }
        }
        // Relaxed: an approximate bound; every taken shell was counted in
        // by its giver before its push (which the swap read).
        stack.pushed.fetch_sub(taken, Ordering::Relaxed);
    }

    /// Every shell the writer holds and the stack's, taken whole (to free
    /// them: `flush`, `shrink_to_fit`); the writer holds none afterwards.
    pub(crate) fn take_all(&mut self, stack: &ReturnStack<S>) -> Chain<S> {
        let mut all = core::mem::replace(&mut self.list, Chain::new());
        // Acquire: pairs with the Release CAS in `ReturnStack::give`.
        let mut next = stack.head.swap(ptr::null_mut(), Ordering::Acquire);
        let mut taken = 0;
        while let Some(s) = NonNull::new(next) {
            // SAFETY: the swap made this writer the only holder of the
            // taken shells.
            next = unsafe { S::next(s) };
            taken += 1;
            // SAFETY: as above: handed over to the chain.
            unsafe { all.push(s) };
        }
        // Relaxed: as in `take`.
        stack.pushed.fetch_sub(taken, Ordering::Relaxed);
        self.published = 0;
        // Relaxed: as in `refill`.
        stack.held.store(0, Ordering::Relaxed);
        all
    }
}

/// The stack's bound and hand-over, with a shell that counts itself.
#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use super::{Chain, ReturnStack, Shell, Spares};
    use alloc::boxed::Box;
    use core::ptr::{self, NonNull};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    /// Live test shells, process-wide (one test uses them).
    static LIVE: AtomicUsize = AtomicUsize::new(0);

    struct TestShell {
        next: *mut TestShell,
    }

    // SAFETY: `next` is the shell's own word; `free` frees its box.
    unsafe impl Shell for TestShell {
        const KEPT: usize = 4;

        unsafe fn next(this: NonNull<Self>) -> *mut Self {
            // SAFETY: the caller holds the shell.
            unsafe { (*this.as_ptr()).next }
        }

        unsafe fn set_next(this: NonNull<Self>, next: *mut Self) {
            // SAFETY: the caller holds the shell.
            unsafe { (*this.as_ptr()).next = next };
        }

        unsafe fn free(this: NonNull<Self>) {
            LIVE.fetch_sub(1, Relaxed);
            // SAFETY: a box from `chain_of`, freed once.
            drop(unsafe { Box::from_raw(this.as_ptr()) });
        }
    }

    fn chain_of(n: usize) -> Chain<TestShell> {
        let mut c = Chain::new();
        for _ in 0..n {
            LIVE.fetch_add(1, Relaxed);
            let s = NonNull::from(Box::leak(Box::new(TestShell {
                next: ptr::null_mut(),
            })));
            // SAFETY: fresh, ours.
            unsafe { c.push(s) };
        }
        c
    }

    #[test]
    fn givers_keep_at_most_kept_with_what_the_writer_holds() {
        let stack = ReturnStack::new();
        let mut spares = Spares::new();
        stack.give(chain_of(3));
        stack.give(chain_of(3));
        assert_eq!(LIVE.load(Relaxed), 4, "the giver frees what does not fit");
        spares.refill(&stack);
        assert_eq!(spares.list.len, 4);
        // The writer holds 4 (published): nothing more fits.
        stack.give(chain_of(2));
        assert_eq!(LIVE.load(Relaxed), 4);
        // Two reused: two fit again once the next write publishes it.
        let a = spares.pop().unwrap();
        let b = spares.pop().unwrap();
        spares.refill(&stack);
        stack.give(chain_of(3));
        assert_eq!(LIVE.load(Relaxed), 6, "4 kept + the 2 popped");
        spares.refill(&stack);
        assert_eq!(spares.list.len, 4);
        for s in [a, b] {
            // SAFETY: popped above, ours; freed once.
            unsafe { TestShell::free(s) };
        }
        let mut all = spares.take_all(&stack);
        assert_eq!(all.len, 4);
        all.free();
        stack.give(chain_of(1));
        drop(stack);
        drop(spares);
        assert_eq!(LIVE.load(Relaxed), 0, "dropping frees every shell");
    }
}
