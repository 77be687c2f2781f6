//! A real signal handler calling the async-signal-safe `AddrIndex::lookup`
//! while the thread it interrupted is in the middle of a write.
//!
//! One thread registers, removes, replaces in place (`set_value`) and
//! re-registers in batches (remove + insert, two inserts) modules with
//! per-module base and tag and per-range flags on a `static` index in a
//! tight loop; another sends it `SIGUSR1` as fast as it handles them. The
//! handler looks up an address of a module that is never removed (must hit,
//! with the right id, range, base, tag and flags), addresses never
//! registered (must miss) and every range of the churned slots it picks and
//! of those being written (each module must be seen whole or not at all,
//! every hit with the base, flags and a tag of that module, old or new, never
//! another's), and records the results in static atomics. It must
//! always answer correctly and never wait: it reads the copy the interrupted
//! writer is not touching, so the range tree's latch never has to retry.

#![cfg(all(unix, not(miri)))]

use latchtree::{AddrIndex, ModuleId, ModuleMeta, Segment};
use std::ops::Range;
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
    compiler_fence,
};
use std::thread;
use std::time::{Duration, Instant};

/// Tiny layout thresholds: the interrupted writes migrate the tree too.
static INDEX: AddrIndex<String> = AddrIndex::with_policy(latchtree::LayoutPolicy::small(2));

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
/// The stable module's base and tag.
const STABLE_BASE: u64 = 0x3fff_0000;
const STABLE_TAG: u64 = 0x57AB_1E00_0000_0000;
static IN_WRITE: AtomicBool = AtomicBool::new(false);
static WRITER_DONE: AtomicBool = AtomicBool::new(false);
static SENDER_DONE: AtomicBool = AtomicBool::new(false);

/// Handler runs.
static HANDLED: AtomicU64 = AtomicU64::new(0);
/// Handler runs that interrupted a write (`insert`, `insert_module`,
/// `remove`, `set_value` or a batch on the index).
static MID_WRITE: AtomicU64 = AtomicU64::new(0);
/// Correct answers about the stable module and never-registered addresses.
static RIGHT: AtomicU64 = AtomicU64::new(0);
/// Wrong answers of any kind.
static WRONG: AtomicU64 = AtomicU64::new(0);
/// Lookups in the churned area that found a whole module.
static CHURN_HITS: AtomicU64 = AtomicU64::new(0);
/// Per slot: the generation of the module registered there (0: none yet),
/// and the generation a write in progress is installing. A hit's tag must
/// carry one of the two.
static SLOT_GEN: [AtomicU64; SLOTS as usize] = [const { AtomicU64::new(0) }; SLOTS as usize];
static SLOT_NEXT: [AtomicU64; SLOTS as usize] = [const { AtomicU64::new(0) }; SLOTS as usize];
/// The slots a write in progress touches (`u64::MAX`: none).
static WRITING_SLOTS: [AtomicU64; 2] = [const { AtomicU64::new(u64::MAX) }; 2];

/// A churned module's tag: its slot, which of the slot's ranges it owns
/// (bit `b` for `slot_ranges(j)[b]`) and its generation. A handler can
/// check a hit against it without any other state.
fn slot_tag(j: u64, mask: u64, generation: u64) -> u64 {
    (j << 40) | (mask << 32) | generation
}

/// A churned module's base: below its slot's ranges, so that
/// `module_offset` differs from the per-range `offset`.
fn slot_base(j: u64) -> u64 {
    slot_ranges(j)[0].start - 0x100
}

fn tally(ok: bool) {
    if ok {
        RIGHT.fetch_add(1, Relaxed);
    } else {
        WRONG.fetch_add(1, Relaxed);
    }
}

/// The `SIGUSR1` handler: only `AddrIndex::lookup`, `lookup_many` and
/// atomics, which are async-signal-safe.
extern "C" fn on_sigusr1(_signal: libc::c_int) {
    let n = HANDLED.fetch_add(1, Relaxed);
    compiler_fence(SeqCst);
    if IN_WRITE.load(Relaxed) {
        MID_WRITE.fetch_add(1, Relaxed);
    }
    let stable_id = STABLE_ID.load(Relaxed);
    for (b, r) in STABLE.iter().enumerate() {
        let addr = r.start + n % (r.end - r.start);
        tally(INDEX.lookup(addr).is_some_and(|hit| {
            hit.id().get() == stable_id
                && hit.range() == *r
                && hit.offset(addr) == addr - r.start
                && (hit.base(), hit.tag(), hit.flags()) == (STABLE_BASE, STABLE_TAG, b as u32 + 1)
                && hit.module_offset(addr) == addr - STABLE_BASE
        }));
    }
    tally(INDEX.lookup(NEVER[(n % 3) as usize]).is_none());
    // A churned slot, and the slots being written if any: the module there is
    // visible whole (every range it owns, each with its id, base, tag and
    // flags) or not at all, never half-registered, half-removed or
    // half-replaced, though the write may be halfway.
    check_slot(n % SLOTS, n, stable_id);
    for w in &WRITING_SLOTS {
        let writing = w.load(Relaxed);
        if writing < SLOTS {
            check_slot(writing, n, stable_id);
        }
    }
}

/// Checks that slot `j`'s module is visible whole or not at all, with the
/// base, tag and flags it was registered with.
fn check_slot(j: u64, n: u64, stable_id: u64) {
    let ranges = slot_ranges(j);
    let addrs = ranges.clone().map(|r| r.start + n % (r.end - r.start));
    // Every other run asks `lookup_many` (all three from one version), the
    // others one `lookup` per range: both must see the module whole or not.
    let found = if n.is_multiple_of(2) {
        INDEX.lookup_many(addrs)
    } else {
        addrs.map(|a| INDEX.lookup(a))
    };
    let hits: [_; 3] = core::array::from_fn(|b| found[b].map(|h| (h, addrs[b], ranges[b].clone())));
    let Some(&(first, ..)) = hits.iter().flatten().next() else {
        return;
    };
    let tag = first.tag();
    let (slot, mask, generation) = (tag >> 40, (tag >> 32) & 0xff, tag & 0xffff_ffff);
    let known = [&SLOT_GEN[j as usize], &SLOT_NEXT[j as usize]].map(|g| g.load(Relaxed));
    let whole = (0..3).all(|b| match hits[b] {
        Some((h, addr, ref r)) => {
            mask & (1 << b) != 0
                && h.id() == first.id()
                && h.range() == *r
                && h.tag() == tag
                && h.base() == slot_base(j)
                && h.module_offset(addr) == addr - slot_base(j)
                && h.flags() == b as u32 + 1
        }
        None => mask & (1 << b) == 0,
    });
    if whole && slot == j && known.contains(&generation) && first.id().get() > stable_id {
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

/// The slot's ranges in `mask`, as segments with flags `b + 1`.
fn segments(j: u64, mask: u64) -> Vec<Segment> {
    let all = slot_ranges(j);
    (0..3)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| Segment {
            range: all[b].clone(),
            flags: b as u32 + 1,
        })
        .collect()
}

/// The interrupted thread: registers, removes, replaces in place and
/// re-registers (in batches) modules until the time or operation budget
/// runs out. Returns the number of writes.
fn writer(time: Duration, max_writes: u64) -> u64 {
    // Per slot: the live module and the ranges it owns.
    let mut live: Vec<Option<(ModuleId, u64)>> = vec![None; SLOTS as usize];
    let mut generation = 0;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let start = Instant::now();
    let mut writes = 0;
    // Announces a write of slot `j` installing `next`; returns its tag.
    let announce = |j: u64, k: usize, next: u64| {
        SLOT_NEXT[j as usize].store(next, Relaxed);
        WRITING_SLOTS[k].store(j, Relaxed);
        compiler_fence(SeqCst);
    };
    let settle = |j: u64, k: usize, now: u64| {
        compiler_fence(SeqCst);
        SLOT_GEN[j as usize].store(now, Relaxed);
        WRITING_SLOTS[k].store(u64::MAX, Relaxed);
    };
    // Run for `time`, longer (up to `3 * time`) until enough signals were
    // handled, on a loaded machine.
    let more =
        |elapsed: Duration| elapsed < time || (HANDLED.load(Relaxed) < 5000 && elapsed < 3 * time);
    while writes < max_writes && (writes % 64 != 0 || more(start.elapsed())) {
        let r = rand();
        let j = r % SLOTS;
        let mask = (r >> 8) % 7 + 1; // a non-empty subset
        generation += 1;
        let meta = ModuleMeta {
            base: Some(slot_base(j)),
            tag: slot_tag(j, mask, generation),
        };
        let name = format!("slot {j} gen {generation}");
        announce(j, 0, generation);
        match (live[j as usize], (r >> 16) % 3) {
            (Some((id, _)), 0) => {
                let removed = in_write(|| INDEX.remove(id)).expect("remove of a live module");
                assert_eq!((removed.id(), removed.base()), (id, slot_base(j)));
                live[j as usize] = None;
            }
            (Some((id, own)), 1) => {
                // In place: same id and ranges, new value and tag (whose mask
                // stays the module's own).
                let tag = slot_tag(j, own, generation);
                let old = in_write(|| INDEX.set_value(id, name, tag))
                    .expect("set_value of a live module");
                assert!(old.value().starts_with(&format!("slot {j} ")));
            }
            (Some((id, _)), _) => {
                // Replace by a new module with other ranges, in one batch.
                let new = in_write(|| {
                    INDEX.write(|b| {
                        b.remove(id).expect("batch remove of a live module");
                        b.insert_module_with(segments(j, mask), name, meta)
                    })
                });
                live[j as usize] = Some((new.expect("batch reinsert into the freed slot"), mask));
            }
            (None, pick) => {
                // Maybe a second free slot, registered in the same batch.
                let k = (j + 1 + (r >> 24) % (SLOTS - 1)) % SLOTS;
                if pick == 0 && live[k as usize].is_none() {
                    generation += 1;
                    let meta_k = ModuleMeta {
                        base: Some(slot_base(k)),
                        tag: slot_tag(k, 7, generation),
                    };
                    announce(k, 1, generation);
                    let (a, b) = in_write(|| {
                        INDEX.write(|batch| {
                            let a = batch.insert_module_with(segments(j, mask), name, meta);
                            let b = batch.insert_module_with(
                                segments(k, 7),
                                format!("slot {k} pair"),
                                meta_k,
                            );
                            (a.expect("free slot"), b.expect("free slot"))
                        })
                    });
                    live[j as usize] = Some((a, mask));
                    live[k as usize] = Some((b, 7));
                    settle(k, 1, generation);
                    writes += 1;
                    // Slot `j` holds the generation before `k`'s.
                    settle(j, 0, generation - 1);
                    continue;
                }
                let id = in_write(|| INDEX.insert_module_with(segments(j, mask), name, meta));
                live[j as usize] = Some((id.expect("insert into a free slot failed"), mask));
            }
        }
        settle(j, 0, generation);
        writes += 1;
    }
    for (id, _) in live.into_iter().flatten() {
        assert!(in_write(|| INDEX.remove(id)).is_some());
        writes += 1;
    }
    writes
}

#[test]
fn signal_handler_lookups_are_right_while_interrupted_writer_is_mid_write() {
    let stable_segments = STABLE.iter().enumerate().map(|(b, r)| Segment {
        range: r.clone(),
        flags: b as u32 + 1,
    });
    let meta = ModuleMeta {
        base: Some(STABLE_BASE),
        tag: STABLE_TAG,
    };
    let stable = INDEX
        .insert_module_with(stable_segments, String::from("stable"), meta)
        .unwrap();
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
    let guard = INDEX.pin();
    let left: Vec<_> = INDEX
        .snapshot(&guard)
        .iter()
        .map(|h| (h.range(), h.id(), h.tag()))
        .collect();
    assert_eq!(left, STABLE.map(|r| (r, stable, STABLE_TAG)).to_vec());
    assert_eq!(INDEX.module_count(), 1);
}
