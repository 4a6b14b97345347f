//! The proof page of one delivery: everything `oncegate explain` shows, from the proof the
//! `/v1/deliveries/{id}` route builds (the same function), with the reference delivery, the
//! linked deliveries and the effect as links.

use axum::extract::{Path, State};
use axum::response::Response;
use maud::{html, Markup};

use super::layout::{self, Nav};
use super::{html, PageError, Signed};
use crate::routes::proof::{build, ProofExtras};
use crate::state::AppState;
use crate::wire::{DifferenceBody, ProofBody};

pub(crate) async fn page(
    State(state): State<AppState>,
    Signed(s): Signed,
    Path(raw_id): Path<String>,
) -> Result<Response, PageError> {
    let (proof, extras) = build(&state, &s.caller, &raw_id, false).await?;
    let title = format!("Delivery {}", proof.decision.delivery_id);
    Ok(html(layout::page(
        &title,
        &s,
        Nav::Deliveries,
        body(&proof, &extras),
    )))
}

/// The differences side by side: the reference's value | this delivery's value.
pub(crate) fn differences(list: &[DifferenceBody]) -> Markup {
    html! {
        table.differences {
            thead { tr { th { "Field" } th { "Reference value" } th { "This value" } } }
            tbody {
                @for d in list {
                    tr {
                        td.mono { (d.field) }
                        td { (layout::json(d.reference.as_deref())) }
                        td { (layout::json(d.this.as_deref())) }
                    }
                }
            }
        }
    }
}

/// The query string of the deliveries search for an effect key.
fn search_by_key(key: Option<&str>) -> String {
    serde_urlencoded::to_string([("q", key.unwrap_or_default())]).expect("a string pair encodes")
}

fn body(p: &ProofBody, x: &ProofExtras) -> Markup {
    let d = &p.decision;
    let details = &x.details;
    let fields: Vec<(&str, &str)> = details
        .fields
        .iter()
        .map(|f| {
            let pointer = if f.pointer.is_empty() {
                "(canonical body)"
            } else {
                f.pointer.as_str()
            };
            (pointer, f.shown.as_str())
        })
        .collect();
    let shared = &details.shared_by;
    let notes = &details.notes;
    html! {
        div.card #decision {
            p { (layout::badge(d.action)) " " strong #reason { (d.reason) } }
            table.kv {
                tr { th { "Received" } td.mono { (layout::when(p.received_at)) } }
                tr { th { "Decided" } td.mono { (layout::when(p.decided_at)) } }
                tr { th { "From" } td { (p.tenant) " / " (p.provider) " / " (p.env) } }
                tr { th { "Type" } td { (d.event_type.as_deref().unwrap_or("(unknown)")) } }
                tr { th { "Body" } td { (p.size) " bytes, sha256 " code { (p.raw_sha256) } } }
                @if let Some(t) = &p.transport_key {
                    tr { th { "Transport key" } td { (p.transport_strength.unwrap_or("?")) " " code { (t) } } }
                }
                tr { th { "Rule" } td { (d.rule) " (matrix v" (p.rule_version) "), layer " (d.layer) } }
                @if !d.flags.is_empty() {
                    tr { th { "Flags" } td { (d.flags.join(", ")) } }
                }
                tr { th { "Strategy" } td {
                    @match &d.strategy {
                        Some(st) => { (st.name) "@" (st.version) " level " (st.level)
                            " confidence " (st.confidence.unwrap_or("?")) }
                        None => span.muted { "none applied" },
                    }
                } }
                @if let Some(k) = &d.effect_key {
                    tr { th { "Effect key" } td { code #effect-key { (k) } } }
                }
                @if let Some(scope) = &details.scope {
                    tr { th { "Scope" } td { (scope) } }
                }
                @if !shared.is_empty() {
                    tr { th { "Shared" } td { "one effect for the types " (shared.join(", ")) " (they declare the same operation)" } }
                }
                @for (pointer, shown) in &fields {
                    tr { th { "Field" } td { code { (pointer) } " = " code { (shown) } } }
                }
                @for n in notes {
                    tr { th { "Note" } td { (n) } }
                }
                @if let Some(code) = &details.rejection {
                    tr { th { "Rejected" } td { code { (code) } } }
                }
                @if let Some(original) = &details.replay_of {
                    tr { th { "Replay of" } td { (layout::delivery_link(original)) " (a deliberate late replay)" } }
                }
                tr { th { "Prior effect" } td { (x.prior) } }
                @if let Some(r) = &d.reference_delivery_id {
                    tr { th { "Reference" } td { (layout::delivery_link(r)) " (the first delivery of this effect)" } }
                }
            }
        }
        h2 { "Skipped strategies" }
        @if p.skipped_strategies.is_empty() {
            p.muted #skipped { "None: the first strategy of the hierarchy made the key." }
        } @else {
            table #skipped {
                thead { tr { th { "Strategy" } th { "Why it was skipped" } } }
                tbody { @for sk in &p.skipped_strategies {
                    tr { td.mono { (sk.name) "@" (sk.version) } td { (sk.why) } }
                } }
            }
        }
        @if !d.shadow.is_empty() {
            h2 { "Shadow strategies that would have decided otherwise" }
            table { tbody { @for sh in &d.shadow {
                tr { td.mono { (sh.strategy) } td { (layout::badge(&sh.action)) } td { (sh.reason) } }
            } } }
        }
        @if !d.differences.is_empty() {
            h2 { "Differences" }
            (differences(&d.differences))
        }
        @if let Some(e) = &x.effect {
            h2 { "Effect" }
            table.kv #effect {
                tr { th { "Effect" } td { a.mono #effect-link href={ "/console/deliveries?" (search_by_key(d.effect_key.as_deref())) } { (e.id) }
                    " " span.muted { "(its deliveries)" } } }
                tr { th { "State" } td { (e.state.as_str()) " (fencing " (e.fencing_token) ")" } }
                @if let Some(r) = &e.result { tr { th { "Result" } td { code { (r) } } } }
                @if let Some(err) = &e.error { tr { th { "Error" } td { code { (err) } } } }
                @if let Some(a) = &e.authoritative_ref { tr { th { "Authority reference" } td { code { (a) } } } }
            }
        }
        @if !p.linked_deliveries.is_empty() {
            h2 { "Linked deliveries" }
            table #linked {
                thead { tr { th { "Delivery" } th { "Link" } th { "At (UTC)" } } }
                tbody { @for l in &p.linked_deliveries {
                    tr {
                        td { (layout::delivery_link(&l.delivery_id))
                            @if l.delivery_id == d.delivery_id { " " span.muted { "(this one)" } } }
                        td { (l.kind) }
                        td.mono { (layout::when(l.at)) }
                    }
                } }
            }
        }
        @if let Some(q) = &x.queue_item {
            h2 { "Queue" }
            table.kv #queue-item {
                tr { th { "Item" } td { a.mono href="/console/queue?status=all" { (q.id) } " " (q.kind.as_str()) " (" (q.status.as_str()) "), proposed: " (q.proposed.as_str()) } }
                @if let Some(r) = &p.resolution {
                    tr { th { "Resolved" } td { (r.outcome) " by " (r.by) " at " (layout::when(r.at)) ": " (r.note) } }
                    @if let Some(a) = &r.authoritative_ref { tr { th { "Authoritative ref" } td { code { (a) } } } }
                    @if let Some(e) = &r.effect_id { tr { th { "Now" } td { "effect " code { (e) } } } }
                }
            }
        }
    }
}
