//! Giving memory back: [`AddrIndex::shrink_to_fit`].
//!
//! Range nodes live in type-stable chunks that writes never free
//! (`slab.rs`): [`AddrIndex::lookup`] pins nothing and registers nowhere, so
//! no grace period can tell when an unpinned reader that loaded a link
//! before a removal has left the node it stands on; it may be a thread
//! descheduled mid-descent, or a signal handler that interrupted one, for
//! as long as the scheduler likes. Freeing a chunk behind such a reader
//! would make its next load a use after free. The epoch and the handler
//! sections cover the other readers, not this one, so writes (and `flush`,
//! and `synchronize`) keep every chunk, and reuse its nodes.
//!
//! `&mut self` is the proof that no reader of any kind is left: every read
//! borrows the index (`lookup` and `HandlerSection` for the call or the
//! section, the guarded reads for as long as their hits live). So
//! [`shrink_to_fit`](AddrIndex::shrink_to_fit) moves the live ranges into a
//! fresh slab grown as a fresh index of them would be, links them into the
//! balanced shape in both copies (in van Emde Boas order, as a rebuild
//! would lay them out), frees the old chunks, and frees what waits in the
//! limbo (removed records, replaced table segments) and the spare capacity of
//! the side tables.

use super::index::AddrIndex;
use super::record::Record;
use super::slab::Slab;
use alloc::vec::Vec;
use core::ptr::NonNull;

impl<T> AddrIndex<T> {
    /// Gives back the memory the index holds beyond what its registered
    /// modules need: after removing most modules, an index holds about what
    /// a fresh index of the remaining ones would.
    ///
    /// Writes reuse the memory of removed ranges but never return it to the
    /// allocator while the index lives (see [memory](AddrIndex#memory)):
    /// the signal-safe [`lookup`](AddrIndex::lookup) pins nothing, so only
    /// exclusive access (`&mut self`) proves that no reader still stands on
    /// it. This moves every range to fresh memory (O(n), one write in
    /// [`stats`](AddrIndex::stats)) and drops, on this thread, the values
    /// of removed modules that were still waiting for their grace period (a
    /// panic from a value's `Drop` is counted, not propagated, as during
    /// reclamation). Ids, ranges, values and lookups are unchanged.
    ///
    /// ```
    /// let mut index = latchtree::AddrIndex::new();
    /// let ids: Vec<_> = (0..1000u64).map(|i| index.insert(i * 16..i * 16 + 8, i).unwrap()).collect();
    /// for id in &ids[10..] {
    ///     index.remove(*id);
    /// }
    /// index.shrink_to_fit();
    /// assert_eq!(index.range_count(), 10);
    /// assert_eq!(index.lookup(9 * 16).map(|h| h.id()), Some(ids[9]));
    /// ```
    pub fn shrink_to_fit(&mut self) {
        // Removed records and replaced segments still waiting: their grace
        // period is over, no reader is left (`&mut self`). Freed below,
        // with no lock held (a value's `Drop` is user code).
        let w = self.tree.state_mut();
        let waiting = w.pending.take_waiting();
        w.created = Vec::new();
        w.retired = Vec::new();
        self.reclaim.take_shells(&mut w.pending).free();
        let live = self.tree.len();
        let w = self.tree.state_mut();
        if w.slab.free_len() > 0 && w.slab.nodes() > Slab::<Record<T>>::fresh_nodes(live) {
            // A migration running (`layout.rs`) holds nodes of the old slab:
            // dropped with it, and so are the trees an adoption left to
            // release (`drain_live_nodes`).
            w.layout.forget();
            let old = self.tree.drain_live_nodes();
            // Fresh nodes at rising addresses, filled in van Emde Boas order
            // of the balanced shape, so that `build` lays the tree out as a
            // rebuild would (`layout.rs`).
            let ranks = crate::raw::van_emde_boas(old.len());
            let mut fresh = Slab::new();
            while fresh.free_len() < old.len() {
                fresh.grow_free();
            }
            let mut copies: Vec<NonNull<_>> =
                (0..old.len()).filter_map(|_| fresh.pop_free()).collect();
            copies.sort_unstable();
            for (&k, &c) in ranks.iter().zip(&copies) {
                // `fill` rewrites nodes readers may stand on only after a
                // flip; these are fresh, and no reader is left anyway.
                // SAFETY: `c` is a node of `fresh`; `old[k]` was drained from
                // the tree just now: a live slab node.
                unsafe { fresh.fill(c, old[k].as_ref().fields()) };
            }
            let mut new: Vec<NonNull<_>> = copies.clone();
            for (&k, &c) in ranks.iter().zip(&copies) {
                new[k] = c;
            }
            // The old nodes are in no tree now and no reader is left
            // (`&mut self`): their chunks go with the old slab.
            drop(core::mem::replace(&mut self.tree.state_mut().slab, fresh));
            // The copies are fresh slab nodes, distinct, in key order (each
            // holds its original's range), in no tree; the tree is empty
            // (drained); `&mut self`.
            // SAFETY: so `build`'s contract holds.
            unsafe { self.tree.build(&new) };
            self.tree.reset_after_build();
        }
        for t in &mut self.tables {
            t.shrink_to_fit();
        }
        for g in waiting {
            // SAFETY: out of every copy, reachable by no reader (`&mut
            // self`), handed out once by the limbo.
            unsafe { crate::reclaim::free_now(g) };
        }
    }
}

#[cfg(all(test, not(latchtree_loom)))]
mod tests {
    use crate::AddrIndex;
    use std::sync::Arc;

    /// The slab's chunk bytes and nodes, and table 0's capacity.
    fn held<T>(index: &mut AddrIndex<T>) -> (usize, usize, usize) {
        let cap = index.tables[0].capacity();
        let w = index.tree.state_mut();
        (w.slab.chunk_bytes(), w.slab.nodes(), cap)
    }

    /// Random-order keys (xorshift), distinct.
    fn shuffled(n: u64) -> Vec<u64> {
        let mut keys: Vec<u64> = (0..n).collect();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for i in (1..keys.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            keys.swap(i, (x % (i as u64 + 1)) as usize);
        }
        keys
    }

    /// After growing and removing 99 %, `shrink_to_fit` leaves exactly
    /// the chunks and table capacity a fresh index of the rest has, and the
    /// index keeps answering and accepting writes.
    #[test]
    fn shrink_to_fit_after_mass_removal_holds_what_a_fresh_index_holds() {
        let n = if cfg!(miri) { 120 } else { 20_000 };
        let keep_every = if cfg!(miri) { 10 } else { 100 };
        let mut index = AddrIndex::new();
        let ids: Vec<_> = shuffled(n)
            .into_iter()
            .map(|k| (k, index.insert(k * 16..k * 16 + 8, k).unwrap()))
            .collect();
        let mut kept = Vec::new();
        for (i, &(k, id)) in ids.iter().enumerate() {
            if i % keep_every == 0 {
                kept.push((k, id));
            } else {
                index.remove(id).unwrap();
            }
        }
        index.synchronize();
        let before = held(&mut index);
        index.shrink_to_fit();
        index.check_invariants().unwrap();
        let mut fresh = AddrIndex::new();
        for &(k, _) in &kept {
            fresh.insert(k * 16..k * 16 + 8, k).unwrap();
        }
        // A fresh index may hold more: its rebuilds relocate (`layout.rs`).
        let (after, fresh) = (held(&mut index), held(&mut fresh));
        assert!(after.0 <= fresh.0, "{after:?} > fresh {fresh:?}");
        assert_eq!(after.1, super::Slab::<u64>::fresh_nodes(kept.len()));
        assert_eq!(after.2, fresh.2, "table capacity");
        // Most of it went: a tenth or more kept holds at least twice less.
        assert!(
            after.0 * (keep_every / 5) < before.0,
            "{after:?} of {before:?}"
        );
        for &(k, id) in &ids {
            let want = kept.iter().any(|&(_, i)| i == id).then_some(id);
            assert_eq!(index.lookup(k * 16 + 3).map(|h| h.id()), want);
        }
        let guard = index.pin();
        for &(k, id) in &kept {
            assert_eq!(index.get(id, &guard), Some(&k));
        }
        drop(guard);
        // Writes go on: new ids, recycled and fresh nodes.
        for k in n..n + 50 {
            let id = index.insert(k * 16..k * 16 + 8, k).unwrap();
            assert!(id > ids.last().unwrap().1);
        }
        for &(_, id) in &kept[..kept.len() / 2] {
            index.remove(id).unwrap();
        }
        index.check_invariants().unwrap();
        assert_eq!(index.range_count(), kept.len() - kept.len() / 2 + 50);
    }

    /// Values still waiting for their grace period are dropped by
    /// `shrink_to_fit`; an index with nothing left holds no chunk and no
    /// table array, and grows again.
    #[test]
    fn shrink_to_fit_drops_waiting_values_and_empties_an_empty_index() {
        let mut index = AddrIndex::new();
        let value = Arc::new(7);
        let ids: Vec<_> = (0..40u64)
            .map(|i| {
                index
                    .insert(i * 16..i * 16 + 8, Arc::clone(&value))
                    .unwrap()
            })
            .collect();
        let guard = index.pin(); // keeps the removed values waiting
        for id in ids {
            drop(index.remove(id));
        }
        drop(guard);
        assert!(Arc::strong_count(&value) > 1);
        index.shrink_to_fit();
        assert_eq!(Arc::strong_count(&value), 1);
        assert_eq!(held(&mut index), (0, 0, 0));
        index.check_invariants().unwrap();
        let id = index.insert(0..8, Arc::clone(&value)).unwrap();
        assert_eq!(index.lookup(4).map(|h| h.id()), Some(id));
        index.check_invariants().unwrap();
        // Nothing to give back: nothing moves.
        let at = held(&mut index);
        index.shrink_to_fit();
        assert_eq!(held(&mut index), at);
    }

    /// A large tree comes out of `shrink_to_fit` laid out as a rebuild lays
    /// it out (van Emde Boas order), with an exact descent.
    #[test]
    fn shrink_to_fit_lays_large_trees_out_in_van_emde_boas_order() {
        // Under Miri, enough ranges that half of them leave chunks to spare
        // (else there is nothing to compact).
        let n = if cfg!(miri) { 60 } else { 2 * 4096 + 100 };
        let mut index = AddrIndex::new();
        let ids: Vec<_> = shuffled(n)
            .into_iter()
            .map(|k| index.insert(k * 16..k * 16 + 8, k).unwrap())
            .collect();
        for id in &ids[..ids.len() / 2] {
            index.remove(*id).unwrap();
        }
        index.shrink_to_fit();
        let (addrs, exact) = index.read(|view| {
            let mut addrs = Vec::new();
            view.walk(|n| addrs.push(core::ptr::from_ref(n).addr()))?;
            Some((addrs, view.exact()))
        });
        assert!(exact, "balanced after shrink_to_fit");
        let ranks = crate::raw::van_emde_boas(addrs.len());
        assert!(ranks.windows(2).all(|w| addrs[w[0]] < addrs[w[1]]));
        index.check_invariants().unwrap();
    }

    /// Compaction in the middle of an incremental rebuild (`layout.rs`):
    /// the migration's nodes and any adopted tree still being released lie
    /// in the old slab, so they must go with it; later writes (which would
    /// go on migrating and releasing) then work on the fresh slab only.
    #[test]
    fn shrink_to_fit_while_a_migration_runs() {
        let n = if cfg!(miri) { 64 } else { 2800 };
        let mut index = AddrIndex::with_policy(crate::LayoutPolicy::small(2));
        let ids: Vec<_> = (0..n)
            .map(|k| index.insert(k * 16..k * 16 + 8, k).unwrap())
            .collect();
        let running = |index: &mut AddrIndex<u64>| index.tree.state_mut().layout.running();
        let mut kept: Vec<u64> = (0..n).collect();
        let mut removed = 0;
        for (k, id) in ids.iter().enumerate().rev().step_by(2) {
            index.remove(*id).unwrap();
            kept.retain(|&x| x != k as u64);
            removed += 1;
            if running(&mut index) && removed > 8 {
                break;
            }
        }
        assert!(running(&mut index), "no migration ran");
        index.shrink_to_fit();
        assert!(!running(&mut index));
        index.check_invariants().unwrap();
        let answers = |index: &AddrIndex<u64>, kept: &[u64]| {
            for k in 0..n + 64 {
                let want = kept.contains(&k).then_some(k * 16..k * 16 + 8);
                assert_eq!(index.lookup(k * 16 + 3).map(|h| h.range()), want, "{k}");
            }
        };
        answers(&index, &kept);
        // Enough writes for more migrations and adoptions on the fresh slab.
        for k in n..n + 64 {
            index.insert(k * 16..k * 16 + 8, k).unwrap();
            kept.push(k);
            if !cfg!(miri) || k % 16 == 0 {
                index.check_invariants().unwrap();
            }
        }
        answers(&index, &kept);
    }
}
