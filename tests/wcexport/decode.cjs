// Decodes a pprof profile (gzipped or not) with the npm package
// pprof-format, an implementation independent of wcexport's encoder, and
// prints it as JSON with every string-table index resolved.
//
// usage: node tests/wcexport/decode.cjs NPM_PREFIX PROFILE
//   NPM_PREFIX: where `npm install --prefix NPM_PREFIX pprof-format` put it
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { createRequire } = require('module');

const [prefix, file] = process.argv.slice(2);
if (!prefix || !file) {
  console.error('usage: decode.cjs NPM_PREFIX PROFILE');
  process.exit(2);
}
const { Profile } = createRequire(path.join(path.resolve(prefix), 'package.json'))('pprof-format');

let data = fs.readFileSync(file);
const gzipped = data[0] === 0x1f && data[1] === 0x8b;
if (gzipped) data = zlib.gunzipSync(data);
const p = Profile.decode(new Uint8Array(data));
const st = p.stringTable.strings;
const s = (i) => st[Number(i)];
// int64 fields come back as number or BigInt: JSON has only doubles, so
// large values (kernel addresses) go out as strings.
const n = (v) => (typeof v === 'bigint' && v > BigInt(Number.MAX_SAFE_INTEGER) ? v.toString() : Number(v));
const vt = (t) => ({ type: s(t.type), unit: s(t.unit) });

const out = {
  gzipped,
  stringTable0: st[0],
  sampleType: p.sampleType.map(vt),
  periodType: p.periodType ? vt(p.periodType) : null,
  period: n(p.period),
  defaultSampleType: s(p.defaultSampleType),
  timeNanos: n(p.timeNanos),
  durationNanos: n(p.durationNanos),
  comment: p.comment.map(s),
  mapping: p.mapping.map((m) => ({
    id: n(m.id), start: n(m.memoryStart), limit: n(m.memoryLimit), offset: n(m.fileOffset),
    file: s(m.filename), buildId: s(m.buildId),
    hasFunctions: !!m.hasFunctions, hasFilenames: !!m.hasFilenames,
    hasLineNumbers: !!m.hasLineNumbers, hasInlineFrames: !!m.hasInlineFrames,
  })),
  function: p.function.map((f) => ({ id: n(f.id), name: s(f.name), systemName: s(f.systemName), file: s(f.filename) })),
  location: p.location.map((l) => ({
    id: n(l.id), mappingId: n(l.mappingId), address: n(l.address),
    line: l.line.map((x) => ({ functionId: n(x.functionId), line: n(x.line) })),
  })),
  sample: p.sample.map((x) => ({
    locationId: x.locationId.map(n),
    value: x.value.map(n),
    label: Object.fromEntries(x.label.map((l) => [s(l.key), l.str ? s(l.str) : n(l.num)])),
  })),
};
process.stdout.write(JSON.stringify(out) + '\n');
