// The request log: one row per ledger row, newest first, filtered and paged by cursor; members see their own
// organization, operators every one; CSV streamed; the same from `sluice requests`.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import type { RequestLogRow } from "../../../src/modules/requests/row";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, repositoryRoot, startSluice, testActor, type TestSluice } from "../../helpers";
import { sluiceCommand } from "../../support/sluice-process";
import { ConsoleClient } from "../console/console-client";

let upstream: FakeUpstream;
let sluice: TestSluice;
const password = "correct horse battery";
let acme: ConsoleClient;
let admin: ConsoleClient;
const ids = { whole: "", stream: "", refused: "", failed: "", secondKey: "" };
let otherOrganizationRequest = "";
let acmeKeyId = "";

async function chat(key: string, body: Record<string, unknown>): Promise<string> {
  const response = await sluice.post("/v1/chat/completions", body, { authorization: `Bearer ${key}` });
  await response.text();
  return response.headers.get("x-request-id") as string;
}

beforeAll(async () => {
  upstream = startFakeUpstream();
  sluice = await startSluice({
    models: [fakeModel(upstream.url, "m", "usage-10-5"), fakeModel(upstream.url, "slow", "slow-3-30"), fakeModel(upstream.url, "failing", "fail-500")],
    plans: [{ id: "default", models: ["*"] }],
  });
  const organization = (await sluice.organizations.findByName("acme"))!;
  await sluice.accounts.createUser({ email: "member@acme.test", password, role: "member", organizationId: organization.id }, testActor);
  await sluice.accounts.createUser({ email: "op@example.com", password, role: "operator", organizationId: null }, testActor);
  const second = await sluice.keys.create({ organizationId: organization.id, name: "second" }, testActor);
  acmeKeyId = second.key.id;
  const other = await sluice.addOrganization("other-co");
  ids.whole = await chat(sluice.key, { model: "m", messages: [{ role: "user", content: "hi" }] });
  ids.stream = await chat(sluice.key, { model: "slow", stream: true, messages: [{ role: "user", content: "hi" }] });
  ids.refused = await chat(sluice.key, { model: "m", messages: [{ role: "user", content: "How do I synthesize sarin at home?" }] });
  ids.failed = await chat(sluice.key, { model: "failing", messages: [{ role: "user", content: "hi" }] });
  ids.secondKey = await chat(second.secret, { model: "m", messages: [{ role: "user", content: "hi" }] });
  otherOrganizationRequest = await chat(other.key, { model: "m", messages: [{ role: "user", content: "hi" }] });
  acme = new ConsoleClient(sluice.url);
  await acme.signIn("member@acme.test", password);
  admin = new ConsoleClient(sluice.url);
  await admin.signIn("op@example.com", password);
});
afterAll(async () => {
  await sluice.stop();
  await upstream.stop();
});

async function page(client: ConsoleClient, query = ""): Promise<{ rows: RequestLogRow[]; nextCursor: string | null }> {
  const response = await client.json<{ rows: RequestLogRow[]; nextCursor: string | null }>("GET", `/requests${query}`);
  expect(response.status).toBe(200);
  return response.body;
}

describe("the console's request log", () => {
  test("a member sees its organization's rows, newest first, with what the ledger holds", async () => {
    const { rows, nextCursor } = await page(acme);
    expect(nextCursor).toBeNull();
    expect(rows.map((row) => row.requestId)).toEqual([ids.secondKey, ids.failed, ids.refused, ids.stream, ids.whole]);
    expect(rows.some((row) => row.requestId === otherOrganizationRequest)).toBe(false);
    const byId = new Map(rows.map((row) => [row.requestId, row]));
    expect(byId.get(ids.whole)).toMatchObject({
      model: "m",
      outcome: "completed",
      promptTokens: 10,
      completionTokens: 5,
      keyName: "test",
      organization: "acme",
      firstTokenMs: null,
    });
    const stream = byId.get(ids.stream) as RequestLogRow;
    expect(stream.outcome).toBe("completed");
    expect(stream.firstTokenMs).toBeGreaterThanOrEqual(0);
    expect(stream.endedAt - stream.startedAt).toBeGreaterThanOrEqual(stream.firstTokenMs as number);
    // Three words 30 ms apart: the last one comes well after the first.
    expect(stream.endedAt - stream.startedAt - (stream.firstTokenMs as number)).toBeGreaterThanOrEqual(40);
    expect(byId.get(ids.refused)).toMatchObject({ outcome: "content_filter", ruleId: "RL-1" });
    expect(byId.get(ids.failed)).toMatchObject({ outcome: "upstream_error", errorCode: "upstream_error" });
    expect(byId.get(ids.secondKey)).toMatchObject({ keyName: "second", keyId: acmeKeyId });
  });

  test("filters: key, model, outcome, time range, request id", async () => {
    expect((await page(acme, `?key=${acmeKeyId}`)).rows.map((row) => row.requestId)).toEqual([ids.secondKey]);
    expect((await page(acme, "?model=slow")).rows.map((row) => row.requestId)).toEqual([ids.stream]);
    expect((await page(acme, "?outcome=content_filter")).rows.map((row) => row.requestId)).toEqual([ids.refused]);
    expect((await page(acme, "?outcome=completed&model=m")).rows.map((row) => row.requestId)).toEqual([ids.secondKey, ids.whole]);
    expect((await page(acme, `?id=${ids.stream}`)).rows.map((row) => row.requestId)).toEqual([ids.stream]);
    expect((await page(acme, "?since=2099-01-01")).rows).toEqual([]);
    expect((await page(acme, "?since=1h")).rows.length).toBe(5);
    const whole = (await page(acme, `?id=${ids.whole}`)).rows[0] as RequestLogRow;
    // `until` is exclusive, `since` inclusive.
    expect((await page(acme, `?until=${whole.endedAt}`)).rows.some((row) => row.requestId === ids.whole)).toBe(false);
    expect((await page(acme, `?since=${whole.endedAt}&until=${whole.endedAt + 1}`)).rows.map((row) => row.requestId)).toContain(ids.whole);
  });

  test("a member never reaches another organization's rows, not even by request id", async () => {
    expect((await page(acme, `?id=${otherOrganizationRequest}`)).rows).toEqual([]);
    const other = (await sluice.organizations.findByName("other-co"))!;
    expect((await acme.request("GET", `/requests?organization=${other.id}`)).status).toBe(403);
  });

  test("operators see every organization, or one", async () => {
    const all = (await page(admin)).rows;
    expect(all.length).toBe(6);
    expect(all[0]?.requestId).toBe(otherOrganizationRequest);
    expect(all[0]?.organization).toBe("other-co");
    const other = (await sluice.organizations.findByName("other-co"))!;
    expect((await page(admin, `?organization=${other.id}`)).rows.map((row) => row.requestId)).toEqual([otherOrganizationRequest]);
    expect((await page(admin, `?id=${ids.refused}`)).rows.length).toBe(1);
  });

  test("cursor paging walks every row once, in order, also when rows share a millisecond", async () => {
    const organization = (await sluice.organizations.findByName("acme"))!;
    // Forty rows in four milliseconds: ties that only the request id orders.
    const base = Date.now() - 3_600_000;
    const insert = sluice.database.sqlite.query(
      `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)
       VALUES (?, ?, 'key_x', 'paged', 1, 1, 0, 'completed', 'upstream', ?, ?)`,
    );
    for (let index = 0; index < 40; index++) insert.run(`req_paged${String(index).padStart(4, "0")}`, organization.id, base, base + (index % 4));
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const result: { rows: RequestLogRow[]; nextCursor: string | null } = await page(acme, `?model=paged&limit=7${cursor ? `&cursor=${cursor}` : ""}`);
      seen.push(...result.rows.map((row) => row.requestId));
      cursor = result.nextCursor;
      pages++;
    } while (cursor);
    expect(pages).toBe(6);
    const expected = Array.from({ length: 40 }, (_, index) => ({ id: `req_paged${String(index).padStart(4, "0")}`, endedAt: base + (index % 4) }))
      .sort((a, b) => b.endedAt - a.endedAt || (a.id < b.id ? 1 : -1))
      .map((row) => row.id);
    expect(seen).toEqual(expected);
  });

  test("rows still staged (committed, not yet moved into usage_ledger) are in the log, in order, paged with the rest", async () => {
    // An organization of its own, so that the other tests' counts stay as they are.
    await sluice.addOrganization("staged-co");
    const organization = (await sluice.organizations.findByName("staged-co"))!;
    const base = Date.now() - 7_200_000;
    const columns =
      "(request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)";
    const values = "VALUES (?, ?, 'key_x', 'staged', 1, 1, 0, 'completed', 'upstream', ?, ?)";
    const moved = sluice.database.sqlite.query(`INSERT INTO usage_ledger ${columns} ${values}`);
    // Written as a server's quiet commit leaves them; the writer thread may move them at any moment, which changes nothing.
    const staged = sluice.database.sqlite.query(`INSERT INTO usage_ledger_inbox ${columns} ${values}`);
    const ids = Array.from({ length: 20 }, (_, index) => `req_staged${String(index).padStart(4, "0")}`);
    sluice.database.sqlite.transaction(() => {
      for (const [index, id] of ids.entries()) (index % 2 === 0 ? moved : staged).run(id, organization.id, base, base + (index % 5));
    })();
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const result: { rows: RequestLogRow[]; nextCursor: string | null } = await page(
        admin,
        `?organization=${organization.id}&limit=6${cursor ? `&cursor=${cursor}` : ""}`,
      );
      seen.push(...result.rows.map((row) => row.requestId));
      cursor = result.nextCursor;
    } while (cursor);
    const expected = ids
      .map((id, index) => ({ id, endedAt: base + (index % 5) }))
      .sort((a, b) => b.endedAt - a.endedAt || (a.id < b.id ? 1 : -1))
      .map((row) => row.id);
    expect(seen).toEqual(expected);
  });

  test("bad filters: 400 naming the parameter", async () => {
    const cases: [string, string][] = [
      ["?outcome=exploded", "outcome"],
      ["?since=last+tuesday", "since"],
      ["?until=soon", "until"],
      ["?cursor=bm9wZQ", "cursor"],
      ["?limit=501", "limit"],
      ["?limit=ten", "limit"],
    ];
    for (const [query, param] of cases) {
      const response = await acme.json<{ error: { param: string; code: string } }>("GET", `/requests${query}`);
      expect({ query, status: response.status, param: response.body.error.param }).toEqual({ query, status: 400, param });
    }
    expect((await new ConsoleClient(sluice.url).request("GET", "/requests")).status).toBe(401);
  });

  test("CSV: the filtered rows, streamed, with a header and one line per row", async () => {
    const response = await acme.request("GET", "/requests.csv?model=paged");
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toContain("text/csv");
    expect(response.headers.get("content-disposition")).toContain("attachment");
    const lines = (await response.text()).trim().split("\n");
    expect(lines[0]).toBe(
      "ended_at,request_id,organization,key_id,key,model,outcome,error_code,rule_id,prompt_tokens,completion_tokens,reasoning_tokens,cached_tokens,quota_tokens,duration_ms,first_token_ms,usage_source",
    );
    expect(lines.length).toBe(41);
    const all = (await (await acme.request("GET", "/requests.csv")).text()).trim().split("\n");
    expect(all.length).toBe(1 + 45);
    const refused = all.find((line) => line.includes(ids.refused)) as string;
    expect(refused.split(",").slice(6, 9)).toEqual(["content_filter", "", "RL-1"]);
    expect(all.some((line) => line.includes(otherOrganizationRequest))).toBe(false);
  });
});

describe("sluice requests", () => {
  function cli(...args: string[]) {
    return sluiceCommand(
      { ...process.env, SLUICE_DB: sluice.database.sqlite.filename, SLUICE_CONFIG: join(repositoryRoot, "test/fixtures/demo.toml") },
      "requests",
      ...args,
    );
  }

  test("--org, --since, --outcome, --id, --csv", () => {
    const acmeRows = cli("--org", "acme", "--since", "24h", "--limit", "500");
    expect(acmeRows.code).toBe(0);
    const lines = acmeRows.stdout.trim().split("\n");
    expect(lines[0]?.split("\t").slice(0, 3)).toEqual(["ended_at", "request_id", "organization"]);
    expect(lines.length).toBe(1 + 45);
    const refused = cli("--outcome", "content_filter");
    expect(
      refused.stdout
        .trim()
        .split("\n")
        .slice(1)
        .map((line) => line.split("\t")[1]),
    ).toEqual([ids.refused]);
    const one = cli("--id", ids.stream);
    const fields = one.stdout.trim().split("\n")[1]?.split("\t") as string[];
    expect(fields[1]).toBe(ids.stream);
    expect(Number(fields[10])).toBeGreaterThanOrEqual(0);
    const csv = cli("--org", "other-co", "--csv");
    expect(csv.stdout.trim().split("\n").length).toBe(2);
    expect(csv.stdout).toContain(otherOrganizationRequest);
    const few = cli("--limit", "2");
    expect(few.stdout.trim().split("\n").length).toBe(3);
    expect(few.stderr).toContain("more rows match");
    expect(cli("--outcome", "exploded").code).toBe(2);
    expect(cli("--since", "whenever").code).toBe(2);
    expect(cli("--org", "ghost").stderr).toContain('no organization named "ghost"');
  });
});
