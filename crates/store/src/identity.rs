//! The service's identity: eight random hexadecimal digits written once in the store at
//! first start, and the same for every server sharing that store. It names what the
//! service leaves outside itself (its jobs in a Slurm cluster other services share), so
//! that two services never take each other's for their own.

use serde_json::json;

use crate::{CollectionSpec, DocumentStore, Result, StoreError};

const COLLECTION: &str = "service_identity";
const ID: &str = "identity";

/// The store's identity, made (and written) the first time it is asked for. Two servers
/// starting together on one store agree: the second's insert conflicts, and it reads
/// the first's.
pub fn service_identity(store: &dyn DocumentStore) -> Result<String> {
    store.ensure_collection(&CollectionSpec::new(COLLECTION))?;
    for _ in 0..2 {
        if let Some(found) = read(store)? {
            return Ok(found);
        }
        match store.insert(COLLECTION, ID, None, json!({ "identity": fresh()? })) {
            Ok(_) | Err(StoreError::Conflict(_)) => continue,
            Err(other) => return Err(other),
        }
    }
    read(store)?.ok_or_else(|| StoreError::Invalid("the service identity was not kept".into()))
}

fn read(store: &dyn DocumentStore) -> Result<Option<String>> {
    let Some(document) = store.get(COLLECTION, ID)? else {
        return Ok(None);
    };
    let body = document.body;
    match body["identity"].as_str() {
        Some(text) if text.len() == 8 && text.bytes().all(|b| b.is_ascii_hexdigit()) => {
            Ok(Some(text.to_string()))
        }
        _ => Err(StoreError::Invalid(format!(
            "the service identity is not 8 hexadecimal digits: {body}"
        ))),
    }
}

/// Eight hexadecimal digits from the system's random source.
fn fresh() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| StoreError::Backend(format!("cannot read /dev/urandom: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::SqliteStore::open(&dir.path().join("s.db")).unwrap();
        let first = service_identity(&store).unwrap();
        assert_eq!(first.len(), 8);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(service_identity(&store).unwrap(), first);
        drop(store);
        let again = crate::SqliteStore::open(&dir.path().join("s.db")).unwrap();
        assert_eq!(service_identity(&again).unwrap(), first);
        let other = tempfile::tempdir().unwrap();
        let elsewhere = crate::SqliteStore::open(&other.path().join("s.db")).unwrap();
        assert_ne!(service_identity(&elsewhere).unwrap(), first);
    }
}
