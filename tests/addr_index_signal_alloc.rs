//! `AddrIndex::lookup` allocates nothing, frees nothing and pins no epoch:
//! a `SIGUSR2` handler calls it under a `#[global_allocator]` that aborts
//! the process when called from inside the handler (a thread-local "in
//! handler" flag set by the handler), while another thread writes batches,
//! in-place replacements and removes/inserts.
//!
//! Signals go to the writing thread (mid-write) and to an idle thread that
//! never touched crossbeam-epoch: a pin there would register the thread
//! with the collector, which allocates, so the allocator also proves that
//! `lookup` pins nothing. `a_handler_that_allocates_is_caught` checks that
//! the allocator does abort a handler that allocates (in a child process).

#![cfg(all(unix, not(miri)))]

use latchtree::{AddrIndex, ModuleId, ModuleMeta};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::thread;
use std::time::{Duration, Instant};

thread_local! {
    /// Set by the signal handler while it runs.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

/// The system allocator, except that it aborts when called from inside the
/// signal handler.
struct AbortInHandler;

fn refuse_in_handler() {
    if IN_HANDLER.try_with(Cell::get).unwrap_or(false) {
        let msg = b"allocator called from inside the signal handler\n";
        // SAFETY: writing a static buffer to stderr; `abort` never returns.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
}

// SAFETY: forwards to `System` after a check that allocates nothing.
unsafe impl GlobalAlloc for AbortInHandler {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        refuse_in_handler();
        // SAFETY: forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        refuse_in_handler();
        // SAFETY: forwarded.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refuse_in_handler();
        // SAFETY: forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        refuse_in_handler();
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: AbortInHandler = AbortInHandler;

static INDEX: AddrIndex<String> = AddrIndex::new();
const STABLE: std::ops::Range<u64> = 0x4000_0000..0x4000_1000;
const STABLE_TAG: u64 = 0xfeed;
const CHURN: std::ops::Range<u64> = 0x5000_0000..0x5000_0100;
/// The churned module's tags are `CHURN_TAG | generation`.
const CHURN_TAG: u64 = 0xc0de << 32;

static HANDLED: AtomicU64 = AtomicU64::new(0);
static WRONG: AtomicU64 = AtomicU64::new(0);
/// Set by the child process of `a_handler_that_allocates_is_caught`.
static ALLOCATE_IN_HANDLER: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr2(_: libc::c_int) {
    let _ = IN_HANDLER.try_with(|f| f.set(true));
    let n = HANDLED.fetch_add(1, Relaxed);
    let ok = INDEX
        .lookup(STABLE.start + n % 0x1000)
        .is_some_and(|h| h.range() == STABLE && h.tag() == STABLE_TAG)
        && INDEX.lookup(0x10).is_none()
        && INDEX
            .lookup(CHURN.start + n % 0x100)
            .is_none_or(|h| h.range() == CHURN && h.tag() & !0xffff_ffff == CHURN_TAG);
    if !ok {
        WRONG.fetch_add(1, Relaxed);
    }
    if ALLOCATE_IN_HANDLER.load(Relaxed) {
        // What the test must catch: `module_address` pins (and may allocate).
        let guard = INDEX.pin();
        std::hint::black_box(INDEX.module_address(STABLE.start, &guard));
        std::hint::black_box(Box::new(n));
    }
    let _ = IN_HANDLER.try_with(|f| f.set(false));
}

fn install_handler() {
    // SAFETY: an all-zero `sigaction` is a valid initial value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigusr2 as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid, writable signal set.
    assert_eq!(unsafe { libc::sigemptyset(&mut action.sa_mask) }, 0);
    // SAFETY: the handler is an `extern "C" fn(c_int)` that calls only
    // async-signal-safe code (unless the child mode asks otherwise).
    let rc = unsafe { libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "sigaction failed");
}

/// Churns the index for `time`: batches, in-place replacements, removes and
/// inserts. Returns the number of writes.
fn churn(time: Duration) -> u64 {
    let mut id: Option<ModuleId> = None;
    let mut writes = 0u64;
    let start = Instant::now();
    while start.elapsed() < time || (HANDLED.load(Relaxed) < 2000 && start.elapsed() < 3 * time) {
        writes += 1;
        let meta = ModuleMeta {
            base: None,
            tag: CHURN_TAG | (writes & 0xffff_ffff),
        };
        id = match (id, writes % 4) {
            (None, _) => Some(
                INDEX
                    .insert_module_with([CHURN], format!("{writes}"), meta)
                    .unwrap(),
            ),
            (Some(old), 0) => {
                drop(INDEX.remove(old).unwrap());
                None
            }
            (Some(old), 1) => {
                drop(INDEX.set_value(old, format!("{writes}"), meta.tag).unwrap());
                Some(old)
            }
            (Some(old), _) => Some(INDEX.write(|b| {
                drop(b.remove(old).unwrap());
                b.insert_module_with([CHURN], format!("{writes}"), meta)
                    .unwrap()
            })),
        };
    }
    writes
}

/// Runs the writer and an idle thread, signalling both; returns
/// `(writes, handled)`.
fn run(time: Duration) -> (u64, u64) {
    install_handler();
    let meta = ModuleMeta {
        base: None,
        tag: STABLE_TAG,
    };
    INDEX
        .insert_module_with([STABLE], "stable".into(), meta)
        .unwrap();
    let stop = AtomicBool::new(false);
    let ids = [AtomicU64::new(0), AtomicU64::new(0)];
    // SAFETY: `pthread_self` is always safe to call.
    let me = || unsafe { libc::pthread_self() } as u64;
    thread::scope(|s| {
        let writer = s.spawn(|| {
            ids[0].store(me(), Release);
            churn(time)
        });
        // Never pins, never allocates in its loop.
        let idle = s.spawn(|| {
            ids[1].store(me(), Release);
            while !stop.load(Acquire) {
                std::hint::spin_loop();
            }
        });
        while ids.iter().any(|t| t.load(Acquire) == 0) {
            thread::yield_now();
        }
        let targets = ids.each_ref().map(|t| t.load(Acquire) as libc::pthread_t);
        let mut k = 0usize;
        while !writer.is_finished() {
            // Both threads are alive until `stop` / the writer returns; the handler is installed. A
            // signal to a thread that just exited would be ESRCH, which is only counted.
            // SAFETY: so the signal targets a live thread with a handler.
            let _ = unsafe { libc::pthread_kill(targets[k % 2], libc::SIGUSR2) };
            k += 1;
            thread::sleep(Duration::from_micros(20));
        }
        stop.store(true, Release);
        idle.join().unwrap();
        (writer.join().unwrap(), HANDLED.load(Relaxed))
    })
}

#[test]
fn lookup_in_a_signal_handler_allocates_frees_and_pins_nothing() {
    let (writes, handled) = run(Duration::from_millis(800));
    println!(
        "{writes} writes, {handled} signals handled, {} wrong",
        WRONG.load(Relaxed)
    );
    assert!(handled >= 1000, "only {handled} signals handled");
    assert_eq!(WRONG.load(Relaxed), 0, "wrong answers in the handler");
}

/// The child half of `a_handler_that_allocates_is_caught`.
#[test]
#[ignore = "run by a_handler_that_allocates_is_caught in a child process"]
fn child_handler_allocates() {
    if std::env::var_os("LATCHTREE_ALLOC_CHILD").is_none() {
        return;
    }
    ALLOCATE_IN_HANDLER.store(true, Relaxed);
    run(Duration::from_millis(200));
}

/// The allocator has teeth: a handler that pins and allocates aborts.
#[test]
fn a_handler_that_allocates_is_caught() {
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_handler_allocates",
            "--ignored",
            "--nocapture",
        ])
        .env("LATCHTREE_ALLOC_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{:?}: {stderr}",
        out.status
    );
    assert!(
        stderr.contains("allocator called from inside the signal handler"),
        "{stderr}"
    );
}
