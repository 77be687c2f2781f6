//! The raw, unsafe core shared by both front-ends.
//!
//! # Layout
//!
//! One thing a file, lowest first: each file imports only files listed
//! before it, and nothing outside `raw` but `crate::sync`.
//!
//! * `latch.rs`: the seqcount latch that steers readers;
//! * `links.rs`: a node's two link sets ([`Linked`], [`Links`]);
//! * `shared.rs`: what readers see: the latch and each copy's head,
//!   [`View`] of one stable copy, the depth cap;
//! * `rbtree.rs`: red-black insert, erase and replace on one copy;
//! * `descent.rs`: a reader's root-to-leaf walks and the plan they follow;
//! * `walk.rs`: in-order walks of one copy (the writer's, a reader's);
//! * `check.rs`: the invariant checker;
//! * `txn.rs`: a write in progress ([`Txn`]) and the log it records;
//! * `shape/`: when a commit rebuilds a copy and which plan its readers
//!   follow (`mod.rs`); the balanced shape and the van Emde Boas order
//!   (`build.rs`); a tree built off to the side over several transactions
//!   ([`Shadow`], `shadow.rs`) and swapped in whole (`Txn::adopt`);
//! * `tree.rs`: [`RawTree`]: the writer lock, reads, and each write's
//!   commit (replay on copy 1) or rollback;
//! * `cursor.rs`: a reader's position on a node, stepped to its neighbours
//!   ([`Cursor`]).
//!
//! # Invariants
//!
//! 1. **Two copies, one set of nodes.** Each node embeds two link sets
//!    (`links.rs`); copy `c` is the red-black tree reachable from `roots[c]`
//!    through link set `c`. At rest both copies hold the same nodes with the
//!    same shape and colours, and `seq` is even.
//! 2. **Every racy word is an atomic.** Child links, roots, lengths and
//!    `seq` are atomics, and so are parent/colour words (writer-only, but
//!    readers hold `&Node`). Keys and values of the generic tree are written
//!    before a node is first published and never again while it is reachable;
//!    the address index's node fields are atomics (`index/slab.rs`).
//! 3. **Readers read only a stable copy**, steered by the latch (`latch.rs`),
//!    and validate afterwards; their descents are capped at
//!    [`shared::MAX_DEPTH`] nodes per path (the checker rejects a longer
//!    path) so that no torn shape can loop them. A cursor (`cursor.rs`) is
//!    one such read stretched over many steps, validated after each.
//! 4. **One writer at a time** (the writer lock in `tree.rs`); it changes copy
//!    0 while `seq` is odd and copy 1 while it is even, with the same
//!    operations in the same order (`rbtree.rs`), so the copies never drift.
//! 5. **No node is released before it left both copies**, and released
//!    memory stays readable for readers that may still stand on it: the
//!    epoch for `LatchTree`, type-stable storage for `AddrIndex`.
//!
//! `check.rs` verifies 1, 2's shape parts and 4 after every test operation.

mod check;
mod cursor;
mod descent;
mod latch;
mod links;
mod rbtree;
mod shape;
mod shared;
mod tree;
mod txn;
mod walk;

pub(crate) use cursor::{Cursor, Step};
pub(crate) use links::{Dir, Height, KidKeys, Kids, LinkRef, Linked, Links, Parent};
pub(crate) use shared::View;
pub(crate) use tree::{Hooks, RawTree};
pub(crate) use txn::{Change, Slot, Txn};

pub(crate) use shape::{Shadow, VebOrder, van_emde_boas};

#[cfg(all(test, not(latchtree_loom)))]
mod tests;
