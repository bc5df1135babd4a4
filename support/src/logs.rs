//! Every daemon's logs: `tracing` events on stderr, filtered by `RUST_LOG` (default `info`), as
//! text or as one JSON object per line. Text is coloured only when stderr is a terminal.

use std::io::IsTerminal;

use clap::builder::PossibleValue;

/// How a daemon writes its logs (`--log-format text|json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

// By hand rather than derived: a derived `ValueEnum` would put the variants' doc comments into
// every daemon's `--help`, which lists the values as `[possible values: text, json]`.
impl clap::ValueEnum for LogFormat {
    fn value_variants<'a>() -> &'a [LogFormat] {
        &[LogFormat::Text, LogFormat::Json]
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }))
    }
}

/// Installs the process's log subscriber: stderr, `RUST_LOG` or `info`, in `format`. Call once,
/// first thing in `main`.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn formats_parse_by_their_flag_names() {
        assert_eq!(LogFormat::from_str("text", false), Ok(LogFormat::Text));
        assert_eq!(LogFormat::from_str("json", false), Ok(LogFormat::Json));
        assert!(LogFormat::from_str("yaml", false).is_err());
        assert_eq!(LogFormat::default(), LogFormat::Text);
    }
}
