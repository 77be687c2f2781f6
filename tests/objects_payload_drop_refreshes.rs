//! A payload whose `Drop` refreshes its own `LoadedObjects` (a profiler's
//! unwinder that tells its timer thread, which refreshes, to let go): kept
//! alive by a handler section past its library's `dlclose`, then handed out
//! as due by a later refresh's batch. That refresh must drop it after
//! releasing every lock of the index; it dropped it inside its batch scope,
//! with the lock that serializes refreshes held, and the `Drop`'s refresh
//! deadlocked on it.
//!
//! A test binary of its own: the deadlock it guards against would leave the
//! index locked for every other test.

#![cfg(all(
    feature = "objects",
    target_os = "linux",
    target_pointer_width = "64",
    not(miri)
))]

use latchtree::{LoadedObjects, MappedObject};
use std::ffi::{CString, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// Whether the payload's `Drop` refreshes (set for the library's payload
/// only, by the builder).
struct Probe {
    refreshes_on_drop: bool,
}

static OBJECTS: LoadedObjects<Probe> = LoadedObjects::with_payload(build);
/// The library whose payload refreshes when dropped.
static TARGET: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
static DROPPED: AtomicBool = AtomicBool::new(false);
static NESTED_REFRESHES: AtomicUsize = AtomicUsize::new(0);

fn build(object: &MappedObject<'_>) -> Probe {
    let target = TARGET.lock().unwrap();
    Probe {
        refreshes_on_drop: target.as_deref() == Some(object.path()),
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if self.refreshes_on_drop {
            DROPPED.store(true, Relaxed);
            OBJECTS.refresh();
            NESTED_REFRESHES.fetch_add(1, Relaxed);
        }
    }
}

/// A private copy of libz named `name` in `dir`, so that the loader maps a
/// file of its own (and unmaps it at `dlclose`) whatever else is loaded.
fn copy_of_libz(dir: &Path, name: &str) -> Option<PathBuf> {
    let candidates = [
        "/lib/x86_64-linux-gnu/libz.so.1",
        "/lib/aarch64-linux-gnu/libz.so.1",
        "/usr/lib/libz.so.1",
        "/lib/libz.so.1",
    ];
    let source = candidates.into_iter().map(Path::new).find(|p| p.exists())?;
    let path = dir.join(name);
    std::fs::copy(source, &path).ok()?;
    Some(path)
}

fn dlopen(path: &Path) -> *mut c_void {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path; libz's initializers do nothing that
    // matters to this process.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {}", path.display());
    handle
}

#[test]
fn a_payload_drop_that_refreshes_does_not_deadlock_a_later_refresh() {
    let dir = std::env::temp_dir().join(format!("latchtree-drop-refresh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(target) = copy_of_libz(&dir, "libdroprefresh.so") else {
        eprintln!("no libz.so.1 to copy: skipping");
        return;
    };
    *TARGET.lock().unwrap() = Some(target.clone());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker_dir = dir.clone();
    std::thread::spawn(move || {
        let handle = dlopen(&target);
        OBJECTS.refresh();
        let inflate = {
            // SAFETY: a live handle, a valid C string.
            let f = unsafe { libc::dlsym(handle, c"inflate".as_ptr()) };
            f.addr() as u64
        };
        let section = OBJECTS.handler_section();
        assert!(
            section
                .lookup(inflate)
                .is_some_and(|o| o.payload().refreshes_on_drop)
        );
        // SAFETY: our handle, closed once; nothing of the library is used
        // afterwards.
        assert_eq!(unsafe { libc::dlclose(handle) }, 0);
        // Unloaded while a section is open: its payload waits for it.
        assert_eq!(OBJECTS.refresh().removed.len(), 1);
        assert!(!DROPPED.load(Relaxed), "a section can still see it");
        drop(section);
        // Refreshes that only add libraries (no flush after them): one of
        // their batches finds the payload due.
        let mut kept = Vec::new();
        for i in 0..40 {
            if DROPPED.load(Relaxed) {
                break;
            }
            let path = copy_of_libz(&worker_dir, &format!("libadded{i}.so")).unwrap();
            kept.push(dlopen(&path));
            assert_eq!(OBJECTS.refresh().added.len(), 1);
        }
        done_tx.send(DROPPED.load(Relaxed)).unwrap();
    });
    let dropped = done_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("deadlocked: a payload's Drop refreshed under a later refresh's lock");
    std::fs::remove_dir_all(&dir).ok();
    assert!(dropped, "no refresh dropped the payload");
    assert_eq!(NESTED_REFRESHES.load(Relaxed), 1);
}
