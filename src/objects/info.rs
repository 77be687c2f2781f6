//! What the index knows of one loaded object: [`ObjectInfo`] and its
//! [`LoadSegment`]s.

use super::note::BuildId;
use super::problem::ProblemKind;
use super::scan::{Scanned, Unwind};
use core::ops::Range;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// `p_flags` bit: the segment is executable.
pub(crate) const PF_X: u32 = 1;
/// `p_flags` bit: the segment is writable.
pub(crate) const PF_W: u32 = 2;
/// `p_flags` bit: the segment is readable.
pub(crate) const PF_R: u32 = 4;

/// Which kind of object this is; it decides how [`ObjectInfo::path`] was
/// found.
///
/// ```
/// # #[cfg(target_os = "linux")] {
/// use latchtree::{LoadedObjects, ObjectKind};
/// let objects = LoadedObjects::new();
/// objects.refresh();
/// let main = objects.lookup(main as *const () as u64).unwrap();
/// assert_eq!(objects.object(main.id()).unwrap().info().kind(), ObjectKind::MainProgram);
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    /// The program the kernel started (`dl_iterate_phdr` gives it no name on
    /// glibc). Its path is where `/proc/self/exe` points.
    MainProgram,
    /// The kernel's virtual dynamic shared object. It has no file; its path
    /// is `[vdso]`, as in `/proc/self/maps`, and its image is in memory.
    Vdso,
    /// Anything else: the dynamic loader, shared libraries (also those
    /// `dlopen`ed later). Its path is the loader's name for it.
    Library,
}

/// One `PT_LOAD` segment of a loaded object: exactly the bytes the program
/// header describes (`[bias + p_vaddr, bias + p_vaddr + p_memsz)`), not
/// rounded to pages.
///
/// ```
/// use latchtree::LoadSegment;
/// let text = LoadSegment { range: 0x7f00_1000..0x7f00_3000, flags: 0b101, file_offset: 0x1000, file_size: 0x2000 };
/// assert!(text.is_executable() && text.is_readable() && !text.is_writable());
/// assert_eq!(text.link_range(0x7f00_0000), 0x1000..0x3000);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LoadSegment {
    /// Run-time addresses: `bias + p_vaddr .. bias + p_vaddr + p_memsz`.
    pub range: Range<u64>,
    /// `p_flags`: `PF_X` (1), `PF_W` (2), `PF_R` (4).
    pub flags: u32,
    /// `p_offset`: where the segment's bytes start in the file.
    pub file_offset: u64,
    /// `p_filesz`: how many of its bytes come from the file (the rest, up to
    /// its memory size, is zero-filled).
    pub file_size: u64,
}

impl LoadSegment {
    /// Whether `PF_X` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 1, file_offset: 0, file_size: 1 };
    /// assert!(s.is_executable());
    /// ```
    pub fn is_executable(&self) -> bool {
        self.flags & PF_X != 0
    }

    /// Whether `PF_W` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 6, file_offset: 0, file_size: 1 };
    /// assert!(s.is_writable());
    /// ```
    pub fn is_writable(&self) -> bool {
        self.flags & PF_W != 0
    }

    /// Whether `PF_R` is set.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0..1, flags: 4, file_offset: 0, file_size: 1 };
    /// assert!(s.is_readable());
    /// ```
    pub fn is_readable(&self) -> bool {
        self.flags & PF_R != 0
    }

    /// The segment at link-time addresses (`p_vaddr .. p_vaddr + p_memsz`),
    /// given the object's load bias.
    ///
    /// ```
    /// let s = latchtree::LoadSegment { range: 0x5000..0x5800, flags: 4, file_offset: 0, file_size: 0x800 };
    /// assert_eq!(s.link_range(0x4000), 0x1000..0x1800);
    /// ```
    pub fn link_range(&self, bias: u64) -> Range<u64> {
        self.range.start.wrapping_sub(bias)..self.range.end.wrapping_sub(bias)
    }
}

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
    /// memory, so the vDSO has it too.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let hit = objects.lookup(main as *const () as u64).unwrap();
    /// let info = objects.object(hit.id()).unwrap().info().clone();
    /// let hdr = info.eh_frame_hdr().expect("Rust programs have unwind tables");
    /// assert!(info.image().start <= hdr.start && hdr.end <= info.image().end);
    /// // SAFETY (of the example): the range is mapped and readable while the object is loaded.
    /// let version = unsafe { *(hdr.start as *const u8) };
    /// assert_eq!(version, 1, "eh_frame_hdr version 1");
    /// ```
    pub fn eh_frame_hdr(&self) -> Option<Range<u64>> {
        self.unwind.eh_frame_hdr.clone()
    }

    /// Where the object's `.sframe` section is mapped (its `PT_GNU_SFRAME`
    /// segment), if it has one: SFrame stack-trace data (binutils 2.41 and
    /// later, where the object was built with `--gsframe`).
    pub fn sframe(&self) -> Option<Range<u64>> {
        self.unwind.sframe.clone()
    }

    /// The object's mapped image: from its lowest `PT_LOAD` start rounded
    /// down to a page to its highest end rounded up, at run-time addresses.
    /// An unwinder given the image (the vDSO has no file) reads section
    /// data from here.
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Identity<'a> {
    loader_name: &'a [u8],
    bias: u64,
    segments: &'a [LoadSegment],
    build_id: Option<&'a BuildId>,
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
        let info = ObjectInfo {
            path: path.into_boxed_path(),
            loader_name: loader_name.into_boxed_os_str(),
            kind,
            bias,
            segments: segments.into_boxed_slice(),
            build_id,
            unwind,
        };
        (info, problems)
    }
}
