//! Deterministic workloads: disjoint address ranges and query addresses.

/// A small deterministic generator (SplitMix64); no `rand` dependency.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Length of every query array (a power of two, walked cyclically).
pub const QUERIES: usize = 1 << 16;

/// A set of disjoint ranges `(start, end)` in address order, and addresses to
/// look up in them.
pub struct Workload {
    pub ranges: Vec<(u64, u64)>,
    pub queries: Vec<u64>,
}

impl Workload {
    /// `n` ranges with gaps and lengths of 1..=2^20 bytes above 2^40; 90% of
    /// the queries inside a random range, 10% just past one (in a gap, or
    /// occasionally in the next range).
    pub fn ranges(n: usize, seed: u64) -> Self {
        let mut rng = SplitMix64(seed);
        let mut ranges = Vec::with_capacity(n);
        let mut at = 1u64 << 40;
        for _ in 0..n {
            at += 1 + rng.below(1 << 20);
            let len = 1 + rng.below(1 << 20);
            ranges.push((at, at + len));
            at += len;
        }
        let queries = (0..QUERIES).map(|_| probe(&ranges, &mut rng)).collect();
        Workload { ranges, queries }
    }

    /// `len` distinct addresses drawn as [`Workload::ranges`] draws its
    /// queries (90% inside a random range, 10% just past one), in random
    /// order: a probe stream whose working set is every range, for lookups
    /// that must not find their nodes in cache from an earlier probe (see
    /// [`crate::probes`]).
    pub fn stream(&self, len: usize, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64(seed);
        let mut out: Vec<u64> = Vec::with_capacity(len + len / 32);
        while out.len() < len {
            let more = len - out.len() + len / 64 + 16;
            out.extend((0..more).map(|_| probe(&self.ranges, &mut rng)));
            out.sort_unstable();
            out.dedup();
        }
        for i in (1..out.len()).rev() {
            out.swap(i, rng.below(i as u64 + 1) as usize);
        }
        out.truncate(len);
        out
    }

    /// The Linux kernel's `__module_address` workload: 84 modules of
    /// 16 KiB..1 MiB with 4..256 KiB gaps; 90% of the addresses inside a
    /// module, 5% in a gap between modules, 5% in core kernel text below all
    /// modules (the bounds fast path).
    pub fn kernel(seed: u64) -> Self {
        const MODULES: usize = 84;
        let mut rng = SplitMix64(seed);
        let mut ranges = Vec::with_capacity(MODULES);
        let mut at = 0xffff_ffff_c000_0000_u64;
        for _ in 0..MODULES {
            at += 0x1000 * (1 + rng.below(64));
            let len = 0x4000 + 0x1000 * rng.below(252);
            ranges.push((at, at + len));
            at += len;
        }
        let queries = (0..QUERIES)
            .map(|_| {
                let r = rng.below(100);
                if r < 90 {
                    let (s, e) = ranges[rng.below(MODULES as u64) as usize];
                    s + rng.below(e - s)
                } else if r < 95 {
                    let (s, _) = ranges[rng.below(MODULES as u64) as usize];
                    s - 1 - rng.below(0x1000)
                } else {
                    0xffff_ffff_8000_0000 + rng.below(1 << 24)
                }
            })
            .collect();
        Workload { ranges, queries }
    }

    /// Keys that are never a range start, one per range (its end; gaps are
    /// at least one byte), each usable as a fresh one-byte range `[e, e+1)`.
    pub fn fresh_keys(&self) -> Vec<u64> {
        self.ranges.iter().map(|&(_, e)| e).collect()
    }
}

/// One query address for `ranges` (sorted, disjoint): 90% inside a random
/// range, 10% up to 1 MiB past one's end (in a gap, or now and then in the
/// next range).
fn probe(ranges: &[(u64, u64)], rng: &mut SplitMix64) -> u64 {
    let (s, e) = ranges[rng.below(ranges.len() as u64) as usize];
    if rng.below(10) < 9 {
        s + rng.below(e - s)
    } else {
        e + rng.below(1 << 20)
    }
}

/// `n` distinct random even keys (odd numbers are then guaranteed absent).
pub fn random_keys(n: usize, rng: &mut SplitMix64) -> Vec<u64> {
    let mut set = std::collections::BTreeSet::new();
    while set.len() < n {
        set.insert(rng.next_u64() & !1);
    }
    let mut keys: Vec<u64> = set.into_iter().collect();
    // Shuffle (Fisher-Yates) so insertion order is random too.
    for i in (1..keys.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        keys.swap(i, j);
    }
    keys
}

/// Half present keys, half absent (odd) random keys, in random order.
pub fn mixed_queries(keys: &[u64], rng: &mut SplitMix64) -> Vec<u64> {
    (0..QUERIES)
        .map(|i| {
            if i % 2 == 0 {
                keys[rng.below(keys.len() as u64) as usize]
            } else {
                rng.next_u64() | 1
            }
        })
        .collect()
}

/// How a structure is grown from its ranges, one insert at a time: in
/// rising address order (a loader or JIT allocator handing out addresses
/// upward), falling (top-down `mmap`), or random.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    Ascending,
    Descending,
    Random,
}

impl Growth {
    pub const ALL: [Growth; 3] = [Growth::Ascending, Growth::Descending, Growth::Random];

    pub fn name(self) -> &'static str {
        match self {
            Growth::Ascending => "ascending",
            Growth::Descending => "descending",
            Growth::Random => "random",
        }
    }

    /// `ranges` (in address order) in the order of their inserts.
    pub fn arrange(self, ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        match self {
            Growth::Ascending => ranges.to_vec(),
            Growth::Descending => ranges.iter().rev().copied().collect(),
            Growth::Random => shuffled(ranges),
        }
    }
}

/// `ranges` in a random (seeded) order: every structure is built by
/// inserting one range at a time in this order, as a map that grew by
/// updates would be (no bulk-built, perfectly packed B-tree nodes, no
/// sorted-insertion tree shapes).
pub fn shuffled(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut rng = SplitMix64(0x7368_7566 ^ ranges.len() as u64);
    let mut out = ranges.to_vec();
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    out
}
