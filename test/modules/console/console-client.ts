// A small console API client for tests: keeps the session cookie and the CSRF token like the pages do; and the server
// the console's tests share the shape of.
import type { ConfigFile } from "../../../src/config/schema";
import { startFakeUpstream, type FakeUpstream } from "../../fake-upstream";
import { fakeModel, startSluice, testActor, type TestSluice } from "../../helpers";

/** The password of every account the console's tests create. */
export const consolePassword = "correct horse battery";

/**
 * A Sluice over the fake upstream (one model, `m`) with the plans given and an operator account, op@example.com,
 * signed in with `consolePassword`.
 */
export async function startConsoleSluice(
  plans: ConfigFile["plans"] = [
    { id: "default", models: ["*"] },
    { id: "pro", models: ["*"] },
  ],
): Promise<{ upstream: FakeUpstream; sluice: TestSluice; stop(): Promise<void> }> {
  const upstream = startFakeUpstream();
  const sluice = await startSluice({ models: [fakeModel(upstream.url, "m", "usage-10-5")], plans });
  await sluice.accounts.createUser({ email: "op@example.com", password: consolePassword, role: "operator", organizationId: null }, testActor);
  return {
    upstream,
    sluice,
    async stop() {
      await sluice.stop();
      await upstream.stop();
    },
  };
}

export class ConsoleClient {
  cookie = "";
  csrf = "";

  constructor(private readonly base: string) {}

  async request(method: "GET" | "POST", path: string, body?: unknown, options: { csrf?: string | null; contentType?: string } = {}): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.cookie) headers.cookie = this.cookie;
    if (method === "POST") {
      headers["content-type"] = options.contentType ?? "application/json";
      const csrf = options.csrf === undefined ? this.csrf : options.csrf;
      if (csrf) headers["x-csrf-token"] = csrf;
    }
    const response = await fetch(`${this.base}/console/api${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
    });
    const setCookie = response.headers.get("set-cookie");
    if (setCookie) this.cookie = setCookie.split(";")[0] as string;
    return response;
  }

  async json<T = Record<string, unknown>>(method: "GET" | "POST", path: string, body?: unknown): Promise<{ status: number; body: T }> {
    const response = await this.request(method, path, body);
    return { status: response.status, body: (await response.json()) as T };
  }

  async signIn(email: string, password: string): Promise<void> {
    const { status, body } = await this.json<{ csrfToken: string }>("POST", "/signin", { email, password });
    if (status !== 200) throw new Error(`sign-in failed: ${status}`);
    this.csrf = body.csrfToken;
  }
}
