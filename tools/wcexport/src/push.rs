//! `--push`: one profile to a Pyroscope-compatible ingest endpoint, as
//! its server API documents it
//! (https://grafana.com/docs/pyroscope/latest/configure-server/about-server-api/):
//! `POST /ingest?name=APP{labels}&from=UNIX&until=UNIX&format=pprof`, the
//! gzipped profile in the multipart/form-data file field `profile`, and a
//! `sample_type_config` field describing our sample types (Pyroscope
//! knows only Go's by itself and drops the others). Plain HTTP/1.1 over a
//! TcpStream: the push is one request, not worth an HTTP stack.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::convert::SAMPLE_TYPES;

/// Where to send: host, port and the path of the ingest endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub path: String,
}

/// `http://HOST[:PORT][/PREFIX]`: the server's base URL (`/ingest` is
/// appended) or its ingest URL.
pub fn parse_url(url: &str) -> Result<Endpoint> {
    if url.starts_with("https://") {
        bail!("{url}: https is not supported (wcexport speaks plain HTTP): push to an http:// address, e.g. a local Pyroscope, Alloy or a TLS proxy");
    }
    let rest = url.strip_prefix("http://").ok_or_else(|| anyhow!("{url}: expected an http://HOST[:PORT] URL"))?;
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    if authority.contains('@') {
        bail!("{url}: credentials in the URL are not supported");
    }
    if path.contains('?') {
        bail!("{url}: give the server's address without a query; --app and --label make the query");
    }
    let (host, port) = match authority.strip_prefix('[') {
        // [v6]:port
        Some(v6) => {
            let (h, p) = v6.split_once(']').ok_or_else(|| anyhow!("{url}: unclosed ["))?;
            (h, p.strip_prefix(':').unwrap_or("80"))
        }
        None => authority.rsplit_once(':').unwrap_or((authority, "80")),
    };
    let port: u16 = port.parse().map_err(|_| anyhow!("{url}: bad port {port:?}"))?;
    if host.is_empty() {
        bail!("{url}: no host");
    }
    let path = path.trim_end_matches('/');
    let path = if path.ends_with("/ingest") { path.to_string() } else { format!("{path}/ingest") };
    Ok(Endpoint { host: host.to_string(), port, path })
}

/// Percent-encoding of a query value (RFC 3986: all but unreserved).
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The query string: `name` is the application name with its series
/// labels in braces; Pyroscope appends each sample type (`APP.wall`).
pub fn query(app: &str, labels: &[(String, String)], from_s: u64, until_s: u64) -> String {
    let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let name = format!("{app}{{{}}}", labels.join(","));
    // sampleRate is ignored for pprof (the doc says so); sent as the
    // profile's own rate, one value unit per nanosecond.
    format!("name={}&from={from_s}&until={until_s}&format=pprof&sampleRate=1000000000&spyName=wallclock", encode(&name))
}

/// Pyroscope's legacy path reads a sample type only when it is in this
/// configuration. `sampled` with the profile's period of 1 ns makes it a
/// rate of 1e9 Hz, so "samples" are shown as the seconds they are.
pub fn sample_type_config() -> String {
    let parts: Vec<String> = SAMPLE_TYPES
        .iter()
        .map(|(t, _)| format!(r#""{t}":{{"units":"samples","aggregation":"sum","display-name":"{t}","sampled":true}}"#))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// The multipart/form-data body and its boundary.
pub fn multipart(profile_gz: &[u8]) -> (String, Vec<u8>) {
    let boundary = format!("wallclock-{:016x}", profile_gz.len() as u64 ^ std::process::id() as u64 ^ 0x5bd1e995);
    let mut body = Vec::new();
    let mut part = |name: &str, file: &str, ctype: &str, data: &[u8]| {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        body.extend_from_slice(
            format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: {ctype}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    };
    part("profile", "profile.pb.gz", "application/octet-stream", profile_gz);
    part("sample_type_config", "sample_type_config.json", "application/json", sample_type_config().as_bytes());
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (boundary, body)
}

/// POST the profile; Ok when the server answers 2xx. Errors are one line:
/// the address and why (refused, timed out), or the status and the first
/// line of what the server said.
pub fn push(url: &str, query: &str, profile_gz: &[u8]) -> Result<()> {
    let ep = parse_url(url)?;
    let target = format!("http://{}:{}{}", ep.host, ep.port, ep.path);
    let addrs: Vec<_> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .with_context(|| format!("push to {target}: cannot resolve {}", ep.host))?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(10)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(anyhow::Error::from(e).context(format!("cannot connect to {a}"))),
        }
    }
    let mut s = match stream {
        Some(s) => s,
        None => return Err(last.unwrap_or_else(|| anyhow!("no address")).context(format!("push to {target}"))),
    };
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let (boundary, body) = multipart(profile_gz);
    let host = if ep.host.contains(':') { format!("[{}]", ep.host) } else { ep.host.clone() };
    let head = format!(
        "POST {}?{query} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: wcexport/{}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.path,
        ep.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    let sent = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body)).and_then(|()| s.flush());
    let mut answer = Vec::new();
    let read = s.read_to_end(&mut answer);
    // A server that refuses early may close before reading all: its answer counts.
    if answer.is_empty() {
        sent.with_context(|| format!("push to {target}: sending failed"))?;
        read.with_context(|| format!("push to {target}: no answer"))?;
    }
    let text = String::from_utf8_lossy(&answer);
    let (status_line, rest) = text.split_once("\r\n").unwrap_or((&text, ""));
    let mut it = status_line.splitn(3, ' ');
    let (proto, code) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
    let code: u16 = match (proto.starts_with("HTTP/"), code.parse()) {
        (true, Ok(c)) => c,
        _ => bail!("push to {target}: not an HTTP answer: {:?}", status_line.chars().take(80).collect::<String>()),
    };
    if (200..300).contains(&code) {
        return Ok(());
    }
    let body = rest.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    let first = body.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("(empty body)");
    bail!("push to {target}: the server refused it: {status_line}: {first}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = parse_url("http://localhost:4040").unwrap();
        assert_eq!(e, Endpoint { host: "localhost".into(), port: 4040, path: "/ingest".into() });
        assert_eq!(parse_url("http://h/pyro/").unwrap().path, "/pyro/ingest");
        assert_eq!(parse_url("http://h:1/ingest").unwrap().path, "/ingest");
        assert_eq!(parse_url("http://[::1]:9/").unwrap().host, "::1");
        assert!(parse_url("https://h").unwrap_err().to_string().contains("https is not supported"));
        assert!(parse_url("h:4040").is_err());
        assert!(parse_url("http://h:x").is_err());
    }

    #[test]
    fn query_encodes_name_and_labels() {
        let q = query("my app", &[("env".into(), "prod".into())], 10, 12);
        assert!(q.starts_with("name=my%20app%7Benv%3Dprod%7D&from=10&until=12&format=pprof"), "{q}");
    }
}
