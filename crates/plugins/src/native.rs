//! The built-in `Native` plugin type: the parts that need no service state.
//!
//! A Native plugin is the "native resource manager" of the original product: its
//! configuration holds URLs such as `getNodes=exec:///opt/site/nodes.sh` or
//! `getNodes=file:///var/lib/site/nodes.txt`. On every poll the service reads the URL
//! ([`read_url`]) and gets text in the WIKI format, one line per node or job:
//!
//! ```text
//! node01 STATE=Idle CPROC=4 APROC=2 CMEMORY=8192 AMEMORY=4096 FEATURE=fast:gpu GMETRIC[temp]=51.5
//! job.1 STATE=Running UNAME=bob TASKS=4 WCLIMIT=3600
//! ```
//!
//! which [`parse_nodes`] and [`parse_jobs`] turn into reports. Pairs are separated by
//! whitespace or `;`, values may be quoted (`"..."` or `'...'`), a backslash escapes the
//! next character, keys are case-insensitive, and `#` starts a comment. Parsing never
//! fails as a whole: a line or a value that cannot be read becomes a problem
//! (`"line 3: ..."`) and the rest is kept, because one bad node must not hide the others.
//!
//! Reading URLs is the dangerous part: the service runs as root and the URL comes from
//! a plugin configuration sent over HTTP. So only `file://` and `exec://` are accepted,
//! the path must resolve (symlinks included) inside one of the directories the operator
//! configured ([`Locations`]), programs run without a shell, with an empty environment,
//! under a timeout and an output limit, and optionally as an unprivileged user. The
//! directories themselves must not be writable by untrusted users: the checks here
//! guard against what a URL can name, not against someone who can rename files there.

use std::collections::BTreeMap;
use std::num::{IntErrorKind, ParseIntError};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

/// Lines after this many are not read: a runaway script must not make a poll unbounded.
pub const MAX_LINES: usize = 10_000;
/// Longer lines are skipped (and reported) rather than parsed.
pub const MAX_LINE_BYTES: usize = 4096;

/// Node states of the WIKI format, in their usual spelling.
const NODE_STATES: &[&str] = &[
    "Idle", "Busy", "Running", "Down", "Drained", "Draining", "Flush", "Reserved", "Unknown", "Up",
    "None",
];
/// Job states of the WIKI format, in their usual spelling.
const JOB_STATES: &[&str] = &[
    "Idle",
    "Running",
    "Starting",
    "Completed",
    "Removed",
    "Hold",
    "Suspended",
    "Vacated",
    "Canceling",
    "Blocked",
    "Deferred",
    "Staging",
    "Unknown",
];

/// One node line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub id: String,
    /// Normalized: `Idle`, `Busy`, `Running`, `Down`, `Drained`, `Draining`, `Unknown`...
    /// whatever the case given; an unknown word is kept, capitalized.
    pub state: Option<String>,
    /// CPROC
    pub processors: Option<u32>,
    /// APROC
    pub available_processors: Option<u32>,
    /// CMEMORY, in MB
    pub memory: Option<u64>,
    /// AMEMORY, in MB
    pub available_memory: Option<u64>,
    /// CDISK, in MB
    pub disk: Option<u64>,
    /// ADISK, in MB
    pub available_disk: Option<u64>,
    pub os: Option<String>,
    pub architecture: Option<String>,
    /// FEATURE, colon (or comma) separated; repeated keys add up.
    pub features: Vec<String>,
    pub partition: Option<String>,
    pub cpu_load: Option<f64>,
    /// GMETRIC[name]=value
    pub generic_metrics: BTreeMap<String, f64>,
    /// GEVENT[name]=text
    pub generic_events: Vec<(String, String)>,
    /// MESSAGE (may be repeated)
    pub messages: Vec<String>,
    /// every other KEY=value, kept (key upper-cased, `[name]` as given)
    pub other: BTreeMap<String, String>,
}

/// One job line.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    pub id: String,
    /// Normalized like a node's state (`Idle`, `Running`, `Completed`...).
    pub state: Option<String>,
    /// UNAME
    pub user: Option<String>,
    /// every other KEY=value (key upper-cased)
    pub fields: BTreeMap<String, String>,
}

/// Parses a getNodes answer: the reports, and one problem per line that could not be
/// read ("line 3: ..."); a bad line never stops the others. Bounds: at most 10_000 lines
/// and 4 KiB per line are read (more is a problem, not a crash); numbers that do not
/// parse or overflow are problems for that key only.
pub fn parse_nodes(text: &str) -> (Vec<NodeReport>, Vec<String>) {
    parse_records(text, build_node)
}

/// Parses a getJobs answer, with the same rules as [`parse_nodes`].
pub fn parse_jobs(text: &str) -> (Vec<JobReport>, Vec<String>) {
    parse_records(text, build_job)
}

/// A word of a line once quotes and escapes are resolved; `eq` is where its first
/// unquoted `=` is, so that `MESSAGE="a=b"` splits at the right place.
#[derive(Default)]
struct Token {
    text: String,
    eq: Option<usize>,
}

/// One `KEY=value`, or `KEY[name]=value`.
struct Pair {
    key: String,
    name: Option<String>,
    value: String,
}

impl Pair {
    fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{}[{}]", self.key, name),
            None => self.key.clone(),
        }
    }
}

type Build<T> = fn(String, Vec<Pair>, &mut Vec<String>) -> T;

fn parse_records<T>(text: &str, build: Build<T>) -> (Vec<T>, Vec<String>) {
    let mut records = Vec::new();
    let mut problems = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if index == MAX_LINES {
            problems.push(format!(
                "line {number}: more than {MAX_LINES} lines; the rest was not read"
            ));
            break;
        }
        let mut line_problems = Vec::new();
        if let Some(record) = parse_line(line, build, &mut line_problems) {
            records.push(record);
        }
        problems.extend(
            line_problems
                .into_iter()
                .map(|p| format!("line {number}: {p}")),
        );
    }
    (records, problems)
}

fn parse_line<T>(line: &str, build: Build<T>, problems: &mut Vec<String>) -> Option<T> {
    if line.len() > MAX_LINE_BYTES {
        problems.push(format!("longer than {MAX_LINE_BYTES} bytes; skipped"));
        return None;
    }
    if line
        .chars()
        .any(|c| c.is_control() && c != '\t' && c != '\r')
    {
        problems.push("contains control characters; skipped".to_owned());
        return None;
    }
    let tokens = match tokenize(line) {
        Ok(tokens) => tokens,
        Err(problem) => {
            problems.push(format!("{problem}; skipped"));
            return None;
        }
    };
    let mut tokens = tokens.into_iter();
    let first = tokens.next()?; // blank or comment line
    if first.eq.is_some() || first.text.is_empty() {
        problems.push(format!(
            "starts with `{}` instead of an id; skipped",
            short(&first.text)
        ));
        return None;
    }
    let pairs = tokens
        .filter_map(|token| pair(token).map_err(|p| problems.push(p)).ok())
        .collect();
    Some(build(first.text, pairs, problems))
}

/// Splits a line at unquoted whitespace and `;`; an unquoted `#` at the start of a word
/// ends the line (a comment).
fn tokenize(line: &str) -> Result<Vec<Token>, String> {
    let mut tokens = Vec::new();
    let mut current = Token::default();
    let mut started = false;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                let escaped = chars.next().ok_or("the line ends with a lone backslash")?;
                current.text.push(escaped);
                started = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => current.text.push(c),
            (None, '#') if !started => break,
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() || c == ';' => {
                if started {
                    tokens.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            (None, c) => {
                if c == '=' && current.eq.is_none() {
                    current.eq = Some(current.text.len());
                }
                current.text.push(c);
                started = true;
            }
        }
    }
    if quote.is_some() {
        return Err("a quote is not closed".to_owned());
    }
    if started {
        tokens.push(current);
    }
    Ok(tokens)
}

fn pair(token: Token) -> Result<Pair, String> {
    let Some(eq) = token.eq else {
        return Err(format!("`{}` is not KEY=value", short(&token.text)));
    };
    let (key, value) = (&token.text[..eq], &token.text[eq + 1..]);
    let (base, name) = match key.split_once('[') {
        Some((base, rest)) => match rest.strip_suffix(']') {
            Some(name) if !name.is_empty() && !name.contains(['[', ']']) => (base, Some(name)),
            _ => return Err(format!("`{}` is not a valid key", short(key))),
        },
        None => (key, None),
    };
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if base.is_empty() || !base.chars().all(valid) {
        return Err(format!("`{}` is not a valid key", short(key)));
    }
    Ok(Pair {
        key: base.to_ascii_uppercase(),
        name: name.map(str::to_owned),
        value: value.to_owned(),
    })
}

fn build_node(id: String, pairs: Vec<Pair>, problems: &mut Vec<String>) -> NodeReport {
    let mut node = NodeReport {
        id,
        ..NodeReport::default()
    };
    for pair in pairs {
        if let Err(problem) = apply_node_pair(&mut node, pair) {
            problems.push(problem);
        }
    }
    node
}

fn apply_node_pair(node: &mut NodeReport, pair: Pair) -> Result<(), String> {
    match (pair.key.as_str(), &pair.name) {
        ("STATE", None) => node.state = Some(state(&pair, NODE_STATES)?),
        ("CPROC", None) => node.processors = Some(whole(&pair)?),
        ("APROC", None) => node.available_processors = Some(whole(&pair)?),
        ("CMEMORY", None) => node.memory = Some(whole(&pair)?),
        ("AMEMORY", None) => node.available_memory = Some(whole(&pair)?),
        ("CDISK", None) => node.disk = Some(whole(&pair)?),
        ("ADISK", None) => node.available_disk = Some(whole(&pair)?),
        ("OS", None) => node.os = Some(word(&pair)?),
        ("ARCH", None) => node.architecture = Some(word(&pair)?),
        ("PARTITION", None) => node.partition = Some(word(&pair)?),
        ("CPULOAD", None) => node.cpu_load = Some(real(&pair)?),
        ("FEATURE", None) => add_features(&mut node.features, &pair.value),
        ("MESSAGE", None) => node.messages.push(pair.value),
        ("GMETRIC", Some(name)) => {
            let value = real(&pair)?;
            node.generic_metrics.insert(name.clone(), value);
        }
        ("GEVENT", Some(name)) => node.generic_events.push((name.clone(), pair.value)),
        ("GMETRIC" | "GEVENT", None) => {
            return Err(format!(
                "{} needs a name, as in {}[temp]=...",
                pair.key, pair.key
            ));
        }
        _ => {
            node.other.insert(pair.label(), pair.value);
        }
    }
    Ok(())
}

fn build_job(id: String, pairs: Vec<Pair>, problems: &mut Vec<String>) -> JobReport {
    let mut job = JobReport {
        id,
        ..JobReport::default()
    };
    for pair in pairs {
        match (pair.key.as_str(), &pair.name) {
            ("STATE", None) => match state(&pair, JOB_STATES) {
                Ok(state) => job.state = Some(state),
                Err(problem) => problems.push(problem),
            },
            ("UNAME", None) => match word(&pair) {
                Ok(user) => job.user = Some(user),
                Err(problem) => problems.push(problem),
            },
            _ => {
                job.fields.insert(pair.label(), pair.value);
            }
        }
    }
    job
}

fn add_features(features: &mut Vec<String>, value: &str) {
    for feature in value.split([':', ',']).filter(|f| !f.is_empty()) {
        if !features.iter().any(|known| known == feature) {
            features.push(feature.to_owned());
        }
    }
}

/// A known state in its usual spelling whatever the case given; an unknown word kept,
/// with its first letter upper-cased.
fn state(pair: &Pair, known: &[&str]) -> Result<String, String> {
    let value = word(pair)?;
    if let Some(known) = known.iter().find(|k| k.eq_ignore_ascii_case(&value)) {
        return Ok((*known).to_owned());
    }
    let mut chars = value.chars();
    Ok(chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default())
}

fn word(pair: &Pair) -> Result<String, String> {
    if pair.value.is_empty() {
        return Err(format!("{} has no value", pair.label()));
    }
    Ok(pair.value.clone())
}

fn whole<T: FromStr<Err = ParseIntError>>(pair: &Pair) -> Result<T, String> {
    pair.value.parse().map_err(|e: ParseIntError| {
        let why = match e.kind() {
            IntErrorKind::PosOverflow => "is too large",
            IntErrorKind::Empty => "has no value",
            _ => "is not a whole number",
        };
        format!("{}={} {why}", pair.label(), short(&pair.value))
    })
}

fn real(pair: &Pair) -> Result<f64, String> {
    match pair.value.parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        _ => Err(format!(
            "{}={} is not a number",
            pair.label(),
            short(&pair.value)
        )),
    }
}

/// Keeps messages readable when a value is long.
fn short(text: &str) -> String {
    const KEEP: usize = 60;
    match text.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- parsing -------------------------------------------------------------------

    #[test]
    fn a_full_node_line_is_read() {
        let text = "node01 STATE=Idle CPROC=4 APROC=2 CMEMORY=8192 AMEMORY=4096 CDISK=100 \
                    ADISK=50 OS=linux ARCH=x86_64 FEATURE=fast:gpu PARTITION=p1 CPULOAD=0.25 \
                    GMETRIC[temp]=51.5 GMETRIC[watts]=300 GEVENT[fan]=slow MESSAGE=hello \
                    RACK=3 SLOT=7 CSWAP=2048\n";
        let (nodes, problems) = parse_nodes(text);
        assert_eq!(problems, Vec::<String>::new());
        let node = &nodes[0];
        assert_eq!(node.id, "node01");
        assert_eq!(node.state.as_deref(), Some("Idle"));
        assert_eq!(
            (node.processors, node.available_processors),
            (Some(4), Some(2))
        );
        assert_eq!(
            (node.memory, node.available_memory),
            (Some(8192), Some(4096))
        );
        assert_eq!((node.disk, node.available_disk), (Some(100), Some(50)));
        assert_eq!(node.os.as_deref(), Some("linux"));
        assert_eq!(node.architecture.as_deref(), Some("x86_64"));
        assert_eq!(node.features, ["fast", "gpu"]);
        assert_eq!(node.partition.as_deref(), Some("p1"));
        assert_eq!(node.cpu_load, Some(0.25));
        assert_eq!(node.generic_metrics["temp"], 51.5);
        assert_eq!(node.generic_metrics["watts"], 300.0);
        assert_eq!(node.generic_events, [("fan".to_owned(), "slow".to_owned())]);
        assert_eq!(node.messages, ["hello"]);
        assert_eq!(node.other["RACK"], "3");
        assert_eq!(node.other["SLOT"], "7");
        assert_eq!(node.other["CSWAP"], "2048");
    }

    #[test]
    fn quotes_semicolons_and_escapes() {
        let text = r#"node02;STATE=busy;MESSAGE="disk full on /scratch; call x=1";OS='red hat';FEATURE=a\;b"#;
        let (nodes, problems) = parse_nodes(text);
        assert!(problems.is_empty(), "{problems:?}");
        let node = &nodes[0];
        assert_eq!(node.state.as_deref(), Some("Busy"));
        assert_eq!(node.messages, ["disk full on /scratch; call x=1"]);
        assert_eq!(node.os.as_deref(), Some("red hat"));
        assert_eq!(node.features, ["a;b"]);
    }

    #[test]
    fn keys_are_case_insensitive_and_states_normalized() {
        let (nodes, problems) =
            parse_nodes("n1 state=DOWN cproc=8 gmetric[Temp]=40 feature=x\nn2 State=weird rack=2");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(nodes[0].state.as_deref(), Some("Down"));
        assert_eq!(nodes[0].processors, Some(8));
        assert_eq!(nodes[0].generic_metrics["Temp"], 40.0);
        assert_eq!(nodes[1].state.as_deref(), Some("Weird"));
        assert_eq!(nodes[1].other["RACK"], "2");
    }

    #[test]
    fn comments_and_blank_lines_are_skipped() {
        let text = "# site nodes\n\n   \nn1 STATE=Idle # trailing comment\n  # indented\nn2\r\n";
        let (nodes, problems) = parse_nodes(text);
        assert!(problems.is_empty(), "{problems:?}");
        let ids: Vec<_> = nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["n1", "n2"]);
        assert!(nodes[0].other.is_empty());
    }

    #[test]
    fn bad_numbers_are_problems_for_their_key_only() {
        let text = "n1 CPROC=abc APROC=-1 CMEMORY=99999999999999999999999 GMETRIC[x]=hot \
                    CPULOAD=nan STATE=Idle AMEMORY=12\nn2 CPROC=4";
        let (nodes, problems) = parse_nodes(text);
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].state.as_deref(), Some("Idle"));
        assert_eq!(nodes[0].available_memory, Some(12));
        assert_eq!(nodes[0].processors, None);
        assert_eq!(nodes[0].memory, None);
        assert!(nodes[0].generic_metrics.is_empty());
        assert_eq!(nodes[1].processors, Some(4));
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(problems.iter().all(|p| p.starts_with("line 1: ")));
        assert!(
            problems
                .iter()
                .any(|p| p.contains("CMEMORY") && p.contains("too large"))
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("CPROC=abc is not a whole number"))
        );
    }

    #[test]
    fn bad_lines_do_not_stop_the_others() {
        let long = format!("n0 MESSAGE={}", "x".repeat(MAX_LINE_BYTES));
        let text = format!(
            "{long}\nn1 MESSAGE=\"open\nSTATE=Idle\nn3 junk GMETRIC=1 [x]=2\nn4 STATE=Idle\n"
        );
        let (nodes, problems) = parse_nodes(&text);
        let ids: Vec<_> = nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["n3", "n4"]);
        assert!(
            problems[0].starts_with("line 1: longer than"),
            "{problems:?}"
        );
        assert!(problems[1].starts_with("line 2: a quote is not closed"));
        assert!(problems[2].starts_with("line 3: starts with `STATE=Idle`"));
        assert_eq!(problems.len(), 6, "{problems:?}");
        assert!(problems[3..].iter().all(|p| p.starts_with("line 4: ")));
    }

    #[test]
    fn too_many_lines_is_a_problem() {
        let text = "n STATE=Idle\n".repeat(MAX_LINES + 5);
        let (nodes, problems) = parse_nodes(&text);
        assert_eq!(nodes.len(), MAX_LINES);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("more than 10000 lines"));
    }

    #[test]
    fn a_job_line_is_read() {
        let (jobs, problems) =
            parse_jobs("job.1 STATE=running UNAME=bob TASKS=4 WCLIMIT=3600 gname=staff\n");
        assert!(problems.is_empty(), "{problems:?}");
        let job = &jobs[0];
        assert_eq!(job.id, "job.1");
        assert_eq!(job.state.as_deref(), Some("Running"));
        assert_eq!(job.user.as_deref(), Some("bob"));
        assert_eq!(job.fields["TASKS"], "4");
        assert_eq!(job.fields["WCLIMIT"], "3600");
        assert_eq!(job.fields["GNAME"], "staff");
    }
}
