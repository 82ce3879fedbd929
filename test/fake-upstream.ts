// A fake OpenAI-compatible model server for tests. Its behaviour is chosen by the `model` it is asked for, so
// one server plays every upstream a test needs. It counts what it sees: requests, in-flight, aborts.
import { readFileSync } from "node:fs";
import { join } from "node:path";

const fixtures = join(import.meta.dir, "fixtures");
const fixture = (name: string) => readFileSync(join(fixtures, name), "utf8");

export interface FakeUpstream {
  url: string;
  /** Every request body received, in order. */
  bodies: Record<string, unknown>[];
  /** Authorization headers received, in order. */
  authorizations: (string | null)[];
  /** Every request's path with its query, and its headers, in order. */
  requests: { path: string; headers: Record<string, string> }[];
  inFlight: number;
  maxInFlight: number;
  aborted: number;
  reset(): void;
  stop(): Promise<void>;
}

const encoder = new TextEncoder();

function chunk(model: string, delta: Record<string, unknown>, finishReason: string | null = null, usage?: unknown) {
  const body: Record<string, unknown> = {
    id: "chatcmpl-fake",
    object: "chat.completion.chunk",
    created: 1763800000,
    model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
  };
  if (usage) body.usage = usage;
  return `data: ${JSON.stringify(body)}\n\n`;
}

/** A whole chat answer as OpenAI-compatible servers send it (also for tests' own stand-in servers). */
export function whole(model: string, content: string, reasoning: string | null, usage: unknown) {
  return {
    id: "chatcmpl-fake",
    object: "chat.completion",
    created: 1763800000,
    model,
    choices: [{ index: 0, message: { role: "assistant", content, reasoning_content: reasoning }, logprobs: null, finish_reason: "stop" }],
    ...(usage ? { usage } : {}),
  };
}

/** Words `word0 word1 …`: `count` content pieces streamed `delayMs` apart. */
function slowStream(model: string, count: number, delayMs: number, signal: AbortSignal, withUsage: boolean, onAbort: () => void): ReadableStream<Uint8Array> {
  let sent = 0;
  return new ReadableStream({
    async pull(controller) {
      if (sent === 0) controller.enqueue(encoder.encode(chunk(model, { role: "assistant", content: "" })));
      if (sent < count) {
        await Bun.sleep(delayMs);
        if (signal.aborted) return;
        controller.enqueue(encoder.encode(chunk(model, { content: `word${sent} ` })));
        sent++;
        return;
      }
      controller.enqueue(
        encoder.encode(chunk(model, {}, "stop", withUsage ? { prompt_tokens: 10, completion_tokens: count, total_tokens: 10 + count } : undefined)),
      );
      controller.enqueue(encoder.encode("data: [DONE]\n\n"));
      controller.close();
    },
    cancel() {
      onAbort();
    },
  });
}

/** Streams the pieces as content chunks 20 ms apart, then keeps the stream open until it is cancelled. */
function slowPieces(model: string, pieces: string[], signal: AbortSignal, onAbort: () => void): ReadableStream<Uint8Array> {
  let index = 0;
  return new ReadableStream({
    async pull(controller) {
      await Bun.sleep(20);
      if (signal.aborted) return;
      if (index < pieces.length) controller.enqueue(encoder.encode(chunk(model, { content: pieces[index++] })));
      else await Bun.sleep(60_000);
    },
    cancel() {
      onAbort();
    },
  });
}

function sse(body: string | ReadableStream<Uint8Array>): Response {
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

/**
 * Models: `vllm`, `deepseek`, `mistral`, `vllm-tools`, `tgi-tools`, `ollama-tools` (streams only) (fixtures), `agent-tools` (calls get_weather, then answers with its result), `namespaced-call` (calls weather__get_weather), `stop-sequence` (ended by the stop string `###`), `echo` (answers with the body it got), `slow-N-D` (N words, D ms apart),
 * `usage-P-C[-D]` (reports P prompt and C completion tokens, after D ms), `cached-P-C-K` (P prompt tokens of which K were
 * read from the prompt cache, C completion tokens),
 * `completion-tokens-only` (a 400 for max_tokens, as OpenAI's reasoning models answer), `fail-500`, `overloaded-429`, `hang`, `context-400`, `bad-400`, `no-usage`, `html-200`, `error-200`, `refusal` and `refusal-redline` (OpenAI's refusal field), `custom-call` (whole answers only), `midstream-error`,
 * `malformed-stream`, `no-done`.
 */
export function startFakeUpstream(options: { tls?: { cert: string; key: string } } = {}): FakeUpstream {
  const state = {
    bodies: [] as Record<string, unknown>[],
    authorizations: [] as (string | null)[],
    requests: [] as { path: string; headers: Record<string, string> }[],
    inFlight: 0,
    maxInFlight: 0,
    aborted: 0,
  };
  const server = Bun.serve({
    port: 0,
    idleTimeout: 0,
    tls: options.tls,
    async fetch(request) {
      const url = new URL(request.url);
      state.requests.push({ path: url.pathname + url.search, headers: request.headers.toJSON() });
      // GET …/models, as `sluice doctor` asks each server.
      if (request.method === "GET") return Response.json({ object: "list", data: [] });
      const body = (await request.json()) as Record<string, unknown>;
      state.bodies.push(body);
      state.authorizations.push(request.headers.get("authorization"));
      state.inFlight++;
      state.maxInFlight = Math.max(state.maxInFlight, state.inFlight);
      let released = false;
      const release = () => {
        if (!released) {
          released = true;
          state.inFlight--;
        }
      };
      const onAbort = () => {
        state.aborted++;
        release();
      };
      request.signal.addEventListener("abort", onAbort, { once: true });
      const model = String(body.model);
      const stream = body.stream === true;
      try {
        const response = url.pathname.endsWith("/embeddings")
          ? await embeddings(model, body, request.signal)
          : url.pathname.endsWith("/chat/completions")
            ? await answer(model, stream, body, request.signal, onAbort)
            : await textCompletion(model, stream, body, request.signal);
        if (!(response.body instanceof ReadableStream) || !stream) release();
        else {
          // Streams release when fully sent or cancelled.
          const [forClient, watcher] = response.body.tee();
          void (async () => {
            for await (const _ of watcher) {
              // drain
            }
            release();
          })().catch(release);
          return new Response(forClient, { status: response.status, headers: response.headers });
        }
        return response;
      } catch (error) {
        release();
        throw error;
      }
    },
  });

  /**
   * POST /embeddings: for input i, the vector [i, its length (characters, or token ids), 0.25, -0.5], as numbers or (with
   * `encoding_format: "base64"`) as OpenAI sends them, little-endian float32 in base64. Models: `embed-N` reports N
   * prompt tokens, `embed-no-usage` none, `embed-one-short` one vector fewer than the inputs; `fail-500`,
   * `overloaded-429` and `hang` as for chat.
   */
  async function embeddings(model: string, body: Record<string, unknown>, signal: AbortSignal): Promise<Response> {
    if (model === "fail-500") return Response.json({ error: { message: "CUDA out of memory" } }, { status: 500 });
    if (model === "overloaded-429") return Response.json({ error: { message: "too many requests" } }, { status: 429 });
    if (model === "hang") {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      return new Response("gone", { status: 499 });
    }
    const input = body.input;
    const inputs = typeof input === "string" || (Array.isArray(input) && typeof input[0] === "number") ? [input] : (input as unknown[]);
    const data = inputs.map((item, index) => {
      const vector = [index, typeof item === "string" || Array.isArray(item) ? item.length : 0, 0.25, -0.5];
      const embedding = body.encoding_format === "base64" ? Buffer.from(new Float32Array(vector).buffer).toString("base64") : vector;
      return { object: "embedding", index, embedding };
    });
    if (model === "embed-one-short") data.pop();
    const reported = /^embed-(\d+)$/.exec(model);
    const usage = reported ? { prompt_tokens: Number(reported[1]), total_tokens: Number(reported[1]) } : undefined;
    // Answered in reverse order: the index, not the position, says which input a vector is for.
    return Response.json({ object: "list", data: data.reverse(), model, ...(usage ? { usage } : {}) });
  }

  /**
   * POST /completions (the legacy text completions, which IDEs' autocomplete speaks): the text is `P:` and the prompt,
   * and `S:` and the suffix when one was sent, so that a test sees what reached the upstream. Models: `usage-P-C`
   * reports P prompt and C completion tokens (streams: the text in two chunks, then a finish and the usage, as vLLM
   * sends them), `fail-500` and `hang` as for chat.
   */
  async function textCompletion(model: string, stream: boolean, body: Record<string, unknown>, signal: AbortSignal): Promise<Response> {
    if (model === "fail-500") return Response.json({ error: { message: "CUDA out of memory" } }, { status: 500 });
    if (model === "hang") {
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      return new Response("gone", { status: 499 });
    }
    const fixed = /^usage-(\d+)-(\d+)$/.exec(model);
    const usage = fixed
      ? { prompt_tokens: Number(fixed[1]), completion_tokens: Number(fixed[2]), total_tokens: Number(fixed[1]) + Number(fixed[2]) }
      : { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
    const text = `P:${String(body.prompt)}${body.suffix === undefined ? "" : ` S:${String(body.suffix)}`}`;
    const head = { id: "cmpl-fake", object: "text_completion", created: 1763800000, model };
    if (!stream) return Response.json({ ...head, choices: [{ index: 0, text, logprobs: null, finish_reason: "length" }], usage });
    const frame = (choices: unknown[], withUsage?: unknown) => `data: ${JSON.stringify({ ...head, choices, ...(withUsage ? { usage: withUsage } : {}) })}\n\n`;
    const half = Math.ceil(text.length / 2);
    return sse(
      frame([{ index: 0, text: text.slice(0, half), logprobs: null, finish_reason: null }]) +
        frame([{ index: 0, text: text.slice(half), logprobs: null, finish_reason: null }]) +
        frame([{ index: 0, text: "", logprobs: null, finish_reason: "length" }]) +
        frame([], usage) +
        "data: [DONE]\n\n",
    );
  }

  async function answer(model: string, stream: boolean, body: Record<string, unknown>, signal: AbortSignal, onAbort: () => void): Promise<Response> {
    const usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 };
    if (model === "vllm") return stream ? sse(fixture("vllm-stream.sse")) : Response.json(JSON.parse(fixture("vllm-whole.json")));
    if (model === "vllm-tools") return stream ? sse(fixture("vllm-tools-stream.sse")) : Response.json(JSON.parse(fixture("vllm-tools-whole.json")));
    if (model === "mistral") return stream ? sse(fixture("mistral-stream.sse")) : Response.json(JSON.parse(fixture("mistral-whole.json")));
    if (model === "ollama-tools" && stream) return sse(fixture("ollama-tools-stream.sse"));
    if (model === "tgi-tools") return stream ? sse(fixture("tgi-tools-stream.sse")) : Response.json(JSON.parse(fixture("tgi-tools-whole.json")));
    if (model === "stop-sequence") {
      // vLLM names the stop string that ended the answer in `stop_reason`.
      const stopped = { index: 0, message: { role: "assistant", content: "one two" }, logprobs: null, finish_reason: "stop", stop_reason: "###" };
      if (!stream) return Response.json({ ...whole(model, "one two", null, usage), choices: [stopped] });
      const finish = `data: ${JSON.stringify({ id: "chatcmpl-fake", object: "chat.completion.chunk", created: 1763800000, model, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop", stop_reason: "###" }], usage })}\n\n`;
      return sse(`${chunk(model, { role: "assistant", content: "one two" }) + finish}data: [DONE]\n\n`);
    }
    if (model === "namespaced-call") {
      const call = { id: "call_ns_1", type: "function", function: { name: "weather__get_weather", arguments: '{"city":"Oslo"}' } };
      if (!stream)
        return Response.json({
          ...whole(model, "", null, usage),
          choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [call] }, logprobs: null, finish_reason: "tool_calls" }],
        });
      return sse(`${chunk(model, { role: "assistant", tool_calls: [{ index: 0, ...call }] }) + chunk(model, {}, "tool_calls", usage)}data: [DONE]\n\n`);
    }
    if (model === "agent-tools") {
      // A two-step agent turn: call get_weather first; once its result is in the conversation, answer with it.
      const messages = body.messages as { role: string; content: unknown }[];
      const last = messages.at(-1);
      if (last?.role === "tool") {
        const text = `The weather: ${String(last.content)}`;
        return stream
          ? sse(`${chunk(model, { role: "assistant", content: text }) + chunk(model, {}, "stop", usage)}data: [DONE]\n\n`)
          : Response.json(whole(model, text, null, usage));
      }
      const call = { id: "call_weather_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } };
      if (!stream) {
        return Response.json({
          ...whole(model, "", null, usage),
          choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [call] }, logprobs: null, finish_reason: "tool_calls" }],
        });
      }
      return sse(`${chunk(model, { role: "assistant", tool_calls: [{ index: 0, ...call }] }) + chunk(model, {}, "tool_calls", usage)}data: [DONE]\n\n`);
    }
    if (model === "deepseek") return stream ? sse(fixture("deepseek-stream.sse")) : Response.json(JSON.parse(fixture("deepseek-whole.json")));
    if (model === "completion-tokens-only") {
      // OpenAI's reasoning models (o-series, GPT-5): the output limit only as max_completion_tokens.
      if (body.max_tokens !== undefined) {
        const error = {
          message: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
          type: "invalid_request_error",
          param: "max_tokens",
          code: "unsupported_parameter",
        };
        return Response.json({ error }, { status: 400 });
      }
      const text = `limit ${String(body.max_completion_tokens)}`;
      return stream
        ? sse(`${chunk(model, { role: "assistant", content: text }) + chunk(model, {}, "stop", usage)}data: [DONE]\n\n`)
        : Response.json(whole(model, text, null, usage));
    }
    if (model === "echo") {
      const text = JSON.stringify(body);
      return stream
        ? sse(`${chunk(model, { role: "assistant", content: text }) + chunk(model, {}, "stop", usage)}data: [DONE]\n\n`)
        : Response.json(whole(model, text, null, usage));
    }
    const cached = /^cached-(\d+)-(\d+)-(\d+)$/.exec(model);
    if (cached) {
      // As vLLM reports a prefix-cache hit (with --enable-prompt-tokens-details), and OpenAI does.
      const [promptTokens, completionTokens, cachedTokens] = [Number(cached[1]), Number(cached[2]), Number(cached[3])];
      const reported = {
        prompt_tokens: promptTokens,
        completion_tokens: completionTokens,
        total_tokens: promptTokens + completionTokens,
        prompt_tokens_details: { cached_tokens: cachedTokens },
      };
      return stream
        ? sse(`${chunk(model, { role: "assistant", content: "cached" }) + chunk(model, {}, "stop", reported)}data: [DONE]\n\n`)
        : Response.json(whole(model, "cached", null, reported));
    }
    const fixedUsage = /^usage-(\d+)-(\d+)(?:-(\d+))?$/.exec(model);
    if (fixedUsage) {
      const reported = {
        prompt_tokens: Number(fixedUsage[1]),
        completion_tokens: Number(fixedUsage[2]),
        total_tokens: Number(fixedUsage[1]) + Number(fixedUsage[2]),
      };
      if (fixedUsage[3]) await Bun.sleep(Number(fixedUsage[3]));
      return stream
        ? sse(`${chunk(model, { role: "assistant", content: "fixed" }) + chunk(model, {}, "stop", reported)}data: [DONE]\n\n`)
        : Response.json(whole(model, "fixed", null, reported));
    }
    const slow = /^slow-(\d+)-(\d+)$/.exec(model);
    if (slow) {
      const count = Number(slow[1]);
      const delay = Number(slow[2]);
      if (stream) return sse(slowStream(model, count, delay, signal, true, onAbort));
      await Bun.sleep(count * delay);
      return Response.json(whole(model, "slow answer", null, { prompt_tokens: 10, completion_tokens: count, total_tokens: 10 + count }));
    }
    switch (model) {
      case "fail-500":
        return Response.json({ error: { message: "CUDA out of memory" } }, { status: 500 });
      case "overloaded-429":
        return Response.json({ error: { message: "too many requests" } }, { status: 429, headers: { "retry-after": "7" } });
      case "hang":
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
        return new Response("gone", { status: 499 });
      case "context-400":
        return Response.json(
          {
            object: "error",
            message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
            type: "BadRequestError",
            param: null,
            code: 400,
          },
          { status: 400 },
        );
      case "bad-400":
        return Response.json({ error: { message: "response_format json_schema is invalid" } }, { status: 400 });
      case "no-usage":
        return stream
          ? sse(`${chunk(model, { role: "assistant", reasoning_content: "thinking hard" }) + chunk(model, { content: "hello there" }, "stop")}data: [DONE]\n\n`)
          : Response.json(whole(model, "hello there", "thinking hard", null));
      case "split-phrase": {
        // "nerve agent" and "synthesis" arrive split across three chunks.
        const pieces = ["Reasoning done. The nerve ag", "ent is made by synth", "esis of precursors", " and more text"];
        if (!stream) return Response.json(whole(model, pieces.join(""), null, usage));
        return sse(slowPieces(model, pieces, signal, onAbort));
      }
      case "split-reasoning": {
        if (!stream) return Response.json(whole(model, "fine", "Thinking about nerve agent synthesis routes", usage));
        return sse(
          `${chunk(model, { role: "assistant", reasoning_content: "Thinking about nerve ag" }) + chunk(model, { reasoning_content: "ent synthesis routes" }) + chunk(model, { content: "x" }, "stop", usage)}data: [DONE]\n\n`,
        );
      }
      case "reset-midstream": {
        // Two chunks, then the connection breaks.
        let sent = 0;
        return sse(
          new ReadableStream({
            async pull(controller) {
              await Bun.sleep(10);
              if (sent++ < 2) controller.enqueue(encoder.encode(chunk(model, { content: `part${sent} ` })));
              else controller.error(new Error("connection reset"));
            },
          }),
        );
      }
      case "goes-silent":
        return sse(slowPieces(model, ["hello ", "there "], signal, onAbort));
      case "endless":
        return sse(slowStream(model, 1_000_000, 10, signal, false, onAbort));
      case "refusal":
      case "refusal-redline": {
        // OpenAI's models refuse apart from the content (under Structured Outputs): `refusal`, content null.
        const refusal = model === "refusal" ? "I'm sorry, I can't help with that." : "Here is how to synthesize sarin, step by step.";
        const message = { role: "assistant", content: null, refusal };
        if (!stream) return Response.json({ ...whole(model, "", null, usage), choices: [{ index: 0, message, logprobs: null, finish_reason: "stop" }] });
        const pieces = [refusal.slice(0, 20), refusal.slice(20)].map((piece) => chunk(model, { refusal: piece }));
        return sse(`${chunk(model, { role: "assistant", content: null, refusal: "" }) + pieces.join("") + chunk(model, {}, "stop", usage)}data: [DONE]\n\n`);
      }
      case "custom-call": {
        // A call of one of OpenAI's custom tools: free text under `custom.input`, no `function`.
        const call = { id: "call_custom_1", type: "custom", custom: { name: "apply_patch", input: "*** Begin Patch\n*** End Patch" } };
        const message = { role: "assistant", content: null, tool_calls: [call] };
        return Response.json({ ...whole(model, "", null, usage), choices: [{ index: 0, message, logprobs: null, finish_reason: "tool_calls" }] });
      }
      case "error-200":
        // A server that reports its failure in a 200's body, as a stream reports one mid-way.
        return Response.json({ error: { message: "CUDA out of memory", type: "server_error" } });
      case "html-200":
        return new Response("<html><body>Bad gateway</body></html>", { headers: { "content-type": "text/html" } });
      case "midstream-error":
        return sse(
          `${chunk(model, { role: "assistant", content: "partial " }) + chunk(model, { content: "answer" })}data: ${JSON.stringify({ error: { message: "engine died" } })}\n\n`,
        );
      case "malformed-stream":
        return sse(`${chunk(model, { content: "ok " })}data: {not json\n\n`);
      case "no-done":
        return sse(chunk(model, { content: "cut " }) + chunk(model, { content: "short" }));
      default:
        return Response.json({ error: { message: `unknown fake model ${model}` } }, { status: 404 });
    }
  }

  return {
    url: `${options.tls ? "https" : "http"}://127.0.0.1:${server.port}/v1`,
    get bodies() {
      return state.bodies;
    },
    get authorizations() {
      return state.authorizations;
    },
    get requests() {
      return state.requests;
    },
    get inFlight() {
      return state.inFlight;
    },
    get maxInFlight() {
      return state.maxInFlight;
    },
    get aborted() {
      return state.aborted;
    },
    reset() {
      state.bodies.length = 0;
      state.authorizations.length = 0;
      state.requests.length = 0;
      state.maxInFlight = state.inFlight;
      state.aborted = 0;
    },
    async stop() {
      await server.stop(true);
    },
  };
}
