//! `cache()`: examples decoded once, kept in memory, shared by every iterator of a dataset.
//!
//! Keyed by source index (sources are random access), so a cached dataset can be shuffled,
//! sharded and resumed like any other; clones of a dataset share one cache.

use super::schema::Row;
use std::sync::OnceLock;

#[derive(Debug)]
pub(crate) struct CacheStore {
    rows: Vec<OnceLock<Row>>,
}

impl CacheStore {
    pub fn new(len: u64) -> Self {
        CacheStore { rows: (0..len).map(|_| OnceLock::new()).collect() }
    }

    pub fn get(&self, id: u64) -> Option<&Row> {
        self.rows.get(id as usize)?.get()
    }

    pub fn put(&self, id: u64, row: &Row) {
        if let Some(slot) = self.rows.get(id as usize) {
            let _ = slot.set(row.clone());
        }
    }
}
