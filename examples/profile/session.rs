//! One profiling session: sample this program's main thread while it runs
//! its own code, then code in a library it `dlopen`s, then (after
//! `dlclose`) its own code again — and a worker thread busy all along;
//! symbolize every stack at the end and draw the flame graph.

use super::ring::Sample;
use super::sampler::{self, OBJECTS, RING};
use super::symbols::{self, Profile};
use super::workload::{self, Zlib};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The sampled threads, by the index their samples carry.
pub(crate) const THREADS: [&str; 2] = ["main", "worker"];

/// How often each thread is sampled, in its own CPU time.
const PERIOD: Duration = Duration::from_millis(1);

/// What a session found.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) profile: Profile,
    /// Samples per thread (by index).
    pub(crate) per_thread: [usize; 2],
    /// Frames in all samples.
    pub(crate) frames: usize,
    /// Samples lost to a full ring.
    pub(crate) dropped: usize,
    /// The library's path, as the index knew it.
    pub(crate) library: String,
    /// Whether `dlclose` really unmapped the library (it does not if
    /// something else had loaded it before).
    pub(crate) library_unmapped: bool,
    /// Where the flame graph and the folded stacks were written.
    pub(crate) svg: PathBuf,
    pub(crate) folded: PathBuf,
}

/// Runs `work` until the main thread has `wanted` more samples or
/// `deadline` passed (a busy machine gives this process less CPU time),
/// draining the ring into `out` as it goes.
fn sample_while(wanted: usize, deadline: Duration, out: &mut Vec<Sample>, mut work: impl FnMut()) {
    let on_main = |out: &Vec<Sample>| out.iter().filter(|s| s.thread == 0).count();
    let first = on_main(out);
    let start = Instant::now();
    while on_main(out) - first < wanted && start.elapsed() < deadline {
        work();
        RING.drain(out);
    }
}

/// Samples the main thread about `per_phase` times in each of the three
/// phases, and the worker throughout; writes `svg` and its folded stacks
/// beside it (`.folded`).
pub(crate) fn run(per_phase: usize, deadline: Duration, svg: &Path) -> Result<Outcome, String> {
    let started = Instant::now();
    let first = OBJECTS.refresh();
    println!(
        "== {} loaded objects indexed, each with its unwinder ({} problems) in {:.2} ms",
        first.added.len(),
        first.problems.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    for problem in &first.problems {
        println!("   note: {problem}");
    }
    sampler::install().map_err(|e| format!("SIGPROF handler: {e}"))?;
    let done = AtomicBool::new(false);
    let mut samples = Vec::new();
    let phases = thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let _timer = sampler::sample_this_thread(1, PERIOD)?;
            while !done.load(Ordering::Relaxed) {
                black_box(workload::collatz_steps(black_box(20_000)));
            }
            Ok::<_, std::io::Error>(())
        });
        let main = phases(per_phase, deadline, &mut samples);
        done.store(true, Ordering::Relaxed);
        let worker = worker.join().expect("the worker panicked");
        main.and_then(|p| {
            worker
                .map(|()| p)
                .map_err(|e| format!("worker's timer: {e}"))
        })
    })?;
    sampler::uninstall().map_err(|e| format!("SIGPROF handler: {e}"))?;
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

    let profile = symbols::symbolize(&OBJECTS, &samples, &THREADS);
    let folded = svg.with_extension("folded");
    std::fs::write(&folded, profile.folded.join("\n") + "\n")
        .map_err(|e| format!("{}: {e}", folded.display()))?;
    let file = std::fs::File::create(svg).map_err(|e| format!("{}: {e}", svg.display()))?;
    let mut options = inferno::flamegraph::Options::default();
    options.title = "latchtree-profile: full stacks unwound in the SIGPROF handler".to_owned();
    let lines = profile.folded.iter().map(String::as_str);
    inferno::flamegraph::from_lines(&mut options, lines, std::io::BufWriter::new(file))
        .map_err(|e| format!("flame graph: {e}"))?;

    let mut per_thread = [0; 2];
    for s in &samples {
        per_thread[s.thread as usize] += 1;
    }
    let (library, library_unmapped) = phases;
    let outcome = Outcome {
        profile,
        per_thread,
        frames: samples.iter().map(|s| s.frames.len()).sum(),
        dropped: RING.dropped(),
        library,
        library_unmapped,
        svg: svg.to_path_buf(),
        folded,
    };
    let forgotten = OBJECTS.forget_unloaded();
    println!("== symbolized; {forgotten} unloaded object(s) forgotten afterwards");
    Ok(outcome)
}

/// The main thread's three phases, sampled; returns the library's path and
/// whether `dlclose` unmapped it.
fn phases(
    per_phase: usize,
    deadline: Duration,
    samples: &mut Vec<Sample>,
) -> Result<(String, bool), String> {
    let _timer = sampler::sample_this_thread(0, PERIOD).map_err(|e| format!("timer: {e}"))?;
    println!("== phase 1: own code (spin_hash)");
    sample_while(per_phase, deadline, samples, || {
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
    sample_while(per_phase, deadline, samples, || {
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
    sample_while(per_phase, deadline, samples, || {
        black_box(workload::count_primes(black_box(3_000)));
    });
    Ok((
        library.info().path().display().to_string(),
        library_unmapped,
    ))
}
