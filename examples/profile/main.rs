//! `profile`: a sampling profiler built on [`latchtree::LoadedObjects`].
//!
//! Each of two threads has a timer that sends it `SIGPROF` every
//! millisecond of its CPU time; the handler unwinds the interrupted stack
//! to its root with framehop (no allocation), each frame's object and
//! unwinder found through the index's handler section, and records the
//! frames as `(object id, link-time address)` into a preallocated lock-free
//! ring. Meanwhile the main thread runs its own code, `dlopen`s zlib and
//! burns CPU in it, `dlclose`s it, and runs its own code again; a worker
//! burns CPU throughout. Afterwards every frame is symbolized with blazesym
//! from the object's file, matched by build id — also those of the library
//! that is gone by then — and drawn as a flame graph with inferno.
//!
//! ```text
//! cargo run --release -p latchtree-profile [-- OUT.svg]   # default: profile.svg
//! ```
//!
//! Linux, x86_64 or aarch64.

/// Everything but `main`: Linux on x86_64 or aarch64 only.
#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[path = "."]
mod linux {
    pub(crate) mod alloc_count;
    #[path = "../shared/dl_error.rs"]
    mod dl_error;
    mod ring;
    mod sampler;
    pub(crate) mod session;
    #[path = "../shared/sigprof.rs"]
    mod sigprof;
    mod symbols;
    mod workload;

    #[global_allocator]
    static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;
}

#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
fn main() {
    eprintln!("profile: this example needs Linux on x86_64 or aarch64");
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
fn main() -> std::process::ExitCode {
    let svg = std::env::args_os()
        .nth(1)
        .unwrap_or_else(|| "profile.svg".into());
    let outcome = match linux::session::run(300, std::time::Duration::from_secs(5), svg.as_ref()) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("profile: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let (handled, allocations) = linux::alloc_count::counts();
    let samples = outcome.profile.total;
    println!(
        "\n== {samples} stacks ({} main, {} worker; {} dropped), {:.1} frames each; \
         allocations inside the handler: {allocations} (in {handled} signals)",
        outcome.per_thread[0],
        outcome.per_thread[1],
        outcome.dropped,
        outcome.frames as f64 / samples.max(1) as f64,
    );
    println!("\n== Top functions (leaf frames, {samples} samples)");
    outcome.profile.print(12);
    println!("\n== Symbol sources");
    for line in &outcome.profile.sources {
        println!("  {line}");
    }
    println!(
        "\n== Flame graph: {} ({} distinct stacks; folded in {})",
        outcome.svg.display(),
        outcome.profile.folded.len(),
        outcome.folded.display()
    );
    if !outcome.library_unmapped {
        println!(
            "\nnote: {} was loaded before this program opened it, so dlclose did not unmap it",
            outcome.library
        );
    }
    std::process::ExitCode::SUCCESS
}
