//! Memory as an application treats it: send buffers reused for later
//! sends, and memory of finished requests returned to the system (reported
//! to the node's registration cache as Open MPI's memory hooks would).
//!
//! Both are decided by the world's own random stream (`mrng`), so a seed
//! keeps the rest of its run. The checks they serve live in the driver
//! (no operation names a registration of released memory) and in
//! `checks.rs` (no registration is left at the end).

use super::fabric::{Ev, ReqKind, World};
use super::workload::Buf;
use std::collections::HashMap;

/// How a run treats memory.
pub(crate) struct MemPlan {
    /// Chance (‰) that a send reuses an earlier send's free buffer.
    pub(crate) reuse: u32,
    /// Chance (‰) that a finished request's memory is released.
    pub(crate) release: u32,
    /// Directed runs: message → the message whose send buffer it reuses
    /// (instead of the random choice).
    pub(crate) reuse_of: HashMap<usize, usize>,
}

impl Default for MemPlan {
    fn default() -> MemPlan {
        MemPlan {
            reuse: 500,
            release: 300,
            reuse_of: HashMap::new(),
        }
    }
}

impl World {
    /// Whether request `r` and every request reusing its memory are done.
    fn finished(&self, r: usize) -> bool {
        let q = &self.reqs[r];
        q.done.is_some() || q.refused
    }

    /// The memory of a new send of `data` on node `n`: often the front of
    /// an earlier send's buffer that nothing uses now. Returns the buffer
    /// and the request whose allocation it is (`None`: a new one).
    pub(crate) fn send_buf(&mut self, n: usize, msg: usize, data: Vec<u8>) -> (Buf, Option<usize>) {
        if let Some(&j) = self.mem.reuse_of.get(&msg) {
            let root = (0..self.reqs.len())
                .find(|&r| matches!(self.reqs[r].kind, ReqKind::Send { msg } if msg == j))
                .map(|r| self.reqs[r].root)
                .expect("the reused message was sent before");
            assert!(self.finished(root), "message {j}'s buffer is still in use");
            return (self.reqs[root].buf.reuse(&data), Some(root));
        }
        if data.is_empty() || !self.mrng.chance(self.mem.reuse) {
            return (Buf::new(data), None);
        }
        let free = |w: &World, r: usize| {
            let q = &w.reqs[r];
            q.node == n
                && q.root == r
                && matches!(q.kind, ReqKind::Send { .. })
                && q.buf.len() >= data.len()
                && w.finished(r)
                && q.lent_to.is_none_or(|a| w.finished(a))
        };
        // The most recent candidates first, as a loop reusing its buffer.
        let Some(root) = (0..self.reqs.len()).rev().take(64).find(|&r| free(self, r)) else {
            return (Buf::new(data), None);
        };
        (self.reqs[root].buf.reuse(&data), Some(root))
    }

    /// A request finished: its memory may go back to the system a little
    /// later.
    pub(crate) fn maybe_release(&mut self, n: usize, req: usize) {
        if self.mrng.chance(self.mem.release) {
            let d = self.mrng.range(0, 3_000);
            self.schedule(d, Ev::Release { node: n, req });
        }
    }

    /// The memory of finished request `req` is released, unless a live
    /// request reuses it by now.
    pub(crate) fn release(&mut self, n: usize, req: usize) {
        let root = self.reqs[req].root;
        if self.reqs[root]
            .lent_to
            .is_some_and(|a| a != req && !self.finished(a))
            || (root != req && !self.finished(root))
        {
            return;
        }
        let (addr, len) = (self.reqs[req].buf.addr(), self.reqs[req].buf.len());
        if len == 0 || !self.nodes[n].alive {
            return;
        }
        self.releases += 1;
        let node = &mut self.nodes[n];
        for g in node.mrs.values_mut() {
            if g.region.addr < addr + len && addr < g.region.addr + g.region.len {
                g.released = true;
            }
        }
        if let Some(r) = &node.ring {
            r.push(addr, len);
        }
    }

    /// End of the run: every node releases its cached registrations, as
    /// at finalize.
    pub(crate) fn release_caches(&mut self) {
        self.cached_at_end = self.nodes.iter().map(|n| n.core.mr_cached()).collect();
        for n in 0..self.nodes.len() {
            if self.nodes[n].alive {
                let mut out = crate::proto::Out::new();
                self.nodes[n].core.release_mr_cache(&mut out);
                self.run_out(n, out);
            }
        }
    }
}
