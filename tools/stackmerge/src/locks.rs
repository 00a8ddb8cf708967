//! Locks the capture named by their address (`lock 0x7f..`: a mutex on
//! the heap or on a thread's stack) named by their commonest blocking
//! call site, over every stack of the merge
//! (`wallclock_stream::locks`): the object frame of each of their stacks
//! becomes `[lock in worker_loop]`, and its record keeps the address as
//! its `object` (written with the stream, for a reader to match against a
//! core dump).

use wallclock_stream::accounting::{object_frame, object_of};
use wallclock_stream::fasthash::FastMap;
use wallclock_stream::locks::{unnamed_lock, LockSites};
use wallclock_stream::{Frame, Kind, StackTable};

use crate::order::{Item, Merged};

/// An item's process, its table stack and time, when it is off-CPU.
fn view(i: &Item) -> Option<((u32, u32), u32, u64)> {
    match i {
        Item::Named(n, v) if n.kind == Kind::Off => Some(((n.pid, n.pgen), n.frames, v.ns)),
        Item::Full(s) if s.kind == Kind::Off => Some(((s.pid, wallclock_stream::pgen::pgen_of(s.pgen)), s.stack_id?, s.ns)),
        _ => None,
    }
}

/// The object of table stack `id` when it is a lock named by its address.
fn lock_of(table: &StackTable, id: u32) -> Option<&str> {
    let st = table.stack(id);
    let funcs: Vec<&str> = st[st.len().saturating_sub(2)..].iter().map(|&f| table.frame(f).func.as_str()).collect();
    object_of(&funcs).filter(|o| unnamed_lock(o).is_some())
}

/// Of (process, table stack): its stack with the lock's name, and the
/// capture's name of the lock (None: no lock named by its call site).
type Renamed = Option<(u32, String)>;

/// Name the merge's locks by their call sites (see the module's text).
pub(crate) fn name(m: &mut Merged) {
    let any = (0..m.table.frame_count() as u32).any(|f| {
        let func = m.table.frame(f).func.as_str();
        func.strip_prefix('[').and_then(|f| f.strip_suffix(']')).is_some_and(|o| unnamed_lock(o).is_some())
    });
    if !any {
        return;
    }
    let mut sites = LockSites::default();
    for (process, id, ns) in m.items.iter().filter_map(view) {
        if let Some(o) = lock_of(&m.table, id) {
            let leaf_first = m.table.stack(id).iter().rev().map(|&f| m.table.frame(f));
            sites.add(process, o, leaf_first, ns);
        }
    }
    let names = sites.names();
    if names.is_empty() {
        return;
    }
    let mut renamed: FastMap<((u32, u32), u32), Renamed> = FastMap::default();
    let table = &mut m.table;
    for item in m.items.iter_mut() {
        let Some((process, id, _)) = view(item) else { continue };
        let to = renamed.entry((process, id)).or_insert_with(|| {
            let raw = lock_of(table, id)?.to_string();
            let name = names.get(process, &raw)?;
            let mut ids = table.stack(id).to_vec();
            *ids.last_mut()? = table.frame_id(&Frame::named(object_frame(name)));
            Some((table.stack_id(&ids), raw))
        });
        let Some((new, raw)) = to else { continue };
        match item {
            Item::Named(n, _) => {
                n.frames = *new;
                m.lock_objects.insert((process.0, process.1, *new), raw.clone());
            }
            Item::Full(s) => {
                s.stack_id = Some(*new);
                s.object = Some(raw.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::merge::tests::opts;
    use crate::{InputRole, Merger, Options};

    fn merged(o: &Options, input: &str) -> String {
        let mut m = Merger::new(o);
        m.read(InputRole::Off, input.as_bytes(), "off").unwrap();
        let mut out = Vec::new();
        crate::write(&mut m.finish(), o, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Two heap locks blocked on from `withdraw` (one also from `audit`)
    /// and a global one: each heap lock is named by its heaviest site
    /// wherever it was taken, the lighter one `#2`; the symbol's stays;
    /// the stream keeps the address as the record's object, and the
    /// merged stream merged again names them the same.
    #[test]
    fn heap_locks_named_by_their_call_site() {
        let rec = |site: &str, obj: &str, ns: u64| {
            format!(
                r#"{{"type":"stack","kind":"off","state":"S","pid":7,"tid":8,"comm":"app","frames":[{{"func":"main"}},{{"func":"{site}"}},{{"func":"pthread_mutex_lock","module":"/usr/lib/x86_64-linux-gnu/libc.so.6"}},{{"func":"futex_wait","kernel":true}}],"ns":{ns},"count":1,"object":"{obj}"}}"#
            )
        };
        let recs = [
            rec("withdraw", "lock 0x7f0010", 300),
            rec("audit", "lock 0x7f0010", 100),
            rec("withdraw", "lock 0x7f0020", 500),
            rec("withdraw", "lock g_lock", 50),
        ]
        .join("\n");
        let got = merged(&opts(), &recs);
        let line = |site: &str, obj: &str, ns: u64| format!("app (7);main;{site};pthread_mutex_lock;futex_wait_[k];[sleep];[{obj}]_[o] {ns}");
        for want in [
            line("audit", "lock in withdraw #2", 100),
            line("withdraw", "lock g_lock", 50),
            line("withdraw", "lock in withdraw", 500),
            line("withdraw", "lock in withdraw #2", 300),
        ] {
            assert!(got.lines().any(|l| l == want), "no {want} in\n{got}");
        }
        let stream = merged(&Options { folded: false, ..opts() }, &recs);
        assert!(stream.contains(r#""object":"lock 0x7f0010""#) && stream.contains(r#""object":"lock 0x7f0020""#), "{stream}");
        assert_eq!(merged(&opts(), &stream), got, "merged again");
    }
}
