//! Tables, dates, durations and colour for people; `--json` output for programs.

use std::io::IsTerminal;

use serde_json::Value;

/// Colour only for a person at a terminal who has not asked for none (no-color.org).
pub fn colour_wanted() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Progress and other chatter for a person: only on a terminal, on standard error.
pub fn progress_wanted() -> bool {
    std::io::stderr().is_terminal()
}

/// Prints a JSON value as it came, indented.
pub fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A table printed with its columns aligned; the state column may be coloured.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    state_column: Option<usize>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
            state_column: headers.iter().position(|h| *h == "STATE"),
        }
    }

    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    pub fn print(&self) {
        let colour = colour_wanted();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: Vec<String>, header: bool| {
            let last = cells.len().saturating_sub(1);
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let padding = if i == last {
                    0
                } else {
                    widths[i] - cell.chars().count() + 2
                };
                let shown = match (colour, header, Some(i) == self.state_column) {
                    (true, true, _) => format!("\x1b[1m{cell}\x1b[0m"),
                    (true, false, true) => paint_state(cell),
                    _ => cell.clone(),
                };
                text.push_str(&shown);
                text.push_str(&" ".repeat(padding));
            }
            println!("{}", text.trim_end());
        };
        line(self.headers.iter().map(|h| h.to_string()).collect(), true);
        for row in &self.rows {
            line(row.clone(), false);
        }
    }
}

fn paint_state(state: &str) -> String {
    let code = match state.to_ascii_uppercase().as_str() {
        "RUNNING" | "UP" | "IDLE_NODE" | "ACTIVE" | "STARTED" => "32",
        "IDLE" | "STARTING" | "PENDING" => "33",
        "REMOVED" | "FAILED" | "DOWN" | "DRAINED" => "31",
        "COMPLETED" => "2",
        _ => return state.to_string(),
    };
    format!("\x1b[{code}m{state}\x1b[0m")
}

/// A text field, or `-`.
pub fn text(value: &Value) -> String {
    match value {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => "-".into(),
    }
}

/// A server date (`yyyy-MM-dd HH:mm:ss ZONE`) shortened to `MM-dd HH:mm`, or `-`.
pub fn date(value: &Value) -> String {
    let Some(text) = value.as_str() else {
        return "-".into();
    };
    match (text.get(5..10), text.get(11..16)) {
        (Some(day), Some(time)) => format!("{day} {time}"),
        _ => text.to_string(),
    }
}

/// Seconds as `45s`, `12m05s`, `3h02m`, `2d04h`; `-` for none.
pub fn duration(value: &Value) -> String {
    match value.as_i64() {
        Some(seconds) if seconds >= 0 => human_seconds(seconds),
        _ => "-".into(),
    }
}

pub fn human_seconds(seconds: i64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3_600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s:02}s"),
        (0, _, _) => format!("{h}h{m:02}m"),
        _ => format!("{d}d{h:02}h"),
    }
}

/// Parses a time limit: seconds, `90s`, `30m`, `2h`, `1d`, `MM:SS`, `HH:MM:SS` or
/// `D-HH:MM:SS` (Slurm's forms).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || {
        format!(
            "'{text}' is not a duration: give seconds, 30m, 2h, 1d, MM:SS, HH:MM:SS or D-HH:MM:SS"
        )
    };
    let number = |t: &str| t.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(bad);
    let text = text.trim();
    if let Some((unit_at, unit)) = text
        .char_indices()
        .last()
        .filter(|(_, c)| c.is_alphabetic())
    {
        let scale = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        return number(&text[..unit_at])?.checked_mul(scale).ok_or_else(bad);
    }
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (number(days)?, clock),
        None => (0, text),
    };
    let parts = clock
        .split(':')
        .map(number)
        .collect::<Result<Vec<i64>, String>>()?;
    let seconds = match parts.as_slice() {
        [s] if days == 0 => *s,
        [h] => h * 3_600,
        [m, s] => m * 60 + s,
        [h, m, s] => h * 3_600 + m * 60 + s,
        _ => return Err(bad()),
    };
    Ok(days * 86_400 + seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_and_print_as_people_write_them() {
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("30m"), Ok(1_800));
        assert_eq!(parse_duration("2h"), Ok(7_200));
        assert_eq!(parse_duration("10:00"), Ok(600));
        assert_eq!(parse_duration("1:00:00"), Ok(3_600));
        assert_eq!(parse_duration("1-02:00:00"), Ok(93_600));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-5").is_err());
        assert_eq!(human_seconds(45), "45s");
        assert_eq!(human_seconds(725), "12m05s");
        assert_eq!(human_seconds(10_920), "3h02m");
        assert_eq!(human_seconds(187_200), "2d04h");
    }
}
