// Loads server.js: CONNS keep-alive connections, each sending its next
// request as soon as the last one is answered, for SECONDS.
'use strict';
const http = require('http');
const port = Number(process.argv[2]);
const until = Date.now() + Number(process.argv[3] || 3) * 1000;
const CONNS = 4;
const agent = new http.Agent({ keepAlive: true, maxSockets: CONNS });
let n = 0;
function loop(k) {
  if (Date.now() >= until) return;
  http.get({ host: '127.0.0.1', port, path: `/page/${k}/${n++}`, agent }, (res) => {
    res.resume();
    res.on('end', () => loop(k));
  }).on('error', () => setTimeout(() => loop(k), 10));
}
for (let k = 0; k < CONNS; k++) loop(k);
const t = setInterval(() => { if (Date.now() >= until) { clearInterval(t); agent.destroy(); process.exit(0); } }, 50);
// The server gone (killed by the test after an attached capture): stop.
process.on('disconnect', () => process.exit(0));
