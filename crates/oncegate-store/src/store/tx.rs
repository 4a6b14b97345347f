//! A transaction of either backend, so each of the store's calls is written once: the
//! operations are generic over `sql::Tx`, and a call's work takes this one type whichever
//! backend runs it (an enum, not a trait object, because `Tx`'s methods return futures).

use crate::error::StoreError;
use crate::postgres::Executor;
use crate::sql::{Dialect, Row, Statement, Tx, Value};
use crate::sqlite::SqliteTx;

type Result<T> = std::result::Result<T, StoreError>;

/// The transaction a call's work runs in: a SQLite connection inside the transaction the
/// reader or the writer's batch opened, or a PostgreSQL transaction of the call's own.
pub(crate) enum AnyTx<'a> {
    Sqlite(SqliteTx<'a>),
    Postgres(Executor<'a, crate::postgres::Transaction<'a>>),
}

impl Tx for AnyTx<'_> {
    fn dialect(&self) -> Dialect {
        match self {
            AnyTx::Sqlite(tx) => tx.dialect(),
            AnyTx::Postgres(tx) => tx.dialect(),
        }
    }

    async fn exec(&mut self, sql: &str, params: &[Value<'_>]) -> Result<u64> {
        match self {
            AnyTx::Sqlite(tx) => tx.exec(sql, params).await,
            AnyTx::Postgres(tx) => tx.exec(sql, params).await,
        }
    }

    async fn query(&mut self, sql: &str, params: &[Value<'_>]) -> Result<Vec<Row>> {
        match self {
            AnyTx::Sqlite(tx) => tx.query(sql, params).await,
            AnyTx::Postgres(tx) => tx.query(sql, params).await,
        }
    }

    async fn exec_all(&mut self, statements: &[Statement<'_>]) -> Result<Vec<u64>> {
        match self {
            AnyTx::Sqlite(tx) => tx.exec_all(statements).await,
            AnyTx::Postgres(tx) => tx.exec_all(statements).await,
        }
    }

    async fn write_decision(
        &mut self,
        head: Option<&Statement<'_>>,
        rest: &[Statement<'_>],
    ) -> Result<bool> {
        match self {
            AnyTx::Sqlite(tx) => tx.write_decision(head, rest).await,
            AnyTx::Postgres(tx) => tx.write_decision(head, rest).await,
        }
    }
}
