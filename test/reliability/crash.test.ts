import { afterAll, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { join } from "node:path";
import { httpPost, temporaryDirectory, useFakeUpstream } from "../helpers";
import { sluiceCommand, sluiceEnvironment, startSluiceProcess } from "../support/sluice-process";

const upstream = useFakeUpstream();
const directory = temporaryDirectory();
afterAll(() => directory.remove());

test("kill -9 under load: the database is intact, every answered request is in the ledger, nothing counted twice", async () => {
  const databasePath = join(directory.path, "crash.db");
  const configPath = join(directory.path, "sluice.toml");
  await Bun.write(
    configPath,
    `[[models]]\nid = "m"\nbackend = "openai"\nbase_url = "${upstream.url}"\nupstream_model = "usage-10-20-5"\n\n[[plans]]\nid = "default"\nmodels = ["*"]\ntokens_per_5h = 100000000\n`,
  );
  const environment = sluiceEnvironment(databasePath, configPath);
  expect(sluiceCommand(environment, "org", "create", "acme").code).toBe(0);
  const key = sluiceCommand(environment, "key", "create", "--org", "acme").stdout.trim().split("\n").at(-1) as string;
  const server = await startSluiceProcess(environment);
  const answered: string[] = [];
  let stop = false;
  const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] });
  const worker = async () => {
    while (!stop) {
      try {
        const response = await httpPost(`${server.url}/v1/chat/completions`, body, { authorization: `Bearer ${key}`, "content-type": "application/json" });
        const text = await response.text();
        // A complete answer: status 200 and the whole JSON body.
        if (response.status === 200 && JSON.parse(text).object === "chat.completion") answered.push(response.headers.get("x-request-id") as string);
      } catch {
        // the server died mid-request: that request was never answered
      }
    }
  };
  const workers = Array.from({ length: 16 }, worker);
  while (answered.length < 300) await Bun.sleep(5);
  server.child.kill("SIGKILL");
  await server.child.exited;
  stop = true;
  await Promise.all(workers);

  const restarted = await startSluiceProcess(environment);
  try {
    const database = new Database(databasePath, { readonly: true });
    expect(database.query<{ integrity_check: string }, []>("PRAGMA integrity_check").get()?.integrity_check).toBe("ok");
    const recorded = new Set(
      database
        .query<{ request_id: string }, []>("SELECT request_id FROM usage_ledger")
        .all()
        .map((row) => row.request_id),
    );
    const missing = answered.filter((id) => !recorded.has(id));
    expect(missing).toEqual([]);
    const ledgerTokens = database.query<{ tokens: number }, []>("SELECT sum(prompt_tokens + completion_tokens) AS tokens FROM usage_ledger").get()?.tokens ?? 0;
    const minuteTokens = database.query<{ tokens: number }, []>("SELECT sum(tokens) AS tokens FROM usage_minutes").get()?.tokens ?? 0;
    const monthTokens = database.query<{ tokens: number }, []>("SELECT sum(tokens) AS tokens FROM usage_months").get()?.tokens ?? 0;
    expect(ledgerTokens).toBe(recorded.size * 30);
    expect(minuteTokens).toBe(ledgerTokens);
    expect(monthTokens).toBe(ledgerTokens);
    database.close();
    // Quotas after the restart: what the CLI reads equals the ledger, and the server goes on counting from there.
    const usage = sluiceCommand(environment, "usage", "--org", "acme").stdout.split("\n")[1]?.split("\t");
    expect(usage?.slice(0, 2)).toEqual(["5h", String(ledgerTokens)]);
    const response = await httpPost(`${restarted.url}/v1/chat/completions`, body, { authorization: `Bearer ${key}`, "content-type": "application/json" });
    expect(response.status).toBe(200);
    expect(Number(response.headers.get("x-ratelimit-remaining-tokens"))).toBeLessThan(100_000_000 - ledgerTokens);
    await response.text();
  } finally {
    restarted.child.kill();
    await restarted.child.exited;
  }
}, 60_000);
