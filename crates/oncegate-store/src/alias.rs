//! Key aliases for a versioned cut-over: a live effect made under one strategy version,
//! recorded again under the key a newer version makes for the same delivery.
//!
//! A new strategy version never reinterprets old keys (keys are scoped by name+version), so
//! after a cut-over a retry of an event processed under v1 computes a v2 key that no effect
//! holds. `oncegate migrate` recomputes that v2 key from the effect's first delivery (while its
//! payload is retained) and records it here; the decision's key look-up falls back to this
//! table when the key itself holds nothing, so the retry finds the v1 effect and is ignored
//! instead of applied twice. An alias is written once and never rewritten: the first effect to
//! claim a key keeps it (`ON CONFLICT DO NOTHING`), exactly as a reservation would.

use oncegate_core::ids::{DeliveryId, EffectId};
use time::OffsetDateTime;

use crate::codes::{self, ms};
use crate::error::StoreError;
use crate::sql::{int, text, Tx};

/// An effect with what is needed to recompute its key under another contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationSource {
    /// The effect whose key is to be recomputed.
    pub effect: EffectId,
    /// The tenant the effect belongs to (part of every key's scope).
    pub tenant: String,
    /// The provider whose delivery made the effect.
    pub provider: String,
    /// The provider's environment (`live`, `test`…).
    pub env: String,
    /// The event type of the effect's first delivery, when it was known.
    pub event_type: Option<String>,
    /// The strategy name and version that made the effect's key, when one did.
    pub strategy: Option<(String, u32)>,
    /// The effect's state word (`reserved`, `completed`, `failed_retryable`, `failed`,
    /// `unknown`, `released`), as [`EffectState::as_str`](crate::EffectState::as_str) spells it.
    pub state: String,
    /// The delivery that created the effect: the one whose payload the key is recomputed from.
    pub first_delivery: DeliveryId,
    /// The first delivery's raw body; `None` once payload retention dropped it.
    pub payload: Option<Vec<u8>>,
    /// The first delivery's kept headers (JSON object text).
    pub headers_json: String,
}

/// One alias to record: the effect, and the key another strategy version makes for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAlias {
    /// The effect the new key is to name.
    pub effect: EffectId,
    /// The effect's tenant (part of the alias key's scope).
    pub tenant: String,
    /// The effect's provider (part of the alias key's scope).
    pub provider: String,
    /// The effect's environment (part of the alias key's scope).
    pub env: String,
    /// The event type as the effect records it (the same one the decision scopes keys with).
    pub event_type: Option<String>,
    /// The name of the strategy that made `key` (the newer one, not the effect's own).
    pub strategy: String,
    /// That strategy's version; the alias is scoped by name and version like any key.
    pub version: u32,
    /// The key value as the core made it.
    pub key: String,
    /// The event type, or the operation several types share (as for an effect key).
    pub scope: crate::decision::KeyScope,
    /// When the alias is recorded.
    pub now: OffsetDateTime,
}

/// Every effect with its first delivery's payload, oldest first.
pub(crate) async fn migration_sources<T: Tx + Send>(
    tx: &mut T,
) -> Result<Vec<MigrationSource>, StoreError> {
    let rows = tx
        .query(
            "SELECT e.id, e.tenant, e.provider, e.env, e.event_type, e.strategy_name, \
             e.strategy_version, e.state, e.first_delivery, d.payload, d.headers_json \
             FROM effects e LEFT JOIN deliveries d ON d.id = e.first_delivery \
             ORDER BY e.created_at, e.id",
            &[],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let strategy = match (row.opt_text(5)?, row.opt_int(6)?) {
                (Some(name), Some(v)) => Some((name, u32::try_from(v).unwrap_or(0))),
                _ => None,
            };
            Ok(MigrationSource {
                effect: crate::plan::parse_effect_id(&row.text(0)?)?,
                tenant: row.text(1)?,
                provider: row.text(2)?,
                env: row.text(3)?,
                event_type: row.opt_text(4)?,
                strategy,
                state: row.text(7)?,
                first_delivery: crate::plan::parse_delivery_id(&row.text(8)?)?,
                payload: row.opt_bytes(9)?,
                headers_json: row.opt_text(10)?.unwrap_or_else(|| "{}".to_owned()),
            })
        })
        .collect()
}

/// Records an alias; false when the key already belonged to an effect (its own or an alias).
pub(crate) async fn record_alias<T: Tx + Send>(
    tx: &mut T,
    alias: &NewAlias,
) -> Result<bool, StoreError> {
    let hash = codes::scope_hash(
        &alias.tenant,
        &alias.provider,
        &alias.env,
        alias.scope.part(alias.event_type.as_deref()).as_deref(),
        &alias.strategy,
        alias.version,
        &alias.key,
    );
    // A key some effect already holds in its own right is not aliased: the decision would
    // find that effect first anyway, and two answers for one key must never exist.
    let held = tx
        .query(
            "SELECT 1 FROM effect_index WHERE scope_hash = $1 UNION ALL SELECT 1 FROM effects WHERE scope_hash = $1",
            &[text(hash.as_str())],
        )
        .await?;
    if !held.is_empty() {
        return Ok(false);
    }
    let n = tx
        .exec(
            "INSERT INTO effect_aliases (alias_hash, effect_id, strategy_name, strategy_version, created_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (alias_hash) DO NOTHING",
            &[
                text(hash.as_str()),
                text(alias.effect.as_str()),
                text(alias.strategy.as_str()),
                int(i64::from(alias.version)),
                int(ms(alias.now)),
            ],
        )
        .await?;
    Ok(n == 1)
}
