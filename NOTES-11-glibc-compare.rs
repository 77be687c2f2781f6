//! Issue 11, item 3: "which loaded object holds this pc", side by side with
//! glibc, on this process's real objects: `LoadedObjects::lookup` vs
//! `_dl_find_object` (glibc 2.35+) vs `dladdr`, in ns per lookup and as
//! ratios, all in one run.
//!
//! Self-contained, for the compare binary in `benches/` (the lead moves it
//! there): `measure(&Options::default())` loads a few dozen system libraries
//! (libcurl pulls in about 30), indexes the process's objects, and times the
//! three over the same pcs (random addresses inside every object's
//! executable segments, each object equally likely: what a profiler's
//! samples look like). Rounds are interleaved (one batch of each per round)
//! and the median round counts, so that drift on a shared machine hits all
//! three alike. The libraries stay loaded (dlclose is not the point here).
//!
//! Needs: `latchtree` with feature `objects`, `libc`. Linux, 64-bit.

use latchtree::LoadedObjects;
use std::ffi::{CStr, c_int, c_void};
use std::hint::black_box;
use std::time::Instant;

/// Libraries to load before measuring (the first one that exists of each
/// line; a missing one is skipped).
pub const LIBRARIES: &[&[&CStr]] = &[
    &[c"libcurl-gnutls.so.4", c"libcurl.so.4"],
    &[c"libxml2.so.2"],
    &[c"libsqlite3.so.0"],
    &[c"libssl.so.3"],
    &[c"libz.so.1"],
    &[c"libm.so.6"],
];

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Distinct pcs looked up per batch.
    pub pcs: usize,
    /// Batches of each contender (interleaved); the median counts.
    pub rounds: usize,
    /// Times each batch goes over the pcs.
    pub repeat: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pcs: 4096,
            rounds: 31,
            repeat: 8,
        }
    }
}

/// The result: ns per lookup (median round) and the ratios to
/// `_dl_find_object`.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// Loaded objects (after loading [`LIBRARIES`]).
    pub objects: usize,
    pub loaded_ns: f64,
    /// `None` on a libc without `_dl_find_object`.
    pub dl_find_object_ns: Option<f64>,
    pub dladdr_ns: f64,
    /// For context: a bare `AddrIndex<u64>` holding the same segments (what
    /// `LoadedObjects` adds on top of it).
    pub addr_index_ns: f64,
    /// The floor, for context: binary search (`partition_point`) over a
    /// plain sorted `Vec` of the same segments, no synchronization at all.
    pub sorted_vec_ns: f64,
}

impl Comparison {
    /// `LoadedObjects::lookup` / `_dl_find_object` (the target: ≤ 0.5).
    pub fn loaded_vs_dl_find_object(&self) -> Option<f64> {
        Some(self.loaded_ns / self.dl_find_object_ns?)
    }

    /// `LoadedObjects::lookup` / `dladdr`.
    pub fn loaded_vs_dladdr(&self) -> f64 {
        self.loaded_ns / self.dladdr_ns
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "which loaded object holds this pc ({} objects)",
            self.objects
        )?;
        writeln!(f, "  LoadedObjects::lookup  {:>7.1} ns", self.loaded_ns)?;
        match self.dl_find_object_ns {
            Some(ns) => writeln!(f, "  _dl_find_object        {ns:>7.1} ns")?,
            None => writeln!(f, "  _dl_find_object        (not in this libc)")?,
        }
        writeln!(f, "  dladdr                 {:>7.1} ns", self.dladdr_ns)?;
        writeln!(f, "  (bare AddrIndex)       {:>7.1} ns", self.addr_index_ns)?;
        writeln!(f, "  (sorted Vec, floor)    {:>7.1} ns", self.sorted_vec_ns)?;
        if let Some(r) = self.loaded_vs_dl_find_object() {
            writeln!(f, "  lookup / _dl_find_object = {r:.2}x (target <= 0.5x)")?;
        }
        write!(f, "  lookup / dladdr = {:.3}x", self.loaded_vs_dladdr())
    }
}

/// glibc's `struct dl_find_object` (x86_64/aarch64 layout), with room to
/// spare at the end.
#[repr(C)]
struct DlFindObject {
    flags: u64,
    map_start: *mut c_void,
    map_end: *mut c_void,
    link_map: *mut c_void,
    eh_frame: *mut c_void,
    reserved: [u64; 16],
}

type DlFindObjectFn = unsafe extern "C" fn(*mut c_void, *mut DlFindObject) -> c_int;

/// `_dl_find_object`, looked up at run time (absent before glibc 2.35 and on
/// other libcs).
fn dl_find_object_fn() -> Option<DlFindObjectFn> {
    // SAFETY: RTLD_DEFAULT searches the global scope; a valid C string.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_dl_find_object".as_ptr()) };
    // SAFETY: glibc's `_dl_find_object` has exactly this signature.
    (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, DlFindObjectFn>(f) })
}

/// Loads [`LIBRARIES`] (they stay loaded); returns how many were loaded.
fn load_libraries() -> usize {
    let mut loaded = 0;
    for names in LIBRARIES {
        for name in *names {
            // SAFETY: a valid C string; these system libraries' initializers
            // do nothing that matters to a measuring process.
            let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if !handle.is_null() {
                loaded += 1;
                break;
            }
        }
    }
    loaded
}

/// A small deterministic PRNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Median of `samples` (sorted in place).
fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Runs the comparison (see the module docs).
pub fn measure(options: &Options) -> Comparison {
    load_libraries();
    let objects = LoadedObjects::new();
    objects.refresh();
    let all = objects.objects();
    let texts: Vec<std::ops::Range<u64>> = all
        .iter()
        .filter_map(|o| {
            let s = o.info().segments().iter().find(|s| s.is_executable())?;
            Some(s.range.clone())
        })
        .collect();
    // The floor: every segment of every object, sorted, with its object.
    let mut sorted: Vec<(u64, u64, u64)> = all
        .iter()
        .flat_map(|o| {
            (o.info().segments().iter()).map(|s| (s.range.start, s.range.end, o.id().get()))
        })
        .collect();
    sorted.sort_unstable();
    let bare = latchtree::AddrIndex::new();
    for o in &all {
        let segments = (o.info().segments().iter()).map(|s| s.range.clone());
        bare.insert_module(segments, o.id().get()).ok();
    }
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let pcs: Vec<u64> = (0..options.pcs)
        .map(|_| {
            let text = &texts[rng.below(texts.len() as u64) as usize];
            text.start + rng.below(text.end - text.start)
        })
        .collect();
    let glibc = dl_find_object_fn();

    let ns =
        |start: Instant| start.elapsed().as_nanos() as f64 / (options.pcs * options.repeat) as f64;
    let (mut ours, mut find, mut addr, mut index, mut floor) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        let start = Instant::now();
        for _ in 0..options.repeat {
            for &pc in &pcs {
                black_box(objects.lookup(black_box(pc)));
            }
        }
        ours.push(ns(start));

        if let Some(f) = glibc {
            // SAFETY: all-zero is a valid `DlFindObject`.
            let mut result: DlFindObject = unsafe { std::mem::zeroed() };
            let start = Instant::now();
            for _ in 0..options.repeat {
                for &pc in &pcs {
                    let pc = std::ptr::without_provenance_mut(black_box(pc) as usize);
                    // SAFETY: `result` is a writable `struct dl_find_object`;
                    // the pc is only compared, never dereferenced.
                    black_box(unsafe { f(pc, &mut result) });
                    black_box(result.link_map);
                }
            }
            find.push(ns(start));
        }

        // SAFETY: all-zero is a valid `Dl_info` (null pointers).
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        let start = Instant::now();
        for _ in 0..options.repeat {
            for &pc in &pcs {
                let pc = std::ptr::without_provenance::<c_void>(black_box(pc) as usize);
                // SAFETY: `info` is a writable `Dl_info`; the pc is only
                // compared, never dereferenced.
                black_box(unsafe { libc::dladdr(pc, &mut info) });
                black_box(info.dli_fbase);
            }
        }
        addr.push(ns(start));

        let start = Instant::now();
        for _ in 0..options.repeat {
            for &pc in &pcs {
                black_box(bare.lookup(black_box(pc)));
            }
        }
        index.push(ns(start));

        let start = Instant::now();
        for _ in 0..options.repeat {
            for &pc in &pcs {
                let pc = black_box(pc);
                let i = sorted.partition_point(|&(start, _, _)| start <= pc);
                let hit = i
                    .checked_sub(1)
                    .map(|i| sorted[i])
                    .filter(|&(_, end, _)| pc < end);
                black_box(hit.map(|(_, _, id)| id));
            }
        }
        floor.push(ns(start));
    }
    Comparison {
        objects: objects.loaded_count(),
        loaded_ns: median(&mut ours),
        dl_find_object_ns: (!find.is_empty()).then(|| median(&mut find)),
        dladdr_ns: median(&mut addr),
        addr_index_ns: median(&mut index),
        sorted_vec_ns: median(&mut floor),
    }
}
