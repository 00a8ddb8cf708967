// For tests/dump.rs: the main thread computes in spinFor, called from
// work (each turn of the event loop); prints `ready` after a second.
function spinFor(ms) {
  const end = Date.now() + ms;
  let x = 0;
  while (Date.now() < end) x += Math.sqrt(x + 1);
  return x;
}
function work() {
  spinFor(50);
  setImmediate(work);
}
work();
setTimeout(() => console.log('ready'), 1000);
