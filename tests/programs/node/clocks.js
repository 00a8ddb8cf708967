// A Node program that times its own functions (process.hrtime, the
// monotonic clock): for SECONDS, the main thread's work() calls crunch
// (a hash loop on the CPU) and nap (4 ms asleep in Atomics.wait, a
// blocking wait). Run: node clocks.js SECONDS [GO]; prints one JSON line:
// each function's time and the whole run's, in ns. With GO, it first
// waits for that file to exist (a capture attached by pid says when).
'use strict';
const fs = require('fs');
const cell = new Int32Array(new SharedArrayBuffer(4));
const now = () => process.hrtime.bigint();

function crunch(n) {
  let h = n | 0;
  for (let i = 0; i < 3e6; i++) {
    h = Math.imul(h ^ i, 2654435761) >>> 0;
  }
  return h;
}

function nap(ms) {
  Atomics.wait(cell, 0, 0, ms);
}

function work(seconds) {
  const t = { crunch: 0n, nap: 0n };
  const start = now();
  let sink = 0;
  while (now() - start < BigInt(seconds * 1e9)) {
    const a = now();
    sink ^= crunch(sink);
    const b = now();
    nap(4);
    const c = now();
    t.crunch += b - a;
    t.nap += c - b;
  }
  t.total = now() - start;
  return { crunch: Number(t.crunch), nap: Number(t.nap), total: Number(t.total), sink: sink % 7 };
}

const seconds = Number(process.argv[2] || 2);
const go = process.argv[3];
if (go) {
  while (!fs.existsSync(go)) nap(10);
}
console.log(JSON.stringify({ main: work(seconds) }));
