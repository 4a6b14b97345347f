//! `oncegate corpus export`: deliveries from the store as corpus lines (the format of
//! `oncegate_core::corpus`), sensitive fields masked, labeled from queue resolutions.
//!
//! A resolution says which business operation a delivery carried: `duplicate` puts it on its
//! reference delivery's effect, `distinct` on a new one. Both the resolved delivery and its
//! reference are exported with `label.operation` set to the effect they belong to, so a
//! resolved ambiguity becomes a regression case that `corpus replay` checks forever after.

use anyhow::{bail, Context, Result};
use oncegate::store::{DeliveryFilter, QueueFilter, QueueStatus, ResolutionOutcome, TenantFilter};
use oncegate::Gate;
use oncegate_core::canon::to_key_form;
use oncegate_core::contract::Contract;
use oncegate_core::corpus::{Body, Label, Record};
use oncegate_core::identity::mask;
use oncegate_core::ids::DeliveryId;
use oncegate_core::json::{self, Limits, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub struct Options<'a> {
    pub contract: &'a Contract,
    pub salt: Option<Vec<u8>>,
    /// Only deliveries settled by a queue resolution, and their reference deliveries.
    pub resolved: bool,
    pub since: Option<OffsetDateTime>,
}

/// What an export wrote, and what it had to leave out.
pub struct Exported {
    pub lines: String,
    pub written: usize,
    pub without_payload: usize,
}

/// Labels from resolved queue items: delivery id → label.
async fn labels(gate: &Gate) -> Result<HashMap<String, Label>> {
    let items = gate
        .queue_list(&QueueFilter {
            tenants: TenantFilter::All,
            status: Some(QueueStatus::Resolved),
            kind: None,
            provider: None,
            limit: u32::MAX,
            ..QueueFilter::default()
        })
        .await?;
    let mut out = HashMap::new();
    for item in items {
        let Some(r) = &item.resolution else { continue };
        let operation = match (r.resolution.outcome, &r.effect, &item.existing_effect) {
            (_, Some(effect), _) => effect.to_string(),
            (ResolutionOutcome::Duplicate, None, Some(existing)) => existing.to_string(),
            // A distinct outcome with no effect recorded is still an operation of its own.
            _ => format!("resolved:{}", item.delivery),
        };
        if let (Some(reference), Some(existing)) = (&item.first_delivery, &item.existing_effect) {
            out.entry(reference.to_string()).or_insert(Label {
                operation: existing.to_string(),
                resolution: None,
                reference: None,
            });
        }
        out.insert(
            item.delivery.to_string(),
            Label {
                operation,
                resolution: Some(r.resolution.outcome.as_str().to_owned()),
                reference: item.first_delivery.as_ref().map(ToString::to_string),
            },
        );
    }
    Ok(out)
}

/// Replaces each sensitive field with the keyed hash the service's keys use for it.
fn masked(
    doc: &mut Value,
    contract: &Contract,
    provider: &str,
    event_type: Option<&str>,
    salt: Option<&[u8]>,
) -> Result<()> {
    let Some(t) = event_type.and_then(|e| contract.event_type(provider, e)) else {
        return Ok(());
    };
    for p in &t.sensitive {
        if let Some(v) = p.get_mut(doc) {
            let Some(salt) = salt else {
                bail!("{provider}/{} declares sensitive fields: set ONCEGATE_KEY_SALT or ONCEGATE_KEY_SALT_FILE to the service's salt so they are exported masked", t.name);
            };
            *v = Value::String(mask(salt, &to_key_form(v)));
        }
    }
    Ok(())
}

pub async fn run(gate: &Gate, options: &Options<'_>) -> Result<Exported> {
    let labels = labels(gate).await?;
    let mut summaries = Vec::new();
    let mut before: Option<DeliveryId> = None;
    loop {
        let page = gate
            .deliveries(&DeliveryFilter {
                since: options.since,
                before: before.clone(),
                limit: 500,
                ..DeliveryFilter::default()
            })
            .await?;
        let Some(last) = page.last() else { break };
        before = Some(last.delivery.id.clone());
        let full = page.len() < 500;
        summaries.extend(page);
        if full {
            break;
        }
    }
    // The store lists newest first; a corpus reads in the order deliveries arrived.
    summaries.reverse();
    let mut out = Exported {
        lines: String::new(),
        written: 0,
        without_payload: 0,
    };
    for s in summaries {
        let id = s.delivery.id.to_string();
        let label = labels.get(&id).cloned();
        if options.resolved && label.is_none() {
            continue;
        }
        let Some(d) = gate.delivery(&s.delivery.id).await? else {
            continue;
        };
        let Some(payload) = d.payload else {
            out.without_payload += 1;
            continue;
        };
        let limits = Limits {
            max_depth: options.contract.settings.max_depth,
            max_bytes: payload.len().max(1),
        };
        let body = match json::parse(&payload, &limits) {
            Ok(mut doc) => {
                masked(
                    &mut doc,
                    options.contract,
                    &d.provider,
                    d.event_type.as_deref(),
                    options.salt.as_deref(),
                )?;
                Body::Json(doc)
            }
            Err(e) => Body::Base64 {
                data: super::base64(&payload),
                reason: e.to_string(),
            },
        };
        let headers: std::collections::BTreeMap<String, String> =
            serde_json::from_str(&d.headers_json).unwrap_or_default();
        let record = Record {
            tenant: d.tenant,
            provider: d.provider,
            env: d.env,
            event_type: d.event_type,
            headers: headers.into_iter().collect(),
            body,
            received_at: d.received_at.format(&Rfc3339).ok(),
            delivery_id: Some(id),
            decision: s.action.map(|a| a.as_str().to_owned()),
            label,
        };
        let _ = writeln!(out.lines, "{}", record.to_line());
        out.written += 1;
    }
    Ok(out)
}

/// Parses `--since`.
pub fn since(s: Option<&str>) -> Result<Option<OffsetDateTime>> {
    s.map(|s| {
        OffsetDateTime::parse(s, &Rfc3339)
            .with_context(|| format!("--since {s:?} is not an RFC 3339 instant"))
    })
    .transpose()
}
