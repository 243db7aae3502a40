//! Tests of the matcher: MPI ordering cases, and (in `differential`)
//! randomized comparisons with a reference model.

use super::*;

#[test]
fn emptied_bins_are_reused_not_reallocated() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    let env = Envelope {
        ctx: 1,
        src: 2,
        tag: 3,
    };
    for i in 0..100u32 {
        assert!(m.post(Selector::from_mpi(1, 2, 3), i).is_err());
        assert_eq!(m.take_posted(&env), Some(i));
        assert!(m.arrive(env, i).is_none());
        assert!(m.post(Selector::from_mpi(1, 2, 3), i).is_ok());
    }
    assert_eq!(m.container_counts(), (0, 0, 0, 0));
    // The one bin of each side stays in place, empty, for the next message.
    assert_eq!(
        (m.posted_bins.allocated(), m.unexpected_bins.allocated()),
        (1, 1)
    );
    assert_eq!(
        (m.posted_bins.spare_len(), m.unexpected_bins.spare_len()),
        (0, 0)
    );
}

fn env(ctx: u32, src: i32, tag: i32) -> Envelope {
    Envelope { ctx, src, tag }
}

fn spec(ctx: u32, src: i32, tag: i32) -> Selector {
    Selector {
        ctx,
        src: Source::Rank(src),
        tag: Tag::Value(tag),
    }
}

fn sel(ctx: u32, src: Source, tag: Tag) -> Selector {
    Selector { ctx, src, tag }
}

type M = Matcher<u64, u64>;

#[test]
fn from_mpi_maps_wildcards() {
    assert_eq!(
        Selector::from_mpi(3, ANY, ANY),
        sel(3, Source::Any, Tag::Any)
    );
    assert_eq!(Selector::from_mpi(3, 2, 7), spec(3, 2, 7));
    assert_eq!(
        Selector::from_mpi(0, 1, -12),
        sel(0, Source::Rank(1), Tag::Value(-12))
    );
    assert_eq!(
        Selector::from_mpi(0, ANY, 5),
        sel(0, Source::Any, Tag::Value(5))
    );
}

#[test]
fn same_envelope_order_preserved() {
    let mut m = M::new();
    for u in 0..5 {
        assert_eq!(m.arrive(env(0, 1, 4), u), None);
    }
    for u in 0..5 {
        assert_eq!(
            m.post(spec(0, 1, 4), 100 + u),
            Ok((100 + u, env(0, 1, 4), u))
        );
    }
    for r in 0..5 {
        assert!(m.post(spec(0, 1, 4), r).is_err());
    }
    for r in 0..5 {
        assert_eq!(m.arrive(env(0, 1, 4), 50 + r), Some((r, 50 + r)));
    }
    assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
    m.check_invariants();
}

#[test]
fn any_source_and_any_tag() {
    let mut m = M::new();
    // Posted side.
    m.post(sel(0, Source::Any, Tag::Value(5)), 1).unwrap_err();
    m.post(sel(0, Source::Rank(2), Tag::Any), 2).unwrap_err();
    m.post(sel(0, Source::Any, Tag::Any), 3).unwrap_err();
    assert_eq!(m.arrive(env(0, 7, 5), 10), Some((1, 10)));
    assert_eq!(m.arrive(env(0, 2, 9), 11), Some((2, 11)));
    assert_eq!(m.arrive(env(0, 4, 0), 12), Some((3, 12)));
    assert_eq!(m.posted_len(), 0);
    // Unexpected side.
    assert_eq!(m.arrive(env(0, 3, 8), 20), None);
    assert_eq!(m.arrive(env(0, 6, 5), 21), None);
    assert_eq!(
        m.post(sel(0, Source::Any, Tag::Value(5)), 4),
        Ok((4, env(0, 6, 5), 21))
    );
    assert_eq!(
        m.post(sel(0, Source::Rank(3), Tag::Any), 5),
        Ok((5, env(0, 3, 8), 20))
    );
    m.check_invariants();
}

#[test]
fn any_tag_never_matches_negative_tags() {
    let mut m = M::new();
    assert_eq!(m.arrive(env(0, 1, -5), 1), None);
    assert_eq!(m.probe(&sel(0, Source::Any, Tag::Any)), None);
    assert_eq!(m.probe(&sel(0, Source::Rank(1), Tag::Any)), None);
    let id = m.post(sel(0, Source::Rank(1), Tag::Any), 10).unwrap_err();
    // The negative-tag message stays unexpected even with a wildcard posted.
    assert_eq!(m.arrive(env(0, 1, -3), 2), None);
    assert_eq!(m.unexpected_len(), 2);
    // Explicit negative tags match, with any source too.
    assert_eq!(m.post(spec(0, 1, -5), 11), Ok((11, env(0, 1, -5), 1)));
    assert_eq!(
        m.post(sel(0, Source::Any, Tag::Value(-3)), 12),
        Ok((12, env(0, 1, -3), 2))
    );
    assert_eq!(m.arrive(env(0, 1, 0), 3), Some((10, 3)));
    assert_eq!(m.cancel(id), None);
    m.check_invariants();
}

#[test]
fn earliest_posted_wins_across_specific_and_wildcard() {
    let mut m = M::new();
    m.post(spec(0, 0, 1), 1).unwrap_err();
    m.post(sel(0, Source::Rank(0), Tag::Any), 2).unwrap_err();
    m.post(spec(0, 0, 2), 3).unwrap_err();
    // Tag 2: the wildcard was posted before the tag-2 receive.
    assert_eq!(m.arrive(env(0, 0, 2), 10), Some((2, 10)));
    // Tag 1: the tag-1 receive is the only eligible one left.
    assert_eq!(m.arrive(env(0, 0, 1), 11), Some((1, 11)));
    assert_eq!(m.arrive(env(0, 0, 2), 12), Some((3, 12)));
    assert_eq!(m.posted_len(), 0);
    m.check_invariants();
}

#[test]
fn wildcard_between_specific_receives() {
    let mut m = M::new();
    m.post(spec(0, 3, 5), 1).unwrap_err();
    m.post(sel(0, Source::Any, Tag::Value(5)), 2).unwrap_err();
    m.post(spec(0, 3, 5), 3).unwrap_err();
    assert_eq!(m.arrive(env(0, 3, 5), 10), Some((1, 10)));
    assert_eq!(m.arrive(env(0, 3, 5), 11), Some((2, 11)));
    assert_eq!(m.arrive(env(0, 3, 5), 12), Some((3, 12)));
    // Specific posted first beats a later wildcard.
    m.post(spec(0, 3, 5), 4).unwrap_err();
    m.post(sel(0, Source::Any, Tag::Any), 5).unwrap_err();
    assert_eq!(m.arrive(env(0, 3, 5), 13), Some((4, 13)));
    assert_eq!(m.arrive(env(0, 3, 5), 14), Some((5, 14)));
    m.check_invariants();
}

#[test]
fn unexpected_matched_by_tag_in_reverse_order() {
    let mut m = M::new();
    for t in 0..4 {
        assert_eq!(m.arrive(env(0, 2, t), 100 + t as u64), None);
    }
    for t in (0..4).rev() {
        assert_eq!(
            m.post(spec(0, 2, t), t as u64),
            Ok((t as u64, env(0, 2, t), 100 + t as u64))
        );
        m.check_invariants();
    }
    assert_eq!(m.unexpected_len(), 0);
    assert_eq!(m.container_counts(), (0, 0, 0, 0));
}

#[test]
fn wildcard_post_takes_earliest_arrival_across_bins() {
    let mut m = M::new();
    m.arrive(env(0, 1, 3), 1);
    m.arrive(env(0, 0, -2), 2);
    m.arrive(env(0, 0, 4), 3);
    m.arrive(env(0, 1, 3), 4);
    m.arrive(env(0, 2, 4), 5);
    let any = sel(0, Source::Any, Tag::Any);
    assert_eq!(m.post(any, 0), Ok((0, env(0, 1, 3), 1)));
    assert_eq!(m.post(any, 0), Ok((0, env(0, 0, 4), 3)));
    assert_eq!(
        m.post(sel(0, Source::Any, Tag::Value(4)), 0),
        Ok((0, env(0, 2, 4), 5))
    );
    assert_eq!(m.post(any, 0), Ok((0, env(0, 1, 3), 4)));
    assert!(m.post(any, 0).is_err());
    assert_eq!(m.unexpected_len(), 1);
    m.check_invariants();
}

#[test]
fn probe_does_not_remove_take_does() {
    let mut m = M::new();
    m.arrive(env(1, 0, 9), 7);
    m.arrive(env(1, 0, 9), 8);
    let s = sel(1, Source::Any, Tag::Any);
    assert_eq!(m.probe(&s), Some((env(1, 0, 9), &7)));
    assert_eq!(m.probe(&spec(1, 0, 9)), Some((env(1, 0, 9), &7)));
    assert_eq!(m.probe(&spec(1, 0, 8)), None);
    assert_eq!(m.unexpected_len(), 2);
    assert_eq!(m.take_unexpected(&s), Some((env(1, 0, 9), 7)));
    assert_eq!(m.take_unexpected(&spec(1, 0, 9)), Some((env(1, 0, 9), 8)));
    assert_eq!(m.take_unexpected(&s), None);
    assert_eq!(m.unexpected_len(), 0);
    assert_eq!(m.container_counts(), (0, 0, 0, 0));
}

#[test]
fn cancel_removes_posted_receive() {
    let mut m = M::new();
    let a = m.post(spec(0, 1, 1), 1).unwrap_err();
    let b = m.post(spec(0, 1, 1), 2).unwrap_err();
    let w = m.post(sel(0, Source::Any, Tag::Any), 3).unwrap_err();
    assert_eq!(m.cancel(a), Some(1));
    assert_eq!(m.cancel(w), Some(3));
    assert_eq!(m.cancel(a), None);
    assert_eq!(m.posted_len(), 1);
    assert_eq!(m.arrive(env(0, 1, 1), 10), Some((2, 10)));
    // No receive left: the next message is unexpected.
    assert_eq!(m.arrive(env(0, 1, 1), 11), None);
    assert_eq!(m.arrive(env(0, 5, 0), 12), None);
    assert_eq!(m.cancel(b), None);
    for at in [Loc::Specific(env(0, 1, 1)), Loc::Wild(0), Loc::Wild(9)] {
        assert_eq!(m.cancel(PostId { seq: 12345, at }), None);
    }
    assert_eq!(m.container_counts(), (0, 0, 2, 1));
    m.check_invariants();
}

#[test]
fn cancel_of_matched_id_returns_none() {
    let mut m = M::new();
    let a = m.post(spec(0, 0, 0), 1).unwrap_err();
    let w = m.post(sel(0, Source::Any, Tag::Value(3)), 2).unwrap_err();
    assert_eq!(m.arrive(env(0, 0, 0), 10), Some((1, 10)));
    assert_eq!(m.arrive(env(0, 4, 3), 11), Some((2, 11)));
    assert_eq!(m.cancel(a), None);
    assert_eq!(m.cancel(w), None);
    m.check_invariants();
}

#[test]
fn contexts_are_isolated() {
    let mut m = M::new();
    m.post(spec(1, 0, 0), 1).unwrap_err();
    m.post(sel(1, Source::Any, Tag::Any), 2).unwrap_err();
    assert_eq!(m.arrive(env(2, 0, 0), 10), None);
    assert_eq!(m.probe(&sel(1, Source::Any, Tag::Any)), None);
    assert!(m.post(sel(3, Source::Any, Tag::Any), 3).is_err());
    assert_eq!(
        m.post(sel(2, Source::Any, Tag::Any), 4),
        Ok((4, env(2, 0, 0), 10))
    );
    assert_eq!(m.arrive(env(1, 0, 0), 11), Some((1, 11)));
    assert_eq!(m.arrive(env(1, 0, 0), 12), Some((2, 12)));
    assert_eq!(m.posted_len(), 1);
    m.check_invariants();
}

#[test]
fn drain_ctx_and_drain_all() {
    let mut m = M::new();
    let a = m.post(spec(0, 0, 0), 1).unwrap_err();
    m.post(sel(0, Source::Any, Tag::Any), 2).unwrap_err();
    m.post(spec(0, 1, 0), 3).unwrap_err();
    m.post(spec(1, 1, 0), 4).unwrap_err();
    m.arrive(env(0, 3, -1), 20);
    m.arrive(env(0, 2, -7), 21);
    m.arrive(env(0, 3, -1), 22);
    m.arrive(env(1, 3, 3), 23);
    let (posted, unexpected) = m.drain_ctx(0);
    assert_eq!(posted, vec![1, 2, 3]);
    assert_eq!(
        unexpected,
        vec![
            (env(0, 3, -1), 20),
            (env(0, 2, -7), 21),
            (env(0, 3, -1), 22)
        ]
    );
    assert_eq!(m.cancel(a), None);
    assert_eq!((m.posted_len(), m.unexpected_len()), (1, 1));
    assert_eq!(m.container_counts(), (1, 0, 1, 1));
    m.check_invariants();
    assert_eq!(m.drain_ctx(0), (vec![], vec![]));

    let (posted, unexpected) = m.drain_all();
    assert_eq!(posted, vec![4]);
    assert_eq!(unexpected, vec![(env(1, 3, 3), 23)]);
    assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
    assert_eq!(m.container_counts(), (0, 0, 0, 0));
    m.check_invariants();
}

#[test]
fn empty_bins_are_removed() {
    let mut m = M::new();
    // Under Miri 20 tags: 40 keys each through the posted and the
    // unexpected bins, well past the `PARKED` bound of each table
    // (evictions, spare containers reused), and enough distinct keys for a
    // lookup to meet another key's hash tag and probe on, as with 100 tags.
    let tags = if cfg!(miri) { 20 } else { 100 };
    for t in 0..tags {
        m.arrive(env(0, 0, t), t as u64);
        m.post(spec(0, 0, t), 0).unwrap();
        m.post(spec(0, 1, t), 0).unwrap_err();
        m.arrive(env(0, 1, t), 0).unwrap();
        m.post(sel(0, Source::Any, Tag::Value(t)), 0).unwrap_err();
        m.arrive(env(0, 5, t), 0).unwrap();
        let id = m.post(spec(2, 0, t), 0).unwrap_err();
        m.cancel(id).unwrap();
        let id = m.post(sel(2, Source::Any, Tag::Any), 0).unwrap_err();
        m.cancel(id).unwrap();
        m.arrive(env(3, 0, t), 0);
        m.take_unexpected(&sel(3, Source::Rank(0), Tag::Any))
            .unwrap();
    }
    assert_eq!(m.container_counts(), (0, 0, 0, 0));
    // Three posted and three unexpected keys were used per tag; a few
    // empty containers stay.
    for n in [
        m.posted_bins.allocated(),
        m.posted_wild.allocated(),
        m.unexpected_bins.allocated(),
        m.unexpected_order.allocated(),
    ] {
        assert!(n <= bins::PARKED, "{n} containers kept");
    }
    assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
    m.check_invariants();
}

mod differential;
mod wild_contexts;
