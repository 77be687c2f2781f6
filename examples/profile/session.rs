//! One profiling session: sample this program while it runs its own code,
//! then code in a library it `dlopen`s, then (after `dlclose`) its own code
//! again; symbolize everything at the end.

use super::ring::Sample;
use super::sampler::{self, OBJECTS, RING};
use super::symbols::{self, Profile};
use super::workload::{self, Zlib};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// What a session found.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) profile: Profile,
    /// Samples lost to a full ring.
    pub(crate) dropped: usize,
    /// The library's path, as the index knew it.
    pub(crate) library: String,
    /// Whether `dlclose` really unmapped the library (it does not if
    /// something else had loaded it before).
    pub(crate) library_unmapped: bool,
}

/// Runs `work` until `wanted` more samples were taken or `deadline` passed
/// (a busy machine gives this process less CPU time), draining the ring
/// into `out` as it goes.
fn sample_while(wanted: usize, deadline: Duration, out: &mut Vec<Sample>, mut work: impl FnMut()) {
    let first = sampler::taken();
    let start = Instant::now();
    while sampler::taken() - first < wanted && start.elapsed() < deadline {
        work();
        RING.drain(out);
    }
}

/// Samples about `per_phase` times in each of the three phases.
pub(crate) fn run(per_phase: usize, deadline: Duration) -> Result<Outcome, String> {
    let started = Instant::now();
    let first = OBJECTS.refresh();
    println!(
        "== {} loaded objects indexed ({} problems) in {:.2} ms",
        first.added.len(),
        first.problems.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    for problem in &first.problems {
        println!("   note: {problem}");
    }

    let mut samples = Vec::new();
    sampler::start(Duration::from_millis(1)).map_err(|e| format!("SIGPROF timer: {e}"))?;

    println!("== phase 1: own code (spin_hash)");
    sample_while(per_phase, deadline, &mut samples, || {
        black_box(workload::spin_hash(black_box(200_000)));
    });

    let zlib = Zlib::open()?;
    let refresh = OBJECTS.refresh();
    for object in &refresh.added {
        println!(
            "== dlopen: + {} {} (build id {})",
            object.id(),
            object.info().path().display(),
            object
                .info()
                .build_id()
                .map_or_else(|| "none".to_owned(), ToString::to_string)
        );
    }
    let in_library = OBJECTS
        .lookup(zlib.function_address())
        .ok_or("the dlopened library is not in the index")?;
    let library = OBJECTS
        .object(in_library.id())
        .ok_or("no object for the library's id")?;
    println!(
        "== phase 2: inside {} ({})",
        library.info().path().display(),
        workload::FUNCTION.to_string_lossy()
    );
    sample_while(per_phase, deadline, &mut samples, || {
        black_box(zlib.burn(black_box(40)));
    });

    let was_loaded = zlib.was_loaded;
    zlib.close()?;
    let refresh = OBJECTS.refresh();
    for object in &refresh.removed {
        println!(
            "== dlclose: - {} {} (unloaded; its samples stay resolvable)",
            object.id(),
            object.info().path().display()
        );
    }
    let library_unmapped = !was_loaded && OBJECTS.lookup(in_library.segment().start).is_none();

    println!("== phase 3: own code again (count_primes)");
    sample_while(per_phase, deadline, &mut samples, || {
        black_box(workload::count_primes(black_box(3_000)));
    });
    sampler::stop().map_err(|e| format!("SIGPROF timer: {e}"))?;
    RING.drain(&mut samples);

    let rounds: u32 = 1000;
    let unchanged = Instant::now();
    let mut again = None;
    for _ in 0..rounds {
        again = Some(OBJECTS.refresh());
    }
    println!(
        "== refresh with nothing changed: {}, {:.0} ns each",
        if again.is_some_and(|r| r.rescanned) {
            "rescanned (the loader keeps no counters)"
        } else {
            "no rescan (loader counters unchanged)"
        },
        unchanged.elapsed().as_secs_f64() * 1e9 / f64::from(rounds)
    );

    let profile = symbols::symbolize(&OBJECTS, &samples);
    let outcome = Outcome {
        profile,
        dropped: RING.dropped(),
        library: library.info().path().display().to_string(),
        library_unmapped,
    };
    let forgotten = OBJECTS.forget_unloaded();
    println!("== symbolized; {forgotten} unloaded object(s) forgotten afterwards");
    Ok(outcome)
}
