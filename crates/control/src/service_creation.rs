//! Making services (spec 2.11, 4.10): the rules of a creation, before the controller
//! ([`crate::services`]) brings what it made up.
//!
//! - An ordinary user creates services for themselves only; a caller whose permission
//!   covers everyone, for anyone.
//! - With accounting enabled, the account named must exist and have the user as a
//!   member (anyone's, for a caller over everyone).
//! - The entries are expanded as a whole tree (`drover_domain::service::expand`: the stored
//!   templates, their included services, `extends`, dependencies), every rule they break
//!   named at once.
//! - Every VM service's image must exist and support VMs.
//! - An ordinary user holds at most `user_service_max_count` services, these included
//!   (counted as they are stored).
//! - The new tree is announced (`servicecreate`) and the controller woken; it sets the
//!   tree up from its start date on.

use std::sync::Arc;

use drover_accounting::Ledger;
use drover_cloud::{
    CloudError, Images, NewServices, ServiceRecords, ServiceTemplates, StoredService,
};
use drover_domain::dates::{Timestamp, format_utc};
use drover_domain::service::{self, ExpandedService, ServiceEntry};
use drover_domain::service_template::{Refusal, ServiceType, TemplateKey, TemplateRef};
use drover_monitor::EventRecorder;
use drover_monitor::event::Event;
use tokio::sync::Notify;

use crate::services::service_event;

/// The first message of a refused creation.
pub const NOT_CREATED: &str = "The service was not created";

/// A creation, as read from its body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Creation {
    /// Whose services they are (none: the caller's).
    pub user: Option<String>,
    pub account: Option<String>,
    /// Epoch seconds: when setup may begin.
    pub start: Option<i64>,
    /// Seconds the tree lasts.
    pub duration: Option<i64>,
    pub entries: Vec<ServiceEntry>,
}

/// Who creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creator {
    /// The effective user (after any proxying).
    pub user: String,
    /// Who the services record as their creator: the one who logged in.
    pub identity: String,
    /// Whether their permission covers everyone.
    pub over_all: bool,
}

/// Why a creation (or an expansion) was refused.
#[derive(Debug)]
pub enum CreationError {
    /// `creator` may not create services for `user` (403).
    Forbidden { creator: String, user: String },
    /// The request breaks a rule (400): the messages, the summary first.
    Refused(Vec<String>),
    /// The stores refused or failed, as they say.
    Cloud(CloudError),
    /// The work could not be run (a bug).
    Internal(String),
}

impl From<CloudError> for CreationError {
    fn from(error: CloudError) -> Self {
        CreationError::Cloud(error)
    }
}

/// What a creation reads and writes.
pub struct ServiceMaker {
    pub records: Arc<ServiceRecords>,
    pub templates: Arc<ServiceTemplates>,
    pub images: Arc<Images>,
    /// The ledger, when there is one (accounts are checked where it is enabled).
    pub ledger: Option<Arc<Ledger>>,
    pub events: EventRecorder,
    /// Notified once the services are stored: the controller's wake.
    pub wake: Arc<Notify>,
    /// The most services an ordinary user may have at once.
    pub user_service_max_count: usize,
}

impl ServiceMaker {
    /// Checks `creation` by `creator`, stores the tree it makes and announces it; the
    /// top-level service.
    pub async fn create(
        &self,
        creation: Creation,
        creator: Creator,
    ) -> Result<StoredService, CreationError> {
        let user = creation.user.unwrap_or_else(|| creator.user.clone());
        if user != creator.user && !creator.over_all {
            return Err(CreationError::Forbidden {
                creator: creator.user,
                user,
            });
        }
        self.check_account(&user, creation.account.as_deref(), creator.over_all)?;
        let expanded = expand(&self.templates, creation.entries, NOT_CREATED).await?;
        self.check_images(&expanded).await?;
        let new = NewServices {
            user,
            account: creation.account,
            created_by: creator.identity,
            start_requested: creation
                .start
                .and_then(|s| Timestamp::from_second(s).ok())
                .map(format_utc),
            starts_at: creation.start.unwrap_or(0),
            duration: creation.duration,
            limit: (!creator.over_all).then_some(self.user_service_max_count),
        };
        let records = self.records.clone();
        let top = blocking(move || records.create(&expanded, &new)).await?;
        let message = format!(
            "Service {} was created for {}",
            top.value.name, top.value.user
        );
        self.announce(&top, "servicecreate", "Service Create", "INFO", &message);
        self.wake.notify_one();
        Ok(top)
    }

    /// With accounting enabled, the account must exist and have the user as a member.
    fn check_account(
        &self,
        user: &str,
        account: Option<&str>,
        over_all: bool,
    ) -> Result<(), CreationError> {
        let (Some(ledger), Some(account)) = (&self.ledger, account) else {
            return Ok(());
        };
        if !ledger.enabled() {
            return Ok(());
        }
        let refused = |reason: String| CreationError::Refused(vec![NOT_CREATED.into(), reason]);
        match ledger.account(account) {
            Some(a) if over_all || a.has_member(user) => Ok(()),
            Some(_) => Err(refused(format!(
                "account: {user} is not a member of the account '{account}'"
            ))),
            None => Err(refused(format!("account: there is no account '{account}'"))),
        }
    }

    /// Every VM service's image must exist and support VMs.
    async fn check_images(&self, expanded: &[ExpandedService]) -> Result<(), CreationError> {
        let names: Vec<String> = expanded
            .iter()
            .filter(|p| p.kind == ServiceType::Vm)
            .filter_map(|p| {
                p.attributes
                    .get("sched")?
                    .pointer("/job/image")?
                    .as_str()
                    .map(String::from)
            })
            .collect();
        let images = self.images.clone();
        let problems = blocking(move || {
            let mut problems = Vec::new();
            for name in names {
                match images.get(&name) {
                    Ok(image) if image.value.supports_virtual_machine => {}
                    Ok(_) => problems.push(format!(
                        "attributes.sched.job.image: the image '{name}' does not support virtual machines"
                    )),
                    Err(CloudError::NotFound(_)) => problems.push(format!(
                        "attributes.sched.job.image: no image '{name}' (GET /rest/images lists them)"
                    )),
                    Err(e) => return Err(e),
                }
            }
            Ok(problems)
        })
        .await?;
        if problems.is_empty() {
            return Ok(());
        }
        let mut messages = vec![NOT_CREATED.to_string()];
        messages.extend(problems);
        Err(CreationError::Refused(messages))
    }

    /// Records an event about a service (in both vocabularies, as for VMs), without
    /// holding up the creation.
    fn announce(&self, stored: &StoredService, v1: &str, v3: &str, severity: &str, message: &str) {
        let events: Vec<Event> = [v1, v3]
            .into_iter()
            .map(|kind| service_event(stored, kind, severity, message))
            .collect();
        let recorder = self.events.clone();
        tokio::spawn(async move {
            let _ = recorder.record(events).await;
        });
    }
}

/// The services `entries` make (the top-level one first), with the stored templates;
/// refused (`summary` first) with every rule they break.
pub async fn expand(
    templates: &Arc<ServiceTemplates>,
    entries: Vec<ServiceEntry>,
    summary: &str,
) -> Result<Vec<ExpandedService>, CreationError> {
    let templates = templates.clone();
    let expanded = blocking(move || {
        let all = templates.all()?;
        let lookup = |key: &TemplateKey| {
            all.iter()
                .find(|t| match key {
                    TemplateKey::Id(id) => &t.id == id,
                    TemplateKey::Name(name) => &t.value.name == name,
                })
                .map(|t| {
                    let reference = TemplateRef {
                        id: t.id.clone(),
                        name: t.value.name.clone(),
                    };
                    (reference, t.value.clone())
                })
        };
        Ok::<_, CloudError>(service::expand(&entries, &lookup))
    })
    .await?;
    expanded.map_err(|problems| CreationError::Refused(Refusal::messages(summary, &problems)))
}

/// Runs blocking work of the stores off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, CloudError> + Send + 'static,
) -> Result<T, CreationError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| CreationError::Internal(e.to_string()))?
        .map_err(CreationError::from)
}
