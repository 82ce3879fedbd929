// A burst of connections while the event loop is busy: Bun's own queue of 512 drops the rest (each client then waits
// a second for the kernel's retransmit); Sluice's raised queue holds them all.
import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { listenBacklog, listenOverflows, raiseListenBacklog } from "../../src/http/listen-backlog";
import { fakeModel, useFakeUpstream, withSluice } from "../helpers";

const upstream = useFakeUpstream();

/** Opens `connections` to `port` while this thread is busy for 300 ms, so that nothing is accepted meanwhile. */
async function overflowsWhileBusy(port: number, connections: number): Promise<number> {
  const before = listenOverflows();
  const pending = Array.from({ length: connections }, () => Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } }));
  const until = performance.now() + 300;
  while (performance.now() < until) {
    // busy: the kernel completes the handshakes and queues them
  }
  const overflows = listenOverflows() - before;
  for (const outcome of await Promise.allSettled(pending)) if (outcome.status === "fulfilled") outcome.value.end();
  return overflows;
}

const expectedQueue = Math.min(listenBacklog, Number(readFileSync("/proc/sys/net/core/somaxconn", "utf8")));

test("1,500 connections to a busy Bun server: its own queue drops hundreds, the raised one none", async () => {
  expect(expectedQueue).toBeGreaterThan(1500);
  const plain = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("ok") });
  try {
    expect(await overflowsWhileBusy(plain.port as number, 1500)).toBeGreaterThan(100);
  } finally {
    await plain.stop(true);
  }
  const raised = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("ok") });
  try {
    expect(await raiseListenBacklog(raised.port as number)).toBe(expectedQueue);
    expect(await overflowsWhileBusy(raised.port as number, 1500)).toBe(0);
    expect(await (await fetch(`http://127.0.0.1:${raised.port}/`)).text()).toBe("ok");
  } finally {
    await raised.stop(true);
  }
});

test("Sluice listens with the raised queue: a burst of 1,500 connections while it is busy loses none, and it still answers", async () => {
  await withSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")] }, async (sluice) => {
    expect(sluice.server.acceptQueue).toBe(expectedQueue);
    expect(await overflowsWhileBusy(sluice.server.port, 1500)).toBe(0);
    const answer = await sluice.client().chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
    expect(answer.choices[0]?.message.content).toBeTruthy();
  });
});
