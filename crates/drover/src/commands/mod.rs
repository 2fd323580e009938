//! The whole command line, one clap tree: the service's own commands (`serve`, `user
//! add`, `prepare-guests`, `hash-password`, `replay`, `generate-trace`) and the client's
//! (`jobs`, `submit`, ...), each with `--help`, and shell completions covering them all.

pub mod compare;
pub mod replay;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::client;

/// The version line: the package's version, the build number and the revision.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("DROVER_BUILD_NUMBER"),
    " ",
    env!("DROVER_REVISION"),
    ")"
);

/// Drover: a workload and cloud management service, and its command-line client.
#[derive(Parser)]
#[command(
    name = "drover",
    version = VERSION,
    after_help = "The client's connection: --url, DROVER_URL or `url` in \
                  ~/.config/drover/client.toml; user: --login, DROVER_USER or `user`; \
                  password: DROVER_PASSWORD, `password`, or asked on the terminal; a bearer \
                  token: DROVER_TOKEN or `token`; a private CA for https://: --ca-file, \
                  DROVER_CA_FILE or `ca_file`.\n\
                  The client's exit codes: 0 done, 1 the server refused (its messages on \
                  stderr), 2 usage, 3 the server cannot be reached, 4 authentication failed."
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: client::ConnectionFlags,
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Command {
    /// Serves the interface. With no configuration: 127.0.0.1:8080, SQLite in ./data, and
    /// an administrator 'admin' whose password is generated and printed once.
    #[command(after_help = environment_help())]
    Serve(ServiceFlags),
    /// Local users of the service (its data directory's users.toml).
    #[command(subcommand)]
    User(UserCommand),
    /// Installs QEMU and builds the default guest image from the distribution's
    /// packages (as root): what `serve` does at its first start as root, for a service
    /// that does not run as root. A running service registers the image at its next
    /// start.
    PrepareGuests(PrepareGuestsArgs),
    /// Reads a password from standard input and prints its argon2 hash, for [[users]]
    /// and [[oauth.clients]].
    HashPassword,
    /// Replays a Standard Workload Format trace through the scheduler in virtual time
    /// under FCFS, EASY backfilling and the configured policy ([scheduler.policy]).
    Replay(ReplayArgs),
    /// Writes a trace of Lublin and Feitelson's workload model to standard output.
    GenerateTrace(TraceArgs),
    /// Prints a completion script for bash, zsh or fish.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    #[command(flatten)]
    Client(client::Command),
}

/// What `drover serve --help` says of the environment: the variables of
/// [`drover::config::ENVIRONMENT`], so that the help never lists another set.
fn environment_help() -> String {
    let names: Vec<&str> = drover::config::ENVIRONMENT
        .iter()
        .map(|(name, _)| *name)
        .collect();
    format!(
        "The configuration file may also be named by DROVER_CONFIG; {} override it; the \
         flags override both (docs/configuration.md).",
        names.join(", ")
    )
}

/// Where the service's configuration comes from, and what the flags change of it.
#[derive(Args, Default)]
pub struct ServiceFlags {
    /// The configuration file (TOML; see drover.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// The data directory (SQLite store, users.toml, spools, images).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// A PostgreSQL store (postgres://...) instead of SQLite.
    #[arg(long, value_name = "URL")]
    pub store: Option<String>,
    /// The deployment prefix of every path (e.g. /drover).
    #[arg(long, value_name = "PREFIX")]
    pub base_url: Option<String>,
}

#[derive(Subcommand)]
pub enum UserCommand {
    /// Adds (or replaces) a user in the data directory's users.toml. The password is read
    /// from standard input; when none is given, one is generated and printed.
    Add {
        name: String,
        /// An administrator.
        #[arg(long)]
        admin: bool,
        #[command(flatten)]
        service: ConfigFlags,
    },
}

/// Where `prepare-guests` builds the image.
#[derive(Args)]
pub struct PrepareGuestsArgs {
    /// The image's directory; by default `<image_dir>/<default_image>` of the
    /// configuration (`<data_dir>/images/guest`).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub service: ConfigFlags,
}

/// The configuration a command other than `serve` reads.
#[derive(Args, Default)]
pub struct ConfigFlags {
    /// The configuration file (TOML; see drover.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The data directory.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl From<ConfigFlags> for ServiceFlags {
    fn from(flags: ConfigFlags) -> Self {
        ServiceFlags {
            config: flags.config,
            data_dir: flags.data_dir,
            ..ServiceFlags::default()
        }
    }
}

/// The machine is the trace's MaxProcs (or --processors), split over --nodes. Jobs
/// request the trace's requested time (field 9) where it is given, else their run time.
/// Prints mean wait, mean bounded slowdown, maximum wait, utilization and makespan; with
/// --compare DIR, one row per trace of the folder, load and kind of requested times.
#[derive(Args)]
pub struct ReplayArgs {
    /// The trace (Standard Workload Format).
    #[arg(required_unless_present = "compare", conflicts_with = "compare")]
    pub trace: Option<String>,
    /// Every trace (*.swf) of this folder, with users' and with exact requested times:
    /// one table row each (FCFS, EASY and the configured policy, ratios to EASY).
    #[arg(long, value_name = "DIR")]
    pub compare: Option<PathBuf>,
    /// Replays the same jobs at F times the logged offered load (submit times divided by
    /// F); with --compare, a list (e.g. 1,1.2,1.3,1.5).
    #[arg(long, value_name = "F", value_delimiter = ',', value_parser = positive_number)]
    pub load: Vec<f64>,
    /// Nodes the machine is split over.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: u32,
    /// The machine's processors (default: the trace's MaxProcs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub processors: Option<u32>,
    /// Every job requests exactly its run time, whatever field 9 says.
    #[arg(long)]
    pub perfect_estimates: bool,
    /// Leaves FCFS out (it adds nothing to a comparison with EASY, and takes as long).
    #[arg(long)]
    pub without_fcfs: bool,
    /// The configuration file whose [scheduler.policy] is replayed.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The model's own arrival rate unless --load scales it; requested times from a model of
/// users' estimates unless --perfect-estimates.
#[derive(Args)]
pub struct TraceArgs {
    /// The workload model: lublin2003, feitelson1996 or downey1997.
    #[arg(long, default_value = "lublin2003", value_parser = ["lublin2003", "feitelson1996", "downey1997"])]
    pub model: String,
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub processors: u32,
    /// The offered load to scale arrivals to (e.g. 0.8).
    #[arg(long, value_parser = positive_number)]
    pub load: Option<f64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Requested times equal run times.
    #[arg(long)]
    pub perfect_estimates: bool,
}

fn positive_number(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|n| *n > 0.0 && n.is_finite())
        .ok_or_else(|| format!("'{text}' is not a positive number"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed_and_every_command_has_help() {
        let command = Cli::command();
        command.clone().debug_assert();
        for sub in command.get_subcommands() {
            assert!(sub.get_about().is_some(), "{} has no help", sub.get_name());
        }
    }

    #[test]
    fn the_services_commands_read_as_before() {
        let cli = Cli::try_parse_from([
            "drover",
            "serve",
            "--listen",
            "127.0.0.1:1",
            "--data-dir",
            "d",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Serve(ServiceFlags {
                listen: Some(_),
                ..
            })
        ));
        let cli =
            Cli::try_parse_from(["drover", "user", "add", "bob", "--admin", "--data-dir", "d"])
                .unwrap();
        assert!(matches!(
            cli.command,
            Command::User(UserCommand::Add { admin: true, .. })
        ));
        assert!(Cli::try_parse_from(["drover", "replay", "t.swf", "--nodes", "0"]).is_err());
        assert!(Cli::try_parse_from(["drover", "replay"]).is_err());
        assert!(Cli::try_parse_from(["drover", "replay", "t.swf", "--compare", "d"]).is_err());
        assert!(
            Cli::try_parse_from(["drover", "replay", "--compare", "d", "--load", "1,1.5"]).is_ok()
        );
        assert!(Cli::try_parse_from(["drover", "replay", "t.swf", "--load", "0"]).is_err());
        assert!(Cli::try_parse_from(["drover", "generate-trace", "--load", "-1"]).is_err());
        assert!(Cli::try_parse_from(["drover", "jobs"]).is_ok());
        let cli = Cli::try_parse_from(["drover", "prepare-guests", "/srv/images/guest"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::PrepareGuests(PrepareGuestsArgs { dir: Some(_), .. })
        ));
    }
}
