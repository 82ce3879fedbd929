import { ClientGoneError, SluiceError, UpstreamError } from "../../errors";
import { ServerShutdown } from "../../upstream/errors";
import type { LedgerRow } from "../../ledger/ledger";
import type { Usage } from "../../upstream/types";
import type { ResponseIdentity, AnswerFormat } from "./format";
import type { ModelEntry } from "../models/registry";
import type { UsageMeter } from "./meter";
import type { ChatRequest } from "./model";
import type { Permit } from "./permit";
import type { PreparedRequest } from "./prepare";
import type { RequestContext } from "./service";

export type Outcome = LedgerRow["outcome"];

/** How a request ended, for its ledger row. */
export interface Ending {
  outcome: Outcome;
  errorCode?: string | null;
  ruleId?: string | null;
  /** An upstream that failed before producing anything bills nothing. */
  billNothing?: boolean;
}

/** How most requests end: one object for all of them, since nothing changes an ending. */
export const completedEnding: Readonly<Ending> = Object.freeze({ outcome: "completed" });

/** Everything needed to finish one admitted request on any path. */
export interface Run {
  /**
   * The request as the caller sent it: a fallback model prepares it again for itself. Let go once a stream has begun
   * (no fallback can take it then), so that an open stream does not keep it.
   */
  request: ChatRequest | undefined;
  /** Changed when a fallback takes the request over (see ChatService's fallBack). */
  prepared: PreparedRequest;
  context: RequestContext;
  format: AnswerFormat;
  identity: ResponseIdentity;
  promptEstimate: number;
  permit: Permit;
  meter: UsageMeter;
  startedAt: number;
  /** Set at the first streamed token: milliseconds since `startedAt`. */
  firstTokenMs?: number;
  /** The models the request was sent to or refused by, so that no fallback is tried twice. */
  tried?: ModelEntry[];
  /** What the request is billed: set when it is settled. */
  billed?: Usage;
}

/** How a run is settled: what the relay of a stream needs of the chat service. */
export interface RunSettler {
  /** Releases the permit with the real usage and writes the ledger row; resolves once it is committed. */
  settle(run: Run, ending: Ending): Promise<void>;
  /** Settles a run that failed (see ChatService). */
  fail(run: Run, error: unknown): Promise<void>;
  clock(): number;
}

/** How a request that failed ended, for its ledger row and log line. */
export function outcomeOf(error: unknown): { outcome: Outcome; errorCode: string | null } {
  if (error instanceof ClientGoneError) return { outcome: "client_disconnected", errorCode: null };
  if (error instanceof SluiceError && error.cause instanceof ServerShutdown) return { outcome: "shutdown", errorCode: error.code };
  if (error instanceof SluiceError) return { outcome: "upstream_error", errorCode: error.code };
  return { outcome: "upstream_error", errorCode: "upstream_error" };
}

/** Internal failures are never shown raw: the caller gets a 502 naming the request. */
export function asCallerError(error: unknown): SluiceError {
  if (error instanceof SluiceError) return error;
  return new UpstreamError("The model's answer could not be completed.", { isRetryable: true, cause: error });
}

/** Logs and counts a streamed request once it has ended (a whole answer is finished by the HTTP layer). */
export function finished(context: RequestContext): void {
  if (context.finish && context.record) context.finish(context.record);
}
