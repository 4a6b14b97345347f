//! A cut-over to new strategy versions, carried over to the effects already recorded: keys
//! that operation-scoped strategies wrote under their event type move to their operation's
//! scope, and every live effect whose key the new contract makes differently gets that key as
//! an alias, recomputed with the core's identity over the effect's first delivery (the very
//! code the decisions run) and consulted by the decision when the key itself holds nothing.
//! Keys are scoped by strategy name and version, so a new version never reinterprets an old
//! key; an effect whose payload is gone, or that the new contract cannot key, is said so.

use oncegate_core::identity::{identify, Origin};
use oncegate_core::json::{self, Limits};
use oncegate_store::{
    KeyScope, MigrationSource, NewAlias, OperationScope, RescopeCounts, StoreError,
};

use crate::gate::Gate;

/// What a migration did with one effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasOutcome {
    /// Its new key was recorded as an alias (`to`: the new `strategy@version`).
    Aliased {
        /// The strategy and version that make the new key.
        to: String,
    },
    /// The new key already names an effect: no alias takes it.
    AlreadyHeld {
        /// The strategy and version that make the new key.
        to: String,
    },
    /// The new contract keys it with the same strategy version: nothing to do.
    Unchanged,
    /// No alias could be made; the old key protects it while it stays indexed.
    NotAliased {
        /// Why, in one sentence.
        why: String,
    },
}

impl Gate {
    /// Moves keys that operation-scoped strategies of the gate's contract wrote under their
    /// event type to their operation's scope (idempotent, nothing deleted).
    pub async fn rescope_operations(&self) -> Result<RescopeCounts, StoreError> {
        self.store()
            .rescope(&OperationScope::from_contract(self.contract()))
            .await
    }

    /// Every effect with its first delivery's payload, oldest first: what a migration
    /// recomputes keys from.
    pub async fn migration_sources(&self) -> Result<Vec<MigrationSource>, StoreError> {
        self.store().migration_sources().await
    }

    /// Records, for one effect, the key the gate's contract makes for it as an alias when it
    /// differs from the key the effect holds (computed under the gate's salt, which must be the
    /// service's where the contract declares sensitive fields).
    pub async fn migrate_effect(&self, s: &MigrationSource) -> Result<AliasOutcome, StoreError> {
        let Some((name, version)) = &s.strategy else {
            return Ok(AliasOutcome::NotAliased {
                why: "the effect has no strategy key (it was released from the queue)".to_owned(),
            });
        };
        let Some(event_type) = &s.event_type else {
            return Ok(AliasOutcome::NotAliased {
                why: "the effect records no event type".to_owned(),
            });
        };
        let Some(t) = self.contract().event_type(&s.provider, event_type) else {
            return Ok(AliasOutcome::NotAliased {
                why: format!("{}/{event_type} is not in the new contract", s.provider),
            });
        };
        let Some(payload) = &s.payload else {
            return Ok(AliasOutcome::NotAliased {
                why: format!(
                    "the payload of its first delivery {} is no longer retained, so the new key cannot be computed; keep {name}@{version} indexed until its horizon passes",
                    s.first_delivery
                ),
            });
        };
        let limits = Limits {
            max_bytes: payload.len().max(self.contract().settings.max_body_bytes),
            max_depth: self.contract().settings.max_depth,
        };
        let doc = match json::parse(payload, &limits) {
            Ok(doc) => doc,
            Err(e) => {
                return Ok(AliasOutcome::NotAliased {
                    why: format!("its first delivery is not strict JSON: {e}"),
                })
            }
        };
        let origin = Origin {
            tenant: &s.tenant,
            provider: &s.provider,
            env: &s.env,
        };
        // Only the payload is retained with an effect's first delivery, not its headers: a
        // strategy keyed on a header makes no key here, and the old key stays indexed instead.
        let identity = identify(t, origin, &doc, &[], self.salt());
        let Some(key) = identity.effect else {
            let skipped: Vec<String> = identity
                .skipped
                .iter()
                .map(|k| format!("{}: {}", k.label(), k.why))
                .collect();
            return Ok(AliasOutcome::NotAliased {
                why: format!(
                    "no strategy of the new contract makes a key for it ({})",
                    skipped.join("; ")
                ),
            });
        };
        if &key.strategy == name && key.version == *version {
            return Ok(AliasOutcome::Unchanged);
        }
        let to = format!("{}@{}", key.strategy, key.version);
        let recorded = self
            .store()
            .record_alias(&NewAlias {
                effect: s.effect.clone(),
                tenant: s.tenant.clone(),
                provider: s.provider.clone(),
                env: s.env.clone(),
                event_type: s.event_type.clone(),
                scope: KeyScope::of(&key),
                strategy: key.strategy,
                version: key.version,
                key: key.key,
                now: self.now(),
            })
            .await?;
        Ok(if recorded {
            AliasOutcome::Aliased { to }
        } else {
            AliasOutcome::AlreadyHeld { to }
        })
    }
}
