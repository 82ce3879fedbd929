// Besides the official openai package, other OpenAI-compatible clients must work unchanged.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, streamText } from "ai";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, startSluice, type TestSluice } from "../../helpers";

let upstream: FakeUpstream;
let sluice: TestSluice;

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({ models: [fakeModel(upstream.url, "deepseek-r1", "deepseek")], plans: [{ id: "default", models: ["*"] }] });
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

test("Vercel AI SDK: generateText and streamText, reasoning included", async () => {
  const provider = createOpenAICompatible({ name: "sluice", baseURL: sluice.baseURL, apiKey: sluice.key, includeUsage: true });
  const whole = await generateText({ model: provider("deepseek-r1"), prompt: "What is 2+2?", maxRetries: 0 });
  expect(whole.text).toBe("4");
  expect(whole.reasoningText).toBe("Two plus two equals four.");
  expect(whole.usage.inputTokens).toBe(13);
  const streamed = streamText({ model: provider("deepseek-r1"), prompt: "What is 2+2?", maxRetries: 0 });
  let text = "";
  for await (const part of streamed.textStream) text += part;
  expect(text).toBe("4");
  expect(await streamed.reasoningText).toBe("Two plus two equals four.");
  expect((await streamed.usage).outputTokens).toBe(9);
});

test("LangChain ChatOpenAI: invoke and stream", async () => {
  const model = new ChatOpenAI({ model: "deepseek-r1", apiKey: sluice.key, configuration: { baseURL: sluice.baseURL }, maxRetries: 0 });
  const answer = await model.invoke("What is 2+2?");
  expect(answer.content).toBe("4");
  let streamed = "";
  for await (const chunk of await model.stream("What is 2+2?")) streamed += chunk.content;
  expect(streamed).toBe("4");
});
