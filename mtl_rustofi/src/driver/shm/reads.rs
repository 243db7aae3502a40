//! The read rendezvous' reads on the own rail: cross-memory reads from
//! the sender's buffer, named by its pid (the key) and address. The reads
//! that come together in one round (a window of mid-sized messages whose
//! RTS arrived in the same poll) are made with one `process_vm_readv` per
//! run of reads from the same peer ([`cma::read_many`]): the call costs
//! about a microsecond whatever it moves, as much as copying 16 KiB.

use super::{cma, ShmRail};
use crate::proto::ids::{FiAddr, OpId, RailId};
use crate::proto::{Action, Core, Out, PostError, Posted};
use crate::usermem::Region;

/// One read of the read rendezvous (what [`Action::Read`] asks of this
/// rail).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Read {
    pub(crate) src: FiAddr,
    pub(crate) local: Region,
    pub(crate) remote_addr: u64,
    /// The sender's pid.
    pub(crate) key: u64,
}

/// A read action with its rail and operation.
#[derive(Clone, Copy)]
pub(crate) struct LocalRead {
    rail: RailId,
    pub(super) op: OpId,
    pub(super) read: Read,
}

/// The read an action asks for, if it is one.
#[inline]
pub(crate) fn local_read(a: &Action) -> Option<LocalRead> {
    match *a {
        Action::Read {
            op,
            rail,
            src,
            local,
            remote_addr,
            key,
            ..
        } => Some(LocalRead {
            rail,
            op,
            read: Read {
                src,
                local,
                remote_addr,
                key,
            },
        }),
        _ => None,
    }
}

/// Reports a read's outcome to the core.
#[inline]
pub(super) fn report(core: &mut Core, out: &mut Out, op: OpId, r: Result<(), PostError>) {
    match r {
        Ok(()) => core.on_complete(op, out),
        Err(e) => core.on_post_failed(Posted::Op(op), e, out),
    }
}

/// Executes the own rail's read `first` and the reads of that rail that
/// follow it in `out.actions` from `next` on, together
/// ([`ShmRail::read_batch`]); returns the index of the first action not
/// taken.
#[inline(never)]
pub(crate) fn execute_reads(
    l: &mut ShmRail,
    first: LocalRead,
    mut next: usize,
    core: &mut Core,
    out: &mut Out,
) -> usize {
    let mut taken = [first; cma::MANY];
    let mut n = 1;
    while n < cma::MANY {
        match out.actions.get(next).and_then(local_read) {
            Some(r) if r.rail == first.rail => {
                taken[n] = r;
                n += 1;
                next += 1;
            }
            _ => break,
        }
    }
    let mut reads = [first.read; cma::MANY];
    for (r, t) in reads.iter_mut().zip(&taken[..n]) {
        *r = t.read;
    }
    // Reported once every read is made: a completion may append actions
    // (the read's acknowledgement), which run after these, as they would
    // have one read at a time.
    l.read_batch(&reads[..n], |i, r| report(core, out, taken[i].op, r));
    next
}

impl ShmRail {
    /// The read rendezvous' read: `key` is the sender's pid.
    pub(crate) fn read(
        &mut self,
        src: FiAddr,
        local: Region,
        remote_addr: u64,
        key: u64,
    ) -> Result<(), PostError> {
        // A key that is not the peer's pid never reads another process.
        let Some(pid) = self.reader_pid(src, key) else {
            return Err(self.read_refused(src, key));
        };
        // SAFETY: `local` lies in a matched receive buffer, writable until
        // the operation is reported (the core's contract).
        unsafe { cma::read(pid, local, remote_addr) }.map_err(|e| PostError::Hard(-e))
    }

    /// The reads of the read rendezvous that came together (at most
    /// [`cma::MANY`]), each as `read` would make it: one system call for
    /// each run of reads from the same peer, then `read` for whatever that
    /// call left (which also names the error). `done(i, outcome)` reports
    /// read `i`, in order, once every read has been made.
    pub(crate) fn read_batch(
        &mut self,
        reads: &[Read],
        mut done: impl FnMut(usize, Result<(), PostError>),
    ) {
        let mut outcome = [Ok(()); cma::MANY];
        let mut k = 0;
        while k < reads.len() {
            let pid = self.reader_pid(reads[k].src, reads[k].key);
            let mut end = k + 1;
            while end < reads.len()
                && pid.is_some()
                && self.reader_pid(reads[end].src, reads[end].key) == pid
            {
                end += 1;
            }
            let mut got = match pid {
                Some(pid) if end - k > 1 => {
                    let mut parts = [(Region { addr: 0, len: 0 }, 0u64); cma::MANY];
                    for (p, r) in parts.iter_mut().zip(&reads[k..end]) {
                        *p = (r.local, r.remote_addr);
                    }
                    // SAFETY: each `local` lies in a matched receive buffer,
                    // writable until its operation is reported (the core's
                    // contract), which is after this returns.
                    unsafe { cma::read_many(pid, &parts[..end - k]) }
                }
                _ => 0,
            };
            for (r, o) in reads[k..end].iter().zip(&mut outcome[k..end]) {
                let covered = got.min(r.local.len);
                got -= covered;
                // An empty read too: `read` checks its key.
                if covered < r.local.len || r.local.len == 0 {
                    *o = self.read(
                        r.src,
                        r.local.slice(covered, r.local.len),
                        r.remote_addr + covered as u64,
                        r.key,
                    );
                }
            }
            k = end;
        }
        for (i, o) in outcome[..reads.len()].iter().enumerate() {
            done(i, *o);
        }
    }

    /// A read the rail cannot make: says why, once per peer (a large
    /// message asks for many), and fails it (`EINVAL`). The core answers
    /// the read rendezvous of a peer this rank cannot read as message
    /// rendezvous (`reads_from`), so such a read is a corrupted request.
    #[cold]
    #[inline(never)]
    fn read_refused(&mut self, src: FiAddr, key: u64) -> PostError {
        let cma_ok = self.cma_ok;
        if let Some(p) = self.peers.get_mut(src.0 as usize).and_then(Option::as_mut) {
            if !p.read_refusal_said {
                p.read_refusal_said = true;
                let why = if !cma_ok {
                    "cross-memory attach is not permitted in this process".to_string()
                } else if !p.readable {
                    "cross-memory attach does not reach it from here (another PID namespace, \
                     or its check failed)"
                        .to_string()
                } else {
                    format!("the read's key {key} is not its pid")
                };
                crate::log::error(&format!(
                    "a read from the memory of local rank {} was asked for, but {why} (a \
                     corrupted request): the message fails",
                    p.rank
                ));
            }
        }
        PostError::Hard(-libc::EINVAL)
    }

    /// The pid of the peer at `src`, if `key` is it and cross-memory
    /// attach was found to reach it there.
    pub(super) fn reader_pid(&self, src: FiAddr, key: u64) -> Option<u32> {
        match self.peers.get(src.0 as usize).and_then(Option::as_ref) {
            Some(p) if p.readable && p.pid as u64 == key => Some(p.pid),
            _ => None,
        }
    }
}
