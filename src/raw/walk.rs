//! In-order walks of one copy: the writer's ([`nodes_in_order`], which
//! trusts the copy) and a reader's ([`View::walk`], bounded like every read
//! and validated by the latch afterwards).

use super::links::{Dir, Linked};
use super::shared::{MAX_DEPTH, View};
use crate::sync::Ordering;
use alloc::vec::Vec;
use core::ptr::NonNull;

/// Every node of the subtree at `root` (null: none) in one copy, in key
/// order, walked by the writer.
///
/// # Safety
/// The subtree's links in `copy` are not being modified and reach only live
/// nodes.
pub(crate) unsafe fn nodes_in_order<N: Linked>(root: *mut N, copy: usize) -> Vec<NonNull<N>> {
    let mut out = Vec::new();
    let mut stack: Vec<NonNull<N>> = Vec::new();
    let mut cur = root;
    loop {
        while let Some(n) = NonNull::new(cur) {
            stack.push(n);
            // SAFETY: `n` is live (caller).
            cur = unsafe { n.as_ref() }.links(copy).load_child(Dir::Left);
        }
        let Some(n) = stack.pop() else { return out };
        out.push(n);
        // SAFETY: `n` is live (caller).
        cur = unsafe { n.as_ref() }.links(copy).load_child(Dir::Right);
    }
}

impl<'g, N: Linked> View<'g, N> {
    /// Visits every node in key order. Returns `None` (torn read) if the walk
    /// is deeper than [`MAX_DEPTH`] or longer than the copy's length.
    pub(crate) fn walk(self, mut visit: impl FnMut(&'g N)) -> Option<()> {
        let mut budget = self.len.load(Ordering::Relaxed);
        let mut stack: Vec<&'g N> = Vec::new();
        let mut cur = self.root.load(Ordering::Acquire);
        loop {
            // SAFETY: as in `View::descend` (`descent.rs`).
            while let Some(n) = unsafe { cur.as_ref() } {
                if stack.len() >= MAX_DEPTH {
                    return None;
                }
                stack.push(n);
                cur = n.links(self.copy).load_child(Dir::Left);
            }
            let Some(n) = stack.pop() else {
                return Some(());
            };
            budget = budget.checked_sub(1)?;
            visit(n);
            cur = n.links(self.copy).load_child(Dir::Right);
        }
    }
}
/// Hands up to `max` nodes of the trees rooted in `stack` to `release`,
/// each after its children went on the stack: the stack then holds the
/// roots of what is left.
///
/// # Safety
/// Every node reachable from `stack` through copy-1 links is live, in no
/// copy, and reachable once; none is released elsewhere.
pub(super) unsafe fn dismantle<N: Linked>(
    stack: &mut Vec<NonNull<N>>,
    max: usize,
    mut release: impl FnMut(NonNull<N>),
) {
    for _ in 0..max {
        let Some(n) = stack.pop() else { return };
        // SAFETY: `n` is live (caller), not released yet.
        let links = unsafe { n.as_ref() }.links(1);
        for dir in [Dir::Left, Dir::Right] {
            if let Some(kid) = NonNull::new(links.load_child(dir)) {
                stack.push(kid);
            }
        }
        release(n);
    }
}
