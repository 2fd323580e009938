//! The Drover service: configuration and wiring. `main.rs` is the command line around it;
//! tests call [`launch`] directly on a listener bound to port 0.

pub mod config;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use drover_api::access::AccessControl;
use drover_api::{AppState, BuildInfo, Monitoring, ProxySettings, Routes, Services, Settings};
use drover_auth::access_store::AccessStore;
use drover_auth::throttle::LoginThrottle;
use drover_auth::{Authenticator, User, password, users};
use drover_domain::dates::Timestamp;
use drover_monitor::{EventRecorder, Reports};
use drover_sched::clock::SystemClock;
use drover_sched::events::{DiscardEvents, EventSink};
use drover_sched::rm::ResourceManager;
use drover_sched::rm::local::LocalResourceManager;
use drover_sched::{EngineParts, Scheduler};
use drover_store::DocumentStore;
use tokio::net::TcpListener;

pub use config::Config;

/// What this binary was built from (recorded by `build.rs`).
pub fn build_info() -> BuildInfo {
    BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        build: env!("DROVER_BUILD_NUMBER").into(),
        build_date: env!("DROVER_BUILD_EPOCH")
            .parse()
            .ok()
            .and_then(|s| Timestamp::from_second(s).ok())
            .unwrap_or(Timestamp::UNIX_EPOCH),
        revision: env!("DROVER_REVISION").into(),
    }
}

/// How the service tells its operator what happened at start.
pub struct Started {
    pub address: std::net::SocketAddr,
    /// The administrator generated at this start, if any (its password is shown once).
    pub generated_admin: Option<GeneratedAdmin>,
    /// What was found for VMs: the provisioner, QEMU's accelerator, the default image.
    pub guests: drover_control::vm_host::GuestsReport,
}

/// An administrator made at first start, and its password in clear (never stored).
pub struct GeneratedAdmin {
    pub name: String,
    pub password: String,
}

/// The configured users plus those of the data directory. With no administrator among
/// them, one is generated: its hash is saved in `users.toml`, its password returned.
fn load_users(config: &Config) -> Result<(Vec<User>, Option<GeneratedAdmin>), String> {
    let mut all = config.users.clone();
    all.extend(users::load(&config.data_dir).map_err(|e| e.to_string())?);
    if all.iter().any(|u| u.admin) {
        return Ok((all, None));
    }
    let secret = password::generate();
    let admin = User {
        name: config.admin_user.clone(),
        password_hash: password::hash(&secret, password::Cost::Standard),
        admin: true,
    };
    if all.iter().any(|u| u.name == admin.name) {
        return Err(format!(
            "no administrator is configured, and the user '{}' exists without being one; \
             run `drover user add {} --admin` to make one",
            admin.name, admin.name
        ));
    }
    users::save(&config.data_dir, admin.clone()).map_err(|e| e.to_string())?;
    all.push(admin);
    Ok((
        all,
        Some(GeneratedAdmin {
            name: config.admin_user.clone(),
            password: secret,
        }),
    ))
}

/// Before `drover serve` listens, as root and unless `[cloud] prepare_guest_image =
/// false`: installs QEMU and builds the default guest image where either is missing (a
/// fresh machine's first start), saying so in one line. When that fails the service
/// starts all the same, and says at start that VMs cannot be made and what fixes it.
pub fn prepare_guests(config: &Config) {
    use drover_control::guest_image;
    // SAFETY: geteuid has no preconditions.
    if !config.cloud.prepare_guest_image || unsafe { libc::geteuid() } != 0 {
        return;
    }
    let image_dir = config.image_dir();
    let (Some(missing), Some(dir)) = (
        guest_image::missing(&config.cloud, &image_dir),
        guest_image::default_image_dir(&config.cloud, &image_dir),
    ) else {
        return;
    };
    println!(
        "drover: {} from the distribution's packages into {} before listening (once; \
         [cloud] prepare_guest_image = false skips it)",
        missing.doing(),
        dir.display()
    );
    if let Err(why) = guest_image::prepare(&dir) {
        eprintln!("drover: warning: {why}");
    }
}

/// What [`prepare`] builds.
struct Prepared {
    state: AppState,
    generated: Option<GeneratedAdmin>,
    /// The event recorder's thread: it ends once every handle is dropped, after
    /// storing what was sent.
    recorder: std::thread::JoinHandle<()>,
}

/// Prepares the data directory and opens the store. Blocking: run it off the async
/// runtime.
fn open_store(config: &Config) -> Result<Arc<dyn DocumentStore>, String> {
    // Also with PostgreSQL: users.toml, the event log and the job spools live there.
    let sqlite = config
        .store
        .is_none()
        .then(|| config.data_dir.join("drover.db"));
    for warning in drover_control::data_dir::prepare_data_dir(&config.data_dir, sqlite.as_deref())?
    {
        eprintln!("drover: warning: {warning}");
    }
    Ok(drover_store::open(&config.store_location())
        .map_err(|e| format!("cannot open the store: {e}"))?
        .into())
}

/// Builds the shared state over `store`. Blocking (store connections, argon2): run it
/// off the async runtime. The PostgreSQL client must also be dropped off it, which
/// running here ensures when a later step fails.
fn prepare(
    config: &Config,
    store: Arc<dyn DocumentStore>,
    active_server: Option<String>,
    accel_probe: drover_control::vm_host::AccelProbe,
) -> Result<Prepared, String> {
    let (users, generated) = load_users(config)?;
    let auth = Authenticator::new(users, Duration::from_secs(config.login_cache_seconds))
        .map_err(|e| e.to_string())?;
    let (events, recorder) = EventRecorder::start(store.clone(), config.event_log()?)
        .map_err(|e| format!("cannot start the event recorder: {e}"))?;
    let reports =
        Reports::open(store.clone()).map_err(|e| format!("cannot open the reports: {e}"))?;
    let sink: Arc<dyn EventSink> = if config.events.scheduler {
        Arc::new(events.clone())
    } else {
        Arc::new(DiscardEvents)
    };
    let ledger = Arc::new(
        drover_accounting::Ledger::open(config.accounting.clone(), store.clone())
            .map_err(|e| format!("cannot open the accounting ledger: {e}"))?,
    );
    let throttle = LoginThrottle::new(
        config.access.max_failed_logins,
        Duration::from_secs(config.access.failed_login_window_seconds),
    );
    let known_sources = drover_auth::known_sources::KnownSources::open(store.clone())
        .map_err(|e| format!("cannot open the logins' sources: {e}"))?;
    let access = AccessStore::open(store.clone())
        .and_then(|stored| {
            AccessControl::load(
                stored,
                config.access.default_roles.clone(),
                throttle,
                Arc::new(known_sources),
            )
        })
        .map_err(|e| format!("cannot load the roles and principals: {e}"))?;
    let images = Arc::new(
        drover_cloud::Images::open(store.clone(), config.image_dir())
            .map_err(|e| format!("cannot open the images: {e}"))?,
    );
    if let Some(said) =
        drover_control::vm_host::register_default_image(&images, &config.cloud.default_image)?
    {
        eprintln!("drover: {said}");
    }
    let service_templates = Arc::new(
        drover_cloud::ServiceTemplates::open(store.clone())
            .map_err(|e| format!("cannot open the service templates: {e}"))?,
    );
    let service_records = Arc::new(
        drover_cloud::ServiceRecords::open(store.clone())
            .map_err(|e| format!("cannot open the services: {e}"))?,
    );
    let (tokens, request_keys) = open_tokens_and_keys(config, &store)?;
    let (vm_host, guests) = drover_control::vm_host::vm_host(
        &config.cloud,
        &config.data_dir,
        images.clone(),
        accel_probe,
        slurm_site(config, store.as_ref())?,
    );
    let scheduler = start_scheduler(config, store.clone(), sink, ledger.clone(), vm_host)?;
    let auth = Arc::new(auth);
    let access = Arc::new(access);
    let reports = Arc::new(reports);
    let job_templates = Arc::new(config.templates()?);
    let hosts = drover_control::plugin_host::PluginHosts {
        scheduler: scheduler.clone(),
        events: events.clone(),
        reports: reports.clone(),
        people: Arc::new(drover_api::People {
            auth: auth.clone(),
            access: access.clone(),
            directory: config.ldap.clone(),
        }),
        runtime: tokio::runtime::Handle::current(),
        config: config.plugins.clone(),
        job_templates: job_templates.clone(),
    };
    let (plugins, warnings) = drover_plugins::registry::Plugins::open(
        store.clone(),
        Arc::new(hosts),
        drover_plugins::script::Limits::default(),
    )
    .map_err(|e| format!("cannot open the plugins: {e}"))?;
    for warning in warnings {
        eprintln!("drover: warning: {warning}");
    }
    let mut settings = settings(config, active_server, job_templates)?;
    settings.cloud.guests = guests;
    let monitoring = Monitoring { events, reports };
    let state = AppState::new(
        Services {
            store,
            auth,
            access,
            scheduler,
            monitoring,
            images,
            service_templates,
            service_records,
            service_wake: Arc::new(tokio::sync::Notify::new()),
            plugins: Arc::new(plugins),
            tokens,
            request_keys,
        },
        settings,
    )
    .with_accounting(ledger);
    Ok(Prepared {
        state,
        generated,
        recorder,
    })
}

/// The OAuth clients' secrets checked, and the stores of bearer tokens and idempotency
/// keys opened.
fn open_tokens_and_keys(
    config: &Config,
    store: &Arc<dyn DocumentStore>,
) -> Result<
    (
        Arc<drover_auth::tokens::Tokens>,
        Arc<drover_auth::request_keys::RequestKeys>,
    ),
    String,
> {
    for client in &config.oauth.clients {
        drover_auth::password::validate(&client.secret_hash)
            .map_err(|e| format!("[[oauth.clients]] '{}': secret_hash: {e}", client.id))?;
    }
    let tokens = Arc::new(
        drover_auth::tokens::Tokens::open(
            store.clone(),
            drover_auth::tokens::TokenSettings {
                lifetime: Duration::from_secs(config.oauth.token_seconds),
                max_per_user: config.oauth.max_tokens_per_user,
            },
        )
        .map_err(|e| format!("cannot open the OAuth tokens: {e}"))?,
    );
    let request_keys = Arc::new(
        drover_auth::request_keys::RequestKeys::open(
            store.clone(),
            drover_auth::request_keys::RequestKeySettings {
                window: Duration::from_secs(config.idempotency.window_seconds),
                max_per_caller: config.idempotency.max_keys_per_user,
            },
        )
        .map_err(|e| format!("cannot open the idempotency keys: {e}"))?,
    );
    Ok((tokens, request_keys))
}

/// What the interface's handlers are told of the configuration.
fn settings(
    config: &Config,
    active_server: Option<String>,
    job_templates: Arc<drover_sched::template::JobTemplates>,
) -> Result<Settings, String> {
    Ok(Settings {
        base_url: config.normalized_base_url()?,
        dates: config.dates()?,
        max_body_bytes: config.max_body_bytes,
        body_timeout: Duration::from_secs(config.body_timeout_seconds),
        list_budget: Duration::from_millis(config.list_budget_ms),
        max_submission_bytes: config.scheduler.limits.max_submission_bytes,
        proxy: ProxySettings {
            enabled: config.scheduler.enable_proxy,
            allowed_users: config.scheduler.proxy_users.clone(),
        },
        build: build_info(),
        directory: config.ldap.clone(),
        job_templates,
        job_arrays: config.scheduler.enable_job_arrays,
        cloud: drover_api::CloudSettings {
            default_image: config.cloud.default_image.clone(),
            action_types: config
                .cloud
                .pending_actions
                .mappings
                .iter()
                .map(|(template, kind)| (template.clone(), kind.clone()))
                .collect(),
            display_generic: config.cloud.pending_actions.display_generic,
            user_service_max_count: config.scheduler.limits.user_service_max_count,
            guests: Default::default(),
        },
        active_server,
        oauth_clients: config.oauth.clients.clone(),
        event_streams: drover_api::event_stream::StreamLimits {
            per_user: config.events.max_streams_per_user,
            total: config.events.max_streams,
            heartbeat: Duration::from_secs(config.events.stream_heartbeat_seconds.max(1)),
        },
    })
}

/// Deletes expired bearer tokens and idempotency keys, at start and every ten minutes
/// (both are also refused once expired, purged or not), and the logins' sources not
/// seen for half a year.
async fn purge_expired(state: AppState) {
    let mut every = tokio::time::interval(Duration::from_secs(600));
    loop {
        every.tick().await;
        let (tokens, keys) = (state.tokens().clone(), state.request_keys().clone());
        let sources = state.access().known_sources().clone();
        let purged = tokio::task::spawn_blocking(move || {
            tokens.purge_expired()?;
            keys.purge_expired()?;
            sources.purge_old()
        })
        .await;
        if let Ok(Err(e)) = purged {
            eprintln!("drover: warning: cannot purge expired tokens and keys: {e}");
        }
    }
}

/// Exports, then removes, the history past its configured age (`[retention]`), at start
/// and every `every_seconds`; nothing when no age is configured.
async fn keep_history(
    state: AppState,
    config: drover_monitor::retention::RetentionConfig,
    data_dir: std::path::PathBuf,
) {
    if !config.removes_anything() {
        return;
    }
    let archive = config
        .archive_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("archive"));
    let mut every = tokio::time::interval(Duration::from_secs(config.every_seconds));
    let retention = Arc::new(drover_monitor::retention::Retention::new(
        state.store().clone(),
        config,
        archive,
    ));
    loop {
        every.tick().await;
        let retention = retention.clone();
        let pass = tokio::task::spawn_blocking(move || retention.pass(Timestamp::now())).await;
        match pass {
            Ok(Ok(removed)) if removed != Default::default() => eprintln!(
                "drover: retention: exported and removed {} events, {} audit events, {} samples",
                removed.events, removed.audit, removed.samples
            ),
            Ok(Err(e)) => eprintln!("drover: warning: retention: {e}"),
            _ => {}
        }
    }
}

/// Recovers the scheduler's state from the store and starts its engine, with the
/// configured resource manager: the local one (jobs are processes of this machine) or
/// Slurm (its nodes, unless `[[nodes]]` names them).
fn start_scheduler(
    config: &Config,
    store: Arc<dyn DocumentStore>,
    events: Arc<dyn EventSink>,
    ledger: Arc<drover_accounting::Ledger>,
    vm_host: Arc<dyn drover_sched::vm_host::VmHost>,
) -> Result<Scheduler, String> {
    let (resource_manager, nodes) = match config.resource_manager.kind {
        config::ResourceManagerKind::Local => {
            (local_resource_manager(config), config.nodes.clone())
        }
        config::ResourceManagerKind::Slurm => slurm_resource_manager(config, store.as_ref())?,
    };
    let parts = EngineParts {
        store,
        resource_manager,
        clock: Arc::new(SystemClock),
        events,
        accountant: Arc::new(drover_control::accounting::LedgerAccountant(ledger)),
        vm_host,
    };
    let mut engine = config.scheduler.engine(&nodes);
    engine.standing_reservations = config.standing_reservations.clone();
    Scheduler::start(engine, parts).map_err(|e| format!("cannot start the scheduler: {e}"))
}

fn local_resource_manager(config: &Config) -> drover_sched::engine::MakeResourceManager {
    let spool = config.data_dir.join("spool");
    // This very program, even after its file is replaced by an upgrade.
    let this_program = std::path::PathBuf::from("/proc/self/exe");
    let (shepherd, guest_program) = match &config.scheduler.shepherd {
        Some(configured) => (configured.clone(), configured.clone()),
        None => (default_shepherd(), this_program),
    };
    Box::new(move |notify| {
        LocalResourceManager::new(
            spool.clone(),
            notify,
            shepherd.clone(),
            guest_program.clone(),
        )
        .map(|rm| Arc::new(rm) as Arc<dyn ResourceManager>)
        .map_err(|e| format!("cannot prepare the job spool {}: {e}", spool.display()))
    })
}

/// The program every job's shepherd runs: `drover-shepherd` beside this program (a
/// small one, which starts in a fifth of the time) when it was built from the same
/// shepherd source as this one, else this program itself (`drover job-shepherd`).
fn default_shepherd() -> std::path::PathBuf {
    let this_program = std::path::PathBuf::from("/proc/self/exe");
    let Some(beside) = std::env::current_exe()
        .ok()
        .map(|program| program.with_file_name("drover-shepherd"))
        .filter(|shepherd| shepherd.is_file())
    else {
        return this_program;
    };
    let built_from = std::process::Command::new(&beside)
        .arg(drover_shepherd::SOURCE_ARGUMENT)
        .env_clear()
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    if built_from.as_deref() == Some(drover_shepherd::SOURCE) {
        return beside;
    }
    eprintln!(
        "drover: warning: {} was built from another version of the shepherd; jobs are \
         started by this program instead (rebuild both: cargo build --release -p drover)",
        beside.display()
    );
    this_program
}

/// Where Slurm is, as `[resource_manager]` says, and this service's job names.
fn slurm_config(
    config: &Config,
    store: &dyn DocumentStore,
) -> Result<drover_sched::rm::slurm::SlurmConfig, String> {
    let mut slurm = drover_sched::rm::slurm::SlurmConfig::new(config.data_dir.join("slurm"));
    slurm.bin_dir = config.resource_manager.slurm_bin_dir.clone();
    slurm.slurm_conf = config.resource_manager.slurm_conf.clone();
    slurm.partition = config.resource_manager.slurm_partition.clone();
    slurm.node_poll = Duration::from_secs(config.resource_manager.slurm_node_poll_seconds.max(1));
    // Jobs are named after the store's identity: services sharing a cluster (even under
    // one scheduler name) never take each other's jobs for their own.
    slurm.service_identity = drover_store::service_identity(store)
        .map_err(|e| format!("cannot read the service identity from the store: {e}"))?;
    slurm.guest_user = Some(config.cloud.guest_user.clone());
    Ok(slurm)
}

/// With the Slurm resource manager, the cluster VM guests run on.
fn slurm_site(
    config: &Config,
    store: &dyn DocumentStore,
) -> Result<Option<drover_control::vm_host::SlurmSite>, String> {
    if config.resource_manager.kind != config::ResourceManagerKind::Slurm {
        return Ok(None);
    }
    let slurm = slurm_config(config, store)?;
    Ok(Some(drover_control::vm_host::SlurmSite {
        job_name_prefix: slurm.guest_job_name_prefix(),
        bin_dir: slurm.bin_dir,
        slurm_conf: slurm.slurm_conf,
        partition: slurm.partition,
    }))
}

/// The Slurm resource manager, and the nodes: those of `[[nodes]]`, else Slurm's.
fn slurm_resource_manager(
    config: &Config,
    store: &dyn DocumentStore,
) -> Result<
    (
        drover_sched::engine::MakeResourceManager,
        Vec<drover_sched::node::NodeConfig>,
    ),
    String,
> {
    use drover_sched::rm::slurm::{SlurmResourceManager, slurm_nodes};
    let mut slurm = slurm_config(config, store)?;
    // Slurm's nodes, when none are configured here. Those it gains later are added at a
    // refresh; while slurmctld does not answer, the service starts with the nodes it knew
    // (the store keeps what Slurm said of them) and jobs wait until it answers.
    slurm.describe_nodes = config.nodes.is_empty();
    let read = slurm_nodes(&slurm);
    let nodes = if !config.nodes.is_empty() {
        config.nodes.clone()
    } else {
        match &read {
            Ok(found) => {
                for problem in &found.problems {
                    eprintln!("drover: warning: a Slurm node was not read: {problem}");
                }
                if found.items.is_empty() {
                    eprintln!("drover: warning: Slurm reports no node (yet)");
                }
                found.items.iter().map(|n| n.config.clone()).collect()
            }
            Err(e) => {
                eprintln!(
                    "drover: warning: cannot read Slurm's nodes ({e}); starting with the nodes \
                     the store knows, and reading Slurm's again until it answers"
                );
                Vec::new()
            }
        }
    };
    let make: drover_sched::engine::MakeResourceManager = Box::new(move |notify| {
        SlurmResourceManager::with_nodes_read(slurm, notify, read)
            .map(|rm| Arc::new(rm) as Arc<dyn ResourceManager>)
            .map_err(|e| format!("cannot prepare the Slurm resource manager: {e}"))
    });
    Ok((make, nodes))
}

/// Serves the interface on `listener` until `shutdown` completes, then finishes the
/// requests in flight and flushes the store. `on_start` is told the address and any
/// generated administrator password before the first request is accepted.
pub async fn launch(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_start: impl FnOnce(Started),
) -> Result<(), String> {
    launch_with(
        config,
        drover_api::interface(),
        listener,
        shutdown,
        on_start,
    )
    .await
}

/// [`launch`] with a given set of routes (tests add routes of their own).
/// The connection bounds of `config`, within the open-file limit (raised to its hard
/// limit first): at most three quarters of it, the rest kept for the store, jobs and
/// guests.
fn connection_limits(config: &Config) -> drover_api::http::server::Limits {
    let mut max_total = config.max_connections;
    if let Some((given, raised)) = drover_shepherd::files_limit::raise() {
        let room = usize::try_from(raised / 4 * 3)
            .unwrap_or(usize::MAX)
            .max(16);
        if room < max_total {
            eprintln!(
                "drover: warning: at most {room} connections (max_connections is \
                 {max_total}, but open files are limited to {raised}; raise the hard limit, \
                 e.g. LimitNOFILE)"
            );
            max_total = room;
        }
        if given < raised {
            eprintln!("drover: open files limit raised from {given} to {raised}");
        }
    }
    drover_api::http::server::Limits {
        header_timeout: Duration::from_secs(config.header_timeout_seconds),
        idle_timeout: Duration::from_secs(config.idle_connection_seconds),
        write_timeout: Duration::from_secs(config.body_timeout_seconds),
        max_total,
        max_per_source: config.max_connections_per_source,
    }
}

pub async fn launch_with(
    config: Config,
    routes: Routes,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_start: impl FnOnce(Started),
) -> Result<(), String> {
    let config = config.with_absolute_paths()?;
    config.validate()?;
    config.check_high_availability()?;
    let limits = connection_limits(&config);
    // QEMU's accelerator is being decided meanwhile (a standby's before it takes over).
    let accel_probe = drover_control::vm_host::AccelProbe::start(&config.cloud);
    let mut shutdown = Box::pin(shutdown);
    let store = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || open_store(&config))
            .await
            .map_err(|e| e.to_string())??
    };
    let active_server = if config.high_availability.enabled {
        let address = listener.local_addr().map_err(|e| e.to_string())?;
        let me = drover_api::http::standby::Member {
            name: config
                .high_availability
                .server_name
                .clone()
                .unwrap_or_else(|| drover_api::http::standby::default_name(address.port())),
            url: config.advertised_url(address)?,
            base_url: config.normalized_base_url()?,
        };
        if !drover_api::http::standby::stand_by(store.clone(), &me, &listener, shutdown.as_mut())
            .await?
        {
            // Stopped while a standby: nothing was built, nothing to finish.
            tokio::task::spawn_blocking(move || drop(store))
                .await
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
        drover_api::http::standby::watch_lease(store.clone(), me.name.clone());
        Some(me.name)
    } else {
        None
    };
    let (retention, data_dir) = (config.retention.clone(), config.data_dir.clone());
    let Prepared {
        state,
        generated: generated_admin,
        recorder,
    } = tokio::task::spawn_blocking(move || prepare(&config, store, active_server, accel_probe))
        .await
        .map_err(|e| e.to_string())??;
    let services = tokio::spawn(
        drover_control::services::ServiceControl {
            records: state.service_records().clone(),
            scheduler: state.scheduler().clone(),
            events: state.events().clone(),
            wake: state.service_wake().clone(),
            job_templates: state.settings().job_templates.clone(),
        }
        .run(),
    );
    let plugins = state.plugins().clone();
    for failure in tokio::task::spawn_blocking(move || plugins.start_automatically())
        .await
        .map_err(|e| e.to_string())?
    {
        eprintln!("drover: warning: {failure}");
    }
    let plugin_loops = [
        tokio::spawn(drover_control::plugin_host::poll_loop(
            state.plugins().clone(),
        )),
        tokio::spawn(drover_control::plugin_host::event_loop(
            state.events().clone(),
            state.plugins().clone(),
        )),
        tokio::spawn(purge_expired(state.clone())),
        tokio::spawn(keep_history(state.clone(), retention, data_dir)),
    ];
    let app = drover_api::app(state.clone(), routes);
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    on_start(Started {
        address,
        generated_admin,
        guests: state.settings().cloud.guests.clone(),
    });
    // Open event streams never end by themselves: end them as shutdown begins, so that
    // their connections finish.
    let streams = state.event_streams().clone();
    let shutdown = async move {
        shutdown.await;
        streams.close_all();
    };
    drover_api::http::server::serve(listener, app, limits, shutdown)
        .await
        .map_err(|e| e.to_string())?;
    // The controller's next start resumes what it was doing.
    services.abort();
    let _ = services.await;
    for task in plugin_loops {
        task.abort();
        let _ = task.await;
    }
    // Running jobs keep running; the next start adopts them again.
    state.scheduler().shutdown().await;
    // The last reference to the store goes on a blocking thread: the PostgreSQL client
    // cannot be dropped on the async runtime.
    tokio::task::spawn_blocking(move || {
        let store = state.store().clone();
        drop(state);
        // The scheduler has stopped, so the state held the recorder's last handle.
        let _ = recorder.join();
        store.flush()
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("cannot flush the store: {e}"))
}
