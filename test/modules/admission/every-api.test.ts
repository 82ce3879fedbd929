// The Responses and Messages APIs run on the chat path: one admission, one queue, one relay, one ledger. Mixed
// traffic over all three must keep the same promises as chat alone.
import { expect, test } from "bun:test";
import { codeOf, eventually, fakeModel, useFakeUpstream, withSluice } from "../../helpers";

const upstream = useFakeUpstream({ resetBeforeEach: true });

const bodies = {
  "/v1/chat/completions": (model: string, stream: boolean) => ({ model, stream, messages: [{ role: "user", content: "hi" }] }),
  "/v1/responses": (model: string, stream: boolean) => ({ model, stream, input: "hi" }),
  "/v1/messages": (model: string, stream: boolean) => ({ model, stream, max_tokens: 64, messages: [{ role: "user", content: "hi" }] }),
};
const paths = Object.keys(bodies) as (keyof typeof bodies)[];

test("600 concurrent requests over the three APIs, max_concurrency = 3: never more than 3 upstream, only 200s and 429s, one ledger row per answer, nothing leaks", async () => {
  await withSluice(
    { models: [fakeModel(upstream.url, "m", "usage-10-5-30")], plans: [{ id: "capped", models: ["*"], max_concurrency: 3 }] },
    async (sluice) => {
      const responses = await Promise.all(
        Array.from({ length: 600 }, (_, index) => {
          const path = paths[index % 3] as keyof typeof bodies;
          return sluice.post(path, bodies[path]("m", index % 2 === 0), { "x-api-key": sluice.key });
        }),
      );
      let answered = 0;
      for (const response of responses) {
        if (response.status === 200) {
          answered++;
          await response.text();
        } else {
          expect(response.status).toBe(429);
          const body = (await response.json()) as { error: { code?: string; type: string } };
          expect(body.error.code ?? body.error.type).toMatch(/^(rate_limit_exceeded|rate_limit_error)$/);
        }
      }
      expect(answered).toBeGreaterThanOrEqual(3);
      expect(upstream.maxInFlight).toBeLessThanOrEqual(3);
      await eventually(() => sluice.server.admission.inFlight() === 0);
      expect(sluice.server.admission.reservedTokens()).toBe(0);
      await eventually(() => sluice.ledgerRows().length === answered);
      expect(new Set(sluice.ledgerRows().map((row) => row.outcome))).toEqual(new Set(["completed"]));
    },
  );
}, 60_000);

test("a client that leaves a Responses or Messages stream: the upstream is stopped, the row says client_disconnected, the slot is freed", async () => {
  await withSluice({ models: [fakeModel(upstream.url, "endless")], plans: [{ id: "capped", models: ["*"], max_concurrency: 2 }] }, async (sluice) => {
    for (const path of ["/v1/responses", "/v1/messages"] as const) {
      const controller = new AbortController();
      const response = await sluice.post(path, bodies[path]("endless", true), { "x-api-key": sluice.key }, controller.signal);
      expect(response.status).toBe(200);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      let text = "";
      while (!text.includes("word2")) text += new TextDecoder().decode((await reader.read()).value);
      controller.abort();
      await eventually(() => sluice.server.admission.inFlight() === 0);
    }
    await eventually(() => sluice.ledgerRows().length === 2);
    expect(sluice.ledgerRows().map((row) => row.outcome)).toEqual(["client_disconnected", "client_disconnected"]);
    expect(sluice.ledgerRows().every((row) => row.completion_tokens > 0)).toBe(true);
    await eventually(() => upstream.inFlight === 0);
  });
});

test("a 5-hour quota used up through Messages is used up for chat and Responses too", async () => {
  await withSluice({ models: [fakeModel(upstream.url, "m", "usage-100-100")], plans: [{ id: "small", models: ["*"], tokens_per_5h: 600 }] }, async (sluice) => {
    const statuses: number[] = [];
    for (let index = 0; index < 6; index++) {
      const response = await sluice.post("/v1/messages", bodies["/v1/messages"]("m", false), { "x-api-key": sluice.key });
      statuses.push(response.status);
      await response.text();
    }
    expect(statuses).toContain(429);
    for (const path of ["/v1/chat/completions", "/v1/responses"] as const) {
      const response = await sluice.post(path, bodies[path]("m", false));
      expect(response.status).toBe(429);
      expect(response.headers.get("x-should-retry")).toBe("false");
      expect(await codeOf(response)).toBe("rate_limit_exceeded");
    }
  });
});
