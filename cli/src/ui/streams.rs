//! The live streams the dashboard has open (`live.rs` writes them): bounded at
//! [`STREAMS_MAX`] at once and [`STREAMS_PER_PEER`] of one client (IP address). A new stream
//! past either bound ends the oldest stream of the client with the most (its socket is shut
//! down at once, its thread sees the flag): a browser reconnects with `Last-Event-ID` and
//! loses nothing. Apart from `live.rs`, so that the state every request shares
//! (`state::Ui`) holds it without naming the module that writes streams.

use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

/// Live streams open at once.
pub const STREAMS_MAX: usize = 16;
/// Live streams of one client (IP address) open at once.
pub const STREAMS_PER_PEER: usize = 8;

/// The live streams open now.
#[derive(Default)]
pub struct Streams {
    open: Mutex<Vec<Open>>,
    next_id: AtomicU64,
}

/// An open stream: its client, when it began, whether it was ended, and its socket once the
/// server writes to it.
struct Open {
    id: u64,
    peer: Option<IpAddr>,
    began: Instant,
    ended: Arc<AtomicBool>,
    socket: Option<Weak<TcpStream>>,
}

impl Open {
    /// Ends it: its thread sees the flag within a `TICK`, its socket is shut down at once.
    fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
        if let Some(socket) = self.socket.as_ref().and_then(Weak::upgrade) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl Streams {
    /// A place for a stream of `peer`, ending the oldest stream of `peer` when it has
    /// `STREAMS_PER_PEER`, or else of the client with the most when there are `STREAMS_MAX`.
    pub fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Slot {
        let mut open = self.open.lock();
        let of =
            |open: &[Open], peer: Option<IpAddr>| open.iter().filter(|o| o.peer == peer).count();
        let crowded = if of(&open, peer) >= STREAMS_PER_PEER {
            Some(peer)
        } else if open.len() >= STREAMS_MAX {
            let most = open.iter().max_by_key(|o| (of(&open, o.peer), std::cmp::Reverse(o.began)));
            most.map(|o| o.peer)
        } else {
            None
        };
        if let Some(crowded) = crowded {
            let oldest = open.iter().enumerate().filter(|(_, o)| o.peer == crowded);
            if let Some((at, _)) = oldest.min_by_key(|(_, o)| o.began) {
                open.swap_remove(at).end();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let ended = Arc::new(AtomicBool::new(false));
        let entry =
            Open { id, peer, began: Instant::now(), ended: Arc::clone(&ended), socket: None };
        open.push(entry);
        Slot { streams: Arc::clone(self), id, ended }
    }

    /// Streams open now.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.open.lock().len()
    }
}

/// A place among the open streams, given back when dropped.
pub struct Slot {
    streams: Arc<Streams>,
    id: u64,
    ended: Arc<AtomicBool>,
}

impl Slot {
    /// Whether another stream ended this one to make room.
    pub fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Names the socket the stream is written to, which is shut down should the stream be
    /// ended to make room (then at once, if it was already).
    pub fn attach(&self, socket: &Arc<TcpStream>) {
        let mut open = self.streams.open.lock();
        match open.iter_mut().find(|o| o.id == self.id) {
            Some(entry) => entry.socket = Some(Arc::downgrade(socket)),
            None => drop(socket.shutdown(Shutdown::Both)),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.streams.open.lock().retain(|o| o.id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_stream_ends_the_oldest_of_the_client_with_the_most() {
        let streams = Arc::new(Streams::default());
        let (a, b) = (Some(IpAddr::from([10, 0, 0, 1])), Some(IpAddr::from([10, 0, 0, 2])));
        let of_a: Vec<Slot> = (0..STREAMS_PER_PEER).map(|_| streams.take(a)).collect();
        // A's next one ends A's oldest; it never has more than its share.
        let newest_a = streams.take(a);
        assert!(of_a[0].ended() && !of_a[1].ended() && !newest_a.ended());
        assert_eq!(streams.count(), STREAMS_PER_PEER);
        let of_b: Vec<Slot> =
            (0..STREAMS_MAX - STREAMS_PER_PEER).map(|_| streams.take(b)).collect();
        assert_eq!(streams.count(), STREAMS_MAX);
        // Full: a third client's stream ends the oldest of one with the most (A and B tie at
        // 8: the one whose oldest is oldest goes first).
        let c = streams.take(Some(IpAddr::from([10, 0, 0, 3])));
        assert!(of_a[1].ended(), "A's oldest still open went");
        assert!(!c.ended() && of_b.iter().all(|slot| !slot.ended()));
        assert_eq!(streams.count(), STREAMS_MAX);
        drop((of_a, of_b, newest_a, c));
        assert_eq!(streams.count(), 0, "every slot is given back");
    }
}
