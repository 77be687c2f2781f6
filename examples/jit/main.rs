//! A JIT trap registry on `latchtree::AddrIndex` (x86-64 Linux), the way a
//! WebAssembly runtime keeps one: executable pages of generated code whose
//! instructions trap on purpose (`ud2`, an integer division by zero, a load
//! from a guard page), and SIGILL/SIGFPE/SIGSEGV handlers that find the
//! faulting module with a handler section, read its trap table **in
//! place**, and resume at the table's landing pad. Meanwhile another thread
//! tiers modules up (`set_value`: a new table, the old one freed by the
//! index once no handler can see it), unregisters and re-registers them,
//! and takes traps of its own inside an open write batch.
//!
//! No side table, no use counts, no hand-rolled grace period: the trap
//! tables are the modules' values, and the index frees them.
//!
//! Every trap is also logged by the handler, as plain numbers (module id,
//! offset, signal), into a preallocated lock-free ring, and a normal thread
//! names each logged trap later — often after its module was unregistered:
//! the index keeps the last removed modules for that
//! ([`KeepRemoved`](latchtree::KeepRemoved)), so the registry keeps no map
//! of its own.
//!
//! `cargo run --release -p latchtree-examples --bin jit [-- SECONDS]`

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod jit {
    use latchtree::{AddrIndex, KeepRemoved, ModuleId, ModuleMeta, Segment};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::atomic::{Ordering::Acquire, Ordering::Release, fence};
    use std::time::{Duration, Instant};

    /// One module's trap table: where its code traps, with which signal,
    /// and where to resume, and its name. Read in place by the signal
    /// handlers.
    struct TrapTable {
        name: String,
        code: u64,
        traps: [(u64, i32, u64); 3],
        serial: u64,
    }

    static CREATED: AtomicU64 = AtomicU64::new(0);
    static FREED: Mutex<Vec<u64>> = Mutex::new(Vec::new());

    impl TrapTable {
        fn new(name: String, code: u64) -> TrapTable {
            let serial = CREATED.fetch_add(1, Relaxed);
            let (ill, fpe, segv) = (libc::SIGILL, libc::SIGFPE, libc::SIGSEGV);
            TrapTable {
                name,
                code,
                traps: [(0, ill, 2), (25, fpe, 27), (48, segv, 51)],
                serial,
            }
        }
    }

    impl Drop for TrapTable {
        fn drop(&mut self) {
            FREED.lock().unwrap().push(self.serial); // never in a handler
        }
    }

    /// The generated code of one module (one page): `ud2; ret` at 0,
    /// `xor edx,edx; mov eax,1; xor ecx,ecx; div ecx; ret` at 16, and
    /// `mov rax,[rdi]; ret` at 48.
    const CODE_BYTES: [(usize, &[u8]); 3] = [
        (0, &[0x0F, 0x0B, 0xC3]),
        (
            16,
            &[0x31, 0xD2, 0xB8, 1, 0, 0, 0, 0x31, 0xC9, 0xF7, 0xF1, 0xC3],
        ),
        (48, &[0x48, 0x8B, 0x07, 0xC3]),
    ];
    const PAGE: usize = 4096;

    /// The last removed modules the index keeps, for logged traps that are
    /// named after their module went: far more than are removed between a
    /// trap and the drain that names it (one per registry round here).
    const KEPT: usize = 64;

    static CODE: AddrIndex<TrapTable> = AddrIndex::keeping_removed(KeepRemoved::Last(KEPT));
    static ATTRIBUTED: AtomicU64 = AtomicU64::new(0);
    static WRONG: AtomicU64 = AtomicU64::new(0);
    static IN_BATCH: AtomicU64 = AtomicU64::new(0);
    static CHURN_IN_BATCH: AtomicBool = AtomicBool::new(false);
    static CHURN_PAGE: AtomicU64 = AtomicU64::new(0);

    /// The trap log: a preallocated ring of plain numbers that handlers on
    /// any thread append to (a seqlock per slot) and one normal thread
    /// drains.
    mod log {
        use super::*;

        const SLOTS: usize = 16384;

        /// One logged trap; `seq` is its ticket + 1 once written, 0 while
        /// being written.
        struct Slot {
            seq: AtomicU64,
            id: AtomicU64,
            offset: AtomicU64,
            sig: AtomicU64,
        }

        static RING: [Slot; SLOTS] = [const {
            Slot {
                seq: AtomicU64::new(0),
                id: AtomicU64::new(0),
                offset: AtomicU64::new(0),
                sig: AtomicU64::new(0),
            }
        }; SLOTS];
        /// The next ticket.
        static HEAD: AtomicU64 = AtomicU64::new(0);

        /// Logs a trap: async-signal-safe (atomics only).
        pub(super) fn push(id: u64, offset: u64, sig: i32) {
            let ticket = HEAD.fetch_add(1, Relaxed);
            let slot = &RING[ticket as usize % SLOTS];
            slot.seq.store(0, Relaxed);
            // Release: the fields' stores below come after `seq` = 0 for a
            // reader whose Acquire fence follows its loads of them.
            fence(Release);
            slot.id.store(id, Relaxed);
            slot.offset.store(offset, Relaxed);
            slot.sig.store(sig as u64, Relaxed);
            // Release: pairs with the reader's Acquire load of `seq`.
            slot.seq.store(ticket + 1, Release);
        }

        /// The reader's position, the tickets it passed while their
        /// handler was still writing them (a handler preempted in
        /// `push`), and the traps lost to a full ring.
        #[derive(Default)]
        pub(super) struct Reader {
            next: u64,
            waiting: Vec<u64>,
            pub(super) lost: u64,
        }

        /// What slot `ticket` holds now.
        enum Read {
            Ready((u64, u64, i32)),
            Writing,
            Overwritten,
        }

        fn read(ticket: u64) -> Read {
            let slot = &RING[ticket as usize % SLOTS];
            // Acquire: pairs with the writer's Release store of `seq`.
            let seq = slot.seq.load(Acquire);
            if seq > ticket + 1 {
                return Read::Overwritten;
            }
            if seq != ticket + 1 {
                return Read::Writing; // 0, or the previous lap's
            }
            let entry = (
                slot.id.load(Relaxed),
                slot.offset.load(Relaxed),
                slot.sig.load(Relaxed) as i32,
            );
            // Acquire: pairs with a later writer's Release fence: one that
            // reused the slot meanwhile changed `seq`.
            fence(Acquire);
            if slot.seq.load(Relaxed) == seq {
                Read::Ready(entry)
            } else {
                Read::Overwritten
            }
        }

        /// Appends the traps logged since the last drain to `out` as
        /// `(id, offset, signal)`; one still being written is taken by a
        /// later drain.
        pub(super) fn drain(reader: &mut Reader, out: &mut Vec<(u64, u64, i32)>) {
            let mut lost = 0;
            reader.waiting.retain(|&ticket| match read(ticket) {
                Read::Ready(entry) => {
                    out.push(entry);
                    false
                }
                Read::Writing => true,
                Read::Overwritten => {
                    lost += 1;
                    false
                }
            });
            // Relaxed: a bound only; each slot's `seq` orders its fields.
            let head = HEAD.load(Relaxed);
            while reader.next < head {
                match read(reader.next) {
                    Read::Ready(entry) => out.push(entry),
                    Read::Writing => reader.waiting.push(reader.next),
                    Read::Overwritten => lost += 1,
                }
                reader.next += 1;
            }
            reader.lost += lost;
        }
    }

    /// The trap handler: async-signal-safe (a section, atomics, `_exit`).
    extern "C" fn on_trap(sig: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes the interrupted context.
        let regs = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
        let pc = regs[libc::REG_RIP as usize] as u64;
        let section = CODE.handler_section();
        let resume = section.lookup(pc).and_then(|hit| {
            let table = hit.value();
            let at = hit.module_offset(pc);
            let trap = table.traps.iter().find(|t| t.0 == at && t.1 == sig)?;
            log::push(hit.id().get(), at, sig);
            (table.code == hit.base()).then_some(hit.base() + trap.2)
        });
        let Some(resume) = resume else {
            WRONG.fetch_add(1, Relaxed);
            let msg = b"jit: a trap no module claims\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe.
            unsafe {
                libc::write(2, msg.as_ptr().cast(), msg.len());
                libc::_exit(3);
            }
        };
        if CHURN_IN_BATCH.load(Relaxed) && pc & !(PAGE as u64 - 1) == CHURN_PAGE.load(Relaxed) {
            IN_BATCH.fetch_add(1, Relaxed);
        }
        ATTRIBUTED.fetch_add(1, Relaxed);
        regs[libc::REG_RIP as usize] = resume as i64;
    }

    /// Maps a page, copies the code in, makes it executable.
    fn emit() -> u64 {
        // SAFETY: a fresh anonymous mapping, written before it becomes
        // executable, never unmapped (modules are re-registered, not freed).
        unsafe {
            let p = libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            for (at, bytes) in CODE_BYTES {
                core::ptr::copy_nonoverlapping(bytes.as_ptr(), p.cast::<u8>().add(at), bytes.len());
            }
            assert_eq!(
                libc::mprotect(p, PAGE, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            p as u64
        }
    }

    /// Runs the three trapping functions of the module at `code`.
    fn run(code: u64, guard: u64) {
        for (at, _) in CODE_BYTES {
            // SAFETY: generated code following the C ABI (one pointer
            // argument, no stack use); its traps resume at a `ret`.
            let f: extern "C" fn(u64) -> u64 = unsafe { core::mem::transmute(code as usize + at) };
            std::hint::black_box(f(guard));
        }
    }

    fn register(name: String, code: u64) -> ModuleId {
        let meta = ModuleMeta {
            base: Some(code),
            tag: 0,
        };
        let table = TrapTable::new(name, code);
        CODE.insert_module_with([Segment::from(code..code + 64)], table, meta)
            .unwrap()
    }

    /// What naming the logged traps found.
    #[derive(Default)]
    struct Named {
        /// Traps whose module was still registered.
        live: u64,
        /// Traps whose module had been unregistered (kept by the index).
        removed: u64,
        /// Traps whose module the index no longer knew, or whose table did
        /// not list the trap: must be none.
        unknown: u64,
        /// Traps of each module name (`churn`, `stable-N`).
        churn: u64,
    }

    /// Names every logged trap (a normal thread): the module's name and the
    /// trap's kind, from the module if it is registered, else from what
    /// the index kept of it.
    fn name_traps(reader: &mut log::Reader, named: &mut Named, scratch: &mut Vec<(u64, u64, i32)>) {
        scratch.clear();
        log::drain(reader, scratch);
        let guard = CODE.pin();
        for &(id, offset, sig) in scratch.iter() {
            let id = ModuleId::from_raw(id);
            let kept;
            let table = match CODE.get(id, &guard) {
                Some(table) => {
                    named.live += 1;
                    table
                }
                None => match CODE.removed(id) {
                    Some(removed) => {
                        named.removed += 1;
                        kept = removed;
                        &kept
                    }
                    None => {
                        named.unknown += 1;
                        continue;
                    }
                },
            };
            if !table.traps.iter().any(|t| t.0 == offset && t.1 == sig) {
                named.unknown += 1;
            } else if table.name == "churn" {
                named.churn += 1;
            }
        }
    }

    pub fn main(seconds: f64) {
        for sig in [libc::SIGILL, libc::SIGFPE, libc::SIGSEGV] {
            // SAFETY: the handler only uses a handler section and atomics.
            unsafe {
                let mut sa: libc::sigaction = core::mem::zeroed();
                sa.sa_sigaction = on_trap as *const () as usize;
                sa.sa_flags = libc::SA_SIGINFO;
                assert_eq!(libc::sigaction(sig, &sa, core::ptr::null_mut()), 0);
            }
        }
        // SAFETY: an inaccessible page: every load from it faults.
        let guard = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as u64;
        let stable: Vec<u64> = (0..4).map(|_| emit()).collect();
        let stable_ids: Vec<_> = (stable.iter().enumerate())
            .map(|(i, &c)| register(format!("stable-{i}"), c))
            .collect();
        let churned = emit();
        CHURN_PAGE.store(churned, Relaxed);
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let (mut tiers, mut reloads) = (0u64, 0u64);
        let mut reader = log::Reader::default();
        let mut named = Named::default();
        let mut scratch = Vec::new();
        std::thread::scope(|s| {
            for t in 0..2 {
                let stable = &stable;
                s.spawn(move || {
                    let mut i = t;
                    while Instant::now() < deadline {
                        run(stable[i % stable.len()], guard);
                        i += 1;
                    }
                });
            }
            // The registry thread: tier-up, unload and reload, traps of its
            // own inside an open write batch.
            while Instant::now() < deadline {
                let i = (tiers % 4) as usize;
                let table = TrapTable::new(format!("stable-{i}"), stable[i]);
                drop(CODE.set_value(stable_ids[i], table, tiers).unwrap());
                tiers += 1;
                let churn = register("churn".to_owned(), churned);
                run(churned, guard);
                CODE.write(|batch| {
                    CHURN_IN_BATCH.store(true, Relaxed);
                    run(churned, guard); // the handler must not wait for this batch
                    CHURN_IN_BATCH.store(false, Relaxed);
                    batch.remove(churn);
                });
                reloads += 1;
                // The churned module's traps are named after its removal.
                name_traps(&mut reader, &mut named, &mut scratch);
            }
        });
        name_traps(&mut reader, &mut named, &mut scratch);
        for id in stable_ids {
            drop(CODE.remove(id));
        }
        // Every logged trap is named: what the index kept can go.
        let forgotten = CODE.forget_removed();
        CODE.synchronize();
        let freed = FREED.lock().unwrap().clone();
        let mut unique = freed.clone();
        unique.sort_unstable();
        unique.dedup();
        println!("traps attributed: {}", ATTRIBUTED.load(Relaxed));
        println!(
            "traps taken inside an open write batch: {}",
            IN_BATCH.load(Relaxed)
        );
        println!("wrong answers: {}", WRONG.load(Relaxed));
        println!("tier-ups: {tiers}, unload/reload cycles: {reloads}");
        println!(
            "logged traps named later: {} ({} of a module still registered, {} of one removed by then; {} of the churned module)",
            named.live + named.removed,
            named.live,
            named.removed,
            named.churn
        );
        println!("logged traps left unnamed: {}", named.unknown);
        println!("logged traps lost to a full ring: {}", reader.lost);
        println!("removed modules kept at the end: {forgotten} (at most {KEPT})");
        println!(
            "trap tables created: {}, freed: {} ({} distinct)",
            CREATED.load(Relaxed),
            freed.len(),
            unique.len()
        );
    }
}

fn main() {
    let seconds = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    jit::main(seconds);
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    println!("the JIT example needs x86-64 Linux ({seconds} s not run)");
}
