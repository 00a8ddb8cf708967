use super::*;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("safe-open-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn me() -> Owner {
    // SAFETY: getuid cannot fail.
    Owner::User(unsafe { libc::getuid() })
}

#[test]
fn links_fifos_and_devices_are_skipped() {
    let d = dir("kinds");
    let link = d.join("link");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let e = open(&link, me()).unwrap_err();
    assert!(e.why.contains("symbolic link"), "{e}");
    let fifo = d.join("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let e = open(&fifo, me()).unwrap_err();
    assert!(e.why.contains("fifo"), "{e}");
    let e = open(Path::new("/dev/zero"), me()).unwrap_err();
    assert!(e.why.contains("character device"), "{e}");
    assert!(open(&d.join("none"), me()).unwrap().is_none());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_file_of_another_user_must_be_readable_by_everyone() {
    let d = dir("owner");
    let p = d.join("f");
    std::fs::write(&p, "x\n").unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert!(open(&p, me()).unwrap().is_some());
    let e = open(&p, Owner::User(65534)).unwrap_err();
    assert!(e.why.contains("not readable by everyone"), "{e}");
    assert!(open(&p, Owner::Unknown).is_err());
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    assert!(open(&p, Owner::User(65534)).unwrap().is_some());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn lines_within_bounds() {
    let d = dir("lines");
    let p = d.join("f");
    let mut f = File::create(&p).unwrap();
    f.write_all(b"a\nbb\nccc").unwrap();
    let f = open(&p, me()).unwrap().unwrap();
    let mut got = Vec::new();
    let used = for_each_line(&p, &f, PERF_MAP, |l| got.push(l.to_vec())).unwrap();
    // The last line, still being written, is left for later.
    assert_eq!((got, used), (vec![b"a".to_vec(), b"bb".to_vec()], 5));
    let small = Bounds { max_bytes: 100, max_line: 2, max_lines: 10 };
    std::fs::write(&p, "ab\nabc\n").unwrap();
    let f = open(&p, me()).unwrap().unwrap();
    let e = for_each_line(&p, &f, small, |_| {}).unwrap_err();
    assert!(e.why.contains("longer than 2 bytes (line 2)"), "{e}");
    std::fs::write(&p, "a\n".repeat(11)).unwrap();
    let f = open(&p, me()).unwrap().unwrap();
    assert!(for_each_line(&p, &f, small, |_| {}).unwrap_err().why.contains("more than 10 lines"));
    std::fs::write(&p, "a".repeat(101)).unwrap();
    let f = open(&p, me()).unwrap().unwrap();
    assert!(read_all(&p, &f, small).unwrap_err().why.contains("101 bytes"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn in_root_no_link_is_followed() {
    let d = dir("root");
    std::fs::write(d.join("f"), "x\n").unwrap();
    std::os::unix::fs::symlink(d.join("f"), d.join("l")).unwrap();
    let pid = std::process::id();
    let at = |n: &str| format!("{}/{n}", d.display());
    assert!(open_in_root(pid, &at("f"), me()).unwrap().is_some());
    let e = open_in_root(pid, &at("l"), me()).unwrap_err();
    assert!(e.why.contains("symbolic link"), "{e}");
    assert!(open_in_root(pid, &at("none"), me()).unwrap().is_none());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn this_process_started_before_now() {
    let start = start_time(std::process::id()).unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    assert!(start <= now + 0.02 && start > now - 3600.0, "{start} {now}");
    let d = dir("stale");
    let p = d.join("f");
    std::fs::write(&p, "x\n").unwrap();
    let f = File::open(&p).unwrap();
    assert_eq!(older_than_process(&f, std::process::id()), Some(false));
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    f.set_modified(old).unwrap();
    assert_eq!(older_than_process(&f, std::process::id()), Some(true));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn sockets_and_created_files_with_no_link() {
    let d = dir("sock");
    let pid = std::process::id();
    let at = |n: &str| format!("{}/{n}", d.display());
    let _listener = std::os::unix::net::UnixListener::bind(d.join("s")).unwrap();
    std::os::unix::fs::symlink(d.join("s"), d.join("l")).unwrap();
    assert!(socket_in_root(pid, &at("s"), me()).unwrap().is_some());
    assert!(socket_in_root(pid, &at("l"), me()).unwrap_err().why.contains("symbolic link"));
    assert!(socket_in_root(pid, &at("s"), Owner::User(65534)).unwrap_err().why.contains("owned by"));
    std::fs::write(d.join("f"), "").unwrap();
    assert!(socket_in_root(pid, &at("f"), me()).unwrap_err().why.contains("not a socket"));
    // Created only where nothing stands, a link included.
    assert!(create_in_root(pid, &at("new"), 0o600).is_ok());
    assert_eq!(create_in_root(pid, &at("new"), 0o600).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    std::os::unix::fs::symlink("/tmp/wc-nowhere", d.join("dangling")).unwrap();
    assert!(create_in_root(pid, &at("dangling"), 0o600).is_err());
    assert!(!Path::new("/tmp/wc-nowhere").exists());
    // A folder reached through a link is refused too.
    std::os::unix::fs::symlink(&d, d.join("dirlink")).unwrap();
    assert!(dir_in_root(pid, &at("dirlink")).is_err());
    assert!(dir_in_root(pid, &d.display().to_string()).is_ok());
    std::fs::remove_dir_all(&d).unwrap();
}
