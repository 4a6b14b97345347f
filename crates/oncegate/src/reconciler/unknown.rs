//! Items waiting on an effect whose outcome is unknown: the consumer's verification API
//! settles them, never the authority; without one, a person.

use super::*;

impl Run<'_> {
    /// An item waiting on an effect whose outcome is unknown is the consumer's question, never
    /// the authority's: the type's verification API settles it, else a person. `None` when the
    /// item is not about an unknown outcome.
    pub(super) async fn unknown_outcome(
        &self,
        item: &QueueItem,
        t: Option<&EventType>,
        states: &BTreeMap<EffectId, EffectState>,
    ) -> Result<Option<ItemReport>, StoreError> {
        let Some(effect_id) = &item.existing_effect else {
            return Ok(None);
        };
        // As the pass read it (`items`): a reservation whose lease passed reads as unknown.
        if states.get(effect_id) != Some(&EffectState::Unknown) {
            return Ok(None);
        }
        let Some(verifier) = t.and_then(|t| t.verify.as_ref()) else {
            return Ok(Some(self.keep_open(
                item,
                "no_verifier",
                format!("the outcome of effect {effect_id} is unknown and only the consumer can say whether it ran; the type declares no `verify` API: a person resolves it"),
                None,
            )));
        };
        let subject = crate::verifier::Subject {
            effect_id: effect_id.as_str(),
            tenant: &item.tenant,
            provider: &item.provider,
            env: &item.env,
            event_type: item.event_type.as_deref().unwrap_or(""),
        };
        let (answer, mut evidence) =
            crate::verifier::ask(self.client.shared_http(), verifier, &subject).await;
        evidence.at = Some(self.now.unix_timestamp());
        evidence.effect = Some(effect_id.as_str().to_owned());
        let (verified, verdict, note) = match answer {
            crate::verifier::Answer::Inconclusive { why } => {
                return Ok(Some(self.keep_open(
                    item,
                    "inconclusive",
                    why,
                    Some(evidence),
                )));
            }
            crate::verifier::Answer::Applied { result } => (
                oncegate_store::Verified::Applied { result },
                "duplicate",
                format!("the consumer's verification API says effect {effect_id} was applied: completed with its result"),
            ),
            crate::verifier::Answer::NotApplied => (
                oncegate_store::Verified::NotApplied,
                "released",
                format!("the consumer's verification API says effect {effect_id} was not applied: released as claimable work under a new fencing token"),
            ),
        };
        let settled = self
            .store
            .settle_unknown(
                effect_id,
                &verified,
                Resolution {
                    outcome: ResolutionOutcome::Duplicate,
                    authoritative_ref: None,
                    note: note.clone(),
                    by: VERIFIER.to_owned(),
                    at: self.now,
                },
                &evidence.to_json(),
            )
            .await?;
        self.count(if verdict == "duplicate" {
            "verified_applied"
        } else {
            "verified_not_applied"
        });
        if let Some(m) = self.metrics {
            for i in &settled {
                m.settled("service", i, self.now);
            }
        }
        self.settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(settled.iter().map(|i| i.id.clone()));
        tracing::info!(queue_item = %item.id, effect_id = %effect_id, verdict, settled = settled.len(), "an unknown outcome settled by the consumer's verification API");
        Ok(Some(ItemReport {
            item: item.id.clone(),
            delivery: item.delivery.clone(),
            verdict,
            authoritative_ref: None,
            effect: Some(effect_id.clone()),
            summary: note,
        }))
    }
}
