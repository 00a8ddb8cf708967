//! Why the GPU sat idle: `scripts/wallclock --gpu --timeline` on a
//! fake-CUDA program whose launching thread, between 20 ms kernels (with
//! the GPU idle), sleeps 15 ms in `load_batch` and computes 10 ms in
//! `collate`, and prints its own timings (CLOCK_MONOTONIC and its thread
//! CPU clock). The report's idle breakdown must match them.

mod util;

use std::process::Command;

/// `NAME VALUE` pairs of the program's own line.
fn field(line: &str, name: &str) -> f64 {
    let f: Vec<&str> = line.split_whitespace().collect();
    let i = f.iter().position(|x| *x == name).unwrap_or_else(|| panic!("{name} in {line}"));
    f[i + 1].parse().unwrap()
}

/// `  24.7%  284 ms  place` rows: (percent, place).
fn rows(section: &str) -> Vec<(f64, String)> {
    section
        .lines()
        .filter_map(|l| {
            let t = l.trim_start();
            let (pct, rest) = t.split_once('%')?;
            let pct: f64 = pct.parse().ok()?;
            // Skip the time column (a number and a unit).
            let mut it = rest.split_whitespace();
            it.next()?;
            it.next()?;
            Some((pct, it.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

#[test]
fn idle_breakdown_matches_the_programs_own_timings() {
    if util::skip_without_root("GPU idle") {
        return;
    }
    let dir = util::scratch("gpu-idle-fakes");
    let app = util::build_gpu_fakes(&dir);
    let work = util::scratch("gpu-idle");
    let prefix = work.join("idle");
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--gpu", "--timeline", "--prefix", prefix.to_str().unwrap(), "--"])
        .arg(&app)
        .args(["idle", "40"])
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .env("WALLCLOCK_CUPTI_PATH", dir.join("libcupti.so.12"))
        .env_remove("CUDA_INJECTION64_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "wallclock: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.starts_with("idle_ns ")).expect("the program's timings");
    let idle = field(line, "idle_ns");
    let load = field(line, "load_batch_ns") * 100.0 / idle;
    let cpu = field(line, "collate_cpu_ns") * 100.0 / idle;
    // 40 kernels of 20 ms: the GPU's busy time.
    let idle_pct = idle * 100.0 / (idle + 40.0 * 20e6);

    let report = std::fs::read_to_string(work.join("idle_thread_analysis.txt")).expect("the report");
    let at = report.find("GPU 0 idle ").unwrap_or_else(|| panic!("no idle section in:\n{report}"));
    let section = &report[at..];
    let head = section.lines().next().unwrap();
    let got_idle: f64 = head["GPU 0 idle ".len()..].split('%').next().unwrap().parse().unwrap();
    let r = rows(section.split_once('\n').unwrap().1);
    let (on, on_row) = r.iter().find(|(_, p)| p.starts_with("[on-CPU]")).expect("an on-CPU row");
    let on = *on;
    // On-CPU is the thread's CPU clock plus what the machine took from it
    // while it ran ([steal], its share of the row's functions): a quiet
    // fresh-clone run had 36.7% on-CPU, 9% of it steal, against a 31.7%
    // CPU clock.
    let steal = on_row.split("[steal] ").nth(1).and_then(|t| t.split('%').next()?.parse::<f64>().ok()).unwrap_or(0.0) * on / 100.0;
    let sleeping: f64 = r.iter().filter(|(_, p)| p.starts_with("load_batch → ")).map(|(x, _)| x).sum();
    eprintln!(
        "GPU idle: report {got_idle:.1}% vs program {idle_pct:.1}%; of the idle time, load_batch asleep {sleeping:.1}% vs {load:.1}%, on-CPU {on:.1}% ({steal:.1} points of it steal) vs collate's CPU clock {cpu:.1}%"
    );
    assert!((got_idle - idle_pct).abs() <= 3.0, "idle share: report {got_idle}%, program {idle_pct:.1}%\n{section}");
    assert!((sleeping - load).abs() <= 3.0, "load_batch: report {sleeping}%, program {load:.1}%\n{section}");
    assert!((on - steal - cpu).abs() <= 3.0, "on-CPU less steal: report {on}% - {steal:.1}%, program {cpu:.1}%\n{section}");
    assert!(head.contains("(collate)") && head.contains("(load_batch → clock_nanosleep"), "the summary names them: {head}");
    assert!(section.contains("stream 7: busy"), "per stream too:\n{section}");

    // The timeline shows the gaps on the GPU's track: one between each
    // two kernels, adding up to the idle time.
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(work.join("idle.trace.json")).unwrap()).unwrap();
    let gaps: Vec<&serde_json::Value> = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["name"] == "[GPU idle]").collect();
    assert_eq!(gaps.len(), 39, "40 kernels, 39 gaps between them");
    let gap_ns: u64 = gaps.iter().map(|e| e["args"]["idle_ns"].as_u64().unwrap()).sum();
    let gap_pct = gap_ns as f64 * 100.0 / (gap_ns as f64 + 40.0 * 20e6);
    assert!((gap_pct - got_idle).abs() < 0.2, "the trace's gaps {gap_pct:.2}% vs the report's idle {got_idle}%");
}
