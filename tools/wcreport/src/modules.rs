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
            if let Some(id) = &e.build_id {
                self.build_ids.entry(e.path.clone()).or_insert_with(|| id.clone());
            }
        }
    }

    /// The path of `module` in process `pid`, when the maps say it.
    pub fn path(&self, pid: u32, module: &str) -> Option<&str> {
        if module.contains('/') {
            return None;
        }
        self.by_pid.get(&pid)?.get(module)?.as_deref()
    }
}
