//! Deliveries: what is journaled about each reception before anything is decided, and how
//! operators find them again.

use oncegate_core::ids::{DeliveryId, EffectId};
use oncegate_core::matrix::Action;
use time::OffsetDateTime;

/// How far a provider's transport key can be trusted to name one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportStrength {
    /// A provider delivery id header.
    Strong,
    /// The raw body hash: two legitimate operations can be byte-identical.
    Weak,
}

impl TransportStrength {
    pub fn as_str(self) -> &'static str {
        match self {
            TransportStrength::Strong => "strong",
            TransportStrength::Weak => "weak",
        }
    }

    pub fn parse(s: &str) -> Option<TransportStrength> {
        [TransportStrength::Strong, TransportStrength::Weak]
            .into_iter()
            .find(|t| t.as_str() == s)
    }
}

/// The key that recognizes the same packet delivered again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportKey {
    pub value: String,
    pub strength: TransportStrength,
}

/// One reception, as the service saw it, before any decision. Rejected receptions are
/// journaled too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReception {
    pub tenant: String,
    pub provider: String,
    pub env: String,
    /// Unknown when the body could not be read far enough to tell (a rejection).
    pub event_type: Option<String>,
    pub received_at: OffsetDateTime,
    /// Raw body size in bytes.
    pub size: u64,
    /// SHA-256 of the raw body, lowercase hex.
    pub body_sha256: String,
    /// The allow-listed request headers as a JSON object text; the store does not read it.
    pub headers_json: String,
    /// The raw body, kept until the payload retention passes.
    pub payload: Option<Vec<u8>>,
    pub transport_key: Option<TransportKey>,
    pub correlation_id: Option<String>,
}

/// A journaled delivery read back. `payload` is `None` once the payload retention passed
/// (and in listings, which never carry bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    pub id: DeliveryId,
    pub tenant: String,
    pub provider: String,
    pub env: String,
    pub event_type: Option<String>,
    pub received_at: OffsetDateTime,
    pub size: u64,
    pub body_sha256: String,
    pub headers_json: String,
    pub payload: Option<Vec<u8>>,
    pub transport_key: Option<TransportKey>,
    pub correlation_id: Option<String>,
}

/// Which tenants a caller may see. Operator tokens may be restricted to some tenants; every
/// listing takes one so the restriction is applied by the query, not after it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TenantFilter {
    #[default]
    All,
    Only(Vec<String>),
}

impl TenantFilter {
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
    pub tenants: TenantFilter,
    pub provider: Option<String>,
    pub env: Option<String>,
    pub event_type: Option<String>,
    pub action: Option<Action>,
    /// The effect key as stored in the proof.
    pub key: Option<String>,
    pub correlation_id: Option<String>,
    pub transport_key: Option<String>,
    /// Received at or after.
    pub since: Option<OffsetDateTime>,
    /// Received strictly before.
    pub until: Option<OffsetDateTime>,
    /// Paging: only deliveries whose id sorts before this one (ids are time-ordered).
    pub before: Option<DeliveryId>,
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
    pub delivery: DeliveryRecord,
    /// `None` while the delivery has no proof yet (or never got one: the report's gap).
    pub action: Option<Action>,
    pub reason: Option<String>,
    pub key: Option<String>,
    pub effect: Option<EffectId>,
}
