import { ClientGoneError } from "../../errors";
import type { FrameSink, StreamedAnswer } from "../../http/sse-response";
import type { CompletionEvent, EventStream, Usage } from "../../upstream/types";
import { noteFailure, noteFirstToken } from "../observability/request-record";
import { type OutputMonitor, refusalText } from "../safety/rules";
import type { StreamEncoder } from "./format";
import { asCallerError, completedEnding, finished, type Run, type RunSettler } from "./run";
import type { RequestContext } from "./service";

/**
 * A streamed answer relayed from the upstream's events: metered, checked against the red-line rules, written in the
 * answer's format, and settled exactly once on every path (completed, refused, failed, or the client gone).
 *
 * It writes into the response itself (`pump`) rather than being an async generator that the response pulls from: a
 * generator between the two would cost each upstream read a promise and an iterator result more, and each open
 * stream a generator, its scope and a suspended function (bench/HISTORY.md, "Fewer cells an open stream").
 */
export class StreamRelay implements StreamedAnswer {
  /** Whether `pump` or `stop` has begun: the answer is pumped once at most. */
  private started = false;
  /** The client left: nothing more is written. */
  private stopped = false;
  /** The permit was released and the ledger row written (or tried). */
  private settled = false;
  private closed = false;
  /** One array for every batch: the sink writes its pieces and empties it. */
  private readonly out: string[] = [];

  constructor(
    private readonly settler: RunSettler,
    private readonly run: Run,
    private readonly encoder: StreamEncoder,
    private readonly events: EventStream,
    /** The upstream's first read, taken before the response started (a failure then is still an HTTP error). */
    private readonly first: IteratorResult<CompletionEvent[]>,
    private readonly monitor: OutputMonitor | undefined,
  ) {}

  /**
   * Every await here may let `stop` run close(), which settles the request as the client's leaving: so each settle
   * checks and sets `settled` with no await in between, and nothing is written once `stopped`.
   */
  async pump(sink: FrameSink): Promise<void> {
    if (this.started) return;
    this.started = true;
    const { run, encoder, events, out } = this;
    let flushed: Promise<unknown> | undefined;
    try {
      encoder.start(out);
      if (out.length > 0) {
        flushed = sink.write(out);
        if (flushed) await flushed;
      }
      for (let result = this.first; !result.done && !this.stopped; result = await events.next()) {
        const batch = result.value;
        const breach = this.monitor?.observeBatch(batch);
        for (let index = 0; index < batch.length; index++) {
          const event = batch[index] as CompletionEvent;
          run.meter.observe(event);
          if (event.type === "delta" && run.firstTokenMs === undefined) {
            run.firstTokenMs = this.settler.clock() - run.startedAt;
            noteFirstToken(run.context.record);
          }
          if (breach?.index === index) {
            const { rule } = breach;
            // Stop the upstream at once; the piece that completed the match is never sent.
            await events.return(undefined);
            // Settled by close instead if the client left meanwhile.
            if (this.settled) return;
            this.settled = true;
            await this.settler.settle(run, { outcome: "content_filter", ruleId: rule.id });
            if (this.stopped) return;
            // After the batch's events before the breach, already in `out`.
            encoder.event({ type: "delta", content: refusalText(rule, "output") }, out);
            encoder.event({ type: "finish", reason: "content_filter" }, out);
            encoder.end(run.billed as Usage, out);
            flushed = sink.write(out);
            if (flushed) await flushed;
            return;
          }
          if (event.type !== "usage") encoder.event(event, out);
        }
        // Emptied once relayed: the settled promises of the layers below still hold this batch, often from the old
        // generation.
        batch.length = 0;
        if (out.length > 0) {
          flushed = sink.write(out);
          if (flushed) await flushed;
        }
      }
      if (this.stopped) return;
      this.settled = true;
      await this.settler.settle(run, completedEnding);
      if (this.stopped) return;
      encoder.end(run.billed as Usage, out);
      flushed = sink.write(out);
      if (flushed) await flushed;
    } catch (error) {
      // A client that left is settled by close (the upstream's abort is how it shows here).
      if (this.stopped) return;
      let failure = error;
      if (!this.settled) {
        this.settled = true;
        // A failure whose row the ledger refuses still ends the stream with an error event: the ledger's.
        failure = await this.settler.fail(run, error).then(
          () => error,
          (refused: unknown) => refused,
        );
      }
      if (!(error instanceof ClientGoneError) && !this.stopped) {
        const callerError = asCallerError(failure);
        noteFailure(run.context.record, callerError.code);
        // What a failure cut short of a batch is not sent.
        out.length = 0;
        encoder.fail(callerError, out);
        flushed = sink.write(out);
        if (flushed) await flushed;
      }
    } finally {
      await this.close();
    }
  }

  stop(): void {
    this.stopped = true;
    this.started = true;
    void this.close();
  }

  /** Settles a request its client left, lets the upstream go and logs the request: once, whoever comes first. */
  private async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const run = this.run;
    try {
      if (!this.settled) {
        this.settled = true;
        await this.settler.settle(run, { outcome: "client_disconnected" });
      }
    } catch {
      // The ledger could not take the row (the permit was released before): nobody is left to tell but the log.
      noteFailure(run.context.record, "internal_error");
    }
    try {
      await this.events.return(undefined);
    } catch {
      // The upstream's own clean-up failed after its body was cancelled: nothing is left to release or to tell.
    }
    finished(run.context);
  }
}

/** An answer whose frames are all known before it streams (a refusal of the input): one batch, then the request's log. */
export class FixedAnswer implements StreamedAnswer {
  private ended = false;

  constructor(
    private readonly batch: string[],
    private readonly context: RequestContext,
  ) {}

  async pump(sink: FrameSink): Promise<void> {
    if (this.ended) return;
    try {
      const flushed = sink.write(this.batch);
      if (flushed) await flushed;
    } finally {
      this.stop();
    }
  }

  stop(): void {
    if (this.ended) return;
    this.ended = true;
    finished(this.context);
  }
}
