// A key's own caps inside the organization's plan, the models it may call and the networks it may be used from: the
// fields of the key form, a summary, and the form that changes them.
import { useState } from "preact/hooks";
import { api } from "./api";
import { ErrorText } from "./error-text";

export interface Caps {
  maxConcurrency: number | null;
  tokensPer5h: number | null;
  tokensPerMonth: number | null;
  requestsPerMinute: number | null;
  /** Null: every model of the plan. */
  models: string[] | null;
  /** Null: anywhere. */
  networks: string[] | null;
}

const fields = [
  ["max_concurrency", "Max concurrent requests", "maxConcurrency"],
  ["tokens_per_5h", "Tokens per 5 hours", "tokensPer5h"],
  ["tokens_per_month", "Tokens per month", "tokensPerMonth"],
  ["requests_per_minute", "Requests per minute", "requestsPerMinute"],
] as const;

/** The caps a form holds, as the console API takes them: empty fields are no cap, no models every model of the plan. */
export function capsBody(form: FormData): Record<string, number | string[] | null> {
  const body: Record<string, number | string[] | null> = {};
  for (const [name] of fields) {
    const value = String(form.get(name) ?? "").trim();
    body[name] = value === "" ? null : Number(value);
  }
  body.models = listOf(form, "models");
  body.networks = listOf(form, "networks");
  return body;
}

/** A field of entries separated by commas; null when empty. */
function listOf(form: FormData, name: string): string[] | null {
  const entries = String(form.get(name) ?? "")
    .split(",")
    .map((entry) => entry.trim())
    .filter(Boolean);
  return entries.length === 0 ? null : entries;
}

/**
 * The optional inputs, filled with the key's caps when it has some. Their first value is a default, not a bound
 * value: the page renders again when the key list arrives, and a bound value would wipe what was typed before it did.
 */
export function CapsFields({ caps, label, planModels }: { caps?: Caps; label?: string; planModels: string[] }) {
  return (
    <>
      {fields.map(([name, title, field]) => (
        <label key={name}>
          {title} (optional{label ? `, ${label}` : ""})
          <input name={name} type="number" min={1} step={1} inputMode="numeric" placeholder="no cap" defaultValue={String(caps?.[field] ?? "")} />
        </label>
      ))}
      <label>
        Models (optional, separated by commas: {planModels.join(", ") || "none in the plan"})
        <input name="models" placeholder="every model of the plan" defaultValue={caps?.models?.join(", ") ?? ""} />
      </label>
      <label>
        Networks (optional, addresses and CIDR ranges separated by commas, such as 203.0.113.7, 10.0.0.0/8)
        <input name="networks" placeholder="anywhere" defaultValue={caps?.networks?.join(", ") ?? ""} />
      </label>
    </>
  );
}

export function capsSummary(caps: Caps): string {
  const parts: string[] = [];
  if (caps.maxConcurrency !== null) parts.push(`${caps.maxConcurrency} at once`);
  if (caps.tokensPer5h !== null) parts.push(`${caps.tokensPer5h.toLocaleString()} / 5 h`);
  if (caps.tokensPerMonth !== null) parts.push(`${caps.tokensPerMonth.toLocaleString()} / month`);
  if (caps.requestsPerMinute !== null) parts.push(`${caps.requestsPerMinute.toLocaleString()} requests / min`);
  if (caps.models !== null) parts.push(`only ${caps.models.join(", ")}`);
  if (caps.networks !== null) parts.push(`from ${caps.networks.join(", ")}`);
  return parts.length > 0 ? parts.join(" · ") : "plan only";
}

/** The inline form that changes one key's caps. */
export function EditCaps({ keyId, name, caps, planModels, onDone }: { keyId: string; name: string; caps: Caps; planModels: string[]; onDone: () => void }) {
  const [error, setError] = useState("");
  const submit = async (event: Event) => {
    event.preventDefault();
    setError("");
    try {
      await api(`/keys/${keyId}/limits`, capsBody(new FormData(event.target as HTMLFormElement)));
      onDone();
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  return (
    <form onSubmit={submit} aria-label={`Caps of ${name}`} class="filters">
      <CapsFields caps={caps} planModels={planModels} />
      <div class="actions">
        <button type="submit" class="primary">
          Save caps
        </button>
        <button type="button" onClick={onDone}>
          Cancel
        </button>
      </div>
      <ErrorText error={error} />
    </form>
  );
}
