//! The profiler example end to end: its output names the busy functions —
//! its own two, and the one in the library it `dlopen`ed and `dlclose`d
//! before symbolizing — each with a fair share of the samples.

#![cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]

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
    let output = Command::new(env!("CARGO_BIN_EXE_profile"))
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
    let (library, line) = row(top, "adler32_z");
    assert!(line.contains("libz.so"), "{line}");
    // Each phase ran about as long as the others (the same number of
    // samples was asked for): a fair share each, unless the machine starved
    // a phase of CPU past its deadline.
    for (name, share) in [
        ("spin_hash", own_first),
        ("count_primes", own_last),
        ("adler32_z", library),
    ] {
        assert!(share >= 10.0, "{name}: only {share}% of the samples\n{top}");
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
}
