//! `oncegate explain`: one delivery's proof as a page of text a support engineer can read out,
//! without recomputing any key by hand.

use anyhow::{anyhow, Result};
use oncegate::store::TenantFilter;
use oncegate::{DeliveryProof, Gate};
use oncegate_core::ids::DeliveryId;
use std::fmt::Write as _;
use time::format_description::well_known::Rfc3339;

fn when(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// The proof of `raw`, whole.
async fn read(gate: &Gate, raw: &str) -> Result<(DeliveryId, DeliveryProof)> {
    let id: DeliveryId = raw.parse().map_err(|e| anyhow!("{e}"))?;
    let proof = gate
        .delivery_proof(&id, &TenantFilter::All)
        .await?
        .ok_or_else(|| anyhow!("no delivery {id} in this store"))?;
    Ok((id, proof))
}

/// Delivery `raw` read back from the archive at `dir` (see [`oncegate::ArchivedDelivery`]).
pub async fn archived(dir: &std::path::Path, raw: &str) -> Result<oncegate::ArchivedDelivery> {
    let id: DeliveryId = raw.parse().map_err(|e| anyhow!("{e}"))?;
    oncegate::ArchivedDelivery::open(dir, &id)
        .await
        .map_err(|e| anyhow!("archive {}: {e}", dir.display()))?
        .ok_or_else(|| anyhow!("no delivery {id} in the archive {}", dir.display()))
}

/// Renders the proof of `id` read through the gate.
pub async fn render(gate: &Gate, id: &str) -> Result<String> {
    let (id, read) = read(gate, id).await?;
    let delivery = &read.delivery;
    let mut out = String::new();
    let w = &mut out;
    writeln!(w, "delivery {id}")?;
    writeln!(
        w,
        "  received   {} from {}/{}/{} type {} ({} bytes, sha256 {})",
        when(delivery.received_at),
        delivery.tenant,
        delivery.provider,
        delivery.env,
        delivery.event_type.as_deref().unwrap_or("(unknown)"),
        delivery.size,
        &delivery.body_sha256[..delivery.body_sha256.len().min(16)]
    )?;
    if let Some(t) = &delivery.transport_key {
        writeln!(w, "  transport  {} key {}", t.strength.as_str(), t.value)?;
    }
    let Some(proof) = &read.decision else {
        writeln!(w, "  decision   none recorded: this reception has no proof (it counts in the report's unexplained gap)")?;
        return Ok(out);
    };
    writeln!(
        w,
        "  decision   {} (rule {}, matrix v{})",
        proof.action, proof.rule, proof.matrix_version
    )?;
    writeln!(w, "  reason     {}", proof.reason)?;
    if let Some(layer) = proof.layer {
        writeln!(w, "  layer      {}", layer.as_str())?;
    }
    if !proof.flags.is_empty() {
        let flags: Vec<&str> = proof.flags.iter().map(|f| f.as_str()).collect();
        writeln!(w, "  flags      {}", flags.join(", "))?;
    }
    match &proof.strategy {
        Some(s) => writeln!(
            w,
            "  strategy   {}@{} level {} confidence {}",
            s.name,
            s.version,
            s.level,
            proof.confidence.map_or("?", |c| c.as_str())
        )?,
        None => writeln!(w, "  strategy   none applied")?,
    }
    // The gate keeps what the core computed (skipped strategies, fields used) as typed details.
    let details = &read.details;
    for s in &details.skipped {
        writeln!(w, "  skipped    {}@{}: {}", s.name, s.version, s.why)?;
    }
    for f in &details.fields {
        let pointer = if f.pointer.is_empty() {
            "(canonical body)"
        } else {
            f.pointer.as_str()
        };
        writeln!(w, "  field      {pointer} = {}", f.shown)?;
    }
    if let Some(scope) = &details.scope {
        writeln!(w, "  scope      {scope}")?;
    }
    if !details.shared_by.is_empty() {
        writeln!(
            w,
            "  shared     one effect for the types {} (they declare the same operation)",
            details.shared_by.join(", ")
        )?;
    }
    for note in &details.notes {
        writeln!(w, "  note       {note}")?;
    }
    if let Some(code) = &details.rejection {
        writeln!(w, "  rejected   {code}")?;
    }
    if let Some(original) = &details.replay_of {
        writeln!(w, "  replay of  {original} (a deliberate late replay)")?;
    }
    for shadow in &details.shadow {
        writeln!(
            w,
            "  shadow     {} would {}: {}",
            shadow.strategy, shadow.action, shadow.reason
        )?;
    }
    if let Some(key) = &proof.key {
        writeln!(w, "  key        {key}")?;
    }
    writeln!(w, "  prior      {}", proof.prior.as_str())?;
    if let Some(r) = &proof.reference_delivery {
        writeln!(w, "  reference  {r} (the first delivery of this effect)")?;
    }
    for d in &proof.differences {
        writeln!(w, "  differs    {d}")?;
    }
    if proof.effect.is_some() {
        if let Some(effect) = &read.effect {
            writeln!(
                w,
                "  effect     {} state {} (fencing {})",
                effect.id,
                effect.state.as_str(),
                effect.fencing_token
            )?;
            if let Some(r) = &effect.result {
                writeln!(w, "  result     {r}")?;
            }
            if let Some(e) = &effect.error {
                writeln!(w, "  error      {e}")?;
            }
            if let Some(a) = &effect.authoritative_ref {
                writeln!(w, "  authority  reference {a}")?;
            }
            for link in &effect.deliveries {
                let me = if link.delivery == id {
                    " (this one)"
                } else {
                    ""
                };
                writeln!(
                    w,
                    "  linked     {} as {} at {}{me}",
                    link.delivery,
                    link.kind.as_str(),
                    when(link.at)
                )?;
            }
            if let Some(f) = &read.forward {
                writeln!(
                    w,
                    "  forward    {} (series {}, {} attempt{} in it){}",
                    f.state.as_str(),
                    f.series,
                    f.attempts,
                    if f.attempts == 1 { "" } else { "s" },
                    f.last_error
                        .as_deref()
                        .map(|e| format!(", last: {e}"))
                        .unwrap_or_default()
                )?;
                for a in &read.attempts {
                    writeln!(
                        w,
                        "  attempt    {}.{} at {} fencing {}: {}{}{}{}",
                        a.series,
                        a.attempt,
                        when(a.started_at),
                        a.fencing_token,
                        a.outcome.as_deref().unwrap_or("in flight"),
                        a.status.map(|s| format!(", HTTP {s}")).unwrap_or_default(),
                        a.latency_ms
                            .map(|l| format!(", {l} ms"))
                            .unwrap_or_default(),
                        a.error
                            .as_deref()
                            .map(|e| format!(" ({e})"))
                            .unwrap_or_default()
                    )?;
                }
            }
        }
    }
    if proof.queue_item.is_some() {
        if let Some(item) = &read.queue_item {
            writeln!(
                w,
                "  queue      {} {} ({}), proposed: {}",
                item.id,
                item.kind.as_str(),
                item.status.as_str(),
                item.proposed.as_str()
            )?;
            if let Some(r) = &item.resolution {
                let res = &r.resolution;
                writeln!(
                    w,
                    "  resolved   {} by {} at {}: {}{}",
                    res.outcome.as_str(),
                    res.by,
                    when(res.at),
                    res.note,
                    res.authoritative_ref
                        .as_deref()
                        .map(|a| format!(" (authoritative ref {a})"))
                        .unwrap_or_default()
                )?;
                if let Some(e) = &r.effect {
                    writeln!(w, "  now        effect {e}")?;
                }
            }
        }
    }
    Ok(out)
}

/// The proof of `id` as `GET /v1/deliveries/{id}` serves it (the server's own document), or
/// for a delivery journaled without a decision the same names with the decision's fields empty.
pub async fn doc(gate: &Gate, id: &str) -> Result<serde_json::Value> {
    let (id, read) = read(gate, id).await?;
    if read.decision.is_none() {
        return Ok(crate::json::undecided(&read.delivery));
    }
    let doc = oncegate_server::document::proof(gate, id.as_str(), false)
        .await
        .map_err(|e| anyhow!("{}", e.message))?;
    Ok(serde_json::to_value(doc)?)
}
