//! A write in progress ([`Txn`]), as the front-end sees it: every change
//! is applied to copy 0 at once and recorded in the log of structural
//! operations ([`Op`]) that `RawTree::write` (`tree.rs`, where the whole
//! transaction is described) replays on copy 1 after the commit's flip, or
//! undoes on a rollback. What the writer knows of copy 0's shape across
//! transactions, and when it is rebuilt, is `shape/`'s.

use super::links::{Dir, HEIGHTS_MAX, Linked, link_store_order};
use super::rbtree::Side;
use super::shape::{Shape, rebuild_due};
use super::shared::Shared;
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

/// One change of copy 0's content ([`Txn::changes`]).
#[derive(Debug)]
pub(crate) enum Change<'a, N> {
    /// This node now holds its key (inserted, or replacing the one before).
    Put(&'a N),
    /// This node's key left the tree.
    Erase(&'a N),
    /// Every key left the tree.
    Clear,
}

/// What [`Txn::find`] found in copy 0.
#[derive(Debug)]
pub(crate) enum Slot<N> {
    /// The search stopped on this node.
    Occupied(NonNull<N>),
    /// The search fell off the tree: a new node would hang here, `depth`
    /// nodes from the root (itself included).
    Vacant {
        parent: *mut N,
        dir: Dir,
        depth: usize,
    },
}

// Manual impls: a derive would require `N: Copy`.
impl<N> Clone for Slot<N> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<N> Copy for Slot<N> {}

/// One structural change, as recorded in copy 0 and replayed on copy 1.
pub(super) enum Op<N> {
    Insert {
        node: *mut N,
        parent: *mut N,
        dir: Dir,
    },
    Erase(*mut N),
    Replace {
        old: *mut N,
        new: *mut N,
    },
    /// Every node under this copy-0 root left the tree at once.
    Clear(*mut N),
    /// Every node was relinked into the balanced shape (`build.rs`).
    Rebuild,
    /// The tree under `new`, built off to the side (`shadow.rs`), took the
    /// place of the whole tree under `old` ([`Txn::adopt`]).
    Adopt {
        old: *mut N,
        new: *mut N,
    },
    /// A node that was never linked, handed back for release whatever the
    /// outcome (a front-end owns it while user code may still panic).
    Discard(*mut N),
}

/// A write in progress; see the module docs.
pub(crate) struct Txn<'t, N> {
    pub(super) shared: &'t Shared<N>,
    pub(super) log: &'t mut Vec<Op<N>>,
    pub(super) started: &'t mut bool,
    /// Copy 0's shape, updated by each change.
    pub(super) shape: &'t mut Shape,
    /// Copy 0's first and last node, updated by each change.
    pub(super) ends: &'t mut Ends<N>,
    /// Roots of whole trees that left both copies in earlier commits and
    /// are not released yet (the front-end releases them at its own pace,
    /// [`Txn::release_retired`]).
    pub(super) retiring: &'t mut Vec<NonNull<N>>,
}

/// Copy 0's first and last node (null: empty), kept by every change that
/// may move them (writer-only, across transactions), so that a commit hands
/// them to the front-end's `publish` without walking to them: two paths
/// per copy would be 7 % of an `AddrIndex` insert + remove at n = 84.
/// Debug builds check them after every
/// transaction's body (`RawTree::write`), where a mismatch rolls back.
pub(super) struct Ends<N> {
    pub(super) first: *mut N,
    pub(super) last: *mut N,
}

// Manual impls: a derive would require `N: Copy`.
impl<N> Clone for Ends<N> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N> Copy for Ends<N> {}

impl<N> Ends<N> {
    /// An empty tree's.
    pub(super) const EMPTY: Ends<N> = Ends {
        first: ptr::null_mut(),
        last: ptr::null_mut(),
    };
}

/// Searches the tree of `side` from its root: `step` says where to go from
/// each node, or `None` to stop on it (for [`Txn::find`] and the shadow's).
///
/// # Safety
/// Every node reachable from `side`'s root is live while this runs.
pub(super) unsafe fn search<N: Linked>(
    side: Side<'_, N, 0>,
    mut step: impl FnMut(&N) -> Option<Dir>,
) -> Slot<N> {
    let mut parent = ptr::null_mut();
    let mut dir = Dir::Left;
    let mut depth = 1;
    let mut cur = side.root();
    while let Some(n) = NonNull::new(cur) {
        // SAFETY: reachable from the root, so live (caller).
        match step(unsafe { n.as_ref() }) {
            None => return Slot::Occupied(n),
            Some(d) => {
                parent = cur;
                dir = d;
                depth += 1;
                // SAFETY: as above.
                cur = unsafe { side.child(cur, d) };
            }
        }
    }
    Slot::Vacant { parent, dir, depth }
}

impl<'t, N: Linked> Txn<'t, N> {
    fn side(&self) -> Side<'t, N, 0> {
        Side::keeping_heights(&self.shared.heads[0].root, self.shape.heights)
    }

    /// Before an update that leaves copy 0 with `len` nodes: stops keeping
    /// heights past [`HEIGHTS_MAX`].
    fn sizing_heights(&mut self, len: usize) {
        if len > HEIGHTS_MAX {
            self.shape.heights = false;
        }
    }

    /// Flips `seq` to odd before the first change.
    fn start(&mut self) {
        if !*self.started {
            self.shared.latch.flip();
            *self.started = true;
        }
    }

    /// Flips `seq` to odd now, before any change (idempotent). A front-end
    /// calls it before rewriting recycled memory that stale readers may read.
    pub(crate) fn begin(&mut self) {
        self.start();
    }

    /// Searches copy 0 (the version being built): `step` says where to go
    /// from each node, or `None` to stop on it.
    pub(crate) fn find(&self, step: impl FnMut(&N) -> Option<Dir>) -> Slot<N> {
        // SAFETY: copy 0 holds only live nodes while the writer lock is
        // held; nothing is released before the transaction ends.
        unsafe { search(self.side(), step) }
    }

    /// The number of nodes in the version being built.
    pub(crate) fn len(&self) -> usize {
        self.shared.heads[0].len.load(Ordering::Relaxed)
    }

    fn add_len(&self, delta: isize) {
        let l = &self.shared.heads[0].len;
        l.store(
            l.load(Ordering::Relaxed).wrapping_add_signed(delta),
            Ordering::Relaxed,
        );
    }

    /// Links `node` at a vacant slot.
    ///
    /// # Safety
    /// `node` is live, in no tree, and stays allocated until released; `slot`
    /// is `Vacant` and came from a `find` with no change since.
    #[inline(always)]
    pub(crate) unsafe fn insert(&mut self, node: NonNull<N>, slot: Slot<N>) {
        let Slot::Vacant { parent, dir, depth } = slot else {
            unreachable!("insert into an occupied slot")
        };
        self.start();
        self.shape.updates += 1;
        self.shape.deepest = self.shape.deepest.max(depth);
        self.sizing_heights(self.len() + 1);
        // SAFETY: caller.
        let grew = unsafe { self.side().insert(node.as_ptr(), parent, dir) };
        if let Some(black) = &mut self.shape.black {
            *black += usize::from(grew);
        }
        // A new leaf is first (last) if it hangs left of the first (right
        // of the last), or alone.
        let ends = &mut *self.ends;
        if parent.is_null() {
            *ends = Ends {
                first: node.as_ptr(),
                last: node.as_ptr(),
            };
        } else if parent == ends.first && dir == Dir::Left {
            ends.first = node.as_ptr();
        } else if parent == ends.last && dir == Dir::Right {
            ends.last = node.as_ptr();
        }
        self.log.push(Op::Insert {
            node: node.as_ptr(),
            parent,
            dir,
        });
        self.add_len(1);
    }

    /// The first (`Left`) or last node of the version being built.
    pub(crate) fn extreme(&self, dir: Dir) -> Option<NonNull<N>> {
        // Kept by every change (`Ends`): no walk.
        NonNull::new(match dir {
            Dir::Left => self.ends.first,
            Dir::Right => self.ends.last,
        })
    }

    /// Unlinks `node`; it is released when the transaction commits.
    ///
    /// # Safety
    /// `node` came from this transaction's `find` or `extreme` and was not
    /// erased or replaced since, nor copy 0 replaced whole since
    /// ([`Txn::adopt`]).
    #[inline]
    pub(crate) unsafe fn erase(&mut self, node: NonNull<N>) {
        self.start();
        self.shape.updates += 1;
        self.sizing_heights(self.len());
        let (n, side) = (node.as_ptr(), self.side());
        // Before it leaves: an erased end's neighbour takes its place.
        // SAFETY: `n` is in copy 0 (caller), which holds only live nodes.
        unsafe {
            if n == self.ends.first {
                self.ends.first = side.neighbour(n, Dir::Right);
            }
            if n == self.ends.last {
                self.ends.last = side.neighbour(n, Dir::Left);
            }
        }
        // SAFETY: caller: `node` is in copy 0.
        let shrank = unsafe { side.erase(n) };
        if let Some(black) = &mut self.shape.black {
            *black -= usize::from(shrank);
        }
        self.log.push(Op::Erase(node.as_ptr()));
        self.add_len(-1);
    }

    /// Puts `new` in the place of `old`; `old` is released on commit.
    ///
    /// # Safety
    /// As for [`Txn::erase`] for `old` and [`Txn::insert`] for `new`.
    pub(crate) unsafe fn replace(&mut self, old: NonNull<N>, new: NonNull<N>) {
        self.start();
        self.sizing_heights(self.len());
        // SAFETY: caller.
        unsafe { self.side().replace(old.as_ptr(), new.as_ptr()) };
        for end in [&mut self.ends.first, &mut self.ends.last] {
            if *end == old.as_ptr() {
                *end = new.as_ptr();
            }
        }
        self.log.push(Op::Replace {
            old: old.as_ptr(),
            new: new.as_ptr(),
        });
    }

    /// Unlinks every node at once (O(1) here, O(n) at release); they are
    /// released when the transaction commits.
    pub(crate) fn clear(&mut self) {
        self.start();
        // An empty tree is balanced.
        *self.shape = Shape::REBUILT;
        *self.ends = Ends::EMPTY;
        let root = self.side().root();
        // Release: a reader that loads the new root pairs with it as with
        // any root store (there is nothing behind a null root to publish).
        self.shared.heads[0]
            .root
            .store(ptr::null_mut(), link_store_order());
        self.shared.heads[0].len.store(0, Ordering::Relaxed);
        if !root.is_null() {
            self.log.push(Op::Clear(root));
        }
    }

    /// Relinks the version being built into the balanced shape now (writes
    /// also do it on their own, see [`rebuild_due`]): its readers then
    /// follow an exact plan (`descent.rs`).
    pub(crate) fn rebuild(&mut self) {
        if self.shape.updates == 0 {
            // Already the balanced shape (see `Shape`): nothing to change.
            return;
        }
        self.start();
        // SAFETY: writer lock held (a transaction), seq odd (`start`):
        // readers are on copy 1; copy 0 holds only live nodes.
        unsafe { super::shape::build::rebuild(&self.shared.heads[0].root, 0) };
        self.log.push(Op::Rebuild);
        *self.shape = Shape::REBUILT;
    }

    /// Whether copy 0 is due a rebuild (`shape::rebuild_due`), whatever its
    /// size: for a front-end that rebuilds large trees its own way
    /// ([`Txn::adopt`]).
    pub(crate) fn rebuild_due(&self) -> bool {
        rebuild_due(self.shape.updates, self.shape.deepest, self.len())
    }

    /// Inserts and erases since copy 0 was last rebuilt, built or cleared,
    /// or since it was adopted plus the changes the adopted tree caught up
    /// ([`Txn::adopt`]): for a front-end whose own rebuild costs more than
    /// the commit's, to space them further apart.
    pub(crate) fn updates(&self) -> usize {
        self.shape.updates
    }

    /// Whether this transaction changed copy 0 yet (an insert, erase,
    /// replacement, clear, rebuild or adoption: its log holds one).
    pub(crate) fn changed(&self) -> bool {
        self.log.iter().any(|op| !matches!(op, Op::Discard(_)))
    }

    /// Whether this transaction changed anything yet (flipped `seq`).
    pub(crate) fn started(&self) -> bool {
        *self.started
    }

    /// Whether copy 0 is in the balanced shape (no insert or erase since it
    /// was last rebuilt, built or cleared).
    pub(crate) fn balanced(&self) -> bool {
        self.shape.updates == 0
    }

    /// Visits up to `max` nodes of copy 0 in key order, from the first
    /// node for which `after` holds (`after` must hold for a node and all
    /// those above it, and fail for the others); returns whether the walk
    /// reached the last node.
    pub(crate) fn scan(
        &self,
        mut after: impl FnMut(&N) -> bool,
        max: usize,
        mut visit: impl FnMut(&N),
    ) -> bool {
        let side = self.side();
        let mut first = ptr::null_mut();
        let mut cur = side.root();
        // SAFETY: copy 0 holds only live nodes while the writer lock is
        // held, and this borrow of the transaction changes nothing (the same
        // for every block below).
        while let Some(n) = unsafe { cur.as_ref() } {
            let dir = if after(n) {
                first = cur;
                Dir::Left
            } else {
                Dir::Right
            };
            // SAFETY: as above.
            cur = unsafe { side.child(cur, dir) };
        }
        let mut cur = first;
        for _ in 0..max {
            // SAFETY: as above.
            let Some(n) = (unsafe { cur.as_ref() }) else {
                return true;
            };
            visit(n);
            // The successor: the leftmost node of the right subtree, else
            // the nearest ancestor this one is left of.
            // SAFETY: as above.
            let right = unsafe { side.child(cur, Dir::Right) };
            if right.is_null() {
                let mut child = cur;
                // SAFETY: as above.
                cur = unsafe { side.parent(cur) };
                // SAFETY: as above.
                while !cur.is_null() && unsafe { side.child(cur, Dir::Right) } == child {
                    child = cur;
                    // SAFETY: as above.
                    cur = unsafe { side.parent(cur) };
                }
            } else {
                cur = right;
                loop {
                    // SAFETY: as above.
                    let left = unsafe { side.child(cur, Dir::Left) };
                    if left.is_null() {
                        break;
                    }
                    cur = left;
                }
            }
        }
        cur.is_null()
    }

    /// Visits each change this transaction made to copy 0's content so far,
    /// in order: for a front-end that keeps a copy of it ([`Txn::adopt`]).
    pub(crate) fn changes(&self, mut visit: impl FnMut(Change<'_, N>)) {
        for op in self.log.iter() {
            // SAFETY: log pointers come from `NonNull`s, and no node is
            // released before the transaction ends.
            let node = |p: *mut N| unsafe { &*p };
            match *op {
                Op::Insert { node: n, .. } | Op::Replace { new: n, .. } => {
                    visit(Change::Put(node(n)))
                }
                Op::Erase(n) => visit(Change::Erase(node(n))),
                Op::Clear(_) => visit(Change::Clear),
                Op::Rebuild | Op::Adopt { .. } | Op::Discard(_) => {}
            }
        }
    }

    /// Whether a whole tree that left both copies ([`Txn::adopt`]) is not
    /// released yet, or this transaction adopted one: a front-end that
    /// builds whole trees off to the side waits for it, so that at most one
    /// replaced tree holds memory at a time (a new tree built while old ones
    /// still wait would let them pile up faster than commits release them).
    pub(crate) fn retiring(&self) -> bool {
        !self.retiring.is_empty()
            || self
                .log
                .iter()
                .rev()
                .any(|op| matches!(op, Op::Adopt { .. }))
    }

    /// Releases up to `max` nodes of the whole trees that left both copies
    /// in earlier commits ([`Txn::adopt`]), handing each to `release`: the
    /// front-end that adopts trees gives their memory back at its own pace
    /// (no commit does). The nodes left both copies before this transaction
    /// began, as any node a commit releases.
    #[inline]
    pub(crate) fn release_retired(&mut self, max: usize, release: impl FnMut(NonNull<N>)) {
        if self.retiring.is_empty() {
            return;
        }
        // The retiring trees left both copies in an earlier commit (after
        // its last flip), and hold their copy-1 links of that moment (see
        // `RawTree`'s `Locked::retiring`); this transaction's own adoption,
        // if any, is still in its log.
        // SAFETY: so `dismantle` walks exactly those trees, whose nodes no
        // copy links any more and no other owner frees.
        unsafe { super::walk::dismantle(self.retiring, max, release) };
    }

    /// Hands back `node`, which was never linked, to be released when the
    /// transaction ends (commit or rollback): for a front-end that owns a
    /// node while user code (a comparison) may still panic.
    ///
    /// # Safety
    /// `node` is live, in no tree, and not used by the caller afterwards.
    pub(crate) unsafe fn discard(&mut self, node: NonNull<N>) {
        self.log.push(Op::Discard(node.as_ptr()));
    }

    /// Descends copy 0 (the version being built) like [`Txn::find`], handing
    /// `step` references that live as long as this borrow of the
    /// transaction: for front-end reads that return what they found.
    pub(crate) fn descend<'a>(&'a self, mut step: impl FnMut(&'a N) -> Option<Dir>) {
        let side = self.side();
        let mut cur = side.root();
        // SAFETY: copy 0 holds only live nodes while the writer lock is held, and no node is
        // released before the transaction ends, which is after every borrow of it.
        while let Some(n) = unsafe { cur.as_ref() } {
            match step(n) {
                None => return,
                // SAFETY: as above.
                Some(d) => cur = unsafe { side.child(cur, d) },
            }
        }
    }
}

impl<N> Txn<'_, N> {
    /// The same transaction, borrowed for a shorter lifetime: lets a
    /// front-end bundle it with other borrows in one batch handle.
    pub(crate) fn reborrow(&mut self) -> Txn<'_, N> {
        Txn {
            shared: self.shared,
            log: &mut *self.log,
            started: &mut *self.started,
            shape: &mut *self.shape,
            ends: &mut *self.ends,
            retiring: &mut *self.retiring,
        }
    }
}
