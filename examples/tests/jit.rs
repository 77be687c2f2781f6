//! The JIT trap registry example (issue 18): thousands of traps, every one
//! attributed to its module's trap table read in place by the handler, 0
//! wrong, and every trap table freed exactly once by the index; every
//! logged trap named later, also after its module was unregistered, from
//! what the index kept (issue 42), with at most the bound kept.

#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

/// The number after `label` on its line of `out`.
fn figure(out: &str, label: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in {out}"));
    line[label.len()..]
        .trim()
        .split([' ', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_trap_is_attributed_and_every_table_freed_once() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_jit"))
        .arg("1.0")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{stdout}");
    assert!(
        figure(&stdout, "traps attributed:") >= 3000,
        "too few traps:\n{stdout}"
    );
    assert_eq!(figure(&stdout, "wrong answers:"), 0);
    assert!(figure(&stdout, "traps taken inside an open write batch:") > 0);
    assert!(figure(&stdout, "tier-ups:") > 0);
    assert_eq!(figure(&stdout, "logged traps left unnamed:"), 0);
    let named = stdout
        .lines()
        .find(|l| l.starts_with("logged traps named later:"))
        .unwrap();
    let n: Vec<u64> = named
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(
        n[2] > 0,
        "no trap named after its module's removal: {named}"
    );
    assert!(figure(&stdout, "removed modules kept at the end:") <= 64);
    let tables = stdout
        .lines()
        .find(|l| l.starts_with("trap tables created:"))
        .unwrap();
    let n: Vec<u64> = tables
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(
        (n[1], n[2]),
        (n[0], n[0]),
        "every table freed exactly once: {tables}"
    );
}
