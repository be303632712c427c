//! The connections being served, and which one goes when there are too many.
//!
//! At most `max` connections at once, and at most half of them from one peer (IP address).
//! When a new connection finds no room, one is shed (its socket shut down, so that its thread
//! ends) in this order: only the new peer's own when it is the one over its half; first those
//! that hold nothing (waiting for a request, reading a head, waiting for their turn, closing),
//! and only when there are none of those, those with work under way (reading a body, writing
//! an answer: a client downloading a big answer slowly is not cut for a new one); within that,
//! one of the peer with the most connections, the longest in its phase. A connection younger
//! than `YOUNG` and not answered yet is not shed (a new client gets time to send its request
//! and read its answer): when those are all there is, the new connection is answered 503
//! instead; only when the process is out of file descriptors may a young one go (nobody else
//! gets in otherwise). Connections making an answer (they end by themselves) and live streams
//! (`live.rs` bounds them) are never shed.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// Connections younger than this are not shed.
const YOUNG: Duration = Duration::from_millis(250);

/// What a connection is doing, for choosing one to shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the first byte of a request.
    Waiting,
    /// Reading a request's head.
    Head,
    /// Reading a request's body.
    Body,
    /// Waiting for its turn to make an answer (`gate`).
    Queued,
    /// Making an answer (the thread works on its own, and ends by itself).
    Handling,
    /// Writing an answer.
    Writing,
    /// Draining what the client still sends before closing.
    Closing,
    /// Writing a live stream (bounded on its own).
    Live,
}

impl Phase {
    /// Whether a connection in this phase has yet to be answered: such a one is not shed
    /// while it is young.
    fn unanswered(self) -> bool {
        !matches!(self, Phase::Closing)
    }

    /// The order connections are shed in (lowest first); `None`: never.
    fn shed_rank(self) -> Option<u8> {
        match self {
            Phase::Waiting | Phase::Head | Phase::Queued | Phase::Closing => Some(0),
            Phase::Body | Phase::Writing => Some(1),
            Phase::Handling | Phase::Live => None,
        }
    }
}

/// A connection in the table: its socket (the connection's thread owns it), its peer, its
/// phase and since when, when it came, and whether it was shed already.
struct Entry {
    stream: Weak<TcpStream>,
    peer: IpAddr,
    phase: Phase,
    since: Instant,
    admitted: Instant,
    shed: Arc<AtomicBool>,
}

impl Entry {
    /// Whether it was shed already.
    fn is_shed(&self) -> bool {
        self.shed.load(Ordering::Relaxed)
    }
}

/// The connections being served, counted by peer.
#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    by_peer: HashMap<IpAddr, usize>,
    next_id: u64,
    /// Connections that closed so far.
    closed: u64,
}

impl Table {
    /// The connections of `peer`.
    fn of_peer(&self, peer: IpAddr) -> usize {
        self.by_peer.get(&peer).copied().unwrap_or(0)
    }

    /// Takes `entry` in; its id.
    fn insert(&mut self, entry: Entry) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        *self.by_peer.entry(entry.peer).or_default() += 1;
        self.entries.insert(id, entry);
        id
    }

    /// Forgets connection `id`, which closed.
    fn remove(&mut self, id: u64) {
        let Some(entry) = self.entries.remove(&id) else { return };
        self.closed += 1;
        if let Some(count) = self.by_peer.get_mut(&entry.peer) {
            *count -= 1;
            if *count == 0 {
                self.by_peer.remove(&entry.peer);
            }
        }
    }

    /// The connection to shed (of `peer` only, when given): of the lowest rank there is, not
    /// young (unless `young_too`), of the peer with the most connections, the longest in its
    /// phase. None when that rank has none old enough.
    fn victim(&self, peer: Option<IpAddr>, young_too: bool) -> Option<u64> {
        let open = || {
            let mine = move |e: &&Entry| peer.is_none_or(|p| e.peer == p);
            self.entries.iter().filter(move |(_, e)| !e.is_shed() && mine(e))
        };
        let rank = open().filter_map(|(_, e)| e.phase.shed_rank()).min()?;
        let ranked = open().filter(|(_, e)| e.phase.shed_rank() == Some(rank));
        let spared = |e: &Entry| e.phase.unanswered() && e.admitted.elapsed() < YOUNG;
        let old = ranked.filter(|(_, e)| young_too || !spared(e));
        let most = old.max_by_key(|(_, e)| (self.of_peer(e.peer), std::cmp::Reverse(e.since)));
        most.map(|(id, _)| *id)
    }

    /// Shuts connection `id` down (its thread sees it and ends).
    fn shed(&mut self, id: u64) {
        let Some(entry) = self.entries.get_mut(&id) else { return };
        entry.shed.store(true, Ordering::Relaxed);
        if let Some(stream) = entry.stream.upgrade() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// The connections being served, at most `max` (half of them from one peer), and the signal
/// that one closed.
pub struct Connections {
    table: Mutex<Table>,
    closed: Condvar,
    max: usize,
}

impl Connections {
    /// No connections yet, at most `max` of them.
    pub fn new(max: usize) -> Self {
        Connections { table: Mutex::new(Table::default()), closed: Condvar::new(), max }
    }

    /// The most connections of one peer.
    fn per_peer(&self) -> usize {
        (self.max / 2).max(1)
    }

    /// Takes `stream` from `peer` in, shedding another connection when there is no room
    /// (waiting up to `wait` for it to close); gives it back when there is still none.
    pub fn admit(
        self: &Arc<Self>,
        stream: TcpStream,
        peer: IpAddr,
        wait: Duration,
    ) -> Result<Conn, TcpStream> {
        let mut table = self.table.lock();
        if table.of_peer(peer) >= self.per_peer() {
            self.make_room(&mut table, Some(peer), false, wait);
            if table.of_peer(peer) >= self.per_peer() {
                return Err(stream);
            }
        }
        if table.entries.len() >= self.max {
            self.make_room(&mut table, None, false, wait);
            if table.entries.len() >= self.max {
                return Err(stream);
            }
        }
        let stream = Arc::new(stream);
        let shed = Arc::new(AtomicBool::new(false));
        let now = Instant::now();
        let entry = Entry {
            stream: Arc::downgrade(&stream),
            peer,
            phase: Phase::Waiting,
            since: now,
            admitted: now,
            shed: Arc::clone(&shed),
        };
        let id = table.insert(entry);
        Ok(Conn { stream, peer, shed, seat: Seat { id, connections: Arc::clone(self) } })
    }

    /// Sheds a connection, a young one too, and waits up to `wait` for a connection to close:
    /// when the process is out of file descriptors, nobody new gets in until one closes.
    pub fn shed_one(&self, wait: Duration) {
        self.make_room(&mut self.table.lock(), None, true, wait);
    }

    /// Sheds a connection (of `peer` only, when given; young ones too when `young_too`) and
    /// waits up to `wait` for a connection to close.
    fn make_room(
        &self,
        table: &mut MutexGuard<'_, Table>,
        peer: Option<IpAddr>,
        young_too: bool,
        wait: Duration,
    ) {
        let Some(victim) = table.victim(peer, young_too) else { return };
        table.shed(victim);
        let (before, until) = (table.closed, Instant::now() + wait);
        while table.closed == before && !self.closed.wait_until(table, until).timed_out() {}
    }

    /// Marks connection `id` as in `phase` from now.
    fn enter(&self, id: u64, phase: Phase) {
        if let Some(entry) = self.table.lock().entries.get_mut(&id) {
            entry.phase = phase;
            entry.since = Instant::now();
        }
    }
}

/// A connection being served. Its socket is dropped (closed) before its seat is given back,
/// so that a connection counted gone holds no file descriptor.
pub struct Conn {
    pub stream: Arc<TcpStream>,
    /// Its client's address.
    pub peer: IpAddr,
    shed: Arc<AtomicBool>,
    seat: Seat,
}

impl Conn {
    /// Marks the connection as in `phase` from now.
    pub fn enter(&self, phase: Phase) {
        self.seat.connections.enter(self.seat.id, phase);
    }

    /// Whether it was shed (its socket is shut down).
    pub fn is_shed(&self) -> bool {
        self.shed.load(Ordering::Relaxed)
    }
}

/// A connection's place in the table, given back when dropped.
struct Seat {
    id: u64,
    connections: Arc<Connections>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.connections.table.lock().remove(self.id);
        self.connections.closed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;

    use super::*;

    /// A listener and a way to make connections to it, admitted as from `peer`.
    struct Bench {
        listener: TcpListener,
        connections: Arc<Connections>,
        clients: Vec<TcpStream>,
    }

    impl Bench {
        fn new(max: usize) -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            Bench { listener, connections: Arc::new(Connections::new(max)), clients: Vec::new() }
        }

        /// Connects a client (kept at `self.clients[n]`) and admits it as from `peer`.
        fn connect(&mut self, peer: [u8; 4]) -> Result<Conn, TcpStream> {
            let addr = self.listener.local_addr().expect("addr");
            self.clients.push(TcpStream::connect(addr).expect("connect"));
            let (stream, _) = self.listener.accept().expect("accept");
            self.connections.admit(stream, IpAddr::from(peer), Duration::from_millis(50))
        }

        /// Whether the server side shut client `n` down.
        fn was_shed(&self, n: usize) -> bool {
            let client = &self.clients[n];
            client.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
            matches!((&*client).read(&mut [0_u8; 1]), Ok(0))
        }
    }

    const A: [u8; 4] = [10, 0, 0, 1];
    const B: [u8; 4] = [10, 0, 0, 2];
    const C: [u8; 4] = [10, 0, 0, 3];
    const D: [u8; 4] = [10, 0, 0, 4];

    #[test]
    fn idle_connections_go_before_writing_ones_and_young_ones_are_kept() {
        let mut bench = Bench::new(4);
        let mut conns = Vec::new();
        for phase in [Phase::Writing, Phase::Waiting] {
            let conn = bench.connect(A).map_err(drop).expect("admitted");
            conn.enter(phase);
            conns.push(conn);
        }
        conns.push(bench.connect(B).map_err(drop).expect("admitted"));
        conns.push(bench.connect(C).map_err(drop).expect("admitted"));
        // Full, and everyone young: the new one is refused, nobody is shed.
        assert!(bench.connect(D).is_err());
        assert!((0..4).all(|n| !bench.was_shed(n)));
        std::thread::sleep(YOUNG);
        // Full: an idle one of A (which has the most) goes, not the older writing one.
        assert!(bench.connect(D).is_err(), "the shed one is still served here");
        assert!(bench.was_shed(1), "A's idle one was shed");
        assert!(!bench.was_shed(0) && !bench.was_shed(2) && !bench.was_shed(3));
        drop(conns.remove(1));
        conns.push(bench.connect(D).map_err(drop).expect("room now"));
    }

    #[test]
    fn a_peer_past_half_the_connections_sheds_its_own() {
        let mut bench = Bench::new(4);
        let b = bench.connect(B).map_err(drop).expect("admitted");
        let first = bench.connect(A).map_err(drop).expect("admitted");
        let _second = bench.connect(A).map_err(drop).expect("admitted");
        std::thread::sleep(YOUNG);
        assert!(bench.connect(A).is_err(), "A is at its half");
        assert!(bench.was_shed(1), "A's oldest went");
        assert!(!bench.was_shed(0), "B's is kept");
        drop((first, b));
    }

    #[test]
    fn making_an_answer_and_live_streams_are_never_shed() {
        let mut bench = Bench::new(2);
        let conns: Vec<_> = [Phase::Handling, Phase::Live]
            .into_iter()
            .map(|phase| {
                let conn = bench.connect(if phase == Phase::Live { A } else { B });
                let conn = conn.map_err(drop).expect("admitted");
                conn.enter(phase);
                conn
            })
            .collect();
        std::thread::sleep(YOUNG);
        assert!(bench.connect(C).is_err());
        assert!(!bench.was_shed(0) && !bench.was_shed(1));
        drop(conns);
    }
}
