//! Set-oriented statements for the batches: the rows that many members of a batch write with
//! one statement template, as ONE statement whose parameters are arrays, one array per column
//! (`INSERT … SELECT … FROM (SELECT unnest($1::text[]) AS v1, …)`, `UPDATE … FROM (SELECT
//! unnest(…) …)`, a read `CROSS JOIN LATERAL` over them). A batch then costs PostgreSQL one
//! statement per table instead of one per member: measured on oncegate's own schema, each
//! statement removed saves about 50 µs of the server's CPU (executor start-up, portal, locks),
//! more than the rows themselves cost (`shared/evidence/pg-set-writes`).
//!
//! The templates are the single-row statements the operations already write (`$n` placeholders,
//! `INSERT … VALUES (…)` or `UPDATE … SET … WHERE …`), so each row is written by exactly the SQL
//! a lone call runs; this module only rewrites its placeholders: `$n` becomes the `n`th column
//! of the row's `unnest` alias, whose array reads the rows' values in place (`array`).
//! Hand-written, because no driver or query builder turns a prepared statement's parameters into
//! columns of arrays.

use super::array::{element_of, Array, Column, Rows};
use crate::error::StoreError;

type Result<T> = std::result::Result<T, StoreError>;

/// A set statement being written: its array parameters, as its parts bind them, and its text.
///
/// The text depends only on the statement's shape (which templates, in which order), never on
/// how many rows each holds, so a caller that already has the text of a shape binds the
/// parameters alone (`bind_only`): each part then returns an empty text.
///
/// A statement whose every rows are one member's one row (a batch of one call) is written
/// `single`: each column a value, `(SELECT $a::text AS v1, …) AS alias`, not an array read by a
/// set-returning function. PostgreSQL plans such a row as the statement's own parameters, with
/// no function to set up per column at each run: a batch of one paid that set-up in full.
#[derive(Debug)]
pub(super) struct Statement<'a> {
    pub params: Vec<Array<'a>>,
    write_text: bool,
    single: bool,
}

impl Default for Statement<'_> {
    fn default() -> Self {
        Statement {
            params: Vec::new(),
            write_text: true,
            single: false,
        }
    }
}

/// Where a `Rows` was bound: its alias, and the placeholder of each of its columns.
struct Source {
    alias: String,
    placeholders: Vec<usize>,
    member: usize,
    /// Its statement is `single`: one row, bound as values.
    single: bool,
}

impl Source {
    /// The source's rows: `(SELECT unnest($a::text[]) AS v1, …, unnest($m::int8[]) AS member)
    /// AS alias`, or its one row's values when `single`.
    fn unnest_clause(&self, types: &[&'static str]) -> String {
        let columns: Vec<(usize, &str, String)> = self
            .placeholders
            .iter()
            .zip(types)
            .enumerate()
            .map(|(i, (&p, &t))| (p, t, format!("v{}", i + 1)))
            .chain(std::iter::once((
                self.member,
                "int8[]",
                "member".to_owned(),
            )))
            .collect();
        rows_of(&columns, &self.alias, self.single)
    }

    /// The template's text with each `$n` read from this source's `n`th column.
    fn columns_of(&self, sql: &str) -> Result<String> {
        substitute(sql, |n| {
            if n == 0 || n > self.placeholders.len() {
                Err(StoreError::corrupt(format!(
                    "a set statement's template names ${n} of {} parameters",
                    self.placeholders.len()
                )))
            } else {
                Ok(format!("{}.v{n}", self.alias))
            }
        })
    }
}

/// Rows read from array parameters in lockstep, one column per array: `(SELECT
/// unnest($a::T[]) AS a, …) AS alias`.
///
/// Written as set-returning functions in a select list, not as `unnest($a, $b, …)` in `FROM`:
/// PostgreSQL runs `FROM unnest(…)` of several arrays as one function scan per array, each
/// materialized in a tuple store of its own, which cost more than the rows themselves (a 16 KiB
/// allocation each, so about 120 µs for 26 columns of 8 rows, measured with pgbench), while the
/// select list's functions run side by side, value per call, with no store at all. Both forms
/// stop at the longest array and pad the shorter ones with NULL; every column here has one value
/// per row. With `single`, the one row's values: `(SELECT $a::T AS a, …) AS alias`.
fn rows_of(columns: &[(usize, &str, String)], alias: &str, single: bool) -> String {
    let list: Vec<String> = columns
        .iter()
        .map(|(p, ty, name)| match single {
            false => format!("unnest(${p}::{ty}) AS {name}"),
            true => format!("${p}::{} AS {name}", element_of(ty)),
        })
        .collect();
    format!("(SELECT {}) AS {alias}", list.join(", "))
}

impl<'a> Statement<'a> {
    /// A statement whose text the caller already has: its parts bind their parameters (`params`
    /// of them, as many as the text has placeholders), in the same order, and write no text.
    pub fn bind_only(params: usize) -> Statement<'a> {
        Statement {
            params: Vec::with_capacity(params),
            write_text: false,
            // The text is made: its parameters' types say how each is bound.
            single: false,
        }
    }

    /// A statement whose every rows are one row (`single`, see the type's documentation), or
    /// not.
    pub fn of_one_row(single: bool) -> Statement<'a> {
        Statement {
            single,
            ..Statement::default()
        }
    }

    /// True when the parts write the statement's text; false when they only bind parameters.
    pub fn writes_text(&self) -> bool {
        self.write_text
    }

    /// Binds `rows`' columns and members as parameters; when the text is written, returns
    /// where they were bound, under the alias `alias`, and each column's array type.
    fn bind(&mut self, rows: Rows<'a>, alias: &str) -> Option<(Source, Vec<&'static str>)> {
        let first = self.params.len() + 1;
        for index in 0..rows.columns().count() {
            self.params.push(Array::Column {
                table: rows.table.clone(),
                index,
            });
        }
        let types: Vec<&'static str> = if self.write_text {
            rows.columns().map(Column::sql_type).collect()
        } else {
            Vec::new()
        };
        self.params.push(Array::Members(rows.table));
        let member = self.params.len();
        self.write_text.then(|| {
            (
                Source {
                    alias: alias.to_owned(),
                    placeholders: (first..member).collect(),
                    member,
                    single: self.single,
                },
                types,
            )
        })
    }

    /// `rows` as one `INSERT … SELECT … FROM unnest(…)`, keeping only the rows of members
    /// `filter` (a condition on `alias.member`) accepts. With `returning_key`, the statement
    /// returns its first column's value (`AS key`) for every row it inserted or updated.
    ///
    /// Placeholders in an `ON CONFLICT … DO UPDATE` clause are read for the conflicting row, by
    /// its first column, which must be the conflict target: two rows of one statement with the
    /// same first column are refused by PostgreSQL, so the caller writes at most one per key.
    pub fn insert(
        &mut self,
        rows: Rows<'a>,
        alias: &str,
        filter: Option<&str>,
        returning_key: bool,
    ) -> Result<String> {
        self.insert_kept(rows, alias, filter, returning_key, None)
    }

    /// `insert`, where with `kept` (`(n, by)`) the columns of placeholders `$n` onwards are
    /// written only in the rows whose member `by` (a relation of the statement with a column
    /// `member`) holds, and empty in the others: a row written whatever happens, part of which
    /// is kept only on a condition (a journal entry, and its proof if its decision's
    /// conditional write changed a row).
    pub fn insert_kept(
        &mut self,
        rows: Rows<'a>,
        alias: &str,
        filter: Option<&str>,
        returning_key: bool,
        kept: Option<(usize, &str)>,
    ) -> Result<String> {
        let template = rows.template;
        let Some((source, types)) = self.bind(rows, alias) else {
            return Ok(String::new());
        };
        let shape = insert_shape(template)?;
        let values = match kept {
            None => source.columns_of(shape.values)?,
            Some((from, by)) => {
                let plain = |n: usize| source.columns_of(&format!("${n}"));
                substitute(shape.values, |n| {
                    let column = plain(n)?;
                    Ok(if n >= from {
                        format!("CASE WHEN {by}.member IS NOT NULL THEN {column} END")
                    } else {
                        column
                    })
                })?
            }
        };
        let source_clause = match kept {
            None => source.unnest_clause(&types),
            Some((_, by)) => format!(
                "{} LEFT JOIN {by} ON {by}.member = {alias}.member",
                source.unnest_clause(&types)
            ),
        };
        let tail = if shape.tail.contains('$') {
            // `excluded` is the row that conflicted; its first column finds its own values.
            let key = source.placeholders[0];
            substitute(shape.tail, |n| {
                let at = source.placeholders.get(n.wrapping_sub(1)).ok_or_else(|| {
                    StoreError::corrupt(format!("a set insert's conflict clause names ${n}"))
                })?;
                let rows = rows_of(
                    &[
                        (key, types[0], "k".to_owned()),
                        (*at, types[n - 1], "v".to_owned()),
                    ],
                    "x",
                    self.single,
                );
                Ok(format!(
                    "(SELECT x.v FROM {rows} WHERE x.k = excluded.{})",
                    shape.first_column
                ))
            })?
        } else {
            shape.tail.to_owned()
        };
        let mut sql = format!("{} SELECT {values} FROM {source_clause}", shape.into);
        if let Some(filter) = filter {
            sql.push_str(&format!(" WHERE {filter}"));
        }
        if !tail.is_empty() {
            sql.push(' ');
            sql.push_str(&tail);
        }
        if returning_key {
            sql.push_str(&format!(" RETURNING {} AS key", shape.first_column));
        }
        Ok(sql)
    }

    /// `rows` as one `UPDATE … FROM unnest(…)`, keeping only the rows of members `filter`
    /// accepts; it returns the member of every row it updated (`member`). The template's
    /// condition must single out one row per member (its primary key), and no two rows may
    /// update the same one.
    pub fn update(&mut self, rows: Rows<'a>, alias: &str, filter: Option<&str>) -> Result<String> {
        let template = rows.template;
        let Some((source, types)) = self.bind(rows, alias) else {
            return Ok(String::new());
        };
        let (update, condition) = template
            .strip_prefix("UPDATE ")
            .and_then(|rest| rest.split_once(" WHERE "))
            .ok_or_else(|| not_a_template(template))?;
        let mut sql = format!(
            "UPDATE {} FROM {} WHERE ({})",
            source.columns_of(update)?,
            source.unnest_clause(&types),
            source.columns_of(condition)?
        );
        if let Some(filter) = filter {
            sql.push_str(&format!(" AND {filter}"));
        }
        sql.push_str(&format!(" RETURNING {alias}.member"));
        Ok(sql)
    }

    /// `rows` as one read: `SELECT alias.member, q.* FROM unnest(…) CROSS JOIN LATERAL
    /// (template) q`, the template's rows for each member, each led by its member.
    pub fn select(&mut self, rows: Rows<'a>, alias: &str) -> Result<String> {
        let template = rows.template;
        let Some((source, types)) = self.bind(rows, alias) else {
            return Ok(String::new());
        };
        Ok(format!(
            "SELECT {alias}.member, q.* FROM {} CROSS JOIN LATERAL ({}) q",
            source.unnest_clause(&types),
            source.columns_of(template)?
        ))
    }

    /// Binds a list of members, for a statement's own use: `$n::int8[]`.
    pub fn members(&mut self, members: Vec<i64>) -> String {
        self.params
            .push(Array::Int(members.into_iter().map(Some).collect()));
        if !self.write_text {
            return String::new();
        }
        format!("${}::int8[]", self.params.len())
    }

    /// Binds the first column of `rows` beside its members, for matching a statement's returned
    /// keys to the members that wrote them: `unnest($k::T[], $m::int8[]) AS alias(key, member)`.
    pub fn keys(&mut self, rows: &Rows<'a>, alias: &str) -> Result<String> {
        let column = rows
            .columns()
            .next()
            .ok_or_else(|| not_a_template(rows.template))?;
        let ty = column.sql_type();
        self.params.push(Array::Column {
            table: rows.table.clone(),
            index: 0,
        });
        let key = self.params.len();
        self.params.push(Array::Members(rows.table.clone()));
        if !self.write_text {
            return Ok(String::new());
        }
        Ok(rows_of(
            &[
                (key, ty, "key".to_owned()),
                (self.params.len(), "int8[]", "member".to_owned()),
            ],
            alias,
            self.single,
        ))
    }
}

/// The parts of `INSERT INTO t (cols) VALUES (values) tail` (the tail without its leading
/// space).
pub(super) struct InsertShape<'a> {
    pub into: &'a str,
    pub first_column: &'a str,
    pub values: &'a str,
    pub tail: &'a str,
}

/// Reads an `INSERT … VALUES (…)` template into its parts (the executor's single decisions use
/// it too, see `executor::chained`).
pub(super) fn insert_shape(sql: &str) -> Result<InsertShape<'_>> {
    let bad = || not_a_template(sql);
    if !sql.starts_with("INSERT INTO ") {
        return Err(bad());
    }
    let at = sql.find(" VALUES (").ok_or_else(bad)?;
    let into = &sql[..at];
    let first_column = into
        .split_once('(')
        .and_then(|(_, cols)| cols.split([',', ')']).next())
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or_else(bad)?;
    let open = at + " VALUES (".len();
    let mut depth = 1;
    for (i, c) in sql[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            let close = open + i;
            return Ok(InsertShape {
                into,
                first_column,
                values: &sql[open..close],
                tail: sql[close + 1..].trim_start(),
            });
        }
    }
    Err(bad())
}

fn not_a_template(sql: &str) -> StoreError {
    StoreError::corrupt(format!(
        "a statement that cannot be written as a set statement: {sql}"
    ))
}

/// `sql` with every `$n` placeholder replaced by `with(n)` (a `$` without digits is kept).
pub(super) fn substitute(sql: &str, with: impl Fn(usize) -> Result<String>) -> Result<String> {
    let mut out = String::with_capacity(sql.len() * 2);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        let mut n = 0usize;
        let mut digits = false;
        while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
            n = n * 10 + d as usize;
            digits = true;
            chars.next();
        }
        if digits {
            out.push_str(&with(n)?);
        } else {
            out.push('$');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::Value;
    use crate::sql::{int, opt_text, text};

    #[test]
    fn an_insert_reads_each_placeholder_from_its_column() {
        let mut rows = Rows::new("INSERT INTO t (a, b, c) VALUES ($1, 'open', $2, $2)", 2);
        rows.push(0, vec![text("x"), int(1)]).unwrap();
        rows.push(3, vec![opt_text(None::<String>), int(2)])
            .unwrap();
        let mut st = Statement::default();
        let sql = st.insert(rows, "r", Some("r.member > 0"), false).unwrap();
        assert_eq!(
            sql,
            "INSERT INTO t (a, b, c) SELECT r.v1, 'open', r.v2, r.v2 \
             FROM (SELECT unnest($1::text[]) AS v1, unnest($2::int8[]) AS v2, unnest($3::int8[]) AS member) AS r \
             WHERE r.member > 0"
        );
        let params: Vec<Vec<Value>> = st.params.iter().map(Array::values).collect();
        assert_eq!(
            params,
            vec![
                vec![text("x"), opt_text(None::<String>)],
                vec![int(1), int(2)],
                vec![int(0), int(3)],
            ]
        );
    }

    #[test]
    fn a_statement_of_one_row_binds_its_values_not_arrays() {
        let mut rows = Rows::new(
            "INSERT INTO t (a, b) VALUES ($1, $2) ON CONFLICT (a) DO UPDATE SET b = $2",
            1,
        );
        rows.push(4, vec![text("x"), int(1)]).unwrap();
        let mut st = Statement::of_one_row(true);
        let keys = st.keys(&rows, "k").unwrap();
        let sql = st.insert(rows, "r", None, true).unwrap();
        assert_eq!(keys, "(SELECT $1::text AS key, $2::int8 AS member) AS k");
        assert_eq!(
            sql,
            "INSERT INTO t (a, b) SELECT r.v1, r.v2 \
             FROM (SELECT $3::text AS v1, $4::int8 AS v2, $5::int8 AS member) AS r \
             ON CONFLICT (a) DO UPDATE SET b = \
             (SELECT x.v FROM (SELECT $3::text AS k, $4::int8 AS v) AS x WHERE x.k = excluded.a) \
             RETURNING a AS key"
        );
        let params: Vec<Vec<Value>> = st.params.iter().map(Array::values).collect();
        assert_eq!(
            params,
            vec![
                vec![text("x")],
                vec![int(4)],
                vec![text("x")],
                vec![int(1)],
                vec![int(4)],
            ]
        );
    }

    #[test]
    fn an_insert_of_one_column_is_a_template_too() {
        let mut rows = Rows::new(
            "INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO NOTHING",
            2,
        );
        rows.push(0, vec![text("x")]).unwrap();
        let sql = Statement::default().insert(rows, "r", None, true).unwrap();
        assert_eq!(
            sql,
            "INSERT INTO t (a) SELECT r.v1 FROM (SELECT unnest($1::text[]) AS v1, unnest($2::int8[]) AS member) AS r \
             ON CONFLICT (a) DO NOTHING RETURNING a AS key"
        );
    }

    #[test]
    fn a_conflict_clause_reads_the_conflicting_rows_own_values() {
        let mut rows = Rows::new("INSERT INTO i (k, e) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET e = excluded.e WHERE i.e <= $3", 2);
        rows.push(0, vec![text("k"), int(1), int(9)]).unwrap();
        let mut st = Statement::default();
        let sql = st.insert(rows, "h", None, true).unwrap();
        assert_eq!(
            sql,
            "INSERT INTO i (k, e) SELECT h.v1, h.v2 FROM (SELECT unnest($1::text[]) AS v1, unnest($2::int8[]) AS v2, \
             unnest($3::int8[]) AS v3, unnest($4::int8[]) AS member) AS h \
             ON CONFLICT (k) DO UPDATE SET e = excluded.e WHERE i.e <= \
             (SELECT x.v FROM (SELECT unnest($1::text[]) AS k, unnest($3::int8[]) AS v) AS x WHERE x.k = excluded.k) \
             RETURNING k AS key"
        );
    }

    #[test]
    fn an_update_joins_its_rows_and_returns_their_members() {
        let mut rows = Rows::new("UPDATE e SET s = $3, n = n + 1 WHERE id = $1 AND t = $2", 2);
        rows.push(5, vec![text("e1"), int(1), text("done")])
            .unwrap();
        let mut st = Statement::default();
        let sql = st.update(rows, "c", Some("c.member <> 2")).unwrap();
        assert_eq!(
            sql,
            "UPDATE e SET s = c.v3, n = n + 1 FROM (SELECT unnest($1::text[]) AS v1, unnest($2::int8[]) AS v2, \
             unnest($3::text[]) AS v3, unnest($4::int8[]) AS member) AS c \
             WHERE (id = c.v1 AND t = c.v2) AND c.member <> 2 RETURNING c.member"
        );
    }

    #[test]
    fn a_read_is_joined_laterally_to_each_members_row() {
        let mut rows = Rows::new("SELECT x FROM t WHERE k = CAST($1 AS TEXT) LIMIT 1", 2);
        rows.push(1, vec![text("a")]).unwrap();
        rows.push(2, vec![text("b")]).unwrap();
        let mut st = Statement::default();
        let sql = st.select(rows, "v").unwrap();
        assert_eq!(
            sql,
            "SELECT v.member, q.* FROM (SELECT unnest($1::text[]) AS v1, unnest($2::int8[]) AS member) AS v \
             CROSS JOIN LATERAL (SELECT x FROM t WHERE k = CAST(v.v1 AS TEXT) LIMIT 1) q"
        );
    }

    #[test]
    fn binding_alone_binds_what_writing_the_text_binds() {
        let rows = || {
            let mut rows = Rows::new("UPDATE e SET s = $2 WHERE id = $1", 2);
            rows.push(0, vec![text("e1"), text("a")]).unwrap();
            rows.push(1, vec![text("e2"), text("b")]).unwrap();
            rows
        };
        let (mut full, mut bound) = (Statement::default(), Statement::bind_only(3));
        let members = full.members(vec![0, 1]);
        let sql = full.update(rows(), "c", Some(&format!("c.member = ANY({members})")));
        assert!(sql
            .unwrap()
            .starts_with("UPDATE e SET s = c.v2 FROM (SELECT unnest($2::text[]) AS v1"));
        assert_eq!(bound.members(vec![0, 1]), "");
        assert_eq!(bound.update(rows(), "c", None).unwrap(), "");
        let values = |st: &Statement| {
            st.params
                .iter()
                .map(Array::values)
                .map(|v| format!("{v:?}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&full), values(&bound));
    }

    #[test]
    fn rows_of_another_shape_are_refused() {
        let mut rows = Rows::new("INSERT INTO t (a) VALUES ($1)", 2);
        rows.push(0, vec![text("x")]).unwrap();
        assert!(rows.push(1, vec![int(1)]).is_err());
        assert!(rows.push(1, vec![text("x"), text("y")]).is_err());
        let mut st = Statement::default();
        let mut bad = Rows::new("DELETE FROM t WHERE a = $1", 2);
        bad.push(0, vec![text("x")]).unwrap();
        assert!(st.update(bad, "d", None).is_err());
        let mut over = Rows::new("INSERT INTO t (a) VALUES ($2)", 2);
        over.push(0, vec![text("x")]).unwrap();
        assert!(st.insert(over, "o", None, false).is_err());
    }

    #[test]
    fn texts_are_spelled_for_postgres_in_the_arrays() {
        let mut rows = Rows::new("INSERT INTO t (a) VALUES ($1)", 2);
        rows.push(0, vec![text("a\0b")]).unwrap();
        let mut st = Statement::default();
        st.insert(rows, "r", None, false).unwrap();
        let spelled = st.params[0].values();
        assert_eq!(spelled.len(), 1);
        assert_ne!(spelled[0], text("a\0b"));
    }
}
