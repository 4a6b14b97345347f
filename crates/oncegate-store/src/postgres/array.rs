//! A set statement's array parameters (`set`): the rows one template writes or reads for the
//! members of a batch, and each column of them bound as one PostgreSQL array. A column is read
//! in place from the rows when the statement is written to the connection, so the members'
//! values are never copied into vectors of their own.

use std::borrow::Cow;
use std::error::Error;
use std::sync::Arc;

use bytes::BytesMut;
use postgres_protocol::types::{self as wire, ArrayDimension};
use postgres_protocol::IsNull as Null;
use tokio_postgres::types::{to_sql_checked, IsNull, Kind, ToSql, Type};

use super::executor::as_sql;
use crate::error::StoreError;
use crate::sql::Value;

type Result<T> = std::result::Result<T, StoreError>;

/// The SQL type of one column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Column {
    Text,
    Int,
    Bool,
    Bytes,
}

impl Column {
    fn of(v: &Value<'_>) -> Column {
        match v {
            Value::Text(_) => Column::Text,
            Value::Int(_) => Column::Int,
            Value::Bool(_) => Column::Bool,
            Value::Bytes(_) => Column::Bytes,
        }
    }

    /// The column's array type, as its placeholder is cast.
    pub(super) fn sql_type(self) -> &'static str {
        match self {
            Column::Text => "text[]",
            Column::Int => "int8[]",
            Column::Bool => "bool[]",
            Column::Bytes => "bytea[]",
        }
    }
}

/// The type of an array's element: `text` for `text[]` (a statement of one row binds its
/// columns as values, see `set::Statement::of_one_row`).
pub(super) fn element_of(array_type: &str) -> &str {
    array_type.strip_suffix("[]").unwrap_or(array_type)
}

/// The rows of one template, each the parameters of one run of it, with the member each
/// belongs to. Shared by every array parameter that reads a column of it, so binding the rows
/// copies none of their values.
#[derive(Debug)]
pub(super) struct Table<'a> {
    pub(super) rows: Vec<Row<'a>>,
}

/// One member's row: the parameters of one run of the template.
#[derive(Debug)]
pub(super) struct Row<'a> {
    pub(super) member: i64,
    pub(super) values: Vec<Value<'a>>,
}

/// One array parameter of a set statement, bound as one array.
///
/// A column is read in place from its rows when the statement's parameters are written to the
/// connection: the rows are kept as their callers made them (one vector of values per member),
/// and no vector per column is built. Hand-written because `tokio-postgres` binds an array only
/// from a collection of its own elements.
#[derive(Debug, Clone)]
pub(super) enum Array<'a> {
    /// Column `index` of a template's rows: the values of its `$index+1` placeholder.
    Column { table: Arc<Table<'a>>, index: usize },
    /// The members of a template's rows, one per row.
    Members(Arc<Table<'a>>),
    /// A list of integers made for the statement.
    Int(Vec<Option<i64>>),
}

impl Array<'_> {
    /// The array as a statement parameter.
    pub fn as_sql(&self) -> &(dyn ToSql + Sync) {
        self
    }

    /// The array's values, in order (for tests).
    #[cfg(test)]
    pub(super) fn values(&self) -> Vec<Value<'_>> {
        match self {
            Array::Column { table, index, .. } => table
                .rows
                .iter()
                .map(|r| r.values[*index].clone())
                .collect(),
            Array::Members(table) => table
                .rows
                .iter()
                .map(|r| Value::Int(Some(r.member)))
                .collect(),
            Array::Int(v) => v.iter().map(|m| Value::Int(*m)).collect(),
        }
    }
}

impl ToSql for Array<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn Error + Sync + Send>> {
        let element = match ty.kind() {
            Kind::Array(element) => element,
            // A statement of one row binds each column as its one value.
            _ => return self.one(ty, out),
        };
        match self {
            Array::Column { table, index } => {
                // Each value as a lone statement binds it (`executor::as_sql`), type-checked.
                let values = table.rows.iter().map(|r| &r.values[*index]);
                array(element, table.rows.len(), values, out, |v, w| {
                    Ok(match as_sql(v).to_sql_checked(element, w)? {
                        IsNull::Yes => Null::Yes,
                        IsNull::No => Null::No,
                    })
                })?;
            }
            Array::Members(table) => {
                let members = table.rows.iter().map(|r| Some(r.member));
                ints(element, table.rows.len(), members, out)?
            }
            Array::Int(v) => ints(element, v.len(), v.iter().copied(), out)?,
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        let element = match ty.kind() {
            Kind::Array(e) => e,
            _ => ty,
        };
        [Type::TEXT, Type::INT8, Type::BOOL, Type::BYTEA].contains(element)
    }

    to_sql_checked!();
}

impl Array<'_> {
    /// The one value of a column or a list of members bound as a value, not an array (a
    /// statement whose rows are one).
    fn one(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn Error + Sync + Send>> {
        let only = |rows: usize| {
            if rows == 1 {
                Ok(())
            } else {
                Err(format!(
                    "a set statement's column of {rows} rows was bound as one {ty}"
                ))
            }
        };
        match self {
            Array::Column { table, index } => {
                only(table.rows.len())?;
                as_sql(&table.rows[0].values[*index]).to_sql_checked(ty, out)
            }
            Array::Members(table) => {
                only(table.rows.len())?;
                table.rows[0].member.to_sql_checked(ty, out)
            }
            Array::Int(v) => {
                only(v.len())?;
                v[0].to_sql_checked(ty, out)
            }
        }
    }
}

/// A one-dimensional array of `len` elements of type `element`, each written by `write`.
fn array<T>(
    element: &Type,
    len: usize,
    values: impl IntoIterator<Item = T>,
    out: &mut BytesMut,
    write: impl FnMut(T, &mut BytesMut) -> std::result::Result<Null, Box<dyn Error + Sync + Send>>,
) -> std::result::Result<(), Box<dyn Error + Sync + Send>> {
    let dimension = ArrayDimension {
        len: i32::try_from(len)?,
        lower_bound: 1,
    };
    wire::array_to_sql(Some(dimension), element.oid(), values, write, out)
}

fn ints(
    element: &Type,
    len: usize,
    values: impl IntoIterator<Item = Option<i64>>,
    out: &mut BytesMut,
) -> std::result::Result<(), Box<dyn Error + Sync + Send>> {
    if *element != Type::INT8 {
        return Err(format!("a set statement's list of int8 was bound as {element}[]").into());
    }
    array(element, len, values, out, |v, w| {
        Ok(match v {
            Some(i) => {
                wire::int8_to_sql(i, w);
                Null::No
            }
            None => Null::Yes,
        })
    })
}

/// A text as PostgreSQL stores it (`nul`), without a copy when it needs no spelling.
fn spell(s: &mut Cow<'_, str>) {
    if let Cow::Owned(o) = crate::nul::encode(s) {
        *s = Cow::Owned(o);
    }
}

/// The rows one template writes or reads in a batch, each tagged with the batch member it
/// belongs to (the `member` column of every set statement).
#[derive(Debug)]
pub(super) struct Rows<'a> {
    pub(super) template: &'static str,
    pub(super) table: Arc<Table<'a>>,
}

impl<'a> Rows<'a> {
    /// Rows of `template` for up to `members` members.
    pub fn new(template: &'static str, members: usize) -> Rows<'a> {
        Rows {
            template,
            table: Arc::new(Table {
                rows: Vec::with_capacity(members),
            }),
        }
    }

    pub fn template(&self) -> &'static str {
        self.template
    }

    /// How many rows there are.
    pub fn count(&self) -> usize {
        self.table.rows.len()
    }

    /// The type of each column, as the first row's values have them.
    pub(super) fn columns(&self) -> impl Iterator<Item = Column> + '_ {
        self.table
            .rows
            .first()
            .into_iter()
            .flat_map(|r| r.values.iter().map(Column::of))
    }

    /// Adds member `member`'s row: the parameters of one run of the template, each of the type
    /// of the first row's.
    pub fn push(&mut self, member: usize, mut params: Vec<Value<'a>>) -> Result<()> {
        let table = Arc::get_mut(&mut self.table)
            .ok_or_else(|| StoreError::corrupt("a set statement's rows grew once bound"))?;
        if let Some(first) = table.rows.first().map(|r| &r.values) {
            if params.len() != first.len() {
                return Err(StoreError::corrupt(format!(
                    "a set statement's rows have {} and {} parameters",
                    first.len(),
                    params.len()
                )));
            }
            if let Some((want, got)) = first
                .iter()
                .zip(&params)
                .find(|(a, b)| Column::of(a) != Column::of(b))
            {
                return Err(StoreError::corrupt(format!(
                    "a set statement's column of {} was given {got:?}",
                    Column::of(want).sql_type()
                )));
            }
        }
        for v in &mut params {
            if let Value::Text(Some(s)) = v {
                spell(s);
            }
        }
        table.rows.push(Row {
            member: member as i64,
            values: params,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::{int, text};

    #[test]
    fn a_column_binds_as_an_array_or_as_its_one_value() {
        let mut rows = Rows::new("INSERT INTO t (a, b) VALUES ($1, $2)", 2);
        rows.push(7, vec![text("x"), int(1)]).unwrap();
        let column = Array::Column {
            table: rows.table.clone(),
            index: 0,
        };
        let mut out = BytesMut::new();
        column.to_sql_checked(&Type::TEXT, &mut out).unwrap();
        assert_eq!(&out[..], b"x", "one row: its value");
        let members = Array::Members(rows.table.clone());
        let mut out = BytesMut::new();
        members.to_sql_checked(&Type::INT8, &mut out).unwrap();
        assert_eq!(&out[..], 7i64.to_be_bytes());
        let mut out = BytesMut::new();
        column.to_sql_checked(&Type::TEXT_ARRAY, &mut out).unwrap();
        assert!(out.len() > 1, "an array of it");

        drop((column, members));
        rows.push(8, vec![text("y"), int(2)]).unwrap();
        let column = Array::Column {
            table: rows.table.clone(),
            index: 0,
        };
        let Err(e) = column.to_sql_checked(&Type::TEXT, &mut BytesMut::new()) else {
            panic!("two rows are no one value");
        };
        assert!(e.to_string().contains("2 rows"), "{e}");
    }
}
