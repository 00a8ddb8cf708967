//! What tests/wcexport.rs shares: a small stream shaped as stackmerge
//! writes it, the independent decoder, and a one-request HTTP listener.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::util;

/// Two threads of pid 100 whose stacks add up to their thread records:
/// tid 100 on 1 s + off 0.95 s (its first stack from before the exec,
/// named `bash`), tid 101 on 0.4 s + off 1.6 s, plus 5 ms of GPU time.
/// Symbolized stacks with addresses and an inlined frame, a raw one, a
/// kernel one, and the synthetic frames stackmerge writes.
pub fn sample_input() -> String {
    let lines = [
        r#"{"type":"header","format":"wallclock","version":"1.1","tool":"stackmerge","tool_version":"0.1.0","pids":[100],"clock":"monotonic","start_ns":1000000000,"end_ns":3000000000,"freq_hz":49}"#,
        r#"{"type":"thread","pid":100,"tid":100,"comm":"app","start_ns":1000000000,"end_ns":3000000000,"on_ns":1000000000,"steal_ns":100000000,"off_ns":{"R":50000000,"S":0,"D":900000000,"other":0},"samples":9}"#,
        r#"{"type":"thread","pid":100,"tid":101,"comm":"worker","start_ns":1000000000,"end_ns":3000000000,"on_ns":400000000,"off_ns":{"R":0,"S":1600000000,"D":0,"other":0},"samples":4}"#,
        r#"{"type":"maps","pid":100,"maps":[{"start":1342177280,"end":1342242816,"offset":4096,"path":"/usr/bin/app","build_id":"ab12cd"},{"start":1879048192,"end":1880096768,"offset":0,"path":"/lib/libc.so.6","build_id":"ef34"}]}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":100,"comm":"app","frames":[{"func":"[steal]"}],"ns":100000000,"count":0}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":100,"comm":"app","ustack":[1342177536,1342181940],"frames":[{"func":"main","module":"app"},{"func":"compute","module":"app","file":"/src/app.c","line":42},{"func":"helper","module":"app","file":"/src/app.c","line":7,"inlined":true}],"ns":900000000,"count":9}"#,
        r#"{"type":"stack","kind":"off","state":"D","pid":100,"tid":100,"comm":"app","ustack":[1342177536],"kstack":[18446744071578845200,18446744071578845216],"frames":[{"func":"main","module":"app"},{"func":"ksys_fsync","module":"[kernel]","kernel":true},{"func":"schedule","module":"[kernel]","kernel":true},{"func":"[io]"}],"ns":900000000,"count":30}"#,
        r#"{"type":"stack","kind":"off","state":"R","pid":100,"tid":100,"comm":"bash","frames":[{"func":"[before exec]"},{"func":"[runnable]"}],"ns":50000000,"count":1}"#,
        r#"{"type":"stack","kind":"on","pid":100,"tid":101,"comm":"worker","ustack":[1342177792,1879048258],"ns":400000000,"count":4}"#,
        r#"{"type":"stack","kind":"off","state":"S","pid":100,"tid":101,"comm":"worker","ustack":[1342178048,1342178304,1879048448],"frames":[{"func":"start","module":"app"},{"func":"worker","module":"app"},{"func":"pthread_mutex_lock","module":"libc.so.6"},{"func":"[sleep]"}],"ns":1600000000,"count":200}"#,
        r#"{"type":"stack","kind":"gpu","pid":100,"tid":101,"comm":"worker","frames":[{"func":"start","module":"app"},{"func":"launch","module":"app"},{"func":"gemm"}],"ns":5000000,"count":3,"gpu":{"activity":"kernel","name":"gemm"}}"#,
        r#"{"type":"stats","end_ns":3000000000,"counts":{"lost_stacks":0}}"#,
    ];
    lines.join("\n") + "\n"
}

fn npm_prefix() -> PathBuf {
    let p = std::env::var_os("WALLCLOCK_NPM_PREFIX").map(PathBuf::from).unwrap_or_else(|| util::root().join("target/npm"));
    assert!(
        p.join("node_modules/pprof-format").is_dir(),
        "{}: npm package pprof-format is not installed there: run `scripts/setup --tests` (npm install --prefix target/npm pprof-format)",
        p.display()
    );
    p
}

/// The profile as npm pprof-format decodes it (strings resolved).
pub fn decode(profile: &Path) -> Value {
    let out = std::process::Command::new("node")
        .arg(util::root().join("tests/wcexport/decode.cjs"))
        .arg(npm_prefix())
        .arg(profile)
        .output()
        .expect("run node (Node 20: apt-get install nodejs)");
    assert!(out.status.success(), "decoding {} failed: {}", profile.display(), String::from_utf8_lossy(&out.stderr));
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    go_pprof_agrees(profile, &p);
    p
}

/// `go tool pprof` reads the same figures: each sample type's total
/// (`-top -sample_index=T`) and wall per thread_id and state label
/// (`-tags`), to the ns of what the tests check against the stream.
fn go_pprof_agrees(profile: &Path, p: &Value) {
    let samples = p["sample"].as_array().unwrap();
    for (i, t) in p["sampleType"].as_array().unwrap().iter().enumerate() {
        let t = t["type"].as_str().unwrap();
        let want: i64 = samples.iter().map(|s| s["value"][i].as_i64().unwrap()).sum();
        assert_eq!(util::gopprof::total(profile, t), want as u64, "go tool pprof -sample_index={t} -top: total of {}", profile.display());
    }
    let tags = util::gopprof::tags(profile, "wall");
    let nonzero = |m: BTreeMap<String, i64>| m.into_iter().filter(|(_, v)| *v != 0).map(|(k, v)| (k, v as u64)).collect::<BTreeMap<_, _>>();
    let go_tids = tags.get("thread_id").cloned().unwrap_or_default().into_iter().filter(|(_, v)| *v != 0).collect::<BTreeMap<_, _>>();
    // A profile of folded lines has no threads: only labelled samples count.
    let mut tids: BTreeMap<String, i64> = BTreeMap::new();
    for s in samples {
        if let Some(t) = labels(s).get("thread_id") {
            *tids.entry(t.clone()).or_default() += s["value"][0].as_i64().unwrap();
        }
    }
    let want_tids = nonzero(tids);
    assert_eq!(go_tids, want_tids, "go tool pprof -tags: wall per thread_id of {}", profile.display());
    let mut states: BTreeMap<String, i64> = BTreeMap::new();
    for s in samples {
        if let Some(st) = labels(s).get("state") {
            *states.entry(st.clone()).or_default() += s["value"][0].as_i64().unwrap();
        }
    }
    let go_states = tags.get("state").cloned().unwrap_or_default().into_iter().filter(|(_, v)| *v != 0).collect::<BTreeMap<_, _>>();
    assert_eq!(go_states, nonzero(states), "go tool pprof -tags: wall per state of {}", profile.display());
}

pub fn labels(sample: &Value) -> BTreeMap<String, String> {
    sample["label"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
}

/// Summed wall value per `thread_id` label.
pub fn wall_by_tid(p: &Value) -> BTreeMap<u64, i64> {
    let mut m = BTreeMap::new();
    for s in p["sample"].as_array().unwrap() {
        let tid: u64 = labels(s)["thread_id"].parse().unwrap();
        *m.entry(tid).or_default() += s["value"][0].as_i64().unwrap();
    }
    m
}

/// A listener on a free loopback port that takes one request, answers
/// `response`, and hands back (request head, body).
pub fn listen(response: &'static str) -> (String, JoinHandle<(String, Vec<u8>)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    l.set_nonblocking(true).unwrap();
    let h = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut s = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => panic!("no request came: {e}"),
            }
        };
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i;
            }
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed inside the request head");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
            .expect("a Content-Length header");
        let mut body = buf[head_end + 4..].to_vec();
        while body.len() < len {
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed inside the body");
            body.extend_from_slice(&chunk[..n]);
        }
        s.write_all(response.as_bytes()).unwrap();
        (head, body)
    });
    (url, h)
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

pub fn query_params(q: &str) -> BTreeMap<String, String> {
    q.split('&').map(|kv| kv.split_once('=').unwrap_or((kv, ""))).map(|(k, v)| (unescape(k), unescape(v))).collect()
}

/// multipart/form-data (RFC 7578) parts by field name.
pub fn multipart_parts(body: &[u8], boundary: &str) -> BTreeMap<String, Vec<u8>> {
    let delim = format!("--{boundary}").into_bytes();
    let find = |from: usize| body[from..].windows(delim.len()).position(|w| w == delim).map(|i| i + from);
    let mut parts = BTreeMap::new();
    let mut at = find(0).expect("first boundary");
    loop {
        let start = at + delim.len();
        if body[start..].starts_with(b"--") {
            break; // closing delimiter
        }
        let next = find(start).expect("a closing boundary");
        let part = &body[start + 2..next - 2]; // CRLF after the delimiter, CRLF before the next
        let split = part.windows(4).position(|w| w == b"\r\n\r\n").expect("part headers");
        let headers = String::from_utf8_lossy(&part[..split]);
        let name = headers.split("name=\"").nth(1).and_then(|r| r.split('"').next()).expect("a field name").to_string();
        parts.insert(name, part[split + 4..].to_vec());
        at = next;
    }
    parts
}
