export {};
// Fires N concurrent chat requests at a Sluice URL and prints the status counts as JSON. Run as its own process
// with BUN_CONFIG_MAX_HTTP_REQUESTS set, so that the client side is not what limits concurrency.
const [url, key, model, count] = process.argv.slice(2) as [string, string, string, string];
const statuses: Record<number, number> = {};
await Promise.all(
  Array.from({ length: Number(count) }, async () => {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
    });
    await response.arrayBuffer();
    statuses[response.status] = (statuses[response.status] ?? 0) + 1;
  }),
);
console.log(JSON.stringify(statuses));
