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
use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::num::{IntErrorKind, ParseIntError};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

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
    /// `GMETRIC[name]=value`
    pub generic_metrics: BTreeMap<String, f64>,
    /// `GEVENT[name]=text`
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

// ---------------------------------------------------------------------------------------
// Reading URLs
// ---------------------------------------------------------------------------------------

/// Where URLs of a plugin's configuration may point (from the operator's configuration
/// only, never from a request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// Absolute directories; a URL's path must resolve inside one. Empty refuses all.
    pub directories: Vec<PathBuf>,
    /// the user exec:// programs run as and file:// files are read as; None = the
    /// service's own user
    pub run_as: Option<String>,
    pub timeout: Duration,
    /// Bytes; a file or an output larger than this is refused.
    pub max_output: usize,
    /// `run_as: Some("root")` is refused unless this is true (and any other name with
    /// uid 0 always is), as are programs run without `run_as` by a service running as
    /// root, so that root is never chosen by mistake.
    pub allow_root: bool,
}

impl Locations {
    /// The given directories, run as the service's user, 30 s, 4 MiB.
    pub fn new(directories: Vec<PathBuf>) -> Self {
        Locations {
            directories,
            run_as: None,
            timeout: Duration::from_secs(30),
            max_output: 4 << 20,
            allow_root: false,
        }
    }

    /// These locations with the timeout cut to what is left before `deadline`: a
    /// script's call passes its own, so that a program it runs is killed when the call's
    /// time is up rather than after the full timeout.
    pub fn until(&self, deadline: Instant) -> Locations {
        let left = deadline.saturating_duration_since(Instant::now());
        Locations {
            timeout: self.timeout.min(left),
            ..self.clone()
        }
    }
}

/// Why a URL was refused or could not be read; each message is a sentence for the user.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("The URL contains a NUL byte.")]
    Nul,
    #[error("An argument contains a NUL byte.")]
    NulArgument,
    #[error("`{0}` is not a URL: write file:///absolute/path or exec:///absolute/path.")]
    NotAUrl(String),
    #[error("The scheme `{0}` is not supported: only file:// and exec:// URLs are.")]
    Scheme(String),
    #[error("An action must be an exec:// URL.")]
    ActionNotExec,
    #[error(
        "The path `{0}` is not absolute: write three slashes, as in exec:///opt/site/nodes.sh."
    )]
    NotAbsolute(String),
    #[error("The path `{0}` contains `..`, which is not allowed.")]
    ParentDir(String),
    #[error("A file:// URL takes no arguments (`?...`).")]
    FileArguments,
    #[error(
        "No usable directory is configured for this plugin's URLs (none is set, or none exists)."
    )]
    NoDirectories,
    #[error("The path `{0}` is outside the directories allowed for this plugin.")]
    Outside(String),
    #[error("The path `{path}` cannot be resolved: {reason}.")]
    Unresolved { path: String, reason: String },
    #[error("`{0}` is not a regular file.")]
    NotRegular(String),
    #[error("`{0}` is not executable.")]
    NotExecutable(String),
    #[error("The user `{0}` does not exist.")]
    UnknownUser(String),
    #[error("Running as `{0}` (uid 0 or a member of group 0) is not allowed.")]
    RootRefused(String),
    #[error("`{path}` could not be read: {source}.")]
    Io { path: String, source: io::Error },
    #[error("`{path}` could not be started: {source}.")]
    Spawn { path: String, source: io::Error },
    #[error("`{path}` did not finish within {} s and was stopped (timeout).", .after.as_secs_f64())]
    Timeout { path: String, after: Duration },
    #[error("The output of `{path}` is larger than {limit} bytes.")]
    TooLarge { path: String, limit: usize },
    #[error("`{path}` failed ({status}){}", stderr_suffix(.stderr))]
    Failed {
        path: String,
        status: String,
        stderr: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        ".".to_owned()
    } else {
        format!(": {stderr}")
    }
}

/// Reads `url`: `file:///abs/path` (the file's content) or
/// `exec:///abs/path/program?arg1&arg2` (its standard output). Anything else is refused.
///
/// The URL is taken literally (no percent-decoding); arguments are split at `&` and
/// empty ones dropped. A program that exits with a non-zero status is an error, as is
/// a file or an output larger than `max_output` (a cut-off answer would silently lose
/// nodes). Processes the program leaves behind in its process group are killed when
/// it ends.
pub fn read_url(url: &str, locations: &Locations) -> Result<String, UrlError> {
    let target = parse_url(url)?;
    match target.scheme {
        Scheme::File => read_file(&target, locations),
        Scheme::Exec => execute(&target, &[], locations),
    }
}

/// Checks `url` as [`read_url`] would (its form, and that it lies inside the directories)
/// without reading it: a configuration is refused before it is kept.
pub fn check_url(url: &str, locations: &Locations) -> Result<(), UrlError> {
    let target = parse_url(url)?;
    resolve(&target, &allowed_roots(locations)?).map(drop)
}

/// Runs an action URL (`exec://...`, e.g. jobStart) with extra arguments (a job id...),
/// answering its output.
pub fn run_action(url: &str, args: &[&str], locations: &Locations) -> Result<String, UrlError> {
    let target = parse_url(url)?;
    if target.scheme != Scheme::Exec {
        return Err(UrlError::ActionNotExec);
    }
    if args.iter().any(|arg| arg.contains('\0')) {
        return Err(UrlError::NulArgument);
    }
    execute(&target, args, locations)
}

#[derive(Debug, PartialEq, Eq)]
enum Scheme {
    File,
    Exec,
}

struct Target {
    scheme: Scheme,
    /// As written in the URL: messages show this, not where symlinks lead.
    path: String,
    args: Vec<String>,
}

fn parse_url(url: &str) -> Result<Target, UrlError> {
    if url.contains('\0') {
        return Err(UrlError::Nul);
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(match url.split_once(':') {
            Some((scheme, _)) if !scheme.is_empty() => UrlError::Scheme(short(scheme)),
            _ => UrlError::NotAUrl(short(url)),
        });
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "file" => Scheme::File,
        "exec" => Scheme::Exec,
        _ => return Err(UrlError::Scheme(short(scheme))),
    };
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    if !path.starts_with('/') {
        return Err(UrlError::NotAbsolute(short(path)));
    }
    // Refused outright rather than resolved: a `..` in a URL is never needed.
    if path.split('/').any(|part| part == "..") {
        return Err(UrlError::ParentDir(short(path)));
    }
    if scheme == Scheme::File && query.is_some() {
        return Err(UrlError::FileArguments);
    }
    let args = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|arg| !arg.is_empty())
        .map(str::to_owned)
        .collect();
    Ok(Target {
        scheme,
        path: path.to_owned(),
        args,
    })
}

/// The configured directories, resolved; relative or missing ones are ignored.
fn allowed_roots(locations: &Locations) -> Result<Vec<(PathBuf, PathBuf)>, UrlError> {
    let roots: Vec<_> = locations
        .directories
        .iter()
        .filter(|dir| dir.is_absolute())
        .filter_map(|dir| Some((dir.clone(), std::fs::canonicalize(dir).ok()?)))
        .collect();
    if roots.is_empty() {
        return Err(UrlError::NoDirectories);
    }
    Ok(roots)
}

/// The path with symlinks resolved, if it lies inside an allowed directory. A path
/// outside them is refused before the filesystem is touched, so that the answer does
/// not tell whether a file exists elsewhere.
fn resolve(target: &Target, roots: &[(PathBuf, PathBuf)]) -> Result<PathBuf, UrlError> {
    let given = Path::new(&target.path);
    if !roots
        .iter()
        .any(|(written, real)| given.starts_with(written) || given.starts_with(real))
    {
        return Err(UrlError::Outside(short(&target.path)));
    }
    let real = std::fs::canonicalize(given).map_err(|e| UrlError::Unresolved {
        path: short(&target.path),
        reason: e.kind().to_string(),
    })?;
    if !inside(&real, roots) {
        return Err(UrlError::Outside(short(&target.path)));
    }
    Ok(real)
}

fn inside(path: &Path, roots: &[(PathBuf, PathBuf)]) -> bool {
    roots.iter().any(|(_, real)| path.starts_with(real))
}

/// Opens the resolved path without following a symlink and checks, on the open file,
/// that it is a regular file still inside the directories: the path may have changed
/// since it was resolved.
fn open_checked(
    real: &Path,
    target: &Target,
    roots: &[(PathBuf, PathBuf)],
) -> Result<File, UrlError> {
    let io_error = |source| UrlError::Io {
        path: short(&target.path),
        source,
    };
    // lstat first so that a FIFO or a device is never opened (opening one can block or
    // act); O_NONBLOCK covers a swap between this check and the open.
    let before = std::fs::symlink_metadata(real).map_err(io_error)?;
    if !before.file_type().is_file() {
        return Err(UrlError::NotRegular(short(&target.path)));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(real)
        .map_err(io_error)?;
    let after = file.metadata().map_err(io_error)?;
    if !after.file_type().is_file() || (after.dev(), after.ino()) != (before.dev(), before.ino()) {
        return Err(UrlError::NotRegular(short(&target.path)));
    }
    let opened =
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(io_error)?;
    if !inside(&opened, roots) {
        return Err(UrlError::Outside(short(&target.path)));
    }
    Ok(file)
}

fn read_file(target: &Target, locations: &Locations) -> Result<String, UrlError> {
    let roots = allowed_roots(locations)?;
    let real = resolve(target, &roots)?;
    let identity = identity(locations)?;
    let file = open_checked(&real, target, &roots)?;
    let Some(identity) = identity else {
        return read_open_file(file, target, locations.max_output);
    };
    drop(file);
    // Reading as another user: that user's own `cat` opens the file, so the kernel
    // applies that user's permissions, not root's.
    let program = Program {
        path: PathBuf::from("/bin/cat"),
        shown: target.path.clone(),
    };
    let args = [OsString::from("--"), real.into_os_string()];
    run(&program, &args, Some(&identity), locations)
}

fn read_open_file(file: File, target: &Target, limit: usize) -> Result<String, UrlError> {
    let capture = read_capped(file, limit).map_err(|source| UrlError::Io {
        path: short(&target.path),
        source,
    })?;
    if capture.overflowed {
        return Err(UrlError::TooLarge {
            path: short(&target.path),
            limit,
        });
    }
    Ok(String::from_utf8_lossy(&capture.bytes).into_owned())
}

fn execute(target: &Target, extra: &[&str], locations: &Locations) -> Result<String, UrlError> {
    let roots = allowed_roots(locations)?;
    let real = resolve(target, &roots)?;
    let identity = identity(locations)?;
    // Without a user to run as, a program runs as the service's own user: when that is
    // root, only if the operator said root may run them (as for `run_as = "root"`), so
    // that a root service does not run plugins' programs, with the arguments their
    // URLs give, as root by default.
    // SAFETY: geteuid has no preconditions.
    if identity.is_none() && unsafe { libc::geteuid() } == 0 && !locations.allow_root {
        return Err(UrlError::RootRefused(
            "root (the service's own user: no user to run as is configured)".into(),
        ));
    }
    let file = open_checked(&real, target, &roots)?;
    let mode = file
        .metadata()
        .map_err(|source| UrlError::Io {
            path: short(&target.path),
            source,
        })?
        .mode();
    if mode & 0o111 == 0 {
        return Err(UrlError::NotExecutable(short(&target.path)));
    }
    drop(file);
    let args: Vec<OsString> = target
        .args
        .iter()
        .map(String::as_str)
        .chain(extra.iter().copied())
        .map(OsString::from)
        .collect();
    let program = Program {
        path: real,
        shown: target.path.clone(),
    };
    run(&program, &args, identity.as_ref(), locations)
}

// ---------------------------------------------------------------------------------------
// Users
// ---------------------------------------------------------------------------------------

/// Who a child runs as, looked up in the parent: between fork and exec only
/// async-signal-safe calls are allowed, so no name lookups there.
#[derive(Debug, Clone)]
struct Identity {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

fn identity(locations: &Locations) -> Result<Option<Identity>, UrlError> {
    let Some(name) = &locations.run_as else {
        return Ok(None);
    };
    let cname = CString::new(name.as_str()).map_err(|_| UrlError::Nul)?;
    let (uid, gid) = lookup_user(&cname, name)?;
    let groups = group_list(&cname, gid);
    // Group 0 opens root's files as surely as uid 0 does.
    let rooted = uid == 0 || gid == 0 || groups.contains(&0);
    if rooted && !(name == "root" && locations.allow_root) {
        return Err(UrlError::RootRefused(short(name)));
    }
    Ok(Some(Identity { uid, gid, groups }))
}

fn lookup_user(cname: &CString, name: &str) -> Result<(libc::uid_t, libc::gid_t), UrlError> {
    let mut buffer = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: passwd is plain data; getpwnam_r writes into it and into `buffer`,
        // whose length is given, and sets `result` to null or to `passwd`.
        let mut passwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut passwd,
                buffer.as_mut_ptr(),
                buffer.len(),
                &mut result,
            )
        };
        if rc == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if rc != 0 || result.is_null() {
            return Err(UrlError::UnknownUser(short(name)));
        }
        return Ok((passwd.pw_uid, passwd.pw_gid));
    }
}

/// The user's supplementary groups (at least the primary group).
fn group_list(cname: &CString, gid: libc::gid_t) -> Vec<libc::gid_t> {
    let mut groups: Vec<libc::gid_t> = vec![0; 32];
    for _ in 0..8 {
        let mut count = groups.len() as libc::c_int;
        // SAFETY: `groups` holds `count` entries; getgrouplist writes at most that many
        // and sets `count` to the number it needs.
        let rc =
            unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        let count = usize::try_from(count).unwrap_or(0);
        if rc >= 0 {
            groups.truncate(count);
            return groups;
        }
        groups.resize(count.max(groups.len() * 2), 0);
    }
    vec![gid]
}

/// Runs in the child after fork: groups and gid can only change while still root, so
/// the uid goes last.
fn drop_privileges(identity: &Identity) -> io::Result<()> {
    let check = |rc: libc::c_int| {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: plain system calls on data prepared before fork.
    unsafe {
        check(libc::setgroups(
            identity.groups.len(),
            identity.groups.as_ptr(),
        ))?;
        check(libc::setgid(identity.gid))?;
        check(libc::setuid(identity.uid))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Running programs
// ---------------------------------------------------------------------------------------

/// What stderr keeps for the error message.
const STDERR_KEEP: usize = 400;

struct Program {
    /// What is executed (resolved).
    path: PathBuf,
    /// What messages name (as written in the URL).
    shown: String,
}

fn run(
    program: &Program,
    args: &[OsString],
    identity: Option<&Identity>,
    locations: &Locations,
) -> Result<String, UrlError> {
    let mut child = spawn(program, args, identity).map_err(|source| UrlError::Spawn {
        path: short(&program.shown),
        source,
    })?;
    let (stdout, stderr) = match readers(&mut child, locations.max_output) {
        Ok(readers) => readers,
        Err(source) => {
            drover_shepherd::children::kill_group(child.id());
            let _ = child.wait();
            let path = short(&program.shown);
            return Err(UrlError::Spawn { path, source });
        }
    };
    let result = wait_for(&mut child, stdout, locations);
    // Whatever happened, nothing the program started outlives it.
    drover_shepherd::children::kill_group(child.id());
    let status = child.wait();
    let stdout = result.map_err(|failure| failure.into_error(program, locations))?;
    let stderr = stderr_text(stderr);
    match status {
        Ok(status) if status.success() => Ok(String::from_utf8_lossy(&stdout).into_owned()),
        Ok(status) => Err(UrlError::Failed {
            path: short(&program.shown),
            status: describe(status),
            stderr,
        }),
        Err(source) => Err(UrlError::Spawn {
            path: short(&program.shown),
            source,
        }),
    }
}

fn spawn(program: &Program, args: &[OsString], identity: Option<&Identity>) -> io::Result<Child> {
    let mut command = Command::new(&program.path);
    command
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(identity) = identity.cloned() {
        // SAFETY: the closure only makes async-signal-safe system calls.
        unsafe { command.pre_exec(move || drop_privileges(&identity)) };
    }
    let mut attempt = 0;
    loop {
        match command.spawn() {
            // Another thread forking while a program file was being written leaves it
            // briefly "busy"; that passes.
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && attempt < 5 => {
                attempt += 1;
                thread::sleep(Duration::from_millis(20));
            }
            spawned => return spawned,
        }
    }
}

struct Capture {
    bytes: Vec<u8>,
    overflowed: bool,
}

/// Reads at most `limit` bytes, and one more to tell whether there was more.
fn read_capped(from: impl Read, limit: usize) -> io::Result<Capture> {
    let mut bytes = Vec::new();
    from.take(limit as u64 + 1).read_to_end(&mut bytes)?;
    let overflowed = bytes.len() > limit;
    bytes.truncate(limit);
    Ok(Capture { bytes, overflowed })
}

type Reader = JoinHandle<io::Result<Capture>>;

/// Threads reading stdout (stopping past the limit) and stderr (keeping its start and
/// draining the rest so that the program never blocks on it).
fn readers(child: &mut Child, max_output: usize) -> io::Result<(Option<Reader>, Option<Reader>)> {
    let stdout = child
        .stdout
        .take()
        .map(|out| spawn_reader(move || read_capped(out, max_output)))
        .transpose()?;
    let stderr = child
        .stderr
        .take()
        .map(|mut err| {
            spawn_reader(move || {
                let kept = read_capped(&mut err, STDERR_KEEP)?;
                io::copy(&mut err, &mut io::sink())?;
                Ok(kept)
            })
        })
        .transpose()?;
    Ok((stdout, stderr))
}

/// A reader thread; failing to start one is an error, not a panic of the poller.
fn spawn_reader(read: impl FnOnce() -> io::Result<Capture> + Send + 'static) -> io::Result<Reader> {
    thread::Builder::new()
        .name("native-output".to_owned())
        .spawn(read)
}

enum Failure {
    Timeout,
    TooLarge,
    Io(io::Error),
}

impl Failure {
    fn into_error(self, program: &Program, locations: &Locations) -> UrlError {
        let path = short(&program.shown);
        match self {
            Failure::Timeout => UrlError::Timeout {
                path,
                after: locations.timeout,
            },
            Failure::TooLarge => UrlError::TooLarge {
                path,
                limit: locations.max_output,
            },
            Failure::Io(source) => UrlError::Io { path, source },
        }
    }
}

/// Waits until the program has exited and its stdout is read, or the timeout.
fn wait_for(
    child: &mut Child,
    stdout: Option<Reader>,
    locations: &Locations,
) -> Result<Vec<u8>, Failure> {
    let deadline = Instant::now() + locations.timeout;
    let mut stdout = stdout;
    let mut output: Option<Vec<u8>> = None;
    loop {
        if let Some(reader) = stdout.take_if(|reader| reader.is_finished()) {
            let capture = join(reader).map_err(Failure::Io)?;
            if capture.overflowed {
                return Err(Failure::TooLarge);
            }
            output = Some(capture.bytes);
        }
        if stdout.is_none() && drover_shepherd::children::has_exited(child.id()) {
            return Ok(output.unwrap_or_default());
        }
        if Instant::now() >= deadline {
            // The reader thread is left behind: a process that escaped the group may
            // hold the pipe, and waiting for it would defeat the timeout.
            return Err(Failure::Timeout);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn join(reader: Reader) -> io::Result<Capture> {
    reader
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the output reader panicked")))
}

/// The start of stderr on one line, if its reader is done (it is not waited for).
fn stderr_text(reader: Option<Reader>) -> String {
    let deadline = Instant::now() + Duration::from_millis(200);
    let Some(reader) = reader else {
        return String::new();
    };
    while !reader.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    if !reader.is_finished() {
        return String::new();
    }
    let Ok(capture) = join(reader) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&capture.bytes);
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let one_line = one_line.split_whitespace().collect::<Vec<_>>().join(" ");
    if capture.overflowed {
        format!("{one_line}...")
    } else {
        one_line
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use tempfile::TempDir;

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

    // ---- URLs ----------------------------------------------------------------------

    /// An allowed directory (traversable by other users, for the run_as tests).
    fn allowed() -> (TempDir, Locations) {
        let dir = TempDir::new().expect("temp dir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let mut locations = Locations::new(vec![dir.path().to_path_buf()]);
        locations.timeout = Duration::from_secs(10);
        // The tests run programs as the service's own user, root in the test runs.
        locations.allow_root = true;
        (dir, locations)
    }

    fn url(scheme: &str, path: &Path) -> String {
        format!("{scheme}://{}", path.display())
    }

    fn write(path: &Path, text: &str, mode: u32) {
        std::fs::write(path, text).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn script(dir: &TempDir, name: &str, body: &str) -> PathBuf {
        let path = dir.path().join(name);
        write(&path, &format!("#!/bin/sh\n{body}\n"), 0o755);
        path
    }

    #[test]
    fn a_file_inside_is_read() {
        let (dir, locations) = allowed();
        let path = dir.path().join("nodes.txt");
        write(&path, "n1 STATE=Idle\n", 0o644);
        let text = read_url(&url("file", &path), &locations).expect("read");
        assert_eq!(text, "n1 STATE=Idle\n");
    }

    #[test]
    fn a_file_outside_is_refused() {
        let (_dir, locations) = allowed();
        let other = TempDir::new().expect("temp dir");
        let path = other.path().join("secret");
        write(&path, "x", 0o644);
        let error = read_url(&url("file", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::Outside(_)), "{error}");
        let error = read_url("file:///etc/shadow", &locations).unwrap_err();
        assert!(matches!(error, UrlError::Outside(_)), "{error}");
    }

    #[test]
    fn a_symlink_pointing_outside_is_refused() {
        let (dir, locations) = allowed();
        let other = TempDir::new().expect("temp dir");
        write(&other.path().join("secret"), "x", 0o644);
        symlink(other.path().join("secret"), dir.path().join("link")).expect("symlink");
        symlink(other.path(), dir.path().join("subdir")).expect("symlink");
        for path in [dir.path().join("link"), dir.path().join("subdir/secret")] {
            let error = read_url(&url("file", &path), &locations).unwrap_err();
            assert!(matches!(error, UrlError::Outside(_)), "{error}");
        }
    }

    #[test]
    fn a_symlink_inside_is_followed() {
        let (dir, locations) = allowed();
        write(&dir.path().join("real.txt"), "ok", 0o644);
        symlink(dir.path().join("real.txt"), dir.path().join("link")).expect("symlink");
        let text = read_url(&url("file", &dir.path().join("link")), &locations).expect("read");
        assert_eq!(text, "ok");
    }

    #[test]
    fn parent_components_relative_paths_and_other_schemes_are_refused() {
        let (dir, locations) = allowed();
        let sneaky = format!("file://{}/../../etc/passwd", dir.path().display());
        type Check = fn(&UrlError) -> bool;
        let cases: &[(&str, Check)] = &[
            (&sneaky, |e| matches!(e, UrlError::ParentDir(_))),
            ("file://nodes.txt", |e| {
                matches!(e, UrlError::NotAbsolute(_))
            }),
            ("exec://host/bin/true", |e| {
                matches!(e, UrlError::NotAbsolute(_))
            }),
            ("http://example.com/nodes", |e| {
                matches!(e, UrlError::Scheme(_))
            }),
            ("ftp://example.com/nodes", |e| {
                matches!(e, UrlError::Scheme(_))
            }),
            ("data:text/plain,n1", |e| matches!(e, UrlError::Scheme(_))),
            ("/etc/passwd", |e| matches!(e, UrlError::NotAUrl(_))),
            ("file:///etc/passwd\0", |e| matches!(e, UrlError::Nul)),
            ("file:///etc/passwd?x", |e| {
                matches!(e, UrlError::FileArguments)
            }),
        ];
        for (url, expected) in cases {
            let error = read_url(url, &locations).unwrap_err();
            assert!(expected(&error), "{url}: {error}");
        }
    }

    #[test]
    fn no_directories_refuse_everything() {
        let (dir, mut locations) = allowed();
        let path = dir.path().join("nodes.txt");
        write(&path, "n1", 0o644);
        locations.directories.clear();
        let error = read_url(&url("file", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::NoDirectories), "{error}");
    }

    #[test]
    fn only_regular_files_are_read() {
        let (dir, locations) = allowed();
        let fifo = dir.path().join("fifo");
        let name = CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o644) }, 0);
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        for path in [fifo, dir.path().join("sub")] {
            let error = read_url(&url("file", &path), &locations).unwrap_err();
            assert!(matches!(error, UrlError::NotRegular(_)), "{error}");
        }
    }

    #[test]
    fn a_file_larger_than_max_output_is_refused() {
        let (dir, mut locations) = allowed();
        let path = dir.path().join("big.txt");
        write(&path, &"x".repeat(100), 0o644);
        locations.max_output = 99;
        let error = read_url(&url("file", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::TooLarge { .. }), "{error}");
        locations.max_output = 100;
        assert_eq!(
            read_url(&url("file", &path), &locations)
                .expect("read")
                .len(),
            100
        );
    }

    #[test]
    fn exec_passes_arguments_without_a_shell_and_an_empty_environment() {
        let (dir, locations) = allowed();
        let program = script(
            &dir,
            "args.sh",
            "for a in \"$@\"; do echo \"[$a]\"; done\necho \"PATH=$PATH HOME=$HOME\"\ncat",
        );
        let base = url("exec", &program);
        let text = read_url(&format!("{base}?-a&two words&$(id)"), &locations).expect("run");
        assert_eq!(
            text,
            "[-a]\n[two words]\n[$(id)]\nPATH=/usr/bin:/bin HOME=\n"
        );
        let text =
            run_action(&format!("{base}?start"), &["job;1", "`x`"], &locations).expect("run");
        assert_eq!(text, "[start]\n[job;1]\n[`x`]\nPATH=/usr/bin:/bin HOME=\n");
        let error = run_action(&base, &["a\0b"], &locations).unwrap_err();
        assert!(matches!(error, UrlError::NulArgument), "{error}");
        let error = run_action(&url("file", &program), &[], &locations).unwrap_err();
        assert!(matches!(error, UrlError::ActionNotExec), "{error}");
    }

    #[test]
    fn a_failing_program_reports_its_status_and_stderr() {
        let (dir, locations) = allowed();
        let program = script(&dir, "fail.sh", "echo 'no such cluster' >&2\nexit 3");
        let error = read_url(&url("exec", &program), &locations).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, UrlError::Failed { .. }), "{message}");
        assert!(
            message.contains("(exit status 3): no such cluster"),
            "{message}"
        );
    }

    #[test]
    fn a_program_past_the_timeout_is_killed_with_its_group() {
        let (dir, mut locations) = allowed();
        let pid_file = dir.path().join("pid");
        let program = script(
            &dir,
            "slow.sh",
            &format!("sleep 30 &\necho $! > {}\nwait", pid_file.display()),
        );
        locations.timeout = Duration::from_millis(500);
        let started = Instant::now();
        let error = read_url(&url("exec", &program), &locations).unwrap_err();
        // Not the sleep's 30 s: the timeout ended it, whatever the machine's speed.
        assert!(started.elapsed() < Duration::from_secs(25));
        assert!(matches!(error, UrlError::Timeout { .. }), "{error}");
        assert!(error.to_string().contains("timeout"), "{error}");
        let pid = std::fs::read_to_string(&pid_file).expect("pid");
        assert!(gone(pid.trim()), "the background sleep survived");
    }

    #[test]
    fn a_deadline_before_the_timeout_cuts_it() {
        let (dir, locations) = allowed();
        let program = script(&dir, "slow.sh", "exec sleep 600");
        let within = locations.until(Instant::now() + Duration::from_millis(300));
        let error = read_url(&url("exec", &program), &within).unwrap_err();
        assert!(
            matches!(error, UrlError::Timeout { after, .. } if after <= Duration::from_millis(300)),
            "{error}"
        );
        let past = locations.until(Instant::now() - Duration::from_secs(1));
        assert_eq!(past.timeout, Duration::ZERO);
        assert_eq!(
            locations
                .until(Instant::now() + Duration::from_secs(600))
                .timeout,
            locations.timeout
        );
    }

    /// Whether a process is gone or a zombie (killed, not yet reaped by init).
    fn gone(pid: &str) -> bool {
        for _ in 0..100 {
            match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                Err(_) => return true,
                Ok(stat)
                    if stat
                        .rsplit(')')
                        .next()
                        .is_some_and(|s| s.trim_start().starts_with('Z')) =>
                {
                    return true;
                }
                Ok(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
        false
    }

    #[test]
    fn output_beyond_max_output_is_refused_promptly() {
        let (dir, mut locations) = allowed();
        let program = script(&dir, "yes.sh", "exec yes");
        locations.max_output = 1000;
        let started = Instant::now();
        let error = read_url(&url("exec", &program), &locations).unwrap_err();
        assert!(
            matches!(error, UrlError::TooLarge { limit: 1000, .. }),
            "{error}"
        );
        // Not the 30 s timeout: the output's bound ended it, whatever the machine's speed.
        assert!(started.elapsed() < Duration::from_secs(25));
    }

    #[test]
    fn programs_outside_or_not_executable_are_refused() {
        let (dir, locations) = allowed();
        let error = read_url("exec:///bin/echo?hi", &locations).unwrap_err();
        assert!(matches!(error, UrlError::Outside(_)), "{error}");
        symlink("/bin/echo", dir.path().join("echo")).expect("symlink");
        let error = read_url(&url("exec", &dir.path().join("echo")), &locations).unwrap_err();
        assert!(matches!(error, UrlError::Outside(_)), "{error}");
        let path = dir.path().join("plain.sh");
        write(&path, "#!/bin/sh\necho hi\n", 0o644);
        let error = read_url(&url("exec", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::NotExecutable(_)), "{error}");
    }

    #[test]
    fn run_as_drops_to_the_user_for_programs_and_files() {
        let (dir, mut locations) = allowed();
        locations.run_as = Some("drover-bob".to_owned());
        let program = script(&dir, "who.sh", "id -u; id -G");
        let text = read_url(&url("exec", &program), &locations).expect("run");
        let name = CString::new("drover-bob").expect("name");
        let (bob, _) = lookup_user(&name, "drover-bob").expect("drover-bob exists");
        assert_eq!(text.lines().next(), Some(bob.to_string().as_str()));
        assert_ne!(bob, 0);
        assert!(
            !text
                .lines()
                .nth(1)
                .unwrap_or_default()
                .split(' ')
                .any(|g| g == "0")
        );
        let public = dir.path().join("public.txt");
        write(&public, "n1\n", 0o644);
        assert_eq!(
            read_url(&url("file", &public), &locations).expect("read"),
            "n1\n"
        );
        let private = dir.path().join("private.txt");
        write(&private, "secret\n", 0o600);
        let error = read_url(&url("file", &private), &locations).unwrap_err();
        assert!(matches!(error, UrlError::Failed { .. }), "{error}");
        assert!(error.to_string().contains("Permission denied"), "{error}");
    }

    #[test]
    fn run_as_refuses_root_and_unknown_users() {
        let (dir, mut locations) = allowed();
        let path = dir.path().join("nodes.txt");
        write(&path, "n1\n", 0o644);
        locations.allow_root = false;
        locations.run_as = Some("root".to_owned());
        let error = read_url(&url("file", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::RootRefused(_)), "{error}");
        locations.allow_root = true;
        assert_eq!(
            read_url(&url("file", &path), &locations).expect("read"),
            "n1\n"
        );
        locations.run_as = Some("drover-nobody-such".to_owned());
        let error = read_url(&url("file", &path), &locations).unwrap_err();
        assert!(matches!(error, UrlError::UnknownUser(_)), "{error}");
    }
}
