//! The commands that look after a store rather than run pipelines: the inspectors
//! (`inspect.rs`), schedules, tenants and tokens (`admin.rs`), backups, and what only
//! PostgreSQL has (`postgres.rs`).

pub mod admin;
pub mod backup;
pub mod inspect;
pub mod postgres;
pub mod schedules;
