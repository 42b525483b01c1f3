/**
 * The logger tenure writes to when given one: any pino-compatible object (pino, bunyan, a
 * console adaptor) with `info/warn/error/debug(fields, message)`. tenure writes one structured
 * line per transition; no I/O happens here, the user's logger does it.
 */
import { redactSecrets } from './redact.js';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export interface Logger {
  debug(fields: object, message?: string): void;
  info(fields: object, message?: string): void;
  warn(fields: object, message?: string): void;
  error(fields: object, message?: string): void;
}

/** Fields of one line: strings, numbers, booleans or null; an Error is given as its redacted message. */
export type LogFields = Readonly<Record<string, string | number | boolean | null | undefined>>;

/**
 * Write one line. A logger that throws is ignored (logging must never change what tenure does),
 * and every string field is passed through redactSecrets, so a store URL quoted in an error
 * message never carries its password into the log.
 */
export function writeLog(logger: Logger | undefined, level: LogLevel, fields: LogFields, message: string): void {
  if (!logger) return;
  const clean: Record<string, string | number | boolean | null> = {};
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    clean[k] = typeof v === 'string' ? redactSecrets(v) : v;
  }
  try {
    logger[level](clean, redactSecrets(message));
  } catch {
    // the user's logger failing is not the elector's failure
  }
}

/** True when `value` has the four methods tenure calls. */
export function isLogger(value: unknown): value is Logger {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return ['debug', 'info', 'warn', 'error'].every((m) => typeof v[m] === 'function');
}
