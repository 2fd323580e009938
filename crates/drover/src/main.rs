//! The `drover` command: the service (`serve`, `user add`, `prepare-guests`,
//! `hash-password`, `replay`, `generate-trace`) and its command-line client (`jobs`, `submit`, ...), one clap tree
//! (`commands`). Run `drover --help`.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

mod client;
mod commands;

use clap::{CommandFactory, Parser};
use commands::{
    Cli, Command, ConfigFlags, PrepareGuestsArgs, ReplayArgs, ServiceFlags, TraceArgs, UserCommand,
};

use drover::{Config, GeneratedAdmin, Started};
use drover_auth::{User, password, users};

/// mimalloc (see `drover_alloc` for why, and how it is asked), metered: what a plugin's
/// script holds is counted on its thread (`drover_plugins::script`).
#[global_allocator]
static ALLOCATOR: drover_alloc::Metered<drover_alloc::Mimalloc> =
    drover_alloc::Metered(drover_alloc::Mimalloc);

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("drover: {message}");
    std::process::exit(1)
}

fn load_config(flags: &ServiceFlags) -> Config {
    let file = flags
        .config
        .clone()
        .or_else(|| std::env::var_os("DROVER_CONFIG").map(PathBuf::from));
    let mut config =
        Config::load(file.as_deref(), |name| std::env::var(name).ok()).unwrap_or_else(|e| fail(e));
    if let Some(listen) = &flags.listen {
        config.listen = listen.clone();
    }
    if let Some(dir) = &flags.data_dir {
        config.data_dir = dir.clone();
    }
    if let Some(store) = &flags.store {
        config.store = Some(store.clone());
    }
    if let Some(prefix) = &flags.base_url {
        config.base_url = prefix.clone();
    }
    config.validate().unwrap_or_else(|e| fail(e));
    config
}

/// The first line of standard input, without its line ending.
fn read_secret() -> String {
    if std::io::stdin().is_terminal() {
        eprint!("password: ");
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .unwrap_or_else(|e| fail(format!("cannot read standard input: {e}")));
    line.trim_end_matches(['\r', '\n']).to_string()
}

/// Completes on SIGTERM or SIGINT. The handlers are installed here, before the service
/// says it listens: a SIGTERM right after the banner must stop it cleanly, not kill it.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())
        .unwrap_or_else(|e| fail(format!("cannot handle SIGTERM: {e}")));
    let mut interrupt = signal(SignalKind::interrupt())
        .unwrap_or_else(|e| fail(format!("cannot handle SIGINT: {e}")));
    async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        println!("drover: shutting down (finishing requests in flight)");
    }
}

fn announce(config: &Config, started: Started) {
    let prefix = config.normalized_base_url().unwrap_or_default();
    let url = format!("http://{}{prefix}", started.address);
    let store = match &config.store {
        Some(_) => "postgresql".to_string(),
        None => format!("sqlite at {}", config.store_location()),
    };
    println!("drover listening on {url} (store: {store})");
    println!("{}", started.guests.summary());
    println!(
        "The dashboard: {url}/ in a browser; the client: drover --url {url} jobs \
         (drover --help lists its commands)"
    );
    match started.generated_admin {
        Some(GeneratedAdmin {
            name,
            password: secret,
        }) => {
            println!(
                "Generated the administrator '{name}' with the password: {secret}\n\
                 It is shown only this once; only its hash is kept in {}.\n\
                 {}\n\
                 Try: curl -u {name}:{secret} {url}/rest/diag/about",
                config.data_dir.join(users::USER_FILE).display(),
                whose_account_runs_jobs_of(config, &name),
            );
        }
        None => println!(
            "Log in with HTTP Basic as a configured user, e.g. curl -u {}:PASSWORD {url}/rest/diag/about \
             (forgot it? drover user add {} --admin)",
            config.admin_user, config.admin_user
        ),
    }
}

/// Whose system account the jobs of the API user `name` run as, and how to change it:
/// a newcomer's first job fails where that account cannot write the job's folder.
fn whose_account_runs_jobs_of(config: &Config, name: &str) -> String {
    use drover_sched::sysuser::SystemUser;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        let me = SystemUser::current().map_or_else(|| "this service's user".into(), |u| u.name);
        return format!("Jobs run as the service's own account, {me} (it does not run as root).");
    }
    if SystemUser::lookup(name).is_some() {
        return format!("The jobs of '{name}' run as its system account, {name}.");
    }
    let fallback = config
        .scheduler
        .execution_user
        .clone()
        .unwrap_or_else(|| "nobody".into());
    format!(
        "'{name}' has no system account: its jobs run as '{fallback}', which must be able to \
         write a job's folder ([scheduler] execution_user names another account; users with \
         a system account run jobs as themselves)."
    )
}

async fn serve(config: Config) {
    let config = config.with_absolute_paths().unwrap_or_else(|e| fail(e));
    let address = config.listen_address().unwrap_or_else(|e| fail(e));
    // QEMU and the default guest image, on a fresh machine: before the port opens, so
    // that the first VM asked for finds them.
    let prepared = config.clone();
    tokio::task::spawn_blocking(move || drover::prepare_guests(&prepared))
        .await
        .unwrap_or_else(|e| fail(e));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .unwrap_or_else(|e| fail(format!("cannot listen on {address}: {e}")));
    let shown = config.clone();
    let shutdown = shutdown_signal();
    drover::launch(config, listener, shutdown, |started| {
        announce(&shown, started)
    })
    .await
    .unwrap_or_else(|e| fail(e));
    println!("drover: stopped");
}

fn add_user(name: String, admin: bool, flags: ConfigFlags) {
    let config = load_config(&flags.into());
    if config.users.iter().any(|u| u.name == name) {
        fail(format!(
            "'{name}' is defined in the configuration file; change it there"
        ));
    }
    let mut secret = read_secret();
    let generated = secret.is_empty();
    if generated {
        secret = password::generate();
    }
    let user = User {
        name: name.clone(),
        password_hash: password::hash(&secret, password::Cost::Standard),
        admin,
    };
    users::save(&config.data_dir, user).unwrap_or_else(|e| fail(e));
    if generated {
        println!("{secret}");
    }
    eprintln!(
        "drover: saved '{name}'{} in {} (a running service reads it at its next start)",
        if admin { " (administrator)" } else { "" },
        config.data_dir.join(users::USER_FILE).display()
    );
}

fn prepare_guests_command(args: PrepareGuestsArgs) {
    use drover_control::guest_image;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        fail("prepare-guests installs packages and builds the image as root: run it with sudo");
    }
    let dir = match args.dir {
        Some(dir) => std::path::absolute(&dir)
            .unwrap_or_else(|e| fail(format!("cannot resolve {}: {e}", dir.display()))),
        None => {
            let config = load_config(&args.service.into())
                .with_absolute_paths()
                .unwrap_or_else(|e| fail(e));
            guest_image::default_image_dir(&config.cloud, &config.image_dir())
                .unwrap_or_else(|| fail("[cloud] default_image is empty: name the directory"))
        }
    };
    eprintln!(
        "drover: installing QEMU where it is missing and building the default guest image \
         into {} from the distribution's packages",
        dir.display()
    );
    let took = guest_image::prepare(&dir).unwrap_or_else(|e| fail(e));
    println!(
        "drover: the guest image is ready in {} ({:.0} s); a service registers it as its \
         default image at its next start",
        dir.display(),
        took.as_secs_f64()
    );
}

fn replay_command(args: ReplayArgs) {
    let options = commands::replay::ReplayOptions {
        processors: args.processors,
        nodes: args.nodes,
        perfect_estimates: args.perfect_estimates,
        without_fcfs: args.without_fcfs,
        loads: args.load,
    };
    let flags = ServiceFlags {
        config: args.config,
        ..ServiceFlags::default()
    };
    let policy = load_config(&flags).scheduler.policy;
    let done = match (&args.compare, &args.trace) {
        (Some(dir), _) => commands::replay::compare(dir, &options, &policy),
        (None, Some(trace)) => commands::replay::run(trace, &options, policy),
        (None, None) => Err("give a trace or --compare DIR".into()),
    };
    done.unwrap_or_else(|e| fail(e));
}

fn generate_trace_command(args: TraceArgs) {
    let spec = drover_sched::sim::workload::WorkloadSpec {
        jobs: args.jobs as usize,
        processors: args.processors,
        load: args.load,
        seed: args.seed,
        estimates: (!args.perfect_estimates).then(commands::replay::default_estimates),
    };
    let model = drover_sched::sim::models::Model::parse(&args.model)
        .unwrap_or_else(|| fail(format!("no model '{}'", args.model)));
    commands::replay::generate(model, &spec).unwrap_or_else(|e| fail(e));
}

fn main() {
    // A job's shepherd, started by the local resource manager: one thread, no runtime
    // (it forks the job's process). Not a command of the command line.
    if std::env::args().nth(1).as_deref() == Some(drover_sched::rm::shepherd::SUBCOMMAND) {
        std::process::exit(drover_sched::rm::shepherd::main());
    }
    // A job's process in a guest (its user's, started by a shepherd): no runtime either.
    if std::env::args().nth(1).as_deref() == Some(drover_sched::rm::shepherd::GUEST_RUN) {
        let arguments: Vec<String> = std::env::args().skip(2).collect();
        std::process::exit(drover_control::guest_run::run(&arguments));
    }
    let cli = Cli::try_parse().unwrap_or_else(|error| {
        let _ = error.print();
        std::process::exit(if error.use_stderr() { 2 } else { 0 })
    });
    match cli.command {
        // The command-line client: plain blocking HTTP, no runtime.
        Command::Client(command) => std::process::exit(client::run(&cli.connection, command)),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "drover", &mut std::io::stdout())
        }
        command => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| fail(format!("cannot start the runtime: {e}")))
            .block_on(run(command)),
    }
}

/// The service's own commands.
async fn run(command: Command) {
    match command {
        Command::Serve(flags) => serve(load_config(&flags)).await,
        Command::HashPassword => {
            let secret = read_secret();
            if secret.is_empty() {
                fail("no password on standard input");
            }
            println!("{}", password::hash(&secret, password::Cost::Standard));
        }
        Command::User(UserCommand::Add {
            name,
            admin,
            service,
        }) => add_user(name, admin, service),
        Command::PrepareGuests(args) => prepare_guests_command(args),
        Command::Replay(args) => replay_command(args),
        Command::GenerateTrace(args) => generate_trace_command(args),
        Command::Client(_) | Command::Completions { .. } => unreachable!("handled in main"),
    }
}
