//! Fuzz target: `AddrIndex` under adversarial ranges (0, `u64::MAX`, empty,
//! inverted, adjacent, overlapping, many ranges per module) checked against a
//! linear-scan oracle: every insert's result or error variant, that a
//! rejected insert changes nothing and hands its value back, removes (and
//! what they hand back), in-place `set_value`, `lookup` (with base and tag),
//! `module_address`, `get`, `ranges_of`, `overlapping`, `bounds` and the
//! counts, with the invariant checker after every operation. The first
//! input bit picks the layout policy: the default one, or tiny thresholds
//! under which trees of two ranges and up migrate over many writes.
//!
//! `cargo +nightly fuzz run addr_index -- -max_total_time=60`

#![no_main]

use arbitrary::Arbitrary;
use latchtree::{AddrIndex, AddrIndexError, LayoutPolicy, ModuleId};
use libfuzzer_sys::fuzz_target;
use std::ops::Range;

/// An address, biased toward the edges and toward a small neighbourhood
/// where ranges meet and overlap.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Addr {
    Zero,
    Max,
    /// `u64::MAX - n`.
    NearMax(u8),
    /// A small address: ranges built from these collide often.
    Small(u8),
    Any(u64),
}

impl Addr {
    fn get(self) -> u64 {
        match self {
            Addr::Zero => 0,
            Addr::Max => u64::MAX,
            Addr::NearMax(n) => u64::MAX - u64::from(n),
            Addr::Small(n) => u64::from(n),
            Addr::Any(a) => a,
        }
    }
}

/// A module to look up by: one the oracle knows (live or removed), by
/// index, or an arbitrary id.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Which {
    Known(u8),
    Unknown,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Insert(Addr, Addr, u32),
    InsertModule(Vec<(Addr, Addr)>, u32),
    Remove(Which),
    SetValue(Which, u32),
    Overlapping(Addr, Addr),
    Lookup(Addr),
    /// `lookup_many` of four addresses against `lookup` of each.
    LookupMany([Addr; 4]),
    /// `rebalance`: both copies relinked into the balanced shape.
    Rebalance,
    /// Ascending, or descending, runs of fresh one-page ranges above every
    /// address the other ops use: the trees sequential loads build.
    Run(u8, bool),
    Get(Which),
    Snapshot,
}

/// Where `Op::Run`'s ranges start.
const RUN_BASE: u64 = 1 << 44;

/// One module as the oracle knows it.
struct Module {
    id: ModuleId,
    ranges: Vec<Range<u64>>,
    value: u32,
    tag: u64,
    live: bool,
}

/// Every indexed range with its module, in address order.
fn indexed(index: &AddrIndex<u32>) -> Vec<(Range<u64>, ModuleId)> {
    let guard = index.pin();
    index
        .snapshot(&guard)
        .iter()
        .map(|h| (h.range(), h.id()))
        .collect()
}

/// The linear-scan oracle.
struct Oracle {
    modules: Vec<Module>,
    /// The last id the index handed out (ids are never reused).
    last_id: Option<ModuleId>,
    /// Mints ids for [`Oracle::unknown_id`].
    minter: AddrIndex<()>,
}

impl Oracle {
    fn live(&self) -> impl Iterator<Item = &Module> {
        self.modules.iter().filter(|m| m.live)
    }

    /// The live range containing `addr`, with its module.
    fn find(&self, addr: u64) -> Option<(&Range<u64>, &Module)> {
        self.live()
            .flat_map(|m| m.ranges.iter().map(move |r| (r, m)))
            .find(|(r, _)| r.contains(&addr))
    }

    /// The id `which` names: a module the oracle knows (live or removed),
    /// or one the index never handed out.
    fn id_of(&mut self, which: Which) -> ModuleId {
        match which {
            Which::Known(i) if !self.modules.is_empty() => {
                self.modules[usize::from(i) % self.modules.len()].id
            }
            Which::Known(_) | Which::Unknown => self.unknown_id(),
        }
    }

    /// An id the index never handed out. `ModuleId` has no constructor:
    /// mint ids from a scratch index (they count up from 1, like the real
    /// index's) until one is past every id the real index gave out.
    fn unknown_id(&mut self) -> ModuleId {
        loop {
            let id = self.minter.insert(0..1, ()).expect("valid range");
            assert!(self.minter.remove(id).is_some());
            if self.last_id.is_none_or(|last| id > last) {
                return id;
            }
        }
    }

    fn module(&self, id: ModuleId) -> Option<&Module> {
        self.live().find(|m| m.id == id)
    }

    /// The error `insert_module(ranges)` must return, if any.
    fn expected_error(&self, ranges: &[Range<u64>]) -> Result<(), Expected> {
        if ranges.is_empty() {
            return Err(Expected::Exact(AddrIndexError::NoRanges));
        }
        for r in ranges {
            if r.start == r.end {
                return Err(Expected::Exact(AddrIndexError::EmptyRange(r.clone())));
            }
            if r.start > r.end {
                return Err(Expected::Exact(AddrIndexError::InvertedRange(r.clone())));
            }
        }
        let mut sorted = ranges.to_vec();
        sorted.sort_by_key(|r| r.start);
        if let Some(w) = sorted.windows(2).find(|w| w[0].end > w[1].start) {
            let ties = sorted.windows(2).any(|w| w[0].start == w[1].start);
            return Err(if ties {
                // Equal starts: the index's unstable sort may pick either
                // order, and so another first pair.
                Expected::SomeSelfOverlap
            } else {
                Expected::Exact(AddrIndexError::SelfOverlap(w[0].clone(), w[1].clone()))
            });
        }
        for r in &sorted {
            // The lowest registered range that overlaps `r` is reported
            // (for several new ranges: the lowest new one that overlaps).
            let lowest = self
                .live()
                .flat_map(|m| m.ranges.iter().map(move |e| (e, m.id)))
                .filter(|(e, _)| e.start < r.end && e.end > r.start)
                .min_by_key(|(e, _)| e.start);
            if let Some((e, id)) = lowest {
                return Err(Expected::Exact(AddrIndexError::Overlap {
                    range: r.clone(),
                    existing: e.clone(),
                    module: id,
                }));
            }
        }
        Ok(())
    }
}

/// What a rejected insert must say.
#[derive(Debug)]
enum Expected {
    Exact(AddrIndexError),
    /// `SelfOverlap(a, b)` with `a`, `b` two of the given ranges that
    /// overlap, `a` starting no later than `b`.
    SomeSelfOverlap,
}

/// `insert_module(ranges, value)`, or `insert(range, value)` when `single`
/// holds (then `ranges` has one element), checked against the oracle.
fn insert(
    index: &AddrIndex<u32>,
    oracle: &mut Oracle,
    ranges: Vec<Range<u64>>,
    value: u32,
    single: bool,
) {
    let want = oracle.expected_error(&ranges);
    let (snapshot, writes) = (indexed(index), index.stats().writes);
    let got = if single {
        index.insert(ranges[0].clone(), value)
    } else {
        index.insert_module(ranges.clone(), value)
    };
    match (got, want) {
        (Ok(id), Ok(())) => {
            if let Some(last) = oracle.last_id {
                assert!(id > last, "id {id} after {last}: reused or not increasing");
            }
            oracle.last_id = Some(id);
            let mut sorted = ranges;
            sorted.sort_by_key(|r| r.start);
            oracle.modules.push(Module {
                id,
                ranges: sorted,
                value,
                tag: 0,
                live: true,
            });
        }
        (Err(e), Err(want)) => {
            let (e, back) = e.into_parts();
            assert_eq!(back, value, "the rejected value comes back");
            match want {
                Expected::Exact(want) => assert_eq!(e, want),
                Expected::SomeSelfOverlap => {
                    let AddrIndexError::SelfOverlap(a, b) = &e else {
                        panic!("insert_module({ranges:?}) = {e:?}, want SelfOverlap");
                    };
                    assert!(ranges.contains(a) && ranges.contains(b), "{e:?}: not given");
                    assert!(a.start <= b.start && a.end > b.start, "{e:?}: no overlap");
                }
            }
            // A rejected insert changes nothing, not even the write count.
            assert_eq!(
                indexed(index),
                snapshot,
                "rejected insert changed the index"
            );
            assert_eq!(index.stats().writes, writes, "rejected insert wrote");
            assert!(!e.to_string().is_empty());
        }
        (got, want) => panic!(
            "insert_module({ranges:?}) = {:?}, want {want:?}",
            got.map_err(|e| e.into_parts().0)
        ),
    }
}

/// Checks every read-side answer for `addr`.
fn check_addr(index: &AddrIndex<u32>, oracle: &Oracle, addr: u64) {
    let want = oracle.find(addr);
    let got = index.lookup(addr);
    assert_eq!(
        got.map(|h| (h.range(), h.id())),
        want.map(|(r, m)| (r.clone(), m.id)),
        "lookup({addr:#x})"
    );
    if let Some(h) = got {
        let m = want.expect("a hit").1;
        assert_eq!(h.offset(addr), addr - h.range().start);
        assert_eq!((h.base(), h.tag()), (m.ranges[0].start, m.tag));
        assert_eq!(h.module_offset(addr), addr - m.ranges[0].start);
    }
    let guard = latchtree::pin();
    let hit = index.module_address(addr, &guard);
    assert_eq!(
        hit.map(|h| (h.range(), h.id(), *h.value())),
        want.map(|(r, m)| (r.clone(), m.id, m.value)),
        "module_address({addr:#x})"
    );
}

fuzz_target!(|input: (bool, Vec<Op>)| {
    let (small, ops) = input;
    let index = AddrIndex::with_policy(if small {
        LayoutPolicy::small(2)
    } else {
        LayoutPolicy::DEFAULT
    });
    let mut oracle = Oracle {
        modules: Vec::new(),
        last_id: None,
        minter: AddrIndex::new(),
    };
    let mut runs = 0u64;
    for op in ops {
        match op {
            Op::Insert(s, e, v) => {
                let range = s.get()..e.get();
                insert(&index, &mut oracle, [range].to_vec(), v, true);
            }
            Op::InsertModule(rs, v) => {
                let ranges = rs.iter().map(|(s, e)| s.get()..e.get()).collect();
                insert(&index, &mut oracle, ranges, v, false);
            }
            Op::Remove(which) => {
                let id = oracle.id_of(which);
                let got = index.remove(id);
                match oracle.modules.iter_mut().find(|m| m.id == id && m.live) {
                    Some(m) => {
                        let r = got.expect("remove of a live module");
                        assert_eq!(
                            (r.id(), r.ranges().collect::<Vec<_>>(), **r.value(), r.tag()),
                            (m.id, m.ranges.clone(), m.value, m.tag),
                            "what remove({id}) hands back"
                        );
                        m.live = false;
                    }
                    None => assert!(got.is_none(), "remove({id}) of a dead id"),
                }
            }
            Op::SetValue(which, v) => {
                let id = oracle.id_of(which);
                let tag = u64::from(v).rotate_left(17);
                let got = index.set_value(id, v, tag);
                match oracle.modules.iter_mut().find(|m| m.id == id && m.live) {
                    Some(m) => {
                        // It hands back what it replaced: the old value and tag.
                        let old = got.map(|r| {
                            (r.id(), r.ranges().collect::<Vec<_>>(), **r.value(), r.tag())
                        });
                        assert_eq!(
                            old.ok(),
                            Some((m.id, m.ranges.clone(), m.value, m.tag)),
                            "what set_value({id}) hands back"
                        );
                        (m.value, m.tag) = (v, tag);
                    }
                    None => {
                        let (e, back) = got.expect_err("set_value of a dead id").into_parts();
                        assert_eq!((e, back), (AddrIndexError::UnknownModule(id), v));
                    }
                }
            }
            Op::Overlapping(a, b) => {
                let (a, b) = (a.get(), b.get());
                let mut want: Vec<(Range<u64>, ModuleId, u32)> = oracle
                    .live()
                    .flat_map(|m| m.ranges.iter().map(move |r| (r.clone(), m.id, m.value)))
                    .filter(|(r, ..)| a < b && r.start < b && a < r.end)
                    .collect();
                want.sort_by_key(|(r, ..)| r.start);
                let guard = index.pin();
                let got: Vec<_> = index
                    .overlapping(a..b, &guard)
                    .map(|h| (h.range(), h.id(), *h.value()))
                    .collect();
                assert_eq!(got, want, "overlapping({a:#x}..{b:#x})");
            }
            Op::Lookup(a) => {
                let addr = a.get();
                check_addr(&index, &oracle, addr);
                // The neighbours: range edges are where off-by-ones live.
                check_addr(&index, &oracle, addr.wrapping_sub(1));
                check_addr(&index, &oracle, addr.wrapping_add(1));
            }
            Op::LookupMany(addrs) => {
                let addrs = addrs.map(|a| a.get());
                for (a, got) in addrs.iter().zip(index.lookup_many(addrs)) {
                    assert_eq!(
                        got.map(|h| (h.range(), h.id(), h.base(), h.tag())),
                        index
                            .lookup(*a)
                            .map(|h| (h.range(), h.id(), h.base(), h.tag())),
                        "lookup_many at {a:#x}"
                    );
                    check_addr(&index, &oracle, *a);
                }
            }
            Op::Rebalance => index.rebalance(),
            Op::Run(len, descending) => {
                // One page each, 8 KiB apart, away from the small addresses
                // (an `Addr::Any` may still collide: the oracle expects the
                // error then).
                let first = RUN_BASE + runs * 0x10_0000;
                runs += 1;
                for i in 0..u64::from(len % 64) {
                    let i = if descending { 63 - i } else { i };
                    let r = first + i * 0x2000..first + i * 0x2000 + 0x1000;
                    insert(&index, &mut oracle, vec![r], u32::from(len), true);
                }
            }
            Op::Get(which) => {
                let id = oracle.id_of(which);
                let m = oracle.module(id);
                let guard = latchtree::pin();
                assert_eq!(index.get(id, &guard), m.map(|m| &m.value), "get({id})");
                assert_eq!(
                    index.ranges_of(id),
                    m.map(|m| m.ranges.clone()),
                    "ranges_of({id})"
                );
            }
            Op::Snapshot => {
                let mut want: Vec<(Range<u64>, ModuleId)> = oracle
                    .live()
                    .flat_map(|m| m.ranges.iter().map(move |r| (r.clone(), m.id)))
                    .collect();
                want.sort_by_key(|(r, _)| r.start);
                assert_eq!(indexed(&index), want);
            }
        }
        // After every operation (a rejected insert included): the counts,
        // the bounds and the structure match the oracle.
        if let Err(e) = index.check_invariants() {
            panic!("invariant broken: {e}");
        }
        let ranges = oracle.live().map(|m| m.ranges.len()).sum::<usize>();
        assert_eq!(index.range_count(), ranges);
        assert_eq!(index.is_empty(), ranges == 0);
        assert_eq!(index.module_count(), oracle.live().count());
        let lo = oracle
            .live()
            .flat_map(|m| m.ranges.iter().map(|r| r.start))
            .min();
        let hi = oracle
            .live()
            .flat_map(|m| m.ranges.iter().map(|r| r.end))
            .max();
        assert_eq!(index.bounds(), lo.zip(hi).map(|(lo, hi)| lo..hi));
    }
});
