//! The plugin types and plugins of a server, and their lifecycle (spec 2.14, 4.12, the
//! decisions page): both collections are held in memory (a site has tens of them) and
//! written through to the store on every change, so a restart finds them again.
//!
//! - A type is a compiled script (or the built-in `Native`); uploading one again replaces
//!   it and, with `reload`, configures again every started plugin of it.
//! - A plugin is configured on every start and configuration change (the type's
//!   `configure(config)`; an invalid configuration refuses the change), polled every
//!   `pollInterval` seconds while STARTED, given events while STARTED (not PAUSED), and
//!   ERRORED, with the reason kept, when a start or a poll fails.
//! - Calls into one plugin never overlap (one lock each); calls into different plugins
//!   may run at once, each on the caller's thread (callers run them off the async runtime).
//!
//! Every method blocks (store writes, script calls).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use drover_domain::dates::{self, Timestamp};
use drover_store::{CollectionSpec, DocumentStore, StoreError, Write};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::archive;
use crate::native;
use crate::script::{self, Description, Host, Limits, Script};

pub const PLUGIN_TYPES: &str = "plugin_types";
pub const PLUGINS: &str = "plugins";
/// The id of the built-in type.
pub const NATIVE: &str = "Native";

/// The configuration keys of the Native type: the URLs it reads and runs.
const NATIVE_URLS: [&str; 9] = [
    "getNodes",
    "getJobs",
    "getCluster",
    "jobStart",
    "jobCancel",
    "jobModify",
    "jobRequeue",
    "jobSuspend",
    "jobResume",
];

/// The default and the bounds of `pollInterval`, in seconds.
pub const DEFAULT_POLL_INTERVAL: u64 = 30;
pub const MIN_POLL_INTERVAL: u64 = 1;
pub const MAX_POLL_INTERVAL: u64 = 86_400;
/// The most bytes a plugin's own data (`data_set`) may take, as JSON.
pub const MAX_DATA_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum PluginState {
    Started,
    Stopped,
    Paused,
    Errored,
}

impl PluginState {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_uppercase().as_str() {
            "STARTED" => PluginState::Started,
            "STOPPED" => PluginState::Stopped,
            "PAUSED" => PluginState::Paused,
            "ERRORED" => PluginState::Errored,
            _ => return None,
        })
    }
}

/// A plugin as stored (its wire shape, and what the service keeps for it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    pub id: String,
    pub plugin_type: String,
    pub state: PluginState,
    pub poll_interval: u64,
    pub auto_start: bool,
    pub config: Map<String, Value>,
    pub last_poll_date: Option<String>,
    pub next_poll_date: Option<String>,
    /// Why it is ERRORED.
    pub error: Option<String>,
    /// Who it acts as: who created it. Only the name counts: whether they are an
    /// administrator, their groups and their roles are read again at each call.
    pub created_by: Acting,
    /// What its script kept (`data_set`), surviving restarts.
    #[serde(default)]
    pub data: Map<String, Value>,
    /// Epoch seconds of the next poll (the wire date is `nextPollDate`).
    #[serde(default)]
    pub next_poll_at: Option<i64>,
}

/// A user as a plugin acts for them: name, local administrator or not, and the groups
/// principals may name them by (`(type, name)`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acting {
    pub user: String,
    pub admin: bool,
    pub groups: Vec<(String, String)>,
}

/// A plugin type as stored: the raw upload and what it said of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredType {
    pub id: String,
    pub author: Option<String>,
    pub description: Option<String>,
    pub source: String,
    /// The archive it came in, if any.
    pub archive: Option<String>,
    pub uploaded: String,
}

/// A creation (`POST /rest/plugins`).
#[derive(Debug, Clone, Default)]
pub struct NewPlugin {
    pub id: String,
    pub plugin_type: String,
    pub poll_interval: Option<u64>,
    pub auto_start: Option<bool>,
    pub config: Map<String, Value>,
}

/// A change (`PUT /rest/plugins/<id>`); `None` leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct PluginChange {
    pub state: Option<PluginState>,
    pub poll_interval: Option<u64>,
    pub auto_start: Option<bool>,
    pub config: Option<Map<String, Value>>,
}

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The request is wrong (400): the summary, then the reasons.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("{0}")]
    NotFound(String),
    /// It exists already, or is in use (409).
    #[error("{}", .0.join("; "))]
    Conflict(Vec<String>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub type Result<T, E = PluginError> = std::result::Result<T, E>;

/// What the service gives plugins: their host functions, and what the Native type's
/// reports change.
pub trait HostFactory: Send + Sync {
    /// The host `plugin`'s script calls, keeping its data in `data`.
    fn host(&self, plugin: &Plugin, data: Arc<Mutex<Map<String, Value>>>) -> Arc<dyn Host>;
    /// Applies a Native plugin's node reports; answers what was done.
    fn apply_nodes(
        &self,
        plugin: &Plugin,
        reports: Vec<native::NodeReport>,
    ) -> Result<String, String>;
    /// Applies a Native plugin's job reports (work outside this service on the nodes);
    /// answers what was done.
    fn apply_jobs(
        &self,
        plugin: &Plugin,
        reports: Vec<native::JobReport>,
    ) -> Result<String, String>;
    /// Where Native URLs may point and as whom they run (the operator's configuration).
    fn locations(&self) -> native::Locations;
    /// Whether `plugin`'s user may read events now (only then is it handed them).
    fn may_read_events(&self, plugin: &Plugin) -> bool;
}

struct Inner {
    types: BTreeMap<String, (StoredType, Arc<Script>)>,
    plugins: BTreeMap<String, Plugin>,
    /// The script each plugin was last configured with: a type uploaded again with
    /// `reload-plugins=false` reaches a plugin only when it is configured again (started,
    /// or its configuration changed).
    loaded: BTreeMap<String, Arc<Script>>,
}

pub struct Plugins {
    store: Arc<dyn DocumentStore>,
    limits: Limits,
    factory: Arc<dyn HostFactory>,
    inner: Mutex<Inner>,
    /// One per plugin: its calls never overlap.
    calls: Mutex<HashMap<String, Arc<CallLock>>>,
}

/// The most callers a request may find waiting for one plugin's lock before it is
/// refused: a plugin that answers slowly, asked many times at once, would otherwise hold
/// every blocking thread of the service (logins, the store) waiting for it.
pub const MAX_WAITING_CALLS: usize = 8;

/// The lock that keeps calls into one plugin from overlapping, and how many wait for it.
#[derive(Default)]
struct CallLock {
    lock: Mutex<()>,
    waiting: AtomicUsize,
}

impl CallLock {
    fn hold(&self) -> MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Holds the lock, unless `MAX_WAITING_CALLS` callers wait for it already.
    fn hold_unless_crowded(&self, id: &str) -> Result<MutexGuard<'_, ()>> {
        if let Ok(guard) = self.lock.try_lock() {
            return Ok(guard);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING_CALLS {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(PluginError::Conflict(vec![
                format!("The plugin {id} was not called"),
                format!("{MAX_WAITING_CALLS} calls wait for it already; try again later"),
            ]));
        }
        let guard = self.hold();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        Ok(guard)
    }
}

/// A plugin type as answered: `id`, `author`, `description`, `instances`.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeView {
    pub id: String,
    pub author: Option<String>,
    pub description: Option<String>,
    pub instances: Vec<String>,
    pub config: Vec<script::ConfigKey>,
}

impl Plugins {
    /// Loads the stored types (compiling each again) and plugins. A stored type that no
    /// longer compiles is left out and named in the warnings; its plugins are ERRORED.
    pub fn open(
        store: Arc<dyn DocumentStore>,
        factory: Arc<dyn HostFactory>,
        limits: Limits,
    ) -> Result<(Self, Vec<String>)> {
        store.ensure_collection(&CollectionSpec::new(PLUGIN_TYPES))?;
        store.ensure_collection(&CollectionSpec::new(PLUGINS))?;
        let mut warnings = Vec::new();
        let mut types = BTreeMap::new();
        for document in store.list(PLUGIN_TYPES, &Default::default())?.items {
            let Ok(stored) = serde_json::from_value::<StoredType>(document.body) else {
                warnings.push(format!("plugin type {}: unreadable", document.id));
                continue;
            };
            match script::compile(&stored.source, &limits) {
                Ok(compiled) => {
                    types.insert(stored.id.clone(), (stored, Arc::new(compiled)));
                }
                Err(e) => warnings.push(format!("plugin type {}: {e}", stored.id)),
            }
        }
        let mut plugins = BTreeMap::new();
        for document in store.list(PLUGINS, &Default::default())?.items {
            match serde_json::from_value::<Plugin>(document.body) {
                Ok(plugin) => {
                    plugins.insert(plugin.id.clone(), plugin);
                }
                Err(e) => warnings.push(format!("plugin {}: unreadable: {e}", document.id)),
            }
        }
        let registry = Self {
            store,
            limits,
            factory,
            inner: Mutex::new(Inner {
                types,
                plugins,
                loaded: BTreeMap::new(),
            }),
            calls: Mutex::new(HashMap::new()),
        };
        Ok((registry, warnings))
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_of(&self, id: &str) -> Arc<CallLock> {
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        calls.entry(id.to_string()).or_default().clone()
    }

    /// Starts the plugins marked `autoStart` (at the service's start); answers what
    /// failed.
    pub fn start_automatically(&self) -> Vec<String> {
        let ids: Vec<(String, Option<PluginState>)> = self
            .inner()
            .plugins
            .values()
            .filter(|p| {
                p.auto_start || matches!(p.state, PluginState::Started | PluginState::Paused)
            })
            // A paused plugin is configured again and stays paused: a restart is no
            // resume.
            .map(|p| {
                (
                    p.id.clone(),
                    (p.state == PluginState::Paused).then_some(PluginState::Paused),
                )
            })
            .collect();
        let mut failures = Vec::new();
        for (id, keep) in ids {
            if let Err(e) = self.start(&id, keep) {
                failures.push(format!("plugin {id}: {e}"));
            }
        }
        failures
    }

    // Types.

    pub fn types(&self) -> Vec<TypeView> {
        let inner = self.inner();
        let instances = |ty: &str| -> Vec<String> {
            inner
                .plugins
                .values()
                .filter(|p| p.plugin_type == ty)
                .map(|p| p.id.clone())
                .collect()
        };
        let mut out = vec![TypeView {
            id: NATIVE.into(),
            author: Some("Drover".into()),
            description: Some(
                "Reads node and job reports in the native resource-manager format from file:// \
                 and exec:// URLs (getNodes, getJobs) and runs action URLs"
                    .into(),
            ),
            instances: instances(NATIVE),
            config: native_description().config,
        }];
        for (id, (stored, compiled)) in &inner.types {
            out.push(TypeView {
                id: id.clone(),
                author: stored.author.clone(),
                description: stored.description.clone(),
                instances: instances(id),
                config: compiled.description.config.clone(),
            });
        }
        out
    }

    /// Compiles and stores a script; answers its type id.
    pub fn upload_script(&self, source: &str, reload: bool) -> Result<Vec<String>> {
        self.upload(vec![(source.to_string(), None)], reload)
    }

    /// Every `*.rhai` entry of a zip archive is a type; all are stored, or none.
    pub fn upload_archive(
        &self,
        bytes: &[u8],
        filename: &str,
        reload: bool,
    ) -> Result<Vec<String>> {
        let entries = archive::entries(bytes).map_err(|e| {
            PluginError::Invalid(vec![format!("The archive {filename} was not read"), e])
        })?;
        let scripts: Vec<(String, Option<String>)> = entries
            .into_iter()
            .filter(|e| e.name.ends_with(".rhai"))
            .map(|e| {
                String::from_utf8(e.bytes)
                    .map(|text| (text, Some(format!("{filename}!{}", e.name))))
                    .map_err(|_| PluginError::Invalid(vec![format!("{}: not UTF-8 text", e.name)]))
            })
            .collect::<Result<_>>()?;
        if scripts.is_empty() {
            return Err(PluginError::Invalid(vec![
                format!("The archive {filename} holds no plugin type"),
                "put each plugin type in the archive as a <name>.rhai script".into(),
            ]));
        }
        self.upload(scripts, reload)
    }

    fn upload(&self, scripts: Vec<(String, Option<String>)>, reload: bool) -> Result<Vec<String>> {
        let mut compiled = Vec::new();
        let mut problems = Vec::new();
        for (source, origin) in scripts {
            match script::compile(&source, &self.limits) {
                Ok(script) if script.description.id == NATIVE => {
                    problems.push(format!(
                        "{NATIVE} is the built-in type's id; choose another"
                    ));
                }
                Ok(script)
                    if compiled
                        .iter()
                        .any(|(_, _, c): &(String, Option<String>, Script)| {
                            c.description.id == script.description.id
                        }) =>
                {
                    problems.push(format!(
                        "{}: another script of the archive is the plugin type {} too",
                        origin.as_deref().unwrap_or("the script"),
                        script.description.id
                    ));
                }
                Ok(script) => compiled.push((source, origin, script)),
                Err(e) => problems.push(match &origin {
                    Some(name) => format!("{name}: {e}"),
                    None => e.to_string(),
                }),
            }
        }
        if !problems.is_empty() {
            let mut messages = vec!["The plugin type was not uploaded".to_string()];
            messages.extend(problems);
            return Err(PluginError::Invalid(messages));
        }
        let now = dates::format_utc(Timestamp::now());
        let mut writes = Vec::new();
        let mut ids = Vec::new();
        {
            let inner = self.inner();
            for (source, origin, script) in &compiled {
                let stored = StoredType {
                    id: script.description.id.clone(),
                    author: script.description.author.clone(),
                    description: script.description.description.clone(),
                    source: source.clone(),
                    archive: origin.clone(),
                    uploaded: now.clone(),
                };
                let body = serde_json::to_value(&stored).unwrap_or_default();
                let exists = inner.types.contains_key(&stored.id);
                writes.push(upsert(PLUGIN_TYPES, &stored.id, body, exists));
                ids.push(stored.id.clone());
            }
        }
        self.store.write(&writes)?;
        {
            let mut inner = self.inner();
            for (source, origin, script) in compiled {
                let stored = StoredType {
                    id: script.description.id.clone(),
                    author: script.description.author.clone(),
                    description: script.description.description.clone(),
                    source,
                    archive: origin,
                    uploaded: now.clone(),
                };
                inner
                    .types
                    .insert(stored.id.clone(), (stored, Arc::new(script)));
            }
        }
        if reload {
            let started: Vec<String> = {
                let inner = self.inner();
                inner
                    .plugins
                    .values()
                    .filter(|p| ids.contains(&p.plugin_type) && p.state == PluginState::Started)
                    .map(|p| p.id.clone())
                    .collect()
            };
            for id in started {
                // A reload that fails leaves the plugin ERRORED with the reason.
                let _ = self.start(&id, None);
            }
        }
        Ok(ids)
    }

    /// The description of type `id` (the built-in one included).
    fn description(&self, id: &str) -> Option<Description> {
        if id == NATIVE {
            return Some(native_description());
        }
        self.inner()
            .types
            .get(id)
            .map(|(_, s)| s.description.clone())
    }

    fn script_of(&self, ty: &str) -> Option<Arc<Script>> {
        self.inner().types.get(ty).map(|(_, s)| s.clone())
    }

    /// The script `plugin` runs: the one it was configured with, while its type exists.
    fn script_for(&self, plugin: &Plugin) -> Option<Arc<Script>> {
        let inner = self.inner();
        inner.types.get(&plugin.plugin_type)?;
        inner
            .loaded
            .get(&plugin.id)
            .cloned()
            .or_else(|| inner.types.get(&plugin.plugin_type).map(|(_, s)| s.clone()))
    }

    // Plugins.

    pub fn plugins(&self) -> Vec<Plugin> {
        self.inner().plugins.values().cloned().collect()
    }

    pub fn plugin(&self, id: &str) -> Result<Plugin> {
        self.inner()
            .plugins
            .get(id)
            .cloned()
            .ok_or_else(|| PluginError::NotFound(format!("No plugin '{id}'")))
    }

    pub fn create(&self, new: NewPlugin, by: Acting) -> Result<Vec<String>> {
        let summary = "The plugin was not created".to_string();
        let invalid = |reason: String| PluginError::Invalid(vec![summary.clone(), reason]);
        if let Some(why) = script::id_problem(&new.id) {
            return Err(invalid(format!("id: '{}': {why}", new.id)));
        }
        if new.id.eq_ignore_ascii_case("all") {
            return Err(invalid("id: 'all' is reserved".into()));
        }
        let Some(description) = self.description(&new.plugin_type) else {
            return Err(invalid(format!(
                "pluginType: there is no plugin type '{}' (GET /rest/plugin-types lists them)",
                new.plugin_type
            )));
        };
        let config = description
            .checked_config(&new.config)
            .map_err(|problems| {
                let mut messages = vec![summary.clone()];
                messages.extend(problems);
                PluginError::Invalid(messages)
            })?;
        let poll_interval = new.poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL);
        check_interval(poll_interval, &summary)?;
        let plugin = Plugin {
            id: new.id.clone(),
            plugin_type: new.plugin_type,
            state: PluginState::Stopped,
            poll_interval,
            auto_start: new.auto_start.unwrap_or(true),
            config,
            last_poll_date: None,
            next_poll_date: None,
            error: None,
            created_by: by,
            data: Map::new(),
            next_poll_at: None,
        };
        {
            let mut inner = self.inner();
            if inner.plugins.contains_key(&plugin.id) {
                return Err(PluginError::Conflict(vec![
                    summary,
                    format!("id: a plugin '{}' exists already", plugin.id),
                ]));
            }
            self.store
                .write(&[upsert(PLUGINS, &plugin.id, to_body(&plugin), false)])?;
            inner.plugins.insert(plugin.id.clone(), plugin.clone());
        }
        let mut messages = vec![format!("Plugin {} was created", plugin.id)];
        if plugin.auto_start {
            match self.start(&plugin.id, None) {
                Ok(()) => messages.push(format!("Plugin {} was started", plugin.id)),
                Err(e) => messages.push(format!("Plugin {} could not be started: {e}", plugin.id)),
            }
        }
        Ok(messages)
    }

    /// Applies a change; answers what was done (the update, and a start or stop).
    pub fn modify(&self, id: &str, change: PluginChange) -> Result<Vec<String>> {
        let summary = format!("The plugin {id} was not changed");
        let current = self.plugin(id)?;
        if let Some(interval) = change.poll_interval {
            check_interval(interval, &summary)?;
        }
        let config = match &change.config {
            Some(config) => {
                let description = self.description(&current.plugin_type).ok_or_else(|| {
                    PluginError::Invalid(vec![summary.clone(), "its plugin type is gone".into()])
                })?;
                Some(description.checked_config(config).map_err(|problems| {
                    let mut messages = vec![summary.clone()];
                    messages.extend(problems);
                    PluginError::Invalid(messages)
                })?)
            }
            None => None,
        };
        let running = matches!(current.state, PluginState::Started | PluginState::Paused);
        let target = change.state.unwrap_or(current.state);
        // A new configuration is tried before anything is kept: an invalid one changes
        // nothing.
        if let Some(config) = &config
            && matches!(target, PluginState::Started | PluginState::Paused)
        {
            // Under the plugin's lock, as every call into it is, and from what it is now.
            let lock = self.lock_of(id);
            let _calls = lock.hold();
            let mut trial = self.plugin(id)?;
            trial.config = config.clone();
            self.configure(&trial)
                .map(drop)
                .map_err(|e| PluginError::Invalid(vec![summary.clone(), e]))?;
        }
        self.update(id, |p| {
            if let Some(interval) = change.poll_interval {
                p.poll_interval = interval;
            }
            if let Some(auto) = change.auto_start {
                p.auto_start = auto;
            }
            if let Some(config) = config.clone() {
                p.config = config;
            }
        })?;
        let mut messages = vec![format!("Plugin {id} was updated")];
        match change.state {
            Some(PluginState::Started) => {
                self.start(id, None).map_err(|e| {
                    PluginError::Invalid(vec![
                        format!("The plugin {id} was not started"),
                        e.to_string(),
                    ])
                })?;
                messages.push(format!("Plugin {id} was started"));
            }
            Some(PluginState::Paused) => {
                if !running {
                    self.start(id, None).map_err(|e| {
                        PluginError::Invalid(vec![
                            format!("The plugin {id} was not started"),
                            e.to_string(),
                        ])
                    })?;
                }
                self.update(id, |p| p.state = PluginState::Paused)?;
                messages.push(format!("Plugin {id} was paused"));
            }
            Some(PluginState::Stopped) => {
                self.update(id, |p| {
                    p.state = PluginState::Stopped;
                    p.next_poll_at = None;
                    p.next_poll_date = None;
                })?;
                messages.push(format!("Plugin {id} was stopped"));
            }
            Some(PluginState::Errored) => {
                return Err(PluginError::Invalid(vec![
                    summary,
                    "state: ERRORED is the service's to set; give STARTED, STOPPED or PAUSED"
                        .into(),
                ]));
            }
            None if config.is_some() && running => {
                self.start(id, Some(current.state))
                    .map_err(|e| PluginError::Invalid(vec![summary.clone(), e]))?;
                messages.push(format!("Plugin {id} was configured again"));
            }
            None => {}
        }
        Ok(messages)
    }

    pub fn delete(&self, id: &str) -> Result<String> {
        let lock = self.lock_of(id);
        let _calls = lock.hold();
        let mut inner = self.inner();
        if !inner.plugins.contains_key(id) {
            return Err(PluginError::NotFound(format!("No plugin '{id}'")));
        }
        self.store.write(&[Write::Delete {
            collection: PLUGINS.into(),
            id: id.to_string(),
            expected_version: None,
        }])?;
        inner.plugins.remove(id);
        inner.loaded.remove(id);
        Ok(format!("Plugin {id} was stopped and deleted"))
    }

    /// Configures `id` and makes it STARTED (or `keep`, PAUSED); a failure leaves it
    /// ERRORED with the reason, and is answered.
    fn start(&self, id: &str, keep: Option<PluginState>) -> Result<(), String> {
        let lock = self.lock_of(id);
        let _calls = lock.hold();
        // Read under the lock: a call that ran meanwhile may have changed its data.
        let plugin = self.plugin(id).map_err(|e| e.to_string())?;
        let outcome = self.configure(&plugin);
        let now = Timestamp::now().as_second();
        let state = keep.unwrap_or(PluginState::Started);
        let _ = self.update(id, |p| match &outcome {
            Ok(config) => {
                p.config = config.clone();
                p.state = state;
                p.error = None;
                schedule(p, now);
            }
            Err(why) => {
                p.state = PluginState::Errored;
                p.error = Some(why.clone());
                p.next_poll_at = None;
                p.next_poll_date = None;
            }
        });
        outcome.map(drop)
    }

    /// Runs the type's `configure(config)` (or checks a Native plugin's URLs).
    /// The configuration is checked against the type as it is now (a type uploaded again
    /// may require what the plugin's configuration lacks) and answered with the type's
    /// defaults added.
    fn configure(&self, plugin: &Plugin) -> Result<Map<String, Value>, String> {
        let gone = || {
            format!(
                "its plugin type '{}' does not exist (or no longer compiles)",
                plugin.plugin_type
            )
        };
        let description = self.description(&plugin.plugin_type).ok_or_else(gone)?;
        let config = description
            .checked_config(&plugin.config)
            .map_err(|problems| problems.join("; "))?;
        if plugin.plugin_type == NATIVE {
            let locations = self.factory.locations();
            for key in NATIVE_URLS {
                if let Some(url) = config.get(key).and_then(Value::as_str) {
                    native::check_url(url, &locations).map_err(|e| format!("config.{key}: {e}"))?;
                }
            }
            return Ok(config);
        }
        let script = self.script_of(&plugin.plugin_type).ok_or_else(gone)?;
        if script.defines("configure", 1) {
            let mut checked = plugin.clone();
            checked.config = config.clone();
            self.run(
                &checked,
                &script,
                "configure",
                vec![Value::Object(config.clone())],
            )
            .map_err(|e| format!("configure: {e}"))?;
        }
        self.inner().loaded.insert(plugin.id.clone(), script);
        Ok(config)
    }

    /// Calls `function` of the plugin's script; what it kept with `data_set` is stored.
    fn run(
        &self,
        plugin: &Plugin,
        script: &Script,
        function: &str,
        args: Vec<Value>,
    ) -> Result<Value, String> {
        let data = Arc::new(Mutex::new(plugin.data.clone()));
        let host = self.factory.host(plugin, data.clone());
        let answer = script::call(script, function, args, Some(host), &self.limits);
        let data = data.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if data != plugin.data {
            let size = serde_json::to_vec(&data)
                .map(|b| b.len())
                .unwrap_or(usize::MAX);
            if size > MAX_DATA_BYTES {
                return Err(format!(
                    "its data grew past {MAX_DATA_BYTES} bytes and was not kept"
                ));
            }
            let _ = self.update(&plugin.id, |p| p.data = data);
        }
        answer
    }

    /// The STARTED plugins whose poll is due at `now`.
    pub fn due(&self, now: i64) -> Vec<String> {
        self.inner()
            .plugins
            .values()
            .filter(|p| {
                p.state == PluginState::Started && p.next_poll_at.is_some_and(|at| at <= now)
            })
            .map(|p| p.id.clone())
            .collect()
    }

    /// Polls `id` now (its next poll is scheduled from now); a failure leaves it ERRORED.
    pub fn poll(&self, id: &str) -> Result<Vec<String>> {
        // Known first: no lock is made for an id that names no plugin.
        self.plugin(id)?;
        let lock = self.lock_of(id);
        let _calls = lock.hold_unless_crowded(id)?;
        // Read under the lock: a call that ran meanwhile may have changed its data.
        let plugin = self.plugin(id)?;
        let outcome = if plugin.plugin_type == NATIVE {
            self.poll_native(&plugin)
        } else {
            match self.script_for(&plugin) {
                None => Err(format!(
                    "its plugin type '{}' does not exist",
                    plugin.plugin_type
                )),
                Some(script) if !script.defines("poll", 0) => Ok("it has nothing to poll".into()),
                Some(script) => self
                    .run(&plugin, &script, "poll", Vec::new())
                    .map(|v| match v {
                        Value::Null => "polled".to_string(),
                        Value::String(s) => s,
                        other => other.to_string(),
                    }),
            }
        };
        let now = Timestamp::now().as_second();
        self.update(id, |p| {
            p.last_poll_date = Some(dates::format_utc(Timestamp::now()));
            match &outcome {
                Ok(_) => {
                    if p.state == PluginState::Started {
                        schedule(p, now);
                    }
                }
                Err(why) => {
                    p.state = PluginState::Errored;
                    p.error = Some(format!("poll: {why}"));
                    p.next_poll_at = None;
                    p.next_poll_date = None;
                }
            }
        })?;
        match outcome {
            Ok(said) => Ok(vec![format!("Plugin {id} was polled: {said}")]),
            Err(why) => Err(PluginError::Invalid(vec![
                format!("The plugin {id} failed to poll and is now ERRORED"),
                why,
            ])),
        }
    }

    /// Reads the node lines of `getCluster` and `getNodes` (the cluster query and the
    /// node query of the original's native interface: the same line format) and applies
    /// them.
    fn poll_native(&self, plugin: &Plugin) -> Result<String, String> {
        let mut reports = Vec::new();
        let mut problems = Vec::new();
        let mut read_any = false;
        for key in ["getCluster", "getNodes"] {
            let Some(url) = plugin.config.get(key).and_then(Value::as_str) else {
                continue;
            };
            read_any = true;
            let text = native::read_url(url, &self.factory.locations())
                .map_err(|e| format!("{key}: {e}"))?;
            let (more, bad) = native::parse_nodes(&text);
            reports.extend(more);
            problems.extend(bad.into_iter().map(|p| format!("{key}: {p}")));
        }
        let mut said = if read_any {
            self.factory.apply_nodes(plugin, reports)?
        } else {
            "no getNodes or getCluster URL is configured".to_string()
        };
        if let Some(url) = plugin.config.get("getJobs").and_then(Value::as_str) {
            let text = native::read_url(url, &self.factory.locations())
                .map_err(|e| format!("getJobs: {e}"))?;
            let (jobs, bad) = native::parse_jobs(&text);
            problems.extend(bad.into_iter().map(|p| format!("getJobs: {p}")));
            said.push_str("; ");
            said.push_str(&self.factory.apply_jobs(plugin, jobs)?);
        }
        if !problems.is_empty() {
            said.push_str(&format!(
                "; {} lines not read ({})",
                problems.len(),
                problems.join("; ")
            ));
        }
        Ok(said)
    }

    /// Runs the action URL a STARTED Native plugin configures for a job event
    /// (`jobStart` for `jobstart`...), with the job's id as its argument.
    fn run_native_actions(&self, event: &Value) {
        let Some(kind) = event.get("eventType").and_then(Value::as_str) else {
            return;
        };
        let Some(key) = native_action(kind) else {
            return;
        };
        let Some(job) = event.pointer("/arguments/0").and_then(Value::as_str) else {
            return;
        };
        let actions: Vec<(String, String)> = self
            .inner()
            .plugins
            .values()
            .filter(|p| p.plugin_type == NATIVE && p.state == PluginState::Started)
            .filter_map(|p| Some((p.id.clone(), p.config.get(key)?.as_str()?.to_string())))
            .collect();
        for (id, url) in actions {
            let lock = self.lock_of(&id);
            let _calls = lock.hold();
            if let Err(why) = native::run_action(&url, &[job], &self.factory.locations()) {
                let _ = self.update(&id, |p| {
                    p.state = PluginState::Errored;
                    p.error = Some(format!("{key}: {why}"));
                });
            }
        }
    }

    /// Whether a plugin may be STARTED (only those are handed events): true also while
    /// the plugins are being changed, so an async caller never waits on their store write.
    pub fn may_have_started(&self) -> bool {
        let inner = match self.inner.try_lock() {
            Ok(inner) => inner,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return true,
        };
        inner
            .plugins
            .values()
            .any(|p| p.state == PluginState::Started)
    }

    /// Hands `event` to every STARTED plugin whose script has `on_event(event)`, and
    /// runs the Native plugins' action URLs; a failure leaves that plugin ERRORED.
    pub fn deliver(&self, event: &Value) {
        self.run_native_actions(event);
        let targets: Vec<String> = {
            let inner = self.inner();
            inner
                .plugins
                .values()
                .filter(|p| p.state == PluginState::Started)
                .map(|p| p.id.clone())
                .collect()
        };
        for id in targets {
            let lock = self.lock_of(&id);
            let _calls = lock.hold();
            // Read again under the lock: it may have been paused, stopped, changed or
            // deleted, or its data changed, while the plugins before it ran.
            let Ok(plugin) = self.plugin(&id) else {
                continue;
            };
            if plugin.state != PluginState::Started || !self.factory.may_read_events(&plugin) {
                continue;
            }
            let Some(script) = self
                .script_for(&plugin)
                .filter(|s| s.defines("on_event", 1))
            else {
                continue;
            };
            if let Err(why) = self.run(&plugin, &script, "on_event", vec![event.clone()]) {
                let _ = self.update(&plugin.id, |p| {
                    p.state = PluginState::Errored;
                    p.error = Some(format!("on_event: {why}"));
                    // Not polled any more, as after any other failure.
                    p.next_poll_at = None;
                    p.next_poll_date = None;
                });
            }
        }
    }

    /// Calls the web service `name` (camelCase or hyphenated) of plugin `id`.
    pub fn call_service(&self, id: &str, name: &str, request: Value) -> Result<Value> {
        // Known first: no lock is made for an id that names no plugin.
        self.plugin(id)?;
        let lock = self.lock_of(id);
        let _calls = lock.hold_unless_crowded(id)?;
        // Read under the lock: a call that ran meanwhile may have changed its data.
        let plugin = self.plugin(id)?;
        let function = camel_case(name);
        let script = self
            .script_for(&plugin)
            .filter(|s| s.description.services.contains(&function))
            .ok_or_else(|| {
                PluginError::NotFound(format!("Plugin {id} has no web service '{name}'"))
            })?;
        if plugin.state == PluginState::Stopped || plugin.state == PluginState::Errored {
            return Err(PluginError::Conflict(vec![
                format!("The web service {name} of plugin {id} was not called"),
                format!("the plugin is {:?}; start it first", plugin.state).to_uppercase(),
            ]));
        }
        self.run(&plugin, &script, &function, vec![request])
            .map_err(|why| {
                PluginError::Invalid(vec![
                    format!("The web service {name} of plugin {id} failed"),
                    why,
                ])
            })
    }

    /// Changes the plugin `id` in memory and in the store.
    fn update(&self, id: &str, change: impl FnOnce(&mut Plugin)) -> Result<()> {
        let mut inner = self.inner();
        let Some(plugin) = inner.plugins.get_mut(id) else {
            return Err(PluginError::NotFound(format!("No plugin '{id}'")));
        };
        let mut changed = plugin.clone();
        change(&mut changed);
        self.store
            .write(&[upsert(PLUGINS, id, to_body(&changed), true)])?;
        *plugin = changed;
        Ok(())
    }
}

fn schedule(plugin: &mut Plugin, now: i64) {
    let next = now + plugin.poll_interval as i64;
    plugin.next_poll_at = Some(next);
    plugin.next_poll_date = Timestamp::from_second(next).ok().map(dates::format_utc);
}

fn check_interval(interval: u64, summary: &str) -> Result<()> {
    if (MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&interval) {
        Ok(())
    } else {
        Err(PluginError::Invalid(vec![
            summary.to_string(),
            format!("pollInterval: must be {MIN_POLL_INTERVAL} to {MAX_POLL_INTERVAL} seconds"),
        ]))
    }
}

fn to_body(plugin: &Plugin) -> Value {
    serde_json::to_value(plugin).unwrap_or_default()
}

fn upsert(collection: &str, id: &str, body: Value, exists: bool) -> Write {
    if exists {
        Write::Update {
            collection: collection.into(),
            id: id.into(),
            name: None,
            body: body.into(),
            expected_version: None,
        }
    } else {
        Write::Insert {
            collection: collection.into(),
            id: id.into(),
            name: None,
            body: body.into(),
        }
    }
}

/// `notify-event` → `notifyEvent`; camelCase stays.
pub fn camel_case(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// The Native configuration key whose action URL runs for a job event of `kind`.
fn native_action(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "jobstart" => "jobStart",
        "jobcancel" => "jobCancel",
        "jobmodify" => "jobModify",
        "jobrequeue" => "jobRequeue",
        "jobsuspend" => "jobSuspend",
        "jobresume" => "jobResume",
        _ => return None,
    })
}

/// The built-in type's configuration: its URLs, all optional strings.
fn native_description() -> Description {
    let url = |name: &str| script::ConfigKey {
        name: name.into(),
        kind: script::ConfigKind::String,
        required: false,
        default: None,
    };
    Description {
        id: NATIVE.into(),
        author: Some("Drover".into()),
        description: None,
        config: NATIVE_URLS.into_iter().map(url).collect(),
        services: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_may_be_hyphenated() {
        assert_eq!(camel_case("notify-event"), "notifyEvent");
        assert_eq!(camel_case("notifyEvent"), "notifyEvent");
    }
}
