//! The process-wide registry behind `memory://NAME/...`.
//!
//! Tests and in-process multi-worker runs need the chief's checkpoints to be visible to an evaluator that
//! opened the "same" model dir independently, exactly as two processes share an S3 bucket. A map from
//! store name to one `InMemory` store gives that sharing without passing handles around.

use object_store::memory::InMemory;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

fn registry() -> &'static Mutex<HashMap<String, Arc<InMemory>>> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    STORES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The store registered under `name`, created empty on first use.
pub(crate) fn shared_memory_store(name: &str) -> Arc<InMemory> {
    // A poisoned lock only means another thread panicked while inserting; the map itself is still sound.
    let mut stores = registry().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    stores.entry(name.to_string()).or_insert_with(|| Arc::new(InMemory::new())).clone()
}

/// Forgets the store registered under `name` (its objects go once no model dir holds it). Returns whether
/// one was registered.
pub fn drop_memory_store(name: &str) -> bool {
    let mut stores = registry().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    stores.remove(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_name_same_store() {
        let a = shared_memory_store("registry-test-a");
        let b = shared_memory_store("registry-test-a");
        let c = shared_memory_store("registry-test-c");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(drop_memory_store("registry-test-a"));
        assert!(!Arc::ptr_eq(&a, &shared_memory_store("registry-test-a")));
    }
}
