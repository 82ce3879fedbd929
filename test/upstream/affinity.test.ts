// routing = "affinity": each conversation's calls go to one server (its prefix cache), through every API.
import { afterAll, beforeAll, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import { affinityOf, affinityWeight } from "../../src/upstream/affinity";
import { startFakeUpstream, type FakeUpstream } from "../fake-upstream";
import { eventually, startSluice, type TestSluice } from "../helpers";

let first: FakeUpstream;
let second: FakeUpstream;
let sluice: TestSluice;
let openai: OpenAI;

beforeAll(async () => {
  first = startFakeUpstream();
  second = startFakeUpstream();
  const servers = [first.url, second.url];
  sluice = await startSluice({
    models: [
      { id: "m", backend: "openai", base_url: servers, upstream_model: "usage-10-5", routing: "affinity" },
      { id: "spread", backend: "openai", base_url: servers, upstream_model: "usage-10-5" },
      { id: "held", backend: "openai", base_url: servers, upstream_model: "usage-10-5-400", routing: "affinity" },
    ],
    plans: [{ id: "default", models: ["*"] }],
  });
  openai = sluice.client();
});
afterAll(async () => {
  await sluice.stop();
  await first.stop();
  await second.stop();
});

/** Which fake upstreams got a request whose messages hold `text`: 0, 1 or both. */
function serversThatSaw(text: string): number[] {
  const saw = (upstream: FakeUpstream) => upstream.bodies.some((body) => JSON.stringify(body.messages).includes(text));
  return [first, second].flatMap((upstream, index) => (saw(upstream) ? [index] : []));
}

test("a conversation's turns, whole and streamed, all go to one server; twenty conversations spread over both", async () => {
  const byConversation: number[][] = [];
  for (let conversation = 0; conversation < 20; conversation++) {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: "You are a coding agent." },
      { role: "user", content: `Task ${conversation}: fix the failing test.` },
    ];
    for (let turn = 0; turn < 4; turn++) {
      if (turn % 2 === 0) {
        const completion = await openai.chat.completions.create({ model: "m", messages });
        messages.push({ role: "assistant", content: completion.choices[0]?.message.content ?? "" });
      } else {
        const stream = await openai.chat.completions.create({ model: "m", messages, stream: true });
        let text = "";
        for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
        messages.push({ role: "assistant", content: text });
      }
      messages.push({ role: "user", content: `Turn ${turn} of task ${conversation}: go on.` });
    }
    byConversation.push(serversThatSaw(`Task ${conversation}:`));
  }
  for (const servers of byConversation) expect(servers.length).toBe(1);
  const onFirst = byConversation.filter((servers) => servers[0] === 0).length;
  // Each conversation's server is a coin's throw (the servers' ports change each run): both get some.
  expect(onFirst).toBeGreaterThanOrEqual(1);
  expect(onFirst).toBeLessThanOrEqual(19);
  expect(first.bodies.length + second.bodies.length).toBe(80);
  // Sequential turns never make a server busier than the other by more than affinity_slack: every call kept.
  const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
  let kept = 0;
  for (const [, value] of metrics.matchAll(/^sluice_upstream_affinity_calls_total\{model="m",server="[^"]+",result="kept"\} (\d+)$/gm)) kept += Number(value);
  expect(kept).toBe(80);
  expect(metrics).toMatch(/sluice_upstream_affinity_calls_total\{model="m",server="[^"]+",result="moved_away"\} 0/);
  await eventually(() => sluice.ledgerRows().length === 80);
});

test("prompt_cache_key names the conversation (Codex sends its conversation's id): every turn on one server, through Chat Completions and Responses", async () => {
  for (const [api, key] of [
    ["chat", "chat-session"],
    ["responses", "responses-session"],
  ] as const) {
    for (let turn = 0; turn < 6; turn++) {
      const text = `${key} turn ${turn}`;
      if (api === "chat") await openai.chat.completions.create({ model: "m", messages: [{ role: "user", content: text }], prompt_cache_key: key });
      else await openai.responses.create({ model: "m", input: text, prompt_cache_key: key });
    }
    const servers = new Set(Array.from({ length: 6 }, (_, turn) => serversThatSaw(`${key} turn ${turn}`)).flat());
    expect(servers.size).toBe(1);
  }
  // Not sent upstream: it is Sluice's to route by.
  expect([...first.bodies, ...second.bodies].some((body) => "prompt_cache_key" in body)).toBe(false);
  const error = await openai.chat.completions
    .create({ model: "m", messages: [{ role: "user", content: "x" }], prompt_cache_key: 7 as never })
    .catch((caught: unknown) => caught);
  expect(error).toMatchObject({ status: 400, param: "prompt_cache_key" });
});

test("the Messages API: a conversation's turns on one server", async () => {
  const anthropic = new Anthropic({ baseURL: sluice.url, apiKey: sluice.key, maxRetries: 0 });
  const messages: Anthropic.MessageParam[] = [{ role: "user", content: "Claude-style session: refactor the parser." }];
  for (let turn = 0; turn < 5; turn++) {
    const message = await anthropic.messages.create({ model: "m", max_tokens: 64, system: "You are Claude Code.", messages });
    messages.push({ role: "assistant", content: message.content }, { role: "user", content: `Claude-style turn ${turn}` });
  }
  expect(serversThatSaw("Claude-style session").length).toBe(1);
  expect(new Set(Array.from({ length: 5 }, (_, turn) => serversThatSaw(`Claude-style turn ${turn}`)).flat()).size).toBe(1);
});

test("the default (least_busy): one conversation's turns are spread over both servers", async () => {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Spread task: write the docs." }];
  for (let turn = 0; turn < 4; turn++) {
    await openai.chat.completions.create({ model: "spread", messages });
    messages.push({ role: "assistant", content: "fixed" }, { role: "user", content: `more ${turn}` });
  }
  expect(serversThatSaw("Spread task").length).toBe(2);
});

test("200 concurrent calls of 10 conversations: no server gets more than affinity_slack calls beyond the other; every count back to 0", async () => {
  const serversOf = () => sluice.server.models.servers().find((entry) => entry.model === "held")?.servers ?? [];
  // Ten conversations that all prefer the first server (the servers' ports, and so their weights, change each run).
  const weight = (name: string, url: string) => affinityWeight(affinityOf(undefined, [{ role: "user", text: name }]), Bun.hash.xxHash32(url));
  const names: string[] = [];
  for (let index = 0; names.length < 10; index++) {
    if (weight(`Burst ${index}`, first.url) > weight(`Burst ${index}`, second.url)) names.push(`Burst ${index}`);
  }
  const calls = Array.from({ length: 200 }, (_, index) =>
    openai.chat.completions.create({ model: "held", messages: [{ role: "user", content: names[index % 10] as string }] }),
  );
  // All held upstream at once: the first server would take them all; the slack (4) splits them.
  await eventually(() => serversOf().reduce((sum, server) => sum + server.inFlight, 0) === 200);
  const [one, other] = serversOf().map((server) => server.inFlight) as [number, number];
  expect(Math.abs(one - other)).toBeLessThanOrEqual(5);
  const answers = await Promise.all(calls);
  expect(answers.every((answer) => answer.model === "held")).toBe(true);
  await eventually(() => sluice.server.admission.inFlight() === 0);
  expect(serversOf().map((server) => server.inFlight)).toEqual([0, 0]);
  const moved = serversOf().reduce((sum, server) => sum + server.affinityMovedAway, 0);
  const kept = serversOf().reduce((sum, server) => sum + server.affinityCalls, 0);
  expect(kept + moved).toBe(200);
  expect(moved).toBeGreaterThanOrEqual(95);
  expect(serversOf().map((server) => server.affinityCalls + server.affinityMovedAway)).toEqual([200, 0]);
});
