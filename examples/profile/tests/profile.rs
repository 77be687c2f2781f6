//! The profiler example end to end: its output names the busy functions —
//! its own three (two threads), and the one in the library it `dlopen`ed
//! and `dlclose`d before symbolizing — each with a fair share of the
//! samples; the stacks unwound in the handler reach `main`, the handler
//! never allocates, and the flame graph names the functions.

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

use std::path::PathBuf;
use std::process::Command;

/// The share (percent) and the line of the top-functions row whose
/// function name ends with `function`.
fn row<'a>(profile: &'a str, function: &str) -> (f64, &'a str) {
    let line = profile
        .lines()
        .find(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|f| f.ends_with(function))
        })
        .unwrap_or_else(|| panic!("{function} is not in the profile:\n{profile}"));
    let share = line
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches('%');
    (share.parse().unwrap(), line)
}

#[test]
fn the_profile_names_the_busy_functions_including_the_closed_library() {
    let svg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("profile-test.svg");
    let _ = std::fs::remove_file(&svg);
    let output = Command::new(env!("CARGO_BIN_EXE_profile"))
        .arg(&svg)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let top = stdout
        .split("== Top functions")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("a top-functions section");

    let (own_first, _) = row(top, "::workload::spin_hash");
    let (own_last, _) = row(top, "::workload::count_primes");
    let (worker, _) = row(top, "::workload::collatz_steps");
    let (library, line) = row(top, "adler32_z");
    assert!(line.contains("libz.so"), "{line}");
    // Each phase of the main thread ran about as long as the others (the
    // same number of samples was asked for), and the worker as long as all
    // three: a fair share each, unless the machine starved a phase of CPU
    // past its deadline.
    for (name, share) in [
        ("spin_hash", own_first),
        ("count_primes", own_last),
        ("adler32_z", library),
        ("collatz_steps", worker),
    ] {
        assert!(share >= 8.0, "{name}: only {share}% of the samples\n{top}");
    }
    // The library was gone when the samples were symbolized, yet its
    // function is named (from its file, matched by build id).
    let unmapped = !stdout.contains("dlclose did not unmap it");
    if unmapped {
        assert!(line.ends_with("(unloaded)"), "{line}");
    }
    assert!(
        stdout.contains("dlclose: - #"),
        "the refresh did not report the unload:\n{stdout}"
    );

    // The handler allocated nothing, in every signal it handled.
    let counts = stdout
        .split("allocations inside the handler: ")
        .nth(1)
        .expect("the allocation count");
    assert!(counts.starts_with("0 (in "), "{counts}");
    assert!(!counts.starts_with("0 (in 0 "), "no signal was handled");

    // Full stacks: the library's samples carry their caller chain, through
    // the function that called into the library, up to `main`.
    let folded = std::fs::read_to_string(svg.with_extension("folded")).unwrap();
    let stacks: Vec<(Vec<&str>, usize)> = folded
        .lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap();
            (stack.split(';').collect(), count.parse().unwrap())
        })
        .collect();
    let in_library: Vec<_> = stacks
        .iter()
        .filter(|(frames, _)| frames.last() == Some(&"adler32_z"))
        .collect();
    // The thread's name comes first; then the C `main` and the program's.
    let reach_main = |frames: &[&str]| {
        frames[0] == "main"
            && frames[1..].contains(&"main")
            && frames.iter().any(|f| f.ends_with("profile::main"))
    };
    let total: usize = in_library.iter().map(|(_, n)| n).sum();
    let whole: usize = in_library
        .iter()
        .filter(|(frames, _)| {
            reach_main(frames) && frames[frames.len() - 2].ends_with("Zlib::burn")
        })
        .map(|(_, n)| n)
        .sum();
    assert!(total > 0, "no stack ends in the library:\n{folded}");
    assert!(
        whole * 10 >= total * 9,
        "only {whole} of {total} stacks in the library reach main through Zlib::burn:\n{folded}"
    );
    // Both threads were sampled, each from its own root.
    assert!(
        stacks.iter().any(|(f, _)| f[0] == "worker"
            && f.last().is_some_and(|l| l.ends_with("collatz_steps"))
            && f.iter().any(|x| x.contains("start_thread"))),
        "no full worker stack:\n{folded}"
    );

    // The flame graph is drawn and names the functions.
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg"), "not an SVG");
    for function in [
        "adler32_z",
        "spin_hash",
        "count_primes",
        "collatz_steps",
        "Zlib::burn",
    ] {
        assert!(
            drawn.contains(function),
            "the flame graph does not name {function}"
        );
    }
}
