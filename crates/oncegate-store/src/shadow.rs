//! Shadow strategies' own index: per shadow key, the first delivery that made it and its
//! discriminants, so a shadow can say what it would have decided without touching effects;
//! and the disagreements between a shadow and the decision that was actually taken.
//!
//! The index remembers keys, not outcomes: a shadow match reads as an effect already applied,
//! which is what a retry meets in the common case. It expires at the shadow's horizon like the
//! real index does, so the comparison is fair.

use std::collections::BTreeMap;

use oncegate_core::ids::DeliveryId;
use time::OffsetDateTime;

use crate::codes::{self, ms};
use crate::error::StoreError;
use crate::sql::{int, opt_int, text, Tx};

/// One delivery seen by one shadow strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowObservation {
    /// The tenant the delivery was posted for.
    pub tenant: String,
    /// The delivery's provider.
    pub provider: String,
    /// The delivery's environment (`live`, `test`…).
    pub env: String,
    /// The delivery's event type (a shadow only runs on an identified delivery).
    pub event_type: String,
    /// The shadow strategy's name, as the contract spells it.
    pub strategy: String,
    /// The shadow strategy's version; its keys never meet another version's.
    pub version: u32,
    /// The shadow's key value as the core made it.
    pub key: String,
    /// The event type, or the operation several types share (as for an effect key).
    pub scope: crate::decision::KeyScope,
    /// The delivery being observed: recorded as the key's first when nothing live holds it.
    pub delivery: DeliveryId,
    /// Field → canonical (masked) value.
    pub discriminants: BTreeMap<String, String>,
    /// `None` for a durable type (the index never forgets).
    pub expires_at: Option<OffsetDateTime>,
    /// The observation's time: a prior entry counts only while its expiry is after it.
    pub now: OffsetDateTime,
}

/// What the shadow index held for a key before this delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowPrior {
    /// The delivery that first made the shadow key (inside its horizon).
    pub first_delivery: DeliveryId,
    /// That delivery's discriminants (field → canonical, masked value), to compare with.
    pub discriminants: BTreeMap<String, String>,
}

/// A shadow that would have decided otherwise than the decision taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowDisagreement {
    /// The delivery the shadow disagreed on; one record per delivery and shadow.
    pub delivery: DeliveryId,
    /// The delivery's tenant.
    pub tenant: String,
    /// The delivery's provider.
    pub provider: String,
    /// The delivery's environment (`live`, `test`…).
    pub env: String,
    /// The delivery's event type.
    pub event_type: String,
    /// The shadow strategy's name.
    pub strategy: String,
    /// The shadow strategy's version.
    pub version: u32,
    /// What the shadow would have done, as the core's `Action::as_str` spells it (`ignore`…).
    pub shadow_action: String,
    /// What the active strategy's decision actually did, spelled the same way.
    pub actual_action: String,
    /// When the delivery was decided.
    pub at: OffsetDateTime,
}

/// Disagreements per provider/env/type/strategy since an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShadowCount {
    /// The tenant of the group.
    pub tenant: String,
    /// The provider of the group.
    pub provider: String,
    /// The environment of the group (`live`, `test`…).
    pub env: String,
    /// The event type of the group.
    pub event_type: String,
    /// `name@version`.
    pub strategy: String,
    /// How many deliveries of the group the shadow disagreed on since the instant asked.
    pub disagreements: u64,
}

fn hash(o: &ShadowObservation) -> String {
    // A prefix keeps shadow keys apart from effect keys even if both tables were ever joined.
    codes::scope_hash(
        &o.tenant,
        &o.provider,
        &o.env,
        o.scope.part(Some(&o.event_type)).as_deref(),
        &format!("shadow:{}", o.strategy),
        o.version,
        &o.key,
    )
}

/// Looks the shadow key up and, when nothing live holds it, records this delivery as its first.
pub(crate) async fn observe<T: Tx + Send>(
    tx: &mut T,
    o: &ShadowObservation,
) -> Result<Option<ShadowPrior>, StoreError> {
    let h = hash(o);
    let now = ms(o.now);
    let rows = tx
        .query(
            "SELECT first_delivery, discriminants, expires_at FROM shadow_index WHERE scope_hash = $1",
            &[text(h.as_str())],
        )
        .await?;
    if let Some(row) = rows.first() {
        let live = match row.opt_int(2)? {
            None => true,
            Some(expires) => expires > now,
        };
        if live {
            return Ok(Some(ShadowPrior {
                first_delivery: crate::plan::parse_delivery_id(&row.text(0)?)?,
                discriminants: codes::parse_map(&row.text(1)?)?,
            }));
        }
    }
    let discriminants = codes::map_json(&o.discriminants);
    let expires = o.expires_at.map(ms);
    // Insert, or take over an expired entry; a concurrent first writer wins and is the prior.
    let n = tx
        .exec(
            "INSERT INTO shadow_index (scope_hash, first_delivery, discriminants, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (scope_hash) DO UPDATE SET first_delivery = excluded.first_delivery, \
             discriminants = excluded.discriminants, created_at = excluded.created_at, \
             expires_at = excluded.expires_at \
             WHERE shadow_index.expires_at IS NOT NULL AND shadow_index.expires_at <= $4",
            &[
                text(h.as_str()),
                text(o.delivery.as_str()),
                text(discriminants),
                int(now),
                opt_int(expires),
            ],
        )
        .await?;
    if n == 1 {
        return Ok(None);
    }
    let rows = tx
        .query(
            "SELECT first_delivery, discriminants FROM shadow_index WHERE scope_hash = $1",
            &[text(h.as_str())],
        )
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| StoreError::corrupt("a shadow key vanished between two statements"))?;
    Ok(Some(ShadowPrior {
        first_delivery: crate::plan::parse_delivery_id(&row.text(0)?)?,
        discriminants: codes::parse_map(&row.text(1)?)?,
    }))
}

pub(crate) async fn record_disagreement<T: Tx + Send>(
    tx: &mut T,
    d: &ShadowDisagreement,
) -> Result<(), StoreError> {
    tx.exec(
        "INSERT INTO shadow_disagreements (delivery_id, tenant, provider, env, event_type, \
         strategy_name, strategy_version, shadow_action, actual_action, at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (delivery_id, strategy_name, strategy_version) DO NOTHING",
        &[
            text(d.delivery.as_str()),
            text(d.tenant.as_str()),
            text(d.provider.as_str()),
            text(d.env.as_str()),
            text(d.event_type.as_str()),
            text(d.strategy.as_str()),
            int(i64::from(d.version)),
            text(d.shadow_action.as_str()),
            text(d.actual_action.as_str()),
            int(ms(d.at)),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn counts<T: Tx + Send>(
    tx: &mut T,
    since: OffsetDateTime,
) -> Result<Vec<ShadowCount>, StoreError> {
    let rows = tx
        .query(
            "SELECT tenant, provider, env, event_type, strategy_name, strategy_version, COUNT(*) \
             FROM shadow_disagreements WHERE at >= $1 \
             GROUP BY tenant, provider, env, event_type, strategy_name, strategy_version \
             ORDER BY tenant, provider, env, event_type, strategy_name, strategy_version",
            &[int(ms(since))],
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok(ShadowCount {
                tenant: row.text(0)?,
                provider: row.text(1)?,
                env: row.text(2)?,
                event_type: row.text(3)?,
                strategy: format!("{}@{}", row.text(4)?, row.int(5)?),
                disagreements: u64::try_from(row.int(6)?).unwrap_or(0),
            })
        })
        .collect()
}

/// Disagreements per report group (tenant, provider, env, type) since an instant.
pub(crate) async fn report_counts<T: Tx + Send>(
    tx: &mut T,
    tenants: &crate::delivery::TenantFilter,
    period: crate::report::Period,
) -> Result<Vec<((String, String, String, Option<String>), u64)>, StoreError> {
    let mut q = crate::sql::Query::new(
        "SELECT tenant, provider, env, event_type, COUNT(*) FROM shadow_disagreements WHERE 1 = 1",
    );
    period.restrict(&mut q, "at");
    q.tenants("tenant", tenants);
    q.push(" GROUP BY tenant, provider, env, event_type");
    tx.query(&q.sql, &q.params)
        .await?
        .iter()
        .map(|r| {
            Ok((
                (r.text(0)?, r.text(1)?, r.text(2)?, r.opt_text(3)?),
                u64::try_from(r.int(4)?).unwrap_or(0),
            ))
        })
        .collect()
}
