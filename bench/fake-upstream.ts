// A fake OpenAI-compatible upstream tuned for speed: fixed answers with reasoning and usage, whole or streamed.
// Usage: bun bench/fake-upstream.ts PORT [STREAM_TOKENS=200] [PACE_MS=10]
import { raiseListenBacklog } from "../src/http/listen-backlog";
const port = Number(process.argv[2] ?? 9100);
const streamTokens = Number(process.argv[3] ?? 200);
const paceMs = Number(process.argv[4] ?? 10);

const whole = JSON.stringify({
  id: "chatcmpl-bench",
  object: "chat.completion",
  created: 1763800000,
  model: "bench-upstream",
  choices: [
    {
      index: 0,
      message: { role: "assistant", content: "The answer is 4.", reasoning_content: "Two plus two is four." },
      logprobs: null,
      finish_reason: "stop",
    },
  ],
  usage: { prompt_tokens: 12, completion_tokens: 11, total_tokens: 23, completion_tokens_details: { reasoning_tokens: 6 } },
});
const wholeHeaders = { "content-type": "application/json" };

const encoder = new TextEncoder();
const frame = (delta: Record<string, unknown>, finish: string | null = null, usage?: unknown) =>
  encoder.encode(
    `data: ${JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion.chunk", created: 1763800000, model: "bench-upstream", choices: finish === "usage" ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...(usage ? { usage } : {}) })}\n\n`,
  );
const roleFrame = frame({ role: "assistant", content: "" });
const reasoningFrame = frame({ reasoning_content: "think " });
const contentFrame = frame({ content: "tok " });
const finishFrame = frame({}, "stop");
const usageFrame = frame({}, "usage", {
  prompt_tokens: 12,
  completion_tokens: streamTokens,
  total_tokens: 12 + streamTokens,
  completion_tokens_details: { reasoning_tokens: 20 },
});
const done = encoder.encode("data: [DONE]\n\n");

function stream(): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream({
    type: "direct",
    async pull(controller) {
      controller.write(roleFrame);
      await controller.flush();
      while (sent < streamTokens) {
        if (paceMs > 0) await Bun.sleep(paceMs);
        controller.write(sent < 20 ? reasoningFrame : contentFrame);
        await controller.flush();
        sent++;
      }
      controller.write(finishFrame);
      controller.write(usageFrame);
      controller.write(done);
      await controller.flush();
      controller.close();
    },
  });
}

const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(request) {
    const body = (await request.json()) as { stream?: boolean };
    if (body.stream) return new Response(stream(), { headers: { "content-type": "text/event-stream" } });
    return new Response(whole, { headers: wholeHeaders });
  },
});
// As a model server would (vLLM's uvicorn listens with 2,048): 2,000 streams opened at once through a proxy that
// was just started open as many connections here, which Bun's own queue of 512 would drop in part.
await raiseListenBacklog(server.port as number);
console.log(`fake upstream on ${port}`);
