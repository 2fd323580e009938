//! The command-line client: `drover jobs`, `drover submit`, `drover job cancel 12` ...
//! It talks HTTP to a server like any other client (see `connection`), one file per
//! command group, and exits with a code scripts can rely on (`Failure::exit_code`).

mod connection;
mod jobs;
mod output;
mod resources;
mod submit;
mod tls;
mod trusted_file;

use clap::{CommandFactory, Parser, Subcommand};

pub use connection::Failure;

/// The names of the client's commands, for `main` to know which arguments are ours.
pub const COMMANDS: &[&str] = &[
    "jobs",
    "submit",
    "job",
    "nodes",
    "reservations",
    "events",
    "vms",
    "services",
    "completions",
];

/// Drover's command-line client.
#[derive(Parser)]
#[command(
    name = "drover",
    version,
    about = "Drover's command-line client (the server's own commands: drover help)",
    after_help = "Connection: --url, DROVER_URL or `url` in ~/.config/drover/client.toml; \
                  user: --login, DROVER_USER or `user`; password: DROVER_PASSWORD, `password`, \
                  or asked on the terminal; a bearer token: DROVER_TOKEN or `token`; a private CA for \
                  https://: --ca-file, DROVER_CA_FILE or `ca_file`.\n\
                  Exit codes: 0 done, 1 the server refused (its messages on stderr), 2 usage, \
                  3 the server cannot be reached, 4 authentication failed."
)]
pub struct Cli {
    #[command(flatten)]
    pub connection: connection::ConnectionFlags,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// The job queue as a table (like squeue or showq).
    Jobs(jobs::QueueArgs),
    /// Submits a job from flags, or from a script whose `#DROVER` lines give its options.
    Submit(submit::SubmitArgs),
    /// Shows or changes jobs: show, cancel, hold, release, modify.
    #[command(subcommand)]
    Job(jobs::JobCommand),
    /// The nodes and their processors.
    Nodes(resources::ListArgs),
    /// Reservations: list (the default), create, delete.
    Reservations(resources::ReservationArgs),
    /// Recorded events, or with --follow the live stream.
    Events(resources::EventArgs),
    /// Virtual machines.
    Vms(resources::ListArgs),
    /// Services.
    Services(resources::ListArgs),
    /// Prints a completion script for bash, zsh or fish.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Parses `args` (without the program name) and runs the command; returns the exit code.
pub fn run(args: Vec<String>) -> i32 {
    // Output piped into `head` that stops reading ends us quietly, as it does `ls`.
    // SAFETY: sets the default disposition of one signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse_from(std::iter::once("drover".to_string()).chain(args)) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    match execute(cli) {
        Ok(()) => 0,
        Err(failure) => failure.report(),
    }
}

fn execute(cli: Cli) -> Result<(), Failure> {
    if let Command::Completions { shell } = cli.command {
        let mut command = Cli::command();
        clap_complete::generate(shell, &mut command, "drover", &mut std::io::stdout());
        return Ok(());
    }
    let server = connection::Server::connect(&cli.connection)?;
    match cli.command {
        Command::Jobs(args) => jobs::list(&server, &args),
        Command::Submit(args) => submit::submit(&server, args),
        Command::Job(command) => jobs::job(&server, command),
        Command::Nodes(args) => resources::nodes(&server, &args),
        Command::Reservations(args) => resources::reservations(&server, args),
        Command::Events(args) => resources::events(&server, &args),
        Command::Vms(args) => resources::vms(&server, &args),
        Command::Services(args) => resources::services(&server, &args),
        Command::Completions { .. } => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `main` routes by `COMMANDS`: a command missing there would never be reached.
    #[test]
    fn every_command_is_routed_here() {
        let command = Cli::command();
        let mut names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
        names.sort_unstable();
        let mut routed = COMMANDS.to_vec();
        routed.sort_unstable();
        assert_eq!(names, routed);
        command.debug_assert();
    }
}
