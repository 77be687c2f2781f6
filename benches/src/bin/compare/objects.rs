//! "Which loaded object holds this pc", side by side with glibc, on this
//! process's real objects after loading a few dozen system libraries
//! (libcurl pulls in about 30): `LoadedObjects::lookup` vs `_dl_find_object`
//! (glibc 2.35+, also async-signal-safe) vs `dladdr`, ns per lookup, with
//! the ratio to `_dl_find_object` (this section's baseline) in one run.
//!
//! The pcs are random addresses inside every object's executable segment,
//! each object equally likely (what a profiler's samples look like). Rounds
//! are interleaved (one batch of each contender per round) and the median
//! round counts, so that drift on a shared machine hits all alike. Wall
//! clock: nothing here blocks. The libraries stay loaded; this section runs
//! last.

use crate::Config;
use crate::report::{Row, set_baseline_to};
use latchtree::LoadedObjects;
use std::ffi::{CStr, c_int, c_void};
use std::hint::black_box;
use std::time::Instant;

/// Libraries to load before measuring (the first one that exists of each
/// line; a missing one is skipped).
const LIBRARIES: &[&[&CStr]] = &[
    &[c"libcurl-gnutls.so.4", c"libcurl.so.4"],
    &[c"libxml2.so.2"],
    &[c"libsqlite3.so.0"],
    &[c"libssl.so.3"],
    &[c"libz.so.1"],
    &[c"libm.so.6"],
];

/// What to measure.
#[derive(Clone, Copy, Debug)]
struct Options {
    /// Distinct pcs looked up per batch.
    pcs: usize,
    /// Batches of each contender (interleaved); the median counts.
    rounds: usize,
    /// Times each batch goes over the pcs.
    repeat: usize,
}

/// The result: ns per lookup (median round) and the ratios to
/// `_dl_find_object`.
#[derive(Clone, Debug)]
struct Comparison {
    /// Loaded objects (after loading [`LIBRARIES`]).
    objects: usize,
    loaded_ns: f64,
    /// `None` on a libc without `_dl_find_object`.
    dl_find_object_ns: Option<f64>,
    dladdr_ns: f64,
    /// For context: a bare `AddrIndex<u64>` holding the same segments (what
    /// `LoadedObjects` adds on top of it).
    addr_index_ns: f64,
    /// The floor, for context: binary search (`partition_point`) over a
    /// plain sorted `Vec` of the same segments, no synchronization at all.
    sorted_vec_ns: f64,
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
fn measure(options: &Options) -> Comparison {
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
        // dladdr costs microseconds: one pass over the pcs is plenty.
        let start = Instant::now();
        for &pc in &pcs {
            let pc = std::ptr::without_provenance::<c_void>(black_box(pc) as usize);
            // SAFETY: `info` is a writable `Dl_info`; the pc is only
            // compared, never dereferenced.
            black_box(unsafe { libc::dladdr(pc, &mut info) });
            black_box(info.dli_fbase);
        }
        addr.push(start.elapsed().as_nanos() as f64 / options.pcs as f64);

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

/// Names of this section's rows.
pub(crate) const LOADED: &str = "latchtree LoadedObjects::lookup";
pub(crate) const DL_FIND_OBJECT: &str = "glibc _dl_find_object";
const DLADDR: &str = "glibc dladdr";
const BARE: &str = "latchtree AddrIndex::lookup (same segments)";
const FLOOR: &str = "sorted Vec (partition_point)";
/// This section's case label.
pub(crate) const CASE: &str = "this process's objects";

/// Measures and appends the rows (baseline: `_dl_find_object`, or none on a
/// libc without it).
pub(crate) fn run(cfg: &Config, rows: &mut Vec<Row>) {
    let options = if cfg.reps <= 3 {
        Options {
            pcs: 512,
            rounds: 3,
            repeat: 2,
        }
    } else {
        Options {
            pcs: 4096,
            rounds: 31,
            repeat: 8,
        }
    };
    let c = measure(&options);
    let mut push = |name: &'static str, ns: f64| {
        rows.push(Row::new(
            "objects",
            CASE.to_string(),
            c.objects,
            name,
            ns,
            "ns/op",
        ));
    };
    push(LOADED, c.loaded_ns);
    if let Some(ns) = c.dl_find_object_ns {
        push(DL_FIND_OBJECT, ns);
    }
    push(DLADDR, c.dladdr_ns);
    push(BARE, c.addr_index_ns);
    push(FLOOR, c.sorted_vec_ns);
    set_baseline_to(rows, "objects", CASE, DL_FIND_OBJECT);
}
