/**
 * Chance is injected: a Random gives floats in [0, 1). The seeded one (mulberry32-style 32-bit
 * generator written here) makes simulation runs reproducible from their seed.
 */
import { randomBytes } from 'node:crypto';

export interface Random {
  /** A float in [0, 1). */
  next(): number;
}

export const systemRandom: Random = {
  next: () => randomBytes(4).readUInt32BE(0) / 0x1_0000_0000,
};

export class SeededRandom implements Random {
  private state: number;
  constructor(seed: number) {
    this.state = (seed ^ 0x9e3779b9) >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  }
}

/** An integer in [lo, hi). */
export function randomInt(random: Random, lo: number, hi: number): number {
  return lo + Math.floor(random.next() * (hi - lo));
}

/** A short lowercase base-36 string, for incarnation suffixes. */
export function randomSuffix(random: Random, length = 8): string {
  let out = '';
  for (let i = 0; i < length; i++) out += Math.floor(random.next() * 36).toString(36);
  return out;
}
