//! `symbolize`: a symbolizer built on [`latchtree::LoadedObjects`].
//!
//! It indexes the ELF objects loaded in its own process (`dl_iterate_phdr`,
//! one module per object, one range per `PT_LOAD` segment, the symbols read
//! from each file with the `object` crate), then:
//!
//! 1. resolves its own stack, a few known function and data addresses, and
//!    any hex addresses given on the command line to
//!    `module id, module, offset (address - bias), symbol+offset`;
//! 2. profiles itself for a moment with `SIGPROF`, calling the
//!    async-signal-safe [`LoadedObjects::lookup`](latchtree::LoadedObjects::lookup)
//!    inside the signal handler;
//! 3. shows the index staying live: `dlopen`s a system library, notices the
//!    change through the loader's `dlpi_adds`/`dlpi_subs` counters, refreshes,
//!    resolves a function in it, `dlclose`s it, refreshes again and shows the
//!    lookup now misses, while a sample recorded as `(id, address)` before
//!    the unload still resolves.
//!
//! ```text
//! cargo run --release -p latchtree-examples --bin symbolize
//! cargo run --release -p latchtree-examples --bin symbolize -- 0x7f12345678 0x5555deadbeef
//! ```
//!
//! Linux (glibc or musl), 64-bit targets only.

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
#[path = "../shared/dl_error.rs"]
mod dl_error;
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod objects;
#[cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod profile;
#[cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[path = "../shared/sigprof.rs"]
mod sigprof;
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod stack;

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
use linux::run;

/// The index of loaded objects. A `static`, so that a signal handler can
/// reach it (`profile.rs`).
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
static OBJECTS: latchtree::LoadedObjects = latchtree::LoadedObjects::new();

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn main() {
    eprintln!("symbolize: this example needs Linux (dl_iterate_phdr) on a 64-bit target");
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn main() -> std::process::ExitCode {
    let mut addrs = Vec::new();
    for arg in std::env::args().skip(1) {
        let digits = arg
            .strip_prefix("0x")
            .or_else(|| arg.strip_prefix("0X"))
            .unwrap_or(&arg);
        match u64::from_str_radix(digits, 16) {
            Ok(addr) => addrs.push(addr),
            Err(_) => {
                eprintln!(
                    "symbolize: `{arg}` is not a hex address\nusage: symbolize [0xADDRESS ...]"
                );
                return std::process::ExitCode::from(2);
            }
        }
    }
    run(&addrs);
    std::process::ExitCode::SUCCESS
}

#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
mod linux {
    use crate::OBJECTS;
    use crate::dl_error::dl_error;
    use crate::objects::Symbolizer;
    use crate::stack;
    use latchtree::{LoadCounters, LoadedObjects};
    use std::collections::HashMap;
    use std::ffi::CStr;
    use std::hint::black_box;
    use std::time::{Duration, Instant};

    /// Everything after argument parsing.
    pub(crate) fn run(args: &[u64]) {
        let started = Instant::now();
        let mut symbolizer = Symbolizer::new(&OBJECTS);
        let first = symbolizer.refresh();
        let built = started.elapsed();

        heading(
            "Loaded objects (dl_iterate_phdr; one range per PT_LOAD segment, exact, not page-rounded)",
        );
        for (id, module) in &first.added {
            println!(
                "  {:<4} bias {:#014x}  {} range{}  {:>5} symbols  {}{}",
                id.to_string(),
                module.bias(),
                module.segments().len(),
                if module.segments().len() == 1 {
                    " "
                } else {
                    "s"
                },
                module.symbols.len(),
                module.name,
                if module.symbol_source == module.name {
                    String::new()
                } else {
                    format!("  [symbols: {}]", module.symbol_source)
                },
            );
        }
        for problem in &first.problems {
            println!("  note: {problem}");
        }
        println!(
            "  index: {} objects, {} ranges; loader counters {}; built in {:.1} ms (symbol tables included)",
            OBJECTS.loaded_count(),
            range_count(&first.added),
            counters_text(first.counters),
            built.as_secs_f64() * 1e3,
        );

        heading(
            "This thread's stack (_Unwind_Backtrace; each return address looked up at address - 1)",
        );
        let stack = stack::return_addresses(24);
        for &ip in &stack {
            print_lookup(&symbolizer, ip.wrapping_sub(1));
        }

        heading("Known addresses (function pointers; a static)");
        let known: [(&str, u64); 6] = [
            ("main", code_address(crate::main as *const ())),
            (
                "Symbolizer::refresh",
                code_address(Symbolizer::refresh as *const ()),
            ),
            (
                "LoadedObjects::lookup",
                code_address(LoadedObjects::<()>::lookup as *const ()),
            ),
            ("libc::malloc", code_address(libc::malloc as *const ())),
            ("libc::getpid", code_address(libc::getpid as *const ())),
            ("static OBJECTS", std::ptr::addr_of!(OBJECTS).addr() as u64),
        ];
        for (what, addr) in known {
            print!("  {what:<24}");
            print_lookup(&symbolizer, addr);
        }

        if !args.is_empty() {
            heading("Command-line addresses");
            for &addr in args {
                print_lookup(&symbolizer, addr);
            }
        }

        profile(&symbolizer);
        live(&mut symbolizer);
        lookup_cost(&stack);
        println!("\ntotal {:.1} ms", started.elapsed().as_secs_f64() * 1e3);
    }

    /// A function's address, as the index keys it.
    fn code_address(function: *const ()) -> u64 {
        function.addr() as u64
    }

    fn heading(title: &str) {
        println!("\n== {title}");
    }

    /// How many segments (index ranges) these modules have.
    fn range_count(
        modules: &[(latchtree::ModuleId, std::sync::Arc<crate::objects::Module>)],
    ) -> usize {
        modules.iter().map(|(_, m)| m.segments().len()).sum()
    }

    fn counters_text(counters: Option<LoadCounters>) -> String {
        counters.map_or_else(
            || "unknown".to_owned(),
            |c| format!("adds={} subs={}", c.adds, c.subs),
        )
    }

    /// One line: address, module id and name, offset, symbol.
    fn print_lookup(symbolizer: &Symbolizer<'_>, addr: u64) {
        match symbolizer.resolve(addr) {
            Some(resolved) => println!("  {addr:#018x}  {resolved}"),
            None => println!("  {addr:#018x}  (not in any loaded object)"),
        }
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn profile(symbolizer: &Symbolizer<'_>) {
        heading(
            "Sampling profiler (SIGPROF every 1 ms of CPU; LoadedObjects::lookup runs inside the handler)",
        );
        let (samples, taken) = match crate::profile::sample(100, Duration::from_millis(500)) {
            Ok(result) => result,
            Err(e) => {
                println!("  could not set up SIGPROF: {e}");
                return;
            }
        };
        let mut by_symbol: HashMap<String, usize> = HashMap::new();
        for sample in &samples {
            let place = match sample
                .module
                .and_then(|id| symbolizer.resolve_sample(id, sample.pc))
            {
                Some(r) => {
                    let symbol = r
                        .symbol()
                        .map_or_else(|| "??".to_owned(), |(s, _)| s.display_name());
                    format!("{} {} {symbol}", r.id, r.module.short_name())
                }
                None => "(not in any loaded object)".to_owned(),
            };
            *by_symbol.entry(place).or_default() += 1;
        }
        let mut ranked: Vec<_> = by_symbol.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        println!(
            "  {taken} samples ({} kept), {} in a known module",
            samples.len(),
            samples.iter().filter(|s| s.module.is_some()).count()
        );
        for (place, count) in ranked.iter().take(6) {
            println!(
                "  {:>5.1}%  {place}",
                100.0 * *count as f64 / samples.len().max(1) as f64
            );
        }
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn profile(_: &Symbolizer<'_>) {
        heading(
            "Sampling profiler: skipped (reading the interrupted PC is written for x86_64 and aarch64 only)",
        );
    }

    /// `dlopen`s a library that is not loaded yet, watches the index follow,
    /// and `dlclose`s it.
    fn live(symbolizer: &mut Symbolizer<'_>) {
        heading("Staying live: dlopen / dlclose");
        let candidates: [(&CStr, &CStr); 2] =
            [(c"libz.so.1", c"zlibVersion"), (c"libm.so.6", c"cos")];
        for (library, function) in candidates {
            let lib = library.to_string_lossy();
            // SAFETY: valid C string; RTLD_NOLOAD only asks whether the library
            // is loaded and loads nothing.
            let already =
                unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if !already.is_null() {
                println!(
                    "  {lib} is already loaded, dlclose would not unmap it: trying the next one"
                );
                // SAFETY: `already` is a handle dlopen just returned; closing
                // it drops the reference NOLOAD took.
                unsafe { libc::dlclose(already) };
                continue;
            }
            let before = LoadedObjects::load_counters();
            // SAFETY: valid C string. Loading runs the library's initializers;
            // libz and libm have none that matter to this process.
            let handle =
                unsafe { libc::dlopen(library.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
            if handle.is_null() {
                println!("  dlopen({lib}) failed: {}", dl_error());
                continue;
            }
            let after = LoadedObjects::load_counters();
            println!(
                "  dlopen(\"{lib}\"): loader counters {} -> {}",
                counters_text(before),
                counters_text(after)
            );
            let refresh = symbolizer.refresh();
            for (id, module) in &refresh.added {
                println!(
                    "  refresh: + {id} {} ({} ranges, {} symbols)",
                    module.name,
                    module.segments().len(),
                    module.symbols.len()
                );
            }
            for (id, module) in &refresh.removed {
                println!("  refresh: - {id} {}", module.name);
            }
            // SAFETY: `handle` is live; `function` is a valid C string.
            let address = unsafe { libc::dlsym(handle, function.as_ptr()) };
            let address = address.addr() as u64;
            let func = function.to_string_lossy();
            if address == 0 {
                println!("  dlsym({func}) failed: {}", dl_error());
            } else {
                print!("  dlsym(\"{func}\")");
                print_lookup(symbolizer, address);
            }
            // What a signal handler would record: plain numbers.
            let recorded = OBJECTS.lookup(address).map(|hit| (hit.id().get(), address));

            // SAFETY: `handle` came from dlopen above and is closed once; no pointer into the
            // library is dereferenced after this (we keep only its address as a number).
            let closed = unsafe { libc::dlclose(handle) };
            let after_close = LoadedObjects::load_counters();
            println!(
                "  dlclose -> {closed}: loader counters {}",
                counters_text(after_close)
            );
            let refresh = symbolizer.refresh();
            for (id, module) in &refresh.removed {
                println!("  refresh: - {id} {}", module.name);
            }
            match OBJECTS.lookup(address) {
                None => println!(
                    "  lookup({address:#x}) now misses: the library is gone from the index"
                ),
                Some(hit) => println!(
                    "  lookup({address:#x}) still hits {} (was the library not unmapped?)",
                    hit.id()
                ),
            }
            if let Some((id, addr)) = recorded {
                match symbolizer.resolve_sample(id, addr) {
                    Some(r) => println!(
                        "  sample recorded before the unload, (#{id}, {addr:#x}), still resolves: {r}"
                    ),
                    None => println!("  sample (#{id}, {addr:#x}) no longer resolves"),
                }
                let forgotten = symbolizer.forget_unloaded();
                println!(
                    "  forget_unloaded: {forgotten} object(s) forgotten; the sample now resolves to {:?}",
                    symbolizer.resolve_sample(id, addr).map(|r| r.id)
                );
            }
            let again = symbolizer.refresh();
            println!(
                "  refresh with no change in between: {}",
                if again.rescanned {
                    "rescanned (counters unavailable)"
                } else {
                    "counters unchanged, no rescan"
                }
            );
            return;
        }
        println!("  no candidate library could be loaded and unloaded here");
    }

    /// Time for `LoadedObjects::lookup` over the stack's addresses.
    fn lookup_cost(addrs: &[u64]) {
        heading("Lookup cost");
        if addrs.is_empty() {
            return;
        }
        let rounds = 200_000;
        let started = Instant::now();
        let mut hits = 0_usize;
        for _ in 0..rounds {
            for &addr in addrs {
                hits += usize::from(OBJECTS.lookup(black_box(addr)).is_some());
            }
        }
        let elapsed = started.elapsed();
        let n = rounds * addrs.len();
        println!(
            "  {n} lookups over {} objects: {:.1} ns each ({hits} hits); read retries so far: {}",
            OBJECTS.loaded_count(),
            elapsed.as_nanos() as f64 / n as f64,
            OBJECTS.stats().read_retries,
        );
        // The same addresses 8 at a time, as a handler symbolizing a whole
        // stack would ask: one version, 8 descents in lockstep.
        let lanes: Vec<[u64; 8]> = addrs
            .chunks(8)
            .map(|c| core::array::from_fn(|i| c[i % c.len()]))
            .collect();
        let started = Instant::now();
        let mut many_hits = 0_usize;
        for _ in 0..rounds {
            for &pcs in &lanes {
                many_hits += OBJECTS
                    .lookup_many(black_box(pcs))
                    .iter()
                    .filter(|h| h.is_some())
                    .count();
            }
        }
        let n = rounds * lanes.len() * 8;
        println!(
            "  {n} addresses by lookup_many, 8 at a time: {:.1} ns each ({many_hits} hits)",
            started.elapsed().as_nanos() as f64 / n as f64,
        );
    }
}
