// The Node workload of tests/runtime_node.rs: for SECONDS, the main thread
// runs a JS hash loop (hashLoop, called from a timer so that its stacks
// pass through libuv's event loop), then prints its own CPU time.
'use strict';
const secs = Number(process.argv[2] || 2);
const until = Date.now() + secs * 1000;
let sink = 0;

function hashLoop(n) {
  let h = n | 0;
  for (let i = 0; i < 2e6; i++) {
    h = Math.imul(h ^ i, 2654435761) >>> 0;
  }
  return h;
}

function tick() {
  const t = Date.now() + 50;
  while (Date.now() < t) sink ^= hashLoop(sink);
  if (Date.now() < until) setTimeout(tick, 1);
  else console.log(JSON.stringify({ cpu_us: process.cpuUsage().user, sink }));
}
setTimeout(tick, 1);
