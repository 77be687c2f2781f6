//! How a reader walks one copy from its root to a leaf: the plan that the
//! writer publishes with each copy, and the descents that follow it (one
//! path, or several in lockstep).
//!
//! # The plan
//! A [`Descent`] word says how many steps to take with no data-dependent
//! branch (`trips`: where a path ends sooner, the walk stands still on its
//! last node, a select rather than a branch), and whether that is all
//! (`exact`) or a branchy tail follows the path on to nil. The writer
//! publishes (`RawTree::publish`):
//! * **exact, the copy's height**, for a copy in the balanced shape that
//!   `build.rs` links (a bulk build, or the rebuild a write runs once an
//!   insert landed two levels below the balanced height, at most every
//!   `len / 8` updates and only up to `txn::IN_PLACE_MAX` nodes, or the
//!   one a front-end asks for; see `txn.rs`). Its leaves sit on two adjacent
//!   levels, so every
//!   lookup takes its own path length or one step more, and no loop exit
//!   waits to be mispredicted;
//! * **exact, the copy's height**, for a copy whose nodes keep their heights
//!   (`Linked::height`, `AddrIndex`'s range nodes) and whose height is at
//!   most `EXACT_SLACK` (`shape/`) above the balanced one: a tree grown in
//!   random order is about one level above it at n = 84, and the writer
//!   knows its height after every write, so its lookups take the
//!   branch-free walk too, without waiting for a rebuild;
//! * **the copy's black height, then a tail**, for any other shape. Every
//!   root-to-nil path holds that many nodes, so no trip is wasted standing
//!   still; the tail walks the rest of the path (its red nodes, at most as
//!   many again). A fixed `2 * black height` would pay the longest path on
//!   every lookup (1.5–1.85× the average on the trees sequential inserts
//!   build), and its standing-still trips would keep the next lookup's
//!   loads from starting.
//!
//! The plan is read like any word of the copy: a torn one (from a newer
//! version) makes the read fail validation. It only steers the walk; what
//! bounds it is [`MAX_DEPTH`]: at most that many trips, and a tail that
//! gives up (a torn read: retry) past that many nodes, so no torn shape can
//! loop a reader. The checker (`check.rs`) verifies every published plan:
//! an exact plan one trip short of the height would make readers stop above
//! the deepest leaves and answer wrongly (the `short_trips` defect).

use super::links::{Dir, Linked};
use super::shared::{MAX_DEPTH, View};
use crate::sync::Ordering;

/// A published descent plan; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Descent {
    /// Steps taken without a data-dependent branch.
    pub(crate) trips: usize,
    /// `trips` is the copy's height: no tail follows.
    pub(crate) exact: bool,
}

impl Descent {
    /// The word stored in a copy's head.
    pub(crate) fn word(self) -> usize {
        (self.trips << 1) | usize::from(self.exact)
    }

    /// The plan a head's word holds.
    #[inline(always)]
    pub(crate) fn from_word(word: usize) -> Self {
        Descent {
            trips: word >> 1,
            exact: word & 1 == 1,
        }
    }

    /// The exact plan of `build.rs`'s balanced shape over `len` nodes: its
    /// height ([`balanced_height`]).
    pub(crate) fn balanced(len: usize) -> Self {
        let height = balanced_height(len);
        let trips = if cfg!(latchtree_defect = "short_trips") {
            // The planted defect: an exact plan one trip short.
            height.saturating_sub(1)
        } else {
            height
        };
        Descent { trips, exact: true }
    }
}

/// The height of `build.rs`'s balanced shape over `len` nodes,
/// `floor(log2(len)) + 1` (0 for none).
#[inline]
pub(crate) fn balanced_height(len: usize) -> usize {
    len.checked_ilog2().map_or(0, |h| h as usize + 1)
}

impl<'g, N: Linked> View<'g, N> {
    /// The plan published with this copy, or `None` if it asks for more than
    /// [`MAX_DEPTH`] trips (only possible in a copy being rewritten).
    #[inline(always)]
    fn plan(self) -> Option<Descent> {
        // Relaxed: validated by the latch like every word of this copy.
        let plan = Descent::from_word(self.descent.load(Ordering::Relaxed));
        (plan.trips <= MAX_DEPTH).then_some(plan)
    }

    /// Whether this copy is published with an exact plan (the balanced
    /// shape); for tests of what a rebuild leaves.
    #[cfg(test)]
    pub(crate) fn exact(self) -> bool {
        self.plan().is_some_and(|p| p.exact)
    }

    /// One trip from `cur` (never null): the child `dir` leads to, or `cur`
    /// itself where that child is nil (a select, not a branch).
    #[inline(always)]
    fn trip(self, cur: *mut N, step: impl FnOnce(&'g N) -> Option<Dir>) -> *mut N {
        // `cur` is never null (the root was not, and a nil child is never taken), and by
        // `RawTree::read`'s contract every pointer a reader can load from this tree points to
        // memory valid for 'g.
        // SAFETY: so `cur` points to a node valid for 'g.
        let node = unsafe { &*cur };
        let next = match step(node) {
            Some(dir) => node.links(self.copy).load_child(dir),
            None => core::ptr::null_mut(),
        };
        core::hint::select_unpredictable(next.is_null(), cur, next)
    }

    /// Descends from the root, calling `step` on each node of one
    /// root-to-nil path; `step` returns the direction to go on, or `None` to
    /// stay on this node. It follows the copy's plan (module docs), so `step`
    /// may be called again on the node it stopped on and must then give the
    /// same answer (every search here keeps a candidate, which is
    /// idempotent). Returns `None` if the walk broke the [`MAX_DEPTH`] bound
    /// (only possible in a copy being rewritten).
    #[inline(always)]
    pub(crate) fn descend(self, mut step: impl FnMut(&'g N) -> Option<Dir>) -> Option<()> {
        // Acquire: pairs with the Release root store.
        let mut cur = self.root.load(Ordering::Acquire);
        if cur.is_null() {
            return Some(());
        }
        if cfg!(latchtree_defect = "no_depth_cap") {
            // The planted defect: the unbounded loop-until-nil descent.
            // SAFETY: as in `trip`.
            while let Some(node) = unsafe { cur.as_ref() } {
                match step(node) {
                    None => return Some(()),
                    Some(dir) => cur = node.links(self.copy).load_child(dir),
                }
            }
            return Some(());
        }
        let plan = self.plan()?;
        for _ in 0..plan.trips {
            cur = self.trip(cur, &mut step);
        }
        if plan.exact {
            return Some(());
        }
        self.tail(cur, plan.trips + 1, step)
    }

    /// The search of a tree ordered by a word key (`key(node)`, read like any
    /// word of the copy): the last node on the path whose key `right` sends
    /// right of, that is the greatest key `right` accepts when `right` holds
    /// for every key up to some bound (`None`: none). Returns `None` if the
    /// walk broke the [`MAX_DEPTH`] bound (a copy being rewritten).
    ///
    /// It follows the copy's plan like [`descend`](View::descend), with the
    /// next node's key on hand when the comparison needs it, so that a trip
    /// waits for one load (the child link) instead of two in a row (the
    /// link, then the key behind it):
    /// * on copy 0 of nodes that cache their children's keys
    ///   ([`KidKeys`](super::links::KidKeys)), a trip compares, then loads
    ///   the child link and the cached key of the way it goes, side by side;
    /// * otherwise a trip loads both children and both their keys before it
    ///   knows which way it goes.
    ///
    /// A nil child is read as the node itself (standing still, as in `trip`,
    /// with the node's own key: a nil child's cached key is the node's), so
    /// no trip loads through nil. The key is only compared, never followed:
    /// a torn one steers the walk wrongly at worst, and validation fails.
    #[inline(always)]
    pub(crate) fn search_by_key(
        self,
        key: impl Fn(&'g N) -> u64,
        right: impl Fn(u64) -> bool,
    ) -> Option<Option<&'g N>> {
        // Acquire: pairs with the Release root store.
        let mut cur = self.root.load(Ordering::Acquire);
        if cur.is_null() {
            return Some(None);
        }
        let plan = self.plan()?;
        // SAFETY: as in `trip`: a non-null pointer loaded from this tree points to a node
        // valid for 'g.
        let mut cur_key = key(unsafe { &*cur });
        let mut cand: *mut N = core::ptr::null_mut();
        if N::COPY0_KID_KEYS && self.copy == 0 {
            // The children's keys are cached beside their links: a trip
            // loads the link and the key it goes to, side by side.
            for _ in 0..plan.trips {
                // SAFETY: as in `trip` (`cur` is never null).
                let links = unsafe { &*cur }.links(0);
                let go = right(cur_key);
                cand = core::hint::select_unpredictable(go, cur, cand);
                let dir = Dir::toward(go);
                let next = links.load_child(dir);
                // A nil child's cached key is the node's own (`KidKeys`).
                cur_key = links.load_child_key(dir).unwrap_or(cur_key);
                cur = core::hint::select_unpredictable(next.is_null(), cur, next);
            }
        } else {
            for _ in 0..plan.trips {
                // SAFETY: as in `trip` (`cur` is never null).
                let node = unsafe { &*cur };
                let links = node.links(self.copy);
                let (l, r) = (links.load_child(Dir::Left), links.load_child(Dir::Right));
                let l = core::hint::select_unpredictable(l.is_null(), cur, l);
                let r = core::hint::select_unpredictable(r.is_null(), cur, r);
                // SAFETY: as in `trip`: both are non-null pointers of this tree.
                let (lk, rk) = unsafe { (key(&*l), key(&*r)) };
                let go = right(cur_key);
                cand = core::hint::select_unpredictable(go, cur, cand);
                cur = core::hint::select_unpredictable(go, r, l);
                cur_key = core::hint::select_unpredictable(go, rk, lk);
            }
        }
        // SAFETY: null or a node of this tree, valid for 'g (as in `trip`).
        let mut cand = unsafe { cand.as_ref() };
        if !plan.exact {
            // The rest of the path, branchy (`cur` may be a node the trips
            // already stood on: the step is idempotent).
            self.tail(cur, plan.trips + 1, |n| {
                let go = right(key(n));
                cand = if go { Some(n) } else { cand };
                Some(Dir::toward(go))
            })?;
        }
        Some(cand)
    }

    /// `K` descents in lockstep, one per lane: `step(lane, node)` says where
    /// lane `lane` goes from `node`. The lanes' loads are independent, so
    /// the CPU overlaps their cache misses; the tails (for a copy without an
    /// exact plan) run one lane after another. `step` must be idempotent on
    /// the node a lane stops on, as for [`descend`](View::descend).
    #[inline(always)]
    pub(crate) fn descend_lanes<const K: usize>(
        self,
        mut step: impl FnMut(usize, &'g N) -> Dir,
    ) -> Option<()> {
        // Acquire: pairs with the Release root store.
        let root = self.root.load(Ordering::Acquire);
        if root.is_null() {
            return Some(());
        }
        let plan = self.plan()?;
        let mut cur = [root; K];
        for _ in 0..plan.trips {
            for (lane, c) in cur.iter_mut().enumerate() {
                *c = self.trip(*c, |n| Some(step(lane, n)));
            }
        }
        if !plan.exact {
            for (lane, c) in cur.into_iter().enumerate() {
                self.tail(c, plan.trips + 1, |n| Some(step(lane, n)))?;
            }
        }
        Some(())
    }

    /// Follows the path on from `cur` (its node number `depth`, or its last
    /// node, already stepped on) to nil, giving up past [`MAX_DEPTH`] nodes.
    /// In a stable copy the tail starts at most at the black height's node,
    /// far below the bound, so a path the checker accepts (at most
    /// `MAX_DEPTH` nodes) never gives up.
    #[inline(always)]
    fn tail(
        self,
        mut cur: *mut N,
        mut depth: usize,
        mut step: impl FnMut(&'g N) -> Option<Dir>,
    ) -> Option<()> {
        loop {
            if depth > MAX_DEPTH {
                return None;
            }
            // SAFETY: as in `trip`.
            let node = unsafe { &*cur };
            let Some(dir) = step(node) else {
                return Some(());
            };
            let next = node.links(self.copy).load_child(dir);
            if next.is_null() {
                return Some(());
            }
            cur = next;
            depth += 1;
        }
    }
}
