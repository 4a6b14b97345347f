//! How values are spelled in the database: core enums as short stable words, times as unix
//! milliseconds, JSON texts for maps and lists, and the generation of new ids. Both backends
//! use these so a row means the same thing whichever database holds it.

use std::collections::BTreeMap;
use std::time::{Duration as StdDuration, SystemTime};

use oncegate_core::matrix::{Difference, Flag, Layer, Prior, TransportMatch};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use crate::error::StoreError;

/// Times are stored as unix milliseconds: one integer type that every SQL engine orders and
/// compares the same way, with no time-zone semantics to disagree about.
pub(crate) fn ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

pub(crate) fn from_ms(v: i64) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(v as i128 * 1_000_000)
        .map_err(|_| StoreError::corrupt(format!("timestamp {v} is out of range")))
}

pub(crate) fn duration_ms(d: time::Duration) -> i64 {
    d.whole_milliseconds()
        .clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

/// A new time-ordered 128-bit id (a ULID) whose time part is the caller's `now`, so ids sort
/// like the events they name even when tests control time.
pub(crate) fn new_id(now: OffsetDateTime) -> u128 {
    let millis = ms(now).max(0) as u64;
    ulid::Ulid::from_datetime(SystemTime::UNIX_EPOCH + StdDuration::from_millis(millis)).0
}

/// The smallest delivery id whose time part is at or after `at`: ids are ULIDs of the
/// reception time (`new_id`) and sort as text like their times, so `id >= id_floor(t)` is
/// `received_at >= t`, answered by the primary key instead of an index of its own (one index
/// entry fewer for every delivery journaled).
///
/// A condition on `received_at` stays beside it wherever it is used, so a row whose id did
/// not follow its time could only be left out of a range, never put in a wrong one.
pub(crate) fn delivery_id_floor(at: OffsetDateTime) -> String {
    oncegate_core::ids::DeliveryId::from_u128(id_floor(at))
        .as_str()
        .to_owned()
}

/// The same for effects: an effect's id is a ULID of its creation time (`created_at`), so the
/// effects created at or after `at` are those whose id is at least this one.
pub(crate) fn effect_id_floor(at: OffsetDateTime) -> String {
    oncegate_core::ids::EffectId::from_u128(id_floor(at))
        .as_str()
        .to_owned()
}

/// The smallest ULID of the millisecond `at` (clamped to the ULID's 48 bits of time).
fn id_floor(at: OffsetDateTime) -> u128 {
    (ms(at).clamp(0, (1_i64 << 48) - 1) as u128) << 80
}

/// The unique-index key of an effect key: a digest over its whole scope, so the same key value
/// under another tenant, provider, environment, type or strategy version never matches.
/// Each part is length-prefixed so no two different scopes can spell the same bytes.
pub(crate) fn scope_hash(
    tenant: &str,
    provider: &str,
    env: &str,
    event_type: Option<&str>,
    strategy: &str,
    version: u32,
    key: &str,
) -> String {
    let mut h = Sha256::new();
    let version = version.to_string();
    for part in [
        tenant,
        provider,
        env,
        event_type.unwrap_or(""),
        strategy,
        version.as_str(),
        key,
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

pub(crate) fn prior_code(p: Prior) -> &'static str {
    match p {
        Prior::None => "none",
        Prior::InProgress => "in_progress",
        Prior::Completed => "completed",
        Prior::Failed { retryable: true } => "failed_retryable",
        Prior::Failed { retryable: false } => "failed",
        Prior::Unknown => "unknown",
        Prior::Purged => "purged",
    }
}

pub(crate) fn parse_prior(s: &str) -> Result<Prior, StoreError> {
    [
        Prior::None,
        Prior::InProgress,
        Prior::Completed,
        Prior::Failed { retryable: true },
        Prior::Failed { retryable: false },
        Prior::Unknown,
        Prior::Purged,
    ]
    .into_iter()
    .find(|p| prior_code(*p) == s)
    .ok_or_else(|| StoreError::corrupt(format!("unknown prior state {s:?}")))
}

pub(crate) fn transport_code(t: TransportMatch) -> &'static str {
    match t {
        TransportMatch::None => "none",
        TransportMatch::SameIdSameBody => "same_id_same_body",
        TransportMatch::SameIdOtherBody => "same_id_other_body",
    }
}

pub(crate) fn parse_transport(s: &str) -> Result<TransportMatch, StoreError> {
    [
        TransportMatch::None,
        TransportMatch::SameIdSameBody,
        TransportMatch::SameIdOtherBody,
    ]
    .into_iter()
    .find(|t| transport_code(*t) == s)
    .ok_or_else(|| StoreError::corrupt(format!("unknown transport match {s:?}")))
}

pub(crate) fn parse_layer(s: &str) -> Result<Layer, StoreError> {
    [Layer::Transport, Layer::Effect]
        .into_iter()
        .find(|l| l.as_str() == s)
        .ok_or_else(|| StoreError::corrupt(format!("unknown layer {s:?}")))
}

const FLAGS: [Flag; 7] = [
    Flag::PossibleDuplicate,
    Flag::BreakerOpen,
    Flag::Takeover,
    Flag::RetryAfterFailure,
    Flag::TransportIdReused,
    Flag::Unkeyed,
    Flag::PriorPurged,
];

pub(crate) fn flags_json(flags: &[Flag]) -> String {
    serde_json::Value::Array(
        flags
            .iter()
            .map(|f| serde_json::Value::from(f.as_str()))
            .collect(),
    )
    .to_string()
}

pub(crate) fn parse_flags(text: &str) -> Result<Vec<Flag>, StoreError> {
    let names: Vec<String> = serde_json::from_str(text)
        .map_err(|_| StoreError::corrupt("a proof's flags are not a JSON list"))?;
    names
        .iter()
        .map(|n| {
            FLAGS
                .into_iter()
                .find(|f| f.as_str() == n)
                .ok_or_else(|| StoreError::corrupt(format!("unknown flag {n:?}")))
        })
        .collect()
}

pub(crate) fn map_json(map: &BTreeMap<String, String>) -> String {
    serde_json::to_string(map).expect("a map of strings always serializes")
}

pub(crate) fn parse_map(text: &str) -> Result<BTreeMap<String, String>, StoreError> {
    serde_json::from_str(text)
        .map_err(|_| StoreError::corrupt("stored discriminants are not a JSON object of strings"))
}

pub(crate) fn differences_json(differences: &[Difference]) -> String {
    let list = differences
        .iter()
        .map(|d| serde_json::json!({ "field": d.field, "existing": d.existing, "incoming": d.incoming }))
        .collect();
    serde_json::Value::Array(list).to_string()
}

pub(crate) fn parse_differences(text: &str) -> Result<Vec<Difference>, StoreError> {
    let bad = || {
        StoreError::corrupt("stored differences are not a JSON list of {field, existing, incoming}")
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| bad())?;
    let items = value.as_array().ok_or_else(bad)?;
    items
        .iter()
        .map(|item| {
            let field = item
                .get("field")
                .and_then(|v| v.as_str())
                .ok_or_else(bad)?
                .to_owned();
            let side = |name: &str| item.get(name).and_then(|v| v.as_str()).map(str::to_owned);
            Ok(Difference {
                field,
                existing: side("existing"),
                incoming: side("incoming"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_hash_separates_parts_that_would_concatenate_alike() {
        let a = scope_hash("t", "p", "e", Some("x"), "s", 1, "ab");
        let b = scope_hash("t", "p", "e", Some("xa"), "s", 1, "b");
        assert_ne!(a, b);
        assert_ne!(
            scope_hash("t", "p", "e", None, "s", 1, "k"),
            scope_hash("t", "p", "e", None, "s", 2, "k")
        );
    }

    /// An effect made at `t` (its id a ULID of `t`, as the decision writes it) sorts at or
    /// after `t`'s floor and before the next millisecond's.
    #[test]
    fn effect_id_floor_bounds_the_ids_of_its_millisecond() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_764_700_000_123_000_000).unwrap();
        let next = t + time::Duration::milliseconds(1);
        for _ in 0..1000 {
            let id = oncegate_core::ids::EffectId::from_u128(new_id(t));
            assert!(id.as_str() >= effect_id_floor(t).as_str(), "{id}");
            assert!(id.as_str() < effect_id_floor(next).as_str(), "{id}");
        }
        assert!(effect_id_floor(t).starts_with("eff_"));
    }

    /// Every id of a reception at `t` sorts at or after `t`'s floor and before the next
    /// millisecond's, so an id range is exactly a range of reception times.
    #[test]
    fn delivery_id_floor_bounds_the_ids_of_its_millisecond() {
        let t = OffsetDateTime::from_unix_timestamp_nanos(1_764_700_000_123_000_000).unwrap();
        let next = t + time::Duration::milliseconds(1);
        let floor = delivery_id_floor(t);
        assert!(floor < delivery_id_floor(next));
        for _ in 0..1000 {
            let id = oncegate_core::ids::DeliveryId::from_u128(new_id(t));
            assert!(id.as_str() >= floor.as_str(), "{id} < {floor}");
            assert!(id.as_str() < delivery_id_floor(next).as_str(), "{id}");
        }
        let earlier =
            oncegate_core::ids::DeliveryId::from_u128(new_id(t - time::Duration::milliseconds(1)));
        assert!(earlier.as_str() < floor.as_str());
        // Before the epoch, the floor is the smallest id there is.
        assert_eq!(
            delivery_id_floor(OffsetDateTime::UNIX_EPOCH - time::Duration::days(1)),
            oncegate_core::ids::DeliveryId::from_u128(0).as_str()
        );
    }

    #[test]
    fn codes_round_trip() {
        for p in [
            Prior::None,
            Prior::Failed { retryable: true },
            Prior::Purged,
        ] {
            assert_eq!(parse_prior(prior_code(p)).unwrap(), p);
        }
        assert_eq!(parse_flags(&flags_json(&FLAGS)).unwrap(), FLAGS.to_vec());
        let diffs = vec![Difference {
            field: "amount".into(),
            existing: Some("10".into()),
            incoming: None,
        }];
        assert_eq!(parse_differences(&differences_json(&diffs)).unwrap(), diffs);
        let t = OffsetDateTime::from_unix_timestamp(1_700_000_000).unwrap();
        assert_eq!(from_ms(ms(t)).unwrap(), t);
    }
}
