//! One attempt of a node's command, and what keeps two attempts of a node from running at once.
//!
//! A worker does not start `sh -c COMMAND` itself: it starts this binary again as a *guard*
//! (`spindle __guard -- COMMAND`), the leader of a new process group, with a pipe on its stdin
//! whose other end only the runner holds. The guard waits for one byte on the pipe, and the
//! runner sends it only after recording the attempt's group (the guard's pid, start time and
//! the machine's boot id, as a `Liveness`) with the node's queue item, under the item's fence.
//! Then the guard runs the shell and keeps reading the pipe: when the runner dies, however it
//! dies (`kill -9` included), the kernel closes its end, the read returns, and the guard kills
//! its whole group, itself included. So commands die with their runner.
//!
//! Whoever claims the item next (a resumed run, another runner that took over a lapsed lease)
//! first ends the recorded group if it still runs on this boot with the same leader
//! (`end_previous`): that covers a guard that could not act (stopped, or killed on its own).
//! A group that cannot be proven the same (another boot, a reused pid, a leader gone) is left
//! alone. Processes that leave the group on purpose (`setsid`, daemons) are theirs to manage.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg, raise};
use nix::unistd::{Pid, getpgrp, getpid};
use serde_json::Value;
use spindle::Liveness;

use crate::common::CliError;

/// The hidden subcommand that runs a guard.
pub const GUARD_COMMAND: &str = "__guard";
/// The byte that lets a guard start its command.
const GO: u8 = b'g';
/// A guard's exit code when its runner went away before letting it start.
const NOT_STARTED: u8 = 125;
/// Where a worker records an attempt's group in its item's payload.
const GROUP_KEY: &str = "group";
/// How long a new attempt waits for an earlier one's processes to die after `SIGKILL`.
const END_WAIT: Duration = Duration::from_secs(10);

/// `spindle __guard -- COMMAND`: waits for the runner's go, runs `sh -c COMMAND`, kills its
/// whole process group as soon as the runner's end of stdin closes, and otherwise exits as the
/// shell did (the same code, or the same signal).
pub fn guard(command: &str) -> u8 {
    // Killing "its group" is only safe for the group's leader: started by hand from a shell,
    // the group would be the shell's.
    if getpgrp() != getpid() {
        eprintln!(
            "spindle: {GUARD_COMMAND} runs only as the leader of a command's group, under `spindle run`"
        );
        return NOT_STARTED;
    }
    let mut go = [0_u8; 1];
    if !matches!(std::io::stdin().read(&mut go), Ok(1)) || go[0] != GO {
        return NOT_STARTED;
    }
    let shell = Command::new("sh").arg("-c").arg(command).stdin(Stdio::null()).spawn();
    let mut shell = match shell {
        Ok(shell) => shell,
        Err(error) => {
            eprintln!("spindle: cannot start sh: {error}");
            return 127;
        }
    };
    // Without this thread nothing would notice the runner's death.
    if thread::Builder::new().spawn(kill_group_when_runner_goes).is_err() {
        let _ = killpg(getpgrp(), Signal::SIGKILL);
    }
    match shell.wait() {
        Ok(status) => mirror(status),
        Err(_) => 126,
    }
}

/// Why a guard did not start.
pub enum SpawnError {
    /// It could not enter its working directory (gone, or not one): the attempt fails.
    Cwd(std::io::Error),
    /// Anything else: the run fails.
    Other(CliError),
}

/// Starts a guard for `command` as the leader of a new process group, its output piped and its
/// stdin held by the caller; `env` is set for the command, which runs in `cwd` if given.
pub fn spawn(
    command: &str,
    env: &[(String, String)],
    cwd: Option<&Path>,
) -> Result<Child, SpawnError> {
    // The running binary itself, even if its file was replaced since it started.
    let mut guard = Command::new("/proc/self/exe");
    guard.arg0("spindle").args([GUARD_COMMAND, "--", command]);
    for (name, value) in env {
        guard.env(name, value);
    }
    if let Some(cwd) = cwd {
        guard.current_dir(cwd);
    }
    let spawned = guard
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    spawned.map_err(|error| {
        let in_cwd = cwd.is_some()
            && matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            );
        if in_cwd {
            SpawnError::Cwd(error)
        } else {
            SpawnError::Other(CliError::Internal(format!("cannot start a command: {error}")))
        }
    })
}

/// `payload` with the group of `guard` (an unreaped child, so its pid is still its own)
/// recorded in it.
pub fn with_group(payload: &Value, guard: &Child, host: &str) -> Result<Value, CliError> {
    let liveness = Liveness::local_process(host, guard.id())?;
    let cannot = |why: String| CliError::Internal(format!("cannot record an attempt: {why}"));
    let mut payload = payload.clone();
    let fields =
        payload.as_object_mut().ok_or_else(|| cannot("its item is not a node's".into()))?;
    let group = serde_json::to_value(liveness).map_err(|error| cannot(error.to_string()))?;
    fields.insert(GROUP_KEY.into(), group);
    Ok(payload)
}

/// Lets the guard start its command. The pipe stays open (inside `guard`) for as long as the
/// runner holds the child.
pub fn go(guard: &mut Child) {
    if let Some(stdin) = guard.stdin.as_mut() {
        // A guard that is gone already is seen when its exit is.
        let _ = stdin.write_all(&[GO]).and_then(|()| stdin.flush());
    }
}

/// Whether an item's `payload` records an attempt's group (an attempt of it started).
pub fn recorded(payload: &Value) -> bool {
    payload.get(GROUP_KEY).is_some()
}

/// Ends an earlier attempt recorded in an item's `payload`, if its group is still led here by
/// the same guard (running, or exited and not yet reaped while children of the command live
/// on): kills the group and waits until none of its processes is left. Returns
/// false if some are still there after `END_WAIT` (the caller must not run the node now).
pub fn end_previous(payload: &Value) -> bool {
    let Some(group) = payload.get(GROUP_KEY) else { return true };
    let Ok(liveness) = serde_json::from_value::<Liveness>(group.clone()) else { return true };
    let Liveness::LocalProcess { pid, .. } = liveness else { return true };
    if liveness.holds_pid_here() != Some(true) {
        // Its leader is gone (reaped) or another process, or this is another boot: the group
        // cannot be proven ours, so it is left alone.
        return true;
    }
    kill_group(pid);
    wait_for_group_end(pid)
}

/// Kills what is left of process group `group` (its leader, alive or not yet reaped, keeps the
/// group's id from being reused).
pub fn kill_group(group: u32) {
    if let Ok(group) = i32::try_from(group) {
        // The group is gone already when nothing of it is left: nothing to do.
        let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    }
}

/// Waits until no live process (zombies aside) is in `group`, at most `END_WAIT`.
fn wait_for_group_end(group: u32) -> bool {
    let deadline = Instant::now() + END_WAIT;
    while group_has_live_members(group) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Whether a process that has not exited is in process group `group`, read from `/proc`.
fn group_has_live_members(group: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
        // After the command name (which may hold spaces and parentheses): state, ppid, pgrp.
        let fields: Vec<&str> =
            stat.rsplit_once(") ").map(|(_, rest)| rest).unwrap_or("").split(' ').collect();
        let live = !matches!(fields.first(), Some(&"Z" | &"X"));
        live && fields.get(2).and_then(|pgrp| pgrp.parse::<u32>().ok()) == Some(group)
    })
}

/// Reads the guard's stdin until the runner's end closes, then kills the guard's group.
fn kill_group_when_runner_goes() {
    let mut stdin = std::io::stdin();
    let mut sink = [0_u8; 64];
    loop {
        match stdin.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = killpg(getpgrp(), Signal::SIGKILL);
}

/// Exits as `status` says the shell did: with its code, or killed by its signal.
fn mirror(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return u8::try_from(code).unwrap_or(1);
    }
    let number = status.signal().unwrap_or(0);
    if let Ok(signal) = Signal::try_from(number) {
        let _ = raise(signal);
    }
    // A signal that does not end a process by default: say so as shells do.
    u8::try_from(128 + number).unwrap_or(1)
}
