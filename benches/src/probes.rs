//! The addresses a lookup benchmark asks for, and the loop that asks.
//!
//! Two probe streams, both drawn as [`Workload::ranges`] draws (90% of the
//! addresses inside a random range):
//!
//! * [`Probes::Requery`]: the workload's 65,536 queries, walked from the
//!   first at every repetition. At 262 144 ranges a repetition touches at
//!   most a quarter of the leaves, the same ones every time: after the
//!   first repetition much of that path set is in cache. The addresses a
//!   profiler re-samples from hot code look like this.
//! * [`Probes::Stream`]: at least 2^20 distinct addresses; each repetition
//!   takes the next window of them, so no contender asks for one address
//!   twice in a measurement and the nodes a measurement touches are the
//!   whole structure (beyond the last-level cache at 262 144 ranges).
//!   Every contender of one repetition answers the same window.
//! * [`Probes::Sorted`]: the stream in ascending address order (not a
//!   headline figure: it tells what another harness's sweep measures).

use crate::workload::Workload;
use std::hint::black_box;

/// Which probe stream a lookup measurement walks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probes {
    /// The workload's 65,536 queries, from the first at every repetition.
    Requery,
    /// A window of fresh distinct addresses at every repetition.
    Stream,
    /// The stream's addresses in ascending order (a sweep: neighbouring
    /// probes share most of their path, and branches predict well).
    Sorted,
}

/// The fewest distinct addresses of a stream.
pub const STREAM_MIN: usize = 1 << 20;

impl Probes {
    pub fn name(self) -> &'static str {
        match self {
            Probes::Requery => "requery",
            Probes::Stream => "stream",
            Probes::Sorted => "sorted",
        }
    }

    /// What the name stands for, for a table's head (`len`: the stream's
    /// length, see [`Probes::len`]).
    pub fn describe(self, len: usize) -> String {
        match self {
            Probes::Requery => format!(
                "requery: the same {} addresses at every repetition",
                crate::workload::QUERIES
            ),
            Probes::Stream => {
                format!("stream: {len} distinct addresses, a fresh window at every repetition")
            }
            Probes::Sorted => format!("sorted: the {len} of a stream in ascending order"),
        }
    }

    /// How many addresses [`Probes::addresses`] gives for `reps` timed
    /// repetitions of `iters` lookups after one untimed check: a stream has
    /// enough for all of them, and at least `min` ([`STREAM_MIN`] outside
    /// smoke runs), a power of two.
    pub fn len(self, reps: usize, iters: usize, min: usize) -> usize {
        match self {
            Probes::Requery => crate::workload::QUERIES,
            Probes::Stream | Probes::Sorted => ((reps + 1) * iters).next_power_of_two().max(min),
        }
    }

    /// The addresses themselves (see [`Probes::len`]).
    pub fn addresses(self, w: &Workload, reps: usize, iters: usize, min: usize) -> Vec<u64> {
        match self {
            Probes::Requery => w.queries.clone(),
            Probes::Stream | Probes::Sorted => {
                let mut addrs = w.stream(
                    self.len(reps, iters, min),
                    0x7374_7265 ^ w.ranges.len() as u64,
                );
                if self == Probes::Sorted {
                    addrs.sort_unstable();
                }
                addrs
            }
        }
    }

    /// The first address of repetition `rep` (0: the untimed check that
    /// every contender agrees).
    pub fn first(self, rep: usize, iters: usize) -> usize {
        match self {
            Probes::Requery => 0,
            Probes::Stream | Probes::Sorted => rep * iters,
        }
    }
}

/// `iters` lookups of `addrs[first..]` (cyclically; `addrs` is a power of
/// two long); the checksum folds in every answer, so none can be skipped.
#[inline(always)]
pub fn lookup_loop(
    addrs: &[u64],
    first: usize,
    iters: usize,
    mut f: impl FnMut(u64) -> Option<u64>,
) -> u64 {
    debug_assert!(addrs.len().is_power_of_two());
    let mask = addrs.len() - 1;
    let mut acc = 0u64;
    for i in first..first + iters {
        if let Some(s) = f(black_box(addrs[i & mask])) {
            acc = acc.wrapping_add(s ^ i as u64);
        }
    }
    acc
}
