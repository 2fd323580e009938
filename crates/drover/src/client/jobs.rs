//! `drover jobs` (the queue) and `drover job show|cancel|hold|release|modify`.

use serde_json::{Map, Value, json};

use super::connection::{Failure, Server};
use super::output::{self, Table};

#[derive(clap::Args)]
pub struct QueueArgs {
    /// Only this user's jobs.
    #[arg(long, short)]
    pub user: Option<String>,
    /// Only jobs in these states (IDLE, RUNNING, COMPLETED, REMOVED ...; comma-separated).
    #[arg(long, short, value_delimiter = ',')]
    pub state: Vec<String>,
    /// Only jobs charged to this account.
    #[arg(long, short = 'A')]
    pub account: Option<String>,
    /// Ended jobs too (without it, like squeue, only jobs not yet ended; a --state
    /// filter looks at all).
    #[arg(long, short = 'a')]
    pub all: bool,
    /// --json, --offset, --max: as every list's.
    #[command(flatten)]
    pub list: super::resources::ListArgs,
}

/// The list's `query` filter from the flags.
fn filter(args: &QueueArgs) -> Value {
    let mut query = Map::new();
    if let Some(user) = &args.user {
        query.insert("user".into(), json!(user));
    }
    if let Some(account) = &args.account {
        query.insert("account".into(), json!(account));
    }
    let states: Vec<String> = args
        .state
        .iter()
        .map(|s| s.trim().to_ascii_uppercase())
        .filter(|s| !s.is_empty())
        .collect();
    match states.as_slice() {
        [] => {}
        [one] => {
            query.insert("state".into(), json!(one));
        }
        many => {
            query.insert("state".into(), json!({ "$in": many }));
        }
    }
    Value::Object(query)
}

pub fn list(server: &Server, args: &QueueArgs) -> Result<(), Failure> {
    let mut parameters = vec![
        ("offset", args.list.offset.to_string()),
        ("max", args.list.max.to_string()),
    ];
    let query = filter(args);
    if query.as_object().is_some_and(|q| !q.is_empty()) {
        parameters.push(("query", query.to_string()));
    }
    let path = if args.all || !args.state.is_empty() {
        "/rest/jobs"
    } else {
        "/rest/jobs/active"
    };
    let answer = server.get(path, &parameters)?;
    if args.list.json {
        output::print_json(&answer);
        return Ok(());
    }
    let jobs = answer["results"].as_array().cloned().unwrap_or_default();
    let mut table = Table::new(&[
        "ID",
        "USER",
        "STATE",
        "NAME",
        "PROCS",
        "SUBMITTED",
        "STARTED",
        "WAITED",
        "USED",
        "LIMIT",
    ]);
    for job in &jobs {
        table.push(vec![
            output::text(&job["id"]),
            output::text(&job["user"]),
            output::text(&job["state"]),
            output::text(&job["name"]),
            output::text(&job["requirements"][0]["requiredProcessorCountMinimum"]),
            output::date(&job["submitDate"]),
            output::date(&job["startDate"]),
            output::duration(&job["effectiveQueueDuration"]),
            output::duration(&job["activeDuration"]),
            output::duration(&job["durationRequested"]),
        ]);
    }
    table.print();
    let total = answer["totalCount"].as_u64().unwrap_or(jobs.len() as u64);
    if total > jobs.len() as u64 {
        eprintln!(
            "{} of {total} jobs shown (from {}); page with --offset and --max",
            jobs.len(),
            args.list.offset
        );
    }
    Ok(())
}

#[derive(clap::Subcommand)]
pub enum JobCommand {
    /// Shows a job.
    Show {
        /// The job's id.
        id: String,
        /// The job as the server sends it (JSON).
        #[arg(long)]
        json: bool,
    },
    /// Cancels jobs.
    Cancel {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Puts a user hold on jobs: they stay queued until released.
    Hold {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Releases jobs' holds.
    Release {
        /// Job ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Changes a queued job.
    Modify(ModifyArgs),
}

#[derive(clap::Args)]
pub struct ModifyArgs {
    /// The job's id.
    pub id: String,
    /// A new name.
    #[arg(long)]
    pub name: Option<String>,
    /// Charge another account.
    #[arg(long, short = 'A')]
    pub account: Option<String>,
    /// A new time limit (seconds, 30m, 2h, HH:MM:SS, D-HH:MM:SS).
    #[arg(long, short = 't', value_parser = super::output::parse_duration)]
    pub time: Option<i64>,
    /// Another queue (class).
    #[arg(long, short)]
    pub queue: Option<String>,
    /// Another quality of service.
    #[arg(long)]
    pub qos: Option<String>,
    /// The user priority (-1000000 to 1000000).
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i64>,
}

pub fn job(server: &Server, command: JobCommand) -> Result<(), Failure> {
    match command {
        JobCommand::Show { id, json } => show(server, &id, json),
        JobCommand::Cancel { ids } => each(&ids, "cancelled", |id| {
            server.change("PUT", &job_path(id, "/cancel"), &[], None, &[])
        }),
        JobCommand::Hold { ids } => each(&ids, "held", |id| {
            let holds = json!({ "holds": ["USER"] });
            server.change("PUT", &job_path(id, "/hold"), &[], Some(&holds), &[])
        }),
        JobCommand::Release { ids } => each(&ids, "released", |id| {
            // No holds named: every hold is removed (spec 4.4).
            server.change("PUT", &job_path(id, "/unhold"), &[], Some(&json!({})), &[])
        }),
        JobCommand::Modify(args) => modify(server, args),
    }
}

fn job_path(id: &str, action: &str) -> String {
    let id: String = form_urlencoded::byte_serialize(id.as_bytes()).collect();
    format!("/rest/jobs/{id}{action}")
}

fn show(server: &Server, id: &str, json: bool) -> Result<(), Failure> {
    let job = server.get(&job_path(id, ""), &[])?;
    if json {
        output::print_json(&job);
        return Ok(());
    }
    let requirement = &job["requirements"][0];
    let rows = [
        ("Id", output::text(&job["id"])),
        ("Name", output::text(&job["name"])),
        ("User", output::text(&job["user"])),
        ("Account", output::text(&job["account"])),
        ("State", output::text(&job["state"])),
        (
            "Holds",
            job["holds"]
                .as_array()
                .filter(|h| !h.is_empty())
                .map(|h| h.iter().map(output::text).collect::<Vec<_>>().join(","))
                .unwrap_or_else(|| "-".into()),
        ),
        ("Queue", output::text(&job["queue"])),
        (
            "Processors",
            output::text(&requirement["requiredProcessorCountMinimum"]),
        ),
        ("Command", output::text(&job["commandFile"])),
        ("Arguments", output::text(&job["commandLineArguments"])),
        ("Directory", output::text(&job["initialWorkingDirectory"])),
        ("Submitted", output::text(&job["submitDate"])),
        ("Started", output::text(&job["startDate"])),
        ("Completed", output::text(&job["completionDate"])),
        ("Waited", output::duration(&job["effectiveQueueDuration"])),
        ("Used", output::duration(&job["activeDuration"])),
        ("Limit", output::duration(&job["durationRequested"])),
        ("Exit code", output::text(&job["completionCode"])),
        ("Blocked", output::text(&job["blockReason"]["message"])),
    ];
    for (label, value) in rows {
        println!("{label:<11} {value}");
    }
    // Why a job did not run or ended as it did is in its messages (a file it could not
    // open, a limit it reached): shown whole, oldest first.
    for message in job["messages"].as_array().into_iter().flatten() {
        println!(
            "{:<11} {} {}",
            "Message",
            output::text(&message["creationTime"]),
            output::text(&message["message"])
        );
    }
    Ok(())
}

/// Does `act` on every id, printing each outcome; a refusal of one does not stop the
/// others, and makes the exit code 1.
fn each(
    ids: &[String],
    done: &str,
    act: impl Fn(&str) -> Result<Value, Failure>,
) -> Result<(), Failure> {
    let progress = ids.len() > 1 && output::progress_wanted();
    let mut refused = Vec::new();
    for (n, id) in ids.iter().enumerate() {
        if progress {
            eprint!("\r{}/{} ", n + 1, ids.len());
        }
        match act(id) {
            Ok(_) => {
                if progress {
                    eprint!("\r\x1b[K");
                }
                println!("{id} {done}")
            }
            // Unreachable or not logged in: the rest would fail alike.
            Err(e @ (Failure::Unreachable(_) | Failure::Authentication(_))) => return Err(e),
            Err(Failure::Refused(messages)) => {
                if progress {
                    eprint!("\r\x1b[K");
                }
                refused.push(format!("{id}: {}", messages.join("; ")));
            }
            Err(Failure::Usage(message)) => refused.push(format!("{id}: {message}")),
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(Failure::Refused(refused))
    }
}

fn modify(server: &Server, args: ModifyArgs) -> Result<(), Failure> {
    let mut body = Map::new();
    let mut put = |name: &str, value: Value| {
        body.insert(name.into(), value);
    };
    if let Some(name) = args.name {
        put("name", json!(name));
    }
    if let Some(account) = args.account {
        put("account", json!(account));
    }
    if let Some(time) = args.time {
        put("durationRequested", json!(time));
    }
    if let Some(queue) = args.queue {
        put("queue", json!(queue));
    }
    if let Some(qos) = args.qos {
        put("qosRequested", json!(qos));
    }
    if let Some(priority) = args.priority {
        put("userPriority", json!(priority));
    }
    if body.is_empty() {
        return Err(Failure::Usage(
            "job modify: say what to change (--name, --account, --time, --queue, --qos, --priority)"
                .into(),
        ));
    }
    let answer = server.change(
        "PUT",
        &job_path(&args.id, ""),
        &[],
        Some(&Value::Object(body)),
        &[],
    )?;
    print_messages(&answer);
    Ok(())
}

/// The server's `messages`, one a line.
pub fn print_messages(answer: &Value) {
    for message in answer["messages"].as_array().into_iter().flatten() {
        println!("{}", output::text(message));
    }
}
