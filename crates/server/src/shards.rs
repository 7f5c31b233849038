//! The workers' shared tables, below both layers.
//!
//! Several UDP workers and TCP reactors decide at once, so the tables they
//! share (location, nonces, sources, transactions, pseudonyms) need locks.
//! The protocol core owns what a table holds and how it changes; the
//! locking is here, in one place, so [`crate::proto`] names no lock type and
//! its tests can run one table without threads. A lock is held only for
//! the span of a decision on one shard and never across a call into
//! another table. A panic while holding one poisons nothing: the next user
//! takes the data as it is (every change here is applied before anything
//! that can panic, so no table is left half-changed).

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, RwLock};

/// A table split into independently locked shards.
#[derive(Debug)]
pub struct Shards<T> {
    shards: Box<[Mutex<T>]>,
}

impl<T> Shards<T> {
    /// `n` shards (at least one), each made by `make`.
    pub fn new(n: usize, mut make: impl FnMut() -> T) -> Self {
        Self {
            shards: (0..n.max(1)).map(|_| Mutex::new(make())).collect(),
        }
    }

    /// How many shards there are.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Never: there is always one shard at least.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Shard `i` (modulo the count), held until the guard drops.
    pub fn lock(&self, i: usize) -> impl DerefMut<Target = T> + '_ {
        let m = &self.shards[i % self.shards.len()];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every shard in turn, each held only while the iterator's item lives.
    pub fn each(&self) -> impl Iterator<Item = impl DerefMut<Target = T> + '_> + '_ {
        self.shards
            .iter()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<T: Default> Default for Shards<T> {
    /// One shard: a single lock.
    fn default() -> Self {
        Self::new(1, T::default)
    }
}

/// A table split into shards that many may read at once.
#[derive(Debug)]
pub struct ReadShards<T> {
    shards: Box<[RwLock<T>]>,
}

impl<T> ReadShards<T> {
    /// `n` shards (at least one), each made by `make`.
    pub fn new(n: usize, mut make: impl FnMut() -> T) -> Self {
        Self {
            shards: (0..n.max(1)).map(|_| RwLock::new(make())).collect(),
        }
    }

    /// How many shards there are.
    pub fn len(&self) -> usize {
        self.shards.len()
    }

    /// Never: there is always one shard at least.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Shard `i` (modulo the count) to read.
    pub fn read(&self, i: usize) -> impl Deref<Target = T> + '_ {
        let m = &self.shards[i % self.shards.len()];
        m.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Shard `i` (modulo the count) to change.
    pub fn write(&self, i: usize) -> impl DerefMut<Target = T> + '_ {
        let m = &self.shards[i % self.shards.len()];
        m.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Every shard in turn, to read.
    pub fn reads(&self) -> impl Iterator<Item = impl Deref<Target = T> + '_> + '_ {
        self.shards
            .iter()
            .map(|m| m.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every shard in turn, to change.
    pub fn writes(&self) -> impl Iterator<Item = impl DerefMut<Target = T> + '_> + '_ {
        self.shards
            .iter()
            .map(|m| m.write().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<T: Default> Default for ReadShards<T> {
    /// One shard.
    fn default() -> Self {
        Self::new(1, T::default)
    }
}

/// One value that changes rarely and is read on every request (the users,
/// the trusted sources): readers take the current one and keep it for as
/// long as they need it; a change replaces it for later readers.
#[derive(Debug, Default)]
pub struct Current<T> {
    value: RwLock<Arc<T>>,
}

impl<T> Current<T> {
    /// Starts with `value`.
    pub fn new(value: T) -> Self {
        Self {
            value: RwLock::new(Arc::new(value)),
        }
    }

    /// The value now.
    pub fn get(&self) -> Arc<T> {
        self.value.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Replaces the value.
    pub fn set(&self, value: T) {
        *self.value.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_picked_modulo_their_count_and_seen_in_turn() {
        let s = Shards::new(4, || 0u32);
        *s.lock(1) += 1;
        *s.lock(5) += 1;
        assert_eq!(*s.lock(1), 2);
        assert_eq!(s.each().map(|v| *v).sum::<u32>(), 2);
        assert_eq!(Shards::<u8>::default().len(), 1);
        let r = ReadShards::new(0, Vec::<u8>::new);
        assert_eq!(r.len(), 1);
        r.write(7).push(1);
        assert_eq!(r.read(0).len(), 1);
        assert_eq!(r.reads().map(|v| v.len()).sum::<usize>(), 1);
    }

    #[test]
    fn a_reader_keeps_the_value_it_took() {
        let c = Current::new(vec![1]);
        let before = c.get();
        c.set(vec![2]);
        assert_eq!(*before, [1]);
        assert_eq!(*c.get(), [2]);
    }
}
