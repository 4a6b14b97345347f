//! The store's calls for key strategies that change: what `oncegate migrate` recomputes keys
//! from and the aliases it records, the move of keys to their operation's scope, and the
//! shadow strategies' own index and disagreements.

use time::OffsetDateTime;

use super::{Result, Store};
use crate::alias::{self, MigrationSource, NewAlias};
use crate::rescope::{self, OperationScope, RescopeCounts};
use crate::shadow::{self, ShadowCount, ShadowDisagreement, ShadowObservation, ShadowPrior};

impl Store {
    /// Every effect with its first delivery's payload, oldest first: what `oncegate migrate`
    /// recomputes keys from.
    pub async fn migration_sources(&self) -> Result<Vec<MigrationSource>> {
        self.read((), |tx, ()| Box::pin(alias::migration_sources(tx)))
            .await
    }

    /// Records that `alias.key` (made by another strategy version) names `alias.effect`, so a
    /// decision whose key holds nothing finds that effect. False when the key was already held.
    pub async fn record_alias(&self, alias: &NewAlias) -> Result<bool> {
        self.write(true, alias.clone(), |tx, alias| {
            Box::pin(alias::record_alias(tx, alias))
        })
        .await
    }

    /// Moves the keys that operation-scoped strategies wrote under their event type (before
    /// keys were scoped by the operation) to the operation's scope, in one transaction;
    /// idempotent. See `rescope`.
    pub async fn rescope(&self, scopes: &[OperationScope]) -> Result<RescopeCounts> {
        self.write(true, scopes.to_vec(), |tx, scopes| {
            Box::pin(rescope::rescope(tx, scopes))
        })
        .await
    }

    /// A shadow strategy's look-up in its own index: the prior holder of the key, or `None`
    /// when this delivery is now its first (shadows never touch effects). A write: the
    /// look-up records the delivery as the shadow key's first when it is.
    pub async fn shadow_observe(
        &self,
        observation: &ShadowObservation,
    ) -> Result<Option<ShadowPrior>> {
        self.write(true, observation.clone(), |tx, observation| {
            Box::pin(shadow::observe(tx, observation))
        })
        .await
    }

    /// Records that a shadow would have decided otherwise (once per delivery and shadow).
    pub async fn shadow_disagreement(&self, d: &ShadowDisagreement) -> Result<()> {
        self.write(true, d.clone(), |tx, d| {
            Box::pin(shadow::record_disagreement(tx, d))
        })
        .await
    }

    /// Disagreements per tenant/provider/env/type/shadow since `since`.
    pub async fn shadow_counts(&self, since: OffsetDateTime) -> Result<Vec<ShadowCount>> {
        self.read((), move |tx, ()| Box::pin(shadow::counts(tx, since)))
            .await
    }
}
