export {};
// The practical ceiling for a proxy on this runtime: Bun.serve + fetch, no checks at all.
// Usage: BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun bench/bare-proxy.ts PORT UPSTREAM_BASE_URL
const port = Number(process.argv[2] ?? 9200);
const upstream = process.argv[3] ?? "http://127.0.0.1:9100";

Bun.serve({
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
console.log(`bare proxy on ${port}`);
