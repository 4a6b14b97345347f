//! `oncegate queue list|show|resolve`: the ambiguity queue worked from a terminal, through the
//! gate. `list` pages and filters as `GET /v1/queue` does; `show` and `resolve` take the item's
//! queue item id (`q_…`) or its delivery id (`dlv_…`) and find and settle it with the same gate
//! methods as `POST /v1/queue/{id}/resolve`: a delivery with several open items must be named by one of
//! them, an item is resolved once, and `distinct` releases a claimable effect carrying the
//! authoritative reference.

use anyhow::{anyhow, bail, Result};
use comfy_table::{presets::UTF8_FULL, ContentArrangement, Table};
use oncegate::store::{
    DeliveryRecord, QueueCursor, QueueFilter, QueueItem, QueueKind, QueuePage, QueueRef,
    QueueStatus, Resolution, ResolutionOutcome, StatusCounts, TenantFilter,
};
use oncegate::{Gate, QueueLookupError, ResolveError};
use oncegate_server::parse_instant;
use std::fmt::Write as _;

use crate::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

fn when(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// Payloads are shown up to this many bytes each, so a huge body cannot flood the terminal.
const PAYLOAD_SHOWN: usize = 4096;

/// What `queue list` selects: the same filters as `GET /v1/queue`.
#[derive(Debug, Default, Clone)]
pub struct ListArgs<'a> {
    pub kind: Option<&'a str>,
    pub status: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub event_type: Option<&'a str>,
    pub older_than: Option<&'a str>,
    pub newer_than: Option<&'a str>,
    pub limit: u32,
    pub after: Option<&'a str>,
}

/// A page holds at most this many items, as over HTTP.
const MAX_LIST: u32 = 1000;

fn counts_text(c: StatusCounts) -> String {
    format!("{} open, {} resolved", c.open, c.resolved)
}

/// The page `a` selects, and the instant its ages are counted from.
async fn page(gate: &Gate, a: ListArgs<'_>) -> Result<(QueuePage, OffsetDateTime)> {
    let kind = match a.kind {
        None | Some("all") => None,
        Some(k) => Some(
            QueueKind::parse(k)
                .ok_or_else(|| anyhow!("--kind {k:?} is not quarantine, reconcile or all"))?,
        ),
    };
    let status = match a.status {
        None | Some("open") => Some(QueueStatus::Open),
        Some("all") => None,
        Some(s) => Some(
            QueueStatus::parse(s)
                .ok_or_else(|| anyhow!("--status {s:?} is not open, resolved or all"))?,
        ),
    };
    if a.limit == 0 || a.limit > MAX_LIST {
        bail!("--limit {} is not between 1 and {MAX_LIST}", a.limit);
    }
    let now = OffsetDateTime::now_utc();
    let instant = |flag: &str, v: Option<&str>| {
        v.map(|t| parse_instant(t, now).map_err(|e| anyhow!("{flag}: {e}")))
            .transpose()
    };
    let filter = QueueFilter {
        status,
        kind,
        limit: a.limit,
        provider: a.provider.map(str::to_owned),
        event_type: a.event_type.map(str::to_owned),
        created_before: instant("--older-than", a.older_than)?,
        created_since: instant("--newer-than", a.newer_than)?,
        after: a
            .after
            .map(|c| {
                c.parse::<QueueCursor>()
                    .map_err(|e| anyhow!("--after: {e}"))
            })
            .transpose()?,
        ..QueueFilter::default()
    };
    Ok((gate.queue_page(&filter).await?, now))
}

/// `queue list --json`: the page as `GET /v1/queue` serves it.
pub async fn list_doc(gate: &Gate, a: ListArgs<'_>) -> Result<impl serde::Serialize> {
    let (page, now) = page(gate, a).await?;
    let dead = gate.forward_counts(&TenantFilter::All).await?.dead;
    Ok(oncegate_server::document::queue_page(&page, now, dead))
}

pub async fn list(gate: &Gate, a: ListArgs<'_>) -> Result<String> {
    let (page, now) = page(gate, a).await?;
    let mut counts = format!(
        "quarantine: {}; reconcile: {}\n",
        counts_text(page.counts.quarantine),
        counts_text(page.counts.reconcile)
    );
    // Gateway mode's dead letters wait beside the queue, re-sendable.
    let dead = gate.forward_counts(&TenantFilter::All).await?.dead;
    if dead > 0 {
        counts.push_str(&format!(
            "dead letters: {dead} forward{} ran out of attempts (oncegate forward list --state dead; oncegate forward resend EFFECT_ID)\n",
            if dead == 1 { "" } else { "s" }
        ));
    }
    if page.items.is_empty() {
        return Ok(format!(
            "the queue has no item matching this filter\n{counts}"
        ));
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header([
            "delivery",
            "queue item",
            "kind",
            "status",
            "tenant/provider/env/type",
            "age",
            "proposed",
            "reference",
        ]);
    for i in &page.items {
        table.add_row([
            i.delivery.to_string(),
            i.id.to_string(),
            i.kind.as_str().to_owned(),
            i.status.as_str().to_owned(),
            format!(
                "{}/{}/{}/{}",
                i.tenant,
                i.provider,
                i.env,
                i.event_type.as_deref().unwrap_or("(unknown)")
            ),
            age(now - i.created_at),
            i.proposed.as_str().to_owned(),
            i.first_delivery
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_else(|| "-".to_owned()),
        ]);
    }
    let next = match &page.next {
        Some(c) => format!("next page: --after {c}\n"),
        None => String::new(),
    };
    Ok(format!(
        "{table}\n{} item(s)\n{counts}{next}",
        page.items.len()
    ))
}

fn age(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// The item `raw` names: a queue item id, or a delivery id whose one open item (else its
/// latest item) is meant, as the API finds it.
async fn item_of(gate: &Gate, raw: &str) -> Result<QueueItem> {
    let target: QueueRef = raw.parse().map_err(|_| {
        anyhow!("{raw:?} is neither a queue item id (q_…) nor a delivery id (dlv_…)")
    })?;
    gate.queue_item_named(&target, &TenantFilter::All)
        .await
        .map_err(|e| match e {
            QueueLookupError::NoItem(id) => anyhow!("no queue item {id} in this store"),
            QueueLookupError::Ambiguous { delivery, open } => anyhow!(
                "delivery {delivery} has {} open queue items ({}): name one by its queue item id",
                open.len(),
                open.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            QueueLookupError::Decided { delivery, action } => anyhow!(
                "delivery {delivery} was decided `{}`; it is not in the queue",
                action.as_str()
            ),
            QueueLookupError::Undecided(delivery) => {
                anyhow!("delivery {delivery} has no recorded decision, so nothing to resolve")
            }
            QueueLookupError::NoDelivery(delivery) => {
                anyhow!("no delivery {delivery} in this store")
            }
            QueueLookupError::Store(e) => e.into(),
        })
}

fn payload_text(d: Option<&DeliveryRecord>) -> String {
    match d.and_then(|d| d.payload.as_ref()) {
        None => "(purged or never kept)".to_owned(),
        Some(bytes) => {
            let shown = &bytes[..bytes.len().min(PAYLOAD_SHOWN)];
            let mut text = String::from_utf8_lossy(shown).into_owned();
            // Pretty-printing makes two payloads comparable line by line; a body that is not
            // JSON (it was accepted, so this is rare) is shown as received.
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(bytes) {
                text = serde_json::to_string_pretty(&v).unwrap_or(text);
            }
            if bytes.len() > PAYLOAD_SHOWN && text.len() > PAYLOAD_SHOWN {
                text.truncate(PAYLOAD_SHOWN);
                text.push_str("\n… (truncated)");
            }
            text
        }
    }
}

/// `queue show --json`: the item as `GET /v1/queue` lists it, with both payloads.
pub async fn show_doc(gate: &Gate, raw: &str) -> Result<json::QueueShowDoc<impl serde::Serialize>> {
    let item = item_of(gate, raw).await?;
    let delivery = gate.delivery(&item.delivery).await?;
    let reference = match &item.first_delivery {
        Some(r) => gate.delivery(r).await?,
        None => None,
    };
    Ok(json::QueueShowDoc {
        item: oncegate_server::document::queue_item(&item, OffsetDateTime::now_utc()),
        payload: json::payload(delivery.as_ref()),
        reference_payload: json::payload(reference.as_ref()),
    })
}

pub async fn show(gate: &Gate, raw: &str) -> Result<String> {
    let item = item_of(gate, raw).await?;
    let id = item.delivery.clone();
    let delivery = gate.delivery(&id).await?;
    let reference = match &item.first_delivery {
        Some(r) => gate.delivery(r).await?,
        None => None,
    };
    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        "queue item {} ({}, {})",
        item.id,
        item.kind.as_str(),
        item.status.as_str()
    )?;
    writeln!(
        w,
        "  delivery   {id} from {}/{}/{} type {}, queued {}",
        item.tenant,
        item.provider,
        item.env,
        item.event_type.as_deref().unwrap_or("(unknown)"),
        when(item.created_at)
    )?;
    match &item.first_delivery {
        Some(r) => writeln!(
            w,
            "  reference  {r}{}",
            reference
                .as_ref()
                .map(|d| format!(" received {}", when(d.received_at)))
                .unwrap_or_else(|| " (purged)".to_owned())
        )?,
        None => writeln!(w, "  reference  none (no earlier effect with this key)")?,
    }
    if let Some(s) = &item.strategy {
        writeln!(w, "  strategy   {}@{} level {}", s.name, s.version, s.level)?;
    }
    if let Some(k) = &item.key {
        writeln!(w, "  key        {k}")?;
    }
    if let Some(e) = &item.existing_effect {
        writeln!(w, "  effect     {e}")?;
    }
    writeln!(
        w,
        "  result     {}",
        item.existing_result.as_deref().unwrap_or("(none recorded)")
    )?;
    writeln!(w, "  proposed   {}", item.proposed.as_str())?;
    writeln!(w, "  reason     {}", item.reason)?;
    if let Some(r) = &item.resolution {
        writeln!(
            w,
            "  resolved   {} by {} at {}: {}{}",
            r.resolution.outcome.as_str(),
            r.resolution.by,
            when(r.resolution.at),
            r.resolution.note,
            r.resolution
                .authoritative_ref
                .as_deref()
                .map(|a| format!(" (authoritative ref {a})"))
                .unwrap_or_default()
        )?;
        if let Some(e) = &r.effect {
            writeln!(w, "  now        effect {e}")?;
        }
    }

    writeln!(w, "\ndifferences (reference ↔ this delivery)")?;
    let mut diff = Table::new();
    diff.load_preset(UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(["field", "reference (existing)", "this delivery (incoming)"]);
    if item.differences.is_empty() {
        // No discriminant differs: show the ones the delivery carries, so the reviewer sees
        // what agreed rather than an empty table.
        for (field, value) in &item.discriminants {
            diff.add_row([field.clone(), value.clone(), value.clone()]);
        }
    } else {
        for d in &item.differences {
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(absent)".to_owned());
            diff.add_row([d.field.clone(), show(&d.existing), show(&d.incoming)]);
        }
    }
    writeln!(w, "{diff}")?;
    if item.differences.is_empty() {
        writeln!(w, "  (no discriminant differs)")?;
    }

    writeln!(w, "\npayloads side by side")?;
    let mut payloads = Table::new();
    payloads
        .load_preset(UTF8_FULL)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header([
            format!(
                "reference {}",
                item.first_delivery
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| "-".to_owned())
            ),
            format!("this delivery {id}"),
        ]);
    payloads.add_row([
        if item.first_delivery.is_some() {
            payload_text(reference.as_ref())
        } else {
            "(no reference delivery)".to_owned()
        },
        payload_text(delivery.as_ref()),
    ]);
    writeln!(w, "{payloads}")?;
    Ok(out)
}

pub struct ResolveArgs<'a> {
    /// A queue item id or a delivery id.
    pub id: &'a str,
    pub outcome: &'a str,
    pub authoritative_ref: Option<&'a str>,
    pub note: &'a str,
    pub by: &'a str,
}

pub async fn resolve(gate: &Gate, a: ResolveArgs<'_>) -> Result<String> {
    let outcome = ResolutionOutcome::parse(a.outcome)
        .ok_or_else(|| anyhow!("--outcome {:?} is not distinct or duplicate", a.outcome))?;
    let by = a.by.trim();
    if by.is_empty() {
        bail!("--by must name who resolves the item");
    }
    let item = item_of(gate, a.id).await?;
    let id = item.delivery.clone();
    let resolution = Resolution {
        outcome,
        authoritative_ref: a
            .authoritative_ref
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty()),
        note: a.note.to_owned(),
        by: by.to_owned(),
        at: gate.now(),
    };
    let resolved = gate
        .resolve_queue_item(&item, resolution)
        .await
        .map_err(|e| match e {
            ResolveError::AlreadyResolved(item) => {
                anyhow!(
                    "queue item {} of delivery {id} is already resolved",
                    item.id
                )
            }
            ResolveError::Conflict { item, why } => {
                anyhow!("queue item {item} of delivery {id} was not resolved: {why}")
            }
            ResolveError::Store(e) => e.into(),
        })?;
    let effect = resolved
        .resolution
        .as_ref()
        .and_then(|r| r.effect.as_ref())
        .map(ToString::to_string);
    Ok(match (outcome, effect) {
        (ResolutionOutcome::Distinct, Some(e)) => {
            format!(
                "{id} ({}): resolved distinct: released as effect {e}, claimable work\n",
                resolved.id
            )
        }
        (ResolutionOutcome::Duplicate, Some(e)) => {
            format!(
                "{id} ({}): resolved duplicate: linked to effect {e}\n",
                resolved.id
            )
        }
        (o, None) => format!("{id} ({}): resolved {}\n", resolved.id, o.as_str()),
    })
}

/// `oncegate queue …`
#[derive(clap::Subcommand)]
pub enum QueueCommand {
    /// Queue items, oldest first, a page at a time: quarantined collisions and deliveries to
    /// reconcile, with counts per kind and status.
    List {
        /// `quarantine`, `reconcile` or `all`.
        #[arg(long)]
        kind: Option<String>,
        /// `open` (default), `resolved` or `all`.
        #[arg(long)]
        status: Option<String>,
        /// Only this provider's items.
        #[arg(long)]
        provider: Option<String>,
        /// Only items of this event type.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Queued before: a duration back from now (`2h`, `7d`) or an RFC 3339 instant.
        #[arg(long)]
        older_than: Option<String>,
        /// Queued at or after: a duration back from now or an RFC 3339 instant.
        #[arg(long)]
        newer_than: Option<String>,
        /// Items per page (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Start after this cursor (the `next page: --after …` of the previous page).
        #[arg(long)]
        after: Option<String>,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the page as one JSON line, with the field names of `GET /v1/queue` (`next`
        /// is the cursor for `--after`).
        #[arg(long)]
        json: bool,
    },
    /// One item (by queue item id or delivery id): the delivery, its reference, the differences and payloads side by side, the existing result.
    Show {
        /// A queue item id (`q_…`) or a delivery id (`dlv_…`).
        id: String,
        #[command(flatten)]
        store: crate::store::StoreArg,
        /// Print the item as one JSON line: the fields of a `GET /v1/queue` item, plus
        /// `payload` and `reference_payload`.
        #[arg(long)]
        json: bool,
    },
    /// Settle an item as `distinct` (released as new claimable work) or `duplicate` (linked).
    Resolve {
        /// A queue item id (`q_…`) or a delivery id (`dlv_…`).
        id: String,
        #[arg(long)]
        outcome: String,
        /// The provider's own reference of the operation (for `distinct`).
        #[arg(long = "ref")]
        authoritative_ref: Option<String>,
        #[arg(long)]
        note: String,
        /// Who resolves it.
        #[arg(long)]
        by: String,
        #[command(flatten)]
        store: crate::store::StoreArg,
    },
}

pub fn main(command: QueueCommand) -> Result<()> {
    crate::runtime()?.block_on(async {
        let out = match &command {
            QueueCommand::List {
                kind,
                status,
                provider,
                event_type,
                older_than,
                newer_than,
                limit,
                after,
                store,
                json,
            } => {
                let gate = store.gate(None, Vec::new()).await?;
                let args = ListArgs {
                    kind: kind.as_deref(),
                    status: status.as_deref(),
                    provider: provider.as_deref(),
                    event_type: event_type.as_deref(),
                    older_than: older_than.as_deref(),
                    newer_than: newer_than.as_deref(),
                    limit: *limit,
                    after: after.as_deref(),
                };
                if *json {
                    return json::print(&list_doc(&gate, args).await?);
                }
                list(&gate, args).await?
            }
            QueueCommand::Show { id, store, json } => {
                let gate = store.gate(None, Vec::new()).await?;
                if *json {
                    return json::print(&show_doc(&gate, id).await?);
                }
                show(&gate, id).await?
            }
            QueueCommand::Resolve {
                id,
                outcome,
                authoritative_ref,
                note,
                by,
                store,
            } => {
                let gate = store.gate(None, Vec::new()).await?;
                resolve(
                    &gate,
                    ResolveArgs {
                        id,
                        outcome,
                        authoritative_ref: authoritative_ref.as_deref(),
                        note,
                        by,
                    },
                )
                .await?
            }
        };
        out!("{out}")?;
        Ok(())
    })
}
