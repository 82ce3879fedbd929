// The practical ceiling for a proxy on this runtime: Bun.serve + fetch, no checks at all (and the accept queue every
// server of bench/ listens with, as Sluice does: src/http/listen-backlog.ts).
// Usage: BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun bench/bare-proxy.ts PORT UPSTREAM_BASE_URL
import { raiseListenBacklog } from "../src/http/listen-backlog";
const port = Number(process.argv[2] ?? 9200);
const upstream = process.argv[3] ?? "http://127.0.0.1:9100";

const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(request) {
    const url = new URL(request.url);
    const response = await fetch(upstream + url.pathname, {
      method: request.method,
      headers: { "content-type": "application/json" },
      body: await request.arrayBuffer(),
    });
    return new Response(response.body, { status: response.status, headers: { "content-type": response.headers.get("content-type") ?? "application/json" } });
  },
});
await raiseListenBacklog(server.port as number);
console.log(`bare proxy on ${port}`);
