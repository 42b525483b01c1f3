/**
 * The store's one container and the calls made on it: every call has a deadline, and its
 * failure is sorted into "the service answered with status S and error code C" (an AzureAnswer
 * that the caller decides on: 404, 409, 412 are answers, not faults) or "unknown" (a
 * StoreUnavailableError, safety rule 3). Messages never carry the account key.
 */
import { ClosedError, StoreUnavailableError, redactSecrets } from '../../core/index.js';
import type { ContainerClient } from './driver.js';
import { loadAzureBlob } from './driver.js';

/** A definite answer of the blob service that was not a success. */
export class AzureAnswer extends Error {
  readonly status: number;
  readonly code: string;
  constructor(what: string, status: number, code: string) {
    super(`${what}: the blob service answered ${status}${code ? ` ${code}` : ''}`);
    this.status = status;
    this.code = code;
  }
}

export function isAnswer(err: unknown, status: number, code?: string): err is AzureAnswer {
  return err instanceof AzureAnswer && err.status === status && (code === undefined || err.code === code);
}

export interface BlobsOptions {
  readonly container: string | ContainerClient;
  readonly endpoint?: string;
  readonly account?: string;
  readonly accountKey?: string;
  readonly connectionString?: string;
  readonly requestTimeoutMs: number;
}

export class Blobs {
  readonly container: ContainerClient;
  /** `azblob store (ENDPOINT/CONTAINER)`, for messages. */
  readonly label: string;
  private readonly secrets: string[];
  private readonly requestTimeoutMs: number;
  private closed = false;
  private ready: Promise<void> | null = null;
  /** The latest `Date` the service sent (its clock, whole seconds) and the local monotonic instant it came. */
  private serverDate: { ms: number; at: number } | null = null;

  constructor(options: BlobsOptions) {
    this.requestTimeoutMs = options.requestTimeoutMs;
    this.secrets = [options.accountKey, options.connectionString].filter((s): s is string => typeof s === 'string' && s !== '');
    if (typeof options.container !== 'string') {
      this.container = options.container;
    } else {
      const azure = loadAzureBlob();
      // One try per call: a retry is the caller's decision (rule 3), with the caller's deadline.
      const pipeline = { retryOptions: { maxTries: 1, tryTimeoutInMs: options.requestTimeoutMs } };
      const service = options.connectionString !== undefined
        ? azure.BlobServiceClient.fromConnectionString(options.connectionString, pipeline)
        : new azure.BlobServiceClient(options.endpoint!, new azure.StorageSharedKeyCredential(options.account!, options.accountKey!), pipeline);
      this.container = service.getContainerClient(options.container);
    }
    this.label = `azblob store (${this.container.url})`;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  close(): void {
    this.closed = true;
  }

  /**
   * The service's current time, ms since the epoch, as well as this client knows it: the latest
   * `Date` header plus the local monotonic time since (safety rule 1: a store instant moved by a
   * measured duration). The header is whole seconds, truncated, so this is up to 1 s early,
   * never late; it never goes back (see noteDate). 0 before the first answer.
   */
  serverNowMs(): number {
    if (this.serverDate === null) return 0;
    return this.serverDate.ms + Math.floor(performance.now() - this.serverDate.at);
  }

  /** Take a `Date` the service sent: only when it moves the estimate on, so the estimate never goes back. */
  private noteDate(date: Date | undefined): void {
    if (!(date instanceof Date) || Number.isNaN(date.getTime())) return;
    const ms = date.getTime();
    if (this.serverDate === null || ms > this.serverNowMs()) this.serverDate = { ms, at: performance.now() };
  }

  /** Run one call on the container (created on first use), with a deadline. */
  async call<T extends { date?: Date }>(what: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (this.closed) throw new ClosedError(this.label);
    await this.ensureContainer();
    return this.raw(what, fn);
  }

  private async raw<T extends { date?: Date }>(what: string, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const signal = AbortSignal.timeout(this.requestTimeoutMs + 100);
    try {
      const res = await fn(signal);
      this.noteDate(res.date);
      return res;
    } catch (err) {
      throw this.sort(what, err);
    }
  }

  /** An AzureAnswer for a definite answer, else StoreUnavailableError; the key never shown. */
  sort(what: string, err: unknown): Error {
    if (err instanceof AzureAnswer || err instanceof StoreUnavailableError) return err;
    const e = err as { statusCode?: unknown; code?: unknown; details?: { errorCode?: unknown }; message?: unknown; name?: unknown };
    if (typeof e.statusCode === 'number' && e.statusCode > 0) {
      const code = typeof e.details?.errorCode === 'string' ? e.details.errorCode : typeof e.code === 'string' ? e.code : '';
      if (e.statusCode === 403) {
        return new StoreUnavailableError(`${this.label}: ${what}: the blob service refused the credentials (403 ${code}): is the account key right?`);
      }
      return new AzureAnswer(`${this.label}: ${what}`, e.statusCode, code);
    }
    const reason = e.name === 'AbortError' || e.name === 'TimeoutError' ? `no answer within ${this.requestTimeoutMs} ms` : String(e.message ?? err);
    return new StoreUnavailableError(this.redact(`${this.label}: ${what}: ${reason}`), { cause: undefined });
  }

  /** An answer the caller did not expect, as the "maybe" error the Store interface promises. */
  unexpected(err: unknown): Error {
    if (err instanceof AzureAnswer) return new StoreUnavailableError(this.redact(err.message));
    return err instanceof Error ? err : new StoreUnavailableError(String(err));
  }

  redact(text: string): string {
    let out = redactSecrets(text);
    for (const s of this.secrets) {
      out = out.split(s).join('***');
      out = out.split(encodeURIComponent(s)).join('***');
    }
    return out;
  }

  private ensureContainer(): Promise<void> {
    this.ready ??= this.raw('create the container', (signal) => this.container.createIfNotExists({ abortSignal: signal })).then(
      () => undefined,
      (err: unknown) => {
        this.ready = null;
        throw this.unexpected(err);
      },
    );
    return this.ready;
  }
}

/** The body of a download, as UTF-8 text. */
export async function bodyText(res: { readableStreamBody?: NodeJS.ReadableStream }): Promise<string> {
  const stream = res.readableStreamBody;
  if (!stream) return '';
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : (chunk as Buffer));
  return Buffer.concat(chunks).toString('utf8');
}
