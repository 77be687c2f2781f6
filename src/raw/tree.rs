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
//!
//! The handle and its log are `txn.rs`'s; the part readers see (the latch
//! and the copies' heads) is `shared.rs`'s.

use super::descent::Descent;
use super::links::{Linked, link_store_order};
use super::rbtree::Side;
use super::shape::{self, Shape};
use super::shared::{Shared, View};
use super::txn::{Ends, Op, Txn};
use super::walk::{dismantle, nodes_in_order};
use crate::sync::{AtomicUsize, Mutex, Ordering, lock, lock_mut};
use crate::unwind::{AssertUnwindSafe, catch_unwind, resume_unwind};
use alloc::string::String;
use alloc::vec::Vec;
use core::ptr::{self, NonNull};

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
    /// The most nodes a commit rebuilds copy 0 of in place (`shape/`).
    in_place_max: usize,
}

/// What the writer lock protects: the front-end's state and the log buffer,
/// reused from one transaction to the next.
struct Locked<N, W> {
    state: W,
    log: Vec<Op<N>>,
    shape: Shape,
    ends: Ends<N>,
    /// Roots of whole trees that left both copies ([`Txn::adopt`]), not yet
    /// released: the front-end releases them at its own pace
    /// ([`Txn::release_retired`]), or drains them ([`RawTree::drain_nodes`]).
    /// Their nodes keep the copy-1 links of the moment they left, as the
    /// cleared nodes of `Op::Clear` do (nothing links a node outside the
    /// tree), until released.
    retiring: Vec<NonNull<N>>,
}

/// What a front-end does where a write hands control back to it (the
/// kernel's `latch_tree_ops`, for the two points a latched write needs).
pub(crate) trait Hooks<N, W> {
    /// Copy `copy` holds its final state, whose first and last nodes are
    /// `first` and `last`; readers are steered to it by the next flip. For
    /// what the front-end's readers read beside the tree (bounds, tables).
    fn publish(&self, copy: usize, first: Option<&N>, last: Option<&N>) {
        let _ = (copy, first, last);
    }

    /// `node` left the tree for good, under the writer lock: erased or
    /// replaced by a commit, inserted by a transaction that rolled back,
    /// or discarded unlinked. Readers that started earlier may still stand
    /// on it: its memory must stay valid for them (retire it through the
    /// epoch, or recycle it in type-stable storage).
    fn release(&self, w: &mut W, node: NonNull<N>);
}

/// Releases the logged nodes `which` picks (a transaction that changed
/// nothing: only discarded nodes can be there) and empties the log.
fn release_logged<N, W>(
    l: &mut Locked<N, W>,
    hooks: &impl Hooks<N, W>,
    which: impl Fn(&Op<N>) -> bool,
) {
    for op in l.log.drain(..) {
        if let Op::Discard(node) = op
            && which(&op)
        {
            // SAFETY: log pointers come from `NonNull`s.
            hooks.release(&mut l.state, unsafe { NonNull::new_unchecked(node) });
        }
    }
}

impl<N, W> core::fmt::Debug for RawTree<N, W> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RawTree")
            .field("latch", &self.shared.latch)
            .finish_non_exhaustive()
    }
}

impl<N: Linked, W> RawTree<N, W> {
    crate::sync::const_fn_unless_loom! {
        /// An empty tree with writer state `writer`, whose commits rebuild
        /// trees of up to `in_place_max` nodes in place when due (at most
        /// `shape::IN_PLACE_MAX`).
        pub(crate) fn new(writer: W, in_place_max: usize) -> Self {
            RawTree {
                shared: Shared::new(),
                writer: Mutex::new(Locked {
                    state: writer,
                    log: Vec::new(),
                    shape: Shape::REBUILT,
                    ends: Ends::EMPTY,
                    retiring: Vec::new(),
                }),
                owner: AtomicUsize::new(0),
                in_place_max: if in_place_max < shape::IN_PLACE_MAX {
                    in_place_max
                } else {
                    shape::IN_PLACE_MAX
                },
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
    #[inline(always)]
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

    /// Runs a write transaction (see the module docs): `body` changes copy 0
    /// through its [`Txn`]; then the commit publishes it and replays the log
    /// on copy 1, or, if `body` panicked, the rollback restores copy 0 and
    /// the panic resumes. `hooks` is what the front-end does at the two
    /// points where the core hands control back ([`Hooks`]).
    #[inline(always)]
    pub(crate) fn write<R>(
        &self,
        hooks: &impl Hooks<N, W>,
        body: impl for<'b> FnOnce(&'b mut Txn<'b, N>, &'b mut W) -> R,
    ) -> R {
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
        let l = &mut *locked;
        let before = (l.shape, l.ends);
        l.log.clear();
        if l.log.capacity() > 1024 {
            l.log.shrink_to(64);
        }
        let mut started = false;
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut txn = Txn {
                shared: &self.shared,
                log: &mut l.log,
                started: &mut started,
                shape: &mut l.shape,
                ends: &mut l.ends,
                retiring: &mut l.retiring,
            };
            let r = body(&mut txn, &mut l.state);
            // Inside the caught closure: a mismatch (a bug of `raw/`) rolls
            // the write back like any panic.
            #[cfg(debug_assertions)]
            self.check_ends(l.ends);
            r
        }));
        match outcome {
            Ok(r) => {
                if started {
                    self.commit(l, hooks);
                } else {
                    // Nothing changed; only discarded nodes can be in the log.
                    release_logged(l, hooks, |op| matches!(op, Op::Discard(_)));
                }
                r
            }
            Err(panic) => {
                if started {
                    self.rollback(l, before, hooks);
                } else {
                    release_logged(l, hooks, |op| matches!(op, Op::Discard(_)));
                }
                drop(_owner);
                drop(locked);
                resume_unwind(panic)
            }
        }
    }

    /// Runs `f` on the writer state under the writer lock, in a transaction
    /// that cannot change the tree (`&Txn`): for a front-end's own
    /// bookkeeping and its tests.
    pub(crate) fn inspect<R>(&self, f: impl for<'b> FnOnce(&'b Txn<'b, N>, &'b mut W) -> R) -> R {
        /// No hooks: nothing is published or released.
        struct Nothing;
        impl<N, W> Hooks<N, W> for Nothing {
            fn release(&self, _: &mut W, _: NonNull<N>) {
                unreachable!("an inspection changes nothing")
            }
        }
        self.write(&Nothing, |txn, w| f(txn, w))
    }

    /// Debug builds: copy 0's kept ends are its first and last node.
    #[cfg(debug_assertions)]
    fn check_ends(&self, ends: Ends<N>) {
        let side = Side::<_, 0>::new(&self.shared.heads[0].root);
        // SAFETY: writer lock held; copy 0 holds only live nodes.
        let walked = unsafe {
            (
                side.extreme(super::Dir::Left),
                side.extreme(super::Dir::Right),
            )
        };
        assert_eq!((ends.first, ends.last), walked, "copy 0's kept ends");
    }

    /// Commits the transaction that changed copy 0 (`seq` odd, readers on
    /// copy 1): rebuilds copy 0 if due, publishes it, flips (readers move
    /// to it), replays the log on copy 1, publishes that, and releases what
    /// left the tree.
    #[inline(always)]
    fn commit(&self, l: &mut Locked<N, W>, hooks: &impl Hooks<N, W>) {
        let s = &self.shared;
        let len = s.heads[0].len.load(Ordering::Relaxed);
        if l.shape.commit_rebuilds(len, self.in_place_max) {
            // SAFETY: writer lock held, seq odd: readers are on copy 1; copy
            // 0 holds only live nodes.
            unsafe { shape::build::rebuild(&s.heads[0].root, 0) };
            l.log.push(Op::Rebuild);
            l.shape = Shape::REBUILT;
        }
        // SAFETY: writer lock held; copy 0 is a valid red-black tree of live
        // nodes.
        let plan = unsafe { shape::plan(&mut l.shape, &s.heads[0]) };
        // SAFETY: writer lock held; copy 0 holds only live nodes.
        unsafe { self.publish(0, plan, l.ends, hooks) };
        s.latch.flip(); // even: readers move to the new copy 0
        let side = Side::<_, 1>::new(&s.heads[1].root);
        for op in l.log.iter() {
            // The ops were valid on copy 0 in this order, and copy 1 had the
            // same shape before the first one.
            // SAFETY: so each is valid on copy 1 too; no node is released
            // before this loop ends.
            unsafe {
                match *op {
                    // Copy 0's changes said how its black height moved.
                    Op::Insert { node, parent, dir } => {
                        side.insert(node, parent, dir);
                    }
                    Op::Erase(node) => {
                        side.erase(node);
                    }
                    Op::Replace { old, new } => side.replace(old, new),
                    // Release: as every root store.
                    Op::Clear(_) => s.heads[1].root.store(ptr::null_mut(), link_store_order()),
                    Op::Rebuild => shape::build::rebuild(&s.heads[1].root, 1),
                    // Release: as every root store.
                    Op::Adopt { new, .. } => s.heads[1].root.store(new, link_store_order()),
                    Op::Discard(_) => {}
                }
            }
        }
        s.heads[1].len.store(len, Ordering::Relaxed);
        // Copy 1 now holds copy 0's nodes, so its ends too.
        // SAFETY: writer lock held; copy 1 holds only live nodes.
        unsafe { self.publish(1, plan, l.ends, hooks) };
        s.latch.count_write();
        let Locked {
            log,
            state,
            retiring,
            ..
        } = l;
        for op in log.drain(..) {
            match op {
                Op::Erase(node) | Op::Replace { old: node, .. } | Op::Discard(node) => {
                    // SAFETY: log pointers come from `NonNull`s.
                    hooks.release(state, unsafe { NonNull::new_unchecked(node) });
                }
                Op::Adopt { old, .. } => retiring.extend(NonNull::new(old)),
                Op::Clear(root) => {
                    // The cleared nodes still hold their copy-1 links of the
                    // moment they were cleared (the replay made copy 1 equal
                    // to copy 0 then, and no later op touches a node outside
                    // the tree).
                    // SAFETY: so this walks exactly those nodes, all live:
                    // none is released before this loop.
                    for node in unsafe { nodes_in_order(root, 1) } {
                        hooks.release(state, node);
                    }
                }
                Op::Insert { .. } | Op::Rebuild => {}
            }
        }
    }

    /// Rolls back the transaction that changed copy 0 (`seq` odd, readers
    /// on copy 1, untouched): copy 0 and the writer's view of its shape go
    /// back to `before`, `seq` flips back, and what the transaction added
    /// is released (the tree it adopted, if any, goes like a replaced one).
    fn rollback(&self, l: &mut Locked<N, W>, before: (Shape, Ends<N>), hooks: &impl Hooks<N, W>) {
        let s = &self.shared;
        // SAFETY: writer lock held, seq odd: readers are on copy 1.
        unsafe { self.restore_copy0(before.0.heights) };
        (l.shape, l.ends) = before;
        // Relaxed: the writer's own word.
        let plan = Descent::from_word(s.heads[1].descent.load(Ordering::Relaxed));
        // SAFETY: as above; copy 0 now equals copy 1.
        unsafe { self.publish(0, plan, l.ends, hooks) };
        s.latch.flip();
        let Locked {
            log,
            state,
            retiring,
            ..
        } = l;
        for op in log.drain(..) {
            match op {
                Op::Insert { node, .. } | Op::Replace { new: node, .. } | Op::Discard(node) => {
                    // SAFETY: log pointers come from `NonNull`s.
                    hooks.release(state, unsafe { NonNull::new_unchecked(node) });
                }
                // The adopted tree never reached a reader; it goes like a
                // replaced one (`Txn::release_retired`).
                Op::Adopt { new, .. } => retiring.extend(NonNull::new(new)),
                Op::Erase(_) | Op::Clear(_) | Op::Rebuild => {}
            }
        }
    }

    /// Hands copy `copy`'s extremes `ends` to the front-end's `publish`
    /// and publishes the copy's descent plan.
    ///
    /// # Safety
    /// Writer lock held; copy `copy` holds only live nodes, and `ends` are
    /// its first and last.
    unsafe fn publish(&self, copy: usize, plan: Descent, ends: Ends<N>, hooks: &impl Hooks<N, W>) {
        // SAFETY: the ends are null or live nodes (caller).
        unsafe { hooks.publish(copy, ends.first.as_ref(), ends.last.as_ref()) };
        // Relaxed: a word of copy `copy`, written while readers are steered
        // away from it and published to them, like its links, by the next
        // flip (`Latch::flip`'s Release store).
        self.shared.heads[copy]
            .descent
            .store(plan.word(), Ordering::Relaxed);
    }

    /// Makes copy 0 identical to copy 1 again, and its recorded heights
    /// right if `heights` (the shape it goes back to keeps them).
    ///
    /// # Safety
    /// Writer lock held and `seq` odd (readers are on copy 1, untouched).
    unsafe fn restore_copy0(&self, heights: bool) {
        let s = &self.shared;
        // SAFETY: copy 1 is the last committed version: only live nodes.
        let nodes = unsafe { nodes_in_order(s.heads[1].root.load(Ordering::Relaxed), 1) };
        for n in &nodes {
            // SAFETY: `n` is live.
            let node = unsafe { n.as_ref() };
            // SAFETY: its copy-1 children are live nodes of copy 1.
            unsafe { node.links(0).copy_from(node.links(1)) };
        }
        s.heads[0]
            .root
            .store(s.heads[1].root.load(Ordering::Relaxed), link_store_order());
        s.heads[0]
            .len
            .store(s.heads[1].len.load(Ordering::Relaxed), Ordering::Relaxed);
        // SAFETY: copy 0 now has copy 1's shape: a valid tree of live nodes.
        unsafe { Side::keeping_heights(&s.heads[0].root, heights).recompute_heights() };
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
        let root = unsafe { shape::build::link_balanced(nodes, 0..2) };
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
        if let (Some(&first), Some(&last)) = (nodes.first(), nodes.last()) {
            lock_mut(&mut self.writer).ends = Ends {
                first: first.as_ptr(),
                last: last.as_ptr(),
            };
        }
    }

    /// The front-end's writer state, for a caller holding `&mut self` (no
    /// reader or writer runs).
    pub(crate) fn state_mut(&mut self) -> &mut W {
        &mut lock_mut(&mut self.writer).state
    }

    /// After [`build`](RawTree::build) on a tree emptied by
    /// [`drain_live_nodes`](RawTree::drain_live_nodes): marks the shape
    /// balanced (as `build` left it) and gives back the transaction log's
    /// buffer (up to 1024 entries are kept between writes). `&mut self`: no
    /// transaction runs.
    pub(crate) fn reset_after_build(&mut self) {
        let locked = lock_mut(&mut self.writer);
        locked.log = Vec::new();
        locked.shape = Shape::REBUILT;
    }

    /// Every node in the tree, in key order, with both copies emptied, and
    /// the trees that left it but are not released yet *forgotten*: for
    /// compaction, which frees their memory with the whole slab (`&mut
    /// self`: none of them can be reached or released later).
    pub(crate) fn drain_live_nodes(&mut self) -> Vec<NonNull<N>> {
        lock_mut(&mut self.writer).retiring = Vec::new();
        self.drain_nodes()
    }

    /// Every node, in key order, then those of trees that left it and are
    /// not released yet; for the front-end's `Drop`.
    pub(crate) fn drain_nodes(&mut self) -> Vec<NonNull<N>> {
        let s = &self.shared;
        // SAFETY: `&mut self`: no transaction runs, copy 0 holds only live
        // nodes.
        let mut nodes = unsafe { nodes_in_order(s.heads[0].root.load(Ordering::Relaxed), 0) };
        let retiring = &mut lock_mut(&mut self.writer).retiring;
        // SAFETY: as in `write`: whole trees out of both copies, each with
        // its copy-1 links intact.
        unsafe { dismantle(retiring, usize::MAX, |n| nodes.push(n)) };
        for copy in 0..2 {
            s.heads[copy].root.store(ptr::null_mut(), Ordering::Relaxed);
            s.heads[copy].len.store(0, Ordering::Relaxed);
        }
        lock_mut(&mut self.writer).ends = Ends::EMPTY;
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
        let w = lock(&self.writer);
        let s = &self.shared;
        super::check::check(
            s.latch.seq(),
            w.shape.heights,
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
/// loom, whose threads share one OS thread, and without `std`, which has no
/// thread-locals (a nested write then spins on its own lock: the
/// `guide::no_std` page says so).
#[inline]
fn this_thread() -> usize {
    #[cfg(all(not(latchtree_loom), feature = "std"))]
    {
        std::thread_local! {
            static MARK: u8 = const { 0 };
        }
        MARK.try_with(|m| ptr::from_ref(m).addr()).unwrap_or(0)
    }
    #[cfg(any(latchtree_loom, not(feature = "std")))]
    {
        0
    }
}

/// Stores 0 into the owner word when dropped.
struct ClearOnDrop<'a>(&'a AtomicUsize);

impl Drop for ClearOnDrop<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}
