//! PostgreSQL's group commit: the hot path's calls (a journal entry, a decision, a journal entry
//! with its decision, a holder's complete) from every caller of the instance, gathered into one
//! transaction on one connection, in two round trips and one commit for the whole batch.
//!
//! A few runners share one queue. A runner takes everything waiting (up to `MAX_BATCH`) while
//! the others are busy, so the callers of a busy moment share a commit, then:
//!
//! 1. sends `BEGIN`, every journal entry, every decision's view and every complete's guarded
//!    update at once (pipelined: one round trip). A journal entry and the view of its own
//!    decision are one statement (`journaled_view`);
//! 2. runs each decision's matrix on its view, and sends every decision's writes (one chained
//!    statement each, see `executor`) followed by `COMMIT` at once (a second round trip; the
//!    writes go in the order of the locks they take, so two runners never wait on each other in
//!    a cycle);
//! 3. answers each caller only now, after the commit.
//!
//! Isolation of the members: a decision whose conditional write found its key taken (by another
//! member, or another transaction) wrote nothing, and is read and decided again in the next
//! batch, as the single-call path does. A member whose statement fails on its own (a delivery
//! decided twice, a constraint) makes the transaction abort there: it is rolled back whole, that
//! member gets its error, and every other member runs again in the next batch, so none is failed
//! or written twice. A journal entry whose decision failed is journaled all the same (the entry
//! runs again without the decision). A batch that loses a serialization race (40001, 40P01) is
//! rolled back and its members run again one by one, each with the jittered retry of `retry`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use deadpool_postgres::Pool;
use oncegate_core::ids::{DeliveryId, EffectId};
use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot, Mutex};
use tokio_postgres::types::ToSql;

use super::executor::{as_sql, cells, chained, renumbered, Executor};
use super::retry::{retry_pause, MAX_TX_ATTEMPTS};
use super::sqlstate::{lost_race, pg_err, pool_err};
use crate::decision::writes::{self, Prepared};
use crate::decision::{view, DecideOutcome, DecideRequest, PriorView};
use crate::delivery::NewReception;
use crate::error::StoreError;
use crate::plan::{Scope, MAX_ATTEMPTS};
use crate::sql::{Row, Value};
use crate::SharedMatrix;

type Result<T> = std::result::Result<T, StoreError>;

/// The most calls one transaction takes. A PostgreSQL transaction keeps the ids of up to 64 of
/// its subtransactions in shared memory; none are used here, but a batch beyond a few dozen
/// calls only makes its members wait for each other longer.
const MAX_BATCH: usize = 64;

/// Batches in flight at once, each on its own pooled connection: while one waits for its commit
/// to reach the disk, the next gathers and runs its statements.
const RUNNERS: usize = 3;

/// Where a call's answer goes, in the shape its `Store` method returns.
pub(super) enum Reply {
    Journal(oneshot::Sender<Result<()>>),
    Decide(oneshot::Sender<Result<DecideOutcome>>),
    Receive(oneshot::Sender<Result<(DeliveryId, Result<DecideOutcome>)>>),
    Complete(oneshot::Sender<Result<()>>),
}

/// A decision in a batch: the delivery's scope must be known (journaled by this instance).
pub(super) struct Deciding {
    pub request: DecideRequest,
    pub scope: Scope,
    pub matrix: SharedMatrix,
}

/// A holder's complete in a batch.
pub(super) struct Completing {
    pub effect: EffectId,
    pub token: u64,
    pub result: String,
    pub now: OffsetDateTime,
}

/// One caller's call, as it travels from batch to batch until it is answered.
pub(super) struct Item {
    /// The journal entry still to write (none once it committed, or for a bare decision).
    journal: Option<(DeliveryId, NewReception)>,
    decide: Option<Deciding>,
    complete: Option<Completing>,
    /// The decision's own failure, kept for the answer while its journal entry is written.
    failed: Option<StoreError>,
    reply: Reply,
    /// Decisions re-read after their key moved (`MAX_ATTEMPTS` at most).
    rereads: usize,
    /// Serialization races lost (`MAX_TX_ATTEMPTS` at most).
    lost: usize,
}

impl Item {
    fn new(reply: Reply) -> Item {
        Item {
            journal: None,
            decide: None,
            complete: None,
            failed: None,
            reply,
            rereads: 0,
            lost: 0,
        }
    }

    /// A journal entry.
    pub fn journal(
        id: DeliveryId,
        reception: NewReception,
        reply: oneshot::Sender<Result<()>>,
    ) -> Item {
        Item {
            journal: Some((id, reception)),
            ..Item::new(Reply::Journal(reply))
        }
    }

    /// A decision of a delivery this instance journaled.
    pub fn decide(deciding: Deciding, reply: oneshot::Sender<Result<DecideOutcome>>) -> Item {
        Item {
            decide: Some(deciding),
            ..Item::new(Reply::Decide(reply))
        }
    }

    /// A journal entry and its decision.
    pub fn receive(
        id: DeliveryId,
        reception: NewReception,
        deciding: Deciding,
        reply: oneshot::Sender<Result<(DeliveryId, Result<DecideOutcome>)>>,
    ) -> Item {
        Item {
            journal: Some((id, reception)),
            decide: Some(deciding),
            ..Item::new(Reply::Receive(reply))
        }
    }

    /// A holder's complete.
    pub fn complete(completing: Completing, reply: oneshot::Sender<Result<()>>) -> Item {
        Item {
            complete: Some(completing),
            ..Item::new(Reply::Complete(reply))
        }
    }

    /// Answers with the call's failure. A decision's failure after its delivery was journaled
    /// is the decision's own (the journal entry exists).
    fn fail(self, e: StoreError) {
        match self.reply {
            Reply::Journal(r) | Reply::Complete(r) => {
                let _ = r.send(Err(e));
            }
            Reply::Decide(r) => {
                let _ = r.send(Err(e));
            }
            Reply::Receive(r) => {
                let answer = match (&self.journal, &self.decide) {
                    // Journaled in an earlier batch: only the decision failed.
                    (None, Some(d)) => Ok((d.request.delivery.clone(), Err(e))),
                    _ => Err(e),
                };
                let _ = r.send(answer);
            }
        }
    }

    /// Answers a call whose every write committed; the decision's outcome, when it had one.
    fn done(self, outcome: Option<DecideOutcome>, completed: Option<Result<()>>) {
        match self.reply {
            Reply::Journal(r) => {
                let _ = r.send(Ok(()));
            }
            Reply::Complete(r) => {
                let _ = r.send(completed.unwrap_or(Ok(())));
            }
            Reply::Decide(r) => {
                let answer = match (outcome, self.failed) {
                    (_, Some(e)) => Err(e),
                    (Some(o), None) => Ok(o),
                    (None, None) => Err(StoreError::corrupt("a batched decision had no outcome")),
                };
                let _ = r.send(answer);
            }
            Reply::Receive(r) => {
                let id = self
                    .decide
                    .as_ref()
                    .map(|d| d.request.delivery.clone())
                    .or_else(|| self.journal.as_ref().map(|(id, _)| id.clone()));
                let Some(id) = id else {
                    let _ = r.send(Err(StoreError::corrupt("a batched reception had no id")));
                    return;
                };
                let decided = match (outcome, self.failed) {
                    (_, Some(e)) => Err(e),
                    (Some(o), None) => Ok(o),
                    (None, None) => Err(StoreError::corrupt("a batched decision had no outcome")),
                };
                let _ = r.send(Ok((id, decided)));
            }
        }
    }
}

/// The queue the store's calls join, and its runners.
pub(super) struct Batcher {
    jobs: mpsc::UnboundedSender<Item>,
}

impl Batcher {
    /// Starts the runners on the current runtime; they stop once the batcher is dropped and
    /// what was queued is answered.
    /// `begin` starts each batch's transaction (see `postgres::batch_begin`).
    pub fn start(pool: Pool, begin: &'static str) -> Batcher {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        for _ in 0..RUNNERS {
            tokio::spawn(runner(pool.clone(), queue.clone(), begin));
        }
        Batcher { jobs }
    }

    /// Queues one call; its answer comes through the item's reply.
    pub fn send(&self, item: Item) {
        if let Err(mpsc::error::SendError(item)) = self.jobs.send(item) {
            item.fail(StoreError::unavailable_plain(
                "the PostgreSQL batches stopped",
            ));
        }
    }
}

async fn runner(pool: Pool, queue: Arc<Mutex<mpsc::UnboundedReceiver<Item>>>, begin: &'static str) {
    let mut carry: Vec<Item> = Vec::new();
    loop {
        let mut batch = std::mem::take(&mut carry);
        // With members to run again, never wait for the queue: another runner may hold it while
        // it waits for calls, and the callers that would make them wait for these members.
        let guard = if batch.is_empty() {
            Some(queue.lock().await)
        } else {
            queue.try_lock().ok()
        };
        if let Some(mut queue) = guard {
            if batch.is_empty() {
                match queue.recv().await {
                    Some(item) => batch.push(item),
                    None => return,
                }
            }
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
        }
        carry = run(&pool, batch, begin).await;
    }
}

/// Runs one batch; returns the members to run again in the next one.
async fn run(pool: &Pool, items: Vec<Item>, begin: &str) -> Vec<Item> {
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            let e = pool_err(e);
            for item in items {
                item.fail(copy(&e));
            }
            return Vec::new();
        }
    };
    if items.len() == 1 {
        return alone(&client, items, begin).await;
    }
    match once(&client, items, begin).await {
        Ok(carry) => carry,
        Err((Failure::LostRace(_), items)) => {
            rollback(&client).await;
            // Run each member on its own, each with the single call's retry.
            let mut carry = Vec::new();
            for item in items {
                retry_pause(1).await;
                carry.extend(alone(&client, vec![item], begin).await);
            }
            carry
        }
        Err((Failure::Unavailable(e), items)) => {
            rollback(&client).await;
            for item in items {
                item.fail(copy(&e));
            }
            Vec::new()
        }
    }
}

/// One member alone, retried after lost serialization races.
async fn alone(client: &deadpool_postgres::Client, mut items: Vec<Item>, begin: &str) -> Vec<Item> {
    loop {
        match once(client, items, begin).await {
            Ok(carry) => return carry,
            Err((Failure::LostRace(e), mut back)) => {
                rollback(client).await;
                let lost = back.first_mut().map_or(MAX_TX_ATTEMPTS, |i| {
                    i.lost += 1;
                    i.lost
                });
                if lost >= MAX_TX_ATTEMPTS {
                    for item in back {
                        item.fail(copy(&e));
                    }
                    return Vec::new();
                }
                retry_pause(lost).await;
                items = back;
            }
            Err((Failure::Unavailable(e), back)) => {
                rollback(client).await;
                for item in back {
                    item.fail(copy(&e));
                }
                return Vec::new();
            }
        }
    }
}

/// Why a whole batch did not commit.
enum Failure {
    /// A serialization failure or a deadlock: run again.
    LostRace(StoreError),
    /// The connection or the server: every member gets this error.
    Unavailable(StoreError),
}

/// The part of a member a statement of the batch belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Journal,
    View,
    /// A journal entry and its decision's view, in one statement.
    JournalView,
    Complete,
    Write,
}

/// What a statement answered.
enum Answer {
    Count(u64),
    Rows(Vec<Row>),
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Answer>> + Send + 'a>>;

/// Runs `statements` pipelined on `client`, after `begin` (the text that starts the
/// transaction) or before `COMMIT` (`commit`): one round trip. Each statement's answer, in order.
async fn pipelined(
    client: &deadpool_postgres::Client,
    statements: &[(String, Vec<Value>, bool)],
    begin: Option<&str>,
    commit: bool,
) -> Result<Vec<Result<Answer>>> {
    let mut prepared = Vec::with_capacity(statements.len());
    for (sql, _, _) in statements {
        prepared.push(client.prepare_cached(sql).await.map_err(pg_err)?);
    }
    let spelled: Vec<_> = statements
        .iter()
        .map(|(_, params, _)| crate::nul::params(params))
        .collect();
    let refs: Vec<Vec<&(dyn ToSql + Sync)>> = spelled
        .iter()
        .map(|params| params.iter().map(as_sql).collect())
        .collect();
    let client_ref: &tokio_postgres::Client = client;
    let answers = futures_util::future::join_all(prepared.iter().zip(&refs).zip(statements).map(
        |((stmt, params), (_, _, rows))| -> Pending<'_> {
            if *rows {
                Box::pin(async move {
                    let rows = client_ref.query(stmt, params).await.map_err(pg_err)?;
                    Ok(Answer::Rows(rows.iter().map(cells).collect::<Result<_>>()?))
                })
            } else {
                Box::pin(async move {
                    Ok(Answer::Count(
                        client_ref.execute(stmt, params).await.map_err(pg_err)?,
                    ))
                })
            }
        },
    ));
    let start = async {
        if let Some(begin) = begin {
            client_ref.batch_execute(begin).await.map_err(pg_err)
        } else {
            Ok(())
        }
    };
    let end = async {
        if commit {
            client_ref.batch_execute("COMMIT").await.map_err(pg_err)
        } else {
            Ok(())
        }
    };
    let (start, answers, end) = futures_util::future::join3(start, answers, end).await;
    start?;
    // A statement that failed aborted the transaction, and the COMMIT after it rolled it back
    // (answering no error): the caller reads the statements' own answers.
    end?;
    Ok(answers)
}

/// One attempt at a batch: everything written and committed, every member answered or handed
/// back to run again; or the whole batch undone, every member handed back with the cause.
async fn once(
    client: &deadpool_postgres::Client,
    mut items: Vec<Item>,
    begin: &str,
) -> std::result::Result<Vec<Item>, (Failure, Vec<Item>)> {
    // Round trip 1: BEGIN, journal entries, views, completes.
    let mut first: Vec<(String, Vec<Value>, bool)> = Vec::new();
    let mut owners: Vec<(usize, Part)> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let deciding = item.decide.as_ref().filter(|_| item.failed.is_none());
        match (&item.journal, deciding) {
            (Some((id, reception)), Some(d)) => {
                let (sql, params) = journaled_view(
                    crate::delivery::journal_statement(id, reception),
                    view::statement(&d.scope, &d.request),
                );
                first.push((sql.to_owned(), params, true));
                owners.push((i, Part::JournalView));
            }
            (Some((id, reception)), None) => {
                let (sql, params) = crate::delivery::journal_statement(id, reception);
                first.push((sql.to_owned(), params, false));
                owners.push((i, Part::Journal));
            }
            (None, Some(d)) => {
                let (sql, params) = view::statement(&d.scope, &d.request);
                first.push((sql.to_owned(), params, true));
                owners.push((i, Part::View));
            }
            (None, None) => {}
        }
        if let Some(c) = &item.complete {
            let (sql, params) =
                crate::effect::complete_statement(&c.effect, c.token, &c.result, c.now);
            first.push((sql.to_owned(), params, false));
            owners.push((i, Part::Complete));
        }
    }
    let answers = match pipelined(client, &first, Some(begin), false).await {
        Ok(a) => a,
        Err(e) => return Err((whole(e), items)),
    };
    let mut views: Vec<Option<PriorView>> = (0..items.len()).map(|_| None).collect();
    let mut completed: Vec<Option<u64>> = vec![None; items.len()];
    for (answer, &(i, part)) in answers.into_iter().zip(&owners) {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                if lost_race(&e) || e.is_unavailable() {
                    return Err((whole(e), items));
                }
                rollback(client).await;
                return Ok(member_failed(items, i, part, e));
            }
        };
        match (part, answer) {
            (Part::View | Part::JournalView, Answer::Rows(rows)) => {
                let d = items[i]
                    .decide
                    .as_ref()
                    .expect("a view belongs to a decision");
                match view::read(&d.scope, &d.request, &rows) {
                    Ok(v) => views[i] = Some(v),
                    Err(e) => {
                        rollback(client).await;
                        return Ok(member_failed(items, i, part, e));
                    }
                }
            }
            (Part::Complete, Answer::Count(n)) => completed[i] = Some(n),
            _ => {}
        }
    }

    // The matrix on every view, and every decision's writes.
    let mut prepared: Vec<Option<Prepared>> = (0..items.len()).map(|_| None).collect();
    for (i, item) in items.iter().enumerate() {
        let (Some(d), Some(v)) = (&item.decide, views[i].take()) else {
            continue;
        };
        let decision = d.matrix.decide(&v);
        match writes::prepare(&d.scope, &d.request, &v, decision) {
            Ok(p) => prepared[i] = Some(p),
            Err(e) => {
                rollback(client).await;
                return Ok(member_failed(items, i, Part::Write, e));
            }
        }
    }
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| {
            prepared[i]
                .as_ref()
                .is_some_and(|p| p.head.is_some() || !p.writes.is_empty())
        })
        .collect();
    // One lock order for every runner: by what each head locks.
    order.sort_by(|&a, &b| lock_order(prepared[a].as_ref()).cmp(&lock_order(prepared[b].as_ref())));
    let mut second: Vec<(String, Vec<Value>, bool)> = Vec::with_capacity(order.len());
    for &i in &order {
        let p = prepared[i].as_ref().expect("ordered members have writes");
        match chained(p.head.as_ref(), &p.writes) {
            Ok((sql, params)) => second.push((sql, params, true)),
            Err(e) => {
                rollback(client).await;
                return Ok(member_failed(items, i, Part::Write, e));
            }
        }
    }

    // Round trip 2: the writes and COMMIT.
    let answers = match pipelined(client, &second, None, true).await {
        Ok(a) => a,
        Err(e) => return Err((whole(e), items)),
    };
    let mut applied: Vec<bool> = (0..items.len()).map(|i| prepared[i].is_some()).collect();
    for (answer, &i) in answers.into_iter().zip(&order) {
        let p = prepared[i].as_ref().expect("ordered members have writes");
        match answer {
            Ok(Answer::Rows(rows)) => {
                if p.head.is_some() {
                    applied[i] = rows
                        .first()
                        .and_then(|r| r.int(0).ok())
                        .is_some_and(|n| n > 0);
                }
            }
            Ok(Answer::Count(_)) => {}
            Err(e) => {
                let e = p.refused(e);
                if lost_race(&e) || e.is_unavailable() {
                    return Err((whole(e), items));
                }
                // The COMMIT that followed rolled the whole batch back.
                return Ok(member_failed(items, i, Part::Write, e));
            }
        }
    }

    // Committed: answer, and hand back the decisions whose key moved.
    let mut carry = Vec::new();
    let mut queued = false;
    for (i, mut item) in items.drain(..).enumerate() {
        item.journal = None;
        let completed = match (&item.complete, completed[i]) {
            (Some(c), Some(0)) => {
                let mut run = Executor::new(client);
                Some(Err(crate::effect::refusal(&mut run, &c.effect, c.token)
                    .await
                    .unwrap_or_else(|e| e)))
            }
            (Some(_), _) => Some(Ok(())),
            (None, _) => None,
        };
        let outcome = match prepared[i].take() {
            Some(p) if applied[i] => Some(p.outcome),
            Some(_) => {
                item.rereads += 1;
                if item.rereads >= MAX_ATTEMPTS {
                    let id = item
                        .decide
                        .as_ref()
                        .map(|d| d.request.delivery.to_string())
                        .unwrap_or_default();
                    item.fail(StoreError::Conflict(format!(
                        "the key of delivery {id} kept changing while it was decided; try again"
                    )));
                } else {
                    carry.push(item);
                }
                continue;
            }
            None => None,
        };
        queued |= outcome.as_ref().is_some_and(|o| o.queue_item.is_some());
        item.done(outcome, completed);
    }
    if queued {
        // Committed: other instances' reconcilers may take the items now.
        crate::wakeup::notify(client).await;
    }
    Ok(carry)
}

/// A journal entry and the view of its decision as one statement: the entry is a data-modifying
/// `WITH`, which runs to completion whether or not the view reads it, and which the view's
/// snapshot does not see (the view looks only at other deliveries). One statement instead of
/// two per delivery, so the entry travels with its decision; measured under load, the server's
/// CPU per decision is the same within the noise (its rows and its transactions, not the count
/// of its statements, are the cost: `scripts/pg-floor`).
fn journaled_view(
    journal: (&'static str, Vec<Value>),
    view: (&'static str, Vec<Value>),
) -> (&'static str, Vec<Value>) {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let (journal_sql, mut params) = journal;
    let (view_sql, view_params) = view;
    let offset = params.len();
    let sql = SQL.get_or_init(|| {
        format!(
            "WITH journaled AS ({journal_sql}) {}",
            renumbered(view_sql, offset)
        )
    });
    debug_assert!(sql.contains(journal_sql));
    params.extend(view_params);
    (sql.as_str(), params)
}

/// The order a decision's head takes its lock in (decisions without a head come first).
fn lock_order(p: Option<&Prepared>) -> Option<String> {
    match p.and_then(Prepared::lock_key) {
        Some(Value::Text(Some(s))) => Some(s.clone()),
        _ => None,
    }
}

/// After member `i` failed on its own in a batch that was rolled back: it gets its error (a
/// reception whose decision failed is journaled in the next batch, without the decision), and
/// every member runs again.
fn member_failed(mut items: Vec<Item>, i: usize, part: Part, e: StoreError) -> Vec<Item> {
    let item = &mut items[i];
    let journal_pending = item.journal.is_some();
    match part {
        // A failed journal-and-view statement says nothing of which of the two failed: the
        // entry runs again alone, and fails on its own if it was the cause.
        Part::View | Part::JournalView | Part::Write if journal_pending => {
            // Keep the entry; the decision's error waits for it to commit.
            item.failed = Some(e);
            return items;
        }
        _ => {}
    }
    let item = items.remove(i);
    item.fail(e);
    items
}

async fn rollback(client: &deadpool_postgres::Client) {
    let _ = client.batch_execute("ROLLBACK").await;
}

fn whole(e: StoreError) -> Failure {
    if lost_race(&e) {
        Failure::LostRace(e)
    } else {
        Failure::Unavailable(e)
    }
}

/// The same error for another member of the batch (a driver error cannot be cloned, so the
/// copy keeps its words and its kind, not its source).
fn copy(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable { cause, .. } => StoreError::unavailable_plain(cause.clone()),
        StoreError::StaleToken {
            effect,
            presented,
            current,
        } => StoreError::StaleToken {
            effect: effect.clone(),
            presented: *presented,
            current: *current,
        },
        StoreError::LeaseLost { effect, token } => StoreError::LeaseLost {
            effect: effect.clone(),
            token: *token,
        },
        StoreError::NotFound { what, id } => StoreError::NotFound {
            what,
            id: id.clone(),
        },
        StoreError::Conflict(s) => StoreError::Conflict(s.clone()),
        StoreError::SchemaTooNew { found, known } => StoreError::SchemaTooNew {
            found: *found,
            known: *known,
        },
        StoreError::Corrupt(s) => StoreError::Corrupt(s.clone()),
        StoreError::Config(s) => StoreError::Config(s.clone()),
        StoreError::Internal { sqlstate, .. } => StoreError::Internal {
            sqlstate: sqlstate.clone(),
            source: None,
        },
    }
}
