//! `drover nodes`, `reservations`, `events`, `vms`, `services`: lists, and the few
//! changes that belong with them.

use std::io::BufRead;

use serde_json::{Map, Value, json};

use super::connection::{Failure, Server};
use super::jobs::print_messages;
use super::output::{self, Table};

#[derive(clap::Args)]
pub struct ListArgs {
    /// The list as the server sends it (JSON), for programs.
    #[arg(long)]
    pub json: bool,
    /// Skip this many (with --max, to page).
    #[arg(long, default_value_t = 0)]
    pub offset: u64,
    /// At most this many.
    #[arg(long, default_value_t = 500)]
    pub max: u64,
}

/// GETs a list page; prints it as JSON when asked and then gives nothing back.
fn page(
    server: &Server,
    path: &str,
    args: &ListArgs,
    extra: &[(&str, String)],
) -> Result<Option<Vec<Value>>, Failure> {
    let mut parameters = vec![
        ("offset", args.offset.to_string()),
        ("max", args.max.to_string()),
    ];
    parameters.extend(extra.iter().cloned());
    let answer = server.get(path, &parameters)?;
    if args.json {
        output::print_json(&answer);
        return Ok(None);
    }
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    let total = answer["totalCount"]
        .as_u64()
        .unwrap_or(results.len() as u64);
    if total > results.len() as u64 {
        eprintln!(
            "{} of {total} shown (from {}); page with --offset and --max",
            results.len(),
            args.offset
        );
    }
    Ok(Some(results))
}

fn ids(list: &Value) -> String {
    let ids: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|item| output::text(&item["id"]))
        .collect();
    if ids.is_empty() {
        "-".into()
    } else {
        ids.join(",")
    }
}

pub fn nodes(server: &Server, args: &ListArgs) -> Result<(), Failure> {
    let Some(nodes) = page(server, "/rest/nodes", args, &[])? else {
        return Ok(());
    };
    let mut table = Table::new(&[
        "ID", "STATE", "POWER", "PROCS", "FREE", "MEMORY", "FEATURES", "JOBS",
    ]);
    for node in &nodes {
        let features: Vec<String> = node["features"]
            .as_array()
            .into_iter()
            .flatten()
            .map(output::text)
            .collect();
        table.push(vec![
            output::text(&node["id"]),
            output::text(&node["state"]),
            output::text(&node["power"]),
            output::text(&node["totalProcessors"]),
            output::text(&node["availableProcessors"]),
            output::text(&node["totalMemory"]),
            if features.is_empty() {
                "-".into()
            } else {
                features.join(",")
            },
            ids(&node["jobs"]),
        ]);
    }
    table.print();
    Ok(())
}

#[derive(clap::Args)]
pub struct ReservationArgs {
    #[command(subcommand)]
    pub command: Option<ReservationCommand>,
    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(clap::Subcommand)]
pub enum ReservationCommand {
    /// Sets resources aside; prints the new reservation's id.
    Create {
        /// Nodes to reserve whole (comma-separated names).
        #[arg(long)]
        hosts: Option<String>,
        /// Processors to reserve, wherever they fit (without --hosts).
        #[arg(long, short = 'n')]
        processors: Option<u32>,
        /// When it starts (the server's date form, or Now; default now).
        #[arg(long)]
        start: Option<String>,
        /// How long (seconds, 30m, 2h, HH:MM:SS, D-HH:MM:SS).
        #[arg(long, short = 't', value_parser = super::output::parse_duration)]
        duration: i64,
        /// A prefix for its id.
        #[arg(long)]
        prefix: Option<String>,
        /// A comment.
        #[arg(long)]
        comment: Option<String>,
        /// A key that makes a retried request create it once (Idempotency-Key).
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
    },
    /// Releases reservations.
    Delete {
        /// Reservation ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

pub fn reservations(server: &Server, args: ReservationArgs) -> Result<(), Failure> {
    match args.command {
        None => list_reservations(server, &args.list),
        Some(ReservationCommand::Create {
            hosts,
            processors,
            start,
            duration,
            prefix,
            comment,
            idempotency_key,
        }) => {
            let mut body = Map::new();
            body.insert("duration".into(), json!(duration));
            if let Some(hosts) = hosts {
                body.insert("hostListExpression".into(), json!(hosts));
            }
            if let Some(n) = processors {
                body.insert("requirements".into(), json!({ "taskCount": n }));
            }
            if let Some(start) = start {
                body.insert("startDate".into(), json!(start));
            }
            if let Some(prefix) = prefix {
                body.insert("idPrefix".into(), json!(prefix));
            }
            if let Some(comment) = comment {
                body.insert("comments".into(), json!(comment));
            }
            let mut headers = Vec::new();
            if let Some(key) = &idempotency_key {
                headers.push(("Idempotency-Key", key.as_str()));
            }
            let answer = server.change(
                "POST",
                "/rest/reservations",
                &[],
                Some(&Value::Object(body)),
                &headers,
            )?;
            println!("{}", output::text(&answer["id"]));
            Ok(())
        }
        Some(ReservationCommand::Delete { ids }) => {
            let mut refused = Vec::new();
            for id in &ids {
                let path = format!(
                    "/rest/reservations/{}",
                    form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
                );
                match server.change("DELETE", &path, &[], None, &[]) {
                    Ok(answer) => {
                        print_messages(&answer);
                        println!("{id} released");
                    }
                    Err(Failure::Refused(messages)) => {
                        refused.push(format!("{id}: {}", messages.join("; ")))
                    }
                    Err(other) => return Err(other),
                }
            }
            if refused.is_empty() {
                Ok(())
            } else {
                Err(Failure::Refused(refused))
            }
        }
    }
}

fn list_reservations(server: &Server, args: &ListArgs) -> Result<(), Failure> {
    let Some(reservations) = page(server, "/rest/reservations", args, &[])? else {
        return Ok(());
    };
    let mut table = Table::new(&["ID", "OWNER", "START", "END", "DURATION", "PROCS", "NODES"]);
    for reservation in &reservations {
        table.push(vec![
            output::text(&reservation["id"]),
            output::text(&reservation["owner"]["name"]),
            output::date(&reservation["startDate"]),
            output::date(&reservation["endDate"]),
            output::duration(&reservation["duration"]),
            output::text(&reservation["allocatedProcessorCount"]),
            ids(&reservation["allocatedNodes"]),
        ]);
    }
    table.print();
    Ok(())
}

#[derive(clap::Args)]
pub struct EventArgs {
    /// Keep printing events as they happen (Server-Sent Events) until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Only events of this severity (INFO, WARN, ERROR ...).
    #[arg(long)]
    pub severity: Option<String>,
    #[command(flatten)]
    pub list: ListArgs,
}

fn event_row(event: &Value) -> Vec<String> {
    vec![
        output::date(&event["eventDate"]),
        output::text(&event["severity"]),
        output::text(&event["eventType"]),
        output::text(&event["origin"]),
        output::text(&event["message"]),
    ]
}

const EVENT_HEADERS: [&str; 5] = ["DATE", "SEVERITY", "TYPE", "ORIGIN", "MESSAGE"];

pub fn events(server: &Server, args: &EventArgs) -> Result<(), Failure> {
    let mut parameters = vec![("api-version", "3".to_string())];
    if let Some(severity) = &args.severity {
        parameters.push((
            "query",
            json!({ "severity": severity.to_ascii_uppercase() }).to_string(),
        ));
    }
    if !args.follow {
        // The page is the newest `max`, printed oldest first like a log.
        parameters.push(("sort", json!({ "id": -1 }).to_string()));
        let Some(mut events) = page(server, "/rest/events", &args.list, &parameters)? else {
            return Ok(());
        };
        events.reverse();
        let mut table = Table::new(&EVENT_HEADERS);
        for event in &events {
            table.push(event_row(event));
        }
        table.print();
        return Ok(());
    }
    follow(server, &parameters, args.list.json)
}

/// Prints the live events. The server ends a stream at shutdown, after a replay of
/// 10,000 events or when we read too slowly; we then resume after the last event seen,
/// as long as each connection brings something (else the server is gone: exit 3).
fn follow(server: &Server, parameters: &[(&str, String)], json: bool) -> Result<(), Failure> {
    let mut last_id: Option<String> = None;
    loop {
        let stream = server.stream("/rest/events/stream", parameters, last_id.as_deref())?;
        let mut received = false;
        for line in stream.lines() {
            let Ok(line) = line else {
                break;
            };
            if let Some(id) = line.strip_prefix("id:") {
                last_id = Some(id.trim().to_string());
                continue;
            }
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(data.trim()) else {
                continue;
            };
            received = true;
            if json {
                println!("{event}");
            } else {
                println!("{}", event_row(&event).join("  "));
            }
        }
        if !received || last_id.is_none() {
            return Err(Failure::Unreachable(
                "the server ended the event stream".into(),
            ));
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

pub fn vms(server: &Server, args: &ListArgs) -> Result<(), Failure> {
    let Some(vms) = page(server, "/rest/vms", args, &[])? else {
        return Ok(());
    };
    let mut table = Table::new(&["ID", "STATE", "POWER", "NODE", "PROCS", "MEMORY", "OS"]);
    for vm in &vms {
        table.push(vec![
            output::text(&vm["id"]),
            output::text(&vm["state"]),
            output::text(&vm["powerState"]),
            output::text(&vm["node"]["id"]),
            output::text(&vm["totalProcessors"]),
            output::text(&vm["totalMemory"]),
            output::text(&vm["os"]),
        ]);
    }
    table.print();
    Ok(())
}

pub fn services(server: &Server, args: &ListArgs) -> Result<(), Failure> {
    let Some(services) = page(server, "/rest/services", args, &[])? else {
        return Ok(());
    };
    let mut table = Table::new(&["ID", "NAME", "STATE", "TEMPLATE", "CREATED"]);
    for service in &services {
        table.push(vec![
            output::text(&service["id"]),
            output::text(&service["name"]),
            output::text(&service["state"]),
            output::text(&service["serviceTemplate"]["name"]),
            output::date(&service["dateCreated"]),
        ]);
    }
    table.print();
    Ok(())
}
