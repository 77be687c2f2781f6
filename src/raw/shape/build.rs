//! The balanced shape: a bulk build (`RawTree::build`, `tree.rs`) links a
//! sorted run of fresh nodes into it in O(n), in both copies at once, as
//! one version; a rebuild relinks the nodes of one copy into it, in place,
//! inside a write transaction (`tree.rs` replays it on the other copy, so
//! both get the same shape).
//!
//! Splitting at the middle makes every subtree's halves differ in size by at
//! most one, so every nil link of an `n`-node tree lies at depth
//! `floor(log2(n + 1))` or one below. Colouring the nodes above that depth
//! black and those at it red gives every root-to-nil path the same number of
//! black nodes, and no red node has a red child (a red node's children are
//! nil). The checker verifies it in the tests.

use crate::raw::descent::balanced_height;
use crate::raw::links::{Dir, Linked, link_store_order};
use crate::raw::walk::nodes_in_order;
use crate::sync::{AtomicPtr, Ordering};
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;
use core::ptr::{self, NonNull};

/// Relinks every node of copy `copy` (root in `root`) into the balanced
/// shape, in place: the same nodes in the same order, so the copy's content
/// is unchanged and the same call on the other copy, holding the same nodes,
/// gives it the same shape. Its plan is then
/// [`Descent::balanced`](super::descent::Descent::balanced).
///
/// # Safety
/// Writer lock held; readers are steered away from copy `copy` (its stores
/// are published by the next flip, like any write's); the copy holds only
/// live nodes.
pub(in crate::raw) unsafe fn rebuild<N: Linked>(root: &AtomicPtr<N>, copy: usize) {
    // SAFETY: the copy is not being modified (writer lock) and holds only
    // live nodes (caller).
    let nodes = unsafe { nodes_in_order(root.load(Ordering::Relaxed), copy) };
    // SAFETY: forwarded; they are this copy's nodes in key order.
    unsafe { relink(&nodes, root, copy) };
}

/// Makes `nodes` the whole of copy `copy` (root in `root`), in
/// the balanced shape.
///
/// # Safety
/// As for [`rebuild`]; `nodes` are live, distinct and in key order, and
/// each is this copy's or in no tree.
pub(in crate::raw) unsafe fn relink<N: Linked>(
    nodes: &[NonNull<N>],
    root: &AtomicPtr<N>,
    copy: usize,
) {
    // SAFETY: forwarded; only this copy's links are rewritten.
    let new_root = unsafe { link_balanced(nodes, copy..copy + 1) };
    // Release, as every root store; see `links.rs`.
    root.store(new_root, link_store_order());
}

/// Links `nodes` into the balanced shape in the copies `copies` and returns
/// its root (null for none): the whole of a bulk build
/// ([`RawTree::build`](super::tree::RawTree::build), both copies at once)
/// and of a [`relink`] (one copy).
///
/// # Safety
/// As for [`link`], the root's parent being null.
pub(in crate::raw) unsafe fn link_balanced<N: Linked>(
    nodes: &[NonNull<N>],
    copies: Range<usize>,
) -> *mut N {
    let full = (nodes.len() + 1).ilog2() as usize;
    // SAFETY: forwarded from the caller.
    unsafe { link(nodes, ptr::null_mut(), 0, full, copies) }
}

/// The key-order ranks of the balanced shape's nodes over `len` nodes, in
/// van Emde Boas order ([`VebOrder`], collected): for compaction and the
/// tests.
pub(crate) fn van_emde_boas(len: usize) -> Vec<usize> {
    VebOrder::new(len).map(|s| s.rank).collect()
}

/// The nodes of the balanced shape over `len` nodes, each as a [`Spot`],
/// in van Emde Boas order: the top half of its levels first (recursively
/// in this order), then each subtree hanging below them, left to right
/// (recursively too). Every subtree of `2^k - 1` nodes then lies in one run
/// of memory when the nodes are allocated in this order, so a path of `h`
/// levels crosses about `h / k` such runs, whatever the line or page size:
/// at 128 bytes a node, a 4 KiB page holds a subtree of 4 or 5 levels, and
/// a path of 18 levels touches 4 to 6 pages instead of one a level.
///
/// Every node comes after its parent (a subtree's top levels come before
/// the subtrees below them), so a tree can be linked in this order, each
/// node under its parent. An iterator over an explicit stack of a few
/// dozen frames, so that a caller can take the order a slice at a time
/// (`addr_index/layout.rs` builds a tree over many writes).
#[derive(Clone, Debug)]
pub(crate) struct VebOrder {
    stack: Vec<Frame>,
    /// Whether each spot says its subtree's height (for a shadow that keeps
    /// heights, `shadow.rs`: up to `HEIGHTS_MAX` nodes); else 0.
    heights: bool,
    /// The spots of a subtree of at most three levels, in pre-order, which
    /// is their van Emde Boas order: most nodes lie in such subtrees, and
    /// they are worked out together instead of a frame a node.
    small: [Spot; SMALL],
    /// `small[small_at..small_len]` are still to come.
    small_at: usize,
    small_len: usize,
}

/// The nodes of a subtree of three levels.
const SMALL: usize = 7;

/// Where a node of the balanced shape goes: its key-order rank, its
/// parent's rank (`None` for the root), which child of it the node is, its
/// depth (the root's is 0) and the height of its subtree (0 from an order
/// over more than `HEIGHTS_MAX` nodes, whose shadows keep no heights).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Spot {
    pub(crate) rank: usize,
    pub(crate) parent: Option<usize>,
    pub(crate) dir: Dir,
    pub(crate) depth: usize,
    pub(crate) height: usize,
}

/// Where a subtree's root hangs: its parent's rank (`None` for the root),
/// which child of it the root is, and its depth. What a [`Spot`] says but
/// its rank and height, which [`VebOrder`] adds when it hands the spot out
/// (its pending frames, copied at every step, stay smaller).
#[derive(Clone, Copy, Debug)]
struct Up {
    parent: Option<usize>,
    dir: Dir,
    depth: usize,
}

/// One pending step of [`VebOrder`]; `up` is where the root of the
/// subtree over `keys` hangs.
#[derive(Clone, Debug)]
enum Frame {
    /// The subtree over `keys`, its first `levels` levels.
    Top {
        keys: Range<usize>,
        levels: usize,
        up: Up,
    },
    /// The subtrees `depth` levels below the one over `keys`, from the
    /// `next`-th (in key order), each to `levels` levels.
    Below {
        keys: Range<usize>,
        depth: usize,
        levels: usize,
        next: usize,
        up: Up,
    },
}

impl VebOrder {
    pub(crate) fn new(len: usize) -> Self {
        let up = Up {
            parent: None,
            dir: Dir::Left,
            depth: 0,
        };
        VebOrder {
            stack: vec![Frame::Top {
                keys: 0..len,
                levels: balanced_height(len),
                up,
            }],
            heights: len <= crate::raw::links::HEIGHTS_MAX,
            small: [Spot {
                rank: 0,
                parent: None,
                dir: Dir::Left,
                depth: 0,
                height: 0,
            }; SMALL],
            small_at: 0,
            small_len: 0,
        }
    }

    /// Queues the pre-order of the subtree over `keys`, its first `levels`
    /// (one to three) levels, whose root hangs at `up`: `small[..len]`.
    fn fill_small(&mut self, keys: Range<usize>, levels: usize, up: Up) {
        let heights = self.heights;
        let mut len = 0;
        let mut put = |keys: &Range<usize>, parent, dir, depth| {
            let m = middle(keys);
            self.small[len] = Spot {
                rank: m,
                parent,
                dir,
                depth,
                height: if heights {
                    balanced_height(keys.len())
                } else {
                    0
                },
            };
            len += 1;
            m
        };
        let m = put(&keys, up.parent, up.dir, up.depth);
        if levels > 1 {
            for (kid, dir) in [(keys.start..m, Dir::Left), (m + 1..keys.end, Dir::Right)] {
                if kid.is_empty() {
                    continue;
                }
                let k = put(&kid, Some(m), dir, up.depth + 1);
                if levels > 2 {
                    for (grandkid, dir) in [(kid.start..k, Dir::Left), (k + 1..kid.end, Dir::Right)]
                    {
                        if !grandkid.is_empty() {
                            put(&grandkid, Some(k), dir, up.depth + 2);
                        }
                    }
                }
            }
        }
        self.small_len = len;
    }

    /// [`next`](Iterator::next) once the queued small subtree is done.
    fn next_frame(&mut self) -> Option<Spot> {
        while let Some(frame) = self.stack.pop() {
            match frame {
                Frame::Top { keys, levels, up } => {
                    if keys.is_empty() || levels == 0 {
                        continue;
                    }
                    if levels <= 3 {
                        // Up to three levels the order is the pre-order (the
                        // top is the root alone, each half below it at most
                        // two levels): the root now, then each child's
                        // subtree, queued at once, without a frame each.
                        self.fill_small(keys, levels, up);
                        self.small_at = 1;
                        return Some(self.small[0]);
                    }
                    let top = levels / 2;
                    self.stack.push(Frame::Below {
                        keys: keys.clone(),
                        depth: top,
                        levels: levels - top,
                        next: 0,
                        up,
                    });
                    self.stack.push(Frame::Top {
                        keys,
                        levels: top,
                        up,
                    });
                }
                Frame::Below {
                    keys,
                    depth,
                    levels,
                    next,
                    up,
                } => {
                    if next == 1 << depth {
                        continue;
                    }
                    let (sub, sub_up) = nth_below(&keys, depth, next, up);
                    self.stack.push(Frame::Below {
                        keys,
                        depth,
                        levels,
                        next: next + 1,
                        up,
                    });
                    self.stack.push(Frame::Top {
                        keys: sub,
                        levels,
                        up: sub_up,
                    });
                }
            }
        }
        None
    }
}

impl Iterator for VebOrder {
    type Item = Spot;

    #[inline]
    fn next(&mut self) -> Option<Spot> {
        if self.small_at < self.small_len {
            self.small_at += 1;
            return Some(self.small[self.small_at - 1]);
        }
        self.next_frame()
    }
}

/// The root's rank in the subtree over `keys`, as `link` splits it.
fn middle(keys: &Range<usize>) -> usize {
    keys.start + keys.len() / 2
}

/// The keys of the `i`-th (in key order) subtree `depth` levels below the
/// one over `keys`, whose root hangs at `up` (empty where the shape has
/// none), and where that subtree's root hangs.
fn nth_below(keys: &Range<usize>, depth: usize, i: usize, up: Up) -> (Range<usize>, Up) {
    let mut keys = keys.clone();
    let mut up = up;
    for bit in (0..depth).rev() {
        if keys.is_empty() {
            break;
        }
        let m = middle(&keys);
        let right = i >> bit & 1 == 1;
        up = Up {
            parent: Some(m),
            dir: Dir::toward(right),
            depth: up.depth + 1,
        };
        keys = if right {
            m + 1..keys.end
        } else {
            keys.start..m
        };
    }
    (keys, up)
}

/// Links `nodes` as a subtree under `parent` at `depth` in the copies
/// `copies` and returns its root (null for none). Nodes at depth `full` are
/// red, the others black.
///
/// # Safety
/// The nodes are live, distinct and in key order, and the caller may write
/// their links in `copies` (see `RawTree::build` and [`rebuild`]);
/// `parent` is null or one of the nodes.
unsafe fn link<N: Linked>(
    nodes: &[NonNull<N>],
    parent: *mut N,
    depth: usize,
    full: usize,
    copies: Range<usize>,
) -> *mut N {
    let Some(&mid) = nodes.get(nodes.len() / 2) else {
        return ptr::null_mut();
    };
    let n = mid.as_ptr();
    let half = nodes.len() / 2;
    // SAFETY: forwarded; the halves are disjoint runs of the same slice.
    let (left, right) = unsafe {
        (
            link(&nodes[..half], n, depth + 1, full, copies.clone()),
            link(&nodes[half + 1..], n, depth + 1, full, copies.clone()),
        )
    };
    // SAFETY: `mid` is live and owned by the tree (caller).
    let node = unsafe { mid.as_ref() };
    if copies.contains(&0)
        && let Some(h) = node.height()
    {
        // A run splits at its middle (module docs): its height is
        // `balanced_height` of its length, whichever half is longer.
        h.set(balanced_height(nodes.len()));
    }
    for copy in copies {
        let l = node.links(copy);
        // SAFETY: null or the roots just linked, live (caller).
        unsafe {
            l.set_child(Dir::Left, left);
            l.set_child(Dir::Right, right);
        }
        l.set_parent_color(parent, depth < full);
    }
    n
}
