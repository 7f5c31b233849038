//! The connection layer: TCP and TLS (RFC 3261 §18.3, §26.2) served by a
//! few reactor threads (mio, edge-triggered epoll), none per connection.
//!
//! Each connection lives on one reactor, which alone reads it, frames
//! its SIP messages (sip-core) and hands them to that reactor's core —
//! or, once the connection is busy (a trunk), to the core of the reactor
//! each message's Call-ID hashes to (`spread`).
//! Anyone may send on it: a send appends to the connection's bounded
//! outbound queue (for TLS, rustls's own record buffer under a limit) and
//! writes what the socket takes without blocking; the reactor writes the
//! rest when the socket drains. A peer that lets its queue fill is closed
//! as a slow reader, so no peer can stall a worker or another peer. A
//! read's answers are written together after it, and a busy connection's
//! answers from other reactors by its own reactor (`outbox`).
//!
//! Deadlines are absolute and checked on every reactor turn: a TLS
//! handshake must finish within its timeout of the connection opening, a
//! SIP message within its timeout of its first byte, and a silent
//! connection is closed after the idle timeout. Connections are bounded
//! globally (sized from the file-descriptor limit) and per source IP, and
//! each reactor accepts a bounded burst per turn, so a connect storm
//! cannot starve established phones.
//!
//! Memory per idle connection is the socket, a small state record and,
//! for TLS, the rustls session: read buffers belong to the reactor, and a
//! connection holds bytes only while a message is incomplete or output
//! is queued.

mod accept;
mod hub;
mod outbox;
mod reactor;
pub mod shared;
mod spread;
mod ws;
