import { Elysia } from "elysia";
import { SluiceError, invalidRequest } from "../../errors";
import type { AccountService, Actor } from "./accounts";
import type { ConsoleService } from "./service";

const sessionCookie = "sluice_session";

/** Console changes must come as JSON (a cross-site form cannot send that without a CORS preflight). */
async function jsonBody(request: Request): Promise<Record<string, unknown>> {
  if (!(request.headers.get("content-type") ?? "").startsWith("application/json")) throw invalidRequest("Send JSON (Content-Type: application/json).");
  try {
    const body = (await request.json()) as unknown;
    if (typeof body === "object" && body !== null && !Array.isArray(body)) return body as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw invalidRequest("The body must be a JSON object.");
}

/**
 * The web console's JSON API under `/console/api` (its pages are served at `/` by the app, see consolePage). Sessions are an HttpOnly,
 * SameSite=Strict cookie; every change also needs the session's CSRF token in `x-csrf-token`.
 */
export const consoleRoutes = (service: ConsoleService, accounts: AccountService) =>
  new Elysia({ name: "console" })
    .group("/console/api", (api) =>
      api
        .post("/signup", async ({ request, set }) => {
          const body = await jsonBody(request);
          await service.signUp({ email: body.email, password: body.password, organization: body.organization });
          set.status = 201;
          return { ok: true };
        })
        .post("/signin", async ({ request, cookie }) => {
          const body = await jsonBody(request);
          const { token, actor } = await accounts.signIn(body.email, body.password);
          cookie[sessionCookie]?.set({ value: token, httpOnly: true, sameSite: "strict", path: "/", maxAge: 7 * 24 * 3600, secure: new URL(request.url).protocol === "https:" || request.headers.get("x-forwarded-proto") === "https" });
          return service.me(actor);
        })
        .resolve(async ({ cookie, request }) => {
          const actor = await accounts.actorOf(cookie[sessionCookie]?.value as string | undefined);
          if (!actor) throw new SluiceError("missing_api_key", "Sign in first.");
          if (request.method !== "GET" && request.headers.get("x-csrf-token") !== actor.csrfToken) {
            throw new SluiceError("invalid_request", "Missing or wrong CSRF token; reload the page.");
          }
          return { actor: actor as Actor };
        })
        .post("/signout", async ({ cookie }) => {
          await accounts.signOut(cookie[sessionCookie]?.value as string);
          cookie[sessionCookie]?.remove();
          return { ok: true };
        })
        .get("/me", ({ actor }) => service.me(actor))
        .get("/plans", () => service.plans())
        .get("/keys", ({ actor }) => service.listKeys(actor))
        .post("/keys", async ({ actor, request, set }) => {
          const body = await jsonBody(request);
          set.status = 201;
          return service.createKey(actor, { name: body.name, expiresIn: body.expires_in });
        })
        .post("/keys/:id/revoke", ({ actor, params }) => service.revokeKey(actor, params.id))
        .get("/usage", ({ actor }) => service.usage(actor))
        .get("/operator/organizations", ({ actor }) => service.listOrganizations(actor))
        .post("/operator/organizations/:id", async ({ actor, params, request }) => {
          const body = await jsonBody(request);
          return service.updateOrganization(actor, params.id, { status: body.status, plan: body.plan });
        })
        .get("/operator/models", ({ actor }) => service.listModels(actor)),
    );

export { default as consolePage } from "./ui/index.html";
