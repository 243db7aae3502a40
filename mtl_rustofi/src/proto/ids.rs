//! Typed identifiers of the protocol core, and the slab that hands them out.
//!
//! Every thing the core refers to across calls (a peer, a rail, an
//! operation given to the driver, a memory registration, a rendezvous, a
//! request of the MPI layer) has its own id type, so one can never be passed
//! where another is meant, and none is a pointer.

use std::marker::PhantomData;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub(crate) struct $name(pub $inner);
    };
}

id_type!(
    /// A peer process, as the core numbers them (dense, from 0).
    PeerId(u32)
);
id_type!(
    /// A rail: one libfabric endpoint (0: the network provider, 1: shm).
    RailId(u8)
);
id_type!(
    /// A transmit-side operation handed to the driver (a packet send or a
    /// rendezvous data chunk), live until its completion is reported.
    OpId(u32)
);
id_type!(
    /// A receive bounce buffer of a rail (owned by the driver, posted and
    /// reposted on the core's instructions).
    RxSlot(u32)
);
id_type!(
    /// A memory registration the core asked the driver to make.
    MrId(u32)
);
id_type!(
    /// A rendezvous on the receive side (also the high bits of the tags its
    /// data chunks carry in the send protocol).
    RndvId(u32)
);
id_type!(
    /// A rendezvous or synchronous send on the sending side, echoed by the
    /// receiver in CTS, FIN and ack packets.
    Cookie(u64)
);
id_type!(
    /// A request of the MPI layer; opaque to the core, handed back in
    /// completions.
    ReqId(usize)
);
id_type!(
    /// An unexpected message taken by a matched probe, to be received once.
    MsgId(u32)
);
id_type!(
    /// A peer's address in a rail's address vector (`fi_addr_t`).
    FiAddr(u64)
);

impl RailId {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

impl PeerId {
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }

    /// The handle the shim keeps for a peer: never 0, which the shim
    /// reads as "no peer".
    pub(crate) fn handle(self) -> usize {
        self.index() + 1
    }

    /// The peer of a shim handle; 0 (and anything out of range) becomes
    /// an id no peer has, which sends refuse.
    pub(crate) fn from_handle(h: usize) -> PeerId {
        PeerId(
            h.checked_sub(1)
                .and_then(|i| u32::try_from(i).ok())
                .unwrap_or(u32::MAX),
        )
    }
}

/// Conversion between an id and a slab index.
pub(crate) trait SlabKey: Copy {
    fn from_index(i: u32) -> Self;
    fn index(self) -> u32;
}

macro_rules! slab_key {
    ($($name:ident),*) => {$(
        impl SlabKey for $name {
            fn from_index(i: u32) -> Self {
                $name(i)
            }
            fn index(self) -> u32 {
                self.0
            }
        }
    )*};
}
slab_key!(OpId, MrId, RndvId, MsgId, RxSlot);

/// A vector of optional entries with a free list: ids are reused after
/// removal, insertion and removal cost O(1), nothing moves.
pub(crate) struct Slab<K, T> {
    entries: Vec<Option<T>>,
    free: Vec<u32>,
    len: usize,
    _key: PhantomData<K>,
}

impl<K: SlabKey, T> Default for Slab<K, T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: SlabKey, T> Slab<K, T> {
    pub(crate) fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
            _key: PhantomData,
        }
    }

    #[inline(always)]
    pub(crate) fn insert(&mut self, value: T) -> K {
        self.len += 1;
        if let Some(i) = self.free.pop() {
            let slot = &mut self.entries[i as usize];
            debug_assert!(slot.is_none(), "free ids name empty slots");
            // The slot is empty, so nothing is dropped here.
            std::mem::forget(slot.replace(value));
            return K::from_index(i);
        }
        let i = u32::try_from(self.entries.len()).expect("fewer than 2^32 live entries");
        self.entries.push(Some(value));
        K::from_index(i)
    }

    #[inline(always)]
    pub(crate) fn remove(&mut self, k: K) -> Option<T> {
        let v = self.entries.get_mut(k.index() as usize)?.take()?;
        self.free.push(k.index());
        self.len -= 1;
        Some(v)
    }

    #[inline]
    pub(crate) fn get(&self, k: K) -> Option<&T> {
        self.entries.get(k.index() as usize)?.as_ref()
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, k: K) -> Option<&mut T> {
        self.entries.get_mut(k.index() as usize)?.as_mut()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// One more than the highest id in use (ids are below it).
    pub(crate) fn bound(&self) -> usize {
        self.entries.len()
    }

    /// Frees the table once empty if a burst grew it beyond `keep`
    /// entries (ids then start from 0 again).
    pub(crate) fn shrink_if_empty(&mut self, keep: usize) {
        if self.len == 0 && self.entries.len() > keep {
            self.entries = Vec::new();
            self.free = Vec::new();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Live entries with their ids.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (K, &T)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_ref().map(|v| (K::from_index(i as u32), v)))
    }

    /// Ids of the live entries (a snapshot, so the slab may be changed
    /// while walking it).
    pub(crate) fn ids(&self) -> Vec<K> {
        self.iter().map(|(k, _)| k).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_reuses_ids_and_counts() {
        let mut s: Slab<OpId, &str> = Slab::new();
        let a = s.insert("a");
        let b = s.insert("b");
        assert_ne!(a, b);
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None, "a removed entry is gone");
        let c = s.insert("c");
        assert_eq!(c, a, "freed ids are reused");
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.ids(), vec![a, b]);
        assert_eq!(s.len(), 2);
    }
}
