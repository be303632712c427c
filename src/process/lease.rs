//! Process leases: claim, reclaim from a provably dead holder, renew, complete; and the
//! liveness check that decides "provably dead".
//!
//! A lease is held while `expires_at_ms > now`. Every new grant takes the fencing token one
//! past the last one handed out for the process, which the row keeps after a release, so a
//! fencing token is never handed out twice. Renew and complete match the holder's token and
//! fencing token in the statement that writes.

use super::ops::require;
use super::sql;
use super::types::{LeaseClaim, LeaseOwner, Liveness, ProcessLease};
use crate::core::op::{Access, Op, sealed::Sealed};
use crate::core::tx::Tx;
use crate::error::{Error, Result};

/// Claims a process's lease. The same incarnation re-enters its live lease (keeping token and
/// fencing token, with a new expiry); another owner gets `Busy` while it is live; otherwise
/// the lease is granted with the next fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimLease {
    /// The process.
    pub id: String,
    /// Who claims.
    pub owner: LeaseOwner,
    /// For how long, within `Limits::lease_ms_min..=lease_ms_max`.
    pub ttl_ms: i64,
}

/// Takes a live lease over from `observed`, only when it still holds it and is provably
/// dead (see [`Liveness`]); a lapsed or released lease is simply granted. `Busy` otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimLease {
    /// The process.
    pub id: String,
    /// Who claims.
    pub claimant: LeaseOwner,
    /// The holder the claimant saw (from a `Busy`).
    pub observed: ProcessLease,
    /// For how long.
    pub ttl_ms: i64,
}

/// Extends a live lease; `LeaseLost` when it lapsed or another holder has it since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewLease {
    /// The lease as held.
    pub lease: ProcessLease,
    /// For how long from now.
    pub ttl_ms: i64,
}

/// Releases a lease, keeping its fencing token. Completing a lease already released (and not
/// granted since) is a no-op; one granted to another holder since is `LeaseLost`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteLease {
    /// The lease as held.
    pub lease: ProcessLease,
}

impl Sealed for ClaimLease {}
impl Op for ClaimLease {
    type Output = LeaseClaim;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<LeaseClaim> {
        require(tx, &self.id)?;
        check_owner(tx, &self.owner, self.ttl_ms)?;
        let now_ms = tx.now_ms();
        let (current, last_fence) = sql::select_lease(tx.db(), tx.tenant(), &self.id)?;
        let Some(holder) = current.filter(|lease| lease.expires_at_ms > now_ms) else {
            return grant(tx, &self.id, self.owner, last_fence, self.ttl_ms)
                .map(LeaseClaim::Acquired);
        };
        if !holder.owner.same_incarnation(&self.owner) {
            return Ok(LeaseClaim::Busy { holder });
        }
        let expires_at_ms = now_ms.saturating_add(self.ttl_ms);
        let extended = sql::extend_lease(tx.db(), tx.tenant(), &holder, now_ms, expires_at_ms)?;
        Error::expect_one(usize::from(extended), "process lease", &self.id)?;
        Ok(LeaseClaim::Acquired(ProcessLease { expires_at_ms, ..holder }))
    }
}

impl Sealed for ReclaimLease {}
impl Op for ReclaimLease {
    type Output = LeaseClaim;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<LeaseClaim> {
        require(tx, &self.id)?;
        check_owner(tx, &self.claimant, self.ttl_ms)?;
        let now_ms = tx.now_ms();
        let (current, last_fence) = sql::select_lease(tx.db(), tx.tenant(), &self.id)?;
        let Some(holder) = current.filter(|lease| lease.expires_at_ms > now_ms) else {
            return grant(tx, &self.id, self.claimant, last_fence, self.ttl_ms)
                .map(LeaseClaim::Acquired);
        };
        if !is_observed(&holder, &self.observed) || !is_dead_for(&holder.owner, &self.claimant) {
            return Ok(LeaseClaim::Busy { holder });
        }
        let lease = new_lease(tx, &self.id, self.claimant, last_fence, self.ttl_ms);
        if !sql::replace_observed_lease(tx.db(), tx.tenant(), &holder, &lease)? {
            return Ok(LeaseClaim::Busy { holder });
        }
        Ok(LeaseClaim::Acquired(lease))
    }
}

impl Sealed for RenewLease {}
impl Op for RenewLease {
    type Output = ProcessLease;
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<ProcessLease> {
        check_owner(tx, &self.lease.owner, self.ttl_ms)?;
        let now_ms = tx.now_ms();
        let expires_at_ms = now_ms.saturating_add(self.ttl_ms);
        if !sql::extend_lease(tx.db(), tx.tenant(), &self.lease, now_ms, expires_at_ms)? {
            return Err(lease_lost(&self.lease));
        }
        Ok(ProcessLease { expires_at_ms, ..self.lease })
    }
    fn single_write(&self) -> bool {
        true
    }
}

impl Sealed for CompleteLease {}
impl Op for CompleteLease {
    type Output = ();
    fn access(&self) -> Access {
        Access::Write
    }
    fn apply(self, tx: &mut Tx<'_>) -> Result<()> {
        tx.limits().check_id("process id", &self.lease.process_id)?;
        if sql::release_lease(tx.db(), tx.tenant(), &self.lease)? {
            return Ok(());
        }
        let (current, last_fence) =
            sql::select_lease(tx.db(), tx.tenant(), &self.lease.process_id)?;
        if current.is_none() && last_fence == self.lease.fencing_token {
            return Ok(());
        }
        Err(lease_lost(&self.lease))
    }
}

/// Grants a new lease with the next fencing token.
fn grant(
    tx: &Tx<'_>,
    id: &str,
    owner: LeaseOwner,
    last_fence: u64,
    ttl_ms: i64,
) -> Result<ProcessLease> {
    let lease = new_lease(tx, id, owner, last_fence, ttl_ms);
    sql::upsert_lease(tx.db(), tx.tenant(), &lease)?;
    Ok(lease)
}

fn new_lease(
    tx: &Tx<'_>,
    id: &str,
    owner: LeaseOwner,
    last_fence: u64,
    ttl_ms: i64,
) -> ProcessLease {
    let now_ms = tx.now_ms();
    ProcessLease {
        process_id: id.to_owned(),
        owner,
        lease_token: tx.new_id(),
        fencing_token: last_fence + 1,
        claimed_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    }
}

/// Whether `current` is exactly the lease the claimant observed.
fn is_observed(current: &ProcessLease, observed: &ProcessLease) -> bool {
    current.process_id == observed.process_id
        && current.owner.same_incarnation(&observed.owner)
        && current.lease_token == observed.lease_token
        && current.fencing_token == observed.fencing_token
}

/// Whether `holder` is provably dead as `claimant` sees it: both are local processes of the
/// same host and boot, and the holder's pid is gone or belongs to a process started at
/// another time. Anything else (opaque liveness, another host or boot, an unreadable
/// `/proc`) is not proof.
pub(crate) fn is_dead_for(holder: &LeaseOwner, claimant: &LeaseOwner) -> bool {
    let (
        Liveness::LocalProcess { host_id, boot_id, pid, process_start },
        Liveness::LocalProcess { host_id: claimant_host, boot_id: claimant_boot, .. },
    ) = (&holder.liveness, &claimant.liveness)
    else {
        return false;
    };
    if host_id != claimant_host || boot_id != claimant_boot {
        return false;
    }
    runs_since(*pid, process_start) == Some(false)
}

impl Liveness {
    /// This operating-system process on `host_id`: its boot id, pid and start time, read from
    /// `/proc` (Linux).
    ///
    /// # Errors
    /// `Io` when `/proc` cannot be read.
    pub fn current_local_process(host_id: impl Into<String>) -> Result<Liveness> {
        Self::local_process(host_id, std::process::id())
    }

    /// The running process `pid` of this machine (`host_id`): its boot id and start time, read
    /// from `/proc` (Linux). A child that has exited but is not yet reaped keeps its pid, so
    /// one can describe it safely until it is reaped.
    ///
    /// # Errors
    /// `NotFound` when no process `pid` runs; `Io` when `/proc` cannot be read.
    pub fn local_process(host_id: impl Into<String>, pid: u32) -> Result<Liveness> {
        let process_start =
            process_start_of(pid)?.ok_or_else(|| Error::not_found("process", &pid.to_string()))?;
        Ok(Liveness::LocalProcess {
            host_id: host_id.into(),
            boot_id: boot_id()?,
            pid,
            process_start,
        })
    }

    /// Whether the process this describes still runs, as far as this machine can prove:
    /// `Some(true)` when this boot has a live process with its pid and start time, `Some(false)`
    /// when on this boot its pid is gone, a zombie, or another process; `None` when it cannot
    /// be told (an opaque liveness, another boot or machine, an unreadable `/proc`).
    pub fn is_running_here(&self) -> Option<bool> {
        let Liveness::LocalProcess { boot_id: was_boot, pid, process_start, .. } = self else {
            return None;
        };
        if boot_id().ok()? != *was_boot {
            return None;
        }
        runs_since(*pid, process_start)
    }

    /// Whether the pid this describes is still this process's on this machine: `Some(true)`
    /// while it runs or has exited but is not yet reaped (a zombie: a process group it led
    /// cannot have been handed to another process), `Some(false)` when its pid is gone or
    /// another process's, `None` when it cannot be told (as [`Liveness::is_running_here`]).
    pub fn holds_pid_here(&self) -> Option<bool> {
        let Liveness::LocalProcess { boot_id: was_boot, pid, process_start, .. } = self else {
            return None;
        };
        if boot_id().ok()? != *was_boot {
            return None;
        }
        match read_stat(*pid) {
            Ok(Some(stat)) => Some(stat.start == *process_start),
            Ok(None) => Some(false),
            Err(_) => None,
        }
    }
}

/// This machine's boot id.
fn boot_id() -> Result<String> {
    Ok(std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim().to_owned())
}

/// Whether process `pid` runs and started at `process_start` (`Some(false)` when it is gone
/// or another process); `None` when `/proc` cannot tell.
fn runs_since(pid: u32, process_start: &str) -> Option<bool> {
    match process_start_of(pid) {
        Ok(Some(start)) => Some(start == process_start),
        Ok(None) => Some(false),
        Err(_) => None,
    }
}

/// The start time (field 22) of `/proc/<pid>/stat`; `None` when there is no such process or
/// it is a zombie (it has exited; only its pid is left).
fn process_start_of(pid: u32) -> std::io::Result<Option<String>> {
    Ok(read_stat(pid)?.filter(|stat| !stat.exited).map(|stat| stat.start))
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    /// Exited, not yet reaped (a zombie) or being reaped.
    exited: bool,
    /// The start time (field 22), in clock ticks since boot.
    start: String,
}

/// `/proc/<pid>/stat`, or `None` when there is no such process.
fn read_stat(pid: u32) -> std::io::Result<Option<Stat>> {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    // The command name (field 2) may hold spaces and parentheses: count from its last ')'.
    let after_name = stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let exited = matches!(fields.first(), Some(&"Z" | &"X"));
    match fields.get(19) {
        Some(start) => Ok(Some(Stat { exited, start: (*start).to_owned() })),
        None => Err(std::io::Error::other(format!("/proc/{pid}/stat has no start time"))),
    }
}

fn check_owner(tx: &Tx<'_>, owner: &LeaseOwner, ttl_ms: i64) -> Result<()> {
    let limits = tx.limits();
    limits.check_id("lease owner id", &owner.owner_id)?;
    limits.check_id("lease incarnation id", &owner.incarnation_id)?;
    if let Liveness::LocalProcess { host_id, boot_id, process_start, .. } = &owner.liveness {
        limits.check_id("lease owner host id", host_id)?;
        limits.check_id("lease owner boot id", boot_id)?;
        limits.check_id("lease owner process start", process_start)?;
    }
    limits.check_lease(ttl_ms)
}

fn lease_lost(lease: &ProcessLease) -> Error {
    Error::LeaseLost(format!(
        "the lease on process {} (fencing token {}) has lapsed or been granted to another holder",
        lease.process_id, lease.fencing_token
    ))
}
