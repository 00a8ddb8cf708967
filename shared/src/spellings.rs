//! Old spellings of flags, kept one release so that scripts keep running:
//! each tool parses its command line with [`parse`], which warns once on
//! stderr for every old spelling used (its output never changes).
//!
//! An old spelling is read from the tool's own clap definition: a hidden
//! alias (`alias = "freq"` of `--frequency`, `short_alias = 'd'` of
//! `-i/--interval`), or a hidden flag whose help starts with
//! [`OLD_SPELLING`] (`flame --per-thread -o DIR`, now `--split-dir DIR`),
//! whose help is then the warning. docs/flags.md's table of shared
//! spellings lists the same ones, from the same definitions (mangen).

use clap::{Arg, Command};

/// How the help of a hidden flag that is an old spelling begins.
pub const OLD_SPELLING: &str = "Old spelling";

/// Parse the process's arguments as `C` (clap's errors, --help and
/// --version as usual), then warn of each old spelling among them.
pub fn parse<C: clap::Parser>(tool: &str) -> C {
    let args: Vec<String> = std::env::args().collect();
    let cli = C::parse_from(&args);
    for w in warnings(tool, &C::command(), args.get(1..).unwrap_or_default()) {
        eprintln!("{w}");
    }
    cli
}

/// `-F/--frequency`: the flag's current spelling.
pub fn spelling(a: &Arg) -> String {
    match (a.get_short(), a.get_long()) {
        (Some(s), Some(l)) => format!("-{s}/--{l}"),
        (Some(s), None) => format!("-{s}"),
        (None, Some(l)) => format!("--{l}"),
        (None, None) => a.get_id().to_string(),
    }
}

/// Whether a hidden flag is an old spelling (its help says so).
pub fn is_old_flag(a: &Arg) -> bool {
    a.is_hide_set() && a.get_help().is_some_and(|h| h.to_string().starts_with(OLD_SPELLING))
}

/// A flag's hidden long aliases (`freq`) and short ones (`d`).
pub fn hidden_aliases(a: &Arg) -> (Vec<String>, Vec<char>) {
    let visible: Vec<&str> = a.get_visible_aliases().unwrap_or_default();
    let longs = a.get_all_aliases().unwrap_or_default().into_iter().filter(|l| !visible.contains(l)).map(str::to_string).collect();
    let visible_short = a.get_visible_short_aliases().unwrap_or_default();
    let shorts = a.get_all_short_aliases().unwrap_or_default().into_iter().filter(|s| !visible_short.contains(s)).collect();
    (longs, shorts)
}

/// The values a flag takes after it, in the next arguments (0 for a switch).
fn values(a: &Arg) -> usize {
    if !a.get_action().takes_values() {
        return 0;
    }
    a.get_num_args().map_or(1, |r| r.min_values().max(1))
}

/// One line per old spelling among `args` (the arguments after the
/// program's name), in their order; nothing after `--` (a command's own).
pub fn warnings(tool: &str, cmd: &Command, args: &[String]) -> Vec<String> {
    let mut cmd = cmd.clone();
    cmd.build();
    let flags: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_positional()).collect();
    let old = |old: &str, a: &Arg| -> String {
        if is_old_flag(a) {
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            format!("{tool}: warning: {old}: {}", help.lines().next().unwrap_or(""))
        } else {
            format!("{tool}: warning: {old} is an old spelling of {}, which means the same; {old} goes in the next release", spelling(a))
        }
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            break;
        }
        if let Some(name) = arg.strip_prefix("--") {
            let (name, inline) = name.split_once('=').map_or((name, false), |(n, _)| (n, true));
            let Some(a) = flags.iter().find(|a| a.get_long() == Some(name) || hidden_aliases(a).0.iter().any(|l| l == name)) else { continue };
            if is_old_flag(a) || a.get_long() != Some(name) {
                out.push(old(&format!("--{name}"), a));
            }
            if !inline {
                i += values(a);
            }
        } else if let Some(letters) = arg.strip_prefix('-').filter(|l| !l.is_empty()) {
            for (at, c) in letters.char_indices() {
                let Some(a) = flags.iter().find(|a| a.get_short() == Some(c) || hidden_aliases(a).1.contains(&c)) else { break };
                if is_old_flag(a) || a.get_short() != Some(c) {
                    out.push(old(&format!("-{c}"), a));
                }
                if values(a) > 0 {
                    // The rest of the word is its value, or the next word is.
                    if at + c.len_utf8() == letters.len() {
                        i += values(a);
                    }
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command};

    fn cmd() -> Command {
        Command::new("t")
            .arg(Arg::new("interval").short('i').long("interval").short_alias('d').alias("delay").num_args(1))
            .arg(Arg::new("title").long("title").num_args(1))
            .arg(Arg::new("quiet").short('q').action(ArgAction::SetTrue))
            .arg(Arg::new("per_thread").long("per-thread").hide(true).action(ArgAction::SetTrue).help("Old spelling of --split-dir DIR: use --split-dir."))
            .arg(Arg::new("command").last(true).num_args(1..))
    }

    fn warn(args: &[&str]) -> Vec<String> {
        super::warnings("t", &cmd(), &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn each_old_spelling_warns_once() {
        let w = warn(&["-d", "2", "--delay=3", "-qd4", "--per-thread"]);
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w[0].starts_with("t: warning: -d is an old spelling of -i/--interval"), "{w:?}");
        assert!(w[1].starts_with("t: warning: --delay is an old spelling"), "{w:?}");
        assert_eq!(w[3], "t: warning: --per-thread: Old spelling of --split-dir DIR: use --split-dir.");
    }

    #[test]
    fn new_spellings_values_and_commands_do_not_warn() {
        assert!(warn(&["-i", "2", "--interval", "3", "-qi", "1"]).is_empty());
        assert!(warn(&["--title", "--delay", "-i", "-d"]).is_empty(), "values are not flags");
        assert!(warn(&["-q", "--", "top", "-d", "1", "--delay"]).is_empty(), "a command's own flags");
    }
}
