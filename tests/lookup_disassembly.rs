//! `AddrIndex::lookup` stays what a signal handler may call (issue 18:
//! handler sections must not change it): its machine code, inlined into a
//! probe function of this test binary, makes no call (no lock, no
//! allocation, no epoch pin), touches no thread-local (`%fs`) and makes no
//! system call; and it stores nothing shared (but the retry statistic
//! when it retries). Release builds only (debug builds
//! call every `#[inline]` helper). Disassembles with `llvm-objdump` (rustup's
//! `llvm-tools`, which `.ci/run` installs) or `objdump`.

#![cfg(all(
    not(debug_assertions),
    target_arch = "x86_64",
    target_os = "linux",
    not(miri)
))]

use latchtree::{AddrIndex, RawHit};
use std::path::PathBuf;
use std::process::Command;

static INDEX: AddrIndex<()> = AddrIndex::new();

/// The probe: one `lookup`, inlined here.
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn latchtree_probe_lookup(addr: u64, out: &mut Option<RawHit>) {
    *out = INDEX.lookup(addr);
}

/// A disassembler: rustup's `llvm-objdump`, else `objdump` on the path.
fn objdump() -> Option<PathBuf> {
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or("rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout).ok()?.trim());
    let llvm = sysroot.join("lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-objdump");
    if llvm.exists() {
        return Some(llvm);
    }
    Command::new("objdump").arg("--version").output().ok()?;
    Some("objdump".into())
}

#[test]
fn lookup_makes_no_call_touches_no_thread_local_and_makes_no_syscall() {
    INDEX.insert(0x1000..0x2000, ()).unwrap();
    let mut out = None;
    latchtree_probe_lookup(0x1800, &mut out);
    assert!(out.is_some());
    let Some(tool) = objdump() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have a disassembler"
        );
        eprintln!("no llvm-objdump or objdump: skipped");
        return;
    };
    let exe = std::env::current_exe().unwrap();
    // GNU objdump and llvm-objdump spell the symbol filter differently.
    let filter = if tool.ends_with("llvm-objdump") {
        "--disassemble-symbols=latchtree_probe_lookup"
    } else {
        "--disassemble=latchtree_probe_lookup"
    };
    let listing = Command::new(&tool)
        .args(["-d", "--no-show-raw-insn", filter])
        .arg(&exe)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&listing.stdout);
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("<latchtree_probe_lookup>:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        body.len() > 10,
        "no disassembly of the probe ({tool:?}):\n{text}"
    );
    let bad: Vec<&&str> = body
        .iter()
        .filter(|l| {
            l.contains("call") || l.contains("%fs") || l.contains("syscall") || l.contains("fs:")
        })
        .collect();
    eprintln!("lookup: {} instructions", body.len());
    assert!(
        bad.is_empty(),
        "lookup calls, touches TLS or makes a syscall: {bad:#?}"
    );
    // Stores: only to the caller's `out` (through `%rsi`, its argument) or
    // the stack frame. (The one read-modify-write is the retry statistic,
    // on the retry path only, as before sections existed.)
    let stores: Vec<&&str> = body
        .iter()
        .filter(|l| l.contains("mov") && l.rsplit(',').next().is_some_and(|dst| dst.contains('(')))
        .filter(|l| !(l.contains("(%rsi") || l.contains("(%rsp") || l.contains("(%rbp")))
        .collect();
    assert!(
        stores.is_empty(),
        "lookup stores to shared memory: {stores:#?}"
    );
}
