//! PHP 8.2 CLI (Debian's php-cli; tests/programs/php/work.php: `work()`
//! calls `crunch()`, on the CPU, and `nap()`, in usleep, and times each
//! with hrtime) profiled by `scripts/wallclock -- php ...` with no flag,
//! and PHP 8.3, 8.4 and 8.5 CLI (Ubuntu 24.04's php8.3-cli in
//! target/chroot-noble; Debian forky's php8.4-cli and experimental's
//! php8.5-cli in target/chroot-forky; as in a container) attached by pid
//! with no flag; and a thread-safe (ZTS) PHP 8.2 built from source,
//! attached by pid with no flag.
//!
//! - Plain (no opcache in the CLI, Debian's default): the PHP functions
//!   are named with their callers (`php::{main}` -> `php::work` ->
//!   `php::crunch`) above `execute_ex`, the main thread's stacks are
//!   whole (from `_start`), and each function's share of the thread's
//!   time is within 5 points of the program's own clocks.
//! - Under opcache's function JIT: the sleep's stack is never joined
//!   wrongly. It was `zend_execute;__GI___clock_nanosleep` for all of it
//!   (the leaf scan took a stale return address for the caller of the JIT
//!   code, with `nap`, `usleep` and `__nanosleep` dropped and nothing
//!   marked); now whole or cut and marked `[truncated]`, and the PHP
//!   frames still name `nap`.
//!
//! Root (BPF) and php are needed; the test skips, saying so, without them.

mod runtime_common;
mod util;

use runtime_common::{attach_built, attach_in_chroot, debian_chroot, have, ns, profile, stats, top, Run, Stack};
use serde_json::Value;

fn run(name: &str, flags: &[&str]) -> (Run, Value) {
    let prog = util::root().join("tests/programs/php/work.php");
    let mut cmd = vec!["php"];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(&[prog.to_str().unwrap(), "3"]);
    let r = profile(&util::scratch(name), &cmd);
    let clocks: Value = r.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no clocks printed: {}", r.stdout));
    (r, clocks)
}

/// The main thread's stacks (PHP's CLI runs the script there), leaving
/// out the synthetic ones that hold time in no code.
fn main_thread(r: &Run) -> Vec<&Stack> {
    r.stacks
        .iter()
        .filter(|s| s.tid == s.pid && r.comms.get(&s.tid).is_some_and(|c| c.starts_with("php")))
        .filter(|s| !matches!(s.frames.first().map(String::as_str), Some("[steal]") | Some("[thread start]")))
        .collect()
}

fn has(s: &Stack, f: &str) -> bool {
    s.frames.iter().any(|x| x == f)
}

/// `callee` right under `caller` (leafward), with nothing between.
fn called_by(s: &Stack, caller: &str, callee: &str) -> bool {
    s.frames.windows(2).any(|w| w[0] == caller && w[1] == callee)
}

#[test]
fn php_functions_named_with_their_callers_and_timed_as_the_program_times_them() {
    if util::skip_without_root("PHP capture") || !have("php", "php-cli") {
        return;
    }
    let (r, clocks) = run("runtime_php_plain", &[]);
    // The program's untimed start sleeps in time_nanosleep (no usleep
    // frame; before the interpreter is found, no PHP frames): left out.
    let warmup = |s: &Stack| has(s, "__GI___nanosleep") && !has(s, "usleep");
    check("php 8.2", &r, &clocks, &util::root().join("target/test-tmp/runtime_php_plain"), warmup);
    let main = main_thread(&r);
    // PHP is found at its exec, not a turn of the capture's loop later
    // (up to 800 ms on a loaded machine): the untimed start's sleeps,
    // which begin a few ms after the exec, name the script.
    let start = ns(&main, |s| warmup(s) && s.kind == "off");
    let start_named = ns(&main, |s| warmup(s) && s.kind == "off" && called_by(s, "execute_ex", "php::{main}"));
    let start_pct = start_named as f64 * 100.0 / start.max(1) as f64;
    eprintln!("php: {start_pct:.1}% of the start's sleeps name php::{{main}}");
    assert!(start_pct >= 90.0, "{start_pct:.1}% of the start's sleeps (time_nanosleep) name php::{{main}}:\n{}", top(&main, |s| warmup(s) && !has(s, "php::{main}")));
}

/// Debian forky's PHP 8.4 in a chroot, attached by pid with no flag
/// (its `zend_op_array` grew: the file name moved), with the same checks
/// as 8.2's.
#[test]
fn forkys_php_84_attached_with_no_flag() {
    chroot_php("forky", "php8.4", "php8.4-cli", "8.4");
}

/// Ubuntu 24.04's PHP 8.3 (no Debian suite has it) in target/chroot-noble,
/// attached by pid with no flag (its `zend_op_array` shrank: the file name
/// at 144), with the same checks as 8.2's.
#[test]
fn ubuntus_php_83_attached_with_no_flag() {
    chroot_php("noble", "php8.3", "php8.3-cli", "8.3");
}

/// Debian experimental's PHP 8.5 (installed in the forky chroot),
/// attached by pid with no flag (its `zend_executor_globals` grew: the
/// frame chain's head moved), with the same checks as 8.2's.
#[test]
fn experimentals_php_85_attached_with_no_flag() {
    chroot_php("forky", "php8.5", "php8.5-cli/experimental", "8.5");
}

/// A thread-safe (ZTS) PHP 8.2 CLI built from source (scripts/build-php
/// into target/php-zts, named `php` as the official Docker images name
/// theirs), attached by pid with no flag: its version from its module API
/// number, its executor globals found per thread (through its TLS, not
/// the `executor_globals` an NTS build exports), and the same checks as
/// Debian's 8.2.
#[test]
fn thread_safe_php_attached_with_no_flag() {
    if util::skip_without_root("PHP capture") {
        return;
    }
    let Some((r, dir)) = attach_built("runtime_php_zts", "target/php-zts/bin/php", "build-php", "tests/programs/php/work.php", "3", &[]) else { return };
    assert!(!r.stderr.contains("not walked") && !r.report.contains("not walked"), "{}\n{}", r.stderr, r.report);
    let clocks: Value = r.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no clocks printed: {}", r.stdout));
    let outside = |s: &Stack| has(s, "php::{main}") && !has(s, "php::work");
    check("php 8.2 ZTS", &r, &clocks, &dir, outside);
}

/// `suite`'s chroot's `bin` (of `package`, PHP `version`) running
/// work.php, attached by its host pid: `check`'s checks, and no "not
/// walked".
fn chroot_php(suite: &str, bin: &str, package: &str, version: &str) {
    if util::skip_without_root("PHP capture") {
        return;
    }
    let Some(root) = debian_chroot(suite, bin, package) else { return };
    let name = format!("runtime_php_{suite}_{}", version.replace('.', ""));
    let r = attach_in_chroot(&name, &root, bin, "tests/programs/php/work.php", "3");
    assert!(!r.stderr.contains("not walked") && !r.report.contains("not walked"), "{}\n{}", r.stderr, r.report);
    let clocks: Value = r.stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_else(|| panic!("no clocks printed: {}", r.stdout));
    // Outside work(): the wait for the go file, the untimed start, the
    // output (all in {main}).
    let outside = |s: &Stack| has(s, "php::{main}") && !has(s, "php::work");
    check(&format!("php {version}"), &r, &clocks, &util::root().join("target/test-tmp").join(&name), outside);
}

/// What every version must show: the main thread's stacks whole (from
/// `_start`), the time under `execute_ex` (but `outside` work()) naming
/// `php::work`, each function's share within 5 points of the program's
/// clocks, under its callers, above `execute_ex`; unreadable frames
/// counted. Prints the figures issue 40 measures: the process's
/// thread-time in stacks naming PHP functions, the main thread's in whole
/// stacks, the reader's cost per stack (`php_ns / php_stacks`).
fn check(label: &str, r: &Run, clocks: &Value, dir: &std::path::Path, outside: impl Fn(&Stack) -> bool) {
    let main = main_thread(r);
    let all = ns(&main, |_| true);
    assert!(all > 0, "{label}: no time in PHP's main thread:\n{}", r.stderr);
    let rooted = |s: &Stack| s.frames.first().is_some_and(|f| f == "_start") && !has(s, "[truncated]");
    let whole = ns(&main, rooted);
    let whole_pct = whole as f64 * 100.0 / all as f64;
    assert!(whole_pct >= 90.0, "{label}: {whole_pct:.1}% of the main thread's time in whole stacks:\n{}", top(&main, |s| !rooted(s)));
    // The program times work() (its clocks' total); the profile's time in
    // work() is that of the stacks through php::work.
    let in_php = ns(&main, |s| has(s, "execute_ex") && !outside(s));
    let named = ns(&main, |s| has(s, "php::work"));
    let named_pct = named as f64 * 100.0 / in_php.max(1) as f64;
    assert!(named_pct >= 90.0, "{label}: {named_pct:.1}% of the time under execute_ex names php::work:\n{}", top(&main, |s| has(s, "execute_ex") && !outside(s) && !has(s, "php::work")));
    let total = clocks["total"].as_f64().unwrap();
    for (f, caller) in [("crunch", "php::work"), ("nap", "php::work")] {
        let name = format!("php::{f}");
        let seen = ns(&main, |s| has(s, &name));
        let nested = ns(&main, |s| called_by(s, caller, &name) && called_by(s, "php::{main}", caller));
        let share = seen as f64 * 100.0 / named as f64;
        let truth = clocks[f].as_f64().unwrap() * 100.0 / total;
        assert!((share - truth).abs() <= 5.0, "{label} {name}: {share:.1}% of work()'s time in the profile, {truth:.1}% by the program's clocks:\n{}", top(&main, |_| true));
        assert!(nested as f64 >= 0.95 * seen as f64, "{label}: {name} is not always under {caller} under php::{{main}}:\n{}", top(&main, |s| has(s, &name)));
        eprintln!("{label}: {name} {share:.1}% of work()'s time (program: {truth:.1}%); {named_pct:.1}% of the time under execute_ex named, {whole_pct:.1}% of the thread's in whole stacks");
    }
    // The PHP frames sit above the interpreter's loop that runs them.
    assert!(ns(&main, |s| called_by(s, "execute_ex", "php::{main}")) > 0, "{label}: php::{{main}} never above execute_ex:\n{}", top(&main, |_| true));
    // Frames whose function could not be read are counted in the trailer.
    let st = stats(dir);
    let unread = *st.get("php_unreadable_frames").unwrap_or_else(|| panic!("{label}: no php_unreadable_frames in the trailer: {st:?}"));
    let marked = main.iter().any(|s| has(s, "php::[unreadable frame]"));
    assert_eq!(unread > 0, marked, "{label}: php_unreadable_frames={unread}, while the stacks {} php::[unreadable frame]", if marked { "name" } else { "never name" });
    // Issue 40's figures.
    let every: u64 = r.stacks.iter().map(|s| s.ns).sum();
    let php: u64 = r.stacks.iter().filter(|s| s.frames.iter().any(|f| f.starts_with("php::") && f != "php::[unreadable frame]")).map(|s| s.ns).sum();
    let (pns, pst) = (st.get("php_ns").copied().unwrap_or(0), st.get("php_stacks").copied().unwrap_or(0));
    assert!(pst > 0, "{label}: no php_stacks in the capture's stats: {st:?}");
    eprintln!("{label}: {:.1}% of the process's thread-time names PHP functions; reader {:.1} us per stack ({pst} stacks)", php as f64 * 100.0 / every.max(1) as f64, pns as f64 / pst as f64 / 1000.0);
}

#[test]
fn php_jit_sleep_is_whole_or_marked_never_joined_wrongly() {
    if util::skip_without_root("PHP capture") || !have("php", "php-cli") {
        return;
    }
    let flags = ["-d", "opcache.enable_cli=1", "-d", "opcache.jit=function", "-d", "opcache.jit_buffer_size=64M"];
    let (r, _) = run("runtime_php_jit", &flags);
    let main = main_thread(&r);
    // Its sleeps, but the untimed start's (time_nanosleep: __nanosleep
    // without usleep; the wrong stack of old had neither).
    let warmup = |s: &Stack| has(s, "__GI___nanosleep") && !has(s, "usleep");
    let sleeps = |s: &Stack| s.kind == "off" && s.frames.iter().any(|f| f.ends_with("clock_nanosleep")) && !warmup(s);
    let sleep = ns(&main, sleeps);
    assert!(sleep > 0, "the main thread never sleeps in clock_nanosleep:\n{}", top(&main, |_| true));
    // Whole: through libc's usleep, from _start. Cut: marked.
    let through_usleep = |s: &Stack| has(s, "usleep") && s.frames.first().is_some_and(|f| f == "_start");
    // The capture's marker, or stacksym's for a stack whose root is JIT code.
    let marked = |s: &Stack| s.frames.first().is_some_and(|f| f == "[truncated]" || f.starts_with("[stack cut in JIT code"));
    let wrong = ns(&main, |s| sleeps(s) && !through_usleep(s) && !marked(s));
    assert_eq!(wrong, 0, "sleep stacks joined wrongly (neither whole through usleep nor marked):\n{}", top(&main, |s| sleeps(s) && !through_usleep(s) && !marked(s)));
    // Its PHP frames are read as without the JIT: nap, rootward of the
    // JIT code that ran it.
    let named = ns(&main, |s| sleeps(s) && called_by(s, "php::work", "php::nap") && has(s, "usleep"));
    let pct = named as f64 * 100.0 / sleep as f64;
    assert!(pct >= 90.0, "{pct:.1}% of the JIT's sleep names php::nap above usleep:\n{}", top(&main, sleeps));
    eprintln!("php JIT: {pct:.1}% of the sleep names php::nap above usleep; {:.1}% marked [truncated]", ns(&main, |s| sleeps(s) && marked(s)) as f64 * 100.0 / sleep as f64);
}
