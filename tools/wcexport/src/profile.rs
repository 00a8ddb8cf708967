//! A pprof profile being built (`perftools.profiles.Profile` of
//! github.com/google/pprof/proto/profile.proto): interned strings,
//! functions, locations and mappings, samples merged by stack and labels,
//! and its encoding (gzipped, as the format wants it on disk).

use std::collections::HashMap;
use std::io::Write;

use crate::proto::Msg;

/// A mapping as the stream's Maps records give it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MappingKey {
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
    pub file: String,
    pub build_id: String,
}

#[derive(Debug, Default, Clone, Copy)]
struct Resolution {
    functions: bool,
    filenames: bool,
    line_numbers: bool,
    inline_frames: bool,
}

/// One source line of a location: (function id, line).
pub type Line = (u64, i64);

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LocationKey {
    mapping: u64,
    address: u64,
    lines: Vec<Line>,
}

/// A sample is one stack (location ids, leaf first) under one label set.
type SampleKey = (Vec<u64>, Vec<(i64, i64)>);

#[derive(Debug, Clone)]
struct Sample {
    locations: Vec<u64>,
    values: Vec<i64>,
    labels: Vec<(i64, i64)>,
}

/// Ids are 1-based positions in their table, as pprof's own writer does.
#[derive(Debug)]
pub struct Profile {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    sample_types: Vec<(i64, i64)>,
    samples: Vec<Sample>,
    sample_ids: HashMap<SampleKey, usize>,
    mappings: Vec<(MappingKey, Resolution)>,
    mapping_ids: HashMap<MappingKey, u64>,
    /// The mapping listed first: pprof takes mapping[0] as the main binary.
    pub main_mapping: Option<u64>,
    locations: Vec<LocationKey>,
    location_ids: HashMap<LocationKey, u64>,
    functions: Vec<(i64, i64)>,
    function_ids: HashMap<(i64, i64), u64>,
    pub time_nanos: i64,
    pub duration_nanos: i64,
    period_type: (i64, i64),
    pub period: i64,
    default_sample_type: i64,
    comments: Vec<i64>,
}

impl Profile {
    /// A profile with these (type, unit) sample types; `default` names the
    /// one viewers show first and is also the period type.
    pub fn new(types: &[(&str, &str)], default: usize) -> Self {
        let mut p = Profile {
            strings: Vec::new(),
            string_ids: HashMap::new(),
            sample_types: Vec::new(),
            samples: Vec::new(),
            sample_ids: HashMap::new(),
            mappings: Vec::new(),
            mapping_ids: HashMap::new(),
            main_mapping: None,
            locations: Vec::new(),
            location_ids: HashMap::new(),
            functions: Vec::new(),
            function_ids: HashMap::new(),
            time_nanos: 0,
            duration_nanos: 0,
            period_type: (0, 0),
            period: 1,
            default_sample_type: 0,
            comments: Vec::new(),
        };
        p.string(""); // string_table[0] must be ""
        p.sample_types = types.iter().map(|(t, u)| (p.string(t), p.string(u))).collect();
        p.period_type = p.sample_types[default];
        p.default_sample_type = p.sample_types[default].0;
        p
    }

    pub fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    pub fn comment(&mut self, s: &str) {
        let i = self.string(s);
        self.comments.push(i);
    }

    pub fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (self.string(name), self.string(file));
        let next = self.functions.len() as u64 + 1;
        *self.function_ids.entry(key).or_insert_with(|| {
            self.functions.push(key);
            next
        })
    }

    pub fn mapping(&mut self, key: MappingKey) -> u64 {
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        self.string(&key.file);
        self.string(&key.build_id);
        self.mappings.push((key.clone(), Resolution::default()));
        let id = self.mappings.len() as u64;
        self.mapping_ids.insert(key, id);
        id
    }

    /// A location: `lines` innermost first (inlined callees before the
    /// function they were inlined into), as profile.proto orders them.
    /// `files`/`line_numbers` say what the symbolizer knew, for the
    /// mapping's has_* flags.
    pub fn location(&mut self, mapping: u64, address: u64, lines: Vec<Line>, files: bool) -> u64 {
        if mapping != 0 && !lines.is_empty() {
            let r = &mut self.mappings[mapping as usize - 1].1;
            r.functions = true;
            r.filenames |= files;
            r.line_numbers |= lines.iter().any(|l| l.1 != 0);
            r.inline_frames |= lines.len() > 1;
        }
        let key = LocationKey { mapping, address, lines };
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        self.locations.push(key.clone());
        let id = self.locations.len() as u64;
        self.location_ids.insert(key, id);
        id
    }

    /// Add `values` to the sample of this stack (leaf first) and labels.
    pub fn add_sample(&mut self, locations: Vec<u64>, labels: Vec<(i64, i64)>, values: &[i64]) {
        let key = (locations, labels);
        let idx = match self.sample_ids.get(&key) {
            Some(&i) => i,
            None => {
                let (locations, labels) = key.clone();
                self.samples.push(Sample { locations, values: vec![0; values.len()], labels });
                self.sample_ids.insert(key, self.samples.len() - 1);
                self.samples.len() - 1
            }
        };
        for (acc, v) in self.samples[idx].values.iter_mut().zip(values) {
            *acc += v;
        }
    }

    pub fn sample_count(&self) -> usize {
        self.samples.len()
    }

    /// The uncompressed `Profile` message.
    pub fn encode(&self) -> Vec<u8> {
        let mut p = Msg::new();
        for &(t, u) in &self.sample_types {
            p.msg(1, Msg::new().int(1, t).int(2, u));
        }
        for s in &self.samples {
            let mut m = Msg::new();
            m.packed(1, s.locations.iter().copied());
            m.packed(2, s.values.iter().map(|&v| v as u64));
            for &(k, v) in &s.labels {
                m.msg(3, Msg::new().int(1, k).int(2, v));
            }
            p.msg(2, &m);
        }
        let order = self.main_mapping.into_iter().chain((1..=self.mappings.len() as u64).filter(|&i| Some(i) != self.main_mapping));
        for id in order {
            let (k, r) = &self.mappings[id as usize - 1];
            let mut m = Msg::new();
            m.uint(1, id).uint(2, k.start).uint(3, k.limit).uint(4, k.offset);
            m.int(5, self.string_ids[&k.file]).int(6, self.string_ids[&k.build_id]);
            m.bool(7, r.functions).bool(8, r.filenames).bool(9, r.line_numbers).bool(10, r.inline_frames);
            p.msg(3, &m);
        }
        for (i, l) in self.locations.iter().enumerate() {
            let mut m = Msg::new();
            m.uint(1, i as u64 + 1).uint(2, l.mapping).uint(3, l.address);
            for &(f, line) in &l.lines {
                m.msg(4, Msg::new().uint(1, f).int(2, line));
            }
            p.msg(4, &m);
        }
        for (i, &(name, file)) in self.functions.iter().enumerate() {
            // No mangled names in the stream: system_name = name.
            p.msg(5, Msg::new().uint(1, i as u64 + 1).int(2, name).int(3, name).int(4, file));
        }
        for s in &self.strings {
            p.bytes(6, s.as_bytes());
        }
        p.int(9, self.time_nanos).int(10, self.duration_nanos);
        p.msg(11, Msg::new().int(1, self.period_type.0).int(2, self.period_type.1));
        p.int(12, self.period);
        p.packed(13, self.comments.iter().map(|&c| c as u64));
        p.int(14, self.default_sample_type);
        p.buf
    }

    /// The profile as a `.pb.gz` file holds it.
    pub fn to_gzip(&self) -> std::io::Result<Vec<u8>> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&self.encode())?;
        gz.finish()
    }
}
