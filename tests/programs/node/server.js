// The Node HTTP server of tests/runtime_node.rs: each request renders a
// page whose checksum costs about 7 ms of CPU in the app's own functions
// (handle -> renderPage -> mix), so that they, not node's HTTP code, take
// most of the main thread's time. Prints `listening PORT PID`, then
// forks client.js to load it for SECONDS, then prints its own figures
// and exits. With --no-client it waits for SECONDS under someone else's
// load instead.
'use strict';
const http = require('http');
const { fork } = require('child_process');

const secs = Number(process.argv[2] || 3);
const ROUNDS = 200;

function mix(h, r) {
  for (let i = 0; i < 20000; i++) {
    h = Math.imul(h ^ (i + r), 2654435761) >>> 0;
  }
  return h;
}

function renderPage(url) {
  let h = url.length;
  for (let r = 0; r < ROUNDS; r++) h = mix(h, r);
  return `<p>${url} ${h}</p>\n`;
}

let served = 0;
function handle(req, res) {
  const body = renderPage(req.url);
  served++;
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end(body);
}

const server = http.createServer(handle);
server.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  console.log(`listening ${port} ${process.pid}`);
  const done = () => {
    console.log(JSON.stringify({ pid: process.pid, served, cpu_us: process.cpuUsage().user }));
    server.close();
    process.exit(0);
  };
  if (process.argv.includes('--no-client')) {
    setTimeout(done, secs * 1000);
  } else {
    fork(`${__dirname}/client.js`, [String(port), String(secs)]).on('exit', done);
  }
});
