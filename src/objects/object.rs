//! One known object on a normal thread, loaded or unloaded: [`ObjectRef`],
//! and the reads and forgets by id of [`LoadedObjects`].

use super::index::{Entry, LoadedObjects};
use super::info::ObjectInfo;
use crate::addr_index::ModuleId;
use crate::sync::lock;
use core::fmt;
use std::sync::Arc;

/// An object known to a [`LoadedObjects`], loaded or unloaded, on a normal
/// thread: its id, its [`ObjectInfo`], and — from
/// [`object`](LoadedObjects::object) or [`objects`](LoadedObjects::objects),
/// if it was still loaded at the time of the call — its payload. The
/// `ObjectRef`s a [`Refresh`](crate::Refresh) lists carry no payload (a
/// report kept around must not keep unloaded objects' payloads alive).
///
/// ```
/// let objects = latchtree::LoadedObjects::new();
/// objects.refresh();
/// let id = objects.lookup(main as *const () as u64).unwrap().id();
/// let main_program = objects.object(id).unwrap();
/// assert_eq!(main_program.id(), id);
/// assert!(main_program.is_loaded());
/// assert_eq!(main_program.info().kind(), latchtree::ObjectKind::MainProgram);
/// ```
pub struct ObjectRef<P = ()> {
    pub(super) id: ModuleId,
    pub(super) info: Arc<ObjectInfo>,
    pub(super) loaded: bool,
    /// The index's entry, shared, if the object was loaded and the caller
    /// asked for its payload.
    pub(super) entry: Option<Arc<Entry<P>>>,
}

impl<P> Clone for ObjectRef<P> {
    fn clone(&self) -> Self {
        ObjectRef {
            id: self.id,
            info: Arc::clone(&self.info),
            loaded: self.loaded,
            entry: self.entry.clone(),
        }
    }
}

impl<P> fmt::Debug for ObjectRef<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectRef")
            .field("id", &self.id)
            .field("info", &self.info)
            .field("loaded", &self.loaded)
            .finish_non_exhaustive()
    }
}

impl ObjectRef {
    /// A loaded or unloaded object without its payload (what a refresh
    /// reports).
    pub(super) fn of(id: ModuleId, info: Arc<ObjectInfo>, loaded: bool) -> Self {
        ObjectRef {
            id,
            info,
            loaded,
            entry: None,
        }
    }
}

impl<P> ObjectRef<P> {
    /// A loaded object, with the index's entry (its payload).
    pub(super) fn loaded(id: ModuleId, entry: Arc<Entry<P>>) -> Self {
        ObjectRef {
            id,
            info: Arc::clone(&entry.info),
            loaded: true,
            entry: Some(entry),
        }
    }

    /// An unloaded object: its info only.
    pub(super) fn unloaded(id: ModuleId, info: Arc<ObjectInfo>) -> Self {
        ObjectRef {
            id,
            info,
            loaded: false,
            entry: None,
        }
    }

    /// The object's id in the index (never reused). See the example on
    /// [`ObjectRef`].
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// What is known of the object (see the example on [`ObjectRef`]).
    pub fn info(&self) -> &Arc<ObjectInfo> {
        &self.info
    }

    /// Whether it was still loaded (in the index) when this was made (see
    /// the example on [`ObjectRef`]).
    pub fn is_loaded(&self) -> bool {
        self.loaded
    }

    /// The payload its index's builder made for it
    /// ([`LoadedObjects::with_payload`]), if it was loaded when
    /// [`object`](LoadedObjects::object) or [`objects`](LoadedObjects::objects)
    /// made this: on a normal thread, what a handler reads through a
    /// section. This `ObjectRef` shares it with the index: it keeps the
    /// payload alive, also past the object's unload, until it is dropped.
    /// `None` for an unloaded object (its payload went at its unload; only
    /// its info is kept), and for the objects a [`Refresh`](crate::Refresh)
    /// lists.
    ///
    /// ```
    /// use latchtree::LoadedObjects;
    /// static OBJECTS: LoadedObjects<String> =
    ///     LoadedObjects::with_payload(|o| o.path().display().to_string());
    /// OBJECTS.refresh();
    /// let id = OBJECTS.lookup(main as *const () as u64).unwrap().id();
    /// let object = OBJECTS.object(id).unwrap();
    /// assert_eq!(object.payload(), Some(&object.info().path().display().to_string()));
    /// ```
    pub fn payload(&self) -> Option<&P> {
        self.entry.as_ref().map(|e| &e.payload)
    }
}

impl<P: Send + Sync + 'static> LoadedObjects<P> {
    /// The object with this id, loaded (with its payload) or
    /// unloaded-but-not-forgotten. For normal threads (it may pin an epoch
    /// and take a lock).
    ///
    /// ```
    /// use latchtree::{LoadedObjects, ModuleId};
    /// let objects = LoadedObjects::new();
    /// objects.refresh();
    /// let hit = objects.lookup(main as *const () as u64).unwrap();
    /// assert!(objects.object(hit.id()).unwrap().is_loaded());
    /// assert!(objects.object(ModuleId::from_raw(u64::MAX)).is_none());
    /// ```
    pub fn object(&self, id: ModuleId) -> Option<ObjectRef<P>> {
        {
            let guard = self.index.pin();
            if let Some(m) = self.index.module(id, &guard) {
                return Some(ObjectRef::loaded(id, Arc::clone(m.shared_value())));
            }
        }
        // Not indexed: unloaded, or unknown. A refresh that unloads it moves
        // it from the index to `unloaded` while holding `state`, so taking
        // `state` after the miss finds it there.
        let state = lock(&self.state);
        let info = state.unloaded.get(&id)?;
        Some(ObjectRef::unloaded(id, Arc::clone(info)))
    }

    /// Every known object, loaded (with its payload) or
    /// unloaded-but-not-forgotten, in id order.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let all = objects.objects();
    /// assert_eq!(all.len(), objects.loaded_count());
    /// assert!(all.windows(2).all(|w| w[0].id() < w[1].id()));
    /// ```
    pub fn objects(&self) -> Vec<ObjectRef<P>> {
        // Pinned before `state`: a thread's outermost pin may run deferred
        // closures of other code (crossbeam's default collector), and one
        // that asks these objects for an object would wait for `state`.
        let guard = self.index.pin();
        let state = lock(&self.state);
        let loaded = (self.index.modules(&guard))
            .map(|m| ObjectRef::loaded(m.id(), Arc::clone(m.shared_value())));
        let unloaded =
            (state.unloaded.iter()).map(|(&id, info)| ObjectRef::unloaded(id, Arc::clone(info)));
        let mut all: Vec<ObjectRef<P>> = loaded.chain(unloaded).collect();
        drop(guard);
        drop(state);
        all.sort_by_key(ObjectRef::id);
        all
    }

    /// Forgets an unloaded object: its id resolves to nothing from now on,
    /// and its info is dropped (the payload went when the refresh that
    /// found it unloaded took it out of the index, or, if a guard or a
    /// section could still see it then, goes here: before this returns,
    /// also when a refresh on another thread is dropping it, unless a guard
    /// or section can still see it, or an [`ObjectRef`] made while it was
    /// loaded keeps it).
    /// Returns whether it was an unloaded object not yet forgotten (a
    /// loaded object is not forgotten: `false`).
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// let id = objects.lookup(main as *const () as u64).unwrap().id();
    /// assert!(!objects.forget(id)); // still loaded
    /// ```
    pub fn forget(&self, id: ModuleId) -> bool {
        let removed = lock(&self.state).unloaded.remove(&id);
        let forgotten = removed.is_some();
        drop(removed);
        // What the index still holds of unloaded objects (their payloads,
        // kept by a reader at their refresh) goes too, unless a guard or
        // handler section can still see it; and a refresh on another thread
        // that took it out just before has finished dropping it.
        self.index.flush();
        self.index.wait_for_drops();
        forgotten
    }

    /// Forgets every unloaded object (once no sample that names one is left
    /// to resolve); returns how many.
    ///
    /// ```
    /// let objects = latchtree::LoadedObjects::new();
    /// objects.refresh();
    /// assert_eq!(objects.forget_unloaded(), 0);
    /// ```
    pub fn forget_unloaded(&self) -> usize {
        let unloaded = core::mem::take(&mut lock(&self.state).unloaded);
        let n = unloaded.len();
        drop(unloaded);
        self.index.flush(); // as in `forget`
        self.index.wait_for_drops();
        n
    }
}
