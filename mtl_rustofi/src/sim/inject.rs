//! How a post meets the run's faults: the directed test's hook decides,
//! or the run's random fault rates do ([`super::Faults`]).

use super::fabric::{Fate, Inject, PostInfo, PostKind, World};
use crate::proto::ids::OpId;
use crate::proto::{Out, PostError, Posted};
use crate::usermem::Region;

impl World {
    /// Asks the directed test's hook, if any, about a post.
    pub(super) fn ask(
        &mut self,
        n: usize,
        rail: usize,
        kind: PostKind,
        op: Option<OpId>,
        local: Option<Region>,
        packet: Option<(crate::wire::Kind, Option<i32>)>,
    ) -> Inject {
        let attempt = match op {
            Some(op) => {
                let a = self.nodes[n].attempts.entry(op).or_insert(0);
                *a += 1;
                *a
            }
            None => 0,
        };
        if kind == PostKind::PostRecv {
            self.nodes[n].rx_posts += 1;
        }
        let Some(hook) = self.hook.as_mut() else {
            return Inject::Normal;
        };
        let last_chunk = local.is_some_and(|l| {
            self.nodes[n]
                .user_mem
                .range(..=l.addr)
                .next_back()
                .is_some_and(|(&a, &len)| a + len == l.addr + l.len)
        });
        hook(&PostInfo {
            node: n,
            rail,
            kind,
            op,
            attempt,
            last_chunk,
            packet: packet.map(|p| p.0),
            tag: packet.and_then(|p| p.1),
            rx_post: self.nodes[n].rx_posts,
            len: local.map_or(0, |l| l.len),
            now: self.now,
        })
    }

    /// What a post meets: the hook's choice, or the run's random faults
    /// (an error completion at `err_rate`; a hard rejection only if
    /// `hard_ok`).
    pub(super) fn draw(&mut self, inj: Inject, err_rate: u32, hard_ok: bool) -> Inject {
        match inj {
            Inject::Normal => {
                if self.rng.chance(self.faults.post_again) {
                    Inject::Again
                } else if hard_ok && self.rng.chance(self.faults.post_hard) {
                    Inject::Hard(-5)
                } else if self.rng.chance(err_rate) {
                    Inject::CqError
                } else {
                    Inject::Clean
                }
            }
            i => i,
        }
    }

    /// Decides the fate of a post and reports a rejection to the core.
    pub(super) fn post_fate(
        &mut self,
        n: usize,
        what: Posted,
        inj: Inject,
        err_rate: u32,
        hard_ok: bool,
        out: &mut Out,
    ) -> Fate {
        let inj = self.draw(inj, err_rate, hard_ok);
        match inj {
            Inject::Again => {
                self.nodes[n]
                    .core
                    .on_post_failed(what, PostError::Again, out);
                Fate::Again
            }
            Inject::Hard(code) => {
                if let Posted::Op(op) = what {
                    *self.nodes[n].fails.entry(op).or_insert(0) += 1;
                }
                self.nodes[n]
                    .core
                    .on_post_failed(what, PostError::Hard(code), out);
                Fate::Hard
            }
            Inject::CqError => Fate::Posted(true),
            Inject::Normal
            | Inject::Clean
            | Inject::Damaged
            | Inject::Garbled
            | Inject::Misplaced => Fate::Posted(false),
        }
    }
}
