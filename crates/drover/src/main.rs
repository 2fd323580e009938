//! The `drover` command: `serve`, `hash-password`, `user add`. Run `drover help`.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;

mod client;
mod replay;

use drover::{Config, GeneratedAdmin, Started};
use drover_auth::{User, password, users};

/// mimalloc (see `drover_alloc` for why, and how it is asked), metered: what a plugin's
/// script holds is counted on its thread (`drover_plugins::script`).
#[global_allocator]
static ALLOCATOR: drover_alloc::Metered<drover_alloc::Mimalloc> =
    drover_alloc::Metered(drover_alloc::Mimalloc);

const USAGE: &str = "\
usage:
  drover serve [--config FILE] [--listen ADDR:PORT] [--data-dir DIR] [--store URL] [--base-url PREFIX]
      Serves the interface. With no configuration: 127.0.0.1:8080, SQLite in ./data,
      and an administrator 'admin' whose password is generated and printed once.
  drover hash-password
      Reads a password from standard input and prints its argon2 hash, for [[users]].
  drover user add NAME [--admin] [--config FILE] [--data-dir DIR]
      Adds (or replaces) a user in DIR/users.toml. The password is read from standard
      input; when none is given, one is generated and printed.
  drover replay TRACE.swf [--nodes N] [--processors P] [--perfect-estimates] [--without-fcfs] [--config FILE]
      Replays a Standard Workload Format trace through the scheduler in virtual time
      under FCFS, EASY backfilling and the configured policy ([scheduler.policy]), and
      prints mean wait, mean bounded slowdown, maximum wait, utilization and makespan.
      The machine is the trace's MaxProcs (or --processors), split over N nodes (1).
      Jobs request the trace's requested time (field 9) where it is given, else their
      run time; --perfect-estimates makes every request the run time.
  drover generate-trace [--jobs N] [--processors P] [--load L] [--seed S] [--perfect-estimates]
      Writes to standard output a trace of Lublin and Feitelson's workload model
      (10000 jobs, 256 processors, the model's own arrival rate, seed 1), its offered
      load scaled to L if given, and requested times from a model of users' estimates.
  drover jobs | submit | job | nodes | reservations | events | vms | services | completions
      The command-line client, talking HTTP to a server: run `drover jobs --help` (and
      see docs/cli.md).
  drover help | --version

The configuration file may also be named by DROVER_CONFIG; DROVER_LISTEN, DROVER_BASE_URL,
DROVER_DATA_DIR, DROVER_STORE, DROVER_TIME_ZONE, DROVER_MAX_BODY_BYTES,
DROVER_LOGIN_CACHE_SECONDS, DROVER_ADMIN_USER, DROVER_ENABLEPROXY, DROVER_PROXY_USERS,
DROVER_ENABLEJOBARRAYS,
DROVER_SCHEDULER_NAME, DROVER_EXECUTION_USER and DROVER_KILL_GRACE_SECONDS override it
(see docs/configuration.md).";

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("drover: {message}");
    std::process::exit(1)
}

fn usage_error(message: impl std::fmt::Display) -> ! {
    eprintln!("drover: {message}\n\n{USAGE}");
    std::process::exit(2)
}

/// The flags shared by the subcommands, applied over file and environment.
#[derive(Default)]
struct Flags {
    config: Option<PathBuf>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    store: Option<String>,
    base_url: Option<String>,
    admin: bool,
    positional: Vec<String>,
}

fn parse_flags(args: &[String]) -> Flags {
    let mut flags = Flags::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .unwrap_or_else(|| usage_error(format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--config" => flags.config = Some(value().into()),
            "--listen" => flags.listen = Some(value()),
            "--data-dir" => flags.data_dir = Some(value().into()),
            "--store" => flags.store = Some(value()),
            "--base-url" => flags.base_url = Some(value()),
            "--admin" => flags.admin = true,
            other if other.starts_with('-') => usage_error(format!("unknown option {other}")),
            other => flags.positional.push(other.to_string()),
        }
    }
    flags
}

fn load_config(flags: &Flags) -> Config {
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
    match started.generated_admin {
        Some(GeneratedAdmin {
            name,
            password: secret,
        }) => {
            println!(
                "Generated the administrator '{name}' with the password: {secret}\n\
                 It is shown only this once; only its hash is kept in {}.\n\
                 Try: curl -u {name}:{secret} {url}/rest/diag/about",
                config.data_dir.join(users::USER_FILE).display()
            );
        }
        None => println!(
            "Log in with HTTP Basic as a configured user, e.g. curl -u {}:PASSWORD {url}/rest/diag/about \
             (forgot it? drover user add {} --admin)",
            config.admin_user, config.admin_user
        ),
    }
}

async fn serve(config: Config) {
    let address = config.listen_address().unwrap_or_else(|e| fail(e));
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

fn add_user(flags: Flags) {
    let [name] = flags.positional.as_slice() else {
        usage_error("user add takes one user name");
    };
    let config = load_config(&flags);
    if config.users.iter().any(|u| &u.name == name) {
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
        admin: flags.admin,
    };
    users::save(&config.data_dir, user).unwrap_or_else(|e| fail(e));
    if generated {
        println!("{secret}");
    }
    eprintln!(
        "drover: saved '{name}'{} in {} (a running service reads it at its next start)",
        if flags.admin { " (administrator)" } else { "" },
        config.data_dir.join(users::USER_FILE).display()
    );
}

fn replay_command(args: &[String]) {
    let mut rest = args.iter();
    let mut options = replay::ReplayOptions {
        nodes: 1,
        ..Default::default()
    };
    let mut others = Vec::new();
    while let Some(arg) = rest.next() {
        let mut number = || -> u32 {
            rest.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n: &u32| n > 0)
                .unwrap_or_else(|| usage_error(format!("{arg} needs a positive number")))
        };
        match arg.as_str() {
            "--processors" => options.processors = Some(number()),
            "--nodes" => options.nodes = number(),
            "--perfect-estimates" => options.perfect_estimates = true,
            "--without-fcfs" => options.without_fcfs = true,
            _ => others.push(arg.clone()),
        }
    }
    let flags = parse_flags(&others);
    let [trace] = flags.positional.as_slice() else {
        usage_error("replay takes one trace file")
    };
    let policy = load_config(&flags).scheduler.policy;
    replay::run(trace, &options, policy).unwrap_or_else(|e| fail(e));
}

fn generate_trace_command(args: &[String]) {
    let mut spec = drover_sched::sim::workload::WorkloadSpec {
        jobs: 10_000,
        processors: 256,
        load: None,
        seed: 1,
        estimates: Some(replay::default_estimates()),
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .unwrap_or_else(|| usage_error(format!("{arg} needs a value")))
        };
        let bad = |what: &str| -> ! { usage_error(format!("{arg} needs {what}")) };
        match arg.as_str() {
            "--jobs" => {
                spec.jobs = value()
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| bad("a positive number"))
            }
            "--processors" => {
                spec.processors = value()
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .unwrap_or_else(|| bad("a positive number"))
            }
            "--load" => {
                spec.load = Some(
                    value()
                        .parse()
                        .ok()
                        .filter(|&l: &f64| l > 0.0 && l.is_finite())
                        .unwrap_or_else(|| bad("a positive number")),
                )
            }
            "--seed" => spec.seed = value().parse().unwrap_or_else(|_| bad("a whole number")),
            "--perfect-estimates" => spec.estimates = None,
            _ => usage_error(format!("generate-trace: unknown argument {arg}")),
        }
    }
    replay::generate(&spec).unwrap_or_else(|e| fail(e));
}

fn main() {
    // A job's shepherd, started by the local resource manager: one thread, no runtime
    // (it forks the job's process).
    if std::env::args().nth(1).as_deref() == Some(drover_sched::rm::shepherd::SUBCOMMAND) {
        std::process::exit(drover_sched::rm::shepherd::main());
    }
    // A job's process in a guest (its user's, started by a shepherd): no runtime either.
    if std::env::args().nth(1).as_deref() == Some(drover_sched::rm::shepherd::GUEST_RUN) {
        let arguments: Vec<String> = std::env::args().skip(2).collect();
        std::process::exit(drover::guest_run::run(&arguments));
    }
    // The command-line client: plain blocking HTTP, no runtime.
    if let Some(command) = std::env::args().nth(1)
        && client::COMMANDS.contains(&command.as_str())
    {
        std::process::exit(client::run(std::env::args().skip(1).collect()));
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("cannot start the runtime: {e}")))
        .block_on(run())
}

async fn run() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("serve") => {
            let flags = parse_flags(&args[1..]);
            if !flags.positional.is_empty() {
                usage_error("serve takes no positional arguments");
            }
            serve(load_config(&flags)).await
        }
        Some("hash-password") => {
            let secret = read_secret();
            if secret.is_empty() {
                fail("no password on standard input");
            }
            println!("{}", password::hash(&secret, password::Cost::Standard));
        }
        Some("user") if args.get(1).map(String::as_str) == Some("add") => {
            add_user(parse_flags(&args[2..]))
        }
        Some("replay") => replay_command(&args[1..]),
        Some("generate-trace") => generate_trace_command(&args[1..]),
        Some("help" | "--help" | "-h") => println!("{USAGE}"),
        Some("--version" | "version") => {
            let build = drover::build_info();
            println!(
                "drover {} ({} {})",
                build.version, build.build, build.revision
            )
        }
        _ => usage_error("unknown command"),
    }
}
