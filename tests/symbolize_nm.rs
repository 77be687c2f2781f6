//! The symbolizer example's object index, checked against `nm` and
//! `/proc/self/maps`.
//!
//! Functions of this test binary (and `malloc` in libc) are resolved through
//! a [`LoadedObjects`] index of the process's loaded objects and the symbol tables the
//! example reads with the `object` crate (`examples/symbolize/objects.rs`,
//! included below). Each must land in the object that `/proc/self/maps` says
//! is mapped there, at a symbol whose name and start address (`address -
//! bias`) `nm` reports for the same file. Without `nm` on the machine the
//! `nm` comparison is skipped (with a message) and the rest still runs.
//!
//! Also: the index follows `dlopen`/`dlclose`, and the legacy demangler.

#![cfg(all(feature = "objects", target_os = "linux", target_pointer_width = "64"))]

#[path = "../examples/symbolize/objects.rs"]
mod objects;

use latchtree::{LoadedObjects, ProblemKind};
use objects::{Module, Resolved, Symbolizer, demangle};
use std::collections::HashMap;
use std::ffi::CStr;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

// Probe functions with distinct bodies (so that no two are merged into one
// address), exported under fixed names.

/// Probe: exported unmangled.
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn latchtree_probe_alpha(x: u64) -> u64 {
    x.wrapping_mul(3) ^ 0x11
}

/// Probe: exported unmangled.
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn latchtree_probe_beta(x: u64) -> u64 {
    x.rotate_left(7).wrapping_add(0x2222)
}

/// Probe: exported unmangled.
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn latchtree_probe_gamma(x: u64, y: u64) -> u64 {
    if x > y { x - y } else { y.wrapping_mul(x | 1) }
}

/// Probe: exported unmangled.
#[unsafe(no_mangle)]
#[inline(never)]
extern "C" fn latchtree_probe_delta(x: u32) -> u32 {
    x.count_ones() + x.leading_zeros() * 5
}

/// Probe: a Rust-mangled function.
#[inline(never)]
fn mangled_probe_sum(values: &[u32]) -> u64 {
    values.iter().map(|&v| u64::from(v) * 7).sum()
}

/// Probe: a Rust-mangled function.
#[inline(never)]
fn mangled_probe_count(text: &str) -> usize {
    text.bytes().filter(|b| b.is_ascii_uppercase()).count() + 3
}

/// The probes: (name or, for mangled ones, demangled path suffix, address).
fn probes() -> Vec<(&'static str, bool, u64)> {
    // Call each once so that none is optimized into nothing observable.
    black_box((
        latchtree_probe_alpha(black_box(1)),
        latchtree_probe_beta(black_box(2)),
        latchtree_probe_gamma(black_box(3), black_box(4)),
        latchtree_probe_delta(black_box(5)),
        mangled_probe_sum(black_box(&[1, 2])),
        mangled_probe_count(black_box("AbC")),
    ));
    let addr = |f: *const ()| f.addr() as u64;
    vec![
        (
            "latchtree_probe_alpha",
            false,
            addr(latchtree_probe_alpha as *const ()),
        ),
        (
            "latchtree_probe_beta",
            false,
            addr(latchtree_probe_beta as *const ()),
        ),
        (
            "latchtree_probe_gamma",
            false,
            addr(latchtree_probe_gamma as *const ()),
        ),
        (
            "latchtree_probe_delta",
            false,
            addr(latchtree_probe_delta as *const ()),
        ),
        (
            "symbolize_nm::mangled_probe_sum",
            true,
            addr(mangled_probe_sum as *const ()),
        ),
        (
            "symbolize_nm::mangled_probe_count",
            true,
            addr(mangled_probe_count as *const ()),
        ),
    ]
}

/// The file mapped at `addr` according to `/proc/self/maps`.
fn mapped_file(addr: u64) -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (start, end) = fields.next()?.split_once('-')?;
        let range = u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?;
        let path = fields.nth(4)?;
        (range.contains(&addr) && path.starts_with('/')).then(|| PathBuf::from(path))
    })
}

/// Whether two paths name the same file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// `nm`'s defined symbols of `file`: name → link-time addresses, and the
/// `(address, name)` of every sized text symbol. `None` if `nm` cannot run.
type NmSymbols = (HashMap<String, Vec<u64>>, Vec<(u64, String)>);

fn nm(file: &Path, dynamic: bool) -> Option<NmSymbols> {
    let mut command = Command::new("nm");
    command.args(["--defined-only", "--print-size"]);
    if dynamic {
        command.arg("--dynamic");
    }
    let output = command.arg(file).output().ok()?;
    assert!(
        output.status.success(),
        "nm {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut by_name: HashMap<String, Vec<u64>> = HashMap::new();
    let mut sized_text = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "ADDR [SIZE] TYPE NAME"
        let (addr, size, kind, name) = match fields[..] {
            [addr, size, kind, name] => (addr, Some(size), kind, name),
            [addr, kind, name] => (addr, None, kind, name),
            _ => continue,
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        // Versioned dynamic names print as `name@@VERSION`.
        let name = name.split('@').next().unwrap_or(name);
        by_name.entry(name.to_owned()).or_default().push(addr);
        let sized = size
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .is_some_and(|s| s > 0);
        if sized && matches!(kind, "T" | "t" | "W") && addr != 0 {
            sized_text.push((addr, name.to_owned()));
        }
    }
    Some((by_name, sized_text))
}

fn nm_available() -> bool {
    let found = Command::new("nm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "symbolize_nm: `nm` is not installed; skipping the nm comparison (index and /proc/self/maps checks still run)"
        );
    }
    found
}

/// Checks a resolved address: `resolved` must start a symbol (offset 0) and
/// `nm` must list a symbol of that name at `address - bias`.
fn check_against_nm(resolved: &Resolved, nm_names: &HashMap<String, Vec<u64>>) {
    let (symbol, delta) = resolved.symbol().expect("symbol");
    let listed = nm_names
        .get(&*symbol.name)
        .map(Vec::as_slice)
        .unwrap_or_default();
    assert!(
        listed.contains(&resolved.offset()),
        "{:#x}: our symbol {} at {:#x}; nm lists it at {listed:x?}",
        resolved.addr,
        symbol.name,
        resolved.offset() - delta,
    );
}

fn resolve_in(symbolizer: &Symbolizer<'_>, addr: u64) -> Resolved {
    symbolizer
        .resolve(addr)
        .unwrap_or_else(|| panic!("{addr:#x} is in no indexed object"))
}

#[test]
fn own_functions_resolve_to_the_symbols_nm_reports() {
    let index = LoadedObjects::new();
    let mut symbolizer = Symbolizer::new(&index);
    let refresh = symbolizer.refresh();
    assert!(refresh.rescanned);
    assert!(
        !(refresh.problems.iter()).any(|p| matches!(p.kind(), ProblemKind::Rejected(_))),
        "objects rejected: {:?}",
        refresh.problems
    );
    assert!(
        refresh
            .added
            .iter()
            .all(|(_, m)| !m.info.segments().is_empty())
    );

    let exe = std::env::current_exe().unwrap();
    let main_module: Arc<Module> = resolve_in(&symbolizer, probes()[0].2).module;
    assert!(
        main_module.symbols.len() > 6,
        "main program symbols: {} ({})",
        main_module.symbols.len(),
        main_module.symbol_source
    );

    for (name, mangled, addr) in probes() {
        let resolved = resolve_in(&symbolizer, addr);
        println!("{name:<36} {addr:#x} -> {resolved}");
        // The right module: the same one for all probes, the file that
        // /proc/self/maps shows at this address, and this test's executable.
        assert!(
            Arc::ptr_eq(&resolved.module, &main_module),
            "{name} in {}",
            resolved.module.name
        );
        let mapped = mapped_file(addr).expect("address not in /proc/self/maps");
        assert!(
            same_file(&mapped, &exe),
            "{name}: maps says {}, exe is {}",
            mapped.display(),
            exe.display()
        );
        assert!(
            same_file(Path::new(&resolved.module.name), &exe),
            "module name {}",
            resolved.module.name
        );
        assert!(resolved.module.segments().any(|s| s.contains(&addr)));
        // The right symbol, at its first byte.
        let (symbol, delta) = resolved
            .symbol()
            .unwrap_or_else(|| panic!("{name}: no symbol"));
        assert_eq!(delta, 0, "{name}: a function pointer is the symbol's start");
        assert_eq!(symbol.start, resolved.offset());
        if mangled {
            assert!(
                symbol.name.starts_with("_ZN") || symbol.name.starts_with("_R"),
                "{}",
                symbol.name
            );
            // Legacy or v0 (`-C symbol-mangling-version=v0`): both demangle.
            assert_eq!(symbol.display_name(), name, "demangled {}", symbol.name);
        } else {
            assert_eq!(&*symbol.name, name);
        }
    }

    if !nm_available() {
        return;
    }
    let (nm_names, nm_sized_text) = nm(&exe, false).unwrap();
    for (name, _, addr) in probes() {
        let resolved = resolve_in(&symbolizer, addr);
        check_against_nm(&resolved, &nm_names);
        if !name.contains("::") {
            assert_eq!(
                nm_names.get(name).map(Vec::as_slice),
                Some(&[resolved.offset()][..]),
                "nm {name}"
            );
        }
    }
    // And the whole table: every sized text symbol nm lists starts a symbol
    // of ours at the same address (ours may be an alias of nm's name).
    assert!(
        nm_sized_text.len() > 6,
        "nm listed {} sized text symbols",
        nm_sized_text.len()
    );
    let mut checked = 0;
    for (addr, name) in &nm_sized_text {
        let found = main_module.symbols.find(*addr);
        assert!(
            found
                .is_some_and(|(s, delta)| delta == 0
                    && nm_names.get(&*s.name).is_some_and(|a| a.contains(addr))),
            "nm: {name} at {addr:#x}; ours: {:?}",
            found.map(|(s, d)| (&s.name, d))
        );
        checked += 1;
    }
    println!(
        "{checked} sized text symbols of {} agree with nm",
        exe.display()
    );
}

#[test]
fn libc_malloc_resolves_to_libc() {
    let index = LoadedObjects::new();
    let mut symbolizer = Symbolizer::new(&index);
    symbolizer.refresh();
    let addr = (libc::malloc as *const ()).addr() as u64;
    let resolved = resolve_in(&symbolizer, addr);
    println!("malloc {addr:#x} -> {resolved}");
    let mapped = mapped_file(addr).expect("malloc not in /proc/self/maps");
    assert!(
        same_file(&mapped, Path::new(&resolved.module.name)),
        "maps says {}, index says {}",
        mapped.display(),
        resolved.module.name
    );
    assert!(
        resolved.module.short_name().starts_with("libc"),
        "{}",
        resolved.module.name
    );
    let (symbol, delta) = resolved.symbol().expect("malloc has a symbol");
    assert_eq!(delta, 0);
    if nm_available() {
        // Stripped system libraries keep their dynamic symbols only.
        let (dyn_names, _) = nm(Path::new(&resolved.module.name), true).unwrap();
        check_against_nm(&resolved, &dyn_names);
        assert!(
            dyn_names
                .get("malloc")
                .is_some_and(|a| a.contains(&resolved.offset())),
            "nm -D malloc; ours {}",
            symbol.name
        );
    }
}

/// `dlopen`s the first candidate that is on this machine and not loaded yet.
fn open_fresh_library() -> Option<(*mut libc::c_void, &'static CStr, &'static CStr)> {
    for (library, function) in [(c"libz.so.1", c"zlibVersion"), (c"libm.so.6", c"cos")] {
        // SAFETY: valid C string; RTLD_NOLOAD loads nothing.
        let loaded = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if !loaded.is_null() {
            // SAFETY: drops the reference NOLOAD just took.
            unsafe { libc::dlclose(loaded) };
            continue;
        }
        // SAFETY: valid C string; libz and libm have no initializers that
        // affect this process.
        let handle = unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !handle.is_null() {
            return Some((handle, library, function));
        }
    }
    None
}

#[test]
fn refresh_follows_dlopen_and_dlclose() {
    let index = LoadedObjects::new();
    let mut symbolizer = Symbolizer::new(&index);
    let first = symbolizer.refresh();
    let modules_before = index.loaded_count();
    assert_eq!(modules_before, first.added.len());
    let Some((handle, library, function)) = open_fresh_library() else {
        eprintln!(
            "symbolize_nm: neither libz.so.1 nor libm.so.6 can be freshly loaded here; skipping"
        );
        return;
    };
    let library = library.to_str().unwrap();

    let counters = LoadedObjects::load_counters();
    if let (Some(before), Some(after)) = (first.counters, counters) {
        assert!(
            after.adds > before.adds,
            "dlpi_adds did not move: {before:?} -> {after:?}"
        );
    }
    let opened = symbolizer.refresh();
    assert!(opened.rescanned);
    let (id, module) = opened
        .added
        .iter()
        .find(|(_, m)| m.short_name() == library)
        .unwrap_or_else(|| {
            panic!(
                "{library} not added: {:?}",
                opened
                    .added
                    .iter()
                    .map(|(_, m)| &m.name)
                    .collect::<Vec<_>>()
            )
        });
    let id = *id;
    assert!(opened.removed.is_empty());

    // SAFETY: live handle, valid C string.
    let address = unsafe { libc::dlsym(handle, function.as_ptr()) }.addr() as u64;
    assert_ne!(address, 0);
    let resolved = resolve_in(&symbolizer, address);
    assert_eq!(resolved.id, id);
    assert!(Arc::ptr_eq(&resolved.module, module));
    assert_eq!(
        resolved.symbol().map(|(s, d)| (&*s.name, d)),
        Some((function.to_str().unwrap(), 0)),
        "{resolved}"
    );
    assert_eq!(index.lookup(address).map(|hit| hit.id()), Some(id));

    // SAFETY: the handle from dlopen above, closed once; nothing in the
    // library is used afterwards (only its address, as a number).
    assert_eq!(unsafe { libc::dlclose(handle) }, 0);
    let closed = symbolizer.refresh();
    assert!(closed.rescanned);
    assert_eq!(
        closed.removed.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        [id]
    );
    assert!(closed.added.is_empty());
    assert_eq!(
        index.lookup(address),
        None,
        "{library} still indexed after dlclose"
    );
    assert!(symbolizer.resolve(address).is_none());
    assert_eq!(index.loaded_count(), modules_before);

    // A sample recorded before the unload still names the library.
    let late = symbolizer
        .resolve_sample(id.get(), address)
        .expect("retired module");
    assert_eq!(late.module.short_name(), library);
    assert_eq!(
        late.symbol().map(|(s, _)| &*s.name),
        Some(function.to_str().unwrap())
    );

    // Forgotten: the sample no longer resolves.
    assert_eq!(symbolizer.forget_unloaded(), 1);
    assert!(symbolizer.resolve_sample(id.get(), address).is_none());

    if counters.is_some() {
        let unchanged = symbolizer.refresh();
        assert!(
            !unchanged.rescanned,
            "counters did not move, yet it rescanned"
        );
        assert!(unchanged.added.is_empty() && unchanged.removed.is_empty());
        let now = unchanged.counters.unwrap();
        assert!(now.subs >= 1);
    }
}

#[test]
fn demangles_rust_names() {
    assert_eq!(
        demangle("_ZN4core3fmt5write17h0123456789abcdefE").as_deref(),
        Some("core::fmt::write")
    );
    assert_eq!(
        demangle("_ZN60_$LT$alloc..string..String$u20$as$u20$core..fmt..Display$GT$3fmt17hfedcba9876543210E").as_deref(),
        Some("<alloc::string::String as core::fmt::Display>::fmt")
    );
    assert_eq!(
        demangle("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0000000000000000E")
            .as_deref(),
        Some("std::rt::lang_start::{{closure}}")
    );
    assert_eq!(
        demangle("_ZN3foo3barE.llvm.12345").as_deref(),
        Some("foo::bar")
    );
    // v0: plain paths only.
    assert_eq!(
        demangle("_RNvNtCsjrHSEGnQ3l9_3std2rt19lang_start_internal").as_deref(),
        Some("std::rt::lang_start_internal")
    );
    assert_eq!(demangle("_RNCNvCs1234_5hello4main0s0_"), None);
    assert_eq!(
        demangle("_RNCNvCsabc_5hello4mains_0").as_deref(),
        Some("hello::main::{closure#1}")
    );
    assert_eq!(
        demangle("_RNvCs1_3foo3barCs2_3baz.llvm.7").as_deref(),
        Some("foo::bar")
    );
    for unhandled in [
        "malloc",
        "_ZN3fooX",
        "_ZN99fooE",
        "_ZN",
        "_ZN3fooEjunk",
        "_RINvCs1_3foo3barpE",
        "_RNvCs1_3foo3ba",
        "_RNvMs_Cs1_3fooNtB2_3Bar3new",
    ] {
        assert_eq!(demangle(unhandled), None, "{unhandled}");
    }
}
