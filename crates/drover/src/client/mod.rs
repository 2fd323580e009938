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

use clap::Subcommand;

pub use connection::{ConnectionFlags, Failure};

/// The client's commands (`drover <command> --help`); they talk HTTP to a server.
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
}

/// Runs `command` against the server `connection` names; returns the exit code.
pub fn run(connection: &ConnectionFlags, command: Command) -> i32 {
    // Output piped into `head` that stops reading ends us quietly, as it does `ls`.
    // SAFETY: sets the default disposition of one signal, before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    match execute(connection, command) {
        Ok(()) => 0,
        Err(failure) => failure.report(),
    }
}

fn execute(connection: &ConnectionFlags, command: Command) -> Result<(), Failure> {
    let server = connection::Server::connect(connection)?;
    match command {
        Command::Jobs(args) => jobs::list(&server, &args),
        Command::Submit(args) => submit::submit(&server, args),
        Command::Job(command) => jobs::job(&server, command),
        Command::Nodes(args) => resources::nodes(&server, &args),
        Command::Reservations(args) => resources::reservations(&server, args),
        Command::Events(args) => resources::events(&server, &args),
        Command::Vms(args) => resources::vms(&server, &args),
        Command::Services(args) => resources::services(&server, &args),
    }
}
