//! PostgreSQL's group commit: the hot path's calls (a journal entry, a decision, a journal entry
//! with its decision, a holder's complete) from every caller of the instance, gathered into one
//! transaction on one connection, in two round trips (one without a decision) and one commit for
//! the whole batch.
//!
//! A few runners share one queue. A runner takes everything waiting (up to `MAX_BATCH`), and
//! while another batch is in flight keeps gathering for a moment (`Gathering`), so the callers
//! of a busy moment share a commit. Every statement is set-oriented (`set`): a batch costs the
//! same few statements whatever its size. Then:
//!
//! 1. it sends `BEGIN`, one statement for every journal entry without a decision (refusals,
//!    deliveries journaled before their decision) and every decision's view (the entries a
//!    data-modifying `WITH` in front of the views), and one for every complete's guarded
//!    update, at once (pipelined: one round trip);
//! 2. it runs each decision's matrix on its view, and sends every reception's journal entry,
//!    written with its proof in one row (schema v14), with every decision's writes as one
//!    statement (`chained_set`) followed by `COMMIT` (a second round trip; the rows go in the
//!    order of the locks they take, so two runners never wait on each other in a cycle);
//! 3. it answers each caller only now, after the commit.
//!
//! A batch with no decision (journal entries without one, completes) has nothing to write
//! after its first round trip, and sends its `COMMIT` in it: one round trip. Each round trip is
//! counted (`BatchSizes::round_trip`, the `oncegate_store_round_trips` metric).
//!
//! Isolation of the members: a decision whose conditional write found its key taken (by another
//! member, or another transaction) wrote nothing, and is read and decided again in the next
//! batch, as the single-call path does; so is one whose lock another member of the batch takes
//! first. A statement refused (a delivery decided twice, a constraint) aborts the transaction,
//! and a set statement cannot say whose row it was: the batch is rolled back whole and each
//! member runs again alone, where a refusal is its member's own (it gets its error) and every
//! other member commits, none failed or written twice. A journal entry whose decision failed is
//! journaled all the same (the entry runs again without the decision). A batch that loses a
//! serialization race (40001, 40P01) is rolled back and its members run again one by one, each
//! with the jittered retry of `retry`.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::connection::{Client, Pool};
use oncegate_core::ids::{DeliveryId, EffectId};
use time::OffsetDateTime;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::array::{Array, Rows};
use super::executor::Executor;
use super::pipeline::{Answer, Step};
use super::retry::{retry_pause, MAX_TX_ATTEMPTS};
use super::set;
use super::sqlstate::{lost_race, pool_err};
use crate::decision::writes::{self, Prepared};
use crate::decision::{view, DecideOutcome, DecideRequest, PriorView};
use crate::delivery::NewReception;
use crate::error::StoreError;
use crate::plan::{Scope, MAX_ATTEMPTS};
use crate::sql::Row;
use crate::BatchSizes;
use crate::SharedMatrix;

type Result<T> = std::result::Result<T, StoreError>;

/// The most calls one transaction takes. A PostgreSQL transaction keeps the ids of up to 64 of
/// its subtransactions in shared memory; none are used here, but a batch beyond a few dozen
/// calls only makes its members wait for each other longer.
const MAX_BATCH: usize = 64;

/// Batches in flight at once, each on its own pooled connection: while one waits for its commit
/// to reach the disk, the next gathers and runs its statements.
const RUNNERS: usize = 3;

/// The longest a batch waits for more calls, from its first one, while another batch is in
/// flight (see `Gathering`).
const GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// How the runners fill their batches (a pipelined group commit): while another batch is in
/// flight, the next one keeps gathering until it holds as many calls as the last batch did (its
/// callers usually come straight back with their next call), or for at most `GATHER`. With no
/// batch in flight the database is idle, and a batch starts with what is there.
#[derive(Default)]
struct Gathering {
    /// Batches being run.
    in_flight: AtomicUsize,
    /// The size of the last batch started.
    last: AtomicUsize,
}

/// Where a call's answer goes, in the shape its `Store` method returns.
pub(super) enum Reply {
    Journal(oneshot::Sender<Result<()>>),
    Decide(oneshot::Sender<Result<DecideOutcome>>),
    Receive(oneshot::Sender<Result<(DeliveryId, Result<DecideOutcome>)>>),
    Complete(oneshot::Sender<Result<()>>),
}

/// A decision in a batch: the delivery's scope must be known (journaled by this instance).
pub(super) struct Deciding {
    request: DecideRequest,
    scope: Scope,
    matrix: SharedMatrix,
    /// The key's scope hash (`view::key_hash`), made once for every batch the decision joins.
    hash: Option<String>,
}

impl Deciding {
    pub fn new(request: DecideRequest, scope: Scope, matrix: SharedMatrix) -> Deciding {
        let hash = view::key_hash(&scope, &request);
        Deciding {
            request,
            scope,
            matrix,
            hash,
        }
    }

    fn key_hash(&self) -> Option<&str> {
        self.hash.as_deref()
    }
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
    sizes: Arc<BatchSizes>,
}

impl Batcher {
    /// Starts the runners on the current runtime; they stop once the batcher is dropped and
    /// what was queued is answered.
    /// `begin` starts each batch's transaction (see `postgres::batch_begin`).
    pub fn start(pool: Pool, begin: &'static str) -> Batcher {
        let (jobs, queue) = mpsc::unbounded_channel();
        let queue = Arc::new(Mutex::new(queue));
        let sizes = Arc::new(BatchSizes::default());
        let gathering = Arc::new(Gathering::default());
        for _ in 0..RUNNERS {
            tokio::spawn(runner(
                pool.clone(),
                queue.clone(),
                begin,
                sizes.clone(),
                gathering.clone(),
            ));
        }
        Batcher { jobs, sizes }
    }

    /// The batches run so far, by their number of calls.
    pub fn sizes(&self) -> Arc<BatchSizes> {
        self.sizes.clone()
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

async fn runner(
    pool: Pool,
    queue: Arc<Mutex<mpsc::UnboundedReceiver<Item>>>,
    begin: &'static str,
    sizes: Arc<BatchSizes>,
    gathering: Arc<Gathering>,
) {
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
            let wanted = gathering.last.load(Ordering::Relaxed).min(MAX_BATCH);
            if batch.len() < wanted && gathering.in_flight.load(Ordering::Relaxed) > 0 {
                let deadline = tokio::time::Instant::now() + GATHER;
                while batch.len() < wanted {
                    match tokio::time::timeout_at(deadline, queue.recv()).await {
                        Ok(Some(item)) => batch.push(item),
                        _ => break,
                    }
                }
            }
            gathering.last.store(batch.len(), Ordering::Relaxed);
        }
        sizes.record(batch.len());
        gathering.in_flight.fetch_add(1, Ordering::Relaxed);
        carry = run(&pool, batch, begin, &sizes).await;
        gathering.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The longest a batch may take on its connection, from its `BEGIN` to its last answer. A
/// database behind a network that stops answering (a blackhole, a half-open connection) would
/// otherwise hold the batch's runner, and every caller queued behind it, for as long as the
/// kernel keeps the connection. Past the bound the connection is dropped (never returned to
/// the pool: it may sit in an open transaction) and each member still waiting is answered
/// `Unavailable`, "may have been recorded", since its COMMIT may have been sent. The server
/// side's own bound for each statement is `BATCH_STATEMENT_TIMEOUT`.
pub(crate) const BATCH_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs one batch; returns the members to run again in the next one.
async fn run(pool: &Pool, items: Vec<Item>, begin: &str, sizes: &BatchSizes) -> Vec<Item> {
    let client = match pool.get().await {
        Ok(c) => c,
        Err(e) => {
            let e = pool_err(e);
            for item in items {
                item.fail(e.clone());
            }
            return Vec::new();
        }
    };
    match tokio::time::timeout(BATCH_BOUND, on(&client, items, begin, sizes)).await {
        Ok(carry) => carry,
        Err(_) => {
            // The members still in the batch were dropped with it: their callers hear that
            // the database did not answer (see `stopped`).
            drop(Client::take(client));
            Vec::new()
        }
    }
}

/// Runs one batch on its connection.
async fn on(client: &Client, items: Vec<Item>, begin: &str, sizes: &BatchSizes) -> Vec<Item> {
    if items.len() == 1 {
        return alone(client, items, begin, sizes).await;
    }
    match once(client, items, begin, sizes).await {
        Ok(carry) => carry,
        Err((failure @ (Failure::LostRace(_) | Failure::Refused(_)), items)) => {
            rollback(client).await;
            // Run each member on its own, each with the single call's retry.
            let mut carry = Vec::new();
            for item in items {
                if matches!(failure, Failure::LostRace(_)) {
                    retry_pause(1).await;
                }
                carry.extend(alone(client, vec![item], begin, sizes).await);
            }
            carry
        }
        Err((Failure::Unavailable(e), items)) => {
            rollback(client).await;
            for item in items {
                item.fail(e.clone());
            }
            Vec::new()
        }
    }
}

/// One member alone, retried after lost serialization races.
async fn alone(
    client: &Client,
    mut items: Vec<Item>,
    begin: &str,
    sizes: &BatchSizes,
) -> Vec<Item> {
    loop {
        match once(client, items, begin, sizes).await {
            Ok(carry) => return carry,
            Err((Failure::LostRace(e), mut back)) => {
                rollback(client).await;
                let lost = back.first_mut().map_or(MAX_TX_ATTEMPTS, |i| {
                    i.lost += 1;
                    i.lost
                });
                if lost >= MAX_TX_ATTEMPTS {
                    for item in back {
                        item.fail(e.clone());
                    }
                    return Vec::new();
                }
                retry_pause(lost).await;
                items = back;
            }
            Err((Failure::Unavailable(e) | Failure::Refused(e), back)) => {
                rollback(client).await;
                for item in back {
                    item.fail(e.clone());
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
    /// A statement refused one member's row, but a set statement cannot say whose: each
    /// member runs again alone, where a refusal is its own.
    Refused(StoreError),
}

/// The part of a member a statement of the batch belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Journal,
    View,
    Complete,
    Write,
}

/// One statement of a round trip: its text, its array parameters, and whether it returns rows.
type Sent<'a> = (Arc<str>, Vec<Array<'a>>, bool);

/// What a set statement's text depends on: its parts, each a role and the template it writes
/// (by address: the templates are the store's `'static` texts), in order, and whether each part
/// holds one row (a batch of one call: the statement is written `single`, its columns values,
/// see `set::Statement`); never how many rows they hold beyond that. The texts built are kept
/// by shape, so a batch binds its parameters and reuses the text: building it cost a tenth of
/// the server's CPU under load, and a connection's statement cache finds it by that same text.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Shape {
    parts: Vec<(u8, usize, usize)>,
    single: bool,
}

impl Default for Shape {
    fn default() -> Self {
        Shape {
            parts: Vec::new(),
            single: true,
        }
    }
}

/// A shape's statement text, and how many parameters it binds.
type Text = (Arc<str>, usize);

/// The most shapes kept (a handful occur; past this, texts are built each time).
const SHAPES: usize = 256;

impl Shape {
    fn part(&mut self, role: u8, rows: Option<&Rows>) {
        if let Some(rows) = rows {
            let t = rows.template();
            self.parts.push((role, t.as_ptr() as usize, t.len()));
            self.single &= rows.count() == 1;
        }
    }

    /// The statement's text and parameters: `build` binds the parts (and writes the text the
    /// first time a shape is seen).
    fn text<'a>(
        self,
        build: impl FnOnce(&mut set::Statement<'a>) -> Result<String>,
    ) -> Result<(Arc<str>, Vec<Array<'a>>)> {
        static TEXTS: std::sync::OnceLock<std::sync::Mutex<HashMap<Shape, Text>>> =
            std::sync::OnceLock::new();
        let texts = TEXTS.get_or_init(Default::default);
        let known = texts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&self)
            .cloned();
        if let Some((sql, params)) = known {
            let mut st = set::Statement::bind_only(params);
            build(&mut st)?;
            return Ok((sql, st.params));
        }
        let mut st = set::Statement::of_one_row(self.single);
        let sql: Arc<str> = build(&mut st)?.into();
        let mut texts = texts.lock().unwrap_or_else(|p| p.into_inner());
        if texts.len() < SHAPES {
            texts.insert(self, (sql.clone(), st.params.len()));
        }
        Ok((sql, st.params))
    }
}

/// Runs `sent` in one round trip on `client` (`pipeline::pipelined`), with their arrays as
/// parameters, and counts the round trip in `sizes`.
async fn pipelined(
    client: &Client,
    sizes: &BatchSizes,
    sent: &[Sent<'_>],
    begin: Option<&str>,
    commit: bool,
) -> Result<Vec<Result<Answer>>> {
    let steps: Vec<Step<'_>> = sent
        .iter()
        .map(|(sql, params, rows)| Step {
            sql,
            params: params.iter().map(Array::as_sql).collect(),
            rows: *rows,
        })
        .collect();
    sizes.round_trip();
    super::pipeline::pipelined(client, &steps, begin, commit).await
}

type Attempt = std::result::Result<Vec<Item>, (Failure, Vec<Item>)>;

/// A statement of the batch refused with `e`: a lone member gets the error as its own (part
/// `part` failed); in a batch of several the statement cannot say whose row it was, so the
/// batch is handed back whole, for its members to run again one by one.
async fn refused(
    client: &Client,
    items: Vec<Item>,
    part: impl FnOnce(&Item) -> Part,
    e: StoreError,
) -> Attempt {
    if lost_race(&e) || e.is_unavailable() {
        return Err((whole(e), items));
    }
    rollback(client).await;
    if items.len() == 1 {
        let part = part(&items[0]);
        return Ok(member_failed(items, 0, part, e));
    }
    Err((Failure::Refused(e), items))
}

/// The part of the first round trip's statement a lone member failed in.
fn first_part(item: &Item) -> Part {
    if item.journal.is_some() && journal_first(item) {
        Part::Journal
    } else if item.decide.is_some() {
        Part::View
    } else {
        Part::Complete
    }
}

/// Whether a member's journal entry goes in the first round trip: when it has no decision to
/// write. A reception's entry goes in the second, in its decision's statement (`chained_set`),
/// written whatever its decision's conditional write does.
fn journal_first(item: &Item) -> bool {
    item.decide.is_none() || item.failed.is_some()
}

/// One attempt at a batch: everything written and committed, every member answered or handed
/// back to run again; or the whole batch undone, every member handed back with the cause.
///
/// Each round trip is a few set statements whatever the batch's size (see `set`): the journal
/// entries and the views in one, the completes in one, then every decision's writes chained on
/// their conditional writes in one.
async fn once(client: &Client, mut items: Vec<Item>, begin: &str, sizes: &BatchSizes) -> Attempt {
    // Two completes of one effect in one statement would update its row twice: the later one
    // waits for the next batch.
    let mut later = Vec::new();
    let mut completing = HashSet::new();
    let mut i = 0;
    while i < items.len() {
        match &items[i].complete {
            Some(c) if !completing.insert(c.effect.clone()) => later.push(items.remove(i)),
            _ => i += 1,
        }
    }
    match written(client, items, begin, sizes).await {
        Ok(mut carry) => {
            carry.extend(later);
            Ok(carry)
        }
        Err((failure, mut items)) => {
            items.extend(later);
            Err((failure, items))
        }
    }
}

/// Round trip 1: BEGIN, every journal entry and every view in one statement, every complete in
/// another.
fn first_round(items: &[Item]) -> Result<Vec<(Sent<'_>, Vec<usize>, Part)>> {
    let mut journal: Option<Rows> = None;
    let mut views: Option<Rows> = None;
    let mut completes: Option<Rows> = None;
    let mut viewers = Vec::new();
    let mut completers = Vec::new();
    for (i, item) in items.iter().enumerate() {
        if let Some((id, reception)) = item.journal.as_ref().filter(|_| journal_first(item)) {
            let (sql, params) = crate::delivery::journal_statement(id, reception);
            journal
                .get_or_insert_with(|| Rows::new(sql, items.len()))
                .push(i, params)?;
        }
        if let Some(d) = item.decide.as_ref().filter(|_| item.failed.is_none()) {
            let (sql, params) = view::statement(
                crate::sql::Dialect::Postgres,
                &d.scope,
                &d.request,
                d.key_hash(),
            );
            views
                .get_or_insert_with(|| Rows::new(sql, items.len()))
                .push(i, params)?;
            viewers.push(i);
        }
        if let Some(c) = &item.complete {
            let (sql, params) =
                crate::effect::complete_statement(&c.effect, c.token, &c.result, c.now);
            completes
                .get_or_insert_with(|| Rows::new(sql, items.len()))
                .push(i, params)?;
            completers.push(i);
        }
    }
    let mut first = Vec::new();
    let mut shape = Shape::default();
    shape.part(0, journal.as_ref());
    shape.part(1, views.as_ref());
    // The views' statement may hold other members' journal entries, never a viewer's own.
    let part = match (&journal, &views) {
        (_, Some(_)) => Some((true, Part::View)),
        (Some(_), None) => Some((false, Part::Journal)),
        (None, None) => None,
    };
    if let Some((rows, part)) = part {
        let (sql, params) = shape.text(|st| match (journal, views) {
            (Some(j), Some(v)) => {
                let insert = st.insert(j, "j", None, false)?;
                let select = st.select(v, "v")?;
                if !st.writes_text() {
                    return Ok(String::new());
                }
                Ok(format!("WITH journaled AS ({insert}) {select}"))
            }
            (Some(j), None) => st.insert(j, "j", None, false),
            (None, Some(v)) => st.select(v, "v"),
            (None, None) => Ok(String::new()),
        })?;
        first.push(((sql, params, rows), viewers, part));
    }
    if let Some(c) = completes {
        let mut shape = Shape::default();
        shape.part(2, Some(&c));
        let (sql, params) = shape.text(|st| st.update(c, "c", None))?;
        first.push(((sql, params, true), completers, Part::Complete));
    }
    Ok(first)
}

/// Round trip 2: every decision's writes in one statement (`chained_set`), then COMMIT.
async fn written(
    client: &Client,
    mut items: Vec<Item>,
    begin: &str,
    sizes: &BatchSizes,
) -> Attempt {
    let first = match first_round(&items) {
        Ok(f) => f,
        Err(e) => return refused(client, items, first_part, e).await,
    };
    // The statements go to the connection; what each answers for stays here.
    let (sent, first): (Vec<Sent>, Vec<(Vec<usize>, Part)>) = first
        .into_iter()
        .map(|(sent, members, part)| (sent, (members, part)))
        .unzip();
    // A batch with no view to read (journal entries without a decision, completes) has nothing
    // to write after its first round trip: its COMMIT goes in it, one round trip in all.
    let viewing = first.iter().any(|(_, part)| *part == Part::View);
    let answers = match pipelined(client, sizes, &sent, Some(begin), !viewing).await {
        Ok(a) => a,
        Err(e) => return Err((whole(e), items)),
    };
    drop(sent);
    let mut views: Vec<Option<PriorView>> = (0..items.len()).map(|_| None).collect();
    let mut completed: Vec<Option<bool>> = vec![None; items.len()];
    for (answer, (members, part)) in answers.into_iter().zip(&first) {
        let answer = match answer {
            Ok(a) => a,
            Err(e) => return refused(client, items, first_part, e).await,
        };
        let Answer::Rows(rows) = answer else {
            continue;
        };
        if *part == Part::Complete {
            for &i in members {
                completed[i] = Some(false);
            }
        }
        for row in rows {
            let (i, row) = match member_of(row, items.len()) {
                Ok(r) => r,
                Err(e) => return refused(client, items, first_part, e).await,
            };
            if *part == Part::Complete {
                completed[i] = Some(true);
                continue;
            }
            let Some(d) = items[i].decide.as_ref() else {
                continue;
            };
            match view::read(&d.scope, &d.request, std::slice::from_ref(&row)) {
                Ok(v) => views[i] = Some(v),
                Err(e) => {
                    rollback(client).await;
                    let part = first_part(&items[i]);
                    return Ok(member_failed(items, i, part, e));
                }
            }
        }
    }

    // The matrix on every view, and every decision's writes.
    // The writes borrow their texts from the members and their views until they are sent.
    let mut prepared: Vec<Option<Prepared<'_>>> = (0..items.len()).map(|_| None).collect();
    for (i, item) in items.iter().enumerate() {
        let (Some(d), Some(v)) = (&item.decide, views[i].as_ref()) else {
            continue;
        };
        let decision = d.matrix.decide(v);
        // A reception's proof is written with its journal entry, one row.
        let journal = item
            .journal
            .as_ref()
            .filter(|_| !journal_first(item))
            .map(|(_, r)| r);
        match writes::prepare(&d.scope, &d.request, d.key_hash(), v, decision, journal) {
            Ok(p) => prepared[i] = Some(p),
            Err(e) => {
                rollback(client).await;
                return Ok(member_failed(items, i, Part::Write, e));
            }
        }
    }
    // Every decision writes at least its proof.
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| prepared[i].is_some())
        .collect();
    // One lock order for every runner: by what each head locks.
    order.sort_by(|&a, &b| lock_order(prepared[a].as_ref()).cmp(&lock_order(prepared[b].as_ref())));
    // Two heads on one lock in one statement: the first settles it, the other reads its view
    // again in the next batch (as it would have, having lost).
    let mut locks = HashSet::new();
    let mut held_back = HashSet::new();
    order.retain(|&i| match lock_order(prepared[i].as_ref()) {
        Some(key) if locks.contains(&key) => {
            held_back.insert(i);
            false
        }
        Some(key) => locks.insert(key),
        None => true,
    });
    let second = match chained_set(&items, &order, &mut prepared) {
        Ok(s) => s,
        Err(e) => return refused(client, items, |_| Part::Write, e).await,
    };

    // Round trip 2: the writes and COMMIT (committed already when there was no view).
    let sent: Vec<Sent> = second.into_iter().collect();
    let answers = match (viewing, sent.is_empty()) {
        (true, _) => match pipelined(client, sizes, &sent, None, true).await {
            Ok(a) => a,
            Err(e) => return Err((whole(e), items)),
        },
        (false, true) => Vec::new(),
        // Writes come only from views read: none can follow a committed first round trip.
        (false, false) => {
            let e = StoreError::corrupt("a batch with no view had writes after its commit");
            return Err((Failure::Unavailable(e), items));
        }
    };
    let mut applied: Vec<bool> = (0..items.len())
        .map(|i| prepared[i].is_some() && !held_back.contains(&i))
        .collect();
    if let Some(answer) = answers.into_iter().next() {
        let rows = match answer {
            Ok(Answer::Rows(rows)) => rows,
            Ok(Answer::Done(_)) => Vec::new(),
            Err(e) => {
                // The COMMIT that followed rolled the whole batch back.
                let e = match (order.as_slice(), items.len()) {
                    ([only], 1) => match &items[*only].decide {
                        Some(d) if prepared[*only].is_some() => {
                            writes::refused(&d.request.delivery, e)
                        }
                        _ => e,
                    },
                    _ => e,
                };
                return refused(client, items, |_| Part::Write, e).await;
            }
        };
        for &i in &order {
            applied[i] = false;
        }
        for row in rows {
            match member_of(row, items.len()) {
                Ok((i, _)) => applied[i] = true,
                Err(e) => return Err((Failure::Unavailable(e), items)),
            }
        }
    }

    // Committed: answer, and hand back the decisions whose key moved.
    let mut outcomes: Vec<Option<DecideOutcome>> =
        prepared.into_iter().map(|p| p.map(|p| p.outcome)).collect();
    let mut carry = Vec::new();
    let mut queued = false;
    for (i, mut item) in items.drain(..).enumerate() {
        item.journal = None;
        let completed = match (&item.complete, completed[i]) {
            (Some(c), Some(false)) => {
                let mut run = Executor::new(client);
                Some(
                    crate::effect::unchanged_complete(&mut run, &c.effect, c.token, &c.result)
                        .await,
                )
            }
            (Some(_), _) => Some(Ok(())),
            (None, _) => None,
        };
        let outcome = match outcomes[i].take() {
            Some(o) if applied[i] => Some(o),
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

/// The text of a batch's complete statement, for the test of its plan.
#[cfg(feature = "testing")]
pub(crate) fn complete_text(single: bool) -> String {
    let effect = EffectId::from_u128(0);
    let (sql, params) =
        crate::effect::complete_statement(&effect, 1, "{}", OffsetDateTime::UNIX_EPOCH);
    let mut rows = Rows::new(sql, 1);
    let built = rows
        .push(0, params)
        .and_then(|()| set::Statement::of_one_row(single).update(rows, "c", None));
    built.expect("the complete statement is a set template")
}

/// A row of a set statement: its member (the first column) and the rest.
fn member_of(row: Row, members: usize) -> Result<(usize, Row)> {
    let i = row.int(0)?;
    let i = usize::try_from(i)
        .ok()
        .filter(|&i| i < members)
        .ok_or_else(|| StoreError::corrupt(format!("a batch statement named member {i}")))?;
    let mut cells = row.0;
    cells.remove(0);
    Ok((i, Row(cells)))
}

/// Every decision's writes as ONE statement, set-oriented: the conditional writes first, one
/// per shape (`h0`, `h1`: the effects reserved, the effects taken over), then `ok`, the
/// members whose conditional write changed a row (or who had none), then the receptions'
/// journal entries (`j`), every one of them, each with its proof where its member is in `ok`
/// (schema v14: one row), then every other write, one per table, keeping only the rows of
/// `ok`'s members, as `executor::chained` does for one decision (the proofs of deliveries
/// journaled before, updates of their rows, among them). It returns `ok`: the members whose
/// writes were kept. `None` when nothing is to be written.
///
/// No part sees the rows another part writes (they share one snapshot): a reception's entry
/// is written with its decision's event type and proof, never updated by them.
fn chained_set<'a>(
    items: &'a [Item],
    order: &[usize],
    prepared: &mut [Option<Prepared<'a>>],
) -> Result<Option<Sent<'a>>> {
    // The receptions' entries: with their proofs (the proofs of members not in `ok` left
    // empty), or without one for a member that has no decision prepared.
    let mut journal: Option<Rows> = None;
    for (i, item) in items.iter().enumerate() {
        let Some((id, reception)) = item.journal.as_ref().filter(|_| !journal_first(item)) else {
            continue;
        };
        let (sql, params) = match prepared[i].as_mut().and_then(|p| p.proof.take()) {
            Some(entry_and_proof) => entry_and_proof,
            None => crate::delivery::decided_statement(
                id,
                reception,
                reception.event_type.as_deref(),
                writes::no_proof(),
            ),
        };
        journal
            .get_or_insert_with(|| Rows::new(sql, items.len()))
            .push(i, params)?;
    }
    if order.is_empty() {
        // No decision to write: the entries alone, every proof empty.
        let Some(journal) = journal else {
            return Ok(None);
        };
        let mut shape = Shape::default();
        shape.part(6, Some(&journal));
        let (sql, params) = shape.text(|st| st.insert(journal, "j", None, false))?;
        return Ok(Some((sql, params, false)));
    }
    let mut heads: Vec<Rows> = Vec::new();
    let mut writes: Vec<Rows> = Vec::new();
    let mut free = Vec::new();
    let group = |groups: &mut Vec<Rows<'a>>, i: usize, (sql, params): crate::sql::Statement<'a>| {
        let at = match groups.iter().position(|g| g.template() == sql) {
            Some(at) => at,
            None => {
                groups.push(Rows::new(sql, order.len()));
                groups.len() - 1
            }
        };
        groups[at].push(i, params)
    };
    for &i in order {
        // The writes move into the statement; the member keeps its outcome.
        let p = prepared[i].as_mut().expect("ordered members have writes");
        match p.head.take() {
            Some(head) => group(&mut heads, i, head)?,
            None => free.push(i as i64),
        }
        for w in std::mem::take(&mut p.writes) {
            group(&mut writes, i, w)?;
        }
        if let Some(proof) = p.proof.take() {
            // The proof of a delivery journaled before: an update of its entry.
            group(&mut writes, i, proof)?;
        }
    }
    let mut shape = Shape::default();
    for rows in &heads {
        shape.part(3, Some(rows));
    }
    if !free.is_empty() {
        // Members without a conditional write: one more part, with no template.
        shape.parts.push((5, 0, 0));
    }
    shape.part(6, journal.as_ref());
    for rows in &writes {
        shape.part(4, Some(rows));
    }
    let (sql, params) = shape.text(|st| {
        // A shape seen before binds its parameters alone, in the same order, making no text.
        let text = st.writes_text();
        let name = |prefix: &str, n: usize| {
            if text {
                format!("{prefix}{n}")
            } else {
                String::new()
            }
        };
        let mut parts = Vec::new();
        let mut kept = Vec::new();
        for (n, rows) in heads.into_iter().enumerate() {
            let alias = name("h", n);
            if rows.template().starts_with("INSERT ") {
                let keys = st.keys(&rows, &name("k", n))?;
                let sql = st.insert(rows, &alias, None, true)?;
                if text {
                    parts.push(format!("{alias} AS ({sql})"));
                    kept.push(format!(
                        "SELECT k{n}.member FROM {keys} JOIN {alias} ON {alias}.key = k{n}.key"
                    ));
                }
            } else {
                let sql = st.update(rows, &alias, None)?;
                if text {
                    parts.push(format!("{alias} AS ({sql})"));
                    kept.push(format!("SELECT {alias}.member FROM {alias}"));
                }
            }
        }
        if !free.is_empty() {
            let members = st.members(free);
            if text {
                kept.push(format!("SELECT unnest({members}) AS member"));
            }
        }
        if text {
            parts.push(format!("ok AS ({})", kept.join(" UNION ALL ")));
        }
        if let Some(journal) = journal {
            let from = crate::delivery::FIRST_PROOF_PLACEHOLDER;
            let sql = st.insert_kept(journal, "j", None, false, Some((from, "ok")))?;
            if text {
                parts.push(format!("j AS ({sql})"));
            }
        }
        for (n, rows) in writes.into_iter().enumerate() {
            let alias = name("w", n);
            let filter = if text {
                format!("{alias}.member IN (SELECT member FROM ok)")
            } else {
                String::new()
            };
            let sql = if rows.template().starts_with("INSERT ") {
                st.insert(rows, &alias, Some(&filter), false)?
            } else {
                st.update(rows, &alias, Some(&filter))?
            };
            if text {
                parts.push(format!("{alias} AS ({sql})"));
            }
        }
        if !text {
            return Ok(String::new());
        }
        Ok(format!("WITH {} SELECT member FROM ok", parts.join(", ")))
    })?;
    Ok(Some((sql, params, true)))
}

/// The order a decision's head takes its lock in (decisions without a head come first).
fn lock_order<'p>(p: Option<&'p Prepared<'_>>) -> Option<&'p str> {
    p.and_then(Prepared::lock_key)
}

/// After member `i` failed on its own in a batch that was rolled back: it gets its error (a
/// reception whose decision failed is journaled in the next batch, without the decision), and
/// every member runs again.
fn member_failed(mut items: Vec<Item>, i: usize, part: Part, e: StoreError) -> Vec<Item> {
    let item = &mut items[i];
    let journal_pending = item.journal.is_some();
    match part {
        // A failed statement of a decision and its journal entry says nothing of which of the
        // two failed: the entry runs again alone, and fails on its own if it was the cause.
        Part::View | Part::Write if journal_pending => {
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

async fn rollback(client: &Client) {
    let _ = client.batch_execute("ROLLBACK").await;
}

fn whole(e: StoreError) -> Failure {
    if lost_race(&e) {
        Failure::LostRace(e)
    } else {
        Failure::Unavailable(e)
    }
}
