//! The invariant checker, run by tests after every operation.
//!
//! It checks, at rest (no write in progress):
//! * `seq` is even;
//! * in each copy: the root is black and has no parent; every child's parent
//!   link points back; no red node has a red child; every root-to-nil path
//!   has the same number of black nodes; keys strictly increase in order; no
//!   node is reached twice (no cycle, no sharing); the node count matches the
//!   copy's length; the height is within [`MAX_DEPTH`]; the copy's
//!   published descent plan (`descent.rs`) is exact and equals the height,
//!   or is not and equals the black height;
//! * the two copies hold the same nodes with the same shape and colours;
//! * in copy 0, for nodes that keep them: every cached child key is its
//!   child's key, and (while the writer keeps them) every node's recorded
//!   height is its subtree's (`links.rs`: `KidKeys`, `Height`).

use super::descent::Descent;
use super::links::{Dir, Linked};
use super::shared::MAX_DEPTH;
use crate::sync::{AtomicPtr, Ordering};
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// One node's links in one copy, as plain values.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    left: usize,
    right: usize,
    parent: usize,
    red: bool,
}

/// See the module docs.
pub(crate) fn check<N: Linked>(
    seq: u64,
    heights: bool,
    roots: [&AtomicPtr<N>; 2],
    lens: [usize; 2],
    descents: [usize; 2],
    less: impl Fn(&N, &N) -> bool,
) -> Result<(), String> {
    if !seq.is_multiple_of(2) {
        return Err(format!("seq {seq} is odd at rest"));
    }
    let mut orders = Vec::new();
    for copy in 0..2 {
        let root = roots[copy].load(Ordering::Relaxed);
        let mut order: Vec<*mut N> = Vec::new();
        let mut seen = BTreeSet::new();
        if !root.is_null() {
            // SAFETY: at rest every node reachable from a root is live.
            let r = unsafe { &*root }.links(copy);
            if !r.parent().is_null() {
                return Err(format!("copy {copy}: root has a parent"));
            }
            if r.is_red() {
                return Err(format!("copy {copy}: root is red"));
            }
        }
        let mut height = 0;
        // The nil-inclusive black height: one more than the nodes'.
        let black = subtree(root, copy, 0, &mut height, &mut seen, &mut order)
            .map_err(|e| format!("copy {copy}: {e}"))?
            - 1;
        let plan = Descent::from_word(descents[copy]);
        let (want, what) = if plan.exact {
            (height, "height")
        } else {
            (black, "black height")
        };
        if plan.trips != want {
            return Err(format!(
                "copy {copy}: readers take {} branch-free steps, but the copy's {what} is {want}",
                plan.trips
            ));
        }
        if copy == 0 {
            copy0_extras(root, heights).map_err(|e| format!("copy 0: {e}"))?;
        }
        if order.len() != lens[copy] {
            return Err(format!(
                "copy {copy}: {} nodes but length {}",
                order.len(),
                lens[copy]
            ));
        }
        for w in order.windows(2) {
            // SAFETY: live, as above.
            let (a, b) = unsafe { (&*w[0], &*w[1]) };
            if !less(a, b) {
                return Err(format!("copy {copy}: keys out of order"));
            }
        }
        orders.push(order);
    }
    if orders[0] != orders[1] {
        return Err("the copies hold different nodes".into());
    }
    for &n in &orders[0] {
        // SAFETY: live, as above.
        let node = unsafe { &*n };
        if shape(node, 0) != shape(node, 1) {
            return Err("the copies have different shapes".into());
        }
    }
    Ok(())
}

/// Checks copy 0's cached child keys under `n`, where the nodes keep them,
/// and its recorded heights if `heights` (the writer keeps them: see
/// `txn::Shape::heights`); returns the subtree's height. Runs after
/// `subtree` accepted the copy (a tree, within `MAX_DEPTH`).
fn copy0_extras<N: Linked>(n: *mut N, heights: bool) -> Result<usize, String> {
    // SAFETY: at rest every node reachable from a root is live.
    let Some(node) = (unsafe { n.as_ref() }) else {
        return Ok(0);
    };
    let l = node.links(0);
    let mut h = [0; 2];
    for (i, dir) in [Dir::Left, Dir::Right].into_iter().enumerate() {
        let c = l.load_child(dir);
        h[i] = copy0_extras(c, heights)?;
        if N::COPY0_KID_KEYS {
            // SAFETY: as above.
            let want = unsafe { c.as_ref() }.map_or_else(|| node.search_key(), N::search_key);
            if l.load_child_key(dir) != Some(want) {
                return Err(format!(
                    "a cached child key is {:?}, the child's key {want}",
                    l.load_child_key(dir)
                ));
            }
        }
    }
    let height = 1 + h[0].max(h[1]);
    if N::HAS_HEIGHT && heights {
        let recorded = node.height().map(|h| h.get());
        if recorded != Some(height) {
            return Err(format!(
                "a node records height {recorded:?}, its subtree's is {height}"
            ));
        }
    }
    Ok(height)
}

fn shape<N: Linked>(node: &N, copy: usize) -> Shape {
    let l = node.links(copy);
    Shape {
        left: l.load_child(Dir::Left).addr(),
        right: l.load_child(Dir::Right).addr(),
        parent: l.parent().addr(),
        red: l.is_red(),
    }
}

/// Checks the subtree at `n` (at `depth` nodes below the root) and returns
/// its black height; raises `height` to the longest path's node count.
fn subtree<N: Linked>(
    n: *mut N,
    copy: usize,
    depth: usize,
    height: &mut usize,
    seen: &mut BTreeSet<usize>,
    order: &mut Vec<*mut N>,
) -> Result<usize, String> {
    if n.is_null() {
        return Ok(1);
    }
    if depth >= MAX_DEPTH {
        return Err("deeper than the descent cap".into());
    }
    *height = (*height).max(depth + 1);
    if !seen.insert(n.addr()) {
        return Err("a node is reachable twice".into());
    }
    // SAFETY: at rest every node reachable from a root is live.
    let l = unsafe { &*n }.links(copy);
    let mut heights = [0; 2];
    for (i, dir) in [Dir::Left, Dir::Right].into_iter().enumerate() {
        let c = l.load_child(dir);
        if !c.is_null() {
            // SAFETY: as above.
            let cl = unsafe { &*c }.links(copy);
            if cl.parent() != n {
                return Err("a child's parent link does not point back".into());
            }
            if l.is_red() && cl.is_red() {
                return Err("a red node has a red child".into());
            }
        }
        if dir == Dir::Right {
            order.push(n);
        }
        heights[i] = subtree(c, copy, depth + 1, height, seen, order)?;
    }
    if heights[0] != heights[1] {
        return Err("black heights differ".into());
    }
    Ok(heights[0] + usize::from(!l.is_red()))
}
