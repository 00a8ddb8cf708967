//! The `--probe` spec language (after wprof's, where it applies here):
//!
//! ```text
//! SPEC   := POINT [ '~~' POINT ] [ '|' SETTING {',' SETTING} '|' ]
//! POINT  := u:FUNC[+OFF] | uret:FUNC | usdt:PROVIDER:NAME | uspan:FUNC
//!           | raw_tp:NAME | tp:CATEGORY:NAME
//!           [ '(' PARAM {',' PARAM} ')' ]
//! PARAM  := arg:N | arg:ret | stack | path:PATH | pid:PID | FIELD (tp:)
//! SETTING:= name:"TEXT"
//! ```
//!
//! `name:"…{arg0}…"` names each event by its arguments (`{argN}`,
//! `{ret}`; only arguments the spec keeps). wprof's `id:` is refused with
//! a one-line error: a probe here is known by its name.
//!
//! `uspan:FUNC` is `u:FUNC ~~ uret:FUNC`; `A ~~ B` is a span from A to the
//! next B on the same thread. `raw_tp:NAME` is a kernel tracepoint as BPF
//! sees it raw (`arg:N`: its N-th argument, a pointer or an integer),
//! firing on a target thread; `tp:CATEGORY:NAME (FIELD, ...)` is one with
//! its record's integer fields by name (resolved in tracefs at attach,
//! [`super::tracefs`]). Parsing needs no root
//! and no target: errors name the spec and the part that is wrong.

use std::path::PathBuf;

/// Where a probe fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
    /// A function's entry (or an offset into it).
    Entry { func: String, off: u64 },
    /// A function's return.
    Return { func: String },
    /// A USDT probe.
    Usdt { provider: String, name: String },
    /// A kernel tracepoint, raw.
    RawTp { name: String },
    /// A kernel tracepoint's record, its fields named.
    Tp { category: String, name: String },
}

/// One attach point and what to read there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    pub site: Site,
    /// The ELF file (default: the target's executable).
    pub path: Option<PathBuf>,
    /// Only this process (default: the capture's target filter).
    pub pid: Option<i32>,
    /// Arguments kept, by index (0-5); `ret` as [`Arg::Ret`].
    pub args: Vec<Arg>,
    /// `tp:`'s record fields kept, by name (read into args 0-5).
    pub fields: Vec<String>,
    pub stack: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    N(u8),
    Ret,
}

impl Arg {
    pub fn name(self) -> String {
        match self {
            Arg::N(n) => format!("arg{n}"),
            Arg::Ret => "ret".into(),
        }
    }
}

/// A parsed `--probe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The spec as given (trimmed): the default name.
    pub text: String,
    /// Its name, or the `name:` template (`{arg0}`, `{ret}`: expanded
    /// per event by [`expand_name`]).
    pub name: String,
    pub begin: Point,
    /// A span's exit; None for an event.
    pub end: Option<Point>,
}

impl Spec {
    pub fn is_span(&self) -> bool {
        self.end.is_some()
    }
}

/// Parse one spec.
pub fn parse(text: &str) -> Result<Spec, String> {
    let t = text.trim();
    let err = |m: String| format!("--probe '{t}': {m}");
    let (body, settings) = match t.find('|') {
        Some(i) => {
            let rest = &t[i + 1..];
            let rest = rest.trim_end();
            let Some(inner) = rest.strip_suffix('|') else {
                return Err(err("settings must end with '|'".into()));
            };
            (&t[..i], Some(inner))
        }
        None => (t, None),
    };
    let mut name = None;
    if let Some(s) = settings {
        for item in split_top(s, ',') {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once(':').ok_or_else(|| err(format!("setting '{item}' is not KEY:VALUE")))?;
            let v = v.trim();
            let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v);
            match k.trim() {
                "name" => name = Some(v.to_string()),
                // wprof's `id:` keys its own event tables; here a probe
                // is known by its name, and spans pair per thread.
                "id" => return Err(err("the id: setting has no use here (probes are known by name:, spans pair per thread): leave it out".into())),
                other => return Err(err(format!("unknown setting '{other}' (name)"))),
            }
        }
    }
    let parts: Vec<&str> = body.split("~~").collect();
    let (begin, end) = match parts.as_slice() {
        [one] => {
            let (p, span_ret) = point(one.trim()).map_err(err)?;
            match span_ret {
                Some(ret) => (p, Some(ret)),
                None => (p, None),
            }
        }
        [a, b] => {
            let (pa, sa) = point(a.trim()).map_err(err)?;
            let (pb, sb) = point(b.trim()).map_err(err)?;
            if sa.is_some() || sb.is_some() {
                return Err(err("uspan: is a span already: it cannot be one end of '~~'".into()));
            }
            (pa, Some(pb))
        }
        _ => return Err(err("more than one '~~'".into())),
    };
    if let Some(n) = &name {
        let known: Vec<String> = begin.args.iter().chain(end.iter().flat_map(|e| e.args.iter())).map(|a| a.name()).chain(begin.fields.iter().chain(end.iter().flat_map(|e| e.fields.iter())).cloned()).collect();
        check_template(n, &known).map_err(err)?;
    }
    Ok(Spec { text: t.to_string(), name: name.unwrap_or_else(|| default_name(body.trim())), begin, end })
}

/// The placeholders of a `name:` template (`{arg0}`, `{ret}`), in order;
/// `{{` and `}}` are literal braces.
fn placeholders(t: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(i) = rest.find(['{', '}']) {
        let after = &rest[i + 1..];
        if rest[i..].starts_with("{{") || rest[i..].starts_with("}}") {
            rest = &after[1..];
        } else if rest.as_bytes()[i] == b'}' {
            return Err(format!("name \"{t}\": '}}' without '{{' (write }}}} for a brace)"));
        } else {
            let end = after.find('}').ok_or_else(|| format!("name \"{t}\": '{{' without '}}'"))?;
            out.push(&after[..end]);
            rest = &after[end + 1..];
        }
    }
    Ok(out)
}

/// A template may name only the arguments its spec keeps.
fn check_template(t: &str, known: &[String]) -> Result<(), String> {
    for p in placeholders(t)? {
        if !known.iter().any(|k| k == p) {
            let have = if known.is_empty() { "none: keep one with (arg:N)".to_string() } else { known.join(", ") };
            return Err(format!("name \"{t}\": {{{p}}} is not an argument of this probe (kept: {have})"));
        }
    }
    Ok(())
}

/// A `name:` template with its placeholders replaced by one event's
/// arguments (checked at parse, so each is there).
pub fn expand_name(t: &str, args: &std::collections::BTreeMap<String, i64>) -> String {
    if !t.contains(['{', '}']) {
        return t.to_string();
    }
    let mut out = String::with_capacity(t.len() + 8);
    let mut rest = t;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if rest[i..].starts_with("{{") || rest[i..].starts_with("}}") {
            out.push_str(&rest[i..i + 1]);
            rest = &after[1..];
        } else if let (b'{', Some(end)) = (rest.as_bytes()[i], after.find('}')) {
            match args.get(&after[..end]) {
                Some(v) => out.push_str(&v.to_string()),
                None => out.push_str(&rest[i..i + end + 2]),
            }
            rest = &after[end + 1..];
        } else {
            out.push_str(&rest[i..i + 1]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A spec's name without its parameters: `uspan:handle (arg:0)` is `uspan:handle`.
fn default_name(body: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Split on `sep` outside double quotes.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted) = (0, false);
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    out.push(&s[start..]);
    out
}

/// One point; for `uspan:` also its return point.
fn point(s: &str) -> Result<(Point, Option<Point>), String> {
    let (head, params) = match s.find('(') {
        Some(i) => {
            let p = s[i + 1..].trim_end();
            let p = p.strip_suffix(')').ok_or_else(|| format!("'{s}': parameters must end with ')'"))?;
            (s[..i].trim(), Some(p))
        }
        None => (s, None),
    };
    let (kind, target) = head.split_once(':').ok_or_else(|| format!("'{head}' is not KIND:TARGET (u, uret, usdt, uspan, raw_tp)"))?;
    let nonempty = |x: &str, what: &str| {
        if x.is_empty() || x.contains(char::is_whitespace) {
            Err(format!("'{head}': {what} is missing or has spaces"))
        } else {
            Ok(x.to_string())
        }
    };
    let site = match kind {
        "u" => {
            let (f, off) = match target.split_once('+') {
                Some((f, o)) => {
                    let off = parse_num(o).ok_or_else(|| format!("'{head}': offset '{o}' is not a number"))?;
                    (f, off)
                }
                None => (target, 0),
            };
            Site::Entry { func: nonempty(f, "the function")?, off }
        }
        "uret" | "uspan" => Site::Return { func: nonempty(target, "the function")? },
        "usdt" => {
            let (p, n) = target.split_once(':').ok_or_else(|| format!("'{head}': usdt needs PROVIDER:NAME"))?;
            Site::Usdt { provider: nonempty(p, "the provider")?, name: nonempty(n, "the name")? }
        }
        "raw_tp" => Site::RawTp { name: nonempty(target, "the tracepoint")? },
        "tp" => {
            let (c, n) = target.split_once(':').ok_or_else(|| format!("'{head}': tp needs CATEGORY:NAME"))?;
            Site::Tp { category: nonempty(c, "the category")?, name: nonempty(n, "the name")? }
        }
        "k" | "kret" | "kspan" => {
            return Err(format!("'{kind}:' probes are not supported by this version (u, uret, usdt, uspan, tp, raw_tp)"))
        }
        other => return Err(format!("unknown probe kind '{other}:' (u, uret, usdt, uspan, raw_tp)")),
    };
    let tp = matches!(site, Site::Tp { .. });
    let mut p = Point { site, path: None, pid: None, args: Vec::new(), fields: Vec::new(), stack: false };
    for item in params.map(|p| split_top(p, ',')).unwrap_or_default() {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        match item.split_once(':') {
            Some(("arg", _)) | Some(("path", _)) if tp => return Err(format!("'{item}': tp: takes its record's fields by name (tp:syscalls:sys_enter_write (fd, count))")),
            Some(("arg", "ret")) => p.args.push(Arg::Ret),
            Some(("arg", n)) => match n.parse::<u8>() {
                Ok(n) if n < 6 => p.args.push(Arg::N(n)),
                _ => return Err(format!("'{item}': arguments are arg:0 to arg:5, or arg:ret")),
            },
            Some(("path", path)) if !path.is_empty() => p.path = Some(PathBuf::from(path)),
            Some(("pid", pid)) => p.pid = Some(pid.parse().map_err(|_| format!("'{item}': not a PID"))?),
            None if item == "stack" => p.stack = true,
            None if tp && item.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                if p.fields.len() == 6 {
                    return Err(format!("'{item}': at most 6 fields"));
                }
                p.fields.push(item.to_string());
            }
            _ => return Err(format!("unknown parameter '{item}' (arg:N, arg:ret, stack, path:PATH, pid:PID)")),
        }
    }
    if kind == "uspan" {
        let Site::Return { func } = &p.site else { unreachable!() };
        let mut entry = p.clone();
        entry.site = Site::Entry { func: func.clone(), off: 0 };
        entry.args.retain(|a| *a != Arg::Ret);
        let mut ret = p;
        ret.args.retain(|a| *a == Arg::Ret);
        ret.stack = false;
        return Ok((entry, Some(ret)));
    }
    if p.args.contains(&Arg::Ret) && !matches!(p.site, Site::Return { .. }) {
        return Err(format!("'{head}': arg:ret is only at a return (uret:, uspan:)"));
    }
    Ok((p, None))
}

fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// `--probe` values: a spec, or `@FILE` with one spec per line (`#`
/// comments, blank lines skipped).
pub fn expand(values: &[String]) -> Result<Vec<Spec>, String> {
    let mut out = Vec::new();
    for v in values {
        if let Some(file) = v.strip_prefix('@') {
            let text = std::fs::read_to_string(file).map_err(|e| format!("--probe @{file}: {e}"))?;
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if !line.is_empty() {
                    out.push(parse(line).map_err(|e| format!("{file}:{}: {e}", n + 1))?);
                }
            }
        } else {
            out.push(parse(v)?);
        }
    }
    if out.len() > 0xffff {
        return Err("--probe: more than 65535 probes".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uspan_with_args_and_name() {
        let s = parse("uspan:handle (arg:0, arg:ret) | name:\"req\" |").unwrap();
        assert_eq!(s.name, "req");
        assert_eq!(s.begin.site, Site::Entry { func: "handle".into(), off: 0 });
        assert_eq!(s.begin.args, vec![Arg::N(0)]);
        let e = s.end.unwrap();
        assert_eq!(e.site, Site::Return { func: "handle".into() });
        assert_eq!(e.args, vec![Arg::Ret]);
        assert_eq!(parse("uspan:handle (arg:0)").unwrap().name, "uspan:handle");
    }

    #[test]
    fn usdt_pair_and_errors() {
        let s = parse("usdt:postgresql:query__start ~~ usdt:postgresql:query__done").unwrap();
        assert!(s.is_span());
        assert_eq!(s.begin.site, Site::Usdt { provider: "postgresql".into(), name: "query__start".into() });
        assert!(parse("u:f+0x10 (path:/bin/true, pid:12)").is_ok());
        assert_eq!(parse("raw_tp:sched_wakeup (arg:0)").unwrap().begin.site, Site::RawTp { name: "sched_wakeup".into() });
        let t = parse("tp:syscalls:sys_enter_write (fd, count) | name:\"write {fd}\" |").unwrap();
        assert_eq!(t.begin.site, Site::Tp { category: "syscalls".into(), name: "sys_enter_write".into() });
        assert_eq!(t.begin.fields, vec!["fd".to_string(), "count".to_string()]);
        for bad in ["tp:sched", "tp:a:b (arg:0)", "tp:a:b (a-b)", "tp:a:b (a,b,c,d,e,f,g)", "x:f", "u:", "usdt:p", "u:f (arg:9)", "u:f (arg:ret)", "u:f | name:x", "u:f (bogus)", "u:f | id:7 |"] {
            let e = parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("--probe '{bad}'")), "{e}");
        }
    }

    #[test]
    fn name_templates() {
        let s = parse("uspan:handle (arg:0, arg:ret) | name:\"req {arg0} -> {ret} {{x}}\" |").unwrap();
        let mut args = std::collections::BTreeMap::new();
        args.insert("arg0".to_string(), 17i64);
        args.insert("ret".to_string(), -1i64);
        assert_eq!(expand_name(&s.name, &args), "req 17 -> -1 {x}");
        assert_eq!(expand_name("plain", &args), "plain");
        // Only kept arguments, and balanced braces: one-line errors at parse.
        for (bad, says) in [
            ("u:f (arg:0) | name:\"{arg1}\" |", "{arg1} is not an argument of this probe (kept: arg0)"),
            ("u:f | name:\"{arg0}\" |", "kept: none"),
            ("u:f (arg:0) | name:\"{arg0\" |", "'{' without '}'"),
            ("u:f (arg:0) | name:\"a}\" |", "'}' without '{'"),
            ("u:f | id:7 |", "id: setting has no use here"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says) && !e.contains('\n'), "{bad}: {e}");
        }
    }
}
