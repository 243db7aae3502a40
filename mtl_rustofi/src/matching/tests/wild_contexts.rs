//! An arrival skips the wildcard path unless its own context holds
//! wildcard receives ([`super::super::wild`]).

use super::*;

#[test]
fn a_wildcard_in_another_context_leaves_arrivals_on_the_specific_path() {
    let mut m = M::new();
    // What the shim keeps posted on Open MPI 5: any source, its own context.
    let excid = m.post(sel(9, Source::Any, Tag::Value(0)), 900).unwrap_err();
    m.post(spec(1, 2, 3), 1).unwrap_err();
    // Context 1 holds no wildcard: the specific path answers.
    assert_eq!(m.take_posted_unless_wild(&env(1, 2, 3)), Some(Some(1)));
    assert_eq!(m.take_posted_unless_wild(&env(1, 2, 3)), Some(None));
    // Context 9 does: the caller must take the wildcard path.
    assert_eq!(m.take_posted_unless_wild(&env(9, 5, 0)), None);
    assert_eq!(m.take_posted(&env(9, 5, 0)), Some(900));
    m.check_invariants();
    assert!(!m.is_posted(excid));
    // With no wildcard left anywhere, context 9 is specific again.
    assert_eq!(m.wild_in, WildIn::Nowhere);
    assert_eq!(m.take_posted_unless_wild(&env(9, 5, 0)), Some(None));
}

#[test]
fn a_wildcard_posted_earlier_in_the_same_context_still_wins() {
    let mut m = M::new();
    m.post(sel(9, Source::Any, Tag::Any), 900).unwrap_err();
    m.post(sel(1, Source::Any, Tag::Value(3)), 10).unwrap_err();
    m.post(spec(1, 2, 3), 11).unwrap_err();
    m.post(spec(1, 2, 4), 12).unwrap_err();
    assert_eq!(m.wild_in, WildIn::Several);
    // The wildcard of context 1 was posted before the specific receive.
    assert_eq!(m.take_posted(&env(1, 2, 3)), Some(10));
    assert_eq!(m.take_posted(&env(1, 2, 3)), Some(11));
    // Context 1's wildcard is gone: only context 9 holds one.
    assert_eq!(m.wild_in, WildIn::One(9));
    assert_eq!(m.take_posted_unless_wild(&env(1, 2, 4)), Some(Some(12)));
    m.check_invariants();
}

#[test]
fn the_contexts_with_wildcards_follow_posts_cancels_matches_and_drains() {
    let mut m = M::new();
    let a = m.post(sel(1, Source::Any, Tag::Any), 1).unwrap_err();
    assert_eq!(m.wild_in, WildIn::One(1));
    let b = m.post(sel(2, Source::Rank(0), Tag::Any), 2).unwrap_err();
    let c = m.post(sel(2, Source::Any, Tag::Value(5)), 3).unwrap_err();
    assert_eq!(m.wild_in, WildIn::Several);
    assert_eq!(m.cancel(a), Some(1));
    assert_eq!(m.wild_in, WildIn::One(2));
    assert_eq!(m.cancel(b), Some(2));
    assert_eq!(m.wild_in, WildIn::One(2));
    assert_eq!(m.cancel(c), Some(3));
    assert_eq!(m.wild_in, WildIn::Nowhere);
    m.check_invariants();
    // A list emptied again after it was parked and refilled.
    for round in 0..3 {
        let id = m.post(sel(2, Source::Any, Tag::Any), round).unwrap_err();
        assert_eq!(m.wild_in, WildIn::One(2));
        assert_eq!(m.cancel(id), Some(round));
        assert_eq!(m.wild_in, WildIn::Nowhere);
        m.check_invariants();
    }
    // Bulk removals recount.
    m.post(sel(3, Source::Any, Tag::Any), 30).unwrap_err();
    m.post(sel(4, Source::Any, Tag::Any), 40).unwrap_err();
    assert_eq!(m.wild_in, WildIn::Several);
    assert_eq!(m.drain_ctx(3).0, vec![30]);
    assert_eq!(m.wild_in, WildIn::One(4));
    assert_eq!(m.remove_posted_where(|&r| r == 40).len(), 1);
    assert_eq!(m.wild_in, WildIn::Nowhere);
    m.check_invariants();
}
