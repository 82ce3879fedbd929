// A fake moderation service in the OpenAI format. It flags any input containing "FLAGME" under
// "violence/graphic"; `mode` makes it fail in the ways the tests need (`redirect` sends the check, with a 307, to an
// address that finds nothing flagged).
export type ModerationMode = "ok" | "down" | "slow" | "malformed" | "wrong-shape" | "redirect";

export interface FakeModeration {
  url: string;
  mode: ModerationMode;
  requests: { input: unknown; model: unknown; authorization: string | null }[];
  /** Requests that followed the `redirect` mode's 307 to an address that finds nothing flagged. */
  followedRedirects: number;
  stop(): Promise<void>;
}

export function startFakeModeration(): FakeModeration {
  const state: FakeModeration = { url: "", mode: "ok", requests: [], followedRedirects: 0, stop: async () => {} };
  const server = Bun.serve({
    port: 0,
    async fetch(request) {
      const body = (await request.json()) as { input: string[]; model?: string };
      if (new URL(request.url).pathname === "/nothing-flagged") {
        state.followedRedirects++;
        return Response.json({ results: (Array.isArray(body.input) ? body.input : [body.input]).map(() => ({ flagged: false, categories: {} })) });
      }
      state.requests.push({ input: body.input, model: body.model, authorization: request.headers.get("authorization") });
      switch (state.mode) {
        case "down":
          return new Response("upstream connect error", { status: 503 });
        case "slow":
          await Bun.sleep(1500);
          break;
        case "malformed":
          return new Response("<html>oops</html>", { status: 200 });
        case "wrong-shape":
          return Response.json({ results: [{ flagged: "maybe" }] });
        case "redirect":
          return new Response(null, { status: 307, headers: { location: "/nothing-flagged" } });
      }
      const inputs = Array.isArray(body.input) ? body.input : [body.input];
      return Response.json({
        id: "modr-fake",
        model: body.model ?? "omni-moderation-latest",
        results: inputs.map((text) => {
          const flagged = String(text).includes("FLAGME");
          return { flagged, categories: { "violence/graphic": flagged, harassment: false }, category_scores: { "violence/graphic": flagged ? 0.99 : 0.01 } };
        }),
      });
    },
  });
  state.url = `http://127.0.0.1:${server.port}/v1/moderations`;
  state.stop = async () => {
    await server.stop(true);
  };
  return state;
}
