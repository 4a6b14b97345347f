//! oncegate in process: every business effect of incoming webhooks exactly once, with the
//! proof of why each delivery was processed, ignored, quarantined or sent to reconciliation.
//!
//! A [`Gate`] is opened from a contract (the TOML that says how each provider's events are
//! identified), a store (SQLite or PostgreSQL) and a salt. [`Gate::deliver`] journals a
//! [`Reception`], identifies it and decides it atomically; the [`Outcome`] says what to do:
//!
//! - [`Outcome::Process`]: run the effect now, then report it through the [`Held`]
//!   reservation (`complete`, `fail`, `heartbeat`), fenced so a late holder cannot overwrite a
//!   newer one;
//! - [`Outcome::Ignore`]: it already ran; the proof carries its result;
//! - [`Outcome::Quarantine`] / [`Outcome::Reconcile`]: it waits in the queue for the
//!   provider's authority, the consumer's verifier or a person;
//! - [`Outcome::Forwarded`]: gateway mode — the effect must run and the forwarder delivers it
//!   to the type's `forward` endpoint (its forward is durable); nothing is left to the caller;
//! - [`Outcome::Rejected`]: refused (journaled, with its proof).
//!
//! The [`Upkeep`] (lease sweep, reconciler, retention purge) runs beside it; it stops when
//! dropped. The HTTP service (`oncegate-server`) is a thin adapter over this crate.
//!
//! A person acts through the gate too, whatever the medium: [`Gate::queue_item_named`] and
//! [`Gate::resolve_queue_item`] work the queue, [`Gate::close_breaker`],
//! [`Gate::resend_forward`], [`Gate::purge`], [`Gate::replay`] and [`Gate::migrate_effect`]
//! act, [`Gate::delivery_proof`] reads a delivery's whole proof ([`DeliveryProof`]), and the
//! listings (`deliveries`, `queue_page`, `report`, `breakers`, `forwards`…) read the store's
//! records, whose types [`store`] re-exports.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use oncegate::{Gate, Outcome, Reception};
//!
//! let contract = oncegate_core::contract::parse(
//!     "oncegate.toml",
//!     include_str!("../../../examples/oncegate.toml"),
//! )
//! .unwrap();
//! let dir = tempfile::tempdir().unwrap();
//! let url = format!("sqlite://{}", dir.path().join("oncegate.db").display());
//! let gate = Gate::open(contract, &url, b"a salt from the environment".to_vec()).await.unwrap();
//!
//! let refund = |attempt: u32| {
//!     let body = format!(r#"{{"type":"refund.created","attempt":{attempt},
//!         "data":{{"payment_id":"pay_7Hq2","request_ref":"rr-1","amount":1500,"currency":"EUR"}}}}"#);
//!     Reception::new("acme", "payflow", "live", body.into_bytes())
//! };
//! match gate.deliver(refund(1)).await.unwrap() {
//!     Outcome::Process(held) => held.complete(r#"{"refund":"re_1"}"#).await.unwrap(),
//!     other => panic!("a first delivery runs: {other:?}"),
//! }
//! // The provider retries: the effect already ran, and its result comes back.
//! let again = gate.deliver(refund(2)).await.unwrap();
//! assert_eq!(again.action().as_str(), "ignore");
//! assert_eq!(again.proof().existing_result.as_deref(), Some(r#"{"refund":"re_1"}"#));
//! # });
//! ```
#![warn(missing_docs)]

mod archive;
mod authority;
mod backlog;
mod batch;
mod breaker;
mod delivery;
pub mod details;
mod error;
mod evidence;
mod finish;
mod forwarder;
mod gate;
mod metrics;
mod migration;
mod operations;
mod outcome;
mod pipeline;
mod plan;
mod proof;
mod purge;
mod reception;
mod reconciler;
mod records;
mod refusal;
pub mod replay;
mod shadow;
mod tally;
mod trust;
mod upkeep;
mod verifier;
mod work;

pub use archive::ArchivedDelivery;
pub use authority::{AuthorityError, AuthorityPolicy};
pub use batch::BatchOutcome;
pub use error::GateError;
pub use forwarder::ForwarderSettings;
pub use gate::{system_clock, Clock, Gate, GateConfig, MAX_RESULT_BYTES};
pub use metrics::Metrics;
pub use migration::AliasOutcome;
pub use operations::{QueueLookupError, ResolveError};
pub use outcome::{Held, Outcome, Proof, Rejected};
pub use proof::DeliveryProof;
pub use reception::{Body, Cut, Reception};
pub use reconciler::{
    reconcile_once, Evidence, ItemReport, ReconcileError, ReconcilerSettings, RunReport,
    SweepReport,
};
pub use refusal::{Refusal, RefusalKind};
pub use trust::TrustError;
pub use upkeep::{check_authorities, Upkeep, UpkeepSettings};

/// Re-exported so an embedding program (and the HTTP service and the command line above this
/// crate) needs one dependency: the contract's parser, and the store's opener and the record
/// types the gate's methods take and return (with its `testing` helpers under this crate's
/// `testing` feature).
pub use oncegate_core as core;
pub use oncegate_store as store;
