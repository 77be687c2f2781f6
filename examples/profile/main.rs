//! `profile`: a sampling profiler built on [`latchtree::LoadedObjects`].
//!
//! A `SIGPROF` timer fires every millisecond of CPU time; the handler reads
//! the interrupted pc from its `ucontext` and records
//! `(object id, link-time address)` from the async-signal-safe
//! [`LoadedObjects::lookup`](latchtree::LoadedObjects::lookup) into a
//! preallocated lock-free ring. Meanwhile the program runs its own code,
//! `dlopen`s zlib and burns CPU in it, `dlclose`s it, and runs its own code
//! again. Afterwards every sample is symbolized with blazesym from the
//! object's file, matched by build id — also those of the library that is
//! gone by then.
//!
//! ```text
//! cargo run --release -p latchtree-profile
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
    #[path = "../shared/dl_error.rs"]
    mod dl_error;
    mod ring;
    mod sampler;
    pub(crate) mod session;
    #[path = "../shared/sigprof.rs"]
    mod sigprof;
    mod symbols;
    mod workload;
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
    match linux::session::run(300, std::time::Duration::from_secs(5)) {
        Ok(outcome) => {
            println!(
                "\n== Top functions ({} samples, {} dropped)",
                outcome.profile.total, outcome.dropped
            );
            outcome.profile.print(12);
            println!("\n== Symbol sources");
            for line in &outcome.profile.sources {
                println!("  {line}");
            }
            if !outcome.library_unmapped {
                println!(
                    "\nnote: {} was loaded before this program opened it, so dlclose did not unmap it",
                    outcome.library
                );
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("profile: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
