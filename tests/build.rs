//! `scripts/wallclock -- make -j2` of a generated C project of 40 files, as
//! the off-CPU article profiles a build: every process of the build is in
//! the report (counted against the build's own log: make prints each
//! driver, `gcc -v` each cc1, as and collect2, `collect2 -v` each ld), the
//! folded stacks hold each thread's whole time (the on-CPU time of the
//! processes no sample fell in included), no frame is left `[unknown]` at
//! an address inside a binary that process mapped (as the process itself
//! read /proc/self/maps at its exit: a preloaded library writes them, an
//! independent record of the cc, cc1 and as that exec'd, ran and exited
//! while their stacks waited to be unwound), no stack is taken for one
//! cut in JIT code (a C build runs none), and the default graph roots the
//! processes by command name. Real BPF: root only.

mod util;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

const FILES: usize = 40;

/// main.c, f1.c ... fN.c and a Makefile whose commands make runs itself
/// (no shell: no metacharacters), so each process is one of the build's.
fn project(dir: &Path, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mut main = String::from("#include <stdio.h>\n");
    let mut calls = String::new();
    let mut objs = String::from("main.o");
    for i in 1..=n {
        let src = format!(
            "#include <stdio.h>\n#include <string.h>\n\
             struct s{i} {{ int a[16]; char name[32]; }};\n\
             static int helper{i}(struct s{i} *s, int k) {{ int r = 0; for (int j = 0; j < 16; j++) r += s->a[j] * k + j; return r; }}\n\
             int func{i}(int x) {{ struct s{i} s; memset(&s, 0, sizeof s); for (int j = 0; j < 16; j++) s.a[j] = x + j;\n\
             snprintf(s.name, sizeof s.name, \"f%d\", x); return helper{i}(&s, x) + (int)strlen(s.name); }}\n"
        );
        std::fs::write(dir.join(format!("f{i}.c")), src).unwrap();
        main.push_str(&format!("int func{i}(int);\n"));
        calls.push_str(&format!("    t += func{i}({i});\n"));
        objs.push_str(&format!(" f{i}.o"));
    }
    main.push_str(&format!("int main(void) {{\n    long t = 0;\n{calls}    printf(\"%ld\\n\", t);\n    return 0;\n}}\n"));
    std::fs::write(dir.join("main.c"), main).unwrap();
    let mk = format!("OBJS = {objs}\nprog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n%.o: %.c\n\t$(CC) -O2 -c $< -o $@\n");
    std::fs::write(dir.join("Makefile"), mk).unwrap();
}

/// Processes per command name, from the build's own output: make's log of
/// the drivers it ran (stdout), the drivers' `-v` lines of cc1, as and
/// collect2, and collect2's of ld (stderr).
fn counted(stdout: &str, stderr: &str, src: &std::path::Path) -> BTreeMap<String, usize> {
    let mut n: BTreeMap<String, usize> = BTreeMap::new();
    n.insert("make".into(), 1);
    n.insert("gcc".into(), stdout.lines().filter(|l| l.starts_with("gcc -v")).count());
    // Two compilers write to one stderr at -j2, in pieces: a command's
    // line can be cut by the other's (40 `as` lines found for 41 objects
    // in one CI run). Each object file is one cc1 and one as: count those.
    let objects = std::fs::read_dir(src).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "o")).count();
    n.insert("cc1".into(), objects);
    n.insert("as".into(), objects);
    for (name, says) in [("collect2", "/collect2 -plugin "), ("ld", "/usr/bin/ld -plugin ")] {
        n.insert(name.into(), stderr.matches(says).count());
    }
    n
}

/// A library that, preloaded, writes its process's /proc/self/maps into
/// `$WC_TEST_MAPS_DIR/PID` at exit.
fn maps_dumper(dir: &Path) -> PathBuf {
    let c = dir.join("dumpmaps.c");
    std::fs::write(
        &c,
        "#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n\
         __attribute__((destructor)) static void dump(void) {\n\
         const char *d = getenv(\"WC_TEST_MAPS_DIR\"); if (!d) return;\n\
         char p[4096], buf[65536]; snprintf(p, sizeof p, \"%s/%d\", d, (int)getpid());\n\
         FILE *in = fopen(\"/proc/self/maps\", \"r\"), *out = fopen(p, \"w\"); size_t n;\n\
         if (in && out) while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);\n\
         if (in) fclose(in); if (out) fclose(out); }\n",
    )
    .unwrap();
    let so = dir.join("dumpmaps.so");
    let st = Command::new("gcc").args(["-shared", "-fPIC", "-O2", "-o"]).arg(&so).arg(&c).status().expect("gcc");
    assert!(st.success());
    so
}

/// The executable file mappings each process wrote at its exit, by pid.
fn dumped_maps(dir: &Path) -> HashMap<u64, Vec<(u64, u64, String)>> {
    let mut by_pid: HashMap<u64, Vec<(u64, u64, String)>> = HashMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u64>() else { continue };
        for l in std::fs::read_to_string(e.path()).unwrap_or_default().lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Code: an executable mapping of a file.
            let code = f.get(1).is_some_and(|perms| perms.contains('x'));
            let (Some(range), Some(path), true) = (f.first(), f.get(5).filter(|p| p.starts_with('/')), code) else { continue };
            let (lo, hi) = range.split_once('-').unwrap();
            let r = (u64::from_str_radix(lo, 16).unwrap(), u64::from_str_radix(hi, 16).unwrap(), path.to_string());
            by_pid.entry(pid).or_default().push(r);
        }
    }
    by_pid
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

#[test]
fn make_j2_under_wallclock() {
    if util::skip_without_root("build") {
        return;
    }
    let dir = util::scratch("build");
    let src = dir.join("proj");
    project(&src, FILES);
    let dumped = dir.join("maps");
    std::fs::create_dir_all(&dumped).unwrap();
    let preload = maps_dumper(&dir);
    let prefix = dir.join("out/b");
    let t0 = Instant::now();
    let out = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["--prefix", prefix.to_str().unwrap(), "--", "make", "-j2", "CC=gcc -v -Wl,-v"])
        .current_dir(&src)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .env("LD_PRELOAD", &preload)
        .env("WC_TEST_MAPS_DIR", &dumped)
        .output()
        .expect("run scripts/wallclock");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "wallclock failed: {stderr}");
    eprintln!("wallclock -- make -j2: {:.2} s in all", t0.elapsed().as_secs_f64());
    assert!(src.join("prog").exists(), "the build did not finish: {stderr}");
    let want = counted(&stdout, &stderr, &src);
    assert_eq!(want["gcc"], FILES + 2, "make's log: {stdout}");
    assert_eq!(want["cc1"], FILES + 1);

    // Every process of the build is in the report, under its name.
    let stream = format!("{}.stream", prefix.display());
    let report: Value = serde_json::from_str(&util::ok("wcreport", &["--json", &stream], b"")).unwrap();
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for p in report["processes"].as_array().unwrap() {
        *got.entry(p["comm"].as_str().unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(got, want, "processes per command: report vs the build's own log");

    // Each thread's folded total (and its on-CPU part) is the report's.
    let folded = util::ok("stackmerge", &["--folded", "--per-thread", "--unit", "ns", &stream], b"");
    let mut sums: HashMap<u64, (u64, u64)> = HashMap::new();
    for l in folded.lines() {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        let root = stack.split(';').next().unwrap();
        let tid: u64 = root.rsplit('-').next().unwrap().parse().unwrap();
        let v: u64 = v.parse().unwrap();
        let e = sums.entry(tid).or_default();
        e.0 += v;
        if stack.ends_with("_[c]") {
            e.1 += v;
        }
    }
    let threads = report["threads"].as_array().unwrap();
    let (mut on_all, mut on_folded) = (0, 0);
    for t in threads {
        let (tid, on) = (u(&t["tid"]), u(&t["on_ns"]));
        let total = on + u(&t["off_total_ns"]);
        let (f_total, f_on) = sums.get(&tid).copied().unwrap_or_default();
        let tol = |x: u64| x / 1000 + 1000;
        assert!(f_total.abs_diff(total) <= tol(total), "thread {t}: folded {f_total} ns vs report {total} ns");
        assert!(f_on.abs_diff(on) <= tol(on), "thread {t}: folded on-CPU {f_on} ns vs report {on} ns");
        on_all += on;
        on_folded += f_on;
    }
    eprintln!("on-CPU: report {on_all} ns, folded {on_folded} ns, {} threads", threads.len());
    assert!(folded.contains("[on-CPU, not sampled]"), "a build of {FILES} files has unsampled processes");

    // No [unknown] frame at an address the stream maps for its process,
    // or that the process itself says it mapped (every process of the
    // build wrote its maps: the check is not empty), and no stack cut in
    // JIT code.
    let dumps = dumped_maps(&dumped);
    for p in report["processes"].as_array().unwrap() {
        assert!(dumps.contains_key(&u(&p["pid"])), "no maps written at the exit of {p}");
    }
    assert!(!folded.contains("[stack cut in JIT code"), "a C build's stacks taken for JIT code: {}", folded.lines().filter(|l| l.contains("[stack cut in JIT code")).take(5).collect::<Vec<_>>().join("\n"));
    let text = std::fs::read_to_string(&stream).unwrap();
    let recs: Vec<Value> = util::resolved(&text).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut maps: HashMap<u64, Vec<(u64, u64, String)>> = HashMap::new();
    for r in recs.iter().filter(|r| r["type"] == "maps") {
        for m in r["maps"].as_array().unwrap() {
            let path = m["path"].as_str().unwrap_or("").to_string();
            maps.entry(u(&r["pid"])).or_default().push((u(&m["start"]), u(&m["end"]), path));
        }
    }
    let mut unknown = 0;
    for s in recs.iter().filter(|r| r["type"] == "stack") {
        for f in s["frames"].as_array().into_iter().flatten() {
            let Some(hex) = f["func"].as_str().and_then(|n| n.strip_prefix("[unknown]+0x")) else { continue };
            unknown += 1;
            let a = u64::from_str_radix(hex, 16).unwrap();
            assert!(a < wallclock_stream::NAMED_ADDR_BASE, "[unknown]+0x{hex} of pid {}: an address the capture names, without its name", s["pid"]);
            let pid = u(&s["pid"]);
            let inside = maps.get(&pid).into_iter().chain(dumps.get(&pid)).flatten().find(|(lo, hi, _)| (*lo..*hi).contains(&a));
            assert!(inside.is_none(), "[unknown]+0x{hex} of pid {pid} ({}) lies in {inside:?}", s["comm"]);
        }
    }
    eprintln!("[unknown] frames outside every recorded mapping: {unknown}");

    // The default graph: one root per command, not one per pid.
    let roots: std::collections::BTreeSet<String> =
        util::ok("stackmerge", &["--folded", &stream], b"").lines().map(|l| l.split(';').next().unwrap().to_string()).collect();
    let names: std::collections::BTreeSet<String> = want.keys().cloned().collect();
    assert_eq!(roots, names);
    let svg = std::fs::read_to_string(format!("{}.svg", prefix.display())).unwrap();
    for name in &names {
        assert!(svg.contains(&format!("<title>{name} (")), "no root box {name} in the SVG");
    }
    for p in report["processes"].as_array().unwrap() {
        let root = format!("<title>{} ({}) (", p["comm"].as_str().unwrap(), p["pid"]);
        assert!(!svg.contains(&root), "a per-pid root in the SVG: {root}");
    }
    let title = svg.split("id=\"title\"").nth(1).and_then(|t| t.split('>').nth(1)).and_then(|t| t.split('<').next()).unwrap();
    assert!(title.chars().count() <= 100 && title.contains(&format!("{} processes", got.values().sum::<usize>())), "{title}");
    // A real browser draws it: frames on the screen, the title whole.
    util::browser::screenshot(&PathBuf::from(format!("{}.svg", prefix.display())), &dir).assert_readable("build graph", 0.05);
    // The report's per-command summary comes before the process sections.
    let text = std::fs::read_to_string(format!("{}_thread_analysis.txt", prefix.display())).unwrap();
    let (c, p) = (text.find("COMMANDS: ").unwrap(), text.find("PROCESS ").unwrap());
    assert!(c < p && text[c..p].contains("cc1"), "{}", &text[c..p]);
}
