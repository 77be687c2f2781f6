//! The latched tree: two roots over shared intrusive nodes, the latch that
//! steers readers, and write transactions that update copy 0 then copy 1.
//!
//! # Write transactions
//!
//! A transaction ([`RawTree::write`]) runs the front-end's `body` with a
//! [`Txn`]. The first change flips `seq` to odd (readers move to copy 1) and
//! every change is applied to copy 0 at once and recorded in a log of
//! structural operations. When `body` returns, copy 0 is published by a second
//! flip, and the log is replayed on copy 1 (readers are on copy 0 by then).
//! Since both copies hold the same shape, the positions recorded in copy 0 are
//! valid in copy 1 and the replay runs no user code: user `Ord`, `Drop` or
//! closures can only run (and panic) while copy 1 still holds the old version.
//!
//! If `body` panics, the transaction is rolled back: copy 0's links are
//! restored from copy 1 (the old version), `seq` flips back to even, and the
//! nodes that the transaction added are handed back for release. Readers never
//! saw any of it; the panic then resumes.

use super::descent::{Descent, balanced_height};
use super::links::{Dir, Linked, link_store_order};
use super::rbtree::Side;
use super::shared::{Shared, View};
use super::walk::nodes_in_order;
use crate::sync::{AtomicUsize, Mutex, Ordering, lock};
use core::ptr::{self, NonNull};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

/// Two copies of a red-black tree behind a seqcount latch, plus the
/// front-end's writer state `W` under the writer lock.
pub(crate) struct RawTree<N, W> {
    pub(super) shared: Shared<N>,
    writer: Mutex<Locked<N, W>>,
    /// The thread holding `writer` (see [`this_thread`]), 0 when free: turns
    /// a write started from inside a write of the same tree on the same
    /// thread (a batch closure calling `insert`) into a clear panic instead
    /// of a self-deadlock.
    owner: AtomicUsize,
}

/// What the writer lock protects: the front-end's state and the log buffer,
/// reused from one transaction to the next.
struct Locked<N, W> {
    state: W,
    log: Vec<Op<N>>,
    shape: Shape,
}

/// What the writer knows of copy 0's shape, kept across transactions.
/// With no update since the last rebuild (or since the tree was new or
/// cleared), the copy is in the balanced shape, descended by an exact plan.
#[derive(Clone, Copy)]
struct Shape {
    /// Inserts and erases since the last rebuild.
    updates: usize,
    /// The deepest an insert landed since the last rebuild (nodes from the
    /// root, itself included).
    deepest: usize,
}

/// The fewest updates between two automatic rebuilds: a small tree rebuilds
/// in a few microseconds, but not after every write. Off under loom (its
/// models explore a rebuild where they ask for one, `Txn::rebuild`).
const REBUILD_MIN: usize = if cfg!(latchtree_loom) { usize::MAX } else { 16 };

impl Shape {
    /// Right after a rebuild.
    const REBUILT: Shape = Shape {
        updates: 0,
        deepest: 0,
    };
}

/// Whether a commit relinks the tree of `len` nodes into the balanced
/// shape (`build.rs`), after `since` inserts and erases of which the
/// deepest insert landed `deepest` nodes from the root: once the shape
/// has gone bad (an insert landed two levels below the balanced height;
/// sequential inserts, which grow an almost all-black tree with one long
/// red spine, get there within a few inserts), at most every `len / 8`
/// updates (at least [`REBUILD_MIN`]). A rebuild relinks `len` nodes per
/// copy (about 150 instructions a node, callgrind), so spread over the
/// updates before it, it costs below one insert. Measured alternative: one
/// level below (random churn then rebuilt every 16 updates at n = 84)
/// brought randomly built trees at n = 84 from the tail plan to the exact
/// one (lookups 35–43 → 31–35 ns), but a churn of insert + remove there went
/// from 1,760 to 4,900 instructions per pair.
fn rebuild_due(since: usize, deepest: usize, len: usize) -> bool {
    since >= (len / 8).max(REBUILD_MIN) && deepest >= balanced_height(len) + 2
}

impl<N, W> core::fmt::Debug for RawTree<N, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawTree")
            .field("latch", &self.shared.latch)
            .finish_non_exhaustive()
    }
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
enum Op<N> {
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
    /// Every node left the tree for a copy of it, and the copies were
    /// linked into the balanced shape ([`Txn::relocate`]): `old` was copy
    /// 0's nodes before, `new` their copies, both in key order.
    Relocate {
        old: Vec<NonNull<N>>,
        new: Vec<NonNull<N>>,
    },
    /// A node that was never linked, handed back for release whatever the
    /// outcome (a front-end owns it while user code may still panic).
    Discard(*mut N),
}

/// A write in progress; see the module docs.
pub(crate) struct Txn<'t, N> {
    shared: &'t Shared<N>,
    log: &'t mut Vec<Op<N>>,
    started: &'t mut bool,
    /// Copy 0's shape, updated by each change.
    shape: &'t mut Shape,
}

impl<N: Linked, W> RawTree<N, W> {
    crate::sync::const_fn_unless_loom! {
        /// An empty tree with writer state `writer`.
        pub(crate) fn new(writer: W) -> Self {
            RawTree {
                shared: Shared::new(),
                writer: Mutex::new(Locked {
                    state: writer,
                    log: Vec::new(),
                    shape: Shape::REBUILT,
                }),
                owner: AtomicUsize::new(0),
            }
        }
    }

    /// Runs `attempt` on a stable copy until it returns `Some` from a version
    /// that did not change meanwhile; see `latch`.
    ///
    /// # Safety
    /// Every node the attempt can reach, through any link value ever stored
    /// in this tree while the attempt runs, stays allocated for `'g` (epoch
    /// pinning for `LatchTree`, type-stable storage for `AddrIndex`).
    #[inline]
    pub(crate) unsafe fn read<'g, R>(
        &'g self,
        mut attempt: impl FnMut(View<'g, N>) -> Option<R>,
    ) -> R {
        let s = &self.shared;
        s.latch.read(|copy| {
            attempt(View {
                root: &s.heads[copy].root,
                len: &s.heads[copy].len,
                descent: &s.heads[copy].descent,
                copy,
            })
        })
    }

    /// The number of nodes, read consistently through the latch.
    pub(crate) fn len(&self) -> usize {
        let s = &self.shared;
        s.latch
            .read(|copy| Some(s.heads[copy].len.load(Ordering::Relaxed)))
    }

    /// `(reads retried, writes done)`.
    pub(crate) fn stats(&self) -> (u64, u64) {
        (self.shared.latch.retries(), self.shared.latch.writes())
    }

    /// Runs a write transaction (see the module docs).
    ///
    /// * `publish(copy, first, last)` runs for each copy once it holds its
    ///   final state and before readers are steered to it.
    /// * `release(writer, node)` receives each node that left the tree for
    ///   good: the erased, replaced and relocated ones after a commit, or
    ///   the added ones (relocation copies included) after a rollback. A
    ///   node's memory must stay valid for readers that may still stand on
    ///   it (retire it through the epoch, or recycle it in type-stable
    ///   storage).
    pub(crate) fn write<R>(
        &self,
        body: impl for<'b> FnOnce(&'b mut Txn<'b, N>, &'b mut W) -> R,
        mut publish: impl FnMut(usize, Option<&N>, Option<&N>),
        mut release: impl FnMut(&mut W, NonNull<N>),
    ) -> R {
        let s = &self.shared;
        let me = this_thread();
        // Relaxed: only this thread ever stores `me`, so this load sees it
        // exactly when this thread holds the lock (coherence).
        assert!(
            me == 0 || self.owner.load(Ordering::Relaxed) != me,
            "latchtree: a write was started from inside a write of the same tree \
             (use the batch handle instead)"
        );
        let mut locked = lock(&self.writer);
        self.owner.store(me, Ordering::Relaxed);
        // Declared after `locked`, so dropped (owner cleared) before unlock,
        // on every path including unwinding.
        let _owner = ClearOnDrop(&self.owner);
        let Locked {
            state: w,
            log,
            shape,
        } = &mut *locked;
        let shape_before = *shape;
        log.clear();
        if log.capacity() > 1024 {
            log.shrink_to(64);
        }
        let mut started = false;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut txn = Txn {
                shared: s,
                log: &mut *log,
                started: &mut started,
                shape: &mut *shape,
            };
            body(&mut txn, &mut *w)
        }));
        if !started {
            // Nothing changed; only discarded nodes can be in the log.
            for op in log.drain(..) {
                if let Op::Discard(node) = op {
                    // SAFETY: log pointers come from `NonNull`s.
                    release(w, unsafe { NonNull::new_unchecked(node) });
                }
            }
            return outcome.unwrap_or_else(|p| resume_unwind(p));
        }
        match outcome {
            Ok(r) => {
                let len = s.heads[0].len.load(Ordering::Relaxed);
                if rebuild_due(shape.updates, shape.deepest, len) {
                    // SAFETY: writer lock held, seq odd (the log holds a
                    // change): readers are on copy 1; copy 0 holds only live
                    // nodes.
                    unsafe { super::build::rebuild(&s.heads[0].root, 0) };
                    log.push(Op::Rebuild);
                    *shape = Shape::REBUILT;
                }
                let plan = self.plan(*shape);
                // SAFETY: writer lock held; copy 0 holds only live nodes.
                unsafe { self.publish(0, plan, &mut publish) };
                s.latch.flip(); // even: readers move to the new copy 0
                let side = Side::new(&s.heads[1].root, 1);
                for op in log.iter() {
                    // The ops were valid on copy 0 in this order, and copy 1
                    // had the same shape before the first one.
                    // SAFETY: so each is valid on copy 1 too; no node is
                    // released before this loop ends.
                    unsafe {
                        match *op {
                            Op::Insert { node, parent, dir } => side.insert(node, parent, dir),
                            Op::Erase(node) => side.erase(node),
                            Op::Replace { old, new } => side.replace(old, new),
                            Op::Clear(_) => {
                                s.heads[1].root.store(ptr::null_mut(), link_store_order())
                            }
                            Op::Rebuild => super::build::rebuild(&s.heads[1].root, 1),
                            Op::Relocate { ref new, .. } => {
                                super::build::relink(new, &s.heads[1].root, 1)
                            }
                            Op::Discard(_) => {}
                        }
                    }
                }
                s.heads[1]
                    .len
                    .store(s.heads[0].len.load(Ordering::Relaxed), Ordering::Relaxed);
                // SAFETY: writer lock held; copy 1 holds only live nodes.
                unsafe { self.publish(1, plan, &mut publish) };
                s.latch.count_write();
                for op in log.drain(..) {
                    match op {
                        Op::Erase(node) | Op::Replace { old: node, .. } | Op::Discard(node) => {
                            // SAFETY: log pointers come from `NonNull`s.
                            release(w, unsafe { NonNull::new_unchecked(node) });
                        }
                        Op::Relocate { old, .. } => {
                            for node in old {
                                release(w, node);
                            }
                        }
                        Op::Clear(root) => {
                            // The cleared nodes still hold their copy-1
                            // links of the moment they were cleared (the
                            // replay made copy 1 equal to copy 0 then, and no
                            // later op touches a node outside the tree).
                            // SAFETY: so this walks exactly those nodes, all
                            // live: none is released before this loop.
                            for node in unsafe { nodes_in_order(root, 1) } {
                                release(w, node);
                            }
                        }
                        Op::Insert { .. } | Op::Rebuild => {}
                    }
                }
                r
            }
            Err(panic) => {
                // SAFETY: writer lock held, seq odd: readers are on copy 1.
                unsafe { self.rollback() };
                *shape = shape_before;
                // Relaxed: the writer's own word.
                let plan = Descent::from_word(s.heads[1].descent.load(Ordering::Relaxed));
                // SAFETY: as above; copy 0 now equals copy 1.
                unsafe { self.publish(0, plan, &mut publish) };
                s.latch.flip();
                for op in log.drain(..) {
                    match op {
                        Op::Insert { node, .. }
                        | Op::Replace { new: node, .. }
                        | Op::Discard(node) => {
                            // SAFETY: log pointers come from `NonNull`s.
                            release(w, unsafe { NonNull::new_unchecked(node) });
                        }
                        Op::Relocate { new, .. } => {
                            for node in new {
                                release(w, node);
                            }
                        }
                        Op::Erase(_) | Op::Clear(_) | Op::Rebuild => {}
                    }
                }
                drop(_owner);
                drop(locked);
                resume_unwind(panic)
            }
        }
    }

    /// The plan readers of copy 0, of shape `shape`, follow (see
    /// `descent.rs`): exact in the balanced shape, else the black height and
    /// a tail.
    fn plan(&self, shape: Shape) -> Descent {
        let s = &self.shared;
        if shape.updates == 0 {
            return Descent::balanced(s.heads[0].len.load(Ordering::Relaxed));
        }
        let side = Side::new(&s.heads[0].root, 0);
        Descent {
            // SAFETY: writer lock held; copy 0 is a valid red-black tree of
            // live nodes.
            trips: unsafe { side.black_height() },
            exact: false,
        }
    }

    /// Hands copy `copy`'s extremes to the front-end's `publish` and
    /// publishes the copy's descent plan.
    ///
    /// # Safety
    /// Writer lock held; copy `copy` holds only live nodes.
    unsafe fn publish(
        &self,
        copy: usize,
        plan: Descent,
        publish: &mut impl FnMut(usize, Option<&N>, Option<&N>),
    ) {
        let side = Side::new(&self.shared.heads[copy].root, copy);
        // SAFETY: the extremes are null or live nodes (caller).
        unsafe {
            let first = side.extreme(Dir::Left);
            let last = side.extreme(Dir::Right);
            publish(copy, first.as_ref(), last.as_ref());
        }
        // Relaxed: a word of copy `copy`, written while readers are steered
        // away from it and published to them, like its links, by the next
        // flip (`Latch::flip`'s Release store).
        self.shared.heads[copy]
            .descent
            .store(plan.word(), Ordering::Relaxed);
    }

    /// Makes copy 0 identical to copy 1 again.
    ///
    /// # Safety
    /// Writer lock held and `seq` odd (readers are on copy 1, untouched).
    unsafe fn rollback(&self) {
        let s = &self.shared;
        // SAFETY: copy 1 is the last committed version: only live nodes.
        let nodes = unsafe { nodes_in_order(s.heads[1].root.load(Ordering::Relaxed), 1) };
        for n in nodes {
            // SAFETY: `n` is live.
            let node = unsafe { n.as_ref() };
            node.links(0).copy_from(node.links(1));
        }
        s.heads[0]
            .root
            .store(s.heads[1].root.load(Ordering::Relaxed), link_store_order());
        s.heads[0]
            .len
            .store(s.heads[1].len.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Makes `nodes` the whole content of this empty tree, in both copies,
    /// and counts one write (none if `nodes` is empty: nothing changed).
    ///
    /// # Safety
    /// The tree is empty; `nodes` are live, distinct, in no tree, in
    /// strictly increasing key order, and the tree owns them from now on.
    /// `&mut self`: no reader or writer runs meanwhile.
    pub(crate) unsafe fn build(&mut self, nodes: &[NonNull<N>]) {
        let s = &self.shared;
        debug_assert!(s.heads[0].root.load(Ordering::Relaxed).is_null());
        if nodes.is_empty() {
            return;
        }
        // SAFETY: forwarded from the caller.
        let root = unsafe { super::build::link_balanced(nodes, 0..2) };
        for copy in 0..2 {
            // Release, as every root store: the tree may be shared later by
            // any means, and a reader's Acquire load of the root pairs with it.
            s.heads[copy].root.store(root, link_store_order());
            s.heads[copy].len.store(nodes.len(), Ordering::Relaxed);
            // Relaxed: as the lengths; `&mut self` excludes readers.
            s.heads[copy]
                .descent
                .store(Descent::balanced(nodes.len()).word(), Ordering::Relaxed);
        }
        s.latch.count_write();
    }

    /// Every node, in key order; for the front-end's `Drop`.
    pub(crate) fn drain_nodes(&mut self) -> Vec<NonNull<N>> {
        let s = &self.shared;
        // SAFETY: `&mut self`: no transaction runs, copy 0 holds only live
        // nodes.
        let nodes = unsafe { nodes_in_order(s.heads[0].root.load(Ordering::Relaxed), 0) };
        for copy in 0..2 {
            s.heads[copy].root.store(ptr::null_mut(), Ordering::Relaxed);
            s.heads[copy].len.store(0, Ordering::Relaxed);
        }
        nodes
    }

    /// Checks every structural invariant (see `raw::check`); takes the
    /// writer lock.
    pub(crate) fn check(&self, less: impl Fn(&N, &N) -> bool) -> Result<(), String> {
        self.check_then(less, || Ok(()))
    }

    /// [`check`](RawTree::check), then the front-end's own checks `then`,
    /// all under one hold of the writer lock.
    pub(crate) fn check_then(
        &self,
        less: impl Fn(&N, &N) -> bool,
        then: impl FnOnce() -> Result<(), String>,
    ) -> Result<(), String> {
        let _w = lock(&self.writer);
        let s = &self.shared;
        super::check::check(
            s.latch.seq(),
            [&s.heads[0].root, &s.heads[1].root],
            [
                s.heads[0].len.load(Ordering::Relaxed),
                s.heads[1].len.load(Ordering::Relaxed),
            ],
            [
                s.heads[0].descent.load(Ordering::Relaxed),
                s.heads[1].descent.load(Ordering::Relaxed),
            ],
            less,
        )?;
        then()
    }
}

/// An address unique to the calling thread (of a thread-local without a
/// destructor, so it works even during thread-local destruction); 0 under
/// loom, whose threads share one OS thread.
fn this_thread() -> usize {
    #[cfg(not(latchtree_loom))]
    {
        std::thread_local! {
            static MARK: u8 = const { 0 };
        }
        MARK.try_with(|m| ptr::from_ref(m).addr()).unwrap_or(0)
    }
    #[cfg(latchtree_loom)]
    {
        0
    }
}

/// Stores 0 into the owner word when dropped.
struct ClearOnDrop<'a>(&'a AtomicUsize);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

impl<'t, N: Linked> Txn<'t, N> {
    fn side(&self) -> Side<'t, N> {
        Side::new(&self.shared.heads[0].root, 0)
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
    pub(crate) fn find(&self, mut step: impl FnMut(&N) -> Option<Dir>) -> Slot<N> {
        let side = self.side();
        let mut parent = ptr::null_mut();
        let mut dir = Dir::Left;
        let mut depth = 1;
        let mut cur = side.root();
        while let Some(n) = NonNull::new(cur) {
            // SAFETY: copy 0 holds only live nodes while the writer lock is
            // held; nothing is released before the transaction ends.
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
    pub(crate) unsafe fn insert(&mut self, node: NonNull<N>, slot: Slot<N>) {
        let Slot::Vacant { parent, dir, depth } = slot else {
            unreachable!("insert into an occupied slot")
        };
        self.start();
        self.shape.updates += 1;
        self.shape.deepest = self.shape.deepest.max(depth);
        // SAFETY: caller.
        unsafe { self.side().insert(node.as_ptr(), parent, dir) };
        self.log.push(Op::Insert {
            node: node.as_ptr(),
            parent,
            dir,
        });
        self.add_len(1);
    }

    /// The first (`Left`) or last node of the version being built.
    pub(crate) fn extreme(&self, dir: Dir) -> Option<NonNull<N>> {
        // SAFETY: copy 0 holds only live nodes while the writer lock is held.
        NonNull::new(unsafe { self.side().extreme(dir) })
    }

    /// Unlinks `node`; it is released when the transaction commits.
    ///
    /// # Safety
    /// `node` came from this transaction's `find` or `extreme` and was not
    /// erased, replaced or relocated since ([`Txn::relocate`] takes every
    /// node out of copy 0).
    pub(crate) unsafe fn erase(&mut self, node: NonNull<N>) {
        self.start();
        self.shape.updates += 1;
        // SAFETY: caller: `node` is in copy 0.
        unsafe { self.side().erase(node.as_ptr()) };
        self.log.push(Op::Erase(node.as_ptr()));
        self.add_len(-1);
    }

    /// Puts `new` in the place of `old`; `old` is released on commit.
    ///
    /// # Safety
    /// As for [`Txn::erase`] for `old` and [`Txn::insert`] for `new`.
    pub(crate) unsafe fn replace(&mut self, old: NonNull<N>, new: NonNull<N>) {
        self.start();
        // SAFETY: caller.
        unsafe { self.side().replace(old.as_ptr(), new.as_ptr()) };
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
        unsafe { super::build::rebuild(&self.shared.heads[0].root, 0) };
        self.log.push(Op::Rebuild);
        *self.shape = Shape::REBUILT;
    }

    /// Whether the commit would rebuild copy 0 ([`rebuild_due`]), so that a
    /// front-end can do it its own way first ([`Txn::relocate`]).
    pub(crate) fn rebuild_due(&self) -> bool {
        rebuild_due(self.shape.updates, self.shape.deepest, self.len())
    }

    /// Whether copy 0 is in the balanced shape (no insert or erase since it
    /// was last rebuilt, built or cleared).
    pub(crate) fn balanced(&self) -> bool {
        self.shape.updates == 0
    }

    /// Replaces every node of copy 0 with a copy of it, linked into the
    /// balanced shape: `place(old)` gets the nodes in van Emde Boas order of
    /// that shape ([`super::build::van_emde_boas`]) and returns their copies
    /// in the same order, so that a front-end that allocates them at rising
    /// addresses lays the tree out in that order (`addr_index/layout.rs`).
    /// The old nodes are released on commit, the copies on rollback. A
    /// rebuild and a move in one pass over the nodes.
    ///
    /// # Safety
    /// `place` returns exactly one node per node it gets, each live,
    /// distinct, in no tree, holding the same key, and staying allocated
    /// until released. Every node pointer taken from copy 0 before the call
    /// is stale after it (its node left the tree).
    pub(crate) unsafe fn relocate(&mut self, place: impl FnOnce(&[NonNull<N>]) -> Vec<NonNull<N>>) {
        self.start();
        let root = &self.shared.heads[0].root;
        // SAFETY: writer lock held: copy 0 holds only live nodes and only
        // this transaction changes it.
        let old = unsafe { nodes_in_order(root.load(Ordering::Relaxed), 0) };
        let ranks = super::build::van_emde_boas(old.len());
        let in_layout: Vec<NonNull<N>> = ranks.iter().map(|&k| old[k]).collect();
        let copies = place(&in_layout);
        assert_eq!(copies.len(), old.len(), "one copy per node");
        // Room in the log first: nothing may fail between linking the copies
        // and logging them (an unlogged copy would never be released).
        self.log.reserve(1);
        // Back to key order; the clone's entries are placeholders, each
        // overwritten once (the ranks are a permutation).
        let mut new = copies.clone();
        for (&k, &c) in ranks.iter().zip(&copies) {
            new[k] = c;
        }
        // SAFETY: seq odd (`start`): readers are on copy 1; the copies are
        // live, distinct, in key order (each holds its original's key) and in
        // no tree (caller).
        unsafe { super::build::relink(&new, root, 0) };
        self.log.push(Op::Relocate { old, new });
        *self.shape = Shape::REBUILT;
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
        }
    }
}
