//! Full paths of modules. `stacksym` names a frame's module by its file
//! name (`libc.so.6`); the stream's maps records still carry each
//! process's paths and build ids, which tell a system library from the
//! program and say where a debug file would go.

use std::collections::BTreeMap;

use wallclock_stream::Maps;

#[derive(Debug, Default)]
pub struct Modules {
    /// pid -> file name -> its path (None: two paths share the name).
    by_pid: BTreeMap<u32, BTreeMap<String, Option<String>>>,
    /// pid -> every path it mapped, for a name that is a tail of one
    /// (stacksym's for two files of one name: `p3/driver...so`).
    paths: BTreeMap<u32, Vec<String>>,
    /// path -> hex build id.
    pub build_ids: BTreeMap<String, String>,
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

impl Modules {
    pub fn add(&mut self, m: &Maps) {
        let names = self.by_pid.entry(m.pid).or_default();
        for e in m.maps.iter().filter(|e| e.path.starts_with('/')) {
            match names.get(basename(&e.path)) {
                None => {
                    names.insert(basename(&e.path).to_string(), Some(e.path.clone()));
                }
                Some(Some(p)) if *p != e.path => {
                    names.insert(basename(&e.path).to_string(), None);
                }
                _ => {}
            }
            let paths = self.paths.entry(m.pid).or_default();
            if !paths.contains(&e.path) {
                paths.push(e.path.clone());
            }
            if let Some(id) = &e.build_id {
                self.build_ids.entry(e.path.clone()).or_insert_with(|| id.clone());
            }
        }
    }

    /// The path of `module` in process `pid`, when the maps say it.
    pub fn path(&self, pid: u32, module: &str) -> Option<&str> {
        if module.starts_with('/') {
            return None;
        }
        if module.contains('/') {
            let tail = format!("/{module}");
            let mut found = self.paths.get(&pid)?.iter().filter(|p| p.ends_with(&tail));
            return found.next().filter(|_| found.next().is_none()).map(String::as_str);
        }
        self.by_pid.get(&pid)?.get(module)?.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallclock_stream::MapEntry;

    #[test]
    fn two_files_of_one_name_are_told_apart_by_a_tail_of_their_paths() {
        let so = "driver.cpython-311-x86_64-linux-gnu.so";
        let entry = |path: String| MapEntry { start: 0, end: 1, offset: 0, path, build_id: None };
        let maps = vec![entry(format!("/x/p1/{so}")), entry(format!("/x/p2/{so}")), entry("/lib/libc.so.6".into())];
        let mut m = Modules::default();
        m.add(&Maps { pid: 7, maps, names: Vec::new(), pgen: None });
        assert_eq!(m.path(7, "libc.so.6"), Some("/lib/libc.so.6"));
        // The base name alone names neither.
        assert_eq!(m.path(7, so), None);
        assert_eq!(m.path(7, &format!("p2/{so}")), Some(format!("/x/p2/{so}").as_str()));
        assert_eq!(m.path(7, &format!("p3/{so}")), None);
    }
}
