//! The executor the store's operations run on with SQLite (`sql::Tx`): a connection inside a
//! transaction the store opened, statements rewritten to SQLite's placeholders, rows read into
//! cells. SQLite answers synchronously, so an operation's future is ready at its first poll
//! (`now_or_never`).

use std::borrow::Cow;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql};

use super::sqlite_err;
use crate::error::StoreError;
use crate::sql::{Cell, Dialect, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// A SQLite connection inside a transaction the store opened.
pub(crate) struct SqliteTx<'a> {
    pub(super) conn: &'a mut Connection,
}

impl SqliteTx<'_> {
    /// The same transaction, lent for a shorter while.
    pub(super) fn reborrow(&mut self) -> SqliteTx<'_> {
        SqliteTx {
            conn: &mut *self.conn,
        }
    }
}

impl ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Value::Text(Some(s)) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Int(Some(v)) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(*v)),
            Value::Bool(b) => ToSqlOutput::Owned(rusqlite::types::Value::Integer(i64::from(*b))),
            Value::Bytes(Some(b)) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
            Value::Text(None) | Value::Int(None) | Value::Bytes(None) => {
                ToSqlOutput::Owned(rusqlite::types::Value::Null)
            }
        })
    }
}

/// The shared statements use PostgreSQL's `$1`; SQLite's numbered form is `?1`.
fn placeholders(sql: &str) -> Cow<'_, str> {
    if sql.contains('$') {
        Cow::Owned(sql.replace('$', "?"))
    } else {
        Cow::Borrowed(sql)
    }
}

impl SqliteTx<'_> {
    fn exec_now(&mut self, sql: &str, params: &[Value<'_>]) -> Result<u64> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(sqlite_err)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        Ok(n as u64)
    }

    pub(super) fn query_now(&mut self, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>> {
        let mut stmt = self
            .conn
            .prepare_cached(&placeholders(sql))
            .map_err(sqlite_err)?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(sqlite_err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(sqlite_err)? {
            let mut cells = Vec::with_capacity(columns);
            for i in 0..columns {
                cells.push(match row.get_ref(i).map_err(sqlite_err)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(v) => Cell::Int(v),
                    ValueRef::Real(v) => Cell::Int(v as i64),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                });
            }
            out.push(Row(cells));
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(
        &mut self,
        sql: &str,
        params: &[Value<'_>],
    ) -> impl Future<Output = Result<u64>> + Send {
        std::future::ready(self.exec_now(sql, params))
    }

    fn query(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> impl Future<Output = Result<Vec<Row>>> + Send {
        std::future::ready(self.query_now(sql, params))
    }

    fn exec_all(
        &mut self,
        statements: &[Statement],
    ) -> impl Future<Output = Result<Vec<u64>>> + Send {
        std::future::ready(
            statements
                .iter()
                .map(|(sql, params)| self.exec_now(sql, params))
                .collect(),
        )
    }
}

struct NoopWake;

impl Wake for NoopWake {
    fn wake(self: Arc<Self>) {}
}

/// Runs a shared operation on SQLite. Its statements complete synchronously, so the future is
/// ready on its first poll; one that is not would be a bug, reported rather than spun on.
pub(super) fn now_or_never<T>(fut: impl Future<Output = Result<T>>) -> Result<T> {
    let waker = Waker::from(Arc::new(NoopWake));
    let mut cx = Context::from_waker(&waker);
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(StoreError::Corrupt(
            "a SQLite operation waited, which it never should".to_owned(),
        )),
    }
}
