//! Running one message through the core: what it asks to be stored is
//! stored before the answer it guards is released, a change that meets
//! another in flight is handed in again, and events are logged.

use std::net::SocketAddr;

use std::sync::{Arc, MutexGuard};

use crate::config::RedisSettings;
use crate::io::journal::{Journal, SharedJournal};
use crate::io::redis::{RedisState, RedisStore};
use crate::io::sinks::Sinks;
use crate::proto::busy::Parking;
use crate::proto::core::{Core, Event, Reply, Transport};
use crate::proto::location::{Record, StoreError};
use crate::proto::names::Key as NameKey;
use crate::proto::parked::Parked;
use crate::proto::persist::Batch;
use crate::proto::shared::Now;

/// Where binding changes are stored before the answers they guard go.
pub trait Store {
    /// Stores `records`; `Ok` once they are as durable as the store
    /// makes them.
    fn store(&mut self, records: &[Record]) -> Result<(), StoreError>;

    /// Stores the records of several changes, all or none (one round
    /// trip where the store allows it).
    fn store_all(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        for c in changes {
            self.store(c)?;
        }
        Ok(())
    }

    /// Whether [`send_all`](Self::send_all) returns before the changes
    /// are stored (a round trip to another process), so that the caller
    /// can work meanwhile.
    fn overlaps(&self) -> bool {
        false
    }

    /// Starts storing the records of several changes, all or none; the
    /// outcome comes from [`receive`](Self::receive). Stores that do not
    /// [`overlap`](Self::overlaps) store them here.
    fn send_all(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        self.store_all(changes)
    }

    /// Whether what [`send_all`](Self::send_all) started was stored.
    fn receive(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl Store for Journal {
    fn store(&mut self, records: &[Record]) -> Result<(), StoreError> {
        self.append(records).map_err(StoreError::Journal)
    }
}

impl Store for RedisStore {
    fn store(&mut self, records: &[Record]) -> Result<(), StoreError> {
        RedisStore::store(self, &[records])
    }
}

/// Where a driver thread stores binding changes.
#[derive(Debug)]
pub enum Storage {
    /// Memory only.
    Memory,
    /// A journal.
    Journal(SharedJournal),
    /// Redis.
    Redis(Box<RedisStore>),
    /// A Redis store that could not be set up: why, and the Retry-After.
    Broken(String, u32),
}

/// [`Storage`] held for a batch of messages.
pub enum Held<'a> {
    /// Memory only.
    Memory,
    /// The journal, locked: a compaction that rotates it waits until
    /// every change written to it is in memory.
    Journal(MutexGuard<'a, Journal>),
    /// Redis.
    Redis(&'a mut RedisStore),
    /// Refuses every change.
    Broken(&'a str, u32),
}

impl Storage {
    /// A Redis store for this node (`node`, registrations up to
    /// `max_expires` seconds): it connects on first use; one whose client
    /// cannot be made refuses every change (503) rather than lose it.
    pub fn redis(
        settings: &RedisSettings,
        node: Arc<str>,
        max_expires: u32,
        state: Arc<RedisState>,
    ) -> Self {
        match RedisStore::new(settings, node, max_expires, state) {
            Ok(r) => Storage::Redis(Box::new(r)),
            Err(e) => Storage::Broken(e, settings.retry_after),
        }
    }

    /// The same storage for another thread: the same journal, or a Redis
    /// store of its own (a connection each).
    pub fn another(&self) -> Self {
        match self {
            Storage::Memory => Storage::Memory,
            Storage::Journal(j) => Storage::Journal(j.clone()),
            Storage::Redis(r) => match r.another() {
                Ok(r) => Storage::Redis(Box::new(r)),
                Err((e, retry)) => Storage::Broken(e, retry),
            },
            Storage::Broken(e, retry) => Storage::Broken(e.clone(), *retry),
        }
    }

    /// Holds the storage for a batch.
    pub fn hold(&mut self) -> Held<'_> {
        match self {
            Storage::Memory => Held::Memory,
            Storage::Journal(j) => Held::Journal(j.lock().unwrap_or_else(|e| e.into_inner())),
            Storage::Redis(r) => Held::Redis(r),
            Storage::Broken(e, retry) => Held::Broken(e, *retry),
        }
    }
}

impl Held<'_> {
    /// Whether changes are worth storing a batch at a time: a round trip
    /// to another process each, or a wait for the disk each (a group
    /// commit, as databases do); a journal append to the page cache costs
    /// less than the bookkeeping.
    pub fn batches(&self) -> bool {
        match self {
            Held::Redis(_) => true,
            Held::Journal(j) => j.syncs_each_write(),
            Held::Memory | Held::Broken(..) => false,
        }
    }
}

impl Store for Held<'_> {
    fn overlaps(&self) -> bool {
        matches!(self, Held::Redis(_))
    }

    fn send_all(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        match self {
            Held::Redis(r) => r.send(changes),
            other => other.store_all(changes),
        }
    }

    fn receive(&mut self) -> Result<(), StoreError> {
        match self {
            Held::Redis(r) => r.receive(),
            _ => Ok(()),
        }
    }

    fn store_all(&mut self, changes: &[&[Record]]) -> Result<(), StoreError> {
        match self {
            Held::Redis(r) => r.store(changes),
            Held::Journal(j) => j.append_all(changes).map_err(StoreError::Journal),
            other => {
                for c in changes {
                    other.store(c)?;
                }
                Ok(())
            }
        }
    }

    fn store(&mut self, records: &[Record]) -> Result<(), StoreError> {
        match self {
            Held::Memory => Ok(()),
            Held::Journal(j) => j.store(records),
            Held::Redis(r) => Store::store(&mut **r, records),
            Held::Broken(e, retry_after) => Err(StoreError::Unavailable {
                reason: (*e).to_owned(),
                retry_after: *retry_after,
            }),
        }
    }
}

/// Times an operator's removal meets a change in flight on its AoR
/// (yielding in between) before it gives up. That change is one journal
/// append away from done.
pub const BUSY_TRIES: usize = 10_000;

/// Times a message that met a change in flight tries to park on its AoR
/// and finds the change finished before it gives up with 500 and
/// Retry-After (each try is another change begun meanwhile).
const PARK_TRIES: usize = 8;

/// Handles `input` from `src`; `store` keeps binding changes (`None`:
/// memory only). Returns what to do with `out` and leaves the core's
/// extra messages in [`Core::extra`].
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn handle(
    core: &mut Core,
    sinks: &Sinks,
    store: Option<&mut dyn Store>,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    out.clear();
    sinks.received(input, src, transport);
    let reply = core.handle(input, src, transport, now, out);
    settle(core, sinks, store, input, src, transport, now, out, reply)
}

/// Hands in again a message that waited on an answer from outside (it
/// was traced when it arrived): its next hop's name (`relayed` is
/// `None`), or a media relay's answer. It routes somewhere: a binding
/// change is not expected, and would be refused unstored.
pub fn hand_in(
    core: &mut Core,
    sinks: &Sinks,
    p: &Parked,
    relayed: Option<crate::proto::media::Outcome>,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    out.clear();
    let (input, src, transport) = (&p.message[..], p.src, p.arrived);
    let reply = match relayed {
        Some(o) => core.handle_relayed(input, src, transport, o, now, out),
        None => core.handle_again(input, src, transport, now, out),
    };
    settle(
        core,
        sinks,
        Some(&mut Refusing),
        input,
        src,
        transport,
        now,
        out,
        reply,
    )
}

/// [`hand_in`], and `sender` carries out what came of it (the core's
/// extra messages, then its reply).
pub fn hand_in_and_send(
    core: &mut Core,
    sender: &crate::io::send::Sender,
    p: &Parked,
    relayed: Option<crate::proto::media::Outcome>,
    out: &mut Vec<u8>,
) {
    let reply = hand_in(
        core,
        sender.sinks(),
        p,
        relayed,
        crate::io::clock::now(),
        out,
    );
    sender.send_all(core.extra());
    sender.reply(reply, out, core.sent_key());
    release_woken(core);
}

/// Messages woken on a thread that stores nothing (a name, media or
/// certificate hand-in) go to the next worker that looks.
fn release_woken(core: &mut Core) {
    if core.has_woken() {
        let woken: Vec<_> = std::iter::from_fn(|| core.next_woken()).collect();
        core.shared().location.release(woken);
    }
}

/// A name a core asked for is resolved (or known not to be: `to` empty)
/// at `now`: where it leads is recorded for `ttl` seconds, and every
/// request that waited on it is handed in again; `carry` carries out each
/// one's output (the core's extras, then the reply for `out`).
#[allow(clippy::too_many_arguments)]
pub fn resolved(
    core: &mut Core,
    sinks: &Sinks,
    key: &NameKey,
    to: Vec<SocketAddr>,
    ttl: u32,
    now: Now,
    out: &mut Vec<u8>,
    mut carry: impl FnMut(&Core, Reply, &[u8]),
) {
    let parked = core.shared().names.finish(key, to, ttl, now.mono);
    for p in parked {
        let reply = hand_in(core, sinks, &p, None, now, out);
        carry(core, reply, out);
    }
    release_woken(core);
}

/// Runs the transactions' timers due at `now`; what to send is left in
/// [`Core::extra`].
pub fn on_timer(core: &mut Core, sinks: &Sinks, now: Now) {
    core.on_timer(now);
    if core.has_events() {
        account(core, sinks);
    }
}

/// A store that stores nothing.
struct Refusing;

impl Store for Refusing {
    fn store(&mut self, _: &[Record]) -> Result<(), StoreError> {
        Err(StoreError::Unavailable {
            reason: "a change handed in after a name resolution".into(),
            retry_after: 5,
        })
    }
}

/// Carries a core's first answer through: handed in again while its AoR
/// is busy, stored before it is released, events logged.
#[inline]
#[allow(clippy::too_many_arguments)]
fn settle(
    core: &mut Core,
    sinks: &Sinks,
    store: Option<&mut dyn Store>,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
    mut reply: Reply,
) -> Reply {
    if reply == Reply::Retry {
        reply = retry(core, input, src, transport, now, out);
    }
    if reply == Reply::Persist {
        let stored = match store {
            Some(s) => s.store(core.to_persist()),
            None => Ok(()),
        };
        reply = core.persisted(stored, input, out);
    }
    if core.has_events() {
        account(core, sinks);
    }
    reply
}

/// Changes of one batch of messages, waiting to be stored together; their
/// answers go once they are (see [`handle_deferring`]). With a store that
/// [overlaps](Store::overlaps), one batch can be with the store while the
/// next is gathered ([`send`](Self::send)). The bookkeeping is
/// [`Batch`]'s; this moves its records to the store and back.
#[derive(Debug, Default)]
pub struct Deferred(Batch);

impl Deferred {
    /// Whether no change waits, nor is with the store.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many changes wait (not counting those with the store).
    pub fn len(&self) -> usize {
        self.0.waiting()
    }

    /// Whether a batch is with the store: [`receive`](Self::receive)
    /// finishes it.
    pub fn sending(&self) -> bool {
        self.0.sending()
    }

    /// Stores every change in one go (after the batch with the store, if
    /// any) and finishes each: stored, its answer is ready; not, its
    /// answer becomes the refusal.
    pub fn flush(&mut self, core: &mut Core, store: &mut dyn Store) {
        self.hand_over(core, store, false);
    }

    /// Hands the waiting changes to the store and returns without waiting
    /// for it when the store [overlaps](Store::overlaps) (else as
    /// [`flush`](Self::flush)); the batch sent before is finished first.
    pub fn send(&mut self, core: &mut Core, store: &mut dyn Store) {
        let overlap = store.overlaps();
        self.hand_over(core, store, overlap);
    }

    fn hand_over(&mut self, core: &mut Core, store: &mut dyn Store, overlap: bool) {
        self.receive(core, store);
        if self.0.waiting() == 0 {
            return;
        }
        let result = {
            let records = self.0.records();
            if overlap {
                store.send_all(&records)
            } else {
                store.store_all(&records)
            }
        };
        if overlap && result.is_ok() {
            // With the store until `receive`.
            self.0.sent();
            return;
        }
        self.0.finish_waiting(core, &result);
        if core.has_events() {
            log_events(core);
        }
    }

    /// Waits for the store's outcome of the batch sent, if any, and
    /// finishes its changes.
    pub fn receive(&mut self, core: &mut Core, store: &mut dyn Store) {
        if !self.0.sending() {
            return;
        }
        let result = store.receive();
        self.0.finish_sent(core, &result);
        if core.has_events() {
            log_events(core);
        }
    }

    /// Hands each answer of the finished changes to `send`, in order.
    pub fn send_ready(&mut self, send: impl FnMut(Reply, &[u8])) {
        self.0.send_ready(send);
    }
}

/// [`handle`], except that a binding change is not stored at once but
/// left in `deferred` with its answer (the reply is then
/// [`Reply::Drop`]): the driver stores a whole batch's changes with
/// [`Deferred::flush`] and sends what [`Deferred::send_ready`] gives. A
/// message whose AoR is busy waits for that change's commit, even when
/// the change is one of this batch's own ([`woken`]).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn handle_deferring(
    core: &mut Core,
    sinks: &Sinks,
    deferred: &mut Deferred,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    out.clear();
    sinks.received(input, src, transport);
    let mut reply = core.handle(input, src, transport, now, out);
    // A change in flight on its AoR (this batch's own, or another
    // worker's): it waits for that commit.
    if reply == Reply::Retry {
        reply = retry(core, input, src, transport, now, out);
    }
    if reply == Reply::Persist {
        if let Some(change) = core.take_change() {
            deferred.0.defer(change, input, out);
        }
        reply = Reply::Drop;
    }
    if core.has_events() {
        account(core, sinks);
    }
    reply
}

/// Removes the bindings of `aor` that `pick` selects, stored first exactly
/// as a REGISTER's removal is; how many went. The bindings are looked at
/// again once the AoR is held for the change, so a binding that a phone
/// renewed meanwhile (from another connection, say) stays.
pub fn remove_bindings(
    location: &crate::proto::location::MemoryLocation,
    store: &mut dyn Store,
    aor: &str,
    pick: &dyn Fn(&crate::proto::location::Binding) -> bool,
    now: u64,
) -> Result<usize, String> {
    use crate::proto::location::{ContactChange, Registration, UpdateError, UpdatePolicy};
    let reg = Registration {
        call_id: "",
        cseq: 0,
        source: SocketAddr::from(([0, 0, 0, 0], 0)),
        path: "",
        flow: None,
        node: "",
        now,
    };
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..BUSY_TRIES {
        location.lookup(aor, now, &mut before);
        let changes: Vec<ContactChange<'_>> = before
            .iter()
            .filter(|b| pick(b))
            .map(|b| ContactChange {
                contact: b.contact(),
                expires: 0,
                q: 1000,
                outbound: false,
                instance: "",
            })
            .collect();
        if changes.is_empty() {
            return Ok(0);
        }
        let prepared = match location.prepare(aor, &changes, false, &reg, &UpdatePolicy::default())
        {
            Ok(p) => p,
            Err(UpdateError::Busy(_)) => {
                std::thread::yield_now();
                continue;
            }
            Err(e) => return Err(e.to_string()),
        };
        location.lookup(aor, now, &mut after);
        if after != before {
            location.release(location.commit(prepared, false));
            continue;
        }
        let removed = prepared.records().len();
        let stored = store.store(prepared.records());
        // What waited meanwhile goes to the next worker that looks.
        location.release(location.commit(prepared, stored.is_ok()));
        return stored.map(|()| removed).map_err(|e| e.to_string());
    }
    Err("the address-of-record is being changed: try again".into())
}

/// Parks a message whose AoR is busy on it (its commit hands it back,
/// [`woken`]); when the change finished meanwhile, hands it in again
/// now. Gives up with 500 and Retry-After when too many wait there, or
/// when each try meets yet another change.
#[cold]
fn retry(
    core: &mut Core,
    input: &[u8],
    src: SocketAddr,
    transport: Transport,
    now: Now,
    out: &mut Vec<u8>,
) -> Reply {
    for _ in 0..PARK_TRIES {
        match core.park_busy(input, src, transport) {
            Parking::Parked => {
                out.clear();
                return Reply::Drop;
            }
            Parking::Full => break,
            Parking::Again => {}
        }
        out.clear();
        let reply = core.handle_again(input, src, transport, now, out);
        if reply != Reply::Retry {
            return reply;
        }
    }
    core.answer_busy(input, src, transport, out)
}

/// Hands in again, one by one, the messages that waited on an AoR whose
/// change this core finished (or that an operator's removal released),
/// storing what they change in `store`; `carry` carries out each one's
/// output (the core's extras, then the reply for `out`).
pub fn woken(
    core: &mut Core,
    sinks: &Sinks,
    store: &mut dyn Store,
    now: Now,
    out: &mut Vec<u8>,
    mut carry: impl FnMut(&Core, Reply, &[u8]),
) {
    while let Some(p) = core.next_woken() {
        out.clear();
        let (input, src, transport) = (&p.message[..], p.src, p.arrived);
        let reply = core.handle_again(input, src, transport, now, out);
        let reply = settle(
            core,
            sinks,
            Some(store),
            input,
            src,
            transport,
            now,
            out,
            reply,
        );
        carry(core, reply, out);
    }
}

/// Writes the call records the core made (before what made them is
/// sent) and logs what it reported.
#[cold]
pub fn account(core: &mut Core, sinks: &Sinks) {
    sinks.write_records(core);
    log_events(core);
}

/// Logs what the core reported (rate limited). Call records wait in the
/// core for [`account`]: only the paths that can end a call make them.
#[cold]
pub fn log_events(core: &mut Core) {
    for e in core.events() {
        match e {
            Event::AuthFailed { src, user } => crate::io::log::auth_failure(src, &user),
            Event::Oversize { what, dest, len } => crate::io::log::oversize(what, dest, len),
            Event::JournalFailed { aor, error } => crate::io::log::journal_error(&aor, &error),
            Event::Banned {
                source,
                scope,
                seconds,
            } => crate::io::log::banned(source, scope, seconds),
            Event::RelayDenied { src, target } => crate::io::log::relay_denied(src, &target),
            Event::RateLimited { src } => crate::io::log::rate_limited(src),
            Event::FlowFailed { aor, bindings } => crate::io::log::flow_failed(&aor, bindings),
            Event::MediaFailed { call_id, what } => crate::io::log::media_failed(&call_id, &what),
            Event::Stir { call_id, what } => crate::io::log::stir(&call_id, &what),
            Event::Unanswered { branch } => crate::io::log::unanswered(&branch),
        }
    }
}
