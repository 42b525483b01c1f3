/**
 * Command specs and argument parsing for the tenure command: node:util parseArgs (strict) plus
 * the rules parseArgs does not know (a required `-- CMD`, required options, positional counts),
 * and help text generated from the same spec so the two never disagree.
 */
import { parseArgs } from 'node:util';
import { InvalidArgumentError, parseDuration } from '../core/index.js';

/** Bad usage: printed as one line, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export interface OptionSpec {
  readonly type: 'string' | 'boolean';
  readonly short?: string;
  /** Placeholder shown in help, e.g. `G` in `--group G`. */
  readonly value?: string;
  readonly help: string;
}

export interface CommandSpec {
  readonly name: string;
  /** One-line usage, without the leading `tenure `. */
  readonly usage: string;
  readonly summary: string;
  /** Paragraphs shown after the usage line. */
  readonly description?: readonly string[];
  readonly options: Readonly<Record<string, OptionSpec>>;
  /** Names of options that must be given. */
  readonly required?: readonly string[];
  /** Positional arguments allowed before `--` (or anywhere, for commands without a CMD). */
  readonly positionals?: { readonly min: number; readonly max: number; readonly label: string };
  /** The command takes `-- CMD [ARGS…]`. */
  readonly takesCommand?: boolean;
  readonly examples: readonly string[];
  /** Not listed in the general help (internal commands). */
  readonly hidden?: boolean;
}

/** Options every command accepts. */
const COMMON: Readonly<Record<string, OptionSpec>> = {
  help: { type: 'boolean', short: 'h', help: 'show this help' },
  debug: { type: 'boolean', help: 'print stack traces on errors' },
};

export type OptionValues = Readonly<Record<string, string | boolean | undefined>>;

export interface ParsedArgs {
  readonly help: boolean;
  readonly values: OptionValues;
  readonly positionals: readonly string[];
  /** The words after `--` for commands that take a CMD. */
  readonly command: readonly string[];
}

/** True if `--debug` appears among the arguments before any `--`. */
export function wantsDebug(argv: readonly string[]): boolean {
  const end = argv.indexOf('--');
  return (end < 0 ? argv : argv.slice(0, end)).includes('--debug');
}

/**
 * Parse `argv` (the words after the command name) against `spec`. Throws UsageError with one
 * readable line on unknown options, missing values, a missing `--`, or wrong positional counts.
 */
export function parseCommand(spec: CommandSpec, argv: readonly string[]): ParsedArgs {
  let head = [...argv];
  let command: string[] = [];
  if (spec.takesCommand) {
    const at = argv.indexOf('--');
    if (at >= 0) {
      head = argv.slice(0, at);
      command = argv.slice(at + 1);
    }
  }
  if (head.includes('--help') || head.includes('-h')) return { help: true, values: {}, positionals: [], command: [] };
  const options = { ...COMMON, ...spec.options };
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: head,
      options: Object.fromEntries(
        Object.entries(options).map(([name, o]) => [name, o.short ? { type: o.type, short: o.short } : { type: o.type }]),
      ),
      strict: true,
      allowPositionals: true,
    }) as { values: Record<string, string | boolean | undefined>; positionals: string[] };
  } catch (err) {
    throw new UsageError(`${describeParseError(err, spec)} (see tenure ${spec.name} --help)`);
  }
  const positionals = parsed.positionals;
  if (spec.takesCommand) {
    const max = spec.positionals?.max ?? 0;
    if (command.length === 0 && !argv.includes('--')) {
      const extra = positionals.length > max ? ` before '${positionals[max]}'` : '';
      throw new UsageError(`missing '--'${extra}: the command to run goes after it, as in tenure ${spec.usage}`);
    }
    if (command.length === 0) throw new UsageError(`missing the command after '--', as in tenure ${spec.usage}`);
    if (positionals.length > max) {
      throw new UsageError(`unexpected argument '${positionals[max]}' before '--' (see tenure ${spec.name} --help)`);
    }
  }
  const pos = spec.positionals ?? { min: 0, max: 0, label: '' };
  if (positionals.length < pos.min) throw new UsageError(`missing ${pos.label}, as in tenure ${spec.usage}`);
  if (!spec.takesCommand && positionals.length > pos.max) {
    throw new UsageError(`unexpected argument '${positionals[pos.max]}' (see tenure ${spec.name} --help)`);
  }
  for (const name of spec.required ?? []) {
    const value = parsed.values[name];
    if (value === undefined || value === '') {
      const o = options[name];
      throw new UsageError(`missing --${name}${o?.value ? ` ${o.value}` : ''}, as in tenure ${spec.usage}`);
    }
  }
  return { help: false, values: parsed.values, positionals, command };
}

function describeParseError(err: unknown, spec: CommandSpec): string {
  const e = err as { code?: string; message?: string };
  const quoted = /'([^']*)'/.exec(e.message ?? '')?.[1];
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option '${quoted ?? '?'}' for tenure ${spec.name}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const name = quoted?.split(' ')[0] ?? 'an option';
      if (/ambiguous/.test(e.message ?? '')) return `option ${name} needs a value (write ${name}=VALUE for a value that starts with '-')`;
      return /argument missing/.test(e.message ?? '') ? `option ${name} needs a value` : `option ${name} takes no value`;
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument '${quoted ?? '?'}'`;
    default:
      return e.message ?? String(err);
  }
}

/** The string value of option `name`, or undefined. */
export function stringOption(values: OptionValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

export function flagOption(values: OptionValues, name: string): boolean {
  return values[name] === true;
}

/**
 * A duration option (`1500`, `1500ms`, `10s`, `2m`) in ms, checked against [minMs, maxMs].
 * Errors name the flag (`--ttl: ...`), and become exit code 2.
 */
export function durationOption(values: OptionValues, name: string, fallbackMs: number, minMs: number, maxMs: number): number {
  const text = stringOption(values, name);
  if (text === undefined) return fallbackMs;
  const ms = parseDuration(`--${name}`, text);
  // Said in the user's own terms: `--ttl 25h` is out of range as 25h, not as 90000000 (ms).
  if (ms < minMs || ms > maxMs) throw new InvalidArgumentError(`--${name}`, `must be between ${spanOf(minMs)} and ${spanOf(maxMs)}, got ${/^\d+$/.test(text.trim()) ? `${text.trim()}ms` : text.trim()}`);
  return ms;
}

/** A duration bound as the options take it: 10ms, 1500ms, 10s, 2m, 24h. */
function spanOf(ms: number): string {
  for (const [unit, size] of [['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) if (ms >= size && ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

/** A whole-number option in [min, max]. */
export function integerOption(values: OptionValues, name: string, fallback: number, min: number, max: number): number {
  const text = stringOption(values, name);
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text.trim())) throw new InvalidArgumentError(`--${name}`, `expected a whole number in [${min}, ${max}], got '${text}'`);
  const n = Number(text);
  if (n < min || n > max) throw new InvalidArgumentError(`--${name}`, `must be in [${min}, ${max}], got ${n}`);
  return n;
}

/** The help text of one command. */
export function renderHelp(spec: CommandSpec): string {
  const lines = [`Usage: tenure ${spec.usage}`, '', spec.summary];
  for (const p of spec.description ?? []) lines.push('', p);
  const options = { ...spec.options, ...COMMON };
  const rows = Object.entries(options).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.value ? ` ${o.value}` : ''}`;
    return [flag, o.help] as const;
  });
  const width = Math.max(...rows.map(([f]) => f.length));
  lines.push('', 'Options:');
  for (const [flag, help] of rows) lines.push(`  ${flag.padEnd(width)}  ${help}`);
  lines.push('', spec.examples.length > 1 ? 'Examples:' : 'Example:');
  for (const ex of spec.examples) lines.push(`  ${ex}`);
  return `${lines.join('\n')}\n`;
}
