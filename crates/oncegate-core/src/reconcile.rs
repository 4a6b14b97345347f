//! Reconciliation, the pure half: reading an authority's answer into operations, and matching
//! those operations to the local effects of the same resource to say whether a queued delivery
//! is a new operation, a duplicate, or still unknown.
//!
//! No I/O here either: the server fetches the authority's JSON and the store's effects, and
//! hands both in. Values are compared in the key form ([`crate::canon::to_key_form`]), with
//! sensitive fields keyed-hashed exactly as the identity engine stores them, so `15e2` from the
//! authority matches `1500` in a delivery and a masked email matches its stored hash.

use std::collections::BTreeMap;

use crate::canon::to_key_form;
use crate::contract::{Authority, EventType};
use crate::identity::mask;
use crate::ids::EffectId;
use crate::json::Value;

/// One operation as the authority lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorityOperation {
    /// The provider's own reference of the operation (`re_…`).
    pub reference: String,
    /// The type's discriminant pointer → the operation's value in key form (masked when the
    /// field is sensitive). Only the discriminants the authority declares a field for.
    pub discriminants: BTreeMap<String, String>,
}

/// A local effect of the same resource, as the matcher needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalEffect {
    /// The effect's id.
    pub id: EffectId,
    /// Known when the effect was released on the authority's word.
    pub authoritative_ref: Option<String>,
    /// Its discriminants as the store holds them: pointer → key form, masked when the field is
    /// sensitive (absent ones are left out).
    pub discriminants: BTreeMap<String, String>,
}

/// What the authority's answer says about one queued delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An operation with the delivery's discriminants is matched to no local effect: the
    /// delivery is that operation, released as a new effect carrying its reference.
    Release {
        /// The reference of the operation the delivery is, recorded on the new effect: its
        /// identity is enriched, and a later match by reference pairs the two.
        authoritative_ref: String,
    },
    /// Every operation with the delivery's discriminants is already applied locally.
    Duplicate {
        /// The local effect the delivery repeats: the effect being verified, else the queue
        /// item's own effect when it is one of the matches, else the one paired with the first
        /// matching operation in the authority's order.
        effect: EffectId,
        /// The reference of the operation the effect was matched to.
        authoritative_ref: String,
    },
    /// Nothing to decide on: a person (or a later attempt) settles it.
    Inconclusive {
        /// Why the answer decides nothing, in a sentence for the person who will.
        why: String,
    },
}

/// Why an authority's answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Nothing, or no array, at the contract's `operations` pointer; holds that pointer.
    #[error("the authority's answer has no list of operations at {0}")]
    NoOperations(String),
    /// An operation lacks a usable reference (a non-blank string or a number).
    #[error("operation {index} of the authority's answer has no reference at {pointer}")]
    NoReference {
        /// The operation's position in the list, from 0.
        index: usize,
        /// The contract's `reference` pointer, read inside the operation.
        pointer: String,
    },
}

/// Reads the operations out of an authority's JSON answer, per the contract's pointers.
pub fn operations(
    t: &EventType,
    authority: &Authority,
    answer: &Value,
    salt: &[u8],
) -> Result<Vec<AuthorityOperation>, AnswerError> {
    let list = authority
        .operations
        .get(answer)
        .and_then(Value::as_array)
        .ok_or_else(|| AnswerError::NoOperations(authority.operations.as_str().to_owned()))?;
    list.iter()
        .enumerate()
        .map(|(index, op)| {
            let reference = match authority.reference.get(op) {
                Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
                Some(v @ Value::Number(_)) => to_key_form(v),
                _ => {
                    return Err(AnswerError::NoReference {
                        index,
                        pointer: authority.reference.as_str().to_owned(),
                    })
                }
            };
            let discriminants = authority
                .fields
                .iter()
                .filter_map(|(ours, theirs)| {
                    let v = theirs.get(op).filter(|v| !v.is_null())?;
                    let form = to_key_form(v);
                    let form = if t.is_sensitive(ours) {
                        mask(salt, &form)
                    } else {
                        form
                    };
                    Some((ours.as_str().to_owned(), form))
                })
                .collect();
            Ok(AuthorityOperation {
                reference,
                discriminants,
            })
        })
        .collect()
}

/// Whether `values` agree with `wanted` on every field the authority declares. A field the
/// operation lacks is a disagreement: it cannot be shown to be the same operation.
fn agrees(
    declared: &[String],
    wanted: &BTreeMap<String, String>,
    values: &BTreeMap<String, String>,
) -> bool {
    declared
        .iter()
        .all(|f| match (wanted.get(f), values.get(f)) {
            (Some(a), Some(b)) => a == b,
            (None, _) => true,
            (Some(_), None) => false,
        })
}

/// Pairs each authority operation with at most one local effect: first by authoritative
/// reference, then (for effects without one) by discriminants, in the given orders (the
/// authority's, and the effects' oldest first). Returns, per operation, its effect's index.
fn pair(
    declared: &[String],
    ops: &[AuthorityOperation],
    locals: &[LocalEffect],
) -> Vec<Option<usize>> {
    let mut paired: Vec<Option<usize>> = vec![None; ops.len()];
    let mut taken = vec![false; locals.len()];
    for (i, op) in ops.iter().enumerate() {
        if let Some(j) = locals
            .iter()
            .position(|l| l.authoritative_ref.as_deref() == Some(op.reference.as_str()))
        {
            if !taken[j] {
                paired[i] = Some(j);
                taken[j] = true;
            }
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if paired[i].is_some() {
            continue;
        }
        // An effect that carries a reference is that operation and no other.
        if let Some(j) = (0..locals.len()).find(|&j| {
            !taken[j]
                && locals[j].authoritative_ref.is_none()
                && agrees(declared, &op.discriminants, &locals[j].discriminants)
                && agrees(declared, &locals[j].discriminants, &op.discriminants)
        }) {
            paired[i] = Some(j);
            taken[j] = true;
        }
    }
    paired
}

/// The verdict on a queued delivery with `wanted` discriminants.
///
/// * `declared`: the discriminant pointers the authority gives a field for (others cannot be
///   compared and are ignored).
/// * `preferred`: the effect the queue item points at; a duplicate is linked to it when it is
///   one of the matches.
/// * `verifying`: for a "verify before retry" item, the effect whose outcome is unknown: the
///   answer is `Duplicate` only if that very effect is matched to an operation (it happened),
///   never `Release` (that would run it a second time); anything else is inconclusive.
pub fn verdict(
    declared: &[String],
    ops: &[AuthorityOperation],
    locals: &[LocalEffect],
    wanted: &BTreeMap<String, String>,
    preferred: Option<&EffectId>,
    verifying: Option<&EffectId>,
) -> Verdict {
    let paired = pair(declared, ops, locals);
    let matching: Vec<usize> = (0..ops.len())
        .filter(|&i| agrees(declared, wanted, &ops[i].discriminants))
        .collect();
    if matching.is_empty() {
        return Verdict::Inconclusive {
            why: format!(
                "the authority lists {} operation(s) for this resource and none has these discriminants",
                ops.len()
            ),
        };
    }
    let applied = |i: usize| paired[i].map(|j| (j, &locals[j]));
    if let Some(own) = verifying {
        return match matching
            .iter()
            .find_map(|&i| applied(i).filter(|(_, l)| &l.id == own).map(|_| i))
        {
            Some(i) => Verdict::Duplicate {
                effect: own.clone(),
                authoritative_ref: ops[i].reference.clone(),
            },
            None => Verdict::Inconclusive {
                why: "no operation at the authority is matched to the effect whose outcome is unknown".to_owned(),
            },
        };
    }
    if let Some(&i) = matching.iter().find(|&&i| paired[i].is_none()) {
        return Verdict::Release {
            authoritative_ref: ops[i].reference.clone(),
        };
    }
    let chosen = matching
        .iter()
        .find(|&&i| applied(i).is_some_and(|(_, l)| Some(&l.id) == preferred))
        .or_else(|| matching.first())
        .copied()
        .expect("matching is not empty");
    let (_, local) = applied(chosen).expect("every matching operation is paired");
    Verdict::Duplicate {
        effect: local.id.clone(),
        authoritative_ref: ops[chosen].reference.clone(),
    }
}

/// The operations no local effect is matched to: what the invisible-losses sweep reports.
pub fn unmatched<'a>(
    declared: &[String],
    ops: &'a [AuthorityOperation],
    locals: &[LocalEffect],
) -> Vec<&'a AuthorityOperation> {
    pair(declared, ops, locals)
        .iter()
        .zip(ops)
        .filter(|(p, _)| p.is_none())
        .map(|(_, op)| op)
        .collect()
}

/// The discriminant pointers an authority gives a field for.
pub fn declared(authority: &Authority) -> Vec<String> {
    authority
        .fields
        .iter()
        .map(|(ours, _)| ours.as_str().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn op(reference: &str, amount: &str) -> AuthorityOperation {
        AuthorityOperation {
            reference: reference.to_owned(),
            discriminants: map(&[("/data/amount", amount), ("/data/currency", "\"EUR\"")]),
        }
    }

    fn local(n: u128, reference: Option<&str>, amount: &str) -> LocalEffect {
        LocalEffect {
            id: EffectId::from_u128(n),
            authoritative_ref: reference.map(str::to_owned),
            discriminants: map(&[("/data/amount", amount), ("/data/currency", "\"EUR\"")]),
        }
    }

    fn declared() -> Vec<String> {
        vec!["/data/amount".to_owned(), "/data/currency".to_owned()]
    }

    fn wanted(amount: &str) -> BTreeMap<String, String> {
        map(&[("/data/amount", amount), ("/data/currency", "\"EUR\"")])
    }

    /// One row per behaviour: the authority's operations, the local effects, the delivery's
    /// amount, the queue item's effect, the effect being verified → the verdict.
    fn check(
        ops: &[AuthorityOperation],
        locals: &[LocalEffect],
        amount: &str,
        preferred: Option<u128>,
        verifying: Option<u128>,
        expected: Verdict,
    ) {
        let preferred = preferred.map(EffectId::from_u128);
        let verifying = verifying.map(EffectId::from_u128);
        let got = verdict(
            &declared(),
            ops,
            locals,
            &wanted(amount),
            preferred.as_ref(),
            verifying.as_ref(),
        );
        match (&got, &expected) {
            (Verdict::Inconclusive { .. }, Verdict::Inconclusive { .. }) => {}
            _ => assert_eq!(got, expected),
        }
    }

    fn release(r: &str) -> Verdict {
        Verdict::Release {
            authoritative_ref: r.to_owned(),
        }
    }

    fn duplicate(n: u128, r: &str) -> Verdict {
        Verdict::Duplicate {
            effect: EffectId::from_u128(n),
            authoritative_ref: r.to_owned(),
        }
    }

    fn inconclusive() -> Verdict {
        Verdict::Inconclusive { why: String::new() }
    }

    #[test]
    fn the_seed_second_refund_is_released_with_the_unmatched_reference() {
        // Two refunds of 1500 at the authority, one applied locally: release one.
        check(
            &[op("re_A", "1500"), op("re_B", "1500")],
            &[local(1, None, "1500")],
            "1500",
            Some(1),
            None,
            release("re_B"),
        );
    }

    #[test]
    fn a_retry_after_the_release_is_a_duplicate() {
        // Both refunds are now applied: re_B by its reference, re_A by discriminants.
        check(
            &[op("re_A", "1500"), op("re_B", "1500")],
            &[local(1, None, "1500"), local(2, Some("re_B"), "1500")],
            "1500",
            Some(1),
            None,
            duplicate(1, "re_A"),
        );
    }

    #[test]
    fn a_reference_pins_the_effect_to_its_operation() {
        // The local effect is re_A by reference, so re_B is still unapplied.
        check(
            &[op("re_A", "1500"), op("re_B", "1500")],
            &[local(1, Some("re_A"), "1500")],
            "1500",
            Some(1),
            None,
            release("re_B"),
        );
        // A local effect with a reference the authority does not list matches nothing else.
        check(
            &[op("re_A", "1500")],
            &[local(1, Some("re_Z"), "1500")],
            "1500",
            None,
            None,
            release("re_A"),
        );
    }

    #[test]
    fn one_operation_matches_at_most_one_effect() {
        check(
            &[op("re_A", "1500")],
            &[local(1, None, "1500"), local(2, None, "1500")],
            "1500",
            Some(2),
            None,
            duplicate(1, "re_A"),
        );
    }

    #[test]
    fn no_operation_with_these_discriminants_is_inconclusive() {
        check(
            &[op("re_A", "900")],
            &[local(1, None, "900")],
            "1500",
            None,
            None,
            inconclusive(),
        );
        check(&[], &[], "1500", None, None, inconclusive());
    }

    #[test]
    fn other_amounts_are_not_counted() {
        check(
            &[op("re_A", "900"), op("re_B", "1500")],
            &[local(1, None, "1500")],
            "1500",
            Some(1),
            None,
            duplicate(1, "re_B"),
        );
    }

    #[test]
    fn verifying_an_unknown_outcome_never_releases() {
        // The effect itself is matched: it happened.
        check(
            &[op("re_A", "1500")],
            &[local(7, None, "1500")],
            "1500",
            Some(7),
            Some(7),
            duplicate(7, "re_A"),
        );
        // The only operation belongs to an older effect: nothing shows this one happened.
        check(
            &[op("re_A", "1500")],
            &[local(1, None, "1500"), local(7, None, "1500")],
            "1500",
            Some(7),
            Some(7),
            inconclusive(),
        );
    }

    #[test]
    fn authority_values_are_read_in_the_key_form_of_the_delivery() {
        let contract = crate::contract::parse(
            "oncegate.toml",
            include_str!("../../../examples/oncegate.toml"),
        )
        .expect("the example contract parses");
        let t = contract
            .event_type("payflow", "refund.created")
            .expect("refund.created is declared");
        let authority = t
            .authority
            .as_ref()
            .expect("refund.created has an authority");
        let limits = crate::json::Limits::default();
        let answer = crate::json::parse(
            br#"{"refunds":[{"id":"re_A","amount":15e2,"currency":"EUR"},{"id":"re_B","amount":1500.0,"currency":"EUR"}]}"#,
            &limits,
        )
        .expect("the answer parses");
        let ops = operations(t, authority, &answer, b"salt").expect("operations are read");
        let delivery = crate::json::parse(
            br#"{"type":"refund.created","data":{"payment_id":"pay_1","amount":1500,"currency":"EUR"}}"#,
            &limits,
        )
        .expect("the delivery parses");
        let origin = crate::identity::Origin {
            tenant: "acme",
            provider: "payflow",
            env: "live",
        };
        let id = crate::identity::identify(t, origin, &delivery, &[], b"salt");
        let wanted: BTreeMap<String, String> = id
            .discriminants
            .into_iter()
            .filter_map(|(f, v)| v.map(|v| (f, v)))
            .collect();
        assert_eq!(ops.len(), 2);
        assert_eq!(ops[0].discriminants, wanted);
        assert_eq!(ops[1].discriminants, wanted);
        assert_eq!(
            verdict(&super::declared(authority), &ops, &[], &wanted, None, None),
            release("re_A")
        );
        let missing = crate::json::parse(br#"{"other":[]}"#, &limits).expect("parses");
        assert!(matches!(
            operations(t, authority, &missing, b"salt"),
            Err(AnswerError::NoOperations(_))
        ));
    }

    #[test]
    fn the_unmatched_operations_are_the_invisible_losses() {
        let ops = [op("re_A", "1500"), op("re_B", "1500"), op("re_C", "20")];
        let missing = unmatched(&declared(), &ops, &[local(1, None, "1500")]);
        let refs: Vec<&str> = missing.iter().map(|o| o.reference.as_str()).collect();
        assert_eq!(refs, ["re_B", "re_C"]);
    }
}
