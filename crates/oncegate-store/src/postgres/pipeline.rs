//! The one way the store sends several statements in one round trip: prepared once per
//! connection, queued back to back on the connection (pipelining), optionally after the text
//! that starts a transaction and before its `COMMIT`. The executor's `exec_all` and the batches'
//! two round trips both go through it.

use std::future::Future;
use std::pin::Pin;

use tokio_postgres::types::ToSql;

use super::executor::{cells, prepare, Session};
use super::sqlstate::pg_err;
use crate::error::StoreError;
use crate::sql::Row;

type Result<T> = std::result::Result<T, StoreError>;

/// One statement of a round trip: its text, its parameters, and whether its rows are read.
pub(super) struct Step<'a> {
    /// The statement's text (prepared, and cached by the connection, by this text).
    pub sql: &'a str,
    /// Its parameters, in order.
    pub params: Vec<&'a (dyn ToSql + Sync)>,
    /// True to read its rows back; false to take its count of changed rows.
    pub rows: bool,
}

/// What one statement answered.
pub(super) enum Answer {
    /// The rows it changed (a statement whose rows were not asked for).
    Done(u64),
    /// The rows it returned.
    Rows(Vec<Row>),
}

impl Answer {
    /// The changed-row count of a statement sent without reading rows (0 for rows read).
    pub fn count(&self) -> u64 {
        match self {
            Answer::Done(n) => *n,
            Answer::Rows(_) => 0,
        }
    }
}

type Pending<'a> = Pin<Box<dyn Future<Output = Result<Answer>> + Send + 'a>>;

/// Sends `steps` on `client` in one network exchange, after `begin` (the text that starts the
/// transaction, if this exchange starts one) and before `COMMIT` (`commit`), and returns each
/// statement's own answer, in order.
///
/// Polling every future at once queues their messages back to back on the connection: each
/// queues on its first poll, and the join polls them in order; the server still runs them in
/// that order. A statement that failed aborted the transaction there, and a `COMMIT` after it
/// rolled it back (answering no error): the caller reads the statements' own answers for the
/// failure. An error of `begin` or of the `COMMIT` itself is the whole round trip's.
pub(super) async fn pipelined<S: Session>(
    session: &S,
    steps: &[Step<'_>],
    begin: Option<&str>,
    commit: bool,
) -> Result<Vec<Result<Answer>>> {
    let mut prepared = Vec::with_capacity(steps.len());
    for step in steps {
        prepared.push(prepare(session, step.sql).await?);
    }
    let client = session.client();
    let answers = futures_util::future::join_all(prepared.iter().zip(steps).map(
        |(stmt, step)| -> Pending<'_> {
            if step.rows {
                Box::pin(async move {
                    let rows = client.query(stmt, &step.params).await.map_err(pg_err)?;
                    Ok(Answer::Rows(rows.iter().map(cells).collect::<Result<_>>()?))
                })
            } else {
                Box::pin(async move {
                    let n = client.execute(stmt, &step.params).await.map_err(pg_err)?;
                    Ok(Answer::Done(n))
                })
            }
        },
    ));
    let start = async {
        match begin {
            Some(begin) => client.batch_execute(begin).await.map_err(pg_err),
            None => Ok(()),
        }
    };
    let end = async {
        if commit {
            client.batch_execute("COMMIT").await.map_err(pg_err)
        } else {
            Ok(())
        }
    };
    let (start, answers, end) = futures_util::future::join3(start, answers, end).await;
    start?;
    end?;
    Ok(answers)
}
