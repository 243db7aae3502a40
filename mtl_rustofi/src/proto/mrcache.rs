//! The registration cache: registrations of user buffers kept after their
//! rendezvous ends, so that a buffer sent or received again is not
//! registered anew.
//!
//! An entry is one registration (an [`MrId`]) of a rail, with its access
//! and address range. A lookup serves any ready, valid entry of the same
//! rail and access whose range covers the request. Entries in use carry a
//! reference count; unused ones are kept up to a bound (a number of
//! registrations and a number of bytes, [`CacheBound`]) and evicted least
//! recently used first. Memory returned to the system invalidates every
//! entry on its pages: an unused one is released at once, one in use is
//! marked stale (never served again) and released when its last transfer
//! ends. So a freed and re-mapped buffer always gets a new registration.
//!
//! The cache only decides: it names the registrations to release, and the
//! core turns them into `Deregister` actions.

use super::action::Access;
use super::ids::{MrId, RailId};
use crate::usermem::Region;

/// Granularity of memory release (the hooks report whole mappings, and
/// registrations pin whole pages).
pub(crate) const PAGE: usize = 4096;

struct Entry {
    mr: MrId,
    rail: RailId,
    access: Access,
    region: Region,
    /// Transfers using it.
    refs: u32,
    /// Its key, once the driver reported the registration.
    key: Option<u64>,
    /// Its memory was released while in use: never served again.
    stale: bool,
    last_use: u64,
}

/// A cached registration served to a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) mr: MrId,
    pub(crate) key: u64,
    /// The registered range (covers the request).
    pub(crate) region: Region,
}

/// What the cache keeps of registrations no transfer uses. Both bounds
/// hold at once: the count bounds the NIC's registrations (a limited
/// resource on EFA), the bytes bound the user memory they keep pinned.
/// Registrations in use are never counted against it nor evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CacheBound {
    /// Most unused registrations kept.
    pub(crate) entries: usize,
    /// Most bytes of user memory the unused registrations may cover.
    pub(crate) bytes: usize,
}

impl CacheBound {
    /// A bound of `entries` registrations and no bound on their bytes.
    #[cfg(test)]
    pub(crate) fn entries(entries: usize) -> CacheBound {
        CacheBound {
            entries,
            bytes: usize::MAX,
        }
    }
}

pub(crate) struct MrCache {
    bound: CacheBound,
    entries: Vec<Entry>,
    clock: u64,
}

impl MrCache {
    pub(crate) fn new(bound: CacheBound) -> MrCache {
        MrCache {
            bound,
            entries: Vec::new(),
            clock: 0,
        }
    }

    fn find(&self, mr: MrId) -> Option<usize> {
        self.entries.iter().position(|e| e.mr == mr)
    }

    /// Whether the cache manages `mr` (its release goes through
    /// [`MrCache::release`]).
    pub(crate) fn owns(&self, mr: MrId) -> bool {
        self.find(mr).is_some()
    }

    /// Whether `mr`'s entry is used by a transfer (`None`: not cached).
    #[cfg(test)]
    pub(crate) fn in_use(&self, mr: MrId) -> Option<bool> {
        self.find(mr).map(|i| self.entries[i].refs > 0)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A registration of `rail` with `access` covering `want`, taken for
    /// one more transfer.
    pub(crate) fn lookup(&mut self, rail: RailId, access: Access, want: Region) -> Option<Hit> {
        self.clock += 1;
        let end = want.addr.checked_add(want.len)?;
        let e = self.entries.iter_mut().find(|e| {
            e.rail == rail
                && e.access == access
                && !e.stale
                && e.key.is_some()
                && e.region.addr <= want.addr
                && end <= e.region.addr + e.region.len
        })?;
        e.refs += 1;
        e.last_use = self.clock;
        Some(Hit {
            mr: e.mr,
            key: e.key.expect("checked above"),
            region: e.region,
        })
    }

    /// A new registration, asked of the driver for one transfer.
    pub(crate) fn insert(&mut self, mr: MrId, rail: RailId, access: Access, region: Region) {
        self.clock += 1;
        self.entries.push(Entry {
            mr,
            rail,
            access,
            region,
            refs: 1,
            key: None,
            stale: false,
            last_use: self.clock,
        });
    }

    /// The driver's answer for `mr`. A failed registration is never
    /// served; its transfer releases it.
    pub(crate) fn registered(&mut self, mr: MrId, result: Result<u64, i32>) {
        if let Some(i) = self.find(mr) {
            match result {
                Ok(key) => self.entries[i].key = Some(key),
                Err(_) => self.entries[i].stale = true,
            }
        }
    }

    /// A transfer is done with `mr`; pushes the registrations to release
    /// now (this one if stale, and unused ones beyond the bound).
    pub(crate) fn release(&mut self, mr: MrId, drop: &mut Vec<MrId>) {
        let Some(i) = self.find(mr) else {
            return;
        };
        let e = &mut self.entries[i];
        e.refs = e.refs.saturating_sub(1);
        // A registration larger than the bytes bound could only be kept by
        // evicting every other one, and would then be evicted itself.
        if e.refs == 0 && (e.stale || e.region.len > self.bound.bytes) {
            drop.push(self.entries.swap_remove(i).mr);
        }
        self.evict(drop);
    }

    /// Releases the least recently used unused registrations while those
    /// left exceed either bound. (The entries are few, bounded by the
    /// count and the transfers in flight: a scan is cheaper than an index.)
    fn evict(&mut self, drop: &mut Vec<MrId>) {
        loop {
            let (unused, bytes) = self
                .entries
                .iter()
                .filter(|e| e.refs == 0)
                .fold((0usize, 0usize), |(n, b), e| {
                    (n + 1, b.saturating_add(e.region.len))
                });
            if unused <= self.bound.entries && bytes <= self.bound.bytes {
                return;
            }
            let (i, _) = self
                .entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.refs == 0)
                .min_by_key(|(_, e)| e.last_use)
                .expect("counted above");
            drop.push(self.entries.swap_remove(i).mr);
        }
    }

    /// `[addr, addr + len)` went back to the system: every entry on its
    /// pages becomes invalid.
    pub(crate) fn invalidate(&mut self, addr: usize, len: usize, drop: &mut Vec<MrId>) {
        let lo = addr & !(PAGE - 1);
        let hi = addr.saturating_add(len).saturating_add(PAGE - 1) & !(PAGE - 1);
        self.invalidate_where(drop, |r| r.addr < hi && lo < r.addr + r.len.max(1));
    }

    /// Everything is invalid (release notifications were lost, or the
    /// rails close).
    pub(crate) fn invalidate_all(&mut self, drop: &mut Vec<MrId>) {
        self.invalidate_where(drop, |_| true);
    }

    fn invalidate_where(&mut self, drop: &mut Vec<MrId>, hit: impl Fn(Region) -> bool) {
        let mut i = 0;
        while i < self.entries.len() {
            let e = &mut self.entries[i];
            if hit(e.region) {
                if e.refs == 0 {
                    drop.push(self.entries.swap_remove(i).mr);
                    continue;
                }
                e.stale = true;
            }
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R0: RailId = RailId(0);

    fn reg(addr: usize, len: usize) -> Region {
        Region { addr, len }
    }

    /// A cache with entry `mr` registered for `region` and released once.
    fn cached(c: &mut MrCache, mr: u32, region: Region) {
        c.insert(MrId(mr), R0, Access::RemoteRead, region);
        c.registered(MrId(mr), Ok(100 + mr as u64));
        let mut d = Vec::new();
        c.release(MrId(mr), &mut d);
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn a_covering_registration_is_served() {
        let mut c = MrCache::new(CacheBound::entries(4));
        cached(&mut c, 1, reg(0x10000, 0x8000));
        let h = c
            .lookup(R0, Access::RemoteRead, reg(0x11000, 0x1000))
            .unwrap();
        assert_eq!(
            (h.mr, h.key, h.region),
            (MrId(1), 101, reg(0x10000, 0x8000))
        );
        // Not for another access, another rail, or a range it does not cover.
        assert!(c.lookup(R0, Access::Read, reg(0x11000, 0x1000)).is_none());
        assert!(c
            .lookup(RailId(1), Access::RemoteRead, reg(0x11000, 0x10))
            .is_none());
        assert!(c
            .lookup(R0, Access::RemoteRead, reg(0x17000, 0x1001))
            .is_none());
        assert!(c
            .lookup(R0, Access::RemoteRead, reg(usize::MAX - 1, 2))
            .is_none());
    }

    #[test]
    fn a_pending_registration_is_not_served() {
        let mut c = MrCache::new(CacheBound::entries(4));
        c.insert(MrId(1), R0, Access::Send, reg(0x1000, 0x1000));
        assert!(c.lookup(R0, Access::Send, reg(0x1000, 0x1000)).is_none());
        c.registered(MrId(1), Ok(5));
        assert_eq!(
            c.lookup(R0, Access::Send, reg(0x1000, 0x10)).unwrap().key,
            5
        );
    }

    #[test]
    fn a_failed_registration_is_released_with_its_transfer() {
        let mut c = MrCache::new(CacheBound::entries(4));
        c.insert(MrId(1), R0, Access::Send, reg(0x1000, 0x1000));
        c.registered(MrId(1), Err(-12));
        assert!(c.lookup(R0, Access::Send, reg(0x1000, 0x10)).is_none());
        let mut d = Vec::new();
        c.release(MrId(1), &mut d);
        assert_eq!(d, vec![MrId(1)]);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn unused_registrations_beyond_the_bound_go_least_recent_first() {
        let mut c = MrCache::new(CacheBound::entries(2));
        cached(&mut c, 1, reg(0x10000, 0x1000));
        cached(&mut c, 2, reg(0x20000, 0x1000));
        // Use 1 again, so 2 is the least recent.
        let h = c
            .lookup(R0, Access::RemoteRead, reg(0x10000, 0x1000))
            .unwrap();
        let mut d = Vec::new();
        c.release(h.mr, &mut d);
        assert!(d.is_empty());
        c.insert(MrId(3), R0, Access::RemoteRead, reg(0x30000, 0x1000));
        c.registered(MrId(3), Ok(3));
        // Three entries, one in use: within the bound of two unused.
        assert_eq!(c.len(), 3);
        c.release(MrId(3), &mut d);
        assert_eq!(d, vec![MrId(2)]);
        assert_eq!(c.len(), 2);
        assert!(c.owns(MrId(1)) && c.owns(MrId(3)) && !c.owns(MrId(2)));
    }

    #[test]
    fn unused_bytes_beyond_the_bound_go_least_recent_first() {
        let mut c = MrCache::new(CacheBound {
            entries: 8,
            bytes: 0x3000,
        });
        cached(&mut c, 1, reg(0x10000, 0x1000));
        cached(&mut c, 2, reg(0x20000, 0x2000));
        assert_eq!(c.len(), 2, "0x3000 bytes: within the bound");
        // 0x1000 more: the least recent (1) goes, 2 and 3 fit.
        c.insert(MrId(3), R0, Access::RemoteRead, reg(0x30000, 0x1000));
        c.registered(MrId(3), Ok(3));
        let mut d = Vec::new();
        c.release(MrId(3), &mut d);
        assert_eq!(d, vec![MrId(1)]);
        assert!(c.owns(MrId(2)) && c.owns(MrId(3)));
        // A registration larger than the bound is not kept once unused;
        // the smaller ones stay.
        d.clear();
        c.insert(MrId(4), R0, Access::RemoteRead, reg(0x40000, 0x4000));
        c.registered(MrId(4), Ok(4));
        assert!(c
            .lookup(R0, Access::RemoteRead, reg(0x40000, 0x10))
            .is_some());
        c.release(MrId(4), &mut d);
        assert!(d.is_empty(), "still in use by the lookup: {d:?}");
        c.release(MrId(4), &mut d);
        assert_eq!(d, vec![MrId(4)]);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn entries_in_use_are_never_evicted() {
        let mut c = MrCache::new(CacheBound::entries(0));
        for i in 0..3 {
            c.insert(
                MrId(i),
                R0,
                Access::Recv,
                reg(0x10000 * (i as usize + 1), 0x100),
            );
            c.registered(MrId(i), Ok(i as u64));
        }
        let mut d = Vec::new();
        c.release(MrId(1), &mut d);
        assert_eq!(d, vec![MrId(1)]);
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn invalidation_releases_unused_and_stales_entries_in_use() {
        let mut c = MrCache::new(CacheBound::entries(8));
        cached(&mut c, 1, reg(0x10000, 0x2000));
        c.insert(MrId(2), R0, Access::RemoteRead, reg(0x20010, 0x100));
        c.registered(MrId(2), Ok(2));
        cached(&mut c, 3, reg(0x40000, 0x1000));
        let mut d = Vec::new();
        // One byte released on each of the pages of 1 and 2.
        c.invalidate(0x11fff, 1, &mut d);
        c.invalidate(0x20ff0, 1, &mut d);
        assert_eq!(d, vec![MrId(1)]);
        // 2 is in use: not served any more, released when its transfer ends.
        assert!(c
            .lookup(R0, Access::RemoteRead, reg(0x20010, 0x10))
            .is_none());
        d.clear();
        c.release(MrId(2), &mut d);
        assert_eq!(d, vec![MrId(2)]);
        // The page after 3's registration is not 3's.
        c.invalidate(0x41000, 0x1000, &mut d);
        assert!(c.owns(MrId(3)));
    }

    #[test]
    fn invalidating_everything_after_an_overflow() {
        let mut c = MrCache::new(CacheBound::entries(8));
        cached(&mut c, 1, reg(0x10000, 0x2000));
        c.insert(MrId(2), R0, Access::Send, reg(0x80000, 0x100));
        c.registered(MrId(2), Ok(2));
        let mut d = Vec::new();
        c.invalidate_all(&mut d);
        assert_eq!(d, vec![MrId(1)]);
        assert!(c.lookup(R0, Access::Send, reg(0x80000, 0x100)).is_none());
        d.clear();
        c.release(MrId(2), &mut d);
        assert_eq!(d, vec![MrId(2)]);
        assert_eq!(c.len(), 0);
    }
}
