use super::LayoutPolicy;
use crate::{AddrIndex, ModuleId};
use std::collections::BTreeMap;

/// The policies a test runs under: tiny thresholds (migrations of small
/// trees spread over many writes) and, but under Miri, the default one.
fn policies() -> Vec<LayoutPolicy> {
    if cfg!(miri) {
        vec![LayoutPolicy::small(16)]
    } else {
        vec![LayoutPolicy::small(2), LayoutPolicy::DEFAULT]
    }
}

/// The nodes' addresses in key order, and whether the copy readers use
/// is in the balanced shape.
fn layout(index: &AddrIndex<u64>) -> (Vec<usize>, bool) {
    index.read(|view| {
        let mut addrs = Vec::new();
        view.walk(|n| addrs.push(core::ptr::from_ref(n).addr()))?;
        Some((addrs, view.exact()))
    })
}

/// Whether the nodes lie at rising addresses in van Emde Boas order.
fn in_van_emde_boas_order(addrs: &[usize]) -> bool {
    let ranks = crate::raw::van_emde_boas(addrs.len());
    ranks.windows(2).all(|w| addrs[w[0]] < addrs[w[1]])
}

/// `(migrations adopted, one running, a build placed a node out of
/// order)`.
fn migrations(index: &AddrIndex<u64>) -> (usize, bool, bool) {
    index.tree.inspect(|_, w| {
        let l = &w.layout;
        (l.adopted, l.migration.is_some(), l.out_of_order)
    })
}

fn shuffle(keys: &mut [u64], mut x: u64) {
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(i, (x % (i as u64 + 1)) as usize);
    }
}

/// Growing a tree past `layout_min` by single inserts migrates it over
/// many writes (each adopted tree built at rising addresses), for
/// ascending, descending and random growth; `rebalance` lays the nodes
/// out in van Emde Boas order within its one write, in the exact shape;
/// the index answers as before, and later migrations reuse the memory
/// the earlier ones freed.
#[test]
fn large_rebuilds_lay_nodes_out_in_van_emde_boas_order() {
    for (policy, order) in policies()
        .into_iter()
        .flat_map(|p| ["ascending", "descending", "random"].map(|o| (p, o)))
    {
        // Under Miri, past a few rebuilds in place.
        let n = if cfg!(miri) {
            3 * policy.layout_min
        } else {
            2 * policy.layout_min.max(700)
        } as u64;
        let index = AddrIndex::with_policy(policy);
        let mut keys: Vec<u64> = (0..n).collect();
        match order {
            "descending" => keys.reverse(),
            "random" => shuffle(&mut keys, 0x9e37_79b9_7f4a_7c15),
            _ => {}
        }
        let mut spanned = false;
        for &k in &keys {
            index.insert(k * 16..k * 16 + 8, k).unwrap();
            spanned |= migrations(&index).1;
        }
        let (adopted, _, out_of_order) = migrations(&index);
        assert!(
            adopted > 0 && spanned,
            "{order}: no write migrated the tree"
        );
        assert!(
            !out_of_order,
            "{order}: a build placed a node below the last"
        );
        index.remove(index.lookup(8 * 16).unwrap().id()).unwrap();
        index.rebalance();
        let (addrs, balanced) = layout(&index);
        assert!(
            balanced && in_van_emde_boas_order(&addrs),
            "{order}: rebalance"
        );
        assert!(!migrations(&index).1, "{order}: rebalance left a migration");
        index.check_invariants().unwrap();
        for k in 0..n {
            let hit = index.lookup(k * 16 + 3);
            assert_eq!(
                hit.map(|h| h.range()),
                (k != 8).then_some(k * 16..k * 16 + 8)
            );
        }
        let nodes = index.tree.inspect(|_, w| w.slab.nodes());
        assert!(
            nodes <= 3 * n as usize,
            "{order}: {nodes} nodes in the slab for {n} ranges"
        );
    }
}

/// `synchronize`'s work, done a bounded slice a write (`Layout::finish`),
/// on trees grown by single inserts with all but one range in `keep`
/// removed (a defragmentation to do), some with inserts after that until a
/// migration runs, under tiny and default thresholds and larger slices:
/// each of its writes moves at most `finish_units / MOVE_UNITS` nodes out
/// of sparse chunks and purges at most two chunks (its own and its
/// `settle`'s: several at once held the lock 2 ms), and a migration takes
/// more than one of them; the loop
/// ends within `finish_writes` (a slice of 1024 units at 5093 ranges once
/// needed more writes than a tighter bound allowed: purges ran before a
/// migration's reservation and a defragmentation filled the chunks again),
/// and leaves what one `synchronize` leaves: nothing more to do, no free
/// chunk resident, the live nodes resident in at most twice a fresh slab's,
/// and the index answering as before. (One write did nearly all of it: a
/// writer beside it waited up to 9.7 ms at 262 144 ranges with three in four
/// removed.)
#[test]
#[cfg_attr(
    miri,
    ignore = "no purge under Miri, so no defragmentation to bound; the migration's steps run \
              under Miri in the other layout tests (42 s for one small case)"
)]
fn synchronize_works_in_bounded_slices() {
    let slices = |slice| LayoutPolicy {
        slice,
        ..LayoutPolicy::DEFAULT
    };
    // (policy, ranges grown, one in `keep` kept, then inserts until a
    // migration runs, a defragmentation of more than a write expected)
    let cases = [
        (LayoutPolicy::small(64), 3000, 8, false, true),
        (LayoutPolicy::small(64), 3000, 8, true, false),
        (LayoutPolicy::DEFAULT, 5500, 2, true, false),
        (slices(1024), 5093, 8, true, false),
        (slices(2048), 5093, 2, false, false),
    ];
    for (policy, n, keep, until_migrating, moves) in cases {
        let case = format!("{n} ranges, one in {keep} kept, slice {}", policy.slice);
        let per_write = policy.finish_units() / super::MOVE_UNITS;
        let index = AddrIndex::with_policy(policy);
        let mut keys: Vec<u64> = (0..n).collect();
        shuffle(&mut keys, 0x2545_f491_4f6c_dd1d);
        let ids: Vec<(u64, ModuleId)> = (keys.iter())
            .map(|&k| (k, index.insert(k * 16..k * 16 + 8, k).unwrap()))
            .collect();
        let mut kept = BTreeMap::new();
        for (i, &(k, id)) in ids.iter().enumerate() {
            if i % keep == 0 {
                kept.insert(k, id);
            } else {
                index.remove(id).unwrap();
            }
        }
        // Then single inserts until a migration runs (writes start one
        // once `len / move_every` updates came since the last).
        let mut end = n;
        while until_migrating && !migrations(&index).1 {
            assert!(end < 3 * n, "{case}: no migration started");
            kept.insert(end, index.insert(end * 16..end * 16 + 8, end).unwrap());
            end += 1;
        }
        let (mut writes, mut moved, mut most, mut bound) = (0, 0, 0, None);
        let mut spanned = false;
        let purged = |index: &AddrIndex<u64>| index.tree.inspect(|_, w| w.slab.purged_chunks());
        loop {
            let before = purged(&index);
            let (more, put, most_writes) = index.write(|b| {
                let (more, most_writes) = b.finish_layout();
                let mut put = 0;
                b.txn
                    .changes(|c| put += usize::from(matches!(c, crate::raw::Change::Put(_))));
                (more, put, most_writes)
            });
            let bound = *bound.get_or_insert(most_writes);
            spanned |= migrations(&index).1;
            writes += 1;
            moved += put;
            most = most.max(put);
            assert!(
                put <= per_write,
                "{case}: a write of synchronize moved {put} nodes, more than {per_write}"
            );
            // The write's own purge and its `settle`'s, one chunk each.
            let now = purged(&index);
            assert!(
                now <= before + 2,
                "{case}: a write purged {} chunks",
                now - before
            );
            // Past the bound, `synchronize` stops: the work would be left.
            assert!(writes <= bound, "{case}: over {bound} writes");
            if !more {
                break;
            }
        }
        assert!(
            !index.write(|b| b.finish_layout().0),
            "{case}: work left after the loop"
        );
        let (running, retiring, free_chunk, resident, live) = index.tree.inspect(|txn, w| {
            let s = &w.slab;
            let running = w.layout.migration.is_some();
            (
                running,
                txn.retiring(),
                s.has_free_chunk(),
                s.resident_nodes(),
                txn.len(),
            )
        });
        assert!(!running && !retiring, "{case}: work left after the loop");
        if until_migrating {
            assert!(
                spanned,
                "{case}: the migration running was finished in one write"
            );
        }
        if crate::addr_index::slab::CAN_PURGE {
            assert!(!free_chunk, "{case}: a free chunk left resident");
            if moves {
                assert!(
                    moved > per_write,
                    "{case}: {moved} moved: one write could do it"
                );
                assert_eq!(most, per_write, "{case}: no write moved a full slice");
            }
            let fresh = crate::addr_index::slab::Slab::<()>::fresh_nodes(live);
            assert!(
                resident <= 2 * fresh + 1024,
                "{case}: {resident} nodes resident for {live} ranges"
            );
        }
        index.check_invariants().unwrap();
        for k in 0..end {
            let hit = index.lookup(k * 16 + 3).map(|h| h.id());
            assert_eq!(hit, kept.get(&k).copied(), "{case}: range {k}");
        }
    }
}

/// A migration starts only once `len / move_every` updates came since
/// the tree was last rebuilt or adopted (at a rebuild's own `len / 8`,
/// growth by single inserts moved every node some seven times).
#[test]
fn migrations_start_no_sooner_than_move_every_allows() {
    for policy in policies() {
        migrations_start_no_sooner_than(policy);
    }
}

fn migrations_start_no_sooner_than(policy: LayoutPolicy) {
    let n = if cfg!(miri) {
        3 * policy.layout_min
    } else {
        (3 * policy.layout_min).max(1200)
    } as u64;
    let index = AddrIndex::with_policy(policy);
    let (mut running, mut starts) = (false, 0);
    for k in 0..n {
        let (updates, len) = index.tree.inspect(|txn, _| (txn.updates(), txn.len()));
        index.insert(k * 16..k * 16 + 8, k).unwrap();
        let now = migrations(&index).1;
        if now && !running {
            starts += 1;
            // The insert's own update and range.
            let (updates, len) = (updates + 1, len + 1);
            assert!(
                updates >= len / policy.move_every,
                "a migration started after {updates} updates at {len} ranges"
            );
        }
        running = now;
    }
    assert!(starts > 0, "no migration started");
}

/// Inserts, removes, value replacements and batches (some of which
/// panic and roll back) interleaved with migrations in progress: after
/// every write the index equals a model, its invariants hold, and
/// every adopted tree held every change made while it was built (debug
/// builds check that at each adoption).
#[test]
fn writes_during_a_migration_reach_the_adopted_tree() {
    for policy in policies() {
        writes_during_a_migration_reach_the_adopted_tree_with(policy);
    }
}

fn writes_during_a_migration_reach_the_adopted_tree_with(policy: LayoutPolicy) {
    // Keys for trees past `layout_min` (the rounds grow with them),
    // checked less often when large.
    let space = (policy.layout_min as u64 * 2).max(if cfg!(miri) { 96 } else { 600 });
    let rounds = if cfg!(miri) {
        150
    } else {
        (space * 5).max(3000)
    };
    let every = if cfg!(miri) {
        25
    } else if space > 1000 {
        97
    } else {
        7
    };
    let index = AddrIndex::with_policy(policy);
    let mut model: BTreeMap<u64, (ModuleId, u64)> = BTreeMap::new();
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut rand = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let (mut panicked_mid, mut wrote_mid) = (0, 0);
    for round in 0..rounds {
        // Half the keys rising (a loader's order: the inserts that make
        // rebuilds due soonest), half anywhere.
        let k = if rand(2) == 0 {
            round / 2 % space
        } else {
            rand(space)
        };
        let running = migrations(&index).1;
        match rand(8) {
            0..=3 => {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(k) {
                    let id = index.insert(k * 16..k * 16 + 8, round).unwrap();
                    e.insert((id, round));
                }
            }
            4 => {
                if let Some((id, _)) = model.remove(&k) {
                    index.remove(id).unwrap();
                }
            }
            5 => {
                if let Some((id, v)) = model.get_mut(&k) {
                    index.set_value(*id, round, 0).unwrap();
                    *v = round;
                }
            }
            // Without `std` a panic inside a write aborts (`unwind.rs`).
            6 if cfg!(feature = "std") => {
                // A batch of several changes that panics at the end.
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    index.write(|b| {
                        for j in 0..4 {
                            let _ = b.insert((space + j) * 16..(space + j) * 16 + 8, round);
                        }
                        if let Some((id, _)) = model.get(&k) {
                            b.remove(*id);
                        }
                        panic!("planned panic");
                    })
                }));
                assert!(r.is_err());
                panicked_mid += usize::from(running);
            }
            _ => {
                // A committed batch: remove one, insert two.
                let gone = model.remove(&k);
                let fresh: Vec<u64> = (0..2).map(|_| rand(space)).collect();
                index.write(|b| {
                    if let Some((id, _)) = gone {
                        b.remove(id).unwrap();
                    }
                    for &f in &fresh {
                        if let std::collections::btree_map::Entry::Vacant(e) = model.entry(f) {
                            let id = b.insert(f * 16..f * 16 + 8, round).unwrap();
                            e.insert((id, round));
                        }
                    }
                });
            }
        }
        wrote_mid += usize::from(running);
        if round % every == 0 {
            index.check_invariants().unwrap();
            let got: Vec<(u64, u64)> = index
                .snapshot(&index.pin())
                .iter()
                .map(|h| (h.range().start / 16, *h.value()))
                .collect();
            let want: Vec<(u64, u64)> = model.iter().map(|(&k, &(_, v))| (k, v)).collect();
            assert_eq!(got, want, "round {round}");
        }
    }
    let (adopted, _, _) = migrations(&index);
    eprintln!("{adopted} migrations adopted over {rounds} rounds of {space} keys");
    assert!(adopted > 2, "only {adopted} migrations adopted");
    assert!(
        wrote_mid > 0 && (panicked_mid > 0 || !cfg!(feature = "std")),
        "no write during a migration"
    );
    index.rebalance();
    index.check_invariants().unwrap();
    assert!(layout(&index).1, "rebalance gives the exact shape");
}

/// One write of [`slab_stays_within_twice_the_largest_tree`].
#[derive(Clone, Debug)]
enum Churn {
    /// Single inserts of this many new ranges.
    Insert(usize),
    /// Single removes of this many live modules (picked by this seed).
    Remove(usize, u64),
    /// One batch inserting this many ranges.
    BatchInsert(usize),
    /// One batch removing this many modules.
    BatchRemove(usize, u64),
    /// One batch removing this many and inserting as many.
    BatchSwap(usize, u64),
    /// A batch of this many inserts and removes that panics (rolled back).
    RolledBack(usize, u64),
    /// New values for this many modules.
    SetValue(usize, u64),
    Rebalance,
    Flush,
    /// `synchronize`, which finishes the layout work and purges.
    Synchronize,
    Shrink,
}

/// The slab's node count, its resident node count, and the live range
/// count.
fn slab_and_len(index: &AddrIndex<u64>) -> (usize, usize, usize) {
    index
        .tree
        .inspect(|txn, w| (w.slab.nodes(), w.slab.resident_nodes(), txn.len()))
}

/// Random mixes of single and batched inserts and removes, `set_value`,
/// `rebalance`, rolled-back batches, `flush`, `synchronize` and
/// `shrink_to_fit`, on trees that cross `layout_min` both ways: after every
/// write the slab holds no more nodes than a fresh slab grown to hold twice
/// the largest tree a write held since the last `shrink_to_fit` (the live
/// ranges plus those the write added): the live tree plus one more, either
/// a migration's shadow or the tree the last one replaced, never both;
/// plus the ranges removed since the last adoption, whose nodes a running
/// migration reserved from its snapshot and holds until its catch-up
/// reaches their removal, while the ranges inserted meanwhile take new ones
/// (a random case found that: 446 nodes in use at the end of a write whose
/// middle needed 449, three over twice its largest tree).
/// After `synchronize` (where the OS lets chunks be purged) it keeps at most
/// twice a fresh slab's nodes for the live tree resident, plus a small
/// chunk's worth (`Layout::sparse`). Batch churn plus
/// `rebalance` used to add a whole replaced tree to the slab every round
/// (a commit gave back 512 nodes of the replaced trees, `rebalance`
/// replaced the whole tree each time): 146 MB after 300 rounds of 5,100
/// ranges.
mod slab_bound {
    use super::*;
    use crate::addr_index::slab::Slab;
    use proptest::prelude::*;

    /// `(policy, largest batch)`: release builds cross the default
    /// threshold (4096) with batches of up to 3000; debug builds and Miri
    /// use tiny thresholds and small trees.
    fn setup() -> (LayoutPolicy, usize) {
        if cfg!(miri) {
            (LayoutPolicy::small(16), 24)
        } else if cfg!(debug_assertions) {
            (LayoutPolicy::small(64), 120)
        } else {
            (LayoutPolicy::DEFAULT, 3000)
        }
    }

    fn churn(max: usize) -> impl Strategy<Value = Churn> {
        prop_oneof![
            2 => (1..max / 8 + 2).prop_map(Churn::Insert),
            1 => (1..max / 8 + 2, any::<u64>()).prop_map(|(n, s)| Churn::Remove(n, s)),
            3 => (1..max).prop_map(Churn::BatchInsert),
            2 => (1..max, any::<u64>()).prop_map(|(n, s)| Churn::BatchRemove(n, s)),
            3 => (1..max, any::<u64>()).prop_map(|(n, s)| Churn::BatchSwap(n, s)),
            1 => (1..max, any::<u64>()).prop_map(|(n, s)| Churn::RolledBack(n, s)),
            1 => (1..max / 8 + 2, any::<u64>()).prop_map(|(n, s)| Churn::SetValue(n, s)),
            3 => Just(Churn::Rebalance),
            1 => Just(Churn::Flush),
            1 => Just(Churn::Synchronize),
            1 => Just(Churn::Shrink),
        ]
    }

    /// `n` of `ids` picked by `seed`, taken out of it.
    fn take(ids: &mut Vec<ModuleId>, n: usize, mut seed: u64) -> Vec<ModuleId> {
        (0..n.min(ids.len()))
            .map(|_| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                ids.swap_remove((seed >> 33) as usize % ids.len())
            })
            .collect()
    }

    fn run_with(policy: LayoutPolicy, ops: &[Churn]) -> Result<(), TestCaseError> {
        let mut index = AddrIndex::with_policy(policy);
        let mut ids: Vec<ModuleId> = Vec::new();
        let mut next = 0_u64;
        let mut fresh = |n: usize| {
            let keys: Vec<u64> = (next..next + n as u64).collect();
            next += n as u64;
            keys
        };
        let range = |k: u64| k * 16..k * 16 + 8;
        let mut peak = 0;
        // Ranges removed since the last adoption (or shrink), and the
        // adoptions so far.
        let (mut removed, mut adopted) = (0, migrations(&index).0);
        for (i, op) in ops.iter().enumerate() {
            let (_, _, before) = slab_and_len(&index);
            let mut added = 0;
            match op {
                Churn::Insert(n) => {
                    for k in fresh(*n) {
                        ids.push(index.insert(range(k), k).unwrap());
                    }
                    added = *n;
                }
                Churn::Remove(n, s) => {
                    for id in take(&mut ids, *n, *s) {
                        index.remove(id).unwrap();
                        removed += 1;
                    }
                }
                Churn::BatchInsert(n) => {
                    let keys = fresh(*n);
                    index.write(|b| {
                        ids.extend(keys.iter().map(|&k| b.insert(range(k), k).unwrap()))
                    });
                    added = *n;
                }
                Churn::BatchRemove(n, s) => {
                    let gone = take(&mut ids, *n, *s);
                    index.write(|b| gone.iter().for_each(|&id| drop(b.remove(id).unwrap())));
                    removed += gone.len();
                }
                Churn::BatchSwap(n, s) => {
                    let gone = take(&mut ids, *n, *s);
                    removed += gone.len();
                    let keys = fresh(*n);
                    index.write(|b| {
                        gone.iter().for_each(|&id| drop(b.remove(id).unwrap()));
                        ids.extend(keys.iter().map(|&k| b.insert(range(k), k).unwrap()))
                    });
                    added = *n;
                }
                // Without `std` a panic inside a write aborts (`unwind.rs`).
                Churn::RolledBack(..) if !cfg!(feature = "std") => {}
                Churn::RolledBack(n, s) => {
                    let mut kept = ids.clone();
                    let gone = take(&mut kept, *n, *s);
                    let keys = fresh(*n);
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        index.write(|b| {
                            gone.iter().for_each(|&id| drop(b.remove(id).unwrap()));
                            for &k in &keys {
                                b.insert(range(k), k).unwrap();
                            }
                            std::panic::resume_unwind(Box::new("a planned rollback"));
                        })
                    }));
                    prop_assert!(r.is_err());
                    added = *n;
                }
                Churn::SetValue(n, s) => {
                    let mut all = ids.clone();
                    for id in take(&mut all, *n, *s) {
                        index.set_value(id, 0, 1).unwrap();
                    }
                    added = 1;
                }
                Churn::Rebalance => index.rebalance(),
                Churn::Flush => index.flush(),
                Churn::Synchronize => index.synchronize(),
                Churn::Shrink => {
                    index.shrink_to_fit();
                    (peak, removed) = (0, 0);
                }
            }
            let (nodes, resident, len) = slab_and_len(&index);
            if matches!(op, Churn::Synchronize) && crate::addr_index::slab::CAN_PURGE {
                let bound = 2 * Slab::<()>::fresh_nodes(len) + 1024;
                prop_assert!(
                    resident <= bound,
                    "after synchronize: {} nodes resident for {} ranges, the bound is {}",
                    resident,
                    len,
                    bound
                );
            }
            prop_assert_eq!(len, ids.len());
            peak = peak.max(before + added).max(len);
            let bound = Slab::<()>::fresh_nodes(2 * peak + removed);
            prop_assert!(
                nodes <= bound,
                "after write {} ({:?}): {} nodes in the slab, the bound is {} (largest tree {}, \
                 {} removed since the last adoption)",
                i,
                op,
                nodes,
                bound,
                peak,
                removed
            );
            let now = migrations(&index).0;
            if now != adopted {
                (adopted, removed) = (now, 0);
            }
        }
        index.check_invariants().map_err(TestCaseError::fail)?;
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            // Under Miri two cases (35 s each): the migrations' memory
            // accesses; the bound itself is checked natively.
            cases: if cfg!(miri) { 2 } else { 64 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn slab_stays_within_twice_the_largest_tree(
            ops in proptest::collection::vec(churn(setup().1), 8..if cfg!(miri) { 16 } else { 60 })
        ) {
            run_with(setup().0, &ops)?;
        }
    }

    /// The random case that showed the removed ranges' share of the bound: a
    /// migration reserved nodes for 141 ranges, 3 were removed, then a
    /// batch of 85 inserts went into the tree and the shadow before the
    /// catch-up gave the 3 back (without them in the bound: 576 nodes
    /// against 448).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "a bound, not memory safety (44 s); the property runs 4 cases under Miri"
    )]
    fn a_migration_holds_the_nodes_of_ranges_removed_since_its_snapshot() {
        let ops = [
            Churn::BatchSwap(65, 182_924),
            Churn::BatchInsert(64),
            Churn::Insert(12),
            Churn::BatchRemove(3, 3_248_211_067_361_975_886),
            Churn::BatchInsert(85),
            Churn::BatchRemove(79, 3_169_098_822_498_783_840),
            Churn::BatchRemove(88, 5_851_039_175_978_057_391),
            Churn::Shrink,
        ];
        run_with(LayoutPolicy::small(64), &ops).unwrap();
    }

    /// The churn that found it, as a JIT with a steady set of code does it:
    /// 4,500 ranges, then rounds of one batch inserting 600 more or removing
    /// them again, each followed by `rebalance` and `flush`.
    #[test]
    fn batch_churn_and_rebalance_keep_the_slab_bounded() {
        let (steady, rounds) = if cfg!(miri) {
            (40, 6)
        } else if cfg!(debug_assertions) {
            (4500, 12)
        } else {
            (4500, 60)
        };
        let mut ops = vec![Churn::BatchInsert(steady)];
        for r in 0..rounds {
            ops.push(if r % 2 == 0 {
                Churn::BatchInsert(steady / 8)
            } else {
                Churn::BatchRemove(steady / 8, r)
            });
            ops.extend([Churn::Rebalance, Churn::Flush]);
        }
        let policy = if cfg!(miri) {
            LayoutPolicy::small(16)
        } else {
            LayoutPolicy::DEFAULT
        };
        run_with(policy, &ops).unwrap();
    }
}
