//! Posting to the libfabric rails: each operation the core asks for
//! (receive buffers, sends, injects, reads, tagged operations,
//! registrations) with its context and descriptor.

use super::*;

impl Driver {
    /// The context of an operation id (made the first time the id is
    /// used; the core's slab keeps ids dense).
    #[inline]
    pub(super) fn ctx(&mut self, op: OpId) -> *mut c_void {
        match self.op_ctx.get_mut(op.0 as usize) {
            Some(c) => &mut **c as *mut OpCtx as *mut c_void,
            None => self.grow_ctx(op),
        }
    }

    #[cold]
    pub(super) fn grow_ctx(&mut self, op: OpId) -> *mut c_void {
        while self.op_ctx.len() <= op.0 as usize {
            let next = OpId(self.op_ctx.len() as u32);
            self.op_ctx.push(OpCtx::boxed(Posted::Op(next)));
        }
        &mut *self.op_ctx[op.0 as usize] as *mut OpCtx as *mut c_void
    }

    /// The descriptor of a registration the core named; an unknown one
    /// (its registration failed) fails the post.
    #[inline]
    pub(super) fn desc(&self, mr: Option<MrId>) -> Result<*mut c_void, PostError> {
        match mr {
            None => Ok(ptr::null_mut()),
            Some(m) => self
                .mrs
                .get(m.0 as usize)
                .and_then(Option::as_ref)
                .map(MemoryRegion::desc)
                .ok_or(PostError::Hard(-(sys::FI_EINVAL as i32))),
        }
    }

    #[inline]
    pub(super) fn post_recv(&mut self, rail: RailId, slot: RxSlot) -> Result<(), PostError> {
        let ep = self.rails[rail.index()].ep().raw();
        let b = &mut self.rx[rail.index()][slot.0 as usize];
        let desc = b.mr.as_ref().map_or(ptr::null_mut(), |m| m.desc());
        // SAFETY: the buffer and its context are boxed and owned by the
        // driver until after the endpoint is closed (Driver::close).
        posted(unsafe {
            sys::fi_recv(
                ep,
                b.mem.as_mut_ptr() as *mut c_void,
                b.mem.len(),
                desc,
                u64::MAX,
                &mut *b.ctx as *mut OpCtx as *mut c_void,
            )
        })
    }

    #[inline]
    pub(super) fn send(
        &mut self,
        op: OpId,
        rail: RailId,
        dest: FiAddr,
        head: Region,
        mr: Option<MrId>,
        payload: Option<Region>,
    ) -> Result<(), PostError> {
        let desc = self.desc(mr)?;
        let ctx = self.ctx(op);
        let ep = self.rails[rail.index()].ep().raw();
        if let Some(p) = payload {
            let iov = [
                libc::iovec {
                    iov_base: head.addr as *mut c_void,
                    iov_len: head.len,
                },
                libc::iovec {
                    iov_base: p.addr as *mut c_void,
                    iov_len: p.len,
                },
            ];
            // The core sends from user buffers only on rails without
            // FI_MR_LOCAL, so the payload needs no descriptor.
            let mut descs = [desc, ptr::null_mut()];
            // SAFETY: the header lives in the core's bounce buffer and the
            // payload in the user's send buffer, both valid until this
            // operation is reported (the core's contract); the provider
            // copies the iov array itself.
            return posted(unsafe {
                sys::fi_sendv(
                    ep,
                    iov.as_ptr() as *const sys::iovec,
                    descs.as_mut_ptr(),
                    2,
                    dest.0,
                    ctx,
                )
            });
        }
        // SAFETY: the packet lives in the core's bounce buffer until this
        // operation is reported; the context is boxed by the driver.
        posted(unsafe { sys::fi_send(ep, head.addr as *const c_void, head.len, desc, dest.0, ctx) })
    }

    /// `fi_inject` of a packet in a bounce buffer: no descriptor (even
    /// under FI_MR_LOCAL) and no context, since it generates no completion.
    pub(super) fn inject(
        &mut self,
        rail: RailId,
        dest: FiAddr,
        head: Region,
    ) -> Result<(), PostError> {
        let ep = self.rails[rail.index()].ep().raw();
        // SAFETY: the packet lives in the core's bounce buffer for the
        // duration of the call; the provider has copied it when it returns.
        posted(unsafe { sys::fi_inject(ep, head.addr as *const c_void, head.len, dest.0) })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn read(
        &mut self,
        op: OpId,
        rail: RailId,
        src: FiAddr,
        local: Region,
        mr: Option<MrId>,
        remote_addr: u64,
        key: u64,
    ) -> Result<(), PostError> {
        let desc = self.desc(mr)?;
        let ctx = self.ctx(op);
        let ep = self.rails[rail.index()].ep().raw();
        // SAFETY: `local` lies in a matched receive buffer, valid until the
        // operation is reported (the core's contract).
        posted(unsafe {
            sys::fi_read(
                ep,
                local.addr as *mut c_void,
                local.len,
                desc,
                src.0,
                remote_addr,
                key,
                ctx,
            )
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn tagged(
        &mut self,
        op: OpId,
        rail: RailId,
        peer: FiAddr,
        local: Region,
        mr: Option<MrId>,
        tag: u64,
        send: bool,
    ) -> Result<(), PostError> {
        let desc = self.desc(mr)?;
        let ctx = self.ctx(op);
        let ep = self.rails[rail.index()].ep().raw();
        posted(if send {
            // SAFETY: `local` lies in the user's send buffer, valid until
            // the operation is reported.
            unsafe {
                sys::fi_tsend(
                    ep,
                    local.addr as *const c_void,
                    local.len,
                    desc,
                    peer.0,
                    tag,
                    ctx,
                )
            }
        } else {
            // SAFETY: `local` lies in a matched receive buffer, valid until
            // the operation is reported.
            unsafe {
                sys::fi_trecv(
                    ep,
                    local.addr as *mut c_void,
                    local.len,
                    desc,
                    peer.0,
                    tag,
                    0,
                    ctx,
                )
            }
        })
    }

    pub(super) fn register(
        &mut self,
        mr: MrId,
        rail: RailId,
        region: Region,
        access: Access,
        requested_key: u64,
    ) -> Result<u64, i32> {
        let rl = &self.rails[rail.index()];
        let access = match access {
            Access::Send => sys::FI_SEND,
            Access::Recv => sys::FI_RECV,
            Access::Read => sys::FI_READ,
            Access::RemoteRead => sys::FI_REMOTE_READ,
        } as u64;
        let bind = rl.caps.mr_endpoint.then(|| rl.ep());
        // SAFETY: the core keeps the memory alive until it releases the
        // registration (Deregister precedes freeing the memory).
        let r = unsafe {
            MemoryRegion::register(
                &rl.domain,
                region.addr as *const u8,
                region.len.max(1),
                access,
                requested_key,
                bind,
            )
        };
        match r {
            Ok(m) => {
                let key = m.key();
                let i = mr.0 as usize;
                if self.mrs.len() <= i {
                    self.mrs.resize_with(i + 1, || None);
                }
                self.mrs[i] = Some(m);
                Ok(key)
            }
            Err(e) => Err(-e.code),
        }
    }
}
