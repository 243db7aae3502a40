//! Registrations of rendezvous user buffers: served from the registration
//! cache ([`super::mrcache`]) when it is on, else made for each transfer
//! and released when it ends, as the rails' bounce buffers never are.
//!
//! The cache is on only when memory returned to the system is reported
//! (Open MPI's memory hooks feed a [`ReleaseRing`]); the ring is drained
//! before every lookup, so a notice pushed before a command was issued is
//! always applied before that command is served.

use super::action::{Access, Out};
use super::ids::{MrId, RailId};
use super::mrcache::{CacheBound, MrCache};
use super::txbuf::MrUse;
use super::{Core, Stats};
use crate::memrelease::{Drained, ReleaseRing};
use crate::usermem::Region;
use std::sync::Arc;

pub(super) struct Cached {
    cache: MrCache,
    ring: Arc<ReleaseRing>,
    /// Registrations the cache gave up, to release (kept to reuse the
    /// allocation).
    drop: Vec<MrId>,
}

impl Cached {
    /// Applies the memory-release notices queued so far.
    fn drain(&mut self) {
        let (cache, drop) = (&mut self.cache, &mut self.drop);
        if self
            .ring
            .drain(|addr, len| cache.invalidate(addr, len, drop))
            == Drained::Overflow
        {
            cache.invalidate_all(drop);
        }
    }
}

/// A user buffer's registration for one transfer.
pub(super) enum UserMr {
    /// Served from the cache: usable at once.
    Hit { mr: MrId, key: u64, base: usize },
    /// Asked of the driver; `Core::on_registered` follows.
    Pending(MrId),
}

impl Core {
    /// Keeps unused registrations of user buffers within `bound`,
    /// invalidated through the notices pushed on `ring`.
    pub(crate) fn enable_mr_cache(&mut self, bound: CacheBound, ring: Arc<ReleaseRing>) {
        self.mr_cache = Some(Cached {
            cache: MrCache::new(bound),
            ring,
            drop: Vec::new(),
        });
    }

    /// A registration of `region` for a rendezvous (`what` says which).
    pub(super) fn register_user(
        &mut self,
        rail: RailId,
        region: Region,
        access: Access,
        what: MrUse,
        out: &mut Out,
    ) -> UserMr {
        if let Some(c) = &mut self.mr_cache {
            c.drain();
            let hit = c.cache.lookup(rail, access, region);
            self.release_dropped(out);
            if let Some(h) = hit {
                Stats::add(&self.stats.mr_hits, 1);
                return UserMr::Hit {
                    mr: h.mr,
                    key: h.key,
                    base: h.region.addr,
                };
            }
        }
        Stats::add(&self.stats.mr_reg, 1);
        let mr = self.register(rail, region, access, what, out);
        if let Some(c) = &mut self.mr_cache {
            c.cache.insert(mr, rail, access, region);
        }
        UserMr::Pending(mr)
    }

    /// The driver reported a user buffer's registration.
    pub(super) fn user_registered(&mut self, mr: MrId, result: Result<u64, i32>) {
        if let Some(c) = &mut self.mr_cache {
            c.cache.registered(mr, result);
        }
    }

    /// A transfer is done with its registration.
    pub(super) fn release_user(&mut self, mr: MrId, out: &mut Out) {
        if let Some(c) = &mut self.mr_cache {
            if c.cache.owns(mr) {
                c.cache.release(mr, &mut c.drop);
                self.release_dropped(out);
                return;
            }
        }
        self.deregister(mr, out);
    }

    /// Releases every cached registration not in use (those in use go when
    /// their transfers end). Called before the rails close.
    pub(crate) fn release_mr_cache(&mut self, out: &mut Out) {
        if let Some(c) = &mut self.mr_cache {
            c.drain();
            c.cache.invalidate_all(&mut c.drop);
            self.release_dropped(out);
        }
    }

    fn release_dropped(&mut self, out: &mut Out) {
        let Some(c) = &mut self.mr_cache else {
            return;
        };
        let mut drop = std::mem::take(&mut c.drop);
        for mr in drop.drain(..) {
            self.deregister(mr, out);
        }
        if let Some(c) = &mut self.mr_cache {
            c.drop = drop;
        }
    }

    /// Whether a transfer still uses `mr` (a cached registration between
    /// transfers does not count).
    #[cfg(test)]
    pub(crate) fn mr_in_transfer(&self, mr: MrId) -> bool {
        self.mr_cache
            .as_ref()
            .is_none_or(|c| c.cache.in_use(mr).unwrap_or(true))
    }

    /// Registrations the cache holds (in use or not).
    #[cfg(test)]
    pub(crate) fn mr_cached(&self) -> usize {
        self.mr_cache.as_ref().map_or(0, |c| c.cache.len())
    }
}
