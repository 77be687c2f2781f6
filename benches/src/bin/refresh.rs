//! What a `LoadedObjects::refresh` costs when it finds a change: open one
//! library, time the refresh; close it, time the refresh; medians of
//! `ROUNDS` (default 200), as ratios to the loader's own `dl_iterate_phdr`
//! walk in the same run (one with an empty callback, one that reads every
//! object's program headers, as a minimal scanner does). libssl (with
//! libcrypto) and libstdc++ (with libm) are loaded first, and the library
//! opened and closed is a private copy of libz, so that the loader maps and
//! unmaps it for sure. Uses only API that earlier releases have too
//! (`new`, `refresh`, `forget_unloaded`), so the same file measures the
//! previous `main`.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin refresh [-- ROUNDS [LIBRARY…]]
//! ```

use latchtree::LoadedObjects;
use std::ffi::{CString, c_int, c_void};
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

/// Loaded first (the first that exists of each line), and kept.
const LIBRARIES: &[&[&str]] = &[&["libssl.so.3", "libssl.so"], &["libstdc++.so.6"]];

/// Where a libz to copy may be.
const LIBZ: &[&str] = &[
    "/lib/x86_64-linux-gnu/libz.so.1",
    "/lib/aarch64-linux-gnu/libz.so.1",
    "/usr/lib/libz.so.1",
    "/lib/libz.so.1",
];

/// Counts the objects.
unsafe extern "C" fn count(_: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `u64` that `walk` passed.
    unsafe { *data.cast::<u64>() += 1 };
    0
}

/// Reads every `PT_LOAD` header of every object.
unsafe extern "C" fn headers(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
    // SAFETY: `info` is the loader's, valid during the callback; its
    // `dlpi_phnum` headers at `dlpi_phdr` are mapped with the object;
    // `data` is the `u64` that `walk` passed.
    unsafe {
        let (phdr, n) = ((*info).dlpi_phdr, usize::from((*info).dlpi_phnum));
        let mut sum = (*info).dlpi_addr;
        for h in std::slice::from_raw_parts(phdr, n) {
            if h.p_type == libc::PT_LOAD {
                sum = sum.wrapping_add(h.p_vaddr ^ h.p_memsz);
            }
        }
        *data.cast::<u64>() ^= sum;
    }
    0
}

/// One `dl_iterate_phdr` walk with `callback`.
fn walk(
    callback: unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int,
) -> u64 {
    let mut n = 0u64;
    // SAFETY: both callbacks treat `data` as this `u64`, alive for the call.
    unsafe { libc::dl_iterate_phdr(Some(callback), (&raw mut n).cast()) };
    n
}

fn dlopen(name: &str) -> *mut c_void {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: a NUL-terminated name; these system libraries' initializers
    // do nothing that matters to a measuring process.
    unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    for names in LIBRARIES {
        names.iter().any(|n| !dlopen(n).is_null());
    }
    for extra in args {
        assert!(!dlopen(&extra).is_null(), "dlopen {extra}");
    }
    let Some(libz) = LIBZ.iter().map(Path::new).find(|p| p.exists()) else {
        eprintln!("refresh: no libz.so.1 to copy");
        return;
    };
    let copy = std::env::temp_dir().join(format!("latchtree-refresh-{}.so", std::process::id()));
    std::fs::copy(libz, &copy).expect("copy libz");
    let copy_name = copy.to_str().expect("a UTF-8 temp dir").to_owned();

    let objects = LoadedObjects::new();
    objects.refresh();
    let time = |f: &dyn Fn()| {
        let start = Instant::now();
        f();
        start.elapsed().as_nanos() as f64
    };
    let (mut opened, mut closed, mut empty, mut reading) = (vec![], vec![], vec![], vec![]);
    let mut loaded = 0;
    for _ in 0..rounds {
        let handle = dlopen(&copy_name);
        assert!(!handle.is_null(), "dlopen {copy_name}");
        loaded = walk(count);
        opened.push(time(&|| assert_eq!(objects.refresh().added.len(), 1)));
        for _ in 0..3 {
            empty.push(time(&|| {
                black_box(walk(count));
            }));
            reading.push(time(&|| {
                black_box(walk(headers));
            }));
        }
        // SAFETY: the handle from dlopen, closed once; nothing of the
        // library is used afterwards.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
        closed.push(time(&|| assert_eq!(objects.refresh().removed.len(), 1)));
        objects.forget_unloaded();
    }
    std::fs::remove_file(&copy).ok();
    let (empty, reading) = (median(empty), median(reading));
    let (opened, closed) = (median(opened), median(closed));
    println!("{loaded} objects loaded with the probe library; medians of {rounds}");
    println!("dl_iterate_phdr walk, empty callback:         {empty:>8.0} ns");
    println!("dl_iterate_phdr walk, reading every header:   {reading:>8.0} ns");
    for (what, ns) in [("after a dlopen", opened), ("after a dlclose", closed)] {
        println!(
            "refresh {what:<16} {:>8.1} µs  {:>5.0}× the empty walk  {:>5.0}× the reading walk",
            ns / 1e3,
            ns / empty,
            ns / reading
        );
    }
}
