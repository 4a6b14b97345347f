//! Moves the keys of operation-scoped strategies written under their event type to the scope
//! of their operation, so that one key means one effect for every type declaring it.
//!
//! Before the fix this module accompanies, the store hashed an effect key with the delivery's
//! event type even when the strategy said `scope = "operation"`: `payment.succeeded` and
//! `charge.captured` declaring the operation `capture` made the same key value but two index
//! entries, and each type's first delivery reserved its own effect. New keys are hashed with
//! the operation ([`crate::KeyScope::Operation`]); the rows written before are rewritten here.
//!
//! The stored rows cannot tell on their own which strategy was operation-scoped (the contract
//! says so), so the caller names them, and the work is idempotent: a row is moved only while
//! its hash is still the one its own event type gives. When the operation's slot is already
//! held (two types had each reserved an effect for one key, or a delivery reserved it after
//! the upgrade), the first holder keeps it and the other effect stays where it was, counted
//! in `doubled`: those are the effects that ran twice, for an operator to look at. Nothing is
//! deleted: an index entry is moved (inserted under the new hash, then its old row removed),
//! never dropped; an effect holding its key's slot itself (schema version 13) moves with it,
//! numbered last among the operation's effects, and gives the slot up when one is held there.

use crate::codes;
use crate::effect;
use crate::error::StoreError;
use crate::sql::{int, text, Tx, Value};

/// One operation-scoped strategy of the contract, with the types of the provider that declare
/// its operation and use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationScope {
    /// The provider whose types share the operation.
    pub provider: String,
    /// Every type of the provider whose hierarchy has this strategy for this operation.
    pub event_types: Vec<String>,
    /// The operation-scoped strategy's name.
    pub strategy: String,
    /// The strategy's version (a key is only ever moved within its own name and version).
    pub version: u32,
    /// The operation the types declare (`capture`…): the scope the keys move to.
    pub operation: String,
}

impl OperationScope {
    /// Every operation-scoped strategy of `contract` (active and shadow strategies), with the
    /// types that use it for their operation.
    ///
    /// ```
    /// let toml = r#"
    /// [providers.pay]
    /// event_type = "/type"
    /// [providers.pay.types."payment.succeeded"]
    /// criticality = "critical"
    /// operation = "capture"
    /// discriminants = ["/data/amount"]
    /// [[providers.pay.types."payment.succeeded".strategies]]
    /// name = "capture-id"
    /// version = 1
    /// level = "business_ref"
    /// fields = ["/data/payment_id"]
    /// scope = "operation"
    /// "#;
    /// let contract = oncegate_core::contract::parse("c.toml", toml).unwrap();
    /// let scopes = oncegate_store::OperationScope::from_contract(&contract);
    /// assert_eq!(scopes.len(), 1);
    /// assert_eq!(scopes[0].operation, "capture");
    /// assert_eq!(scopes[0].event_types, ["payment.succeeded"]);
    /// ```
    pub fn from_contract(contract: &oncegate_core::contract::Contract) -> Vec<OperationScope> {
        let mut out: Vec<OperationScope> = Vec::new();
        for p in contract.providers.values() {
            for t in p.types.values() {
                for s in t.strategies.iter().chain(&t.shadow) {
                    if s.scope != oncegate_core::strategy::ScopeKind::Operation {
                        continue;
                    }
                    let same = |o: &&mut OperationScope| {
                        o.provider == p.name
                            && o.strategy == s.name
                            && o.version == s.version
                            && o.operation == t.operation
                    };
                    match out.iter_mut().find(|o| same(o)) {
                        Some(o) => o.event_types.push(t.name.clone()),
                        None => out.push(OperationScope {
                            provider: p.name.clone(),
                            event_types: vec![t.name.clone()],
                            strategy: s.name.clone(),
                            version: s.version,
                            operation: t.operation.clone(),
                        }),
                    }
                }
            }
        }
        out
    }
}

/// What a rescoping moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RescopeCounts {
    /// Effects whose key now reads under the operation's scope.
    pub effects: u64,
    /// Fast-index entries moved to the operation's scope: rows of `effect_index`, the slots of
    /// keys reserved before schema version 13 (a slot since is its effect's own, and moves
    /// with it).
    pub index_entries: u64,
    /// Queue items (quarantined, to reconcile) whose key was moved with them.
    pub queue_items: u64,
    /// Effects of a key whose operation slot another effect of the same key already held:
    /// the same business effect reserved twice before the fix. They are kept and reported.
    pub doubled: u64,
}

/// Rewrites the scope hashes of `scopes`' effects, index entries and queue items, in one
/// transaction. Running it again moves nothing.
pub(crate) async fn rescope<T: Tx + Send>(
    tx: &mut T,
    scopes: &[OperationScope],
) -> Result<RescopeCounts, StoreError> {
    let mut counts = RescopeCounts::default();
    for s in scopes {
        // Oldest first, so the effect that reserved a doubled key first keeps the slot.
        let rows = tx
            .query(
                "SELECT id, tenant, env, event_type, key_value, scope_hash, indexed FROM effects \
                 WHERE provider = $1 AND strategy_name = $2 AND strategy_version = $3 \
                 AND key_value IS NOT NULL AND scope_hash IS NOT NULL ORDER BY created_at, id",
                &[
                    text(s.provider.as_str()),
                    text(s.strategy.as_str()),
                    int(i64::from(s.version)),
                ],
            )
            .await?;
        for row in &rows {
            let id = row.text(0)?;
            let tenant = row.text(1)?;
            let env = row.text(2)?;
            let Some(event_type) = row.opt_text(3)? else {
                continue;
            };
            if !s.event_types.contains(&event_type) {
                continue;
            }
            let key = row.text(4)?;
            let stored = row.text(5)?;
            let hash = |part: &str| {
                codes::scope_hash(
                    &tenant,
                    &s.provider,
                    &env,
                    Some(part),
                    &s.strategy,
                    s.version,
                    &key,
                )
            };
            let legacy = hash(&event_type);
            if stored != legacy {
                continue;
            }
            let shared = hash(&format!("operation:{}", s.operation));
            // An effect holding its key's slot itself (schema version 13) keeps it under the
            // operation's scope unless an effect there holds one already; either way it comes
            // last among the scope's effects.
            let held = !tx
                .query(
                    "SELECT 1 FROM effect_index WHERE scope_hash = $1 \
                     UNION ALL SELECT 1 FROM effects WHERE scope_hash = $1 AND indexed",
                    &[text(shared.as_str())],
                )
                .await?
                .is_empty();
            let seq = effect::next_seq(tx, &shared).await?;
            let moved = tx
                .exec(
                    "UPDATE effects SET scope_hash = $1, scope_seq = $5, \
                     indexed = CASE WHEN $4 THEN FALSE ELSE indexed END \
                     WHERE id = $2 AND scope_hash = $3",
                    &[
                        text(shared.as_str()),
                        text(id.as_str()),
                        text(legacy.as_str()),
                        Value::Bool(held),
                        int(seq),
                    ],
                )
                .await?;
            counts.effects += moved;
            if moved > 0 && held && row.boolean(6)? {
                counts.doubled += 1;
            }
            counts.queue_items += tx
                .exec(
                    "UPDATE queue_items SET scope_hash = $1 WHERE scope_hash = $2",
                    &[text(shared.as_str()), text(legacy.as_str())],
                )
                .await?;
            let moved = tx
                .exec(
                    "INSERT INTO effect_index (scope_hash, effect_id, expires_at) \
                     SELECT $1, effect_id, expires_at FROM effect_index WHERE scope_hash = $2 \
                     ON CONFLICT (scope_hash) DO NOTHING",
                    &[text(shared.as_str()), text(legacy.as_str())],
                )
                .await?;
            if moved > 0 {
                tx.exec(
                    "DELETE FROM effect_index WHERE scope_hash = $1",
                    &[text(legacy.as_str())],
                )
                .await?;
                counts.index_entries += moved;
            } else {
                let held = tx
                    .query(
                        "SELECT effect_id FROM effect_index WHERE scope_hash = $1",
                        &[text(shared.as_str())],
                    )
                    .await?;
                if held.first().map(|r| r.text(0)).transpose()?.as_deref() != Some(id.as_str())
                    && !held.is_empty()
                {
                    counts.doubled += 1;
                }
            }
        }
    }
    Ok(counts)
}
