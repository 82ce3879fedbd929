import { SluiceError } from "../errors";

/**
 * What a request is refused with when its ledger row could not be committed: its answer is withheld, never given
 * unrecorded, with a 503 to retry shortly, on SQLite as on PostgreSQL. The database's own error is its cause; each
 * ledger also tells the server of every failed commit (`LedgerRefusalListener`), which logs it once.
 */
export class RowNotRecorded extends SluiceError {
  constructor(why: string, cause: unknown) {
    super("server_overloaded", `The gateway could not record this request (${why}), so it withholds the answer. Retry shortly.`, {
      retryAfterSeconds: 2,
      cause,
    });
  }
}

/** What a request is refused with before its upstream is called while the ledger's database does not answer. */
export class LedgerUnavailable extends SluiceError {
  constructor() {
    super("server_overloaded", "The gateway cannot record usage right now (its database does not answer), so it takes no requests. Retry shortly.", {
      retryAfterSeconds: 2,
    });
  }
}
