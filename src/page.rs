//! `Page`: keyset pagination for listings, shared by every domain, and the integer
//! conversions between counts, cursors and sequences and the `i64` SQLite stores.
//!
//! A page is "the next `limit` rows after this id" in the listing's own order; the id of the
//! last row of one page is the `after` of the next. Keyset pages stay correct while rows are
//! added and cost the same deep into a listing.

/// Which page of a listing to read. `#[non_exhaustive]`: build it with [`Page::first`] or
/// [`Page::after`] (`Default`: the first 100 rows).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Page {
    /// Read rows after this id (`None` reads from the start).
    pub after: Option<String>,
    /// Most rows to return; at most `Limits::page_size_max`.
    pub limit: usize,
}

impl Page {
    /// The `limit` rows after `after`, or the first `limit` rows when it is `None` (a cursor
    /// as a listing hands it back).
    pub fn new(after: Option<String>, limit: usize) -> Self {
        Self { after, limit }
    }

    /// The first `limit` rows.
    pub fn first(limit: usize) -> Self {
        Self { after: None, limit }
    }

    /// The `limit` rows after `id`.
    pub fn after(id: impl Into<String>, limit: usize) -> Self {
        Self { after: Some(id.into()), limit }
    }
}

/// A row count as SQL takes it (an `i64`; counts past it are read as "no limit").
pub(crate) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A sequence, cursor or token as SQLite stores it; values past `i64::MAX` mean "after
/// everything".
pub(crate) fn to_sql_int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A stored sequence, count or token; the schema's CHECKs keep them non-negative.
pub(crate) fn from_sql_int(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl Default for Page {
    /// The first 100 rows.
    fn default() -> Self {
        Self::first(100)
    }
}
