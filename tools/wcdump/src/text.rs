//! The dump as text: a line per thread, then its stack, leaf first.

use std::io::Write;

use wallclock_stream::Frame;

use crate::Dump;

pub fn duration(s: f64) -> String {
    if s >= 3600.0 {
        format!("{}h{:02}m", (s / 3600.0) as u64, ((s % 3600.0) / 60.0) as u64)
    } else if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else if s >= 1.0 {
        format!("{s:.2}s")
    } else {
        format!("{:.1}ms", s * 1e3)
    }
}

fn frame_line(f: &Frame) -> String {
    // A Python frame's name holds its file (`py::nap:/srv/app.py`, as the
    // capture names it): the file is said once, with the line.
    let func = match (&f.file, f.func.strip_prefix("py::")) {
        (Some(file), Some(rest)) => rest.strip_suffix(file.as_str()).and_then(|r| r.strip_suffix(':')).map_or(f.func.clone(), |q| format!("py::{q}")),
        _ => f.func.clone(),
    };
    let mut l = func;
    if f.kernel {
        l.push_str(" [kernel]");
    } else if let Some(m) = &f.module {
        l.push_str(&format!(" ({})", m.rsplit('/').next().unwrap_or(m)));
    }
    if let (Some(file), Some(line)) = (&f.file, f.line) {
        l.push_str(&format!(" {file}:{line}"));
    }
    if f.inlined {
        l.push_str(" [inlined]");
    }
    l
}

pub fn write(out: &mut dyn Write, d: &Dump) -> std::io::Result<()> {
    writeln!(out, "Process {} ({}): {} threads, read in {:.0} ms", d.pid, d.comm, d.threads.len(), d.read_ms)?;
    for t in &d.threads {
        let since = t.state_s.map_or_else(|| "for an unknown time".to_string(), |s| format!("for {}", duration(s)));
        let on = match (&t.object, &t.object_raw) {
            (Some(o), Some(raw)) => format!(" on [{o}] ({})", raw.strip_prefix("lock ").unwrap_or(raw)),
            (Some(o), None) => format!(" on [{o}]"),
            _ => String::new(),
        };
        writeln!(out, "\nThread {} \"{}\" {} {}{on} (CPU {})", t.tid, t.name, t.state, since, duration(t.cpu_s))?;
        if t.frames.is_empty() {
            writeln!(out, "    (no stack)")?;
        }
        for f in &t.frames {
            writeln!(out, "    {}", frame_line(f))?;
        }
    }
    Ok(())
}
