//! Cursors: a reader's position on one node of one version, stepped to its
//! in-order neighbour without a stack and without a new descent.
//!
//! A cursor is made by [`RawTree::seek`], a latched read that stops on a
//! node and remembers the `seq` value `s` it was validated at. A
//! [`Cursor::step`] then walks the same copy (`s & 1`) through child and
//! parent links to the neighbour, and validates with the latch's re-check
//! ([`Latch::unchanged`]). Since the reads of every step come after the
//! `Acquire` load of `s` in program order, a cursor is one long latched read
//! of version `s`, validated after each step: a step that passes the
//! re-check returned the true neighbour in version `s`. A step that fails it
//! says so ([`Step::Stale`]); the front-end then seeks again from the root
//! (for an iterator: the successor of the last key it yielded), so that a
//! writer never makes a cursor skip or repeat anything of a version.
//!
//! A step reads only link words (atomics) before it validates; the node's
//! key and value are read by the front-end only after a step passed its
//! re-check, when they belong to version `s` and are visible through the
//! `Acquire` load of `s`. Parent links are stored with `Release` and loaded
//! with `Acquire` like child links (`links.rs`) all the same, so that no
//! argument here rests on that order of reads alone. Each step is capped at
//! [`MAX_DEPTH`] links down and up: a copy rewritten under a slow cursor
//! cannot loop it (its re-check fails). `tests/loom_iter.rs` fails when the
//! re-check is removed.

use super::latch::Latch;
use super::links::{Dir, Linked};
use super::shared::{MAX_DEPTH, View};
use super::tree::RawTree;
use core::ptr;

/// A position on a node of the version validated at `seq`.
pub(crate) struct Cursor<'g, N> {
    node: &'g N,
    seq: u64,
    latch: &'g Latch,
}

impl<N> Clone for Cursor<'_, N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<N> Copy for Cursor<'_, N> {}

impl<N> core::fmt::Debug for Cursor<'_, N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cursor")
            .field("seq", &self.seq)
            .finish_non_exhaustive()
    }
}

/// What [`Cursor::step`] found.
pub(crate) enum Step<'g, N> {
    /// The neighbour, in the same version.
    To(Cursor<'g, N>),
    /// No neighbour on that side in the cursor's version.
    End,
    /// A writer flipped the latch since the cursor's version: seek again.
    Stale,
}

impl<N: Linked, W> RawTree<N, W> {
    /// A latched read whose answer is a node to stand on: `attempt` returns
    /// `None` for a torn walk (retried), `Some(None)` for "no such node".
    ///
    /// # Safety
    /// As for [`RawTree::read`], for the attempt and for every later
    /// [`Cursor::step`] from the returned cursor: every node reachable
    /// through any link ever stored in this tree while they run stays
    /// allocated for `'g`.
    #[inline]
    pub(crate) unsafe fn seek<'g>(
        &'g self,
        mut attempt: impl FnMut(View<'g, N>) -> Option<Option<&'g N>>,
    ) -> Option<Cursor<'g, N>> {
        let s = &self.shared;
        let (found, seq) = s.latch.read_versioned(|copy| {
            attempt(View {
                root: &s.heads[copy].root,
                len: &s.heads[copy].len,
                descent: &s.heads[copy].descent,
                copy,
            })
        });
        found.map(|node| Cursor {
            node,
            seq,
            latch: &s.latch,
        })
    }
}

impl<'g, N: Linked> Cursor<'g, N> {
    /// The node the cursor stands on.
    #[inline(always)]
    pub(crate) fn node(self) -> &'g N {
        self.node
    }

    /// The in-order neighbour in direction `dir` (`Right`: the successor),
    /// in the cursor's version.
    #[inline]
    pub(crate) fn step(self, dir: Dir) -> Step<'g, N> {
        let found = neighbour(self.node, (self.seq & 1) as usize, dir);
        if !self.latch.unchanged(self.seq) {
            self.latch.count_retry();
            return Step::Stale;
        }
        match found {
            Some(Some(node)) => Step::To(Cursor { node, ..self }),
            Some(None) => Step::End,
            // Over the cap in a version that did not change: impossible (the
            // checker bounds every path); seeking again is always safe.
            None => Step::Stale,
        }
    }
}

/// The neighbour of `node` toward `dir` in copy `copy`: `Some(None)` if there
/// is none, `None` if the walk exceeded the cap (a torn copy).
#[inline(always)]
fn neighbour<N: Linked>(node: &N, copy: usize, dir: Dir) -> Option<Option<&N>> {
    // By `RawTree::seek`'s contract every pointer a cursor can load from
    // this tree, child or parent, points to memory valid for as long as the
    // cursor's `node` borrow; `Acquire` loads make its fields visible.
    // SAFETY: so this dereference (and each one below) is valid.
    if let Some(mut n) = unsafe { node.links(copy).load_child(dir).as_ref() } {
        // Down one step toward `dir`, then as far as possible the other way.
        for _ in 0..MAX_DEPTH {
            // SAFETY: see above.
            match unsafe { n.links(copy).load_child(dir.flip()).as_ref() } {
                None => return Some(Some(n)),
                Some(c) => n = c,
            }
        }
        return None;
    }
    // Up while we are the `dir` child: the first ancestor reached from its
    // other side is the neighbour.
    let mut x = node;
    for _ in 0..MAX_DEPTH {
        // SAFETY: see above.
        let Some(p) = (unsafe { x.links(copy).load_parent().as_ref() }) else {
            return Some(None);
        };
        if !ptr::eq(p.links(copy).load_child(dir), x) {
            return Some(Some(p));
        }
        x = p;
    }
    None
}
