//! Model test for `AddrIndex`: random operation sequences — inserts with
//! base, tag and per-range flags, removes (checking what they hand back),
//! in-place `set_value`, batches (committed, or rolled back by a panic, with
//! read-your-writes checks inside), lookups and `overlapping` queries —
//! against a linear-scan oracle, with the invariant checker after every step.

/// Without `std` a panic inside a write aborts the process instead of
/// rolling it back, so the model only panics in batches with `std`.
const PANICS_ROLL_BACK: bool = cfg!(feature = "std");

use latchtree::{AddrIndex, AddrIndexError, LayoutPolicy, ModuleId, ModuleMeta, Segment};
use proptest::prelude::*;
use std::collections::HashMap;
use std::ops::Range;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// One module as the oracle knows it.
#[derive(Clone, Debug, PartialEq)]
struct Module {
    id: ModuleId,
    /// Sorted by start.
    segments: Vec<Segment>,
    value: u32,
    base: u64,
    tag: u64,
}

/// The oracle: a list of modules, scanned linearly.
#[derive(Clone, Default)]
struct Oracle {
    modules: Vec<Module>,
    /// What each removal handed back must say.
    removed: HashMap<ModuleId, Module>,
    last_id: u64,
}

/// What a hit must say: range, id, base, tag, flags, value.
type Want = (Range<u64>, ModuleId, u64, u64, u32, u32);

impl Oracle {
    fn hits(&self) -> Vec<Want> {
        let mut all: Vec<Want> = self
            .modules
            .iter()
            .flat_map(|m| {
                m.segments
                    .iter()
                    .map(move |s| (s.range.clone(), m.id, m.base, m.tag, s.flags, m.value))
            })
            .collect();
        all.sort_by_key(|h| h.0.start);
        all
    }

    fn find(&self, addr: u64) -> Option<Want> {
        self.hits().into_iter().find(|h| h.0.contains(&addr))
    }

    /// An empty or inverted `r` intersects nothing.
    fn overlapping(&self, r: &Range<u64>) -> Vec<Want> {
        if r.is_empty() {
            return Vec::new();
        }
        self.hits()
            .into_iter()
            .filter(|h| h.0.start < r.end && r.start < h.0.end)
            .collect()
    }

    /// The error `insert_module(segments)` must give, if any.
    fn reject(&self, segments: &[Segment]) -> Option<AddrIndexError> {
        if segments.is_empty() {
            return Some(AddrIndexError::NoRanges);
        }
        for s in segments {
            let r = &s.range;
            if r.start == r.end {
                return Some(AddrIndexError::EmptyRange(r.clone()));
            }
            if r.start > r.end {
                return Some(AddrIndexError::InvertedRange(r.clone()));
            }
        }
        let mut sorted: Vec<_> = segments.iter().map(|s| s.range.clone()).collect();
        sorted.sort_by_key(|r| r.start);
        for w in sorted.windows(2) {
            if w[0].end > w[1].start {
                return Some(AddrIndexError::SelfOverlap(w[0].clone(), w[1].clone()));
            }
        }
        for r in &sorted {
            let lowest = self
                .hits()
                .into_iter()
                .filter(|h| h.0.start < r.end && r.start < h.0.end)
                .min_by_key(|h| h.0.start);
            if let Some(h) = lowest {
                return Some(AddrIndexError::Overlap {
                    range: r.clone(),
                    existing: h.0,
                    module: h.1,
                });
            }
        }
        None
    }

    fn bounds(&self) -> Option<Range<u64>> {
        let hits = self.hits();
        let lo = hits.iter().map(|h| h.0.start).min()?;
        let hi = hits.iter().map(|h| h.0.end).max()?;
        Some(lo..hi)
    }

    /// The id `which` names: the n-th live module, or (every fifth) a
    /// removed or never issued one.
    fn pick(&self, which: usize) -> ModuleId {
        if self.modules.is_empty() || which.is_multiple_of(5) {
            ModuleId::from_raw(if which.is_multiple_of(2) {
                self.last_id + 1
            } else {
                which as u64 % (self.last_id + 1)
            })
        } else {
            self.modules[which % self.modules.len()].id
        }
    }
}

#[derive(Clone, Debug)]
enum Write {
    Insert {
        segments: Vec<Segment>,
        value: u32,
        base: Option<u64>,
        tag: u64,
    },
    Remove(usize),
    SetValue(usize, u32, u64),
}

#[derive(Clone, Debug)]
enum Op {
    One(Write),
    /// A batch; `true`: the closure panics after its writes.
    Batch(Vec<Write>, bool),
    Lookup(u64),
    Overlapping(u64, u64),
    /// `rebalance`: both copies relinked into the balanced shape.
    Rebalance,
}

/// Addresses cluster in a small space so that ranges collide often, plus
/// the extremes `0` and `u64::MAX`.
fn addr() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0..512u64,
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => (u64::MAX - 64)..=u64::MAX,
    ]
}

fn range() -> impl Strategy<Value = Range<u64>> {
    prop_oneof![
        6 => (0..500u64, 1..40u64).prop_map(|(s, l)| s..s + l),
        1 => (addr(), addr()).prop_map(|(a, b)| a..b),
        1 => ((u64::MAX - 64)..u64::MAX).prop_map(|s| s..u64::MAX),
    ]
}

fn write() -> impl Strategy<Value = Write> {
    prop_oneof![
        3 => (
            prop::collection::vec((range(), 0..8u32), 0..5),
            any::<u32>(),
            prop::option::of(0..1024u64),
            any::<u64>(),
        )
            .prop_map(|(rs, value, base, tag)| Write::Insert {
                segments: rs.into_iter().map(|(range, flags)| Segment { range, flags }).collect(),
                value,
                base,
                tag,
            }),
        2 => any::<usize>().prop_map(Write::Remove),
        2 => (any::<usize>(), any::<u32>(), any::<u64>()).prop_map(|(i, v, t)| Write::SetValue(i, v, t)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => write().prop_map(Op::One),
        2 => (prop::collection::vec(write(), 0..6), prop::bool::weighted(0.25)).prop_map(|(w, p)| Op::Batch(w, p && PANICS_ROLL_BACK)),
        4 => addr().prop_map(Op::Lookup),
        1 => (addr(), addr()).prop_map(|(a, b)| Op::Overlapping(a, b)),
        1 => Just(Op::Rebalance),
    ]
}

/// The writes of either a single call or a batch, so that one function
/// checks both against the oracle.
trait Writes {
    fn insert(
        &mut self,
        s: Vec<Segment>,
        v: u32,
        meta: ModuleMeta,
    ) -> Result<ModuleId, (AddrIndexError, u32)>;
    fn remove(&mut self, id: ModuleId) -> Option<latchtree::Removed<u32>>;
    fn set_value(
        &mut self,
        id: ModuleId,
        v: u32,
        tag: u64,
    ) -> Result<(u32, u64), (AddrIndexError, u32)>;
}

impl Writes for &AddrIndex<u32> {
    fn insert(
        &mut self,
        s: Vec<Segment>,
        v: u32,
        meta: ModuleMeta,
    ) -> Result<ModuleId, (AddrIndexError, u32)> {
        self.insert_module_with(s, v, meta)
            .map_err(|e| e.into_parts())
    }
    fn remove(&mut self, id: ModuleId) -> Option<latchtree::Removed<u32>> {
        AddrIndex::remove(self, id)
    }
    fn set_value(
        &mut self,
        id: ModuleId,
        v: u32,
        tag: u64,
    ) -> Result<(u32, u64), (AddrIndexError, u32)> {
        AddrIndex::set_value(self, id, v, tag)
            .map(|old| (**old.value(), old.tag()))
            .map_err(|e| e.into_parts())
    }
}

impl Writes for latchtree::IndexBatch<'_, u32> {
    fn insert(
        &mut self,
        s: Vec<Segment>,
        v: u32,
        meta: ModuleMeta,
    ) -> Result<ModuleId, (AddrIndexError, u32)> {
        self.insert_module_with(s, v, meta)
            .map_err(|e| e.into_parts())
    }
    fn remove(&mut self, id: ModuleId) -> Option<latchtree::Removed<u32>> {
        latchtree::IndexBatch::remove(self, id)
    }
    fn set_value(
        &mut self,
        id: ModuleId,
        v: u32,
        tag: u64,
    ) -> Result<(u32, u64), (AddrIndexError, u32)> {
        latchtree::IndexBatch::set_value(self, id, v, tag)
            .map(|old| (**old.value(), old.tag()))
            .map_err(|e| e.into_parts())
    }
}

/// Applies `w` to `index` and to `oracle`, checking every result.
fn apply(index: &mut impl Writes, oracle: &mut Oracle, w: &Write) {
    match w {
        Write::Insert {
            segments,
            value,
            base,
            tag,
        } => {
            let want = oracle.reject(segments);
            let meta = ModuleMeta {
                base: *base,
                tag: *tag,
            };
            match index.insert(segments.clone(), *value, meta) {
                Ok(id) => {
                    assert_eq!(want, None, "accepted {segments:?}");
                    assert!(
                        id.get() > oracle.last_id,
                        "ids increase and are never reused"
                    );
                    oracle.last_id = id.get();
                    let mut sorted = segments.clone();
                    sorted.sort_by_key(|s| s.range.start);
                    let base = base.unwrap_or(sorted[0].range.start);
                    oracle.modules.push(Module {
                        id,
                        segments: sorted,
                        value: *value,
                        base,
                        tag: *tag,
                    });
                }
                Err((e, v)) => {
                    assert_eq!(Some(e), want, "for {segments:?}");
                    assert_eq!(v, *value, "the rejected value comes back");
                }
            }
        }
        Write::Remove(which) => {
            let id = oracle.pick(*which);
            let got = index.remove(id);
            match oracle.modules.iter().position(|m| m.id == id) {
                Some(i) => {
                    let m = oracle.modules.remove(i);
                    let r = got.expect("remove of a live module");
                    assert_eq!(
                        (
                            r.id(),
                            r.segments().to_vec(),
                            **r.value(),
                            r.base(),
                            r.tag()
                        ),
                        (m.id, m.segments.clone(), m.value, m.base, m.tag),
                        "what remove hands back"
                    );
                    oracle.removed.insert(id, m);
                }
                None => assert!(got.is_none(), "remove of a dead id {id}"),
            }
        }
        Write::SetValue(which, value, tag) => {
            let id = oracle.pick(*which);
            let got = index.set_value(id, *value, *tag);
            match oracle.modules.iter_mut().find(|m| m.id == id) {
                Some(m) => {
                    assert_eq!(
                        got,
                        Ok((m.value, m.tag)),
                        "set_value returns the old value and tag"
                    );
                    m.value = *value;
                    m.tag = *tag;
                }
                None => assert_eq!(got, Err((AddrIndexError::UnknownModule(id), *value))),
            }
        }
    }
}

/// Every read of `index` agrees with `oracle`.
fn check(index: &AddrIndex<u32>, oracle: &Oracle) {
    index.check_invariants().unwrap();
    assert_eq!(index.bounds(), oracle.bounds());
    assert_eq!(index.module_count(), oracle.modules.len());
    let hits = oracle.hits();
    assert_eq!(index.range_count(), hits.len());
    assert_eq!(index.is_empty(), hits.is_empty());
    let guard = index.pin();
    let snap: Vec<Want> = index
        .snapshot(&guard)
        .iter()
        .map(|h| (h.range(), h.id(), h.base(), h.tag(), h.flags(), *h.value()))
        .collect();
    assert_eq!(snap, hits);
    // `lookup_many` answers every range's first, last and next address (8
    // lanes at a time, the last batch padded with 0) as `lookup` does.
    let probes: Vec<u64> = hits
        .iter()
        .flat_map(|h| [h.0.start, h.0.end - 1, h.0.end])
        .collect();
    for chunk in probes.chunks(8) {
        let addrs: [u64; 8] = core::array::from_fn(|i| chunk.get(i).copied().unwrap_or(0));
        let many = index.lookup_many(addrs);
        for (a, got) in addrs.iter().zip(many) {
            let want = oracle.find(*a).map(|w| (w.0, w.1, w.2, w.3, w.4));
            let got = got.map(|h| (h.range(), h.id(), h.base(), h.tag(), h.flags()));
            assert_eq!(got, want, "lookup_many at {a}");
        }
    }
    let modules: Vec<Module> = index
        .modules(&guard)
        .map(|m| Module {
            id: m.id(),
            segments: m.segments().to_vec(),
            value: *m.value(),
            base: m.base(),
            tag: m.tag(),
        })
        .collect();
    assert_eq!(modules, oracle.modules, "modules(), in id order");
    for m in &oracle.modules {
        assert_eq!(index.get(m.id, &guard), Some(&m.value));
        let r = index.module(m.id, &guard).unwrap();
        assert_eq!(
            r.meta(),
            ModuleMeta {
                base: Some(m.base),
                tag: m.tag
            }
        );
    }
    for id in oracle.removed.keys() {
        assert_eq!(index.get(*id, &guard), None);
        assert_eq!(index.ranges_of(*id), None);
    }
}

fn check_addr(index: &AddrIndex<u32>, oracle: &Oracle, a: u64) {
    let want = oracle.find(a);
    let got = index.lookup(a);
    assert_eq!(
        got.map(|h| (h.range(), h.id(), h.base(), h.tag(), h.flags())),
        want.clone().map(|w| (w.0, w.1, w.2, w.3, w.4))
    );
    if let Some(h) = got {
        assert_eq!(h.offset(a), a - h.range().start);
        assert_eq!(h.module_offset(a), a.wrapping_sub(h.base()));
    }
    let guard = index.pin();
    let hit = index.module_address(a, &guard);
    assert_eq!(
        hit.map(|h| (h.raw(), *h.value())),
        got.zip(want.map(|w| w.5))
    );
}

/// The payload of a deliberately panicking batch.
struct Abort;

/// The default layout policy, or one that moves trees of two ranges and
/// up, a few units of work a write (migrations then span many writes).
fn policy(small: bool) -> LayoutPolicy {
    if small {
        LayoutPolicy::small(2)
    } else {
        LayoutPolicy::DEFAULT
    }
}

fn run(ops: Vec<Op>, small: bool) {
    let index = AddrIndex::with_policy(policy(small));
    let mut oracle = Oracle::default();
    for op in ops {
        match op {
            Op::One(w) => apply(&mut &index, &mut oracle, &w),
            Op::Batch(writes, panic) => {
                let before = oracle.clone();
                let mut inside = oracle.clone();
                let r = catch_unwind(AssertUnwindSafe(|| {
                    index.write(|batch| {
                        for w in &writes {
                            apply(batch, &mut inside, w);
                            // Read-your-writes.
                            assert_eq!(batch.module_count(), inside.modules.len());
                            assert_eq!(batch.range_count(), inside.hits().len());
                            for m in &inside.modules {
                                assert_eq!(batch.get(m.id), Some(&m.value));
                                let ranges: Vec<_> =
                                    m.segments.iter().map(|s| s.range.clone()).collect();
                                assert_eq!(batch.ranges_of(m.id), Some(ranges));
                                let s = m.segments[0].range.start;
                                assert_eq!(
                                    batch.lookup(s).map(|h| (h.id(), h.tag())),
                                    Some((m.id, m.tag))
                                );
                            }
                            for id in inside.removed.keys() {
                                assert!(!batch.contains(*id));
                            }
                        }
                        if panic {
                            std::panic::panic_any(Abort);
                        }
                    })
                }));
                if panic {
                    assert!(r.is_err_and(|p| p.is::<Abort>()));
                    // Rolled back: the old state, but ids handed out inside
                    // stay used.
                    oracle = Oracle {
                        last_id: inside.last_id,
                        ..before
                    };
                } else {
                    r.unwrap();
                    oracle = inside;
                }
            }
            Op::Lookup(a) => {
                for a in [a, a.wrapping_sub(1), a.wrapping_add(1)] {
                    check_addr(&index, &oracle, a);
                }
            }
            Op::Rebalance => index.rebalance(),
            Op::Overlapping(a, b) => {
                let guard = index.pin();
                let got: Vec<Want> = index
                    .overlapping(a..b, &guard)
                    .map(|h| (h.range(), h.id(), h.base(), h.tag(), h.flags(), *h.value()))
                    .collect();
                assert_eq!(got, oracle.overlapping(&(a..b)), "overlapping({a}..{b})");
            }
        }
        check(&index, &oracle);
    }
}

fn quiet_abort_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Abort>() {
                default(info);
            }
        }));
    });
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(miri) { 3 } else { 256 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn matches_linear_scan(
        ops in prop::collection::vec(op(), 0..if cfg!(miri) { 25 } else { 150 }),
        small in any::<bool>(),
    ) {
        quiet_abort_panics();
        run(ops, small);
    }
}

#[test]
fn extremes_and_adjacent_ranges() {
    let index = AddrIndex::new();
    let top = index.insert((u64::MAX - 10)..u64::MAX, "top").unwrap();
    let bottom = index.insert(0..1, "bottom").unwrap();
    let a = index.insert_module([10..20, 20..30], "a").unwrap();
    let b = index.insert(30..40, "b").unwrap();
    assert_eq!(index.lookup(0).map(|h| h.id()), Some(bottom));
    assert_eq!(index.lookup(1), None);
    assert_eq!(index.lookup(19).map(|h| h.range()), Some(10..20));
    assert_eq!(
        index
            .lookup(20)
            .map(|h| (h.id(), h.range(), h.module_offset(20))),
        Some((a, 20..30, 10))
    );
    assert_eq!(index.lookup(30).map(|h| h.id()), Some(b));
    assert_eq!(index.lookup(u64::MAX - 1).map(|h| h.id()), Some(top));
    assert_eq!(index.lookup(u64::MAX), None);
    assert_eq!(index.bounds(), Some(0..u64::MAX));
    let err =
        |r: Result<ModuleId, latchtree::InsertError<&'static str>>| r.unwrap_err().into_parts();
    assert_eq!(
        err(index.insert(u64::MAX..u64::MAX, "empty")),
        (AddrIndexError::EmptyRange(u64::MAX..u64::MAX), "empty")
    );
    #[allow(clippy::reversed_empty_ranges)]
    let inverted = 5..4;
    assert_eq!(
        err(index.insert(inverted.clone(), "x")),
        (AddrIndexError::InvertedRange(inverted), "x")
    );
    assert_eq!(
        err(index.insert_module(Vec::<Range<u64>>::new(), "none")),
        (AddrIndexError::NoRanges, "none")
    );
    assert_eq!(
        err(index.insert(25..35, "over")),
        (
            AddrIndexError::Overlap {
                range: 25..35,
                existing: 20..30,
                module: a
            },
            "over"
        )
    );
    // A base above the ranges is allowed: offsets wrap.
    let high = ModuleMeta {
        base: Some(1000),
        tag: 0,
    };
    index
        .insert_module_with([Segment::from(50..60)], "high", high)
        .unwrap();
    assert_eq!(
        index.lookup(55).unwrap().module_offset(55),
        55u64.wrapping_sub(1000)
    );
    index.check_invariants().unwrap();
}

/// Many modules removed in id order and out of it: the module table
/// compacts and keeps answering, also while a compaction spans several
/// writes (the small policy's slice of 3 units: 24 table slots a write).
#[test]
fn module_table_compacts_and_keeps_answering() {
    for policy in [LayoutPolicy::DEFAULT, LayoutPolicy::small(usize::MAX)] {
        let index = AddrIndex::with_policy(policy);
        let n = if cfg!(miri) { 40 } else { 400 };
        let ids: Vec<_> = (0..n)
            .map(|i| index.insert(i * 16..i * 16 + 8, i).unwrap())
            .collect();
        for (i, id) in ids.iter().enumerate() {
            if i % 3 != 0 {
                assert_eq!(index.remove(*id).map(|r| *r.into_value()), Some(i as u64));
                // Under Miri, after every fourth removal (the budget).
                if cfg!(miri) && i % 4 != 1 {
                    continue;
                }
                index.check_invariants().unwrap();
                let guard = index.pin();
                for (k, id) in ids.iter().enumerate().step_by(3) {
                    assert_eq!(index.get(*id, &guard).copied(), Some(k as u64));
                }
            }
        }
        index.synchronize();
        index.check_invariants().unwrap();
        let guard = index.pin();
        for (i, id) in ids.iter().enumerate() {
            let want = (i % 3 == 0).then_some(i as u64);
            assert_eq!(index.get(*id, &guard).copied(), want);
        }
        assert_eq!(index.modules(&guard).count(), ids.len().div_ceil(3));
    }
}

/// The orders loaders and JIT allocators insert in (rising, falling) and a
/// random one, one range per write, then removals in the same order: the
/// index keeps rebuilding itself into the balanced shape (every `n / 8`
/// updates) and `lookup` and `lookup_many` agree with a scan of the live
/// ranges after every write, checked against every invariant (under Miri
/// every fourth write and the last: two thirds of the test's time there).
#[test]
fn every_insertion_order_agrees_with_a_scan_through_rebuilds() {
    let n: u64 = if cfg!(miri) { 16 } else { 300 };
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut random: Vec<u64> = (0..n).collect();
    for i in (1..random.len()).rev() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        random.swap(i, (rng % (i as u64 + 1)) as usize);
    }
    let orders = [(0..n).collect::<Vec<_>>(), (0..n).rev().collect(), random];
    for (order, small) in orders
        .into_iter()
        .flat_map(|o| [(o.clone(), true), (o, false)])
    {
        let index = AddrIndex::with_policy(policy(small));
        let mut live = std::collections::BTreeMap::new();
        let verify = |index: &AddrIndex<u64>,
                      live: &std::collections::BTreeMap<u64, latchtree::ModuleId>,
                      write: usize| {
            if !cfg!(miri) || write % 4 == 3 || write + 1 == 2 * order.len() {
                index.check_invariants().unwrap();
            }
            let probe = |a: u64| live.get(&(a / 10)).filter(|_| a % 10 < 6).copied();
            let addrs: [u64; 8] =
                core::array::from_fn(|i| rng_at(i as u64, live.len() as u64) % (n * 10));
            let many = index.lookup_many(addrs);
            for (a, got) in addrs.iter().zip(many) {
                assert_eq!(got.map(|h| h.id()), probe(*a), "lookup_many({a})");
                assert_eq!(index.lookup(*a).map(|h| h.id()), probe(*a), "lookup({a})");
            }
        };
        for (i, &k) in order.iter().enumerate() {
            let id = index.insert(k * 10..k * 10 + 6, k).unwrap();
            live.insert(k, id);
            verify(&index, &live, i);
        }
        for (i, &k) in order.iter().enumerate() {
            index.remove(live.remove(&k).unwrap()).unwrap();
            verify(&index, &live, order.len() + i);
        }
    }
}

/// A well-mixed address for lane `i` of check number `j`.
fn rng_at(i: u64, j: u64) -> u64 {
    let mut z = (i << 32 ^ j).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
