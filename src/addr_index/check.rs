//! The index's invariant checker (`check_invariants`, for tests): the range
//! tree's invariants (`raw::check`), then the bounds and the module tables
//! against the ranges.

use super::index::AddrIndex;
use super::table;
use crate::sync::Ordering;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

impl<T: Send + Sync + 'static> AddrIndex<T> {
    #[doc(hidden)]
    /// Checks every structural invariant; for tests. Call it at rest.
    pub fn check_invariants(&self) -> Result<(), String> {
        // All of it under the writer lock: the tables and records it reads
        // (with no guard) are stable and live only there.
        self.tree.check_then(
            |a, b| {
                // Relaxed: under the writer lock.
                a.end.load(Ordering::Relaxed) <= b.start.load(Ordering::Relaxed)
                    && a.start.load(Ordering::Relaxed) < a.end.load(Ordering::Relaxed)
            },
            || self.check_tables(),
        )
    }

    /// The checks of `check_invariants` beyond the tree's; writer lock held.
    fn check_tables(&self) -> Result<(), String> {
        let snap = self.raw_snapshot();
        let want = snap
            .first()
            .zip(snap.last())
            .map(|(f, l)| f.0.start..l.0.end);
        if self.bounds() != want {
            return Err(format!("bounds {:?}, ranges span {want:?}", self.bounds()));
        }
        let tables = [self.tables[0].dump(), self.tables[1].dump()];
        if tables[0] != tables[1] || self.tables[0].live() != self.tables[1].live() {
            return Err("the two module tables differ".into());
        }
        if !tables[0].windows(2).all(|w| w[0].0 < w[1].0) {
            return Err("module table not sorted by id".into());
        }
        let live: Vec<_> = tables[0].iter().filter(|(_, r)| !r.is_null()).collect();
        if live.len() != self.tables[0].live() {
            return Err("module count disagrees with the table".into());
        }
        // A compaction running holds the segments and tombstones it began
        // with, and those of the writes since, until the writes' steps
        // finish it (`table::tests`): its bounds are on the slots up to the
        // table's end, hole included.
        let compacting = self.tables[0].compacting();
        let (end, hole) = self.tables[0].extent();
        if (end, hole) != self.tables[1].extent() {
            return Err("the module tables' lengths or holes differ".into());
        }
        if compacting && !(hole[0] <= hole[1] && hole[1] <= end) {
            return Err(format!("module table hole {hole:?} in {end} slots"));
        }
        let bounded = if compacting { end } else { tables[0].len() };
        let cap = [self.tables[0].capacity(), self.tables[1].capacity()];
        if cap[0] != cap[1] || cap[0] > 4 * table::capacity(bounded) {
            return Err(format!(
                "table capacities {cap:?} for {} used slots",
                tables[0].len()
            ));
        }
        let tombstones = tables[0].len() - live.len();
        if !compacting && tombstones > live.len().max(table::COMPACT_MIN) {
            return Err(format!(
                "{tombstones} tombstones for {} modules: not compacted",
                live.len()
            ));
        }
        let mut owned = 0;
        for &&(id, rec) in &live {
            // Under the writer lock, with no transaction running, the records in table 0 are owned
            // by the index and not retired (records are retired only once out of both tables).
            // SAFETY: so `rec` points to a live record.
            let r = unsafe { &*rec };
            if r.id != id {
                return Err(format!("slot {id} holds the record of #{}", r.id));
            }
            for s in r.segments.iter() {
                owned += 1;
                // The snapshot is in address order (the tree's check,
                // above), and ranges do not overlap: one search a segment,
                // not a scan (a scan made the check quadratic).
                let ok = snap
                    .binary_search_by_key(&s.range.start, |(h, _)| h.range().start)
                    .is_ok_and(|at| {
                        let (h, m) = &snap[at];
                        *m == rec
                            && h.range() == s.range
                            && (h.id.0, h.base, h.tag, h.flags) == (id, r.base, r.tag, s.flags)
                    });
                if !ok {
                    return Err(format!(
                        "module #{id} owns {:?}, which is not indexed as such",
                        s.range
                    ));
                }
            }
        }
        if owned != snap.len() {
            return Err("some indexed range belongs to no registered module".into());
        }
        self.check_kept(&live)
    }

    /// Kept removed modules: none is registered, and a bound holds.
    fn check_kept(&self, live: &[&(u64, *mut super::record::Record<T>)]) -> Result<(), String> {
        if !self.kept.keeps() {
            return Ok(()); // nothing to check, and no lock to take (loom)
        }
        let kept = self.kept.ids();
        // `live` is in id order (the table's, checked above).
        if let Some(id) = kept
            .iter()
            .find(|&&id| live.binary_search_by_key(&id, |l| l.0).is_ok())
        {
            return Err(format!(
                "module #{id} is both registered and kept as removed"
            ));
        }
        match self.kept.keep {
            super::kept::KeepRemoved::Last(n) if kept.len() > n => {
                Err(format!("{} removed modules kept, {n} at most", kept.len()))
            }
            _ => Ok(()),
        }
    }
}
