// Usage reports: tokens by organization and model (or key) over a month or a span of hours, with the prompt (of which
// cached) and completion tokens they are made of, through the console API (members see their own organization,
// operators every one) and the CLI, with the SDK sending the requests.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { reportHours } from "../../../src/modules/usage/report";
import { hourMs, monthOf } from "../../../src/usage-periods";
import { ConsoleClient, consolePassword as password } from "../console/console-client";
import { sluiceCommand, sluiceEnvironment } from "../../support/sluice-process";
import { fakeModel, startSluice, testActor, useFakeUpstream, type TestSluice } from "../../helpers";

type Kinds = { tokens: number; promptTokens: number; completionTokens: number; cachedTokens: number };
type Row = Kinds & { organizationId: string; organization: string; group: string; keyId: string | null };
type Report = { since: number; until: number; by: string; rows: Row[]; total: Kinds };
const kinds = (promptTokens: number, cachedTokens: number, completionTokens: number): Kinds => ({
  tokens: promptTokens + completionTokens,
  promptTokens,
  completionTokens,
  cachedTokens,
});

describe("reportHours", () => {
  const now = Date.UTC(2026, 10, 28, 17, 30);
  test("a month exactly; the current one by default; since and until rounded out to whole hours", () => {
    expect(reportHours({ month: "2026-02" }, now)).toEqual({
      firstHour: Date.UTC(2026, 1, 1) / hourMs,
      endHour: Date.UTC(2026, 2, 1) / hourMs,
      month: monthOf(Date.UTC(2026, 1, 1)),
    });
    expect(reportHours({ month: "2026-12" }, now)).toEqual({
      firstHour: Date.UTC(2026, 11, 1) / hourMs,
      endHour: Date.UTC(2027, 0, 1) / hourMs,
      month: monthOf(Date.UTC(2026, 11, 15)),
    });
    expect(reportHours({}, now)).toEqual(reportHours({ month: "2026-11" }, now));
    expect(reportHours({ since: "2h" }, now)).toEqual({ firstHour: Date.UTC(2026, 10, 28, 15) / hourMs, endHour: Date.UTC(2026, 10, 28, 18) / hourMs });
    expect(reportHours({ since: "2026-11-01T00:00:00Z", until: "2026-11-02T00:00:00Z" }, now)).toEqual({
      firstHour: Date.UTC(2026, 10, 1) / hourMs,
      endHour: Date.UTC(2026, 10, 2) / hourMs,
    });
  });

  test("what it refuses, naming the parameter", () => {
    const cases: [Record<string, string>, string][] = [
      [{ month: "2026-13" }, "month"],
      [{ month: "November" }, "month"],
      [{ month: "2026-11", since: "1d" }, "month"],
      [{ since: "soon" }, "since"],
      [{ since: "1d", until: "later" }, "until"],
      [{ since: "1h", until: "2h" }, "until"],
    ];
    for (const [request, param] of cases) expect(() => reportHours(request, now)).toThrow(expect.objectContaining({ param }));
  });
});

describe("through the console API and the CLI", () => {
  const upstream = useFakeUpstream();
  let sluice: TestSluice;
  let operator: ConsoleClient;
  let member: ConsoleClient;

  beforeAll(async () => {
    sluice = await startSluice({
      // m: 10 prompt tokens, 4 of them from the upstream's prompt cache, and 5 completion tokens a request.
      models: [fakeModel(upstream.url, "m", "cached-10-5-4"), fakeModel(upstream.url, "n", "usage-20-10")],
      plans: [{ id: "default", models: ["*"] }],
    });
    await sluice.accounts.createUser({ email: "op@example.com", password, role: "operator", organizationId: null }, testActor);
    operator = new ConsoleClient(sluice.url);
    await operator.signIn("op@example.com", password);
    member = new ConsoleClient(sluice.url);
    expect((await member.json("POST", "/signup", { email: "rep@example.com", password, organization: "Reporting Co" })).status).toBe(201);
    await sluice.organizations.update("Reporting Co", { status: "active" }, testActor);
    await member.signIn("rep@example.com", password);
  });
  afterAll(() => sluice.stop());

  async function send(secret: string, model: string, times: number): Promise<void> {
    const client = new OpenAI({ baseURL: sluice.baseURL, apiKey: secret, maxRetries: 0 });
    for (let index = 0; index < times; index++) await client.chat.completions.create({ model, messages: [{ role: "user", content: "hi" }] });
  }

  test("tokens by organization and model, and by key; a member sees only its own; rows staged or moved count the same", async () => {
    const ci = (await member.json<{ key: { id: string }; secret: string }>("POST", "/keys", { name: "ci" })).body;
    const laptop = (await member.json<{ key: { id: string }; secret: string }>("POST", "/keys", { name: "laptop" })).body;
    await send(ci.secret, "m", 3);
    await send(laptop.secret, "n", 2);
    await send(sluice.key, "m", 1);

    const reporting = (await sluice.organizations.findByName("Reporting Co"))?.id as string;
    const acme = (await sluice.organizations.findByName("acme"))?.id as string;
    const expected = [
      { organizationId: acme, organization: "acme", group: "m", keyId: null, ...kinds(10, 4, 5) },
      { organizationId: reporting, organization: "Reporting Co", group: "n", keyId: null, ...kinds(40, 0, 20) },
      { organizationId: reporting, organization: "Reporting Co", group: "m", keyId: null, ...kinds(30, 12, 15) },
    ];
    // At once (rows may still be staged), and once the writer has moved them.
    for (const wait of [0, 400]) {
      await Bun.sleep(wait);
      const all = await operator.json<Report>("GET", "/usage-report");
      expect(all.status).toBe(200);
      expect(all.body.rows).toEqual(expected);
      expect(all.body.total).toEqual(kinds(80, 16, 40));
      expect(all.body.by).toBe("model");
    }
    const month = new Date().toISOString().slice(0, 7);
    const byKey = await member.json<Report>("GET", `/usage-report?by=key&month=${month}`);
    expect(byKey.body.rows.map((row) => [row.group, row.keyId, row.tokens])).toEqual([
      ["laptop", laptop.key.id, 60],
      ["ci", ci.key.id, 45],
    ]);
    expect((await member.json<Report>("GET", "/usage-report")).body.rows.map((row) => row.organization)).toEqual(["Reporting Co", "Reporting Co"]);
    expect((await member.json("GET", `/usage-report?organization=${acme}`)).status).toBe(403);
    expect((await operator.json<Report>("GET", `/usage-report?organization=${acme}`)).body.rows).toEqual(expected.slice(0, 1));
    expect((await operator.json<Report>("GET", "/usage-report?month=2020-01")).body).toMatchObject({ rows: [], total: kinds(0, 0, 0) });
    // A span of hours is the CLI's (below): the console reads months only.
    expect((await operator.json<Report>("GET", "/usage-report?since=1h&month=2020-01")).body.total.tokens).toBe(0);

    const refusals: [string, string][] = [
      ["month=2026-13", "month"],
      ["by=colour", "by"],
      ["month=", "month"],
    ];
    for (const [query, param] of refusals) {
      const response = await operator.json<{ error: { param: string } }>("GET", `/usage-report?${query}`);
      expect({ query, status: response.status, param: response.body.error.param }).toEqual({ query, status: 400, param });
    }

    // The console's CSV is the CLI's.
    const download = await member.request("GET", "/usage-report.csv?by=key");
    expect(download.headers.get("content-type")).toBe("text/csv; charset=utf-8");
    expect(await download.text()).toBe(
      `organization,organization_id,key,key_id,tokens,prompt_tokens,cached_tokens,completion_tokens\n` +
        `Reporting Co,${reporting},laptop,${laptop.key.id},60,40,0,20\nReporting Co,${reporting},ci,${ci.key.id},45,30,12,15\n`,
    );

    // The CLI reads the same, on the server's own database.
    const environment = sluiceEnvironment(sluice.database.sqlite.filename, "");
    delete environment.SLUICE_CONFIG;
    const csv = sluiceCommand(environment, "usage", "report", "--csv");
    expect(csv.code).toBe(0);
    expect(csv.stdout).toBe(
      `organization,organization_id,model,tokens,prompt_tokens,cached_tokens,completion_tokens\n` +
        `acme,${acme},m,15,10,4,5\nReporting Co,${reporting},n,60,40,0,20\nReporting Co,${reporting},m,45,30,12,15\n`,
    );
    const text = sluiceCommand(environment, "usage", "report", "--org", "Reporting Co", "--by", "key");
    expect(text.stdout).toContain(`Reporting Co\tlaptop (${laptop.key.id})\t60\t40\t0\t20`);
    expect(text.stdout.trim().split("\n").at(-1)).toBe("total\t\t105\t70\t12\t35");
    const wrong = sluiceCommand(environment, "usage", "report", "--month", "soon");
    expect([wrong.code, wrong.stderr.split("\n")[0]]).toEqual([2, "sluice: --month: month must look like 2026-11."]);
  });
});
