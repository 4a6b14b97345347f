//! The decision matrix, one row per behaviour: `check(situation, expected action, flags, rule)`.

use oncegate_core::matrix::{
    decide, Action, Confidence, Criticality, Difference, Flag, Keyed, Prior, Rejection, Situation,
    TransportMatch,
};

const CRIT: Criticality = Criticality::Critical;
const REV: Criticality = Criticality::Reversible;

fn keyed(c: Criticality, confidence: Confidence, prior: Prior) -> Situation {
    Situation::Identified {
        criticality: c,
        authority: false,
        breaker_open: false,
        transport: TransportMatch::None,
        key: Keyed {
            confidence,
            prior,
            differences: vec![],
        },
    }
}

fn with(
    mut s: Situation,
    f: impl FnOnce(&mut bool, &mut bool, &mut TransportMatch, &mut Keyed),
) -> Situation {
    if let Situation::Identified {
        authority,
        breaker_open,
        transport,
        key,
        ..
    } = &mut s
    {
        f(authority, breaker_open, transport, key);
    }
    s
}

fn amount_differs() -> Vec<Difference> {
    vec![Difference {
        field: "/data/amount".into(),
        existing: Some("1500".into()),
        incoming: Some("2500".into()),
    }]
}

#[track_caller]
fn check(s: Situation, action: Action, flags: &[Flag], rule: &str, reason_part: &str) {
    let d = decide(&s);
    assert_eq!(d.action, action, "action for {s:?}: {}", d.reason);
    let mut got = d.flags.clone();
    got.sort();
    let mut want = flags.to_vec();
    want.sort();
    assert_eq!(got, want, "flags for {s:?}");
    assert_eq!(d.rule, rule, "rule for {s:?}");
    assert!(
        d.reason.contains(reason_part),
        "reason {:?} should contain {reason_part:?}",
        d.reason
    );
    assert!(
        d.reason.ends_with('.'),
        "a reason is one sentence: {:?}",
        d.reason
    );
}

#[test]
fn rejected_deliveries_are_rejected_with_their_reason() {
    let r = Rejection {
        code: "malformed_json".into(),
        message: "duplicate object key \"a\" at byte 9".into(),
    };
    check(
        Situation::Rejected(r),
        Action::Reject,
        &[],
        "R1",
        "duplicate object key",
    );
}

#[test]
fn no_contract_is_reconciled_never_dropped() {
    check(
        Situation::NoContract {
            provider: "payflow".into(),
            event_type: "dispute.opened".into(),
            provider_known: true,
        },
        Action::Reconcile,
        &[],
        "R2",
        "\"dispute.opened\" of provider \"payflow\" has no contract",
    );
    check(
        Situation::NoContract {
            provider: "nobody".into(),
            event_type: "x".into(),
            provider_known: false,
        },
        Action::Reconcile,
        &[],
        "R2",
        "provider \"nobody\" has no contract",
    );
}

#[test]
fn missing_required_fields() {
    check(
        Situation::NoKey {
            criticality: CRIT,
            missing: "ref@1: field /ref is absent".into(),
        },
        Action::Reconcile,
        &[],
        "R2",
        "/ref is absent",
    );
    check(
        Situation::NoKey {
            criticality: REV,
            missing: "x".into(),
        },
        Action::Process,
        &[Flag::Unkeyed],
        "R2b",
        "reversible",
    );
}

#[test]
fn first_occurrence_is_processed() {
    for c in [CRIT, REV] {
        for conf in [Confidence::Strong, Confidence::Medium, Confidence::Weak] {
            check(
                keyed(c, conf, Prior::None),
                Action::Process,
                &[],
                "R3",
                "no effect exists",
            );
        }
    }
}

#[test]
fn a_collision_is_quarantined_with_its_differences() {
    for prior in [
        Prior::Completed,
        Prior::InProgress,
        Prior::Failed { retryable: true },
        Prior::Unknown,
    ] {
        for conf in [Confidence::Strong, Confidence::Weak] {
            let s = with(keyed(CRIT, conf, prior), |_, _, _, k| {
                k.differences = amount_differs()
            });
            check(
                s,
                Action::Quarantine,
                &[],
                "R4",
                "/data/amount: 1500 → 2500",
            );
        }
    }
}

#[test]
fn strong_match_done_or_in_progress_is_ignored_at_the_effect_layer() {
    for prior in [Prior::Completed, Prior::InProgress] {
        let d = decide(&keyed(CRIT, Confidence::Strong, prior));
        assert_eq!(d.action, Action::Ignore);
        assert_eq!(d.layer, Some(oncegate_core::matrix::Layer::Effect));
        assert_eq!(d.rule, "R5");
    }
    check(
        keyed(REV, Confidence::Strong, Prior::InProgress),
        Action::Ignore,
        &[],
        "R5",
        "in progress",
    );
}

#[test]
fn same_packet_again_is_ignored_at_the_transport_layer_even_on_a_weak_key() {
    let s = with(
        keyed(CRIT, Confidence::Weak, Prior::Completed),
        |_, _, t, _| *t = TransportMatch::SameIdSameBody,
    );
    let d = decide(&s);
    assert_eq!(
        (d.action, d.layer, d.rule),
        (
            Action::Ignore,
            Some(oncegate_core::matrix::Layer::Transport),
            "R5"
        )
    );
    // A retry of the packet after a retryable failure must run again, not be ignored.
    let s = with(
        keyed(CRIT, Confidence::Strong, Prior::Failed { retryable: true }),
        |_, _, t, _| *t = TransportMatch::SameIdSameBody,
    );
    check(
        s,
        Action::Process,
        &[Flag::RetryAfterFailure],
        "R6",
        "retryable",
    );
}

#[test]
fn a_reused_delivery_id_proves_nothing() {
    let s = with(
        keyed(CRIT, Confidence::Weak, Prior::Completed),
        |_, _, t, _| *t = TransportMatch::SameIdOtherBody,
    );
    check(
        s,
        Action::Reconcile,
        &[Flag::TransportIdReused],
        "R9",
        "critical type",
    );
}

#[test]
fn retryable_failure_is_processed_again() {
    check(
        keyed(CRIT, Confidence::Strong, Prior::Failed { retryable: true }),
        Action::Process,
        &[Flag::RetryAfterFailure],
        "R6",
        "new reservation",
    );
    check(
        keyed(CRIT, Confidence::Strong, Prior::Failed { retryable: false }),
        Action::Ignore,
        &[],
        "R6b",
        "permanently",
    );
}

#[test]
fn unknown_outcome_is_verified_on_critical_and_taken_over_on_reversible() {
    for conf in [Confidence::Strong, Confidence::Weak] {
        check(
            keyed(CRIT, conf, Prior::Unknown),
            Action::Reconcile,
            &[],
            "R7",
            "verified before any retry",
        );
        check(
            keyed(REV, conf, Prior::Unknown),
            Action::Process,
            &[Flag::Takeover],
            "R7",
            "takeover",
        );
    }
}

#[test]
fn purged_prior() {
    check(
        keyed(CRIT, Confidence::Strong, Prior::Purged),
        Action::Reconcile,
        &[Flag::PriorPurged],
        "R7b",
        "purged",
    );
    check(
        keyed(REV, Confidence::Weak, Prior::Purged),
        Action::Process,
        &[Flag::PriorPurged, Flag::PossibleDuplicate],
        "R7b",
        "purged",
    );
}

#[test]
fn weak_match_on_reversible_is_processed_and_flagged() {
    for conf in [Confidence::Medium, Confidence::Weak] {
        for prior in [
            Prior::Completed,
            Prior::InProgress,
            Prior::Failed { retryable: true },
        ] {
            check(
                keyed(REV, conf, prior),
                Action::Process,
                &[Flag::PossibleDuplicate],
                "R8",
                "reversible",
            );
        }
    }
}

/// The seed's story: two legitimate refunds of the same amount on the same payment, no request
/// reference. Their fingerprints match; a critical type must never ignore the second one.
#[test]
fn the_seeds_second_refund_is_reconciled_never_ignored() {
    for authority in [false, true] {
        for prior in [Prior::Completed, Prior::InProgress] {
            let s = with(keyed(CRIT, Confidence::Weak, prior), |a, _, _, _| {
                *a = authority
            });
            let part = if authority {
                "authority will be asked"
            } else {
                "a person must decide"
            };
            check(s, Action::Reconcile, &[], "R9", part);
        }
    }
    check(
        keyed(CRIT, Confidence::Medium, Prior::Completed),
        Action::Reconcile,
        &[],
        "R9",
        "medium key",
    );
}

#[test]
fn an_open_breaker_turns_ignores_into_reconcile() {
    let s = with(
        keyed(CRIT, Confidence::Strong, Prior::Completed),
        |_, b, _, _| *b = true,
    );
    check(
        s,
        Action::Reconcile,
        &[Flag::BreakerOpen],
        "R10",
        "breaker is open",
    );
    let s = with(
        keyed(REV, Confidence::Strong, Prior::Failed { retryable: false }),
        |_, b, _, _| *b = true,
    );
    check(
        s,
        Action::Reconcile,
        &[Flag::BreakerOpen],
        "R10",
        "failed permanently",
    );
    // The breaker changes only ignores: a first occurrence is still processed.
    let s = with(
        keyed(CRIT, Confidence::Strong, Prior::None),
        |_, b, _, _| *b = true,
    );
    check(s, Action::Process, &[], "R3", "no effect exists");
}
