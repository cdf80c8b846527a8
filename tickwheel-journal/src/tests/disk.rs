//! A simulated disk under redb: writes land in a page cache, `sync_data` makes them
//! durable, and a power loss keeps only what is durable — or that plus a random subset of
//! the cached pages, as a kernel that wrote some dirty pages back on its own leaves it.

use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redb::{BackendError, StorageBackend};

/// The unit a disk writes atomically (a torn write keeps some pages of a write, not all).
pub(crate) const PAGE: u64 = 4096;

/// What a power loss keeps of the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// Nothing that was not synced.
    Everything,
    /// Each unsynced page independently, with probability one half (and the file length
    /// either the synced one or the cached one).
    SomePages,
}

#[derive(Debug)]
struct State {
    /// What survives a power loss.
    durable: Vec<u8>,
    /// What reads see: the durable image with every write since the last sync applied.
    cache: Vec<u8>,
    /// Pages of `cache` that differ from `durable` (or may).
    dirty: BTreeSet<u64>,
    /// Backend calls so far; the power fails at call `fail_at`.
    calls: u64,
    fail_at: u64,
    loss: Loss,
    rng: StdRng,
    /// The image a power loss at `fail_at` left, once it happened.
    after_loss: Option<Vec<u8>>,
}

/// A disk that loses power at its `fail_at`-th call while the program goes on using it
/// (the program's later writes are what it did not live to do); [`Disk::after_loss`] is the
/// image a machine would boot with. Clones share the disk.
#[derive(Debug, Clone)]
pub(crate) struct Disk(Arc<Mutex<State>>);

impl Disk {
    /// A disk holding `image`, losing power at call `fail_at` (`u64::MAX`: never).
    pub(crate) fn new(image: Vec<u8>, fail_at: u64, loss: Loss, seed: u64) -> Self {
        Disk(Arc::new(Mutex::new(State {
            cache: image.clone(),
            durable: image,
            dirty: BTreeSet::new(),
            calls: 0,
            fail_at,
            loss,
            rng: StdRng::seed_from_u64(seed),
            after_loss: None,
        })))
    }

    /// The image the power loss left, if it happened.
    pub(crate) fn after_loss(&self) -> Option<Vec<u8>> {
        self.0.lock().after_loss.clone()
    }

    /// Backend calls so far.
    pub(crate) fn calls(&self) -> u64 {
        self.0.lock().calls
    }
}

impl State {
    fn tick(&mut self) {
        self.calls += 1;
        if self.calls == self.fail_at {
            let image = self.lose_power();
            self.after_loss = Some(image);
        }
    }

    fn lose_power(&mut self) -> Vec<u8> {
        let mut image = self.durable.clone();
        if self.loss == Loss::SomePages {
            if self.rng.gen_bool(0.5) {
                image.resize(self.cache.len(), 0);
            }
            let pages: Vec<u64> = self.dirty.iter().copied().collect();
            for page in pages {
                if !self.rng.gen_bool(0.5) {
                    continue;
                }
                let start = (page * PAGE) as usize;
                let end = (start + PAGE as usize)
                    .min(self.cache.len())
                    .min(image.len());
                if start < end {
                    image[start..end].copy_from_slice(&self.cache[start..end]);
                }
            }
        }
        image
    }
}

fn out_of_range() -> BackendError {
    BackendError::Io(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "read past the end of the simulated disk",
    ))
}

impl StorageBackend for Disk {
    fn len(&self) -> Result<u64, BackendError> {
        Ok(self.0.lock().cache.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendError> {
        let s = self.0.lock();
        let start = usize::try_from(offset).map_err(|_| out_of_range())?;
        let end = start.checked_add(out.len()).ok_or_else(out_of_range)?;
        out.copy_from_slice(s.cache.get(start..end).ok_or_else(out_of_range)?);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), BackendError> {
        let mut s = self.0.lock();
        s.tick();
        let old = s.cache.len() as u64;
        let len_usize = usize::try_from(len).map_err(|_| out_of_range())?;
        s.cache.resize(len_usize, 0);
        let (lo, hi) = (old.min(len), old.max(len));
        for page in lo / PAGE..hi.div_ceil(PAGE) {
            s.dirty.insert(page);
        }
        Ok(())
    }

    fn sync_data(&self) -> Result<(), BackendError> {
        let mut s = self.0.lock();
        s.tick();
        let s = &mut *s;
        s.durable.resize(s.cache.len(), 0);
        for page in std::mem::take(&mut s.dirty) {
            let start = (page * PAGE) as usize;
            let end = (start + PAGE as usize).min(s.cache.len());
            if start < end {
                s.durable[start..end].copy_from_slice(&s.cache[start..end]);
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendError> {
        let mut s = self.0.lock();
        s.tick();
        let start = usize::try_from(offset).map_err(|_| out_of_range())?;
        let end = start.checked_add(data.len()).ok_or_else(out_of_range)?;
        if end > s.cache.len() {
            s.cache.resize(end, 0);
        }
        s.cache[start..end].copy_from_slice(data);
        if !data.is_empty() {
            for page in offset / PAGE..=(end as u64 - 1) / PAGE {
                s.dirty.insert(page);
            }
        }
        Ok(())
    }
}
