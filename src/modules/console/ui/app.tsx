// The Sluice console: sign-up and sign-in, API keys (shown once), usage at a glance, and the operator's pages.
import { render } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { api, setCsrfToken } from "./api";
import { ErrorText } from "./error-text";
import { shownTime } from "./time";
import { capsBody, CapsFields, capsSummary, EditCaps, type Caps } from "./key-caps";
import { useFormAction } from "./form-action";
import { AuditPage, RequestsPage } from "./logs";
import { ExpiryField, secretStatus, ShownOnce, useNewSecret } from "./new-secret";
import { TokensPage } from "./tokens";
import { UsageReportSection } from "./usage-report";
import type { ServerHealth } from "../../../upstream/server-health";

interface Me {
  email: string;
  role: "member" | "operator";
  csrfToken: string;
  organization: { id: string; name: string; status: string; plan: string; models: string[]; networks: string[] | null } | null;
}
interface Key extends Caps {
  id: string;
  name: string;
  prefix: string;
  createdAt: number;
  lastUsedAt: number | null;
  expiresAt: number | null;
  revokedAt: number | null;
}
interface Window {
  used: number;
  limit?: number;
  remaining?: number;
  resetsAt: number;
}
interface Requests {
  limit: number;
  remaining: number;
  fullAt: number;
}
interface Usage {
  plan: string;
  snapshot?: { fiveHours: Window; month: Window; requests?: Requests };
  keys: { id: string; name: string; limits: Caps; snapshot: { fiveHours: Window; month: Window; inFlight: number; requests?: Requests } }[];
  /** The plan's models whose tokens count other than once against the quotas, with their weights. */
  weights: Record<string, number>;
  series: { hours: number[]; byModel: Record<string, number[]>; byKey: Record<string, number[]> };
}

function SignIn({ onSignedIn }: { onSignedIn: (me: Me) => void }) {
  const [mode, setMode] = useState<"signin" | "signup">("signin");
  // Closed by the operator (`[console] sign_up = false`): accounts come from an operator only.
  const [signUpOpen, setSignUpOpen] = useState(true);
  // The single sign-on button's text, when the console has an identity provider (`[console.sso]`).
  const [sso, setSso] = useState<string | null>(null);
  // Off (`[console.sso] passwords = false`): single sign-on is the only way in, and the password form is not shown.
  const [passwords, setPasswords] = useState(true);
  useEffect(
    () =>
      void api<{ open: boolean; sso: string | null; passwords: boolean; error?: string }>("/sign-up").then(
        (setting) => {
          setSignUpOpen(setting.open);
          setSso(setting.sso);
          setPasswords(setting.passwords);
          // Why single sign-on sent the browser back here without a session, if it just did (told once).
          if (setting.error) setError(setting.error);
        },
        () => undefined,
      ),
    [],
  );
  const [error, setError] = useState("");
  const [notice, setNotice] = useState("");
  const submit = async (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.target as HTMLFormElement);
    setError("");
    try {
      if (mode === "signup") {
        await api("/signup", { email: form.get("email"), password: form.get("password"), organization: form.get("organization") });
        setNotice("Your organization is on the waitlist. You can sign in now; keys work once an operator activates it.");
      }
      onSignedIn(await api<Me>("/signin", { email: form.get("email"), password: form.get("password") }));
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  return (
    <section aria-labelledby="auth-title">
      <h2 id="auth-title">{mode === "signin" ? "Sign in" : "Create an account"}</h2>
      {notice && <p class="notice">{notice}</p>}
      {sso && mode === "signin" && (
        <p>
          <a class="button primary" href="/console/api/sso/start">
            {sso}
          </a>
        </p>
      )}
      {!passwords && <ErrorText error={error} />}
      {passwords && (
        <form onSubmit={submit}>
          <label>
            Email
            <input name="email" type="email" autocomplete="email" required />
          </label>
          <label>
            Password
            <input name="password" type="password" autocomplete={mode === "signin" ? "current-password" : "new-password"} minLength={10} required />
          </label>
          {mode === "signup" && (
            <label>
              Organization
              <input name="organization" required />
            </label>
          )}
          <button class="primary" type="submit">
            {mode === "signin" ? "Sign in" : "Sign up"}
          </button>
          <ErrorText error={error} />
        </form>
      )}
      {!passwords ? null : signUpOpen ? (
        <p>
          <button type="button" onClick={() => setMode(mode === "signin" ? "signup" : "signin")}>
            {mode === "signin" ? "No account yet? Sign up" : "Have an account? Sign in"}
          </button>
        </p>
      ) : (
        <p>Accounts are made by an operator of this Sluice: ask one for yours.</p>
      )}
    </section>
  );
}

/** The organization whose keys a Keys page shows: a member's own, or any (the operator's view). */
interface KeyOrganization {
  id: string;
  name: string;
  status: string;
  models: string[];
  /** The networks its keys may be used from unless a key names its own; null: anywhere. */
  networks: string[] | null;
}

/** A member's keys, or (`operated`) an operator's view of one organization's keys, which may also be managed there. */
function Keys({ organization, operated = false }: { organization: KeyOrganization; operated?: boolean }) {
  const keysPath = operated ? `/operator/organizations/${organization.id}/keys` : "/keys";
  const [keys, setKeys] = useState<Key[]>([]);
  const { created, dismiss, error, setError, make } = useNewSecret(() => load());
  const [editing, setEditing] = useState<string | null>(null);
  const load = () => api<Key[]>(keysPath).then(setKeys, (caught: Error) => setError(caught.message));
  useEffect(() => void load(), []);
  const made = (result: { key: Key; secret: string }) => ({ secret: result.secret, name: result.key.name });
  const create = (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const fields = new FormData(form);
    const body = { name: fields.get("name"), expires_in: fields.get("expires_in") || undefined, ...capsBody(fields) };
    void make(async () => made(await api<{ key: Key; secret: string }>(keysPath, body)), form);
  };
  const revoke = async (key: Key) => {
    if (!confirm(`Revoke the key "${key.name}"? Programs using it stop working at once.`)) return;
    await api(`/keys/${key.id}/revoke`, {});
    await load();
  };
  const rotate = (key: Key) => {
    if (!confirm(`Replace the key "${key.name}" with a new one? The old key keeps working for 24 hours, then stops.`)) return;
    void make(async () => made(await api<{ key: Key; secret: string }>(`/keys/${key.id}/rotate`, { grace: "24h" })));
  };
  const active = organization.status === "active";
  const state = organization.status === "suspended" ? "suspended" : "on the waitlist";
  return (
    <section aria-labelledby={`keys-title-${organization.id}`}>
      <h2 id={`keys-title-${organization.id}`}>{operated ? `Keys of ${organization.name}` : "API keys"}</h2>
      {!active && (
        <p class="notice" role="status">
          {operated
            ? `${organization.name} is ${state}: activate it to create keys.`
            : `Your organization is ${state}. Keys can be created and used once an operator activates it.`}
        </p>
      )}
      {organization.networks && (
        <p class="notice" data-testid="organization-networks">
          {operated ? "Its" : "Your organization's"} keys may be used only from {organization.networks.join(", ")}, unless a key names networks of its own.
        </p>
      )}
      {created && <ShownOnce what="key" name={created.name} secret={created.secret} onDone={dismiss} />}
      {active && (
        <form onSubmit={create}>
          <label>
            Label
            <input name="name" required maxLength={100} />
          </label>
          <ExpiryField />
          <CapsFields label={operated ? "inside its plan" : "inside your plan"} planModels={organization.models} />
          <button class="primary" type="submit">
            Create key
          </button>
        </form>
      )}
      <ErrorText error={error} />
      <div class="table-wrap">
        <table>
          <caption class="visually-hidden">{operated ? `The keys of ${organization.name}` : "Your organization's keys"}</caption>
          <thead>
            <tr>
              <th scope="col">Label</th>
              <th scope="col">Prefix</th>
              <th scope="col">Created</th>
              <th scope="col">Last used</th>
              <th scope="col">Expires</th>
              <th scope="col">Status</th>
              <th scope="col">Caps</th>
              <th scope="col" />
            </tr>
          </thead>
          <tbody>
            {keys.map((key) => [
              <tr key={key.id}>
                <td>{key.name}</td>
                <td>
                  <code>{key.prefix}…</code>
                </td>
                <td>{shownTime(key.createdAt)}</td>
                <td>{shownTime(key.lastUsedAt)}</td>
                <td>{shownTime(key.expiresAt)}</td>
                <td>{secretStatus(key)}</td>
                <td data-testid={`caps-${key.name}`}>{capsSummary(key)}</td>
                <td>
                  {!key.revokedAt && (
                    <>
                      <button type="button" onClick={() => setEditing(editing === key.id ? null : key.id)} aria-label={`Change caps of ${key.name}`}>
                        Caps
                      </button>{" "}
                      <button type="button" onClick={() => rotate(key)} aria-label={`Rotate ${key.name}`}>
                        Rotate
                      </button>{" "}
                      <button type="button" onClick={() => revoke(key)} aria-label={`Revoke ${key.name}`}>
                        Revoke
                      </button>
                    </>
                  )}
                </td>
              </tr>,
              editing === key.id && (
                <tr key={`${key.id}-caps`}>
                  <td colSpan={8}>
                    <EditCaps
                      keyId={key.id}
                      name={key.name}
                      caps={key}
                      planModels={organization.models}
                      onDone={() => {
                        setEditing(null);
                        void load();
                      }}
                    />
                  </td>
                </tr>
              ),
            ])}
          </tbody>
        </table>
      </div>
    </section>
  );
}

function Chart({ title, hours, series }: { title: string; hours: number[]; series: Record<string, number[]> }) {
  const container = useRef<HTMLDivElement>(null);
  useEffect(() => {
    if (!container.current) return;
    const names = Object.keys(series);
    const colors = ["#0b5cd5", "#d5530b", "#1a8a3a", "#8a1a7a", "#6b6b00"];
    const plot = new uPlot(
      {
        title,
        width: Math.min(900, container.current.clientWidth || 340),
        height: 220,
        series: [{}, ...names.map((name, index) => ({ label: name, stroke: colors[index % colors.length], width: 2 }))],
        axes: [{}, { label: "tokens" }],
      },
      [hours.map((hour) => hour / 1000), ...names.map((name) => series[name] ?? [])],
      container.current,
    );
    return () => plot.destroy();
  }, [title, hours, series]);
  return <div class="chart" ref={container} role="img" aria-label={`${title}: ${Object.keys(series).join(", ") || "no usage yet"}`} />;
}

function UsagePage() {
  const [usage, setUsage] = useState<Usage | null>(null);
  const [error, setError] = useState("");
  useEffect(() => void api<Usage>("/usage").then(setUsage, (caught: Error) => setError(caught.message)), []);
  if (error) return <ErrorText error={error} />;
  if (!usage) return <p>Loading…</p>;
  const figure = (label: string, window: Window | undefined) => (
    <div class="figure" data-testid={`usage-${label}`}>
      <span>{label}</span>
      <strong>{window?.used.toLocaleString() ?? 0} tokens used</strong>
      <span>
        {window?.limit === undefined ? "no limit" : `${window.remaining?.toLocaleString()} of ${window.limit.toLocaleString()} left`} · frees up{" "}
        {window ? new Date(window.resetsAt).toLocaleString() : "—"}
      </span>
    </div>
  );
  return (
    <section aria-labelledby="usage-title">
      <h2 id="usage-title">Usage</h2>
      <div class="figures">
        {figure("5 hours", usage.snapshot?.fiveHours)}
        {figure("month", usage.snapshot?.month)}
        {usage.snapshot?.requests && (
          <div class="figure" data-testid="usage-requests">
            <span>requests per minute</span>
            <strong>
              {usage.snapshot.requests.remaining.toLocaleString()} of {usage.snapshot.requests.limit.toLocaleString()} left
            </strong>
            <span>all back {new Date(usage.snapshot.requests.fullAt).toLocaleString()}</span>
          </div>
        )}
      </div>
      {Object.keys(usage.weights).length > 0 && (
        <p data-testid="quota-weights">
          Against the quotas, each token of{" "}
          {Object.entries(usage.weights)
            .map(([model, weight]) => `${model} counts ${weight}`)
            .join(", ")}
          ; of the other models, 1.
        </p>
      )}
      {usage.keys.length > 0 && (
        <div class="table-wrap">
          <table data-testid="key-usage">
            <caption>Keys with caps of their own</caption>
            <thead>
              <tr>
                <th scope="col">Key</th>
                <th scope="col">In flight</th>
                <th scope="col">5 hours</th>
                <th scope="col">Month</th>
                <th scope="col">Requests per minute</th>
              </tr>
            </thead>
            <tbody>
              {usage.keys.map((key) => (
                <tr key={key.id}>
                  <td>{key.name}</td>
                  <td>{key.limits.maxConcurrency === null ? `${key.snapshot.inFlight}` : `${key.snapshot.inFlight} of ${key.limits.maxConcurrency}`}</td>
                  <td>
                    {key.limits.tokensPer5h === null
                      ? `${key.snapshot.fiveHours.used.toLocaleString()} tokens`
                      : `${key.snapshot.fiveHours.used.toLocaleString()} of ${key.limits.tokensPer5h.toLocaleString()} tokens`}
                  </td>
                  <td>
                    {key.limits.tokensPerMonth === null
                      ? `${key.snapshot.month.used.toLocaleString()} tokens`
                      : `${key.snapshot.month.used.toLocaleString()} of ${key.limits.tokensPerMonth.toLocaleString()} tokens`}
                  </td>
                  <td>
                    {key.snapshot.requests
                      ? `${key.snapshot.requests.remaining.toLocaleString()} of ${key.snapshot.requests.limit.toLocaleString()} left`
                      : "no cap"}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <Chart title="Tokens per hour by model (last 24 h)" hours={usage.series.hours} series={usage.series.byModel} />
      <Chart title="Tokens per hour by key (last 24 h)" hours={usage.series.hours} series={usage.series.byKey} />
      <UsageReportSection operator={false} />
    </section>
  );
}

function fallbacksText(model: { fallbacks: string[]; contextFallbacks: string[] }): string {
  const parts = model.fallbacks.length === 0 ? [] : [model.fallbacks.join(", ")];
  if (model.contextFallbacks.length > 0) parts.push(`too long: ${model.contextFallbacks.join(", ")}`);
  return parts.length === 0 ? "none" : parts.join("; ");
}

function serverStateText(server: ServerHealth): string {
  const failures = server.failures > 0 ? `, ${server.failures} failure${server.failures === 1 ? "" : "s"} in a row` : "";
  const recent = server.recentFailures > 0 ? `, ${server.recentFailures} of its last ${server.recentCalls} calls failed` : "";
  const busy = server.inFlight > 0 ? `, ${server.inFlight} in flight` : "";
  const cause = server.outFor === "failure_rate" ? " for its failure rate" : "";
  const { finished, failed, rejected, stopped } = server.calls;
  const ended = finished + failed + rejected + stopped;
  const calls = ended > 0 ? `, ${ended} call${ended === 1 ? "" : "s"} (${failed} failed)` : "";
  const conversations = server.affinityCalls + server.affinityMovedAway;
  const affinity = conversations > 0 ? `, ${server.affinityCalls} of ${conversations} calls of its conversations here` : "";
  if (server.state === "out")
    return `out${cause} until ${new Date(server.outUntil as number).toLocaleTimeString()}${failures}${recent}${busy}${calls}${affinity}`;
  if (server.state === "probing") return `being tested${cause}${failures}${recent}${busy}${calls}${affinity}`;
  return `up${busy}${failures}${recent}${calls}${affinity}`;
}

/** An operator adds a member account to an organization (the only way in where sign-up is closed). */
function AddMember({ organization }: { organization: { id: string; name: string } }) {
  const { error, run } = useFormAction();
  const [added, setAdded] = useState("");
  const submit = (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const fields = new FormData(form);
    setAdded("");
    void run(async () => {
      const body = { email: fields.get("email"), password: fields.get("password") };
      const member = await api<{ email: string }>(`/operator/organizations/${organization.id}/members`, body);
      setAdded(`${member.email} can now sign in to ${organization.name}.`);
    }, form);
  };
  return (
    <form onSubmit={submit} aria-label={`Add a member to ${organization.name}`} class="filters">
      <label>
        Member email
        <input name="email" type="email" required />
      </label>
      <label>
        Their password
        <input name="password" type="password" minLength={10} autocomplete="new-password" required />
      </label>
      <button type="submit">Add member</button>
      {added && (
        <p class="notice" role="status">
          {added}
        </p>
      )}
      <ErrorText error={error} />
    </form>
  );
}

/** The networks an organization's keys may be used from, unless a key names its own (empty: anywhere). */
function OrganizationNetworks({ organization, onSaved }: { organization: { id: string; name: string; networks: string[] | null }; onSaved: () => void }) {
  const { error, run } = useFormAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const fields = new FormData(event.target as HTMLFormElement);
    void run(async () => {
      const networks = String(fields.get("networks") ?? "")
        .split(",")
        .map((entry) => entry.trim())
        .filter(Boolean);
      await api(`/operator/organizations/${organization.id}`, { networks: networks.length === 0 ? null : networks });
      onSaved();
    });
  };
  return (
    <form onSubmit={submit} aria-label={`Networks of ${organization.name}`} class="filters">
      <label>
        Networks its keys may be used from (addresses and CIDR ranges separated by commas; a key's own replace them)
        <input name="networks" placeholder="anywhere" defaultValue={organization.networks?.join(", ") ?? ""} />
      </label>
      <button type="submit">Save networks</button>
      <ErrorText error={error} />
    </form>
  );
}

function Operator() {
  const [organizations, setOrganizations] = useState<
    {
      id: string;
      name: string;
      plan: string;
      status: string;
      networks: string[] | null;
      fiveHourTokens: number;
      monthTokens: number;
      models: string[];
    }[]
  >([]);
  const [showingKeys, setShowingKeys] = useState<string | null>(null);
  const { error, run } = useFormAction();
  const [models, setModels] = useState<
    {
      id: string;
      backend: string;
      enabled: boolean;
      fallbacks: string[];
      contextFallbacks: string[];
      active: number;
      queued: number;
      maxConcurrency: number | null;
      queueSize: number;
      quotaWeight: number;
      servers: ServerHealth[];
    }[]
  >([]);
  const [plans, setPlans] = useState<string[]>([]);
  const load = async () => {
    setOrganizations(await api("/operator/organizations"));
    setModels(await api("/operator/models"));
    setPlans(await api("/plans"));
  };
  useEffect(() => void load(), []);
  const update = async (id: string, change: { status?: string; plan?: string }) => {
    await api(`/operator/organizations/${id}`, change);
    await load();
  };
  const create = (event: Event) => {
    event.preventDefault();
    const form = event.target as HTMLFormElement;
    const fields = new FormData(form);
    void run(async () => {
      await api("/operator/organizations", { name: fields.get("name"), plan: fields.get("plan"), status: fields.get("status") });
      await load();
    }, form);
  };
  return (
    <>
      <section aria-labelledby="orgs-title">
        <h2 id="orgs-title">Organizations</h2>
        <form onSubmit={create} aria-label="New organization">
          <label>
            Organization name
            <input name="name" required maxLength={100} />
          </label>
          <label>
            Plan
            <select name="plan">
              {plans.map((plan) => (
                <option key={plan}>{plan}</option>
              ))}
            </select>
          </label>
          <label>
            Status
            <select name="status">
              <option value="active">active</option>
              <option value="waitlist">waitlist</option>
            </select>
          </label>
          <button class="primary" type="submit">
            Create organization
          </button>
          <ErrorText error={error} />
        </form>
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Status</th>
                <th scope="col">Plan</th>
                <th scope="col">5 h tokens</th>
                <th scope="col">Month tokens</th>
                <th scope="col">Networks</th>
                <th scope="col" />
              </tr>
            </thead>
            <tbody>
              {organizations.map((organization) => [
                <tr key={organization.id} data-testid={`org-${organization.name}`}>
                  <td>{organization.name}</td>
                  <td>{organization.status}</td>
                  <td>
                    <select
                      aria-label={`Plan of ${organization.name}`}
                      value={organization.plan}
                      onChange={(event) => update(organization.id, { plan: (event.target as HTMLSelectElement).value })}
                    >
                      {plans.map((plan) => (
                        <option key={plan}>{plan}</option>
                      ))}
                    </select>
                  </td>
                  <td>{organization.fiveHourTokens.toLocaleString()}</td>
                  <td>{organization.monthTokens.toLocaleString()}</td>
                  <td data-testid={`networks-${organization.name}`}>{organization.networks?.join(", ") ?? "anywhere"}</td>
                  <td>
                    {organization.status !== "active" && (
                      <button type="button" onClick={() => update(organization.id, { status: "active" })}>
                        Activate {organization.name}
                      </button>
                    )}
                    {organization.status === "active" && (
                      <button type="button" onClick={() => update(organization.id, { status: "suspended" })}>
                        Suspend {organization.name}
                      </button>
                    )}{" "}
                    <button
                      type="button"
                      aria-expanded={showingKeys === organization.id}
                      onClick={() => setShowingKeys(showingKeys === organization.id ? null : organization.id)}
                    >
                      Keys of {organization.name}
                    </button>
                  </td>
                </tr>,
                showingKeys === organization.id && (
                  <tr key={`${organization.id}-keys`}>
                    <td colSpan={7}>
                      <OrganizationNetworks organization={organization} onSaved={() => void load()} />
                      <AddMember organization={organization} />
                      <Keys organization={organization} operated />
                    </td>
                  </tr>
                ),
              ])}
            </tbody>
          </table>
        </div>
      </section>
      <section aria-labelledby="models-title">
        <h2 id="models-title">Models</h2>
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Model</th>
                <th scope="col">Backend</th>
                <th scope="col">State</th>
                <th scope="col">In flight</th>
                <th scope="col">Queued</th>
                <th scope="col">Quota weight</th>
                <th scope="col">Servers</th>
                <th scope="col">Fallbacks</th>
              </tr>
            </thead>
            <tbody>
              {models.map((model) => (
                <tr key={model.id}>
                  <td>{model.id}</td>
                  <td>{model.backend}</td>
                  <td>{model.enabled ? "enabled" : "disabled"}</td>
                  <td data-testid={`in-flight-${model.id}`}>
                    {model.active}
                    {model.maxConcurrency === null ? "" : ` of ${model.maxConcurrency}`}
                  </td>
                  <td>
                    {model.queued} of {model.queueSize}
                  </td>
                  <td data-testid={`quota-weight-${model.id}`}>{model.quotaWeight}</td>
                  <td>
                    {model.servers.length === 0
                      ? "built in"
                      : model.servers.map((server) => (
                          <div key={server.url} data-testid={`server-${model.id}`}>
                            {server.url}: {serverStateText(server)}
                          </div>
                        ))}
                  </td>
                  <td data-testid={`fallbacks-${model.id}`}>{fallbacksText(model)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      </section>
      <UsageReportSection operator />
    </>
  );
}

function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  const [page, setPage] = useState<"keys" | "usage" | "requests" | "operator" | "audit" | "tokens">("keys");
  useEffect(() => {
    api<Me>("/me").then(
      (current) => {
        setCsrfToken(current.csrfToken);
        setMe(current);
        if (current.role === "operator") setPage("operator");
      },
      // Not signed in (401), or the console cannot be reached: show the sign-in form.
      () => setMe(null),
    );
  }, []);
  const signedIn = (current: Me) => {
    setCsrfToken(current.csrfToken);
    setMe(current);
    setPage(current.role === "operator" ? "operator" : "keys");
  };
  const signOut = async () => {
    await api("/signout", {});
    setMe(null);
  };
  if (me === undefined) return <p>Loading…</p>;
  const tabs = me?.role === "operator" ? (["operator", "requests", "audit", "tokens"] as const) : (["keys", "usage", "requests", "tokens"] as const);
  const labels = {
    keys: "API keys",
    usage: "Usage",
    requests: "Requests",
    operator: "Organizations and models",
    audit: "Audit trail",
    tokens: "Console tokens",
  };
  return (
    <>
      <header>
        <h1>Sluice console</h1>
        {me && (
          <nav aria-label="Console">
            {tabs.map((tab) => (
              <button type="button" key={tab} aria-current={page === tab ? "page" : undefined} onClick={() => setPage(tab)}>
                {labels[tab]}
              </button>
            ))}
            <button type="button" onClick={signOut}>
              Sign out {me.email}
            </button>
          </nav>
        )}
      </header>
      {!me && <SignIn onSignedIn={signedIn} />}
      {me?.organization && (
        <p>
          Organization: {me.organization.name} ({me.organization.status}, plan {me.organization.plan})
        </p>
      )}
      {me?.organization && page === "keys" && <Keys organization={me.organization} />}
      {me && page === "usage" && <UsagePage />}
      {me && page === "operator" && <Operator />}
      {me && page === "requests" && <RequestsPage operator={me.role === "operator"} />}
      {me && page === "audit" && <AuditPage />}
      {me && page === "tokens" && <TokensPage operator={me.role === "operator"} />}
    </>
  );
}

render(<App />, document.getElementById("app") as HTMLElement);
