// The ground the change feed's once-a-turn read stands on (src/modules/auth/service.ts), checked on this runtime:
// a request sent after a change is never served in a turn of the event loop that read the change feed before the
// change. A worker thread plays the other process: it makes a change, then sends a request; meanwhile wrk keeps 64
// connections busy so that turns serve many requests. Prints the requests, the turns, and the violations (0).
//   bun bench/turns.ts [seconds]
const seconds = Number(process.argv[2] ?? 8);
const changes = new Int32Array(new SharedArrayBuffer(4));
let readThisTurn = false;
let changeSeenByTurn = 0;
let turns = 0;
let requests = 0;
let probes = 0;
let violations = 0;
const endTurn = () => {
  readThisTurn = false;
};

const server = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  fetch(request) {
    requests++;
    if (!readThisTurn) {
      readThisTurn = true;
      turns++;
      changeSeenByTurn = Atomics.load(changes, 0);
      setImmediate(endTurn);
    }
    const sentAfter = request.headers.get("x-sent-after-change");
    if (sentAfter !== null) {
      probes++;
      if (changeSeenByTurn < Number(sentAfter)) violations++;
    }
    return new Response("ok");
  },
});

const prober = new Worker(
  URL.createObjectURL(
    new Blob([
      `self.onmessage = async (event) => {
        const changes = new Int32Array(event.data.buffer);
        for (let change = 1; ; change++) {
          Atomics.store(changes, 0, change);
          await fetch(event.data.url, { headers: { "x-sent-after-change": String(change) } });
        }
      };`,
    ]),
  ),
);
prober.postMessage({ url: server.url.href, buffer: changes.buffer });
await Bun.spawn(["wrk", "-t2", "-c64", `-d${seconds}s`, server.url.href], { stdout: "ignore" }).exited;
prober.terminate();
server.stop(true);
console.log(JSON.stringify({ requests, turns, requests_per_turn: Number((requests / turns).toFixed(1)), probes, violations }));
export {};
