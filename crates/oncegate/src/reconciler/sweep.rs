//! The invisible-losses sweep: the operations an authority lists for the resources seen
//! recently that no local effect accounts for.

use super::*;

impl Run<'_> {
    /// The invisible-losses sweep over every type whose authority asks for one.
    pub(super) async fn sweep(&self) -> Result<Vec<SweepReport>, ReconcileError> {
        let mut out = Vec::new();
        for provider in self.contract.providers.values() {
            for t in provider.types.values() {
                let Some(authority) = &t.authority else {
                    continue;
                };
                let Some(window) = authority.sweep_window else {
                    continue;
                };
                let since = self.now - crate::gate::to_time(window);
                let resources = self
                    .store
                    .resources_seen(&provider.name, &t.name, since)
                    .await?;
                // Every environment starts at zero, so a gauge falls back once nothing is missing.
                let mut totals: BTreeMap<String, u64> = self
                    .contract
                    .environments
                    .iter()
                    .map(|env| (env.clone(), 0))
                    .collect();
                for scope in resources {
                    let report = self.sweep_one(t, &scope).await?;
                    *totals.entry(scope.env.clone()).or_default() += report.missing.len() as u64;
                    out.push(report);
                }
                if let Some(m) = self.metrics {
                    for (env, n) in totals {
                        m.set_missing(&provider.name, &env, &t.name, n);
                    }
                }
            }
        }
        Ok(out)
    }

    async fn sweep_one(
        &self,
        t: &EventType,
        scope: &ResourceScope,
    ) -> Result<SweepReport, ReconcileError> {
        let authority = t
            .authority
            .as_ref()
            .expect("only types with an authority are swept");
        let ctx = UrlContext {
            tenant: &scope.tenant,
            provider: &scope.provider,
            env: &scope.env,
            resource: Some(&scope.resource),
            payload: None,
        };
        let answer = match self.client.operations(t, authority, &ctx, self.salt).await {
            Ok(a) => a,
            Err(e) => {
                return Ok(SweepReport {
                    scope: scope.clone(),
                    missing: vec![],
                    error: Some(e.to_string()),
                })
            }
        };
        let effects = self.store.resource_effects(scope).await?;
        let declared = reconcile::declared(authority);
        let missing: Vec<MissingOperation> =
            reconcile::unmatched(&declared, &answer.operations, &local_effects(&effects))
                .into_iter()
                .map(|op| MissingOperation {
                    reference: op.reference.clone(),
                    discriminants: op.discriminants.clone(),
                })
                .collect();
        self.store.record_missing(scope, &missing, self.now).await?;
        if !missing.is_empty() {
            tracing::warn!(provider = %scope.provider, env = %scope.env, event_type = %scope.event_type, missing = missing.len(), "the authority lists operations with no local effect");
        }
        Ok(SweepReport {
            scope: scope.clone(),
            missing: missing.into_iter().map(|m| m.reference).collect(),
            error: None,
        })
    }
}
