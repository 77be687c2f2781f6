//! Medians over repeated runs of `orders` (its TSV output) and `compare`
//! (its `compare.csv`), per build, and the ratios between builds: what
//! `benches/figures.sh` prints at its end.
//!
//! ```text
//! cargo run --release -p latchtree-benches --bin medians -- orders|compare \
//!     LABEL: FILE... [LABEL: FILE...]...
//! ```
//!
//! Each `LABEL:` (an argument ending in `:`) starts a build's group of
//! files, one file per run. For every measured cell and figure the output
//! gives each build's median over its runs with the range in brackets,
//! then the ratio of the medians of the 1st to the 2nd build and of the
//! 3rd to the 4th (figures.sh passes `now`, `before`, `now+hp`,
//! `before+hp`). `orders` also gets one Markdown table per probe stream in
//! the README's shape: the first build's `Vec`, `BTreeMap`, `lookup` and
//! `lookup_many`, and `lookup` × the `BTreeMap` of the same run for every
//! build. Lines starting with `#` in a file (the machine, the build) are
//! printed once per build.

use std::collections::BTreeMap;

/// One figure of one run: the cell it belongs to, and its named values.
struct Record {
    key: Vec<String>,
    values: Vec<(&'static str, Option<f64>)>,
}

/// The files of one build.
struct Group {
    label: String,
    files: Vec<String>,
}

fn usage() -> ! {
    eprintln!("usage: medians orders|compare LABEL: FILE... [LABEL: FILE...]...");
    std::process::exit(2)
}

/// Splits a CSV line (fields in double quotes may hold commas).
fn csv_fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            _ => out.last_mut().expect("one field").push(c),
        }
    }
    out
}

/// The records of one `orders` output.
fn orders_records(text: &str) -> Vec<Record> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with("n\t"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok());
            (f.len() >= 7).then(|| Record {
                key: f[..4].iter().map(|s| s.to_string()).collect(),
                values: vec![("ns", num(4)), ("x Vec", num(5)), ("x BTreeMap", num(6))],
            })
        })
        .collect()
}

/// The records of one `compare.csv`.
fn compare_records(text: &str) -> Vec<Record> {
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let f = csv_fields(l);
            let num = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok());
            (f.len() >= 8).then(|| Record {
                key: vec![
                    f[0].clone(),
                    f[1].clone(),
                    format!("{} readers", f[3]),
                    f[4].clone(),
                    f[6].clone(),
                ],
                values: vec![
                    ("value", num(5)),
                    ("x baseline", num(7)),
                    ("writer/s", num(8)),
                ],
            })
        })
        .collect()
}

fn median(xs: &mut [f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    Some(if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    })
}

/// Three significant digits, or `-`.
fn fmt(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

/// Every run's values of one (key, value name), per build.
type Samples = BTreeMap<(Vec<String>, usize), Vec<Vec<f64>>>;

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| usage());
    let parse: fn(&str) -> Vec<Record> = match kind.as_str() {
        "orders" => orders_records,
        "compare" => compare_records,
        _ => usage(),
    };
    let mut groups: Vec<Group> = Vec::new();
    for a in args {
        if let Some(label) = a.strip_suffix(':') {
            groups.push(Group {
                label: label.to_string(),
                files: Vec::new(),
            });
        } else {
            groups.last_mut().unwrap_or_else(|| usage()).files.push(a);
        }
    }
    if groups.is_empty() {
        usage();
    }
    // (key, value index) -> per build -> samples; and the value names and
    // the order cells were first seen in.
    let mut samples: Samples = BTreeMap::new();
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut names: Vec<&'static str> = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        let mut heads: Vec<String> = Vec::new();
        for file in &group.files {
            let text =
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
            for l in text.lines().filter(|l| l.starts_with("# machine")) {
                if !heads.iter().any(|h| h == l) {
                    heads.push(l.to_string());
                }
            }
            for r in parse(&text) {
                if !seen.contains(&r.key) {
                    seen.push(r.key.clone());
                }
                for (v, (name, x)) in r.values.iter().enumerate() {
                    if !names.contains(name) {
                        names.push(name);
                    }
                    let per_build = samples
                        .entry((r.key.clone(), v))
                        .or_insert_with(|| vec![Vec::new(); groups.len()]);
                    if let Some(x) = x {
                        per_build[g].push(*x);
                    }
                }
            }
        }
        println!(
            "{}: {} runs{}",
            group.label,
            group.files.len(),
            heads.iter().map(|h| format!("\n  {h}")).collect::<String>()
        );
    }
    println!();
    let pairs: Vec<(usize, usize)> = [(0, 1), (2, 3)]
        .into_iter()
        .filter(|&(a, b)| a < groups.len() && b < groups.len())
        .collect();
    let mut head = String::from("cell\tfigure");
    for g in &groups {
        head += &format!("\t{} median [min-max]", g.label);
    }
    for &(a, b) in &pairs {
        head += &format!("\t{}/{}", groups[a].label, groups[b].label);
    }
    println!("{head}");
    let stat = |xs: &[f64]| {
        let mut v = xs.to_vec();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        median(&mut v).map(|m| (m, lo, hi))
    };
    for key in &seen {
        for (v, name) in names.iter().enumerate() {
            let Some(per_build) = samples.get(&(key.clone(), v)) else {
                continue;
            };
            if per_build.iter().all(Vec::is_empty) {
                continue;
            }
            let meds: Vec<Option<f64>> = per_build.iter().map(|s| stat(s).map(|m| m.0)).collect();
            let mut line = format!("{}\t{name}", key.join(" | "));
            for s in per_build {
                line += &match stat(s) {
                    Some((m, lo, hi)) => {
                        format!("\t{} [{}-{}]", fmt(Some(m)), fmt(Some(lo)), fmt(Some(hi)))
                    }
                    None => "\t-".into(),
                };
            }
            for &(a, b) in &pairs {
                let r = meds[a].zip(meds[b]).map(|(x, y)| x / y);
                line += &format!("\t{}", fmt(r));
            }
            println!("{line}");
        }
    }
    if kind == "orders" {
        readme_tables(&groups, &samples, &seen);
    } else {
        compare_readme(&samples, &seen);
    }
}

/// `compare`: the README's tables and ratios from the first build's
/// medians (`-` where a run did not measure a cell).
fn compare_readme(samples: &Samples, seen: &[Vec<String>]) {
    // The median of figure `v` of the first build in (section, case,
    // structure).
    let get = |section: &str, case: &str, structure: &str, v: usize| {
        let key = seen
            .iter()
            .find(|k| k[0] == section && k[1] == case && k[3] == structure)?;
        median(&mut samples.get(&(key.clone(), v))?[0].clone())
    };
    let ns = |section: &str, case: &str, who: &str| get(section, case, who, 0);
    let ratio = |section: &str, case: &str, who: &str| get(section, case, who, 1);
    // "lo-hi" of `f` over the growth orders (two decimals).
    let spread = |f: &dyn Fn(&str) -> Option<f64>| {
        let xs: Vec<f64> = ["ascending", "descending", "random"]
            .iter()
            .filter_map(|o| f(o))
            .collect();
        if xs.is_empty() {
            return "-".to_string();
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.2}-{hi:.2}")
    };
    const BT: &str = "BTreeMap (unsynchronized)";
    const ADDR: &str = "latchtree AddrIndex::lookup";
    const UB: &str = "latchtree LatchTree::upper_bound (held)";
    const STD: &str = "std RwLock<BTreeMap>";
    const SKIP: &str = "crossbeam SkipMap";
    const TREE: &str = "latchtree LatchTree";
    const INDEX_W: &str = "latchtree AddrIndex (range/module)";
    println!();
    println!("README tables from the first build's medians");
    println!();
    println!("When to pick it (ns; BTreeMap | RwLock | SkipMap | LatchTree | AddrIndex):");
    for (label, section, case, who) in [
        (
            "lookup, n = 84",
            "lookup",
            "n=84 ascending",
            [BT, STD, SKIP, UB, ADDR],
        ),
        (
            "lookup, n = 262 144",
            "lookup",
            "n=262144 ascending",
            [BT, STD, SKIP, UB, ADDR],
        ),
        (
            "insert + remove, n = 84",
            "write",
            "insert+remove n=84",
            [BT, STD, SKIP, TREE, INDEX_W],
        ),
    ] {
        let cells: Vec<String> = who.iter().map(|w| fmt(ns(section, case, w))).collect();
        println!("| {label} | {} |", cells.join(" | "));
    }
    println!();
    println!("The peers (x BTreeMap grown the same way, over the growth orders):");
    let look =
        |n: u32, who: &'static str| move |o: &str| ratio("lookup", &format!("n={n} {o}"), who);
    for (label, n, who) in [
        ("AddrIndex::lookup n=84", 84, ADDR),
        ("AddrIndex::lookup n=262144", 262_144, ADDR),
        ("AddrIndex::lookup n=1048576", 1 << 20, ADDR),
        ("LatchTree::upper_bound n=84", 84, UB),
        ("LatchTree::upper_bound n=262144", 262_144, UB),
        ("std RwLock n=84", 84, STD),
        ("std RwLock n=262144", 262_144, STD),
        ("SkipMap n=84", 84, SKIP),
        ("SkipMap n=262144", 262_144, SKIP),
    ] {
        println!("  {label}: {}", spread(&look(n, who)));
    }
    let kernel = "84 modules, 90% inside";
    let per_lookup = |who: &str| {
        ns("kernel", kernel, who)
            .zip(ns("kernel", kernel, ADDR))
            .map(|(a, b)| a / b)
    };
    for who in [
        "latchtree module_address (held guard)",
        "latchtree module_address (pin per call)",
        "latchtree HandlerSection::lookup (open section)",
    ] {
        println!("  kernel84 {who} x lookup: {}", fmt(per_lookup(who)));
    }
    println!();
    println!(
        "Readers (ns; alone | writer at 100 000/s | tight writer | its updates/s | 2 readers, no writer):"
    );
    for who in [
        "latchtree AddrIndex::lookup",
        "latchtree LatchTree (held guard)",
        "latchtree LatchTree (pin per call)",
        STD,
        "parking_lot RwLock<BTreeMap>",
        "ArcSwap<BTreeMap>",
        "left-right BTreeMap",
        SKIP,
    ] {
        let r = |case: &str| ns("readers", case, who);
        let ops = get("readers", "1 reader, tight writer", who, 2);
        println!(
            "| {who} | {} | {} | {} | {} | {} |",
            fmt(r("1 reader, no writer")),
            fmt(r("1 reader, writer 100000/s")),
            fmt(r("1 reader, tight writer")),
            ops.map_or("-".into(), |o| format!("{:.2} M", o / 1e6)),
            fmt(r("2 readers, no writer")),
        );
    }
    println!();
    println!("Writes (ns (x BTreeMap); insert+remove 84 | insert+remove 4096 | batch of 8, 4096):");
    for who in [
        BT,
        TREE,
        INDEX_W,
        STD,
        "left-right BTreeMap",
        SKIP,
        "ArcSwap<BTreeMap>",
    ] {
        let cells: Vec<String> = [
            "insert+remove n=84",
            "insert+remove n=4096",
            "batch8 insert n=4096",
        ]
        .iter()
        .map(|c| {
            format!(
                "{} ({})",
                fmt(ns("write", c, who)),
                fmt(ratio("write", c, who))
            )
        })
        .collect();
        println!("| {who} | {} |", cells.join(" | "));
    }
    println!();
    println!(
        "Pauses (p50 | p99 | largest, first growth (wall) | largest, steady (CPU)), ns; then one batch, rebalance, clear:"
    );
    for who in ["latchtree AddrIndex insert", "latchtree LatchTree insert"] {
        for order in ["ascending", "descending", "random"] {
            let p = |q: &str| get("pause", &format!("first growth {order} {q}"), who, 0);
            let steady = get("pause", &format!("grow {order} steady max"), who, 0);
            println!(
                "| {who}, {order} | {} | {} | {} | {} |",
                fmt(p("p50")),
                fmt(p("p99")),
                fmt(p("max")),
                fmt(steady)
            );
        }
        let batch = get("pause", "first growth bulk max", who, 0);
        println!("  {who}: one batch {}", fmt(batch));
    }
    for (case, who) in [
        ("rebalance", "latchtree AddrIndex rebalance"),
        ("clear", "latchtree LatchTree clear"),
    ] {
        let xs: Vec<String> = ["ascending", "descending", "random"]
            .iter()
            .map(|o| fmt(get("pause", &format!("{o} {case}"), who, 0)))
            .collect();
        println!("  {who}: {}", xs.join(", "));
    }
    println!();
    println!(
        "Memory (bytes per entry; BTreeMap | SkipMap | scc | LatchTree | left-right | AddrIndex):"
    );
    let mem = |who: &str| {
        seen.iter()
            .find(|k| k[0] == "memory" && k[1].starts_with("u64->u64") && k[3] == who)
            .and_then(|k| median(&mut samples.get(&(k.clone(), 0))?[0].clone()))
    };
    let cells: Vec<String> = [
        BT,
        SKIP,
        "scc TreeIndex",
        TREE,
        "left-right BTreeMap (2 copies)",
        INDEX_W,
    ]
    .iter()
    .map(|w| fmt(mem(w)))
    .collect();
    println!("| {} |", cells.join(" | "));
    for who in [
        "latchtree AddrIndex after 99% removed + synchronize",
        "latchtree AddrIndex after 99% removed + shrink_to_fit",
    ] {
        println!(
            "  {who}: {} x fresh",
            fmt(get("memory", "held / fresh index of the 1% left", who, 0))
        );
    }
    println!();
    println!(
        "Objects (ns (x _dl_find_object); LoadedObjects | _dl_find_object | bare AddrIndex | sorted Vec | dladdr):"
    );
    let cells: Vec<String> = [
        "latchtree LoadedObjects::lookup",
        "glibc _dl_find_object",
        "latchtree AddrIndex::lookup (same segments)",
        "sorted Vec (partition_point)",
        "glibc dladdr",
    ]
    .iter()
    .map(|w| {
        let c = "this process's objects";
        format!(
            "{} ({})",
            fmt(ns("objects", c, w)),
            fmt(ratio("objects", c, w))
        )
    })
    .collect();
    println!("| {} |", cells.join(" | "));
}

/// `orders`: one Markdown table per probe stream, rows (n, order).
fn readme_tables(groups: &[Group], samples: &Samples, seen: &[Vec<String>]) {
    let med = |key: &[&str], v: usize, g: usize| {
        let key: Vec<String> = key.iter().map(|s| s.to_string()).collect();
        samples
            .get(&(key, v))
            .and_then(|s| median(&mut s[g].clone()))
    };
    let mut cells: Vec<(String, String, String)> = Vec::new();
    for k in seen {
        let c = (k[0].clone(), k[1].clone(), k[2].clone());
        if !cells.contains(&c) {
            cells.push(c);
        }
    }
    let mut probes: Vec<String> = cells.iter().map(|c| c.2.clone()).collect();
    probes.dedup();
    probes.sort();
    probes.dedup();
    for p in probes {
        println!();
        println!("{p}: ns per lookup, medians; × the BTreeMap (or Vec) of the same run");
        let mut head = format!(
            "| n, grown | sorted `Vec` | `BTreeMap` | `lookup` ({}) | `lookup_many` |",
            groups[0].label
        );
        for g in groups {
            head += &format!(" {} (× `BTreeMap`) |", g.label);
        }
        println!("{head}");
        println!("{}", "|---".repeat(5 + groups.len()) + "|");
        for (n, order, _) in cells.iter().filter(|c| c.2 == p) {
            let at = |who: &str, v: usize, g: usize| med(&[n, order, &p, who], v, g);
            let mut line = format!(
                "| {n} {order} | {} | {} | {} ({} × `Vec`) | {} |",
                fmt(at("sorted Vec", 0, 0)),
                fmt(at("BTreeMap", 0, 0)),
                fmt(at("AddrIndex::lookup", 0, 0)),
                fmt(at("AddrIndex::lookup", 1, 0)),
                fmt(at("AddrIndex::lookup_many", 0, 0)),
            );
            for g in 0..groups.len() {
                line += &format!(" {} |", fmt(at("AddrIndex::lookup", 2, g)));
            }
            println!("{line}");
        }
    }
}
