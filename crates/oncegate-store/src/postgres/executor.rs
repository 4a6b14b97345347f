//! The executor the store's operations run on with PostgreSQL (`sql::Tx`), over a pooled
//! connection or a transaction alike: typed parameters (texts spelled by `nul`), rows read into
//! cells, independent statements pipelined, and a decision's writes chained into one statement.

use tokio_postgres::types::{ToSql, Type};

use super::connection::{Client, Statements, Transaction};
use super::pipeline::{pipelined, Step};
use super::set::{insert_shape, substitute};
use super::sqlstate::pg_err;
use crate::error::StoreError;
use crate::sql::{Cell, Dialect, Row, Statement, Tx, Value};

type Result<T> = std::result::Result<T, StoreError>;

/// Where the executor's statements run: a pooled connection on its own, where each statement
/// is atomic by itself (the hot path, which pays no BEGIN or COMMIT), or a transaction the
/// store opened on one (every other call).
pub(crate) trait Session: Sync {
    /// True inside a transaction the store opened and ends; false on a bare connection, where
    /// `exec_all` brackets its statements in a transaction of its own.
    const IN_TRANSACTION: bool;

    /// The connection the statements run on (inside the transaction, if there is one).
    fn client(&self) -> &tokio_postgres::Client;

    /// The statements prepared on that connection.
    fn statements(&self) -> &Statements;
}

/// The statement, prepared once per connection. (A free function, not a method of `Session`
/// with a body: the future of such a method is not known to be `Send` where it is awaited.)
pub(super) async fn prepare<S: Session>(
    session: &S,
    sql: &str,
) -> Result<tokio_postgres::Statement> {
    session
        .statements()
        .prepare(session.client(), sql)
        .await
        .map_err(pg_err)
}

impl Session for Client {
    const IN_TRANSACTION: bool = false;

    fn client(&self) -> &tokio_postgres::Client {
        self
    }

    fn statements(&self) -> &Statements {
        (**self).statements()
    }
}

impl Session for Transaction<'_> {
    const IN_TRANSACTION: bool = true;

    fn client(&self) -> &tokio_postgres::Client {
        tokio_postgres::Transaction::client(self)
    }

    fn statements(&self) -> &Statements {
        Transaction::statements(self)
    }
}

/// The executor the shared operations run on, over a connection or a transaction alike.
///
/// A decision reads its view in one statement and writes everything in one more (`chained`);
/// a write that loses a race writes nothing and the decision is read and run again. On a bare
/// connection `exec_all` (not on the hot path) keeps its all-or-nothing meaning: BEGIN, the
/// statements and COMMIT are queued on the connection at once, one round trip, and a caller
/// that gives up half-way still leaves the connection outside any transaction.
pub(crate) struct Executor<'c, C> {
    client: &'c C,
}

impl<'c, C: Session> Executor<'c, C> {
    pub(super) fn new(client: &'c C) -> Self {
        Executor { client }
    }
}

pub(super) fn as_sql<'v>(v: &'v Value<'_>) -> &'v (dyn ToSql + Sync) {
    match v {
        Value::Text(s) => s,
        Value::Int(i) => i,
        Value::Bool(b) => b,
        Value::Bytes(b) => b,
    }
}

pub(super) fn cells(row: &tokio_postgres::Row) -> Result<Row> {
    let bad = |e| pg_err(e);
    let mut out = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let ty = column.type_();
        let cell = if *ty == Type::INT8 {
            row.try_get::<_, Option<i64>>(i)
                .map_err(bad)?
                .map(Cell::Int)
        } else if *ty == Type::INT4 {
            row.try_get::<_, Option<i32>>(i)
                .map_err(bad)?
                .map(|v| Cell::Int(i64::from(v)))
        } else if *ty == Type::INT2 {
            row.try_get::<_, Option<i16>>(i)
                .map_err(bad)?
                .map(|v| Cell::Int(i64::from(v)))
        } else if *ty == Type::TEXT
            || *ty == Type::VARCHAR
            || *ty == Type::BPCHAR
            || *ty == Type::NAME
        {
            row.try_get::<_, Option<String>>(i)
                .map_err(bad)?
                .map(crate::nul::decode)
                .transpose()?
                .map(Cell::Text)
        } else if *ty == Type::BOOL {
            row.try_get::<_, Option<bool>>(i)
                .map_err(bad)?
                .map(Cell::Bool)
        } else if *ty == Type::BYTEA {
            row.try_get::<_, Option<Vec<u8>>>(i)
                .map_err(bad)?
                .map(Cell::Bytes)
        } else {
            return Err(StoreError::corrupt(format!(
                "column {} has an unexpected type {ty}",
                column.name()
            )));
        };
        out.push(cell.unwrap_or(Cell::Null));
    }
    Ok(Row(out))
}

impl<C: Session> Tx for Executor<'_, C> {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn exec(&mut self, sql: &str, params: &[Value<'_>]) -> Result<u64> {
        let stmt = prepare(self.client, sql).await?;
        let params = crate::nul::params(params);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(as_sql).collect();
        self.client
            .client()
            .execute(&stmt, &refs)
            .await
            .map_err(pg_err)
    }

    async fn query(&mut self, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>> {
        let stmt = prepare(self.client, sql).await?;
        let params = crate::nul::params(params);
        let refs: Vec<&(dyn ToSql + Sync)> = params.iter().map(as_sql).collect();
        let rows = self
            .client
            .client()
            .query(&stmt, &refs)
            .await
            .map_err(pg_err)?;
        rows.iter().map(cells).collect()
    }

    async fn exec_all(&mut self, statements: &[Statement<'_>]) -> Result<Vec<u64>> {
        let spelled: Vec<_> = statements
            .iter()
            .map(|(_, params)| crate::nul::params(params))
            .collect();
        let steps: Vec<Step<'_>> = statements
            .iter()
            .zip(&spelled)
            .map(|((sql, _), params)| Step {
                sql,
                params: params.iter().map(as_sql).collect(),
                rows: false,
            })
            .collect();
        // On a bare connection the statements keep their all-or-nothing meaning in a
        // transaction of their own, opened and committed in the same round trip.
        let own = !C::IN_TRANSACTION;
        let answers = pipelined(self.client, &steps, own.then_some("BEGIN"), own).await?;
        answers.into_iter().map(|a| Ok(a?.count())).collect()
    }

    async fn write_decision(
        &mut self,
        head: Option<&Statement<'_>>,
        rest: &[Statement<'_>],
    ) -> Result<bool> {
        if head.is_none() && rest.is_empty() {
            return Ok(true);
        }
        let (sql, params) = chained(head, rest)?;
        let rows = self.query(&sql, &params).await?;
        match head {
            None => Ok(true),
            Some(_) => Ok(rows.first().map(|r| r.int(0)).transpose()?.unwrap_or(0) > 0),
        }
    }
}

/// A decision's writes as ONE statement: `WITH h AS (head RETURNING 1), w1 AS (…), …`, each
/// later write reading `h` so it writes nothing when the head changed no row. One statement
/// is atomic on its own, so it needs no BEGIN or COMMIT: a decision's writes cost one round
/// trip, and a failure anywhere in it (the proof's primary key) leaves nothing behind.
///
/// Every statement keeps its own parameters, renumbered; an `INSERT … VALUES (…)` after a
/// head becomes `INSERT … SELECT … FROM h`, an `UPDATE … WHERE …` gains `AND EXISTS (SELECT 1
/// FROM h)`. The parts of one statement share a snapshot and do not see one another's rows,
/// which is why they depend on the head through `h` and never by reading its table.
pub(super) fn chained<'a>(
    head: Option<&Statement<'a>>,
    rest: &[Statement<'a>],
) -> Result<(String, Vec<Value<'a>>)> {
    let mut sql = String::from("WITH ");
    let mut params: Vec<Value<'a>> = Vec::new();
    if let Some((head_sql, head_params)) = head {
        sql.push_str("h AS (");
        sql.push_str(&renumbered(head_sql, 0));
        sql.push_str(" RETURNING 1)");
        params.extend(head_params.iter().cloned());
    }
    for (i, (part, part_params)) in rest.iter().enumerate() {
        let part = renumbered(part, params.len());
        let part = if head.is_some() {
            after_head(&part)?
        } else {
            part
        };
        if head.is_some() || i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("w{i} AS ({part})"));
        params.extend(part_params.iter().cloned());
    }
    sql.push_str(if head.is_some() {
        " SELECT COUNT(*) FROM h"
    } else {
        " SELECT 1"
    });
    Ok((sql, params))
}

/// `$n` → `$(n + offset)`.
pub(super) fn renumbered(sql: &str, offset: usize) -> String {
    substitute(sql, |n| Ok(format!("${}", n + offset))).unwrap_or_else(|_| sql.to_owned())
}

/// Makes a write depend on the head's row (see `chained`).
fn after_head(sql: &str) -> Result<String> {
    if let Ok(shape) = insert_shape(sql) {
        let tail = if shape.tail.is_empty() {
            String::new()
        } else {
            format!(" {}", shape.tail)
        };
        return Ok(format!(
            "{} SELECT {} FROM h{tail}",
            shape.into, shape.values
        ));
    }
    if sql.starts_with("UPDATE ") {
        if let Some((update, condition)) = sql.split_once(" WHERE ") {
            return Ok(format!(
                "{update} WHERE ({condition}) AND EXISTS (SELECT 1 FROM h)"
            ));
        }
    }
    Err(StoreError::corrupt(format!(
        "a decision's write cannot follow its head in one statement: {sql}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{int, text};

    fn check(head: Option<Statement>, rest: Vec<Statement>, sql: &str, params: usize) {
        let (got, values) = chained(head.as_ref(), &rest).expect("chained");
        assert_eq!(got, sql);
        assert_eq!(values.len(), params);
    }

    #[test]
    fn a_decision_is_one_statement_chained_on_its_head() {
        check(
            Some((
                "INSERT INTO a (k) VALUES ($1) ON CONFLICT (k) DO NOTHING",
                vec![text("k")],
            )),
            vec![
                ("INSERT INTO b (x, y) VALUES ($1, $2) ON CONFLICT (x) DO NOTHING", vec![int(1), int(2)]),
                ("UPDATE c SET v = $2 WHERE id = $1 OR v IS NULL", vec![text("i"), text("v")]),
                ("INSERT INTO d (z) VALUES ($1)", vec![int(3)]),
            ],
            "WITH h AS (INSERT INTO a (k) VALUES ($1) ON CONFLICT (k) DO NOTHING RETURNING 1), \
             w0 AS (INSERT INTO b (x, y) SELECT $2, $3 FROM h ON CONFLICT (x) DO NOTHING), \
             w1 AS (UPDATE c SET v = $5 WHERE (id = $4 OR v IS NULL) AND EXISTS (SELECT 1 FROM h)), \
             w2 AS (INSERT INTO d (z) SELECT $6 FROM h) \
             SELECT COUNT(*) FROM h",
            6,
        );
        check(
            None,
            vec![
                ("INSERT INTO b (x) VALUES ($1)", vec![int(1)]),
                ("INSERT INTO d (z) VALUES ($1)", vec![int(3)]),
            ],
            "WITH w0 AS (INSERT INTO b (x) VALUES ($1)), w1 AS (INSERT INTO d (z) VALUES ($2)) SELECT 1",
            2,
        );
    }

    #[test]
    fn placeholders_are_renumbered_whole() {
        assert_eq!(renumbered("$1, $9, $10, $21", 10), "$11, $19, $20, $31");
        assert_eq!(renumbered("x = $1 AND y = 'a$'", 2), "x = $3 AND y = 'a$'");
    }

    #[test]
    fn a_write_that_cannot_follow_a_head_is_refused() {
        assert!(after_head("DELETE FROM a WHERE k = $1").is_err());
        assert!(after_head("UPDATE a SET v = 1").is_err());
    }
}
