//! A real signal handler calling the async-signal-safe `AddrIndex::lookup`
//! while the thread it interrupted is in the middle of a write.
//!
//! One thread registers and removes modules (single- and multi-range) on a
//! `static` index in a tight loop; another sends it `SIGUSR1` as fast as it
//! handles them. The handler looks up an address of a module that is never
//! removed (must hit, with the right id and range), addresses never
//! registered (must miss) and every range of one churned slot (its module
//! must be seen whole or not at all), and records the results in static
//! atomics. It must
//! always answer correctly and never wait: it reads the copy the interrupted
//! writer is not touching, so the range tree's latch never has to retry.

#![cfg(all(unix, not(miri)))]

use latchtree::AddrIndex;
use std::ops::Range;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{
    AtomicBool, AtomicU8, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
    compiler_fence,
};
use std::thread;
use std::time::{Duration, Instant};

static INDEX: AddrIndex<String> = AddrIndex::new();

/// The stable module: two ranges, registered before the first signal and
/// never removed.
const STABLE: [Range<u64>; 2] = [0x4000_0000..0x4000_1000, 0x4000_8000..0x4000_9000];
/// Never registered: below everything, between the stable ranges, above
/// everything.
const NEVER: [u64; 3] = [0x10, 0x4000_4000, 0xFFFF_0000_0000];
/// Churned modules live in slots; slot `j` may own any non-empty subset of
/// `slot_ranges(j)`, and owns the same ranges whenever it is registered.
const SLOTS: u64 = 48;

fn slot_ranges(j: u64) -> [Range<u64>; 3] {
    // Slots interleave below, between and above the stable ranges, so that
    // rotations move the stable nodes around.
    let base = match j % 3 {
        0 => 0x3000_0000 + j * 0x1_0000,
        1 => 0x4000_2000 + (j / 3) * 0x80,
        _ => 0x5000_0000 + j * 0x1_0000,
    };
    let step = if j % 3 == 1 { 0x20 } else { 0x4000 };
    [
        base..base + 0x10,
        base + step..base + step + 0x10,
        base + 2 * step..base + 2 * step + 0x8,
    ]
}

static STABLE_ID: AtomicU64 = AtomicU64::new(0);
static IN_WRITE: AtomicBool = AtomicBool::new(false);
static WRITER_DONE: AtomicBool = AtomicBool::new(false);
static SENDER_DONE: AtomicBool = AtomicBool::new(false);

/// Handler runs.
static HANDLED: AtomicU64 = AtomicU64::new(0);
/// Handler runs that interrupted a write (`insert`, `insert_module` or
/// `remove` on the index).
static MID_WRITE: AtomicU64 = AtomicU64::new(0);
/// Correct answers about the stable module and never-registered addresses.
static RIGHT: AtomicU64 = AtomicU64::new(0);
/// Wrong answers of any kind.
static WRONG: AtomicU64 = AtomicU64::new(0);
/// Lookups in the churned area that found a whole module.
static CHURN_HITS: AtomicU64 = AtomicU64::new(0);
/// Per slot: which of its ranges (bit `b` for `slot_ranges(j)[b]`) the
/// module that is, was or is about to be registered there owns. Set before
/// the insert starts and cleared after the remove returns, so whenever any
/// range of the slot is indexed it describes that module.
static SLOT_MASK: [AtomicU8; SLOTS as usize] = [const { AtomicU8::new(0) }; SLOTS as usize];
/// The slot whose module is being registered or removed (`u64::MAX`: none).
static WRITING_SLOT: AtomicU64 = AtomicU64::new(u64::MAX);

fn tally(ok: bool) {
    if ok {
        RIGHT.fetch_add(1, Relaxed);
    } else {
        WRONG.fetch_add(1, Relaxed);
    }
}

/// The `SIGUSR1` handler: only `AddrIndex::lookup` and atomics, which are
/// async-signal-safe.
extern "C" fn on_sigusr1(_signal: libc::c_int) {
    let n = HANDLED.fetch_add(1, Relaxed);
    compiler_fence(SeqCst);
    if IN_WRITE.load(Relaxed) {
        MID_WRITE.fetch_add(1, Relaxed);
    }
    let stable_id = STABLE_ID.load(Relaxed);
    for r in &STABLE {
        let addr = r.start + n % (r.end - r.start);
        tally(INDEX.lookup(addr).is_some_and(|hit| {
            hit.id().get() == stable_id && hit.range() == *r && hit.offset(addr) == addr - r.start
        }));
    }
    tally(INDEX.lookup(NEVER[(n % 3) as usize]).is_none());
    // A churned slot, and the slot being written if any: the module there is
    // visible whole (every range it owns, each with its id) or not at all,
    // never half-registered or half-removed, though the write may be halfway.
    check_slot(n % SLOTS, n, stable_id);
    let writing = WRITING_SLOT.load(Relaxed);
    if writing < SLOTS {
        check_slot(writing, n, stable_id);
    }
}

/// Checks that slot `j`'s module is visible whole or not at all.
fn check_slot(j: u64, n: u64, stable_id: u64) {
    let mask = SLOT_MASK[j as usize].load(Relaxed);
    let hits = slot_ranges(j).map(|r| {
        INDEX
            .lookup(r.start + n % (r.end - r.start))
            .map(|h| (h.id(), h.range() == r))
    });
    if hits.iter().all(Option::is_none) {
        return;
    }
    let first = hits.iter().flatten().next().map(|&(id, _)| id);
    let whole = (0..3).all(|b| match hits[b] {
        Some((id, range_ok)) => mask & (1 << b) != 0 && Some(id) == first && range_ok,
        None => mask & (1 << b) == 0,
    });
    if whole && first.is_some_and(|id| id.get() > stable_id) {
        CHURN_HITS.fetch_add(1, Relaxed);
    } else {
        WRONG.fetch_add(1, Relaxed);
    }
}

fn install_handler() {
    // SAFETY: an all-zero `sigaction` is a valid initial value.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: `action.sa_mask` is a valid, writable signal set.
    assert_eq!(unsafe { libc::sigemptyset(&mut action.sa_mask) }, 0);
    // SAFETY: the handler is an `extern "C" fn(c_int)` that only calls
    // async-signal-safe code; `action` is fully initialized.
    let rc = unsafe { libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "sigaction failed");
}

/// Runs one write with `IN_WRITE` set around it.
fn in_write<R>(f: impl FnOnce() -> R) -> R {
    IN_WRITE.store(true, Relaxed);
    compiler_fence(SeqCst);
    let r = f();
    compiler_fence(SeqCst);
    IN_WRITE.store(false, Relaxed);
    r
}

/// The interrupted thread: registers and removes modules until the time or
/// operation budget runs out. Returns the number of writes.
fn writer(time: Duration, max_writes: u64) -> u64 {
    let mut live: Vec<Option<latchtree::ModuleId>> = vec![None; SLOTS as usize];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let start = Instant::now();
    let mut writes = 0;
    // Run for `time`, longer (up to `3 * time`) until enough signals were
    // handled, on a loaded machine.
    let more =
        |elapsed: Duration| elapsed < time || (HANDLED.load(Relaxed) < 5000 && elapsed < 3 * time);
    while writes < max_writes && (writes % 64 != 0 || more(start.elapsed())) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = x % SLOTS;
        WRITING_SLOT.store(j, Relaxed);
        match live[j as usize].take() {
            Some(id) => {
                assert!(
                    in_write(|| INDEX.remove(id)),
                    "remove of a live module failed"
                );
                compiler_fence(SeqCst);
                SLOT_MASK[j as usize].store(0, Relaxed);
            }
            None => {
                let all = slot_ranges(j);
                let mask = ((x >> 8) % 7 + 1) as usize; // a non-empty subset
                SLOT_MASK[j as usize].store(mask as u8, Relaxed);
                compiler_fence(SeqCst);
                let ranges: Vec<Range<u64>> = (0..3)
                    .filter(|b| mask & (1 << b) != 0)
                    .map(|b| all[b].clone())
                    .collect();
                let name = format!("slot {j}");
                let id = if ranges.len() == 1 {
                    in_write(|| INDEX.insert(ranges[0].clone(), name))
                } else {
                    in_write(|| INDEX.insert_module(ranges, name))
                };
                live[j as usize] = Some(id.expect("insert into a free slot failed"));
            }
        }
        writes += 1;
    }
    WRITING_SLOT.store(u64::MAX, Relaxed);
    for (j, id) in live.into_iter().enumerate() {
        if let Some(id) = id {
            assert!(in_write(|| INDEX.remove(id)));
            compiler_fence(SeqCst);
            SLOT_MASK[j].store(0, Relaxed);
            writes += 1;
        }
    }
    writes
}

#[test]
fn signal_handler_lookups_are_right_while_interrupted_writer_is_mid_write() {
    let stable = INDEX.insert_module(STABLE, String::from("stable")).unwrap();
    STABLE_ID.store(stable.get(), Relaxed);
    install_handler();

    let writer_thread = thread::spawn(|| {
        let writes = writer(Duration::from_millis(1500), 10_000_000);
        WRITER_DONE.store(true, Release);
        // Stay alive (a valid `pthread_kill` target) until the sender stops.
        while !SENDER_DONE.load(Acquire) {
            thread::yield_now();
        }
        writes
    });
    let target = writer_thread.as_pthread_t();
    let sender = thread::spawn(move || {
        let mut sent = 0u64;
        while !WRITER_DONE.load(Acquire) {
            let before = HANDLED.load(Relaxed);
            // SAFETY: `target` is a live thread: it does not return before
            // `SENDER_DONE` is set, and the handler is installed.
            let rc = unsafe { libc::pthread_kill(target, libc::SIGUSR1) };
            assert_eq!(rc, 0, "pthread_kill failed");
            sent += 1;
            // A signal is delivered when the writer next returns to user
            // space. If it runs on another CPU that is at once; if it waits
            // for ours (a loaded machine), spinning here would only delay it:
            // give the CPU up.
            let t = Instant::now();
            while HANDLED.load(Relaxed) == before && t.elapsed() < Duration::from_micros(20) {
                std::hint::spin_loop();
            }
            if HANDLED.load(Relaxed) == before {
                thread::sleep(Duration::from_micros(50));
            }
        }
        SENDER_DONE.store(true, Release);
        sent
    });
    // A handler that waited for the writer it interrupted would never
    // return: fail instead of hanging.
    let start = Instant::now();
    while !SENDER_DONE.load(Acquire) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the writer never finished: a signal handler is stuck (waiting for the writer it interrupted?)"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let sent = sender.join().expect("sender panicked");
    let writes = writer_thread.join().expect("writer panicked");

    let handled = HANDLED.load(Relaxed);
    let mid_write = MID_WRITE.load(Relaxed);
    let right = RIGHT.load(Relaxed);
    let wrong = WRONG.load(Relaxed);
    let retries = INDEX.stats().read_retries;
    println!(
        "{writes} writes, {sent} signals sent, {handled} handled, {mid_write} mid-write ({:.1}%), \
         {right} right answers, {} churn hits, {wrong} wrong, {retries} read retries",
        100.0 * mid_write as f64 / handled.max(1) as f64,
        CHURN_HITS.load(Relaxed),
    );
    assert_eq!(wrong, 0, "the signal handler got wrong answers");
    assert_eq!(
        right,
        3 * handled,
        "every handler run answers three exact questions"
    );
    assert!(handled >= 1000, "the handler ran only {handled} times");
    assert!(
        mid_write >= 100 && mid_write * 10 >= handled,
        "only {mid_write} of {handled} signals landed mid-write"
    );
    // The only reader of the range tree is the handler, which runs while the
    // writer is stopped: it must have answered from the stable copy at once.
    assert_eq!(
        retries, 0,
        "a handler had to retry: it waited for the writer it interrupted"
    );
    INDEX.check_invariants().expect("invariants after the run");
    assert_eq!(INDEX.snapshot(), STABLE.map(|r| (r, stable)).to_vec());
    assert_eq!(INDEX.module_count(), 1);
}
