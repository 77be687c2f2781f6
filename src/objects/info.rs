//! What the index knows of one loaded object: [`ObjectInfo`], made from
//! what a scan found ([`Scanned`]).

use super::eh_frame::EhFrameError;
use super::note::BuildId;
use super::problem::{Problem, ProblemKind};
use super::scan::{Scanned, Unwind};
use super::segment::{LoadSegment, ObjectKind};
use core::ops::Range;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// One loaded ELF object as a refresh found it: what a profiler needs to
/// symbolize its samples later, here or offline (path, load bias, segments,
/// GNU build id). Immutable; shared as an `Arc`.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// let objects = latchtree::LoadedObjects::new();
/// objects.refresh();
/// let pc = main as *const () as u64;
/// let hit = objects.lookup(pc).unwrap();
/// let info = objects.object(hit.id()).unwrap().info().clone();
/// assert_eq!(info.path(), std::env::current_exe().unwrap());
/// assert_eq!(pc - info.bias(), hit.link_address());
/// assert!(info.segments().iter().any(|s| s.range.contains(&pc) && s.is_executable()));
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub(crate) path: Box<Path>,
    pub(crate) loader_name: Box<OsStr>,
    pub(crate) kind: ObjectKind,
    pub(crate) bias: u64,
    pub(crate) segments: Box<[LoadSegment]>,
    pub(crate) build_id: Option<BuildId>,
    pub(crate) unwind: Unwind,
    /// Walked by the refresh that indexed the object, while it held it.
    pub(crate) eh_frame: Result<Range<u64>, EhFrameError>,
}

impl ObjectInfo {
    /// Where the object's file is: for the main program the target of
    /// `/proc/self/exe` (or `/proc/self/exe` itself if that cannot be read),
    /// for the vDSO `[vdso]`, else the loader's name ([`loader_name`]).
    /// Not necessarily UTF-8 (a refresh reports it if not). See the example
    /// on [`ObjectInfo`].
    ///
    /// [`loader_name`]: ObjectInfo::loader_name
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The name `dl_iterate_phdr` gave (`dlpi_name`): empty for the main
    /// program on glibc, the vDSO's soname, a library's path as the loader
    /// found it.
    ///
    /// ```
    /// use latchtree::{LoadedObjects, ObjectKind};
    /// let objects = LoadedObjects::new();
    /// objects.refresh();
    /// for object in objects.objects() {
    ///     let info = object.info();
    ///     if info.kind() == ObjectKind::Library {
    ///         assert_eq!(info.path().as_os_str(), info.loader_name());
    ///     }
    /// }
    /// ```
    pub fn loader_name(&self) -> &OsStr {
        &self.loader_name
    }

    /// Main program, vDSO or library (see the example on [`ObjectKind`]).
    pub fn kind(&self) -> ObjectKind {
        self.kind
    }

    /// The load bias (`dlpi_addr`): what the loader added to every
    /// link-time address. `pc - bias` is what `nm`, `addr2line` and
    /// symbolizers take. See the example on [`ObjectInfo`].
    pub fn bias(&self) -> u64 {
        self.bias
    }

    /// The non-empty `PT_LOAD` segments, sorted by address, not
    /// overlapping (overlapping ones were merged, and reported). See the
    /// example on [`ObjectInfo`].
    pub fn segments(&self) -> &[LoadSegment] {
        &self.segments
    }

    /// The GNU build id, read from the object's `PT_NOTE` segments in
    /// memory; `None` if it has none (or only malformed ones: reported).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let hit = objects.lookup(main as *const () as u64).unwrap();
    /// if let Some(id) = objects.object(hit.id()).unwrap().info().build_id() {
    ///     println!("main program: build id {id}"); // as `readelf -n` prints it
    /// }
    /// ```
    pub fn build_id(&self) -> Option<&BuildId> {
        self.build_id.as_ref()
    }

    /// Where the object's `.eh_frame_hdr` is mapped (its `PT_GNU_EH_FRAME`
    /// segment, at run-time addresses), if it has one inside a readable
    /// loaded segment: what a DWARF unwinder (or `_dl_find_object`'s
    /// `dlfo_eh_frame`) starts from. Read from the program headers in
    /// memory, so the vDSO has it too. Readable only while the object is
    /// loaded: a payload builder gets its bytes
    /// ([`MappedObject::eh_frame_hdr_bytes`](crate::MappedObject::eh_frame_hdr_bytes));
    /// see [`eh_frame`](ObjectInfo::eh_frame).
    ///
    /// ```
    /// use latchtree::{LoadedObjects, MappedObject};
    /// static OBJECTS: LoadedObjects<Option<u8>> =
    ///     LoadedObjects::with_payload(|o: &MappedObject<'_>| Some(o.eh_frame_hdr_bytes()?[0]));
    /// OBJECTS.refresh();
    /// let section = OBJECTS.handler_section();
    /// let object = section.lookup(main as *const () as u64).unwrap();
    /// let (info, version) = (object.info(), *object.payload());
    /// let hdr = info.eh_frame_hdr().expect("Rust programs have unwind tables");
    /// assert!(info.image().start <= hdr.start && hdr.end <= info.image().end);
    /// assert_eq!(version, Some(1), "eh_frame_hdr version 1");
    /// ```
    pub fn eh_frame_hdr(&self) -> Option<Range<u64>> {
        self.unwind.eh_frame_hdr.clone()
    }

    /// Where the object's `.eh_frame` section is mapped, with its length:
    /// found from the `.eh_frame_hdr` (its encoded `eh_frame_ptr`) and the
    /// section's records (walked to the zero terminator, within a readable
    /// loaded segment), in memory, by the refresh that indexed the object.
    /// What a DWARF unwinder reads CIEs and FDEs from; `None` without a
    /// header, or with one this crate cannot decode:
    /// [`try_eh_frame`](ObjectInfo::try_eh_frame) says which, and the
    /// refresh reported it ([`ProblemKind::NoEhFrame`](crate::ProblemKind::NoEhFrame)).
    ///
    /// Like every range here it is an address range in the object's
    /// mapping: readable only while the object is loaded. A payload builder
    /// gets its bytes ([`MappedObject::eh_frame_bytes`](crate::MappedObject::eh_frame_bytes))
    /// while the refresh holds the object mapped; a signal handler must
    /// read a copy made then, not this range (the object may have been
    /// `dlclose`d since the last refresh).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let hit = objects.lookup(main as *const () as u64).unwrap();
    /// let info = objects.object(hit.id()).unwrap().info().clone();
    /// let eh_frame = info.eh_frame().expect("Rust programs have unwind tables");
    /// assert!(info.image().start <= eh_frame.start && eh_frame.end <= info.image().end);
    /// assert!(eh_frame.end - eh_frame.start >= 4, "at least a terminator");
    /// ```
    pub fn eh_frame(&self) -> Option<Range<u64>> {
        self.eh_frame.clone().ok()
    }

    /// [`eh_frame`](ObjectInfo::eh_frame), or why the object has none.
    ///
    /// ```
    /// use latchtree::EhFrameError;
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// for object in objects.objects() {
    ///     match object.info().try_eh_frame() {
    ///         Ok(range) => assert!(range.end - range.start >= 4),
    ///         Err(EhFrameError::NoHeader) => assert!(object.info().eh_frame_hdr().is_none()),
    ///         Err(why) => println!("{}: {why}", object.info().path().display()),
    ///     }
    /// }
    /// ```
    pub fn try_eh_frame(&self) -> Result<Range<u64>, EhFrameError> {
        self.eh_frame.clone()
    }

    /// Where the object's `.sframe` section is mapped (its `PT_GNU_SFRAME`
    /// segment), if it has one: SFrame stack-trace data (binutils 2.41 and
    /// later, where the object was built with `--gsframe`). Readable only
    /// while the object is loaded (see [`eh_frame`](ObjectInfo::eh_frame)).
    pub fn sframe(&self) -> Option<Range<u64>> {
        self.unwind.sframe.clone()
    }

    /// The object's mapped image: from its lowest `PT_LOAD` start rounded
    /// down to a page to its highest end rounded up, at run-time addresses.
    /// An unwinder given the image (the vDSO has no file) reads section
    /// data from here, while the object is loaded: in a payload builder,
    /// not in a signal handler (see [`eh_frame`](ObjectInfo::eh_frame)).
    pub fn image(&self) -> Range<u64> {
        self.unwind.image.clone()
    }

    /// The segment containing the run-time address `pc`.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let pc = main as *const () as u64;
    /// let info = objects.object(objects.lookup(pc).unwrap().id()).unwrap().info().clone();
    /// assert!(info.segment_of(pc).is_some_and(|s| s.is_executable()));
    /// assert!(info.segment_of(0).is_none());
    /// ```
    pub fn segment_of(&self, pc: u64) -> Option<&LoadSegment> {
        let i = self.segments.partition_point(|s| s.range.end <= pc);
        self.segments.get(i).filter(|s| s.range.contains(&pc))
    }
}

/// What makes two sightings of an object the same object, for the diff
/// between two refreshes: the loader's name, the bias, the segments and the
/// build id. (An object unloaded and loaded again between two refreshes at
/// the same address from the same file is the same object.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity<'a> {
    loader_name: &'a [u8],
    bias: u64,
    segments: &'a [LoadSegment],
    build_id: Option<&'a BuildId>,
}

/// Hashes what tells objects apart cheaply (the bias, where the first
/// segment starts, how many there are, the name's length); equality
/// compares the rest. Every refresh hashes every loaded object twice.
impl core::hash::Hash for Identity<'_> {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.bias);
        state.write_u64(self.segments.first().map_or(0, |s| s.range.start));
        state.write_usize(self.segments.len());
        state.write_usize(self.loader_name.len());
    }
}

impl Scanned {
    /// See [`Identity`].
    pub(crate) fn identity(&self) -> Identity<'_> {
        Identity {
            loader_name: &self.loader_name,
            bias: self.bias,
            segments: &self.segments,
            build_id: self.build_id.as_ref(),
        }
    }
}

impl ObjectInfo {
    /// See [`Identity`].
    pub(crate) fn identity(&self) -> Identity<'_> {
        Identity {
            loader_name: self.loader_name.as_encoded_bytes(),
            bias: self.bias,
            segments: &self.segments,
            build_id: self.build_id.as_ref(),
        }
    }

    /// A problem with this object.
    pub(crate) fn problem(&self, kind: ProblemKind) -> Problem {
        Problem {
            path: self.path().into(),
            bias: self.bias(),
            kind,
        }
    }

    /// The object a scan found, with its path worked out (see
    /// [`ObjectInfo::path`]), and every problem found with it: the scan's,
    /// then the path's. Looks at the file system (`/proc/self/exe`, whether
    /// the file still exists): call it outside the loader's lock.
    pub(crate) fn from_scan(scanned: Scanned) -> (ObjectInfo, Vec<ProblemKind>) {
        let Scanned {
            loader_name,
            bias,
            kind,
            segments,
            build_id,
            unwind,
            mut problems,
        } = scanned;
        let loader_name = OsString::from_vec(loader_name.into_vec());
        let path = match kind {
            ObjectKind::MainProgram => match std::fs::read_link("/proc/self/exe") {
                // The kernel marks an unlinked file so (the path may name a
                // new file by now).
                Ok(target) => match target.as_os_str().as_bytes().strip_suffix(b" (deleted)") {
                    Some(file) => {
                        problems.push(ProblemKind::FileVanished);
                        PathBuf::from(OsStr::from_bytes(file))
                    }
                    None => target,
                },
                Err(_) if !loader_name.is_empty() => PathBuf::from(&loader_name),
                Err(_) => PathBuf::from("/proc/self/exe"),
            },
            ObjectKind::Vdso => PathBuf::from("[vdso]"),
            ObjectKind::Library if loader_name.is_empty() => {
                problems.push(ProblemKind::NoPath);
                PathBuf::new()
            }
            ObjectKind::Library => {
                let path = PathBuf::from(&loader_name);
                if std::fs::symlink_metadata(&path)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
                {
                    problems.push(ProblemKind::FileVanished);
                }
                path
            }
        };
        if path.to_str().is_none() {
            problems.push(ProblemKind::PathNotUtf8);
        }
        // Walked once the refresh holds the object (`refresh.rs`), where
        // there is a header to walk from: `Unloaded` until then.
        let eh_frame = match (&unwind.eh_frame_hdr, unwind.merged) {
            (None, _) => Err(EhFrameError::NoHeader),
            (Some(_), true) => Err(EhFrameError::OverlappingSegments),
            (Some(_), false) => Err(EhFrameError::Unloaded),
        };
        let info = ObjectInfo {
            path: path.into_boxed_path(),
            loader_name: loader_name.into_boxed_os_str(),
            kind,
            bias,
            segments: segments.into_boxed_slice(),
            build_id,
            unwind,
            eh_frame,
        };
        (info, problems)
    }
}
