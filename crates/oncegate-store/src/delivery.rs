//! Deliveries: what is journaled about each reception before anything is decided, and how
//! operators find them again (the journal, a delivery read back, the listing).

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::Action;
use time::OffsetDateTime;

use crate::codes::{delivery_id_floor, from_ms, ms};
use crate::error::StoreError;
use crate::plan;
use crate::sql::{int, opt_text, text, Query, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// How far a provider's transport key can be trusted to name one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportStrength {
    /// A provider delivery id header.
    Strong,
    /// The raw body hash: two legitimate operations can be byte-identical.
    Weak,
}

impl TransportStrength {
    /// The word stored in the journal's `transport_strength` column: `"strong"` or `"weak"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportStrength::Strong => "strong",
            TransportStrength::Weak => "weak",
        }
    }

    /// The strength [`as_str`](Self::as_str) spells, or `None` for any other word.
    ///
    /// ```
    /// use oncegate_store::TransportStrength;
    ///
    /// for s in [TransportStrength::Strong, TransportStrength::Weak] {
    ///     assert_eq!(TransportStrength::parse(s.as_str()), Some(s));
    /// }
    /// assert_eq!(TransportStrength::parse("Strong"), None);
    /// ```
    pub fn parse(s: &str) -> Option<TransportStrength> {
        [TransportStrength::Strong, TransportStrength::Weak]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// The key that recognizes the same packet delivered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportKey {
    /// The key itself: SHA-256 in lowercase hex over the origin (tenant, provider, environment)
    /// and either the provider's delivery id or the raw body's hash, so the same packet from two
    /// tenants or environments never matches.
    pub value: String,
    /// Whether it was made from a provider delivery id header or only from the raw body.
    pub strength: TransportStrength,
}

/// One reception, as the service saw it, before any decision. Rejected receptions are
/// journaled too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReception {
    /// The tenant the delivery was posted for: the outermost part of every key's scope.
    pub tenant: String,
    /// The provider's name, as the contract spells it.
    pub provider: String,
    /// The provider's environment (`live`, `test`…); deliveries of two environments never share a
    /// key.
    pub env: String,
    /// Unknown when the body could not be read far enough to tell (a rejection).
    pub event_type: Option<String>,
    /// When the service received the request (stored to the millisecond).
    pub received_at: OffsetDateTime,
    /// Raw body size in bytes.
    pub size: u64,
    /// SHA-256 of the raw body, lowercase hex.
    pub body_sha256: String,
    /// The allow-listed request headers as a JSON object text; the store does not read it.
    pub headers_json: String,
    /// The raw body, kept until the payload retention passes.
    pub payload: Option<Vec<u8>>,
    /// What recognizes a provider retry of this packet; `None` for a rejection made before a key
    /// could be computed.
    pub transport_key: Option<TransportKey>,
    /// The caller's correlation id (the `X-Correlation-Id` or `X-Request-Id` header), kept so logs
    /// and the journal can be joined.
    pub correlation_id: Option<String>,
}

/// A journaled delivery read back. `payload` is `None` once the payload retention passed
/// (and in listings, which never carry bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The journal's id (`dlv_…`), time-ordered by reception.
    pub id: DeliveryId,
    /// The tenant the delivery was posted for.
    pub tenant: String,
    /// The provider's name, as the contract spells it.
    pub provider: String,
    /// The provider's environment (`live`, `test`…).
    pub env: String,
    /// The event type, `None` when the reception was rejected before it could be told.
    pub event_type: Option<String>,
    /// When the service received the request, to the millisecond.
    pub received_at: OffsetDateTime,
    /// Raw body size in bytes (kept after the payload itself is dropped).
    pub size: u64,
    /// SHA-256 of the raw body, lowercase hex (kept after the payload itself is dropped).
    pub body_sha256: String,
    /// The allow-listed request headers as JSON object text, exactly as journaled.
    pub headers_json: String,
    /// The raw body; `None` once the payload retention dropped it, and always in listings.
    pub payload: Option<Vec<u8>>,
    /// The packet's transport key, when one was computed.
    pub transport_key: Option<TransportKey>,
    /// The caller's correlation id, when the request carried one.
    pub correlation_id: Option<String>,
}

/// Which tenants a caller may see. Operator tokens may be restricted to some tenants; every
/// listing takes one so the restriction is applied by the query, not after it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TenantFilter {
    #[default]
    /// No restriction: every tenant is visible.
    All,
    /// Only these tenants (exact names) are visible; an empty list shows nothing.
    Only(Vec<String>),
}

impl TenantFilter {
    /// Whether `tenant` is visible under this filter.
    ///
    /// ```
    /// use oncegate_store::TenantFilter;
    ///
    /// assert!(TenantFilter::All.allows("acme"));
    /// let only = TenantFilter::Only(vec!["acme".to_owned()]);
    /// assert!(only.allows("acme"));
    /// assert!(!only.allows("globex"));
    /// ```
    pub fn allows(&self, tenant: &str) -> bool {
        match self {
            TenantFilter::All => true,
            TenantFilter::Only(list) => list.iter().any(|t| t == tenant),
        }
    }
}

/// A search over deliveries, newest first. Every field narrows; `None` means "any".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFilter {
    /// The tenants the caller may see; applied in the query itself.
    pub tenants: TenantFilter,
    /// Only deliveries from this provider.
    pub provider: Option<String>,
    /// Only deliveries for this environment.
    pub env: Option<String>,
    /// Only deliveries of this event type (rejections with no known type never match).
    pub event_type: Option<String>,
    /// Only deliveries whose proof recorded this action (undecided ones never match).
    pub action: Option<Action>,
    /// The effect key as stored in the proof.
    pub key: Option<String>,
    /// Only deliveries with this correlation id.
    pub correlation_id: Option<String>,
    /// Only deliveries with this transport key value (the hex digest, as [`TransportKey::value`]).
    pub transport_key: Option<String>,
    /// Received at or after.
    pub since: Option<OffsetDateTime>,
    /// Received strictly before.
    pub until: Option<OffsetDateTime>,
    /// Paging: only deliveries whose id sorts before this one (ids are time-ordered).
    pub before: Option<DeliveryId>,
    /// The most rows returned (100 by default).
    pub limit: u32,
}

impl Default for DeliveryFilter {
    fn default() -> Self {
        DeliveryFilter {
            tenants: TenantFilter::All,
            provider: None,
            env: None,
            event_type: None,
            action: None,
            key: None,
            correlation_id: None,
            transport_key: None,
            since: None,
            until: None,
            before: None,
            limit: 100,
        }
    }
}

/// One row of a delivery listing: the delivery (without its body) and the gist of its proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySummary {
    /// The journaled delivery; its `payload` is always `None` here.
    pub delivery: DeliveryRecord,
    /// `None` while the delivery has no proof yet (or never got one: the report's gap).
    pub action: Option<Action>,
    /// The proof's one plain sentence explaining the action.
    pub reason: Option<String>,
    /// The effect key the proof recorded, when a strategy made one.
    pub key: Option<String>,
    /// The effect the delivery was reserved for or linked to, when the decision touched one.
    pub effect: Option<EffectId>,
}

const DELIVERY_COLS: &str =
    "d.id, d.tenant, d.provider, d.env, d.event_type, d.received_at, d.size, d.body_sha256, \
     d.headers_json, d.transport_key, d.transport_strength, d.correlation_id";

fn record_from(row: &Row, payload_at: Option<usize>) -> Result<DeliveryRecord> {
    let transport_key = match (row.opt_text(9)?, row.opt_text(10)?) {
        (Some(value), Some(strength)) => Some(TransportKey {
            value,
            strength: TransportStrength::parse(&strength).ok_or_else(|| {
                StoreError::corrupt(format!("unknown transport strength {strength:?}"))
            })?,
        }),
        _ => None,
    };
    Ok(DeliveryRecord {
        id: plan::parse_delivery_id(&row.text(0)?)?,
        tenant: row.text(1)?,
        provider: row.text(2)?,
        env: row.text(3)?,
        event_type: row.opt_text(4)?,
        received_at: from_ms(row.int(5)?)?,
        size: row.int(6)? as u64,
        body_sha256: row.text(7)?,
        headers_json: row.text(8)?,
        payload: match payload_at {
            Some(i) => row.opt_bytes(i)?,
            None => None,
        },
        transport_key,
        correlation_id: row.opt_text(11)?,
    })
}

/// Journals one reception under an id the caller generated (so a retried transaction keeps it).
pub(crate) async fn journal<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
    r: &NewReception,
) -> Result<()> {
    let (sql, params) = journal_statement(id, r);
    tx.exec(sql, &params).await?;
    Ok(())
}

/// The journal's one statement (see `journal`), for a backend that sends several at once.
pub(crate) fn journal_statement<'a>(id: &'a DeliveryId, r: &'a NewReception) -> Statement<'a> {
    (
        "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json, \
         payload, transport_key, transport_strength, correlation_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        vec![
            text(id.as_str()),
            text(r.tenant.as_str()),
            text(r.provider.as_str()),
            text(r.env.as_str()),
            opt_text(r.event_type.as_deref()),
            int(ms(r.received_at)),
            int(i64::try_from(r.size).unwrap_or(i64::MAX)),
            text(r.body_sha256.as_str()),
            text(r.headers_json.as_str()),
            Value::Bytes(r.payload.clone()),
            opt_text(r.transport_key.as_ref().map(|k| k.value.as_str())),
            opt_text(r.transport_key.as_ref().map(|k| k.strength.as_str())),
            opt_text(r.correlation_id.as_deref()),
        ],
    )
}

/// A journal entry written with its decision's proof, one row (schema v14): `event_type` the
/// decision's, `proof` the values of `schema::PROOF_COLUMNS` (`decision::writes`), which may
/// be empty (`writes::no_proof`). The journal's columns are `journal_statement`'s, in its
/// order, the proof's after them.
pub(crate) fn decided_statement<'a>(
    id: &'a DeliveryId,
    r: &'a NewReception,
    event_type: Option<&'a str>,
    proof: Vec<Value<'a>>,
) -> Statement<'a> {
    let (_, mut params) = journal_statement(id, r);
    params[4] = opt_text(event_type);
    params.extend(proof);
    (
        "INSERT INTO deliveries (id, tenant, provider, env, event_type, received_at, size, body_sha256, headers_json, \
         payload, transport_key, transport_strength, correlation_id, decided_at, strategy_name, strategy_version, \
         strategy_level, key_value, confidence, prior, transport, action, layer, reason, flags, rule, matrix_version, \
         reference_delivery, effect_id, queue_item_id, differences, details, link_kind) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, \
         $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33)",
        params,
    )
}

/// The number of the first proof column in `decided_statement`'s placeholders.
pub(crate) const FIRST_PROOF_PLACEHOLDER: usize = 14;

pub(crate) async fn read<T: Tx + Send>(
    tx: &mut T,
    id: &DeliveryId,
) -> Result<Option<DeliveryRecord>> {
    let sql = format!("SELECT {DELIVERY_COLS}, d.payload FROM deliveries d WHERE d.id = $1");
    let rows = tx.query(&sql, &[text(id.as_str())]).await?;
    rows.first().map(|r| record_from(r, Some(12))).transpose()
}

pub(crate) async fn list<T: Tx + Send>(
    tx: &mut T,
    f: &DeliveryFilter,
) -> Result<Vec<DeliverySummary>> {
    // With what its proof (its own row's, schema v14) decided, if it is decided.
    let mut q = Query::new(&format!(
        "SELECT {DELIVERY_COLS}, d.action, d.reason, d.key_value, d.effect_id \
         FROM deliveries d WHERE 1 = 1"
    ));
    q.tenants("d.tenant", &f.tenants);
    q.eq_if("d.provider", f.provider.as_deref());
    q.eq_if("d.env", f.env.as_deref());
    q.eq_if("d.event_type", f.event_type.as_deref());
    q.eq_if("d.action", f.action.map(Action::as_str));
    q.eq_if("d.key_value", f.key.as_deref());
    q.eq_if("d.correlation_id", f.correlation_id.as_deref());
    q.eq_if("d.transport_key", f.transport_key.as_deref());
    // A time range is read as a range of ids (`codes::delivery_id_floor`), on the primary key.
    if let Some(since) = f.since {
        let p = q.bind(int(ms(since)));
        let floor = q.bind(text(delivery_id_floor(since)));
        q.push(&format!(" AND d.id >= {floor} AND d.received_at >= {p}"));
    }
    if let Some(until) = f.until {
        let p = q.bind(int(ms(until)));
        let floor = q.bind(text(delivery_id_floor(until)));
        q.push(&format!(" AND d.id < {floor} AND d.received_at < {p}"));
    }
    if let Some(before) = &f.before {
        let p = q.bind(text(before.as_str()));
        q.push(&format!(" AND d.id < {p}"));
    }
    let p = q.bind(int(i64::from(f.limit)));
    q.push(&format!(" ORDER BY d.id DESC LIMIT {p}"));
    let rows = tx.query(&q.sql, &q.params).await?;
    rows.iter()
        .map(|r| {
            Ok(DeliverySummary {
                delivery: record_from(r, None)?,
                action: r
                    .opt_text(12)?
                    .map(|a| {
                        Action::parse(&a)
                            .ok_or_else(|| StoreError::corrupt(format!("unknown action {a:?}")))
                    })
                    .transpose()?,
                reason: r.opt_text(13)?,
                key: r.opt_text(14)?,
                effect: r
                    .opt_text(15)?
                    .map(|e| plan::parse_effect_id(&e))
                    .transpose()?,
            })
        })
        .collect()
}
