// The OpenAI Agents SDK with its Responses model, pointed at Sluice: a tool-using agent completes its turn.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Agent, OpenAIResponsesModel, run, setTracingDisabled, tool } from "@openai/agents";
import OpenAI from "openai";
import { z } from "zod";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  // Traces would be sent to OpenAI: this machine, like a gateway's users, must not depend on that.
  setTracingDisabled(true);
  upstream = startFakeUpstream();
  sluice = await startSluice({ models: [fakeModel(upstream.url, "qwen-agent", "agent-tools")], plans: [{ id: "default", models: ["*"] }] });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

function weatherAgent(calls: string[]) {
  const getWeather = tool({
    name: "get_weather",
    description: "The weather of a city",
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push(city);
      return `18 C and sunny in ${city}`;
    },
  });
  const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: sluice.key, maxRetries: 0 });
  return new Agent({ name: "Weather", instructions: "Answer with the weather.", model: new OpenAIResponsesModel(client, "qwen-agent"), tools: [getWeather] });
}

test("run(): the agent calls its tool through a function_call item, sends the output back, and finishes with the model's text", async () => {
  const calls: string[] = [];
  const result = await run(weatherAgent(calls), "What is the weather in Paris?");
  expect(calls).toEqual(["Paris"]);
  expect(result.finalOutput).toBe("The weather: 18 C and sunny in Paris");
  const second = upstream.bodies.at(-1) as { messages: { role: string; content: unknown; tool_calls?: unknown }[] };
  expect(second.messages.map((message) => message.role)).toEqual(["system", "user", "assistant", "tool"]);
  expect(sluice.ledgerRows().length).toBe(2);
});

test("run() streamed: the same turn over the Responses stream", async () => {
  const calls: string[] = [];
  const result = await run(weatherAgent(calls), "What is the weather in Paris?", { stream: true });
  let text = "";
  for await (const chunk of result.toTextStream()) text += chunk;
  await result.completed;
  expect(calls).toEqual(["Paris"]);
  expect(text).toBe("The weather: 18 C and sunny in Paris");
  expect(result.finalOutput).toBe("The weather: 18 C and sunny in Paris");
});
