//! Reading the completion queues: completions and errors handed to the
//! core, and the operation contexts shrunk after a burst.

use super::*;

impl Driver {
    /// Drains the completion queues of the rails the core wants polled,
    /// reporting every completion and executing what follows. Returns the
    /// number of completions.
    pub(crate) fn poll(&mut self, core: &mut Core, out: &mut Out) -> usize {
        let mut total = 0;
        for r in 0..self.rails.len() {
            let rail = RailId(r as u8);
            if core.rail_needs_poll(rail) {
                total += self.poll_rail(rail, core, out);
            }
        }
        total += self.poll_local(core, out);
        if self.op_ctx.len() > OP_CTX_KEPT {
            self.shrink_ctx(core.op_ids_bound());
        }
        total
    }

    /// Reads the own shared-memory rail's rings, executing what follows.
    /// Returns the number of packets read.
    #[inline]
    pub(crate) fn poll_local(&mut self, core: &mut Core, out: &mut Out) -> usize {
        let rail = RailId(self.local_id);
        let local = self.local.as_mut().map_or(0, |l| l.poll(rail, core, out));
        if local > 0 && !out.actions.is_empty() {
            self.execute(core, out);
        }
        local
    }

    /// Frees the contexts a burst made once the core's operation ids fall
    /// back below half of them: no posted operation has an id at or above
    /// `bound`, so none of those contexts is in the provider's hands.
    #[cold]
    fn shrink_ctx(&mut self, bound: usize) {
        if bound < self.op_ctx.len() / 2 {
            self.op_ctx.truncate(bound.max(OP_CTX_KEPT));
            self.op_ctx.shrink_to_fit();
        }
    }

    fn poll_rail(&mut self, rail: RailId, core: &mut Core, out: &mut Out) -> usize {
        let mut total = 0;
        loop {
            let mut entries = std::mem::take(&mut self.scratch);
            let n = match self.rails[rail.index()].cq.read(&mut entries) {
                Ok(n) => n,
                Err(r) if r == -(sys::FI_EAVAIL as i64) => {
                    self.scratch = entries;
                    if !self.handle_error(rail, core, out) {
                        // The error entry the queue announced could not be
                        // read: stop rather than spin on the announcement
                        // with the progress token held (the next poll
                        // tries again; the queue is stuck while it lasts).
                        return total;
                    }
                    self.execute(core, out);
                    total += 1;
                    continue;
                }
                Err(r) => {
                    self.scratch = entries;
                    crate::log::error(&format!(
                        "fi_cq_read on {} failed: {}",
                        self.rails[rail.index()].profile.provider,
                        strerror(-r as i32)
                    ));
                    return total;
                }
            };
            for e in &entries[..n] {
                self.handle_completion(e, core, out);
            }
            let full = n == entries.len();
            self.scratch = entries;
            total += n;
            if n > 0 {
                self.execute(core, out);
            }
            if !full {
                return total;
            }
        }
    }

    fn what(ctx: *mut c_void) -> Posted {
        // SAFETY: every operation we post carries a boxed OpCtx of ours as
        // its context; the provider hands it back unchanged, and the box
        // lives as long as the driver.
        unsafe { (*(ctx as *const OpCtx)).what }
    }

    #[inline]
    fn handle_completion(&self, e: &CqEntry, core: &mut Core, out: &mut Out) {
        if e.op_context.is_null() {
            return;
        }
        match Self::what(e.op_context) {
            Posted::Rx(rail, slot) => {
                let b = &self.rx[rail.index()][slot.0 as usize];
                let len = e.len.min(b.mem.len());
                core.on_packet(rail, slot, &b.mem[..len], out);
            }
            Posted::Op(op) => core.on_complete(op, out),
        }
    }

    /// Reads and reports one error entry; false if none could be read.
    fn handle_error(&mut self, rail: RailId, core: &mut Core, out: &mut Out) -> bool {
        let Some(err) = self.rails[rail.index()].cq.read_error() else {
            // Said once: every later poll of that queue may meet the same.
            static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                crate::log::error(&format!(
                    "fi_cq_read on {} announced an error entry that fi_cq_readerr did not \
                     return: no later completion of that queue can be read while it does",
                    self.rails[rail.index()].profile.provider
                ));
            }
            return false;
        };
        if err.context.is_null() {
            crate::log::error(&format!(
                "completion error without a context: {}",
                err.message
            ));
            return true;
        }
        match Self::what(err.context) {
            Posted::Rx(rail, slot) => {
                let canceled = err.err == sys::FI_ECANCELED as i32;
                // A truncated receive's placed bytes start at the front:
                // the header of the packet the provider lost names what
                // to ask for again. After another error the length says
                // nothing of where bytes went, and the buffer may hold the
                // previous packet's header still.
                let b = &self.rx[rail.index()][slot.0 as usize];
                let placed = if err.err == sys::FI_ETRUNC as i32 {
                    err.len.min(b.mem.len())
                } else {
                    0
                };
                let got = &b.mem[..placed];
                core.on_rx_error(rail, slot, canceled, &err.message, got, out);
            }
            Posted::Op(op) if err.err == sys::FI_ECANCELED as i32 => core.on_canceled(op, out),
            Posted::Op(op) => core.on_error(op, &err.message, out),
        }
        true
    }
}
