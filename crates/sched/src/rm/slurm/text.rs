//! Readers of Slurm's text output: `squeue -O` records, `sacct -P` records, and host
//! lists.
//!
//! `squeue --json` of 22.05 ignores `--jobs`, `--states` and `--partition` (it always
//! lists every job slurmctld holds), so the watcher reads `squeue -h -O` instead, which
//! honours them. A job name may hold anything, line breaks and `|` included (`sbatch
//! --job-name` takes it as given): the name is the one free-text field, placed between
//! two copies of the job id, and each record ends with a nonce made for that call, so
//! that no name can forge a record or another field.

use super::json::{Parsed, SlurmJob};

/// The fields of a record, in order; the last one's suffix is the call's nonce.
const FIELDS: &str = "JobID:|,State:|,UserName:|,NodeList:|,NumCPUs:|,tres-alloc:|,exit_code:|,\
     StartTime:|,Name:|,JobID:";

/// The `-O` argument for a listing ending each record with `nonce` (which must not
/// begin with a digit or `.`, nor hold `,`, for `squeue` to read it as a suffix).
pub fn queue_format(nonce: &str) -> String {
    format!("{FIELDS}{nonce}")
}

/// A nonce for one listing: `@` and 16 hex digits from the kernel's random source
/// (or the clock, should it be unreadable).
pub fn nonce() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !random {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        bytes = (nanos ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("@{hex}@")
}

/// Reads the output of `squeue -h -O <queue_format(nonce)>` (run with `TZ=UTC`).
pub fn parse_queue(text: &str, nonce: &str) -> Parsed<SlurmJob> {
    let mut parsed = Parsed::default();
    let end = format!("{nonce}\n");
    let mut records: Vec<&str> = text.split(end.as_str()).collect();
    // What follows the last record's end: nothing (or a record without its nonce,
    // cut short: not believed).
    if let Some(rest) = records.pop()
        && !rest.trim().is_empty()
    {
        parsed
            .problems
            .push("a record without its end was skipped".into());
    }
    for (i, record) in records.into_iter().enumerate() {
        match parse_record(record) {
            Ok(job) => parsed.items.push(job),
            Err(why) => parsed.problems.push(format!("record {i}: {why}")),
        }
    }
    parsed
}

fn parse_record(record: &str) -> Result<SlurmJob, String> {
    let (first_id, rest) = record.split_once('|').ok_or("no fields")?;
    let (middle, last_id) = rest.rsplit_once('|').ok_or("no closing job id")?;
    let job_id = super::parse_slurm_id(first_id).ok_or("no job id")?;
    if super::parse_slurm_id(last_id) != Some(job_id) {
        return Err(format!("job {job_id}: its two ids differ"));
    }
    let mut fields = middle.splitn(8, '|');
    let mut next = || fields.next().unwrap_or_default();
    let (state, user, nodes, cpus, tres, exit, start, name) = (
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
        next(),
    );
    let state = state.trim().to_ascii_uppercase();
    if state.is_empty() || !state.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return Err(format!("job {job_id}: no state"));
    }
    let exit_code = exit
        .trim()
        .parse::<i32>()
        .ok()
        .map(|status| match status & 0x7f {
            0 => (status >> 8) & 0xff,
            signal => 128 + signal,
        });
    let nodes = nodes.trim();
    Ok(SlurmJob {
        job_id,
        name: name.to_string(),
        state,
        state_reason: None,
        user_name: Some(user.trim().to_string()).filter(|u| !u.is_empty()),
        nodes: if nodes == "(null)" {
            String::new()
        } else {
            nodes.to_string()
        },
        exit_code,
        start_time: parse_utc(start.trim()),
        end_time: None,
        cpus: cpus.trim().parse().ok(),
        memory: tres_memory(tres),
    })
}

/// The fields `sacct` is asked for (`--format`), none of them a job's user's choosing (no
/// name): a record cannot be forged, and `|` separates fields.
pub const ACCOUNT_FIELDS: &str = "JobIDRaw,State,ExitCode,Start,End,NodeList,User,AllocCPUS";

/// Reads the output of `sacct -X -n -P --format=<ACCOUNT_FIELDS>` (run with `TZ=UTC`).
/// Its exit code is `<code>:<signal>`; sacct's JSON of 22.05 gives 0 for every code
/// that is not a signal, which is why the text is read. A job listed twice (requeued)
/// is given by its last record.
pub fn parse_accounting(text: &str) -> Parsed<SlurmJob> {
    let mut parsed: Parsed<SlurmJob> = Parsed::default();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match parse_accounted(line) {
            Ok(job) => {
                parsed.items.retain(|j| j.job_id != job.job_id);
                parsed.items.push(job);
            }
            Err(why) => parsed.problems.push(format!("sacct line {i}: {why}")),
        }
    }
    parsed
}

fn parse_accounted(line: &str) -> Result<SlurmJob, String> {
    let fields: Vec<&str> = line.split('|').collect();
    let [id, state, exit, start, end, nodes, user, cpus] = fields[..] else {
        return Err(format!("{} fields, not 8", fields.len()));
    };
    let job_id = super::parse_slurm_id(id.trim()).ok_or("no job id")?;
    // `CANCELLED by 0`: the state is the first word.
    let state = state.split_whitespace().next().unwrap_or_default();
    if state.is_empty() || !state.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
        return Err(format!("job {job_id}: no state"));
    }
    let exit_code = exit.trim().split_once(':').and_then(|(code, signal)| {
        match (code.parse::<i32>().ok()?, signal.parse::<i32>().ok()?) {
            (code, 0) => Some(code),
            (_, signal) => Some(128 + signal),
        }
    });
    let nodes = nodes.trim();
    Ok(SlurmJob {
        job_id,
        name: String::new(),
        state: state.to_string(),
        state_reason: None,
        user_name: Some(user.trim().to_string()).filter(|u| !u.is_empty()),
        nodes: if matches!(nodes, "None assigned" | "(null)") {
            String::new()
        } else {
            nodes.to_string()
        },
        exit_code,
        start_time: parse_utc(start.trim()),
        end_time: parse_utc(end.trim()),
        cpus: cpus.trim().parse().ok(),
        memory: None,
    })
}

/// The memory (MB) of Slurm's allocated TRES (`cpu=2,mem=700M,node=1,billing=2`).
fn tres_memory(tres: &str) -> Option<u64> {
    let value = tres
        .split(',')
        .find_map(|t| t.trim().strip_prefix("mem="))?;
    let (number, unit) = value.split_at(value.find(|c: char| !c.is_ascii_digit() && c != '.')?);
    let number: f64 = number.parse().ok()?;
    let factor = match unit {
        "K" => 1.0 / 1024.0,
        "M" => 1.0,
        "G" => 1024.0,
        "T" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((number * factor).ceil() as u64)
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC) as seconds since the epoch; `N/A`, `Unknown`... as none.
pub fn parse_utc(text: &str) -> Option<i64> {
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

/// The most names one host list may expand to (a larger one is refused).
const MAX_HOSTS: usize = 100_000;

/// Expands a Slurm host list (`node[1-3,07],gpu1`) into its names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        let Some((prefix, rest)) = part.split_once('[') else {
            names.push(part.to_string());
            continue;
        };
        let (ranges, suffix) = rest
            .split_once(']')
            .ok_or_else(|| format!("unclosed [ in {part:?}"))?;
        if suffix.contains('[') {
            return Err(format!("more than one range in {part:?}"));
        }
        for range in ranges.split(',') {
            let (low, high) = range.split_once('-').unwrap_or((range, range));
            let width = low.len();
            let (a, b) = (
                low.parse::<u64>()
                    .map_err(|_| format!("bad range {range:?}"))?,
                high.parse::<u64>()
                    .map_err(|_| format!("bad range {range:?}"))?,
            );
            if b < a || (b - a) as usize >= MAX_HOSTS {
                return Err(format!("bad range {range:?}"));
            }
            for n in a..=b {
                names.push(format!("{prefix}{n:0width$}{suffix}"));
                if names.len() > MAX_HOSTS {
                    return Err("too many hosts".into());
                }
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_cannot_be_forged_by_names() {
        let nonce = "@00ff@";
        // As squeue 22.05 prints them (58 and 60 captured, then a TRES field added; 60's
        // name holds a `|` and a line break), with a name that tries to forge a record.
        let text = "58|RUNNING|drover-bob|node2|1|cpu=1,mem=500M,node=1|0|2026-11-26T21:14:57|wrap|58@00ff@\n\
            60|RUNNING|drover-bob|node3|1||0|2026-11-26T21:16:03|a | b\nc|60@00ff@\n\
            61|COMPLETED|bob|node1|1||768|N/A|x|61@bad@\n\
            62|RUNNING|root|node[1-2]|8||0|N/A|y|62@00ff@\n\
            63|CANCELLED|bob|node1|1||15|N/A|z|63@00ff@\n";
        let parsed = parse_queue(text, nonce);
        let ids: Vec<u64> = parsed.items.iter().map(|j| j.job_id).collect();
        // 61's end is forged (a wrong nonce): it and the next record read as one name,
        // whose two ids differ.
        assert_eq!(ids, [58, 60, 63], "{:?}", parsed.problems);
        assert_eq!(parsed.items[1].name, "a | b\nc");
        assert_eq!(parsed.items[0].user_name.as_deref(), Some("drover-bob"));
        assert_eq!(parsed.items[0].cpus, Some(1));
        assert_eq!(parsed.items[0].memory, Some(500));
        assert_eq!(parsed.items[1].memory, None);
        assert_eq!(tres_memory("cpu=2,mem=1.5G,node=1"), Some(1536));
        assert_eq!(tres_memory("cpu=2,node=1"), None);
        assert_eq!(parsed.items[0].start_time, Some(1_795_727_697));
        assert_eq!(parsed.items[2].exit_code, Some(143));
        assert_eq!(parsed.problems.len(), 1);
        let failed = parse_queue("1|FAILED|bob|node1|1||768|N/A|x|1@00ff@\n", nonce);
        assert_eq!(failed.items[0].exit_code, Some(3));
        assert!(
            parse_queue("1|RUNNING|bob|node1|1||0|N/A|x|1@00ff@", nonce)
                .items
                .is_empty()
        );
        assert!(!nonce_is_digit_led());
    }

    fn nonce_is_digit_led() -> bool {
        let n = nonce();
        n.len() != 18 || n.starts_with(|c: char| c.is_ascii_digit() || c == '.') || n.contains(',')
    }

    #[test]
    fn accounting_records() {
        // As sacct 22.05 prints them: a code, a signal, a cancellation, a requeued job
        // listed twice, a line cut short.
        let text = "522|FAILED|3:0|2026-12-02T07:09:43|2026-12-02T07:09:43|node1|drover-bob|1\n\
            523|FAILED|0:9|2026-12-02T07:09:43|2026-12-02T07:09:44|node[1-2]|drover-bob|2\n\
            524|CANCELLED by 0|0:15|Unknown|2026-12-02T07:09:45|None assigned|bob|0\n\
            525|REQUEUED|0:0|N/A|N/A|node1|bob|1\n\
            525|COMPLETED|0:0|N/A|N/A|node2|bob|1\n\
            526|COMPLETED|0:0\n";
        let parsed = parse_accounting(text);
        let ends: Vec<(u64, &str, Option<i32>)> = parsed
            .items
            .iter()
            .map(|j| (j.job_id, j.state.as_str(), j.exit_code))
            .collect();
        assert_eq!(
            ends,
            [
                (522, "FAILED", Some(3)),
                (523, "FAILED", Some(137)),
                (524, "CANCELLED", Some(143)),
                (525, "COMPLETED", Some(0)),
            ]
        );
        assert_eq!(parsed.problems.len(), 1, "{:?}", parsed.problems);
        assert_eq!(parsed.items[1].nodes, "node[1-2]");
        assert_eq!(parsed.items[2].nodes, "");
        assert_eq!(parsed.items[3].nodes, "node2");
        assert_eq!(parsed.items[1].end_time, Some(1_796_195_384));
        assert!(parsed.items.iter().all(|j| j.is_finished()));
    }

    #[test]
    fn host_lists() {
        assert_eq!(
            expand_hostlist("node[1-3,07],gpu1").unwrap(),
            ["node1", "node2", "node3", "node07", "gpu1"]
        );
        assert_eq!(
            expand_hostlist("n[08-10]x").unwrap(),
            ["n08x", "n09x", "n10x"]
        );
        assert!(expand_hostlist("").unwrap().is_empty());
        assert!(expand_hostlist("n[3-1]").is_err());
        assert!(expand_hostlist("n[1-9999999]").is_err());
        assert!(expand_hostlist("n[1").is_err());
    }

    #[test]
    fn utc_times() {
        assert_eq!(parse_utc("1970-01-01T00:00:00"), Some(0));
        assert_eq!(parse_utc("2000-03-01T00:00:01"), Some(951_868_801));
        assert_eq!(parse_utc("N/A"), None);
    }
}
