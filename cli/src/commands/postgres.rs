//! What only the PostgreSQL engine has from the command line: a store's record of itself
//! (`check`), and `spindle migrate`. Built without the `postgres` feature, each says so (exit
//! 2) instead. Opening a store by URL is `common::open`'s.

use serde_json::Value;

#[cfg(not(feature = "postgres"))]
use crate::common::needs_postgres;
use crate::common::{CliError, Output};
#[cfg(feature = "postgres")]
use crate::common::{postgres_client, postgres_error};

/// The store's record of itself (`spindle_meta`: application id, schema version, openings),
/// as a JSON object.
#[cfg(feature = "postgres")]
pub fn meta(url: &str) -> Result<Value, CliError> {
    let sql = "SELECT key, value FROM spindle_meta ORDER BY key";
    let mut client = postgres_client(url)?;
    // The store's schema only (the connection's current one), as the store reads it.
    let path = "SELECT set_config('search_path', quote_ident(current_schema()), false)";
    client.query_one(path, &[]).map_err(postgres_error)?;
    let rows = client.query(sql, &[]).map_err(postgres_error)?;
    let pairs = rows.iter().map(|row| {
        let key: String = row.try_get(0)?;
        Ok((key, Value::from(row.try_get::<_, i64>(1)?)))
    });
    let pairs = pairs.collect::<Result<_, spindle::postgres::Error>>().map_err(postgres_error)?;
    Ok(Value::Object(pairs))
}

#[cfg(not(feature = "postgres"))]
pub fn meta(_: &str) -> Result<Value, CliError> {
    Err(needs_postgres("a PostgreSQL store (--db postgres://...)"))
}

/// `spindle migrate --from FILE --to URL`: copies the store file into the PostgreSQL database,
/// verifies the copy, and prints what was copied (a table, or the report with `--json`).
#[cfg(feature = "postgres")]
pub fn migrate(from: &std::path::Path, to: &str, out: &Output) -> Result<(), CliError> {
    use spindle::migrate::{MigrateError, sqlite_to_postgres};
    check_target(to)?;
    let shown = crate::common::Location::Postgres(to.to_owned()).describe();
    out.note(&format!("copying {} to {shown}", from.display()));
    let report = sqlite_to_postgres(from, to).map_err(|error| match error {
        MigrateError::Store(error) => CliError::from(error),
        bad @ (MigrateError::SourceMissing(_) | MigrateError::TargetNotEmpty { .. }) => {
            CliError::Bad(bad.to_string())
        }
        other => CliError::Store(other.into()),
    })?;
    if out.json {
        out.print_json(&serde_json::to_value(&report).map_err(spindle::Error::from)?);
        return Ok(());
    }
    print_report(&report, from, &shown);
    Ok(())
}

#[cfg(not(feature = "postgres"))]
pub fn migrate(_: &std::path::Path, _: &str, _: &Output) -> Result<(), CliError> {
    Err(needs_postgres("spindle migrate"))
}

/// Refuses a `--to` that names no PostgreSQL database.
#[cfg(feature = "postgres")]
fn check_target(to: &str) -> Result<(), CliError> {
    if crate::common::names_postgres(to) {
        return Ok(());
    }
    Err(CliError::Bad(format!(
        "--to names a PostgreSQL database (postgres://USER@HOST/DB?options=-csearch_path%3DSCHEMA, \
         or a key=value connection string), not {to:?}"
    )))
}

/// The report as a table.
#[cfg(feature = "postgres")]
fn print_report(report: &spindle::migrate::MigrationReport, from: &std::path::Path, to: &str) {
    println!("{:<28} {:>10}  DIGEST (SHA-256 of the rows in key order)", "TABLE", "ROWS");
    for table in &report.tables {
        println!("{:<28} {:>10}  {}", table.name, table.rows, table.digest);
    }
    for sequence in &report.sequences {
        let (table, column, last) = (&sequence.table, &sequence.column, sequence.last_value);
        println!("{table}.{column} continues after {last}");
    }
    if !report.not_copied.is_empty() {
        println!("not copied (not the store's tables): {}", report.not_copied.join(", "));
    }
    println!(
        "copied {} rows of {} tables from {} to {to}; verified: every table's rows and digest match",
        report.rows(),
        report.tables.len(),
        from.display()
    );
}
