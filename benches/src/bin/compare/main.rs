//! Compares `latchtree` with `BTreeMap` and the concurrent structures Rust
//! programs use for "which range contains this address", hand-timed in one
//! process, and prints one table of ns/op with the ratio to `BTreeMap`
//! measured in the same run.
//!
//! Sections: single-threaded lookups at several sizes; the Linux kernel's
//! `__module_address` workload (84 modules, 90% of addresses inside one);
//! walks in key order (`iter`, `range`); write costs; the longest single
//! write while growing to 262 144 (`pauses`: in a fresh process, wall
//! clock, and over repeated growths in one process, CPU time); readers
//! with and without a concurrent writer; memory per
//! entry (counting global allocator); "which loaded object holds this pc"
//! against glibc's `_dl_find_object` and `dladdr`. Results also go to `DIR/compare.csv`,
//! `DIR/lookup.svg` and `DIR/readers.svg`.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin compare -- [--quick] [--wall] [--requery] [--pauses] [--readers-max N] [--out DIR]
//! cargo run --release -p latchtree-benches --features huge-pages --bin compare   # with latchtree's huge-pages
//! ```
//!
//! * `--quick`: tiny sizes and durations (CI smoke mode, a few seconds).
//! * `--pauses`: only the `pauses` section (with `--quick`: at its small
//!   size).
//! * `--wall`: time the single-threaded sections with the wall clock
//!   instead of the thread's CPU time (the default, which ignores time the
//!   thread spent descheduled on a busy machine).
//! * `--requery`: lookups at every size re-query the same 65,536 addresses
//!   (from 4096 ranges up they walk a stream of 2^20+ distinct addresses by
//!   default: see `lookups.rs`).
//! * `--readers-max N`: reader-scaling curve over 1..=N reader threads, with
//!   and without a writer (default 2).
//! * `--out DIR`: where the CSV and SVG files go (default `target/compare`).
//! * `--only SECTION,...`: run only these sections (`lookups`, `iterate`,
//!   `writes`, `readers`, `memory`, `objects`).
//!
//! Single-threaded figures are medians of several round-robin repetitions of
//! many operations each (thread CPU time unless `--wall`); concurrent
//! figures are medians of a few timed runs (wall clock: a reader blocked by
//! a lock must count; their CPU time goes to the CSV's `extra` column).
//! Absolute times drift on shared machines: read the ratios.

mod alloc_count;
mod chart;
mod concurrent;
mod iterate;
mod lookups;
mod measure;
mod memory;
mod objects;
mod pauses;
mod report;
mod writes;

use latchtree_benches::machine::{self, load_average};
use latchtree_benches::{peers, workload};
use report::{Row, find};
use std::error::Error;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use workload::Growth;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

/// The baseline's name in every section.
pub(crate) const BTREEMAP: &str = "BTreeMap (unsynchronized)";
/// The generic tree's name in the write and memory rows.
pub(crate) const LATCHTREE: &str = "latchtree LatchTree";

/// One figure of a row (`None` when the row does not have it).
type Metric = fn(&Row) -> Option<f64>;

/// One section of the comparison: appends its rows.
type Section = fn(&Config, &mut Vec<Row>);

/// Sizes, repetitions and durations.
pub(crate) struct Config {
    pub(crate) sizes: Vec<usize>,
    pub(crate) iters: usize,
    pub(crate) reps: usize,
    pub(crate) write_sizes: Vec<usize>,
    /// Repetitions of each write block (short blocks: more of them).
    pub(crate) write_reps: usize,
    pub(crate) readers_max: usize,
    pub(crate) conc_dur: Duration,
    pub(crate) conc_reps: usize,
    pub(crate) memory_n: usize,
    /// Clock of the single-threaded sections.
    pub(crate) clock: measure::Clock,
    /// Lookups re-query the same 65,536 addresses at every size (no stream).
    pub(crate) requery: bool,
}

struct Args {
    quick: bool,
    pauses: bool,
    wall: bool,
    requery: bool,
    readers_max: usize,
    out: PathBuf,
    /// Sections to run (all if empty).
    only: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: compare [--quick] [--wall] [--requery] [--pauses] [--readers-max N] [--out DIR] [--only SECTION,...]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        quick: false,
        pauses: false,
        wall: false,
        requery: false,
        readers_max: 2,
        out: PathBuf::from("target/compare"),
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => args.quick = true,
            "--pauses" => args.pauses = true,
            "--wall" => args.wall = true,
            "--requery" => args.requery = true,
            "--readers-max" => {
                args.readers_max = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n >= 1)
                    .unwrap_or_else(|| usage())
            }
            "--out" => args.out = it.next().map(PathBuf::from).unwrap_or_else(|| usage()),
            "--only" => {
                args.only = it
                    .next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(String::from)
                    .collect()
            }
            "-h" | "--help" => usage(),
            _ => {
                eprintln!("unknown argument {a:?}");
                usage()
            }
        }
    }
    args
}

/// One line per target of the performance issues (the latest targets:
/// "Performance IV" for reads, "Writes and memory at the peers' cost" for
/// writes and memory): the measured ratio and whether it is met. Rows that
/// were not measured in this mode are skipped; `info` lines give the peers'
/// figures that a target is meant to be read against.
fn targets(rows: &[Row], readers_max: usize) -> Vec<String> {
    use concurrent::{C_ADDR, C_LR, C_SKIP, C_TREE, C_TREE_HELD, PACED_WRITES_PER_S};
    use lookups::{ADDR_LOOKUP, MODULE_HELD, MODULE_PIN, SECTION, SORTED_VEC, UPPER_BOUND};
    let mut out = Vec::new();
    // `a / b` of two rows' figures `f`, against `target` (`<=` or `>=`;
    // `None`: no target, reported for comparison).
    let mut line = |label: String,
                    a: Option<&Row>,
                    b: Option<&Row>,
                    f: Metric,
                    target: Option<(&str, f64)>| {
        let (Some(a), Some(b)) = (a.and_then(f), b.and_then(f)) else {
            return;
        };
        let x = a / b;
        let verdict = match target {
            Some(("<=", t)) => format!(
                "(target <= {t}x)  {}",
                if x <= t { "met" } else { "MISSED" }
            ),
            Some((_, t)) => format!(
                "(target >= {t}x)  {}",
                if x >= t { "met" } else { "MISSED" }
            ),
            None => "(for comparison)".to_string(),
        };
        out.push(format!("{label:<84} {x:>6.2}x  {verdict}"));
    };
    let ns = |r: &Row| Some(r.value);
    let cpu = |r: &Row| r.extra;
    let wr = |r: &Row| r.writer_ops_s;
    let le = |t: f64| Some(("<=", t));
    let ge = |t: f64| Some((">=", t));

    // Single-threaded lookups against the floor and the baseline.
    let kernel = "84 modules, 90% inside";
    let kern = |s: &str| find(rows, "kernel", kernel, s);
    line(
        "kernel84 AddrIndex::lookup vs sorted Vec".into(),
        kern(ADDR_LOOKUP),
        kern(SORTED_VEC),
        ns,
        le(1.0),
    );
    line(
        "kernel84 AddrIndex::lookup vs BTreeMap".into(),
        kern(ADDR_LOOKUP),
        kern(BTREEMAP),
        ns,
        le(1.0),
    );
    for (held, t) in [(MODULE_HELD, 1.15), (SECTION, 1.15), (MODULE_PIN, 1.3)] {
        line(
            format!("kernel84 {held} vs AddrIndex::lookup"),
            kern(held),
            kern(ADDR_LOOKUP),
            ns,
            le(t),
        );
    }
    for growth in Growth::ALL {
        let g = growth.name();
        let look = |n: usize, s: &str| find(rows, "lookup", &lookups::case(n, growth), s);
        line(
            format!("n=84 {g} LatchTree::upper_bound (held guard) vs sorted Vec"),
            look(84, UPPER_BOUND),
            look(84, SORTED_VEC),
            ns,
            le(1.3),
        );
        line(
            format!("n=84 {g} AddrIndex::lookup vs sorted Vec"),
            look(84, ADDR_LOOKUP),
            look(84, SORTED_VEC),
            ns,
            le(1.25),
        );
        line(
            format!("n=4096 {g} AddrIndex::lookup vs BTreeMap"),
            look(4096, ADDR_LOOKUP),
            look(4096, BTREEMAP),
            ns,
            le(0.55),
        );
        for n in [262_144, 1 << 20] {
            line(
                format!("n={n} {g} AddrIndex::lookup vs BTreeMap"),
                look(n, ADDR_LOOKUP),
                look(n, BTREEMAP),
                ns,
                le(1.5),
            );
        }
        line(
            format!("n=262144 {g} LatchTree::upper_bound vs BTreeMap"),
            look(262_144, UPPER_BOUND),
            look(262_144, BTREEMAP),
            ns,
            le(1.2),
        );
    }

    // Walks in key order (issue "complete map API": within 3x of BTreeMap).
    for case in [iterate::ITER, iterate::RANGE] {
        let it = |s: &str| find(rows, "iterate", case, s);
        line(
            format!("{case} LatchTree vs BTreeMap"),
            it(LATCHTREE),
            it(BTREEMAP),
            ns,
            le(3.0),
        );
        line(
            format!("{case} SkipMap vs BTreeMap"),
            it(lookups::SKIPMAP),
            it(BTREEMAP),
            ns,
            None,
        );
    }

    // Writes.
    for n in [84, 4096] {
        let w = |s: &str| find(rows, "write", &format!("insert+remove n={n}"), s);
        line(
            format!("n={n} LatchTree insert+remove vs BTreeMap"),
            w(LATCHTREE),
            w(BTREEMAP),
            ns,
            le(2.0),
        );
        line(
            format!("n={n} AddrIndex insert_module(1 range)+remove vs BTreeMap"),
            w(writes::ADDR_LOOKUP_WRITES),
            w(BTREEMAP),
            ns,
            le(4.0),
        );
    }

    // Readers beside a writer, against the same reader idle. latchtree
    // readers never block, so their thread CPU time per lookup is
    // meaningful too (and immune to other processes taking the cores).
    let conc = |case: &str, s: &str| find(rows, "readers", case, s);
    let idle = "1 reader, no writer";
    let paced = format!("1 reader, writer {PACED_WRITES_PER_S}/s");
    let clocks: [(Metric, &str); 2] = [(ns, "wall"), (cpu, "thread CPU")];
    for (f, clock) in clocks {
        for (s, tight) in [(C_ADDR, 3.0), (C_TREE, 4.0), (C_TREE_HELD, 3.0)] {
            line(
                format!("{s}: tight writer / idle ({clock})"),
                conc("1 reader, tight writer", s),
                conc(idle, s),
                f,
                le(tight),
            );
            line(
                format!("{s}: writer {PACED_WRITES_PER_S}/s / idle ({clock})"),
                conc(&paced, s),
                conc(idle, s),
                f,
                le(1.1),
            );
        }
    }
    for s in [C_LR, C_SKIP] {
        line(
            format!("{s}: tight writer / idle (wall)"),
            conc("1 reader, tight writer", s),
            conc(idle, s),
            ns,
            None,
        );
        line(
            format!("{s}: writer {PACED_WRITES_PER_S}/s / idle (wall)"),
            conc(&paced, s),
            conc(idle, s),
            ns,
            None,
        );
    }
    for (peer, short, t) in [(C_SKIP, "SkipMap", 1.0), (C_LR, "left-right", 1.5)] {
        line(
            format!("LatchTree writer ops/s / {short}'s (1 reader, tight)"),
            conc("1 reader, tight writer", C_TREE),
            conc("1 reader, tight writer", peer),
            wr,
            ge(t),
        );
    }
    if readers_max >= 2 {
        let many = format!("{readers_max} readers, no writer");
        line(
            format!("{C_ADDR}: {readers_max} readers / 1 reader, no writer (wall)"),
            conc(&many, C_ADDR),
            conc(idle, C_ADDR),
            ns,
            le(1.1),
        );
    }

    // "Which loaded object holds this pc", against glibc.
    let obj = |s: &str| find(rows, "objects", objects::CASE, s);
    line(
        "LoadedObjects::lookup vs glibc _dl_find_object (this process's objects)".into(),
        obj(objects::LOADED),
        obj(objects::DL_FIND_OBJECT),
        ns,
        le(0.5),
    );

    // Memory (bytes per entry; the baseline row is BTreeMap's).
    for r in rows.iter().filter(|r| r.section == "memory") {
        let limit = if r.structure == LATCHTREE {
            Some(48.0)
        } else if r.structure == writes::ADDR_LOOKUP_WRITES {
            Some(200.0)
        } else {
            None
        };
        if r.case == memory::AFTER_CASE {
            let verdict = if r.value <= 2.0 { "met" } else { "MISSED" };
            out.push(format!(
                "{:<84} {:>6.1} x  (target <= 2 x)  {verdict}",
                format!("{}: bytes held / fresh", r.structure),
                r.value
            ));
            continue;
        }
        if r.case == memory::PAIR_CASE {
            if r.structure == writes::ADDR_LOOKUP_WRITES {
                let verdict = if r.value == 0.0 { "met" } else { "MISSED" };
                out.push(format!(
                    "{:<84} {:>6.2}    (target 0)  {verdict}",
                    format!("{}: allocations per insert+remove, n=84", r.structure),
                    r.value
                ));
            }
            continue;
        }
        let limit = if r.structure == memory::ADDR_ASCENDING {
            Some(200.0)
        } else {
            limit
        };
        if let Some(limit) = limit {
            let verdict = if r.value <= limit { "met" } else { "MISSED" };
            out.push(format!(
                "{:<84} {:>6.1} B  (target <= {limit} B)  {verdict}",
                format!("{}: bytes per entry", r.structure),
                r.value
            ));
        }
    }
    out
}

fn main() -> Result<(), Box<dyn Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some(pauses::CHILD_ARG) {
        pauses::child(&argv[1..]);
        return Ok(());
    }
    let args = parse_args();
    let clock = if args.wall {
        measure::Clock::Wall
    } else {
        measure::Clock::ThreadCpu
    };
    let cfg = if args.quick {
        Config {
            sizes: vec![16, 84, 4096],
            iters: 1 << 13,
            reps: 3,
            write_sizes: vec![84],
            write_reps: 3,
            readers_max: args.readers_max,
            conc_dur: Duration::from_millis(20),
            conc_reps: 1,
            memory_n: 10_000,
            clock,
            requery: args.requery,
        }
    } else {
        Config {
            sizes: vec![16, 84, 4096, 262_144, 1 << 20],
            iters: 1 << 17,
            reps: 7,
            write_sizes: vec![84, 4096],
            write_reps: 25,
            readers_max: args.readers_max,
            conc_dur: Duration::from_millis(150),
            conc_reps: 3,
            memory_n: 100_000,
            clock,
            requery: args.requery,
        }
    };
    let cores = machine::cores();
    let started = Instant::now();
    println!(
        "latchtree comparison{}",
        if args.quick {
            " (--quick: smoke sizes, numbers are rough)"
        } else {
            ""
        }
    );
    println!(
        "machine: {}; load average at start {}",
        machine::describe(),
        load_average()
    );
    println!(
        "single-threaded: median of {} round-robin reps x {} ops ({} above n=4096 when re-queried), {}; \
         concurrent: median of {} x {} ms runs, wall clock",
        cfg.reps,
        cfg.iters,
        cfg.iters / 4,
        match cfg.clock {
            measure::Clock::ThreadCpu => "thread CPU time",
            measure::Clock::Wall => "wall clock",
        },
        cfg.conc_reps,
        cfg.conc_dur.as_millis()
    );
    println!("{}", lookups::describe(&cfg));
    println!(
        "stopwatch cost {:.0} ns per timed block (subtracted from every single-threaded block)",
        measure::overhead_ns(cfg.clock)
    );
    if cfg.readers_max + 1 > cores {
        println!(
            "note: {} readers + 1 writer exceed {cores} cores: those rows are oversubscribed",
            cfg.readers_max
        );
    }

    let mut rows = Vec::new();
    let mut spent = Vec::new();
    let sections: [(&str, Section); 7] = [
        ("lookups", lookups::run),
        ("iterate", iterate::run),
        ("writes", writes::run),
        ("pauses", pauses::run),
        ("readers", concurrent::run),
        ("memory", memory::run),
        // Last: it loads a few dozen libraries into this process.
        ("objects", objects::run),
    ];
    for (name, section) in sections {
        if (!args.only.is_empty() && !args.only.iter().any(|o| o == name))
            || (args.pauses && name != "pauses")
        {
            continue;
        }
        let t = Instant::now();
        section(&cfg, &mut rows);
        spent.push(format!("{name} {:.1} s", t.elapsed().as_secs_f64()));
    }

    println!();
    println!("measured on {}", machine::describe());
    print!("{}", report::table(&rows));
    println!();
    println!(
        "vs BTree: ratio to BTreeMap in the same case (readers rows: to single-threaded BTreeMap on kernel84; objects rows: to glibc _dl_find_object)"
    );
    println!("writer: updates/s completed by the writer thread (one insert or one remove each)");
    println!();
    println!(
        "targets (issues \"Performance IV\" and \"Writes and memory\"; ratios measured in this run):"
    );
    for t in targets(&rows, cfg.readers_max) {
        println!("  {t}");
    }

    std::fs::create_dir_all(&args.out)?;
    let csv = args.out.join("compare.csv");
    report::write_csv(&rows, &csv)?;
    let title = format!(
        "{}, {cores} cores, {}",
        machine::cpu_model(),
        if cfg!(feature = "huge-pages") {
            "huge-pages"
        } else {
            "default features"
        }
    );
    chart::lookup_chart(
        &rows,
        &args.out.join("lookup.svg"),
        &format!(
            "lookup ns/op vs n ({title}{})",
            if cfg.requery {
                ""
            } else {
                "; from n=4096 a stream of distinct addresses"
            }
        ),
    )?;
    chart::readers_chart(
        &rows,
        &args.out.join("readers.svg"),
        &format!("kernel84 readers ({title})"),
    )?;
    println!();
    println!(
        "wrote {} (+ lookup.svg, readers.svg) in {:.1} s ({}); load average now {}",
        csv.display(),
        started.elapsed().as_secs_f64(),
        spent.join(", "),
        load_average()
    );
    Ok(())
}
