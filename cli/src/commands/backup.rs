//! `spindle backup DEST` (a copy of the store, taken while it is in use) and `spindle restore
//! SRC --db DEST` (a backup put in the place of a store no process has open). A store on
//! PostgreSQL is backed up with `pg_dump` of its schema instead: each says so.

use std::path::Path;

use spindle::{BackupReport, Store};

use crate::common::{self, Access, CliError, Location, Output};

/// Copies the store at `db` into the new file `dest` (never replaced) and prints what it wrote.
pub fn backup(db: &Location, tenant: &str, dest: &Path, out: &Output) -> Result<(), CliError> {
    if let Location::Postgres(_) = db {
        return Err(postgres_instead(db, "back up", "pg_dump --schema=NAME --format=custom"));
    }
    let store = common::open(db, tenant, Access::Reader)?;
    out.note(&format!("copying {} to {}", db.describe(), dest.display()));
    let report = store.backup_to(dest)?;
    store.close()?;
    print_report(&report, "backed up", &db.describe(), out)
}

/// Puts a copy of the backup `src` in the place of the store file at `db`, refused while a
/// store has it open, and prints what it wrote.
pub fn restore(src: &Path, db: &Location, out: &Output) -> Result<(), CliError> {
    let Location::File(dest) = db else {
        return Err(postgres_instead(db, "restore", "pg_restore (or psql for a plain dump)"));
    };
    out.note(&format!("checking {} and copying it to {}", src.display(), dest.display()));
    let report = Store::restore(src, dest).map_err(|error| bad_backup(src, error))?;
    print_report(&report, "restored", &src.display().to_string(), out)
}

/// A backup that is not a store this build can restore is bad input (exit 2), named.
fn bad_backup(src: &Path, error: spindle::Error) -> CliError {
    match error {
        spindle::Error::NotADatabase
        | spindle::Error::InvalidInput(_)
        | spindle::Error::Corrupt(_)
        | spindle::Error::SchemaTooNew { .. } => {
            CliError::Bad(format!("{} cannot be restored: {error}", src.display()))
        }
        other => other.into(),
    }
}

/// What a PostgreSQL store uses instead of this command.
fn postgres_instead(db: &Location, what: &str, tool: &str) -> CliError {
    CliError::Bad(format!(
        "spindle cannot {what} a store on PostgreSQL ({}): use the server's own tools on the \
         store's schema, {tool} (see the README's Backups)",
        db.describe()
    ))
}

/// One line (or the report as JSON): what was written where.
fn print_report(
    report: &BackupReport,
    done: &str,
    from: &str,
    out: &Output,
) -> Result<(), CliError> {
    if out.json {
        out.print_json(&serde_json::to_value(report).map_err(spindle::Error::from)?);
        return Ok(());
    }
    println!(
        "{done} {from} to {}: {} pages, {} bytes, schema version {}",
        report.path.display(),
        report.pages,
        report.bytes,
        report.schema_version
    );
    Ok(())
}
