//! A Go program profiled end to end (`scripts/wallclock -- server`), as
//! root: tests/programs/go/server.go, a net/http server hashing with
//! crypto/sha256 per request, built with Debian's golang-go (`scripts/setup
//! --tests`) as users build it, loaded from this test. Go binaries have no
//! .eh_frame: the on-CPU stacks must still be whole (rooted where Go's own
//! traceback roots them) and the handler's share of the process's CPU
//! time the one the server measured with its thread CPU clock.

mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where Go's own traceback begins a stack: a goroutine's first frame
/// returns to runtime.goexit; a thread's scheduler stack starts in
/// runtime.mstart; runtime.main is the main goroutine's.
const ROOTS: [&str; 3] = ["runtime.goexit", "runtime.main", "runtime.mstart"];

/// The server built under target/ (Go's build cache there too, so that a
/// second run links and compiles nothing).
fn build(dir: &Path) -> PathBuf {
    let out = dir.join("server");
    let cache = util::root().join("target/go-cache");
    let st = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(util::root().join("tests/programs/go/server.go"))
        .env("GOCACHE", &cache)
        .env("GOPATH", cache.join("gopath"))
        .env("GO111MODULE", "off")
        .status()
        .expect("go is needed for the Go test: run scripts/setup --tests (Debian's golang-go)");
    assert!(st.success(), "building tests/programs/go/server.go failed");
    out
}

/// One keep-alive connection sending GET `path` until `until`.
fn load(port: u16, until: Instant) -> u64 {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the Go server");
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut n = 0;
    while Instant::now() < until {
        w.write_all(b"GET /hash HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
        let mut len = 0;
        loop {
            let mut l = String::new();
            assert!(r.read_line(&mut l).unwrap() > 0, "the server closed the connection");
            if l == "\r\n" {
                break;
            }
            if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        assert_eq!(body.len(), 64, "a SHA-256 in hex");
        n += 1;
    }
    n
}

#[test]
fn go_server_stacks_are_whole_and_the_handler_share_is_measured() {
    if util::skip_without_root("Go capture") {
        return;
    }
    let dir = util::scratch("runtime_go");
    let server = build(&dir);
    let (portfile, truthfile, prefix) = (dir.join("port"), dir.join("truth.json"), dir.join("p"));
    let mut wc = Command::new("bash")
        .arg(util::root().join("scripts/wallclock"))
        .args(["-F", "199", "--prefix"])
        .arg(&prefix)
        .arg("--")
        .arg(&server)
        .arg(&portfile)
        .arg(&truthfile)
        .env("WALLCLOCK_BIN_DIR", util::bin_dir())
        .spawn()
        .expect("run scripts/wallclock");
    let start = Instant::now();
    let port: u16 = loop {
        if let Some(p) = std::fs::read_to_string(&portfile).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Two clients on two cores: the server is busy, not saturated.
    let until = Instant::now() + Duration::from_secs(3);
    let clients: Vec<_> = (0..2).map(|_| std::thread::spawn(move || load(port, until))).collect();
    let requests: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    let mut q = TcpStream::connect(("127.0.0.1", port)).unwrap();
    q.write_all(b"GET /quit HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    assert!(wc.wait().unwrap().success(), "scripts/wallclock failed");
    let truth: Value = serde_json::from_str(&std::fs::read_to_string(&truthfile).unwrap()).unwrap();
    assert_eq!(truth["requests"].as_u64(), Some(requests));
    let handler_truth = truth["handler_ns"].as_f64().unwrap() / truth["process_ns"].as_f64().unwrap();

    let stream = util::resolved(&std::fs::read_to_string(prefix.with_extension("stream")).unwrap());
    let (mut on, mut rooted, mut handler) = (0u64, 0u64, 0u64);
    let mut worst: (u64, String) = (0, String::new());
    for r in stream.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()) {
        if r["type"] != "stack" || r["kind"] != "on" {
            continue;
        }
        let frames: Vec<&str> = r["frames"].as_array().unwrap().iter().map(|f| f["func"].as_str().unwrap_or("")).collect();
        // Steal is the hypervisor's time, in no function (and in no
        // clock the server reads).
        if frames.first() == Some(&"[steal]") {
            continue;
        }
        let ns = r["ns"].as_u64().unwrap();
        on += ns;
        let root = frames.first().map_or("", |f| f.strip_suffix(".abi0").unwrap_or(f));
        if ROOTS.contains(&root) {
            rooted += ns;
        } else if ns > worst.0 {
            worst = (ns, frames.join(";"));
        }
        if frames.contains(&"main.handler") {
            handler += ns;
        }
    }
    assert!(on > 0, "no on-CPU time");
    let rooted_share = rooted as f64 / on as f64;
    let handler_share = handler as f64 / on as f64;
    eprintln!(
        "{requests} requests; on-CPU rooted at {ROOTS:?}: {:.1}%; main.handler: {:.1}% of on-CPU time in the profile, {:.1}% measured by the server",
        rooted_share * 100.0,
        handler_share * 100.0,
        handler_truth * 100.0
    );
    assert!(rooted_share >= 0.90, "{:.1}% of on-CPU time rooted; the largest stack not: {} ns {}", rooted_share * 100.0, worst.0, worst.1);
    assert!(
        (handler_share - handler_truth).abs() <= 0.05,
        "main.handler: {:.1}% in the profile, {:.1}% measured",
        handler_share * 100.0,
        handler_truth * 100.0
    );
}
