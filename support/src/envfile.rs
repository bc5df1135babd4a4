//! A daemon's configuration file as its systemd unit reads it (`EnvironmentFile=`): one
//! `NAME=VALUE` line per setting, in the daemon's own environment variables (every flag of a
//! daemon has one, `CUMULO_<DAEMON>_<FLAG>`). [`template`] writes the documented file from the
//! daemon's command line definition, so the file names every flag there is; [`parse`] reads such
//! a file the way systemd does for the settings this format uses.

use std::fmt::Write as _;

/// The documented configuration file of the daemon whose command line is `cmd`: `preamble`
/// (comment lines, `# ` added), then for each flag with an environment variable its help as
/// comments and its line. A flag named in `set` gets that value, uncommented (the package's
/// choice: paths under `/etc/cumulo` and `/var/lib/cumulo`); the others are commented out with
/// their default (or nothing), so the daemon's own default holds until a user sets one.
pub fn template(cmd: &clap::Command, preamble: &str, set: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in preamble.lines() {
        comment(&mut out, line);
    }
    for arg in cmd.get_arguments() {
        let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
            continue;
        };
        if arg.is_hide_set() {
            continue;
        }
        out.push('\n');
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let flag = arg
            .get_long()
            .map(|l| format!("--{l}: "))
            .unwrap_or_default();
        for line in wrap(&format!("{flag}{help}"), 96) {
            comment(&mut out, &line);
        }
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| v.get_name().to_string())
            .collect();
        let is_flag = matches!(
            arg.get_action(),
            clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
        );
        if !values.is_empty() && !is_flag {
            comment(&mut out, &format!("One of: {}.", values.join(", ")));
        }
        if arg.is_required_set() {
            comment(&mut out, "Required.");
        }
        match set.iter().find(|(name, _)| *name == env) {
            Some((_, value)) => {
                let _ = writeln!(out, "{env}={}", quote(value));
            }
            None => {
                let default: Vec<String> = arg
                    .get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect();
                let default = if is_flag && default.is_empty() {
                    "false".to_string()
                } else {
                    default.join(",")
                };
                let _ = writeln!(out, "#{env}={}", quote(&default));
            }
        }
    }
    out
}

fn comment(out: &mut String, line: &str) {
    if line.is_empty() {
        out.push_str("#\n");
    } else {
        let _ = writeln!(out, "# {line}");
    }
}

/// Words of `text` in lines of at most `width` characters (a longer word alone on its line);
/// the text's own line breaks are kept.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.lines() {
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
    }
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// A value as systemd reads it back: bare when it is plain, else in double quotes with `\` and
/// `"` escaped.
fn quote(value: &str) -> String {
    let plain = value.chars().all(|c| {
        c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_' | ':' | ',' | '=' | '@')
    });
    if plain {
        value.to_string()
    } else {
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
        format!("\"{escaped}\"")
    }
}

/// Why a configuration file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct EnvFileError {
    /// The line (from 1).
    pub line: usize,
    /// What is wrong with it.
    pub why: String,
}

/// The settings of a configuration file, in order: blank lines and lines that begin with `#` or
/// `;` are skipped; the others are `NAME=VALUE`, the name a shell variable name, the value bare
/// (surrounding white space dropped) or in double quotes (`\"` and `\\` inside) or single quotes.
/// Line continuations, which systemd also reads, are refused here: no file of ours uses them.
pub fn parse(text: &str) -> Result<Vec<(String, String)>, EnvFileError> {
    let mut out = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let err = |why: &str| EnvFileError {
            line: n + 1,
            why: why.to_string(),
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.ends_with('\\') {
            return Err(err("a line continuation"));
        }
        let (name, value) = line.split_once('=').ok_or_else(|| err("no `=`"))?;
        let name = name.trim();
        let good_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !good_name {
            return Err(err("not a variable name before `=`"));
        }
        let value = value.trim();
        let value = if let Some(inner) = value.strip_prefix('"') {
            let inner = inner
                .strip_suffix('"')
                .ok_or_else(|| err("an unclosed double quote"))?;
            let mut s = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    s.push(chars.next().ok_or_else(|| err("a lone `\\` at the end"))?);
                } else {
                    s.push(c);
                }
            }
            s
        } else if let Some(inner) = value.strip_prefix('\'') {
            inner
                .strip_suffix('\'')
                .ok_or_else(|| err("an unclosed single quote"))?
                .to_string()
        } else {
            value.to_string()
        };
        out.push((name.to_string(), value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// A demo daemon.
    #[derive(Debug, Parser)]
    #[command(name = "demo")]
    #[allow(dead_code)]
    struct Demo {
        /// Where its certificate is.
        #[arg(long, env = "DEMO_CERT")]
        cert: String,
        /// Where it listens.
        #[arg(long, env = "DEMO_LISTEN", default_value = "0.0.0.0:1")]
        listen: String,
        /// Print more.
        #[arg(long, env = "DEMO_VERBOSE")]
        verbose: bool,
        /// Not in the file: no environment variable.
        #[arg(long)]
        other: Option<String>,
        /// A note with "quotes" and a space.
        #[arg(long, env = "DEMO_NOTE", default_value = "a \"b\"")]
        note: String,
    }

    #[test]
    fn the_template_names_every_flag_with_a_variable_and_reads_back_as_set() {
        use clap::CommandFactory;
        let text = template(
            &Demo::command(),
            "demo's settings",
            &[("DEMO_CERT", "/etc/x y.pem")],
        );
        assert!(text.starts_with("# demo's settings\n"), "{text}");
        assert!(
            text.contains(
                "# --cert: Where its certificate is\n# Required.\nDEMO_CERT=\"/etc/x y.pem\"\n"
            ),
            "{text}"
        );
        assert!(text.contains("#DEMO_LISTEN=0.0.0.0:1\n"), "{text}");
        assert!(text.contains("#DEMO_VERBOSE=false\n"), "{text}");
        assert!(!text.contains("other"), "{text}");
        // Only the value set is a setting; uncommenting a default gives that default back.
        assert_eq!(
            parse(&text).unwrap(),
            vec![("DEMO_CERT".to_string(), "/etc/x y.pem".to_string())]
        );
        let note = text.lines().find(|l| l.starts_with("#DEMO_NOTE=")).unwrap();
        assert_eq!(
            parse(&note[1..]).unwrap(),
            vec![("DEMO_NOTE".to_string(), "a \"b\"".to_string())]
        );
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        assert_eq!(parse("A=1\nnope\n").unwrap_err().line, 2);
        assert_eq!(
            parse("1A=1").unwrap_err().why,
            "not a variable name before `=`"
        );
        assert!(parse("A=\"open").is_err());
        assert!(parse("A=b \\").is_err());
        assert_eq!(
            parse("  ; c\n# d\n\nA = 'x y' \n").unwrap(),
            vec![("A".to_string(), "x y".to_string())]
        );
    }
}
