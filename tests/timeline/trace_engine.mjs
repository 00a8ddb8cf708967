// Reads a Chrome trace-event JSON file with the DevTools performance
// panel's trace engine (npm @paulirish/trace_engine, installed under
// target/npm by scripts/setup --tests) and prints, per thread, what the
// engine made of it: its name, its slices (count, ns per slice name), the
// first start and the last end (ns from the trace's zero), as JSON.
//
// usage: node trace_engine.mjs NPM_PREFIX TRACE.json
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [prefix, file] = process.argv.slice(2);
const engine = await import(
    pathToFileURL(path.join(prefix, 'node_modules/@paulirish/trace_engine/analyze-trace.mjs')).href);
// The engine assumes a browser: its own polyfill for the one DOM class it uses.
engine.polyfillDOMRect();
const json = JSON.parse(fs.readFileSync(file, 'utf8'));
const {parsedTrace} = await engine.analyzeEvents(json.traceEvents ?? json);
const out = {};
// Microseconds with three decimals are whole nanoseconds: summed as integers.
const ns = us => Math.round(us * 1000);
for (const [pid, p] of parsedTrace.data.Renderer.processes) {
  for (const [tid, t] of p.threads) {
    const s = {pid, name: t.name, slices: 0, ns: {}, first_ns: null, end_ns: 0};
    for (const e of t.entries) {
      if (e.ph !== 'X') continue;
      s.slices += 1;
      s.ns[e.name] = (s.ns[e.name] ?? 0) + ns(e.dur ?? 0);
      const start = ns(e.ts);
      s.first_ns = s.first_ns === null ? start : Math.min(s.first_ns, start);
      s.end_ns = Math.max(s.end_ns, start + ns(e.dur ?? 0));
    }
    out[tid] = s;
  }
}
process.stdout.write(JSON.stringify(out));
