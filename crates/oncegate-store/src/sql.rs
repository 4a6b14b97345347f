//! The little each backend must provide so the store's operations can be written once: run a
//! statement with typed parameters inside the current transaction, and read rows back as
//! owned cells.
//!
//! Statements are written with PostgreSQL's `$1` placeholders; the SQLite executor rewrites
//! them to SQLite's equivalent `?1`. Parameters carry their SQL type even when NULL, because
//! PostgreSQL checks a parameter's type before looking at its value.
//!
//! A statement that names its row by primary key and tests the row's state writes the test
//! `(CASE WHEN status = 'open' THEN TRUE ELSE FALSE END)`, which the planner can only check on
//! the row it found, never use to find it. Written plainly (`id = $1 AND status = 'open'`), it
//! leaves PostgreSQL two ways to the row where the state has an index of its own or is a
//! partial index's predicate: the primary key, or every row in that state. On a table without
//! statistics (new, or grown since its last `ANALYZE`) both look like one row, and a generic
//! plan made then keeps the wrong one for as long as the connection keeps the statement:
//! measured under the load bench, the reconciler's record of an attempt read every open item
//! per call (1,591 buffers, 0.8 ms). `tests/it/plans.rs` holds each such statement to its key.

use std::borrow::Cow;
use std::future::Future;

use crate::error::StoreError;

/// One statement parameter. A text is borrowed from what the statement is made of (a request,
/// a scope, a constant of the program) for as long as the statement lives, so the hot path's
/// statements copy none of their texts; an owned one is for a text made for the statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Text(Option<Cow<'a, str>>),
    Int(Option<i64>),
    Bool(bool),
    Bytes(Option<Vec<u8>>),
}

/// A text parameter: borrowed from a `&str`, owned from a `String`.
pub(crate) fn text<'a>(s: impl Into<Cow<'a, str>>) -> Value<'a> {
    Value::Text(Some(s.into()))
}

pub(crate) fn opt_text<'a, S: Into<Cow<'a, str>>>(s: Option<S>) -> Value<'a> {
    Value::Text(s.map(Into::into))
}

pub(crate) fn int(v: i64) -> Value<'static> {
    Value::Int(Some(v))
}

pub(crate) fn opt_int(v: Option<i64>) -> Value<'static> {
    Value::Int(v)
}

/// One column of a result row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

/// A result row, read by position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub Vec<Cell>);

impl Row {
    fn cell(&self, i: usize) -> Result<&Cell, StoreError> {
        self.0
            .get(i)
            .ok_or_else(|| StoreError::corrupt(format!("a result row has no column {i}")))
    }

    /// The text in column `i`, borrowed; `None` for NULL.
    pub fn opt_str(&self, i: usize) -> Result<Option<&str>, StoreError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s)),
            other => Err(StoreError::corrupt(format!(
                "column {i} holds {other:?} where text was expected"
            ))),
        }
    }

    pub fn opt_text(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.opt_str(i)?.map(str::to_owned))
    }

    pub fn text(&self, i: usize) -> Result<String, StoreError> {
        self.opt_text(i)?.ok_or_else(|| {
            StoreError::corrupt(format!("column {i} is NULL where text was expected"))
        })
    }

    pub fn opt_int(&self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(v) => Ok(Some(*v)),
            other => Err(StoreError::corrupt(format!(
                "column {i} holds {other:?} where an integer was expected"
            ))),
        }
    }

    pub fn int(&self, i: usize) -> Result<i64, StoreError> {
        self.opt_int(i)?.ok_or_else(|| {
            StoreError::corrupt(format!("column {i} is NULL where an integer was expected"))
        })
    }

    /// SQLite has no boolean type and stores 0/1; PostgreSQL returns a real boolean.
    pub fn boolean(&self, i: usize) -> Result<bool, StoreError> {
        match self.cell(i)? {
            Cell::Bool(b) => Ok(*b),
            Cell::Int(v) => Ok(*v != 0),
            other => Err(StoreError::corrupt(format!(
                "column {i} holds {other:?} where a boolean was expected"
            ))),
        }
    }

    pub fn opt_bytes(&self, i: usize) -> Result<Option<Vec<u8>>, StoreError> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Bytes(b) => Ok(Some(b.clone())),
            other => Err(StoreError::corrupt(format!(
                "column {i} holds {other:?} where bytes were expected"
            ))),
        }
    }
}

/// What differs between the two SQL dialects beyond placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// Row locking for the claim query. SQLite has one writer at a time, so the lock is
    /// implicit; PostgreSQL skips rows another claimer already holds instead of waiting.
    pub fn skip_locked(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }
}

/// A transaction in progress. The operations never begin or end it: the backend does, so it
/// can batch (SQLite) or retry on serialization failures (PostgreSQL).
pub(crate) trait Tx: Send {
    fn dialect(&self) -> Dialect;

    /// Runs a statement and returns the number of rows it changed.
    fn exec(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Runs a statement and returns its rows.
    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> impl Future<Output = Result<Vec<Row>, StoreError>> + Send;

    /// Runs independent statements in order and returns each one's changed-row count.
    /// PostgreSQL pipelines them (one round trip for all); SQLite simply runs them.
    fn exec_all(
        &mut self,
        statements: &[Statement],
    ) -> impl Future<Output = Result<Vec<u64>, StoreError>> + Send;

    /// Runs a decision's writes as one atomic unit: `head`, the conditional write that settles
    /// a race (an `INSERT … ON CONFLICT` or an `UPDATE … WHERE`), first, and `rest` only if it
    /// changed a row. Returns whether it did; when it did not, nothing is written.
    ///
    /// By default (inside a transaction the backend opened) the statements simply run in
    /// order. PostgreSQL sends them as one statement instead (see `chained` in
    /// `postgres::executor`).
    fn write_decision(
        &mut self,
        head: Option<&Statement<'_>>,
        rest: &[Statement<'_>],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        async move {
            if let Some((sql, params)) = head {
                if self.exec(sql, params).await? == 0 {
                    return Ok(false);
                }
            }
            self.exec_all(rest).await?;
            Ok(true)
        }
    }
}

/// One statement of an `exec_all` list.
pub(crate) type Statement<'a> = (&'static str, Vec<Value<'a>>);

/// Builds a statement with a growing list of parameters, numbering placeholders as it goes.
/// Used by the listings, whose filters add conditions one by one.
#[derive(Debug, Default)]
pub(crate) struct Query<'a> {
    pub sql: String,
    pub params: Vec<Value<'a>>,
}

impl<'a> Query<'a> {
    pub fn new(sql: &str) -> Self {
        Query {
            sql: sql.to_owned(),
            params: Vec::new(),
        }
    }

    /// Adds a parameter and returns its placeholder.
    pub fn bind(&mut self, v: Value<'a>) -> String {
        self.params.push(v);
        format!("${}", self.params.len())
    }

    pub fn push(&mut self, s: &str) {
        self.sql.push_str(s);
    }

    /// Appends ` AND <column> = <param>` when the value is present.
    pub fn eq_if(&mut self, column: &str, v: Option<&'a str>) {
        if let Some(v) = v {
            let p = self.bind(text(v));
            self.sql.push_str(&format!(" AND {column} = {p}"));
        }
    }

    /// Appends the tenant restriction: nothing for all tenants, an `IN` list otherwise (and a
    /// condition that is never true for an empty list).
    pub fn tenants(&mut self, column: &str, filter: &'a crate::delivery::TenantFilter) {
        if let crate::delivery::TenantFilter::Only(list) = filter {
            if list.is_empty() {
                self.sql.push_str(" AND 1 = 0");
                return;
            }
            let ps: Vec<String> = list.iter().map(|t| self.bind(text(t.as_str()))).collect();
            self.sql
                .push_str(&format!(" AND {column} IN ({})", ps.join(", ")));
        }
    }
}
