//! The datastore's health, as the diagnostics resources report it.

use std::sync::Arc;
use std::time::Duration;

use drover_store::{DocumentStore, StoreInfo};

/// The datastore's description, or why it cannot be had (down, or no answer `within`).
/// The store is asked off the async runtime.
pub async fn probe_store(
    store: Arc<dyn DocumentStore>,
    within: Duration,
) -> Result<StoreInfo, String> {
    let probe = tokio::task::spawn_blocking(move || store.describe());
    match tokio::time::timeout(within, probe).await {
        Ok(Ok(Ok(info))) => Ok(info),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(e)) => Err(format!("the datastore probe failed: {e}")),
        Err(_) => Err(format!(
            "the datastore did not answer within {} s",
            within.as_secs()
        )),
    }
}
