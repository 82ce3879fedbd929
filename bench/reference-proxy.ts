// The unavoidable work of a gateway, with nothing of Sluice's: the yardsticks `make bench` reports Sluice against.
//   parse:   parses the request's JSON, re-encodes it upstream, parses the answer, renames its id and model,
//            re-encodes it.
//   durable: the same, plus one ledger row per answered request in SQLite (WAL, synchronous=NORMAL), group-committed
//            on the server's thread once per tick; the answer is sent after its row's commit (Sluice's promise).
//            The table has an integer rowid and no index: the fewest pages a durable row can touch.
// A streamed request (`"stream": true`) is relayed event by event: each upstream read is split into server-sent
// events, each event's JSON parsed, renamed and re-encoded, and the read's events written in one write (what any
// gateway that meters a stream must do); in durable mode the row is committed before `[DONE]` goes out.
// REFERENCE_CLIENT=http reads streams through node:http instead of fetch (a measurement of the upstream client).
// REFERENCE_STREAM=layered relays a stream through three async generators (reads into events, a pass-through,
// events into frames), as Sluice's backend, upstream pool and relay are layered: a measurement of what the layers
// cost a stream's memory and CPU against the one loop above.
// Usage: BUN_CONFIG_MAX_HTTP_REQUESTS=65535 bun bench/reference-proxy.ts parse|durable PORT UPSTREAM_BASE_URL [DB_PATH]
import { Database } from "bun:sqlite";
import { type IncomingMessage, request as httpRequest } from "node:http";
import { raiseListenBacklog } from "../src/http/listen-backlog";

const mode = process.argv[2] === "durable" ? "durable" : "parse";
const port = Number(process.argv[3] ?? 9300);
const upstream = process.argv[4] ?? "http://127.0.0.1:9100";
const upstreamChat = new URL(`${upstream}/v1/chat/completions`);

/** What a relay reads of an upstream chunk. */
interface Chunk {
  id: string;
  model: string;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

interface Row {
  id: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  endedAt: number;
}

/** Rows waiting for the next commit, each with the answer that waits for it. */
let pending: { row: Row; committed: () => void }[] = [];
let commit: ((rows: Row[]) => void) | undefined;

if (mode === "durable") {
  const database = new Database(process.argv[5] ?? `/tmp/sluice-reference-${port}.db`, { create: true });
  database.run("PRAGMA journal_mode = WAL");
  database.run("PRAGMA synchronous = NORMAL");
  database.run(
    "CREATE TABLE IF NOT EXISTS ledger (id INTEGER PRIMARY KEY, request_id TEXT NOT NULL, model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, ended_at INTEGER NOT NULL)",
  );
  const insert = database.prepare("INSERT INTO ledger (request_id, model, prompt_tokens, completion_tokens, ended_at) VALUES (?, ?, ?, ?, ?)");
  commit = database.transaction((rows: Row[]) => {
    for (const row of rows) insert.run(row.id, row.model, row.promptTokens, row.completionTokens, row.endedAt);
  });
}

function flush(): void {
  const batch = pending;
  pending = [];
  commit?.(batch.map((entry) => entry.row));
  for (const entry of batch) entry.committed();
}

function recorded(row: Row): Promise<void> {
  return new Promise((resolve) => {
    if (pending.length === 0) setImmediate(flush);
    pending.push({ row, committed: resolve });
  });
}

let counter = 0;

/** Relays an upstream event stream, each event parsed and re-encoded under our id and model. */
function relay(upstreamBody: AsyncIterable<Uint8Array>, model: string): ReadableStream<Uint8Array> {
  const id = `chatcmpl-${(counter++).toString(36)}`;
  return new ReadableStream({
    type: "direct",
    async pull(controller) {
      const decoder = new TextDecoder();
      let buffered = "";
      let usage: Chunk["usage"];
      for await (const bytes of upstreamBody) {
        buffered += decoder.decode(bytes, { stream: true });
        const events = buffered.split("\n\n");
        buffered = events.pop() ?? "";
        let out = "";
        for (const event of events) {
          const data = event.slice(6);
          if (data === "[DONE]") {
            if (mode === "durable") {
              await recorded({ id, model, promptTokens: usage?.prompt_tokens ?? 0, completionTokens: usage?.completion_tokens ?? 0, endedAt: Date.now() });
            }
            out += "data: [DONE]\n\n";
            continue;
          }
          const chunk = JSON.parse(data) as Chunk;
          chunk.id = id;
          chunk.model = model;
          if (chunk.usage) usage = chunk.usage;
          out += `data: ${JSON.stringify(chunk)}\n\n`;
        }
        if (out) {
          controller.write(out);
          await controller.flush();
        }
      }
      controller.close();
    },
  });
}

/** The parsed chunks of each upstream read: the first layer (Sluice's backend). */
async function* chunksOf(body: ReadableStream<Uint8Array>): AsyncGenerator<Chunk[]> {
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let buffered = "";
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    buffered += decoder.decode(read.value, { stream: true });
    const events = buffered.split("\n\n");
    buffered = events.pop() ?? "";
    const chunks: Chunk[] = [];
    for (const event of events) {
      const data = event.slice(6);
      if (data === "[DONE]") {
        if (chunks.length > 0) yield chunks;
        return;
      }
      chunks.push(JSON.parse(data) as Chunk);
    }
    if (chunks.length > 0) yield chunks;
  }
}

/** Hands each batch on: the second layer (Sluice's upstream pool). */
async function* passedOn(inner: AsyncGenerator<Chunk[]>): AsyncGenerator<Chunk[]> {
  try {
    for (let result = await inner.next(); !result.done; result = await inner.next()) yield result.value;
  } finally {
    await inner.return(undefined);
  }
}

/** Each batch renamed and encoded as frames, then the ledger row and [DONE]: the third layer (Sluice's relay). */
async function* framesOf(inner: AsyncGenerator<Chunk[]>, id: string, model: string): AsyncGenerator<string[]> {
  let usage: Chunk["usage"];
  try {
    for (let result = await inner.next(); !result.done; result = await inner.next()) {
      const frames: string[] = [];
      for (const chunk of result.value) {
        chunk.id = id;
        chunk.model = model;
        if (chunk.usage) usage = chunk.usage;
        frames.push(`data: ${JSON.stringify(chunk)}\n\n`);
      }
      yield frames;
    }
    if (mode === "durable") {
      await recorded({ id, model, promptTokens: usage?.prompt_tokens ?? 0, completionTokens: usage?.completion_tokens ?? 0, endedAt: Date.now() });
    }
    yield ["data: [DONE]\n\n"];
  } finally {
    await inner.return(undefined);
  }
}

/** The same relay as `relay`, through the three layers above (REFERENCE_STREAM=layered). */
function layeredRelay(upstreamBody: ReadableStream<Uint8Array>, model: string): ReadableStream<Uint8Array> {
  const frames = framesOf(passedOn(chunksOf(upstreamBody)), `chatcmpl-${(counter++).toString(36)}`, model);
  return new ReadableStream({
    type: "direct",
    async pull(controller) {
      for (let result = await frames.next(); !result.done; result = await frames.next()) {
        for (const frame of result.value) controller.write(frame);
        await controller.flush();
      }
      controller.close();
    },
  });
}

const server = Bun.serve({
  port,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(request) {
    const body = (await request.json()) as { model?: string; [field: string]: unknown };
    const model = body.model ?? "";
    if (body.stream && process.env.REFERENCE_CLIENT === "http") {
      const upstreamBody = await new Promise<IncomingMessage>((resolve, reject) => {
        const outgoing = httpRequest(upstreamChat, { method: "POST", headers: { "content-type": "application/json" } }, resolve);
        outgoing.on("error", reject);
        outgoing.end(JSON.stringify({ ...body, model: "bench-upstream" }));
      });
      return new Response(relay(upstreamBody, model), { headers: { "content-type": "text/event-stream" } });
    }
    const upstreamResponse = await fetch(upstreamChat, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ ...body, model: "bench-upstream" }),
    });
    if (body.stream && upstreamResponse.body) {
      const stream = process.env.REFERENCE_STREAM === "layered" ? layeredRelay(upstreamResponse.body, model) : relay(upstreamResponse.body, model);
      return new Response(stream, { headers: { "content-type": "text/event-stream" } });
    }
    const answer = (await upstreamResponse.json()) as { id: string; model: string; usage?: { prompt_tokens?: number; completion_tokens?: number } };
    answer.id = `chatcmpl-${(counter++).toString(36)}`;
    answer.model = model;
    if (mode === "durable") {
      await recorded({
        id: answer.id,
        model,
        promptTokens: answer.usage?.prompt_tokens ?? 0,
        completionTokens: answer.usage?.completion_tokens ?? 0,
        endedAt: Date.now(),
      });
    }
    return new Response(JSON.stringify(answer), { status: upstreamResponse.status, headers: { "content-type": "application/json" } });
  },
});
await raiseListenBacklog(server.port as number);
console.log(`reference proxy (${mode}) on ${port}`);
// Exits normally on SIGTERM, so that a profile asked for with --cpu-prof is written.
process.on("SIGTERM", () => process.exit(0));
