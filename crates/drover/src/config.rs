//! Configuration: a TOML file, then environment overrides, then command-line flags.
//!
//! Every setting has a default, so `drover serve` runs with no configuration at all.
//! See `drover.example.toml` at the top of the repository for every key.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use drover_accounting::AccountingConfig;
use drover_auth::{DirectoryConfig, User};
// The application services' sections, by the names the configuration has always had.
use drover_control::settings::flag;
pub use drover_control::settings::{
    AccelChoice, CloudConfig, ExecConfig, PendingActionsConfig, PluginsConfig, ProvisionerKind,
};
use drover_domain::dates::WireDates;
use drover_monitor::log::{LogSettings, Rolling};
use drover_sched::limits::Limits;
use drover_sched::node::NodeConfig;
use drover_sched::policy::Policy;
use drover_sched::reservation::StandingReservation;
use drover_sched::template::{JobTemplate, JobTemplates};
use drover_sched::{ConfiguredCredentials, SchedConfig};
use serde::Deserialize;

/// The environment variables that override the file, and the key each one sets.
pub const ENVIRONMENT: &[(&str, &str)] = &[
    ("DROVER_LISTEN", "listen"),
    ("DROVER_BASE_URL", "base_url"),
    ("DROVER_DATA_DIR", "data_dir"),
    ("DROVER_STORE", "store"),
    ("DROVER_TIME_ZONE", "time_zone"),
    ("DROVER_MAX_BODY_BYTES", "max_body_bytes"),
    ("DROVER_LOGIN_CACHE_SECONDS", "login_cache_seconds"),
    ("DROVER_ADMIN_USER", "admin_user"),
    ("DROVER_ENABLEPROXY", "scheduler.ENABLEPROXY"),
    ("DROVER_PROXY_USERS", "scheduler.proxy_users"),
    ("DROVER_ENABLEJOBARRAYS", "scheduler.ENABLEJOBARRAYS"),
    ("DROVER_SCHEDULER_NAME", "scheduler.name"),
    ("DROVER_EXECUTION_USER", "scheduler.execution_user"),
    ("DROVER_KILL_GRACE_SECONDS", "scheduler.kill_grace_seconds"),
    ("DROVER_EVENT_LOG", "events.log_file"),
    ("DROVER_SCHEDULER_EVENTS", "events.scheduler"),
    ("DROVER_ACCEL", "cloud.accel"),
    ("DROVER_PREPARE_GUEST_IMAGE", "cloud.prepare_guest_image"),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address and port to listen on.
    pub listen: String,
    /// The `{base_url}` prefix of every path, e.g. `/mws`; empty by default.
    pub base_url: String,
    /// Where the embedded store and `users.toml` live.
    pub data_dir: PathBuf,
    /// A `postgres://` URL to use PostgreSQL instead of the embedded SQLite file.
    pub store: Option<String>,
    /// The IANA zone of version-1 dates; the machine's zone by default.
    pub time_zone: Option<String>,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a verified login is remembered.
    pub login_cache_seconds: u64,
    /// How long a client has to send a request's head (line and headers).
    pub header_timeout_seconds: u64,
    /// How long a client has to send a request's body once the head has arrived.
    pub body_timeout_seconds: u64,
    /// How long a new connection may send nothing before it is closed.
    pub idle_connection_seconds: u64,
    /// Connections open at once (at most three quarters of the open-file limit).
    pub max_connections: usize,
    /// Connections open at once from one source (an IPv4 address or an IPv6 /64).
    pub max_connections_per_source: usize,
    /// How long a job list that must scan may take, its wait for a turn included;
    /// past it the list is answered 503 with `Retry-After`.
    pub list_budget_ms: u64,
    /// The administrator generated on first start when none is configured.
    pub admin_user: String,
    pub scheduler: SchedulerConfig,
    /// Local users (argon2 hashes; `drover hash-password` makes one).
    pub users: Vec<User>,
    /// The directory (LDAP) server.
    pub ldap: Option<DirectoryConfig>,
    /// Roles everyone holds, and login throttling.
    pub access: AccessConfig,
    /// Logical nodes jobs are placed on; none means one node describing this machine.
    pub nodes: Vec<NodeConfig>,
    /// The event log file.
    pub events: EventsConfig,
    /// How long history is kept in the store (for ever by default), and where it goes.
    pub retention: drover_monitor::retention::RetentionConfig,
    /// Job templates: change the built-in ones (same id) or add others.
    pub job_templates: Vec<JobTemplate>,
    /// Reservations recurring every day (or on named days), read-only through the API.
    pub standing_reservations: Vec<StandingReservation>,
    /// The embedded accounting manager.
    pub accounting: AccountingConfig,
    /// Images and VMs.
    pub cloud: CloudConfig,
    /// Plugins.
    pub plugins: PluginsConfig,
    /// What runs the jobs: this machine (`local`, the default) or a Slurm cluster.
    pub resource_manager: ResourceManagerConfig,
    /// Several servers sharing one PostgreSQL store, one of them active.
    pub high_availability: HighAvailabilityConfig,
    /// How long `Idempotency-Key`s are kept, and how many one user may hold.
    pub idempotency: IdempotencyConfig,
    /// Token login for portals (`<base>/oauth/token`).
    pub oauth: OAuthConfig,
}

/// `[idempotency]`: the keys of creating requests (`Idempotency-Key`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IdempotencyConfig {
    /// How long a key and its answer are kept (then purged): a retry within it is
    /// answered the first answer.
    pub window_seconds: u64,
    /// Live keys one user may hold; more are refused (429).
    pub max_keys_per_user: usize,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        Self {
            window_seconds: 24 * 3600,
            max_keys_per_user: 1000,
        }
    }
}

/// `[oauth]`: bearer tokens for portal clients.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OAuthConfig {
    /// How long an issued token lives.
    pub token_seconds: u64,
    /// Live tokens one user may hold; issuing more drops their oldest.
    pub max_tokens_per_user: usize,
    /// The portal clients (`[[oauth.clients]]`: `id`, `secret_hash`, optional
    /// `principal` for the `client_credentials` grant). None: the endpoint refuses all.
    pub clients: Vec<drover_auth::tokens::OAuthClient>,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            token_seconds: 3600,
            max_tokens_per_user: 16,
            clients: Vec::new(),
        }
    }
}

/// `[high_availability]`: several servers share one PostgreSQL store; the one holding the
/// store's lease is active (runs the engine), the others are standbys that forward
/// requests to it and take over when it dies.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HighAvailabilityConfig {
    pub enabled: bool,
    /// This server's name in the lease and in health answers; the host name by default.
    pub server_name: Option<String>,
    /// Where the other servers reach this one (`http://host:port`); by default the
    /// listen address (which must then not be a wildcard).
    pub advertise_url: Option<String>,
}

/// `[resource_manager]`: `kind = "local"` (jobs are processes of this machine) or
/// `"slurm"` (jobs are Slurm jobs pinned to the nodes chosen here; the nodes are Slurm's
/// unless `[[nodes]]` names them).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceManagerConfig {
    pub kind: ResourceManagerKind,
    /// The directory of Slurm's commands (`sbatch`, `squeue`, `sinfo`...).
    pub slurm_bin_dir: PathBuf,
    /// `SLURM_CONF` for those commands, when not `/etc/slurm/slurm.conf`.
    pub slurm_conf: Option<PathBuf>,
    /// The partition jobs are submitted to (Slurm's default when none); also the one
    /// where jobs submitted to Slurm directly are looked for (every partition when none).
    pub slurm_partition: Option<String>,
    /// How often Slurm's nodes are read again (their states: down, drained) and jobs
    /// submitted to Slurm directly looked for, in seconds (at least 1).
    pub slurm_node_poll_seconds: u64,
}

impl Default for ResourceManagerConfig {
    fn default() -> Self {
        Self {
            kind: ResourceManagerKind::Local,
            slurm_bin_dir: PathBuf::from("/usr/bin"),
            slurm_conf: None,
            slurm_partition: None,
            slurm_node_poll_seconds: 5,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceManagerKind {
    Local,
    Slurm,
}

/// The longest failed-login window: blocks last up to 16 windows.
const MAX_LOGIN_WINDOW: u64 = 86_400;

/// `[access]`: what every authenticated user holds, and how failed logins are slowed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccessConfig {
    /// Roles (by id) every authenticated user holds besides those principals give.
    pub default_roles: Vec<String>,
    /// Failed logins of one name from one source (an IPv4 address or an IPv6 /64), or
    /// from one source, allowed within `failed_login_window_seconds` (and ten times as
    /// many of one name from everywhere); beyond that, those logins are refused (429)
    /// for the window, then twice as long while failures go on (at most 16 windows). A
    /// source a name has logged in from is refused only for its own failures.
    pub max_failed_logins: u32,
    pub failed_login_window_seconds: u64,
}

impl Default for AccessConfig {
    fn default() -> Self {
        Self {
            default_roles: vec![drover_auth::roles::USER.into()],
            max_failed_logins: 10,
            failed_login_window_seconds: 300,
        }
    }
}

/// The event log (`events.log`, spec 6.3).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EventsConfig {
    /// The file; `events.log` in the data directory by default.
    pub log_file: Option<PathBuf>,
    /// `size` (the default), `hourly`, `daily` or `never`.
    pub rolling: String,
    /// With size rolling: the largest the file grows before it is rolled.
    pub max_bytes: u64,
    /// How many rolled files are kept.
    pub keep: usize,
    /// Also write every event line to the service's own log (standard error).
    pub additive: bool,
    /// Record the scheduler's own events (job submit, start, end, changes; node
    /// changes). Each costs a store insert in the transaction of its change: off, job
    /// submissions are faster (see docs/benchmarks.md, bench-jobs).
    #[serde(deserialize_with = "flag")]
    pub scheduler: bool,
    /// Event streams (`GET /rest/events/stream`) one user may have open at once.
    pub max_streams_per_user: usize,
    /// Event streams the service serves at once.
    pub max_streams: usize,
    /// Seconds between the comment lines that keep an idle stream's connection open.
    pub stream_heartbeat_seconds: u64,
}

impl Default for EventsConfig {
    fn default() -> Self {
        let streams = drover_api::event_stream::StreamLimits::default();
        Self {
            log_file: None,
            rolling: "size".into(),
            max_bytes: 10 * 1024 * 1024,
            keep: 10,
            additive: false,
            scheduler: true,
            max_streams_per_user: streams.per_user,
            max_streams: streams.total,
            stream_heartbeat_seconds: streams.heartbeat.as_secs(),
        }
    }
}

impl Config {
    /// The built-in job templates with the configured ones.
    pub fn templates(&self) -> Result<JobTemplates, String> {
        JobTemplates::with(&self.job_templates)
    }

    /// Where and how events are logged.
    pub fn event_log(&self) -> Result<LogSettings, String> {
        let events = &self.events;
        let rolling = match events.rolling.to_ascii_lowercase().as_str() {
            "size" if events.max_bytes == 0 => {
                return Err("events.max_bytes must be positive with size rolling".into());
            }
            "size" => Rolling::Size {
                max_bytes: events.max_bytes,
            },
            "hourly" => Rolling::Hourly,
            "daily" => Rolling::Daily,
            "never" => Rolling::Never,
            other => {
                return Err(format!(
                    "events.rolling: '{other}' is not one of size, hourly, daily, never"
                ));
            }
        };
        Ok(LogSettings {
            path: events
                .log_file
                .clone()
                .unwrap_or_else(|| self.data_dir.join("events.log")),
            rolling,
            keep: events.keep,
            additive: events.additive,
        })
    }
}

/// Scheduler parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerConfig {
    /// `ENABLEPROXY`: whether `proxy-user` is honoured at all (`true` or `"TRUE"`).
    #[serde(rename = "ENABLEPROXY", deserialize_with = "flag")]
    pub enable_proxy: bool,
    /// The users allowed to act for others when proxying is enabled.
    pub proxy_users: Vec<String>,
    /// `ENABLEJOBARRAYS`: whether `POST /rest/job-arrays` is served (`true` or `"TRUE"`).
    #[serde(rename = "ENABLEJOBARRAYS", deserialize_with = "flag")]
    pub enable_job_arrays: bool,
    /// The scheduler's name: job ids are `<name>.<n>`.
    pub name: String,
    /// The system user that runs jobs of API users without a system account
    /// (`nobody` by default; only used when the service runs as root).
    pub execution_user: Option<String>,
    /// Whether jobs may run as root. Off unless set.
    pub allow_root_jobs: bool,
    /// Seconds between SIGTERM and SIGKILL when a running job is cancelled.
    pub kill_grace_seconds: u64,
    /// Command run (by `/bin/sh -c`) for the `checkpoint` action, with
    /// `DROVER_JOB_ID` and `DROVER_JOB_PID` in its environment.
    pub checkpoint_command: Option<String>,
    /// Credentials known before any job names them.
    pub credentials: ConfiguredCredentials,
    /// The program that shepherds each job (`<program> job-shepherd`): this `drover`
    /// binary unless set (tests, which run the service inside a test binary, set it).
    pub shepherd: Option<PathBuf>,
    /// Queue order, backfill and preemption (`[scheduler.policy]`).
    pub policy: Policy,
    /// What one ordinary user may ask (`[scheduler.limits]`).
    pub limits: Limits,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        let engine = SchedConfig::default();
        SchedulerConfig {
            enable_proxy: false,
            proxy_users: Vec::new(),
            enable_job_arrays: false,
            name: engine.name,
            execution_user: None,
            allow_root_jobs: false,
            kill_grace_seconds: engine.kill_grace_seconds,
            checkpoint_command: None,
            credentials: ConfiguredCredentials::default(),
            shepherd: None,
            policy: Policy::default(),
            limits: Limits::default(),
        }
    }
}

impl SchedulerConfig {
    /// The engine's configuration, with the nodes to schedule on.
    pub fn engine(&self, nodes: &[NodeConfig]) -> SchedConfig {
        SchedConfig {
            name: self.name.clone(),
            nodes: nodes.to_vec(),
            execution_user: self.execution_user.clone(),
            allow_root_jobs: self.allow_root_jobs,
            kill_grace_seconds: self.kill_grace_seconds,
            checkpoint_command: self.checkpoint_command.clone(),
            credentials: self.credentials.clone(),
            policy: self.policy.clone(),
            limits: self.limits.clone(),
            ..SchedConfig::default()
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".into(),
            base_url: String::new(),
            data_dir: PathBuf::from("data"),
            store: None,
            time_zone: None,
            max_body_bytes: 10 * 1024 * 1024,
            login_cache_seconds: 60,
            header_timeout_seconds: 30,
            idle_connection_seconds: 10,
            max_connections: 4096,
            max_connections_per_source: 256,
            body_timeout_seconds: 60,
            list_budget_ms: 2000,
            admin_user: "admin".into(),
            scheduler: SchedulerConfig::default(),
            users: Vec::new(),
            ldap: None,
            access: AccessConfig::default(),
            nodes: Vec::new(),
            events: EventsConfig::default(),
            retention: Default::default(),
            job_templates: Vec::new(),
            standing_reservations: Vec::new(),
            accounting: AccountingConfig::default(),
            cloud: CloudConfig::default(),
            plugins: PluginsConfig::default(),
            resource_manager: ResourceManagerConfig::default(),
            high_availability: HighAvailabilityConfig::default(),
            idempotency: IdempotencyConfig::default(),
            oauth: OAuthConfig::default(),
        }
    }
}

/// Sets `key` (dotted) in `table` to the environment value `raw`: numbers and booleans
/// as such, comma lists for list keys, strings otherwise.
fn set(table: &mut toml::Table, key: &str, raw: &str) {
    let (section, name) = match key.split_once('.') {
        Some((section, name)) => (Some(section), name),
        None => (None, key),
    };
    let value = if name == "proxy_users" {
        toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.into()))
                .collect(),
        )
    } else if let Ok(n) = raw.parse::<i64>() {
        toml::Value::Integer(n)
    } else {
        toml::Value::String(raw.into())
    };
    let target = match section {
        None => table,
        Some(section) => {
            let entry = table
                .entry(section)
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if !entry.is_table() {
                *entry = toml::Value::Table(toml::Table::new());
            }
            entry.as_table_mut().expect("just made a table")
        }
    };
    target.insert(name.into(), value);
}

impl Config {
    /// Reads `file` (when given), applies the environment overrides `env` reports, and
    /// checks the result.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, String> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                text.parse::<toml::Table>()
                    .map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => toml::Table::new(),
        };
        for (variable, key) in ENVIRONMENT {
            if let Some(value) = env(variable).filter(|v| !v.is_empty()) {
                set(&mut table, key, &value);
            }
        }
        let config: Config = Config::deserialize(table).map_err(|e| {
            let place = file
                .map(|p| p.display().to_string())
                .unwrap_or("configuration".into());
            format!("{place}: {e}")
        })?;
        config.validate()?;
        Ok(config)
    }

    /// The configuration with its relative paths made absolute from the current
    /// directory, as the service sees them once: guests, shepherds and the sandbox are
    /// started elsewhere and need paths that mean the same there.
    pub fn with_absolute_paths(mut self) -> Result<Config, String> {
        let absolute = |path: &mut PathBuf| -> Result<(), String> {
            *path = std::path::absolute(&*path)
                .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
            Ok(())
        };
        absolute(&mut self.data_dir)?;
        if let Some(dir) = self.cloud.image_dir.as_mut() {
            absolute(dir)?;
        }
        if let Some(file) = self.events.log_file.as_mut() {
            absolute(file)?;
        }
        if let Some(dir) = self.retention.archive_dir.as_mut() {
            absolute(dir)?;
        }
        for dir in &mut self.plugins.native_directories {
            absolute(dir)?;
        }
        Ok(self)
    }

    pub fn validate(&self) -> Result<(), String> {
        self.listen_address()?;
        self.normalized_base_url()?;
        self.dates()?;
        if self.max_body_bytes == 0 {
            return Err("max_body_bytes must be positive".into());
        }
        if self.list_budget_ms == 0 {
            return Err("list_budget_ms must be positive".into());
        }
        if self.retention.batch == 0 || self.retention.every_seconds == 0 {
            return Err("[retention] batch and every_seconds must be positive".into());
        }
        if self.header_timeout_seconds == 0
            || self.body_timeout_seconds == 0
            || self.idle_connection_seconds == 0
        {
            return Err("header_timeout_seconds, body_timeout_seconds and \
                 idle_connection_seconds must be positive"
                .into());
        }
        if !(1..=MAX_LOGIN_WINDOW).contains(&self.access.failed_login_window_seconds) {
            return Err(format!(
                "[access] failed_login_window_seconds must be from 1 to {MAX_LOGIN_WINDOW} (a day)"
            ));
        }
        if self.max_connections == 0 || self.max_connections_per_source == 0 {
            return Err("max_connections and max_connections_per_source must be positive".into());
        }
        drover_auth::users::validate_name(&self.admin_user).map_err(|e| e.to_string())?;
        for user in &self.users {
            user.validate().map_err(|e| e.to_string())?;
        }
        self.event_log()?;
        self.templates()?;
        self.validate_scheduler()
    }

    /// With `[high_availability]`: a store the servers share, and an address others
    /// reach this one at. Checked at launch, once command-line flags have been applied.
    pub fn check_high_availability(&self) -> Result<(), String> {
        if !self.high_availability.enabled {
            return Ok(());
        }
        if !self
            .store
            .as_deref()
            .is_some_and(|s| s.starts_with("postgres"))
        {
            return Err(
                "high_availability needs a PostgreSQL store the servers share \
                 (store = \"postgres://...\")"
                    .into(),
            );
        }
        self.advertised_url(self.listen_address()?).map(drop)
    }

    /// Where the other servers of a highly available group reach this one, listening
    /// on `address`.
    pub fn advertised_url(&self, address: SocketAddr) -> Result<String, String> {
        if let Some(url) = &self.high_availability.advertise_url {
            let address = url.strip_prefix("http://").unwrap_or_default();
            if address.is_empty() || address.contains('/') {
                return Err(format!(
                    "high_availability.advertise_url must be http://host:port, not '{url}'"
                ));
            }
            return Ok(url.clone());
        }
        if address.ip().is_unspecified() {
            return Err(format!(
                "high_availability.advertise_url is needed: the listen address {address} \
                 does not say where other servers reach this one"
            ));
        }
        Ok(format!("http://{address}"))
    }

    fn validate_scheduler(&self) -> Result<(), String> {
        if let Some(problem) = self.accounting.problems().into_iter().next() {
            return Err(problem);
        }
        let mut seen_ids = std::collections::HashSet::new();
        for standing in &self.standing_reservations {
            if let Some(problem) = standing.problem() {
                return Err(problem);
            }
            if !seen_ids.insert(&standing.id) {
                return Err(format!(
                    "standing reservation '{}' is named twice",
                    standing.id
                ));
            }
            if !self.nodes.is_empty()
                && let Some(host) = standing
                    .hosts
                    .iter()
                    .find(|h| !self.nodes.iter().any(|n| &n.id == *h))
            {
                return Err(format!(
                    "standing reservation '{}': no node '{host}' in [[nodes]]",
                    standing.id
                ));
            }
        }
        if let Some(problem) = self.scheduler.limits.problems().into_iter().next() {
            return Err(format!("scheduler.limits.{problem}"));
        }
        let policy = &self.scheduler.policy;
        if policy.fairshare_half_life <= 0 {
            return Err(
                "scheduler.policy.fairshare_half_life must be a positive number of seconds".into(),
            );
        }
        let w = &policy.weights;
        if ![
            w.user_priority,
            w.queue_minutes,
            w.expansion,
            w.narrow_request,
            w.short_request,
            w.fairshare,
            policy.oldest_after_expansion,
        ]
        .iter()
        .chain(w.qos.values())
        .all(|v| v.is_finite())
        {
            return Err(
                "scheduler.policy: every weight and oldest_after_expansion must be a finite number"
                    .into(),
            );
        }
        let name = &self.scheduler.name;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        {
            return Err(format!(
                "scheduler.name: '{name}' must be letters, digits, - and _ (job ids are <name>.<n>)"
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for node in &self.nodes {
            if node.id.is_empty()
                || !node
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(format!(
                    "nodes: '{}' is not a usable node id (letters, digits, - _ .)",
                    node.id
                ));
            }
            if !seen.insert(&node.id) {
                return Err(format!("nodes: '{}' is configured twice", node.id));
            }
            if node.processors == 0 {
                return Err(format!("nodes: '{}' needs at least one processor", node.id));
            }
        }
        Ok(())
    }

    pub fn listen_address(&self) -> Result<SocketAddr, String> {
        self.listen
            .parse()
            .map_err(|_| format!("listen: '{}' is not an address:port", self.listen))
    }

    /// The prefix as the router uses it: empty, or `/a/b` without a trailing slash.
    pub fn normalized_base_url(&self) -> Result<String, String> {
        let trimmed = self.base_url.trim_end_matches('/');
        if trimmed.is_empty() {
            return Ok(String::new());
        }
        let valid = trimmed.starts_with('/')
            && !trimmed.contains("//")
            && trimmed
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.' | '~'));
        if valid {
            Ok(trimmed.to_string())
        } else {
            Err(format!(
                "base_url: '{}' must be a path such as /mws (letters, digits, - _ . ~)",
                self.base_url
            ))
        }
    }

    /// Wire dates with the configured zone, or the machine's.
    pub fn dates(&self) -> Result<WireDates, String> {
        let zone = match &self.time_zone {
            Some(zone) => zone.clone(),
            None => drover_domain::dates::system_zone_name(),
        };
        WireDates::for_zone(&zone).map_err(|e| format!("time_zone: {e}"))
    }

    /// The images directory (`[cloud] image_dir`, else `<data_dir>/images`).
    pub fn image_dir(&self) -> PathBuf {
        self.cloud
            .image_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("images"))
    }

    /// Where the store is: the PostgreSQL URL, or the SQLite file in the data directory.
    pub fn store_location(&self) -> String {
        match &self.store {
            Some(url) => url.clone(),
            None => self.data_dir.join("drover.db").display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn no_configuration_at_all_is_a_working_configuration() {
        let config = Config::load(None, no_env).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080");
        assert_eq!(config.normalized_base_url().unwrap(), "");
        assert!(!config.scheduler.enable_proxy);
        assert!(config.store_location().ends_with("drover.db"));
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\nbase_url = \"/mws/\"\n[scheduler]\nENABLEPROXY = \"TRUE\"\nproxy_users = [\"root\"]\n",
        )
        .unwrap();
        let config = Config::load(Some(&path), no_env).unwrap();
        assert_eq!(config.listen, "127.0.0.1:9000");
        assert_eq!(config.normalized_base_url().unwrap(), "/mws");
        assert!(config.scheduler.enable_proxy);
        let env = |name: &str| match name {
            "DROVER_LISTEN" => Some("0.0.0.0:7000".to_string()),
            "DROVER_ENABLEPROXY" => Some("false".to_string()),
            "DROVER_PROXY_USERS" => Some("a, b".to_string()),
            "DROVER_MAX_BODY_BYTES" => Some("1000".to_string()),
            "DROVER_SCHEDULER_EVENTS" => Some("false".to_string()),
            _ => None,
        };
        assert!(config.events.scheduler, "on by default");
        let config = Config::load(Some(&path), env).unwrap();
        assert!(!config.events.scheduler);
        assert_eq!(config.listen, "0.0.0.0:7000");
        assert!(!config.scheduler.enable_proxy);
        assert_eq!(config.scheduler.proxy_users, ["a", "b"]);
        assert_eq!(config.max_body_bytes, 1000);
    }

    #[test]
    fn guests_preparation_and_acceleration_have_environment_overrides() {
        let config = Config::load(None, no_env).unwrap();
        assert!(config.cloud.prepare_guest_image);
        assert_eq!(config.cloud.accel, AccelChoice::Auto);
        let env = |name: &str| match name {
            "DROVER_PREPARE_GUEST_IMAGE" => Some("false".to_string()),
            "DROVER_ACCEL" => Some("tcg".to_string()),
            _ => None,
        };
        let config = Config::load(None, env).unwrap();
        assert!(!config.cloud.prepare_guest_image);
        assert_eq!(config.cloud.accel, AccelChoice::Tcg);
        let wrong = |name: &str| (name == "DROVER_PREPARE_GUEST_IMAGE").then(|| "no".to_string());
        let error = Config::load(None, wrong).unwrap_err();
        assert!(error.contains("TRUE or FALSE"), "{error}");
    }

    #[test]
    fn idempotency_and_oauth_sections_load() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.toml");
        std::fs::write(
            &path,
            "[idempotency]\nwindow_seconds = 60\nmax_keys_per_user = 5\n\
             [oauth]\ntoken_seconds = 120\nmax_tokens_per_user = 2\n\
             [[oauth.clients]]\nid = \"portal\"\nsecret_hash = \"$argon2id$x\"\n\
             principal = \"svc\"\n",
        )
        .unwrap();
        let config = Config::load(Some(&path), no_env).unwrap();
        assert_eq!(config.idempotency.window_seconds, 60);
        assert_eq!(config.idempotency.max_keys_per_user, 5);
        assert_eq!(config.oauth.token_seconds, 120);
        assert_eq!(config.oauth.max_tokens_per_user, 2);
        assert_eq!(config.oauth.clients[0].principal.as_deref(), Some("svc"));
        let defaults = Config::default();
        assert_eq!(defaults.idempotency.window_seconds, 86400);
        assert!(defaults.oauth.clients.is_empty());
        std::fs::write(&path, "[[oauth.clients]]\nid = \"p\"\nsecret = \"plain\"\n").unwrap();
        let error = Config::load(Some(&path), no_env).unwrap_err();
        assert!(error.contains("secret"), "{error}");
    }

    #[test]
    fn mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.toml");
        for (text, expected) in [
            ("lisen = \"x\"", "unknown field `lisen`"),
            ("listen = \"nowhere\"", "listen"),
            ("base_url = \"mws\"", "base_url"),
            ("time_zone = \"Mars/Olympus\"", "time_zone"),
            ("[scheduler]\nENABLEPROXY = \"maybe\"", "TRUE or FALSE"),
            ("[[users]]\nname = \"a\"\npassword_hash = \"plain\"", "hash"),
            ("listen = ", "drover.toml"),
        ] {
            std::fs::write(&path, text).unwrap();
            let error = Config::load(Some(&path), no_env).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}

#[cfg(test)]
mod example {
    /// The example configuration at the top of the repository stays loadable.
    #[test]
    fn how_vms_are_charged_is_configured_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drover.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            super::Config::load(Some(&path), |_| None)
        };
        let config = load("[accounting]\nenabled = true\n").unwrap();
        assert_eq!(config.accounting.vm_charge_interval(), 3600);
        assert_eq!(
            config.accounting.vm_when_dry,
            drover_accounting::VmWhenDry::PowerOff
        );
        let config =
            load("[accounting]\nvm_charge_interval_seconds = 60\nvm_when_dry = \"refuse\"\n")
                .unwrap();
        assert_eq!(config.accounting.vm_charge_interval(), 60);
        assert_eq!(
            config.accounting.vm_when_dry,
            drover_accounting::VmWhenDry::Refuse
        );
        let error = load("[accounting]\nvm_when_dry = \"destroy\"\n").unwrap_err();
        assert!(error.contains("power-off"), "{error}");
        let error = load("[accounting]\nvm_charge_interval_seconds = 0\n").unwrap_err();
        assert!(error.contains("vm_charge_interval_seconds"), "{error}");
    }

    #[test]
    fn the_example_configuration_loads() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../drover.example.toml");
        let config = super::Config::load(Some(std::path::Path::new(path)), |_| None).unwrap();
        assert_eq!(config.listen, "127.0.0.1:8080");
    }
}
