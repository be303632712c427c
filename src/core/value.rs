//! A statement's values, below the engine seam and both engines: arguments (`Arg`, `args![]`,
//! `ToArg`), what a column can be read as (`Column`), and the savepoint texts every call of a
//! batch runs under. Both `db` (the seam) and each engine's connection use these, so neither
//! imports the other for them.

use rusqlite::types::{ToSqlOutput, ValueRef};

/// The savepoint every call of a batch runs under (unless it needs none), and the statements
/// that keep or undo its work: the same text on both engines.
pub(crate) const SAVEPOINT_OP: &str = "SAVEPOINT op";
pub(crate) const RELEASE_OP: &str = "RELEASE op";
pub(crate) const ROLLBACK_TO_OP: &str = "ROLLBACK TO op";

/// One argument of a statement, borrowed from the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// SQL's NULL (a `None`).
    Null,
    /// An integer (also a `bool`, as 0 or 1).
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text (ids, JSON).
    Text(&'a str),
    /// Bytes.
    Blob(&'a [u8]),
    /// Texts (NULLs among them) as one PostgreSQL array, for a set-based statement's
    /// `unnest`: only in PostgreSQL's own texts (SQLite refuses it).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Texts(&'a [Option<&'a str>]),
    /// Integers as one PostgreSQL array (see `Texts`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Ints(&'a [i64]),
}

/// An argument owned, for statements built at run time with a varying number of arguments.
#[derive(Debug, Clone)]
pub(crate) enum OwnedArg {
    Int(i64),
    Real(f64),
    Text(String),
}

impl ToArg for OwnedArg {
    fn to_arg(&self) -> Arg<'_> {
        match self {
            OwnedArg::Int(value) => Arg::Int(*value),
            OwnedArg::Real(value) => Arg::Real(*value),
            OwnedArg::Text(text) => Arg::Text(text),
        }
    }
}

/// Borrows owned arguments as a statement's.
pub(crate) fn borrow_args(values: &[OwnedArg]) -> Vec<Arg<'_>> {
    values.iter().map(ToArg::to_arg).collect()
}

/// A value that can be a statement's argument.
pub(crate) trait ToArg {
    /// The value as an argument.
    fn to_arg(&self) -> Arg<'_>;
}

/// The arguments of a statement, each borrowed: `args![tenant, id, now_ms]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::core::value::ToArg::to_arg(&$value)),*] as &[$crate::core::value::Arg<'_>]
    };
}
pub(crate) use args;

/// A value a column can be read as.
pub(crate) trait Column: rusqlite::types::FromSql {}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(value) => ValueRef::Integer(value),
            Arg::Real(value) => ValueRef::Real(value),
            Arg::Text(text) => ValueRef::Text(text.as_bytes()),
            Arg::Blob(bytes) => ValueRef::Blob(bytes),
            Arg::Texts(_) | Arg::Ints(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure(
                    "an array is a PostgreSQL statement's argument only".into(),
                ));
            }
        }))
    }
}

impl ToArg for Arg<'_> {
    fn to_arg(&self) -> Arg<'_> {
        *self
    }
}

impl ToArg for str {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for [u8] {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for Vec<u8> {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Blob(self)
    }
}

impl ToArg for bool {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}

impl ToArg for f64 {
    fn to_arg(&self) -> Arg<'_> {
        Arg::Real(*self)
    }
}

/// Integers that always fit an `i64`.
macro_rules! int_args {
    ($($ty:ty),*) => {$(
        impl ToArg for $ty {
            fn to_arg(&self) -> Arg<'_> {
                Arg::Int(i64::from(*self))
            }
        }
    )*};
}
int_args!(i64, i32, u32, u16, u8);

impl<T: ToArg + ?Sized> ToArg for &T {
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn to_arg(&self) -> Arg<'_> {
        self.as_ref().map_or(Arg::Null, ToArg::to_arg)
    }
}

impl<T: Column> Column for Option<T> {}
impl Column for i64 {}
impl Column for u32 {}
impl Column for bool {}
impl Column for f64 {}
impl Column for String {}
impl Column for Vec<u8> {}
