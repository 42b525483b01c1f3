/**
 * The simulation trace: every event with its virtual time and node, in the order it happened.
 * Two runs of one seed must produce the same trace, line for line.
 */

export interface TraceEvent {
  /** Virtual time, ms. */
  readonly t: number;
  readonly node: string;
  readonly text: string;
}

export class Trace {
  readonly events: TraceEvent[] = [];

  constructor(private readonly clock: { now(): number }) {}

  add(node: string, text: string): void {
    this.events.push({ t: this.clock.now(), node, text });
  }

  /**
   * One event per line (time, node, event): the last `count` up to and including virtual time
   * `untilMs`, then `after` more past it (all events when nothing is given).
   */
  format(count?: number, untilMs = Infinity, after = 0): string {
    let cut = this.events.length;
    while (cut > 0 && this.events[cut - 1]!.t > untilMs) cut--;
    const from = count === undefined ? 0 : Math.max(0, cut - count);
    const end = Math.min(this.events.length, cut + after);
    const lines: string[] = [];
    if (from > 0) lines.push(`  … ${from} earlier events`);
    for (let i = from; i < end; i++) {
      if (i === cut) lines.push(`  ---- after t=${formatTime(untilMs)}:`);
      lines.push(formatEvent(this.events[i]!));
    }
    if (end < this.events.length) lines.push(`  … ${this.events.length - end} later events`);
    return lines.join('\n');
  }

  /** A 32-bit FNV-1a digest of the whole trace, for comparing runs. */
  digest(): string {
    let h = 0x811c9dc5;
    for (const e of this.events) {
      const line = formatEvent(e);
      for (let i = 0; i < line.length; i++) {
        h ^= line.charCodeAt(i);
        h = Math.imul(h, 0x01000193) >>> 0;
      }
      h ^= 10;
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h.toString(16).padStart(8, '0');
  }
}

export function formatEvent(e: TraceEvent): string {
  return `${formatTime(e.t).padStart(11)}  ${e.node.padEnd(6)} ${e.text}`;
}

/** Virtual ms as `12345.000`-style text: whole ms, or three decimals when a skewed clock made it fractional. */
export function formatTime(ms: number): string {
  return Number.isInteger(ms) ? `${ms}` : ms.toFixed(3);
}
